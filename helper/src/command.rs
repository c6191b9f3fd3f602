//! The last steps, in the command's own process: new session, working
//! directory, limits, capabilities, no_new_privs, Landlock, seccomp, exec.
//!
//! Runs in a fork of the sandbox's pid 1, which is single-threaded, so
//! allocating here is fine. Order matters: capabilities are dropped before
//! Landlock (which needs no_new_privs) and seccomp comes last, so that nothing
//! after it needs a syscall the filter refuses — except `execve`.

use std::ffi::CString;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;

use caps::CapSet;
use landlock::{
    AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr, RulesetCreatedAttr,
    RulesetStatus, Scope, ABI,
};
use nix::sys::resource::{setrlimit, Resource};
use nix::sys::signal::{SigSet, SigmaskHow};

use portcullis_helper::report::{Applied, CloneCall, Record, Step};
use portcullis_helper::spec::{Mode, Rlimit, RlimitKind, SpawnSpec};
use seccompiler::BpfProgram;

use crate::{Fail, Prepared};

fn errno(e: nix::Error) -> io::Error {
    io::Error::from_raw_os_error(e as i32)
}

/// Become the command. Returns only the failure; the caller reports it.
/// `ahead`: this process already ran [`ahead`] (a slot's command, forked
/// before the request).
pub fn run(spec: &SpawnSpec, prep: &Prepared, via: CloneCall, report: &OwnedFd, ahead: bool) -> Fail {
    match setup(spec, prep, via, report, ahead) {
        Ok(never) => match never {},
        Err(f) => f,
    }
}

enum Never {}

/// The command's process, one line per step (see `Step`).
fn setup(spec: &SpawnSpec, prep: &Prepared, via: CloneCall, report: &OwnedFd, ahead: bool) -> Result<Never, Fail> {
    if !ahead {
        new_session()?;
    }
    unblock_signals(ahead)?;
    let applied = lock_down(spec, prep, via, ahead, true)?;
    // Entered confined, as a prepared slot's command enters it: with no
    // capability to search a directory its ids may not.
    change_dir(&spec.cwd)?;
    crate::report(report, Record::Applied(applied));
    Err(exec(prep))
}

/// Every signal unblocked, and the command's dispositions at their
/// defaults, not as this Rust program set them (SIGPIPE ignored); `ahead`:
/// [`ahead`] put back all but SIGPIPE's already.
fn unblock_signals(ahead: bool) -> Result<(), Fail> {
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)
        .map_err(|e| Fail::io(Step::UnblockSignals, errno(e)))?;
    match ahead {
        true => crate::sys::default_signal_disposition(libc::SIGPIPE),
        false => crate::sys::default_signal_dispositions(None),
    }
    .map_err(|e| Fail::io(Step::UnblockSignals, e))
}

/// The steps that confine the process, in their order: limits (unless
/// `limits` is false: a prepared slot sets them at the request, once it has
/// read it), capabilities, no_new_privs, Landlock, every inherited fd
/// close-on-exec, seccomp last (with the observer's listener handed over).
/// What is in force, for the report.
fn lock_down(
    spec: &SpawnSpec,
    prep: &Prepared,
    via: CloneCall,
    bounding_cleared: bool,
    limits: bool,
) -> Result<Applied, Fail> {
    if limits {
        set_rlimits(&spec.rlimits)?;
    }
    drop_privileges(spec, bounding_cleared)?;
    nix::sys::prctl::set_no_new_privs().map_err(|e| Fail::io(Step::NoNewPrivs, errno(e)))?;
    let mut applied = restrict_writes(spec, via)?;
    crate::sys::close_range_from(3, libc::CLOSE_RANGE_CLOEXEC).map_err(|e| Fail::io(Step::CloseFds, e))?;
    if !(cfg!(debug_assertions) && spec.test_switches.skip_seccomp) {
        applied.seccomp = true;
        crate::notify::start_folded(&prep.filter, prep.folded.as_ref())?;
    } else {
        // A debug helper told to skip the main filter still observes.
        crate::notify::start(prep.observer.as_ref())?;
    }
    Ok(applied)
}

/// A prepared slot's command, before its request: every step of
/// [`setup`] that the request does not change, for the shape `spec` (the
/// slot ran [`ahead`] already), but the limits: an address-space limit
/// would bound the memory the request is read with. Signals stay blocked,
/// the limits unset and the working directory unentered until
/// [`run_request`]. What is in force, which [`run_request`] reports.
pub fn lock_down_ahead(spec: &SpawnSpec, prep: &Prepared, via: CloneCall) -> Result<Applied, Fail> {
    lock_down(spec, prep, via, true, false)
}

/// A prepared slot's command, at its request (read): signals, the shape's
/// limits `rlimits` (set without capabilities, which in the sandbox's user
/// namespace never allowed raising a hard limit anyway), the working
/// directory `cwd`, the report of `applied`, and `execve` of `prep`'s
/// command. Returns only the failure; the caller reports it.
pub fn run_request(cwd: &[u8], rlimits: &[Rlimit], prep: &Prepared, applied: Applied, report: &OwnedFd) -> Fail {
    if let Err(f) = unblock_signals(true).and_then(|()| set_rlimits(rlimits)).and_then(|()| change_dir(cwd)) {
        return f;
    }
    crate::report(report, Record::Applied(applied));
    exec(prep)
}

/// What a slot's command does while it waits for its request: the steps of
/// [`setup`] that depend on nothing in it, so that they leave the request's
/// path. Its own session; every signal disposition at its default but
/// SIGPIPE's, which stays ignored until [`setup`] (a write to a closed pipe
/// before then is an error this program handles, not its death); and the
/// capability bounding set cleared (the effective capabilities stay for
/// the request's mounts: the bounding set only limits what an `execve`
/// may grant, and [`setup`] zeroes the rest).
pub fn ahead() -> Result<(), Fail> {
    new_session()?;
    crate::sys::default_signal_dispositions(Some(libc::SIGPIPE)).map_err(|e| Fail::io(Step::UnblockSignals, e))?;
    crate::sys::clear_bounding_set().map_err(|e| Fail::io(Step::DropCaps, e))
}

/// `NewSession`.
fn new_session() -> Result<(), Fail> {
    nix::unistd::setsid().map(drop).map_err(|e| Fail::io(Step::NewSession, errno(e)))
}

/// `Chdir`.
fn change_dir(cwd: &[u8]) -> Result<(), Fail> {
    let cwd = CString::new(cwd).map_err(|_| Fail::errno(Step::Chdir, libc::EINVAL))?;
    nix::unistd::chdir(cwd.as_c_str()).map_err(|e| Fail::io(Step::Chdir, errno(e)))
}

/// `Rlimits`: exactly the spec's.
fn set_rlimits(rlimits: &[Rlimit]) -> Result<(), Fail> {
    for r in rlimits {
        let res = match r.resource {
            RlimitKind::Nproc => Resource::RLIMIT_NPROC,
            RlimitKind::As => Resource::RLIMIT_AS,
            RlimitKind::Core => Resource::RLIMIT_CORE,
            RlimitKind::Nofile => Resource::RLIMIT_NOFILE,
        };
        setrlimit(res, r.value, r.value).map_err(|e| Fail::io(Step::Rlimits, errno(e)))?;
    }
    Ok(())
}

/// `DropCaps`. A root caller in landlock-only mode: the command stays uid 0
/// (so that a root-owned workspace it may write stays writable) but holds
/// no capability, cannot get one back at execve, and cannot unlock that.
/// `bounding_cleared`: [`ahead`] cleared the bounding set already.
fn drop_privileges(spec: &SpawnSpec, bounding_cleared: bool) -> Result<(), Fail> {
    let root_without_userns = spec.mode == Mode::LandlockOnly && nix::unistd::getuid().is_root();
    if root_without_userns {
        lock_root().map_err(|e| Fail::io(Step::DropCaps, e))?;
    }
    drop_caps(bounding_cleared).map_err(|e| Fail::io(Step::DropCaps, e))?;
    if root_without_userns {
        check_root_locked().map_err(|e| Fail::io(Step::DropCaps, e))?;
    }
    Ok(())
}

/// `Landlock` (unless a debug test switch skips it), and what is in force.
fn restrict_writes(spec: &SpawnSpec, via: CloneCall) -> Result<Applied, Fail> {
    let mut applied = Applied {
        readonly_mounts: !(cfg!(debug_assertions) && spec.test_switches.skip_readonly),
        clone: via,
        ..Applied::default()
    };
    if !(cfg!(debug_assertions) && spec.test_switches.skip_landlock) {
        landlock(spec, &mut applied)?;
    } else {
        applied.landlock_abi = crate::sys::landlock_abi();
    }
    Ok(applied)
}

/// Clear the bounding set first (it needs CAP_SETPCAP, still effective),
/// then ambient, then inheritable, permitted and effective. Without this a
/// uid-0 command would get every capability back at exec (bubblewrap#287).
///
/// Done with the raw calls: one `PR_CAPBSET_DROP` per capability number
/// until the kernel answers `EINVAL` (so capabilities newer than any list
/// compiled in here are dropped too), `PR_CAP_AMBIENT_CLEAR_ALL`, and one
/// `capset` that zeroes the three other sets at once — about 45 syscalls
/// instead of the ~90 a read-then-drop loop per set costs.
fn drop_caps(bounding_cleared: bool) -> io::Result<()> {
    let to_io = |e: caps::errors::CapsError| io::Error::other(e.to_string());
    // Without CAP_SETPCAP (landlock-only mode: an unprivileged caller with no
    // user namespace) the bounding set cannot be changed — nor does it
    // matter: with no_new_privs and no permitted capabilities, exec grants
    // none. Every set we can clear is cleared.
    if !bounding_cleared && caps::has_cap(None, CapSet::Effective, caps::Capability::CAP_SETPCAP).map_err(to_io)? {
        crate::sys::clear_bounding_set()?;
    }
    crate::sys::clear_ambient_set()?;
    crate::sys::capset_none()
}

/// The securebits a uid-0 command without a user namespace runs under, each
/// with its lock: `NOROOT` (uid 0 gains no capability at execve, whatever
/// the bounding set), `NO_SETUID_FIXUP` (no capability juggling on uid
/// changes), `NO_CAP_AMBIENT_RAISE`, and `KEEP_CAPS` locked off.
/// `<linux/securebits.h>`.
const ROOT_SECUREBITS: libc::c_ulong = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80;

/// Lock the securebits (needs CAP_SETPCAP, which a container's root has by
/// default). Without CAP_SETPCAP they cannot be set, and then the bounding
/// set must already be empty (`check_root_locked`).
fn lock_root() -> io::Result<()> {
    let to_io = |e: caps::errors::CapsError| io::Error::other(e.to_string());
    if caps::has_cap(None, CapSet::Effective, caps::Capability::CAP_SETPCAP).map_err(to_io)? {
        crate::sys::set_securebits(ROOT_SECUREBITS)?;
    }
    Ok(())
}

/// After the drop: a uid-0 command may exec only if execve cannot hand it
/// capabilities back — the bounding set is empty, or `NOROOT` is locked.
fn check_root_locked() -> io::Result<()> {
    let noroot = crate::sys::securebits()? & 0x03 == 0x03;
    if noroot || crate::sys::bounding_set_empty()? {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(libc::EPERM))
    }
}

fn abi_of(v: u32) -> ABI {
    match v {
        0 => ABI::Unsupported,
        1 => ABI::V1,
        2 => ABI::V2,
        3 => ABI::V3,
        4 => ABI::V4,
        5 => ABI::V5,
        6 => ABI::V6,
        _ => ABI::V7,
    }
}

/// The write rights Landlock handles: all of them but `IoctlDev` (left to
/// seccomp), and `Truncate` only when the spec says (the landlock-only
/// mode). In the full sandbox the read-only mounts refuse truncation and
/// seccomp refuses `open(O_RDONLY | O_TRUNC)`; the right would make the
/// kernel walk from every opened file, read-only opens included, to the
/// root, which costs open-heavy commands a third of their time
/// (docs/sandbox.md, "Landlock").
fn write_access(abi: ABI, truncate: bool) -> landlock::BitFlags<AccessFs> {
    let all = AccessFs::from_write(abi) & !AccessFs::IoctlDev;
    if truncate {
        all
    } else {
        all & !AccessFs::Truncate
    }
}

fn landlock(spec: &SpawnSpec, applied: &mut Applied) -> Result<(), Fail> {
    let raw_abi = crate::sys::landlock_abi();
    applied.landlock_abi = raw_abi;
    let ll = &spec.landlock;
    if raw_abi == 0 {
        if ll.required {
            return Err(Fail::errno(Step::Landlock, libc::EOPNOTSUPP));
        }
        return Ok(());
    }
    let abi = abi_of(raw_abi);
    let access = write_access(abi, ll.truncate);
    // With no mount plan (landlock-only mode) reads are restricted too.
    let read = AccessFs::from_read(abi);
    let restrict_reads = !ll.readable.is_empty();
    if restrict_reads && (raw_abi < 6 || !ll.scope) {
        // Without signal scoping the command could kill the sweeping pid 1.
        return Err(Fail::errno(Step::Landlock, libc::EOPNOTSUPP));
    }
    let handled = if restrict_reads { access | read } else { access };
    // The landlock crate's errors carry no errno; EINVAL names the class.
    let fail = |_: &dyn std::fmt::Display| Fail::errno(Step::Landlock, libc::EINVAL);
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(handled)
        .map_err(|e| fail(&e))?;
    if ll.deny_tcp && raw_abi >= 4 {
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp).map_err(|e| fail(&e))?;
    }
    if ll.scope && raw_abi >= 6 {
        ruleset = ruleset.scope(Scope::AbstractUnixSocket | Scope::Signal).map_err(|e| fail(&e))?;
    }
    let mut created = ruleset.create().map_err(|e| fail(&e))?;
    // Unix sockets only where the spec says (the private tmpfs mounts):
    // never in the workspace, a grant or the host's /tmp, where another run
    // could connect to one and be handed descriptors.
    let no_sock = access & !AccessFs::MakeSock;
    let rules = ll
        .writable
        .iter()
        .map(|p| (p, if restrict_reads { no_sock | read } else { no_sock }))
        .chain(ll.readable.iter().map(|p| (p, read)))
        .chain(ll.sockets.iter().map(|p| (p, landlock::BitFlags::from(AccessFs::MakeSock))));
    for (p, rights) in rules {
        let path = std::ffi::OsStr::from_bytes(p);
        // Unlike landlock's path_beneath_rules, a path that cannot be opened
        // is an error, not a silently dropped rule.
        let fd = PathFd::new(path).map_err(|_| Fail::errno(Step::Landlock, libc::ENOENT))?;
        // A rule on a file (a device node) may carry file rights only.
        let is_dir = std::fs::metadata(path).map(|m| m.is_dir()).unwrap_or(false);
        let rights = if is_dir { rights } else { rights & AccessFs::from_file(abi) };
        created = created.add_rule(PathBeneath::new(fd, rights)).map_err(|e| fail(&e))?;
    }
    // A split grant's entries: never through a link, and one gone since the
    // plan (or swapped for a link) simply gets no rule.
    let entry_rights = if restrict_reads { no_sock | read } else { no_sock };
    for p in &ll.writable_entries {
        let c = std::ffi::CString::new(p.as_slice()).map_err(|_| Fail::errno(Step::Landlock, libc::EINVAL))?;
        let fd = match crate::sys::openat2(
            libc::AT_FDCWD,
            &c,
            libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC,
            crate::sys::RESOLVE_NO_SYMLINKS | crate::sys::RESOLVE_NO_MAGICLINKS,
        ) {
            Ok(fd) => fd,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ELOOP | libc::ENOTDIR)) => continue,
            Err(e) => return Err(Fail::io(Step::Landlock, e)),
        };
        let st = nix::sys::stat::fstat(&fd).map_err(|e| Fail::errno(Step::Landlock, e as i32))?;
        let kind = st.st_mode & libc::S_IFMT;
        let rights = match kind {
            libc::S_IFDIR => entry_rights,
            libc::S_IFREG => entry_rights & AccessFs::from_file(abi),
            _ => continue,
        };
        created = created.add_rule(PathBeneath::new(fd, rights)).map_err(|e| fail(&e))?;
    }
    let status = created.restrict_self().map_err(|e| fail(&e))?;
    applied.landlock_full = status.ruleset == RulesetStatus::FullyEnforced;
    applied.landlock_partial = status.ruleset == RulesetStatus::PartiallyEnforced;
    if ll.required && status.ruleset == RulesetStatus::NotEnforced {
        return Err(Fail::errno(Step::Landlock, libc::EOPNOTSUPP));
    }
    Ok(())
}

/// Put the calling process in a Landlock domain that scopes signals and
/// abstract unix sockets (ABI 6) and restricts no file access (it handles
/// only `Refer`, granted beneath `/`). Used by the
/// landlock-only mode's supervisors, so that their `kill(-1)` sweep reaches
/// only processes of their own (and nested) domains.
pub fn scope_signals() -> Result<(), Fail> {
    if crate::sys::landlock_abi() < 6 {
        return Err(Fail::errno(Step::ScopeSignals, libc::EOPNOTSUPP));
    }
    let fail = |_: &dyn std::fmt::Display| Fail::errno(Step::ScopeSignals, libc::EINVAL);
    nix::sys::prctl::set_no_new_privs().map_err(|e| Fail::io(Step::ScopeSignals, errno(e)))?;
    // Every layer of a Landlock domain refuses `Refer` (linking or renaming
    // into another directory) unless it grants it, even a layer that handles
    // no filesystem right at all: without this rule, every cross-directory
    // rename or link in the command's writable areas failed with EXDEV. This
    // layer handles `Refer` alone and grants it everywhere, so the command's
    // own ruleset, nested inside, is what decides.
    let root = PathFd::new("/").map_err(|_| Fail::errno(Step::ScopeSignals, libc::ENOENT))?;
    let status = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::Refer)
        .map_err(|e| fail(&e))?
        .scope(Scope::AbstractUnixSocket | Scope::Signal)
        .map_err(|e| fail(&e))?
        .create()
        .map_err(|e| fail(&e))?
        .add_rule(PathBeneath::new(root, AccessFs::Refer))
        .map_err(|e| fail(&e))?
        .restrict_self()
        .map_err(|e| fail(&e))?;
    if status.ruleset == RulesetStatus::NotEnforced {
        return Err(Fail::errno(Step::ScopeSignals, libc::EOPNOTSUPP));
    }
    Ok(())
}

/// `Seccomp`: install the main filter alone.
pub(crate) fn seccomp(filter: &BpfProgram) -> Result<(), Fail> {
    seccompiler::apply_filter(filter).map_err(|e| match e {
        seccompiler::Error::Seccomp(io) => Fail::io(Step::Seccomp, io),
        _ => Fail::errno(Step::Seccomp, libc::EINVAL),
    })
}

/// Exec `argv[0]`, searching the spec's `PATH` when it holds no `/`, like
/// execvp: EACCES from one candidate is remembered, ENOENT moves on.
fn exec(prep: &Prepared) -> Fail {
    let argv: Vec<*const libc::c_char> =
        prep.argv.iter().map(|a| a.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
    let envp: Vec<*const libc::c_char> =
        prep.envp.iter().map(|a| a.as_ptr()).chain(std::iter::once(std::ptr::null())).collect();
    let mut last = io::Error::from_raw_os_error(libc::ENOENT);
    let mut saw_eacces = false;
    for cand in &prep.candidates {
        let e = crate::sys::execve(cand, &argv, &envp);
        match e.raw_os_error() {
            Some(libc::EACCES) => saw_eacces = true,
            Some(libc::ENOENT) | Some(libc::ENOTDIR) => {}
            _ => return Fail::io(Step::Exec, e),
        }
        last = e;
    }
    if saw_eacces {
        last = io::Error::from_raw_os_error(libc::EACCES);
    }
    Fail::io(Step::Exec, last)
}
