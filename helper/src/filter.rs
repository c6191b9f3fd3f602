//! The seccomp filter: which syscalls a sandboxed command may not make, and why.
//!
//! The filter is a deny list on top of the other layers (namespaces, read-only
//! mounts, Landlock, no capabilities): each entry closes a kernel surface a
//! coding agent's commands have no business touching, most of which an
//! unprivileged process could still reach. Refusals return `EPERM`, except
//! `clone3`, which returns `ENOSYS` so that libcs fall back to `clone`, whose
//! flags a BPF filter can read (clone3's flags live in memory it cannot).
//!
//! seccompiler's generated program checks the audit architecture but not the
//! x32 bit: on x86_64 a syscall number with `0x40000000` set reaches the same
//! kernel entry points under another number, which would bypass every entry of
//! a deny list (rust-vmm/seccompiler#74, firejail#87). [`compile`] therefore
//! puts its own prologue in front: kill on a foreign architecture, `EPERM`
//! for every x32 syscall, `ENOSYS` for `clone3`.

use std::collections::BTreeMap;

use seccompiler::{
    sock_filter, BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// The x32 ABI bit of x86_64 syscall numbers (`__X32_SYSCALL_BIT`).
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

/// `TIOCSTI` from `<asm-generic/ioctls.h>`: push a byte into a terminal's input.
pub const TIOCSTI: u64 = 0x5412;
/// `TIOCLINUX` from `<asm-generic/ioctls.h>`: console selection paste, the
/// same injection by another door.
pub const TIOCLINUX: u64 = 0x541C;
/// `AF_VSOCK` from `<linux/socket.h>`: host/guest sockets (a WSL2 and VM escape path).
pub const AF_VSOCK: u64 = 40;

/// Namespace-creating clone/unshare flags (`<linux/sched.h>`).
pub const NAMESPACE_FLAGS: &[(u64, &str)] = &[
    (libc::CLONE_NEWNS as u64, "CLONE_NEWNS"),
    (libc::CLONE_NEWCGROUP as u64, "CLONE_NEWCGROUP"),
    (libc::CLONE_NEWUTS as u64, "CLONE_NEWUTS"),
    (libc::CLONE_NEWIPC as u64, "CLONE_NEWIPC"),
    (libc::CLONE_NEWUSER as u64, "CLONE_NEWUSER"),
    (libc::CLONE_NEWPID as u64, "CLONE_NEWPID"),
    (libc::CLONE_NEWNET as u64, "CLONE_NEWNET"),
    (0x80, "CLONE_NEWTIME"),
];

/// When an entry applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// Every call.
    Always,
    /// When argument `arg` (32-bit compare) equals one of the values.
    ArgIs { arg: u8, values: &'static [u64] },
    /// When argument `arg` has any namespace flag set.
    NamespaceFlags { arg: u8 },
}

/// One refused syscall.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Syscall name.
    pub name: &'static str,
    /// Syscall number for the build architecture.
    pub nr: i64,
    /// When it is refused.
    pub when: When,
    /// Why it is refused, for `docs/sandbox.md` and `--explain`.
    pub why: &'static str,
}

macro_rules! entry {
    ($name:ident, $when:expr, $why:literal) => {
        Entry { name: stringify!($name), nr: paste_nr!($name), when: $when, why: $why }
    };
}

macro_rules! paste_nr {
    (mount) => {
        libc::SYS_mount
    };
    (umount2) => {
        libc::SYS_umount2
    };
    (pivot_root) => {
        libc::SYS_pivot_root
    };
    (move_mount) => {
        libc::SYS_move_mount
    };
    (open_tree) => {
        libc::SYS_open_tree
    };
    (fsopen) => {
        libc::SYS_fsopen
    };
    (fsmount) => {
        libc::SYS_fsmount
    };
    (fspick) => {
        libc::SYS_fspick
    };
    (fsconfig) => {
        libc::SYS_fsconfig
    };
    (mount_setattr) => {
        libc::SYS_mount_setattr
    };
    (chroot) => {
        libc::SYS_chroot
    };
    (unshare) => {
        libc::SYS_unshare
    };
    (setns) => {
        libc::SYS_setns
    };
    (clone) => {
        libc::SYS_clone
    };
    (ptrace) => {
        libc::SYS_ptrace
    };
    (process_vm_readv) => {
        libc::SYS_process_vm_readv
    };
    (process_vm_writev) => {
        libc::SYS_process_vm_writev
    };
    (process_madvise) => {
        libc::SYS_process_madvise
    };
    (pidfd_getfd) => {
        libc::SYS_pidfd_getfd
    };
    (init_module) => {
        libc::SYS_init_module
    };
    (finit_module) => {
        libc::SYS_finit_module
    };
    (delete_module) => {
        libc::SYS_delete_module
    };
    (kexec_load) => {
        libc::SYS_kexec_load
    };
    (kexec_file_load) => {
        libc::SYS_kexec_file_load
    };
    (bpf) => {
        libc::SYS_bpf
    };
    (perf_event_open) => {
        libc::SYS_perf_event_open
    };
    (add_key) => {
        libc::SYS_add_key
    };
    (request_key) => {
        libc::SYS_request_key
    };
    (keyctl) => {
        libc::SYS_keyctl
    };
    (userfaultfd) => {
        libc::SYS_userfaultfd
    };
    (open_by_handle_at) => {
        libc::SYS_open_by_handle_at
    };
    (name_to_handle_at) => {
        libc::SYS_name_to_handle_at
    };
    (ioctl) => {
        libc::SYS_ioctl
    };
    (acct) => {
        libc::SYS_acct
    };
    (swapon) => {
        libc::SYS_swapon
    };
    (swapoff) => {
        libc::SYS_swapoff
    };
    (reboot) => {
        libc::SYS_reboot
    };
    (settimeofday) => {
        libc::SYS_settimeofday
    };
    (clock_settime) => {
        libc::SYS_clock_settime
    };
    (clock_adjtime) => {
        libc::SYS_clock_adjtime
    };
    (adjtimex) => {
        libc::SYS_adjtimex
    };
    (io_uring_setup) => {
        libc::SYS_io_uring_setup
    };
    (io_uring_enter) => {
        libc::SYS_io_uring_enter
    };
    (io_uring_register) => {
        libc::SYS_io_uring_register
    };
    (socket) => {
        libc::SYS_socket
    };
    (socketpair) => {
        libc::SYS_socketpair
    };
    (syslog) => {
        libc::SYS_syslog
    };
    (vhangup) => {
        libc::SYS_vhangup
    };
    (quotactl) => {
        libc::SYS_quotactl
    };
}

/// Every refused syscall. `clone3` (ENOSYS) and the x32 guard are handled by
/// the prologue of [`compile`] and listed in `docs/sandbox.md` with these.
pub fn entries() -> Vec<Entry> {
    use When::*;
    vec![
        entry!(mount, Always, "no mounts: the mount plan is fixed before the command starts"),
        entry!(umount2, Always, "no unmounting: a mask or read-only carve-out must not be lifted"),
        entry!(pivot_root, Always, "no changing the root"),
        entry!(move_mount, Always, "new mount API: no mounts"),
        entry!(open_tree, Always, "new mount API: no cloning mounts"),
        entry!(fsopen, Always, "new mount API: no new filesystems"),
        entry!(fsmount, Always, "new mount API: no new filesystems"),
        entry!(fspick, Always, "new mount API: no reconfiguring mounts"),
        entry!(fsconfig, Always, "new mount API: no reconfiguring mounts"),
        entry!(mount_setattr, Always, "no changing mount flags (read-only)"),
        entry!(chroot, Always, "no changing the root"),
        entry!(
            unshare,
            NamespaceFlags { arg: 0 },
            "no nested namespaces: a nested user namespace regains capabilities and widens the kernel surface"
        ),
        entry!(setns, Always, "no joining other namespaces"),
        entry!(clone, NamespaceFlags { arg: 0 }, "no nested namespaces through clone flags"),
        entry!(ptrace, Always, "no tracing: pid 1 and other processes must not be inspected or steered"),
        entry!(process_vm_readv, Always, "no reading another process's memory"),
        entry!(process_vm_writev, Always, "no writing another process's memory"),
        entry!(process_madvise, Always, "no acting on another process's memory"),
        entry!(pidfd_getfd, Always, "no stealing another process's file descriptors"),
        entry!(init_module, Always, "no kernel modules"),
        entry!(finit_module, Always, "no kernel modules"),
        entry!(delete_module, Always, "no kernel modules"),
        entry!(kexec_load, Always, "no loading a new kernel"),
        entry!(kexec_file_load, Always, "no loading a new kernel"),
        entry!(bpf, Always, "no eBPF: a large kernel attack surface"),
        entry!(perf_event_open, Always, "no perf events: side channels and kernel attack surface"),
        entry!(add_key, Always, "no kernel keyrings: they are not namespaced"),
        entry!(request_key, Always, "no kernel keyrings: they are not namespaced"),
        entry!(keyctl, Always, "no kernel keyrings: they are not namespaced"),
        entry!(userfaultfd, Always, "no userfaultfd: a common kernel exploit primitive"),
        entry!(open_by_handle_at, Always, "no opening by file handle: it bypasses the mount view"),
        entry!(name_to_handle_at, Always, "no file handles: they feed open_by_handle_at"),
        entry!(ioctl, ArgIs { arg: 1, values: &[TIOCSTI, TIOCLINUX] }, "no typing into a terminal (CVE-2017-5226)"),
        entry!(acct, Always, "no process accounting"),
        entry!(swapon, Always, "no swap changes"),
        entry!(swapoff, Always, "no swap changes"),
        entry!(reboot, Always, "no reboot"),
        entry!(settimeofday, Always, "no setting the clock"),
        entry!(clock_settime, Always, "no setting the clock"),
        entry!(clock_adjtime, Always, "no setting the clock"),
        entry!(adjtimex, Always, "no setting the clock"),
        entry!(io_uring_setup, Always, "no io_uring: its operations bypass syscall filtering"),
        entry!(io_uring_enter, Always, "no io_uring: its operations bypass syscall filtering"),
        entry!(io_uring_register, Always, "no io_uring: its operations bypass syscall filtering"),
        entry!(socket, ArgIs { arg: 0, values: &[AF_VSOCK] }, "no vsock: host/guest sockets lead out of the sandbox"),
        entry!(
            socketpair,
            ArgIs { arg: 0, values: &[AF_VSOCK] },
            "no vsock: host/guest sockets lead out of the sandbox"
        ),
        entry!(syslog, Always, "no kernel log"),
        entry!(vhangup, Always, "no hanging up terminals"),
        entry!(quotactl, Always, "no quota changes"),
    ]
}

/// Errors while compiling the filter.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FilterError {
    /// seccompiler refused the rule set.
    #[error("seccomp rule set for {syscall} is invalid")]
    Rule {
        /// The syscall whose rule failed.
        syscall: &'static str,
        /// What seccompiler said.
        #[source]
        source: seccompiler::BackendError,
    },
    /// seccompiler could not build the program.
    #[error("seccomp program could not be built")]
    Program(#[source] seccompiler::BackendError),
}

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 62 | 0x8000_0000 | 0x4000_0000; // AUDIT_ARCH_X86_64, <linux/audit.h>
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 183 | 0x8000_0000 | 0x4000_0000; // AUDIT_ARCH_AARCH64, <linux/audit.h>

// Classic BPF opcodes (<linux/bpf_common.h>) and seccomp_data offsets
// (<linux/seccomp.h>: nr at 0, arch at 4).
const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
const BPF_RET_K: u16 = 0x06;
const SECCOMP_RET_KILL_PROCESS: u32 = 0x8000_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter { code, jt: 0, jf: 0, k }
}

fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
    sock_filter { code, jt, jf, k }
}

/// The prologue run before seccompiler's program.
fn prologue() -> Vec<sock_filter> {
    let mut p = vec![
        stmt(BPF_LD_W_ABS, 4),
        jump(BPF_JMP_JEQ_K, AUDIT_ARCH, 1, 0),
        stmt(BPF_RET_K, SECCOMP_RET_KILL_PROCESS),
        stmt(BPF_LD_W_ABS, 0),
    ];
    if cfg!(target_arch = "x86_64") {
        // x32 syscalls: every number with the x32 bit set.
        p.push(jump(BPF_JMP_JGE_K, X32_SYSCALL_BIT, 0, 1));
        p.push(stmt(BPF_RET_K, SECCOMP_RET_ERRNO | libc::EPERM as u32));
    }
    p.push(jump(BPF_JMP_JEQ_K, libc::SYS_clone3 as u32, 0, 1));
    p.push(stmt(BPF_RET_K, SECCOMP_RET_ERRNO | libc::ENOSYS as u32));
    p
}

fn rules_for(e: &Entry) -> Result<Vec<SeccompRule>, FilterError> {
    let err = |source| FilterError::Rule { syscall: e.name, source };
    match e.when {
        When::Always => Ok(Vec::new()),
        When::ArgIs { arg, values } => values
            .iter()
            .map(|v| {
                let c = SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, *v).map_err(err)?;
                SeccompRule::new(vec![c]).map_err(err)
            })
            .collect(),
        When::NamespaceFlags { arg } => NAMESPACE_FLAGS
            .iter()
            .map(|(flag, _)| {
                let c = SeccompCondition::new(arg, SeccompCmpArgLen::Qword, SeccompCmpOp::MaskedEq(*flag), *flag)
                    .map_err(err)?;
                SeccompRule::new(vec![c]).map_err(err)
            })
            .collect(),
    }
}

/// Compile the whole filter: the prologue, then the deny list.
pub fn compile() -> Result<BpfProgram, FilterError> {
    let mut map: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for e in entries() {
        map.insert(e.nr, rules_for(&e)?);
    }
    let filter = SeccompFilter::new(map, SeccompAction::Allow, SeccompAction::Errno(libc::EPERM as u32), ARCH)
        .map_err(FilterError::Program)?;
    let body: BpfProgram = filter.try_into().map_err(FilterError::Program)?;
    let mut program = prologue();
    program.extend(body);
    Ok(program)
}

/// The program as bytes (for hashing: `--explain` prints its SHA-256).
pub fn program_bytes(p: &[sock_filter]) -> Vec<u8> {
    let mut out = Vec::with_capacity(p.len() * 8);
    for i in p {
        out.extend_from_slice(&i.code.to_le_bytes());
        out.push(i.jt);
        out.push(i.jf);
        out.extend_from_slice(&i.k.to_le_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_compiles_and_starts_with_the_guards() {
        let p = compile().unwrap_or_default();
        assert!(p.len() > 20);
        assert_eq!(p[0].k, 4, "the first load is the architecture");
        assert_eq!(p[1].k, AUDIT_ARCH);
    }

    #[test]
    fn every_entry_has_a_reason_and_a_unique_number() {
        let e = entries();
        let mut seen = std::collections::HashSet::new();
        for x in &e {
            assert!(!x.why.is_empty());
            assert!(seen.insert(x.nr), "{} listed twice", x.name);
        }
    }

    #[test]
    fn compile_is_deterministic() {
        let a = program_bytes(&compile().unwrap_or_default());
        let b = program_bytes(&compile().unwrap_or_default());
        assert_eq!(a, b);
    }
}
