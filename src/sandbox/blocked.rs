//! Why the full sandbox cannot be built here, in one line: which call was
//! refused with which errno, what on this host refuses it, and what to do.
//!
//! The helper reports a refused `Clone` (with the call in `detail`) or a
//! refused id-map write; this module turns that into a
//! [`SandboxError::NamespacesBlocked`](super::SandboxError::NamespacesBlocked),
//! reading the host's sysctls and this process's seccomp state to tell a
//! container's seccomp profile from a distribution's sysctl.

use std::fs;

use portcullis_helper::network::MakeStep;
use portcullis_helper::report::{Step, CLONE_DETAIL_CLONE, CLONE_DETAIL_CLONE3};

/// The namespace flags pid 1 is made with, as they are named in the message.
const FLAGS: &str = "CLONE_NEWUSER|CLONE_NEWNS|CLONE_NEWPID|CLONE_NEWIPC|CLONE_NEWUTS";

/// Where the deployment guide lives (named in the remedy).
const GUIDE: &str = "docs/deployment.md";

/// A refusal of the namespaces, explained.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Blocked {
    /// The refused call, e.g. `clone(CLONE_NEWUSER|…)`.
    pub call: String,
    /// Its errno.
    pub errno: i32,
    /// What on this host refuses it.
    pub cause: String,
    /// What to do.
    pub remedy: String,
}

impl std::fmt::Display for Blocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "user namespaces are blocked here: {} failed with {} ({}); {}; {}",
            self.call,
            errno_name(self.errno),
            nix::errno::Errno::from_raw(self.errno).desc(),
            self.cause,
            self.remedy
        )
    }
}

/// The helper's `Clone` or id-map failure (`step`, `errno`, `detail`) as a
/// [`Blocked`], when it means that user namespaces cannot be made here.
/// `None` for any other failure.
pub fn diagnose(step: Step, errno: i32, detail: u32) -> Option<Blocked> {
    let host = Host::read();
    match step {
        Step::Clone if matches!(errno, libc::EPERM | libc::EINVAL | libc::ENOSPC | libc::EUSERS | libc::ENOSYS) => {
            let call = match detail {
                CLONE_DETAIL_CLONE => format!("clone({FLAGS}), after clone3 answered ENOSYS,"),
                CLONE_DETAIL_CLONE3 => format!("clone3({FLAGS})"),
                _ => "creating the namespaces".to_string(),
            };
            let (cause, remedy) = host.explain(detail == CLONE_DETAIL_CLONE || errno == libc::ENOSYS);
            Some(Blocked { call, errno, cause, remedy })
        }
        Step::MapUid | Step::MapGid | Step::DenySetgroups | Step::SwitchIds
            if matches!(errno, libc::EPERM | libc::EACCES) =>
        {
            let call = match step {
                Step::MapUid => "writing /proc/<pid1>/uid_map",
                Step::MapGid => "writing /proc/<pid1>/gid_map",
                // Mapped, but pid 1 holds no capability in its namespace.
                Step::SwitchIds => "switching pid 1 to its mapped ids (setresuid)",
                _ => "writing /proc/<pid1>/setgroups",
            };
            let (cause, remedy) = if host.apparmor == Some(1) {
                (
                    "kernel.apparmor_restrict_unprivileged_userns=1 (Ubuntu's AppArmor restriction) lets the \
                     namespace be made but not mapped"
                        .to_string(),
                    "run with --degraded landlock-only, or set that sysctl to 0, or give portcullis-helper an \
                     AppArmor profile that allows `userns`"
                        .to_string(),
                )
            } else {
                (
                    "a security module refused to map the new user namespace".to_string(),
                    format!("run with --degraded landlock-only, or see {GUIDE}"),
                )
            };
            Some(Blocked { call: call.to_string(), errno, cause, remedy })
        }
        _ => None,
    }
}

/// A failure of `portcullis-helper --make-network` (the workspace's
/// network, `sandbox::network`) as a [`Blocked`], when it means that the
/// namespaces cannot be made here: the same one line a run's own clone
/// would give.
pub fn diagnose_network(step: Option<MakeStep>, errno: i32) -> Option<Blocked> {
    let call = match step? {
        MakeStep::UserNamespace if matches!(errno, libc::EPERM | libc::EINVAL | libc::ENOSPC | libc::EUSERS) => {
            "unshare(CLONE_NEWUSER) for the workspace's network"
        }
        MakeStep::NetNamespace if matches!(errno, libc::EPERM | libc::EINVAL | libc::ENOSPC) => {
            "unshare(CLONE_NEWNET) for the workspace's network"
        }
        MakeStep::MapUid | MakeStep::MapGid | MakeStep::DenySetgroups
            if matches!(errno, libc::EPERM | libc::EACCES) =>
        {
            "writing the id maps of the workspace's user namespace"
        }
        _ => return None,
    };
    let (cause, remedy) = Host::read().explain(false);
    Some(Blocked { call: call.to_string(), errno, cause, remedy })
}

/// What this host says about user namespaces.
#[derive(Debug, Clone, Copy)]
struct Host {
    max_user_namespaces: Option<i64>,
    unprivileged_userns_clone: Option<i64>,
    apparmor: Option<i64>,
    seccomp_filtered: bool,
    root: bool,
}

impl Host {
    fn read() -> Host {
        Host {
            max_user_namespaces: read_num("/proc/sys/user/max_user_namespaces"),
            unprivileged_userns_clone: read_num("/proc/sys/kernel/unprivileged_userns_clone"),
            apparmor: read_num("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"),
            seccomp_filtered: seccomp_filtered(),
            root: nix::unistd::getuid().is_root(),
        }
    }

    /// (cause, remedy). `filtered_clone3`: clone3 answered ENOSYS, which on
    /// a kernel that has it only a seccomp filter makes it do.
    fn explain(&self, filtered_clone3: bool) -> (String, String) {
        if self.max_user_namespaces == Some(0) {
            return (
                "sysctl user.max_user_namespaces=0".into(),
                "run with --degraded landlock-only, or set user.max_user_namespaces above 0".into(),
            );
        }
        if self.unprivileged_userns_clone == Some(0) && !self.root {
            return (
                "sysctl kernel.unprivileged_userns_clone=0 (Debian)".into(),
                "run with --degraded landlock-only, or set kernel.unprivileged_userns_clone=1".into(),
            );
        }
        if self.seccomp_filtered || filtered_clone3 {
            return (
                "a seccomp filter refuses them, as the default profiles of Docker and of containerd \
                 (Kubernetes' RuntimeDefault) do for a container without CAP_SYS_ADMIN"
                    .into(),
                format!(
                    "run with --degraded landlock-only, or give the container a seccomp profile that allows \
                     clone, unshare, setns and the mount calls, and no AppArmor mount restriction (see {GUIDE})"
                ),
            );
        }
        (
            "the kernel or a security module refuses them".into(),
            format!(
                "run with --degraded landlock-only, or check user.max_user_namespaces, \
                 kernel.unprivileged_userns_clone and kernel.apparmor_restrict_unprivileged_userns \
                 (`portcullis doctor`; {GUIDE} for containers)"
            ),
        )
    }
}

fn read_num(p: &str) -> Option<i64> {
    fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// Whether this process runs under a seccomp filter (`Seccomp: 2` in
/// `/proc/self/status`), as every process of a container with a seccomp
/// profile does.
pub fn seccomp_filtered() -> bool {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("Seccomp:").map(|v| v.trim() == "2")))
        .unwrap_or(false)
}

/// The symbolic name of the errnos this module reports.
pub fn errno_name(e: i32) -> &'static str {
    match e {
        libc::EPERM => "EPERM",
        libc::EACCES => "EACCES",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::EUSERS => "EUSERS",
        libc::ENOSYS => "ENOSYS",
        _ => "an errno",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_container_profile_is_named_with_the_call_and_the_remedy() {
        let host = Host {
            max_user_namespaces: Some(15000),
            unprivileged_userns_clone: None,
            apparmor: None,
            seccomp_filtered: true,
            root: true,
        };
        let (cause, remedy) = host.explain(true);
        let b = Blocked {
            call: format!("clone({FLAGS}), after clone3 answered ENOSYS,"),
            errno: libc::EPERM,
            cause,
            remedy,
        };
        let line = b.to_string();
        assert!(!line.contains('\n'));
        for want in [
            "user namespaces are blocked here",
            "clone(CLONE_NEWUSER",
            "EPERM",
            "seccomp",
            "--degraded landlock-only",
            GUIDE,
        ] {
            assert!(line.contains(want), "{want} missing from {line}");
        }
    }

    #[test]
    fn a_sysctl_is_named_before_a_filter() {
        let host = Host {
            max_user_namespaces: Some(0),
            unprivileged_userns_clone: None,
            apparmor: None,
            seccomp_filtered: true,
            root: false,
        };
        assert!(host.explain(false).0.contains("max_user_namespaces=0"));
    }

    #[test]
    fn other_failures_are_not_blocked_namespaces() {
        assert_eq!(diagnose(Step::Mount, libc::EPERM, 3), None);
        assert_eq!(diagnose(Step::JoinCgroup, libc::EACCES, portcullis_helper::report::NO_DETAIL), None);
        assert!(diagnose(Step::Clone, libc::EPERM, CLONE_DETAIL_CLONE).is_some());
    }
}
