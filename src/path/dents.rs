//! Listing a directory with `getdents64(2)` into a buffer of our own.
//!
//! Not `opendir`/`fdopendir` (`std::fs::read_dir`, `nix::dir::Dir`): musl's
//! allocator (the static build's libc) serves their ~2 KiB stream from a
//! group it maps for that size class and unmaps when the stream is closed,
//! and every unmap in a multi-threaded process is a TLB flush that
//! interrupts the other CPUs running it. The walks that run before every
//! command (the writable areas' hard-link walk, the deny globs' walk, the
//! lock's records) list every directory they enter; through this they make
//! no such call (`docs/sandbox.md`, "Session 17").

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The type of a directory entry as `getdents64` gives it (`d_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum EntryType {
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link.
    Symlink,
    /// A device, FIFO or socket.
    Other,
    /// The filesystem does not say (`DT_UNKNOWN`): `lstat` it.
    Unknown,
}

/// One entry: its name and type.
pub type Entry = (std::ffi::CString, EntryType);

/// The entries of the directory open on `fd` but `.` and `..`, read from
/// the fd's current position: names and types (as the filesystem gives
/// them: `EntryType::Unknown` where it does not say), in the directory's
/// order; at most `max` of them (the reading stops there, so a caller
/// whose walk has a limit passes what is left of it, plus one to see it
/// exceeded, and a directory of millions of names costs no more memory
/// than the limit).
pub fn list(fd: BorrowedFd<'_>, max: usize) -> io::Result<Vec<Entry>> {
    let mut buf = vec![0u8; 32 * 1024];
    let mut out = Vec::new();
    if max > 0 {
        for_each_in(fd, &mut buf, |name, kind| {
            out.push((name.to_owned(), kind));
            out.len() < max
        })?;
    }
    Ok(out)
}

/// Call `each` with the name and type of every entry of the directory open
/// on `fd` but `.` and `..`, from the fd's current position, until it
/// returns false. Entries are read into a buffer on the stack: a caller
/// that keeps no name (a count) allocates nothing.
pub fn for_each(fd: BorrowedFd<'_>, each: impl FnMut(&CStr, EntryType) -> bool) -> io::Result<()> {
    let mut buf = [0u8; 4096];
    for_each_in(fd, &mut buf, each)
}

/// [`for_each`], reading through `buf` (a walk of many directories reuses
/// one large buffer instead of a small one, or a new one, for each).
pub fn for_each_in(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    mut each: impl FnMut(&CStr, EntryType) -> bool,
) -> io::Result<()> {
    // d_ino (8), d_off (8), d_reclen (2), d_type (1), then the name and
    // its NUL (`<linux/dirent.h>`, linux_dirent64).
    const NAME_AT: usize = 19;
    loop {
        // SAFETY: `buf` is writable for its length, which the kernel is
        // told; it writes at most that many bytes and returns how many.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, fd.as_raw_fd(), buf.as_mut_ptr(), buf.len()) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        let n = usize::try_from(n).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        if n == 0 {
            return Ok(());
        }
        let mut at = 0;
        while at + NAME_AT < n.min(buf.len()) {
            let reclen = usize::from(u16::from_ne_bytes([buf[at + 16], buf[at + 17]]));
            let end = at + reclen;
            if reclen <= NAME_AT || end > n {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            let kind = match buf[at + 18] {
                libc::DT_DIR => EntryType::Dir,
                libc::DT_REG => EntryType::File,
                libc::DT_LNK => EntryType::Symlink,
                libc::DT_UNKNOWN => EntryType::Unknown,
                _ => EntryType::Other,
            };
            let name = CStr::from_bytes_until_nul(&buf[at + NAME_AT..end])
                .map_err(|_| io::Error::from_raw_os_error(libc::EIO))?;
            if name != c"." && name != c".." && !each(name, kind) {
                return Ok(());
            }
            at = end;
        }
    }
}

/// The entries of the directory at `path` (a final symbolic link followed,
/// as `opendir` does), at most `max` of them, with every
/// `EntryType::Unknown` resolved ([`resolve_unknown`]).
pub fn list_path(path: &Path, max: usize) -> io::Result<Vec<Entry>> {
    // As opendir opens it: a directory only, and never waiting on a FIFO
    // swapped in for it.
    let dir = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let fd = std::os::fd::AsFd::as_fd(&dir);
    let mut out = list(fd, max)?;
    resolve_unknown(fd, &mut out)?;
    Ok(out)
}

/// Give every `EntryType::Unknown` entry of the directory open on `fd` (a
/// filesystem that does not fill in `d_type`) its type from an `lstat`, as
/// `std::fs::DirEntry::file_type` does. An entry gone meanwhile (`ENOENT`)
/// is left out; any other failure is the caller's error, never an entry
/// passed over: a walk that decides what to mask or protect by an entry's
/// name and type fails closed rather than skip one it cannot see.
pub fn resolve_unknown(fd: BorrowedFd<'_>, entries: &mut Vec<Entry>) -> io::Result<()> {
    let mut failed = None;
    entries.retain_mut(|(name, kind)| {
        if *kind != EntryType::Unknown || failed.is_some() {
            return true;
        }
        match nix::sys::stat::fstatat(fd, name.as_c_str(), nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => {
                *kind = match st.st_mode & libc::S_IFMT {
                    libc::S_IFDIR => EntryType::Dir,
                    libc::S_IFREG => EntryType::File,
                    libc::S_IFLNK => EntryType::Symlink,
                    _ => EntryType::Other,
                };
                true
            }
            Err(nix::errno::Errno::ENOENT) => false,
            Err(e) => {
                failed = Some(io::Error::from(e));
                true
            }
        }
    });
    failed.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    /// The same names and types as the standard library's `read_dir`, on a
    /// directory of every kind of entry and of more names than one
    /// `getdents64` call returns.
    #[test]
    fn lists_what_read_dir_lists() {
        let d = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let long = "n".repeat(200);
        for i in 0..600 {
            std::fs::write(d.path().join(format!("{long}{i}")), b"").unwrap_or_else(|e| panic!("{e}"));
        }
        std::fs::create_dir(d.path().join("sub")).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink("sub", d.path().join("link")).unwrap_or_else(|e| panic!("{e}"));
        nix::unistd::mkfifo(&d.path().join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o600))
            .unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(d.path().join("caf\u{e9}"), b"").unwrap_or_else(|e| panic!("{e}"));
        let dir = std::fs::File::open(d.path()).unwrap_or_else(|e| panic!("{e}"));
        let mut ours: Vec<(Vec<u8>, EntryType)> = list(dir.as_fd(), usize::MAX)
            .unwrap_or_else(|e| panic!("{e}"))
            .into_iter()
            .map(|(n, t)| (n.into_bytes(), t))
            .collect();
        let mut std_: Vec<(Vec<u8>, EntryType)> = std::fs::read_dir(d.path())
            .unwrap_or_else(|e| panic!("{e}"))
            .map(|e| {
                let e = e.unwrap_or_else(|e| panic!("{e}"));
                let t = e.file_type().unwrap_or_else(|e| panic!("{e}"));
                let kind = if t.is_dir() {
                    EntryType::Dir
                } else if t.is_file() {
                    EntryType::File
                } else if t.is_symlink() {
                    EntryType::Symlink
                } else {
                    EntryType::Other
                };
                (std::os::unix::ffi::OsStrExt::as_bytes(e.file_name().as_os_str()).to_vec(), kind)
            })
            .collect();
        ours.sort();
        std_.sort();
        assert_eq!(ours.len(), 604);
        assert_eq!(ours, std_);
        // A file is not a directory: the error, not an empty list.
        let f = std::fs::File::open(d.path().join("caf\u{e9}")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(list(f.as_fd(), usize::MAX).map_err(|e| e.raw_os_error()), Err(Some(libc::ENOTDIR)));
    }

    /// At most `max` entries are read, and the rest of the directory is
    /// left unread.
    #[test]
    fn stops_at_the_limit() {
        let d = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        for i in 0..3000 {
            std::fs::write(d.path().join(format!("f{i}")), b"").unwrap_or_else(|e| panic!("{e}"));
        }
        let dir = std::fs::File::open(d.path()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(list(dir.as_fd(), 1001).map(|v| v.len()).unwrap_or_else(|e| panic!("{e}")), 1001);
        assert_eq!(list_path(d.path(), 5).map(|v| v.len()).unwrap_or_else(|e| panic!("{e}")), 5);
        assert_eq!(list_path(d.path(), usize::MAX).map(|v| v.len()).unwrap_or_else(|e| panic!("{e}")), 3000);
    }

    /// What a filesystem without `d_type` gives (every entry `Unknown`)
    /// is typed by `lstat`, as the filesystem would have typed it; an entry
    /// gone meanwhile is left out; one that cannot be looked at is an
    /// error, not an entry passed over.
    #[test]
    fn unknown_types_are_looked_up_and_failures_are_errors() {
        let d = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(d.path().join("file"), b"").unwrap_or_else(|e| panic!("{e}"));
        std::fs::create_dir(d.path().join("dir")).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink("dir", d.path().join("link")).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink("nowhere", d.path().join("dangling")).unwrap_or_else(|e| panic!("{e}"));
        nix::unistd::mkfifo(&d.path().join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o600))
            .unwrap_or_else(|e| panic!("{e}"));
        let dir = std::fs::File::open(d.path()).unwrap_or_else(|e| panic!("{e}"));
        let mut want = list(dir.as_fd(), usize::MAX).unwrap_or_else(|e| panic!("{e}"));
        want.sort();
        let unknown = |v: &[Entry]| -> Vec<Entry> { v.iter().map(|(n, _)| (n.clone(), EntryType::Unknown)).collect() };
        let mut got = unknown(&want);
        got.push((std::ffi::CString::from(c"gone"), EntryType::Unknown));
        resolve_unknown(dir.as_fd(), &mut got).unwrap_or_else(|e| panic!("{e}"));
        got.sort();
        assert_eq!(got, want);
        assert!(want.contains(&(std::ffi::CString::from(c"dangling"), EntryType::Symlink)));
        assert!(want.contains(&(std::ffi::CString::from(c"fifo"), EntryType::Other)));
        // A name the lookup refuses (ENAMETOOLONG here; EACCES where the
        // directory is readable but not searchable) fails the listing.
        let mut bad = vec![(std::ffi::CString::new("x".repeat(300)).unwrap_or_default(), EntryType::Unknown)];
        assert_eq!(resolve_unknown(dir.as_fd(), &mut bad).map_err(|e| e.raw_os_error()), Err(Some(libc::ENAMETOOLONG)));
    }
}
