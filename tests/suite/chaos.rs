//! Chaos through the `Workspace` (issue 12, "Reliability"): many commands,
//! up to 8 in flight, each a sleeper tree, a `setsid` daemon, a fork storm
//! under the `pids` limit, an output flood, a quick command or a background
//! job, with random timeouts, cancellations and kills of jobs; then
//! `dispose`, and a check from outside that nothing is left behind: no
//! process carrying this run's marker, no cgroup leaf of this process, no
//! new mount, no new descriptor, no job still running. Every outcome is
//! checked for sanity on the way (a timed-out command says so, a cancelled
//! one too, a flood is truncated at the cap, no fault).
//!
//! The cases come from a seeded PRNG: the seed is printed, and
//! `PORTCULLIS_CHAOS_SEED=<n>` replays the same cases (the timing between
//! them is the machine's). `PORTCULLIS_CHAOS_COUNT` sets the number of
//! commands (default 300, for CI; the full run is 10 000).
//!
//! The run happens in a re-run of this one test in a child process, alone
//! in it: the descriptor, mount and cgroup counts of a test process shared
//! with other tests (running in parallel) would not be this run's alone.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portcullis::policy::WorkspacePolicy;
use portcullis::runner::{Exec, ExecOptions};
use portcullis::sandbox::Outcome;
use portcullis::workspace::jobs::{JobStatus, Started};
use portcullis::workspace::Workspace;
use tokio_util::sync::CancellationToken;

use super::util::{
    appears, bin_dir, descendants, host_procs_containing, rt, sandbox, slot_helpers, survivors, workspace_with_sandbox,
    MemAudit, Ws,
};

const CHILD: &str = "PORTCULLIS_CHAOS_CHILD";
const IN_FLIGHT: usize = 8;
/// The output cap of the policy (stdout and stderr together).
const CAP: usize = 256 * 1024;
/// The pids limit of the policy.
const PIDS: u64 = 64;

/// xorshift64*: small, seedable, enough to pick cases.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// In `lo..hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }
    /// True with probability `pct` percent.
    fn chance(&mut self, pct: u64) -> bool {
        self.next() % 100 < pct
    }
}

/// What a case runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `sh -c 'sleep & sleep & wait'`: ends only by its timeout or cancel.
    Sleepers,
    /// A `setsid` process meant to outlive the command.
    Daemon(u8),
    /// More processes than the pids limit allows.
    Storm(u8),
    /// `yes | head -c 50M`: far more output than the cap.
    Flood,
    /// `yes`, ended by its timeout (or cancel).
    Yes,
    /// `true`.
    True,
    /// `echo`: its output is checked.
    Echo,
    /// A background job.
    Job(JobKind, Fate),
    /// `shell_kill` of a random job the workspace knows.
    KillRandom,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum JobKind {
    Sleepers,
    Daemon,
    Flood,
    Echo,
    Storm,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Killed by `shell_kill` after this many ms.
    KillAfter(u64),
    /// Left alone with this timeout (ms): it times out, or ends by itself.
    Timeout(u64),
    /// Left running until `dispose`.
    UntilDispose,
}

#[derive(Debug, Clone)]
struct Case {
    n: usize,
    kind: Kind,
    /// The caller's timeout, ms.
    timeout: Option<u64>,
    /// A cancellation after this many ms.
    cancel: Option<u64>,
}

/// The command line of a kind; `m` is the run's marker (digits), carried by
/// every process the line starts, so that a survivor is seen from outside.
fn line(kind: Kind, m: &str) -> String {
    match kind {
        Kind::Sleepers | Kind::Job(JobKind::Sleepers, _) => format!("sh -c 'sleep 30.{m} & sleep 30.{m} & wait'"),
        Kind::Daemon(0) | Kind::Job(JobKind::Daemon, _) => format!("sh -c 'setsid sleep 60.{m} & echo {m}'"),
        Kind::Daemon(1) => format!("setsid -f sleep 60.{m}"),
        Kind::Daemon(_) => format!("sh -c '(setsid sh -c \"sleep 60.{m} & sleep 60.{m}\" &); sleep 0.0{m}'"),
        Kind::Storm(0) | Kind::Job(JobKind::Storm, _) => {
            format!("sh -c 'i=0; while [ $i -lt 100 ]; do sleep 30.{m} & i=$((i+1)); done; wait'")
        }
        Kind::Storm(_) => format!("sh -c 'while true; do sleep 30.{m} & done'"),
        Kind::Flood => format!("yes {m} | head -c 50M"),
        Kind::Job(JobKind::Flood, _) => format!("yes {m} | head -c 5M"),
        Kind::Yes => format!("yes {m}"),
        Kind::True => format!("true {m}"),
        Kind::Echo | Kind::Job(JobKind::Echo, _) => format!("echo {m}"),
        Kind::KillRandom => String::new(),
    }
}

fn pick(rng: &mut Rng, n: usize, count: usize, until_dispose: &mut usize) -> Case {
    let short = |rng: &mut Rng| if rng.chance(30) { rng.range(1, 60) } else { rng.range(60, 1500) };
    let maybe_cancel = |rng: &mut Rng, pct: u64| rng.chance(pct).then(|| rng.range(0, 1200));
    let r = rng.range(0, 100);
    let (kind, timeout, cancel) = match r {
        0..=11 => {
            let t = short(rng);
            (Kind::Sleepers, Some(t), maybe_cancel(rng, 40))
        }
        12..=21 => {
            let v = rng.range(0, 3) as u8;
            let t = rng.chance(30).then(|| short(rng));
            (Kind::Daemon(v), t, maybe_cancel(rng, 20))
        }
        22..=31 => {
            let v = rng.range(0, 2) as u8;
            (Kind::Storm(v), Some(rng.range(200, 2500)), maybe_cancel(rng, 20))
        }
        32..=39 => (Kind::Flood, rng.chance(20).then(|| short(rng)), maybe_cancel(rng, 15)),
        40..=47 => (Kind::Yes, Some(rng.range(20, 800)), maybe_cancel(rng, 20)),
        48..=59 => (Kind::True, rng.chance(20).then(|| short(rng)), maybe_cancel(rng, 20)),
        60..=67 => (Kind::Echo, rng.chance(10).then(|| short(rng)), maybe_cancel(rng, 10)),
        68..=93 => {
            let jk = match rng.range(0, 5) {
                0 => JobKind::Sleepers,
                1 => JobKind::Daemon,
                2 => JobKind::Flood,
                3 => JobKind::Echo,
                _ => JobKind::Storm,
            };
            // A few jobs are left for `dispose` to kill; the rest end
            // before, or the registry's 8 slots would fill up for good.
            let fate = if rng.chance(45) {
                Fate::KillAfter(rng.range(0, 1000))
            } else if *until_dispose < 4 && (rng.chance(2) || n + 20 >= count) {
                *until_dispose += 1;
                Fate::UntilDispose
            } else {
                Fate::Timeout(rng.range(100, 2500))
            };
            (Kind::Job(jk, fate), None, None)
        }
        _ => (Kind::KillRandom, None, None),
    };
    Case { n, kind, timeout, cancel }
}

/// What the run saw, for the report and the checks at the end.
#[derive(Default)]
struct Tally {
    counts: BTreeMap<String, usize>,
    surprises: Vec<String>,
}

impl Tally {
    fn count(&mut self, what: String) {
        *self.counts.entry(what).or_default() += 1;
    }
}

type Shared = Arc<Mutex<Tally>>;

fn note(t: &Shared, what: String) {
    if let Ok(mut t) = t.lock() {
        t.count(what);
    }
}

fn surprise(t: &Shared, c: &Case, what: String) {
    let s = format!("case {} {:?} (timeout {:?} ms, cancel {:?} ms): {what}", c.n, c.kind, c.timeout, c.cancel);
    eprintln!("SURPRISE {s}");
    if let Ok(mut t) = t.lock() {
        t.surprises.push(s);
    }
}

fn outcome_name(o: &Outcome) -> &'static str {
    match o {
        Outcome::Exited { .. } => "exited",
        Outcome::Signaled { .. } => "signaled",
        Outcome::TimedOut => "timed-out",
        Outcome::Cancelled => "cancelled",
    }
}

/// Run one foreground case and judge its outcome.
async fn foreground(ws: &Workspace, c: &Case, m: &str, t: &Shared) {
    let cancel = CancellationToken::new();
    let opts = ExecOptions {
        timeout: c.timeout.map(Duration::from_millis),
        cancel: c.cancel.map(|_| cancel.clone()),
        ..ExecOptions::default()
    };
    if let Some(ms) = c.cancel {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            cancel.cancel();
        });
    }
    let started = Instant::now();
    let got = ws.exec(&line(c.kind, m), opts).await;
    let took = started.elapsed();
    // Stop a pending cancel from outliving the case (harmless either way).
    cancel.cancel();
    let r = match got {
        Ok(Exec::Ran(r)) => r,
        Ok(Exec::Cancelled(n)) => {
            note(t, format!("{}: cancelled before the start", kind_name(c.kind)));
            if c.cancel.is_none() {
                surprise(t, c, format!("cancelled before the start without a cancel: {}", n.message));
            }
            return;
        }
        Ok(Exec::Refused(why)) => return surprise(t, c, format!("refused: {why}")),
        // The caller's own timeout ran out before the command started.
        Err(e) if e.kind() == "timed-out" && c.timeout.is_some() => {
            return note(t, format!("{}: timed out before the start", kind_name(c.kind)));
        }
        Err(e) => return surprise(t, c, format!("error (kind {}): {}", e.kind(), portcullis::error_chain(&e))),
    };
    let res = &r.result;
    let o = &res.outcome;
    note(t, format!("{}: {}", kind_name(c.kind), outcome_name(o)));
    let (stdout, stderr) = (String::from_utf8_lossy(&res.stdout), String::from_utf8_lossy(&res.stderr));
    let show = || format!("{o:?} after {took:?}, truncated {}, stderr {:?}", res.truncated, tail(&stderr));
    // The outcomes a case may have at all.
    match o {
        Outcome::TimedOut if c.timeout.is_none() => surprise(t, c, format!("timed out without a timeout: {}", show())),
        Outcome::Cancelled if c.cancel.is_none() => surprise(t, c, format!("cancelled without a cancel: {}", show())),
        Outcome::Signaled { .. } => surprise(t, c, format!("signaled: {}", show())),
        _ => {}
    }
    if res.stdout.len() + res.stderr.len() > CAP {
        surprise(t, c, format!("{} bytes kept over a cap of {CAP}: {}", res.stdout.len() + res.stderr.len(), show()));
    }
    // A command ended by the sandbox ends soon after its deadline.
    let deadline = match (c.timeout, c.cancel) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if let (Some(d), Outcome::TimedOut | Outcome::Cancelled) = (deadline, o) {
        if took > Duration::from_millis(d) + Duration::from_secs(5) {
            surprise(t, c, format!("ended {took:?} after a deadline of {d} ms: {}", show()));
        }
    }
    let exited = |code: i32| matches!(o, Outcome::Exited { code: c } if *c == code);
    match c.kind {
        // Ends only by its deadline.
        Kind::Sleepers | Kind::Yes => {
            if !matches!(o, Outcome::TimedOut | Outcome::Cancelled) {
                surprise(t, c, format!("ended by itself: {}", show()));
            }
        }
        // The daemon does not hold the command: it ends as its main
        // process ends (and the daemon with it, checked at the end).
        Kind::Daemon(v) => {
            if let Outcome::Exited { .. } = o {
                if !exited(0) {
                    surprise(t, c, format!("the daemon's command failed: {}", show()));
                }
                if v == 0 && stdout != format!("{m}\n") {
                    surprise(t, c, format!("stdout {stdout:?}: {}", show()));
                }
                if took > Duration::from_secs(5) {
                    surprise(t, c, format!("the command waited for its daemon: {}", show()));
                }
            }
        }
        // Under the pids limit a fork fails, and says so; without it
        // (no cgroup) the storm runs into its timeout.
        Kind::Storm(_) => {
            if let Outcome::Exited { .. } = o {
                let limited = res.enforcement.limits.pids.is_some();
                let said = stderr.contains("fork") || stderr.contains("Resource temporarily unavailable");
                if exited(0) || !limited || !said {
                    surprise(t, c, format!("the storm ended without a failed fork (limited: {limited}): {}", show()));
                }
            }
        }
        Kind::Flood => {
            if let Outcome::Exited { .. } = o {
                if !exited(0) || !res.truncated || res.stdout.len() + res.stderr.len() < CAP - 64 {
                    surprise(t, c, format!("the flood was not cut at the cap: {} bytes, {}", res.stdout.len(), show()));
                }
            }
        }
        Kind::True => {
            if matches!(o, Outcome::Exited { .. }) && !exited(0) {
                surprise(t, c, format!("true failed: {}", show()));
            }
        }
        Kind::Echo => {
            if matches!(o, Outcome::Exited { .. }) && (!exited(0) || stdout != format!("{m}\n")) {
                surprise(t, c, format!("echo said {stdout:?}: {}", show()));
            }
        }
        Kind::Job(..) | Kind::KillRandom => {}
    }
}

fn kind_name(k: Kind) -> String {
    match k {
        Kind::Job(jk, f) => format!(
            "job {jk:?} {}",
            match f {
                Fate::KillAfter(_) => "killed",
                Fate::Timeout(_) => "timeout",
                Fate::UntilDispose => "until-dispose",
            }
        ),
        k => format!("{k:?}"),
    }
}

fn tail(s: &str) -> String {
    let cut = s.char_indices().rev().nth(300).map_or(0, |(i, _)| i);
    s[cut..].to_string()
}

/// Start a job and see it through its fate.
async fn job(ws: &Workspace, c: &Case, jk: JobKind, fate: Fate, m: &str, t: &Shared) {
    let timeout = match fate {
        Fate::Timeout(ms) => Some(Duration::from_millis(ms)),
        // A killed job is killed long before; one left for `dispose`
        // runs under the policy's background timeout.
        _ => None,
    };
    let opts = ExecOptions { timeout, ..ExecOptions::default() };
    let id = match ws.start_shell(&line(c.kind, m), opts).await {
        Ok(Started::Job { id, .. }) => id,
        Ok(Started::Refused(why)) => {
            // The registry's max_jobs: refused, and said so.
            let s = why.to_string();
            if s.contains("max_jobs") || s.contains("at most") || s.contains("background jobs") {
                note(t, format!("{}: refused (max_jobs)", kind_name(c.kind)));
            } else {
                surprise(t, c, format!("start refused: {s}"));
            }
            return;
        }
        Err(e) => return surprise(t, c, format!("start: error (kind {}): {}", e.kind(), portcullis::error_chain(&e))),
    };
    match fate {
        Fate::UntilDispose => {
            note(t, format!("{}: started", kind_name(c.kind)));
        }
        Fate::KillAfter(ms) => {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            match ws.shell_kill(&id).await {
                Ok(k) => {
                    note(t, format!("{}: {:?}", kind_name(c.kind), k.status));
                    // Killed by this kill, or by a KillRandom case before
                    // it (`already_ended`); or it had ended by itself.
                    let ok = matches!(k.status, JobStatus::Killed | JobStatus::Exited);
                    if !ok {
                        surprise(t, c, format!("kill of {id}: {k:?}"));
                    }
                    // (A storm may end by itself, on a failed fork.)
                    if jk == JobKind::Sleepers && k.status == JobStatus::Exited {
                        surprise(t, c, format!("a sleeper job ended by itself: {k:?}"));
                    }
                    check_output(ws, c, &id, jk, t).await;
                }
                // Only another case's KillRandom may have forgotten it: not
                // with 32 ended jobs kept and 8 slots.
                Err(e) => surprise(t, c, format!("kill of {id}: kind {}: {e}", e.kind())),
            }
        }
        Fate::Timeout(ms) => {
            // Wait for the end, reading with cursors.
            let deadline = Instant::now() + Duration::from_millis(ms) + Duration::from_secs(10);
            let mut cursor = None;
            loop {
                match ws.shell_output(&id, cursor, Duration::from_millis(500)).await {
                    Ok(o) if o.status == JobStatus::Running => {
                        if Instant::now() > deadline {
                            return surprise(t, c, format!("{id} still running {ms} ms + 10 s after its start"));
                        }
                        cursor = Some(o.cursor);
                    }
                    Ok(o) => {
                        note(t, format!("{}: {:?}", kind_name(c.kind), o.status));
                        let ok = match jk {
                            JobKind::Sleepers => o.status == JobStatus::TimedOut,
                            JobKind::Storm => matches!(o.status, JobStatus::TimedOut | JobStatus::Exited),
                            _ => matches!(o.status, JobStatus::TimedOut | JobStatus::Exited),
                        };
                        // A job killed here is one a KillRandom case chose.
                        if !ok && o.status != JobStatus::Killed {
                            surprise(t, c, format!("{id} ended as {:?}: {o:?}", o.status));
                        }
                        if o.status == JobStatus::TimedOut && o.exit_code != Some(124) {
                            surprise(t, c, format!("{id} timed out with exit code {:?}", o.exit_code));
                        }
                        break;
                    }
                    Err(e) => return surprise(t, c, format!("output of {id}: kind {}: {e}", e.kind())),
                }
            }
            check_output(ws, c, &id, jk, t).await;
        }
    }
}

/// An ended job's output, read whole: within the cap; a flood that ran to
/// its end dropped bytes and says so; echo said its word.
async fn check_output(ws: &Workspace, c: &Case, id: &str, jk: JobKind, t: &Shared) {
    let o = match ws.shell_output(id, None, Duration::ZERO).await {
        Ok(o) => o,
        Err(e) => return surprise(t, c, format!("output of {id}: kind {}: {e}", e.kind())),
    };
    if o.status == JobStatus::Running {
        return surprise(t, c, format!("{id} running after its end: {o:?}"));
    }
    if o.stdout.len() + o.stderr.len() > CAP {
        surprise(t, c, format!("{id} kept {} bytes over a cap of {CAP}", o.stdout.len() + o.stderr.len()));
    }
    if o.truncated != (o.dropped_bytes > 0) {
        surprise(t, c, format!("{id}: truncated {} but dropped {}", o.truncated, o.dropped_bytes));
    }
    if o.status == JobStatus::Exited {
        match jk {
            JobKind::Flood if o.cursor != 5 << 20 || o.dropped_bytes == 0 || o.exit_code != Some(0) => {
                surprise(t, c, format!("{id}: a 5 MiB flood: cursor {}, dropped {}", o.cursor, o.dropped_bytes))
            }
            JobKind::Echo | JobKind::Daemon if o.exit_code != Some(0) => {
                surprise(t, c, format!("{id}: exit code {:?}, stderr {:?}", o.exit_code, tail(&o.stderr)))
            }
            _ => {}
        }
    }
}

/// Kill a random job the workspace knows (running or ended).
async fn kill_random(ws: &Workspace, c: &Case, pick: u64, t: &Shared) {
    let ids = ws.job_ids();
    if ids.is_empty() {
        return note(t, "KillRandom: no job".into());
    }
    let id = &ids[(pick as usize) % ids.len()];
    match ws.shell_kill(id).await {
        Ok(k) => {
            note(t, format!("KillRandom: {:?}{}", k.status, if k.already_ended { " (had ended)" } else { "" }));
            if k.status == JobStatus::Running {
                surprise(t, c, format!("kill of {id} returned while it runs: {k:?}"));
            }
        }
        // Forgotten between the listing and the kill.
        Err(e) if e.kind() == "job-not-found" => note(t, "KillRandom: forgotten".into()),
        Err(e) => surprise(t, c, format!("kill of {id}: kind {}: {e}", e.kind())),
    }
}

fn fds() -> BTreeMap<String, String> {
    std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| {
            let target = std::fs::read_link(e.path()).map(|p| p.display().to_string()).unwrap_or_default();
            (e.file_name().to_string_lossy().into_owned(), target)
        })
        .collect()
}

fn mounts() -> BTreeSet<String> {
    std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default().lines().map(str::to_owned).collect()
}

/// This process's cgroup leaves (`portcullis-<pid>-<n>`).
fn our_leaves() -> Vec<PathBuf> {
    let Ok(host) = sandbox().cgroup_host().cloned() else { return Vec::new() };
    let prefix = format!("portcullis-{}-", std::process::id());
    std::fs::read_dir(&host.parent)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}

/// Start a sleeper tree, a `setsid` daemon and a fork storm as jobs (those
/// max_jobs admits; at least one) and wait until their processes are seen
/// on the host, and the cgroup leaves where the host has cgroups.
async fn running_jobs_seen(w: &Workspace, m: &str) {
    let lines = [
        format!("sh -c 'sleep 30.{m} & sleep 30.{m} & wait'"),
        format!("sh -c 'setsid sleep 60.{m} & sleep 60.{m}'"),
        format!("sh -c 'i=0; while [ $i -lt 100 ]; do sleep 30.{m} & i=$((i+1)); done; wait'"),
    ];
    let mut started = 0;
    for l in &lines {
        match w.start_shell(l, ExecOptions::default()).await {
            Ok(Started::Job { .. }) => started += 1,
            Ok(Started::Refused(why)) if why.to_string().contains("max_jobs") => {}
            other => panic!("start {l}: {other:?}"),
        }
    }
    assert!(started > 0 || w.job_ids().len() >= IN_FLIGHT, "no job started");
    let t = Instant::now();
    // Leaves are made where this caller may make them (not as uid 65534
    // on a host that delegates no cgroup to it).
    let cgroups = sandbox().cgroup_host().is_ok_and(|h| h.plan(None, None).is_ok());
    while (host_procs_containing(m).is_empty() || (cgroups && our_leaves().is_empty()))
        && t.elapsed() < Duration::from_secs(10)
    {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!host_procs_containing(m).is_empty(), "control: the running jobs' processes are not seen");
    assert!(!cgroups || !our_leaves().is_empty(), "control: the running jobs' cgroup leaves are not seen");
}

/// Our leaves still there after up to 3 s for the last ones to be removed.
fn leaves_left() -> Vec<PathBuf> {
    let mut leaves = our_leaves();
    let t = Instant::now();
    while !leaves.is_empty() && t.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(50));
        leaves = our_leaves();
    }
    leaves
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// The chaos run, in a child process of its own (see the module docs).
#[test]
fn r0790_chaos_through_the_workspace_leaves_nothing_behind() {
    if std::env::var_os(CHILD).is_some() {
        return chaos();
    }
    let Some(name) = std::thread::current().name().map(str::to_owned) else {
        panic!("r0790: libtest names the test's thread after it; this thread has no name");
    };
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("r0790: the test binary: {e}"));
    let count = env_u64("PORTCULLIS_CHAOS_COUNT").unwrap_or(300);
    let out = tempfile::tempfile().unwrap_or_else(|e| panic!("r0790: a file for the run's output: {e}"));
    let err = out.try_clone().unwrap_or_else(|e| panic!("r0790: {e}"));
    let mut child = std::process::Command::new(exe)
        .args(["--exact", &name, "--test-threads=1", "--nocapture"])
        .env(CHILD, "1")
        .env("PORTCULLIS_BIN_DIR", bin_dir())
        .stdin(std::process::Stdio::null())
        .stdout(out.try_clone().unwrap_or_else(|e| panic!("r0790: {e}")))
        .stderr(err)
        .spawn()
        .unwrap_or_else(|e| panic!("r0790: re-run in a child: {e}"));
    // A hang is a finding too: a generous bound (the default count takes
    // well under a minute on 2 cores).
    let limit = Duration::from_secs(120 + count / 4);
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if started.elapsed() > limit => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => panic!("r0790: waiting for the child: {e}"),
        }
    };
    let text = {
        use std::io::{Read, Seek};
        let mut f = out;
        let mut s = String::new();
        let _ = f.seek(std::io::SeekFrom::Start(0));
        let _ = f.read_to_string(&mut s);
        s
    };
    // Pass the seed and the tally on where they are seen.
    // (libtest's "test <name> ... " starts the line of the first one.)
    for l in text.lines().filter_map(|l| l.find("chaos: ").or_else(|| l.find("SKIPPED ")).map(|i| &l[i..])) {
        use std::io::Write;
        let _ = writeln!(std::io::stderr().lock(), "{l}");
    }
    let Some(status) = status else {
        panic!("r0790: the chaos run hung (over {limit:?}); its output:\n{text}");
    };
    assert!(status.success() && text.contains("test result: ok. 1 passed"), "r0790: the chaos run failed:\n{text}");
}

fn chaos() {
    let count = env_u64("PORTCULLIS_CHAOS_COUNT").unwrap_or(300) as usize;
    let seed = env_u64("PORTCULLIS_CHAOS_SEED").unwrap_or_else(|| {
        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(1, |d| d.as_nanos() as u64);
        t ^ u64::from(std::process::id()) << 32
    });
    // The marker: digits unique to this run, in every process's argv
    // (`sleep 30.<m>` sleeps a little over 30 s).
    let m = format!("9{}{:04}", std::process::id(), seed % 10_000);
    println!("chaos: seed {seed} (PORTCULLIS_CHAOS_SEED={seed} replays it), {count} commands, marker {m}");
    let ws = Ws::new();
    let text = format!(
        "workspace = {:?}\n\
         [limits]\npids = {PIDS}\n\
         [shell]\ninterpreter = \"sh\"\n\
         allow = [\"sh\", \"sleep\", \"yes\", \"head\", \"true\", \"echo\", \"setsid\", \"seq\"]\n\
         timeout = \"10s\"\nmax_output_bytes = {CAP}\n\
         [shell.background]\nmax_jobs = {IN_FLIGHT}\ntimeout = \"20s\"\n",
        ws.path()
    );
    let policy = WorkspacePolicy::from_toml(&text).unwrap_or_else(|e| panic!("policy: {e}"));
    let rt = rt();
    // Controls, which also warm up the runtime's and the sandbox's lazily
    // made descriptors before the counts: the checks at the end see what
    // they look for. A marked process on the host is seen...
    let mut host = std::process::Command::new("sleep")
        .arg(format!("30.{m}"))
        .spawn()
        .unwrap_or_else(|e| panic!("control: sleep on the host: {e}"));
    let seen = appears(&m);
    let _ = host.kill();
    let _ = host.wait();
    assert!(seen, "control: a marked host process is not seen");
    assert!(survivors(&m).is_empty(), "control: the marked host process is still seen once gone");
    // ... and so are a running job's processes and its cgroup leaf (where
    // the host has cgroups), until dispose.
    rt.block_on(async {
        let (w, _) = own_workspace(policy.clone());
        match w.exec(&format!("echo {m}"), ExecOptions::default()).await {
            Ok(Exec::Ran(r)) => assert_eq!(r.result.stdout, format!("{m}\n").into_bytes(), "{r:?}"),
            other => panic!("warm-up: {other:?}"),
        }
        running_jobs_seen(&w, &m).await;
        w.dispose().await;
    });
    assert!(survivors(&m).is_empty(), "control: dispose left {:?}", host_procs_containing(&m));
    let fds_before = fds();
    let mounts_before = mounts();
    let leaves = leaves_left();
    assert!(leaves.is_empty(), "control: dispose left cgroup leaves: {leaves:?}");

    let mut rng = Rng::new(seed);
    let mut until_dispose = 0;
    let cases: Vec<(Case, u64)> = (0..count)
        .map(|n| {
            let c = pick(&mut rng, n, count, &mut until_dispose);
            (c, rng.next())
        })
        .collect();
    let tally: Shared = Arc::default();
    let started = Instant::now();
    let (w, _audit) = own_workspace(policy);
    rt.block_on(async {
        let queue = Arc::new(Mutex::new(cases.into_iter()));
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..IN_FLIGHT {
            let (w, queue, t, m) = (w.clone(), Arc::clone(&queue), Arc::clone(&tally), m.clone());
            workers.spawn(async move {
                loop {
                    let next = queue.lock().ok().and_then(|mut q| q.next());
                    let Some((c, extra)) = next else { break };
                    match c.kind {
                        Kind::Job(jk, fate) => job(&w, &c, jk, fate, &m, &t).await,
                        Kind::KillRandom => kill_random(&w, &c, extra, &t).await,
                        _ => foreground(&w, &c, &m, &t).await,
                    }
                }
            });
        }
        while let Some(done) = workers.join_next().await {
            if let Err(e) = done {
                if let Ok(mut t) = tally.lock() {
                    t.surprises.push(format!("a worker panicked: {e}"));
                }
            }
        }
        println!("chaos: {count} commands in {:?}", started.elapsed());
        // Whatever the random run left, dispose has jobs to kill: a
        // sleeper tree, a daemon and a storm (while max_jobs lets them in).
        running_jobs_seen(&w, &m).await;
        println!("chaos: {} marked processes before dispose", host_procs_containing(&m).len());
        // CONTROL for the slot check below: the workspace's pre-made
        // sandboxes are there, from outside (they are being made again
        // after each command, so wait for one).
        let me = std::process::id();
        let waited = std::time::Instant::now();
        while slot_helpers(&descendants(me)).is_empty() && waited.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let slots = slot_helpers(&descendants(me));
        assert!(!slots.is_empty(), "control: no pre-made sandbox before dispose");
        if let Some(p) = w.pool_status() {
            println!("chaos: {} commands took a pre-made sandbox, {} found none ready or fitting", p.taken, p.missed);
        }
        let t = Instant::now();
        w.dispose().await;
        println!("chaos: dispose took {:?}", t.elapsed());
        // The registry: every job ended, none starts any more.
        for id in w.job_ids() {
            match w.shell_output(&id, None, Duration::ZERO).await {
                Ok(o) if o.status == JobStatus::Running => panic!("job {id} still running after dispose: {o:?}"),
                Ok(_) => {}
                Err(e) => panic!("job {id} after dispose: {e}"),
            }
        }
        let after = w.start_shell(&format!("sleep 30.{m}"), ExecOptions::default()).await;
        assert!(matches!(&after, Err(e) if e.kind() == "disposed"), "a job started after dispose: {after:?}");
    });
    drop(w);
    let tally = match Arc::try_unwrap(tally) {
        Ok(t) => t.into_inner().unwrap_or_else(|e| e.into_inner()),
        Err(_) => panic!("the tally is still shared"),
    };
    for (what, n) in &tally.counts {
        println!("chaos:   {n:5} {what}");
    }

    // From outside: no process of this run, no cgroup leaf, no mount, no
    // descriptor.
    let left = survivors(&m);
    assert!(left.is_empty(), "seed {seed}: processes left behind after dispose: {left:?}");
    // No pool slot: no process of ours at all (the slots' helpers and their
    // pid 1s are children of this process and of those helpers).
    let mut ours = descendants(std::process::id());
    for _ in 0..100 {
        if ours.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        ours = descendants(std::process::id());
    }
    let cmdlines: Vec<String> = ours
        .iter()
        .map(|p| {
            String::from_utf8_lossy(&std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default()).replace('\0', " ")
        })
        .collect();
    assert!(ours.is_empty(), "seed {seed}: processes of ours left after dispose (pool slots?): {cmdlines:?}");
    let leaves = leaves_left();
    assert!(leaves.is_empty(), "seed {seed}: cgroup leaves left behind: {leaves:?}");
    let mounts_after = mounts();
    let new_mounts: Vec<&String> = mounts_after.difference(&mounts_before).collect();
    let gone_mounts: Vec<&String> = mounts_before.difference(&mounts_after).collect();
    assert!(new_mounts.is_empty() && gone_mounts.is_empty(), "seed {seed}: mounts +{new_mounts:?} -{gone_mounts:?}");
    let fds_after = fds();
    let leaked: Vec<(&String, &String)> = fds_after.iter().filter(|(fd, _)| !fds_before.contains_key(*fd)).collect();
    assert!(leaked.is_empty(), "seed {seed}: descriptors left open: {leaked:?} (before: {fds_before:?})");
    assert!(
        tally.surprises.is_empty(),
        "seed {seed}: {} surprising outcome(s):\n{}",
        tally.surprises.len(),
        tally.surprises.join("\n")
    );
    // The run did what it says: each kind ran (a count this small may
    // miss one only by a very unlikely seed).
    if count >= 300 {
        for k in ["Sleepers: ", "Daemon(", "Storm(", "Flood: ", "Yes: ", "True: ", "Echo: ", "job "] {
            assert!(tally.counts.keys().any(|c| c.starts_with(k)), "seed {seed}: no {k} case ran: {:?}", tally.counts);
        }
    }
    drop(rt);
}

/// Found by the chaos run (issue 12): a cancellation that lands while the
/// sandbox is being set up (the helper handing its mounts to pid 1, which
/// the kill took) was reported as a setup fault ("sandbox setup failed
/// while handing the idmapped mounts to pid 1: Broken pipe"), kind
/// `fault`, and a background job killed then as `failed`. A cancel is a
/// cancel at any moment: `Exec::Cancelled` before the command started,
/// `cancelled` after. Cancels at delays spread over the set-up's few
/// milliseconds; the control: the same command uncancelled runs.
#[test]
fn r0791_a_cancel_during_the_setup_is_a_cancel_not_a_fault() {
    let ws = Ws::new();
    let text = format!("workspace = {:?}\n[shell]\ninterpreter = \"sh\"\nallow = [\"sleep\"]\n", ws.path());
    let policy = WorkspacePolicy::from_toml(&text).unwrap_or_else(|e| panic!("policy: {e}"));
    let (w, _) = own_workspace(policy);
    let m = format!("0{}", std::process::id());
    let rt = rt();
    let (mut before, mut after, mut faults) = (0, 0, Vec::new());
    rt.block_on(async {
        // Control: uncancelled, it runs and exits 0.
        match w.exec(&format!("sleep 0.{m}"), ExecOptions::default()).await {
            Ok(Exec::Ran(r)) => assert_eq!(r.result.outcome, Outcome::Exited { code: 0 }, "{r:?}"),
            other => panic!("control: {other:?}"),
        }
        for i in 0..150u64 {
            let cancel = CancellationToken::new();
            let c = cancel.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_micros(i * 100)).await;
                c.cancel();
            });
            let opts = ExecOptions { cancel: Some(cancel), ..ExecOptions::default() };
            match w.exec(&format!("sleep 5.{m}"), opts).await {
                Ok(Exec::Cancelled(_)) => before += 1,
                Ok(Exec::Ran(r)) if r.result.outcome == Outcome::Cancelled => after += 1,
                Ok(other) => faults.push(format!("{} us: {other:?}", i * 100)),
                Err(e) => faults.push(format!("{} us: kind {}: {}", i * 100, e.kind(), portcullis::error_chain(&e))),
            }
        }
        w.dispose().await;
    });
    println!("r0791: {before} cancelled before the start, {after} after");
    assert!(faults.is_empty(), "{} of 150 cancels were not cancels:\n{}", faults.len(), faults.join("\n"));
    assert!(after > 0, "no cancel landed after the start: the test does not reach the window");
    assert!(survivors(&format!("sleep 5.{m}")).is_empty(), "a cancelled sleeper survived");
}

/// A workspace whose sandbox (and pool) is its own, even when the suite's
/// sandboxes share one pool (`PORTCULLIS_TEST_POOL`): the checks after
/// `dispose` count this workspace's slots only.
fn own_workspace(policy: WorkspacePolicy) -> (Workspace, std::sync::Arc<MemAudit>) {
    workspace_with_sandbox(policy, portcullis::sandbox::Sandbox::with_helper(bin_dir().join("portcullis-helper")))
}
