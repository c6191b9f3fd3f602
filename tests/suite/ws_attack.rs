//! Adversarial review of the `Workspace` (issue 10): its projections
//! (`readonly()`, `scope()`), the gate and the audit of what passes through
//! them, and the git guard's promise for writable runs side by side. Each
//! test attempts the escape for real, checks from outside (the files on
//! disk, the audit's records) and has a control.

use std::sync::Arc;

use portcullis::policy::WorkspacePolicy;
use portcullis::runner::{Exec, ExecOptions};
use portcullis::sandbox::Outcome;
use portcullis::workspace::{Workspace, WorkspaceError};

use super::util::{rt, sandbox, MemAudit, Ws};

fn policy(ws: &Ws, extra: &str) -> WorkspacePolicy {
    let text = format!(
        "workspace = {:?}\n{extra}\n[shell]\ninterpreter = \"sh\"\nallow = [\"sh\", \"ls\", \"touch\", \"cat\", \"echo\", \"mkdir\", \"sleep\", \"true\", \"chmod\"]\ntimeout = \"30s\"\n[shell.background]\nmax_jobs = 2\ntimeout = \"60s\"\n",
        ws.path()
    );
    WorkspacePolicy::from_toml(&text).unwrap_or_else(|e| panic!("policy: {e}"))
}

fn build(ws: &Ws, extra: &str) -> (Workspace, Arc<MemAudit>) {
    super::util::workspace_with(policy(ws, extra))
}

fn writable() -> ExecOptions {
    ExecOptions { writable: true, ..ExecOptions::default() }
}

fn code(e: &Exec) -> Option<i32> {
    match e {
        Exec::Ran(r) => match r.result.outcome {
            Outcome::Exited { code } => Some(code),
            _ => None,
        },
        _ => None,
    }
}

/// A scope into the repository's git dir would be a workspace of which
/// `hooks/` and `config` are ordinary files: the protected-path rule and the
/// sandbox's git carve-outs are anchored at a workspace's own `.git`, so
/// neither would see them. Refused, typed (`bad-path`), for `.git` itself,
/// a directory below it, and a git dir elsewhere in the tree (a bare
/// repository); the file tools and commands of such a scope never exist.
#[test]
fn r0550_a_scope_cannot_be_a_git_dir_of_the_parent() {
    let ws = Ws::with_git();
    ws.write("bare.git/HEAD", "ref: refs/heads/main\n");
    ws.write("bare.git/objects/.keep", "");
    ws.write("bare.git/refs/.keep", "");
    let (w, audit) = build(&ws, "");
    for dir in [".git", ".git/hooks", ".GIT", "bare.git", "bare.git/refs"] {
        let r = w.scope(dir);
        assert!(matches!(&r, Err(e) if e.kind() == "bad-path"), "scope({dir}) was allowed: {r:?}");
    }
    // Nothing was planted through a scope.
    assert!(!ws.join(".git/hooks/pre-commit").exists());
    assert!(!ws.join("bare.git/hooks").exists());
    // Control: a scope of an ordinary directory writes its own `hooks/`
    // (a directory like any other there), by file tool and by command.
    let s = w.scope("src").unwrap_or_else(|e| panic!("scope: {e}"));
    rt().block_on(async {
        s.write_file("hooks/pre-commit", "#!/bin/sh\n").await.unwrap_or_else(|e| panic!("write: {e}"));
        let t = s.exec("mkdir -p hooks && touch hooks/post-commit", writable()).await;
        assert_eq!(t.as_ref().ok().and_then(code), Some(0), "{t:?}");
    });
    assert!(ws.join("src/hooks/pre-commit").exists());
    assert!(ws.join("src/hooks/post-commit").exists());
    let _ = audit;
}

/// The same attack without the refusal of `scope()`: through the file
/// tools of the parent and of a legitimate scope, the parent's git dir stays
/// out of reach (refused by the protected-path rule, audited `denied`).
#[test]
fn r0551_the_parents_git_dir_is_out_of_reach_of_a_scope() {
    let ws = Ws::with_git();
    let (w, audit) = build(&ws, "");
    let s = w.scope("src").unwrap_or_else(|e| panic!("scope: {e}"));
    rt().block_on(async {
        for p in ["../.git/hooks/pre-commit", "/dev/null/../x"] {
            let r = s.write_file(p, "#!/bin/sh\nid\n").await;
            assert!(r.is_err(), "{p}: {r:?}");
        }
        let abs = ws.join(".git/hooks/pre-commit");
        let r = s.write_file(&abs, "#!/bin/sh\n").await;
        assert!(matches!(&r, Err(e) if e.kind() == "path-escape"), "{r:?}");
        // A link planted inside the scope that points at the parent's hooks.
        let t = s.exec("true", writable()).await;
        assert_eq!(t.as_ref().ok().and_then(code), Some(0), "{t:?}");
    });
    std::os::unix::fs::symlink(ws.join(".git/hooks"), ws.join("src/h")).unwrap_or_else(|e| panic!("{e}"));
    rt().block_on(async {
        let r = s.write_file("h/pre-commit", "#!/bin/sh\n").await;
        assert!(r.is_err(), "{r:?}");
        let t = s.exec("touch h/pre-commit", writable()).await;
        assert_ne!(t.as_ref().ok().and_then(code), Some(0), "{t:?}");
    });
    assert!(!ws.join(".git/hooks/pre-commit").exists());
    assert!(audit.kinds().contains(&"denied"));
}

fn git(dir: &std::path::Path, args: &[&str]) {
    let mut all = vec!["-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"];
    all.extend_from_slice(&["-c", "protocol.file.allow=always"]);
    all.extend_from_slice(args);
    let out = super::gitutil::host_git(dir, &all);
    assert!(out.status.success(), "git {args:?} in {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
}

/// A repository with a submodule `emb` whose `.git` is an embedded
/// directory without `hooks/` (a git dir the parent's plan knows, through
/// the index's gitlink).
fn repo_with_embedded_submodule() -> Ws {
    let ws = Ws::new();
    git(ws.path(), &["init", "-q", "."]);
    let emb = ws.join("emb");
    std::fs::create_dir_all(&emb).unwrap_or_else(|e| panic!("{e}"));
    git(&emb, &["init", "-q", "."]);
    std::fs::write(emb.join("f"), "e").unwrap_or_else(|e| panic!("{e}"));
    git(&emb, &["add", "f"]);
    git(&emb, &["commit", "-qm", "e"]);
    git(ws.path(), &["submodule", "add", "-q", "./emb", "emb"]);
    git(ws.path(), &["add", "-A"]);
    git(ws.path(), &["commit", "-qm", "init"]);
    let _ = std::fs::remove_dir_all(emb.join(".git/hooks"));
    assert!(emb.join(".git").is_dir() && !emb.join(".git/hooks").exists());
    ws
}

async fn wait_for(path: &std::path::Path) {
    for _ in 0..600 {
        if path.exists() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{} never appeared", path.display());
}

async fn ended(w: &Workspace, id: &str) -> portcullis::workspace::jobs::JobOutput {
    use portcullis::workspace::jobs::JobStatus;
    for _ in 0..600 {
        let o = w
            .shell_output(id, None, std::time::Duration::from_millis(100))
            .await
            .unwrap_or_else(|e| panic!("output: {e}"));
        if o.status != JobStatus::Running {
            return o;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("job {id} never ended");
}

fn job(s: portcullis::workspace::jobs::Started) -> String {
    match s {
        portcullis::workspace::jobs::Started::Job { id, .. } => id,
        other => panic!("not started: {other:?}"),
    }
}

/// The git guard's promise across a workspace and its scope: when no
/// writable run of the workspace is running, none of the git redirections
/// any of them listed exists. Run A (the whole workspace) creates the
/// submodule's missing `hooks/` (its plan lists it for the guard); run B
/// (a scope of the submodule, planned while A runs) takes that `hooks/`
/// for the user's. When A ended alone among the runs of its own lock, its
/// cleanup removed `hooks/` under B, whose read-only bind of it went with
/// it; B then planted a hook its own guard did not list. The runs of a
/// scope now share the lock and the records of the workspace it was made
/// from: A's cleanup waits for B, and covers what B planted.
#[test]
fn r0552_a_scopes_writable_run_and_the_parents_share_the_git_guard() {
    let ws = repo_with_embedded_submodule();
    ws.write("a.sh", "mkdir emb/.git/hooks && touch a-ready && while [ ! -e a-go ]; do sleep 0.05; done\n");
    ws.write(
        "emb/b.sh",
        "touch b-ready; while [ ! -e b-go ]; do sleep 0.05; done\n\
         mkdir -p .git/hooks; printf '#!/bin/sh\\nexit 0\\n' > .git/hooks/pre-commit; echo rc=$?\n",
    );
    let (w, _audit) = build(&ws, "");
    let s = w.scope("emb").unwrap_or_else(|e| panic!("scope: {e}"));
    let (a, b) = rt().block_on(async {
        let a = job(w.start_shell("sh a.sh", writable()).await.unwrap_or_else(|e| panic!("start a: {e}")));
        wait_for(&ws.join("a-ready")).await;
        let b = job(s.start_shell("sh b.sh", writable()).await.unwrap_or_else(|e| panic!("start b: {e}")));
        wait_for(&ws.join("emb/b-ready")).await;
        std::fs::write(ws.join("a-go"), "").unwrap_or_else(|e| panic!("{e}"));
        let a = ended(&w, &a).await;
        std::fs::write(ws.join("emb/b-go"), "").unwrap_or_else(|e| panic!("{e}"));
        let b = ended(&w, &b).await;
        (a, b)
    });
    assert_eq!(a.exit_code, Some(0), "{a:?}");
    assert_eq!(b.exit_code, Some(0), "{b:?}");
    // Both have ended: nothing either listed is left.
    assert!(
        !ws.join("emb/.git/hooks/pre-commit").exists(),
        "a hook was left for the user's git: A {:?} / B {:?}",
        a.warnings,
        b.stdout
    );
    assert!(!ws.join("emb/.git/hooks").exists(), "A {:?} B {:?} {}", a.warnings, b.warnings, b.stdout);
    // Pinned: B's write met the read-only bind (EROFS), which A's cleanup
    // no longer removes under it; the cleanup was B's, for both.
    assert!(b.stderr.contains("Read-only file system"), "{b:?}");
    assert!(!b.stdout.contains("rc=0"), "{b:?}");
    assert!(b.warnings.iter().any(|w| w.contains("emb/.git/hooks")), "{:?}", b.warnings);
    // Control: B alone plants the hook (nothing is bound there), and its
    // own guard removes it when it ends.
    std::fs::write(ws.join("emb/b-go"), "").unwrap_or_else(|e| panic!("{e}"));
    let alone = rt().block_on(async {
        let id = job(s.start_shell("sh b.sh", writable()).await.unwrap_or_else(|e| panic!("start: {e}")));
        ended(&w, &id).await
    });
    assert!(alone.stdout.contains("rc=0"), "{alone:?}");
    assert!(!ws.join("emb/.git/hooks").exists(), "{alone:?}");
}

/// A scope of a directory that holds a submodule (its `.git` an embedded
/// directory, known only from the parent's index): the scope's plan found
/// git dirs from the scope's own `.git` alone, so the submodule's hooks
/// were ordinary files to a writable command of the scope, though read-only
/// to the same command of the parent. A scope's plan now finds the git dirs
/// of the workspace it was made from too.
#[test]
fn r0553_a_submodule_inside_a_scope_keeps_its_protection() {
    let ws = Ws::new();
    git(ws.path(), &["init", "-q", "."]);
    let emb = ws.join("pkg/emb");
    std::fs::create_dir_all(&emb).unwrap_or_else(|e| panic!("{e}"));
    git(&emb, &["init", "-q", "."]);
    std::fs::write(emb.join("f"), "e").unwrap_or_else(|e| panic!("{e}"));
    git(&emb, &["add", "f"]);
    git(&emb, &["commit", "-qm", "e"]);
    git(ws.path(), &["submodule", "add", "-q", "./pkg/emb", "pkg/emb"]);
    git(ws.path(), &["add", "-A"]);
    git(ws.path(), &["commit", "-qm", "init"]);
    assert!(emb.join(".git/hooks").is_dir());
    let (w, _audit) = build(&ws, "");
    let s = w.scope("pkg").unwrap_or_else(|e| panic!("scope: {e}"));
    let out = |e: Result<Exec, WorkspaceError>| match e {
        Ok(Exec::Ran(r)) => (
            String::from_utf8_lossy(&r.result.stdout).to_string(),
            String::from_utf8_lossy(&r.result.stderr).to_string(),
        ),
        other => panic!("did not run: {other:?}"),
    };
    let plant = "echo hook > emb/.git/hooks/pre-commit; echo rc=$?; echo cfg >> emb/.git/config; echo rc=$?";
    let (parent, scoped, control) = rt().block_on(async {
        let parent = out(w.exec(&plant.replace("emb/", "pkg/emb/"), writable()).await);
        let scoped = out(s.exec(plant, writable()).await);
        // Control: the rest of the submodule (its git dir's other files,
        // its working tree) stays writable to the scope.
        let control =
            out(s.exec("echo x > emb/.git/objects-ok; echo rc=$?; echo y > emb/f; echo rc=$?", writable()).await);
        (parent, scoped, control)
    });
    assert!(!parent.0.contains("rc=0"), "{parent:?}");
    assert!(!scoped.0.contains("rc=0"), "the scope planted in the submodule's git dir: {scoped:?}");
    assert!(scoped.1.contains("Read-only file system"), "{scoped:?}");
    assert!(!emb.join(".git/hooks/pre-commit").exists());
    assert!(!std::fs::read_to_string(emb.join(".git/config")).unwrap_or_default().contains("cfg"));
    assert_eq!(control.0, "rc=0\nrc=0\n", "{control:?}");
    assert_eq!(std::fs::read_to_string(emb.join("f")).unwrap_or_default(), "y\n");
}

/// The file tools' protected-path rule knew git dirs by the name `.git`
/// only; the sandbox follows a `.git` file to the git dir it names. In a
/// repository made with `git init --separate-git-dir=meta/repo.git` (or
/// any `gitdir:` pointer into the tree) a file tool wrote `hooks/` there,
/// which the user's next `git commit` runs. A file tool now refuses any
/// path inside a directory git takes for a git dir (a `HEAD` and `objects`
/// or `commondir`), like one inside `.git`.
#[test]
fn r0554_file_tools_refuse_a_git_dir_not_named_dot_git() {
    let ws = Ws::new();
    std::fs::create_dir_all(ws.join("meta")).unwrap_or_else(|e| panic!("{e}"));
    git(ws.path(), &["init", "-q", "--separate-git-dir=meta/repo.git", "."]);
    assert!(ws.join(".git").is_file() && ws.join("meta/repo.git/HEAD").is_file());
    let (w, audit) = build(&ws, "");
    rt().block_on(async {
        for p in ["meta/repo.git/hooks/pre-commit", "meta/repo.git/config", "meta/repo.git/commondir"] {
            let r = w.write_file(p, "#!/bin/sh\nexit 0\n").await;
            assert!(matches!(&r, Err(e) if e.kind() == "refused-by-policy"), "{p}: {r:?}");
        }
        let r = w.mkdir("meta/repo.git/hooks/x").await;
        assert!(matches!(&r, Err(e) if e.kind() == "refused-by-policy"), "{r:?}");
        // The sandbox agrees: a writable command gets EROFS there.
        let r = w.exec("echo h > meta/repo.git/hooks/pre-commit; echo rc=$?", writable()).await;
        match r {
            Ok(Exec::Ran(r)) => assert!(!String::from_utf8_lossy(&r.result.stdout).contains("rc=0")),
            other => panic!("{other:?}"),
        }
        // Control: beside the git dir, and a `HEAD` file in a project
        // directory, are ordinary files.
        w.write_file("meta/notes.txt", "n").await.unwrap_or_else(|e| panic!("write: {e}"));
        w.write_file("docs/HEAD", "x").await.unwrap_or_else(|e| panic!("write: {e}"));
        w.write_file("docs/page.md", "x").await.unwrap_or_else(|e| panic!("write: {e}"));
    });
    assert!(!ws.join("meta/repo.git/hooks/pre-commit").exists());
    assert!(ws.join("meta/notes.txt").exists() && ws.join("docs/page.md").exists());
    let denied =
        audit.0.lock().map(|v| v.iter().filter(|e| matches!(e, portcullis::audit::Event::Denied { .. })).count());
    assert_eq!(denied.unwrap_or(0), 4, "each refusal is audited");
}

/// What a security team reads: every attempt through a read-only view, a
/// scope and the jobs leaves exactly its records, `denied` for a refusal
/// (nothing done), `allowed` then `outcome` for what ran; a read-only
/// view's command asked writable runs without write access (the kernel
/// refuses the write) and its record says it was asked read-only.
#[test]
fn r0555_readonly_and_jobs_refusals_are_audited_once_each() {
    use portcullis::audit::{Event, Status};
    use portcullis::workspace::jobs::Started;
    let ws = Ws::new();
    let (w, audit) = build(&ws, "");
    let ro = w.readonly();
    let ro_scope = ro.scope("src").unwrap_or_else(|e| panic!("scope: {e}"));
    let n = || audit.0.lock().map(|v| v.len()).unwrap_or(0);
    let last = |k: usize| audit.0.lock().map(|v| v[v.len().saturating_sub(k)..].to_vec()).unwrap_or_default();
    rt().block_on(async {
        // A read-only view and its scope: each mutation one `denied`.
        for (view, p) in [(&ro, "README.md"), (&ro_scope, "main.rs")] {
            let before = n();
            let r = view.write_file(p, "x").await;
            assert!(matches!(&r, Err(e) if e.kind() == "refused-by-policy"), "{r:?}");
            let r = view.remove(p).await;
            assert!(matches!(&r, Err(e) if e.kind() == "refused-by-policy"), "{r:?}");
            assert_eq!(n() - before, 2);
            assert!(last(2).iter().all(|e| matches!(e, Event::Denied { .. })), "{:?}", last(2));
        }
        // Its command, asked writable with a grant: runs read-only.
        let before = n();
        let opts = ExecOptions { writable: true, write: vec!["src".into()], ..ExecOptions::default() };
        let r = ro.exec("touch src/ro.txt", opts.clone()).await.unwrap_or_else(|e| panic!("exec: {e}"));
        match &r {
            Exec::Ran(r) => {
                assert_ne!(r.result.outcome, Outcome::Exited { code: 0 });
                let err = String::from_utf8_lossy(&r.result.stderr);
                assert!(err.contains("Read-only file system"), "{err}");
            }
            other => panic!("did not run: {other:?}"),
        }
        assert_eq!(n() - before, 2);
        match &last(2)[0] {
            Event::Allowed { effective, .. } => {
                assert!(!effective.writable && effective.write_grants.is_empty(), "{effective:?}")
            }
            other => panic!("{other:?}"),
        }
        // Its background job too.
        let id = job(ro.start_shell("touch src/ro-job.txt", opts).await.unwrap_or_else(|e| panic!("start: {e}")));
        let out = ended(&w, &id).await;
        assert_ne!(out.exit_code, Some(0), "{out:?}");
        assert!(out.stderr.contains("Read-only file system"), "{out:?}");
        // A job beyond max_jobs (2): refused, one `denied`.
        let a = job(w.start_shell("sleep 30", ExecOptions::default()).await.unwrap_or_else(|e| panic!("{e}")));
        let b = job(w.start_shell("sleep 30", ExecOptions::default()).await.unwrap_or_else(|e| panic!("{e}")));
        let before = n();
        let r = w.start_shell("touch third.txt", writable()).await.unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(r, Started::Refused(_)), "{r:?}");
        assert_eq!(n() - before, 1);
        assert!(matches!(last(1)[0], Event::Denied { .. }));
        // The read-only view may not kill the parent's jobs.
        let r = ro.shell_kill(&a).await;
        assert!(matches!(&r, Err(WorkspaceError::NotYourJob { .. })), "{r:?}");
        w.shell_kill(&a).await.unwrap_or_else(|e| panic!("kill: {e}"));
        w.shell_kill(&b).await.unwrap_or_else(|e| panic!("kill: {e}"));
        // Cancelled before it starts: allowed, then a `cancelled` outcome.
        let token = tokio_util::sync::CancellationToken::new();
        token.cancel();
        let before = n();
        let r = w.start_shell("touch never.txt", ExecOptions { cancel: Some(token), ..writable() }).await;
        let id = job(r.unwrap_or_else(|e| panic!("{e}")));
        let _ = ended(&w, &id).await;
        let recs = last(n() - before);
        assert_eq!(recs.len(), 2, "{recs:?}");
        assert!(matches!(recs[1], Event::Outcome { status: Status::Cancelled, .. }), "{recs:?}");
    });
    assert!(!ws.join("src/ro.txt").exists() && !ws.join("src/ro-job.txt").exists());
    assert!(!ws.join("third.txt").exists() && !ws.join("never.txt").exists());
    assert_eq!(ws.read("README.md"), "readme\n");
    // Control: the full view writes the same file, audited allowed+outcome.
    rt().block_on(w.write_file("README.md", "x")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ws.read("README.md"), "x");
}

/// A scope keeps the parent policy's deny globs and protected paths,
/// though they are spelled relative to the parent's root: for its file
/// tools and for its commands (masked, read-only).
#[test]
fn r0556_a_scope_keeps_the_parents_deny_globs_and_protected_paths() {
    let ws = Ws::new();
    ws.write("src/secret/token", "s3cret\n");
    ws.write("src/id.key", "k3y\n");
    ws.write("src/gen/out.rs", "gen\n");
    ws.write("src/ok.txt", "fine\n");
    let (w, audit) = build(&ws, "deny_paths = [\"src/secret/**\", \"*.key\"]\nprotect = [\"src/gen\"]");
    let s = w.scope("src").unwrap_or_else(|e| panic!("scope: {e}"));
    let ro = portcullis::workspace::files::ReadOptions::default();
    let out = |e: Result<Exec, WorkspaceError>| match e {
        Ok(Exec::Ran(r)) => (
            String::from_utf8_lossy(&r.result.stdout).to_string(),
            String::from_utf8_lossy(&r.result.stderr).to_string(),
        ),
        other => panic!("did not run: {other:?}"),
    };
    rt().block_on(async {
        for p in ["secret/token", "id.key"] {
            let r = s.read_file(p, ro).await;
            assert!(matches!(&r, Err(e) if e.kind() == "path-escape"), "{p}: {r:?}");
            let r = s.write_file(p, "x").await;
            assert!(r.is_err(), "{p}: {r:?}");
        }
        let r = s.write_file("gen/out.rs", "x").await;
        assert!(matches!(&r, Err(e) if e.kind() == "refused-by-policy"), "{r:?}");
        let (o, _) = out(s.exec("cat secret/token id.key; echo rc=$?", ExecOptions::default()).await);
        assert!(!o.contains("s3cret") && !o.contains("k3y"), "{o}");
        let (o, e) = out(s.exec("echo x > gen/out.rs; echo rc=$?", writable()).await);
        assert!(!o.contains("rc=0") && e.contains("Read-only file system"), "{o} {e}");
        // Control: what no rule names is read and written through the scope.
        let page = s.read_file("ok.txt", ro).await.unwrap_or_else(|e| panic!("read: {e}"));
        assert!(page.content.contains("fine"));
        let (o, _) = out(s.exec("cat ok.txt; echo y > ok.txt; echo rc=$?", writable()).await);
        assert_eq!(o, "fine\nrc=0\n");
    });
    assert_eq!(ws.read("src/gen/out.rs"), "gen\n");
    assert_eq!(ws.read("src/secret/token"), "s3cret\n");
    assert_eq!(ws.read("src/ok.txt"), "y\n");
    assert!(audit.kinds().contains(&"denied"));
}

/// A scope is a directory, judged once; its path may later be swapped for a
/// link to somewhere else (a writable command of the parent can do it:
/// `mv src s; ln -s /home/user src`). The scope's file tools work from the
/// directory descriptor taken when it was made, and its commands' requests
/// must stay inside the workspace it was made from (`scope_of`): a swapped
/// path is refused, never followed to its new target.
#[test]
fn r0557_a_scope_swapped_for_a_link_is_not_followed() {
    let ws = Ws::new();
    let outside = tempfile::Builder::new()
        .prefix("pc-outside-")
        .tempdir_in(super::util::test_root())
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(outside.path().join("victim.txt"), "victim\n").unwrap_or_else(|e| panic!("{e}"));
    let (w, _audit) = build(&ws, "");
    let s = w.scope("src").unwrap_or_else(|e| panic!("scope: {e}"));
    // Control: before the swap the scope writes in src.
    rt().block_on(async {
        s.write_file("before.txt", "b").await.unwrap_or_else(|e| panic!("write: {e}"));
        let r = s.exec("touch before-cmd.txt", writable()).await;
        assert_eq!(r.as_ref().ok().and_then(code), Some(0), "{r:?}");
    });
    assert!(ws.join("src/before.txt").exists() && ws.join("src/before-cmd.txt").exists());
    std::fs::rename(ws.join("src"), ws.join("src.old")).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(outside.path(), ws.join("src")).unwrap_or_else(|e| panic!("{e}"));
    rt().block_on(async {
        // The file tools: still in the directory the scope was made of.
        s.write_file("planted.txt", "p").await.unwrap_or_else(|e| panic!("write: {e}"));
        s.write_file("victim.txt", "overwritten\n").await.unwrap_or_else(|e| panic!("write: {e}"));
        // A command: refused, typed, nothing started.
        for opts in [writable(), ExecOptions::default()] {
            let r = s.exec("touch planted-cmd.txt; echo x > victim.txt", opts).await;
            assert!(
                matches!(&r, Err(WorkspaceError::Run(portcullis::runner::RunError::Sandbox(e))) if e.to_string().contains("does not hold the workspace")),
                "{r:?}"
            );
        }
    });
    assert!(ws.join("src.old/planted.txt").exists());
    assert_eq!(ws.read("src.old/victim.txt"), "overwritten\n");
    let listing: Vec<_> = std::fs::read_dir(outside.path())
        .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert_eq!(listing.len(), 1, "something was written outside: {listing:?}");
    assert_eq!(std::fs::read_to_string(outside.path().join("victim.txt")).unwrap_or_default(), "victim\n");
}

/// Git's bare-repository fallback through the file tools: in a workspace
/// without `.git`, `config` (with a `core.fsmonitor` command), `objects/`,
/// `refs/` and then `HEAD` written at the root make a host `git status`
/// there take the workspace for a repository and run the command. The
/// sandbox's git guard removes a root `HEAD` a command creates; the file
/// tools now refuse to write one.
#[test]
fn r0558_file_tools_cannot_make_the_workspace_a_bare_repository() {
    let ws = Ws::new();
    let marker = ws.path().with_extension("fsmonitor-ran");
    let _ = std::fs::remove_file(&marker);
    let (w, audit) = build(&ws, "");
    let config = format!(
        "[core]\n\trepositoryformatversion = 0\n\tbare = true\n\tfsmonitor = \"touch {}; false\"\n",
        marker.display()
    );
    rt().block_on(async {
        w.write_file("config", config.clone()).await.unwrap_or_else(|e| panic!("config: {e}"));
        w.write_file("objects/.keep", "").await.unwrap_or_else(|e| panic!("objects: {e}"));
        w.write_file("refs/heads/.keep", "").await.unwrap_or_else(|e| panic!("refs: {e}"));
        for head in ["HEAD", "./HEAD"] {
            let r = w.write_file(head, "ref: refs/heads/main\n").await;
            assert!(matches!(&r, Err(e) if e.kind() == "refused-by-policy"), "{head}: {r:?}");
        }
        // Control: a HEAD below the root is an ordinary file.
        w.write_file("docs/HEAD", "x").await.unwrap_or_else(|e| panic!("docs/HEAD: {e}"));
    });
    assert!(!ws.join("HEAD").exists());
    let git_dir = super::gitutil::host_git(ws.path(), &["rev-parse", "--git-dir"]);
    assert!(!git_dir.status.success(), "git took the workspace for a repository");
    assert!(!marker.exists());
    assert!(audit.kinds().contains(&"denied"));
    // Control: the HEAD was the missing piece; written by hand, git takes the
    // workspace for a repository.
    std::fs::write(ws.join("HEAD"), "ref: refs/heads/main\n").unwrap_or_else(|e| panic!("{e}"));
    let git_dir = super::gitutil::host_git(ws.path(), &["rev-parse", "--git-dir"]);
    assert!(git_dir.status.success(), "{}", String::from_utf8_lossy(&git_dir.stderr));
    let _ = std::fs::remove_file(&marker);
}

/// A git-guard record names its run's cgroup, which a later cleanup kills
/// (its host process was killed mid-run). The records live in the caller's
/// private lock directory; one written there by anything but a run (a
/// script of the same uid, a root caller's own tools) that names another
/// cgroup would have had the cleanup write `cgroup.kill` there. A record
/// whose cgroup is not a run's (`portcullis-<pid>-<n>`) is not acted on:
/// kept, and the cleanup fails closed naming it; the victim lives.
#[test]
fn r0559_a_record_naming_another_cgroup_kills_nothing() {
    use portcullis::sandbox::{records_dir_for_tests, SandboxError};
    // A victim cgroup beside the runs' needs host root (the unprivileged
    // caller's delegated cgroup is its runs' parent only).
    if !super::util::in_root_pass("r0559", "a victim cgroup beside the runs' needs host root") {
        return;
    }
    let s = sandbox();
    let host = s.cgroup_host();
    if !super::util::available("r0559", host.is_ok(), "no writable cgroup: nothing to kill") {
        return;
    }
    let Ok(host) = host else { return };
    let ws = Ws::new();
    let victim = host.parent.join(format!("victim-{}", std::process::id()));
    let made = std::fs::create_dir(&victim);
    if !super::util::available("r0559", made.is_ok(), "cannot make a cgroup beside the runs'") {
        return;
    }
    let mut sleeper = std::process::Command::new("sleep").arg("60").spawn().unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(victim.join("cgroup.procs"), sleeper.id().to_string()).unwrap_or_else(|e| panic!("{e}"));
    let real = std::fs::canonicalize(ws.path()).unwrap_or_else(|e| panic!("{e}"));
    let dir = records_dir_for_tests(ws.path()).unwrap_or_else(|e| panic!("{e}"));
    let record = |cg: &std::path::Path| {
        serde_json::json!({
            "version": 1, "pid": 1, "workspace": real.display().to_string(),
            "cgroup": cg.display().to_string(), "roots": [real.display().to_string()],
            "git_guard": [], "git_indexes": [], "git_trees": [real.display().to_string()],
            "fail_git_guard": false
        })
        .to_string()
    };
    let bad = dir.join("run-1-1-1.json");
    std::fs::write(&bad, record(&victim)).unwrap_or_else(|e| panic!("{e}"));
    let r = super::util::run(&ws.req(&["true"]).tap_writable());
    let alive = sleeper.try_wait().ok().flatten().is_none();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let _ = std::fs::remove_dir(&victim);
    assert!(alive, "the cleanup killed a cgroup no run made");
    match r {
        Err(SandboxError::AfterRun { step, path, .. }) => {
            assert_eq!((step, path.as_path()), ("reading a git-guard record", bad.as_path()));
        }
        other => panic!("expected the cleanup to fail closed, got {other:?}"),
    }
    assert!(bad.exists());
    // Control: the same record naming a run's cgroup (gone: empty) is
    // cleaned and removed.
    std::fs::write(&bad, record(&host.parent.join("portcullis-1-1"))).unwrap_or_else(|e| panic!("{e}"));
    let r = super::util::run(&ws.req(&["true"]).tap_writable());
    assert!(r.is_ok(), "{r:?}");
    assert!(!bad.exists());
}

trait Writable {
    fn tap_writable(self) -> Self;
}

impl Writable for portcullis::sandbox::ExecRequest {
    fn tap_writable(mut self) -> Self {
        self.writable = true;
        self
    }
}

/// The parent's hook is a link into the tree (`.git/hooks/pre-commit ->
/// ../../tools/pre-commit`, as hook managers set up): the sandbox keeps the
/// link's target read-only in a writable workspace, but a scope of
/// `tools` knew nothing of the parent's hooks, and its writable command
/// rewrote what the user's next `git commit` runs. The scope's plan knows
/// the parent's git dirs now, and with them where its hooks lead.
#[test]
fn r0560_a_scope_cannot_rewrite_what_a_parent_hook_links_to() {
    let ws = Ws::new();
    git(ws.path(), &["init", "-q", "."]);
    ws.write("tools/pre-commit", "#!/bin/sh\nexit 0\n");
    ws.write("tools/other.sh", "#!/bin/sh\n");
    std::os::unix::fs::symlink("../../tools/pre-commit", ws.join(".git/hooks/pre-commit"))
        .unwrap_or_else(|e| panic!("{e}"));
    let (w, _audit) = build(&ws, "");
    let s = w.scope("tools").unwrap_or_else(|e| panic!("scope: {e}"));
    let out = |e: Result<Exec, WorkspaceError>| match e {
        Ok(Exec::Ran(r)) => (
            String::from_utf8_lossy(&r.result.stdout).to_string(),
            String::from_utf8_lossy(&r.result.stderr).to_string(),
        ),
        other => panic!("did not run: {other:?}"),
    };
    let (hook, control) = rt().block_on(async {
        let hook = out(s.exec("echo evil >> pre-commit; echo rc=$?", writable()).await);
        let control = out(s.exec("echo ok >> other.sh; echo rc=$?", writable()).await);
        (hook, control)
    });
    assert!(!hook.0.contains("rc=0") && hook.1.contains("Read-only file system"), "{hook:?}");
    assert_eq!(ws.read("tools/pre-commit"), "#!/bin/sh\nexit 0\n");
    // Control: the scope's other files are writable.
    assert_eq!(control.0, "rc=0\n", "{control:?}");
    assert!(ws.read("tools/other.sh").ends_with("ok\n"));
}
