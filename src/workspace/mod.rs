//! The workspace (issue 10): the long-lived surface a host program uses.
//! It sits above [`crate::runner`]. So far:
//!
//! - [`files`]: the file operations (read windows, writes, edits, mkdir,
//!   remove, exists) through the jail's judgement and a
//!   [`crate::path::dir::Dir`], the directory capability (a leaf, so the
//!   runner's direct writes use it too);
//! - [`search`]: `grep` and `glob` over the jail, ripgrep's crates, deny
//!   globs and `.gitignore` respected, symlinks never followed.

pub mod files;
pub mod search;
