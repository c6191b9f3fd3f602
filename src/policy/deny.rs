//! Deny globs: one reading of `deny_paths` for the path jail and the
//! sandbox's masks.

use std::fs;
use std::path::{Component, Path, PathBuf};

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

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

/// The symbolic link, if any, among the literal directories of the
/// (normalised) glob `g`, relative globs spelled below `root`. The globs are
/// matched against real paths, so such a glob would match nothing. A fully
/// literal glob names the path itself (a link there is denied by its name):
/// only the directories on the way matter. A glob without `/` has none.
pub fn link_on_the_way(root: &Path, g: &str) -> Option<PathBuf> {
    if !g.contains('/') {
        return None;
    }
    let full = if g.starts_with('/') { PathBuf::from(g) } else { root.join(g) };
    let mut lit = PathBuf::new();
    let mut literal = true;
    for c in full.components() {
        if c.as_os_str().to_string_lossy().contains(['*', '?', '[', '{']) {
            literal = false;
            break;
        }
        lit.push(c);
    }
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
    fn bad_globs_are_refused() {
        assert!(DenyGlobs::new(&["/".into()]).is_err());
        assert!(DenyGlobs::new(&["a/../b".into()]).is_err());
        assert!(DenyGlobs::new(&["[".into()]).is_err());
    }
}
