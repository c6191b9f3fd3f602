//! The spawn spec: everything the helper needs, decided by the library.
//!
//! Paths and arguments are raw bytes, so non-UTF-8 names survive the trip:
//! in the JSON a UTF-8 one is a string and any other an array of its bytes
//! ([`bytes`]).
//! Every host path in a spec has been resolved by the library (symlinks
//! collapsed); the helper opens each one with `RESOLVE_NO_SYMLINKS`, so a
//! path swapped for a link between planning and spawning fails instead of
//! being followed.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Raw bytes of a path, an argument or an environment entry.
pub type Bytes = Vec<u8>;

/// Version of the spec format; the helper refuses any other. 2: byte
/// strings that are UTF-8 are JSON strings ([`bytes`]).
pub const SPEC_VERSION: u32 = 2;

/// The JSON form of [`Bytes`]: a string where the bytes are UTF-8 (every
/// ordinary path, argument and variable), else an array of the bytes; both
/// are read back. Strings parse several times faster than arrays of
/// numbers, and the spec is parsed on every command's critical path (a
/// slot's request: 39 µs for a 3 KB spec of arrays, docs/sandbox.md,
/// "Session 17").
pub mod bytes {
    use serde::de::{Error, SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};
    use std::fmt;

    /// Serialize one byte string.
    pub fn serialize<S: Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(b) {
            Ok(text) => s.serialize_str(text),
            Err(_) => s.collect_seq(b),
        }
    }

    /// Deserialize one byte string: a string or an array of bytes.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        d.deserialize_any(BytesVisitor)
    }

    struct BytesVisitor;

    impl<'de> Visitor<'de> for BytesVisitor {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a string or an array of bytes")
        }
        fn visit_str<E: Error>(self, v: &str) -> Result<Vec<u8>, E> {
            Ok(v.as_bytes().to_vec())
        }
        fn visit_bytes<E: Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
            while let Some(b) = seq.next_element::<u8>()? {
                out.push(b);
            }
            Ok(out)
        }
    }

    /// The same for a list of byte strings.
    pub mod list {
        use serde::{Deserialize, Deserializer, Serialize, Serializer};

        /// One byte string of a list, in the form [`super`] gives it.
        struct One<'a>(&'a [u8]);

        impl Serialize for One<'_> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                super::serialize(self.0, s)
            }
        }

        struct Owned(Vec<u8>);

        impl<'de> Deserialize<'de> for Owned {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Owned, D::Error> {
                super::deserialize(d).map(Owned)
            }
        }

        /// Serialize a list of byte strings.
        pub fn serialize<S: Serializer>(v: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
            s.collect_seq(v.iter().map(|b| One(b)))
        }

        /// Deserialize a list of byte strings (each a string or an array).
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<u8>>, D::Error> {
            Vec::<Owned>::deserialize(d).map(|v| v.into_iter().map(|o| o.0).collect())
        }
    }
}

/// One command to run in a fresh sandbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpawnSpec {
    /// Must equal [`SPEC_VERSION`].
    pub version: u32,
    /// The command and its arguments; `argv[0]` is looked up in the spec's
    /// `PATH` when it holds no `/`.
    #[serde(with = "bytes::list")]
    pub argv: Vec<Bytes>,
    /// The command's whole environment, as `NAME=value` entries.
    #[serde(with = "bytes::list")]
    pub env: Vec<Bytes>,
    /// Working directory inside the sandbox (an absolute path).
    #[serde(with = "bytes")]
    pub cwd: Bytes,
    /// Who the command is, inside and on the host.
    pub identity: Identity,
    /// Network isolation.
    pub network: Network,
    /// The mount plan, carried out in order on a fresh tmpfs root.
    pub mounts: Vec<MountOp>,
    /// The Landlock write barrier.
    pub landlock: LandlockSpec,
    /// Resource limits set before the command starts.
    pub rlimits: Vec<Rlimit>,
    /// Whether a cgroup directory fd is passed on [`crate::CGROUP_FD`].
    pub cgroup: bool,
    /// Switches that break one layer on purpose, so tests can prove the other
    /// layer holds alone. Honoured only by debug builds of the helper; a
    /// release helper refuses a spec that sets any of them.
    #[serde(default)]
    pub test_switches: TestSwitches,
    /// How much isolation: the full sandbox, or a named degraded mode.
    #[serde(default)]
    pub mode: Mode,
    /// Install the refused-write observer (`crate::observe`) and hand its
    /// listener over on [`crate::OBSERVE_FD`].
    #[serde(default)]
    pub observe: bool,
    /// Which network namespace the run gets with [`Network::None`]: a
    /// private one, or the one made ahead for the workspace.
    #[serde(default)]
    pub netns: Netns,
}

/// With [`Network::None`] in the full mode: the network namespace the run
/// gets. The one place that says "this run joins that namespace".
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
pub enum Netns {
    /// A fresh namespace of its own with only loopback, made by the outer
    /// helper (`parallel_netns`). Also what `Network::Host` and the
    /// landlock-only mode carry: they make none.
    #[default]
    Private,
    /// The namespace made ahead (`portcullis-helper --make-network`),
    /// passed on [`crate::NETNS_FD`]; with `userns`, the user namespace
    /// that owns it too, on [`crate::USERNS_FD`] (an unprivileged caller's;
    /// a root caller's namespace is owned by the initial one). The outer
    /// helper joins them before the clone, and pid 1 inherits the network.
    Shared {
        /// Whether the owning user namespace is passed and joined first.
        userns: bool,
    },
}

/// The isolation mode. Spelled `full` and `landlock-only` (in the spec, a
/// policy file's `degraded` and the command line's `--degraded`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Namespaces, the mount plan, Landlock, seccomp.
    #[default]
    Full,
    /// For hosts that block user namespaces (Ubuntu's AppArmor restriction):
    /// no namespaces and no mount plan; Landlock restricts reads and writes
    /// to the planned paths, seccomp applies, IPv4/IPv6 sockets are refused
    /// when there is no network, and the command's process tree is killed
    /// by the cgroup or by a child-subreaper sweep. Only for unprivileged
    /// callers, and only with Landlock ABI 6 (signal scoping protects the
    /// sweeping process).
    LandlockOnly,
}

impl Mode {
    /// Every mode.
    pub const ALL: &'static [Mode] = &[Mode::Full, Mode::LandlockOnly];
    /// The modes a caller may opt into by name (`--degraded`, a policy's
    /// `degraded`): every mode but [`Mode::Full`].
    pub const DEGRADED: &'static [Mode] = &[Mode::LandlockOnly];

    /// The mode's name, as serde spells it.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Full => "full",
            Mode::LandlockOnly => "landlock-only",
        }
    }

    /// One line on what the mode keeps, for help texts.
    pub fn summary(self) -> &'static str {
        match self {
            Mode::Full => "namespaces, the mount plan, Landlock and seccomp",
            Mode::LandlockOnly => {
                "No namespaces (hosts that block user namespaces): Landlock limits reads and writes, seccomp \
                 applies, the tree is swept at the end"
            }
        }
    }

    /// The degraded mode called `name` (one of [`Mode::DEGRADED`]); the
    /// error lists the accepted names.
    pub fn degraded(name: &str) -> Result<Mode, UnknownName> {
        lookup(name, "degraded mode", Mode::DEGRADED, |m| m.name())
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mode {
    type Err = UnknownName;

    /// Any mode by name (`full`, `landlock-only`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        lookup(s, "mode", Mode::ALL, |m| m.name())
    }
}

impl Network {
    /// Every network setting.
    pub const ALL: &'static [Network] = &[Network::None, Network::Host];

    /// The setting's name, as serde spells it.
    pub fn name(self) -> &'static str {
        match self {
            Network::None => "none",
            Network::Host => "host",
        }
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Network {
    type Err = UnknownName;

    /// `none` or `host`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        lookup(s, "network setting", Network::ALL, |n| n.name())
    }
}

/// A name that is none of the accepted ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownName {
    /// What was being named (`network setting`, `degraded mode`).
    pub what: &'static str,
    /// The name given.
    pub given: String,
    /// The accepted names.
    pub accepted: Vec<&'static str>,
}

impl fmt::Display for UnknownName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let accepted: Vec<String> = self.accepted.iter().map(|a| format!("`{a}`")).collect();
        write!(f, "unknown {} `{}`, expected {}", self.what, self.given, accepted.join(" or "))
    }
}

impl std::error::Error for UnknownName {}

fn lookup<T: Copy>(s: &str, what: &'static str, all: &[T], name: fn(T) -> &'static str) -> Result<T, UnknownName> {
    all.iter().copied().find(|v| name(*v) == s).ok_or_else(|| UnknownName {
        what,
        given: s.to_string(),
        accepted: all.iter().map(|v| name(*v)).collect(),
    })
}

/// The sandbox's single-id user namespace mapping.
///
/// An unprivileged caller maps to itself, so files keep their real owner. A
/// root caller is mapped to an unprivileged host id (`nobody`) — its command
/// must never hold host root's power over root-owned files — and the binds
/// marked `idmap` are idmapped so that root-owned files there appear owned by
/// the command (and files it creates land as root on disk).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Identity {
    /// The uid inside the sandbox.
    pub inside_uid: u32,
    /// The gid inside the sandbox.
    pub inside_gid: u32,
    /// The host uid it maps to.
    pub outside_uid: u32,
    /// The host gid it maps to.
    pub outside_gid: u32,
}

/// Network isolation of the sandbox. Spelled `none` and `host` (in the
/// spec, a policy file's `network` and the command line's `--network`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Network {
    /// A private network namespace holding only a loopback interface (the
    /// default).
    #[default]
    None,
    /// The host's network namespace.
    Host,
}

/// One step of the mount plan. Destinations are absolute paths inside the
/// sandbox; sources are absolute, resolved host paths.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "kebab-case", deny_unknown_fields)]
pub enum MountOp {
    /// Bind the host path `src` (with every mount below it) at `dst`,
    /// read-only unless `writable`. Always `nosuid,nodev`. With `idmap`
    /// (root callers only), files owned by host root appear owned by the
    /// sandbox's uid 0 there, i.e. by the command.
    Bind {
        #[serde(with = "bytes")]
        src: Bytes,
        #[serde(with = "bytes")]
        dst: Bytes,
        writable: bool,
        #[serde(default)]
        idmap: bool,
    },
    /// A fresh tmpfs at `dst` (`/tmp`, `/dev/shm`).
    Tmpfs {
        #[serde(with = "bytes")]
        dst: Bytes,
        mode: u32,
        size: u64,
    },
    /// A fresh procfs for the sandbox's pid namespace, with the kernel knobs
    /// read-only and the information leaks masked.
    Proc {
        #[serde(with = "bytes")]
        dst: Bytes,
    },
    /// A private devpts instance, with `/dev/ptmx` pointing into it.
    Devpts {
        #[serde(with = "bytes")]
        dst: Bytes,
    },
    /// A symbolic link at `dst` (on the sandbox's own root tmpfs).
    Symlink {
        #[serde(with = "bytes")]
        target: Bytes,
        #[serde(with = "bytes")]
        dst: Bytes,
    },
    /// Make an existing path read-only again inside a writable area (a
    /// protected carve-out such as `.git/hooks`).
    ReadOnly {
        #[serde(with = "bytes")]
        dst: Bytes,
        /// A name kept read-only because of what the plan's walk found
        /// there (a hard link out of the area, a privileged program): gone
        /// by now, it needs no mount (nothing of it is left to write
        /// through), and its absence is not an error. A protected
        /// carve-out's absence is.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        if_there: bool,
    },
    /// Hide an existing path: an empty, unreadable file or directory is
    /// mounted over it.
    Mask {
        #[serde(with = "bytes")]
        dst: Bytes,
    },
    /// Bind an existing directory onto itself, keeping its writability, so
    /// that it becomes a mount point: it can then be neither renamed nor
    /// removed (`EBUSY`). Used for the parents of protected paths, so that
    /// `mv .git .git-old` cannot carry the read-only hooks away.
    Pin {
        #[serde(with = "bytes")]
        dst: Bytes,
    },
}

impl MountOp {
    /// A bind made through an idmapped tree (a root caller's binds): the
    /// ones whose trees are made outside the sandbox and sent with the spec.
    pub fn is_idmapped(&self) -> bool {
        matches!(self, MountOp::Bind { idmap: true, .. })
    }

    /// The destination path inside the sandbox.
    pub fn dst(&self) -> &[u8] {
        match self {
            MountOp::Bind { dst, .. }
            | MountOp::Tmpfs { dst, .. }
            | MountOp::Proc { dst }
            | MountOp::Devpts { dst }
            | MountOp::Symlink { dst, .. }
            | MountOp::ReadOnly { dst, .. }
            | MountOp::Mask { dst }
            | MountOp::Pin { dst } => dst,
        }
    }
}

/// The Landlock layer: writes are allowed only beneath `writable`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LandlockSpec {
    /// Paths inside the sandbox beneath which writing is allowed.
    #[serde(with = "bytes::list")]
    pub writable: Vec<Bytes>,
    /// Entries of a write grant whose rule was split around a read-only
    /// area beneath it: writable like `writable`, but each is opened without
    /// following any symbolic link, and one gone (or replaced by a link)
    /// since the plan is skipped rather than refused.
    #[serde(default, with = "bytes::list")]
    pub writable_entries: Vec<Bytes>,
    /// Refuse to run when the kernel cannot enforce the write rules.
    pub required: bool,
    /// Deny every TCP bind and connect (ABI 4 and later).
    pub deny_tcp: bool,
    /// Scope abstract unix sockets and signals to the sandbox (ABI 6).
    pub scope: bool,
    /// When not empty, reads are restricted too: allowed only beneath these
    /// paths (and the writable ones). Used when there is no mount plan.
    #[serde(default, with = "bytes::list")]
    pub readable: Vec<Bytes>,
    /// The only paths beneath which a unix socket may be made (`bind` to a
    /// path, `mknod` of a socket): the sandbox's private tmpfs mounts. The
    /// `writable` paths get every write right but this one, so no run can
    /// leave a socket where another, concurrent run can `connect` to it and
    /// be handed descriptors (Landlock cannot restrict `connect`). Empty: no
    /// socket anywhere.
    #[serde(default, with = "bytes::list")]
    pub sockets: Vec<Bytes>,
    /// Handle the `Truncate` right (ABI 3): the landlock-only mode, where
    /// Landlock is the only barrier for files. The full sandbox leaves it
    /// to the read-only mounts (and `open(O_RDONLY | O_TRUNC)` to seccomp),
    /// because handling it makes every `open`, reads included, walk from
    /// the file to the root (docs/sandbox.md, "Landlock").
    #[serde(default = "handle_truncate")]
    pub truncate: bool,
}

fn handle_truncate() -> bool {
    true
}

/// A resource limit, set with `setrlimit` just before exec.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rlimit {
    /// Which limit.
    pub resource: RlimitKind,
    /// Soft and hard value.
    pub value: u64,
}

/// The resource limits the spec may set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RlimitKind {
    /// Processes of the sandbox's user (counted per user namespace, so per
    /// sandbox): the fallback for a missing `pids` controller.
    Nproc,
    /// Address space per process: the fallback for a missing `memory`
    /// controller.
    As,
    /// Core dump size.
    Core,
    /// Open files.
    Nofile,
}

/// Test-only switches; see [`SpawnSpec::test_switches`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TestSwitches {
    /// Leave every bind writable (the mount barrier is broken).
    #[serde(default)]
    pub skip_readonly: bool,
    /// Do not install Landlock (the Landlock barrier is broken).
    #[serde(default)]
    pub skip_landlock: bool,
    /// Do not install the main seccomp filter (the refused-write observer's
    /// is unaffected): measures what the filter costs, and proves what the
    /// other layers refuse without it.
    #[serde(default)]
    pub skip_seccomp: bool,
    /// Make the library's git guard fail as on an append-only directory
    /// (its quarantine rename gets `EPERM`): the run must fail closed.
    #[serde(default)]
    pub fail_git_guard: bool,
    /// A pre-made sandbox pivots into its root at its request, not ahead,
    /// as it does on kernels that cannot clone mounts from a detached tree
    /// (before Linux 6.15): tests that path on a kernel that can.
    #[serde(default)]
    pub slot_pivot_late: bool,
}

impl TestSwitches {
    /// Whether any switch is set.
    pub fn any(&self) -> bool {
        self.skip_readonly || self.skip_landlock || self.skip_seccomp || self.fail_git_guard || self.slot_pivot_late
    }
}

/// What a pre-made sandbox (a pool slot) is built from before any request:
/// everything of a [`SpawnSpec`] that does not depend on the command. The
/// helper started with `--slot` reads one of these, builds the sandbox up to
/// the request's own mounts, and then waits for the [`SpawnSpec`] of the one
/// command it will ever run; [`SlotSpec::admits`] decides (in the library,
/// which picks the slot, and again in the helper, which enforces it) whether
/// that spec yields exactly the sandbox a fresh helper would build.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlotSpec {
    /// Must equal [`SPEC_VERSION`].
    pub version: u32,
    /// Who the command will be.
    pub identity: Identity,
    /// Network isolation.
    pub network: Network,
    /// With [`Network::None`]: a private namespace made for the slot, or
    /// the workspace's, joined before the clone (its fds passed as for a
    /// run, [`crate::NETNS_FD`], [`crate::USERNS_FD`]).
    #[serde(default)]
    pub netns: Netns,
    /// The mounts made ahead, in order: the system binds, the private
    /// `/tmp`, `/proc`, `/dev` (the ops of the plan that no request changes).
    pub mounts: Vec<MountOp>,
    /// Whether a cgroup directory fd is passed on [`crate::CGROUP_FD`].
    pub cgroup: bool,
    /// As [`SpawnSpec::test_switches`].
    #[serde(default)]
    pub test_switches: TestSwitches,
}

/// Where a slot attaches its root while it is built: on top of `/`, which
/// shadows no absolute path of the host (a lookup starts below the mount
/// stacked on the root), so the request's sources, opened after the root
/// exists, are still the host's.
pub const SLOT_ATTACH: &[u8] = b"/";

/// Why a spec does not fit a slot (then it is run by a fresh helper).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Misfit {
    /// The version, identity, network, mode, cgroup or test switches differ.
    Settings,
    /// The slot's mounts are not all in the spec, in the same order.
    Mounts,
    /// A mount of the request would come before a related mount of the
    /// slot's (one's destination contains the other's), so building the
    /// slot's first would change the result.
    Order,
    /// A bind of the request covers the slot's attach point.
    Attach,
}

impl fmt::Display for Misfit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Misfit::Settings => "its settings (identity, network, mode, cgroup) differ from the slot's",
            Misfit::Mounts => "it lacks a mount the slot made ahead",
            Misfit::Order => "one of its own mounts must come before one the slot made ahead",
            Misfit::Attach => "it binds the slot's attach point",
        })
    }
}

/// The largest [`Request`] the library sends a prepared slot inside its
/// message (`X`, the JSON after the tag); a larger one goes in a memfd
/// (`x`). Inline saves the memfd's four calls on the library's side and
/// the read on the slot's, on the request's path. A `SOCK_SEQPACKET`
/// message this size fits the kernel's default socket buffer (208 KiB); on
/// a host that set a smaller one the send fails with `EMSGSIZE`, nothing
/// sent, and the library sends the memfd instead.
pub const INLINE_REQUEST_MAX: usize = 32 * 1024;

/// What a prepared slot still needs at the request: the command, its
/// environment and its working directory. Everything else of the run's
/// spec is the shape the slot was prepared for ([`SpawnSpec::same_shape`]),
/// which the library checks before it sends this.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// Must equal [`SPEC_VERSION`].
    pub version: u32,
    /// As [`SpawnSpec::argv`].
    #[serde(with = "bytes::list")]
    pub argv: Vec<Bytes>,
    /// As [`SpawnSpec::env`].
    #[serde(with = "bytes::list")]
    pub env: Vec<Bytes>,
    /// As [`SpawnSpec::cwd`].
    #[serde(with = "bytes")]
    pub cwd: Bytes,
}

impl SpawnSpec {
    /// Whether `other` builds the same sandbox as this spec: every field
    /// but the command, its environment and its working directory equal.
    /// A slot prepared for one runs the other's command unchanged.
    pub fn same_shape(&self, other: &SpawnSpec) -> bool {
        let SpawnSpec {
            version,
            argv: _,
            env: _,
            cwd: _,
            identity,
            network,
            mounts,
            landlock,
            rlimits,
            cgroup,
            test_switches,
            mode,
            observe,
            netns,
        } = self;
        *version == other.version
            && *identity == other.identity
            && *network == other.network
            && *mounts == other.mounts
            && *landlock == other.landlock
            && *rlimits == other.rlimits
            && *cgroup == other.cgroup
            && *test_switches == other.test_switches
            && *mode == other.mode
            && *observe == other.observe
            && *netns == other.netns
    }

    /// This spec's command, environment and working directory.
    pub fn request(&self) -> Request {
        Request { version: self.version, argv: self.argv.clone(), env: self.env.clone(), cwd: self.cwd.clone() }
    }
}

/// Whether `a` is `b`, or lies beneath it (paths as the plan writes them).
pub fn beneath(a: &[u8], b: &[u8]) -> bool {
    let b = b.strip_suffix(b"/").unwrap_or(b);
    a == b || b.is_empty() || (a.starts_with(b) && a.get(b.len()) == Some(&b'/'))
}

impl SlotSpec {
    /// The indexes of `spec.mounts` that are the request's own (all but the
    /// slot's, which the slot has made), when the slot builds exactly the
    /// sandbox `spec` describes.
    pub fn admits(&self, spec: &SpawnSpec) -> Result<Vec<usize>, Misfit> {
        if spec.version != self.version
            || spec.identity != self.identity
            || spec.network != self.network
            || spec.netns != self.netns
            || spec.mode != Mode::Full
            || spec.cgroup != self.cgroup
            || spec.test_switches != self.test_switches
        {
            return Err(Misfit::Settings);
        }
        let (mut own, mut made) = (Vec::new(), Vec::new());
        let mut next = self.mounts.iter().peekable();
        for (i, op) in spec.mounts.iter().enumerate() {
            if next.peek() == Some(&op) {
                next.next();
                made.push(i);
            } else {
                own.push(i);
            }
        }
        if next.peek().is_some() {
            return Err(Misfit::Mounts);
        }
        for &r in &own {
            let rd = spec.mounts[r].dst();
            if made.iter().any(|&m| m > r && (beneath(spec.mounts[m].dst(), rd) || beneath(rd, spec.mounts[m].dst()))) {
                return Err(Misfit::Order);
            }
            if let MountOp::Bind { src, .. } = &spec.mounts[r] {
                if beneath(SLOT_ATTACH, src) {
                    return Err(Misfit::Attach);
                }
            }
        }
        Ok(own)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn json<T: Serialize>(v: T) -> String {
        serde_json::to_string(&v).unwrap_or_default()
    }

    fn bind(src: &str, dst: &str) -> MountOp {
        MountOp::Bind { src: src.into(), dst: dst.into(), writable: false, idmap: false }
    }

    fn tmpfs(dst: &str) -> MountOp {
        MountOp::Tmpfs { dst: dst.into(), mode: 0o1777, size: 1 << 20 }
    }

    fn spec(mounts: Vec<MountOp>) -> SpawnSpec {
        SpawnSpec {
            version: SPEC_VERSION,
            argv: vec![b"true".to_vec()],
            env: Vec::new(),
            cwd: b"/".to_vec(),
            identity: Identity { inside_uid: 1000, inside_gid: 1000, outside_uid: 1000, outside_gid: 1000 },
            network: Network::None,
            mounts,
            landlock: LandlockSpec {
                writable: Vec::new(),
                writable_entries: Vec::new(),
                required: true,
                deny_tcp: true,
                scope: true,
                readable: Vec::new(),
                sockets: Vec::new(),
                truncate: false,
            },
            rlimits: Vec::new(),
            cgroup: false,
            test_switches: TestSwitches::default(),
            mode: Mode::Full,
            observe: false,
            netns: Netns::Private,
        }
    }

    fn slot(mounts: Vec<MountOp>) -> SlotSpec {
        let s = spec(Vec::new());
        SlotSpec {
            version: SPEC_VERSION,
            identity: s.identity,
            network: s.network,
            netns: Netns::Private,
            mounts,
            cgroup: false,
            test_switches: TestSwitches::default(),
        }
    }

    #[test]
    fn a_slot_admits_a_spec_whose_own_mounts_come_after_related_ones() {
        let base = slot(vec![bind("/usr", "/usr"), tmpfs("/tmp"), MountOp::Proc { dst: b"/proc".to_vec() }]);
        let full = spec(vec![
            bind("/usr", "/usr"),
            tmpfs("/tmp"),
            bind("/tmp/ws", "/tmp/ws"),
            MountOp::Proc { dst: b"/proc".to_vec() },
            MountOp::Mask { dst: b"/tmp/ws/.env".to_vec() },
        ]);
        assert_eq!(base.admits(&full), Ok(vec![2, 4]));
    }

    #[test]
    fn a_slot_refuses_what_it_would_build_differently() {
        let base = slot(vec![bind("/usr", "/usr"), tmpfs("/tmp")]);
        // A mount of the slot's missing (the host's /tmp instead).
        assert_eq!(base.admits(&spec(vec![bind("/usr", "/usr"), bind("/tmp", "/tmp")])), Err(Misfit::Mounts));
        // Out of order.
        assert_eq!(base.admits(&spec(vec![tmpfs("/tmp"), bind("/usr", "/usr")])), Err(Misfit::Mounts));
        // An own mount below which the slot's would land first.
        let ws_over_tmp = spec(vec![bind("/usr", "/usr"), bind("/x", "/tmp"), tmpfs("/tmp")]);
        assert_eq!(base.admits(&ws_over_tmp), Err(Misfit::Order));
        // Other settings.
        let mut other = spec(vec![bind("/usr", "/usr"), tmpfs("/tmp")]);
        other.network = Network::Host;
        assert_eq!(base.admits(&other), Err(Misfit::Settings));
        let mut degraded = spec(vec![bind("/usr", "/usr"), tmpfs("/tmp")]);
        degraded.mode = Mode::LandlockOnly;
        assert_eq!(base.admits(&degraded), Err(Misfit::Settings));
        // A bind of the whole host would carry the slot's root along.
        let whole = spec(vec![bind("/usr", "/usr"), tmpfs("/tmp"), bind("/", "/host")]);
        assert_eq!(base.admits(&whole), Err(Misfit::Attach));
    }

    #[test]
    fn names_are_the_serde_spellings_and_parse_back() {
        for m in Mode::ALL {
            assert_eq!(json(m), format!("\"{}\"", m.name()));
            assert_eq!(m.name().parse::<Mode>(), Ok(*m));
        }
        for n in Network::ALL {
            assert_eq!(json(n), format!("\"{}\"", n.name()));
            assert_eq!(n.name().parse::<Network>(), Ok(*n));
        }
        assert_eq!(Mode::degraded("landlock-only"), Ok(Mode::LandlockOnly));
    }

    #[test]
    fn unknown_names_list_the_accepted_ones() {
        let e = Mode::degraded("full").err().map(|e| e.to_string());
        assert_eq!(e.as_deref(), Some("unknown degraded mode `full`, expected `landlock-only`"));
        let e = "bogus".parse::<Network>().err().map(|e| e.to_string());
        assert_eq!(e.as_deref(), Some("unknown network setting `bogus`, expected `none` or `host`"));
    }

    /// Every byte string of a spec survives the trip: UTF-8 ones as JSON
    /// strings (escapes included), others as arrays of their bytes; a
    /// spec written with arrays throughout (version 1's form) still reads.
    #[test]
    fn byte_strings_are_strings_where_they_can_be_and_survive_the_trip() {
        let odd: Vec<u8> = vec![b'/', b'w', 0xff, 0xfe, b'"', b'\\', 0x01, b'\n', b'x'];
        let mut s = spec(vec![
            MountOp::Bind { src: odd.clone(), dst: b"/ws".to_vec(), writable: true, idmap: true },
            MountOp::Symlink { target: b"usr/bin".to_vec(), dst: b"/bin".to_vec() },
            MountOp::Mask { dst: "/ws/caf\u{e9} \"q\"\t".as_bytes().to_vec() },
            tmpfs("/tmp"),
        ]);
        s.argv = vec![b"sh".to_vec(), b"-c".to_vec(), vec![0x80, b'a'], Vec::new()];
        s.env = vec![b"PATH=/usr/bin".to_vec(), vec![b'X', b'=', 0xc3]];
        s.cwd = odd.clone();
        s.landlock.writable = vec![b"/tmp".to_vec(), odd.clone()];
        s.landlock.sockets = vec![b"/dev/shm".to_vec()];
        let text = json(&s);
        assert!(text.contains(r#""argv":["sh","-c",[128,97],""]"#), "{text}");
        assert!(text.contains(r#""dst":"/bin""#), "{text}");
        assert!(text.contains(r#""cwd":[47,119,255,254,34,92,1,10,120]"#), "{text}");
        let back: SpawnSpec = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
        assert_eq!(back, s);
        // Arrays everywhere, as version 1 wrote them, read the same.
        let arrays = text
            .replace(r#""sh""#, "[115,104]")
            .replace(r#""/bin""#, "[47,98,105,110]")
            .replace(r#""/tmp""#, "[47,116,109,112]");
        let back: SpawnSpec = serde_json::from_str(&arrays).unwrap_or_else(|e| panic!("{e}: {arrays}"));
        assert_eq!(back, s);
        // Neither a number nor an object is a byte string.
        assert!(serde_json::from_str::<SpawnSpec>(&text.replace(r#""-c""#, "7")).is_err());
        assert!(serde_json::from_str::<SpawnSpec>(&text.replace(r#""/bin""#, "{}")).is_err());
        assert!(serde_json::from_str::<SpawnSpec>(&text.replace("[128,97]", "[128,300]")).is_err());
    }
}
