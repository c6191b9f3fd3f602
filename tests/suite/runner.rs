//! The library every caller uses: the policy, the gate, the audit and the
//! sandbox in one call (`portcullis::runner`). Each test runs for real and
//! checks from outside what was written and what the audit recorded.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use portcullis::audit::{Audit, Event, JsonlAudit, RefusalKind};
use portcullis::gate::{Action, BoxFuture, Decision, Gate, GateError};
use portcullis::runner::{Exec, ExecOptions, Fs, RunError, Runner};
use portcullis::sandbox::RunOptions;

use super::util::{cli, rt, sandbox, MemAudit as Mem, Ws};

/// A gate that always answers the same, and remembers what it saw.
struct Fixed {
    answer: Result<Decision, String>,
    seen: Mutex<Vec<Action>>,
}

impl Fixed {
    fn new(answer: Decision) -> Arc<Fixed> {
        Arc::new(Fixed { answer: Ok(answer), seen: Mutex::new(Vec::new()) })
    }
    fn failing(why: &str) -> Arc<Fixed> {
        Arc::new(Fixed { answer: Err(why.into()), seen: Mutex::new(Vec::new()) })
    }
}

impl Gate for Fixed {
    fn check<'a>(&'a self, action: &'a Action) -> BoxFuture<'a, Result<Decision, GateError>> {
        if let Ok(mut s) = self.seen.lock() {
            s.push(action.clone());
        }
        let a = match &self.answer {
            Ok(d) => Ok(d.clone()),
            Err(why) => Err(GateError(why.clone().into())),
        };
        Box::pin(std::future::ready(a))
    }
}

fn runner(ws: &Ws, gate: Option<Arc<dyn Gate>>, audit: Option<Arc<dyn Audit>>) -> Runner {
    let mut b = Runner::builder().workspace(ws.path()).sandbox(sandbox());
    if let Some(g) = gate {
        b = b.gate(g);
    }
    if let Some(a) = audit {
        b = b.audit(a);
    }
    b.build().unwrap_or_else(|e| panic!("runner: {}", portcullis::error_chain(&e)))
}

fn words(argv: &[&str]) -> Vec<OsString> {
    argv.iter().map(OsString::from).collect()
}

fn exec(r: &Runner, argv: &[&str], opts: &ExecOptions) -> Result<Exec, RunError> {
    rt().block_on(r.exec(&words(argv), opts, RunOptions::default()))
}

fn real(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Writes `probe` in the workspace and `sub/probe`, printing each errno.
const WRITER: &str = "for f in probe sub/probe; do if echo x > $f 2>/dev/null; then echo \"$f ok\"; else echo \"$f EROFS?\"; fi; done; \
     python3 -c 'import os,errno\nfor f in (\"probe2\",\"sub/probe2\"):\n  try: open(f,\"w\").close(); print(f,\"ok\")\n  except OSError as e: print(f, errno.errorcode[e.errno])'";

fn allow(writable: bool, grants: Option<Vec<PathBuf>>) -> Decision {
    Decision::Allow { writable, write_grants: grants, rule: Some("test".into()) }
}

/// Every row of the access table (ask writable / gate allows, takes away,
/// tries to grant, refuses), plus narrowing and attempted widening of
/// per-path grants: what the command could write is checked from outside,
/// and each refused write is pinned to EROFS.
#[test]
fn r0180_every_row_of_the_access_table() {
    struct Row {
        name: &'static str,
        asked_writable: bool,
        asked_grants: Vec<&'static str>,
        /// The gate's answer, for a workspace whose real path is given.
        answer: fn(&Path) -> Decision,
        lands: &'static [&'static str],
    }
    let rows = vec![
        Row {
            name: "writable, gate allows",
            asked_writable: true,
            asked_grants: vec![],
            answer: |_| allow(true, None),
            lands: &["probe", "sub/probe"],
        },
        Row {
            name: "writable, gate takes it away",
            asked_writable: true,
            asked_grants: vec![],
            answer: |_| allow(false, None),
            lands: &[],
        },
        Row {
            name: "read-only, gate tries to grant",
            asked_writable: false,
            asked_grants: vec![],
            answer: |_| allow(true, None),
            lands: &[],
        },
        Row {
            name: "read-only, gate allows",
            asked_writable: false,
            asked_grants: vec![],
            answer: |_| allow(false, None),
            lands: &[],
        },
        Row {
            name: "writable, gate narrows to sub",
            asked_writable: true,
            asked_grants: vec![],
            answer: |ws| allow(false, Some(vec![ws.join("sub")])),
            lands: &["sub/probe"],
        },
        Row {
            name: "grant sub, gate widens to sub and the workspace",
            asked_writable: false,
            asked_grants: vec!["sub"],
            answer: |ws| allow(true, Some(vec![ws.join("sub"), ws.to_path_buf()])),
            lands: &["sub/probe"],
        },
        Row {
            name: "grant other, gate names sub",
            asked_writable: false,
            asked_grants: vec!["other"],
            answer: |ws| allow(false, Some(vec![ws.join("sub")])),
            lands: &[],
        },
    ];
    for refuse_writable in [true, false] {
        // Either way, a refusal runs nothing.
        let ws = Ws::new();
        let audit = Arc::new(Mem::default());
        let r = runner(
            &ws,
            Some(Fixed::new(Decision::Refuse { reason: "needs review".into(), rule: None })),
            Some(audit.clone()),
        );
        let opts = ExecOptions { writable: refuse_writable, ..Default::default() };
        match exec(&r, &["sh", "-c", "echo x > probe"], &opts) {
            Ok(Exec::Refused(f)) => {
                assert_eq!(f.kind, RefusalKind::RefusedByGate);
                assert_eq!(f.message, "needs review");
            }
            other => panic!("a refusing gate let it run: {other:?}"),
        }
        assert!(!ws.join("probe").exists(), "nothing runs after a refusal");
        assert_eq!(audit.kinds(), ["denied"]);
    }
    for row in rows {
        let ws = Ws::new();
        ws.write("sub/.keep", "");
        ws.write("other/.keep", "");
        let answer = (row.answer)(&real(ws.path()));
        let r = runner(&ws, Some(Fixed::new(answer)), None);
        let opts = ExecOptions {
            writable: row.asked_writable,
            write: row.asked_grants.iter().map(PathBuf::from).collect(),
            ..Default::default()
        };
        let ran = match exec(&r, &["sh", "-c", WRITER], &opts) {
            Ok(Exec::Ran(ran)) => ran,
            other => panic!("{}: {other:?}", row.name),
        };
        let out = String::from_utf8_lossy(&ran.result.stdout).into_owned();
        for f in ["probe", "sub/probe"] {
            let landed = ws.join(f).exists();
            assert_eq!(landed, row.lands.contains(&f), "{}: {f} (stdout {out})", row.name);
            let f2 = format!("{f}2");
            if row.lands.contains(&f) {
                assert!(out.contains(&format!("{f2} ok")), "{}: {out}", row.name);
            } else {
                // The control is the rows where it lands; here the kernel refused it up front.
                assert!(out.contains(&format!("{f2} EROFS")), "{}: {f2} not refused with EROFS: {out}", row.name);
                assert!(!ws.join(&f2).exists());
            }
        }
        // The result says what access the command had.
        let whole = row.lands.contains(&"probe");
        assert_eq!(ran.result.writable, whole, "{}", row.name);
        if row.name.starts_with("grant sub, gate widens") {
            assert_eq!(ran.dropped_grants, vec![real(ws.path())], "the widening is reported");
        }
    }
}

/// A gate that cannot decide is a fault: nothing runs, nothing is recorded
/// as allowed or denied, and the caller sees the gate's error.
#[test]
fn r0181_a_gate_that_fails_propagates_as_an_error() {
    let ws = Ws::new();
    let audit = Arc::new(Mem::default());
    let gate = Fixed::failing("approval service unreachable");
    let r = runner(&ws, Some(gate.clone()), Some(audit.clone()));
    let opts = ExecOptions { writable: true, ..Default::default() };
    match exec(&r, &["sh", "-c", "echo x > probe"], &opts) {
        Err(e @ RunError::Gate(_)) => {
            assert!(portcullis::error_chain(&e).contains("approval service unreachable"));
            assert_eq!(e.exit_code(), 125);
        }
        other => panic!("a failing gate must be an error, not {other:?}"),
    }
    assert!(!ws.join("probe").exists());
    assert!(audit.kinds().is_empty(), "neither allowed nor denied: {:?}", audit.kinds());
    assert_eq!(gate.seen.lock().map(|s| s.len()).unwrap_or(0), 1, "the gate was asked");
    // Control: the same runner with an allowing gate writes.
    let r = runner(&ws, Some(Fixed::new(allow(true, None))), None);
    assert!(matches!(exec(&r, &["sh", "-c", "echo x > probe"], &opts), Ok(Exec::Ran(_))));
    assert!(ws.join("probe").exists());
}

/// The seed's trio: `find -delete` asked writable, the gate takes write
/// access away: the tree is intact and the command met EROFS; the control
/// (the gate allows) deletes the tree.
#[test]
fn r0182_find_delete_without_write_access_deletes_nothing() {
    let line = "find . -mindepth 1 -delete; echo rc=$?";
    let ws = Ws::new();
    ws.write("keep.txt", "keep");
    let before = ws.snapshot();
    let audit = Arc::new(Mem::default());
    let r = runner(&ws, Some(Fixed::new(allow(false, None))), Some(audit.clone()));
    let opts = ExecOptions { writable: true, ..Default::default() };
    let ran = match exec(&r, &["sh", "-c", line], &opts) {
        Ok(Exec::Ran(r)) => r,
        other => panic!("{other:?}"),
    };
    assert_eq!(ws.snapshot(), before, "nothing deleted");
    assert_eq!(ws.read("keep.txt"), "keep");
    let err = String::from_utf8_lossy(&ran.result.stderr);
    assert!(err.contains("Read-only file system"), "the refusal is EROFS: {err}");
    assert!(!ran.result.writable && ran.result.write_grants.is_empty(), "the result says it had no write access");
    assert_eq!(audit.kinds(), ["allowed", "outcome"]);
    if let Ok(events) = audit.0.lock() {
        match &events[0] {
            Event::Allowed { effective, rule, .. } => {
                assert!(!effective.writable, "the allowed record carries the effective access");
                assert_eq!(rule.as_deref(), Some("test"));
            }
            e => panic!("{e:?}"),
        }
    }
    // Control: with write access the same line empties the tree.
    let ws2 = Ws::new();
    ws2.write("keep.txt", "keep");
    let r = runner(&ws2, Some(Fixed::new(allow(true, None))), None);
    assert!(matches!(exec(&r, &["sh", "-c", line], &opts), Ok(Exec::Ran(_))));
    assert!(!ws2.join("keep.txt").exists(), "the control deletes");
}

fn policy_file(dir: &Path, body: &str) -> PathBuf {
    let p = dir.join("policy.toml");
    std::fs::write(&p, body).unwrap_or_else(|e| panic!("{e}"));
    p
}

fn log_lines(p: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// Through the command line, with the policy's `[[gate]]` rules and an
/// audit log: a refused `rm -rf` leaves the tree intact, exits 125 with a
/// `refused-by-gate` error naming the rule, and is audited as denied; a
/// policy refusal says `refused-by-policy`; the log verifies.
#[test]
fn r0183_a_refused_rm_rf_is_intact_and_audited_as_refused() {
    let ws = Ws::new();
    let before = ws.snapshot();
    let cfg = tempfile::tempdir_in(super::util::test_root()).unwrap_or_else(|e| panic!("{e}"));
    let pol = policy_file(
        cfg.path(),
        &format!(
            "workspace = {:?}\n[shell]\nallow = [\"rm\", \"ls\"]\n\n[[gate]]\nname = \"no-rm\"\ncommand = \"rm\"\nanswer = \"refuse\"\nreason = \"removing files needs review\"\n",
            ws.path()
        ),
    );
    let log = cfg.path().join("audit.jsonl");
    let o = cli()
        .args(["exec", "--json", "--writable", "--policy"])
        .arg(&pol)
        .arg("--audit")
        .arg(&log)
        .args(["--", "rm", "-rf", "src"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(o.status.code(), Some(125), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v["error"]["kind"], "refused-by-gate", "{v}");
    assert_eq!(v["error"]["rule"], "no-rm", "{v}");
    assert_eq!(v["writable"], false);
    assert_eq!(ws.snapshot(), before, "the tree is intact");
    let lines = log_lines(&log);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["event"], "denied");
    assert_eq!(lines[0]["refusal"], "refused-by-gate");
    assert_eq!(lines[0]["rule"], "no-rm");
    // A policy refusal is its own kind, recorded too.
    let o = cli()
        .args(["exec", "--json", "--policy"])
        .arg(&pol)
        .arg("--audit")
        .arg(&log)
        .args(["--", "curl", "http://example.com"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(o.status.code(), Some(125));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v["error"]["kind"], "refused-by-policy", "{v}");
    // Control: an allowed command runs and is recorded allowed, then its outcome.
    let o = cli()
        .args(["exec", "--policy"])
        .arg(&pol)
        .arg("--audit")
        .arg(&log)
        .args(["--", "ls", "src"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let events: Vec<String> = log_lines(&log).iter().map(|l| l["event"].as_str().unwrap_or("").to_string()).collect();
    assert_eq!(events, ["denied", "denied", "allowed", "outcome"]);
    let o = cli().args(["audit", "verify"]).arg(&log).output().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Two commands at once over one workspace through one runner: the
/// read-only one cannot write while the writable one runs, and cannot
/// borrow its access; the writable one's write lands.
#[test]
fn r0184_a_read_only_command_beside_a_writable_one_cannot_write() {
    let ws = Ws::new();
    let r = runner(&ws, None, None);
    let rw = ExecOptions { writable: true, ..Default::default() };
    let ro = ExecOptions::default();
    let rt = rt();
    let (a, b) = rt.block_on(async {
        let slow = words(&["sh", "-c", "echo started > w-started; sleep 1; echo w > w.txt"]);
        let quick = words(&[
            "sh",
            "-c",
            "while [ ! -e w-started ]; do sleep 0.05; done; if echo r > r.txt; then echo wrote; else echo refused; fi",
        ]);
        tokio::join!(r.exec(&slow, &rw, RunOptions::default()), r.exec(&quick, &ro, RunOptions::default()))
    });
    let (Ok(Exec::Ran(a)), Ok(Exec::Ran(b))) = (a, b) else { panic!("both run") };
    assert_eq!(a.result.outcome.exit_status(), 0);
    assert!(ws.join("w.txt").exists(), "the writable one wrote (control)");
    assert!(!ws.join("r.txt").exists(), "the read-only one did not");
    assert!(String::from_utf8_lossy(&b.result.stdout).contains("refused"));
    assert!(String::from_utf8_lossy(&b.result.stderr).contains("Read-only file system"));
    assert!(!b.result.writable);
}

/// Direct file writes go through the same jail, gate and audit: a gate
/// rule refuses them as it would a command, the jail refuses an escape,
/// git's files and protected paths stay read-only, and an allowed write
/// lands whole.
#[test]
fn r0185_direct_file_writes_are_gated_and_audited() {
    let ws = Ws::with_git();
    let cfg = tempfile::tempdir_in(super::util::test_root()).unwrap_or_else(|e| panic!("{e}"));
    let pol = policy_file(
        cfg.path(),
        &format!(
            "workspace = {:?}\n[shell]\nallow = [\"ls\"]\n\n[[gate]]\nname = \"no-secrets\"\nkind = \"fs.write\"\npath = \"secrets/**\"\nanswer = \"refuse\"\nreason = \"secrets are written by people\"\n\n[[gate]]\nname = \"docs-read-only\"\nkind = [\"fs.write\", \"fs.remove\"]\npath = \"docs/**\"\nanswer = \"read-only\"\n",
            ws.path()
        ),
    );
    let audit = Arc::new(Mem::default());
    let r = Runner::builder()
        .policy_file(&pol)
        .and_then(|b| b.sandbox(sandbox()).audit(audit.clone()).build())
        .unwrap_or_else(|e| panic!("{}", portcullis::error_chain(&e)));
    let rt = rt();
    // Allowed: lands whole, parents made.
    match rt.block_on(r.write_file(Path::new("notes/today.md"), b"hello\n")) {
        Ok(Fs::Done(d)) => assert_eq!(d.bytes, Some(6)),
        other => panic!("{other:?}"),
    }
    assert_eq!(ws.read("notes/today.md"), "hello\n");
    let refusals = [
        ("secrets/key", RefusalKind::RefusedByGate),
        ("docs/index.md", RefusalKind::RefusedByGate),
        (".git/hooks/pre-commit", RefusalKind::RefusedByPolicy),
        (".git/config", RefusalKind::RefusedByPolicy),
        ("../escape.txt", RefusalKind::RefusedByPolicy),
    ];
    for (p, kind) in refusals {
        match rt.block_on(r.write_file(Path::new(p), b"x")) {
            Ok(Fs::Refused(f)) => assert_eq!(f.kind, kind, "{p}: {f}"),
            other => panic!("{p}: {other:?}"),
        }
        assert!(!ws.join(p).exists() || p.starts_with(".git/config"), "{p} not written");
    }
    assert_eq!(ws.read(".git/config"), "[core]\n\trepositoryformatversion = 0\n");
    // A link inside the workspace that leads out is judged where it leads.
    std::os::unix::fs::symlink("/etc", ws.join("etc-link")).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(rt.block_on(r.write_file(Path::new("etc-link/passwd"), b"x")), Ok(Fs::Refused(_))));
    // Remove and mkdir take the same path.
    assert!(matches!(rt.block_on(r.mkdir(Path::new("a/b/c"))), Ok(Fs::Done(_))));
    assert!(ws.join("a/b/c").is_dir());
    assert!(matches!(rt.block_on(r.remove(Path::new("a/b/c"))), Ok(Fs::Done(_))));
    assert!(!ws.join("a/b/c").exists());
    ws.write("docs/keep.md", "keep");
    assert!(matches!(rt.block_on(r.remove(Path::new("docs/keep.md"))), Ok(Fs::Refused(_))));
    assert_eq!(ws.read("docs/keep.md"), "keep");
    let kinds = audit.kinds();
    assert_eq!(kinds.iter().filter(|k| **k == "denied").count(), 7, "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| **k == "allowed").count(), 3, "{kinds:?}");
}

/// A host process killed mid-command leaves its `allowed` record on disk,
/// and the log still verifies.
#[test]
fn r0186_a_host_killed_mid_command_leaves_its_allowed_record() {
    let ws = Ws::new();
    let cfg = tempfile::tempdir_in(super::util::test_root()).unwrap_or_else(|e| panic!("{e}"));
    let log = cfg.path().join("audit.jsonl");
    let mut child = cli()
        .args(["exec", "--writable", "--workspace"])
        .arg(ws.path())
        .arg("--audit")
        .arg(&log)
        .args(["--", "sh", "-c", "echo started > started; sleep 30"])
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let t0 = std::time::Instant::now();
    while !ws.join("started").exists() {
        assert!(t0.elapsed().as_secs() < 20, "the command never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGKILL);
    let _ = child.wait();
    let lines = log_lines(&log);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert_eq!(lines[0]["event"], "allowed");
    assert_eq!(lines[0]["effective"]["writable"], true);
    let o = cli().args(["audit", "verify"]).arg(&log).output().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stdout));
    // The audit log is not the command's to write: one inside the workspace is refused.
    let o = cli()
        .args(["exec", "--writable", "--workspace"])
        .arg(ws.path())
        .arg("--audit")
        .arg(ws.join("audit.jsonl"))
        .args(["--", "true"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(o.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&o.stderr).contains("audit"), "{}", String::from_utf8_lossy(&o.stderr));
    let _ = JsonlAudit::open(cfg.path().join("other.jsonl"));
}

/// `check` shows an accepted line to the gate as `exec --writable` would,
/// and a gate refusal refuses the line; `exec` says in words when the gate
/// left the command less than it asked for.
#[test]
fn r0187_check_shows_the_gate_and_exec_says_what_it_took_away() {
    let ws = Ws::with_git();
    let cfg = tempfile::tempdir_in(super::util::test_root()).unwrap_or_else(|e| panic!("{e}"));
    let pol = policy_file(
        cfg.path(),
        &format!(
            "workspace = {:?}\n[shell]\ninterpreter = \"sh\"\nallow = [\"git\", \"touch\"]\n\n[[gate]]\nname = \"no-push\"\ncommand = \"git\"\nargs = \"push*\"\nanswer = \"refuse\"\nreason = \"pushing needs review\"\n\n[[gate]]\nname = \"git-writes-git\"\ncommand = \"git\"\nanswer = \"grant\"\npaths = [\".git\"]\n",
            ws.path()
        ),
    );
    let check = |line: &str, json: bool| {
        let mut c = cli();
        c.arg("check").arg("--policy").arg(&pol);
        if json {
            c.arg("--json");
        }
        c.args(["--", line]).output().unwrap_or_else(|e| panic!("{e}"))
    };
    let o = check("git push origin main", false);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stdout).contains("gate: refuses it (rule no-push)"), "{o:?}");
    let o = check("git status", false);
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("gate: may write only") && out.contains(".git (rule git-writes-git)"), "{out}");
    let o = check("touch x", true);
    assert_eq!(o.status.code(), Some(0), "control: the checker accepts it");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v["gate"]["decision"], "allow", "{v}");
    assert_eq!(v["gate"]["rule"], "default", "{v}");
    // exec: the gate's default answer for touch is read-only; the user is told.
    let o = cli()
        .args(["exec", "--writable", "--policy"])
        .arg(&pol)
        .args(["--", "touch x"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(0));
    assert!(err.contains("Read-only file system"), "{err}");
    assert!(
        err.contains("asked for write access to the workspace; the gate (rule default) allowed no write access"),
        "{err}"
    );
    assert!(!ws.join("x").exists());
}

/// The policy's `audit` key: relative to the policy file's directory; its
/// `audit_batch` syncs in batches; 0 is refused naming the key.
#[test]
fn r0188_the_policy_names_the_audit_log_and_its_batch() {
    let ws = Ws::new();
    let cfg = tempfile::tempdir_in(super::util::test_root()).unwrap_or_else(|e| panic!("{e}"));
    let body = |batch: &str| {
        format!("workspace = {:?}\naudit = \"logs/a.jsonl\"\n{batch}[shell]\nallow = [\"ls\"]\n", ws.path())
    };
    std::fs::create_dir(cfg.path().join("logs")).unwrap_or_else(|e| panic!("{e}"));
    let pol = policy_file(cfg.path(), &body("audit_batch = 4\n"));
    for _ in 0..3 {
        let o =
            cli().args(["exec", "--policy"]).arg(&pol).args(["--", "ls"]).output().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let log = cfg.path().join("logs/a.jsonl");
    assert_eq!(log_lines(&log).len(), 6, "two records per command, synced at exit");
    let o = cli().args(["audit", "verify"]).arg(&log).output().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(o.status.code(), Some(0));
    let pol = policy_file(cfg.path(), &body("audit_batch = 0\n"));
    let o = cli().args(["exec", "--policy"]).arg(&pol).args(["--", "ls"]).output().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(o.status.code(), Some(125));
    assert!(String::from_utf8_lossy(&o.stderr).contains("audit_batch"), "{}", String::from_utf8_lossy(&o.stderr));
}
