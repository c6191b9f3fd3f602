//! Submodules and linked hooks: every git dir host git would use for the
//! workspace and its submodules keeps its carve-outs. Each attack is real
//! (a writable run plants a `core.fsmonitor` command or a hook), checked
//! from outside (a plain host `git status` at the workspace root must not
//! touch a marker file outside the workspace), and each has a control: the
//! same script run on the host, without the sandbox, against a twin
//! repository does make the host's `git status` run it.

use std::path::{Path, PathBuf};
use std::process::Command;

use portcullis::SandboxError;

use super::gitutil::{host_git, Marker};
use super::util::*;

/// Host git, isolated from the caller's own configuration; `-c` settings
/// only for building the repositories (never for the checks).
fn git(dir: &Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"];
    all.extend_from_slice(&["-c", "protocol.file.allow=always"]);
    all.extend_from_slice(args);
    let out = host_git(dir, &all);
    assert!(out.status.success(), "git {args:?} in {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    out
}

/// A plain host `git status` (and an index write, which runs
/// `post-index-change`) at the workspace root, as a user would run it.
fn host_git_status(ws: &Path) {
    for args in [&["status"][..], &["update-index", "--force-write-index"][..]] {
        let out = host_git(ws, args);
        assert!(out.status.success(), "host git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// A repository with one commit, to add as a submodule.
fn source_repo(root: &Path, name: &str) -> PathBuf {
    let p = root.join(name);
    std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("{e}"));
    git(&p, &["init", "-q", "."]);
    std::fs::write(p.join("f"), name).unwrap_or_else(|e| panic!("{e}"));
    git(&p, &["add", "f"]);
    git(&p, &["commit", "-qm", name]);
    p
}

/// A workspace that is a git repository with one commit.
fn superproject() -> Ws {
    let ws = Ws::new();
    git(ws.path(), &["init", "-q", "."]);
    git(ws.path(), &["add", "-A"]);
    git(ws.path(), &["commit", "-qm", "init"]);
    ws
}

fn sources() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("pc-src-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("{e}"))
}

fn add_submodule(ws: &Ws, url: &Path, path: &str) {
    let url = url.display().to_string();
    git(ws.path(), &["submodule", "add", "-q", &url, path]);
    git(ws.path(), &["commit", "-qm", path]);
}

/// Run `script` in a writable sandbox on `ws`: it must fail with `EROFS`
/// ("Read-only file system") and leave nothing for host git to run.
fn refused_in_sandbox(ws: &Ws, script: &str, m: &Marker) {
    let mut req = ws.req(&["sh", "-c", &format!("{script}; echo rc=$?")]);
    req.writable = true;
    let r = run_ok(&req);
    assert!(stderr(&r).contains("Read-only file system"), "{script}: {}", stderr(&r));
    assert!(!stdout(&r).contains("rc=0"), "{script}: {}", stdout(&r));
    host_git_status(ws.path());
    assert!(!m.hit(), "host git ran what the sandboxed command planted: {script}");
}

/// Control: the same script on the host, on a twin, makes host git run it.
fn works_on_host(twin: &Ws, script: &str, m: &Marker) {
    let out = Command::new("sh")
        .args(["-c", &format!("{script}; echo rc=$?")])
        .current_dir(twin.path())
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap_or_else(|e| panic!("sh: {e}"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("rc=0"), "control: {}", String::from_utf8_lossy(&out.stderr));
    host_git_status(twin.path());
    assert!(m.hit(), "control: host git did not run the planted command, so the attack proves nothing: {script}");
    std::fs::remove_file(m.path()).unwrap_or_else(|e| panic!("{e}"));
}

/// Finding (a): only two levels under `.git/modules/` were searched, so a
/// submodule named `third_party/libs/a` had a writable config while
/// `libs/b` had a read-only one.
#[test]
fn r0056_submodules_with_deep_names_are_protected() {
    let src = sources();
    let s = source_repo(src.path(), "s");
    let build = || {
        let ws = superproject();
        add_submodule(&ws, &s, "third_party/libs/a");
        add_submodule(&ws, &s, "libs/b");
        ws
    };
    let m = Marker::new();
    for module in ["third_party/libs/a", "libs/b"] {
        let script = format!("{} >> .git/modules/{module}/config", m.fsmonitor());
        refused_in_sandbox(&build(), &script, &m);
        works_on_host(&build(), &script, &m);
    }
    // The module dirs on the way are pinned: the git dir cannot be moved
    // aside for a fresh one.
    let ws = build();
    let mut req = ws.req(&["sh", "-c", "mv .git/modules/third_party .git/modules/tp; echo rc=$?"]);
    req.writable = true;
    let r = run_ok(&req);
    assert!(!stdout(&r).contains("rc=0"), "{}", stderr(&r));
    assert!(stderr(&r).contains("busy") || stderr(&r).contains("cross-device"), "{}", stderr(&r));
}

/// Finding (b): a submodule's `.git` file (`gitdir: ../.git/modules/sub`)
/// could be pointed at a repository the command made. It is read-only; and
/// where an unpopulated submodule's `.git` is missing (git would look
/// there), one the command creates is removed after the run.
#[test]
fn r0057_submodule_gitfiles_cannot_be_repointed_or_planted() {
    let src = sources();
    let s = source_repo(src.path(), "s");
    let build = || {
        let ws = superproject();
        add_submodule(&ws, &s, "sub");
        add_submodule(&ws, &s, "unpop");
        git(ws.path(), &["submodule", "deinit", "-q", "-f", "unpop"]);
        ws
    };
    let m = Marker::new();
    let repoint =
        format!("git init -q evil && {} >> evil/.git/config && echo 'gitdir: ../evil/.git' > sub/.git", m.fsmonitor());
    refused_in_sandbox(&build(), &repoint, &m);
    works_on_host(&build(), &repoint, &m);

    // The unpopulated submodule: its `.git` cannot be mounted over (it does
    // not exist), so the git guard removes the one the command creates.
    let plant = format!("git init -q unpop && {} >> unpop/.git/config", m.fsmonitor());
    let ws = build();
    let mut req = ws.req(&["sh", "-c", &format!("{plant}; echo rc=$?")]);
    req.writable = true;
    let r = run_ok(&req);
    assert!(stdout(&r).contains("rc=0"), "the command could create it: {}", stderr(&r));
    assert!(!ws.join("unpop/.git").exists(), "a planted submodule .git survived the run");
    assert!(r.warnings.iter().any(|w| w.to_string().contains("unpop/.git")), "{:?}", r.warnings);
    host_git_status(ws.path());
    assert!(!m.hit(), "host git ran the planted submodule's fsmonitor");
    works_on_host(&build(), &plant, &m);
}

/// Finding (c): a submodule whose `.git` is an embedded directory got no
/// protection at all; a nested submodule's `.git` file was writable too.
#[test]
fn r0058_embedded_and_nested_submodule_git_dirs_are_protected() {
    let src = sources();
    let inner = source_repo(src.path(), "inner");
    let outer = source_repo(src.path(), "outer");
    git(&outer, &["submodule", "add", "-q", &inner.display().to_string(), "inner"]);
    git(&outer, &["commit", "-qm", "inner"]);
    let build = || {
        let ws = superproject();
        // An embedded repository added as a submodule keeps its `.git`
        // directory in the working tree.
        let emb = ws.join("emb");
        std::fs::create_dir_all(&emb).unwrap_or_else(|e| panic!("{e}"));
        git(&emb, &["init", "-q", "."]);
        std::fs::write(emb.join("f"), "e").unwrap_or_else(|e| panic!("{e}"));
        git(&emb, &["add", "f"]);
        git(&emb, &["commit", "-qm", "e"]);
        add_submodule(&ws, Path::new("./emb"), "emb");
        assert!(ws.join("emb/.git").is_dir());
        add_submodule(&ws, &outer, "outer");
        git(ws.path(), &["submodule", "update", "-q", "--init", "--recursive"]);
        assert!(ws.join(".git/modules/outer/modules/inner").is_dir());
        ws
    };
    let m = Marker::new();
    let scripts = [
        format!("{} >> emb/.git/config", m.fsmonitor()),
        format!(
            "git init -q evil && {} >> evil/.git/config && echo 'gitdir: ../../evil/.git' > outer/inner/.git",
            m.fsmonitor()
        ),
        format!("{} >> .git/modules/outer/modules/inner/config", m.fsmonitor()),
        "mkdir -p emb/.git/hooks && printf '#!/bin/sh\\nexit 0\\n' > emb/.git/hooks/pre-commit".to_string(),
    ];
    for script in &scripts[..3] {
        refused_in_sandbox(&build(), script, &m);
        works_on_host(&build(), script, &m);
    }
    let ws = build();
    let mut req = ws.req(&["sh", "-c", &format!("{}; echo rc=$?", scripts[3])]);
    req.writable = true;
    let r = run_ok(&req);
    assert!(stderr(&r).contains("Read-only file system"), "embedded hooks: {}", stderr(&r));
    // Control: the rest of the embedded git dir stays writable (git works).
    let mut req = ws.req(&["sh", "-c", "echo x > emb/.git/objects-ok; echo rc=$?"]);
    req.writable = true;
    assert!(stdout(&run_ok(&req)).contains("rc=0"));
}

/// Hardening: a protected hook that is a link into the tree ran whatever a
/// writable command wrote into the link's target. The target is read-only
/// now; a missing target the command creates is removed after the run; a
/// target reached through a link in a writable area refuses the run.
#[test]
fn r0059_a_symlinked_hook_target_is_read_only() {
    let m = Marker::new();
    let build = || {
        let ws = superproject();
        ws.write("scripts/post-index-change", "#!/bin/sh\nexit 0\n");
        let hook = ws.join("scripts/post-index-change");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink("../../scripts/post-index-change", ws.join(".git/hooks/post-index-change"))
            .unwrap_or_else(|e| panic!("{e}"));
        ws
    };
    let script = format!("printf '#!/bin/sh\\ntouch {}\\n' > scripts/post-index-change", m.path().display());
    refused_in_sandbox(&build(), &script, &m);
    works_on_host(&build(), &script, &m);

    // A link to a missing file at the workspace root (which must stay
    // writable): what the command creates there is removed after the run.
    let ws = build();
    std::os::unix::fs::symlink("../../pre-push-hook", ws.join(".git/hooks/pre-push")).unwrap_or_else(|e| panic!("{e}"));
    let mut req = ws.req(&["sh", "-c", "echo '#!/bin/sh' > pre-push-hook && echo x > other-file; echo rc=$?"]);
    req.writable = true;
    let r = run_ok(&req);
    assert!(stdout(&r).contains("rc=0"), "{}", stderr(&r));
    assert!(std::fs::symlink_metadata(ws.join("pre-push-hook")).is_err(), "a planted hook target survived");
    assert!(r.warnings.iter().any(|w| w.to_string().contains("pre-push-hook")), "{:?}", r.warnings);
    assert_eq!(ws.read("other-file"), "x\n", "control: an ordinary new file stays");

    // A hook reached through a link in the writable workspace: the command
    // could point that link elsewhere, so the writable run is refused.
    let ws = build();
    ws.write("real-tools/pre-push", "#!/bin/sh\nexit 0\n");
    std::os::unix::fs::symlink("real-tools", ws.join("tools")).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink("../../tools/pre-push", ws.join(".git/hooks/pre-push"))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut req = ws.req(&["true"]);
    req.writable = true;
    match run(&req) {
        Err(SandboxError::HookThroughLink { link, .. }) => assert_eq!(link, ws.join("tools")),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(run_ok(&ws.req(&["true"])).outcome.code(), Some(0), "control: read-only runs are fine");
}
