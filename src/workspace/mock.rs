//! [`MockBackend`]: a workspace over an in-memory tree with scripted
//! command results, so that a host can test code built on the
//! [`super::Workspace`] hermetically: no disk, no helper binary, no kernel
//! feature.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use portcullis::policy::WorkspacePolicy;
//! use portcullis::workspace::{CommandMatch, MockBackend, MockRun, Workspace};
//!
//! let policy = WorkspacePolicy { workspace: Some("/srv/app".into()), ..WorkspacePolicy::default() };
//! let mock = MockBackend::new(&policy)?;
//! mock.add_file("src/main.rs", "fn main() {}\n");
//! mock.on_command(CommandMatch::program("cargo"), MockRun::exit(0).stdout("ok\n"));
//! let ws = Workspace::builder().policy(policy).backend(Arc::new(mock.clone())).build()?;
//! let w = ws.read_file("src/main.rs", Default::default()).await?;
//! assert_eq!(w.total_lines, 1);
//! # Ok(()) }
//! ```
//!
//! What is the same as the local backend (the shared suite,
//! `tests/suite/ws_backends.rs`, runs both):
//! - the [`super::Workspace`] does the jail judgement (through
//!   [`Backend::judge`], a [`PathJail::virtual_root`]: lexical, which for a
//!   tree without links is how the kernel resolves), the read-only view,
//!   the protected-path rule (`.git`, `.git/hooks`, the protected paths),
//!   the gate and the audit around every call, exactly as for `Local`;
//! - read windows, the byte ceiling, the binary and lossy rules are the
//!   local code ([`super::files`]' `read_window`), edits are the local
//!   `apply_edits` (so `not-found`, `not-unique`, `stale-hash`,
//!   `edit_index` are the same), writes, edits and removes of the tree are
//!   serialized (one lock over the tree);
//! - `list_dir` has the same bounds, ignore globs, hidden-and-counted
//!   denied entries and result types; `grep` and `glob` compile patterns
//!   and globs with the same functions (same errors), search each file
//!   with the same `grep-searcher` configuration (slice search), apply
//!   `.gitignore`/`.ignore` files of the tree, skip `.git` and
//!   `node_modules` and count what they skip the same way;
//! - commands go through the policy checker, the gate and the audit of the
//!   [`Runner`] (`Runner::exec_line_with`): refusals are the same values
//!   and records; only "run" differs.
//!
//! What differs, by design:
//! - a command runs nothing: a script answers ([`MockRun`]; the latest
//!   added for exactly the line, else the latest for its program, see
//!   [`CommandMatch`]); an unscripted
//!   command exits 127 with a stderr that says so. A script's `writes` land
//!   in the tree only where the command's effective access (after the
//!   gate's meet and the read-only view) would let the sandbox write; the
//!   others are reported in `refused_writes` as the kernel's refusals are.
//!   The result's [`crate::sandbox::Enforcement`] says `backend: mock` and
//!   that nothing was enforced;
//! - the tree has no symbolic links, FIFOs or devices (so none of the
//!   local backend's link-swap defences are exercised), no permissions,
//!   no modes; a directory's `size` in a listing is 0.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ignore::gitignore::{Gitignore, GitignoreBuilder};

use crate::gate::{self, Access};
use crate::path::dir::Kind;
use crate::path::DenyGlobs;
use crate::policy::{PathAccess, PathJail, PolicyError, WorkspacePolicy};
use crate::runner::{Exec, ExecOptions, Executor, RunError, Runner};
use crate::sandbox::{
    Enforcement, ExecRequest, ExecResult, Mode, Outcome, RefusedWrites, ReportState, RunOptions, SandboxError, Stream,
    SAMPLE_CAP,
};

use super::backend::{Backend, BoxFuture};
use super::files::{apply_edits, read_window, Edit, Edited, FileError, Judged, ReadOptions, ReadWindow, Written};
use super::list::{EntryKind, ListEntry, ListError, ListOptions, ListResult};
use super::search::{
    bump, matcher, searcher, tally, Counts, FileSink, GlobResult, GrepOptions, GrepResult, NameGlob, SearchError,
    DEFAULT_IGNORED, IGNORE_FILES, MAX_CONTEXT,
};

/// The exit code of a command no script answers (the shell's "command not
/// found").
pub const UNSCRIPTED: i32 = 127;

/// Which command lines a script answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommandMatch {
    /// Exactly this line (surrounding white space ignored).
    Line(String),
    /// Any line whose first word is this program (by its name: `cargo`
    /// matches `cargo test` and `/usr/bin/cargo build`).
    Program(String),
}

impl CommandMatch {
    /// Exactly this line.
    pub fn line(line: impl Into<String>) -> CommandMatch {
        CommandMatch::Line(line.into())
    }

    /// Any line run by this program.
    pub fn program(name: impl Into<String>) -> CommandMatch {
        CommandMatch::Program(name.into())
    }

    fn matches(&self, line: &str) -> bool {
        match self {
            CommandMatch::Line(l) => l.trim() == line.trim(),
            CommandMatch::Program(p) => line
                .split_whitespace()
                .next()
                .map(|w| w.trim_matches(|c| c == '\'' || c == '"'))
                .is_some_and(|w| w == p || Path::new(w).file_name().is_some_and(|n| n == p.as_str())),
        }
    }
}

/// A scripted command result.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MockRun {
    /// The exit code it reports (once its `delay` has passed).
    pub exit_code: i32,
    /// Its standard output.
    pub stdout: Vec<u8>,
    /// Its standard error.
    pub stderr: Vec<u8>,
    /// Files it writes when it ends (relative to the workspace, or
    /// absolute): each lands only where the command's effective access lets
    /// the sandbox write; the others are reported in `refused_writes`.
    pub writes: Vec<(PathBuf, Vec<u8>)>,
    /// How long it "runs": a cancel during it gives `Outcome::Cancelled`, a
    /// shorter timeout `Outcome::TimedOut` (and no writes).
    pub delay: Duration,
}

impl MockRun {
    /// A run that exits with `code`.
    pub fn exit(code: i32) -> MockRun {
        MockRun { exit_code: code, ..MockRun::default() }
    }

    /// With this standard output.
    pub fn stdout(mut self, out: impl Into<Vec<u8>>) -> MockRun {
        self.stdout = out.into();
        self
    }

    /// With this standard error.
    pub fn stderr(mut self, err: impl Into<Vec<u8>>) -> MockRun {
        self.stderr = err.into();
        self
    }

    /// Writing `data` to `path` when it ends.
    pub fn write(mut self, path: impl Into<PathBuf>, data: impl Into<Vec<u8>>) -> MockRun {
        self.writes.push((path.into(), data.into()));
        self
    }

    /// Taking this long.
    pub fn delay(mut self, d: Duration) -> MockRun {
        self.delay = d;
        self
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    File(Vec<u8>),
    Dir,
}

type Tree = BTreeMap<PathBuf, Node>;

#[derive(Debug, Default)]
struct Shared {
    tree: Mutex<Tree>,
    scripts: Mutex<Vec<(CommandMatch, MockRun)>>,
    ran: Mutex<Vec<String>>,
}

/// An in-memory workspace backend with scripted commands (see the module
/// documentation). Cheap to clone: a clone (and a scope) shares the tree
/// and the scripts, so a test keeps one to seed and inspect the tree while
/// the workspace holds another.
#[derive(Clone, Debug)]
pub struct MockBackend {
    shared: Arc<Shared>,
    root: PathBuf,
    jail: PathJail,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn errno(op: &'static str, path: &Path, e: i32) -> FileError {
    FileError::Io { op, path: path.to_path_buf(), source: io::Error::from_raw_os_error(e) }
}

impl MockBackend {
    /// The mock of `policy`: its `workspace` is the tree's root (an
    /// absolute path that need not exist on this disk), its deny globs,
    /// readable roots and write grants judged as the local jail judges
    /// them. The tree starts with the root (and each readable root and
    /// grant) as empty directories.
    pub fn new(policy: &WorkspacePolicy) -> Result<MockBackend, FileError> {
        policy.validate()?;
        let jail = PathJail::virtual_root(policy)?;
        let root = jail.root().to_path_buf();
        let mut tree = Tree::new();
        for r in jail.read_roots() {
            insert_dir_all(&mut tree, r);
        }
        let shared = Shared { tree: Mutex::new(tree), ..Shared::default() };
        Ok(MockBackend { shared: Arc::new(shared), root, jail })
    }

    fn abs(&self, path: &Path) -> PathBuf {
        crate::path::lexical(&if path.is_absolute() { path.to_path_buf() } else { self.root.join(path) })
    }

    /// Seed a file (relative to the root, or absolute anywhere: a fixture
    /// is not judged), its missing parents made. Replaces what was there.
    pub fn add_file(&self, path: impl AsRef<Path>, data: impl Into<Vec<u8>>) {
        let p = self.abs(path.as_ref());
        let mut t = lock(&self.shared.tree);
        if let Some(parent) = p.parent() {
            insert_dir_all(&mut t, parent);
        }
        remove_below(&mut t, &p);
        t.insert(p, Node::File(data.into()));
    }

    /// Seed a directory and its missing parents.
    pub fn add_dir(&self, path: impl AsRef<Path>) {
        let p = self.abs(path.as_ref());
        insert_dir_all(&mut lock(&self.shared.tree), &p);
    }

    /// A file's content as it is now, seen from outside the workspace (no
    /// judgement, nothing audited): what a test checks after the fact.
    pub fn contents(&self, path: impl AsRef<Path>) -> Option<Vec<u8>> {
        match lock(&self.shared.tree).get(&self.abs(path.as_ref())) {
            Some(Node::File(b)) => Some(b.clone()),
            _ => None,
        }
    }

    /// Whether anything is at `path`, seen from outside the workspace.
    pub fn exists_raw(&self, path: impl AsRef<Path>) -> bool {
        lock(&self.shared.tree).contains_key(&self.abs(path.as_ref()))
    }

    /// Answer lines that `matcher` fits with `run`. A line is answered by
    /// the latest script added for exactly that line, else by the latest
    /// added for its program.
    pub fn on_command(&self, matcher: CommandMatch, run: MockRun) {
        lock(&self.shared.scripts).push((matcher, run));
    }

    /// The lines that reached the backend (allowed by the checker and the
    /// gate), in order.
    pub fn commands(&self) -> Vec<String> {
        lock(&self.shared.ran).clone()
    }

    fn judged(&self, asked: &Path, real: PathBuf, access: PathAccess) -> Result<Judged, FileError> {
        let roots: Vec<&Path> = match access {
            PathAccess::Write => self.jail.write_roots().collect(),
            PathAccess::Read => self.jail.read_roots().collect(),
        };
        let all: Vec<&Path> = self.jail.read_roots().collect();
        let best = roots.iter().filter(|r| real.starts_with(r)).max_by_key(|r| r.components().count());
        let Some(best) = best else {
            return Err(PolicyError::PathEscape {
                path: asked.to_path_buf(),
                why: format!("{} lies in none of the jail's roots", real.display()),
            }
            .into());
        };
        let index = all.iter().position(|r| r == best).unwrap_or(0);
        let rel = real.strip_prefix(best).map(Path::to_path_buf).unwrap_or_default();
        Ok(Judged::new(asked.to_path_buf(), real, index, rel, access))
    }

    fn writable(j: &Judged) -> Result<(), FileError> {
        match j.access() {
            PathAccess::Write => Ok(()),
            PathAccess::Read => Err(FileError::NotJudgedForWrite { path: j.asked().to_path_buf() }),
        }
    }
}

/// Make `dir` and its missing parents directories.
fn insert_dir_all(t: &mut Tree, dir: &Path) {
    for a in dir.ancestors() {
        if a.as_os_str().is_empty() {
            break;
        }
        if !matches!(t.get(a), Some(Node::Dir)) {
            t.insert(a.to_path_buf(), Node::Dir);
        }
    }
}

/// Remove everything strictly below `p`.
fn remove_below(t: &mut Tree, p: &Path) {
    let below: Vec<PathBuf> = t
        .range(p.to_path_buf()..)
        .map(|(k, _)| k)
        .take_while(|k| k.starts_with(p))
        .filter(|k| *k != p)
        .cloned()
        .collect();
    for k in below {
        t.remove(&k);
    }
}

/// The names of `dir`'s entries, in byte order.
fn children<'t>(t: &'t Tree, dir: &Path) -> Vec<(OsString, &'t PathBuf, &'t Node)> {
    t.range(dir.to_path_buf()..)
        .take_while(|(k, _)| k.starts_with(dir))
        .filter(|(k, _)| k.parent() == Some(dir))
        .filter_map(|(k, n)| k.file_name().map(|name| (name.to_os_string(), k, n)))
        .collect()
}

/// Every directory between `root` and `path` (exclusive) must be one:
/// `ENOTDIR` if a file is on the way, `ENOENT` if one is missing.
fn parents_ok(t: &Tree, root: &Path, path: &Path, op: &'static str, real: &Path) -> Result<(), FileError> {
    for dir in between(root, path) {
        match t.get(&dir) {
            Some(Node::Dir) => {}
            Some(Node::File(_)) => return Err(errno(op, real, libc::ENOTDIR)),
            None => return Err(errno(op, real, libc::ENOENT)),
        }
    }
    Ok(())
}

/// Make the directories between `root` and `path` (exclusive).
fn make_parents(t: &mut Tree, root: &Path, path: &Path, op: &'static str, real: &Path) -> Result<(), FileError> {
    for dir in between(root, path) {
        match t.get(&dir) {
            Some(Node::Dir) => {}
            Some(Node::File(_)) => return Err(errno(op, real, libc::ENOTDIR)),
            None => {
                t.insert(dir, Node::Dir);
            }
        }
    }
    Ok(())
}

/// The directories between `root` and `path` (both exclusive), outermost
/// first; none when `path` is not below `root`.
fn between(root: &Path, path: &Path) -> Vec<PathBuf> {
    let Ok(rel) = path.strip_prefix(root) else { return Vec::new() };
    let comps: Vec<_> = rel.components().collect();
    let mut cur = root.to_path_buf();
    let mut out = Vec::new();
    for c in comps.iter().take(comps.len().saturating_sub(1)) {
        cur.push(c);
        out.push(cur.clone());
    }
    out
}

impl MockBackend {
    fn root_of(&self, j: &Judged) -> PathBuf {
        let real = j.real();
        let rel = j.rel();
        let n = real.components().count() - rel.components().count();
        real.components().take(n).collect()
    }

    fn read_sync(&self, j: &Judged, opts: ReadOptions) -> Result<ReadWindow, FileError> {
        let t = lock(&self.shared.tree);
        parents_ok(&t, &self.root_of(j), j.real(), "read", j.real())?;
        match t.get(j.real()) {
            Some(Node::File(b)) => read_window(b.as_slice(), b.len() as u64, opts, j.real()),
            Some(Node::Dir) => Err(FileError::NotRegular { path: j.real().to_path_buf(), kind: Kind::Dir }),
            None => Err(errno("read", j.real(), libc::ENOENT)),
        }
    }

    fn write_sync(&self, j: &Judged, data: Vec<u8>) -> Result<Written, FileError> {
        MockBackend::writable(j)?;
        let real = j.real();
        let mut t = lock(&self.shared.tree);
        if j.rel().as_os_str().is_empty() {
            return Err(errno("write", real, libc::EISDIR));
        }
        make_parents(&mut t, &self.root_of(j), real, "write", real)?;
        let created = match t.get(real) {
            Some(Node::Dir) => return Err(errno("write", real, libc::EISDIR)),
            Some(Node::File(_)) => false,
            None => true,
        };
        let w = Written { bytes: data.len() as u64, created, hash: super::files::sha256_hex(&data) };
        t.insert(real.to_path_buf(), Node::File(data));
        Ok(w)
    }

    fn edit_sync(&self, j: &Judged, edits: &[Edit], expect: Option<String>, multi: bool) -> Result<Edited, FileError> {
        MockBackend::writable(j)?;
        let real = j.real();
        let mut t = lock(&self.shared.tree);
        parents_ok(&t, &self.root_of(j), real, "edit", real)?;
        let content = match t.get(real) {
            Some(Node::File(b)) => b.clone(),
            Some(Node::Dir) => return Err(FileError::NotRegular { path: real.to_path_buf(), kind: Kind::Dir }),
            None => return Err(errno("edit", real, libc::ENOENT)),
        };
        let (content, edited) = apply_edits(content, edits, expect, multi, real)?;
        t.insert(real.to_path_buf(), Node::File(content));
        Ok(edited)
    }

    fn mkdir_sync(&self, j: &Judged) -> Result<(), FileError> {
        MockBackend::writable(j)?;
        let real = j.real();
        let mut t = lock(&self.shared.tree);
        make_parents(&mut t, &self.root_of(j), real, "mkdir", real)?;
        match t.get(real) {
            Some(Node::Dir) => Ok(()),
            Some(Node::File(_)) => Err(errno("mkdir", real, libc::EEXIST)),
            None => {
                t.insert(real.to_path_buf(), Node::Dir);
                Ok(())
            }
        }
    }

    fn remove_sync(&self, j: &Judged) -> Result<(), FileError> {
        MockBackend::writable(j)?;
        let real = j.real();
        if j.rel().as_os_str().is_empty() {
            return Err(FileError::Io {
                op: "remove",
                path: real.to_path_buf(),
                source: io::Error::other("a root of the jail is not removed"),
            });
        }
        let mut t = lock(&self.shared.tree);
        parents_ok(&t, &self.root_of(j), real, "remove", real)?;
        match t.get(real) {
            None => Err(errno("remove", real, libc::ENOENT)),
            Some(Node::Dir) if !children(&t, real).is_empty() => Err(errno("remove", real, libc::ENOTEMPTY)),
            Some(_) => {
                t.remove(real);
                Ok(())
            }
        }
    }

    fn list_sync(&self, rel: &Path, opts: &ListOptions) -> Result<ListResult, ListError> {
        let root = &self.root;
        let deny = self.jail.deny();
        let ignore = DenyGlobs::new(&opts.ignore).map_err(ListError::BadIgnore)?;
        let outside = || ListError::Outside { path: rel.to_path_buf(), root: root.clone() };
        let rel = if rel.is_absolute() { rel.strip_prefix(root).map_err(|_| outside())? } else { rel };
        let t = lock(&self.shared.tree);
        let open_err =
            |path: &Path, e: i32| ListError::Open { path: path.to_path_buf(), source: io::Error::from_raw_os_error(e) };
        let mut start = PathBuf::new();
        for c in rel.components() {
            match c {
                Component::CurDir => continue,
                Component::Normal(name) => {
                    start.push(name);
                    if let Some(g) = deny.matching(root, &root.join(&start)) {
                        return Err(ListError::Denied { path: start, glob: g.to_string() });
                    }
                    match t.get(&root.join(&start)) {
                        Some(Node::Dir) => {}
                        Some(Node::File(_)) => return Err(open_err(&start, libc::ENOTDIR)),
                        None => return Err(open_err(&start, libc::ENOENT)),
                    }
                }
                _ => return Err(outside()),
            }
        }
        let mut out = ListResult::default();
        let max = opts.max_entries as usize;
        list_walk(&t, root, deny, &ignore, &start, opts.depth.max(1), max, &mut out);
        Ok(out)
    }
}

/// List `at` (relative to `root`) `levels` deep; false once full.
#[allow(clippy::too_many_arguments)]
fn list_walk(
    t: &Tree,
    root: &Path,
    deny: &DenyGlobs,
    ignore: &DenyGlobs,
    at: &Path,
    levels: u32,
    max: usize,
    out: &mut ListResult,
) -> bool {
    for (name, abs, node) in children(t, &root.join(at)) {
        let path = at.join(&name);
        if deny.matching(root, abs).is_some() {
            out.skipped_denied += 1;
            continue;
        }
        if ignore.matching(root, abs).is_some() {
            out.skipped_ignored += 1;
            continue;
        }
        if out.entries.len() >= max {
            out.truncated = true;
            return false;
        }
        let (kind, size) = match node {
            Node::File(b) => (EntryKind::File, b.len() as u64),
            Node::Dir => (EntryKind::Dir, 0),
        };
        out.entries.push(ListEntry { path: path.clone(), kind, size, target: None });
        if kind == EntryKind::Dir && levels > 1 && !list_walk(t, root, deny, ignore, &path, levels - 1, max, out) {
            return false;
        }
    }
    true
}

/// The ignore rules of the directories walked so far: each directory's
/// `.ignore` (first) and `.gitignore` matchers, deepest last.
struct IgnoreStack(Vec<Gitignore>);

impl IgnoreStack {
    fn push_dir(&mut self, t: &Tree, dir: &Path) -> usize {
        let mut n = 0;
        // `.ignore` takes precedence over `.gitignore`: checked first.
        for name in IGNORE_FILES.iter().rev() {
            if let Some(Node::File(b)) = t.get(&dir.join(name)) {
                let mut g = GitignoreBuilder::new(dir);
                for line in String::from_utf8_lossy(b).lines() {
                    let _ = g.add_line(None, line);
                }
                if let Ok(g) = g.build() {
                    self.0.push(g);
                    n += 1;
                }
            }
        }
        n
    }

    fn pop(&mut self, n: usize) {
        for _ in 0..n {
            self.0.pop();
        }
    }

    fn ignored(&self, path: &Path, is_dir: bool) -> bool {
        for g in self.0.iter().rev() {
            let m = g.matched(path, is_dir);
            if m.is_ignore() {
                return true;
            }
            if m.is_whitelist() {
                return false;
            }
        }
        false
    }
}

/// What a search walk visits: the rules, the counts, and what to do with
/// each file (false: stop).
struct SearchWalk<'a> {
    t: &'a Tree,
    root: &'a Path,
    deny: &'a DenyGlobs,
    gitignore: bool,
    default_ignores: bool,
    counts: &'a Counts,
    rules: IgnoreStack,
}

impl SearchWalk<'_> {
    /// Whether the walk may read `dir`'s ignore files (none is denied).
    fn ignore_files_safe(&self, dir: &Path) -> bool {
        for name in IGNORE_FILES {
            let p = dir.join(name);
            if self.t.contains_key(&p) && self.deny.matching(self.root, &p).is_some() {
                bump(&self.counts.denied);
                return false;
            }
        }
        true
    }

    fn walk(&mut self, dir: &Path, f: &mut dyn FnMut(&Path, &[u8]) -> bool) -> bool {
        let pushed = if self.gitignore { self.rules.push_dir(self.t, dir) } else { 0 };
        let go = self.walk_entries(dir, f);
        self.rules.pop(pushed);
        go
    }

    fn walk_entries(&mut self, dir: &Path, f: &mut dyn FnMut(&Path, &[u8]) -> bool) -> bool {
        for (name, abs, node) in children(self.t, dir) {
            let is_dir = matches!(node, Node::Dir);
            if self.gitignore && self.rules.ignored(abs, is_dir) {
                continue;
            }
            if self.default_ignores && is_dir && name.to_str().is_some_and(|n| DEFAULT_IGNORED.contains(&n)) {
                bump(&self.counts.ignored);
                continue;
            }
            if self.deny.matching(self.root, abs).is_some() {
                bump(&self.counts.denied);
                continue;
            }
            match node {
                Node::Dir => {
                    if self.gitignore && !self.ignore_files_safe(abs) {
                        continue;
                    }
                    if !self.walk(abs, f) {
                        return false;
                    }
                }
                Node::File(b) => {
                    if !f(abs, b) {
                        return false;
                    }
                }
            }
        }
        true
    }
}

impl MockBackend {
    /// The walk's rules from the root down to `start`'s parent (what the
    /// local walk adds for the directories above its start).
    fn walk_from<'a>(
        &'a self,
        t: &'a Tree,
        start: &Path,
        gitignore: bool,
        default_ignores: bool,
        counts: &'a Counts,
    ) -> Result<SearchWalk<'a>, SearchError> {
        let mut w = SearchWalk {
            t,
            root: &self.root,
            deny: self.jail.deny(),
            gitignore,
            default_ignores,
            counts,
            rules: IgnoreStack(Vec::new()),
        };
        if gitignore {
            let rel = start.strip_prefix(&self.root).unwrap_or(Path::new(""));
            if matches!(t.get(start), Some(Node::Dir)) && !w.ignore_files_safe(start) {
                return Err(SearchError::BadPath {
                    path: rel.to_path_buf(),
                    reason: "its .gitignore or .ignore is not a regular file, or is denied, and the walk would open \
                             it: remove it, or search with the ignore rules off"
                        .into(),
                });
            }
            let comps: Vec<_> = rel.components().collect();
            if let Some((_, above)) = comps.split_last() {
                let mut dir = self.root.clone();
                for c in std::iter::once(None).chain(above.iter().map(Some)) {
                    if let Some(c) = c {
                        dir.push(c);
                    }
                    if w.ignore_files_safe(&dir) {
                        w.rules.push_dir(t, &dir);
                    }
                }
            }
        }
        Ok(w)
    }

    /// `rel` checked to be a plain path below the root, existing, not
    /// denied (as the local search checks its start).
    fn start_path(&self, t: &Tree, rel: &Path) -> Result<PathBuf, SearchError> {
        let bad = |reason: &str| SearchError::BadPath { path: rel.to_path_buf(), reason: reason.into() };
        let mut cur = self.root.clone();
        for c in rel.components() {
            match c {
                Component::CurDir => {}
                Component::Normal(n) => {
                    cur.push(n);
                    if !t.contains_key(&cur) {
                        return Err(bad("no such file or directory"));
                    }
                    if let Some(g) = self.jail.deny().matching(&self.root, &cur) {
                        return Err(SearchError::Denied { path: rel.to_path_buf(), glob: g.to_string() });
                    }
                }
                _ => return Err(bad("must be relative to the workspace, without `..`")),
            }
        }
        Ok(cur)
    }

    fn grep_sync(&self, opts: &GrepOptions) -> Result<GrepResult, SearchError> {
        let m = matcher(opts)?;
        let filter = opts.glob.as_deref().map(NameGlob::new).transpose()?;
        let t = lock(&self.shared.tree);
        let start = match &opts.path {
            Some(p) => self.start_path(&t, p)?,
            None => self.root.clone(),
        };
        let counts = Counts::default();
        let context = opts.context.min(MAX_CONTEXT);
        let mut s = searcher(opts).build();
        // The local search reads through a buffer no larger than this: a
        // longer line fails it (`long_line`); a slice is whole in memory, so
        // the same bound is checked here.
        let heap =
            opts.max_line_bytes.max(1024).saturating_add(context.saturating_mul(2).saturating_mul(opts.line_cap));
        let found = AtomicUsize::new(0);
        let stop = AtomicBool::new(false);
        let mut files: Vec<Vec<super::search::GrepMatch>> = Vec::new();
        let root = self.root.clone();
        let mut search = |abs: &Path, bytes: &[u8]| -> bool {
            let Ok(rel) = abs.strip_prefix(&root) else { return true };
            if filter.as_ref().is_some_and(|f| !f.matches(rel)) {
                return true;
            }
            if bytes.split(|b| *b == b'\n').any(|l| l.len() > heap) {
                bump(&counts.long_line);
                return true;
            }
            let mut sink = FileSink {
                lines: Vec::new(),
                cap: opts.line_cap,
                found: &found,
                max: opts.max_results,
                stop: &stop,
                mine: 0,
                binary: false,
            };
            let r = s.search_slice(&m, bytes, &mut sink);
            files.extend(tally(r, false, sink, rel, context, &counts));
            !stop.load(Ordering::Relaxed)
        };
        match t.get(&start) {
            Some(Node::File(b)) => {
                search(&start, b);
            }
            _ => {
                let mut w = self.walk_from(&t, &start, opts.gitignore, opts.default_ignores, &counts)?;
                w.walk(&start, &mut search);
            }
        }
        let matches = files.into_iter().flatten().collect();
        Ok(GrepResult {
            matches,
            files_searched: counts.searched.load(Ordering::Relaxed),
            files_skipped: counts.skipped(),
            lines_cut: counts.cut.load(Ordering::Relaxed),
            truncated: stop.load(Ordering::Relaxed),
        })
    }

    fn glob_sync(&self, pattern: &str, max: usize) -> Result<GlobResult, SearchError> {
        let g = NameGlob::new(pattern)?;
        let t = lock(&self.shared.tree);
        let counts = Counts::default();
        let mut paths = Vec::new();
        let mut truncated = false;
        let root = self.root.clone();
        let mut w = self.walk_from(&t, &root, true, true, &counts)?;
        w.walk(&root, &mut |abs, _| {
            let Ok(rel) = abs.strip_prefix(&root) else { return true };
            if !g.matches(rel) {
                return true;
            }
            if paths.len() >= max {
                truncated = true;
                return false;
            }
            paths.push(rel.to_string_lossy().into_owned());
            true
        });
        paths.sort();
        Ok(GlobResult { paths, skipped: counts.skipped(), truncated })
    }
}

impl MockBackend {
    /// The script that answers `line`, if any: an exact line before a
    /// program, the latest added first.
    fn script(&self, line: &str) -> Option<MockRun> {
        let scripts = lock(&self.shared.scripts);
        let exact = |m: &CommandMatch| matches!(m, CommandMatch::Line(_));
        let find = |want: bool| scripts.iter().rev().find(|(m, _)| exact(m) == want && m.matches(line));
        find(true).or_else(|| find(false)).map(|(_, r)| r.clone())
    }

    /// Whether the sandbox would let the command write `path`: within its
    /// effective access, not a protected carve-out, not masked by the deny
    /// list, not through a file.
    fn write_lands(&self, runner: &Runner, req: &ExecRequest, effective: &Access, ws_real: &Path, path: &Path) -> bool {
        if !effective.permits(path, ws_real) {
            return false;
        }
        if runner.carve_outs_unplanned(req).iter().any(|p| path.starts_with(p)) {
            return false;
        }
        if runner.denied_unplanned(req, path) || self.jail.deny().matching(&self.root, path).is_some() {
            return false;
        }
        true
    }

    async fn run_script(
        &self,
        runner: &Runner,
        line: &str,
        req: &ExecRequest,
        effective: &Access,
        ws_real: &Path,
        mut run: RunOptions,
    ) -> ExecResult {
        let started = Instant::now();
        lock(&self.shared.ran).push(line.to_string());
        let script = self.script(line).unwrap_or_else(|| MockRun {
            exit_code: UNSCRIPTED,
            stderr: format!(
                "portcullis mock: no scripted result for `{line}`: nothing ran (script it with \
                 MockBackend::on_command)\n"
            )
            .into_bytes(),
            ..MockRun::default()
        });
        let wait = match req.timeout {
            Some(t) if t < script.delay => t,
            _ => script.delay,
        };
        let cancel = run.cancel.clone().unwrap_or_default();
        let mut outcome = tokio::select! {
            () = tokio::time::sleep(wait) => Outcome::Exited { code: script.exit_code },
            () = cancel.cancelled() => Outcome::Cancelled,
        };
        if matches!(outcome, Outcome::Exited { .. }) && wait < script.delay {
            outcome = Outcome::TimedOut;
        }
        let mut refused = if req.report_refused_writes {
            RefusedWrites { state: ReportState::Observed, ..RefusedWrites::off() }
        } else {
            RefusedWrites::off()
        };
        let mut failures = Vec::new();
        if matches!(outcome, Outcome::Exited { .. }) {
            for (p, data) in &script.writes {
                let abs = crate::path::lexical(&if p.is_absolute() { p.clone() } else { ws_real.join(p) });
                if !self.write_lands(runner, req, effective, ws_real, &abs) {
                    if req.report_refused_writes {
                        refused.count += 1;
                        if refused.sample.len() < SAMPLE_CAP && !refused.sample.contains(&abs) {
                            refused.sample.push(abs);
                        }
                    }
                    continue;
                }
                // Permitted: made with its missing parents (a script says
                // what a command wrote, not how). A file where a directory
                // or a directory where the file should be is no refusal of
                // the kernel's: said on stderr, not written.
                let mut t = lock(&self.shared.tree);
                let blocked = abs.ancestors().skip(1).find(|a| matches!(t.get(*a), Some(Node::File(_))));
                match (blocked, t.get(&abs)) {
                    (Some(f), _) => failures.push(format!("{}: {} is a file", abs.display(), f.display())),
                    (None, Some(Node::Dir)) => failures.push(format!("{}: a directory", abs.display())),
                    (None, _) => {
                        if let Some(parent) = abs.parent() {
                            insert_dir_all(&mut t, parent);
                        }
                        t.insert(abs.clone(), Node::File(data.clone()));
                    }
                }
            }
        }
        let (mut stdout, mut stderr, mut truncated) = (Vec::new(), Vec::new(), false);
        if matches!(outcome, Outcome::Exited { .. }) {
            // One cap over both streams, as the sandbox keeps them.
            let mut script_err = script.stderr.clone();
            for f in &failures {
                script_err.extend_from_slice(format!("portcullis mock: scripted write not made: {f}\n").as_bytes());
            }
            let out = script.stdout.len().min(req.max_output_bytes);
            let err = script_err.len().min(req.max_output_bytes - out);
            truncated = out < script.stdout.len() || err < script_err.len();
            stdout.extend_from_slice(&script.stdout[..out]);
            stderr.extend_from_slice(&script_err[..err]);
            if let Some(sink) = run.on_output.as_mut() {
                for (stream, part) in [(Stream::Stdout, &stdout), (Stream::Stderr, &stderr)] {
                    if !part.is_empty() {
                        sink(stream, part);
                    }
                }
            }
        }
        ExecResult {
            outcome,
            truncated,
            writable: effective.writable,
            write_grants: effective.write_grants.clone(),
            duration: started.elapsed(),
            enforcement: Enforcement::none(req.degraded.unwrap_or(Mode::Full), req.network),
            stdout,
            stderr,
            refused_writes: refused,
            warnings: Vec::new(),
        }
    }
}

/// A command's script run, as the runner's [`Executor`]: `R` is the
/// runner, borrowed for a foreground command and shared (`Arc`) for a
/// background job, which outlives the call that started it.
struct MockExec<R> {
    mock: MockBackend,
    runner: R,
    line: String,
}

impl<R: std::borrow::Borrow<Runner> + Send + Sync> Executor for MockExec<R> {
    fn execute<'a>(
        &'a self,
        request: &'a ExecRequest,
        effective: &'a Access,
        ws_real: &'a Path,
        run: RunOptions,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<ExecResult, SandboxError>> + Send + 'a>> {
        Box::pin(async move {
            Ok(self.mock.run_script(self.runner.borrow(), &self.line, request, effective, ws_real, run).await)
        })
    }
}

impl Backend for MockBackend {
    fn root(&self) -> &Path {
        &self.root
    }

    fn jail(&self) -> &PathJail {
        &self.jail
    }

    fn fs_backend(&self) -> gate::Backend {
        gate::Backend::Mock
    }

    fn job_executor(&self, runner: Arc<Runner>, line: &str) -> Option<Arc<dyn Executor>> {
        Some(Arc::new(MockExec { mock: self.clone(), runner, line: line.to_string() }))
    }

    fn sandboxed(&self) -> bool {
        false
    }

    fn judge(&self, path: &Path, access: PathAccess) -> Result<Judged, FileError> {
        let real = self.jail.resolve(path, access)?;
        self.judged(path, real, access)
    }

    fn judge_remove(&self, path: &Path) -> Result<Judged, FileError> {
        // No links in the tree: a removal is judged as a write.
        self.judge(path, PathAccess::Write)
    }

    fn read_file<'a>(&'a self, j: &'a Judged, opts: ReadOptions) -> BoxFuture<'a, Result<ReadWindow, FileError>> {
        Box::pin(async move { self.read_sync(j, opts) })
    }

    fn write_file<'a>(&'a self, j: &'a Judged, data: Vec<u8>) -> BoxFuture<'a, Result<Written, FileError>> {
        Box::pin(async move { self.write_sync(j, data) })
    }

    fn edit<'a>(
        &'a self,
        j: &'a Judged,
        edits: Vec<Edit>,
        expect_hash: Option<String>,
        multi: bool,
    ) -> BoxFuture<'a, Result<Edited, FileError>> {
        Box::pin(async move {
            if edits.len() > super::files::MAX_EDITS {
                return Err(FileError::TooManyEdits { path: j.asked().to_path_buf(), count: edits.len() });
            }
            self.edit_sync(j, &edits, expect_hash, multi || edits.len() != 1)
        })
    }

    fn mkdir<'a>(&'a self, j: &'a Judged) -> BoxFuture<'a, Result<(), FileError>> {
        Box::pin(async move { self.mkdir_sync(j) })
    }

    fn remove<'a>(&'a self, j: &'a Judged) -> BoxFuture<'a, Result<(), FileError>> {
        Box::pin(async move { self.remove_sync(j) })
    }

    fn exists<'a>(&'a self, j: &'a Judged) -> BoxFuture<'a, Result<bool, FileError>> {
        Box::pin(async move { Ok(lock(&self.shared.tree).contains_key(j.real())) })
    }

    fn list_dir<'a>(&'a self, path: &'a Path, opts: ListOptions) -> BoxFuture<'a, Result<ListResult, ListError>> {
        Box::pin(async move { self.list_sync(path, &opts) })
    }

    fn grep(&self, opts: GrepOptions) -> BoxFuture<'_, Result<GrepResult, SearchError>> {
        Box::pin(async move { self.grep_sync(&opts) })
    }

    fn glob<'a>(
        &'a self,
        pattern: &'a str,
        max: usize,
        // The mock's tree is in memory: its walk ends before a cancel could matter.
        _cancel: Option<tokio_util::sync::CancellationToken>,
    ) -> BoxFuture<'a, Result<GlobResult, SearchError>> {
        Box::pin(async move { self.glob_sync(pattern, max) })
    }

    fn exec<'a>(
        &'a self,
        runner: &'a Runner,
        line: &'a str,
        opts: ExecOptions,
        run: RunOptions,
    ) -> BoxFuture<'a, Result<Exec, RunError>> {
        Box::pin(async move {
            let x = MockExec { mock: self.clone(), runner, line: line.to_string() };
            runner.exec_line_with(line, &opts, run, &x).await
        })
    }

    fn scope(&self, dir: &Path, policy: &WorkspacePolicy) -> Result<Arc<dyn Backend>, FileError> {
        match lock(&self.shared.tree).get(dir) {
            Some(Node::Dir) => {}
            Some(Node::File(_)) => return Err(errno("scope", dir, libc::ENOTDIR)),
            None => return Err(errno("scope", dir, libc::ENOENT)),
        }
        let jail = PathJail::virtual_root(policy)?;
        Ok(Arc::new(MockBackend { shared: Arc::clone(&self.shared), root: jail.root().to_path_buf(), jail }))
    }
}
