//! From a request to a plan: every path resolved once, on the trusted side.
//!
//! [`build`] canonicalises the workspace, the readable roots and the write
//! grants, finds the protected carve-outs (`.git/hooks`, `.git/config`, the
//! policy file, worktree `gitdir:` targets), expands the deny globs into the
//! concrete paths to mask, and orders the mount plan so that parents come
//! before children. The result is plain data: the helper's
//! [`SpawnSpec`] plus what `--explain` prints.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use portcullis_helper::spec::{Identity, LandlockSpec, Mode, MountOp, Network, Rlimit, SpawnSpec, SPEC_VERSION};

use super::aliases::AliasCheck;
use super::containment::Containment;
use super::git;
use super::profile::Profile;
use super::{grants, ExecRequest, GrantRefusal, PathRefusal, SandboxError};
use crate::path::glob::{self as deny_glob, MaskError};
use crate::path::{in_areas, lexical, memo, normalize_glob, replaceable_link, touches_system_root, SYSTEM_ROOTS};

/// Device nodes bound from the host into the sandbox's `/dev`.
pub const DEV_NODES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];
/// Carve-outs that stay read-only inside a writable workspace.
pub const DEFAULT_PROTECTED: &[&str] = &[".git/hooks", ".git/config"];
/// The host uid and gid (`nobody`) a root caller's command runs as.
pub const ROOT_RUNS_AS: u32 = 65534;
/// Default size of the private `/tmp`.
pub const TMP_SIZE: u64 = 1 << 30;

/// A resolved, explainable sandbox plan.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// The workspace's real path.
    pub workspace: PathBuf,
    /// Whether the workspace itself is writable.
    pub writable: bool,
    /// Write grants (real paths).
    pub write_grants: Vec<PathBuf>,
    /// Write grants inside the workspace that do not exist yet: each is
    /// created (from the workspace's descriptor, never through a link) just
    /// before the run, once the run holds the workspace.
    pub create_grants: Vec<PathBuf>,
    /// Extra read-only roots (real paths).
    pub read_roots: Vec<PathBuf>,
    /// Paths kept read-only inside writable areas.
    pub protected: Vec<PathBuf>,
    /// Directories between a writable root and a protected path, pinned
    /// (bound onto themselves) so they cannot be renamed or removed to
    /// smuggle in an unprotected replacement (`mv .git .git-old`).
    pub pinned: Vec<PathBuf>,
    /// Paths masked by the deny list.
    pub masked: Vec<PathBuf>,
    /// Names in writable areas of files that also have a name outside them
    /// (read-only, protected, masked, or outside the plan), bound read-only
    /// so that no write reaches the other name (see `sandbox::links`).
    pub hard_linked: Vec<PathBuf>,
    /// Setuid, setgid and file-capability programs in writable areas,
    /// bound read-only: a store through a shared mapping changes a file's
    /// content without clearing its bits (see `sandbox::links`).
    pub privileged: Vec<PathBuf>,
    /// Directories in writable areas that the caller cannot list but the
    /// command can search, masked for the run: the hard-link and privilege
    /// checks cannot see what they hold (see `sandbox::links`).
    pub unlistable: Vec<PathBuf>,
    /// Paths beneath which Landlock allows writing.
    pub landlock_writable: Vec<PathBuf>,
    /// The only paths beneath which Landlock lets the command make a unix
    /// socket: the private `/tmp` and `/dev/shm`, unless a host directory
    /// is bound beneath one (never in landlock-only mode).
    pub landlock_sockets: Vec<PathBuf>,
    /// Read-only areas that lie beneath a Landlock-writable path (a
    /// workspace under `/tmp`, say): Landlock rules are hierarchical, so
    /// there only the read-only mount protects them.
    pub landlock_gaps: Vec<PathBuf>,
    /// Write grants whose Landlock rule was split around the read-only
    /// areas beneath them (the workspace in `--write /srv/data`): rules on
    /// their other entries instead, so that Landlock keeps the narrower rule
    /// too (see `sandbox::split` for what that costs).
    pub landlock_split: Vec<super::split::Split>,
    /// Files that would redirect git (`commondir`, `config.worktree`) and do
    /// not exist yet in a writable git dir: they cannot be mounted over, so
    /// the library makes unreachable any the command creates (see
    /// `ExecResult::warnings`), or fails the run. Spelled as git opens them
    /// (`..` kept): the guard walks them as the kernel would.
    pub git_guard: Vec<PathBuf>,
    /// The git indexes in writable areas, read again after the run: a `.git`
    /// at a gitlink the command added (one the same index did not hold when
    /// the plan read it: `GitIndex::links`) is renamed aside, kept, with a
    /// warning.
    pub git_indexes: Vec<git::GitIndex>,
    /// The working trees (the workspace's and its submodules') whose `.git`
    /// the plan protects or guards.
    pub git_trees: Vec<PathBuf>,
    /// SHA-256 of the compiled seccomp program.
    pub seccomp_sha256: String,
    /// How the run is contained and killed: its cgroup, the kill
    /// mechanism, which mechanism enforces each limit (the spec's `cgroup`
    /// and `rlimits` follow from it).
    pub containment: Containment,
    /// The spec handed to the helper, exactly: the library encodes this and
    /// nothing else (`sandbox::plan_run::r0202_the_plan_is_the_spec_the_helper_receives`).
    pub spec: SpawnSpec,
}

fn bytes(p: &Path) -> Vec<u8> {
    p.as_os_str().as_bytes().to_vec()
}

fn canon(p: &Path, what: &'static str) -> Result<PathBuf, SandboxError> {
    memo::canonicalize(p).map_err(|source| SandboxError::Path { what, path: p.to_path_buf(), source })
}

fn depth(p: &[u8]) -> usize {
    p.split(|b| *b == b'/').filter(|c| !c.is_empty()).count()
}

fn is_within(p: &Path, root: &Path) -> bool {
    p.starts_with(root)
}

/// Build the plan. Does I/O (canonicalisation, the deny walk) but starts
/// nothing. One line per step; each passes plain data to the next.
/// `contained` is how the run is contained (`sandbox::containment`) and
/// the rlimits that go with it.
/// `profile`, when given, supplies what it compiled (see
/// `sandbox::profile`); the plan is the same either way. The host-mount
/// alias check, made while planning, comes back for the run to make again
/// at its start (`None`: the plan has nothing to check). `remember`: the
/// walk of the writable areas remembers files without file capabilities
/// for later plans of this process (`links::read_only_names`).
pub(crate) fn build(
    req: &ExecRequest,
    uid: u32,
    gid: u32,
    contained: (Containment, Vec<Rlimit>),
    profile: Option<&Profile>,
    remember: bool,
) -> Result<(Plan, Option<AliasCheck>), SandboxError> {
    check_request(req)?;
    // The plan's lookups are remembered until it is made (`path::memo`).
    let _memo = memo::scope();
    let at = Resolver::workspace(req)?;
    let mut base = system_mounts();
    let access = resolve_grants(req, &at)?;
    base.push(tmp_mount(req, access.host_tmp)?);
    let remap = uid == 0;
    let read_roots = resolve_read_roots(req, &at, &mut base, remap)?;
    add_sandbox_mounts(&mut base, &at.ws, &access, remap);
    let areas = Areas::of(&at.ws, &access);
    check_followed_links(req, &at.ws, &areas.protect)?;
    let git = protect_git(req, &at.ws, &access, &areas)?;
    let lock_dir = super::lock::dir(uid);
    let masked = deny_masks_for(req, uid, &at.ws, &base, &lock_dir, &read_roots, &access, &areas, profile)?;
    let pinned = pins(&at.ws, &access, &read_roots, &git.protected, &masked, &areas);
    let walk = super::links::Walk { no_mounts: req.degraded == Some(Mode::LandlockOnly), remember };
    let (kept, aliases) = read_only_names(walk, &at.ws, &access, &read_roots, &git.protected, &masked, &areas)?;
    let mounts = mount_plan(base, &git.protected, &kept, &pinned, &masked);
    let cwd = working_directory(req, &at, &read_roots, &access)?;
    let ll = landlock_rules(req, uid, &at.ws, &access, &read_roots, &git.protected, &kept, &lock_dir)?;
    let (spec, seccomp_sha256) = spawn_spec(req, uid, gid, &cwd, mounts, &ll, &contained)?;
    let (containment, _) = contained;
    let super::links::Kept { hard_linked, privileged, unlistable } = kept;
    let plan = Plan {
        workspace: at.ws,
        writable: access.writable,
        write_grants: access.grants,
        create_grants: access.create_grants,
        read_roots,
        protected: git.protected,
        pinned,
        git_guard: git.guard,
        git_indexes: git.indexes,
        git_trees: git.trees,
        masked,
        hard_linked,
        privileged,
        unlistable,
        landlock_writable: ll.writable,
        landlock_sockets: ll.sockets,
        landlock_gaps: ll.gaps,
        landlock_split: ll.split,
        seccomp_sha256,
        containment,
        spec,
    };
    Ok((plan, aliases))
}

/// The request itself: a command, limits in range, no setuid caller.
fn check_request(req: &ExecRequest) -> Result<(), SandboxError> {
    match req.argv.first() {
        None => return Err(SandboxError::EmptyCommand),
        Some(a) if a.is_empty() => {
            return Err(SandboxError::invalid("command", "the command name is empty (`-- ''`); name a program"))
        }
        Some(_) => {}
    }
    let limit = |what: &'static str, r: Result<(), String>| {
        r.map_err(|why| SandboxError::invalid(what, format!("{what}: {why}")))
    };
    if let Some(n) = req.limits.pids {
        limit("the process limit (--pids)", crate::units::check_pids(n))?;
    }
    if let Some(m) = req.limits.memory {
        limit("the memory limit (--memory)", crate::units::check_memory(m))?;
    }
    if let Some(t) = req.timeout {
        limit("the timeout (--timeout)", crate::units::check_timeout(t))?;
    }
    if nix::unistd::getuid() != nix::unistd::geteuid() || nix::unistd::getgid() != nix::unistd::getegid() {
        return Err(SandboxError::invalid(
            "caller",
            "portcullis must not run with differing real and effective ids (setuid or setgid)",
        ));
    }
    Ok(())
}

/// The workspace's real path, and how the request's paths resolve
/// against it.
struct Resolver<'a> {
    /// The workspace as the request names it.
    given: &'a Path,
    /// Its real path.
    ws: PathBuf,
}

impl<'a> Resolver<'a> {
    /// Resolve the workspace: a directory, not `/`.
    fn workspace(req: &'a ExecRequest) -> Result<Resolver<'a>, SandboxError> {
        let ws = canon(&req.workspace, "workspace")?;
        if !memo::is_dir(&ws) {
            return Err(SandboxError::NotADirectory { what: "workspace", path: ws });
        }
        if ws == Path::new("/") {
            return Err(SandboxError::invalid("workspace", "the workspace cannot be /"));
        }
        Ok(Resolver { given: &req.workspace, ws })
    }

    /// A request path: absolute as given, relative to the workspace.
    fn rel(&self, p: &Path) -> PathBuf {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            self.ws.join(p)
        }
    }

    // A path meant to be inside the workspace (relative, or absolute under
    // it) must still be inside once links are resolved: a symlink planted
    // in the workspace must not turn `--write target` into a grant on
    // something else.
    // Stricter still: inside the workspace a path must name itself — no link
    // on the way at all (`target -> .` would otherwise turn `--write target`
    // into a writable workspace).
    /// What a path meant to be inside the workspace names there, lexically
    /// (`None`: an absolute path outside it); refused when its `..` leads out.
    fn named_inside(&self, p: &Path, what: &'static str) -> Result<Option<PathBuf>, SandboxError> {
        let abs = self.rel(p);
        let named = if let Ok(rel) = abs.strip_prefix(self.given) {
            self.ws.join(rel)
        } else if abs.starts_with(&self.ws) {
            abs
        } else {
            return Ok(None);
        };
        let lex = lexical(&named);
        if !lex.starts_with(&self.ws) {
            return Err(SandboxError::PathOutside { what, path: p.to_path_buf(), resolved: lex });
        }
        Ok(Some(named))
    }

    /// The real path of a request path; one meant inside the workspace must
    /// stay inside and name itself.
    fn canon_in(&self, p: &Path, what: &'static str) -> Result<PathBuf, SandboxError> {
        let inside = self.named_inside(p, what)?;
        let real = canon(&self.rel(p), what)?;
        match inside {
            Some(named) if !real.starts_with(&self.ws) => {
                let _ = named;
                Err(SandboxError::PathEscape { what, path: p.to_path_buf(), resolved: real })
            }
            Some(named) if lexical(&named) != real => Err(SandboxError::unsafe_path(
                p.to_path_buf(),
                PathRefusal::ThroughSymlink,
                format!(
                    "{what} {} goes through a symbolic link (to {}); name the real path",
                    p.display(),
                    real.display()
                ),
            )),
            _ => Ok(real),
        }
    }
}

/// The system directories, bound read-only (their links recreated).
fn system_mounts() -> Vec<MountOp> {
    let mut base: Vec<MountOp> = Vec::new();
    for root in SYSTEM_ROOTS {
        let p = Path::new(root);
        let Ok(meta) = memo::symlink_metadata(p) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            if let Ok(t) = memo::read_link(p) {
                base.push(MountOp::Symlink { target: bytes(&t), dst: bytes(p) });
            }
        } else if meta.is_dir() {
            base.push(MountOp::Bind { src: bytes(p), dst: bytes(p), writable: false, idmap: false });
        }
    }
    base
}

/// Whether a pool slot makes `op` ahead (`sandbox::pool`): the system
/// directories (bound read-only, their links recreated), the private `/tmp`
/// and `/dev/shm`, `/proc` and the sandbox's `/dev`. Everything else (the
/// workspace, grants, read roots, carve-outs, masks, the host's `/tmp`)
/// is the request's own.
pub(super) fn made_ahead(op: &MountOp) -> bool {
    let system = |p: &[u8]| SYSTEM_ROOTS.iter().any(|r| r.as_bytes() == p);
    let dev_node = |p: &[u8]| DEV_NODES.iter().any(|n| [b"/dev/", n.as_bytes()].concat() == p);
    match op {
        MountOp::Bind { src, dst, writable: false, idmap: false } => src == dst && system(dst),
        MountOp::Bind { src, dst, writable: true, idmap: false } => src == dst && dev_node(dst),
        MountOp::Bind { .. } => false,
        MountOp::Symlink { dst, .. } => system(dst) || dst.starts_with(b"/dev/"),
        MountOp::Tmpfs { .. } | MountOp::Proc { .. } | MountOp::Devpts { .. } => true,
        MountOp::ReadOnly { .. } | MountOp::Mask { .. } | MountOp::Pin { .. } => false,
    }
}

/// The write access the request asks for, resolved.
struct Access {
    /// The whole workspace is writable.
    writable: bool,
    /// The write grants (real paths; `/tmp` for the host's).
    grants: Vec<PathBuf>,
    /// Grants inside the workspace still to be created.
    create_grants: Vec<PathBuf>,
    /// The host's `/tmp` is granted.
    host_tmp: bool,
}

/// Resolve the write grants.
fn resolve_grants(req: &ExecRequest, at: &Resolver<'_>) -> Result<Access, SandboxError> {
    let ws = &at.ws;
    let mut writable = req.writable;
    let mut grants: Vec<PathBuf> = Vec::new();
    let mut create_grants: Vec<PathBuf> = Vec::new();
    let mut host_tmp = false;
    for g in &req.write {
        let abs = at.rel(g);
        if abs == Path::new("/tmp") {
            // A workspace (or a read root) beneath it stays read-only: the
            // narrower rule wins (its own bind lies over the host's /tmp).
            host_tmp = true;
            grants.push(canon(&abs, "write grant")?);
            continue;
        }
        let real = match at.canon_in(g, "write grant") {
            Ok(real) => real,
            Err(SandboxError::Path { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                // Missing: created before the run when it lies inside the
                // workspace and is named plainly (no `..`, no link on the way).
                let Some(named) = at.named_inside(g, "write grant")? else {
                    return Err(SandboxError::MissingGrant { path: g.clone() });
                };
                let rel = named.strip_prefix(ws).unwrap_or(&named).to_path_buf();
                if rel.components().any(|c| !matches!(c, std::path::Component::Normal(_))) {
                    return Err(SandboxError::grant_refused(
                        g.to_path_buf(),
                        GrantRefusal::NamedThroughDotDot,
                        format!(
                        "write grant {} does not exist, and it is named through `..`: name the directory to create \
                         plainly (e.g. target/debug)",
                        g.display()
                    ),
                    ));
                }
                match grants::missing(ws, &rel) {
                    Ok(true) => {}
                    Ok(false) => {
                        return Err(SandboxError::grant_refused(
                            g.to_path_buf(),
                            GrantRefusal::Changed,
                            format!("write grant {} changed while it was being planned; try again", g.display()),
                        ))
                    }
                    Err(source) => return Err(SandboxError::CreateGrant { path: named, source }),
                }
                let full = ws.join(&rel);
                if !create_grants.contains(&full) {
                    create_grants.push(full.clone());
                }
                full
            }
            Err(e) => return Err(e),
        };
        if real == *ws {
            writable = true;
            continue;
        }
        // A grant that contains the workspace (or a read root) leaves it as
        // the request says: the narrower rule wins, in the mounts (the
        // workspace's bind lies over the grant's) and, where it can, in
        // Landlock (see `split`).
        if real == Path::new("/") {
            return Err(SandboxError::grant_refused(
                real.clone(),
                GrantRefusal::WholeHost,
                "write grant / would make every host directory writable; grant narrower paths",
            ));
        }
        // The sandbox makes its own /dev (a private /dev/shm and devpts, a
        // few device nodes) and /proc: a host path there would be mounted
        // under them, so its grant would silently do nothing.
        if ["/dev", "/proc", "/sys"].iter().any(|r| real.starts_with(r)) && !is_within(&real, ws) {
            return Err(SandboxError::grant_refused(
                real.clone(),
                GrantRefusal::KernelFilesystem,
                format!(
                    "write grant {}: the sandbox has its own /dev (a private /dev/shm), /proc and no /sys, so a host \
                 path there cannot be granted; share files through the workspace, a grant elsewhere or --write /tmp",
                    real.display()
                ),
            ));
        }
        if touches_system_root(&real) && !is_within(&real, ws) {
            return Err(SandboxError::grant_refused(
                real.clone(),
                GrantRefusal::SystemDirectory,
                format!("write grant {} touches a system directory", real.display()),
            ));
        }
        if !grants.contains(&real) {
            grants.push(real);
        }
    }

    Ok(Access { writable, grants, create_grants, host_tmp })
}

/// The private (or host) /tmp.
fn tmp_mount(req: &ExecRequest, host_tmp: bool) -> Result<MountOp, SandboxError> {
    Ok(if host_tmp {
        let real = canon(Path::new("/tmp"), "write grant")?;
        MountOp::Bind { src: bytes(&real), dst: b"/tmp".to_vec(), writable: true, idmap: false }
    } else {
        MountOp::Tmpfs {
            dst: b"/tmp".to_vec(),
            mode: 0o1777,
            size: req.limits.memory.unwrap_or(TMP_SIZE).min(TMP_SIZE),
        }
    })
}

/// Extra readable roots, bound read-only. A root caller's command runs as
/// host `nobody`; its workspace, grants and readable roots are idmapped so
/// that root-owned files there are its own (and the helper opens them as
/// host root, on the host side).
fn resolve_read_roots(
    req: &ExecRequest,
    at: &Resolver<'_>,
    base: &mut Vec<MountOp>,
    remap: bool,
) -> Result<Vec<PathBuf>, SandboxError> {
    let ws = &at.ws;
    let (run_uid, run_gid) = (ROOT_RUNS_AS, ROOT_RUNS_AS);
    let mut read_roots = Vec::new();
    for r in &req.read {
        let real = at.canon_in(r, "readable root").map_err(|e| match e {
            SandboxError::Path { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                SandboxError::MissingReadRoot { path: r.clone() }
            }
            e => e,
        })?;
        if is_within(&real, ws) || real == Path::new("/") {
            continue;
        }
        // Exact for a root caller (no supplementary groups, no capabilities);
        // an unprivileged caller's own groups also count, so its reads are
        // left to the kernel.
        if remap && !degraded_req(req) {
            super::roots::check_readable(&real, base, remap, run_uid, run_gid)?;
        }
        base.push(MountOp::Bind { src: bytes(&real), dst: bytes(&real), writable: false, idmap: remap });
        read_roots.push(real);
    }
    Ok(read_roots)
}

/// The workspace, the grants, /proc and a minimal /dev; then parents before
/// children.
fn add_sandbox_mounts(base: &mut Vec<MountOp>, ws: &Path, access: &Access, remap: bool) {
    let (writable, grants) = (access.writable, &access.grants);
    base.push(MountOp::Bind { src: bytes(ws), dst: bytes(ws), writable, idmap: remap });
    for g in grants.iter().filter(|g| g.as_path() != Path::new("/tmp")) {
        base.push(MountOp::Bind { src: bytes(g), dst: bytes(g), writable: true, idmap: remap });
    }

    // /proc and a minimal /dev.
    base.push(MountOp::Proc { dst: b"/proc".to_vec() });
    for n in DEV_NODES {
        let host = Path::new("/dev").join(n);
        if memo::exists(&host) {
            base.push(MountOp::Bind { src: bytes(&host), dst: bytes(&host), writable: true, idmap: false });
        }
    }
    base.push(MountOp::Devpts { dst: b"/dev/pts".to_vec() });
    base.push(MountOp::Symlink { target: b"pts/ptmx".to_vec(), dst: b"/dev/ptmx".to_vec() });
    base.push(MountOp::Tmpfs { dst: b"/dev/shm".to_vec(), mode: 0o1777, size: 64 << 20 });
    base.push(MountOp::Symlink { target: b"/proc/self/fd".to_vec(), dst: b"/dev/fd".to_vec() });
    for (i, n) in ["stdin", "stdout", "stderr"].iter().enumerate() {
        base.push(MountOp::Symlink {
            target: format!("/proc/self/fd/{i}").into_bytes(),
            dst: format!("/dev/{n}").into_bytes(),
        });
    }
    // Parents before children; the sort is stable, so equal depths keep
    // their order (system, /tmp, read roots, workspace, grants).
    base.sort_by_key(|op| depth(op.dst()));
}

/// The writable areas: where carve-outs are needed.
struct Areas {
    /// The writable workspace and the grants but the host's `/tmp`.
    writable: Vec<PathBuf>,
    /// Those and the host's `/tmp` when granted.
    protect: Vec<PathBuf>,
}

impl Areas {
    fn of(ws: &Path, access: &Access) -> Areas {
        let (writable, grants) = (access.writable, &access.grants);
        // Protected carve-outs, only where something is writable.
        let writable_areas: Vec<PathBuf> = if writable { vec![ws.to_path_buf()] } else { Vec::new() }
            .into_iter()
            .chain(grants.iter().filter(|g| g.as_path() != Path::new("/tmp")).cloned())
            .collect();
        // protected path there needs its carve-out as much as one in a grant.
        let protect_areas: Vec<PathBuf> = writable_areas
            .iter()
            .cloned()
            .chain(grants.iter().filter(|g| g.as_path() == Path::new("/tmp")).cloned())
            .collect();
        Areas { writable: writable_areas, protect: protect_areas }
    }
}

/// A path the next run will follow again (the workspace, a readable root,
/// a grant, the working directory, a protected path, the policy file) must
/// not go through a symbolic link this run could replace: one that sits in
/// a writable area.
fn check_followed_links(req: &ExecRequest, ws: &Path, protect_areas: &[PathBuf]) -> Result<(), SandboxError> {
    let named = std::iter::once((&req.workspace, "workspace"))
        .chain(req.read.iter().map(|p| (p, "readable root")))
        .chain(req.write.iter().filter(|p| p.is_absolute()).map(|p| (p, "write grant")))
        .chain(req.cwd.iter().map(|p| (p, "working directory")))
        .chain(req.protect.iter().map(|p| (p, "protected path")))
        .chain(req.policy_file.iter().map(|p| (p, "policy file")));
    for (p, what) in named {
        let abs = if p.is_absolute() { p.clone() } else { ws.join(p) };
        if let Some(link) = replaceable_link(&abs, protect_areas) {
            return Err(SandboxError::unsafe_path(
                p.to_path_buf(),
                PathRefusal::ReplaceableLink,
                format!(
                    "the {what} {} is reached through the symbolic link {} in a writable area, which the command \
                 could replace; name the real path",
                    p.display(),
                    link.display()
                ),
            ));
        }
    }
    Ok(())
}

/// What git discovery leaves the plan.
struct GitPlan {
    protected: Vec<PathBuf>,
    guard: Vec<PathBuf>,
    indexes: Vec<git::GitIndex>,
    trees: Vec<PathBuf>,
}

/// The real path of `parent`, the directory the workspace `ws` (a real
/// path) is a scope of ([`ExecRequest::scope_of`]), which must hold it.
pub(super) fn scope_parent(ws: &Path, parent: &Path) -> Result<PathBuf, SandboxError> {
    let real = memo::canonicalize(parent).map_err(|source| SandboxError::Path {
        what: "workspace the scope was made from",
        path: parent.to_path_buf(),
        source,
    })?;
    if !ws.starts_with(&real) {
        return Err(SandboxError::invalid(
            "scope_of",
            format!(
                "{} does not hold the workspace {}: a scope is of a directory that holds it (was the scope's path \
                 replaced by a link since it was made? make the scope again)",
                real.display(),
                ws.display()
            ),
        ));
    }
    Ok(real)
}

/// Git discovery, its checks, the protected carve-outs and the git guard.
fn protect_git(req: &ExecRequest, ws: &Path, access: &Access, areas: &Areas) -> Result<GitPlan, SandboxError> {
    let (writable, writable_areas, protect_areas) = (access.writable, &areas.writable, &areas.protect);
    // Only files the command could have planted are judged (and named in
    // the error): ones in the workspace or a writable area.
    // Git paths keep their `..` (spelled as git opens them); containment
    // is judged on their lexical form.
    let ours = |p: &Path| {
        let p = lexical(p);
        p.starts_with(ws) || protect_areas.iter().any(|a| p.starts_with(a))
    };
    // Submodule working trees are looked for (indexes read) only when
    // something is writable: a read-only run has nothing to protect.
    let mut git = git::discover(ws, protect_areas, !protect_areas.is_empty())?;
    // A scope: the git dirs of the workspace it is a scope of too (a
    // submodule inside the scope is found from the parent's index).
    if let Some(parent) = &req.scope_of {
        let parent = scope_parent(ws, parent)?;
        if parent != ws {
            git.merge(git::discover(&parent, protect_areas, !protect_areas.is_empty())?);
        }
    }
    git.check_files(ws, &ours)?;
    git.check_spelled(protect_areas)?;
    let hook_targets = git.hook_link_targets(ws, protect_areas)?;
    let protected = protected_paths(req, ws, protect_areas, &git, &hook_targets)?;
    // Files git would read config or hooks from that do not exist yet (so
    // nothing can be mounted over them): each git dir's redirections, the
    // configured hooksPath and include targets, unpopulated submodules'
    // `.git`, missing hook link targets, and a HEAD at the workspace root
    // (with it, git's bare-repository fallback would make the workspace
    // itself a git dir with a config of the command's choosing).
    let git_guard = git.guard(ws, writable_areas, writable, &hook_targets);
    let git_indexes: Vec<git::GitIndex> = git
        .indexes
        .iter()
        .filter(|i| writable_areas.iter().any(|a| lexical(&i.index).starts_with(a)))
        .cloned()
        .collect();
    let git_trees = git.trees.clone();
    Ok(GitPlan { protected, guard: git_guard, indexes: git_indexes, trees: git_trees })
}

/// The deny list's masks (and the workspace-lock directory's, where a bind
/// shows it), only what the sandbox can see, shallowest first.
#[allow(clippy::too_many_arguments)]
fn deny_masks_for(
    req: &ExecRequest,
    uid: u32,
    ws: &Path,
    base: &[MountOp],
    lock_dir: &Path,
    read_roots: &[PathBuf],
    access: &Access,
    areas: &Areas,
    profile: Option<&Profile>,
) -> Result<Vec<PathBuf>, SandboxError> {
    let (grants, protect_areas) = (&access.grants, &areas.protect);
    // Masks: the deny list.
    // `a//b`, `a/./b` and `./a/` name what `a/b` and `a` name.
    let deny: Vec<String> = req.deny.iter().map(|g| normalize_glob(g)).collect();
    let compiled = profile.and_then(|p| p.deny_globs(&deny_glob::relative_globs(&deny)));
    let deny_glob::Masks { paths: mut masked, links: denied_links } = deny_masks(&deny, compiled, ws)?;
    // A denied link's target is masked, but the link itself could be pointed
    // elsewhere by a writable run, and the next run would mask that instead.
    for l in &denied_links {
        if in_areas(l, protect_areas) {
            return Err(SandboxError::unsafe_path(
                l.to_path_buf(),
                PathRefusal::ReplaceableLink,
                format!(
                    "a deny glob matches the symbolic link {} in a writable area, which the command could point \
                 elsewhere before the next run; deny its target by its real path and remove the link, or run \
                 read-only",
                    l.display()
                ),
            ));
        }
    }
    // The caller's workspace-lock directory must stay out of the command's
    // reach (it could hold the lock and stall every writable run): it lies
    // on a private tmpfs in the sandbox, unless a bind shows the host's.
    // Then it is masked; a bind from inside it is refused.
    if !degraded_req(req) {
        if let Some(view) = lock_view(base, lock_dir)? {
            super::lock::open_dir(uid)?;
            // It may have been made just now: what the plan asked of it
            // before is stale.
            memo::forget(lock_dir);
            memo::forget(&view);
            masked.push(view);
        }
    }
    // Only what the sandbox can see needs (and can get) a mask; and a mask
    // inside a masked directory is already hidden (its mount point would be
    // gone).
    masked.retain(|m| {
        m.starts_with(ws)
            || read_roots.iter().any(|r| m.starts_with(r))
            || grants.iter().any(|g| m.starts_with(g))
            || SYSTEM_ROOTS.iter().any(|r| m.starts_with(r))
    });
    masked.sort();
    masked.dedup();
    let dirs: Vec<PathBuf> = masked.iter().filter(|m| memo::is_dir(m)).cloned().collect();
    masked.retain(|m| !dirs.iter().any(|d| m.starts_with(d) && m != d));
    masked.sort_by_key(|p| depth(p.as_os_str().as_bytes()));
    Ok(masked)
}

/// Pin the parents of protected paths and of masks in writable areas.
fn pins(
    ws: &Path,
    access: &Access,
    read_roots: &[PathBuf],
    protected: &[PathBuf],
    masked: &[PathBuf],
    areas: &Areas,
) -> Vec<PathBuf> {
    let (writable, protect_areas) = (access.writable, &areas.protect);
    // Pin the parents of protected paths and of masks in writable areas:
    // renaming a parent would carry the read-only file or the mask away, and
    // the next run would find the file unprotected under its new name.
    // The same for a read-only workspace or read root beneath a grant (`--write
    // /tmp` for a workspace in /tmp/w/ws): `mv /tmp/w /tmp/old` would
    // otherwise let the command put a workspace of its own where the next
    // run (and the user) will look.
    let beneath_grant = (!writable)
        .then(|| ws.to_path_buf())
        .into_iter()
        .chain(read_roots.iter().cloned())
        .filter(|p| protect_areas.iter().any(|a| p.starts_with(a) && p != a));
    let pin_for: Vec<PathBuf> = protected.iter().chain(masked.iter()).cloned().chain(beneath_grant).collect();
    pinned_ancestors(&pin_for, protect_areas).into_iter().filter(|p| !masked.contains(p)).collect()
}

/// The link walk: names in writable areas kept read-only (hard links,
/// privileged programs) or masked (unlistable directories), after the alias
/// check (which comes back for the run's start).
fn read_only_names(
    walk: super::links::Walk,
    ws: &Path,
    access: &Access,
    read_roots: &[PathBuf],
    protected: &[PathBuf],
    masked: &[PathBuf],
    areas: &Areas,
) -> Result<(super::links::Kept, Option<AliasCheck>), SandboxError> {
    let (writable, create_grants, protect_areas) = (access.writable, &access.create_grants, &areas.protect);
    // Hard links: a writable name of a file that has another name the run
    // may not write.
    // A read-only workspace beneath a grant is not writable either.
    let ro_ws = (!writable).then(|| ws.to_path_buf());
    let not_writable: Vec<PathBuf> =
        protected.iter().chain(masked).chain(read_roots).chain(ro_ws.iter()).cloned().collect();
    // A host mount inside a writable area (or a grant that is one) must not
    // show a read-only area at another path: it would be writable there.
    let system: Vec<PathBuf> = SYSTEM_ROOTS
        .iter()
        .map(PathBuf::from)
        .filter(|p| memo::symlink_metadata(p).is_ok_and(|m| m.is_dir()))
        .collect();
    let kept: Vec<PathBuf> = not_writable.iter().chain(&system).cloned().collect();
    let aliases = AliasCheck::new(protect_areas.clone(), kept);
    if let Some(a) = &aliases {
        a.now()?;
    }
    // A grant still to be created (only `--explain` plans one) holds nothing.
    let walked: Vec<PathBuf> = protect_areas.iter().filter(|a| !create_grants.contains(a)).cloned().collect();
    let names = super::links::read_only_names(&walked, &not_writable, walk)?;
    Ok((names, aliases))
}

/// The mount plan: the base mounts, then the carve-outs (read-only names,
/// pins), then the masks.
fn mount_plan(
    base: Vec<MountOp>,
    protected: &[PathBuf],
    kept: &super::links::Kept,
    pinned: &[PathBuf],
    masked: &[PathBuf],
) -> Vec<MountOp> {
    let super::links::Kept { hard_linked, privileged, unlistable } = kept;
    let mut mounts = base;
    let kept_for_what_it_is = |p: &PathBuf| MountOp::ReadOnly { dst: bytes(p), if_there: true };
    let mut carve: Vec<MountOp> = protected
        .iter()
        .map(|p| MountOp::ReadOnly { dst: bytes(p), if_there: false })
        .chain(hard_linked.iter().chain(privileged).map(kept_for_what_it_is))
        .chain(pinned.iter().map(|p| MountOp::Pin { dst: bytes(p) }))
        .collect();
    carve.sort_by_key(|op| depth(op.dst()));
    mounts.extend(carve);

    // A directory the walk could not list but the command can search is
    // masked too (after the carve-outs, like the deny list's masks). The
    // walk entered no masked directory, so none of these lies in one; a
    // deny mask inside one is already hidden by it.
    for m in masked.iter().filter(|m| !unlistable.iter().any(|u| m.starts_with(u) && m != &u)) {
        mounts.push(MountOp::Mask { dst: bytes(m) });
    }
    for u in unlistable {
        mounts.push(MountOp::Mask { dst: bytes(u) });
    }
    mounts
}

/// The working directory: inside the sandbox's view.
fn working_directory(
    req: &ExecRequest,
    at: &Resolver<'_>,
    read_roots: &[PathBuf],
    access: &Access,
) -> Result<PathBuf, SandboxError> {
    let (ws, grants) = (&at.ws, &access.grants);
    Ok(match &req.cwd {
        Some(c) => {
            let real = at.canon_in(c, "working directory")?;
            if !is_within(&real, ws)
                && !read_roots.iter().any(|r| is_within(&real, r))
                && !grants.iter().any(|g| is_within(&real, g))
            {
                return Err(SandboxError::invalid(
                    "--cwd",
                    format!("working directory {} is outside the sandbox", real.display()),
                ));
            }
            real
        }
        None => ws.clone(),
    })
}

/// What Landlock is told.
struct LandlockRules {
    writable: Vec<PathBuf>,
    split_entries: Vec<PathBuf>,
    split: Vec<super::split::Split>,
    readable: Vec<PathBuf>,
    sockets: Vec<PathBuf>,
    gaps: Vec<PathBuf>,
}

/// The Landlock rules (and, in landlock-only mode, what that mode refuses).
#[allow(clippy::too_many_arguments)]
fn landlock_rules(
    req: &ExecRequest,
    uid: u32,
    ws: &Path,
    access: &Access,
    read_roots: &[PathBuf],
    protected: &[PathBuf],
    kept: &super::links::Kept,
    lock_dir: &Path,
) -> Result<LandlockRules, SandboxError> {
    let (writable, grants, host_tmp) = (access.writable, &access.grants, access.host_tmp);
    let (hard_linked, privileged) = (&kept.hard_linked, &kept.privileged);
    let degraded = req.degraded == Some(Mode::LandlockOnly);
    let mut landlock_writable: Vec<PathBuf> = if degraded {
        // No private /tmp or /dev: the host's device nodes, one by one (a
        // rule on /dev would open the host's /dev/shm), and /tmp only when
        // granted.
        DEV_NODES.iter().map(|n| Path::new("/dev").join(n)).filter(|p| memo::exists(p)).collect()
    } else {
        vec![PathBuf::from("/dev"), PathBuf::from("/tmp")]
    };
    if writable {
        landlock_writable.push(ws.to_path_buf());
    }
    // In the full sandbox /tmp is already in the list (private or host).
    landlock_writable.extend(grants.iter().filter(|g| degraded || g.as_path() != Path::new("/tmp")).cloned());
    landlock_writable.dedup();
    // Unix sockets may be made only on the sandbox's own tmpfs mounts, and
    // not there either when a host directory is bound beneath one (Landlock
    // rules are hierarchical). Everywhere else another run could reach the
    // socket, connect, and be handed this run's descriptors.
    let host_binds: Vec<&Path> = std::iter::once(ws)
        .chain(read_roots.iter().map(PathBuf::as_path))
        .chain(grants.iter().map(PathBuf::as_path))
        .collect();
    let landlock_sockets: Vec<PathBuf> = if degraded {
        Vec::new()
    } else {
        [(!host_tmp).then(|| PathBuf::from("/tmp")), Some(PathBuf::from("/dev/shm"))]
            .into_iter()
            .flatten()
            .filter(|t| !host_binds.iter().any(|b| b.starts_with(t)))
            .collect()
    };
    let mut landlock_readable: Vec<PathBuf> = Vec::new();
    if degraded {
        let ids =
            nix::unistd::getresuid().map_err(|e| SandboxError::Io { stage: "reading the uids", source: e.into() })?;
        // A root caller is welcome (in a container root is the default user
        // and has no user namespaces either); its command stays uid 0 with
        // every capability dropped and the securebits locked. Root ids
        // mixed with unprivileged ones (a setuid start) never run.
        let roots = [ids.real, ids.effective, ids.saved].iter().filter(|u| u.is_root()).count();
        if roots != 0 && (roots != 3 || uid != 0) {
            return Err(SandboxError::unsupported(
                "a mix of root and unprivileged uids",
                "landlock-only mode refuses a mix of root and unprivileged uids (real, effective, saved): \
                 run it as root or as an unprivileged user, not setuid",
            ));
        }
        if crate::sys::landlock_abi() < 6 {
            return Err(SandboxError::LayerUnavailable {
                layer: "Landlock ABI 6",
                hint: format!(
                    "landlock-only mode needs signal scoping (Landlock ABI 6, Linux 6.12); this kernel offers ABI {}",
                    crate::sys::landlock_abi()
                ),
                source: std::io::Error::from_raw_os_error(libc::EOPNOTSUPP),
            });
        }
        if !req.deny.is_empty() {
            return Err(SandboxError::unsupported(
                "deny globs",
                "deny globs need the mount namespace, which landlock-only mode does not have: drop --deny (or the \
                 policy's deny globs), or use the full sandbox where this host allows it (portcullis doctor says)",
            ));
        }
        if !protected.is_empty() {
            return Err(SandboxError::unsupported(
                "protected paths inside a writable area",
                format!(
                    "landlock-only mode cannot keep {} read-only inside a writable area (Landlock can only allow); \
                 grant narrower paths with --write",
                    protected.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        landlock_readable = SYSTEM_ROOTS
            .iter()
            .map(Path::new)
            .filter(|p| memo::symlink_metadata(p).is_ok_and(|m| m.is_dir()))
            .map(Path::to_path_buf)
            // The device nodes one by one, not /dev (other ptys of the user,
            // the host's /dev/shm).
            .chain(DEV_NODES.iter().map(|n| Path::new("/dev").join(n)).filter(|p| memo::exists(p)))
            .chain([ws.to_path_buf(), PathBuf::from("/proc")])
            .chain(read_roots.iter().cloned())
            .collect();
    }

    // The narrower rule wins in Landlock too, where a grant's rule can be
    // split around the read-only areas beneath it (see `split`).
    // Split only around the read-only workspace and read roots: a protected
    // path or a hard-linked name inside `target/` would otherwise cost every
    // new entry there (cargo's); those stay reported gaps.
    let narrower: Vec<PathBuf> =
        (!writable).then(|| ws.to_path_buf()).into_iter().chain(read_roots.iter().cloned()).collect();
    let (whole, landlock_split) = super::split::split(&landlock_writable, grants, &narrower);
    let read_only_areas: Vec<PathBuf> = narrower
        .into_iter()
        .chain(protected.iter().cloned())
        .chain(hard_linked.iter().chain(privileged).cloned())
        .collect();
    landlock_writable = whole;
    let split_entries: Vec<PathBuf> = landlock_split.iter().flat_map(|s| s.entries.iter().cloned()).collect();

    if degraded {
        if let Some(p) = landlock_writable
            .iter()
            .chain(split_entries.iter())
            .chain(landlock_readable.iter())
            .find(|p| lock_dir.starts_with(p) || p.starts_with(lock_dir))
        {
            return Err(SandboxError::unsupported(
                "a grant that holds the workspace-lock directory",
                format!(
                "landlock-only mode would let the command open portcullis's workspace-lock directory {} through {} \
                 (Landlock can only allow), and hold the lock; grant a narrower path",
                lock_dir.display(),
                p.display()
            ),
            ));
        }
    }

    let landlock_gaps: Vec<PathBuf> = read_only_areas
        .into_iter()
        .filter(|a| landlock_writable.iter().chain(split_entries.iter()).any(|w| a.starts_with(w)))
        .collect();
    if degraded && !landlock_gaps.is_empty() {
        return Err(SandboxError::unsupported(
            "read-only areas beneath a writable path",
            format!(
                "landlock-only mode cannot keep {} read-only beneath a writable path (Landlock can only allow): \
                 grant narrower paths with --write, or use the full sandbox",
                landlock_gaps.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", ")
            ),
        ));
    }

    Ok(LandlockRules {
        writable: landlock_writable,
        split_entries,
        split: landlock_split,
        readable: landlock_readable,
        sockets: landlock_sockets,
        gaps: landlock_gaps,
    })
}

/// The spec handed to the helper, and the SHA-256 of its seccomp program.
fn spawn_spec(
    req: &ExecRequest,
    uid: u32,
    gid: u32,
    cwd: &Path,
    mounts: Vec<MountOp>,
    ll: &LandlockRules,
    (containment, rlimits): &(Containment, Vec<Rlimit>),
) -> Result<(SpawnSpec, String), SandboxError> {
    let degraded = req.degraded == Some(Mode::LandlockOnly);
    let remap = uid == 0;
    let env = build_env(req);
    let filter = portcullis_helper::filter::Profile { degraded, network_none: req.network == Network::None };
    let seccomp_sha256 = seccomp_sha256(filter)?;

    let spec = SpawnSpec {
        version: SPEC_VERSION,
        argv: req.argv.iter().map(|a| a.as_bytes().to_vec()).collect(),
        env,
        cwd: bytes(cwd),
        identity: if remap && !degraded {
            Identity { inside_uid: 0, inside_gid: 0, outside_uid: ROOT_RUNS_AS, outside_gid: ROOT_RUNS_AS }
        } else {
            Identity { inside_uid: uid, inside_gid: gid, outside_uid: uid, outside_gid: gid }
        },
        network: req.network,
        mounts: if degraded { Vec::new() } else { mounts },
        landlock: LandlockSpec {
            writable: ll.writable.iter().map(|p| bytes(p)).collect(),
            writable_entries: ll.split_entries.iter().map(|p| bytes(p)).collect(),
            required: true,
            // Only where no network namespace keeps the host's loopback
            // away (the landlock-only mode, where seccomp refuses the
            // sockets too): in the full mode the namespace has nothing but
            // loopback, and the workspace's commands reach each other there.
            deny_tcp: req.network == Network::None && degraded,
            scope: true,
            readable: ll.readable.iter().map(|p| bytes(p)).collect(),
            sockets: ll.sockets.iter().map(|p| bytes(p)).collect(),
            // Landlock's `Truncate` only where it is the only barrier: in the
            // full mode the read-only mounts refuse truncation, seccomp
            // refuses `open(O_RDONLY | O_TRUNC)`, and handling the right
            // would cost every open a walk to the root.
            truncate: degraded,
        },
        rlimits: rlimits.clone(),
        cgroup: containment.cgroup.is_some(),
        test_switches: req.test_switches,
        mode: req.degraded.unwrap_or(Mode::Full),
        observe: req.report_refused_writes,
        // Decided by the sandbox (`network::choose`).
        netns: Default::default(),
    };
    Ok((spec, seccomp_sha256))
}

/// The SHA-256 of the seccomp program the helper installs for `filter`
/// (the helper takes it from the same build; the plan names what it will
/// be): from the table build.rs wrote, or, in a cross build, computed once
/// per process (a pure function of the profile and of this binary).
pub(super) fn seccomp_sha256(filter: portcullis_helper::filter::Profile) -> Result<String, SandboxError> {
    if let Some((_, _, sha)) =
        digests::SECCOMP_SHA256.iter().find(|(d, n, _)| (*d, *n) == (filter.degraded, filter.network_none))
    {
        return Ok((*sha).to_string());
    }
    static COMPUTED: [std::sync::OnceLock<String>; 4] = [const { std::sync::OnceLock::new() }; 4];
    let cell = &COMPUTED[usize::from(filter.degraded) * 2 + usize::from(filter.network_none)];
    if let Some(sha) = cell.get() {
        return Ok(sha.clone());
    }
    let sha = computed_seccomp_sha256(filter)?;
    // Another thread may have set it meanwhile: to the same value.
    Ok(cell.get_or_init(|| sha).clone())
}

mod digests {
    include!(concat!(env!("OUT_DIR"), "/seccomp_digests.rs"));
}

fn computed_seccomp_sha256(filter: portcullis_helper::filter::Profile) -> Result<String, SandboxError> {
    let program = portcullis_helper::filter::compile_for(filter)
        .map_err(|e| SandboxError::BadRequest(format!("seccomp filter: {e}")))?;
    Ok(crate::hex::sha256_hex(&portcullis_helper::filter::program_bytes(&program)))
}

fn degraded_req(req: &ExecRequest) -> bool {
    req.degraded == Some(Mode::LandlockOnly)
}

/// Where the host path `host` shows in a sandbox built from `base` (binds
/// and tmpfs mounts, parents first), or None when no bind shows it or a
/// later mount covers it. A bind whose source lies inside `host` is refused.
fn lock_view(base: &[MountOp], host: &Path) -> Result<Option<PathBuf>, SandboxError> {
    let path = |b: &[u8]| PathBuf::from(std::ffi::OsStr::from_bytes(b));
    let mut view = None;
    for (i, op) in base.iter().enumerate() {
        let MountOp::Bind { src, dst, .. } = op else {
            continue;
        };
        let (src, dst) = (path(src), path(dst));
        if src.starts_with(host) {
            return Err(SandboxError::unsafe_path(
                src.to_path_buf(),
                PathRefusal::LockDirectory,
                format!(
                    "{} lies inside portcullis's workspace-lock directory {}, which no command may see",
                    src.display(),
                    host.display()
                ),
            ));
        }
        let Ok(rest) = host.strip_prefix(&src) else {
            continue;
        };
        let seen = dst.join(rest);
        let covered = base[i + 1..].iter().any(|later| seen.starts_with(path(later.dst())));
        if !covered {
            view = Some(seen);
        }
    }
    Ok(view)
}

/// The command's environment: only what the request lists, plus a default
/// `PATH`.
fn build_env(req: &ExecRequest) -> Vec<Vec<u8>> {
    let mut out: Vec<(OsString, OsString)> = Vec::new();
    for name in &req.inherit_env {
        if let Some(v) = std::env::var_os(name) {
            out.retain(|(k, _)| k != name);
            out.push((name.clone(), v));
        }
    }
    for (k, v) in &req.env {
        out.retain(|(k2, _)| k2 != k);
        out.push((k.clone(), v.clone()));
    }
    if !out.iter().any(|(k, _)| k == "PATH") {
        out.push(("PATH".into(), "/usr/local/bin:/usr/bin:/bin".into()));
    }
    out.into_iter()
        .map(|(k, v)| {
            let mut e = k.into_vec();
            e.push(b'=');
            e.extend(v.into_vec());
            e
        })
        .collect()
}

/// Protected paths inside writable areas: the defaults, the request's own,
/// the policy file, and the hooks/config of a worktree's real git dir.
fn protected_paths(
    req: &ExecRequest,
    ws: &Path,
    writable_areas: &[PathBuf],
    git: &git::Layout,
    hook_targets: &[PathBuf],
) -> Result<Vec<PathBuf>, SandboxError> {
    if writable_areas.is_empty() {
        return Ok(Vec::new());
    }
    // The caller's own --protect paths must exist and contain no symbolic
    // link: a protected link target would leave the link itself replaceable.
    let mut own = Vec::new();
    for p in &req.protect {
        let abs = if p.is_absolute() { p.clone() } else { ws.join(p) };
        let real = canon(&abs, "protected path")?;
        if real != lexical(&abs) {
            return Err(SandboxError::unsafe_path(
                p.to_path_buf(),
                PathRefusal::ThroughSymlink,
                format!(
                    "protected path {} goes through a symbolic link (to {}); protect the real path",
                    p.display(),
                    real.display()
                ),
            ));
        }
        // Never dropped in silence: a protected path that is (or holds) a
        // writable root would make the grant read-only.
        if let Some(root) = writable_areas.iter().find(|a| a.starts_with(&real)) {
            let fix = if root.as_path() == ws { "drop --writable instead" } else { "drop the grant instead" };
            return Err(SandboxError::invalid(
                "--protect",
                if *root == real {
                    format!(
                        "protecting the writable root {} would make it read-only: {fix} (or protect paths inside it)",
                        root.display()
                    )
                } else {
                    format!(
                        "protecting {} would make the writable root {} inside it read-only: {fix} (or protect paths \
                     inside it)",
                        real.display(),
                        root.display()
                    )
                },
            ));
        }
        own.push(real);
    }
    let mut wanted: Vec<PathBuf> = DEFAULT_PROTECTED.iter().map(|p| ws.join(p)).collect();
    if let Some(pf) = &req.policy_file {
        wanted.push(pf.clone());
    }
    // What git reads code or configuration from, in every git dir of the
    // workspace and its submodules: hooks, config, config.worktree,
    // commondir, gitdir, the core.hooksPath directory, included files, the
    // `.git` files of worktrees and submodules (so they cannot be pointed at
    // another git dir), and where the hooks' links lead.
    wanted.extend(git.wanted(ws));
    wanted.extend(hook_targets.iter().cloned());
    let gitdirs: Vec<&Path> = git.paths().collect();
    let mut out: BTreeSet<PathBuf> =
        own.into_iter().filter(|t| writable_areas.iter().any(|a| t.starts_with(a) && t != a)).collect();
    for w in wanted {
        // Its target is protected below; a link on the way (or the name
        // itself) in a writable area could be replaced instead.
        if let Some(link) = replaceable_link(&w, writable_areas) {
            return Err(SandboxError::unsafe_path(
                w.to_path_buf(),
                PathRefusal::ReplaceableLink,
                format!(
                    "{} is reached through the symbolic link {} in a writable area, which the command could replace \
                 (its target alone would be protected); replace the link with the real directory or file",
                    w.display(),
                    link.display()
                ),
            ));
        }
        let target = match memo::canonicalize(&w) {
            Ok(real) => real,
            Err(_) => {
                // Missing: protect the nearest existing parent, unless that
                // is a writable root itself or a git dir (whose other files
                // must stay writable for git to work).
                let Some(parent) = w.parent().and_then(|p| memo::canonicalize(p).ok()) else {
                    continue;
                };
                if writable_areas.contains(&parent) || gitdirs.contains(&parent.as_path()) {
                    continue;
                }
                parent
            }
        };
        if writable_areas.iter().any(|a| target.starts_with(a) && target != *a) {
            out.insert(target);
        }
    }
    Ok(out.into_iter().collect())
}

/// Directories strictly between a writable root and each protected path.
fn pinned_ancestors(protected: &[PathBuf], writable_areas: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = BTreeSet::new();
    for p in protected {
        let Some(area) = writable_areas.iter().filter(|a| p.starts_with(a)).max_by_key(|a| a.components().count())
        else {
            continue;
        };
        let mut cur = p.parent();
        while let Some(dir) = cur {
            if dir == area.as_path() || !dir.starts_with(area) {
                break;
            }
            if !protected.iter().any(|q| q == dir) {
                out.insert(dir.to_path_buf());
            }
            cur = dir.parent();
        }
    }
    out.into_iter().collect()
}

/// The deny masks below `ws` (and the links whose names matched), read as
/// the policy's path jail reads the globs.
fn deny_masks(
    globs: &[String],
    compiled: Option<&crate::path::DenyGlobs>,
    ws: &Path,
) -> Result<deny_glob::Masks, SandboxError> {
    deny_glob::masks_with(globs, compiled, ws).map_err(|e| match e {
        MaskError::Glob { glob, reason } => SandboxError::Glob { glob, reason },
        MaskError::Unlistable { path, source } => {
            SandboxError::Path { what: "directory to apply deny globs in", path, source }
        }
        e @ MaskError::TooMany { .. } => SandboxError::BadRequest(e.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// The containment of a host without a cgroup.
    fn uncontained(req: &ExecRequest, uid: u32) -> (Containment, Vec<Rlimit>) {
        let none = Err(super::super::NoCgroup::NotMounted);
        super::super::containment::decide(&none, req, uid).unwrap_or_else(|e| panic!("{e}"))
    }

    /// build.rs's table names exactly the programs the helper's code
    /// compiles now, for every profile (a native build has all four).
    #[test]
    fn precomputed_seccomp_digests_match() {
        assert_eq!(digests::SECCOMP_SHA256.len(), 4, "a native build precomputes every profile");
        for degraded in [false, true] {
            for network_none in [false, true] {
                let p = portcullis_helper::filter::Profile { degraded, network_none };
                let table = seccomp_sha256(p).unwrap_or_else(|e| panic!("{e}"));
                let now = computed_seccomp_sha256(p).unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(table, now, "profile {degraded}/{network_none}");
                assert_eq!(table.len(), 64);
            }
        }
    }

    #[test]
    fn the_lock_directory_is_found_where_a_bind_shows_it() {
        let bind = |src: &str, dst: &str| MountOp::Bind {
            src: src.as_bytes().to_vec(),
            dst: dst.as_bytes().to_vec(),
            writable: false,
            idmap: false,
        };
        let tmpfs = |dst: &str| MountOp::Tmpfs { dst: dst.as_bytes().to_vec(), mode: 0o1777, size: 1 };
        let lock = Path::new("/dev/shm/portcullis-7");
        // The private /dev/shm covers a bind of /dev.
        let ok = |base: &[MountOp]| lock_view(base, lock).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ok(&[bind("/dev", "/dev"), tmpfs("/dev/shm")]), None);
        assert_eq!(ok(&[tmpfs("/dev/shm"), bind("/dev/shm", "/dev/shm")]), Some(lock.to_path_buf()));
        // A bind whose host path differs from its place (the host /tmp).
        let tlock = Path::new("/real/tmp/portcullis-7");
        assert_eq!(
            lock_view(&[bind("/real/tmp", "/tmp")], tlock).ok().flatten(),
            Some(PathBuf::from("/tmp/portcullis-7"))
        );
        // A bind from inside the directory is refused.
        assert!(lock_view(&[bind("/dev/shm/portcullis-7/x", "/dev/shm/portcullis-7/x")], lock).is_err());
    }

    fn tree() -> tempfile::TempDir {
        let d = tempfile::Builder::new().prefix("pc-plan-").tempdir_in("/var/tmp").unwrap_or_else(|e| panic!("{e}"));
        for f in ["src/main.rs", ".env", "a/b/.env.local", "secrets/k", "target/x", "docs/secrets.md"] {
            let p = d.path().join(f);
            fs::create_dir_all(p.parent().unwrap_or(d.path())).unwrap_or_else(|e| panic!("{e}"));
            fs::write(&p, "x").unwrap_or_else(|e| panic!("{e}"));
        }
        d
    }

    fn req(d: &tempfile::TempDir) -> ExecRequest {
        ExecRequest::new(d.path(), ["true"])
    }

    #[test]
    fn mounts_are_ordered_parents_first() {
        let d = tree();
        let mut r = req(&d);
        r.write.push("target".into());
        let p =
            build(&r, 1000, 1000, uncontained(&r, 1000), None, true).map(|(p, _)| p).unwrap_or_else(|e| panic!("{e}"));
        let depths: Vec<usize> = p
            .spec
            .mounts
            .iter()
            .take_while(|m| !matches!(m, MountOp::ReadOnly { .. } | MountOp::Mask { .. }))
            .map(|m| depth(m.dst()))
            .collect();
        assert!(depths.windows(2).all(|w| w[0] <= w[1]), "{depths:?}");
        let ws = fs::canonicalize(d.path()).unwrap_or_default();
        let ws_i = p.spec.mounts.iter().position(|m| m.dst() == bytes(&ws)).unwrap_or(usize::MAX);
        let t_i = p.spec.mounts.iter().position(|m| m.dst() == bytes(&ws.join("target"))).unwrap_or(0);
        assert!(ws_i < t_i, "the workspace is mounted before its grant");
        assert_eq!(p.write_grants, vec![ws.join("target")]);
        assert!(!p.writable);
    }

    #[test]
    fn deny_globs_follow_the_documented_semantics() {
        let d = tree();
        let ws = fs::canonicalize(d.path()).unwrap_or_default();
        let mut r = req(&d);
        r.deny = vec![".env*".into(), "secrets".into()];
        let p =
            build(&r, 1000, 1000, uncontained(&r, 1000), None, true).map(|(p, _)| p).unwrap_or_else(|e| panic!("{e}"));
        let mut got: Vec<PathBuf> = p.masked.clone();
        got.sort();
        let mut want = vec![ws.join(".env"), ws.join("a/b/.env.local"), ws.join("secrets")];
        want.sort();
        assert_eq!(got, want, "a bare name matches at any depth; docs/secrets.md is not 'secrets'");
        r.deny = vec!["a/**/.env*".into()];
        let p =
            build(&r, 1000, 1000, uncontained(&r, 1000), None, true).map(|(p, _)| p).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.masked, vec![ws.join("a/b/.env.local")]);
    }

    #[test]
    fn protected_paths_only_where_writable() {
        let d = tree();
        fs::create_dir_all(d.path().join(".git/hooks")).unwrap_or_else(|e| panic!("{e}"));
        fs::write(d.path().join(".git/config"), "").unwrap_or_else(|e| panic!("{e}"));
        let ws = fs::canonicalize(d.path()).unwrap_or_default();
        let p = build(&req(&d), 1000, 1000, uncontained(&req(&d), 1000), None, true)
            .map(|(p, _)| p)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(p.protected.is_empty(), "nothing to protect in a read-only workspace");
        let mut r = req(&d);
        r.writable = true;
        let p =
            build(&r, 1000, 1000, uncontained(&r, 1000), None, true).map(|(p, _)| p).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.protected, vec![ws.join(".git/config"), ws.join(".git/hooks")]);
    }

    #[test]
    fn root_callers_run_as_nobody_with_idmapped_workspace() {
        let d = tree();
        let p = build(&req(&d), 0, 0, uncontained(&req(&d), 0), None, true)
            .map(|(p, _)| p)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((p.spec.identity.inside_uid, p.spec.identity.outside_uid), (0, ROOT_RUNS_AS));
        let ws = fs::canonicalize(d.path()).unwrap_or_default();
        assert!(p
            .spec
            .mounts
            .iter()
            .any(|m| matches!(m, MountOp::Bind { dst, idmap: true, .. } if *dst == bytes(&ws))));
        let p = build(&req(&d), 1000, 1000, uncontained(&req(&d), 1000), None, true)
            .map(|(p, _)| p)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((p.spec.identity.inside_uid, p.spec.identity.outside_uid), (1000, 1000));
        assert!(!p.spec.mounts.iter().any(|m| matches!(m, MountOp::Bind { idmap: true, .. })));
    }

    #[test]
    fn environment_is_built_from_the_request_only() {
        let d = tree();
        let mut r = req(&d);
        r.env.push(("A".into(), "1".into()));
        r.env.push(("A".into(), "2".into()));
        let p =
            build(&r, 1000, 1000, uncontained(&r, 1000), None, true).map(|(p, _)| p).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.spec.env, vec![b"A=2".to_vec(), b"PATH=/usr/local/bin:/usr/bin:/bin".to_vec()]);
    }
}
