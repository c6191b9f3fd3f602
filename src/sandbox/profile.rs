//! The compiled access profile: what planning a command computes that no
//! command (and nothing else on the host) can change, computed once.
//!
//! A long-lived owner (a [`crate::runner::Runner`], a workspace) plans one
//! command after another. [`Sandbox::plan`] starts from scratch each time;
//! [`Sandbox::plan_with`] takes a [`Profile`] compiled once and reuses what
//! it holds. The plan is the same either way (the same [`Plan`], field for
//! field, spec included: `profile::r0450…`).
//!
//! # What a profile holds, and why none of it can go stale
//!
//! Only **pure** computations: values that are a function of their text
//! inputs alone, never of the file system, the host's environment or the
//! time.
//!
//! - The compiled deny globs (one [`DenyGlobs`] for the relative globs,
//!   the `GlobSet`s' regexes). Kept with the exact glob text it was
//!   compiled from; a request whose (normalised) relative globs differ in
//!   any way (an extra `--deny`, another order) compiles its own, as a
//!   fresh plan would.
//!
//! (The seccomp programs' SHA-256, once cached here too, is a constant of
//! the build: `build.rs` writes it, `plan::seccomp_sha256` takes it.)
//!
//! A cache keyed on its whole input cannot serve an answer for another
//! input, so no invalidation is needed and none is attempted.
//!
//! # What is recomputed for every command, and why
//!
//! Everything that reads the file system: a writable command (or the
//! user, or another program) can change any of it between two commands,
//! and a stale answer there is an escape.
//!
//! - The canonical workspace, readable roots and grants, and every link
//!   check on their way (a grant's link swapped between runs must be
//!   refused as before); the missing grants to create.
//! - The deny walk: a writable run can create a file that matches a deny
//!   glob (the next run must mask it), and a link in a glob's literal
//!   prefix.
//! - Git discovery: `.git` dirs and files, gitlinks and submodules, each
//!   git dir's config (`core.hooksPath`, includes, `commondir`,
//!   `config.worktree`), hooks and where their links lead, the files the
//!   git guard must watch because they are missing (a `.git/hooks` the
//!   last writable run created must be protected by the next).
//! - The hard-link, privileged-program and unlistable-directory walk of
//!   the writable areas, and the alias check.
//! - The system roots' layout, the device nodes, the workspace-lock
//!   directory's view, the readable-root check of a root caller.
//! - The environment a command inherits (`inherit_env` reads the host
//!   process's environment, which the process may change), the
//!   containment decision (it reads the request's limits and the cgroup
//!   host the sandbox probed), the caller's ids.
//!
//! Caching any of those would need a key that proves nothing changed.
//! (dev, ino, mtime, ctime) of each directory walked does not: a
//! directory's ctime says its entries changed, but not that a file in it
//! gained a hard link elsewhere (the hard-link check reads each file's
//! link count), and timestamps are coarse enough that two changes within
//! one tick leave the same stamp (git's "racily clean" problem). The walks
//! are what a plan costs on a large tree (`scripts/bench-plan` measures
//! it); they stay, because a plan that skips one can let a command keep
//! what it planted.

use super::{ExecRequest, Plan, Sandbox, SandboxError};
use crate::path::glob::relative_globs;
use crate::path::{normalize_glob, DenyGlobs};

/// What planning reuses across commands: compiled deny globs (see the
/// module documentation for why nothing here can go stale). Cheap to share;
/// built by [`Profile::new`] or [`Sandbox::profile`].
#[derive(Debug, Clone)]
pub struct Profile {
    /// The relative deny globs (normalised, in order) `deny` was compiled
    /// from: the key it is used under.
    deny_text: Vec<String>,
    /// Their compilation (None when there are none).
    deny: Option<DenyGlobs>,
}

impl Profile {
    /// Compile a profile for requests with these deny globs (as a request
    /// or a policy spells them). Requests with other globs can still be
    /// planned with it: theirs are compiled for them.
    pub fn new(deny: &[String]) -> Result<Profile, SandboxError> {
        let normal: Vec<String> = deny.iter().map(|g| normalize_glob(g)).collect();
        let deny_text = relative_globs(&normal);
        let deny = if deny_text.is_empty() {
            None
        } else {
            Some(
                DenyGlobs::new(&deny_text)
                    .map_err(|reason| SandboxError::Glob { glob: deny_text.join(" "), reason })?,
            )
        };
        Ok(Profile { deny_text, deny })
    }

    /// The compiled relative deny globs, when they were compiled from
    /// exactly `rel` (normalised, in order).
    pub(super) fn deny_globs(&self, rel: &[String]) -> Option<&DenyGlobs> {
        (self.deny_text == rel).then_some(self.deny.as_ref()).flatten()
    }
}

impl Sandbox {
    /// Compile a profile for requests like `req` (its deny globs).
    pub fn profile(&self, req: &ExecRequest) -> Result<Profile, SandboxError> {
        Profile::new(&req.deny)
    }

    /// [`Sandbox::plan`], reusing what `profile` compiled. Every check of
    /// the file system runs afresh; the plan equals a fresh one.
    pub fn plan_with(&self, profile: &Profile, req: &ExecRequest) -> Result<Plan, SandboxError> {
        self.plan_opt(Some(profile), req)
    }
}
