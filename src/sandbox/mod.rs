//! The sandbox: plan a command, spawn the helper, supervise the run.

mod cgroup;
mod guard;
mod launch;
mod plan;
mod stdin;

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Serialize, Serializer};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use portcullis_helper::report::{Applied, Record, Step, NO_DETAIL, RECORD_LEN};
pub use portcullis_helper::spec::Mode;
use portcullis_helper::spec::{MountOp, Network, Rlimit, RlimitKind, TestSwitches};

pub use cgroup::{CgroupHost, LimitMechanism, NoCgroup};
pub(crate) use plan::lexical;
pub use plan::{Plan, DEFAULT_PROTECTED, SYSTEM_ROOTS};

use crate::sys;

/// Errors of the sandbox layer. Each names the path, step or command.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SandboxError {
    /// A path of the request could not be resolved.
    #[error("cannot resolve {what} {path}")]
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
    /// A path that must be a directory is not.
    #[error("{what} {path} is not a directory")]
    NotADirectory {
        /// Which path of the request.
        what: &'static str,
        /// The resolved path.
        path: PathBuf,
    },
    /// No command was given.
    #[error("no command given")]
    EmptyCommand,
    /// The request is inconsistent.
    #[error("{0}")]
    BadRequest(String),
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
    #[error("cannot execute {program}")]
    Exec {
        /// The program (argv[0]).
        program: String,
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
}

fn display_list(p: &[PathBuf]) -> String {
    p.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
}

impl SandboxError {
    /// The exit code a CLI should use: 127 not found, 126 not executable,
    /// 125 for any other failure of the wrapper (GNU convention).
    pub fn exit_code(&self) -> u8 {
        match self {
            SandboxError::Exec { source, .. } if source.raw_os_error() == Some(libc::ENOENT) => 127,
            SandboxError::Exec { .. } => 126,
            _ => 125,
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
    /// Wall-clock timeout.
    pub timeout: Option<Duration>,
    /// Resource limits.
    pub limits: Limits,
    /// Cap on captured output, stdout and stderr together.
    pub max_output_bytes: usize,
    /// Break one layer on purpose (debug helpers only; tests).
    pub test_switches: TestSwitches,
    /// Opt into a named degraded mode (`Mode::LandlockOnly`) where user
    /// namespaces are unavailable. `None`: the full sandbox or a refusal.
    pub degraded: Option<Mode>,
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

/// Live output callback.
pub type OutputSink = Box<dyn FnMut(Stream, &[u8]) + Send>;

/// How to run.
#[derive(Default)]
pub struct RunOptions {
    /// Standard input.
    pub stdin: Stdin,
    /// Called with each chunk of output as it arrives (within the cap).
    pub on_output: Option<OutputSink>,
    /// Cancels the run: the whole sandbox is killed.
    pub cancel: Option<CancellationToken>,
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

fn lossy<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&String::from_utf8_lossy(b))
}

fn millis<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64((d.as_secs_f64() * 1e6).round() / 1e3)
}

/// The outcome of a run.
#[derive(Debug, Clone, Serialize)]
pub struct ExecResult {
    /// Exit code, when the command exited.
    pub exit_code: Option<i32>,
    /// Signal number, when the command was killed by a signal.
    pub signal: Option<i32>,
    /// Killed by the timeout.
    pub timed_out: bool,
    /// Killed by cancellation.
    pub cancelled: bool,
    /// Output passed the cap; the rest was drained and dropped.
    pub truncated: bool,
    /// Whether the workspace was writable.
    pub writable: bool,
    /// Write grants in force.
    pub write_grants: Vec<PathBuf>,
    /// Wall time from spawn to cleanup.
    #[serde(rename = "duration_ms", serialize_with = "millis")]
    pub duration: Duration,
    /// How the tree was (or would have been) killed.
    pub kill_mechanism: KillMechanism,
    /// Why no cgroup was used, when none was.
    pub cgroup_fallback: Option<String>,
    /// The Landlock ABI in force (0: none).
    pub landlock_abi: u32,
    /// Read-only areas Landlock cannot cover (beneath a writable path).
    pub landlock_gaps: Vec<PathBuf>,
    /// How fully Landlock was enforced.
    pub landlock: LandlockStatus,
    /// Whether the seccomp filter was installed.
    pub seccomp: bool,
    /// Network isolation.
    pub network: Network,
    /// The degraded mode the run used, if one was asked for.
    pub degraded: Option<Mode>,
    /// Which mechanism enforced each limit.
    pub limits: AppliedLimits,
    /// Captured standard output (up to the cap).
    #[serde(serialize_with = "lossy")]
    pub stdout: Vec<u8>,
    /// Captured standard error (up to the cap).
    #[serde(serialize_with = "lossy")]
    pub stderr: Vec<u8>,
    /// Anything that went wrong in cleanup.
    pub warnings: Vec<String>,
}

/// Spawns sandboxed commands.
#[derive(Debug)]
pub struct Sandbox {
    helper: PathBuf,
    cgroup: Result<CgroupHost, NoCgroup>,
    uid: u32,
    gid: u32,
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
            // Test binaries live in target/<profile>/deps.
            if dir.file_name().is_some_and(|n| n == "deps") {
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
        Sandbox { helper, cgroup, uid: nix::unistd::getuid().as_raw(), gid: nix::unistd::getgid().as_raw() }
    }

    /// The helper in use.
    pub fn helper(&self) -> &Path {
        &self.helper
    }

    /// The cgroup host, or why there is none.
    pub fn cgroup_host(&self) -> Result<&CgroupHost, &NoCgroup> {
        self.cgroup.as_ref()
    }

    /// Resolve a request into a plan without running anything.
    pub fn plan(&self, req: &ExecRequest) -> Result<Plan, SandboxError> {
        if req.degraded.is_some() && req.limits.pids.is_some() {
            let pids_cgroup = self.cgroup.as_ref().is_ok_and(|h| {
                h.controllers.iter().any(|c| c == "pids")
                    && nix::unistd::access(&h.parent, nix::unistd::AccessFlags::W_OK).is_ok()
            });
            if !pids_cgroup {
                // Without a user namespace RLIMIT_NPROC counts every process
                // of the uid on the host, not this sandbox's.
                return Err(SandboxError::BadRequest(
                    "--pids in landlock-only mode needs the cgroup pids controller (RLIMIT_NPROC would count the whole uid)"
                        .into(),
                ));
            }
        }
        plan::build(req, self.uid, self.gid)
    }

    /// Plan and run.
    pub async fn run(&self, req: &ExecRequest, opts: RunOptions) -> Result<ExecResult, SandboxError> {
        let plan = self.plan(req)?;
        self.run_plan(&plan, req, opts).await
    }

    /// Run a plan made by [`Sandbox::plan`] for the same request.
    pub async fn run_plan(
        &self,
        plan: &Plan,
        req: &ExecRequest,
        mut opts: RunOptions,
    ) -> Result<ExecResult, SandboxError> {
        let start = Instant::now();
        // Writable runs of one workspace go one at a time, each planned again
        // once it holds the workspace: another writable run must not change
        // the tree between a plan and its run (a hook it made would look
        // like the user's and escape this run's git guard).
        let _ws_lock;
        let fresh;
        let plan = if plan.writable || !plan.write_grants.is_empty() {
            _ws_lock = lock_workspace(&plan.workspace, opts.cancel.as_ref()).await?;
            fresh = self.plan(req)?;
            &fresh
        } else {
            plan
        };
        let mut spec = plan.spec.clone();
        let mut warnings = Vec::new();
        let (mut cg, cgroup_fallback) = match &self.cgroup {
            Ok(host) => match host.create(req.limits.pids, req.limits.memory) {
                Ok(c) => (Some(c), None),
                Err(e) => (None, Some(e.to_string())),
            },
            Err(e) => (None, Some(e.to_string())),
        };
        let mut limits = AppliedLimits::default();
        if let Some(n) = req.limits.pids {
            limits.pids = Some(if cg.as_ref().is_some_and(|c| c.pids) {
                LimitMechanism::Cgroup
            } else if req.degraded.is_some() {
                // Sandbox::plan refused this unless a pids cgroup looked
                // usable; it could not be made after all.
                return Err(SandboxError::BadRequest(
                    "--pids in landlock-only mode needs the cgroup pids controller, and no pids cgroup could be made"
                        .into(),
                ));
            } else {
                spec.rlimits.push(Rlimit { resource: RlimitKind::Nproc, value: n });
                LimitMechanism::RlimitNproc
            });
        }
        if let Some(n) = req.limits.memory {
            limits.memory = Some(if cg.as_ref().is_some_and(|c| c.memory) {
                LimitMechanism::Cgroup
            } else {
                spec.rlimits.push(Rlimit { resource: RlimitKind::As, value: n });
                LimitMechanism::RlimitAs
            });
        }
        spec.rlimits.push(Rlimit { resource: RlimitKind::Core, value: 0 });
        spec.cgroup = cg.is_some();
        let kill_mechanism = match (cg.is_some(), req.degraded) {
            (true, _) => KillMechanism::CgroupKill,
            (false, Some(Mode::LandlockOnly)) => KillMechanism::Subreaper,
            (false, _) => KillMechanism::PidNamespace,
        };

        let io_err = |stage| move |source| SandboxError::Io { stage, source };
        let json = serde_json::to_vec(&spec)
            .map_err(|e| SandboxError::Io { stage: "encoding the spec", source: io::Error::other(e) })?;
        let memfd_orig = sys::memfd_with(c"portcullis-spec", &json).map_err(io_err("writing the spec"))?;
        // Move every fd the helper inherits above 10 (so dup2 onto 3..6 never
        // clobbers one), and drop the originals at once: a stray copy of the
        // report pipe's write end would hide its EOF.
        let memfd = sys::dup_above(&memfd_orig, 10).map_err(io_err("writing the spec"))?;
        drop(memfd_orig);
        let (report_r, report_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| SandboxError::Io { stage: "creating the report pipe", source: e.into() })?;
        let report_w = {
            let w = sys::dup_above(&report_w, 10).map_err(io_err("creating the report pipe"))?;
            drop(report_w);
            w
        };
        let (life_r, life_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
            .map_err(|e| SandboxError::Io { stage: "creating the lifeline", source: e.into() })?;
        let life_r = {
            let r = sys::dup_above(&life_r, 10).map_err(io_err("creating the lifeline"))?;
            drop(life_r);
            r
        };
        let cg_fd: Option<OwnedFd> = match &cg {
            Some(c) => Some(sys::dup_above(&c.dir, 10).map_err(io_err("passing the cgroup"))?),
            None => None,
        };

        let mut fds = vec![
            (memfd.as_raw_fd(), portcullis_helper::SPEC_FD),
            (report_w.as_raw_fd(), portcullis_helper::REPORT_FD),
            (life_r.as_raw_fd(), portcullis_helper::LIFELINE_FD),
        ];
        if let Some(c) = &cg_fd {
            fds.push((c.as_raw_fd(), portcullis_helper::CGROUP_FD));
        }
        let stdin = match opts.stdin {
            Stdin::Null => stdin::StdinPlan::Null,
            Stdin::Copy => stdin::plan()?,
        };
        // Declared before the helper, so an abandoned run drops (kills and
        // reaps) the helper first and settles the relay after.
        let mut relay = None;
        let mut child = launch::spawn(&self.helper, &fds, stdin.command_end())
            .map_err(|source| SandboxError::Spawn { helper: self.helper.clone(), source })?;
        match stdin {
            stdin::StdinPlan::Null => {}
            stdin::StdinPlan::Relay(mut r) => {
                r.start()?;
                relay = Some(r);
            }
            stdin::StdinPlan::Feed { read, write, from } => {
                drop(read);
                stdin::feed(write, from);
            }
        }
        drop((memfd, report_w, life_r, cg_fd));
        let mut lifeline = Some(life_w);

        sys::set_nonblocking(&report_r).map_err(io_err("reading the report pipe"))?;
        let report_rx =
            tokio::net::unix::pipe::Receiver::from_owned_fd(report_r).map_err(io_err("reading the report pipe"))?;
        let records = tokio::spawn(read_records(report_rx));

        let (tx, mut rx) = mpsc::channel::<(Stream, Vec<u8>)>(16);
        for (fd, stream) in [(child.stdout.take(), Stream::Stdout), (child.stderr.take(), Stream::Stderr)] {
            if let Some(fd) = fd {
                sys::set_nonblocking(&fd).map_err(io_err("reading the output"))?;
                let rx = tokio::net::unix::pipe::Receiver::from_owned_fd(fd).map_err(io_err("reading the output"))?;
                tokio::spawn(pump(rx, stream, tx.clone()));
            }
        }
        drop(tx);

        let cancel = opts.cancel.take().unwrap_or_default();
        let deadline = req.timeout.map(|t| tokio::time::Instant::now() + t);
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let mut truncated = false;
        let (mut timed_out, mut cancelled) = (false, false);
        let mut status = None;
        let mut outputs_open = true;
        let mut kill_at: Option<tokio::time::Instant> = None;
        let mut drain_deadline: Option<tokio::time::Instant> = None;
        let far = tokio::time::Instant::now() + Duration::from_secs(86400 * 365);
        loop {
            if status.is_some() && !outputs_open {
                break;
            }
            let want_kill = !(timed_out || cancelled) && status.is_none();
            tokio::select! {
                chunk = rx.recv(), if outputs_open => match chunk {
                    Some((stream, data)) => {
                        let room = req.max_output_bytes.saturating_sub(stdout.len() + stderr.len());
                        let take = room.min(data.len());
                        if take < data.len() {
                            truncated = true;
                        }
                        if take > 0 {
                            let part = &data[..take];
                            if let Some(sink) = opts.on_output.as_mut() {
                                sink(stream, part);
                            }
                            match stream {
                                Stream::Stdout => stdout.extend_from_slice(part),
                                Stream::Stderr => stderr.extend_from_slice(part),
                            }
                        }
                    }
                    None => outputs_open = false,
                },
                st = child.wait(), if status.is_none() => {
                    status = Some(st);
                    drain_deadline = Some(tokio::time::Instant::now() + Duration::from_secs(2));
                }
                _ = tokio::time::sleep_until(deadline.unwrap_or(far)), if want_kill && deadline.is_some() => {
                    timed_out = true;
                }
                _ = cancel.cancelled(), if want_kill => {
                    cancelled = true;
                }
                _ = tokio::time::sleep_until(kill_at.unwrap_or(far)), if kill_at.is_some() && status.is_none() => {
                    // The helper did not finish the teardown in time.
                    child.kill();
                    kill_at = None;
                }
                _ = tokio::time::sleep_until(drain_deadline.unwrap_or(far)), if drain_deadline.is_some() && outputs_open => {
                    warnings.push("output pipes still open 2 s after the sandbox ended; stopped reading".into());
                    outputs_open = false;
                }
            }
            if (timed_out || cancelled) && lifeline.is_some() {
                // Kill the whole tree: cgroup.kill where we have one, and
                // closing the lifeline makes the helper kill pid 1, whose
                // exit tears the pid namespace down.
                if let Some(c) = &cg {
                    let _ = c.kill();
                }
                lifeline = None;
                kill_at = Some(tokio::time::Instant::now() + Duration::from_secs(3));
            }
        }
        drop(lifeline);
        let helper_status = match status {
            Some(Ok(s)) => s,
            Some(Err(source)) => return Err(SandboxError::Io { stage: "waiting for the helper", source }),
            None => return Err(SandboxError::HelperDied { status: "unknown".into() }),
        };
        let records = records.await.unwrap_or_default();
        // Git redirections the command created where nothing could be mounted
        // (the files did not exist): remove them before any host git runs.
        let roots: Vec<&Path> = plan
            .writable
            .then_some(plan.workspace.as_path())
            .into_iter()
            .chain(plan.write_grants.iter().map(PathBuf::as_path))
            .collect();
        for f in &plan.git_guard {
            let Some(root) = roots.iter().filter(|r| f.starts_with(r)).max_by_key(|r| r.components().count()) else {
                continue;
            };
            match guard::remove(root, f) {
                Ok(guard::Removed::Nothing) => {}
                Ok(guard::Removed::Deleted) => warnings.push(format!(
                    "removed {} created by the command: it would redirect git's config and hooks",
                    f.display()
                )),
                Ok(guard::Removed::Quarantined(q, e)) => warnings.push(format!(
                    "{} was created by the command; it is renamed to {} (git no longer reads it) but could not be \
                     deleted: {e}",
                    f.display(),
                    q.display()
                )),
                Err(e) => warnings.push(format!(
                    "{} was created by the command and could not be removed: {e}; do not run git on the host \
                     before removing it",
                    f.display()
                )),
            }
        }
        if let Some(c) = cg.as_mut() {
            if !c.kill_and_remove(Duration::from_secs(5)).await {
                warnings.push(format!("cgroup {} could not be emptied and removed", c.path.display()));
            }
        }
        // Only now, with every process of the sandbox gone, is what the
        // command read of its stdin final.
        if let Some(w) = relay.take().and_then(stdin::Relay::finish) {
            warnings.push(w);
        }

        let mut applied: Option<Applied> = None;
        let mut outcome: Option<(Option<i32>, Option<i32>)> = None;
        for r in &records {
            match *r {
                Record::Error { step, errno, detail } => return Err(setup_error(plan, step, errno, detail)),
                Record::Applied(a) => applied = Some(a),
                Record::Exited(c) => outcome = Some((Some(c), None)),
                Record::Signaled(s) => outcome = Some((None, Some(s))),
            }
        }
        let (exit_code, signal) = match outcome {
            Some(o) => o,
            None if timed_out || cancelled => (None, Some(libc::SIGKILL)),
            None => return Err(SandboxError::HelperDied { status: helper_status.to_string() }),
        };
        let applied = applied.unwrap_or_default();
        Ok(ExecResult {
            exit_code,
            signal,
            timed_out,
            cancelled,
            truncated,
            writable: plan.writable,
            write_grants: plan.write_grants.clone(),
            duration: start.elapsed(),
            kill_mechanism,
            cgroup_fallback,
            landlock_abi: applied.landlock_abi,
            landlock_gaps: plan.landlock_gaps.clone(),
            landlock: if applied.landlock_full {
                LandlockStatus::Full
            } else if applied.landlock_partial {
                LandlockStatus::Partial
            } else {
                LandlockStatus::None
            },
            seccomp: applied.seccomp,
            network: req.network,
            degraded: req.degraded,
            limits,
            stdout,
            stderr,
            warnings,
        })
    }
}

async fn pump<R: tokio::io::AsyncRead + Unpin>(mut r: R, stream: Stream, tx: mpsc::Sender<(Stream, Vec<u8>)>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if tx.send((stream, buf[..n].to_vec())).await.is_err() {
                    return;
                }
            }
        }
    }
}

async fn read_records(mut rx: tokio::net::unix::pipe::Receiver) -> Vec<Record> {
    let mut data = Vec::new();
    let _ = rx.read_to_end(&mut data).await;
    data.chunks_exact(RECORD_LEN)
        .filter_map(|c| <&[u8; RECORD_LEN]>::try_from(c).ok().and_then(Record::decode))
        .collect()
}

fn setup_error(plan: &Plan, step: Result<Step, u16>, errno: i32, detail: u32) -> SandboxError {
    let source = io::Error::from_raw_os_error(errno);
    let step = step.ok();
    let path = (detail != NO_DETAIL)
        .then(|| usize::try_from(detail).ok())
        .flatten()
        .and_then(|i| plan.spec.mounts.get(i))
        .map(|op| PathBuf::from(<std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(op.dst())));
    match (step, errno) {
        (Some(Step::Exec), _) => SandboxError::Exec {
            program: plan.spec.argv.first().map(|a| String::from_utf8_lossy(a).into_owned()).unwrap_or_default(),
            source,
        },
        (Some(Step::Clone), libc::EPERM | libc::EINVAL | libc::ENOSPC | libc::EUSERS) => SandboxError::LayerUnavailable {
            layer: "user namespaces",
            hint: "the kernel refused to create a user namespace; check sysctl user.max_user_namespaces (must be > 0), kernel.unprivileged_userns_clone=1 on Debian kernels, and on Ubuntu kernel.apparmor_restrict_unprivileged_userns=0 or an AppArmor profile allowing userns; `portcullis doctor` shows which".into(),
            source,
        },
        (Some(Step::MapUid | Step::MapGid | Step::DenySetgroups), libc::EPERM | libc::EACCES) => SandboxError::LayerUnavailable {
            layer: "user namespaces",
            hint: "writing the uid/gid map was refused, as Ubuntu's AppArmor userns restriction does (kernel.apparmor_restrict_unprivileged_userns=1)".into(),
            source,
        },
        (Some(Step::Landlock), libc::EOPNOTSUPP | libc::ENOSYS) => SandboxError::LayerUnavailable {
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
        MountOp::ReadOnly { dst } => format!("read-only {}", s(dst)),
        MountOp::Pin { dst } => format!("pin {} (bound onto itself: cannot be renamed or removed)", s(dst)),
        MountOp::Mask { dst } => format!("mask {}", s(dst)),
    }
}

/// An exclusive `flock` on the workspace directory, polled so that a
/// cancellation ends the wait. A command can take the same lock on its own
/// workspace, which only delays writable runs while it runs.
async fn lock_workspace(
    ws: &Path,
    cancel: Option<&CancellationToken>,
) -> Result<nix::fcntl::Flock<std::fs::File>, SandboxError> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(ws)
        .map_err(|source| SandboxError::Path { what: "workspace to lock", path: ws.to_path_buf(), source })?;
    loop {
        match nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(lock),
            Err((f, nix::errno::Errno::EWOULDBLOCK)) => file = f,
            Err((_, e)) => {
                return Err(SandboxError::Path { what: "workspace to lock", path: ws.to_path_buf(), source: e.into() })
            }
        }
        if cancel.is_some_and(CancellationToken::is_cancelled) {
            return Err(SandboxError::BadRequest(
                "cancelled while waiting for another writable run of this workspace to end".into(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
