//! Writable runs of one workspace side by side (issue 10, background jobs):
//! they hold the workspace's lock shared, and the git guard of every one of
//! them is done by the last to end. The promise, checked from outside:
//! when no writable run of the workspace is running, none of the git
//! redirections any of them listed exists.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use portcullis::sandbox::{leave_record_for_tests, records_dir_for_tests, ExecRequest, Warning};
use portcullis::{ExecResult, SandboxError};

use super::util::*;

/// A writable `sh -c line` in `ws`.
fn writable(ws: &Ws, line: &str) -> ExecRequest {
    let mut r = ws.req(&["sh", "-c", line]);
    r.writable = true;
    r
}

/// A line that waits (at most 40 s) for `marker` in the workspace, then
/// says whether it came.
fn wait_in_sandbox(marker: &str) -> String {
    format!("i=0; while [ ! -e {marker} ] && [ $i -lt 800 ]; do sleep 0.05; i=$((i+1)); done; test -e {marker} && echo came || echo gave-up")
}

/// Wait from outside for `path` (at most 40 s).
fn wait_for(path: &Path, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(40);
    while !path.exists() {
        assert!(Instant::now() < deadline, "{what} never happened ({} missing)", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn touch(path: &Path) {
    fs::write(path, "").unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

fn spawn_run(req: ExecRequest) -> std::thread::JoinHandle<Result<ExecResult, SandboxError>> {
    std::thread::spawn(move || run(&req))
}

fn join(t: std::thread::JoinHandle<Result<ExecResult, SandboxError>>, what: &str) -> ExecResult {
    match t.join() {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => panic!("{what}: {}", portcullis::error_chain(&e)),
        Err(_) => panic!("{what}: the thread panicked"),
    }
}

/// The records pending for `ws` (runs going, or ended while another ran,
/// or killed).
fn records(ws: &Ws) -> Vec<PathBuf> {
    let dir = records_dir_for_tests(ws.path()).unwrap_or_else(|e| panic!("records dir: {e}"));
    let mut out: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    out.sort();
    out
}

fn exists(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok()
}

fn deferred(r: &ExecResult) -> bool {
    r.warnings.iter().any(|w| matches!(w, Warning::GitGuardDeferred { .. }))
}

fn covered(r: &ExecResult) -> usize {
    r.warnings
        .iter()
        .find_map(|w| if let Warning::GitGuardCoveredOthers { runs } = w { Some(*runs) } else { None })
        .unwrap_or(0)
}

/// A workspace that is a git repository without a hooks directory, so
/// that `.git/hooks`, `.git/config.worktree` and `.git/commondir` are all
/// guarded (missing) when the first run is planned.
fn repo_without_hooks() -> Ws {
    let ws = Ws::new();
    ws.write(".git/config", "[core]\n\trepositoryformatversion = 0\n");
    ws.write(".git/HEAD", "ref: refs/heads/main\n");
    ws
}

/// A writable run started first keeps running while a second writable run
/// of the same workspace starts and ends (ordering, no timing: the first
/// waits for a marker the test makes only after the second has returned;
/// with writable runs one at a time, the second would wait for the first,
/// which would give up waiting and say so). Both plant guarded git
/// redirections. After the second ends, while the first runs, they may
/// exist (the second's result says its guard is left to the last run);
/// once the first ends, none does, and the first's result reports both
/// runs' removals.
#[test]
fn r0400_a_second_writable_run_ends_while_the_first_runs_and_the_last_cleans_up() {
    let ws = repo_without_hooks();
    let first = writable(
        &ws,
        &format!(
            "mkdir .git/hooks && printf '#!/bin/sh\\ntouch planted\\n' > .git/hooks/pre-commit && echo '[core]' > \
             .git/config.worktree && touch a-started && {}",
            wait_in_sandbox("go")
        ),
    );
    let t = spawn_run(first);
    wait_for(&ws.join("a-started"), "the first run");
    // The second run's plan sees the first's `.git/hooks` and keeps it
    // read-only (the bind a cleanup now would detach): it cannot add to it.
    let second = writable(
        &ws,
        "echo ../elsewhere > .git/commondir && echo b-wrote; (echo x > .git/hooks/post-commit) 2>/dev/null && echo \
         hook-added || echo hook-refused",
    );
    let b = run_ok(&second);
    assert_eq!(b.outcome.code(), Some(0), "{}", stderr(&b));
    assert_eq!(stdout(&b), "b-wrote\nhook-refused\n");
    assert!(deferred(&b), "the second run does not say its guard is left to the last run: {:?}", b.warnings);
    assert!(b.removed_paths().is_empty(), "{:?}", b.warnings);
    // While the first still runs, what both planted may exist (here: does).
    for p in [".git/hooks", ".git/config.worktree", ".git/commondir"] {
        assert!(exists(&ws.join(p)), "{p} is already gone while a writable run is going");
    }
    assert_eq!(records(&ws).len(), 2, "{:?}", records(&ws));
    touch(&ws.join("go"));
    let a = join(t, "the first run");
    // CONTROL of the ordering: the first run was still waiting when the
    // second had ended (one at a time, it would have given up first).
    assert_eq!(stdout(&a), "came\n", "the first run ended before the second started: {}", stderr(&a));
    // The promise: none is running now, and nothing either planted exists.
    for p in [".git/hooks", ".git/config.worktree", ".git/commondir"] {
        assert!(!exists(&ws.join(p)), "{p} survived both runs; warnings: {:?}", a.warnings);
    }
    let removed = a.removed_paths();
    for p in [".git/hooks", ".git/config.worktree", ".git/commondir"] {
        assert!(removed.iter().any(|r| r.ends_with(p)), "{p} not reported by the last run: {removed:?}");
    }
    assert_eq!(covered(&a), 1, "{:?}", a.warnings);
    assert!(!deferred(&a));
    assert!(records(&ws).is_empty(), "{:?}", records(&ws));
    // CONTROL: the hook was real: run from the host it plants its marker.
    // (It is gone now; recreate what the first run made and run it.)
    fs::create_dir_all(ws.join(".git/hooks")).unwrap_or_else(|e| panic!("{e}"));
    fs::write(ws.join(".git/hooks/pre-commit"), "#!/bin/sh\ntouch planted\n").unwrap_or_else(|e| panic!("{e}"));
    let ran = std::process::Command::new("sh").arg(".git/hooks/pre-commit").current_dir(ws.path()).status();
    assert!(ran.is_ok_and(|s| s.success()) && ws.join("planted").exists());
}

/// The cleanup covers what every overlapping run could create, each with
/// its own writable roots: a run that may write only `target` (so its own
/// guard lists nothing in `.git`) ends last and removes what a writable
/// run that ended while it ran planted in `.git`.
#[test]
fn r0401_the_last_run_cleans_up_for_a_run_with_other_writable_areas() {
    let ws = Ws::with_git();
    let mut first = ws.req(&["sh", "-c", &format!("touch target/a-started && {}", wait_in_sandbox("go"))]);
    first.write = vec![ws.join("target")];
    let t = spawn_run(first);
    wait_for(&ws.join("target/a-started"), "the first run");
    let b = run_ok(&writable(&ws, "echo '[core]' > .git/config.worktree && echo ../x > .git/commondir"));
    assert_eq!(b.outcome.code(), Some(0), "{}", stderr(&b));
    assert!(deferred(&b), "{:?}", b.warnings);
    assert!(exists(&ws.join(".git/commondir")) && exists(&ws.join(".git/config.worktree")));
    touch(&ws.join("go"));
    let a = join(t, "the first run");
    assert_eq!(stdout(&a), "came\n", "{}", stderr(&a));
    assert!(!exists(&ws.join(".git/commondir")) && !exists(&ws.join(".git/config.worktree")), "{:?}", a.warnings);
    let removed = a.removed_paths();
    assert!(removed.iter().any(|p| p.ends_with(".git/commondir")), "{removed:?}");
    assert!(removed.iter().any(|p| p.ends_with(".git/config.worktree")), "{removed:?}");
    assert_eq!(covered(&a), 1);
    assert!(records(&ws).is_empty());
}

/// A host process killed mid-run (SIGKILL: no guard ran) leaves its
/// record; the next writable run's cleanup does its work. And a record
/// written by hand through the test API: what it lists is removed by the
/// next writable run, while the same path with no record is the user's
/// and stays (the CONTROL: it is the record that does it).
#[test]
fn r0402_a_record_left_by_a_killed_run_is_cleaned_by_the_next_writable_run() {
    let ws = Ws::with_git();
    let w = ws.path().display().to_string();
    let mut child = cli()
        .args(["exec", "--workspace", &w, "--writable", "--", "sh", "-c"])
        .arg("echo '[core]' > .git/config.worktree && touch started && sleep 73.25")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cli: {e}"));
    wait_for(&ws.join("started"), "the killed run");
    assert!(child.kill().is_ok());
    let _ = child.wait();
    // It never cleaned up: the planted file and its record are there.
    assert!(exists(&ws.join(".git/config.worktree")));
    assert_eq!(records(&ws).len(), 1, "{:?}", records(&ws));
    // The next writable run, alone, cleans before it is planned: its
    // command does not see the plant.
    let r = run_ok(&writable(&ws, "test -e .git/config.worktree && echo seen || echo gone"));
    assert_eq!(stdout(&r), "gone\n", "{:?}", r.warnings);
    assert!(!exists(&ws.join(".git/config.worktree")), "{:?}", r.warnings);
    assert!(r.removed_paths().iter().any(|p| p.ends_with(".git/config.worktree")), "{:?}", r.warnings);
    assert_eq!(covered(&r), 1);
    assert!(records(&ws).is_empty(), "{:?}", records(&ws));
    // No process of the killed run is left.
    assert!(survivors("sleep 73.25").iter().all(|c| !c.contains(&w)));

    // CONTROL: a commondir made on the host is the user's: a writable run
    // keeps it (planned as existing, not guarded) ...
    ws.write(".git/commondir", "../elsewhere\n");
    let r = run_ok(&writable(&ws, "true"));
    assert!(exists(&ws.join(".git/commondir")), "{:?}", r.warnings);
    // ... and a record listing it (as a killed run's would) has it removed.
    let rec = leave_record_for_tests(ws.path(), &[ws.join(".git/commondir")]).unwrap_or_else(|e| panic!("{e}"));
    assert!(rec.is_file());
    let r = run_ok(&writable(&ws, "true"));
    assert!(!exists(&ws.join(".git/commondir")), "{:?}", r.warnings);
    assert!(r.removed_paths().iter().any(|p| p.ends_with(".git/commondir")));
    assert!(!rec.exists() && records(&ws).is_empty());
}

/// Two writable runs ending at once, many times over: whichever is last
/// (or both, one after the other) does the cleanup; after each pair
/// nothing either planted exists and no record is left.
#[test]
fn r0403_two_writable_runs_ending_at_once_leave_nothing() {
    let ws = Ws::with_git();
    for round in 0..8 {
        let go = format!("go{round}");
        let a =
            writable(&ws, &format!("echo '[core]' > .git/config.worktree; touch a{round} && {}", wait_in_sandbox(&go)));
        let b = writable(&ws, &format!("echo ../x > .git/commondir; touch b{round} && {}", wait_in_sandbox(&go)));
        let (ta, tb) = (spawn_run(a), spawn_run(b));
        wait_for(&ws.join(&format!("a{round}")), "run a");
        wait_for(&ws.join(&format!("b{round}")), "run b");
        touch(&ws.join(&go));
        let (ra, rb) = (join(ta, "run a"), join(tb, "run b"));
        assert_eq!((stdout(&ra).as_str(), stdout(&rb).as_str()), ("came\n", "came\n"), "round {round}");
        for p in [".git/config.worktree", ".git/commondir"] {
            assert!(!exists(&ws.join(p)), "round {round}: {p} left; {:?} / {:?}", ra.warnings, rb.warnings);
        }
        let removed: Vec<PathBuf> = ra.removed_paths().into_iter().chain(rb.removed_paths()).collect();
        assert!(removed.iter().any(|p| p.ends_with(".git/commondir")), "round {round}: {removed:?}");
        assert!(removed.iter().any(|p| p.ends_with(".git/config.worktree")), "round {round}: {removed:?}");
        assert!(!(deferred(&ra) && deferred(&rb)), "round {round}: both left the cleanup to the other");
        assert!(records(&ws).is_empty(), "round {round}: {:?}", records(&ws));
    }
}

/// A read-only run is never blocked by a long writable run; nor, now, is
/// a writable one (the CONTROL that the first is still going: both see
/// that it has not finished).
#[test]
fn r0404_no_run_waits_for_a_long_writable_run() {
    let ws = Ws::new();
    let t = spawn_run(writable(&ws, &format!("touch started && {} && touch first-done", wait_in_sandbox("go"))));
    wait_for(&ws.join("started"), "the first run");
    let probe = "test -e first-done && echo after || echo during";
    assert_eq!(stdout(&run_ok(&ws.req(&["sh", "-c", probe]))), "during\n");
    assert_eq!(stdout(&run_ok(&writable(&ws, probe))), "during\n");
    let mut grant = ws.req(&["sh", "-c", probe]);
    grant.write = vec![ws.join("target")];
    assert_eq!(stdout(&run_ok(&grant)), "during\n");
    touch(&ws.join("go"));
    let a = join(t, "the first run");
    assert_eq!(stdout(&a), "came\n");
    assert!(ws.join("first-done").exists());
}

/// Two writable runs side by side cannot pass descriptors either: the
/// giver cannot make a socket in the workspace (Landlock withholds
/// MakeSock there, `EACCES`), so the other (writable in `target` only)
/// never gets its descriptors of `.git` and `src/lib.rs`. CONTROL: with
/// the giver's Landlock broken, it does, and writes `src/lib.rs`, which
/// its own plan keeps read-only, and chmods `.git`.
#[test]
fn r0405_two_writable_runs_cannot_pass_descriptors() {
    use std::os::unix::fs::MetadataExt;
    let (ws, giver, taker) = super::concurrent::fd_passing_round(false, true);
    assert!(giver.contains("bind_ws EACCES") && giver.contains("bind_tmp OK"), "{giver}");
    assert!(taker.contains("connect ENOENT"), "{taker}");
    assert_eq!(ws.read("src/lib.rs"), "pub fn f() {}\n");
    assert_eq!(fs::metadata(ws.join(".git")).map(|m| m.mode() & 0o777).ok(), Some(0o755));
    let (ws, giver, taker) = super::concurrent::fd_passing_round(true, true);
    assert!(giver.contains("bind_ws OK") && giver.contains("gave OK"), "{giver}");
    assert!(taker.contains("connect OK") && taker.contains("write OK") && taker.contains("fchmod OK"), "{taker}");
    assert_eq!(ws.read("src/lib.rs"), "stolen\n");
}

/// A record that cannot be read fails closed: the writable run that finds
/// it fails with `AfterRun` (`cleanup: git-guard`, naming the record) and
/// it is kept, so every cleanup fails until someone has checked the git
/// dirs and removed it. CONTROL: without it the same run succeeds.
#[test]
fn r0406_a_record_that_cannot_be_read_fails_the_cleanup_closed() {
    let ws = Ws::with_git();
    let dir = records_dir_for_tests(ws.path()).unwrap_or_else(|e| panic!("{e}"));
    let bad = dir.join("run-0-0-0.json");
    fs::write(&bad, "{\"version\": 1, \"roots\": [").unwrap_or_else(|e| panic!("{e}"));
    for _ in 0..2 {
        match run(&writable(&ws, "echo ran")) {
            Err(SandboxError::AfterRun {
                cleanup: portcullis::sandbox::Cleanup::GitGuard, step, path, result, ..
            }) => {
                assert_eq!((step, path.as_path()), ("reading a git-guard record", bad.as_path()));
                assert!(result.is_some_and(|r| stdout(&r) == "ran\n"));
            }
            other => panic!("expected a failed cleanup, got {other:?}"),
        }
        assert!(bad.exists(), "the unreadable record was removed");
    }
    fs::remove_file(&bad).unwrap_or_else(|e| panic!("{e}"));
    let r = run_ok(&writable(&ws, "echo ran"));
    assert_eq!(stdout(&r), "ran\n");
    assert!(records(&ws).is_empty());
}

/// A record whose workspace is no longer at its path (moved; or removed
/// and its inode reused) names nothing of the workspace now locked: it is
/// dropped with a warning, and nothing is removed by its paths (which
/// lead nowhere now). CONTROL: in r0402 the same record, with the
/// workspace in place, has its path removed.
#[test]
fn r0407_a_record_of_a_workspace_no_longer_there_is_dropped_with_a_warning() {
    let ws = Ws::with_git();
    ws.write(".git/commondir", "../elsewhere\n");
    let rec = leave_record_for_tests(ws.path(), &[ws.join(".git/commondir")]).unwrap_or_else(|e| panic!("{e}"));
    let moved = ws.path().with_file_name(format!(
        "{}-moved",
        ws.path().file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
    ));
    fs::rename(ws.path(), &moved).unwrap_or_else(|e| panic!("rename: {e}"));
    let mut req = ExecRequest::new(&moved, ["true"]);
    req.writable = true;
    let r = run(&req);
    // Put it back for the tempdir's cleanup before asserting.
    fs::rename(&moved, ws.path()).unwrap_or_else(|e| panic!("rename back: {e}"));
    let r = r.unwrap_or_else(|e| panic!("{}", portcullis::error_chain(&e)));
    assert!(
        r.warnings.iter().any(|w| matches!(w, Warning::GitGuardRecordStale { record, .. } if *record == rec)),
        "{:?}",
        r.warnings
    );
    assert!(exists(&ws.join(".git/commondir")));
    assert!(!rec.exists() && records(&ws).is_empty());
}

/// Writable runs that always overlap (a writable background job, or
/// commands that keep coming) never let the lock be had exclusive, so the
/// records of the runs that ended beside them were kept, one each, until
/// the last run ended: the 1 025th run was refused (`LimitExceeded`,
/// "already holds 1024 records") for as long as the long run went on.
/// Runs that end with the same guard now share one record. Here more
/// than that bound end beside a long writable run: every one runs, the
/// records stay few, and the long run's end still removes what one of them
/// planted (the promise holds through the shared records).
#[test]
fn r0408_writable_runs_beside_a_long_one_share_their_records() {
    /// `pending::MAX_RECORDS`.
    const BOUND: usize = 1024;
    let ws = repo_without_hooks();
    // Waits for `go` up to 10 minutes (the short runs take a while in a
    // debug build under uid 65534).
    let long = "touch a-started; i=0; while [ ! -e go ] && [ $i -lt 12000 ]; do sleep 0.05; i=$((i+1)); done; \
                test -e go && echo came || echo gave-up";
    let t = spawn_run(writable(&ws, long));
    wait_for(&ws.join("a-started"), "the long run");
    let plant = run_ok(&writable(&ws, "echo '[core]' > .git/config.worktree"));
    assert_eq!(plant.outcome.code(), Some(0), "{}", stderr(&plant));
    assert!(deferred(&plant), "{:?}", plant.warnings);
    let per_thread = (BOUND + 40).div_ceil(4);
    let threads: Vec<_> = (0..4)
        .map(|k| {
            let req = writable(&ws, "true");
            std::thread::spawn(move || {
                for i in 0..per_thread {
                    match run(&req) {
                        Ok(r) if r.outcome.code() == Some(0) && deferred(&r) => {}
                        Ok(r) => return Err(format!("thread {k}, run {i}: {:?} {:?}", r.outcome, r.warnings)),
                        Err(e) => return Err(format!("thread {k}, run {i}: {}", portcullis::error_chain(&e))),
                    }
                }
                Ok(())
            })
        })
        .collect();
    for t in threads {
        if let Err(e) = t.join().unwrap_or_else(|_| Err("a thread panicked".into())) {
            panic!("{e}");
        }
    }
    // The long run's record, the planting run's, and one for every run
    // planned after the plant (they all have the same guard).
    let left = records(&ws);
    assert!(left.len() <= 3, "{} records for {} ended runs: {left:?}", left.len(), 4 * per_thread + 1);
    // CONTROL: what the first short run planted is there, its guard pending.
    assert!(exists(&ws.join(".git/config.worktree")));
    touch(&ws.join("go"));
    let a = join(t, "the long run");
    assert_eq!(stdout(&a), "came\n", "{}", stderr(&a));
    assert!(!exists(&ws.join(".git/config.worktree")), "the plant survived; warnings: {:?}", a.warnings);
    assert!(covered(&a) >= 1, "{:?}", a.warnings);
    assert_eq!(records(&ws), Vec::<PathBuf>::new());
}

/// The caller's lock file and records' directory for `ws`, by name (what
/// `sandbox::lock` makes in `/dev/shm/portcullis-<uid>`).
fn lock_entries(ws: &Ws) -> (PathBuf, PathBuf) {
    use std::os::unix::fs::MetadataExt;
    let uid = nix::unistd::getuid().as_raw();
    let base = if Path::new("/dev/shm").is_dir() { "/dev/shm" } else { "/tmp" };
    let m = fs::metadata(ws.path()).unwrap_or_else(|e| panic!("stat: {e}"));
    let stem = format!("{base}/portcullis-{uid}/ws2-{:x}-{:x}", m.dev(), m.ino());
    (PathBuf::from(format!("{stem}.lock")), PathBuf::from(format!("{stem}.runs")))
}

/// Found in review: the lock file and the records' directory of every
/// workspace stayed in the caller's lock directory until reboot, so a host
/// that makes a workspace per task gathered two entries per task. The
/// cleanup that leaves no record now removes both (holding the lock
/// exclusive); while a writable run goes, while another defers to it, and
/// while a record cannot be cleaned they stay. CONTROL: each removal
/// follows a state where both were there.
#[test]
fn r0409_a_workspace_leaves_nothing_in_the_lock_directory_once_its_runs_are_done() {
    let ws = repo_without_hooks();
    let (lock, runs) = lock_entries(&ws);
    let both = || lock.is_file() && runs.is_dir();
    let neither = || !exists(&lock) && !exists(&runs);
    // While a writable run goes (and beside it another that ends first and
    // defers its cleanup to it), both are there; its end removes them.
    let t = spawn_run(writable(&ws, &format!("touch a-started; {}", wait_in_sandbox("go"))));
    wait_for(&ws.join("a-started"), "the long run");
    assert!(both(), "a writable run is going: {} {}", lock.display(), runs.display());
    let b = run_ok(&writable(&ws, "true"));
    assert!(deferred(&b), "{:?}", b.warnings);
    assert!(both(), "the deferred run removed what the long run holds");
    touch(&ws.join("go"));
    let a = join(t, "the long run");
    assert_eq!(stdout(&a), "came\n", "{}", stderr(&a));
    assert!(neither(), "left behind: {} {}", lock.display(), runs.display());

    // A killed run's record keeps the directory until a run cleans it.
    ws.write(".git/commondir", "../elsewhere\n");
    let rec = leave_record_for_tests(ws.path(), &[ws.join(".git/commondir")]).unwrap_or_else(|e| panic!("{e}"));
    assert!(rec.is_file() && runs.is_dir());
    let r = run_ok(&writable(&ws, "true"));
    assert!(!exists(&ws.join(".git/commondir")), "{:?}", r.warnings);
    assert!(neither(), "left behind after the record was cleaned");

    // A record that cannot be read fails the cleanup closed: both stay,
    // run after run, until it is removed by hand.
    let bad = records_dir_for_tests(ws.path()).unwrap_or_else(|e| panic!("{e}")).join("run-0-0-0.json");
    fs::write(&bad, "{\"version\": 1, \"roots\": [").unwrap_or_else(|e| panic!("{e}"));
    for _ in 0..2 {
        assert!(matches!(run(&writable(&ws, "true")), Err(SandboxError::AfterRun { .. })));
        assert!(both() && bad.exists(), "the failed cleanup removed them");
    }
    fs::remove_file(&bad).unwrap_or_else(|e| panic!("{e}"));
    run_ok(&writable(&ws, "true"));
    assert!(neither(), "left behind once the bad record was gone");
    // And runs go on as before once they are gone.
    let r = run_ok(&writable(&ws, "echo again"));
    assert_eq!(stdout(&r), "again\n");
    assert!(neither());
}
