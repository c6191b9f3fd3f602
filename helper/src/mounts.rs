//! The mount plan: a fresh tmpfs root, binds by fd, read-only carve-outs,
//! masks, a private /proc and /dev, then `pivot_root`.
//!
//! Every bind source is opened once with `RESOLVE_NO_SYMLINKS`, and every
//! destination is walked component by component with `O_NOFOLLOW` from the
//! new root, so a symlink planted in the workspace can neither redirect a
//! source nor a mount point. Mount points are created only on the sandbox's
//! own root tmpfs; a missing mount point inside a user's tree is an error —
//! the helper never leaves a stub file behind (a common complaint about
//! peers). Binds are made with `open_tree(OPEN_TREE_CLONE|AT_RECURSIVE)`, and
//! `mount_setattr(AT_RECURSIVE)` makes the whole cloned tree read-only, so
//! submounts cannot stay writable by accident (bubblewrap has to remount each
//! one by hand).

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{fstat, mkdirat, Mode, SFlag};

use portcullis_helper::spec::{MountOp, SpawnSpec};

use crate::sys;
use crate::Fail;
use portcullis_helper::report::Step;

/// A bind source: a path the helper opened, or a detached mount tree the
/// outer helper already cloned (and idmapped) on the host side.
pub enum Source {
    /// An `O_PATH` fd of the source path.
    Path(OwnedFd),
    /// A detached mount, flags already set.
    Tree(OwnedFd),
}

/// Bind sources opened before the new root exists, indexed like the plan.
pub struct Sources(Vec<Option<Source>>);

fn cstr(b: &[u8]) -> io::Result<CString> {
    CString::new(b).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn errno(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// Open a host path without following any symlink on the way: the library
/// resolved it, so a link here means it was swapped since. With `host`,
/// the path is looked up in that detached copy of the host's tree (as its
/// root) instead of this process's root.
fn open_source(host: Option<BorrowedFd<'_>>, src: &[u8]) -> io::Result<OwnedFd> {
    let Some(h) = host else { return portcullis_helper::mount_api::open_source_on_host(src) };
    sys::openat2(
        h.as_raw_fd(),
        &cstr(src)?,
        libc::O_PATH | libc::O_CLOEXEC,
        sys::RESOLVE_IN_ROOT | sys::RESOLVE_NO_SYMLINKS | sys::RESOLVE_NO_MAGICLINKS,
    )
}

/// Open the bind sources of `mounts` at the indexes `which` not prepared
/// already. Runs in the new mount namespace before anything is mounted
/// over the host's paths (the one-shot helper), or with only the slot's
/// root stacked on `/` (which no absolute lookup enters), so the fds refer
/// to the host's real paths; or, in a slot that pivoted ahead, in `host`,
/// the copy of the host's tree it kept ([`begin_root_keeping_host`]).
pub fn open_sources(
    host: Option<BorrowedFd<'_>>,
    mounts: &[MountOp],
    which: &[usize],
    mut premade: Vec<Option<OwnedFd>>,
) -> Result<Sources, Fail> {
    let mut out: Vec<Option<Source>> = Vec::with_capacity(mounts.len());
    out.resize_with(mounts.len(), || None);
    for &i in which {
        if let Some(MountOp::Bind { src, .. }) = mounts.get(i) {
            out[i] = Some(match premade.get_mut(i).and_then(Option::take) {
                Some(tree) => Source::Tree(tree),
                None => Source::Path(open_source(host, src).map_err(|e| Fail::io(Step::OpenSources, e).detail(i))?),
            });
        }
    }
    Ok(Sources(out))
}

/// Root callers: the idmapped trees of `mounts`
/// ([`portcullis_helper::mount_api::idmapped_trees`]), under `Idmap`.
pub fn idmapped_trees(
    mounts: &[MountOp],
    skip_readonly: bool,
    userns: BorrowedFd<'_>,
) -> Result<Vec<Option<OwnedFd>>, Fail> {
    portcullis_helper::mount_api::idmapped_trees(mounts, skip_readonly, userns)
        .map_err(|(i, e)| Fail::io(Step::Idmap, e).detail(i))
}

/// The sandbox's root while it is being built.
pub struct Root {
    fd: OwnedFd,
    /// Devices of the tmpfs mounts the helper made (root, /tmp, /dev/shm):
    /// the only places where a missing mount point may be created.
    own_devs: Vec<u64>,
    skip_readonly: bool,
    /// Template mount with an empty unreadable dir `d` and file `f`.
    mask: Option<OwnedFd>,
}

fn is_dir(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let st = fstat(fd).map_err(errno)?;
    Ok(SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR)
}

fn is_device(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let st = fstat(fd).map_err(errno)?;
    let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    Ok(kind == SFlag::S_IFCHR || kind == SFlag::S_IFBLK)
}

fn is_symlink(fd: BorrowedFd<'_>) -> io::Result<bool> {
    let st = fstat(fd).map_err(errno)?;
    Ok(SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK)
}

fn components(path: &[u8]) -> io::Result<Vec<&[u8]>> {
    if !path.starts_with(b"/") {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let parts: Vec<&[u8]> = path.split(|b| *b == b'/').filter(|c| !c.is_empty()).collect();
    if parts.iter().any(|c| *c == b"." || *c == b"..") {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    Ok(parts)
}

fn open_path(dir: BorrowedFd<'_>, name: &[u8], extra: OFlag) -> io::Result<OwnedFd> {
    let c = cstr(name)?;
    openat(dir, c.as_c_str(), OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | extra, Mode::empty())
        .map_err(errno)
}

impl Root {
    fn on_root_tmpfs(&self, fd: BorrowedFd<'_>) -> io::Result<bool> {
        Ok(self.own_devs.contains(&fstat(fd).map_err(errno)?.st_dev))
    }

    /// Walk to `path` without following links. A missing component is
    /// created (a directory, or for the last one a directory or an empty
    /// file) only when its parent is on the sandbox's own root tmpfs.
    ///
    /// Fast path: one `openat2(RESOLVE_NO_SYMLINKS)` of the whole path (or,
    /// when only the last component is missing, of its parent) instead of an
    /// open and a close per component; the mount plan makes ~25 of these
    /// walks and pays ~45 mounts on pid 1's critical path. `RESOLVE_NO_SYMLINKS`
    /// refuses a link in any component, as the walk's `O_NOFOLLOW` does, and
    /// crosses mount points as it does. Anything but success takes the
    /// component walk, so every error (and its errno) stays the walk's own.
    fn walk(&self, path: &[u8], create: Option<bool>) -> io::Result<OwnedFd> {
        let parts = components(path)?;
        if let Some(fd) = self.walk_fast(&parts, create)? {
            return Ok(fd);
        }
        self.walk_slow(&parts, create)
    }

    /// `openat2` of `parts` below the root, refusing every symbolic link.
    fn open_beneath(&self, parts: &[&[u8]], extra: OFlag) -> io::Result<OwnedFd> {
        let rel = cstr(&parts.join(&b'/'))?;
        let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | extra;
        sys::openat2(self.fd.as_raw_fd(), &rel, flags.bits(), sys::RESOLVE_NO_SYMLINKS | sys::RESOLVE_NO_MAGICLINKS)
    }

    /// The walk in one or two `openat2` calls; `Ok(None)`: take the component
    /// walk instead.
    fn walk_fast(&self, parts: &[&[u8]], create: Option<bool>) -> io::Result<Option<OwnedFd>> {
        let Some((name, parent_parts)) = parts.split_last() else {
            return Ok(None);
        };
        match self.open_beneath(parts, OFlag::empty()) {
            // A trailing link comes back as an O_PATH fd of the link itself.
            Ok(fd) if is_symlink(fd.as_fd())? => return Ok(None),
            Ok(fd) => return Ok(Some(fd)),
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) && create.is_some() => {}
            Err(_) => return Ok(None),
        }
        // Only the last component may be missing here; deeper gaps take the
        // component walk, which creates (and checks) one level at a time.
        let parent = if parent_parts.is_empty() {
            None
        } else {
            match self.open_beneath(parent_parts, OFlag::O_DIRECTORY) {
                Ok(fd) => Some(fd),
                Err(_) => return Ok(None),
            }
        };
        let dir = parent.as_ref().map_or(self.fd.as_fd(), |p| p.as_fd());
        if !self.on_root_tmpfs(dir)? {
            // Never create a mount point in the user's tree (the component
            // walk reports this case).
            return Ok(None);
        }
        let c = cstr(name)?;
        let made = if create != Some(false) {
            mkdirat(dir, c.as_c_str(), Mode::from_bits_truncate(0o755)).map_err(errno)
        } else {
            openat(
                dir,
                c.as_c_str(),
                OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o644),
            )
            .map(drop)
            .map_err(errno)
        };
        if made.is_err() {
            return Ok(None);
        }
        let fd = open_path(dir, name, OFlag::empty())?;
        if is_symlink(fd.as_fd())? {
            return Err(io::Error::from_raw_os_error(libc::ELOOP));
        }
        Ok(Some(fd))
    }

    /// The component walk: one `O_NOFOLLOW` open per component.
    fn walk_slow(&self, parts: &[&[u8]], create: Option<bool>) -> io::Result<OwnedFd> {
        let mut cur = open_path(self.fd.as_fd(), b".", OFlag::O_DIRECTORY)?;
        for (i, name) in parts.iter().enumerate() {
            let last = i + 1 == parts.len();
            let want_dir = !last || create != Some(false);
            let extra = if last { OFlag::empty() } else { OFlag::O_DIRECTORY };
            let next = match open_path(cur.as_fd(), name, extra) {
                Ok(fd) => fd,
                Err(e) if e.raw_os_error() == Some(libc::ENOENT) && create.is_some() => {
                    if !self.on_root_tmpfs(cur.as_fd())? {
                        // Never create a mount point in the user's tree.
                        return Err(e);
                    }
                    let c = cstr(name)?;
                    if want_dir {
                        mkdirat(cur.as_fd(), c.as_c_str(), Mode::from_bits_truncate(0o755)).map_err(errno)?;
                    } else {
                        let f = openat(
                            cur.as_fd(),
                            c.as_c_str(),
                            OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
                            Mode::from_bits_truncate(0o644),
                        )
                        .map_err(errno)?;
                        drop(f);
                    }
                    open_path(cur.as_fd(), name, extra)?
                }
                Err(e) => return Err(e),
            };
            if last && is_symlink(next.as_fd())? {
                return Err(io::Error::from_raw_os_error(libc::ELOOP));
            }
            cur = next;
        }
        Ok(cur)
    }

    /// An `O_PATH` descriptor of the symbolic link `path` itself (its parent
    /// reached without following any link); `ELOOP` when it is no link.
    fn link_itself(&self, path: &[u8]) -> io::Result<OwnedFd> {
        let parts = components(path)?;
        let (name, parent) = parts.split_last().ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let dir = if parent.is_empty() {
            open_path(self.fd.as_fd(), b".", OFlag::O_DIRECTORY)?
        } else {
            self.walk_slow(parent, None)?
        };
        let fd = open_path(dir.as_fd(), name, OFlag::empty())?;
        if !is_symlink(fd.as_fd())? {
            return Err(io::Error::from_raw_os_error(libc::ELOOP));
        }
        Ok(fd)
    }

    /// Clone the tree at `src` and attach it at `dst`, read-only unless
    /// `writable`.
    fn bind_fd(&self, src: BorrowedFd<'_>, dst: BorrowedFd<'_>, writable: bool) -> io::Result<()> {
        let tree = sys::open_tree(
            src,
            c"",
            sys::OPEN_TREE_CLONE | sys::OPEN_TREE_CLOEXEC | libc::AT_EMPTY_PATH as u32 | sys::AT_RECURSIVE,
        )?;
        // nodev everywhere except on the device nodes the plan binds into
        // /dev on purpose (null, zero, tty, ...): those must stay usable.
        let mut set = sys::MOUNT_ATTR_NOSUID;
        if !is_device(src)? {
            set |= sys::MOUNT_ATTR_NODEV;
        }
        if !writable && !self.skip_readonly {
            set |= sys::MOUNT_ATTR_RDONLY;
        }
        sys::mount_setattr(tree.as_fd(), true, set, 0)?;
        sys::move_mount(tree.as_fd(), dst)
    }

    fn fresh_fs(&self, fstype: &CStr, opts: &[(&CStr, &CStr)], attrs: u64) -> io::Result<OwnedFd> {
        let ctx = sys::fsopen(fstype)?;
        for (k, v) in opts {
            sys::fsconfig_set(ctx.as_fd(), k, v)?;
        }
        sys::fs_create_mount(ctx.as_fd(), attrs)
    }

    fn mask(&self, dst: BorrowedFd<'_>) -> io::Result<()> {
        let tmpl = self.mask.as_ref().ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let name: &CStr = if is_dir(dst)? { c"d" } else { c"f" };
        let tree = sys::open_tree(tmpl.as_fd(), name, sys::OPEN_TREE_CLONE | sys::OPEN_TREE_CLOEXEC)?;
        sys::mount_setattr(
            tree.as_fd(),
            false,
            sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV | sys::MOUNT_ATTR_NOEXEC,
            0,
        )?;
        sys::move_mount(tree.as_fd(), dst)
    }

    fn readonly_again(&self, dst: BorrowedFd<'_>) -> io::Result<()> {
        if self.skip_readonly {
            return Ok(());
        }
        self.bind_fd(dst, dst, false)
    }

    fn apply(&mut self, op: &MountOp, src: Option<&Source>) -> io::Result<()> {
        match op {
            MountOp::Bind { dst, writable, .. } => match src {
                Some(Source::Path(src)) => {
                    let target = self.walk(dst, Some(is_dir(src.as_fd())?))?;
                    self.bind_fd(src.as_fd(), target.as_fd(), *writable)
                }
                Some(Source::Tree(tree)) => {
                    let target = self.walk(dst, Some(is_dir(tree.as_fd())?))?;
                    sys::move_mount(tree.as_fd(), target.as_fd())
                }
                None => Err(io::Error::from_raw_os_error(libc::EBADF)),
            },
            MountOp::Tmpfs { dst, mode, size } => {
                let target = self.walk(dst, Some(true))?;
                let mode = cstr(format!("{mode:o}").as_bytes())?;
                let size = cstr(size.to_string().as_bytes())?;
                let m = self.fresh_fs(
                    c"tmpfs",
                    &[(c"mode", &mode), (c"size", &size)],
                    sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV,
                )?;
                self.own_devs.push(fstat(m.as_fd()).map_err(errno)?.st_dev);
                sys::move_mount(m.as_fd(), target.as_fd())
            }
            MountOp::Proc { dst } => {
                let target = self.walk(dst, Some(true))?;
                let m = self.fresh_fs(
                    c"proc",
                    &[],
                    sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV | sys::MOUNT_ATTR_NOEXEC,
                )?;
                sys::move_mount(m.as_fd(), target.as_fd())?;
                let proc_root = open_path(self.fd.as_fd(), &dst[1..], OFlag::O_DIRECTORY)?;
                // Kernel knobs stay read-only. The command never runs as host
                // root (root callers are mapped to nobody), so the mode checks
                // of /proc/sys already refuse; this keeps a second barrier.
                for name in PROC_READONLY {
                    if let Ok(fd) = open_path(proc_root.as_fd(), name.as_bytes(), OFlag::empty()) {
                        if !self.skip_readonly {
                            self.bind_fd(fd.as_fd(), fd.as_fd(), false)?;
                        }
                    }
                }
                for name in PROC_MASKED {
                    if let Ok(fd) = open_path(proc_root.as_fd(), name.as_bytes(), OFlag::empty()) {
                        self.mask(fd.as_fd())?;
                    }
                }
                Ok(())
            }
            MountOp::Devpts { dst } => {
                let target = self.walk(dst, Some(true))?;
                let m = self.fresh_fs(
                    c"devpts",
                    &[(c"ptmxmode", c"0666"), (c"mode", c"0620")],
                    sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NOEXEC,
                )?;
                sys::move_mount(m.as_fd(), target.as_fd())
            }
            MountOp::Symlink { target, dst } => {
                let parts = components(dst)?;
                let (name, parent) = parts.split_last().ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
                let mut parent_path = Vec::new();
                for p in parent {
                    parent_path.push(b'/');
                    parent_path.extend_from_slice(p);
                }
                if parent_path.is_empty() {
                    parent_path.push(b'/');
                }
                let dir = if parent.is_empty() {
                    open_path(self.fd.as_fd(), b".", OFlag::O_DIRECTORY)?
                } else {
                    self.walk(&parent_path, Some(true))?
                };
                if !self.on_root_tmpfs(dir.as_fd())? {
                    return Err(io::Error::from_raw_os_error(libc::EXDEV));
                }
                // An O_PATH fd cannot be used with symlinkat; reopen the dir.
                let c_name = cstr(name)?;
                let c_target = cstr(target)?;
                let dirfd =
                    openat(dir.as_fd(), c".", OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())
                        .map_err(errno)?;
                nix::unistd::symlinkat(c_target.as_c_str(), dirfd.as_fd(), c_name.as_c_str()).map_err(errno)
            }
            MountOp::ReadOnly { dst, if_there } => {
                let target = match self.walk(dst, None) {
                    Ok(fd) => fd,
                    // Removed since the plan's walk (a git `tmp_obj_*`, a
                    // file being replaced): nothing left to keep.
                    Err(e) if *if_there && e.raw_os_error() == Some(libc::ENOENT) => return Ok(()),
                    // A hard-linked symbolic link (see the library's
                    // `sandbox::links`): the read-only bind goes over the
                    // link itself, never where it points. The walk to its
                    // parent still refuses every link on the way.
                    Err(e) if e.raw_os_error() == Some(libc::ELOOP) => self.link_itself(dst)?,
                    Err(e) => return Err(e),
                };
                self.readonly_again(target.as_fd())
            }
            MountOp::Pin { dst } => {
                let target = self.walk(dst, None)?;
                self.bind_fd(target.as_fd(), target.as_fd(), true)
            }
            MountOp::Mask { dst } => {
                let target = self.walk(dst, None)?;
                self.mask(target.as_fd())
            }
        }
    }
}

/// /proc entries that stay read-only (the kernel knobs).
const PROC_READONLY: &[&str] = &["sys", "sysrq-trigger", "irq", "bus", "fs"];
/// /proc entries hidden behind an empty mask (information leaks).
const PROC_MASKED: &[&str] = &[
    "kcore",
    "keys",
    "key-users",
    "timer_list",
    "sched_debug",
    "latency_stats",
    "acpi",
    "scsi",
    "kallsyms",
    "kpagecount",
    "kpageflags",
    "kpagecgroup",
    "config.gz",
];

/// The directory (on the host, in our private mount namespace) the new root
/// is attached to while it is built. Nothing is created there. One that lies
/// in a tree the plan binds is skipped: the bind clones its tree with every
/// mount below it, and would carry the half-built root along (a grant of
/// the host's `/tmp` would show the root tmpfs instead of `/tmp`).
const ATTACH_POINTS: &[&CStr] = &[c"/tmp", c"/mnt", c"/"];

/// Whether `point` is `src` or lies below it.
fn within(point: &[u8], src: &[u8]) -> bool {
    let src = src.strip_suffix(b"/").unwrap_or(src);
    point == src || src.is_empty() || (point.starts_with(src) && point.get(src.len()) == Some(&b'/'))
}

/// Build the whole sandbox root and pivot into it.
pub fn build_root(spec: &SpawnSpec, sources: &Sources) -> Result<(), Fail> {
    let skip_readonly = cfg!(debug_assertions) && spec.test_switches.skip_readonly;
    let bound: Vec<&[u8]> = spec
        .mounts
        .iter()
        .filter_map(|op| match op {
            MountOp::Bind { src, .. } => Some(src.as_slice()),
            _ => None,
        })
        .collect();
    let points: Vec<&CStr> =
        ATTACH_POINTS.iter().copied().filter(|p| !bound.iter().any(|src| within(p.to_bytes(), src))).collect();
    let mut root = begin_root(skip_readonly, &points)?;
    let all: Vec<usize> = (0..spec.mounts.len()).collect();
    root.apply_ops(&spec.mounts, &all, sources)?;
    finish_root(root)
}

/// `MakePrivate` and `MountRoot`: the root tmpfs, attached at the first of
/// `points` that works, with its mask template.
pub fn begin_root(skip_readonly: bool, points: &[&CStr]) -> Result<Root, Fail> {
    make_private()?;
    mount_root(skip_readonly, points).map_err(|e| Fail::io(Step::MountRoot, e))
}

/// Nothing we mount may propagate back to the host.
fn make_private() -> Result<(), Fail> {
    nix::mount::mount(
        None::<&str>,
        "/",
        None::<&str>,
        nix::mount::MsFlags::MS_REC | nix::mount::MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(|e| Fail::io(Step::MakePrivate, errno(e)))
}

/// [`begin_root`] for a pre-made sandbox, which pivots into its root before
/// its request comes ([`enter_root`]), so that the pivot and the old root's
/// detach (which waits for an RCU grace period) are off the request's
/// critical path. The request's bind sources are then opened in a detached
/// copy of the host's tree (`open_tree(OPEN_TREE_CLONE | AT_RECURSIVE)` of
/// `/`, made here, before the root tmpfs is stacked on it), returned with
/// the root. `None` when this kernel cannot clone a mount from a detached
/// tree (that came with Linux 6.15; tried once here on the copy itself):
/// the slot then pivots at the request, as a one-shot run does.
///
/// The copy is held by pid 1 alone while the slot waits (nothing runs in
/// it then; pid 1 is non-dumpable and holds capabilities the command will
/// not, so the kernel's ptrace checks keep its descriptors from the
/// command), and handed to the outer helper once the request's mounts are
/// made (`slot::pid1`): its last close frees its mounts, an RCU grace
/// period that must not fall on a command's start.
pub fn begin_root_keeping_host(skip_readonly: bool, points: &[&CStr]) -> Result<(Root, Option<OwnedFd>), Fail> {
    make_private()?;
    let host = (|| {
        let flags = sys::OPEN_TREE_CLONE | sys::OPEN_TREE_CLOEXEC | sys::AT_RECURSIVE;
        let empty = flags | libc::AT_EMPTY_PATH as u32;
        let slash = open_source(None, b"/").ok()?;
        let tree = sys::open_tree(slash.as_fd(), c"", empty).ok()?;
        let probe = sys::open_tree(tree.as_fd(), c"", empty).ok()?;
        drop(probe);
        Some(tree)
    })();
    let root = mount_root(skip_readonly, points).map_err(|e| Fail::io(Step::MountRoot, e))?;
    Ok((root, host))
}

impl Root {
    /// `Mount`: the operations of `mounts` at the indexes `which`, in that
    /// order; a failure names the operation's index in `mounts`.
    pub fn apply_ops(&mut self, mounts: &[MountOp], which: &[usize], sources: &Sources) -> Result<(), Fail> {
        for &i in which {
            let op = mounts.get(i).ok_or_else(|| Fail::errno(Step::Mount, libc::EINVAL).detail(i))?;
            self.apply(op, sources.0.get(i).and_then(Option::as_ref))
                .map_err(|e| Fail::io(Step::Mount, e).detail(i))?;
        }
        Ok(())
    }
}

/// The mask template removed, `PivotRoot`, `DetachOldRoot`, `RemountRoot`.
pub fn finish_root(root: Root) -> Result<(), Fail> {
    finish_mask_template(&root).map_err(|e| Fail::io(Step::MountRoot, e))?;
    enter_root(&root)?;
    seal_root(root)
}

/// `PivotRoot` and `DetachOldRoot`: from here on this process's mount
/// namespace holds the sandbox's root and nothing of the host's tree.
/// Mounts are still made under the root through its fd.
pub fn enter_root(root: &Root) -> Result<(), Fail> {
    nix::unistd::fchdir(root.fd.as_fd()).map_err(|e| Fail::io(Step::PivotRoot, errno(e)))?;
    nix::unistd::pivot_root(".", ".").map_err(|e| Fail::io(Step::PivotRoot, errno(e)))?;
    nix::mount::umount2(".", nix::mount::MntFlags::MNT_DETACH).map_err(|e| Fail::io(Step::DetachOldRoot, errno(e)))?;
    nix::unistd::chdir("/").map_err(|e| Fail::io(Step::DetachOldRoot, errno(e)))
}

/// After a slot's request mounts ([`enter_root`] done ahead): the mask
/// template removed, `RemountRoot`.
pub fn seal_entered_root(root: Root) -> Result<(), Fail> {
    finish_mask_template(&root).map_err(|e| Fail::io(Step::MountRoot, e))?;
    seal_root(root)
}

/// `RemountRoot`: the root tmpfs holds only mount points, so nothing may be
/// created there.
fn seal_root(root: Root) -> Result<(), Fail> {
    let slash = open_path(root.fd.as_fd(), b".", OFlag::O_DIRECTORY).map_err(|e| Fail::io(Step::RemountRoot, e))?;
    sys::mount_setattr(slash.as_fd(), false, sys::MOUNT_ATTR_RDONLY, 0).map_err(|e| Fail::io(Step::RemountRoot, e))?;
    Ok(())
}

const MASK_DIR: &[u8] = b".portcullis-mask";

fn mount_root(skip_readonly: bool, points: &[&CStr]) -> io::Result<Root> {
    let ctx = sys::fsopen(c"tmpfs")?;
    sys::fsconfig_set(ctx.as_fd(), c"mode", c"0755")?;
    sys::fsconfig_set(ctx.as_fd(), c"size", c"1m")?;
    let m = sys::fs_create_mount(ctx.as_fd(), sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV)?;
    let mut attached = Err(io::Error::from_raw_os_error(libc::ENOENT));
    for p in points {
        let at = match nix::fcntl::open(
            *p,
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(e) => {
                attached = Err(errno(e));
                continue;
            }
        };
        attached = sys::move_mount(m.as_fd(), at.as_fd());
        if attached.is_ok() {
            break;
        }
    }
    attached?;
    let dev = fstat(m.as_fd()).map_err(errno)?.st_dev;
    let mut root = Root { fd: m, own_devs: vec![dev], skip_readonly, mask: None };

    // A template for masks: an empty unreadable dir and file on the root
    // tmpfs. Masks are bind clones of them; the template is unlinked before
    // the command starts (the clones keep the inodes alive). Unlinking, not
    // unmounting, spares an RCU grace period per spawn.
    let tdir_path = [b"/", MASK_DIR].concat();
    drop(root.walk(&tdir_path, Some(true))?);
    let tdir = openat(
        root.fd.as_fd(),
        std::ffi::OsStr::from_bytes(MASK_DIR),
        OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno)?;
    mkdirat(tdir.as_fd(), c"d", Mode::empty()).map_err(errno)?;
    drop(
        openat(tdir.as_fd(), c"f", OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_WRONLY | OFlag::O_CLOEXEC, Mode::empty())
            .map_err(errno)?,
    );
    let tmpl = open_path(root.fd.as_fd(), MASK_DIR, OFlag::O_DIRECTORY)?;
    root.mask = Some(tmpl);
    Ok(root)
}

fn finish_mask_template(root: &Root) -> io::Result<()> {
    let name = std::ffi::OsStr::from_bytes(MASK_DIR);
    let dirfd = openat(root.fd.as_fd(), c".", OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(errno)?;
    let tdir = openat(dirfd.as_fd(), name, OFlag::O_DIRECTORY | OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(errno)?;
    nix::unistd::unlinkat(tdir.as_fd(), "f", nix::unistd::UnlinkatFlags::NoRemoveDir).map_err(errno)?;
    nix::unistd::unlinkat(tdir.as_fd(), "d", nix::unistd::UnlinkatFlags::RemoveDir).map_err(errno)?;
    nix::unistd::unlinkat(dirfd.as_fd(), name, nix::unistd::UnlinkatFlags::RemoveDir).map_err(errno)
}
