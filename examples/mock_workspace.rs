//! A hermetic workspace: the mock backend (an in-memory tree under a root
//! that need not exist, scripted command results) behind the same
//! `Workspace` API, policy, gate and audit as the real one. No disk, no
//! helper binary, no kernel feature: this runs anywhere.
//!
//!     cargo run --example mock_workspace
//!
//! What a host's own test would do with it: seed files, script the commands
//! its code runs, call the code, then check the tree and the audit.

use std::error::Error;
use std::sync::{Arc, Mutex};

use portcullis::audit::{Audit, AuditError, Event};
use portcullis::gate::BoxFuture;
use portcullis::policy::WorkspacePolicy;
use portcullis::runner::{Exec, ExecOptions};
use portcullis::workspace::files::{Edit, ReadOptions};
use portcullis::workspace::{CommandMatch, MockBackend, MockRun, Workspace};

/// An audit sink that keeps the records in memory.
#[derive(Default)]
struct Records(Mutex<Vec<Event>>);

impl Audit for Records {
    fn record<'a>(&'a self, event: &'a Event) -> BoxFuture<'a, Result<(), AuditError>> {
        if let Ok(mut v) = self.0.lock() {
            v.push(event.clone());
        }
        Box::pin(std::future::ready(Ok(())))
    }
}

const POLICY: &str = r#"
workspace = "/srv/app"
deny_paths = [".env*"]

[shell]
allow = ["cargo", "git"]
timeout = "60s"
"#;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn Error>> {
    let policy = WorkspacePolicy::from_toml(POLICY)?;
    let mock = MockBackend::new(&policy)?;
    mock.add_file("src/lib.rs", "pub fn answer() -> u32 { 41 }\n");
    mock.add_file(".env", "TOKEN=secret\n");
    // `cargo fmt` rewrites a file (only if it may write), `cargo test` passes.
    mock.on_command(
        CommandMatch::line("cargo fmt"),
        MockRun::exit(0).write("src/lib.rs", "pub fn answer() -> u32 {\n    42\n}\n"),
    );
    mock.on_command(CommandMatch::program("cargo"), MockRun::exit(0).stdout("test result: ok. 1 passed\n"));

    let audit = Arc::new(Records::default());
    let ws = Workspace::builder().policy(policy).audit(audit.clone()).backend(Arc::new(mock.clone())).build()?;

    // Files: the same windows, hashes and edit rules as on disk.
    let page = ws.read_file("src/lib.rs", ReadOptions::default()).await?;
    print!("{}", page.content);
    let edit = Edit { old: "41".into(), new: "42".into(), replace_all: false };
    ws.edit_file("src/lib.rs", edit, Some(page.hash)).await?;
    // The jail holds: the deny list, `..`.
    for path in [".env", "../etc/passwd"] {
        match ws.read_file(path, ReadOptions::default()).await {
            Err(e) => println!("read {path}: {} ({e})", e.kind()),
            Ok(_) => return Err(format!("{path} was readable").into()),
        }
    }

    // Commands: checked, gated and audited; the script answers.
    let run = |line: &'static str, writable: bool| {
        let ws = ws.clone();
        async move { ws.exec(line, ExecOptions { writable, ..ExecOptions::default() }).await }
    };
    if let Exec::Ran(r) = run("cargo fmt", false).await? {
        println!("cargo fmt without write access: {} refused write(s)", r.result.refused_writes.count);
    }
    if let Exec::Ran(r) = run("cargo test", false).await? {
        print!("cargo test: {}", String::from_utf8_lossy(&r.result.stdout));
        println!("enforced by the kernel: {}", r.result.enforcement.is_enforced());
    }
    if let Exec::Refused(r) = run("curl https://example.com", false).await? {
        println!("curl: refused ({r})");
    }

    // Check from outside: the tree and the audit.
    let now = mock.contents("src/lib.rs").unwrap_or_default();
    println!("src/lib.rs is now: {:?}", String::from_utf8_lossy(&now));
    let n = audit.0.lock().map(|v| v.len()).unwrap_or(0);
    println!("{n} audit records");
    Ok(())
}
