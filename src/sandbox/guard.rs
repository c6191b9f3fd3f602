//! The git guard's cleanup: after a writable run, making sure nothing the
//! command created where git would read config or hooks is reachable by
//! the host's git.
//!
//! The command controls every directory below the writable root, so nothing
//! here resolves a path through them. The walk goes from the root by file
//! descriptor, one name at a time, as the kernel would resolve the path for
//! git (a `..` goes back to the directory it came from, which, with no link
//! followed on the way, is the real parent). Nothing is ever followed: a
//! symbolic link met on the way is itself neutralised, since it is what
//! makes the guarded path reachable, and then the path is gone. A
//! neutralised entry is first renamed, inside the directory it was found
//! in, to a fresh name (one atomic step: git no longer finds it, whatever
//! happens next), and only that name is deleted, through the directory's
//! descriptor. Anything else that is not a directory on the way (a file, a
//! FIFO) means the path does not resolve at all: nothing to do.
//!
//! A directory the command made unsearchable (`chmod 000`) is given search
//! (and, for the rename, write) access back for the walk and restored after.
//! Whatever cannot be done is a [`Failed`] naming the step, the entry and
//! the errno; the caller must not report the run as a success then.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode};
use nix::unistd::UnlinkatFlags;

/// What became of a guarded path.
#[derive(Debug)]
pub(super) enum Removed {
    /// It is not reachable: the command did not create it (or what it made
    /// on the way, a file where a directory belongs, leads nowhere).
    Nothing,
    /// `entry` was removed: the guarded path itself, or the symbolic link
    /// on the way through which it was reachable.
    Deleted {
        /// What was removed.
        entry: PathBuf,
    },
    /// `entry` was renamed to `to` (git no longer reads it) but deleting
    /// that failed.
    Quarantined {
        /// What was renamed.
        entry: PathBuf,
        /// Its new name.
        to: PathBuf,
        /// Why it could not be deleted.
        error: io::Error,
    },
}

/// Why a guarded path could not be made unreachable. Git on the host may
/// still read it.
#[derive(Debug)]
pub(super) struct Failed {
    /// What was being done.
    pub step: &'static str,
    /// The entry it was done to (the guarded path or one on its way).
    pub entry: PathBuf,
    /// The kernel's answer.
    pub source: io::Error,
}

impl Failed {
    fn new(step: &'static str, entry: &Path, source: impl Into<io::Error>) -> Failed {
        Failed { step, entry: entry.to_path_buf(), source: source.into() }
    }
}

/// Where to go next on the way to the guarded entry.
enum Step {
    Name(OsString),
    Up,
}

const DIR_FLAGS: OFlag = OFlag::O_PATH.union(OFlag::O_DIRECTORY).union(OFlag::O_NOFOLLOW).union(OFlag::O_CLOEXEC);

/// Modes changed for the walk, put back when it ends.
#[derive(Default)]
struct Restore(Vec<(OwnedFd, u32)>);

impl Restore {
    /// Add `bits` to the mode of the directory held by `dir`, once.
    fn grant(&mut self, dir: &OwnedFd, bits: u32) -> io::Result<()> {
        let st = fstat(dir).map_err(io::Error::from)?;
        let mode = st.st_mode & 0o7777;
        if mode & bits == bits {
            return Err(io::Error::from_raw_os_error(libc::EACCES));
        }
        // The descriptor's magic link names that very directory (chmod
        // follows it to the inode, not through any path of the command's).
        fs::set_permissions(fd_path(dir), fs::Permissions::from_mode(mode | bits))?;
        if !self.0.iter().any(|(d, _)| same_inode(d, &st)) {
            self.0.push((dir.try_clone()?, mode));
        }
        Ok(())
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        // Restoring only takes back access the command itself removed from
        // its own directories; a failure leaves them more open, not less.
        for (dir, mode) in self.0.drain(..).rev() {
            let _ = fs::set_permissions(fd_path(&dir), fs::Permissions::from_mode(mode));
        }
    }
}

fn same_inode(fd: &OwnedFd, st: &FileStat) -> bool {
    fstat(fd).is_ok_and(|s| s.st_dev == st.st_dev && s.st_ino == st.st_ino)
}

fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Make `path` (below one of the writable `roots`, spelled as git would
/// open it, `..` included) unreachable without going through a link.
///
/// `fail_rename` (debug builds, a test switch) makes every rename fail
/// with `EPERM`, as on an append-only directory.
pub(super) fn remove(roots: &[&Path], path: &Path, fail_rename: bool) -> Result<Removed, Failed> {
    let Some(root) = roots.iter().filter(|r| path.starts_with(r)).max_by_key(|r| r.components().count()) else {
        // Spelled from outside every writable root (`/elsewhere/../ws/x`):
        // what lies outside them the command could not change.
        let lex = crate::path::lexical(path);
        if lex != path && roots.iter().any(|r| lex.starts_with(r)) {
            return remove(roots, &lex, fail_rename);
        }
        return Ok(Removed::Nothing);
    };
    let bad = |why: &str| Failed::new("checking the path", path, io::Error::other(why.to_string()));
    let rel = path.strip_prefix(root).map_err(|_| bad("not below its writable root"))?;
    let mut steps = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => steps.push(Step::Name(n.to_os_string())),
            Component::ParentDir => steps.push(Step::Up),
            Component::CurDir => {}
            _ => return Err(bad("an unexpected component")),
        }
    }
    // The entry to neutralise: the last name. A path ending in `..` is
    // walked whole first (a link on the way is what matters), then taken
    // by its spelling, which is where it leads when no link was met.
    let last = match steps.last() {
        None => return Ok(Removed::Nothing),
        Some(Step::Up) => None,
        Some(Step::Name(_)) => match steps.pop() {
            Some(Step::Name(n)) => Some(n),
            _ => None,
        },
    };
    let mut restore = Restore::default();
    let top = nix::fcntl::open(*root, DIR_FLAGS, Mode::empty())
        .map_err(|e| Failed::new("opening the writable root", root, e))?;
    // The directories walked so far, each with the path it is shown as.
    let mut stack: Vec<(OwnedFd, PathBuf)> = vec![(top, root.to_path_buf())];
    for (i, step) in steps.iter().enumerate() {
        let n = match step {
            Step::Up if stack.len() == 1 => {
                // Above the writable root, every directory so far real: go
                // on from the root's parent with the rest of the path.
                let mut rest = root.parent().unwrap_or(Path::new("/")).to_path_buf();
                for s in &steps[i + 1..] {
                    rest.push(match s {
                        Step::Name(n) => n.as_os_str(),
                        Step::Up => OsStr::new(".."),
                    });
                }
                rest.extend(&last);
                return remove(roots, &rest, fail_rename);
            }
            Step::Up => {
                stack.pop();
                continue;
            }
            Step::Name(n) => n,
        };
        let Some((dir, shown)) = stack.last() else { return Ok(Removed::Nothing) };
        let here = shown.join(n);
        match open_dir(dir, n, &mut restore) {
            Ok(fd) => stack.push((fd, here)),
            Err(Errno::ENOENT) => return Ok(Removed::Nothing),
            Err(Errno::ELOOP | Errno::ENOTDIR) => {
                return match fstatat(dir, n.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                    // The link is what makes the guarded path reachable.
                    Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFLNK => {
                        neutralise(dir, n, &here, &mut restore, fail_rename)
                    }
                    // A file where a directory belongs: the path leads nowhere.
                    Ok(_) | Err(Errno::ENOENT) => Ok(Removed::Nothing),
                    Err(e) => Err(Failed::new("looking at an entry on the way", &here, e)),
                };
            }
            Err(e) => return Err(Failed::new("opening a directory on the way", &here, e)),
        }
    }
    let Some(last) = last else {
        drop(restore);
        return remove(roots, &crate::path::lexical(path), fail_rename);
    };
    let Some((dir, shown)) = stack.last() else { return Ok(Removed::Nothing) };
    let here = shown.join(&last);
    match lookup(dir, &last, &mut restore) {
        Ok(()) => neutralise(dir, &last, &here, &mut restore, fail_rename),
        Err(Errno::ENOENT | Errno::ENOTDIR) => Ok(Removed::Nothing),
        Err(e) => Err(Failed::new("looking at the guarded entry", &here, e)),
    }
}

/// Open the directory `name` in `dir` without following a link, giving
/// `dir` search access back if the command took it away.
fn open_dir(dir: &OwnedFd, name: &OsStr, restore: &mut Restore) -> Result<OwnedFd, Errno> {
    match openat(dir, name, DIR_FLAGS, Mode::empty()) {
        Err(Errno::EACCES) => {
            restore.grant(dir, 0o100).map_err(|_| Errno::EACCES)?;
            openat(dir, name, DIR_FLAGS, Mode::empty())
        }
        r => r,
    }
}

/// Whether `name` exists in `dir` (not followed), with search access given
/// back as for [`open_dir`].
fn lookup(dir: &OwnedFd, name: &OsStr, restore: &mut Restore) -> Result<(), Errno> {
    match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Err(Errno::EACCES) => {
            restore.grant(dir, 0o100).map_err(|_| Errno::EACCES)?;
            fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).map(drop)
        }
        r => r.map(drop),
    }
}

/// What [`quarantine`] did.
#[derive(Debug)]
pub(super) enum Held {
    /// Nothing git would reach is there.
    Nothing,
    /// The `.git` was renamed to this path.
    Renamed(PathBuf),
    /// A symbolic link on the way was neutralised: `git ls-files` and `git
    /// grep --recurse-submodules` enter a submodule through one.
    Link(Removed),
}

/// Make the `.git` at `dotgit` (below one of the writable `roots`, every
/// component a plain name) unreachable for git by renaming it, in its own
/// directory, to a fresh name beside it; it is kept (it is the command's
/// work). Walked from the root by descriptor: a file on the way means git
/// would not reach it, and nothing is done; a symbolic link on the way is
/// neutralised (renamed aside, then deleted, never followed), which makes
/// the path unreachable whatever lies behind it.
pub(super) fn quarantine(roots: &[&Path], dotgit: &Path, fail_rename: bool) -> Result<Held, Failed> {
    let Some(root) = roots.iter().filter(|r| dotgit.starts_with(r)).max_by_key(|r| r.components().count()) else {
        return Ok(Held::Nothing);
    };
    let bad = |why: &str| Failed::new("checking the path", dotgit, io::Error::other(why.to_string()));
    let rel = dotgit.strip_prefix(root).map_err(|_| bad("not below its writable root"))?;
    let mut names = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => names.push(n),
            _ => return Err(bad("an unexpected component")),
        }
    }
    let Some(last) = names.pop() else { return Ok(Held::Nothing) };
    let mut restore = Restore::default();
    let mut dir = nix::fcntl::open(*root, DIR_FLAGS, Mode::empty())
        .map_err(|e| Failed::new("opening the writable root", root, e))?;
    let mut shown = root.to_path_buf();
    for n in names {
        let here = shown.join(n);
        dir = match open_dir(&dir, n, &mut restore) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(Held::Nothing),
            Err(Errno::ELOOP | Errno::ENOTDIR) => {
                return match fstatat(&dir, n, AtFlags::AT_SYMLINK_NOFOLLOW) {
                    Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFLNK => {
                        neutralise(&dir, n, &here, &mut restore, fail_rename).map(Held::Link)
                    }
                    Ok(_) | Err(Errno::ENOENT) => Ok(Held::Nothing),
                    Err(e) => Err(Failed::new("looking at an entry on the way", &here, e)),
                };
            }
            Err(e) => return Err(Failed::new("opening a directory on the way", &here, e)),
        };
        shown = here;
    }
    let here = shown.join(last);
    match lookup(&dir, last, &mut restore) {
        Ok(()) => {}
        Err(Errno::ENOENT | Errno::ENOTDIR) => return Ok(Held::Nothing),
        Err(e) => return Err(Failed::new("looking at the entry", &here, e)),
    }
    let name = rename_aside(&dir, last, ".git.portcullis-quarantined", &here, &mut restore, fail_rename)?;
    Ok(Held::Renamed(shown.join(name)))
}

/// Rename `name` in `dir` (shown as `shown`) to a fresh name starting with
/// `prefix`, never replacing anything; the new name.
fn rename_aside(
    dir: &OwnedFd,
    name: &OsStr,
    prefix: &str,
    shown: &Path,
    restore: &mut Restore,
    fail_rename: bool,
) -> Result<String, Failed> {
    let stamp = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let quarantine = format!("{prefix}-{}-{stamp}", std::process::id());
    let bad_name = |e| Failed::new("renaming the entry to a quarantine name", shown, io::Error::other(e));
    let from = CString::new(name.as_encoded_bytes()).map_err(bad_name)?;
    let to = CString::new(quarantine.as_bytes()).map_err(bad_name)?;
    // NOREPLACE: a name made in the meantime is never replaced.
    let rename = || {
        if fail_rename {
            return Err(io::Error::from_raw_os_error(libc::EPERM));
        }
        crate::sys::rename_noreplace(dir, &from, &to)
    };
    match rename() {
        Ok(()) => {}
        Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => {
            // A command running as the caller may have taken write access
            // from the directory (`chmod 555 .git`): give it back for the
            // rename (restored when the walk ends).
            if restore.grant(dir, 0o300).is_err() {
                return Err(Failed::new("renaming the entry to a quarantine name", shown, e));
            }
            rename().map_err(|e| Failed::new("renaming the entry to a quarantine name", shown, e))?;
        }
        Err(e) => return Err(Failed::new("renaming the entry to a quarantine name", shown, e)),
    }
    Ok(quarantine)
}

/// Rename `name` in `dir` to a fresh quarantine name, then delete that.
fn neutralise(
    dir: &OwnedFd,
    name: &OsStr,
    shown: &Path,
    restore: &mut Restore,
    fail_rename: bool,
) -> Result<Removed, Failed> {
    let quarantine = rename_aside(dir, name, ".portcullis-removed", shown, restore, fail_rename)?;
    let to = CString::new(quarantine.as_bytes())
        .map_err(|e| Failed::new("renaming the entry to a quarantine name", shown, io::Error::other(e)))?;
    let moved = shown.with_file_name(&quarantine);
    // Git no longer finds the entry; what follows only tidies up, and its
    // failure leaves the quarantined name behind (reported, not fatal).
    let quarantined = |error| Ok(Removed::Quarantined { entry: shown.to_path_buf(), to: moved.clone(), error });
    // The renamed entry, held by descriptor (never through a link).
    let held =
        match openat(dir, quarantine.as_str(), OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty()) {
            Ok(h) => h,
            Err(e) => return quarantined(e.into()),
        };
    // fstat of the descriptor itself: a link is seen as a link.
    let st = match fstat(&held) {
        Ok(st) => st,
        Err(e) => return quarantined(e.into()),
    };
    let deleted = if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
        drop(held);
        delete_tree(dir, &to)
    } else {
        nix::unistd::unlinkat(dir, to.as_c_str(), UnlinkatFlags::NoRemoveDir).map_err(io::Error::from)
    };
    match deleted {
        Ok(()) => Ok(Removed::Deleted { entry: shown.to_path_buf() }),
        Err(e) => quarantined(e),
    }
}

/// Delete the directory `name` in `parent` and everything below it, never
/// following a link, without recursion and with a handful of descriptors
/// whatever the depth (a recursive delete of a tree 20,000 levels deep, which
/// a command makes in a second, overflows a thread's stack and aborts the
/// process): each subdirectory's own subdirectories are moved up into the
/// top directory, its other entries unlinked, then it is removed; passes
/// repeat until the top is empty.
fn delete_tree(parent: &OwnedFd, name: &CStr) -> io::Result<()> {
    let top = open_for_delete(parent, name)?;
    let mut fresh = 0u64;
    loop {
        let entries = list(&top)?;
        if entries.is_empty() {
            break;
        }
        for (entry, is_dir) in entries {
            if !is_dir {
                nix::unistd::unlinkat(&top, entry.as_c_str(), UnlinkatFlags::NoRemoveDir)?;
                continue;
            }
            let sub = open_for_delete(&top, &entry)?;
            for (inner, inner_dir) in list(&sub)? {
                if inner_dir {
                    // Up into the top directory, under a name not in use.
                    drop(full_access(&sub, &inner)?);
                    loop {
                        fresh += 1;
                        let to = CString::new(format!(".portcullis-rm-{fresh}")).map_err(io::Error::other)?;
                        match crate::sys::rename_noreplace_at(&sub, &inner, &top, &to) {
                            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => continue,
                            r => break r?,
                        }
                    }
                } else {
                    nix::unistd::unlinkat(&sub, inner.as_c_str(), UnlinkatFlags::NoRemoveDir)?;
                }
            }
            drop(sub);
            nix::unistd::unlinkat(&top, entry.as_c_str(), UnlinkatFlags::RemoveDir)?;
        }
    }
    drop(top);
    nix::unistd::unlinkat(parent, name, UnlinkatFlags::RemoveDir).map_err(io::Error::from)
}

/// Open the directory `name` in `dir` (not followed) for listing, after
/// giving it the owner's full access (a command may have made it `000`).
fn open_for_delete(dir: &OwnedFd, name: &CStr) -> io::Result<OwnedFd> {
    let held = full_access(dir, name)?;
    Ok(openat(&held, c".", OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())?)
}

/// The directory `name` in `dir` (not followed), held by an `O_PATH`
/// descriptor, with the owner's full access: listing it needs read, moving
/// it to another parent write (its `..` changes).
fn full_access(dir: &OwnedFd, name: &CStr) -> io::Result<OwnedFd> {
    let held = openat(dir, name, DIR_FLAGS, Mode::empty())?;
    let st = fstat(&held)?;
    if st.st_mode & 0o700 != 0o700 {
        fs::set_permissions(fd_path(&held), fs::Permissions::from_mode((st.st_mode & 0o7777) | 0o700))?;
    }
    Ok(held)
}

/// The entries of a directory (`.` and `..` left out), each with whether it
/// is a directory (not followed).
fn list(dir: &OwnedFd) -> io::Result<Vec<(CString, bool)>> {
    use std::os::unix::ffi::OsStrExt;
    let mut out = Vec::new();
    // Through the descriptor's magic link: that very directory. An entry's
    // type comes from the directory itself (or an lstat of the entry).
    for e in fs::read_dir(fd_path(dir))? {
        let e = e?;
        let is_dir = e.file_type()?.is_dir();
        out.push((CString::new(e.file_name().as_bytes()).map_err(io::Error::other)?, is_dir));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree() -> tempfile::TempDir {
        tempfile::Builder::new().prefix("pc-guard-").tempdir_in("/var/tmp").unwrap_or_else(|e| panic!("{e}"))
    }

    fn ok<T, E: std::fmt::Debug>(r: Result<T, E>) -> T {
        r.unwrap_or_else(|e| panic!("{e:?}"))
    }

    fn gone(p: &Path) -> bool {
        fs::symlink_metadata(p).is_err()
    }

    #[test]
    fn a_link_before_dotdot_is_removed_and_its_target_kept() {
        let d = tree();
        let ws = ok(fs::canonicalize(d.path()));
        ok(fs::create_dir_all(ws.join(".git")));
        ok(fs::create_dir_all(ws.join(".cache/a/b/x")));
        ok(fs::write(ws.join(".cache/a/evil"), "x"));
        ok(symlink(".cache/a/b", ws.join("vendor")));
        // git opens .git/../vendor/x/../../evil: .cache/a/evil.
        let r = ok(remove(&[&ws], &ws.join(".git/../vendor/x/../../evil"), false));
        assert!(matches!(&r, Removed::Deleted { entry } if *entry == ws.join("vendor")), "{r:?}");
        assert!(gone(&ws.join("vendor")) && ws.join(".cache/a/evil").is_file());
        // Without a link the spelling is where it leads.
        ok(fs::write(ws.join("evil"), "x"));
        let r = ok(remove(&[&ws], &ws.join(".git/../a/../evil"), false));
        assert!(matches!(&r, Removed::Nothing), "{r:?}");
        ok(fs::create_dir(ws.join("a")));
        let r = ok(remove(&[&ws], &ws.join(".git/../a/../evil"), false));
        assert!(matches!(&r, Removed::Deleted { entry } if *entry == ws.join("evil")), "{r:?}");
    }

    #[test]
    fn a_file_on_the_way_leads_nowhere_and_stays() {
        let d = tree();
        let ws = ok(fs::canonicalize(d.path()));
        ok(fs::write(ws.join(".husky"), "not a directory"));
        let r = ok(remove(&[&ws], &ws.join(".husky/_"), false));
        assert!(matches!(r, Removed::Nothing), "{r:?}");
        assert!(ws.join(".husky").is_file());
    }

    #[test]
    fn a_path_spelled_from_above_the_root_is_walked_from_there() {
        let d = tree();
        let base = ok(fs::canonicalize(d.path()));
        let ws = base.join("ws");
        ok(fs::create_dir_all(ws.join(".cache/h")));
        ok(symlink(".cache", ws.join("tools")));
        let name = ok(ws.file_name().ok_or("no name"));
        let spelled = ws.join("..").join(name).join("tools/h");
        let r = ok(remove(&[&ws], &spelled, false));
        assert!(matches!(&r, Removed::Deleted { entry } if *entry == ws.join("tools")), "{r:?}");
        // From outside every root, the spelling is taken lexically.
        ok(fs::create_dir(ws.join("hooks")));
        let r = ok(remove(&[&ws], &base.join("elsewhere/../ws/hooks"), false));
        assert!(matches!(&r, Removed::Deleted { entry } if *entry == ws.join("hooks")), "{r:?}");
        assert!(gone(&ws.join("hooks")) && gone(&ws.join("tools")) && ws.join(".cache/h").is_dir());
    }

    #[test]
    fn a_trailing_dotdot_after_a_link_removes_the_link() {
        let d = tree();
        let ws = ok(fs::canonicalize(d.path()));
        ok(fs::create_dir_all(ws.join(".cache/a/b")));
        ok(symlink(".cache/a/b", ws.join("t")));
        let r = ok(remove(&[&ws], &ws.join("t/.."), false));
        assert!(matches!(&r, Removed::Deleted { entry } if *entry == ws.join("t")), "{r:?}");
        // Without the link, `x/y/..` is `x`.
        ok(fs::create_dir_all(ws.join("x/y")));
        let r = ok(remove(&[&ws], &ws.join("x/y/.."), false));
        assert!(matches!(&r, Removed::Deleted { entry } if *entry == ws.join("x")), "{r:?}");
        assert!(ws.join(".cache/a/b").is_dir());
    }

    #[test]
    fn a_failed_rename_is_a_failure_naming_the_entry() {
        let d = tree();
        let ws = ok(fs::canonicalize(d.path()));
        ok(fs::create_dir_all(ws.join(".cache")));
        ok(symlink(".cache", ws.join("tools")));
        match remove(&[&ws], &ws.join("tools/x"), true) {
            Err(Failed { entry, source, .. }) => {
                assert_eq!(entry, ws.join("tools"));
                assert_eq!(source.raw_os_error(), Some(libc::EPERM));
            }
            other => panic!("{other:?}"),
        }
        assert!(!gone(&ws.join("tools")));
    }
}
