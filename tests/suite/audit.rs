//! The tamper-evident audit log (issue 9, "The audit"): the JSON Lines
//! writer, `portcullis audit verify` and `portcullis audit grants`.
//!
//! Every tampering test starts from a log the writer made and checks, as a
//! control, that it verifies before it is changed; then it changes the file
//! from outside and pins the first bad line and its kind.

use std::fs;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use portcullis::audit::jsonl::Sync;
use portcullis::audit::{Audit, Event, Head, JsonlAudit, RefusalKind, RefusedWritesRecord, Status};
use portcullis::gate::{Access, Action, Backend, FsAction, ShellExec};
use portcullis::policy::Interpreter;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::util::*;

fn tmpdir() -> tempfile::TempDir {
    tempfile::Builder::new().prefix("pc-audit-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("tempdir: {e}"))
}

fn sha(b: &[u8]) -> String {
    Sha256::digest(b).iter().map(|b| format!("{b:02x}")).collect()
}

fn shell(line: &str, ws: &Path, asked: Access) -> Action {
    Action::ShellExec(ShellExec {
        line: line.to_string(),
        interpreter: Interpreter::None,
        commands: Vec::new(),
        cwd: ws.to_path_buf(),
        workspace: Some(ws.to_path_buf()),
        asked,
        background: false,
        backend: Backend::Sandbox,
    })
}

fn allowed(id: &str, action: Action, effective: Access, rule: Option<&str>) -> Event {
    Event::Allowed { id: id.into(), action, effective, rule: rule.map(String::from) }
}

fn outcome(id: &str, effective: Access, refused: Option<RefusedWritesRecord>) -> Event {
    Event::Outcome {
        id: id.into(),
        status: Status::Completed,
        exit_code: Some(0),
        signal: None,
        duration_ms: 12,
        effective,
        refused_writes: refused,
        removed: Vec::new(),
        error: None,
    }
}

fn writable() -> Access {
    Access { writable: true, write_grants: Vec::new() }
}

/// A log of `n` records (allowed/outcome pairs, ids `c0`, `c1`, …).
fn make_log(dir: &Path, n: usize) -> (PathBuf, Head) {
    let path = dir.join("audit.jsonl");
    let log = JsonlAudit::open(&path).unwrap_or_else(|e| panic!("open: {e}"));
    let mut head = None;
    for i in 0..n {
        let id = format!("c{}", i / 2);
        let ev = if i % 2 == 0 {
            allowed(&id, shell(&format!("echo {i}"), dir, Access::read_only()), Access::read_only(), None)
        } else {
            outcome(&id, Access::read_only(), None)
        };
        head = Some(log.append(&ev).unwrap_or_else(|e| panic!("append {i}: {e}")));
    }
    (path, head.unwrap_or_else(|| panic!("no records")))
}

fn lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        .lines()
        .map(String::from)
        .collect()
}

fn write_lines(path: &Path, lines: &[String]) {
    let mut s = lines.join("\n");
    s.push('\n');
    fs::write(path, s).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
}

/// `portcullis audit verify FILE [extra] --json`: (exit status, report).
fn verify_cli(path: &Path, extra: &[&str]) -> (i32, Value) {
    let out = cli()
        .args(["audit", "verify"])
        .arg(path)
        .args(extra)
        .arg("--json")
        .output()
        .unwrap_or_else(|e| panic!("spawn portcullis: {e}"));
    let code = out.status.code().unwrap_or(-1);
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "verify --json output ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (code, v)
}

/// The first bad line and its kind, after checking the exit status is 1.
fn tampered_at(path: &Path) -> (u64, String) {
    let (code, v) = verify_cli(path, &[]);
    assert_eq!(code, 1, "a tampered log must exit 1: {v}");
    assert_eq!(v["intact"], false, "{v}");
    let line = v["first_bad"]["line"].as_u64().unwrap_or_else(|| panic!("no first_bad line: {v}"));
    let kind = v["first_bad"]["problem"]["kind"].as_str().unwrap_or_default().to_string();
    (line, kind)
}

/// Control: the log verifies before a test changes it.
fn assert_intact(path: &Path) -> Value {
    let (code, v) = verify_cli(path, &[]);
    assert_eq!(code, 0, "an intact log must exit 0: {v}");
    assert_eq!(v["intact"], true, "{v}");
    v
}

#[test]
fn r0160_intact_log_verifies_and_shows_the_format() {
    let d = tmpdir();
    let (path, head) = make_log(d.path(), 6);
    let v = assert_intact(&path);
    assert_eq!(v["records"], 6);
    assert_eq!(v["head"]["seq"], 5);
    assert_eq!(v["head"]["hash"], head.hash.as_str(), "verify's head is the writer's");
    let mode = fs::metadata(&path).unwrap_or_else(|e| panic!("stat: {e}")).permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "a new log is created 0600");

    let ls = lines(&path);
    // The fixed field order, and the chain rule, checked independently.
    let keys = |l: &str| -> Vec<String> {
        let v: serde_json::Map<String, Value> = serde_json::from_str(l).unwrap_or_else(|e| panic!("json: {e}"));
        v.keys().cloned().collect()
    };
    // serde_json's Map keeps keys sorted unless preserve_order: check order on the text.
    for (i, l) in ls.iter().enumerate() {
        let want = if i == 0 { "{\"v\":1,\"seq\":0,\"time\":\"" } else { "{\"v\":1,\"seq\":" };
        assert!(l.starts_with(want), "line {}: {l}", i + 1);
        let p = |k: &str| l.find(&format!("\"{k}\":")).unwrap_or_else(|| panic!("no {k} in {l}"));
        assert!(p("seq") < p("time") && p("time") < p("pid") && p("pid") < p("prev") && p("prev") < p("event"), "{l}");
        assert!(keys(l).contains(&"event".to_string()));
    }
    let first: Value = serde_json::from_str(&ls[0]).unwrap_or_else(|e| panic!("json: {e}"));
    let genesis = first["genesis"].as_str().unwrap_or_else(|| panic!("no genesis: {first}"));
    assert_eq!(genesis.len(), 64);
    assert_eq!(first["prev"], sha(genesis.as_bytes()).as_str(), "line 1's prev is SHA-256 of the genesis text");
    let time = first["time"].as_str().unwrap_or_default();
    assert!(time.len() == 24 && time.ends_with('Z') && &time[19..20] == ".", "RFC 3339 UTC with ms: {time}");
    assert_eq!(first["pid"], std::process::id());
    for i in 1..ls.len() {
        let v: Value = serde_json::from_str(&ls[i]).unwrap_or_else(|e| panic!("json: {e}"));
        assert_eq!(v["seq"], i);
        assert_eq!(v["prev"], sha(ls[i - 1].as_bytes()).as_str(), "line {}'s prev", i + 1);
        assert!(v.get("genesis").is_none());
    }
    // A second log gets another genesis.
    let d2 = tmpdir();
    let (p2, _) = make_log(d2.path(), 1);
    let other: Value = serde_json::from_str(&lines(&p2)[0]).unwrap_or_else(|e| panic!("json: {e}"));
    assert_ne!(other["genesis"], first["genesis"]);

    // The text form names the head.
    let out = cli().args(["audit", "verify"]).arg(&path).output().unwrap_or_else(|e| panic!("spawn: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("intact, 6 record(s)") && text.contains(&head.to_string()), "{text}");
}

#[test]
fn r0161_an_edited_field_is_named_at_its_line() {
    let d = tmpdir();
    let (path, _) = make_log(d.path(), 6);
    assert_intact(&path);
    let mut ls = lines(&path);
    assert!(ls[2].contains("echo 2"));
    ls[2] = ls[2].replace("echo 2", "echo X");
    write_lines(&path, &ls);
    assert_eq!(tampered_at(&path), (3, "edited".into()));

    // An edited seq on a line that still chains from the one before.
    let d = tmpdir();
    let (path, _) = make_log(d.path(), 4);
    let mut ls = lines(&path);
    ls[1] = ls[1].replace("\"seq\":1,", "\"seq\":7,");
    write_lines(&path, &ls);
    assert_eq!(tampered_at(&path), (2, "seq-edited".into()));
}

#[test]
fn r0162_a_dropped_middle_record_is_named() {
    let d = tmpdir();
    let (path, _) = make_log(d.path(), 6);
    assert_intact(&path);
    let mut ls = lines(&path);
    ls.remove(2);
    write_lines(&path, &ls);
    let (code, v) = verify_cli(&path, &[]);
    assert_eq!(code, 1);
    assert_eq!(v["first_bad"]["line"], 3, "{v}");
    assert_eq!(v["first_bad"]["problem"], serde_json::json!({"kind": "dropped", "found": 3, "expected": 2}));
    assert_eq!(v["records"], 2, "the two lines before it chain");
}

#[test]
fn r0163_swapped_records_are_named() {
    let d = tmpdir();
    let (path, _) = make_log(d.path(), 6);
    assert_intact(&path);
    let mut ls = lines(&path);
    ls.swap(2, 3);
    write_lines(&path, &ls);
    assert_eq!(tampered_at(&path).0, 3);
    // Moving a record back (to after its successor's successor).
    let d = tmpdir();
    let (path, _) = make_log(d.path(), 6);
    let mut ls = lines(&path);
    let l = ls.remove(1);
    ls.insert(3, l);
    write_lines(&path, &ls);
    assert_eq!(tampered_at(&path), (2, "dropped".into()));
}

#[test]
fn r0164_an_inserted_record_with_a_recomputed_hash_breaks_the_chain_after_it() {
    let d = tmpdir();
    let (path, _) = make_log(d.path(), 6);
    assert_intact(&path);
    let mut ls = lines(&path);
    // A forger who knows the format: seq 2, prev = the hash of line 2.
    let forged = format!(
        "{{\"v\":1,\"seq\":2,\"time\":\"2030-01-01T00:00:00.000Z\",\"pid\":1,\"prev\":\"{}\",\"event\":\"outcome\",\"id\":\"forged\",\"status\":\"completed\",\"duration_ms\":1,\"effective\":{{\"writable\":true}}}}",
        sha(ls[1].as_bytes())
    );
    ls.insert(2, forged);
    write_lines(&path, &ls);
    let (code, v) = verify_cli(&path, &[]);
    assert_eq!(code, 1);
    assert_eq!(v["first_bad"]["line"], 3, "the forged line itself: {v}");
    assert_eq!(v["first_bad"]["problem"], serde_json::json!({"kind": "inserted", "through": 3}));
}

#[test]
fn r0165_a_torn_last_line_is_named_and_never_chained_over() {
    let d = tmpdir();
    let (path, _) = make_log(d.path(), 5);
    assert_intact(&path);
    let text = fs::read(&path).unwrap_or_else(|e| panic!("read: {e}"));
    let cut = text.len() - 20;
    fs::write(&path, &text[..cut]).unwrap_or_else(|e| panic!("write: {e}"));
    assert_eq!(tampered_at(&path), (5, "torn".into()));

    // The writer refuses to append over it, naming the line, and changes nothing.
    let before = fs::read(&path).unwrap_or_else(|e| panic!("read: {e}"));
    let log = JsonlAudit::open(&path).unwrap_or_else(|e| panic!("open: {e}"));
    let e = log
        .append(&outcome("x", Access::read_only(), None))
        .err()
        .unwrap_or_else(|| panic!("append over a torn line succeeded"));
    assert_eq!(e.source.kind(), std::io::ErrorKind::InvalidData);
    assert!(e.to_string().contains("line 5 does not end with a newline"), "{e}");
    assert_eq!(fs::read(&path).unwrap_or_default(), before);
}

#[test]
fn r0166_appended_garbage_is_named() {
    let d = tmpdir();
    let (path, _) = make_log(d.path(), 4);
    assert_intact(&path);
    let mut ls = lines(&path);
    ls.push("garbage".into());
    write_lines(&path, &ls);
    assert_eq!(tampered_at(&path), (5, "not-json".into()));
    // JSON that is not a record.
    let mut ls = lines(&path);
    ls[4] = "{\"hello\":1}".into();
    write_lines(&path, &ls);
    assert_eq!(tampered_at(&path), (5, "not-a-record".into()));
    // An empty line.
    let mut ls = lines(&path);
    ls[4] = String::new();
    write_lines(&path, &ls);
    assert_eq!(tampered_at(&path), (5, "not-json".into()));
}

#[test]
fn r0167_genesis_changes_and_cut_starts_are_named() {
    let d = tmpdir();
    let (path, _) = make_log(d.path(), 4);
    assert_intact(&path);
    let ls = lines(&path);
    let first: Value = serde_json::from_str(&ls[0]).unwrap_or_else(|e| panic!("json: {e}"));
    let g = first["genesis"].as_str().unwrap_or_default().to_string();
    let g2: String = g.chars().rev().collect();

    // The genesis changed alone.
    let mut t = ls.clone();
    t[0] = t[0].replace(&g, &g2);
    write_lines(&path, &t);
    assert_eq!(tampered_at(&path), (1, "genesis-mismatch".into()));
    // The genesis and line 1's prev changed together: line 2 no longer chains.
    let mut t = ls.clone();
    t[0] = t[0].replace(&g, &g2).replace(&sha(g.as_bytes()), &sha(g2.as_bytes()));
    write_lines(&path, &t);
    assert_eq!(tampered_at(&path), (1, "edited".into()));
    // The first record cut off.
    write_lines(&path, &ls[1..]);
    assert_eq!(tampered_at(&path), (1, "first-seq-not-zero".into()));
    // A second log appended to the first.
    let d2 = tmpdir();
    let (p2, _) = make_log(d2.path(), 2);
    let mut t = ls.clone();
    t.extend(lines(&p2));
    write_lines(&path, &t);
    assert_eq!(tampered_at(&path), (5, "second-genesis".into()));
}

#[test]
fn r0168_a_recorded_head_finds_cut_ends_edited_last_records_and_replaced_logs() {
    let d = tmpdir();
    let (path, head) = make_log(d.path(), 6);
    let h = head.to_string();
    let (code, v) = verify_cli(&path, &["--head", &h]);
    assert_eq!((code, &v["intact"]), (0, &Value::Bool(true)), "control: the right head: {v}");
    let ls = lines(&path);

    // Two records cut off at the end: the chain alone cannot tell (the
    // documented limit) ...
    write_lines(&path, &ls[..4]);
    assert_intact(&path);
    // ... the recorded head can.
    let (code, v) = verify_cli(&path, &["--head", &h]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["first_bad"]["problem"]["kind"], "ends-before-head");
    assert_eq!(v["first_bad"]["line"], 5);

    // The last record edited: the same.
    let mut t = ls.clone();
    t[5] = t[5].replace("\"duration_ms\":12", "\"duration_ms\":13");
    write_lines(&path, &t);
    assert_intact(&path);
    let (code, v) = verify_cli(&path, &["--head", &h]);
    assert_eq!(code, 1, "{v}");
    assert_eq!(v["first_bad"]["problem"]["kind"], "differs-from-head");
    assert_eq!(v["first_bad"]["line"], 6);

    // The whole log replaced by another of the same length.
    let d2 = tmpdir();
    let (p2, _) = make_log(d2.path(), 6);
    assert_eq!(verify_cli(&p2, &["--head", &h]).0, 1);

    // A log that grew since the head was recorded still matches it.
    write_lines(&path, &ls);
    let log = JsonlAudit::open(&path).unwrap_or_else(|e| panic!("open: {e}"));
    log.append(&outcome("late", Access::read_only(), None)).unwrap_or_else(|e| panic!("append: {e}"));
    assert_eq!(verify_cli(&path, &["--head", &h]).0, 0);

    // A malformed head is bad input (125), not a verdict.
    let out =
        cli().args(["audit", "verify"]).arg(&path).args(["--head", "5:xyz"]).output().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.status.code(), Some(125));
}

/// The entry the appender tests re-run this binary with: a separate process
/// appending `PC_AUDIT_CHILD_COUNT` records to `PC_AUDIT_CHILD_LOG` through
/// the async `Audit` trait, printing `RECORDED ID` after each. With
/// `PC_AUDIT_CHILD_HANG` it then sleeps (to be killed). Without the
/// variables it does nothing.
#[test]
fn r0169_appender_child_entry() {
    let Some(log) = std::env::var_os("PC_AUDIT_CHILD_LOG") else { return };
    let count: usize = std::env::var("PC_AUDIT_CHILD_COUNT").ok().and_then(|c| c.parse().ok()).unwrap_or(1);
    let audit = JsonlAudit::open(PathBuf::from(log)).unwrap_or_else(|e| panic!("open: {e}"));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| panic!("rt: {e}"));
    let me = std::process::id();
    for i in 0..count {
        let ev = outcome(&format!("p{me}-{i}"), Access::read_only(), None);
        rt.block_on(audit.record(&ev)).unwrap_or_else(|e| panic!("record: {e}"));
        println!("RECORDED p{me}-{i}");
    }
    if std::env::var_os("PC_AUDIT_CHILD_HANG").is_some() {
        println!("HANGING");
        std::thread::sleep(std::time::Duration::from_secs(60));
    }
}

fn child(log: &Path, count: usize, hang: bool) -> Command {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("current_exe: {e}"));
    let mut c = Command::new(exe);
    c.args(["--exact", "suite::audit::r0169_appender_child_entry", "--nocapture", "--test-threads=1"])
        .env("PC_AUDIT_CHILD_LOG", log)
        .env("PC_AUDIT_CHILD_COUNT", count.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    if hang {
        c.env("PC_AUDIT_CHILD_HANG", "1");
    }
    c
}

#[test]
fn r0170_concurrent_appenders_threads_and_processes_keep_one_chain() {
    const M: usize = 40;
    let d = tmpdir();
    let path = d.path().join("shared.jsonl");
    let procs: Vec<_> =
        (0..4).map(|_| child(&path, M, false).spawn().unwrap_or_else(|e| panic!("spawn: {e}"))).collect();
    // Threads: 3 sharing one writer, 2 with writers of their own (their own
    // open file: only the flock orders those).
    let shared = JsonlAudit::open(&path).unwrap_or_else(|e| panic!("open: {e}"));
    std::thread::scope(|s| {
        for t in 0..5 {
            let shared = shared.clone();
            let path = path.clone();
            s.spawn(move || {
                let own = if t < 3 { shared } else { JsonlAudit::open(&path).unwrap_or_else(|e| panic!("open: {e}")) };
                for i in 0..M {
                    own.append(&outcome(&format!("t{t}-{i}"), Access::read_only(), None))
                        .unwrap_or_else(|e| panic!("append: {e}"));
                }
            });
        }
    });
    let mut child_pids = Vec::new();
    for p in procs {
        child_pids.push(p.id());
        let out = p.wait_with_output().unwrap_or_else(|e| panic!("wait: {e}"));
        assert!(out.status.success(), "an appender process failed: {:?}", out.status);
    }
    let v = assert_intact(&path);
    assert_eq!(v["records"], 9 * M as u64, "every record of 5 threads and 4 processes");
    // Every record is there once.
    let ls = lines(&path);
    let ids: std::collections::BTreeSet<String> = ls
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap_or_default()["id"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(ids.len(), 9 * M);
    for pid in child_pids {
        assert!(ids.contains(&format!("p{pid}-{}", M - 1)), "process {pid}'s records");
    }
}

#[test]
fn r0171_a_process_killed_right_after_record_leaves_the_record_intact() {
    let d = tmpdir();
    let path = d.path().join("killed.jsonl");
    let (seeded, _) = make_log(d.path(), 2);
    fs::rename(&seeded, &path).unwrap_or_else(|e| panic!("rename: {e}"));
    let mut c = child(&path, 1, true).spawn().unwrap_or_else(|e| panic!("spawn: {e}"));
    let pid = c.id();
    let mut out = BufReader::new(c.stdout.take().unwrap_or_else(|| panic!("no stdout")));
    let mut recorded = false;
    let mut line = String::new();
    while out.read_line(&mut line).unwrap_or(0) > 0 {
        if line.contains(&format!("RECORDED p{pid}-0")) {
            recorded = true;
        }
        if line.contains("HANGING") {
            break;
        }
        line.clear();
    }
    assert!(recorded, "the child never recorded");
    // SIGKILL: no destructor, no flush, no exit handler runs.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap_or(0)),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap_or_else(|e| panic!("kill: {e}"));
    let st = c.wait().unwrap_or_else(|e| panic!("wait: {e}"));
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(st.signal(), Some(libc::SIGKILL), "the child was killed, not finished");
    let v = assert_intact(&path);
    assert_eq!(v["records"], 3);
    let last: Value = serde_json::from_str(&lines(&path)[2]).unwrap_or_else(|e| panic!("json: {e}"));
    assert_eq!(last["id"], format!("p{pid}-0"));
    assert_eq!(last["pid"], pid);
}

#[test]
fn r0172_a_symlinked_or_special_log_path_is_refused() {
    let d = tmpdir();
    let real = d.path().join("real.jsonl");
    let link = d.path().join("link.jsonl");
    fs::write(&real, "").unwrap_or_else(|e| panic!("write: {e}"));
    std::os::unix::fs::symlink(&real, &link).unwrap_or_else(|e| panic!("symlink: {e}"));
    let e = JsonlAudit::open(&link).err().unwrap_or_else(|| panic!("a symlinked log was opened"));
    assert_eq!(e.source.raw_os_error(), Some(libc::ELOOP), "{e}");
    assert!(e.to_string().contains("symbolic link"), "{e}");
    // A dangling link is refused too, and nothing is created behind it.
    let dangling = d.path().join("dangling.jsonl");
    std::os::unix::fs::symlink(d.path().join("target.jsonl"), &dangling).unwrap_or_else(|e| panic!("symlink: {e}"));
    let e = JsonlAudit::open(&dangling).err().unwrap_or_else(|| panic!("a dangling link was followed"));
    assert_eq!(e.source.raw_os_error(), Some(libc::ELOOP));
    assert!(!d.path().join("target.jsonl").exists());
    // A directory and a FIFO.
    let e = JsonlAudit::open(d.path()).err().unwrap_or_else(|| panic!("a directory was opened"));
    assert_eq!(e.source.raw_os_error(), Some(libc::EISDIR), "{e}");
    let fifo = d.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .unwrap_or_else(|e| panic!("mkfifo: {e}"));
    let e = JsonlAudit::open(&fifo).err().unwrap_or_else(|| panic!("a FIFO was opened"));
    assert!(e.to_string().contains("a FIFO, not a regular file"), "{e}");
    // Control: the real path opens and takes a record.
    let log = JsonlAudit::open(&real).unwrap_or_else(|e| panic!("open the real path: {e}"));
    log.append(&outcome("ok", Access::read_only(), None)).unwrap_or_else(|e| panic!("append: {e}"));
    assert_intact(&real);
    assert_eq!(fs::read_link(&link).unwrap_or_default(), real, "the link is untouched");
}

#[test]
fn r0173_grants_report_answers_who_could_write_where() {
    let d = tmpdir();
    let ws = d.path().join("ws");
    let path = d.path().join("audit.jsonl");
    let log = JsonlAudit::open(&path).unwrap_or_else(|e| panic!("open: {e}"));
    let target = ws.join("target");
    let tmp = PathBuf::from("/tmp");
    let events = vec![
        // c1: cargo test, asked writable, narrowed by a rule to target/ and /tmp.
        allowed(
            "c1",
            shell("cargo test", &ws, writable()),
            Access { writable: false, write_grants: vec![target.clone(), tmp.clone()] },
            Some("tests-write-target"),
        ),
        outcome(
            "c1",
            Access { writable: false, write_grants: vec![target.clone(), tmp.clone()] },
            Some(RefusedWritesRecord { count: 1, sample: vec![ws.join("Cargo.lock")], unresolved: 0 }),
        ),
        // c2: a read-only find -delete: 2 sampled refusals in the workspace, 5 in all.
        allowed("c2", shell("find . -delete", &ws, Access::read_only()), Access::read_only(), None),
        outcome(
            "c2",
            Access::read_only(),
            Some(RefusedWritesRecord {
                count: 5,
                sample: vec![PathBuf::from("src/main.rs"), ws.join("README.md"), target.join("x")],
                unresolved: 0,
            }),
        ),
        // c3: a writable make; a write to .git/hooks refused (protected).
        allowed("c3", shell("make", &ws, writable()), writable(), None),
        outcome(
            "c3",
            writable(),
            Some(RefusedWritesRecord { count: 1, sample: vec![PathBuf::from("/etc/passwd")], unresolved: 0 }),
        ),
        // f1: a direct file write.
        allowed(
            "f1",
            Action::FsWrite(FsAction {
                path: "notes.md".into(),
                resolved: ws.join("notes.md"),
                backend: Backend::Direct,
            }),
            Access { writable: false, write_grants: vec![ws.join("notes.md")] },
            None,
        ),
        outcome("f1", Access { writable: false, write_grants: vec![ws.join("notes.md")] }, None),
        // d1: git push, refused by a gate rule.
        Event::Denied {
            id: "d1".into(),
            action: shell("git push origin main", &ws, writable()),
            refusal: RefusalKind::RefusedByGate,
            reason: "pushing is not allowed from the agent".into(),
            rule: Some("no-push".into()),
        },
        // c4: started, never ended (the host died).
        allowed("c4", shell("sleep 100", &ws, writable()), writable(), Some("allow-all")),
    ];
    for e in &events {
        log.append(e).unwrap_or_else(|e| panic!("append: {e}"));
    }
    let out = cli().args(["audit", "grants"]).arg(&path).arg("--json").output().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("json: {e}"));
    assert_eq!(v["chain"]["intact"], true);
    let area = |p: &Path| -> Value {
        v["areas"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["area"] == p.to_string_lossy().as_ref()).cloned())
            .unwrap_or_else(|| panic!("no area {}: {v}", p.display()))
    };
    let ids = |a: &Value, key: &str| -> Vec<String> {
        a[key]
            .as_array()
            .map(|x| x.iter().map(|g| g["id"].as_str().unwrap_or_default().to_string()).collect())
            .unwrap_or_default()
    };
    // The workspace: writable for make (c3) and sleep (c4); refusals from c1 (Cargo.lock) and c2 (2 paths).
    let w = area(&ws);
    assert_eq!(w["kind"], "workspace");
    assert_eq!(ids(&w, "granted"), ["c3", "c4"]);
    assert_eq!(w["granted"][1]["rule"], "allow-all");
    assert!(w["granted"][1]["outcome"].as_str().unwrap_or_default().starts_with("no outcome recorded"));
    assert_eq!(w["granted"][0]["outcome"], "completed, exit 0");
    assert_eq!(w["refused_writes"], 3);
    assert_eq!(w["refused"][0]["id"], "c1");
    assert_eq!(w["refused"][0]["by"], "rule tests-write-target");
    assert_eq!(w["refused"][1]["id"], "c2");
    assert_eq!(w["refused"][1]["by"], "asked read-only");
    assert_eq!(w["refused"][1]["count"], 2);
    assert_eq!(
        w["refused"][1]["paths"],
        serde_json::json!([ws.join("src/main.rs"), ws.join("README.md")]),
        "a relative sample path is taken from the cwd"
    );
    // target/: granted to c1; c2's write there is counted there (the longest area), not in the workspace.
    let t = area(&target);
    assert_eq!(t["kind"], "write-grant");
    assert_eq!(ids(&t, "granted"), ["c1"]);
    assert_eq!(t["granted"][0]["via"], "write-grant");
    assert_eq!(t["refused_writes"], 1);
    assert_eq!(t["refused"][0]["paths"], serde_json::json!([target.join("x")]));
    assert_eq!(ids(&area(&tmp), "granted"), ["c1"]);
    // The file write.
    let f = area(&ws.join("notes.md"));
    assert_eq!((f["kind"].as_str(), f["granted"][0]["via"].as_str()), (Some("file"), Some("file-operation")));
    // /etc/passwd lies outside every area: the "/" row.
    let root = area(Path::new("/"));
    assert_eq!(root["refused"][0]["id"], "c3");
    assert_eq!(root["refused"][0]["by"], "outside the write access it had");
    // c2's 2 unsampled refusals.
    assert_eq!(
        v["unsampled"],
        serde_json::json!([{"id": "c2", "command": "find . -delete", "by": "asked read-only", "count": 2}])
    );
    // The denied push.
    assert_eq!(
        v["denied"],
        serde_json::json!([{"id": "d1", "action": "shell.exec", "command": "git push origin main", "refusal": "refused-by-gate", "reason": "pushing is not allowed from the agent", "rule": "no-push"}])
    );

    // The text form says the same for people.
    let out = cli().args(["audit", "grants"]).arg(&path).output().unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    for want in [
        "chain intact, 10 record(s)",
        &format!("{} (workspace)", ws.display()),
        "[c3] make  (writable workspace; completed, exit 0)",
        "2 by [c2] find . -delete  (asked read-only)",
        "[d1] shell.exec git push origin main  (refused-by-gate, rule no-push): pushing is not allowed from the agent",
        "2 by [c2] find . -delete  (asked read-only)\n",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
}

#[test]
fn r0174_batch_mode_syncs_every_n_and_on_drop_and_keeps_the_chain() {
    let d = tmpdir();
    let path = d.path().join("batch.jsonl");
    let n = std::num::NonZeroU32::new(16).unwrap_or(std::num::NonZeroU32::MIN);
    {
        let log = JsonlAudit::open_with(&path, Sync::Batch(n)).unwrap_or_else(|e| panic!("open: {e}"));
        for i in 0..37 {
            log.append(&outcome(&format!("b{i}"), Access::read_only(), None)).unwrap_or_else(|e| panic!("append: {e}"));
        }
        // Each record is in the file at once (written, not yet synced).
        assert_eq!(lines(&path).len(), 37);
        log.sync().unwrap_or_else(|e| panic!("sync: {e}"));
    }
    let v = assert_intact(&path);
    assert_eq!(v["records"], 37);
}

#[test]
fn r0175_unreadable_logs_exit_125_and_a_broken_chain_is_flagged_in_grants() {
    let d = tmpdir();
    let missing = d.path().join("missing.jsonl");
    for sub in ["verify", "grants"] {
        let out = cli().args(["audit", sub]).arg(&missing).output().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out.status.code(), Some(125), "audit {sub} of a missing file");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("cannot open the audit log") && err.contains("No such file"), "{err}");
    }
    // grants on a tampered log: made (exit 0), with the break named first.
    let (path, _) = make_log(d.path(), 4);
    let mut ls = lines(&path);
    ls.remove(1);
    write_lines(&path, &ls);
    let out = cli().args(["audit", "grants"]).arg(&path).output().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with(&format!("audit log {}: CHAIN BROKEN at line 2", path.display())), "{text}");
}
