//! How a run is contained and killed, decided when it is planned: whether
//! it gets a per-command cgroup (and which limits that cgroup enforces),
//! which rlimits stand in where it cannot, and how the tree is killed. The
//! plan's spawn spec says all of it ([`Plan::spec`]'s `cgroup` and
//! `rlimits`), so `--explain` shows what will run; a run that cannot make
//! the cgroup its plan counted on fails ([`SandboxError::Cgroup`]) instead
//! of running with less.
//!
//! [`Plan::spec`]: super::Plan::spec

use portcullis_helper::spec::{Mode, Network, Rlimit, RlimitKind};
use serde::Serialize;

use super::cgroup::{CgroupHost, CgroupPlan, LimitMechanism, NoCgroup};
use super::{AppliedLimits, ExecRequest, KillMechanism, SandboxError};

/// The plan's containment: the cgroup, the kill mechanism and which
/// mechanism enforces each limit (the result's `enforcement` repeats these,
/// since a run that cannot keep them fails).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Containment {
    /// The per-command cgroup the run makes, if any.
    pub cgroup: Option<CgroupPlan>,
    /// Why the run gets no cgroup, when it gets none.
    pub cgroup_fallback: Option<String>,
    /// How the tree is killed.
    pub kill_mechanism: KillMechanism,
    /// Which mechanism enforces each requested limit.
    pub limits: AppliedLimits,
}

/// The containment of `req` on this host, and the rlimits its spec sets
/// (`RLIMIT_CORE 0` always; `RLIMIT_NPROC`/`RLIMIT_AS` where the cgroup
/// cannot enforce `--pids`/`--memory`). `uid` is the caller's. (The
/// sandbox plans with [`decide_with`].)
#[cfg(test)]
pub(crate) fn decide(
    host: &Result<CgroupHost, NoCgroup>,
    req: &ExecRequest,
    uid: u32,
) -> Result<(Containment, Vec<Rlimit>), SandboxError> {
    decide_with(host, req, uid, false)
}

/// [`decide`], for a run that joins the workspace's shared network
/// (`shared_network`, see `sandbox::network`) or not.
pub(crate) fn decide_with(
    host: &Result<CgroupHost, NoCgroup>,
    req: &ExecRequest,
    uid: u32,
    shared_network: bool,
) -> Result<(Containment, Vec<Rlimit>), SandboxError> {
    // `--pids N` counts the command's processes: the sandbox's init (pid 1,
    // born in the leaf) is added on top.
    let pids_max = req.limits.pids.map(|n| n.saturating_add(1));
    let cgroup = host.as_ref().map_err(Clone::clone).and_then(|h| h.plan(pids_max, req.limits.memory));
    let (cgroup, cgroup_fallback) = match cgroup {
        Ok(c) => (Some(c), None),
        Err(e) => (None, Some(e.to_string())),
    };
    let mut rlimits = Vec::new();
    let mut limits = AppliedLimits::default();
    if let Some(n) = req.limits.pids {
        limits.pids = Some(if cgroup.as_ref().is_some_and(|c| c.pids_max.is_some()) {
            LimitMechanism::Cgroup
        } else if req.degraded.is_some() {
            // Without a user namespace RLIMIT_NPROC counts every process of
            // the uid on the host, not this sandbox's.
            return Err(SandboxError::unsupported(
                "--pids without the cgroup pids controller",
                "--pids in landlock-only mode needs the cgroup pids controller (RLIMIT_NPROC would count the whole uid): \
                 drop --pids (or the policy's pids limit), or use the full sandbox where this host allows it \
                 (portcullis doctor says)",
            ));
        } else {
            // Counted per uid of the sandbox's user namespace: pid 1 runs as
            // the command's uid, and so does an unprivileged caller's outer
            // helper once it has joined that namespace to make the network
            // namespace. Neither is the command's. A run joining the
            // workspace's network leaves its outer helper in the
            // workspace's user namespace, counted there instead.
            let own = 1 + u64::from(uid != 0 && req.network == Network::None && !shared_network);
            rlimits.push(Rlimit { resource: RlimitKind::Nproc, value: n.saturating_add(own) });
            LimitMechanism::RlimitNproc
        });
    }
    if let Some(n) = req.limits.memory {
        limits.memory = Some(if cgroup.as_ref().is_some_and(|c| c.memory_max.is_some()) {
            LimitMechanism::Cgroup
        } else {
            rlimits.push(Rlimit { resource: RlimitKind::As, value: n });
            LimitMechanism::RlimitAs
        });
    }
    rlimits.push(Rlimit { resource: RlimitKind::Core, value: 0 });
    let kill_mechanism = match (cgroup.is_some(), req.degraded) {
        (true, _) => KillMechanism::CgroupKill,
        (false, Some(Mode::LandlockOnly)) => KillMechanism::Subreaper,
        (false, _) => KillMechanism::PidNamespace,
    };
    Ok((Containment { cgroup, cgroup_fallback, kill_mechanism, limits }, rlimits))
}
