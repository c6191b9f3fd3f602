//! Where a scope may not go: into a git dir of its parent.
//!
//! A scope is a workspace of its own for the file tools and the sandbox,
//! and both anchor git's protections at that workspace's own `.git` (the
//! protected-path rule: a `.git` component below the root, `.git/hooks`,
//! `.git/config`; the sandbox: the git dirs found from `<workspace>/.git`).
//! A scope *inside* a git dir of the parent (`.git`, `.git/modules/x`, a
//! bare repository in the tree) would make that git dir's `hooks/`,
//! `config` and `commondir` ordinary files of the scope, writable by its
//! file tools and its writable commands: a hook planted there runs the next
//! time the user's git does. So such a scope is refused.

use std::path::{Path, PathBuf};

/// The first directory from `dir` up to `root` (both included) that is a
/// git dir: named `.git` (in any case: on a case-folding file system
/// `.GIT` is `.git`), or holding what git takes for one (a `HEAD` file and
/// an `objects` directory or a `commondir` file). `None` when there is
/// none. `dir` is a real path inside the real path `root`.
pub(crate) fn git_dir_around(root: &Path, dir: &Path) -> Option<PathBuf> {
    let mut cur = Some(dir);
    while let Some(d) = cur.filter(|d| d.starts_with(root)) {
        let named = d.file_name().is_some_and(|n| n.as_encoded_bytes().eq_ignore_ascii_case(b".git"));
        if named || looks_like_git_dir(d) {
            return Some(d.to_path_buf());
        }
        cur = d.parent();
    }
    None
}

fn looks_like_git_dir(d: &Path) -> bool {
    let is = |name: &str, dir: bool| {
        std::fs::symlink_metadata(d.join(name)).is_ok_and(|m| if dir { m.is_dir() } else { m.is_file() })
    };
    is("HEAD", false) && (is("objects", true) || is("commondir", false))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_dirs_are_found_at_or_above_the_scope() {
        let t = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = t.path();
        for d in [".git/hooks", "bare/objects", "wt/x", "src/y"] {
            std::fs::create_dir_all(root.join(d)).unwrap_or_else(|e| panic!("{e}"));
        }
        std::fs::write(root.join("bare/HEAD"), "ref: refs/heads/main\n").unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(root.join("wt/HEAD"), "x\n").unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(root.join("wt/commondir"), "../..\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(git_dir_around(root, &root.join(".git/hooks")), Some(root.join(".git")));
        assert_eq!(git_dir_around(root, &root.join("bare/objects")), Some(root.join("bare")));
        assert_eq!(git_dir_around(root, &root.join("wt/x")), Some(root.join("wt")));
        assert_eq!(git_dir_around(root, &root.join("src/y")), None);
        // A HEAD file alone (a file of a project) is not a git dir.
        std::fs::write(root.join("src/HEAD"), "x\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(git_dir_around(root, &root.join("src/y")), None);
    }
}
