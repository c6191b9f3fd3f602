//! `--deny` masks: denied paths are unreadable (through a link too, in host
//! directories and in grants outside the workspace), the masks stay put, and
//! globs or links that would make a mask miss refuse the run.
//!
//! Every attempt is real, each has a control that shows the same attempt
//! works with the restriction off, and each pins the errno or the typed
//! refusal.

use std::path::PathBuf;

use portcullis::SandboxError;

use super::util::*;

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
