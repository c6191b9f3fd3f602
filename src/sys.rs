//! The few raw calls the library needs: a sealed memfd for the spec and
//! moving fds above the protocol numbers, and the pipe, socket and epoll
//! calls of the stdin relay.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

/// A memfd holding `data`, positioned at its start.
pub fn memfd_with(name: &std::ffi::CStr, data: &[u8]) -> io::Result<OwnedFd> {
    // SAFETY: a valid C string name and flags.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the fd was just returned by the kernel and is ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut file = std::fs::File::from(fd);
    io::Write::write_all(&mut file, data)?;
    io::Seek::seek(&mut file, io::SeekFrom::Start(0))?;
    let fd = OwnedFd::from(file);
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: F_ADD_SEALS on a memfd we own.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// The whole of a small file (a `/proc` or cgroup pseudo-file, read at
/// every run): one `openat`, reads to the end, one `close`. `std::fs` makes
/// three calls more (musl's `open` sets close-on-exec again with `fcntl`,
/// and `read_to_end` asks `fstat` and `lseek` for a size a pseudo-file
/// does not have).
pub fn read_proc_file(path: &std::path::Path) -> io::Result<Vec<u8>> {
    read_proc_file_in(None, path)
}

/// [`read_proc_file`], `path` looked up beneath `dir` when given (a
/// cgroup's own files, by its directory's descriptor: one name to look up
/// instead of the whole path through the cgroup file system).
pub fn read_proc_file_in(dir: Option<std::os::fd::BorrowedFd<'_>>, path: &std::path::Path) -> io::Result<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let c =
        std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let at = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: a valid C string and flags, on an open directory (or the
    // working directory); the fd returned is checked.
    let fd = unsafe { libc::openat(at, c.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC | libc::O_NOCTTY) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the fd was just returned by the kernel and is ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    read_whole(&fd, 16 * 1024, false)
}

/// The whole of an open pseudo-file, read again from offset 0 with
/// `pread` (a cgroup's `cgroup.procs` lists its processes afresh each time
/// it is read from its start).
pub fn read_from_start(fd: &OwnedFd) -> io::Result<Vec<u8>> {
    read_whole(fd, 4 * 1024, true)
}

/// Read `fd` to its end into room for `room` bytes (grown as needed): with
/// `read` from where it is, or with `pread` from offset 0 (`from_start`).
fn read_whole(fd: &OwnedFd, room: usize, from_start: bool) -> io::Result<Vec<u8>> {
    let mut buf: Vec<u8> = Vec::with_capacity(room);
    loop {
        if buf.len() == buf.capacity() {
            buf.reserve(buf.capacity());
        }
        let at = libc::off_t::try_from(buf.len()).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        let spare = buf.spare_capacity_mut();
        // SAFETY: reading into the vector's spare capacity, at most its
        // length, from an fd we own.
        let n = unsafe {
            match from_start {
                true => libc::pread(fd.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len(), at),
                false => libc::read(fd.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len()),
            }
        };
        match usize::try_from(n) {
            Ok(0) => return Ok(buf),
            // SAFETY: the kernel initialised `n` bytes of the spare
            // capacity, which `n` does not exceed.
            Ok(n) => unsafe { buf.set_len(buf.len() + n) },
            Err(_) => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}

/// Duplicate `fd` to a number at or above `min`, close-on-exec.
///
/// The raw system call: musl's `fcntl` follows every `F_DUPFD_CLOEXEC` with
/// an `F_SETFD` for kernels older than 2.6.24, a second call on each run's
/// path for every descriptor moved up.
pub fn dup_above(fd: &OwnedFd, min: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on an open fd returns a new fd we own (or -1).
    let r = unsafe { libc::syscall(libc::SYS_fcntl, fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let r = RawFd::try_from(r).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: r is a fresh fd.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

/// Set O_NONBLOCK on an fd (for tokio's pipe reader).
pub fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: F_GETFL/F_SETFL on an open fd.
    unsafe {
        let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        if fl < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The Landlock ABI the kernel offers (0: none), asked once per process
/// (the kernel's answer cannot change while it runs; every plan asks).
pub fn landlock_abi() -> u32 {
    static ABI: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *ABI.get_or_init(|| {
        // SAFETY: the version query takes a NULL attr, size 0 and flag 1.
        let r =
            unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<libc::c_void>(), 0usize, 1u32) };
        u32::try_from(r).unwrap_or(0)
    })
}

/// Whether the kernel accepts x32 syscalls (getpid with the x32 bit set).
pub fn x32_enabled() -> bool {
    if !cfg!(target_arch = "x86_64") {
        return false;
    }
    // SAFETY: getpid has no arguments and no side effects; with x32 disabled
    // the kernel answers ENOSYS.
    let r = unsafe { libc::syscall(libc::SYS_getpid | 0x4000_0000) };
    r >= 0
}

/// `renameat2(dir, from, dir, to, RENAME_NOREPLACE)`: rename within one
/// directory held by `dir`, never replacing an existing `to`. (nix offers
/// it on glibc only; the musl build needs the raw call.)
pub fn rename_noreplace(dir: &OwnedFd, from: &std::ffi::CStr, to: &std::ffi::CStr) -> io::Result<()> {
    rename_noreplace_at(dir, from, dir, to)
}

/// `renameat2(from_dir, from, to_dir, to, RENAME_NOREPLACE)`.
pub fn rename_noreplace_at(
    from_dir: &OwnedFd,
    from: &std::ffi::CStr,
    to_dir: &OwnedFd,
    to: &std::ffi::CStr,
) -> io::Result<()> {
    const RENAME_NOREPLACE: libc::c_uint = 1;
    // SAFETY: valid directory fds and two NUL-terminated names that live
    // for the call; the kernel reads nothing else.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            from_dir.as_raw_fd(),
            from.as_ptr(),
            to_dir.as_raw_fd(),
            to.as_ptr(),
            RENAME_NOREPLACE,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn cvt(r: libc::c_long) -> io::Result<usize> {
    usize::try_from(r).map_err(|_| io::Error::last_os_error())
}

/// Bytes waiting to be read on a pipe or a stream socket (`FIONREAD`).
pub fn fionread(fd: BorrowedFd<'_>) -> io::Result<usize> {
    let mut n: libc::c_int = 0;
    // SAFETY: FIONREAD writes one int through the pointer, which is valid
    // for the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), libc::FIONREAD, &mut n) };
    cvt(r.into())?;
    Ok(usize::try_from(n).unwrap_or(0))
}

/// `tee(2)`, non-blocking: duplicate up to `len` bytes from the head of the
/// pipe `from` onto the pipe `to` without consuming them. `Ok(0)`: `from`
/// is empty and has no writers; `EAGAIN`: `from` is empty or `to` is full.
pub fn tee(from: BorrowedFd<'_>, to: BorrowedFd<'_>, len: usize) -> io::Result<usize> {
    // SAFETY: a plain syscall on two open fds; no memory is passed.
    let r = unsafe { libc::tee(from.as_raw_fd(), to.as_raw_fd(), len, libc::SPLICE_F_NONBLOCK) };
    cvt(r.try_into().unwrap_or(-1))
}

/// `splice(2)`, non-blocking, between a pipe and a pipe or file, at the
/// current positions: moves up to `len` bytes.
pub fn splice(from: BorrowedFd<'_>, to: BorrowedFd<'_>, len: usize) -> io::Result<usize> {
    // SAFETY: a plain syscall on two open fds; NULL offsets mean the file
    // positions.
    let r = unsafe {
        libc::splice(
            from.as_raw_fd(),
            std::ptr::null_mut(),
            to.as_raw_fd(),
            std::ptr::null_mut(),
            len,
            libc::SPLICE_F_NONBLOCK | libc::SPLICE_F_MOVE,
        )
    };
    cvt(r.try_into().unwrap_or(-1))
}

/// `recv(2)` with `flags` (`MSG_PEEK`, `MSG_DONTWAIT`) into `buf`.
pub fn recv(fd: BorrowedFd<'_>, buf: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
    // SAFETY: buf is valid for writes of buf.len() bytes for the call.
    let r = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), flags) };
    cvt(r.try_into().unwrap_or(-1))
}

/// The capacity of a pipe in bytes (`F_GETPIPE_SZ`).
pub fn pipe_size(fd: BorrowedFd<'_>) -> io::Result<usize> {
    // SAFETY: F_GETPIPE_SZ on an open fd only reports.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETPIPE_SZ) }.into())
}

/// Set a pipe's capacity (`F_SETPIPE_SZ`); returns the capacity set.
pub fn set_pipe_size(fd: BorrowedFd<'_>, size: usize) -> io::Result<usize> {
    let size = libc::c_int::try_from(size).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: F_SETPIPE_SZ on an open fd with an int argument.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, size) }.into())
}

/// The socket's type (`SO_TYPE`: `SOCK_STREAM`, `SOCK_DGRAM`, ...).
pub fn socket_type(fd: BorrowedFd<'_>) -> io::Result<libc::c_int> {
    let mut ty: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: SO_TYPE writes one int; ty and len are valid for the call.
    let r =
        unsafe { libc::getsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_TYPE, (&raw mut ty).cast(), &mut len) };
    cvt(r.into())?;
    Ok(ty)
}

/// The poll events pending on `fd` now (a zero-timeout `poll`).
pub fn poll_now(fd: BorrowedFd<'_>, events: libc::c_short) -> io::Result<libc::c_short> {
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events, revents: 0 };
    // SAFETY: one valid pollfd, timeout 0.
    cvt(unsafe { libc::poll(&mut p, 1, 0) }.into())?;
    Ok(p.revents)
}

/// A small epoll set: fds registered with a token, waited on without a
/// timeout.
pub struct Epoll(OwnedFd);

impl Epoll {
    /// A new, close-on-exec epoll instance.
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: epoll_create1 with a valid flag returns a new fd.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        cvt(fd.into())?;
        // SAFETY: fd is a fresh fd we own.
        Ok(Epoll(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Watch `fd` for `events` (`EPOLLIN | EPOLLET`, ...), reported as `token`.
    pub fn add(&self, fd: BorrowedFd<'_>, events: libc::c_int, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event { events: events as u32, u64: token };
        // SAFETY: a valid epoll fd, an open fd and an event the kernel copies.
        let r = unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_ADD, fd.as_raw_fd(), &mut ev) };
        cvt(r.into()).map(drop)
    }

    /// Stop watching `fd`.
    pub fn delete(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        // SAFETY: as in `add`; the event argument may be NULL for DEL.
        let r =
            unsafe { libc::epoll_ctl(self.0.as_raw_fd(), libc::EPOLL_CTL_DEL, fd.as_raw_fd(), std::ptr::null_mut()) };
        cvt(r.into()).map(drop)
    }

    /// Wait for at least one event; returns the tokens seen (`EINTR` retried).
    pub fn wait(&self) -> io::Result<Vec<u64>> {
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 8];
        loop {
            // SAFETY: evs is valid for 8 events for the call.
            let r = unsafe { libc::epoll_wait(self.0.as_raw_fd(), evs.as_mut_ptr(), 8, -1) };
            match cvt(r.into()) {
                Ok(n) => return Ok(evs[..n.min(8)].iter().map(|e| e.u64).collect()),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// Ask for a `SIGIO` to the calling thread whenever any process reads the
/// pipe whose write end is `fd` (`O_ASYNC` with an owner thread: since
/// Linux 5.16 a pipe signals its async writers on every read). Call
/// [`sigio_fd`] first, in the same thread, so the signal is blocked there
/// and only ever queued, never delivered; no other thread sees it.
pub fn sigio_on_reads(fd: BorrowedFd<'_>) -> io::Result<()> {
    // <asm-generic/fcntl.h> (the libc crate lacks them): F_SETOWN_EX and
    // struct f_owner_ex with F_OWNER_TID.
    const F_SETOWN_EX: libc::c_int = 15;
    const F_OWNER_TID: libc::c_int = 0;
    #[repr(C)]
    struct FOwnerEx {
        kind: libc::c_int,
        pid: libc::pid_t,
    }
    // SAFETY: gettid has no arguments.
    let tid = unsafe { libc::syscall(libc::SYS_gettid) };
    let owner = FOwnerEx { kind: F_OWNER_TID, pid: libc::pid_t::try_from(tid).unwrap_or(0) };
    // SAFETY: F_SETOWN_EX reads one f_owner_ex, valid for the call.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), F_SETOWN_EX, &owner) }.into())?;
    // SAFETY: F_GETFL/F_SETFL on an open fd.
    let fl = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    cvt(fl.into())?;
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_ASYNC) }.into()).map(drop)
}

/// Block `SIGIO` in the calling thread (only) and return a non-blocking
/// signalfd that reports it.
pub fn sigio_fd() -> io::Result<OwnedFd> {
    // SAFETY: a zeroed sigset is valid storage for sigemptyset; the set and
    // the NULL old set are valid for the calls.
    let r = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGIO);
        let e = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if e != 0 {
            return Err(io::Error::from_raw_os_error(e));
        }
        libc::signalfd(-1, &set, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK)
    };
    cvt(r.into())?;
    // SAFETY: r is a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

/// Read and drop everything queued on a non-blocking fd (a signalfd).
pub fn drain(fd: BorrowedFd<'_>) {
    let mut buf = [0u8; 1024];
    loop {
        // SAFETY: buf is valid for writes of its length for the call.
        let r = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if r <= 0 {
            return;
        }
    }
}

/// `struct xattr_args` of `<linux/xattr.h>` (`XATTR_ARGS_SIZE_VER0`).
#[repr(C)]
struct XattrArgs {
    value: u64,
    size: u32,
    flags: u32,
}

/// The size of the xattr `xattr` of `name` in `dir` itself (a symbolic
/// link is not followed), with `getxattrat(2)` (Linux 6.13; not yet in
/// libc): one lookup of one name, where `lgetxattr` resolves the whole path
/// again. `ENOSYS` on older kernels.
pub fn xattr_size_at(dir: BorrowedFd<'_>, name: &std::ffi::CStr, xattr: &std::ffi::CStr) -> io::Result<usize> {
    const SYS_GETXATTRAT: libc::c_long = 464;
    // A null value with size 0 asks only for the value's size.
    let args = XattrArgs { value: 0, size: 0, flags: 0 };
    // SAFETY: the strings are NUL-terminated and `args` is a valid
    // `xattr_args` of the size passed; all live across the call, and the
    // kernel writes nothing (no value buffer).
    let r = unsafe {
        libc::syscall(
            SYS_GETXATTRAT,
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW as libc::c_uint,
            xattr.as_ptr(),
            &args as *const XattrArgs,
            std::mem::size_of::<XattrArgs>(),
        )
    };
    cvt(r)
}

/// Fill `buf` from the kernel's random pool (`getrandom(2)`, blocking only
/// until the pool is first initialised). Falls back to the clock and pid,
/// mixed through SHA-256, where the call is refused (an old seccomp
/// profile): ids stay unique, the genesis of an audit log stays unguessable
/// only with the real call.
pub fn random(buf: &mut [u8]) {
    let mut filled = 0;
    while filled < buf.len() {
        let rest = &mut buf[filled..];
        // SAFETY: the pointer and length describe `rest`, which we own.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n > 0 {
            filled += n as usize;
            continue;
        }
        if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        use sha2::{Digest, Sha256};
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
        let mut h = Sha256::new();
        h.update(now.as_nanos().to_le_bytes());
        h.update(std::process::id().to_le_bytes());
        h.update((buf.as_ptr() as usize).to_le_bytes());
        let d = h.finalize();
        for (i, b) in buf[filled..].iter_mut().enumerate() {
            *b = d[i % d.len()];
        }
        return;
    }
}

/// The mount `fd` lies on, by its unique id (`statx` `STATX_MNT_ID_UNIQUE`,
/// Linux 6.8: never reused while the system runs), and the device and
/// inode number of the file `fd` names; `None` where the kernel does not
/// give the unique id.
pub fn unique_mount_of(fd: BorrowedFd<'_>) -> Option<(u64, u64, u64)> {
    let st = statx_mount(Some(fd), c"", libc::AT_EMPTY_PATH, libc::STATX_INO)?;
    (st.stx_mask & libc::STATX_INO != 0)
        .then(|| (st.stx_mnt_id, libc::makedev(st.stx_dev_major, st.stx_dev_minor), st.stx_ino))
}

/// The mount `path` (relative to `dirfd`, or the working directory for
/// `None`), looked up with `flags` (`AT_SYMLINK_NOFOLLOW`, `AT_EMPTY_PATH`,
/// ...), lies on, by its unique id, and the device of the file it names;
/// `None` where the kernel does not give the unique id.
pub fn unique_mount_at(dirfd: Option<BorrowedFd<'_>>, path: &std::ffi::CStr, flags: i32) -> Option<(u64, u64)> {
    let st = statx_mount(dirfd, path, flags, 0)?;
    Some((st.stx_mnt_id, libc::makedev(st.stx_dev_major, st.stx_dev_minor)))
}

/// `statx` asking for the unique mount id and `more`; `None` when the call
/// fails or the kernel gives no unique id.
fn statx_mount(dirfd: Option<BorrowedFd<'_>>, path: &std::ffi::CStr, flags: i32, more: u32) -> Option<libc::statx> {
    let dirfd = dirfd.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: statx is plain data, zeroed before the kernel fills it.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is NUL-terminated (an empty one with AT_EMPTY_PATH
    // names `dirfd`), `dirfd` is open or AT_FDCWD; `st` outlives the call.
    let r = unsafe { libc::statx(dirfd, path.as_ptr(), flags, libc::STATX_MNT_ID_UNIQUE | more, &mut st) };
    (r >= 0 && st.stx_mask & libc::STATX_MNT_ID_UNIQUE != 0).then_some(st)
}

/// `CLOCK_REALTIME` less `CLOCK_MONOTONIC`, in nanoseconds: it falls when
/// the wall clock is stepped back.
pub fn realtime_offset_ns() -> i128 {
    let read = |clock| {
        // SAFETY: timespec is plain data, filled by the call.
        let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
        // SAFETY: `ts` outlives the call; both clocks exist on Linux.
        unsafe { libc::clock_gettime(clock, &mut ts) };
        i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec)
    };
    read(libc::CLOCK_REALTIME) - read(libc::CLOCK_MONOTONIC)
}
