//! The workspace (issue 10): the long-lived surface a host program uses.
//! It sits above [`crate::runner`]. So far:
//!
//! - [`files`]: the file operations (read windows, writes, edits, mkdir,
//!   remove, exists) through the jail's judgement and a
//!   [`crate::path::dir::Dir`], the directory capability (a leaf, so the
//!   runner's direct writes use it too);
//! - [`search`]: `grep` and `glob` over the jail, ripgrep's crates, deny
//!   globs and `.gitignore` respected, symlinks never followed;
//! - [`list`]: `list_dir`, walked by descriptor, bounded, denied entries
//!   hidden and counted, links reported and never followed;
//! - [`todos`]: the agent's todo list (`todo_write` / `todo_read`);
//! - [`mock`]: [`MockBackend`], an in-memory tree with scripted commands
//!   under the same jail, gate, audit and error types (hermetic tests).

pub mod backend;
pub mod files;
pub mod list;
pub mod mock;
pub mod search;
pub mod todos;
mod ws;

pub use backend::{Backend, Local};
pub use mock::{CommandMatch, MockBackend, MockRun};
pub use ws::{Workspace, WorkspaceBuilder, WorkspaceError};
