//! `portcullis serve` spoken to line by line (issue 11): the framing
//! errors answered and serving going on, both protocol eras, concurrency,
//! cancellation and the end of the input killing every process (checked
//! from the host's /proc, each with its control: the process was there
//! before), progress, stdout carrying nothing but protocol, refusals as
//! results, the policy file hidden, and the landlock-only mode under a
//! container's seccomp profile. The official SDK clients drive it in
//! `mcp_clients` and `mcp_ts`.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::util::{appears, cli, survivors, Ws};

pub(super) const POLICY: &str = r#"
[shell]
interpreter = "sh"
allow = ["echo", "cat", "sleep", "sh", "ls", "true", "printf"]
[shell.background]
"#;

/// A running `portcullis serve` and what it wrote (also driven by
/// `mcp_attack`).
pub(super) struct Serve {
    pub(super) child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Result<Value, String>>,
    /// Messages read while waiting for another.
    pub(super) backlog: Vec<Value>,
}

pub(super) fn meta() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    })
}

impl Serve {
    pub(super) fn start(ws: &Ws, extra: &[&str]) -> Serve {
        let policy = ws.path().with_extension("policy.toml");
        std::fs::write(&policy, POLICY).unwrap_or_else(|e| panic!("policy: {e}"));
        let mut cmd = cli();
        cmd.arg("serve").arg("--workspace").arg(ws.path()).arg("--policy").arg(&policy).args(extra);
        Serve::spawn(cmd)
    }

    pub(super) fn spawn(mut cmd: Command) -> Serve {
        cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::inherit());
        let child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        Serve::adopt(child)
    }

    /// Drive a server started with piped stdin and stdout.
    pub(super) fn adopt(mut child: Child) -> Serve {
        let stdin = child.stdin.take();
        let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).split(b'\n') {
                let Ok(line) = line else { return };
                let parsed = serde_json::from_slice::<Value>(&line)
                    .map_err(|e| format!("{e}: {}", String::from_utf8_lossy(&line)))
                    .and_then(|v| {
                        if v.get("jsonrpc") == Some(&json!("2.0")) {
                            Ok(v)
                        } else {
                            Err(format!("not a JSON-RPC message: {v}"))
                        }
                    });
                if tx.send(parsed).is_err() {
                    return;
                }
            }
        });
        Serve { child, stdin, lines, backlog: Vec::new() }
    }

    pub(super) fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().unwrap_or_else(|| panic!("stdin closed"));
        stdin.write_all(bytes).unwrap_or_else(|e| panic!("write: {e}"));
        stdin.flush().unwrap_or_else(|e| panic!("flush: {e}"));
    }

    pub(super) fn send(&mut self, msg: Value) {
        let mut line = msg.to_string().into_bytes();
        line.push(b'\n');
        self.send_raw(&line);
    }

    pub(super) fn request(&mut self, id: Value, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
    }

    /// A modern-era `tools/call`.
    pub(super) fn call(&mut self, id: i64, tool: &str, args: Value) {
        self.request(json!(id), "tools/call", json!({"name": tool, "arguments": args, "_meta": meta()}));
    }

    /// The next message, within `limit`.
    pub(super) fn next(&mut self, limit: Duration) -> Option<Value> {
        match self.lines.recv_timeout(limit) {
            Ok(Ok(v)) => Some(v),
            Ok(Err(bad)) => panic!("the server wrote something that is not protocol on stdout: {bad}"),
            Err(_) => None,
        }
    }

    /// The answer to `id` (other messages kept in the backlog).
    pub(super) fn answer(&mut self, id: &Value) -> Value {
        if let Some(at) = self.backlog.iter().position(|m| m.get("id") == Some(id) && m.get("method").is_none()) {
            return self.backlog.remove(at);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while let Some(m) = self.next(deadline.saturating_duration_since(Instant::now())) {
            if m.get("id") == Some(id) && m.get("method").is_none() {
                return m;
            }
            self.backlog.push(m);
        }
        panic!("no answer to {id} within 30 s; got {:?}", self.backlog);
    }

    pub(super) fn result(&mut self, id: i64) -> Value {
        let a = self.answer(&json!(id));
        a.get("result").cloned().unwrap_or_else(|| panic!("an error, not a result: {a}"))
    }

    pub(super) fn structured(&mut self, id: i64) -> Value {
        self.result(id)["structuredContent"].clone()
    }

    pub(super) fn error(&mut self, id: Value) -> Value {
        let a = self.answer(&id);
        a.get("error").cloned().unwrap_or_else(|| panic!("a result, not an error: {a}"))
    }

    pub(super) fn close(&mut self) {
        self.stdin = None;
    }

    /// The exit status within `limit`.
    pub(super) fn exit_within(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A marker unique to this test run, as a `sleep` duration.
pub(super) fn marker(base: u32) -> String {
    format!("{}.{}", base, std::process::id())
}

#[test]
fn r0740_framing_errors_are_answered_and_serving_goes_on() {
    let ws = Ws::new();
    let mut s = Serve::start(&ws, &["--max-message", "64KiB"]);
    s.send_raw(b"this is not json\n");
    let e = s.error(Value::Null);
    assert_eq!(e["code"], -32700, "{e}");
    s.send_raw(b"\xff\xfe{}\n");
    assert_eq!(s.error(Value::Null)["code"], -32700);
    s.send_raw(b"[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}]\n");
    let e = s.error(Value::Null);
    assert_eq!(e["code"], -32600, "{e}");
    assert!(e["message"].as_str().unwrap_or_default().contains("batch"), "{e}");
    // A line of 200 KiB against a 64 KiB limit: skipped, answered to its
    // id (read from either end of the line, as clients write it), or to
    // null when the id is not certain.
    for (head, tail, id) in [
        (r#"{"jsonrpc":"2.0","id":9,"method":"ping","params":{"x":""#, r#""}}"#, json!(9)),
        (r#"{"method":"ping","params":{"x":""#, r#""},"jsonrpc":"2.0","id":"big"}"#, json!("big")),
        (r#"{"method":"ping","params":{"id":1,"x":""#, r#""}}"#, Value::Null),
    ] {
        let mut big = head.as_bytes().to_vec();
        big.extend(std::iter::repeat_n(b'a', 200 * 1024));
        big.extend(tail.as_bytes());
        big.push(b'\n');
        s.send_raw(&big);
        let e = s.error(id);
        assert_eq!(e["code"], -32600, "{e}");
        assert_eq!(e["data"]["limit"], 64 * 1024, "{e}");
        assert!(e["message"].as_str().unwrap_or_default().contains("limit"), "{e}");
    }
    s.request(json!(2), "no/such", json!({}));
    assert_eq!(s.error(json!(2))["code"], -32601);
    s.send(json!({"jsonrpc": "1.0", "id": 3, "method": "ping"}));
    assert_eq!(s.error(json!(3))["code"], -32600);
    s.send(json!({"jsonrpc": "2.0", "id": 4, "method": "ping", "params": [1]}));
    assert_eq!(s.error(json!(4))["code"], -32602);
    s.send(json!({"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}));
    assert_eq!(s.error(Value::Null)["code"], -32600);
    s.request(json!(5), "tools/call", json!({"arguments": {}, "_meta": meta()}));
    assert_eq!(s.error(json!(5))["code"], -32602);
    // A notification is never answered, whatever it is.
    s.send(json!({"jsonrpc": "2.0", "method": "notifications/whatever"}));
    s.send_raw(b"\n\r\n");
    // CONTROL: the server still serves, and said nothing for those.
    s.request(json!(6), "tools/list", json!({"_meta": meta()}));
    let tools = s.result(6);
    assert!(tools["tools"].as_array().is_some_and(|t| !t.is_empty()), "{tools}");
    assert!(s.backlog.is_empty(), "unexpected messages: {:?}", s.backlog);
    assert!(s.next(Duration::from_millis(300)).is_none());
}

#[test]
fn r0741_handshake_era_negotiates_the_version() {
    let ws = Ws::new();
    let mut s = Serve::start(&ws, &[]);
    // Before a handshake, a request without a version is refused.
    s.request(json!(1), "tools/list", json!({}));
    let e = s.error(json!(1));
    assert_eq!(e["code"], -32602, "{e}");
    assert!(e["message"].as_str().unwrap_or_default().contains("initialize"), "{e}");
    for (asked, got) in [
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("1999-01-01", "2025-11-25"),
        ("2025-11-25", "2025-11-25"),
    ] {
        s.request(
            json!(asked),
            "initialize",
            json!({"protocolVersion": asked, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}),
        );
        let r = s.answer(&json!(asked))["result"].clone();
        assert_eq!(r["protocolVersion"], got, "{r}");
        assert_eq!(r["capabilities"]["tools"]["listChanged"], false, "{r}");
        assert_eq!(r["serverInfo"]["name"], "portcullis", "{r}");
        assert!(r["instructions"].as_str().is_some_and(|i| i.contains("read-only")), "{r}");
        assert!(r.get("resultType").is_none(), "{r}");
    }
    s.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    s.request(json!(2), "ping", json!({}));
    assert_eq!(s.result(2), json!({}));
    s.request(json!(3), "tools/list", json!({}));
    let list = s.result(3);
    assert!(list.get("ttlMs").is_none() && list.get("resultType").is_none(), "{list}");
    s.request(json!(4), "tools/call", json!({"name": "read_file", "arguments": {"path": "README.md"}}));
    let r = s.result(4);
    assert_eq!(r["isError"], false, "{r}");
    assert!(r["structuredContent"]["content"].as_str().is_some_and(|c| c.contains("readme")), "{r}");
    assert_eq!(r["content"][0]["type"], "text");
    let mirrored: Value = serde_json::from_str(r["content"][0]["text"].as_str().unwrap_or_default())
        .unwrap_or_else(|e| panic!("text is not JSON: {e}"));
    assert_eq!(mirrored, r["structuredContent"]);
}

#[test]
fn r0742_modern_era_is_served_per_request() {
    let ws = Ws::new();
    let mut s = Serve::start(&ws, &[]);
    // No discover and no handshake needed: each request stands alone.
    s.call(1, "read_file", json!({"path": "README.md"}));
    let r = s.result(1);
    assert_eq!(r["resultType"], "complete", "{r}");
    assert_eq!(r["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "portcullis", "{r}");
    assert_eq!(r["isError"], false, "{r}");
    s.request(json!(2), "server/discover", json!({"_meta": meta()}));
    let d = s.result(2);
    assert_eq!(d["resultType"], "complete", "{d}");
    let versions = d["supportedVersions"].as_array().cloned().unwrap_or_default();
    assert!(versions.contains(&json!("2026-07-28")) && versions.contains(&json!("2025-11-25")), "{d}");
    assert!(d["ttlMs"].as_u64().is_some(), "{d}");
    assert_eq!(d["cacheScope"], "private", "{d}");
    assert_eq!(d["capabilities"]["tools"]["listChanged"], false, "{d}");
    s.request(json!(3), "tools/list", json!({"_meta": meta()}));
    let l = s.result(3);
    assert_eq!(l["resultType"], "complete");
    assert!(l["ttlMs"].as_u64().is_some(), "{l}");
    assert_eq!(l["cacheScope"], "private");
    // An unsupported version: -32022 with what is supported.
    let mut old = meta();
    old["io.modelcontextprotocol/protocolVersion"] = json!("2030-01-01");
    s.request(json!(4), "tools/list", json!({"_meta": old}));
    let e = s.error(json!(4));
    assert_eq!(e["code"], -32022, "{e}");
    assert_eq!(e["data"]["requested"], "2030-01-01");
    assert_eq!(e["data"]["supported"], json!(["2026-07-28"]));
    // The client's capabilities are required with the version.
    s.request(json!(5), "tools/list", json!({"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}}));
    assert_eq!(s.error(json!(5))["code"], -32602);
    // A cursor the server never gave.
    s.request(json!(6), "tools/list", json!({"_meta": meta(), "cursor": "x"}));
    assert_eq!(s.error(json!(6))["code"], -32602);
    // The list is deterministic, and a handshake on the same process does
    // not change a modern request's answer.
    s.request(json!(7), "initialize", json!({"protocolVersion": "2025-11-25", "capabilities": {}}));
    let _ = s.answer(&json!(7));
    s.request(json!(8), "tools/list", json!({"_meta": meta()}));
    assert_eq!(s.result(8), l);
    let names: Vec<&str> = l["tools"].as_array().into_iter().flatten().filter_map(|t| t["name"].as_str()).collect();
    // The canonical order, without run_tests (no --tests here).
    let canonical: Vec<&str> = super::tools::CANONICAL.into_iter().filter(|n| *n != "run_tests").collect();
    assert_eq!(names, canonical);
    for t in l["tools"].as_array().into_iter().flatten() {
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
        assert_eq!(t["outputSchema"]["type"], "object", "{t}");
        assert!(t["description"].as_str().is_some_and(|d| d.len() > 20), "{t}");
        assert!(t["annotations"]["readOnlyHint"].is_boolean(), "{t}");
        assert!(!t["name"].as_str().unwrap_or_default().contains("polic"), "{t}");
    }
}

#[test]
fn r0743_a_long_command_does_not_hold_up_a_read() {
    let ws = Ws::new();
    let mut s = Serve::start(&ws, &[]);
    let started = Instant::now();
    s.call(1, "run_shell", json!({"command": "sleep 3"}));
    s.call(2, "read_file", json!({"path": "README.md"}));
    let first = loop {
        let m = s.next(Duration::from_secs(20)).unwrap_or_else(|| panic!("no answer"));
        if m.get("id").is_some() {
            break m;
        }
    };
    assert_eq!(first["id"], 2, "the read came after the command: {first}");
    assert!(started.elapsed() < Duration::from_secs(2), "the read took {:?}", started.elapsed());
    // CONTROL: the command did run for its three seconds.
    let r = s.structured(1);
    assert_eq!(r["outcome"], "exited", "{r}");
    assert!(started.elapsed() >= Duration::from_secs(3));
}

#[test]
fn r0744_a_cancelled_call_kills_its_tree_and_gets_no_answer() {
    let ws = Ws::new();
    let mut s = Serve::start(&ws, &[]);
    let (a, b) = (marker(6101), marker(6102));
    s.call(1, "run_shell", json!({"command": format!("sh -c 'sleep {a} & sleep {b}; echo never'")}));
    // CONTROL: both processes run.
    assert!(appears(&format!("sleep {a}")) && appears(&format!("sleep {b}")), "the command did not start");
    s.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1, "reason": "t"}}));
    assert_eq!(survivors(&a), Vec::<String>::new(), "the backgrounded child survived the cancel");
    assert_eq!(survivors(&b), Vec::<String>::new(), "the command survived the cancel");
    // Nothing is sent for the cancelled request: the next answer is the
    // ping's, and nothing else comes.
    s.request(json!(2), "ping", json!({}));
    let next = s.next(Duration::from_secs(10)).unwrap_or_else(|| panic!("no answer to the ping"));
    assert_eq!(next["id"], 2, "{next}");
    assert!(s.next(Duration::from_secs(1)).is_none());
    // A cancel for an unknown or finished request is ignored.
    s.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 77}}));
    s.call(3, "run_shell", json!({"command": "echo still"}));
    assert_eq!(s.structured(3)["stdout"], "still\n");
}

#[test]
fn r0745_the_end_of_the_input_kills_every_process() {
    let ws = Ws::new();
    let mut s = Serve::start(&ws, &[]);
    let (job, fg) = (marker(6201), marker(6202));
    s.call(1, "run_shell", json!({"command": format!("sleep {job}"), "background": true}));
    let started = s.structured(1);
    assert!(started["job_id"].is_string(), "{started}");
    s.call(2, "run_shell", json!({"command": format!("sleep {fg}")}));
    // CONTROL: both run.
    assert!(appears(&format!("sleep {job}")) && appears(&format!("sleep {fg}")), "not started");
    s.close();
    let st = s.exit_within(Duration::from_secs(10)).unwrap_or_else(|| panic!("the server did not exit at EOF"));
    assert!(st.success(), "{st}");
    assert_eq!(survivors(&job), Vec::<String>::new(), "the background job survived");
    assert_eq!(survivors(&fg), Vec::<String>::new(), "the running command survived");
    // The call still answered, saying what happened to it.
    let r = s.structured(2);
    assert_eq!(r["outcome"], "cancelled", "{r}");
}

#[test]
fn r0746_progress_is_reported_while_a_command_runs() {
    let ws = Ws::new();
    let mut s = Serve::start(&ws, &[]);
    let mut m = meta();
    m["progressToken"] = json!("tok-1");
    s.request(json!(1), "tools/call", json!({"name": "run_shell", "arguments": {"command": "sleep 2.5"}, "_meta": m}));
    let mut progress = Vec::new();
    let answer = loop {
        let msg = s.next(Duration::from_secs(20)).unwrap_or_else(|| panic!("no answer"));
        if msg["method"] == "notifications/progress" {
            progress.push(msg["params"].clone());
        } else {
            break msg;
        }
    };
    assert_eq!(answer["id"], 1, "{answer}");
    assert!(progress.len() >= 2, "{progress:?}");
    let values: Vec<u64> = progress.iter().filter_map(|p| p["progress"].as_u64()).collect();
    assert!(values.windows(2).all(|w| w[0] < w[1]), "not strictly increasing: {values:?}");
    assert!(progress.iter().all(|p| p["progressToken"] == "tok-1" && p["total"].is_u64()), "{progress:?}");
    // Nothing after the answer.
    assert!(s.next(Duration::from_millis(1500)).is_none());
    // CONTROL: without a token, no progress.
    s.call(2, "run_shell", json!({"command": "sleep 1.5"}));
    let first = s.next(Duration::from_secs(20)).unwrap_or_else(|| panic!("no answer"));
    assert_eq!(first["id"], 2, "{first}");
}

#[test]
fn r0747_stdout_carries_nothing_but_protocol() {
    let ws = Ws::new();
    let mut s = Serve::start(&ws, &[]);
    // Serve::next panics on any line that is not a JSON-RPC message.
    s.call(1, "run_shell", json!({"command": "echo PLAIN-OUT; echo PLAIN-ERR >&2; printf 'a\\nb\\r\\n'"}));
    let r = s.structured(1);
    assert_eq!(r["stdout"], "PLAIN-OUT\na\nb\r\n", "{r}");
    assert_eq!(r["stderr"], "PLAIN-ERR\n", "{r}");
    s.call(2, "run_shell", json!({"command": "echo JOB-OUT", "background": true}));
    let id = s.structured(2)["job_id"].as_str().unwrap_or_default().to_string();
    s.call(3, "shell_output", json!({"id": id, "since": 0, "wait_ms": 5000}));
    let o = s.structured(3);
    assert!(o["stdout"].as_str().unwrap_or_default().contains("JOB-OUT"), "{o}");
    s.close();
    let _ = s.exit_within(Duration::from_secs(10));
    while s.next(Duration::from_millis(200)).is_some() {}
}

#[test]
fn r0748_refusals_are_results_and_writes_fail_up_front() {
    let ws = Ws::new();
    let mut s = Serve::start(&ws, &["--read-only-commands"]);
    s.call(1, "run_shell", json!({"command": "curl http://example.com"}));
    let r = s.result(1);
    assert_eq!(r["isError"], true, "{r}");
    assert_eq!(r["structuredContent"]["error"]["kind"], "refused-by-policy", "{r}");
    assert!(r["structuredContent"]["error"]["reason"].is_string(), "{r}");
    s.call(2, "read_file", json!({"path": "../outside"}));
    let r = s.result(2);
    assert_eq!(r["isError"], true);
    assert_eq!(r["structuredContent"]["error"]["kind"], "path-escape", "{r}");
    // A command without write access: the write fails with EROFS, nothing
    // lands, and the result says so.
    s.call(3, "run_shell", json!({"command": "echo x > made-by-command"}));
    let r = s.structured(3);
    assert_eq!(r["writable"], false, "{r}");
    assert_eq!(r["sandbox"], "full", "{r}");
    assert!(r["stderr"].as_str().unwrap_or_default().contains("Read-only file system"), "{r}");
    assert!(!ws.join("made-by-command").exists());
    assert_eq!(r["refused_writes"]["count"], 1, "{r}");
    let said = r["warnings"].to_string();
    assert!(said.contains("1 write was refused") && said.contains("made-by-command"), "not said plainly: {r}");
    // The file tools still write (each write checked and audited).
    s.call(4, "write_file", json!({"path": "made-by-tool", "content": "t\n"}));
    assert_eq!(s.result(4)["isError"], false);
    assert_eq!(ws.read("made-by-tool"), "t\n");
    drop(s);
    // CONTROL: without --read-only-commands the same command writes.
    let mut s = Serve::start(&ws, &[]);
    s.call(1, "run_shell", json!({"command": "echo x > made-by-command"}));
    let r = s.structured(1);
    assert_eq!(r["writable"], true, "{r}");
    assert_eq!(ws.read("made-by-command"), "x\n");
    drop(s);
    // --readonly: no file-writing tool, commands read-only.
    let mut s = Serve::start(&ws, &["--readonly"]);
    s.request(json!(1), "tools/list", json!({"_meta": meta()}));
    let names: Vec<String> = s.result(1)["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(String::from))
        .collect();
    assert!(!names.iter().any(|n| n == "write_file" || n == "edit_file" || n == "multi_edit"), "{names:?}");
    s.call(2, "write_file", json!({"path": "x", "content": ""}));
    assert_eq!(s.structured(2)["error"]["kind"], "unknown-tool");
    s.call(3, "run_shell", json!({"command": "echo y > made-by-readonly"}));
    assert_eq!(s.structured(3)["writable"], false);
    assert!(!ws.join("made-by-readonly").exists());
}

#[test]
fn r0749_a_policy_file_inside_the_workspace_is_hidden_and_kept() {
    let ws = Ws::new();
    ws.write(".portcullis.toml", POLICY);
    let policy = ws.join(".portcullis.toml");
    let mut cmd = cli();
    cmd.arg("serve").arg("--workspace").arg(ws.path()).arg("--policy").arg(&policy);
    let mut s = Serve::spawn(cmd);
    s.call(1, "read_file", json!({"path": ".portcullis.toml"}));
    assert_eq!(s.structured(1)["error"]["kind"], "path-escape");
    s.call(2, "write_file", json!({"path": ".portcullis.toml", "content": "[shell]\nallow = [\"curl\"]\n"}));
    let r = s.result(2);
    assert_eq!(r["isError"], true, "{r}");
    s.call(3, "run_shell", json!({"command": "cat .portcullis.toml; echo more >> .portcullis.toml"}));
    let r = s.structured(3);
    assert!(!r["stdout"].as_str().unwrap_or_default().contains("allow"), "the command read the policy: {r}");
    s.call(4, "grep", json!({"pattern": "allow"}));
    let g = s.structured(4);
    assert_eq!(g["matches"], json!([]), "grep found the policy: {g}");
    assert_eq!(ws.read(".portcullis.toml"), POLICY, "the policy changed");
    // CONTROL: a sibling file reads.
    s.call(5, "read_file", json!({"path": "README.md"}));
    assert_eq!(s.result(5)["isError"], false);
}

#[test]
fn r0750_cancel_and_progress_keyed_by_id_types() {
    // String and integer ids are distinct: a cancel for "1" leaves 1 alone.
    let ws = Ws::new();
    let mut s = Serve::start(&ws, &[]);
    s.call(1, "run_shell", json!({"command": "sleep 1; echo one"}));
    s.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "1"}}));
    assert_eq!(s.structured(1)["stdout"], "one\n");
    // A second call with an id in flight is refused, the first goes on.
    s.call(2, "run_shell", json!({"command": "sleep 1; echo two"}));
    s.call(2, "read_file", json!({"path": "README.md"}));
    let e = s.answer(&json!(2));
    assert_eq!(e["error"]["code"], -32600, "{e}");
    assert_eq!(s.structured(2)["stdout"], "two\n");
}

#[test]
fn r0751_the_server_ends_at_a_signal_and_kills_what_it_started() {
    let ws = Ws::new();
    let mut s = Serve::start(&ws, &[]);
    let m = marker(6301);
    s.call(1, "run_shell", json!({"command": format!("sleep {m}")}));
    assert!(appears(&format!("sleep {m}")), "not started");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(s.child.id()).unwrap_or(0));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap_or_else(|e| panic!("kill: {e}"));
    let st = s.exit_within(Duration::from_secs(10)).unwrap_or_else(|| panic!("no exit after SIGTERM"));
    assert!(st.success(), "{st}");
    assert_eq!(survivors(&m), Vec::<String>::new());
    // SIGKILL leaves the server no say: the sandbox's kill on its
    // parent's death ends the command and the background job.
    let mut s = Serve::start(&ws, &[]);
    let (fg, job) = (marker(6302), marker(6303));
    s.call(1, "run_shell", json!({"command": format!("sh -c 'sleep {fg}.1 & sleep {fg}'")}));
    s.call(2, "run_shell", json!({"command": format!("sleep {job}"), "background": true}));
    assert!(appears(&format!("sleep {fg}")) && appears(&format!("sleep {job}")), "not started");
    let _ = s.child.kill();
    let _ = s.child.wait();
    assert_eq!(survivors(&fg), Vec::<String>::new(), "the command survived a SIGKILL of the server");
    assert_eq!(survivors(&job), Vec::<String>::new(), "the job survived a SIGKILL of the server");
}

#[test]
fn r0752_serves_in_the_landlock_only_mode_under_a_container_profile() {
    use super::container::{landlock_only_available, under, Profile};
    if !landlock_only_available("r0752") {
        return;
    }
    let ws = Ws::new();
    let policy = ws.path().with_extension("policy.toml");
    std::fs::write(&policy, format!("degraded = \"landlock-only\"\n{POLICY}")).unwrap_or_else(|e| panic!("{e}"));
    let serve = |extra: &[&str]| {
        let mut cmd = cli();
        cmd.arg("serve").arg("--workspace").arg(ws.path()).arg("--policy").arg(&policy).args(extra);
        Serve::spawn(under(Profile::Container, cmd))
    };
    let mut s = serve(&["--read-only-commands"]);
    s.call(1, "run_shell", json!({"command": "echo x > f; echo rc=$?"}));
    let r = s.structured(1);
    assert_eq!(r["outcome"], "exited", "{r}");
    assert!(r["stderr"].as_str().unwrap_or_default().contains("Permission denied"), "Landlock's EACCES: {r}");
    assert_eq!(r["sandbox"], "landlock-only", "{r}");
    assert!(!ws.join("f").exists());
    // Calls still run side by side, and a cancel still kills the tree.
    let m = marker(6401);
    s.call(2, "run_shell", json!({"command": format!("sleep {m}")}));
    assert!(appears(&format!("sleep {m}")), "not started");
    s.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2}}));
    assert_eq!(survivors(&m), Vec::<String>::new());
    drop(s);
    // CONTROL: with write access the same write lands.
    let mut s = serve(&[]);
    s.call(1, "run_shell", json!({"command": "echo x > f"}));
    let r = s.structured(1);
    assert_eq!(r["writable"], true, "{r}");
    assert_eq!(r["sandbox"], "landlock-only", "{r}");
    assert_eq!(ws.read("f"), "x\n");
}

#[test]
fn r0753_a_started_job_reports_the_access_the_gate_left_it() {
    let ws = Ws::new();
    let policy = ws.path().with_extension("policy.toml");
    let gated = format!(
        "{POLICY}\n[[gate]]\nname = \"sleep-reads\"\ncommand = \"sleep\"\nanswer = \"read-only\"\n\n\
         [[gate]]\ncommand = \"sh\"\nanswer = \"grant\"\npaths = [\"target\"]\n\n\
         [[gate]]\ncommand = \"echo\"\nanswer = \"allow\"\n"
    );
    std::fs::write(&policy, gated).unwrap_or_else(|e| panic!("{e}"));
    let mut cmd = cli();
    cmd.arg("serve").arg("--workspace").arg(ws.path()).arg("--policy").arg(&policy);
    let mut s = Serve::spawn(cmd);
    s.call(1, "run_shell", json!({"command": "sleep 0.1", "background": true}));
    let r = s.structured(1);
    assert_eq!(r["outcome"], "started", "{r}");
    assert_eq!(r["writable"], false, "the gate made it read-only: {r}");
    assert_eq!(r["write_grants"], json!([]), "{r}");
    s.call(2, "run_shell", json!({"command": "sh -c 'echo x > target/t'", "background": true}));
    let r = s.structured(2);
    assert_eq!(r["writable"], false, "{r}");
    let target = std::fs::canonicalize(ws.join("target")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r["write_grants"], json!([target.display().to_string()]), "{r}");
    // CONTROL: a command the gate allows has the policy's access (an
    // unmatched one would be read-only, the gate's default).
    s.call(3, "run_shell", json!({"command": "echo hi", "background": true}));
    assert_eq!(s.structured(3)["writable"], true);
}

#[test]
fn r0754_requests_from_a_file_and_answers_to_a_file() {
    // Not pipes: the server falls back to reading and writing through
    // tokio's blocking stdio, and answers the same.
    let ws = Ws::new();
    let dir = tempfile::tempdir_in(super::util::test_root()).unwrap_or_else(|e| panic!("{e}"));
    let input = dir.path().join("in.jsonl");
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "read_file", "arguments": {"path": "README.md"}}}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&input, text).unwrap_or_else(|e| panic!("{e}"));
    let output = dir.path().join("out.jsonl");
    let out = cli()
        .arg("serve")
        .arg("--workspace")
        .arg(ws.path())
        .stdin(std::fs::File::open(&input).unwrap_or_else(|e| panic!("{e}")))
        .stdout(std::fs::File::create(&output).unwrap_or_else(|e| panic!("{e}")))
        .status()
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.success(), "{out}");
    let answers: Vec<Value> = std::fs::read_to_string(&output)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!(answers[0]["result"]["protocolVersion"], "2025-11-25");
    assert!(answers[1]["result"]["structuredContent"]["content"].as_str().is_some_and(|c| c.contains("readme")));
}

#[test]
fn r0755_what_the_model_or_client_got_wrong_is_named_as_theirs() {
    let ws = Ws::new();
    ws.write("dir/.keep", "");
    let mut s = Serve::start(&ws, &[]);
    // Protocol: a `_meta` that is not an object, a null id, a ping held to
    // its own version.
    s.request(json!(1), "tools/list", json!({"_meta": "2026-07-28"}));
    assert_eq!(s.error(json!(1))["code"], -32602);
    s.send(json!({"jsonrpc": "2.0", "id": null, "method": "ping"}));
    assert_eq!(s.error(Value::Null)["code"], -32600);
    let mut old = meta();
    old["io.modelcontextprotocol/protocolVersion"] = json!("2030-01-01");
    s.request(json!(2), "ping", json!({"_meta": old}));
    assert_eq!(s.error(json!(2))["code"], -32022);
    // CONTROL: a ping of the modern era, and one without a version.
    s.request(json!(3), "ping", json!({"_meta": meta()}));
    assert_eq!(s.result(3)["resultType"], "complete");
    s.request(json!(4), "ping", json!({}));
    assert_eq!(s.result(4), json!({}));
    // Tools: the model's arguments, not the host's fault.
    for (id, tool, args, kind) in [
        (5, "run_shell", json!({"command": "sleep 1", "timeout_ms": 1}), "timed-out"),
        (6, "read_file", json!({"path": "a\u{0}b"}), "bad-path"),
        (7, "write_file", json!({"path": "dir", "content": "x"}), "bad-path"),
        (8, "write_file", json!({"path": "README.md/x", "content": "x"}), "bad-path"),
    ] {
        s.call(id, tool, args);
        let r = s.result(id);
        assert_eq!(r["isError"], true, "{r}");
        assert_eq!(r["structuredContent"]["error"]["kind"], kind, "{r}");
        let msg = r["structuredContent"]["error"]["message"].as_str().unwrap_or_default();
        assert!(!msg.contains("tell the user"), "blames the host: {r}");
    }
    assert_eq!(ws.read("README.md"), "readme\n");
}
