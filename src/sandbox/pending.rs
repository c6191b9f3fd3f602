//! Writable runs of one workspace side by side, and the git guard's
//! cleanup done once none of them is left.
//!
//! A writable run holds its workspace's lock (`sandbox::lock`) *shared* for
//! its whole life, so writable runs and background jobs of one workspace
//! run at once. Before its command starts, each writes a record of what its
//! git guard must do (the guarded paths, its writable roots, the indexes to
//! read again and the working trees its plan knew, its cgroup) into a
//! directory beside the lock file, in the caller's private lock directory,
//! which no sandboxed command can see. When a run has ended (its cgroup
//! emptied), it lets go of its shared hold and tries the lock *exclusive*
//! without waiting: if it gets it, no writable run of the workspace is left,
//! and it does the cleanup of every record there (its own and those of the
//! runs that ended while it ran, or whose host process was killed), then
//! removes them; if not, another writable run is still going (or is doing
//! the cleanup), and the last one to end does it. A run starting while a
//! cleanup holds the lock waits for it (bounded by its timeout and
//! cancellation, as any wait for the lock). Before it lets go, a run whose
//! command is gone renames its record by what the record's cleanup does
//! (`run-ended-<sha256>.json`), so the runs that end with the same guard
//! share one record: under runs that always overlap (a writable background
//! job, commands that keep coming) the records of the ended ones do not
//! pile up to [`MAX_RECORDS`], which would refuse every writable run until
//! the overlap ends.
//!
//! A run whose request is a scope of another workspace
//! (`ExecRequest::scope_of`) uses that workspace's lock and records
//! directory, and its record names it (`lock_root`): the writable runs of a
//! workspace and of its scopes are one group.
//!
//! Why deferred, not each run's own guard at its end: a run's plan takes
//! what a concurrent run created (a `.git/hooks` that was missing) for the
//! user's and binds it read-only; removing it while the later run still
//! runs detaches that bind in its mount namespace, and the later run could
//! plant there unguarded. Done only when none is running, the cleanup of the
//! union covers what any overlapping run could have created, and the
//! promise is: **when no writable run of the workspace is running, none of
//! the git redirections any of them listed exists** (or a run failed with
//! `SandboxError::AfterRun`).

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use nix::errno::Errno;
use nix::fcntl::{openat, Flock, FlockArg, OFlag};
use nix::sys::stat::{fstat, Mode, SFlag};
use nix::unistd::UnlinkatFlags;
use serde::{Deserialize, Serialize};

use super::git::GitIndex;
use super::run::Failure;
use super::{Cleanup, Plan, SandboxError, Warning};

/// At most this many records are kept for one workspace: a run starting
/// beyond it is refused, a cleanup finding more fails closed.
pub(crate) const MAX_RECORDS: usize = 1024;
/// At most this many bytes in one record (a plan of 10,000 git dirs is a
/// few MB); a larger one is refused when written, and fails the cleanup
/// when read.
pub(crate) const MAX_RECORD_BYTES: u64 = 16 << 20;

const VERSION: u32 = 1;
const PREFIX: &str = "run-";
const SUFFIX: &str = ".json";
const TMP_PREFIX: &str = ".tmp-run-";
/// The name of an ended run's record, after [`PREFIX`]: the rest is the
/// SHA-256 of what its guard does ([`OnDisk::ended_name`]), so that runs
/// ending with the same guard share one record (a `run-` name still, so
/// that a build before session 29 cleans it like any other).
const ENDED: &str = "ended-";

/// A record's name (not one being written).
fn is_record(name: &str) -> bool {
    name.starts_with(PREFIX) && name.ends_with(SUFFIX)
}

/// What one writable run's git guard needs after the run: everything of
/// its plan that `run::guard_git` reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Guard {
    /// The writable roots (the workspace when writable, the write grants).
    pub(super) roots: Vec<PathBuf>,
    /// `Plan::git_guard`.
    pub(super) git_guard: Vec<PathBuf>,
    /// `Plan::git_indexes`.
    pub(super) git_indexes: Vec<GitIndex>,
    /// The debug test switch `fail_git_guard`.
    pub(super) fail_git_guard: bool,
}

impl Guard {
    /// What `plan`'s git guard needs.
    pub(super) fn of(plan: &Plan) -> Guard {
        Guard {
            roots: plan.writable.then(|| plan.workspace.clone()).into_iter().chain(plan.write_grants.clone()).collect(),
            git_guard: plan.git_guard.clone(),
            git_indexes: plan.git_indexes.clone(),
            fail_git_guard: plan.spec.test_switches.fail_git_guard,
        }
    }
}

/// A path in a record: UTF-8 as it is, `%` and every byte that is not
/// UTF-8 as `%XX` (paths need not be UTF-8; JSON strings must).
fn enc(p: &Path) -> String {
    let mut s = String::new();
    for chunk in p.as_os_str().as_bytes().utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '%' {
                s.push_str("%25");
            } else {
                s.push(c);
            }
        }
        for b in chunk.invalid() {
            s.push_str(&format!("%{b:02X}"));
        }
    }
    s
}

fn dec(s: &str) -> Result<PathBuf, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
            let byte =
                hex.and_then(|h| u8::from_str_radix(h, 16).ok()).ok_or_else(|| format!("bad escape in {s:?}"))?;
            out.push(byte);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    let p = PathBuf::from(OsStr::from_bytes(&out));
    if !p.is_absolute() {
        return Err(format!("{s:?} is not an absolute path"));
    }
    Ok(p)
}

fn enc_all(ps: &[PathBuf]) -> Vec<String> {
    ps.iter().map(|p| enc(p)).collect()
}

fn dec_all(ss: &[String]) -> Result<Vec<PathBuf>, String> {
    ss.iter().map(|s| dec(s)).collect()
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct IndexOnDisk {
    index: String,
    worktree: String,
    sha256: bool,
    /// `GitIndex::links` (a record of an earlier build has none: every
    /// gitlink of that index is then taken for one the command added).
    #[serde(default)]
    links: Vec<String>,
}

/// A record as it is on disk (serde JSON).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct OnDisk {
    version: u32,
    /// The host process that ran it (for people reading the file).
    pid: u32,
    workspace: String,
    /// The directory whose lock the run shared, when not its workspace
    /// (a scope's run: the workspace the scope was made from).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    lock_root: Option<String>,
    /// The run's cgroup, killed and awaited before a later cleanup of a
    /// record left behind (its host process was killed mid-run).
    cgroup: Option<String>,
    roots: Vec<String>,
    git_guard: Vec<String>,
    git_indexes: Vec<IndexOnDisk>,
    /// The working trees the plan looked at, which the quarantine took for
    /// the user's until session 26 (see `GitIndex::links`): accepted in a
    /// record of an earlier build, not written, not used.
    #[serde(default, skip_serializing, rename = "git_trees")]
    _git_trees: Vec<String>,
    fail_git_guard: bool,
}

impl OnDisk {
    fn of(ws: &Path, anchor: Option<&Path>, g: &Guard, cgroup: Option<&Path>) -> OnDisk {
        OnDisk {
            version: VERSION,
            pid: std::process::id(),
            workspace: enc(ws),
            lock_root: anchor.filter(|a| *a != ws).map(enc),
            cgroup: cgroup.map(enc),
            roots: enc_all(&g.roots),
            git_guard: enc_all(&g.git_guard),
            git_indexes: g
                .git_indexes
                .iter()
                .map(|i| IndexOnDisk {
                    index: enc(&i.index),
                    worktree: enc(&i.worktree),
                    sha256: i.sha256,
                    // Absolute on disk, as every path of a record.
                    links: i.links.iter().map(|l| enc(&i.worktree.join(l))).collect(),
                })
                .collect(),
            _git_trees: Vec::new(),
            fail_git_guard: g.fail_git_guard,
        }
    }

    /// The name this record takes once its run has ended with its cgroup
    /// emptied: [`PREFIX`], [`ENDED`], then the SHA-256 of everything its
    /// cleanup uses but the cgroup (which then holds nothing of the
    /// command) and the pid (for people only). Two runs that end with the
    /// same guard, roots, indexes and known gitlinks have records that
    /// clean the same paths the same way, so one is kept: under writable
    /// runs that always overlap (a writable background job, or commands
    /// that keep coming) the records of the ended ones no longer pile up
    /// to [`MAX_RECORDS`] and stop the workspace's writable runs.
    fn ended_name(&self) -> Result<String, serde_json::Error> {
        #[derive(Serialize)]
        struct Cleans<'a> {
            version: u32,
            workspace: &'a str,
            lock_root: &'a Option<String>,
            roots: &'a [String],
            git_guard: &'a [String],
            git_indexes: &'a [IndexOnDisk],
            fail_git_guard: bool,
        }
        let bytes = serde_json::to_vec(&Cleans {
            version: self.version,
            workspace: &self.workspace,
            lock_root: &self.lock_root,
            roots: &self.roots,
            git_guard: &self.git_guard,
            git_indexes: &self.git_indexes,
            fail_git_guard: self.fail_git_guard,
        })?;
        Ok(format!("{PREFIX}{ENDED}{}{SUFFIX}", crate::hex::sha256_hex(&bytes)))
    }

    /// The workspace, the directory whose lock the run shared, the guard,
    /// the cgroup.
    fn guard(&self) -> Result<(PathBuf, PathBuf, Guard, Option<PathBuf>), String> {
        if self.version != VERSION {
            return Err(format!("record version {} (this build reads {VERSION})", self.version));
        }
        let git_indexes = self
            .git_indexes
            .iter()
            .map(|i| {
                let worktree = dec(&i.worktree)?;
                let links = dec_all(&i.links)?
                    .into_iter()
                    .map(|l| match l.strip_prefix(&worktree) {
                        Ok(rel) if !rel.as_os_str().is_empty() => Ok(rel.to_path_buf()),
                        _ => Err(format!(
                            "the gitlink {} is not inside its working tree {}",
                            l.display(),
                            worktree.display()
                        )),
                    })
                    .collect::<Result<_, String>>()?;
                Ok(GitIndex { index: dec(&i.index)?, worktree, sha256: i.sha256, links })
            })
            .collect::<Result<_, String>>()?;
        let guard = Guard {
            roots: dec_all(&self.roots)?,
            git_guard: dec_all(&self.git_guard)?,
            git_indexes,
            fail_git_guard: self.fail_git_guard,
        };
        let ws = dec(&self.workspace)?;
        let anchor = self.lock_root.as_deref().map(dec).transpose()?.unwrap_or_else(|| ws.clone());
        if !ws.starts_with(&anchor) {
            return Err(format!("its workspace {} is not inside its lock root {}", ws.display(), anchor.display()));
        }
        let cgroup = self.cgroup.as_deref().map(dec).transpose()?;
        if let Some(cg) = &cgroup {
            run_cgroup(cg)?;
        }
        Ok((ws, anchor, guard, cgroup))
    }
}

/// The records' directory of one workspace, opened.
pub(crate) struct Records {
    dir: OwnedFd,
    /// The directory's device and inode, to see it removed and made anew
    /// ([`Records::refresh`]).
    dir_id: (u64, u64),
    /// The caller's lock directory, which holds this one and the lock file.
    lock_dir: OwnedFd,
    /// This directory's name in it.
    name: String,
    path: PathBuf,
    /// The directory is on tmpfs, whose directory sizes count entries
    /// ([`Records::entries_at_most`]).
    tmpfs: bool,
    /// The lock file's name: the workspace's device and inode.
    lock_name: String,
    /// The directory the lock is of, when not the run's workspace (a
    /// scope's runs share the lock of the workspace it was made from).
    anchor: Option<PathBuf>,
    /// The caller's uid (whose the directory must be).
    uid: u32,
}

fn lock_err(path: &Path, problem: String) -> SandboxError {
    SandboxError::Lock { path: path.to_path_buf(), problem }
}

impl Records {
    /// Open (creating it, mode 700) the records' directory of the workspace
    /// whose lock file is `lock_name`, in the caller's lock directory
    /// `lock_dir`, refusing a link, a non-directory, another uid's or one
    /// open to others.
    pub(crate) fn open(
        lock_dir: OwnedFd,
        lock_dir_path: &Path,
        lock_name: &str,
        uid: u32,
    ) -> Result<Records, SandboxError> {
        let name = format!("{}.runs", lock_name.trim_end_matches(".lock"));
        let path = lock_dir_path.join(&name);
        let (dir, dir_id, tmpfs) = Self::open_dir(&lock_dir, &name, &path, uid)?;
        Ok(Records { dir, dir_id, lock_dir, name, path, tmpfs, lock_name: lock_name.to_string(), anchor: None, uid })
    }

    /// The caller's lock directory (where the workspace's lock file is).
    pub(crate) fn lock_dir(&self) -> std::os::fd::BorrowedFd<'_> {
        self.lock_dir.as_fd()
    }

    /// Once the lock is held: open the directory again if it was removed
    /// (and perhaps made anew) since it was opened, by a cleanup that left
    /// no record ([`super::lock::remove_unused`]). Under the lock it stays.
    pub(crate) fn refresh(&mut self) -> Result<(), SandboxError> {
        if super::lock::names(self.lock_dir.as_fd(), &self.name, self.dir_id).unwrap_or(false) {
            return Ok(());
        }
        let (dir, dir_id, tmpfs) = Self::open_dir(&self.lock_dir, &self.name, &self.path, self.uid)?;
        (self.dir, self.dir_id, self.tmpfs) = (dir, dir_id, tmpfs);
        Ok(())
    }

    /// Remove the records' directory and the lock file when no record is
    /// left (holding the lock exclusive): see [`super::lock::remove_unused`].
    fn remove_unused(&self) -> io::Result<bool> {
        super::lock::remove_unused(self.lock_dir.as_fd(), &self.lock_name, &self.name)
    }

    #[allow(clippy::type_complexity)]
    fn open_dir(
        lock_dir: &OwnedFd,
        name: &str,
        path: &Path,
        uid: u32,
    ) -> Result<(OwnedFd, (u64, u64), bool), SandboxError> {
        let dir = super::lock::open_private_dir(lock_dir.as_fd(), Path::new(name)).map_err(|step| match step {
            super::lock::DirStep::Create(e) => lock_err(path, format!("cannot create it: {}", io::Error::from(e))),
            super::lock::DirStep::Open(e) => {
                lock_err(path, format!("cannot open it ({}); it must be a directory", io::Error::from(e)))
            }
        })?;
        let st = fstat(&dir).map_err(|e| lock_err(path, format!("cannot stat it: {}", io::Error::from(e))))?;
        if st.st_uid != uid || st.st_mode & 0o077 != 0 {
            return Err(lock_err(
                path,
                format!(
                    "it belongs to uid {} with mode {:o}; it must be uid {uid}'s, mode 700: remove it",
                    st.st_uid,
                    st.st_mode & 0o7777
                ),
            ));
        }
        let tmpfs =
            nix::sys::statfs::fstatfs(&dir).is_ok_and(|st| st.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC);
        #[allow(clippy::useless_conversion)]
        let id = (u64::from(st.st_dev), u64::from(st.st_ino));
        Ok((dir, id, tmpfs))
    }

    /// The records are those of the lock of `anchor`, a directory holding
    /// the workspaces of the runs that write them (it is written into each
    /// record, and a cleanup checks it, not the run's workspace, against
    /// the lock).
    pub(crate) fn anchor(&mut self, anchor: &Path) {
        self.anchor = Some(anchor.to_path_buf());
    }

    /// The names in the directory that are records (or records being
    /// written), at most `MAX_RECORDS + 1` of them.
    fn names(&self) -> io::Result<Vec<String>> {
        let fd = self.reopen()?;
        let mut out = Vec::new();
        // getdents64 into our own buffer, not fdopendir (`path::dents`).
        crate::path::dents::for_each(fd.as_fd(), |name, _| {
            if let Some(name) = name.to_str().ok().filter(|n| is_record(n) || n.starts_with(TMP_PREFIX)) {
                out.push(name.to_string());
            }
            out.len() <= MAX_RECORDS
        })?;
        out.sort();
        Ok(out)
    }

    /// The directory open again: a listing of its own, from the start.
    fn reopen(&self) -> io::Result<OwnedFd> {
        Ok(openat(&self.dir, ".", OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty())?)
    }

    /// How many records there are (those of runs still going, of runs that
    /// ended while another ran, and of killed ones). Counted as listed,
    /// with no name kept (where the directory's size cannot stand in for
    /// it: [`Records::entries_at_most`]).
    pub(crate) fn count(&self) -> usize {
        let mut n = 0;
        let listed = self.reopen().and_then(|fd| {
            crate::path::dents::for_each(fd.as_fd(), |name, _| {
                n += usize::from(name.to_str().is_ok_and(is_record));
                true
            })
        });
        if listed.is_ok() {
            n
        } else {
            0
        }
    }

    /// How many runs are pending here: the directory's entries where its
    /// size gives them ([`Records::entries_at_most`]: the records and those
    /// being written, runs about to start, pending either way), else the
    /// records listed ([`Records::count`]).
    fn pending(&self) -> usize {
        self.entries_at_most().unwrap_or_else(|| self.count())
    }

    /// At most how many entries the directory holds, from its size alone
    /// (one `fstat`, no listing): tmpfs, where the lock directory is
    /// whenever `/dev/shm` is there, sizes a directory 40 bytes plus 20
    /// per entry (`BOGO_DIRENT_SIZE`, mm/shmem.c). `None` elsewhere, or for
    /// a size not of that shape: list the directory then. Under a steady
    /// load of overlapping writable runs the records pile up (the last run
    /// to end cleans them), and listing them two or three times per run
    /// was about 0.1 ms of each (docs/sandbox.md, "Session 27").
    fn entries_at_most(&self) -> Option<usize> {
        if !self.tmpfs {
            return None;
        }
        let size = usize::try_from(fstat(&self.dir).ok()?.st_size).ok()?;
        (size >= 40 && (size - 40) % 20 == 0).then_some((size - 40) / 20)
    }

    /// Write the record of a run about to start: a fresh file (`O_EXCL`,
    /// mode 600) written whole under a temporary name, then renamed into
    /// place without replacing anything, so a record is never seen half
    /// written. Returns its name and what it holds. An error means the run
    /// must not start.
    pub(super) fn write(
        &self,
        ws: &Path,
        guard: &Guard,
        cgroup: Option<&Path>,
    ) -> Result<(String, OnDisk), SandboxError> {
        let under_limit = self.entries_at_most().is_some_and(|n| n < MAX_RECORDS);
        let names = if under_limit {
            0
        } else {
            self.names().map_err(|e| lock_err(&self.path, format!("cannot list it: {e}")))?.len()
        };
        if names >= MAX_RECORDS {
            return Err(SandboxError::LimitExceeded {
                what: "git-guard records of one workspace",
                limit: MAX_RECORDS as u64,
                message: format!(
                    "{} already holds {MAX_RECORDS} records of writable runs of {} whose git guard has not run; \
                     let the writable runs of this workspace end (the last one cleans up), then run again",
                    self.path.display(),
                    ws.display()
                ),
            });
        }
        let record = OnDisk::of(ws, self.anchor.as_deref(), guard, cgroup);
        let data = serde_json::to_vec(&record)
            .map_err(|e| lock_err(&self.path, format!("cannot encode the git-guard record: {e}")))?;
        if data.len() as u64 > MAX_RECORD_BYTES {
            return Err(SandboxError::LimitExceeded {
                what: "bytes of a git-guard record",
                limit: MAX_RECORD_BYTES,
                message: format!(
                    "the git guard of this run of {} would need a record of {} bytes, more than {MAX_RECORD_BYTES}; \
                     narrow the writable areas",
                    ws.display(),
                    data.len()
                ),
            });
        }
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let stem = format!("{}-{nanos}-{}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed));
        let (tmp, name) = (format!("{TMP_PREFIX}{stem}"), format!("{PREFIX}{stem}{SUFFIX}"));
        let fail = |what: &str, e: io::Error| {
            lock_err(&self.path.join(&name), format!("cannot {what} the git-guard record: {e}"))
        };
        let fd = openat(
            &self.dir,
            tmp.as_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o600),
        )
        .map_err(|e| fail("create", e.into()))?;
        let written = File::from(fd).write_all(&data).map_err(|e| fail("write", e)).and_then(|()| {
            // The raw call (`sys`): nix offers renameat2 on glibc only, and
            // the release build is musl.
            let cstr = |s: &str| std::ffi::CString::new(s).map_err(|e| fail("name", io::Error::other(e)));
            crate::sys::rename_noreplace(&self.dir, &cstr(&tmp)?, &cstr(&name)?)
                .map_err(|e| fail("rename into place", e))
        });
        if let Err(e) = written {
            let _ = nix::unistd::unlinkat(&self.dir, tmp.as_str(), UnlinkatFlags::NoRemoveDir);
            return Err(e);
        }
        Ok((name, record))
    }

    fn read(&self, name: &str) -> Result<OnDisk, String> {
        let fd = openat(
            &self.dir,
            name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("cannot open it: {}", io::Error::from(e)))?;
        let st = fstat(&fd).map_err(|e| format!("cannot stat it: {}", io::Error::from(e)))?;
        if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFREG {
            return Err("it is not a regular file".into());
        }
        // Room for the whole record and one more byte, so that it is read in
        // one call and the end seen in a second (not five, growing).
        let size = u64::try_from(st.st_size).unwrap_or(0).min(MAX_RECORD_BYTES);
        let mut data = Vec::with_capacity(usize::try_from(size).unwrap_or(0) + 1);
        File::from(fd).take(MAX_RECORD_BYTES + 1).read_to_end(&mut data).map_err(|e| format!("cannot read it: {e}"))?;
        if data.len() as u64 > MAX_RECORD_BYTES {
            return Err(format!("it is larger than {MAX_RECORD_BYTES} bytes"));
        }
        serde_json::from_slice(&data).map_err(|e| format!("it is not a git-guard record: {e}"))
    }

    /// An ended run's record `name` (its cgroup holds nothing of its
    /// command), renamed to [`OnDisk::ended_name`], replacing the record of
    /// an earlier run that ended with the same guard. Called holding the
    /// lock shared, so no cleanup is listing or reading the records. Where
    /// the rename fails the record stays as it is (a record like any
    /// other): the name it has then is returned.
    fn fold(&self, name: String, record: &OnDisk) -> String {
        let Ok(ended) = record.ended_name() else { return name };
        if ended == name {
            return name;
        }
        match nix::fcntl::renameat(&self.dir, name.as_str(), &self.dir, ended.as_str()) {
            Ok(()) => ended,
            Err(_) => name,
        }
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        nix::unistd::unlinkat(&self.dir, name, UnlinkatFlags::NoRemoveDir).map_err(io::Error::from)
    }

    /// Before a writable run takes its shared hold: when records are there
    /// and no writable run of the workspace is going (the lock can be had
    /// exclusive at once), they are of runs whose host process was killed
    /// (or kept because they could not be read): clean them now, so that
    /// the run's plan does not take what they planted for the user's.
    /// Otherwise the last writable run to end does it.
    pub(super) fn clean_if_alone(&mut self, key: super::lock::Key<'_>, uid: u32) -> Result<Early, SandboxError> {
        let mut early: Early = (Vec::new(), Vec::new());
        // The directory opened may have been removed since (and records of
        // a killed run written into a new one): count the one named now.
        self.refresh()?;
        if self.pending() == 0 {
            return Ok(early);
        }
        if let Some(alone) = super::lock::try_exclusive(key, uid)? {
            self.refresh()?;
            let runs = self.clean(None, false, &mut early.0, &mut early.1);
            if runs > 0 {
                early.0.push(Warning::GitGuardCoveredOthers { runs });
            }
            drop(alone);
        }
        Ok(early)
    }

    /// The cleanup, holding the workspace's lock exclusive (no writable run
    /// of it is going): the git guard of every record, each with its own
    /// roots and known trees, then the record is removed. A record that
    /// cannot be read is kept and fails the cleanup (it may list paths that
    /// are then left): remove it by hand once the git dirs are checked. A
    /// record whose run's cgroup cannot be emptied (its host process was
    /// killed and the command lives on) is kept for a later cleanup, and
    /// fails this one. With `own_emptied`, the record `own`'s run found its
    /// cgroup holding nothing of its command (`run::only_scaffolding`; the
    /// leaf is removed behind the result), and its cgroup is not waited for.
    /// `own` comes with what this process wrote into it, which is used
    /// instead of reading it back (it is in the caller's private directory,
    /// as trusted as the caller's memory).
    /// Returns how many records other than `own` were processed.
    pub(super) fn clean(
        &self,
        own: Option<(&str, &OnDisk)>,
        own_emptied: bool,
        warnings: &mut Vec<Warning>,
        failures: &mut Vec<Failure>,
    ) -> usize {
        let names = match self.names() {
            Ok(n) => n,
            Err(e) => {
                failures.push((Cleanup::GitGuard, "listing the git-guard records", self.path.clone(), e));
                return 0;
            }
        };
        if names.len() > MAX_RECORDS {
            failures.push((
                Cleanup::GitGuard,
                "listing the git-guard records (more than the bound; the rest are left for the next cleanup)",
                self.path.clone(),
                io::Error::from_raw_os_error(libc::E2BIG),
            ));
        }
        let mut others = 0;
        for name in names.iter().take(MAX_RECORDS) {
            let path = self.path.join(name);
            if name.starts_with(TMP_PREFIX) {
                // Left by a host process killed while writing it, so
                // before its command could start: nothing to clean.
                let _ = self.remove(name);
                continue;
            }
            let decoded = match own {
                Some((n, record)) if n == name => record.guard(),
                _ => self.read(name).and_then(|d| d.guard()),
            };
            let own = own.map(|(n, _)| n);
            let (workspace, anchor, guard, cgroup) = match decoded {
                Ok(g) => g,
                Err(problem) => {
                    let text = format!(
                        "the git-guard record {} cannot be used ({problem}); the paths it lists may still exist: \
                         check the workspace's git dirs, then remove the record",
                        path.display()
                    );
                    failures.push((Cleanup::GitGuard, "reading a git-guard record", path, io::Error::other(text)));
                    continue;
                }
            };
            let checked = own_emptied && Some(name.as_str()) == own;
            if let Some(cg) = cgroup.filter(|_| !checked) {
                if let Err(e) = empty_cgroup(&cg, Duration::from_secs(5)) {
                    failures.push((
                        Cleanup::Cgroup,
                        "emptying the cgroup of a run whose host process was killed",
                        cg,
                        e,
                    ));
                    continue;
                }
            }
            // A record of a workspace that is no longer there (removed, and
            // its inode reused by this one; or moved): its paths name
            // nothing of this workspace.
            if super::lock::file_name(&anchor).ok().as_deref() != Some(self.lock_name.as_str()) {
                warnings.push(Warning::GitGuardRecordStale { record: path.clone(), workspace });
            } else {
                super::run::guard_git(&guard, warnings, failures);
            }
            if Some(name.as_str()) != own {
                others += 1;
            }
            if let Err(e) = self.remove(name) {
                failures.push((Cleanup::GitGuard, "removing a git-guard record", path, e));
            }
        }
        others
    }
}

/// A writable run's hold on its workspace: the lock, shared, and its
/// record once written.
pub(super) struct Hold {
    lock: Flock<File>,
    records: Records,
    /// Its record's name and what it holds, once written.
    own: Option<(String, OnDisk)>,
    /// What a cleanup before the run did (see [`Records::clean_if_alone`]).
    early: Early,
}

/// What a cleanup before a run did: its warnings and failures, for the
/// run's result.
pub(super) type Early = (Vec<Warning>, Vec<Failure>);

impl Hold {
    pub(super) fn new(lock: Flock<File>, records: Records, early: Early) -> Hold {
        Hold { lock, records, own: None, early }
    }

    /// Record what `plan`'s git guard will need, before its command starts
    /// (an error: nothing starts).
    pub(super) fn record(&mut self, plan: &Plan, cgroup: Option<&Path>) -> Result<(), SandboxError> {
        self.own = Some(self.records.write(&plan.workspace, &Guard::of(plan), cgroup)?);
        Ok(())
    }

    /// The run has ended: its record takes the name of an ended run's
    /// ([`Records::fold`]), then it lets go of the shared hold and tries
    /// the lock exclusive without waiting. Got: no writable run of the workspace is
    /// left, and this run does the git guard of every record there. Not
    /// got: another writable run is going (or cleaning up), and the last
    /// one to end does it; the result says so. A run whose cgroup could not
    /// be emptied (a `cleanup: cgroup` failure, already in `failures`) does
    /// no cleanup: its processes could plant again behind it; its record,
    /// which names its cgroup, is kept for a later cleanup, which kills and
    /// awaits that cgroup first. `emptied`: the run found its cgroup holding
    /// nothing of its command (see [`Records::clean`]).
    pub(super) fn finish(self, emptied: bool, warnings: &mut Vec<Warning>, failures: &mut Vec<Failure>) {
        let Hold { lock, mut records, own, early } = self;
        let not_emptied = failures.iter().any(|f| f.0 == Cleanup::Cgroup);
        warnings.extend(early.0);
        failures.extend(early.1);
        if not_emptied {
            return;
        }
        // Still holding the lock shared: no cleanup is reading the records.
        let own = own.map(|(name, record)| (records.fold(name, &record), record));
        let file = match lock.unlock() {
            Ok(f) => f,
            Err((_, e)) => {
                failures.push((Cleanup::GitGuard, "unlocking the workspace's lock", records.path.clone(), e.into()));
                return;
            }
        };
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(alone) => {
                // Between the unlock and this lock another run's cleanup may
                // have had it, cleaned every record (this run's too: it was
                // folded before) and removed the files: then this lock is on
                // a file no one else finds, and there is nothing left to do.
                match super::lock::still_named(records.lock_dir(), &records.lock_name, &alone) {
                    // The records' directory too is the one the name leads
                    // to now (one removed while its lock file stayed, which
                    // only a failed unlink leaves, is opened anew).
                    Ok(true) => {
                        if let Err(e) = records.refresh() {
                            failures.push((
                                Cleanup::GitGuard,
                                "opening the git-guard records again",
                                records.path.clone(),
                                io::Error::other(e.to_string()),
                            ));
                            return;
                        }
                    }
                    Ok(false) => return,
                    Err(e) => {
                        failures.push((
                            Cleanup::GitGuard,
                            "looking the workspace's lock file up again",
                            records.path.clone(),
                            e.into(),
                        ));
                        return;
                    }
                }
                let before = failures.len();
                let runs = records.clean(own.as_ref().map(|(n, r)| (n.as_str(), r)), emptied, warnings, failures);
                if runs > 0 {
                    warnings.push(Warning::GitGuardCoveredOthers { runs });
                }
                // No record left (none failed, none kept): nothing needs the
                // lock file and the records' directory until the next
                // writable run, which makes them again. Best effort: what
                // cannot be removed stays, as it always did.
                if failures.len() == before {
                    let _ = records.remove_unused();
                }
                drop(alone);
            }
            Err((_, Errno::EWOULDBLOCK)) => {
                // Under a steady load of overlapping runs every run ends
                // here, and the records are many (a listing of 120 cost
                // more than the rest of the run's bookkeeping).
                warnings.push(Warning::GitGuardDeferred { others: records.pending().saturating_sub(1) })
            }
            Err((_, e)) => failures.push((
                Cleanup::GitGuard,
                "locking the workspace exclusive for the git guard",
                records.path.clone(),
                e.into(),
            )),
        }
    }
}

/// A record's cgroup must be one a run made (`portcullis-<pid>-<n>`, see
/// `cgroup::CgroupHost::create`), named plainly: a cleanup kills what is
/// in it, and a record naming any other cgroup (`system.slice`, the
/// caller's own) is not one a run wrote, and is not acted on.
fn run_cgroup(cg: &Path) -> Result<(), String> {
    let plain = cg.components().all(|c| matches!(c, std::path::Component::RootDir | std::path::Component::Normal(_)));
    let named =
        cg.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_prefix("portcullis-")).is_some_and(|rest| {
            let mut parts = rest.split('-');
            let digits = |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
            digits(parts.next()) && digits(parts.next()) && parts.next().is_none()
        });
    if plain && named && cg.is_absolute() {
        Ok(())
    } else {
        Err(format!(
            "its cgroup {} is not one a run makes (…/portcullis-<pid>-<n>); the record was not written by a run",
            cg.display()
        ))
    }
}

/// Kill what is left in a cgroup of a run whose host process was killed
/// (the lifeline makes the helper kill it too) and wait until it is empty;
/// then remove it. A cgroup that is gone is empty.
fn empty_cgroup(cg: &Path, budget: Duration) -> io::Result<()> {
    let events = cg.join("cgroup.events");
    let populated = || match std::fs::read_to_string(&events) {
        Ok(s) => Ok(s.lines().any(|l| l == "populated 1")),
        Err(e) if super::cgroup::is_gone(&e) => Ok(false),
        Err(e) => Err(e),
    };
    if !populated()? {
        let _ = std::fs::remove_dir(cg);
        return Ok(());
    }
    let _ = std::fs::write(cg.join("cgroup.kill"), "1");
    let mut naps = super::cgroup::Naps::new(budget);
    while populated()? {
        let Some(nap) = naps.next() else { return Err(io::Error::from_raw_os_error(libc::EBUSY)) };
        std::thread::sleep(nap);
    }
    let _ = std::fs::remove_dir(cg);
    Ok(())
}

/// `#[doc(hidden)]` test support: write a record as a run of `ws` would
/// (its guard listing `git_guard`, its writable root the workspace), and
/// leave it, as a host process killed mid-run does. Returns its path.
#[doc(hidden)]
pub fn leave_record_for_tests(ws: &Path, git_guard: &[PathBuf]) -> Result<PathBuf, SandboxError> {
    let uid = nix::unistd::getuid().as_raw();
    let (dir_fd, lock_name) = super::lock::open_for_records(ws, uid)?;
    let records = Records::open(dir_fd, &super::lock::dir(uid), &lock_name, uid)?;
    let ws = std::fs::canonicalize(ws).map_err(|source| SandboxError::Path {
        what: "workspace",
        path: ws.into(),
        source,
    })?;
    let guard = Guard {
        roots: vec![ws.clone()],
        git_guard: git_guard.to_vec(),
        git_indexes: Vec::new(),
        fail_git_guard: false,
    };
    let (name, _) = records.write(&ws, &guard, None)?;
    Ok(records.path.join(name))
}

/// The records' directory of `ws` for the caller (test support: what is
/// pending there).
#[doc(hidden)]
pub fn records_dir_for_tests(ws: &Path) -> Result<PathBuf, SandboxError> {
    let uid = nix::unistd::getuid().as_raw();
    let (dir_fd, lock_name) = super::lock::open_for_records(ws, uid)?;
    Ok(Records::open(dir_fd, &super::lock::dir(uid), &lock_name, uid)?.path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_round_trip_whatever_their_bytes() {
        for raw in [&b"/ws/.git/hooks"[..], b"/ws/100%/x", b"/ws/\xff\xfe/%41", b"/ws/\xc3\xa9t\xc3\xa9"] {
            let p = PathBuf::from(OsStr::from_bytes(raw));
            let e = enc(&p);
            assert_eq!(dec(&e).ok(), Some(p), "{e}");
        }
        assert!(dec("/ws/%zz").is_err());
        assert!(dec("/ws/%4").is_err());
        assert!(dec("relative").is_err());
    }

    /// Found in review: the early cleanup counted the records of the
    /// directory it had opened, which a cleanup that left no record may
    /// have removed since; a killed run's record in the directory made
    /// anew was then not cleaned before the run (its plan would take the
    /// plant for the user's). CONTROL: the plant and the record are there
    /// before, and the removal happened.
    #[test]
    fn an_early_cleanup_counts_the_directory_named_now() {
        let uid = nix::unistd::getuid().as_raw();
        let ws = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let key = super::super::lock::Key::Workspace(ws.path());
        let (dir, name) = super::super::lock::open_for_records(ws.path(), uid).unwrap_or_else(|e| panic!("{e}"));
        let mut r = Records::open(dir, &super::super::lock::dir(uid), &name, uid).unwrap_or_else(|e| panic!("{e}"));
        // A cleanup that left no record removes both, as `Hold::finish` does.
        let alone = super::super::lock::try_exclusive(key, uid)
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("the lock is free"));
        assert!(r.remove_unused().unwrap_or_else(|e| panic!("{e}")), "removed");
        drop(alone);
        // A killed run's record lands in the directory made anew.
        let plant = ws.path().join(".git/config.worktree");
        std::fs::create_dir_all(ws.path().join(".git")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(&plant, "[core]\n").unwrap_or_else(|e| panic!("{e}"));
        let rec = leave_record_for_tests(ws.path(), std::slice::from_ref(&plant)).unwrap_or_else(|e| panic!("{e}"));
        assert!(rec.is_file() && plant.is_file());
        let (warnings, failures) = r.clean_if_alone(key, uid).unwrap_or_else(|e| panic!("{e}"));
        assert!(failures.is_empty(), "{failures:?}");
        assert!(!plant.exists() && !rec.exists(), "the killed run's plant and record are left: {warnings:?}");
        assert!(warnings.iter().any(|w| matches!(w, Warning::GitGuardCoveredOthers { runs: 1 })), "{warnings:?}");
        let _ = r.remove_unused();
    }

    #[test]
    fn only_a_runs_cgroup_is_acted_on() {
        assert!(run_cgroup(Path::new("/sys/fs/cgroup/unified/user.slice/portcullis-12-0")).is_ok());
        for bad in [
            "/sys/fs/cgroup/unified/system.slice",
            "/sys/fs/cgroup/unified/user.slice/portcullis-12-0/..",
            "/sys/fs/cgroup/unified/x/../portcullis-1-2",
            "/sys/fs/cgroup/portcullis-1",
            "/sys/fs/cgroup/portcullis-1-2-3",
            "/sys/fs/cgroup/portcullis-a-2",
        ] {
            assert!(run_cgroup(Path::new(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_record_round_trips() {
        let g = Guard {
            roots: vec!["/ws".into()],
            git_guard: vec!["/ws/.git/hooks".into(), PathBuf::from(OsStr::from_bytes(b"/ws/\xff"))],
            git_indexes: vec![GitIndex {
                index: "/ws/.git/index".into(),
                worktree: "/ws".into(),
                sha256: true,
                links: vec!["sub".into()],
            }],
            fail_git_guard: true,
        };
        let data = serde_json::to_vec(&OnDisk::of(
            Path::new("/ws/sub"),
            Some(Path::new("/ws")),
            &g,
            Some(Path::new("/cg/portcullis-7-1")),
        ))
        .unwrap_or_default();
        let back: Result<OnDisk, _> = serde_json::from_slice(&data);
        let (ws, anchor, g2, cg) =
            back.map_err(|e| e.to_string()).and_then(|d| d.guard()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ws, PathBuf::from("/ws/sub"));
        assert_eq!(anchor, PathBuf::from("/ws"));
        assert_eq!(g2, g);
        assert_eq!(cg, Some(PathBuf::from("/cg/portcullis-7-1")));
    }

    /// An ended run's record is named by what its cleanup does: the same
    /// for two runs that differ only in their pid and cgroup, different
    /// for any field the cleanup reads; still a record (`run-…`, so a
    /// build before the fold cleans it too).
    #[test]
    fn an_ended_record_is_named_by_what_it_cleans() {
        let g = Guard {
            roots: vec!["/ws".into()],
            git_guard: vec!["/ws/.git/hooks".into()],
            git_indexes: vec![GitIndex {
                index: "/ws/.git/index".into(),
                worktree: "/ws".into(),
                sha256: false,
                links: vec!["sub".into()],
            }],
            fail_git_guard: false,
        };
        let name = |g: &Guard, ws: &str, anchor: Option<&str>, cg: Option<&str>, pid: u32| {
            let mut d = OnDisk::of(Path::new(ws), anchor.map(Path::new), g, cg.map(Path::new));
            d.pid = pid;
            d.ended_name().unwrap_or_else(|e| panic!("{e}"))
        };
        let base = name(&g, "/ws", None, Some("/cg/portcullis-1-1"), 1);
        assert!(is_record(&base) && base.starts_with("run-ended-"), "{base}");
        assert_eq!(base, name(&g, "/ws", None, Some("/cg/portcullis-2-9"), 2));
        assert_eq!(base, name(&g, "/ws", None, None, 3));
        let mut differ = vec![name(&g, "/ws2", None, None, 1), name(&g, "/ws/sub", Some("/ws"), None, 1)];
        let mut each = |f: &dyn Fn(&mut Guard)| {
            let mut h = g.clone();
            f(&mut h);
            differ.push(name(&h, "/ws", None, None, 1));
        };
        each(&|h| h.roots.push("/ws/target".into()));
        each(&|h| h.git_guard.push("/ws/.git/config.worktree".into()));
        each(&|h| h.git_indexes[0].links.clear());
        each(&|h| h.git_indexes[0].sha256 = true);
        each(&|h| h.git_indexes[0].index = "/ws/.git/index2".into());
        each(&|h| h.git_indexes.clear());
        each(&|h| h.fail_git_guard = true);
        for (i, d) in differ.iter().enumerate() {
            assert_ne!(*d, base, "change {i}");
        }
    }

    /// On tmpfs the directory's size bounds its entries, exactly; the count
    /// takes only records. Anywhere else there is no bound (the listing
    /// decides).
    #[test]
    fn a_records_directory_on_tmpfs_is_sized_by_its_entries() {
        use std::os::unix::fs::PermissionsExt;
        let uid = nix::unistd::getuid().as_raw();
        let open = |base: &str| {
            let top = tempfile::Builder::new().prefix("records-").tempdir_in(base).unwrap_or_else(|e| panic!("{e}"));
            let fd = openat(nix::fcntl::AT_FDCWD, top.path(), OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty())
                .unwrap_or_else(|e| panic!("{e}"));
            let r = Records::open(fd, top.path(), "ws-1-2.lock", uid).unwrap_or_else(|e| panic!("{e}"));
            std::fs::set_permissions(&r.path, std::fs::Permissions::from_mode(0o700)).unwrap_or_else(|e| panic!("{e}"));
            (top, r)
        };
        if !Path::new("/dev/shm").is_dir() {
            eprintln!("SKIPPED: no /dev/shm here");
            return;
        }
        let (_top, r) = open("/dev/shm");
        assert!(r.tmpfs, "/dev/shm is not tmpfs here");
        assert_eq!((r.entries_at_most(), r.count()), (Some(0), 0));
        let mut made = 0;
        for name in ["run-1-2-3.json", ".tmp-run-4-5-6", "run-7-8-9.json", "stray", "run-a.json"] {
            std::fs::write(r.path.join(name), b"{}").unwrap_or_else(|e| panic!("{e}"));
            made += 1;
            assert_eq!(r.entries_at_most(), Some(made), "after {name}");
        }
        std::fs::create_dir(r.path.join("sub")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.entries_at_most(), Some(made + 1));
        assert_eq!(r.count(), 3);
        assert_eq!(r.names().unwrap_or_default().len(), 4, "the records and the one being written");
        for name in ["run-1-2-3.json", ".tmp-run-4-5-6", "run-7-8-9.json", "stray", "run-a.json"] {
            std::fs::remove_file(r.path.join(name)).unwrap_or_else(|e| panic!("{e}"));
        }
        std::fs::remove_dir(r.path.join("sub")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((r.entries_at_most(), r.count()), (Some(0), 0));
        // The source tree: wherever the tests are built, a disk (CI's clone).
        let (_top2, elsewhere) = open(env!("CARGO_MANIFEST_DIR"));
        if elsewhere.tmpfs {
            eprintln!("SKIPPED (its second half): the source tree is on tmpfs too");
        } else {
            assert_eq!(elsewhere.entries_at_most(), None);
        }
    }
}
