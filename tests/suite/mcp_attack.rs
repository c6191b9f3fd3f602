//! Adversarial review of `portcullis serve` (issue 11), as a hostile MCP
//! client and a hostile model: each test attacks the running server from
//! outside (JSON lines on its stdin, the host's /proc, the files on disk,
//! its stderr) and has a control.

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::mcp_server::{marker, meta, Serve};
use super::util::{appears, cli, survivors, Ws};

/// The policy of these tests: a shell with a few more programs than the
/// protocol tests allow.
const POLICY: &str = r#"
[shell]
interpreter = "sh"
allow = ["echo", "cat", "sleep", "sh", "ls", "true", "printf", "yes", "head"]
[shell.background]
"#;

fn serve(ws: &Ws, extra: &[&str]) -> Serve {
    let policy = ws.path().with_extension("policy.toml");
    std::fs::write(&policy, POLICY).unwrap_or_else(|e| panic!("policy: {e}"));
    let mut cmd = cli();
    cmd.arg("serve").arg("--workspace").arg(ws.path()).arg("--policy").arg(&policy).args(extra);
    Serve::spawn(cmd)
}

fn cancel_line(id: i64) -> Vec<u8> {
    let mut l = json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": id}})
        .to_string()
        .into_bytes();
    l.push(b'\n');
    l
}

fn call_line(id: i64, tool: &str, args: Value) -> Vec<u8> {
    let mut l = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": tool, "arguments": args, "_meta": meta()}})
    .to_string()
    .into_bytes();
    l.push(b'\n');
    l
}

/// `portcullis serve --workspace WS EXTRA…`, started with stdin and stdout
/// piped and `stderr` as given.
fn serve_child(ws: &Ws, extra: &[&OsStr], stderr: Stdio) -> Child {
    let mut cmd = cli();
    cmd.arg("serve").arg("--workspace").arg(ws.path()).args(extra);
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(stderr);
    cmd.spawn().unwrap_or_else(|e| panic!("spawn: {e}"))
}

#[test]
fn r0760_an_id_reused_after_a_cancel_can_be_cancelled_again() {
    // Found in review: the cancelled call, ending after the id was reused,
    // removed the new call's entry, so a cancel of the new call was lost
    // (its command ran on and was answered).
    let ws = Ws::new();
    let mut s = serve(&ws, &[]);
    let (a, b) = (marker(7601), marker(7602));
    s.call(5, "run_shell", json!({"command": format!("sleep {a}")}));
    assert!(appears(&format!("sleep {a}")), "the first command did not start");
    // CONTROL: the first cancel kills its command (asserted below, once the
    // reuse is in). The cancel and the reuse in one write: the new call is registered
    // before the cancelled one has ended.
    let mut both = cancel_line(5);
    both.extend(call_line(5, "run_shell", json!({"command": format!("sleep {b}")})));
    s.send_raw(&both);
    assert!(appears(&format!("sleep {b}")), "the second command did not start");
    assert_eq!(survivors(&a), Vec::<String>::new(), "the first command survived its cancel");
    std::thread::sleep(Duration::from_millis(300));
    // The reused id is in flight: a third call with it is refused as a
    // duplicate (it was accepted, the entry gone).
    s.call(5, "read_file", json!({"path": "README.md"}));
    let dup = s.answer(&json!(5));
    assert_eq!(dup["error"]["code"], -32600, "the reused id is not known to be in flight: {dup}");
    s.send_raw(&cancel_line(5));
    assert_eq!(survivors(&b), Vec::<String>::new(), "the cancel of the reused id was lost");
    // Nothing is sent for either cancelled call.
    s.request(json!(6), "ping", json!({}));
    let next = s.next(Duration::from_secs(10)).unwrap_or_else(|| panic!("no answer to the ping"));
    assert_eq!(next["id"], 6, "{next}");
    assert!(s.next(Duration::from_millis(500)).is_none());
}

/// The resident memory of process `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS for {pid}: {status}"))
}

#[test]
fn r0761_a_client_that_never_reads_cannot_grow_the_server_without_bound() {
    // Found in review: answers waited in an unbounded queue, and a
    // tools/list of 180 bytes has an answer of ~45 KB: 3.5 MB of requests
    // never read grew the server by ~900 MB. Now the server stops reading
    // past --max-queued (default 32 MiB; 1 MiB here) until the client
    // reads.
    const REQUESTS: usize = 1000;
    let ws = Ws::new();
    let mut child = serve_child(&ws, &[OsStr::new("--max-queued"), OsStr::new("1MiB")], Stdio::null());
    let mut stdin = child.stdin.take().unwrap_or_else(|| panic!("no stdin"));
    let mut stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let list = |id: usize| {
        let mut l = json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": {"_meta": meta()}})
            .to_string()
            .into_bytes();
        l.push(b'\n');
        l
    };
    // One answered request first: the baseline is a server that has served.
    stdin.write_all(&list(0)).unwrap_or_else(|e| panic!("write: {e}"));
    let mut one = Vec::new();
    let mut byte = [0u8; 1];
    while one.last() != Some(&b'\n') {
        stdout.read_exact(&mut byte).unwrap_or_else(|e| panic!("read: {e}"));
        one.push(byte[0]);
    }
    let answer_len = one.len();
    let base = rss_kib(child.id());
    let writer = std::thread::spawn(move || {
        let all: Vec<u8> = (1..=REQUESTS).flat_map(list).collect();
        // Blocks while the server does not read; fails if it died.
        let ok = stdin.write_all(&all).is_ok();
        (stdin, ok)
    });
    // Let the server take what it takes (unbounded, it made ~6 MB of
    // answers a second in a debug build).
    let mut peak = base;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        peak = peak.max(rss_kib(child.id()));
    }
    let grown_mib = peak.saturating_sub(base) / 1024;
    let unbounded_mib = (answer_len * REQUESTS) >> 20;
    // CONTROL: every answer comes once the client reads (the server paused,
    // it dropped nothing), and they were worth far more than the bound.
    let started = Instant::now();
    let mut lines = 0usize;
    let mut buf = vec![0u8; 1 << 16];
    while lines < REQUESTS && started.elapsed() < Duration::from_secs(120) {
        let n = stdout.read(&mut buf).unwrap_or_else(|e| panic!("read: {e}"));
        assert!(n > 0, "the server closed its output after {lines} answers");
        lines += buf[..n].iter().filter(|b| **b == b'\n').count();
    }
    let (stdin, ok) = writer.join().unwrap_or_else(|_| panic!("writer panicked"));
    drop(stdin);
    let _ = child.wait();
    assert!(ok, "the server stopped reading for good");
    assert_eq!(lines, REQUESTS, "answers lost");
    assert!(unbounded_mib >= 30, "the test's answers ({unbounded_mib} MiB) would not show an unbounded queue");
    assert!(
        grown_mib < 12,
        "the server grew by {grown_mib} MiB while its {unbounded_mib} MiB of answers were not read"
    );
}

#[test]
fn r0762_a_background_start_cancelled_while_it_starts_leaves_no_job() {
    // Found in review: a cancel that came while the job was being started
    // closed the request, so the client never learned the job's id, and
    // the job ran on (until its timeout or the server's end), holding one
    // of shell.background.max_jobs.
    let ws = Ws::new();
    let mut s = serve(&ws, &[]);
    let (mut orphans, mut answered_running) = (Vec::new(), 0);
    for i in 0..40u32 {
        let m = marker(7700 + i);
        s.call(100 + i64::from(i), "run_shell", json!({"command": format!("sleep {m}"), "background": true}));
        std::thread::sleep(Duration::from_micros(u64::from(i % 10) * 100));
        s.send_raw(&cancel_line(100 + i64::from(i)));
        match s.next(Duration::from_millis(400)) {
            Some(a) => {
                // Answered before the cancel: the client has the id.
                let job = a["result"]["structuredContent"]["job_id"].as_str().map(str::to_string);
                if let Some(job) = job {
                    answered_running += usize::from(appears(&format!("sleep {m}")));
                    s.call(1000, "shell_kill", json!({"id": job}));
                    let _ = s.answer(&json!(1000));
                }
            }
            None => {
                if !survivors(&m).is_empty() {
                    orphans.push(m);
                }
            }
        }
    }
    // CONTROL: a start answered before its cancel runs its job.
    assert!(answered_running > 0, "no start was answered with a running job");
    assert_eq!(orphans, Vec::<String>::new(), "jobs whose start was cancelled and never answered still run");
}

#[test]
fn r0763_a_client_cannot_forge_lines_in_the_server_s_log() {
    // Found in review: a method name was written raw into the stderr log,
    // so a newline in it started a line of its own ("portcullis serve:
    // ..." as if the server said it) and terminal escapes went through.
    let ws = Ws::new();
    let mut child = serve_child(&ws, &[], Stdio::piped());
    let forged = "x\nportcullis serve: FORGED\u{1b}[2J";
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": forged, "params": {}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": forged, "params": [1]}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": {"_meta": {
            "io.modelcontextprotocol/protocolVersion": forged, "io.modelcontextprotocol/clientCapabilities": {}}}}),
    ];
    let mut input: Vec<u8> = lines.iter().flat_map(|l| format!("{l}\n").into_bytes()).collect();
    input.extend(b"{\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"ping\"}\n");
    let mut stdin = child.stdin.take().unwrap_or_else(|| panic!("no stdin"));
    stdin.write_all(&input).unwrap_or_else(|e| panic!("write: {e}"));
    drop(stdin);
    let out = child.wait_with_output().unwrap_or_else(|e| panic!("wait: {e}"));
    let answers = String::from_utf8_lossy(&out.stdout);
    assert_eq!(answers.lines().count(), 4, "{answers}");
    let log = String::from_utf8_lossy(&out.stderr);
    // CONTROL: the requests were logged (the method named, escaped).
    assert!(log.matches("FORGED").count() >= 3, "the bad requests were not logged: {log}");
    for line in log.lines() {
        assert!(line.starts_with("portcullis serve: "), "a line the server did not write: {line:?}\n{log}");
        assert!(!line.starts_with("portcullis serve: FORGED"), "a forged line: {line:?}");
    }
    assert!(!log.contains('\u{1b}'), "a terminal escape reached the log: {log:?}");
}

/// The signals a process ignores (its `SigIgn` mask from /proc).
fn ignored_mask(status: &str) -> u64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or_else(|| panic!("no SigIgn in {status}"))
}

#[test]
fn r0764_a_command_starts_with_sigpipe_at_its_default() {
    // Found in review: the helper is a Rust program, and Rust ignores
    // SIGPIPE; an ignored signal survives exec, so every command ran with
    // SIGPIPE ignored: `yes | head -1` printed "yes: standard output:
    // Broken pipe" and a producer in a pipeline had to notice EPIPE itself.
    let sigpipe = 1u64 << (libc::SIGPIPE - 1);
    let ws = Ws::new();
    let mut s = serve(&ws, &[]);
    s.call(1, "run_shell", json!({"command": "cat /proc/self/status"}));
    let r = s.structured(1);
    // CONTROL: the server (a Rust program, running by now) does ignore it,
    // so this is what a command would inherit without a reset.
    let server = std::fs::read_to_string(format!("/proc/{}/status", s.child.id())).unwrap_or_default();
    assert_ne!(ignored_mask(&server) & sigpipe, 0, "the server does not ignore SIGPIPE: {server}");
    let mask = ignored_mask(r["stdout"].as_str().unwrap_or_default());
    assert_eq!(mask & sigpipe, 0, "the command ignores SIGPIPE (SigIgn {mask:016x})");
    s.call(2, "run_shell", json!({"command": "yes | head -1"}));
    let r = s.structured(2);
    assert_eq!(r["stdout"], "y\n", "{r}");
    assert_eq!(r["stderr"], "", "the producer saw EPIPE instead of dying of SIGPIPE: {r}");
}

#[test]
fn r0765_an_error_says_each_cause_once() {
    // Found in review: an error whose text already ends with its cause's
    // (a `{source}` in its message, or a wrapper of `{0}`) had the cause
    // appended again by the chain: every startup error of serve, and the
    // model's "no such file", said the same thing twice.
    let ws = Ws::new();
    let missing = ws.path().join("missing");
    for (args, once) in [
        (vec!["--tools", "nope"], "no tool named \"nope\""),
        (vec!["--tests", ""], "test command \"\": it is empty"),
        (vec!["--workspace", missing.to_str().unwrap_or_default()], "No such file or directory"),
    ] {
        let mut cmd = cli();
        cmd.arg("serve");
        if args[0] != "--workspace" {
            cmd.arg("--workspace").arg(ws.path());
        }
        let out = cmd.args(&args).stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("serve: {e}"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(125), "{args:?}: {err}");
        // CONTROL: the cause is said.
        assert_eq!(err.matches(once).count(), 1, "{args:?}: not said exactly once: {err}");
    }
    let mut s = serve(&ws, &[]);
    s.call(1, "read_file", json!({"path": "missing.txt"}));
    let e = s.structured(1)["error"].clone();
    assert_eq!(e["kind"], "no-such-file", "{e}");
    let msg = e["message"].as_str().unwrap_or_default();
    assert_eq!(msg.matches("No such file or directory").count(), 1, "{msg}");
}

#[test]
fn r0766_a_zero_timeout_is_the_model_s_bad_input_not_a_fault() {
    // Found in review: `timeout_ms: 0` (a model's guess at "no timeout")
    // came back as kind `fault`, "the timeout (--timeout): 0 would kill the
    // command ... this is not caused by the arguments; tell the user".
    let ws = Ws::new();
    let mut s = serve(&ws, &[]);
    s.request(json!(0), "tools/list", json!({"_meta": meta()}));
    let list = s.result(0);
    let run = list["tools"].as_array().into_iter().flatten().find(|t| t["name"] == "run_shell").cloned();
    let schema = run.map(|t| t["inputSchema"]["properties"]["timeout_ms"].clone()).unwrap_or_default();
    assert_eq!(schema["minimum"], 1, "the schema does not say so: {schema}");
    for (id, background) in [(1, false), (2, true)] {
        s.call(id, "run_shell", json!({"command": "echo hi", "timeout_ms": 0, "background": background}));
        let r = s.result(id);
        assert_eq!(r["isError"], true, "{r}");
        let e = &r["structuredContent"]["error"];
        assert_eq!(e["kind"], "bad-input", "{r}");
        let msg = e["message"].as_str().unwrap_or_default();
        assert!(msg.contains("timeout_ms") && !msg.contains("tell the user"), "{msg}");
    }
    // CONTROL: a positive timeout runs.
    s.call(3, "run_shell", json!({"command": "echo hi", "timeout_ms": 5000}));
    assert_eq!(s.structured(3)["stdout"], "hi\n");
}

#[test]
fn r0767_a_policy_inside_the_workspace_in_the_landlock_only_mode_is_refused_at_start() {
    // Found in review: serve hides a policy file inside the workspace with
    // a deny glob, but the landlock-only mode has no mounts to mask it
    // with, so every command then failed ("deny globs need the mount
    // namespace ...", kind fault, "tell the user") on a server that had
    // started as if all were well.
    let ws = Ws::new();
    let text = format!("degraded = \"landlock-only\"\n{POLICY}");
    ws.write(".portcullis.toml", &text);
    let inside = ws.join(".portcullis.toml");
    let out = cli()
        .arg("serve")
        .arg("--workspace")
        .arg(ws.path())
        .arg("--policy")
        .arg(&inside)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("serve: {e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("landlock-only") && err.contains("outside the workspace"), "{err}");
    // CONTROL: the same policy outside the workspace serves (where the
    // landlock-only mode runs here, its commands run too).
    let outside = ws.path().with_extension("policy.toml");
    std::fs::write(&outside, &text).unwrap_or_else(|e| panic!("policy: {e}"));
    let mut cmd = cli();
    cmd.arg("serve").arg("--workspace").arg(ws.path()).arg("--policy").arg(&outside);
    let landlock_only = super::container::landlock_only_available("r0767");
    let cmd = if landlock_only { super::container::under(super::container::Profile::Container, cmd) } else { cmd };
    let mut s = Serve::spawn(cmd);
    s.call(1, "read_file", json!({"path": "README.md"}));
    assert_eq!(s.result(1)["isError"], false);
    if landlock_only {
        s.call(2, "run_shell", json!({"command": "echo ran"}));
        let r = s.structured(2);
        assert_eq!(r["stdout"], "ran\n", "{r}");
        assert_eq!(r["sandbox"], "landlock-only", "{r}");
    }
}

#[test]
fn r0768_a_message_of_exactly_the_limit_is_served_with_either_line_end() {
    // Found in review: the `\r` of a CRLF line end counted against
    // --max-message, so a message of exactly the limit was refused as one
    // byte too long when the client ended its lines with "\r\n".
    let ws = Ws::new();
    let mut s = serve(&ws, &["--max-message", "1024"]);
    let ping = |id: i64, len: usize| {
        let head = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"ping\",\"params\":{{\"x\":\"");
        let mut l = head.clone().into_bytes();
        l.extend(std::iter::repeat_n(b'a', len - head.len() - 3));
        l.extend(b"\"}}");
        assert_eq!(l.len(), len);
        l
    };
    for (id, end) in [(1, &b"\n"[..]), (2, &b"\r\n"[..])] {
        let mut l = ping(id, 1024);
        l.extend(end);
        s.send_raw(&l);
        assert_eq!(s.result(id), json!({}), "a message of 1024 bytes ending in {end:?}");
    }
    // CONTROL: one byte more is over the limit, with either line end.
    for end in [&b"\n"[..], &b"\r\n"[..]] {
        let mut l = ping(3, 1025);
        l.extend(end);
        s.send_raw(&l);
        // Answered to its id, which the line's start shows.
        let e = s.error(json!(3));
        assert_eq!(e["code"], -32600, "{e}");
        assert_eq!(e["data"]["limit"], 1024, "{e}");
    }
}

#[test]
fn r0769_a_client_that_never_reads_stderr_cannot_stall_the_server() {
    // Found in review: the log was written with eprintln! from the read
    // loop; a client that pipes stderr and never reads it (the spec lets a
    // client ignore the log) filled the pipe after ~64 KiB of log lines,
    // and the server stopped: no answer, and at stdin EOF no exit, its
    // command left running.
    let ws = Ws::new();
    let policy = ws.path().with_extension("policy.toml");
    std::fs::write(&policy, POLICY).unwrap_or_else(|e| panic!("policy: {e}"));
    let mut child = serve_child(&ws, &[OsStr::new("--policy"), policy.as_os_str()], Stdio::piped());
    let mut stderr = child.stderr.take().unwrap_or_else(|| panic!("no stderr"));
    // Serve drives stdin and stdout; stderr stays unread until the end.
    let mut s = Serve::adopt(child);
    let m = marker(7690);
    s.call(1, "run_shell", json!({"command": format!("sleep {m}")}));
    assert!(appears(&format!("sleep {m}")), "not started");
    // Each line is answered -32700 and logged (~200 bytes): ~400 KB of log.
    s.send_raw(&b"not json\n".repeat(2000));
    for _ in 0..2000 {
        let e = s.error(Value::Null);
        assert_eq!(e["code"], -32700, "{e}");
    }
    s.request(json!(2), "ping", json!({}));
    assert_eq!(s.result(2), json!({}), "the server stalled");
    s.close();
    let st = s.exit_within(Duration::from_secs(10)).unwrap_or_else(|| panic!("no exit at EOF"));
    assert!(st.success(), "{st}");
    assert_eq!(survivors(&m), Vec::<String>::new(), "the command survived");
    // CONTROL: the pipe was full (the log was there to block on).
    let mut log = Vec::new();
    let _ = stderr.read_to_end(&mut log);
    assert!(log.len() >= 60 * 1024, "only {} bytes of log: the pipe never filled", log.len());
}

#[test]
fn r0770_a_policy_file_with_a_backslash_in_its_name_is_hidden_too() {
    // Found in review: the deny glob that hides a policy file inside the
    // workspace was made with globset::escape, which leaves `\` alone;
    // deny globs read `\x` as a literal `x`, so the glob of `p\x.toml`
    // matched `px.toml` and the model read the policy.
    let ws = Ws::new();
    let name = "p\\x.toml";
    ws.write(name, POLICY);
    ws.write("copy.toml", POLICY);
    let mut cmd = cli();
    cmd.arg("serve").arg("--workspace").arg(ws.path()).arg("--policy").arg(ws.join(name));
    let mut s = Serve::spawn(cmd);
    s.call(1, "read_file", json!({"path": name}));
    assert_eq!(s.structured(1)["error"]["kind"], "path-escape", "the model read the policy");
    s.call(2, "run_shell", json!({"command": "cat 'p\\x.toml' copy.toml"}));
    let r = s.structured(2);
    let out = r["stdout"].as_str().unwrap_or_default();
    assert_eq!(out.matches("[shell]").count(), 1, "a command read the policy: {r}");
    assert!(r["stderr"].as_str().unwrap_or_default().contains("Permission denied"), "{r}");
    // CONTROL: the same text under another name reads.
    s.call(3, "read_file", json!({"path": "copy.toml"}));
    assert_eq!(s.result(3)["isError"], false);
}

#[test]
fn r0771_only_the_policy_file_itself_is_hidden_and_one_that_cannot_be_is_refused() {
    // Found in review: the glob hiding a policy at the workspace's top was
    // its bare name, which a deny glob reads as "this name at any depth":
    // every `.portcullis.toml` of the tree was hidden (sub/.portcullis.toml
    // of the user's project too). And a policy path that is not UTF-8 was
    // not hidden at all, silently.
    let ws = Ws::new();
    ws.write(".portcullis.toml", POLICY);
    ws.write("sub/.portcullis.toml", "user data\n");
    let mut cmd = cli();
    cmd.arg("serve").arg("--workspace").arg(ws.path()).arg("--policy").arg(ws.join(".portcullis.toml"));
    let mut s = Serve::spawn(cmd);
    s.call(1, "read_file", json!({"path": "sub/.portcullis.toml"}));
    let r = s.result(1);
    assert_eq!(r["isError"], false, "a file that is not the policy is hidden: {r}");
    s.call(2, "run_shell", json!({"command": "cat sub/.portcullis.toml"}));
    assert_eq!(s.structured(2)["stdout"], "user data\n");
    // CONTROL: the policy itself stays hidden, to both.
    s.call(3, "read_file", json!({"path": ".portcullis.toml"}));
    assert_eq!(s.structured(3)["error"]["kind"], "path-escape");
    s.call(4, "run_shell", json!({"command": "cat .portcullis.toml"}));
    let r = s.structured(4);
    assert!(r["stderr"].as_str().unwrap_or_default().contains("Permission denied"), "{r}");
    drop(s);
    // A name a deny glob cannot spell is refused at start, not left visible.
    use std::os::unix::ffi::OsStrExt;
    let odd = ws.path().join(std::ffi::OsStr::from_bytes(b"p\xff.toml"));
    std::fs::write(&odd, POLICY).unwrap_or_else(|e| panic!("{e}"));
    let out = cli()
        .arg("serve")
        .arg("--workspace")
        .arg(ws.path())
        .arg("--policy")
        .arg(&odd)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("serve: {e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("UTF-8") && err.contains("outside the workspace"), "{err}");
}

#[test]
fn r0772_an_absolute_deny_glob_with_an_escape_masks_its_file() {
    // Found in review (while hiding a policy named `p\x.toml`): the
    // sandbox walks an absolute deny glob from its literal prefix, and a
    // component with a `\` escape counted as literal, so the prefix named
    // `p\\x.key` (two backslashes), which does not exist: nothing was
    // masked, and the command read the file the jail denies.
    let ws = Ws::new();
    ws.write("p\\x.key", "secret\n");
    let real = std::fs::canonicalize(ws.path()).unwrap_or_else(|e| panic!("{e}"));
    let glob = format!("{}/p\\\\x.key", real.display());
    let run = |deny: &str| {
        let policy = ws.path().with_extension("deny.toml");
        let text = format!("deny_paths = [{deny:?}]\n[shell]\nallow = [\"cat\"]\n");
        std::fs::write(&policy, text).unwrap_or_else(|e| panic!("{e}"));
        cli()
            .arg("exec")
            .arg("--policy")
            .arg(&policy)
            .arg("--workspace")
            .arg(ws.path())
            .arg("--")
            .arg("cat")
            .arg("p\\x.key")
            .output()
            .unwrap_or_else(|e| panic!("exec: {e}"))
    };
    let out = run(&glob);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "", "the command read the denied file");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Permission denied"), "{out:?}");
    // CONTROL: the relative spelling of the same glob masks it, and without
    // a deny glob the file reads.
    let out = run("p\\\\x.key");
    assert!(String::from_utf8_lossy(&out.stderr).contains("Permission denied"), "{out:?}");
    let out = run("nothing-here");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "secret\n", "{out:?}");
}

#[test]
fn r0773_the_server_exits_at_eof_even_when_its_answers_are_not_read() {
    // Found in review: at stdin EOF the server killed its commands, then
    // waited without bound for its writer to write the answers a client
    // that does not read stdout never takes: it never exited.
    let ws = Ws::new();
    let mut child = serve_child(&ws, &[], Stdio::null());
    let mut stdin = child.stdin.take().unwrap_or_else(|| panic!("no stdin"));
    // Held open, never read.
    let mut stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let lines: Vec<u8> = (0..300)
        .flat_map(|id| {
            let mut l = json!({"jsonrpc": "2.0", "id": id, "method": "tools/list", "params": {"_meta": meta()}})
                .to_string()
                .into_bytes();
            l.push(b'\n');
            l
        })
        .collect();
    stdin.write_all(&lines).unwrap_or_else(|e| panic!("write: {e}"));
    std::thread::sleep(Duration::from_secs(2));
    drop(stdin);
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut status = None;
    while Instant::now() < deadline {
        if let Ok(Some(st)) = child.try_wait() {
            status = Some(st);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    assert!(status.is_some(), "no exit within 15 s of stdin EOF");
    // CONTROL: the pipe was full (the writer had answers to block on:
    // 300 of ~40 KB).
    let mut buf = Vec::new();
    let _ = stdout.read_to_end(&mut buf);
    assert!(buf.len() >= 60 * 1024, "only {} bytes were written: the pipe never filled", buf.len());
}

#[test]
fn r0890_a_closed_stderr_neither_aborts_the_server_nor_the_cli() {
    // Found in session 29's review: the startup line was written with
    // eprintln!, which panics on EPIPE, and the release build aborts on a
    // panic: a client that closed its end of the server's stderr (or a
    // `2> >(exec true)`) got no answer at all (status 134).
    let ws = Ws::new();
    let mut child = serve_child(&ws, &[], Stdio::piped());
    drop(child.stderr.take());
    let mut s = Serve::adopt(child);
    s.request(json!(1), "ping", json!({"_meta": meta()}));
    assert!(s.result(1).is_object(), "no answer with stderr closed");
    s.close();
    let st = s.exit_within(Duration::from_secs(10)).unwrap_or_else(|| panic!("no exit at EOF"));
    assert!(st.success(), "{st}");
    // CONTROL: the server does write to stderr at its start (the writes
    // that met the closed pipe above).
    let mut cmd = cli();
    cmd.arg("serve").arg("--workspace").arg(ws.path());
    cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
    let out = cmd.output().unwrap_or_else(|e| panic!("spawn: {e}"));
    assert!(out.status.success() && !out.stderr.is_empty(), "{:?}", out);
    // The CLI's own lines: `exec --json` into a pipe already closed ends
    // with the command's status, not an abort.
    let mut cmd = cli();
    cmd.args(["exec", "--json", "--workspace"]).arg(ws.path()).args(["--", "true"]);
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn: {e}"));
    drop(child.stdout.take());
    let st = child.wait().unwrap_or_else(|e| panic!("wait: {e}"));
    assert_eq!(st.code(), Some(0), "{st}");
}

#[test]
fn r0891_a_name_that_is_not_utf8_does_not_fail_a_listing() {
    // Found in session 29's review: one such name made `list_dir` of its
    // directory a `fault` ("the result could not be encoded"), which tells
    // the model to tell the user; grep and glob showed it with U+FFFD.
    use std::os::unix::ffi::OsStrExt;
    let ws = Ws::new();
    ws.write("uni/plain.txt", "x\n");
    let odd = ws.join("uni").join(std::ffi::OsStr::from_bytes(b"caf\xe9.txt"));
    std::fs::write(&odd, "y\n").unwrap_or_else(|e| panic!("{e}"));
    let mut s = Serve::start(&ws, &[]);
    s.call(1, "list_dir", json!({"path": "uni"}));
    let r = s.result(1);
    assert_ne!(r["isError"], json!(true), "{r}");
    let names: Vec<String> = r["structuredContent"]["entries"]
        .as_array()
        .unwrap_or_else(|| panic!("no entries: {r}"))
        .iter()
        .filter_map(|e| e["path"].as_str().map(str::to_string))
        .collect();
    // CONTROL: the plain name beside it.
    assert!(names.contains(&"uni/plain.txt".to_string()), "{names:?}");
    assert!(names.contains(&"uni/caf\u{FFFD}.txt".to_string()), "{names:?}");
    s.close();
}

#[test]
fn r0892_a_path_the_kernel_cannot_take_is_the_arguments_fault() {
    // Found in session 29's review: a NUL byte or a name too long was
    // `bad-path` for read_file but `fault` ("not caused by the arguments;
    // tell the user") for the writing tools, `io` for list_dir; and
    // write_file of `target/x/` wrote a file `target/x`.
    let ws = Ws::new();
    ws.write("a.txt", "a\n");
    let _ = std::fs::create_dir(ws.join("target"));
    let long = "x".repeat(300);
    let edit = |p: &str| json!({"path": p, "old_string": "a", "new_string": "b"});
    let cases = [
        ("read_file", json!({"path": "a\u{0}b"})),
        ("edit_file", edit("a\u{0}b")),
        ("multi_edit", json!({"path": "a\u{0}b", "edits": [{"old_string": "a", "new_string": "b"}]})),
        ("write_file", json!({"path": "a\u{0}b", "content": "x"})),
        ("list_dir", json!({"path": "a\u{0}b"})),
        ("read_file", json!({"path": long})),
        ("edit_file", edit(&long)),
        ("write_file", json!({"path": long, "content": "x"})),
        ("list_dir", json!({"path": long})),
        ("write_file", json!({"path": ".", "content": "x"})),
        ("write_file", json!({"path": "target/x/", "content": "x"})),
        ("write_file", json!({"path": "newdir/.", "content": "x"})),
        ("write_file", json!({"path": "target/..", "content": "x"})),
        ("write_file", json!({"path": "target", "content": "x"})),
    ];
    let mut s = Serve::start(&ws, &[]);
    for (i, (tool, args)) in cases.iter().enumerate() {
        s.call(i as i64, tool, args.clone());
        let r = s.structured(i as i64);
        assert_eq!(r["error"]["kind"], "bad-path", "{tool} {args}: {r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("check the path") || m.contains("give the file's path")),
            "{r}"
        );
    }
    for gone in ["target/x", "newdir"] {
        assert!(std::fs::symlink_metadata(ws.join(gone)).is_err(), "{gone} was created");
    }
    // CONTROL: a plain name is written.
    s.call(100, "write_file", json!({"path": "target/y", "content": "x"}));
    assert_eq!(s.structured(100)["error"], Value::Null);
    assert_eq!(std::fs::read_to_string(ws.join("target/y")).unwrap_or_default(), "x");
    s.close();
}
