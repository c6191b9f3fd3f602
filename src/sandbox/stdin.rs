//! The command's stdin under `Stdin::Copy`.
//!
//! The command never holds a descriptor of the caller's input. A pipe (or
//! FIFO) or a stream socket is *relayed*: the command reads a fresh pipe of
//! its own, and a thread copies the caller's input into it without
//! consuming it (`tee(2)` for a pipe, `recv(MSG_PEEK)` for a socket). Once
//! the command has read k bytes of the relay pipe (the relay keeps a read
//! end and asks it with `FIONREAD` how much is left), exactly k bytes are
//! taken from the caller's input. So the caller keeps precisely what the
//! command did not read, as if the command had run directly, and the
//! command cannot reopen the caller's pipe through `/proc/self/fd/0` (it
//! reopens its own relay pipe), change its status flags, or write to the
//! caller's peer.
//!
//! The relay is event-driven (epoll), never polls. It wakes when
//!
//! * the command reads from the relay pipe: the relay's write end is in
//!   async mode (`O_ASYNC`, owned by the relay thread, `SIGIO` blocked
//!   there and read from a signalfd), and since Linux 5.16 a pipe signals
//!   its async writers on every read, by any process, through any
//!   descriptor of it (inotify would do the same, but closing an inotify
//!   instance waits for an SRCU grace period, ~13 ms per run here);
//! * the caller's input grows: a pipe wakes its readers when a write lands
//!   in an empty pipe and when a write completes; a socket on every
//!   arrival (edge-triggered);
//! * the run ends.
//!
//! That never leaves both sides waiting: before it sleeps, the relay takes
//! what the command read and refills the relay pipe until the command has
//! read nothing meanwhile. Then either the relay pipe holds data, and the
//! command's next read wakes the relay, or it is empty, and then so is the
//! caller's pipe (it holds exactly what is relayed and unread), whose next
//! write wakes the relay. Refilling a relay pipe that still holds unread
//! data needs bytes beyond the head of the caller's pipe, which `tee`
//! cannot skip to: the relay tees the caller's whole pipe into a shadow pipe
//! of the same size, drops the part already relayed and moves the rest on,
//! all by page references, so no data is copied. (Where the shadow cannot
//! be made that big, the relay refills only an empty relay pipe.)

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

use super::SandboxError;
use crate::sys;

/// How the caller's stdin reaches the command.
pub(super) enum StdinPlan {
    /// `/dev/null` (also for a stdin that is the null device itself).
    Null,
    /// A pipe or stream socket, relayed (see the module documentation).
    Relay(Relay),
    /// A pipe fed by a thread: from a regular file with positional reads
    /// (`from` is the caller's offset, which is never moved, so nothing of
    /// the caller's input is consumed), else by plain reads.
    Feed { read: OwnedFd, write: OwnedFd, from: Option<u64> },
}

impl StdinPlan {
    /// The descriptor to give the helper as its stdin (None: `/dev/null`).
    pub(super) fn command_end(&self) -> Option<RawFd> {
        match self {
            StdinPlan::Null => None,
            StdinPlan::Relay(r) => Some(r.read.as_raw_fd()),
            StdinPlan::Feed { read, .. } => Some(read.as_raw_fd()),
        }
    }
}

/// Refuse the run when the caller's stdin is a named FIFO that still has a
/// name: the relay keeps the command off the caller's descriptor, but not
/// off the FIFO's name, through which it could read the caller's input or
/// write into it. Where that name lies is not judged: the path
/// `/proc/self/fd/0` shows is the one the caller opened it by, and the same
/// FIFO may have other names (hard links) or be reached through another
/// mount of its directory (a host bind of the workspace elsewhere), so a
/// FIFO opened outside the sandbox's view may still be in it. An anonymous
/// pipe (pipefs) has no name, nor has a FIFO unlinked by every name (the
/// kernel cannot link a file with no links back in).
pub(super) fn refuse_named_fifo() -> Result<(), SandboxError> {
    let stdin = io::stdin();
    let Ok(st) = nix::sys::stat::fstat(stdin.as_fd()) else { return Ok(()) };
    if st.st_mode & libc::S_IFMT != libc::S_IFIFO || st.st_nlink == 0 {
        return Ok(());
    }
    // An anonymous pipe lives on pipefs (its /proc/self/fd link reads
    // `pipe:[inode]`); a named FIFO on the filesystem of its directory.
    let fs = nix::sys::statfs::fstatfs(stdin.as_fd()).map_err(|e| SandboxError::Io {
        stage: "finding what the caller's stdin FIFO is (fstatfs)",
        source: e.into(),
    })?;
    // PIPEFS_MAGIC from <linux/magic.h> (not in nix).
    if u64::try_from(fs.filesystem_type().0).ok() == Some(0x5049_5045) {
        return Ok(());
    }
    // For the message only: the name the caller opened it by.
    let name = match std::fs::read_link("/proc/self/fd/0") {
        Ok(p) => format!(" {}", p.display()),
        Err(_) => String::new(),
    };
    Err(SandboxError::invalid(
        "stdin",
        format!(
            "the caller's stdin is the named FIFO{name} ({} name(s)): the command could open it by a name in its view \
         (this one, another hard link, or the same directory reached through another mount) and read the \
         caller's input or write into it, so a named FIFO is never passed; feed the input through an anonymous \
         pipe instead (cat FIFO | portcullis exec ...), or give the command no stdin (</dev/null; Stdin::Null \
         in the library)",
            st.st_nlink
        ),
    ))
}

/// Decide how the caller's stdin (fd 0) reaches the command.
pub(super) fn plan() -> Result<StdinPlan, SandboxError> {
    use nix::sys::stat::SFlag;
    let io_err = |source| SandboxError::Io { stage: "preparing stdin", source };
    let stdin = io::stdin();
    let st = match nix::sys::stat::fstat(stdin.as_fd()) {
        Ok(st) => st,
        // No stdin at all (fd 0 closed): the command gets /dev/null.
        Err(nix::errno::Errno::EBADF) => return Ok(StdinPlan::Null),
        Err(e) => return Err(io_err(e.into())),
    };
    let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    // The caller's stdin is /dev/null (the usual case for an agent's tool
    // call): the command gets a /dev/null of its own and no thread starts.
    // Only the real null device (char 1:3) qualifies.
    if kind == SFlag::S_IFCHR && st.st_rdev == libc::makedev(1, 3) {
        return Ok(StdinPlan::Null);
    }
    // SAFETY: F_GETFL on fd 0, which fstat just showed open, only reports.
    let fl = unsafe { libc::fcntl(0, libc::F_GETFL) };
    if fl >= 0 && fl & libc::O_ACCMODE == libc::O_WRONLY {
        // A write-only stdin cannot be read, by the command either.
        return Ok(StdinPlan::Null);
    }
    let source = match kind {
        SFlag::S_IFIFO => Some(Source::Pipe),
        SFlag::S_IFSOCK if sys::socket_type(stdin.as_fd()).map_err(io_err)? == libc::SOCK_STREAM => {
            Some(Source::Stream)
        }
        _ => None,
    };
    if let Some(source) = source {
        return Relay::new(source).map(StdinPlan::Relay);
    }
    let from = if kind == SFlag::S_IFREG {
        // SAFETY: lseek on fd 0 with offset 0 from the current position only
        // reports the offset.
        let pos = unsafe { libc::lseek(0, 0, libc::SEEK_CUR) };
        Some(u64::try_from(pos).map_err(|_| io_err(io::Error::last_os_error()))?)
    } else {
        None
    };
    let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| io_err(e.into()))?;
    Ok(StdinPlan::Feed { read, write, from })
}

/// Feed the caller's stdin into `w` on a detached thread; it ends at
/// end-of-file or when the command closes its end.
pub(super) fn feed(w: OwnedFd, from: Option<u64>) {
    let _ = std::thread::Builder::new().name("portcullis-stdin".into()).spawn(move || {
        let mut out = File::from(w);
        match (from, io::stdin().as_fd().try_clone_to_owned()) {
            (Some(mut pos), Ok(fd)) => {
                use std::os::unix::fs::FileExt;
                let file = File::from(fd);
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match file.read_at(&mut buf, pos) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if io::Write::write_all(&mut out, &buf[..n]).is_err() {
                                return;
                            }
                            pos += n as u64;
                        }
                    }
                }
            }
            _ => {
                let _ = io::copy(&mut io::stdin().lock(), &mut out);
            }
        }
    });
}

/// What the caller's stdin is, for the relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// An anonymous pipe or a named FIFO.
    Pipe,
    /// A `SOCK_STREAM` socket (unix or TCP).
    Stream,
}

/// One relay at a time per process: there is one fd 0, and two relays
/// taking from it would each take what the other's command read.
static RELAYING: AtomicBool = AtomicBool::new(false);

/// Bytes peeked from a socket per refill beyond what is already relayed.
const PEEK_CHUNK: usize = 256 * 1024;

/// The stdin relay of one run: made before the helper starts (its pipe's
/// read end becomes the command's fd 0), started once the helper runs, and
/// finished after the whole sandbox has ended.
pub(super) struct Relay {
    /// The relay pipe's read end: the command's stdin, and kept here to ask
    /// how much the command left unread.
    read: OwnedFd,
    pump: Option<Pump>,
    running: Option<(OwnedFd, std::thread::JoinHandle<Outcome>)>,
    /// Dropped last, after the thread has ended.
    _slot: Slot,
}

/// The relay's state, moved into its thread.
struct Pump {
    source: Source,
    /// The caller's stdin (a duplicate of fd 0: the same open pipe or socket).
    src: OwnedFd,
    /// The relay pipe's write end; None once end-of-input was passed on.
    out: Option<OwnedFd>,
    /// The relay pipe's read end (FIONREAD only).
    probe: OwnedFd,
    /// A pipe as big as the caller's, to reach beyond what is relayed.
    shadow: Option<(OwnedFd, OwnedFd)>,
    null: File,
    buf: Vec<u8>,
    /// Bytes copied into the relay pipe.
    sent: u64,
    /// Bytes taken from the caller's input (what the command has read).
    taken: u64,
    /// Bytes the command read that were gone from the caller's input when
    /// the relay came to take them (another process reads it too).
    missing: u64,
    error: Option<String>,
}

/// How a relay ended.
#[derive(Debug, Default)]
struct Outcome {
    missing: u64,
    error: Option<String>,
}

fn nonblocking_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    use nix::fcntl::OFlag;
    nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).map_err(io::Error::from)
}

fn again(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::EAGAIN)
}

impl Relay {
    fn new(source: Source) -> Result<Relay, SandboxError> {
        if RELAYING.swap(true, Ordering::AcqRel) {
            return Err(SandboxError::invalid(
                "stdin",
                "stdin is already relayed to another command that is running; give this run Stdin::Null",
            ));
        }
        // From here on, dropping the slot (on an error, or with the relay)
        // frees it.
        let slot = Slot;
        let io_err = |source| SandboxError::Io { stage: "preparing the stdin relay", source };
        let src = io::stdin().as_fd().try_clone_to_owned().map_err(io_err)?;
        let src = sys::dup_above(&src, 10).map_err(io_err)?;
        let (read, write) = nonblocking_pipe().map_err(io_err)?;
        // The command's end blocks as a stdin normally does (the flag lives
        // on the open pipe end, so this leaves the write end non-blocking).
        {
            let fl = nix::fcntl::fcntl(&read, nix::fcntl::FcntlArg::F_GETFL).map_err(|e| io_err(e.into()))?;
            let fl = nix::fcntl::OFlag::from_bits_truncate(fl) - nix::fcntl::OFlag::O_NONBLOCK;
            nix::fcntl::fcntl(&read, nix::fcntl::FcntlArg::F_SETFL(fl)).map_err(|e| io_err(e.into()))?;
        }
        let mut shadow = None;
        if source == Source::Pipe {
            // A relay pipe as big as the caller's where the limits allow,
            // and a shadow that takes all of the caller's buffers.
            let theirs = sys::pipe_size(src.as_fd()).map_err(io_err)?;
            let _ = sys::set_pipe_size(write.as_fd(), theirs);
            let s = nonblocking_pipe().map_err(io_err)?;
            if sys::set_pipe_size(s.1.as_fd(), theirs).is_ok_and(|n| n >= theirs) {
                shadow = Some(s);
            }
        }
        let null = std::fs::OpenOptions::new().write(true).open("/dev/null").map_err(io_err)?;
        let probe = sys::dup_above(&read, 10).map_err(io_err)?;
        Ok(Relay {
            read,
            pump: Some(Pump {
                source,
                src,
                out: Some(write),
                probe,
                shadow,
                null,
                buf: Vec::new(),
                sent: 0,
                taken: 0,
                missing: 0,
                error: None,
            }),
            running: None,
            _slot: slot,
        })
    }

    /// Start relaying (once the helper holds its end).
    pub(super) fn start(&mut self) -> Result<(), SandboxError> {
        let Some(pump) = self.pump.take() else { return Ok(()) };
        let io_err = |source| SandboxError::Io { stage: "starting the stdin relay", source };
        let (stop_r, stop_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| io_err(e.into()))?;
        let thread = std::thread::Builder::new()
            .name("portcullis-stdin".into())
            .spawn(move || pump.run(stop_r))
            .map_err(io_err)?;
        self.running = Some((stop_w, thread));
        Ok(())
    }

    /// Stop relaying after the run has ended: take from the caller's input
    /// what the command read last, and say what went wrong, if anything.
    pub(super) fn finish(mut self) -> Option<super::Warning> {
        let outcome = self.stop()?;
        (outcome.error.is_some() || outcome.missing > 0)
            .then_some(super::Warning::StdinRelay { error: outcome.error, missing: outcome.missing })
    }

    fn stop(&mut self) -> Option<Outcome> {
        let (stop_w, thread) = self.running.take()?;
        drop(stop_w);
        match thread.join() {
            Ok(o) => Some(o),
            Err(_) => Some(Outcome { error: Some("the relay thread panicked".into()), ..Outcome::default() }),
        }
    }
}

/// The process-wide relay slot, freed on drop.
struct Slot;

impl Drop for Slot {
    fn drop(&mut self) {
        RELAYING.store(false, Ordering::Release);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        // An abandoned run: settle what the command read and stop, so no
        // thread touches the caller's input after the run is gone.
        self.stop();
    }
}

const SRC: u64 = 0;
const READS: u64 = 1;
const STOP: u64 = 2;

impl Pump {
    fn run(mut self, stop: OwnedFd) -> Outcome {
        if let Err(e) = self.relay(&stop) {
            self.error.get_or_insert_with(|| e.to_string());
        }
        // Closing the write end also ends its SIGIO requests, before this
        // thread (their owner) is gone.
        self.out = None;
        // The run has ended (or the relay failed): take what the command
        // read, and nothing more.
        if let Err(e) = self.settle() {
            self.error.get_or_insert_with(|| format!("taking what the command read: {e}"));
        }
        Outcome { missing: self.missing, error: self.error }
    }

    fn relay(&mut self, stop: &OwnedFd) -> io::Result<()> {
        let ep = sys::Epoll::new()?;
        ep.add(self.src.as_fd(), libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLET, SRC)?;
        // The command's reads of the relay pipe, as SIGIO to this thread.
        let reads = sys::sigio_fd()?;
        if let Some(out) = &self.out {
            sys::sigio_on_reads(out.as_fd())?;
        }
        ep.add(reads.as_fd(), libc::EPOLLIN, READS)?;
        ep.add(stop.as_fd(), libc::EPOLLIN, STOP)?;
        loop {
            self.settle()?;
            // Refill until the command read nothing meanwhile (see the
            // module documentation for why this cannot leave both sides
            // waiting).
            loop {
                if let Err(e) = self.refill() {
                    // Pass the failure on as end-of-input, and keep settling
                    // what the command reads of what it has.
                    self.error = Some(e.to_string());
                    self.out = None;
                }
                if self.settle()? == 0 {
                    break;
                }
            }
            if self.out.is_none() {
                // Nothing more to relay: wait for the end of the run only.
                let _ = ep.delete(self.src.as_fd());
            }
            let evs = ep.wait()?;
            if evs.contains(&READS) {
                sys::drain(reads.as_fd());
            }
            if evs.contains(&STOP) {
                return Ok(());
            }
        }
    }

    /// Take from the caller's input what the command has read of the relay
    /// pipe. A command that wrote into its own relay pipe (reopened through
    /// /proc) makes this count low, never high: nothing it did not read is
    /// taken.
    /// Returns how many bytes it accounted for.
    fn settle(&mut self) -> io::Result<u64> {
        let left = sys::fionread(self.probe.as_fd())? as u64;
        let read = self.sent.saturating_sub(left).max(self.taken);
        let newly = read - self.taken;
        let mut want = newly;
        while want > 0 {
            let len = usize::try_from(want).unwrap_or(usize::MAX);
            let r = match self.source {
                Source::Pipe => sys::splice(self.src.as_fd(), self.null.as_fd(), len),
                Source::Stream => {
                    let n = len.min(PEEK_CHUNK);
                    if self.buf.len() < n {
                        self.buf.resize(n, 0);
                    }
                    sys::recv(self.src.as_fd(), &mut self.buf[..n], libc::MSG_DONTWAIT)
                }
            };
            match r {
                Ok(n) if n > 0 => {
                    self.taken += n as u64;
                    want -= n as u64;
                }
                // Gone: another reader of the caller's input took them.
                Ok(_) => break,
                Err(e) if again(&e) => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        if want > 0 {
            self.missing += want;
            self.taken += want;
        }
        Ok(newly)
    }

    /// Copy what the caller's input holds beyond what was relayed into the
    /// relay pipe, until it is full or all is relayed; at the end of the
    /// caller's input, close the relay pipe.
    fn refill(&mut self) -> io::Result<()> {
        loop {
            let Some(out) = &self.out else { return Ok(()) };
            // Hang-up first, then the count: data written before a hang-up
            // is always counted.
            let hup = match self.source {
                Source::Pipe => sys::poll_now(self.src.as_fd(), libc::POLLIN)? & libc::POLLHUP != 0,
                Source::Stream => {
                    sys::poll_now(self.src.as_fd(), libc::POLLIN | libc::POLLRDHUP)? & (libc::POLLRDHUP | libc::POLLHUP)
                        != 0
                }
            };
            let held = self.sent - self.taken;
            let end = self.taken + sys::fionread(self.src.as_fd())? as u64;
            let n = if end > self.sent || (self.source == Source::Pipe && held == 0) {
                let fresh = usize::try_from(end.saturating_sub(self.sent)).unwrap_or(usize::MAX).max(1);
                let r = match (self.source, &self.shadow) {
                    // The relay pipe holds none of the caller's input: tee it
                    // straight from the head. (Also the end-of-input check of
                    // an empty pipe: tee gives 0 when no writer is left.)
                    (Source::Pipe, _) if held == 0 => sys::tee(self.src.as_fd(), out.as_fd(), fresh.max(1 << 20)),
                    (Source::Pipe, Some((sr, sw))) => self.beyond(sr, sw, out, held),
                    (Source::Pipe, None) => Ok(0),
                    (Source::Stream, _) => peek(&self.src, &mut self.buf, out, held, fresh),
                };
                match r {
                    Ok(0) if self.source == Source::Pipe && held == 0 && end == self.sent => {
                        // Empty, and tee saw no writer: end of input.
                        self.out = None;
                        return Ok(());
                    }
                    Ok(n) => n,
                    Err(e) if again(&e) => 0,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e),
                }
            } else {
                0
            };
            if n == 0 {
                if hup && end <= self.sent {
                    self.out = None;
                }
                return Ok(());
            }
            self.sent += n as u64;
        }
    }

    /// Relay from a pipe whose first `held` bytes are already relayed: tee
    /// all of it into the shadow, drop those bytes, move the rest on.
    fn beyond(&self, sr: &OwnedFd, sw: &OwnedFd, out: &OwnedFd, held: u64) -> io::Result<usize> {
        let got = sys::tee(self.src.as_fd(), sw.as_fd(), usize::MAX >> 1)? as u64;
        let moved = if got > held {
            self.discard(sr, held)?;
            match sys::splice(sr.as_fd(), out.as_fd(), usize::try_from(got - held).unwrap_or(usize::MAX)) {
                Ok(n) => n,
                Err(e) if again(&e) => 0,
                Err(e) => return Err(e),
            }
        } else {
            0
        };
        let rest = sys::fionread(sr.as_fd())? as u64;
        self.discard(sr, rest)?;
        Ok(moved)
    }

    /// Drop exactly `len` bytes from the shadow pipe.
    fn discard(&self, sr: &OwnedFd, mut len: u64) -> io::Result<()> {
        while len > 0 {
            let n = sys::splice(sr.as_fd(), self.null.as_fd(), usize::try_from(len).unwrap_or(usize::MAX))?;
            if n == 0 {
                return Err(io::Error::other("the shadow pipe ran dry"));
            }
            len -= n as u64;
        }
        Ok(())
    }
}

/// Relay from a socket whose first `held` bytes are already relayed: peek
/// past them and write what follows.
fn peek(src: &OwnedFd, buf: &mut Vec<u8>, out: &OwnedFd, held: u64, fresh: usize) -> io::Result<usize> {
    let held = usize::try_from(held).map_err(|_| io::Error::from_raw_os_error(libc::EOVERFLOW))?;
    let want = held.saturating_add(fresh.min(PEEK_CHUNK));
    if buf.len() < want {
        buf.resize(want, 0);
    }
    let got = sys::recv(src.as_fd(), &mut buf[..want], libc::MSG_PEEK | libc::MSG_DONTWAIT)?;
    if got <= held {
        return Ok(0);
    }
    nix::unistd::write(out, &buf[held..got]).map_err(io::Error::from)
}
