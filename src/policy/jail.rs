//! The path jail: resolve a path the way the kernel would, then decide.

use std::fs;
use std::path::{Path, PathBuf};

use super::{PolicyError, WorkspacePolicy};
use crate::path::walk::{physical, WalkError};
use crate::path::{link_in_glob_prefix, normalize_glob, touches_system_root, DenyGlobs};

/// What the path is wanted for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathAccess {
    /// Reading: the workspace, an allowed root, or a write grant.
    Read,
    /// Writing: the workspace or a write grant. A path that does not exist
    /// yet is accepted if its deepest existing ancestor is.
    Write,
}

/// The jail of one policy: the workspace's real path, the extra readable
/// roots, the write grants outside the workspace and the deny globs.
///
/// Paths are resolved component by component with symbolic links
/// collapsed, as the kernel would resolve them, and only the result is
/// judged: a `..` or a link that leads out is refused because of where it
/// leads, not because of how it is spelled. Use the returned path, not the
/// one given: it is the one that was judged.
#[derive(Clone, Debug)]
pub struct PathJail {
    root: PathBuf,
    allow: Vec<PathBuf>,
    grants: Vec<PathBuf>,
    deny: DenyGlobs,
    /// Judged without the disk ([`PathJail::virtual_root`]).
    lexical: bool,
}

/// The file-system-dependent part of a jail.
struct Resolved {
    root: PathBuf,
    allow: Vec<PathBuf>,
    grants: Vec<PathBuf>,
}

impl PathJail {
    /// The jail of `policy`; its workspace must exist.
    pub fn new(policy: &WorkspacePolicy) -> Result<Self, PolicyError> {
        let (Resolved { root, allow, grants }, globs) = Self::resolve_policy(policy)?;
        let deny = DenyGlobs::new(&globs).map_err(|e| PolicyError::invalid("deny_paths", e))?;
        Ok(PathJail { root, allow, grants, deny, lexical: false })
    }

    /// Whether this jail, compiled from `policy` earlier, is still what
    /// [`PathJail::new`] would compile now: the same real paths for the
    /// workspace, the readable roots and the grants outside it, and no link
    /// in a deny glob's literal directories (the error a fresh compile
    /// would return, when one appeared). The rest (the compiled globs) is a
    /// function of the policy's text alone, so this proves the jail
    /// current; a long-lived checker asks it before every use.
    pub fn is_current(&self, policy: &WorkspacePolicy) -> Result<bool, PolicyError> {
        let (now, _) = Self::resolve_policy(policy)?;
        Ok(now.root == self.root && now.allow == self.allow && now.grants == self.grants)
    }

    /// What the jail reads from the file system, and the normalised deny
    /// globs.
    fn resolve_policy(policy: &WorkspacePolicy) -> Result<(Resolved, Vec<String>), PolicyError> {
        let ws = policy.workspace_root()?;
        let root = fs::canonicalize(ws).map_err(|source| PolicyError::Resolve { path: ws.to_path_buf(), source })?;
        if !root.is_dir() {
            return Err(PolicyError::invalid("workspace", format!("{} is not a directory", ws.display())));
        }
        let mut allow = Vec::new();
        for (i, p) in policy.allow_paths.iter().enumerate() {
            let real = fs::canonicalize(p)
                .map_err(|e| PolicyError::invalid(format!("allow_paths[{i}]"), format!("{}: {e}", p.display())))?;
            allow.push(real);
        }
        // Grants outside the workspace (`/tmp`, a cache directory), read as
        // the sandbox reads them: one spelled inside the workspace is the
        // workspace's (writable anyway; the sandbox refuses it if a link
        // leads out), one that touches a system directory is refused there
        // and grants nothing here, nor does a missing one. One that contains
        // the workspace grants what lies outside it (the narrower rule wins).
        let mut grants = Vec::new();
        for g in policy.write.iter().filter(|p| p.is_absolute()) {
            if g.strip_prefix(ws).is_ok() || g.starts_with(&root) {
                continue;
            }
            let Ok(real) = fs::canonicalize(g) else { continue };
            if real.starts_with(&root) || touches_system_root(&real) {
                continue;
            }
            grants.push(real);
        }
        let mut globs = Vec::new();
        for (i, g) in policy.deny_paths.iter().enumerate() {
            let g = normalize_glob(g);
            if let Some(link) = link_in_glob_prefix(&root, &g) {
                return Err(PolicyError::invalid(
                    format!("deny_paths[{i}]"),
                    format!(
                        "{g:?}: {} is a symbolic link, so the glob would match nothing; spell it with the real path",
                        link.display()
                    ),
                ));
            }
            globs.push(g);
        }
        Ok((Resolved { root, allow, grants }, globs))
    }

    /// The jail of `policy` over a tree that is not on this disk (the mock
    /// backend's, in memory): its workspace is an absolute path that need
    /// not exist, and nothing is looked up on the disk, neither now nor
    /// when a path is judged. A tree without symbolic links resolves
    /// lexically exactly as the kernel would (`..` from the root stays at
    /// the root of the file system, then the result is judged), so the
    /// same paths are accepted and refused as by [`PathJail::new`] over the
    /// same tree on disk; grants and readable roots are taken as spelled
    /// (made clean, `..` applied), the same system directories refused.
    pub fn virtual_root(policy: &WorkspacePolicy) -> Result<Self, PolicyError> {
        let ws = policy.workspace_root()?;
        if !ws.is_absolute() {
            return Err(PolicyError::invalid("workspace", format!("{} is not an absolute path", ws.display())));
        }
        let root = crate::path::lexical(ws);
        let allow: Vec<PathBuf> = policy.allow_paths.iter().map(|p| crate::path::lexical(p)).collect();
        let grants = policy
            .write
            .iter()
            .filter(|p| p.is_absolute())
            .map(|g| crate::path::lexical(g))
            .filter(|g| !g.starts_with(&root) && !touches_system_root(g))
            .collect();
        let globs: Vec<String> = policy.deny_paths.iter().map(|g| normalize_glob(g)).collect();
        let deny = DenyGlobs::new(&globs).map_err(|e| PolicyError::invalid("deny_paths", e))?;
        Ok(PathJail { root, allow, grants, deny, lexical: true })
    }

    /// Whether this jail judges without the disk ([`PathJail::virtual_root`]).
    pub fn is_virtual(&self) -> bool {
        self.lexical
    }

    /// The deny globs, compiled.
    pub fn deny(&self) -> &DenyGlobs {
        &self.deny
    }

    /// The workspace's real path.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where writes may land: the workspace, then the write grants outside
    /// it (real paths).
    pub fn write_roots(&self) -> impl Iterator<Item = &Path> {
        std::iter::once(self.root.as_path()).chain(self.grants.iter().map(PathBuf::as_path))
    }

    /// Where reads may land: the write roots, then the extra readable roots
    /// (real paths).
    pub fn read_roots(&self) -> impl Iterator<Item = &Path> {
        self.write_roots().chain(self.allow.iter().map(PathBuf::as_path))
    }

    /// Resolve `path` (relative to the workspace, or absolute) and judge it.
    pub fn resolve(&self, path: &Path, access: PathAccess) -> Result<PathBuf, PolicyError> {
        self.resolve_in(&self.root, path, access)
    }

    /// Resolve `path` relative to `base` (a directory this jail accepted)
    /// and judge it.
    pub fn resolve_in(&self, base: &Path, path: &Path, access: PathAccess) -> Result<PathBuf, PolicyError> {
        let escape = |why: String| PolicyError::PathEscape { path: path.to_path_buf(), why };
        if path.as_os_str().is_empty() {
            return Err(escape("an empty path".into()));
        }
        if self.lexical {
            let real = crate::path::lexical(&base.join(path));
            self.judge(&real, access).map_err(escape)?;
            return Ok(real);
        }
        let (real, links) = physical(base, path).map_err(|e| match e {
            WalkError::Escape(why) => escape(why),
            WalkError::Io(source) => PolicyError::Resolve { path: path.to_path_buf(), source },
        })?;
        // A link whose own name is denied (`.env.local -> config/dotenv`) is
        // masked by the sandbox through its target: refuse it here too.
        for l in &links {
            if let Some(g) = self.deny.matching(&self.root, l) {
                return Err(escape(format!("the link {} on the way matches the deny glob {g:?}", l.display())));
            }
        }
        self.judge(&real, access).map_err(escape)?;
        Ok(real)
    }

    /// Whether an already resolved path is acceptable.
    fn judge(&self, real: &Path, access: PathAccess) -> Result<(), String> {
        let denied = |g: &str| format!("{} matches the deny glob {g:?}", real.display());
        if real.starts_with(&self.root) {
            return match self.deny.matching(&self.root, real) {
                Some(g) => Err(denied(g)),
                None => Ok(()),
            };
        }
        if let Some(g) = self.deny.matching(&self.root, real) {
            return Err(denied(g));
        }
        // The most specific rule wins: a read-only root inside a grant stays
        // read-only, a grant inside a read-only root is writable.
        let deepest =
            |roots: &[PathBuf]| roots.iter().filter(|r| real.starts_with(r)).map(|r| r.components().count()).max();
        let (grant, allow) = (deepest(&self.grants), deepest(&self.allow));
        if grant.is_some() && grant >= allow {
            return Ok(());
        }
        if allow.is_some() {
            return match access {
                PathAccess::Read => Ok(()),
                PathAccess::Write => Err(format!("{} is in a read-only root (allow_paths)", real.display())),
            };
        }
        Err(format!("resolves to {}, outside the workspace {}", real.display(), self.root.display()))
    }
}
