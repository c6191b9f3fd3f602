//! Where pid 1 runs while the outer helper makes the network namespace.
//!
//! The outer helper's go-ahead wakes pid 1, and the scheduler tends to put
//! a woken process on its waker's CPU: pid 1 then waited there behind the
//! network namespace being made (a few hundred µs in the kernel) while
//! another CPU idled, on the critical path of every one-shot run. So, while
//! the network is made, pid 1 may not run on the outer helper's CPU
//! ([`apart`]), and it takes every CPU back before it forks the command
//! ([`together`]), which inherits its affinity. The allowed CPUs are
//! remembered before the clone ([`remember`]), so pid 1's copy of this
//! process's memory holds them too. All of it is best effort: with one CPU
//! allowed, or on any error, nothing changes.

use std::sync::OnceLock;

use nix::sched::{sched_getaffinity, sched_getcpu, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

/// The CPUs this process may run on, as they were before the clone.
static ALLOWED: OnceLock<CpuSet> = OnceLock::new();

/// Remember the allowed CPUs; call before the clone of pid 1.
pub fn remember() {
    if let Ok(set) = sched_getaffinity(Pid::from_raw(0)) {
        let _ = ALLOWED.set(set);
    }
}

/// Keep `pid1` off this process's CPU (while this process makes the
/// network namespace), if another CPU is allowed.
pub fn apart(pid1: libc::pid_t) {
    let (Some(all), Ok(here)) = (ALLOWED.get(), sched_getcpu()) else { return };
    let mut rest = *all;
    if rest.unset(here).is_err() {
        return;
    }
    if (0..CpuSet::count()).any(|c| rest.is_set(c).unwrap_or(false)) {
        let _ = sched_setaffinity(Pid::from_raw(pid1), &rest);
    }
}

/// In pid 1: every allowed CPU back, before the command is forked.
pub fn together() {
    if let Some(all) = ALLOWED.get() {
        let _ = sched_setaffinity(Pid::from_raw(0), all);
    }
}
