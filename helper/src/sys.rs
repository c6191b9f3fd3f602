//! Thin wrappers over the raw syscalls nix does not cover: `clone3` (and the
//! `clone` fallback), the
//! new mount API, `openat2`, `close_range`, `pidfd_send_signal` and the
//! Landlock ABI probe. Each turns `-1/errno` into `io::Result`; every other
//! module of the helper is free of `unsafe` for these calls.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use portcullis_helper::mount_api::{cvt, owned};

// The new mount API's calls and constants both sides use.
pub use portcullis_helper::mount_api::{
    mount_setattr, open_tree, openat2, AT_RECURSIVE, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NOSUID,
    MOUNT_ATTR_RDONLY, OPEN_TREE_CLOEXEC, OPEN_TREE_CLONE, RESOLVE_IN_ROOT, RESOLVE_NO_MAGICLINKS, RESOLVE_NO_SYMLINKS,
};

// <linux/mount.h>
pub const MOVE_MOUNT_F_EMPTY_PATH: u32 = 0x4;
pub const MOVE_MOUNT_T_EMPTY_PATH: u32 = 0x40;
pub const FSOPEN_CLOEXEC: u32 = 1;
pub const FSMOUNT_CLOEXEC: u32 = 1;
pub const FSCONFIG_SET_STRING: u32 = 1;
pub const FSCONFIG_CMD_CREATE: u32 = 6;
// <linux/sched.h>
pub const CLONE_PIDFD: u64 = 0x1000;
pub const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args` from `<linux/sched.h>` (CLONE_ARGS_SIZE_VER2).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

/// What `clone3` returned.
pub enum Forked {
    /// In the child.
    Child,
    /// In the parent: the child's pid and a pidfd for it.
    Parent { pid: libc::pid_t, pidfd: OwnedFd },
}

/// `clone3` without a new stack (fork semantics) with `flags`, a pidfd and,
/// when given, `CLONE_INTO_CGROUP`.
///
/// Sound only in a single-threaded process: the child continues on a copy of
/// the caller's memory, as after `fork`. The helper never starts threads.
pub fn clone3(flags: u64, cgroup: Option<BorrowedFd<'_>>) -> io::Result<Forked> {
    clone3_raw(flags, cgroup, libc::SIGCHLD as u64)
}

/// [`clone3`] with `CLONE_PARENT`: the child is a sibling of this process,
/// its parent's child, with this process's exit signal (`clone3` takes none
/// with `CLONE_PARENT`). The zygote clones a slot's pid 1 with it.
///
/// Sound only in a single-threaded process, like [`clone3`].
pub fn clone3_sibling(flags: u64, cgroup: Option<BorrowedFd<'_>>) -> io::Result<Forked> {
    clone3_raw(flags | libc::CLONE_PARENT as u64, cgroup, 0)
}

fn clone3_raw(flags: u64, cgroup: Option<BorrowedFd<'_>>, exit_signal: u64) -> io::Result<Forked> {
    let mut pidfd: libc::c_int = -1;
    let mut args = CloneArgs {
        flags: flags | CLONE_PIDFD,
        pidfd: std::ptr::addr_of_mut!(pidfd) as u64,
        exit_signal,
        ..CloneArgs::default()
    };
    if let Some(cg) = cgroup {
        args.flags |= CLONE_INTO_CGROUP;
        args.cgroup = cg.as_raw_fd() as u64;
    }
    // SAFETY: `args` is a valid clone_args of the size passed; no stack is
    // given, so the child runs on a copy-on-write copy of this (single-
    // threaded) process, like fork(2).
    let r = cvt(unsafe {
        libc::syscall(libc::SYS_clone3, std::ptr::addr_of_mut!(args), std::mem::size_of::<CloneArgs>())
    })?;
    forked(r, pidfd)
}

/// What a fork-like clone returned: the child, or the parent holding the
/// child's pid and the pidfd `CLONE_PIDFD` stored.
fn forked(r: libc::c_long, pidfd: libc::c_int) -> io::Result<Forked> {
    if r == 0 {
        return Ok(Forked::Child);
    }
    let pid = libc::pid_t::try_from(r).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
    // SAFETY: CLONE_PIDFD stored a fresh pidfd that we now own (the call
    // succeeded in the parent).
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd) };
    Ok(Forked::Parent { pid, pidfd })
}

/// `clone(2)` without a new stack (fork semantics) with `flags`, a pidfd and
/// `SIGCHLD`: the fallback where `clone3` answers `ENOSYS` (a container's
/// default seccomp profile). It has no `CLONE_INTO_CGROUP`; the caller moves
/// the child into its cgroup before letting it go on ([`join_cgroup`]).
///
/// Sound only in a single-threaded process, like [`clone3`].
pub fn clone_legacy(flags: u64) -> io::Result<Forked> {
    clone_raw(flags | libc::SIGCHLD as u64)
}

/// `clone(2)` with `CLONE_PARENT` without a new stack (fork semantics) and
/// a pidfd: the child is a sibling of this process, its parent's child
/// (`portcullis-helper --zygote`'s helpers are the library's own children,
/// as if it had spawned them), with namespace `flags` (a slot's pid 1 where
/// `clone3` answers `ENOSYS`; else [`clone3_sibling`]). Its exit signal is
/// this process's own (`SIGCHLD`).
///
/// Sound only in a single-threaded process, like [`clone3`].
pub fn clone_sibling(flags: u64) -> io::Result<Forked> {
    clone_raw(flags | libc::CLONE_PARENT as u64)
}

/// The `clone(2)` of [`clone_legacy`] and [`clone_sibling`]: `flags` (with
/// the exit signal in its low byte) and `CLONE_PIDFD`, no new stack.
fn clone_raw(flags: u64) -> io::Result<Forked> {
    let mut pidfd: libc::c_int = -1;
    let flags = flags | CLONE_PIDFD;
    // SAFETY: a NULL stack gives fork semantics (the child runs on a copy-on-
    // write copy of this single-threaded process). With CLONE_PIDFD the
    // kernel stores the pidfd through the third argument (parent_tid on
    // x86_64 and on aarch64 alike), which points at a live c_int; the child
    // and tls arguments are unused without CLONE_CHILD_SETTID/CLONE_SETTLS.
    let r = cvt(unsafe {
        libc::syscall(
            libc::SYS_clone,
            flags as libc::c_ulong,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::addr_of_mut!(pidfd),
            std::ptr::null_mut::<libc::c_int>(),
            0 as libc::c_ulong,
        )
    })?;
    forked(r, pidfd)
}

/// Move the process `pid` into the cgroup whose directory is `cgroup`, by
/// writing its pid to `cgroup.procs` (what `CLONE_INTO_CGROUP` does at birth).
pub fn join_cgroup(cgroup: BorrowedFd<'_>, pid: libc::pid_t) -> io::Result<()> {
    let fd = openat2(cgroup.as_raw_fd(), c"cgroup.procs", libc::O_WRONLY | libc::O_CLOEXEC, RESOLVE_NO_SYMLINKS)?;
    let text = pid.to_string();
    let n = nix::unistd::write(&fd, text.as_bytes()).map_err(|e| io::Error::from_raw_os_error(e as i32))?;
    if n != text.len() {
        return Err(io::Error::from_raw_os_error(libc::EIO));
    }
    Ok(())
}

/// `PR_SET_SECUREBITS` (needs CAP_SETPCAP).
pub fn set_securebits(bits: libc::c_ulong) -> io::Result<()> {
    // SAFETY: a plain prctl with integer arguments.
    let r = unsafe {
        libc::prctl(libc::PR_SET_SECUREBITS, bits, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong)
    };
    cvt(r as libc::c_long).map(drop)
}

/// `PR_GET_SECUREBITS`.
pub fn securebits() -> io::Result<libc::c_ulong> {
    // SAFETY: a plain prctl with integer arguments.
    let r = unsafe {
        libc::prctl(
            libc::PR_GET_SECUREBITS,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    cvt(r as libc::c_long).map(|v| v as libc::c_ulong)
}

/// Whether the bounding set is empty: `PR_CAPBSET_READ` answers 0 for every
/// capability number until `EINVAL` (no such capability).
pub fn bounding_set_empty() -> io::Result<bool> {
    for cap in 0..=255 as libc::c_ulong {
        // SAFETY: a plain prctl with integer arguments.
        let r = unsafe {
            libc::prctl(libc::PR_CAPBSET_READ, cap, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong)
        };
        match r {
            0 => {}
            r if r > 0 => return Ok(false),
            _ => {
                let e = io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINVAL) && cap > 0 {
                    return Ok(true);
                }
                return Err(e);
            }
        }
    }
    Err(io::Error::from_raw_os_error(libc::E2BIG))
}

/// `pidfd_send_signal(pidfd, sig, NULL, 0)`.
pub fn pidfd_send_signal(pidfd: BorrowedFd<'_>, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: plain syscall on a borrowed, open pidfd; NULL siginfo is allowed.
    cvt(unsafe {
        libc::syscall(libc::SYS_pidfd_send_signal, pidfd.as_raw_fd(), sig, std::ptr::null::<libc::siginfo_t>(), 0)
    })
    .map(drop)
}

/// `move_mount(from, "", to, "", F_EMPTY_PATH|T_EMPTY_PATH)`: attach the
/// mount `from` on top of the path `to` refers to.
pub fn move_mount(from: BorrowedFd<'_>, to: BorrowedFd<'_>) -> io::Result<()> {
    let empty = c"";
    // SAFETY: both fds are open and the paths are valid empty C strings.
    cvt(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            from.as_raw_fd(),
            empty.as_ptr(),
            to.as_raw_fd(),
            empty.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    })
    .map(drop)
}

/// `fsopen(name, FSOPEN_CLOEXEC)`.
pub fn fsopen(name: &CStr) -> io::Result<OwnedFd> {
    // SAFETY: `name` is a valid C string.
    owned(unsafe { libc::syscall(libc::SYS_fsopen, name.as_ptr(), FSOPEN_CLOEXEC) })
}

/// `fsconfig(fd, FSCONFIG_SET_STRING, key, value, 0)`.
pub fn fsconfig_set(fd: BorrowedFd<'_>, key: &CStr, value: &CStr) -> io::Result<()> {
    // SAFETY: valid C strings and an open fs context fd.
    cvt(unsafe {
        libc::syscall(libc::SYS_fsconfig, fd.as_raw_fd(), FSCONFIG_SET_STRING, key.as_ptr(), value.as_ptr(), 0)
    })
    .map(drop)
}

/// `fsconfig(fd, FSCONFIG_CMD_CREATE)` then `fsmount(fd, CLOEXEC, attrs)`.
pub fn fs_create_mount(fd: BorrowedFd<'_>, attrs: u64) -> io::Result<OwnedFd> {
    // SAFETY: an open fs context fd; NULL key/value are what CMD_CREATE takes.
    cvt(unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fd.as_raw_fd(),
            FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_char>(),
            0,
        )
    })?;
    // SAFETY: an open, created fs context fd.
    owned(unsafe { libc::syscall(libc::SYS_fsmount, fd.as_raw_fd(), FSMOUNT_CLOEXEC, attrs) })
}

/// `close_range(first, ~0, flags)`: close (or, with `CLOSE_RANGE_CLOEXEC`,
/// mark close-on-exec) every fd from `first` up.
pub fn close_range_from(first: u32, flags: u32) -> io::Result<()> {
    close_range(first, u32::MAX, flags)
}

/// `close_range(first, last, flags)`; nothing when `first > last`. The
/// caller holds no OwnedFd in the range.
pub fn close_range(first: u32, last: u32, flags: u32) -> io::Result<()> {
    if first > last {
        return Ok(());
    }
    // SAFETY: closing fds this process does not use any more is sound: the
    // caller holds no OwnedFd in [first, last].
    cvt(unsafe { libc::syscall(libc::SYS_close_range, first, last, flags) }).map(drop)
}

/// `fcntl(F_DUPFD_CLOEXEC)`: a close-on-exec copy of `fd` at or above `min`.
pub fn dup_above(fd: RawFd, min: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on a descriptor of ours returns a new one we
    // own, or -1.
    let r = cvt(unsafe { libc::syscall(libc::SYS_fcntl, fd, libc::F_DUPFD_CLOEXEC, min) })?;
    let r = RawFd::try_from(r).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: a fresh descriptor owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

/// The Landlock ABI version the kernel offers (0: none).
pub fn landlock_abi() -> u32 {
    const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
    // SAFETY: the version query takes a NULL attr and size 0.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(r).unwrap_or(0)
}

/// Bring the loopback interface up (`SIOCGIFFLAGS`/`SIOCSIFFLAGS` on `lo`).
pub fn loopback_up() -> io::Result<()> {
    // SAFETY: a plain socket(2) call.
    let sock = owned(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) as libc::c_long })?;
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(b"lo\0") {
        *d = *s as libc::c_char;
    }
    // SAFETY: a valid ifreq naming "lo" on an open socket.
    cvt(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS as libc::Ioctl, &mut ifr) as libc::c_long })?;
    // SAFETY: reading the flags member the kernel just filled in.
    let flags = unsafe { ifr.ifr_ifru.ifru_flags };
    ifr.ifr_ifru.ifru_flags = flags | libc::IFF_UP as libc::c_short;
    // SAFETY: as above.
    cvt(unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS as libc::Ioctl, &ifr) as libc::c_long }).map(drop)
}

/// Drop every capability from the bounding set: `PR_CAPBSET_DROP` for each
/// number from 0 until the kernel answers `EINVAL` (no such capability), so
/// capabilities newer than this code are dropped too. Needs CAP_SETPCAP.
pub fn clear_bounding_set() -> io::Result<()> {
    // Linux has 41 capabilities (0..=40) as of 6.18; the bound only keeps a
    // kernel that never says EINVAL from looping forever.
    for cap in 0..=255 as libc::c_ulong {
        // SAFETY: a plain prctl with integer arguments.
        let r = unsafe {
            libc::prctl(libc::PR_CAPBSET_DROP, cap, 0 as libc::c_ulong, 0 as libc::c_ulong, 0 as libc::c_ulong)
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINVAL) && cap > 0 {
                return Ok(());
            }
            return Err(e);
        }
    }
    Err(io::Error::from_raw_os_error(libc::E2BIG))
}

/// Clear the ambient set (`PR_CAP_AMBIENT_CLEAR_ALL`).
pub fn clear_ambient_set() -> io::Result<()> {
    // SAFETY: a plain prctl with integer arguments.
    let r = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    cvt(r as libc::c_long).map(drop)
}

/// `struct __user_cap_header_struct` of <linux/capability.h>.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct` of <linux/capability.h>.
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `_LINUX_CAPABILITY_VERSION_3`: two `CapData`, 64 capability bits.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Empty the effective, permitted and inheritable sets of this thread in one
/// `capset` (dropping capabilities is always allowed).
pub fn capset_none() -> io::Result<()> {
    let mut header = CapHeader { version: CAPABILITY_VERSION_3, pid: 0 };
    let data = [CapData { effective: 0, permitted: 0, inheritable: 0 }; 2];
    // SAFETY: capset reads a valid header and two data structs (version 3),
    // all of which outlive the call.
    let r = unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut CapHeader, data.as_ptr()) };
    cvt(r).map(drop)
}

/// Put every signal a process may catch or ignore back to its default
/// disposition (an ignored one survives `execve`; this program, being Rust,
/// ignores SIGPIPE), but `keep`. Signals the kernel refuses to change
/// (EINVAL: none but SIGKILL and SIGSTOP, skipped here) are left as they
/// are.
pub fn default_signal_dispositions(keep: Option<libc::c_int>) -> io::Result<()> {
    for sig in 1..=libc::SIGRTMAX() {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP || Some(sig) == keep {
            continue;
        }
        match default_signal_disposition(sig) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {}
            r => r?,
        }
    }
    Ok(())
}

/// Put one signal's disposition back to its default. The C library
/// refuses its own reserved signals (32–34) with EINVAL, yet a caller may
/// have left them ignored (glibc's `posix_spawn` ignores its two in the
/// child, and an ignored signal survives `execve`): those are set with the
/// raw `rt_sigaction` call.
pub fn default_signal_disposition(sig: libc::c_int) -> io::Result<()> {
    // SAFETY: SIG_DFL installs no handler; the old disposition is not read.
    let r = unsafe { libc::signal(sig, libc::SIG_DFL) };
    if r != libc::SIG_ERR {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::EINVAL) {
        return Err(e);
    }
    raw_default_disposition(sig)
}

/// The kernel's `struct sigaction` (x86-64, aarch64): handler, flags,
/// restorer, mask.
#[repr(C)]
struct KernelSigaction {
    handler: usize,
    flags: u64,
    restorer: usize,
    mask: u64,
}

/// `rt_sigaction(sig, {SIG_DFL}, NULL, 8)`, past the C library.
fn raw_default_disposition(sig: libc::c_int) -> io::Result<()> {
    let act = KernelSigaction { handler: libc::SIG_DFL, flags: 0, restorer: 0, mask: 0 };
    // SAFETY: `act` is a valid kernel sigaction of the size the kernel
    // expects for an 8-byte mask; SIG_DFL runs no code of ours, so no
    // restorer is needed; the old action is not read (NULL).
    cvt(unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            sig,
            std::ptr::addr_of!(act),
            std::ptr::null_mut::<KernelSigaction>(),
            std::mem::size_of::<u64>(),
        )
    })
    .map(drop)
}

/// `execve(path, argv, envp)`; returns only on failure.
pub fn execve(path: &CStr, argv: &[*const libc::c_char], envp: &[*const libc::c_char]) -> io::Error {
    // SAFETY: `argv` and `envp` are NULL-terminated arrays of pointers to C
    // strings that outlive this call (built by the caller before forking).
    unsafe { libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    io::Error::last_os_error()
}

/// `_exit(code)`: leave without running atexit handlers or flushing stdio
/// buffers shared with the parent.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit is always safe to call.
    unsafe { libc::_exit(code) }
}

/// Adopt an inherited fd number as owned.
///
/// # Safety
/// `fd` must be open and owned by nobody else in this process.
pub unsafe fn adopt(fd: RawFd) -> OwnedFd {
    // SAFETY: guaranteed by the caller.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Whether `fd` is an open descriptor of this process.
pub fn fd_is_open(fd: RawFd) -> bool {
    // SAFETY: F_GETFD on any number is harmless; EBADF means not open.
    unsafe { libc::fcntl(fd, libc::F_GETFD) != -1 }
}

/// `dup2(fd, target)`: `target` becomes a copy of `fd` (not close-on-exec;
/// the command marks every descriptor above 2 close-on-exec before exec).
pub fn dup_onto(fd: BorrowedFd<'_>, target: RawFd) -> io::Result<()> {
    // SAFETY: dup2 on a descriptor we hold; `target` is a protocol fd number
    // or stdout/stderr, which nothing in this process holds as an OwnedFd.
    let r = unsafe { libc::dup2(fd.as_raw_fd(), target) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
