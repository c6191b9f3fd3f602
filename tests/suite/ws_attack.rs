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
    let audit = Arc::new(MemAudit::default());
    let w = Workspace::builder()
        .policy(policy(ws, extra))
        .audit(audit.clone())
        .sandbox(sandbox())
        .build()
        .unwrap_or_else(|e| panic!("workspace: {}", portcullis::error_chain(&e)));
    (w, audit)
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
        assert!(matches!(&r, Err(WorkspaceError::Refused(_))), "{r:?}");
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
