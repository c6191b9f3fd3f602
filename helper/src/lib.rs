//! Types shared by the portcullis library and its helper binary.
//!
//! The library decides *what* the sandbox looks like and writes it down as a
//! [`spec::SpawnSpec`]; the `portcullis-helper` binary, a small single-threaded
//! program started with `execve`, carries the spec out and reports back over a
//! close-on-exec pipe with fixed-size [`report::Record`]s. The seccomp rule
//! table lives here too ([`filter`]), so that the library can print and hash
//! exactly the filter the helper installs.
//!
//! Nothing in this crate starts threads or touches the async world: the helper
//! must stay single-threaded, because `clone3(CLONE_NEWUSER)` refuses to run in
//! a multithreaded process.

pub mod filter;
pub mod mount_api;
pub mod network;
pub mod observe;
pub mod procstat;
pub mod report;
pub mod spec;

/// The fd on which the helper reads its spec (a sealed memfd).
pub const SPEC_FD: i32 = 3;
/// The fd on which the helper writes [`report::Record`]s (close-on-exec).
pub const REPORT_FD: i32 = 4;
/// The read end of the lifeline pipe: when the library's end closes, the
/// helper kills the sandbox.
pub const LIFELINE_FD: i32 = 5;
/// An open directory fd of the per-command cgroup, when one was created.
pub const CGROUP_FD: i32 = 6;
/// One end of a seqpacket socket pair, when the spec asks for the
/// refused-write observer: the command sends the observer's seccomp
/// listener over it (or why it could not install one) just before exec.
pub const OBSERVE_FD: i32 = 7;
/// The workspace's user namespace (unprivileged callers), when the spec
/// says the run joins a network made ahead ([`spec::Netns::Shared`]).
pub const USERNS_FD: i32 = 8;
/// The workspace's network namespace, likewise.
pub const NETNS_FD: i32 = 9;
/// The most descriptors one message between the library, the outer helper
/// and the sandbox's processes carries (the receiving side's room).
pub const MAX_PASSED_FDS: usize = 64;
/// The highest protocol fd: the helper closes every fd above it.
pub const LAST_FD: i32 = NETNS_FD;
