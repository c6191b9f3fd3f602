//! The async `Workspace` of issue 10 and its parts (being built).
//!
//! - [`search`]: `grep` and `glob` over the jail, ripgrep's crates, deny
//!   globs and `.gitignore` respected, symlinks never followed.

pub mod search;
