//! Limits and teardown: a memory limit applies, and a cancelled, abandoned or
//! orphaned run leaves no process and no cgroup leaf behind.
//!
//! Every attempt is real, each has a control that shows the same attempt
//! works with the restriction off, and each pins the errno or the typed
//! refusal.

use super::util::*;

#[test]
fn r0023_cancellation_kills_the_whole_tree() {
    use portcullis::sandbox::RunOptions;
    let ws = Ws::new();
    let marker = format!("sleep 7{}", std::process::id() % 1000);
    let req = ws.req(&["bash", "-c", &format!("{marker}1 & {marker}2 & wait")]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| panic!("{e}"));
    let cancel = tokio_util::sync::CancellationToken::new();
    let c2 = cancel.clone();
    let start = std::time::Instant::now();
    let r = rt.block_on(async move {
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            c2.cancel();
        });
        sandbox().run(&req, RunOptions { cancel: Some(cancel), ..RunOptions::default() }).await
    });
    let r = r.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.outcome, portcullis::sandbox::Outcome::Cancelled, "{r:?}");
    assert_eq!(r.outcome.exit_status(), 130);
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
    let left: Vec<String> = host_procs_containing(&marker);
    assert!(left.is_empty(), "survivors: {left:?}");
    // Control: without cancellation the same command would still be running.
    let mut quick = ws.req(&["sleep", "0.2"]);
    quick.timeout = Some(std::time::Duration::from_secs(5));
    let r = run_ok(&quick);
    assert!(!(r.outcome == portcullis::sandbox::Outcome::Cancelled) && r.outcome.code() == Some(0));
}

#[test]
fn r0024_memory_limit_applies() {
    let ws = Ws::new();
    let grab = ["/usr/bin/python3", "-c", "b = bytearray(300 * 1024 * 1024); print('allocated')"];
    let mut req = ws.req(&grab);
    req.limits.memory = Some(128 << 20);
    let r = run_ok(&req);
    assert_ne!(r.outcome.code(), Some(0), "300 MiB fit under a 128 MiB limit: {}", stdout(&r));
    assert!(stderr(&r).contains("MemoryError") || r.outcome.signal().is_some(), "{}", stderr(&r));
    assert!(r.enforcement.limits.memory.is_some());
    // Control: without the limit the allocation succeeds.
    let r = run_ok(&ws.req(&grab));
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    assert_eq!(stdout(&r), "allocated\n");
}

#[test]
fn r0025_an_abandoned_run_leaves_nothing_behind() {
    use portcullis::sandbox::RunOptions;
    let ws = Ws::new();
    let marker = format!("sleep 8{}", std::process::id() % 1000);
    let req = ws.req(&["bash", "-c", &format!("{marker}1 & {marker}2 & wait")]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| panic!("{e}"));
    let sb = sandbox();
    let dropped = rt.block_on(async {
        tokio::time::timeout(std::time::Duration::from_millis(400), sb.run(&req, RunOptions::default())).await
    });
    assert!(dropped.is_err(), "the run should still have been going");
    let procs: Vec<String> = host_procs_containing(&marker);
    // Dropping the run returns only once the helper tore the sandbox down.
    assert!(procs.is_empty(), "survivors of a dropped run: {procs:?}");
    if let Ok(host) = sb.cgroup_host() {
        let prefix = format!("portcullis-{}-", std::process::id());
        let left: Vec<String> = std::fs::read_dir(&host.parent)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&prefix))
            .collect();
        // Other tests of this process may have live leaves; a leaked one is
        // empty and stays: check the empty ones again a moment later.
        let empty = |n: &String| {
            std::fs::read_to_string(host.parent.join(n).join("cgroup.events"))
                .is_ok_and(|e| e.lines().any(|l| l == "populated 0"))
        };
        let suspects: Vec<String> = left.into_iter().filter(|n| empty(n)).collect();
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let leaked: Vec<&String> = suspects.iter().filter(|n| empty(n)).collect();
        assert!(leaked.is_empty(), "empty cgroup leaves left behind: {leaked:?}");
    }
}

#[test]
fn r0031_a_killed_caller_leaves_no_process_and_no_cgroup() {
    // Found in review: SIGKILL of the CLI left an empty cgroup leaf.
    let ws = Ws::new();
    let w = ws.path().display().to_string();
    let n = format!("9{}", std::process::id() % 1000);
    let marker = format!("sleep {n}");
    let mut child = cli()
        .args(["exec", "--workspace", &w, "--", "bash", "-c", &format!("{marker}1 & {marker}2; wait")])
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cli: {e}"));
    let cli_pid = child.id();
    // The sleepers themselves: argv exactly ["sleep", "<n>1"] (the CLI's own
    // argv holds the marker too, so a substring match would see the CLI).
    let alive = |suffix: &str| {
        let want = format!("sleep\0{n}{suffix}\0");
        host_cmdlines().iter().any(|c| c == want.as_bytes())
    };
    let start = std::time::Instant::now();
    while !alive("1") && start.elapsed() < std::time::Duration::from_secs(5) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(alive("1"), "control: the sandboxed sleeper never started");
    let _ = child.kill();
    let _ = child.wait();
    let start = std::time::Instant::now();
    while (alive("1") || alive("2")) && start.elapsed() < std::time::Duration::from_secs(5) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!alive("1") && !alive("2"), "the sandbox survived its caller");
    // The next Sandbox made sweeps leaves whose caller died.
    if let Ok(host) = sandbox().cgroup_host() {
        let leaf_prefix = format!("portcullis-{cli_pid}-");
        let start = std::time::Instant::now();
        let leaves = || -> Vec<String> {
            std::fs::read_dir(&host.parent)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&leaf_prefix))
                .collect()
        };
        // A leaf still populated for a moment (its last processes exiting)
        // is killed by a sweep and removed by the next one.
        while !leaves().is_empty() && start.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_millis(50));
            let _ = sandbox();
        }
        assert!(leaves().is_empty(), "cgroup leaf left behind: {:?}", leaves());
    }
}
