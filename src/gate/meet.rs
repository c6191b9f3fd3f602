//! The meet: the access an action gets is what it asked for AND what the
//! gate allowed. A gate can take write access away or narrow the grants; a
//! path it names outside what was asked is dropped (and reported), never
//! added.
//!
//! Paths are compared component-wise (`Path::starts_with`), so `/ws/target`
//! contains `/ws/target/debug` but not `/ws/target2`. The caller resolves
//! every path before the meet: the asked grants, the workspace root and the
//! gate's grants are real, absolute paths. The meet does not touch the
//! filesystem and does not trust a spelling: a gate path that is relative or
//! has a `.` or `..` component is dropped, and an asked path (or workspace
//! root) spelled that way contains nothing.

use std::path::{Component, Path, PathBuf};

use super::{Access, Decision};

/// What an allowed action gets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Met {
    /// The effective access: the meet of the asked and the allowed.
    pub effective: Access,
    /// Paths the gate named that lie outside what was asked (it tried to
    /// widen the access): left out of `effective`.
    pub dropped: Vec<PathBuf>,
    /// The rule that answered, if the gate has rules.
    pub rule: Option<String>,
}

/// The gate refused the action: nothing runs.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("refused by the gate: {reason}")]
pub struct GateRefusal {
    /// Why, as the gate said it.
    pub reason: String,
    /// The rule that refused, if the gate has rules.
    pub rule: Option<String>,
}

impl Access {
    /// The access an action that asked for `self` runs with after the gate
    /// answered `decision`. `workspace` is the workspace's real path: a gate
    /// grant inside it stands when the whole workspace was asked writable.
    ///
    /// - `writable` = asked `writable` and allowed `writable`;
    /// - `write_grants: None` keeps the asked grants;
    /// - `write_grants: Some(paths)` replaces them with those of `paths`
    ///   that lie within an asked grant, or within the workspace when it was
    ///   asked writable; every other path is dropped and listed in
    ///   [`Met::dropped`].
    pub fn meet(&self, decision: &Decision, workspace: &Path) -> Result<Met, GateRefusal> {
        let (writable, grants, rule) = match decision {
            Decision::Refuse { reason, rule } => {
                return Err(GateRefusal { reason: reason.clone(), rule: rule.clone() })
            }
            Decision::Allow { writable, write_grants, rule } => (*writable, write_grants, rule),
        };
        let mut effective = Access { writable: self.writable && writable, write_grants: Vec::new() };
        let mut dropped = Vec::new();
        match grants {
            None => effective.write_grants = self.write_grants.clone(),
            Some(paths) => {
                for p in paths {
                    if !self.permits(p, workspace) {
                        if !dropped.contains(p) {
                            dropped.push(p.clone());
                        }
                    } else if !effective.write_grants.contains(p) {
                        effective.write_grants.push(p.clone());
                    }
                }
            }
        }
        Ok(Met { effective, dropped, rule: rule.clone() })
    }

    /// Whether `path` (real, absolute) lies within this access: within a
    /// grant, or within `workspace` (its real path) when the workspace is
    /// writable. A path spelled with `.` or `..`, or relative, lies within
    /// nothing; so does anything within such a grant or workspace root.
    ///
    /// A caller that resolves the effective grants again later (the sandbox
    /// plan follows links) can check each resolved path against the asked
    /// access with this: a link planted between the gate and the plan must
    /// not carry a grant out of what was asked.
    pub fn permits(&self, path: &Path, workspace: &Path) -> bool {
        if !is_clean(path) {
            return false;
        }
        let within = |root: &Path| is_clean(root) && path.starts_with(root);
        self.write_grants.iter().any(|g| within(g)) || (self.writable && within(workspace))
    }
}

/// Absolute, with no `.` or `..` component (`Path::components` already
/// drops a `.` after the first component and repeated `/`; the raw bytes
/// are checked too, so `/ws/./x` is refused as spelled).
pub(crate) fn is_clean(p: &Path) -> bool {
    p.is_absolute()
        && p.components().all(|c| matches!(c, Component::RootDir | Component::Normal(_)))
        && !p.as_os_str().as_encoded_bytes().split(|b| *b == b'/').any(|c| c == b"." || c == b"..")
}

#[cfg(test)]
mod tests {
    use super::*;

    const WS: &str = "/ws";

    fn asked(writable: bool, grants: &[&str]) -> Access {
        Access { writable, write_grants: grants.iter().map(PathBuf::from).collect() }
    }

    fn allow(writable: bool, grants: Option<&[&str]>) -> Decision {
        Decision::Allow { writable, write_grants: grants.map(|g| g.iter().map(PathBuf::from).collect()), rule: None }
    }

    fn met(a: &Access, d: &Decision) -> Met {
        match a.meet(d, Path::new(WS)) {
            Ok(m) => m,
            Err(e) => panic!("refused: {e}"),
        }
    }

    fn paths(p: &[&str]) -> Vec<PathBuf> {
        p.iter().map(PathBuf::from).collect()
    }

    // The seed's table, row by row.

    #[test]
    fn asked_writable_gate_allows_writes() {
        let m = met(&asked(true, &[]), &allow(true, None));
        assert_eq!(m.effective, asked(true, &[]));
        assert!(m.dropped.is_empty());
    }

    #[test]
    fn asked_writable_gate_takes_write_access_away() {
        let m = met(&asked(true, &["/tmp"]), &allow(false, Some(&[])));
        assert_eq!(m.effective, Access::read_only());
        assert!(!m.effective.writes());
        assert!(m.dropped.is_empty());
        // `writable: false` alone keeps the asked grants (as the table's
        // "takes away" row reads for the workspace) but not the workspace.
        let m = met(&asked(true, &["/tmp"]), &allow(false, None));
        assert_eq!(m.effective, asked(false, &["/tmp"]));
    }

    #[test]
    fn asked_read_only_gate_allows_stays_read_only() {
        let m = met(&asked(false, &[]), &allow(true, None));
        assert_eq!(m.effective, Access::read_only());
    }

    #[test]
    fn asked_read_only_gate_cannot_hand_out_write_access() {
        let m = met(&asked(false, &[]), &allow(true, Some(&["/ws", "/ws/src", "/tmp"])));
        assert_eq!(m.effective, Access::read_only(), "a gate cannot grant what was not asked");
        assert_eq!(m.dropped, paths(&["/ws", "/ws/src", "/tmp"]), "the attempt is reported");
    }

    #[test]
    fn either_way_a_refusal_runs_nothing() {
        for a in [asked(true, &[]), asked(false, &[]), asked(false, &["/tmp"])] {
            let d = Decision::Refuse { reason: "needs review".into(), rule: Some("no-push".into()) };
            let r = a.meet(&d, Path::new(WS));
            assert_eq!(r, Err(GateRefusal { reason: "needs review".into(), rule: Some("no-push".into()) }));
        }
    }

    // Grants.

    #[test]
    fn a_narrower_grant_replaces_the_asked_one() {
        let m = met(&asked(false, &["/ws/target"]), &allow(true, Some(&["/ws/target/debug"])));
        assert_eq!(m.effective, asked(false, &["/ws/target/debug"]));
        assert!(m.dropped.is_empty());
        // Inside a writable workspace: only `.git` stays writable.
        let m = met(
            &asked(true, &[]),
            &Decision::Allow { writable: false, write_grants: Some(paths(&["/ws/.git"])), rule: Some("git".into()) },
        );
        assert_eq!(m.effective, asked(false, &["/ws/.git"]));
        assert_eq!(m.rule.as_deref(), Some("git"));
    }

    #[test]
    fn a_subset_of_the_asked_grants_keeps_only_that_subset() {
        let m = met(&asked(false, &["/ws/target", "/tmp"]), &allow(false, Some(&["/tmp"])));
        assert_eq!(m.effective, asked(false, &["/tmp"]));
    }

    #[test]
    fn attempted_widening_of_a_grant_is_dropped() {
        // Wider than asked, a sibling, a prefix that is not a component.
        let m = met(
            &asked(false, &["/ws/target/debug"]),
            &allow(true, Some(&["/ws/target", "/ws/src", "/ws/target/debugger", "/ws/target/debug/x"])),
        );
        assert_eq!(m.effective, asked(false, &["/ws/target/debug/x"]));
        assert_eq!(m.dropped, paths(&["/ws/target", "/ws/src", "/ws/target/debugger"]));
    }

    #[test]
    fn a_grant_inside_the_workspace_needs_the_workspace_asked_writable() {
        // Only /tmp was asked: the workspace was not, so .git is dropped.
        let m = met(&asked(false, &["/tmp"]), &allow(false, Some(&["/ws/.git", "/tmp/build"])));
        assert_eq!(m.effective, asked(false, &["/tmp/build"]));
        assert_eq!(m.dropped, paths(&["/ws/.git"]));
        // The same with the workspace asked: it stands.
        let m = met(&asked(true, &["/tmp"]), &allow(false, Some(&["/ws/.git", "/tmp/build"])));
        assert_eq!(m.effective, asked(false, &["/ws/.git", "/tmp/build"]));
        assert!(m.dropped.is_empty());
        // The workspace itself, or a path beside it, is not inside a grant.
        let m = met(&asked(false, &["/ws/target"]), &allow(true, Some(&["/ws", "/wsx/target"])));
        assert_eq!(m.effective, Access::read_only());
        assert_eq!(m.dropped, paths(&["/ws", "/wsx/target"]));
    }

    #[test]
    fn dot_dot_and_relative_spellings_are_dropped_not_trusted() {
        let m = met(
            &asked(false, &["/ws/target"]),
            &allow(
                true,
                Some(&["/ws/target/../src", "/ws/target/./x", "target/debug", "/ws/target/..", "", "/ws/target//ok"]),
            ),
        );
        assert_eq!(m.effective, asked(false, &["/ws/target//ok"]), "only the clean path stands");
        assert_eq!(m.dropped, paths(&["/ws/target/../src", "/ws/target/./x", "target/debug", "/ws/target/..", ""]));
        // An asked grant or a workspace root spelled with `..` contains nothing.
        let m = met(&asked(false, &["/ws/target/.."]), &allow(true, Some(&["/ws/target/../src"])));
        assert_eq!(m.effective, Access::read_only());
        let m = asked(true, &[]).meet(&allow(false, Some(&["/ws/x/../../etc"])), Path::new("/ws"));
        assert!(m.is_ok_and(|m| m.effective == Access::read_only()));
        let m = asked(true, &[]).meet(&allow(false, Some(&["/a/b/c"])), Path::new("/a/../a"));
        assert!(m.is_ok_and(|m| m.effective == Access::read_only() && m.dropped == paths(&["/a/b/c"])));
    }

    #[test]
    fn no_grants_decision_keeps_the_asked_grants_and_duplicates_collapse() {
        let m = met(&asked(true, &["/tmp", "/ws/target"]), &allow(true, None));
        assert_eq!(m.effective, asked(true, &["/tmp", "/ws/target"]));
        let m = met(&asked(false, &["/tmp"]), &allow(false, Some(&["/tmp/a", "/tmp/a", "/etc", "/etc"])));
        assert_eq!(m.effective, asked(false, &["/tmp/a"]));
        assert_eq!(m.dropped, paths(&["/etc"]));
    }

    #[test]
    fn the_meet_never_gives_more_than_was_asked() {
        // Every combination of a small universe: the effective access is
        // always within the asked one.
        let universe = ["/ws", "/ws/.git", "/ws/target", "/tmp", "/tmp/x", "/etc", "/ws/../etc"];
        let subsets = |mask: u32| -> Vec<&str> {
            universe.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, p)| *p).collect()
        };
        for aw in [false, true] {
            for am in 0..(1u32 << 4) {
                let a = asked(aw, &subsets(am));
                for gw in [false, true] {
                    for gm in (0..(1u32 << universe.len())).step_by(7) {
                        let g = subsets(gm);
                        for d in [allow(gw, None), allow(gw, Some(&g))] {
                            let m = met(&a, &d);
                            assert!(!m.effective.writable || a.writable);
                            for p in &m.effective.write_grants {
                                assert!(a.permits(p, Path::new(WS)), "{p:?} not within {a:?}");
                            }
                        }
                    }
                }
            }
        }
    }
}
