//! Missing write grants inside the workspace: found while planning, created
//! just before the run.
//!
//! `--write target` on a fresh crate names a directory that does not exist
//! yet. A grant inside the workspace is created, as the command itself would
//! create it in a writable workspace: one directory at a time, from the
//! workspace's descriptor, each step opened with `O_NOFOLLOW`, so a link
//! planted on the way (by another run, or anyone who can write there) is
//! refused instead of followed. Nothing outside the workspace is created.

use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Component, Path};

use nix::errno::Errno;
use nix::fcntl::{openat, OFlag};
use nix::sys::stat::{mkdirat, Mode};

use super::SandboxError;

/// Whether some directory of `rel` (relative to the workspace) does not
/// exist yet. An error when a part that exists is not a plain directory (a
/// link, a file) or cannot be looked at.
pub(super) fn missing(ws: &Path, rel: &Path) -> io::Result<bool> {
    let mut at = ws.to_path_buf();
    for name in names(rel)? {
        at.push(name);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.is_dir() => {}
            Ok(m) if m.file_type().is_symlink() => {
                return Err(io::Error::other(format!("{} is a symbolic link", at.display())))
            }
            Ok(_) => return Err(io::Error::other(format!("{} is not a directory", at.display()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

fn names(rel: &Path) -> io::Result<Vec<OsString>> {
    rel.components()
        .map(|c| match c {
            Component::Normal(n) => Ok(n.to_os_string()),
            _ => Err(io::Error::other("not a plain relative path")),
        })
        .collect()
}

/// Create the directory `ws/rel` and every missing one above it, from the
/// workspace's descriptor, never through a link. An existing directory is
/// kept as it is.
pub(super) fn create(ws: &Path, rel: &Path) -> Result<(), SandboxError> {
    let path = ws.join(rel);
    let fail = |source: io::Error| SandboxError::CreateGrant { path: path.clone(), source };
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut dir: OwnedFd = nix::fcntl::open(ws, flags, Mode::empty()).map_err(|e| fail(e.into()))?;
    for name in names(rel).map_err(fail)? {
        match mkdirat(&dir, name.as_os_str(), Mode::from_bits_truncate(0o777)) {
            Ok(()) | Err(Errno::EEXIST) => {}
            Err(e) => return Err(fail(e.into())),
        }
        dir = match openat(&dir, name.as_os_str(), flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ELOOP | Errno::ENOTDIR) => {
                return Err(fail(io::Error::other(format!(
                    "{} on the way is a symbolic link or not a directory",
                    name.to_string_lossy()
                ))))
            }
            Err(e) => return Err(fail(e.into())),
        };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp() -> tempfile::TempDir {
        match tempfile::tempdir() {
            Ok(d) => d,
            Err(e) => panic!("tempdir: {e}"),
        }
    }

    #[test]
    fn creates_only_below_the_workspace_and_never_through_a_link() {
        let ws = tmp();
        let outside = tmp();
        assert!(create(ws.path(), Path::new("target/debug")).is_ok());
        assert!(ws.path().join("target/debug").is_dir());
        assert!(matches!(missing(ws.path(), Path::new("target/debug")), Ok(false)));
        // Kept as it is when it exists.
        assert!(create(ws.path(), Path::new("target")).is_ok());
        // A link on the way (as a swap after planning would leave it) is
        // refused at that step, and nothing appears where it leads.
        if let Err(e) = std::os::unix::fs::symlink(outside.path(), ws.path().join("link")) {
            panic!("symlink: {e}");
        }
        assert!(missing(ws.path(), Path::new("link/new")).is_err());
        match create(ws.path(), Path::new("link/new")) {
            Err(SandboxError::CreateGrant { source, .. }) => {
                assert!(source.to_string().contains("symbolic link"), "{source}")
            }
            other => panic!("expected CreateGrant, got {other:?}"),
        }
        assert!(!outside.path().join("new").exists());
        // A link as the last component is refused too, not followed.
        match create(ws.path(), Path::new("link")) {
            Err(SandboxError::CreateGrant { .. }) => {}
            other => panic!("expected CreateGrant, got {other:?}"),
        }
        // Only plain relative names.
        assert!(create(ws.path(), Path::new("../escape")).is_err());
        assert!(!ws.path().parent().is_some_and(|p| p.join("escape").exists()));
    }
}
