//! Deny globs: one reading of `deny_paths` for the path jail (does this
//! path match?) and the sandbox's masks (which paths on disk match?).

use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

use super::dents::EntryType;

/// The most entries the deny-glob walk visits before it refuses.
pub const DENY_WALK_LIMIT: usize = 500_000;

/// Compiled deny globs.
///
/// - A pattern without `/` (`.env*`, `node_modules`) matches a name at any
///   depth below the workspace.
/// - A relative pattern with `/` (`secrets/**`, `config/prod.toml`) matches
///   the path relative to the workspace.
/// - An absolute pattern (`/etc/ssh/*_key`) matches an absolute path.
///
/// A match on a directory covers everything below it, so `secrets` (or
/// `secrets/`) denies `secrets/a/b` too. `*` and `?` never cross `/`; `**`
/// does.
#[derive(Clone, Debug)]
pub struct DenyGlobs {
    names: GlobSet,
    name_src: Vec<String>,
    paths: GlobSet,
    path_src: Vec<String>,
    abs: GlobSet,
    abs_src: Vec<String>,
}

/// A glob with `//`, `/./`, a leading `./` and a trailing `/` or `/.`
/// removed: the spelling of the paths it is matched against.
pub fn normalize_glob(g: &str) -> String {
    let abs = g.starts_with('/');
    let parts: Vec<&str> = g.split('/').filter(|c| !c.is_empty() && *c != ".").collect();
    let joined = parts.join("/");
    if abs {
        format!("/{joined}")
    } else {
        joined
    }
}

/// Whether a component of a glob is not a plain name: it has a wildcard,
/// or a `\` escape (`a\\b` names `a\b`: only matching reads it right).
fn is_wild(c: &OsStr) -> bool {
    c.to_string_lossy().contains(['*', '?', '[', '{', '\\'])
}

/// The literal part of the glob `g`: its components before the first one
/// with a wildcard (all of them for a literal glob).
pub fn literal_prefix(g: &Path) -> PathBuf {
    g.components().take_while(|c| !is_wild(c.as_os_str())).collect()
}

/// The symbolic link, if any, among the literal directories of the
/// (normalised) glob `g`, relative globs spelled below `root`. The globs are
/// matched against real paths, so such a glob would match nothing. A fully
/// literal glob names the path itself (a link there is denied by its name):
/// only the directories on the way matter. A glob without `/` has none.
pub fn link_in_glob_prefix(root: &Path, g: &str) -> Option<PathBuf> {
    if !g.contains('/') {
        return None;
    }
    let full = if g.starts_with('/') { PathBuf::from(g) } else { root.join(g) };
    let lit = literal_prefix(&full);
    let literal = lit.components().count() == full.components().count();
    let dirs = if literal { lit.parent().map(Path::to_path_buf).unwrap_or_default() } else { lit };
    let mut cur = PathBuf::new();
    for c in dirs.components() {
        cur.push(c);
        if fs::symlink_metadata(&cur).is_ok_and(|m| m.file_type().is_symlink()) {
            return Some(cur);
        }
    }
    None
}

impl DenyGlobs {
    /// Compile `globs`; the error names the bad glob.
    pub fn new(globs: &[String]) -> Result<Self, String> {
        let mut names = (GlobSetBuilder::new(), Vec::new());
        let mut paths = (GlobSetBuilder::new(), Vec::new());
        let mut abs = (GlobSetBuilder::new(), Vec::new());
        for g in globs {
            let normal = normalize_glob(g);
            let trimmed = normal.as_str();
            if trimmed.is_empty() || trimmed == "/" {
                return Err(format!("{g:?} would deny everything"));
            }
            let (set, text) = if trimmed.starts_with('/') {
                (&mut abs, trimmed.to_string())
            } else {
                let rel = trimmed.to_string();
                if rel.split('/').any(|c| c == "..") {
                    return Err(format!("{g:?}: `..` is not allowed in a deny glob"));
                }
                if rel.contains('/') {
                    (&mut paths, rel)
                } else {
                    (&mut names, rel)
                }
            };
            // `dir/**` covers `dir` itself too.
            let mut texts = vec![text.clone()];
            if let Some(dir) = text.strip_suffix("/**").filter(|d| !d.is_empty()) {
                texts.push(dir.to_string());
            }
            for t in texts {
                let glob = GlobBuilder::new(&t)
                    .literal_separator(true)
                    .backslash_escape(true)
                    .build()
                    .map_err(|e| format!("bad glob {g:?}: {}", e.kind()))?;
                set.0.add(glob);
                set.1.push(g.clone());
            }
        }
        let build = |b: GlobSetBuilder| b.build().map_err(|e| format!("bad glob: {e}"));
        Ok(DenyGlobs {
            names: build(names.0)?,
            name_src: names.1,
            paths: build(paths.0)?,
            path_src: paths.1,
            abs: build(abs.0)?,
            abs_src: abs.1,
        })
    }

    /// Whether there are no globs.
    pub fn is_empty(&self) -> bool {
        self.name_src.is_empty() && self.path_src.is_empty() && self.abs_src.is_empty()
    }

    /// The glob that denies `path` (absolute, resolved), if any. Relative
    /// globs apply below `root` (the workspace's real path).
    pub fn matching(&self, root: &Path, path: &Path) -> Option<&str> {
        if !self.abs_src.is_empty() {
            for anc in path.ancestors() {
                if let Some(i) = self.abs.matches(anc).first() {
                    return self.abs_src.get(*i).map(String::as_str);
                }
            }
        }
        let rel = path.strip_prefix(root).ok()?;
        if !self.name_src.is_empty() {
            for c in rel.components() {
                if let Component::Normal(name) = c {
                    if let Some(i) = self.names.matches(Path::new(name)).first() {
                        return self.name_src.get(*i).map(String::as_str);
                    }
                }
            }
        }
        if !self.path_src.is_empty() {
            for anc in rel.ancestors() {
                if anc.as_os_str().is_empty() {
                    break;
                }
                if let Some(i) = self.paths.matches(anc).first() {
                    return self.path_src.get(*i).map(String::as_str);
                }
            }
        }
        None
    }
}

impl DenyGlobs {
    /// [`DenyGlobs::matching`] for an entry whose parent is known not to
    /// match (nor any ancestor of it below `root`, nor, for absolute globs,
    /// above it): only the entry's own name and path are tried, since every
    /// other candidate `matching` tries (the names of the directories on
    /// the way, their relative and absolute paths) is one of the parent's,
    /// which all failed. The deny walk descends only into directories that
    /// did not match, so for each entry it meets this is exactly
    /// `matching`, at one set lookup per kind instead of one per path
    /// component.
    fn matching_below_unmatched(&self, root: &Path, path: &Path) -> bool {
        if !self.abs_src.is_empty() && self.abs.is_match(path) {
            return true;
        }
        let Ok(rel) = path.strip_prefix(root) else { return false };
        if rel.as_os_str().is_empty() {
            return false;
        }
        if !self.name_src.is_empty() && path.file_name().is_some_and(|n| self.names.is_match(Path::new(n))) {
            return true;
        }
        !self.path_src.is_empty() && self.paths.is_match(rel)
    }
}

/// What the deny globs mask on disk.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Masks {
    /// The paths that match (for a matching link, its resolved target): a
    /// directory covers everything below it.
    pub paths: Vec<PathBuf>,
    /// The symbolic links whose names matched (their targets are in
    /// `paths`; a mount cannot cover a link).
    pub links: Vec<PathBuf>,
}

/// Why the deny globs could not be expanded.
#[derive(Debug, thiserror::Error)]
pub enum MaskError {
    /// A glob is malformed, goes through a link, or has no literal
    /// directory to walk from.
    #[error("invalid deny glob {glob:?}: {reason}")]
    Glob {
        /// The glob (the relative globs together, space-separated, when
        /// they fail to compile as a set).
        glob: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A directory to walk could not be listed: its matches would stay
    /// unmasked, so the expansion fails closed.
    #[error("cannot list {}, a directory to apply deny globs in", path.display())]
    Unlistable {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: io::Error,
    },
    /// The walk below `root` visited more than [`DENY_WALK_LIMIT`] entries.
    #[error("the deny list walk of {} passed {DENY_WALK_LIMIT} entries", root.display())]
    TooMany {
        /// Where the walk started.
        root: PathBuf,
    },
}

/// Expand the (normalised) deny `globs` into the paths to mask: relative
/// ones by walking `root` (the workspace's real path), absolute ones
/// (`/etc/ssh/*_key`) by walking each from its literal prefix, which must
/// name a directory below `/`. Every glob is read as [`DenyGlobs`] reads
/// it, so the masks hide exactly what the path jail refuses. The walk never
/// follows links; a glob whose literal directories go through one is
/// refused (it would match nothing, and fail open).
pub fn masks(globs: &[String], root: &Path) -> Result<Masks, MaskError> {
    masks_with(globs, None, root)
}

/// The relative globs of `globs` (those not starting with `/`), in order:
/// what [`masks`] compiles into one [`DenyGlobs`] to walk the root with.
pub fn relative_globs(globs: &[String]) -> Vec<String> {
    globs.iter().filter(|g| !g.starts_with('/')).cloned().collect()
}

/// [`masks`], with the relative globs already compiled: `compiled` must be
/// `DenyGlobs::new(&relative_globs(globs))` (a compiled access profile
/// holds it; the compilation is a pure function of the glob text). Only
/// the compilation is reused: every link check and the walk run afresh.
pub fn masks_with(globs: &[String], compiled: Option<&DenyGlobs>, root: &Path) -> Result<Masks, MaskError> {
    let mut out = Masks::default();
    let rel = relative_globs(globs);
    for g in &rel {
        refuse_link_in_prefix(g, root)?;
    }
    if !rel.is_empty() {
        let fresh;
        let deny = match compiled {
            Some(d) => d,
            None => {
                fresh = DenyGlobs::new(&rel).map_err(|reason| MaskError::Glob { glob: rel.join(" "), reason })?;
                &fresh
            }
        };
        // The walk enters only directories that did not match: each entry
        // is judged by its own name and path alone.
        let hit = |p: &Path| deny.matching_below_unmatched(root, p);
        walk(root, root, &hit, None, &mut out, &mut 0)?;
    }
    for g in globs.iter().filter(|g| g.starts_with('/')) {
        let prefix = literal_prefix(Path::new(g));
        refuse_link_in_prefix(g, Path::new("/"))?;
        if prefix.components().count() < 2 {
            return Err(MaskError::Glob {
                glob: g.clone(),
                reason: "an absolute deny glob must start with a literal directory (not /)".into(),
            });
        }
        let deny =
            DenyGlobs::new(std::slice::from_ref(g)).map_err(|reason| MaskError::Glob { glob: g.clone(), reason })?;
        if deny.matching(&prefix, &prefix).is_some() {
            out.paths.push(prefix);
        } else if prefix.is_dir() {
            // Neither the prefix nor any directory above it matched, and the
            // walk enters only directories that did not.
            let hit = |p: &Path| deny.matching_below_unmatched(&prefix, p);
            // A glob without `**` matches only as deep as it has components.
            let depth = (!g.contains("**"))
                .then(|| Path::new(g).components().count().saturating_sub(prefix.components().count()).max(1));
            walk(&prefix, &prefix, &hit, depth, &mut out, &mut 0)?;
        }
    }
    Ok(out)
}

/// Refuse a glob whose literal directories go through a symbolic link.
fn refuse_link_in_prefix(glob: &str, root: &Path) -> Result<(), MaskError> {
    match link_in_glob_prefix(root, glob) {
        Some(link) => Err(MaskError::Glob {
            glob: glob.to_string(),
            reason: format!("{} is a symbolic link; spell the glob with the real path", link.display()),
        }),
        None => Ok(()),
    }
}

/// Walk `dir` (never following links), collecting every entry `hit`
/// matches; a matched directory is not descended into (its mask hides it
/// all). `seen` bounds the walk.
fn walk(
    root: &Path,
    dir: &Path,
    hit: &dyn Fn(&Path) -> bool,
    depth_left: Option<usize>,
    out: &mut Masks,
    seen: &mut usize,
) -> Result<(), MaskError> {
    // getdents64 into our own buffer, not opendir (see `dents`).
    let room = (DENY_WALK_LIMIT + 1).saturating_sub(*seen);
    let entries = match super::dents::list_path(dir, room) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        // A directory we cannot list may still be entered by the command:
        // fail closed rather than leave its matches unmasked.
        Err(source) => return Err(MaskError::Unlistable { path: dir.to_path_buf(), source }),
    };
    for (name, kind) in entries {
        *seen += 1;
        if *seen > DENY_WALK_LIMIT {
            return Err(MaskError::TooMany { root: root.to_path_buf() });
        }
        let p = dir.join(std::ffi::OsStr::from_bytes(name.as_bytes()));
        if kind == EntryType::Symlink {
            // A mount cannot cover a link: when the link's name matches, its
            // target is masked instead (where the sandbox can see it).
            if hit(&p) {
                if let Ok(t) = fs::canonicalize(&p) {
                    out.paths.push(t);
                }
                out.links.push(p);
            }
            continue;
        }
        if hit(&p) {
            out.paths.push(p);
        } else if kind == EntryType::Dir && depth_left != Some(1) {
            walk(root, &p, hit, depth_left.map(|d| d.saturating_sub(1)), out, seen)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn globs(g: &[&str]) -> DenyGlobs {
        match DenyGlobs::new(&g.iter().map(|s| s.to_string()).collect::<Vec<_>>()) {
            Ok(d) => d,
            Err(e) => panic!("{e}"),
        }
    }

    #[test]
    fn names_paths_and_absolute() {
        let d = globs(&[".env*", "secrets/**", "node_modules", "/etc/ssh/*_key", "build/*.key"]);
        let root = Path::new("/ws");
        let hit = |p: &str| d.matching(root, Path::new(p)).map(str::to_string);
        assert_eq!(hit("/ws/.env").as_deref(), Some(".env*"));
        assert_eq!(hit("/ws/app/.env.local").as_deref(), Some(".env*"));
        assert_eq!(hit("/ws/secrets/a/b").as_deref(), Some("secrets/**"));
        assert_eq!(hit("/ws/secrets").as_deref(), Some("secrets/**"), "dir/** covers dir");
        assert_eq!(hit("/ws/web/node_modules/x/y.js").as_deref(), Some("node_modules"));
        assert_eq!(hit("/etc/ssh/ssh_host_rsa_key").as_deref(), Some("/etc/ssh/*_key"));
        assert_eq!(hit("/ws/build/a.key").as_deref(), Some("build/*.key"));
        assert_eq!(hit("/ws/build/sub/a.key"), None, "* does not cross /");
        assert_eq!(hit("/ws/src/main.rs"), None);
        assert_eq!(hit("/ws/environment"), None);
        assert_eq!(hit("/elsewhere/.env"), None, "relative globs apply below the workspace");
    }

    #[test]
    fn a_directory_match_covers_its_contents() {
        let d = globs(&["secrets", "config/prod/"]);
        let root = Path::new("/ws");
        assert!(d.matching(root, Path::new("/ws/secrets/deep/file")).is_some());
        assert!(d.matching(root, Path::new("/ws/config/prod/db.toml")).is_some());
        assert!(d.matching(root, Path::new("/ws/config/dev/db.toml")).is_none());
    }

    #[test]
    fn odd_spellings_mean_the_same() {
        let d = globs(&[".//secrets", "config/./prod/", "/etc//ssh/./*_key"]);
        let root = Path::new("/ws");
        assert!(d.matching(root, Path::new("/ws/secrets/k")).is_some());
        assert!(d.matching(root, Path::new("/ws/config/prod/db")).is_some());
        assert!(d.matching(root, Path::new("/etc/ssh/ssh_host_ed25519_key")).is_some());
        assert_eq!(normalize_glob("./a//b/./c/."), "a/b/c");
        assert_eq!(normalize_glob("//x/"), "/x");
    }

    #[test]
    fn literal_prefixes_stop_at_the_first_wildcard() {
        assert_eq!(literal_prefix(Path::new("/etc/ssh/*_key")), PathBuf::from("/etc/ssh"));
        assert_eq!(literal_prefix(Path::new("/a/b")), PathBuf::from("/a/b"));
        assert_eq!(literal_prefix(Path::new("/**/x")), PathBuf::from("/"));
        assert_eq!(literal_prefix(Path::new("a/{b,c}/d")), PathBuf::from("a"));
        assert_eq!(literal_prefix(Path::new("/a/b\\\\c/d")), PathBuf::from("/a"), "an escape is not a name");
    }

    fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
        r.unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn absolute_globs_mask_what_the_jail_denies() {
        let d = ok(tempfile::tempdir());
        let top = ok(fs::canonicalize(d.path()));
        for f in ["keys/a_key", "keys/b_pub", "keys/deep/c_key", "all/x", "all/y/z"] {
            let p = top.join(f);
            ok(fs::create_dir_all(p.parent().unwrap_or(&top)));
            ok(fs::write(&p, ""));
        }
        let g = |s: &str| format!("{}/{s}", top.display());
        let m = ok(masks(&[g("keys/*_key")], Path::new("/nonexistent")));
        assert_eq!(m.paths, vec![top.join("keys/a_key")], "* stays at its depth");
        let m = ok(masks(&[g("keys/**/*_key")], Path::new("/nonexistent")));
        let mut got = m.paths.clone();
        got.sort();
        assert_eq!(got, vec![top.join("keys/a_key"), top.join("keys/deep/c_key")]);
        // `dir/**` covers `dir` itself, for the jail and the masks alike.
        let m = ok(masks(&[g("all/**")], Path::new("/nonexistent")));
        assert_eq!(m.paths, vec![top.join("all")]);
        let jail = globs(&[&g("all/**")]);
        assert!(jail.matching(Path::new("/nonexistent"), &top.join("all")).is_some());
        assert!(matches!(masks(&["/**/id_rsa".into()], &top), Err(MaskError::Glob { .. })));
    }

    #[test]
    fn bad_globs_are_refused() {
        assert!(DenyGlobs::new(&["/".into()]).is_err());
        assert!(DenyGlobs::new(&["a/../b".into()]).is_err());
        assert!(DenyGlobs::new(&["[".into()]).is_err());
    }

    /// The walk judges each entry by its own name and path only
    /// (`matching_below_unmatched`): the masks are exactly what judging
    /// every entry of the tree with the full `matching` gives, keeping the
    /// shallowest of each matching chain.
    #[test]
    fn the_walk_masks_what_full_matching_masks() {
        let d =
            tempfile::Builder::new().prefix("pc-glob-walk-").tempdir_in("/var/tmp").unwrap_or_else(|e| panic!("{e}"));
        let root = d.path().to_path_buf();
        let files = [
            "a/b/c.key",
            "a/x/b/y",
            "a/b",
            "src/deep/k/z.txt",
            "src/deep/q",
            "secrets/s/t",
            "x/1/y.txt",
            "x/1/2/y.txt",
            "docs/secrets.md",
            "n/.env",
            "n/m/.env.local",
            "keep/me.rs",
            "deep/deep/deep/v",
        ];
        for f in files {
            let p = root.join(f);
            if let Some(parent) = p.parent() {
                let _ = fs::create_dir_all(parent);
            }
            let _ = fs::write(&p, "x");
        }
        let _ = std::os::unix::fs::symlink(root.join("keep"), root.join("n/link.key"));
        let sets: [&[&str]; 5] = [
            &["*.key", "secrets", ".env*"],
            &["a/**/b", "x/*/y.txt"],
            &["**/deep/*", "keep/**"],
            &["deep", "src/deep/**"],
            &["*", "a/b/c.key"],
        ];
        for set in sets {
            let globs: Vec<String> = set.iter().map(|g| g.to_string()).collect();
            let deny = globs_of(&globs);
            // The oracle: every entry, judged whole; a match hides what is below.
            fn all(dir: &Path, out: &mut Vec<PathBuf>) {
                let Ok(rd) = fs::read_dir(dir) else { return };
                for e in rd.flatten() {
                    let p = e.path();
                    out.push(p.clone());
                    if e.file_type().is_ok_and(|t| t.is_dir()) {
                        all(&p, out);
                    }
                }
            }
            let mut every = Vec::new();
            all(&root, &mut every);
            let hits: Vec<PathBuf> = every.into_iter().filter(|p| deny.matching(&root, p).is_some()).collect();
            let mut want: Vec<PathBuf> = hits
                .iter()
                .filter(|p| !hits.iter().any(|q| p.starts_with(q) && p != &q))
                .map(|p| {
                    if fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_symlink()) {
                        fs::canonicalize(p).unwrap_or_default()
                    } else {
                        p.clone()
                    }
                })
                .collect();
            let mut got = ok(masks(&globs, &root)).paths;
            want.sort();
            got.sort();
            assert_eq!(got, want, "{set:?}");
        }
    }

    fn globs_of(g: &[String]) -> DenyGlobs {
        match DenyGlobs::new(g) {
            Ok(d) => d,
            Err(e) => panic!("{e}"),
        }
    }
}
