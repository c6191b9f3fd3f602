//! The gate: what an action asks for, what a host's gate answers, and what
//! the action gets — the meet of the two.
//!
//! Every action the library runs for a caller (a shell command, a direct
//! file write) is described once as an [`Action`] and shown to a [`Gate`]
//! before anything happens. The gate answers [`Decision::Allow`] with the
//! write access it is willing to let through, or [`Decision::Refuse`] with a
//! reason; the action then runs with [`Access::meet`] of what it asked for
//! and what the gate allowed. A gate can take write access away or narrow
//! the write grants to a subset; it can never hand out more than was asked.
//! A gate that cannot decide returns an error ([`GateError`]): that is a
//! fault the caller sees as a fault, never a refusal and never permission.
//!
//! The built-in gate is the policy file's ordered `[[gate]]` rules
//! ([`rules`]); a Rust host may pass its own `impl Gate`.

mod meet;
pub mod rules;

pub use meet::{GateRefusal, Met};
pub use rules::Rules;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;

use serde::{Deserialize, Serialize};

use crate::policy::{Interpreter, PlannedCommand};

/// A boxed future, so that `dyn Gate` works on stable Rust.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Write access: the whole workspace, and per-path grants (real paths).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Access {
    /// The whole workspace is writable (protected paths stay read-only).
    pub writable: bool,
    /// Paths writable beyond (or instead of) the workspace: resolved, absolute.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub write_grants: Vec<PathBuf>,
}

impl Access {
    /// No write access at all.
    pub fn read_only() -> Access {
        Access::default()
    }

    /// Whether this access lets anything be written.
    pub fn writes(&self) -> bool {
        self.writable || !self.write_grants.is_empty()
    }

    /// In words, for people: "no write access", or "write access to the
    /// workspace, /ws/target"; each path rendered by `show`.
    pub fn describe(&self, show: impl Fn(&std::path::Path) -> String) -> String {
        let mut parts = Vec::new();
        if self.writable {
            parts.push("the workspace".to_string());
        }
        parts.extend(self.write_grants.iter().map(|g| show(g)));
        if parts.is_empty() {
            "no write access".to_string()
        } else {
            format!("write access to {}", parts.join(", "))
        }
    }
}

/// Which backend carries out an action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// The full sandbox: namespaces, read-only mounts, Landlock, seccomp.
    Sandbox,
    /// The degraded landlock-only sandbox (no namespaces).
    LandlockOnly,
    /// The library's own file operations in the host process, through the
    /// workspace's directory descriptor.
    Direct,
    /// A backend that runs no process and touches no disk: the workspace's
    /// mock (an in-memory tree, scripted command results, for hermetic
    /// tests). Nothing is enforced by the kernel.
    Mock,
}

/// A shell command, as the gate sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShellExec {
    /// The line as given (argv mode: the words quoted into one line).
    pub line: String,
    /// How the line is read and run.
    pub interpreter: Interpreter,
    /// Every command the policy checker found in the line, in order, with
    /// the commands each starts in turn (`find -exec`, wrappers).
    pub commands: Vec<PlannedCommand>,
    /// The directory the line runs in (inside the workspace).
    pub cwd: PathBuf,
    /// The workspace's root (resolved), so that an audit record says which
    /// workspace `asked.writable` opens. `None` when the caller did not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<PathBuf>,
    /// The write access the caller asked for.
    pub asked: Access,
    /// Whether it runs as a background job.
    #[serde(default)]
    pub background: bool,
    /// What will run it.
    pub backend: Backend,
}

/// A direct file operation, as the gate sees it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsAction {
    /// The path as the caller gave it.
    pub path: PathBuf,
    /// The path the jail resolved it to (real parent, final name kept).
    pub resolved: PathBuf,
    /// What will carry it out.
    pub backend: Backend,
}

/// Everything the gate sees: one action a caller asked for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum Action {
    /// Run a shell command (`shell.exec`).
    #[serde(rename = "shell.exec")]
    ShellExec(ShellExec),
    /// Write a whole file (`fs.write`).
    #[serde(rename = "fs.write")]
    FsWrite(FsAction),
    /// Replace text in a file (`fs.edit`).
    #[serde(rename = "fs.edit")]
    FsEdit(FsAction),
    /// Several replacements in one file, all or none (`fs.multi_edit`).
    #[serde(rename = "fs.multi_edit")]
    FsMultiEdit(FsAction),
    /// Remove a file or an empty directory (`fs.remove`).
    #[serde(rename = "fs.remove")]
    FsRemove(FsAction),
    /// Make a directory (`fs.mkdir`).
    #[serde(rename = "fs.mkdir")]
    FsMkdir(FsAction),
}

impl Action {
    /// The action's kind as written in rules and audit records: `shell.exec`,
    /// `fs.write`, …
    pub fn kind(&self) -> &'static str {
        match self {
            Action::ShellExec(_) => "shell.exec",
            Action::FsWrite(_) => "fs.write",
            Action::FsEdit(_) => "fs.edit",
            Action::FsMultiEdit(_) => "fs.multi_edit",
            Action::FsRemove(_) => "fs.remove",
            Action::FsMkdir(_) => "fs.mkdir",
        }
    }

    /// The write access the action asks for: a shell command's as given; a
    /// file operation asks to write its resolved path.
    pub fn asked(&self) -> Access {
        match self {
            Action::ShellExec(s) => s.asked.clone(),
            Action::FsWrite(f)
            | Action::FsEdit(f)
            | Action::FsMultiEdit(f)
            | Action::FsRemove(f)
            | Action::FsMkdir(f) => Access { writable: false, write_grants: vec![f.resolved.clone()] },
        }
    }
}

/// What a gate answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "kebab-case")]
pub enum Decision {
    /// The action may run, with at most this access.
    Allow {
        /// Whether the whole workspace may stay writable (if it was asked).
        writable: bool,
        /// `None`: the grants as asked. `Some(paths)`: only these (each must
        /// lie within what was asked; any other is dropped, never added).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        write_grants: Option<Vec<PathBuf>>,
        /// Which rule answered (for the audit), if the gate has rules.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rule: Option<String>,
    },
    /// Nothing runs.
    Refuse {
        /// Why, in words a model can act on.
        reason: String,
        /// Which rule answered, if the gate has rules.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rule: Option<String>,
    },
}

/// A gate that could not decide. Never a refusal, never permission: the
/// action does not run and the caller sees a fault.
#[derive(Debug, thiserror::Error)]
#[error("the gate could not decide")]
pub struct GateError(#[source] pub Box<dyn std::error::Error + Send + Sync>);

/// Decides, before anything runs, whether an action may run and with how
/// much write access. Async, so a host can ask a human or a service.
pub trait Gate: Send + Sync {
    /// Judge one action.
    fn check<'a>(&'a self, action: &'a Action) -> BoxFuture<'a, Result<Decision, GateError>>;
}
