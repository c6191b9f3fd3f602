//! What a run returns: how it ended ([`Outcome`]), what enforced it
//! ([`Enforcement`]), and what went wrong around it ([`Warning`]).
//!
//! The JSON shape (`portcullis exec --json`) is documented in
//! `docs/sandbox.md` ("The result"); a test pins it.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Serialize, Serializer};

pub use portcullis_helper::report::CloneCall;
use portcullis_helper::spec::{Mode, Network};

use super::cgroup::LimitMechanism;

/// How the command ended.
///
/// Serialized as `{"kind": "exited", "code": 0}`, `{"kind": "signaled",
/// "signal": 9}`, `{"kind": "timed-out"}` or `{"kind": "cancelled"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Outcome {
    /// The command exited with this code.
    Exited {
        /// The exit code.
        code: i32,
    },
    /// The command was killed by this signal (not by the sandbox).
    Signaled {
        /// The signal number.
        signal: i32,
    },
    /// The run's timeout passed; the whole tree was killed.
    TimedOut,
    /// The run was cancelled; the whole tree was killed.
    Cancelled,
}

/// Exit statuses of a CLI wrapping a run (GNU `timeout`/`env` convention).
pub mod status {
    /// The timeout expired; the whole tree was killed.
    pub const TIMED_OUT: u8 = 124;
    /// Any failure of the wrapper itself.
    pub const FAILED: u8 = 125;
    /// The program was found but cannot be executed.
    pub const CANNOT_EXECUTE: u8 = 126;
    /// The program was not found.
    pub const NOT_FOUND: u8 = 127;
    /// Cancelled (SIGINT or SIGTERM to the wrapper); the tree was killed.
    pub const CANCELLED: u8 = 130;
}

impl Outcome {
    /// The exit status a CLI should use: the command's code (its low 8
    /// bits), 128 + the signal for a command killed by one, 124 for a run
    /// that timed out and 130 for a cancelled one. A failure of the sandbox
    /// itself maps through [`super::SandboxError::exit_code`].
    pub fn exit_status(self) -> u8 {
        match self {
            Outcome::Exited { code } => u8::try_from(code & 0xff).unwrap_or(status::FAILED),
            Outcome::Signaled { signal } => u8::try_from((128 + signal) & 0xff).unwrap_or(status::FAILED),
            Outcome::TimedOut => status::TIMED_OUT,
            Outcome::Cancelled => status::CANCELLED,
        }
    }

    /// The exit code, when the command exited on its own.
    pub fn code(self) -> Option<i32> {
        match self {
            Outcome::Exited { code } => Some(code),
            _ => None,
        }
    }

    /// The signal, when a signal (not the sandbox) killed the command.
    pub fn signal(self) -> Option<i32> {
        match self {
            Outcome::Signaled { signal } => Some(signal),
            _ => None,
        }
    }

    /// Whether the command exited with 0.
    pub fn success(self) -> bool {
        self == Outcome::Exited { code: 0 }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Exited { code } => write!(f, "exited with {code}"),
            Outcome::Signaled { signal } => write!(f, "killed by signal {signal}"),
            Outcome::TimedOut => f.write_str("timed out (the whole tree was killed)"),
            Outcome::Cancelled => f.write_str("cancelled (the whole tree was killed)"),
        }
    }
}

/// How the process tree is killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum KillMechanism {
    /// `cgroup.kill` on a per-command cgroup v2 leaf.
    CgroupKill,
    /// Pid 1 of the sandbox's pid namespace exits; the kernel kills the rest.
    PidNamespace,
    /// Landlock-only mode without a cgroup: the helper, a child subreaper,
    /// kills every descendant when the command ends.
    Subreaper,
    /// No process was started, so there was nothing to kill: a backend that
    /// runs no command (the workspace's mock) made the result up.
    None,
}

/// How Landlock was enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LandlockStatus {
    /// Every handled right is enforced.
    Full,
    /// Some rights are not supported by this kernel.
    Partial,
    /// Not enforced.
    None,
}

/// Which mechanism enforces each requested limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct AppliedLimits {
    /// The process limit.
    pub pids: Option<LimitMechanism>,
    /// The memory limit.
    pub memory: Option<LimitMechanism>,
}

/// What the command really ran under: the plan's choices and what the
/// helper reported once every layer was in place, just before `execve`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Enforcement {
    /// What carried the command out: the kernel sandbox, or a backend that
    /// runs no process and enforced nothing (the workspace's mock, whose
    /// every other field here then says so: no Landlock, no seccomp, no
    /// mounts, nothing killed).
    pub backend: EnforcedBy,
    /// The sandbox's mode: `full`, or the opted-in `landlock-only` (the
    /// mode the request asked for when `backend` is `mock`: none ran).
    pub mode: Mode,
    /// How fully Landlock was enforced.
    pub landlock: LandlockStatus,
    /// The Landlock ABI in force (0: none).
    pub landlock_abi: u32,
    /// Read-only areas Landlock cannot cover (beneath a writable path):
    /// only the read-only mount protects them.
    pub landlock_gaps: Vec<PathBuf>,
    /// Whether the seccomp filter was installed.
    pub seccomp: bool,
    /// The SHA-256 of the seccomp program the plan compiled (the same as
    /// `seccomp:` in `--explain`).
    pub seccomp_sha256: String,
    /// Whether the mount plan's read-only barrier was in place (always
    /// false in the landlock-only mode, which has no mount plan).
    pub readonly_mounts: bool,
    /// How the tree was (or would have been) killed.
    pub kill_mechanism: KillMechanism,
    /// Why no cgroup was used, when none was.
    pub cgroup_fallback: Option<String>,
    /// Which mechanism enforced each limit.
    pub limits: AppliedLimits,
    /// Which system call made the sandbox's pid 1: `clone3` (born in the
    /// cgroup), or `clone` where `clone3` answers `ENOSYS` (a container's
    /// seccomp profile), followed by a write to `cgroup.procs`.
    pub clone: CloneCall,
    /// Network isolation.
    pub network: Network,
    /// The network namespace the command ran in (with `network = "none"`
    /// in the full mode: its own, or the one the workspace's commands
    /// share).
    pub network_namespace: NetworkNamespace,
}

/// Which network namespace a command ran in (see
/// [`Enforcement::network_namespace`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkNamespace {
    /// None of its own: the host's (`network = "host"`, the landlock-only
    /// mode, a mock's result).
    #[default]
    Host,
    /// A fresh one with only loopback, for this command alone.
    Private,
    /// The one the workspace's commands share, with only loopback.
    Shared,
}

impl NetworkNamespace {
    /// The namespace a spec gives its run.
    pub fn of(spec: &portcullis_helper::spec::SpawnSpec) -> NetworkNamespace {
        use portcullis_helper::spec::Netns;
        match (spec.mode, spec.network, spec.netns) {
            (Mode::Full, Network::None, Netns::Shared { .. }) => NetworkNamespace::Shared,
            (Mode::Full, Network::None, Netns::Private) => NetworkNamespace::Private,
            _ => NetworkNamespace::Host,
        }
    }
}

/// What carried a command out (see [`Enforcement::backend`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum EnforcedBy {
    /// The kernel sandbox: the layers below are what was in force.
    #[default]
    Sandbox,
    /// A mock backend: no process ran, no kernel layer enforced anything;
    /// the result is scripted.
    Mock,
}

impl Enforcement {
    /// The enforcement of a result no process produced (a mock backend's):
    /// nothing was enforced, and every field says so.
    pub fn none(mode: Mode, network: Network) -> Enforcement {
        Enforcement {
            backend: EnforcedBy::Mock,
            mode,
            landlock: LandlockStatus::None,
            landlock_abi: 0,
            landlock_gaps: Vec::new(),
            seccomp: false,
            seccomp_sha256: String::new(),
            readonly_mounts: false,
            kill_mechanism: KillMechanism::None,
            cgroup_fallback: Some("a mock backend: no process ran, so no cgroup was made".into()),
            limits: AppliedLimits::default(),
            clone: CloneCall::default(),
            network,
            network_namespace: NetworkNamespace::Host,
        }
    }

    /// Whether the kernel enforced anything (false for a mock's result).
    pub fn is_enforced(&self) -> bool {
        self.backend == EnforcedBy::Sandbox
    }
}

/// Something the caller should know about a run that did not fail it:
/// what the git guard removed, what the stdin relay lost, a cleanup that
/// fell short. `Display` gives one line of prose; serde gives the data
/// (`{"kind": "git-guard-removed", "path": …}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Warning {
    /// The output pipes stayed open 2 s after the sandbox ended (a process
    /// outside it holds them); reading stopped.
    OutputPipesOpen,
    /// A read-only run's cgroup could not be emptied and removed.
    CgroupNotRemoved {
        /// The cgroup.
        path: PathBuf,
    },
    /// The git guard deleted a file or directory the command created where
    /// git would read config and hooks through it.
    GitGuardRemoved {
        /// What was deleted.
        path: PathBuf,
    },
    /// The git guard deleted a symbolic link the command created, through
    /// which git would read `target`.
    GitGuardRemovedLink {
        /// The link deleted.
        link: PathBuf,
        /// The guarded path git would read through it.
        target: PathBuf,
    },
    /// The git guard renamed what the command created aside (git no longer
    /// reads it) but could not delete it.
    GitGuardQuarantined {
        /// What the command created.
        entry: PathBuf,
        /// The guarded path git would read through it.
        target: PathBuf,
        /// Where it now is.
        to: PathBuf,
        /// Why it could not be deleted.
        error: String,
    },
    /// The git guard could not make a path unreachable (the run fails with
    /// [`super::SandboxError::AfterRun`] too).
    GitGuardFailed {
        /// The guarded path.
        target: PathBuf,
        /// What was being done.
        step: String,
        /// The entry it was done to.
        entry: PathBuf,
        /// The kernel's answer.
        error: String,
    },
    /// The shell said it could not find a program the line names: where it
    /// was looked for inside the sandbox, and where it is on the host.
    ProgramNotFound {
        /// The program.
        program: String,
        /// What was searched and what to do.
        hint: String,
    },
    /// This writable run's git guard is left to the last writable run of
    /// the workspace to end (writable runs of one workspace run side by
    /// side): until then what the command created where git reads config
    /// and hooks may exist. Run git on the host in this workspace only when
    /// no writable command of it is running.
    GitGuardDeferred {
        /// Records of other writable runs pending when this one ended (runs
        /// still going or about to start, or ended while another ran, or
        /// killed; runs that ended with the same guard share one record).
        others: usize,
    },
    /// The git guard done at the end of this run covered other writable
    /// runs of the workspace too: those that ended while it ran, and any
    /// whose host process was killed. What it removed for them is among
    /// these warnings.
    GitGuardCoveredOthers {
        /// How many records of other runs: runs that ended with the same
        /// guard share one record, so this counts each such group once.
        runs: usize,
    },
    /// A git-guard record of a run of a workspace that is no longer at its
    /// path (removed, or moved) was dropped without its cleanup: its paths
    /// name nothing of this workspace.
    GitGuardRecordStale {
        /// The record.
        record: PathBuf,
        /// The workspace it was written for.
        workspace: PathBuf,
    },
    /// A git index could not be read again after the run, so its gitlinks
    /// could not be checked (the run fails too).
    SubmoduleIndexUnreadable {
        /// The index.
        index: PathBuf,
        /// What is wrong with it.
        problem: String,
    },
    /// A submodule the command added was reached through a symbolic link,
    /// which was removed.
    SubmoduleLinkRemoved {
        /// The submodule's working tree.
        tree: PathBuf,
        /// The index holding the gitlink.
        index: PathBuf,
        /// The link removed.
        link: PathBuf,
        /// Where the link was renamed to, when deleting it failed.
        renamed_to: Option<PathBuf>,
        /// Why deleting it failed.
        error: Option<String>,
    },
    /// The `.git` of a submodule the command added was renamed aside.
    SubmoduleQuarantined {
        /// The submodule's working tree.
        tree: PathBuf,
        /// The index holding the gitlink.
        index: PathBuf,
        /// The `.git` renamed.
        from: PathBuf,
        /// Where it now is.
        to: PathBuf,
    },
    /// The `.git` of a submodule the command added could not be made
    /// unreachable (the run fails too).
    SubmoduleGuardFailed {
        /// The submodule's working tree.
        tree: PathBuf,
        /// Its `.git`.
        dotgit: PathBuf,
        /// What was being done.
        step: String,
        /// The entry it was done to.
        entry: PathBuf,
        /// The kernel's answer.
        error: String,
    },
    /// The stdin relay stopped early, or bytes the command read were gone
    /// from the caller's input.
    StdinRelay {
        /// Why the relay stopped early, if it did.
        error: Option<String>,
        /// Bytes the command read that another reader had taken.
        missing: u64,
    },
}

impl Warning {
    /// A note for whoever runs git on the host in the workspace, not for
    /// the command's author: which run's end does the git guard of the
    /// others. A model cannot act on it, and with a background job running
    /// it would be on every result; the tools leave it out (the library's
    /// result and the audit keep it).
    pub fn concerns_the_host_only(&self) -> bool {
        matches!(self, Warning::GitGuardDeferred { .. } | Warning::GitGuardCoveredOthers { .. })
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Warning::OutputPipesOpen => {
                f.write_str("output pipes still open 2 s after the sandbox ended; stopped reading")
            }
            Warning::CgroupNotRemoved { path } => {
                write!(f, "cgroup {} could not be emptied and removed", path.display())
            }
            Warning::GitGuardRemoved { path } => {
                write!(f, "removed {} created by the command: it would redirect git's config and hooks", path.display())
            }
            Warning::GitGuardRemovedLink { link, target } => write!(
                f,
                "removed the symbolic link {} created by the command: through it git would read {}",
                link.display(),
                target.display()
            ),
            Warning::GitGuardQuarantined { entry, target, to, error } => write!(
                f,
                "{} was created by the command (git would read {} through it); it is renamed to {} (git no longer \
                 reads it) but could not be deleted: {error}",
                entry.display(),
                target.display(),
                to.display()
            ),
            Warning::GitGuardFailed { target, step, entry, error } => write!(
                f,
                "git guard: {} could not be made unreachable ({step} {}: {error}); do not run git on the host \
                 before removing it",
                target.display(),
                entry.display()
            ),
            Warning::ProgramNotFound { program, hint } => write!(f, "{program}: {hint}"),
            Warning::GitGuardDeferred { others } => write!(
                f,
                "git guard left to the last writable run of this workspace to end ({others} other run(s) pending): \
                 until none is running, what a command created where git reads config and hooks may exist; run git \
                 on the host here only when no writable command of this workspace is running"
            ),
            Warning::GitGuardCoveredOthers { runs } => write!(
                f,
                "the git guard at the end of this run covered other writable runs of this workspace too ({runs} \
                 record(s): ended while it ran, or killed)"
            ),
            Warning::GitGuardRecordStale { record, workspace } => write!(
                f,
                "dropped the git-guard record {} of a run of {}, which is no longer there: if that workspace was \
                 moved, check its git dirs for hooks and config a command may have planted before running git there",
                record.display(),
                workspace.display()
            ),
            Warning::SubmoduleIndexUnreadable { problem, .. } => write!(
                f,
                "git guard: {problem}; the gitlinks in it could not be checked for repositories the command made: \
                 run host git only with --ignore-submodules=all until it is repaired"
            ),
            Warning::SubmoduleLinkRemoved { tree, index, link, renamed_to, error } => {
                let kept = match (renamed_to, error) {
                    (Some(to), Some(e)) => {
                        format!(" (renamed to {}, whose deletion failed: {e}; delete it)", to.display())
                    }
                    _ => String::new(),
                };
                write!(
                    f,
                    "{} is a submodule the command added (a gitlink in {}) through the symbolic link {}, through \
                     which git ls-files and git grep --recurse-submodules enter it and run the config and hooks of \
                     the repository behind it; the link is removed{kept} (what it led to is kept: review that \
                     repository's config and hooks before linking it again)",
                    tree.display(),
                    index.display(),
                    link.display()
                )
            }
            Warning::SubmoduleQuarantined { tree, index, from, to } => write!(
                f,
                "{} is a submodule the command added (a gitlink in {}), and git on the host would run the config \
                 and hooks of its repository {}; that is renamed to {} (kept, unreachable for git). Review its \
                 config and hooks, then restore it with: mv {} {}",
                tree.display(),
                index.display(),
                from.display(),
                to.display(),
                to.display(),
                from.display()
            ),
            Warning::SubmoduleGuardFailed { tree, dotgit, step, entry, error } => write!(
                f,
                "git guard: {} (of the submodule {} the command added) could not be made unreachable ({step} {}: \
                 {error}); do not run git on the host before removing it",
                dotgit.display(),
                tree.display(),
                entry.display()
            ),
            Warning::StdinRelay { error, missing } => {
                let mut notes = Vec::new();
                if let Some(e) = error {
                    notes.push(format!("stdin relay stopped early: {e}; the command saw end-of-input there"));
                }
                if *missing > 0 {
                    notes.push(format!(
                        "{missing} bytes of stdin the command read were already gone from the caller's input \
                         (another process reads it too)"
                    ));
                }
                f.write_str(&notes.join("; "))
            }
        }
    }
}

fn lossy<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&String::from_utf8_lossy(b))
}

fn millis<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64((d.as_secs_f64() * 1e6).round() / 1e3)
}

/// The result of a run.
#[derive(Debug, Clone, Serialize)]
pub struct ExecResult {
    /// How the command ended.
    pub outcome: Outcome,
    /// Output passed the cap; the rest was drained and dropped.
    pub truncated: bool,
    /// Whether the workspace was writable.
    pub writable: bool,
    /// Write grants in force.
    pub write_grants: Vec<PathBuf>,
    /// Wall time from the call to cleanup (a wait for another run of the
    /// workspace included).
    #[serde(rename = "duration_ms", serialize_with = "millis")]
    pub duration: Duration,
    /// What the command ran under.
    pub enforcement: Enforcement,
    /// Captured standard output (up to the cap).
    #[serde(serialize_with = "lossy")]
    pub stdout: Vec<u8>,
    /// Captured standard error (up to the cap).
    #[serde(serialize_with = "lossy")]
    pub stderr: Vec<u8>,
    /// The writes the kernel refused (see `docs/sandbox.md`, "The
    /// refused-write report").
    pub refused_writes: super::RefusedWrites,
    /// What the caller should know: the git guard's removals, the stdin
    /// relay's losses, cleanups that fell short.
    pub warnings: Vec<Warning>,
}

impl ExecResult {
    /// The paths the git guard and the submodule quarantine made
    /// unreachable after the run (for the audit's outcome record).
    pub fn removed_paths(&self) -> Vec<PathBuf> {
        self.warnings
            .iter()
            .filter_map(|w| match w {
                Warning::GitGuardRemoved { path } => Some(path.clone()),
                Warning::GitGuardRemovedLink { link, .. } => Some(link.clone()),
                Warning::GitGuardQuarantined { entry, .. } => Some(entry.clone()),
                Warning::SubmoduleLinkRemoved { link, .. } => Some(link.clone()),
                Warning::SubmoduleQuarantined { from, .. } => Some(from.clone()),
                _ => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcome_serializes_as_a_tagged_object() {
        let j = |o: Outcome| serde_json::to_string(&o).unwrap_or_default();
        assert_eq!(j(Outcome::Exited { code: 3 }), r#"{"kind":"exited","code":3}"#);
        assert_eq!(j(Outcome::Signaled { signal: 9 }), r#"{"kind":"signaled","signal":9}"#);
        assert_eq!(j(Outcome::TimedOut), r#"{"kind":"timed-out"}"#);
        assert_eq!(j(Outcome::Cancelled), r#"{"kind":"cancelled"}"#);
    }

    #[test]
    fn outcome_maps_to_exit_statuses() {
        assert_eq!(Outcome::Exited { code: 0 }.exit_status(), 0);
        assert_eq!(Outcome::Exited { code: 258 }.exit_status(), 2);
        assert_eq!(Outcome::Signaled { signal: 9 }.exit_status(), 137);
        assert_eq!(Outcome::TimedOut.exit_status(), 124);
        assert_eq!(Outcome::Cancelled.exit_status(), 130);
    }

    #[test]
    fn warnings_are_data_and_prose() {
        let w = Warning::GitGuardRemoved { path: PathBuf::from("/ws/.husky") };
        assert_eq!(
            serde_json::to_string(&w).unwrap_or_default(),
            r#"{"kind":"git-guard-removed","path":"/ws/.husky"}"#
        );
        assert!(w.to_string().starts_with("removed /ws/.husky created by the command"));
    }
}
