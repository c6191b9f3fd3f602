//! Where the outer helper runs while it makes the network namespace.
//!
//! The outer helper's go-ahead wakes pid 1, and the scheduler tends to put
//! a woken process on its waker's CPU: pid 1 then waited there behind the
//! network namespace being made (a few hundred µs in the kernel) while
//! another CPU idled, on the critical path of every one-shot run. So, once
//! pid 1 is woken, the outer helper steps off the CPU pid 1 was put on
//! ([`step_aside`]) while it makes the network. Only the outer helper's own
//! affinity changes: it forks nothing afterwards, and pid 1 and the command
//! keep the affinity they were born with (since Linux 6.2 a process whose
//! affinity was ever set keeps that set as asked, through later changes of
//! its cpuset, and passes it on: setting pid 1's pinned the command to the
//! CPUs of the moment, found in review). All of it is best effort: with one
//! CPU allowed, or on any error, nothing changes.

use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::unistd::Pid;

/// The CPU `pid` is on (or last ran on): field 39 of its `/proc/PID/stat`.
fn cpu_of(pid: libc::pid_t) -> Option<usize> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    portcullis_helper::procstat::field(&stat, 39)?.parse().ok()
}

/// Step off the CPU `pid1` was woken on, onto the other CPUs this process
/// may use; returns what to put back with [`step_back`].
pub fn step_aside(pid1: libc::pid_t) -> Option<CpuSet> {
    let allowed = sched_getaffinity(Pid::from_raw(0)).ok()?;
    let there = cpu_of(pid1)?;
    let mut rest = allowed;
    rest.unset(there).ok()?;
    if !(0..CpuSet::count()).any(|c| rest.is_set(c).unwrap_or(false)) {
        return None;
    }
    sched_setaffinity(Pid::from_raw(0), &rest).ok()?;
    Some(allowed)
}

/// Put this process's affinity back (after [`step_aside`]).
pub fn step_back(allowed: Option<CpuSet>) {
    if let Some(all) = allowed {
        let _ = sched_setaffinity(Pid::from_raw(0), &all);
    }
}
