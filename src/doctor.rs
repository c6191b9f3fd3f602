//! `portcullis doctor`: what this host offers each layer, and which modes work.

use std::fs;

use serde::Serialize;

use crate::sandbox::{ExecRequest, ExecResult, KillMechanism, Mode, RunOptions, Sandbox};
use crate::SandboxError;

/// One layer's state.
#[derive(Debug, Clone, Serialize)]
pub struct Layer {
    /// Whether the layer is usable.
    pub ok: bool,
    /// What was found, and how to enable it when missing.
    pub detail: String,
}

/// The cgroup layer.
#[derive(Debug, Clone, Serialize)]
pub struct CgroupReport {
    /// The cgroup2 mount point, if any.
    pub mount: Option<String>,
    /// Where per-command leaves would be created.
    pub parent: Option<String>,
    /// Whether a leaf can be created there (delegation).
    pub writable: bool,
    /// Whether leaves have `cgroup.kill`.
    pub cgroup_kill: bool,
    /// Controllers enabled for leaves.
    pub controllers: Vec<String>,
    /// Why per-command cgroups are not used, when they are not.
    pub fallback: Option<String>,
}

impl CgroupReport {
    fn unavailable(why: String) -> CgroupReport {
        CgroupReport {
            mount: None,
            parent: None,
            writable: false,
            cgroup_kill: false,
            controllers: vec![],
            fallback: Some(why),
        }
    }
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `uname -r`.
    pub kernel: String,
    /// The uid portcullis runs as.
    pub uid: u32,
    /// User namespaces (and the sysctls that block them).
    pub user_namespaces: Layer,
    /// Landlock.
    pub landlock: Layer,
    /// The Landlock ABI (0: none).
    pub landlock_abi: u32,
    /// seccomp filters.
    pub seccomp: Layer,
    /// Whether the kernel accepts x32 syscalls (the filter refuses them).
    pub x32_syscalls: bool,
    /// cgroup v2.
    pub cgroup: CgroupReport,
    /// A real sandboxed `/bin/true`.
    pub sandbox_probe: Layer,
    /// How the process tree is killed on this host.
    pub kill_mechanism: KillMechanism,
    /// How `--pids` and `--memory` are enforced on this host.
    pub limits: String,
    /// Which modes work.
    pub modes: Vec<Layer>,
    /// What the landlock-only mode leaves open because the kernel offers no
    /// control for it ([`LANDLOCK_ONLY_OPEN`]); empty when the mode is not
    /// available here.
    pub landlock_only_open: Vec<String>,
    /// The mode that works here: `full`, `landlock-only` (opt-in with
    /// `--degraded landlock-only`), or none.
    pub works_here: Option<Mode>,
}

/// Run `/bin/true` in a fresh, empty workspace of its own (removed afterwards).
async fn probe(sb: &Sandbox, mode: Option<Mode>) -> Result<ExecResult, SandboxError> {
    let tag = if mode.is_some() { "degraded" } else { "full" };
    let ws = std::env::temp_dir().join(format!("portcullis-doctor-{}-{tag}", std::process::id()));
    let made = fs::create_dir(&ws);
    let mut req = ExecRequest::new(&ws, ["/bin/true"]);
    req.degraded = mode;
    let outcome = match made {
        Ok(()) => sb.run(&req, RunOptions::default()).await,
        Err(source) => Err(SandboxError::Path { what: "doctor workspace", path: ws.clone(), source }),
    };
    let _ = fs::remove_dir(&ws);
    outcome
}

fn probe_layer(outcome: &Result<ExecResult, SandboxError>) -> Layer {
    match outcome {
        Ok(r) if r.outcome.success() => Layer {
            ok: true,
            detail: format!(
                "ran /bin/true in {:.1} ms: pid 1 made with {}, landlock ABI {}, seccomp {}, kill {:?}",
                r.duration.as_secs_f64() * 1e3,
                match r.enforcement.clone {
                    crate::sandbox::CloneCall::Clone3 => "clone3",
                    crate::sandbox::CloneCall::Clone =>
                        "clone (clone3 answers ENOSYS here; cgroup joined by cgroup.procs)",
                },
                r.enforcement.landlock_abi,
                r.enforcement.seccomp,
                r.enforcement.kill_mechanism
            ),
        },
        Ok(r) => Layer { ok: false, detail: format!("/bin/true {}", r.outcome) },
        Err(e) => Layer { ok: false, detail: crate::error_chain(e) },
    }
}

/// What the landlock-only mode cannot close: Landlock (up to ABI 7) has no
/// right for these, and seccomp sees a path only as a pointer. docs/sandbox.md
/// ("What is weaker than in the full sandbox") says the same.
pub const LANDLOCK_ONLY_OPEN: &[&str] = &[
    "outside the plan, stat/statx, access, statfs, readlink and chdir still work: a command learns which paths exist, their type, size, owner, mode and times, and where a symbolic link points, though it can neither read a file nor list a directory",
    "the host's /proc is readable: other processes' command lines and status, the host's connections and mount table",
    "no second barrier: Landlock alone stands between the command and your files",
];

/// Added to [`LANDLOCK_ONLY_OPEN`] when the caller is root: its command
/// stays uid 0 (no capabilities), which owns root's files.
pub const LANDLOCK_ONLY_OPEN_ROOT: &[&str] = &[
    "a root caller's command is uid 0 (with no capabilities): under the system roots it reads root-owned files of mode 600, such as /etc/shadow, /etc/ssh/*_key and /etc/ssl/private; use the full sandbox, or an unprivileged user, for anything that must not see them",
    "--deny is refused in this mode (it needs the mount namespace), so nothing under the readable roots can be hidden",
];

fn read_num(p: &str) -> Option<i64> {
    fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// Probe the host. Runs one real sandbox.
pub async fn run() -> Report {
    let kernel = nix::sys::utsname::uname().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_default();
    let uid = nix::unistd::getuid().as_raw();
    let max_ns = read_num("/proc/sys/user/max_user_namespaces");
    let debian = read_num("/proc/sys/kernel/unprivileged_userns_clone");
    let apparmor = read_num("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
    let mut blockers = Vec::new();
    if max_ns == Some(0) {
        blockers.push("user.max_user_namespaces=0 (set it above 0)".to_string());
    }
    if debian == Some(0) && uid != 0 {
        blockers.push("kernel.unprivileged_userns_clone=0 (set it to 1)".to_string());
    }
    if apparmor == Some(1) && uid != 0 {
        blockers.push("kernel.apparmor_restrict_unprivileged_userns=1 (set it to 0, or give portcullis-helper an AppArmor profile with `userns`)".to_string());
    }
    let userns_detail = format!(
        "max_user_namespaces={}, unprivileged_userns_clone={}, apparmor_restrict_unprivileged_userns={}{}",
        max_ns.map_or("absent".into(), |v| v.to_string()),
        debian.map_or("absent".into(), |v| v.to_string()),
        apparmor.map_or("absent".into(), |v| v.to_string()),
        if blockers.is_empty() { String::new() } else { format!("; blocked by: {}", blockers.join(", ")) }
    );

    let abi = crate::sys::landlock_abi();
    let landlock = Layer {
        ok: abi > 0,
        detail: if abi > 0 {
            format!(
                "ABI {abi}{}",
                if abi >= 6 {
                    " (signal and abstract-socket scoping)"
                } else if abi >= 4 {
                    " (TCP rules)"
                } else {
                    ""
                }
            )
        } else {
            "not enforced: needs Linux 5.13+ with landlock in the lsm= boot parameter (CONFIG_LSM)".into()
        },
    };
    let actions = fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail").unwrap_or_default();
    let seccomp = Layer {
        ok: actions.contains("errno") && actions.contains("kill_process"),
        detail: if actions.is_empty() {
            "no /proc/sys/kernel/seccomp: needs CONFIG_SECCOMP_FILTER".into()
        } else {
            format!("actions: {}", actions.trim())
        },
    };

    let sandbox = Sandbox::new();
    let cgroup = match sandbox.as_ref().map(|s| s.cgroup_host()) {
        Ok(Ok(h)) => {
            let (writable, kill, fallback) = match h.plan(None, None) {
                Err(e) => (!matches!(e, crate::sandbox::NoCgroup::NotWritable(_)), false, Some(e.to_string())),
                Ok(p) => match h.create(&p) {
                    Ok(_) => (true, true, None),
                    Err(e) => (e.path.ends_with("cgroup.kill"), false, Some(e.to_string())),
                },
            };
            CgroupReport {
                mount: Some(h.mount.display().to_string()),
                parent: Some(h.parent.display().to_string()),
                writable,
                cgroup_kill: kill,
                controllers: h.controllers.clone(),
                fallback,
            }
        }
        Ok(Err(e)) => CgroupReport::unavailable(e.to_string()),
        Err(e) => CgroupReport::unavailable(e.to_string()),
    };

    let full_run = match &sandbox {
        Ok(sb) => Some(probe(sb, None).await),
        Err(_) => None,
    };
    let (sandbox_probe, kill_mechanism) = match (&sandbox, &full_run) {
        (Ok(_), Some(outcome)) => (
            probe_layer(outcome),
            outcome.as_ref().map_or(KillMechanism::PidNamespace, |r| r.enforcement.kill_mechanism),
        ),
        (Err(e), _) => (Layer { ok: false, detail: e.to_string() }, KillMechanism::PidNamespace),
        (Ok(_), None) => (Layer { ok: false, detail: "no probe ran".into() }, KillMechanism::PidNamespace),
    };
    let limits = if cgroup.controllers.iter().any(|c| c == "pids") && cgroup.writable {
        "pids.max / memory.max in the per-command cgroup".to_string()
    } else {
        "RLIMIT_NPROC (counted per sandbox user namespace) and RLIMIT_AS (per process): the pids/memory controllers are not enabled for cgroup v2 here".to_string()
    };
    // Creating one is the test: a refused clone (a container's seccomp
    // profile, a sysctl) means no, whatever the sysctls say.
    let user_namespaces = match &full_run {
        Some(Err(SandboxError::NamespacesBlocked(b))) => Layer { ok: false, detail: b.to_string() },
        Some(Ok(_)) => Layer { ok: true, detail: userns_detail },
        _ => Layer { ok: blockers.is_empty(), detail: userns_detail },
    };
    let full_ok = sandbox_probe.ok && landlock.ok && seccomp.ok;
    let modes = vec![Layer {
        ok: full_ok,
        detail: if full_ok {
            "full sandbox (namespaces, read-only mounts, Landlock, seccomp): works".into()
        } else {
            format!("full sandbox: does not work here: {}", sandbox_probe.detail)
        },
    }];
    // The landlock-only mode is probed for real too: that it can run here is
    // a fact about this host (a container's filter, a missing Landlock ABI),
    // not something to work out.
    let ll_run = match &sandbox {
        Ok(sb) if abi >= 6 && seccomp.ok => Some(probe(sb, Some(Mode::LandlockOnly)).await),
        _ => None,
    };
    let ll_layer = ll_run.as_ref().map(probe_layer);
    let ll_ok = ll_layer.as_ref().is_some_and(|l| l.ok);
    let mut modes = modes;
    modes.push(Layer {
        ok: ll_ok,
        detail: match &ll_layer {
            Some(l) if l.ok => format!(
                "degraded mode landlock-only (opt-in, --degraded landlock-only): works here — no namespaces; \
                 Landlock limits reads and writes{}; {}",
                if uid == 0 { "; the command runs as uid 0 with no capabilities and locked securebits" } else { "" },
                l.detail
            ),
            Some(l) => format!("degraded mode landlock-only: does not work here: {}", l.detail),
            None if abi < 6 => {
                format!("degraded mode landlock-only: needs Landlock ABI 6 (Linux 6.12); ABI here: {abi}")
            }
            None => "degraded mode landlock-only: needs seccomp filters, which this kernel lacks".to_string(),
        },
    });
    // The kill of the mode that works here (the full sandbox's, else the
    // landlock-only mode's).
    let kill_mechanism = match (&full_run, &ll_run) {
        (Some(Ok(_)), _) | (_, None) => kill_mechanism,
        (_, Some(Ok(r))) => r.enforcement.kill_mechanism,
        (_, Some(Err(_))) => kill_mechanism,
    };
    let why = cgroup.fallback.as_ref().map(|f| format!(": {f}")).unwrap_or_default();
    // Either kill ends the whole tree; the line says which one, and reads
    // "no" only when no mode of the sandbox works here.
    modes.insert(
        1,
        Layer {
            ok: sandbox_probe.ok || ll_ok,
            detail: format!(
                "process-tree kill: {}",
                match kill_mechanism {
                    KillMechanism::CgroupKill => "cgroup.kill on a per-command cgroup".to_string(),
                    KillMechanism::PidNamespace => {
                        format!("pid-namespace teardown, as complete as cgroup.kill (no per-command cgroup{why})")
                    }
                    KillMechanism::Subreaper => format!("subreaper sweep of the landlock-only mode{why}"),
                    KillMechanism::None => "none (no process ran)".to_string(),
                }
            ),
        },
    );
    let works_here = if full_ok {
        Some(Mode::Full)
    } else if ll_ok {
        Some(Mode::LandlockOnly)
    } else {
        None
    };
    Report {
        kernel,
        uid,
        user_namespaces,
        landlock,
        landlock_abi: abi,
        seccomp,
        x32_syscalls: crate::sys::x32_enabled(),
        cgroup,
        sandbox_probe,
        kill_mechanism,
        limits,
        modes,
        landlock_only_open: if ll_ok {
            let root = if uid == 0 { LANDLOCK_ONLY_OPEN_ROOT } else { &[] };
            LANDLOCK_ONLY_OPEN.iter().chain(root).map(|s| s.to_string()).collect()
        } else {
            Vec::new()
        },
        works_here,
    }
}

impl Report {
    /// Human-readable form.
    pub fn render(&self) -> String {
        let mark = |ok: bool| if ok { "ok  " } else { "MISSING" };
        let mut s = String::new();
        s += &format!("kernel            {}\nuid               {}\n", self.kernel, self.uid);
        s += &format!("user namespaces   {} {}\n", mark(self.user_namespaces.ok), self.user_namespaces.detail);
        s += &format!("landlock          {} {}\n", mark(self.landlock.ok), self.landlock.detail);
        s += &format!("seccomp           {} {}\n", mark(self.seccomp.ok), self.seccomp.detail);
        s += &format!(
            "x32 syscalls      {}\n",
            if self.x32_syscalls {
                "enabled in the kernel (the filter refuses them)"
            } else {
                "disabled in the kernel"
            }
        );
        s += &format!(
            "cgroup v2         mount={} parent={} writable={} cgroup.kill={} controllers=[{}]{}\n",
            self.cgroup.mount.as_deref().unwrap_or("-"),
            self.cgroup.parent.as_deref().unwrap_or("-"),
            self.cgroup.writable,
            self.cgroup.cgroup_kill,
            self.cgroup.controllers.join(" "),
            self.cgroup.fallback.as_ref().map(|f| format!(" ({f})")).unwrap_or_default()
        );
        s += &format!("limits            {}\n", self.limits);
        s += &format!("sandbox probe     {} {}\n", mark(self.sandbox_probe.ok), self.sandbox_probe.detail);
        s += "modes:\n";
        for m in &self.modes {
            s += &format!("  {} {}\n", if m.ok { "yes" } else { "no " }, m.detail);
        }
        if !self.landlock_only_open.is_empty() {
            s += "landlock-only mode leaves open (the kernel offers no control for these):\n";
            for g in &self.landlock_only_open {
                s += &format!("  - {g}\n");
            }
        }
        s += match self.works_here {
            Some(Mode::Full) => "works here        the full sandbox (the default)\n",
            Some(Mode::LandlockOnly) => {
                "works here        --degraded landlock-only (weaker: the full sandbox cannot run here, see above)\n"
            }
            None => "works here        nothing: neither the full sandbox nor the landlock-only mode\n",
        };
        s
    }

    /// Whether the full sandbox works.
    pub fn usable(&self) -> bool {
        self.modes.first().is_some_and(|m| m.ok)
    }
}
