//! Paths as the policy and the sandbox both read them: one leaf module, so
//! that the two layers agree on what a path names and neither imports the
//! other for it.
//!
//! - [`lexical`]: a path with `.` and `..` applied, without the filesystem;
//! - [`walk`]: the kernel-like resolution (links followed, `..` after a link
//!   applied to its target) and the links met on the way;
//! - [`memo`]: path lookups remembered for the length of one plan;
//! - [`dents`]: directories listed with `getdents64`, not `opendir`;
//! - [`glob`]: the deny globs ([`DenyGlobs`], [`normalize_glob`]) and the
//!   walk that expands them into the paths the sandbox masks;
//! - [`SYSTEM_ROOTS`] and the small predicates built on them.
//!
//! Nothing here imports `policy` or `sandbox`.

pub mod dents;
pub mod dir;
pub mod glob;
pub mod memo;
pub mod walk;

use std::path::{Component, Path, PathBuf};

pub use glob::{link_in_glob_prefix, literal_prefix, normalize_glob, DenyGlobs};
pub use walk::{links_met, links_on_the_way, replaceable_link, walk_as_far_as_possible};

/// System directories made visible read-only when they exist.
pub const SYSTEM_ROOTS: &[&str] = &["/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt"];

/// Whether `real` lies in a system directory or contains one (a write
/// grant there would open the system to the command).
pub fn touches_system_root(real: &Path) -> bool {
    SYSTEM_ROOTS.iter().any(|r| real.starts_with(r) || Path::new(r).starts_with(real))
}

/// `p` with `.` dropped and `..` applied, without touching the filesystem.
pub fn lexical(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// Whether the link `link` sits in one of `areas` (its directory does): a
/// command allowed to write there could point it elsewhere.
pub fn in_areas(link: &Path, areas: &[PathBuf]) -> bool {
    link.parent().is_some_and(|d| areas.iter().any(|a| d.starts_with(a)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_applies_dot_and_dotdot() {
        assert_eq!(lexical(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
        assert_eq!(lexical(Path::new("/../a")), PathBuf::from("/a"));
        assert_eq!(lexical(Path::new("a/b/..")), PathBuf::from("a"));
    }

    #[test]
    fn system_roots_are_touched_from_above_and_below() {
        assert!(touches_system_root(Path::new("/usr/lib")));
        assert!(touches_system_root(Path::new("/")));
        assert!(!touches_system_root(Path::new("/home/u")));
        assert!(!touches_system_root(Path::new("/usrx")));
    }
}
