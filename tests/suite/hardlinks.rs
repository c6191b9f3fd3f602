//! Hard links across the grant boundary (issue 7, item 1).
//!
//! The mounts and Landlock judge a write by its path; a hard link gives one
//! file a path in a writable area and another in a read-only area or outside
//! the plan. Each test plants the link for real (from a writable sandbox run,
//! or on the host as a package manager would), attempts the write through the
//! writable name in a real sandbox, pins the errno, and checks the other
//! name's hash from outside. The controls show the same write landing where
//! the file has no other name.

use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use portcullis::sandbox::Mode;
use portcullis::SandboxError;
use sha2::{Digest, Sha256};

use super::util::{available, cli, is_root, probe_in, run, run_ok, sandbox, stderr, Ws};

fn sha(p: &Path) -> String {
    let data = fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    Sha256::digest(&data).iter().map(|b| format!("{b:02x}")).collect()
}

fn nlink(p: &Path) -> u64 {
    fs::symlink_metadata(p).map(|m| m.nlink()).unwrap_or_else(|e| panic!("stat {}: {e}", p.display()))
}

/// A package store outside the workspace (pnpm's, say): the store, its
/// `index.js` and that file's hash.
fn package_store() -> (Ws, PathBuf, String) {
    let store = Ws::new();
    store.write("store/pkg/index.js", "module.exports = 1;\n");
    let stored = store.join("store/pkg/index.js");
    let before = sha(&stored);
    (store, stored, before)
}

fn real(p: &Path) -> PathBuf {
    fs::canonicalize(p).unwrap_or_else(|e| panic!("canonicalize {}: {e}", p.display()))
}

#[test]
fn r0053_a_link_planted_by_a_writable_run_does_not_open_the_read_only_source() {
    let ws = Ws::new();
    let src = ws.join("src/main.rs");
    let planted = ws.join("target/libdep.rlib");
    let plain = ws.join("target/plain.rlib");
    ws.write("target/plain.rlib", "artifact\n");
    let before = sha(&src);

    // The plant: a --writable run links the source into build output (git
    // would show nothing; target/ is ignored).
    let mut req = ws.req(&["ln", "src/main.rs", "target/libdep.rlib"]);
    req.writable = true;
    let r = run_ok(&req);
    assert_eq!(r.outcome.code(), Some(0), "the plant itself must work: {}", stderr(&r));
    assert_eq!(nlink(&src), 2, "src/main.rs now has a second name in target/");

    // The plan names it and binds it read-only.
    let mut req = ws.req(&["true"]);
    req.write.push("target".into());
    let plan = sandbox().plan(&req).unwrap_or_else(|e| panic!("plan: {e}"));
    assert_eq!(plan.hard_linked, vec![real(&planted)]);
    assert!(plan.landlock_gaps.contains(&real(&planted)), "only the mount guards it: reported as a Landlock gap");
    let out = cli()
        .args(["exec", "--explain", "--workspace"])
        .arg(ws.path())
        .args(["--write", "target", "--", "true"])
        .output()
        .unwrap_or_else(|e| panic!("cli: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("hard-linked: {}", real(&planted).display()))
            && text.contains(&format!("read-only {}", real(&planted).display())),
        "{text}"
    );

    // The attack: a --write target run, whose src/ is read-only, writes the
    // planted name. Control in the same run: a build artifact with one link
    // is written as usual.
    let p = |f: &Path| f.display().to_string();
    let ops = [
        format!("write:{}", p(&plain)),
        format!("write:{}", p(&planted)),
        format!("append:{}", p(&planted)),
        format!("truncate:{}", p(&planted)),
        format!("chmod:{}", p(&planted)),
        format!("unlink:{}", p(&planted)),
        format!("rename:{}:{}", p(&planted), p(&ws.join("target/moved"))),
    ];
    let res = probe_in(&ws, &ops, |r| r.write.push("target".into()));
    assert_eq!(res[&ops[0]], "OK", "control: a file with one link in the grant is writable: {res:?}");
    assert_eq!(fs::read_to_string(&plain).unwrap_or_default(), "pwned\n", "control: the write landed");
    for op in &ops[1..5] {
        assert_eq!(res[op], "EROFS", "{op}: {res:?}");
    }
    for op in &ops[5..] {
        assert_eq!(res[op], "EBUSY", "{op}: the read-only name is a mount point: {res:?}");
    }
    assert_eq!(sha(&src), before, "src/main.rs is unchanged, checked from outside");
    assert_eq!(nlink(&src), 2);

    // The landlock-only mode has no mounts: the same run is refused by name.
    if is_root() {
        eprintln!("r0053: the landlock-only refusal is exercised in the unprivileged pass (running as root)");
        return;
    }
    if !available("r0053", portcullis::doctor_landlock_abi() >= 6, "landlock-only mode needs Landlock ABI 6") {
        return;
    }
    let marker = ws.join("target/ran");
    let mut req = ws.req(&["sh", "-c", &format!("echo x > {}", p(&marker))]);
    req.write.push("target".into());
    req.degraded = Some(Mode::LandlockOnly);
    let e = run(&req).map(|r| r.outcome.code());
    assert!(
        matches!(&e, Err(SandboxError::Unsupported { message: m, .. }) if m.contains("landlock-only mode cannot keep hard-linked files")
            && m.contains(&p(&real(&planted)))),
        "{e:?}"
    );
    assert!(!marker.exists(), "nothing ran");
    // Control: once the link is gone the same landlock-only run works.
    fs::remove_file(&planted).unwrap_or_else(|e| panic!("rm: {e}"));
    let r = run_ok(&req);
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    assert!(marker.exists());
}

#[test]
fn r0054_a_link_from_outside_the_workspace_is_kept_read_only() {
    // A package store outside the workspace, hard-linked into it as pnpm
    // (or cp -al) does.
    let ws = Ws::new();
    let (_store, stored, before) = package_store();
    fs::create_dir_all(ws.join("node_modules/pkg")).unwrap_or_else(|e| panic!("mkdir: {e}"));
    let linked = ws.join("node_modules/pkg/index.js");
    fs::hard_link(&stored, &linked).unwrap_or_else(|e| panic!("ln: {e}"));
    ws.write("node_modules/pkg/own.js", "own\n");
    let own = ws.join("node_modules/pkg/own.js");

    let p = |f: &Path| f.display().to_string();
    let ops = [format!("write:{}", p(&own)), format!("write:{}", p(&linked)), format!("chmod:{}", p(&linked))];
    // Both a grant and the whole writable workspace.
    for writable in [false, true] {
        let tweak = |r: &mut portcullis::ExecRequest| {
            if writable {
                r.writable = true;
            } else {
                r.write.push("node_modules".into());
            }
        };
        let mut req = ws.req(&["true"]);
        tweak(&mut req);
        let plan = sandbox().plan(&req).unwrap_or_else(|e| panic!("plan: {e}"));
        assert_eq!(plan.hard_linked, vec![real(&linked)], "writable={writable}");
        ws.write("node_modules/pkg/own.js", "own\n");
        let res = probe_in(&ws, &ops, tweak);
        assert_eq!(res[&ops[0]], "OK", "control: the package's own file is writable: {res:?}");
        assert_eq!(fs::read_to_string(&own).unwrap_or_default(), "pwned\n");
        assert_eq!(res[&ops[1]], "EROFS", "writable={writable}: {res:?}");
        assert_eq!(res[&ops[2]], "EROFS", "writable={writable}: {res:?}");
        assert_eq!(sha(&stored), before, "the store's file is unchanged, checked from outside");
    }
    // Control: a copy (one link) in the same place is written.
    fs::remove_file(&linked).unwrap_or_else(|e| panic!("rm: {e}"));
    fs::copy(&stored, &linked).unwrap_or_else(|e| panic!("cp: {e}"));
    let res = probe_in(&ws, &ops[1..2], |r| r.write.push("node_modules".into()));
    assert_eq!(res[&ops[1]], "OK", "{res:?}");
    assert_eq!(fs::read_to_string(&linked).unwrap_or_default(), "pwned\n");
    assert_eq!(sha(&stored), before);

    // Too many such files to bind one by one: refused, naming some and what
    // to do, before anything runs.
    for i in 0..=100 {
        fs::hard_link(&stored, ws.join(&format!("node_modules/pkg/l{i}.js"))).unwrap_or_else(|e| panic!("ln: {e}"));
    }
    let marker = ws.join("node_modules/ran");
    let mut req = ws.req(&["sh", "-c", &format!("echo x > {}", p(&marker))]);
    req.write.push("node_modules".into());
    let e = run(&req).map(|r| r.outcome.code());
    assert!(
        matches!(&e, Err(SandboxError::LimitExceeded { message: m, .. }) if m.starts_with("101 names") && m.contains("l0.js")
            && m.contains("package-import-method=copy")),
        "{e:?}"
    );
    assert!(!marker.exists(), "nothing ran");
}

#[test]
fn r0055_cargo_links_within_target_keep_working() {
    // cargo hard-links target/debug/foo to target/debug/deps/foo-HASH and
    // replaces it by unlink and link; both names are in the grant.
    let ws = Ws::new();
    ws.write("target/debug/deps/foo-0123abcd", "old binary\n");
    ws.write("target/debug/deps/libbar-4567.rlib", "old rlib\n");
    fs::hard_link(ws.join("target/debug/deps/foo-0123abcd"), ws.join("target/debug/foo"))
        .unwrap_or_else(|e| panic!("ln: {e}"));
    fs::hard_link(ws.join("target/debug/deps/libbar-4567.rlib"), ws.join("target/debug/libbar.rlib"))
        .unwrap_or_else(|e| panic!("ln: {e}"));
    let mut req = ws.req(&["true"]);
    req.write.push("target".into());
    let plan = sandbox().plan(&req).unwrap_or_else(|e| panic!("plan: {e}"));
    assert!(plan.hard_linked.is_empty(), "links within the grant need no carve-out: {:?}", plan.hard_linked);

    let script = "set -e; cd target/debug
        printf 'new binary\\n' > deps/foo-0123abcd.tmp && mv deps/foo-0123abcd.tmp deps/foo-0123abcd
        rm -f foo && ln deps/foo-0123abcd foo
        printf 'new rlib\\n' > libbar.rlib
        echo done";
    let mut req = ws.req(&["sh", "-c", script]);
    req.write.push("target".into());
    let r = run_ok(&req);
    assert_eq!((r.outcome.code(), super::util::stdout(&r).trim()), (Some(0), "done"), "{}", stderr(&r));
    assert_eq!(ws.read("target/debug/foo"), "new binary\n");
    assert_eq!(nlink(&ws.join("target/debug/foo")), 2);
    assert_eq!(ws.read("target/debug/deps/libbar-4567.rlib"), "new rlib\n", "written in place through either name");
    // The replacement keeps the next plan free of carve-outs too.
    let mut req = ws.req(&["true"]);
    req.write.push("target".into());
    let plan = sandbox().plan(&req).unwrap_or_else(|e| panic!("plan: {e}"));
    assert!(plan.hard_linked.is_empty(), "{:?}", plan.hard_linked);
}

/// A tree big enough that the walk is shared among threads (over a
/// thousand entries; this machine has two CPUs): a link from a store
/// outside the workspace, in a directory listed late, and a setuid program
/// in another, are still found and kept read-only for the writable run,
/// checked from outside; the control is a file of the same tree with one
/// link, written as usual.
#[test]
fn r0889_a_link_deep_in_a_big_tree_is_kept_read_only() {
    use std::os::unix::fs::PermissionsExt;
    let ws = Ws::new();
    let (_store, stored, before) = package_store();
    for d in 0..150 {
        let dir = ws.join(&format!("node_modules/p{}/d{d}", d % 9));
        fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("mkdir: {e}"));
        for f in 0..20 {
            fs::write(dir.join(format!("f{f}.js")), "x\n").unwrap_or_else(|e| panic!("write: {e}"));
        }
    }
    let linked = ws.join("node_modules/p8/d143/index.js");
    fs::hard_link(&stored, &linked).unwrap_or_else(|e| panic!("ln: {e}"));
    let setuid = ws.join("node_modules/p1/d100/f3.js");
    fs::set_permissions(&setuid, fs::Permissions::from_mode(0o4755)).unwrap_or_else(|e| panic!("chmod: {e}"));
    let own = ws.join("node_modules/p4/d13/f7.js");

    let mut req = ws.req(&["true"]);
    req.writable = true;
    let plan = sandbox().plan(&req).unwrap_or_else(|e| panic!("plan: {e}"));
    assert_eq!(plan.hard_linked, vec![real(&linked)]);
    assert_eq!(plan.privileged, vec![real(&setuid)]);
    let p = |f: &Path| f.display().to_string();
    let ops = [format!("write:{}", p(&own)), format!("write:{}", p(&linked)), format!("write:{}", p(&setuid))];
    let res = probe_in(&ws, &ops, |r| r.writable = true);
    assert_eq!(res[&ops[0]], "OK", "control: a file with one link is writable: {res:?}");
    assert_eq!(fs::read_to_string(&own).unwrap_or_default(), "pwned\n");
    assert_eq!(res[&ops[1]], "EROFS", "{res:?}");
    assert_eq!(res[&ops[2]], "EROFS", "{res:?}");
    assert_eq!(sha(&stored), before, "the store's file is unchanged, checked from outside");
    assert_eq!(fs::metadata(&setuid).map(|m| m.permissions().mode() & 0o7777).unwrap_or(0), 0o4755);
}

/// Writable runs beside a host process that keeps changing the writable
/// area (git's `tmp_obj_*`, an editor's temporary file, a build's output
/// directories): a name the walk kept read-only and that is gone before
/// the sandbox's mount, a file removed between its `fstatat` and its
/// capability lookup, a directory removed while it is listed. Each failed
/// the run as a setup fault ("tell the user": 8 of 200 runs in session
/// 29's review) though nothing was left to protect. Now every run starts.
/// CONTROL: the churn ran all along (links made and directories removed
/// while the runs went on).
#[test]
fn r0893_writable_runs_beside_a_churning_tree_all_start() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let ws = Ws::new();
    ws.write("target/.keep", "");
    let stop = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicUsize::new(0));
    let churn = {
        let (target, stop, rounds) = (ws.join("target"), Arc::clone(&stop), Arc::clone(&rounds));
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let (t, f, d) = (target.join("t"), target.join("f"), target.join("d"));
                let _ = fs::write(&t, "x");
                let _ = fs::hard_link(&t, &f);
                let _ = fs::remove_file(&t);
                let _ = fs::remove_file(&f);
                for i in 0..8 {
                    let _ = fs::create_dir_all(d.join(i.to_string()));
                    let _ = fs::write(d.join(i.to_string()).join("x"), "x");
                }
                let _ = fs::remove_dir_all(&d);
                rounds.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let mut req = ws.req(&["true"]);
    req.writable = true;
    let mut failures = Vec::new();
    for _ in 0..150 {
        match run(&req) {
            Ok(r) if r.outcome.code() == Some(0) => {}
            Ok(r) => failures.push(format!("{:?}: {}", r.outcome, stderr(&r))),
            Err(e) => failures.push(portcullis::error_chain(&e)),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = churn.join();
    assert!(failures.is_empty(), "{} of 150 runs failed: {:?}", failures.len(), &failures[..failures.len().min(3)]);
    assert!(
        rounds.load(Ordering::Relaxed) > 150,
        "control: the tree hardly changed ({} rounds)",
        rounds.load(Ordering::Relaxed)
    );
}
