//! Where host git would take code and configuration from: the git dirs of
//! the workspace and of its submodules, found on the trusted side without
//! ever running git on the (possibly hostile) repository.
//!
//! [`discover`] starts at the workspace's `.git` (a directory, or a
//! `gitdir:` file with its `commondir`) and finds submodule working trees
//! the way git does: the gitlinks (mode 160000) in each working tree's
//! index, the `path` values of its `.gitmodules`, and the `core.worktree`
//! of every module git dir under `modules/` (module names of any depth,
//! nested submodules in `modules/<name>/modules/<name>`). A submodule's
//! `.git` is followed whether it is a `gitdir:` file or an embedded
//! directory, and its own index, `.gitmodules` and `modules/` are searched
//! in turn. Every read is of a small regular file (or a bounded index),
//! never blocking on a FIFO, and the whole search is bounded.

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Component, Path, PathBuf};

use super::{PathRefusal, SandboxError};
use crate::path::walk::WalkError;
use crate::path::{in_areas, lexical, memo, replaceable_link, walk_as_far_as_possible};

/// Files in a git dir that make git read config and hooks elsewhere.
/// A missing `hooks` directory is guarded the same way.
pub const GIT_REDIRECTS: &[&str] = &["commondir", "config.worktree", "hooks", "config"];
/// The files of a git dir kept read-only when they exist.
const GIT_FILES: &[&str] = &["hooks", "config", "config.worktree", "commondir", "gitdir"];
/// Largest git file (config, gitfile, `.gitmodules`) read while planning.
const GIT_FILE_MAX: u64 = 1 << 20;
/// Largest index read while planning (a very large monorepo's is a few
/// hundred MiB; it is streamed, not held).
const INDEX_MAX: u64 = 1 << 30;
/// Most submodules nested inside one another.
const MAX_NESTING: usize = 16;
/// Most git dirs plus submodule working trees in one workspace.
const MAX_REPOS: usize = 10_000;
/// Most directory entries listed while walking `modules/` directories.
const MODULES_WALK_LIMIT: usize = 200_000;
/// Most components of one module name (`a/b/c` has three).
const MODULE_NAME_DEPTH: usize = 64;
/// Most entries of one hooks directory looked at for links.
const HOOK_ENTRIES_MAX: usize = 10_000;

/// A git dir and the working tree it serves, when known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct GitDir {
    /// The git dir's real path.
    pub path: PathBuf,
    /// The working tree whose index this git dir holds (a relative
    /// `core.hooksPath` is taken against it); `None` for a common dir or a
    /// module git dir whose working tree is unknown.
    pub worktree: Option<PathBuf>,
}

/// Everything git would read for the workspace and its submodules.
#[derive(Debug, Default)]
pub(super) struct Layout {
    /// Every git dir, top-level first.
    pub dirs: Vec<GitDir>,
    /// `.git` files (`gitdir: …`) of working trees: a linked worktree's at
    /// the workspace root, and every populated submodule's.
    pub gitfiles: Vec<PathBuf>,
    /// A submodule working tree's `.git` that does not exist, though git
    /// would look there (an unpopulated submodule), and git dirs a gitfile
    /// or a `commondir` names that do not exist yet.
    pub unpopulated: Vec<PathBuf>,
    /// Paths as written in `gitdir:` files and `commondir` files, before
    /// any link is resolved: git follows them again on every run.
    pub spelled: Vec<PathBuf>,
    /// Every index read (the working tree it serves and its hash), for the
    /// after-run look for gitlinks the command added.
    pub indexes: Vec<GitIndex>,
    /// Every working tree looked at (the workspace and each submodule's),
    /// whose `.git` is protected or guarded.
    pub trees: Vec<PathBuf>,
}

impl Layout {
    /// Add what `other` found (the layout of the workspace a scope is of),
    /// each git dir once.
    pub fn merge(&mut self, other: Layout) {
        for d in other.dirs {
            if !self.dirs.iter().any(|k| k.path == d.path) {
                self.dirs.push(d);
            }
        }
        let add = |to: &mut Vec<PathBuf>, from: Vec<PathBuf>| {
            for p in from {
                if !to.contains(&p) {
                    to.push(p);
                }
            }
        };
        add(&mut self.gitfiles, other.gitfiles);
        add(&mut self.unpopulated, other.unpopulated);
        add(&mut self.spelled, other.spelled);
        add(&mut self.trees, other.trees);
        for i in other.indexes {
            if !self.indexes.contains(&i) {
                self.indexes.push(i);
            }
        }
    }
}

/// A git index and the working tree whose gitlinks it holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GitIndex {
    /// The index file (`<git dir>/index`).
    pub index: PathBuf,
    /// The working tree its paths are relative to.
    pub worktree: PathBuf,
    /// Whether its object names are SHA-256.
    pub sha256: bool,
    /// The gitlinks it held when the plan read it (relative to `worktree`,
    /// in canonical form): the after-run quarantine leaves these alone, in
    /// this index only, and takes every other gitlink for one the command
    /// added. Not the working trees the plan looked at: a tree named only in
    /// `.gitmodules` or a module git dir's `core.worktree`, or reached
    /// through a gitlink of an index the command made, could hold a
    /// repository the command planted in an earlier run (found in session
    /// 26's reviews: host git then ran its filter).
    pub links: Vec<PathBuf>,
}

impl Layout {
    /// The git dirs' paths.
    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.dirs.iter().map(|d| d.path.as_path())
    }

    /// The directory `core.hooksPath` names in `gd`'s config, if set:
    /// absolute, `~/` against `$HOME`, or relative to the working tree the
    /// hooks run in (the workspace when that is unknown).
    pub fn hooks_path(&self, gd: &GitDir, ws: &Path) -> Option<PathBuf> {
        let hp = hooks_path(&gd.path.join("config"))?;
        let p = match hp.strip_prefix("~") {
            Ok(rest) if hp.as_os_str().as_encoded_bytes().starts_with(b"~/") => {
                PathBuf::from(std::env::var_os("HOME")?).join(rest)
            }
            _ if hp.is_absolute() => hp,
            _ => gd.worktree.as_deref().unwrap_or(ws).join(hp),
        };
        // Spelled as git opens it, `..` kept (see `git_includes`).
        Some(p)
    }

    /// Paths git reads code or configuration from, to be kept read-only
    /// where they exist: each git dir's [`GIT_FILES`], its `core.hooksPath`
    /// directory and the files its config includes, and the `.git` files.
    pub fn wanted(&self, ws: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for gd in &self.dirs {
            out.extend(GIT_FILES.iter().map(|n| gd.path.join(n)));
            out.extend(self.hooks_path(gd, ws));
            out.extend(git_includes_deep(&gd.path.join("config")));
        }
        out.extend(self.gitfiles.iter().cloned());
        out
    }

    /// Refuse a run in which a planted file where git reads would hang or
    /// exhaust planning; only files `ours` (that the command could have
    /// planted) are judged.
    pub fn check_files(&self, ws: &Path, ours: &dyn Fn(&Path) -> bool) -> Result<(), SandboxError> {
        let dotgit = ws.join(".git");
        if !memo::is_dir(&dotgit) {
            check_git_file(&dotgit)?;
        }
        for f in self.gitfiles.iter().filter(|f| ours(f)) {
            check_git_file(f)?;
        }
        for gd in self.dirs.iter().filter(|gd| ours(&gd.path)) {
            for name in ["config", "commondir", "config.worktree", "gitdir"] {
                check_git_file(&gd.path.join(name))?;
            }
            for inc in git_includes_deep(&gd.path.join("config")).into_iter().filter(|p| ours(p)) {
                check_git_file(&inc)?;
            }
        }
        Ok(())
    }

    /// Refuse when a `gitdir:` or `commondir` path goes through a symbolic
    /// link in a writable area: the command could point it elsewhere, and
    /// host git would follow the new link after the run.
    pub fn check_spelled(&self, areas: &[PathBuf]) -> Result<(), SandboxError> {
        for s in &self.spelled {
            if let Some(link) = replaceable_link(s, areas) {
                return Err(SandboxError::unsafe_path(
                    s.to_path_buf(),
                    PathRefusal::ReplaceableLink,
                    format!(
                        "the git dir {} is reached through the symbolic link {} in a writable area, which the command \
                     could point elsewhere; replace the link with the real directory, or run read-only",
                        s.display(),
                        link.display()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Where the links in the hooks directories (each git dir's `hooks` and
    /// `core.hooksPath` directory) lead: git runs the target, so a target in
    /// a writable area must be kept read-only too (or, when missing, removed
    /// after the run if the command creates it). A target reached through a
    /// link in a writable area refuses the run: the command could repoint
    /// that link instead.
    pub fn hook_link_targets(&self, ws: &Path, areas: &[PathBuf]) -> Result<Vec<PathBuf>, SandboxError> {
        let mut out = BTreeSet::new();
        if areas.is_empty() {
            return Ok(Vec::new());
        }
        let hook_dirs: BTreeSet<PathBuf> = self
            .dirs
            .iter()
            .flat_map(|gd| std::iter::once(gd.path.join("hooks")).chain(self.hooks_path(gd, ws)))
            .collect();
        for dir in &hook_dirs {
            // getdents64 into our own buffer, not opendir (`path::dents`):
            // listed before every writable command in a git workspace.
            let Ok(entries) = crate::path::dents::list_path(dir, HOOK_ENTRIES_MAX + 1) else { continue };
            for (i, (name, kind)) in entries.into_iter().enumerate() {
                if i >= HOOK_ENTRIES_MAX {
                    return Err(SandboxError::limit(
                        "entries of a hooks directory",
                        HOOK_ENTRIES_MAX,
                        format!(
                            "the hooks directory {} has more than {HOOK_ENTRIES_MAX} entries; git runs them, so \
                         portcullis checks each: remove the extra entries",
                            dir.display()
                        ),
                    ));
                }
                if kind != crate::path::dents::EntryType::Symlink {
                    continue;
                }
                let entry = dir.join(std::ffi::OsStr::from_bytes(name.as_bytes()));
                // The entry itself sits in the hooks directory (read-only
                // where it matters); any further link on the way is judged,
                // also on a way that cannot be resolved to the end (a `..`
                // after a missing directory, a loop): every link met counts,
                // as in `replaceable_link`.
                let walked = walk_as_far_as_possible(&entry);
                if let Some(link) = walked.links.into_iter().filter(|l| *l != entry).find(|l| in_areas(l, areas)) {
                    return Err(SandboxError::HookThroughLink { hook: entry, link });
                }
                // A way that stops in a writable area: the command could
                // create what comes next (the missing directory before a
                // `..`), and host git would run what it then leads to. Its
                // target cannot be protected, for it names no place yet.
                if let Some((stuck, why)) = walked.stuck {
                    if areas.iter().any(|a| stuck.starts_with(a)) {
                        let reason = match why {
                            WalkError::Escape(why) => why,
                            WalkError::Io(e) => e.to_string(),
                        };
                        return Err(SandboxError::HookUnresolved { hook: entry, stuck, reason });
                    }
                }
                if let Some(target) = link_target(&entry) {
                    // A link to another hook in a hooks directory is covered
                    // by that directory's own carve-out.
                    if hook_dirs.iter().any(|d| target.starts_with(d)) {
                        continue;
                    }
                    if areas.iter().any(|a| target.starts_with(a) && target != *a) {
                        out.insert(target);
                    }
                }
            }
        }
        Ok(out.into_iter().collect())
    }

    /// Files that git would read code or configuration from and that do not
    /// exist (so nothing can be mounted over them), in writable areas: each
    /// git dir's redirections, `core.hooksPath` directory and include
    /// targets, unpopulated submodules' `.git`, missing hook link targets
    /// (`extra`), and (`root_head`) a `HEAD` at the workspace root.
    pub fn guard(&self, ws: &Path, writable_areas: &[PathBuf], root_head: bool, extra: &[PathBuf]) -> Vec<PathBuf> {
        let mut out: BTreeSet<PathBuf> = BTreeSet::new();
        for gd in self.dirs.iter().filter(|gd| writable_areas.iter().any(|a| gd.path.starts_with(a))) {
            out.extend(GIT_REDIRECTS.iter().map(|n| gd.path.join(n)));
            out.extend(self.hooks_path(gd, ws));
            out.extend(git_includes_deep(&gd.path.join("config")));
        }
        out.extend(self.unpopulated.iter().cloned());
        out.extend(extra.iter().cloned());
        if root_head {
            out.insert(ws.join("HEAD"));
        }
        out.into_iter()
            .filter(|f| {
                let l = lexical(f);
                memo::symlink_metadata(f).is_err() && writable_areas.iter().any(|a| l.starts_with(a) && l != *a)
            })
            .collect()
    }
}

/// Where the link `entry` finally leads: its real path, or for a missing
/// target the real path of its deepest existing ancestor with the rest
/// appended (`None` when a `..` follows a missing component).
fn link_target(entry: &Path) -> Option<PathBuf> {
    if let Ok(real) = memo::canonicalize(entry) {
        return Some(real);
    }
    let t = memo::read_link(entry).ok()?;
    let t = if t.is_absolute() { t } else { entry.parent()?.join(t) };
    let mut rest: Vec<&std::ffi::OsStr> = Vec::new();
    let mut cur = t.as_path();
    loop {
        if let Ok(real) = memo::canonicalize(cur) {
            let mut out = real;
            for c in rest.iter().rev() {
                out.push(c);
            }
            return Some(out);
        }
        match cur.components().next_back()? {
            Component::Normal(n) => rest.push(n),
            _ => return None,
        }
        cur = cur.parent()?;
    }
}

/// Find the workspace's git dirs, submodules included. `deep` also reads
/// indexes and `.gitmodules` to find submodule working trees (only needed
/// when something is writable); `ours` are the workspace and the writable
/// areas, the only places where a submodule working tree is looked for.
pub(super) fn discover(ws: &Path, areas: &[PathBuf], deep: bool) -> Result<Layout, SandboxError> {
    let mut d = Discovery { ws, areas, deep, layout: Layout::default(), trees: BTreeSet::new(), walked: 0 };
    d.top()?;
    d.layout.trees = std::mem::take(&mut d.trees).into_iter().collect();
    Ok(d.layout)
}

struct Discovery<'a> {
    ws: &'a Path,
    areas: &'a [PathBuf],
    deep: bool,
    layout: Layout,
    /// Working trees already looked at.
    trees: BTreeSet<PathBuf>,
    /// Entries listed under `modules/` so far.
    walked: usize,
}

impl Discovery<'_> {
    fn ours(&self, p: &Path) -> bool {
        p.starts_with(self.ws) || self.areas.iter().any(|a| p.starts_with(a))
    }

    fn too_many(&self) -> Result<(), SandboxError> {
        if self.layout.dirs.len() + self.trees.len() > MAX_REPOS {
            return Err(SandboxError::limit(
                "git dirs and submodules",
                MAX_REPOS,
                format!(
                    "{} holds more than {MAX_REPOS} git dirs and submodules; portcullis protects each, and stops here",
                    self.ws.display()
                ),
            ));
        }
        Ok(())
    }

    /// The workspace's own `.git`.
    fn top(&mut self) -> Result<(), SandboxError> {
        let ws = self.ws.to_path_buf();
        self.trees.insert(ws.clone());
        let dotgit = ws.join(".git");
        if memo::is_dir(&dotgit) {
            if memo::symlink_metadata(&dotgit).is_ok_and(|m| m.file_type().is_symlink()) {
                self.layout.spelled.push(dotgit.clone());
            }
            if let Ok(gd) = memo::canonicalize(&dotgit) {
                self.git_dir(gd, Some(ws), 0)?;
            }
        } else if memo::is_file(&dotgit) {
            self.layout.gitfiles.push(dotgit.clone());
            if let Some(gd) = self.follow_gitfile(&dotgit) {
                self.git_dir(gd, Some(ws), 0)?;
            }
        }
        Ok(())
    }

    /// The git dir a `gitdir:` file names (recording the path as spelled).
    fn follow_gitfile(&mut self, dotgit: &Path) -> Option<PathBuf> {
        let s = read_small(dotgit)?;
        let line = s.lines().find_map(|l| l.strip_prefix("gitdir:"))?.trim();
        let p = Path::new(line);
        let p = if p.is_absolute() { p.to_path_buf() } else { dotgit.parent()?.join(p) };
        self.layout.spelled.push(p.clone());
        let real = memo::canonicalize(&p).ok();
        if real.is_none() {
            // A gitfile naming a git dir that does not exist yet: nothing is
            // there to protect, and a command that makes it there makes the
            // tree's repository (config, hooks) its own. Guarded: removed
            // after the run if the command created it (fourth review).
            self.layout.unpopulated.push(p);
        }
        real
    }

    /// A git dir: its common dir, its linked worktrees' private dirs, its
    /// module git dirs and (`worktree` known) the submodules its working
    /// tree's index and `.gitmodules` name.
    fn git_dir(&mut self, gd: PathBuf, worktree: Option<PathBuf>, nesting: usize) -> Result<(), SandboxError> {
        if let Some(known) = self.layout.dirs.iter_mut().find(|d| d.path == gd) {
            if known.worktree.is_none() && worktree.is_some() {
                known.worktree = worktree.clone();
            } else {
                return Ok(());
            }
        } else {
            self.layout.dirs.push(GitDir { path: gd.clone(), worktree: worktree.clone() });
            self.too_many()?;
            if let Some(c) = read_small(&gd.join("commondir")) {
                let spelled = gd.join(c.trim());
                self.layout.spelled.push(spelled.clone());
                match memo::canonicalize(&spelled) {
                    Ok(common) => self.git_dir(common, None, nesting)?,
                    // A common dir that does not exist yet: guarded, as a
                    // gitfile's missing target is.
                    Err(_) => self.layout.unpopulated.push(spelled),
                }
            }
            // Linked worktrees' private git dirs (`commondir`, `gitdir`,
            // `config.worktree`) redirect git run in those worktrees.
            let linked = linked_worktrees(&gd);
            for (private, _) in &linked {
                if !self.layout.dirs.iter().any(|d| d.path == *private) {
                    self.layout.dirs.push(GitDir { path: private.clone(), worktree: None });
                    self.too_many()?;
                }
            }
            self.modules(&gd.join("modules"), 0, nesting)?;
            // Each linked worktree's own index (`worktrees/<id>/index`)
            // holds the gitlinks git enters when run there: its working
            // tree (its `.git` file kept read-only) is looked at like a
            // submodule's.
            if self.deep {
                for (private, wt) in linked {
                    let Some(wt) = wt else { continue };
                    let real = memo::canonicalize(&wt).unwrap_or_else(|_| lexical(&wt));
                    if self.ours(&real) {
                        self.tree(real.clone(), nesting)?;
                        self.git_dir(private, Some(real), nesting)?;
                    }
                }
            }
        }
        if let (true, Some(wt)) = (self.deep, worktree) {
            let sha256 = object_format_sha256(&gd);
            let index = gd.join("index");
            let links = gitlinks(&index, sha256, &|p| self.ours(p))?;
            match self.layout.indexes.iter_mut().find(|i| i.index == index) {
                Some(known) => {
                    for p in &links {
                        if !known.links.contains(p) {
                            known.links.push(p.clone());
                        }
                    }
                }
                None => self.layout.indexes.push(GitIndex {
                    index: index.clone(),
                    worktree: wt.clone(),
                    sha256,
                    links: links.clone(),
                }),
            }
            for p in links {
                self.submodule(&wt, &p, nesting + 1)?;
            }
            let gitmodules = wt.join(".gitmodules");
            if self.ours(&gitmodules) {
                check_gitmodules(&gitmodules)?;
            }
            for p in gitmodules_paths(&gitmodules) {
                self.submodule(&wt, &p, nesting + 1)?;
            }
        }
        Ok(())
    }

    /// Walk a `modules/` directory: a directory that looks like a git dir is
    /// a module git dir (its own `modules/` holds its nested submodules'),
    /// any other directory is part of a longer module name.
    fn modules(&mut self, dir: &Path, name_depth: usize, nesting: usize) -> Result<(), SandboxError> {
        let Ok(rd) = fs::read_dir(dir) else { return Ok(()) };
        for e in rd.flatten() {
            self.walked += 1;
            if self.walked > MODULES_WALK_LIMIT {
                return Err(SandboxError::limit(
                    "entries of the submodule git dirs' walk",
                    MODULES_WALK_LIMIT,
                    format!(
                        "the walk of the submodule git dirs under {} passed {MODULES_WALK_LIMIT} entries",
                        dir.display()
                    ),
                ));
            }
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let p = e.path();
            if looks_like_git_dir(&p) {
                if nesting + 1 > MAX_NESTING {
                    return Err(nested_too_deep(&p));
                }
                // The working tree the module git dir serves, when it says.
                let wt = core_worktree(&p);
                self.git_dir(p, None, nesting + 1)?;
                if let Some(wt) = wt {
                    self.tree_from_worktree_setting(&wt, nesting + 1)?;
                }
            } else if name_depth + 1 < MODULE_NAME_DEPTH {
                self.modules(&p, name_depth + 1, nesting)?;
            }
        }
        Ok(())
    }

    /// A working tree named by a module git dir's `core.worktree`: looked at
    /// only inside the workspace or a writable area.
    fn tree_from_worktree_setting(&mut self, wt: &Path, nesting: usize) -> Result<(), SandboxError> {
        let real = memo::canonicalize(wt).unwrap_or_else(|_| lexical(wt));
        if !self.ours(&real) || real == self.ws {
            return Ok(());
        }
        self.tree(real, nesting)
    }

    /// A submodule at `rel` (as an index or `.gitmodules` spells it) below
    /// the working tree `wt`.
    fn submodule(&mut self, wt: &Path, rel: &Path, nesting: usize) -> Result<(), SandboxError> {
        // git never enters a submodule path spelled with `.`, `..` or
        // `.git`. Through a symbolic link, `git status` does not enter it
        // (it takes the entry for gone) but `git ls-files` and `git grep
        // --recurse-submodules` do: a link in a writable area (the command
        // could point it at a repository of its own) refuses the run, a
        // link elsewhere is followed to the working tree git enters. A link
        // the command makes is caught after the run (a gitlink whose
        // working tree was not looked at here: `submodules::quarantine_new`).
        let mut cur = wt.to_path_buf();
        for c in rel.components() {
            match c {
                Component::Normal(n) if !n.eq_ignore_ascii_case(".git") => cur.push(n),
                _ => return Ok(()),
            }
            match memo::symlink_metadata(&cur) {
                Ok(m) if m.is_dir() => {}
                Ok(m) if m.file_type().is_symlink() => {
                    if in_areas(&cur, self.areas) {
                        return Err(SandboxError::unsafe_path(
                            cur.clone(),
                            PathRefusal::ReplaceableLink,
                            format!(
                                "the submodule {} (a gitlink or .gitmodules path of the working tree {}) goes through \
                             the symbolic link {}, which git follows when it enters submodules (git ls-files and git \
                             grep --recurse-submodules) and which a writable run could point at a repository of its \
                             own; git itself never adds a path beyond a link: remove the entry on the host (git \
                             -c core.fsmonitor= -c core.hooksPath=/dev/null rm -q --cached {}) or put the directory \
                             in place of the link",
                                rel.display(),
                                wt.display(),
                                cur.display(),
                                rel.display()
                            ),
                        ));
                    }
                    return match link_target(&wt.join(rel)) {
                        Some(real) if self.ours(&real) => self.tree(real, nesting),
                        _ => Ok(()),
                    };
                }
                // Not populated (yet), or a file (or a FIFO…) where the
                // directory belongs: git would look at its `.git` once the
                // directory is made, so the `.git` is guarded all the same
                // (the guard finds nothing while a file is on the way).
                _ => break,
            }
        }
        let full = wt.join(rel);
        if !self.ours(&full) {
            return Ok(());
        }
        self.tree(full, nesting)
    }

    /// A submodule working tree: its `.git` file, embedded `.git`
    /// directory, or (missing) the place git would look.
    fn tree(&mut self, wt: PathBuf, nesting: usize) -> Result<(), SandboxError> {
        if self.trees.contains(&wt) {
            return Ok(());
        }
        if nesting > MAX_NESTING {
            return Err(nested_too_deep(&wt));
        }
        self.trees.insert(wt.clone());
        self.too_many()?;
        let dotgit = wt.join(".git");
        match memo::symlink_metadata(&dotgit) {
            Err(_) => {
                self.layout.unpopulated.push(dotgit);
            }
            Ok(m) if m.file_type().is_symlink() => {
                // git follows a `.git` link; the link itself could be
                // repointed, which `check_spelled` refuses in a writable area.
                self.layout.spelled.push(dotgit.clone());
                if let Ok(real) = memo::canonicalize(&dotgit) {
                    if memo::is_dir(&real) {
                        self.git_dir(real, Some(wt), nesting)?;
                    } else if let Some(gd) = self.follow_gitfile(&dotgit) {
                        self.layout.gitfiles.push(dotgit);
                        self.git_dir(gd, Some(wt), nesting)?;
                    }
                }
            }
            Ok(m) if m.is_dir() => {
                if let Ok(real) = memo::canonicalize(&dotgit) {
                    self.git_dir(real, Some(wt), nesting)?;
                }
            }
            Ok(_) => {
                self.layout.gitfiles.push(dotgit.clone());
                if let Some(gd) = self.follow_gitfile(&dotgit) {
                    self.git_dir(gd, Some(wt), nesting)?;
                }
            }
        }
        Ok(())
    }
}

/// The linked worktrees of the git dir `gd`: each private git dir under
/// `worktrees/` with the working tree its `gitdir` file names (the parent
/// of that worktree's `.git`; relative to the private dir when written so).
/// Nothing is followed: not a linked `worktrees`, not a private dir or
/// `gitdir` file that is a link.
pub(super) fn linked_worktrees(gd: &Path) -> Vec<(PathBuf, Option<PathBuf>)> {
    let dir = gd.join("worktrees");
    if !memo::symlink_metadata(&dir).is_ok_and(|m| m.is_dir()) {
        return Vec::new();
    }
    let Ok(rd) = fs::read_dir(&dir) else { return Vec::new() };
    let mut out = Vec::new();
    for e in rd.flatten().take(MAX_REPOS) {
        if !e.file_type().is_ok_and(|t| t.is_dir()) {
            continue;
        }
        let private = e.path();
        let wt = read_small_as(&private.join("gitdir"), false)
            .and_then(|s| s.lines().next().map(|l| PathBuf::from(l.trim())))
            .filter(|p| !p.as_os_str().is_empty())
            .and_then(|p| lexical(&private.join(p)).parent().map(Path::to_path_buf));
        out.push((private, wt));
    }
    out
}

fn nested_too_deep(p: &Path) -> SandboxError {
    SandboxError::limit(
        "levels of submodule nesting",
        MAX_NESTING,
        format!("{} is a submodule nested more than {MAX_NESTING} levels deep; portcullis stops there", p.display()),
    )
}

/// A directory git could take for a module git dir.
fn looks_like_git_dir(p: &Path) -> bool {
    memo::is_file(&p.join("config")) || memo::is_file(&p.join("HEAD"))
}

/// `core.worktree` of a git dir, resolved against it.
fn core_worktree(gd: &Path) -> Option<PathBuf> {
    let v = git_config_entries(&gd.join("config"))
        .into_iter()
        .rev()
        .find(|(sec, key, _)| sec == "core" && key == "worktree")
        .map(|(_, _, v)| PathBuf::from(v))?;
    Some(lexical(&gd.join(v)))
}

/// Whether a git dir's objects are SHA-256 (`extensions.objectFormat`).
fn object_format_sha256(gd: &Path) -> bool {
    let mut cfg = gd.to_path_buf();
    if let Some(c) = read_small(&gd.join("commondir")) {
        cfg = gd.join(c.trim());
    }
    git_config_entries(&cfg.join("config"))
        .into_iter()
        .rev()
        .find(|(sec, key, _)| sec == "extensions" && key == "objectformat")
        .is_some_and(|(_, _, v)| v.eq_ignore_ascii_case("sha256"))
}

/// The `path` values of a `.gitmodules` file.
fn gitmodules_paths(file: &Path) -> Vec<PathBuf> {
    config_entries_of(read_small_as(file, false))
        .into_iter()
        .filter(|(sec, key, v)| sec == "submodule" && key == "path" && !v.is_empty())
        .map(|(_, _, v)| PathBuf::from(v))
        .collect()
}

/// Open a regular file for reading without blocking on a FIFO or opening a
/// device: held by an O_PATH descriptor first, checked, then reopened
/// through it, so a swap in between cannot change the file. `Ok(None)` for
/// a missing file or anything that is not a regular file (with `follow`
/// false, a symbolic link too: git writes its index and `.gitmodules` as
/// plain files, and a planted link must not make planning read a host file).
fn open_regular(p: &Path, follow: bool) -> io::Result<Option<(fs::File, u64)>> {
    let flags = libc::O_PATH | libc::O_CLOEXEC | if follow { 0 } else { libc::O_NOFOLLOW };
    let held = match fs::OpenOptions::new().read(true).custom_flags(flags).open(p) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR) => return Ok(None),
        Err(e) => return Err(e),
    };
    if !held.metadata()?.is_file() {
        return Ok(None);
    }
    let reopen = PathBuf::from(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&held)));
    let f = fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC).open(reopen)?;
    let m = f.metadata()?;
    if !m.is_file() {
        return Ok(None);
    }
    Ok(Some((f, m.len())))
}

/// A small regular file's text: never blocks on a FIFO, never reads a
/// device or more than 1 MiB (a writable run may have planted any of them
/// where git files belong). `None` for anything else; [`check_git_file`]
/// turns the bad kinds into a refusal.
pub(super) fn read_small(p: &Path) -> Option<String> {
    read_small_as(p, true)
}

fn read_small_as(p: &Path, follow: bool) -> Option<String> {
    // A plan reads `.git/config` from several of its parts: once is enough.
    memo::text(p, follow, || read_small_now(p, follow))
}

fn read_small_now(p: &Path, follow: bool) -> Option<String> {
    let (f, len) = open_regular(p, follow).ok()??;
    if len > GIT_FILE_MAX {
        return None;
    }
    let mut b = Vec::new();
    f.take(GIT_FILE_MAX).read_to_end(&mut b).ok()?;
    // Git reads bytes: a stray non-UTF-8 byte (in a comment, say) must not
    // hide the rest of the file.
    Some(String::from_utf8_lossy(&b).into_owned())
}

/// Refuse a `.gitmodules` that discovery cannot read as git would: a
/// symbolic link (not read through), anything but a regular file, or one
/// over 1 MiB. Silently skipping it would hide the submodules it names.
fn check_gitmodules(p: &Path) -> Result<(), SandboxError> {
    let refuse = |what: &str| {
        Err(SandboxError::unsafe_path(
            p.to_path_buf(),
            PathRefusal::NotRegularFile,
            format!(
                "{} is {what}; portcullis reads it to find the submodules whose git dirs it must protect, and \
             refuses a writable run rather than miss one: make it a regular file (or remove it)",
                p.display()
            ),
        ))
    };
    match memo::symlink_metadata(p) {
        Err(_) => Ok(()),
        Ok(m) if m.file_type().is_symlink() => refuse("a symbolic link"),
        Ok(m) if !m.is_file() => refuse("not a regular file"),
        Ok(m) if m.len() > GIT_FILE_MAX => refuse("larger than 1 MiB"),
        Ok(_) => Ok(()),
    }
}

/// Refuse a git file that is there but is not a small regular file (a FIFO
/// would hang planning, `/dev/zero` exhaust memory; silently skipping it
/// would leave its redirections unguarded).
pub(super) fn check_git_file(p: &Path) -> Result<(), SandboxError> {
    match memo::metadata(p) {
        Ok(m) if !m.is_file() => Err(SandboxError::unsafe_path(
            p.to_path_buf(),
            PathRefusal::NotRegularFile,
            format!("{} is not a regular file; git would read it: remove it first", p.display()),
        )),
        Ok(m) if m.len() > GIT_FILE_MAX => Err(SandboxError::limit(
            "bytes of a file git reads",
            GIT_FILE_MAX as usize,
            format!("{} is larger than 1 MiB; git would read it", p.display()),
        )),
        _ => Ok(()),
    }
}

/// Why an index could not be read completely. Git reads what portcullis
/// cannot (it follows a link) or refuses what portcullis would misread (a
/// damaged file), so a writable run never goes on with a partial reading.
#[derive(Debug)]
pub(super) enum Unreadable {
    /// A symbolic link: git follows it (and keeps it a link when it writes
    /// the index), portcullis does not read through links.
    Link,
    /// Not a regular file (a FIFO, a directory, a device).
    NotRegular,
    /// Larger than [`INDEX_MAX`].
    TooLarge,
    /// A split index whose shared index is missing or not a regular file.
    NoShared(PathBuf),
    /// A split index (the `link` extension): git applies the shared
    /// index's replace and delete bitmaps, which portcullis does not, and a
    /// replaced entry (stored without its name) may be a gitlink.
    Split,
    /// A sparse index (the `sdir` extension, or a directory entry): the
    /// entries of a sparse directory, gitlinks among them, are not in it.
    Sparse,
    /// An entry git itself would never write: a name not in git's
    /// canonical form (`verify_path`: empty, a leading, trailing or doubled
    /// `/`, a `.`, `..` or `.git` component in any case) or a mode git does
    /// not write. Git reads such an entry as it is (`./evil` is entered as
    /// the submodule `evil`, a mode 160644 entry is a gitlink).
    Strange { name: Vec<u8>, mode: u32 },
    /// An entry whose name-length field (which git goes by) and NUL
    /// padding (which a reader of the name as a string goes by) disagree,
    /// or whose saturated length field stands for a short name: git never
    /// writes one, and takes `name` (the length's) for what a reader
    /// scanning to the NUL takes for `scanned`.
    Misnamed { name: Vec<u8>, scanned: Vec<u8>, mode: u32 },
    /// Damaged or cut short.
    Damaged(io::Error),
    /// Reading failed.
    Io(io::Error),
}

impl Unreadable {
    /// What it is and what to do, for the index at `index`.
    pub(super) fn explain(&self, index: &Path) -> String {
        let i = index.display();
        // Git rebuilds a missing index from HEAD with `git reset`.
        let rebuild = |f: &Path| {
            format!(
                "rebuild it from HEAD on the host (staged changes are lost): rm {} && git -c core.fsmonitor= -c \
                 core.hooksPath=/dev/null -c diff.ignoreSubmodules=all reset -q",
                f.display()
            )
        };
        match self {
            Unreadable::Link => format!(
                "the git index {i} is a symbolic link, which git follows (and keeps when it writes the index) but \
                 portcullis does not read through; check the file it leads to, then put it in place of the link: \
                 cp --remove-destination \"$(readlink -f {i})\" {i}"
            ),
            Unreadable::NotRegular => {
                format!("the git index {i} is not a regular file; remove it, or {}", rebuild(index))
            }
            Unreadable::TooLarge => format!(
                "the git index {i} is larger than {} MiB, more than portcullis reads; {}",
                INDEX_MAX >> 20,
                rebuild(index)
            ),
            Unreadable::NoShared(p) => format!(
                "the git index {i} is a split index whose shared index {} is missing, which git refuses; {}",
                p.display(),
                rebuild(index)
            ),
            Unreadable::Split => format!(
                "the git index {i} is a split index (core.splitIndex, or git update-index --split-index), whose \
                 entries portcullis does not merge with its shared index; review the gitlinks it holds (git \
                 ls-files --stage | grep ^160000: each is a submodule git enters), then make it whole on the host: \
                 git -c core.fsmonitor= -c core.hooksPath=/dev/null -c core.splitIndex=false update-index \
                 --no-split-index (and keep core.splitIndex unset or false)"
            ),
            Unreadable::Sparse => format!(
                "the git index {i} is a sparse index (index.sparse), whose sparse directories hide the entries \
                 in them from portcullis; make it a full index on the host: git -c core.fsmonitor= -c \
                 core.hooksPath=/dev/null sparse-checkout reapply --no-sparse-index"
            ),
            Unreadable::Strange { name, mode } => format!(
                "the git index {i} holds an entry git itself never writes, {:?} (mode {mode:o}), which git reads \
                 as it is (a gitlink so spelled is a submodule git enters) and which git cannot remove by name; \
                 look at what it names and whether a repository is there, then {}",
                String::from_utf8_lossy(name),
                rebuild(index)
            ),
            Unreadable::Misnamed { name, scanned, mode } => format!(
                "the git index {i} holds an entry git itself never writes (mode {mode:o}), whose name-length field \
                 says {:?} while its name runs to the first NUL as {:?}: git takes the length's name (a gitlink is \
                 a submodule git enters there), other readers the other; look at what both name and whether a \
                 repository is there, then {}",
                String::from_utf8_lossy(name),
                String::from_utf8_lossy(scanned),
                rebuild(index)
            ),
            Unreadable::Damaged(e) => {
                format!("the git index {i} is damaged ({e}), which git may refuse or misread; {}", rebuild(index))
            }
            Unreadable::Io(e) => format!("the git index {i} could not be read ({e})"),
        }
    }
}

/// The gitlinks (mode 160000 entries) of a git index, formats 2, 3 and 4,
/// SHA-1 or SHA-256, with a split index's shared index read too. A missing
/// index has none. An index `ours` (in the workspace or a writable area:
/// the command could have made it so) that cannot be read completely (see
/// [`Unreadable`]) refuses the run: a submodule it hides would lose its
/// carve-outs. Any other gives what could be read.
fn gitlinks(index: &Path, sha256: bool, ours: &dyn Fn(&Path) -> bool) -> Result<Vec<PathBuf>, SandboxError> {
    let mut found = Found::default();
    let r = gitlinks_into(index, sha256, &mut found);
    let out = found.gitlinks;
    match r {
        Ok(()) => Ok(out),
        Err((p, why)) if ours(&p) || ours(index) => Err(SandboxError::unsafe_path(
            p.to_path_buf(),
            PathRefusal::Unreadable,
            format!(
                "{} (portcullis reads the index to find the submodules whose git dirs it must protect, and refuses a \
             writable run rather than miss one)",
                why.explain(&p)
            ),
        )),
        Err(_) => Ok(out),
    }
}

/// The gitlinks of `index` (and its shared index) into `out`; on failure,
/// the file that failed and why, with what was read before in `out`.
///
/// Only an index whose entries are exactly the ones git works with is read
/// as complete: a split index (whose replaced entries take their names
/// from the shared index), a sparse index, and any entry git never writes
/// (see [`Unreadable`]) fail, after the rest was read (a shared index too,
/// for what an index not the command's gives).
pub(super) fn gitlinks_into(index: &Path, sha256: bool, out: &mut Found) -> Result<(), (PathBuf, Unreadable)> {
    let top = read_index(index, sha256, out, false).map_err(|e| (index.to_path_buf(), e))?;
    if let Some(id) = &top.shared {
        let dir = index.parent().unwrap_or(Path::new("/"));
        let p = dir.join(format!("sharedindex.{id}"));
        // Any of its entries may have been replaced by a gitlink.
        match read_index(&p, sha256, out, true) {
            Ok(s) if s.split => return Err((p, Unreadable::Damaged(bad("a shared index names another")))),
            Ok(_) if memo::symlink_metadata(&p).is_err() => return Err((p.clone(), Unreadable::NoShared(p))),
            Ok(s) => {
                if let Some(why) = s.verdict() {
                    return Err((p, why));
                }
            }
            Err(e) => return Err((p, e)),
        }
    }
    match top.verdict() {
        Some(why) => Err((index.to_path_buf(), why)),
        None => Ok(()),
    }
}

/// What an index holds that git may enter as a submodule.
#[derive(Debug, Default, Clone)]
pub(super) struct Found {
    /// The gitlinks, relative to the working tree, in canonical form.
    pub gitlinks: Vec<PathBuf>,
    /// When the index is refused ([`Unreadable::Split`],
    /// [`Unreadable::Strange`]): further paths git may take for a
    /// submodule, for the after-run quarantine to look at: a strange
    /// gitlink's name as git resolves it (`./evil` is `evil`), and every
    /// path of a split index's shared index (a replaced entry keeps its
    /// name and takes the mode of its replacement).
    pub suspects: Vec<PathBuf>,
}

/// A name as the kernel resolves it below the working tree (empty and `.`
/// components dropped, `..` taking one back); `None` when that leaves the
/// working tree or names it.
fn resolved_name(name: &[u8]) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let mut parts: Vec<&[u8]> = Vec::new();
    for c in name.split(|b| *b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                parts.pop()?;
            }
            c => parts.push(c),
        }
    }
    if parts.is_empty() {
        return None;
    }
    Some(parts.iter().map(|c| std::ffi::OsStr::from_bytes(c)).collect())
}

/// What reading one index file found besides its gitlinks.
#[derive(Debug, Default, Clone)]
struct IndexFile {
    /// It has a `link` extension (a split index).
    split: bool,
    /// The shared index's name, when the `link` extension names one.
    shared: Option<String>,
    /// It is a sparse index.
    sparse: bool,
    /// The first entry git never writes.
    strange: Option<Strange>,
}

/// An entry git never writes.
#[derive(Debug, Clone)]
struct Strange {
    /// Its name as git reads it (the length its flags give).
    name: Vec<u8>,
    mode: u32,
    /// When the name's length field and its NUL disagree: the name up to
    /// the first NUL.
    scanned: Option<Vec<u8>>,
}

impl IndexFile {
    /// Why the entries read are not the ones git works with, if so. An
    /// empty name is what a split index's replaced entries have, so the
    /// split index is named first.
    fn verdict(&self) -> Option<Unreadable> {
        if self.split {
            return Some(Unreadable::Split);
        }
        if self.sparse {
            return Some(Unreadable::Sparse);
        }
        self.strange.clone().map(|Strange { name, mode, scanned }| match scanned {
            None => Unreadable::Strange { name, mode },
            Some(scanned) => Unreadable::Misnamed { name, scanned, mode },
        })
    }
}

/// Read one index file's gitlinks into `out`, and what else it holds;
/// `all_names` takes every path for a suspect. A missing file is an empty
/// index.
fn read_index(index: &Path, sha256: bool, out: &mut Found, all_names: bool) -> Result<IndexFile, Unreadable> {
    let held = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(index)
    {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR) => {
            return Ok(IndexFile::default())
        }
        Err(e) => return Err(Unreadable::Io(e)),
    };
    let kind = held.metadata().map_err(Unreadable::Io)?.file_type();
    if kind.is_symlink() {
        return Err(Unreadable::Link);
    }
    if !kind.is_file() {
        return Err(Unreadable::NotRegular);
    }
    // Reopened through the held descriptor: a swap in between cannot
    // change the file, and nothing blocks.
    let reopen = PathBuf::from(format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&held)));
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(reopen)
        .map_err(Unreadable::Io)?;
    let m = f.metadata().map_err(Unreadable::Io)?;
    if !m.is_file() {
        return Err(Unreadable::NotRegular);
    }
    let len = m.len();
    if len > INDEX_MAX {
        return Err(Unreadable::TooLarge);
    }
    let hash_len = if sha256 { 32 } else { 20 };
    if len > INDEX_IN_MEMORY || !plausible_header(&f) {
        let eoie = end_of_entries(&f, len, hash_len).map_err(Unreadable::Io)?;
        let mut r = IndexReader { inner: BufReader::with_capacity(1 << 16, f.take(len)), pos: 0, len };
        return parse_index(&mut r, len, hash_len, out, all_names, eoie).map_err(damaged);
    }
    // Read whole and parsed from memory: through a `BufReader`, every field
    // of every entry was a buffered read, and a 20 000-entry index (1.6 MB)
    // took 2.8 ms to parse, on every writable plan of such a repository
    // (session 23). A file that changes length meanwhile ends the read
    // short: read as it is, up to `len` (the parse fails on a short one),
    // and not kept.
    let mut data = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    (&f).take(len).read_to_end(&mut data).map_err(Unreadable::Io)?;
    let keep = data.len() as u64 == len && len <= Parsed::MAX_BYTES;
    if let Some(hit) = keep.then(|| Parsed::find(index, sha256, all_names, &data)).flatten() {
        out.gitlinks.extend(hit.found.gitlinks.iter().cloned());
        out.suspects.extend(hit.found.suspects.iter().cloned());
        return Ok(hit.file.clone());
    }
    let eoie = match data.len() as u64 == len {
        true => end_of_entries_in(&data, hash_len),
        false => end_of_entries(&f, len, hash_len).map_err(Unreadable::Io)?,
    };
    let mut found = Found::default();
    let mut r = IndexReader { inner: data.as_slice(), pos: 0, len };
    let parsed = parse_index(&mut r, len, hash_len, &mut found, all_names, eoie).map_err(damaged);
    if let (Ok(file), true) = (&parsed, keep) {
        Parsed::keep(index, sha256, all_names, data, file, &found);
    }
    out.gitlinks.append(&mut found.gitlinks);
    out.suspects.append(&mut found.suspects);
    parsed
}

/// A parse's error as the reading's: a short or malformed file is damaged.
fn damaged(e: io::Error) -> Unreadable {
    match e.kind() {
        io::ErrorKind::InvalidData | io::ErrorKind::UnexpectedEof => Unreadable::Damaged(e),
        _ => Unreadable::Io(e),
    }
}

/// An index's parse kept with the file's bytes, and used again for a file
/// that reads the same, byte for byte, whatever its times say (stores
/// through a shared mapping change a file without moving its change time
/// after the first store to each page: found in review). A writable plan of
/// a 20 000-file repository read and parsed its 1.6 MB index in about 1 ms;
/// the reading and the comparison cost about a quarter of that (session 26).
struct Parsed {
    path: PathBuf,
    sha256: bool,
    all_names: bool,
    bytes: Vec<u8>,
    file: IndexFile,
    found: Found,
}

/// The parses kept, the last made last (at most [`Parsed::KEPT`]).
static PARSED: std::sync::Mutex<Vec<std::sync::Arc<Parsed>>> = std::sync::Mutex::new(Vec::new());

impl Parsed {
    /// Larger indexes are not kept (and are read as before).
    const MAX_BYTES: u64 = 8 << 20;
    const KEPT: usize = 4;

    fn find(path: &Path, sha256: bool, all_names: bool, bytes: &[u8]) -> Option<std::sync::Arc<Parsed>> {
        let kept = PARSED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.iter()
            .find(|p| p.sha256 == sha256 && p.all_names == all_names && p.path == path && same_bytes(&p.bytes, bytes))
            .cloned()
    }

    fn keep(path: &Path, sha256: bool, all_names: bool, bytes: Vec<u8>, file: &IndexFile, found: &Found) {
        let parsed = std::sync::Arc::new(Parsed {
            path: path.to_path_buf(),
            sha256,
            all_names,
            bytes,
            file: file.clone(),
            found: found.clone(),
        });
        let mut kept = PARSED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.retain(|p| p.path != parsed.path || p.sha256 != sha256 || p.all_names != all_names);
        if kept.len() >= Parsed::KEPT {
            kept.remove(0);
        }
        kept.push(parsed);
    }
}

/// Whether `a` and `b` hold the same bytes: 64 at a time, as eight words.
/// A slice comparison is musl's `memcmp`, a byte at a time: comparing a 1.6
/// MB index took longer than parsing it.
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (mut ca, mut cb) = (a.chunks_exact(64), b.chunks_exact(64));
    for (x, y) in (&mut ca).zip(&mut cb) {
        let mut diff = 0u64;
        for (u, v) in x.chunks_exact(8).zip(y.chunks_exact(8)) {
            let (Ok(u), Ok(v)) = (<[u8; 8]>::try_from(u), <[u8; 8]>::try_from(v)) else { return false };
            diff |= u64::from_ne_bytes(u) ^ u64::from_ne_bytes(v);
        }
        if diff != 0 {
            return false;
        }
    }
    ca.remainder().iter().zip(cb.remainder()).all(|(u, v)| u == v)
}

/// [`end_of_entries`] of an index read whole.
fn end_of_entries_in(data: &[u8], hash_len: usize) -> Option<u64> {
    let at = eoie_at(data.len() as u64, hash_len)?;
    eoie_offset(data.get(usize::try_from(at).ok()?..)?.get(..12)?.try_into().ok()?)
}

/// Whether the file starts as an index does (`DIRC`, a version git
/// writes): only then is it read whole. Anything else is refused by the
/// parse from its first bytes, as before, not after a read of up to 64 MiB
/// that a command could make cost nothing on disk (a sparse file; found in
/// review).
fn plausible_header(f: &fs::File) -> bool {
    use std::os::unix::fs::FileExt;
    let mut head = [0u8; 8];
    f.read_exact_at(&mut head, 0).is_ok()
        && &head[..4] == b"DIRC"
        && (2..=4).contains(&u32::from_be_bytes([head[4], head[5], head[6], head[7]]))
}

/// Indexes up to this size are read whole before they are parsed (a
/// repository of about 800 000 files); larger ones are parsed as they are
/// read, without holding them.
const INDEX_IN_MEMORY: u64 = 64 << 20;

/// Where an end-of-entries extension (`EOIE`, written with index.threads)
/// says the entries end: git looks for one only as the last extension,
/// right before the checksum, whatever the extensions before it hold.
fn end_of_entries(f: &fs::File, len: u64, hash_len: usize) -> io::Result<Option<u64>> {
    use std::os::unix::fs::FileExt;
    let Some(at) = eoie_at(len, hash_len) else { return Ok(None) };
    let mut head = [0u8; 12];
    f.read_exact_at(&mut head, at)?;
    Ok(eoie_offset(&head))
}

/// Where the `EOIE` extension's header would be in an index of `len`
/// bytes: its 8-byte header and its content (git's `EOIE_SIZE`: an offset
/// and a SHA-1-sized hash, whatever the index's hash) before the
/// trailing hash, past the 12-byte file header.
fn eoie_at(len: u64, hash_len: usize) -> Option<u64> {
    len.checked_sub(hash_len as u64 + 8 + EOIE_SIZE as u64).filter(|at| *at >= 12)
}

/// The entries' end an `EOIE` header (its signature, size and offset)
/// gives, or `None` when these 12 bytes are not one.
fn eoie_offset(head: &[u8; 12]) -> Option<u64> {
    (&head[..4] == b"EOIE" && u32::from_be_bytes([head[4], head[5], head[6], head[7]]) as usize == EOIE_SIZE)
        .then(|| u64::from(u32::from_be_bytes([head[8], head[9], head[10], head[11]])))
}

/// Git's `EOIE_SIZE`.
const EOIE_SIZE: usize = 4 + 20;

struct IndexReader<R> {
    inner: R,
    pos: u64,
    /// The file's length: no name is longer than what is left of it.
    len: u64,
}

impl<R: BufRead> IndexReader<R> {
    fn bytes<const N: usize>(&mut self) -> io::Result<[u8; N]> {
        let mut b = [0u8; N];
        self.inner.read_exact(&mut b)?;
        self.pos += N as u64;
        Ok(b)
    }

    fn u32(&mut self) -> io::Result<u32> {
        Ok(u32::from_be_bytes(self.bytes::<4>()?))
    }

    fn skip(&mut self, n: u64) -> io::Result<()> {
        let got = io::copy(&mut (&mut self.inner).take(n), &mut io::sink())?;
        self.pos += got;
        if got != n {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        Ok(())
    }

    /// Bytes up to (not including) a NUL, which is consumed. Git sets no
    /// limit on a name's length (only its 12-bit length field saturates),
    /// so none is set here but the file's end.
    fn until_nul(&mut self, buf: &mut Vec<u8>) -> io::Result<()> {
        let left = self.len.saturating_sub(self.pos);
        let n = (&mut self.inner).take(left).read_until(0, buf)?;
        self.pos += n as u64;
        if buf.pop() != Some(0) {
            return Err(bad("an index entry name is unterminated"));
        }
        Ok(())
    }

    /// Append exactly `n` bytes to `buf`, from what is buffered when it
    /// holds them (for an index read whole, always). Every entry's name
    /// and padding come this way: through a zeroed extension and
    /// `read_exact` they cost two calls of musl's `memset`/`memcpy` each,
    /// and most of the time a 20 000-entry index took to parse.
    fn append(&mut self, buf: &mut Vec<u8>, n: usize) -> io::Result<()> {
        match self.inner.fill_buf()?.get(..n) {
            Some(b) if n <= 64 => {
                // Short (most names): byte by byte is quicker than
                // musl's `memcpy` (`rep movs`) for a few dozen bytes.
                buf.reserve(n);
                for &x in b {
                    buf.push(x);
                }
                self.inner.consume(n);
            }
            Some(b) => {
                buf.extend_from_slice(b);
                self.inner.consume(n);
            }
            None => {
                let at = buf.len();
                buf.resize(at + n, 0);
                self.inner.read_exact(&mut buf[at..])?;
            }
        }
        self.pos += n as u64;
        Ok(())
    }

    /// Pass over exactly `n` bytes (an entry's object name), without
    /// copying them when they are buffered.
    fn pass(&mut self, n: usize) -> io::Result<()> {
        if self.inner.fill_buf()?.len() >= n {
            self.inner.consume(n);
            self.pos += n as u64;
            return Ok(());
        }
        self.skip(n as u64)
    }

    /// git's offset varint (`decode_varint`): each continuation adds one.
    fn varint(&mut self) -> io::Result<u64> {
        let [mut c] = self.bytes::<1>()?;
        let mut val = u64::from(c & 0x7f);
        while c & 0x80 != 0 {
            [c] = self.bytes::<1>()?;
            val = val.checked_add(1).and_then(|v| v.checked_mul(128)).ok_or_else(|| bad("varint overflow"))?
                | u64::from(c & 0x7f);
        }
        Ok(val)
    }
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// The file-type bits of a mode; git takes any mode whose type bits are
/// these for a gitlink (`S_ISGITLINK`), and any directory mode for a
/// sparse directory.
const S_IFMT: u32 = 0o170000;
const GITLINK_MODE: u32 = 0o160000;
const DIR_MODE: u32 = 0o040000;
/// The modes git writes for the entries of a full index.
const GIT_MODES: [u32; 4] = [0o100644, 0o100755, 0o120000, GITLINK_MODE];
const ENTRY_EXTENDED: u16 = 0x4000;
/// The name-length bits of an entry's flags; saturated for a name of 4095
/// bytes or more, whose length is then taken up to the NUL.
const NAME_MASK: u16 = 0x0fff;
/// The extended flags git knows (intent-to-add, skip-worktree); it dies on
/// any other.
const EXTENDED_KNOWN: u16 = 0x6000;

/// Whether git would write an entry with this name: git's `verify_path`
/// on Linux (no empty name, no empty, `.`, `..` or `.git` component in any
/// case, so no leading, trailing or doubled `/`). The NTFS and HFS
/// spellings git also refuses by default (`git~1`, `.git.`) name other
/// directories here, and are read like any name.
fn canonical_name(name: &[u8]) -> bool {
    !name.is_empty()
        && name
            .split(|b| *b == b'/')
            .all(|c| !c.is_empty() && c != b"." && c != b".." && !c.eq_ignore_ascii_case(b".git"))
}

fn parse_index<R: BufRead>(
    r: &mut IndexReader<R>,
    len: u64,
    hash_len: usize,
    out: &mut Found,
    all_names: bool,
    eoie: Option<u64>,
) -> io::Result<IndexFile> {
    use std::os::unix::ffi::OsStrExt;
    if &r.bytes::<4>()? != b"DIRC" {
        return Err(bad("not an index"));
    }
    let version = r.u32()?;
    if !(2..=4).contains(&version) {
        return Err(bad("unknown index version"));
    }
    let count = r.u32()?;
    // Git's name of the entry just read, exactly `ce_namelen` bytes (a v4
    // entry's prefix is taken from it).
    let mut name: Vec<u8> = Vec::new();
    let mut info = IndexFile::default();
    let mut pad: Vec<u8> = Vec::new();
    // Where each entry starts, and (v4) whether its name keeps nothing of
    // the previous one: a reader with threads starts its blocks there.
    let mut starts: Vec<u32> = Vec::new();
    let mut fresh: Vec<bool> = Vec::new();
    for _ in 0..count {
        let start = r.pos;
        starts.push(u32::try_from(start).map_err(|_| bad("an index entry past 4 GiB"))?);
        // ctime, mtime, dev, ino (24 bytes), mode, uid, gid, size, the
        // object name (passed over), the flags.
        let fixed = r.bytes::<40>()?;
        r.pass(hash_len)?;
        let mode = u32::from_be_bytes([fixed[24], fixed[25], fixed[26], fixed[27]]);
        let flags = u16::from_be_bytes(r.bytes::<2>()?);
        if flags & ENTRY_EXTENDED != 0 {
            if version < 3 {
                return Err(bad("extended flags in a version 2 index"));
            }
            // Git dies on an extended flag it does not know.
            if u16::from_be_bytes(r.bytes::<2>()?) & !EXTENDED_KNOWN != 0 {
                return Err(bad("an extended flag git does not know"));
            }
        }
        // Git takes the name's length from the flags (`create_from_disk`:
        // it copies that many bytes and the one after) and looks for the
        // NUL only when the field is saturated; it never checks that the
        // byte after the name, or any padding, is a NUL. An entry where
        // that is not so, or whose saturated field stands for a short name,
        // is one git never writes, which a reader scanning to the NUL (git
        // itself, where it takes the name as a string) reads otherwise.
        let field = flags & NAME_MASK;
        let mut odd;
        pad.clear();
        if version == 4 {
            let strip = usize::try_from(r.varint()?).map_err(|_| bad("bad prefix length"))?;
            if strip > name.len() {
                return Err(bad("bad prefix length"));
            }
            name.truncate(name.len() - strip);
            fresh.push(name.is_empty());
            let kept = name.len();
            if field < NAME_MASK {
                // Git copies `len + 1 - kept` bytes: the rest of the name
                // and the byte meant to be its NUL.
                let rest = usize::from(field)
                    .checked_sub(kept)
                    .ok_or_else(|| bad("an entry name shorter than the prefix it keeps"))?;
                r.append(&mut name, rest)?;
                r.append(&mut pad, 1)?;
                odd = name[kept..].contains(&0);
            } else {
                r.until_nul(&mut name)?;
                odd = name.len() < usize::from(NAME_MASK);
            }
        } else {
            name.clear();
            if field < NAME_MASK {
                r.append(&mut name, usize::from(field))?;
                odd = name.contains(&0);
            } else {
                r.until_nul(&mut name)?;
                odd = name.len() < usize::from(NAME_MASK);
                pad.push(0);
            }
            // Entries are padded with NULs to a multiple of 8 bytes, the
            // first of them the name's NUL (git's `ondisk_ce_size`).
            let used = r.pos - start;
            let named = used - pad.len() as u64;
            let more = usize::try_from(((named + 8) & !7) - used).map_err(|_| bad("bad padding"))?;
            r.append(&mut pad, more)?;
        }
        odd |= pad.iter().any(|b| *b != 0);
        let canonical = !odd && canonical_name(&name);
        if mode & S_IFMT == DIR_MODE {
            info.sparse = true;
        } else if odd {
            // What a reader scanning from the name to the first NUL takes.
            let scanned: Vec<u8> = name.iter().chain(&pad).copied().take_while(|b| *b != 0).collect();
            info.strange.get_or_insert_with(|| Strange { name: name.clone(), mode, scanned: Some(scanned.clone()) });
            if mode & S_IFMT == GITLINK_MODE {
                // Every name git may take the gitlink by: its length's, the
                // string up to a NUL inside it, the string git copies (the
                // byte after the name too, `evi` + `l`), the one read on.
                let as_string: Vec<u8> = name.iter().copied().take_while(|b| *b != 0).collect();
                let copied: Vec<u8> = name.iter().chain(pad.first()).copied().take_while(|b| *b != 0).collect();
                for n in [name.as_slice(), &as_string, &copied, &scanned] {
                    if let Some(p) = resolved_name(n).filter(|_| !n.contains(&0)) {
                        if !out.suspects.contains(&p) {
                            out.suspects.push(p);
                        }
                    }
                }
            }
            continue;
        } else if !GIT_MODES.contains(&mode) || !canonical {
            // The index as a whole is refused: git reads the entry as it
            // is, which is not what a path join gives.
            info.strange.get_or_insert_with(|| Strange { name: name.clone(), mode, scanned: None });
        }
        if mode & S_IFMT == GITLINK_MODE {
            // Git's `S_ISGITLINK`: a gitlink whatever the other bits.
            if canonical {
                out.gitlinks.push(PathBuf::from(std::ffi::OsStr::from_bytes(&name)));
            } else {
                out.suspects.extend(resolved_name(&name));
            }
        } else if all_names && canonical {
            out.suspects.push(PathBuf::from(std::ffi::OsStr::from_bytes(&name)));
        }
    }
    let entries_end = r.pos;
    // Extensions, then the checksum: a split index names its shared index
    // in the `link` extension, a sparse index says so with `sdir`. Git
    // skips an extension it does not know only when its name starts with
    // a capital (optional: caches, offsets); any other it refuses, and so
    // does portcullis (git 2.47 knows `link` and `sdir`).
    while len.saturating_sub(r.pos) > hash_len as u64 {
        let sig = r.bytes::<4>()?;
        let size = u64::from(r.u32()?);
        if size > len.saturating_sub(r.pos) {
            return Err(bad("an extension runs past the end"));
        }
        match &sig {
            b"link" => {
                info.split = true;
                if size < hash_len as u64 {
                    return Err(bad("a link extension too short for the shared index's name"));
                }
                let mut id = vec![0u8; hash_len];
                r.inner.read_exact(&mut id)?;
                r.pos += hash_len as u64;
                if id.iter().any(|b| *b != 0) {
                    info.shared = Some(id.iter().map(|b| format!("{b:02x}")).collect());
                }
                r.skip(size - hash_len as u64)?;
            }
            b"sdir" => {
                info.sparse = true;
                r.skip(size)?;
            }
            b"IEOT" => {
                // The entry offset table (index.threads): a reader with
                // threads starts each block of entries at the offset the
                // table gives, a v4 block's first name taken whole. Git
                // writes it to match the entries; one that does not makes
                // git with threads read other entries than without.
                if size < 4 {
                    return Err(bad("an entry offset table too short for its version"));
                }
                let version_ieot = r.u32()?;
                let blocks = (size - 4) / 8;
                let mut next = 0usize;
                for _ in 0..blocks {
                    let at = r.u32()?;
                    let n = r.u32()?;
                    if version_ieot == 1 {
                        let fits = starts.get(next) == Some(&at) && (version != 4 || fresh.get(next) == Some(&true));
                        next = next
                            .checked_add(usize::try_from(n).map_err(|_| bad("bad entry offset table"))?)
                            .filter(|n| fits && *n <= starts.len())
                            .ok_or_else(|| {
                                bad("an entry offset table (index.threads) that does not match the entries")
                            })?;
                    }
                }
                if version_ieot == 1 && blocks > 0 && next != starts.len() {
                    return Err(bad("an entry offset table (index.threads) that does not cover the entries"));
                }
                r.skip(size - 4 - blocks * 8)?;
            }
            [b'A'..=b'Z', ..] => r.skip(size)?,
            _ => {
                return Err(bad(&format!(
                    "an extension git does not know and must understand ({:?})",
                    String::from_utf8_lossy(&sig)
                )))
            }
        }
    }
    if len.saturating_sub(r.pos) != hash_len as u64 {
        return Err(bad("the index does not end with its checksum"));
    }
    // Git with threads reads the extensions from where the last one, when
    // it is an end-of-entries marker, says the entries end.
    if eoie.is_some_and(|at| at != entries_end) {
        return Err(bad("an end-of-entries extension (index.threads) that does not point at the end of the entries"));
    }
    Ok(info)
}

/// `(section, key, value)` of a git config file, from a plain line scan:
/// sections and keys lowercased (`[includeIf "gitdir:x"]` gives section
/// `includeif`), values unquoted; `[section] key = value` on one line is
/// understood too. Not a full parser: enough to find what git would run.
fn git_config_entries(config: &Path) -> Vec<(String, String, String)> {
    config_entries_of(read_small(config))
}

fn config_entries_of(text: Option<String>) -> Vec<(String, String, String)> {
    let Some(text) = text else { return Vec::new() };
    let mut section = String::new();
    let mut out = Vec::new();
    for raw in text.lines() {
        let mut line = raw.trim();
        if let Some(rest) = line.strip_prefix('[') {
            let Some((head, tail)) = rest.split_once(']') else { continue };
            section = head.split_whitespace().next().unwrap_or("").to_ascii_lowercase();
            line = tail.trim();
        }
        if let Some((k, v)) = line.split_once('=') {
            out.push((section.clone(), k.trim().to_ascii_lowercase(), git_value(v)));
        }
    }
    out
}

/// A git config value as git reads it: quotes removed, `\` escapes
/// applied, an unquoted `;` or `#` starting a comment, outer blanks dropped.
fn git_value(v: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = v.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('b') => {
                    out.pop();
                }
                Some(other) => out.push(other),
                None => {}
            },
            ';' | '#' if !quoted => break,
            c => out.push(c),
        }
    }
    out.trim_end().to_string()
}

/// The files a git config includes (`path =` in `[include]` and
/// `[includeIf …]` sections), spelled as git opens them: relative to the
/// including file's directory, `~/` against `$HOME`, `..` left for the
/// kernel to resolve (after a link it leads elsewhere than its spelling,
/// and the git guard must walk exactly that way).
fn git_includes(config: &Path) -> Vec<PathBuf> {
    let base = config.parent().unwrap_or(Path::new("/"));
    git_config_entries(config)
        .into_iter()
        .filter(|(sec, key, _)| (sec == "include" || sec == "includeif") && key == "path")
        .filter_map(|(_, _, v)| match v.strip_prefix("~/") {
            Some(rest) => std::env::var_os("HOME").map(|h| PathBuf::from(h).join(rest)),
            None => Some(base.join(&v)),
        })
        .collect()
}

/// Includes of includes too (git follows them up to a depth of 10).
fn git_includes_deep(config: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut todo = vec![(config.to_path_buf(), 0)];
    while let Some((file, depth)) = todo.pop() {
        for inc in git_includes(&file) {
            if !out.contains(&inc) {
                if depth < 10 {
                    todo.push((inc.clone(), depth + 1));
                }
                out.push(inc);
            }
        }
    }
    out
}

/// `core.hooksPath` from a git config file, if set (git takes the last).
fn hooks_path(config: &Path) -> Option<PathBuf> {
    git_config_entries(config)
        .into_iter()
        .rev()
        .find(|(sec, key, _)| sec == "core" && key == "hookspath")
        .map(|(_, _, v)| PathBuf::from(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn tmp() -> tempfile::TempDir {
        tempfile::Builder::new().prefix("pc-git-").tempdir_in("/var/tmp").unwrap_or_else(|e| panic!("{e}"))
    }

    fn git(dir: &Path, args: &[&str]) {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap_or_else(|e| panic!("git: {e}"));
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// A repository with two files and three gitlinks (one deep), made with
    /// plumbing so that no submodule needs cloning.
    fn repo(format: &str) -> tempfile::TempDir {
        let d = tmp();
        git(d.path(), &["init", "-q", &format!("--object-format={format}"), "."]);
        fs::write(d.path().join("a"), "a").unwrap_or_else(|e| panic!("{e}"));
        fs::create_dir_all(d.path().join("dir")).unwrap_or_else(|e| panic!("{e}"));
        fs::write(d.path().join("dir/b"), "b").unwrap_or_else(|e| panic!("{e}"));
        git(d.path(), &["add", "a", "dir/b"]);
        let zero = if format == "sha256" { "1".repeat(64) } else { "1".repeat(40) };
        for p in ["libs/x", "third_party/libs/deep/name", "z"] {
            git(d.path(), &["update-index", "--add", "--cacheinfo", &format!("160000,{zero},{p}")]);
        }
        // An intent-to-add entry sets the extended flag (version 3).
        fs::write(d.path().join("dir/c"), "c").unwrap_or_else(|e| panic!("{e}"));
        git(d.path(), &["add", "-N", "dir/c"]);
        d
    }

    fn links_of(d: &Path) -> Vec<PathBuf> {
        let sha256 = object_format_sha256(&d.join(".git"));
        let mut l = gitlinks(&d.join(".git/index"), sha256, &|_| true).unwrap_or_else(|e| panic!("{e}"));
        l.sort();
        l
    }

    #[test]
    fn git_config_scan_finds_includes_and_hooks_path_in_both_forms() {
        let d = tmp();
        let cfg = d.path().join("config");
        fs::write(&cfg, "[core]\n\thooksPath = .githooks\n[include] path = ../shared\n[includeIf \"gitdir:x\"]\n\tpath = \"other\"\n")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(hooks_path(&cfg), Some(PathBuf::from(".githooks")));
        let base = d.path();
        assert_eq!(git_includes(&cfg), vec![base.join("../shared"), base.join("other")]);
        fs::write(&cfg, "[core] hooksPath = h\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(hooks_path(&cfg), Some(PathBuf::from("h")));
    }

    #[test]
    fn gitlinks_are_read_from_every_index_format_and_hash() {
        let want: Vec<PathBuf> = ["libs/x", "third_party/libs/deep/name", "z"].iter().map(PathBuf::from).collect();
        for format in ["sha1", "sha256"] {
            let d = repo(format);
            for version in ["2", "3", "4"] {
                if version == "2" {
                    // Version 2 cannot hold the intent-to-add entry.
                    git(d.path(), &["rm", "-q", "--cached", "dir/c"]);
                }
                git(d.path(), &["update-index", "--index-version", version]);
                assert_eq!(links_of(d.path()), want, "{format} v{version}");
                if version == "2" {
                    git(d.path(), &["add", "-N", "dir/c"]);
                }
            }
            // A split index is refused when the command's, and gives what
            // both files hold otherwise.
            git(d.path(), &["update-index", "--split-index"]);
            git(
                d.path(),
                &[
                    "update-index",
                    "--add",
                    "--cacheinfo",
                    &format!("100644,{},new", "2".repeat(if format == "sha256" { 64 } else { 40 })),
                ],
            );
            let idx = d.path().join(".git/index");
            let sha256 = format == "sha256";
            match gitlinks(&idx, sha256, &|_| true) {
                Err(SandboxError::UnsafePath { message: m, .. }) => {
                    assert!(m.contains("split index") && m.contains("--no-split-index"), "{m}")
                }
                other => panic!("{format}: expected a refusal, got {other:?}"),
            }
            let mut got = gitlinks(&idx, sha256, &|_| false).unwrap_or_else(|e| panic!("{e}"));
            got.sort();
            assert_eq!(got, want, "{format} split index");
            git(d.path(), &["update-index", "--no-split-index"]);
            assert_eq!(links_of(d.path()), want, "{format} split index undone");
        }
    }

    /// An index is parsed from memory (up to `INDEX_IN_MEMORY`) or as it is
    /// read (larger): both readers give the same result. Here the buffered
    /// one holds 7 bytes, so that fields, names and padding cross its end
    /// (the copy and skip fallbacks), for git's own indexes of versions 3
    /// and 4 in both hashes, whole and cut short.
    #[test]
    fn memory_and_buffered_reads_of_an_index_agree() {
        let parse = |data: &[u8], buffered: bool, sha256: bool| {
            let (hash_len, len) = (if sha256 { 32 } else { 20 }, data.len() as u64);
            let mut out = Found::default();
            let got = if buffered {
                let mut r = IndexReader { inner: BufReader::with_capacity(7, data), pos: 0, len };
                parse_index(&mut r, len, hash_len, &mut out, true, None)
            } else {
                let mut r = IndexReader { inner: data, pos: 0, len };
                parse_index(&mut r, len, hash_len, &mut out, true, None)
            };
            format!("{:?} {out:?}", got.map_err(|e| e.kind()))
        };
        for format in ["sha1", "sha256"] {
            let d = repo(format);
            for version in ["3", "4"] {
                git(d.path(), &["update-index", "--index-version", version]);
                let full = fs::read(d.path().join(".git/index")).unwrap_or_else(|e| panic!("{e}"));
                for cut in [full.len(), full.len() - 1, full.len() / 2, 40, 12] {
                    let (sha256, data) = (format == "sha256", &full[..cut]);
                    let whole = parse(data, false, sha256);
                    assert_eq!(whole, parse(data, true, sha256), "{format} v{version} cut {cut}");
                    assert!(cut < full.len() || whole.starts_with("Ok"), "{format} v{version}: {whole}");
                }
            }
        }
    }

    #[test]
    fn a_damaged_index_refuses_when_ours_and_gives_what_was_read_otherwise() {
        let d = repo("sha1");
        let idx = d.path().join(".git/index");
        let full = fs::read(&idx).unwrap_or_default();
        let refused = |idx: &Path| match gitlinks(idx, false, &|_| true) {
            Err(SandboxError::UnsafePath { message: m, .. }) => m,
            other => panic!("expected a refusal, got {other:?}"),
        };
        for cut in [0, 5, 12, 100, full.len() / 2, full.len() - 1] {
            fs::write(&idx, &full[..cut]).unwrap_or_else(|e| panic!("{e}"));
            let m = refused(&idx);
            assert!(m.contains("is damaged") && m.contains("reset -q"), "cut {cut}: {m}");
            let got = gitlinks(&idx, false, &|_| false).unwrap_or_else(|e| panic!("cut {cut}: {e}"));
            assert!(got.len() <= 3);
        }
        let mut flipped = full.clone();
        for b in flipped.iter_mut().skip(12) {
            *b ^= 0xa5;
        }
        fs::write(&idx, &flipped).unwrap_or_else(|e| panic!("{e}"));
        assert!(gitlinks(&idx, false, &|_| false).is_ok());
        fs::remove_file(&idx).unwrap_or_else(|e| panic!("{e}"));
        nix::unistd::mkfifo(&idx, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(gitlinks(&idx, false, &|_| false).unwrap_or_else(|e| panic!("{e}")), Vec::<PathBuf>::new());
        assert!(refused(&idx).contains("not a regular file"));
        // A missing index is an empty one.
        fs::remove_file(&idx).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(gitlinks(&idx, false, &|_| true).unwrap_or_else(|e| panic!("{e}")), Vec::<PathBuf>::new());
    }

    #[test]
    fn long_names_do_not_hide_later_gitlinks() {
        let d = repo("sha1");
        let long = "a".repeat(70_000);
        let blob = "2".repeat(40);
        git(d.path(), &["update-index", "--add", "--cacheinfo", &format!("100644,{blob},{long}")]);
        let want: Vec<PathBuf> = ["libs/x", "third_party/libs/deep/name", "z"].iter().map(PathBuf::from).collect();
        for version in ["3", "4"] {
            git(d.path(), &["update-index", "--index-version", version]);
            assert_eq!(links_of(d.path()), want, "v{version}");
        }
    }

    /// A version 2 SHA-1 index of `entries` (mode, name) and the raw
    /// extensions `ext`, checksum zero.
    fn raw(entries: &[(u32, &[u8])], ext: &[u8]) -> Vec<u8> {
        let mut out = b"DIRC".to_vec();
        out.extend_from_slice(&2u32.to_be_bytes());
        out.extend_from_slice(&(entries.len() as u32).to_be_bytes());
        for (mode, name) in entries {
            let start = out.len();
            for v in [0, 0, 0, 0, 0, 0, *mode, 0, 0, 0] {
                out.extend_from_slice(&u32::to_be_bytes(v));
            }
            out.extend_from_slice(&[0x11; 20]);
            out.extend_from_slice(&(name.len() as u16).to_be_bytes());
            out.extend_from_slice(name);
            out.resize(out.len() + 8 - (out.len() - start) % 8, 0);
        }
        out.extend_from_slice(ext);
        out.extend_from_slice(&[0u8; 20]);
        out
    }

    /// Write `bytes` as the index `idx` and read its gitlinks.
    fn read_raw(idx: &Path, bytes: Vec<u8>) -> (Result<(), Unreadable>, Found) {
        fs::write(idx, bytes).unwrap_or_else(|e| panic!("{e}"));
        let mut f = Found::default();
        (gitlinks_into(idx, false, &mut f).map_err(|(_, why)| why), f)
    }

    #[test]
    fn entries_git_never_writes_refuse_and_name_what_git_enters() {
        let d = tmp();
        let idx = d.path().join("index");
        let read = |bytes: Vec<u8>| read_raw(&idx, bytes);
        // Canonical names of every kind, dots inside names included.
        let (r, f) = read(raw(&[(0o100644, b".a"), (0o160000, b"a/..b/c.d"), (0o120000, b"git~1")], b""));
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(f.gitlinks, vec![PathBuf::from("a/..b/c.d")]);
        let names: [(&[u8], Option<&str>); 9] = [
            (b"", None),
            (b"./evil", Some("evil")),
            (b"/evil", Some("evil")),
            (b"evil/", Some("evil")),
            (b"a//evil", Some("a/evil")),
            (b"a/./evil", Some("a/evil")),
            (b"a/../evil", Some("evil")),
            (b"../evil", None),
            (b"x/.GIT/evil", Some("x/.GIT/evil")),
        ];
        for (name, resolved) in names {
            let (r, f) = read(raw(&[(0o160000, name)], b""));
            match r {
                Err(Unreadable::Strange { name: n, mode }) => assert_eq!((n.as_slice(), mode), (name, 0o160000)),
                other => panic!("{name:?}: {other:?}"),
            }
            assert!(f.gitlinks.is_empty());
            assert_eq!(f.suspects, resolved.map(PathBuf::from).into_iter().collect::<Vec<_>>(), "{name:?}");
        }
        // Modes git never writes; one with a gitlink's type bits is a
        // gitlink to git.
        let (r, f) = read(raw(&[(0o100664, b"a"), (0o160644, b"b")], b""));
        assert!(matches!(r, Err(Unreadable::Strange { mode: 0o100664, .. })), "{r:?}");
        assert_eq!(f.gitlinks, vec![PathBuf::from("b")]);
        // Sparse: a directory entry, or the extension.
        assert!(matches!(read(raw(&[(0o040000, b"d/")], b"")).0, Err(Unreadable::Sparse)));
        assert!(matches!(read(raw(&[], b"sdir\0\0\0\0")).0, Err(Unreadable::Sparse)));
        // An unknown optional extension is skipped, an unknown required
        // one refused (git refuses it too).
        assert!(read(raw(&[(0o100644, b"a")], b"ZZZZ\0\0\0\x02ab")).0.is_ok());
        assert!(matches!(read(raw(&[], b"zzzz\0\0\0\0")).0, Err(Unreadable::Damaged(_))));
        // A link extension, with or without a shared index's name.
        let mut link = b"link\0\0\0\x14".to_vec();
        link.extend_from_slice(&[0u8; 20]);
        assert!(matches!(read(raw(&[(0o100644, b"")], &link)).0, Err(Unreadable::Split)));
    }

    /// One SHA-1 entry: mode, the flags' name-length field (and extended
    /// flags), then `tail` as it is (name, padding or v4 varint and name).
    fn entry(mode: u32, flags: u16, extended: Option<u16>, tail: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for v in [0, 0, 0, 0, 0, 0, mode, 0, 0, 0] {
            out.extend_from_slice(&u32::to_be_bytes(v));
        }
        out.extend_from_slice(&[0x11; 20]);
        out.extend_from_slice(&(flags | extended.map_or(0, |_| ENTRY_EXTENDED)).to_be_bytes());
        out.extend(extended.map(u16::to_be_bytes).into_iter().flatten());
        out.extend_from_slice(tail);
        out
    }

    fn index_of(version: u32, entries: &[Vec<u8>]) -> Vec<u8> {
        let mut out = b"DIRC".to_vec();
        out.extend_from_slice(&version.to_be_bytes());
        out.extend_from_slice(&(entries.len() as u32).to_be_bytes());
        out.extend(entries.iter().flatten());
        out.extend_from_slice(&[0u8; 20]);
        out
    }

    #[test]
    fn same_bytes_finds_every_difference() {
        let a: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        assert!(same_bytes(&a, &a.clone()));
        assert!(!same_bytes(&a, &a[..999]));
        assert!(same_bytes(&[], &[]));
        for at in [0, 7, 8, 63, 64, 500, 959, 960, 999] {
            let mut b = a.clone();
            b[at] ^= 1;
            assert!(!same_bytes(&a, &b), "a difference at {at} was missed");
        }
    }

    #[test]
    fn a_kept_parse_is_used_only_for_the_same_bytes() {
        use std::os::unix::fs::FileExt;
        let d = tmp();
        let idx = d.path().join("index");
        let links = |name: &[u8; 4]| {
            let mut tail = name.to_vec();
            tail.extend_from_slice(&[0; 6]);
            index_of(2, &[entry(0o160000, 4, None, &tail)])
        };
        let read = || {
            let mut f = Found::default();
            let r = gitlinks_into(&idx, false, &mut f).map_err(|(_, why)| why);
            assert!(r.is_ok(), "{r:?}");
            f.gitlinks
        };
        let kept =
            || Parsed::find(&idx, false, false, &fs::read(&idx).unwrap_or_default()).map(|p| p.found.gitlinks.clone());
        fs::write(&idx, links(b"aaaa")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read(), vec![PathBuf::from("aaaa")]);
        assert_eq!(kept(), Some(vec![PathBuf::from("aaaa")]), "the parse was not kept");
        assert_eq!(read(), vec![PathBuf::from("aaaa")]);
        // Changed in place, the same length, its modification time put back.
        let before = fs::metadata(&idx).unwrap_or_else(|e| panic!("{e}"));
        let f = fs::OpenOptions::new().read(true).write(true).open(&idx).unwrap_or_else(|e| panic!("{e}"));
        f.write_all_at(&links(b"bbbb"), 0).unwrap_or_else(|e| panic!("{e}"));
        f.set_modified(before.modified().unwrap_or_else(|e| panic!("{e}"))).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(read(), vec![PathBuf::from("bbbb")], "a kept parse outlived a change in place");
        // Stores through a shared mapping move the change time at the first
        // store to a page only (found in review): every store is seen.
        let len = usize::try_from(before.len()).unwrap_or_else(|e| panic!("{e}"));
        // SAFETY: a shared read-write mapping of `len` bytes of a file we
        // opened read-write; checked for MAP_FAILED, unmapped below, and
        // only written within its length.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&f),
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED, "mmap: {}", io::Error::last_os_error());
        for name in [b"cccc", b"dddd", b"eeee"] {
            let bytes = links(name);
            assert_eq!(bytes.len(), len);
            // SAFETY: `map` is `len` bytes long and valid until the munmap.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), map.cast::<u8>(), len) };
            let want = vec![PathBuf::from(std::str::from_utf8(name).unwrap_or_default())];
            assert_eq!(read(), want, "a store through the mapping was not seen");
        }
        // SAFETY: `map` came from mmap with this length and is not used after.
        unsafe { libc::munmap(map, len) };
    }

    #[test]
    fn names_are_read_by_their_length_field_as_git_does() {
        let d = tmp();
        let idx = d.path().join("index");
        let read = |bytes: Vec<u8>| read_raw(&idx, bytes);
        let paths = |v: &[&str]| v.iter().map(PathBuf::from).collect::<Vec<_>>();
        // Control: the field and the NUL agree (62 + 3 + 7 NULs).
        let (r, f) = read(index_of(2, &[entry(0o160000, 3, None, b"evi\0\0\0\0\0\0\0")]));
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(f.gitlinks, paths(&["evi"]));
        // The field says `evi`, the padding runs on `l/x`: git copies `evil`.
        let (r, f) = read(index_of(2, &[entry(0o160000, 3, None, b"evil/x\0\0\0\0")]));
        match r {
            Err(Unreadable::Misnamed { name, scanned, mode }) => {
                assert_eq!((name.as_slice(), scanned.as_slice(), mode), (&b"evi"[..], &b"evil/x"[..], 0o160000))
            }
            other => panic!("{other:?}"),
        }
        assert!(f.gitlinks.is_empty());
        assert_eq!(f.suspects, paths(&["evi", "evil", "evil/x"]));
        // A NUL inside the length, a saturated field for a short name, a
        // non-NUL byte further in the padding.
        for (flags, tail) in
            [(6, &b"ab\0cde\0\0\0\0"[..]), (NAME_MASK, &b"short\0\0\0\0\0"[..]), (3, &b"evi\0\0\0\0\0\0x"[..])]
        {
            let (r, _) = read(index_of(2, &[entry(0o100644, flags, None, tail)]));
            assert!(matches!(r, Err(Unreadable::Misnamed { .. })), "{tail:?}: {r:?}");
        }
        // Entries follow at git's boundary (62 + 1 + 1), where a reader
        // scanning `ab` on would miss the gitlink after it.
        let (r, f) = read(index_of(2, &[entry(0o100644, 1, None, b"ab"), entry(0o160000, 1, None, b"z\0")]));
        assert!(matches!(r, Err(Unreadable::Misnamed { .. })), "{r:?}");
        assert_eq!(f.gitlinks, paths(&["z"]));
        // Version 4: the byte after the name is not a NUL (`evi` + `l`).
        let (r, f) = read(index_of(4, &[entry(0o100644, 1, None, b"\0a\0"), entry(0o160000, 3, None, b"\x01evil")]));
        assert!(matches!(r, Err(Unreadable::Misnamed { .. })), "{r:?}");
        assert!(f.suspects.contains(&PathBuf::from("evil")), "{f:?}");
        let (r, f) = read(index_of(4, &[entry(0o100644, 1, None, b"\0a\0"), entry(0o160000, 3, None, b"\x01evi\0")]));
        assert!(r.is_ok(), "{r:?}");
        assert_eq!(f.gitlinks, paths(&["evi"]));
        // Version 3: an extended flag git does not know (it dies).
        let (r, _) = read(index_of(3, &[entry(0o100644, 1, Some(0x2000), b"a\0\0\0\0\0\0\0")]));
        assert!(r.is_ok(), "{r:?}");
        let (r, _) = read(index_of(3, &[entry(0o100644, 1, Some(0x1000), b"a\0\0\0\0\0\0\0")]));
        assert!(matches!(r, Err(Unreadable::Damaged(_))), "{r:?}");
    }

    #[test]
    fn entry_offset_tables_must_match_the_entries() {
        let find = |b: &[u8], what: &[u8]| b.windows(what.len()).position(|w| w == what);
        for version in ["2", "3", "4"] {
            let d = repo("sha1");
            git(
                d.path(),
                &[
                    "-c",
                    "index.threads=2",
                    "-c",
                    "index.recordOffsetTable=true",
                    "-c",
                    "index.recordEndOfIndexEntries=true",
                    "update-index",
                    "--force-write-index",
                    "--index-version",
                    version,
                ],
            );
            let idx = d.path().join(".git/index");
            let bytes = fs::read(&idx).unwrap_or_else(|e| panic!("{e}"));
            let ieot = find(&bytes, b"IEOT").unwrap_or_else(|| panic!("v{version}: git wrote no IEOT"));
            let eoie = find(&bytes, b"EOIE").unwrap_or_else(|| panic!("v{version}: git wrote no EOIE"));
            // As git writes them, the tables are read.
            assert_eq!(links_of(d.path()).len(), 3, "v{version}");
            // A block that starts elsewhere, or an end of entries elsewhere.
            for (at, what) in [(ieot + 12 + 8 + 3, "IEOT"), (eoie + 11, "EOIE")] {
                let mut b = bytes.clone();
                b[at] ^= 0x08;
                fs::write(&idx, &b).unwrap_or_else(|e| panic!("{e}"));
                let mut f = Found::default();
                let r = gitlinks_into(&idx, false, &mut f);
                assert!(matches!(&r, Err((_, Unreadable::Damaged(_)))), "v{version} {what}: {r:?}");
            }
        }
    }

    #[test]
    fn a_split_index_without_its_shared_index_refuses() {
        let d = repo("sha1");
        git(d.path(), &["update-index", "--split-index"]);
        for e in fs::read_dir(d.path().join(".git")).unwrap_or_else(|e| panic!("{e}")).flatten() {
            if e.file_name().to_string_lossy().starts_with("sharedindex.") {
                fs::remove_file(e.path()).unwrap_or_else(|e| panic!("{e}"));
            }
        }
        match gitlinks(&d.path().join(".git/index"), false, &|_| true) {
            Err(SandboxError::UnsafePath { message: m, .. }) => assert!(m.contains("shared index"), "{m}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn submodule_trees_are_found_from_index_gitmodules_and_core_worktree() {
        let d = repo("sha1");
        let ws = fs::canonicalize(d.path()).unwrap_or_default();
        // libs/x populated with a gitfile into a deep module git dir,
        // z embedded, the deep one unpopulated.
        let m = ws.join(".git/modules/libs/x");
        fs::create_dir_all(m.join("hooks")).unwrap_or_else(|e| panic!("{e}"));
        fs::write(m.join("HEAD"), "ref: refs/heads/main\n").unwrap_or_else(|e| panic!("{e}"));
        fs::write(m.join("config"), "[core]\n\tworktree = ../../../../libs/x\n").unwrap_or_else(|e| panic!("{e}"));
        fs::create_dir_all(ws.join("libs/x")).unwrap_or_else(|e| panic!("{e}"));
        fs::write(ws.join("libs/x/.git"), "gitdir: ../../.git/modules/libs/x\n").unwrap_or_else(|e| panic!("{e}"));
        fs::create_dir_all(ws.join("z")).unwrap_or_else(|e| panic!("{e}"));
        git(&ws.join("z"), &["init", "-q", "."]);
        fs::write(ws.join(".gitmodules"), "[submodule \"g\"]\n\tpath = from/gitmodules\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let l = discover(&ws, std::slice::from_ref(&ws), true).unwrap_or_else(|e| panic!("{e}"));
        let dirs: Vec<&Path> = l.paths().collect();
        assert!(dirs.contains(&m.as_path()), "{dirs:?}");
        assert!(dirs.contains(&ws.join("z/.git").as_path()), "{dirs:?}");
        assert_eq!(l.gitfiles, vec![ws.join("libs/x/.git")]);
        let mut un = l.unpopulated.clone();
        un.sort();
        assert_eq!(un, vec![ws.join("from/gitmodules/.git"), ws.join("third_party/libs/deep/name/.git")]);
        let x = l.dirs.iter().find(|g| g.path == m).map(|g| g.worktree.clone());
        assert_eq!(x, Some(Some(ws.join("libs/x"))));
        // A read-only run reads no index and no `.gitmodules`.
        let l = discover(&ws, &[], false).unwrap_or_else(|e| panic!("{e}"));
        assert!(l.unpopulated.is_empty(), "{:?}", l.unpopulated);
        assert!(!l.paths().any(|p| p == ws.join("z/.git")));
    }

    #[test]
    fn a_linked_index_or_gitmodules_refuses_when_ours() {
        let d = repo("sha1");
        let ws = fs::canonicalize(d.path()).unwrap_or_default();
        let elsewhere = tmp();
        fs::rename(ws.join(".git/index"), elsewhere.path().join("index")).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(elsewhere.path().join("index"), ws.join(".git/index"))
            .unwrap_or_else(|e| panic!("{e}"));
        match discover(&ws, std::slice::from_ref(&ws), true) {
            Err(SandboxError::UnsafePath { message: m, .. }) => {
                assert!(m.contains("symbolic link") && m.contains("/.git/index"), "{m}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        // Not the command's: not read, no refusal.
        assert_eq!(gitlinks(&ws.join(".git/index"), false, &|_| false).ok(), Some(Vec::new()));
        fs::remove_file(ws.join(".git/index")).unwrap_or_else(|e| panic!("{e}"));
        fs::write(elsewhere.path().join("gm"), "[submodule \"x\"]\n\tpath = leaked\n")
            .unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(elsewhere.path().join("gm"), ws.join(".gitmodules"))
            .unwrap_or_else(|e| panic!("{e}"));
        match discover(&ws, std::slice::from_ref(&ws), true) {
            Err(SandboxError::UnsafePath { message: m, .. }) => {
                assert!(m.contains(".gitmodules is a symbolic link"), "{m}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_file_on_a_gitlink_path_still_guards_its_dotgit() {
        let d = repo("sha1");
        let ws = fs::canonicalize(d.path()).unwrap_or_default();
        fs::create_dir_all(ws.join("libs")).unwrap_or_else(|e| panic!("{e}"));
        fs::write(ws.join("libs/x"), "not a directory").unwrap_or_else(|e| panic!("{e}"));
        let l = discover(&ws, std::slice::from_ref(&ws), true).unwrap_or_else(|e| panic!("{e}"));
        assert!(l.unpopulated.contains(&ws.join("libs/x/.git")), "{:?}", l.unpopulated);
    }

    #[test]
    fn a_submodule_path_through_a_link_refuses_when_writable_and_is_followed_otherwise() {
        let d = repo("sha1");
        let ws = fs::canonicalize(d.path()).unwrap_or_default();
        fs::create_dir_all(ws.join("real/x")).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink("real", ws.join("libs")).unwrap_or_else(|e| panic!("{e}"));
        // `git ls-files --recurse-submodules` enters libs/x through the link.
        match discover(&ws, std::slice::from_ref(&ws), true) {
            Err(SandboxError::UnsafePath { message: m, .. }) => {
                assert!(m.contains("symbolic link") && m.contains("libs/x"), "{m}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        // A link the run cannot change: the tree git enters is looked at.
        let l = discover(&ws, &[], true).unwrap_or_else(|e| panic!("{e}"));
        assert!(l.unpopulated.contains(&ws.join("real/x/.git")), "{:?}", l.unpopulated);
        assert!(!l.unpopulated.iter().any(|p| p.starts_with(ws.join("libs"))), "{:?}", l.unpopulated);
    }
}
