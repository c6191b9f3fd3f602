//! The caller's mount table, and whether its mounts changed between two
//! readings.
//!
//! Every run that writes judges the host's mounts twice (the plan's alias
//! check and the run's own, [`super::aliases`]), and the pool judges a slot
//! against them at each take ([`super::pool`]). The text of
//! `/proc/self/mountinfo` is read each time: its paths (the mount points and
//! each mount's root within its file system) follow renames of the
//! directories on them, which the kernel signals nowhere. What is saved is
//! the work after the read, for a table that did not change: a verdict on
//! the same text is the same verdict ([`super::aliases`]), and a slot whose
//! table has the same text and the same generation is current without
//! looking up the unique id of each mount.
//!
//! The generation comes from one descriptor on `/proc/self/mountinfo` kept
//! open and polled around each reading: the kernel marks it (`POLLPRI |
//! POLLERR`) once a mount of the namespace is made, removed, moved or
//! changed (a remount of the mount or of its file system, new attributes),
//! which a text alone cannot always show (a bind unmounted and made again
//! from another directory shows the same line). A poll that finds the mark
//! starts a new generation; a reading during which a mark came gets a
//! generation of its own, equal to no other. So two readings of one
//! generation saw the same mounts, and with the same text at the same
//! places. A change of propagation alone is not marked; it shows in the
//! text.
//!
//! The descriptor shows the mount namespace and the root the process had
//! when it was opened, and its mark is its open file's: a process that has
//! moved to another namespace since (`setns`, which a process with more
//! than one thread cannot do for its mount namespace), changed its root
//! (`chroot`, or `pivot_root` from another process), or is a child forked
//! since (whose poll would take the parent's mark: found in review) gets a
//! descriptor of its own: the namespace, the root and the process are
//! compared at each reading.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex, PoisonError};

/// The mount table as one reading saw it.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    /// The reading's generation: two readings of one generation saw the
    /// same mounts (see the module's documentation).
    pub(crate) gen: u64,
    /// The text of `/proc/self/mountinfo`.
    pub(crate) text: Arc<str>,
}

struct Watch {
    fd: OwnedFd,
    /// The process, its mount namespace ([`namespace`]) and its root
    /// ([`root`]) when the descriptor was opened.
    whose: Whose,
    /// The generation of readings now.
    gen: u64,
}

static WATCH: Mutex<Option<Watch>> = Mutex::new(None);

/// The mount table now, read, with its generation.
pub(crate) fn now() -> io::Result<Snapshot> {
    let (Ok(ns), Some(root)) = (namespace(), root()) else {
        // Not known: a reading of its own generation.
        let text = text_of(crate::sys::read_proc_file(std::path::Path::new("/proc/self/mountinfo"))?)?;
        return Ok(Snapshot { gen: next_gen(), text });
    };
    let whose = Whose { pid: std::process::id(), ns, root };
    let mut watch = WATCH.lock().unwrap_or_else(PoisonError::into_inner);
    let w = match watch.as_mut().filter(|w| w.whose == whose) {
        Some(w) => {
            if changed(&w.fd)? {
                w.gen = next_gen();
            }
            w
        }
        // Opened before it is read: a change after the open marks it.
        None => watch.insert(Watch { fd: open()?, whose, gen: next_gen() }),
    };
    let text = text_of(crate::sys::read_from_start(&w.fd)?)?;
    if changed(&w.fd)? {
        // Marked while it was read: a generation of its own, and the next
        // reading starts another.
        w.gen = next_gen();
        return Ok(Snapshot { gen: next_gen(), text });
    }
    Ok(Snapshot { gen: w.gen, text })
}

fn next_gen() -> u64 {
    static GEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    GEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

fn text_of(bytes: Vec<u8>) -> io::Result<Arc<str>> {
    String::from_utf8(bytes).map(Arc::from).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))
}

fn open() -> io::Result<OwnedFd> {
    // SAFETY: a constant C string and flags; the fd returned is checked.
    let fd = unsafe { libc::open(c"/proc/self/mountinfo".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the fd was just returned by the kernel and is ours.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Whether the kernel marked the table changed since the last poll (or the
/// open).
fn changed(fd: &OwnedFd) -> io::Result<bool> {
    let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLPRI, revents: 0 };
    loop {
        // SAFETY: one valid pollfd, a zero timeout.
        let n = unsafe { libc::poll(&mut p, 1, 0) };
        if n >= 0 {
            return Ok(p.revents & (libc::POLLPRI | libc::POLLERR | libc::POLLNVAL) != 0);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// Which process, in which mount namespace and under which root, opened a
/// descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Whose {
    pid: u32,
    ns: u64,
    root: (u64, u64, u64),
}

/// The process's root: the unique id of its mount (`STATX_MNT_ID_UNIQUE`,
/// Linux 6.8), its device and inode; `None` where the kernel gives no
/// unique id (then nothing is kept).
fn root() -> Option<(u64, u64, u64)> {
    // SAFETY: statx is plain data, zeroed before the kernel fills it.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a constant C string, AT_FDCWD, and `st` outliving the call.
    let r = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c"/".as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_INO | libc::STATX_MNT_ID_UNIQUE,
            &mut st,
        )
    };
    (r == 0 && st.stx_mask & libc::STATX_MNT_ID_UNIQUE != 0)
        .then(|| (st.stx_mnt_id, libc::makedev(st.stx_dev_major, st.stx_dev_minor), st.stx_ino))
}

/// The process's mount namespace: its inode number, from the name of
/// `/proc/self/ns/mnt` (`mnt:[4026531841]`). `readlink` only formats it;
/// a `stat` there makes (and frees) the namespace file's inode each time.
fn namespace() -> io::Result<u64> {
    let mut buf = [0u8; 64];
    // SAFETY: a constant C string and a buffer of its stated length.
    let n = unsafe { libc::readlink(c"/proc/self/ns/mnt".as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    buf.get(..n)
        .and_then(|name| name.strip_prefix(b"mnt:["))
        .and_then(|rest| rest.strip_suffix(b"]"))
        .and_then(|digits| std::str::from_utf8(digits).ok())
        .and_then(|digits| digits.parse().ok())
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidData))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHILD: &str = "PORTCULLIS_MOUNTS_TEST_CHILD";
    const NAME: &str = "sandbox::mounts::tests::a_mount_starts_a_generation_a_rename_only_changes_the_text";

    #[test]
    fn a_mount_starts_a_generation_a_rename_only_changes_the_text() {
        // In a mount namespace of its own (the test binary again, under
        // `unshare --mount`), so that its mounts touch nothing else.
        if std::env::var_os(CHILD).is_some() {
            return in_own_namespace();
        }
        assert!(namespace().is_ok_and(|n| n > 0), "{:?}", namespace());
        if !nix::unistd::geteuid().is_root() {
            eprintln!("mounts::tests: SKIPPED (root only: it mounts, in a mount namespace of its own)");
            return;
        }
        let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
        let out = std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private"])
            .arg(exe)
            .args(["--exact", NAME, "--nocapture", "--test-threads=1"])
            .env(CHILD, "1")
            .output()
            .unwrap_or_else(|e| panic!("unshare: {e}"));
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && text.contains("MOUNTS CHILD OK"), "the child failed: {text}");
    }

    fn in_own_namespace() {
        let dir = std::env::temp_dir().join(format!("portcullis-mounts-{}", std::process::id()));
        let (x, y) = (dir.join("x"), dir.join("y"));
        let m = x.join("m");
        std::fs::create_dir_all(&m).unwrap_or_else(|e| panic!("{e}"));
        let a = now().unwrap_or_else(|e| panic!("{e}"));
        let b = now().unwrap_or_else(|e| panic!("{e}"));
        // CONTROL: nothing mounted in between: one generation, one text.
        assert_eq!((a.gen, &a.text), (b.gen, &b.text));
        let tmpfs = nix::mount::mount(Some("none"), &m, Some("tmpfs"), nix::mount::MsFlags::empty(), None::<&str>);
        tmpfs.unwrap_or_else(|e| panic!("mount: {e}"));
        let c = now().unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(c.gen, b.gen, "a mount started no generation");
        assert!(c.text.contains(&*m.to_string_lossy()), "{}", c.text);
        // A rename moves the mount and raises no event: the text alone shows it.
        std::fs::rename(&x, &y).unwrap_or_else(|e| panic!("{e}"));
        let d = now().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(d.gen, c.gen, "a rename started a generation");
        assert!(d.text.contains(&*y.join("m").to_string_lossy()) && d.text != c.text, "{}", d.text);
        nix::mount::umount(&y.join("m")).unwrap_or_else(|e| panic!("umount: {e}"));
        let e = now().unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(e.gen, d.gen, "an unmount started no generation");
        // A child forked since must not take the parent's mark: a reading
        // by another process opens its own descriptor (here the process is
        // made to look like another one).
        let before = e.gen;
        if let Some(w) = WATCH.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
            w.whose.pid = w.whose.pid.wrapping_add(1);
        }
        let f = now().unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(f.gen, before, "another process's descriptor was used");
        // After a chroot the table is the new root's (paths as seen from
        // it), not the kept descriptor's; and back.
        let r = dir.join("r");
        std::fs::create_dir_all(&r).unwrap_or_else(|e| panic!("{e}"));
        let rec = nix::mount::MsFlags::MS_BIND | nix::mount::MsFlags::MS_REC;
        nix::mount::mount(Some("/"), &r, None::<&str>, rec, None::<&str>).unwrap_or_else(|e| panic!("rbind: {e}"));
        let old_root = std::fs::File::open("/").unwrap_or_else(|e| panic!("{e}"));
        nix::unistd::chroot(&r).unwrap_or_else(|e| panic!("chroot: {e}"));
        let inside = now();
        let fresh = crate::sys::read_proc_file(std::path::Path::new("/proc/self/mountinfo"));
        nix::unistd::fchdir(&old_root).unwrap_or_else(|e| panic!("{e}"));
        nix::unistd::chroot(".").unwrap_or_else(|e| panic!("chroot back: {e}"));
        let (inside, fresh) = (inside.unwrap_or_else(|e| panic!("{e}")), fresh.unwrap_or_else(|e| panic!("{e}")));
        assert_eq!(inside.text.as_bytes(), fresh.as_slice(), "a reading after chroot was the old root's");
        assert_ne!(inside.text, f.text, "the control: the table differs under the new root");
        let back = now().unwrap_or_else(|e| panic!("{e}"));
        assert_ne!(back.gen, inside.gen);
        let _ = nix::mount::umount2(&r, nix::mount::MntFlags::MNT_DETACH);
        let _ = std::fs::remove_dir_all(&dir);
        println!("MOUNTS CHILD OK");
    }
}
