//! The workspace's `list_dir`: the entries below a directory of the jail,
//! walked by descriptor, bounded in depth and count.
//!
//! - Every directory is opened relative to its parent's descriptor with
//!   `openat(O_DIRECTORY | O_NOFOLLOW)`, starting from the workspace root's
//!   descriptor; the start path is walked the same way, one component at a
//!   time, `..` refused. Nothing is opened by a path string below the root,
//!   so a directory swapped for a link mid-walk fails (`ELOOP`/`ENOTDIR`)
//!   instead of leading out.
//! - A symbolic link is reported with its target (read with `readlinkat`)
//!   and never followed: what it points to is never listed.
//! - A path the deny globs match is not listed, not walked into, and
//!   counted (`skipped_denied`): the caller learns that something was
//!   hidden, not what. A start path they match is refused.
//! - The ignore globs (by default `.git` and `node_modules`, the policy's
//!   `list.ignore`) hide entries the same way, counted apart
//!   (`skipped_ignored`); they are a convenience, not a boundary.
//! - A directory that cannot be opened (no permission) is listed, not
//!   walked into, and counted (`skipped_unreadable`); the listing goes on.
//! - Depth 1 lists the directory's own entries; each level more goes one
//!   directory deeper. The output is sorted (a directory's entries by
//!   name, each followed by what lies below it) and stops at `max_entries`
//!   (`truncated`).

use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{open, openat, readlinkat, AtFlags, OFlag};
use nix::sys::stat::{fstatat, Mode, SFlag};
use serde::Serialize;

use crate::path::DenyGlobs;
use crate::policy::ListPolicy;

/// What a listing is asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListOptions {
    /// Levels listed (1: the directory's own entries).
    pub depth: u32,
    /// Most entries returned.
    pub max_entries: u32,
    /// Globs hidden from the listing (the [`DenyGlobs`] syntax: a name at
    /// any depth, or a path relative to the workspace with `/`).
    pub ignore: Vec<String>,
}

impl ListOptions {
    /// The policy's defaults: its depth, its entry cap, its ignore globs.
    pub fn from_policy(policy: &ListPolicy) -> ListOptions {
        ListOptions { depth: policy.max_depth, max_entries: policy.max_entries, ignore: policy.ignore.clone() }
    }

    /// These options within the policy's bounds: depth and entry cap no
    /// more than its own, at least 1.
    pub fn within(mut self, policy: &ListPolicy) -> ListOptions {
        self.depth = self.depth.clamp(1, policy.max_depth.max(1));
        self.max_entries = self.max_entries.clamp(1, policy.max_entries.max(1));
        self
    }
}

impl Default for ListOptions {
    fn default() -> Self {
        ListOptions::from_policy(&ListPolicy::default())
    }
}

/// What an entry is (its own type: a link is never followed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// One entry of a listing. Serialized (the MCP tool's result), a path that
/// is not UTF-8 is written lossily (U+FFFD where its bytes do not decode,
/// as `grep` and `glob` write theirs): one such name made a whole listing
/// fail to encode. The Rust value keeps the bytes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ListEntry {
    /// Its path, relative to the workspace root.
    #[serde(serialize_with = "lossy")]
    pub path: PathBuf,
    /// What it is.
    pub kind: EntryKind,
    /// Its size in bytes (`st_size`; a link's is its target's length).
    pub size: u64,
    /// A link's target as stored (never followed).
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "lossy_some")]
    pub target: Option<PathBuf>,
}

fn lossy<S: serde::Serializer>(p: &Path, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&p.to_string_lossy())
}

fn lossy_some<S: serde::Serializer>(p: &Option<PathBuf>, s: S) -> Result<S::Ok, S::Error> {
    match p {
        Some(p) => s.serialize_some(&*p.to_string_lossy()),
        None => s.serialize_none(),
    }
}

/// A listing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ListResult {
    /// The entries, sorted.
    pub entries: Vec<ListEntry>,
    /// The entry cap stopped the listing.
    pub truncated: bool,
    /// Entries hidden by the deny globs.
    pub skipped_denied: usize,
    /// Entries hidden by the ignore globs.
    pub skipped_ignored: usize,
    /// Directories listed but not walked into: they could not be opened
    /// (or read).
    pub skipped_unreadable: usize,
}

/// Why a listing failed.
#[derive(Debug, thiserror::Error)]
pub enum ListError {
    /// The start path leaves the workspace (`..`, or absolute elsewhere).
    #[error("{}: outside the workspace {}; list a path below it", path.display(), root.display())]
    Outside {
        /// The path asked for.
        path: PathBuf,
        /// The workspace root.
        root: PathBuf,
    },
    /// The start path (or a directory above it) is denied.
    #[error("{}: denied by the policy's deny glob {glob:?}", path.display())]
    Denied {
        /// The path.
        path: PathBuf,
        /// The glob.
        glob: String,
    },
    /// An ignore glob does not compile.
    #[error("list ignore glob: {0}")]
    BadIgnore(String),
    /// The start path (or a directory on the way) is a symbolic link, which
    /// a listing does not follow.
    #[error("{}", link_message(path, *outside))]
    Link {
        /// The link, relative to the workspace.
        path: PathBuf,
        /// It leads outside the workspace (or nowhere that can be resolved
        /// inside it).
        outside: bool,
    },
    /// The start path could not be opened as a directory without following
    /// a link (missing, a file, no permission).
    #[error("list {}: {source}{}", path.display(), hint(source))]
    Open {
        /// The path, relative to the workspace.
        path: PathBuf,
        /// The error (`ENOENT`, `ENOTDIR`, `ELOOP` for a link, `EACCES`).
        source: std::io::Error,
    },
}

fn link_message(path: &Path, outside: bool) -> String {
    if outside {
        format!("{}: a symbolic link that leads outside the workspace; list a path below it", path.display())
    } else {
        format!(
            "list {}: a symbolic link, which a listing does not follow; list the directory it leads to by its own path",
            path.display()
        )
    }
}

fn hint(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::ELOOP) => " (a symbolic link: not followed; list its target's real path)",
        Some(libc::ENOTDIR) => " (not a directory; read it instead)",
        Some(libc::ENOENT) => " (it does not exist)",
        _ => "",
    }
}

fn io(e: Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e as i32)
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

/// List `rel` (relative to `root`, or absolute below it) of the workspace
/// whose real path is `root` (absolute, link-free: the deny globs are
/// matched against `root` joined with each entry's path), hiding what
/// `deny` and `opts.ignore` match. Bound `opts` by the policy first
/// ([`ListOptions::within`]).
pub fn list_dir(root: &Path, deny: &DenyGlobs, rel: &Path, opts: &ListOptions) -> Result<ListResult, ListError> {
    let ignore = DenyGlobs::new(&opts.ignore).map_err(ListError::BadIgnore)?;
    let outside = || ListError::Outside { path: rel.to_path_buf(), root: root.to_path_buf() };
    let rel = if rel.is_absolute() { rel.strip_prefix(root).map_err(|_| outside())? } else { rel };
    let open_err = |path: &Path, e: Errno| ListError::Open { path: path.to_path_buf(), source: io(e) };
    let mut fd = open(root, dir_flags(), Mode::empty()).map_err(|e| open_err(Path::new(""), e))?;
    let mut start = PathBuf::new();
    for c in rel.components() {
        match c {
            Component::CurDir => continue,
            Component::Normal(name) => {
                start.push(name);
                if let Some(g) = deny.matching(root, &root.join(&start)) {
                    return Err(ListError::Denied { path: start, glob: g.to_string() });
                }
                fd = match openat(fd.as_fd(), name, dir_flags(), Mode::empty()) {
                    Ok(next) => next,
                    // `O_DIRECTORY | O_NOFOLLOW` on a link answers ENOTDIR:
                    // say ELOOP (a link, not followed) where it is one.
                    Err(Errno::ENOTDIR) if is_link(&fd, name) => {
                        // Where it leads decides the answer: outside is a
                        // path escape, as for every other tool.
                        let inside = std::fs::canonicalize(root.join(&start)).is_ok_and(|real| real.starts_with(root));
                        return Err(ListError::Link { path: start, outside: !inside });
                    }
                    Err(e) => return Err(open_err(&start, e)),
                };
            }
            _ => return Err(outside()),
        }
    }
    let mut walk = Walk { root, deny, ignore: &ignore, max: opts.max_entries as usize, out: ListResult::default() };
    if walk.dir(&fd, &start, opts.depth.max(1)).is_err() {
        // The start directory itself could not be read.
        walk.out.skipped_unreadable += 1;
    }
    Ok(walk.out)
}

fn is_link(dir: &OwnedFd, name: &std::ffi::OsStr) -> bool {
    fstatat(dir.as_fd(), name, AtFlags::AT_SYMLINK_NOFOLLOW)
        .is_ok_and(|st| SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFLNK)
}

/// The entry cap was reached.
struct Full;

struct Walk<'a> {
    root: &'a Path,
    deny: &'a DenyGlobs,
    ignore: &'a DenyGlobs,
    max: usize,
    out: ListResult,
}

impl Walk<'_> {
    /// List the directory open as `fd` (at `at`, relative to the root),
    /// `levels` levels deep. `Err(None)`: it could not be read.
    fn dir(&mut self, fd: &OwnedFd, at: &Path, levels: u32) -> Result<(), Option<Full>> {
        let names = read_names(fd).map_err(|_| None)?;
        for name in names {
            let path = at.join(&name);
            let abs = self.root.join(&path);
            if self.deny.matching(self.root, &abs).is_some() {
                self.out.skipped_denied += 1;
                continue;
            }
            if self.ignore.matching(self.root, &abs).is_some() {
                self.out.skipped_ignored += 1;
                continue;
            }
            let st = match fstatat(fd.as_fd(), name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                // Removed since the directory was read.
                Err(Errno::ENOENT) => continue,
                Err(_) => {
                    self.out.skipped_unreadable += 1;
                    continue;
                }
            };
            let kind = match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
                SFlag::S_IFREG => EntryKind::File,
                SFlag::S_IFDIR => EntryKind::Dir,
                SFlag::S_IFLNK => EntryKind::Symlink,
                _ => EntryKind::Other,
            };
            let target = match kind {
                EntryKind::Symlink => readlinkat(fd.as_fd(), name.as_os_str()).ok().map(PathBuf::from),
                _ => None,
            };
            if self.out.entries.len() >= self.max {
                self.out.truncated = true;
                return Err(Some(Full));
            }
            self.out.entries.push(ListEntry {
                path: path.clone(),
                kind,
                size: u64::try_from(st.st_size).unwrap_or(0),
                target,
            });
            if kind == EntryKind::Dir && levels > 1 {
                match openat(fd.as_fd(), name.as_os_str(), dir_flags(), Mode::empty()) {
                    Ok(sub) => match self.dir(&sub, &path, levels - 1) {
                        Ok(()) => {}
                        Err(Some(Full)) => return Err(Some(Full)),
                        Err(None) => self.out.skipped_unreadable += 1,
                    },
                    Err(_) => self.out.skipped_unreadable += 1,
                }
            }
        }
        Ok(())
    }
}

/// The names in the directory open as `fd` (without `.` and `..`), sorted
/// by their bytes.
fn read_names(fd: &OwnedFd) -> nix::Result<Vec<OsString>> {
    let dup = fd.try_clone().map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EBADF)))?;
    let mut d = nix::dir::Dir::from_fd(dup)?;
    let mut names = Vec::new();
    for e in d.iter() {
        let e = e?;
        let n = e.file_name().to_bytes();
        if n == b"." || n == b".." {
            continue;
        }
        names.push(OsString::from(std::ffi::OsStr::from_bytes(n)));
    }
    names.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
    Ok(names)
}
