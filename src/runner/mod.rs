//! One library for every caller: policy check, gate, audit, sandbox.
//!
//! A [`Runner`] holds what every call shares — the policy (if any), the
//! gate, the audit sink and the sandbox — and runs one action at a time
//! through the same steps, whoever asks (the command line, the server, a
//! Rust host):
//!
//! 1. the policy judges the line (a refusal: nothing runs);
//! 2. the request is built from the policy and the caller's [`ExecOptions`];
//! 3. the gate sees the [`Action`] and answers; the action gets the meet of
//!    what it asked and what the gate allowed (a refusal: nothing runs);
//! 4. the audit records `allowed`, durably, before anything starts (or
//!    `denied`);
//! 5. the sandbox runs the command with exactly that access;
//! 6. the audit records the outcome.
//!
//! Refusals are values ([`Exec::Refused`], [`Refused`]); only faults are
//! errors ([`RunError`]). Direct file writes take the same path (see
//! [`Runner::write_file`]), so a refused command cannot be replaced by a
//! write through the library.

mod direct;
pub mod explain;
mod request;
mod scope;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::audit::{Audit, AuditError, Event, RefusalKind, RefusedWritesRecord, Status};
use crate::gate::{Access, Action, Backend, Decision, Gate, GateError, ShellExec};
use crate::policy::{
    quote_argv, Interpreter, LinePlan, PlannedCommand, PolicyError, ShellChecker, Verdict, WorkspacePolicy,
};
use crate::sandbox::{
    ExecRequest, ExecResult, Mode, Outcome, Profile, RunOptions, Sandbox, SandboxError, TestSwitches,
};
use crate::Network;

pub use direct::{Fs, FsDone};
pub(crate) use scope::git_dir_around;

/// A line for the policy checker.
#[derive(Clone, Copy, Debug)]
pub enum Line<'a> {
    /// One line of text: split as the shell would (argv mode), or parsed as
    /// `sh` (sh mode).
    Text(&'a str),
    /// Words already split (argv mode only).
    Argv(&'a [String]),
}

/// The policy's verdict on a line, run in `cwd` (default: the workspace);
/// `sh` reads it as `sh` whatever the policy says. Runs nothing.
/// Compiles the policy's checker for the call: a long-lived caller holds a
/// [`Runner`] and uses [`Runner::check_line`].
pub fn check_line(policy: &WorkspacePolicy, line: Line<'_>, sh: bool, cwd: Option<&Path>) -> Result<Verdict, RunError> {
    check_with(policy.checker()?, line, sh, cwd)
}

/// The policy's checker: judging paths on the disk, or, without a sandbox
/// (the workspace may exist only in a backend's memory), lexically.
fn compile_checker(policy: Option<&WorkspacePolicy>, sandboxed: bool) -> Result<Option<ShellChecker>, RunError> {
    Ok(match policy {
        Some(p) if sandboxed => Some(p.checker()?),
        Some(p) => Some(ShellChecker::virtual_root(p)?),
        None => None,
    })
}

/// The verdict of `checker` on a line.
fn check_with(mut checker: ShellChecker, line: Line<'_>, sh: bool, cwd: Option<&Path>) -> Result<Verdict, RunError> {
    if sh {
        checker = checker.with_interpreter(Interpreter::Sh);
    }
    if let Some(cwd) = cwd {
        checker = checker.with_cwd(cwd).map_err(|e| RunError::input("cwd", crate::error_chain(&e)))?;
    }
    Ok(match (line, checker.interpreter()) {
        (Line::Text(l), _) => checker.check(l),
        (Line::Argv(words), Interpreter::None) => checker.check_argv(words),
        (Line::Argv([one]), Interpreter::Sh) => checker.check(one),
        (Line::Argv(_), Interpreter::Sh) => {
            return Err(RunError::input("sh", "in sh mode, pass the line as one argument: -- 'LINE'"))
        }
    })
}

/// What the policy's `[[gate]]` rules would answer for an accepted line
/// run in `cwd` (default: the workspace) that asks for the whole workspace:
/// `None` when the policy has no rules. Runs nothing, records nothing.
pub fn gate_preview(
    policy: &WorkspacePolicy,
    plan: &LinePlan,
    cwd: Option<&Path>,
) -> Result<Option<Decision>, RunError> {
    let ws = policy.workspace_root()?;
    let real = std::fs::canonicalize(ws).map_err(|source| PolicyError::Resolve { path: ws.to_path_buf(), source })?;
    let Some(rules) = policy.gate(&real)? else { return Ok(None) };
    let action = Action::ShellExec(ShellExec {
        line: plan.line.clone(),
        interpreter: plan.interpreter,
        commands: plan.commands.clone(),
        cwd: cwd.map_or_else(|| real.clone(), |c| real.join(c)),
        workspace: Some(real.clone()),
        asked: Access { writable: true, write_grants: Vec::new() },
        background: false,
        backend: Backend::Sandbox,
    });
    Ok(Some(rules.decide(&action)?))
}

/// The timeout a command runs with under a policy's `policy` when the
/// caller asks for `caller`: the caller's can only lower the policy's.
pub fn lowered_timeout(policy: Option<Duration>, caller: Option<Duration>) -> Option<Duration> {
    match (policy, caller) {
        (Some(p), Some(c)) => Some(p.min(c)),
        (p, c) => p.or(c),
    }
}

/// What a command is given as.
#[derive(Clone, Copy)]
enum Input<'a> {
    /// Words (argv mode), or with `sh` one line.
    Words(&'a [OsString]),
    /// One line of text, read as the policy reads lines.
    Line(&'a str),
}

/// What a caller may set for one command, on top of the policy: the command
/// line's flags, as plain data.
#[derive(Clone, Debug, Default)]
pub struct ExecOptions {
    /// Read the command as one `sh` line (needs a policy).
    pub sh: bool,
    /// Ask for write access: the whole workspace, or with a policy what its
    /// `write` list names (the whole workspace if it names nothing).
    pub writable: bool,
    /// Ask for write access to these paths too.
    pub write: Vec<PathBuf>,
    /// Extra read-only roots.
    pub read: Vec<PathBuf>,
    /// Extra deny globs.
    pub deny: Vec<String>,
    /// Extra protected paths.
    pub protect: Vec<PathBuf>,
    /// The working directory (default: the workspace).
    pub cwd: Option<PathBuf>,
    /// Kill the tree after this long.
    pub timeout: Option<Duration>,
    /// Network access (default: the policy's, else none).
    pub network: Option<Network>,
    /// Variables to set.
    pub env: Vec<(OsString, OsString)>,
    /// Variables to copy from the caller's environment.
    pub inherit_env: Vec<OsString>,
    /// Most processes.
    pub pids: Option<u64>,
    /// Most memory, bytes.
    pub memory: Option<u64>,
    /// Cap on output kept, bytes.
    pub max_output: Option<u64>,
    /// A named degraded mode.
    pub degraded: Option<Mode>,
    /// The command runs as a background job (shown to the gate).
    pub background: bool,
    /// Report the writes the kernel refused (default: the policy's, else on).
    pub report_refused_writes: Option<bool>,
    /// Cancels the command: one already cancelled starts nothing; a cancel
    /// mid-run kills the whole tree (joined with [`RunOptions::cancel`]).
    pub cancel: Option<tokio_util::sync::CancellationToken>,
    /// Test builds only: break one layer on purpose.
    pub test_switches: TestSwitches,
}

/// A fault: something could not be done or decided. Never a refusal.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The caller's input cannot be used as it is.
    #[error("{what}: {why}")]
    Input {
        /// Which input (a flag's or a field's name).
        what: String,
        /// What is wrong, and what to do.
        why: String,
    },
    /// The policy file could not be read or used.
    #[error(transparent)]
    Policy(#[from] PolicyError),
    /// The gate could not decide.
    #[error(transparent)]
    Gate(#[from] GateError),
    /// The audit could not record the action before it started: nothing ran.
    // The audit error's message names its cause already: no `#[source]`,
    // so that an error chain does not print it twice.
    #[error("nothing ran: {0}")]
    Audit(AuditError),
    /// The action ran but its outcome could not be recorded.
    #[error("the action ran but its outcome was not recorded: {audit}")]
    AuditAfter {
        /// What the action did.
        report: Box<Ran>,
        /// Why the record failed.
        audit: AuditError,
    },
    /// The sandbox failed.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The sandbox failed, and the outcome record of that failure could not
    /// be written either.
    #[error("{audit}; the outcome of a run that failed was not recorded")]
    SandboxUnrecorded {
        /// What the sandbox reported.
        #[source]
        error: Box<SandboxError>,
        /// Why the record failed.
        audit: AuditError,
    },
    /// The runner was built without a sandbox
    /// ([`RunnerBuilder::without_sandbox`], for a backend that runs no
    /// process, such as the mock): it cannot plan or run a command itself.
    #[error(
        "this runner was built without a sandbox (for a backend that runs no process, such as the mock): it \
         cannot {what}; build it with a sandbox (the default) to run commands for real"
    )]
    NoSandbox {
        /// What was asked of the sandbox.
        what: &'static str,
    },
    /// A direct file operation failed.
    #[error("{op} {path}: {error}")]
    Fs {
        /// The operation (`fs.write`, …).
        op: &'static str,
        /// The path as given.
        path: PathBuf,
        /// The kernel's answer.
        error: std::io::Error,
    },
}

impl RunError {
    pub(crate) fn input(what: impl Into<String>, why: impl Into<String>) -> RunError {
        RunError::Input { what: what.into(), why: why.into() }
    }

    /// The exit status a command line reports for this fault: the sandbox's
    /// own mapping (126/127 for a command that cannot run, 124/130 for a
    /// wait ended by the timeout or a cancellation), 125 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            RunError::Sandbox(e) => e.exit_code(),
            RunError::SandboxUnrecorded { error, .. } => error.exit_code(),
            _ => crate::sandbox::status::FAILED,
        }
    }

    /// The command's result, when the fault came after it ran.
    pub fn result(&self) -> Option<&ExecResult> {
        match self {
            RunError::Sandbox(e) => e.result(),
            RunError::SandboxUnrecorded { error, .. } => error.result(),
            RunError::AuditAfter { report, .. } => Some(&report.result),
            _ => None,
        }
    }
}

/// An action that was not allowed: nothing ran, nothing was touched.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Refused {
    /// Who refused it.
    pub kind: RefusalKind,
    /// Why, in words a model can act on.
    pub message: String,
    /// The command refused (policy refusals), or the line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// The policy checker's reason (policy refusals of a line).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<crate::policy::RefusalReason>,
    /// The gate rule that refused it (gate refusals, when the gate has rules).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The refusal lasts only while the workspace is busy (every background
    /// job the policy allows is running): the same action can succeed once
    /// one has ended. Every other refusal stands until the action changes.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub while_busy: bool,
}

impl Refused {
    /// The stable name of what refused it, for a model or a tool to branch
    /// on: `refused-by-policy`, `refused-by-gate`, or `busy` for a refusal
    /// that lasts only while the workspace is busy ([`Refused::while_busy`]).
    pub fn kind_name(&self) -> &'static str {
        match self.kind {
            // Not a verdict on the action: the same start works once a job has ended.
            _ if self.while_busy => "busy",
            RefusalKind::RefusedByPolicy => "refused-by-policy",
            RefusalKind::RefusedByGate => "refused-by-gate",
        }
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let who = match self.kind {
            RefusalKind::RefusedByPolicy => "the policy",
            RefusalKind::RefusedByGate => "the gate",
        };
        write!(f, "refused by {who}")?;
        if let Some(r) = &self.reason {
            write!(f, " ({r})")?;
        }
        if let Some(r) = &self.rule {
            write!(f, " (rule {r})")?;
        }
        write!(f, ": {}", self.message)
    }
}

/// A command ready to run: checked, gated, with its effective access.
#[derive(Debug)]
pub struct Ready {
    /// The sandbox request, with the effective access applied.
    pub request: ExecRequest,
    /// What the gate saw.
    pub action: Action,
    /// The access the command runs with.
    pub effective: Access,
    /// The gate's rule that answered, if any.
    pub rule: Option<String>,
    /// Grants the gate named that were not asked for: dropped, never added.
    pub dropped: Vec<PathBuf>,
    /// The policy's reading of the line, when there is a policy.
    pub checked: Option<LinePlan>,
}

impl Ready {
    /// The workspace's real path, as the gate's meet compared grants with.
    fn workspace_real(&self) -> PathBuf {
        match &self.action {
            Action::ShellExec(s) => s.workspace.clone(),
            _ => None,
        }
        .unwrap_or_else(|| {
            std::fs::canonicalize(&self.request.workspace).unwrap_or_else(|_| self.request.workspace.clone())
        })
    }

    /// The sandbox's plan for this command (what `--explain` shows), checked
    /// as a run checks it: a plan that would grant more than the effective
    /// access (a link resolved since the gate decided) is an error. Runs
    /// nothing, creates nothing.
    pub fn plan(&self, sandbox: &Sandbox) -> Result<crate::sandbox::Plan, SandboxError> {
        let plan = sandbox.plan(&self.request)?;
        within_effective(&plan, &self.effective, &self.workspace_real())?;
        Ok(plan)
    }
}

/// A command after the policy and the gate: ready, or refused.
#[derive(Debug)]
pub enum Prepared {
    /// It may run.
    Ready(Box<Ready>),
    /// It may not; nothing ran.
    Refused {
        /// What was refused.
        action: Box<Action>,
        /// Why.
        refused: Refused,
    },
}

/// A command that ran.
#[derive(Debug, Serialize)]
pub struct Ran {
    /// The action's id (as in the audit log).
    pub id: String,
    /// What the sandbox reports (its `writable` and `write_grants` are the
    /// effective access).
    #[serde(flatten)]
    pub result: ExecResult,
    /// The gate's rule that answered, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Grants the gate named that were not asked for (dropped).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dropped_grants: Vec<PathBuf>,
    /// The write access the command asked for.
    pub asked: Access,
    /// The write access it ran with (the meet of the asked and the allowed).
    pub effective: Access,
    /// Its exit status as a shell would report it: the command's own code,
    /// 128 + n for a signal, 124 timed out, 130 cancelled.
    pub exit_code: u8,
    /// The timeout killed it (never together with `cancelled`).
    pub timed_out: bool,
    /// A cancellation killed it (never together with `timed_out`).
    pub cancelled: bool,
}

impl Ran {
    /// A line for people when the gate left the command less write access
    /// than it asked for: what it asked, what it got, and which rule.
    pub fn access_note(&self) -> Option<String> {
        if self.asked == self.effective {
            return None;
        }
        let describe = |a: &Access| a.describe(|p| p.display().to_string());
        Some(format!(
            "asked for {}; the gate{} allowed {}",
            describe(&self.asked),
            self.rule.as_ref().map(|r| format!(" (rule {r})")).unwrap_or_default(),
            describe(&self.effective)
        ))
    }
}

/// A command that was allowed but cancelled before it started: its token
/// was cancelled already, or while it waited for the workspace. Nothing
/// ran; the audit has its `allowed` record and a `cancelled` outcome.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NotStarted {
    /// The action's id (as in the audit log).
    pub id: String,
    /// What happened, in words.
    pub message: String,
}

/// What became of a command: it ran, it was refused, or it was cancelled
/// before it started.
#[derive(Debug)]
pub enum Exec {
    /// It ran (whatever its exit status).
    Ran(Box<Ran>),
    /// It was refused; nothing ran.
    Refused(Refused),
    /// It was cancelled before it started; nothing ran (exit status 130).
    Cancelled(NotStarted),
}

impl Exec {
    /// The exit status a command line reports: the command's own (128 + n
    /// for a signal, 124 timed out, 130 cancelled), 125 for a refusal.
    pub fn exit_status(&self) -> u8 {
        match self {
            Exec::Ran(r) => r.result.outcome.exit_status(),
            Exec::Refused(_) => crate::sandbox::status::FAILED,
            Exec::Cancelled(_) => crate::sandbox::status::CANCELLED,
        }
    }

    /// As JSON for a model or a tool: the result, or `{"error": {...}}` with
    /// the refusal's kind and reason, and the access it had (none).
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Exec::Ran(r) => serde_json::to_value(r).unwrap_or_default(),
            Exec::Refused(r) => serde_json::json!({
                "error": r,
                "writable": false,
                "write_grants": [],
            }),
            Exec::Cancelled(n) => serde_json::json!({
                "id": n.id,
                "outcome": { "kind": "cancelled" },
                "cancelled": true,
                "timed_out": false,
                "started": false,
                "message": n.message,
                "writable": false,
                "write_grants": [],
            }),
        }
    }
}

/// Builds a [`Runner`]: plain settings, then one [`RunnerBuilder::build`].
#[derive(Default)]
pub struct RunnerBuilder {
    policy: Option<WorkspacePolicy>,
    policy_file: Option<PathBuf>,
    workspace: Option<PathBuf>,
    gate: Option<Arc<dyn Gate>>,
    audit: Option<Arc<dyn Audit>>,
    audit_log: Option<PathBuf>,
    audit_sync: Option<crate::audit::jsonl::Sync>,
    sandbox: Option<Sandbox>,
    without_sandbox: bool,
    pool: usize,
    shared_network: bool,
    one_shot: bool,
}

impl RunnerBuilder {
    /// Judge every command against this policy (its `[[gate]]` rules become
    /// the gate unless [`RunnerBuilder::gate`] sets one).
    pub fn policy(mut self, policy: WorkspacePolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Read the policy from this file (and protect the file in the sandbox).
    pub fn policy_file(mut self, file: &Path) -> Result<Self, RunError> {
        self.policy = Some(WorkspacePolicy::from_file(file)?);
        self.policy_file = Some(file.to_path_buf());
        Ok(self)
    }

    /// The workspace (overrides the policy's).
    pub fn workspace(mut self, dir: impl Into<PathBuf>) -> Self {
        self.workspace = Some(dir.into());
        self
    }

    /// The host's own gate (replaces the policy's rules).
    pub fn gate(mut self, gate: Arc<dyn Gate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// Record every action here.
    pub fn audit(mut self, audit: Arc<dyn Audit>) -> Self {
        self.audit = Some(audit);
        self
    }

    /// Record every action in this JSON Lines log (overrides the policy's
    /// `audit`; replaced by [`RunnerBuilder::audit`]). It is opened by
    /// [`RunnerBuilder::build`], which refuses a log inside the workspace.
    pub fn audit_log(mut self, file: impl Into<PathBuf>) -> Self {
        self.audit_log = Some(file.into());
        self
    }

    /// When the audit log's records reach the disk (default: the policy's
    /// `audit_batch`, else every record before its action starts).
    pub fn audit_sync(mut self, sync: crate::audit::jsonl::Sync) -> Self {
        self.audit_sync = Some(sync);
        self
    }

    /// Use this sandbox (default: [`Sandbox::new`]).
    pub fn sandbox(mut self, sandbox: Sandbox) -> Self {
        self.sandbox = Some(sandbox);
        self.without_sandbox = false;
        self
    }

    /// Keep this many sandboxes made ahead ([`Sandbox::with_pool`]) unless
    /// the sandbox given has a pool of its own (default 0: a runner of one
    /// command, as `portcullis exec`'s, gains nothing from them).
    pub fn pool(mut self, size: usize) -> Self {
        self.pool = size;
        self
    }

    /// A runner of one command ([`Sandbox::one_shot`]): the sandbox it
    /// makes leaves the teardown behind each result to
    /// [`Sandbox::settle`], which the caller calls next (`portcullis
    /// exec`). Without effect on a sandbox given to the builder.
    pub fn one_shot(mut self) -> Self {
        self.one_shot = true;
        self
    }

    /// Run every `network = "none"` command of this runner (and of its
    /// scopes) in one network namespace with only loopback
    /// ([`Sandbox::with_shared_network`]); a `Workspace` asks for this.
    pub fn shared_network(mut self) -> Self {
        self.shared_network = true;
        self
    }

    /// Build the runner with no sandbox, for a backend that carries
    /// commands out itself without running a process (the mock backend of
    /// [`crate::workspace`]): the checker, the gate and the audit work as
    /// always; the workspace need not exist on this disk (its path is
    /// taken as spelled, made clean); [`Runner::sandbox`] answers
    /// [`RunError::NoSandbox`], and so do [`Runner::exec`],
    /// [`Runner::exec_line`] and [`Runner::run_prepared`] once a command
    /// was allowed (it is recorded as failed). Run such commands with
    /// [`Runner::exec_line_with`].
    pub fn without_sandbox(mut self) -> Self {
        self.sandbox = None;
        self.without_sandbox = true;
        self
    }

    /// Check the settings and compile what every call reuses.
    pub fn build(self) -> Result<Runner, RunError> {
        let mut policy = self.policy;
        if let Some(ws) = &self.workspace {
            let abs =
                std::path::absolute(ws).map_err(|e| RunError::input("workspace", format!("{}: {e}", ws.display())))?;
            if let Some(p) = &mut policy {
                p.workspace = Some(abs);
            }
        }
        let workspace = match (&policy, &self.workspace) {
            (Some(p), _) => p.workspace_root()?.to_path_buf(),
            (None, Some(ws)) => ws.clone(),
            (None, None) => {
                return Err(RunError::input("workspace", "a workspace directory (or a policy naming one) is required"))
            }
        };
        let gate: Option<Arc<dyn Gate>> = match (self.gate, &policy) {
            (Some(g), _) => Some(g),
            (None, Some(p)) => {
                let real = real_workspace(&workspace, self.without_sandbox)?;
                p.gate(&real)?.map(|r| Arc::new(r) as Arc<dyn Gate>)
            }
            (None, None) => None,
        };
        let log = match (&self.audit_log, policy.as_ref().and_then(|p| p.audit.as_ref())) {
            (Some(f), _) => Some(f.clone()),
            (None, Some(f)) if f.is_relative() => {
                let dir = self.policy_file.as_deref().and_then(Path::parent).unwrap_or(Path::new("."));
                Some(dir.join(f))
            }
            (None, f) => f.cloned(),
        };
        let (audit, audit_log) = match (self.audit, log) {
            (Some(a), _) => (Some(a), None),
            (None, Some(f)) => {
                let real = audit_log_path(&f, &workspace)?;
                let sync = match (self.audit_sync, policy.as_ref().and_then(|p| p.audit_batch)) {
                    (Some(s), _) => s,
                    (None, Some(n)) if n.get() > 1 => crate::audit::jsonl::Sync::Batch(n),
                    (None, _) => crate::audit::jsonl::Sync::Every,
                };
                let log = crate::audit::JsonlAudit::open_with(&f, sync).map_err(RunError::Audit)?;
                (Some(Arc::new(log) as Arc<dyn Audit>), Some(real))
            }
            (None, None) => (None, None),
        };
        let shared = |s: Sandbox| if self.shared_network && !s.shares_network() { s.with_shared_network() } else { s };
        let mut owns_pool = self.pool > 0;
        let sandbox = match (self.sandbox, self.without_sandbox) {
            // A given sandbox keeps its own pool; one without gets this
            // runner's (a workspace's policy decides it).
            (Some(s), _) if s.pool_status().is_some() => {
                owns_pool = false;
                Some(Arc::new(shared(s)))
            }
            (Some(s), _) => Some(Arc::new(shared(s).with_pool(self.pool))),
            (None, true) => None,
            (None, false) => {
                let sandbox = if self.one_shot { Sandbox::new()?.one_shot() } else { Sandbox::new()? };
                Some(Arc::new(shared(sandbox).with_pool(self.pool)))
            }
        };
        // Compiled once: the checker (its jail re-checked before each use)
        // and the access profile (pure: see `sandbox::profile`).
        let checker = compile_checker(policy.as_ref(), sandbox.is_some())?;
        let profile = Profile::new(policy.as_ref().map_or(&[][..], |p| &p.deny_paths[..]))?;
        Ok(Runner {
            policy,
            policy_file: self.policy_file,
            workspace,
            gate,
            audit,
            audit_log,
            sandbox,
            owns_pool,
            checker,
            profile,
            scope_of: None,
        })
    }
}

/// The shared state of every call: policy, gate, audit, sandbox.
pub struct Runner {
    policy: Option<WorkspacePolicy>,
    policy_file: Option<PathBuf>,
    workspace: PathBuf,
    gate: Option<Arc<dyn Gate>>,
    audit: Option<Arc<dyn Audit>>,
    /// The JSON Lines log's real path, when the runner opened one: no
    /// command may get write access to it.
    audit_log: Option<PathBuf>,
    /// `None`: built [`RunnerBuilder::without_sandbox`].
    sandbox: Option<Arc<Sandbox>>,
    /// The sandbox's pool is this runner's own (made by the builder), not a
    /// given sandbox's that others may share.
    owns_pool: bool,
    /// The policy's compiled checker.
    checker: Option<ShellChecker>,
    /// What every plan reuses.
    profile: Profile,
    /// A scope's: the real workspace it was made from, whose git dirs its
    /// runs' plans know and whose lock and git-guard records its writable
    /// runs share (`ExecRequest::scope_of`).
    scope_of: Option<PathBuf>,
}

impl Runner {
    /// Start building one.
    pub fn builder() -> RunnerBuilder {
        RunnerBuilder::default()
    }

    /// Have the sandbox's pool (if any) make slots for this runner's
    /// commands now: a read-only command under the policy is planned
    /// (nothing runs) and the slots are made for what it has in common with
    /// every command. Best effort: a plan that fails here fails the first
    /// command too, which says why.
    pub fn prime_pool(&self) {
        let (Some(sb), Some(policy)) = (&self.sandbox, &self.policy) else { return };
        let Ok(ws) = policy.workspace_root() else { return };
        let mut req = ExecRequest::new(ws.to_path_buf(), ["/bin/true"]);
        req.read = policy.allow_paths.clone();
        req.network = policy.network;
        req.limits = crate::sandbox::Limits { pids: policy.limits.pids, memory: policy.limits.memory };
        req.degraded = policy.degraded;
        req.report_refused_writes = policy.report_refused_writes.unwrap_or(true);
        let _ = sb.prime_pool(&req);
    }

    /// Whether the sandbox's pool is this runner's own (the builder made it),
    /// so that ending the runner's work may end the pool too.
    pub fn owns_pool(&self) -> bool {
        self.owns_pool
    }

    /// The sandbox every command runs in ([`RunError::NoSandbox`] for a
    /// runner built [`RunnerBuilder::without_sandbox`]).
    pub fn sandbox(&self) -> Result<&Sandbox, RunError> {
        self.sandbox.as_deref().ok_or(RunError::NoSandbox { what: "plan or run a command" })
    }

    /// Whether the runner has a sandbox (see [`RunnerBuilder::without_sandbox`]).
    pub fn has_sandbox(&self) -> bool {
        self.sandbox.is_some()
    }

    /// The policy, if there is one.
    pub fn policy(&self) -> Option<&WorkspacePolicy> {
        self.policy.as_ref()
    }

    /// The workspace as configured (not yet resolved).
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The policy [`Runner::scoped`] narrows to `dir` (see there), checked
    /// but not compiled.
    pub fn scoped_policy(&self, dir: &Path) -> Result<Option<WorkspacePolicy>, RunError> {
        let old = real_workspace(&self.workspace, self.sandbox.is_none())?;
        if !dir.starts_with(&old) {
            return Err(RunError::input(
                "scope",
                format!("{} is not inside the workspace {}", dir.display(), old.display()),
            ));
        }
        if let Some(gd) = scope::git_dir_around(&old, dir) {
            return Err(RunError::input(
                "scope",
                format!(
                    "{} is inside the git dir {}: a scope there would make its hooks and config ordinary, writable \
                     files; scope a directory of the working tree instead",
                    dir.display(),
                    gd.display()
                ),
            ));
        }
        Ok(match &self.policy {
            Some(p) => {
                let mut p = p.clone();
                p.workspace = Some(dir.to_path_buf());
                let anchor = |g: &String| {
                    if g.contains('/') && !g.starts_with('/') {
                        format!("{}/{}", old.display(), crate::path::normalize_glob(g))
                    } else {
                        g.clone()
                    }
                };
                p.deny_paths = p.deny_paths.iter().map(anchor).collect();
                p.protect = p.protect.iter().map(|q| if q.is_absolute() { q.clone() } else { old.join(q) }).collect();
                let reachable = |q: &PathBuf| {
                    let real = request::resolve_grant(&old, q);
                    !real.starts_with(&old) || real.starts_with(dir)
                };
                p.write = p
                    .write
                    .iter()
                    .map(|q| if q.is_absolute() { q.clone() } else { old.join(q) })
                    .filter(reachable)
                    .collect();
                p.allow_paths.retain(reachable);
                p.validate()?;
                Some(p)
            }
            None => None,
        })
    }

    /// The same runner narrowed to `dir` (a real directory inside the
    /// workspace): the policy's workspace becomes `dir`; its relative deny
    /// globs, protected paths and write grants keep meaning what they meant
    /// (anchored at the old root); write grants and readable roots inside
    /// the old workspace but outside `dir` are dropped (a scope does not
    /// reach its parent); the gate, the audit and the sandbox are shared.
    pub fn scoped(&self, dir: &Path) -> Result<Runner, RunError> {
        let policy = self.scoped_policy(dir)?;
        let old = real_workspace(&self.workspace, self.sandbox.is_none())?;
        let checker = compile_checker(policy.as_ref(), self.sandbox.is_some())?;
        let profile = Profile::new(policy.as_ref().map_or(&[][..], |p| &p.deny_paths[..]))?;
        Ok(Runner {
            policy,
            policy_file: self.policy_file.clone(),
            workspace: dir.to_path_buf(),
            gate: self.gate.clone(),
            audit: self.audit.clone(),
            audit_log: self.audit_log.clone(),
            sandbox: self.sandbox.clone(),
            owns_pool: self.owns_pool,
            checker,
            profile,
            scope_of: Some(self.scope_of.clone().unwrap_or(old)),
        })
    }

    /// The gate, if any.
    pub fn gate(&self) -> Option<&Arc<dyn Gate>> {
        self.gate.as_ref()
    }

    /// The audit sink, if any.
    pub fn audit(&self) -> Option<&Arc<dyn Audit>> {
        self.audit.as_ref()
    }

    /// The action a refusal before the policy's reading of the line is
    /// recorded as: the line as given, no commands, the access asked.
    pub(crate) fn unchecked_action(&self, words: &[OsString], opts: &ExecOptions) -> Action {
        let backend = if opts.degraded.is_some() || self.policy.as_ref().is_some_and(|p| p.degraded.is_some()) {
            Backend::LandlockOnly
        } else {
            Backend::Sandbox
        };
        let line = match words {
            [one] if opts.sh => one.to_string_lossy().into_owned(),
            _ => quote_argv(&words.iter().map(|w| w.to_string_lossy().into_owned()).collect::<Vec<_>>()),
        };
        Action::ShellExec(ShellExec {
            line,
            interpreter: if opts.sh { Interpreter::Sh } else { Interpreter::None },
            commands: Vec::new(),
            cwd: opts.cwd.clone().unwrap_or_else(|| self.workspace.clone()),
            workspace: std::fs::canonicalize(&self.workspace).ok(),
            asked: Access { writable: opts.writable, write_grants: opts.write.clone() },
            background: opts.background,
            backend,
        })
    }

    /// The policy's verdict on a line run in `cwd` (default: the
    /// workspace), `sh` reading it as `sh`, with the checker compiled when
    /// the runner was built (compiled afresh when the workspace, a readable
    /// root or a grant resolves elsewhere now: see [`PathJail::is_current`]).
    /// Runs nothing. Without a policy there is nothing to check against.
    ///
    /// [`PathJail::is_current`]: crate::policy::PathJail::is_current
    pub fn check_line(&self, line: Line<'_>, sh: bool, cwd: Option<&Path>) -> Result<Verdict, RunError> {
        let (Some(policy), Some(held)) = (&self.policy, &self.checker) else {
            return Err(RunError::input("policy", "checking a line needs a policy (its checker reads the line)"));
        };
        // A virtual jail (no sandbox: the workspace may live only in a
        // backend's memory) reads no disk, so it is always current.
        let current = held.jail().is_virtual() || held.jail().is_current(policy)?;
        let checker = if current { held.clone() } else { policy.checker()? };
        check_with(checker, line, sh, cwd)
    }

    /// The compiled access profile every plan of this runner reuses.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// The sandbox's plan for a prepared command, as [`Ready::plan`] makes
    /// it, with the runner's profile (the same plan, less recompiled).
    pub fn plan(&self, ready: &Ready) -> Result<crate::sandbox::Plan, RunError> {
        let plan = self.sandbox()?.plan_with(&self.profile, &ready.request)?;
        within_effective(&plan, &ready.effective, &ready.workspace_real())?;
        Ok(plan)
    }

    /// Judge a command and decide its access, running nothing and
    /// recording nothing. `words` is the argv, or with `opts.sh` one line.
    pub async fn prepare(&self, words: &[OsString], opts: &ExecOptions) -> Result<Prepared, RunError> {
        self.prepare_input(Input::Words(words), opts).await
    }

    /// Judge one line of text, read as the policy reads lines (split as
    /// the shell would in argv mode, parsed as `sh` in sh mode), and
    /// decide its access, running nothing and recording nothing. Needs a
    /// policy.
    pub async fn prepare_line(&self, line: &str, opts: &ExecOptions) -> Result<Prepared, RunError> {
        self.prepare_input(Input::Line(line), opts).await
    }

    /// The policy's refusal of `line` (or `words`), as [`Runner::prepare`]
    /// would answer it (its checker alone, no gate asked, nothing recorded),
    /// or `None` when the checker accepts it or there is no policy. A
    /// background start asks this before it waits for room among the jobs
    /// (`workspace::jobs`): a command that can never run is refused as
    /// such, not as "busy".
    pub fn refused_by_policy(
        &self,
        line: Option<&str>,
        words: &[OsString],
        opts: &ExecOptions,
    ) -> Result<Option<Prepared>, RunError> {
        if self.policy.is_none() {
            return Ok(None);
        }
        let one;
        let (input, words) = match line {
            Some(l) => {
                one = [OsString::from(l)];
                (Input::Line(l), &one[..])
            }
            None => (Input::Words(words), words),
        };
        Ok(self.checked(input, words, opts)?.err())
    }

    /// The policy checker's verdict on `input` (whose words are `words`):
    /// its plan, or the refusal as a prepared answer.
    fn checked(
        &self,
        input: Input<'_>,
        words: &[OsString],
        opts: &ExecOptions,
    ) -> Result<Result<LinePlan, Prepared>, RunError> {
        Ok(self.check(input, opts)?.map_err(|r| {
            let refused = Refused {
                kind: RefusalKind::RefusedByPolicy,
                message: r.message.clone(),
                command: Some(r.command.clone()),
                reason: Some(r.reason),
                rule: None,
                while_busy: false,
            };
            Prepared::Refused { action: Box::new(self.unchecked_action(words, opts)), refused }
        }))
    }

    /// Judge, gate, record and run one line of text (see
    /// [`Runner::prepare_line`]).
    pub async fn exec_line(&self, line: &str, opts: &ExecOptions, mut run: RunOptions) -> Result<Exec, RunError> {
        if run.cancel.is_none() {
            run.cancel.clone_from(&opts.cancel);
        }
        let prepared = self.prepare_line(line, opts).await?;
        self.run_prepared(prepared, run).await
    }

    async fn prepare_input(&self, input: Input<'_>, opts: &ExecOptions) -> Result<Prepared, RunError> {
        let one;
        let words: &[OsString] = match input {
            Input::Words(w) => w,
            Input::Line(l) => {
                one = [OsString::from(l)];
                &one
            }
        };
        let backend = if self.sandbox.is_none() {
            // Carried out by a backend that runs no process (the mock).
            Backend::Mock
        } else if opts.degraded.is_some() || self.policy.as_ref().is_some_and(|p| p.degraded.is_some()) {
            Backend::LandlockOnly
        } else {
            Backend::Sandbox
        };
        let shown_line = match words {
            [one] if opts.sh || matches!(input, Input::Line(_)) => one.to_string_lossy().into_owned(),
            _ => quote_argv(&words.iter().map(|w| w.to_string_lossy().into_owned()).collect::<Vec<_>>()),
        };
        let (mut req, checked) = match &self.policy {
            Some(policy) => {
                let plan = match self.checked(input, words, opts)? {
                    Ok(plan) => plan,
                    Err(refused) => return Ok(refused),
                };
                let mut req = request::from_policy(policy, &plan, opts.writable, opts.background)?;
                req.policy_file = self.policy_file.clone();
                request::merge(&mut req, opts, true)?;
                if plan.interpreter == Interpreter::Sh {
                    request::check_sh_locale(&req)?;
                }
                (req, Some(plan))
            }
            None => {
                if opts.sh {
                    return Err(RunError::input("sh", "sh mode needs a policy (its checker reads the line)"));
                }
                if matches!(input, Input::Line(_)) {
                    return Err(RunError::input(
                        "line",
                        "a line of text needs a policy (its checker reads it); pass argv words",
                    ));
                }
                let mut req = ExecRequest::new(self.workspace.clone(), words.to_vec());
                req.writable = opts.writable;
                request::merge(&mut req, opts, false)?;
                (req, None)
            }
        };
        req.scope_of.clone_from(&self.scope_of);
        let ws_real = match &self.sandbox {
            Some(_) => std::fs::canonicalize(&req.workspace).unwrap_or_else(|_| crate::path::lexical(&req.workspace)),
            None => crate::path::lexical(&req.workspace),
        };
        // Each grant as the caller spelled it and as the gate compares it.
        let spelled: Vec<(PathBuf, PathBuf)> =
            req.write.iter().map(|g| (g.clone(), request::resolve_grant(&ws_real, g))).collect();
        let asked = Access { writable: req.writable, write_grants: spelled.iter().map(|(_, r)| r.clone()).collect() };
        let commands: Vec<PlannedCommand> = match &checked {
            Some(p) => p.commands.clone(),
            None => vec![PlannedCommand {
                argv: req.argv.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
                dynamic: Vec::new(),
                runs: Vec::new(),
                redirects: Vec::new(),
            }],
        };
        let cwd = match &req.cwd {
            Some(c) if c.is_absolute() => c.clone(),
            Some(c) => ws_real.join(c),
            None => ws_real.clone(),
        };
        let action = Action::ShellExec(ShellExec {
            line: checked.as_ref().map_or(shown_line, |p| p.line.clone()),
            interpreter: checked.as_ref().map_or(Interpreter::None, |p| p.interpreter),
            commands,
            cwd,
            workspace: Some(ws_real.clone()),
            asked: asked.clone(),
            background: opts.background,
            backend,
        });
        let (mut effective, rule, mut dropped) = match self.decide(&ws_real, &action, &asked).await? {
            Ok(d) => d,
            Err(refused) => return Ok(Prepared::Refused { action: Box::new(action), refused }),
        };
        self.keep_carve_outs(&req, &spelled, &mut effective, &mut dropped)?;
        if let Some(log) = &self.audit_log {
            if effective.permits(log, &ws_real) {
                return Err(RunError::input(
                    "audit",
                    format!(
                        "{}: the command would get write access to its own audit log; keep the log outside the workspace and the write grants",
                        log.display()
                    ),
                ));
            }
        }
        req.writable = effective.writable;
        // The sandbox gets a kept grant as it was spelled (its own checks
        // name links and `..` in the caller's words), and a narrower one the
        // gate named as the real path it is.
        let mut write: Vec<PathBuf> =
            spelled.iter().filter(|(_, r)| effective.write_grants.contains(r)).map(|(g, _)| g.clone()).collect();
        write.extend(effective.write_grants.iter().filter(|e| !spelled.iter().any(|(_, r)| r == *e)).cloned());
        req.write = write;
        Ok(Prepared::Ready(Box::new(Ready { request: req, action, effective, rule, dropped, checked })))
    }

    /// A grant the gate named inside what was asked must not reach what the
    /// asked access keeps read-only or masked there: `.git/hooks`, `.git/config`,
    /// the protected paths, the policy file, the deny list. The meet compares
    /// paths only, so `--writable` narrowed to `.git/hooks` would otherwise
    /// make the hooks writable, which `--writable` alone never does. Such a
    /// grant is dropped (and reported) like any other the gate tried to add.
    fn keep_carve_outs(
        &self,
        req: &ExecRequest,
        spelled: &[(PathBuf, PathBuf)],
        effective: &mut Access,
        dropped: &mut Vec<PathBuf>,
    ) -> Result<(), RunError> {
        let named = |g: &PathBuf| !spelled.iter().any(|(_, r)| r == g);
        if !effective.write_grants.iter().any(named) {
            return Ok(());
        }
        // What the asked access would keep read-only (planned, nothing made;
        // without a sandbox, read from the request as the plan would).
        let kept: Vec<PathBuf> = match &self.sandbox {
            Some(sandbox) => {
                let asked = sandbox.plan_with(&self.profile, req)?;
                asked.protected.into_iter().chain(asked.masked).collect()
            }
            None => self.carve_outs_unplanned(req),
        };
        let masked = |g: &PathBuf| self.sandbox.is_none() && self.denied_unplanned(req, g);
        let (out, keep): (Vec<PathBuf>, Vec<PathBuf>) = std::mem::take(&mut effective.write_grants)
            .into_iter()
            .partition(|g| named(g) && (kept.iter().any(|p| g.starts_with(p)) || masked(g)));
        effective.write_grants = keep;
        for g in out {
            if !dropped.contains(&g) {
                dropped.push(g);
            }
        }
        Ok(())
    }

    /// What a plan of `req` would keep read-only, read from the request
    /// without the disk (a runner without a sandbox): git's hooks and
    /// config of the workspace, the protected paths, the policy file.
    pub(crate) fn carve_outs_unplanned(&self, req: &ExecRequest) -> Vec<PathBuf> {
        let ws = crate::path::lexical(&req.workspace);
        let listed = self.policy.as_ref().map(|p| p.protect.clone()).unwrap_or_default();
        let all = crate::sandbox::DEFAULT_PROTECTED.iter().map(PathBuf::from).chain(listed).chain(req.protect.clone());
        let mut out: Vec<PathBuf> =
            all.map(|p| crate::path::lexical(&if p.is_absolute() { p } else { ws.join(p) })).collect();
        out.extend(self.policy_file.iter().map(|f| crate::path::lexical(&std::path::absolute(f).unwrap_or_default())));
        out
    }

    /// Whether the deny list of `req` (the policy's and the caller's)
    /// masks `path`, read without the disk (a runner without a sandbox).
    pub(crate) fn denied_unplanned(&self, req: &ExecRequest, path: &Path) -> bool {
        let ws = crate::path::lexical(&req.workspace);
        let globs: Vec<String> = req.deny.iter().map(|g| crate::path::normalize_glob(g)).collect();
        match crate::path::DenyGlobs::new(&globs) {
            Ok(d) => d.matching(&ws, path).is_some(),
            // A glob that does not compile masks nothing it could name; be
            // safe: treat every path as masked.
            Err(_) => true,
        }
    }

    /// The policy's verdict on the words: the checked line, or its refusal.
    fn check(
        &self,
        input: Input<'_>,
        opts: &ExecOptions,
    ) -> Result<Result<LinePlan, crate::policy::Refusal>, RunError> {
        let words = match input {
            Input::Words(w) => w,
            Input::Line(line) => {
                return Ok(match self.check_line(Line::Text(line), opts.sh, opts.cwd.as_deref())? {
                    Verdict::Accepted(p) => Ok(p),
                    Verdict::Refused(r) => Err(r),
                })
            }
        };
        let words = words
            .iter()
            .map(|w| {
                w.to_str()
                    .map(str::to_string)
                    .ok_or_else(|| RunError::input(format!("{w:?}"), "the policy checker reads UTF-8 text"))
            })
            .collect::<Result<Vec<String>, RunError>>()?;
        Ok(match self.check_line(Line::Argv(&words), opts.sh, opts.cwd.as_deref())? {
            Verdict::Accepted(p) => Ok(p),
            Verdict::Refused(r) => Err(r),
        })
    }

    /// Ask the gate (if any) and meet its answer with what was asked.
    #[allow(clippy::type_complexity)]
    async fn decide(
        &self,
        ws_real: &Path,
        action: &Action,
        asked: &Access,
    ) -> Result<Result<(Access, Option<String>, Vec<PathBuf>), Refused>, RunError> {
        let Some(gate) = &self.gate else {
            return Ok(Ok((asked.clone(), None, Vec::new())));
        };
        let decision = gate.check(action).await?;
        Ok(match asked.meet(&decision, ws_real) {
            Ok(met) => Ok((met.effective, met.rule, met.dropped)),
            Err(r) => Err(Refused {
                kind: RefusalKind::RefusedByGate,
                message: r.reason,
                command: None,
                reason: None,
                rule: r.rule,
                while_busy: false,
            }),
        })
    }

    /// Judge, gate, record and run one command.
    pub async fn exec(&self, words: &[OsString], opts: &ExecOptions, mut run: RunOptions) -> Result<Exec, RunError> {
        if run.cancel.is_none() {
            run.cancel.clone_from(&opts.cancel);
        }
        let prepared = self.prepare(words, opts).await?;
        self.run_prepared(prepared, run).await
    }

    /// Judge, gate and record one line (see [`Runner::prepare_line`]) and
    /// have `executor` carry it out instead of the sandbox (a backend that
    /// runs no process, such as the mock). The checker, the gate, the
    /// `allowed`/`denied` records, a cancellation before the start and the
    /// outcome record are exactly those of [`Runner::exec_line`].
    pub async fn exec_line_with(
        &self,
        line: &str,
        opts: &ExecOptions,
        mut run: RunOptions,
        executor: &dyn Executor,
    ) -> Result<Exec, RunError> {
        if run.cancel.is_none() {
            run.cancel.clone_from(&opts.cancel);
        }
        let prepared = self.prepare_line(line, opts).await?;
        self.run_prepared_by(prepared, run, Some(executor)).await
    }

    /// Record and run a prepared command (a refused one is recorded as
    /// denied and returned).
    pub async fn run_prepared(&self, prepared: Prepared, run: RunOptions) -> Result<Exec, RunError> {
        self.run_prepared_by(prepared, run, None).await
    }

    /// [`Runner::run_prepared`], carried out by `executor` if given, else
    /// by the sandbox.
    pub(crate) async fn run_prepared_by(
        &self,
        prepared: Prepared,
        run: RunOptions,
        executor: Option<&dyn Executor>,
    ) -> Result<Exec, RunError> {
        let id = new_id();
        let ready = match prepared {
            Prepared::Refused { action, refused } => {
                self.deny(id, *action, &refused).await?;
                return Ok(Exec::Refused(refused));
            }
            Prepared::Ready(r) => r,
        };
        let ws_real = ready.workspace_real();
        let Ready { request, action, effective, rule, dropped, .. } = *ready;
        let asked = action.asked();
        self.record(&Event::Allowed { id: id.clone(), action, effective: effective.clone(), rule: rule.clone() })
            .await
            .map_err(RunError::Audit)?;
        let started = std::time::Instant::now();
        if run.cancel.as_ref().is_some_and(tokio_util::sync::CancellationToken::is_cancelled) {
            let message = "cancelled before it started: nothing ran".to_string();
            return self.not_started(id, started, effective, message).await;
        }
        let result = match (executor, &self.sandbox) {
            (Some(x), _) => x.execute(&request, &effective, &ws_real, run).await,
            (None, Some(sandbox)) => {
                sandbox
                    .run_checked_with(Some(&self.profile), &request, run, |plan| {
                        within_effective(plan, &effective, &ws_real)
                    })
                    .await
            }
            (None, None) => {
                let e = RunError::NoSandbox { what: "run a command" };
                let event = ended(id, Status::Failed, started, effective, Some(e.to_string()));
                self.record(&event).await.map_err(RunError::Audit)?;
                return Err(e);
            }
        };
        match result {
            Ok(result) => {
                let event = outcome_event(&id, &effective, &result);
                let ran = Ran {
                    id,
                    exit_code: result.outcome.exit_status(),
                    timed_out: result.outcome == Outcome::TimedOut,
                    cancelled: result.outcome == Outcome::Cancelled,
                    result,
                    rule,
                    dropped_grants: dropped,
                    asked,
                    effective: effective.clone(),
                };
                if let Err(source) = self.record(&event).await {
                    return Err(RunError::AuditAfter { report: Box::new(ran), audit: source });
                }
                Ok(Exec::Ran(Box::new(ran)))
            }
            Err(e @ (SandboxError::CancelledWaiting { .. } | SandboxError::CancelledBeforeStart { .. })) => {
                self.not_started(id, started, effective, crate::error_chain(&e)).await
            }
            Err(e) => {
                let event = match e.result() {
                    Some(r) => {
                        let mut ev = outcome_event(&id, &effective, r);
                        if let Event::Outcome { status, error, .. } = &mut ev {
                            *status = Status::Failed;
                            *error = Some(crate::error_chain(&e));
                        }
                        ev
                    }
                    None => {
                        let status = match e.exit_code() {
                            124 => Status::TimedOut,
                            130 => Status::Cancelled,
                            _ => Status::Failed,
                        };
                        ended(id, status, started, effective, Some(crate::error_chain(&e)))
                    }
                };
                // The sandbox's fault is the one the caller must see; a
                // record that also fails is named in it.
                match self.record(&event).await {
                    Ok(()) => Err(RunError::Sandbox(e)),
                    Err(audit) => Err(RunError::SandboxUnrecorded { error: Box::new(e), audit }),
                }
            }
        }
    }

    /// Record the `cancelled` outcome of a command that never started.
    async fn not_started(
        &self,
        id: String,
        started: std::time::Instant,
        effective: Access,
        message: String,
    ) -> Result<Exec, RunError> {
        let event = ended(id.clone(), Status::Cancelled, started, effective, Some(message.clone()));
        self.record(&event).await.map_err(RunError::Audit)?;
        Ok(Exec::Cancelled(NotStarted { id, message }))
    }

    /// Record a refusal (before the caller hears of it).
    pub(crate) async fn deny(&self, id: String, action: Action, refused: &Refused) -> Result<(), RunError> {
        let event = Event::Denied {
            id,
            action,
            refusal: refused.kind,
            reason: refused.message.clone(),
            rule: refused.rule.clone(),
        };
        self.record(&event).await.map_err(RunError::Audit)
    }

    async fn record(&self, event: &Event) -> Result<(), AuditError> {
        match &self.audit {
            Some(a) => a.record(event).await,
            None => Ok(()),
        }
    }
}

/// What carries out a command that passed the checker and the gate, in
/// place of the sandbox (see [`Runner::exec_line_with`]): given the request
/// with the effective access applied, that access, and the workspace's
/// real path the gate compared paths with. Its result is recorded as a
/// sandbox's would be; it must honour `run.cancel` and `request.timeout`
/// (reporting [`Outcome::Cancelled`] / [`Outcome::TimedOut`]).
pub trait Executor: Send + Sync {
    /// Carry the command out.
    fn execute<'a>(
        &'a self,
        request: &'a ExecRequest,
        effective: &'a Access,
        ws_real: &'a Path,
        run: RunOptions,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<ExecResult, SandboxError>> + Send + 'a>>;
}

/// The workspace's real path: resolved on the disk; for a runner without a
/// sandbox (whose workspace may exist only in a backend's memory), made
/// clean as spelled, as the backend's virtual jail reads it.
fn real_workspace(ws: &Path, without_sandbox: bool) -> Result<PathBuf, RunError> {
    if without_sandbox && ws.is_absolute() {
        // As the backend's virtual jail reads it, whatever this disk holds.
        return Ok(crate::path::lexical(ws));
    }
    std::fs::canonicalize(ws).map_err(|source| PolicyError::Resolve { path: ws.to_path_buf(), source }.into())
}

/// The audit log's real path (its directory resolved, its name kept),
/// refused inside the workspace: a command with write access there could
/// rewrite the record of what it did.
fn audit_log_path(f: &Path, workspace: &Path) -> Result<PathBuf, RunError> {
    let abs = std::path::absolute(f).map_err(|e| RunError::input("audit", format!("{}: {e}", f.display())))?;
    let real = match (abs.parent(), abs.file_name()) {
        (Some(dir), Some(name)) => match std::fs::canonicalize(dir) {
            Ok(d) => d.join(name),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(RunError::input(
                    "audit",
                    format!(
                        "{}: its directory does not exist: create it first (mkdir -p {})",
                        f.display(),
                        dir.display()
                    ),
                ))
            }
            Err(e) => return Err(RunError::input("audit", format!("{}: its directory: {e}", f.display()))),
        },
        _ => return Err(RunError::input("audit", format!("{}: not a file name", f.display()))),
    };
    let ws = std::fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_path_buf());
    if real.starts_with(&ws) {
        return Err(RunError::input(
            "audit",
            format!(
                "{} lies inside the workspace {}: a command with write access could rewrite it; keep the log outside",
                real.display(),
                ws.display()
            ),
        ));
    }
    Ok(real)
}

/// The sandbox's plan resolves the grants again (following links): what it
/// would make writable must lie within the effective access the gate's meet
/// decided on, or nothing runs. A link planted or swapped after the gate
/// decided (or a gate-named path that is a link) would otherwise carry a
/// grant out of what was asked and allowed.
fn within_effective(plan: &crate::sandbox::Plan, effective: &Access, ws_real: &Path) -> Result<(), SandboxError> {
    use crate::sandbox::GrantRefusal;
    let widened = |path: &Path, what: &str| {
        SandboxError::grant_refused(
            path.to_path_buf(),
            GrantRefusal::Changed,
            format!(
                "{what} {} resolved, when the sandbox planned the run, to a path outside the access the gate allowed \
                 (a link changed after the gate decided, or the gate named a link); nothing ran: name real paths and try again",
                path.display()
            ),
        )
    };
    if plan.workspace != ws_real {
        return Err(widened(&plan.workspace, "the workspace"));
    }
    if plan.writable && !effective.permits(&plan.workspace, ws_real) {
        return Err(widened(&plan.workspace, "the writable workspace"));
    }
    match plan.write_grants.iter().find(|g| !effective.permits(g, ws_real)) {
        Some(g) => Err(widened(g, "write grant")),
        None => Ok(()),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The outcome record of an action that produced no command result (a
/// direct file operation, a sandbox that failed before the command ran).
pub(crate) fn ended(
    id: String,
    status: Status,
    started: std::time::Instant,
    effective: Access,
    error: Option<String>,
) -> Event {
    Event::Outcome {
        id,
        status,
        exit_code: None,
        signal: None,
        duration_ms: millis(started.elapsed()),
        effective,
        refused_writes: None,
        removed: Vec::new(),
        error,
    }
}

/// The outcome record of a command that ran.
fn outcome_event(id: &str, effective: &Access, r: &ExecResult) -> Event {
    let (status, exit_code, signal) = match r.outcome {
        Outcome::Exited { code } => (Status::Completed, Some(code), None),
        Outcome::Signaled { signal } => (Status::Completed, None, Some(signal)),
        Outcome::TimedOut => (Status::TimedOut, None, None),
        Outcome::Cancelled => (Status::Cancelled, None, None),
    };
    Event::Outcome {
        id: id.to_string(),
        status,
        exit_code,
        signal,
        duration_ms: millis(r.duration),
        effective: effective.clone(),
        refused_writes: RefusedWritesRecord::of(&r.refused_writes),
        removed: r.removed_paths(),
        error: None,
    }
}

/// A fresh action id: 16 random bytes, hex.
pub(crate) fn new_id() -> String {
    let mut b = [0u8; 16];
    crate::sys::random(&mut b);
    b.iter().map(|x| format!("{x:02x}")).collect()
}
