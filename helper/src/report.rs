//! What the helper tells the library, as fixed-size records on a pipe.
//!
//! The helper never formats strings or sends JSON while it builds the
//! sandbox: a failing step writes one 16-byte [`Record`] naming the
//! [`Step`], the errno and an index into the spec (which mount failed), and
//! the library turns that into a typed error. The write end is close-on-exec
//! in the command, so the records that can arrive are: at most one `Error`,
//! one `Applied` (what the command really runs under), and one `Exited` or
//! `Signaled` from the sandbox's pid 1 when the command ends.

/// Format version of a record.
pub const RECORD_VERSION: u8 = 1;
/// Size in bytes of one encoded record.
pub const RECORD_LEN: usize = 16;
/// `detail` value meaning "no index".
pub const NO_DETAIL: u32 = u32::MAX;

macro_rules! steps {
    ($( $(#[$doc:meta])* $name:ident = $n:literal, $text:literal; )*) => {
        /// The helper's setup steps, in the order they run.
        ///
        /// `docs/sandbox.md` lists the same steps in the same order; a test
        /// keeps the two from drifting apart.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u16)]
        pub enum Step {
            $( $(#[$doc])* $name = $n, )*
        }

        impl Step {
            /// Every step, in order.
            pub const ALL: &'static [Step] = &[$(Step::$name,)*];

            /// A short lowercase description for error messages.
            pub fn describe(self) -> &'static str {
                match self { $(Step::$name => $text,)* }
            }
        }

        impl TryFrom<u16> for Step {
            type Error = u16;
            fn try_from(v: u16) -> Result<Self, u16> {
                match v { $($n => Ok(Step::$name),)* other => Err(other) }
            }
        }
    };
}

steps! {
    /// Close inherited fds above the protocol fds; the environment is
    /// already empty (the library spawns the helper with a cleared one).
    Sanitize = 1, "sanitizing inherited file descriptors";
    /// Read and validate the spec from the memfd on fd 3 (and build argv,
    /// envp and the `PATH` candidates from it).
    ReadSpec = 2, "reading the spawn spec";
    /// Compile the seccomp filter, before any namespace exists.
    CompileSeccomp = 3, "compiling the seccomp filter";
    /// Block the signals the helper forwards (and `SIGCHLD`), to read them
    /// from a signalfd later.
    BlockSignals = 4, "blocking the forwarded signals";
    /// Make the socket pair the outer helper and pid 1 talk over.
    Channel = 5, "making the setup channel to pid 1";
    /// Root callers only: drop host root's supplementary groups.
    DropGroups = 6, "dropping host root's supplementary groups";
    /// Landlock-only mode: refuse real, effective and saved uids that mix
    /// 0 and non-0 (a setuid start).
    CheckIds = 7, "checking the caller's uids (a setuid start is refused)";
    /// Landlock-only mode: become a child subreaper (the outer helper, and
    /// later pid 1), so that nothing the command starts escapes the sweep.
    Subreaper = 8, "becoming a child subreaper";
    /// Landlock-only mode: no_new_privs and a scope-only Landlock domain
    /// (signals, abstract sockets; `Refer` granted beneath `/`), entered by
    /// the outer helper and again, nested, by pid 1.
    ScopeSignals = 9, "entering the scope-only Landlock domain";
    /// `clone3` into new user, mount, pid, ipc, uts namespaces, born inside
    /// the per-command cgroup; where `clone3` answers `ENOSYS`, `clone(2)`
    /// with the same flags (`detail` names the call that failed).
    Clone = 10, "creating the namespaces (clone3)";
    /// After the `clone(2)` fallback, write pid 1 into the per-command
    /// cgroup's `cgroup.procs`.
    JoinCgroup = 11, "moving pid 1 into its cgroup (cgroup.procs)";
    /// Write the child's `uid_map`: an unprivileged caller to itself, a root
    /// caller's inside uid 0 to host `nobody`.
    MapUid = 12, "writing uid_map";
    /// Write `deny` to `setgroups` (required before gid_map, CVE-2014-8989).
    DenySetgroups = 13, "denying setgroups";
    /// Write the child's `gid_map`.
    MapGid = 14, "writing gid_map";
    /// Open pid 1's user namespace (`/proc/<pid>/ns/user`).
    OpenUserns = 15, "opening pid 1's user namespace";
    /// Root callers only: clone the `idmap` binds on the host side and
    /// idmap them through pid 1's user namespace (host root to the command's
    /// id).
    Idmap = 16, "preparing idmapped mounts";
    /// Send pid 1 its go-ahead (`m`) over the setup channel, with the
    /// idmapped trees.
    HandOver = 17, "handing the idmapped mounts to pid 1";
    /// The outer helper joins pid 1's user namespace and makes the network
    /// namespace with loopback up, in parallel with pid 1 building the root,
    /// and sends it to pid 1 (`n`). With a network made ahead for the
    /// workspace (`Netns::Shared`) nothing is made: the outer helper joined
    /// it before the clone, and a failure there is reported under this step
    /// with `detail` [`NET_DETAIL_JOIN_USERNS`] or [`NET_DETAIL_JOIN_NETNS`].
    NetNamespace = 18, "making the network namespace";
    /// Make the signalfd the outer helper supervises pid 1 with.
    SignalFd = 19, "making the signalfd";
    /// Supervise pid 1: poll the signalfd, pid 1's pidfd and the lifeline,
    /// and reap pid 1.
    Supervise = 20, "supervising pid 1 (poll, waitpid)";
    /// Pid 1 arms `PR_SET_PDEATHSIG` and waits for the maps.
    ParentDeath = 21, "arming parent-death signal";
    /// Pid 1 switches to the mapped inside ids (`setresgid`, `setresuid`).
    SwitchIds = 22, "switching pid 1 to the mapped ids";
    /// Open every other bind source with `RESOLVE_NO_SYMLINKS`.
    OpenSources = 23, "opening mount sources";
    /// Make every mount private, so nothing propagates to the host.
    MakePrivate = 24, "making mounts private";
    /// Create and attach the sandbox's root tmpfs.
    MountRoot = 25, "mounting the root tmpfs";
    /// Carry out one mount op of the plan (`detail` is its index).
    Mount = 26, "carrying out a mount";
    /// `pivot_root` into the new root.
    PivotRoot = 27, "pivoting into the new root";
    /// Detach the old root.
    DetachOldRoot = 28, "detaching the old root";
    /// Make the root tmpfs itself read-only.
    RemountRoot = 29, "making the root read-only";
    /// Set the hostname of the private uts namespace.
    Hostname = 30, "setting the hostname";
    /// Pid 1 joins the network namespace the outer helper made.
    JoinNetwork = 31, "joining the network namespace";
    /// Make pid 1 non-dumpable: no ptrace, no `/proc/1/mem`, no `/proc/1/environ`.
    NonDumpable = 32, "making pid 1 non-dumpable";
    /// Fork the command process.
    ForkCommand = 33, "forking the command";
    /// `setsid`: no controlling terminal, no TIOCSTI into the caller's tty.
    NewSession = 34, "starting a new session";
    /// Unblock the signals the helper blocked and put every disposition back
    /// to its default (Rust ignores SIGPIPE), so the command gets them.
    UnblockSignals = 35, "unblocking signals";
    /// Change to the working directory.
    Chdir = 36, "changing to the working directory";
    /// Set resource limits.
    Rlimits = 37, "setting resource limits";
    /// Drop every capability from all five sets.
    DropCaps = 38, "dropping capabilities";
    /// `PR_SET_NO_NEW_PRIVS`.
    NoNewPrivs = 39, "setting no_new_privs";
    /// Install the Landlock write rules.
    Landlock = 40, "installing landlock rules";
    /// Mark every fd above 2 close-on-exec.
    CloseFds = 41, "closing file descriptors";
    /// Hand the refused-write observer's listener to the library over fd 7.
    Observer = 42, "handing over the refused-write observer's listener";
    /// Install the seccomp filter (last, before exec).
    Seccomp = 43, "installing the seccomp filter";
    /// `execve` the command.
    Exec = 44, "executing the command";
}

/// Which system call made the sandbox's pid 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CloneCall {
    /// `clone3`, born in the per-command cgroup (`CLONE_INTO_CGROUP`).
    #[default]
    Clone3,
    /// `clone(2)`, because `clone3` answered `ENOSYS` (a container's default
    /// seccomp profile does that); the outer helper moved pid 1 into the
    /// cgroup through `cgroup.procs` before letting it go on.
    Clone,
}

/// `detail` of an `Error` record for [`Step::Clone`]: `clone3` failed.
pub const CLONE_DETAIL_CLONE3: u32 = 0;
/// `detail` for [`Step::Clone`]: `clone3` answered `ENOSYS`, then the
/// `clone(2)` fallback failed with the record's errno.
pub const CLONE_DETAIL_CLONE: u32 = 1;

/// `detail` for [`Step::NetNamespace`]: joining the workspace's user
/// namespace (before the clone) failed.
pub const NET_DETAIL_JOIN_USERNS: u32 = 2;
/// `detail` for [`Step::NetNamespace`]: joining the workspace's network
/// namespace (before the clone) failed.
pub const NET_DETAIL_JOIN_NETNS: u32 = 3;

/// What a record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// A setup step failed with `errno`; `detail` indexes the spec's mounts
    /// for [`Step::Mount`] and is [`NO_DETAIL`] otherwise.
    Error { step: Result<Step, u16>, errno: i32, detail: u32 },
    /// The command is about to be executed under these layers.
    Applied(Applied),
    /// The command exited with this code.
    Exited(i32),
    /// The command was killed by this signal.
    Signaled(i32),
}

/// The enforcement the command actually runs under, as the helper saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Applied {
    /// The Landlock ABI the kernel offered (0: none).
    pub landlock_abi: u32,
    /// Whether Landlock enforced the write rules fully.
    pub landlock_full: bool,
    /// Whether Landlock enforced at least part of the rules.
    pub landlock_partial: bool,
    /// Whether the seccomp filter is installed.
    pub seccomp: bool,
    /// Whether the mount plan's read-only barrier is in place.
    pub readonly_mounts: bool,
    /// Which system call made pid 1.
    pub clone: CloneCall,
}

const KIND_ERROR: u8 = 1;
const KIND_APPLIED: u8 = 2;
const KIND_EXITED: u8 = 3;
const KIND_SIGNALED: u8 = 4;

impl Record {
    /// Encode into the fixed 16-byte wire form (little endian):
    /// `version u8, kind u8, step u16, value i32, detail u32, flags u32`.
    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let (kind, step, value, detail, flags): (u8, u16, i32, u32, u32) = match *self {
            Record::Error { step, errno, detail } => {
                let s = match step {
                    Ok(s) => s as u16,
                    Err(raw) => raw,
                };
                (KIND_ERROR, s, errno, detail, 0)
            }
            Record::Applied(a) => {
                let flags = u32::from(a.landlock_full)
                    | u32::from(a.landlock_partial) << 1
                    | u32::from(a.seccomp) << 2
                    | u32::from(a.readonly_mounts) << 3
                    | u32::from(a.clone == CloneCall::Clone) << 4;
                (KIND_APPLIED, 0, 0, a.landlock_abi, flags)
            }
            Record::Exited(code) => (KIND_EXITED, 0, code, 0, 0),
            Record::Signaled(sig) => (KIND_SIGNALED, 0, sig, 0, 0),
        };
        let mut out = [0u8; RECORD_LEN];
        out[0] = RECORD_VERSION;
        out[1] = kind;
        out[2..4].copy_from_slice(&step.to_le_bytes());
        out[4..8].copy_from_slice(&value.to_le_bytes());
        out[8..12].copy_from_slice(&detail.to_le_bytes());
        out[12..16].copy_from_slice(&flags.to_le_bytes());
        out
    }

    /// Decode a record; `None` for a wrong version or an unknown kind.
    pub fn decode(b: &[u8; RECORD_LEN]) -> Option<Record> {
        if b[0] != RECORD_VERSION {
            return None;
        }
        let step = u16::from_le_bytes([b[2], b[3]]);
        let value = i32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        let detail = u32::from_le_bytes([b[8], b[9], b[10], b[11]]);
        let flags = u32::from_le_bytes([b[12], b[13], b[14], b[15]]);
        match b[1] {
            KIND_ERROR => Some(Record::Error { step: Step::try_from(step), errno: value, detail }),
            KIND_APPLIED => Some(Record::Applied(Applied {
                landlock_abi: detail,
                landlock_full: flags & 1 != 0,
                landlock_partial: flags & 2 != 0,
                seccomp: flags & 4 != 0,
                readonly_mounts: flags & 8 != 0,
                clone: if flags & 16 != 0 { CloneCall::Clone } else { CloneCall::Clone3 },
            })),
            KIND_EXITED => Some(Record::Exited(value)),
            KIND_SIGNALED => Some(Record::Signaled(value)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let cases = [
            Record::Error { step: Ok(Step::Mount), errno: 13, detail: 4 },
            Record::Error { step: Err(999), errno: 1, detail: NO_DETAIL },
            Record::Applied(Applied {
                landlock_abi: 7,
                landlock_full: true,
                landlock_partial: false,
                seccomp: true,
                readonly_mounts: true,
                clone: CloneCall::Clone,
            }),
            Record::Exited(3),
            Record::Signaled(9),
        ];
        for r in cases {
            assert_eq!(Record::decode(&r.encode()), Some(r));
        }
    }

    #[test]
    fn wrong_version_is_refused() {
        let mut b = Record::Exited(0).encode();
        b[0] = 9;
        assert_eq!(Record::decode(&b), None);
    }

    #[test]
    fn steps_are_numbered_in_order() {
        for w in Step::ALL.windows(2) {
            assert!((w[0] as u16) < (w[1] as u16));
        }
    }

    #[test]
    fn r0201_every_step_has_its_own_number_and_description() {
        let mut descriptions = std::collections::BTreeSet::new();
        for s in Step::ALL {
            assert_eq!(Step::try_from(*s as u16), Ok(*s), "{s:?} round-trips");
            assert!(!s.describe().is_empty(), "{s:?} has a description");
            assert!(descriptions.insert(s.describe()), "{s:?}'s description is shared");
            let r = Record::Error { step: Ok(*s), errno: 5, detail: NO_DETAIL };
            assert_eq!(Record::decode(&r.encode()), Some(r), "{s:?} travels in a record");
        }
        // Numbers are distinct (strictly increasing, above) and dense: no
        // number between the first and the last means nothing.
        let (first, last) = (Step::ALL[0] as u16, Step::ALL[Step::ALL.len() - 1] as u16);
        assert_eq!(usize::from(last - first) + 1, Step::ALL.len());
        assert_eq!(Step::try_from(last + 1), Err(last + 1));
        assert_eq!(Step::try_from(0), Err(0));
    }
}
