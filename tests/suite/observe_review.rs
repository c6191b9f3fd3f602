//! An adversarial review of the refused-write observer: paths the observer
//! cannot resolve the way the kernel does (magic links, `/proc/self`) are
//! counted as `unresolved`, never silently dropped; concurrent writers are
//! counted exactly and a timeout still ends a run whose writes are being
//! observed; killing the supervisor mid-notification leaves nothing running.
//! Every test checks from outside and has a control.

use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::util::*;

/// Two appends to README.md through magic links to a read-only fd: the
/// sandbox's `/dev/fd` (a link to `/proc/self/fd`) and `/proc/self/fd`.
const THROUGH_PROC: &str = "exec 3<README.md; echo x >>/dev/fd/3; echo y >>/proc/self/fd/3; echo z >>/proc/$$/fd/3";

#[test]
fn r0210_writes_through_proc_magic_links_count_as_unresolved_not_as_nothing() {
    let ws = Ws::new();
    let before = ws.snapshot();
    let r = sh(&ws, THROUGH_PROC, |_| {});
    let w = observed(&r);
    // Pinned: the kernel followed each link and refused with EROFS; nothing
    // landed. The observer cannot follow them (it never resolves through a
    // magic link, and /proc/self names the resolver): each is unresolved.
    assert_eq!(stderr(&r).matches("Read-only file system").count(), 3, "{}", stderr(&r));
    assert_eq!(ws.snapshot(), before, "a refused write landed");
    assert_eq!((w.count, w.unresolved), (0, 3), "{w:?}");
    // CONTROL 1: writable, the same three appends land (so they were real
    // writes through the links).
    let r = sh(&ws, THROUGH_PROC, |q| q.writable = true);
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    assert_eq!(ws.read("README.md"), "readme\nx\ny\nz\n");
    // CONTROL 2: a write that fails first for a missing directory is neither
    // refused nor unresolved; a plain refused create is refused.
    let r = sh(&ws, "echo x > nodir/y; mkdir /nodir/a; touch new.txt", |_| {});
    let w = observed(&r);
    assert_eq!((w.count, w.unresolved), (1, 0), "{w:?}");
    assert_eq!(w.sample, vec![fs::canonicalize(ws.path()).unwrap_or_else(|e| panic!("{e}")).join("new.txt")]);
}

#[test]
fn r0211_concurrent_writers_are_counted_exactly_and_a_timeout_still_ends_the_run() {
    let ws = Ws::new();
    let before = ws.snapshot();
    // 16 writers at once, 40 refused creations each.
    let line =
        "for i in $(seq 16); do (for j in $(seq 40); do true > t$i.$j 2>/dev/null; done) & done; wait; echo done";
    let r = sh(&ws, line, |_| {});
    let w = observed(&r);
    assert_eq!(stdout(&r).trim(), "done");
    assert_eq!((w.count, w.unresolved), (640, 0), "{w:?}");
    assert_eq!(ws.snapshot(), before, "a refused write landed");
    // With writes pending at every moment, the timeout kills the run on time.
    let start = Instant::now();
    let r = sh(&ws, "for i in 1 2 3 4; do (while :; do true > spin$i 2>/dev/null; done) & done; wait", |q| {
        q.timeout = Some(Duration::from_secs(1));
    });
    assert!((r.outcome == portcullis::sandbox::Outcome::TimedOut), "{r:?}");
    assert!(start.elapsed() < Duration::from_secs(15), "took {:?}", start.elapsed());
    let w = observed(&r);
    assert!(w.count > 0 && w.unresolved == 0, "{w:?}");
    assert_eq!(ws.snapshot(), before, "a refused write landed");
    // CONTROL: writable, the same writers' files land.
    let r = sh(&ws, line, |q| q.writable = true);
    assert_eq!(stdout(&r).trim(), "done");
    assert!(ws.join("t16.40").exists() && ws.join("t1.1").exists());
    assert_eq!(observed(&r).count, 0);
}

#[test]
fn r0212_killing_the_supervisor_mid_notification_leaves_nothing_running() {
    let ws = Ws::new();
    let tag = format!("7{}.{}", std::process::id(), std::time::UNIX_EPOCH.elapsed().map_or(0, |d| d.subsec_nanos()));
    // Every writer is in a watched call nearly all the time.
    let line = format!("for i in 1 2 3 4; do (while :; do true > k$i 2>/dev/null; done) & done; exec sleep {tag}");
    let mut child = cli()
        .args(["exec", "--workspace"])
        .arg(ws.path())
        .args(["--", "/bin/sh", "-c", &line])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning the CLI: {e}"));
    // CONTROL: the tree runs (its tagged process is visible on the host).
    let deadline = Instant::now() + Duration::from_secs(20);
    while host_procs_containing(&format!("sleep {tag}")).is_empty() {
        assert!(Instant::now() < deadline, "the command never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    let _ = child.kill(); // SIGKILL: no destructor, no teardown in the library
    let st = child.wait().unwrap_or_else(|e| panic!("waiting for the CLI: {e}"));
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&st), Some(libc::SIGKILL));
    let left = survivors(&tag);
    assert!(left.is_empty(), "survivors of the killed supervisor: {left:?}");
    // The writers are subshells: their command line holds the tag too. And
    // nothing landed in the read-only workspace.
    let after: Vec<PathBuf> = ["k1", "k2", "k3", "k4"].iter().map(|k| ws.join(k)).filter(|p| p.exists()).collect();
    assert!(after.is_empty(), "{after:?}");
}
