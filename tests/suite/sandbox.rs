//! End-to-end tests of the write barrier: every attempt is real, each has a
//! control that shows the same attempt works with the restriction off, and
//! each pins the errno.

use std::path::PathBuf;

use portcullis::sandbox::ExecRequest;
use portcullis::SandboxError;

use super::util::*;

/// Write operations on the workspace, as probe ops.
fn write_ops(ws: &Ws) -> Vec<String> {
    let p = |r: &str| ws.join(r).display().to_string();
    vec![
        format!("append:{}", p("README.md")),
        format!("write:{}", p("src/main.rs")),
        format!("truncate:{}", p("src/lib.rs")),
        format!("ftruncate:{}", p("README.md")),
        format!("create:{}", p("new.txt")),
        format!("rename:{}:{}", p("README.md"), p("README2.md")),
        format!("chmod:{}", p("src/main.rs")),
        format!("touch:{}", p("src/main.rs")),
        format!("link:{}:{}", p("src/main.rs"), p("hard")),
        format!("symlink:{}:{}", p("src/main.rs"), p("soft")),
        format!("mkdir:{}", p("newdir")),
        format!("unlink:{}", p("src/lib.rs")),
    ]
}

#[test]
fn r0001_find_delete_in_read_only_workspace_changes_nothing() {
    let ws = Ws::new();
    let before = ws.snapshot();
    let target = ws.path().display().to_string();
    let r = run_ok(&ws.req(&["find", &target, "-mindepth", "1", "-delete"]));
    assert_ne!(r.outcome.code(), Some(0));
    assert!(stderr(&r).contains("Read-only file system"), "expected EROFS, got: {}", stderr(&r));
    assert_eq!(ws.snapshot(), before, "the read-only workspace changed");
    assert!(!r.writable);

    // Control: the same command with write access really deletes the tree.
    let mut req = ws.req(&["find", &target, "-mindepth", "1", "-delete"]);
    req.writable = true;
    let r = run_ok(&req);
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    assert!(ws.snapshot().is_empty(), "the writable control did not delete the tree");
}

#[test]
fn r0002_every_kind_of_write_is_refused_with_erofs() {
    let ws = Ws::new();
    let before = ws.snapshot();
    let ops = write_ops(&ws);
    let res = probe_in(&ws, &ops, |_| {});
    for op in &ops {
        assert_eq!(res.get(op).map(String::as_str), Some("EROFS"), "{op} was not refused with EROFS: {res:?}");
    }
    assert_eq!(ws.snapshot(), before);

    // Control: the same operations succeed in a writable workspace.
    let ws2 = Ws::new();
    let ops2 = write_ops(&ws2);
    let res2 = probe_in(&ws2, &ops2, |r| r.writable = true);
    for op in &ops2 {
        assert_eq!(res2.get(op).map(String::as_str), Some("OK"), "control {op} failed: {res2:?}");
    }
}

#[test]
fn r0003_write_grant_on_target_leaves_src_alone() {
    let ws = Ws::new();
    // A link planted in target/ that points at the source.
    std::os::unix::fs::symlink(ws.join("src/main.rs"), ws.join("target/evil"))
        .unwrap_or_else(|e| panic!("symlink: {e}"));
    let src_before = super::util::snapshot(&ws.join("src"));
    let p = |r: &str| ws.join(r).display().to_string();
    let ops = [
        format!("create:{}", p("target/out.o")),
        format!("write:{}", p("target/evil")),
        format!("write:{}", p("src/main.rs")),
        format!("rename:{}:{}", p("src/main.rs"), p("target/main.rs")),
        format!("create:{}", p("src/new.rs")),
    ];
    let res = probe_in(&ws, &ops, |r| r.write.push(PathBuf::from("target")));
    assert_eq!(res[&ops[0]], "OK", "the grant must allow writing in target/");
    assert_eq!(res[&ops[1]], "EROFS", "a link in target/ must not write through to src/");
    assert_eq!(res[&ops[2]], "EROFS");
    // rename(2) across the mount boundary: EXDEV before anything moves.
    assert_eq!(res[&ops[3]], "EXDEV");
    assert_eq!(res[&ops[4]], "EROFS");
    assert_eq!(super::util::snapshot(&ws.join("src")), src_before, "src/ changed");
    assert!(ws.join("target/out.o").exists(), "the granted write did not land");

    // Control: with the whole workspace writable, the link does write through.
    let res = probe_in(&ws, &[&ops[1]], |r| r.writable = true);
    assert_eq!(res[&ops[1]], "OK");
    assert_eq!(ws.read("src/main.rs"), "pwned\n");
}

#[test]
fn r0004_host_paths_are_read_only_and_home_is_invisible() {
    let ws = Ws::new();
    // $HOME when it exists on the host (uid 65534 has none), else /root.
    let home =
        std::env::var("HOME").ok().filter(|h| std::path::Path::new(h).is_dir()).unwrap_or_else(|| "/root".into());
    let ops = [
        "create:/etc/portcullis-probe".to_string(),
        "create:/usr/portcullis-probe".to_string(),
        format!("exists:{home}"),
        "exists:/root".into(),
        "exists:/var/log".into(),
        "exists:/run".into(),
        "create:/portcullis-probe".into(),
        "create:/tmp/ok".into(),
    ];
    let res = probe_in(&ws, &ops, |r| r.writable = true);
    assert_eq!(res[&ops[0]], "EROFS");
    assert_eq!(res[&ops[1]], "EROFS");
    if !home.starts_with("/tmp") {
        assert_eq!(res[&ops[2]], "no", "$HOME is visible");
    }
    assert_eq!(res[&ops[3]], "no");
    assert_eq!(res[&ops[4]], "no");
    assert_eq!(res[&ops[5]], "no");
    assert_eq!(res[&ops[6]], "EROFS", "the sandbox root must be read-only");
    assert_eq!(res[&ops[7]], "OK", "the private /tmp is writable");
    assert!(!std::path::Path::new("/etc/portcullis-probe").exists());
    assert!(!std::path::Path::new("/tmp/ok").exists(), "the private /tmp leaked to the host");
    // Control: on the host these paths exist.
    assert!(std::path::Path::new("/etc").exists() && std::path::Path::new(&home).exists());
}

#[test]
fn r0005_denied_paths_are_masked() {
    let ws = Ws::new();
    ws.write(".env", "TOKEN=secret\n");
    ws.write("sub/.env.local", "TOKEN=secret\n");
    ws.write("secrets/key.pem", "KEY\n");
    ws.write("config/app.toml", "ok\n");
    let p = |r: &str| ws.join(r).display().to_string();
    let ops = [
        format!("read:{}", p(".env")),
        format!("read:{}", p("sub/.env.local")),
        format!("read:{}", p("secrets/key.pem")),
        format!("listdir:{}", p("secrets")),
        format!("read:{}", p("config/app.toml")),
    ];
    let res = probe_in(&ws, &ops, |r| {
        r.deny.push(".env*".into());
        r.deny.push("secrets".into());
    });
    assert_eq!(res[&ops[0]], "EACCES");
    assert_eq!(res[&ops[1]], "EACCES", "a name glob matches at any depth");
    assert!(res[&ops[2]] == "EACCES" || res[&ops[2]] == "ENOENT", "{res:?}");
    assert_eq!(res[&ops[3]], "EACCES");
    assert_eq!(res[&ops[4]], "OK:3");
    // Control: without the deny list everything is readable.
    let res = probe_in(&ws, &ops, |_| {});
    assert_eq!(res[&ops[0]], "OK:13");
    assert_eq!(res[&ops[2]], "OK:4");
    // The mask left nothing behind in the tree.
    assert!(!ws.join(".portcullis-mask").exists());
}

#[test]
fn r0006_protected_paths_stay_read_only_in_a_writable_workspace() {
    let ws = Ws::with_git();
    ws.write(".github/workflows/ci.yml", "on: push\n");
    let before_git = super::util::snapshot(&ws.join(".git"));
    let p = |r: &str| ws.join(r).display().to_string();
    let ops = [
        format!("create:{}", p(".git/hooks/pre-commit")),
        format!("append:{}", p(".git/config")),
        format!("write:{}", p(".github/workflows/ci.yml")),
        format!("create:{}", p(".git/objects-ok")),
        format!("write:{}", p("src/main.rs")),
        format!("rename:{}:{}", p(".git/hooks"), p("hooks-moved")),
    ];
    let res = probe_in(&ws, &ops, |r| {
        r.writable = true;
        r.protect.push(PathBuf::from(".github/workflows"));
    });
    assert_eq!(res[&ops[0]], "EROFS");
    assert_eq!(res[&ops[1]], "EROFS");
    assert_eq!(res[&ops[2]], "EROFS");
    assert_eq!(res[&ops[3]], "OK", "the rest of .git stays writable");
    assert_eq!(res[&ops[4]], "OK");
    // .git is pinned (a mount point), so the rename crosses mounts: EXDEV
    // comes before the EBUSY of moving a mount point.
    assert!(["EXDEV", "EBUSY"].contains(&res[&ops[5]].as_str()), "a protected mount point moved: {res:?}");
    let mut after_git = super::util::snapshot(&ws.join(".git"));
    after_git.remove(&PathBuf::from("objects-ok"));
    assert_eq!(after_git, before_git);

    // Control: without protection the hook lands.
    let res = probe_in(&ws, &[&ops[0]], |r| r.write.push(PathBuf::from(".git")));
    assert_eq!(res[&ops[0]], "EROFS", "a grant on .git keeps hooks protected");
    let ws2 = Ws::new();
    ws2.write(".git/hooks/x", "");
    let op = format!("create:{}", ws2.join(".git/hooks/pre-commit").display());
    let mut req_probe = probe_in(&ws2, &[&op], |r| r.writable = true);
    assert_eq!(req_probe.remove(&op).as_deref(), Some("EROFS"));
}

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
fn r0008_no_stub_files_are_left_in_the_tree() {
    let ws = Ws::with_git();
    ws.write(".env", "x\n");
    let before = ws.snapshot();
    let mut req = ws.req(&["true"]);
    req.writable = true;
    req.deny.push(".env".into());
    req.protect.push(PathBuf::from("src/lib.rs"));
    req.write.push(PathBuf::from("target"));
    let r = run_ok(&req);
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    assert_eq!(ws.snapshot(), before, "a run left files behind");
}

#[test]
fn r0009_landlock_alone_refuses_when_the_mounts_are_broken() {
    if !available("landlock_alone", portcullis::doctor_landlock_abi() > 0, "no Landlock on this kernel") {
        return;
    }
    let ws = Ws::new();
    let op = format!("write:{}", ws.join("src/main.rs").display());
    // Mount barrier broken on purpose: Landlock refuses with EACCES.
    let res = probe_in(&ws, &[&op], |r| r.test_switches.skip_readonly = true);
    assert_eq!(res[&op], "EACCES");
    // The reverse: Landlock off, the mount refuses with EROFS.
    let res = probe_in(&ws, &[&op], |r| r.test_switches.skip_landlock = true);
    assert_eq!(res[&op], "EROFS");
    assert_eq!(ws.read("src/main.rs"), "fn main() { println!(\"hi\"); }\n");
    // Control: both broken, the write lands — so each layer alone was what stopped it.
    let res = probe_in(&ws, &[&op], |r| {
        r.test_switches.skip_readonly = true;
        r.test_switches.skip_landlock = true;
    });
    assert_eq!(res[&op], "OK");
    assert_eq!(ws.read("src/main.rs"), "pwned\n");
}

#[test]
fn r0010_remount_and_nested_namespaces_fail() {
    let ws = Ws::new();
    let target = ws.path().display().to_string();
    let script = format!(
        "mount -o remount,rw {target} 2>&1; echo rc=$?; unshare -rm sh -c 'mount -o remount,rw {target}' 2>&1; echo rc=$?; echo x > {target}/README.md 2>&1; echo rc=$?"
    );
    let r = run_ok(&ws.req(&["sh", "-c", &script]));
    let out = stdout(&r);
    assert!(!out.contains("rc=0"), "a remount or write succeeded: {out}");
    assert!(out.contains("Operation not permitted") || out.contains("permission denied"), "{out}");
    assert_eq!(ws.read("README.md"), "readme\n");
    // Control: outside the sandbox, unshare -rm with a mount works.
    if std::path::Path::new("/usr/bin/unshare").exists() {
        let ok = std::process::Command::new("unshare")
            .args(["-rm", "sh", "-c", "mount -t tmpfs none /mnt && echo mounted"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).contains("mounted"))
            .unwrap_or(false);
        assert!(ok, "control: unshare -rm + mount should work on the host");
    }
}

#[test]
fn r0011_setup_failures_are_typed_errors() {
    let missing = ExecRequest::new("/nonexistent/portcullis-ws", ["true"]);
    match run(&missing) {
        Err(SandboxError::Path { what: "workspace", .. }) => {}
        other => panic!("expected a workspace path error, got {other:?}"),
    }
    let ws = Ws::new();
    match run(&ws.req(&["definitely-not-a-command-xyz"])) {
        Err(e @ SandboxError::Exec { .. }) => assert_eq!(e.exit_code(), 127),
        other => panic!("expected Exec ENOENT, got {other:?}"),
    }
    let mut req = ws.req(&["true"]);
    // A missing grant is created only inside the workspace (cli::r0075).
    req.write.push(PathBuf::from("/nonexistent/portcullis-grant"));
    assert!(matches!(run(&req), Err(SandboxError::MissingGrant { .. })));
    // A grant containing the workspace is accepted (the narrower rule wins,
    // roots::r0087/r0088); only `/` is refused.
    let mut req = ws.req(&["true"]);
    req.write.push(PathBuf::from("/"));
    assert!(matches!(run(&req), Err(SandboxError::GrantRefused { .. })), "a grant of / is refused");
    let mut req = ws.req(&["true"]);
    req.deny.push("[".into());
    assert!(matches!(run(&req), Err(SandboxError::Glob { .. })));
    // A file that is not executable: 126.
    ws.write("script.sh", "#!/bin/sh\n");
    let s = ws.join("script.sh").display().to_string();
    match run(&ws.req(&[&s])) {
        Err(e @ SandboxError::Exec { .. }) => assert_eq!(e.exit_code(), 126),
        other => panic!("expected Exec EACCES, got {other:?}"),
    }
    // Control: a real command runs.
    assert_eq!(run_ok(&ws.req(&["true"])).outcome.code(), Some(0));
}

#[test]
fn r0012_exit_codes_and_signals_come_back() {
    let ws = Ws::new();
    let r = run_ok(&ws.req(&["sh", "-c", "exit 7"]));
    assert_eq!((r.outcome.code(), r.outcome.signal()), (Some(7), None));
    let r = run_ok(&ws.req(&["sh", "-c", "kill -TERM $$"]));
    assert_eq!((r.outcome.code(), r.outcome.signal()), (None, Some(15)));
    let r = run_ok(&ws.req(&["sh", "-c", "echo out; echo err >&2"]));
    assert_eq!((stdout(&r).as_str(), stderr(&r).as_str()), ("out\n", "err\n"));
}

#[test]
fn r0013_environment_is_only_what_was_asked() {
    let ws = Ws::new();
    let mut req = ws.req(&["env"]);
    req.env.push(("FOO".into(), "bar".into()));
    let r = run_ok(&req);
    let out = stdout(&r);
    let names: Vec<&str> = out.lines().filter_map(|l| l.split('=').next()).collect();
    assert!(names.contains(&"FOO") && names.contains(&"PATH"), "{out}");
    assert!(names.iter().all(|n| ["FOO", "PATH", "PWD"].contains(n)), "unexpected variables: {out}");
}

#[test]
fn r0014_cli_reports_json_exit_codes_and_explains() {
    let ws = Ws::new();
    let w = ws.path().display().to_string();
    let out = cli()
        .args(["exec", "--json", "--workspace", &w, "--", "sh", "-c", "echo hi > probe"])
        .output()
        .unwrap_or_else(|e| panic!("cli: {e}"));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("json: {e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(v["outcome"]["code"], 2);
    assert_eq!(v["writable"], false);
    assert!(v["stderr"].as_str().unwrap_or("").contains("Read-only file system"));
    assert!(v["enforcement"]["landlock_abi"].as_u64().is_some());
    assert!(!ws.join("probe").exists());
    assert_eq!(out.status.code(), Some(2));

    let out = cli()
        .args(["exec", "--workspace", &w, "--", "no-such-cmd-xyz"])
        .output()
        .unwrap_or_else(|e| panic!("cli: {e}"));
    assert_eq!(out.status.code(), Some(127));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot execute no-such-cmd-xyz"));

    let out = cli()
        .args(["exec", "--timeout", "0.5", "--workspace", &w, "--", "sleep", "30"])
        .output()
        .unwrap_or_else(|e| panic!("cli: {e}"));
    assert_eq!(out.status.code(), Some(124));

    let out = cli()
        .args(["exec", "--workspace", "/nonexistent/ws", "--", "true"])
        .output()
        .unwrap_or_else(|e| panic!("cli: {e}"));
    assert_eq!(out.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot resolve workspace /nonexistent/ws"));

    // --explain runs nothing and prints the plan.
    let out = cli()
        .args(["exec", "--explain", "--writable", "--workspace", &w, "--", "sh", "-c", "touch made-by-explain"])
        .output()
        .unwrap_or_else(|e| panic!("cli: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        text.contains(&format!("workspace: {} (writable)", ws.path().canonicalize().unwrap_or_default().display())),
        "{text}"
    );
    assert!(text.contains("seccomp: sha256 "), "{text}");
    assert!(text.contains("landlock-writable: "), "{text}");
    assert!(!ws.join("made-by-explain").exists());
    // Explaining twice gives the same text: reviewers diff these.
    let again = cli()
        .args(["exec", "--explain", "--writable", "--workspace", &w, "--", "sh", "-c", "touch made-by-explain"])
        .output()
        .unwrap_or_else(|e| panic!("cli: {e}"));
    assert_eq!(String::from_utf8_lossy(&again.stdout), text);
}

#[test]
fn r0015_non_utf8_names_and_arguments_survive() {
    use std::os::unix::ffi::OsStrExt;
    let ws = Ws::new();
    let name = std::ffi::OsStr::from_bytes(b"caf\xe9.txt");
    std::fs::write(ws.path().join(name), "x").unwrap_or_else(|e| panic!("write: {e}"));
    let mut req = ws.req(&["ls"]);
    req.argv.push(name.to_os_string());
    let r = run_ok(&req);
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    assert_eq!(r.stdout, b"caf\xe9.txt\n");
}

#[test]
fn r0016_workspace_under_tmp_reports_its_landlock_gap() {
    let ws = Ws::new_in(std::path::Path::new("/tmp"));
    let plan = sandbox().plan(&ws.req(&["true"])).unwrap_or_else(|e| panic!("plan: {e}"));
    let real = ws.path().canonicalize().unwrap_or_default();
    assert_eq!(plan.landlock_gaps, vec![real]);
    // The mount layer still refuses the write.
    let op = format!("write:{}", ws.join("src/main.rs").display());
    assert_eq!(probe_in(&ws, &[&op], |_| {})[&op], "EROFS");
    // Control: a workspace elsewhere has no gap.
    let ws2 = Ws::new();
    assert!(sandbox().plan(&ws2.req(&["true"])).map(|p| p.landlock_gaps.is_empty()).unwrap_or(false));
}

#[test]
fn r0017_device_nodes_work_and_nothing_else_is_a_device() {
    // Every bind is nodev except the nodes /dev needs: a shell redirect to
    // /dev/null, reads of /dev/zero and background jobs (dash opens
    // /dev/null for them) must work.
    let ws = Ws::new();
    let r = run_ok(&ws.req(&[
        "sh",
        "-c",
        "echo x > /dev/null && head -c 4 /dev/zero | wc -c && (true &) && head -c 1 /dev/urandom | wc -c",
    ]));
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    assert_eq!(stdout(&r), "4\n1\n");
}

#[test]
fn r0018_doctor_reports_every_layer() {
    let out = cli().args(["doctor", "--json"]).output().unwrap_or_else(|e| panic!("cli: {e}"));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("json: {e}"));
    for key in
        ["user_namespaces", "landlock", "seccomp", "cgroup", "sandbox_probe", "modes", "x32_syscalls", "kill_mechanism"]
    {
        assert!(v.get(key).is_some(), "doctor lacks {key}: {v}");
    }
    let usable = v["sandbox_probe"]["ok"].as_bool().unwrap_or(false);
    if !available("doctor", usable, &format!("the sandbox does not work here: {}", v["sandbox_probe"]["detail"])) {
        return;
    }
    assert!(out.status.success());
    assert_eq!(v["landlock_abi"].as_u64(), Some(u64::from(portcullis::doctor_landlock_abi())));
    let expected = if is_root() { "cgroup-kill" } else { "pid-namespace" };
    assert_eq!(v["kill_mechanism"], expected);
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
fn r0020_a_symlink_cannot_redirect_a_grant_out_of_the_workspace() {
    // Found in review: `target` -> /elsewhere made `--write target` a grant
    // on /elsewhere.
    let ws = Ws::new();
    let outside = Ws::new();
    std::fs::remove_dir_all(ws.join("target")).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(outside.path(), ws.join("target")).unwrap_or_else(|e| panic!("{e}"));
    for what in ["write grant", "readable root", "working directory"] {
        let mut req = ws.req(&["true"]);
        match what {
            "write grant" => req.write.push(PathBuf::from("target")),
            "readable root" => req.read.push(PathBuf::from("target")),
            _ => req.cwd = Some(PathBuf::from("target")),
        }
        match run(&req) {
            Err(SandboxError::PathEscape { what: w, resolved, .. }) => {
                assert_eq!(w, what);
                assert_eq!(resolved, outside.path().canonicalize().unwrap_or_default());
            }
            other => panic!("{what}: expected PathEscape, got {other:?}"),
        }
    }
    // Control: naming the outside directory by its own absolute path is an
    // explicit host grant and works.
    let mut req = ws.req(&["sh", "-c", &format!("echo ok > {}/granted", outside.path().display())]);
    req.write.push(outside.path().to_path_buf());
    assert_eq!(run_ok(&req).outcome.code(), Some(0));
    assert_eq!(outside.read("granted"), "ok\n");
}

#[test]
fn r0021_absolute_deny_globs_mask_host_paths() {
    let ws = Ws::new();
    let ops = ["read:/etc/hostname", "read:/etc/passwd"];
    let res = probe_in(&ws, &ops, |r| r.deny.push("/etc/host*".into()));
    assert_eq!(res["read:/etc/hostname"], "EACCES");
    assert!(res["read:/etc/passwd"].starts_with("OK"));
    // Control: without the glob, /etc/hostname is readable.
    let res = probe_in(&ws, &ops, |_| {});
    assert!(res["read:/etc/hostname"].starts_with("OK"), "{res:?}");
    // A glob with no literal directory is refused rather than walking /.
    let mut req = ws.req(&["true"]);
    req.deny.push("/**/id_rsa".into());
    assert!(matches!(run(&req), Err(SandboxError::Glob { .. })));
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
fn r0023_cancellation_kills_the_whole_tree() {
    use portcullis::sandbox::RunOptions;
    let ws = Ws::new();
    let marker = format!("sleep 7{}", std::process::id() % 1000);
    let req = ws.req(&["bash", "-c", &format!("{marker}1 & {marker}2 & wait")]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| panic!("{e}"));
    let cancel = tokio_util::sync::CancellationToken::new();
    let c2 = cancel.clone();
    let start = std::time::Instant::now();
    let r = rt.block_on(async move {
        tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            c2.cancel();
        });
        sandbox().run(&req, RunOptions { cancel: Some(cancel), ..RunOptions::default() }).await
    });
    let r = r.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.outcome, portcullis::sandbox::Outcome::Cancelled, "{r:?}");
    assert_eq!(r.outcome.exit_status(), 130);
    assert!(start.elapsed() < std::time::Duration::from_secs(5));
    let left: Vec<String> = host_procs_containing(&marker);
    assert!(left.is_empty(), "survivors: {left:?}");
    // Control: without cancellation the same command would still be running.
    let mut quick = ws.req(&["sleep", "0.2"]);
    quick.timeout = Some(std::time::Duration::from_secs(5));
    let r = run_ok(&quick);
    assert!(!(r.outcome == portcullis::sandbox::Outcome::Cancelled) && r.outcome.code() == Some(0));
}

#[test]
fn r0024_memory_limit_applies() {
    let ws = Ws::new();
    let grab = ["/usr/bin/python3", "-c", "b = bytearray(300 * 1024 * 1024); print('allocated')"];
    let mut req = ws.req(&grab);
    req.limits.memory = Some(128 << 20);
    let r = run_ok(&req);
    assert_ne!(r.outcome.code(), Some(0), "300 MiB fit under a 128 MiB limit: {}", stdout(&r));
    assert!(stderr(&r).contains("MemoryError") || r.outcome.signal().is_some(), "{}", stderr(&r));
    assert!(r.enforcement.limits.memory.is_some());
    // Control: without the limit the allocation succeeds.
    let r = run_ok(&ws.req(&grab));
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    assert_eq!(stdout(&r), "allocated\n");
}

#[test]
fn r0025_an_abandoned_run_leaves_nothing_behind() {
    use portcullis::sandbox::RunOptions;
    let ws = Ws::new();
    let marker = format!("sleep 8{}", std::process::id() % 1000);
    let req = ws.req(&["bash", "-c", &format!("{marker}1 & {marker}2 & wait")]);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| panic!("{e}"));
    let sb = sandbox();
    let dropped = rt.block_on(async {
        tokio::time::timeout(std::time::Duration::from_millis(400), sb.run(&req, RunOptions::default())).await
    });
    assert!(dropped.is_err(), "the run should still have been going");
    let procs: Vec<String> = host_procs_containing(&marker);
    // Dropping the run returns only once the helper tore the sandbox down.
    assert!(procs.is_empty(), "survivors of a dropped run: {procs:?}");
    if let Ok(host) = sb.cgroup_host() {
        let prefix = format!("portcullis-{}-", std::process::id());
        let left: Vec<String> = std::fs::read_dir(&host.parent)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&prefix))
            .collect();
        // Other tests of this process may have live leaves; a leaked one is
        // empty and stays: check the empty ones again a moment later.
        let empty = |n: &String| {
            std::fs::read_to_string(host.parent.join(n).join("cgroup.events"))
                .is_ok_and(|e| e.lines().any(|l| l == "populated 0"))
        };
        let suspects: Vec<String> = left.into_iter().filter(|n| empty(n)).collect();
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let leaked: Vec<&String> = suspects.iter().filter(|n| empty(n)).collect();
        assert!(leaked.is_empty(), "empty cgroup leaves left behind: {leaked:?}");
    }
}

#[test]
fn r0026_no_setuid_or_setgid_files_can_be_made() {
    // Found in review: a root caller's command writes files owned by host
    // root (idmapped), so a setuid bit would hand root to anyone on the host.
    let ws = Ws::new();
    let p = |r: &str| ws.join(r).display().to_string();
    let script = format!(
        "import os\n\
         def t(name, f):\n    try:\n        f(); print(name, 'OK')\n    except OSError as e:\n        print(name, e.errno)\n\
         open('{f}', 'w').close()\n\
         t('chmod-suid', lambda: os.chmod('{f}', 0o4755))\n\
         t('chmod-sgid', lambda: os.chmod('{f}', 0o2755))\n\
         t('fchmod-suid', lambda: os.fchmod(os.open('{f}', os.O_RDONLY), 0o4755))\n\
         t('create-suid', lambda: os.close(os.open('{g}', os.O_CREAT | os.O_WRONLY, 0o4755)))\n\
         t('mkdir-sgid', lambda: os.mkdir('{d}', 0o2755))\n\
         t('chmod-plain', lambda: os.chmod('{f}', 0o755))\n",
        f = p("target/f"),
        g = p("target/g"),
        d = p("target/d")
    );
    let mut req = ws.req(&["/usr/bin/python3", "-c", &script]);
    req.write.push(PathBuf::from("target"));
    let r = run_ok(&req);
    let out = stdout(&r);
    for name in ["chmod-suid", "chmod-sgid", "fchmod-suid", "create-suid", "mkdir-sgid"] {
        assert!(
            out.contains(&format!("{name} {}", libc::EPERM)),
            "{name} not refused with EPERM: {out} {}",
            stderr(&r)
        );
    }
    // Control: an ordinary mode change in the same grant works.
    assert!(out.contains("chmod-plain OK"), "{out}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(ws.join("target/f")).map(|m| m.permissions().mode()).unwrap_or(0);
    assert_eq!(mode & 0o7777, 0o755);
}

#[test]
fn r0027_piped_stdin_is_a_pipe_not_the_callers_file() {
    // Found in review: the caller's stdin file could be truncated, chmod-ed
    // or touched through fd 0. The CLI now copies input through a pipe.
    let ws = Ws::new();
    ws.write("in.txt", "data\n");
    let input = std::fs::File::open(ws.join("in.txt")).unwrap_or_else(|e| panic!("{e}"));
    let w = ws.path().display().to_string();
    let code = "import os, stat\n\
                print(stat.S_ISFIFO(os.fstat(0).st_mode))\n\
                print(os.read(0, 100))\n\
                for f in (lambda: os.fchmod(0, 0o777), lambda: os.ftruncate(0, 0), lambda: os.open('/proc/self/fd/0', os.O_RDONLY | os.O_TRUNC)):\n\
                \x20   try:\n        f()\n    except OSError as e:\n        print('refused', e.errno)\n";
    let out = cli()
        .args(["exec", "--workspace", &w, "--", "/usr/bin/python3", "-c", code])
        .stdin(input)
        .output()
        .unwrap_or_else(|e| panic!("cli: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("True\nb'data\\n'\n"), "{text} {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(ws.read("in.txt"), "data\n");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(ws.join("in.txt")).map(|m| m.permissions().mode()).unwrap_or(0);
    assert_eq!(mode & 0o777, 0o644, "the input file's mode changed");
}

#[test]
fn r0028_protect_refuses_missing_and_symlinked_paths() {
    // Found in review: --protect on a symlink protected the target, leaving
    // the name replaceable; a missing --protect path was silently dropped.
    let ws = Ws::new();
    std::os::unix::fs::symlink("src/main.rs", ws.join("Makefile")).unwrap_or_else(|e| panic!("{e}"));
    let mut req = ws.req(&["true"]);
    req.writable = true;
    req.protect.push(PathBuf::from("Makefile"));
    assert!(matches!(run(&req), Err(SandboxError::UnsafePath { message: m, .. }) if m.contains("symbolic link")));
    let mut req = ws.req(&["true"]);
    req.writable = true;
    req.protect.push(PathBuf::from("no/such/file"));
    assert!(matches!(run(&req), Err(SandboxError::Path { what: "protected path", .. })));
    // Control: the real path is accepted and protected.
    let op = format!("write:{}", ws.join("src/main.rs").display());
    let res = probe_in(&ws, &[&op], |r| {
        r.writable = true;
        r.protect.push(PathBuf::from("src/main.rs"));
    });
    assert_eq!(res[&op], "EROFS");
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
fn r0030_deny_through_a_symlink_masks_its_target() {
    // Found in review: `.env -> conf/production` with --deny .env left the
    // secret readable (the walk skipped links).
    let ws = Ws::new();
    ws.write("conf/production", "API_KEY=topsecret\n");
    std::os::unix::fs::symlink("conf/production", ws.join(".env")).unwrap_or_else(|e| panic!("{e}"));
    let r = run_ok(&{
        let mut r = ws.req(&["cat", ".env"]);
        r.deny.push(".env".into());
        r
    });
    assert!(!stdout(&r).contains("topsecret"), "the secret leaked: {}", stdout(&r));
    assert!(stderr(&r).contains("Permission denied"), "{}", stderr(&r));
    // Control: without --deny the link is followed.
    let r = run_ok(&ws.req(&["cat", ".env"]));
    assert_eq!(stdout(&r), "API_KEY=topsecret\n");
}

#[test]
fn r0031_a_killed_caller_leaves_no_process_and_no_cgroup() {
    // Found in review: SIGKILL of the CLI left an empty cgroup leaf.
    let ws = Ws::new();
    let w = ws.path().display().to_string();
    let n = format!("9{}", std::process::id() % 1000);
    let marker = format!("sleep {n}");
    let mut child = cli()
        .args(["exec", "--workspace", &w, "--", "bash", "-c", &format!("{marker}1 & {marker}2; wait")])
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cli: {e}"));
    let cli_pid = child.id();
    // The sleepers themselves: argv exactly ["sleep", "<n>1"] (the CLI's own
    // argv holds the marker too, so a substring match would see the CLI).
    let alive = |suffix: &str| {
        let want = format!("sleep\0{n}{suffix}\0");
        host_cmdlines().iter().any(|c| c == want.as_bytes())
    };
    let start = std::time::Instant::now();
    while !alive("1") && start.elapsed() < std::time::Duration::from_secs(5) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(alive("1"), "control: the sandboxed sleeper never started");
    let _ = child.kill();
    let _ = child.wait();
    let start = std::time::Instant::now();
    while (alive("1") || alive("2")) && start.elapsed() < std::time::Duration::from_secs(5) {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(!alive("1") && !alive("2"), "the sandbox survived its caller");
    // The next Sandbox made sweeps leaves whose caller died.
    if let Ok(host) = sandbox().cgroup_host() {
        let leaf_prefix = format!("portcullis-{cli_pid}-");
        let start = std::time::Instant::now();
        let leaves = || -> Vec<String> {
            std::fs::read_dir(&host.parent)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&leaf_prefix))
                .collect()
        };
        while !leaves().is_empty() && start.elapsed() < std::time::Duration::from_secs(3) {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(leaves().is_empty(), "cgroup leaf left behind: {:?}", leaves());
    }
}

#[test]
fn r0032_deny_and_grant_corner_cases() {
    // Found in review: deny globs skipped grants outside the workspace,
    // overlapping patterns broke setup, and `target -> .` made
    // `--write target` a writable workspace.
    let ws = Ws::new();
    let cache = Ws::new();
    cache.write("secret", "s3cret\n");
    ws.write("secrets/a/key", "k\n");
    let secret = cache.join("secret").display().to_string();
    let key = ws.join("secrets/a/key").display().to_string();
    let ops = [format!("read:{secret}"), format!("read:{key}")];
    let res = probe_in(&ws, &ops, |r| {
        r.write.push(cache.path().to_path_buf());
        r.deny.push(format!("{}/secret", cache.path().canonicalize().unwrap_or_default().display()));
        r.deny.push("secrets".into());
        r.deny.push("key".into());
    });
    assert_eq!(res[&ops[0]], "EACCES", "a deny glob inside an outside grant must mask");
    assert!(res[&ops[1]] == "EACCES" || res[&ops[1]] == "ENOENT", "{res:?}");
    // Control: both are readable without the deny list.
    let res = probe_in(&ws, &ops, |r| r.write.push(cache.path().to_path_buf()));
    assert!(res[&ops[0]].starts_with("OK") && res[&ops[1]].starts_with("OK"), "{res:?}");

    let ws2 = Ws::new();
    std::fs::remove_dir_all(ws2.join("target")).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(".", ws2.join("target")).unwrap_or_else(|e| panic!("{e}"));
    let mut req = ws2.req(&["true"]);
    req.write.push(PathBuf::from("target"));
    assert!(matches!(run(&req), Err(SandboxError::UnsafePath { message: m, .. }) if m.contains("symbolic link")));
}

#[test]
fn r0033_landlock_only_mode_is_a_named_degradation() {
    use portcullis::sandbox::{KillMechanism, Mode};
    // Root runs it too (in a container root has no user namespaces either):
    // its command is uid 0 without capabilities (suite::container::r0070).
    let ws = Ws::new();
    if !available("landlock_only", portcullis::doctor_landlock_abi() >= 6, "landlock-only mode needs Landlock ABI 6") {
        return;
    }
    let outside = Ws::new();
    let p = |r: &str| ws.join(r).display().to_string();
    let marker = format!("sleep 6{}", std::process::id() % 1000);
    let ops = [
        format!("write:{}", p("src/main.rs")),
        format!("create:{}", p("target/out.o")),
        format!("read:{}", outside.join("README.md").display()),
        "read:/etc/hostname".to_string(),
        "connect:127.0.0.1:9".to_string(),
        "write:/dev/null".to_string(),
    ];
    let before = super::util::snapshot(&ws.join("src"));
    let res = probe_in(&ws, &ops, |r| {
        r.degraded = Some(Mode::LandlockOnly);
        r.write.push(PathBuf::from("target"));
    });
    assert_eq!(res[&ops[0]], "EACCES", "{res:?}");
    assert_eq!(res[&ops[1]], "OK");
    assert_eq!(res[&ops[2]], "EACCES", "paths outside the plan are unreadable");
    assert!(res[&ops[3]].starts_with("OK"));
    assert!(res[&ops[4]] == "EPERM" || res[&ops[4]] == "EACCES", "no network: {res:?}");
    assert_eq!(res[&ops[5]], "OK");
    assert_eq!(super::util::snapshot(&ws.join("src")), before);
    // The tree is swept: a setsid daemon does not survive.
    let mut req = ws.req(&["bash", "-c", &format!("(setsid {marker} &); echo started")]);
    req.degraded = Some(Mode::LandlockOnly);
    let r = run_ok(&req);
    assert_eq!(r.enforcement.mode, Mode::LandlockOnly);
    assert!(matches!(r.enforcement.kill_mechanism, KillMechanism::Subreaper | KillMechanism::CgroupKill));
    let alive = host_procs_containing(&marker).iter().any(|c| c.trim() == marker);
    assert!(!alive, "a daemon survived the landlock-only run");
    // Control: the same write succeeds with the workspace writable.
    let res = probe_in(&ws, &[&ops[0]], |r| {
        r.degraded = Some(Mode::LandlockOnly);
        r.writable = true;
    });
    assert_eq!(res[&ops[0]], "OK");
    // What it cannot do is refused by name.
    let mut req = ws.req(&["true"]);
    req.degraded = Some(Mode::LandlockOnly);
    req.deny.push(".env".into());
    assert!(matches!(run(&req), Err(SandboxError::Unsupported { message: m, .. }) if m.contains("mount namespace")));
    let pids_cgroup = sandbox().cgroup_host().is_ok_and(|h| h.controllers.iter().any(|c| c == "pids"));
    if !pids_cgroup {
        let mut req = ws.req(&["true"]);
        req.degraded = Some(Mode::LandlockOnly);
        req.limits.pids = Some(5);
        assert!(matches!(run(&req), Err(SandboxError::Unsupported { message: m, .. }) if m.contains("pids")));
    }

    // Found in review of this mode: the sweepers could be crippled with
    // prlimit, host unix sockets and SysV IPC were reachable, metadata of
    // any owned file could change, /dev was readable, and a fork storm
    // could outrun the sweep.
    let tag = format!("storm{}", std::process::id());
    let script = format!(
        "import os, socket, resource, ctypes, errno, time\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         def t(name, f):\n    try:\n        f(); print(name, 'OK')\n    except OSError as e:\n        print(name, errno.errorcode.get(e.errno))\n\
         pid1 = os.getppid()\n\
         t('prlimit', lambda: resource.prlimit(pid1, resource.RLIMIT_NOFILE, (0, 0)))\n\
         t('setpriority', lambda: os.setpriority(os.PRIO_PROCESS, pid1, 19))\n\
         t('kill', lambda: os.kill(pid1, 9))\n\
         t('unix', lambda: socket.socket(socket.AF_UNIX))\n\
         t('netlink', lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))\n\
         t('prio_user', lambda: os.setpriority(os.PRIO_USER, 0, 5))\n\
         t('chmod', lambda: os.chmod('{f}', 0o777))\n\
         t('utime', lambda: os.utime('{f}', (0, 0)))\n\
         def shm():\n    r = libc.shmget(0x5eed, 4096, 0o1600)\n    if r < 0: raise OSError(ctypes.get_errno(), 'shmget')\n\
         t('shmget', shm)\n\
         t('ptmx', lambda: open('/dev/ptmx', 'rb'))\n\
         def spawn():\n    for attempt in range(200):\n        try:\n            return os.fork()\n        except OSError:\n            time.sleep(0.01)\n    os._exit(1)\n\
         for i in range(20):\n    if spawn() == 0:\n        os.setsid()\n        for j in range(3):\n            if spawn() == 0:\n                os.execv('/bin/sleep', ['{tag}', '300'])\n        os._exit(0)\n\
         def count():\n    n = 0\n    for d in os.listdir('/proc'):\n        try:\n            n += open('/proc/' + d + '/cmdline', 'rb').read().startswith(b'{tag}\\0')\n        except OSError:\n            pass\n    return n\n\
         deadline = time.time() + 5\n\
         while count() == 0 and time.time() < deadline:\n    time.sleep(0.05)\n\
         print('storm', count())\n",
        f = ws.join("README.md").display(),
    );
    let mut req = ws.req(&["/usr/bin/python3", "-c", &script]);
    req.degraded = Some(Mode::LandlockOnly);
    req.timeout = Some(std::time::Duration::from_secs(20));
    let r = run_ok(&req);
    let out = stdout(&r);
    for (op, want) in [
        ("prlimit", "EPERM"),
        ("setpriority", "EPERM"),
        ("kill", "EPERM"),
        ("unix", "EPERM"),
        ("netlink", "EPERM"),
        ("prio_user", "EPERM"),
        ("chmod", "EPERM"),
        ("utime", "EPERM"),
        ("shmget", "EPERM"),
        ("ptmx", "EACCES"),
    ] {
        assert!(out.contains(&format!("{op} {want}")), "{op}: expected {want}: {out} {}", stderr(&r));
    }
    let storm: usize =
        out.lines().find_map(|l| l.strip_prefix("storm ")).and_then(|n| n.trim().parse().ok()).unwrap_or(0);
    assert!(storm > 0, "control: the fork storm never started: {out} {}", stderr(&r));
    let survivors = host_procs_containing(&tag).len();
    assert_eq!(survivors, 0, "the fork storm outlived the run");
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

#[test]
fn r0035_masks_stay_put_and_globs_through_links_are_refused() {
    // Found in the last review: renaming a masked file's parent carried the
    // mask away for the next run; globs spelled through a symlink matched
    // nothing, silently.
    let ws = Ws::new();
    ws.write("config/.env", "SECRET\n");
    let mut req = ws.req(&["sh", "-c", "mv config config2; echo rc=$?"]);
    req.writable = true;
    req.deny.push("config/.env".into());
    let r = run_ok(&req);
    assert!(stdout(&r).contains("rc=1"), "renaming a masked file's parent must fail: {} {}", stdout(&r), stderr(&r));
    assert!(ws.join("config/.env").exists() && !ws.join("config2").exists());
    // Control: without the mask the rename works.
    let r = run_ok(&{
        let mut q = ws.req(&["sh", "-c", "mv config config2 && mv config2 config && echo rc=0"]);
        q.writable = true;
        q
    });
    assert!(stdout(&r).contains("rc=0"), "{}", stderr(&r));

    std::os::unix::fs::symlink(ws.join("config"), ws.join("cfglink")).unwrap_or_else(|e| panic!("{e}"));
    for glob in ["cfglink/.env".to_string(), format!("{}/*", ws.join("cfglink").display())] {
        let mut req = ws.req(&["true"]);
        req.deny.push(glob.clone());
        assert!(matches!(run(&req), Err(SandboxError::Glob { .. })), "{glob} through a link must be refused");
    }
}

#[test]
fn r0036_piped_and_redirected_input_is_not_consumed() {
    // Found in the last review: the stdin copy thread read the caller's
    // input ahead; a `while read` loop around portcullis lost its lines.
    let ws = Ws::new();
    ws.write("lines", "1\n2\n3\n4\n5\n");
    let w = ws.path().display().to_string();
    let bin = bin_dir().join("portcullis");
    let script = format!(
        "n=0; while read l; do n=$((n+1)); {} exec --workspace {w} -- true; done < {w}/lines; echo $n",
        bin.display()
    );
    let out = std::process::Command::new("sh").args(["-c", &script]).output().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "5", "{}", String::from_utf8_lossy(&out.stderr));
    // Control: the command still receives the input when it reads it.
    let script = format!("{} exec --workspace {w} -- wc -l < {w}/lines", bin.display());
    let out = std::process::Command::new("sh").args(["-c", &script]).output().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "5");
}

/// Regression: a grant of the host's `/tmp` bound the half-built root
/// tmpfs along with it (the root was attached at `/tmp` while it was
/// built), so writes to `/tmp` never reached the host.
#[test]
fn r0037_a_grant_of_host_tmp_reaches_the_host() {
    let ws = Ws::new();
    let name = format!("pc-r0037-{}-{}", std::process::id(), nix::unistd::getuid());
    let host = PathBuf::from("/tmp").join(&name);
    let _ = std::fs::remove_file(&host);
    let line = format!("echo granted > /tmp/{name} && grep -c ' /tmp ' /proc/self/mountinfo");
    // Control: without the grant the write lands in the private /tmp only.
    let r = run_ok(&ws.req(&["sh", "-c", &line]));
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    assert!(!host.exists(), "the private /tmp is not the host's");
    let mut req = ws.req(&["sh", "-c", &line]);
    req.write.push(PathBuf::from("/tmp"));
    let r = run_ok(&req);
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    assert_eq!(stdout(&r).trim(), "1", "exactly one mount at /tmp: the host's");
    assert_eq!(std::fs::read_to_string(&host).unwrap_or_default(), "granted\n");
    let _ = std::fs::remove_file(&host);
}

#[test]
fn r0038_null_stdin_is_the_null_device_and_other_devices_still_go_through_a_pipe() {
    // Speed: a stdin that is /dev/null (what an agent's tool call usually
    // gives) needs no feeding thread; the command gets /dev/null of its own.
    let ws = Ws::new();
    let w = ws.path().display().to_string();
    let code = "import os, stat\n\
                st = os.fstat(0)\n\
                print(stat.S_ISCHR(st.st_mode), os.major(st.st_rdev), os.minor(st.st_rdev), stat.S_ISFIFO(st.st_mode))\n\
                print(os.read(0, 10))\n";
    let run = |stdin: std::fs::File| {
        let out = cli()
            .args(["exec", "--workspace", &w, "--", "/usr/bin/python3", "-c", code])
            .stdin(stdin)
            .output()
            .unwrap_or_else(|e| panic!("cli: {e}"));
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    };
    let null = std::fs::File::open("/dev/null").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run(null), "True 1 3 False\nb''\n");
    // Control: another device (/dev/zero) is not handed on but copied
    // through a pipe, as before.
    let zero = std::fs::File::open("/dev/zero").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run(zero), "False 0 0 True\nb'\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00'\n");
}

/// Regression (review): a policy file reached through a symbolic link in a
/// writable workspace had only its target protected; the command replaced
/// the link and the next run read the command's own policy.
#[test]
fn r0039_a_policy_reached_through_a_link_in_a_writable_area_is_refused() {
    let ws = Ws::new();
    ws.write("conf/real.toml", "[shell]\n");
    std::os::unix::fs::symlink("conf/real.toml", ws.join("policy.toml")).unwrap_or_else(|e| panic!("{e}"));
    let mut req = ws.req(&["true"]);
    req.writable = true;
    req.policy_file = Some(ws.join("policy.toml"));
    match run(&req) {
        Err(SandboxError::UnsafePath { message: m, .. }) => assert!(m.contains("symbolic link"), "{m}"),
        other => panic!("a policy behind a replaceable link must be refused, got {other:?}"),
    }
    // Control: its real path is protected, and the link itself stays put in
    // a read-only run.
    let mut req = ws.req(&["sh", "-c", "echo x >> conf/real.toml; echo rc=$?"]);
    req.writable = true;
    req.policy_file = Some(ws.join("conf/real.toml"));
    let r = run_ok(&req);
    assert!(!stdout(&r).contains("rc=0") && stderr(&r).contains("Read-only file system"), "{}", stderr(&r));
    let mut req = ws.req(&["true"]);
    req.policy_file = Some(ws.join("policy.toml"));
    assert_eq!(run_ok(&req).outcome.code(), Some(0), "read-only: nothing can replace the link");
    assert_eq!(ws.read("conf/real.toml"), "[shell]\n");
}

/// Regression (review): with the host's /tmp granted, a policy file there
/// was not protected (the /tmp grant was left out of the writable areas).
#[test]
fn r0040_a_policy_in_a_granted_host_tmp_stays_read_only() {
    use std::os::unix::fs::PermissionsExt;
    let ws = Ws::new();
    let dir = tempfile::Builder::new().prefix("pc-r0040-").tempdir_in("/tmp").unwrap_or_else(|e| panic!("{e}"));
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap_or_else(|e| panic!("{e}"));
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "[shell]\n").unwrap_or_else(|e| panic!("{e}"));
    std::fs::set_permissions(&policy, std::fs::Permissions::from_mode(0o666)).unwrap_or_else(|e| panic!("{e}"));
    let line = format!("echo evil >> {} ; echo rc=$?", policy.display());
    // Control: without naming it as the policy, the grant lets the write in.
    let mut req = ws.req(&["sh", "-c", &line]);
    req.write.push(PathBuf::from("/tmp"));
    let r = run_ok(&req);
    assert!(stdout(&r).contains("rc=0"), "{}", stderr(&r));
    std::fs::write(&policy, "[shell]\n").unwrap_or_else(|e| panic!("{e}"));
    let mut req = ws.req(&["sh", "-c", &line]);
    req.write.push(PathBuf::from("/tmp"));
    req.policy_file = Some(policy.clone());
    let r = run_ok(&req);
    assert!(!stdout(&r).contains("rc=0") && stderr(&r).contains("Read-only file system"), "{}", stderr(&r));
    assert_eq!(std::fs::read_to_string(&policy).unwrap_or_default(), "[shell]\n");
}

/// Regression (review): a workspace, readable root or grant reached through
/// a symbolic link that sits in a write grant could be re-pointed by a
/// writable run, and the next run would mount another tree. Such a run is
/// refused; the same paths spelled without the link work.
#[test]
fn r0041_paths_through_a_link_in_a_write_grant_are_refused() {
    let base = tempfile::Builder::new().prefix("pc-r0041-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("{e}"));
    let b = base.path();
    for d in ["ws/src", "agents", "tools/bin"] {
        std::fs::create_dir_all(b.join(d)).unwrap_or_else(|e| panic!("{e}"));
    }
    std::os::unix::fs::symlink(b.join("ws"), b.join("agents/current")).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(b.join("tools/bin"), b.join("agents/bin")).unwrap_or_else(|e| panic!("{e}"));
    let mut req = ExecRequest::new(b.join("agents/current"), ["true"]);
    req.write.push(b.join("agents"));
    match run(&req) {
        Err(SandboxError::UnsafePath { message: m, .. }) => {
            assert!(m.contains("workspace") && m.contains("symbolic link"), "{m}")
        }
        other => panic!("a workspace behind a replaceable link must be refused, got {other:?}"),
    }
    let mut req = ExecRequest::new(b.join("ws"), ["true"]);
    req.write.push(b.join("agents"));
    req.read.push(b.join("agents/bin"));
    assert!(matches!(run(&req), Err(SandboxError::UnsafePath { message: m, .. }) if m.contains("readable root")));
    // Control: the real paths run, and a read-only run may follow the link.
    let mut req = ExecRequest::new(b.join("ws"), ["true"]);
    req.write.push(b.join("agents"));
    req.read.push(b.join("tools/bin"));
    assert_eq!(run_ok(&req).outcome.code(), Some(0));
    assert_eq!(run_ok(&ExecRequest::new(b.join("agents/current"), ["true"])).outcome.code(), Some(0));
}

/// Regression (review): the policy-file check removed `..` by spelling, so
/// `cfglink/../policy.toml` (resolved by the kernel through the link) was
/// not seen as going through the replaceable link `cfglink`.
#[test]
fn r0042_a_policy_path_with_dotdot_after_a_link_is_refused() {
    let ws = Ws::new();
    let elsewhere =
        tempfile::Builder::new().prefix("pc-r0042-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("{e}"));
    std::fs::create_dir_all(elsewhere.path().join("cfg")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(elsewhere.path().join("policy.toml"), "[shell]\n").unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(elsewhere.path().join("cfg"), ws.join("cfglink")).unwrap_or_else(|e| panic!("{e}"));
    let mut req = ws.req(&["true"]);
    req.writable = true;
    req.policy_file = Some(ws.join("cfglink/../policy.toml"));
    assert!(matches!(run(&req), Err(SandboxError::UnsafePath { message: m, .. }) if m.contains("cfglink")));
    // Control: its real path is fine.
    req.policy_file = Some(elsewhere.path().join("policy.toml"));
    assert_eq!(run_ok(&req).outcome.code(), Some(0));
}

/// Regression (review): in a granted host /tmp the parents of protected
/// paths were not pinned, so `mv` of the directory carried the protected
/// policy file away and the next run read a new one.
#[test]
fn r0043_parents_of_protected_paths_in_a_granted_host_tmp_are_pinned() {
    use std::os::unix::fs::PermissionsExt;
    let ws = Ws::new();
    let dir = tempfile::Builder::new().prefix("pc-r0043-").tempdir_in("/tmp").unwrap_or_else(|e| panic!("{e}"));
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap_or_else(|e| panic!("{e}"));
    let agent = dir.path().join("agent");
    std::fs::create_dir(&agent).unwrap_or_else(|e| panic!("{e}"));
    std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o777)).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(agent.join("policy.toml"), "[shell]\n").unwrap_or_else(|e| panic!("{e}"));
    let line = format!("mv {} {}.old; echo rc=$?", agent.display(), agent.display());
    let mut req = ws.req(&["sh", "-c", &line]);
    req.write.push(PathBuf::from("/tmp"));
    req.policy_file = Some(agent.join("policy.toml"));
    let r = run_ok(&req);
    assert!(!stdout(&r).contains("rc=0") && stderr(&r).contains("busy"), "{} {}", stdout(&r), stderr(&r));
    assert!(agent.join("policy.toml").exists());
    // Control: without a protected path inside, the same mv works.
    let mut req = ws.req(&["sh", "-c", &line]);
    req.write.push(PathBuf::from("/tmp"));
    let r = run_ok(&req);
    assert!(stdout(&r).contains("rc=0"), "{}", stderr(&r));
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

/// Regression (review): a deny glob matching a symbolic link masked its
/// target, but a writable run could re-point the link and the next run
/// masked something else. A writable run with such a link is refused.
#[test]
fn r0045_a_denied_link_in_a_writable_area_refuses_the_run() {
    let ws = Ws::new();
    ws.write("conf/production", "SECRET\n");
    std::os::unix::fs::symlink("conf/production", ws.join(".env")).unwrap_or_else(|e| panic!("{e}"));
    let mut req = ws.req(&["true"]);
    req.deny.push(".env".into());
    req.writable = true;
    assert!(matches!(run(&req), Err(SandboxError::UnsafePath { message: m, .. }) if m.contains(".env")));
    // Control: read-only, the target is masked.
    let mut req = ws.req(&["cat", "conf/production"]);
    req.deny.push(".env".into());
    let r = run_ok(&req);
    assert!(r.outcome.code() != Some(0) && stderr(&r).contains("Permission denied"), "{}", stderr(&r));
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

/// Regression (review): two writable runs on one workspace at once let the
/// second re-plant a git name the first one's guard removed (its plan saw
/// the first run's hook as the user's). Writable runs of one workspace now
/// go one at a time; read-only runs do not wait.
#[test]
fn r0052_writable_runs_of_one_workspace_go_one_at_a_time() {
    let ws = Ws::new();
    let bin = bin_dir().join("portcullis");
    let w = ws.path().display().to_string();
    let first = std::process::Command::new(&bin)
        .args(["exec", "--workspace", &w, "--writable", "--", "sh", "-c", "touch started; sleep 1; touch first-done"])
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !ws.join("started").exists() {
        assert!(std::time::Instant::now() < deadline, "the first run never started");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // Control: a read-only run does not wait for the writable one.
    let r = run_ok(&ws.req(&["sh", "-c", "test -e first-done && echo after || echo during"]));
    assert_eq!(stdout(&r).trim(), "during");
    let mut req = ws.req(&["sh", "-c", "test -e first-done && echo after || echo during"]);
    req.writable = true;
    let r = run_ok(&req);
    assert_eq!(stdout(&r).trim(), "after", "a second writable run waits for the first");
    let mut first = first;
    assert!(first.wait().is_ok_and(|s| s.success()));
}
