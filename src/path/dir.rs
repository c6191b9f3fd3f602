//! A directory capability: an open descriptor of a root, and every
//! operation relative to it, never climbing out (cap-std's `Dir`, in the
//! small shape the file tools need).
//!
//! Paths given to a [`Dir`] are relative to it. They are resolved by the
//! kernel with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`: a `..` or
//! a symbolic link may move around below the root but never out of it (the
//! call fails with `EXDEV`), and `/proc`'s magic links are refused. With
//! [`Links::Refuse`] every symbolic link on the way fails the call
//! (`ELOOP`): the file tools use it for paths the jail has already resolved,
//! which contain no link, so a link met there was swapped in after the
//! judgement.
//!
//! Where `openat2` is unavailable (`ENOSYS`: a kernel before 5.6, or a
//! container's seccomp profile that does not know it, some of which answer
//! `EPERM`) the same rules are
//! kept by a walk of one component at a time with `O_NOFOLLOW`, links read
//! with `readlinkat` and expanded in place, and `..` popping a stack of the
//! descriptors already opened, so it cannot leave the root either.
//!
//! Opening a file for reading refuses FIFOs, sockets and devices without
//! blocking or side effects: the path is opened with `O_PATH` first and its
//! type checked with `fstat`; only a regular file is opened for reading
//! (`O_NONBLOCK | O_NOCTTY`, checked again to be the same inode).

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::{fcntl, openat, openat2, readlinkat, renameat, AtFlags, FcntlArg, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fchmod, fstat, fstatat, mkdirat, FileStat, Mode, SFlag};
use nix::unistd::{unlinkat, UnlinkatFlags};

/// How many links one resolution may follow (the kernel's own limit).
const MAX_LINKS: usize = 40;

/// How symbolic links on the way are treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Links {
    /// Followed while they stay below the root (`RESOLVE_BENEATH`).
    Beneath,
    /// Refused (`ELOOP`), wherever they lead (`RESOLVE_NO_SYMLINKS`).
    Refuse,
}

/// How paths are resolved below the root.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// By the kernel, with `openat2`.
    Openat2,
    /// By a walk of one component at a time with `O_NOFOLLOW` (where
    /// `openat2` is `ENOSYS`).
    Walk,
}

/// What kind of file an entry is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (not followed).
    Symlink,
    /// A named pipe.
    Fifo,
    /// A Unix socket.
    Socket,
    /// A character or block device.
    Device,
}

impl Kind {
    fn of(st: &FileStat) -> Kind {
        match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
            SFlag::S_IFDIR => Kind::Dir,
            SFlag::S_IFLNK => Kind::Symlink,
            SFlag::S_IFIFO => Kind::Fifo,
            SFlag::S_IFSOCK => Kind::Socket,
            SFlag::S_IFCHR | SFlag::S_IFBLK => Kind::Device,
            _ => Kind::File,
        }
    }

    /// A short name for messages (`a FIFO`, `a socket`).
    pub fn describe(self) -> &'static str {
        match self {
            Kind::File => "a regular file",
            Kind::Dir => "a directory",
            Kind::Symlink => "a symbolic link",
            Kind::Fifo => "a FIFO",
            Kind::Socket => "a socket",
            Kind::Device => "a device",
        }
    }
}

/// An open file that is not a regular file was refused (see [`Dir::open_file`]).
#[derive(Debug, thiserror::Error)]
#[error("{} is {}, not a regular file: refused", path.display(), kind.describe())]
pub struct NotRegular {
    /// The path, relative to the root.
    pub path: PathBuf,
    /// What it is.
    pub kind: Kind,
}

/// Called by [`Dir::write_atomic`] once the new content is on disk, before
/// the rename (a test can kill the process there).
pub type BeforeRename = Arc<dyn Fn(&Path) + Send + Sync>;

/// An open directory: the root every operation is relative to.
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
    links: Links,
    resolution: Resolution,
    before_rename: Option<BeforeRename>,
}

impl std::fmt::Debug for Dir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dir")
            .field("path", &self.path)
            .field("links", &self.links)
            .field("resolution", &self.resolution)
            .finish_non_exhaustive()
    }
}

fn io(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// The error of a path that would leave the root (what `openat2` says).
fn escape() -> io::Error {
    io(Errno::EXDEV)
}

fn dir_flags() -> OFlag {
    OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC
}

impl Dir {
    /// Open the directory `path` (absolute, or relative to the process's
    /// working directory) as a root, links below it followed while they stay
    /// inside. Uses `openat2` unless the kernel refuses it with `ENOSYS`.
    pub fn open(path: &Path) -> io::Result<Dir> {
        let fd = nix::fcntl::open(path, dir_flags(), Mode::empty()).map_err(io)?;
        let probe = OpenHow::new().flags(dir_flags()).resolve(ResolveFlag::RESOLVE_BENEATH);
        // ENOSYS: no openat2 here; EPERM: a seccomp profile refusing what it
        // does not know (this call cannot otherwise fail with EPERM).
        let resolution = match openat2(fd.as_fd(), ".", probe) {
            Err(Errno::ENOSYS | Errno::EPERM) => Resolution::Walk,
            _ => Resolution::Openat2,
        };
        Ok(Dir { fd, path: path.to_path_buf(), links: Links::Beneath, resolution, before_rename: None })
    }

    /// The same root, resolving with `resolution` (the walk is what a
    /// kernel without `openat2` gets; tests run both).
    pub fn with_resolution(mut self, resolution: Resolution) -> Dir {
        self.resolution = resolution;
        self
    }

    /// The same root, treating links as `links` says.
    pub fn with_links(mut self, links: Links) -> Dir {
        self.links = links;
        self
    }

    /// The same root, calling `hook` in every atomic write between writing
    /// the new content and renaming it into place. For crash tests.
    #[doc(hidden)]
    pub fn with_before_rename(mut self, hook: BeforeRename) -> Dir {
        self.before_rename = Some(hook);
        self
    }

    /// The path this root was opened at (for messages; never used to
    /// resolve anything).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How this root resolves paths.
    pub fn resolution(&self) -> Resolution {
        self.resolution
    }

    /// How this root treats links.
    pub fn links(&self) -> Links {
        self.links
    }

    fn resolve_flags(&self) -> ResolveFlag {
        let mut r = ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS;
        if self.links == Links::Refuse {
            r |= ResolveFlag::RESOLVE_NO_SYMLINKS;
        }
        r
    }

    /// Open `rel` with `flags` (`O_CLOEXEC` is added), below the root.
    fn open_at(&self, rel: &Path, flags: OFlag, mode: Mode) -> io::Result<OwnedFd> {
        let rel = relative(rel)?;
        let flags = flags | OFlag::O_CLOEXEC;
        match self.resolution {
            Resolution::Openat2 => {
                let how = OpenHow::new().flags(flags).mode(mode).resolve(self.resolve_flags());
                let path: &Path = if rel.as_os_str().is_empty() { Path::new(".") } else { rel };
                openat2(self.fd.as_fd(), path, how).map_err(io)
            }
            Resolution::Walk => {
                let (parent, name) = self.walk(rel, true)?;
                match name {
                    None => openat(parent.as_fd(), ".", flags, mode).map_err(io),
                    Some(name) => openat(parent.as_fd(), name.as_os_str(), flags | OFlag::O_NOFOLLOW, mode).map_err(io),
                }
            }
        }
    }

    /// The directory holding the last component of `rel`, and that
    /// component (a plain name). Links in the parent are treated as this
    /// root says; the last component is never followed.
    fn parent_of(&self, rel: &Path) -> io::Result<(OwnedFd, OsString)> {
        let rel = relative(rel)?;
        let name = match rel.components().next_back() {
            Some(Component::Normal(n)) => n.to_os_string(),
            // `a/..`, `.` or the root itself name no entry to act on.
            _ => return Err(io(Errno::EINVAL)),
        };
        let parent = rel.parent().unwrap_or(Path::new(""));
        let fd = self.open_at(parent, dir_flags(), Mode::empty())?;
        Ok((fd, name))
    }

    /// The walk: resolve `rel` to the descriptor of the directory holding
    /// its last component and that component's name (`None` when `rel`
    /// ends in a directory: empty, `.` or `..`). With `follow_last`, a link
    /// in the last place is expanded too.
    fn walk(&self, rel: &Path, follow_last: bool) -> io::Result<(OwnedFd, Option<OsString>)> {
        let mut stack: Vec<OwnedFd> = vec![openat(self.fd.as_fd(), ".", dir_flags(), Mode::empty()).map_err(io)?];
        let mut pending: VecDeque<OsString> = VecDeque::new();
        push_front(&mut pending, rel)?;
        let mut followed = 0;
        while let Some(c) = pending.pop_front() {
            let top = stack.last().ok_or_else(escape)?;
            match c.as_bytes() {
                b"." | b"" => continue,
                b".." => {
                    if stack.len() <= 1 {
                        return Err(escape());
                    }
                    stack.pop();
                    continue;
                }
                _ => {}
            }
            let last = pending.is_empty();
            let st = match fstatat(top.as_fd(), c.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => Some(st),
                Err(Errno::ENOENT) if last => None,
                Err(e) => return Err(io(e)),
            };
            let kind = st.as_ref().map(Kind::of);
            if kind == Some(Kind::Symlink) && (!last || follow_last) {
                if self.links == Links::Refuse {
                    return Err(io(Errno::ELOOP));
                }
                followed += 1;
                if followed > MAX_LINKS {
                    return Err(io(Errno::ELOOP));
                }
                let target = readlinkat(top.as_fd(), c.as_os_str()).map_err(io)?;
                if Path::new(&target).is_absolute() {
                    return Err(escape());
                }
                push_front(&mut pending, Path::new(&target))?;
                continue;
            }
            if last {
                let top = stack.pop().ok_or_else(escape)?;
                return Ok((top, Some(c)));
            }
            // The type was checked above; O_NOFOLLOW keeps a link swapped in
            // since from being followed.
            let fd = openat(top.as_fd(), c.as_os_str(), dir_flags() | OFlag::O_NOFOLLOW, Mode::empty()).map_err(io)?;
            stack.push(fd);
        }
        let top = stack.pop().ok_or_else(escape)?;
        Ok((top, None))
    }

    /// Open the regular file `rel` for reading. A FIFO, socket or device is
    /// refused (as [`NotRegular`] inside the `io::Error`) without blocking
    /// and without side effects: the path is first opened with `O_PATH`
    /// (which opens nothing: no device driver, no FIFO wait) and its type
    /// checked; only a regular file is then opened for reading, with
    /// `O_NONBLOCK | O_NOCTTY`, and checked again to be the same file.
    pub fn open_file(&self, rel: &Path) -> io::Result<File> {
        let refuse = |kind: Kind| {
            let e = NotRegular { path: rel.to_path_buf(), kind };
            io::Error::new(io::ErrorKind::InvalidInput, e)
        };
        let probe = self.open_at(rel, OFlag::O_PATH, Mode::empty())?;
        let first = fstat(probe.as_fd()).map_err(io)?;
        let kind = Kind::of(&first);
        if kind != Kind::File {
            return Err(refuse(kind));
        }
        let fd = self.open_at(rel, OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY, Mode::empty())?;
        let st = fstat(fd.as_fd()).map_err(io)?;
        if Kind::of(&st) != Kind::File || (st.st_dev, st.st_ino) != (first.st_dev, first.st_ino) {
            // Replaced in between: not the file that was looked at.
            return Err(io(Errno::EAGAIN));
        }
        let fl = fcntl(fd.as_fd(), FcntlArg::F_GETFL).map_err(io)?;
        let fl = OFlag::from_bits_truncate(fl) & !OFlag::O_NONBLOCK;
        fcntl(fd.as_fd(), FcntlArg::F_SETFL(fl)).map_err(io)?;
        Ok(File::from(fd))
    }

    /// Open the directory `rel` as a new root (same rules).
    pub fn open_dir(&self, rel: &Path) -> io::Result<Dir> {
        let fd = self.open_at(rel, dir_flags(), Mode::empty())?;
        Ok(Dir {
            fd,
            path: self.path.join(rel),
            links: self.links,
            resolution: self.resolution,
            before_rename: self.before_rename.clone(),
        })
    }

    /// What `rel` is, its last component not followed; `None` when it does
    /// not exist.
    pub fn kind(&self, rel: &Path) -> io::Result<Option<Kind>> {
        let rel = relative(rel)?;
        if !matches!(rel.components().next_back(), Some(Component::Normal(_))) {
            // The root, `.` or a `..` ending: a directory, if it resolves.
            return self.open_at(rel, dir_flags(), Mode::empty()).map(|_| Some(Kind::Dir));
        }
        let (parent, name) = match self.parent_of(rel) {
            Ok(p) => p,
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => return Ok(None),
            Err(e) => return Err(e),
        };
        match fstatat(parent.as_fd(), name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(Kind::of(&st))),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(io(e)),
        }
    }

    /// Make the directory `rel` and any missing parents (like `mkdir -p`);
    /// an existing directory is fine. Each component must be a plain name.
    pub fn create_dir_all(&self, rel: &Path) -> io::Result<()> {
        let rel = relative(rel)?;
        self.create_parents(rel).map(drop)
    }

    /// Open the directory `rel`, making what is missing; returns its fd.
    fn create_parents(&self, rel: &Path) -> io::Result<OwnedFd> {
        let mut cur = self.open_at(Path::new(""), dir_flags(), Mode::empty())?;
        let mut prefix = PathBuf::new();
        for c in rel.components() {
            let Component::Normal(name) = c else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{}: only plain names can be created (no `.` or `..`)", rel.display()),
                ));
            };
            prefix.push(name);
            cur = match self.open_at(&prefix, dir_flags(), Mode::empty()) {
                Ok(fd) => fd,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {
                    match mkdirat(cur.as_fd(), name, Mode::from_bits_truncate(0o777)) {
                        Ok(()) | Err(Errno::EEXIST) => {}
                        Err(e) => return Err(io(e)),
                    }
                    self.open_at(&prefix, dir_flags(), Mode::empty())?
                }
                Err(e) => return Err(e),
            };
        }
        Ok(cur)
    }

    /// Remove the file, link or empty directory `rel` (a link itself, not
    /// what it points to).
    pub fn remove(&self, rel: &Path) -> io::Result<()> {
        let (dir, name) = self.parent_of(rel)?;
        let st = fstatat(dir.as_fd(), name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW).map_err(io)?;
        let flag = if Kind::of(&st) == Kind::Dir { UnlinkatFlags::RemoveDir } else { UnlinkatFlags::NoRemoveDir };
        unlinkat(dir.as_fd(), name.as_os_str(), flag).map_err(io)
    }

    /// Replace (or create) the regular file `rel` with `data`, atomically:
    /// a new file in the same directory, written and synced, then renamed
    /// over the old one, so a reader or a crash sees the old content or the
    /// new one, never half. An existing file's mode is kept (without setuid
    /// and setgid); an existing non-file refuses. With `parents`, missing
    /// parent directories are made.
    pub fn write_atomic(&self, rel: &Path, data: &[u8], parents: bool) -> io::Result<()> {
        let rel = relative(rel)?;
        let (dir, name) = if parents {
            let name = match rel.components().next_back() {
                Some(Component::Normal(n)) => n.to_os_string(),
                _ => return Err(io(Errno::EINVAL)),
            };
            (self.create_parents(rel.parent().unwrap_or(Path::new("")))?, name)
        } else {
            self.parent_of(rel)?
        };
        let old = match fstatat(dir.as_fd(), name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => match Kind::of(&st) {
                Kind::File => Some((Mode::from_bits_truncate(st.st_mode & 0o7777 & !0o6000), st.st_uid, st.st_gid)),
                Kind::Dir => return Err(io(Errno::EISDIR)),
                kind => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        NotRegular { path: rel.to_path_buf(), kind },
                    ))
                }
            },
            Err(Errno::ENOENT) => None,
            Err(e) => return Err(io(e)),
        };
        let tmp = temp_name(&name);
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let fd = openat(dir.as_fd(), tmp.as_os_str(), flags, Mode::from_bits_truncate(0o666)).map_err(io)?;
        let result = (|| {
            if let Some((mode, uid, gid)) = old {
                keep_owner(&fd, uid, gid)?;
                fchmod(fd.as_fd(), mode).map_err(io)?;
            }
            let mut f = File::from(fd);
            f.write_all(data)?;
            f.sync_all()?;
            if let Some(hook) = &self.before_rename {
                hook(rel);
            }
            renameat(dir.as_fd(), tmp.as_os_str(), dir.as_fd(), name.as_os_str()).map_err(io)
        })();
        if result.is_err() {
            let _ = unlinkat(dir.as_fd(), tmp.as_os_str(), UnlinkatFlags::NoRemoveDir);
        }
        result
    }
}

/// Give the new file `fd` the replaced file's owner and group, as far as
/// the caller may: root keeps both (a root host program editing a user's
/// file must not hand it to root); another caller keeps the group where it
/// is a member, else the file is simply the caller's, like any file it
/// creates (`EPERM` is not an error here).
fn keep_owner(fd: &OwnedFd, uid: u32, gid: u32) -> io::Result<()> {
    use nix::unistd::{fchown, Gid, Uid};
    let st = fstat(fd.as_fd()).map_err(io)?;
    if (st.st_uid, st.st_gid) == (uid, gid) {
        return Ok(());
    }
    match fchown(fd.as_fd(), Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid))) {
        Ok(()) => Ok(()),
        Err(Errno::EPERM) if st.st_gid != gid => match fchown(fd.as_fd(), None, Some(Gid::from_raw(gid))) {
            Ok(()) | Err(Errno::EPERM) => Ok(()),
            Err(e) => Err(io(e)),
        },
        Err(Errno::EPERM) => Ok(()),
        Err(e) => Err(io(e)),
    }
}

/// `rel` as a relative path; an absolute one would leave the root. One of
/// `PATH_MAX` bytes or more is refused (`ENAMETOOLONG`) before anything is
/// done, in both resolutions: `openat2` refuses it, and the walk, which
/// could go deeper one component at a time, must not make a tree that
/// nothing else can name (nor half of one before failing).
fn relative(rel: &Path) -> io::Result<&Path> {
    if rel.is_absolute() {
        return Err(escape());
    }
    if rel.as_os_str().len() >= libc::PATH_MAX as usize {
        return Err(io(Errno::ENAMETOOLONG));
    }
    Ok(rel)
}

/// Put the components of `p` at the front of `pending`, in order.
fn push_front(pending: &mut VecDeque<OsString>, p: &Path) -> io::Result<()> {
    if p.is_absolute() {
        return Err(escape());
    }
    for c in p.as_os_str().as_bytes().split(|b| *b == b'/').rev() {
        pending.push_front(OsStr::from_bytes(c).to_os_string());
    }
    Ok(())
}

/// A fresh hidden name beside `name`: short enough beside a long name
/// (NAME_MAX is 255 bytes), unique by its random suffix.
fn temp_name(name: &OsStr) -> OsString {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.write_u32(std::process::id());
    let mut tmp = OsString::from(".");
    let keep = name.as_bytes();
    tmp.push(OsStr::from_bytes(&keep[..keep.len().min(200)]));
    tmp.push(format!(".portcullis-{:016x}", h.finish()));
    tmp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn both(root: &Path) -> Vec<Dir> {
        let Ok(a) = Dir::open(root) else { panic!("open {}", root.display()) };
        let Ok(b) = Dir::open(root) else { panic!("open {}", root.display()) };
        vec![a, b.with_resolution(Resolution::Walk)]
    }

    fn errno(r: io::Result<impl Sized>) -> Option<i32> {
        r.err().and_then(|e| e.raw_os_error())
    }

    #[test]
    fn links_stay_beneath_in_both_resolutions() {
        let Ok(t) = tempfile::tempdir() else { return };
        let root = t.path().join("root");
        let _ = std::fs::create_dir_all(root.join("a/b"));
        let _ = std::fs::write(root.join("a/b/f"), "in");
        let _ = std::fs::write(t.path().join("outside"), "out");
        let _ = std::os::unix::fs::symlink("a/b", root.join("inlink"));
        let _ = std::os::unix::fs::symlink("../../outside", root.join("a/out"));
        let _ = std::os::unix::fs::symlink("/etc/passwd", root.join("abs"));
        let _ = std::os::unix::fs::symlink("../b/f", root.join("a/b/up"));
        for d in both(&root) {
            let r = d.resolution();
            assert!(d.open_file(Path::new("inlink/f")).is_ok(), "{r:?}: a link inside is followed");
            assert!(d.open_file(Path::new("a/b/up")).is_ok(), "{r:?}: .. after a link");
            assert_eq!(errno(d.open_file(Path::new("a/out"))), Some(libc::EXDEV), "{r:?}");
            assert_eq!(errno(d.open_file(Path::new("abs"))), Some(libc::EXDEV), "{r:?}");
            assert_eq!(errno(d.open_file(Path::new("../outside"))), Some(libc::EXDEV), "{r:?}");
            assert_eq!(errno(d.open_file(Path::new("/etc/passwd"))), Some(libc::EXDEV), "{r:?}");
            let d = d.with_links(Links::Refuse);
            assert_eq!(errno(d.open_file(Path::new("inlink/f"))), Some(libc::ELOOP), "{r:?}");
            assert!(d.open_file(Path::new("a/b/f")).is_ok(), "{r:?}");
        }
    }

    #[test]
    fn write_remove_mkdir_and_kind() {
        let Ok(t) = tempfile::tempdir() else { return };
        for (i, d) in both(t.path()).into_iter().enumerate() {
            let base = PathBuf::from(format!("x{i}"));
            assert!(d.create_dir_all(&base.join("y/z")).is_ok());
            assert_eq!(d.kind(&base.join("y/z")).ok().flatten(), Some(Kind::Dir));
            let f = base.join("y/f.txt");
            assert!(d.write_atomic(&f, b"one", false).is_ok());
            assert!(d.write_atomic(&base.join("new/deep/g"), b"g", true).is_ok());
            assert_eq!(std::fs::read_to_string(t.path().join(&f)).ok().as_deref(), Some("one"));
            assert_eq!(d.kind(&f).ok().flatten(), Some(Kind::File));
            assert!(d.remove(&f).is_ok());
            assert_eq!(d.kind(&f).ok().flatten(), None);
            assert_eq!(errno(d.remove(&base.join("y"))), Some(libc::ENOTEMPTY));
            assert!(d.create_dir_all(Path::new("../up")).is_err());
            assert!(!t.path().parent().is_some_and(|p| p.join("up").exists()));
        }
    }
}
