//! `portcullis-helper`: builds one sandbox and runs one command in it.
//!
//! The library starts this binary with an empty environment and up to seven fds:
//! the spec on fd 3 (a memfd), the report pipe on fd 4, the lifeline on fd 5,
//! when a per-command cgroup exists, its directory on fd 6, when the
//! refused-write observer is on, its hand-over socket on fd 7 and, for a run
//! that joins a workspace's network, that network's user namespace on fd 8
//! (unprivileged callers) and network namespace on fd 9 (`shared_net`;
//! started as `portcullis-helper --make-network` it makes such a network
//! instead). A long-lived library starts one `portcullis-helper --zygote`
//! instead, which forks each such helper as the library's child with the
//! same descriptors (`zygote`), or, for a full sandbox that makes no
//! network of its own, clones its pid 1 directly (`direct_run`,
//! `slot::direct`: no outer helper; pid 1 then does the outer helper's
//! part that is left, and watches the lifeline). Three processes take part
//! in a helper's run:
//!
//! * the **outer helper** (this process, in the caller's namespaces) reads and
//!   checks the spec, compiles the seccomp filter, then `clone3`s (or, where
//!   a container's seccomp profile answers `clone3` with `ENOSYS`, `clone`s
//!   with the same flags and moves the child into the cgroup itself)
//! * **pid 1** of the sandbox — in new user, mount, pid, ipc, uts (and net,
//!   or the workspace's) namespaces, born inside the cgroup — and writes its uid/gid maps. Pid 1
//!   builds the root, pivots into it, becomes non-dumpable and forks
//! * the **command**, which drops every privilege and execs.
//!
//! Pid 1 reaps, forwards signals and exits with the command's status; its
//! exit makes the kernel kill everything left in the pid namespace. The
//! outer helper forwards signals to pid 1, kills it when the lifeline closes,
//! and exits with its status.
//!
//! The helper is single-threaded and must stay so: `clone3` with
//! `CLONE_NEWUSER` fails in a multithreaded process, and the fork-style
//! `clone3` here is sound only without other threads. It allocates freely,
//! which is fine for the same reason.
//!
//! What this does not protect against: kernel bugs reachable through the
//! syscalls the filter allows, and side channels. See docs/threat-model.md.

mod chan;
mod command;
mod cpus;
mod mounts;
mod notify;
mod shared_net;
mod slot;
mod sys;
mod zygote;

use std::ffi::CString;
use std::io::{self, Read, Seek};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;

use portcullis_helper::report::{CloneCall, Record, Step, CLONE_DETAIL_CLONE, CLONE_DETAIL_CLONE3, NO_DETAIL};
use portcullis_helper::spec::{Identity, Mode, MountOp, Netns, Network, SpawnSpec, SPEC_VERSION};
use portcullis_helper::CGROUP_FD;
use portcullis_helper::{filter, observe, LAST_FD, LIFELINE_FD, REPORT_FD, SPEC_FD};

/// Exit code when the wrapper itself fails (GNU convention, as `env`/`timeout`).
pub(crate) const EXIT_SETUP: i32 = 125;

/// A failed step: what the helper sends back.
#[derive(Debug)]
pub struct Fail {
    step: Step,
    errno: i32,
    detail: u32,
}

impl Fail {
    pub(crate) fn io(step: Step, e: io::Error) -> Fail {
        Fail { step, errno: e.raw_os_error().unwrap_or(libc::EIO), detail: NO_DETAIL }
    }
    pub(crate) fn errno(step: Step, errno: i32) -> Fail {
        Fail { step, errno, detail: NO_DETAIL }
    }
    fn detail(mut self, i: usize) -> Fail {
        self.detail = u32::try_from(i).unwrap_or(NO_DETAIL);
        self
    }
    pub(crate) fn clone_detail(mut self, d: u32) -> Fail {
        self.detail = d;
        self
    }
    /// The exit code that goes with the failure (126/127 for exec, like a shell).
    pub(crate) fn exit_code(&self) -> i32 {
        match (self.step, self.errno) {
            (Step::Exec, libc::ENOENT) => 127,
            (Step::Exec, _) => 126,
            _ => EXIT_SETUP,
        }
    }
}

/// Write one record; a failed write cannot be reported anywhere else.
pub fn report(fd: &OwnedFd, r: Record) {
    let _ = nix::unistd::write(fd, &r.encode());
}

/// Everything prepared before the first clone.
pub struct Prepared {
    argv: Vec<CString>,
    envp: Vec<CString>,
    /// Absolute candidates for `argv[0]` (a PATH search done up front).
    candidates: Vec<CString>,
    filter: seccompiler::BpfProgram,
    /// The refused-write observer's program alone, when the spec asks for
    /// it (debug builds only: what `skip_seccomp` installs).
    observer: Option<seccompiler::BpfProgram>,
    /// The main program with the observer's watches folded in
    /// (`observe::compile_with`), when the spec asks for the observer:
    /// what the command installs, with one `seccomp(2)` call.
    folded: Option<seccompiler::BpfProgram>,
}

/// The seccomp programs, compiled before the first clone.
pub(crate) struct Programs {
    filter: seccompiler::BpfProgram,
    observer: Option<seccompiler::BpfProgram>,
    folded: Option<seccompiler::BpfProgram>,
}

/// The signals forwarded to the command. SIGCHLD is handled, not forwarded.
const FORWARDED: &[Signal] = &[
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
    Signal::SIGCONT,
    Signal::SIGALRM,
];

fn handled_signals() -> SigSet {
    let mut set = SigSet::empty();
    for s in FORWARDED {
        set.add(*s);
    }
    set.add(Signal::SIGCHLD);
    set
}

fn main() {
    use std::os::unix::ffi::OsStrExt;
    let mode = std::env::args_os().nth(1);
    let mode = mode.as_ref().map(|m| m.as_bytes());
    if mode == Some(zygote::ZYGOTE_ARG.as_bytes()) {
        zygote::serve();
    }
    run(mode)
}

/// The helper with its first argument `mode` (none: one run; `--slot`: a
/// pre-made sandbox; `--make-network`: a workspace's network), once started,
/// by `posix_spawn` or by a zygote ([`zygote`]).
pub(crate) fn run(mode: Option<&[u8]>) -> ! {
    if mode == Some(portcullis_helper::network::MAKE_NETWORK_ARG.as_bytes()) {
        shared_net::make_network_main();
    }
    // Refuse to run without the protocol fds (someone started the helper by
    // hand): adopting a closed fd as owned would be unsound.
    for fd in [SPEC_FD, REPORT_FD, LIFELINE_FD] {
        if !sys::fd_is_open(fd) {
            eprintln!("portcullis-helper: fd {fd} is not open; this program is started by the portcullis library");
            sys::exit_now(EXIT_SETUP);
        }
    }
    // SAFETY: fd 4 is the report pipe the library passed; nothing else in
    // this process owns it.
    let report_fd = unsafe { sys::adopt(REPORT_FD) };
    let slot = mode == Some(b"--slot");
    let code = match if slot { slot::outer(&report_fd) } else { outer(&report_fd) } {
        Ok(code) => code,
        Err(f) => {
            let code = f.exit_code();
            report(&report_fd, Record::Error { step: Ok(f.step), errno: f.errno, detail: f.detail });
            code
        }
    };
    sys::exit_now(code)
}

/// Pid 1 of a one-run sandbox the zygote cloned (`zygote`, `c` with the
/// run's bit), once let go with a root caller's idmapped `trees`: its
/// descriptors placed as an outer helper's are (the spec's memfd, the
/// report pipe, the lifeline, the observer's socket), its maps written,
/// its cgroup and network joined by the zygote. It does the outer helper's
/// part that is left itself (reads and checks the spec, compiles the
/// programs), then goes on as any pid 1, and watches the lifeline while it
/// reaps, since no outer helper does ([`reap_watching`]). The library
/// clones only a full sandbox this way, and none that makes a network of
/// its own (that is made beside pid 1's setup by an outer helper).
pub(crate) fn direct_run(via: CloneCall, trees: Vec<OwnedFd>) -> ! {
    // SAFETY: fd 4 is the report pipe the zygote placed; nothing else in
    // this process owns it.
    let report_fd = unsafe { sys::adopt(REPORT_FD) };
    let f = match pid1_direct(via, trees, &report_fd) {
        Ok(never) => match never {},
        Err(f) => f,
    };
    report(&report_fd, Record::Error { step: Ok(f.step), errno: f.errno, detail: f.detail });
    sys::exit_now(f.exit_code())
}

fn pid1_direct(via: CloneCall, trees: Vec<OwnedFd>, report_fd: &OwnedFd) -> Result<Never, Fail> {
    // The zygote's child closed every other descriptor but the trees
    // (which `sanitize_fds` would close too).
    sys::close_range(SPEC_FD as u32, LAST_FD as u32, libc::CLOSE_RANGE_CLOEXEC)
        .map_err(|e| Fail::io(Step::Sanitize, e))?;
    let spec = read_spec()?;
    if spec.mode != Mode::Full || (spec.network == Network::None && spec.netns == Netns::Private) {
        return Err(Fail::errno(Step::ReadSpec, libc::EINVAL));
    }
    let prep = prepare(&spec)?;
    let (lifeline, _) = adopt_run_fds(false);
    block_signals()?;
    set_ids(&spec.identity)?;
    build_root(&spec, trees)?;
    become_init()?;
    let child = fork_command(&spec, &prep, via, report_fd)?;
    sys::exit_now(reap_watching(child, report_fd, &lifeline))
}

pub(crate) fn errno(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

fn read_spec() -> Result<SpawnSpec, Fail> {
    // SAFETY: fd 3 is the spec memfd the library passed; nothing else owns it.
    let fd = unsafe { sys::adopt(SPEC_FD) };
    parse_spec(&read_all(fd)?)
}

/// Everything in `fd` (a memfd of the library's).
pub(crate) fn read_all(fd: OwnedFd) -> Result<Vec<u8>, Fail> {
    let mut buf = Vec::new();
    let mut file = std::fs::File::from(fd);
    // From the start: a slot's outer helper read the same open file first.
    file.seek(io::SeekFrom::Start(0)).map_err(|e| Fail::io(Step::ReadSpec, e))?;
    file.read_to_end(&mut buf).map_err(|e| Fail::io(Step::ReadSpec, e))?;
    Ok(buf)
}

/// `ReadSpec`: decode and check a spec.
pub(crate) fn parse_spec(buf: &[u8]) -> Result<SpawnSpec, Fail> {
    let spec: SpawnSpec = serde_json::from_slice(buf).map_err(|_| Fail::errno(Step::ReadSpec, libc::EINVAL))?;
    let shared = matches!(spec.netns, Netns::Shared { .. });
    if spec.version != SPEC_VERSION
        || spec.argv.is_empty()
        || (shared && (spec.network != Network::None || spec.mode != Mode::Full))
    {
        return Err(Fail::errno(Step::ReadSpec, libc::EINVAL));
    }
    if !cfg!(debug_assertions) && spec.test_switches.any() {
        // A release helper never weakens a layer on request.
        return Err(Fail::errno(Step::ReadSpec, libc::EPERM));
    }
    Ok(spec)
}

fn prepare(spec: &SpawnSpec) -> Result<Prepared, Fail> {
    let programs = compile(spec.mode, spec.network, spec.observe)?;
    prepare_with(spec, programs)
}

/// The programs build.rs compiled (`PROGRAMS`).
mod precompiled {
    include!(concat!(env!("OUT_DIR"), "/seccomp_programs.rs"));
}

/// `CompileSeccomp`: the main filter for the mode and network, and the
/// refused-write observer's when `observe`: as build.rs compiled them with
/// this code (a cross build compiles them here).
pub(crate) fn compile(mode: Mode, network: Network, observe: bool) -> Result<Programs, Fail> {
    let profile = filter::Profile { degraded: mode == Mode::LandlockOnly, network_none: network == Network::None };
    let built = precompiled::PROGRAMS.iter().find(|(p, ..)| *p == (profile.degraded, profile.network_none));
    let fail = |_| Fail::errno(Step::CompileSeccomp, libc::EINVAL);
    let filter = match built {
        Some((_, main, _)) => main.to_vec(),
        None => filter::compile_for(profile).map_err(fail)?,
    };
    // The observer's program alone serves only a debug helper's
    // `skip_seccomp` (a release helper refuses that switch): not compiled
    // for every run of a release one.
    let observer = match observe && cfg!(debug_assertions) {
        true => Some(observe::compile().map_err(fail)?),
        false => None,
    };
    let folded = match (observe, built) {
        (true, Some((_, _, folded))) => Some(folded.to_vec()),
        (true, None) => Some(observe::compile_with(profile).map_err(fail)?),
        (false, _) => None,
    };
    Ok(Programs { filter, observer, folded })
}

/// The command's argv, envp and `PATH` candidates, with the programs.
pub(crate) fn prepare_with(spec: &SpawnSpec, programs: Programs) -> Result<Prepared, Fail> {
    let (argv, envp, candidates) = command_of(&spec.argv, &spec.env)?;
    let Programs { filter, observer, folded } = programs;
    let (observer, folded) = if spec.observe { (observer, folded) } else { (None, None) };
    Ok(Prepared { argv, envp, candidates, filter, observer, folded })
}

/// A command's argv, envp and the candidates for `argv[0]`.
type Command = (Vec<CString>, Vec<CString>, Vec<CString>);

/// `ReadSpec`: the command's argv and envp as C strings, and the absolute
/// candidates for `argv[0]` (its `PATH` search, done up front).
pub(crate) fn command_of(argv: &[Vec<u8>], env: &[Vec<u8>]) -> Result<Command, Fail> {
    let c = |b: &Vec<u8>| CString::new(b.clone()).map_err(|_| Fail::errno(Step::ReadSpec, libc::EINVAL));
    let Some(arg0) = argv.first() else { return Err(Fail::errno(Step::ReadSpec, libc::EINVAL)) };
    let candidates = if arg0.contains(&b'/') {
        vec![c(arg0)?]
    } else {
        let path = env.iter().find_map(|e| e.strip_prefix(b"PATH=")).unwrap_or(b"/usr/local/bin:/usr/bin:/bin");
        path.split(|b| *b == b':')
            .map(|d| if d.is_empty() { &b"."[..] } else { d })
            .map(|d| c(&[d, b"/", arg0].concat()))
            .collect::<Result<Vec<_>, _>>()?
    };
    let argv = argv.iter().map(c).collect::<Result<Vec<_>, _>>()?;
    let envp = env.iter().map(c).collect::<Result<Vec<_>, _>>()?;
    Ok((argv, envp, candidates))
}

/// The outer helper, one line per step (see `Step`, in this order): pid 1
/// goes on in [`pid1`], the command in `command::setup`.
fn outer(report_fd: &OwnedFd) -> Result<i32, Fail> {
    sanitize_fds()?;
    let spec = read_spec()?;
    let prep = prepare(&spec)?;
    let (lifeline, cgroup) = adopt_run_fds(spec.cgroup);
    let set = block_signals()?;
    let (chan_outer, chan_pid1) = chan::pair().map_err(|e| Fail::io(Step::Channel, e))?;
    drop_host_groups()?;
    shared_net::join(spec.netns)?;
    let flags = clone_flags(&spec)?;
    let (pid, pidfd, via) = match spawn_pid1(flags, cgroup.as_ref())? {
        (sys::Forked::Child, via) => {
            drop((chan_outer, lifeline, cgroup));
            run_pid1(&spec, &prep, via, chan_pid1, report_fd)
        }
        (sys::Forked::Parent { pid, pidfd }, via) => (pid, pidfd, via),
    };
    drop(chan_pid1);
    if spec.mode == Mode::Full {
        release_output();
    }
    release_pid1(pid, pidfd.as_fd(), via, cgroup.as_ref(), &spec, &chan_outer)?;
    // Open until this process exits: its hang-up tells pid 1 that this
    // process is gone (`switch_ids`).
    let (code, orphaned) = supervise(pid, pidfd.as_fd(), &lifeline, &set)?;
    drop(chan_outer);
    clean_up(spec.mode, orphaned, cgroup);
    Ok(code)
}

/// `Sanitize`: keep 0-2 and the protocol fds; anything else inherited is
/// closed, and the protocol fds become close-on-exec so the command never
/// sees them.
pub(crate) fn sanitize_fds() -> Result<(), Fail> {
    sys::close_range_from(LAST_FD as u32 + 1, 0).map_err(|e| Fail::io(Step::Sanitize, e))?;
    sys::close_range_from(SPEC_FD as u32, libc::CLOSE_RANGE_CLOEXEC).map_err(|e| Fail::io(Step::Sanitize, e))
}

/// The lifeline (fd 5) and, when the spec says one is passed, the cgroup
/// directory (fd 6).
pub(crate) fn adopt_run_fds(cgroup: bool) -> (OwnedFd, Option<OwnedFd>) {
    // SAFETY: fd 5 is the lifeline the library passed (checked open in
    // main); nothing else owns it.
    let lifeline = unsafe { sys::adopt(LIFELINE_FD) };
    // SAFETY: fd 6 is the cgroup directory the library passed.
    let cgroup = cgroup.then(|| unsafe { sys::adopt(CGROUP_FD) });
    (lifeline, cgroup)
}

/// `BlockSignals`: block the signals we handle; the command unblocks them
/// before exec.
pub(crate) fn block_signals() -> Result<SigSet, Fail> {
    let set = handled_signals();
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), None)
        .map_err(|e| Fail::io(Step::BlockSignals, errno(e)))?;
    Ok(set)
}

/// `DropGroups`: a root caller drops host root's supplementary groups,
/// which no mapping could hide (setgroups is denied inside), and which the
/// landlock-only mode's uid-0 command must not keep either.
pub(crate) fn drop_host_groups() -> Result<(), Fail> {
    if nix::unistd::getuid().is_root() {
        nix::unistd::setgroups(&[]).map_err(|e| Fail::io(Step::DropGroups, errno(e)))?;
    }
    Ok(())
}

/// The clone flags. The network namespace is not made by clone3: the outer
/// helper makes it on the other core while pid 1 builds the root (see
/// `parallel_netns`). The landlock-only mode makes no namespace at all
/// (`CheckIds`, `Subreaper`, `ScopeSignals`): then both this process and
/// pid 1 become child subreapers, so that nothing the command starts
/// (setsid, double fork) escapes the final sweep.
fn clone_flags(spec: &SpawnSpec) -> Result<u64, Fail> {
    if spec.mode == Mode::Full {
        return Ok((libc::CLONE_NEWUSER
            | libc::CLONE_NEWNS
            | libc::CLONE_NEWPID
            | libc::CLONE_NEWIPC
            | libc::CLONE_NEWUTS) as u64);
    }
    let ids = nix::unistd::getresuid().map_err(|e| Fail::io(Step::CheckIds, errno(e)))?;
    let roots = [ids.real, ids.effective, ids.saved].iter().filter(|u| u.is_root()).count();
    if roots != 0 && roots != 3 {
        // A root effective or saved uid behind an unprivileged real one
        // (or the reverse): a setuid start, never run. A root caller
        // (all three 0) is allowed: its command drops every capability
        // and locks the securebits (command.rs).
        return Err(Fail::errno(Step::CheckIds, libc::EPERM));
    }
    nix::sys::prctl::set_child_subreaper(true).map_err(|e| Fail::io(Step::Subreaper, errno(e)))?;
    command::scope_signals()?;
    Ok(0)
}

/// In the new child: become pid 1; never returns.
fn run_pid1(spec: &SpawnSpec, prep: &Prepared, via: CloneCall, chan: chan::End, report_fd: &OwnedFd) -> ! {
    let f = match pid1(spec, prep, via, chan, report_fd) {
        Ok(never) => match never {},
        Err(f) => f,
    };
    report(report_fd, Record::Error { step: Ok(f.step), errno: f.errno, detail: f.detail });
    sys::exit_now(f.exit_code())
}

/// `JoinCgroup`, then the maps, idmapped trees and network namespace
/// (`start_pid1`). Without clone3 pid 1 was born in our cgroup: move it into
/// the per-command one now. It waits for our first message before it does
/// anything, so it runs nothing (and forks no command) outside the leaf. On
/// a failure pid 1 is killed and reaped.
fn release_pid1(
    pid: libc::pid_t,
    pidfd: BorrowedFd<'_>,
    via: CloneCall,
    cgroup: Option<&OwnedFd>,
    spec: &SpawnSpec,
    chan_outer: &chan::End,
) -> Result<(), Fail> {
    let joined = match (via, cgroup) {
        (CloneCall::Clone, Some(cg)) => sys::join_cgroup(cg.as_fd(), pid).map_err(|e| Fail::io(Step::JoinCgroup, e)),
        _ => Ok(()),
    };
    if let Err(f) = joined.and_then(|()| start_pid1(pid, spec, chan_outer)) {
        let _ = sys::pidfd_send_signal(pidfd, libc::SIGKILL);
        let _ = waitpid(Pid::from_raw(pid), None);
        return Err(f);
    }
    Ok(())
}

/// Pid 1 is gone. In landlock-only mode pid 1 sweeps on a normal exit;
/// when it was killed (timeout, lost caller) its orphans came to us. When
/// the library is gone, nobody else removes the cgroup.
pub(crate) fn clean_up(mode: Mode, orphaned: bool, cgroup: Option<OwnedFd>) {
    if mode != Mode::Full {
        sweep_descendants();
    }
    if let (true, Some(cg)) = (orphaned, cgroup) {
        remove_orphaned_cgroup(&cg);
    }
}

/// Make pid 1: `clone3` (born in the cgroup), or, where `clone3` answers
/// `ENOSYS` as a container's default seccomp profile makes it do, `clone(2)`
/// with the same namespace flags. Only `clone3`'s own flags live in memory a
/// filter cannot read; `clone`'s can be (and there are) inspected, so a
/// profile that refuses namespaces refuses them here with `EPERM`, which
/// comes back under `Clone` with the call named in `detail`.
pub(crate) fn spawn_pid1(flags: u64, cgroup: Option<&OwnedFd>) -> Result<(sys::Forked, CloneCall), Fail> {
    match sys::clone3(flags, cgroup.map(|c| c.as_fd())) {
        Ok(f) => Ok((f, CloneCall::Clone3)),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => sys::clone_legacy(flags)
            .map(|f| (f, CloneCall::Clone))
            .map_err(|e| Fail::io(Step::Clone, e).clone_detail(CLONE_DETAIL_CLONE)),
        Err(e) => Err(Fail::io(Step::Clone, e).clone_detail(CLONE_DETAIL_CLONE3)),
    }
}

/// The library died (its lifeline closed) while the sandbox ran, so nobody
/// else will remove the per-command cgroup: pid 1 is reaped, which means the
/// pid namespace, and with it everything in the cgroup, is gone; remove the
/// now empty leaf. Best effort, bounded.
fn remove_orphaned_cgroup(cg: &OwnedFd) {
    if let Ok(path) = std::fs::read_link(format!("/proc/self/fd/{}", cg.as_raw_fd())) {
        remove_when_empty(vec![path], std::time::Duration::from_millis(200), std::time::Duration::from_millis(2));
    }
}

/// Remove each of the cgroup leaves `left` once it is empty (its removal
/// refused with `EBUSY` until then), trying every `nap` for at most
/// `budget`. A leaf gone, or out of this process's reach, is passed over:
/// after joining pid 1's user namespace (network none) host root's
/// directories are, and the library sweeps such leaves the next time a
/// Sandbox is made.
pub(crate) fn remove_when_empty(
    mut left: Vec<std::path::PathBuf>,
    budget: std::time::Duration,
    nap: std::time::Duration,
) {
    let deadline = std::time::Instant::now() + budget;
    while !left.is_empty() && std::time::Instant::now() < deadline {
        left.retain(|path| matches!(std::fs::remove_dir(path), Err(e) if e.raw_os_error() == Some(libc::EBUSY)));
        if !left.is_empty() {
            std::thread::sleep(nap);
        }
    }
}

/// Write pid 1's maps; for a root caller make the idmapped trees through
/// pid 1's own user namespace (host side, where only host root may idmap);
/// send them; then make the network namespace and send it too.
fn start_pid1(pid: libc::pid_t, spec: &SpawnSpec, chan_outer: &chan::End) -> Result<(), Fail> {
    if spec.mode == Mode::LandlockOnly {
        return chan_outer.send_go(b'm', &[]).map_err(|e| Fail::io(Step::HandOver, e));
    }
    write_maps(pid, &spec.identity)?;
    let userns = std::fs::File::open(format!("/proc/{pid}/ns/user"))
        .map(OwnedFd::from)
        .map_err(|e| Fail::io(Step::OpenUserns, e))?;
    let trees = if spec.mounts.iter().any(MountOp::is_idmapped) {
        let skip_readonly = cfg!(debug_assertions) && spec.test_switches.skip_readonly;
        mounts::idmapped_trees(&spec.mounts, skip_readonly, userns.as_fd())?
    } else {
        Vec::new()
    };
    let raw: Vec<i32> = trees.iter().flatten().map(|t| t.as_raw_fd()).collect();
    chan_outer.send_go(b'm', &raw).map_err(|e| Fail::io(Step::HandOver, e))?;
    drop(trees);
    if spec.network == Network::None && spec.netns == Netns::Private {
        let aside = cpus::step_aside(pid);
        let made = parallel_netns(&userns);
        cpus::step_back(aside);
        let netns = made?;
        chan::send(chan_outer, b'n', &[netns.as_raw_fd()]).map_err(|e| Fail::io(Step::NetNamespace, e))?;
    }
    Ok(())
}

/// Join pid 1's user namespace (we own it, so we hold every capability
/// there) and make the network namespace with loopback up. This takes about
/// half a millisecond, which now overlaps with pid 1 building the root.
/// Afterwards the outer helper only supervises, so leaving the host user
/// namespace costs it nothing.
pub(crate) fn parallel_netns(userns: &OwnedFd) -> Result<OwnedFd, Fail> {
    nix::sched::setns(userns, nix::sched::CloneFlags::CLONE_NEWUSER)
        .map_err(|e| Fail::io(Step::NetNamespace, errno(e)))?;
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| Fail::io(Step::NetNamespace, errno(e)))?;
    sys::loopback_up().map_err(|e| Fail::io(Step::NetNamespace, e))?;
    std::fs::File::open("/proc/thread-self/ns/net").map(OwnedFd::from).map_err(|e| Fail::io(Step::NetNamespace, e))
}

pub(crate) fn write_maps(pid: libc::pid_t, id: &Identity) -> Result<(), Fail> {
    let base = format!("/proc/{pid}");
    std::fs::write(format!("{base}/uid_map"), format!("{} {} 1\n", id.inside_uid, id.outside_uid))
        .map_err(|e| Fail::io(Step::MapUid, e))?;
    match std::fs::write(format!("{base}/setgroups"), "deny") {
        Ok(()) => {}
        // Kernels before 3.19 have no setgroups file.
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(Fail::io(Step::DenySetgroups, e)),
    }
    std::fs::write(format!("{base}/gid_map"), format!("{} {} 1\n", id.inside_gid, id.outside_gid))
        .map_err(|e| Fail::io(Step::MapGid, e))?;
    Ok(())
}

/// The outer helper's loop: forward signals to pid 1, kill it when the
/// lifeline closes, and exit with its status once it is gone.
/// Returns pid 1's status and whether the lifeline closed first (the library
/// is gone).
pub(crate) fn supervise(
    pid: libc::pid_t,
    pidfd: BorrowedFd<'_>,
    lifeline: &OwnedFd,
    set: &SigSet,
) -> Result<(i32, bool), Fail> {
    let sfd = SignalFd::with_flags(set, SfdFlags::SFD_CLOEXEC).map_err(|e| Fail::io(Step::SignalFd, errno(e)))?;
    let mut lifeline_open = true;
    loop {
        let mut fds = vec![PollFd::new(sfd.as_fd(), PollFlags::POLLIN), PollFd::new(pidfd, PollFlags::POLLIN)];
        if lifeline_open {
            fds.push(PollFd::new(lifeline.as_fd(), PollFlags::POLLIN));
        }
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(Fail::io(Step::Supervise, errno(e))),
        }
        let ready = |i: usize| fds.get(i).and_then(|f| f.revents()).is_some_and(|r| !r.is_empty());
        let (sig_ready, child_ready, life_ready) = (ready(0), ready(1), ready(2));
        drop(fds);
        if sig_ready {
            if let Ok(Some(info)) = sfd.read_signal() {
                let signo = info.ssi_signo as i32;
                if signo != libc::SIGCHLD {
                    let _ = sys::pidfd_send_signal(pidfd, signo);
                }
            }
        }
        if life_ready {
            // The library is gone or wants the sandbox dead.
            lifeline_open = false;
            let _ = sys::pidfd_send_signal(pidfd, libc::SIGKILL);
        }
        if child_ready {
            match waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(_, code)) => return Ok((code, !lifeline_open)),
                Ok(WaitStatus::Signaled(_, sig, _)) => return Ok((128 + sig as i32, !lifeline_open)),
                Ok(_) => {}
                Err(nix::Error::EINTR) => {}
                Err(e) => return Err(Fail::io(Step::Supervise, errno(e))),
            }
        }
    }
}

pub(crate) enum Never {}

/// Pid 1 of the sandbox, one line per step (see `Step`).
fn pid1(
    spec: &SpawnSpec,
    prep: &Prepared,
    via: CloneCall,
    chan: chan::End,
    report_fd: &OwnedFd,
) -> Result<Never, Fail> {
    let trees = await_go_ahead(&chan)?;
    if spec.mode == Mode::LandlockOnly {
        return landlock_only_pid1(spec, prep, via, report_fd);
    }
    switch_ids(&spec.identity, &chan)?;
    build_root(spec, trees)?;
    join_network(spec.network, spec.netns, &chan)?;
    drop(chan);
    become_init()?;
    let child = fork_command(spec, prep, via, report_fd)?;
    sys::exit_now(reap(child, report_fd))
}

/// A one run's root, from every mount of its spec (with the idmapped
/// `trees` that came with it), entered; and the host name.
fn build_root(spec: &SpawnSpec, trees: Vec<OwnedFd>) -> Result<(), Fail> {
    let all: Vec<usize> = (0..spec.mounts.len()).collect();
    let sources = mounts::open_sources(None, &spec.mounts, &all, premade_trees(&spec.mounts, trees)?)?;
    mounts::build_root(spec, &sources)?;
    drop(sources);
    nix::unistd::sethostname("portcullis").map_err(|e| Fail::io(Step::Hostname, errno(e)))
}

/// `ParentDeath`: the outer helper is single-threaded, so the parent-death
/// signal is tied to the right thread; waiting for its first message
/// afterwards closes the race with a parent that died before the prctl
/// (EOF, not a message). The message carries the idmapped trees.
pub(crate) fn await_go_ahead(chan: &chan::End) -> Result<Vec<OwnedFd>, Fail> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(|e| Fail::io(Step::ParentDeath, errno(e)))?;
    if chan.await_go().is_err() {
        sys::exit_now(EXIT_SETUP);
    }
    match chan::recv(chan) {
        Ok(Some((b'm', fds))) => Ok(fds),
        _ => sys::exit_now(EXIT_SETUP),
    }
}

/// `SwitchIds`: become the mapped ids. A clone keeps its parent's host ids;
/// for a root caller those (host root) are unmapped here, so switch to the
/// inside ids, which map to `nobody`. Capabilities in this namespace stay.
///
/// A change of the effective ids clears the parent-death signal (found in
/// review: as root, pid 1 outlived a killed outer helper and the command
/// ran past its timeout), so it is set again, and the outer helper's end of
/// `chan` checked: a helper that died in between has hung it up.
pub(crate) fn switch_ids(id: &Identity, chan: &chan::End) -> Result<(), Fail> {
    set_ids(id)?;
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(|e| Fail::io(Step::ParentDeath, errno(e)))?;
    if chan.hung_up() {
        sys::exit_now(EXIT_SETUP);
    }
    Ok(())
}

/// `SwitchIds` alone: the inside ids (capabilities in this namespace stay).
pub(crate) fn set_ids(id: &Identity) -> Result<(), Fail> {
    let (gid, uid) = (nix::unistd::Gid::from_raw(id.inside_gid), nix::unistd::Uid::from_raw(id.inside_uid));
    nix::unistd::setresgid(gid, gid, gid).map_err(|e| Fail::io(Step::SwitchIds, errno(e)))?;
    nix::unistd::setresuid(uid, uid, uid).map_err(|e| Fail::io(Step::SwitchIds, errno(e)))
}

/// The idmapped trees that came with a spec, one per `idmap` bind of its
/// mounts in order (`None` for the other mounts). Exactly as many as the
/// spec has such binds, or `ReadSpec` refuses it with `EINVAL` (a missing
/// tree would have the bind made from the host's path without its idmap; an
/// extra descriptor would be taken for a tree).
pub(crate) fn premade_trees(mounts: &[MountOp], trees: Vec<OwnedFd>) -> Result<Vec<Option<OwnedFd>>, Fail> {
    let wanted = mounts.iter().filter(|m| m.is_idmapped()).count();
    if trees.len() != wanted {
        return Err(Fail::errno(Step::ReadSpec, libc::EINVAL));
    }
    let mut trees = trees.into_iter();
    Ok(mounts.iter().map(|m| if m.is_idmapped() { trees.next() } else { None }).collect())
}

/// `JoinNetwork`: with `--network none`, join the network namespace the
/// outer helper made meanwhile (a shared one was joined before the clone).
pub(crate) fn join_network(network: Network, netns: Netns, chan: &OwnedFd) -> Result<(), Fail> {
    if network != Network::None || netns != Netns::Private {
        return Ok(());
    }
    let netns = match chan::recv(chan) {
        Ok(Some((b'n', mut fds))) if fds.len() == 1 => fds.remove(0),
        _ => return Err(Fail::errno(Step::JoinNetwork, libc::EPIPE)),
    };
    nix::sched::setns(&netns, nix::sched::CloneFlags::CLONE_NEWNET).map_err(|e| Fail::io(Step::JoinNetwork, errno(e)))
}

/// `NonDumpable`, and the name `ps` shows.
pub(crate) fn become_init() -> Result<(), Fail> {
    nix::sys::prctl::set_dumpable(false).map_err(|e| Fail::io(Step::NonDumpable, errno(e)))?;
    let _ = nix::sys::prctl::set_name(c"portcullis-init");
    Ok(())
}

/// Fork the command; the child becomes it (or reports why not and exits).
pub(crate) fn fork_command(
    spec: &SpawnSpec,
    prep: &Prepared,
    via: CloneCall,
    report_fd: &OwnedFd,
) -> Result<Pid, Fail> {
    // SAFETY: pid 1 is single-threaded (a fresh clone of the single-threaded
    // outer helper), so the child may do anything after fork.
    match unsafe { nix::unistd::fork() }.map_err(|e| Fail::io(Step::ForkCommand, errno(e)))? {
        nix::unistd::ForkResult::Child => {
            let f = command::run(spec, prep, via, report_fd, false);
            report(report_fd, Record::Error { step: Ok(f.step), errno: f.errno, detail: f.detail });
            sys::exit_now(f.exit_code());
        }
        nix::unistd::ForkResult::Parent { child } => Ok(child),
    }
}

/// Pid 1 in landlock-only mode: no namespaces and no mounts; a child
/// subreaper that sweeps every descendant when the command ends.
fn landlock_only_pid1(spec: &SpawnSpec, prep: &Prepared, via: CloneCall, report_fd: &OwnedFd) -> Result<Never, Fail> {
    nix::sys::prctl::set_child_subreaper(true).map_err(|e| Fail::io(Step::Subreaper, errno(e)))?;
    // With no pid namespace, dying by SIGKILL with the outer helper would
    // leave the command's tree running (its orphans would pass to a process
    // outside the sandbox). So the parent-death signal becomes SIGCHLD, which
    // is blocked and waited for below: on the outer helper's death we sweep.
    nix::sys::prctl::set_pdeathsig(Signal::SIGCHLD).map_err(|e| Fail::io(Step::ParentDeath, errno(e)))?;
    // Is our parent still the outer helper? Only it shares our Landlock
    // domain (it entered a scope-only one before the clone), so a signal 0 to
    // our parent passes exactly while it lives: once it is gone, our new
    // parent is outside every sandbox domain, and signal scoping refuses it.
    // This also covers a helper that died before either prctl took effect.
    let parent = nix::unistd::getppid();
    if nix::sys::signal::kill(parent, None).is_err() {
        sys::exit_now(EXIT_SETUP);
    }
    // A domain of our own, nested in the outer helper's: our kill(-1) sweep
    // then reaches the command's tree but not the outer helper.
    command::scope_signals()?;
    become_init()?;
    let child = fork_command(spec, prep, via, report_fd)?;
    let Some((code, record)) = reap_command(child, Some(parent)) else {
        // The outer helper is gone: nobody waits for a report.
        sweep_descendants();
        sys::exit_now(128 + libc::SIGKILL)
    };
    sweep_descendants();
    report(report_fd, record);
    sys::exit_now(code)
}

/// Kill and reap every process of this process's Landlock domain (and the
/// domains nested in it) — in landlock-only mode that is exactly the
/// command's tree: the outer helper put itself in a scope-only domain before
/// anything else, so `kill(-1)` reaches neither the caller nor any other
/// process of the user. Repeated until nothing is left, so forks racing the
/// kill are caught. Bounded to about five seconds.
fn sweep_descendants() {
    for _ in 0..5000 {
        // SAFETY: kill(-1, SIGKILL) is a plain syscall; Landlock's signal
        // scoping confines it to our own domain and the ones nested in it.
        unsafe { libc::kill(-1, libc::SIGKILL) };
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => break,
                Ok(_) => continue,
                Err(nix::Error::ECHILD) => {
                    // No child left. Anything still in the domain is not our
                    // descendant any more (it was reparented past us, which a
                    // subreaper prevents): nothing to wait for.
                    return;
                }
                Err(_) => break,
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// Wait for the command (reaping anything else that dies meanwhile) and
/// forward signals to it; returns pid 1's exit code and the record to send.
/// With `parent`, returns `None` as soon as that is no longer our parent
/// (it died: the landlock-only mode's parent-death signal is SIGCHLD).
fn reap_command(child: Pid, parent: Option<Pid>) -> Option<(i32, Record)> {
    let set = handled_signals();
    loop {
        let sig = match set.wait() {
            Ok(s) => s,
            Err(_) => continue,
        };
        if sig != Signal::SIGCHLD {
            let _ = nix::sys::signal::kill(child, sig);
            continue;
        }
        if let Some(done) = reaped(child) {
            return Some(done);
        }
        if parent.is_some_and(|p| nix::unistd::getppid() != p) {
            return None;
        }
    }
}

/// Pid 1 of the full sandbox: reap every child; when the command ends,
/// kill and reap every other process of the pid namespace, then report the
/// command's status and return it. The report thus also says that nothing
/// of the command is left, so the library may answer on it while the
/// namespaces are torn down behind (see `sandbox::run::wait`).
pub(crate) fn reap(child: Pid, report_fd: &OwnedFd) -> i32 {
    // The command has its copies of the output pipes; ours would keep them
    // open past the command's end.
    release_output();
    // Without a parent to watch, reap_command returns only with the command.
    let Some((code, record)) = reap_command(child, None) else {
        return EXIT_SETUP;
    };
    sweep_namespace();
    report(report_fd, record);
    code
}

/// [`reap`] for a pid 1 with no outer helper above it (a slot the zygote
/// cloned, `slot::direct`): it also watches the `lifeline`, and when that
/// ends (the library is gone, or wants the sandbox dead) exits at once,
/// which makes the kernel kill everything else in the pid namespace.
pub(crate) fn reap_watching(child: Pid, report_fd: &OwnedFd, lifeline: &OwnedFd) -> i32 {
    release_output();
    let set = handled_signals();
    let Ok(sfd) = SignalFd::with_flags(&set, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK) else {
        sys::exit_now(EXIT_SETUP)
    };
    loop {
        let mut fds = [PollFd::new(sfd.as_fd(), PollFlags::POLLIN), PollFd::new(lifeline.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(nix::Error::EINTR) => {}
            Err(_) => sys::exit_now(EXIT_SETUP),
        }
        if fds[1].revents().is_some_and(|r| !r.is_empty()) {
            sys::exit_now(128 + libc::SIGKILL);
        }
        while let Ok(Some(info)) = sfd.read_signal() {
            let signo = info.ssi_signo as i32;
            if signo != libc::SIGCHLD {
                // SAFETY: kill(2) on our child, not reaped (a pid 1 reaps it
                // only here).
                unsafe { libc::kill(child.as_raw(), signo) };
            }
        }
        if let Some((code, record)) = reaped(child) {
            sweep_namespace();
            report(report_fd, record);
            return code;
        }
    }
}

/// Reap whatever has exited; the command's exit code and record once it is
/// among them.
fn reaped(child: Pid) -> Option<(i32, Record)> {
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(p, code)) if p == child => return Some((code, Record::Exited(code))),
            Ok(WaitStatus::Signaled(p, s, _)) if p == child => {
                return Some((128 + s as i32, Record::Signaled(s as i32)))
            }
            Ok(WaitStatus::StillAlive) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

/// Kill every other process of our pid namespace (we are its pid 1, so
/// `kill(-1)` reaches exactly them, and the kernel completes it against
/// concurrent forks: a fork of a process it reached fails), then reap until
/// none is left. `__WALL` waits for children made with any exit signal;
/// the others become our children one by one as their parents die, so the
/// blocking wait cannot end (`ECHILD`) while any of them lives. A reaped
/// process has finished exiting: it writes nothing any more.
fn sweep_namespace() {
    // SAFETY: kill(-1, SIGKILL) is a plain syscall; from pid 1 of a pid
    // namespace it reaches only the other processes of that namespace.
    unsafe { libc::kill(-1, libc::SIGKILL) };
    loop {
        match waitpid(None, Some(WaitPidFlag::__WALL)) {
            Ok(_) | Err(nix::Error::EINTR) => continue,
            // ECHILD: nobody is left.
            Err(_) => return,
        }
    }
}

/// Point our fds 1 and 2 (the command's output pipes, inherited from the
/// library) at `/dev/null`: the helper writes nothing to them, and the
/// library reads their end as the end of the command's output. Where
/// `/dev/null` cannot be opened they stay (the library then waits for
/// the helper's exit, as it would anyway).
pub(crate) fn release_output() {
    let Ok(null) = nix::fcntl::open(
        "/dev/null",
        nix::fcntl::OFlag::O_WRONLY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    ) else {
        return;
    };
    for fd in [1, 2] {
        let _ = sys::dup_onto(null.as_fd(), fd);
    }
}

/// The static musl build's allocator (see Cargo.toml). The helper is
/// single-threaded, so its lock is never held across the fork-style clones.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOC: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

#[cfg(test)]
mod tests {
    use super::*;

    /// build.rs's programs are what this code compiles now, for every
    /// profile (a native build has all four).
    #[test]
    fn precompiled_programs_match() {
        assert_eq!(precompiled::PROGRAMS.len(), 4, "a native build precompiles every profile");
        for &((degraded, network_none), main, folded) in precompiled::PROGRAMS {
            let profile = filter::Profile { degraded, network_none };
            assert_eq!(Some(main.to_vec()), filter::compile_for(profile).ok(), "{degraded}/{network_none}");
            assert_eq!(Some(folded.to_vec()), observe::compile_with(profile).ok(), "{degraded}/{network_none}");
        }
        let Ok(p) = compile(Mode::Full, Network::None, true) else { panic!("compile") };
        let want = filter::Profile { degraded: false, network_none: true };
        assert_eq!(Some(p.filter), filter::compile_for(want).ok());
        assert_eq!(p.folded, observe::compile_with(want).ok());
    }
}
