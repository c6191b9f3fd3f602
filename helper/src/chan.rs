//! The channel between the outer helper and pid 1: a `SOCK_SEQPACKET`
//! socketpair made before `clone3`. Each message is one tag byte plus fds
//! (`SCM_RIGHTS`): `m` — maps written, with the idmapped mount trees; `n` —
//! the network namespace, made in parallel while pid 1 builds the root.
//! End-of-file means the outer helper died: pid 1 gives up.

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

/// A close-on-exec seqpacket pair: (outer end, pid 1 end).
pub fn pair() -> io::Result<(OwnedFd, OwnedFd)> {
    socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC).map_err(errno)
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
