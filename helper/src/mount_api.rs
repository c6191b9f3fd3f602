//! The new mount API calls both sides make, and the idmapped trees of a
//! root caller's binds: the helper's outer half makes them for a one-shot
//! run; for a pre-made sandbox the library makes them itself, through the
//! slot's user namespace, and sends them with the request (so that the
//! request goes straight to the slot's command process). One function, so
//! both make exactly the same trees.
//!
//! Each wrapper turns `-1/errno` into `io::Result`. No threads, no async:
//! this crate stays usable by the single-threaded helper.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use crate::spec::MountOp;

// <linux/mount.h>
pub const OPEN_TREE_CLONE: u32 = 1;
pub const OPEN_TREE_CLOEXEC: u32 = libc::O_CLOEXEC as u32;
pub const MOUNT_ATTR_RDONLY: u64 = 0x1;
pub const MOUNT_ATTR_NOSUID: u64 = 0x2;
pub const MOUNT_ATTR_NODEV: u64 = 0x4;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x8;
pub const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
pub const AT_RECURSIVE: u32 = 0x8000;
// <linux/openat2.h>
pub const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
pub const RESOLVE_NO_SYMLINKS: u64 = 0x04;
pub const RESOLVE_IN_ROOT: u64 = 0x10;

/// `-1/errno` of a raw syscall as an `io::Error` (the helper binary's own
/// wrappers use it too).
pub fn cvt(r: libc::c_long) -> io::Result<libc::c_long> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// A raw syscall's new descriptor, owned.
pub fn owned(r: libc::c_long) -> io::Result<OwnedFd> {
    let fd = RawFd::try_from(cvt(r)?).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: the kernel just returned this fd to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `open_tree(dirfd, path, flags)`.
pub fn open_tree(dirfd: BorrowedFd<'_>, path: &CStr, flags: u32) -> io::Result<OwnedFd> {
    // SAFETY: `path` is a valid NUL-terminated string and `dirfd` is open.
    owned(unsafe { libc::syscall(libc::SYS_open_tree, dirfd.as_raw_fd(), path.as_ptr(), flags) })
}

/// `struct mount_attr` from `<linux/mount.h>` (MOUNT_ATTR_SIZE_VER0).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `mount_setattr(fd, "", AT_EMPTY_PATH[|AT_RECURSIVE], {set, clr})`.
pub fn mount_setattr(fd: BorrowedFd<'_>, recursive: bool, set: u64, clr: u64) -> io::Result<()> {
    mount_setattr_raw(fd, recursive, MountAttr { attr_set: set, attr_clr: clr, propagation: 0, userns_fd: 0 })
}

/// `mount_setattr` with `MOUNT_ATTR_IDMAP` through the user namespace `userns`.
pub fn mount_setattr_idmap(fd: BorrowedFd<'_>, recursive: bool, set: u64, userns: BorrowedFd<'_>) -> io::Result<()> {
    let userns_fd = u64::try_from(userns.as_raw_fd()).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    mount_setattr_raw(
        fd,
        recursive,
        MountAttr { attr_set: set | MOUNT_ATTR_IDMAP, attr_clr: 0, propagation: 0, userns_fd },
    )
}

fn mount_setattr_raw(fd: BorrowedFd<'_>, recursive: bool, mut attr: MountAttr) -> io::Result<()> {
    let flags = libc::AT_EMPTY_PATH as u32 | if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: `attr` is a valid mount_attr of the size passed; fd is open.
    cvt(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            fd.as_raw_fd(),
            c"".as_ptr(),
            flags,
            std::ptr::addr_of_mut!(attr),
            std::mem::size_of::<MountAttr>(),
        )
    })
    .map(drop)
}

/// `struct open_how` from `<linux/openat2.h>`.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// `openat2(dirfd, path, {flags, 0, resolve})`.
pub fn openat2(dirfd: RawFd, path: &CStr, flags: i32, resolve: u64) -> io::Result<OwnedFd> {
    let mut how = OpenHow { flags: flags as u64, mode: 0, resolve };
    // SAFETY: `how` is a valid open_how of the size passed, `path` a C string.
    owned(unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dirfd,
            path.as_ptr(),
            std::ptr::addr_of_mut!(how),
            std::mem::size_of::<OpenHow>(),
        )
    })
}

/// A bind source on the host, as both sides open it: `O_PATH`, no symlink
/// followed (the plan resolved the path; a symlink swapped in since is
/// refused with `ELOOP`), no magic link.
pub fn open_source_on_host(src: &[u8]) -> io::Result<OwnedFd> {
    let p = CString::new(src).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    openat2(libc::AT_FDCWD, &p, libc::O_PATH | libc::O_CLOEXEC, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
}

/// Root callers: clone each `idmap` bind of `mounts` on the host side and
/// idmap it through `userns`, whose map sends host root to the command's
/// host id; one entry per mount (`None` for the others). Must run in the
/// caller's mount namespace, with host root's CAP_SYS_ADMIN (only the
/// filesystem's owner namespace may idmap). A failure names the index of
/// the mount.
pub fn idmapped_trees(
    mounts: &[MountOp],
    skip_readonly: bool,
    userns: BorrowedFd<'_>,
) -> Result<Vec<Option<OwnedFd>>, (usize, io::Error)> {
    let mut out = Vec::with_capacity(mounts.len());
    for (i, op) in mounts.iter().enumerate() {
        out.push(match op {
            MountOp::Bind { src, writable, idmap: true, .. } => {
                let tree = (|| {
                    let fd = open_source_on_host(src)?;
                    let tree = open_tree(
                        fd.as_fd(),
                        c"",
                        OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | libc::AT_EMPTY_PATH as u32 | AT_RECURSIVE,
                    )?;
                    let mut set = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
                    if !*writable && !skip_readonly {
                        set |= MOUNT_ATTR_RDONLY;
                    }
                    mount_setattr_idmap(tree.as_fd(), false, set, userns)?;
                    mount_setattr(tree.as_fd(), true, set, 0)?;
                    Ok::<_, io::Error>(tree)
                })()
                .map_err(|e| (i, e))?;
                Some(tree)
            }
            _ => None,
        });
    }
    Ok(out)
}

/// Where a path lies: its mount (`stx_mnt_id`), device and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// The mount's id (`STATX_MNT_ID`: ids are the kernel's, not a namespace's).
    pub mount: u64,
    /// The device, as `(major, minor)`.
    pub dev: (u32, u32),
    /// The inode.
    pub ino: u64,
}

/// `statx(dirfd, path, AT_SYMLINK_NOFOLLOW, STATX_MNT_ID | STATX_INO)`:
/// where `path` lies, its last component not followed; `None` for the
/// working directory (`AT_FDCWD`). `EOPNOTSUPP` from a kernel that does not
/// fill in the mount id (before 5.8).
pub fn place_at(dirfd: Option<BorrowedFd<'_>>, path: &CStr) -> io::Result<Place> {
    let dirfd = dirfd.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: statx is plain data, zeroed before the kernel fills it.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated, `dirfd` is open (or AT_FDCWD), `st`
    // is writable and outlives the call.
    let r = unsafe {
        libc::statx(
            dirfd,
            path.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW | libc::AT_NO_AUTOMOUNT,
            libc::STATX_MNT_ID | libc::STATX_INO,
            &mut st,
        )
    };
    cvt(libc::c_long::from(r))?;
    if st.stx_mask & libc::STATX_MNT_ID == 0 {
        return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
    }
    Ok(Place { mount: st.stx_mnt_id, dev: (st.stx_dev_major, st.stx_dev_minor), ino: st.stx_ino })
}
