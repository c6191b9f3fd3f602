//! The workspace (issue 10): the long-lived surface a host program uses,
//! above [`crate::runner`]. A [`Workspace`] is built once from a policy and
//! every read, write and command of an agent passes through it: the jail,
//! the shell checker, the gate and the audit, then the sandbox (commands)
//! or a directory capability of the jail (files). See `docs/workspace.md`.
//!
//! - [`ws`]: the [`Workspace`], its builder, its errors, the projections
//!   [`Workspace::readonly`] and [`Workspace::scope`];
//! - [`backend`]: the [`Backend`] trait and [`Local`] (the real disk and
//!   the sandbox);
//! - [`files`]: the file operations (read windows, writes, edits, mkdir,
//!   remove, exists) through a [`crate::path::dir::Dir`];
//! - [`search`]: `grep` and `glob`, ripgrep's crates, deny globs and
//!   `.gitignore` respected, links never followed;
//! - [`list`]: `list_dir`, walked by descriptor, bounded;
//! - [`todos`]: the agent's todo list;
//! - [`jobs`]: background jobs (`start_shell`, `shell_output`, `shell_kill`);
//! - [`mock`]: [`MockBackend`], an in-memory tree with scripted commands
//!   under the same jail, gate, audit and error types (hermetic tests).

pub mod backend;
pub mod files;
pub mod jobs;
pub mod list;
pub mod mock;
pub mod search;
pub mod todos;
pub mod ws;

pub use backend::{Backend, Local};

/// A command's output as text: bytes that are not UTF-8 become U+FFFD,
/// and the flag says whether any did (`lossy` in a job's output and in a
/// command's result).
pub(crate) fn lossy_text(bytes: Vec<u8>) -> (String, bool) {
    match String::from_utf8(bytes) {
        Ok(s) => (s, false),
        Err(e) => (String::from_utf8_lossy(e.as_bytes()).into_owned(), true),
    }
}
pub use mock::{CommandMatch, MockBackend, MockRun};
pub use ws::{Workspace, WorkspaceBuilder, WorkspaceError};

/// The examples of `docs/workspace.md`, compiled with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/workspace.md")]
pub struct WorkspaceDocExamples;
