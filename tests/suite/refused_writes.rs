//! The refused-write report: a command run without write access to a path
//! learns which of its writes the kernel refused (`refused_writes` of the
//! result), from a seccomp user-notification observer that only watches.
//! Every test checks from outside that the refused writes did not land (the
//! observer never turns a refusal into a success), pins the errno the
//! command saw, and has a control: the same writes land, unreported, when
//! the area is writable.

use std::fs;
use std::path::PathBuf;

use portcullis::policy::WorkspacePolicy;
use portcullis::sandbox::{Mode, ReportState, SAMPLE_CAP};

use super::util::*;

/// The workspace's real path (as the command sees it).
fn real(ws: &Ws) -> PathBuf {
    fs::canonicalize(ws.path()).unwrap_or_else(|e| panic!("canonicalize: {e}"))
}

/// An exclusive creation's flags, in Python.
const EXCL: &str = "os.O_CREAT|os.O_EXCL|os.O_WRONLY";

/// A shell line that opens each `(path, Python flags)` in turn and prints
/// `path made` or `path ERRNO` (its name).
fn opens(cases: &[(&str, &str)]) -> String {
    let list: String = cases.iter().map(|(p, fl)| format!("('{p}', {fl}), ")).collect();
    format!(
        "python3 -c \"import os,errno\nfor p, fl in ({list}):\n  try: os.close(os.open(p, fl))\n  \
         except OSError as e: print(p, errno.errorcode[e.errno])\n  else: print(p, 'made')\""
    )
}

/// Whether `test` runs its landlock-only case here: in the unprivileged
/// pass (root always has the full sandbox), on Landlock ABI 6 (a skip
/// otherwise, which CI's switch makes a failure).
fn landlock_only_here(test: &str) -> bool {
    if is_root() {
        eprintln!("{test}: the landlock-only mode runs in the unprivileged pass (running as root)");
        return false;
    }
    available(test, portcullis::doctor_landlock_abi() >= 6, "landlock-only mode needs Landlock ABI 6")
}

/// The shell line of the write tests: `touch`, `rm`, `mv`, `echo >` and
/// `sed -i`, each on its own file, then Python's errno for one more create.
const WRITES: &str = "touch new.txt; rm README.md; mv src/lib.rs src/moved.rs; echo x > out.txt; \
                      sed -i s/hi/ho/ src/main.rs; \
                      python3 -c \"import os,errno\ntry: os.open('py.txt', os.O_CREAT|os.O_WRONLY)\nexcept OSError as e: print('ERR', errno.errorcode[e.errno])\nelse: print('ERR none')\"";

#[test]
fn r0119_read_only_run_names_the_refused_writes() {
    let ws = Ws::new();
    let before = ws.snapshot();
    let r = sh(&ws, WRITES, |_| {});
    let w = observed(&r);
    let root = real(&ws);
    let has = |rel: &str| w.sample.contains(&root.join(rel));
    for rel in ["new.txt", "README.md", "src/lib.rs", "src/moved.rs", "out.txt", "py.txt"] {
        assert!(has(rel), "{rel} missing from {:?}", w.sample);
    }
    // sed -i writes a temporary file next to the original first.
    assert!(w.sample.iter().any(|p| p.parent() == Some(&root.join("src")) && p != &root.join("src/lib.rs")));
    assert!(w.count >= 6, "{w:?}");
    assert_eq!(w.unresolved, 0, "{w:?}");
    // Pinned: the kernel refused with EROFS; nothing landed.
    assert!(stdout(&r).contains("ERR EROFS"), "{}", stdout(&r));
    assert_eq!(ws.snapshot(), before, "a refused write landed");
    assert!(!ws.join("new.txt").exists() && !ws.join("py.txt").exists());
}

#[test]
fn r0120_control_writable_run_lands_the_same_writes_unreported() {
    let ws = Ws::new();
    let r = sh(&ws, WRITES, |req| req.writable = true);
    let w = observed(&r);
    assert_eq!((w.count, w.unresolved), (0, 0), "{w:?}");
    assert!(w.sample.is_empty());
    assert!(stdout(&r).contains("ERR none"), "{}", stdout(&r));
    for rel in ["new.txt", "src/moved.rs", "out.txt", "py.txt"] {
        assert!(ws.join(rel).exists(), "{rel} did not land");
    }
    assert!(!ws.join("README.md").exists() && !ws.join("src/lib.rs").exists());
    assert!(ws.read("src/main.rs").contains("ho"));
}

#[test]
fn r0121_pure_readers_report_nothing() {
    let ws = Ws::new();
    let r = sh(&ws, "cat README.md src/main.rs >/dev/null; ls -R >/dev/null; grep -r fn . >/dev/null; find . -type f >/dev/null; echo done > /dev/null", |_| {});
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    let w = observed(&r);
    assert_eq!((w.count, w.unresolved), (0, 0), "{w:?}");
    assert!(w.sample.is_empty());
}

#[test]
fn r0122_writable_run_reports_only_the_protected_path() {
    let ws = Ws::with_git();
    let hook = ws.join(".git/hooks/pre-commit");
    let r =
        sh(&ws, "touch made.txt; mkdir -p target/debug; echo '#!/bin/sh' > .git/hooks/pre-commit; echo rc=$?", |req| {
            req.writable = true
        });
    let w = observed(&r);
    assert_eq!(w.sample, vec![real(&ws).join(".git/hooks/pre-commit")], "{w:?}");
    assert_eq!(w.count, 1);
    assert!(stderr(&r).contains("Read-only file system"), "{}", stderr(&r));
    // From outside: the writable area's writes landed, the hook did not.
    assert!(ws.join("made.txt").exists() && ws.join("target/debug").is_dir());
    assert!(!hook.exists(), "the protected hook was written");
}

#[test]
fn r0123_count_is_exact_beyond_the_sample_cap() {
    let ws = Ws::new();
    let r = sh(&ws, "i=0; while [ $i -lt 200 ]; do true > f$i 2>/dev/null; i=$((i+1)); done", |_| {});
    let w = observed(&r);
    assert_eq!(w.count, 200, "{w:?}");
    assert_eq!(w.sample.len(), SAMPLE_CAP);
    assert_eq!(w.sample[0], real(&ws).join("f0"));
    assert!((0..200).all(|i| !ws.join(&format!("f{i}")).exists()), "a refused write landed");
    // Control: writable, all 200 land and none is reported.
    let r = sh(&ws, "i=0; while [ $i -lt 200 ]; do true > f$i; i=$((i+1)); done", |req| req.writable = true);
    assert_eq!(observed(&r).count, 0);
    assert!((0..200).all(|i| ws.join(&format!("f{i}")).exists()));
}

#[test]
fn r0124_switched_off_the_command_runs_and_the_result_says_off() {
    let ws = Ws::new();
    let r = sh(&ws, "cat README.md; touch new.txt; echo rc=$?", |req| req.report_refused_writes = false);
    assert_eq!(r.refused_writes.state, ReportState::Off);
    assert_eq!((r.refused_writes.count, r.refused_writes.sample.len()), (0, 0));
    assert!(stdout(&r).starts_with("readme\n") && stdout(&r).contains("rc=1"), "{}", stdout(&r));
    assert!(stderr(&r).contains("Read-only file system"), "{}", stderr(&r));
    assert!(!ws.join("new.txt").exists());
}

#[test]
fn r0125_policy_key_switches_the_report_off() {
    let ws = Ws::new();
    let text =
        |v: &str| format!("workspace = {:?}\n{v}[shell]\nallow = [\"touch\"]\n", ws.path().display().to_string());
    for (line, want) in
        [("", true), ("report_refused_writes = true\n", true), ("report_refused_writes = false\n", false)]
    {
        let p = WorkspacePolicy::from_toml(&text(line)).unwrap_or_else(|e| panic!("{line}: {e}"));
        let runner = portcullis::runner::Runner::builder()
            .policy(p)
            .sandbox(super::util::sandbox())
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap_or_else(|e| panic!("{e}"));
        let prepared = rt
            .block_on(runner.prepare(&["touch".into(), "x".into()], &Default::default()))
            .unwrap_or_else(|e| panic!("{e}"));
        let portcullis::runner::Prepared::Ready(ready) = prepared else { panic!("touch refused under {line:?}") };
        assert_eq!(ready.request.report_refused_writes, want, "{line:?}");
    }
}

#[test]
fn r0126_landlock_only_mode_reports_by_the_landlock_rules() {
    if !landlock_only_here("r0126") {
        return;
    }
    let ws = Ws::new();
    let before = ws.snapshot();
    let r = sh(&ws, WRITES, |req| req.degraded = Some(Mode::LandlockOnly));
    let w = observed(&r);
    let root = real(&ws);
    for rel in ["new.txt", "README.md", "src/lib.rs", "out.txt", "py.txt"] {
        assert!(w.sample.contains(&root.join(rel)), "{rel} missing from {w:?}");
    }
    // Landlock refuses with EACCES; nothing landed.
    assert!(stdout(&r).contains("ERR EACCES"), "{}", stdout(&r));
    assert_eq!(ws.snapshot(), before);
    // Control: a write grant on src/ lands there, unreported; the rest of
    // the workspace is still refused and reported.
    let r = sh(&ws, "touch src/granted.txt; touch outside.txt", |req| {
        req.degraded = Some(Mode::LandlockOnly);
        req.write = vec![PathBuf::from("src")];
    });
    let w = observed(&r);
    assert_eq!(w.sample, vec![root.join("outside.txt")], "{w:?}");
    assert!(ws.join("src/granted.txt").exists() && !ws.join("outside.txt").exists());
}

#[test]
fn r0127_relative_paths_dirfds_and_dotdot_resolve_as_the_command_sees_them() {
    let ws = Ws::new();
    // From src/: `../x` (a `..` above the working directory), an openat on
    // a directory fd, and an absolute path into /tmp (writable: not reported).
    let script = "import os\nd = os.open('.', os.O_RDONLY)\n\
                  for f in [lambda: os.open('../up.txt', os.O_CREAT|os.O_WRONLY), \
                            lambda: os.open('at.txt', os.O_CREAT|os.O_WRONLY, dir_fd=d), \
                            lambda: os.mkdir('/tmp/fine')]:\n    try: f()\n    except OSError as e: print(e.errno)\n";
    let mut req = ws.req(&["/usr/bin/python3", "-c", script]);
    req.cwd = Some(ws.join("src"));
    let r = run_ok(&req);
    let w = observed(&r);
    let root = real(&ws);
    assert_eq!(w.sample, vec![root.join("src/../up.txt"), root.join("src/at.txt")], "{w:?}");
    assert_eq!(stdout(&r).lines().collect::<Vec<_>>(), vec!["30", "30"], "EROFS twice: {}", stdout(&r));
    assert!(!ws.join("up.txt").exists() && !ws.join("src/at.txt").exists());
}

/// The CLI's `--json` result for `touch x` in a read-only workspace, run
/// under a supervising runtime's seccomp listener (`listener`) or not.
fn touch_under(ws: &Ws, listener: bool) -> (serde_json::Value, std::process::Output) {
    exec_under(ws, listener, &[], &["/bin/sh", "-c", "touch x"])
}

/// `portcullis exec --json --workspace WS EXTRA... -- ARGV...`, under
/// another process's seccomp listener when `listener`.
fn exec_under(ws: &Ws, listener: bool, extra: &[&str], argv: &[&str]) -> (serde_json::Value, std::process::Output) {
    use std::os::unix::process::CommandExt;
    let mut cmd = cli();
    cmd.args(["exec", "--json", "--workspace"]).arg(ws.path()).args(extra).arg("--").args(argv);
    // One instruction, `ret ALLOW`, installed with a listener that stays
    // open across exec (moved to fd 100): as a runtime that supervises its
    // processes through seccomp user notification would.
    let allow = [libc::sock_filter { code: 0x06, jt: 0, jf: 0, k: 0x7fff_0000 }];
    let nnp = !is_root();
    if listener {
        // SAFETY: between fork and exec only async-signal-safe syscalls run
        // (prctl, seccomp, dup2, close) on memory prepared before the fork.
        unsafe {
            cmd.pre_exec(move || {
                if nnp && libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let fprog = libc::sock_fprog { len: 1, filter: allow.as_ptr() as *mut libc::sock_filter };
                let fd = libc::syscall(
                    libc::SYS_seccomp,
                    1,
                    libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
                    &fprog as *const libc::sock_fprog,
                );
                if fd < 0 || libc::dup2(fd as i32, 100) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                libc::close(fd as i32);
                Ok(())
            });
        }
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("running the CLI: {e}"));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("json: {e}: {}", String::from_utf8_lossy(&out.stdout)));
    (v, out)
}

/// Under another process's seccomp listener the command's one filter (the
/// main table with the observer's watches) cannot be installed with a
/// listener of its own: the main table is installed alone, and refuses what
/// it always refuses, with the same errnos (a fallback that installed
/// nothing would let these through). Controls: the same syscalls on the
/// host, under no filter of ours, are not refused so.
#[test]
fn r0859_under_another_listener_the_main_filter_still_refuses() {
    let test = "r0859_under_another_listener_the_main_filter_still_refuses";
    let ws = Ws::new();
    let pd = ProbeDir::new();
    let ops = ["unshare_user", "clone3", "sys:keyctl:0:0:0"];
    let script = pd.script();
    let mut argv = vec!["/usr/bin/python3", script.as_str()];
    argv.extend(ops);
    let read = pd.dir.path().display().to_string();
    let (v, _) = exec_under(&ws, true, &["--read", &read], &argv);
    assert_eq!(v["refused_writes"]["state"], "unavailable", "{test}: {v}");
    assert_eq!(v["outcome"]["code"], 0, "{test}: {v}");
    let inside = probe_results(v["stdout"].as_str().unwrap_or_default());
    let want = [("unshare_user", "EPERM"), ("clone3", "ENOSYS"), ("sys:keyctl:0:0:0", "EPERM")];
    for (op, errno) in want {
        assert_eq!(inside.get(op).map(String::as_str), Some(errno), "{test}: {op} under the other listener: {v}");
    }
    // Controls: on the host nothing of ours refuses them so.
    let host = probe_on_host(ws.path(), &ops);
    assert_eq!(host.get("unshare_user").map(String::as_str), Some("OK"), "{test}: host control: {host:?}");
    for (op, errno) in want {
        assert_ne!(host.get(op).map(String::as_str), Some(errno), "{test}: host control for {op}: {host:?}");
    }
}

#[test]
fn r0128_under_another_seccomp_listener_the_report_is_unavailable_and_the_run_goes_on() {
    let ws = Ws::new();
    let (v, _) = touch_under(&ws, true);
    let w = &v["refused_writes"];
    assert_eq!(w["state"], "unavailable", "{v}");
    assert!(w["reason"].as_str().is_some_and(|r| r.contains("already installed")), "{w}");
    // The command ran, and the kernel still refused its write.
    assert_eq!(v["outcome"]["code"], 1, "{v}");
    assert!(v["stderr"].as_str().is_some_and(|s| s.contains("Read-only file system")), "{v}");
    assert!(!ws.join("x").exists());
    // Control: without the other listener the same run is observed.
    let (v, _) = touch_under(&ws, false);
    assert_eq!(v["refused_writes"]["state"], "observed", "{v}");
    assert_eq!(v["refused_writes"]["sample"][0], real(&ws).join("x").display().to_string(), "{v}");
    assert!(!ws.join("x").exists());
}

/// What the command of r0862 runs: a metadata change through a descriptor
/// opened read-only (`fchmod`, `futimens`), then the same changes by path
/// (`chmod`, `utime`), each with the errno it met.
const BY_FD_THEN_PATH: &str = "python3 -c \"import os,errno\n\
def t(n,f):\n  try: f(); print(n,'ok')\n  except OSError as e: print(n,errno.errorcode[e.errno])\n\
fd=os.open('README.md', os.O_RDONLY)\n\
t('fchmod', lambda: os.fchmod(fd, 0o600))\n\
t('futimens', lambda: os.utime(fd, (1, 1)))\n\
t('chmod', lambda: os.chmod('src/main.rs', 0o600))\n\
t('utime', lambda: os.utime('src/main.rs', (1, 1)))\"";

#[test]
fn r0862_changes_through_a_descriptor_are_refused_but_not_reported() {
    // Only the path forms stop for the observer: `fchmod`, `fchown` and
    // `futimens` go through a descriptor, whose `open` was watched (so
    // that extracting an archive, which follows each created file's `open`
    // with all three, stops once per file). The kernel refuses both forms
    // alike; the report names the paths only.
    let ws = Ws::new();
    let mode = |rel: &str| {
        use std::os::unix::fs::PermissionsExt;
        fs::metadata(ws.join(rel)).map(|m| m.permissions().mode() & 0o777).unwrap_or_else(|e| panic!("{rel}: {e}"))
    };
    let (readme, main) = (mode("README.md"), mode("src/main.rs"));
    let r = sh(&ws, BY_FD_THEN_PATH, |_| {});
    let out = stdout(&r);
    for line in ["fchmod EROFS", "futimens EROFS", "chmod EROFS", "utime EROFS"] {
        assert!(out.contains(line), "{line}: {out}");
    }
    let w = observed(&r);
    assert_eq!((w.count, w.unresolved), (2, 0), "{w:?}");
    assert_eq!(w.sample, vec![real(&ws).join("src/main.rs")], "{w:?}");
    assert_eq!((mode("README.md"), mode("src/main.rs")), (readme, main), "a refused change landed");
    // Control: writable, every change lands, unreported.
    let r = sh(&ws, BY_FD_THEN_PATH, |req| req.writable = true);
    let out = stdout(&r);
    for line in ["fchmod ok", "futimens ok", "chmod ok", "utime ok"] {
        assert!(out.contains(line), "{line}: {out}");
    }
    assert_eq!(observed(&r).count, 0);
    assert_eq!((mode("README.md"), mode("src/main.rs")), (0o600, 0o600));
    let mtime = |rel: &str| fs::metadata(ws.join(rel)).and_then(|m| m.modified()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(mtime("README.md"), std::time::UNIX_EPOCH + std::time::Duration::from_secs(1));
}

/// Exclusive creations (`O_CREAT | O_EXCL`: archives, lock and temporary
/// files) are judged by their parent directory alone (an existing entry
/// fails with `EEXIST` first), which spares the observer a lookup per
/// created file. Pinned both ways: a new name in a read-only directory is
/// refused with `EROFS` and reported, an existing one fails with `EEXIST`
/// and is not (in a read-only directory as in a writable one); control:
/// writable, the new name lands unreported.
#[test]
fn r0869_exclusive_creations_are_judged_by_their_directory() {
    let excl = opens(&[("fresh.txt", EXCL), ("README.md", EXCL), ("src/new.rs", EXCL), ("src/main.rs", EXCL)]);
    let ws = Ws::new();
    let before = ws.snapshot();
    let r = sh(&ws, &excl, |_| {});
    let out = stdout(&r);
    for line in ["fresh.txt EROFS", "README.md EEXIST", "src/new.rs EROFS", "src/main.rs EEXIST"] {
        assert!(out.contains(line), "r0869: {line} not in {out}");
    }
    let w = observed(&r);
    let root = real(&ws);
    assert_eq!(w.sample, vec![root.join("fresh.txt"), root.join("src/new.rs")], "r0869: {w:?}");
    assert_eq!((w.count, w.unresolved), (2, 0), "r0869: {w:?}");
    assert_eq!(ws.snapshot(), before, "r0869: a refused creation landed");
    // Control: writable, the new names land and nothing is reported; the
    // existing ones still fail with EEXIST.
    let r = sh(&ws, &excl, |req| req.writable = true);
    let out = stdout(&r);
    for line in ["fresh.txt made", "README.md EEXIST", "src/new.rs made", "src/main.rs EEXIST"] {
        assert!(out.contains(line), "r0869 control: {line} not in {out}");
    }
    let w = observed(&r);
    assert_eq!((w.count, w.unresolved), (0, 0), "r0869 control: {w:?}");
    assert!(ws.join("fresh.txt").exists() && ws.join("src/new.rs").exists());
}

/// Opens the kernel fails before any write check are not refused writes,
/// though they carry `O_CREAT` (found in review, all reported before):
/// `O_CREAT | O_DIRECTORY` (EINVAL, Linux 6.4), `O_PATH | O_CREAT` (ENOENT:
/// `O_PATH` creates nothing), a creating open of a name with a trailing
/// `/` (EISDIR), `O_TMPFILE | O_CREAT` (EINVAL). Pinned: each errno, and
/// nothing landed; the report is empty. Control: a plain exclusive
/// creation beside them is refused with EROFS and reported.
#[test]
fn r0870_creations_that_fail_before_the_write_check_are_not_reported() {
    let py = opens(&[
        ("d1", "os.O_CREAT|os.O_EXCL|os.O_DIRECTORY"),
        ("p1", "os.O_PATH|os.O_CREAT|os.O_EXCL"),
        ("s1/", EXCL),
        (".", "os.O_TMPFILE|os.O_CREAT|os.O_WRONLY"),
        ("d2", "os.O_CREAT|os.O_DIRECTORY"),
        ("p2", "os.O_PATH|os.O_CREAT"),
        ("s2/", "os.O_CREAT|os.O_WRONLY"),
        ("plain", EXCL),
    ]);
    let ws = Ws::new();
    let before = ws.snapshot();
    let r = sh(&ws, &py, |_| {});
    let out = stdout(&r);
    for line in
        ["d1 EINVAL", "p1 ENOENT", "s1/ EISDIR", ". EINVAL", "d2 EINVAL", "p2 ENOENT", "s2/ EISDIR", "plain EROFS"]
    {
        assert!(out.contains(line), "r0870: {line} not in {out}");
    }
    assert_eq!(ws.snapshot(), before, "r0870: something landed");
    let w = observed(&r);
    assert_eq!(w.sample, vec![real(&ws).join("plain")], "r0870: only the plain creation is a refused write: {w:?}");
    assert_eq!((w.count, w.unresolved), (1, 0), "r0870: {w:?}");
}

/// In the landlock-only mode `/proc` is the host's, outside every write
/// rule: a creation there fails at procfs's lookup (ENOENT) before
/// Landlock is asked, and is not a refused write (found in review:
/// reported before). Control: the same creation in the read-only
/// workspace is refused by Landlock (EACCES) and reported.
#[test]
fn r0871_landlock_only_creations_in_proc_are_not_reported() {
    if !landlock_only_here("r0871") {
        return;
    }
    let py = opens(&[("/proc/portcullis-r0871", EXCL), ("inws", EXCL)]);
    let ws = Ws::new();
    let r = sh(&ws, &py, |req| req.degraded = Some(Mode::LandlockOnly));
    let out = stdout(&r);
    for line in ["/proc/portcullis-r0871 ENOENT", "inws EACCES"] {
        assert!(out.contains(line), "r0871: {line} not in {out}");
    }
    let w = observed(&r);
    assert_eq!(w.sample, vec![real(&ws).join("inws")], "r0871: {w:?}");
    assert_eq!((w.count, w.unresolved), (1, 0), "r0871: {w:?}");
}
