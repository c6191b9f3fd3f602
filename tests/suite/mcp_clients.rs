//! `portcullis serve` driven by real MCP clients nobody here wrote (issue
//! 11): the official Python SDK (`mcp` 2.3.0) through
//! `tests/mcp/python_client.py`, in the modern era (the SDK's default: it
//! probes `server/discover` and must not fall back) and in the 2025-11-25
//! handshake era (`mode="legacy"`), and pinned to 2026-07-28 with no probe
//! (`mode="2026-07-28"`). The script lists the tools and checks
//! their schemas as JSON Schema 2020-12, calls every tool, and checks a
//! refusal with its reason, a stale edit, path escapes, a timeout, two
//! cancellations, two calls in flight, progress, `--readonly` and the
//! exit on stdin EOF — each effect from outside (files on disk, processes
//! in /proc). See the script's header.
//!
//! The clients come from `scripts/mcp-clients`, which installs them into a
//! cache directory and prints it; `PORTCULLIS_MCP_CLIENTS` names that
//! directory (scripts/test sets it). Without it the tests skip visibly, and
//! fail under `PORTCULLIS_REQUIRE_ALL_LAYERS=1`.

use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::util::{available, bin_dir, test_root};

/// The script, carried in the test binary: the unprivileged pass runs a
/// copy of the binary from a directory uid 65534 can reach, and the clone
/// it was built from may not be one.
const PYTHON_CLIENT: &str = include_str!("../mcp/python_client.py");

/// The whole script's run, beyond its own deadline (240 s).
const DEADLINE: Duration = Duration::from_secs(300);

/// The venv's python in `PORTCULLIS_MCP_CLIENTS`, or a visible skip saying
/// how to get it.
fn python(test: &str) -> Option<PathBuf> {
    let how = "run scripts/mcp-clients (it installs the official MCP clients from PyPI and npm into a cache \
               directory and prints it) and export PORTCULLIS_MCP_CLIENTS=<that directory>; scripts/test does both";
    let Some(dir) = std::env::var_os("PORTCULLIS_MCP_CLIENTS").filter(|d| !d.is_empty()) else {
        available(test, false, &format!("PORTCULLIS_MCP_CLIENTS is not set: {how}"));
        return None;
    };
    let py = Path::new(&dir).join("venv/bin/python");
    let ok = Command::new(&py)
        .args(["-c", "import mcp.client.stdio, jsonschema"])
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success());
    if !available(
        test,
        ok,
        &format!("{} cannot import the MCP Python SDK (mcp.client.stdio, jsonschema): {how}", py.display()),
    ) {
        return None;
    }
    Some(py)
}

/// Run the Python client against the binary under test in `mode` (its
/// `--mode`: the SDK's `Client(mode=...)`); it must exit 0.
fn python_client(test: &str, mode: &str) {
    let Some(py) = python(test) else { return };
    // Under test_root(): the unprivileged pass points it at a directory
    // uid 65534 owns (PORTCULLIS_TEST_ROOT).
    let root = test_root();
    let scratch = tempfile::Builder::new()
        .prefix("pc-mcp-py-")
        .tempdir_in(&root)
        .unwrap_or_else(|e| panic!("{test}: tempdir in {}: {e}", root.display()));
    let script = scratch.path().join("python_client.py");
    fs::write(&script, PYTHON_CLIENT).unwrap_or_else(|e| panic!("{test}: write {}: {e}", script.display()));
    let work = scratch.path().join("run");
    fs::create_dir(&work).unwrap_or_else(|e| panic!("{test}: mkdir {}: {e}", work.display()));
    let server = bin_dir().join("portcullis");
    let mut child = Command::new(&py)
        .arg(&script)
        .arg(&server)
        .arg(&work)
        .args(["--mode", mode])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{test}: start {} {}: {e}", py.display(), script.display()));
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut p) = pipe {
                let mut buf = Vec::new();
                let _ = p.read_to_end(&mut buf);
                s = String::from_utf8_lossy(&buf).into_owned();
            }
            s
        })
    };
    let out = drain(child.stdout.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let err = drain(child.stderr.take().map(|p| Box::new(p) as Box<dyn Read + Send>));
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if started.elapsed() < DEADLINE => std::thread::sleep(Duration::from_millis(100)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            Err(e) => panic!("{test}: wait for the python client: {e}"),
        }
    };
    let out = out.join().unwrap_or_default();
    let err = err.join().unwrap_or_default();
    let ok = status.is_some_and(|s| s.success());
    if !ok {
        // Keep the scratch directory (workspace, policy, server stderr) to look at.
        let kept = scratch.keep();
        panic!(
            "{test}: the MCP Python SDK client (mode {mode}) against {} {}; scratch kept in {}\n\
             --- stdout ---\n{out}\n--- stderr ---\n{err}",
            server.display(),
            match status {
                Some(s) => format!("exited with {s}"),
                None => format!("did not finish in {} s and was killed", DEADLINE.as_secs()),
            },
            kept.display(),
        );
    }
    // Passed: its one line per check, for `--nocapture`.
    println!("{out}");
}

#[test]
fn r0700_python_sdk_client_modern_era() {
    python_client("r0700_python_sdk_client_modern_era", "auto");
}

#[test]
fn r0700_python_sdk_client_handshake_era() {
    python_client("r0700_python_sdk_client_handshake_era", "legacy");
}

#[test]
fn r0700_python_sdk_client_pinned_modern_era() {
    // `mode="2026-07-28"`: no probe at all, every request stateless from the first.
    python_client("r0700_python_sdk_client_pinned_modern_era", "2026-07-28");
}
