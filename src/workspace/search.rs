//! `grep` and `glob` over the workspace, built from the crates ripgrep is
//! built from: `ignore` walks (in parallel, `.gitignore`/`.ignore` rules
//! applied), `grep-regex` compiles the pattern with Rust's linear-time
//! regex engine (catastrophic backtracking cannot happen) and
//! `grep-searcher` reads each file in bounded buffers.
//!
//! What holds:
//! - Nothing outside the jail is read: symbolic links are never followed
//!   (neither walked into nor opened), `.gitignore` files above the root and
//!   the host's global gitignore are not read, and every file is opened
//!   relative to a descriptor of the root with `openat2(RESOLVE_BENEATH |
//!   RESOLVE_NO_SYMLINKS)`, so a directory swapped for a link mid-walk
//!   fails the open instead of leading outside.
//! - A path the deny globs match is never opened, nor walked into: it is
//!   counted as `denied` and appears nowhere in the answer.
//! - FIFOs, sockets and devices are never opened (the walk's file type; a
//!   FIFO swapped in after the walk is opened `O_NONBLOCK` and reads as
//!   empty), so a FIFO named like a match cannot hang the search. A directory whose
//!   `.gitignore` or `.ignore` is not a regular file (the walker would open
//!   it) or is denied is skipped whole and counted as `special`/`denied`.
//! - `.git` and `node_modules` are skipped by default (counted as
//!   `ignored`); hidden files are searched.
//! - Bounded work: the pattern is at most [`MAX_PATTERN_BYTES`] long and
//!   its compiled form at most [`REGEX_SIZE_LIMIT`]; a file with a line
//!   longer than `max_line_bytes` is skipped (`long_line`) rather than
//!   buffered whole; each returned line is cut to `line_cap` bytes (on a
//!   character boundary); at most `max_results` matching lines come back.
//!
//! When the answer is `truncated`, which matches arrive first depends on
//! the parallel walk; the matches returned are sorted by path and line.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileTypeExt;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use globset::{GlobBuilder, GlobMatcher};
use grep_regex::{RegexMatcher, RegexMatcherBuilder};
use grep_searcher::{BinaryDetection, MmapChoice, Searcher, SearcherBuilder, Sink, SinkContext, SinkFinish, SinkMatch};
use ignore::{DirEntry, WalkBuilder, WalkState};
use nix::errno::Errno;
use nix::fcntl::{OFlag, OpenHow, ResolveFlag};
use serde::Serialize;

use crate::path::DenyGlobs;

/// The longest pattern accepted, in bytes.
pub const MAX_PATTERN_BYTES: usize = 4096;
/// The most memory the compiled pattern may take.
pub const REGEX_SIZE_LIMIT: usize = 16 << 20;
/// The default for [`GrepOptions::max_results`].
pub const DEFAULT_MAX_RESULTS: usize = 1000;
/// The default for [`GrepOptions::line_cap`].
pub const DEFAULT_LINE_CAP: usize = 2000;
/// The default for [`GrepOptions::max_line_bytes`].
pub const DEFAULT_MAX_LINE_BYTES: usize = 1 << 20;
/// The most context lines on each side of a match.
pub const MAX_CONTEXT: usize = 100;
/// Directory names skipped unless [`GrepOptions::default_ignores`] is off.
pub const DEFAULT_IGNORED: &[&str] = &[".git", "node_modules"];

/// What to search for and where.
#[derive(Clone, Debug)]
pub struct GrepOptions {
    /// A regular expression (Rust syntax), or a literal with `fixed_strings`.
    pub pattern: String,
    /// The file or directory to search, relative to the root (`None`: all).
    pub path: Option<PathBuf>,
    /// Only files matching this glob: without `/` it matches the file name
    /// at any depth (`*.rs`), with `/` the path from the root (`src/**/*.rs`).
    pub glob: Option<String>,
    /// Match without regard to case.
    pub ignore_case: bool,
    /// Lines of context before and after each match (at most [`MAX_CONTEXT`]).
    pub context: usize,
    /// The most matching lines returned; more sets `truncated`.
    pub max_results: usize,
    /// Take the pattern as a literal string.
    pub fixed_strings: bool,
    /// Each returned line is cut to this many bytes.
    pub line_cap: usize,
    /// A file with a longer line is skipped (counted as `long_line`).
    pub max_line_bytes: usize,
    /// Skip `.git` and `node_modules` directories.
    pub default_ignores: bool,
    /// Apply `.gitignore` and `.ignore` files inside the root.
    pub gitignore: bool,
    /// Walker threads (0: one per CPU).
    pub threads: usize,
    /// Stop early when this is cancelled (the result then says
    /// `truncated`): an MCP client's `notifications/cancelled` for the
    /// call. Each file already being searched is finished.
    pub cancel: Option<tokio_util::sync::CancellationToken>,
}

impl GrepOptions {
    /// Options for `pattern` with the defaults.
    pub fn new(pattern: impl Into<String>) -> Self {
        GrepOptions {
            pattern: pattern.into(),
            path: None,
            glob: None,
            ignore_case: false,
            context: 0,
            max_results: DEFAULT_MAX_RESULTS,
            fixed_strings: false,
            line_cap: DEFAULT_LINE_CAP,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            default_ignores: true,
            gitignore: true,
            threads: 0,
            cancel: None,
        }
    }
}

/// One line around a match.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct ContextLine {
    /// 1-based line number.
    pub line: u64,
    /// The line without its terminator, cut to the line cap.
    pub text: String,
}

/// One matching line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct GrepMatch {
    /// The file, relative to the root (lossy UTF-8).
    pub path: String,
    /// 1-based line number.
    pub line: u64,
    /// The line without its terminator, cut to the line cap (lossy UTF-8).
    pub text: String,
    /// Whether `text` was cut.
    pub cut: bool,
    /// Up to `context` lines before, in order.
    pub before: Vec<ContextLine>,
    /// Up to `context` lines after, in order.
    pub after: Vec<ContextLine>,
}

/// Entries left out, by reason.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Skipped {
    /// Files holding a NUL byte (their matches are dropped).
    pub binary: u64,
    /// Files with a line longer than `max_line_bytes`.
    pub long_line: u64,
    /// Files and directories the deny globs match (never opened).
    pub denied: u64,
    /// `.git` and `node_modules` directories (`.gitignore`d paths are not
    /// counted: the walker never yields them).
    pub ignored: u64,
    /// Files that failed to open or read (the error is not returned).
    pub unreadable: u64,
    /// Symbolic links (never followed).
    pub links: u64,
    /// FIFOs, sockets, devices, and directories whose ignore file is one.
    pub special: u64,
}

/// What `grep` found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct GrepResult {
    /// The matching lines, sorted by path and line.
    pub matches: Vec<GrepMatch>,
    /// Files searched to the end (or to `max_results`).
    pub files_searched: u64,
    /// What was left out and why.
    pub files_skipped: Skipped,
    /// Returned lines (matches and context) cut to the line cap.
    pub lines_cut: u64,
    /// Whether `max_results` stopped the search.
    pub truncated: bool,
}

/// What `glob` found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct GlobResult {
    /// Matching files, relative to the root, sorted.
    pub paths: Vec<String>,
    /// What was left out and why.
    pub skipped: Skipped,
    /// Whether `max` (or a cancellation) stopped the walk.
    pub truncated: bool,
}

/// Why a search did not start.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// The pattern is longer than [`MAX_PATTERN_BYTES`].
    #[error("the pattern is {len} bytes; at most {max} are allowed: search for a shorter one")]
    PatternTooLong {
        /// Its length.
        len: usize,
        /// The cap.
        max: usize,
    },
    /// The pattern does not compile (or would compile too large).
    #[error("bad pattern {pattern:?}: {reason}")]
    BadPattern {
        /// The pattern.
        pattern: String,
        /// The compiler's message.
        reason: String,
    },
    /// The glob does not compile.
    #[error("bad glob {glob:?}: {reason}")]
    BadGlob {
        /// The glob.
        glob: String,
        /// Why.
        reason: String,
    },
    /// The path to search is not a plain path below the root.
    #[error("{path}: {reason}")]
    BadPath {
        /// The path as given.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The path to search is denied.
    #[error("{path}: denied by the policy's deny glob {glob:?}")]
    Denied {
        /// The path as given.
        path: PathBuf,
        /// The glob.
        glob: String,
    },
    /// The root cannot be opened.
    #[error("cannot open the workspace root {root}: {source}")]
    Root {
        /// The root.
        root: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
}

/// A glob filter: by name without `/`, by path from the root with one.
#[derive(Clone, Debug)]
pub(crate) struct NameGlob {
    m: GlobMatcher,
    by_name: bool,
}

impl NameGlob {
    pub(crate) fn new(g: &str) -> Result<Self, SearchError> {
        let norm = crate::path::normalize_glob(g);
        if norm.starts_with('/') || norm.split('/').any(|c| c == "..") {
            return Err(SearchError::BadGlob { glob: g.into(), reason: "must be relative, without `..`".into() });
        }
        let m = GlobBuilder::new(&norm)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| SearchError::BadGlob { glob: g.into(), reason: e.kind().to_string() })?
            .compile_matcher();
        Ok(NameGlob { m, by_name: !norm.contains('/') })
    }

    pub(crate) fn matches(&self, rel: &Path) -> bool {
        if self.by_name {
            rel.file_name().is_some_and(|n| self.m.is_match(n))
        } else {
            self.m.is_match(rel)
        }
    }
}

#[derive(Default)]
pub(crate) struct Counts {
    pub(crate) binary: AtomicU64,
    pub(crate) long_line: AtomicU64,
    pub(crate) denied: AtomicU64,
    pub(crate) ignored: AtomicU64,
    pub(crate) unreadable: AtomicU64,
    pub(crate) links: AtomicU64,
    pub(crate) special: AtomicU64,
    pub(crate) searched: AtomicU64,
    pub(crate) cut: AtomicU64,
}

impl Counts {
    pub(crate) fn skipped(&self) -> Skipped {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Skipped {
            binary: g(&self.binary),
            long_line: g(&self.long_line),
            denied: g(&self.denied),
            ignored: g(&self.ignored),
            unreadable: g(&self.unreadable),
            links: g(&self.links),
            special: g(&self.special),
        }
    }
}

pub(crate) fn bump(a: &AtomicU64) {
    a.fetch_add(1, Ordering::Relaxed);
}

/// The root's real path and a descriptor of it.
fn open_root(root: &Path) -> Result<(PathBuf, OwnedFd), SearchError> {
    let err = |source| SearchError::Root { root: root.to_path_buf(), source };
    let real = std::fs::canonicalize(root).map_err(err)?;
    let fd =
        nix::fcntl::open(&real, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, nix::sys::stat::Mode::empty())
            .map_err(|e| err(io::Error::from(e)))?;
    Ok((real, fd))
}

/// `rel` checked to be a plain path below `root` with no link on the way
/// and not denied; the full path.
fn start_path(root: &Path, deny: &DenyGlobs, rel: &Path) -> Result<PathBuf, SearchError> {
    let bad = |reason: &str| SearchError::BadPath { path: rel.to_path_buf(), reason: reason.into() };
    let mut cur = root.to_path_buf();
    for c in rel.components() {
        match c {
            Component::CurDir => {}
            Component::Normal(n) => {
                cur.push(n);
                let md = std::fs::symlink_metadata(&cur).map_err(|e| match e.kind() {
                    io::ErrorKind::NotFound => bad("no such file or directory"),
                    _ => bad(&format!("cannot read: {e}")),
                })?;
                if md.file_type().is_symlink() {
                    return Err(bad("is or passes through a symbolic link, which search does not follow"));
                }
                if let Some(g) = deny.matching(root, &cur) {
                    return Err(SearchError::Denied { path: rel.to_path_buf(), glob: g.to_string() });
                }
            }
            _ => return Err(bad("must be relative to the workspace, without `..`")),
        }
    }
    Ok(cur)
}

/// Open `rel` below the root descriptor: no link anywhere on the way, and
/// never blocking on a FIFO.
///
/// The walk has already seen a regular file here. No `fstat` follows the
/// open (it costs ~10% of a warm search and would not undo an open): a FIFO
/// swapped in since the walk is opened non-blocking and reads as empty or
/// fails, a socket fails to open (`ENXIO`), and a device node cannot be
/// swapped in by a sandboxed command (creating one needs `CAP_MKNOD` in the
/// initial namespace).
fn open_beneath(root_fd: &OwnedFd, rel: &Path) -> io::Result<File> {
    let how = OpenHow::new()
        .flags(OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC | OFlag::O_NOCTTY)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = nix::fcntl::openat2(root_fd, rel, how).map_err(io::Error::from)?;
    Ok(File::from(fd))
}

/// Whether `rel` is a regular file below the root descriptor, reached
/// without a link (`ELOOP` when one is on the way). Opens nothing (`O_PATH`).
fn regular_beneath(root_fd: &OwnedFd, rel: &Path) -> Result<bool, Errno> {
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_SYMLINKS | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = nix::fcntl::openat2(root_fd, rel, how)?;
    let st = nix::sys::stat::fstat(&fd)?;
    Ok(nix::sys::stat::SFlag::from_bits_truncate(st.st_mode) & nix::sys::stat::SFlag::S_IFMT
        == nix::sys::stat::SFlag::S_IFREG)
}

/// The ignore files the walker reads in a directory.
pub(crate) const IGNORE_FILES: &[&str] = &[".gitignore", ".ignore"];

/// Whether the walker may read `dir`'s ignore files: each is absent, or a
/// regular file the deny globs do not match. Counts the refusal.
fn ignore_files_safe(root: &Path, deny: &DenyGlobs, dir: &Path, counts: &Counts) -> bool {
    for name in IGNORE_FILES {
        let p = dir.join(name);
        match std::fs::symlink_metadata(&p) {
            Ok(md) if !md.file_type().is_file() => {
                bump(&counts.special);
                return false;
            }
            Ok(_) if deny.matching(root, &p).is_some() => {
                bump(&counts.denied);
                return false;
            }
            _ => {}
        }
    }
    true
}

/// A walker over `start` (below the real `root`) with the jail's rules.
fn walker(
    root: &Path,
    start: &Path,
    deny: &DenyGlobs,
    gitignore: bool,
    default_ignores: bool,
    counts: &Arc<Counts>,
) -> Result<WalkBuilder, SearchError> {
    let mut b = WalkBuilder::new(start);
    b.hidden(false)
        .parents(false)
        .ignore(gitignore)
        .git_ignore(gitignore)
        .git_global(false)
        .git_exclude(false)
        .require_git(false)
        .follow_links(false)
        .ignore_case_insensitive(false);
    let rel = start.strip_prefix(root).unwrap_or(Path::new(""));
    if gitignore {
        // The walker reads the start directory's ignore files itself.
        if std::fs::symlink_metadata(start).is_ok_and(|m| m.is_dir()) && !ignore_files_safe(root, deny, start, counts) {
            return Err(SearchError::BadPath {
                path: rel.to_path_buf(),
                reason: "its .gitignore or .ignore is not a regular file, or is denied, and the walk would open it: \
                         remove it, or search with the ignore rules off"
                    .into(),
            });
        }
        // The rules of the directories above the start, up to the root,
        // which `parents(false)` leaves out (it would read up to `/`).
        let comps: Vec<_> = rel.components().collect();
        if let Some((_, above)) = comps.split_last() {
            let mut dir = root.to_path_buf();
            for c in std::iter::once(None).chain(above.iter().map(Some)) {
                if let Some(c) = c {
                    dir.push(c);
                }
                if ignore_files_safe(root, deny, &dir, counts) {
                    for name in IGNORE_FILES {
                        let p = dir.join(name);
                        if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()) {
                            let _ = b.add_ignore(p);
                        }
                    }
                }
            }
        }
    }
    let root = root.to_path_buf();
    let deny = deny.clone();
    let counts = Arc::clone(counts);
    b.filter_entry(move |e: &DirEntry| admit(&root, &deny, gitignore, default_ignores, &counts, e));
    Ok(b)
}

/// Whether the walk takes `e` (and, for a directory, goes into it).
fn admit(root: &Path, deny: &DenyGlobs, gitignore: bool, default_ignores: bool, counts: &Counts, e: &DirEntry) -> bool {
    let Some(ft) = e.file_type() else {
        bump(&counts.unreadable);
        return false;
    };
    if ft.is_symlink() {
        bump(&counts.links);
        return false;
    }
    if default_ignores && ft.is_dir() && e.file_name().to_str().is_some_and(|n| DEFAULT_IGNORED.contains(&n)) {
        bump(&counts.ignored);
        return false;
    }
    if deny.matching(root, e.path()).is_some() {
        bump(&counts.denied);
        return false;
    }
    if ft.is_dir() {
        return !gitignore || ignore_files_safe(root, deny, e.path(), counts);
    }
    if ft.is_fifo() || ft.is_socket() || ft.is_block_device() || ft.is_char_device() || !ft.is_file() {
        bump(&counts.special);
        return false;
    }
    true
}

/// A reader that remembers whether reading failed (to tell a read error
/// from the searcher's line-length limit), and stops a file that grows
/// while it is read: past [`SIZE_CHECK_AFTER`] bytes it takes the file's
/// size once (`fstat`) and reads no further than that, so a log another
/// process keeps appending to cannot keep the search going without end.
/// (Smaller files skip the `fstat`: it would cost a warm search ~10%.)
struct Tracked<'a> {
    f: &'a File,
    failed: bool,
    read: u64,
    limit: Option<u64>,
}

/// Bytes read from a file before its size is taken (see [`Tracked`]).
const SIZE_CHECK_AFTER: u64 = 1 << 20;

impl<'a> Tracked<'a> {
    fn new(f: &'a File) -> Self {
        Tracked { f, failed: false, read: 0, limit: None }
    }
}

impl Read for Tracked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.limit.is_none() && self.read >= SIZE_CHECK_AFTER {
            let size = match self.f.metadata() {
                Ok(m) => m.len(),
                Err(e) => {
                    self.failed = true;
                    return Err(e);
                }
            };
            self.limit = Some(size.max(self.read));
        }
        let want = match self.limit {
            Some(l) => usize::try_from(l.saturating_sub(self.read)).unwrap_or(usize::MAX).min(buf.len()),
            None => buf.len(),
        };
        if want == 0 {
            return Ok(0);
        }
        let r = self.f.read(&mut buf[..want]);
        match &r {
            Ok(n) => self.read += *n as u64,
            Err(_) => self.failed = true,
        }
        r
    }
}

/// `bytes` without its line terminator, lossy UTF-8, cut to `cap` bytes on
/// a character boundary.
fn line_text(bytes: &[u8], cap: usize) -> (String, bool) {
    let b = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    let b = b.strip_suffix(b"\r").unwrap_or(b);
    let cut = b.len() > cap;
    let b = if cut { &b[..cap] } else { b };
    let mut s = String::from_utf8_lossy(b).into_owned();
    if cut {
        // A character split at the cap decodes as U+FFFD at the end: drop it.
        if std::str::from_utf8(b).is_err() && s.ends_with('\u{FFFD}') {
            s.pop();
        }
    }
    (s, cut)
}

/// One file's lines (matches and context), in order.
pub(crate) struct FileSink<'a> {
    pub(crate) lines: Vec<(u64, String, bool, bool)>,
    pub(crate) cap: usize,
    pub(crate) found: &'a AtomicUsize,
    pub(crate) max: usize,
    pub(crate) stop: &'a AtomicBool,
    pub(crate) mine: usize,
    pub(crate) binary: bool,
}

impl Sink for FileSink<'_> {
    type Error = io::Error;

    fn matched(&mut self, _s: &Searcher, m: &SinkMatch<'_>) -> Result<bool, io::Error> {
        if self.found.fetch_add(1, Ordering::Relaxed) >= self.max {
            self.found.fetch_sub(1, Ordering::Relaxed);
            self.stop.store(true, Ordering::Relaxed);
            return Ok(false);
        }
        self.mine += 1;
        let (text, cut) = line_text(m.bytes(), self.cap);
        self.lines.push((m.line_number().unwrap_or(0), text, cut, true));
        Ok(true)
    }

    fn context(&mut self, _s: &Searcher, c: &SinkContext<'_>) -> Result<bool, io::Error> {
        let (text, cut) = line_text(c.bytes(), self.cap);
        self.lines.push((c.line_number().unwrap_or(0), text, cut, false));
        Ok(true)
    }

    fn finish(&mut self, _s: &Searcher, f: &SinkFinish) -> Result<(), io::Error> {
        self.binary = f.binary_byte_offset().is_some();
        Ok(())
    }
}

/// The matches of one file from its lines, each with its own context.
/// Count one searched file by how its search ended (a read error, a line
/// too long, binary, or searched) and give back its matches, if any: the
/// one reading of a search's end every backend shares.
pub(crate) fn tally(
    r: Result<(), io::Error>,
    read_failed: bool,
    sink: FileSink<'_>,
    rel: &Path,
    context: usize,
    counts: &Counts,
) -> Option<Vec<GrepMatch>> {
    let FileSink { lines, binary, mine, found, .. } = sink;
    match r {
        Err(_) if read_failed => bump(&counts.unreadable),
        Err(_) => {
            found.fetch_sub(mine, Ordering::Relaxed);
            bump(&counts.long_line);
        }
        Ok(()) if binary => {
            found.fetch_sub(mine, Ordering::Relaxed);
            bump(&counts.binary);
        }
        Ok(()) => {
            bump(&counts.searched);
            if !lines.is_empty() {
                return Some(assemble(&rel.to_string_lossy(), lines, context, &counts.cut));
            }
        }
    }
    None
}

pub(crate) fn assemble(
    path: &str,
    lines: Vec<(u64, String, bool, bool)>,
    context: usize,
    cut: &AtomicU64,
) -> Vec<GrepMatch> {
    if context == 0 {
        // Only matches: move their text, copy nothing.
        return lines
            .into_iter()
            .filter(|l| l.3)
            .map(|(line, text, was_cut, _)| {
                if was_cut {
                    bump(cut);
                }
                GrepMatch { path: path.to_string(), line, text, cut: was_cut, before: Vec::new(), after: Vec::new() }
            })
            .collect();
    }
    let mut out = Vec::new();
    for (i, (line, text, was_cut, is_match)) in lines.iter().enumerate() {
        if !is_match {
            continue;
        }
        let mut before = Vec::new();
        let mut want = *line;
        for (l, t, c, _) in lines[..i].iter().rev().take(context) {
            if *l + 1 != want {
                break;
            }
            want = *l;
            if *c {
                bump(cut);
            }
            before.push(ContextLine { line: *l, text: t.clone() });
        }
        before.reverse();
        let mut after = Vec::new();
        let mut want = *line;
        for (l, t, c, _) in lines[i + 1..].iter().take(context) {
            if *l != want + 1 {
                break;
            }
            want = *l;
            if *c {
                bump(cut);
            }
            after.push(ContextLine { line: *l, text: t.clone() });
        }
        if *was_cut {
            bump(cut);
        }
        out.push(GrepMatch { path: path.to_string(), line: *line, text: text.clone(), cut: *was_cut, before, after });
    }
    out
}

/// The compiled pattern.
pub(crate) fn matcher(o: &GrepOptions) -> Result<RegexMatcher, SearchError> {
    if o.pattern.len() > MAX_PATTERN_BYTES {
        return Err(SearchError::PatternTooLong { len: o.pattern.len(), max: MAX_PATTERN_BYTES });
    }
    RegexMatcherBuilder::new()
        .case_insensitive(o.ignore_case)
        .fixed_strings(o.fixed_strings)
        .line_terminator(Some(b'\n'))
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build(&o.pattern)
        .map_err(|e| SearchError::BadPattern { pattern: o.pattern.clone(), reason: e.to_string() })
}

/// The searcher every backend searches with: line numbers, the context,
/// a NUL byte makes a file binary, the heap bounded by the longest line.
pub(crate) fn searcher(opts: &GrepOptions) -> SearcherBuilder {
    let context = opts.context.min(MAX_CONTEXT);
    let mut sb = SearcherBuilder::new();
    sb.line_number(true)
        .before_context(context)
        .after_context(context)
        .binary_detection(BinaryDetection::quit(0))
        .memory_map(MmapChoice::never())
        .heap_limit(Some(
            opts.max_line_bytes.max(1024).saturating_add(context.saturating_mul(2).saturating_mul(opts.line_cap)),
        ));
    sb
}

/// Search the files below `root` for `opts.pattern`, skipping what `deny`
/// denies (relative globs apply below `root`).
pub fn grep(root: &Path, deny: &DenyGlobs, opts: &GrepOptions) -> Result<GrepResult, SearchError> {
    let m = matcher(opts)?;
    let filter = opts.glob.as_deref().map(NameGlob::new).transpose()?;
    let (root, root_fd) = open_root(root)?;
    let start = match &opts.path {
        Some(p) => start_path(&root, deny, p)?,
        None => root.clone(),
    };
    let counts = Arc::new(Counts::default());
    let context = opts.context.min(MAX_CONTEXT);
    let sb = searcher(opts);
    let found = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    // One entry per file, each already in line order.
    let results: Mutex<Vec<Vec<GrepMatch>>> = Mutex::new(Vec::new());
    let mut wb = walker(&root, &start, deny, opts.gitignore, opts.default_ignores, &counts)?;
    wb.threads(opts.threads);
    wb.build_parallel().run(|| {
        let mut searcher = sb.build();
        let m = m.clone();
        let (root, root_fd, counts, filter) = (&root, &root_fd, &counts, &filter);
        let (found, stop, results) = (&found, &stop, &results);
        let (cap, max) = (opts.line_cap, opts.max_results);
        let cancel = opts.cancel.clone();
        Box::new(move |entry| {
            if cancel.as_ref().is_some_and(tokio_util::sync::CancellationToken::is_cancelled) {
                stop.store(true, Ordering::Relaxed);
            }
            if stop.load(Ordering::Relaxed) {
                return WalkState::Quit;
            }
            let Ok(e) = entry else {
                bump(&counts.unreadable);
                return WalkState::Continue;
            };
            if !e.file_type().is_some_and(|t| t.is_file()) {
                if e.depth() == 0 && !e.file_type().is_some_and(|t| t.is_dir()) {
                    bump(&counts.special);
                }
                return WalkState::Continue;
            }
            let Ok(rel) = e.path().strip_prefix(root) else {
                bump(&counts.unreadable);
                return WalkState::Continue;
            };
            if filter.as_ref().is_some_and(|f| !f.matches(rel)) {
                return WalkState::Continue;
            }
            let f = match open_beneath(root_fd, rel) {
                Ok(f) => f,
                Err(_) => {
                    bump(&counts.unreadable);
                    return WalkState::Continue;
                }
            };
            let mut sink = FileSink { lines: Vec::new(), cap, found, max, stop, mine: 0, binary: false };
            let mut rd = Tracked::new(&f);
            let r = searcher.search_reader(&m, &mut rd, &mut sink);
            if let Some(ms) = tally(r, rd.failed, sink, rel, context, counts) {
                if let Ok(mut r) = results.lock() {
                    r.push(ms);
                }
            }
            if stop.load(Ordering::Relaxed) {
                WalkState::Quit
            } else {
                WalkState::Continue
            }
        })
    });
    let mut files = results.into_inner().unwrap_or_else(|p| p.into_inner());
    files.sort_unstable_by(|a, b| a.first().map(|m| m.path.as_str()).cmp(&b.first().map(|m| m.path.as_str())));
    let matches: Vec<GrepMatch> = files.into_iter().flatten().collect();
    Ok(GrepResult {
        matches,
        files_searched: counts.searched.load(Ordering::Relaxed),
        files_skipped: counts.skipped(),
        lines_cut: counts.cut.load(Ordering::Relaxed),
        truncated: stop.load(Ordering::Relaxed),
    })
}

/// The files below `root` matching `pattern` (as [`GrepOptions::glob`]
/// reads it), at most `max`, in path order (the walk is sorted, so the
/// first `max` are always the same). Directories are not listed; links
/// are counted, not followed; denied and ignored paths are left out.
pub fn glob(root: &Path, deny: &DenyGlobs, pattern: &str, max: usize) -> Result<GlobResult, SearchError> {
    glob_cancellable(root, deny, pattern, max, None)
}

/// [`glob`] that stops at the next entry once `cancel` is cancelled (an
/// MCP client's `notifications/cancelled`: a glob that matches little in
/// a large tree walks all of it). What was found by then is returned, with
/// `truncated`.
pub fn glob_cancellable(
    root: &Path,
    deny: &DenyGlobs,
    pattern: &str,
    max: usize,
    cancel: Option<&tokio_util::sync::CancellationToken>,
) -> Result<GlobResult, SearchError> {
    let g = NameGlob::new(pattern)?;
    let (root, root_fd) = open_root(root)?;
    let counts = Arc::new(Counts::default());
    let mut wb = walker(&root, &root, deny, true, true, &counts)?;
    wb.sort_by_file_name(|a, b| a.cmp(b));
    let mut paths = Vec::new();
    let mut truncated = false;
    for e in wb.build() {
        if cancel.is_some_and(tokio_util::sync::CancellationToken::is_cancelled) {
            truncated = true;
            break;
        }
        let Ok(e) = e else {
            bump(&counts.unreadable);
            continue;
        };
        if !e.file_type().is_some_and(|t| t.is_file()) {
            continue;
        }
        let Ok(rel) = e.path().strip_prefix(&root) else { continue };
        if !g.matches(rel) {
            continue;
        }
        // The walker lists a directory by its path: one swapped for a link
        // since it was seen would list the names of wherever the link
        // leads. A name is returned only if it is a regular file below the
        // root, reached from the root's descriptor without a link.
        match regular_beneath(&root_fd, rel) {
            Ok(true) => {}
            Ok(false) => {
                bump(&counts.special);
                continue;
            }
            Err(Errno::ELOOP) => {
                bump(&counts.links);
                continue;
            }
            Err(_) => {
                bump(&counts.unreadable);
                continue;
            }
        }
        if paths.len() >= max {
            truncated = true;
            break;
        }
        paths.push(rel.to_string_lossy().into_owned());
    }
    paths.sort();
    Ok(GlobResult { paths, skipped: counts.skipped(), truncated })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_text_cuts_on_a_char_boundary() {
        let (t, cut) = line_text("aé\n".as_bytes(), 2);
        assert_eq!((t.as_str(), cut), ("a", true));
        let (t, cut) = line_text(b"abc\r\n", 10);
        assert_eq!((t.as_str(), cut), ("abc", false));
    }

    #[test]
    fn assemble_gives_each_match_its_own_context() {
        let l = |n: u64, m: bool| (n, format!("l{n}"), false, m);
        let lines = vec![l(1, false), l(2, true), l(3, true), l(4, false), l(9, true)];
        let cut = AtomicU64::new(0);
        let ms = assemble("f", lines, 1, &cut);
        assert_eq!(ms.len(), 3);
        assert_eq!(ms[0].before, vec![ContextLine { line: 1, text: "l1".into() }]);
        assert_eq!(ms[0].after, vec![ContextLine { line: 3, text: "l3".into() }]);
        assert_eq!(ms[1].before, vec![ContextLine { line: 2, text: "l2".into() }]);
        assert!(ms[2].before.is_empty() && ms[2].after.is_empty());
    }

    #[test]
    fn name_globs_match_names_and_paths() {
        let g = NameGlob::new("*.rs").unwrap_or_else(|e| panic!("{e}"));
        assert!(g.matches(Path::new("a/b/c.rs")));
        let g = NameGlob::new("src/*.rs").unwrap_or_else(|e| panic!("{e}"));
        assert!(g.matches(Path::new("src/c.rs")) && !g.matches(Path::new("src/a/c.rs")));
        assert!(NameGlob::new("../x").is_err() && NameGlob::new("/etc/*").is_err());
    }

    /// A cancelled search stops before its next file (an MCP client's
    /// `notifications/cancelled`: a call that ran on searched a whole tree,
    /// a thread each, after its client had given up on it); control: the
    /// same search without the cancel searches every file.
    #[test]
    fn a_cancelled_search_stops() {
        let d = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        for i in 0..50 {
            std::fs::write(d.path().join(format!("f{i}.txt")), "needle\n").unwrap_or_else(|e| panic!("{e}"));
        }
        let deny = crate::path::DenyGlobs::new(&[]).unwrap_or_else(|e| panic!("{e}"));
        let mut opts = GrepOptions::new("needle");
        opts.threads = 1;
        let all = grep(d.path(), &deny, &opts).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((all.files_searched, all.matches.len(), all.truncated), (50, 50, false));
        let cancel = tokio_util::sync::CancellationToken::new();
        cancel.cancel();
        opts.cancel = Some(cancel);
        let none = grep(d.path(), &deny, &opts).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((none.files_searched, none.truncated), (0, true));
        // A glob too: one that matches nothing walks the whole tree unless
        // it is cancelled (the control finds every file).
        let all = glob_cancellable(d.path(), &deny, "*.txt", 100, None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((all.paths.len(), all.truncated), (50, false));
        let none =
            glob_cancellable(d.path(), &deny, "*.txt", 100, opts.cancel.as_ref()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((none.paths.len(), none.truncated), (0, true));
    }

    #[test]
    fn patterns_are_capped() {
        let long = "a".repeat(MAX_PATTERN_BYTES + 1);
        assert!(matches!(matcher(&GrepOptions::new(long)), Err(SearchError::PatternTooLong { .. })));
        assert!(matches!(matcher(&GrepOptions::new("(")), Err(SearchError::BadPattern { .. })));
        // Compiles too large: refused, not run.
        assert!(matches!(matcher(&GrepOptions::new("(\\w{100}){100}")), Err(SearchError::BadPattern { .. })));
    }
}
