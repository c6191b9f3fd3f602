//! Hard links across the grant boundary.
//!
//! The mount layer and Landlock both judge a write by the path it goes
//! through, but a hard link gives one file several paths. A file whose name
//! `target/libdep.rlib` lies in a write grant and whose other name
//! `src/main.rs` lies in the read-only workspace (or outside the plan: a
//! pnpm store, a `cp -al` copy, a `git clone --local` object) would be
//! changed through the writable name. [`read_only_names`] walks the writable
//! areas while the run is planned, counts the names it finds of each file
//! with more than one link, and returns every name of a file that has a name
//! it did not find there: each is then bound read-only for the run.
//!
//! The same walk collects the privileged programs in the writable areas:
//! every regular file with the setuid or the setgid bit, and every regular
//! file with a `security.capability` xattr, whatever its execute bits. The
//! kernel strips those on `write`, `truncate`, `fallocate`, a clone or a
//! copy into the file by a writer without `CAP_FSETID`, but not on a store
//! through a shared mapping: a command that owns such a file (a root
//! caller's command owns root's files through the idmap) could put its own
//! code in a root-owned setuid program that any host user then runs. The
//! execute bits do not make the difference: `write(2)` keeps the setgid bit
//! of a file without group execute, and the mode bits of a file the command
//! owns can be set without `chmod` (which the filter judges): an access ACL
//! written with `fsetxattr("system.posix_acl_access")` sets them and keeps
//! the setgid bit, and a seccomp filter cannot read the xattr's name (a
//! string in the command's memory) to refuse it. A capability xattr is kept
//! by a store through a mapping and by `chmod 755`. So each such file is
//! bound read-only too ([`Kept::privileged`]); setting a bit or a capability
//! anew needs what the command lacks (`CAP_FSETID`, `CAP_SETFCAP`, the
//! filter's refusal of `chmod` with `S_ISUID`/`S_ISGID`).
//!
//! The walk stats every file of the writable areas, so past a thousand
//! entries it is shared among the CPUs ([`Walkers`]): each thread lists
//! directories from one stack and keeps what it finds, and the results are
//! merged before anything is judged.
//!
//! The walk runs as the caller. A directory it cannot list hides what it
//! holds from both checks; when the command could still open names in it
//! by search (another user's `0711` in a granted host `/tmp`), it is
//! returned in [`Kept::unlistable`] and masked for the run (refused in the
//! landlock-only mode); see [`Who::reach`].
//!
//! Within one run no new link can cross the boundary: the kernel refuses a
//! link between two mounts (`EXDEV`), and the read-only areas, the grants
//! and the carve-outs are all separate mounts. Writable runs of one
//! workspace run side by side (`sandbox::pending`), and one may link, after
//! this plan, only names within one of its own writable mounts: a file it
//! may write itself, which this run may then write through the new name; a
//! file no writable run may write cannot be brought in. A run of
//! another workspace whose plan grants writes here (a `--write` naming this
//! workspace, or a shared directory granted to both) takes another lock and
//! can: it may link a file this plan keeps read-only into a name this run
//! may write, mid-run. Only that run's own walk sees such links, and only
//! before it starts; see docs/threat-model.md (hard links).

use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex, MutexGuard};
use std::time::Duration;

use nix::dir::Type;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode};

use super::{GrantRefusal, PathRefusal, SandboxError};

/// The most entries the walk of the writable areas visits before it refuses.
pub const LINK_WALK_LIMIT: usize = 1_000_000;
/// The most names kept read-only this way in one run; above it the run is
/// refused (each name costs a mount).
pub const HARD_LINK_LIMIT: usize = 100;
/// The deepest directory the walk enters (it holds one descriptor per level).
pub const LINK_WALK_DEPTH: usize = 256;
/// How many names a refusal lists.
const SHOWN: usize = 5;

/// What the walk of the writable areas keeps read-only.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Kept {
    /// Names of files that also have a name outside the writable areas.
    pub hard_linked: Vec<PathBuf>,
    /// Regular files with the setuid or setgid bit or file capabilities
    /// (whatever their execute bits) not already in `hard_linked`.
    pub privileged: Vec<PathBuf>,
    /// Directories the walk cannot list but the command can search (the
    /// execute bit of the mode class that applies to it): what they hold
    /// is unseen, so each is masked for the run (see [`Who::reach`]).
    pub unlistable: Vec<PathBuf>,
}

/// One directory still to be listed: its parent's descriptor, its name in
/// the parent, its path and its depth below the area.
struct Pending {
    parent: Arc<OwnedFd>,
    name: CString,
    path: PathBuf,
    depth: usize,
}

/// Every name, in `areas`, of a file (anything but a directory: a symbolic
/// link's own inode counts too, and is bound read-only as itself) with more
/// links than the names of it found there: another name of
/// it lies in a read-only area, a protected or masked path, or outside the
/// plan. `skip` lists the paths inside `areas` whose names are not writable
/// (protected carve-outs, masks, read-only roots): the walk neither counts
/// nor enters them. Links are never followed. Refuses (naming the files and
/// what to do) when there are more than [`HARD_LINK_LIMIT`] such names, or
/// any at all when `no_mounts` (the landlock-only mode cannot bind them);
/// when an area is a file with such a name (it cannot be both the grant and
/// read-only); when one directory is reached twice (a bind-mount alias);
/// and when a directory it cannot list is one the command owns or that
/// carries an ACL. A directory it cannot list that the command can search
/// is returned in [`Kept::unlistable`], to be masked (refused when
/// `no_mounts`); one the command cannot search is passed over (nothing
/// below it is reachable).
/// The same walk collects the privileged programs (see [`is_privileged`]);
/// they are refused in the same cases (landlock-only, a file grant, more
/// than [`HARD_LINK_LIMIT`] mounts in all).
pub fn read_only_names(areas: &[PathBuf], skip: &[PathBuf], walk: Walk) -> Result<Kept, SandboxError> {
    read_only_names_with(areas, skip, walk.no_mounts, &Caps::new(walk.remember), Walkers::by_cpus())
}

/// How [`read_only_names`] walks.
#[derive(Debug, Clone, Copy)]
pub struct Walk {
    /// The landlock-only mode: nothing can be bound read-only, so any name
    /// to keep refuses the run.
    pub no_mounts: bool,
    /// Files found without file capabilities are remembered for later walks
    /// of this process (see [`Caps`]); a process that walks once
    /// (`portcullis exec`) would only pay for the memory.
    pub remember: bool,
}

fn read_only_names_with(
    areas: &[PathBuf],
    skip: &[PathBuf],
    no_mounts: bool,
    caps: &Caps,
    walkers: Walkers,
) -> Result<Kept, SandboxError> {
    // An area beneath another is walked with it, unless a skipped path lies
    // between them (a grant inside a read-only workspace that lies inside a
    // broader grant): then it is a root of its own.
    let roots: Vec<&PathBuf> = areas
        .iter()
        .filter(|a| {
            !areas
                .iter()
                .any(|b| b != *a && a.starts_with(b) && !skip.iter().any(|s| a.starts_with(s) && s.starts_with(b)))
        })
        .collect();
    if roots.is_empty() {
        return Ok(Kept::default());
    }
    // The skipped names by the directory holding them: the walk looks up
    // each directory once, not each entry's whole path.
    let mut skip_in: HashMap<&Path, HashSet<&OsStr>> = HashMap::new();
    for s in skip {
        if let (Some(parent), Some(name)) = (s.parent(), s.file_name()) {
            skip_in.entry(parent).or_default().insert(name);
        }
    }
    let who = Who::current()?;
    let shared = Shared {
        skip_in: &skip_in,
        caps,
        who: &who,
        seen: AtomicUsize::new(0),
        dirs: Mutex::new(HashMap::new()),
        queue: Mutex::new(Queue::default()),
        moved: Condvar::new(),
        walkers,
    };
    let mut found = Found::default();
    let mut file_roots: Vec<&Path> = Vec::new();
    for root in roots {
        let st = nix::sys::stat::lstat(root.as_path()).map_err(|e| walk_error(root, e))?;
        if type_of(&st) != Type::Directory {
            // A file grant: its own name counts like any other.
            file_roots.push(root);
            if is_privileged(&st, root) {
                return Err(SandboxError::grant_refused(
                    root.to_path_buf(),
                    GrantRefusal::PrivilegedProgram,
                    format!(
                        "the write grant {} is a privileged program ({}): a write through a shared mapping keeps \
                     the bit, so the command could plant its own code in it for every host user to run, and \
                     the grant cannot also be kept read-only; clear the bit first (chmod u-s,g-s F; setcap -r F) \
                     or do not grant it",
                        root.display(),
                        privilege_of(&st, root)
                    ),
                ));
            }
            if st.st_nlink > 1 {
                count(&mut found.linked, &st, root.clone());
            }
            continue;
        }
        let fd = nix::fcntl::open(
            root.as_path(),
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| walk_error(root, e))?;
        let st = nix::sys::stat::fstat(&fd).map_err(|e| walk_error(root, e))?;
        shared.visit(&st, root)?;
        shared.walk(root, fd, &mut found)?;
    }
    let Found { linked, mut privileged, mut unlistable } = found;
    let mut out: Vec<PathBuf> = Vec::new();
    for (nlink, names) in linked.into_values() {
        if u64::try_from(names.len()).is_ok_and(|n| n >= nlink) {
            continue;
        }
        if let Some(f) = names.iter().find(|n| file_roots.contains(&n.as_path())) {
            return Err(SandboxError::grant_refused(
                f.to_path_buf(),
                GrantRefusal::HardLinked,
                format!(
                    "the write grant {} has {nlink} hard links, and a name of it lies outside the writable areas \
                 (read-only or outside the plan): a write through the grant would change that name too, and the \
                 grant cannot also be kept read-only; break the link (cp -p F F.new && mv F.new F) or grant \
                 the other names too",
                    f.display()
                ),
            ));
        }
        out.extend(names);
    }
    out.sort();
    privileged.retain(|p| !out.contains(p));
    privileged.sort();
    unlistable.sort();
    if !unlistable.is_empty() {
        let shown = listed(&unlistable);
        if no_mounts {
            return Err(SandboxError::unsupported(
                "directories portcullis cannot list in a writable area",
                format!(
                    "landlock-only mode cannot hide directories portcullis cannot list: {shown} in a writable area \
                 cannot be listed by the caller, yet the command may search them, so it could open by name a \
                 hard link to a file outside the plan or a privileged program planted there, which the check \
                 cannot see (Landlock can only allow); make them listable for the caller (chmod o+r D, or \
                 g+r for its group), remove them, grant narrower paths with --write, or use the full sandbox, \
                 which masks them"
                ),
            ));
        }
        let all = out.len() + privileged.len() + unlistable.len();
        if all > HARD_LINK_LIMIT {
            return Err(SandboxError::limit(
                "paths kept read-only or masked",
                HARD_LINK_LIMIT,
                format!(
                    "{all} paths in the writable areas must be kept read-only or masked ({} directories the caller \
                 cannot list but the command can search: {shown}; {} privileged programs; {} hard-linked \
                 names), and portcullis covers each with one mount, up to {HARD_LINK_LIMIT}; make the \
                 directories listable for the caller or grant narrower paths with --write",
                    unlistable.len(),
                    privileged.len(),
                    out.len()
                ),
            ));
        }
    }
    if !privileged.is_empty() {
        let shown = listed(&privileged);
        if no_mounts {
            return Err(SandboxError::unsupported("privileged programs in a writable area", format!(
                "landlock-only mode cannot keep privileged programs read-only: {shown} in a writable area \
                 carry a setuid or setgid bit or file capabilities (whatever their execute bits), and a write \
                 through a shared mapping keeps them, so the command could plant its own code in them for \
                 every host user to run (Landlock can only allow); clear the bits (chmod u-s,g-s F; setcap -r F) or grant narrower paths with \
                 --write"
            )));
        }
        if out.len() + privileged.len() > HARD_LINK_LIMIT {
            return Err(SandboxError::limit(
                "files kept read-only",
                HARD_LINK_LIMIT,
                format!(
                    "{} files in the writable areas must be kept read-only ({} privileged programs: {shown}; {} \
                 hard-linked names), and portcullis binds each with one mount, up to {HARD_LINK_LIMIT}; clear \
                 the setuid/setgid bits (chmod u-s,g-s F) or grant narrower paths with --write",
                    out.len() + privileged.len(),
                    privileged.len(),
                    out.len()
                ),
            ));
        }
    }
    if out.is_empty() {
        return Ok(Kept { hard_linked: out, privileged, unlistable });
    }
    let shown = listed(&out);
    if no_mounts {
        return Err(SandboxError::unsupported(
            "hard-linked files in a writable area",
            format!(
                "landlock-only mode cannot keep hard-linked files read-only: {shown} in a writable area also \
             have a name outside it (read-only or outside the plan), and Landlock judges paths, not files, \
             so a write through the writable name would change the other; break the links (copy each file \
             over itself: cp -p F F.new && mv F.new F) or grant narrower paths with --write"
            ),
        ));
    }
    if out.len() > HARD_LINK_LIMIT {
        return Err(SandboxError::limit(
            "hard-linked names kept read-only",
            HARD_LINK_LIMIT,
            format!(
                "{} names in the writable areas are hard links to files that also have a name outside them \
             (read-only or outside the plan): {shown}; portcullis keeps such names read-only with one mount \
             each, up to {HARD_LINK_LIMIT}. Break the links (copy the tree afresh: cp -a D D.new && rm -rf D \
             && mv D.new D; for pnpm set package-import-method=copy; clone with git clone --no-hardlinks), \
             or grant narrower paths with --write",
                out.len()
            ),
        ));
    }
    Ok(Kept { hard_linked: out, privileged, unlistable })
}

/// The first [`SHOWN`] of `paths`, and how many more.
fn listed(paths: &[PathBuf]) -> String {
    let mut s = paths.iter().take(SHOWN).map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ");
    if paths.len() > SHOWN {
        s += &format!(" and {} more", paths.len() - SHOWN);
    }
    s
}

/// Whether the file `st` at `path` is, or could be made by a writer that
/// owns it, a program that runs with privileges its runner lacks: a regular
/// file with the setuid or the setgid bit, or with a `security.capability`
/// xattr, whatever its execute bits (a command that owns the file sets
/// those through an access ACL, which keeps the setgid bit, or with
/// `chmod`, which keeps the xattr). The xattr is looked up on every regular
/// file; an answer other than "none" or "not supported here" counts: fail
/// closed.
pub fn is_privileged(st: &FileStat, path: &Path) -> bool {
    privileged(st, || has_xattr(path, c"security.capability"))
}

/// The most files whose missing capability xattr is remembered (about 24
/// bytes each, in lists of one directory's); past it the memory is emptied
/// and refills.
const NO_CAPS_MAX: usize = 1 << 20;
/// How long before a walk started a file's ctime must lie for its missing
/// capability xattr to be remembered: wider than any filesystem's timestamp
/// granularity (1 s on ext4 with small inodes, 2 s on FAT).
const CTIME_MARGIN: Duration = Duration::from_secs(2);
/// How far the wall clock may fall back against the monotonic one before
/// everything remembered is forgotten (less than [`CTIME_MARGIN`]).
const CLOCK_STEP_NS: i128 = 1_000_000_000;

/// Regular files found without a `security.capability` xattr by an earlier
/// walk of this process, by the directory they were listed in (unique mount
/// id, `st_dev`, the directory's `st_ino`): each directory's files by
/// `st_ino`, sorted, with the ctime they had. A walk takes a directory's
/// list once (one lock and one lookup, where one per file was a cache miss
/// in a map of every file: 40 % of a steady 20 000-file walk's CPU on a
/// busy machine), and stores it again only when the listing changed it.
static NO_CAPS: LazyLock<Mutex<NoCaps>> = LazyLock::new(|| Mutex::new(NoCaps::default()));

/// One directory's remembered files: `(st_ino, ctime)`, sorted by `st_ino`.
type Files = Arc<[(u64, (i64, i64))]>;

#[derive(Default)]
struct NoCaps {
    dirs: HashMap<(u64, u64, u64), Files>,
    /// The files in `dirs`, all lists together.
    files: usize,
    /// The largest `CLOCK_REALTIME - CLOCK_MONOTONIC` seen since `files`
    /// was last emptied.
    offset: Option<i128>,
}

impl NoCaps {
    /// A walk begins with the clocks `offset` apart: forget everything if
    /// the wall clock fell back since.
    fn clock(&mut self, offset: i128) {
        if self.offset.is_some_and(|seen| offset < seen - CLOCK_STEP_NS) {
            self.forget();
            self.offset = None;
        }
        self.offset = Some(self.offset.map_or(offset, |seen| seen.max(offset)));
    }

    fn forget(&mut self) {
        self.dirs.clear();
        self.files = 0;
    }

    /// `files` as the list of the directory `key`, in place of what was.
    fn store(&mut self, key: (u64, u64, u64), files: Files) {
        let old = self.dirs.get(&key).map_or(0, |f| f.len());
        let total = self.files.saturating_sub(old) + files.len();
        if total > NO_CAPS_MAX {
            self.forget();
            self.files = files.len();
        } else {
            self.files = total;
        }
        self.dirs.insert(key, files);
    }
}

/// The capability lookups of one walk: half of its syscalls (one
/// `getxattrat` per regular file, beside its `fstatat`), and the same
/// answer on every walk of an unchanged tree. A file found without the
/// xattr is remembered with its ctime, and a later walk that finds the
/// same inode with the same ctime skips the lookup. That is sound because
/// every change of an inode's xattrs sets its ctime to the time of the
/// change (`setxattr`, `removexattr`, a `chown`, which drops the xattr),
/// and no call sets a ctime to a chosen value; a file is remembered only
/// when its ctime lies [`CTIME_MARGIN`] before the walk began, so a change
/// made after the lookup, even within the filesystem's timestamp
/// granularity, gives another ctime; a new file on a reused inode number
/// has its own (recent) ctime. An inode is known by the unique id of the
/// mount of the directory it was found in (`STATX_MNT_ID_UNIQUE`, Linux
/// 6.8; never reused), its device and its number (and filed under that
/// directory's number, which only says where to look: a file moved to
/// another directory is looked up again there): a ctime is only data on
/// disk, so another filesystem mounted later on the same device number (a
/// swapped loop image, a snapshot mounted in its place) can hold the same
/// inode with the same ctime and a capability; it comes with a new mount.
/// A file whose device is not its directory's (a mount point) is looked
/// up every time. Only on filesystems whose `stat` answers come from the
/// local kernel (ext2/3/4, xfs, btrfs, tmpfs): a network or FUSE
/// filesystem's cached attributes can lag a change made elsewhere, and an
/// overlay's inode numbers are not its layers'. A found xattr is never
/// remembered. A wall clock stepped back by a second or more against the
/// monotonic clock (by hand, or NTP) empties the memory, since a change
/// made after it could get an old file's ctime.
struct Caps {
    /// Files with a ctime at or before this may be remembered.
    before: (i64, i64),
    /// Whether answers are remembered on a device (`st_dev`), by its
    /// filesystem's type (`fstatfs`), learnt at its first directory.
    local: Mutex<HashMap<u64, bool>>,
    /// Whether this walk uses the memory at all.
    remember: bool,
}

/// Where a directory of the walk lies: its mount's unique id, its device
/// and its inode number, when remembered answers may be used there.
#[derive(Clone, Copy)]
struct Here {
    mount: u64,
    dev: u64,
    dir: u64,
}

/// One listing's use of the memory: the directory's remembered files as
/// the listing began, and what it found without capabilities (remembered
/// or learnt), which [`Caps::keep`] stores as the directory's list.
struct Memory {
    here: Option<Here>,
    known: Files,
    seen: Vec<(u64, (i64, i64))>,
    learnt: bool,
}

impl Caps {
    fn new(remember: bool) -> Caps {
        if remember {
            if let Ok(mut m) = NO_CAPS.lock() {
                m.clock(crate::sys::realtime_offset_ns());
            }
        }
        let before = std::time::SystemTime::now()
            .checked_sub(CTIME_MARGIN)
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or((i64::MIN, 0), |d| (i64::try_from(d.as_secs()).unwrap_or(i64::MIN), i64::from(d.subsec_nanos())));
        Caps { before, local: Mutex::new(HashMap::new()), remember }
    }

    /// Where `dir` lies, if remembered answers may be used for its files.
    fn here(&self, dir: &OwnedFd) -> Option<Here> {
        if !self.remember {
            return None;
        }
        let (mount, dev, dir_ino) = crate::sys::unique_mount_of(dir.as_fd())?;
        self.trusted(dev, dir).then_some(Here { mount, dev, dir: dir_ino })
    }

    /// The memory of the directory that lies `here`, for one listing of it.
    fn recall(&self, here: Option<Here>) -> Memory {
        let known = here
            .and_then(|h| NO_CAPS.lock().ok()?.dirs.get(&(h.mount, h.dev, h.dir)).cloned())
            .unwrap_or_else(|| Arc::from([]));
        Memory { here, known, seen: Vec::new(), learnt: false }
    }

    /// Whether the regular file `st` (`name` in `dir`, whose `memory` this
    /// is) has file capabilities.
    fn has(
        &self,
        st: &FileStat,
        dir: &OwnedFd,
        memory: &mut Memory,
        name: &CStr,
        path: impl FnOnce() -> PathBuf,
    ) -> bool {
        // A file on another device than its directory (a mount point) is
        // looked up every time.
        let local = memory.here.is_some_and(|h| h.dev == st.st_dev);
        let file = (st.st_ino, (st.st_ctime, st.st_ctime_nsec));
        if local {
            let known = memory.known.binary_search_by_key(&file.0, |f| f.0).ok().map(|i| memory.known[i]);
            if known == Some(file) {
                memory.seen.push(file);
                return false;
            }
        }
        let has = has_xattr_at(dir, name, path, c"security.capability");
        if local && !has && file.1 <= self.before {
            memory.seen.push(file);
            memory.learnt = true;
        }
        has
    }

    /// After a whole listing: what it found without capabilities becomes
    /// the directory's list (files gone or changed since drop out), unless
    /// that is what was there.
    fn keep(&self, mut memory: Memory) {
        let Some(h) = memory.here else { return };
        if !memory.learnt && memory.seen.len() == memory.known.len() {
            return;
        }
        memory.seen.sort_unstable();
        memory.seen.dedup_by_key(|f| f.0);
        if let Ok(mut m) = NO_CAPS.lock() {
            m.store((h.mount, h.dev, h.dir), Arc::from(memory.seen));
        }
    }

    fn trusted(&self, dev: u64, dir: &OwnedFd) -> bool {
        // ext2/3/4 (one magic), xfs, btrfs, tmpfs (`statfs(2)`; nix leaves
        // some of them out on musl).
        const LOCAL: [u64; 4] = [0xEF53, 0x5846_5342, 0x9123_683E, 0x0102_1994];
        *self.local.lock().unwrap_or_else(std::sync::PoisonError::into_inner).entry(dev).or_insert_with(|| {
            #[allow(clippy::unnecessary_cast)] // a c_long with glibc, a c_ulong with musl
            let local =
                nix::sys::statfs::fstatfs(dir.as_fd()).is_ok_and(|fs| LOCAL.contains(&(fs.filesystem_type().0 as u64)));
            local
        })
    }
}

/// Threads started by shared walks (for the tests).
#[cfg(test)]
static WALKERS_STARTED: AtomicUsize = AtomicUsize::new(0);

#[cfg(test)]
thread_local! {
    /// How many capability lookups this thread's walks made (for the tests).
    static CAP_LOOKUPS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

fn privileged(st: &FileStat, caps: impl FnOnce() -> bool) -> bool {
    if st.st_mode & libc::S_IFMT != libc::S_IFREG {
        return false;
    }
    st.st_mode & (libc::S_ISUID | libc::S_ISGID) != 0 || caps()
}

/// What makes `st` privileged, for a message.
fn privilege_of(st: &FileStat, path: &Path) -> String {
    let mode = st.st_mode;
    let mut what = Vec::new();
    if mode & libc::S_ISUID != 0 {
        what.push(format!("setuid to uid {}", st.st_uid));
    }
    if mode & libc::S_ISGID != 0 {
        what.push(format!("setgid to gid {}", st.st_gid));
    }
    if what.is_empty() || has_xattr(path, c"security.capability") {
        what.push("file capabilities".into());
    }
    what.join(", ")
}

fn walk_error(path: &Path, e: Errno) -> SandboxError {
    SandboxError::unsafe_path(
        path.to_path_buf(),
        PathRefusal::Unreadable,
        format!(
            "cannot check {} for hard links ({}): the check keeps files with another name outside the writable \
         areas read-only, and fails closed; make it readable or grant narrower paths",
            path.display(),
            std::io::Error::from(e)
        ),
    )
}

/// How many threads a walk may use, and from how many entries on.
#[derive(Clone, Copy)]
struct Walkers {
    /// The most threads walking at once, the caller's included; `None`:
    /// as many as the CPUs this process may use, up to [`MOST_WALKERS`].
    most: Option<usize>,
    /// Entries the caller's thread lists alone before others join it: a
    /// small area is walked before a thread could be started.
    from: usize,
}

impl Walkers {
    /// By the CPUs, once [`PARALLEL_FROM`] entries are listed.
    fn by_cpus() -> Walkers {
        Walkers { most: None, from: PARALLEL_FROM }
    }

    /// The most threads: the CPUs are counted once per process, and only
    /// by a walk that gets this far (`available_parallelism` reads the
    /// cgroup's CPU quota files, tens of microseconds).
    fn most(&self) -> usize {
        static CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        self.most
            .unwrap_or_else(|| {
                *CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get))
            })
            .clamp(1, MOST_WALKERS)
    }
}

/// The most threads one walk uses.
const MOST_WALKERS: usize = 8;
/// Entries listed before a walk is shared among threads: a thread costs
/// tens of microseconds to start, about as much as fifty entries, and an
/// area this small is walked in under a millisecond.
const PARALLEL_FROM: usize = 1024;

/// What a walk found: names of files with several links, by file, the
/// privileged programs, the directories it could not list.
#[derive(Default)]
struct Found {
    linked: HashMap<(u64, u64), (u64, Vec<PathBuf>)>,
    privileged: Vec<PathBuf>,
    unlistable: Vec<PathBuf>,
}

impl Found {
    /// Take in what another thread of the walk found.
    fn merge(&mut self, other: Found) {
        for (key, (nlink, names)) in other.linked {
            add_names(&mut self.linked, key, nlink, names);
        }
        self.privileged.extend(other.privileged);
        self.unlistable.extend(other.unlistable);
    }
}

/// Directories waiting to be listed, shared by the threads of a walk.
#[derive(Default)]
struct Queue {
    pending: Vec<Pending>,
    /// Threads listing a directory (which may add more).
    busy: usize,
    /// The first error of any thread: every thread stops.
    failed: Option<SandboxError>,
}

/// The state of one walk of the writable areas, shared by its threads.
struct Shared<'a> {
    skip_in: &'a HashMap<&'a Path, HashSet<&'a OsStr>>,
    caps: &'a Caps,
    who: &'a Who,
    /// Entries listed so far (against [`LINK_WALK_LIMIT`]).
    seen: AtomicUsize,
    /// Where each directory was first reached.
    dirs: Mutex<HashMap<(u64, u64), PathBuf>>,
    queue: Mutex<Queue>,
    /// A directory was queued or finished, or the walk failed.
    moved: Condvar,
    walkers: Walkers,
}

/// Count one name of a file with more than one link.
fn count(linked: &mut HashMap<(u64, u64), (u64, Vec<PathBuf>)>, st: &FileStat, p: PathBuf) {
    add_names(linked, (st.st_dev, st.st_ino), st.st_nlink, [p]);
}

/// Add names found of the file `key`, which has `nlink` links.
fn add_names(
    linked: &mut HashMap<(u64, u64), (u64, Vec<PathBuf>)>,
    key: (u64, u64),
    nlink: u64,
    names: impl IntoIterator<Item = PathBuf>,
) {
    let slot = linked.entry(key).or_insert((0, Vec::new()));
    slot.0 = slot.0.max(nlink);
    slot.1.extend(names);
}

/// A thread of the walk panicked: what it found is lost, so the walk fails.
fn walk_panicked() -> SandboxError {
    SandboxError::Io {
        stage: "checking the writable areas for hard links",
        source: std::io::Error::other("a thread of the walk panicked"),
    }
}

/// A getdents64 buffer for one thread of a walk.
fn dents_buffer() -> Vec<u8> {
    vec![0u8; 32 * 1024]
}

impl Shared<'_> {
    /// Where a directory was first reached; a second way to it (a bind
    /// mount on the host, two grants naming one directory) refuses the run:
    /// the names below it would be counted twice, and one of the ways may
    /// lie in an area this plan keeps read-only.
    fn visit(&self, st: &FileStat, p: &Path) -> Result<(), SandboxError> {
        let mut dirs = self.dirs.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        match dirs.entry((st.st_dev, st.st_ino)) {
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(p.to_path_buf());
                Ok(())
            }
            std::collections::hash_map::Entry::Occupied(o) => Err(SandboxError::unsafe_path(
                p.to_path_buf(),
                PathRefusal::Alias,
                format!(
                    "{} and {} in the writable areas are one directory (a bind mount or another alias on the \
                 host): the hard-link check would count the names below it twice, and a write through one would \
                 land in the other; unmount the alias (umount PATH) or grant one of the two paths only",
                    o.get().display(),
                    p.display()
                ),
            )),
        }
    }

    /// Walk the area `root` (open on `fd`): alone, then, once it has
    /// listed [`Walkers::from`] entries with directories still to list,
    /// with more threads.
    fn walk(&self, root: &Path, fd: OwnedFd, found: &mut Found) -> Result<(), SandboxError> {
        let mut buf = dents_buffer();
        let mut pending: Vec<Pending> = Vec::new();
        self.list(root, &mut buf, fd, root.to_path_buf(), 0, &mut pending, found)?;
        while let Some(next) = pending.pop() {
            if !pending.is_empty() && self.seen.load(Ordering::Relaxed) >= self.walkers.from && self.walkers.most() > 1
            {
                pending.push(next);
                return self.share(root, pending, found);
            }
            self.enter(root, &mut buf, next, &mut pending, found)?;
        }
        Ok(())
    }

    /// Open the pending directory `next` and list it, if it can be.
    fn enter(
        &self,
        root: &Path,
        buf: &mut [u8],
        next: Pending,
        pending: &mut Vec<Pending>,
        found: &mut Found,
    ) -> Result<(), SandboxError> {
        match self.open_dir(&next, found)? {
            Some(dir) => self.list(root, buf, dir, next.path, next.depth, pending, found),
            None => Ok(()),
        }
    }

    /// Walk what is `pending` with up to [`Walkers::most`] threads, this
    /// one included. A thread that cannot be started leaves its share to
    /// the others.
    fn share(&self, root: &Path, pending: Vec<Pending>, found: &mut Found) -> Result<(), SandboxError> {
        *self.lock() = Queue { pending, busy: 0, failed: None };
        let others: Vec<Option<Found>> = std::thread::scope(|s| {
            let threads: Vec<_> = (1..self.walkers.most())
                .filter_map(|_| {
                    std::thread::Builder::new()
                        .name("portcullis-walk".into())
                        .spawn_scoped(s, || {
                            #[cfg(test)]
                            WALKERS_STARTED.fetch_add(1, Ordering::Relaxed);
                            let mut mine = Found::default();
                            self.work(root, &mut mine);
                            mine
                        })
                        .ok()
                })
                .collect();
            self.work(root, found);
            threads.into_iter().map(|t| t.join().ok()).collect::<Vec<Option<Found>>>()
        });
        let failed = self.lock().failed.take();
        if let Some(e) = failed {
            return Err(e);
        }
        for other in others {
            // What a thread that died found is lost: fail closed.
            let Some(other) = other else { return Err(walk_panicked()) };
            found.merge(other);
        }
        Ok(())
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// One thread of a shared walk: list queued directories until none is
    /// left and none is being listed, or the walk failed.
    fn work(&self, root: &Path, found: &mut Found) {
        let mut buf = dents_buffer();
        let mut children: Vec<Pending> = Vec::new();
        loop {
            let next = {
                let mut q = self.lock();
                loop {
                    if q.failed.is_some() {
                        return;
                    }
                    if let Some(p) = q.pending.pop() {
                        q.busy += 1;
                        break p;
                    }
                    if q.busy == 0 {
                        drop(q);
                        self.moved.notify_all();
                        return;
                    }
                    q = self.moved.wait(q).unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            };
            // A panic here would leave the directory counted as being
            // listed, and the other threads waiting for it: it fails the
            // walk instead.
            let listed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.enter(root, &mut buf, next, &mut children, found)
            }))
            .unwrap_or_else(|_| Err(walk_panicked()));
            let mut q = self.lock();
            q.busy -= 1;
            match listed {
                Ok(()) => q.pending.append(&mut children),
                Err(e) => {
                    q.failed.get_or_insert(e);
                }
            }
            drop(q);
            self.moved.notify_all();
        }
    }

    /// List the directory `dir` at `path`: its files are looked at, its
    /// directories added to `pending`.
    #[allow(clippy::too_many_arguments)] // the walk's state is in `self`; these are one directory's
    fn list(
        &self,
        root: &Path,
        buf: &mut [u8],
        dir: OwnedFd,
        path: PathBuf,
        depth: usize,
        pending: &mut Vec<Pending>,
        found: &mut Found,
    ) -> Result<(), SandboxError> {
        // Listed with getdents64 into our own buffer, not through
        // fdopendir (see `path::dents`), and looked at entry by entry: a
        // name is copied only for a directory still to list or a name kept.
        let dir = Arc::new(dir);
        let skipped = self.skip_in.get(path.as_path());
        let mut memory = self.caps.recall(self.caps.here(&dir));
        let mut failed: Option<SandboxError> = None;
        let mut look = |name: &CStr, kind: crate::path::dents::EntryType| -> Result<(), SandboxError> {
            let os = OsStr::from_bytes(name.to_bytes());
            if skipped.is_some_and(|s| s.contains(os)) {
                return Ok(());
            }
            // The entry's path is made only where it is kept or named
            // (most files are neither).
            let p = || path.join(os);
            if kind == crate::path::dents::EntryType::Dir {
                if depth + 1 > LINK_WALK_DEPTH {
                    return Err(too_deep(&p()));
                }
                pending.push(Pending { parent: Arc::clone(&dir), path: p(), name: name.to_owned(), depth: depth + 1 });
                return Ok(());
            }
            // Everything else is looked at (a symbolic link's own inode
            // can have several names too); so is an entry of unknown type.
            let Some(st) = stat_at(&dir, name, p)? else { return Ok(()) };
            if type_of(&st) == Type::Directory {
                if depth + 1 > LINK_WALK_DEPTH {
                    return Err(too_deep(&p()));
                }
                pending.push(Pending { parent: Arc::clone(&dir), path: p(), name: name.to_owned(), depth: depth + 1 });
            } else {
                if privileged(&st, || self.caps.has(&st, &dir, &mut memory, name, p)) {
                    found.privileged.push(p());
                }
                if st.st_nlink > 1 {
                    count(&mut found.linked, &st, p());
                }
            }
            Ok(())
        };
        // Every 1 024 entries (and at the end) the count is added to the
        // walk's: past the limit, the walk stops.
        let limit_passed = |n: usize| self.seen.fetch_add(n, Ordering::Relaxed) + n > LINK_WALK_LIMIT;
        let mut since = 0usize;
        let mut over = false;
        let listed = crate::path::dents::for_each_in(dir.as_fd(), buf, |name, kind| {
            if let Err(e) = look(name, kind) {
                failed = Some(e);
                return false;
            }
            since += 1;
            if since == 1024 {
                over = limit_passed(std::mem::take(&mut since));
            }
            !over
        });
        match listed.map_err(|e| e.raw_os_error().unwrap_or(libc::EIO)) {
            Ok(_) => {}
            // Removed while it was listed (`getdents64` answers a dead
            // directory `ENOENT`): what it held is gone with it.
            Err(libc::ENOENT) if failed.is_none() => return Ok(()),
            Err(e) => return Err(walk_error(&path, Errno::from_raw(e))),
        }
        if let Some(e) = failed {
            return Err(e);
        }
        if over || limit_passed(since) {
            return Err(SandboxError::limit(
                "entries in the writable areas",
                LINK_WALK_LIMIT,
                format!(
                    "the writable areas hold more than {LINK_WALK_LIMIT} entries (under {}); the hard-link \
                 check stops there and fails closed: grant narrower paths with --write",
                    root.display()
                ),
            ));
        }
        self.caps.keep(memory);
        Ok(())
    }

    /// Open a pending directory without following a link; `None` when it is
    /// gone, or cannot be listed (and is then masked when the command can
    /// search it, passed over when it cannot: see [`Who::reach`]).
    fn open_dir(&self, p: &Pending, found: &mut Found) -> Result<Option<OwnedFd>, SandboxError> {
        match nix::fcntl::openat(
            p.parent.as_fd(),
            p.name.as_c_str(),
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) {
            Ok(d) => {
                let st = nix::sys::stat::fstat(d.as_fd()).map_err(|e| walk_error(&p.path, e))?;
                self.visit(&st, &p.path)?;
                Ok(Some(d))
            }
            Err(Errno::ENOENT) => Ok(None),
            Err(Errno::EACCES) => {
                let Some(st) = stat_at(&p.parent, &p.name, || p.path.clone())? else { return Ok(None) };
                match self.who.reach(&st, &p.path) {
                    Reach::None => Ok(None),
                    Reach::Search => {
                        found.unlistable.push(p.path.clone());
                        Ok(None)
                    }
                    Reach::Refuse(why) => Err(SandboxError::unsafe_path(
                        p.path.clone(),
                        PathRefusal::Unlistable,
                        format!(
                            "{} cannot be listed by portcullis (owner uid {}, group {}, mode {:04o}), yet {why}: the \
                         hard-link check cannot see what it holds, and fails closed; make it listable for the \
                         caller, remove it, or grant narrower paths with --write",
                            p.path.display(),
                            st.st_uid,
                            st.st_gid,
                            st.st_mode & 0o7777
                        ),
                    )),
                }
            }
            Err(e) => Err(walk_error(&p.path, e)),
        }
    }
}

fn too_deep(p: &Path) -> SandboxError {
    SandboxError::limit(
        "directory levels in the writable areas",
        LINK_WALK_DEPTH,
        format!(
            "{} is more than {LINK_WALK_DEPTH} directories deep; the hard-link check stops there and fails closed: \
         flatten it or grant narrower paths with --write",
            p.display()
        ),
    )
}

/// Who the command is, as far as a directory's mode is concerned.
struct Who {
    /// (uid, gids) pairs the command may act as on host files: an
    /// unprivileged caller's command runs as the caller with its groups; a
    /// root caller's runs as host `nobody`, on areas idmapped so that files
    /// owned by root are its own (and the host's `/tmp`, when granted, is
    /// not idmapped): both are judged.
    ids: Vec<(u32, Vec<u32>)>,
}

impl Who {
    fn current() -> Result<Who, SandboxError> {
        let uid = nix::unistd::geteuid().as_raw();
        if uid == 0 {
            let n = super::plan::ROOT_RUNS_AS;
            return Ok(Who { ids: vec![(0, vec![0]), (n, vec![n])] });
        }
        let mut gids = vec![nix::unistd::getegid().as_raw()];
        let groups = nix::unistd::getgroups()
            .map_err(|e| SandboxError::Io { stage: "reading the caller's groups", source: e.into() })?;
        gids.extend(groups.into_iter().map(|g| g.as_raw()));
        Ok(Who { ids: vec![(uid, gids)] })
    }

    /// What the command could do in the directory `st` at `path`, which
    /// the walk cannot list. One it owns (it could `chmod` it) or that
    /// carries an ACL (which this does not judge) refuses the run. Else the
    /// class of its mode that applies to the command (owner, group or
    /// other) decides: with search (`x`) the command could open names in
    /// it that the walk cannot see (a hard link to a file outside the plan,
    /// a privileged program), so it is masked; without, nothing below it is
    /// reachable (write alone makes no names): passed over. Every id the
    /// command may act as is judged, and the widest answer wins.
    fn reach(&self, st: &FileStat, path: &Path) -> Reach {
        if has_acl(path) {
            return Reach::Refuse("it carries an access ACL, which portcullis does not judge".into());
        }
        let mut search = false;
        for (uid, gids) in &self.ids {
            let bits = if st.st_uid == *uid {
                return Reach::Refuse(format!("the command (uid {uid}) owns it and could change its mode"));
            } else if gids.contains(&st.st_gid) {
                (st.st_mode >> 3) & 0o7
            } else {
                st.st_mode & 0o7
            };
            search |= bits & 0o1 != 0;
        }
        if search {
            Reach::Search
        } else {
            Reach::None
        }
    }
}

/// What the command could do in a directory the walk cannot list.
enum Reach {
    /// Nothing: it cannot search it (passed over).
    None,
    /// Open (or make) names in it by search: masked.
    Search,
    /// Refused, and why.
    Refuse(String),
}

/// Whether `path` carries a POSIX access ACL (any answer but "none" counts).
fn has_acl(path: &Path) -> bool {
    has_xattr(path, c"system.posix_acl_access")
}

/// Whether `path` itself (not a link's target) carries the xattr `name`
/// (any answer but "none" or "not supported" counts).
fn has_xattr(path: &Path, name: &std::ffi::CStr) -> bool {
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else { return true };
    // SAFETY: both strings are NUL-terminated and live across the call; a
    // null buffer of size 0 only asks for the value's size.
    let r = unsafe { libc::lgetxattr(c.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) };
    if r >= 0 {
        return true;
    }
    !matches!(Errno::last(), Errno::ENODATA | Errno::EOPNOTSUPP | Errno::ENOENT)
}

/// Whether the kernel lacks `getxattrat` (learnt on the first `ENOSYS`).
static NO_GETXATTRAT: AtomicBool = AtomicBool::new(false);

/// [`has_xattr`] of `name` in `dir` (at `path`): by the one name where the
/// kernel has `getxattrat`, else by the path.
fn has_xattr_at(dir: &OwnedFd, name: &CStr, path: impl FnOnce() -> PathBuf, xattr: &CStr) -> bool {
    #[cfg(test)]
    CAP_LOOKUPS.with(|n| n.set(n.get() + 1));
    if !NO_GETXATTRAT.load(Ordering::Relaxed) {
        match crate::sys::xattr_size_at(dir.as_fd(), name, xattr) {
            Ok(_) => return true,
            Err(e) => match e.raw_os_error() {
                // ENOENT: removed since its `fstatat` (a git `tmp_obj_*`):
                // nothing is left to keep read-only. Any other error counts
                // as capabilities (fail closed).
                Some(libc::ENODATA | libc::EOPNOTSUPP | libc::ENOENT) => return false,
                Some(libc::ENOSYS) => NO_GETXATTRAT.store(true, Ordering::Relaxed),
                _ => return true,
            },
        }
    }
    has_xattr(&path(), xattr)
}

/// `lstat` of `name` in `dir`; `None` when it is gone. `path` (made only
/// for an error's message) is where it lies.
fn stat_at(dir: &OwnedFd, name: &CStr, path: impl FnOnce() -> PathBuf) -> Result<Option<FileStat>, SandboxError> {
    match nix::sys::stat::fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(walk_error(&path(), e)),
    }
}

fn type_of(st: &FileStat) -> Type {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFDIR => Type::Directory,
        libc::S_IFLNK => Type::Symlink,
        libc::S_IFREG => Type::File,
        libc::S_IFIFO => Type::Fifo,
        libc::S_IFSOCK => Type::Socket,
        libc::S_IFCHR => Type::CharacterDevice,
        _ => Type::BlockDevice,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::io;

    fn tree() -> tempfile::TempDir {
        let d = tempfile::Builder::new().prefix("pc-links-").tempdir_in("/var/tmp").unwrap_or_else(|e| panic!("{e}"));
        for f in ["src/main.rs", "target/debug/deps/foo-1", "target/x", ".git/hooks/pre-commit"] {
            let p = d.path().join(f);
            fs::create_dir_all(p.parent().unwrap_or(d.path())).unwrap_or_else(|e| panic!("{e}"));
            fs::write(&p, "x").unwrap_or_else(|e| panic!("{e}"));
        }
        d
    }

    fn names(d: &Path, areas: &[&str], skip: &[&str]) -> Result<Vec<PathBuf>, SandboxError> {
        let a: Vec<PathBuf> = areas.iter().map(|a| d.join(a)).collect();
        let s: Vec<PathBuf> = skip.iter().map(|a| d.join(a)).collect();
        read_only_names(&a, &s, Walk { no_mounts: false, remember: true }).map(|k| k.hard_linked)
    }

    /// A capability xattr (revision 2: `cap_net_raw` permitted), set by
    /// path; `false` where this process may not set one (not root).
    fn set_caps(p: &Path) -> bool {
        let mut v = Vec::new();
        for w in [0x0200_0000u32, 1 << 13, 0, 0, 0] {
            v.extend_from_slice(&w.to_le_bytes());
        }
        let c = CString::new(p.as_os_str().as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        // SAFETY: the path and the name are NUL-terminated, the value is
        // `v.len()` bytes; all live across the call.
        let r = unsafe { libc::setxattr(c.as_ptr(), c"security.capability".as_ptr(), v.as_ptr().cast(), v.len(), 0) };
        if r != 0 {
            let e = io::Error::last_os_error();
            assert!(!nix::unistd::geteuid().is_root(), "root could not set a capability xattr: {e}");
            eprintln!("links::tests: SKIPPED (needs root to set security.capability: {e})");
            return false;
        }
        true
    }

    fn walk_caps(d: &Path, caps: &Caps) -> (Vec<PathBuf>, usize) {
        let before = CAP_LOOKUPS.with(std::cell::Cell::get);
        let k = read_only_names_with(&[d.join("target")], &[], false, caps, Walkers::by_cpus())
            .unwrap_or_else(|e| panic!("{e}"));
        (k.privileged, CAP_LOOKUPS.with(std::cell::Cell::get) - before)
    }

    /// A later walk skips the lookup of an unchanged file it found without
    /// file capabilities, and sees capabilities set since (their setting
    /// changed the file's ctime); the control is the first walk, which
    /// looks every file up.
    #[test]
    fn remembered_missing_capabilities_do_not_hide_ones_set_later() {
        let d = tree();
        let p = d.path();
        let prog = p.join("target/x");
        // As if the walk began well after every file was last changed.
        let caps = Caps { before: (i64::MAX, 0), local: Mutex::new(HashMap::new()), remember: true };
        let (found, looked) = walk_caps(p, &caps);
        assert_eq!((found, looked), (vec![], 2), "the first walk looks up both regular files");
        let (found, looked) = walk_caps(p, &caps);
        assert_eq!((found, looked), (vec![], 0), "an unchanged tree is not looked up again (/var/tmp is local)");
        if !set_caps(&prog) {
            return;
        }
        let (found, looked) = walk_caps(p, &caps);
        assert_eq!((found, looked), (vec![prog.clone()], 1), "the changed ctime brings the lookup back");
        // A file with capabilities is never remembered.
        assert_eq!(walk_caps(p, &caps), (vec![prog], 1));
    }

    /// An inode is remembered on the mount of the directory it was found
    /// in: another filesystem mounted later on the same device number gets
    /// a new mount id, and is looked up again; so is a file whose device is
    /// not its directory's. The control is the same mount, not looked up.
    #[test]
    fn remembered_files_are_known_by_their_mount() {
        let d = tree();
        let dir: OwnedFd =
            nix::fcntl::open(&d.path().join("target"), OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty())
                .unwrap_or_else(|e| panic!("{e}"));
        let name = CString::new("x").unwrap_or_else(|e| panic!("{e}"));
        let st = nix::sys::stat::fstatat(dir.as_fd(), name.as_c_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
            .unwrap_or_else(|e| panic!("{e}"));
        let caps = Caps { before: (i64::MAX, 0), local: Mutex::new(HashMap::new()), remember: true };
        let at = nix::sys::stat::fstat(dir.as_fd()).unwrap_or_else(|e| panic!("{e}")).st_ino;
        // A mount id no real mount has (unique ids start far above 0).
        let (a, b) = (Here { mount: 7, dev: st.st_dev, dir: at }, Here { mount: 8, dev: st.st_dev, dir: at });
        // One listing of the directory that finds the file `x`.
        let lookups = |here: Option<Here>| {
            let before = CAP_LOOKUPS.with(std::cell::Cell::get);
            let mut memory = caps.recall(here);
            assert!(!caps.has(&st, &dir, &mut memory, &name, || d.path().join("target/x")));
            caps.keep(memory);
            CAP_LOOKUPS.with(std::cell::Cell::get) - before
        };
        assert_eq!(lookups(Some(a)), 1);
        assert_eq!(lookups(Some(a)), 0, "the same mount: remembered");
        assert_eq!(lookups(Some(b)), 1, "another mount on the same device number");
        assert_eq!(
            lookups(Some(Here { mount: 7, dev: st.st_dev ^ 1, dir: at })),
            1,
            "a file on another device than its directory"
        );
        assert_eq!(lookups(Some(Here { mount: 7, dev: st.st_dev, dir: at ^ 1 })), 1, "filed under another directory");
        assert_eq!(lookups(Some(a)), 0, "the control: still remembered");
        assert_eq!(lookups(None), 1, "no unique mount id: nothing remembered");
    }

    /// A wall clock stepped back (against the monotonic one) empties the
    /// memory: a change made after it could get a remembered ctime.
    #[test]
    fn a_clock_stepped_back_forgets_every_file() {
        let now = crate::sys::realtime_offset_ns();
        let mut m = NoCaps::default();
        m.clock(now);
        let one = || -> Files { Arc::from([(4, (1, 0))]) };
        m.store((1, 2, 3), one());
        // Slewed forward, or back by less than a second: kept.
        m.clock(now + 3_000_000_000);
        m.clock(now + 2_500_000_000);
        assert!(m.dirs.contains_key(&(1, 2, 3)));
        // Back by over a second against the furthest seen: forgotten.
        m.clock(now + 1_900_000_000);
        assert!(m.dirs.is_empty() && m.files == 0);
        // Stepped back by over a second from where the memory began again.
        m.store((1, 2, 3), one());
        m.clock(now + 1_500_000_000);
        assert!(m.dirs.contains_key(&(1, 2, 3)));
        m.clock(now + 800_000_000);
        assert!(m.dirs.is_empty() && m.files == 0);
    }

    /// The memory holds at most [`NO_CAPS_MAX`] files: a list that would
    /// pass it empties the memory first; a directory's list replaces its
    /// last one, counted once.
    #[test]
    fn the_memory_is_bounded() {
        let mut m = NoCaps::default();
        let files = |n: u64| -> Files { (0..n).map(|i| (i, (1, 0))).collect() };
        m.store((1, 1, 1), files(10));
        m.store((1, 1, 1), files(20));
        assert_eq!(m.files, 20);
        m.store((1, 1, 2), files(NO_CAPS_MAX as u64 - 20));
        assert_eq!((m.files, m.dirs.len()), (NO_CAPS_MAX, 2));
        m.store((1, 1, 3), files(1));
        assert_eq!((m.files, m.dirs.len()), (1, 1), "past the bound: emptied, then the new list");
    }

    /// A walk that does not remember (a one-shot sandbox's) looks every
    /// file up, and leaves nothing for a later walk that remembers: the
    /// control is the remembering walk after it, which looks both up.
    #[test]
    fn a_walk_that_does_not_remember_looks_up_every_file() {
        let d = tree();
        let p = d.path();
        let once = Caps { before: (i64::MAX, 0), local: Mutex::new(HashMap::new()), remember: false };
        assert_eq!(walk_caps(p, &once), (vec![], 2));
        assert_eq!(walk_caps(p, &once), (vec![], 2));
        let caps = Caps { before: (i64::MAX, 0), local: Mutex::new(HashMap::new()), remember: true };
        assert_eq!(walk_caps(p, &caps), (vec![], 2), "nothing was remembered by the walks before");
        assert_eq!(walk_caps(p, &caps), (vec![], 0));
    }

    /// A file changed within the margin before the walk is not remembered:
    /// a change in the same timestamp tick could keep its ctime.
    #[test]
    fn files_changed_just_before_a_walk_are_looked_up_every_time() {
        let d = tree();
        let caps = Caps::new(true);
        assert_eq!(walk_caps(d.path(), &caps), (vec![], 2));
        assert_eq!(walk_caps(d.path(), &caps), (vec![], 2));
    }

    #[test]
    fn links_within_the_area_count_and_links_out_of_it_are_named() {
        let d = tree();
        let p = d.path();
        fs::hard_link(p.join("target/debug/deps/foo-1"), p.join("target/debug/foo")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(names(p, &["target"], &[]).unwrap_or_else(|e| panic!("{e}")), Vec::<PathBuf>::new());
        fs::hard_link(p.join("src/main.rs"), p.join("target/libdep.rlib")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(names(p, &["target"], &[]).unwrap_or_else(|e| panic!("{e}")), vec![p.join("target/libdep.rlib")]);
        // With the whole tree writable both names are found.
        assert_eq!(names(p, &["", "target"], &[]).unwrap_or_else(|e| panic!("{e}")), Vec::<PathBuf>::new());
        // A name in a protected path is not writable: the other one is kept.
        fs::hard_link(p.join(".git/hooks/pre-commit"), p.join("hook")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(names(p, &[""], &[".git/hooks"]).unwrap_or_else(|e| panic!("{e}")), vec![p.join("hook")]);
    }

    #[test]
    fn too_many_and_landlock_only_are_refused() {
        let d = tree();
        let p = d.path();
        for i in 0..=HARD_LINK_LIMIT {
            fs::hard_link(p.join("src/main.rs"), p.join(format!("target/l{i}"))).unwrap_or_else(|e| panic!("{e}"));
        }
        let e = names(p, &["target"], &[]).map(|v| v.len());
        assert!(matches!(&e, Err(SandboxError::LimitExceeded { message: m, .. }) if m.contains("up to 100")), "{e:?}");
        for i in 1..=HARD_LINK_LIMIT {
            fs::remove_file(p.join(format!("target/l{i}"))).unwrap_or_else(|e| panic!("{e}"));
        }
        let e = read_only_names(&[p.join("target")], &[], Walk { no_mounts: true, remember: true })
            .map(|v| v.hard_linked.len());
        assert!(
            matches!(&e, Err(SandboxError::Unsupported { message: m, .. }) if m.contains("landlock-only")),
            "{e:?}"
        );
    }

    #[test]
    fn privileged_programs_are_collected() {
        use std::os::unix::fs::PermissionsExt;
        let d = tree();
        let p = d.path();
        let set = |f: &str, m: u32| fs::set_permissions(p.join(f), fs::Permissions::from_mode(m));
        set("target/x", 0o4755).unwrap_or_else(|e| panic!("{e}"));
        set("target/debug/deps/foo-1", 0o2644).unwrap_or_else(|e| panic!("{e}"));
        set("src/main.rs", 0o2755).unwrap_or_else(|e| panic!("{e}"));
        let k = read_only_names(&[p.to_path_buf()], &[], Walk { no_mounts: false, remember: true })
            .unwrap_or_else(|e| panic!("{e}"));
        // The setgid bit counts without group execute too: write(2) keeps it
        // there, and an access ACL can then add the execute bits.
        assert_eq!(k.privileged, vec![p.join("src/main.rs"), p.join("target/debug/deps/foo-1"), p.join("target/x")]);
        let e = read_only_names(&[p.join("target/debug/deps/foo-1")], &[], Walk { no_mounts: false, remember: true });
        assert!(
            matches!(&e, Err(SandboxError::GrantRefused { message: m, .. }) if m.contains("setgid to gid")),
            "{e:?}"
        );
        set("target/debug/deps/foo-1", 0o644).unwrap_or_else(|e| panic!("{e}"));
        let e = read_only_names(&[p.to_path_buf()], &[], Walk { no_mounts: true, remember: true });
        assert!(matches!(&e, Err(SandboxError::Unsupported { message: m, .. }) if m.contains("target/x")), "{e:?}");
        let e = read_only_names(&[p.join("target/x")], &[], Walk { no_mounts: false, remember: true });
        assert!(matches!(&e, Err(SandboxError::GrantRefused { message: m, .. }) if m.contains("setuid")), "{e:?}");
        // A privileged file that is also hard-linked out is listed once.
        fs::hard_link(p.join("target/x"), p.join("src/x")).unwrap_or_else(|e| panic!("{e}"));
        let k = read_only_names(&[p.join("target")], &[], Walk { no_mounts: false, remember: true })
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((k.hard_linked, k.privileged), (vec![p.join("target/x")], vec![]));
    }

    /// A big tree: `n` directories of 20 files in `area`, some files
    /// hard-linked within the area across directories, some out of it (to
    /// `out/`), some setuid, and one skipped directory holding a link out.
    fn big_tree(n: usize) -> tempfile::TempDir {
        use std::os::unix::fs::PermissionsExt;
        let d =
            tempfile::Builder::new().prefix("pc-links-big-").tempdir_in("/var/tmp").unwrap_or_else(|e| panic!("{e}"));
        let p = d.path();
        fs::create_dir_all(p.join("out")).unwrap_or_else(|e| panic!("{e}"));
        for i in 0..n {
            let dir = p.join(format!("area/g{}/d{i}", i % 7));
            fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
            for f in 0..20 {
                fs::write(dir.join(format!("f{f}")), "x").unwrap_or_else(|e| panic!("{e}"));
            }
            if i % 5 == 0 {
                fs::hard_link(dir.join("f0"), p.join(format!("out/o{i}"))).unwrap_or_else(|e| panic!("{e}"));
            }
            if i % 3 == 0 && i > 0 {
                let other = p.join(format!("area/g{}/d{}/f1", (i - 1) % 7, i - 1));
                fs::hard_link(&other, dir.join("link-in")).unwrap_or_else(|e| panic!("{e}"));
            }
            if i % 11 == 0 {
                fs::set_permissions(dir.join("f2"), fs::Permissions::from_mode(0o4755))
                    .unwrap_or_else(|e| panic!("{e}"));
            }
        }
        let skipped = p.join("area/g0/skipped");
        fs::create_dir_all(&skipped).unwrap_or_else(|e| panic!("{e}"));
        fs::hard_link(p.join("out/o0"), skipped.join("also-out")).unwrap_or_else(|e| panic!("{e}"));
        d
    }

    fn walk_with(p: &Path, walkers: Walkers) -> Result<Kept, SandboxError> {
        read_only_names_with(&[p.join("area")], &[p.join("area/g0/skipped")], false, &Caps::new(true), walkers)
    }

    /// A walk shared among threads finds exactly what one thread finds:
    /// names linked across directories listed by different threads are
    /// counted together (not kept), names linked out are kept, the setuid
    /// files are collected, and the skipped directory is not entered. The
    /// control is the walk of one thread, whose answer is also checked
    /// against the tree as made.
    #[test]
    fn a_walk_shared_among_threads_finds_what_one_thread_finds() {
        let d = big_tree(120);
        let p = d.path();
        let alone = walk_with(p, Walkers { most: Some(1), from: usize::MAX }).unwrap_or_else(|e| panic!("{e}"));
        let expected: Vec<PathBuf> =
            (0..120).filter(|i| i % 5 == 0).map(|i| p.join(format!("area/g{}/d{i}/f0", i % 7))).collect::<Vec<_>>();
        let mut expected = expected;
        expected.sort();
        assert_eq!(alone.hard_linked, expected, "the names linked out of the area");
        assert_eq!(alone.privileged.len(), (0..120).filter(|i| i % 11 == 0).count());
        let started = WALKERS_STARTED.load(Ordering::Relaxed);
        for (most, from) in [(2, 0), (4, 0), (3, 100), (8, 1000)] {
            let shared =
                walk_with(p, Walkers { most: Some(most), from }).unwrap_or_else(|e| panic!("{most}, {from}: {e}"));
            assert_eq!(shared, alone, "{most} threads from {from} entries");
        }
        assert!(WALKERS_STARTED.load(Ordering::Relaxed) > started, "the walk was shared among threads");
    }

    /// An error met by any thread of a shared walk ends the walk with that
    /// error: a directory too deep, found below the point where the walk
    /// was shared. The control is the same tree without the deep chain.
    #[test]
    fn an_error_in_a_shared_walk_is_the_walks() {
        let d = big_tree(40);
        let p = d.path();
        assert!(walk_with(p, Walkers { most: Some(4), from: 0 }).is_ok());
        let mut deep = p.join("area/g3/d3");
        for i in 0..=LINK_WALK_DEPTH {
            deep.push(format!("{}", i % 10));
        }
        fs::create_dir_all(&deep).unwrap_or_else(|e| panic!("{e}"));
        for walkers in [Walkers { most: Some(1), from: usize::MAX }, Walkers { most: Some(4), from: 0 }] {
            let e = walk_with(p, walkers);
            assert!(
                matches!(&e, Err(SandboxError::LimitExceeded { message: m, .. }) if m.contains("directories deep")),
                "{e:?}"
            );
        }
    }
}
