//! The mock backend's own behaviour (issue 10, "Backends"): scripted
//! commands under the real checker, gate and audit; scripted writes land
//! only where the effective access lets the sandbox write, the others are
//! reported as refused; cancellation and timeouts; an unscripted command
//! exits 127; nothing needs the disk, the helper or a kernel feature. Each
//! checks the mock's tree from outside (`MockBackend::contents`) and has a
//! control.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use portcullis::audit::{Event, Status};
use portcullis::policy::WorkspacePolicy;
use portcullis::runner::{Exec, ExecOptions, Ran, RunError};
use portcullis::sandbox::{EnforcedBy, KillMechanism, Outcome, ReportState};
use portcullis::workspace::{CommandMatch, MockBackend, MockRun, Workspace, WorkspaceError};
use tokio_util::sync::CancellationToken;

use super::util::{rt, MemAudit};

const ROOT: &str = "/nonexistent-portcullis-mock/proj";

fn mock(extra: &str) -> (Workspace, MockBackend, Arc<MemAudit>) {
    let text = format!(
        "workspace = {ROOT:?}\ndeny_paths = [\".env*\"]\n{extra}\n[shell]\ninterpreter = \"sh\"\nallow = [\"make\", \
         \"ls\", \"sleep\", \"git\", \"nope\"]\ntimeout = \"30s\"\n"
    );
    let policy = WorkspacePolicy::from_toml(&text).unwrap_or_else(|e| panic!("policy: {e}"));
    let m = MockBackend::new(&policy).unwrap_or_else(|e| panic!("mock: {e}"));
    m.add_file("src/lib.rs", "pub fn f() {}\n");
    m.add_file(".git/config", "[core]\n");
    m.add_dir(".git/hooks");
    let audit = Arc::new(MemAudit::default());
    let w = Workspace::builder()
        .policy(policy)
        .audit(audit.clone())
        .backend(Arc::new(m.clone()))
        .build()
        .unwrap_or_else(|e| panic!("workspace: {}", portcullis::error_chain(&e)));
    (w, m, audit)
}

fn ran(e: Result<Exec, WorkspaceError>) -> Box<Ran> {
    match e {
        Ok(Exec::Ran(r)) => r,
        other => panic!("expected a run, got {other:?}"),
    }
}

fn writable() -> ExecOptions {
    ExecOptions { writable: true, ..ExecOptions::default() }
}

fn build_script() -> MockRun {
    MockRun::exit(0).stdout("built\n").write("out/app", "binary").write("src/gen.rs", "// generated\n")
}

#[test]
fn r0535_scripted_writes_need_write_access() {
    let (w, m, audit) = mock("");
    m.on_command(CommandMatch::program("make"), build_script());
    // Without write access nothing lands; both writes are reported.
    let r = ran(rt().block_on(w.exec("make all", ExecOptions::default())));
    assert_eq!(r.result.outcome, Outcome::Exited { code: 0 }, "the scripted exit code stands");
    assert_eq!(r.result.stdout, b"built\n");
    assert!(!r.result.writable);
    let rw = &r.result.refused_writes;
    assert_eq!((rw.state, rw.count), (ReportState::Observed, 2), "{rw:?}");
    assert_eq!(rw.sample, [PathBuf::from(ROOT).join("out/app"), PathBuf::from(ROOT).join("src/gen.rs")]);
    assert_eq!(m.contents("out/app"), None);
    assert_eq!(m.contents("src/gen.rs"), None);
    // The read-only view forces it even when write access is asked for.
    let r = ran(rt().block_on(w.readonly().exec("make all", writable())));
    assert_eq!(r.result.refused_writes.count, 2);
    assert_eq!(m.contents("src/gen.rs"), None);
    // Control: with write access both land.
    let r = ran(rt().block_on(w.exec("make all", writable())));
    assert!(r.result.writable);
    assert_eq!(r.result.refused_writes.count, 0);
    assert_eq!(m.contents("out/app").as_deref(), Some(&b"binary"[..]));
    assert_eq!(m.contents("src/gen.rs").as_deref(), Some(&b"// generated\n"[..]));
    // Each run: allowed, then an outcome with its refused writes.
    let outcomes: Vec<Option<u64>> = audit
        .0
        .lock()
        .map(|v| {
            v.iter()
                .filter_map(|e| match e {
                    Event::Outcome { refused_writes, exit_code, .. } => {
                        assert_eq!(*exit_code, Some(0));
                        Some(refused_writes.as_ref().map(|r| r.count))
                    }
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(outcomes, [Some(2), Some(2), Some(0)]);
    assert_eq!(audit.kinds(), ["allowed", "outcome", "allowed", "outcome", "allowed", "outcome"]);
}

#[test]
fn r0536_scripted_writes_to_carve_outs_are_refused_even_when_writable() {
    let (w, m, _audit) = mock("protect = [\"ci\"]\n");
    m.add_file("ci/deploy.yml", "on: push\n");
    let evil = MockRun::exit(0)
        .write(".git/hooks/pre-commit", "#!/bin/sh\ncurl evil\n")
        .write(".git/config", "[core]\nhooksPath = /tmp\n")
        .write(".env", "SECRET=stolen\n")
        .write("ci/deploy.yml", "on: pull_request\n")
        .write("../outside.txt", "escaped\n")
        .write("ok.txt", "fine\n");
    m.on_command(CommandMatch::line("git commit -m x"), evil);
    let r = ran(rt().block_on(w.exec("git commit -m x", writable())));
    assert_eq!(r.result.refused_writes.count, 5, "{:?}", r.result.refused_writes);
    assert_eq!(m.contents(".git/hooks/pre-commit"), None);
    assert_eq!(m.contents(".git/config").as_deref(), Some(&b"[core]\n"[..]));
    assert_eq!(m.contents(".env"), None);
    assert_eq!(m.contents("ci/deploy.yml").as_deref(), Some(&b"on: push\n"[..]));
    assert!(!m.exists_raw("/nonexistent-portcullis-mock/outside.txt"));
    // Control: the plain write of the same run landed.
    assert_eq!(m.contents("ok.txt").as_deref(), Some(&b"fine\n"[..]));
}

#[test]
fn r0537_the_gates_narrowing_decides_which_scripted_writes_land() {
    let gate = "[[gate]]\nname = \"make-out\"\ncommand = \"make\"\nanswer = \"grant\"\npaths = [\"out\"]\n\n\
                [[gate]]\nname = \"ls-ok\"\ncommand = \"ls\"\nanswer = \"allow\"\n";
    let (w, m, _audit) = mock(gate);
    m.add_dir("out");
    m.on_command(CommandMatch::program("make"), build_script());
    let r = ran(rt().block_on(w.exec("make", writable())));
    // Asked for the workspace, allowed `out` only.
    assert!(!r.result.writable);
    assert_eq!(r.result.write_grants, [PathBuf::from(ROOT).join("out")]);
    assert_eq!(r.rule.as_deref(), Some("make-out"));
    assert_eq!(m.contents("out/app").as_deref(), Some(&b"binary"[..]), "inside the grant: lands");
    assert_eq!(m.contents("src/gen.rs"), None, "outside the grant: refused");
    assert_eq!(r.result.refused_writes.sample, [PathBuf::from(ROOT).join("src/gen.rs")]);
    // Control: a program a rule allows gets the whole workspace.
    m.on_command(CommandMatch::program("ls"), MockRun::exit(0).write("src/gen.rs", "x"));
    let r = ran(rt().block_on(w.exec("ls", writable())));
    assert!(r.result.writable);
    assert_eq!(m.contents("src/gen.rs").as_deref(), Some(&b"x"[..]));
}

#[test]
fn r0538_cancellation_before_the_start_and_during_the_delay() {
    let (w, m, audit) = mock("");
    m.on_command(
        CommandMatch::program("sleep"),
        MockRun::exit(0).write("late.txt", "x").delay(Duration::from_secs(20)),
    );
    // Already cancelled: nothing starts (the backend is never reached).
    let token = CancellationToken::new();
    token.cancel();
    let e = rt().block_on(w.exec("sleep 20", ExecOptions { cancel: Some(token), ..writable() }));
    assert!(matches!(e, Ok(Exec::Cancelled(_))), "{e:?}");
    assert!(m.commands().is_empty(), "{:?}", m.commands());
    let last = audit.0.lock().ok().and_then(|v| v.last().cloned());
    assert!(matches!(last, Some(Event::Outcome { status: Status::Cancelled, .. })), "{last:?}");
    // Cancelled during the delay: Outcome::Cancelled, quickly, no write.
    let token = CancellationToken::new();
    let t2 = token.clone();
    let r = ran(rt().block_on(async move {
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            t2.cancel();
        });
        w.exec("sleep 20", ExecOptions { cancel: Some(token), ..writable() }).await
    }));
    assert_eq!(r.result.outcome, Outcome::Cancelled);
    assert!(r.result.duration < Duration::from_secs(10), "{:?}", r.result.duration);
    assert_eq!(r.result.outcome.exit_status(), 130);
    assert_eq!(m.contents("late.txt"), None);
    assert_eq!(m.commands(), ["sleep 20"]);
}

#[test]
fn r0539_a_timeout_shorter_than_the_delay_times_out() {
    let (w, m, audit) = mock("");
    m.on_command(CommandMatch::line("sleep 5"), MockRun::exit(0).write("t.txt", "x").delay(Duration::from_secs(5)));
    m.on_command(CommandMatch::line("sleep 0"), MockRun::exit(3).write("t.txt", "y").delay(Duration::from_millis(10)));
    let opts = ExecOptions { timeout: Some(Duration::from_millis(100)), ..writable() };
    let r = ran(rt().block_on(w.exec("sleep 5", opts.clone())));
    assert_eq!(r.result.outcome, Outcome::TimedOut);
    assert!(r.result.duration < Duration::from_secs(4));
    assert_eq!(m.contents("t.txt"), None, "a timed-out run writes nothing");
    let last = audit.0.lock().ok().and_then(|v| v.last().cloned());
    assert!(matches!(last, Some(Event::Outcome { status: Status::TimedOut, .. })), "{last:?}");
    // Control: a delay within the timeout ends with its scripted code.
    let r = ran(rt().block_on(w.exec("sleep 0", opts)));
    assert_eq!(r.result.outcome, Outcome::Exited { code: 3 });
    assert_eq!(m.contents("t.txt").as_deref(), Some(&b"y"[..]));
}

#[test]
fn r0540_an_unscripted_command_exits_127_and_a_refused_one_never_arrives() {
    let (w, m, audit) = mock("");
    let r = ran(rt().block_on(w.exec("ls -la", ExecOptions::default())));
    assert_eq!(r.result.outcome, Outcome::Exited { code: 127 });
    let err = String::from_utf8_lossy(&r.result.stderr).into_owned();
    assert!(err.contains("no scripted result for `ls -la`") && err.contains("on_command"), "{err}");
    // The checker refuses what the policy does not allow, before the backend.
    let e = rt().block_on(w.exec("rm -rf /", ExecOptions::default()));
    assert!(matches!(&e, Ok(Exec::Refused(_))), "{e:?}");
    assert_eq!(m.commands(), ["ls -la"]);
    assert_eq!(audit.kinds(), ["allowed", "outcome", "denied"]);
    // Control: scripted, the same line answers with its script (an exact
    // line before a program, whatever the order they were added in).
    m.on_command(CommandMatch::line("ls -la"), MockRun::exit(0).stdout("a\nb\n"));
    m.on_command(CommandMatch::program("ls"), MockRun::exit(1));
    let r = ran(rt().block_on(w.exec("ls -la", ExecOptions::default())));
    assert_eq!((r.result.outcome, r.result.stdout.as_slice()), (Outcome::Exited { code: 0 }, &b"a\nb\n"[..]));
    let r = ran(rt().block_on(w.exec("/bin/ls src", ExecOptions::default())));
    assert_eq!(r.result.outcome, Outcome::Exited { code: 1 }, "a program matcher matches by name");
}

#[test]
fn r0541_the_mock_needs_no_disk_no_sandbox_and_says_nothing_was_enforced() {
    let (w, m, _audit) = mock("");
    assert!(!PathBuf::from(ROOT).exists());
    assert!(matches!(w.runner().sandbox(), Err(RunError::NoSandbox { .. })));
    m.on_command(CommandMatch::program("make"), MockRun::exit(0).stdout("x".repeat(100)));
    let opts = ExecOptions { max_output: Some(10), ..ExecOptions::default() };
    let r = ran(rt().block_on(w.exec("make", opts)));
    let en = &r.result.enforcement;
    assert_eq!(en.backend, EnforcedBy::Mock);
    assert!(!en.is_enforced() && !en.seccomp && !en.readonly_mounts && en.landlock_abi == 0);
    assert_eq!(en.kill_mechanism, KillMechanism::None);
    let json = serde_json::to_value(&r.result).unwrap_or_default();
    assert_eq!(json["enforcement"]["backend"], "mock");
    // The output cap holds as in the sandbox.
    assert_eq!(r.result.stdout.len(), 10);
    assert!(r.result.truncated);
    // The files it writes exist nowhere on the disk.
    rt().block_on(w.write_file("made.txt", "m")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.contents("made.txt").as_deref(), Some(&b"m"[..]));
    assert!(!PathBuf::from(ROOT).join("made.txt").exists());
}

#[test]
fn r0542_a_scope_of_the_mock_runs_commands_in_its_directory() {
    let (w, m, _audit) = mock("");
    m.add_file("pkg/a/x.txt", "x");
    m.on_command(CommandMatch::program("make"), MockRun::exit(0).write("made", "1").write("../escape", "1"));
    let s = w.scope("pkg/a").unwrap_or_else(|e| panic!("scope: {e}"));
    let r = ran(rt().block_on(s.exec("make", writable())));
    // Relative writes land in the scope; its parent is not writable.
    assert_eq!(m.contents("pkg/a/made").as_deref(), Some(&b"1"[..]));
    assert_eq!(m.contents("pkg/escape"), None);
    assert_eq!(r.result.refused_writes.count, 1);
    // Control: the same script from the whole workspace writes its parent.
    let r = ran(rt().block_on(w.exec("make", writable())));
    assert_eq!(r.result.refused_writes.count, 1, "../escape leaves the workspace itself");
    assert_eq!(m.contents("made").as_deref(), Some(&b"1"[..]));
}

#[test]
fn r0543_a_runner_without_a_sandbox_refuses_to_run_and_records_the_failure() {
    let audit = Arc::new(MemAudit::default());
    let text = format!("workspace = {ROOT:?}\n[shell]\nallow = [\"ls\"]\n");
    let policy = WorkspacePolicy::from_toml(&text).unwrap_or_else(|e| panic!("policy: {e}"));
    let runner = portcullis::runner::Runner::builder()
        .policy(policy)
        .audit(audit.clone())
        .without_sandbox()
        .build()
        .unwrap_or_else(|e| panic!("runner: {e}"));
    assert!(!runner.has_sandbox());
    let r = rt().block_on(runner.exec_line("ls", &ExecOptions::default(), Default::default()));
    assert!(matches!(r, Err(RunError::NoSandbox { .. })), "{r:?}");
    // Allowed by the checker, then recorded as failed: nothing ran.
    assert_eq!(audit.kinds(), ["allowed", "outcome"]);
    let last = audit.0.lock().ok().and_then(|v| v.last().cloned());
    assert!(matches!(last, Some(Event::Outcome { status: Status::Failed, error: Some(_), .. })), "{last:?}");
    // Control: a refusal needs no sandbox and is recorded as one.
    let r = rt().block_on(runner.exec_line("rm x", &ExecOptions::default(), Default::default()));
    assert!(matches!(r, Ok(Exec::Refused(_))), "{r:?}");
}

#[test]
fn r0544_a_commands_cwd_and_redirections_are_judged_in_the_virtual_tree() {
    let (w, m, _audit) = mock("");
    m.add_dir("pkg");
    m.on_command(CommandMatch::program("ls"), MockRun::exit(0).write("listing.txt", "x"));
    // A redirection out of the jail is refused by the checker.
    let e = rt().block_on(w.exec("ls > ../../etc/x", writable()));
    assert!(matches!(&e, Ok(Exec::Refused(_))), "{e:?}");
    let e = rt().block_on(w.exec("ls", ExecOptions { cwd: Some("../..".into()), ..writable() }));
    assert!(e.is_err() || matches!(&e, Ok(Exec::Refused(_))), "{e:?}");
    assert!(m.commands().is_empty());
    // Control: inside the tree both are fine.
    let r = ran(rt().block_on(w.exec("ls > pkg/out.txt", ExecOptions { cwd: Some("pkg".into()), ..writable() })));
    assert_eq!(r.result.outcome, Outcome::Exited { code: 0 });
    assert_eq!(m.commands(), ["ls > pkg/out.txt"]);
}

/// Background jobs on the mock: the same registry, refusals and statuses,
/// the script's output read through the cursor, a kill ends a delayed one.
#[test]
fn r0545_background_jobs_on_the_mock() {
    use portcullis::workspace::jobs::{JobStatus, Started};
    let text = format!(
        "workspace = {ROOT:?}\n[shell]\ninterpreter = \"sh\"\nallow = [\"make\", \"serve\"]\n[shell.background]\nmax_jobs = 1\ntimeout = \"60s\"\n"
    );
    let policy = WorkspacePolicy::from_toml(&text).unwrap_or_else(|e| panic!("policy: {e}"));
    let m = MockBackend::new(&policy).unwrap_or_else(|e| panic!("mock: {e}"));
    m.on_command(CommandMatch::program("make"), build_script());
    m.on_command(CommandMatch::program("serve"), MockRun::exit(0).stdout("never\n").delay(Duration::from_secs(60)));
    let audit = Arc::new(MemAudit::default());
    let w = Workspace::builder()
        .policy(policy)
        .audit(audit.clone())
        .backend(Arc::new(m.clone()))
        .build()
        .unwrap_or_else(|e| panic!("workspace: {}", portcullis::error_chain(&e)));
    rt().block_on(async {
        let id = match w.start_shell("make", writable()).await {
            Ok(Started::Job { id, .. }) => id,
            other => panic!("{other:?}"),
        };
        let mut out = String::new();
        let mut cursor = None;
        let mut status = JobStatus::Running;
        for _ in 0..50 {
            let o = w.shell_output(&id, cursor, Duration::from_millis(200)).await.unwrap_or_else(|e| panic!("{e}"));
            out.push_str(&o.stdout);
            cursor = Some(o.cursor);
            status = o.status;
            if status != JobStatus::Running {
                break;
            }
        }
        assert_eq!((status, out.as_str()), (JobStatus::Exited, "built\n"));
        // A delayed one is killed; one more than max_jobs is refused.
        let long = match w.start_shell("serve", ExecOptions::default()).await {
            Ok(Started::Job { id, .. }) => id,
            other => panic!("{other:?}"),
        };
        let more = w.start_shell("serve", ExecOptions::default()).await;
        assert!(matches!(more, Ok(Started::Refused(_))), "{more:?}");
        let k = w.shell_kill(&long).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(k.status, JobStatus::Killed);
    });
    // The writable job's scripted writes landed (control: the mock's tree).
    assert_eq!(m.contents("out/app").as_deref(), Some(&b"binary"[..]));
    let kinds = audit.kinds();
    assert!(kinds.contains(&"denied") && kinds.contains(&"allowed"), "{kinds:?}");
}
