//! What carries a workspace's work out: the [`Backend`] trait, and
//! [`Local`], the real disk through a directory capability plus the
//! sandbox.
//!
//! A backend does the operations; the [`super::Workspace`] decides whether
//! they may happen. Every mutating call reaches a backend only after the
//! workspace has had the path judged (by the backend's own jail: the real
//! disk's, resolved as the kernel would, or an in-memory tree's), applied
//! the protected-path rule, asked the gate and written the audit's
//! `allowed` record; a command reaches it with the policy checker's, the
//! gate's and the audit's work still to do in [`Runner`], which every
//! backend must call through (the local one runs the sandbox there). So a
//! backend cannot weaken the policy: it only says how a judged action is
//! carried out.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use crate::gate;
use crate::policy::{PathAccess, PathJail, WorkspacePolicy};
use crate::runner::{Exec, ExecOptions, RunError, Runner};
use crate::sandbox::RunOptions;

use super::files::{Edit, Edited, FileError, Files, Judged, ReadOptions, ReadWindow, Written};
use super::list::{ListError, ListOptions, ListResult};
use super::search::{GlobResult, GrepOptions, GrepResult, SearchError};
use tokio_util::sync::CancellationToken;

/// A boxed future, as the trait's methods return (the trait stays usable as
/// `dyn Backend`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Carries out a workspace's file operations and commands.
///
/// Paths reach the operations judged ([`Backend::judge`]): an operation
/// acts on the judged real path and must not resolve the caller's spelling
/// again. The shared test suite (`tests/suite/ws_backends.rs`) runs against
/// every backend where the behaviour is meant to be the same.
pub trait Backend: Send + Sync + 'static {
    /// The workspace's real root.
    fn root(&self) -> &Path;

    /// The jail paths are judged by (its roots and deny globs; the
    /// protected-path rule reads them).
    fn jail(&self) -> &PathJail;

    /// What carries out a file action, as the gate and the audit name it.
    fn fs_backend(&self) -> gate::Backend;

    /// What carries out this backend's background jobs in place of the
    /// sandbox (`None`: the sandbox, through the runner), for `line` run
    /// through `runner`.
    fn job_executor(&self, _runner: Arc<Runner>, _line: &str) -> Option<Arc<dyn crate::runner::Executor>> {
        None
    }

    /// Whether its commands run in the runner's sandbox (`false`: it
    /// carries them out itself, as the mock does, and the workspace builds
    /// its runner without a sandbox, see
    /// [`crate::runner::RunnerBuilder::without_sandbox`]).
    fn sandboxed(&self) -> bool {
        true
    }

    /// Judge `path` (relative to the root, or absolute) for `access`.
    fn judge(&self, path: &Path, access: PathAccess) -> Result<Judged, FileError>;

    /// Judge the removal of `path`: a link is removed itself.
    fn judge_remove(&self, path: &Path) -> Result<Judged, FileError>;

    /// A numbered window of a text file.
    fn read_file<'a>(&'a self, j: &'a Judged, opts: ReadOptions) -> BoxFuture<'a, Result<ReadWindow, FileError>>;

    /// Write a whole file atomically (parents created).
    fn write_file<'a>(&'a self, j: &'a Judged, data: Vec<u8>) -> BoxFuture<'a, Result<Written, FileError>>;

    /// Apply exact edits, all or none (`multi`: name the failing edit's
    /// index), optionally pinned to the file's hash.
    fn edit<'a>(
        &'a self,
        j: &'a Judged,
        edits: Vec<Edit>,
        expect_hash: Option<String>,
        multi: bool,
    ) -> BoxFuture<'a, Result<Edited, FileError>>;

    /// Make a directory and its missing parents.
    fn mkdir<'a>(&'a self, j: &'a Judged) -> BoxFuture<'a, Result<(), FileError>>;

    /// Remove a file, a link or an empty directory.
    fn remove<'a>(&'a self, j: &'a Judged) -> BoxFuture<'a, Result<(), FileError>>;

    /// Whether the path exists (a link counts).
    fn exists<'a>(&'a self, j: &'a Judged) -> BoxFuture<'a, Result<bool, FileError>>;

    /// List a directory (relative to the root), bounded as `opts` says.
    fn list_dir<'a>(&'a self, path: &'a Path, opts: ListOptions) -> BoxFuture<'a, Result<ListResult, ListError>>;

    /// Search file contents.
    fn grep(&self, opts: GrepOptions) -> BoxFuture<'_, Result<GrepResult, SearchError>>;

    /// Find files by glob.
    fn glob<'a>(
        &'a self,
        pattern: &'a str,
        max: usize,
        cancel: Option<CancellationToken>,
    ) -> BoxFuture<'a, Result<GlobResult, SearchError>>;

    /// Check, gate, record and run one line through `runner` (the policy,
    /// the gate and the audit are the runner's; the backend decides what
    /// "run" means).
    fn exec<'a>(
        &'a self,
        runner: &'a Runner,
        line: &'a str,
        opts: ExecOptions,
        run: RunOptions,
    ) -> BoxFuture<'a, Result<Exec, RunError>>;

    /// The same backend narrowed to `dir` (a real path below the root),
    /// judging by `policy` (the scoped policy). A `dir` that is not a
    /// directory is `FileError::Io` with `ENOTDIR`.
    fn scope(&self, dir: &Path, policy: &WorkspacePolicy) -> Result<Arc<dyn Backend>, FileError>;
}

/// The real disk and the sandbox.
#[derive(Clone, Debug)]
pub struct Local {
    files: Files,
    root: PathBuf,
}

impl Local {
    /// The local backend of `policy` (its workspace must exist).
    pub fn new(policy: &WorkspacePolicy) -> Result<Local, FileError> {
        let jail = PathJail::new(policy)?;
        let root = jail.root().to_path_buf();
        Ok(Local { files: Files::new(jail)?, root })
    }

    /// The file operations underneath.
    pub fn files(&self) -> &Files {
        &self.files
    }
}

/// Run blocking work (a directory walk) off the runtime's threads.
async fn blocking<T: Send + 'static, E: Send + 'static>(
    f: impl FnOnce() -> Result<T, E> + Send + 'static,
    failed: impl FnOnce(String) -> E,
) -> Result<T, E> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) => Err(failed(format!("the worker failed: {e}"))),
    }
}

impl Backend for Local {
    fn root(&self) -> &Path {
        &self.root
    }

    fn jail(&self) -> &PathJail {
        self.files.jail()
    }

    fn fs_backend(&self) -> gate::Backend {
        gate::Backend::Direct
    }

    fn judge(&self, path: &Path, access: PathAccess) -> Result<Judged, FileError> {
        self.files.judge(path, access)
    }

    fn judge_remove(&self, path: &Path) -> Result<Judged, FileError> {
        self.files.judge_remove(path)
    }

    fn read_file<'a>(&'a self, j: &'a Judged, opts: ReadOptions) -> BoxFuture<'a, Result<ReadWindow, FileError>> {
        Box::pin(self.files.read_file(j, opts))
    }

    fn write_file<'a>(&'a self, j: &'a Judged, data: Vec<u8>) -> BoxFuture<'a, Result<Written, FileError>> {
        Box::pin(self.files.write_file(j, data))
    }

    fn edit<'a>(
        &'a self,
        j: &'a Judged,
        edits: Vec<Edit>,
        expect_hash: Option<String>,
        multi: bool,
    ) -> BoxFuture<'a, Result<Edited, FileError>> {
        Box::pin(async move {
            match (multi, <[Edit; 1]>::try_from(edits)) {
                (false, Ok([one])) => self.files.edit_file(j, one, expect_hash).await,
                (_, Ok([one])) => self.files.multi_edit(j, vec![one], expect_hash).await,
                (_, Err(edits)) => self.files.multi_edit(j, edits, expect_hash).await,
            }
        })
    }

    fn mkdir<'a>(&'a self, j: &'a Judged) -> BoxFuture<'a, Result<(), FileError>> {
        Box::pin(self.files.mkdir(j))
    }

    fn remove<'a>(&'a self, j: &'a Judged) -> BoxFuture<'a, Result<(), FileError>> {
        Box::pin(self.files.remove(j))
    }

    fn exists<'a>(&'a self, j: &'a Judged) -> BoxFuture<'a, Result<bool, FileError>> {
        Box::pin(self.files.exists(j))
    }

    fn list_dir<'a>(&'a self, path: &'a Path, opts: ListOptions) -> BoxFuture<'a, Result<ListResult, ListError>> {
        let (root, deny, path) = (self.root.clone(), self.files.jail().deny().clone(), path.to_path_buf());
        Box::pin(blocking(
            move || super::list::list_dir(&root, &deny, &path, &opts),
            |why| ListError::Open { path: PathBuf::new(), source: std::io::Error::other(why) },
        ))
    }

    fn grep(&self, opts: GrepOptions) -> BoxFuture<'_, Result<GrepResult, SearchError>> {
        let (root, deny) = (self.root.clone(), self.files.jail().deny().clone());
        let r = root.clone();
        Box::pin(blocking(
            move || super::search::grep(&root, &deny, &opts),
            move |why| SearchError::Root { root: r, source: std::io::Error::other(why) },
        ))
    }

    fn glob<'a>(
        &'a self,
        pattern: &'a str,
        max: usize,
        cancel: Option<CancellationToken>,
    ) -> BoxFuture<'a, Result<GlobResult, SearchError>> {
        let (root, deny, pattern) = (self.root.clone(), self.files.jail().deny().clone(), pattern.to_string());
        let r = root.clone();
        Box::pin(blocking(
            move || super::search::glob_cancellable(&root, &deny, &pattern, max, cancel.as_ref()),
            move |why| SearchError::Root { root: r, source: std::io::Error::other(why) },
        ))
    }

    fn exec<'a>(
        &'a self,
        runner: &'a Runner,
        line: &'a str,
        opts: ExecOptions,
        run: RunOptions,
    ) -> BoxFuture<'a, Result<Exec, RunError>> {
        Box::pin(async move { runner.exec_line(line, &opts, run).await })
    }

    fn scope(&self, dir: &Path, policy: &WorkspacePolicy) -> Result<Arc<dyn Backend>, FileError> {
        let j = self.files.judge(dir, PathAccess::Read)?;
        if !self.files.is_dir(&j)? {
            return Err(FileError::Io {
                op: "scope",
                path: dir.to_path_buf(),
                source: std::io::Error::from_raw_os_error(libc::ENOTDIR),
            });
        }
        Ok(Arc::new(Local::new(policy)?))
    }
}
