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
use nix::fcntl::{openat, AtFlags, OFlag};
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
    // NOREPLACE: a name the command made in the meantime is never replaced.
    let from = std::ffi::CString::new(name.as_encoded_bytes()).map_err(io::Error::other)?;
    let to = std::ffi::CString::new(quarantine.as_bytes()).map_err(io::Error::other)?;
    let rename = || crate::sys::rename_noreplace(&dir, &from, &to);
    match rename() {
        Ok(()) => {}
        Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => {
            // A command running as the caller may have taken write access
            // from the directory (`chmod 555 .git`): give it back for the
            // rename, then restore the mode.
            let mode = fs::metadata(&dir_path)?.permissions().mode();
            fs::set_permissions(&dir_path, fs::Permissions::from_mode(mode | 0o700))?;
            let r = rename();
            let _ = fs::set_permissions(&dir_path, fs::Permissions::from_mode(mode));
            r?;
        }
        Err(e) => return Err(e),
    }
    let q = dir_path.join(&quarantine);
    let shown = path.with_file_name(&quarantine);
    // The renamed entry, held by descriptor (never through a link: the
    // command may swap the name for one at any moment).
    let held = openat(&dir, quarantine.as_str(), OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC, Mode::empty())
        .map_err(io::Error::from)?;
    let held_path = PathBuf::from(format!("/proc/self/fd/{}", held.as_raw_fd()));
    // fstat of the descriptor itself: a link is seen as a link.
    let st = nix::sys::stat::fstat(&held).map_err(io::Error::from)?;
    let is_dir = st.st_mode & libc::S_IFMT == libc::S_IFDIR;
    // std's remove_dir_all never follows a link, at the top or inside.
    let deleted = if is_dir {
        // The descriptor's magic link names that very directory.
        let _ = fs::set_permissions(&held_path, fs::Permissions::from_mode((st.st_mode & 0o7777) | 0o700));
        fs::remove_dir_all(&q)
    } else {
        fs::remove_file(&q)
    };
    Ok(match deleted {
        Ok(()) => Removed::Deleted,
        Err(e) => Removed::Quarantined(shown, e),
    })
}
