//! What one audit record costs: `Sync::Every` (fdatasync per record, the
//! default), `Sync::Batch(16)`, writing with no sync at all (the lock, the
//! read-back of the last line, the write: what the syncs add to), and no
//! audit (building and encoding the event only). std::time only. Run with
//! `scripts/bench-audit [RECORDS] [DIR]` (or `cargo bench --bench audit`);
//! `AUDIT_RECORDS=N` (default 2000) records per variant, in `AUDIT_DIR`
//! (default /var/tmp: a real disk, not a tmpfs).
//!
//! The variants run interleaved, in rounds of 100 records each, so that a
//! machine whose speed drifts (other builds on a shared host) hits all of
//! them alike. A record is a realistic `allowed` event of a shell command
//! (about 400 bytes on the line).

use std::hint::black_box;
use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use portcullis::audit::jsonl::Sync;
use portcullis::audit::{Event, JsonlAudit};
use portcullis::gate::{Access, Action, Backend, ShellExec};
use portcullis::policy::Interpreter;

fn event(i: usize, ws: &Path) -> Event {
    Event::Allowed {
        id: format!("cmd-{i}"),
        action: Action::ShellExec(ShellExec {
            line: format!("cargo test --workspace -- --test-threads=4 case_{i}"),
            interpreter: Interpreter::None,
            commands: Vec::new(),
            cwd: ws.to_path_buf(),
            workspace: Some(ws.to_path_buf()),
            asked: Access { writable: true, write_grants: Vec::new() },
            background: false,
            backend: Backend::Sandbox,
        }),
        effective: Access { writable: false, write_grants: vec![ws.join("target"), PathBuf::from("/tmp")] },
        rule: Some("tests-write-target".into()),
    }
}

enum Variant {
    None,
    NoSync(JsonlAudit),
    Batch(JsonlAudit),
    Every(JsonlAudit),
}

impl Variant {
    fn name(&self) -> &'static str {
        match self {
            Variant::None => "no audit",
            Variant::NoSync(_) => "write, no sync",
            Variant::Batch(_) => "batch(16)",
            Variant::Every(_) => "fsync every",
        }
    }

    fn record(&self, e: &Event) -> Result<(), String> {
        match self {
            Variant::None => {
                black_box(serde_json::to_string(e).map_err(|e| e.to_string())?);
                Ok(())
            }
            Variant::NoSync(a) | Variant::Batch(a) | Variant::Every(a) => {
                a.append(e).map(drop).map_err(|e| e.to_string())
            }
        }
    }
}

fn main() {
    let records: usize = std::env::var("AUDIT_RECORDS").ok().and_then(|n| n.parse().ok()).unwrap_or(2000);
    let root = std::env::var_os("AUDIT_DIR").map_or_else(|| PathBuf::from("/var/tmp"), PathBuf::from);
    let dir = match tempfile::Builder::new().prefix("pc-bench-audit-").tempdir_in(&root) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("bench-audit: cannot make a directory in {}: {e}", root.display());
            std::process::exit(1);
        }
    };
    let ws = PathBuf::from("/home/dev/project");
    let open = |name: &str, sync: Sync| match JsonlAudit::open_with(dir.path().join(name), sync) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("bench-audit: {e}");
            std::process::exit(1);
        }
    };
    let never = NonZeroU32::new(u32::MAX).unwrap_or(NonZeroU32::MIN);
    let sixteen = NonZeroU32::new(16).unwrap_or(NonZeroU32::MIN);
    let variants = [
        Variant::None,
        Variant::NoSync(open("nosync.jsonl", Sync::Batch(never))),
        Variant::Batch(open("batch.jsonl", Sync::Batch(sixteen))),
        Variant::Every(open("every.jsonl", Sync::Every)),
    ];
    let events: Vec<Event> = (0..records).map(|i| event(i, &ws)).collect();
    let mut total = vec![Duration::ZERO; variants.len()];
    let round = 100.min(records.max(1));
    let mut done = 0;
    let mut r = 0;
    while done < records {
        let n = round.min(records - done);
        for k in 0..variants.len() {
            let v = (k + r) % variants.len();
            let t = Instant::now();
            for e in &events[done..done + n] {
                if let Err(e) = variants[v].record(e) {
                    eprintln!("bench-audit: {}: {e}", variants[v].name());
                    std::process::exit(1);
                }
            }
            total[v] += t.elapsed();
        }
        done += n;
        r += 1;
    }
    let line = std::fs::read_to_string(dir.path().join("every.jsonl"))
        .ok()
        .and_then(|s| s.lines().nth(1).map(str::len))
        .unwrap_or(0);
    println!("audit record cost, {records} records per variant, in {} ({line} bytes a line)", root.display());
    let us = |d: Duration| d.as_secs_f64() * 1e6 / records as f64;
    let every = us(total[3]);
    for (v, t) in variants.iter().zip(&total) {
        let per = us(*t);
        println!("  {:<15} {:>9.1} us/record   {:>7.3}x of fsync-every", v.name(), per, per / every);
    }
    println!(
        "  fsync every / batch(16): {:.1}x;  batch(16) / no sync: {:.1}x",
        every / us(total[2]),
        us(total[2]) / us(total[1])
    );
    for v in &variants[1..] {
        if let Variant::NoSync(a) | Variant::Batch(a) | Variant::Every(a) = v {
            match portcullis::audit::verify(a.path()) {
                Ok(rep) if rep.intact && rep.records == records as u64 => {}
                Ok(rep) => {
                    eprintln!("bench-audit: {} log does not verify:\n{}", v.name(), rep.render());
                    std::process::exit(1);
                }
                Err(e) => {
                    eprintln!("bench-audit: {e}");
                    std::process::exit(1);
                }
            }
        }
    }
}
