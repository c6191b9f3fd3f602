//! What the git tests share: host git isolated from the caller's own
//! configuration, the README's flags for host git after a writable run, a
//! marker file outside the workspace for what a planted command touches,
//! and a writable request.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use portcullis::sandbox::ExecRequest;

use super::util::{test_root, Ws};

/// The flags the README recommends for running git on the host after a
/// writable run.
pub const README_FLAGS: [&str; 8] = [
    "-c",
    "core.fsmonitor=",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "safe.bareRepository=explicit",
    "-c",
    "diff.ignoreSubmodules=all",
];

/// Git on the host in `dir`, with no user or system config of its own and
/// an identity in the environment (success not required).
pub fn host_git(dir: &Path, args: &[&str]) -> Output {
    Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .unwrap_or_else(|e| panic!("git {args:?}: {e}"))
}

/// A marker file outside the workspace, written by what the command plants.
pub struct Marker {
    dir: tempfile::TempDir,
}

impl Marker {
    pub fn new() -> Marker {
        let dir = tempfile::Builder::new().prefix("pc-mark-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("{e}"));
        Marker { dir }
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().join("hit")
    }

    pub fn hit(&self) -> bool {
        self.path().exists()
    }

    /// Whether it was written; it is removed for the next check.
    pub fn take(&self) -> bool {
        let hit = self.hit();
        let _ = fs::remove_file(self.path());
        hit
    }

    /// The shell that prints a git config snippet setting `core.fsmonitor`
    /// to touch the marker.
    pub fn fsmonitor(&self) -> String {
        format!("printf '[core]\\n\\tfsmonitor = \"touch {}; false\"\\n'", self.path().display())
    }
}

/// `sh -c script` in `ws`, with the whole workspace writable.
pub fn writable(ws: &Ws, script: &str) -> ExecRequest {
    let mut req = ws.req(&["sh", "-c", script]);
    req.writable = true;
    req
}
