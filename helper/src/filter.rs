//! The seccomp filter: which syscalls a sandboxed command may not make, and why.
//!
//! The filter is a deny list on top of the other layers (namespaces, read-only
//! mounts, Landlock, no capabilities): each entry closes a kernel surface a
//! coding agent's commands have no business touching, most of which an
//! unprivileged process could still reach. Refusals return `EPERM`, except
//! `clone3`, which returns `ENOSYS` so that libcs fall back to `clone`, whose
//! flags a BPF filter can read (clone3's flags live in memory it cannot).
//!
//! The program is generated here and installed with seccompiler's
//! `apply_filter`. seccompiler's own compiler emits a list of about eight
//! instructions per entry (407 for this table), and loading a filter costs
//! the kernel, on every spawn, a walk of the program for every syscall
//! number (to fill its action cache) besides running on every syscall the
//! command makes. This generator emits a balanced search over the syscall
//! numbers ([`Asm::dispatch`]; about 18 instructions walked per number
//! instead of the whole list) with a few compares per leaf, the busiest
//! conditional entries first. It also guards what seccompiler does not:
//! on x86_64 a syscall number with the x32 bit `0x40000000` set reaches the
//! same kernel entry points under another number, which would bypass every
//! entry of a deny list (rust-vmm/seccompiler#74, firejail#87). The program:
//! kill on a foreign architecture; `EPERM` for every x32 syscall; `ENOSYS`
//! for `clone3`; `EPERM` for the table; allow the rest. A unit test runs the
//! program through a small BPF interpreter for every entry.

use seccompiler::{sock_filter, BpfProgram};

use crate::observe::RET_USER_NOTIF;

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
    /// When argument `arg`, a file mode, asks for setuid or setgid.
    SetidMode { arg: u8 },
    /// An open: when argument `mode` has `S_ISUID` or `S_ISGID` (`EPERM`,
    /// like [`When::SetidMode`]), or argument `flags` asks for `O_TRUNC`
    /// without write access (`O_RDONLY | O_TRUNC`: `EACCES`). The kernel
    /// truncates on such an open although no write access mode was asked
    /// for, so Landlock's `WriteFile` never sees it; in the full sandbox,
    /// where Landlock leaves `Truncate` to the read-only mounts, this is
    /// its second barrier. POSIX leaves the result of that combination
    /// undefined, so no program relies on it.
    OpenFlags { flags: u8, mode: u8 },
    /// When argument `arg` (a pid) names another process than the caller
    /// (is not 0), or — with `which: Some((index, value))` — when argument
    /// `index` is not `value` (`PRIO_USER`, `PRIO_PGRP`: many processes).
    OtherProcess { arg: u8, which: Option<(u8, u32)> },
    /// Unless argument `arg` is one of `values` (an allow list; empty: always).
    ArgNotIn { arg: u8, values: &'static [u64] },
    /// Unless argument `domain` is `AF_UNIX` and argument `kind` is
    /// `SOCK_STREAM` or `SOCK_SEQPACKET`, with at most `SOCK_CLOEXEC` and
    /// `SOCK_NONBLOCK` added (`socketpair`: a connected stream or seqpacket
    /// end cannot be pointed elsewhere — `connect` gives `EISCONN`, and a
    /// seqpacket `sendto` ignores its address and goes to the peer — while a
    /// datagram one can `sendto` any path socket).
    UnlessUnixConnected { domain: u8, kind: u8 },
}

/// `SOCK_CLOEXEC | SOCK_NONBLOCK` from `<linux/net.h>` (x86_64 and aarch64).
pub const SOCK_FLAGS: u32 = 0o2_000_000 | 0o4_000;

/// `S_ISUID | S_ISGID` from `<linux/stat.h>`.
pub const SETID_BITS: u64 = 0o6000;

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
    /// What the refused call returns: `EPERM` (denied by the sandbox) for
    /// nearly every entry; `EOPNOTSUPP` where callers should take the call
    /// for unsupported and carry on (reading extended attributes by path in
    /// the landlock-only mode).
    pub errno: i32,
}

macro_rules! entry {
    ($name:ident, $when:expr, $why:literal) => {
        Entry { name: stringify!($name), nr: paste_nr!($name), when: $when, why: $why, errno: libc::EPERM }
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
    (fcntl) => {
        libc::SYS_fcntl
    };
    (syslog) => {
        libc::SYS_syslog
    };
    (vhangup) => {
        libc::SYS_vhangup
    };
    (chmod) => {
        libc::SYS_chmod
    };
    (fchmod) => {
        libc::SYS_fchmod
    };
    (fchmodat) => {
        libc::SYS_fchmodat
    };
    (fchmodat2) => {
        452 // not yet in libc; <asm/unistd_64.h>, Linux 6.6
    };
    (open) => {
        libc::SYS_open
    };
    (openat) => {
        libc::SYS_openat
    };
    (creat) => {
        libc::SYS_creat
    };
    (mknod) => {
        libc::SYS_mknod
    };
    (mknodat) => {
        libc::SYS_mknodat
    };
    (mkdir) => {
        libc::SYS_mkdir
    };
    (mkdirat) => {
        libc::SYS_mkdirat
    };
    (quotactl) => {
        libc::SYS_quotactl
    };
}

/// Every refused syscall. `clone3` (ENOSYS) and the x32 guard are handled by
/// the prologue of [`compile`] and listed in `docs/sandbox.md` with these.
pub fn entries() -> Vec<Entry> {
    entries_for(Profile::FULL)
}

/// Which variant of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Profile {
    /// The landlock-only mode: no namespaces, no read-only mounts.
    pub degraded: bool,
    /// No network wanted (matters only without a network namespace).
    pub network_none: bool,
}

impl Profile {
    /// The full sandbox.
    pub const FULL: Profile = Profile { degraded: false, network_none: false };
}

/// Socket families refused: vsock always; in landlock-only mode also unix
/// sockets (host services such as a D-Bus session bus or an ssh-agent are
/// reachable by path, and Landlock before ABI 8 cannot stop `connect`) and,
/// without network, IPv4/IPv6.
const SOCKETS_FULL: &[u64] = &[AF_VSOCK];
const SOCKETS_DEGRADED: &[u64] = &[AF_VSOCK, libc::AF_UNIX as u64];
const SOCKETS_DEGRADED_NONET: &[u64] = &[AF_VSOCK, libc::AF_UNIX as u64, libc::AF_INET as u64, libc::AF_INET6 as u64];

/// File-metadata calls refused in landlock-only mode: Landlock has no right
/// for them and there is no read-only mount, so a command could otherwise
/// chmod, chown, touch or set xattrs on any file its uid owns.
const METADATA: &[(&str, i64)] = &[
    ("chmod", libc::SYS_chmod),
    ("fchmod", libc::SYS_fchmod),
    ("fchmodat", libc::SYS_fchmodat),
    ("fchmodat2", 452),
    ("chown", libc::SYS_chown),
    ("fchown", libc::SYS_fchown),
    ("lchown", libc::SYS_lchown),
    ("fchownat", libc::SYS_fchownat),
    ("utime", libc::SYS_utime),
    ("utimes", libc::SYS_utimes),
    ("futimesat", libc::SYS_futimesat),
    ("utimensat", libc::SYS_utimensat),
    ("setxattr", libc::SYS_setxattr),
    ("lsetxattr", libc::SYS_lsetxattr),
    ("fsetxattr", libc::SYS_fsetxattr),
    ("removexattr", libc::SYS_removexattr),
    ("lremovexattr", libc::SYS_lremovexattr),
    ("fremovexattr", libc::SYS_fremovexattr),
    // Linux 6.13 and 6.17 (not yet in libc): <asm/unistd_64.h>.
    ("setxattrat", 463),
    ("removexattrat", 466),
    ("file_setattr", 469),
];

/// Calls that act on another process named by pid (argument index).
#[allow(clippy::type_complexity)]
const OTHER_PROCESS: &[(&str, i64, u8, Option<(u8, u32)>)] = &[
    ("prlimit64", libc::SYS_prlimit64, 0, None),
    // setpriority(which, who, prio): only PRIO_PROCESS (0) of itself.
    ("setpriority", libc::SYS_setpriority, 1, Some((0, 0))),
    ("sched_setscheduler", libc::SYS_sched_setscheduler, 0, None),
    ("sched_setparam", libc::SYS_sched_setparam, 0, None),
    ("sched_setattr", libc::SYS_sched_setattr, 0, None),
    ("sched_setaffinity", libc::SYS_sched_setaffinity, 0, None),
    // ioprio_set(which, who, ioprio): only IOPRIO_WHO_PROCESS (1) of itself.
    ("ioprio_set", libc::SYS_ioprio_set, 1, Some((0, 1))),
    ("migrate_pages", libc::SYS_migrate_pages, 0, None),
    ("move_pages", libc::SYS_move_pages, 0, None),
    ("kcmp", libc::SYS_kcmp, 0, None),
];

/// Socket families allowed in landlock-only mode (an allow list: netlink,
/// packet and the rest are refused): none without network, IPv4/IPv6 with.
const SOCKETS_ALLOWED_NONET: &[u64] = &[];
const SOCKETS_ALLOWED_HOST: &[u64] = &[libc::AF_INET as u64, libc::AF_INET6 as u64];

/// System V IPC: shared with the host without an ipc namespace.
const SYSV_IPC: &[(&str, i64)] = &[
    ("shmget", libc::SYS_shmget),
    ("shmat", libc::SYS_shmat),
    ("shmctl", libc::SYS_shmctl),
    ("msgget", libc::SYS_msgget),
    ("msgsnd", libc::SYS_msgsnd),
    ("msgrcv", libc::SYS_msgrcv),
    ("msgctl", libc::SYS_msgctl),
    ("semget", libc::SYS_semget),
    ("semop", libc::SYS_semop),
    ("semtimedop", libc::SYS_semtimedop),
    ("semctl", libc::SYS_semctl),
];

/// POSIX message queues: the host's without an ipc namespace. Only these two
/// reach a queue by name; the other `mq_*` calls act on a descriptor from
/// `mq_open`, which the command cannot get.
const POSIX_MQ: &[(&str, i64)] = &[("mq_open", libc::SYS_mq_open), ("mq_unlink", libc::SYS_mq_unlink)];

/// Watching files: inotify and fanotify report the names of, and every
/// access to, files beneath any directory the command's uid may read, and
/// Landlock has no right for them (its checks cover opening, not watching).
const WATCHES: &[(&str, i64)] = &[
    ("inotify_init", libc::SYS_inotify_init),
    ("inotify_init1", libc::SYS_inotify_init1),
    ("inotify_add_watch", libc::SYS_inotify_add_watch),
    ("fanotify_init", libc::SYS_fanotify_init),
    ("fanotify_mark", libc::SYS_fanotify_mark),
];

/// Reading extended attributes by path: Landlock does not check it, so it
/// would read the xattrs of any file outside the plan. The fd forms stay:
/// they reach only files Landlock let the command open.
const XATTR_READS: &[(&str, i64)] = &[
    ("getxattr", libc::SYS_getxattr),
    ("lgetxattr", libc::SYS_lgetxattr),
    ("listxattr", libc::SYS_listxattr),
    ("llistxattr", libc::SYS_llistxattr),
    // Linux 6.13 (not yet in libc): <asm/unistd_64.h>.
    ("getxattrat", 464),
    ("listxattrat", 465),
];

/// `ioctl` requests refused in every profile: terminal injection, and the
/// filesystem's encryption keyring, which is not namespaced (a command could
/// remove your claim to a key and lock your encrypted directories).
pub const IOCTLS_FULL: &[(u64, &str)] = &[
    (TIOCSTI, "TIOCSTI"),
    (TIOCLINUX, "TIOCLINUX"),
    (0xc050_6617, "FS_IOC_ADD_ENCRYPTION_KEY"),
    (0xc040_6618, "FS_IOC_REMOVE_ENCRYPTION_KEY"),
    (0xc040_6619, "FS_IOC_REMOVE_ENCRYPTION_KEY_ALL_USERS"),
];

/// `ioctl` requests refused in the landlock-only mode on top of
/// [`IOCTLS_FULL`]: the ioctl forms of metadata changes (the full sandbox's
/// read-only mounts refuse them with `EROFS`; Landlock does not see them, as
/// its `IoctlDev` right covers device files only), and those that change a
/// file through a descriptor opened only for reading. Values from
/// `<linux/fs.h>`, `<linux/fscrypt.h>`, `<linux/fsverity.h>` and
/// `<linux/btrfs.h>` (x86_64 and aarch64 share them). Not here, because
/// they need the destination open for writing, which Landlock checked:
/// `FICLONE`, `FICLONERANGE`; read-only: `FS_IOC_GET*`, `FS_IOC_FIEMAP`.
pub const IOCTLS_METADATA: &[(u64, &str)] = &[
    (0x4008_6602, "FS_IOC_SETFLAGS"),
    (0x4004_6602, "FS_IOC32_SETFLAGS"),
    (0x4008_7602, "FS_IOC_SETVERSION"),
    (0x4004_7602, "FS_IOC32_SETVERSION"),
    (0x4008_6604, "EXT4_IOC_SETVERSION"),
    (0x4004_6604, "EXT4_IOC32_SETVERSION"),
    (0x401c_5820, "FS_IOC_FSSETXATTR"),
    (0x4100_9432, "FS_IOC_SETFSLABEL"),
    (0x4008_662c, "EXT4_IOC_SETFSUUID"),
    (0x800c_6613, "FS_IOC_SET_ENCRYPTION_POLICY"),
    (0x4080_6685, "FS_IOC_ENABLE_VERITY"),
    (0xc018_9436, "FIDEDUPERANGE"),
    (0x5000_9401, "BTRFS_IOC_SNAP_CREATE"),
    (0x5000_940e, "BTRFS_IOC_SUBVOL_CREATE"),
    (0x5000_940f, "BTRFS_IOC_SNAP_DESTROY"),
    (0x5000_9417, "BTRFS_IOC_SNAP_CREATE_V2"),
    (0x5000_9418, "BTRFS_IOC_SUBVOL_CREATE_V2"),
    (0x5000_943f, "BTRFS_IOC_SNAP_DESTROY_V2"),
    (0x4008_941a, "BTRFS_IOC_SUBVOL_SETFLAGS"),
    (0xc0c8_9425, "BTRFS_IOC_SET_RECEIVED_SUBVOL"),
];

/// The request numbers of [`IOCTLS_FULL`] (a unit test keeps them in step).
const IOCTL_VALUES_FULL: &[u64] = &[TIOCSTI, TIOCLINUX, 0xc050_6617, 0xc040_6618, 0xc040_6619];
/// [`IOCTLS_FULL`] then [`IOCTLS_METADATA`] (a unit test keeps them in step).
const IOCTL_VALUES_DEGRADED: &[u64] = &[
    TIOCSTI,
    TIOCLINUX,
    0xc050_6617,
    0xc040_6618,
    0xc040_6619,
    0x4008_6602,
    0x4004_6602,
    0x4008_7602,
    0x4004_7602,
    0x4008_6604,
    0x4004_6604,
    0x401c_5820,
    0x4100_9432,
    0x4008_662c,
    0x800c_6613,
    0x4080_6685,
    0xc018_9436,
    0x5000_9401,
    0x5000_940e,
    0x5000_940f,
    0x5000_9417,
    0x5000_9418,
    0x5000_943f,
    0x4008_941a,
    0xc0c8_9425,
];

/// `fcntl` commands refused everywhere: `F_SETLEASE` (`<linux/fcntl.h>`).
/// A read lease on a file the command may only read (a read root, the
/// read-only workspace, a system file in landlock-only mode) makes every
/// host writer wait up to `lease-break-time` and signals the command.
const FCNTL_FULL: &[u64] = &[1024];
/// And in landlock-only mode `F_NOTIFY` (dnotify), refused like inotify.
const FCNTL_DEGRADED: &[u64] = &[1024, 1026];

/// The table for `profile`.
pub fn entries_for(profile: Profile) -> Vec<Entry> {
    let mut table = base_entries(match (profile.degraded, profile.network_none) {
        (false, _) => SOCKETS_FULL,
        (true, false) => SOCKETS_DEGRADED,
        (true, true) => SOCKETS_DEGRADED_NONET,
    });
    if profile.degraded {
        let always = |name: &'static str, nr: i64, why: &'static str, errno: i32| Entry {
            name,
            nr,
            when: When::Always,
            why,
            errno,
        };
        if let Some(sock) = table.iter_mut().find(|e| e.nr == libc::SYS_socket) {
            let values = if profile.network_none { SOCKETS_ALLOWED_NONET } else { SOCKETS_ALLOWED_HOST };
            sock.when = When::ArgNotIn { arg: 0, values };
            sock.why = "landlock-only mode: only IPv4/IPv6 sockets, and only with --network host (host unix services such as a D-Bus bus or an ssh-agent stay out of reach)";
        }
        if let Some(pair) = table.iter_mut().find(|e| e.nr == libc::SYS_socketpair) {
            pair.when = When::UnlessUnixConnected { domain: 0, kind: 1 };
            pair.why = "landlock-only mode: only unix stream and seqpacket pairs (a datagram end could sendto any host path socket: /dev/log, journald, systemd's notify socket)";
        }
        if let Some(fcntl) = table.iter_mut().find(|e| e.nr == libc::SYS_fcntl) {
            fcntl.when = When::ArgIs { arg: 1, values: FCNTL_DEGRADED };
            fcntl.why = "no leases (they stall host writers of a file the command may only read) and, in landlock-only mode, no dnotify (it watches outside the plan, like inotify)";
        }
        if let Some(ioctl) = table.iter_mut().find(|e| e.nr == libc::SYS_ioctl) {
            ioctl.when = When::ArgIs { arg: 1, values: IOCTL_VALUES_DEGRADED };
            ioctl.why = "landlock-only mode: no typing into a terminal, no encryption keys, and no metadata changes through ioctl (FS_IOC_SETFLAGS, FS_IOC_FSSETXATTR, ...), which Landlock cannot restrict";
        }
        // No pid namespace: other processes of the same uid are in reach of
        // these (Landlock's signal scoping does not cover them); they could
        // starve or cripple the sweeping helper (prlimit RLIMIT_NOFILE 0).
        for (name, nr, arg, which) in OTHER_PROCESS {
            table.push(Entry {
                name,
                nr: *nr,
                when: When::OtherProcess { arg: *arg, which: *which },
                why: "landlock-only mode: no acting on other processes (no pid namespace)",
                errno: libc::EPERM,
            });
        }
        for (name, nr) in SYSV_IPC {
            let why = "landlock-only mode: System V IPC is the host's (no ipc namespace)";
            table.push(always(name, *nr, why, libc::EPERM));
        }
        for (name, nr) in POSIX_MQ {
            let why = "landlock-only mode: POSIX message queues are the host's (no ipc namespace)";
            table.push(always(name, *nr, why, libc::EPERM));
        }
        for (name, nr) in WATCHES {
            let why = "landlock-only mode: no watching files (inotify and fanotify see outside the plan; Landlock cannot restrict them)";
            table.push(always(name, *nr, why, libc::EPERM));
        }
        for (name, nr) in XATTR_READS {
            let why = "landlock-only mode: no reading extended attributes by path (Landlock cannot restrict it); EOPNOTSUPP, so tools carry on as on a filesystem without them";
            table.push(always(name, *nr, why, libc::EOPNOTSUPP));
        }
        for (name, nr) in METADATA {
            let why = "landlock-only mode: no metadata changes (Landlock cannot restrict them)";
            match table.iter_mut().find(|e| e.nr == *nr) {
                Some(e) => {
                    e.when = When::Always;
                    e.why = why;
                }
                None => table.push(always(name, *nr, why, libc::EPERM)),
            }
        }
    }
    table
}

fn base_entries(sockets: &'static [u64]) -> Vec<Entry> {
    use When::*;
    vec![
        entry!(mount, Always, "no mounts: the mount plan is fixed before the command starts"),
        entry!(umount2, Always, "no unmounting: a mask or read-only carve-out must not be lifted"),
        entry!(pivot_root, Always, "no changing the root"),
        entry!(move_mount, Always, "new mount API: no mounts"),
        entry!(open_tree, Always, "new mount API: no cloning mounts"),
        // Linux 6.15 (not yet in libc): <asm/unistd_64.h>.
        Entry {
            name: "open_tree_attr",
            nr: 467,
            when: Always,
            why: "new mount API: no cloning mounts (with attributes)",
            errno: libc::EPERM,
        },
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
        entry!(
            ioctl,
            ArgIs { arg: 1, values: IOCTL_VALUES_FULL },
            "no typing into a terminal (CVE-2017-5226); no filesystem encryption keys (that keyring is not namespaced)"
        ),
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
        entry!(
            socket,
            ArgIs { arg: 0, values: sockets },
            "no vsock (host/guest sockets lead out of the sandbox); no IPv4/IPv6 in landlock-only mode without network"
        ),
        entry!(
            socketpair,
            ArgIs { arg: 0, values: &[AF_VSOCK] },
            "no vsock: host/guest sockets lead out of the sandbox"
        ),
        entry!(
            fcntl,
            ArgIs { arg: 1, values: FCNTL_FULL },
            "no leases: a lease on a file the command may only read stalls host writers and signals the command"
        ),
        entry!(syslog, Always, "no kernel log"),
        entry!(vhangup, Always, "no hanging up terminals"),
        entry!(quotactl, Always, "no quota changes"),
        // Linux 5.14 (not yet in libc): quotactl on an open file's filesystem.
        Entry { name: "quotactl_fd", nr: 443, when: Always, why: "no quota changes", errno: libc::EPERM },
        // A root caller's command writes files that are owned by host root
        // on disk (idmapped workspace and grants); a setuid bit there would
        // hand root to whoever runs the file on the host later.
        entry!(chmod, SetidMode { arg: 1 }, "no setuid/setgid files: they would outlive the sandbox on the host"),
        entry!(fchmod, SetidMode { arg: 1 }, "no setuid/setgid files: they would outlive the sandbox on the host"),
        entry!(fchmodat, SetidMode { arg: 2 }, "no setuid/setgid files: they would outlive the sandbox on the host"),
        entry!(fchmodat2, SetidMode { arg: 2 }, "no setuid/setgid files: they would outlive the sandbox on the host"),
        entry!(
            open,
            OpenFlags { flags: 1, mode: 2 },
            "no setuid/setgid files created with open(O_CREAT); no O_TRUNC without write access (EACCES)"
        ),
        entry!(
            openat,
            OpenFlags { flags: 2, mode: 3 },
            "no setuid/setgid files created with openat(O_CREAT); no O_TRUNC without write access (EACCES)"
        ),
        entry!(creat, SetidMode { arg: 1 }, "no setuid/setgid files created with creat"),
        entry!(mknod, SetidMode { arg: 1 }, "no setuid/setgid files created with mknod"),
        entry!(mknodat, SetidMode { arg: 2 }, "no setuid/setgid files created with mknodat"),
        entry!(mkdir, SetidMode { arg: 1 }, "no setgid directories"),
        entry!(mkdirat, SetidMode { arg: 2 }, "no setgid directories"),
    ]
}

/// Errors while compiling the filter.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FilterError {
    /// A jump would not fit classic BPF's 8-bit offsets.
    #[error("seccomp program too long: a jump of {0} instructions does not fit")]
    JumpTooFar(usize),
    /// Two entries of one program name the same syscall number.
    #[error("seccomp program: syscall {0} is listed twice")]
    Duplicate(u32),
}

#[cfg(target_arch = "x86_64")]
pub(crate) const AUDIT_ARCH: u32 = 62 | 0x8000_0000 | 0x4000_0000; // AUDIT_ARCH_X86_64, <linux/audit.h>
#[cfg(target_arch = "aarch64")]
pub(crate) const AUDIT_ARCH: u32 = 183 | 0x8000_0000 | 0x4000_0000; // AUDIT_ARCH_AARCH64, <linux/audit.h>

// Classic BPF opcodes (<linux/bpf_common.h>) and seccomp_data offsets
// (<linux/seccomp.h>: nr at 0, arch at 4, args[i] at 16 + 8 i; the low 32
// bits of an argument come first on these little-endian targets).
pub(crate) const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD | BPF_W | BPF_ABS
pub(crate) const BPF_JEQ_K: u16 = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
pub(crate) const BPF_JGE_K: u16 = 0x35; // BPF_JMP | BPF_JGE | BPF_K
pub(crate) const BPF_JSET_K: u16 = 0x45; // BPF_JMP | BPF_JSET | BPF_K
pub(crate) const BPF_RET_K: u16 = 0x06; // BPF_RET | BPF_K
pub(crate) const OFF_NR: u32 = 0;
pub(crate) const OFF_ARCH: u32 = 4;
pub(crate) const OFF_ARGS: u32 = 16;
/// `SECCOMP_RET_KILL_PROCESS`, `SECCOMP_RET_ERRNO`, `SECCOMP_RET_ALLOW`.
pub const RET_KILL_PROCESS: u32 = 0x8000_0000;
/// `SECCOMP_RET_ERRNO` (the errno goes in the low 16 bits).
pub const RET_ERRNO: u32 = 0x0005_0000;
/// `SECCOMP_RET_ALLOW`.
pub const RET_ALLOW: u32 = 0x7fff_0000;

/// A program under construction, with symbolic jump targets.
#[derive(Default)]
pub(crate) struct Asm {
    code: Vec<(sock_filter, Target)>,
    labels: Vec<Option<usize>>,
}

#[derive(Clone, Copy)]
pub(crate) struct Label(usize);

/// Which field of an instruction a label fills in.
#[derive(Clone, Copy)]
enum Target {
    None,
    /// `jt` (a conditional jump taken).
    Taken(Label),
    /// `jf` (a conditional jump not taken).
    NotTaken(Label),
    /// `k` (`ja`, whose offset is 32 bits).
    Always(Label),
}

/// Where a syscall number of an [`Asm::dispatch`] goes.
#[derive(Clone, Copy)]
pub(crate) enum Goto {
    /// Return this action at once.
    Ret(u32),
    /// Run block `i` of the caller's (emitted by the dispatch's `block`).
    Block(usize),
}

/// At most this many compares at the bottom of a dispatch's search.
const LEAF: usize = 4;

/// `BPF_JMP | BPF_JA`.
pub(crate) const BPF_JA: u16 = 0x05;

impl Asm {
    pub(crate) fn label(&mut self) -> Label {
        self.labels.push(None);
        Label(self.labels.len() - 1)
    }
    pub(crate) fn bind(&mut self, l: Label) {
        self.labels[l.0] = Some(self.code.len());
    }
    pub(crate) fn stmt(&mut self, code: u16, k: u32) {
        self.code.push((sock_filter { code, jt: 0, jf: 0, k }, Target::None));
    }
    /// Jump to `t` when the condition holds, else fall through.
    pub(crate) fn jump_if(&mut self, code: u16, k: u32, t: Label) {
        self.code.push((sock_filter { code, jt: 0, jf: 0, k }, Target::Taken(t)));
    }
    /// Fall through when the condition holds, else jump to `f`.
    fn jump_unless(&mut self, code: u16, k: u32, f: Label) {
        self.code.push((sock_filter { code, jt: 0, jf: 0, k }, Target::NotTaken(f)));
    }
    /// Jump to `to`, however far.
    pub(crate) fn jump(&mut self, to: Label) {
        self.code.push((sock_filter { code: BPF_JA, jt: 0, jf: 0, k: 0 }, Target::Always(to)));
    }
    /// The head every program of ours starts with: a call from another
    /// architecture returns `foreign`, the syscall number is loaded, and on
    /// x86_64 an x32 call returns `x32`.
    pub(crate) fn prologue(&mut self, foreign: u32, x32: u32) {
        let (arch_ok, native) = (self.label(), self.label());
        self.stmt(BPF_LD_W_ABS, OFF_ARCH);
        self.jump_if(BPF_JEQ_K, AUDIT_ARCH, arch_ok);
        self.stmt(BPF_RET_K, foreign);
        self.bind(arch_ok);
        self.stmt(BPF_LD_W_ABS, OFF_NR);
        if cfg!(target_arch = "x86_64") {
            self.jump_unless(BPF_JGE_K, X32_SYSCALL_BIT, native);
            self.stmt(BPF_RET_K, x32);
        }
        self.bind(native);
    }

    /// Compare the syscall number (loaded by [`Asm::prologue`]) with every
    /// case and go where it says; every other number returns `otherwise`.
    /// `block(asm, i)` emits block `i` of a [`Goto::Block`] case, which must
    /// end in returns.
    ///
    /// A balanced search, not a list: one `jge` per level, at most [`LEAF`]
    /// compares at the bottom, each leaf followed by the returns and blocks
    /// of its own cases (so that no jump goes far). When the kernel loads a
    /// filter it runs the program once for every syscall number to fill its
    /// action cache (`seccomp_cache_prepare`, a few ns an instruction
    /// here), on every command's critical path: measured on this project's
    /// VM, a list of 80 compares took 110 µs to load, a search over as many
    /// about 40 µs. A call the cache does not cover walks a dozen
    /// instructions instead of the list.
    pub(crate) fn dispatch(
        &mut self,
        cases: &[(u32, Goto)],
        otherwise: u32,
        block: &mut dyn FnMut(&mut Asm, usize),
    ) -> Result<(), FilterError> {
        let mut sorted = cases.to_vec();
        sorted.sort_by_key(|c| c.0);
        if let Some(w) = sorted.windows(2).find(|w| w[0].0 == w[1].0) {
            return Err(FilterError::Duplicate(w[0].0));
        }
        self.search(&sorted, otherwise, block);
        Ok(())
    }

    fn search(&mut self, cases: &[(u32, Goto)], otherwise: u32, block: &mut dyn FnMut(&mut Asm, usize)) {
        if cases.len() > LEAF {
            let mid = cases.len() / 2;
            let upper = self.label();
            self.jump_if(BPF_JGE_K, cases[mid].0, upper);
            self.search(&cases[..mid], otherwise, block);
            self.bind(upper);
            self.search(&cases[mid..], otherwise, block);
            return;
        }
        let mut rets: Vec<(u32, Label)> = Vec::new();
        let mut blocks: Vec<(usize, Label)> = Vec::new();
        for (nr, goto) in cases {
            let target = match *goto {
                Goto::Block(i) => {
                    let l = self.label();
                    blocks.push((i, l));
                    l
                }
                Goto::Ret(v) => match rets.iter().find(|(r, _)| *r == v) {
                    Some((_, l)) => *l,
                    None => {
                        let l = self.label();
                        rets.push((v, l));
                        l
                    }
                },
            };
            self.jump_if(BPF_JEQ_K, *nr, target);
        }
        self.stmt(BPF_RET_K, otherwise);
        for (v, l) in rets {
            self.bind(l);
            self.stmt(BPF_RET_K, v);
        }
        for (i, l) in blocks {
            self.bind(l);
            block(self, i);
        }
    }

    pub(crate) fn finish(self) -> Result<BpfProgram, FilterError> {
        let mut out = Vec::with_capacity(self.code.len());
        for (i, (mut ins, target)) in self.code.into_iter().enumerate() {
            let offset = |l: Label| {
                let to = self.labels[l.0].unwrap_or(usize::MAX);
                to.checked_sub(i + 1).ok_or(FilterError::JumpTooFar(usize::MAX))
            };
            let short = |off: usize| u8::try_from(off).map_err(|_| FilterError::JumpTooFar(off));
            match target {
                Target::None => {}
                Target::Taken(l) => ins.jt = short(offset(l)?)?,
                Target::NotTaken(l) => ins.jf = short(offset(l)?)?,
                Target::Always(l) => {
                    let off = offset(l)?;
                    ins.k = u32::try_from(off).map_err(|_| FilterError::JumpTooFar(off))?;
                }
            }
            out.push(ins);
        }
        Ok(out)
    }
}

/// The conditional entries' syscalls that ordinary programs make often, in
/// the order the program compares them before its search for the rest:
/// every open, the descriptor flags libc and git read and set, `isatty`'s
/// `TCGETS`, and every fork. Only the order changes with this list, never
/// what is refused (`filter::tests` runs every entry either way).
const HOT: &[i64] = &[libc::SYS_openat, libc::SYS_fcntl, libc::SYS_ioctl, libc::SYS_clone];

/// Compile the whole filter.
pub fn compile() -> Result<BpfProgram, FilterError> {
    compile_for(Profile::FULL)
}

/// Compile the filter for `entries_for(profile)`.
pub fn compile_for(profile: Profile) -> Result<BpfProgram, FilterError> {
    compile_watched(profile, &[])
}

/// What the refused-write observer asks of a syscall the table allows
/// (`crate::observe`): `SECCOMP_RET_USER_NOTIF` for every call, only when
/// argument `arg` has one of `mask`'s bits (an open's flags), or only when
/// argument `arg` is not null (a path that may be null).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Watch {
    /// Notify every call.
    Always,
    /// Notify a call whose argument `arg` has a bit of `mask` set.
    AnyBit { arg: u8, mask: u32 },
    /// Notify a call whose argument `arg` (all 64 bits) is not zero.
    NonNull { arg: u8 },
}

/// Compile the filter for `entries_for(profile)` with the observer's
/// watches folded in (`watch`: syscall numbers and what to notify): one
/// program and one search over both tables. A call the table refuses gets
/// its errno whatever the watch says (what the kernel makes of two filters,
/// where `ERRNO` beats `USER_NOTIF`); a call it allows is notified as its
/// watch says, or allowed. With no watch it is the main filter alone.
///
/// Why one search and not the observer's program after the main one: when
/// the kernel loads a filter it walks the program once for every syscall
/// number (its action cache), a few ns an instruction, on every command's
/// critical path; two searches one after the other walk about 30
/// instructions a number, one search over both tables about 18 (docs:
/// "One filter, not two").
pub fn compile_watched(profile: Profile, watch: &[(u32, Watch)]) -> Result<BpfProgram, FilterError> {
    let entries = entries_for(profile);
    let watch_of = |nr: i64| watch.iter().find(|(n, _)| i64::from(*n) == nr).map(|(_, w)| *w);
    let mut a = Asm::default();
    a.prologue(RET_KILL_PROCESS, RET_ERRNO | libc::EPERM as u32);
    // Conditional entries inspect an argument, so the kernel's action cache
    // cannot cover them and they run the program on every call: the busiest
    // (`openat` on every open) are compared first, their blocks right
    // after, then a jump to the search for the rest. Every syscall whose
    // outcome depends on its number alone (`read`, `close`, `newfstatat`,
    // `getdents64`, ...) is cached and never runs the program.
    let mut conditional: Vec<&Entry> = entries.iter().filter(|e| e.when != When::Always).collect();
    conditional.sort_by_key(|e| HOT.iter().position(|n| *n == e.nr).unwrap_or(HOT.len()));
    let hot = conditional.iter().take_while(|e| HOT.contains(&e.nr)).count();
    let search = a.label();
    let hot_blocks: Vec<Label> = conditional[..hot].iter().map(|_| a.label()).collect();
    for (e, l) in conditional[..hot].iter().zip(&hot_blocks) {
        a.jump_if(BPF_JEQ_K, e.nr as u32, *l);
    }
    a.jump(search);
    for (e, l) in conditional[..hot].iter().zip(&hot_blocks) {
        a.bind(*l);
        emit_block(&mut a, e, watch_of(e.nr));
    }
    a.bind(search);
    // The rest in one search: clone3 (its flags sit in memory BPF cannot
    // read) and openat2 (its mode too) answer ENOSYS, so that callers fall
    // back to clone and openat, whose arguments the program can read; the
    // unconditional entries their errno; the other conditional ones run
    // their block; a watched call the table does not name is notified (an
    // open only by its flags, in a block of its own).
    let enosys = RET_ERRNO | libc::ENOSYS as u32;
    let (clone3, openat2) = (libc::SYS_clone3, libc::SYS_openat2);
    let mut cases = vec![(clone3 as u32, Goto::Ret(enosys)), (openat2 as u32, Goto::Ret(enosys))];
    cases.extend(conditional.iter().enumerate().skip(hot).map(|(i, e)| (e.nr as u32, Goto::Block(i))));
    cases.extend(
        entries.iter().filter(|e| e.when == When::Always).map(|e| (e.nr as u32, Goto::Ret(RET_ERRNO | e.errno as u32))),
    );
    let named =
        |nr: u32| i64::from(nr) == clone3 || i64::from(nr) == openat2 || entries.iter().any(|e| e.nr == i64::from(nr));
    let watch_only: Vec<(u32, Watch)> = watch.iter().filter(|(nr, _)| !named(*nr)).copied().collect();
    for (j, (nr, w)) in watch_only.iter().enumerate() {
        cases.push(match w {
            Watch::Always => (*nr, Goto::Ret(RET_USER_NOTIF)),
            Watch::AnyBit { .. } | Watch::NonNull { .. } => (*nr, Goto::Block(conditional.len() + j)),
        });
    }
    a.dispatch(&cases, RET_ALLOW, &mut |a, i| match (conditional.get(i), i.checked_sub(conditional.len())) {
        (Some(e), _) => emit_block(a, e, watch_of(e.nr)),
        (None, Some(j)) if j < watch_only.len() => emit_allow(a, Some(watch_only[j].1)),
        // Every case names a block of `conditional` or of `watch_only`;
        // were one missing, its label must still end in a refusal, never
        // fall into the next block.
        _ => a.stmt(BPF_RET_K, RET_ERRNO | libc::EPERM as u32),
    })?;
    a.finish()
}

/// Where a call is allowed: `ret ALLOW`, or what its watch asks for.
pub(crate) fn emit_allow(a: &mut Asm, watch: Option<Watch>) {
    match watch {
        None => a.stmt(BPF_RET_K, RET_ALLOW),
        Some(Watch::Always) => a.stmt(BPF_RET_K, RET_USER_NOTIF),
        Some(Watch::AnyBit { arg, mask }) => {
            let notify = a.label();
            a.stmt(BPF_LD_W_ABS, OFF_ARGS + 8 * u32::from(arg));
            a.jump_if(BPF_JSET_K, mask, notify);
            a.stmt(BPF_RET_K, RET_ALLOW);
            a.bind(notify);
            a.stmt(BPF_RET_K, RET_USER_NOTIF);
        }
        Some(Watch::NonNull { arg }) => {
            // Both 32-bit halves of the argument: either set, not null.
            let notify = a.label();
            a.stmt(BPF_LD_W_ABS, OFF_ARGS + 8 * u32::from(arg));
            a.jump_if(BPF_JSET_K, u32::MAX, notify);
            a.stmt(BPF_LD_W_ABS, OFF_ARGS + 8 * u32::from(arg) + 4);
            a.jump_if(BPF_JSET_K, u32::MAX, notify);
            a.stmt(BPF_RET_K, RET_ALLOW);
            a.bind(notify);
            a.stmt(BPF_RET_K, RET_USER_NOTIF);
        }
    }
}

/// The block of a conditional entry: it inspects the argument and returns
/// the entry's errno, or where it allows the call, `ALLOW` or what the
/// observer's `watch` asks ([`emit_allow`]; each a `ret` of its own, so no
/// jump goes far).
fn emit_block(a: &mut Asm, e: &Entry, watch: Option<Watch>) {
    let no = a.label();
    let ret_no = RET_ERRNO | e.errno as u32;
    match e.when {
        When::ArgIs { arg, values } => {
            a.stmt(BPF_LD_W_ABS, OFF_ARGS + 8 * u32::from(arg));
            for v in values {
                a.jump_if(BPF_JEQ_K, *v as u32, no);
            }
        }
        When::NamespaceFlags { arg } => {
            let mask = NAMESPACE_FLAGS.iter().fold(0u64, |m, (f, _)| m | f) as u32;
            a.stmt(BPF_LD_W_ABS, OFF_ARGS + 8 * u32::from(arg));
            a.jump_if(BPF_JSET_K, mask, no);
        }
        When::SetidMode { arg } => {
            a.stmt(BPF_LD_W_ABS, OFF_ARGS + 8 * u32::from(arg));
            a.jump_if(BPF_JSET_K, SETID_BITS as u32, no);
        }
        When::OpenFlags { flags, mode } => {
            // O_TRUNC with an access mode other than O_WRONLY (1) or
            // O_RDWR (2): O_RDONLY (0), and 3, which opens for neither
            // and so is not checked as a write either. Without an ALU
            // step: bit 0 and bit 1 of the flags, one at a time.
            let (trunc, bit0, checked, eacces) = (a.label(), a.label(), a.label(), a.label());
            a.stmt(BPF_LD_W_ABS, OFF_ARGS + 8 * u32::from(flags));
            a.jump_if(BPF_JSET_K, libc::O_TRUNC as u32, trunc);
            a.stmt(BPF_LD_W_ABS, OFF_ARGS + 8 * u32::from(mode));
            a.jump_if(BPF_JSET_K, SETID_BITS as u32, no);
            emit_allow(a, watch);
            a.bind(trunc);
            a.jump_if(BPF_JSET_K, 1, bit0);
            a.jump_if(BPF_JSET_K, 2, checked); // O_RDWR
            a.stmt(BPF_RET_K, RET_ERRNO | libc::EACCES as u32); // O_RDONLY
            a.bind(bit0);
            a.jump_if(BPF_JSET_K, 2, eacces); // 3; else O_WRONLY
            a.bind(checked);
            a.stmt(BPF_LD_W_ABS, OFF_ARGS + 8 * u32::from(mode));
            a.jump_if(BPF_JSET_K, SETID_BITS as u32, no);
            emit_allow(a, watch);
            a.bind(eacces);
            a.stmt(BPF_RET_K, RET_ERRNO | libc::EACCES as u32);
        }
        When::OtherProcess { arg, which } => {
            if let Some((idx, value)) = which {
                let ok = a.label();
                a.stmt(BPF_LD_W_ABS, OFF_ARGS + 8 * u32::from(idx));
                a.jump_if(BPF_JEQ_K, value, ok);
                a.stmt(BPF_RET_K, ret_no);
                a.bind(ok);
            }
            // pid_t is 32 bits; anything but 0 names another process
            // (a caller naming itself by number is refused too).
            a.stmt(BPF_LD_W_ABS, OFF_ARGS + 8 * u32::from(arg));
            a.jump_if(BPF_JSET_K, u32::MAX, no);
        }
        When::ArgNotIn { arg, values } => {
            // Jumps only go forward: the allowed values jump past a local
            // refusal to the block's own `ret ALLOW`.
            let ok = a.label();
            a.stmt(BPF_LD_W_ABS, OFF_ARGS + 8 * u32::from(arg));
            for v in values {
                a.jump_if(BPF_JEQ_K, *v as u32, ok);
            }
            a.stmt(BPF_RET_K, ret_no);
            a.bind(ok);
        }
        When::UnlessUnixConnected { domain, kind } => {
            let (unix, ok) = (a.label(), a.label());
            a.stmt(BPF_LD_W_ABS, OFF_ARGS + 8 * u32::from(domain));
            a.jump_if(BPF_JEQ_K, libc::AF_UNIX as u32, unix);
            a.stmt(BPF_RET_K, ret_no);
            a.bind(unix);
            // (kind & !SOCK_FLAGS) is SOCK_STREAM (1) or SOCK_SEQPACKET (5)
            // without an ALU step: no bit outside the flags, bit 0 and bit
            // 2, and bit 0 set (4, SOCK_RDM, has it clear).
            const CONNECTED: u32 = libc::SOCK_STREAM as u32 | libc::SOCK_SEQPACKET as u32;
            a.stmt(BPF_LD_W_ABS, OFF_ARGS + 8 * u32::from(kind));
            a.jump_if(BPF_JSET_K, !(SOCK_FLAGS | CONNECTED), no);
            a.jump_if(BPF_JSET_K, libc::SOCK_STREAM as u32, ok);
            a.stmt(BPF_RET_K, ret_no);
            a.bind(ok);
        }
        When::Always => {}
    }
    emit_allow(a, watch);
    a.bind(no);
    a.stmt(BPF_RET_K, ret_no);
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
pub(crate) mod tests {
    use super::*;

    /// A classic-BPF interpreter for the opcodes the generator emits.
    pub(crate) fn run(p: &[sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> u32 {
        let mut data = Vec::new();
        data.extend_from_slice(&nr.to_le_bytes());
        data.extend_from_slice(&arch.to_le_bytes());
        data.extend_from_slice(&0u64.to_le_bytes());
        for a in args {
            data.extend_from_slice(&a.to_le_bytes());
        }
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let i = &p[pc];
            pc += 1;
            match i.code {
                BPF_LD_W_ABS => {
                    let o = i.k as usize;
                    acc = u32::from_le_bytes([data[o], data[o + 1], data[o + 2], data[o + 3]]);
                }
                BPF_RET_K => return i.k,
                BPF_JA => pc += i.k as usize,
                BPF_JEQ_K | BPF_JGE_K | BPF_JSET_K => {
                    let hit = match i.code {
                        BPF_JEQ_K => acc == i.k,
                        BPF_JGE_K => acc >= i.k,
                        _ => acc & i.k != 0,
                    };
                    pc += usize::from(if hit { i.jt } else { i.jf });
                }
                other => panic!("unexpected opcode {other:#x}"),
            }
        }
    }

    /// How many instructions the program runs for this call (with `run`'s
    /// answer): the cost of a call the kernel's action cache does not cover.
    fn steps(p: &[sock_filter], arch: u32, nr: u32, args: [u64; 6]) -> usize {
        // Every instruction is a load, a forward jump or a return, so the
        // instructions run are those on the path: replay it.
        let ret = run(p, arch, nr, args);
        let (mut pc, mut acc, mut n) = (0usize, 0u32, 0usize);
        let mut data = [0u8; 64];
        data[..4].copy_from_slice(&nr.to_le_bytes());
        data[4..8].copy_from_slice(&arch.to_le_bytes());
        for (i, a) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        loop {
            let i = &p[pc];
            pc += 1;
            n += 1;
            match i.code {
                BPF_LD_W_ABS => {
                    let o = i.k as usize;
                    acc = u32::from_le_bytes([data[o], data[o + 1], data[o + 2], data[o + 3]]);
                }
                BPF_RET_K => {
                    assert_eq!(i.k, ret);
                    return n;
                }
                BPF_JA => pc += i.k as usize,
                _ => {
                    let hit = match i.code {
                        BPF_JEQ_K => acc == i.k,
                        BPF_JGE_K => acc >= i.k,
                        _ => acc & i.k != 0,
                    };
                    pc += usize::from(if hit { i.jt } else { i.jf });
                }
            }
        }
    }

    /// Whether the kernel's seccomp action cache (Linux 5.11,
    /// `seccomp_is_const_allow` in `kernel/seccomp.c`) marks syscall `nr` of
    /// the native architecture as always allowed by this program, so that
    /// it never runs the program for it: the program must reach `ALLOW`
    /// having loaded nothing but the number and the architecture. A
    /// transcription of the kernel's emulator.
    pub(crate) fn kernel_caches(p: &[sock_filter], nr: u32) -> bool {
        cache_walk(p, nr).0
    }

    /// What the kernel's emulator decides for `nr` and how many
    /// instructions it walks to decide it.
    fn cache_walk(p: &[sock_filter], nr: u32) -> (bool, usize) {
        let mut steps = 0;
        let mut acc = 0u32;
        let mut pc = 0usize;
        while pc < p.len() {
            let i = &p[pc];
            pc += 1;
            steps += 1;
            match i.code {
                BPF_LD_W_ABS => match i.k {
                    OFF_NR => acc = nr,
                    OFF_ARCH => acc = AUDIT_ARCH,
                    _ => return (false, steps),
                },
                BPF_RET_K => return (i.k == RET_ALLOW, steps),
                BPF_JA => pc += i.k as usize,
                BPF_JEQ_K | BPF_JGE_K | BPF_JSET_K => {
                    let hit = match i.code {
                        BPF_JEQ_K => acc == i.k,
                        BPF_JGE_K => acc >= i.k,
                        _ => acc & i.k != 0,
                    };
                    pc += usize::from(if hit { i.jt } else { i.jf });
                }
                _ => return (false, steps),
            }
        }
        (false, steps)
    }

    /// The most and the total instructions the kernel's emulator walks
    /// when it loads `p` (it runs the program for every syscall number of
    /// the native architecture, up to `NR_syscalls`; 512 covers x86_64's
    /// and aarch64's): the part of a filter's load time that grows with the
    /// program and is paid on every command's critical path.
    pub(crate) fn load_walk(p: &[sock_filter]) -> (usize, usize) {
        (0..512).map(|nr| cache_walk(p, nr).1).fold((0, 0), |(m, t), s| (m.max(s), t + s))
    }

    /// Syscalls that open-, stat- and read-heavy commands (grep, find, git,
    /// compilers, test runners) make by the thousand: the action cache must
    /// cover every one, in every program, or each of them runs the whole
    /// program again (a filter that inspects an argument of a syscall
    /// defeats the cache for it).
    pub(crate) fn hot_cacheable() -> Vec<i64> {
        let mut v = vec![
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_close,
            libc::SYS_newfstatat,
            libc::SYS_fstat,
            libc::SYS_statx,
            libc::SYS_getdents64,
            libc::SYS_lseek,
            libc::SYS_pread64,
            libc::SYS_readlinkat,
            libc::SYS_faccessat,
            libc::SYS_faccessat2,
            libc::SYS_mmap,
            libc::SYS_munmap,
            libc::SYS_mprotect,
            libc::SYS_brk,
            libc::SYS_futex,
            libc::SYS_rt_sigaction,
            libc::SYS_rt_sigprocmask,
            libc::SYS_execve,
            libc::SYS_wait4,
            libc::SYS_exit_group,
            libc::SYS_getpid,
            libc::SYS_getppid,
            libc::SYS_dup3,
            libc::SYS_pipe2,
            libc::SYS_ppoll,
            libc::SYS_getrandom,
        ];
        #[cfg(target_arch = "x86_64")]
        v.extend([
            libc::SYS_stat,
            libc::SYS_lstat,
            libc::SYS_access,
            libc::SYS_readlink,
            libc::SYS_dup2,
            libc::SYS_poll,
        ]);
        v
    }

    fn prog() -> BpfProgram {
        compile().unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_kernel_caches_the_hot_syscalls_and_the_busy_conditional_ones_come_first() {
        for profile in PROFILES {
            let p = compile_for(profile).unwrap_or_else(|e| panic!("{e}"));
            for nr in hot_cacheable() {
                assert!(kernel_caches(&p, nr as u32), "syscall {nr} is not cached in {profile:?}");
            }
            // Every conditional entry inspects an argument, so the cache
            // cannot cover it; an unconditional one is cached as refused
            // (never allowed), which the cache leaves to the program.
            for e in entries_for(profile) {
                assert!(!kernel_caches(&p, e.nr as u32), "{} in {profile:?}", e.name);
            }
            // openat runs the program on every open: it is compared first,
            // right after the guards (arch, x32), and its block is five
            // instructions for an open without O_TRUNC (the flags and the
            // mode, each loaded and tested, and the ret).
            let read_only = [libc::AT_FDCWD as u64, 0, libc::O_RDONLY as u64 | libc::O_CLOEXEC as u64, 0, 0, 0];
            let open_steps = steps(&p, AUDIT_ARCH, libc::SYS_openat as u32, read_only);
            let guards = if cfg!(target_arch = "x86_64") { 4 } else { 3 };
            assert_eq!(open_steps, guards + 1 + 5, "openat in {profile:?}");
            let fcntl = [0, libc::F_GETFD as u64, 0, 0, 0, 0];
            assert!(steps(&p, AUDIT_ARCH, libc::SYS_fcntl as u32, fcntl) <= guards + 2 + 4, "fcntl in {profile:?}");
            let plain_fork = [libc::SIGCHLD as u64, 0, 0, 0, 0, 0];
            assert!(
                steps(&p, AUDIT_ARCH, libc::SYS_clone as u32, plain_fork) <= guards + 4 + 3,
                "clone in {profile:?}"
            );
        }
        // Only the order is chosen: the first compares after the guards are
        // HOT's, in order, then the jump to the search.
        let p = prog();
        let guards = if cfg!(target_arch = "x86_64") { 6 } else { 4 };
        let first: Vec<u32> = p.iter().skip(guards).take(HOT.len()).map(|i| i.k).collect();
        assert_eq!(first, HOT.iter().map(|n| *n as u32).collect::<Vec<_>>());
        assert_eq!(p[guards + HOT.len()].code, BPF_JA);
    }

    #[test]
    fn loading_walks_a_search_not_the_table() {
        // Measured on this project's VM: the program as a list of compares
        // (80 instructions walked for nearly every number) took 94 µs to
        // load, as a search 52 µs; a 3-instruction program 20 µs.
        for profile in PROFILES {
            let p = compile_for(profile).unwrap_or_else(|e| panic!("{e}"));
            let (most, total) = load_walk(&p);
            eprintln!("{profile:?}: {} instructions, load walk at most {most}, {total} in all", p.len());
            assert!(most <= 24 && total <= 512 * 20, "{profile:?}: at most {most}, {total} in all");
            assert!(p.len() < 400, "the program grew to {} instructions in {profile:?}", p.len());
        }
        let o = crate::observe::compile().unwrap_or_else(|e| panic!("{e}"));
        let (most, total) = load_walk(&o);
        eprintln!("observer: {} instructions, load walk at most {most}, {total} in all", o.len());
        assert!(most <= 20 && total <= 512 * 16, "observer: at most {most}, {total} in all");
    }

    const PROFILES: [Profile; 4] = [
        Profile::FULL,
        Profile { degraded: false, network_none: true },
        Profile { degraded: true, network_none: false },
        Profile { degraded: true, network_none: true },
    ];

    #[test]
    fn the_search_routes_every_number_as_the_table_says() {
        // Every syscall number up to 1023, and each with the x32 bit, with
        // zero arguments: an unconditional entry returns its errno, clone3
        // and openat2 ENOSYS, an x32 number EPERM, a number the table does
        // not name ALLOW. Conditional entries are run with their arguments
        // by `every_entry_is_refused_and_only_when_it_should_be`; here they
        // must only not be allowed outright by the search's routing, which
        // `kernel_caches` says (their block loads an argument).
        for profile in PROFILES {
            let p = compile_for(profile).unwrap_or_else(|e| panic!("{e}"));
            let entries = entries_for(profile);
            for nr in 0u32..1024 {
                let got = run(&p, AUDIT_ARCH, nr, [0; 6]);
                let entry = entries.iter().find(|e| e.nr as u32 == nr);
                let want = match entry {
                    _ if nr == libc::SYS_clone3 as u32 || nr == libc::SYS_openat2 as u32 => {
                        Some(RET_ERRNO | libc::ENOSYS as u32)
                    }
                    Some(e) if e.when == When::Always => Some(RET_ERRNO | e.errno as u32),
                    Some(_) => None,
                    None => Some(RET_ALLOW),
                };
                match want {
                    Some(w) => assert_eq!(got, w, "syscall {nr} in {profile:?}"),
                    None => assert!(!kernel_caches(&p, nr), "conditional syscall {nr} cached in {profile:?}"),
                }
                if cfg!(target_arch = "x86_64") {
                    assert_eq!(run(&p, AUDIT_ARCH, nr | X32_SYSCALL_BIT, [0; 6]), EPERM, "x32 {nr} in {profile:?}");
                }
            }
            for nr in [u32::MAX, X32_SYSCALL_BIT - 1, 0x7fff_ffff] {
                let want = if nr >= X32_SYSCALL_BIT && cfg!(target_arch = "x86_64") { EPERM } else { RET_ALLOW };
                assert_eq!(run(&p, AUDIT_ARCH, nr, [0; 6]), want, "syscall {nr:#x} in {profile:?}");
            }
        }
    }

    #[test]
    fn a_dispatch_refuses_a_number_listed_twice() {
        let mut a = Asm::default();
        let cases = [(1, Goto::Ret(RET_ALLOW)), (7, Goto::Ret(RET_ALLOW)), (1, Goto::Ret(RET_ALLOW))];
        assert!(matches!(a.dispatch(&cases, RET_ALLOW, &mut |_, _| {}), Err(FilterError::Duplicate(1))));
    }

    const EPERM: u32 = RET_ERRNO | libc::EPERM as u32;

    #[test]
    fn every_entry_is_refused_and_only_when_it_should_be() {
        for profile in PROFILES {
            check_profile(profile);
        }
    }

    fn check_profile(profile: Profile) {
        let p = compile_for(profile).unwrap_or_else(|e| panic!("{e}"));
        for e in entries_for(profile) {
            let nr = e.nr as u32;
            let no = RET_ERRNO | e.errno as u32;
            match e.when {
                When::Always => assert_eq!(run(&p, AUDIT_ARCH, nr, [0; 6]), no, "{}", e.name),
                When::ArgIs { arg, values } => {
                    for v in values {
                        let mut args = [0u64; 6];
                        args[usize::from(arg)] = *v;
                        assert_eq!(run(&p, AUDIT_ARCH, nr, args), no, "{} {v:#x}", e.name);
                        // The kernel truncates these to 32 bits; so do we.
                        args[usize::from(arg)] = *v | 1 << 32;
                        assert_eq!(run(&p, AUDIT_ARCH, nr, args), no, "{} high bits", e.name);
                    }
                    let mut args = [0u64; 6];
                    args[usize::from(arg)] = 0x7fff;
                    assert_eq!(run(&p, AUDIT_ARCH, nr, args), RET_ALLOW, "{} benign", e.name);
                }
                When::NamespaceFlags { arg } => {
                    for (flag, name) in NAMESPACE_FLAGS {
                        let mut args = [0u64; 6];
                        args[usize::from(arg)] = *flag | libc::SIGCHLD as u64;
                        assert_eq!(run(&p, AUDIT_ARCH, nr, args), no, "{} {name}", e.name);
                    }
                    let mut args = [0u64; 6];
                    args[usize::from(arg)] = (libc::CLONE_VM | libc::CLONE_THREAD | libc::CLONE_FILES) as u64;
                    assert_eq!(run(&p, AUDIT_ARCH, nr, args), RET_ALLOW, "{} thread creation", e.name);
                }
                When::OtherProcess { arg, which } => {
                    let mut args = [0u64; 6];
                    if let Some((idx, value)) = which {
                        args[usize::from(idx)] = u64::from(value);
                    }
                    assert_eq!(run(&p, AUDIT_ARCH, nr, args), RET_ALLOW, "{} on itself", e.name);
                    let mut other = args;
                    other[usize::from(arg)] = 1234;
                    assert_eq!(run(&p, AUDIT_ARCH, nr, other), no, "{} on another process", e.name);
                    if let Some((idx, value)) = which {
                        let mut many = args;
                        many[usize::from(idx)] = u64::from(value) + 1;
                        assert_eq!(run(&p, AUDIT_ARCH, nr, many), no, "{} on a group", e.name);
                    }
                }
                When::ArgNotIn { arg, values } => {
                    for v in values {
                        let mut args = [0u64; 6];
                        args[usize::from(arg)] = *v;
                        assert_eq!(run(&p, AUDIT_ARCH, nr, args), RET_ALLOW, "{} allows {v}", e.name);
                    }
                    for v in [libc::AF_UNIX, libc::AF_NETLINK, libc::AF_PACKET] {
                        let mut args = [0u64; 6];
                        args[usize::from(arg)] = v as u64;
                        assert_eq!(run(&p, AUDIT_ARCH, nr, args), no, "{} refuses family {v}", e.name);
                    }
                }
                When::UnlessUnixConnected { domain, kind } => {
                    let stream = libc::SOCK_STREAM as u64;
                    let seqpacket = libc::SOCK_SEQPACKET as u64;
                    let flags = u64::from(SOCK_FLAGS);
                    for (d, k, want) in [
                        (libc::AF_UNIX as u64, stream, RET_ALLOW),
                        (libc::AF_UNIX as u64, stream | flags, RET_ALLOW),
                        (libc::AF_UNIX as u64, stream | libc::SOCK_CLOEXEC as u64, RET_ALLOW),
                        (libc::AF_UNIX as u64 | 1 << 32, stream | 1 << 32, RET_ALLOW),
                        (libc::AF_UNIX as u64, seqpacket, RET_ALLOW),
                        (libc::AF_UNIX as u64, seqpacket | libc::SOCK_CLOEXEC as u64, RET_ALLOW),
                        (libc::AF_UNIX as u64, seqpacket | flags, RET_ALLOW),
                        (libc::AF_UNIX as u64, libc::SOCK_DGRAM as u64, no),
                        (libc::AF_UNIX as u64, libc::SOCK_DGRAM as u64 | flags, no),
                        (libc::AF_UNIX as u64, libc::SOCK_RDM as u64, no),
                        (libc::AF_UNIX as u64, libc::SOCK_RAW as u64, no),
                        (libc::AF_UNIX as u64, 7, no),
                        (AF_VSOCK, seqpacket, no),
                        (libc::AF_INET as u64, seqpacket, no),
                        (libc::AF_UNIX as u64, stream | 0x100, no),
                        (AF_VSOCK, stream, no),
                        (libc::AF_INET as u64, stream, no),
                    ] {
                        let mut args = [0u64; 6];
                        args[usize::from(domain)] = d;
                        args[usize::from(kind)] = k;
                        assert_eq!(run(&p, AUDIT_ARCH, nr, args), want, "{} {d:#x} {k:#x}", e.name);
                    }
                }
                When::OpenFlags { flags, mode } => {
                    let eacces = RET_ERRNO | libc::EACCES as u32;
                    let (rd, wr, rw, trunc, creat) = (
                        libc::O_RDONLY as u64,
                        libc::O_WRONLY as u64,
                        libc::O_RDWR as u64,
                        libc::O_TRUNC as u64,
                        libc::O_CREAT as u64,
                    );
                    for (fl, md, want) in [
                        (rd, 0o644, RET_ALLOW),
                        (rd | trunc, 0, eacces),
                        (rd | trunc | creat, 0o644, eacces),
                        (rd | trunc | 1 << 32, 0, eacces),
                        (wr | trunc, 0, RET_ALLOW),
                        (rw | trunc | creat, 0o644, RET_ALLOW),
                        (3 | trunc, 0, eacces),
                        (3, 0, RET_ALLOW),
                        (rw | trunc, 0o4755, no),
                        (wr | creat, 0o4755, no),
                        (wr | trunc | creat, 0o2755, no),
                        (rd | creat, 0o6777, no),
                        (wr | creat, 0o1777, RET_ALLOW),
                    ] {
                        let mut args = [0u64; 6];
                        args[usize::from(flags)] = fl;
                        args[usize::from(mode)] = md;
                        assert_eq!(run(&p, AUDIT_ARCH, nr, args), want, "{} flags {fl:#o} mode {md:o}", e.name);
                    }
                }
                When::SetidMode { arg } => {
                    for (mode, want) in
                        [(0o4755, no), (0o2755, no), (0o6777, no), (0o755, RET_ALLOW), (0o1777, RET_ALLOW)]
                    {
                        let mut args = [0u64; 6];
                        args[usize::from(arg)] = mode;
                        assert_eq!(run(&p, AUDIT_ARCH, nr, args), want, "{} mode {mode:o}", e.name);
                    }
                }
            }
        }
    }

    #[test]
    fn guards_and_ordinary_syscalls() {
        let p = prog();
        assert_eq!(run(&p, AUDIT_ARCH ^ 1, libc::SYS_read as u32, [0; 6]), RET_KILL_PROCESS);
        assert_eq!(run(&p, AUDIT_ARCH, libc::SYS_clone3 as u32, [0; 6]), RET_ERRNO | libc::ENOSYS as u32);
        assert_eq!(run(&p, AUDIT_ARCH, libc::SYS_openat2 as u32, [0; 6]), RET_ERRNO | libc::ENOSYS as u32);
        if cfg!(target_arch = "x86_64") {
            assert_eq!(run(&p, AUDIT_ARCH, X32_SYSCALL_BIT | libc::SYS_getpid as u32, [0; 6]), EPERM);
            assert_eq!(run(&p, AUDIT_ARCH, X32_SYSCALL_BIT | libc::SYS_read as u32, [0; 6]), EPERM);
        }
        for nr in
            [libc::SYS_read, libc::SYS_write, libc::SYS_openat, libc::SYS_execve, libc::SYS_mmap, libc::SYS_exit_group]
        {
            assert_eq!(run(&p, AUDIT_ARCH, nr as u32, [0; 6]), RET_ALLOW, "syscall {nr}");
        }
        assert!(p.len() < 260, "the program grew to {} instructions", p.len());
    }

    #[test]
    fn every_entry_has_a_reason_and_a_unique_number() {
        for profile in PROFILES {
            let mut seen = std::collections::HashSet::new();
            for x in entries_for(profile) {
                assert!(!x.why.is_empty());
                assert!(seen.insert(x.nr), "{} listed twice in {profile:?}", x.name);
            }
        }
    }

    #[test]
    fn ioctl_lists_agree_and_errnos_are_what_the_docs_say() {
        let full: Vec<u64> = IOCTLS_FULL.iter().map(|(v, _)| *v).collect();
        assert_eq!(full, IOCTL_VALUES_FULL);
        let degraded: Vec<u64> = IOCTLS_FULL.iter().chain(IOCTLS_METADATA).map(|(v, _)| *v).collect();
        assert_eq!(degraded, IOCTL_VALUES_DEGRADED);
        let mut seen = std::collections::HashSet::new();
        assert!(degraded.iter().all(|v| seen.insert(*v)), "an ioctl request listed twice");
        for profile in PROFILES {
            for e in entries_for(profile) {
                let xattr_read = XATTR_READS.iter().any(|(_, nr)| *nr == e.nr);
                let want = if profile.degraded && xattr_read { libc::EOPNOTSUPP } else { libc::EPERM };
                assert_eq!(e.errno, want, "{} in {profile:?}", e.name);
            }
        }
        // The read-only requests stay allowed everywhere; the clones too,
        // whose destination Landlock checked when it was opened for writing.
        let p = compile_for(PROFILES[2]).unwrap_or_else(|e| panic!("{e}"));
        for req in [0x8008_6601u64, 0xc020_660b, 0x8008_7601, 0x801c_581f, 0x4004_9409, 0x4020_940d, 0x5401] {
            let args = [0, req, 0, 0, 0, 0];
            assert_eq!(run(&p, AUDIT_ARCH, libc::SYS_ioctl as u32, args), RET_ALLOW, "ioctl {req:#x}");
        }
        let args = [0, 0x4008_6602, 0, 0, 0, 0];
        assert_eq!(
            run(&compile().unwrap_or_else(|e| panic!("{e}")), AUDIT_ARCH, libc::SYS_ioctl as u32, args),
            RET_ALLOW
        );
    }

    #[test]
    fn compile_is_deterministic() {
        assert_eq!(program_bytes(&prog()), program_bytes(&prog()));
    }
}
