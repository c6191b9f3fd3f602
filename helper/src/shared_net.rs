//! The workspace's shared network (`portcullis_helper::network`): making it
//! (`--make-network`) and joining it before the clone (`Netns::Shared`).

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};

use nix::sched::CloneFlags;
use portcullis_helper::network::{encode_failure, MakeStep, OK, SOCK_FD};
use portcullis_helper::report::{Step, NET_DETAIL_JOIN_NETNS, NET_DETAIL_JOIN_USERNS};
use portcullis_helper::spec::Netns;
use portcullis_helper::{NETNS_FD, USERNS_FD};

use crate::{chan, errno, sys, Fail};

type Failed = (MakeStep, i32);

fn fail(step: MakeStep) -> impl Fn(io::Error) -> Failed {
    move |e| (step, e.raw_os_error().unwrap_or(libc::EIO))
}

fn nix_fail(step: MakeStep) -> impl Fn(nix::Error) -> Failed {
    move |e| (step, e as i32)
}

/// `portcullis-helper --make-network`: make the namespaces, send them on
/// fd 3, exit (0 when sent, 125 otherwise).
pub fn make_network_main() -> ! {
    if !sys::fd_is_open(SOCK_FD) {
        eprintln!("portcullis-helper: fd {SOCK_FD} is not open; this program is started by the portcullis library");
        sys::exit_now(crate::EXIT_SETUP);
    }
    // SAFETY: fd 3 is the socket the library passed; nothing else in this
    // process owns it.
    let sock = unsafe { sys::adopt(SOCK_FD) };
    let sent = match make() {
        Ok(fds) => {
            let raw: Vec<i32> = fds.iter().map(|f| f.as_raw_fd()).collect();
            chan::send(&sock, OK, &raw).map_err(fail(MakeStep::Send))
        }
        Err(f) => Err(f),
    };
    match sent {
        Ok(()) => sys::exit_now(0),
        Err((step, e)) => {
            let _ = nix::unistd::write(&sock, &encode_failure(step, e));
            sys::exit_now(crate::EXIT_SETUP)
        }
    }
}

/// W (unprivileged callers) and N, in that order.
fn make() -> Result<Vec<OwnedFd>, Failed> {
    sys::close_range_from(SOCK_FD as u32 + 1, 0).map_err(fail(MakeStep::Sanitize))?;
    let mut fds = Vec::new();
    let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
    if !uid.is_root() {
        nix::sched::unshare(CloneFlags::CLONE_NEWUSER).map_err(nix_fail(MakeStep::UserNamespace))?;
        std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1\n")).map_err(fail(MakeStep::MapUid))?;
        match std::fs::write("/proc/self/setgroups", "deny") {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail(MakeStep::DenySetgroups)(e)),
        }
        std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1\n")).map_err(fail(MakeStep::MapGid))?;
        fds.push(open_ns("user")?);
    }
    nix::sched::unshare(CloneFlags::CLONE_NEWNET).map_err(nix_fail(MakeStep::NetNamespace))?;
    sys::loopback_up().map_err(fail(MakeStep::LoopbackUp))?;
    fds.push(open_ns("net")?);
    Ok(fds)
}

fn open_ns(kind: &str) -> Result<OwnedFd, Failed> {
    std::fs::File::open(format!("/proc/thread-self/ns/{kind}"))
        .map(OwnedFd::from)
        .map_err(fail(MakeStep::OpenNamespaces))
}

/// With `Netns::Shared`, join the workspace's user namespace (when
/// passed) and then its network namespace, before the clone, so that pid 1 is born in that network (and, unprivileged, its
/// user namespace a child of the workspace's, which maps the same ids).
/// Root stays in the initial user namespace: it owns the network, and the
/// idmapped mounts need host root. The fds are closed here.
pub fn join(netns: Netns) -> Result<(), Fail> {
    let Netns::Shared { userns } = netns else { return Ok(()) };
    let adopt = |fd: i32, detail: u32| {
        if !sys::fd_is_open(fd) {
            return Err(Fail::errno(Step::NetNamespace, libc::EBADF).clone_detail(detail));
        }
        // SAFETY: the spec says the library passed this fd; nothing else in
        // this process owns it.
        Ok(unsafe { sys::adopt(fd) })
    };
    let net = adopt(NETNS_FD, NET_DETAIL_JOIN_NETNS)?;
    if userns {
        let user = adopt(USERNS_FD, NET_DETAIL_JOIN_USERNS)?;
        nix::sched::setns(&user, CloneFlags::CLONE_NEWUSER)
            .map_err(|e| Fail::io(Step::NetNamespace, errno(e)).clone_detail(NET_DETAIL_JOIN_USERNS))?;
    }
    nix::sched::setns(&net, CloneFlags::CLONE_NEWNET)
        .map_err(|e| Fail::io(Step::NetNamespace, errno(e)).clone_detail(NET_DETAIL_JOIN_NETNS))
}
