//! Two fail-closed fixes. (1) A hook link whose way cannot be resolved to
//! the end (a `..` after a missing directory, a loop) had no link on its
//! way judged and no target protected: a writable run could make it lead
//! to a script of its choosing, which host git ran after the run. Each
//! attack is real and checked from outside (host git, run on the workspace
//! after the sandboxed command, must not touch a marker file outside it),
//! with a control: the same script on the host, on a twin workspace, makes
//! host git run the planted hook. (2) `ExecRequest.degraded` had two
//! meanings for `Some(Mode::Full)`.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;
use std::process::Command;

use portcullis::sandbox::Mode;
use portcullis::SandboxError;

use super::gitutil::{host_git, writable, Marker};
use super::util::*;

/// Host git with an identity, isolated from the caller's configuration.
fn git(dir: &Path, args: &[&str]) {
    let mut all = vec!["-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"];
    all.extend_from_slice(args);
    let out = host_git(dir, &all);
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A workspace that is a git repository with one commit.
fn repo() -> Ws {
    let ws = Ws::new();
    git(ws.path(), &["init", "-q", "."]);
    git(ws.path(), &["add", "-A"]);
    git(ws.path(), &["commit", "-qm", "init"]);
    ws
}

/// What a user runs on the host after the run: an index write runs the
/// `post-index-change` hook.
fn host_git_after(ws: &Path) {
    let out = host_git(ws, &["update-index", "--force-write-index"]);
    assert!(out.status.success(), "host git: {}", String::from_utf8_lossy(&out.stderr));
}

/// The shell that writes an executable hook touching the marker at `file`.
fn plant(m: &Marker, file: &str) -> String {
    format!("printf '#!/bin/sh\\ntouch {}\\n' > {file} && chmod 755 {file}", m.path().display())
}

/// Control: `script` run on the host (no sandbox) in the twin `ws` makes
/// host git run the planted hook, so the attack is real.
fn works_on_host(ws: &Ws, script: &str, m: &Marker) {
    let out = Command::new("sh")
        .args(["-c", &format!("{script}; echo rc=$?")])
        .current_dir(ws.path())
        .output()
        .unwrap_or_else(|e| panic!("sh: {e}"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("rc=0"), "control: {}", String::from_utf8_lossy(&out.stderr));
    host_git_after(ws.path());
    assert!(m.take(), "control: host git did not run the planted hook, so the attack proves nothing: {script}");
}

/// Run `script` in a writable sandbox on `ws`, then host git: the hook must
/// not have run; the run's result is returned for the caller to pin.
fn attack(ws: &Ws, script: &str, m: &Marker) -> Result<portcullis::ExecResult, SandboxError> {
    attack_reading(ws, script, m, None)
}

/// [`attack`], with `read` a readable root.
fn attack_reading(
    ws: &Ws,
    script: &str,
    m: &Marker,
    read: Option<&Path>,
) -> Result<portcullis::ExecResult, SandboxError> {
    let mut req = writable(ws, &format!("{script}; echo rc=$?"));
    req.read.extend(read.map(Path::to_path_buf));
    let r = run(&req);
    host_git_after(ws.path());
    assert!(!m.take(), "host git ran the hook the sandboxed command redirected ({script}): {r:?}");
    r
}

/// The hook `post-index-change` links to `../../tools/missing/../post-index-change`,
/// and `tools` is a link in the workspace: the kernel stops at the missing
/// directory, so the walk could not finish and no link on the way was
/// judged. The command repoints `tools` at a directory of its own that has
/// `missing/` and a hook, and host git ran it after the run.
#[test]
fn r0190_a_hook_through_a_writable_link_and_an_unresolvable_dotdot_refuses() {
    let m = Marker::new();
    let build = || {
        let ws = repo();
        ws.write("real-tools/README", "tools\n");
        symlink("real-tools", ws.join("tools")).unwrap_or_else(|e| panic!("{e}"));
        symlink("../../tools/missing/../post-index-change", ws.join(".git/hooks/post-index-change"))
            .unwrap_or_else(|e| panic!("{e}"));
        ws
    };
    let script = format!("mkdir -p evil/missing && {} && ln -sfn evil tools", plant(&m, "evil/post-index-change"));
    works_on_host(&build(), &script, &m);
    let ws = build();
    match attack(&ws, &script, &m) {
        Err(SandboxError::HookThroughLink { hook, link }) => {
            assert_eq!(hook, ws.join(".git/hooks/post-index-change"));
            assert_eq!(link, ws.join("tools"));
        }
        other => panic!("expected a refusal naming the link, got {other:?}"),
    }
    assert!(!ws.join("evil").exists(), "a refused run ran nothing");
    // Control: a read-only run of the same workspace is not refused.
    assert_eq!(run_ok(&ws.req(&["true"])).outcome.code(), Some(0));
}

/// No link on the way at all: the hook links to `../../missing/../planted`,
/// which the kernel cannot resolve until `missing/` exists. Its target was
/// neither kept read-only nor guarded, so the command made `missing/` and
/// `planted`, and host git ran `planted` after the run. Refused now, naming
/// where resolving stops; a hook whose walk stops outside every writable
/// area (the command can create nothing there) is not refused.
#[test]
fn r0191_a_hook_whose_dotdot_follows_a_missing_dir_in_a_writable_area_refuses() {
    let m = Marker::new();
    let build = || {
        let ws = repo();
        symlink("../../missing/../planted", ws.join(".git/hooks/post-index-change")).unwrap_or_else(|e| panic!("{e}"));
        ws
    };
    let script = format!("mkdir missing && {}", plant(&m, "planted"));
    works_on_host(&build(), &script, &m);
    let ws = build();
    let real = std::fs::canonicalize(ws.path()).unwrap_or_else(|e| panic!("{e}"));
    match attack(&ws, &script, &m) {
        Err(SandboxError::HookUnresolved { hook, stuck, reason }) => {
            assert_eq!(hook, real.join(".git/hooks/post-index-change"));
            assert_eq!(stuck, real, "{reason}");
            assert!(reason.contains("does not exist"), "{reason}");
        }
        other => panic!("expected a refusal naming where resolving stops, got {other:?}"),
    }
    assert!(!ws.join("planted").exists() && !ws.join("missing").exists(), "a refused run ran nothing");

    // Control: the walk stops in a directory outside every writable area
    // (readable in the sandbox), where the command can create nothing: the
    // run goes ahead, its `mkdir` there fails with EROFS, and host git runs
    // nothing.
    let outside = tempfile::Builder::new().prefix("pc-out-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("{e}"));
    std::fs::set_permissions(outside.path(), std::fs::Permissions::from_mode(0o755)).unwrap_or_else(|e| panic!("{e}"));
    let ws = repo();
    let target = outside.path().join("missing/../planted");
    symlink(&target, ws.join(".git/hooks/post-index-change")).unwrap_or_else(|e| panic!("{e}"));
    let script = format!("mkdir {0}/missing; {1}", outside.path().display(), plant(&m, &target.display().to_string()));
    let r = attack_reading(&ws, &script, &m, Some(outside.path()))
        .unwrap_or_else(|e| panic!("{}", portcullis::error_chain(&e)));
    assert!(stderr(&r).contains("Read-only file system"), "{}", stderr(&r));
    assert!(!outside.path().join("missing").exists());
}

/// A hook that leads into a loop of links in the workspace: the walk gives
/// up after 40 links, and the links it met were not judged here. Not
/// exploitable before the fix: the hook's target was taken to be the first
/// link of the loop, and its read-only carve-out refused the run later in
/// planning (a protected path reached through a replaceable link). The hook
/// check now refuses it itself, naming a link of the loop, so that it does
/// not rest on that later check. The attack (replace a link of the loop
/// with a hook) is real: the control shows host git running it.
#[test]
fn r0192_a_hook_into_a_loop_of_writable_links_refuses() {
    let m = Marker::new();
    let build = || {
        let ws = repo();
        symlink("loop-b", ws.join("loop-a")).unwrap_or_else(|e| panic!("{e}"));
        symlink("loop-a", ws.join("loop-b")).unwrap_or_else(|e| panic!("{e}"));
        symlink("../../loop-a", ws.join(".git/hooks/post-index-change")).unwrap_or_else(|e| panic!("{e}"));
        ws
    };
    let script = format!("rm loop-b && {}", plant(&m, "loop-b"));
    works_on_host(&build(), &script, &m);
    let ws = build();
    match attack(&ws, &script, &m) {
        Err(SandboxError::HookThroughLink { hook, link }) => {
            assert_eq!(hook, ws.join(".git/hooks/post-index-change"));
            assert!(link == ws.join("loop-a") || link == ws.join("loop-b"), "{}", link.display());
        }
        other => panic!("expected a refusal naming a link of the loop, got {other:?}"),
    }
    assert!(std::fs::symlink_metadata(ws.join("loop-b")).is_ok_and(|m| m.file_type().is_symlink()));
    assert_eq!(run_ok(&ws.req(&["true"])).outcome.code(), Some(0), "control: read-only runs are fine");
}

/// `degraded: Some(Mode::Full)` through the library meant degraded to the
/// `--pids` check and the kill-mechanism choice and full to the planner.
/// It is refused now, as `--degraded full` and `degraded = "full"` are,
/// before anything runs; `None` is the full sandbox.
#[test]
fn r0193_degraded_full_is_refused_before_anything_runs() {
    let ws = Ws::new();
    let mut req = writable(&ws, "touch ran");
    req.degraded = Some(Mode::Full);
    match sandbox().plan(&req) {
        Err(SandboxError::NotADegradedMode { mode: Mode::Full }) => {}
        other => panic!("expected the typed refusal from planning, got {other:?}"),
    }
    req.limits.pids = Some(64);
    match run(&req) {
        Err(e @ SandboxError::NotADegradedMode { mode: Mode::Full }) => {
            let msg = e.to_string();
            assert!(msg.contains("leave `degraded` unset") && msg.contains("landlock-only"), "{msg}");
            assert_eq!(e.exit_code(), 125);
        }
        other => panic!("expected the typed refusal, got {other:?}"),
    }
    assert!(!ws.join("ran").exists(), "a refused request ran nothing");
    // Control: the same request with `degraded` unset runs in full.
    req.degraded = None;
    let r = run_ok(&req);
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    assert_eq!(r.enforcement.mode, portcullis::sandbox::Mode::Full);
    assert!(ws.join("ran").exists());
}
