//! The audit: a record of every action, for the security team.
//!
//! The library calls an [`Audit`] for every action it is asked to run: an
//! [`Event::Allowed`] record with the effective access **before** the command
//! or write starts, an [`Event::Denied`] record when the policy or the gate
//! refuses it, and an [`Event::Outcome`] record after it ends. An audit cannot
//! change a decision. A record that cannot be written is a fault: the action
//! does not start (an `allowed` record that is not on disk would leave a
//! write nobody can account for), and an outcome that cannot be written
//! fails the call with the result attached.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::gate::{Access, Action, BoxFuture};

/// Why an action was refused, as a stable kind a caller can branch on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RefusalKind {
    /// The policy refused it (the shell checker, the path jail).
    RefusedByPolicy,
    /// The gate refused it.
    RefusedByGate,
}

/// How an action ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Status {
    /// It ran to the end (a command: it exited or was killed by a signal of
    /// its own; see the exit code and signal).
    Completed,
    /// It could not be carried out (the sandbox failed, a write failed).
    Failed,
    /// The timeout ended it; the whole command tree was killed.
    TimedOut,
    /// The caller cancelled it; the whole command tree was killed.
    Cancelled,
}

/// Writes the kernel refused during a command (a capped sample).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedWritesRecord {
    /// How many write attempts were refused.
    pub count: u64,
    /// Some of the paths, as the command named them.
    pub sample: Vec<PathBuf>,
}

/// One event of one action. Records of one action share its `id`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum Event {
    /// The action passed the policy and the gate and is about to start.
    Allowed {
        /// The action's id (unique within the log).
        id: String,
        /// What runs.
        action: Action,
        /// The access it runs with: the meet of the asked and the allowed.
        effective: Access,
        /// The gate rule that answered, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rule: Option<String>,
    },
    /// The policy or the gate refused the action; nothing ran.
    Denied {
        /// The action's id.
        id: String,
        /// What was refused.
        action: Action,
        /// Who refused it.
        refusal: RefusalKind,
        /// Why, as the caller was told.
        reason: String,
        /// The gate rule that refused it, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rule: Option<String>,
    },
    /// The action ended.
    Outcome {
        /// The action's id.
        id: String,
        /// How it ended.
        status: Status,
        /// A command's exit code, if it exited.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        exit_code: Option<i32>,
        /// The signal that killed a command, if one did.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signal: Option<i32>,
        /// How long it took, in milliseconds.
        duration_ms: u64,
        /// The access it ran with.
        effective: Access,
        /// Writes the kernel refused, if the report was on.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        refused_writes: Option<RefusedWritesRecord>,
        /// Paths the git guard made unreachable after the run.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        removed: Vec<PathBuf>,
        /// What failed, for a failed action.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
}

/// A record that could not be written.
#[derive(Debug, thiserror::Error)]
#[error("audit {path}: {stage}: {source}")]
pub struct AuditError {
    /// The log.
    pub path: PathBuf,
    /// What was being done (`opening`, `locking`, `writing`, `syncing`, …).
    pub stage: &'static str,
    /// The cause.
    #[source]
    pub source: std::io::Error,
}

/// Records events. It cannot block or change an action; a record it cannot
/// write is an error the library turns into a fault (see the module docs).
pub trait Audit: Send + Sync {
    /// Record one event, durably before returning (as configured).
    fn record<'a>(&'a self, event: &'a Event) -> BoxFuture<'a, Result<(), AuditError>>;
}
