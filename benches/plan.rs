//! What planning one command costs, before and after the compiled access
//! profile (`sandbox::Profile`), in one run; std::time only. Run with
//! `scripts/bench-plan [ITERATIONS] [FILES]` (or `cargo bench --bench plan`).
//!
//! The workspace is realistic: a git repository of `PLAN_BENCH_FILES`
//! files (default 3000) in 60 directories, once without submodules and once
//! with 2 populated submodules; a policy with 3 deny globs, 2 write grants
//! in the workspace and the host's `/tmp` granted; the command is writable
//! (the costly case: protected carve-outs, the git guard, the hard-link
//! walk). Measured, interleaved so that a shared machine's drift hits every
//! variant alike:
//!
//! - `Sandbox::plan` (everything recomputed) against `Sandbox::plan_with`
//!   and a profile compiled once;
//! - the policy check as the runner made it before (`runner::check_line`:
//!   `policy.checker()` compiled per call) against the runner's held
//!   checker (`Runner::check_line`);
//! - the runner's whole per-command cost before anything starts:
//!   `Runner::prepare` and the plan a run makes (`Runner::plan`), against
//!   the same with a fresh checker and a fresh plan.
//!
//! Prints the median µs per call and the ratio `… N.NN× faster`.

use std::ffi::OsString;
use std::fs;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use portcullis::policy::WorkspacePolicy;
use portcullis::runner::{check_line, ExecOptions, Line, Prepared, Runner};
use portcullis::sandbox::{ExecRequest, Sandbox};

const DIRS: usize = 60;

fn git(dir: &Path, args: &[&str]) -> Result<(), String> {
    let out = Command::new("git")
        .args(["-c", "protocol.file.allow=always", "-c", "user.name=b", "-c", "user.email=b@b"])
        .args(["-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .output()
        .map_err(|e| format!("git {args:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("git {args:?} in {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr)));
    }
    Ok(())
}

fn write(p: &Path, text: &str) -> Result<(), String> {
    if let Some(d) = p.parent() {
        fs::create_dir_all(d).map_err(|e| format!("{}: {e}", d.display()))?;
    }
    fs::write(p, text).map_err(|e| format!("{}: {e}", p.display()))
}

/// A git repository with `files` files, a few of them matching the deny
/// globs, committed.
fn repo(dir: &Path, files: usize) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    git(dir, &["init", "-q"])?;
    for i in 0..files {
        write(&dir.join(format!("src/m{:02}/f{i}.rs", i % DIRS)), &format!("pub fn f{i}() {{}}\n"))?;
    }
    for d in ["", "src/m01", "src/m07/deep"] {
        write(&dir.join(d).join(".env"), "SECRET=1\n")?;
        write(&dir.join(d).join("server.key"), "KEY\n")?;
    }
    write(&dir.join("secrets/token"), "t\n")?;
    write(&dir.join("target/debug/out.txt"), "o\n")?;
    write(&dir.join("gen/out.txt"), "o\n")?;
    write(&dir.join(".gitignore"), "target/\ngen/\n")?;
    git(dir, &["add", "-A"])?;
    git(dir, &["commit", "-qm", "init"])
}

fn policy_for(ws: &Path, tmp: &Path) -> Result<WorkspacePolicy, String> {
    let text = format!(
        r#"
workspace = {ws:?}
deny_paths = [".env*", "*.key", "secrets"]
write = ["target", "gen", {tmp:?}]
network = "none"
[shell]
interpreter = "sh"
allow = ["cargo", "git", "ls", "cat", "grep", "echo", "true"]
"#,
        ws = ws.display().to_string(),
        tmp = tmp.display().to_string()
    );
    WorkspacePolicy::from_toml(&text).map_err(|e| e.to_string())
}

fn request(ws: &Path, tmp: &Path) -> ExecRequest {
    let mut r = ExecRequest::new(ws, ["cargo", "test"]);
    r.deny = vec![".env*".into(), "*.key".into(), "secrets".into()];
    r.write = vec!["target".into(), "gen".into(), tmp.to_path_buf()];
    r
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v.get(v.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1e6)
}

fn ratio(before: f64, after: f64) -> f64 {
    before / after.max(0.001)
}

fn run() -> Result<(), String> {
    let iters: usize = std::env::var("PLAN_ITERS").ok().and_then(|n| n.parse().ok()).unwrap_or(200).max(10);
    let files: usize = std::env::var("PLAN_BENCH_FILES").ok().and_then(|n| n.parse().ok()).unwrap_or(3000);
    let root = tempfile::Builder::new().prefix("pc-bench-plan-").tempdir_in("/var/tmp").map_err(|e| e.to_string())?;
    let plain = root.path().join("plain");
    repo(&plain, files)?;
    let subs = root.path().join("subs");
    repo(&subs, files)?;
    for s in ["liba", "libb"] {
        let src = root.path().join(format!("{s}-origin"));
        repo(&src, 50)?;
        git(&subs, &["submodule", "add", "-q", &src.display().to_string(), &format!("vendor/{s}")])?;
    }
    git(&subs, &["commit", "-qm", "submodules"])?;
    let cases = [("no submodules", plain), ("2 submodules", subs)];

    let sandbox = Sandbox::new().map_err(|e| e.to_string())?;
    // The host's /tmp is granted, unless what other users keep there makes
    // the plan refuse it (more hard links across the boundary than the
    // sandbox binds); then a directory of our own stands in for it.
    let own_tmp = root.path().join("tmp");
    fs::create_dir_all(&own_tmp).map_err(|e| e.to_string())?;
    let tmp = match sandbox.plan(&request(&cases[0].1, Path::new("/tmp"))) {
        Ok(_) => PathBuf::from("/tmp"),
        Err(e) => {
            println!(
                "bench-plan: the host's /tmp cannot be granted here ({e}); granting {} instead",
                own_tmp.display()
            );
            own_tmp
        }
    };
    println!(
        "bench-plan: {files} files, 3 deny globs, 2 write grants + {}, writable; median of {iters} per variant",
        tmp.display()
    );
    for (name, ws) in &cases {
        let req = request(ws, &tmp);
        let policy = policy_for(ws, &tmp)?;
        let profile = sandbox.profile(&req).map_err(|e| e.to_string())?;
        let runner = Runner::builder()
            .policy(policy.clone())
            .sandbox(Sandbox::new().map_err(|e| e.to_string())?)
            .build()
            .map_err(|e| e.to_string())?;
        let rt = tokio::runtime::Builder::new_current_thread().build().map_err(|e| e.to_string())?;
        let words: Vec<OsString> = vec!["cargo test 2>&1 | grep ok > gen/out.txt".into()];
        let opts = ExecOptions { sh: true, writable: true, ..ExecOptions::default() };
        let line: Vec<String> = words.iter().filter_map(|w| w.to_str()).map(str::to_string).collect();
        // The same answer both ways (the tests pin it too).
        let a = sandbox.plan(&req).map_err(|e| e.to_string())?;
        let b = sandbox.plan_with(&profile, &req).map_err(|e| e.to_string())?;
        if serde_json::to_string(&a).ok() != serde_json::to_string(&b).ok() {
            return Err(format!("{name}: the profile's plan differs from a fresh plan"));
        }
        let mut t = [(); 6].map(|_| Vec::with_capacity(iters));
        for _ in 0..iters {
            let s = Instant::now();
            black_box(sandbox.plan(&req).map_err(|e| e.to_string())?);
            t[0].push(s.elapsed());
            let s = Instant::now();
            black_box(sandbox.plan_with(&profile, &req).map_err(|e| e.to_string())?);
            t[1].push(s.elapsed());
            let s = Instant::now();
            black_box(check_line(&policy, Line::Argv(&line), true, None).map_err(|e| e.to_string())?);
            t[2].push(s.elapsed());
            let s = Instant::now();
            black_box(runner.check_line(Line::Argv(&line), true, None).map_err(|e| e.to_string())?);
            t[3].push(s.elapsed());
            let s = Instant::now();
            let prepared = rt.block_on(runner.prepare(&words, &opts)).map_err(|e| e.to_string())?;
            let Prepared::Ready(ready) = prepared else { return Err("the bench command was refused".into()) };
            black_box(runner.plan(&ready).map_err(|e| e.to_string())?);
            t[4].push(s.elapsed());
            // Before: the same prepare, but a checker compiled for the call
            // and a fresh plan.
            let s = Instant::now();
            black_box(check_line(&policy, Line::Argv(&line), true, None).map_err(|e| e.to_string())?);
            let prepared = rt.block_on(runner.prepare(&words, &opts)).map_err(|e| e.to_string())?;
            let Prepared::Ready(ready) = prepared else { return Err("the bench command was refused".into()) };
            black_box(ready.plan(runner.sandbox().map_err(|e| e.to_string())?).map_err(|e| e.to_string())?);
            t[5].push(s.elapsed());
        }
        let [f, p, cf, ch, after, held] = t.map(median);
        // `held` paid one held check on top of the fresh one: take it off.
        let before = held - ch;
        println!("{name}:");
        println!("  Sandbox::plan    fresh  {f:9.1} µs   with the profile {p:9.1} µs   {:.2}× faster", ratio(f, p));
        println!("  policy check     fresh  {cf:9.1} µs   held checker     {ch:9.1} µs   {:.2}× faster", ratio(cf, ch));
        println!(
            "  prepare + plan   before {before:9.1} µs   after            {after:9.1} µs   {:.2}× faster",
            ratio(before, after)
        );
    }
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("bench-plan: {e}");
        std::process::exit(1);
    }
}
