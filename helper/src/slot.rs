//! A pre-made sandbox (`portcullis-helper --slot`): the same three processes
//! and the same steps as a one-shot run, split at the request.
//!
//! The library starts the helper with a `SOCK_SEQPACKET` socket on fd 3
//! instead of the spec's memfd, and the report pipe, the lifeline and the
//! cgroup as usual. Messages are a tag byte and descriptors (`chan`):
//!
//! * `s` (library to outer helper) with a memfd holding a [`SlotSpec`]:
//!   everything that does not depend on the command. The outer helper
//!   compiles the seccomp programs, clones pid 1 into its namespaces (and
//!   the cgroup), writes its maps, makes its network namespace; pid 1 makes
//!   the root tmpfs, stacked on `/`, and the slot's mounts (the system
//!   binds, `/tmp`, `/proc`, `/dev`), keeps a detached copy of the host's
//!   tree for the request's bind sources, pivots into the root and detaches
//!   the old one (`mounts::begin_root_keeping_host`: on a kernel that cannot
//!   clone mounts from a detached tree it keeps none and pivots at the
//!   request instead), sets the host name, joins the network and becomes
//!   non-dumpable. Then it forks the command's process ahead, which takes
//!   its own session, puts the signal dispositions back to their defaults
//!   (SIGPIPE's at its setup) and clears the capability bounding set
//!   (`command::ahead`); pid 1 keeps nothing of the slot and waits to reap.
//! * `k` (command's process to outer helper): built. The outer helper hands
//!   it the library's socket (`q`) and says `k` to the library, with pid
//!   1's user namespace when the caller is root. From then on the outer
//!   helper only supervises: the request goes straight to the command's
//!   process, with no process in between.
//! * `o` (library to command's process) with the observer's socket, when
//!   the run is observed, then `r` with a memfd holding the [`SpawnSpec`]
//!   of the one command the slot will run and, for a root caller, the
//!   idmapped trees the library made through that user namespace (the same
//!   function the outer helper uses for a one-shot run:
//!   `portcullis_helper::mount_api::idmapped_trees`). The command's process
//!   checks that the slot builds exactly that spec's sandbox
//!   ([`SlotSpec::admits`]; otherwise the run fails with `EINVAL` under
//!   `ReadSpec`, and nothing runs), opens the request's bind sources (in its
//!   copy of the host's tree, which it then hands to the outer helper, who
//!   keeps it unread until it exits), makes the request's own mounts
//!   (workspace, grants, read roots, carve-outs, masks) in the plan's order
//!   under the root (it still holds pid 1's capabilities; the mounts are the
//!   namespace's), makes the root read-only (pivoting first if the slot did
//!   not ahead), and goes on with the rest of a command's setup
//!   (`command::run`). Pid 1 reaps, sweeps and reports as in a one-shot run.
//!   From there on nothing differs.
//!
//! A slot the zygote clones (`direct`) has no outer helper: the zygote
//! clones pid 1 into the slot's namespaces and cgroup and writes its maps;
//! pid 1 reads `s` itself, makes the slot's own network namespace when it
//! has one, and watches the lifeline while it reaps; the command's process
//! says `k` (bare) on the socket it already holds; the copy of the host's
//! tree goes back to the library on that socket (`h`).
//!
//! A slot never runs more than one command: all its processes exit with it.
//! The end of the lifeline, or of the socket before a request (the pool was
//! dropped, or its process died), ends the slot: the outer helper kills pid
//! 1 (before `k`, or when the lifeline ends), or the command's process
//! exits and pid 1 after it (the socket's end after `k`); pid 1's pid
//! namespace, mounts and network die with it; a pid 1 (or a command's process, before its
//! request) that fails while the slot is built reports the step on the
//! report pipe and exits, and the outer helper with it.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::wait::waitpid;
use nix::unistd::Pid;

use portcullis_helper::report::{CloneCall, Record, Step};
use portcullis_helper::spec::{MountOp, Netns, Network, Request, SlotSpec, SpawnSpec, SLOT_ATTACH, SPEC_VERSION};
use portcullis_helper::{OBSERVE_FD, SPEC_FD};

use crate::{chan, mounts, sys, Fail, Never, Programs};

/// Full-mode clone flags (a slot is never landlock-only).
pub(crate) const FLAGS: u64 =
    (libc::CLONE_NEWUSER | libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS) as u64;

/// The outer helper of a slot.
pub fn outer(report_fd: &OwnedFd) -> Result<i32, Fail> {
    crate::sanitize_fds()?;
    // SAFETY: fd 3 is the slot's socket the library passed (checked open in
    // main); nothing else owns it.
    let sock = unsafe { sys::adopt(SPEC_FD) };
    let base = read_slot(&sock)?;
    let programs = crate::compile(portcullis_helper::spec::Mode::Full, base.network, true)?;
    let (lifeline, cgroup) = crate::adopt_run_fds(base.cgroup);
    let set = crate::block_signals()?;
    let (chan_outer, chan_pid1) = chan::pair().map_err(|e| Fail::io(Step::Channel, e))?;
    crate::drop_host_groups()?;
    // The workspace's network, when the slot shares it: joined before the
    // clone, so pid 1 is born in it.
    crate::shared_net::join(base.netns)?;
    let (pid, pidfd, via) = match crate::spawn_pid1(FLAGS, cgroup.as_ref())? {
        (sys::Forked::Child, via) => {
            drop((chan_outer, lifeline, cgroup, sock));
            run_pid1(&base, programs, via, chan_pid1, report_fd)
        }
        (sys::Forked::Parent { pid, pidfd }, via) => (pid, pidfd, via),
    };
    drop(chan_pid1);
    crate::release_output();
    let kill = |f: Fail| {
        let _ = sys::pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
        let _ = waitpid(Pid::from_raw(pid), None);
        f
    };
    let userns = start(pid, via, cgroup.as_ref(), &base, &chan_outer).map_err(kill)?;
    if !await_built(&sock, &chan_outer, pidfd.as_fd(), &lifeline)? || !hand_over(sock, pid, &userns, &chan_outer) {
        // The pool is gone (or pid 1 failed and reported why): nothing ran.
        let _ = sys::pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
    }
    drop(userns);
    // Open until this process exits: the command's process sends its copy
    // of the host's tree here once the request's mounts are made, and it
    // stays queued (never read) until the socket closes with this process.
    let (code, orphaned) = crate::supervise(pid, pidfd.as_fd(), &lifeline, &set)?;
    drop(chan_outer);
    crate::clean_up(portcullis_helper::spec::Mode::Full, orphaned, cgroup);
    Ok(code)
}

/// `ReadSpec`: the `s` message and its [`SlotSpec`].
fn read_slot(sock: &OwnedFd) -> Result<SlotSpec, Fail> {
    let fd = match chan::recv(sock) {
        Ok(Some((b's', mut fds))) if fds.len() == 1 => fds.remove(0),
        Ok(None) => sys::exit_now(crate::EXIT_SETUP),
        _ => return Err(Fail::errno(Step::ReadSpec, libc::EINVAL)),
    };
    let buf = crate::read_all(fd)?;
    let base: SlotSpec = serde_json::from_slice(&buf).map_err(|_| Fail::errno(Step::ReadSpec, libc::EINVAL))?;
    // The slot's mounts are opened as the mapped ids, never idmapped.
    let idmapped = base.mounts.iter().any(MountOp::is_idmapped);
    let shared = matches!(base.netns, Netns::Shared { .. });
    if base.version != SPEC_VERSION || idmapped || (shared && base.network != Network::None) {
        return Err(Fail::errno(Step::ReadSpec, libc::EINVAL));
    }
    if !cfg!(debug_assertions) && base.test_switches.any() {
        return Err(Fail::errno(Step::ReadSpec, libc::EPERM));
    }
    Ok(base)
}

/// `JoinCgroup` (after the `clone(2)` fallback), the maps, the go-ahead,
/// the network namespace; returns pid 1's user namespace (for the idmaps).
fn start(
    pid: libc::pid_t,
    via: CloneCall,
    cgroup: Option<&OwnedFd>,
    base: &SlotSpec,
    chan_outer: &chan::End,
) -> Result<OwnedFd, Fail> {
    if let (CloneCall::Clone, Some(cg)) = (via, cgroup) {
        sys::join_cgroup(cg.as_fd(), pid).map_err(|e| Fail::io(Step::JoinCgroup, e))?;
    }
    crate::write_maps(pid, &base.identity)?;
    let userns = std::fs::File::open(format!("/proc/{pid}/ns/user"))
        .map(OwnedFd::from)
        .map_err(|e| Fail::io(Step::OpenUserns, e))?;
    chan_outer.send_go(b'm', &[]).map_err(|e| Fail::io(Step::HandOver, e))?;
    if base.network == Network::None && base.netns == Netns::Private {
        // Made in a child, so that this process stays in the host's user
        // namespace (where it removes the cgroup leaf at the end, as a
        // one-shot outer helper does).
        let netns = netns_in_child(&userns)?;
        chan::send(chan_outer, b'n', &[netns.as_raw_fd()]).map_err(|e| Fail::io(Step::NetNamespace, e))?;
    }
    Ok(userns)
}

/// `NetNamespace` in a short-lived child (it joins pid 1's user namespace,
/// which this process must not), handed back over a socket pair.
fn netns_in_child(userns: &OwnedFd) -> Result<OwnedFd, Fail> {
    let (mine, theirs) = chan::pair().map_err(|e| Fail::io(Step::NetNamespace, e))?;
    // SAFETY: this process is single-threaded, so the child may do anything.
    match unsafe { nix::unistd::fork() }.map_err(|e| Fail::io(Step::NetNamespace, crate::errno(e)))? {
        nix::unistd::ForkResult::Child => {
            drop(mine);
            let code = match crate::parallel_netns(userns) {
                Ok(ns) if chan::send(&theirs, b'n', &[ns.as_raw_fd()]).is_ok() => 0,
                Ok(_) => libc::EPIPE,
                Err(f) => f.errno,
            };
            sys::exit_now(code)
        }
        nix::unistd::ForkResult::Parent { child } => {
            drop(theirs);
            let got = chan::recv(&mine);
            let status = waitpid(child, None);
            match (got, status) {
                (Ok(Some((b'n', mut fds))), _) if fds.len() == 1 => Ok(fds.remove(0)),
                (_, Ok(nix::sys::wait::WaitStatus::Exited(_, errno))) if errno != 0 => {
                    Err(Fail::errno(Step::NetNamespace, errno))
                }
                _ => Err(Fail::errno(Step::NetNamespace, libc::EPIPE)),
            }
        }
    }
}

/// Wait for the command's process to say the slot is built (`k`); false
/// when the socket or the lifeline closed, or pid 1 died, first (the
/// library sends nothing before it has the `k`).
fn await_built(sock: &OwnedFd, chan_outer: &OwnedFd, pidfd: BorrowedFd<'_>, lifeline: &OwnedFd) -> Result<bool, Fail> {
    loop {
        let mut fds = [
            PollFd::new(sock.as_fd(), PollFlags::POLLIN),
            PollFd::new(pidfd, PollFlags::POLLIN),
            PollFd::new(lifeline.as_fd(), PollFlags::POLLIN),
            PollFd::new(chan_outer.as_fd(), PollFlags::POLLIN),
        ];
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) => {}
            Err(nix::Error::EINTR) => continue,
            Err(e) => return Err(Fail::io(Step::Supervise, crate::errno(e))),
        }
        let ready = |i: usize| fds.get(i).and_then(|f| f.revents()).is_some_and(|r| !r.is_empty());
        if ready(0) || ready(1) || ready(2) {
            return Ok(false);
        }
        if ready(3) {
            return Ok(matches!(chan::recv(chan_outer), Ok(Some((b'k', fds))) if fds.is_empty()));
        }
    }
}

/// The library's socket to the command's process (`q`), which reads the
/// request itself; then `k` to the library, with pid 1's pid (4 bytes,
/// little-endian: the one process of the run's cgroup the library then
/// expects to find there besides nothing) and pid 1's user namespace for a
/// root caller (the library makes the idmapped trees through it, as this
/// process does for a one-shot run). False when either could not be sent
/// (the slot is then given up).
fn hand_over(sock: OwnedFd, pid1: libc::pid_t, userns: &OwnedFd, chan_outer: &OwnedFd) -> bool {
    if chan::send(chan_outer, b'q', &[sock.as_raw_fd()]).is_err() {
        return false;
    }
    let ns = match nix::unistd::getuid().is_root() {
        true => vec![userns.as_raw_fd()],
        false => Vec::new(),
    };
    chan::send_with(&sock, b'k', &pid1.to_le_bytes(), &ns).is_ok()
}

/// Pid 1 of a slot the zygote cloned (`crate::zygote`, `c`), once let
/// go: its descriptors are placed as an outer helper's are (the slot's
/// socket, the report pipe, the lifeline), its maps written and its cgroup
/// joined by the zygote. It does the outer helper's part itself: reads the
/// slot's spec, and makes the network namespace when the slot has one of
/// its own (it holds every capability in its user namespace; a shared
/// network was joined by the zygote before the clone). Then the slot as
/// ever, except: the command's process says `k` to the library itself, on
/// the socket it already holds; the copy of the host's tree comes back to
/// pid 1, which holds it unread until it exits; and pid 1 watches the
/// lifeline while it reaps, since no outer helper does. It has no
/// parent-death signal: its parent is the library's thread that started
/// the zygote, which may end long before the library does.
pub fn direct(via: CloneCall) -> ! {
    // SAFETY: fd 4 is the report pipe the zygote placed; nothing else in
    // this process owns it.
    let report_fd = unsafe { sys::adopt(portcullis_helper::REPORT_FD) };
    let f = match pid1_direct(via, &report_fd) {
        Ok(never) => match never {},
        Err(f) => f,
    };
    crate::report(&report_fd, Record::Error { step: Ok(f.step), errno: f.errno, detail: f.detail });
    sys::exit_now(f.exit_code())
}

fn pid1_direct(via: CloneCall, report_fd: &OwnedFd) -> Result<Never, Fail> {
    crate::sanitize_fds()?;
    // SAFETY: fd 3 is the slot's socket the zygote placed; nothing else in
    // this process owns it.
    let sock = unsafe { sys::adopt(SPEC_FD) };
    let base = read_slot(&sock)?;
    let programs = crate::compile(portcullis_helper::spec::Mode::Full, base.network, true)?;
    let (lifeline, _) = crate::adopt_run_fds(false);
    crate::block_signals()?;
    crate::set_ids(&base.identity)?;
    let (root, host) = build_base(&base)?;
    if base.network == Network::None && base.netns == Netns::Private {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)
            .map_err(|e| Fail::io(Step::NetNamespace, crate::errno(e)))?;
        sys::loopback_up().map_err(|e| Fail::io(Step::NetNamespace, e))?;
    }
    crate::become_init()?;
    let ahead = Ahead { base: &base, programs, via, chan: None, sock: Some(sock), root, host };
    fork_ahead(ahead, report_fd, Some(lifeline))
}

/// What the command's process forked ahead starts from.
struct Ahead<'a> {
    base: &'a SlotSpec,
    programs: Programs,
    via: CloneCall,
    chan: Option<chan::End>,
    sock: Option<OwnedFd>,
    root: mounts::Root,
    host: Option<OwnedFd>,
}

/// Fork the command's process ahead ([`command_ahead`]); pid 1 keeps
/// nothing of the slot and reaps, watching the `lifeline` when it has one
/// to watch (no outer helper above it).
fn fork_ahead(ahead: Ahead<'_>, report_fd: &OwnedFd, lifeline: Option<OwnedFd>) -> ! {
    // SAFETY: pid 1 is single-threaded (a clone of the single-threaded
    // zygote or outer helper), so the child may do anything after fork.
    let forked = unsafe { nix::unistd::fork() }.map_err(|e| Fail::io(Step::ForkCommand, crate::errno(e)));
    let f = match forked {
        Ok(nix::unistd::ForkResult::Child) => {
            drop(lifeline);
            match command_ahead(ahead, report_fd) {
                Ok(never) => match never {},
                Err(f) => f,
            }
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            drop(ahead);
            sys::exit_now(match &lifeline {
                Some(l) => crate::reap_watching(child, report_fd, l),
                None => crate::reap(child, report_fd),
            })
        }
        Err(f) => f,
    };
    crate::report(report_fd, Record::Error { step: Ok(f.step), errno: f.errno, detail: f.detail });
    sys::exit_now(f.exit_code())
}

/// The slot's root: the tmpfs, the slot's mounts, the copy of the host's
/// tree kept for the request's sources (entered already where the kernel
/// can clone from it), the host name.
fn build_base(base: &SlotSpec) -> Result<(mounts::Root, Option<OwnedFd>), Fail> {
    let all: Vec<usize> = (0..base.mounts.len()).collect();
    let sources = mounts::open_sources(None, &base.mounts, &all, Vec::new())?;
    let skip_readonly = cfg!(debug_assertions) && base.test_switches.skip_readonly;
    let attach = std::ffi::CString::new(SLOT_ATTACH).map_err(|_| Fail::errno(Step::MountRoot, libc::EINVAL))?;
    let (mut root, mut host) = mounts::begin_root_keeping_host(skip_readonly, &[attach.as_c_str()])?;
    if cfg!(debug_assertions) && base.test_switches.slot_pivot_late {
        host = None;
    }
    root.apply_ops(&base.mounts, &all, &sources)?;
    drop(sources);
    // Where the kernel can clone the request's sources from the copy of
    // the host's tree, the pivot and the old root's detach happen now.
    if host.is_some() {
        mounts::enter_root(&root)?;
    }
    nix::unistd::sethostname("portcullis").map_err(|e| Fail::io(Step::Hostname, crate::errno(e)))?;
    Ok((root, host))
}

/// Pid 1 of a slot; never returns.
fn run_pid1(base: &SlotSpec, programs: Programs, via: CloneCall, chan: chan::End, report_fd: &OwnedFd) -> ! {
    let f = match pid1(base, programs, via, chan, report_fd) {
        Ok(never) => match never {},
        Err(f) => f,
    };
    crate::report(report_fd, Record::Error { step: Ok(f.step), errno: f.errno, detail: f.detail });
    sys::exit_now(f.exit_code())
}

/// Pid 1: the slot's part, then the command's process forked ahead, which
/// waits for the request; pid 1 itself only reaps.
fn pid1(
    base: &SlotSpec,
    programs: Programs,
    via: CloneCall,
    chan: chan::End,
    report_fd: &OwnedFd,
) -> Result<Never, Fail> {
    crate::await_go_ahead(&chan)?;
    crate::switch_ids(&base.identity, &chan)?;
    let (root, host) = build_base(base)?;
    crate::join_network(base.network, base.netns, &chan)?;
    crate::become_init()?;
    // The command's process, forked now rather than at the request: it
    // makes the request's mounts itself (it holds pid 1's capabilities until
    // its own setup drops them; the mounts are the namespace's, whoever
    // makes them) and becomes the command, so the request reaches the
    // command without pid 1's wake-up and a fork in between. Pid 1 keeps
    // nothing of the slot: it reaps, sweeps and reports, as ever.
    fork_ahead(Ahead { base, programs, via, chan: Some(chan), sock: None, root, host }, report_fd, None)
}

/// The command's process of a slot, forked ahead: the steps of its setup
/// that do not depend on the request (`command::ahead`), `k` (the slot is
/// built), then the request's part, then the command (`command::run`).
/// With an outer helper (`chan`), `k` goes to it and the library's socket
/// comes back (`q`); a slot the zygote cloned holds the socket already
/// (`sock`) and says `k` to the library on it.
fn command_ahead(ahead: Ahead<'_>, report_fd: &OwnedFd) -> Result<Never, Fail> {
    let Ahead { base, programs, via, chan, sock, root, host } = ahead;
    crate::command::ahead()?;
    let sock = match (sock, &chan) {
        (Some(sock), _) => {
            chan::send(&sock, b'k', &[]).map_err(|e| Fail::io(Step::HandOver, e))?;
            sock
        }
        (None, Some(chan)) => {
            chan::send(chan, b'k', &[]).map_err(|e| Fail::io(Step::HandOver, e))?;
            // The library's socket, on which the request comes straight here.
            match chan::recv(chan) {
                Ok(Some((b'q', mut fds))) if fds.len() == 1 => fds.remove(0),
                Ok(None) => sys::exit_now(crate::EXIT_SETUP),
                Err(e) => return Err(Fail::io(Step::HandOver, e)),
                Ok(Some(_)) => return Err(Fail::errno(Step::HandOver, libc::EINVAL)),
            }
        }
        (None, None) => return Err(Fail::errno(Step::HandOver, libc::EINVAL)),
    };

    // The request, or the shape of the runs to prepare for.
    let (asked, memfd, trees, observe) = await_spec(&sock)?;
    // The copy of the host's tree goes back to the outer helper, or,
    // without one, to the library.
    let back: &OwnedFd = chan.as_deref().unwrap_or(&sock);
    let (spec, prep, own) = build(base, programs, back, root, host, (memfd, trees, observe))?;
    drop(chan);
    match asked {
        // Kept by a prepared slot, which waits on it for its request.
        Asked::Prepare => prepared(&spec, prep, &own, via, sock, report_fd),
        Asked::Run => {
            drop(sock);
            Err(crate::command::run(&spec, &prep, via, report_fd, true))
        }
    }
}

/// What came with a request (or a shape): the spec's memfd, a root
/// caller's idmapped trees, the observer's socket.
type Sent = (OwnedFd, Vec<OwnedFd>, Option<OwnedFd>);

/// The request's part of the sandbox: the spec read and checked against
/// the slot ([`SlotSpec::admits`]), its own mounts made, the root sealed,
/// the observer's socket on [`OBSERVE_FD`]. The spec, its programs, and the
/// indexes of its own mounts.
fn build(
    base: &SlotSpec,
    programs: Programs,
    back: &OwnedFd,
    mut root: mounts::Root,
    host: Option<OwnedFd>,
    (memfd, trees, observe): Sent,
) -> Result<(SpawnSpec, crate::Prepared, Vec<usize>), Fail> {
    let spec = crate::parse_spec(&crate::read_all(memfd)?)?;
    let own = base.admits(&spec).map_err(|_| Fail::errno(Step::ReadSpec, libc::EINVAL))?;
    let mut prep = crate::prepare_with(&spec, programs)?;
    if observe.is_none() || !spec.observe {
        // No socket to hand a listener over: the command installs the main
        // program alone and never takes whatever fd 7 is here for one.
        prep.observer = None;
        prep.folded = None;
    }
    let observe = observe.filter(|_| spec.observe);
    let premade = crate::premade_trees(&spec.mounts, trees)?;
    let sources = mounts::open_sources(host.as_ref().map(|h| h.as_fd()), &spec.mounts, &own, premade)?;
    root.apply_ops(&spec.mounts, &own, &sources)?;
    drop(sources);
    let pivoted = host.is_some();
    if let Some(h) = host {
        // The copy of the host's tree goes `back` to the outer helper, or
        // to the library, which live in the host's namespaces anyway and
        // hold it (unread, queued on the socket) until the run is over:
        // nothing of the sandbox keeps it while the command runs, and its
        // last close (which frees its mounts, an RCU grace period) falls in
        // the teardown behind the result, not here. If it cannot be handed
        // over, it is closed here all the same (slower, never kept).
        let _ = chan::send(back, b'h', &[h.as_raw_fd()]);
        drop(h);
    }
    match pivoted {
        true => mounts::seal_entered_root(root)?,
        false => mounts::finish_root(root)?,
    }
    if let Some(o) = observe {
        // The command sends the observer's listener over fd 7, as in a
        // one-shot run (where the library placed the socket there).
        sys::dup_onto(o.as_fd(), OBSERVE_FD).map_err(|e| Fail::io(Step::HandOver, e))?;
    }
    Ok((spec, prep, own))
}

/// A prepared slot's command process, once [`build`] made the own mounts
/// of the shape `spec` it was sent: the command's confinement (capabilities,
/// Landlock and seccomp with the observer's listener handed over), then `d` to the
/// library with the sandbox's root (an `O_PATH` descriptor, through which
/// the library checks at the request that nothing the slot made has moved)
/// and the mount each own mount's destination lies on (8 bytes each, in
/// the spec's order); then the request (a [`Request`]: the command, its
/// environment, its working directory; in the message, `X`, up to
/// [`portcullis_helper::spec::INLINE_REQUEST_MAX`] bytes, else in a memfd,
/// `x`) and the command. Everything after the filter's install is a call the
/// filter allows any command: `sendmsg`, `recvmsg`, `read`, `chdir`,
/// `rt_sigprocmask`, `rt_sigaction`, `prlimit64` of itself, `write`, `execve`.
fn prepared(
    spec: &SpawnSpec,
    mut prep: crate::Prepared,
    own: &[usize],
    via: CloneCall,
    sock: OwnedFd,
    report_fd: &OwnedFd,
) -> Result<Never, Fail> {
    let mut places = Vec::with_capacity(own.len() * 8);
    for &i in own {
        let dst = spec.mounts.get(i).map(MountOp::dst).unwrap_or_default();
        let c = std::ffi::CString::new(dst)
            .map_err(|_| Fail::errno(Step::Mount, libc::EINVAL).clone_detail(u32::try_from(i).unwrap_or(u32::MAX)))?;
        let place = portcullis_helper::mount_api::place_at(None, &c)
            .map_err(|e| Fail::io(Step::Mount, e).clone_detail(u32::try_from(i).unwrap_or(u32::MAX)))?;
        places.extend_from_slice(&place.mount.to_le_bytes());
    }
    let sandbox_root = nix::fcntl::open(
        "/",
        nix::fcntl::OFlag::O_PATH | nix::fcntl::OFlag::O_DIRECTORY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|e| Fail::io(Step::HandOver, crate::errno(e)))?;
    let applied = crate::command::lock_down_ahead(spec, &prep, via)?;
    chan::send_with(&sock, b'd', &places, &[sandbox_root.as_raw_fd()]).map_err(|e| Fail::io(Step::HandOver, e))?;
    drop(sandbox_root);
    // The request in the message (`X`) or, a large one, in a memfd (`x`).
    let mut buf = vec![0u8; portcullis_helper::spec::INLINE_REQUEST_MAX];
    let json = match chan::recv_with(&sock, &mut buf) {
        Ok(Some((b'X', n, fds))) if fds.is_empty() => {
            buf.truncate(n);
            buf
        }
        Ok(Some((b'x', 0, mut fds))) if fds.len() == 1 => crate::read_all(fds.remove(0))?,
        // The pool dropped the slot (or checked it stale): nothing ran.
        Ok(None) => sys::exit_now(crate::EXIT_SETUP),
        Err(e) => return Err(Fail::io(Step::ReadSpec, e)),
        Ok(Some(_)) => return Err(Fail::errno(Step::ReadSpec, libc::EINVAL)),
    };
    drop(sock);
    let req: Request = serde_json::from_slice(&json).map_err(|_| Fail::errno(Step::ReadSpec, libc::EINVAL))?;
    if req.version != SPEC_VERSION {
        return Err(Fail::errno(Step::ReadSpec, libc::EINVAL));
    }
    (prep.argv, prep.envp, prep.candidates) = crate::command_of(&req.argv, &req.env)?;
    Err(crate::command::run_request(&req.cwd, &spec.rlimits, &prep, applied, report_fd))
}

/// What the library sent: a request to run (`r`) or a shape to prepare
/// for (`p`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Asked {
    Run,
    Prepare,
}

/// The request as the command's process gets it from the library: `o`
/// with the observer's socket (when observing), then `r` with the spec's
/// memfd and a root caller's idmapped trees, or `p` with the same for a
/// shape to prepare for. End-of-file: the slot was given up; exit quietly.
fn await_spec(chan: &OwnedFd) -> Result<(Asked, OwnedFd, Vec<OwnedFd>, Option<OwnedFd>), Fail> {
    let mut observe = None;
    loop {
        match chan::recv(chan) {
            Ok(Some((b'o', mut fds))) if fds.len() == 1 && observe.is_none() => observe = Some(fds.remove(0)),
            Ok(Some((tag @ (b'r' | b'p'), fds))) if !fds.is_empty() => {
                let asked = if tag == b'p' { Asked::Prepare } else { Asked::Run };
                let mut fds = fds.into_iter();
                let Some(memfd) = fds.next() else { return Err(Fail::errno(Step::ReadSpec, libc::EINVAL)) };
                return Ok((asked, memfd, fds.collect(), observe));
            }
            Ok(None) => sys::exit_now(crate::EXIT_SETUP),
            // A message cut short (more descriptors than it has room for)
            // or a failed read: reported, never taken for a given-up slot.
            Err(e) => return Err(Fail::io(Step::ReadSpec, e)),
            Ok(Some(_)) => return Err(Fail::errno(Step::ReadSpec, libc::EINVAL)),
        }
    }
}
