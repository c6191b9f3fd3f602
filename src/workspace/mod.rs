//! The workspace (issue 10): the long-lived surface a host program uses.
//! It sits above [`crate::runner`]. So far:
//!
//! - [`dir`]: a directory capability, every operation relative to an open
//!   root and never out of it (a leaf: it imports nothing of the crate, so
//!   the runner's direct writes use it too);
//! - [`files`]: the file operations (read windows, writes, edits, mkdir,
//!   remove, exists) through the jail's judgement and a [`dir::Dir`].

pub mod dir;
pub mod files;
