//! The sandbox: plan a command, spawn the helper, supervise the run.

mod aliases;
mod behind;
mod blocked;
mod cgroup;
mod containment;
mod git;
mod grants;
mod guard;
mod hint;
mod launch;
mod links;
mod lock;
mod mounts;
mod network;
mod observe;
mod pending;
mod plan;
mod pool;
mod profile;
mod result;
mod roots;
mod run;
mod split;
mod stdin;
mod submodules;

use std::ffi::OsString;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use portcullis_helper::report::{Record, Step, NO_DETAIL, RECORD_LEN};
pub use portcullis_helper::spec::Mode;
pub use portcullis_helper::spec::TestSwitches;
use portcullis_helper::spec::{MountOp, Network};

pub use blocked::{seccomp_filtered, Blocked};
pub use cgroup::{CgroupHost, CgroupPlan, LimitMechanism, NoCgroup};
pub use containment::Containment;
pub use git::GitIndex;
pub use observe::{RefusedWrites, ReportState, SAMPLE_CAP};
#[doc(hidden)]
pub use pending::{leave_record_for_tests, records_dir_for_tests};
pub use plan::{Plan, DEFAULT_PROTECTED};
pub use pool::PoolStatus;
pub use profile::Profile;
pub use result::{
    status, AppliedLimits, CloneCall, EnforcedBy, Enforcement, ExecResult, KillMechanism, LandlockStatus,
    NetworkNamespace, Outcome, Warning,
};
pub use split::{Split, SPLIT_LIMIT};

use crate::sys;

/// What to do about a path of the request that cannot be resolved, by why
/// (its cause follows in the error chain).
fn path_next_step(source: &io::Error) -> &'static str {
    match source.kind() {
        io::ErrorKind::NotFound => " (it does not exist: create it, or name one that does)",
        io::ErrorKind::PermissionDenied => {
            " (a directory on its way cannot be searched by you: name a path you can reach)"
        }
        _ => "",
    }
}

/// Errors of the sandbox layer. Each names the path, step or command.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// A path of the request could not be resolved.
    #[error("cannot resolve {what} {path}{}", path_next_step(source))]
    Path {
        /// Which path of the request.
        what: &'static str,
        /// The path as given.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A path meant to be inside the workspace resolves outside it.
    #[error("{what} {path} resolves to {resolved}, outside the workspace (a symbolic link leads out)")]
    PathEscape {
        /// Which path of the request.
        what: &'static str,
        /// The path as given.
        path: PathBuf,
        /// Where it leads.
        resolved: PathBuf,
    },
    /// A relative path (or one under the workspace) whose `..` leads out of
    /// the workspace.
    #[error(
        "{what} {path} names {resolved}, outside the workspace (through `..`); a path outside the workspace must be \
         given as an absolute path"
    )]
    PathOutside {
        /// Which path of the request.
        what: &'static str,
        /// The path as given.
        path: PathBuf,
        /// What it names, lexically.
        resolved: PathBuf,
    },
    /// A write grant outside the workspace does not exist.
    #[error(
        "write grant {path} does not exist; portcullis creates a missing grant only inside the workspace: create it \
         first (mkdir -p {path})"
    )]
    MissingGrant {
        /// The grant as given.
        path: PathBuf,
    },
    /// A readable root (`--read`, the policy's `read`) does not exist.
    #[error(
        "readable root {path} does not exist: a readable root must name an existing file or directory (create it, \
         correct the path, or leave it out)"
    )]
    MissingReadRoot {
        /// The readable root as given.
        path: PathBuf,
    },
    /// A missing write grant inside the workspace could not be created.
    #[error("cannot create the missing write grant {path} (create it yourself, or grant a directory that exists)")]
    CreateGrant {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A readable root the command could not read (checked before the run).
    #[error("readable root {path} would not be readable inside the sandbox: {reason}")]
    ReadRootUnreadable {
        /// The readable root (real path).
        path: PathBuf,
        /// Who the command is, what mode stops it, and what to do.
        reason: String,
    },
    /// The filesystem of a root caller's bind refused an idmapped mount.
    #[error(
        "the filesystem holding the {what} {path} refuses idmapped mounts, which a root caller's binds need (its \
         command runs as host nobody, and the idmapped bind makes root's files there the command's); put it on a \
         filesystem that supports them (ext4, xfs, btrfs, tmpfs, overlayfs), or run portcullis as an unprivileged \
         user who can read it"
    )]
    IdmapRefused {
        /// Which path of the plan (workspace, write grant, readable root).
        what: &'static str,
        /// The path.
        path: PathBuf,
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },
    /// A path that must be a directory is not.
    #[error("{what} {path} is not a directory")]
    NotADirectory {
        /// Which path of the request.
        what: &'static str,
        /// The resolved path.
        path: PathBuf,
    },
    /// No command was given.
    #[error("no command given: name a program after `--`")]
    EmptyCommand,
    /// The request contradicts itself or asks for what no run may have
    /// (an empty command name, the workspace `/`, a working directory
    /// outside the sandbox, protecting a writable root, a setuid caller).
    #[error("{message}")]
    Invalid {
        /// Which part of the request (`command`, `workspace`, `--cwd`,
        /// `--protect`, `stdin`, `caller`, a limit's flag).
        what: &'static str,
        /// What is wrong, and what to do.
        message: String,
    },
    /// The mode asked for cannot honour a part of the request (the
    /// landlock-only mode has no mount namespace: no deny globs, no
    /// read-only areas inside a writable one, ...). The full sandbox can.
    #[error("{message}")]
    Unsupported {
        /// The mode asked for.
        mode: Mode,
        /// What it cannot honour.
        feature: &'static str,
        /// Why, and what to do.
        message: String,
    },
    /// A write grant is refused.
    #[error("{message}")]
    GrantRefused {
        /// The grant (as given, or its real path).
        path: PathBuf,
        /// Why.
        reason: GrantRefusal,
        /// Why, in words, and what to do.
        message: String,
    },
    /// A path the run would have to keep safe cannot be: a symbolic link a
    /// writable run could replace, an alias of a read-only directory, a
    /// directory the checks cannot list, a file git reads that is not a
    /// regular file. A writable run is refused rather than run unsafely.
    #[error("{message}")]
    UnsafePath {
        /// The path.
        path: PathBuf,
        /// What is wrong with it.
        reason: PathRefusal,
        /// Why, in words, and what to do.
        message: String,
    },
    /// A bound of portcullis's checks was passed; they fail closed.
    #[error("{message}")]
    LimitExceeded {
        /// What was counted.
        what: &'static str,
        /// The bound.
        limit: u64,
        /// Where, and what to do.
        message: String,
    },
    /// Anything else the library refuses (a seccomp filter that does not
    /// compile).
    #[error("{0}")]
    BadRequest(String),
    /// The per-command cgroup the plan counted on ([`Plan::containment`])
    /// could not be made when the run started. Nothing ran: the run does
    /// not go ahead with less containment than its plan said.
    #[error(
        "could not {stage} {}, which this run's plan counts on (its per-command cgroup); nothing ran: run again \
         (a new plan sees the host's cgroup as it is then, and says so if it falls back)",
        .path.display()
    )]
    Cgroup {
        /// What was being done (`create the per-command cgroup`, `write`).
        stage: &'static str,
        /// The cgroup directory or control file.
        path: PathBuf,
        /// The kernel's answer.
        source: io::Error,
    },
    /// [`Sandbox::run_plan`] was given a writable plan that is no longer
    /// current: the tree changed between the plan and the run.
    #[error(
        "the plan for {} is stale: {what} changed since it was made; plan again (Sandbox::plan) or use Sandbox::run, which plans under the workspace's lock", .workspace.display()
    )]
    PlanChanged {
        /// The workspace.
        workspace: PathBuf,
        /// Which part of the plan differs: a field of [`Plan`]
        /// (`hard_linked`, `git_guard`, ...) or of its spawn spec
        /// (`spec.mounts`, ...).
        what: String,
    },
    /// `degraded` names the full sandbox, which is not a degraded mode: the
    /// full sandbox is asked for by leaving `degraded` unset (`None`), as
    /// the command line and the policy file spell it.
    #[error(
        "`{mode}` is not a degraded mode: leave `degraded` unset for the full sandbox, or name one of: {}",
        Mode::DEGRADED.iter().map(|m| m.name()).collect::<Vec<_>>().join(", ")
    )]
    NotADegradedMode {
        /// The mode asked for.
        mode: Mode,
    },
    /// A hook git would run after a writable run is reached through a
    /// symbolic link in a writable area: the command could point the link
    /// elsewhere, and host git would run what it leads to then.
    #[error(
        "the hook {} leads through the symbolic link {} in a writable area, which the command could point \
         elsewhere; link the hook to the real file, or run read-only",
        .hook.display(),
        .link.display()
    )]
    HookThroughLink {
        /// The hook (an entry of a hooks directory).
        hook: PathBuf,
        /// The link on its way that lies in a writable area.
        link: PathBuf,
    },
    /// A hook link git would follow after a writable run cannot be resolved
    /// (a `..` after a missing directory, a loop), and resolving it stops
    /// in a writable area: the command could create or replace what comes
    /// next, so that host git would run a file of its choosing.
    #[error(
        "the hook {} cannot be resolved ({reason}), and resolving it stops at {}, in a writable area, where the \
         command could create what makes it resolve; point the hook at a file that exists, remove it, or run \
         read-only",
        .hook.display(),
        .stuck.display()
    )]
    HookUnresolved {
        /// The hook (an entry of a hooks directory).
        hook: PathBuf,
        /// The deepest directory (or file) resolving it reached.
        stuck: PathBuf,
        /// Why it cannot be resolved.
        reason: String,
    },
    /// A deny glob does not parse.
    #[error("invalid deny glob {glob:?}: {reason}")]
    Glob {
        /// The glob.
        glob: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The helper binary was not found.
    #[error("portcullis-helper not found (looked in: {}); set PORTCULLIS_HELPER", display_list(.searched))]
    HelperNotFound {
        /// Where it was looked for.
        searched: Vec<PathBuf>,
    },
    /// The helper could not read the spawn spec this library wrote: the two
    /// are from different builds (a spec's version or fields differ).
    #[error(
        "the helper could not read this library's spawn spec: portcullis-helper is from another build of \
         portcullis than this program (rebuild both together with scripts/build-static, or point \
         PORTCULLIS_HELPER at the helper built with it)"
    )]
    HelperMismatch {
        /// The helper's errno (`EINVAL`).
        #[source]
        source: io::Error,
    },
    /// The helper could not be started.
    #[error("cannot start the helper {helper}")]
    Spawn {
        /// The helper's path.
        helper: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// Local plumbing (pipes, memfd) failed.
    #[error("sandbox plumbing failed while {stage}")]
    Io {
        /// What was being done.
        stage: &'static str,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// A kernel layer the sandbox requires is not available on this host.
    #[error("{layer} unavailable: {hint}")]
    LayerUnavailable {
        /// The layer.
        layer: &'static str,
        /// What is missing and how to enable it.
        hint: String,
        /// The kernel's answer.
        #[source]
        source: io::Error,
    },
    /// The full sandbox cannot be built on this host: making or mapping the
    /// user namespace was refused (a container's seccomp profile, a sysctl,
    /// AppArmor). One line: the call, the errno, the cause, what to do.
    #[error("the full sandbox cannot run: {0}")]
    NamespacesBlocked(Blocked),
    /// The network the workspace's commands share (`network = "none"`)
    /// could not be made.
    #[error(
        "cannot make the network the workspace's commands share (network = \"none\": one namespace with only \
         loopback): {stage} failed; `portcullis doctor` checks what the sandbox needs here"
    )]
    Network {
        /// The step that failed.
        stage: &'static str,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The workspace's shared network was released ([`Sandbox::release_network`],
    /// done by `Workspace::dispose`): no command of it may run any more.
    #[error("the workspace's network was released (the workspace is disposed); build a new workspace to run commands")]
    NetworkReleased,
    /// A setup step inside the helper failed.
    #[error("sandbox setup failed while {}{}", .step.map_or("in an unknown step", Step::describe), .path.as_ref().map(|p| format!(" ({})", p.display())).unwrap_or_default())]
    Setup {
        /// The step (None: a newer helper sent a step this library does not know).
        step: Option<Step>,
        /// The mount destination, when the step was a mount.
        path: Option<PathBuf>,
        /// The errno, as an io::Error.
        #[source]
        source: io::Error,
    },
    /// The command could not be executed.
    #[error("cannot execute {program}{hint}")]
    Exec {
        /// The program (`argv[0]`).
        program: String,
        /// What to do about it, in parentheses (or empty): for a program
        /// not found, the `PATH` searched inside the sandbox and where the
        /// program is on the host.
        hint: String,
        /// Why (ENOENT: not found; EACCES: not executable).
        #[source]
        source: io::Error,
    },
    /// The helper died without reporting.
    #[error("the helper died unexpectedly ({status})")]
    HelperDied {
        /// Its exit status.
        status: String,
    },
    /// The caller's workspace-lock directory or file is unusable.
    #[error("the workspace lock {path} is unusable: {problem}")]
    Lock {
        /// The lock directory or file.
        path: PathBuf,
        /// What is wrong and what to do.
        problem: String,
    },
    /// The timeout passed while the run waited for another run of the same
    /// workspace to end; nothing was started.
    #[error("timed out after {:.1} s waiting for another run of the workspace {} to end; nothing was started", .waited.as_secs_f64(), .workspace.display())]
    TimedOutWaiting {
        /// The workspace.
        workspace: PathBuf,
        /// How long it waited.
        waited: Duration,
    },
    /// The timeout passed before the command started: while the run was
    /// planned (the deny globs, the hard-link check) or the sandbox set up;
    /// nothing was started.
    #[error("timed out after {:.1} s {stage} (workspace {}), before the command started; nothing was started: raise --timeout", .waited.as_secs_f64(), .workspace.display())]
    TimedOutBeforeStart {
        /// The workspace.
        workspace: PathBuf,
        /// What the run was doing when the timeout passed.
        stage: &'static str,
        /// How long the run had taken.
        waited: Duration,
    },
    /// The run was cancelled while it waited for another run of the same
    /// workspace to end; nothing was started.
    #[error("cancelled while waiting for another run of the workspace {} to end; nothing was started", .workspace.display())]
    CancelledWaiting {
        /// The workspace.
        workspace: PathBuf,
    },
    /// The run's cancellation token was cancelled before the command was
    /// started; nothing was started.
    #[error("cancelled before the command started (workspace {}); nothing was started", .workspace.display())]
    CancelledBeforeStart {
        /// The workspace.
        workspace: PathBuf,
    },
    /// A security step after the command ended could not be completed, so
    /// the workspace may not be safe to use from the host: the git guard
    /// could not make a path git would read unreachable, or processes of a
    /// writable run could not be killed. The command did run; its result
    /// (output included) is carried along.
    #[error("after the run, {step} failed for {}: {errno}; {}", .path.display(), .cleanup.advice())]
    AfterRun {
        /// Which cleanup.
        cleanup: Cleanup,
        /// What was being done.
        step: &'static str,
        /// The path it was done to.
        path: PathBuf,
        /// The kernel's answer (shown in the message, not a separate cause).
        errno: io::Error,
        /// The command's result (`None` when the helper failed before the
        /// command started).
        result: Option<Box<ExecResult>>,
    },
}

/// Why a write grant is refused ([`SandboxError::GrantRefused`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum GrantRefusal {
    /// `/`: every host directory.
    WholeHost,
    /// Under `/dev`, `/proc` or `/sys`, which the sandbox has its own of.
    KernelFilesystem,
    /// A system directory (`/usr`, `/etc`, ...) or one holding it.
    SystemDirectory,
    /// A missing grant named through `..`.
    NamedThroughDotDot,
    /// It changed while it was planned.
    Changed,
    /// A file grant that is a setuid/setgid program or has file capabilities.
    PrivilegedProgram,
    /// A file grant with another name outside the writable areas.
    HardLinked,
}

/// What is wrong with a path ([`SandboxError::UnsafePath`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum PathRefusal {
    /// It is named through a symbolic link; name the real path.
    ThroughSymlink,
    /// It is reached through a symbolic link in a writable area, which the
    /// command could point elsewhere.
    ReplaceableLink,
    /// An alias (a bind or other mount) makes a read-only directory
    /// writable, or one directory appears twice.
    Alias,
    /// Portcullis cannot list it, yet the command could search it.
    Unlistable,
    /// It cannot be read or checked.
    Unreadable,
    /// Git reads it, and it is not a regular file.
    NotRegularFile,
    /// It lies inside portcullis's workspace-lock directory.
    LockDirectory,
}

/// The security steps after a run that must not fail silently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Cleanup {
    /// The git guard (see [`Plan::git_guard`]).
    GitGuard,
    /// Emptying the run's cgroup.
    Cgroup,
}

impl Cleanup {
    fn advice(self) -> &'static str {
        match self {
            Cleanup::GitGuard => {
                "git on the host could read config or hooks the command planted there: remove that entry (and any \
                 symbolic link leading to it) before running git in this workspace"
            }
            Cleanup::Cgroup => {
                "processes of the writable run may still be running and changing the workspace: kill them (write 1 \
                 to cgroup.kill in that cgroup) before trusting the workspace"
            }
        }
    }
}

fn display_list(p: &[PathBuf]) -> String {
    p.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}

impl SandboxError {
    pub(crate) fn invalid(what: &'static str, message: impl Into<String>) -> SandboxError {
        SandboxError::Invalid { what, message: message.into() }
    }

    pub(crate) fn unsupported(feature: &'static str, message: impl Into<String>) -> SandboxError {
        SandboxError::Unsupported { mode: Mode::LandlockOnly, feature, message: message.into() }
    }

    pub(crate) fn grant_refused(path: PathBuf, reason: GrantRefusal, message: impl Into<String>) -> SandboxError {
        SandboxError::GrantRefused { path, reason, message: message.into() }
    }

    pub(crate) fn unsafe_path(path: PathBuf, reason: PathRefusal, message: impl Into<String>) -> SandboxError {
        SandboxError::UnsafePath { path, reason, message: message.into() }
    }

    pub(crate) fn limit(what: &'static str, limit: usize, message: impl Into<String>) -> SandboxError {
        SandboxError::LimitExceeded { what, limit: u64::try_from(limit).unwrap_or(u64::MAX), message: message.into() }
    }

    /// The message of a refusal of the request ([`SandboxError::Invalid`],
    /// [`SandboxError::Unsupported`], [`SandboxError::GrantRefused`],
    /// [`SandboxError::UnsafePath`], [`SandboxError::LimitExceeded`],
    /// [`SandboxError::BadRequest`]); `None` for every other error.
    pub fn refusal(&self) -> Option<&str> {
        match self {
            SandboxError::Invalid { message, .. }
            | SandboxError::Unsupported { message, .. }
            | SandboxError::GrantRefused { message, .. }
            | SandboxError::UnsafePath { message, .. }
            | SandboxError::LimitExceeded { message, .. } => Some(message),
            SandboxError::BadRequest(m) => Some(m),
            _ => None,
        }
    }

    /// The exit code a CLI should use: 127 not found, 126 not executable,
    /// 124 timed out and 130 cancelled while waiting for the workspace or
    /// before the command started (as
    /// for a run killed by its timeout or a cancellation), 125 for any other
    /// failure of the wrapper (GNU convention).
    pub fn exit_code(&self) -> u8 {
        match self {
            SandboxError::Exec { source, .. } if source.raw_os_error() == Some(libc::ENOENT) => status::NOT_FOUND,
            SandboxError::Exec { .. } => status::CANNOT_EXECUTE,
            SandboxError::TimedOutWaiting { .. } | SandboxError::TimedOutBeforeStart { .. } => status::TIMED_OUT,
            SandboxError::CancelledWaiting { .. } | SandboxError::CancelledBeforeStart { .. } => status::CANCELLED,
            _ => status::FAILED,
        }
    }

    /// The command's result, when the command ran but a step after it
    /// failed ([`SandboxError::AfterRun`]).
    pub fn result(&self) -> Option<&ExecResult> {
        match self {
            SandboxError::AfterRun { result, .. } => result.as_deref(),
            _ => None,
        }
    }
}

/// Resource limits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// Most processes at once.
    pub pids: Option<u64>,
    /// Most memory, in bytes.
    pub memory: Option<u64>,
}

/// What to run and with which access.
#[derive(Debug, Clone)]
pub struct ExecRequest {
    /// The workspace directory (bound at its own real path).
    pub workspace: PathBuf,
    /// The command and its arguments.
    pub argv: Vec<OsString>,
    /// Working directory (default: the workspace).
    pub cwd: Option<PathBuf>,
    /// Whether the whole workspace is writable.
    pub writable: bool,
    /// Write grants: paths in the workspace (relative or absolute) or
    /// absolute host paths; `/tmp` means the host's `/tmp`.
    pub write: Vec<PathBuf>,
    /// Extra read-only roots.
    pub read: Vec<PathBuf>,
    /// Deny globs: matching paths are masked.
    pub deny: Vec<String>,
    /// Extra protected paths, read-only even in a writable workspace.
    pub protect: Vec<PathBuf>,
    /// The policy file, protected like `.git/hooks`.
    pub policy_file: Option<PathBuf>,
    /// Network isolation.
    pub network: Network,
    /// Environment entries.
    pub env: Vec<(OsString, OsString)>,
    /// Names copied from the caller's environment.
    pub inherit_env: Vec<OsString>,
    /// Wall-clock timeout of the whole run, from the call: a wait for
    /// another writable run of the workspace counts (see
    /// [`SandboxError::TimedOutWaiting`]).
    pub timeout: Option<Duration>,
    /// Resource limits.
    pub limits: Limits,
    /// Cap on captured output, stdout and stderr together.
    pub max_output_bytes: usize,
    /// Break one layer on purpose (debug helpers only; tests).
    pub test_switches: TestSwitches,
    /// Opt into a named degraded mode (`Mode::LandlockOnly`) where user
    /// namespaces are unavailable. `None`: the full sandbox or a refusal.
    /// `Some(Mode::Full)` is refused ([`SandboxError::NotADegradedMode`]).
    pub degraded: Option<Mode>,
    /// Report the writes the kernel refused ([`ExecResult::refused_writes`]);
    /// on by default. The report never changes what the kernel allows.
    pub report_refused_writes: bool,
    /// The workspace is a scope of this directory, which holds it (a
    /// `Workspace::scope`, `Runner::scoped`). The git dirs are found from
    /// there too, so a submodule or any git dir of the parent inside the
    /// scope keeps its protections and its git guard; and a run that
    /// writes shares the parent's lock and git-guard records, so the last
    /// writable run of either to end runs the guard for all (otherwise the
    /// parent's cleanup could remove, under a run of the scope, what that
    /// run's plan took for the user's). `None`: the workspace stands alone.
    pub scope_of: Option<PathBuf>,
    /// The programs a shell line names (set by the runner from the policy
    /// checker's plan), for a hint when the shell says one is not found:
    /// the shell's message names it but not why (`PATH` inside, a toolchain
    /// the sandbox does not show). Empty: no hint.
    pub programs: Vec<String>,
}

/// Refuse `degraded: Some(Mode::Full)` (or any mode that is not a degraded
/// one): the full sandbox is `None`, as the command line and the policy file
/// spell it (both refuse `full` as a degraded mode). Refused rather than
/// read as `None`, so that every layer (the planner, the `--pids` check,
/// the kill mechanism, the result's `degraded`) sees one meaning, and a
/// caller that thought it asked for something else learns it did not.
fn not_full_as_degraded(req: &ExecRequest) -> Result<(), SandboxError> {
    match req.degraded {
        Some(mode) if !Mode::DEGRADED.contains(&mode) => Err(SandboxError::NotADegradedMode { mode }),
        _ => Ok(()),
    }
}

/// Default output cap: 1 MiB.
pub const DEFAULT_MAX_OUTPUT: usize = 1 << 20;

impl ExecRequest {
    /// A read-only, offline request with the defaults.
    pub fn new(workspace: impl Into<PathBuf>, argv: impl IntoIterator<Item = impl Into<OsString>>) -> Self {
        ExecRequest {
            workspace: workspace.into(),
            argv: argv.into_iter().map(Into::into).collect(),
            cwd: None,
            writable: false,
            write: Vec::new(),
            read: Vec::new(),
            deny: Vec::new(),
            protect: Vec::new(),
            policy_file: None,
            network: Network::None,
            env: Vec::new(),
            inherit_env: Vec::new(),
            timeout: None,
            limits: Limits::default(),
            max_output_bytes: DEFAULT_MAX_OUTPUT,
            test_switches: TestSwitches::default(),
            degraded: None,
            report_refused_writes: true,
            scope_of: None,
            programs: Vec::new(),
        }
    }
}

/// Which output stream a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// The command's standard input.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Stdin {
    /// `/dev/null`.
    #[default]
    Null,
    /// The caller's stdin, safely: the command never holds a descriptor of
    /// the caller's input. A pipe, FIFO or stream socket is relayed into a
    /// fresh pipe without being consumed, and exactly the bytes the command
    /// read are then taken from it (the rest stays for the caller's next
    /// reader); a regular file is fed with positional reads, so the caller's
    /// offset does not move and nothing is consumed (a `while read` loop
    /// around portcullis keeps all its lines); anything else (a device, a
    /// datagram socket) is copied by a thread that reads ahead. Terminals
    /// should be given as `Null` (see the CLI). A stdin that is the null
    /// device itself is treated as `Null` (no thread, nothing shared). One
    /// relay at a time per process: a second run relaying stdin while one
    /// does is refused.
    Copy,
}

/// Live output callback (`Sync` too, so that a run is a `Send` future).
pub type OutputSink = Box<dyn FnMut(Stream, &[u8]) + Send + Sync>;

/// How to run.
#[derive(Default)]
pub struct RunOptions {
    /// Standard input.
    pub stdin: Stdin,
    /// Called with each chunk of output as it arrives (within the cap).
    pub on_output: Option<OutputSink>,
    /// Cancels the run: the whole sandbox is killed. A token already
    /// cancelled when the run is about to start starts nothing
    /// ([`SandboxError::CancelledBeforeStart`]).
    pub cancel: Option<CancellationToken>,
    /// The sink gets every chunk, with no cap, and the result keeps none
    /// (its `stdout` and `stderr` stay empty, `truncated` false): for a
    /// caller that keeps its own bounded copy, such as a background job's
    /// ring of the newest output (`workspace::jobs`).
    pub stream_only: bool,
}

/// Spawns sandboxed commands. A clone shares the original's pool of
/// pre-made sandboxes ([`Sandbox::with_pool`]).
#[derive(Debug, Clone)]
pub struct Sandbox {
    /// How its helpers start (`launch::Launcher`: through a zygote of its
    /// own, but a one-shot sandbox's).
    launcher: launch::Launcher,
    cgroup: Result<CgroupHost, NoCgroup>,
    uid: u32,
    gid: u32,
    /// Pre-made sandboxes (`sandbox::pool`), when asked for.
    pool: Option<std::sync::Arc<pool::Pool>>,
    /// The network every `network = "none"` run of the full mode joins
    /// ([`Sandbox::with_shared_network`]); `None`: each makes its own.
    network: Option<std::sync::Arc<network::SharedNetwork>>,
    /// The teardowns runs left behind their results ([`Sandbox::settle`]).
    behind: behind::Behind,
    /// Whether walks of writable areas remember files found without file
    /// capabilities, for later walks (`links::read_only_names`): not in a
    /// one-shot sandbox, which makes one walk.
    remembers: bool,
}

/// Where the helper is looked for, in order.
pub fn helper_candidates() -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("PORTCULLIS_HELPER") {
        out.push(PathBuf::from(p));
    }
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            out.push(dir.join("portcullis-helper"));
            // Test binaries live in target/<profile>/deps, examples in
            // target/<profile>/examples.
            if dir.file_name().is_some_and(|n| n == "deps" || n == "examples") {
                if let Some(up) = dir.parent() {
                    out.push(up.join("portcullis-helper"));
                }
            }
        }
    }
    out
}

impl Sandbox {
    /// Find the helper and probe the host's cgroup.
    pub fn new() -> Result<Sandbox, SandboxError> {
        let searched = helper_candidates();
        let helper = searched.iter().find(|p| p.is_file()).cloned().ok_or(SandboxError::HelperNotFound { searched })?;
        Ok(Self::with_helper(helper))
    }

    /// Use this helper binary.
    pub fn with_helper(helper: PathBuf) -> Sandbox {
        let cgroup = cgroup::discover();
        if let Ok(host) = &cgroup {
            cgroup::sweep_orphans(&host.parent);
        }
        Sandbox {
            launcher: launch::Launcher::resident(helper),
            cgroup,
            uid: nix::unistd::getuid().as_raw(),
            gid: nix::unistd::getgid().as_raw(),
            network: None,
            pool: None,
            behind: behind::Behind::default(),
            remembers: true,
        }
    }

    /// A sandbox for one command, such as `portcullis exec`'s: what its
    /// runs leave behind their results (the helper's exit, the namespaces'
    /// teardown, the cgroup leaf) is finished by [`Sandbox::settle`] on the
    /// caller's task, which calls it right after the result, or else by the
    /// sandbox's drop, not by a thread of the sandbox's own (see
    /// `sandbox::behind`). A caller that keeps the sandbox for more commands
    /// without settling after each would keep their teardowns until then.
    pub fn one_shot(mut self) -> Sandbox {
        self.behind = behind::Behind::kept();
        self.remembers = false;
        // One helper: spawned, not forked by a zygote started for it.
        self.launcher = launch::Launcher::direct(self.launcher.helper().to_path_buf());
        self
    }

    /// Run every `network = "none"` command of the full mode in one network
    /// namespace with only loopback, made on the first such run and kept
    /// until [`Sandbox::release_network`] or the sandbox is dropped: the
    /// commands reach each other over loopback (a dev server started in one
    /// is reachable by the next); nothing else reaches them or is reached.
    /// A `Workspace` does this; without it every run gets a private one.
    pub fn with_shared_network(mut self) -> Sandbox {
        self.network = Some(std::sync::Arc::new(network::SharedNetwork::new()));
        self
    }

    /// Whether runs share one network ([`Sandbox::with_shared_network`]).
    pub fn shares_network(&self) -> bool {
        self.network.is_some()
    }

    /// Close the shared network's descriptors: it is gone once the runs
    /// going on end, and later runs that would join it fail
    /// ([`SandboxError::NetworkReleased`]).
    pub fn release_network(&self) {
        if let Some(n) = &self.network {
            n.release();
        }
    }

    /// Keep `size` sandboxes made ahead (0: none, the default): a run whose
    /// plan one admits starts in it, skipping the namespaces, the system
    /// mounts, `/proc`, `/dev` and the cgroup leaf, which the next slot then
    /// makes while the command runs. Each slot runs one command and is never
    /// reused. See `docs/sandbox.md`, "Pre-made sandboxes".
    pub fn with_pool(mut self, size: usize) -> Sandbox {
        self.pool = (size > 0).then(|| {
            std::sync::Arc::new(pool::Pool::new(size, self.launcher.clone(), self.cgroup.as_ref().ok().cloned()))
        });
        self
    }

    /// Start making the pool's slots for runs like `req` (which is only
    /// planned), instead of waiting for the first run to show what they
    /// share. Does nothing without a pool, or once it has made slots.
    pub fn prime_pool(&self, req: &ExecRequest) -> Result<(), SandboxError> {
        let Some(p) = &self.pool else { return Ok(()) };
        let plan = self.plan_opt(None, req)?;
        match (&plan.spec.netns, &self.network) {
            (portcullis_helper::spec::Netns::Private, _) => p.prime(&plan, None),
            (_, Some(n)) => {
                // The shared network is made first (once, by a helper of its
                // own), on a thread of its own: building a workspace does not
                // wait for it.
                let (p, n, launcher, uid) =
                    (std::sync::Arc::clone(p), std::sync::Arc::clone(n), self.launcher.clone(), self.uid);
                let _ = std::thread::Builder::new().name("portcullis-pool".into()).spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build();
                    if let Ok(net) = rt.map_err(drop).and_then(|rt| rt.block_on(n.get(&launcher, uid)).map_err(drop)) {
                        p.prime(&plan, Some(&net));
                    }
                });
            }
            (_, None) => {}
        }
        Ok(())
    }

    /// The pool's state, when there is one.
    pub fn pool_status(&self) -> Option<PoolStatus> {
        self.pool.as_ref().map(|p| p.status())
    }

    /// Wait (at most `bound`) until every teardown runs of this sandbox (and
    /// of its clones) left behind their results is done: their helpers
    /// reaped, their namespaces gone, their cgroups removed. A run returns
    /// once nothing of its command is left; its sandbox's own processes
    /// exit just after (see `docs/sandbox.md`, "The run's end"). Whether
    /// all were done in time.
    pub async fn settle(&self, bound: Duration) -> bool {
        self.behind.settle(bound).await
    }

    /// Drop every pre-made sandbox and make no more (the sandbox still runs
    /// commands, each with a fresh helper).
    pub fn close_pool(&self) {
        if let Some(p) = &self.pool {
            p.close();
        }
    }

    /// Debug builds, for tests: the zygote's next `n` answers are taken as
    /// lost, as when their pidfd finds no room in this process (see
    /// `launch::Launcher`). Does nothing in a release build.
    #[doc(hidden)]
    pub fn lose_zygote_answers_for_tests(&self, n: u32) {
        self.launcher.lose_answers_for_tests(n);
    }

    /// The helper in use.
    pub fn helper(&self) -> &Path {
        self.launcher.helper()
    }

    /// The cgroup host, or why there is none.
    pub fn cgroup_host(&self) -> Result<&CgroupHost, &NoCgroup> {
        self.cgroup.as_ref()
    }

    /// Resolve a request into a plan without running anything.
    pub fn plan(&self, req: &ExecRequest) -> Result<Plan, SandboxError> {
        self.plan_opt(None, req)
    }

    /// Plan, with a compiled profile or without.
    fn plan_opt(&self, profile: Option<&Profile>, req: &ExecRequest) -> Result<Plan, SandboxError> {
        self.plan_checking(profile, req).map(|(plan, _)| plan)
    }

    /// [`Sandbox::plan_opt`], with its alias check handed back for the run
    /// to make again at its start ([`Sandbox::run_locked`]).
    fn plan_checking(
        &self,
        profile: Option<&Profile>,
        req: &ExecRequest,
    ) -> Result<(Plan, Option<aliases::AliasCheck>), SandboxError> {
        not_full_as_degraded(req)?;
        let shared = network::joins(self.network.is_some(), req.network, req.degraded.unwrap_or(Mode::Full));
        let contained = containment::decide_with(&self.cgroup, req, self.uid, shared)?;
        let (mut plan, aliases) = plan::build(req, self.uid, self.gid, contained, profile, self.remembers)?;
        network::choose(&mut plan.spec, self.network.is_some(), self.uid);
        Ok((plan, aliases))
    }

    /// The shared network `plan` joins, made now if this is its first run.
    async fn network_for(&self, plan: &Plan) -> Result<Option<std::sync::Arc<network::Namespaces>>, SandboxError> {
        match (&plan.spec.netns, &self.network) {
            (portcullis_helper::spec::Netns::Private, _) => Ok(None),
            (_, Some(n)) => n.get(&self.launcher, self.uid).await.map(Some),
            (_, None) => Err(SandboxError::invalid(
                "plan",
                "the plan joins a shared network, but this sandbox has none (Sandbox::with_shared_network); plan \
                 with the sandbox that runs it",
            )),
        }
    }

    /// Plan and run. A run that writes is planned once, under the
    /// workspace's lock (see [`Sandbox::run_plan`]).
    pub async fn run(&self, req: &ExecRequest, opts: RunOptions) -> Result<ExecResult, SandboxError> {
        self.run_checked(req, opts, |_| Ok(())).await
    }

    /// [`Sandbox::run`], with `check` judging the plan the run will use
    /// (made under the workspace's lock for a run that writes) before
    /// anything starts: an error from it runs nothing. The runner checks
    /// there that links resolved by the plan grant no more than the gate
    /// allowed.
    pub async fn run_checked(
        &self,
        req: &ExecRequest,
        opts: RunOptions,
        check: impl FnOnce(&Plan) -> Result<(), SandboxError>,
    ) -> Result<ExecResult, SandboxError> {
        self.run_checked_with(None, req, opts, check).await
    }

    /// [`Sandbox::run_checked`], planning with `profile` when given
    /// ([`Sandbox::plan_with`]: the same plan, less recompiled).
    pub async fn run_checked_with(
        &self,
        profile: Option<&Profile>,
        req: &ExecRequest,
        opts: RunOptions,
        check: impl FnOnce(&Plan) -> Result<(), SandboxError>,
    ) -> Result<ExecResult, SandboxError> {
        let start = Instant::now();
        // The timeout covers the whole run, waiting for the workspace too.
        let deadline = req.timeout.map(|t| tokio::time::Instant::now() + t);
        if !req.writable && req.write.is_empty() {
            let (plan, aliases) = self.plan_checking(profile, req)?;
            check(&plan)?;
            let held = self.take_locks(&plan.workspace, false, req, deadline, opts.cancel.as_ref()).await?;
            return self.run_locked(&plan, aliases, req, opts, start, deadline, held).await;
        }
        let ws = canonical_workspace(req)?;
        let held = self.take_locks(&ws, true, req, deadline, opts.cancel.as_ref()).await?;
        let (plan, aliases) = self.plan_locked(profile, req)?;
        if plan.workspace != ws {
            return Err(SandboxError::invalid(
                "workspace",
                format!(
                "the workspace {} resolved to {} when it was locked and to {} when it was planned; name its real path",
                req.workspace.display(),
                ws.display(),
                plan.workspace.display()
            ),
            ));
        }
        check(&plan)?;
        self.run_locked(&plan, aliases, req, opts, start, deadline, held).await
    }

    /// Run exactly `plan`, made by [`Sandbox::plan`] for the same request.
    ///
    /// A plan that writes is checked once the run holds the workspace's
    /// lock: the request is planned again there (missing grants inside the
    /// workspace are created first, as the plan says), and when anything of
    /// the fresh plan but `create_grants` differs from `plan` (a hard link,
    /// a `.git`, a hook, a mount appeared or went since), nothing runs and
    /// the run fails with [`SandboxError::PlanChanged`]: another run (or
    /// the user) changed the tree, and a plan made before that could let
    /// what it made escape this run's git guard or link check. Plan again,
    /// or use [`Sandbox::run`], which plans under the lock itself.
    ///
    /// The lock a writable run holds is shared: other writable runs of the
    /// workspace may run beside it, and change the tree after this check
    /// (or after [`Sandbox::run`]'s plan) as well as before. What each part
    /// of the plan snapshots stays safe against them:
    /// * missing git redirections (`git_guard`), hooks, includes, gitlinks
    ///   (`git_indexes`, `git_trees`): what another run creates is in its
    ///   own record, and the cleanup of every record waits until no
    ///   writable run is left (`sandbox::pending`), so a plan that took it
    ///   for the user's (and binds it read-only, or reads config from it)
    ///   only protects more, and is never undone under this run;
    /// * `hard_linked`, `unlistable`, renames: another run can link or move
    ///   only names of one of its own writable mounts (a link or rename
    ///   across mounts fails with `EXDEV`, its carve-outs and masks are
    ///   mount points), so what it can bring into this run's writable areas
    ///   is a file it may write itself (see "Writable runs side by side" in
    ///   docs/sandbox.md for what that leaves);
    /// * `privileged`: no sandboxed command can make a setuid, setgid or
    ///   file-capability program (seccomp, no capabilities);
    /// * a path of the plan swapped for a symbolic link: the helper opens
    ///   every bind source with `RESOLVE_NO_SYMLINKS` and walks every
    ///   destination with `O_NOFOLLOW`, so the setup fails and nothing runs;
    /// * missing grants: created by descriptor, an existing directory kept,
    ///   a link on the way refused (two runs may create one at once);
    /// * host mounts (`aliases`): a sandbox cannot change the host's mounts.
    pub async fn run_plan(&self, plan: &Plan, req: &ExecRequest, opts: RunOptions) -> Result<ExecResult, SandboxError> {
        not_full_as_degraded(req)?;
        let start = Instant::now();
        let deadline = req.timeout.map(|t| tokio::time::Instant::now() + t);
        let writes = plan.writable || !plan.write_grants.is_empty() || !plan.create_grants.is_empty();
        let held = self.take_locks(&plan.workspace, writes, req, deadline, opts.cancel.as_ref()).await?;
        let mut aliases = None;
        if writes {
            // The fresh plan equals `plan` (but for the grants it created),
            // so its alias check is `plan`'s, judged at the run's start.
            let fresh;
            (fresh, aliases) = self.plan_locked(None, req)?;
            if let Some(what) = stale_part(plan, &fresh) {
                return Err(SandboxError::PlanChanged { workspace: plan.workspace.clone(), what });
            }
        }
        self.run_locked(plan, aliases, req, opts, start, deadline, held).await
    }

    /// The locks a run holds until it and its git guard are done: the
    /// workspace's, shared, for a run that writes (writable runs of one
    /// workspace run side by side; a cleanup of their git guard holds it
    /// exclusive, briefly: see `sandbox::pending`), and, without Landlock's
    /// abstract-socket scoping (ABI 6), the host network's for runs on it
    /// (they share its abstract sockets, over which one could hand
    /// descriptors to another: a writable one runs alone among them).
    async fn take_locks(
        &self,
        ws: &Path,
        writes: bool,
        req: &ExecRequest,
        deadline: Option<tokio::time::Instant>,
        cancel: Option<&CancellationToken>,
    ) -> Result<Held, SandboxError> {
        let mut held = Held { host_network: None, workspace: None };
        // A shared network shares its abstract sockets among the
        // workspace's runs as the host's does.
        let shares_sockets = req.network == Network::Host || (self.network.is_some() && req.network == Network::None);
        if shares_sockets && sys::landlock_abi() < 6 {
            let kind = if writes { lock::Kind::Exclusive } else { lock::Kind::Shared };
            held.host_network = Some(
                lock::acquire(
                    lock::open_dir(self.uid)?.as_fd(),
                    lock::Key::HostNetwork,
                    ws,
                    self.uid,
                    kind,
                    deadline,
                    cancel,
                )
                .await?,
            );
        }
        if writes {
            let anchor = lock_anchor(ws, req.scope_of.as_deref())?;
            let key = lock::Key::Workspace(&anchor);
            let (dir, name) = lock::open_for_records(&anchor, self.uid)?;
            let mut records = pending::Records::open(dir, &lock::dir(self.uid), &name, self.uid)?;
            records.anchor(&anchor);
            // Records left by killed runs are cleaned before this run is
            // planned when no writable run is going (its plan would take
            // what they planted for the user's).
            let early = records.clean_if_alone(key, self.uid)?;
            let lock =
                lock::acquire(records.lock_dir(), key, ws, self.uid, lock::Kind::Shared, deadline, cancel).await?;
            // A cleanup that left no record may have removed the records'
            // directory since it was opened.
            records.refresh()?;
            held.workspace = Some(pending::Hold::new(lock, records, early));
        }
        Ok(held)
    }

    /// Plan a run that writes, under the workspace's lock: missing grants
    /// inside the workspace are created first (then planned on for real).
    /// Its alias check is handed back, for [`Sandbox::run_locked`].
    fn plan_locked(
        &self,
        profile: Option<&Profile>,
        req: &ExecRequest,
    ) -> Result<(Plan, Option<aliases::AliasCheck>), SandboxError> {
        let (mut plan, mut aliases) = self.plan_checking(profile, req)?;
        if !plan.create_grants.is_empty() {
            for g in &plan.create_grants {
                let rel = g.strip_prefix(&plan.workspace).unwrap_or(g);
                grants::create(&plan.workspace, rel)?;
            }
            (plan, aliases) = self.plan_checking(profile, req)?;
            if let Some(g) = plan.create_grants.first() {
                return Err(SandboxError::CreateGrant {
                    path: g.clone(),
                    source: io::Error::other("it is still missing after it was created"),
                });
            }
        }
        Ok((plan, aliases))
    }

    /// Run a plan; `held` (see [`Sandbox::take_locks`]) is kept until the
    /// run and its git guard are done. One line per step (`sandbox::run`);
    /// the helper gets `plan.spec` as it is. A run that writes records
    /// what its git guard needs before its command starts, and at its end
    /// does the guard of every writable run of the workspace, or leaves it
    /// to the last one still going (`sandbox::pending`).
    #[allow(clippy::too_many_arguments)]
    async fn run_locked(
        &self,
        plan: &Plan,
        aliases: Option<aliases::AliasCheck>,
        req: &ExecRequest,
        mut opts: RunOptions,
        start: Instant,
        deadline: Option<tokio::time::Instant>,
        held: Held,
    ) -> Result<ExecResult, SandboxError> {
        let Held { host_network: _host_network, workspace: mut hold } = held;
        not_late(plan, start, deadline)?;
        if opts.cancel.as_ref().is_some_and(CancellationToken::is_cancelled) {
            return Err(SandboxError::CancelledBeforeStart { workspace: plan.workspace.clone() });
        }
        if matches!(opts.stdin, Stdin::Copy) {
            stdin::refuse_named_fifo()?;
        }
        run::check_containment(plan)?;
        let net = self.network_for(plan).await?;
        // The host's mount table, read once, now that the plan is made: for
        // the plan's alias check made again (an alias the host mounted since
        // the plan is refused too) and for the pool's judgement of a slot
        // (which reads it itself when there is no check).
        let mountinfo = match &aliases {
            Some(a) => {
                let table = aliases::read_table()?;
                a.against(&table)?;
                Some(table)
            }
            None => None,
        };
        // Under way until this run is over (the pool judges its pressure by
        // the runs beside it).
        let in_flight = self.pool.as_ref().map(pool::Pool::enter);
        let mut slot = self
            .pool
            .as_ref()
            .zip(in_flight.as_ref())
            .and_then(|(p, me)| p.take(plan, &opts.stdin, net.as_ref(), me, mountinfo));
        let mut cg = match slot.as_mut() {
            Some(s) => s.take_cgroup(),
            None => run::make_cgroup(plan, self.cgroup.as_ref().ok())?,
        };
        if let Some(h) = hold.as_mut() {
            h.record(plan, cg.as_ref().map(|c| c.path.as_path()))?;
        }
        // A slot prepared for this run's shape installed its filter already,
        // and its observer serves the listener since.
        let mut observing = match slot.as_mut().and_then(pool::Slot::take_observing) {
            Some(o) => o,
            None => observe::Setup::new(&plan.spec),
        };
        let (mut warnings, mut failures) = (Vec::new(), Vec::new());
        let spawned = match slot {
            Some(s) => s.launch(plan, &mut observing),
            None => run::spawn_helper(&self.launcher, plan, cg.as_ref(), net.as_deref(), &mut observing, opts.stdin),
        };
        // The next slot is made now if no other is ready, else once this
        // run has ended (`Pool::refill_if_short`).
        if let Some(p) = &self.pool {
            p.refill_if_short();
        }
        let (mut launched, streams) = match spawned {
            Ok(spawned) => spawned,
            Err(e) => {
                // The helper (if it started) is killed and reaped; its
                // record is written: empty the cgroup and do the guard as
                // after any run, since the command may have started.
                run::empty_cgroup(cg.as_mut(), plan, &mut warnings, &mut failures).await;
                if let Some(h) = hold {
                    h.finish(false, &mut warnings, &mut failures);
                }
                if let Some(p) = &self.pool {
                    p.refill();
                }
                return after_run(failures, Err(e));
            }
        };
        let mut waited = run::wait(&mut launched, streams, req, &mut opts, deadline, cg.as_ref(), &mut warnings).await;
        if waited.early() && !run::only_scaffolding(cg.as_ref(), launched.child.pid(), launched.pid1) {
            run::wait_helper(&mut launched, cg.as_ref(), &mut waited).await;
        }
        let run::Launched { lifeline, child, relay, held, .. } = launched;
        let early = waited.early();
        if early {
            // Nothing of the command is left: the helper, its pid 1 and
            // their namespaces go behind the result (`sandbox::behind`),
            // and the pool refills after them.
            let rest = behind::Rest::new(lifeline, child, cg.take()).holding(held);
            self.behind.start(rest.then_refill(self.pool.as_ref()));
        } else {
            drop((lifeline, child, held));
            run::empty_cgroup(cg.as_mut(), plan, &mut warnings, &mut failures).await;
        }
        let refused_writes = observing.finish().await;
        if let Some(h) = hold {
            h.finish(early, &mut warnings, &mut failures);
        }
        // Up to the pool's size again, now that this run is over (after an
        // early end, the reaper does it once the teardown is done).
        if let (false, Some(p)) = (early, &self.pool) {
            p.refill();
        }
        run::settle_stdin(relay, &mut warnings);
        let mut result = run::assemble(plan, run::Ended { waited, refused_writes, warnings, failures, start })?;
        hint::programs_not_found(plan, &req.programs, &mut result);
        Ok(result)
    }
}

/// The directory whose lock and git-guard records a run that writes in
/// `ws` (a real path) uses: the one it is a scope of (see
/// [`ExecRequest::scope_of`]), or `ws` itself.
fn lock_anchor(ws: &Path, scope_of: Option<&Path>) -> Result<PathBuf, SandboxError> {
    match scope_of {
        Some(parent) => plan::scope_parent(ws, parent),
        None => Ok(ws.to_path_buf()),
    }
}

/// The locks of a run (see [`Sandbox::take_locks`]).
struct Held {
    /// The host network's, on a kernel without abstract-socket scoping.
    host_network: Option<nix::fcntl::Flock<std::fs::File>>,
    /// The workspace's, shared, for a run that writes.
    workspace: Option<pending::Hold>,
}

/// A deadline that passed while the run was planned (or waited): nothing is
/// started.
fn not_late(plan: &Plan, start: Instant, deadline: Option<tokio::time::Instant>) -> Result<(), SandboxError> {
    if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
        return Err(SandboxError::TimedOutBeforeStart {
            workspace: plan.workspace.clone(),
            stage: "while the run was planned (paths, deny globs, the hard-link and mount checks)",
            waited: start.elapsed(),
        });
    }
    Ok(())
}

/// The first part of `given` that `fresh` (the same request planned again
/// under the lock) does not match, ignoring `create_grants` (the grants
/// `given` said would be created, and now are). Compared as their
/// serialized form, so every field of the plan counts.
fn stale_part(given: &Plan, fresh: &Plan) -> Option<String> {
    let as_map = |p: &Plan| match serde_json::to_value(p) {
        Ok(serde_json::Value::Object(m)) => Some(m),
        _ => None,
    };
    let (Some(g), Some(f)) = (as_map(given), as_map(fresh)) else {
        return Some("the plan (it could not be compared)".into());
    };
    let keys: std::collections::BTreeSet<String> = g.keys().chain(f.keys()).cloned().collect();
    let stale = keys.into_iter().filter(|k| k.as_str() != "create_grants").find(|k| g.get(k) != f.get(k));
    stale.map(|k| {
        if k == "spec" {
            // Name the part of the spawn spec (mounts, landlock, ...).
            let part = |m: &serde_json::Map<String, serde_json::Value>| m.get("spec").cloned();
            match (part(&g), part(&f)) {
                (Some(serde_json::Value::Object(a)), Some(serde_json::Value::Object(b))) => a
                    .keys()
                    .chain(b.keys())
                    .find(|x| a.get(*x) != b.get(*x))
                    .map_or_else(|| "spec".to_string(), |x| format!("spec.{x}")),
                _ => "spec".to_string(),
            }
        } else {
            k
        }
    })
}

/// The run's outcome, unless a security step after it failed: then the
/// first failure, carrying the result (the others are in its warnings).
fn after_run(
    failures: Vec<(Cleanup, &'static str, PathBuf, io::Error)>,
    outcome: Result<ExecResult, SandboxError>,
) -> Result<ExecResult, SandboxError> {
    let Some((cleanup, step, path, errno)) = failures.into_iter().next() else { return outcome };
    // A setup error means the command never ran; the cleanup failure still
    // comes first, since the workspace is what the caller must not trust.
    Err(SandboxError::AfterRun { cleanup, step, path, errno, result: outcome.ok().map(Box::new) })
}

async fn pump<R: tokio::io::AsyncRead + Unpin>(mut r: R, stream: Stream, tx: mpsc::Sender<(Stream, Vec<u8>)>) {
    // Room, not zeroes: `read_buf` reads into the spare capacity, so only
    // the pages output lands on are touched. A zeroed 64 KiB buffer per
    // stream was 32 page faults and a 128 KiB memset on every run, most of
    // them for commands that print little or nothing.
    let mut buf = Vec::with_capacity(64 * 1024);
    loop {
        buf.clear();
        match r.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                if tx.send((stream, buf.clone())).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Pass on the helper's records as they come (whole records only), until
/// the report pipe's end.
async fn read_records(mut rx: tokio::net::unix::pipe::Receiver, tx: mpsc::UnboundedSender<Record>) {
    let mut data = Vec::new();
    let mut buf = [0u8; 16 * RECORD_LEN];
    loop {
        match rx.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                data.extend_from_slice(&buf[..n]);
                let whole = data.len() / RECORD_LEN * RECORD_LEN;
                for c in data[..whole].chunks_exact(RECORD_LEN) {
                    if let Some(r) = <&[u8; RECORD_LEN]>::try_from(c).ok().and_then(Record::decode) {
                        if tx.send(r).is_err() {
                            return;
                        }
                    }
                }
                data.drain(..whole);
            }
        }
    }
}

fn setup_error(plan: &Plan, step: Result<Step, u16>, errno: i32, detail: u32) -> SandboxError {
    let source = io::Error::from_raw_os_error(errno);
    let step = step.ok();
    // Only the mount steps' `detail` indexes the mounts (for `Clone` it
    // names the failed call).
    let indexes_mounts = matches!(step, Some(Step::OpenSources | Step::Idmap | Step::Mount));
    let path = (detail != NO_DETAIL && indexes_mounts)
        .then(|| usize::try_from(detail).ok())
        .flatten()
        .and_then(|i| plan.spec.mounts.get(i))
        .map(|op| PathBuf::from(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(op.dst())));
    if let (Some(s), Mode::Full) = (step, plan.spec.mode) {
        if let Some(b) = blocked::diagnose(s, errno, detail) {
            return SandboxError::NamespacesBlocked(b);
        }
    }
    match (step, errno) {
        (Some(Step::NetNamespace), _)
            if matches!(detail, portcullis_helper::report::NET_DETAIL_JOIN_USERNS | portcullis_helper::report::NET_DETAIL_JOIN_NETNS) =>
        {
            SandboxError::Network {
                stage: if detail == portcullis_helper::report::NET_DETAIL_JOIN_USERNS {
                    "joining its user namespace (setns) before the clone"
                } else {
                    "joining it (setns) before the clone"
                },
                source,
            }
        }
        (Some(Step::Exec), _) => {
            let program = plan.spec.argv.first().map(|a| String::from_utf8_lossy(a).into_owned()).unwrap_or_default();
            let hint = match errno {
                libc::ENOENT => hint::not_found(plan, &program),
                libc::EACCES => hint::not_executable(plan, &program),
                _ => String::new(),
            };
            SandboxError::Exec { program, hint, source }
        }
        // A spec the helper cannot decode, or of another version: the
        // helper's own answer to a library of another build.
        (Some(Step::ReadSpec), libc::EINVAL) => SandboxError::HelperMismatch { source },
        // The command's user cannot enter its working directory (a
        // workspace under a directory it may not search, as /root is for
        // another user): say whose permission is missing.
        (Some(Step::Chdir), libc::EACCES | libc::EPERM) => {
            let cwd = String::from_utf8_lossy(&plan.spec.cwd).into_owned();
            SandboxError::invalid(
                "workspace",
                format!(
                    "the command cannot enter its working directory {cwd}: {source}; its user (host uid {}) needs \
                     search permission (x) on it and on every directory above it: grant that (chmod o+x, or a \
                     group), or choose a workspace this user can enter; nothing ran",
                    plan.spec.identity.outside_uid
                ),
            )
        }
        (Some(Step::JoinCgroup), _) => SandboxError::Io {
            stage: "moving pid 1 into its cgroup through cgroup.procs (clone3 is refused here, so CLONE_INTO_CGROUP \
                    is not available)",
            source,
        },

        // mount_setattr(MOUNT_ATTR_IDMAP) answers EINVAL for a filesystem
        // without idmapping support (and EPERM where its owner namespace is
        // not the initial one, e.g. a FUSE mount made in a container).
        (Some(Step::Idmap), libc::EINVAL | libc::EPERM) if path.is_some() => {
            let path = path.unwrap_or_default();
            let what = if path == plan.workspace {
                "workspace"
            } else if plan.read_roots.contains(&path) {
                "readable root"
            } else {
                "write grant"
            };
            SandboxError::IdmapRefused { what, path, source }
        }
        (Some(Step::Landlock | Step::ScopeSignals), libc::EOPNOTSUPP | libc::ENOSYS) => SandboxError::LayerUnavailable {
            layer: "Landlock",
            hint: "the kernel does not enforce Landlock; it needs Linux 5.13+ with landlock in the lsm= boot parameter (CONFIG_LSM)".into(),
            source,
        },
        (Some(Step::Seccomp), libc::EINVAL | libc::ENOSYS) => SandboxError::LayerUnavailable {
            layer: "seccomp",
            hint: "the kernel refused the seccomp filter; it needs CONFIG_SECCOMP_FILTER".into(),
            source,
        },
        _ => SandboxError::Setup { step, path, source },
    }
}

/// Describe one mount op for `--explain`.
pub fn describe_mount(op: &MountOp) -> String {
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    match op {
        MountOp::Bind { src, dst, writable, idmap } => {
            let mode = if *writable { "rw" } else { "ro" };
            let idmap = if *idmap { " idmapped(host root -> sandbox uid 0)" } else { "" };
            if src == dst {
                format!("bind-{mode} {}{idmap}", s(dst))
            } else {
                format!("bind-{mode} {} <- {}{idmap}", s(dst), s(src))
            }
        }
        MountOp::Tmpfs { dst, mode, size } => format!("tmpfs {} mode={mode:o} size={size}", s(dst)),
        MountOp::Proc { dst } => {
            format!("proc {} (sys,sysrq-trigger,irq,bus,fs read-only; kcore,keys,timer_list,... masked)", s(dst))
        }
        MountOp::Devpts { dst } => format!("devpts {} (private instance)", s(dst)),
        MountOp::Symlink { target, dst } => format!("symlink {} -> {}", s(dst), s(target)),
        MountOp::ReadOnly { dst, .. } => format!("read-only {}", s(dst)),
        MountOp::Pin { dst } => format!("pin {} (bound onto itself: cannot be renamed or removed)", s(dst)),
        MountOp::Mask { dst } => format!("mask {}", s(dst)),
    }
}

fn canonical_workspace(req: &ExecRequest) -> Result<PathBuf, SandboxError> {
    std::fs::canonicalize(&req.workspace).map_err(|source| SandboxError::Path {
        what: "workspace",
        path: req.workspace.clone(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every step the helper can report comes back as a typed error naming
    /// it (or, for the steps with a meaning of their own, as that error).
    #[test]
    fn r0201_the_library_maps_every_step() {
        let d = tempfile::Builder::new().prefix("pc-steps-").tempdir_in("/var/tmp").unwrap_or_else(|e| panic!("{e}"));
        let req = ExecRequest::new(d.path(), ["true"]);
        let contained = containment::decide(&Err(NoCgroup::NotMounted), &req, 1000).unwrap_or_else(|e| panic!("{e}"));
        let plan =
            plan::build(&req, 1000, 1000, contained, None, true).map(|(p, _)| p).unwrap_or_else(|e| panic!("{e}"));
        for s in Step::ALL {
            let e = setup_error(&plan, Ok(*s), libc::EIO, NO_DETAIL);
            match (&e, s) {
                (SandboxError::Setup { step: Some(got), path: None, .. }, _) => {
                    assert_eq!(got, s);
                    assert!(e.to_string().contains(s.describe()), "{s:?}: {e}");
                }
                (SandboxError::Exec { .. }, Step::Exec) => {}
                (SandboxError::Io { stage, .. }, Step::JoinCgroup) => assert!(stage.contains("cgroup.procs"), "{e}"),
                _ => panic!("{s:?} maps to {e:?}"),
            }
            assert_eq!(io_errno(&e), Some(libc::EIO), "{s:?} keeps its errno");
        }
        // A spec the helper cannot read: a helper of another build, and
        // the error says what to do.
        let e = setup_error(&plan, Ok(Step::ReadSpec), libc::EINVAL, NO_DETAIL);
        assert!(matches!(e, SandboxError::HelperMismatch { .. }), "{e:?}");
        assert!(e.to_string().contains("another build") && e.to_string().contains("scripts/build-static"), "{e}");
        // A working directory its user cannot enter says what to grant.
        let e = setup_error(&plan, Ok(Step::Chdir), libc::EACCES, NO_DETAIL);
        assert!(
            matches!(&e, SandboxError::Invalid { what: "workspace", message } if message.contains("search permission")
                && message.contains("Permission denied")),
            "{e:?}"
        );
        let e = setup_error(&plan, Ok(Step::ReadSpec), libc::EPERM, NO_DETAIL);
        assert!(matches!(e, SandboxError::Setup { step: Some(Step::ReadSpec), .. }), "{e:?}");
        // An unknown step (a newer helper) is still an error, not a panic.
        let e = setup_error(&plan, Err(999), libc::EIO, NO_DETAIL);
        assert!(matches!(e, SandboxError::Setup { step: None, .. }), "{e:?}");
        // Only the mount steps' detail names a mount.
        let e = setup_error(&plan, Ok(Step::Clone), libc::EIO, 0);
        assert!(matches!(e, SandboxError::Setup { path: None, .. }), "{e:?}");
        let e = setup_error(&plan, Ok(Step::Mount), libc::EIO, 0);
        assert!(matches!(e, SandboxError::Setup { path: Some(_), .. }), "{e:?}");
    }

    fn io_errno(e: &SandboxError) -> Option<i32> {
        std::error::Error::source(e).and_then(|s| s.downcast_ref::<io::Error>()).and_then(io::Error::raw_os_error)
    }
}
