//! Background jobs (`portcullis::workspace::jobs`): real sandbox runs,
//! read with cursors, killed, timed out, refused, disposed and dropped;
//! what is left running is checked from outside (the host's process list).

use std::ffi::OsString;
use std::sync::Arc;
use std::time::{Duration, Instant};

use portcullis::audit::{Event, Status};
use portcullis::gate::Action;
use portcullis::policy::WorkspacePolicy;
use portcullis::runner::{ExecOptions, Runner};
use portcullis::workspace::jobs::{JobError, JobOutput, JobStatus, Jobs, Started};
use tokio_util::sync::CancellationToken;

use super::util::{host_procs_containing, rt, sandbox, survivors, MemAudit, Ws};

const BG: &str = "[shell.background]\nmax_jobs = 4\ntimeout = \"60s\"\n";

fn runner(ws: &Ws, extra: &str, audit: Arc<MemAudit>) -> Arc<Runner> {
    let text = format!("workspace = {:?}\n[shell]\nallow = [\"sh\", \"sleep\", \"true\"]\n{extra}", ws.path());
    let p = WorkspacePolicy::from_toml(&text).unwrap_or_else(|e| panic!("policy: {e}"));
    let r = Runner::builder()
        .policy(p)
        .sandbox(sandbox())
        .audit(audit)
        .build()
        .unwrap_or_else(|e| panic!("runner: {}", portcullis::error_chain(&e)));
    Arc::new(r)
}

fn words(argv: &[&str]) -> Vec<OsString> {
    argv.iter().map(OsString::from).collect()
}

fn sh(line: &str) -> Vec<OsString> {
    words(&["sh", "-c", line])
}

async fn start(jobs: &Jobs, r: &Arc<Runner>, argv: Vec<OsString>, opts: ExecOptions) -> String {
    match jobs.start(r.clone(), &argv, opts, None).await {
        Ok(Started::Job { id, .. }) => id,
        Ok(Started::Refused(r)) => panic!("refused: {r}"),
        Err(e) => panic!("start: {}", portcullis::error_chain(&e)),
    }
}

async fn out(jobs: &Jobs, id: &str, since: Option<u64>, wait: Duration) -> JobOutput {
    jobs.output(id, since, wait).await.unwrap_or_else(|e| panic!("output {id}: {}", portcullis::error_chain(&e)))
}

/// Reads until the job ended (each read waiting for what comes next): the
/// last read, with all the output read on the way.
async fn until_end(jobs: &Jobs, id: &str) -> JobOutput {
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut cursor, mut stdout, mut stderr) = (None, String::new(), String::new());
    loop {
        let mut o = out(jobs, id, cursor, Duration::from_secs(10)).await;
        stdout.push_str(&o.stdout);
        stderr.push_str(&o.stderr);
        if o.status != JobStatus::Running {
            (o.stdout, o.stderr) = (stdout, stderr);
            return o;
        }
        assert!(Instant::now() < deadline, "job {id} still running");
        cursor = Some(o.cursor);
    }
}

/// The outcome records in the audit.
fn outcomes(audit: &MemAudit) -> Vec<Status> {
    let v = audit.0.lock().map(|v| v.clone()).unwrap_or_default();
    v.iter().filter_map(|e| if let Event::Outcome { status, .. } = e { Some(*status) } else { None }).collect()
}

fn denied_reasons(audit: &MemAudit) -> Vec<String> {
    let v = audit.0.lock().map(|v| v.clone()).unwrap_or_default();
    v.iter().filter_map(|e| if let Event::Denied { reason, .. } = e { Some(reason.clone()) } else { None }).collect()
}

/// A job printing numbered lines over time, read with `since: cursor` as
/// it runs: every line exactly once, in order, on both streams; the gate
/// (here the audit's record of what was allowed) saw `background: true`.
#[test]
fn r0420_job_lifecycle_with_cursors() {
    let ws = Ws::new();
    let audit = Arc::new(MemAudit::default());
    let r = runner(&ws, BG, audit.clone());
    let rt = rt();
    rt.block_on(async {
        let jobs = Jobs::new();
        let line = "i=1; while [ $i -le 30 ]; do echo out$i; echo err$i >&2; sleep 0.03; i=$((i+1)); done";
        let id = start(&jobs, &r, sh(line), ExecOptions::default()).await;
        let (mut stdout, mut stderr, mut reads, mut cursor) = (String::new(), String::new(), 0, None);
        loop {
            let o = out(&jobs, &id, cursor, Duration::from_secs(10)).await;
            if !o.stdout.is_empty() || !o.stderr.is_empty() {
                reads += 1;
            }
            assert_eq!(o.dropped_bytes, 0, "{o:?}");
            assert!(cursor.is_none_or(|c| o.cursor >= c), "the cursor went back: {o:?}");
            stdout.push_str(&o.stdout);
            stderr.push_str(&o.stderr);
            cursor = Some(o.cursor);
            if o.status != JobStatus::Running {
                assert_eq!((o.status, o.exit_code, o.signal), (JobStatus::Exited, Some(0), None), "{o:?}");
                break;
            }
        }
        let want = |p: &str| (1..=30).map(|i| format!("{p}{i}\n")).collect::<String>();
        assert_eq!(stdout, want("out"));
        assert_eq!(stderr, want("err"));
        assert!(reads >= 2, "the output came in {reads} read(s): the cursor was not exercised");
        // The cursor counts both streams' bytes.
        assert_eq!(cursor, Some((want("out").len() + want("err").len()) as u64));
        // A read from the final cursor: nothing new, the same end.
        let o = out(&jobs, &id, cursor, Duration::ZERO).await;
        assert_eq!((o.stdout.as_str(), o.stderr.as_str(), o.status), ("", "", JobStatus::Exited));
    });
    let v = audit.0.lock().map(|v| v.clone()).unwrap_or_default();
    let bg = v.iter().any(|e| matches!(e, Event::Allowed { action: Action::ShellExec(s), .. } if s.background));
    assert!(bg, "the gate did not see background: true: {v:?}");
    assert_eq!(outcomes(&audit), vec![Status::Completed]);
}

/// Polls (without `since`, so every read returns all that is kept) until
/// the job ended: the one read that sees the end has everything.
async fn at_end(jobs: &Jobs, id: &str) -> JobOutput {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let o = out(jobs, id, None, Duration::ZERO).await;
        if o.status != JobStatus::Running {
            return o;
        }
        assert!(Instant::now() < deadline, "job {id} still running");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// More output than the cap: the newest bytes are kept, the rest counted
/// (kept + dropped = all), and a character is not split at the cut. The
/// control: the same job under a cap it fits in drops nothing.
#[test]
fn r0421_dropped_bytes_are_counted() {
    let ws = Ws::new();
    let r = runner(&ws, BG, Arc::new(MemAudit::default()));
    // 100 lines of 50 bytes.
    let line = "i=0; while [ $i -lt 100 ]; do echo 0123456789012345678901234567890123456789012345678; i=$((i+1)); done";
    rt().block_on(async {
        let jobs = Jobs::new();
        for (cap, kept, dropped) in [(1000u64, 1000usize, 4000u64), (10_000, 5000, 0)] {
            let opts = ExecOptions { max_output: Some(cap), ..ExecOptions::default() };
            let id = start(&jobs, &r, sh(line), opts).await;
            let o = at_end(&jobs, &id).await;
            assert_eq!(o.status, JobStatus::Exited, "{o:?}");
            assert_eq!(o.cursor, 5000, "{o:?}");
            assert_eq!((o.stdout.len(), o.dropped_bytes, o.truncated), (kept, dropped, dropped > 0), "cap {cap}");
            assert!(o.stdout.ends_with("0123456789012345678901234567890123456789012345678\n"));
            // Read again after the end: the bytes were released, and the
            // read says so.
            let again = out(&jobs, &id, None, Duration::ZERO).await;
            assert_eq!((again.stdout.as_str(), again.dropped_bytes, again.cursor), ("", 5000, 5000));
        }
        // A multibyte character at the cut: "€" is 3 bytes; with a cap of
        // 10 of 18 bytes, the cut at byte 8 falls inside the third one,
        // which is dropped whole. Invalid UTF-8 is replaced, and said so.
        let opts = ExecOptions { max_output: Some(10), ..ExecOptions::default() };
        let id = start(&jobs, &r, sh(r"printf '\342\202\254%.0s' 1 2 3 4 5 6"), opts).await;
        let o = at_end(&jobs, &id).await;
        assert_eq!((o.stdout.as_str(), o.dropped_bytes, o.lossy), ("\u{20ac}\u{20ac}\u{20ac}", 9, false), "{o:?}");
        let id = start(&jobs, &r, sh("printf 'a\\377b'"), ExecOptions::default()).await;
        let o = at_end(&jobs, &id).await;
        assert_eq!((o.stdout.as_str(), o.lossy), ("a\u{fffd}b", true), "{o:?}");
    });
}

/// The status of a job that times out (the policy's background timeout,
/// and a caller's lower one; a caller's higher one does not raise it), and
/// the control: one that exits by itself, with its code.
#[test]
fn r0422_timed_out_and_exited() {
    let ws = Ws::new();
    let audit = Arc::new(MemAudit::default());
    let short = runner(&ws, "[shell.background]\ntimeout = \"1s\"\n", audit.clone());
    let long = runner(&ws, BG, audit.clone());
    rt().block_on(async {
        let jobs = Jobs::new();
        let raise = ExecOptions { timeout: Some(Duration::from_secs(600)), ..ExecOptions::default() };
        let lower = ExecOptions { timeout: Some(Duration::from_secs(1)), ..ExecOptions::default() };
        for (r, opts, what) in
            [(&short, ExecOptions::default(), "policy"), (&short, raise, "raise"), (&long, lower, "lower")]
        {
            let t = Instant::now();
            let id = start(&jobs, r, words(&["sleep", "30"]), opts).await;
            let o = until_end(&jobs, &id).await;
            assert_eq!((o.status, o.exit_code), (JobStatus::TimedOut, Some(124)), "{what}: {o:?}");
            assert!(t.elapsed() < Duration::from_secs(20), "{what}: {:?}", t.elapsed());
        }
        let id = start(&jobs, &long, sh("echo bye; exit 3"), ExecOptions::default()).await;
        let o = until_end(&jobs, &id).await;
        assert_eq!((o.status, o.exit_code, o.stdout.as_str()), (JobStatus::Exited, Some(3), "bye\n"), "{o:?}");
        assert!(o.duration_ms.is_some() && o.error.is_none(), "{o:?}");
        let id = start(&jobs, &long, sh("kill -TERM $$"), ExecOptions::default()).await;
        let o = until_end(&jobs, &id).await;
        assert_eq!((o.status, o.exit_code, o.signal), (JobStatus::Exited, Some(143), Some(15)), "{o:?}");
    });
    let o = outcomes(&audit);
    assert_eq!(o.iter().filter(|s| **s == Status::TimedOut).count(), 3, "{o:?}");
}

/// `kill` ends the whole tree (checked from outside: the host's process
/// list, with a control that the process was there) and says `killed`;
/// killing it again is not an error and says it had ended.
#[test]
fn r0423_kill_ends_the_tree() {
    let ws = Ws::new();
    let audit = Arc::new(MemAudit::default());
    let r = runner(&ws, BG, audit.clone());
    rt().block_on(async {
        let jobs = Jobs::new();
        let id = start(&jobs, &r, sh("sleep 30.04231 & sleep 30.04232; wait"), ExecOptions::default()).await;
        wait_for_procs("30.0423", 2).await;
        let k = jobs.kill(&id).await.unwrap_or_else(|e| panic!("kill: {e}"));
        assert_eq!((k.status, k.already_ended), (JobStatus::Killed, false), "{k:?}");
        // kill returned once the tree was gone: no grace period here.
        assert_eq!(host_procs_containing("30.0423"), Vec::<String>::new());
        let o = out(&jobs, &id, None, Duration::ZERO).await;
        assert_eq!((o.status, o.exit_code), (JobStatus::Killed, Some(130)), "{o:?}");
        let again = jobs.kill(&id).await.unwrap_or_else(|e| panic!("kill again: {e}"));
        assert_eq!((again.status, again.already_ended), (JobStatus::Killed, true));
    });
    assert_eq!(outcomes(&audit), vec![Status::Cancelled]);
}

/// Waits until `n` host processes have `needle` in their command line.
async fn wait_for_procs(needle: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while host_procs_containing(needle).len() < n {
        assert!(Instant::now() < deadline, "the job's processes {needle} never appeared");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `max_jobs` running: one more is refused naming the limit, and recorded
/// as denied; once one ended, a job starts again (the control).
#[test]
fn r0424_max_jobs_is_refused_and_audited() {
    let ws = Ws::new();
    let audit = Arc::new(MemAudit::default());
    let r = runner(&ws, "[shell.background]\nmax_jobs = 1\n", audit.clone());
    rt().block_on(async {
        let jobs = Jobs::new();
        let a = start(&jobs, &r, words(&["sleep", "30"]), ExecOptions::default()).await;
        // A clone is the same registry (a projection's view).
        let view = jobs.clone();
        match view.start(r.clone(), &words(&["true"]), ExecOptions::default(), None).await {
            Ok(Started::Refused(f)) => {
                assert!(f.message.contains("max_jobs") && f.message.contains('1'), "{f}");
            }
            other => panic!("not refused: {other:?}"),
        }
        assert_eq!(jobs.running(), 1);
        let _ = jobs.kill(&a).await;
        let b = start(&view, &r, words(&["true"]), ExecOptions::default()).await;
        assert_eq!(until_end(&jobs, &b).await.status, JobStatus::Exited);
    });
    let d = denied_reasons(&audit);
    assert!(d.len() == 1 && d[0].contains("max_jobs"), "{d:?}");
    // The first job's records come from its task: in any order with the
    // refusal.
    let mut kinds = audit.kinds();
    kinds.sort_unstable();
    assert_eq!(kinds, vec!["allowed", "allowed", "denied", "outcome", "outcome"]);
}

/// Without `[shell.background]` a job is refused by the policy, saying how
/// to enable it, and recorded as denied; nothing runs. The control: the
/// same policy with the table starts it.
#[test]
fn r0425_background_needs_the_policy() {
    let ws = Ws::new();
    let audit = Arc::new(MemAudit::default());
    let off = runner(&ws, "", audit.clone());
    rt().block_on(async {
        let jobs = Jobs::new();
        let line = sh("touch marker");
        let writable = ExecOptions { writable: true, ..ExecOptions::default() };
        match jobs.start(off.clone(), &line, writable.clone(), None).await {
            Ok(Started::Refused(f)) => {
                assert_eq!(f.kind, portcullis::audit::RefusalKind::RefusedByPolicy);
                assert!(f.message.contains("[shell.background]"), "{f}");
            }
            other => panic!("not refused: {other:?}"),
        }
        assert!(!ws.join("marker").exists());
        assert_eq!(audit.kinds(), vec!["denied"]);
        let on = runner(&ws, BG, audit.clone());
        let id = start(&jobs, &on, line, writable).await;
        assert_eq!(until_end(&jobs, &id).await.exit_code, Some(0));
        assert!(ws.join("marker").exists(), "the control did not run");
    });
}

/// An unknown id is `NotFound` for every method; a cursor past the output
/// is refused, naming the newest.
#[test]
fn r0426_unknown_id_and_bad_cursor() {
    let ws = Ws::new();
    let r = runner(&ws, BG, Arc::new(MemAudit::default()));
    rt().block_on(async {
        let jobs = Jobs::new();
        assert!(matches!(jobs.output("j1-00000000", None, Duration::ZERO).await, Err(JobError::NotFound { id }) if id == "j1-00000000"));
        assert!(matches!(jobs.kill("nope").await, Err(JobError::NotFound { .. })));
        let id = start(&jobs, &r, sh("echo hi"), ExecOptions::default()).await;
        assert!(id.starts_with("j1-") && id.len() == 11, "{id}");
        // Another registry does not know it.
        assert!(matches!(Jobs::new().output(&id, None, Duration::ZERO).await, Err(JobError::NotFound { .. })));
        let mut o = out(&jobs, &id, Some(0), Duration::from_secs(10)).await;
        while o.cursor < 3 {
            o = out(&jobs, &id, Some(o.cursor), Duration::from_secs(10)).await;
        }
        match jobs.output(&id, Some(4), Duration::ZERO).await {
            Err(JobError::BadCursor { cursor: 4, latest: 3, .. }) => {}
            other => panic!("{other:?}"),
        }
        let next = start(&jobs, &r, sh("true"), ExecOptions::default()).await;
        assert!(next.starts_with("j2-") && next != id);
    });
}

/// `dispose` kills every job and returns once their trees are gone (the
/// host's process list, checked at once; the control: the processes were
/// there), then refuses new jobs.
#[test]
fn r0427_dispose_leaves_no_process() {
    let ws = Ws::new();
    let r = runner(&ws, BG, Arc::new(MemAudit::default()));
    rt().block_on(async {
        let jobs = Jobs::new();
        let a = start(&jobs, &r, words(&["sleep", "30.04271"]), ExecOptions::default()).await;
        let b = start(&jobs, &r, sh("sleep 30.04272 & sleep 30.04273; wait"), ExecOptions::default()).await;
        wait_for_procs("30.0427", 3).await;
        jobs.clone().dispose().await;
        assert_eq!(host_procs_containing("30.0427"), Vec::<String>::new());
        for id in [a, b] {
            assert_eq!(out(&jobs, &id, None, Duration::ZERO).await.status, JobStatus::Killed);
        }
        assert!(matches!(
            jobs.start(r.clone(), &words(&["true"]), ExecOptions::default(), None).await,
            Err(JobError::Disposed)
        ));
    });
}

/// Dropping the last handle kills every job (the runs end on the runtime);
/// dropping the runtime itself with a job running leaves nothing either
/// (the run's future is dropped: the helper's lifeline, the cgroup's kill).
#[test]
fn r0428_dropping_leaves_no_process() {
    let ws = Ws::new();
    let r = runner(&ws, BG, Arc::new(MemAudit::default()));
    let rt1 = rt();
    rt1.block_on(async {
        let jobs = Jobs::new();
        let _ = start(&jobs, &r, sh("sleep 30.04281 & sleep 30.04282; wait"), ExecOptions::default()).await;
        wait_for_procs("30.0428", 2).await;
        drop(jobs);
        let deadline = Instant::now() + Duration::from_secs(15);
        while !host_procs_containing("30.0428").is_empty() {
            assert!(Instant::now() < deadline, "left running: {:?}", host_procs_containing("30.0428"));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let jobs = Jobs::new();
    let rt2 = rt();
    rt2.block_on(async {
        let _ = start(&jobs, &r, sh("sleep 30.04283 & sleep 30.04284; wait"), ExecOptions::default()).await;
        wait_for_procs("30.0428", 2).await;
    });
    drop(rt2);
    assert_eq!(survivors("30.0428"), Vec::<String>::new());
    drop(jobs);
}

/// A token already cancelled starts nothing (a writable job that would
/// make a marker: none is made; the control makes it): status `killed`,
/// code 130, and the audit's outcome is `cancelled`. A token cancelled
/// while the job runs kills it.
#[test]
fn r0429_cancellation_before_and_during() {
    let ws = Ws::new();
    let audit = Arc::new(MemAudit::default());
    let r = runner(&ws, BG, audit.clone());
    rt().block_on(async {
        let jobs = Jobs::new();
        let writable = ExecOptions { writable: true, ..ExecOptions::default() };
        let token = CancellationToken::new();
        token.cancel();
        let id = match jobs.start(r.clone(), &sh("touch marker"), writable.clone(), Some(token)).await {
            Ok(Started::Job { id, .. }) => id,
            other => panic!("{other:?}"),
        };
        let o = until_end(&jobs, &id).await;
        assert_eq!((o.status, o.exit_code), (JobStatus::Killed, Some(130)), "{o:?}");
        assert!(
            o.error.as_deref().is_some_and(|e| e.contains("nothing ran") || e.contains("nothing was started")),
            "{o:?}"
        );
        assert!(!ws.join("marker").exists(), "a cancelled job ran");
        assert_eq!(outcomes(&audit), vec![Status::Cancelled]);
        // The control: the same job, not cancelled.
        let id = start(&jobs, &r, sh("touch marker"), writable).await;
        assert_eq!(until_end(&jobs, &id).await.exit_code, Some(0));
        assert!(ws.join("marker").exists());
        // Cancelled mid-run.
        let token = CancellationToken::new();
        let id = match jobs
            .start(r.clone(), &words(&["sleep", "30.04291"]), ExecOptions::default(), Some(token.clone()))
            .await
        {
            Ok(Started::Job { id, .. }) => id,
            other => panic!("{other:?}"),
        };
        wait_for_procs("30.04291", 1).await;
        token.cancel();
        let o = until_end(&jobs, &id).await;
        assert_eq!((o.status, o.exit_code), (JobStatus::Killed, Some(130)), "{o:?}");
        assert_eq!(host_procs_containing("30.04291"), Vec::<String>::new());
    });
}

/// A read that waits returns as soon as output arrives, not when its wait
/// ends; a read with nothing new waits its time (bounded).
#[test]
fn r0430_a_wait_ends_early_on_output() {
    let ws = Ws::new();
    let r = runner(&ws, BG, Arc::new(MemAudit::default()));
    rt().block_on(async {
        let jobs = Jobs::new();
        let id = start(&jobs, &r, sh("sleep 1; echo late; sleep 30"), ExecOptions::default()).await;
        let t = Instant::now();
        let o = out(&jobs, &id, Some(0), Duration::from_secs(25)).await;
        assert_eq!((o.stdout.as_str(), o.status), ("late\n", JobStatus::Running), "{o:?}");
        assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
        // Nothing new: the wait runs out.
        let t = Instant::now();
        let o = out(&jobs, &id, Some(o.cursor), Duration::from_millis(300)).await;
        assert!(o.stdout.is_empty() && t.elapsed() >= Duration::from_millis(300), "{o:?}");
        let _ = jobs.kill(&id).await;
    });
}

/// A foreground command with an already-cancelled token starts nothing
/// either (before the fix the helper was spawned and killed mid-setup: a
/// sandbox failure, 125): `CancelledBeforeStart`, 130, the audit's
/// outcome `cancelled`, no marker. The control makes the marker.
#[test]
fn r0431_exec_with_a_cancelled_token_starts_nothing() {
    use portcullis::runner::RunError;
    use portcullis::sandbox::{RunOptions, SandboxError};
    let ws = Ws::new();
    let audit = Arc::new(MemAudit::default());
    let r = runner(&ws, "", audit.clone());
    let rt = rt();
    let writable = ExecOptions { writable: true, ..ExecOptions::default() };
    let token = CancellationToken::new();
    token.cancel();
    let run = RunOptions { cancel: Some(token), ..RunOptions::default() };
    match rt.block_on(r.exec(&sh("touch marker"), &writable, run)) {
        // The runner sees the token first; the sandbox's own check
        // (`SandboxError::CancelledBeforeStart`) backs it up.
        Ok(e @ portcullis::runner::Exec::Cancelled(_)) => assert_eq!(e.exit_status(), 130),
        Err(e @ RunError::Sandbox(SandboxError::CancelledBeforeStart { .. })) => panic!("not a value: {e}"),
        other => panic!("{other:?}"),
    }
    assert!(!ws.join("marker").exists(), "a cancelled command ran");
    assert_eq!(outcomes(&audit), vec![Status::Cancelled]);
    let ran = rt.block_on(r.exec(&sh("touch marker"), &writable, RunOptions::default()));
    assert!(matches!(ran, Ok(portcullis::runner::Exec::Ran(_))), "{ran:?}");
    assert!(ws.join("marker").exists(), "the control did not run");
}

/// With a policy, a caller's timeout only lowers `shell.timeout` (before
/// the fix it replaced it: a 600 s timeout let `sleep 30` run out); the
/// control: a lower one is kept.
#[test]
fn r0432_a_callers_timeout_only_lowers_the_policys() {
    use portcullis::runner::Exec;
    use portcullis::sandbox::{Outcome, RunOptions};
    let ws = Ws::new();
    let audit = Arc::new(MemAudit::default());
    let short = runner(&ws, "timeout = \"1s\"\n", audit.clone());
    let long = runner(&ws, "timeout = \"60s\"\n", audit);
    let rt = rt();
    for (r, t) in [(&short, 600), (&long, 1)] {
        let opts = ExecOptions { timeout: Some(Duration::from_secs(t)), ..ExecOptions::default() };
        let started = Instant::now();
        match rt.block_on(r.exec(&words(&["sleep", "30"]), &opts, RunOptions::default())) {
            Ok(Exec::Ran(ran)) => assert_eq!(ran.result.outcome, Outcome::TimedOut, "caller {t} s"),
            other => panic!("{other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(20), "caller {t} s: {:?}", started.elapsed());
    }
}

/// Ended jobs are remembered up to `KEEP_ENDED` (the oldest forgotten
/// first); every slot is given back.
#[test]
fn r0433_ended_jobs_are_bounded() {
    use portcullis::workspace::jobs::KEEP_ENDED;
    let ws = Ws::new();
    let r = runner(&ws, BG, Arc::new(MemAudit::default()));
    rt().block_on(async {
        let jobs = Jobs::new();
        let mut ids = Vec::new();
        for _ in 0..=KEEP_ENDED {
            let id = start(&jobs, &r, words(&["true"]), ExecOptions::default()).await;
            // Wait for its end without reading it.
            while jobs.running() > 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            ids.push(id);
        }
        assert_eq!(jobs.ids().len(), KEEP_ENDED);
        assert!(matches!(jobs.output(&ids[0], None, Duration::ZERO).await, Err(JobError::NotFound { .. })));
        for id in &ids[1..] {
            assert_eq!(out(&jobs, id, None, Duration::ZERO).await.status, JobStatus::Exited);
        }
    });
}

/// A job's timeout is `shell.background.timeout`, not `shell.timeout`: a
/// job outlives the foreground cap (the control: the same command in the
/// foreground is killed by it).
#[test]
fn r0434_a_job_has_the_background_timeout() {
    use portcullis::sandbox::{Outcome, RunOptions};
    let ws = Ws::new();
    let r = runner(&ws, "timeout = \"1s\"\n[shell.background]\ntimeout = \"60s\"\n", Arc::new(MemAudit::default()));
    let line = sh("sleep 2; echo done");
    rt().block_on(async {
        let jobs = Jobs::new();
        let id = start(&jobs, &r, line.clone(), ExecOptions::default()).await;
        let o = until_end(&jobs, &id).await;
        assert_eq!((o.status, o.exit_code, o.stdout.as_str()), (JobStatus::Exited, Some(0), "done\n"), "{o:?}");
        match r.exec(&line, &ExecOptions::default(), RunOptions::default()).await {
            Ok(portcullis::runner::Exec::Ran(ran)) => assert_eq!(ran.result.outcome, Outcome::TimedOut),
            other => panic!("{other:?}"),
        }
    });
}
