//! `portcullis-helper --zygote`: starts helpers without an `execve` each.
//!
//! A long-lived library (a `Workspace`, `portcullis serve`) starts one of
//! these per sandbox with a `SOCK_SEQPACKET` socket on fd 3 (and its own pid
//! as the argument after `--zygote`, which names its cgroup leaves) and asks it for
//! every helper it would otherwise `posix_spawn`. For each request the
//! zygote forks (`clone` with `CLONE_PARENT`: the new helper is the
//! library's own child, which waits for it and reaps it through its pidfd
//! exactly as after a spawn), and the child puts the request's descriptors
//! where a spawned helper finds them, takes a process group of its own,
//! shows the spawned helper's command line in `/proc` and runs
//! [`crate::run`] with the request's arguments. It starts as a spawned helper
//! would, less the `execve` and the new image's start (page faults, the
//! runtime's setup): about 0.1 ms of CPU a command on this project's
//! machine.
//!
//! What the child has that a spawned helper would not get another way: the
//! zygote's own state, set once when the library started it the same way
//! (an empty environment, every signal at its default but what Rust's
//! runtime sets, nothing blocked), its working directory (`/`), and the
//! rest of the starting thread's state (ids, capabilities, `no_new_privs`
//! and seccomp filter, which the library compares with the asking thread's
//! before each helper and starts a new zygote when they differ; umask,
//! resource limits, cgroup, namespaces and a Landlock domain, which it
//! does not); and nothing else: every descriptor but the request's is
//! closed.
//!
//! It also clones a sandbox's pid 1 itself (`c`, [`clone_pid1`]): into the
//! sandbox's namespaces and cgroup, its id maps written here, so that a
//! resident sandbox has no outer helper (a slot's pid 1,
//! `crate::slot::direct`, or one run's, `crate::direct_run`). A zygote
//! started with a workspace's network on fds 8 and 9 joins it first, and
//! the pid 1s it clones are born in it.
//!
//! Messages (tag byte, payload, `SCM_RIGHTS`):
//! * `z` (library to zygote): the helper's arguments (a count byte, then
//!   each NUL-terminated), then a count byte and one target number (0 to
//!   [`LAST_FD`]) for each descriptor passed after the first, in order; the
//!   first descriptor is the child's gate (below).
//! * `c` (library to zygote): a pid 1 to clone: the ids to map (inside
//!   uid, outside uid, inside gid, outside gid, `u32` each, native order)
//!   and a flags byte (bit 0: the cgroup's directory follows the gate
//!   among the descriptors, not placed; bit 1: one run, else a slot; bit
//!   2: send pid 1's user namespace, for a root caller), then a `z`
//!   request's payload.
//! * `q` (library to zygote): stop. A bare end of the socket instead means
//!   the library died: the zygote then removes the cgroup leaves of the
//!   sandboxes it cloned that are still there (nobody else would).
//! * `p` (zygote to library): the child's pid (`i32`, native order), with
//!   its pidfd and, for a `c` of a root caller, pid 1's user namespace.
//! * `x` (zygote to library): a cloned pid 1 whose cgroup or maps failed
//!   was killed at its gate: its pid and the errno (`i32` each), with its
//!   pidfd; the library reaps it.
//! * `e` (zygote to library): the request was refused or the fork failed:
//!   the errno (`i32`, native order).
//!
//! The child waits for one byte on its gate (a one run's pid 1: with a
//! root caller's idmapped trees, which the library made through its user
//! namespace), one end of a socket pair
//! whose other end the library keeps: the library moves the child into a
//! process group of its own and sends the byte once it holds the child's
//! pidfd, and closes its end without it when it gives the request up (no
//! answer in time, an answer it could not take). So a helper runs
//! only when the library knows it, and a library that does not can spawn
//! the helper itself without two of them running; a child not let go
//! exits in the zygote's process group, which the library kills and reaps
//! with the zygote.
//!
//! End-of-file on the socket (the library dropped the sandbox, or died):
//! the zygote exits. Its helpers are not its children and go on.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use std::os::fd::AsFd;

use portcullis_helper::report::CloneCall;
use portcullis_helper::spec::{Identity, Netns};
use portcullis_helper::{LAST_FD, NETNS_FD, SPEC_FD, USERNS_FD};

use crate::{chan, sys};

/// The argument that makes the helper a zygote.
pub const ZYGOTE_ARG: &str = "--zygote";

/// Largest request: the arguments and the targets.
const MAX_REQUEST: usize = 1024;

/// Serve requests on fd 3 until the library hangs up.
pub fn serve() -> ! {
    // SAFETY: fd 3 is the socket the library passed (a zygote is started
    // with it); nothing else in this process owns it.
    let passed = unsafe { sys::adopt(SPEC_FD) };
    // Off the protocol numbers, so that a child's placement never meets it
    // (a child closes it with everything above them).
    let Ok(ctl) = sys::dup_above(passed.as_raw_fd(), LAST_FD + 1) else { sys::exit_now(crate::EXIT_SETUP) };
    drop(passed);
    // A zygote for a workspace's network joins it now, once: the slots it
    // clones are born in it (`clone_pid1`).
    if sys::fd_is_open(NETNS_FD)
        && crate::shared_net::join(Netns::Shared { userns: sys::fd_is_open(USERNS_FD) }).is_err()
    {
        sys::exit_now(crate::EXIT_SETUP);
    }
    // A root caller's supplementary groups, which every helper drops first
    // (`crate::drop_host_groups`) and a slot's pid 1, cloned here into its
    // user namespace, no longer can.
    if crate::drop_host_groups().is_err() {
        sys::exit_now(crate::EXIT_SETUP);
    }
    // Nothing else stays open in a process that lives as long as the
    // library: a descriptor the library let a spawn inherit (one without
    // close-on-exec) would be held open for that long.
    let at = ctl.as_raw_fd() as u32;
    if sys::close_range(SPEC_FD as u32, at - 1, 0).and_then(|()| sys::close_range_from(at + 1, 0)).is_err() {
        sys::exit_now(crate::EXIT_SETUP);
    }
    // Not the library's working directory, which it would keep busy.
    let _ = nix::unistd::chdir("/");
    let area = arg_area();
    let mut buf = [0u8; MAX_REQUEST];
    let mut leaves = Leaves::new();
    loop {
        let (n, fds) = match chan::recv_with(&ctl, &mut buf) {
            Ok(Some((b'z', n, fds))) => (n, fds),
            Ok(Some((b'c', n, fds))) => {
                leaves.prune();
                match clone_pid1(&ctl, &buf[..n], fds, area) {
                    Ok(leaf) => leaves.track(leaf),
                    Err(Gone(leaf)) => {
                        leaves.track(leaf);
                        leaves.orphaned()
                    }
                }
                continue;
            }
            // The library stops this zygote: nothing else to do.
            Ok(Some((b'q', _, _))) => sys::exit_now(0),
            Ok(Some(_)) => {
                let _ = refuse(&ctl, libc::EINVAL);
                continue;
            }
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
            Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => {
                let _ = refuse(&ctl, libc::EMSGSIZE);
                continue;
            }
            // The library is gone (or the socket broke): nothing to serve.
            // The pid 1s it cloned go with its lifelines, and nobody else
            // removes their leaves then (an outer helper removes its own).
            Ok(None) | Err(_) => leaves.orphaned(),
        };
        let Some((args, targets)) = parse(&buf[..n], fds.len()) else {
            let _ = refuse(&ctl, libc::EINVAL);
            continue;
        };
        match sys::clone_sibling(0) {
            Ok(sys::Forked::Child) => {
                // The socket is the zygote's: a child holding it would keep
                // the library from seeing the zygote die before answering.
                drop(ctl);
                child(&args, &targets, fds, area)
            }
            Ok(sys::Forked::Parent { pid, pidfd }) => {
                drop(fds);
                if chan::send_with(&ctl, b'p', &pid.to_ne_bytes(), &[pidfd.as_raw_fd()]).is_err() {
                    // The library cannot be answered: it closes the child's
                    // gate when it gives up, and reaps the child.
                    leaves.orphaned();
                }
            }
            Err(e) => {
                let _ = refuse(&ctl, e.raw_os_error().unwrap_or(libc::EIO));
            }
        }
    }
}

fn refuse(ctl: &OwnedFd, errno: i32) -> io::Result<()> {
    chan::send_with(ctl, b'e', &errno.to_ne_bytes(), &[])
}

/// A request's arguments and the target of each of its `fds` descriptors
/// after the first (the gate); `None` if it is malformed (a target out of
/// range or given twice, no gate).
fn parse(buf: &[u8], fds: usize) -> Option<(Vec<CString>, Vec<RawFd>)> {
    let fds = fds.checked_sub(1)?;
    let (&count, mut rest) = buf.split_first()?;
    let mut args = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let end = rest.iter().position(|b| *b == 0)?;
        args.push(CString::new(&rest[..end]).ok()?);
        rest = &rest[end + 1..];
    }
    let (&n, rest) = rest.split_first()?;
    if usize::from(n) != fds || rest.len() != fds {
        return None;
    }
    let targets: Vec<RawFd> = rest.iter().map(|t| RawFd::from(*t)).collect();
    let valid = targets.iter().enumerate().all(|(i, t)| *t <= LAST_FD && !targets[..i].contains(t));
    valid.then_some((args, targets))
}

/// The forked child: once the library lets it go (its gate), the
/// descriptors placed, a process group of its own, the command line of a
/// spawned helper; then the helper itself.
fn child(args: &[CString], targets: &[RawFd], fds: Vec<OwnedFd>, area: Option<(usize, usize)>) -> ! {
    let _ = let_in(args, targets, fds, area, false);
    crate::run(args.first().map(|a| a.as_bytes()))
}

/// A child's way in, up to what it runs: the gate (`fds`' first), the
/// descriptors placed, the command line shown. The library moves the child
/// into a process group of its own and writes one byte on the gate once it
/// holds its pidfd (with a one run's idmapped trees, when `trees`), and
/// closes it without one when it gives the request up (then this child
/// exits, still in the zygote's process group, which the library kills and
/// reaps with the zygote). So a helper runs exactly when the library knows
/// it, and a library that does not may start the helper another way.
/// Returns the trees, above the protocol numbers.
fn let_in(
    args: &[CString],
    targets: &[RawFd],
    mut fds: Vec<OwnedFd>,
    area: Option<(usize, usize)>,
    trees: bool,
) -> Vec<OwnedFd> {
    let gate = fds.remove(0);
    let came = match chan::recv(&gate) {
        Ok(Some((1, came))) if trees || came.is_empty() => came,
        _ => sys::exit_now(crate::EXIT_SETUP),
    };
    drop(gate);
    // Above the protocol numbers, where the placement leaves them.
    let kept = above_protocol(came);
    place(targets, fds, &kept);
    if let Some(area) = area {
        show_command_line(area, args);
    }
    kept
}

/// Put each of `fds` on its target (stdin on `/dev/null` when none is
/// given), close every other descriptor but `keep` (above the protocol
/// numbers), and take a process group of our own: where a spawned helper
/// has them.
fn place(targets: &[RawFd], fds: Vec<OwnedFd>, keep: &[OwnedFd]) {
    // Each received descriptor may lie on another's target: all go above
    // the protocol numbers first, then onto their targets; stdin is
    // /dev/null when none was passed (as the library's spawn does).
    let moved = above_protocol(fds);
    for fd in 0..=LAST_FD {
        // SAFETY: closing a protocol or standard descriptor number, which
        // nothing in this process holds as an OwnedFd any more (the
        // received ones were moved above; the socket lies above too).
        unsafe { libc::close(fd) };
    }
    for (m, t) in moved.iter().zip(targets) {
        if sys::dup_onto(std::os::fd::AsFd::as_fd(m), *t).is_err() {
            sys::exit_now(crate::EXIT_SETUP);
        }
    }
    if !targets.contains(&0) {
        // SAFETY: a constant path; 0 is the lowest free number (closed
        // above and not a target), so the new descriptor lands there.
        let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY) };
        if fd != 0 {
            sys::exit_now(crate::EXIT_SETUP);
        }
    }
    drop(moved);
    // The zygote's socket and every copy above the protocol numbers, but
    // `keep`.
    let mut kept: Vec<u32> = keep.iter().map(|k| k.as_raw_fd() as u32).collect();
    kept.sort_unstable();
    let mut from = LAST_FD as u32 + 1;
    for k in kept {
        if k > from && sys::close_range(from, k - 1, 0).is_err() {
            sys::exit_now(crate::EXIT_SETUP);
        }
        from = from.max(k + 1);
    }
    if sys::close_range_from(from, 0).is_err() {
        sys::exit_now(crate::EXIT_SETUP);
    }
    // SAFETY: setpgid on ourselves, as posix_spawn's POSIX_SPAWN_SETPGROUP.
    if unsafe { libc::setpgid(0, 0) } != 0 {
        sys::exit_now(crate::EXIT_SETUP);
    }
}

/// Copies of `fds` above the protocol numbers (the originals closed); a
/// child that cannot make them exits.
fn above_protocol(fds: Vec<OwnedFd>) -> Vec<OwnedFd> {
    fds.iter()
        .map(|fd| sys::dup_above(fd.as_raw_fd(), LAST_FD + 1).unwrap_or_else(|_| sys::exit_now(crate::EXIT_SETUP)))
        .collect()
}

/// Length of a `c` request's head: the identity's four ids and the flags.
const SLOT_HEAD: usize = 17;

/// `c`: clone a slot's pid 1 as the library's child, in its namespaces
/// (and the network this zygote joined) and its cgroup, write its id
/// maps, and answer with its pid and pidfd (and, for a root caller, its
/// user namespace, through which the library makes idmapped trees). The
/// child then waits for its gate like any other, and becomes the slot's
/// pid 1 (`crate::slot::direct`): no outer helper between the library and
/// the sandbox. A failure after the clone kills the child and says so
/// with its pidfd (`x`), so the library reaps it; one before, `e`.
/// Returns the pid 1's cgroup leaf, when one came and it was made.
fn clone_pid1(
    ctl: &OwnedFd,
    buf: &[u8],
    mut fds: Vec<OwnedFd>,
    area: Option<(usize, usize)>,
) -> Result<Option<OwnedFd>, Gone> {
    let Some((head, rest)) = buf.split_at_checked(SLOT_HEAD) else {
        let _ = refuse(ctl, libc::EINVAL);
        return Ok(None);
    };
    let id = |i: usize| u32::from_ne_bytes([head[4 * i], head[4 * i + 1], head[4 * i + 2], head[4 * i + 3]]);
    let identity = Identity { inside_uid: id(0), outside_uid: id(1), inside_gid: id(2), outside_gid: id(3) };
    let with_cgroup = head[16] & 1 != 0;
    // Bit 1: a one-run pid 1 (`crate::direct_run`), else a slot's.
    let one_run = head[16] & 2 != 0;
    // Bit 2: the library makes idmapped trees through its user namespace.
    let want_userns = head[16] & 4 != 0;
    // The gate stays first; the cgroup, when sent, comes second and is not placed.
    let cgroup = match (with_cgroup, fds.len()) {
        (true, 2..) => Some(fds.remove(1)),
        (false, _) => None,
        _ => {
            let _ = refuse(ctl, libc::EINVAL);
            return Ok(None);
        }
    };
    let Some((args, targets)) = parse(rest, fds.len()) else {
        let _ = refuse(ctl, libc::EINVAL);
        return Ok(None);
    };
    let cg = cgroup.as_ref().map(|c| c.as_fd());
    let made = match sys::clone3_sibling(crate::slot::FLAGS, cg) {
        Ok(f) => Ok((f, CloneCall::Clone3)),
        Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
            sys::clone_sibling(crate::slot::FLAGS).map(|f| (f, CloneCall::Clone))
        }
        Err(e) => Err(e),
    };
    match made {
        Ok((sys::Forked::Child, via)) => {
            drop(cgroup);
            // SAFETY: the zygote's socket is ours to close in the child:
            // it must not keep the library from seeing the zygote die.
            unsafe { libc::close(ctl.as_raw_fd()) };
            // A one run's gate brings a root caller's idmapped trees.
            let trees = let_in(&args, &targets, fds, area, one_run);
            match one_run {
                true => crate::direct_run(via, trees),
                false => crate::slot::direct(via),
            }
        }
        Ok((sys::Forked::Parent { pid, pidfd }, via)) => {
            drop(fds);
            let joined = match (via, cgroup.as_ref()) {
                (CloneCall::Clone, Some(cg)) => sys::join_cgroup(cg.as_fd(), pid),
                _ => Ok(()),
            };
            let userns = joined
                .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
                .and_then(|()| crate::write_maps(pid, &identity).map_err(|f| f.errno))
                .and_then(|()| match want_userns && nix::unistd::getuid().is_root() {
                    true => std::fs::File::open(format!("/proc/{pid}/ns/user"))
                        .map(|f| Some(OwnedFd::from(f)))
                        .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO)),
                    false => Ok(None),
                });
            let made = userns.is_ok();
            let sent = match userns {
                Ok(ns) => {
                    let raw: Vec<RawFd> =
                        [pidfd.as_raw_fd()].into_iter().chain(ns.as_ref().map(|n| n.as_raw_fd())).collect();
                    chan::send_with(ctl, b'p', &pid.to_ne_bytes(), &raw)
                }
                Err(errno) => {
                    // The child waits at its gate: killed here, reaped by
                    // the library (its parent), which the pidfd lets find it.
                    let _ = sys::pidfd_send_signal(pidfd.as_fd(), libc::SIGKILL);
                    let payload: Vec<u8> = pid.to_ne_bytes().into_iter().chain(errno.to_ne_bytes()).collect();
                    chan::send_with(ctl, b'x', &payload, &[pidfd.as_raw_fd()])
                }
            };
            if sent.is_err() {
                // As for a helper: the library closes the gate and reaps.
                return Err(Gone(cgroup));
            }
            Ok(cgroup.filter(|_| made))
        }
        Err(e) => {
            let _ = refuse(ctl, e.raw_os_error().unwrap_or(libc::EIO));
            Ok(None)
        }
    }
}

/// The library can no longer be answered: it died (with the cgroup leaf
/// of the request, if any, which is to be removed too).
struct Gone(Option<OwnedFd>);

/// Leaves held before the removed ones are let go ([`Leaves::prune`]).
const PRUNE_AT: usize = 32;

/// The cgroup leaves of the pid 1s this zygote cloned, while they exist,
/// the directory they are made in, and the library's pid (which names
/// them all: `portcullis-<pid>-<n>`).
struct Leaves {
    open: Vec<OwnedFd>,
    parent: Option<std::path::PathBuf>,
    library: libc::pid_t,
    /// The library's pidfd, which tells when it has exited.
    pidfd: Option<OwnedFd>,
}

impl Leaves {
    fn new() -> Leaves {
        // The library's pid, as it gave it (its parent may already be
        // another process, if the library died before this one started).
        let library = std::env::args_os()
            .nth(2)
            .and_then(|a| a.to_str()?.parse().ok())
            .unwrap_or_else(|| nix::unistd::getppid().as_raw());
        // SAFETY: pidfd_open takes no pointers; a pidfd is close-on-exec,
        // and a child closes it with every other it does not place.
        let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, library, 0) };
        // SAFETY: a fresh descriptor owned by nobody else.
        let pidfd = RawFd::try_from(raw).ok().filter(|fd| *fd >= 0).map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
        Leaves { open: Vec::new(), parent: None, library, pidfd }
    }

    /// Whether the library has exited (waiting up to a second for it: its
    /// socket ends before its exit is done).
    fn library_gone(&self) -> bool {
        let Some(pidfd) = &self.pidfd else { return false };
        let mut fds = [libc::pollfd { fd: pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 }];
        // SAFETY: poll on one descriptor we own; the array outlives the call.
        unsafe { libc::poll(fds.as_mut_ptr(), 1, 1000) == 1 }
    }

    /// Keep `leaf` (and learn, once, the directory the leaves are made in).
    fn track(&mut self, leaf: Option<OwnedFd>) {
        let Some(leaf) = leaf else { return };
        if self.parent.is_none() {
            self.parent = std::fs::read_link(format!("/proc/self/fd/{}", leaf.as_raw_fd()))
                .ok()
                .and_then(|p| p.parent().map(std::path::Path::to_path_buf));
        }
        self.open.push(leaf);
    }

    /// Let go of the leaves the library has removed (once each run is over),
    /// when more than a pool's and a few runs' are held (a look at each
    /// costs a call: not done for every request).
    fn prune(&mut self) {
        if self.open.len() < PRUNE_AT {
            return;
        }
        self.open.retain(|l| {
            let ok = nix::unistd::AccessFlags::F_OK;
            nix::unistd::faccessat(l, "cgroup.procs", ok, nix::fcntl::AtFlags::empty()).is_ok()
        });
    }

    /// The library died: nobody else removes the leaves of the pid 1s
    /// cloned here (an outer helper removes its own), nor those of a
    /// zygote that was replaced, nor those of its runs still being torn
    /// down. Every empty leaf of the dead library in the directory the
    /// leaves are made in is removed, waiting (at most ten seconds: nobody
    /// waits for this process) for the pid namespaces to die, which the
    /// lifelines' end has begun; then exit.
    fn orphaned(&self) -> ! {
        let prefix = format!("portcullis-{}-", self.library);
        let dead = self.library_gone();
        let mut left: Vec<std::path::PathBuf> = self
            .open
            .iter()
            .filter_map(|l| std::fs::read_link(format!("/proc/self/fd/{}", l.as_raw_fd())).ok())
            .collect();
        if let (true, Some(parent)) = (dead, &self.parent) {
            for e in std::fs::read_dir(parent).into_iter().flatten().flatten() {
                let path = e.path();
                if e.file_name().to_str().is_some_and(|n| n.starts_with(&prefix)) && !left.contains(&path) {
                    left.push(path);
                }
            }
        }
        crate::remove_when_empty(left, std::time::Duration::from_secs(10), std::time::Duration::from_millis(5));
        sys::exit_now(0)
    }
}

/// Where the kernel shows this process's argument strings from
/// (`arg_start`, `arg_end`: fields 48 and 49 of `/proc/self/stat`).
fn arg_area() -> Option<(usize, usize)> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts at field 3 (the state).
    let mut fields = rest.split_whitespace().skip(48 - 3);
    let start = fields.next()?.parse().ok()?;
    let end = fields.next()?.parse().ok()?;
    (end > start).then_some((start, end))
}

/// Make `/proc/self/cmdline` what a spawned helper's is: `argv[0]` (the
/// zygote's own, the helper's path) and `args`, the rest of the area
/// zeroed (its last byte NUL, so the kernel shows the area as arguments).
/// Left as it is when they do not fit.
fn show_command_line((start, end): (usize, usize), args: &[CString]) {
    let len = end - start;
    // SAFETY: [start, end) is this process's argument area (the kernel's
    // own record of it), on the initial stack, mapped readable and
    // writable; nothing holds a Rust reference into it (the runtime keeps
    // raw argv pointers, which keep pointing at NUL-terminated strings
    // inside the area).
    let area = unsafe { std::slice::from_raw_parts_mut(start as *mut u8, len) };
    let argv0_len = area.iter().position(|b| *b == 0).unwrap_or(len);
    let want: usize = argv0_len + 1 + args.iter().map(|a| a.as_bytes().len() + 1).sum::<usize>();
    if want >= len {
        return;
    }
    let mut at = argv0_len + 1;
    for a in args {
        let b = a.as_bytes_with_nul();
        area[at..at + b.len()].copy_from_slice(b);
        at += b.len();
    }
    area[at..].fill(0);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(args: &[&str], targets: &[u8]) -> Vec<u8> {
        let mut b = vec![args.len() as u8];
        for a in args {
            b.extend_from_slice(a.as_bytes());
            b.push(0);
        }
        b.push(targets.len() as u8);
        b.extend_from_slice(targets);
        b
    }

    #[test]
    fn requests_parse_and_bad_ones_are_refused() {
        // Five placed descriptors and the gate.
        let ok = parse(&request(&["--slot"], &[1, 2, 3, 4, 5]), 6);
        let Some((args, targets)) = ok else { panic!("a good request refused") };
        assert_eq!(args, vec![CString::new("--slot").unwrap_or_default()]);
        assert_eq!(targets, vec![1, 2, 3, 4, 5]);
        assert!(parse(&request(&[], &[1, 2]), 3).is_some());
        // Counts that do not match the descriptors, no gate, a target out
        // of range or given twice, an argument without its NUL.
        assert!(parse(&request(&[], &[1, 2]), 4).is_none());
        assert!(parse(&request(&[], &[1, 2]), 2).is_none());
        assert!(parse(&request(&[], &[]), 0).is_none());
        assert!(parse(&request(&[], &[1, 2, 10]), 4).is_none());
        assert!(parse(&request(&[], &[1, 1]), 3).is_none());
        assert!(parse(&[1, b'x'], 1).is_none());
        assert!(parse(&[], 1).is_none());
    }
}
