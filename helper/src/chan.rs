//! The channel between the outer helper and pid 1: a `SOCK_SEQPACKET`
//! socketpair made before `clone3`. Each message is one tag byte plus fds
//! (`SCM_RIGHTS`): `m` — maps written, with the idmapped mount trees; `n` —
//! the network namespace, made in parallel while pid 1 builds the root.
//! End-of-file means the outer helper died: pid 1 gives up. Pid 1 waits
//! for the first message on an eventfd beside the socket ([`End`]).

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{
    recvmsg, sendmsg, socketpair, AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType,
};

/// Most fds one message carries.
pub const MAX_FDS: usize = portcullis_helper::MAX_PASSED_FDS;

fn errno(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// One end of the channel: its socket (what `send` and `recv` take, by
/// `Deref`) and its copy of the go-ahead eventfd.
///
/// Pid 1 waits for the outer helper's first message (`m`) on the eventfd,
/// not on the socket. A message on a unix socket wakes its reader as the
/// sender's successor on the sender's CPU (the kernel takes the sender to
/// be about to sleep), and the outer helper goes on to make the network
/// namespace (a few hundred µs in the kernel): pid 1 sat behind it while
/// the other CPU idled (a scheduler trace of `portcullis exec`: 0.3 ms of
/// the critical path). An eventfd's wake-up carries no such hint, and pid 1
/// runs on an idle CPU, building the root while the network is made.
pub struct End {
    sock: OwnedFd,
    go: Option<OwnedFd>,
}

impl std::ops::Deref for End {
    type Target = OwnedFd;
    fn deref(&self) -> &OwnedFd {
        &self.sock
    }
}

/// A close-on-exec seqpacket pair: (outer end, pid 1 end), with the
/// go-ahead eventfd (each end its own descriptor of it). Without an
/// eventfd (it could not be made), pid 1 waits on the socket as before.
pub fn pair() -> io::Result<(End, End)> {
    let (outer, pid1) =
        socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC).map_err(errno)?;
    // SAFETY: eventfd takes no pointers; a descriptor it returns is ours.
    let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    // SAFETY: a fresh descriptor owned by nobody else.
    let go = (raw >= 0).then(|| unsafe { OwnedFd::from_raw_fd(raw) });
    let (go_outer, go_pid1) = match go.as_ref().map(OwnedFd::try_clone) {
        Some(Ok(copy)) => (go, Some(copy)),
        _ => (None, None),
    };
    Ok((End { sock: outer, go: go_outer }, End { sock: pid1, go: go_pid1 }))
}

impl End {
    /// Send `tag` with `fds`, then wake the other end through the eventfd
    /// ([`End::await_go`]).
    pub fn send_go(&self, tag: u8, fds: &[RawFd]) -> io::Result<()> {
        send(&self.sock, tag, fds)?;
        if let Some(go) = &self.go {
            nix::unistd::write(go, &1u64.to_ne_bytes()).map_err(errno)?;
        }
        Ok(())
    }

    /// Whether the other end has hung up (its process is gone), now.
    pub fn hung_up(&self) -> bool {
        let mut fds = [libc::pollfd { fd: self.sock.as_raw_fd(), events: 0, revents: 0 }];
        // SAFETY: poll on one descriptor we own, without waiting; the array
        // outlives the call.
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 1, 0) };
        r > 0 && fds[0].revents & (libc::POLLHUP | libc::POLLERR) != 0
    }

    /// Wait until the other end sent its go-ahead ([`End::send_go`]) or
    /// hung up; the message is then read with [`recv`] as before.
    pub fn await_go(&self) -> io::Result<()> {
        let Some(go) = &self.go else { return Ok(()) };
        loop {
            // The socket with no events asked for: only its hang-up (the
            // outer helper died) wakes this poll, not a message.
            let mut fds = [
                libc::pollfd { fd: go.as_raw_fd(), events: libc::POLLIN, revents: 0 },
                libc::pollfd { fd: self.sock.as_raw_fd(), events: 0, revents: 0 },
            ];
            // SAFETY: poll on two descriptors we own; the array outlives
            // the call.
            let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if r >= 0 {
                return Ok(());
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

/// Send `tag` with `fds`.
pub fn send(sock: &OwnedFd, tag: u8, fds: &[RawFd]) -> io::Result<()> {
    send_with(sock, tag, &[], fds)
}

/// Send `tag`, then `payload` in the same message, with `fds`.
pub fn send_with(sock: &OwnedFd, tag: u8, payload: &[u8], fds: &[RawFd]) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::from_raw_os_error(libc::E2BIG));
    }
    let buf = [tag];
    let iov = [IoSlice::new(&buf), IoSlice::new(payload)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &cmsg };
    sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::empty(), None).map_err(errno)?;
    Ok(())
}

/// Receive one message and up to `buf.len()` bytes after its tag: `None`
/// on end-of-file, `EMSGSIZE` when the message was longer.
pub fn recv_with(sock: &OwnedFd, buf: &mut [u8]) -> io::Result<Option<(u8, usize, Vec<OwnedFd>)>> {
    let mut tag = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut tag), IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let msg = recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC).map_err(errno)?;
    let fds = fds_of(&msg)?;
    if msg.flags.contains(MsgFlags::MSG_TRUNC) {
        return Err(io::Error::from_raw_os_error(libc::EMSGSIZE));
    }
    match msg.bytes {
        0 => Ok(None),
        n => Ok(Some((tag[0], n - 1, fds))),
    }
}

/// Receive one message: `None` on end-of-file.
pub fn recv(sock: &OwnedFd) -> io::Result<Option<(u8, Vec<OwnedFd>)>> {
    let mut buf = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut buf)];
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let msg = recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC).map_err(errno)?;
    let fds = fds_of(&msg)?;
    if msg.bytes == 0 {
        return Ok(None);
    }
    Ok(Some((buf[0], fds)))
}

/// The descriptors a received message carried, owned.
fn fds_of(msg: &nix::sys::socket::RecvMsg<'_, '_, ()>) -> io::Result<Vec<OwnedFd>> {
    let mut fds = Vec::new();
    for c in msg.cmsgs().map_err(errno)? {
        if let ControlMessageOwned::ScmRights(raw) = c {
            for fd in raw {
                // SAFETY: SCM_RIGHTS just installed this fd in our table.
                fds.push(unsafe { OwnedFd::from_raw_fd(fd) });
            }
        }
    }
    Ok(fds)
}
