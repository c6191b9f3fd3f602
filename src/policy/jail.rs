//! The path jail: resolve a path the way the kernel would, then decide.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};

use super::{DenyGlobs, PolicyError, WorkspacePolicy};

/// What the path is wanted for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Reading: the workspace, an allowed root, or a write grant.
    Read,
    /// Writing: the workspace or a write grant. A path that does not exist
    /// yet is accepted if its deepest existing ancestor is.
    Write,
}

/// Most symbolic links followed while resolving one path (the kernel's own
/// limit).
const MAX_LINKS: usize = 40;

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
}

impl PathJail {
    /// The jail of `policy`; its workspace must exist.
    pub fn new(policy: &WorkspacePolicy) -> Result<Self, PolicyError> {
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
            let system =
                crate::sandbox::SYSTEM_ROOTS.iter().any(|r| real.starts_with(r) || Path::new(r).starts_with(&real));
            if real.starts_with(&root) || system {
                continue;
            }
            grants.push(real);
        }
        let mut globs = Vec::new();
        for (i, g) in policy.deny_paths.iter().enumerate() {
            let g = super::normalize_glob(g);
            if let Some(link) = super::deny::link_on_the_way(&root, &g) {
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
        let deny = DenyGlobs::new(&globs).map_err(|e| PolicyError::invalid("deny_paths", e))?;
        Ok(PathJail { root, allow, grants, deny })
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

    /// Resolve `path` (relative to the workspace, or absolute) and judge it.
    pub fn resolve(&self, path: &Path, access: Access) -> Result<PathBuf, PolicyError> {
        self.resolve_in(&self.root, path, access)
    }

    /// Resolve `path` relative to `base` (a directory this jail accepted)
    /// and judge it.
    pub fn resolve_in(&self, base: &Path, path: &Path, access: Access) -> Result<PathBuf, PolicyError> {
        let escape = |why: String| PolicyError::PathEscape { path: path.to_path_buf(), why };
        if path.as_os_str().is_empty() {
            return Err(escape("an empty path".into()));
        }
        let (real, links) = physical(base, path).map_err(|e| match e {
            Walk::Escape(why) => escape(why),
            Walk::Io(source) => PolicyError::Resolve { path: path.to_path_buf(), source },
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
    fn judge(&self, real: &Path, access: Access) -> Result<(), String> {
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
                Access::Read => Ok(()),
                Access::Write => Err(format!("{} is in a read-only root (allow_paths)", real.display())),
            };
        }
        Err(format!("resolves to {}, outside the workspace {}", real.display(), self.root.display()))
    }
}

/// The symbolic links met while resolving the absolute `path` as the kernel
/// would (`..` after a link included), in order; `None` when it cannot be
/// resolved (a loop, `/proc`, an unreadable link).
pub(crate) fn links_on_the_way(path: &Path) -> Option<Vec<PathBuf>> {
    physical(Path::new("/"), path).ok().map(|(_, links)| links)
}

/// The symbolic links met while resolving the absolute `path`, as far as
/// the walk got: also when it cannot finish (a `..` after a missing
/// component, a loop), so that a caller judging the links it did meet
/// fails closed rather than reading "unresolvable" as "no link".
pub(crate) fn links_met(path: &Path) -> Vec<PathBuf> {
    let mut links = Vec::new();
    let _ = physical_into(Path::new("/"), path, &mut links);
    links
}

enum Walk {
    Escape(String),
    Io(io::Error),
}

/// Resolve `path` against `base` as the kernel would, following links;
/// components below the deepest existing one are appended as spelled (a
/// `..` there is refused, since its meaning depends on what gets created).
fn physical(base: &Path, path: &Path) -> Result<(PathBuf, Vec<PathBuf>), Walk> {
    let mut links = Vec::new();
    let real = physical_into(base, path, &mut links)?;
    Ok((real, links))
}

/// [`physical`], collecting the links met into `links` as it goes (they are
/// there also when it fails).
fn physical_into(base: &Path, path: &Path, links: &mut Vec<PathBuf>) -> Result<PathBuf, Walk> {
    let mut cur = if path.is_absolute() { PathBuf::from("/") } else { base.to_path_buf() };
    let mut pending: VecDeque<OsString> = VecDeque::new();
    push_front(&mut pending, path);
    let mut missing = false;
    while let Some(c) = pending.pop_front() {
        if c == ".." {
            if missing {
                return Err(Walk::Escape(format!("`..` after {}, which does not exist", cur.display())));
            }
            cur.pop();
            continue;
        }
        cur.push(&c);
        if missing {
            continue;
        }
        if cur.starts_with("/proc") {
            return Err(Walk::Escape("goes through /proc, whose links lead anywhere".into()));
        }
        match fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_symlink() => {
                links.push(cur.clone());
                if links.len() > MAX_LINKS {
                    return Err(Walk::Escape("too many levels of symbolic links".into()));
                }
                let target = fs::read_link(&cur).map_err(Walk::Io)?;
                cur.pop();
                if target.is_absolute() {
                    cur = PathBuf::from("/");
                }
                push_front(&mut pending, &target);
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR) => {
                missing = true;
            }
            Err(e) => return Err(Walk::Io(e)),
        }
    }
    Ok(cur)
}

/// Put the components of `p` (not `.` or `/`) at the front of `q`.
fn push_front(q: &mut VecDeque<OsString>, p: &Path) {
    let comps: Vec<OsString> = p
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect();
    for c in comps.into_iter().rev() {
        q.push_front(c);
    }
}
