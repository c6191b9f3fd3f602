//! The steps of a run, in the order [`Sandbox::run_locked`] takes them:
//! make the cgroup the plan counted on, spawn the helper with the plan's
//! spec, hand it stdin, pump its output and wait (timeout, cancel), kill
//! and empty the cgroup, finish the observer, run the git guard and the
//! submodule quarantine, assemble the result. The spec the helper gets is
//! the plan's, byte for byte: nothing here edits it.
//!
//! [`Sandbox::run_locked`]: super::Sandbox

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use portcullis_helper::report::{Applied, Record, Step, NO_DETAIL};
use portcullis_helper::spec::{Mode, Netns, Network, SpawnSpec};
use tokio::sync::mpsc;

use super::cgroup::Cgroup;
use super::{
    after_run, guard, launch, network, observe, pending, pump, read_records, setup_error, stdin, submodules, sys,
    Cleanup, Enforcement, ExecRequest, ExecResult, LandlockStatus, Outcome, Plan, RunOptions, SandboxError, Stdin,
    Stream, Warning,
};
use crate::path::lexical;

/// A failure of a security step after the run: it fails the run.
pub(super) type Failure = (Cleanup, &'static str, PathBuf, io::Error);

/// `#[cfg(debug_assertions)]` only: where to write the spec exactly as it
/// is handed to the helper (tests compare it with the plan's).
#[cfg(debug_assertions)]
pub const DEBUG_SPEC_OUT: &str = "PORTCULLIS_DEBUG_SPEC_OUT";

/// Refuse a plan whose spec and containment disagree about the cgroup
/// (edited by hand): the helper would join no cgroup the library kills.
pub(super) fn check_containment(plan: &Plan) -> Result<(), SandboxError> {
    if plan.spec.cgroup != plan.containment.cgroup.is_some() {
        return Err(SandboxError::invalid(
            "plan",
            format!(
                "the plan's spec says cgroup = {} but its containment {}; plan again (Sandbox::plan)",
                plan.spec.cgroup,
                if plan.containment.cgroup.is_some() { "makes one" } else { "makes none" }
            ),
        ));
    }
    Ok(())
}

/// Make the per-command cgroup the plan counted on, or fail: the run never
/// goes ahead with less containment than its plan (and `--explain`) said.
pub(super) fn make_cgroup(plan: &Plan, host: Option<&super::CgroupHost>) -> Result<Option<Cgroup>, SandboxError> {
    let Some(want) = &plan.containment.cgroup else { return Ok(None) };
    let Some(host) = host else {
        return Err(SandboxError::Cgroup {
            stage: "create the per-command cgroup under",
            path: want.parent.clone(),
            source: io::Error::from_raw_os_error(libc::ENOENT),
        });
    };
    host.create(want).map(Some).map_err(|e| SandboxError::Cgroup { stage: e.stage, path: e.path, source: e.source })
}

/// The helper, running: what the rest of the run needs of it. Fields drop
/// in order: an abandoned run closes the lifeline, kills and reaps the
/// helper, and settles the stdin relay after.
pub(super) struct Launched {
    /// Closing it makes the helper kill pid 1 (first, so that dropping the
    /// helper finds it closed and waits for the teardown).
    pub(super) lifeline: Option<OwnedFd>,
    pub(super) child: launch::Helper,
    pub(super) relay: Option<stdin::Relay>,
    /// The full sandbox (whose pid 1 sweeps its namespace before it
    /// reports the command's end), not the landlock-only mode.
    full: bool,
    /// Pid 1's pid, when the helper said it (a slot's does), or when it
    /// is the child itself (cloned by the zygote).
    pub(super) pid1: Option<libc::pid_t>,
    /// What is held until the run is over and closed after the child is
    /// reaped: a pre-made sandbox's copy of the host's tree, sent back to
    /// this process (on its socket, or apart), whose last close frees
    /// its mounts.
    pub(super) held: Vec<OwnedFd>,
}

/// The descriptors the helper inherits, above 10 (so its dup2 onto 3..7
/// clobbers none), and our ends of them.
struct HelperFds {
    spec: OwnedFd,
    report_w: OwnedFd,
    report_r: OwnedFd,
    life_r: OwnedFd,
    life_w: OwnedFd,
    cgroup: Option<OwnedFd>,
}

fn io_err(stage: &'static str) -> impl Fn(io::Error) -> SandboxError {
    move |source| SandboxError::Io { stage, source }
}

/// A pipe whose end `high` (0: read, 1: write) is moved above 10, the
/// original dropped at once: a stray copy of the report pipe's write end
/// would hide its EOF.
pub(super) fn pipe_above(stage: &'static str, high_is_write: bool) -> Result<(OwnedFd, OwnedFd), SandboxError> {
    let (r, w) =
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| SandboxError::Io { stage, source: e.into() })?;
    if high_is_write {
        let w2 = sys::dup_above(&w, 10).map_err(io_err(stage))?;
        drop(w);
        Ok((r, w2))
    } else {
        let r2 = sys::dup_above(&r, 10).map_err(io_err(stage))?;
        drop(r);
        Ok((r2, w))
    }
}

/// A spec (the plan's, exactly, or a slot's: `pool::for_slot`), as the
/// helper reads it.
pub(super) fn encode_spec(spec: &portcullis_helper::spec::SpawnSpec) -> Result<Vec<u8>, SandboxError> {
    let json = serde_json::to_vec(spec)
        .map_err(|e| SandboxError::Io { stage: "encoding the spec", source: io::Error::other(e) })?;
    #[cfg(debug_assertions)]
    if let Some(out) = std::env::var_os(DEBUG_SPEC_OUT) {
        std::fs::write(&out, &json).map_err(io_err("writing the spec to PORTCULLIS_DEBUG_SPEC_OUT"))?;
    }
    Ok(json)
}

/// Encode the plan's spec (exactly) into a memfd and make the pipes.
fn helper_fds(plan: &Plan, cg: Option<&Cgroup>) -> Result<HelperFds, SandboxError> {
    let json = encode_spec(&plan.spec)?;
    let memfd = sys::memfd_with(c"portcullis-spec", &json).map_err(io_err("writing the spec"))?;
    let spec = sys::dup_above(&memfd, 10).map_err(io_err("writing the spec"))?;
    drop(memfd);
    let (report_r, report_w) = pipe_above("creating the report pipe", true)?;
    let (life_r, life_w) = pipe_above("creating the lifeline", false)?;
    let cgroup = match cg {
        Some(c) => Some(sys::dup_above(&c.dir, 10).map_err(io_err("passing the cgroup"))?),
        None => None,
    };
    Ok(HelperFds { spec, report_w, report_r, life_r, life_w, cgroup })
}

/// The output chunks and the helper's records, read as they come.
pub(super) struct Streams {
    output: mpsc::Receiver<(Stream, Vec<u8>)>,
    records: mpsc::UnboundedReceiver<Record>,
}

/// Spawn the helper on the plan's spec, the cgroup and the observer's
/// socket (when it started), hand it stdin, and start reading its output
/// and records.
pub(super) fn spawn_helper(
    launcher: &launch::Launcher,
    plan: &Plan,
    cg: Option<&Cgroup>,
    net: Option<&network::Namespaces>,
    observing: &mut observe::Setup,
    stdin: Stdin,
) -> Result<(Launched, Streams), SandboxError> {
    let fds = helper_fds(plan, cg)?;
    let net_fds = match net {
        Some(n) => n.pass().map_err(io_err("passing the workspace's network"))?,
        None => Vec::new(),
    };
    let mut pass = vec![
        (fds.spec.as_raw_fd(), portcullis_helper::SPEC_FD),
        (fds.report_w.as_raw_fd(), portcullis_helper::REPORT_FD),
        (fds.life_r.as_raw_fd(), portcullis_helper::LIFELINE_FD),
    ];
    if let Some(c) = &fds.cgroup {
        pass.push((c.as_raw_fd(), portcullis_helper::CGROUP_FD));
    }
    // Without it (the observer could not start) the helper installs no
    // observer: it finds fd 7 closed (see `launch::Launcher::spawn`).
    if let Some(o) = observing.helper_end() {
        pass.push((o, portcullis_helper::OBSERVE_FD));
    }
    pass.extend(net_fds.iter().map(|(fd, target)| (fd.as_raw_fd(), *target)));
    let stdin = match stdin {
        Stdin::Null => stdin::StdinPlan::Null,
        Stdin::Copy => stdin::plan()?,
    };
    let spec = &plan.spec;
    let full = spec.mode == Mode::Full;
    // A full sandbox that makes no network of its own is cloned by the
    // zygote, with no outer helper (`launch::Launcher::clone_run`); its
    // network (the workspace's) and cgroup go to the zygote, not to it.
    let cloned = match full && !(spec.network == Network::None && spec.netns == Netns::Private) {
        true => {
            let placed: Vec<(RawFd, RawFd)> = pass
                .iter()
                .copied()
                .filter(|(_, t)| {
                    ![portcullis_helper::CGROUP_FD, portcullis_helper::USERNS_FD, portcullis_helper::NETNS_FD]
                        .contains(t)
                })
                .collect();
            let net_pass: Vec<(RawFd, RawFd)> = net_fds.iter().map(|(fd, t)| (fd.as_raw_fd(), *t)).collect();
            let joined = net.map(|n| (n.zygote(), &net_pass[..]));
            // They go alone on pid 1's gate.
            let trees =
                |userns: Option<BorrowedFd<'_>>| Ok(idmapped_trees(spec, userns, 0)?.into_iter().flatten().collect());
            let cg = fds.cgroup.as_ref().map(AsRawFd::as_raw_fd);
            let userns = spec.mounts.iter().any(|m| m.is_idmapped());
            launcher.clone_run(&spec.identity, cg, &placed, stdin.command_end(), joined, userns, &trees)
        }
        false => None,
    };
    let (child, pid1) = match cloned {
        Some(launch::ClonedRun::Made(spawned)) => {
            let pid = spawned.pid();
            (spawned.attach().map_err(io_err("waiting for the sandbox"))?, Some(pid))
        }
        Some(launch::ClonedRun::Refused((step, errno, detail))) => {
            return Err(super::setup_error(plan, Ok(step), errno, detail));
        }
        None => {
            let child = launcher
                .spawn(&[], &pass, stdin.command_end())
                .map_err(|source| SandboxError::Spawn { helper: launcher.helper().to_path_buf(), source })?;
            (child, None)
        }
    };
    let mut launched = Launched { lifeline: Some(fds.life_w), child, relay: None, full, pid1, held: Vec::new() };
    launched.relay = hand_stdin(stdin)?;
    drop((fds.spec, fds.report_w, fds.life_r, fds.cgroup, net_fds));
    // On an error `launched` is dropped: its lifeline closes and the helper
    // kills the sandbox before the command can start.
    observing.spawned()?;
    let streams = read_streams(&mut launched.child, fds.report_r)?;
    Ok((launched, streams))
}

/// `spec`'s idmapped trees, made through pid 1's user namespace (`userns`,
/// a root caller's) as the outer helper makes them
/// ([`portcullis_helper::mount_api::idmapped_trees`]): one for each
/// idmapped bind, `None` for the other mounts; none for a spec without
/// idmapped binds. They go in one message with `others` descriptors
/// besides: more than it carries is refused, as the outer helper refuses
/// it. A failure is what the helper would report.
pub(super) fn idmapped_trees(
    spec: &SpawnSpec,
    userns: Option<BorrowedFd<'_>>,
    others: usize,
) -> Result<Vec<Option<OwnedFd>>, launch::Refusal> {
    let idmapped = spec.mounts.iter().filter(|m| m.is_idmapped()).count();
    if idmapped == 0 {
        return Ok(Vec::new());
    }
    if idmapped + others > portcullis_helper::MAX_PASSED_FDS {
        return Err((Step::HandOver, libc::E2BIG, NO_DETAIL));
    }
    let Some(userns) = userns else { return Err((Step::Idmap, libc::EPERM, NO_DETAIL)) };
    let skip_readonly = cfg!(debug_assertions) && spec.test_switches.skip_readonly;
    portcullis_helper::mount_api::idmapped_trees(&spec.mounts, skip_readonly, userns)
        .map_err(|(i, e)| (Step::Idmap, e.raw_os_error().unwrap_or(libc::EIO), u32::try_from(i).unwrap_or(NO_DETAIL)))
}

/// A helper a pool slot started, now running `plan`'s command: the same
/// as a fresh spawn from here on (its stdin is `/dev/null`).
pub(super) fn launched(
    mut child: launch::Helper,
    lifeline: OwnedFd,
    report_r: OwnedFd,
    pid1: Option<libc::pid_t>,
) -> Result<(Launched, Streams), SandboxError> {
    let streams = read_streams(&mut child, report_r)?;
    // A slot is always the full sandbox.
    Ok((Launched { lifeline: Some(lifeline), child, relay: None, full: true, pid1, held: Vec::new() }, streams))
}

/// Start relaying or feeding the caller's stdin to the helper.
fn hand_stdin(stdin: stdin::StdinPlan) -> Result<Option<stdin::Relay>, SandboxError> {
    match stdin {
        stdin::StdinPlan::Null => Ok(None),
        stdin::StdinPlan::Relay(mut r) => {
            r.start()?;
            Ok(Some(r))
        }
        stdin::StdinPlan::Feed { read, write, from } => {
            drop(read);
            stdin::feed(write, from);
            Ok(None)
        }
    }
}

/// Read the report pipe and both output pipes in tasks of their own.
fn read_streams(child: &mut launch::Helper, report_r: OwnedFd) -> Result<Streams, SandboxError> {
    let report_rx = pipe_reader(report_r).map_err(io_err("reading the report pipe"))?;
    let (records_tx, records) = mpsc::unbounded_channel();
    tokio::spawn(read_records(report_rx, records_tx));
    let (tx, output) = mpsc::channel::<(Stream, Vec<u8>)>(16);
    for (fd, stream) in [(child.stdout.take(), Stream::Stdout), (child.stderr.take(), Stream::Stderr)] {
        if let Some(fd) = fd {
            let rx = pipe_reader(fd).map_err(io_err("reading the output"))?;
            tokio::spawn(pump(rx, stream, tx.clone()));
        }
    }
    Ok(Streams { output, records })
}

/// The read end of one of a run's pipes (made by this library: the report
/// pipe, the helper's stdout and stderr), non-blocking and registered with
/// the runtime. tokio's checked constructor would `fstat` it and read and
/// set its flags again: four calls more per pipe on every run's path, to
/// learn what is known here.
fn pipe_reader(fd: OwnedFd) -> io::Result<tokio::net::unix::pipe::Receiver> {
    sys::set_nonblocking(&fd)?;
    tokio::net::unix::pipe::Receiver::from_owned_fd_unchecked(fd)
}

/// What waiting for the run gave.
pub(super) struct Waited {
    /// How the helper exited (an error is returned after the guard ran);
    /// `None` after an early end ([`Waited::early`]), when it has not yet.
    status: Result<Option<launch::Exit>, SandboxError>,
    records: Vec<Record>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    truncated: bool,
    timed_out: bool,
    cancelled: bool,
}

impl Waited {
    /// Whether the wait ended at the command's end, before the helper's
    /// exit: pid 1 of the full sandbox reports the command's status only
    /// once it has killed and reaped every other process of its pid
    /// namespace, and the output pipes have closed (nothing of the command
    /// holds them). What is left is the helper and its pid 1, exiting, and
    /// the namespaces they tear down: [`Sandbox::run_locked`] leaves them
    /// behind (`sandbox::behind`).
    ///
    /// [`Sandbox::run_locked`]: super::Sandbox
    pub(super) fn early(&self) -> bool {
        matches!(self.status, Ok(None))
    }
}

/// Collect the output (within the cap, passing it to `on_output`) until
/// the helper exited and the pipes closed, or, in the full sandbox, until
/// pid 1 reported the command's end and the pipes closed
/// ([`Waited::early`]); on timeout or cancel kill the whole tree
/// (`cgroup.kill`, and the lifeline, on which the helper kills pid 1), and
/// the helper itself if it does not finish in 3 s.
pub(super) async fn wait(
    launched: &mut Launched,
    streams: Streams,
    req: &ExecRequest,
    opts: &mut RunOptions,
    deadline: Option<tokio::time::Instant>,
    cg: Option<&Cgroup>,
    warnings: &mut Vec<Warning>,
) -> Waited {
    let Streams { output: mut rx, records: mut record_rx } = streams;
    // Only pid 1 of the full sandbox sweeps its namespace before it
    // reports; a relayed stdin is final only once the helper is gone.
    let may_end_early = launched.full && launched.relay.is_none();
    let mut records = Vec::new();
    let mut records_open = true;
    let mut command_ended = false;
    let child = &mut launched.child;
    let cancel = opts.cancel.take().unwrap_or_default();
    let on_output = &mut opts.on_output;
    let stream_only = opts.stream_only;
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let mut truncated = false;
    let (mut timed_out, mut cancelled) = (false, false);
    let mut status = None;
    let mut outputs_open = true;
    // Whether the kill and drain timers are armed (reset from `far`).
    let (mut kill_armed, mut drain_armed) = (false, false);
    let far = tokio::time::Instant::now() + Duration::from_secs(86400 * 365);
    // The timers are made once and reset, not made anew in each turn of
    // the loop: a timer is registered with the runtime when first polled
    // (or reset), and one earlier than the runtime's next wake-up wakes
    // its parked thread. Made in the loop, every record and chunk did both
    // (the deadline's timer is armed for every command: the policy has a
    // default timeout).
    let deadline_timer = tokio::time::sleep_until(deadline.unwrap_or(far));
    let kill_timer = tokio::time::sleep_until(far);
    let drain_timer = tokio::time::sleep_until(far);
    tokio::pin!(deadline_timer, kill_timer, drain_timer);
    let mut early = false;
    loop {
        if status.is_some() && !outputs_open {
            break;
        }
        if may_end_early && command_ended && !outputs_open && !(timed_out || cancelled) && status.is_none() {
            early = true;
            break;
        }
        let want_kill = !(timed_out || cancelled) && status.is_none();
        tokio::select! {
            r = record_rx.recv(), if records_open => match r {
                Some(r) => {
                    command_ended |= matches!(r, Record::Exited(_) | Record::Signaled(_));
                    records.push(r);
                }
                None => records_open = false,
            },
            chunk = rx.recv(), if outputs_open => match chunk {
                Some((stream, data)) if stream_only => {
                    if let Some(sink) = on_output.as_mut() {
                        sink(stream, &data);
                    }
                }
                Some((stream, data)) => {
                    let room = req.max_output_bytes.saturating_sub(stdout.len() + stderr.len());
                    let take = room.min(data.len());
                    if take < data.len() {
                        truncated = true;
                    }
                    if take > 0 {
                        let part = &data[..take];
                        if let Some(sink) = on_output.as_mut() {
                            sink(stream, part);
                        }
                        match stream {
                            Stream::Stdout => stdout.extend_from_slice(part),
                            Stream::Stderr => stderr.extend_from_slice(part),
                        }
                    }
                }
                None => outputs_open = false,
            },
            st = child.wait(), if status.is_none() => {
                status = Some(st);
                drain_timer.as_mut().reset(tokio::time::Instant::now() + Duration::from_secs(2));
                drain_armed = true;
            }
            _ = &mut deadline_timer, if want_kill && deadline.is_some() => {
                timed_out = true;
            }
            _ = cancel.cancelled(), if want_kill => {
                cancelled = true;
            }
            _ = &mut kill_timer, if kill_armed && status.is_none() => {
                // The helper did not finish the teardown in time.
                child.kill();
                kill_armed = false;
            }
            _ = &mut drain_timer, if drain_armed && outputs_open => {
                warnings.push(Warning::OutputPipesOpen);
                outputs_open = false;
            }
        }
        if (timed_out || cancelled) && launched.lifeline.is_some() {
            // Kill the whole tree: cgroup.kill where we have one, and
            // closing the lifeline makes the helper kill pid 1, whose exit
            // tears the pid namespace down.
            if let Some(c) = cg {
                let _ = c.kill();
            }
            launched.lifeline = None;
            kill_timer.as_mut().reset(tokio::time::Instant::now() + Duration::from_secs(3));
            kill_armed = true;
        }
    }
    if early {
        return Waited { status: Ok(None), records, stdout, stderr, truncated, timed_out, cancelled };
    }
    drop(launched.lifeline.take());
    let status = match status {
        Some(Ok(s)) => Ok(Some(s)),
        Some(Err(source)) => Err(SandboxError::Io { stage: "waiting for the helper", source }),
        None => Err(SandboxError::HelperDied { status: "unknown".into() }),
    };
    // The helper is gone: the rest of its records are in the pipe.
    while let Some(r) = record_rx.recv().await {
        records.push(r);
    }
    Waited { status, records, stdout, stderr, truncated, timed_out, cancelled }
}

/// After an early end that [`only_scaffolding`] did not confirm: kill
/// what is in the cgroup (the command's end is known; anything still there
/// has no business running) and wait for the helper's exit, as a run
/// without the early end does (3 s, then it is killed too).
pub(super) async fn wait_helper(launched: &mut Launched, cg: Option<&Cgroup>, waited: &mut Waited) {
    if let Some(c) = cg {
        let _ = c.kill();
    }
    let child = &mut launched.child;
    let status = match tokio::time::timeout(Duration::from_secs(3), child.wait()).await {
        Ok(s) => s,
        Err(_) => {
            child.kill();
            child.wait().await
        }
    };
    drop(launched.lifeline.take());
    waited.status = match status {
        Ok(s) => Ok(Some(s)),
        Err(source) => Err(SandboxError::Io { stage: "waiting for the helper", source }),
    };
}

/// After an early end: whether the run's cgroup holds nothing but the
/// helper and its pid 1 (the helper's only child), which are exiting. A
/// check from outside of what pid 1 reported, before the result (and a
/// writable run's git guard) goes on without waiting for the teardown.
/// Without a cgroup, pid 1's sweep of its pid namespace stands alone: no
/// process of the namespace can outlive its reaping by pid 1. Where the
/// helper said pid 1's pid (`pid1`), that pid needs no look at its parent:
/// it is the helper's child until the helper reaps it.
///
/// A pid 1 the zygote cloned is the helper itself (`pid1` is `helper`):
/// then only it may be there, not its children (which are the sandbox's).
pub(super) fn only_scaffolding(cg: Option<&Cgroup>, helper: libc::pid_t, pid1: Option<libc::pid_t>) -> bool {
    let Some(c) = cg else { return true };
    let Ok(procs) = c.procs() else { return false };
    let direct = pid1 == Some(helper);
    procs.into_iter().all(|pid| {
        pid == helper
            || Some(pid) == pid1
            // Gone since the list was read (reaped), or the outer helper's
            // child.
            || match parent_of(pid) {
                Ok(None) => true,
                Ok(Some(parent)) => parent == helper && !direct,
                Err(_) => false,
            }
    })
}

/// The parent of `pid` (`/proc/PID/stat`'s fourth field): `Ok(None)` once
/// it is gone (`ENOENT`, `ESRCH`), an error where it cannot be told (a
/// `/proc` mounted with `hidepid`, say): that counts as something else.
fn parent_of(pid: libc::pid_t) -> io::Result<Option<libc::pid_t>> {
    let stat = match super::cgroup::read_pseudo(format!("/proc/{pid}/stat")) {
        Ok(s) => s,
        Err(e) if e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ESRCH) => return Ok(None),
        Err(e) => return Err(e),
    };
    // The parent is field 4.
    portcullis_helper::procstat::field(&stat, 4)
        .and_then(|p| p.parse().ok())
        .map(Some)
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))
}

/// Kill what is left in the cgroup and remove it: nothing of the run may
/// be left when the guard looks (a process still running could plant again
/// behind it). A writable run whose cgroup stays populated fails.
pub(super) async fn empty_cgroup(
    cg: Option<&mut Cgroup>,
    plan: &Plan,
    warnings: &mut Vec<Warning>,
    failures: &mut Vec<Failure>,
) {
    let Some(c) = cg else { return };
    if c.kill_and_remove(Duration::from_secs(5)).await {
        return;
    }
    if c.populated() && (plan.writable || !plan.write_grants.is_empty()) {
        failures.push((
            Cleanup::Cgroup,
            "emptying the run's cgroup",
            c.path.clone(),
            io::Error::from_raw_os_error(libc::EBUSY),
        ));
    } else {
        warnings.push(Warning::CgroupNotRemoved { path: c.path.clone() });
    }
}

/// Git redirections a command created where nothing could be mounted
/// (the files did not exist): make them unreachable before any host git
/// runs; then gitlinks the command added, to repositories of its own, are
/// quarantined. `work` is one writable run's (see `sandbox::pending`: the
/// last writable run of a workspace to end does this for every run since
/// the last cleanup). A failure fails the run, never a mere warning.
pub(super) fn guard_git(work: &pending::Guard, warnings: &mut Vec<Warning>, failures: &mut Vec<Failure>) {
    let roots: Vec<&Path> = work.roots.iter().map(PathBuf::as_path).collect();
    let fail_guard = cfg!(debug_assertions) && work.fail_git_guard;
    for f in &work.git_guard {
        match guard::remove(&roots, f, fail_guard) {
            Ok(guard::Removed::Nothing) => {}
            Ok(guard::Removed::Deleted { entry }) if entry == *f || entry == lexical(f) => {
                warnings.push(Warning::GitGuardRemoved { path: f.clone() })
            }
            Ok(guard::Removed::Deleted { entry }) => {
                warnings.push(Warning::GitGuardRemovedLink { link: entry, target: f.clone() })
            }
            Ok(guard::Removed::Quarantined { entry, to, error }) => {
                warnings.push(Warning::GitGuardQuarantined { entry, target: f.clone(), to, error: error.to_string() })
            }
            Err(guard::Failed { step, entry, source }) => {
                warnings.push(Warning::GitGuardFailed {
                    target: f.clone(),
                    step: step.to_string(),
                    entry: entry.clone(),
                    error: source.to_string(),
                });
                failures.push((Cleanup::GitGuard, step, entry, source));
            }
        }
    }
    submodules::quarantine_new(work, &roots, warnings, failures);
}

/// Only now, with every process of the sandbox gone, is what the command
/// read of its stdin final.
pub(super) fn settle_stdin(relay: Option<stdin::Relay>, warnings: &mut Vec<Warning>) {
    if let Some(w) = relay.and_then(stdin::Relay::finish) {
        warnings.push(w);
    }
}

/// What the result is made of besides the plan.
pub(super) struct Ended {
    pub(super) waited: Waited,
    pub(super) refused_writes: super::RefusedWrites,
    pub(super) warnings: Vec<Warning>,
    pub(super) failures: Vec<Failure>,
    pub(super) start: Instant,
}

/// The result, or the error the run ended in (after any failure of a
/// security step, which comes first: see [`after_run`]).
pub(super) fn assemble(plan: &Plan, ended: Ended) -> Result<ExecResult, SandboxError> {
    let Ended { waited, refused_writes, warnings, failures, start } = ended;
    let helper_status = match waited.status {
        Ok(s) => s,
        Err(e) => return after_run(failures, Err(e)),
    };
    let helper_status = helper_status.map_or_else(|| "not yet exited".to_string(), |s| s.to_string());
    let mut applied: Option<Applied> = None;
    let mut ended: Option<Outcome> = None;
    // Killed by the timeout before the command started (the helper was
    // still setting the sandbox up): a timeout, not a setup failure.
    if waited.timed_out && !waited.records.iter().any(|r| matches!(r, Record::Applied(_))) {
        return after_run(
            failures,
            Err(SandboxError::TimedOutBeforeStart {
                workspace: plan.workspace.clone(),
                stage: "while the sandbox was set up (namespaces, mounts)",
                waited: start.elapsed(),
            }),
        );
    }
    // Cancelled before the command started, likewise: the kill took pid 1
    // while the helper was still setting it up, so the helper's step of
    // the moment may have failed for that alone (a broken pipe while
    // handing over the mounts or making the network namespace): a cancel,
    // not a setup fault (chaos::r0791).
    if waited.cancelled && !waited.records.iter().any(|r| matches!(r, Record::Applied(_))) {
        return after_run(failures, Err(SandboxError::CancelledBeforeStart { workspace: plan.workspace.clone() }));
    }
    for r in &waited.records {
        match *r {
            Record::Error { step, errno, detail } => {
                return after_run(failures, Err(setup_error(plan, step, errno, detail)));
            }
            Record::Applied(a) => applied = Some(a),
            Record::Exited(code) => ended = Some(Outcome::Exited { code }),
            Record::Signaled(signal) => ended = Some(Outcome::Signaled { signal }),
        }
    }
    // The sandbox's kill wins over what pid 1 reported: the command was
    // killed (or raced the kill) because its time ran out.
    let outcome = match ended {
        _ if waited.timed_out => Outcome::TimedOut,
        _ if waited.cancelled => Outcome::Cancelled,
        Some(o) => o,
        None => return after_run(failures, Err(SandboxError::HelperDied { status: helper_status })),
    };
    let applied = applied.unwrap_or_default();
    let enforcement = Enforcement {
        backend: super::result::EnforcedBy::Sandbox,
        mode: plan.spec.mode,
        landlock: if applied.landlock_full {
            LandlockStatus::Full
        } else if applied.landlock_partial {
            LandlockStatus::Partial
        } else {
            LandlockStatus::None
        },
        landlock_abi: applied.landlock_abi,
        landlock_gaps: plan.landlock_gaps.clone(),
        seccomp: applied.seccomp,
        seccomp_sha256: plan.seccomp_sha256.clone(),
        readonly_mounts: applied.readonly_mounts,
        // The plan's, kept: a run that could not make its cgroup failed.
        kill_mechanism: plan.containment.kill_mechanism,
        cgroup_fallback: plan.containment.cgroup_fallback.clone(),
        limits: plan.containment.limits,
        clone: applied.clone,
        network: plan.spec.network,
        network_namespace: super::NetworkNamespace::of(&plan.spec),
    };
    let result = ExecResult {
        outcome,
        truncated: waited.truncated,
        writable: plan.writable,
        write_grants: plan.write_grants.clone(),
        duration: start.elapsed(),
        enforcement,
        stdout: waited.stdout,
        stderr: waited.stderr,
        refused_writes,
        warnings,
    };
    after_run(failures, Ok(result))
}

#[cfg(test)]
mod tests {
    /// The outside check at an early end: with a pid 1 the zygote cloned
    /// (the helper is pid 1), a live child of pid 1 in the run's cgroup is
    /// the sandbox's, not scaffolding (a review found it let through);
    /// pid 1 alone is. With an outer helper, pid 1 (its child) is let
    /// through and pid 1's child is not.
    #[test]
    fn a_child_of_a_direct_pid1_is_not_scaffolding() {
        let made = super::super::cgroup::discover().ok().and_then(|h| {
            let plan = h.plan(None, None).ok()?;
            h.create(&plan).ok()
        });
        let Some(mut cg) = made else {
            assert!(
                std::env::var_os("PORTCULLIS_REQUIRE_ALL_LAYERS").is_none(),
                "no cgroup leaf can be made here, and every layer is required"
            );
            eprintln!("skipping: no cgroup leaf can be made here");
            return;
        };
        // A stand-in pid 1 with a child, both moved into the leaf.
        let mut p = std::process::Command::new("/bin/sh")
            .args(["-c", "sleep 30 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{e}"));
        let mut line = String::new();
        let out = p.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line).unwrap_or_else(|e| panic!("{e}"));
        let child: libc::pid_t = line.trim().parse().unwrap_or_else(|e| panic!("{e}"));
        let pid1 = p.id() as libc::pid_t;
        std::fs::write(cg.path.join("cgroup.procs"), pid1.to_string()).unwrap_or_else(|e| panic!("{e}"));
        // Control: pid 1 alone passes, as a direct helper and under an
        // outer one (whose pid is this process's parent, not in the leaf).
        let alone = super::only_scaffolding(Some(&cg), pid1, Some(pid1));
        std::fs::write(cg.path.join("cgroup.procs"), child.to_string()).unwrap_or_else(|e| panic!("{e}"));
        let direct = super::only_scaffolding(Some(&cg), pid1, Some(pid1));
        // With an outer helper `pid1`'s parent role is the helper's: its
        // own child passes, a grandchild would not.
        let outer = super::only_scaffolding(Some(&cg), pid1, None);
        // SAFETY: kill(2) on a process this test started.
        unsafe { libc::kill(child, libc::SIGKILL) };
        let _ = p.kill();
        let _ = p.wait();
        let _ = cg.kill_and_remove_blocking(std::time::Duration::from_secs(5));
        assert!(alone, "control: pid 1 alone is not taken for scaffolding");
        assert!(outer, "control: an outer helper's child is not taken for scaffolding");
        assert!(!direct, "a live child of a pid 1 the zygote cloned passed the outside check");
    }
}
