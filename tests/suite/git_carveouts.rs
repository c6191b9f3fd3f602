//! Git's carve-outs in a writable workspace: what the host's git reads for
//! config and hooks (worktree pointers and private git dirs, includes,
//! `core.hooksPath`, `commondir`, a root `HEAD`) stays read-only and pinned,
//! or, where it did not exist, is removed after the run; planted files that
//! would hang or steer the plan refuse the run.
//!
//! Every attempt is real, each has a control that shows the same attempt
//! works with the restriction off, and each pins the errno or the typed
//! refusal.

use std::path::PathBuf;

use portcullis::SandboxError;

use super::util::*;

#[test]
fn r0007_worktree_gitdir_hooks_are_protected() {
    let ws = Ws::new();
    // A worktree: .git is a file pointing into a git dir inside the workspace.
    ws.write("main-repo/.git/config", "[core]\n");
    ws.write("main-repo/.git/hooks/x", "");
    ws.write("main-repo/.git/worktrees/wt/commondir", "../..\n");
    ws.write("main-repo/.git/worktrees/wt/HEAD", "ref: refs/heads/wt\n");
    ws.write(".git", &format!("gitdir: {}\n", ws.join("main-repo/.git/worktrees/wt").display()));
    let op = format!("create:{}", ws.join("main-repo/.git/hooks/post-checkout").display());
    let op2 = format!("append:{}", ws.join("main-repo/.git/config").display());
    let res = probe_in(&ws, &[&op, &op2], |r| r.writable = true);
    assert_eq!(res[&op], "EROFS");
    assert_eq!(res[&op2], "EROFS");
}

#[test]
fn r0019_moving_dot_git_away_cannot_smuggle_in_hooks() {
    // Found in review: `mv .git .git-old`, then a fresh .git with a hook that
    // the host's git would run. The parents of protected paths are pinned.
    let ws = Ws::with_git();
    let before = super::util::snapshot(&ws.join(".git"));
    let w = ws.path().display().to_string();
    let script = format!(
        "cd {w} && mv .git .git-old; echo mv=$?; rm -rf .git 2>/dev/null; echo rm=$?; \
         mkdir -p .git/hooks 2>&1; printf '#!/bin/sh\\necho pwned\\n' > .git/hooks/pre-commit; echo hook=$?"
    );
    let mut req = ws.req(&["sh", "-c", &script]);
    req.writable = true;
    let r = run_ok(&req);
    let out = stdout(&r);
    assert!(out.contains("mv=1"), "mv .git must fail: {out} {}", stderr(&r));
    assert!(stderr(&r).contains("busy"), "EBUSY expected: {}", stderr(&r));
    assert!(!out.contains("hook=0"), "a hook was planted: {out}");
    assert!(!ws.join(".git-old").exists());
    assert!(!ws.join(".git/hooks/pre-commit").exists());
    assert_eq!(
        super::util::snapshot(&ws.join(".git")).get(&PathBuf::from("config")),
        before.get(&PathBuf::from("config"))
    );

    // Control: without a .git to protect, the same script plants the hook.
    let ws2 = Ws::new();
    let w2 = ws2.path().display().to_string();
    let mut req = ws2.req(&["sh", "-c", &script.replace(&w, &w2)]);
    req.writable = true;
    let r = run_ok(&req);
    assert!(stdout(&r).contains("hook=0"), "{}", stdout(&r));
    assert!(ws2.join(".git/hooks/pre-commit").exists());
}

#[test]
fn r0022_a_worktree_gitdir_pointer_cannot_be_repointed() {
    let ws = Ws::new();
    ws.write("repo/.git/config", "[core]\n");
    ws.write("repo/.git/hooks/x", "");
    ws.write("repo/.git/worktrees/wt/commondir", "../..\n");
    ws.write(".git", &format!("gitdir: {}\n", ws.join("repo/.git/worktrees/wt").display()));
    let op = format!("write:{}", ws.join(".git").display());
    let res = probe_in(&ws, &[&op], |r| r.writable = true);
    assert_eq!(res[&op], "EROFS");
    // Control: a plain file of the same kind elsewhere is writable.
    let op2 = format!("write:{}", ws.join("README.md").display());
    assert_eq!(probe_in(&ws, &[&op2], |r| r.writable = true)[&op2], "OK");
}

#[test]
fn r0029_git_redirections_are_protected() {
    // Found in review: .git/commondir, submodule configs and the hooksPath
    // directory let a writable run make the host's git execute code.
    let ws = Ws::with_git();
    ws.write(".git/config", "[core]\n\thooksPath = .githooks\n");
    ws.write(".githooks/pre-commit", "#!/bin/sh\n");
    ws.write(".git/modules/sub/config", "[core]\n");
    ws.write(".git/modules/sub/hooks/x", "");
    let p = |r: &str| ws.join(r).display().to_string();
    let ops = [
        format!("append:{}", p(".git/modules/sub/config")),
        format!("create:{}", p(".git/modules/sub/hooks/post-checkout")),
        format!("write:{}", p(".githooks/pre-commit")),
        format!("create:{}", p(".git/commondir")),
        format!("create:{}", p(".git/index.lock")),
    ];
    let res = probe_in(&ws, &ops, |r| r.writable = true);
    assert_eq!(res[&ops[0]], "EROFS");
    assert_eq!(res[&ops[1]], "EROFS");
    assert_eq!(res[&ops[2]], "EROFS");
    assert_eq!(res[&ops[4]], "OK", "git must still be able to take its index lock");
    // A missing commondir cannot be mounted over (.git must stay writable for
    // git itself): one the command creates is removed after the run.
    assert_eq!(res[&ops[3]], "OK");
    assert!(!ws.join(".git/commondir").exists(), "a created commondir survived the run");
    let mut req = ws.req(&["sh", "-c", "echo ../evil > .git/commondir"]);
    req.writable = true;
    let r = run_ok(&req);
    assert!(r.warnings.iter().any(|w| w.to_string().contains("commondir")), "{:?}", r.warnings);
    assert!(!ws.join(".git/commondir").exists());
    // A repository without .git/hooks: a hooks directory the command creates
    // is removed after the run.
    let ws2 = Ws::new();
    ws2.write(".git/config", "[core]\n");
    ws2.write(".git/HEAD", "ref: refs/heads/main\n");
    let mut req =
        ws2.req(&["sh", "-c", "mkdir .git/hooks && printf '#!/bin/sh\\necho pwned\\n' > .git/hooks/pre-commit"]);
    req.writable = true;
    let r = run_ok(&req);
    assert_eq!(r.outcome.code(), Some(0), "control: the command could create the hook: {}", stderr(&r));
    assert!(!ws2.join(".git/hooks").exists(), "a planted hooks directory survived the run");
    assert!(r.warnings.iter().any(|w| w.to_string().contains("hooks")), "{:?}", r.warnings);
}

#[test]
fn r0034_git_includes_missing_hookspath_and_bare_fallback() {
    // Found in the last review: an included config file, a configured but
    // missing hooksPath, and a HEAD at the workspace root (git's bare-repo
    // fallback) let a writable run make the host's git run code.
    let ws = Ws::with_git();
    ws.write(".git/config", "[core]\n\thooksPath = .githooks\n[include]\n\tpath = ../.gitconfig-shared\n");
    ws.write(".gitconfig-shared", "[include]\n\tpath = .gitconfig-nested\n");
    ws.write(".gitconfig-nested", "[user]\n");
    let p = |r: &str| ws.join(r).display().to_string();
    let op = format!("append:{}", p(".gitconfig-shared"));
    let op2 = format!("append:{}", p(".gitconfig-nested"));
    let res = probe_in(&ws, &[&op, &op2], |r| r.writable = true);
    assert_eq!(res[&op], "EROFS", "an included config must be read-only");
    assert_eq!(res[&op2], "EROFS", "an include of an include too");
    let script =
        "mkdir .githooks && echo x > .githooks/pre-commit && echo 'ref: refs/heads/main' > HEAD && echo created";
    let mut req = ws.req(&["sh", "-c", script]);
    req.writable = true;
    let r = run_ok(&req);
    assert!(stdout(&r).contains("created"), "control: the command could write: {}", stderr(&r));
    assert!(!ws.join(".githooks").exists(), "a missing hooksPath created by the command survived");
    assert!(!ws.join("HEAD").exists(), "a HEAD at the workspace root survived");
    assert!(r.warnings.len() >= 2, "{:?}", r.warnings);
    // Control: an ordinary file the command creates stays.
    let mut req = ws.req(&["sh", "-c", "echo ok > notes.txt"]);
    req.writable = true;
    run_ok(&req);
    assert_eq!(ws.read("notes.txt"), "ok\n");
}

/// Regression (review): a git path protected through a symbolic link
/// (`.git/hooks -> ../tools/githooks`) protected only the target; the link
/// could be replaced by a real hooks directory. Such a writable run is
/// refused.
#[test]
fn r0046_a_git_hooks_link_in_a_writable_workspace_refuses_the_run() {
    let ws = Ws::with_git();
    ws.write("tools/githooks/.keep", "");
    std::fs::remove_dir_all(ws.join(".git/hooks")).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink("../tools/githooks", ws.join(".git/hooks")).unwrap_or_else(|e| panic!("{e}"));
    let mut req = ws.req(&["true"]);
    req.writable = true;
    assert!(matches!(run(&req), Err(SandboxError::UnsafePath { message: m, .. }) if m.contains("hooks")));
    assert_eq!(run_ok(&ws.req(&["true"])).outcome.code(), Some(0), "read-only runs are fine");
}

/// Regression (review): a linked worktree's private git dir
/// (`.git/worktrees/<name>/commondir`) was writable, so a run could point
/// the worktree's git at a config of its choosing.
#[test]
fn r0047_worktree_private_git_dirs_are_protected() {
    let ws = Ws::with_git();
    ws.write(".git/worktrees/wt/commondir", "../..\n");
    ws.write(".git/worktrees/wt/gitdir", "/elsewhere/wt/.git\n");
    ws.write(".git/worktrees/wt/HEAD", "ref: refs/heads/wt\n");
    let mut req = ws.req(&["sh", "-c", "echo ../../../evil > .git/worktrees/wt/commondir; echo rc=$?"]);
    req.writable = true;
    let r = run_ok(&req);
    assert!(!stdout(&r).contains("rc=0") && stderr(&r).contains("Read-only file system"), "{}", stderr(&r));
    assert_eq!(ws.read(".git/worktrees/wt/commondir"), "../..\n");
    // Control: the worktree's HEAD stays writable (git needs it).
    let mut req = ws.req(&["sh", "-c", "echo x >> .git/worktrees/wt/HEAD; echo rc=$?"]);
    req.writable = true;
    assert!(stdout(&run_ok(&req)).contains("rc=0"));
}

/// Regression (review): a FIFO (or a link to /dev/zero) planted where git
/// files belong made every later plan hang (or read without end). It is
/// refused at once now, and `--explain` escapes file names.
#[test]
fn r0048_planted_fifos_are_refused_and_explain_escapes_names() {
    let ws = Ws::new();
    nix::unistd::mkfifo(&ws.join(".git"), nix::sys::stat::Mode::from_bits_truncate(0o644))
        .unwrap_or_else(|e| panic!("{e}"));
    let start = std::time::Instant::now();
    assert!(
        matches!(run(&ws.req(&["true"])), Err(SandboxError::UnsafePath { message: m, .. }) if m.contains("regular file"))
    );
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
    std::fs::remove_file(ws.join(".git")).unwrap_or_else(|e| panic!("{e}"));
    ws.write(".envx\nforged: nothing is masked", "");
    let out = cli()
        .args(["exec", "--explain", "--deny", ".env*", "--workspace"])
        .arg(ws.path())
        .args(["--", "true"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.lines().all(|l| !l.starts_with("forged")), "{text}");
    assert!(text.contains("\\nforged"), "{text}");
}

/// Regression (review): the git config scan took the first of two
/// `hooksPath` values (git takes the last) and kept a `; comment` in an
/// include path, so the files git really reads stayed writable.
#[test]
fn r0050_git_config_values_are_read_as_git_reads_them() {
    let ws = Ws::with_git();
    ws.write(
        ".git/config",
        "[core]\n\thooksPath = hooks-a\n[core]\n\thooksPath = hooks-b\n[include]\n\tpath = inc.cfg ; shared\n",
    );
    ws.write("hooks-a/.keep", "");
    ws.write("hooks-b/.keep", "");
    ws.write(".git/inc.cfg", "[user]\n");
    for target in ["hooks-b/pre-commit", ".git/inc.cfg"] {
        let mut req = ws.req(&["sh", "-c", &format!("echo evil >> {target}; echo rc=$?")]);
        req.writable = true;
        let r = run_ok(&req);
        assert!(!stdout(&r).contains("rc=0") && stderr(&r).contains("Read-only"), "{target}: {}", stderr(&r));
    }
    // Control: the first, overridden hooksPath is an ordinary directory.
    let mut req = ws.req(&["sh", "-c", "echo x > hooks-a/x; echo rc=$?"]);
    req.writable = true;
    assert!(stdout(&run_ok(&req)).contains("rc=0"));
}

/// Regression (review): a planted submodule config including host paths
/// (`/dev/kmsg`, a file of root's) made the next run open them and name
/// what it found in its refusal. Paths outside the workspace and grants
/// are neither opened nor judged.
#[test]
fn r0051_planted_includes_of_host_paths_are_not_probed() {
    let ws = Ws::with_git();
    ws.write(".git/modules/a/config", "[include]\n\tpath = /dev/kmsg\n[include]\n\tpath = /root/.bashrc\n");
    assert_eq!(run_ok(&ws.req(&["true"])).outcome.code(), Some(0));
    let mut req = ws.req(&["true"]);
    req.writable = true;
    assert_eq!(run_ok(&req).outcome.code(), Some(0));
}
