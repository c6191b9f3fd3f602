//! Hard links across the grant boundary.
//!
//! The mount layer and Landlock both judge a write by the path it goes
//! through, but a hard link gives one file several paths. A file whose name
//! `target/libdep.rlib` lies in a write grant and whose other name
//! `src/main.rs` lies in the read-only workspace (or outside the plan: a
//! pnpm store, a `cp -al` copy, a `git clone --local` object) would be
//! changed through the writable name. [`read_only_names`] walks the writable
//! areas while the run is planned, counts the names it finds of each file
//! with more than one link, and returns every name of a file that has a name
//! it did not find there: each is then bound read-only for the run.
//!
//! Within one run no new link can cross the boundary: the kernel refuses a
//! link between two mounts (`EXDEV`), and the read-only areas, the grants
//! and the carve-outs are all separate mounts. Writable runs of a workspace
//! are planned one at a time under its lock, so no other sandboxed run adds
//! a link between this plan and its run.

use std::collections::{HashMap, HashSet};
use std::ffi::{CString, OsStr};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use nix::dir::{Dir, Type};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode};

use super::SandboxError;

/// The most entries the walk of the writable areas visits before it refuses.
pub const LINK_WALK_LIMIT: usize = 1_000_000;
/// The most names kept read-only this way in one run; above it the run is
/// refused (each name costs a mount).
pub const HARD_LINK_LIMIT: usize = 100;
/// The deepest directory the walk enters (it holds one descriptor per level).
pub const LINK_WALK_DEPTH: usize = 256;
/// How many names a refusal lists.
const SHOWN: usize = 5;

/// One directory still to be listed: its parent's descriptor, its name in
/// the parent, its path and its depth below the area.
struct Pending {
    parent: Rc<Dir>,
    name: CString,
    path: PathBuf,
    depth: usize,
}

/// Every name, in `areas`, of a file (anything but a directory or a symbolic
/// link) with more links than the names of it found there: another name of
/// it lies in a read-only area, a protected or masked path, or outside the
/// plan. `skip` lists the paths inside `areas` whose names are not writable
/// (protected carve-outs, masks, read-only roots): the walk neither counts
/// nor enters them. Links are never followed. Refuses (naming the files and
/// what to do) when there are more than [`HARD_LINK_LIMIT`] such names, or
/// any at all when `no_mounts` (the landlock-only mode cannot bind them).
pub fn read_only_names(areas: &[PathBuf], skip: &[PathBuf], no_mounts: bool) -> Result<Vec<PathBuf>, SandboxError> {
    // An area beneath another is walked with it, unless a skipped path lies
    // between them (a grant inside a read-only workspace that lies inside a
    // broader grant): then it is a root of its own.
    let roots: Vec<&PathBuf> = areas
        .iter()
        .filter(|a| {
            !areas
                .iter()
                .any(|b| b != *a && a.starts_with(b) && !skip.iter().any(|s| a.starts_with(s) && s.starts_with(b)))
        })
        .collect();
    if roots.is_empty() {
        return Ok(Vec::new());
    }
    let skip: HashSet<&Path> = skip.iter().map(PathBuf::as_path).collect();
    let mut linked: HashMap<(u64, u64), (u64, Vec<PathBuf>)> = HashMap::new();
    let mut seen = 0usize;
    let mut seen_roots: HashSet<(u64, u64)> = HashSet::new();
    for root in roots {
        let fd = nix::fcntl::open(
            root.as_path(),
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| walk_error(root, e))?;
        let st = nix::sys::stat::fstat(&fd).map_err(|e| walk_error(root, e))?;
        // Two grants naming one directory (a bind mount on the host) are
        // one area: its names would be counted twice.
        if !seen_roots.insert((st.st_dev, st.st_ino)) {
            continue;
        }
        walk(root, fd, &skip, &mut linked, &mut seen)?;
    }
    let mut out: Vec<PathBuf> = linked
        .into_values()
        .filter(|(nlink, names)| u64::try_from(names.len()).is_ok_and(|n| n < *nlink))
        .flat_map(|(_, names)| names)
        .collect();
    out.sort();
    if out.is_empty() {
        return Ok(out);
    }
    let shown = {
        let mut s = out.iter().take(SHOWN).map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
        if out.len() > SHOWN {
            s += &format!(" and {} more", out.len() - SHOWN);
        }
        s
    };
    if no_mounts {
        return Err(SandboxError::BadRequest(format!(
            "landlock-only mode cannot keep hard-linked files read-only: {shown} in a writable area also \
             have a name outside it (read-only or outside the plan), and Landlock judges paths, not files, \
             so a write through the writable name would change the other; break the links (copy each file \
             over itself: cp -p F F.new && mv F.new F) or grant narrower paths with --write"
        )));
    }
    if out.len() > HARD_LINK_LIMIT {
        return Err(SandboxError::BadRequest(format!(
            "{} names in the writable areas are hard links to files that also have a name outside them \
             (read-only or outside the plan): {shown}; portcullis keeps such names read-only with one mount \
             each, up to {HARD_LINK_LIMIT}. Break the links (copy the tree afresh: cp -a D D.new && rm -rf D \
             && mv D.new D; for pnpm set package-import-method=copy; clone with git clone --no-hardlinks), \
             or grant narrower paths with --write",
            out.len()
        )));
    }
    Ok(out)
}

fn walk_error(path: &Path, e: Errno) -> SandboxError {
    SandboxError::BadRequest(format!(
        "cannot check {} for hard links ({}): the check keeps files with another name outside the writable \
         areas read-only, and fails closed; make it readable or grant narrower paths",
        path.display(),
        std::io::Error::from(e)
    ))
}

fn walk(
    root: &Path,
    fd: OwnedFd,
    skip: &HashSet<&Path>,
    linked: &mut HashMap<(u64, u64), (u64, Vec<PathBuf>)>,
    seen: &mut usize,
) -> Result<(), SandboxError> {
    let mut current = Some((Dir::from_fd(fd).map_err(|e| walk_error(root, e))?, root.to_path_buf(), 0usize));
    let mut pending: Vec<Pending> = Vec::new();
    loop {
        let Some((mut dir, path, depth)) = current.take() else {
            let Some(next) = pending.pop() else { break };
            current = open_dir(&next)?.map(|d| (d, next.path, next.depth));
            continue;
        };
        let mut entries: Vec<(CString, Option<Type>)> = Vec::new();
        for e in dir.iter() {
            let e = e.map_err(|e| walk_error(&path, e))?;
            let name = e.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            entries.push((name.to_owned(), e.file_type()));
        }
        let dir = Rc::new(dir);
        for (name, kind) in entries {
            *seen += 1;
            if *seen > LINK_WALK_LIMIT {
                return Err(SandboxError::BadRequest(format!(
                    "the writable areas hold more than {LINK_WALK_LIMIT} entries (under {}); the hard-link check \
                     stops there and fails closed: grant narrower paths with --write",
                    root.display()
                )));
            }
            let p = path.join(OsStr::from_bytes(name.as_bytes()));
            if skip.contains(p.as_path()) {
                continue;
            }
            let kind = match kind {
                Some(k) => k,
                None => match stat_at(&dir, &name, &p)? {
                    Some(st) => type_of(&st),
                    None => continue,
                },
            };
            match kind {
                Type::Symlink => {}
                Type::Directory => {
                    if depth + 1 > LINK_WALK_DEPTH {
                        return Err(SandboxError::BadRequest(format!(
                            "{} is more than {LINK_WALK_DEPTH} directories deep; the hard-link check stops there \
                             and fails closed: flatten it or grant narrower paths with --write",
                            p.display()
                        )));
                    }
                    pending.push(Pending { parent: Rc::clone(&dir), name, path: p, depth: depth + 1 });
                }
                _ => {
                    let Some(st) = stat_at(&dir, &name, &p)? else { continue };
                    if type_of(&st) == Type::Directory {
                        // Replaced since it was listed: take it as what it is.
                        pending.push(Pending { parent: Rc::clone(&dir), name, path: p, depth: depth + 1 });
                    } else if type_of(&st) != Type::Symlink && st.st_nlink > 1 {
                        let slot = linked.entry((st.st_dev, st.st_ino)).or_insert((0, Vec::new()));
                        slot.0 = slot.0.max(st.st_nlink);
                        slot.1.push(p);
                    }
                }
            }
        }
    }
    Ok(())
}

/// `lstat` of `name` in `dir`; `None` when it is gone.
fn stat_at(dir: &Dir, name: &CString, path: &Path) -> Result<Option<FileStat>, SandboxError> {
    match nix::sys::stat::fstatat(dir.as_fd(), name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(walk_error(path, e)),
    }
}

fn type_of(st: &FileStat) -> Type {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => Type::Directory,
        libc::S_IFLNK => Type::Symlink,
        libc::S_IFREG => Type::File,
        libc::S_IFIFO => Type::Fifo,
        libc::S_IFSOCK => Type::Socket,
        libc::S_IFCHR => Type::CharacterDevice,
        _ => Type::BlockDevice,
    }
}

/// Whether a directory that cannot be listed may be passed over: one that
/// is not the planner's own. A sandboxed command creates directories as the
/// planner's uid (an unprivileged caller's command runs as the caller; a
/// root caller's as `nobody`, and root lists everything), so every
/// directory a command made can be listed or is the planner's and can be
/// made listable: such a one refuses the run. What another user keeps
/// unlistable (a `711` directory in a granted host `/tmp`) the command cannot
/// list or `chmod` either.
fn unreachable(p: &Pending) -> Result<bool, SandboxError> {
    let Some(st) = stat_at(&p.parent, &p.name, &p.path)? else { return Ok(true) };
    Ok(st.st_uid != nix::unistd::geteuid().as_raw())
}

/// Open a pending directory without following a link; `None` when it is
/// gone, or cannot be listed and is [`unreachable`].
fn open_dir(p: &Pending) -> Result<Option<Dir>, SandboxError> {
    match Dir::openat(
        p.parent.as_fd(),
        p.name.as_c_str(),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(d) => Ok(Some(d)),
        Err(Errno::ENOENT) => Ok(None),
        Err(Errno::EACCES) if unreachable(p)? => Ok(None),
        Err(e) => Err(walk_error(&p.path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn tree() -> tempfile::TempDir {
        let d = tempfile::Builder::new().prefix("pc-links-").tempdir_in("/var/tmp").unwrap_or_else(|e| panic!("{e}"));
        for f in ["src/main.rs", "target/debug/deps/foo-1", "target/x", ".git/hooks/pre-commit"] {
            let p = d.path().join(f);
            fs::create_dir_all(p.parent().unwrap_or(d.path())).unwrap_or_else(|e| panic!("{e}"));
            fs::write(&p, "x").unwrap_or_else(|e| panic!("{e}"));
        }
        d
    }

    fn names(d: &Path, areas: &[&str], skip: &[&str]) -> Result<Vec<PathBuf>, SandboxError> {
        let a: Vec<PathBuf> = areas.iter().map(|a| d.join(a)).collect();
        let s: Vec<PathBuf> = skip.iter().map(|a| d.join(a)).collect();
        read_only_names(&a, &s, false)
    }

    #[test]
    fn links_within_the_area_count_and_links_out_of_it_are_named() {
        let d = tree();
        let p = d.path();
        fs::hard_link(p.join("target/debug/deps/foo-1"), p.join("target/debug/foo")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(names(p, &["target"], &[]).unwrap_or_else(|e| panic!("{e}")), Vec::<PathBuf>::new());
        fs::hard_link(p.join("src/main.rs"), p.join("target/libdep.rlib")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(names(p, &["target"], &[]).unwrap_or_else(|e| panic!("{e}")), vec![p.join("target/libdep.rlib")]);
        // With the whole tree writable both names are found.
        assert_eq!(names(p, &["", "target"], &[]).unwrap_or_else(|e| panic!("{e}")), Vec::<PathBuf>::new());
        // A name in a protected path is not writable: the other one is kept.
        fs::hard_link(p.join(".git/hooks/pre-commit"), p.join("hook")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(names(p, &[""], &[".git/hooks"]).unwrap_or_else(|e| panic!("{e}")), vec![p.join("hook")]);
    }

    #[test]
    fn too_many_and_landlock_only_are_refused() {
        let d = tree();
        let p = d.path();
        for i in 0..=HARD_LINK_LIMIT {
            fs::hard_link(p.join("src/main.rs"), p.join(format!("target/l{i}"))).unwrap_or_else(|e| panic!("{e}"));
        }
        let e = names(p, &["target"], &[]).map(|v| v.len());
        assert!(matches!(&e, Err(SandboxError::BadRequest(m)) if m.contains("up to 100")), "{e:?}");
        for i in 1..=HARD_LINK_LIMIT {
            fs::remove_file(p.join(format!("target/l{i}"))).unwrap_or_else(|e| panic!("{e}"));
        }
        let e = read_only_names(&[p.join("target")], &[], true).map(|v| v.len());
        assert!(matches!(&e, Err(SandboxError::BadRequest(m)) if m.contains("landlock-only")), "{e:?}");
    }
}
