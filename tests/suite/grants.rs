//! Write grants and what stays protected inside writable areas: a grant lets
//! writes land where it says and nowhere else (no link, rename or setuid bit
//! carries them further), and protected paths and the policy file stay
//! read-only, the run refused where a link would let a later run be steered.
//!
//! Every attempt is real, each has a control that shows the same attempt
//! works with the restriction off, and each pins the errno or the typed
//! refusal.

use std::path::PathBuf;

use portcullis::sandbox::ExecRequest;
use portcullis::SandboxError;

use super::util::*;

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

/// Regression: a grant of the host's `/tmp` bound the half-built root
/// tmpfs along with it (the root was attached at `/tmp` while it was
/// built), so writes to `/tmp` never reached the host.
#[test]
fn r0037_a_grant_of_host_tmp_reaches_the_host() {
    if !real_host_tmp("r0037") {
        return;
    }
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
    if !clean_host_tmp("r0040") {
        return;
    }
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
    if !clean_host_tmp("r0043") {
        return;
    }
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
