//! `workspace::search::grep` against ripgrep on the same 20 000-file tree,
//! cold and warm, a literal and a regex; std::time only. Run with
//! `scripts/bench-grep` (or `cargo bench --bench grep`).
//!
//! Both sides run as a process that prints every match as
//! `path:line:text` to /dev/null (this binary re-executes itself to search),
//! so both pay process start, the walk, the search and the output. The
//! tree is generated once, deterministically (source-like text, ~2.5 KB a
//! file), under `GREP_BENCH_DIR` (default /var/tmp/pc-bench-grep).
//! Cold runs drop the page cache first (`/proc/sys/vm/drop_caches`, root
//! only; otherwise they are skipped and the report says so).
//!
//! ripgrep is used if `rg` is on PATH (Debian/Ubuntu: `apt-get install
//! ripgrep`; or `cargo install ripgrep`); nothing is installed here.

use std::fs;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use portcullis::path::DenyGlobs;
use portcullis::workspace::search::{grep, GrepOptions};

const DIRS: usize = 200;
const FILES_PER_DIR: usize = 100;
const LINES_PER_FILE: usize = 60;

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a>(&mut self, v: &[&'a str]) -> &'a str {
        v[(self.next() % v.len() as u64) as usize]
    }
}

const IDS: &[&str] = &[
    "config", "request", "buffer", "parser", "state", "client", "token", "index", "cache", "writer", "reader", "span",
];
const METHODS: &[&str] = &["get", "insert", "push", "parse", "flush", "len", "clone", "iter", "map_err", "unwrap_or"];
const ERRS: &[&str] = &["ConfigError", "ParseError", "IoError", "NetError", "StateError"];
const VARIANTS: &[&str] = &["Timeout", "Missing", "Invalid", "Closed", "Overflow"];
const WORDS: &[&str] =
    &["handle", "the", "case", "where", "input", "is", "empty", "retry", "later", "check", "bounds", "first"];

fn line(r: &mut Rng, out: &mut String) {
    let k = r.next() % 100;
    let (a, b, m) = (r.pick(IDS), r.pick(IDS), r.pick(METHODS));
    match k {
        0..=39 => out.push_str(&format!("    let {a}_{} = {b}.{m}({a});\n", r.next() % 100)),
        40..=49 => out.push_str(&format!("fn {a}_{b}_handler(ctx: &mut Context) -> Result<(), {}> {{\n", r.pick(ERRS))),
        50..=59 => out.push_str(&format!(
            "        return Err({}::{}(\"{} {}\"));\n",
            r.pick(ERRS),
            r.pick(VARIANTS),
            r.pick(WORDS),
            r.pick(WORDS)
        )),
        60..=61 => out.push_str(&format!("    // TODO: fix {} {} {}\n", r.pick(WORDS), r.pick(WORDS), r.pick(WORDS))),
        62..=79 => {
            out.push_str(&format!("    // {} {} {} {}\n", r.pick(WORDS), r.pick(WORDS), r.pick(WORDS), r.pick(WORDS)))
        }
        80..=89 => out.push_str("    }\n"),
        _ => out.push_str(&format!("    if {a}.{m}() > {} {{\n", r.next() % 1000)),
    }
}

fn generate(dir: &Path) -> io::Result<()> {
    let stamp = dir.join(".complete");
    if stamp.exists() {
        return Ok(());
    }
    let _ = fs::remove_dir_all(dir);
    let mut r = Rng(0x9E37_79B9_7F4A_7C15);
    let mut text = String::new();
    for d in 0..DIRS {
        let sub = dir.join(format!("crate{:02}/src/mod{:02}", d / 10, d % 10));
        fs::create_dir_all(&sub)?;
        for f in 0..FILES_PER_DIR {
            text.clear();
            for _ in 0..LINES_PER_FILE {
                line(&mut r, &mut text);
            }
            fs::write(sub.join(format!("file{f:03}.rs")), &text)?;
        }
    }
    fs::write(stamp, "")
}

/// The child: search and print every match, as rg does.
fn child(dir: &str, pattern: &str, fixed: bool) -> ExitCode {
    let mut o = GrepOptions::new(pattern);
    o.fixed_strings = fixed;
    o.max_results = usize::MAX;
    let deny = match DenyGlobs::new(&[]) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    match grep(Path::new(dir), &deny, &o) {
        Ok(r) => {
            let mut w = BufWriter::new(io::stdout().lock());
            for m in &r.matches {
                let _ = writeln!(w, "{}:{}:{}", m.path, m.line, m.text);
            }
            let _ = w.flush();
            eprintln!("{}", r.matches.len());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("grep: {e}");
            ExitCode::FAILURE
        }
    }
}

fn drop_caches() -> bool {
    nix::unistd::sync();
    fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

/// One timed run of `cmd` with stdout to /dev/null.
fn time(mut cmd: Command) -> io::Result<Duration> {
    cmd.stdout(Stdio::null()).stderr(Stdio::null());
    let t = Instant::now();
    let st = cmd.status()?;
    let d = t.elapsed();
    if !st.success() && st.code() != Some(1) {
        return Err(io::Error::other(format!("{cmd:?}: {st}")));
    }
    Ok(d)
}

fn ours(exe: &Path, dir: &Path, pat: &str, fixed: bool) -> Command {
    let mut c = Command::new(exe);
    c.arg("__search").arg(dir).arg(pat).arg(if fixed { "fixed" } else { "regex" });
    c
}

fn rg(dir: &Path, pat: &str, fixed: bool) -> Command {
    let mut c = Command::new("rg");
    c.args(["--no-config", "-n", "--no-heading", "--color=never"]);
    if fixed {
        c.arg("-F");
    }
    c.arg("--").arg(pat).arg(dir);
    c
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn count_ours(exe: &Path, dir: &Path, pat: &str, fixed: bool) -> io::Result<usize> {
    let out = ours(exe, dir, pat, fixed).stdout(Stdio::null()).output()?;
    String::from_utf8_lossy(&out.stderr).trim().parse().map_err(io::Error::other)
}

fn count_rg(dir: &Path, pat: &str, fixed: bool) -> io::Result<usize> {
    let out = rg(dir, pat, fixed).output()?;
    Ok(out.stdout.iter().filter(|b| **b == b'\n').count())
}

fn run() -> io::Result<()> {
    let dir = std::env::var_os("GREP_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/pc-bench-grep"));
    let runs: usize = std::env::var("GREP_BENCH_RUNS").ok().and_then(|s| s.parse().ok()).unwrap_or(7);
    let t = Instant::now();
    generate(&dir)?;
    println!(
        "tree: {} ({DIRS} directories x {FILES_PER_DIR} files, {LINES_PER_FILE} lines each; ready in {:.1?})",
        dir.display(),
        t.elapsed()
    );
    let exe = std::env::current_exe()?;
    let have_rg = Command::new("rg").arg("--version").stdout(Stdio::null()).status().is_ok_and(|s| s.success());
    if !have_rg {
        println!("rg not found on PATH: timing ours only (apt-get install ripgrep, or cargo install ripgrep)");
    }
    let can_drop = drop_caches();
    if !can_drop {
        println!("cold: cannot drop the page cache (needs root and a writable /proc/sys): cold runs skipped");
    }
    let cases = [("literal", "TODO: fix", true), ("regex", r"Err\(\w+Error::(Timeout|Closed)", false)];
    for (name, pat, fixed) in cases {
        let n = count_ours(&exe, &dir, pat, fixed)?;
        let agree = if have_rg {
            let m = count_rg(&dir, pat, fixed)?;
            if m == n {
                "rg agrees".to_string()
            } else {
                format!("rg finds {m}: MISMATCH")
            }
        } else {
            String::new()
        };
        println!("{name} {pat:?}: {n} matching lines {agree}");
        let mut modes = vec![("warm", false)];
        if can_drop {
            modes.insert(0, ("cold", true));
        }
        for (mode, cold) in modes {
            let k = if cold { runs.div_ceil(2).max(1) } else { runs };
            let (mut a, mut b) = (Vec::new(), Vec::new());
            if !cold {
                time(ours(&exe, &dir, pat, fixed))?;
                if have_rg {
                    time(rg(&dir, pat, fixed))?;
                }
            }
            for _ in 0..k {
                if cold {
                    drop_caches();
                }
                a.push(time(ours(&exe, &dir, pat, fixed))?);
                if have_rg {
                    if cold {
                        drop_caches();
                    }
                    b.push(time(rg(&dir, pat, fixed))?);
                }
            }
            let ma = median(a);
            if have_rg {
                let mb = median(b);
                println!(
                    "  {mode:4} {name:7}: ours {:7.1} ms, rg {:7.1} ms (median of {k}): {:.2}\u{d7} ripgrep",
                    ma.as_secs_f64() * 1e3,
                    mb.as_secs_f64() * 1e3,
                    ma.as_secs_f64() / mb.as_secs_f64()
                );
            } else {
                println!("  {mode:4} {name:7}: ours {:7.1} ms (median of {k})", ma.as_secs_f64() * 1e3);
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("__search") {
        if let (Some(d), Some(p), Some(m)) = (args.get(2), args.get(3), args.get(4)) {
            return child(d, p, m == "fixed");
        }
        eprintln!("usage: grep __search DIR PATTERN fixed|regex");
        return ExitCode::FAILURE;
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-grep: {e}");
            ExitCode::FAILURE
        }
    }
}
