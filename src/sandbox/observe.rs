//! The refused-write report: which writes the kernel refused during a run.
//!
//! The command installs a second seccomp filter whose only non-`ALLOW` action
//! is `SECCOMP_RET_USER_NOTIF`, for the syscalls that write by path
//! (`portcullis_helper::observe`), and hands its listener to us over a
//! socket before it execs. An OS thread here, the run's own while it lasts
//! (kept idle for a later run afterwards), receives every notification,
//! reads the path from the command's memory, asks the kernel whether the
//! write is about to be refused, and **always** answers
//! `SECCOMP_USER_NOTIF_FLAG_CONTINUE`: the kernel then runs the syscall
//! itself, with every check it would make without us. The observer decides
//! nothing and can turn no refusal into a success; when it cannot tell (a
//! path it cannot read or resolve), it counts the call as `unresolved` and
//! lets it go on all the same.
//!
//! "Refused" mirrors the kernel's own rules. In the full sandbox: the mount
//! the write lands on is read-only (`fstatvfs` → `ST_RDONLY`), for the
//! object the kernel checks — the parent directory for a new entry (only if
//! the entry does not exist yet: `EEXIST` comes first), a removal (even of a
//! missing entry: `EROFS` comes first there) or a rename (both parents on one
//! mount: `EXDEV` comes first); the file itself for an open for writing or
//! truncating, a `truncate`, or a metadata change. Devices, FIFOs and sockets
//! opened for writing are not refused by a read-only mount, nor is an
//! `O_CREAT` open of an existing file without a write flag. In the
//! landlock-only mode there are no read-only mounts: a write is refused when
//! the real path of the checked object lies beneath none of the plan's
//! Landlock-writable paths.
//!
//! Paths are resolved through the command's own root (`/proc/PID/root`,
//! `RESOLVE_IN_ROOT`) or, for a relative path, beneath its working
//! directory or directory fd (`RESOLVE_BENEATH`, falling back to the
//! directory's path inside the root for a `..` above it or an absolute
//! link); never through a magic link. Reported paths are as the command
//! named them, made absolute in its view of the file system.

use std::ffi::{CString, OsStr};
use std::io::{self, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;
use portcullis_helper::observe::{At, Op, TAG_FAILED, TAG_LISTENER};
use serde::Serialize;

/// Most distinct paths kept in [`RefusedWrites::sample`].
pub const SAMPLE_CAP: usize = 20;

/// Longest path read from the command's memory (`PATH_MAX`, with its NUL).
const PATH_MAX: usize = 4096;

/// Whether the report was made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReportState {
    /// Every watched write of the run was seen.
    Observed,
    /// Switched off by the request (`report_refused_writes = false`).
    Off,
    /// Asked for, but not available on this host or for this run: see
    /// [`RefusedWrites::reason`]. The command ran unobserved.
    Unavailable,
}

/// The writes the kernel refused during a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RefusedWrites {
    /// Whether the report was made.
    pub state: ReportState,
    /// Why it is unavailable, when it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Refused write calls (exact for what was observed; a call that names
    /// two paths, a rename, counts once).
    pub count: u64,
    /// The first [`SAMPLE_CAP`] distinct paths of refused writes, in the
    /// order they were refused, as the command named them (absolute).
    pub sample: Vec<PathBuf>,
    /// Watched calls whose target could not be read or resolved; each was
    /// let through to the kernel all the same, and may have been refused.
    pub unresolved: u64,
}

impl RefusedWrites {
    /// The report of a run with the observer switched off.
    pub fn off() -> RefusedWrites {
        RefusedWrites { state: ReportState::Off, reason: None, count: 0, sample: Vec::new(), unresolved: 0 }
    }

    /// The report of a run the observer could not watch.
    pub fn unavailable(reason: impl Into<String>) -> RefusedWrites {
        RefusedWrites { reason: Some(reason.into()), state: ReportState::Unavailable, ..RefusedWrites::off() }
    }

    fn observed() -> RefusedWrites {
        RefusedWrites { state: ReportState::Observed, ..RefusedWrites::off() }
    }

    fn record(&mut self, paths: Vec<PathBuf>) {
        self.count += 1;
        for p in paths {
            if self.sample.len() < SAMPLE_CAP && !self.sample.contains(&p) {
                self.sample.push(p);
            }
        }
    }
}

/// How the observer decides "refused".
#[derive(Debug, Clone)]
pub(crate) enum Rules {
    /// By read-only mounts (the full sandbox).
    ReadOnlyMounts,
    /// By the plan's Landlock-writable paths (real host paths): the
    /// landlock-only mode.
    Landlock { writable: Vec<PathBuf> },
}

/// A running observer: a thread serving one run's listener.
pub(crate) struct Observer {
    /// Closing it tells the thread the run is over.
    stop: Option<OwnedFd>,
    done: tokio::sync::oneshot::Receiver<RefusedWrites>,
}

impl Observer {
    /// Start serving our end of the hand-over socket, on an idle observer
    /// thread if there is one, else on a new one.
    pub(crate) fn start(sock: OwnedFd, rules: Rules) -> io::Result<Observer> {
        #[cfg(test)]
        if tests::FAIL_START.swap(false, std::sync::atomic::Ordering::SeqCst) {
            return Err(io::Error::from_raw_os_error(libc::EAGAIN));
        }
        let (stop_r, stop_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)?;
        let (tx, done) = tokio::sync::oneshot::channel();
        hand_out(Job { sock, stop: stop_r, rules, tx })?;
        Ok(Observer { stop: Some(stop_w), done })
    }

    /// The run is over (every process of it is gone): answer what is still
    /// pending, stop, and return the report.
    pub(crate) async fn finish(mut self) -> RefusedWrites {
        drop(self.stop.take());
        match tokio::time::timeout(Duration::from_secs(5), &mut self.done).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => RefusedWrites::unavailable("the observer thread ended without a report"),
            Err(_) => RefusedWrites::unavailable("the observer thread did not finish within 5 s"),
        }
    }
}

/// One run for an observer thread: its socket, its stop pipe, its rules,
/// and where its report goes.
struct Job {
    sock: OwnedFd,
    stop: OwnedFd,
    rules: Rules,
    tx: tokio::sync::oneshot::Sender<RefusedWrites>,
}

/// Observer threads waiting for a run, at most [`MAX_IDLE`]: a thread
/// started for each run put its stack's mapping and a `clone` on the run's
/// critical path, and its exit after it.
static IDLE: Mutex<Vec<mpsc::Sender<Job>>> = Mutex::new(Vec::new());

/// Idle observer threads kept in a process (each a sleeping thread with no
/// descriptor open).
const MAX_IDLE: usize = 4;

fn idle() -> std::sync::MutexGuard<'static, Vec<mpsc::Sender<Job>>> {
    // A panic while the list was held leaves a list of senders: still usable.
    IDLE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Give `job` to an idle observer thread, or to a new one.
fn hand_out(mut job: Job) -> io::Result<()> {
    while let Some(thread) = idle().pop() {
        match thread.send(job) {
            Ok(()) => return Ok(()),
            // That thread is gone (it cannot be, but the job is not lost).
            Err(mpsc::SendError(j)) => job = j,
        }
    }
    std::thread::Builder::new().name("portcullis-observe".into()).spawn(move || {
        let (tx, rx) = mpsc::channel::<Job>();
        let mut next = Some(job);
        while let Some(job) = next.take() {
            run(job);
            {
                let mut list = idle();
                if list.len() >= MAX_IDLE {
                    return;
                }
                list.push(tx.clone());
            }
            next = rx.recv().ok();
        }
    })?;
    Ok(())
}

/// Serve one run and report: the report goes before the listener closes,
/// since the close can wait behind a kernel worker it wakes on this core
/// and the run's result waits for the report (a `perf` timeline showed
/// 0.7 ms). Every descriptor of the run is closed before the thread waits
/// for another.
fn run(job: Job) {
    let Job { sock, stop, rules, tx } = job;
    let (report, listener) = serve(&sock, &stop, &rules);
    let _ = tx.send(report);
    drop((listener, sock, stop));
}

/// Serve the run's listener until the run is over: the report, and the
/// listener for the caller to close once the report is sent.
fn serve(sock: &OwnedFd, stop: &OwnedFd, rules: &Rules) -> (RefusedWrites, Option<OwnedFd>) {
    let listener = match receive(sock, stop) {
        Ok(l) => l,
        Err(reason) => return (RefusedWrites::unavailable(reason), None),
    };
    sync_wake_up(&listener);
    let mut report = RefusedWrites::observed();
    let mut root: Option<OwnedFd> = None;
    loop {
        let (notified, hup, stopped) =
            wait(listener.as_fd(), stop.as_fd(), PollTimeout::NONE).unwrap_or((false, false, true));
        if notified {
            handle(&listener, rules, &mut root, &mut report);
            continue;
        }
        if hup || stopped {
            // Whatever is still queued is answered before the listener
            // closes (a closed listener fails pending calls with ENOSYS).
            while let Ok((true, _, _)) = wait(listener.as_fd(), stop.as_fd(), PollTimeout::ZERO) {
                handle(&listener, rules, &mut root, &mut report);
            }
            return (report, Some(listener));
        }
    }
}

/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (<linux/seccomp.h>, Linux 6.6).
const SYNC_WAKE_UP: u64 = 1;

/// Ask the kernel to hand each notification and its answer over on the CPU
/// that raised it (Linux 6.6): the stopped command and this thread then
/// switch directly instead of waking each other through the scheduler,
/// which on a small VM costs tens of microseconds per watched call (an idle
/// vCPU woken by an interrupt). Only the speed changes; an older kernel
/// (EINVAL) keeps the ordinary wake-up.
fn sync_wake_up(listener: &OwnedFd) {
    // SAFETY: SET_FLAGS takes its flags by value and touches no memory of
    // ours; a failure leaves the listener as it was.
    unsafe { libc::ioctl(listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_SET_FLAGS, SYNC_WAKE_UP) };
}

/// Poll the listener and the stop pipe: (notification pending, no process
/// left in the filter, run over).
fn wait(listener: BorrowedFd<'_>, stop: BorrowedFd<'_>, timeout: PollTimeout) -> io::Result<(bool, bool, bool)> {
    let mut fds = [PollFd::new(listener, PollFlags::POLLIN), PollFd::new(stop, PollFlags::POLLIN)];
    loop {
        match poll(&mut fds, timeout) {
            Ok(_) => break,
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    let l = fds[0].revents().unwrap_or(PollFlags::empty());
    let s = fds[1].revents().unwrap_or(PollFlags::empty());
    Ok((l.contains(PollFlags::POLLIN), l.intersects(PollFlags::POLLHUP | PollFlags::POLLERR), !s.is_empty()))
}

/// Wait for the command's hand-over: the listener, or why there is none.
fn receive(sock: &OwnedFd, stop: &OwnedFd) -> Result<OwnedFd, String> {
    let mut fds = [PollFd::new(sock.as_fd(), PollFlags::POLLIN), PollFd::new(stop.as_fd(), PollFlags::POLLIN)];
    loop {
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => break,
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(format!("waiting for the observer's listener failed: {e}")),
        }
    }
    if fds[0].revents().unwrap_or(PollFlags::empty()).is_empty() {
        return Err("the command never started, so there was nothing to observe".into());
    }
    let mut buf = [0u8; 8];
    let mut iov = [IoSliceMut::new(&mut buf)];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    // Close-on-exec at once: a stray copy in another process would keep
    // the listener alive with nobody answering it.
    let msg = recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)
        .map_err(|e| format!("receiving the observer's listener failed: {e}"))?;
    let mut got: Vec<OwnedFd> = Vec::new();
    for c in msg.cmsgs().map_err(|e| format!("receiving the observer's listener failed: {e}"))? {
        if let ControlMessageOwned::ScmRights(raw) = c {
            for fd in raw {
                // SAFETY: SCM_RIGHTS just installed this fd in our table.
                got.push(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    let n = msg.bytes;
    match (n, buf[0]) {
        (1, TAG_LISTENER) if got.len() == 1 => got.pop().ok_or_else(|| "no listener arrived".into()),
        (5, TAG_FAILED) => {
            let errno = i32::from_le_bytes([buf[1], buf[2], buf[3], buf[4]]);
            Err(install_failure(errno))
        }
        (0, _) => Err("the helper ended before the command started".into()),
        _ => Err("the helper sent a malformed observer hand-over".into()),
    }
}

/// Why the kernel refused to install the observer, and what it means.
fn install_failure(errno: i32) -> String {
    let e = io::Error::from_raw_os_error(errno);
    match errno {
        libc::EINVAL => format!("the kernel refused a seccomp filter with a listener ({e}): it lacks seccomp user notification (Linux 5.0; SECCOMP_USER_NOTIF_FLAG_CONTINUE needs 5.5)"),
        libc::EBUSY => format!("the kernel refused a second seccomp listener ({e}): a filter with a listener is already installed above this process (a supervising container runtime)"),
        libc::EPERM | libc::EACCES | libc::ENOSYS => format!("installing the observer's seccomp filter was refused ({e}): a seccomp profile around this process (a container's) forbids it"),
        _ => format!("installing the observer's seccomp filter failed: {e}"),
    }
}

/// Receive one notification, decide, and answer it: always CONTINUE.
fn handle(listener: &OwnedFd, rules: &Rules, root: &mut Option<OwnedFd>, report: &mut RefusedWrites) {
    // SAFETY: seccomp_notif is plain data; the kernel wants it zeroed.
    let mut n: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: RECV fills `n`, whose size the ioctl number encodes.
    if unsafe { libc::ioctl(listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_RECV, &mut n) } < 0 {
        // ENOENT: the caller went away (a signal, a kill) before we got it.
        return;
    }
    let verdict = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decide(&n, listener, rules, root)))
        .unwrap_or(Verdict::Unresolved);
    let resp =
        libc::seccomp_notif_resp { id: n.id, val: 0, error: 0, flags: libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32 };
    // SAFETY: SEND reads `resp`; ENOENT (the caller is gone) is fine.
    unsafe { libc::ioctl(listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_SEND, &resp) };
    match verdict {
        Verdict::Refused(paths) => report.record(paths),
        Verdict::Unresolved => report.unresolved += 1,
        Verdict::NotRefused | Verdict::Gone => {}
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// The kernel will refuse this write; the paths it names.
    Refused(Vec<PathBuf>),
    /// Not a write the kernel refuses (allowed, or failing for another
    /// reason: a missing directory, `EEXIST`, `EXDEV`).
    NotRefused,
    /// The target could not be read or resolved.
    Unresolved,
    /// The calling process left the call (killed or interrupted): the call
    /// does not happen.
    Gone,
}

/// A file a call names, with what was read from the calling process before
/// the `ID_VALID` check (its directory's `/proc` link is read only when
/// needed, and checked again: see [`Base`]).
struct Named {
    /// The path as given (empty with `null`).
    path: Vec<u8>,
    /// The path pointer was NULL.
    null: bool,
    /// The directory the path is relative to (`None` for an absolute path).
    base: Option<Base>,
}

struct Base {
    /// The directory (or, for `AT_EMPTY_PATH`/a null path, the file).
    fd: OwnedFd,
    /// The `/proc` link that shows its path inside the command's root
    /// (`/proc/PID/cwd`, `/proc/PID/fd/N`).
    link: String,
    /// That path, read only when needed (a refusal's sample, a `..` above
    /// the directory): most notifications are writes the kernel allows,
    /// and the link's read was a call more on each of their paths. It is
    /// read before the answer, while the caller waits in its call, and a
    /// verdict that read it is trusted only if `ID_VALID` still holds
    /// after it ([`decide`]).
    shown: std::cell::OnceCell<Option<Vec<u8>>>,
}

impl Base {
    fn new(fd: OwnedFd, link: String) -> Base {
        Base { fd, link, shown: std::cell::OnceCell::new() }
    }

    /// Its path inside the command's root, as `/proc` shows it.
    fn shown(&self) -> Option<&[u8]> {
        self.shown.get_or_init(|| std::fs::read_link(&self.link).ok().map(|p| p.into_os_string().into_vec())).as_deref()
    }
}

fn arg(n: &libc::seccomp_notif, i: u8) -> u64 {
    n.data.args.get(usize::from(i)).copied().unwrap_or(0)
}

fn decide(n: &libc::seccomp_notif, listener: &OwnedFd, rules: &Rules, root: &mut Option<OwnedFd>) -> Verdict {
    let Some(watched) = portcullis_helper::observe::lookup(n.data.nr) else { return Verdict::NotRefused };
    let pid = n.pid as libc::pid_t;
    let named = |a: At| read_named(pid, n, a);
    let files: Vec<io::Result<Named>> = match watched.op {
        Op::Open { file, .. } | Op::Create { file } | Op::Remove { file } | Op::Truncate { file } => vec![named(file)],
        Op::Meta { file, .. } => vec![named(file)],
        Op::Link { old, new } | Op::Rename { old, new } => vec![named(old), named(new)],
    };
    // Every process of the run shares one root: chroot, pivot_root and new
    // mount namespaces are refused by the main filter. It is kept only once
    // `ID_VALID` has shown that `pid` still named the caller: the root of a
    // process that took a recycled pid must not serve the rest of the run.
    let fresh = if root.is_none() { open_proc(pid, "root").ok() } else { None };
    // Only now is it known that `pid` still named the caller throughout.
    if !id_valid(listener, n.id) {
        return Verdict::Gone;
    }
    if fresh.is_some() {
        *root = fresh;
    }
    let Some(root) = root.as_ref() else { return Verdict::Unresolved };
    let mut got = Vec::with_capacity(files.len());
    for f in files {
        match f {
            Ok(f) => got.push(f),
            Err(e) if e.raw_os_error() == Some(libc::ENAMETOOLONG) => return Verdict::NotRefused,
            Err(_) => return Verdict::Unresolved,
        }
    }
    let ctx = Ctx { root: root.as_fd(), rules };
    let verdict = match ctx.judge(watched.op, n, &got) {
        Ok(v) => v,
        Err(_) => Verdict::Unresolved,
    };
    // A `/proc` link read after the first check: still the caller's only
    // if the call is still pending now.
    let read_late = got.iter().any(|f| f.base.as_ref().is_some_and(|b| b.shown.get().is_some()));
    if read_late && !id_valid(listener, n.id) {
        return Verdict::Gone;
    }
    verdict
}

fn id_valid(listener: &OwnedFd, id: u64) -> bool {
    // SAFETY: ID_VALID reads a u64; 0 means the notification is pending.
    unsafe { libc::ioctl(listener.as_raw_fd(), libc::SECCOMP_IOCTL_NOTIF_ID_VALID, &id) == 0 }
}

/// `openat` from the working directory, not `open`: musl follows an `open`
/// with `O_CLOEXEC` by an `F_SETFD` (for kernels before 2.6.23), a call
/// more on every notification's path.
fn open_proc(pid: libc::pid_t, what: &str) -> io::Result<OwnedFd> {
    let p = format!("/proc/{pid}/{what}");
    let fd = nix::fcntl::openat(
        nix::fcntl::AT_FDCWD,
        p.as_str(),
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    Ok(fd)
}

/// The file open on the process's fd `fd` (its path as `/proc` shows it
/// read when needed).
fn proc_fd(pid: libc::pid_t, fd: i32) -> io::Result<Base> {
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    let what = format!("fd/{fd}");
    let file = open_proc(pid, &what)?;
    Ok(Base::new(file, format!("/proc/{pid}/{what}")))
}

fn read_named(pid: libc::pid_t, n: &libc::seccomp_notif, a: At) -> io::Result<Named> {
    let ptr = arg(n, a.path);
    let (path, null) = if ptr == 0 { (Vec::new(), true) } else { (read_path(pid, ptr)?, false) };
    let dirfd = match a.dirfd {
        Some(i) => arg(n, i) as i32,
        None => libc::AT_FDCWD,
    };
    let base = if path.first() == Some(&b'/') {
        None
    } else {
        Some(if dirfd == libc::AT_FDCWD {
            Base::new(open_proc(pid, "cwd")?, format!("/proc/{pid}/cwd"))
        } else {
            proc_fd(pid, dirfd)?
        })
    };
    Ok(Named { path, null, base })
}

/// Read a NUL-terminated path from the process's memory, at most
/// `PATH_MAX` bytes, in pieces that never cross a 4 KiB boundary (so an
/// unmapped page after the string does not fail the read).
fn read_path(pid: libc::pid_t, addr: u64) -> io::Result<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = addr;
    // Most paths are short: read in pieces of at most 256 bytes into the
    // stack, not a zeroed page on the heap per notification.
    let mut buf = [0u8; 256];
    while out.len() < PATH_MAX {
        let room = 4096 - (at % 4096) as usize;
        let want = room.min(PATH_MAX - out.len()).min(buf.len());
        let remote = [RemoteIoVec { base: at as usize, len: want }];
        let got = process_vm_readv(Pid::from_raw(pid), &mut [IoSliceMut::new(&mut buf)], &remote)?;
        if got == 0 {
            return Err(io::Error::from_raw_os_error(libc::EFAULT));
        }
        if let Some(end) = buf[..got].iter().position(|b| *b == 0) {
            out.extend_from_slice(&buf[..end]);
            return Ok(out);
        }
        out.extend_from_slice(&buf[..got]);
        at += got as u64;
    }
    Err(io::Error::from_raw_os_error(libc::ENAMETOOLONG))
}

// <linux/openat2.h>
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_BENEATH: u64 = 0x08;
const RESOLVE_IN_ROOT: u64 = 0x10;

#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

fn openat2(dir: BorrowedFd<'_>, path: &[u8], flags: i32, resolve: u64) -> io::Result<OwnedFd> {
    let path = if path.is_empty() { &b"."[..] } else { path };
    let c = CString::new(path).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let how = OpenHow { flags: (flags | libc::O_PATH | libc::O_CLOEXEC) as u64, mode: 0, resolve };
    // SAFETY: `c` and `how` outlive the call; the kernel returns a new fd or -1.
    let r = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir.as_raw_fd(),
            c.as_ptr(),
            &how as *const OpenHow,
            std::mem::size_of::<OpenHow>(),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = RawFd::try_from(r).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: a fresh fd the kernel just returned.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn errno_of(e: &io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// Errors that make the call fail before any write check: not a refusal.
fn fails_first(e: &io::Error) -> bool {
    matches!(errno_of(e), libc::ENOENT | libc::ENOTDIR | libc::ELOOP | libc::ENAMETOOLONG | libc::EBADF)
}

/// A directory [`Ctx::parent`] found: opened for the call, or the call's
/// own base.
enum Dir<'f> {
    Opened(OwnedFd),
    Base(BorrowedFd<'f>),
}

impl AsFd for Dir<'_> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Dir::Opened(fd) => fd.as_fd(),
            Dir::Base(fd) => *fd,
        }
    }
}

struct Ctx<'a> {
    root: BorrowedFd<'a>,
    rules: &'a Rules,
}

/// The last component of a path and what comes before it (trailing slashes
/// dropped, as the kernel does for the final component).
fn split_last(path: &[u8]) -> (&[u8], &[u8]) {
    let mut end = path.len();
    while end > 1 && path[end - 1] == b'/' {
        end -= 1;
    }
    let p = &path[..end];
    match p.iter().rposition(|b| *b == b'/') {
        Some(0) => (&p[..1], &p[1..]),
        Some(i) => (&p[..i], &p[i + 1..]),
        None => (&b""[..], p),
    }
}

fn mode_of(fd: BorrowedFd<'_>) -> io::Result<u32> {
    Ok(nix::sys::stat::fstat(fd)?.st_mode & libc::S_IFMT)
}

fn is_special(kind: u32) -> bool {
    matches!(kind, libc::S_IFCHR | libc::S_IFBLK | libc::S_IFIFO | libc::S_IFSOCK)
}

impl Ctx<'_> {
    /// Open `path` (O_PATH) as the command would reach it from `base`.
    fn open(&self, f: &Named, path: &[u8], flags: i32) -> io::Result<OwnedFd> {
        self.open_from(f.base.as_ref(), path, flags)
    }

    /// Open `path` (O_PATH) as the command would reach it from `base` (the
    /// root for `None`).
    fn open_from(&self, base: Option<&Base>, path: &[u8], flags: i32) -> io::Result<OwnedFd> {
        let in_root = |p: &[u8]| openat2(self.root, p, flags, RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS);
        match base {
            None => in_root(path),
            Some(base) => match openat2(base.fd.as_fd(), path, flags, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) {
                // A `..` above the directory or an absolute symbolic link:
                // resolve from the directory's path inside the root.
                Err(e) if errno_of(&e) == libc::EXDEV => match base.shown() {
                    Some(dir) if dir.first() == Some(&b'/') => in_root(&[dir, b"/", path].concat()),
                    _ => Err(e),
                },
                r => r,
            },
        }
    }

    /// The path as the command named it, made absolute in its view.
    fn shown(&self, f: &Named) -> PathBuf {
        let raw: Vec<u8> = match &f.base {
            None => f.path.clone(),
            Some(b) => {
                let dir = b.shown().map_or_else(|| b"?".to_vec(), <[u8]>::to_vec);
                if f.path.is_empty() {
                    dir
                } else if dir.ends_with(b"/") {
                    [dir.as_slice(), &f.path].concat()
                } else {
                    [dir.as_slice(), b"/", &f.path].concat()
                }
            }
        };
        tidy(Path::new(OsStr::from_bytes(&raw)))
    }

    /// Whether a write to the object open on `fd` is refused.
    fn blocked(&self, fd: BorrowedFd<'_>) -> io::Result<bool> {
        match self.rules {
            Rules::ReadOnlyMounts => {
                let st = nix::sys::statvfs::fstatvfs(fd)?;
                Ok(st.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY))
            }
            Rules::Landlock { writable } => {
                let real = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()))?;
                Ok(!writable.iter().any(|w| real.starts_with(w)))
            }
        }
    }

    /// The directory the path's last component is in, and that component.
    /// A plain name's directory is the call's own (its working directory or
    /// directory fd), already open: only checked to be a directory (as the
    /// `O_DIRECTORY` open of `.` did), not opened again: an archive's files
    /// are mostly named so, and the second open was a third of the
    /// observer's own calls per created file (session 26).
    fn parent<'f>(&self, f: &'f Named) -> io::Result<(Dir<'f>, Vec<u8>)> {
        let (dir, name) = split_last(&f.path);
        if let (b"", Some(base)) = (dir, f.base.as_ref()) {
            if mode_of(base.fd.as_fd())? != libc::S_IFDIR {
                return Err(io::Error::from_raw_os_error(libc::ENOTDIR));
            }
            return Ok((Dir::Base(base.fd.as_fd()), name.to_vec()));
        }
        let dir_fd = self.open(f, dir, libc::O_DIRECTORY)?;
        Ok((Dir::Opened(dir_fd), name.to_vec()))
    }

    fn exists_in(&self, dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<bool> {
        match openat2(dir, name, libc::O_NOFOLLOW, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS) {
            Ok(_) => Ok(true),
            Err(e) if errno_of(&e) == libc::ENOENT => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn judge(&self, op: Op, n: &libc::seccomp_notif, files: &[Named]) -> io::Result<Verdict> {
        match self.judge_call(op, n, files) {
            // Resolved here, a path into the command's /proc stops where the
            // kernel, resolving for the command, goes on: at a magic link
            // (`/proc/2/fd/3`: ELOOP) or at `/proc/self`, which names the
            // resolver and so nothing for us (ENOENT). Such a write may
            // well be refused (`exec 3<f; echo >>/dev/fd/3`): unresolved.
            Err(e) if fails_first(&e) && files.iter().any(|f| self.via_proc(f.base.as_ref(), &f.path, 8)) => {
                Ok(Verdict::Unresolved)
            }
            Err(e) if fails_first(&e) => Ok(Verdict::NotRefused),
            r => r,
        }
    }

    /// Whether resolving `path` from `base` stops inside a procfs: the
    /// deepest prefix that resolves here (final component not followed) lies
    /// on a procfs, or is a symbolic link whose target, with the rest of
    /// the path, does (`/dev/fd/3` → `/proc/self/fd/3`; at most `depth`
    /// links). Only O_PATH opens, like every other resolution here.
    fn via_proc(&self, base: Option<&Base>, path: &[u8], depth: u8) -> bool {
        let base = if path.first() == Some(&b'/') { None } else { base };
        let mut p = path;
        loop {
            if let Ok(fd) = self.open_from(base, p, libc::O_NOFOLLOW) {
                if on_proc(fd.as_fd()) {
                    return true;
                }
                if depth == 0 || !matches!(mode_of(fd.as_fd()), Ok(libc::S_IFLNK)) {
                    return false;
                }
                let Ok(target) = nix::fcntl::readlinkat(fd.as_fd(), "") else { return false };
                let target = target.into_vec();
                let rest = &path[p.len()..];
                let (dir, _) = split_last(p);
                let next = if target.first() == Some(&b'/') || dir.is_empty() {
                    [target.as_slice(), rest].concat()
                } else {
                    [dir, b"/", target.as_slice(), rest].concat()
                };
                return self.via_proc(base, &next, depth - 1);
            }
            if p.is_empty() || p == b"/" {
                return false;
            }
            p = split_last(p).0;
        }
    }

    fn judge_call(&self, op: Op, n: &libc::seccomp_notif, files: &[Named]) -> io::Result<Verdict> {
        let refused = |v: bool, fs: &[&Named]| {
            if v {
                Verdict::Refused(fs.iter().map(|f| self.shown(f)).collect())
            } else {
                Verdict::NotRefused
            }
        };
        let landlock = matches!(self.rules, Rules::Landlock { .. });
        let [f, rest @ ..] = files else { return Ok(Verdict::NotRefused) };
        if f.null && !matches!(op, Op::Meta { .. }) {
            // A null path fails with EFAULT.
            return Ok(Verdict::NotRefused);
        }
        let empty_ok = |fl: Option<u8>| fl.is_some_and(|i| arg(n, i) as i32 & libc::AT_EMPTY_PATH != 0);
        let empty = |g: &Named| !g.null && g.path.is_empty();
        let allowed_empty = matches!(op, Op::Meta { flags, .. } if empty_ok(flags));
        if (empty(f) && !allowed_empty) || rest.iter().any(empty) {
            // An empty path fails with ENOENT.
            return Ok(Verdict::NotRefused);
        }
        match op {
            Op::Open { flags, .. } => {
                let flags = match flags {
                    Some(i) => arg(n, i) as u32 as i32,
                    None => libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
                };
                self.judge_open(f, flags)
            }
            Op::Create { .. } => self.judge_create(f),
            Op::Link { .. } => match rest.first() {
                Some(new) => {
                    self.open(f, &f.path, libc::O_NOFOLLOW)?;
                    self.judge_create(new)
                }
                None => Ok(Verdict::NotRefused),
            },
            Op::Remove { .. } => {
                let (dir, name) = self.parent(f)?;
                if matches!(name.as_slice(), b"" | b"." | b"..") {
                    return Ok(Verdict::NotRefused);
                }
                // Landlock checks the entry it removes, after the lookup.
                if landlock && !self.exists_in(dir.as_fd(), &name)? {
                    return Ok(Verdict::NotRefused);
                }
                Ok(refused(self.blocked(dir.as_fd())?, &[f]))
            }
            Op::Rename { .. } => {
                let Some(new) = rest.first() else { return Ok(Verdict::NotRefused) };
                let (od, oname) = self.parent(f)?;
                let (nd, nname) = self.parent(new)?;
                if mount_id(od.as_fd())? != mount_id(nd.as_fd())? {
                    return Ok(Verdict::NotRefused); // EXDEV
                }
                let normal = |n: &[u8]| !matches!(n, b"" | b"." | b"..");
                if !normal(&oname) || !normal(&nname) {
                    return Ok(Verdict::NotRefused);
                }
                let v = if landlock {
                    self.exists_in(od.as_fd(), &oname)? && (self.blocked(od.as_fd())? || self.blocked(nd.as_fd())?)
                } else {
                    self.blocked(od.as_fd())?
                };
                Ok(refused(v, &[f, new]))
            }
            Op::Meta { follow, flags, .. } => {
                // Landlock does not restrict metadata: in landlock-only mode
                // the main filter refuses these calls (never notified).
                if landlock {
                    return Ok(Verdict::NotRefused);
                }
                let fl = flags.map_or(0, |i| arg(n, i) as i32);
                let target = if f.null || (f.path.is_empty() && fl & libc::AT_EMPTY_PATH != 0) {
                    match &f.base {
                        Some(b) => b.fd.try_clone()?,
                        None => return Ok(Verdict::NotRefused),
                    }
                } else {
                    let nofollow = !follow || fl & libc::AT_SYMLINK_NOFOLLOW != 0;
                    self.open(f, &f.path, if nofollow { libc::O_NOFOLLOW } else { 0 })?
                };
                Ok(refused(self.blocked(target.as_fd())?, &[f]))
            }
            Op::Truncate { .. } => {
                let t = self.open(f, &f.path, 0)?;
                if mode_of(t.as_fd())? != libc::S_IFREG {
                    return Ok(Verdict::NotRefused); // EISDIR, EINVAL
                }
                Ok(refused(self.blocked(t.as_fd())?, &[f]))
            }
        }
    }

    fn judge_create(&self, f: &Named) -> io::Result<Verdict> {
        let (dir, name) = self.parent(f)?;
        if matches!(name.as_slice(), b"" | b"." | b"..") || !self.creates_refused(dir.as_fd(), &name)? {
            return Ok(Verdict::NotRefused); // EEXIST, or allowed
        }
        Ok(Verdict::Refused(vec![self.shown(f)]))
    }

    /// Whether creating `name` in `dir` is refused, the entry known not to
    /// be there only once `dir` is refused: an entry already there fails
    /// with EEXIST first, and so does a name in a procfs directory, whose
    /// lookup fails (ENOENT) before any write check.
    fn creates_refused(&self, dir: BorrowedFd<'_>, name: &[u8]) -> io::Result<bool> {
        Ok(self.blocked(dir)? && !on_proc(dir) && !self.exists_in(dir, name)?)
    }

    fn judge_open(&self, f: &Named, flags: i32) -> io::Result<Verdict> {
        let landlock = matches!(self.rules, Rules::Landlock { .. });
        let write = flags & libc::O_ACCMODE != libc::O_RDONLY;
        let (creat, excl, trunc) = (flags & libc::O_CREAT != 0, flags & libc::O_EXCL != 0, flags & libc::O_TRUNC != 0);
        let refused = |v: bool| if v { Verdict::Refused(vec![self.shown(f)]) } else { Verdict::NotRefused };
        // Opens the kernel fails (or makes harmless) before any write check
        // (`build_open_flags`, `open_last_lookups`; found in review, all
        // reported as refused before): `O_PATH` keeps none of the write
        // flags; `O_CREAT | O_DIRECTORY` is EINVAL (Linux 6.4; older
        // kernels went on in ways of their own, not judged here);
        // `O_TMPFILE` with `O_CREAT` or without a write mode is EINVAL; a
        // creating open of a name with a trailing `/` is EISDIR.
        if flags & libc::O_PATH != 0
            || (creat && flags & libc::O_DIRECTORY != 0 && flags & libc::O_TMPFILE != libc::O_TMPFILE)
            || (creat && f.path.ends_with(b"/"))
        {
            return Ok(Verdict::NotRefused);
        }
        if flags & libc::O_TMPFILE == libc::O_TMPFILE {
            if creat || !write {
                return Ok(Verdict::NotRefused);
            }
            // An unnamed file in the directory the path names.
            let dir = self.open(f, &f.path, libc::O_DIRECTORY)?;
            return Ok(refused(self.blocked(dir.as_fd())?));
        }
        if creat && excl {
            // An entry already there (a file, a link, a mount point) fails
            // with EEXIST first, so the verdict is the parent's: a writable
            // parent, as for most creations (an archive's files), needs no
            // lookup of the entry: the observer's cost per created file
            // 6.3 -> 4.8 us (session 23, `scripts/bench-refused-writes`).
            let (dir, name) = self.parent(f)?;
            if !matches!(name.as_slice(), b"" | b"." | b"..") {
                return Ok(refused(self.creates_refused(dir.as_fd(), &name)?));
            }
        }
        let nofollow = flags & libc::O_NOFOLLOW != 0 || (creat && excl);
        match self.open(f, &f.path, if nofollow { libc::O_NOFOLLOW } else { 0 }) {
            Ok(t) => {
                if creat && excl {
                    return Ok(Verdict::NotRefused); // EEXIST
                }
                let kind = mode_of(t.as_fd())?;
                if kind == libc::S_IFDIR || kind == libc::S_IFLNK {
                    return Ok(Verdict::NotRefused); // EISDIR, ELOOP
                }
                if is_special(kind) {
                    // A read-only mount refuses no device, FIFO or socket;
                    // Landlock checks them like files.
                    return Ok(refused(landlock && write && self.blocked(t.as_fd())?));
                }
                Ok(refused((write || trunc) && self.blocked(t.as_fd())?))
            }
            Err(e) if errno_of(&e) == libc::ENOENT && creat => {
                let (dir, name) = self.parent(f)?;
                if !nofollow && self.exists_in(dir.as_fd(), &name)? {
                    // A dangling symbolic link: the file would be made where
                    // it points, which is not resolved here.
                    return Err(io::Error::from_raw_os_error(libc::EAGAIN));
                }
                Ok(refused(self.creates_refused(dir.as_fd(), &name)?))
            }
            Err(e) => Err(e),
        }
    }
}

/// Whether the object open on `fd` lies on a procfs (`PROC_SUPER_MAGIC`).
fn on_proc(fd: BorrowedFd<'_>) -> bool {
    nix::sys::statfs::fstatfs(fd).is_ok_and(|s| s.filesystem_type() == nix::sys::statfs::PROC_SUPER_MAGIC)
}

/// The mount an fd lies on (`statx` `STATX_MNT_ID`).
fn mount_id(fd: BorrowedFd<'_>) -> io::Result<u64> {
    // SAFETY: statx is plain data, zeroed before the kernel fills it.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: an empty path with AT_EMPTY_PATH names `fd`; `st` outlives
    // the call.
    let r = unsafe { libc::statx(fd.as_raw_fd(), c"".as_ptr(), libc::AT_EMPTY_PATH, libc::STATX_MNT_ID, &mut st) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st.stx_mnt_id)
}

/// Drop `.` components and repeated slashes (never `..`: that depends on
/// links, and the path is shown as the command wrote it).
fn tidy(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        out.push(c.as_os_str());
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    out
}

/// The stage named when the observer's thread cannot be started once the
/// helper has its socket ([`Setup::spawned`]); what to do instead.
const THREAD_STAGE: &str = "starting the refused-write observer's thread (the run was stopped before its command; \
     --no-refused-writes or `report_refused_writes = false` runs without the report)";

/// The observer of one run, from the spec to the report.
pub(crate) enum Setup {
    /// Switched off, or could not be set up (the command runs unobserved).
    Without(RefusedWrites),
    /// The socket is made; `helper_end` goes to the helper on
    /// `OBSERVE_FD`, and the thread serving `ours` starts once the helper
    /// has it ([`Setup::spawned`]).
    Ready { ours: OwnedFd, rules: Rules, helper_end: OwnedFd },
    /// The thread serves the run.
    With { observer: Observer },
    /// Spent by a failed [`Setup::spawned`].
    Gone,
}

impl Setup {
    /// Start the observer when the spec asks for it. When it cannot be
    /// started the spec stays as planned: the helper gets no socket on
    /// `OBSERVE_FD`, installs no observer (`notify::start`), and the report
    /// says why it is unavailable.
    pub(crate) fn new(spec: &portcullis_helper::spec::SpawnSpec) -> Setup {
        if !spec.observe {
            return Setup::Without(RefusedWrites::off());
        }
        let rules = match spec.mode {
            portcullis_helper::spec::Mode::Full => Rules::ReadOnlyMounts,
            portcullis_helper::spec::Mode::LandlockOnly => Rules::Landlock {
                writable: spec
                    .landlock
                    .writable
                    .iter()
                    .chain(&spec.landlock.writable_entries)
                    .map(|b| PathBuf::from(OsStr::from_bytes(b)))
                    .collect(),
            },
        };
        let started = (|| -> io::Result<Setup> {
            let (ours, theirs) = nix::sys::socket::socketpair(
                nix::sys::socket::AddressFamily::Unix,
                nix::sys::socket::SockType::SeqPacket,
                None,
                nix::sys::socket::SockFlag::SOCK_CLOEXEC,
            )?;
            // Above every protocol fd, so the helper's dup2s clobber nothing.
            let theirs = {
                let t = crate::sys::dup_above(&theirs, 10)?;
                drop(theirs);
                t
            };
            Ok(Setup::Ready { ours, rules, helper_end: theirs })
        })();
        match started {
            Ok(s) => s,
            Err(e) => Setup::Without(RefusedWrites::unavailable(format!("the observer could not be started: {e}"))),
        }
    }

    /// The fd the helper gets on `OBSERVE_FD`, if any.
    pub(crate) fn helper_end(&self) -> Option<RawFd> {
        match self {
            Setup::Ready { helper_end, .. } => Some(helper_end.as_raw_fd()),
            _ => None,
        }
    }

    /// The helper holds its end now: close ours (or the end of the run
    /// would not be seen), and start serving the socket. The thread starts
    /// here rather than before the helper, where a one-shot run's first
    /// observer thread (a `clone` and its stack) was on the way to the
    /// helper's spawn; the helper's command hands its listener over a
    /// millisecond later at the soonest, and the socket holds it until
    /// then. A thread that cannot be started now is an error: the helper
    /// has the socket, and its command would install an observer nobody
    /// serves, so the caller stops the run before its command starts
    /// (`Io`, naming [`THREAD_STAGE`]).
    pub(crate) fn spawned(&mut self) -> Result<(), super::SandboxError> {
        match std::mem::replace(self, Setup::Gone) {
            Setup::Ready { ours, rules, helper_end } => {
                drop(helper_end);
                let observer = Observer::start(ours, rules)
                    .map_err(|source| super::SandboxError::Io { stage: THREAD_STAGE, source })?;
                *self = Setup::With { observer };
            }
            other => *self = other,
        }
        Ok(())
    }

    /// Every process of the run is gone: the report.
    pub(crate) async fn finish(self) -> RefusedWrites {
        match self {
            Setup::Without(r) => r,
            Setup::With { observer } => observer.finish().await,
            // Never handed to a helper, or the run was stopped.
            Setup::Ready { .. } | Setup::Gone => {
                RefusedWrites::unavailable("the observer was not started (the run was stopped before its command)")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_component() {
        assert_eq!(split_last(b"a/b/c"), (&b"a/b"[..], &b"c"[..]));
        assert_eq!(split_last(b"/c"), (&b"/"[..], &b"c"[..]));
        assert_eq!(split_last(b"c"), (&b""[..], &b"c"[..]));
        assert_eq!(split_last(b"a/dir//"), (&b"a"[..], &b"dir"[..]));
        assert_eq!(split_last(b"/"), (&b"/"[..], &b""[..]));
    }

    /// Makes the next [`Observer::start`] fail as a thread that cannot be
    /// made would (`EAGAIN`).
    pub(super) static FAIL_START: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

    /// The thread starts once the helper holds its end; when it cannot,
    /// `spawned` says so (the caller stops the run), our end is closed, so
    /// that the command's hand-over fails instead of leaving an observer
    /// nobody serves, and the report says the observer was not started.
    #[test]
    fn the_thread_starts_after_the_spawn_or_the_run_is_stopped() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| panic!("{e}"));
        let ready = || {
            let (ours, theirs) = nix::sys::socket::socketpair(
                nix::sys::socket::AddressFamily::Unix,
                nix::sys::socket::SockType::SeqPacket,
                None,
                nix::sys::socket::SockFlag::SOCK_CLOEXEC,
            )
            .unwrap_or_else(|e| panic!("{e}"));
            let helper_end = theirs.try_clone().unwrap_or_else(|e| panic!("{e}"));
            (Setup::Ready { ours, rules: Rules::ReadOnlyMounts, helper_end }, theirs)
        };
        let send =
            |fd: &OwnedFd| nix::sys::socket::send(fd.as_raw_fd(), b"x", nix::sys::socket::MsgFlags::MSG_NOSIGNAL);
        // Control: started, the thread serves and reports.
        let (mut setup, _theirs) = ready();
        assert!(setup.helper_end().is_some());
        setup.spawned().unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(setup, Setup::With { .. }) && setup.helper_end().is_none());
        // (No command handed a listener over: the thread's own report.)
        let report = rt.block_on(setup.finish());
        let not_started = |r: &RefusedWrites| r.reason.as_deref().is_some_and(|m| m.contains("was not started"));
        assert!(!not_started(&report), "{report:?}");
        // A thread that cannot be made.
        let (mut setup, theirs) = ready();
        FAIL_START.store(true, std::sync::atomic::Ordering::SeqCst);
        let e = setup.spawned().err().unwrap_or_else(|| panic!("spawned succeeded"));
        let super::super::SandboxError::Io { source: e, .. } = e else { panic!("{e}") };
        assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
        assert!(matches!(setup, Setup::Gone));
        assert_eq!(send(&theirs), Err(nix::errno::Errno::EPIPE), "our end is still open");
        let report = rt.block_on(setup.finish());
        assert_eq!(report.state, RefusedWrites::unavailable("").state);
        assert!(not_started(&report), "{report:?}");
    }

    #[test]
    fn sample_is_capped_and_distinct_but_count_is_exact() {
        let mut r = RefusedWrites::observed();
        for i in 0..50 {
            r.record(vec![PathBuf::from(format!("/w/{}", i % 30))]);
        }
        assert_eq!(r.count, 50);
        assert_eq!(r.sample.len(), SAMPLE_CAP);
        assert_eq!(r.sample[0], PathBuf::from("/w/0"));
    }

    #[test]
    fn tidy_keeps_dotdot() {
        assert_eq!(tidy(Path::new("/a/./b//c/../d")), PathBuf::from("/a/b/c/../d"));
    }
}
