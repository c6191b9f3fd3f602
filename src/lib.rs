//! portcullis: a policy-jailed workspace and sandboxed command executor for
//! AI coding agents on Linux.
//!
//! This crate is the trusted side. [`sandbox::Sandbox`] turns an
//! [`sandbox::ExecRequest`] into a [`sandbox::Plan`] (resolved paths, mount
//! plan, Landlock rules, seccomp hash, limits), spawns the small
//! `portcullis-helper` binary to carry the plan out in fresh namespaces, and
//! supervises the command: live output with a byte cap, a wall-clock
//! timeout, cancellation, and a per-command cgroup whose `cgroup.kill` ends
//! the whole process tree.
//!
//! The promise: a command run without write access cannot change the
//! workspace, whatever it tries. The workspace is mounted read-only unless
//! the request is writable, and Landlock refuses the same writes a second
//! time, so a mistake in one layer alone does not open it.
//!
//! What this does not contain: kernel exploits through the syscalls the
//! filter allows, side channels, and resource use below the limits you set.
//! Untrusted code that must not reach the host kernel belongs in a VM; see
//! `docs/threat-model.md`.

#![deny(missing_docs)]

pub mod audit;
pub mod doctor;
pub mod gate;
mod hex;
pub mod mcp;
pub mod path;
pub mod policy;
pub mod runner;
pub mod sandbox;
mod sys;
pub mod tools;
pub mod units;
pub mod workspace;

pub use portcullis_helper::spec::Network;
pub use sandbox::{ExecRequest, ExecResult, Plan, Sandbox, SandboxError};

/// An error and its causes on one line: `a: b: c`. A cause the text
/// already ends with (an error whose message embeds its `{source}`, or a
/// wrapper that shows its inner error as itself) is not said again.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let cause = c.to_string();
        if !s.ends_with(&cause) {
            s.push_str(": ");
            s.push_str(&cause);
        }
        cur = c.source();
    }
    s
}

/// The Landlock ABI version this kernel offers (0: none).
pub fn doctor_landlock_abi() -> u32 {
    sys::landlock_abi()
}
