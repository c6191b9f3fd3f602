//! The workspace's file operations: read windows, whole-file writes, exact
//! edits, directories, removal; each through the jail's judgement, then a
//! directory capability of the root that holds the path.
//!
//! A call goes in two steps. [`Files::judge`] asks the policy's jail about
//! the path (resolved as the kernel would, deny globs applied) and returns
//! a [`Judged`] path: the real path, link-free, and the root it lies in.
//! Whoever wires the gate and the audit does so between the two steps. The
//! operation then opens that real path relative to the root's descriptor
//! with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS |
//! RESOLVE_NO_SYMLINKS)` (or the equivalent walk, see [`crate::path::dir`]):
//! since the judged path has no link in it, any link met on the way was
//! swapped in after the judgement, and the call fails
//! ([`FileError::Changed`]) instead of following it. Nothing is ever opened
//! by the path string the caller gave.
//!
//! Memory: a read streams the file once through a 64 KiB buffer, hashing
//! every byte and counting lines; it keeps only the window it returns, and
//! of the line the byte cap cuts no more than the cap allows (plus one
//! partial character). A 10 MB file or a 10 MB line under a 64 KB cap costs
//! about 64 KB + 64 KB. An edit holds the file and its new version
//! (twice its size): it must see the whole file to find the old text.
//! Every read takes the file as its `fstat` at the open found it: no more
//! than that size, so a file that grows while read (a log a background job
//! writes) ends the read where it stood (`r0351`).
//!
//! Text: a file with a NUL byte in its first 8 KiB is binary and a read
//! answers [`FileError::Binary`] (no window). Other bytes that are not UTF-8
//! (Latin-1, a damaged file) are shown as U+FFFD and the window says
//! `lossy`; the hash stays that of the real bytes, and edits match the real
//! bytes, so such a file can still be edited where it is UTF-8.
//!
//! Writes, edits and removes of one real path are serialized: of two
//! edits pinned to the same hash, the second sees the first's result and
//! is refused as stale.

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

use serde::Serialize;
use sha2::{Digest, Sha256};
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

use crate::path::dir::{Dir, Kind, Links, NotRegular, Resolution};
use crate::policy::{PathAccess, PathJail, PolicyError};

/// The most edits one [`Files::multi_edit`] takes.
pub const MAX_EDITS: usize = 100;

/// The window's length when the caller gives none.
pub const DEFAULT_LINES: usize = 2000;

/// A NUL in this many first bytes makes a file binary.
pub const BINARY_SNIFF: usize = 8192;

/// Why a file operation failed. Refusals of the edit kind
/// (`NotFound`, `NotUnique`, `StaleHash`) change nothing and say what to do.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The jail refused the path (outside, denied), or could not resolve it.
    #[error(transparent)]
    Jail(#[from] PolicyError),
    /// The path was judged for reading and a write was attempted with it.
    #[error("{}: judged for reading, not writing: judge it with PathAccess::Write", path.display())]
    NotJudgedForWrite {
        /// The path.
        path: PathBuf,
    },
    /// The old text of an edit does not occur in the file.
    #[error("{}{}: the old text was not found (whitespace and line ends count)", path.display(), at(*edit_index))]
    NotFound {
        /// The file.
        path: PathBuf,
        /// Which edit of a multi-edit (from 0).
        edit_index: Option<usize>,
    },
    /// The old text occurs more than once and `replace_all` was not set.
    #[error("{}{}: the old text occurs {count} times; add surrounding context to make it unique, or set replace_all", path.display(), at(*edit_index))]
    NotUnique {
        /// The file.
        path: PathBuf,
        /// How many times it occurs.
        count: usize,
        /// Which edit of a multi-edit (from 0).
        edit_index: Option<usize>,
    },
    /// The file changed since it was read (its hash is not the expected one).
    #[error("{}: the file changed since it was read (hash {actual}, expected {expected})", path.display())]
    StaleHash {
        /// The file.
        path: PathBuf,
        /// The hash the caller pinned.
        expected: String,
        /// The file's hash now.
        actual: String,
    },
    /// An edit that cannot be applied as given (empty old text, old equal
    /// to new).
    #[error("{}{}: {why}", path.display(), at(*edit_index))]
    InvalidEdit {
        /// The file.
        path: PathBuf,
        /// Which edit of a multi-edit (from 0).
        edit_index: Option<usize>,
        /// What is wrong with it.
        why: String,
    },
    /// More edits than [`MAX_EDITS`] in one call.
    #[error("{}: {count} edits in one call; at most {MAX_EDITS}: split them", path.display())]
    TooManyEdits {
        /// The file.
        path: PathBuf,
        /// How many were given.
        count: usize,
    },
    /// The file holds a NUL byte in its first [`BINARY_SNIFF`] bytes.
    #[error("{}: a binary file ({total_bytes} bytes, a NUL byte in the first {BINARY_SNIFF}): not shown or edited as text", path.display())]
    Binary {
        /// The file.
        path: PathBuf,
        /// Its size.
        total_bytes: u64,
    },
    /// The path is a FIFO, a socket, a device (or a directory where a file
    /// was wanted): refused without opening it for real.
    #[error("{}: {}, not a regular file: refused", path.display(), kind.describe())]
    NotRegular {
        /// The path.
        path: PathBuf,
        /// What it is.
        kind: Kind,
    },
    /// The path changed between the judgement and the operation (a link
    /// appeared on the way, or it leads out of its root now): nothing was
    /// read or written. Judge it again.
    #[error("{op} {}: the path changed after it was judged (a symbolic link on the way now, {source}); nothing was done: judge it again", path.display())]
    Changed {
        /// The operation.
        op: &'static str,
        /// The real path judged.
        path: PathBuf,
        /// What the kernel said (`ELOOP`, `EXDEV`; `EAGAIN` when the file was
        /// replaced between its type check and its opening).
        source: io::Error,
    },
    /// The operation failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// The operation.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
}

fn at(edit_index: Option<usize>) -> String {
    edit_index.map(|i| format!(" (edit {i})")).unwrap_or_default()
}

/// What part of a file to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadOptions {
    /// The first line (from 1; 0 is read as 1).
    pub offset: usize,
    /// How many lines at most ([`DEFAULT_LINES`] when `None`).
    pub limit: Option<usize>,
    /// A ceiling on the bytes of the returned `content`, line-number
    /// prefixes and newlines included (`None`: no ceiling).
    pub max_bytes: Option<usize>,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions { offset: 1, limit: None, max_bytes: None }
    }
}

/// A numbered window of a text file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ReadWindow {
    /// The lines, `cat -n` style: the line number right-aligned in six
    /// columns, a TAB, the line, and its newline if it has one.
    pub content: String,
    /// The first line asked for (from 1).
    pub start_line: usize,
    /// The last line included, perhaps partly (`start_line - 1` when none).
    pub end_line: usize,
    /// The file's lines (a last line without a newline counts).
    pub total_lines: usize,
    /// The file's size in bytes.
    pub total_bytes: u64,
    /// Something after `content` was withheld: later lines, or the tail of
    /// `end_line`.
    pub truncated: bool,
    /// The byte ceiling cut something.
    pub bytes_capped: bool,
    /// Some bytes in the window were not UTF-8 and are shown as U+FFFD
    /// (the file is text, in another encoding or damaged; `hash` is still of
    /// the real bytes, and an edit matches the real bytes).
    pub lossy: bool,
    /// The SHA-256 of the whole file (64 lowercase hex digits): a valid
    /// `expect_hash` for an edit whatever the window.
    pub hash: String,
}

/// One exact replacement.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize, Serialize)]
pub struct Edit {
    /// The text to find: exactly, and once unless `replace_all`.
    pub old: String,
    /// What replaces it.
    pub new: String,
    /// Replace every occurrence.
    #[serde(default)]
    pub replace_all: bool,
}

/// What an edit did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Edited {
    /// How many occurrences were replaced (all edits together).
    pub replacements: usize,
    /// The file's new size.
    pub bytes: u64,
    /// The SHA-256 of the new content.
    pub hash: String,
}

/// What a whole-file write did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Written {
    /// Bytes written.
    pub bytes: u64,
    /// Whether the file is new.
    pub created: bool,
    /// The SHA-256 of the content.
    pub hash: String,
}

/// A path the jail accepted: what was asked, where it really is, and the
/// root it lies in. Only [`Files::judge`] makes one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judged {
    asked: PathBuf,
    real: PathBuf,
    root: usize,
    rel: PathBuf,
    access: PathAccess,
}

impl Judged {
    /// A judged path of another backend (the mock's, a host's): `rel` is `real`
    /// below the backend's root number `root`.
    pub fn new(asked: PathBuf, real: PathBuf, root: usize, rel: PathBuf, access: PathAccess) -> Judged {
        Judged { asked, real, root, rel, access }
    }

    /// The path relative to the root it lies in.
    pub fn rel(&self) -> &Path {
        &self.rel
    }

    /// The path as the caller gave it.
    pub fn asked(&self) -> &Path {
        &self.asked
    }

    /// The real path the jail judged (link-free).
    pub fn real(&self) -> &Path {
        &self.real
    }

    /// What it was judged for.
    pub fn access(&self) -> PathAccess {
        self.access
    }
}

/// The file operations of one jail. Cheap to clone (shared state).
#[derive(Clone, Debug)]
pub struct Files {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    jail: PathJail,
    /// Each root the jail accepts paths in, opened once.
    roots: Vec<(PathBuf, Dir)>,
    locks: Mutex<HashMap<PathBuf, Weak<AsyncMutex<()>>>>,
}

/// The SHA-256 of `bytes` as 64 lowercase hex digits (the `hash` of a
/// read, the `expect_hash` of an edit).
pub fn sha256_hex(bytes: &[u8]) -> String {
    crate::hex::sha256_hex(bytes)
}

/// An error of `op` at `path`, named by what it means.
fn fail(op: &'static str, path: &Path, e: io::Error) -> FileError {
    let path = path.to_path_buf();
    if let Some(nr) = e.get_ref().and_then(|i| i.downcast_ref::<NotRegular>()) {
        return FileError::NotRegular { path, kind: nr.kind };
    }
    match e.raw_os_error() {
        Some(libc::ELOOP | libc::EXDEV | libc::EAGAIN) => FileError::Changed { op, path, source: e },
        _ => FileError::Io { op, path, source: e },
    }
}

impl Files {
    /// The file operations of `jail`: opens each of its roots (the
    /// workspace, the write grants, the readable roots) once, resolving
    /// with `openat2` where the kernel has it.
    pub fn new(jail: PathJail) -> Result<Files, FileError> {
        Files::build(jail, None)
    }

    /// The same, resolving with `resolution` (tests run both).
    pub fn with_resolution(jail: PathJail, resolution: Resolution) -> Result<Files, FileError> {
        Files::build(jail, Some(resolution))
    }

    fn build(jail: PathJail, resolution: Option<Resolution>) -> Result<Files, FileError> {
        let mut roots = Vec::new();
        for r in jail.read_roots() {
            if roots.iter().any(|(p, _)| p == r) {
                continue;
            }
            let dir = Dir::open(r).map_err(|e| fail("open root", r, e))?.with_links(Links::Refuse);
            let dir = match resolution {
                Some(res) => dir.with_resolution(res),
                None => dir,
            };
            roots.push((r.to_path_buf(), dir));
        }
        Ok(Files { inner: Arc::new(Inner { jail, roots, locks: Mutex::new(HashMap::new()) }) })
    }

    /// The jail.
    pub fn jail(&self) -> &PathJail {
        &self.inner.jail
    }

    /// Ask the jail about `path` (relative to the workspace, or absolute)
    /// for `access`.
    pub fn judge(&self, path: &Path, access: PathAccess) -> Result<Judged, FileError> {
        let real = self.inner.jail.resolve(path, access)?;
        self.judged(path, real, access)
    }

    /// Ask the jail about removing `path`: a link is removed itself, not
    /// what it points to, so its target is judged as for any write (a
    /// link whose own name is denied is refused there) and the link itself
    /// is what the result names.
    pub fn judge_remove(&self, path: &Path) -> Result<Judged, FileError> {
        let jail = &self.inner.jail;
        let real = jail.resolve(path, PathAccess::Write)?;
        let bytes = path.as_os_str().as_encoded_bytes();
        let trailing = bytes.ends_with(b"/") || bytes.ends_with(b"/.") || bytes == b".";
        let abs = if path.is_absolute() { path.to_path_buf() } else { jail.root().join(path) };
        let is_link = std::fs::symlink_metadata(&abs).is_ok_and(|m| m.file_type().is_symlink());
        let real = match path.file_name() {
            Some(name) if is_link && !trailing => {
                let dir = match path.parent() {
                    Some(p) if !p.as_os_str().is_empty() => jail.resolve(p, PathAccess::Write)?,
                    _ => jail.root().to_path_buf(),
                };
                dir.join(name)
            }
            _ => real,
        };
        self.judged(path, real, PathAccess::Write)
    }

    fn judged(&self, asked: &Path, real: PathBuf, access: PathAccess) -> Result<Judged, FileError> {
        let jail = &self.inner.jail;
        let eligible: Vec<&Path> = match access {
            PathAccess::Write => jail.write_roots().collect(),
            PathAccess::Read => jail.read_roots().collect(),
        };
        let root = self
            .inner
            .roots
            .iter()
            .enumerate()
            .filter(|(_, (p, _))| eligible.contains(&p.as_path()) && real.starts_with(p))
            .max_by_key(|(_, (p, _))| p.components().count())
            .map(|(i, _)| i);
        let Some(root) = root else {
            return Err(PolicyError::PathEscape {
                path: asked.to_path_buf(),
                why: format!("{} lies in none of the jail's roots", real.display()),
            }
            .into());
        };
        let rel = real.strip_prefix(&self.inner.roots[root].0).map(Path::to_path_buf).unwrap_or_default();
        Ok(Judged { asked: asked.to_path_buf(), real, root, rel, access })
    }

    fn dir(&self, j: &Judged) -> &Dir {
        &self.inner.roots[j.root].1
    }

    fn writable(j: &Judged) -> Result<(), FileError> {
        match j.access {
            PathAccess::Write => Ok(()),
            PathAccess::Read => Err(FileError::NotJudgedForWrite { path: j.asked.clone() }),
        }
    }

    /// The lock of one real path: held across a read-modify-write.
    async fn lock(&self, real: &Path) -> OwnedMutexGuard<()> {
        let m = {
            let mut map = self.inner.locks.lock().unwrap_or_else(|p| p.into_inner());
            match map.get(real).and_then(Weak::upgrade) {
                Some(m) => m,
                None => {
                    if map.len() > 64 {
                        map.retain(|_, w| w.strong_count() > 0);
                    }
                    let m = Arc::new(AsyncMutex::new(()));
                    map.insert(real.to_path_buf(), Arc::downgrade(&m));
                    m
                }
            }
        };
        m.lock_owned().await
    }

    /// Run `f` on a blocking thread (file I/O must not stall the runtime).
    async fn blocking<T: Send + 'static>(
        &self,
        op: &'static str,
        j: &Judged,
        f: impl FnOnce(&Files, &Judged) -> Result<T, FileError> + Send + 'static,
    ) -> Result<T, FileError> {
        let (me, jj) = (self.clone(), j.clone());
        tokio::task::spawn_blocking(move || f(&me, &jj)).await.unwrap_or_else(|e| {
            Err(FileError::Io {
                op,
                path: j.asked.clone(),
                source: io::Error::other(format!("the worker failed: {e}")),
            })
        })
    }

    /// Read a numbered window of the text file `j` (see [`ReadWindow`]).
    pub async fn read_file(&self, j: &Judged, opts: ReadOptions) -> Result<ReadWindow, FileError> {
        self.blocking("read", j, move |me, j| {
            let f = me.dir(j).open_file(&j.rel).map_err(|e| fail("read", &j.real, e))?;
            let size = f.metadata().map(|m| m.len()).unwrap_or(0);
            // No more than the size at the open: a file that grows while it
            // is read does not make the read endless.
            read_window(snapshot(f, size), size, opts, &j.real)
        })
        .await
    }

    /// Write the whole file `j` (created, with missing parent directories,
    /// or replaced atomically, its mode kept).
    pub async fn write_file(&self, j: &Judged, data: Vec<u8>) -> Result<Written, FileError> {
        Files::writable(j)?;
        let _guard = self.lock(&j.real).await;
        self.blocking("write", j, move |me, j| {
            let dir = me.dir(j);
            let created = dir.kind(&j.rel).map_err(|e| fail("write", &j.real, e))?.is_none();
            dir.write_atomic(&j.rel, &data, true).map_err(|e| fail("write", &j.real, e))?;
            Ok(Written { bytes: data.len() as u64, created, hash: sha256_hex(&data) })
        })
        .await
    }

    /// Replace `edit.old` by `edit.new` in the file `j`: exactly, and once
    /// unless `replace_all`; with `expect_hash`, only if the file is still
    /// the one that hash names.
    pub async fn edit_file(&self, j: &Judged, edit: Edit, expect_hash: Option<String>) -> Result<Edited, FileError> {
        self.edit(j, vec![edit], expect_hash, false).await
    }

    /// Apply `edits` in order, each to the result of the ones before: all
    /// of them or none (the failing one is named by `edit_index`).
    pub async fn multi_edit(
        &self,
        j: &Judged,
        edits: Vec<Edit>,
        expect_hash: Option<String>,
    ) -> Result<Edited, FileError> {
        if edits.len() > MAX_EDITS {
            return Err(FileError::TooManyEdits { path: j.asked.clone(), count: edits.len() });
        }
        self.edit(j, edits, expect_hash, true).await
    }

    async fn edit(
        &self,
        j: &Judged,
        edits: Vec<Edit>,
        expect: Option<String>,
        multi: bool,
    ) -> Result<Edited, FileError> {
        Files::writable(j)?;
        let _guard = self.lock(&j.real).await;
        self.blocking("edit", j, move |me, j| {
            let dir = me.dir(j);
            let f = dir.open_file(&j.rel).map_err(|e| fail("edit", &j.real, e))?;
            let size = f.metadata().map_err(|e| fail("edit", &j.real, e))?.len();
            let mut content = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
            snapshot(f, size).read_to_end(&mut content).map_err(|e| fail("edit", &j.real, e))?;
            let (content, edited) = apply_edits(content, &edits, expect, multi, &j.real)?;
            dir.write_atomic(&j.rel, &content, false).map_err(|e| fail("edit", &j.real, e))?;
            Ok(edited)
        })
        .await
    }

    /// Make the directory `j` and any missing parents.
    pub async fn mkdir(&self, j: &Judged) -> Result<(), FileError> {
        Files::writable(j)?;
        self.blocking("mkdir", j, |me, j| me.dir(j).create_dir_all(&j.rel).map_err(|e| fail("mkdir", &j.real, e))).await
    }

    /// Remove the file, link or empty directory `j` (judge it with
    /// [`Files::judge_remove`]).
    pub async fn remove(&self, j: &Judged) -> Result<(), FileError> {
        Files::writable(j)?;
        let _guard = self.lock(&j.real).await;
        self.blocking("remove", j, |me, j| {
            if j.rel.as_os_str().is_empty() {
                return Err(FileError::Io {
                    op: "remove",
                    path: j.real.clone(),
                    source: io::Error::other("a root of the jail is not removed"),
                });
            }
            me.dir(j).remove(&j.rel).map_err(|e| fail("remove", &j.real, e))
        })
        .await
    }

    /// Whether `j` is a directory (its own type, through the root's
    /// descriptor; a link is not one).
    pub fn is_dir(&self, j: &Judged) -> Result<bool, FileError> {
        self.dir(j).kind(&j.rel).map(|k| k == Some(Kind::Dir)).map_err(|e| fail("stat", &j.real, e))
    }

    /// Whether `j` exists (a link counts, whatever it points to).
    pub async fn exists(&self, j: &Judged) -> Result<bool, FileError> {
        self.blocking("exists", j, |me, j| {
            me.dir(j).kind(&j.rel).map(|k| k.is_some()).map_err(|e| fail("exists", &j.real, e))
        })
        .await
    }
}

/// `content` with `edits` applied in order, each to the result of the ones
/// before (all or none), after checking it against `expect` (the hash the
/// caller pinned); `multi` names the failing edit's index. Every backend
/// edits through this one function.
pub(crate) fn apply_edits(
    mut content: Vec<u8>,
    edits: &[Edit],
    expect: Option<String>,
    multi: bool,
    path: &Path,
) -> Result<(Vec<u8>, Edited), FileError> {
    // A file a read refuses as binary is not edited as text either: the
    // caller could not have seen what it replaces.
    if content[..content.len().min(BINARY_SNIFF)].contains(&0) {
        return Err(FileError::Binary { path: path.to_path_buf(), total_bytes: content.len() as u64 });
    }
    if let Some(expected) = expect {
        let actual = sha256_hex(&content);
        if !actual.eq_ignore_ascii_case(expected.trim()) {
            return Err(FileError::StaleHash { path: path.to_path_buf(), expected, actual });
        }
    }
    let mut replacements = 0;
    for (i, e) in edits.iter().enumerate() {
        let idx = multi.then_some(i);
        let (next, n) = apply(&content, e).map_err(|k| k.into_error(path, idx))?;
        content = next;
        replacements += n;
    }
    let edited = Edited { replacements, bytes: content.len() as u64, hash: sha256_hex(&content) };
    Ok((content, edited))
}

/// Why one edit did not apply.
enum EditFail {
    NotFound,
    NotUnique(usize),
    Invalid(&'static str),
}

impl EditFail {
    fn into_error(self, path: &Path, edit_index: Option<usize>) -> FileError {
        let path = path.to_path_buf();
        match self {
            EditFail::NotFound => FileError::NotFound { path, edit_index },
            EditFail::NotUnique(count) => FileError::NotUnique { path, count, edit_index },
            EditFail::Invalid(why) => FileError::InvalidEdit { path, edit_index, why: why.to_string() },
        }
    }
}

/// `content` with `e` applied, and how many occurrences it replaced.
fn apply(content: &[u8], e: &Edit) -> Result<(Vec<u8>, usize), EditFail> {
    if e.old.is_empty() {
        return Err(EditFail::Invalid(
            "the old text is empty: give the text to replace (write_file replaces a whole file)",
        ));
    }
    if e.old == e.new {
        return Err(EditFail::Invalid("the old and the new text are the same: nothing would change"));
    }
    let hits: Vec<usize> = memchr::memmem::find_iter(content, e.old.as_bytes()).collect();
    match hits.len() {
        0 => return Err(EditFail::NotFound),
        n if n > 1 && !e.replace_all => return Err(EditFail::NotUnique(n)),
        _ => {}
    }
    let mut out = Vec::with_capacity(content.len() + hits.len() * e.new.len());
    let mut last = 0;
    for &h in &hits {
        out.extend_from_slice(&content[last..h]);
        out.extend_from_slice(e.new.as_bytes());
        last = h + e.old.len();
    }
    out.extend_from_slice(&content[last..]);
    Ok((out, hits.len()))
}

/// How much of a file whose size says 0 is read: a pseudo-file (`/proc`,
/// `/sys` in a readable root) reports 0 and still has content.
pub const EMPTY_SIZE_READ: u64 = 1 << 20;

/// `f` as it was when opened: no more than the `size` its `fstat` gave (or
/// [`EMPTY_SIZE_READ`] for a size of 0), so a file another process keeps
/// appending to cannot keep a read going (time, memory) without end, and
/// the hash and counts are of one consistent prefix.
fn snapshot(f: std::fs::File, size: u64) -> io::Take<std::fs::File> {
    f.take(if size == 0 { EMPTY_SIZE_READ } else { size })
}

enum WindowError {
    Binary(u64),
    Io(io::Error),
}

/// The window state of one streaming pass.
struct Window {
    opts: ReadOptions,
    start: usize,
    last_wanted: usize,
    content: String,
    end_line: usize,
    truncated: bool,
    bytes_capped: bool,
    lossy: bool,
    /// Stop collecting (the cap was hit, or the limit reached).
    done: bool,
    /// The raw bytes kept of the current line, and whether more followed.
    line: Vec<u8>,
    line_over: bool,
}

impl Window {
    fn collecting(&self, n: usize) -> bool {
        !self.done && n >= self.start && n <= self.last_wanted
    }

    /// How many raw bytes of a line are worth keeping now.
    fn keep(&self) -> usize {
        match self.opts.max_bytes {
            // The rest of the budget, plus a partial character.
            Some(b) => b.saturating_sub(self.content.len()).saturating_add(4),
            None => usize::MAX,
        }
    }

    fn take(&mut self, seg: &[u8]) {
        let room = self.keep().saturating_sub(self.line.len());
        if seg.len() > room {
            self.line.extend_from_slice(&seg[..room]);
            self.line_over = true;
        } else {
            self.line.extend_from_slice(seg);
        }
    }

    /// Line `n` ended (with a newline, or at the end of the file).
    fn finish(&mut self, n: usize, newline: bool) {
        if !self.collecting(n) {
            if n > self.last_wanted {
                self.done = true;
            }
            return;
        }
        let raw = std::mem::take(&mut self.line);
        let (text, lossy) = decode(&raw, self.line_over);
        self.lossy |= lossy;
        let prefix = format!("{n:>6}\t");
        let whole = prefix.len() + text.len() + usize::from(newline);
        let room = self.opts.max_bytes.map_or(usize::MAX, |b| b.saturating_sub(self.content.len()));
        if whole <= room && !self.line_over {
            self.content.push_str(&prefix);
            self.content.push_str(&text);
            if newline {
                self.content.push('\n');
            }
            self.end_line = n;
        } else {
            self.bytes_capped = true;
            self.truncated = true;
            self.done = true;
            if room > prefix.len() {
                let mut cut = (room - prefix.len()).min(text.len());
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                self.content.push_str(&prefix);
                self.content.push_str(&text[..cut]);
                self.end_line = n;
            }
        }
        self.line_over = false;
    }
}

/// `raw` as text, invalid bytes as U+FFFD; when `cut`, a partial character
/// at the end is dropped rather than shown as U+FFFD. Returns whether
/// anything was replaced.
fn decode(raw: &[u8], cut: bool) -> (String, bool) {
    let mut s = String::with_capacity(raw.len());
    let mut lossy = false;
    let mut chunks = raw.utf8_chunks().peekable();
    while let Some(c) = chunks.next() {
        s.push_str(c.valid());
        if !c.invalid().is_empty() {
            if cut && chunks.peek().is_none() && c.invalid().len() < 4 {
                break;
            }
            s.push(char::REPLACEMENT_CHARACTER);
            lossy = true;
        }
    }
    (s, lossy)
}

/// One pass over the text `r` yields (a file of `size` bytes at `path`,
/// as errors name it): hash, counts, and the window. Every backend reads
/// through this one function, so the window, the byte ceiling, the binary
/// and the lossy rules are the same everywhere.
pub(crate) fn read_window(r: impl Read, size: u64, opts: ReadOptions, path: &Path) -> Result<ReadWindow, FileError> {
    window_pass(r, size, opts).map_err(|e| match e {
        WindowError::Binary(total_bytes) => FileError::Binary { path: path.to_path_buf(), total_bytes },
        WindowError::Io(e) => fail("read", path, e),
    })
}

fn window_pass(f: impl Read, size: u64, opts: ReadOptions) -> Result<ReadWindow, WindowError> {
    let start = opts.offset.max(1);
    let limit = opts.limit.unwrap_or(DEFAULT_LINES);
    let mut w = Window {
        opts,
        start,
        last_wanted: start.saturating_add(limit).saturating_sub(1),
        content: String::new(),
        end_line: 0,
        truncated: false,
        bytes_capped: false,
        lossy: false,
        done: limit == 0,
        line: Vec::new(),
        line_over: false,
    };
    let mut r = BufReader::with_capacity(64 * 1024, f);
    let mut hasher = Sha256::new();
    let mut total: u64 = 0;
    let mut lines = 0usize;
    let mut in_line = false;
    loop {
        let buf = match r.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(WindowError::Io(e)),
        };
        if buf.is_empty() {
            break;
        }
        let n = buf.len();
        if let Some(sniff) = usize::try_from(total).ok().filter(|t| *t < BINARY_SNIFF) {
            if buf[..n.min(BINARY_SNIFF - sniff)].contains(&0) {
                return Err(WindowError::Binary(size.max(total + n as u64)));
            }
        }
        hasher.update(buf);
        let mut i = 0;
        while i < n {
            let rest = &buf[i..];
            let (seg, newline) = match memchr::memchr(b'\n', rest) {
                Some(k) => (&rest[..k], true),
                None => (rest, false),
            };
            if !in_line {
                lines += 1;
                in_line = true;
            }
            if w.collecting(lines) {
                w.take(seg);
            }
            i += seg.len() + usize::from(newline);
            if newline {
                w.finish(lines, true);
                in_line = false;
            }
        }
        total += n as u64;
        r.consume(n);
    }
    if in_line {
        w.finish(lines, false);
    }
    let end_line = if w.end_line == 0 { start - 1 } else { w.end_line };
    if lines > end_line && start <= lines {
        w.truncated = true;
    }
    Ok(ReadWindow {
        content: w.content,
        start_line: start,
        end_line,
        total_lines: lines,
        total_bytes: total,
        truncated: w.truncated,
        bytes_capped: w.bytes_capped,
        lossy: w.lossy,
        hash: crate::hex::hex(&hasher.finalize()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(text: &[u8], opts: ReadOptions) -> ReadWindow {
        let Ok(mut f) = tempfile::tempfile() else { panic!("tempfile") };
        let _ = std::io::Write::write_all(&mut f, text);
        let _ = std::io::Seek::rewind(&mut f);
        match window_pass(f, 0, opts) {
            Ok(w) => w,
            Err(WindowError::Binary(_)) => panic!("binary"),
            Err(WindowError::Io(e)) => panic!("{e}"),
        }
    }

    #[test]
    fn numbers_lines_like_cat_n() {
        let w = window(b"a\nb\nc", ReadOptions::default());
        assert_eq!(w.content, "     1\ta\n     2\tb\n     3\tc");
        assert_eq!((w.start_line, w.end_line, w.total_lines, w.total_bytes), (1, 3, 3, 5));
        assert!(!w.truncated && !w.bytes_capped && !w.lossy);
        assert_eq!(w.hash, sha256_hex(b"a\nb\nc"));
    }

    #[test]
    fn window_offset_and_limit() {
        let w = window(b"1\n2\n3\n4\n", ReadOptions { offset: 2, limit: Some(2), max_bytes: None });
        assert_eq!(w.content, "     2\t2\n     3\t3\n");
        assert_eq!((w.start_line, w.end_line, w.total_lines), (2, 3, 4));
        assert!(w.truncated && !w.bytes_capped);
        let past = window(b"1\n", ReadOptions { offset: 5, limit: None, max_bytes: None });
        assert_eq!((past.content.as_str(), past.end_line, past.truncated), ("", 4, false));
        let empty = window(b"", ReadOptions::default());
        assert_eq!((empty.total_lines, empty.end_line, empty.truncated), (0, 0, false));
    }

    #[test]
    fn byte_cap_counts_prefixes_and_cuts_on_a_char_boundary() {
        // "     1\t" is 7 bytes; each é is 2.
        let w = window("éééé\nx\n".as_bytes(), ReadOptions { offset: 1, limit: None, max_bytes: Some(12) });
        assert_eq!(w.content, "     1\téé");
        assert!(w.content.len() <= 12 && w.bytes_capped && w.truncated);
        assert_eq!(w.end_line, 1);
        let fits = window(b"ab\ncd\n", ReadOptions { offset: 1, limit: None, max_bytes: Some(10) });
        assert_eq!(fits.content, "     1\tab\n");
        assert_eq!((fits.end_line, fits.bytes_capped), (1, true));
        let tiny = window(b"ab\n", ReadOptions { offset: 1, limit: None, max_bytes: Some(3) });
        assert_eq!((tiny.content.as_str(), tiny.end_line, tiny.truncated), ("", 0, true));
    }

    #[test]
    fn non_utf8_is_lossy_and_flagged() {
        let w = window(b"caf\xe9\n", ReadOptions::default());
        assert_eq!(w.content, "     1\tcaf\u{fffd}\n");
        assert!(w.lossy);
    }

    #[test]
    fn edits_are_exact_and_unique() {
        let e = |old: &str, new: &str, all| Edit { old: old.into(), new: new.into(), replace_all: all };
        assert!(matches!(apply(b"a a", &e("a", "b", false)), Err(EditFail::NotUnique(2))));
        assert!(matches!(apply(b"a a", &e("c", "b", false)), Err(EditFail::NotFound)));
        assert!(matches!(apply(b"a", &e("", "b", false)), Err(EditFail::Invalid(_))));
        assert!(matches!(apply(b"a", &e("a", "a", false)), Err(EditFail::Invalid(_))));
        assert_eq!(apply(b"a a", &e("a", "bb", true)).ok(), Some((b"bb bb".to_vec(), 2)));
        assert_eq!(apply(b"xay", &e("a", "", false)).ok(), Some((b"xy".to_vec(), 1)));
    }
}
