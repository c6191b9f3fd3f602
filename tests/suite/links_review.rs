//! The write boundaries after issue 7's fresh review: host mounts aliasing a
//! read-only area into a grant, another user's write-and-enter-only
//! directory, `--protect` of a writable root, hard links to symbolic links,
//! file grants and a timeout that passes before the command starts.
//!
//! Each test attempts the write in a real sandbox and checks the read-only
//! file from outside (hash, times), with a control where the same write
//! lands. What needs a host mount or another user's directory is made by the
//! root pass, which then runs the CLI as uid 65534 too (`setpriv`); the
//! unprivileged pass says visibly what it skips.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use portcullis::SandboxError;
use sha2::{Digest, Sha256};

use super::util::{bin_dir, in_root_pass, run, run_ok, sandbox, stderr, test_root, Ws};

fn sha(p: &Path) -> String {
    let data = fs::read(p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    Sha256::digest(&data).iter().map(|b| format!("{b:02x}")).collect()
}

fn real(p: &Path) -> PathBuf {
    fs::canonicalize(p).unwrap_or_else(|e| panic!("canonicalize {}: {e}", p.display()))
}

fn sh(cmd: &str, args: &[&str]) {
    let st = Command::new(cmd).args(args).status().unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(st.success(), "{cmd} {args:?}: {st}");
}

/// A host mount, lazily unmounted when dropped.
struct HostMount(PathBuf);

impl HostMount {
    fn bind(src: &Path, dst: &Path) -> HostMount {
        sh("mount", &["--bind", &src.display().to_string(), &dst.display().to_string()]);
        HostMount(dst.to_path_buf())
    }

    fn overlay(lower: &Path, upper: &Path, work: &Path, dst: &Path) -> HostMount {
        let o = format!("lowerdir={},upperdir={},workdir={}", lower.display(), upper.display(), work.display());
        sh("mount", &["-t", "overlay", "overlay", "-o", &o, &dst.display().to_string()]);
        HostMount(dst.to_path_buf())
    }

    fn tmpfs(dst: &Path) -> HostMount {
        sh("mount", &["-t", "tmpfs", "-o", "size=1m,mode=1777", "none", &dst.display().to_string()]);
        HostMount(dst.to_path_buf())
    }
}

impl Drop for HostMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// The CLI as uid 65534 (from the root pass).
fn cli_as_nobody(args: &[&str]) -> Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "env", "-i", "PATH=/usr/bin:/bin"])
        .arg("HOME=/nonexistent")
        .arg(bin_dir().join("portcullis"))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("setpriv: {e}"))
}

fn chown_tree(p: &Path, uid: u32) {
    sh("chown", &["-R", &format!("{uid}:{uid}"), &p.display().to_string()]);
}

fn refused(e: &Result<portcullis::ExecResult, SandboxError>, needles: &[&str]) {
    // Refused as an unsafe path or as a write grant, with its message.
    match e
        .as_ref()
        .err()
        .filter(|e| {
            matches!(
                e,
                SandboxError::UnsafePath { .. } | SandboxError::Invalid { .. } | SandboxError::GrantRefused { .. }
            )
        })
        .and_then(SandboxError::refusal)
    {
        Some(m) => {
            for n in needles {
                assert!(m.contains(n), "refusal should name {n:?}: {m}");
            }
        }
        other => panic!("expected a refusal naming {needles:?}, got {other:?}"),
    }
}

#[test]
fn r0095_a_host_mount_aliasing_a_read_only_area_into_a_grant_is_refused() {
    if !in_root_pass(
        "r0095",
        "a host bind mount needs root: the root pass makes it and runs the uid 65534 case through setpriv",
    ) {
        return;
    }
    let ws = Ws::new();
    let src = ws.join("src/main.rs");
    let before = sha(&src);
    for d in ["target/a", "target/b", "target/srcview", "target/vol"] {
        fs::create_dir_all(ws.join(d)).unwrap_or_else(|e| panic!("{e}"));
    }
    // A link an earlier writable run left behind.
    fs::hard_link(&src, ws.join("target/a/libdep.rlib")).unwrap_or_else(|e| panic!("{e}"));
    let append = |f: &str| {
        let mut req = ws.req(&["sh", "-c", &format!("echo PWNED >> {f}")]);
        req.write.push("target".into());
        req
    };

    // Control without an alias: the link is kept read-only (EROFS), the run
    // itself works.
    let r = run_ok(&append("target/a/libdep.rlib"));
    assert_ne!(r.outcome.code(), Some(0));
    assert!(stderr(&r).contains("Read-only file system"), "{}", stderr(&r));
    assert_eq!(sha(&src), before);

    // (a) target/b is a host bind of target/a: refused, naming the mount.
    {
        let _m = HostMount::bind(&ws.join("target/a"), &ws.join("target/b"));
        let b = real(&ws.join("target/b")).display().to_string();
        refused(&run(&append("target/b/libdep.rlib")), &["mount at", &b, "umount"]);
    }
    {
        // Two grants, one a bind alias of a directory inside the other.
        let alias =
            tempfile::Builder::new().prefix("pc-alias-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("{e}"));
        let _m2 = HostMount::bind(&ws.join("target/a"), alias.path());
        let mut req = append("target/a/libdep.rlib");
        req.write.push(alias.path().to_path_buf());
        refused(&run(&req), &["mount at", &real(alias.path()).display().to_string()]);
        assert_eq!(sha(&src), before, "no write reached src/main.rs");
    }

    // (b) No hard link at all: src/ bound inside the grant, run as uid 65534.
    fs::remove_file(ws.join("target/a/libdep.rlib")).unwrap_or_else(|e| panic!("{e}"));
    chown_tree(ws.path(), 65534);
    let _m = HostMount::bind(&ws.join("src"), &ws.join("target/srcview"));
    let wsp = ws.path().display().to_string();
    let out = cli_as_nobody(&[
        "exec",
        "--workspace",
        &wsp,
        "--write",
        "target",
        "--",
        "sh",
        "-c",
        "echo PWNED >> target/srcview/main.rs",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("target/srcview") && err.contains("keeps read-only"), "{err}");
    assert_eq!(sha(&src), before, "src/main.rs unchanged");

    // Control: a mount inside the grant that aliases nothing read-only (a
    // tmpfs) keeps working, as uid 65534 and as root.
    drop(_m);
    let _t = HostMount::tmpfs(&ws.join("target/vol"));
    let out =
        cli_as_nobody(&["exec", "--workspace", &wsp, "--write", "target", "--", "sh", "-c", "echo ok > target/vol/f"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(fs::read_to_string(ws.join("target/vol/f")).unwrap_or_default(), "ok\n");
    let r = run_ok(&append("target/vol/f"));
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
}

#[test]
fn r0096_an_unlistable_directory_the_command_can_use_is_masked_or_refused() {
    let ws = Ws::new();
    let src = ws.join("src/main.rs");
    let drop_box = ws.join("target/drop");
    fs::create_dir_all(&drop_box).unwrap_or_else(|e| panic!("{e}"));
    fs::hard_link(&src, drop_box.join("libdep.rlib")).unwrap_or_else(|e| panic!("{e}"));
    let before = sha(&src);
    if !in_root_pass(
        "r0096 (another user's directory)",
        "needs root to make; the root pass runs this part as uid 65534",
    ) {
        // The caller's own unlistable directory (-wx): refused, as it could
        // chmod it; control: listable, the link is kept read-only.
        fs::set_permissions(&drop_box, fs::Permissions::from_mode(0o300)).unwrap_or_else(|e| panic!("{e}"));
        let mut req = ws.req(&["sh", "-c", "echo PWNED >> target/drop/libdep.rlib"]);
        req.write.push("target".into());
        refused(&run(&req), &["target/drop", "owns it"]);
        fs::set_permissions(&drop_box, fs::Permissions::from_mode(0o700)).unwrap_or_else(|e| panic!("{e}"));
        let r = run_ok(&req);
        assert!(stderr(&r).contains("Read-only file system"), "{}", stderr(&r));
        assert_eq!(sha(&src), before);
        return;
    }
    chown_tree(ws.path(), 65534);
    sh("chown", &["1234:1234", &drop_box.display().to_string()]);
    let wsp = ws.path().display().to_string();
    let attempt = || {
        cli_as_nobody(&[
            "exec",
            "--workspace",
            &wsp,
            "--write",
            "target",
            "--",
            "sh",
            "-c",
            "echo PWNED >> target/drop/libdep.rlib",
        ])
    };
    // Someone else's drop box (1733, like /var/lib/php/sessions), writable
    // for the group or for others: masked (r0115), the command gets EACCES.
    for mode in [0o1733, 0o1773] {
        fs::set_permissions(&drop_box, fs::Permissions::from_mode(mode)).unwrap_or_else(|e| panic!("{e}"));
        let out = attempt();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(125), "{err}");
        assert!(err.contains("Permission denied"), "{mode:o}: {err}");
        assert_eq!(sha(&src), before);
    }
    // Control: one the command cannot make names in (1700) is passed over,
    // and the command gets EACCES there.
    fs::set_permissions(&drop_box, fs::Permissions::from_mode(0o1700)).unwrap_or_else(|e| panic!("{e}"));
    let out = attempt();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Permission denied"), "{err}");
    // Control: the caller's own drop box is listed and the link kept
    // read-only (EROFS).
    sh("chown", &["65534:65534", &drop_box.display().to_string()]);
    let out = attempt();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("Read-only file system"), "{err}");
    assert_eq!(sha(&src), before, "src/main.rs unchanged");
}

#[test]
fn r0097_protecting_a_writable_root_is_refused_not_dropped() {
    let ws = Ws::new();
    ws.write("target/keep/f", "keep\n");
    ws.write("target/f", "f\n");
    let ext = tempfile::Builder::new().prefix("pc-ext-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("{e}"));
    fs::write(ext.path().join("g"), "g\n").unwrap_or_else(|e| panic!("{e}"));
    let before = ws.snapshot();
    let cases: [(&[&str], bool, &[&str], &str); 4] = [
        (&["target"], false, &["target"], "protecting the writable root"),
        (&[], true, &["."], "drop --writable"),
        (&["EXT"], false, &["EXT"], "drop the grant"),
        (&["target/keep"], false, &["target"], "inside it read-only"),
    ];
    for (write, writable, protect, says) in cases {
        let fix = |p: &&str| if *p == "EXT" { ext.path().to_path_buf() } else { PathBuf::from(p) };
        let mut req = ws.req(&["sh", "-c", "echo X >> target/f; echo X >> target/keep/f; echo X >> top"]);
        req.writable = writable;
        req.write = write.iter().map(fix).collect();
        req.protect = protect.iter().map(fix).collect();
        refused(&run(&req), &[says]);
        assert!(sandbox().plan(&req).is_err(), "--explain refuses too");
    }
    assert_eq!(ws.snapshot(), before, "nothing ran");
    assert_eq!(fs::read_to_string(ext.path().join("g")).unwrap_or_default(), "g\n");
    // Control: a protected path inside the grant is honoured (EROFS), the
    // rest of the grant is written.
    let mut req = ws.req(&["sh", "-c", "echo X >> target/f; echo X >> target/keep/f"]);
    req.write.push("target".into());
    req.protect.push("target/keep".into());
    let r = run_ok(&req);
    assert!(stderr(&r).contains("Read-only file system"), "{}", stderr(&r));
    assert_eq!(ws.read("target/f"), "f\nX\n");
    assert_eq!(ws.read("target/keep/f"), "keep\n");
}

#[test]
fn r0098_a_hard_linked_symbolic_link_stays_read_only() {
    let ws = Ws::new();
    let link = ws.join("src/link");
    std::os::unix::fs::symlink("main.rs", &link).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink("x", ws.join("target/own")).unwrap_or_else(|e| panic!("{e}"));
    sh("touch", &["-h", "-d", "2001-01-01", &link.display().to_string()]);
    // The plant, as a writable run would make it (`ln -P`).
    let mut req = ws.req(&["ln", "-P", "src/link", "target/link"]);
    req.writable = true;
    let r = run_ok(&req);
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    let mtime = || fs::symlink_metadata(&link).map(|m| m.mtime()).unwrap_or_else(|e| panic!("{e}"));
    let before = mtime();
    assert_eq!(fs::symlink_metadata(&link).map(|m| m.nlink()).unwrap_or(0), 2);

    let mut req = ws.req(&["sh", "-c", "touch -h target/own && echo own-ok; touch -h target/link"]);
    req.write.push("target".into());
    let plan = sandbox().plan(&req).unwrap_or_else(|e| panic!("plan: {e}"));
    assert_eq!(plan.hard_linked, vec![real(ws.path()).join("target/link")]);
    let r = run_ok(&req);
    // Control: the command's own symlink's times change.
    assert!(String::from_utf8_lossy(&r.stdout).contains("own-ok"), "{}", stderr(&r));
    assert!(stderr(&r).contains("Read-only file system"), "{}", stderr(&r));
    assert_eq!(mtime(), before, "src/link's times are unchanged");
}

#[test]
fn r0099_file_grants_work_and_a_timeout_before_the_start_is_a_timeout() {
    let ws = Ws::new();
    let ext = tempfile::Builder::new().prefix("pc-ext-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("{e}"));
    let f = ext.path().join("f");
    fs::write(&f, "f\n").unwrap_or_else(|e| panic!("{e}"));
    ws.write("g", "g\n");
    // A file grant with one link, absolute and relative: written.
    let mut req = ws.req(&["sh", "-c", &format!("echo X >> {} && echo X >> g && echo X >> README.md", f.display())]);
    req.write = vec![f.clone(), "g".into()];
    let r = run_ok(&req);
    assert!(stderr(&r).contains("Read-only file system"), "the rest stays read-only: {}", stderr(&r));
    assert_eq!(fs::read_to_string(&f).unwrap_or_default(), "f\nX\n");
    assert_eq!(ws.read("g"), "g\nX\n");
    assert_eq!(ws.read("README.md"), "readme\n");
    // A file grant with another name in the read-only workspace: refused.
    let src = ws.join("src/main.rs");
    let before = sha(&src);
    fs::hard_link(&src, ext.path().join("copy")).unwrap_or_else(|e| panic!("{e}"));
    let mut req = ws.req(&["sh", "-c", &format!("echo X >> {}/copy", ext.path().display())]);
    req.write = vec![ext.path().join("copy")];
    refused(&run(&req), &["the write grant", "2 hard links"]);
    // ... unless that other name is granted too.
    req.write.push("src".into());
    let r = run_ok(&req);
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    assert_ne!(sha(&src), before);

    // A timeout that passes while the run is planned: 124, nothing started,
    // and the message says where (no other run existed).
    for i in 0..2000 {
        ws.write(&format!("target/t/{}/{i}", i % 20), "");
    }
    let mut req = ws.req(&["touch", "target/started"]);
    req.write.push("target".into());
    req.deny.push("**/nothing".into());
    req.timeout = Some(Duration::from_micros(1));
    match run(&req) {
        Err(e @ SandboxError::TimedOutBeforeStart { .. }) => {
            assert_eq!(e.exit_code(), 124);
            let m = e.to_string();
            assert!(m.contains("while the run was planned") && !m.contains("another run"), "{m}");
        }
        other => panic!("expected a timeout before the start, got {other:?}"),
    }
    assert!(!ws.join("target/started").exists(), "nothing was started");
    let out = super::util::cli()
        .args(["exec", "--timeout", "0.000001", "--write", "target", "--workspace"])
        .arg(ws.path())
        .args(["--", "touch", "target/started"])
        .output()
        .unwrap_or_else(|e| panic!("cli: {e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(124), "{err}");
    assert!(err.contains("before the command started"), "{err}");
    assert!(!ws.join("target/started").exists());
    // Control: with time to spare the same run starts.
    req.timeout = Some(Duration::from_secs(60));
    let r = run_ok(&req);
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    assert!(ws.join("target/started").exists());
}

#[test]
fn r0108_an_overlay_whose_upper_directory_is_read_only_is_refused() {
    if !in_root_pass(
        "r0108",
        "a host overlay mount needs root: the root pass makes it and runs the uid 65534 case through setpriv",
    ) {
        return;
    }
    let ws = Ws::new();
    let src = ws.join("src/main.rs");
    let before = sha(&src);
    fs::create_dir_all(ws.join("target/ov")).unwrap_or_else(|e| panic!("{e}"));
    let aux = tempfile::Builder::new().prefix("pc-ov-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("{e}"));
    for d in ["low", "up", "work", "work2"] {
        fs::create_dir_all(aux.path().join(d)).unwrap_or_else(|e| panic!("{e}"));
    }
    let a = |d: &str| aux.path().join(d);
    chown_tree(ws.path(), 65534);
    chown_tree(aux.path(), 65534);
    let wsp = ws.path().display().to_string();
    let append = |f: &str| {
        let mut req = ws.req(&["sh", "-c", &format!("echo PWNED >> {f}")]);
        req.write.push("target".into());
        req
    };
    let nobody = |f: &str| {
        cli_as_nobody(&["exec", "--workspace", &wsp, "--write", "target", "--", "sh", "-c", &format!("echo ok >> {f}")])
    };

    // Control: an overlay whose upper directory lies outside every read-only
    // area keeps working; the writes land in its upper directory.
    {
        let _m = HostMount::overlay(&a("low"), &a("up"), &a("work"), &ws.join("target/ov"));
        let r = run_ok(&append("target/ov/f"));
        assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
        let out = nobody("target/ov/f");
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(fs::read_to_string(a("up/f")).unwrap_or_default(), "PWNED\nok\n");
    }

    // The upper directory is src/: every write through target/ov would land
    // in src/main.rs. Refused as root and as uid 65534, naming the overlay.
    let _m = HostMount::overlay(&a("low"), &ws.join("src"), &a("work2"), &ws.join("target/ov"));
    let ov = real(&ws.join("target/ov")).display().to_string();
    refused(
        &run(&append("target/ov/main.rs")),
        &["overlay mount at", &ov, "upper directory", "keeps read-only", "umount"],
    );
    let out = nobody("target/ov/main.rs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains(&ov) && err.contains("upper directory") && err.contains("keeps read-only"), "{err}");
    assert_eq!(sha(&src), before, "src/main.rs unchanged");
}

/// Run `script` with /usr/bin/python3 as uid 65534 on the host (a control).
fn python_as_nobody(script: &str) -> String {
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script])
        .output()
        .unwrap_or_else(|e| panic!("setpriv: {e}"));
    assert!(out.status.success(), "host script: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A store into `path` through a shared mapping (keeps a setgid bit).
fn mmap_store(path: &Path) -> String {
    format!(
        "import errno, mmap, os\ntry:\n    fd = os.open({p:?}, os.O_RDWR)\n    m = mmap.mmap(fd, 0, mmap.MAP_SHARED)\n    \
         m[:6] = b'PWNED!'\n    m.flush()\n    print('stored')\nexcept OSError as e:\n    \
         print('ERR', errno.errorcode[e.errno])\n",
        p = path.display().to_string()
    )
}

fn mode_of(p: &Path) -> u32 {
    fs::metadata(p).map(|m| m.mode() & 0o7777).unwrap_or_else(|e| panic!("stat {}: {e}", p.display()))
}

#[test]
fn r0115_a_search_only_directory_the_walk_cannot_list_is_masked() {
    // Found in review (issue 7, fourth round): a uid 65534 caller's walk
    // passed over another user's 0711 directory in a writable area (the
    // command may search it but not write it), so a hard link there to a
    // file outside the plan, or a setgid-root program, went unchecked.
    if !in_root_pass(
        "r0115",
        "another user's directory needs root to make: the root pass runs the uid 65534 case through setpriv",
    ) {
        return;
    }
    let ws = Ws::new();
    let wsp = ws.path().display().to_string();
    // The outside file, 0666, outside every area of the plan.
    let ext = tempfile::Builder::new().prefix("pc-out-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("{e}"));
    fs::set_permissions(ext.path(), fs::Permissions::from_mode(0o755)).unwrap_or_else(|e| panic!("{e}"));
    let secret = ext.path().join("secret");
    fs::write(&secret, "original\n").unwrap_or_else(|e| panic!("{e}"));
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o666)).unwrap_or_else(|e| panic!("{e}"));
    let before = sha(&secret);
    // A grant outside the workspace, like a granted host /tmp.
    let grant = tempfile::Builder::new().prefix("pc-grant-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("{e}"));
    let gp = grant.path().display().to_string();
    // (1) root-owned 0711 cache/ in the workspace and shared/ in the grant,
    // each holding a hard link to the outside file.
    let cache = ws.join("cache");
    let shared = grant.path().join("shared");
    // (2) opt/tool, 65534:0 2755, in a root-owned 0711 opt/.
    let opt = ws.join("opt");
    let tool = opt.join("tool");
    for d in [&cache, &shared, &opt] {
        fs::create_dir_all(d).unwrap_or_else(|e| panic!("{e}"));
    }
    fs::hard_link(&secret, cache.join("obj")).unwrap_or_else(|e| panic!("{e}"));
    fs::hard_link(&secret, shared.join("obj")).unwrap_or_else(|e| panic!("{e}"));
    fs::write(&tool, ORIGINAL_TOOL).unwrap_or_else(|e| panic!("{e}"));
    chown_tree(ws.path(), 65534);
    chown_tree(grant.path(), 65534);
    for d in [&cache, &shared, &opt] {
        sh("chown", &["0:0", &d.display().to_string()]);
        fs::set_permissions(d, fs::Permissions::from_mode(0o711)).unwrap_or_else(|e| panic!("{e}"));
    }
    sh("chown", &["65534:0", &tool.display().to_string()]);
    fs::set_permissions(&tool, fs::Permissions::from_mode(0o2755)).unwrap_or_else(|e| panic!("{e}"));
    let write_links = "echo PWNED > cache/obj; echo PWNED > \"$G/shared/obj\"; exit 0".replace("$G", &gp);
    let nobody = |mode: &[&str], argv: &[&str]| {
        let mut args = vec!["exec"];
        args.extend_from_slice(mode);
        args.extend_from_slice(&["--writable", "--workspace", &wsp, "--write", &gp, "--"]);
        args.extend_from_slice(argv);
        cli_as_nobody(&args)
    };
    let store = mmap_store(&tool);
    let landlock_only = portcullis::doctor_landlock_abi() >= 6;

    // The full sandbox masks all three: the plan names them, the command gets
    // EACCES below them, and nothing changes outside.
    let out = nobody(&["--explain"], &["true"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    for d in [&cache, &shared, &opt] {
        let d = real(d).display().to_string();
        assert!(text.contains(&format!("unlistable: {d} ")) && text.contains(&format!("mask {d}\n")), "{d}: {text}");
    }
    let out = nobody(&[], &["sh", "-c", &write_links]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(err.matches("Permission denied").count(), 2, "{err}");
    assert_eq!(sha(&secret), before, "the outside file is unchanged");
    let out = nobody(&[], &["/usr/bin/python3", "-c", &store]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ERR EACCES\n", "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(fs::read_to_string(&tool).unwrap_or_default(), ORIGINAL_TOOL);
    assert_eq!(mode_of(&tool), 0o2755);

    // Landlock-only mode cannot mask: refused, naming the directory.
    if landlock_only {
        let out = nobody(&["--degraded", "landlock-only"], &["sh", "-c", &write_links]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{err}");
        assert!(
            err.contains("landlock-only mode cannot hide") && err.contains(&real(&cache).display().to_string()),
            "{err}"
        );
        assert!(err.contains("chmod o+r") && err.contains("full sandbox"), "{err}");
        assert_eq!(sha(&secret), before);
    }

    // A root caller's walk lists them: walked, the links and the program
    // kept read-only (EROFS), nothing masked.
    let mut req = ws.req(&["sh", "-c", &write_links]);
    req.writable = true;
    req.write.push(grant.path().to_path_buf());
    let plan = sandbox().plan(&req).unwrap_or_else(|e| panic!("plan: {e}"));
    assert!(plan.unlistable.is_empty(), "{:?}", plan.unlistable);
    let mut linked = vec![real(&cache.join("obj")), real(&shared.join("obj"))];
    linked.sort();
    assert_eq!(plan.hard_linked, linked);
    assert_eq!(plan.privileged, vec![real(&tool)]);
    let r = run_ok(&req);
    assert_eq!(stderr(&r).matches("Read-only file system").count(), 2, "{}", stderr(&r));
    assert_eq!(sha(&secret), before);

    // Control: the same directories made listable are walked as uid 65534
    // too; the links and the program are bound read-only (EROFS).
    for d in [&cache, &shared, &opt] {
        fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap_or_else(|e| panic!("{e}"));
    }
    let out = nobody(&["--explain"], &["true"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("unlistable:"), "{text}");
    assert!(text.contains(&format!("hard-linked: {}", real(&cache.join("obj")).display())), "{text}");
    assert!(text.contains(&format!("privileged: {}", real(&tool).display())), "{text}");
    let out = nobody(&[], &["sh", "-c", &write_links]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.matches("Read-only file system").count(), 2, "{err}");
    let out = nobody(&[], &["/usr/bin/python3", "-c", &store]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ERR EROFS\n", "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(sha(&secret), before);
    assert_eq!(fs::read_to_string(&tool).unwrap_or_default(), ORIGINAL_TOOL);

    // Control: the attempts work outside the sandbox (search-only again):
    // uid 65534 writes the outside file through the link, and the store
    // keeps the setgid bit.
    for d in [&cache, &opt] {
        fs::set_permissions(d, fs::Permissions::from_mode(0o711)).unwrap_or_else(|e| panic!("{e}"));
    }
    let host = python_as_nobody(&format!(
        "open({:?}, 'w').write('PWNED\\n')\n{store}",
        cache.join("obj").display().to_string()
    ));
    assert_eq!(host, "stored\n");
    assert_eq!(fs::read_to_string(&secret).unwrap_or_default(), "PWNED\n");
    assert!(fs::read_to_string(&tool).unwrap_or_default().starts_with("PWNED!"));
    assert_eq!(mode_of(&tool), 0o2755, "a store through a mapping keeps the setgid bit");
}

const ORIGINAL_TOOL: &str = "#!/bin/sh\necho original program\n";

/// A host mount that a plain rename carries into a grant between two runs
/// of one process (the library's, so nothing read before is trusted): a
/// rename moves no mount and raises no mount event, yet the mount's path
/// changes. The second run must judge the table as it is then. (Found by
/// a review of a cache of the mount table, kept until `mountinfo` polled a
/// change: it let this write land, and was reverted.)
#[test]
fn r0854_a_host_alias_renamed_into_a_grant_between_two_runs_is_refused() {
    if !in_root_pass("r0854", "a host bind mount needs root") {
        return;
    }
    let ws = Ws::new();
    let src = ws.join("src/main.rs");
    let before = sha(&src);
    for d in ["stash/x/view", "target"] {
        fs::create_dir_all(ws.join(d)).unwrap_or_else(|e| panic!("{e}"));
    }
    // Unmounted at its final path (after the rename) when the test ends.
    let _m = HostMount::bind(&ws.join("src"), &ws.join("stash/x/view"));
    let _moved = HostMount(ws.join("target/x/view"));
    let append = |f: &str| {
        let mut req = ws.req(&["sh", "-c", &format!("echo PWNED >> {f}")]);
        req.write.push("target".into());
        req
    };
    // Control: outside the grant the alias harms nothing, and the run
    // works (its plan read the mount table).
    let r = run_ok(&append("target/other"));
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    // A rename any writer of the workspace may make (a command of an
    // earlier writable run too): no mount event.
    fs::rename(ws.join("stash/x"), ws.join("target/x")).unwrap_or_else(|e| panic!("{e}"));
    let view = real(&ws.join("target/x/view")).display().to_string();
    refused(&run(&append("target/x/view/main.rs")), &["mount at", &view, "umount"]);
    assert_eq!(sha(&src), before, "src/main.rs (read-only) was written through the renamed alias");
}

#[test]
fn r0864_an_alias_the_host_mounts_after_the_plan_is_refused_at_the_start() {
    // A run judges the host's mounts against its plan when it is about to
    // start (one reading of the mount table, shared with the pool's
    // judgement of a slot), not while the plan is made: a bind of `src`
    // into the grant made by the host after the plan (here inside
    // `run_checked`'s check, which runs after the plan and before the run)
    // refuses the run, naming the mount. Control: the same run without the
    // mount writes in the grant.
    if !in_root_pass("r0864", "a host bind mount needs root") {
        return;
    }
    let ws = Ws::new();
    let src = ws.join("src/main.rs");
    let before = sha(&src);
    fs::create_dir_all(ws.join("target/view")).unwrap_or_else(|e| panic!("{e}"));
    let append = |f: &str| {
        let mut req = ws.req(&["sh", "-c", &format!("echo PWNED >> {f}")]);
        req.write.push("target".into());
        req
    };
    let rt = super::util::rt();
    // Control: no mount, the write in the grant lands.
    let r = rt
        .block_on(sandbox().run_checked(
            &append("target/view/main.rs"),
            portcullis::sandbox::RunOptions::default(),
            |_| Ok(()),
        ))
        .unwrap_or_else(|e| panic!("r0864: control: {e}"));
    assert_eq!(r.outcome.code(), Some(0), "r0864: control: {}", stderr(&r));
    fs::remove_file(ws.join("target/view/main.rs")).unwrap_or_else(|e| panic!("{e}"));
    let mut mounted = None;
    let r = rt.block_on(sandbox().run_checked(
        &append("target/view/main.rs"),
        portcullis::sandbox::RunOptions::default(),
        |_| {
            mounted = Some(HostMount::bind(&ws.join("src"), &ws.join("target/view")));
            Ok(())
        },
    ));
    assert!(mounted.is_some(), "r0864: the check did not run");
    let view = real(&ws.join("target/view")).display().to_string();
    refused(&r, &["mount at", &view, "umount"]);
    drop(mounted);
    assert_eq!(sha(&src), before, "src/main.rs (read-only) was written through the alias mounted after the plan");
}

#[test]
fn r0865_a_grant_to_create_inside_an_alias_is_refused_before_it_is_created() {
    // Found in review: with the alias check made only at the run's start, a
    // run refused for an alias first created its missing write grant, inside
    // the read-only area the alias shows. The plan checks before it creates
    // anything (and before it walks the writable areas). Control: without the
    // alias the grant is created and the run works.
    if !in_root_pass("r0865", "a host bind mount needs root") {
        return;
    }
    let ws = Ws::new();
    let ro = tempfile::Builder::new().prefix("pc-ro-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("{e}"));
    fs::create_dir_all(ws.join("target/ro")).unwrap_or_else(|e| panic!("{e}"));
    let req = || {
        let mut req = ws.req(&["sh", "-c", "echo ran"]);
        req.read.push(ro.path().to_path_buf());
        req.write.push("target/ro/newdir".into());
        req
    };
    {
        let _m = HostMount::bind(ro.path(), &ws.join("target/ro"));
        let r = run(&req());
        refused(&r, &["lies inside", &real(ro.path()).display().to_string(), "umount"]);
        assert!(!ro.path().join("newdir").exists(), "r0865: the refused run created its grant in the read-only area");
    }
    // Control: no alias, the grant is created in the workspace and the run works.
    let r = run_ok(&req());
    assert_eq!(super::util::stdout(&r), "ran\n", "r0865: control: {}", stderr(&r));
    assert!(ws.join("target/ro/newdir").is_dir(), "r0865: control: the grant was not created");
}
