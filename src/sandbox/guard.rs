//! The git guard's cleanup: removing, after a writable run, what the
//! command created where git would read config or hooks.
//!
//! The command (or another writable run on the same workspace, still
//! running) controls every directory below the writable root, so nothing
//! here resolves a path through them. The walk goes from the root by file
//! descriptor, refusing a link at every step; the entry is first renamed,
//! inside the directory it was found in, to a fresh name (one atomic step:
//! git no longer finds it, whatever happens next), and only that name is
//! deleted, through the directory's descriptor.

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::fcntl::{openat, renameat, AtFlags, OFlag};
use nix::sys::stat::{fstatat, Mode};

/// What became of a guarded path.
#[derive(Debug)]
pub(super) enum Removed {
    /// It does not exist: the command did not create it.
    Nothing,
    /// It was removed.
    Deleted,
    /// It was renamed to this path (git no longer reads it) but deleting
    /// that failed.
    Quarantined(PathBuf, io::Error),
}

/// Remove `path` (below the writable root `root`) without going through a
/// link; an error leaves it in place and says why.
pub(super) fn remove(root: &Path, path: &Path) -> io::Result<Removed> {
    let rel = path.strip_prefix(root).map_err(|_| io::Error::other("not below its writable root"))?;
    let mut names: Vec<OsString> = Vec::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => names.push(n.to_os_string()),
            _ => return Err(io::Error::other("an unexpected component")),
        }
    }
    let Some(name) = names.pop() else { return Err(io::Error::other("the writable root itself")) };
    let dir_flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut dir: OwnedFd = nix::fcntl::open(root, dir_flags, Mode::empty()).map_err(io::Error::from)?;
    for n in &names {
        dir = match openat(&dir, n.as_os_str(), dir_flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => return Ok(Removed::Nothing),
            Err(Errno::ELOOP | Errno::ENOTDIR) => {
                return Err(io::Error::other(format!(
                    "{} on the way is a symbolic link or not a directory",
                    n.to_string_lossy()
                )))
            }
            Err(e) => return Err(e.into()),
        };
    }
    match fstatat(&dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(_) => {}
        Err(Errno::ENOENT) => return Ok(Removed::Nothing),
        Err(e) => return Err(e.into()),
    }
    let stamp = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let quarantine = format!(".portcullis-removed-{}-{stamp}", std::process::id());
    // Through the directory's descriptor: its path may have changed.
    let dir_path = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
    match renameat(&dir, name.as_os_str(), &dir, quarantine.as_str()) {
        Ok(()) => {}
        Err(Errno::EACCES | Errno::EPERM) => {
            // A command running as the caller may have taken write access
            // from the directory (`chmod 555 .git`): give it back for the
            // rename, then restore the mode.
            let mode = fs::metadata(&dir_path)?.permissions().mode();
            fs::set_permissions(&dir_path, fs::Permissions::from_mode(mode | 0o700))?;
            let r = renameat(&dir, name.as_os_str(), &dir, quarantine.as_str());
            let _ = fs::set_permissions(&dir_path, fs::Permissions::from_mode(mode));
            r.map_err(io::Error::from)?;
        }
        Err(e) => return Err(e.into()),
    }
    let q = dir_path.join(&quarantine);
    let shown = path.with_file_name(&quarantine);
    let meta = fs::symlink_metadata(&q)?;
    // std's remove_dir_all never follows a link inside the tree.
    let deleted = if meta.is_dir() {
        let _ = fs::set_permissions(&q, fs::Permissions::from_mode(meta.permissions().mode() | 0o700));
        fs::remove_dir_all(&q)
    } else {
        fs::remove_file(&q)
    };
    Ok(match deleted {
        Ok(()) => Removed::Deleted,
        Err(e) => Removed::Quarantined(shown, e),
    })
}
