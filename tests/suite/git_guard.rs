//! The git guard never fails open: after a writable run, nothing the command
//! planted where git reads config or hooks is reachable by the host's git,
//! or the run fails with a typed error (CLI: exit 125).

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use portcullis::sandbox::Cleanup;
use portcullis::SandboxError;

use super::gitutil::{host_git as git_at, writable, README_FLAGS};
use super::util::*;

/// Host git in the workspace.
fn host_git(ws: &Ws, args: &[&str]) -> Output {
    git_at(ws.path(), args)
}

/// `git status` with the README's flags.
fn safe_status(ws: &Ws) -> Output {
    let mut args = README_FLAGS.to_vec();
    args.push("status");
    let out = host_git(ws, &args);
    assert!(out.status.success(), "git status: {}", String::from_utf8_lossy(&out.stderr));
    out
}

/// A workspace that is a real git repository (made by git on the host),
/// its files in the index, with `extra` appended to `.git/config`.
fn git_repo(extra: &str) -> Ws {
    let ws = Ws::new();
    for args in [&["init", "-q"][..], &["add", "-A"]] {
        let out = host_git(&ws, args);
        assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    let config = ws.read(".git/config");
    ws.write(".git/config", &format!("{config}{extra}"));
    ws
}

/// Marker files outside the workspace: what planted config or hooks touch.
struct Markers {
    dir: tempfile::TempDir,
}

impl Markers {
    fn new() -> Markers {
        let dir =
            tempfile::Builder::new().prefix("pc-marker-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("{e}"));
        Markers { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn hit(&self, name: &str) -> bool {
        self.path(name).exists()
    }
}

fn exists(p: &Path) -> bool {
    fs::symlink_metadata(p).is_ok()
}

/// The shell that plants a filter config at `file` (defining filter
/// `name`, which touches `marker`), marks `target` with it and changes
/// `target`'s mtime so that `git status` hashes it through the filter.
fn plant_filter(file: &str, name: &str, marker: &Path, target: &str) -> String {
    format!(
        "mkdir -p \"$(dirname {file})\" && printf '[filter \"{name}\"]\\n\\tclean = \"touch {m}; cat\"\\n' > {file} && \
         echo '{target} filter={name}' >> .gitattributes && touch -d 2000-01-01 {target}",
        m = marker.display()
    )
}

/// The finding: `.git/config` includes `../tools/git/shared.gitconfig` and
/// `tools/` is missing; the command plants `.cache/git/shared.gitconfig` and
/// `tools -> .cache`. The guard used to refuse to walk through the link,
/// warn, and leave it: a host `git status` with the README's four flags then
/// ran the planted clean filter. Now the link on the way is removed. The
/// same holds for an include spelled with `..` after a directory the
/// command makes a link (`../vendor/x/../../evil.gitconfig`, which git opens
/// through `vendor`, not where its spelling points).
#[test]
fn r0060_an_include_planted_through_a_link_is_unreachable_after_the_run() {
    let ws = git_repo("[include]\n\tpath = ../tools/git/shared.gitconfig\n\tpath = ../vendor/x/../../evil.gitconfig\n");
    let m = Markers::new();
    let script = format!(
        "{} && {} && ln -s .cache tools && mkdir -p .cache/a/b/x && ln -s .cache/a/b vendor && echo planted",
        plant_filter(".cache/git/shared.gitconfig", "evil", &m.path("include"), "src/main.rs"),
        plant_filter(".cache/a/evil.gitconfig", "evil2", &m.path("dotdot"), "src/lib.rs"),
    );
    let r = run_ok(&writable(&ws, &script));
    assert_eq!((r.outcome.code(), stdout(&r).as_str()), (Some(0), "planted\n"), "{}", stderr(&r));
    for link in ["tools", "vendor"] {
        assert!(!exists(&ws.join(link)), "{link} is still there; warnings: {:?}", r.warnings);
        assert!(
            r.warnings.iter().any(|w| w.to_string().starts_with("removed the symbolic link")
                && w.to_string().contains(&format!("/{link} created"))),
            "{:?}",
            r.warnings
        );
    }
    // Only the links went: what they led to stays, unreachable for git.
    assert!(ws.join(".cache/git/shared.gitconfig").is_file() && ws.join(".cache/a/evil.gitconfig").is_file());
    safe_status(&ws);
    assert!(!m.hit("include") && !m.hit("dotdot"), "the host's git ran a planted filter");
    // Control: with the links the command made, the same git runs both
    // planted filters (the attack is real, and each include was reachable).
    symlink(".cache", ws.join("tools")).unwrap_or_else(|e| panic!("{e}"));
    symlink(".cache/a/b", ws.join("vendor")).unwrap_or_else(|e| panic!("{e}"));
    // (The status above refreshed the index: change the mtimes again.)
    let touched =
        Command::new("touch").args(["-d", "2001-01-01", "src/main.rs", "src/lib.rs"]).current_dir(ws.path()).status();
    assert!(touched.is_ok_and(|s| s.success()));
    safe_status(&ws);
    assert!(m.hit("include") && m.hit("dotdot"), "control: the planted filters did not run");
}

/// The same for `core.hooksPath = .husky/_` with `.husky` missing: the
/// command makes `.husky -> .cache` with `.cache/_/pre-commit`; the link is
/// removed, and a host `git commit` (without the README's flags: a user's
/// ordinary commit) runs no planted hook. Then the final entry as a link
/// (`.husky/_ -> ../.cache/_`) inside a directory the command made
/// unsearchable (`chmod 000 .husky`): it is removed, and the mode restored.
/// And a guarded directory 30,000 levels deep is removed without recursion
/// (std's recursive delete aborted the whole process on a stack overflow).
#[test]
fn r0061_a_hooks_path_planted_through_a_link_is_unreachable_after_the_run() {
    let ws = git_repo("[core]\n\thooksPath = .husky/_\n");
    let m = Markers::new();
    let hook = format!(
        "mkdir -p .cache/_ && printf '#!/bin/sh\\ntouch {}\\n' > .cache/_/pre-commit && chmod 755 .cache/_/pre-commit",
        m.path("hook").display()
    );
    let r = run_ok(&writable(&ws, &format!("{hook} && ln -s .cache .husky")));
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    assert!(!exists(&ws.join(".husky")), "the link is still there; warnings: {:?}", r.warnings);
    assert!(r.warnings.iter().any(|w| w.to_string().starts_with("removed the symbolic link")), "{:?}", r.warnings);
    safe_status(&ws);
    let commit = |ws: &Ws| {
        let out = host_git(ws, &["commit", "-q", "--allow-empty", "-m", "x"]);
        assert!(out.status.success(), "git commit: {}", String::from_utf8_lossy(&out.stderr));
    };
    commit(&ws);
    assert!(!m.hit("hook"), "the host's git ran a planted hook");

    // The final entry a link, in a directory the command made chmod 000.
    let r = run_ok(&writable(&ws, "mkdir .husky && ln -s ../.cache/_ .husky/_ && chmod 000 .husky"));
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    let mode = fs::symlink_metadata(ws.join(".husky")).map(|m| m.permissions().mode() & 0o777).unwrap_or(0o777);
    assert_eq!(mode, 0, "the directory's mode is restored");
    fs::set_permissions(ws.join(".husky"), fs::Permissions::from_mode(0o755)).unwrap_or_else(|e| panic!("{e}"));
    assert!(!exists(&ws.join(".husky/_")), "the link is still there; warnings: {:?}", r.warnings);
    assert!(
        r.warnings.iter().any(|w| w.to_string().starts_with("removed ") && w.to_string().contains(".husky/_")),
        "{:?}",
        r.warnings
    );
    commit(&ws);
    assert!(!m.hit("hook"), "the host's git ran a planted hook");

    // A guarded entry too deep for a recursive delete (20,000 levels
    // overflow a thread's stack): a `HEAD` directory 30,000 levels deep at
    // the workspace root, one level of it `chmod 000`, is removed.
    // (Built bottom-up, every step near the top: fast under Landlock.)
    let deep = "import os\nos.mkdir('t')\nfor i in range(30000):\n    os.mkdir('n'); os.rename('t', 'n/d'); \
                os.rename('n', 't')\nos.rename('t', 'HEAD'); os.chmod('HEAD/d/d', 0)\nprint('deep')\n";
    let mut req = ws.req(&["/usr/bin/python3", "-c", deep]);
    req.writable = true;
    let r = run_ok(&req);
    assert_eq!((r.outcome.code(), stdout(&r).as_str()), (Some(0), "deep\n"), "{}", stderr(&r));
    assert!(!exists(&ws.join("HEAD")), "{:?}", r.warnings);
    assert!(
        r.warnings.iter().any(|w| w.to_string().starts_with("removed ") && w.to_string().contains("/HEAD created")),
        "{:?}",
        r.warnings
    );

    // Control: with the link back, the same commit runs the planted hook.
    symlink("../.cache/_", ws.join(".husky/_")).unwrap_or_else(|e| panic!("{e}"));
    commit(&ws);
    assert!(m.hit("hook"), "control: the planted hook did not run");
}

/// When the guard cannot make a path unreachable, the run fails: the
/// library's `SandboxError::AfterRun` (naming the entry, the step and the
/// errno, carrying the command's result), the CLI's exit status 125 with
/// the error on stderr and in `--json` (result included), never a warning
/// on exit 0. Forced by a debug test switch (the quarantine rename gets
/// `EPERM`), and as root for real with an append-only directory, where
/// not even root may rename. Control: without the switch the same run
/// succeeds and the link is removed.
#[test]
fn r0062_a_guard_that_cannot_neutralise_fails_the_run() {
    let config = "[include]\n\tpath = ../tools/git/shared.gitconfig\n";
    let m = Markers::new();
    let script = format!(
        "{} && ln -s .cache tools && echo planted",
        plant_filter(".cache/git/shared.gitconfig", "evil", &m.path("include"), "src/main.rs")
    );
    // The library.
    let ws = git_repo(config);
    let mut req = writable(&ws, &script);
    req.test_switches.fail_git_guard = true;
    match run(&req) {
        Err(e @ SandboxError::AfterRun { cleanup: Cleanup::GitGuard, .. }) => {
            let SandboxError::AfterRun { step, path, errno, result, .. } = &e else { unreachable!() };
            assert_eq!(errno.raw_os_error(), Some(libc::EPERM), "{e}");
            assert_eq!(path, &ws.join("tools"), "{e}");
            assert!(step.contains("quarantine"), "{step}");
            let r = result.as_deref().unwrap_or_else(|| panic!("no result carried: {e}"));
            assert_eq!((r.outcome.code(), stdout(r).as_str()), (Some(0), "planted\n"));
            assert!(r.warnings.iter().any(|w| w.to_string().starts_with("git guard:")), "{:?}", r.warnings);
            assert_eq!(e.exit_code(), 125);
        }
        other => panic!("expected SandboxError::AfterRun, got {other:?}"),
    }
    assert!(exists(&ws.join("tools")), "the switch left the link (the failure was real)");

    // The CLI, --json: exit 125, the error and the command's result.
    let ws = git_repo(config);
    let w = ws.path().display().to_string();
    let cli_args = ["exec", "--writable", "--test-fail-git-guard", "--workspace", &w];
    let out =
        cli().args(cli_args).args(["--json", "--", "sh", "-c", &script]).output().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.status.code(), Some(125), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("json: {e}: {}", String::from_utf8_lossy(&out.stdout)));
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("after the run") && msg.contains("/tools") && msg.contains("os error 1"), "{msg}");
    assert_eq!(v["error"]["exit_code"], 125);
    assert_eq!((v["result"]["outcome"]["code"].as_i64(), v["result"]["stdout"].as_str()), (Some(0), Some("planted\n")));
    let stderr_text = String::from_utf8_lossy(&out.stderr);
    assert!(stderr_text.contains("portcullis: after the run"), "{stderr_text}");
    // Without --json: the output streamed, the error on stderr, exit 125.
    let ws = git_repo(config);
    let w = ws.path().display().to_string();
    let cli_args = ["exec", "--writable", "--test-fail-git-guard", "--workspace", &w];
    let out = cli().args(cli_args).args(["--", "sh", "-c", &script]).output().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.status.code(), Some(125));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "planted\n");
    let stderr_text = String::from_utf8_lossy(&out.stderr);
    assert!(stderr_text.contains("portcullis: after the run") && stderr_text.contains("/tools"), "{stderr_text}");

    // Control: the same run without the switch succeeds and removes the link.
    let ws = git_repo(config);
    let w = ws.path().display().to_string();
    let out = cli()
        .args(["exec", "--writable", "--workspace", &w, "--", "sh", "-c", &script])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!exists(&ws.join("tools")));
    assert!(String::from_utf8_lossy(&out.stderr).contains("portcullis: warning: removed the symbolic link"));

    // For real, as root: `core.hooksPath = vendor/h/hooks` with `vendor` an
    // append-only directory (chattr +a: entries can be made there, never
    // renamed or removed), where the command makes `h` a link.
    if !in_root_pass("r0062 (append-only)", "chattr +a needs host root") {
        return;
    }
    let ws = git_repo("[core]\n\thooksPath = vendor/h/hooks\n");
    fs::create_dir(ws.join("vendor")).unwrap_or_else(|e| panic!("{e}"));
    fs::set_permissions(ws.join("vendor"), fs::Permissions::from_mode(0o777)).unwrap_or_else(|e| panic!("{e}"));
    let chattr =
        |flag: &str| Command::new("chattr").arg(flag).arg(ws.join("vendor")).status().is_ok_and(|s| s.success());
    if !available("r0062 (append-only)", chattr("+a"), "chattr +a is not supported here") {
        return;
    }
    let r = run(&writable(&ws, "mkdir -p .cache/hooks && ln -s ../.cache vendor/h && echo planted"));
    let undo = chattr("-a");
    match r {
        Err(SandboxError::AfterRun { cleanup: Cleanup::GitGuard, path, errno, result: Some(r), .. }) => {
            assert_eq!(errno.raw_os_error(), Some(libc::EPERM));
            assert_eq!(path, ws.join("vendor/h"));
            assert_eq!(stdout(&r), "planted\n");
        }
        other => panic!("expected SandboxError::AfterRun, got {other:?}"),
    }
    assert!(undo, "chattr -a");
}

/// Regression (review): the git guard removed what a writable run created
/// at a hooksPath or include path, following any link on the way: with
/// `sub -> /`, it deleted host files as the caller. It never goes through
/// a link now: the link itself is removed.
#[test]
fn r0044_the_git_guard_never_deletes_through_a_link() {
    let ws = Ws::with_git();
    let victim = tempfile::Builder::new().prefix("pc-r0044-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(victim.path().join("file.txt"), "keep\n").unwrap_or_else(|e| panic!("{e}"));
    let v = victim.path().display().to_string();
    let config = format!("[core]\n\thooksPath = sub{v}\n[include]\n\tpath = ../../../sub{v}/file.txt\n");
    let mut req = ws.req(&[
        "sh",
        "-c",
        &format!("mkdir -p .git/modules/evil && printf '%s' '{config}' > .git/modules/evil/config"),
    ]);
    req.writable = true;
    assert_eq!(run_ok(&req).outcome.code(), Some(0));
    let mut req = ws.req(&["ln", "-s", "/", "sub"]);
    req.writable = true;
    let r = run_ok(&req);
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    assert_eq!(std::fs::read_to_string(victim.path().join("file.txt")).unwrap_or_default(), "keep\n");
    // The link itself is what is removed (git would read through it), never
    // what it leads to.
    assert!(std::fs::symlink_metadata(ws.join("sub")).is_err(), "{:?}", r.warnings);
    assert!(
        r.warnings
            .iter()
            .any(|w| w.to_string().starts_with("removed the symbolic link") && w.to_string().contains("/sub ")),
        "{:?}",
        r.warnings
    );
    // Control: the same kind of entry, created without a link on the way,
    // is removed.
    let mut req = ws.req(&["sh", "-c", &format!("mkdir -p sub2{v} && touch sub2{v}/file.txt")]);
    req.writable = true;
    ws.write(".git/modules/evil/config", &format!("[include]\n\tpath = ../../../sub2{v}/file.txt\n"));
    let r = run_ok(&req);
    assert!(!ws.join(&format!("sub2{v}/file.txt")).exists(), "{:?}", r.warnings);
    assert!(r.warnings.iter().any(|w| w.to_string().starts_with("removed ")), "{:?}", r.warnings);
}

/// Regression (review): the guard's removal failed when the command took
/// write access from the directory (`chmod 555 .git`, a non-root caller),
/// and the redirection stayed for host git. The entry is renamed away with
/// the directory's mode restored.
#[test]
fn r0049_the_guard_removes_what_a_chmod_would_keep() {
    use std::os::unix::fs::PermissionsExt;
    let ws = Ws::with_git();
    let mut req = ws.req(&["sh", "-c", "mkdir evilcommon && echo ../evilcommon > .git/commondir && chmod 555 .git"]);
    req.writable = true;
    let r = run_ok(&req);
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    assert!(std::fs::symlink_metadata(ws.join(".git/commondir")).is_err(), "{:?}", r.warnings);
    let mode = std::fs::metadata(ws.join(".git")).map(|m| m.permissions().mode() & 0o777).unwrap_or(0);
    assert_eq!(mode, 0o555, "the command's chmod is kept");
    std::fs::set_permissions(ws.join(".git"), std::fs::Permissions::from_mode(0o755)).unwrap_or_else(|e| panic!("{e}"));
}
