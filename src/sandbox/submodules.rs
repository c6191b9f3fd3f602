//! After a writable run: submodules the command made. A command that may
//! write an index can add a gitlink (a submodule entry) for a repository it
//! made itself, with any config; host git enters a submodule to check it for
//! changes, and a `.gitmodules` entry `ignore = none` overrides even
//! `-c diff.ignoreSubmodules=all`. So every index the plan read in a
//! writable area is read again (with those of linked worktrees the run
//! added), and for every gitlink whose working tree the plan did not look
//! at (so whose `.git` is neither protected nor guarded), a `.git` there is
//! renamed aside, kept, and named in a warning; a symbolic link on the way
//! to it (which `git ls-files --recurse-submodules` enters) is removed.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::git;
use super::guard;
use super::pending::Guard;
use super::{Cleanup, Warning};

/// A failure for the run's result: which cleanup, the step, the path, why.
pub(super) type Failure = (Cleanup, &'static str, PathBuf, io::Error);

/// Quarantine the `.git` of every gitlink the command added (see the module
/// docs); warnings and failures are appended.
pub(super) fn quarantine_new(work: &Guard, roots: &[&Path], warnings: &mut Vec<Warning>, failures: &mut Vec<Failure>) {
    let fail_rename = cfg!(debug_assertions) && work.fail_git_guard;
    for ix in &indexes_after(work) {
        // The gitlinks this index held when the plan read it: the user's.
        let known: BTreeSet<&Path> = ix.links.iter().map(PathBuf::as_path).collect();
        let mut found = git::Found::default();
        if let Err((file, why)) = git::gitlinks_into(&ix.index, ix.sha256, &mut found) {
            // What cannot be read cannot be checked: git on the host may
            // enter a submodule hidden in it.
            let text = why.explain(&file);
            warnings.push(Warning::SubmoduleIndexUnreadable { index: file.clone(), problem: text.clone() });
            failures.push((Cleanup::GitGuard, "reading the git index after the run", file, io::Error::other(text)));
        }
        // The reader gives gitlinks in git's canonical form only; an index
        // holding any other entry (git reads `./evil` as `evil`) or a split
        // index failed above, and what git may still enter then is among
        // the suspects: quarantined too where a `.git` is there (a tracked
        // file's path that is now a repository is a submodule's to git).
        let suspects =
            found.suspects.into_iter().filter(|rel| fs::symlink_metadata(ix.worktree.join(rel).join(".git")).is_ok());
        let candidates: BTreeSet<PathBuf> = found.gitlinks.into_iter().chain(suspects).collect();
        for rel in candidates {
            let tree = ix.worktree.join(&rel);
            // A gitlink this index held before the run. Not any working
            // tree the plan looked at: one named only in `.gitmodules`, a
            // module git dir's `core.worktree`, or a gitlink of an index
            // the command made could hold a repository it planted in an
            // earlier run (`git_review::r0887`, `r0888`).
            if known.contains(rel.as_path()) {
                continue;
            }
            let dotgit = tree.join(".git");
            match guard::quarantine(roots, &dotgit, fail_rename) {
                Ok(guard::Held::Nothing) => {}
                Ok(guard::Held::Link(removed)) => {
                    let (link, renamed_to, error) = match removed {
                        guard::Removed::Deleted { entry } => (entry, None, None),
                        guard::Removed::Quarantined { entry, to, error } => (entry, Some(to), Some(error.to_string())),
                        guard::Removed::Nothing => continue,
                    };
                    warnings.push(Warning::SubmoduleLinkRemoved {
                        tree,
                        index: ix.index.clone(),
                        link,
                        renamed_to,
                        error,
                    })
                }
                Ok(guard::Held::Renamed(to)) => {
                    warnings.push(Warning::SubmoduleQuarantined { tree, index: ix.index.clone(), from: dotgit, to })
                }
                Err(guard::Failed { step, entry, source }) => {
                    warnings.push(Warning::SubmoduleGuardFailed {
                        tree,
                        dotgit,
                        step: step.to_string(),
                        entry: entry.clone(),
                        error: source.to_string(),
                    });
                    failures.push((Cleanup::GitGuard, step, entry, source));
                }
            }
        }
    }
}

/// The indexes to read again: the plan's (kept in `work`), and those of linked worktrees
/// of their git dirs the plan did not read (made by the command, `git
/// worktree add`), each with the working tree its `gitdir` file names.
fn indexes_after(work: &Guard) -> Vec<git::GitIndex> {
    let mut out = work.git_indexes.clone();
    for ix in &work.git_indexes {
        let Some(gd) = ix.index.parent() else { continue };
        for (private, wt) in git::linked_worktrees(gd) {
            let index = private.join("index");
            if let (Some(worktree), false) = (wt, out.iter().any(|i| i.index == index)) {
                // Made by the command (`git worktree add`): no gitlink of
                // it is the user's.
                out.push(git::GitIndex { index, worktree, sha256: ix.sha256, links: Vec::new() });
            }
        }
    }
    out
}
