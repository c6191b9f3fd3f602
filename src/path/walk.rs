//! Resolve a path the way the kernel would: component by component, a
//! symbolic link replaced by its target, a `..` after a link applied to
//! where the link led. The path jail judges the result; the sandbox judges
//! the links met on the way (a link in a writable area could be pointed
//! elsewhere by the command before the next run).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};

use super::memo;

/// Most symbolic links followed while resolving one path (the kernel's own
/// limit).
pub const MAX_LINKS: usize = 40;

/// Why a path could not be resolved.
#[derive(Debug)]
pub enum WalkError {
    /// The path cannot be resolved to a place (a `..` after a missing
    /// component, `/proc`, a loop): the reason, for the message.
    Escape(String),
    /// A component could not be examined or a link read.
    Io(io::Error),
}

/// Resolve `path` against `base` as the kernel would, following links;
/// components below the deepest existing one are appended as spelled (a
/// `..` there is refused, since its meaning depends on what gets created).
/// Returns the resolved path and the links met, in order.
pub fn physical(base: &Path, path: &Path) -> Result<(PathBuf, Vec<PathBuf>), WalkError> {
    let mut links = Vec::new();
    let real = physical_into(base, path, &mut links, &mut PathBuf::new())?;
    Ok((real, links))
}

/// How far resolving an absolute path got: [`walk_as_far_as_possible`].
#[derive(Debug)]
pub struct Walked {
    /// The symbolic links met, in order (also when the walk stopped).
    pub links: Vec<PathBuf>,
    /// `None` when the path resolves; else the deepest place known to exist
    /// that the walk reached, and why it could not go on. Whoever may write
    /// there could create or replace what comes next, and so decide where
    /// the path leads.
    pub stuck: Option<(PathBuf, WalkError)>,
}

/// Resolve the absolute `path` as the kernel would, as far as it goes: the
/// links met and, when the walk cannot finish (a `..` after a missing
/// component, a loop, `/proc`, an unreadable component), where it stopped.
pub fn walk_as_far_as_possible(path: &Path) -> Walked {
    let mut links = Vec::new();
    let mut reached = PathBuf::from("/");
    let stuck = physical_into(Path::new("/"), path, &mut links, &mut reached).err().map(|e| (reached, e));
    Walked { links, stuck }
}

/// The symbolic links met while resolving the absolute `path` as the kernel
/// would (`..` after a link included), in order; `None` when it cannot be
/// resolved (a loop, `/proc`, an unreadable link).
pub fn links_on_the_way(path: &Path) -> Option<Vec<PathBuf>> {
    physical(Path::new("/"), path).ok().map(|(_, links)| links)
}

/// The symbolic links met while resolving the absolute `path`, as far as
/// the walk got: also when it cannot finish (a `..` after a missing
/// component, a loop), so that a caller judging the links it did meet
/// fails closed rather than reading "unresolvable" as "no link".
pub fn links_met(path: &Path) -> Vec<PathBuf> {
    walk_as_far_as_possible(path).links
}

/// The first symbolic link met while resolving `path` (as the kernel does,
/// `..` after a link included) that lies in one of `areas`: a command
/// allowed to write there could point it elsewhere before the next run.
pub fn replaceable_link(path: &Path, areas: &[PathBuf]) -> Option<PathBuf> {
    if areas.is_empty() {
        return None;
    }
    // Every link met counts, also on a way that cannot be resolved to the
    // end (a `..` after a missing directory): a dangling link in a writable
    // area is as replaceable as any (fifth git review).
    links_met(path).into_iter().find(|l| super::in_areas(l, areas))
}

/// [`physical`], collecting the links met into `links` as it goes (they are
/// there also when it fails), and keeping in `reached` the deepest place
/// known to exist (where it stopped, when it fails).
fn physical_into(
    base: &Path,
    path: &Path,
    links: &mut Vec<PathBuf>,
    reached: &mut PathBuf,
) -> Result<PathBuf, WalkError> {
    let mut cur = if path.is_absolute() { PathBuf::from("/") } else { base.to_path_buf() };
    reached.clone_from(&cur);
    let mut pending: VecDeque<OsString> = VecDeque::new();
    push_front(&mut pending, path);
    let mut missing = false;
    while let Some(c) = pending.pop_front() {
        if c == ".." {
            if missing {
                return Err(WalkError::Escape(format!("`..` after {}, which does not exist", cur.display())));
            }
            cur.pop();
            reached.clone_from(&cur);
            continue;
        }
        cur.push(&c);
        if missing {
            continue;
        }
        if cur.starts_with("/proc") {
            return Err(WalkError::Escape("goes through /proc, whose links lead anywhere".into()));
        }
        match memo::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_symlink() => {
                links.push(cur.clone());
                if links.len() > MAX_LINKS {
                    return Err(WalkError::Escape("too many levels of symbolic links".into()));
                }
                let target = memo::read_link(&cur).map_err(WalkError::Io)?;
                cur.pop();
                if target.is_absolute() {
                    cur = PathBuf::from("/");
                }
                reached.clone_from(&cur);
                push_front(&mut pending, &target);
            }
            Ok(_) => reached.clone_from(&cur),
            Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR) => {
                missing = true;
            }
            Err(e) => return Err(WalkError::Io(e)),
        }
    }
    Ok(cur)
}

/// Put the components of `p` (not `.` or `/`) at the front of `q`.
pub(super) fn push_front(q: &mut VecDeque<OsString>, p: &Path) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::symlink;

    fn ok<T, E: std::fmt::Debug>(r: Result<T, E>) -> T {
        r.unwrap_or_else(|e| panic!("{e:?}"))
    }

    #[test]
    fn a_dotdot_after_a_link_applies_to_its_target() {
        let d = ok(tempfile::tempdir());
        let root = ok(fs::canonicalize(d.path()));
        ok(fs::create_dir_all(root.join("real/sub")));
        ok(symlink(root.join("real/sub"), root.join("l")));
        let (real, links) = ok(physical(&root, Path::new("l/../x")));
        assert_eq!(real, root.join("real/x"));
        assert_eq!(links, vec![root.join("l")]);
    }

    #[test]
    fn links_met_are_kept_when_the_walk_cannot_finish() {
        let d = ok(tempfile::tempdir());
        let root = ok(fs::canonicalize(d.path()));
        ok(symlink(root.join("gone"), root.join("dangling")));
        let p = root.join("dangling/missing/../x");
        assert!(links_on_the_way(&p).is_none());
        assert_eq!(links_met(&p), vec![root.join("dangling")]);
        assert_eq!(replaceable_link(&p, std::slice::from_ref(&root)), Some(root.join("dangling")));
        assert_eq!(replaceable_link(&p, &[]), None);
    }

    #[test]
    fn a_walk_that_cannot_finish_says_where_it_stopped() {
        let d = ok(tempfile::tempdir());
        let root = ok(fs::canonicalize(d.path()));
        ok(fs::create_dir_all(root.join("real")));
        ok(symlink("real", root.join("l")));
        // `..` after a missing directory: stopped where `missing` would be
        // created, behind the link.
        let w = walk_as_far_as_possible(&root.join("l/missing/more/../x"));
        assert_eq!(w.links, vec![root.join("l")]);
        match w.stuck {
            Some((at, WalkError::Escape(why))) => {
                assert_eq!(at, root.join("real"));
                assert!(why.contains("does not exist"), "{why}");
            }
            other => panic!("{other:?}"),
        }
        // A loop: stopped in the directory of the links.
        ok(symlink("b", root.join("a")));
        ok(symlink("a", root.join("b")));
        let w = walk_as_far_as_possible(&root.join("a"));
        assert!(w.links.len() > MAX_LINKS, "{:?}", w.links);
        assert!(matches!(&w.stuck, Some((at, WalkError::Escape(_))) if *at == root), "{:?}", w.stuck);
        // A path that resolves (to a missing file, too) is not stuck.
        assert!(walk_as_far_as_possible(&root.join("l/new")).stuck.is_none());
        assert!(walk_as_far_as_possible(&root.join("l/../real")).stuck.is_none());
    }
}
