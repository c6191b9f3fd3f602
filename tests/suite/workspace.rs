//! The `Workspace` (issue 10): one object through which every read, write
//! and command passes the jail, the checker, the gate and the audit. Each
//! test checks from outside: the files on disk, the audit's records.

use std::sync::Arc;
use std::time::Duration;

use portcullis::audit::Event;
use portcullis::policy::WorkspacePolicy;
use portcullis::runner::{Exec, ExecOptions};
use portcullis::sandbox::Outcome;
use portcullis::workspace::files::{Edit, ReadOptions};
use portcullis::workspace::{Workspace, WorkspaceError};
use tokio_util::sync::CancellationToken;

use super::util::{rt, MemAudit, Ws};

fn policy(ws: &Ws, extra: &str) -> WorkspacePolicy {
    let text = format!(
        "workspace = {:?}\ndeny_paths = [\".env*\"]\n{extra}\n[shell]\ninterpreter = \"sh\"\nallow = [\"ls\", \"touch\", \"cat\", \"echo\", \"sleep\", \"true\", \"pwd\"]\ntimeout = \"30s\"\n",
        ws.path()
    );
    WorkspacePolicy::from_toml(&text).unwrap_or_else(|e| panic!("policy: {e}"))
}

fn build(ws: &Ws, extra: &str) -> (Workspace, Arc<MemAudit>) {
    super::util::workspace_with(policy(ws, extra))
}

fn ran(e: Exec) -> Box<portcullis::runner::Ran> {
    match e {
        Exec::Ran(r) => r,
        other => panic!("expected a run, got {other:?}"),
    }
}

fn writable() -> ExecOptions {
    ExecOptions { writable: true, ..ExecOptions::default() }
}

#[test]
fn r0500_files_go_through_the_gate_and_the_audit() {
    let ws = Ws::new();
    let (w, audit) = build(&ws, "");
    rt().block_on(async {
        let written = w.write_file("notes/a.txt", "one\ntwo\n").await.unwrap_or_else(|e| panic!("write: {e}"));
        assert!(written.created);
        let page = w.read_file("notes/a.txt", ReadOptions::default()).await.unwrap_or_else(|e| panic!("read: {e}"));
        assert_eq!(page.total_lines, 2);
        assert_eq!(page.hash, written.hash);
        let edit = Edit { old: "two".into(), new: "2".into(), replace_all: false };
        w.edit_file("notes/a.txt", edit, Some(page.hash.clone())).await.unwrap_or_else(|e| panic!("edit: {e}"));
        // The second edit pinned to the same (now stale) hash is refused.
        let edit = Edit { old: "one".into(), new: "1".into(), replace_all: false };
        let stale = w.edit_file("notes/a.txt", edit, Some(page.hash)).await;
        assert!(matches!(&stale, Err(e) if e.kind() == "stale-hash"), "{stale:?}");
        w.mkdir("out/deep").await.unwrap_or_else(|e| panic!("mkdir: {e}"));
        assert!(w.exists("out/deep").await.unwrap_or(false));
        w.remove("out/deep").await.unwrap_or_else(|e| panic!("remove: {e}"));
    });
    assert_eq!(ws.read("notes/a.txt"), "one\n2\n");
    assert!(!ws.join("out/deep").exists());
    // write, edit, (stale edit), mkdir, remove: allowed + outcome each.
    let kinds = audit.kinds();
    assert_eq!(kinds.iter().filter(|k| **k == "allowed").count(), 5, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| **k == "outcome").count(), 5, "{kinds:?}");
    let failed =
        audit.0.lock().map(|v| v.iter().filter(|e| matches!(e, Event::Outcome { error: Some(_), .. })).count());
    assert_eq!(failed.unwrap_or(0), 1, "the stale edit's outcome names its failure");
}

#[test]
fn r0501_denied_and_escaping_paths_are_refused_and_audited() {
    let ws = Ws::new();
    ws.write(".env", "SECRET=1\n");
    let (w, audit) = build(&ws, "");
    rt().block_on(async {
        let r = w.read_file(".env", ReadOptions::default()).await;
        assert!(matches!(&r, Err(e) if e.kind() == "path-escape"), "{r:?}");
        let r = w.write_file("../outside.txt", "x").await;
        assert!(matches!(&r, Err(e) if e.kind() == "path-escape"), "{r:?}");
        let r = w.write_file(".git/config", "x").await;
        assert!(matches!(&r, Err(e) if e.kind() == "refused-by-policy"), "{r:?}");
        // Control: a plain path is written.
        w.write_file("ok.txt", "x").await.unwrap_or_else(|e| panic!("control: {e}"));
    });
    assert!(!ws.path().join("../outside.txt").exists());
    assert!(!ws.join(".git/config").exists());
    assert_eq!(audit.kinds().iter().filter(|k| **k == "denied").count(), 2);
}

#[test]
fn r0502_readonly_view_refuses_writes_and_runs_commands_without_write_access() {
    let ws = Ws::new();
    let (w, audit) = build(&ws, "");
    let ro = w.readonly();
    rt().block_on(async {
        let r = ro.write_file("x.txt", "x").await;
        assert!(matches!(&r, Err(e) if e.kind() == "refused-by-policy"), "{r:?}");
        let r = ro.remove("README.md").await;
        assert!(matches!(&r, Err(WorkspaceError::Refused(_))), "{r:?}");
        // `ls` runs.
        let listed = ran(ro.exec("ls", writable()).await.unwrap_or_else(|e| panic!("ls: {e}")));
        assert_eq!(listed.result.outcome, Outcome::Exited { code: 0 });
        assert!(String::from_utf8_lossy(&listed.result.stdout).contains("README.md"));
        // `touch` cannot write, although write access was asked for.
        let touched = ran(ro.exec("touch made.txt", writable()).await.unwrap_or_else(|e| panic!("touch: {e}")));
        assert_ne!(touched.result.outcome, Outcome::Exited { code: 0 });
        assert!(!touched.result.writable);
        assert!(String::from_utf8_lossy(&touched.result.stderr).contains("Read-only file system"));
        // Control: the full view's `touch` with write access writes.
        let full = ran(w.exec("touch made.txt", writable()).await.unwrap_or_else(|e| panic!("control: {e}")));
        assert_eq!(full.result.outcome, Outcome::Exited { code: 0 });
    });
    assert!(ws.join("made.txt").exists());
    assert!(!ws.join("x.txt").exists());
    assert!(audit.kinds().contains(&"denied"));
}

#[test]
fn r0503_a_scope_cannot_reach_its_parent() {
    let ws = Ws::new();
    ws.write("pkg/a/inner.txt", "inner\n");
    ws.write("secret.txt", "parent\n");
    let (w, _audit) = build(&ws, "");
    let s = w.scope("pkg/a").unwrap_or_else(|e| panic!("scope: {e}"));
    rt().block_on(async {
        let page = s.read_file("inner.txt", ReadOptions::default()).await.unwrap_or_else(|e| panic!("read: {e}"));
        assert!(page.content.contains("inner"));
        let r = s.read_file("../../secret.txt", ReadOptions::default()).await;
        assert!(matches!(&r, Err(e) if e.kind() == "path-escape"), "{r:?}");
        let r = s.write_file("../../secret.txt", "x").await;
        assert!(matches!(&r, Err(e) if e.kind() == "path-escape"), "{r:?}");
        // A command of the scope does not see the parent at all.
        let out = ran(s.exec("cat ../../secret.txt", writable()).await.unwrap_or_else(|e| panic!("cat: {e}")));
        assert_ne!(out.result.outcome, Outcome::Exited { code: 0 });
        let pwd = ran(s.exec("pwd", ExecOptions::default()).await.unwrap_or_else(|e| panic!("pwd: {e}")));
        let real = std::fs::canonicalize(ws.join("pkg/a")).unwrap_or_default();
        assert_eq!(String::from_utf8_lossy(&pwd.result.stdout).trim(), real.display().to_string());
        // Writable in the scope: writes land inside it.
        let t = ran(s.exec("touch made.txt", writable()).await.unwrap_or_else(|e| panic!("touch: {e}")));
        assert_eq!(t.result.outcome, Outcome::Exited { code: 0 });
        // Control: the parent workspace reads the parent's file.
        let ok = w.read_file("secret.txt", ReadOptions::default()).await;
        assert!(ok.is_ok());
    });
    assert!(ws.join("pkg/a/made.txt").exists());
    assert_eq!(ws.read("secret.txt"), "parent\n");
}

#[test]
fn r0504_a_cancelled_token_starts_nothing() {
    let ws = Ws::new();
    let (w, audit) = build(&ws, "");
    let token = CancellationToken::new();
    token.cancel();
    let opts = ExecOptions { cancel: Some(token), writable: true, ..ExecOptions::default() };
    let e = rt().block_on(w.exec("touch never.txt", opts)).unwrap_or_else(|e| panic!("exec: {e}"));
    assert!(matches!(e, Exec::Cancelled(_)), "{e:?}");
    assert_eq!(e.exit_status(), 130);
    assert!(!ws.join("never.txt").exists());
    let outcome = audit.0.lock().ok().and_then(|v| v.last().cloned());
    assert!(
        matches!(outcome, Some(Event::Outcome { status: portcullis::audit::Status::Cancelled, .. })),
        "{outcome:?}"
    );
    // A cancel mid-run kills it: cancelled, never timed out too.
    let token = CancellationToken::new();
    let t2 = token.clone();
    let e = rt().block_on(async move {
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            t2.cancel();
        });
        w.exec("sleep 20", ExecOptions { cancel: Some(token), ..ExecOptions::default() }).await
    });
    let r = ran(e.unwrap_or_else(|e| panic!("exec: {e}")));
    assert_eq!(r.result.outcome, Outcome::Cancelled);
    assert_eq!((r.cancelled, r.timed_out, r.exit_code), (true, false, 130));
    assert!(r.result.duration < Duration::from_secs(15));
}

#[test]
fn r0505_a_callers_timeout_only_lowers_the_policys() {
    let ws = Ws::new();
    let (w, _audit) = build(&ws, "");
    // The policy says 30 s; the caller's 500 ms wins.
    let opts = ExecOptions { timeout: Some(Duration::from_millis(500)), ..ExecOptions::default() };
    let e = rt().block_on(w.exec("sleep 20", opts)).unwrap_or_else(|e| panic!("exec: {e}"));
    let json = e.to_json();
    assert_eq!(
        (json["exit_code"].as_u64(), json["timed_out"].as_bool(), json["cancelled"].as_bool()),
        (Some(124), Some(true), Some(false)),
        "{json}"
    );
    let r = ran(e);
    assert_eq!(r.result.outcome, Outcome::TimedOut);
    // A caller's 10 h is lowered to the policy's 30 s: seen in the plan the
    // runner prepares.
    let opts = ExecOptions { timeout: Some(Duration::from_secs(36_000)), ..ExecOptions::default() };
    let lowered = w.command_options(opts).timeout;
    assert_eq!(lowered, Some(Duration::from_secs(30)));
}

#[test]
fn r0506_dispose_refuses_new_work() {
    let ws = Ws::new();
    let (w, _audit) = build(&ws, "");
    let s = w.scope("src").unwrap_or_else(|e| panic!("scope: {e}"));
    rt().block_on(async {
        w.dispose().await;
        let r = w.read_file("README.md", ReadOptions::default()).await;
        assert!(matches!(r, Err(WorkspaceError::Disposed)), "{r:?}");
        let r = s.exec("true", ExecOptions::default()).await;
        assert!(matches!(r, Err(WorkspaceError::Disposed)), "a projection is disposed too: {r:?}");
    });
}

#[test]
fn r0507_todos_are_shared_by_projections() {
    use portcullis::workspace::todos::{Todo, TodoStatus};
    let ws = Ws::new();
    let (w, _audit) = build(&ws, "");
    let ro = w.readonly();
    let items = vec![Todo { id: None, content: "fix".into(), status: TodoStatus::InProgress }];
    ro.write_todos(items).unwrap_or_else(|e| panic!("todos: {e}"));
    let (items, counts) = w.scope("src").unwrap_or_else(|e| panic!("scope: {e}")).read_todos();
    assert_eq!(items.len(), 1);
    assert_eq!(counts.in_progress, 1);
}

#[test]
fn r0508_nothing_ambient_no_host_variable_and_no_host_stdin() {
    let ws = Ws::new();
    // The test process's own environment has variables a command must not
    // see unless the policy or the caller names them.
    let host_var = std::env::vars().map(|(k, _)| k).find(|k| k.starts_with("CARGO")).unwrap_or_else(|| "HOME".into());
    let (w, _audit) = build(&ws, "");
    let line = format!("echo \"[${host_var}]\"; cat; echo end");
    let r = ran(rt().block_on(w.exec(&line, ExecOptions::default())).unwrap_or_else(|e| panic!("exec: {e}")));
    let out = String::from_utf8_lossy(&r.result.stdout).to_string();
    assert_eq!(out, "[]\nend\n", "a host variable leaked in, or stdin was not /dev/null");
    // Control: named by the caller, it is passed.
    let opts = ExecOptions { inherit_env: vec![host_var.clone().into()], ..ExecOptions::default() };
    let r = ran(rt().block_on(w.exec(&format!("echo \"[${host_var}]\""), opts)).unwrap_or_else(|e| panic!("{e}")));
    assert_ne!(String::from_utf8_lossy(&r.result.stdout).trim(), "[]");
}

#[test]
fn r0509_exists_answers_false_for_a_missing_path_and_scope_wants_a_directory() {
    let ws = Ws::new();
    let (w, _audit) = build(&ws, "");
    rt().block_on(async {
        assert!(!w.exists("no/such/file").await.unwrap_or_else(|e| panic!("exists: {e}")));
        assert!(w.exists("README.md").await.unwrap_or(false));
    });
    let r = w.scope("README.md");
    assert!(matches!(&r, Err(e) if e.kind() == "bad-path"), "{r:?}");
    let r = w.scope("../");
    assert!(matches!(&r, Err(e) if e.kind() == "path-escape"), "{r:?}");
}

fn build_with_jobs(ws: &Ws) -> (Workspace, Arc<MemAudit>) {
    let text = format!(
        "workspace = {:?}\n[shell]\ninterpreter = \"sh\"\nallow = [\"sh\", \"touch\", \"echo\", \"sleep\", \"cat\"]\ntimeout = \"30s\"\n[shell.background]\nmax_jobs = 3\ntimeout = \"60s\"\n",
        ws.path()
    );
    super::util::workspace_with(WorkspacePolicy::from_toml(&text).unwrap_or_else(|e| panic!("policy: {e}")))
}

fn job(s: portcullis::workspace::jobs::Started) -> String {
    match s {
        portcullis::workspace::jobs::Started::Job { id, .. } => id,
        other => panic!("expected a job, got {other:?}"),
    }
}

#[test]
fn r0510_background_jobs_through_the_workspace_and_projections() {
    use portcullis::workspace::jobs::JobStatus;
    let ws = Ws::new();
    let (w, _audit) = build_with_jobs(&ws);
    let ro = w.readonly();
    rt().block_on(async {
        // The full view's job, writable.
        let id =
            job(w.start_shell("echo up; touch bg.txt; sleep 30", writable()).await.unwrap_or_else(|e| panic!("{e}")));
        let out = w.shell_output(&id, None, Duration::from_secs(5)).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out.stdout, "up\n");
        for _ in 0..50 {
            if ws.join("bg.txt").exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(out.status, JobStatus::Running);
        // A read-only view may read it, but not kill it.
        let seen = ro.shell_output(&id, None, Duration::ZERO).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(seen.stdout, "up\n");
        let r = ro.shell_kill(&id).await;
        assert!(matches!(&r, Err(e) if e.kind() == "refused-by-policy"), "{r:?}");
        // A read-only view's own job runs without write access, and it may
        // kill that one.
        let mine = job(ro
            .start_shell("touch ro.txt; echo rc=$?; sleep 30", writable())
            .await
            .unwrap_or_else(|e| panic!("{e}")));
        // Read on from each cursor (a read from `None` returns at once
        // whenever anything is kept).
        let (mut out, mut cursor) = (String::new(), None);
        for _ in 0..50 {
            let o = ro.shell_output(&mine, cursor, Duration::from_millis(200)).await.unwrap_or_else(|e| panic!("{e}"));
            out.push_str(&o.stdout);
            cursor = Some(o.cursor);
            if out.contains("rc=") {
                break;
            }
        }
        assert!(out.contains("rc=1"), "{out:?}");
        assert_eq!(ro.shell_kill(&mine).await.map(|k| k.status).ok(), Some(JobStatus::Killed));
        // Unknown id.
        let r = w.shell_output("j999-00000000", None, Duration::ZERO).await;
        assert!(matches!(&r, Err(e) if e.kind() == "job-not-found"), "{r:?}");
        // Dispose kills the rest and refuses new jobs.
        w.dispose().await;
        let end = w.shell_output(&id, None, Duration::ZERO).await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(end.status, JobStatus::Killed);
        let r = w.start_shell("true", ExecOptions::default()).await;
        assert!(matches!(&r, Err(e) if e.kind() == "disposed"), "{r:?}");
    });
    assert!(ws.join("bg.txt").exists(), "the writable job wrote");
    assert!(!ws.join("ro.txt").exists(), "the read-only view's job wrote");
}

#[test]
fn r0511_dropping_the_workspace_kills_its_jobs() {
    let ws = Ws::new();
    let marker = format!("pc-drop-{}", std::process::id());
    {
        let (w, _audit) = build_with_jobs(&ws);
        let rt = rt();
        rt.block_on(async {
            let line = format!("sh -c 'sleep 300' {marker}");
            let _id = job(w.start_shell(&line, ExecOptions::default()).await.unwrap_or_else(|e| panic!("{e}")));
            // Control: it is running.
            let mut seen = false;
            for _ in 0..50 {
                if !super::util::host_procs_containing(&marker).is_empty() {
                    seen = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            assert!(seen, "the job never showed up in the host's process list");
            drop(w);
            // Let the cancelled job's task tear the sandbox down.
            for _ in 0..100 {
                if super::util::host_procs_containing(&marker).is_empty() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
    }
    assert_eq!(super::util::host_procs_containing(&marker), Vec::<String>::new(), "a job outlived its workspace");
}

#[test]
fn r0512_a_writable_background_job_does_not_stall_writable_commands() {
    use portcullis::workspace::jobs::JobStatus;
    let ws = Ws::with_git();
    let (w, _audit) = build_with_jobs(&ws);
    rt().block_on(async {
        // A writable "dev server": it plants a hook (the git guard's
        // business) and waits for a file the foreground commands make.
        let line = "sh -c 'echo \"[core]\" > .git/config.worktree; echo planted=$?; \
                    while [ ! -e done.txt ]; do sleep 0.1; done; echo saw-done'";
        let opts = ExecOptions { writable: true, ..ExecOptions::default() };
        let id = job(w.start_shell(line, opts).await.unwrap_or_else(|e| panic!("{e}")));
        // Writable commands start and finish while it runs.
        for i in 0..3 {
            let t = ran(w.exec(&format!("touch fg{i}.txt"), writable()).await.unwrap_or_else(|e| panic!("{e}")));
            assert_eq!(t.result.outcome, Outcome::Exited { code: 0 }, "foreground {i}");
        }
        let status = w.shell_output(&id, None, Duration::ZERO).await.map(|o| o.status).ok();
        assert_eq!(status, Some(JobStatus::Running), "the job ended before the foreground commands finished");
        let t = ran(w.exec("touch done.txt", writable()).await.unwrap_or_else(|e| panic!("{e}")));
        assert_eq!(t.result.outcome, Outcome::Exited { code: 0 });
        // The job sees it and ends; the last writable run out cleans up.
        let mut cursor = None;
        let mut out = String::new();
        for _ in 0..100 {
            let o = w.shell_output(&id, cursor, Duration::from_millis(200)).await.unwrap_or_else(|e| panic!("{e}"));
            out.push_str(&o.stdout);
            cursor = Some(o.cursor);
            if o.status != JobStatus::Running {
                assert_eq!(o.status, JobStatus::Exited, "{o:?}");
                break;
            }
        }
        assert!(out.contains("saw-done"), "{out:?}");
        // Control: the job could plant it (the file was missing, so no
        // mount kept it read-only; the guard's cleanup is what removes it).
        assert!(out.contains("planted=0"), "{out:?}");
    });
    for i in 0..3 {
        assert!(ws.join(&format!("fg{i}.txt")).exists());
    }
    // The promise: no writable run is going, so nothing the job planted
    // where host git reads hooks is left.
    assert!(!ws.join(".git/config.worktree").exists(), "a planted git redirection survived every writable run");
}
