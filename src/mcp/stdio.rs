//! The server's stdin and stdout, read and written on the runtime's own
//! threads when they are pipes or sockets (what an MCP client gives its
//! server): non-blocking and registered with the reactor, so that a line
//! read or a flush is not a hand-off to tokio's blocking pool and back
//! (tokio's `stdin()`/`stdout()` run each read and write there: about a
//! dozen context switches per call, measured by `scripts/bench-serve`).
//! Anything else (a terminal, a file) falls back to tokio's.
//!
//! The file descriptions' flags are put back when the value is dropped:
//! `O_NONBLOCK` belongs to the description, which the client may share.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A pipe or socket end, non-blocking and registered with the reactor.
pub struct Pipe {
    fd: AsyncFd<OwnedFd>,
    /// The description's flags before, to put back.
    flags: OFlag,
}

impl Pipe {
    /// A duplicate of `fd` (0 or 1), if it is a pipe or a socket that can
    /// be made non-blocking and registered.
    fn of(fd: std::os::fd::BorrowedFd<'_>) -> Option<Pipe> {
        let st = nix::sys::stat::fstat(fd).ok()?;
        let kind = nix::sys::stat::SFlag::from_bits_truncate(st.st_mode) & nix::sys::stat::SFlag::S_IFMT;
        if kind != nix::sys::stat::SFlag::S_IFIFO && kind != nix::sys::stat::SFlag::S_IFSOCK {
            return None;
        }
        let own = fd.try_clone_to_owned().ok()?;
        let flags = OFlag::from_bits_truncate(fcntl(&own, FcntlArg::F_GETFL).ok()?);
        fcntl(&own, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK)).ok()?;
        // SAFETY: `own` is an `OwnedFd` the `AsyncFd` takes ownership of: it
        // stays open, refers to the same description and returns the same
        // number from `as_raw_fd` until the `AsyncFd` is dropped. Called on
        // a runtime with a reactor (the server's).
        let registered = unsafe { AsyncFd::register(own) };
        match registered {
            Ok(fd) => Some(Pipe { fd, flags }),
            Err(e) => {
                // Put the flags back on the description we changed.
                let _ = fcntl(e.into_parts().0, FcntlArg::F_SETFL(flags));
                None
            }
        }
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        let _ = fcntl(self.fd.get_ref(), FcntlArg::F_SETFL(self.flags));
    }
}

impl AsyncRead for Pipe {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.fd.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match guard.try_io(|fd| nix::unistd::read(fd.get_ref(), unfilled).map_err(io::Error::from)) {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for Pipe {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.fd.poll_write_ready(cx))?;
            match guard.try_io(|fd| nix::unistd::write(fd.get_ref().as_fd(), data).map_err(io::Error::from)) {
                Ok(Ok(n)) => return Poll::Ready(Ok(n)),
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// The server's stdin: a [`Pipe`] when it is one, else tokio's.
pub fn stdin() -> Pin<Box<dyn AsyncRead + Send>> {
    match Pipe::of(io::stdin().as_fd()) {
        Some(p) => Box::pin(p),
        None => Box::pin(tokio::io::stdin()),
    }
}

/// The server's stdout: a [`Pipe`] when it is one, else tokio's.
pub fn stdout() -> Pin<Box<dyn AsyncWrite + Send>> {
    match Pipe::of(io::stdout().as_fd()) {
        Some(p) => Box::pin(p),
        None => Box::pin(tokio::io::stdout()),
    }
}
