//! Direct file operations through the library: the same jail, gate and
//! audit as a command, so a refused command cannot be replaced by a write.
//!
//! A path is judged by the policy's jail (resolved as the kernel would),
//! then by the protected-path rule, then by the gate; the operation itself
//! runs from a descriptor of the root that holds the path (a
//! [`Dir`], `openat2` with links refused, or a walk with `O_NOFOLLOW`), so a
//! link swapped in after the judgement fails the operation instead of
//! redirecting it. A whole-file
//! write goes to a new file in the same directory and is renamed over the
//! old one (readers see the old or the new content, never half of it; the
//! file's other hard-linked names, if any, keep the old content).

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::audit::{Event, RefusalKind, Status};
use crate::gate::{Access, Action, Backend, FsAction};
use crate::path::dir::{Dir, Links};
use crate::policy::{PathAccess, PathJail, PolicyError, WorkspacePolicy};
use crate::sandbox::DEFAULT_PROTECTED;

use super::{new_id, Refused, RunError, Runner};

/// A direct file operation that was carried out.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FsDone {
    /// The action's id (as in the audit log).
    pub id: String,
    /// The path written, as the jail resolved it.
    pub path: PathBuf,
    /// Bytes written (`fs.write`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
}

/// What became of a direct file operation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fs {
    /// It was done.
    Done(FsDone),
    /// It was refused; nothing was touched.
    Refused(Refused),
}

/// A direct file action that passed the jail, the protected-path rule
/// and the gate, and whose `allowed` record is written.
#[derive(Debug)]
pub(crate) struct FsPermit {
    /// The action's id (as in the audit log).
    pub id: String,
    /// The real path to act on.
    pub resolved: PathBuf,
    effective: Access,
    started: std::time::Instant,
}

/// What to do at the resolved path.
enum Op<'a> {
    Write(&'a [u8]),
    Remove,
    Mkdir,
}

impl Op<'_> {
    fn kind(&self) -> &'static str {
        match self {
            Op::Write(_) => "fs.write",
            Op::Remove => "fs.remove",
            Op::Mkdir => "fs.mkdir",
        }
    }
}

impl Runner {
    /// Write a whole file (created, with missing parent directories, or
    /// replaced), through the jail, the gate and the audit.
    pub async fn write_file(&self, path: &Path, data: &[u8]) -> Result<Fs, RunError> {
        self.fs_op(path, Op::Write(data)).await
    }

    /// Remove a file, a link, or an empty directory.
    pub async fn remove(&self, path: &Path) -> Result<Fs, RunError> {
        self.fs_op(path, Op::Remove).await
    }

    /// Make a directory and any missing parents.
    pub async fn mkdir(&self, path: &Path) -> Result<Fs, RunError> {
        self.fs_op(path, Op::Mkdir).await
    }

    fn jail(&self) -> Result<PathJail, PolicyError> {
        match &self.policy {
            Some(p) => PathJail::new(p),
            None => PathJail::new(&WorkspacePolicy { workspace: Some(self.workspace.clone()), ..Default::default() }),
        }
    }

    async fn fs_op(&self, path: &Path, op: Op<'_>) -> Result<Fs, RunError> {
        let kind = op.kind();
        let jail = self.jail()?;
        // A removal of a link removes the link (as `rm` does), not what it
        // points to: the target is judged as for any write (a link whose
        // own name is denied is refused there), and the link is removed
        // from its real directory.
        let judged = jail.resolve(path, PathAccess::Write).and_then(|real| match op {
            Op::Remove => Ok(link_itself(&jail, path)?.unwrap_or(real)),
            _ => Ok(real),
        });
        let permit = match self.fs_permit(&jail, kind, path, judged, Backend::Direct, None).await? {
            Ok(p) => p,
            Err(r) => return Ok(Fs::Refused(r)),
        };
        let resolved = permit.resolved.clone();
        let base = base_of(&jail, &resolved);
        let done = carry_out(&base, &resolved, &op);
        let error = done.as_ref().err().map(|e| format!("{kind} {}: {e}", path.display()));
        let (id, recorded) = self.fs_finish(permit, error).await;
        let bytes = done.map_err(|error| RunError::Fs { op: kind, path: path.to_path_buf(), error })?;
        recorded?;
        Ok(Fs::Done(FsDone { id, path: resolved, bytes }))
    }

    /// The steps before a direct file action of `kind` (`fs.write`,
    /// `fs.edit`, …) on `path`, whose jail answer is `judged` (the real
    /// path, or the jail's refusal): the protected-path rule, the gate, and
    /// the audit's `allowed` record (durable before anything is touched).
    /// A refusal is recorded as denied and returned as a value; carry out
    /// a permit, then hand it to [`Runner::fs_finish`].
    pub(crate) async fn fs_permit(
        &self,
        jail: &PathJail,
        kind: &'static str,
        path: &Path,
        judged: Result<PathBuf, PolicyError>,
        backend: Backend,
        refuse: Option<String>,
    ) -> Result<Result<FsPermit, Refused>, RunError> {
        let policy_refusal = |message: String| Refused {
            kind: RefusalKind::RefusedByPolicy,
            message,
            command: None,
            reason: None,
            rule: None,
            while_busy: false,
        };
        let (resolved, refused) = match judged {
            Ok(real) => {
                let why = refuse.or_else(|| self.protected(jail, &real));
                (real, why.map(policy_refusal))
            }
            Err(e @ PolicyError::PathEscape { .. }) => (path.to_path_buf(), Some(policy_refusal(e.to_string()))),
            Err(e) => return Err(e.into()),
        };
        let fs = FsAction { path: path.to_path_buf(), resolved: resolved.clone(), backend };
        let action = match kind {
            "fs.edit" => Action::FsEdit(fs),
            "fs.multi_edit" => Action::FsMultiEdit(fs),
            "fs.remove" => Action::FsRemove(fs),
            "fs.mkdir" => Action::FsMkdir(fs),
            _ => Action::FsWrite(fs),
        };
        let id = new_id();
        let asked = action.asked();
        let refused = match refused {
            Some(r) => Some(r),
            None => match self.decide(jail.root(), &action, &asked).await? {
                Err(r) => Some(r),
                Ok((access, rule, _)) if !covers(&access, &resolved) => Some(Refused {
                    kind: RefusalKind::RefusedByGate,
                    message: format!("the gate allows {kind} no write access to {}", resolved.display()),
                    command: None,
                    reason: None,
                    rule,
                    while_busy: false,
                }),
                Ok((access, rule, _)) => {
                    self.record(&Event::Allowed { id: id.clone(), action: action.clone(), effective: access, rule })
                        .await
                        .map_err(RunError::Audit)?;
                    None
                }
            },
        };
        if let Some(r) = refused {
            self.deny(id, action, &r).await?;
            return Ok(Err(r));
        }
        Ok(Ok(FsPermit { id, resolved, effective: asked, started: std::time::Instant::now() }))
    }

    /// Record the outcome of a permitted file action (`error`: why it
    /// failed, if it did). Returns the action's id, and whether the record
    /// was written: the caller reports the action's own failure first.
    pub(crate) async fn fs_finish(&self, permit: FsPermit, error: Option<String>) -> (String, Result<(), RunError>) {
        let status = if error.is_none() { Status::Completed } else { Status::Failed };
        let event = super::ended(permit.id.clone(), status, permit.started, permit.effective, error);
        (permit.id, self.record(&event).await.map_err(RunError::Audit))
    }

    /// Why a direct write to `real` is refused although the jail accepts
    /// it: git's own files (a command's sandbox protects its hooks and
    /// config; a direct write has no reason to touch any of it), the
    /// protected paths, the policy file.
    fn protected(&self, jail: &PathJail, real: &Path) -> Option<String> {
        let root = jail.root();
        // Below the root that holds it: the workspace, or a `write` grant
        // outside it (a repository there keeps its hooks too).
        if let Ok(rel) = real.strip_prefix(base_of(jail, real)) {
            // Any case: on a case-folding directory `.GIT` is `.git`.
            if rel.components().any(|c| c.as_os_str().as_encoded_bytes().eq_ignore_ascii_case(b".git")) {
                return Some(format!(
                    "{} is inside a .git directory: git's files are changed by git (a command), not written directly",
                    real.display()
                ));
            }
            // A git dir by another name (`git init --separate-git-dir`, a
            // bare repository, a `gitdir:` file's target): git finds it as
            // the sandbox does, by what it holds.
            if let Some(gd) = real.parent().and_then(|p| super::scope::git_dir_around(&base_of(jail, real), p)) {
                return Some(format!(
                    "{} is inside the git dir {}: git's files are changed by git (a command), not written directly",
                    real.display(),
                    gd.display()
                ));
            }
        }
        // A `HEAD` at the workspace root: with `objects/` and `refs/` beside
        // it git takes the workspace itself for a (bare) repository, with a
        // `config` of the writer's choosing (the sandbox's git guard removes
        // one a command creates). Refused whatever was written first.
        if real.parent() == Some(root)
            && real.file_name().is_some_and(|n| n.as_encoded_bytes().eq_ignore_ascii_case(b"HEAD"))
        {
            return Some(format!(
                "{} at the workspace root would make the workspace a git dir to git (its bare-repository \
                 fallback): it is not written directly",
                real.display()
            ));
        }
        let listed = self.policy.as_ref().map(|p| p.protect.clone()).unwrap_or_default();
        let all = DEFAULT_PROTECTED.iter().map(PathBuf::from).chain(listed);
        for p in all {
            let abs = if p.is_absolute() { p.clone() } else { root.join(&p) };
            // As resolved, and as spelled (a protected link is protected
            // itself, not only what it leads to).
            let spelled = crate::path::lexical(&abs);
            let abs = super::request::resolve_grant(root, &abs);
            if real.starts_with(&abs) || real.starts_with(&spelled) {
                return Some(format!("{} is protected ({}): it stays read-only", real.display(), p.display()));
            }
        }
        if let Some(f) = &self.policy_file {
            if std::fs::canonicalize(f).is_ok_and(|f| f == real || same_file(&f, real)) {
                return Some(format!("{} is the policy file: it stays read-only", real.display()));
            }
        }
        // The runner's own log: a command never gets write access to it, and
        // neither does a direct write (under a policy `write` grant outside
        // the workspace the jail would accept it).
        if let Some(log) = &self.audit_log {
            if log == real || real.starts_with(log) || same_file(log, real) {
                return Some(format!("{} is the audit log: only the runner appends to it", real.display()));
            }
        }
        None
    }
}

/// Where the link `path` itself lies (its directory resolved, its name
/// kept), when its last component is a symbolic link; `None` otherwise (or
/// when it ends in `/`, `.` or `..`, which follow the link as the kernel
/// does).
fn link_itself(jail: &PathJail, path: &Path) -> Result<Option<PathBuf>, PolicyError> {
    let bytes = path.as_os_str().as_encoded_bytes();
    let Some(name) = path.file_name() else { return Ok(None) };
    if bytes.ends_with(b"/") || bytes.ends_with(b"/.") || bytes == b"." {
        return Ok(None);
    }
    let abs = if path.is_absolute() { path.to_path_buf() } else { jail.root().join(path) };
    if !std::fs::symlink_metadata(&abs).is_ok_and(|m| m.file_type().is_symlink()) {
        return Ok(None);
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => jail.resolve(p, PathAccess::Write)?,
        _ => jail.root().to_path_buf(),
    };
    Ok(Some(dir.join(name)))
}

/// Whether `a` and `b` both exist and are the same file (a second name for
/// it: a hard link, or a spelling a case-folding directory accepts).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::symlink_metadata(a), std::fs::symlink_metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Whether `access` lets `path` be written.
fn covers(access: &Access, path: &Path) -> bool {
    access.write_grants.iter().any(|g| path.starts_with(g))
}

/// The root that holds `real`: the deepest of the workspace and the jail's
/// grants outside it.
fn base_of(jail: &PathJail, real: &Path) -> PathBuf {
    jail.write_roots()
        .filter(|r| real.starts_with(r))
        .max_by_key(|r| r.components().count())
        .unwrap_or(jail.root())
        .to_path_buf()
}

/// Do it, through a capability of the root (links refused on the way: the
/// judged path has none, so one met was swapped in after the judgement):
/// returns the bytes written for a write.
fn carry_out(base: &Path, real: &Path, op: &Op<'_>) -> std::io::Result<Option<u64>> {
    let rel = real.strip_prefix(base).map_err(|_| std::io::Error::other("outside its root"))?;
    let root = Dir::open(base)?.with_links(Links::Refuse);
    if rel.as_os_str().is_empty() {
        // The root itself: it exists; only mkdir of it is meaningful.
        return match op {
            Op::Mkdir => Ok(None),
            _ => Err(std::io::Error::from_raw_os_error(libc::EISDIR)),
        };
    }
    match op {
        Op::Mkdir => root.create_dir_all(rel).map(|()| None),
        Op::Remove => root.remove(rel).map(|()| None),
        Op::Write(data) => root.write_atomic(rel, data, true).map(|()| Some(data.len() as u64)),
    }
}
