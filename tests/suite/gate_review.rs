//! Review of the gate, the runner and direct file writes: attempts to get
//! more access than the gate's meet allowed, checked from outside. Each
//! attempt has a control (the same write lands when nothing plays games),
//! and pins the typed refusal.

use std::ffi::OsString;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use portcullis::audit::{Event, RefusalKind};
use portcullis::gate::{Action, BoxFuture, Decision, Gate, GateError};
use portcullis::runner::{Exec, ExecOptions, Fs, RunError, Runner};
use portcullis::sandbox::{GrantRefusal, RunOptions, SandboxError};

use super::util::{rt, sandbox, test_root, MemAudit as Mem, Ws};

/// A gate that answers `answer`, running `before` first (to play a race
/// the way a slow gate — a person reviewing — would let one happen).
struct Scripted {
    answer: Decision,
    before: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Gate for Scripted {
    fn check<'a>(&'a self, _action: &'a Action) -> BoxFuture<'a, Result<Decision, GateError>> {
        if let Some(f) = self.before.lock().ok().and_then(|mut b| b.take()) {
            f();
        }
        Box::pin(std::future::ready(Ok(self.answer.clone())))
    }
}

fn gate(answer: Decision, before: Option<Box<dyn FnOnce() + Send>>) -> Arc<dyn Gate> {
    Arc::new(Scripted { answer, before: Mutex::new(before) })
}

fn real(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn allow(writable: bool, grants: Option<Vec<PathBuf>>) -> Decision {
    Decision::Allow { writable, write_grants: grants, rule: Some("review".into()) }
}

fn dir() -> tempfile::TempDir {
    let d =
        tempfile::Builder::new().prefix("pc-gr-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("tempdir: {e}"));
    // The command runs as nobody (a root caller's too): let it reach here.
    let _ = std::fs::set_permissions(d.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777));
    d
}

fn mkdir(p: &Path) {
    std::fs::create_dir_all(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let _ = std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o777));
}

fn runner(ws: &Ws, g: Arc<dyn Gate>, audit: Arc<Mem>) -> Runner {
    Runner::builder()
        .workspace(ws.path())
        .sandbox(sandbox())
        .gate(g)
        .audit(audit)
        .build()
        .unwrap_or_else(|e| panic!("runner: {}", portcullis::error_chain(&e)))
}

fn write_into(r: &Runner, target: &Path, grant: &Path) -> Result<Exec, RunError> {
    let line = format!("echo pwned > '{}/x'", target.display());
    let words: Vec<OsString> = ["sh", "-c", &line].iter().map(OsString::from).collect();
    let opts = ExecOptions { write: vec![grant.to_path_buf()], ..Default::default() };
    rt().block_on(r.exec(&words, &opts, RunOptions::default()))
}

fn assert_changed_grant(res: Result<Exec, RunError>, what: &str) {
    match res {
        Err(RunError::Sandbox(SandboxError::GrantRefused { reason: GrantRefusal::Changed, .. })) => {}
        other => panic!("{what}: expected a refused (changed) grant, got {other:?}"),
    }
}

/// A gate that narrows an asked grant to a path inside it that is a
/// symbolic link: the meet accepts it (it lies within the grant, as
/// spelled), but the sandbox would resolve it and grant the link's target.
/// The plan is checked against the effective access: nothing runs, and
/// the target is untouched. Control: narrowed to a real directory, the
/// write lands there.
#[test]
fn r0220_a_gate_named_link_inside_a_grant_grants_nothing_beyond_it() {
    let ws = Ws::new();
    let outside = dir();
    let share = real(outside.path()).join("share");
    let victim = real(outside.path()).join("victim");
    mkdir(&share.join("real"));
    mkdir(&victim);
    std::os::unix::fs::symlink(&victim, share.join("out")).unwrap_or_else(|e| panic!("{e}"));

    // The attempt: narrowed to share/out (-> victim).
    let audit = Arc::new(Mem::default());
    let r = runner(&ws, gate(allow(false, Some(vec![share.join("out")])), None), audit.clone());
    // The command writes where the sandbox would mount the grant: the
    // link's target.
    assert_changed_grant(write_into(&r, &victim, &share), "narrowed to a link");
    assert!(!victim.join("x").exists(), "the link's target was written through a gate-narrowed grant");
    // The allowed record is followed by a failed outcome.
    let events = audit.0.lock().map(|v| v.clone()).unwrap_or_default();
    assert!(matches!(events.first(), Some(Event::Allowed { .. })), "{events:?}");
    assert!(
        matches!(events.last(), Some(Event::Outcome { status: portcullis::audit::Status::Failed, .. })),
        "{events:?}"
    );

    // Control: narrowed to a real directory inside the grant, it lands.
    let r = runner(&ws, gate(allow(false, Some(vec![share.join("real")])), None), Arc::new(Mem::default()));
    match write_into(&r, &share.join("real"), &share) {
        Ok(Exec::Ran(ran)) => assert!(ran.result.outcome.success(), "{:?}", ran.result),
        other => panic!("control: {other:?}"),
    }
    assert_eq!(std::fs::read_to_string(share.join("real/x")).unwrap_or_default(), "pwned\n");
}

/// A grant outside the workspace swapped for a link while the gate decides
/// (a person reviewing; a background job with write access beside it):
/// the gate approved the real directory, the sandbox would resolve the
/// link. Nothing runs; the link's target is untouched. Control: with no
/// swap, the same request writes the approved directory.
#[test]
fn r0221_a_grant_swapped_for_a_link_while_the_gate_decides_grants_nothing() {
    let ws = Ws::new();
    let outside = dir();
    let share = real(outside.path()).join("share");
    let victim = real(outside.path()).join("victim");
    mkdir(&share.join("out"));
    mkdir(&victim);

    let (s, v) = (share.clone(), victim.clone());
    let swap: Box<dyn FnOnce() + Send> = Box::new(move || {
        std::fs::rename(s.join("out"), s.join("out.old")).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(&v, s.join("out")).unwrap_or_else(|e| panic!("{e}"));
    });
    let r = runner(&ws, gate(allow(false, None), Some(swap)), Arc::new(Mem::default()));
    assert_changed_grant(write_into(&r, &victim, &share.join("out")), "swapped for a link");
    assert!(!victim.join("x").exists(), "the swapped-in link's target was written");
    assert!(!share.join("out.old/x").exists());

    // Control: the same request, no swap.
    std::fs::remove_file(share.join("out")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::rename(share.join("out.old"), share.join("out")).unwrap_or_else(|e| panic!("{e}"));
    let r = runner(&ws, gate(allow(false, None), None), Arc::new(Mem::default()));
    match write_into(&r, &share.join("out"), &share.join("out")) {
        Ok(Exec::Ran(ran)) => assert!(ran.result.outcome.success(), "{:?}", ran.result),
        other => panic!("control: {other:?}"),
    }
    assert_eq!(std::fs::read_to_string(share.join("out/x")).unwrap_or_default(), "pwned\n");
    assert!(!victim.join("x").exists());
}

/// The audit log kept under a policy `write` grant outside the workspace
/// (where no read-only command reaches it): a direct write to it — by its
/// own name or through a link in the workspace — is refused and the log
/// keeps its records. Control: a file beside it in the same grant is
/// written.
#[test]
fn r0222_a_direct_write_cannot_replace_the_audit_log() {
    let ws = Ws::new();
    let outside = dir();
    let share = real(outside.path()).join("share");
    mkdir(&share);
    let log = share.join("audit.jsonl");
    let cfg = dir();
    let pol = cfg.path().join("policy.toml");
    std::fs::write(
        &pol,
        format!("workspace = {:?}\nwrite = [{:?}]\naudit = {:?}\n[shell]\nallow = [\"true\"]\n", ws.path(), share, log),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let r = Runner::builder()
        .policy_file(&pol)
        .and_then(|b| b.sandbox(sandbox()).build())
        .unwrap_or_else(|e| panic!("{}", portcullis::error_chain(&e)));
    let rt = rt();
    // Control: beside the log, in the same grant.
    match rt.block_on(r.write_file(&share.join("notes.txt"), b"ok\n")) {
        Ok(Fs::Done(_)) => {}
        other => panic!("control: {other:?}"),
    }
    assert_eq!(std::fs::read_to_string(share.join("notes.txt")).unwrap_or_default(), "ok\n");
    let before = std::fs::read(&log).unwrap_or_else(|e| panic!("{e}"));
    assert!(!before.is_empty(), "the control write was recorded");
    std::os::unix::fs::symlink(&log, ws.join("log-link")).unwrap_or_else(|e| panic!("{e}"));
    for p in [log.clone(), PathBuf::from("log-link")] {
        match rt.block_on(r.write_file(&p, b"{}\n")) {
            Ok(Fs::Refused(f)) => {
                assert_eq!(f.kind, RefusalKind::RefusedByPolicy, "{}: {f}", p.display());
                assert!(f.message.contains("audit log"), "{f}");
            }
            other => panic!("{}: {other:?}", p.display()),
        }
    }
    match rt.block_on(r.remove(&log)) {
        Ok(Fs::Refused(_)) => {}
        other => panic!("remove the log: {other:?}"),
    }
    let after = std::fs::read(&log).unwrap_or_else(|e| panic!("{e}"));
    assert!(after.starts_with(&before), "the log was rewritten");
    assert!(log.is_file());
}

fn done(res: Result<Fs, RunError>, what: &str) -> PathBuf {
    match res {
        Ok(Fs::Done(d)) => d.path,
        other => panic!("{what}: {other:?}"),
    }
}

/// `remove` of a symbolic link removes the link, as `rm` does, and never
/// what it points to (before: the target was resolved and deleted, the
/// link left dangling); a protected link stays. Control: `remove` of the
/// file itself removes it.
#[test]
fn r0223_removing_a_link_removes_the_link_not_its_target() {
    let ws = Ws::new();
    let cfg = dir();
    let pol = cfg.path().join("policy.toml");
    std::fs::write(
        &pol,
        format!("workspace = {:?}\nprotect = [\"keep-link\"]\n[shell]\nallow = [\"true\"]\n", ws.path()),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let r = Runner::builder()
        .policy_file(&pol)
        .and_then(|b| b.sandbox(sandbox()).build())
        .unwrap_or_else(|e| panic!("{}", portcullis::error_chain(&e)));
    let rt = rt();
    std::os::unix::fs::symlink("README.md", ws.join("readme-link")).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink("src", ws.join("src-link")).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink("src/lib.rs", ws.join("keep-link")).unwrap_or_else(|e| panic!("{e}"));
    let wsr = real(ws.path());
    assert_eq!(done(rt.block_on(r.remove(Path::new("readme-link"))), "link to a file"), wsr.join("readme-link"));
    assert_eq!(done(rt.block_on(r.remove(Path::new("src-link"))), "link to a dir"), wsr.join("src-link"));
    assert!(std::fs::symlink_metadata(ws.join("readme-link")).is_err(), "the link is gone");
    assert!(std::fs::symlink_metadata(ws.join("src-link")).is_err());
    assert_eq!(ws.read("README.md"), "readme\n", "the link's target is intact");
    assert!(ws.join("src/main.rs").is_file());
    match rt.block_on(r.remove(Path::new("keep-link"))) {
        Ok(Fs::Refused(f)) => assert_eq!(f.kind, RefusalKind::RefusedByPolicy, "{f}"),
        other => panic!("protected link: {other:?}"),
    }
    assert!(std::fs::symlink_metadata(ws.join("keep-link")).is_ok_and(|m| m.file_type().is_symlink()));
    // Control: the file itself.
    done(rt.block_on(r.remove(Path::new("README.md"))), "the file");
    assert!(!ws.join("README.md").exists());
}

/// Direct writes at awkward targets: a FIFO is refused at once (no open
/// that blocks, nothing written through it), a hard link with a name
/// outside the workspace is replaced here only (the outside name keeps its
/// content), a name near NAME_MAX is written (its temporary name fits),
/// and no temporary file is left beside any of them. Control: a plain
/// write lands.
#[test]
fn r0224_direct_writes_at_fifos_hard_links_and_long_names() {
    let ws = Ws::new();
    let outside = dir();
    let secret = real(outside.path()).join("secret");
    std::fs::write(&secret, "secret\n").unwrap_or_else(|e| panic!("{e}"));
    std::fs::hard_link(&secret, ws.join("hl")).unwrap_or_else(|e| panic!("{e}"));
    nix::unistd::mkfifo(&ws.join("fifo"), nix::sys::stat::Mode::from_bits_truncate(0o666))
        .unwrap_or_else(|e| panic!("{e}"));
    let r = Runner::builder().workspace(ws.path()).sandbox(sandbox()).build().unwrap_or_else(|e| panic!("{e}"));
    let rt = rt();
    done(rt.block_on(r.write_file(Path::new("plain"), b"plain\n")), "control");
    assert_eq!(ws.read("plain"), "plain\n");
    let started = std::time::Instant::now();
    match rt.block_on(r.write_file(Path::new("fifo"), b"x")) {
        Err(RunError::Fs { op: "fs.write", .. }) => {}
        other => panic!("fifo: {other:?}"),
    }
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "the FIFO blocked");
    assert!(std::fs::symlink_metadata(ws.join("fifo")).is_ok_and(|m| m.file_type().is_fifo()));
    done(rt.block_on(r.write_file(Path::new("hl"), b"new\n")), "hard link");
    assert_eq!(ws.read("hl"), "new\n");
    assert_eq!(std::fs::read_to_string(&secret).unwrap_or_default(), "secret\n", "written through a hard link");
    let long = "n".repeat(250);
    done(rt.block_on(r.write_file(Path::new(&long), b"long\n")), "a 250-byte name");
    assert_eq!(ws.read(&long), "long\n");
    let left: Vec<_> = std::fs::read_dir(ws.path())
        .unwrap_or_else(|e| panic!("{e}"))
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().contains(".portcullis-"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

/// git's directory is refused for direct writes in any case (`.GIT` is
/// `.git` on a case-folding directory, which the jail's spelling would not
/// show). Control: `.github/` is written.
#[test]
fn r0225_git_dir_in_any_case_is_refused_for_direct_writes() {
    let ws = Ws::with_git();
    let r = Runner::builder().workspace(ws.path()).sandbox(sandbox()).build().unwrap_or_else(|e| panic!("{e}"));
    let rt = rt();
    done(rt.block_on(r.write_file(Path::new(".github/ci.yml"), b"on: push\n")), "control");
    assert_eq!(ws.read(".github/ci.yml"), "on: push\n");
    for p in [".GIT/hooks/pre-commit", ".Git/config", "sub/.gIt/x"] {
        match rt.block_on(r.write_file(Path::new(p), b"x")) {
            Ok(Fs::Refused(f)) => {
                assert_eq!(f.kind, RefusalKind::RefusedByPolicy, "{p}: {f}");
                assert!(f.message.contains(".git directory"), "{f}");
            }
            other => panic!("{p}: {other:?}"),
        }
        assert!(!ws.join(p).exists(), "{p}");
    }
}

fn rules_runner(ws: &Ws, cfg: &Path, rules: &str) -> Runner {
    let pol = cfg.join("policy.toml");
    let body = format!(
        "workspace = {:?}\nprotect = [\"secret\"]\n[shell]\ninterpreter = \"sh\"\nallow = [\"echo\", \"sh\"]\n{rules}",
        ws.path()
    );
    std::fs::write(&pol, body).unwrap_or_else(|e| panic!("{e}"));
    Runner::builder()
        .policy_file(&pol)
        .and_then(|b| b.sandbox(sandbox()).build())
        .unwrap_or_else(|e| panic!("{}", portcullis::error_chain(&e)))
}

/// A gate that narrows `--writable` to a path the workspace keeps
/// read-only inside it (`.git/hooks`, `.git/config`, a protected path)
/// would have made it writable: the meet compares paths only, and a grant
/// that *is* a carve-out has none beneath it. Such a grant is dropped and
/// reported; the hook is not written (EROFS). Control: narrowed to `.git`,
/// a file there is written and the hooks inside stay read-only.
#[test]
fn r0226_a_gate_cannot_narrow_writable_onto_a_protected_path() {
    let ws = Ws::with_git();
    ws.write("secret/key", "k\n");
    let cfg = dir();
    let line = "echo x > .git/hooks/pre-commit; echo x > .git/config; echo x > secret/key; echo x > .git/probe";
    let run = |r: &Runner| match rt().block_on(r.exec(
        &[OsString::from(line)],
        &ExecOptions { sh: true, writable: true, ..Default::default() },
        RunOptions::default(),
    )) {
        Ok(Exec::Ran(ran)) => ran,
        other => panic!("{other:?}"),
    };
    let r = rules_runner(
        &ws,
        cfg.path(),
        "[[gate]]\nname = \"carve\"\ncommand = \"echo\"\nanswer = \"grant\"\npaths = [\".git/hooks\", \".git/config\"]\n",
    );
    let ran = run(&r);
    let wsr = real(ws.path());
    let mut dropped = ran.dropped_grants.clone();
    dropped.sort();
    assert_eq!(dropped, vec![wsr.join(".git/config"), wsr.join(".git/hooks")]);
    assert!(ran.result.write_grants.is_empty(), "{:?}", ran.result.write_grants);
    assert!(!ws.join(".git/hooks/pre-commit").exists(), "a hook was written");
    assert_eq!(ws.read(".git/config"), "[core]\n\trepositoryformatversion = 0\n");
    assert_eq!(ws.read("secret/key"), "k\n");
    let err = String::from_utf8_lossy(&ran.result.stderr).into_owned();
    assert!(err.contains("Read-only file system"), "not refused with EROFS: {err}");
    // A protected path the same way (before: the sandbox refused to
    // protect a writable root; now the grant is dropped and it runs).
    let r = rules_runner(
        &ws,
        cfg.path(),
        "[[gate]]\nname = \"carve\"\ncommand = \"echo\"\nanswer = \"grant\"\npaths = [\"secret\"]\n",
    );
    let ran = run(&r);
    assert_eq!(ran.dropped_grants, vec![wsr.join("secret")]);
    assert_eq!(ws.read("secret/key"), "k\n");
    // Control: narrowed to .git itself.
    let r = rules_runner(
        &ws,
        cfg.path(),
        "[[gate]]\nname = \"git\"\ncommand = \"echo\"\nanswer = \"grant\"\npaths = [\".git\"]\n",
    );
    let ran = run(&r);
    assert!(ran.dropped_grants.is_empty(), "{:?}", ran.dropped_grants);
    assert_eq!(ws.read(".git/probe"), "x\n", "the control write to .git landed");
    assert!(!ws.join(".git/hooks/pre-commit").exists());
    assert_eq!(ws.read(".git/config"), "[core]\n\trepositoryformatversion = 0\n");
}

/// A repository inside a policy `write` grant outside the workspace keeps
/// its `.git` from direct writes as the workspace's does. Control: a file
/// beside the repository's `.git` is written.
#[test]
fn r0227_git_dir_in_a_grant_outside_the_workspace_is_refused_for_direct_writes() {
    let ws = Ws::new();
    let outside = dir();
    let share = real(outside.path()).join("share");
    mkdir(&share.join("repo/.git/hooks"));
    let cfg = dir();
    let pol = cfg.path().join("policy.toml");
    std::fs::write(&pol, format!("workspace = {:?}\nwrite = [{:?}]\n[shell]\nallow = [\"true\"]\n", ws.path(), share))
        .unwrap_or_else(|e| panic!("{e}"));
    let r = Runner::builder()
        .policy_file(&pol)
        .and_then(|b| b.sandbox(sandbox()).build())
        .unwrap_or_else(|e| panic!("{}", portcullis::error_chain(&e)));
    let rt = rt();
    done(rt.block_on(r.write_file(&share.join("repo/README"), b"hi\n")), "control");
    assert_eq!(std::fs::read_to_string(share.join("repo/README")).unwrap_or_default(), "hi\n");
    match rt.block_on(r.write_file(&share.join("repo/.git/hooks/post-checkout"), b"#!/bin/sh\n")) {
        Ok(Fs::Refused(f)) => assert_eq!(f.kind, RefusalKind::RefusedByPolicy, "{f}"),
        other => panic!("{other:?}"),
    }
    assert!(!share.join("repo/.git/hooks/post-checkout").exists());
}
