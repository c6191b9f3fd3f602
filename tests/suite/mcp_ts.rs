//! `portcullis serve` driven by a real client nobody here wrote: the official
//! MCP TypeScript SDK 1.x (`@modelcontextprotocol/sdk`, the handshake era:
//! `Client` + `StdioClientTransport`), through `tests/mcp/ts_client.mjs`.
//! The script does the checking (the handshake, the tool list and its JSON
//! Schema 2020-12 schemas, every tool called, refusals, stale edits, path
//! escapes checked from outside, a timeout, a cancellation and a kill seen in
//! /proc, two calls in flight, progress, malformed traffic, stdin EOF); this
//! wrapper finds node and the SDK, runs the script against the binary under
//! test and shows its output.
//!
//! The SDK is installed by `scripts/mcp-clients` into a cache directory named
//! by `PORTCULLIS_MCP_CLIENTS` (`$DIR/node_modules/@modelcontextprotocol/sdk`);
//! without it, or without `node` on PATH, the test is skipped (a failure under
//! `PORTCULLIS_REQUIRE_ALL_LAYERS=1`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::util::{available, bin_dir, test_root};

/// The script, compiled in: the unprivileged pass runs a copy of the test
/// binary where uid 65534 may not be able to read the checkout.
const SCRIPT: &str = include_str!("../mcp/ts_client.mjs");

/// The script ends itself after 240 s (its watchdog); this is the backstop.
const DEADLINE: Duration = Duration::from_secs(300);

/// `name` in a directory of PATH, as an executable file.
fn on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// Node's major version (`v20.20.2` → 20).
fn node_major(node: &Path) -> Option<u32> {
    let out = Command::new(node).arg("--version").output().ok()?;
    let v = String::from_utf8_lossy(&out.stdout).trim().trim_start_matches('v').to_string();
    v.split('.').next()?.parse().ok()
}

#[test]
fn r0720_typescript_sdk_client_handshake_era() {
    let t = "r0720_typescript_sdk_client_handshake_era";
    let Some(clients) = std::env::var_os("PORTCULLIS_MCP_CLIENTS").filter(|v| !v.is_empty()).map(PathBuf::from) else {
        available(t, false, "PORTCULLIS_MCP_CLIENTS is not set: run scripts/mcp-clients (it installs the MCP client SDKs) and set it to that directory");
        return;
    };
    let sdk = clients.join("node_modules/@modelcontextprotocol/sdk/package.json");
    if !available(
        t,
        sdk.is_file(),
        &format!("no MCP TypeScript SDK at {}: run scripts/mcp-clients to install it", sdk.display()),
    ) {
        return;
    }
    let node = on_path("node");
    let Some(node) = node.filter(|n| node_major(n).is_some_and(|m| m >= 18)) else {
        available(
            t,
            false,
            "no `node` (18 or newer) on PATH to run the MCP TypeScript SDK (scripts/mcp-clients needs it too)",
        );
        return;
    };

    let dir = tempfile::Builder::new()
        .prefix("pc-mcp-ts-")
        .tempdir_in(test_root())
        .unwrap_or_else(|e| panic!("tempdir in {}: {e}", test_root().display()));
    let script = dir.path().join("ts_client.mjs");
    fs::write(&script, SCRIPT).unwrap_or_else(|e| panic!("write {}: {e}", script.display()));
    let scratch = dir.path().join("scratch");
    fs::create_dir(&scratch).unwrap_or_else(|e| panic!("mkdir {}: {e}", scratch.display()));
    // Output to files, not pipes: nothing to drain while waiting.
    let (out_path, err_path) = (dir.path().join("stdout"), dir.path().join("stderr"));
    let out_file = fs::File::create(&out_path).unwrap_or_else(|e| panic!("create {}: {e}", out_path.display()));
    let err_file = fs::File::create(&err_path).unwrap_or_else(|e| panic!("create {}: {e}", err_path.display()));

    let portcullis = bin_dir().join("portcullis");
    let mut child = Command::new(&node)
        .arg(&script)
        .arg(&portcullis)
        .arg(&scratch)
        .env("PORTCULLIS_MCP_CLIENTS", &clients)
        .stdin(Stdio::null())
        .stdout(out_file)
        .stderr(err_file)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {} {}: {e}", node.display(), script.display()));
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if start.elapsed() > DEADLINE => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => panic!("wait for {}: {e}", script.display()),
        }
    };
    let out = fs::read_to_string(&out_path).unwrap_or_default();
    let err = fs::read_to_string(&err_path).unwrap_or_default();
    let shown = format!(
        "node {} {} {} (SDK in {})\n--- stdout ---\n{out}--- stderr ---\n{err}",
        script.display(),
        portcullis.display(),
        scratch.display(),
        clients.display()
    );
    let Some(status) = status else {
        panic!("ts_client.mjs did not end within {DEADLINE:?} (killed):\n{shown}");
    };
    assert!(status.success(), "ts_client.mjs failed ({status}):\n{shown}");
    let passed = out.lines().filter(|l| l.starts_with("ok ")).count();
    let failed = out.lines().filter(|l| l.starts_with("not ok ")).count();
    assert!(failed == 0 && passed >= 100, "{failed} checks failed, {passed} passed (100 or more expected):\n{shown}");
    // Shown with --nocapture.
    println!("{shown}");
}
