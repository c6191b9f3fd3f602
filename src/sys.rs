//! The few raw calls the library needs: a sealed memfd for the spec and
//! moving fds above the protocol numbers.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

/// A memfd holding `data`, positioned at its start.
pub fn memfd_with(name: &std::ffi::CStr, data: &[u8]) -> io::Result<OwnedFd> {
    // SAFETY: a valid C string name and flags.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the fd was just returned by the kernel and is ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut file = std::fs::File::from(fd);
    io::Write::write_all(&mut file, data)?;
    io::Seek::seek(&mut file, io::SeekFrom::Start(0))?;
    let fd = OwnedFd::from(file);
    let seals = libc::F_SEAL_SEAL | libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE;
    // SAFETY: F_ADD_SEALS on a memfd we own.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// Duplicate `fd` to a number at or above `min`, close-on-exec.
pub fn dup_above(fd: &OwnedFd, min: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC on an open fd returns a new fd we own.
    let r = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: r is a fresh fd.
    Ok(unsafe { OwnedFd::from_raw_fd(r) })
}

/// Set O_NONBLOCK on an fd (for tokio's pipe reader).
pub fn set_nonblocking(fd: &OwnedFd) -> io::Result<()> {
    // SAFETY: F_GETFL/F_SETFL on an open fd.
    unsafe {
        let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        if fl < 0 || libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The Landlock ABI the kernel offers (0: none).
pub fn landlock_abi() -> u32 {
    // SAFETY: the version query takes a NULL attr, size 0 and flag 1.
    let r = unsafe { libc::syscall(libc::SYS_landlock_create_ruleset, std::ptr::null::<libc::c_void>(), 0usize, 1u32) };
    u32::try_from(r).unwrap_or(0)
}

/// Whether the kernel accepts x32 syscalls (getpid with the x32 bit set).
pub fn x32_enabled() -> bool {
    if !cfg!(target_arch = "x86_64") {
        return false;
    }
    // SAFETY: getpid has no arguments and no side effects; with x32 disabled
    // the kernel answers ENOSYS.
    let r = unsafe { libc::syscall(libc::SYS_getpid | 0x4000_0000) };
    r >= 0
}

/// `renameat2(dir, from, dir, to, RENAME_NOREPLACE)`: rename within one
/// directory held by `dir`, never replacing an existing `to`. (nix offers
/// it on glibc only; the musl build needs the raw call.)
pub fn rename_noreplace(dir: &OwnedFd, from: &std::ffi::CStr, to: &std::ffi::CStr) -> io::Result<()> {
    rename_noreplace_at(dir, from, dir, to)
}

/// `renameat2(from_dir, from, to_dir, to, RENAME_NOREPLACE)`.
pub fn rename_noreplace_at(
    from_dir: &OwnedFd,
    from: &std::ffi::CStr,
    to_dir: &OwnedFd,
    to: &std::ffi::CStr,
) -> io::Result<()> {
    const RENAME_NOREPLACE: libc::c_uint = 1;
    // SAFETY: valid directory fds and two NUL-terminated names that live
    // for the call; the kernel reads nothing else.
    let r = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            from_dir.as_raw_fd(),
            from.as_ptr(),
            to_dir.as_raw_fd(),
            to.as_ptr(),
            RENAME_NOREPLACE,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
