//! Issue 8, items 2 and 3: a root caller's readable roots are readable; in
//! grants the most specific rule wins.
//!
//! Each test runs a real sandbox and checks from the host (hashes, the
//! owner of a file the command made, files that landed or did not), with a
//! control and the errno or typed refusal pinned.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use portcullis::SandboxError;
use sha2::{Digest, Sha256};

use super::util::{
    clean_host_tmp, cli, in_root_pass, is_root, run, run_ok, sandbox, skipped, stderr, stdout, test_root, Ws,
};

fn sha(p: &Path) -> String {
    let data = fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    Sha256::digest(&data).iter().map(|b| format!("{b:02x}")).collect()
}

fn chmod(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
}

fn real(p: &Path) -> PathBuf {
    fs::canonicalize(p).unwrap_or_else(|e| panic!("canonicalize {}: {e}", p.display()))
}

/// A python3 one-liner per operation, printing `name OK` or `name ERRNO`.
const OPS: &str = r#"
import errno, os, sys
for spec in sys.argv[1:]:
    name, op, path = spec.split(":", 2)
    try:
        if op == "write":
            with open(path, "w") as f: f.write("x\n")
        elif op == "append":
            with open(path, "a") as f: f.write("x\n")
        elif op == "mkdir":
            os.mkdir(path)
        elif op == "rename":
            os.rename(path, path + ".moved")
        elif op == "read":
            open(path).read()
        print(name, "OK")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, str(e.errno)))
"#;

fn ops(r: &portcullis::ExecResult) -> std::collections::BTreeMap<String, String> {
    stdout(r).lines().filter_map(|l| l.split_once(' ')).map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

/// A synthetic toolchain in a mode-700 home: `bin/tool` prints the data
/// file it reads; `secret` is mode 600 (a credentials file).
struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        let dir = tempfile::Builder::new().prefix("pc-home-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("{e}"));
        let t = dir.path().join(".tool");
        fs::create_dir_all(t.join("bin")).unwrap_or_else(|e| panic!("{e}"));
        fs::create_dir_all(t.join("share")).unwrap_or_else(|e| panic!("{e}"));
        fs::write(t.join("share/data"), "toolchain-data-7\n").unwrap_or_else(|e| panic!("{e}"));
        let bin = t.join("bin/tool");
        fs::write(&bin, format!("#!/bin/sh\nexec cat {}/share/data\n", t.display())).unwrap_or_else(|e| panic!("{e}"));
        chmod(&bin, 0o755);
        fs::write(t.join("secret"), "token\n").unwrap_or_else(|e| panic!("{e}"));
        chmod(&t.join("secret"), 0o600);
        chmod(dir.path(), 0o700);
        Home { dir }
    }

    fn tool(&self) -> PathBuf {
        real(&self.dir.path().join(".tool"))
    }
}

#[test]
fn r0085_a_toolchain_in_a_mode_700_home_runs_and_the_command_stays_nobody() {
    if !clean_host_tmp("r0085") {
        return;
    }
    let home = Home::new();
    let tool = home.tool();
    let bin = tool.join("bin/tool");
    // Control on the host: the tool works as the caller.
    let host = std::process::Command::new(&bin).output().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(String::from_utf8_lossy(&host.stdout), "toolchain-data-7\n");

    let ws = Ws::new();
    let out = tempfile::Builder::new().prefix("pc-out-").tempdir_in("/tmp").unwrap_or_else(|e| panic!("{e}"));
    chmod(out.path(), 0o1777);
    let marker = out.path().join("marker");
    let script = format!("{} && echo made > {}", bin.display(), marker.display());
    let mut req = ws.req(&["sh", "-c", &script]);
    req.read.push(tool.clone());
    req.write.push("/tmp".into());
    let r = run_ok(&req);
    assert_eq!(r.outcome.code(), Some(0), "the tool runs from the mode-700 home: {}", stderr(&r));
    assert_eq!(stdout(&r), "toolchain-data-7\n");
    // From outside: the file the command made in the host's /tmp (not
    // idmapped) belongs to the command's host uid: nobody for root.
    let owner = fs::metadata(&marker).map(|m| m.uid()).unwrap_or_else(|e| panic!("marker: {e}"));
    let caller = nix::unistd::getuid().as_raw();
    assert_eq!(owner, if is_root() { 65534 } else { caller }, "the command never runs as host root");

    // What the readable root exposes: the caller's own mode-600 file (for
    // root: through the idmapped bind), and --deny hides it (EACCES).
    let secret = tool.join("secret");
    let argv = ["python3", "-c", OPS, &format!("secret:read:{}", secret.display())];
    let mut req = ws.req(&argv);
    req.read.push(tool.clone());
    assert_eq!(ops(&run_ok(&req)).get("secret").map(String::as_str), Some("OK"));
    req.deny.push(secret.display().to_string());
    assert_eq!(ops(&run_ok(&req)).get("secret").map(String::as_str), Some("EACCES"));

    if !is_root() {
        return;
    }
    // The plan idmaps it; a mode-755 copy is readable without idmapping
    // (the control: the tree itself is fine, only /root-like homes bite).
    let plan = sandbox().plan(&req).unwrap_or_else(|e| panic!("plan: {e}"));
    assert!(plan.spec.mounts.iter().any(|m| matches!(m,
        portcullis_helper::spec::MountOp::Bind { dst, idmap: true, .. } if dst.as_slice() == tool.as_os_str().as_encoded_bytes())));
    chmod(home.dir.path(), 0o755);
    let mut req = ws.req(&["sh", "-c", &format!("{}", bin.display())]);
    req.read.push(tool.clone());
    req.env.push(("X".into(), "1".into()));
    let mut plain = req.clone();
    plain.read.clear();
    plain.read.push(home.dir.path().to_path_buf());
    let r = run_ok(&plain);
    assert_eq!(stdout(&r), "toolchain-data-7\n", "{}", stderr(&r));

    // A root that cannot be made readable: owned by another uid, mode 700.
    let other = tempfile::Builder::new().prefix("pc-other-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("{e}"));
    nix::unistd::chown(other.path(), Some(1000.into()), Some(1000.into())).unwrap_or_else(|e| panic!("{e}"));
    chmod(other.path(), 0o700);
    let mut req = ws.req(&["true"]);
    req.read.push(other.path().to_path_buf());
    match run(&req) {
        Err(e @ SandboxError::ReadRootUnreadable { .. }) => {
            let msg = e.to_string();
            for want in
                [&*real(other.path()).display().to_string(), "uid 65534", "mode 0700", "owner uid 1000", "chmod"]
            {
                assert!(msg.contains(want), "{want:?} missing from: {msg}");
            }
        }
        other => panic!("expected ReadRootUnreadable, got {other:?}"),
    }
    // Control: made readable to others, the same root works.
    chmod(other.path(), 0o755);
    assert_eq!(run_ok(&req).outcome.code(), Some(0));
}

#[test]
fn r0086_the_readme_cargo_line_works_verbatim_with_the_real_toolchain() {
    let cargo_home = Path::new("/root/.cargo");
    if !in_root_pass("r0086", "the toolchain under /root is host root's (uid 65534 cannot even enter /root)") {
        return;
    }
    if !(cargo_home.join("bin/cargo").exists() && Path::new("/root/.rustup").is_dir()) {
        // Not a kernel layer: a host whose toolchain lives elsewhere (the
        // synthetic mode-700 toolchain of r0085 covers the mechanism).
        skipped("r0086", "no rustup toolchain under /root on this host");
        return;
    }
    let ws = Ws::new();
    ws.write("Cargo.toml", "[package]\nname = \"probe\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n");
    ws.write(
        "Cargo.lock",
        "# This file is automatically @generated by Cargo.\n# It is not intended for manual editing.\nversion = 4\n\n\
         [[package]]\nname = \"probe\"\nversion = \"0.1.0\"\n",
    );
    let _ = fs::remove_file(ws.join("src/lib.rs"));
    let before = sha(&ws.join("src/main.rs"));
    let path = format!("/root/.cargo/bin:{}", std::env::var("PATH").unwrap_or_default());
    let line = |argv: &[&str]| {
        let mut c = cli();
        c.env("HOME", "/root").env("PATH", &path).args(["exec", "--workspace"]).arg(ws.path()).args([
            "--write",
            "target",
            "--read",
            "/root/.cargo",
            "--read",
            "/root/.rustup",
            "--inherit-env",
            "HOME",
            "--inherit-env",
            "PATH",
            "--",
        ]);
        c.args(argv).output().unwrap_or_else(|e| panic!("{e}"))
    };
    let v = line(&["cargo", "--version"]);
    assert!(v.status.success(), "cargo --version: {}", String::from_utf8_lossy(&v.stderr));
    assert!(String::from_utf8_lossy(&v.stdout).starts_with("cargo "));
    let b = line(&["cargo", "build", "--offline"]);
    assert!(b.status.success(), "cargo build --offline: {}", String::from_utf8_lossy(&b.stderr));
    assert!(ws.join("target/debug/probe").exists(), "the build landed in the granted target/");
    assert_eq!(sha(&ws.join("src/main.rs")), before);
}

struct Cleanup(PathBuf);

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// `--write /tmp --write target` for a workspace in a fresh directory in
/// /tmp: the source stays read-only (EROFS), target/ and /tmp are writable.
#[test]
fn r0087_write_tmp_keeps_a_workspace_in_tmp_read_only_except_target() {
    if !clean_host_tmp("r0087") {
        return;
    }
    let base = tempfile::Builder::new().prefix("pc-tmpws-").tempdir_in("/tmp").unwrap_or_else(|e| panic!("{e}"));
    let ws = Ws::new_in(base.path());
    let src = ws.join("src/main.rs");
    let before = sha(&src);
    // Directly in /tmp (the base directory is mode 700, a root caller's
    // command is nobody on the host's /tmp, which is not idmapped).
    let x = PathBuf::from(format!("{}-x", base.path().display()));
    let _cleanup = Cleanup(x.clone());
    let argv =
        ["python3", "-c", OPS, "src:write:src/main.rs", "target:write:target/t", &format!("tmp:write:{}", x.display())];
    let mut req = ws.req(&argv);
    req.write.push("/tmp".into());
    req.write.push("target".into());
    let plan = sandbox().plan(&req).unwrap_or_else(|e| panic!("accepted now: {}", portcullis::error_chain(&e)));
    assert!(plan.landlock_gaps.contains(&real(ws.path())), "/tmp is not split: the gap is reported");
    let r = run_ok(&req);
    let got = ops(&r);
    assert_eq!(got.get("src").map(String::as_str), Some("EROFS"), "{}", stderr(&r));
    assert_eq!(got.get("target").map(String::as_str), Some("OK"));
    assert_eq!(got.get("tmp").map(String::as_str), Some("OK"));
    assert_eq!(sha(&src), before, "the source is untouched");
    assert!(ws.join("target/t").exists() && x.exists(), "target/t and /tmp/x landed on the host");
    // Control: with the workspace writable the same write lands.
    let mut w = req.clone();
    w.writable = true;
    assert_eq!(ops(&run_ok(&w)).get("src").map(String::as_str), Some("OK"));
    assert_ne!(sha(&src), before);
}

/// A broad grant of a non-/tmp directory containing the workspace: the
/// mounts keep the workspace read-only, and Landlock's rule is split around
/// it, so Landlock alone holds too (the mount barrier broken on purpose).
#[test]
fn r0088_a_broad_grant_is_split_so_both_barriers_keep_the_workspace() {
    let g = tempfile::Builder::new().prefix("pc-broad-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("{e}"));
    fs::create_dir_all(g.path().join("a")).unwrap_or_else(|e| panic!("{e}"));
    fs::create_dir_all(g.path().join("data")).unwrap_or_else(|e| panic!("{e}"));
    fs::write(g.path().join("file"), "f\n").unwrap_or_else(|e| panic!("{e}"));
    let ws = Ws::new_in(&g.path().join("a"));
    let gr = real(g.path());
    let src = ws.join("src/main.rs");
    let before = sha(&src);
    let argv: Vec<String> = vec![
        "python3".into(),
        "-c".into(),
        OPS.into(),
        "src:write:src/main.rs".into(),
        "target:write:target/t".into(),
        format!("data:write:{}/data/x", gr.display()),
        format!("file:append:{}/file", gr.display()),
        format!("new:write:{}/new", gr.display()),
        format!("mvparent:rename:{}/a", gr.display()),
    ];
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut req = ws.req(&argv);
    req.write.push(gr.clone());
    req.write.push("target".into());
    let plan = sandbox().plan(&req).unwrap_or_else(|e| panic!("accepted now: {}", portcullis::error_chain(&e)));
    assert!(plan.landlock_gaps.is_empty(), "split, not a gap: {:?}", plan.landlock_gaps);
    assert_eq!(plan.landlock_split.len(), 1);
    assert_eq!(plan.landlock_split[0].entries, vec![gr.join("data"), gr.join("file")]);
    let explain = cli()
        .args(["exec", "--explain", "--workspace"])
        .arg(ws.path())
        .arg("--write")
        .arg(&gr)
        .args(["--write", "target", "--", "true"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&explain.stdout);
    assert!(text.contains(&format!("landlock-split: {}", gr.display())), "{text}");

    let r = run_ok(&req);
    let got = ops(&r);
    assert_eq!(got.get("src").map(String::as_str), Some("EROFS"), "{}", stderr(&r));
    assert_eq!(got.get("target").map(String::as_str), Some("OK"));
    assert_eq!(got.get("data").map(String::as_str), Some("OK"));
    assert_eq!(got.get("file").map(String::as_str), Some("OK"));
    // The cost, pinned: nothing new directly in the grant, and the way to
    // the workspace cannot be renamed (Landlock, before the pin's EBUSY).
    assert_eq!(got.get("new").map(String::as_str), Some("EACCES"));
    assert_eq!(got.get("mvparent").map(String::as_str), Some("EACCES"));
    assert_eq!(sha(&src), before);
    assert!(gr.join("data/x").exists() && ws.join("target/t").exists());
    assert_eq!(fs::read_to_string(gr.join("file")).unwrap_or_default(), "f\nx\n");
    assert!(gr.join("a").is_dir() && !gr.join("new").exists());

    // Landlock alone (the read-only mounts broken on purpose) still refuses.
    let mut alone = req.clone();
    alone.test_switches.skip_readonly = true;
    assert_eq!(ops(&run_ok(&alone)).get("src").map(String::as_str), Some("EACCES"));
    assert_eq!(sha(&src), before);
    // Control: with both barriers broken the write lands.
    alone.test_switches.skip_landlock = true;
    assert_eq!(ops(&run_ok(&alone)).get("src").map(String::as_str), Some("OK"));
    assert_ne!(sha(&src), before);
}

/// Under a broad grant, the carve-outs hold: a name in the grant that is a
/// hard link to a workspace file is bound read-only (EROFS), and the
/// workspace's .git/hooks stays read-only; write grants inside the
/// workspace keep working.
#[test]
fn r0089_carve_outs_hold_under_a_broad_grant() {
    let g = tempfile::Builder::new().prefix("pc-broad-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("{e}"));
    fs::create_dir_all(g.path().join("data")).unwrap_or_else(|e| panic!("{e}"));
    let gr = real(g.path());
    let ws = Ws::new_in(&gr);
    ws.write(".git/config", "[core]\n");
    ws.write(".git/hooks/pre-commit", "#!/bin/sh\n");
    ws.write(".git/HEAD", "ref: refs/heads/main\n");
    let src = ws.join("src/main.rs");
    let link = gr.join("data/main.rs");
    fs::hard_link(&src, &link).unwrap_or_else(|e| panic!("{e}"));
    fs::write(gr.join("data/plain"), "p\n").unwrap_or_else(|e| panic!("{e}"));
    let before = sha(&src);
    let hooks_before = sha(&ws.join(".git/hooks/pre-commit"));
    let argv: Vec<String> = vec![
        "python3".into(),
        "-c".into(),
        OPS.into(),
        format!("link:append:{}", link.display()),
        format!("plain:append:{}/data/plain", gr.display()),
        "hook:append:.git/hooks/pre-commit".into(),
        "target:write:target/t".into(),
    ];
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut req = ws.req(&argv);
    req.write.push(gr.clone());
    req.write.push("target".into());
    let plan = sandbox().plan(&req).unwrap_or_else(|e| panic!("{}", portcullis::error_chain(&e)));
    assert!(plan.hard_linked.contains(&link), "{:?}", plan.hard_linked);
    let r = run_ok(&req);
    let got = ops(&r);
    assert_eq!(got.get("link").map(String::as_str), Some("EROFS"), "{}", stderr(&r));
    assert_eq!(got.get("hook").map(String::as_str), Some("EROFS"));
    // Controls: a plain file beside it, and the grant inside the workspace.
    assert_eq!(got.get("plain").map(String::as_str), Some("OK"));
    assert_eq!(got.get("target").map(String::as_str), Some("OK"));
    assert_eq!(sha(&src), before, "the workspace file is untouched through its other name");
    assert_eq!(sha(&ws.join(".git/hooks/pre-commit")), hooks_before);
    assert_eq!(fs::read_to_string(gr.join("data/plain")).unwrap_or_default(), "p\nx\n");
}

#[test]
fn r0839_a_readable_root_that_does_not_exist_says_what_to_do() {
    // Found trying the quick start as uid 65534 (no ~/.cargo): the refusal
    // only said the path could not be resolved. It now says the root does
    // not exist and what to do, and nothing runs (exit 125).
    let ws = Ws::new();
    let missing = ws.path().with_extension("no-such-root");
    let out = cli()
        .args(["exec", "--workspace"])
        .arg(ws.path())
        .arg("--read")
        .arg(&missing)
        .args(["--", "/bin/true"])
        .output()
        .unwrap_or_else(|e| panic!("r0839: {e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "r0839: {err}");
    assert!(err.contains(&format!("readable root {} does not exist", missing.display())), "r0839: {err}");
    assert!(err.contains("create it, correct the path, or leave it out"), "r0839: {err}");
    // Control: an existing root runs.
    let out = cli()
        .args(["exec", "--workspace"])
        .arg(ws.path())
        .args(["--read", "/usr/share", "--", "/bin/true"])
        .output()
        .unwrap_or_else(|e| panic!("r0839: {e}"));
    assert!(out.status.success(), "r0839: control: {}", String::from_utf8_lossy(&out.stderr));
}
