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
//! each other. A workspace's lock file and its records' directory
//! (`sandbox::pending`) are removed by the cleanup that leaves no record,
//! holding the lock exclusive ([`remove_unused`]): a host that makes a
//! workspace per task would otherwise gather two entries per workspace
//! until reboot. A run that opened the lock file before it was removed
//! would then lock a file no one else can find, so a lock is kept only once
//! the name is seen to still lead to the locked file ([`acquire`],
//! [`try_exclusive`]); otherwise the name is opened again. The records'
//! directory is looked at again once the lock is held
//! (`pending::Records::refresh`), and written only under the lock.

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
/// spellings of one directory share a lock. `ws2-`: builds before session
/// 30 named it `ws-`, never removed it and took it without checking the
/// name ([`still_named`]); a build that removes the file must not share a
/// name with one that would then lock a removed file. Each version's
/// cleanup covers its own runs' records.
pub(crate) fn file_name(ws: &Path) -> Result<String, SandboxError> {
    let st = nix::sys::stat::stat(ws).map_err(|e| SandboxError::Path {
        what: "workspace to lock",
        path: ws.to_path_buf(),
        source: e.into(),
    })?;
    Ok(format!("ws2-{:x}-{:x}.lock", st.st_dev, st.st_ino))
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

/// The name of `key`'s lock file.
fn key_name(key: Key<'_>) -> Result<String, SandboxError> {
    Ok(match key {
        Key::Workspace(ws) => file_name(ws)?,
        Key::HostNetwork => "host-network.lock".to_string(),
    })
}

/// Open (creating it if needed) the lock file `name` in the lock directory
/// `dir_fd` ([`open_dir`]'s).
fn open_file_in(dir_fd: BorrowedFd<'_>, name: &str, uid: u32) -> Result<File, SandboxError> {
    let path = dir(uid).join(name);
    let fd = nix::fcntl::openat(
        dir_fd,
        std::ffi::OsStr::new(name).as_bytes(),
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

/// How many times a lock is taken again after finding its file removed
/// (each time, another process has had the lock exclusive and removed the
/// file in between: a bound that is never reached but by a broken host).
const RETAKES: usize = 1000;

/// Whether the name `name` in `dir_fd` still leads to the locked `file`
/// (not removed by [`remove_unused`], nor made anew since).
pub(crate) fn still_named(dir_fd: BorrowedFd<'_>, name: &str, file: &File) -> nix::Result<bool> {
    let held = fstat(file.as_fd())?;
    #[allow(clippy::useless_conversion)]
    let id = (u64::from(held.st_dev), u64::from(held.st_ino));
    names(dir_fd, name, id)
}

/// Whether the name `name` in `dir_fd` leads to the file whose device and
/// inode are `id` (`false` when it is gone): the lock file and the records'
/// directory are removed and made anew under their names.
pub(crate) fn names(dir_fd: BorrowedFd<'_>, name: &str, id: (u64, u64)) -> nix::Result<bool> {
    match nix::sys::stat::fstatat(dir_fd, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
        #[allow(clippy::useless_conversion)]
        Ok(st) => Ok((u64::from(st.st_dev), u64::from(st.st_ino)) == id),
        Err(nix::errno::Errno::ENOENT) => Ok(false),
        Err(e) => Err(e),
    }
}

fn check_named(dir_fd: BorrowedFd<'_>, name: &str, file: &File, uid: u32) -> Result<bool, SandboxError> {
    still_named(dir_fd, name, file).map_err(|e| {
        lock_err(&dir(uid).join(name), format!("cannot look the lock file up again: {}", io::Error::from(e)))
    })
}

fn retaken_too_often(uid: u32, name: &str) -> SandboxError {
    lock_err(
        &dir(uid).join(name),
        format!("the lock file was removed under this run {RETAKES} times; is another program removing it?"),
    )
}

/// Take the lock for `key` exclusive if no one holds it, without waiting:
/// `None` when someone does.
pub(crate) fn try_exclusive(key: Key<'_>, uid: u32) -> Result<Option<Flock<File>>, SandboxError> {
    let dir_fd = open_dir(uid)?;
    let name = key_name(key)?;
    for _ in 0..RETAKES {
        match Flock::lock(open_file_in(dir_fd.as_fd(), &name, uid)?, FlockArg::LockExclusiveNonblock) {
            Ok(lock) if check_named(dir_fd.as_fd(), &name, &lock, uid)? => return Ok(Some(lock)),
            // Removed since it was opened: open the name again.
            Ok(_) => {}
            Err((_, nix::errno::Errno::EWOULDBLOCK)) => return Ok(None),
            Err((_, e)) => {
                return Err(lock_err(&dir(uid), format!("cannot lock the lock file: {}", io::Error::from(e))))
            }
        }
    }
    Err(retaken_too_often(uid, &name))
}

/// Remove the lock file `lock_name` and its records' directory `runs_name`
/// from the lock directory `dir_fd`, once no record is left: called holding
/// the lock exclusive (no writable run of the workspace is going, and none
/// can write a record). The directory goes first, and only when empty
/// (`false`: records are left, and both stay); then the lock file. A run
/// that opened either before sees, once it holds the lock, that the name is
/// gone or leads elsewhere, and opens it again.
pub(crate) fn remove_unused(dir_fd: BorrowedFd<'_>, lock_name: &str, runs_name: &str) -> io::Result<bool> {
    use nix::unistd::{unlinkat, UnlinkatFlags};
    match unlinkat(dir_fd, runs_name, UnlinkatFlags::RemoveDir) {
        Ok(()) | Err(nix::errno::Errno::ENOENT) => {}
        Err(nix::errno::Errno::ENOTEMPTY | nix::errno::Errno::EEXIST) => return Ok(false),
        Err(e) => return Err(e.into()),
    }
    match unlinkat(dir_fd, lock_name, UnlinkatFlags::NoRemoveDir) {
        Ok(()) | Err(nix::errno::Errno::ENOENT) => Ok(true),
        Err(e) => Err(e.into()),
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
    let name = key_name(key)?;
    let mut file = open_file_in(dir_fd, &name, uid)?;
    let arg = match kind {
        Kind::Exclusive => FlockArg::LockExclusiveNonblock,
        Kind::Shared => FlockArg::LockSharedNonblock,
    };
    let mut retakes = 0;
    loop {
        match Flock::lock(file, arg) {
            Ok(lock) if check_named(dir_fd, &name, &lock, uid)? => return Ok(lock),
            Ok(_) => {
                // Removed since it was opened (the cleanup that left no
                // record): open the name again, at once.
                retakes += 1;
                if retakes >= RETAKES {
                    return Err(retaken_too_often(uid, &name));
                }
                file = open_file_in(dir_fd, &name, uid)?;
                continue;
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    /// The cleanup that leaves no record removes the lock file while others
    /// wait on it (they opened it before): every lock taken is still one
    /// lock. Four threads take it shared or exclusive, the exclusive holders
    /// removing the file (and the records' directory) half the time; no
    /// holder ever finds an exclusive holder beside it, or a shared one
    /// beside an exclusive. CONTROL: the removals happened, and both kinds
    /// were held (without the check of the name after locking, holders of
    /// the removed file and of its successor overlap within a few rounds).
    #[test]
    fn a_removed_lock_file_is_never_locked_beside_its_successor() {
        let uid = nix::unistd::getuid().as_raw();
        let ws = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let ws_path = ws.path().to_path_buf();
        let name = file_name(&ws_path).unwrap_or_else(|e| panic!("{e}"));
        let runs = format!("{}.runs", name.trim_end_matches(".lock"));
        let (excl, shared, removed, shared_held, overlaps) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let threads: Vec<_> = (0..4usize)
            .map(|t| {
                let (excl, shared, removed, shared_held, overlaps) =
                    (excl.clone(), shared.clone(), removed.clone(), shared_held.clone(), overlaps.clone());
                let (ws_path, name, runs) = (ws_path.clone(), name.clone(), runs.clone());
                std::thread::spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_time()
                        .build()
                        .unwrap_or_else(|e| panic!("{e}"));
                    let key = Key::Workspace(&ws_path);
                    for i in 0..200usize {
                        let dir_fd = open_dir(uid).unwrap_or_else(|e| panic!("{e}"));
                        if (i + t) % 2 == 0 {
                            let lock = rt
                                .block_on(acquire(dir_fd.as_fd(), key, &ws_path, uid, Kind::Shared, None, None))
                                .unwrap_or_else(|e| panic!("{e}"));
                            shared.fetch_add(1, Ordering::SeqCst);
                            shared_held.fetch_add(1, Ordering::SeqCst);
                            if excl.load(Ordering::SeqCst) != 0 {
                                overlaps.fetch_add(1, Ordering::SeqCst);
                            }
                            std::thread::sleep(std::time::Duration::from_micros(200));
                            shared.fetch_sub(1, Ordering::SeqCst);
                            drop(lock);
                        } else {
                            let lock = rt
                                .block_on(acquire(dir_fd.as_fd(), key, &ws_path, uid, Kind::Exclusive, None, None))
                                .unwrap_or_else(|e| panic!("{e}"));
                            if excl.fetch_add(1, Ordering::SeqCst) != 0 || shared.load(Ordering::SeqCst) != 0 {
                                overlaps.fetch_add(1, Ordering::SeqCst);
                            }
                            std::thread::sleep(std::time::Duration::from_micros(200));
                            if i % 4 < 2 && remove_unused(dir_fd.as_fd(), &name, &runs).unwrap_or(false) {
                                removed.fetch_add(1, Ordering::SeqCst);
                            }
                            excl.fetch_sub(1, Ordering::SeqCst);
                            drop(lock);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap_or_else(|_| panic!("a thread panicked"));
        }
        let _ = remove_unused(open_dir(uid).unwrap_or_else(|e| panic!("{e}")).as_fd(), &name, &runs);
        assert!(removed.load(Ordering::SeqCst) > 20, "the file was removed only {removed:?} times");
        assert!(shared_held.load(Ordering::SeqCst) >= 400, "shared holds: {shared_held:?}");
        assert_eq!(overlaps.load(Ordering::SeqCst), 0, "a lock was held beside an exclusive one");
    }
}
