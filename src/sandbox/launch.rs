//! Starting the helper: `posix_spawn` (a vfork-style clone, no page-table
//! copy of this possibly large, multithreaded process) with its protocol
//! fds placed by file actions, so no code of ours runs between fork and
//! exec. The child is awaited through a pidfd, so a recycled pid can never
//! be signalled or reaped by mistake.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use tokio::io::unix::AsyncFd;

/// The helper process, its pidfd and its output pipes.
pub struct Helper {
    pid: libc::pid_t,
    pidfd: AsyncFd<OwnedFd>,
    /// Read end of the helper's (and the command's) stdout.
    pub stdout: Option<OwnedFd>,
    /// Read end of the helper's (and the command's) stderr.
    pub stderr: Option<OwnedFd>,
    reaped: bool,
}

/// How the helper exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Exit code.
    Code(i32),
    /// Killed by a signal.
    Signal(i32),
}

impl std::fmt::Display for Exit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Exit::Code(c) => write!(f, "exit code {c}"),
            Exit::Signal(s) => write!(f, "killed by signal {s}"),
        }
    }
}

fn check(r: libc::c_int) -> io::Result<()> {
    // posix_spawn functions return the error number instead of setting errno.
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(r))
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from)
}

/// RAII for the posix_spawn attribute objects.
struct Spawn {
    actions: libc::posix_spawn_file_actions_t,
    attr: libc::posix_spawnattr_t,
}

impl Spawn {
    fn new() -> io::Result<Box<Spawn>> {
        // SAFETY: zeroed storage is what the init functions expect to fill in.
        let mut s: Box<Spawn> = Box::new(unsafe { std::mem::zeroed() });
        // SAFETY: initialising freshly allocated objects.
        check(unsafe { libc::posix_spawn_file_actions_init(&mut s.actions) })?;
        // SAFETY: as above.
        if let Err(e) = check(unsafe { libc::posix_spawnattr_init(&mut s.attr) }) {
            // SAFETY: actions was initialised above.
            unsafe { libc::posix_spawn_file_actions_destroy(&mut s.actions) };
            return Err(e);
        }
        Ok(s)
    }
}

impl Drop for Spawn {
    fn drop(&mut self) {
        // SAFETY: both were initialised in `new`.
        unsafe {
            libc::posix_spawn_file_actions_destroy(&mut self.actions);
            libc::posix_spawnattr_destroy(&mut self.attr);
        }
    }
}

/// Start `helper` with `fds` placed at their target numbers (`(source,
/// target)`, sources above every target), an empty environment, its own
/// process group, default signal dispositions, and stdin from `stdin` (or
/// `/dev/null`).
pub fn spawn(helper: &Path, fds: &[(RawFd, RawFd)], stdin: Option<RawFd>) -> io::Result<Helper> {
    spawn_args(helper, &[], fds, stdin)
}

/// [`spawn`], with these arguments after argv[0] (a mode of the helper,
/// such as `--make-network`).
pub fn spawn_args(helper: &Path, args: &[&str], fds: &[(RawFd, RawFd)], stdin: Option<RawFd>) -> io::Result<Helper> {
    spawn_detached(helper, args, fds, stdin)?.attach()
}

/// A helper started but not yet registered with the async runtime (a pool
/// slot, made ahead on a thread of its own): [`Spawned::attach`] turns it
/// into a [`Helper`] when a run takes it. Dropped unattached, it is killed
/// and reaped.
pub struct Spawned {
    pid: libc::pid_t,
    pidfd: Option<OwnedFd>,
    stdout: Option<OwnedFd>,
    stderr: Option<OwnedFd>,
}

impl Spawned {
    /// Register the pidfd with the runtime of the caller.
    pub fn attach(mut self) -> io::Result<Helper> {
        let pidfd = self.pidfd.take().ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
        let (stdout, stderr) = (self.stdout.take(), self.stderr.take());
        // SAFETY: the AsyncFd owns the OwnedFd, which stays open and unchanged
        // for as long as the AsyncFd lives.
        let registered = unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) };
        match registered {
            Ok(pidfd) => Ok(Helper { pid: self.pid, pidfd, stdout, stderr, reaped: false }),
            Err(e) => {
                // SAFETY: kill and reap our own child so it does not linger.
                unsafe {
                    libc::kill(self.pid, libc::SIGKILL);
                    libc::waitpid(self.pid, std::ptr::null_mut(), 0);
                }
                Err(io::Error::from(e))
            }
        }
    }

    /// Whether the helper has exited (it is then reaped).
    pub fn exited(&mut self) -> bool {
        if self.pidfd.is_none() {
            return true;
        }
        let mut status = 0;
        // SAFETY: waitpid on our own, not yet reaped child.
        let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
        if r != 0 {
            self.pidfd = None;
            return true;
        }
        false
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        let Some(pidfd) = self.pidfd.take() else { return };
        // An unused slot or head start: its lifeline or socket is closed
        // already (dropped first), on which the helper kills its pid 1 (if
        // any) and exits. Give it a bounded moment, then kill it.
        let deadline = std::time::Instant::now() + Duration::from_millis(500);
        loop {
            let mut status = 0;
            // SAFETY: waitpid on our own, not yet reaped child.
            let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
            if r != 0 {
                return;
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                break;
            }
            let ms = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
            let mut fds = [libc::pollfd { fd: pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
            // SAFETY: poll on one pidfd we own; the array outlives the call.
            unsafe { libc::poll(fds.as_mut_ptr(), 1, ms) };
        }
        // SAFETY: a plain syscall on our own pidfd; NULL siginfo is allowed.
        unsafe { libc::syscall(libc::SYS_pidfd_send_signal, pidfd.as_raw_fd(), libc::SIGKILL, 0usize, 0u32) };
        // SAFETY: reap our own child, just SIGKILLed.
        unsafe { libc::waitpid(self.pid, std::ptr::null_mut(), 0) };
    }
}

/// [`spawn_args`], without registering the helper with the runtime.
pub fn spawn_detached(
    helper: &Path,
    args: &[&str],
    fds: &[(RawFd, RawFd)],
    stdin: Option<RawFd>,
) -> io::Result<Spawned> {
    let args = args
        .iter()
        .map(|a| CString::new(*a).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL)))
        .collect::<io::Result<Vec<_>>>()?;
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let path = CString::new(helper.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut s = Spawn::new()?;
    // SAFETY: every call in this block works on objects initialised by
    // `Spawn::new`, with fds that are open and outlive posix_spawn.
    unsafe {
        match stdin {
            Some(fd) => check(libc::posix_spawn_file_actions_adddup2(&mut s.actions, fd, 0))?,
            None => check(libc::posix_spawn_file_actions_addopen(
                &mut s.actions,
                0,
                c"/dev/null".as_ptr(),
                libc::O_RDONLY,
                0,
            ))?,
        }
        check(libc::posix_spawn_file_actions_adddup2(&mut s.actions, out_w.as_raw_fd(), 1))?;
        check(libc::posix_spawn_file_actions_adddup2(&mut s.actions, err_w.as_raw_fd(), 2))?;
        for (src, dst) in fds {
            check(libc::posix_spawn_file_actions_adddup2(&mut s.actions, *src, *dst))?;
        }
        // A protocol fd not passed is closed, so the helper never mistakes
        // a descriptor this process inherited without O_CLOEXEC for it (the
        // observer's socket on fd 7 and the network's on 8 and 9 are
        // optional; glibc ignores EBADF here).
        for fd in portcullis_helper::SPEC_FD..=portcullis_helper::LAST_FD {
            if !fds.iter().any(|(_, dst)| *dst == fd) {
                check(libc::posix_spawn_file_actions_addclose(&mut s.actions, fd))?;
            }
        }
        // Its own process group (a terminal's ^C goes to us, and we decide),
        // every signal at its default disposition (Rust ignores SIGPIPE and
        // ignored signals survive exec), and nothing blocked.
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        check(libc::posix_spawnattr_setsigdefault(&mut s.attr, &all))?;
        check(libc::posix_spawnattr_setsigmask(&mut s.attr, &none))?;
        check(libc::posix_spawnattr_setpgroup(&mut s.attr, 0))?;
        let flags = libc::POSIX_SPAWN_SETPGROUP | libc::POSIX_SPAWN_SETSIGDEF | libc::POSIX_SPAWN_SETSIGMASK;
        check(libc::posix_spawnattr_setflags(&mut s.attr, flags as libc::c_short))?;
    }
    let argv: Vec<*const libc::c_char> =
        [path.as_ptr()].into_iter().chain(args.iter().map(|a| a.as_ptr())).chain([std::ptr::null()]).collect();
    let envp = [std::ptr::null::<libc::c_char>()];
    let mut pid: libc::pid_t = 0;
    // SAFETY: argv/envp are NULL-terminated arrays of valid C strings that
    // outlive the call; s holds initialised actions and attributes.
    check(unsafe {
        libc::posix_spawn(&mut pid, path.as_ptr(), &s.actions, &s.attr, argv.as_ptr() as _, envp.as_ptr() as _)
    })?;
    drop((out_w, err_w));
    // SAFETY: pidfd_open on the pid we just spawned and have not reaped.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    let pidfd = if raw < 0 {
        let e = io::Error::last_os_error();
        // SAFETY: kill and reap our own child so it does not linger.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
        return Err(e);
    } else {
        // SAFETY: a fresh pidfd owned by nobody else.
        unsafe { OwnedFd::from_raw_fd(raw as RawFd) }
    };
    Ok(Spawned { pid, pidfd: Some(pidfd), stdout: Some(out_r), stderr: Some(err_r) })
}

impl Helper {
    /// Wait until the helper exits and reap it.
    pub async fn wait(&mut self) -> io::Result<Exit> {
        loop {
            if let Some(exit) = self.try_reap()? {
                return Ok(exit);
            }
            let mut guard = self.pidfd.readable().await?;
            guard.clear_ready();
        }
    }

    fn try_reap(&mut self) -> io::Result<Option<Exit>> {
        let mut status = 0;
        // SAFETY: waitpid on our own, not yet reaped child.
        let r = unsafe { libc::waitpid(self.pid, &mut status, libc::WNOHANG) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        if r == 0 {
            return Ok(None);
        }
        self.reaped = true;
        Ok(Some(if libc::WIFSIGNALED(status) {
            Exit::Signal(libc::WTERMSIG(status))
        } else {
            Exit::Code(libc::WEXITSTATUS(status))
        }))
    }

    /// Whether it has been reaped.
    pub fn reaped(&self) -> bool {
        self.reaped
    }

    /// Its pid.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

    /// Wait at most `timeout` for the helper to exit, on a thread of its
    /// own (no runtime), and reap it. Whether it was reaped.
    pub fn wait_blocking(&mut self, timeout: Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            match self.try_reap() {
                Ok(Some(_)) => return true,
                Ok(None) => {}
                Err(_) => return false,
            }
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            let ms = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
            let mut fds = [libc::pollfd { fd: self.pidfd.get_ref().as_raw_fd(), events: libc::POLLIN, revents: 0 }];
            // SAFETY: poll on one pidfd we own, the array outlives the call.
            unsafe { libc::poll(fds.as_mut_ptr(), 1, ms) };
        }
    }

    /// SIGKILL the helper (its pid 1 follows through the parent-death signal).
    pub fn kill(&self) {
        if !self.reaped {
            // SAFETY: a plain syscall on our own pidfd; NULL siginfo is allowed.
            unsafe {
                libc::syscall(libc::SYS_pidfd_send_signal, self.pidfd.as_fd().as_raw_fd(), libc::SIGKILL, 0usize, 0u32)
            };
        }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        if self.reaped {
            return;
        }
        // An abandoned run: its lifeline is already closed (dropped first),
        // on which the helper kills pid 1 and waits for the whole pid
        // namespace to be torn down. Give it a bounded moment to finish that
        // (so nothing is left running when we return), then kill it.
        for _ in 0..1000 {
            match self.try_reap() {
                Ok(Some(_)) | Err(_) => return,
                Ok(None) => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        }
        self.kill();
        // SAFETY: reap our own child; it was just SIGKILLed, so this returns
        // at once.
        unsafe { libc::waitpid(self.pid, std::ptr::null_mut(), 0) };
    }
}
