//! The [`Workspace`]: one long-lived object a host builds from a policy,
//! through which every read, write and command passes the path jail, the
//! shell checker, the gate and the audit, and every command runs in the
//! sandbox (see the module docs of [`crate::workspace`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::policy::{ListPolicy, PathAccess, PolicyError, ReadPolicy, WorkspacePolicy};
use crate::runner::{Exec, ExecOptions, Refused, RunError, Runner, RunnerBuilder};
use crate::sandbox::{RunOptions, Sandbox};

use super::backend::{Backend, Local};
use super::files::{Edit, Edited, FileError, Judged, ReadOptions, ReadWindow, Written};
use super::jobs::{JobError, JobOutput, Jobs, KillReport, Started};
use super::list::{ListError, ListOptions, ListResult};
use super::search::{GlobResult, GrepOptions, GrepResult, SearchError};
use super::todos::{Todo, TodoCounts, TodoError, Todos};
use tokio_util::sync::CancellationToken;

/// Why a workspace call did not do what was asked. A refusal (the policy,
/// the gate, a read-only view) and the edit refusals (`not-found`,
/// `not-unique`, `stale-hash`) change nothing; [`WorkspaceError::kind`]
/// names each for a model to branch on.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkspaceError {
    /// The policy, the gate or the view refused the action: nothing was
    /// done, and the audit has a `denied` record of it.
    #[error("{0}")]
    Refused(Refused),
    /// A file operation failed or was refused by the jail.
    #[error(transparent)]
    File(#[from] FileError),
    /// A listing failed.
    #[error(transparent)]
    List(#[from] ListError),
    /// A search did not start.
    #[error(transparent)]
    Search(#[from] SearchError),
    /// A todo list was refused.
    #[error(transparent)]
    Todo(#[from] TodoError),
    /// A background job could not be found or read.
    #[error(transparent)]
    Job(#[from] JobError),
    /// A read-only view may only kill the background jobs it started.
    #[error("background job {id} was not started by this read-only view: a reviewer does not stop the work of others")]
    NotYourJob {
        /// The job.
        id: String,
    },
    /// A fault: the audit, the gate or the sandbox could not do its part.
    #[error(transparent)]
    Run(#[from] RunError),
    /// A file was to be written at a path that names a directory by its
    /// spelling: it ends in `/` (such a path was written as the file
    /// without the slash before), `.` or `..`, or is empty.
    #[error("{}", not_a_file_name(path))]
    NotAFileName {
        /// The path as given.
        path: PathBuf,
    },
    /// A scope was asked for a path that is not a directory.
    #[error("{}: not a directory; a scope narrows the workspace to a directory inside it", path.display())]
    NotADirectory {
        /// The path as given.
        path: PathBuf,
    },
    /// A scope was asked for a directory inside a git dir of the
    /// workspace (`.git`, a directory below it, a bare repository): there
    /// its hooks and config would be ordinary, writable files.
    #[error(
        "{}: inside the git dir {}; a scope there would make its hooks and config ordinary, writable files: \
         scope a directory of the working tree instead",
        path.display(),
        git_dir.display()
    )]
    InGitDir {
        /// The path as given.
        path: PathBuf,
        /// The git dir it is in.
        git_dir: PathBuf,
    },
    /// The workspace was disposed of: it takes no new work.
    #[error("the workspace was disposed of: it takes no new work; build a new one")]
    Disposed,
}

impl From<PolicyError> for WorkspaceError {
    fn from(e: PolicyError) -> Self {
        WorkspaceError::File(FileError::Jail(e))
    }
}

fn not_a_file_name(path: &Path) -> String {
    if path.as_os_str().is_empty() {
        "the path is empty; give the file's path, relative to the workspace".into()
    } else {
        format!(
            "{}: not a file's name (it ends in `/`, `.` or `..`, which name directories); give the file's path",
            path.display()
        )
    }
}

impl WorkspaceError {
    /// A short name of what happened, stable for a model or a tool to
    /// branch on: `path-escape`, `refused-by-policy`, `refused-by-gate`,
    /// `busy`, `not-found`, `not-unique`, `stale-hash`, `invalid-edit`,
    /// `too-many-edits`, `binary`, `not-regular`, `changed`,
    /// `unsafe-pattern`, `bad-glob`, `bad-path`, `todo`, `io`, `fault`,
    /// `disposed`.
    pub fn kind(&self) -> &'static str {
        match self {
            WorkspaceError::Refused(r) => r.kind_name(),
            WorkspaceError::File(f) => match f {
                FileError::Jail(PolicyError::PathEscape { .. }) => "path-escape",
                // A name the kernel cannot take (a NUL byte in it): the
                // argument's fault.
                FileError::Jail(PolicyError::Resolve { source, .. }) if names_badly(source) => "bad-path",
                FileError::Jail(_) => "fault",
                FileError::NotJudgedForWrite { .. } => "fault",
                FileError::NotFound { .. } => "not-found",
                FileError::NotUnique { .. } => "not-unique",
                FileError::StaleHash { .. } => "stale-hash",
                FileError::InvalidEdit { .. } => "invalid-edit",
                FileError::TooManyEdits { .. } => "too-many-edits",
                FileError::Binary { .. } => "binary",
                FileError::NotRegular { .. } => "not-regular",
                FileError::Changed { .. } => "changed",
                FileError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => "no-such-file",
                // A directory where a file was named, a file on the way, a
                // name the kernel cannot take. Not `EINVAL` here: a
                // filesystem without `RENAME_NOREPLACE` (NFS) answers the
                // write's rename so, which is the host's.
                FileError::Io { source, .. } if source.raw_os_error() != Some(libc::EINVAL) && names_badly(source) => {
                    "bad-path"
                }
                FileError::Io { .. } => "io",
            },
            WorkspaceError::List(l) => match l {
                ListError::Outside { .. } | ListError::Denied { .. } | ListError::Link { outside: true, .. } => {
                    "path-escape"
                }
                ListError::Link { outside: false, .. } => "bad-path",
                ListError::BadIgnore(_) => "bad-glob",
                ListError::Open { source, .. } if source.kind() == std::io::ErrorKind::NotFound => "no-such-file",
                // A link (not followed) or a file where a directory was
                // asked for: the argument's fault, not the host's.
                ListError::Open { source, .. } if names_badly(source) => "bad-path",
                ListError::Open { .. } => "io",
            },
            WorkspaceError::Search(s) => match s {
                SearchError::PatternTooLong { .. } | SearchError::BadPattern { .. } => "unsafe-pattern",
                SearchError::BadGlob { .. } => "bad-glob",
                SearchError::BadPath { .. } => "bad-path",
                SearchError::Denied { .. } => "path-escape",
                SearchError::Root { .. } => "io",
            },
            WorkspaceError::Todo(_) => "todo",
            WorkspaceError::Job(j) => match j {
                JobError::NotFound { .. } => "job-not-found",
                JobError::Disposed => "disposed",
                JobError::BadCursor { .. } => "bad-cursor",
                _ => "fault",
            },
            WorkspaceError::NotYourJob { .. } => "refused-by-policy",
            // The caller's own timeout ran out before the command started.
            WorkspaceError::Run(RunError::Sandbox(crate::sandbox::SandboxError::TimedOutBeforeStart { .. })) => {
                "timed-out"
            }
            // A write's path the jail could not resolve (it goes through
            // the audit's permit, which passes the jail's error on).
            WorkspaceError::Run(RunError::Policy(PolicyError::Resolve { source, .. })) if names_badly(source) => {
                "bad-path"
            }
            WorkspaceError::Run(_) => "fault",
            WorkspaceError::NotADirectory { .. }
            | WorkspaceError::InGitDir { .. }
            | WorkspaceError::NotAFileName { .. } => "bad-path",
            WorkspaceError::Disposed => "disposed",
        }
    }

    /// Whether nothing was done because something refused it (as opposed
    /// to a fault).
    pub fn is_refusal(&self) -> bool {
        !matches!(self.kind(), "fault" | "io" | "disposed")
    }
}

/// Whether `e` is the kernel (or the standard library, before the call)
/// refusing the name it was given, which is the argument's fault, not the
/// host's: a NUL byte in it (`InvalidInput`), a name too long, `.` or `..`
/// where a file is created (`EINVAL`), a directory where a file was named
/// or a file on the way (`EISDIR`, `ENOTDIR`), a link not followed
/// (`ELOOP`). They were answered `fault` or `io` ("not caused by the
/// arguments; tell the user") by some tools and `bad-path` by others
/// (session 29's review).
fn names_badly(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::InvalidInput
        || matches!(
            e.raw_os_error(),
            Some(libc::ENAMETOOLONG | libc::EINVAL | libc::EISDIR | libc::ENOTDIR | libc::ELOOP)
        )
}

/// Builds a [`Workspace`]: plain settings, then one [`WorkspaceBuilder::build`].
#[derive(Default)]
pub struct WorkspaceBuilder {
    runner: RunnerBuilder,
    policy: Option<WorkspacePolicy>,
    workspace: Option<PathBuf>,
    backend: Option<BackendChoice>,
}

/// Which backend a builder makes.
enum BackendChoice {
    /// A backend the caller made for the policy (the mock).
    Given(Arc<dyn Backend>),
}

impl WorkspaceBuilder {
    /// The policy (its workspace, unless [`WorkspaceBuilder::workspace`]
    /// names another).
    pub fn policy(mut self, policy: WorkspacePolicy) -> Self {
        self.policy = Some(policy);
        self
    }

    /// Read the policy from this file (and keep the file read-only to the
    /// workspace's commands and writes).
    pub fn policy_file(mut self, file: &Path) -> Result<Self, WorkspaceError> {
        let policy = WorkspacePolicy::from_file(file)?;
        self.runner = self.runner.policy_file(file)?;
        self.policy = Some(policy);
        Ok(self)
    }

    /// The policy as read so far (by [`WorkspaceBuilder::policy_file`] or
    /// given), to adjust before [`WorkspaceBuilder::build`]; the file stays
    /// protected as read.
    pub fn policy_mut(&mut self) -> Option<&mut WorkspacePolicy> {
        self.policy.as_mut()
    }

    /// The workspace directory (overrides the policy's). Without a policy,
    /// the default one: file tools on this directory, no command may run.
    pub fn workspace(mut self, dir: impl Into<PathBuf>) -> Self {
        self.workspace = Some(dir.into());
        self
    }

    /// The host's own gate (replaces the policy's `[[gate]]` rules).
    pub fn gate(mut self, gate: Arc<dyn crate::gate::Gate>) -> Self {
        self.runner = self.runner.gate(gate);
        self
    }

    /// Record every action here.
    pub fn audit(mut self, audit: Arc<dyn crate::audit::Audit>) -> Self {
        self.runner = self.runner.audit(audit);
        self
    }

    /// Record every action in this JSON Lines log (outside the workspace).
    pub fn audit_log(mut self, file: impl Into<PathBuf>) -> Self {
        self.runner = self.runner.audit_log(file);
        self
    }

    /// Use this sandbox (default: [`Sandbox::new`]). Unless it has a pool
    /// of its own ([`Sandbox::with_pool`]), it gets the policy's (`pool`).
    pub fn sandbox(mut self, sandbox: Sandbox) -> Self {
        self.runner = self.runner.sandbox(sandbox);
        self
    }

    /// Carry the work out with this backend instead of the real disk and
    /// the sandbox (the mock, for hermetic tests).
    pub fn backend(mut self, backend: Arc<dyn Backend>) -> Self {
        self.backend = Some(BackendChoice::Given(backend));
        self
    }

    /// Check the settings and compile what every call reuses: the policy's
    /// checker and jail, the gate, the audit sink, the directory
    /// capabilities of the jail's roots.
    pub fn build(self) -> Result<Workspace, WorkspaceError> {
        let mut policy = self.policy.unwrap_or_default();
        if let Some(ws) = &self.workspace {
            let abs =
                std::path::absolute(ws).map_err(|e| RunError::input("workspace", format!("{}: {e}", ws.display())))?;
            policy.workspace = Some(abs);
        }
        policy.validate()?;
        // A workspace lives for many commands: it keeps sandboxes made ahead
        // (unless the sandbox given has a pool of its own), and its commands
        // share one network (network = "none").
        let pool = policy.pool.unwrap_or(crate::policy::DEFAULT_POOL);
        let runner = self.runner.policy(policy.clone()).pool(pool as usize).shared_network();
        let (runner, backend): (_, Arc<dyn Backend>) = match self.backend {
            // A backend that runs no process needs no sandbox (and no helper
            // binary, no kernel feature): its commands still pass the
            // checker, the gate and the audit of this runner.
            Some(BackendChoice::Given(b)) if !b.sandboxed() => (runner.without_sandbox().build()?, b),
            Some(BackendChoice::Given(b)) => (runner.build()?, b),
            None => (runner.build()?, Arc::new(Local::new(&policy)?)),
        };
        if backend.sandboxed() {
            runner.prime_pool();
        }
        let view = View {
            runner: Arc::new(runner),
            read: policy.read.clone(),
            list: policy.list.clone(),
            shell_timeout: policy.shell.as_ref().map(|s| s.timeout),
            backend,
            readonly: false,
        };
        Ok(Workspace {
            view: Arc::new(view),
            shared: Arc::new(Shared {
                todos: Todos::new(),
                jobs: Jobs::new(),
                readonly_jobs: std::sync::Mutex::default(),
                disposed: AtomicBool::new(false),
            }),
        })
    }
}

/// What every projection of one workspace shares.
struct Shared {
    todos: Todos,
    jobs: Jobs,
    /// Jobs started by read-only views (the only ones they may kill).
    readonly_jobs: std::sync::Mutex<std::collections::HashSet<String>>,
    disposed: AtomicBool,
}

/// One projection: the whole workspace, a read-only view, a scope.
struct View {
    runner: Arc<Runner>,
    backend: Arc<dyn Backend>,
    read: ReadPolicy,
    list: ListPolicy,
    shell_timeout: Option<Duration>,
    readonly: bool,
}

/// A policy-jailed workspace: file tools, commands, todos, projections.
///
/// Cheap to clone (a clone is the same workspace). Every method judges its
/// path or line first; refusals come back as [`WorkspaceError::Refused`]
/// (or, for commands, [`Exec::Refused`]) and are audited like every
/// outcome.
#[derive(Clone)]
pub struct Workspace {
    view: Arc<View>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Workspace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Workspace")
            .field("root", &self.view.backend.root())
            .field("readonly", &self.view.readonly)
            .finish_non_exhaustive()
    }
}

/// The mutating file operations, as the gate and the audit name them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mutation {
    Write,
    Edit,
    MultiEdit,
    Mkdir,
    Remove,
}

impl Mutation {
    fn kind(self) -> &'static str {
        match self {
            Mutation::Write => "fs.write",
            Mutation::Edit => "fs.edit",
            Mutation::MultiEdit => "fs.multi_edit",
            Mutation::Mkdir => "fs.mkdir",
            Mutation::Remove => "fs.remove",
        }
    }
}

impl Workspace {
    /// Start building one.
    pub fn builder() -> WorkspaceBuilder {
        WorkspaceBuilder::default()
    }

    /// The workspace's real root (a scope's is its directory).
    pub fn root(&self) -> &Path {
        self.view.backend.root()
    }

    /// The policy in force (a scope's is narrowed to it).
    pub fn policy(&self) -> Option<&WorkspacePolicy> {
        self.view.runner.policy()
    }

    /// The runner commands go through (the policy, the gate, the audit,
    /// the sandbox).
    pub fn runner(&self) -> &Runner {
        &self.view.runner
    }

    /// Whether this is a read-only view.
    pub fn is_readonly(&self) -> bool {
        self.view.readonly
    }

    fn live(&self) -> Result<(), WorkspaceError> {
        if self.shared.disposed.load(Ordering::SeqCst) {
            return Err(WorkspaceError::Disposed);
        }
        Ok(())
    }

    // ----- files -----

    /// A numbered window of a text file: lines `opts.offset..` (from 1), at
    /// most `opts.limit` (default: the policy's `read.default_lines`), at
    /// most `read.max_bytes` bytes of content (the caller's `max_bytes` can
    /// only lower it). The hash is of the whole file.
    pub async fn read_file(&self, path: impl AsRef<Path>, mut opts: ReadOptions) -> Result<ReadWindow, WorkspaceError> {
        self.live()?;
        if path.as_ref().as_os_str().is_empty() {
            return Err(WorkspaceError::NotAFileName { path: PathBuf::new() });
        }
        let j = self.view.backend.judge(path.as_ref(), PathAccess::Read)?;
        if opts.limit.is_none() {
            opts.limit = usize::try_from(self.view.read.default_lines).ok();
        }
        let cap = self.view.read.max_bytes.and_then(|m| usize::try_from(m).ok());
        opts.max_bytes = match (opts.max_bytes, cap) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        Ok(self.view.backend.read_file(&j, opts).await?)
    }

    /// Whether `path` exists (a link counts, whatever it points to). A
    /// path outside the jail or denied is an error, not `false`.
    pub async fn exists(&self, path: impl AsRef<Path>) -> Result<bool, WorkspaceError> {
        self.live()?;
        let j = self.view.backend.judge(path.as_ref(), PathAccess::Read)?;
        Ok(self.view.backend.exists(&j).await?)
    }

    /// Write a whole file (created with its missing parents, or replaced
    /// atomically with its mode kept), through the gate and the audit.
    pub async fn write_file(
        &self,
        path: impl AsRef<Path>,
        data: impl Into<Vec<u8>>,
    ) -> Result<Written, WorkspaceError> {
        let data = data.into();
        let p = path.as_ref();
        // By its bytes: `Path` drops a trailing `/` and `/.` from its
        // components (`a/.` has the file name `a`).
        let b = p.as_os_str().as_encoded_bytes();
        let last = b.rsplit(|c| *c == b'/').next().unwrap_or_default();
        if matches!(last, b"" | b"." | b"..") {
            return Err(WorkspaceError::NotAFileName { path: p.to_path_buf() });
        }
        self.mutate(Mutation::Write, path.as_ref(), |b, j| b.write_file(j, data)).await
    }

    /// Replace `edit.old` by `edit.new`: exactly, and once unless
    /// `replace_all`; with `expect_hash`, only if the file is still the one
    /// read.
    pub async fn edit_file(
        &self,
        path: impl AsRef<Path>,
        edit: Edit,
        expect_hash: Option<String>,
    ) -> Result<Edited, WorkspaceError> {
        self.mutate(Mutation::Edit, path.as_ref(), |b, j| b.edit(j, vec![edit], expect_hash, false)).await
    }

    /// Apply up to 100 edits in order, all or none (the failing one is
    /// named by its `edit_index`).
    pub async fn multi_edit(
        &self,
        path: impl AsRef<Path>,
        edits: Vec<Edit>,
        expect_hash: Option<String>,
    ) -> Result<Edited, WorkspaceError> {
        if edits.len() > super::files::MAX_EDITS {
            return Err(FileError::TooManyEdits { path: path.as_ref().to_path_buf(), count: edits.len() }.into());
        }
        if edits.is_empty() {
            // As `edit_file` refuses an edit that changes nothing.
            return Err(FileError::InvalidEdit {
                path: path.as_ref().to_path_buf(),
                edit_index: None,
                why: "no edits: give at least one".into(),
            }
            .into());
        }
        self.mutate(Mutation::MultiEdit, path.as_ref(), |b, j| b.edit(j, edits, expect_hash, true)).await
    }

    /// Make a directory and its missing parents.
    pub async fn mkdir(&self, path: impl AsRef<Path>) -> Result<(), WorkspaceError> {
        self.mutate(Mutation::Mkdir, path.as_ref(), |b, j| b.mkdir(j)).await
    }

    /// Remove a file, a link (itself) or an empty directory.
    pub async fn remove(&self, path: impl AsRef<Path>) -> Result<(), WorkspaceError> {
        self.mutate(Mutation::Remove, path.as_ref(), |b, j| b.remove(j)).await
    }

    /// The one path of every mutation: judge (the jail), refuse in a
    /// read-only view, the protected-path rule, the gate, the `allowed`
    /// record, the operation, the outcome record.
    async fn mutate<T>(
        &self,
        m: Mutation,
        path: &Path,
        op: impl for<'a> FnOnce(&'a dyn Backend, &'a Judged) -> super::backend::BoxFuture<'a, Result<T, FileError>>,
    ) -> Result<T, WorkspaceError> {
        self.live()?;
        let backend = self.view.backend.as_ref();
        let judged = match m {
            Mutation::Remove => backend.judge_remove(path),
            _ => backend.judge(path, PathAccess::Write),
        };
        // A path the jail refuses is refused and audited as denied like any
        // refusal, and answered as for a read (`path-escape`).
        let mut escape = None;
        let (judged, answer) = match judged {
            Ok(j) => {
                let real = j.real().to_path_buf();
                (Some(j), Ok(real))
            }
            Err(FileError::Jail(e)) => {
                if let PolicyError::PathEscape { path, why } = &e {
                    escape = Some((path.clone(), why.clone()));
                }
                (None, Err(e))
            }
            Err(e) => return Err(e.into()),
        };
        let refuse = self.view.readonly.then(|| {
            format!(
                "this is a read-only view of the workspace: {} {} is not allowed here (reading, searching and \
                 read-only commands are)",
                m.kind(),
                path.display()
            )
        });
        let runner = &self.view.runner;
        let permit =
            match runner.fs_permit(backend.jail(), m.kind(), path, answer, backend.fs_backend(), refuse).await? {
                Ok(p) => p,
                Err(r) => {
                    return Err(match escape {
                        Some((path, why)) => FileError::Jail(PolicyError::PathEscape { path, why }).into(),
                        None => WorkspaceError::Refused(r),
                    })
                }
            };
        let Some(j) = judged else {
            // The jail refused it, so fs_permit refused it too.
            return Err(RunError::input("path", "the jail refused the path").into());
        };
        let done = op(backend, &j).await;
        let error = done.as_ref().err().map(ToString::to_string);
        let (_id, recorded) = runner.fs_finish(permit, error).await;
        let value = done?;
        recorded?;
        Ok(value)
    }

    /// List `path` (relative to the root; `""` or `.` for the root): at most
    /// `opts.depth` levels and `opts.max_entries` entries (both bounded by
    /// the policy's `list` section), denied paths hidden, links reported
    /// and never followed.
    pub async fn list_dir(&self, path: impl AsRef<Path>, opts: ListOptions) -> Result<ListResult, WorkspaceError> {
        self.live()?;
        let opts = opts.within(&self.view.list);
        Ok(self.view.backend.list_dir(path.as_ref(), opts).await?)
    }

    /// List options with the policy's defaults (its depth, its cap, its
    /// ignore globs).
    pub fn list_options(&self) -> ListOptions {
        ListOptions::from_policy(&self.view.list)
    }

    /// Search file contents (linear-time regex, deny globs and
    /// `.gitignore` respected, links never followed).
    pub async fn grep(&self, opts: GrepOptions) -> Result<GrepResult, WorkspaceError> {
        self.live()?;
        Ok(self.view.backend.grep(opts).await?)
    }

    /// Files matching `pattern`, at most `max`.
    pub async fn glob(&self, pattern: &str, max: usize) -> Result<GlobResult, WorkspaceError> {
        self.live()?;
        Ok(self.view.backend.glob(pattern, max, None).await?)
    }

    /// [`Workspace::glob`] that stops walking once `cancel` is cancelled
    /// (the result then says `truncated`).
    pub async fn glob_cancellable(
        &self,
        pattern: &str,
        max: usize,
        cancel: CancellationToken,
    ) -> Result<GlobResult, WorkspaceError> {
        self.live()?;
        Ok(self.view.backend.glob(pattern, max, Some(cancel)).await?)
    }

    // ----- commands -----

    /// Check, gate, audit and run one line (read as the policy reads lines)
    /// in the sandbox. A caller's timeout can only lower the policy's; a
    /// read-only view runs it without write access; stdin is `/dev/null`;
    /// the environment is the policy's and the caller's, nothing implicit
    /// from this process. Refusals and a cancellation before the start are
    /// values of [`Exec`].
    pub async fn exec(&self, line: &str, opts: ExecOptions) -> Result<Exec, WorkspaceError> {
        self.live()?;
        // The runner lowers the timeout to the policy's (as it does for
        // every caller); the view takes write access away here.
        let opts = self.view_options(opts);
        let run = RunOptions { cancel: opts.cancel.clone(), ..RunOptions::default() };
        Ok(self.view.backend.exec(&self.view.runner, line, opts, run).await?)
    }

    /// The caller's options as this view runs a foreground command:
    /// without write access in a read-only view, the timeout no longer
    /// than the policy's `shell.timeout`.
    pub fn command_options(&self, opts: ExecOptions) -> ExecOptions {
        let mut opts = self.view_options(opts);
        opts.timeout = crate::runner::lowered_timeout(self.view.shell_timeout, opts.timeout);
        opts
    }

    fn view_options(&self, mut opts: ExecOptions) -> ExecOptions {
        if self.view.readonly {
            opts.writable = false;
            opts.write.clear();
        }
        opts
    }

    // ----- background jobs -----

    /// Start `line` as a background job (the policy's `shell.background`
    /// must allow it; at most `max_jobs` at once; its timeout is
    /// `shell.background.timeout`, which the caller's can only lower).
    /// Checked, gated and audited like [`Workspace::exec`] (the gate sees
    /// `background: true`); a refusal is [`Started::Refused`].
    pub async fn start_shell(&self, line: &str, opts: ExecOptions) -> Result<Started, WorkspaceError> {
        self.live()?;
        let opts = self.view_options(opts);
        let cancel = opts.cancel.clone();
        let runner = Arc::clone(&self.view.runner);
        let started = match self.view.backend.job_executor(Arc::clone(&runner), line) {
            Some(x) => self.shared.jobs.start_line_with(runner, line, opts, cancel, x).await?,
            None => self.shared.jobs.start_line(runner, line, opts, cancel).await?,
        };
        if let (Started::Job { id, .. }, true) = (&started, self.view.readonly) {
            if let Ok(mut mine) = self.shared.readonly_jobs.lock() {
                mine.insert(id.clone());
            }
        }
        Ok(started)
    }

    /// A job's output since `since` (a cursor an earlier read returned;
    /// `None`: from the oldest byte kept), waiting up to `wait` for more
    /// if there is none yet, and where the job is.
    pub async fn shell_output(
        &self,
        id: &str,
        since: Option<u64>,
        wait: Duration,
    ) -> Result<JobOutput, WorkspaceError> {
        Ok(self.shared.jobs.output(id, since, wait).await?)
    }

    /// Kill a job's whole process tree (through its cgroup; only processes
    /// this workspace started are ever signalled) and wait until it is
    /// gone. A read-only view may kill only the jobs it started.
    pub async fn shell_kill(&self, id: &str) -> Result<KillReport, WorkspaceError> {
        if self.view.readonly {
            let mine = self.shared.readonly_jobs.lock().map(|m| m.contains(id)).unwrap_or(false);
            if !mine && self.shared.jobs.ids().iter().any(|j| j == id) {
                return Err(WorkspaceError::NotYourJob { id: id.to_string() });
            }
        }
        Ok(self.shared.jobs.kill(id).await?)
    }

    /// The ids of the jobs this workspace knows (running, and ended ones
    /// not yet forgotten).
    pub fn job_ids(&self) -> Vec<String> {
        self.shared.jobs.ids()
    }

    // ----- todos -----

    /// Replace the todo list (at most 100 items), shared by every
    /// projection of this workspace.
    pub fn write_todos(&self, items: Vec<Todo>) -> Result<TodoCounts, WorkspaceError> {
        Ok(self.shared.todos.write_todos(items)?)
    }

    /// The todo list and its counts.
    pub fn read_todos(&self) -> (Vec<Todo>, TodoCounts) {
        self.shared.todos.read_todos()
    }

    // ----- projections -----

    /// A read-only view: every mutating file method is refused (a policy
    /// refusal, audited); commands still run, always without write access
    /// (the kernel enforces it). Shares todos (and jobs) with this one.
    pub fn readonly(&self) -> Workspace {
        let v = &self.view;
        let view = View {
            runner: Arc::clone(&v.runner),
            backend: Arc::clone(&v.backend),
            read: v.read.clone(),
            list: v.list.clone(),
            shell_timeout: v.shell_timeout,
            readonly: true,
        };
        Workspace { view: Arc::new(view), shared: Arc::clone(&self.shared) }
    }

    /// The workspace narrowed to `subdir` (relative to this one's root, a
    /// directory inside it): the same policy, backend, todos and jobs; its
    /// paths resolve below `subdir` and cannot reach the parent; commands
    /// run with `subdir` as their workspace.
    pub fn scope(&self, subdir: impl AsRef<Path>) -> Result<Workspace, WorkspaceError> {
        self.live()?;
        let v = &self.view;
        let j = v.backend.judge(subdir.as_ref(), PathAccess::Read)?;
        if let Some(git_dir) = crate::runner::git_dir_around(v.backend.root(), j.real()) {
            return Err(WorkspaceError::InGitDir { path: subdir.as_ref().to_path_buf(), git_dir });
        }
        let policy = v.runner.scoped_policy(j.real())?.unwrap_or_else(|| WorkspacePolicy {
            workspace: Some(j.real().to_path_buf()),
            ..WorkspacePolicy::default()
        });
        // The backend first: it says whether `subdir` is a directory.
        let backend = v.backend.scope(j.real(), &policy).map_err(|e| match e {
            FileError::Io { ref source, .. } if source.raw_os_error() == Some(libc::ENOTDIR) => {
                WorkspaceError::NotADirectory { path: subdir.as_ref().to_path_buf() }
            }
            e => e.into(),
        })?;
        let runner = v.runner.scoped(j.real())?;
        let view = View {
            runner: Arc::new(runner),
            backend,
            read: v.read.clone(),
            list: v.list.clone(),
            shell_timeout: v.shell_timeout,
            readonly: v.readonly,
        };
        Ok(Workspace { view: Arc::new(view), shared: Arc::clone(&self.shared) })
    }

    /// The pre-made sandboxes' state (`pool` in the policy), when the
    /// workspace keeps any.
    pub fn pool_status(&self) -> Option<crate::sandbox::PoolStatus> {
        self.view.runner.sandbox().ok().and_then(|s| s.pool_status())
    }

    /// Kill every background job (waiting until each tree is gone) and
    /// refuse new work from now on, in every projection, and end the
    /// pre-made sandboxes. Dropping the last handle of a workspace kills its
    /// jobs too (without waiting), and its pre-made sandboxes.
    pub async fn dispose(&self) {
        self.shared.disposed.store(true, Ordering::SeqCst);
        self.shared.jobs.dispose().await;
        // Every job is gone: the sandboxes made ahead go (and no more are
        // made), and closing the shared network's descriptors ends it.
        if let Ok(sb) = self.view.runner.sandbox() {
            // What the runs left behind their results (their helpers'
            // exits, namespaces and cgroup leaves) is done first.
            sb.settle(std::time::Duration::from_secs(10)).await;
            // A pool of a sandbox given to the builder is its owner's.
            if self.view.runner.owns_pool() {
                sb.close_pool();
            }
            sb.release_network();
        }
    }
}
