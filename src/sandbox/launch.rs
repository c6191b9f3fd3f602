//! Starting the helper: `posix_spawn` (a vfork-style clone, no page-table
//! copy of this possibly large, multithreaded process) with its protocol
//! fds placed by file actions, so no code of ours runs between fork and
//! exec; or, for a sandbox that lives ([`Launcher`]), a fork of its zygote
//! (`portcullis-helper --zygote`), the same helper with the same fds, as
//! this process's child; or, for a full sandbox that makes no network of
//! its own, its pid 1 cloned by the zygote straight into its namespaces
//! ([`Launcher::clone_run`], [`Launcher::clone_slot`]: no outer helper).
//! The child is awaited through a pidfd, so a recycled pid can never be
//! signalled or reaped by mistake.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::Duration;

use portcullis_helper::report::Step;
use portcullis_helper::spec::Identity;
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
    /// Its pid.
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }

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

/// [`Launcher::spawn_detached`] by `posix_spawn`.
pub fn spawn_detached(
    helper: &Path,
    args: &[&str],
    fds: &[(RawFd, RawFd)],
    stdin: Option<RawFd>,
) -> io::Result<Spawned> {
    let (out_r, out_w) = pipe()?;
    let (err_r, err_w) = pipe()?;
    let (pid, pidfd) = posix_spawn(helper, args, fds, stdin, Some((out_w.as_raw_fd(), err_w.as_raw_fd())))?;
    drop((out_w, err_w));
    Ok(Spawned { pid, pidfd: Some(pidfd), stdout: Some(out_r), stderr: Some(err_r) })
}

/// `posix_spawn` `helper` with `args`, `fds` placed, stdin from `stdin` (or
/// `/dev/null`), stdout and stderr onto `outputs` (or `/dev/null`): its
/// pid and a pidfd.
fn posix_spawn(
    helper: &Path,
    args: &[&str],
    fds: &[(RawFd, RawFd)],
    stdin: Option<RawFd>,
    outputs: Option<(RawFd, RawFd)>,
) -> io::Result<(libc::pid_t, OwnedFd)> {
    let args = args
        .iter()
        .map(|a| CString::new(*a).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL)))
        .collect::<io::Result<Vec<_>>>()?;
    let path = CString::new(helper.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut s = Spawn::new()?;
    // SAFETY: every call in this block works on objects initialised by
    // `Spawn::new`, with fds that are open and outlive posix_spawn.
    unsafe {
        let null = |a: &mut libc::posix_spawn_file_actions_t, fd, flags| {
            check(libc::posix_spawn_file_actions_addopen(a, fd, c"/dev/null".as_ptr(), flags, 0))
        };
        match stdin {
            Some(fd) => check(libc::posix_spawn_file_actions_adddup2(&mut s.actions, fd, 0))?,
            None => null(&mut s.actions, 0, libc::O_RDONLY)?,
        }
        match outputs {
            Some((out, err)) => {
                check(libc::posix_spawn_file_actions_adddup2(&mut s.actions, out, 1))?;
                check(libc::posix_spawn_file_actions_adddup2(&mut s.actions, err, 2))?;
            }
            None => {
                null(&mut s.actions, 1, libc::O_WRONLY)?;
                null(&mut s.actions, 2, libc::O_WRONLY)?;
            }
        }
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
    // SAFETY: pidfd_open on the pid we just spawned and have not reaped.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if raw < 0 {
        let e = io::Error::last_os_error();
        // SAFETY: kill and reap our own child so it does not linger.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
            libc::waitpid(pid, std::ptr::null_mut(), 0);
        }
        return Err(e);
    }
    // SAFETY: a fresh pidfd owned by nobody else.
    Ok((pid, unsafe { OwnedFd::from_raw_fd(raw as RawFd) }))
}

/// How a sandbox starts its helpers: with `posix_spawn` each time (a
/// one-shot sandbox, `portcullis exec`'s), or through a zygote of its own
/// (`portcullis-helper --zygote`, see `helper/src/zygote.rs`): started with
/// the first helper, kept as long as the sandbox, its clones and its pool
/// live, it forks each helper as this process's own child, which this
/// module then waits for and reaps as a spawned one. That spares each
/// helper the `execve` and the start of a new image. Where the zygote
/// cannot be started or does not answer, helpers are spawned as before.
#[derive(Clone)]
pub struct Launcher {
    helper: std::path::PathBuf,
    zygote: Option<std::sync::Arc<std::sync::Mutex<Zygotes>>>,
}

impl std::fmt::Debug for Launcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launcher").field("helper", &self.helper).field("zygote", &self.zygote.is_some()).finish()
    }
}

/// A launcher's zygote, if running, and how often one failed.
struct Zygotes {
    running: Option<Zygote>,
    /// Zygotes that could not be started or stopped answering, in a row:
    /// at [`MAX_ZYGOTE_FAILURES`] none is tried again.
    failures: u32,
    /// The process that started it (a fork of this process has the same
    /// memory but is not the zygote's helpers' parent, and starts its own).
    owner: libc::pid_t,
    /// Debug builds, for tests: this many answers are taken as lost (their
    /// pidfd dropped) before any other.
    lose: u32,
}

/// A running zygote: this process's child, the socket it reads (taken when
/// it is dropped, which makes it exit), and the state of the thread that
/// started it, which its helpers inherit.
pub struct Zygote {
    pid: libc::pid_t,
    pidfd: OwnedFd,
    sock: Option<OwnedFd>,
    started_as: Fingerprint,
    /// The process that started it: a fork of that process, which holds a
    /// copy of this, leaves it alone.
    owner: libc::pid_t,
}

/// What a spawned helper would inherit from the spawning thread and a
/// zygote's child inherits from the zygote instead, as far as it can be
/// read in a few calls: the real, effective and saved ids, the effective,
/// permitted and inheritable capabilities, the securebits, `no_new_privs`
/// and the seccomp mode (not the bounding or ambient sets, which take a
/// call per capability, nor the filters themselves). A thread that differs
/// from the zygote's start (a host that dropped root, or confined itself,
/// after its sandbox started) gets a new zygote, started from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    uids: [libc::uid_t; 3],
    gids: [libc::gid_t; 3],
    caps: [u32; 6],
    no_new_privs: libc::c_int,
    seccomp: libc::c_int,
    securebits: libc::c_int,
}

impl Fingerprint {
    fn now() -> Fingerprint {
        let (mut uids, mut gids) = ([0; 3], [0; 3]);
        // SAFETY: getresuid/getresgid write three ids each into live arrays.
        unsafe {
            libc::getresuid(&mut uids[0], &mut uids[1], &mut uids[2]);
            libc::getresgid(&mut gids[0], &mut gids[1], &mut gids[2]);
        }
        #[repr(C)]
        struct Header {
            version: u32,
            pid: libc::c_int,
        }
        let mut header = Header { version: 0x2008_0522, pid: 0 };
        let mut caps = [0u32; 6];
        // SAFETY: capget (version 3) reads the header and writes two
        // 3-word data structs into `caps`; both outlive the call.
        unsafe { libc::syscall(libc::SYS_capget, std::ptr::addr_of_mut!(header), caps.as_mut_ptr()) };
        // SAFETY: prctl queries without pointers.
        let (no_new_privs, seccomp, securebits) = unsafe {
            (
                libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0),
                libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0),
                libc::prctl(libc::PR_GET_SECUREBITS, 0, 0, 0, 0),
            )
        };
        Fingerprint { uids, gids, caps, no_new_privs, seccomp, securebits }
    }
}

/// Zygote failures after which a launcher spawns every helper itself.
const MAX_ZYGOTE_FAILURES: u32 = 3;

/// How long a zygote may take to answer a request before it is taken for
/// hung (killed, and the helper spawned the usual way).
const ZYGOTE_ANSWER: Duration = Duration::from_secs(2);

/// The zygote's arguments: `--zygote`, this process's pid (which names its
/// cgroup leaves: a zygote whose library died removes them) and room in
/// its argument area for a helper's longest (`--make-network`), which each
/// child shows there.
fn zygote_args() -> [String; 3] {
    ["--zygote".into(), std::process::id().to_string(), " ".repeat(16)]
}

impl Launcher {
    /// Spawn every helper.
    pub fn direct(helper: std::path::PathBuf) -> Launcher {
        Launcher { helper, zygote: None }
    }

    /// Start helpers through a zygote.
    pub fn resident(helper: std::path::PathBuf) -> Launcher {
        // SAFETY: getpid has no preconditions.
        let owner = unsafe { libc::getpid() };
        let z = Zygotes { running: None, failures: 0, owner, lose: 0 };
        Launcher { helper, zygote: Some(std::sync::Arc::new(std::sync::Mutex::new(z))) }
    }

    /// Debug builds, for tests: take the zygote's next `n` answers as lost
    /// (as when their pidfd finds no room here). Does nothing in a release
    /// build or without a zygote.
    pub fn lose_answers_for_tests(&self, n: u32) {
        if let (true, Some(z)) = (cfg!(debug_assertions), &self.zygote) {
            z.lock().unwrap_or_else(|p| p.into_inner()).lose = n;
        }
    }

    /// The helper binary.
    pub fn helper(&self) -> &Path {
        &self.helper
    }

    /// Start the helper with `args` after argv[0] (a mode of the helper,
    /// such as `--make-network`), `fds` placed at their target numbers
    /// (`(source, target)`, sources above every target), an empty
    /// environment, its own process group, default signal dispositions, and
    /// stdin from `stdin` (or `/dev/null`); registered with the caller's
    /// runtime.
    pub fn spawn(&self, args: &[&str], fds: &[(RawFd, RawFd)], stdin: Option<RawFd>) -> io::Result<Helper> {
        self.spawn_detached(args, fds, stdin)?.attach()
    }

    /// [`Launcher::spawn`], without registering the helper with the
    /// runtime (a pool slot's, made on a thread of its own).
    pub fn spawn_detached(&self, args: &[&str], fds: &[(RawFd, RawFd)], stdin: Option<RawFd>) -> io::Result<Spawned> {
        if let Some(z) = &self.zygote {
            // A panic while it was held leaves at worst a zygote that is
            // then found dead: still usable.
            let mut z = z.lock().unwrap_or_else(|p| p.into_inner());
            let ask = |z: &Zygote, lose| z.ask(&Request::Helper, args, fds, stdin, lose);
            if let Some(Ok((spawned, _))) = z.with(&self.helper, None, ask) {
                return Ok(spawned);
            }
        }
        spawn_detached(&self.helper, args, fds, stdin)
    }

    /// A slot's pid 1, cloned by the zygote straight into the slot's
    /// namespaces (and `net`, when given: a network's own zygote and the
    /// descriptors it joins the network by, on their targets) and its
    /// `cgroup`, as this process's child, its ids mapped as `identity`
    /// says: the slot then has no outer helper (`helper/src/slot.rs`,
    /// `direct`). `fds` are placed as for `--slot`. `None` where there is no
    /// zygote or it could not (the caller spawns `--slot` instead: nothing
    /// of this request runs then).
    pub fn clone_slot(
        &self,
        identity: &Identity,
        cgroup: Option<RawFd>,
        fds: &[(RawFd, RawFd)],
        net: Option<(&NetZygote, &[(RawFd, RawFd)])>,
    ) -> Option<ClonedSlot> {
        let z = self.zygote.as_ref()?;
        let mut z = z.lock().unwrap_or_else(|p| p.into_inner());
        let request = Request::Pid1 { identity: *identity, cgroup, one_run: false, userns: true, trees: None };
        let ask = |z: &Zygote, lose| z.ask(&request, &["--slot"], fds, None, lose);
        match z.with(&self.helper, net, ask)? {
            Ok((spawned, userns)) => Some(ClonedSlot { pid1: spawned.pid, spawned, userns }),
            Err(_) => None,
        }
    }

    /// A one run's pid 1, cloned by the zygote as [`Launcher::clone_slot`]
    /// clones a slot's, with `fds` placed as for a spawned helper (the
    /// spec, the report pipe, the lifeline, the observer's socket) and
    /// stdin from `stdin`; let go once `trees` has made the run's idmapped
    /// trees through its user namespace (asked for when `userns`: the run
    /// has idmapped binds). `None` where there is no zygote or
    /// it could not (the caller spawns the helper: nothing of this request
    /// runs then).
    #[allow(clippy::too_many_arguments)]
    pub fn clone_run(
        &self,
        identity: &Identity,
        cgroup: Option<RawFd>,
        fds: &[(RawFd, RawFd)],
        stdin: Option<RawFd>,
        net: Option<(&NetZygote, &[(RawFd, RawFd)])>,
        userns: bool,
        trees: &Trees<'_>,
    ) -> Option<ClonedRun> {
        let z = self.zygote.as_ref()?;
        let mut z = z.lock().unwrap_or_else(|p| p.into_inner());
        let request = Request::Pid1 { identity: *identity, cgroup, one_run: true, userns, trees: Some(trees) };
        let ask = |z: &Zygote, lose| z.ask(&request, &[], fds, stdin, lose);
        Some(match z.with(&self.helper, net, ask)? {
            Ok((spawned, _)) => ClonedRun::Made(spawned),
            Err(r) => ClonedRun::Refused(r),
        })
    }
}

/// The zygote of one network, which joined it at its start and clones the
/// slots that run in it ([`Launcher::clone_slot`]). The network keeps it,
/// so that it goes with the network: the zygote is in it, and would keep
/// it alive.
#[derive(Default)]
pub struct NetZygote(std::sync::Mutex<Option<Zygote>>);

impl NetZygote {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Zygote>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl std::fmt::Debug for NetZygote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("NetZygote")
    }
}

/// What came of [`Launcher::clone_run`].
pub enum ClonedRun {
    /// Pid 1, this process's child, let go.
    Made(Spawned),
    /// The trees could not be made: nothing ran.
    Refused(Refusal),
}

/// A slot's pid 1 the zygote cloned ([`Launcher::clone_slot`]).
pub struct ClonedSlot {
    /// Pid 1, this process's child.
    pub spawned: Spawned,
    /// Its pid here.
    pub pid1: libc::pid_t,
    /// Its user namespace, for a root caller (idmapped trees are made
    /// through it).
    pub userns: Option<OwnedFd>,
}

/// What a zygote is asked for.
enum Request<'a> {
    /// A helper, as `posix_spawn` would start it (`z`).
    Helper,
    /// A pid 1, in its namespaces and cgroup (`c`): one run's, or a slot's;
    /// its user namespace sent back when `userns`; let go with the
    /// idmapped trees `trees` makes through it.
    Pid1 { identity: Identity, cgroup: Option<RawFd>, one_run: bool, userns: bool, trees: Option<&'a Trees<'a>> },
}

/// How a one-run pid 1's idmapped trees are made, through its user
/// namespace (a root caller's; `None` for another's): a failure is the
/// step, errno and detail the helper would report.
pub type Trees<'a> = dyn Fn(Option<BorrowedFd<'_>>) -> Result<Vec<OwnedFd>, Refusal> + 'a;

/// A step, errno and detail, as a helper reports a failure.
pub type Refusal = (Step, i32, u32);

impl Zygotes {
    /// What `ask` made of the zygote (the plain one, or `net`'s, which
    /// joins that network; started first if none runs, or started again
    /// once if the one running is gone or was started from another thread
    /// state); `None` when there is none to ask, or it
    /// could not make this one (the caller spawns the helper itself: no
    /// helper of the request runs then, see [`Zygote::ask`]).
    fn with(
        &mut self,
        helper: &Path,
        net: Option<(&NetZygote, &[(RawFd, RawFd)])>,
        ask: impl Fn(&Zygote, bool) -> Answer,
    ) -> Option<Result<(Spawned, Option<OwnedFd>), Refusal>> {
        // SAFETY: getpid has no preconditions.
        if unsafe { libc::getpid() } != self.owner {
            return None;
        }
        let now = Fingerprint::now();
        // Taken out and put back below; a network's zygote is only ever
        // used under this lock.
        let mut running = match net {
            None => self.running.take(),
            Some((z, _)) => z.lock().take(),
        };
        if running.as_ref().is_some_and(|z| z.started_as != now) {
            if let Some(z) = running.take() {
                z.stop();
            }
        }
        let mut made = None;
        for _ in 0..2 {
            if self.failures >= MAX_ZYGOTE_FAILURES {
                break;
            }
            let z = match running.take() {
                Some(z) => z,
                None => match Zygote::start(helper, now, net.map_or(&[][..], |(_, fds)| fds)) {
                    Ok(z) => z,
                    Err(_) => {
                        self.failures += 1;
                        break;
                    }
                },
            };
            let lose = self.lose > 0;
            self.lose = self.lose.saturating_sub(1);
            match ask(&z, lose) {
                Answer::Made(spawned, extra) => {
                    self.failures = 0;
                    running = Some(z);
                    made = Some(Ok((spawned, extra)));
                    break;
                }
                Answer::Refused(r) => {
                    // The request's own failure: the zygote is fine.
                    running = Some(z);
                    made = Some(Err(r));
                    break;
                }
                Answer::NotHere => {
                    // This process could not make the request (out of
                    // descriptors, say) or the zygote could not fork: the
                    // zygote is fine; the spawn says what is wrong.
                    running = Some(z);
                    break;
                }
                Answer::Lost => {
                    // Nothing sent, no answer in time, or one this process
                    // could not take: the zygote is stopped, and its
                    // gated child with it; one more try.
                    self.failures += 1;
                    z.stop();
                }
            }
        }
        match net {
            None => self.running = running,
            Some((z, _)) => *z.lock() = running,
        }
        made
    }
}

/// What came of a request to a zygote.
enum Answer {
    /// The child, and the descriptor that came with it (a slot's user
    /// namespace, for a root caller).
    Made(Spawned, Option<OwnedFd>),
    /// The child was made, but what it needed to be let go could not be
    /// (a one run's idmapped trees): it exited at its gate, reaped.
    Refused(Refusal),
    /// Not made, for a reason of this process's or of the fork's: the
    /// zygote still serves.
    NotHere,
    /// Not made, the zygote gone, hung or its answer lost: no helper of the
    /// request runs (its gate was closed), the zygote must be stopped.
    Lost,
}

impl Zygote {
    /// A zygote, with `net` (descriptors on their targets: the network it
    /// joins at its start) passed besides its socket.
    fn start(helper: &Path, started_as: Fingerprint, net: &[(RawFd, RawFd)]) -> io::Result<Zygote> {
        use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
        let (ours, theirs) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)?;
        // Above the protocol numbers, which posix_spawn places it onto.
        let theirs = crate::sys::dup_above(&theirs, portcullis_helper::LAST_FD + 1)?;
        let mut fds = vec![(theirs.as_raw_fd(), portcullis_helper::SPEC_FD)];
        fds.extend_from_slice(net);
        let args = zygote_args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (pid, pidfd) = posix_spawn(helper, &args, &fds, None, None)?;
        // SAFETY: getpid has no preconditions.
        let owner = unsafe { libc::getpid() };
        Ok(Zygote { pid, pidfd, sock: Some(ours), started_as, owner })
    }

    /// Ask for one helper: `fds` placed at their targets, stdin from
    /// `stdin` (or `/dev/null`), stdout and stderr onto new pipes. The
    /// child is let go (a byte on its gate) only once its pidfd is here;
    /// on any other outcome the gate closes when this returns and the
    /// child, if any, exits without running.
    fn ask(&self, what: &Request, args: &[&str], fds: &[(RawFd, RawFd)], stdin: Option<RawFd>, lose: bool) -> Answer {
        let Some(sock) = &self.sock else { return Answer::Lost };
        let (Ok((gate_r, gate_w)), Ok((out_r, out_w)), Ok((err_r, err_w))) = (gate(), pipe(), pipe()) else {
            return Answer::NotHere;
        };
        let mut passed: Vec<(RawFd, RawFd)> = vec![(out_w.as_raw_fd(), 1), (err_w.as_raw_fd(), 2)];
        passed.extend(stdin.map(|fd| (fd, 0)));
        passed.extend_from_slice(fds);
        let Some(payload) = request(args, &passed) else { return Answer::NotHere };
        // A slot's head (its ids and whether its cgroup comes) before the
        // request, and its cgroup right after the gate.
        let (tag, head, lead) = match what {
            Request::Helper => (b'z', Vec::new(), None),
            Request::Pid1 { identity, cgroup, one_run, userns, .. } => {
                (b'c', pid1_head(identity, cgroup.is_some(), *one_run, *userns), *cgroup)
            }
        };
        let raw: Vec<RawFd> =
            [gate_r.as_raw_fd()].into_iter().chain(lead).chain(passed.iter().map(|(src, _)| *src)).collect();
        if send(sock, tag, &head, &payload, &raw).is_err() {
            return Answer::Lost;
        }
        drop((gate_r, out_w, err_w));
        let reply = match receive(sock, ZYGOTE_ANSWER) {
            Some(Reply::Made { .. }) if lose => Some(Reply::Unusable),
            r => r,
        };
        // A one run's trees, made before it is let go.
        let trees = match (&reply, what) {
            (Some(Reply::Made { pid, extra, .. }), Request::Pid1 { trees: Some(trees), .. }) => {
                match trees(extra.as_ref().map(|e| e.as_fd())) {
                    Ok(t) => t,
                    Err(r) => {
                        // Its gate closes: it exits there, and is reaped.
                        drop(gate_w);
                        // SAFETY: waitpid on our own child, which exits.
                        unsafe { libc::waitpid(*pid, std::ptr::null_mut(), 0) };
                        return Answer::Refused(r);
                    }
                }
            }
            _ => Vec::new(),
        };
        match reply {
            Some(Reply::Made { pid, pidfd, extra }) if let_go(pid, &gate_w, &trees) => {
                Answer::Made(Spawned { pid, pidfd: Some(pidfd), stdout: Some(out_r), stderr: Some(err_r) }, extra)
            }
            Some(Reply::Refused) => Answer::NotHere,
            Some(Reply::Killed { pid }) => {
                // A slot's pid 1 the zygote killed (its maps or cgroup
                // failed), at its gate: reaped here, its parent.
                // SAFETY: waitpid on our own child, SIGKILLed already.
                unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
                Answer::NotHere
            }
            // No answer, one whose pidfd did not reach us (no room for it
            // here), or a child gone before it was let go: its gate closes
            // as this returns, and `stop` reaps it with the zygote.
            Some(Reply::Made { .. } | Reply::Unusable) | None => Answer::Lost,
        }
    }

    /// Kill and reap the zygote, and any child it forked that was not let
    /// go (its gate is closed by then, so it exits; it is in the zygote's
    /// process group until let go).
    fn stop(mut self) {
        // SAFETY: getpid has no preconditions.
        if unsafe { libc::getpid() } != self.owner {
            return;
        }
        let Some(sock) = self.sock.take() else { return };
        kill_group(self.pid);
        reap_group(self.pid);
        drop(sock);
    }
}

/// SIGKILL the zygote `pid` and its process group: itself and its children
/// not let go ([`let_go`] moves a child out of it first). The zygote is not
/// reaped yet, so the group's id is still its own.
fn kill_group(pid: libc::pid_t) {
    // SAFETY: kill(2) on the process group of a child of ours, not reaped.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
}

/// A gate: the child reads its end (the zygote passes it on), this process
/// writes one byte to let the child go, or closes its end to let it exit.
/// A socket pair, so that the byte is sent with `MSG_NOSIGNAL` (a pipe's
/// reader gone would raise `SIGPIPE` in the caller).
fn gate() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
    Ok(socketpair(AddressFamily::Unix, SockType::Stream, None, SockFlag::SOCK_CLOEXEC)?)
}

/// Let the zygote's child `pid` go: first into a process group of its own
/// (as its parent may, before it execs), so that the zygote's group only
/// ever holds the zygote and children not let go, which a stop kills and
/// reaps whole; then the byte on its gate. False if it is gone (then it is
/// reaped: here once out of the zygote's group, else with the zygote).
fn let_go(pid: libc::pid_t, gate: &OwnedFd, with: &[OwnedFd]) -> bool {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    // SAFETY: setpgid on our own child, which has not exec'd.
    if unsafe { libc::setpgid(pid, pid) } != 0 {
        return false;
    }
    let raw: Vec<RawFd> = with.iter().map(AsRawFd::as_raw_fd).collect();
    let cmsg = [ControlMessage::ScmRights(&raw)];
    let cmsgs: &[ControlMessage<'_>] = if raw.is_empty() { &[] } else { &cmsg };
    let iov = [io::IoSlice::new(&[1])];
    if sendmsg::<()>(gate.as_raw_fd(), &iov, cmsgs, MsgFlags::MSG_NOSIGNAL, None).is_ok_and(|n| n == 1) {
        return true;
    }
    // SAFETY: our own child, not reaped: killed and reaped here.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    false
}

/// Reap every child of ours in process group `pgid` (a zygote's, and its
/// children not let go), waiting up to a second for them to exit.
fn reap_group(pgid: libc::pid_t) {
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    loop {
        // SAFETY: waitid on our own children of one process group; the
        // siginfo is zeroed storage the kernel fills.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let r = unsafe { libc::waitid(libc::P_PGID, pgid as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG) };
        if r < 0 {
            return; // ECHILD: none left.
        }
        // SAFETY: the kernel filled si_pid (0: none has exited yet).
        if unsafe { info.si_pid() } == 0 {
            if std::time::Instant::now() >= deadline {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Zygote {
    fn drop(&mut self) {
        // SAFETY: getpid has no preconditions.
        if unsafe { libc::getpid() } != self.owner {
            // A fork's copy: the zygote is its parent's.
            return;
        }
        let Some(sock) = self.sock.take() else { return };
        // Told to stop (`q`: a bare end of its socket means this process
        // died, and it cleans up after the sandboxes it cloned), then its socket
        // closes: it exits. Awaited half a second through its pidfd,
        // killed if it does not go, and reaped.
        let _ = send(&sock, b'q', &[], &[], &[]);
        drop(sock);
        let mut fds = [libc::pollfd { fd: self.pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        // SAFETY: poll on one pidfd we own; the array outlives the call.
        if unsafe { libc::poll(fds.as_mut_ptr(), 1, 500) } != 1 {
            kill_group(self.pid);
        }
        reap_group(self.pid);
    }
}

/// A zygote request (`helper/src/zygote.rs`): the arguments, then a target
/// for each passed descriptor. `None` if it cannot be said (an argument
/// with a NUL, too many of either).
fn request(args: &[&str], passed: &[(RawFd, RawFd)]) -> Option<Vec<u8>> {
    let mut b = vec![u8::try_from(args.len()).ok()?];
    for a in args {
        if a.as_bytes().contains(&0) {
            return None;
        }
        b.extend_from_slice(a.as_bytes());
        b.push(0);
    }
    b.push(u8::try_from(passed.len()).ok()?);
    for (_, target) in passed {
        b.push(u8::try_from(*target).ok()?);
    }
    Some(b)
}

/// A `c` request's head: the four ids (native order) and the flags (bit
/// 0: the cgroup's descriptor follows the gate).
fn pid1_head(id: &Identity, cgroup: bool, one_run: bool, userns: bool) -> Vec<u8> {
    [id.inside_uid, id.outside_uid, id.inside_gid, id.outside_gid]
        .iter()
        .flat_map(|v| v.to_ne_bytes())
        .chain([u8::from(cgroup) | u8::from(one_run) << 1 | u8::from(userns) << 2])
        .collect()
}

fn send(sock: &OwnedFd, tag: u8, head: &[u8], payload: &[u8], fds: &[RawFd]) -> io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let tag = [tag];
    let iov = [io::IoSlice::new(&tag), io::IoSlice::new(head), io::IoSlice::new(payload)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    sendmsg::<()>(sock.as_raw_fd(), &iov, &cmsg, MsgFlags::MSG_NOSIGNAL, None)?;
    Ok(())
}

/// A zygote's answer.
enum Reply {
    Made {
        pid: libc::pid_t,
        pidfd: OwnedFd,
        extra: Option<OwnedFd>,
    },
    /// A slot's pid 1 made and killed (`x`): to reap.
    Killed {
        pid: libc::pid_t,
    },
    /// A child was made, but its pidfd did not arrive whole.
    Unusable,
    Refused,
}

/// The zygote's next answer, waiting at most `wait`; `None` if there is
/// none by then, the socket closed, or it is not one.
fn receive(sock: &OwnedFd, wait: Duration) -> Option<Reply> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let deadline = std::time::Instant::now() + wait;
    loop {
        let mut fds = [libc::pollfd { fd: sock.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let ms = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
        // SAFETY: poll on one socket we own; the array outlives the call.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 1, ms) };
        if r < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted && !left.is_zero() {
            continue;
        }
        if r <= 0 || fds[0].revents & libc::POLLIN == 0 {
            return None;
        }
        break;
    }
    let mut buf = [0u8; 9];
    let mut iov = [io::IoSliceMut::new(&mut buf)];
    let mut space = nix::cmsg_space!([RawFd; 2]);
    let msg = recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC).ok()?;
    let mut got: Vec<OwnedFd> = Vec::new();
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            if let ControlMessageOwned::ScmRights(raw) = c {
                // SAFETY: SCM_RIGHTS just installed these fds in our table.
                got.extend(raw.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
            }
        }
    }
    let whole = !msg.flags.intersects(MsgFlags::MSG_CTRUNC | MsgFlags::MSG_TRUNC);
    let n = msg.bytes;
    let value = i32::from_ne_bytes([buf[1], buf[2], buf[3], buf[4]]);
    match (n, buf[0]) {
        (5, b'p') if whole && (1..=2).contains(&got.len()) => {
            let extra = if got.len() == 2 { got.pop() } else { None };
            got.pop().map(|pidfd| Reply::Made { pid: value, pidfd, extra })
        }
        (5, b'p') => Some(Reply::Unusable),
        // The pidfd need not have arrived: the pid alone reaps it.
        (9, b'x') => Some(Reply::Killed { pid: value }),
        (5, b'e') => Some(Reply::Refused),
        _ => None,
    }
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

    /// SIGKILL the helper (its pid 1 follows through the parent-death
    /// signal), or a pid 1 the zygote cloned (its pid namespace with it).
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
