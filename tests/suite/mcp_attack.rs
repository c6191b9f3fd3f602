//! Adversarial review of `portcullis serve` (issue 11), as a hostile MCP
//! client and a hostile model: each test attacks the running server from
//! outside (JSON lines on its stdin, the host's /proc, the files on disk,
//! its stderr) and has a control.

use std::io::{Read, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::mcp_server::{appears, marker, meta, Serve};
use super::util::{cli, survivors, Ws};

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
