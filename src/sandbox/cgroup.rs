//! The per-command cgroup v2 leaf: born into with `CLONE_INTO_CGROUP`,
//! emptied with `cgroup.kill`, removed afterwards.
//!
//! The cgroup2 mount is found in `/proc/self/mountinfo` (hybrid hosts mount
//! it at `/sys/fs/cgroup/unified`, others elsewhere); the leaf is created
//! next to the caller in its own cgroup. Without a writable (delegated)
//! cgroup the sandbox falls back to pid-namespace teardown, and the result
//! says so.

use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;

/// Where per-command cgroups can be made.
#[derive(Debug, Clone, Serialize)]
pub struct CgroupHost {
    /// The cgroup2 mount point.
    pub mount: PathBuf,
    /// The caller's own cgroup directory, parent of the leaves.
    pub parent: PathBuf,
    /// Controllers enabled for the leaves (`cgroup.subtree_control`).
    pub controllers: Vec<String>,
}

/// Why no cgroup could be used.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub enum NoCgroup {
    /// No cgroup2 mount in `/proc/self/mountinfo`.
    NotMounted,
    /// The caller's cgroup2 path is not below the mount.
    NotVisible,
    /// The caller may not create cgroups there (no delegation).
    NotWritable(String),
    /// The kernel has no `cgroup.kill` (before Linux 5.14).
    NoKill,
}

impl std::fmt::Display for NoCgroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoCgroup::NotMounted => write!(f, "no cgroup2 filesystem is mounted"),
            NoCgroup::NotVisible => write!(f, "this process's cgroup is not visible under the cgroup2 mount"),
            NoCgroup::NotWritable(p) => {
                write!(f, "{p} is not writable (no delegated cgroup subtree)")
            }
            NoCgroup::NoKill => write!(f, "the kernel has no cgroup.kill (needs Linux 5.14)"),
        }
    }
}

/// Find the cgroup2 mount and this process's cgroup under it: at the usual
/// places first ([`discover_usual`]), else by `/proc/self/mountinfo`.
pub fn discover() -> Result<CgroupHost, NoCgroup> {
    let own = read_pseudo("/proc/self/cgroup").map_err(|_| NoCgroup::NotVisible)?;
    if let Some(host) = discover_usual(&own) {
        return Ok(host);
    }
    let mountinfo = read_pseudo("/proc/self/mountinfo").map_err(|_| NoCgroup::NotMounted)?;
    let host = discover_from(&mountinfo, &own)?;
    // The first cgroup2 mount in the table may show another part of the
    // hierarchy at the path this process's cgroup has (a bind over it in
    // the caller's mount namespace): leaves made there would escape the
    // caller's limits. A directory that says who is in it and does not
    // list this process is not its cgroup.
    if lists_this_process(&host.parent) == Some(false) {
        return Err(NoCgroup::NotVisible);
    }
    Ok(host)
}

/// Whether `dir/cgroup.procs` lists this process: `None` when it cannot
/// be read (a threaded cgroup answers `EOPNOTSUPP`).
fn lists_this_process(dir: &Path) -> Option<bool> {
    let me = std::process::id().to_string();
    read_pseudo(dir.join("cgroup.procs")).ok().map(|procs| procs.lines().any(|p| p == me))
}

/// The cgroup2 mount at its usual places (`/sys/fs/cgroup`; a hybrid
/// host's `/sys/fs/cgroup/unified`), without reading `mountinfo`, whose
/// first read costs a process about 0.1 ms (the kernel formats every
/// mount; one-shot `portcullis exec` pays it on every command). Taken only
/// when the directory of this process's cgroup as that filesystem shows it
/// is proven to be that cgroup ([`surely_own`]), or else lists this process
/// in `cgroup.procs`: a mount whose root is another part of the hierarchy
/// (a container's bind of its own subtree, a cgroup namespace's view) shows
/// another directory at that path, or none, and `mountinfo` decides. `own`
/// is this process's `/proc/self/cgroup`.
fn discover_usual(own: &str) -> Option<CgroupHost> {
    let path = Path::new(own.lines().find_map(|l| l.strip_prefix("0::"))?);
    // A process outside its cgroup namespace's root sees `/../x`: a join
    // would leave the mount (on a hybrid host, into a v1 hierarchy whose
    // cgroup.procs lists it too). Such paths go to `mountinfo`.
    if !path.components().all(|c| matches!(c, std::path::Component::RootDir | std::path::Component::Normal(_))) {
        return None;
    }
    let cgroup2 = |p: &Path| {
        nix::sys::statfs::statfs(p).is_ok_and(|st| st.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC)
    };
    ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"].into_iter().find_map(|mount| {
        if !cgroup2(Path::new(mount)) {
            return None;
        }
        let parent = Path::new(mount).join(path.strip_prefix("/").unwrap_or(path));
        // The directory itself on cgroup2 too, not only the mount.
        if !cgroup2(&parent) {
            return None;
        }
        let sure = surely_own(Path::new(mount), &parent) && still_in(own);
        (sure || lists_this_process(&parent) == Some(true)).then(|| CgroupHost {
            mount: PathBuf::from(mount),
            controllers: read_controllers(&parent),
            parent,
        })
    })
}

/// Whether `dir`, `mount` joined with the path `/proc/self/cgroup` gives,
/// is this process's cgroup for certain, by three `statx`s: this process is
/// in the initial cgroup namespace (so that path starts at the hierarchy's
/// root), `mount` shows the hierarchy from its root (the root cgroup's
/// directory is inode 1), and `dir` lies on `mount` itself, not on a mount
/// over part of it. Otherwise [`lists_this_process`] decides, which makes
/// the kernel format every process of the cgroup: a root cgroup's hundred
/// processes took 50-60 µs of each `portcullis exec` here.
fn surely_own(mount: &Path, dir: &Path) -> bool {
    /// `PROC_CGROUP_INIT_INO` (<linux/proc_ns.h>): the initial cgroup
    /// namespace's inode number, fixed.
    const INIT_CGROUP_NS: u64 = 0xEFFF_FFFB;
    let ino = |p: &Path| nix::sys::stat::stat(p).map(|s| s.st_ino);
    let mount_of = |p: &Path| {
        let c = std::ffi::CString::new(p.as_os_str().as_bytes()).ok()?;
        crate::sys::unique_mount_at(None, &c, 0)
    };
    ino(Path::new("/proc/self/ns/cgroup")) == Ok(INIT_CGROUP_NS)
        && ino(mount) == Ok(1)
        && mount_of(mount).is_some_and(|m| Some(m) == mount_of(dir))
}

/// Whether this process is still in the cgroup `own` (its earlier
/// `/proc/self/cgroup`) names: the statx proof holds for the path read
/// then, and a process moved since (found in review) must not make its
/// leaves under the cgroup it left. `cgroup.procs`, which it replaces,
/// was read after the path too.
fn still_in(own: &str) -> bool {
    read_pseudo("/proc/self/cgroup").is_ok_and(|now| now == own)
}

/// `cgroup.subtree_control`: the controllers enabled for the leaves.
fn read_controllers(parent: &Path) -> Vec<String> {
    read_pseudo(parent.join("cgroup.subtree_control"))
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Read a /proc or cgroupfs file whole. Such files report a size of 0, for
/// which `fs::read_to_string` starts with a 32-byte read and doubles: eight
/// syscalls for a 1.5 KB mountinfo. [`crate::sys::read_proc_file`] reads into
/// 16 KiB of room: four calls in all (open, two reads, close).
pub(super) fn read_pseudo(path: impl AsRef<Path>) -> io::Result<String> {
    utf8(crate::sys::read_proc_file(path.as_ref())?)
}

/// A pseudo-file's bytes as text (`InvalidData` if they are not UTF-8).
fn utf8(bytes: Vec<u8>) -> io::Result<String> {
    String::from_utf8(bytes).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))
}

/// Undo mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    String::from_utf8_lossy(&super::aliases::unescape_bytes(s)).into_owned()
}

fn discover_from(mountinfo: &str, own: &str) -> Result<CgroupHost, NoCgroup> {
    // mountinfo: id parent major:minor root mountpoint opts... - fstype src superopts
    let (root, mount) = mountinfo
        .lines()
        .find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            if post.split_whitespace().next()? != "cgroup2" {
                return None;
            }
            let f: Vec<&str> = pre.split_whitespace().collect();
            Some((unescape(f.get(3)?), unescape(f.get(4)?)))
        })
        .ok_or(NoCgroup::NotMounted)?;
    let path = own.lines().find_map(|l| l.strip_prefix("0::")).ok_or(NoCgroup::NotVisible)?;
    let rel = Path::new(path).strip_prefix(&root).map_err(|_| NoCgroup::NotVisible)?;
    let parent = Path::new(&mount).join(rel);
    let controllers = read_controllers(&parent);
    Ok(CgroupHost { mount: PathBuf::from(mount), parent, controllers })
}

/// Which mechanism enforces a limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LimitMechanism {
    /// The cgroup's `pids.max` / `memory.max`.
    Cgroup,
    /// `RLIMIT_NPROC`, counted per user namespace, so per sandbox.
    RlimitNproc,
    /// `RLIMIT_AS`, per process.
    RlimitAs,
}

/// A live per-command cgroup.
#[derive(Debug)]
pub struct Cgroup {
    /// Its directory.
    pub path: PathBuf,
    /// Open directory fd for `CLONE_INTO_CGROUP`.
    pub dir: OwnedFd,
    /// Whether `pids.max` was set.
    pub pids: bool,
    /// Whether `memory.max` was set.
    pub memory: bool,
    /// Its `cgroup.procs`, opened when the leaf is made (by a pool's maker
    /// thread, ahead of the run) and read again from its start after the
    /// run: the kernel restarts the list at offset 0, and the open (a
    /// cgroupfs lookup and a `seq_file`) stays off the run's end.
    procs_file: Option<OwnedFd>,
    removed: bool,
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// Remove leaves left by callers that died (SIGKILL) before cleaning up:
/// `portcullis-<pid>-<n>` where no process `<pid>` exists any more and
/// nothing is left inside. Best effort.
pub fn sweep_orphans(parent: &Path) {
    let Ok(rd) = fs::read_dir(parent) else { return };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("portcullis-")).and_then(|r| r.split('-').next())
        else {
            continue;
        };
        let Ok(pid) = pid.parse::<i32>() else { continue };
        // The leaves of live callers (their pre-made sandboxes too: a few
        // per workspace, a node's worth under one parent) are passed over
        // with one call each; only a dead caller's leaf is read.
        if nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None) != Err(nix::errno::Errno::ESRCH) {
            continue;
        }
        let empty = read_pseudo(e.path().join("cgroup.events")).is_ok_and(|s| s.lines().any(|l| l == "populated 0"));
        if empty {
            let _ = fs::remove_dir(e.path());
        }
    }
}

/// The per-command leaf a plan counts on: made under `parent` when the run
/// starts, with `pids.max` and `memory.max` set where the plan says the
/// cgroup enforces them. Decided at plan time ([`CgroupHost::plan`]); a
/// run that cannot make it fails (`CgroupFailed`) rather than run
/// differently from its plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CgroupPlan {
    /// The directory the leaf is made in (the caller's own cgroup).
    pub parent: PathBuf,
    /// The value written to `pids.max`, when the `pids` controller is
    /// enabled for the leaves and a process limit was asked for.
    pub pids_max: Option<u64>,
    /// The value written to `memory.max`, when the `memory` controller is
    /// enabled for the leaves and a memory limit was asked for.
    pub memory_max: Option<u64>,
}

/// The cgroup a plan counted on could not be set up when the run started.
#[derive(Debug, thiserror::Error)]
#[error("could not {stage} {}: {source}", .path.display())]
pub struct CgroupFailed {
    /// What was being done: `create the per-command cgroup`, `write`, ...
    pub stage: &'static str,
    /// The directory or control file.
    pub path: PathBuf,
    /// The kernel's answer.
    pub source: io::Error,
}

impl CgroupHost {
    /// Whether a leaf can be made for a run, judged without making one:
    /// the parent is writable to this caller (`access(W_OK)`) and the
    /// kernel has `cgroup.kill`. Limits go to the cgroup only where their
    /// controller is enabled for the leaves.
    pub fn plan(&self, pids: Option<u64>, memory: Option<u64>) -> Result<CgroupPlan, NoCgroup> {
        if let Err(e) = nix::unistd::access(&self.parent, nix::unistd::AccessFlags::W_OK) {
            return Err(NoCgroup::NotWritable(format!("{} ({})", self.parent.display(), io::Error::from(e))));
        }
        if !self.has_kill() {
            return Err(NoCgroup::NoKill);
        }
        Ok(CgroupPlan {
            parent: self.parent.clone(),
            pids_max: pids.filter(|_| self.has("pids")),
            memory_max: memory.filter(|_| self.has("memory")),
        })
    }

    /// Whether `controller` is enabled for the leaves.
    pub fn has(&self, controller: &str) -> bool {
        self.controllers.iter().any(|c| c == controller)
    }

    /// Whether the kernel has `cgroup.kill` (Linux 5.14): every cgroup but
    /// the root shows the file; for the root, the kernel's release says.
    fn has_kill(&self) -> bool {
        if self.parent != self.mount {
            return self.parent.join("cgroup.kill").exists();
        }
        // Asked once per process: the kernel's release cannot change.
        static RECENT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *RECENT.get_or_init(|| {
            // uname(2): the same release as /proc/sys/kernel/osrelease,
            // without a first read of a /proc file (~25 µs).
            let release =
                nix::sys::utsname::uname().map(|u| u.release().to_string_lossy().into_owned()).unwrap_or_default();
            let mut parts = release.split(|c: char| !c.is_ascii_digit()).map(|p| p.parse::<u32>().unwrap_or(0));
            let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
            (major, minor) >= (5, 14)
        })
    }

    /// Make the leaf `plan` describes, with its limits. Any step that
    /// fails fails the whole: the run must not go ahead with less than its
    /// plan said (the leaf made so far is removed on drop).
    pub fn create(&self, plan: &CgroupPlan) -> Result<Cgroup, CgroupFailed> {
        fn failed(stage: &'static str, path: &Path) -> impl FnOnce(io::Error) -> CgroupFailed {
            let path = path.to_path_buf();
            move |source| CgroupFailed { stage, path, source }
        }
        // A leaf of that name may be left by a dead process that had this
        // pid: one that was pid 1 of its own pid namespace, say, whose
        // leaves no sweep can tell from a live process's (a review found
        // such a leaf failing every later run of the next one): the next
        // number is taken.
        let mut tries = 0;
        let path = loop {
            let name = format!("portcullis-{}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
            let path = plan.parent.join(name);
            match fs::create_dir(&path) {
                Ok(()) => break path,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && tries < 1000 => tries += 1,
                Err(e) => return Err(failed("create the per-command cgroup", &path)(e)),
            }
        };
        let dir = match open_dir(&path) {
            Ok(d) => d,
            Err(e) => {
                let _ = fs::remove_dir(&path);
                return Err(failed("open the per-command cgroup", &path)(e));
            }
        };
        let flags = nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC;
        let procs_file = nix::fcntl::openat(&dir, "cgroup.procs", flags, nix::sys::stat::Mode::empty()).ok();
        let mut cg = Cgroup { dir, path, pids: false, memory: false, procs_file, removed: false };
        let kill = cg.path.join("cgroup.kill");
        if !kill.exists() {
            return Err(failed("find", &kill)(io::Error::from_raw_os_error(libc::ENOENT)));
        }
        if let Some(n) = plan.pids_max {
            let file = cg.path.join("pids.max");
            fs::write(&file, n.to_string()).map_err(failed("write", &file))?;
            cg.pids = true;
        }
        if let Some(n) = plan.memory_max {
            let file = cg.path.join("memory.max");
            fs::write(&file, n.to_string()).map_err(failed("write", &file))?;
            cg.memory = true;
            let _ = fs::write(cg.path.join("memory.oom.group"), "1");
        }
        Ok(cg)
    }
}

fn open_dir(p: &Path) -> io::Result<OwnedFd> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECTORY | libc::O_CLOEXEC).open(p)?;
    Ok(OwnedFd::from(f))
}

impl Cgroup {
    /// Kill every process in the cgroup at once.
    pub fn kill(&self) -> io::Result<()> {
        fs::write(self.path.join("cgroup.kill"), "1")
    }

    /// The pids in the leaf (`cgroup.procs`), as this process's pid
    /// namespace numbers them.
    pub fn procs(&self) -> io::Result<Vec<libc::pid_t>> {
        let text = match &self.procs_file {
            Some(f) => utf8(crate::sys::read_from_start(f)?)?,
            None => self.read_own("cgroup.procs")?,
        };
        text.split_whitespace().map(|p| p.parse().map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))).collect()
    }

    /// Whether any process is left. A leaf whose `cgroup.events` cannot be
    /// read (out of descriptors or memory) counts as populated: its
    /// callers kill what is there, or fail the run's cleanup, rather than
    /// take a leaf nobody looked into for an empty one (found in review:
    /// a writable run then let go of its git-guard record's only mention
    /// of the leaf). Only a leaf that is gone (`ENOENT`, `ENODEV`) is
    /// empty without being read.
    pub fn populated(&self) -> bool {
        match self.read_own("cgroup.events") {
            Ok(s) => s.lines().any(|l| l == "populated 1"),
            Err(e) => !is_gone(&e),
        }
    }

    /// One of the leaf's own files, by the leaf's descriptor.
    fn read_own(&self, name: &str) -> io::Result<String> {
        utf8(crate::sys::read_proc_file_in(Some(std::os::fd::AsFd::as_fd(&self.dir)), Path::new(name))?)
    }

    /// Kill, wait until empty (bounded), remove. Returns whether it is gone.
    pub async fn kill_and_remove(&mut self, budget: Duration) -> bool {
        let mut naps = Naps::new(budget);
        while !self.try_remove() {
            let Some(nap) = naps.next() else { return false };
            tokio::time::sleep(nap).await;
        }
        true
    }

    /// [`Cgroup::kill_and_remove`] for a thread of its own (no runtime).
    pub fn kill_and_remove_blocking(&mut self, budget: Duration) -> bool {
        let mut naps = Naps::new(budget);
        while !self.try_remove() {
            let Some(nap) = naps.next() else { return false };
            std::thread::sleep(nap);
        }
        true
    }

    /// One try: remove the leaf, or kill what is left in it.
    fn try_remove(&mut self) -> bool {
        // rmdir first: the kernel refuses it (EBUSY) while any process is
        // left, so success proves the leaf empty, and the usual case (the
        // helper reaped pid 1, the pid namespace is gone) costs one syscall
        // instead of reading cgroup.events first.
        match fs::remove_dir(&self.path) {
            Ok(()) => {
                self.removed = true;
                true
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.removed = true;
                true
            }
            Err(_) => {
                if self.populated() {
                    let _ = self.kill();
                }
                false
            }
        }
    }
}

/// Whether a read of a leaf's file failed because the leaf is gone
/// (removed, or being removed while it is read: `ENODEV`).
pub(super) fn is_gone(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENODEV)
}

/// The pauses between tries: 200 µs, doubling up to 20 ms, until `budget`
/// has passed.
pub(super) struct Naps {
    start: Instant,
    budget: Duration,
    nap: Duration,
}

impl Naps {
    pub(super) fn new(budget: Duration) -> Naps {
        Naps { start: Instant::now(), budget, nap: Duration::from_micros(200) }
    }

    pub(super) fn next(&mut self) -> Option<Duration> {
        if self.start.elapsed() > self.budget {
            return None;
        }
        let nap = self.nap;
        self.nap = (nap * 2).min(Duration::from_millis(20));
        Some(nap)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        if !self.removed {
            // A run was abandoned (its future dropped): kill, then give the
            // kernel a bounded moment to empty the cgroup so the directory
            // does not linger. This blocks for at most ~200 ms.
            let _ = self.kill();
            for _ in 0..200 {
                match fs::remove_dir(&self.path) {
                    // Gone: removed here, or by its helper (the lifeline
                    // closed first, and it removes the leaf of an orphan).
                    Ok(()) => return,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => return,
                    Err(_) => {}
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

#[cfg(test)]
mod tests {

    /// A leaf name a dead process with this pid left (one that was pid 1
    /// of its own pid namespace leaves `portcullis-1-N`, which no sweep
    /// removes) does not fail the run: the next number is taken.
    #[test]
    fn a_leaf_name_left_by_another_process_is_passed_over() {
        let Some((host, plan)) = discover().ok().and_then(|h| h.plan(None, None).ok().map(|p| (h, p))) else {
            assert!(
                std::env::var_os("PORTCULLIS_REQUIRE_ALL_LAYERS").is_none(),
                "no cgroup leaf can be made here, and every layer is required"
            );
            eprintln!("skipping: no cgroup leaf can be made here");
            return;
        };
        let next = SEQ.load(Ordering::Relaxed);
        let stale: Vec<PathBuf> =
            (next..next + 3).map(|n| plan.parent.join(format!("portcullis-{}-{n}", std::process::id()))).collect();
        for p in &stale {
            fs::create_dir(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        }
        let made = host.create(&plan);
        for p in &stale {
            let _ = fs::remove_dir(p);
        }
        let mut cg = made.unwrap_or_else(|e| panic!("a stale leaf name failed the leaf: {}", e.source));
        assert!(!stale.contains(&cg.path), "{}", cg.path.display());
        assert!(cg.kill_and_remove_blocking(Duration::from_secs(5)));
    }
    use super::*;

    const HYBRID: &str = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
        39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n\
        41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

    /// `populated` fails closed: a leaf is empty only when its
    /// `cgroup.events` says so or the leaf is gone; one that cannot be read
    /// (here: `EISDIR`; in the field, no descriptor or memory left) is
    /// taken for populated, so the run's cleanup kills it or fails.
    #[test]
    fn a_leaf_that_cannot_be_read_counts_as_populated() {
        let d = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let leaf = || Cgroup {
            path: d.path().to_path_buf(),
            dir: nix::fcntl::open(d.path(), nix::fcntl::OFlag::O_DIRECTORY, nix::sys::stat::Mode::empty())
                .unwrap_or_else(|e| panic!("{e}")),
            pids: false,
            memory: false,
            procs_file: None,
            removed: true,
        };
        let events = d.path().join("cgroup.events");
        assert!(!leaf().populated(), "gone (no cgroup.events): empty");
        fs::write(&events, "populated 0\nfrozen 0\n").unwrap_or_else(|e| panic!("{e}"));
        assert!(!leaf().populated());
        fs::write(&events, "populated 1\nfrozen 0\n").unwrap_or_else(|e| panic!("{e}"));
        assert!(leaf().populated());
        fs::remove_file(&events).unwrap_or_else(|e| panic!("{e}"));
        fs::create_dir(&events).unwrap_or_else(|e| panic!("{e}"));
        assert!(leaf().populated(), "unreadable: populated");
    }

    #[test]
    fn finds_cgroup2_on_a_hybrid_host() {
        let h = discover_from(HYBRID, "8:pids:/\n0::/user.slice/x\n").map_err(|e| e.to_string());
        let h = h.as_ref().map(|h| h.parent.clone());
        assert_eq!(h, Ok(PathBuf::from("/sys/fs/cgroup/unified/user.slice/x")));
    }

    #[test]
    fn honours_the_mount_root_and_escapes() {
        let mi = "41 31 0:38 /sub /run/cg\\040two rw - cgroup2 cgroup2 rw\n";
        let h = discover_from(mi, "0::/sub/leaf\n").map(|h| h.parent);
        assert_eq!(h, Ok(PathBuf::from("/run/cg two/leaf")));
        assert_eq!(discover_from(mi, "0::/elsewhere\n").map(|h| h.parent), Err(NoCgroup::NotVisible));
    }

    /// The usual places, where they hold this process's cgroup, give what
    /// `mountinfo` gives (on this project's hybrid host, the `unified`
    /// mount); a cgroup path that is not this process's is not taken.
    #[test]
    fn the_usual_places_agree_with_mountinfo() {
        let own = read_pseudo("/proc/self/cgroup").unwrap_or_default();
        let Ok(mountinfo) = read_pseudo("/proc/self/mountinfo") else { return };
        let Ok(slow) = discover_from(&mountinfo, &own) else {
            eprintln!("skipped: no cgroup2 here");
            return;
        };
        if let Some(fast) = discover_usual(&own) {
            assert_eq!((&fast.mount, &fast.parent, &fast.controllers), (&slow.mount, &slow.parent, &slow.controllers));
        } else {
            eprintln!("the cgroup2 mount is not at a usual place here: {}", slow.mount.display());
        }
        // Nor a path that climbs out of the mount (what a process outside its
        // cgroup namespace's root sees).
        let own_path = own.lines().find_map(|l| l.strip_prefix("0::")).unwrap_or("/");
        let climbing = discover_usual(&format!("0::/../{}\n", own_path.trim_start_matches('/'))).is_some();
        assert!(!climbing, "a path with .. was taken");
        // Another cgroup than this process's (a child made for the test, when
        // one can be) is never taken.
        let child = slow.parent.join(format!("portcullis-usual-{}", std::process::id()));
        if fs::create_dir(&child).is_ok() {
            let rel = child.strip_prefix(&slow.mount).map(|r| r.display().to_string()).unwrap_or_default();
            // Also what a process moved out of `rel` after reading
            // `/proc/self/cgroup` has in hand (found in review): the statx
            // proof holds for it, but this process is no longer there.
            let taken = discover_usual(&format!("0::/{rel}\n")).is_some();
            let vouched = surely_own(&slow.mount, &child);
            // Removed before the verdict, so a failure leaves nothing behind.
            let _ = fs::remove_dir(&child);
            assert!(!taken, "{rel} (the statx proof alone: {vouched})");
        }
    }

    /// `cgroup.procs` decides: a directory that lists this process is its
    /// cgroup, one that lists others is not, one without the file says
    /// nothing.
    /// Where the three `statx`s vouch for a directory, `cgroup.procs`
    /// agrees; and this host (the initial cgroup namespace, the usual
    /// mount) is one where they do.
    #[test]
    fn a_sure_directory_lists_this_process() {
        let Ok(own) = read_pseudo("/proc/self/cgroup") else { return };
        let Some(path) = own.lines().find_map(|l| l.strip_prefix("0::")) else { return };
        let mut sure = 0;
        for mount in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
            let cgroup2 = nix::sys::statfs::statfs(mount)
                .is_ok_and(|st| st.filesystem_type() == nix::sys::statfs::CGROUP2_SUPER_MAGIC);
            if !cgroup2 {
                continue;
            }
            let dir = Path::new(mount).join(path.trim_start_matches('/'));
            if surely_own(Path::new(mount), &dir) {
                sure += 1;
                assert_eq!(lists_this_process(&dir), Some(true), "{}", dir.display());
            }
            let sibling = Path::new(mount).join("portcullis-not-a-cgroup");
            assert!(!surely_own(Path::new(mount), &sibling), "{}", sibling.display());
        }
        let init_ns = nix::sys::stat::stat("/proc/self/ns/cgroup").is_ok_and(|s| s.st_ino == 0xEFFF_FFFB);
        if init_ns && discover().is_ok_and(|h| nix::sys::stat::stat(&h.mount).is_ok_and(|s| s.st_ino == 1)) {
            assert_eq!(sure, 1, "the initial cgroup namespace and a mount of the whole hierarchy");
        }
    }

    #[test]
    fn a_cgroup_directory_says_who_is_in_it() {
        let d = std::env::temp_dir().join(format!("portcullis-procs-{}", std::process::id()));
        let _ = fs::create_dir(&d);
        assert_eq!(lists_this_process(&d), None);
        let _ = fs::write(d.join("cgroup.procs"), "1\n22\n");
        assert_eq!(lists_this_process(&d), Some(false));
        let _ = fs::write(d.join("cgroup.procs"), format!("1\n{}\n22\n", std::process::id()));
        let listed = lists_this_process(&d);
        let _ = fs::remove_dir_all(&d);
        assert_eq!(listed, Some(true));
    }

    #[test]
    fn no_cgroup2_is_reported() {
        assert_eq!(
            discover_from("1 0 0:1 / / rw - ext4 /dev/vda rw\n", "0::/\n").map(|h| h.parent),
            Err(NoCgroup::NotMounted)
        );
    }
}
