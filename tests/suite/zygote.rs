//! Helpers started through a zygote (`portcullis-helper --zygote`, see
//! `helper/src/zygote.rs` and `src/sandbox/launch.rs`): a sandbox that is
//! not one-shot forks its helpers from one zygote of its own, as the
//! caller's children showing a spawned helper's command line; the zygote
//! keeps none of the caller's descriptors, goes with the sandbox, and a
//! dead one is reaped and replaced.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use portcullis::sandbox::{Outcome, RunOptions, Sandbox};

use super::util::*;

/// A workspace, and a link to the helper under a path of this test's own
/// (in the directory returned with it), so that its processes are told
/// from every other test's by their command lines.
fn own_helper(test: &str) -> (Ws, tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{test}: {e}"));
    let link = dir.path().join("portcullis-helper");
    std::os::unix::fs::symlink(bin_dir().join("portcullis-helper"), &link).unwrap_or_else(|e| panic!("{test}: {e}"));
    (Ws::new(), dir, link)
}

/// This process's children whose argv is exactly `argv`: (pid, state).
fn children_with(argv: &[&str]) -> Vec<(u32, char)> {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    let me = std::process::id();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let Some((_, rest)) = stat.rsplit_once(')') else { continue };
        let mut f = rest.split_whitespace();
        let state = f.next().and_then(|s| s.chars().next()).unwrap_or('?');
        if f.next().and_then(|p| p.parse::<u32>().ok()) != Some(me) {
            continue;
        }
        let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        // A zygote's child shows its arguments in the zygote's area, the
        // rest of it zeroed.
        let trimmed = cmdline.iter().rposition(|b| *b != 0).map_or(&cmdline[..0], |i| &cmdline[..i + 1]);
        if trimmed == want.strip_suffix(&[0]).unwrap_or(&want) || cmdline == want {
            out.push((pid, state));
        }
    }
    out
}

/// This process's children's command lines (for a failure's message).
fn all_children() -> Vec<String> {
    let me = std::process::id();
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        let ppid = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok());
        if ppid == Some(me) {
            let c = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            out.push(format!("{:?} {:?}", e.file_name(), String::from_utf8_lossy(&c)));
        }
    }
    out
}

fn zygotes(helper: &Path) -> Vec<(u32, char)> {
    let h = helper.to_string_lossy();
    let me = std::process::id().to_string();
    children_with(&[&h, "--zygote", &me, "                "])
}

/// Wait up to 30 s for `f` to hold (a loaded CI machine can take seconds to
/// start a sandbox; it returns as soon as `f` holds).
fn until(mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

#[test]
fn r0880_a_sandbox_forks_its_helpers_from_one_zygote_that_goes_with_it() {
    let test = "r0880";
    let (ws, _dir, helper) = own_helper(test);
    let h = helper.to_string_lossy().to_string();
    let run_seen = |sb: &Sandbox| {
        // A run that lasts until its helper has been looked at, on a
        // thread of its own.
        let mark = ws.path().join("seen");
        let _ = std::fs::remove_file(&mark);
        let req = ws.req(&["/bin/sh", "-c", "while [ ! -e seen ]; do sleep 0.01; done; echo ran"]);
        let sb = sb.clone();
        let task = std::thread::spawn(move || rt().block_on(sb.run(&req, RunOptions::default())));
        let found = until(|| !children_with(&[&h]).is_empty());
        if !found {
            eprintln!("{test}: children: {:?}", all_children());
        }
        std::fs::write(&mark, "").unwrap_or_else(|e| panic!("{test}: {e}"));
        let r = task.join().unwrap_or_else(|_| panic!("{test}: the run's thread panicked"));
        let r = r.unwrap_or_else(|e| panic!("{test}: {}", portcullis::error_chain(&e)));
        assert_eq!((r.outcome, stdout(&r)), (Outcome::Exited { code: 0 }, "ran\n".to_string()), "{test}");
        found
    };
    // Control: a one-shot sandbox spawns its helper (this process's child,
    // with its own command line) and starts no zygote.
    let one = Sandbox::with_helper(helper.clone()).one_shot();
    assert!(run_seen(&one), "{test}: control: the spawned helper was not this process's child");
    assert_eq!(zygotes(&helper), vec![], "{test}: a one-shot sandbox started a zygote");
    drop(one);
    // A sandbox that lives: one zygote, and the helper it forks is this
    // process's child showing the spawned helper's command line.
    let sb = Sandbox::with_helper(helper.clone());
    assert!(run_seen(&sb), "{test}: the zygote's helper was not this process's child");
    let z = zygotes(&helper);
    assert_eq!(z.len(), 1, "{test}: {z:?}");
    assert!(run_seen(&sb), "{test}: second run");
    assert_eq!(zygotes(&helper), z, "{test}: the second run started another zygote");
    // A clone shares it; it goes (reaped, no zombie) with the last one.
    let copy = sb.clone();
    drop(sb);
    assert_eq!(zygotes(&helper), z, "{test}: the zygote went with a clone still there");
    drop(copy);
    assert!(until(|| zygotes(&helper).is_empty()), "{test}: the zygote outlived its sandbox: {:?}", zygotes(&helper));
    assert!(!Path::new(&format!("/proc/{}", z[0].0)).exists(), "{test}: the zygote was not reaped");
}

#[test]
fn r0881_a_dead_zygote_is_reaped_and_the_next_run_goes_on() {
    let test = "r0881";
    let (ws, _dir, helper) = own_helper(test);
    let rt = rt();
    let sb = Sandbox::with_helper(helper.clone());
    let run = |sb: &Sandbox| {
        let r = rt.block_on(sb.run(&ws.req(&["/bin/echo", "ok"]), RunOptions::default()));
        let r = r.unwrap_or_else(|e| panic!("{test}: {}", portcullis::error_chain(&e)));
        assert_eq!(stdout(&r), "ok\n", "{test}");
    };
    run(&sb);
    let first = zygotes(&helper);
    assert_eq!(first.len(), 1, "{test}: {first:?} {:?}", all_children());
    // SAFETY: kill(2) on our own child's pid, read just above.
    assert_eq!(unsafe { libc::kill(first[0].0 as i32, libc::SIGKILL) }, 0, "{test}: kill");
    assert!(until(|| zygotes(&helper).iter().all(|(_, s)| *s == 'Z')), "{test}: the zygote did not die");
    // The next run finds it dead: reaps it, starts another, and runs.
    run(&sb);
    let second = zygotes(&helper);
    assert_eq!(second.len(), 1, "{test}: {second:?}");
    assert_ne!(second[0].0, first[0].0, "{test}");
    assert!(!Path::new(&format!("/proc/{}", first[0].0)).exists(), "{test}: the dead zygote was not reaped");
    run(&sb);
}

const CHILD: &str = "PORTCULLIS_ZYGOTE_FD_CHILD";

/// Run by [`r0882_the_zygote_keeps_none_of_the_callers_descriptors`] in a
/// process of its own (no other test's children there to inherit the
/// pipe): a pipe made inheritable, a sandbox's first run (its zygote
/// starts then), the write end closed: the read end ends at once.
#[test]
#[ignore = "run by r0882 in a process of its own"]
fn zygote_fd_child() {
    let Some(mode) = std::env::var_os(CHILD) else { return };
    let ws = Ws::new();
    let mut fds = [0; 2];
    // SAFETY: pipe(2) into a two-element array; no O_CLOEXEC on purpose.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let sb = Sandbox::with_helper(bin_dir().join("portcullis-helper"));
    // Control: a plain child that inherits it holds it open.
    let holder = (mode == "control")
        .then(|| std::process::Command::new("sleep").arg("3").spawn().unwrap_or_else(|e| panic!("sleep: {e}")));
    let r = rt().block_on(sb.run(&ws.req(&["/bin/true"]), RunOptions::default()));
    assert!(r.is_ok_and(|r| r.outcome == Outcome::Exited { code: 0 }), "the run");
    // SAFETY: closing our write end; then a read with a timeout on ours.
    unsafe { libc::close(fds[1]) };
    let mut p = libc::pollfd { fd: fds[0], events: libc::POLLIN, revents: 0 };
    // SAFETY: one pollfd we own, 1 s.
    let ready = unsafe { libc::poll(&mut p, 1, 1000) };
    let mut b = [0u8; 1];
    // SAFETY: a read of one byte into a live buffer, only when ready.
    let ended = ready == 1 && unsafe { libc::read(fds[0], b.as_mut_ptr().cast(), 1) } == 0;
    println!("ENDED={ended}");
    drop(holder.map(|mut h| h.kill()));
    drop(sb);
}

#[test]
fn r0882_the_zygote_keeps_none_of_the_callers_descriptors() {
    let test = "r0882";
    let Ok(exe) = std::env::current_exe() else { panic!("{test}: the test binary") };
    let child = |mode: &str| {
        let out = std::process::Command::new(&exe)
            .args(["--exact", "suite::zygote::zygote_fd_child", "--ignored", "--nocapture"])
            .env(CHILD, mode)
            .output()
            .unwrap_or_else(|e| panic!("{test}: {e}"));
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success() && text.contains("1 passed"), "{test}: {mode}: {text}");
        text.contains("ENDED=true")
    };
    assert!(!child("control"), "{test}: control: a child that inherits the pipe did not hold it open");
    assert!(child("zygote"), "{test}: the zygote held the caller's pipe open");
}

/// This process's children in process group `pgid` (a zygote's, whose
/// children are in it until let go): none left means all were reaped.
fn group_left(pgid: u32) -> bool {
    // SAFETY: zeroed storage for the siginfo the kernel fills.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid on our own children of one group, peeking (WNOWAIT),
    // into a live siginfo.
    let r = unsafe {
        libc::waitid(libc::P_PGID, pgid as libc::id_t, &mut info, libc::WEXITED | libc::WNOHANG | libc::WNOWAIT)
    };
    r == 0
}

#[test]
fn r0883_an_answer_the_caller_cannot_take_lets_no_helper_run() {
    // Found in review: the zygote let its child run once its answer was
    // sent; an answer whose pidfd found no room in the caller (EMFILE)
    // was taken for none, the helper spawned again, and the command ran
    // twice. Now the caller lets the child go once it holds the pidfd.
    let test = "r0883";
    let (ws, _dir, helper) = own_helper(test);
    let rt = rt();
    let sb = Sandbox::with_helper(helper.clone());
    let mut append = ws.req(&["/bin/sh", "-c", "echo ran >> count; echo done"]);
    append.writable = true;
    let run = |what: &str| {
        let r = rt.block_on(sb.run(&append, RunOptions::default()));
        let r = r.unwrap_or_else(|e| panic!("{test}: {what}: {}", portcullis::error_chain(&e)));
        assert_eq!((r.outcome, stdout(&r)), (Outcome::Exited { code: 0 }, "done\n".to_string()), "{test}: {what}");
    };
    let count = || std::fs::read_to_string(ws.path().join("count")).unwrap_or_default();
    // Control: through the zygote, one run appends once.
    run("control");
    assert_eq!(count(), "ran\n", "{test}: control");
    let first = zygotes(&helper);
    assert_eq!(first.len(), 1, "{test}: {first:?}");
    // The next answer is lost: the zygote is replaced, its child reaped
    // without running, and the command runs once, from the new zygote.
    sb.lose_zygote_answers_for_tests(1);
    run("lost answer");
    assert_eq!(count(), "ran\nran\n", "{test}: the command did not run exactly once more");
    let second = zygotes(&helper);
    assert!(
        second.len() == 1 && second[0].0 != first[0].0,
        "{test}: the zygote was not replaced: {first:?} {second:?}"
    );
    assert!(!group_left(first[0].0), "{test}: a child of the lost answer's zygote was left unreaped");
    assert!(!Path::new(&format!("/proc/{}", first[0].0)).exists(), "{test}: the old zygote was not reaped");
}

#[test]
fn r0884_a_thread_that_changed_its_privileges_gets_a_zygote_of_its_own() {
    // Found in review: a zygote's helpers inherit the state of the thread
    // that started it, not of the one asking: a caller that set
    // no_new_privs (or dropped root, or loaded a filter) after its sandbox
    // started would have had helpers without it. A spawned helper inherits
    // the spawning thread's; a zygote started from another state is
    // replaced by one started from the asking thread.
    let test = "r0884";
    let (ws, _dir, helper) = own_helper(test);
    let h = helper.to_string_lossy().to_string();
    let nnp = |pid: u32| {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status.lines().find(|l| l.starts_with("NoNewPrivs:")).map(|l| l.trim_end().ends_with('1'))
    };
    // The helper of a run from a thread with no_new_privs set, seen while
    // it runs; every run on that thread.
    let helper_nnp = |sb: &Sandbox| {
        let sb = sb.clone();
        let mark = ws.path().join("seen");
        let _ = std::fs::remove_file(&mark);
        let req = ws.req(&["/bin/sh", "-c", "while [ ! -e seen ]; do sleep 0.01; done"]);
        // A helper of this run: not one of an earlier run still exiting
        // (listed before the run's thread starts, which may spawn its
        // helper at once).
        let before: Vec<u32> = children_with(&[&h]).iter().map(|(p, _)| *p).collect();
        let task = std::thread::spawn(move || {
            // SAFETY: prctl on this thread only, no pointers.
            assert_eq!(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) }, 0);
            rt().block_on(sb.run(&req, RunOptions::default()))
        });
        let mut seen = None;
        until(|| {
            let now = children_with(&[&h]);
            seen = now.iter().find(|(p, _)| !before.contains(p)).and_then(|(pid, _)| nnp(*pid));
            seen.is_some()
        });
        std::fs::write(&mark, "").unwrap_or_else(|e| panic!("{test}: {e}"));
        let r = task.join().unwrap_or_else(|_| panic!("{test}: the run's thread panicked"));
        assert!(r.is_ok_and(|r| r.outcome == Outcome::Exited { code: 0 }), "{test}: the run");
        seen
    };
    // Control: a spawned helper has the spawning thread's no_new_privs.
    let one = Sandbox::with_helper(helper.clone()).one_shot();
    assert_eq!(helper_nnp(&one), Some(true), "{test}: control");
    // A zygote started from this thread (no no_new_privs), then a run
    // from a thread with it: its helper has it too.
    let sb = Sandbox::with_helper(helper.clone());
    let r = rt().block_on(sb.run(&ws.req(&["/bin/true"]), RunOptions::default()));
    assert!(r.is_ok_and(|r| r.outcome == Outcome::Exited { code: 0 }), "{test}: first run");
    let first = zygotes(&helper);
    assert_eq!(first.len(), 1, "{test}: {first:?}");
    assert_eq!(helper_nnp(&sb), Some(true), "{test}: the zygote's helper lacked the asking thread's no_new_privs");
    let second = zygotes(&helper);
    assert!(second.len() == 1 && second[0].0 != first[0].0, "{test}: no new zygote: {first:?} {second:?}");
}

/// The parent of `pid` (`/proc/PID/stat`'s fourth field).
fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// The process whose command line is exactly `argv` and whose ancestors
/// include `ancestor`.
fn descendant_with(ancestor: u32, argv: &[&str]) -> Option<u32> {
    let want: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    std::fs::read_dir("/proc").into_iter().flatten().flatten().find_map(|e| {
        let pid = e.file_name().to_str()?.parse::<u32>().ok()?;
        if std::fs::read(e.path().join("cmdline")).ok()? != want {
            return None;
        }
        let mut p = pid;
        while let Some(up) = parent(p).filter(|u| *u > 1) {
            if up == ancestor {
                return Some(pid);
            }
            p = up;
        }
        None
    })
}

/// A sandbox that lives clones each command's pid 1 through its zygote:
/// pid 1 is the server's own child, with no outer helper between them (one
/// process fewer per command), in namespaces of its own, for a pre-made
/// sandbox (`pool = 2`) and a fresh one (`pool = 0`) alike; and a command
/// running in it dies with the server's process, through the lifeline pid
/// 1 watches (it has no parent-death signal: its parent is whichever thread
/// started the zygote), and leaves no cgroup leaf (the zygote removes its
/// slots'). Control: `portcullis exec` (one shot) has its pid 1 under an
/// outer helper, two helper processes up, and its command dies the same
/// way.
#[test]
fn r0885_a_resident_command_has_no_outer_helper_and_dies_with_the_server() {
    let test = "r0885";
    for pool in [Some(2), Some(0), None] {
        let ws = Ws::new();
        let secs = format!("{}.25", 800 + pool.unwrap_or(9));
        let (mut child, _server) = match pool {
            Some(n) => {
                let mut s = serve_with_pool(&ws, n);
                s.call(1, "run_shell", serde_json::json!({"command": "true"}));
                assert_eq!(s.structured(1)["exit_code"], 0, "{test}: pool {pool:?}");
                s.call(2, "run_shell", serde_json::json!({"command": format!("sleep {secs}")}));
                // The child is killed below; the server's handle stays
                // (its pipes) until then.
                let child = std::mem::replace(
                    &mut s.child,
                    std::process::Command::new("true").spawn().unwrap_or_else(|e| panic!("{e}")),
                );
                (child, Some(s))
            }
            None => {
                let mut cmd = cli();
                cmd.args(["exec", "--workspace"]).arg(ws.path()).args(["--", "sleep", &secs]);
                cmd.stdin(std::process::Stdio::null()).stdout(std::process::Stdio::null());
                (cmd.spawn().unwrap_or_else(|e| panic!("{test}: {e}")), None)
            }
        };
        let server = child.id();
        let mut sleeper = None;
        assert!(
            until(|| {
                sleeper = descendant_with(server, &["sleep", &secs]);
                sleeper.is_some()
            }),
            "{test}: pool {pool:?}: the command never ran"
        );
        let sleeper = sleeper.unwrap_or_default();
        // Its ancestors up to the server: the helper processes among them.
        let mut chain = Vec::new();
        let mut p = sleeper;
        while let Some(up) = parent(p).filter(|u| *u != server && *u > 1) {
            chain.push(
                String::from_utf8_lossy(&std::fs::read(format!("/proc/{up}/cmdline")).unwrap_or_default()).into_owned(),
            );
            p = up;
        }
        let helpers = chain.iter().filter(|c| c.contains("portcullis-helper")).count();
        let pid1 = p;
        let ns = |pid: u32| std::fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
        assert_ne!(ns(sleeper), ns(server), "{test}: pool {pool:?}: the command is in the server's pid namespace");
        match pool {
            None => assert_eq!(helpers, 2, "{test}: control: an outer helper and pid 1 under exec: {chain:?}"),
            Some(_) => {
                assert_eq!(helpers, 1, "{test}: pool {pool:?}: pid 1 alone under the server: {chain:?}");
                assert_eq!(parent(pid1), Some(server), "{test}: pool {pool:?}: pid 1 is not the server's child");
                assert_ne!(ns(pid1), ns(server), "{test}: pool {pool:?}: pid 1 in the server's pid namespace");
            }
        }
        // Where this user can make cgroup leaves: the server's runs and
        // slots have theirs (control), and none is left once it is killed.
        let leaf_dir = leaf_parent();
        let leaves = || leaves_of(leaf_dir.as_deref(), server);
        if leaf_dir.is_some() {
            assert!(!leaves().is_empty(), "{test}: pool {pool:?}: control: the server has no cgroup leaf");
        }
        // The server gets no say.
        let _ = child.kill();
        let _ = child.wait();
        let gone = until(|| !Path::new(&format!("/proc/{sleeper}")).exists());
        assert!(gone, "{test}: pool {pool:?}: the command outlived the server");
        assert!(until(|| !Path::new(&format!("/proc/{pid1}")).exists()), "{test}: pool {pool:?}: pid 1 outlived it");
        // (A one-shot outer helper that made the network in pid 1's user
        // namespace cannot remove its leaf: the next sandbox made sweeps
        // it, `cgroup::sweep_orphans`.)
        if pool.is_some() {
            assert!(until(|| leaves().is_empty()), "{test}: pool {pool:?}: leaves left: {:?}", leaves());
        }
    }
}

/// The cgroup leaves a dead server's sandboxes leave are removed by its
/// zygote, also those of the slots a zygote it replaced had cloned (a
/// review found them left: the zygote knew only its own), and while a
/// tree dies slowly. Here the zygotes are killed (as an OOM kill would),
/// a command runs (a new zygote), and the server is killed.
#[test]
fn r0886_a_dead_servers_leaves_are_removed_after_its_zygotes_were_replaced() {
    let test = "r0886";
    let Some(leaf_dir) = leaf_parent() else {
        assert!(
            std::env::var_os("PORTCULLIS_REQUIRE_ALL_LAYERS").is_none() || !nix::unistd::getuid().is_root(),
            "{test}: no cgroup leaf can be made as root"
        );
        eprintln!("{test}: skipping: no cgroup leaf can be made here (uid 65534 has no delegated cgroup)");
        return;
    };
    let ws = Ws::new();
    let mut s = serve_with_pool(&ws, 2);
    let server = s.child.id();
    let leaves = || leaves_of(Some(&leaf_dir), server);
    s.call(1, "run_shell", serde_json::json!({"command": "true"}));
    assert_eq!(s.structured(1)["exit_code"], 0, "{test}");
    let zygotes = |of: u32| -> Vec<u32> {
        std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|p| parent(*p) == Some(of))
            .filter(|p| {
                std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.windows(9).any(|w| w == b"\0--zygote"))
            })
            .collect()
    };
    let first = zygotes(server);
    assert!(!first.is_empty(), "{test}: control: the server has no zygote");
    for z in &first {
        // SAFETY: kill(2) on a process found just above.
        unsafe { libc::kill(*z as i32, libc::SIGKILL) };
    }
    // The next command takes a slot the killed zygote made (the other
    // stays, its leaf known to no zygote alive); the refill starts a new
    // zygote.
    s.call(2, "run_shell", serde_json::json!({"command": "true"}));
    assert_eq!(s.structured(2)["exit_code"], 0, "{test}: call 2");
    assert!(until(|| zygotes(server).iter().any(|z| !first.contains(z))), "{test}: no zygote replaced the killed ones");
    assert!(!leaves().is_empty(), "{test}: control: the server has no cgroup leaf");
    let _ = s.child.kill();
    let _ = s.child.wait();
    assert!(until(|| leaves().is_empty()), "{test}: leaves left: {:?}", leaves());
}

/// `portcullis serve` on `ws` with the MCP tests' policy and `pool`.
fn serve_with_pool(ws: &Ws, pool: usize) -> super::mcp_server::Serve {
    let policy = ws.path().with_extension("policy.toml");
    let text = format!("pool = {pool}\n{}", super::mcp_server::POLICY);
    std::fs::write(&policy, text).unwrap_or_else(|e| panic!("policy: {e}"));
    let mut cmd = cli();
    cmd.arg("serve").arg("--workspace").arg(ws.path()).arg("--policy").arg(&policy);
    super::mcp_server::Serve::spawn(cmd)
}

/// The directory this user's sandboxes make their cgroup leaves in, where
/// it can make them.
fn leaf_parent() -> Option<PathBuf> {
    sandbox().cgroup_host().ok().filter(|h| h.plan(None, None).is_ok()).map(|h| h.parent.clone())
}

/// The leaves of process `pid` in `parent`.
fn leaves_of(parent: Option<&Path>, pid: u32) -> Vec<String> {
    let Some(Ok(rd)) = parent.map(std::fs::read_dir) else { return Vec::new() };
    let prefix = format!("portcullis-{pid}-");
    rd.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).filter(|n| n.starts_with(&prefix)).collect()
}
