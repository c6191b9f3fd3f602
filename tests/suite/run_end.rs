//! The run's end (issue 12): in the full sandbox a run returns once pid 1
//! has killed and reaped every other process of its pid namespace and the
//! output pipes have closed; the helper, pid 1 and their namespaces exit
//! behind the result, and `Sandbox::settle` waits for them.

use std::time::{Duration, Instant};

use portcullis::sandbox::{ExecRequest, ExecResult, Mode, Outcome, RunOptions, Sandbox};

use super::util::*;

/// Run `req` in `sb` on `rt`; the sandbox must come up.
fn run_in(rt: &tokio::runtime::Runtime, sb: &Sandbox, req: &ExecRequest, what: &str) -> ExecResult {
    rt.block_on(sb.run(req, RunOptions::default()))
        .unwrap_or_else(|e| panic!("{what}: {}", portcullis::error_chain(&e)))
}

/// A writer left running by the command (a `setsid` daemon appending to a
/// workspace file in a loop) is gone when the run returns, checked from
/// outside at once: no marked process, and the file does not grow. The
/// control: it ran and wrote while the command waited for it.
#[test]
fn r0830_nothing_of_the_command_outlives_its_result() {
    let test = "r0830";
    let ws = Ws::new();
    let marker = format!("3083{}", std::process::id());
    let script = format!(
        "setsid sh -c 'while :; do echo x >> log; done' writer-{marker} </dev/null >/dev/null 2>&1 & \
         while [ \"$(wc -l < log 2>/dev/null || echo 0)\" -lt 50 ]; do :; done; echo started"
    );
    let rt = rt();
    let sb = sandbox();
    for i in 0..3 {
        let _ = std::fs::remove_file(ws.join("log"));
        let mut req = ws.req(&["/bin/sh", "-c", &script]);
        req.writable = true;
        req.timeout = Some(Duration::from_secs(60));
        let r = run_in(&rt, &sb, &req, &format!("{test}: run {i}"));
        // At once, before anything else: no writer on the host.
        let left = host_procs_containing(&marker);
        let size = std::fs::metadata(ws.join("log")).map(|m| m.len()).unwrap_or(0);
        assert_eq!(r.outcome, Outcome::Exited { code: 0 }, "{test}: run {i}: {r:?}");
        assert_eq!(stdout(&r), "started\n", "{test}: run {i}: {}", stderr(&r));
        assert!(left.is_empty(), "{test}: run {i}: the writer outlived the result: {left:?}");
        // CONTROL: the writer ran and wrote (at least 50 lines).
        assert!(size >= 100, "{test}: run {i}: the writer never wrote ({size} bytes)");
        std::thread::sleep(Duration::from_millis(300));
        let later = std::fs::metadata(ws.join("log")).map(|m| m.len()).unwrap_or(0);
        assert_eq!(later, size, "{test}: run {i}: the log grew after the result");
    }
    assert!(rt.block_on(sb.settle(Duration::from_secs(10))), "{test}: the teardowns never finished");
}

/// The sandbox's own teardown goes on behind the result: right after a
/// run returns, `settle(0)` usually finds it still going (one of twenty
/// runs at least), and `settle` with a bound waits for it. The control: a
/// landlock-only run has no early end (its pid 1 is no pid 1 of a
/// namespace), so nothing of it is ever left behind.
#[test]
fn r0831_the_sandbox_goes_behind_the_result_and_settle_waits_for_it() {
    let test = "r0831";
    let ws = Ws::new();
    let rt = rt();
    let sb = sandbox();
    let mut behind = 0;
    for i in 0..20 {
        let r = run_in(&rt, &sb, &ws.req(&["/bin/true"]), &format!("{test}: run {i}"));
        assert_eq!(r.outcome, Outcome::Exited { code: 0 }, "{test}: run {i}");
        if !rt.block_on(sb.settle(Duration::ZERO)) {
            behind += 1;
        }
        let t = Instant::now();
        assert!(rt.block_on(sb.settle(Duration::from_secs(10))), "{test}: run {i}: not settled in 10 s");
        assert!(t.elapsed() < Duration::from_secs(5), "{test}: run {i}: settling took {:?}", t.elapsed());
    }
    assert!(behind > 0, "{test}: no run returned before its sandbox was gone");
    // CONTROL: the landlock-only mode waits for its helper, as before.
    for i in 0..5 {
        let mut req = ws.req(&["/bin/true"]);
        req.degraded = Some(Mode::LandlockOnly);
        let r = run_in(&rt, &sb, &req, &format!("{test}: landlock-only run {i}"));
        assert_eq!(r.enforcement.mode, Mode::LandlockOnly, "{test}");
        assert!(rt.block_on(sb.settle(Duration::ZERO)), "{test}: a landlock-only run left a teardown behind");
    }
}

/// Writable runs side by side and back to back: a run's git-guard cleanup
/// meets the cgroup leaves of earlier runs still being removed behind their
/// results (a leaf mid-removal answers `ENODEV`), and its own leaf, which
/// it found holding nothing of its command: none of it fails a run or
/// slows it down to a wait on its own leaf. `scripts/bench-spawn` found the
/// race (a `serve --audit` run failed with "emptying the cgroup ... No such
/// device" after about 200 writable commands); this test runs the same
/// path, which hits it only with the right timing.
#[test]
fn r0832_writable_runs_meet_leaves_being_removed_behind_them() {
    let test = "r0832";
    let ws = Ws::new();
    let rt = rt();
    let sb = sandbox();
    let req = || {
        let mut r = ws.req(&["/bin/true"]);
        r.writable = true;
        r
    };
    let started = Instant::now();
    for i in 0..60 {
        let (ra, rb) = (req(), req());
        let (a, b) =
            rt.block_on(async { tokio::join!(sb.run(&ra, RunOptions::default()), sb.run(&rb, RunOptions::default())) });
        for (k, r) in [a, b].into_iter().enumerate() {
            let r = r.unwrap_or_else(|e| panic!("{test}: round {i}, run {k}: {}", portcullis::error_chain(&e)));
            assert_eq!(r.outcome, Outcome::Exited { code: 0 }, "{test}: round {i}, run {k}");
            let unexpected: Vec<String> =
                r.warnings.iter().map(ToString::to_string).filter(|w| w.contains("cgroup")).collect();
            assert!(unexpected.is_empty(), "{test}: round {i}, run {k}: {unexpected:?}");
        }
    }
    assert!(rt.block_on(sb.settle(Duration::from_secs(10))), "{test}: the teardowns never finished");
    println!("{test}: 120 writable runs in {:?}", started.elapsed());
}

/// A sandbox of one command (`Sandbox::one_shot`, `portcullis exec`'s)
/// keeps what its run leaves behind for `settle`, which finishes it on the
/// caller's task: right after the result `settle(0)` may be cut short (the
/// helper still exiting; `behind`'s unit test makes that certain) and
/// keeps what it had not finished, and a settle with a bound, alone or two
/// at once, then finishes it. The control: an unsettled one-shot
/// sandbox's teardown is finished by its drop, bounded. (`cli::r0857`
/// checks from outside that nothing is left.)
#[test]
fn r0858_a_one_shot_sandbox_finishes_its_teardown_in_settle() {
    let test = "r0858";
    let ws = Ws::new();
    let rt = rt();
    let mut cut_short = 0;
    for i in 0..10 {
        let sb = sandbox().one_shot();
        let r = run_in(&rt, &sb, &ws.req(&["/bin/true"]), &format!("{test}: run {i}"));
        assert_eq!(r.outcome, Outcome::Exited { code: 0 }, "{test}: run {i}");
        if !rt.block_on(sb.settle(Duration::ZERO)) {
            cut_short += 1;
        }
        let t = Instant::now();
        let (a, b) =
            rt.block_on(async { tokio::join!(sb.settle(Duration::from_secs(10)), sb.settle(Duration::from_secs(10))) });
        assert!(a && b, "{test}: run {i}: not settled in 10 s ({a}, {b})");
        assert!(t.elapsed() < Duration::from_secs(5), "{test}: run {i}: settling took {:?}", t.elapsed());
    }
    println!("{test}: settle(0) was cut short after {cut_short} of 10 runs");
    // CONTROL: dropped unsettled, the run's rest is finished by the drop.
    let sb = sandbox().one_shot();
    let r = run_in(&rt, &sb, &ws.req(&["/bin/true"]), &format!("{test}: unsettled run"));
    assert_eq!(r.outcome, Outcome::Exited { code: 0 }, "{test}: unsettled run");
    let t = Instant::now();
    drop(sb);
    assert!(t.elapsed() < Duration::from_secs(5), "{test}: the drop took {:?}", t.elapsed());
}

/// The outer helper killed (`SIGKILL`) mid-run takes the whole sandbox with
/// it, as root too: pid 1's parent-death signal is set again after it
/// switches ids (a change of the effective ids clears it; found in review:
/// as root, pid 1 outlived the helper and the command ran on past its
/// timeout). Checked from outside by the command's unique argv. Control:
/// the command is seen running before the kill.
#[test]
fn r0867_a_killed_outer_helper_takes_the_sandbox_with_it() {
    let test = "r0867";
    let ws = Ws::new();
    let secs = format!("30.{}", std::process::id() % 1000 + 100);
    let mut cli = std::process::Command::new(bin_dir().join("portcullis"))
        .args(["exec", "--workspace"])
        .arg(ws.path())
        .args(["--timeout", "20", "--", "sleep", &secs])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{test}: {e}"));
    // The command itself (argv `sleep SECS`), not the CLI naming it.
    let running = || {
        std::fs::read_dir("/proc").into_iter().flatten().flatten().any(|e| {
            std::fs::read(e.path().join("cmdline")).is_ok_and(|c| {
                let argv: Vec<&[u8]> = c.split(|b| *b == 0).collect();
                argv.len() >= 2 && argv[0] == b"sleep" && argv[1] == secs.as_bytes()
            })
        })
    };
    // The helper is a child of one of the CLI's threads.
    let helper = || -> Option<i32> {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", cli.id())).ok()?;
        tasks.flatten().find_map(|t| {
            let kids = std::fs::read_to_string(t.path().join("children")).ok()?;
            kids.split_whitespace().filter_map(|p| p.parse().ok()).find(|p: &i32| {
                std::fs::read_to_string(format!("/proc/{p}/comm")).is_ok_and(|c| c.trim() == "portcullis-help")
            })
        })
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !running() {
        assert!(Instant::now() < deadline, "{test}: control: the command never showed up");
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid = helper().unwrap_or_else(|| panic!("{test}: no helper under the CLI"));
    // SAFETY: kill(2) on a pid read from our own child's children list.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0, "{test}: kill");
    let start = Instant::now();
    let status = cli.wait().unwrap_or_else(|e| panic!("{test}: {e}"));
    assert!(
        start.elapsed() < Duration::from_secs(8),
        "{test}: the CLI took {:?} after the helper's kill",
        start.elapsed()
    );
    assert_eq!(status.code(), Some(125), "{test}: {status:?}");
    let deadline = Instant::now() + Duration::from_secs(5);
    while running() {
        assert!(Instant::now() < deadline, "{test}: the command outlived its killed helper");
        std::thread::sleep(Duration::from_millis(20));
    }
}
