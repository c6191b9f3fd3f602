//! The refused-write observer, command side: install the observer's filter
//! with a listener (`portcullis_helper::observe`) and hand the listener to
//! the library over [`OBSERVE_FD`], then close every copy here, so that the
//! command never holds it.
//!
//! Runs in the command's process after Landlock, as its last step before
//! `execve`: the observer's watches are folded into the main filter's
//! program (`observe::compile_with`), installed as one filter with the
//! listener. Failing to install the observer (a kernel without user
//! notification, a container profile that refuses it, an ancestor's
//! listener) is not a failure of the run: the library is told the errno and
//! the command runs unobserved, under the main filter alone. Failing to hand over an installed listener
//! is one: with the listener closed, every watched call would fail with
//! `ENOSYS`, so the command must not start.

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
use portcullis_helper::observe::{TAG_FAILED, TAG_LISTENER};
use portcullis_helper::report::Step;
use portcullis_helper::OBSERVE_FD;
use seccompiler::BpfProgram;

use crate::Fail;

/// `SECCOMP_SET_MODE_FILTER` (`<linux/seccomp.h>`).
const SECCOMP_SET_MODE_FILTER: libc::c_ulong = 1;

/// Install `program` with a new listener; the listener fd, or the errno.
fn install(program: &BpfProgram) -> io::Result<OwnedFd> {
    let len = u16::try_from(program.len()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let fprog = libc::sock_fprog { len, filter: program.as_ptr() as *mut libc::sock_filter };
    // SAFETY: `fprog` points at `program`, which outlives the call; the
    // kernel copies the program and returns a new fd (or -1 and errno).
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &fprog as *const libc::sock_fprog,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = RawFd::try_from(r).map_err(|_| io::Error::from_raw_os_error(libc::EBADF))?;
    // SAFETY: the kernel just returned this fd to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn send(sock: &OwnedFd, payload: &[u8], fds: &[RawFd]) -> io::Result<()> {
    let iov = [IoSlice::new(payload)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &cmsg };
    sendmsg::<()>(sock.as_raw_fd(), &iov, cmsgs, MsgFlags::empty(), None)
        .map(drop)
        .map_err(|e| io::Error::from_raw_os_error(e as i32))
}

/// Install the command's seccomp filter: `folded` (the main program with
/// the observer's watches folded in, `observe::compile_with`) with a
/// listener, handed over, when the library asked for the observer and
/// passed the socket; otherwise, or when that install fails (the library
/// is told the errno and the run goes on unobserved), the main program
/// `main` alone, whose failure fails the run (`Seccomp`).
///
/// One `seccomp(2)` call where there were two, the observer's filter and
/// then the main one: the kernel checks, JIT-compiles and caches one
/// program on the command's critical path, and runs one on a call it
/// cannot cache.
pub fn start_folded(main: &BpfProgram, folded: Option<&BpfProgram>) -> Result<(), Fail> {
    match folded {
        Some(program) if observe_with(program)? => Ok(()),
        _ => crate::command::seccomp(main),
    }
}

/// Install the observer alone (when the library asked for it and passed
/// the socket) and hand its listener over: a debug helper's
/// `skip_seccomp`, which leaves out the main filter only.
pub fn start(program: Option<&BpfProgram>) -> Result<(), Fail> {
    if let Some(program) = program {
        observe_with(program)?;
    }
    Ok(())
}

/// Install `program` with a new listener and hand the listener to the
/// library over the socket on [`OBSERVE_FD`]: whether it is installed.
/// Without the socket nothing is installed (nobody would answer); an
/// install the kernel refuses is reported to the library and is not a
/// failure of the run; a listener that cannot be handed over is.
fn observe_with(program: &BpfProgram) -> Result<bool, Fail> {
    // The library passes the socket whenever it asks for the observer.
    if !crate::sys::fd_is_open(OBSERVE_FD) {
        return Ok(false);
    }
    // SAFETY: fd 7 is the observer socket the library passed (checked open
    // above); nothing else in this process owns it.
    let sock = unsafe { crate::sys::adopt(OBSERVE_FD) };
    match install(program) {
        Ok(listener) => {
            send(&sock, &[TAG_LISTENER], &[listener.as_raw_fd()]).map_err(|e| Fail::io(Step::Observer, e))?;
            drop(listener);
            Ok(true)
        }
        Err(e) => {
            let errno = e.raw_os_error().unwrap_or(libc::EINVAL);
            let mut msg = vec![TAG_FAILED];
            msg.extend_from_slice(&errno.to_le_bytes());
            // The library treats a lost message like a closed socket: the
            // report says it is unavailable. The run goes on either way.
            let _ = send(&sock, &msg, &[]);
            Ok(false)
        }
    }
}
