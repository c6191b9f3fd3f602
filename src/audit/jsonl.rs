//! The built-in audit sink: JSON Lines, hash-chained, durable before
//! [`Audit::record`] returns, safe for several processes appending to one
//! file. The format and its guarantees are in `docs/audit.md`.
//!
//! One append, under an exclusive `flock` on the log:
//! 1. read the last line back from the end of the file (at most
//!    [`super::chain::MAX_LINE`] + 1 bytes): its `seq` and hash
//!    give the new record's `seq` and `prev`; an empty file gets a genesis
//!    record. A last line without its newline (an append torn by a crash) is
//!    an error naming the line: the log is never chained over damage;
//! 2. write the record and its newline with one `write` on the `O_APPEND`
//!    descriptor;
//! 3. `fdatasync` (every record, or every n-th with [`Sync::Batch`]);
//! 4. unlock.
//!
//! Threads of one process share the descriptor and take a mutex first
//! (`flock` is per open file, so it does not order them).
//!
//! The blocking work runs on tokio's blocking pool when `record` is awaited
//! inside a runtime, directly otherwise: the `flock` wait is as long as
//! another process's append (an fsync, milliseconds on a slow disk), which
//! must not stall a runtime worker that also drives other commands' output.

use std::fs::File;
use std::io::{self, Write};
use std::num::NonZeroU32;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use super::chain::{self, Head, Header, ReadHeader, MAX_LINE, VERSION};
use super::{Audit, AuditError, Event};
use crate::gate::BoxFuture;

/// When records reach the disk.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Sync {
    /// `fdatasync` after every record, before `record` returns: a record the
    /// caller was told is written survives a crash of the process or the
    /// machine (the default).
    #[default]
    Every,
    /// `fdatasync` after every n-th record of this writer, on
    /// [`JsonlAudit::sync`] and when the writer is dropped. Each record is
    /// in the kernel (it survives the process being killed) before `record`
    /// returns, but a crash of the machine can lose up to n - 1 of them.
    Batch(NonZeroU32),
}

/// A hash-chained JSON Lines audit log. See the module docs.
#[derive(Clone)]
pub struct JsonlAudit {
    shared: Arc<Shared>,
}

struct Shared {
    path: PathBuf,
    sync: Sync,
    state: Mutex<State>,
}

struct State {
    file: File,
    /// Records written and not yet synced (batch mode).
    unsynced: u32,
}

fn err(path: &Path, stage: &'static str, source: io::Error) -> AuditError {
    AuditError { path: path.to_path_buf(), stage, source }
}

fn invalid(path: &Path, stage: &'static str, msg: String) -> AuditError {
    err(path, stage, io::Error::new(io::ErrorKind::InvalidData, msg))
}

impl JsonlAudit {
    /// Open the log at `path` (created with mode 0600 if missing), syncing
    /// every record.
    pub fn open(path: impl Into<PathBuf>) -> Result<JsonlAudit, AuditError> {
        JsonlAudit::open_with(path, Sync::Every)
    }

    /// Open the log at `path` with the given sync rule. The last component
    /// must not be a symbolic link, and the file must be a regular file.
    /// Nothing is read until the first record.
    pub fn open_with(path: impl Into<PathBuf>, sync: Sync) -> Result<JsonlAudit, AuditError> {
        let path = path.into();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            // O_NONBLOCK: a FIFO or a device put in its place does not hang
            // the open; it is refused just below.
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(&path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) => {
                    err(&path, "opening (the path is a symbolic link, which is refused: give the real path)", e)
                }
                _ => err(&path, "opening", e),
            })?;
        let ty = file.metadata().map_err(|e| err(&path, "checking the file", e))?.file_type();
        if !ty.is_file() {
            let what = if ty.is_dir() {
                "a directory"
            } else if ty.is_fifo() {
                "a FIFO"
            } else if ty.is_socket() {
                "a socket"
            } else {
                "a device"
            };
            return Err(invalid(
                &path,
                "checking the file",
                format!("it is {what}, not a regular file; give the path of a log file"),
            ));
        }
        clear_nonblock(&file).map_err(|e| err(&path, "opening", e))?;
        Ok(JsonlAudit { shared: Arc::new(Shared { path, sync, state: Mutex::new(State { file, unsynced: 0 }) }) })
    }

    /// The log's path.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Append one record now (blocking), returning the new head: the
    /// record's `seq` and hash. [`Audit::record`] calls this.
    pub fn append(&self, event: &Event) -> Result<Head, AuditError> {
        let body = encode(&self.shared.path, event)?;
        self.shared.append(&body)
    }

    /// Sync the records a batch has not synced yet (nothing in
    /// [`Sync::Every`] mode).
    pub fn sync(&self) -> Result<(), AuditError> {
        let mut state = self.shared.state.lock().unwrap_or_else(PoisonError::into_inner);
        if state.unsynced > 0 {
            state.file.sync_data().map_err(|e| err(&self.shared.path, "syncing", e))?;
            state.unsynced = 0;
        }
        Ok(())
    }
}

impl Audit for JsonlAudit {
    fn record<'a>(&'a self, event: &'a Event) -> BoxFuture<'a, Result<(), AuditError>> {
        Box::pin(async move {
            let body = encode(&self.shared.path, event)?;
            if tokio::runtime::Handle::try_current().is_err() {
                return self.shared.append(&body).map(drop);
            }
            let shared = Arc::clone(&self.shared);
            match tokio::task::spawn_blocking(move || shared.append(&body)).await {
                Ok(r) => r.map(drop),
                Err(e) => {
                    Err(err(&self.shared.path, "writing (the writer task failed)", io::Error::other(e.to_string())))
                }
            }
        })
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        if state.unsynced > 0 {
            // Nobody is left to tell: the batch mode's documented loss on a
            // crash of the machine is what remains if this fails.
            let _ = state.file.sync_data();
        }
    }
}

/// The event's JSON object, checked for size, without its opening brace.
fn encode(path: &Path, event: &Event) -> Result<String, AuditError> {
    let json = serde_json::to_string(event).map_err(|e| err(path, "encoding the record", io::Error::other(e)))?;
    match json.strip_prefix('{') {
        Some(rest) if rest.len() < MAX_LINE => Ok(rest.to_string()),
        Some(_) => Err(err(
            path,
            "encoding the record",
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the record is longer than the limit of {MAX_LINE} bytes"),
            ),
        )),
        None => Err(err(path, "encoding the record", io::Error::other("an event is not a JSON object"))),
    }
}

impl Shared {
    fn append(&self, body: &str) -> Result<Head, AuditError> {
        let path = &self.path;
        let mut guard = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let State { file, unsynced } = &mut *guard;
        let _lock = FileLock::exclusive(file).map_err(|e| err(path, "locking", e))?;
        let last = last_record(path, file)?;
        let genesis_hex;
        let (seq, prev, genesis) = match &last {
            None => {
                genesis_hex = chain::hex(&random32().map_err(|e| err(path, "making the genesis", e))?);
                (0, chain::sha256_hex(genesis_hex.as_bytes()), Some(genesis_hex.as_str()))
            }
            Some(h) => {
                let seq = h
                    .seq
                    .checked_add(1)
                    .ok_or_else(|| invalid(path, "chaining", "the log is full (seq overflow)".into()))?;
                (seq, h.hash.clone(), None)
            }
        };
        let time = chain::rfc3339_ms(std::time::SystemTime::now());
        let header = Header { v: VERSION, seq, time: &time, pid: std::process::id(), prev: &prev, genesis };
        let header =
            serde_json::to_string(&header).map_err(|e| err(path, "encoding the record", io::Error::other(e)))?;
        let mut line = header.strip_suffix('}').unwrap_or(&header).to_string();
        line.push(',');
        line.push_str(body);
        if line.len() > MAX_LINE {
            return Err(err(
                path,
                "encoding the record",
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("the record is longer than the limit of {MAX_LINE} bytes"),
                ),
            ));
        }
        let head = Head { seq, hash: chain::sha256_hex(line.as_bytes()) };
        line.push('\n');
        // One write(2) on the O_APPEND descriptor (a regular file takes it
        // whole unless the disk is full); under the lock, so no other
        // writer's record can land inside it.
        let mut writer: &File = file;
        writer.write_all(line.as_bytes()).map_err(|e| err(path, "writing", e))?;
        *unsynced = unsynced.saturating_add(1);
        let due = match self.sync {
            Sync::Every => true,
            Sync::Batch(n) => *unsynced >= n.get(),
        };
        if due || last.is_none() {
            file.sync_data().map_err(|e| err(path, "syncing", e))?;
            *unsynced = 0;
        }
        if last.is_none() {
            // A new log: its directory entry must survive a crash too.
            sync_parent(path).map_err(|e| err(path, "syncing the directory", e))?;
        }
        Ok(head)
    }
}

/// The last record's head, or `None` for an empty file. Reads backwards
/// from the end, at most `MAX_LINE + 1` bytes.
fn last_record(path: &Path, file: &File) -> Result<Option<Head>, AuditError> {
    const STAGE: &str = "reading the last record";
    let len = file.metadata().map_err(|e| err(path, STAGE, e))?.len();
    if len == 0 {
        return Ok(None);
    }
    // The last line, its newline and the newline before it.
    let limit = u64::try_from(MAX_LINE + 2).unwrap_or(u64::MAX).min(len);
    let mut size = limit.min(4096);
    let (tail, start) = loop {
        let mut buf = vec![0u8; usize::try_from(size).map_err(|e| err(path, STAGE, io::Error::other(e)))?];
        file.read_exact_at(&mut buf, len - size).map_err(|e| err(path, STAGE, e))?;
        if buf.last() != Some(&b'\n') {
            let line = count_lines(file).unwrap_or(0);
            return Err(invalid(
                path,
                STAGE,
                format!(
                    "line {line} does not end with a newline (an append torn by a crash, or a damaged file): \
                     it is not chained over; check the log with `portcullis audit verify`, then move it aside and start a new one"
                ),
            ));
        }
        if let Some(i) = buf[..buf.len() - 1].iter().rposition(|&b| b == b'\n') {
            break (buf, i + 1);
        }
        if size == len {
            break (buf, 0);
        }
        if size == limit {
            let line = count_lines(file).unwrap_or(0);
            return Err(invalid(
                path,
                STAGE,
                format!("line {line} is longer than the limit of {MAX_LINE} bytes: not a record"),
            ));
        }
        size = size.saturating_mul(16).min(limit);
    };
    let line = &tail[start..tail.len() - 1];
    let bad = |why: String| {
        let n = count_lines(file).unwrap_or(0);
        invalid(
            path,
            STAGE,
            format!("line {n} is not an audit record ({why}); check the log with `portcullis audit verify`"),
        )
    };
    let header: ReadHeader = serde_json::from_slice(line).map_err(|e| bad(e.to_string()))?;
    if header.v != VERSION {
        return Err(bad(format!("format version {}, not {VERSION}", header.v)));
    }
    Ok(Some(Head { seq: header.seq, hash: chain::sha256_hex(line) }))
}

/// How many lines the file has, counting a last one without its newline
/// (for error messages only).
fn count_lines(file: &File) -> io::Result<u64> {
    let mut buf = vec![0u8; 64 * 1024];
    let (mut at, mut lines, mut last) = (0u64, 0u64, b'\n');
    loop {
        let n = file.read_at(&mut buf, at)?;
        if n == 0 {
            break;
        }
        lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        last = buf[n - 1];
        at += n as u64;
    }
    Ok(if last == b'\n' { lines } else { lines + 1 })
}

/// An exclusive `flock` on a file, released on drop.
struct FileLock<'a>(&'a File);

impl<'a> FileLock<'a> {
    fn exclusive(file: &'a File) -> io::Result<FileLock<'a>> {
        loop {
            // SAFETY: flock on a descriptor we own; no memory is passed.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(FileLock(file));
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

impl Drop for FileLock<'_> {
    fn drop(&mut self) {
        // SAFETY: as above. An unlock that fails leaves the lock to be
        // released when the descriptor is closed.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

fn clear_nonblock(file: &File) -> io::Result<()> {
    let fd = file.as_raw_fd();
    // SAFETY: F_GETFL/F_SETFL on a descriptor we own; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    // SAFETY: as above.
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// 32 bytes from the kernel's random source.
fn random32() -> io::Result<[u8; 32]> {
    let mut buf = [0u8; 32];
    let mut got = 0;
    while got < buf.len() {
        let rest = &mut buf[got..];
        // SAFETY: getrandom writes at most `rest.len()` bytes into `rest`,
        // which we own for the call.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        got += usize::try_from(n).unwrap_or(0);
    }
    Ok(buf)
}

fn sync_parent(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::Status;
    use crate::gate::Access;

    fn outcome(id: String) -> Event {
        Event::Outcome {
            id,
            status: Status::Completed,
            exit_code: Some(0),
            signal: None,
            duration_ms: 1,
            effective: Access::read_only(),
            refused_writes: None,
            removed: Vec::new(),
            error: None,
        }
    }

    fn dir() -> tempfile::TempDir {
        tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"))
    }

    #[test]
    fn records_longer_than_a_read_chunk_chain() {
        let d = dir();
        let path = d.path().join("log");
        let log = JsonlAudit::open(&path).unwrap_or_else(|e| panic!("{e}"));
        // 10 KB and 300 KB ids: the read-back grows past its first 4 KiB
        // and its second 64 KiB; the first record (the whole file) too.
        for (i, len) in [10_000, 10, 300_000, 5].into_iter().enumerate() {
            let head = log.append(&outcome("x".repeat(len))).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(head.seq, u64::try_from(i).unwrap_or(0));
        }
        let r = crate::audit::verify(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(r.intact, "{}", r.render());
        assert_eq!(r.records, 4);
    }

    #[test]
    fn a_record_over_the_limit_is_refused_and_nothing_is_written() {
        let d = dir();
        let path = d.path().join("log");
        let log = JsonlAudit::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let e = log.append(&outcome("x".repeat(MAX_LINE))).err().unwrap_or_else(|| panic!("a huge record was written"));
        assert_eq!(e.source.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(std::fs::metadata(&path).map(|m| m.len()).unwrap_or(1), 0);
    }

    #[test]
    fn a_last_line_that_is_not_a_record_is_named() {
        let d = dir();
        let path = d.path().join("log");
        std::fs::write(&path, "one\ntwo\n").unwrap_or_else(|e| panic!("{e}"));
        let log = JsonlAudit::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let e = log.append(&outcome("a".into())).err().unwrap_or_else(|| panic!("chained over a non-record"));
        assert!(e.to_string().contains("line 2 is not an audit record"), "{e}");
    }
}
