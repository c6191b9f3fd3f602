//! The workspace lock: writable runs of one workspace hold it shared for
//! their life, and the git guard's cleanup holds it exclusive, once no
//! writable run is left (see `sandbox::pending`).
//!
//! The lock is an `flock` on a file named after the workspace's device and
//! inode, in a directory private to the caller's uid
//! (`/dev/shm/portcullis-<uid>`, or `/tmp/portcullis-<uid>` on a host
//! without `/dev/shm`). No command can take it: in the full sandbox
//! `/dev/shm` and `/tmp` are private tmpfs mounts (and where a request would
//! make the directory visible after all, the plan masks it), and in the
//! landlock-only mode Landlock does not let the command open anything there
//! (the plan refuses a request that would). A lock on the workspace
//! directory itself, which the command can open, would let any command
//! stall every writable run beside it.
//!
//! Different uids get different directories, so their runs do not wait for
//! each other. The lock files are never removed: removing one while another
//! run waits on it would let a third run lock a fresh file beside it. Nor
//! are their records' directories (`sandbox::pending`): a run holding one
//! open would write its record where no cleanup looks.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::fcntl::{Flock, FlockArg, OFlag};
use nix::sys::stat::{fstat, Mode, SFlag};
use tokio_util::sync::CancellationToken;

use super::SandboxError;

/// How the lock is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Alone: a writable run on the host network, on a kernel without
    /// Landlock's abstract-socket scoping; the git guard's cleanup of a
    /// workspace.
    Exclusive,
    /// Beside its own kind: a writable run of a workspace (beside other
    /// writable runs, never beside its cleanup); a read-only run on the
    /// host network on such a kernel.
    Shared,
}

/// The caller's lock directory (it may not exist yet). Where it lies is
/// decided once per process: every run of a process must lock in one
/// place, whatever becomes of `/dev/shm` in between (and the decision is a
/// `stat` less on each writable run's path, which asked three times).
pub(crate) fn dir(uid: u32) -> PathBuf {
    static BASE: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();
    let base = BASE.get_or_init(|| if Path::new("/dev/shm").is_dir() { "/dev/shm" } else { "/tmp" });
    PathBuf::from(format!("{base}/portcullis-{uid}"))
}

fn lock_err(path: &Path, problem: String) -> SandboxError {
    SandboxError::Lock { path: path.to_path_buf(), problem }
}

/// Create the caller's lock directory if needed (mode 700) and open it,
/// refusing one that is a link, not a directory, not the caller's, or open
/// to others: another user could otherwise create it first and hold or
/// swap the lock files.
pub(crate) fn open_dir(uid: u32) -> Result<OwnedFd, SandboxError> {
    let path = dir(uid);
    let fd = open_private_dir(nix::fcntl::AT_FDCWD, &path).map_err(|step| match step {
        DirStep::Create(e) => lock_err(&path, format!("cannot create it: {}", io::Error::from(e))),
        DirStep::Open(e) => lock_err(
            &path,
            format!("cannot open it ({}); it must be a directory, not a symbolic link", io::Error::from(e)),
        ),
    })?;
    let st = fstat(fd.as_fd()).map_err(|e| lock_err(&path, format!("cannot stat it: {}", io::Error::from(e))))?;
    if st.st_uid != uid {
        return Err(lock_err(
            &path,
            format!("it belongs to uid {}, not to uid {uid}; remove it (another user may have made it)", st.st_uid),
        ));
    }
    if st.st_mode & 0o077 != 0 {
        return Err(lock_err(
            &path,
            format!("its mode is {:o}, open to other users; `chmod 700` it or remove it", st.st_mode & 0o7777),
        ));
    }
    Ok(fd)
}

/// Which step of [`open_private_dir`] failed.
pub(crate) enum DirStep {
    Create(nix::errno::Errno),
    Open(nix::errno::Errno),
}

/// The directory `name` in `at` (made mode 700 when missing), opened without
/// following a link: opened first, and made only when that finds it
/// missing (then opened again), so that once it exists, as on every run but
/// the first, no `mkdir` is made. `openat`, not `open`, which musl follows
/// with an `F_SETFD`. The caller checks whose it is and its mode.
pub(crate) fn open_private_dir(at: BorrowedFd<'_>, name: &Path) -> Result<OwnedFd, DirStep> {
    let open = || {
        nix::fcntl::openat(
            at,
            name,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
    };
    match open() {
        Err(nix::errno::Errno::ENOENT) => {
            match nix::sys::stat::mkdirat(at, name, Mode::from_bits_truncate(0o700)) {
                Ok(()) | Err(nix::errno::Errno::EEXIST) => {}
                Err(e) => return Err(DirStep::Create(e)),
            }
            open().map_err(DirStep::Open)
        }
        r => r.map_err(DirStep::Open),
    }
}

/// The lock file's name for a workspace: its device and inode, so that two
/// spellings of one directory share a lock.
pub(crate) fn file_name(ws: &Path) -> Result<String, SandboxError> {
    let st = nix::sys::stat::stat(ws).map_err(|e| SandboxError::Path {
        what: "workspace to lock",
        path: ws.to_path_buf(),
        source: e.into(),
    })?;
    Ok(format!("ws-{:x}-{:x}.lock", st.st_dev, st.st_ino))
}

/// The caller's lock directory, opened, and the name of `ws`'s lock file
/// in it (its git-guard records live beside it: `sandbox::pending`).
pub(crate) fn open_for_records(ws: &Path, uid: u32) -> Result<(OwnedFd, String), SandboxError> {
    Ok((open_dir(uid)?, file_name(ws)?))
}

/// What a lock keeps apart.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Key<'a> {
    /// Runs of one workspace.
    Workspace(&'a Path),
    /// On a kernel without Landlock's abstract-socket scoping: every run of
    /// the caller's on the host network (they share its abstract sockets).
    HostNetwork,
}

/// Open (creating it if needed) the lock file for `key`.
fn open_file(key: Key<'_>, uid: u32) -> Result<File, SandboxError> {
    open_file_in(open_dir(uid)?.as_fd(), key, uid)
}

/// [`open_file`] in the lock directory `dir_fd` ([`open_dir`]'s).
fn open_file_in(dir_fd: BorrowedFd<'_>, key: Key<'_>, uid: u32) -> Result<File, SandboxError> {
    let name = match key {
        Key::Workspace(ws) => file_name(ws)?,
        Key::HostNetwork => "host-network.lock".to_string(),
    };
    let path = dir(uid).join(&name);
    let fd = nix::fcntl::openat(
        dir_fd,
        std::ffi::OsStr::new(&name).as_bytes(),
        OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK,
        Mode::from_bits_truncate(0o600),
    )
    .map_err(|e| lock_err(&path, format!("cannot open the lock file: {}", io::Error::from(e))))?;
    let file = File::from(fd);
    let st = fstat(file.as_fd()).map_err(|e| lock_err(&path, format!("cannot stat it: {}", io::Error::from(e))))?;
    if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG || st.st_uid != uid {
        return Err(lock_err(&path, "the lock file is not a regular file of the caller's; remove it".into()));
    }
    Ok(file)
}

/// Take the lock for `key` exclusive if no one holds it, without waiting:
/// `None` when someone does.
pub(crate) fn try_exclusive(key: Key<'_>, uid: u32) -> Result<Option<Flock<File>>, SandboxError> {
    match Flock::lock(open_file(key, uid)?, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(Some(lock)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(lock_err(&dir(uid), format!("cannot lock the lock file: {}", io::Error::from(e)))),
    }
}

/// Take the lock for `key` (a run of `ws`), polling so that the deadline
/// and a cancellation end the wait. Nothing is started while waiting: a
/// deadline that passes gives `TimedOutWaiting`, a cancellation
/// `CancelledWaiting`. `dir_fd` is the lock directory, open ([`open_dir`], or
/// [`open_for_records`] for a run that also writes records there).
pub(crate) async fn acquire(
    dir_fd: BorrowedFd<'_>,
    key: Key<'_>,
    ws: &Path,
    uid: u32,
    kind: Kind,
    deadline: Option<tokio::time::Instant>,
    cancel: Option<&CancellationToken>,
) -> Result<Flock<File>, SandboxError> {
    let started = tokio::time::Instant::now();
    let mut file = open_file_in(dir_fd, key, uid)?;
    let arg = match kind {
        Kind::Exclusive => FlockArg::LockExclusiveNonblock,
        Kind::Shared => FlockArg::LockSharedNonblock,
    };
    loop {
        match Flock::lock(file, arg) {
            Ok(lock) => return Ok(lock),
            Err((f, nix::errno::Errno::EWOULDBLOCK)) => file = f,
            Err((_, e)) => {
                return Err(lock_err(&dir(uid), format!("cannot lock the lock file: {}", io::Error::from(e))));
            }
        }
        if cancel.is_some_and(CancellationToken::is_cancelled) {
            return Err(SandboxError::CancelledWaiting { workspace: ws.to_path_buf() });
        }
        let now = tokio::time::Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            return Err(SandboxError::TimedOutWaiting { workspace: ws.to_path_buf(), waited: now - started });
        }
        let mut nap = Duration::from_millis(20);
        if let Some(d) = deadline {
            nap = nap.min(d - now);
        }
        match cancel {
            Some(c) => {
                tokio::select! {
                    () = tokio::time::sleep(nap) => {}
                    () = c.cancelled() => {}
                }
            }
            None => tokio::time::sleep(nap).await,
        }
    }
}
