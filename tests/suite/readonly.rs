//! The read-only workspace and host: every kind of write is refused (the
//! mount with EROFS, Landlock behind it with EACCES), neither layer can be
//! undone from inside, and host directories stay read-only or unseen.
//!
//! Every attempt is real, each has a control that shows the same attempt
//! works with the restriction off, and each pins the errno or the typed
//! refusal.

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

/// Truncation, per mode. `truncate(2)` and `open(O_RDONLY | O_TRUNC)` (and
/// access mode 3 with `O_TRUNC`) ask for no write access mode, so
/// Landlock's `WriteFile` right never sees them; only its `Truncate` right
/// would, and handling that right makes every `open`, reads included, walk
/// from the file to the root (a third of `grep -rn`'s time:
/// docs/sandbox.md, "Landlock"). So the full sandbox leaves truncation to
/// the read-only mounts, and seccomp refuses the opens that truncate
/// without write access, everywhere (`EACCES`): each open has two barriers,
/// `truncate(2)` by path has the mount. The landlock-only mode, where
/// Landlock is the only barrier, handles `Truncate`.
#[test]
fn r0780_truncation_is_refused_by_the_mounts_and_truncating_opens_by_seccomp() {
    if !available("landlock_truncate", portcullis::doctor_landlock_abi() >= 3, "no Landlock Truncate right (ABI 3)") {
        return;
    }
    let ws = Ws::new();
    let (trunc, otrunc, otrunc3) = (
        format!("truncate:{}", ws.join("src/lib.rs").display()),
        format!("otrunc:{}", ws.join("src/main.rs").display()),
        format!("otrunc3:{}", ws.join("README.md").display()),
    );
    let ops = [&trunc, &otrunc, &otrunc3];
    let before = ws.snapshot();
    // The full sandbox: the mount refuses truncate(2), seccomp the opens.
    let res = probe_in(&ws, &ops, |_| {});
    assert_eq!(res[&trunc], "EROFS", "{res:?}");
    assert_eq!((res[&otrunc].as_str(), res[&otrunc3].as_str()), ("EACCES", "EACCES"), "{res:?}");
    // Landlock off changes nothing: it has no part in truncation here.
    let res = probe_in(&ws, &ops, |r| r.test_switches.skip_landlock = true);
    assert_eq!(res[&trunc], "EROFS", "{res:?}");
    assert_eq!((res[&otrunc].as_str(), res[&otrunc3].as_str()), ("EACCES", "EACCES"), "{res:?}");
    // The mounts broken on purpose: seccomp alone refuses the opens.
    let res = probe_in(&ws, &[&otrunc, &otrunc3], |r| r.test_switches.skip_readonly = true);
    assert_eq!((res[&otrunc].as_str(), res[&otrunc3].as_str()), ("EACCES", "EACCES"), "{res:?}");
    // Seccomp off: the mount alone refuses them.
    let res = probe_in(&ws, &[&otrunc, &otrunc3], |r| r.test_switches.skip_seccomp = true);
    assert_eq!((res[&otrunc].as_str(), res[&otrunc3].as_str()), ("EROFS", "EROFS"), "{res:?}");
    assert_eq!(ws.snapshot(), before, "a truncation landed");
    // The landlock-only mode handles Truncate: Landlock refuses all three.
    let res = probe_in(&ws, &[&trunc], |r| r.degraded = Some(portcullis::sandbox::Mode::LandlockOnly));
    assert_eq!(res[&trunc], "EACCES", "landlock-only: {res:?}");
    assert_eq!(ws.snapshot(), before, "a truncation landed");
    // Controls: with the mounts and seccomp broken both opens land, and with
    // the mounts broken truncate(2) does (the full mode's one barrier for
    // it: pinned, so that the docs stay true). Seen from outside.
    let res = probe_in(&ws, &[&otrunc, &otrunc3], |r| {
        r.test_switches.skip_readonly = true;
        r.test_switches.skip_seccomp = true;
    });
    assert_eq!((res[&otrunc].as_str(), res[&otrunc3].as_str()), ("OK", "OK"), "control: {res:?}");
    let res = probe_in(&ws, &[&trunc], |r| r.test_switches.skip_readonly = true);
    assert_eq!(res[&trunc], "OK", "control: {res:?}");
    assert_eq!(ws.read("src/lib.rs"), "");
    assert_eq!(ws.read("src/main.rs"), "");
    assert_eq!(ws.read("README.md"), "");
}

/// Where writing is allowed, only the opens that truncate without write
/// access are refused (`EACCES`, POSIX leaves their result undefined);
/// `truncate(2)`, `ftruncate` and `open(O_WRONLY | O_TRUNC)` work.
#[test]
fn r0781_in_a_write_grant_only_truncating_opens_without_write_access_are_refused() {
    let ws = Ws::new();
    ws.write("src/x.txt", "x\n");
    let file = |f: &str| ws.join(f).display().to_string();
    let ops = [
        format!("otrunc:{}", file("src/main.rs")),
        format!("otrunc3:{}", file("src/x.txt")),
        format!("truncate:{}", file("src/lib.rs")),
    ];
    let res = probe_in(&ws, &ops, |r| r.write.push(ws.join("src")));
    assert_eq!(res[&ops[0]], "EACCES", "{res:?}");
    assert_eq!(res[&ops[1]], "EACCES", "{res:?}");
    assert_eq!(res[&ops[2]], "OK", "truncate(2) in the grant: {res:?}");
    assert_eq!(ws.read("src/main.rs"), "fn main() { println!(\"hi\"); }\n");
    assert_eq!(ws.read("src/x.txt"), "x\n");
    assert_eq!(ws.read("src/lib.rs"), "");
    // Control: the same open with write access truncates.
    let w = format!("write:{}", file("src/main.rs"));
    assert_eq!(probe_in(&ws, &[&w], |r| r.write.push(ws.join("src")))[&w], "OK");
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
