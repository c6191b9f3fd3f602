//! The most specific rule wins, in Landlock too, where it can.
//!
//! A write grant may contain a read-only area: the workspace (`--write
//! /srv/data` for a workspace in `/srv/data/ws`) or a readable root (the
//! plan splits only around those; protected paths and hard-linked names
//! stay reported gaps, since splitting around one in `target/` would refuse
//! every new file there). The mount layer enforces the narrower rule exactly (the
//! read-only bind lies over the grant's). Landlock's rules are hierarchical
//! and allow-only, so a rule on the grant would cover the read-only area
//! too. [`split`] therefore replaces such a grant's rule by rules on its
//! entries beside the path to each read-only area: on every directory on
//! the way (the grant itself, then each directory down to the area's
//! parent), every entry that is neither on the way nor read-only gets the
//! grant's rights. What that costs, at those directories only: no new
//! entry can be made there, and none removed or renamed (Landlock answers
//! `EACCES`); an entry made there after the plan is not writable in this
//! run; symbolic links, sockets, fifos and devices there get no rule.
//! Everything below the entries is writable as before.
//!
//! Not split: the host's `/tmp` (every program makes its temporary files
//! directly in it) and a grant with more than [`SPLIT_LIMIT`] such entries
//! or a directory on the way that cannot be listed. A read-only area there
//! stays a reported Landlock gap (the read-only mount alone protects it),
//! and the landlock-only mode, which has no mounts, refuses the run.

use std::fs;
use std::path::{Path, PathBuf};

use serde::Serialize;

/// The most entries one run's split rules may name.
pub const SPLIT_LIMIT: usize = 512;

/// One write grant whose Landlock rule was split.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Split {
    /// The grant.
    pub grant: PathBuf,
    /// The read-only areas beneath it that its rules leave out.
    pub holes: Vec<PathBuf>,
    /// The directories on the way (the grant first) where Landlock refuses
    /// new entries, removals and renames.
    pub closed: Vec<PathBuf>,
    /// The entries that got the grant's rule instead.
    pub entries: Vec<PathBuf>,
}

/// Split the rules of the `splittable` paths in `writable` around the
/// `read_only` areas beneath them. Returns the remaining whole rules and
/// the splits (whose entries are rules too).
pub fn split(writable: &[PathBuf], splittable: &[PathBuf], read_only: &[PathBuf]) -> (Vec<PathBuf>, Vec<Split>) {
    let mut whole = Vec::new();
    let mut splits = Vec::new();
    let mut budget = SPLIT_LIMIT;
    for w in writable {
        let holes = holes_of(w, writable, read_only);
        let done = (splittable.contains(w) && w != Path::new("/tmp") && !holes.is_empty())
            .then(|| entries(w, &holes))
            .flatten()
            .filter(|(_, entries)| entries.len() <= budget);
        match done {
            Some((closed, entries)) => {
                budget -= entries.len();
                splits.push(Split { grant: w.clone(), holes, closed, entries });
            }
            None => whole.push(w.clone()),
        }
    }
    (whole, splits)
}

/// The read-only areas strictly beneath `w` that no other writable path
/// covers (a narrower grant's own rule would cover it anyway), without
/// those beneath another of them.
fn holes_of(w: &Path, writable: &[PathBuf], read_only: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = read_only
        .iter()
        .filter(|h| h.starts_with(w) && h.as_path() != w)
        .filter(|h| !writable.iter().any(|o| o.as_path() != w && h.starts_with(o)))
        .cloned()
        .collect();
    out.sort();
    out.dedup();
    let all = out.clone();
    out.retain(|h| !all.iter().any(|o| o != h && h.starts_with(o)));
    out
}

/// The directories on the way from `grant` to each hole, and their other
/// entries (directories and regular files only). None: one cannot be read.
fn entries(grant: &Path, holes: &[PathBuf]) -> Option<(Vec<PathBuf>, Vec<PathBuf>)> {
    let mut closed: Vec<PathBuf> = holes
        .iter()
        .flat_map(|h| h.ancestors().skip(1).take_while(|a| a.starts_with(grant)).map(Path::to_path_buf))
        .collect();
    closed.sort();
    closed.dedup();
    let mut out = Vec::new();
    for dir in &closed {
        for e in fs::read_dir(dir).ok()? {
            let e = e.ok()?;
            let p = e.path();
            if closed.contains(&p) || holes.contains(&p) {
                continue;
            }
            let ft = e.file_type().ok()?;
            if ft.is_dir() || ft.is_file() {
                out.push(p);
            }
        }
    }
    out.sort();
    Some((closed, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grant_is_split_around_the_read_only_area_beneath_it() {
        let d = tempfile::Builder::new().prefix("pc-split-").tempdir_in("/var/tmp").unwrap_or_else(|e| panic!("{e}"));
        let g = fs::canonicalize(d.path()).unwrap_or_default();
        for p in ["a/ws/src", "a/other", "b"] {
            fs::create_dir_all(g.join(p)).unwrap_or_else(|e| panic!("{e}"));
        }
        fs::write(g.join("f"), "").unwrap_or_else(|e| panic!("{e}"));
        let _ = std::os::unix::fs::symlink("a/ws", g.join("l"));
        let ws = g.join("a/ws");
        let (whole, splits) =
            split(&[PathBuf::from("/dev"), g.clone()], std::slice::from_ref(&g), std::slice::from_ref(&ws));
        assert_eq!(whole, vec![PathBuf::from("/dev")]);
        assert_eq!(splits.len(), 1);
        assert_eq!(splits[0].closed, vec![g.clone(), g.join("a")]);
        assert_eq!(splits[0].entries, vec![g.join("a/other"), g.join("b"), g.join("f")], "no rule on the link");
        // A narrower writable path over the area: nothing to gain.
        let (whole, splits) = split(&[g.clone(), g.join("a")], std::slice::from_ref(&g), &[ws]);
        assert!(splits.is_empty());
        assert_eq!(whole.len(), 2);
    }
}
