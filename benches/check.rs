//! How long the shell checker takes on a ~1 KB line, in argv mode and in
//! `sh` mode, with a checker compiled once and used many times; and what
//! compiling it costs. std::time only. Run with `scripts/bench-check` (or
//! `cargo bench --bench check`); `CHECK_ITERS=N` changes the iterations.
//!
//! The requirement: checking a 1 KB line takes microseconds, not
//! milliseconds.

use std::hint::black_box;
use std::time::{Duration, Instant};

use portcullis::policy::shell::sh;
use portcullis::policy::{tokenize_command, Interpreter, ShellChecker, Verdict};

/// The tests' corpus: its policy, its workspace and its realistic line.
#[path = "../tests/suite/policy_corpus.rs"]
mod policy_corpus;

use policy_corpus::{realistic_line, CorpusWs};

fn argv_line(min: usize) -> String {
    let mut line = String::from("git commit -m 'fix: the checker reads \"quoted\" words' --author='A B <a@b.c>'");
    let mut i = 0;
    while line.len() < min {
        line.push_str(&format!(" 'src/module {i}/file_{i}.rs' --include=\"*.rs\" -- a\\ b"));
        i += 1;
    }
    line
}

struct Stats {
    median: Duration,
    p90: Duration,
    p99: Duration,
    min: Duration,
    mean: Duration,
}

fn measure(iters: usize, mut f: impl FnMut()) -> Stats {
    for _ in 0..iters.min(1000) {
        f();
    }
    let mut samples: Vec<Duration> = (0..iters)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed()
        })
        .collect();
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q) as usize];
    let total: Duration = samples.iter().sum();
    Stats {
        median: at(0.5),
        p90: at(0.9),
        p99: at(0.99),
        min: samples[0],
        mean: total / u32::try_from(samples.len()).unwrap_or(u32::MAX),
    }
}

fn us(d: Duration) -> String {
    format!("{:.2} µs", d.as_nanos() as f64 / 1000.0)
}

fn report(what: &str, bytes: usize, iters: usize, s: &Stats) {
    println!(
        "{what:<34} {bytes:>5} B  median {:>10}  p90 {:>10}  p99 {:>10}  min {:>10}  mean {:>10}  ({iters} iterations)",
        us(s.median),
        us(s.p90),
        us(s.p99),
        us(s.min),
        us(s.mean)
    );
}

fn accepted(what: &str, v: &Verdict) {
    match v {
        Verdict::Accepted(p) => println!("{what}: accepted, {} planned commands", p.commands.len()),
        Verdict::Refused(r) => {
            eprintln!("{what}: refused: {r}");
            std::process::exit(1);
        }
    }
}

fn main() {
    let iters: usize = std::env::var("CHECK_ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let ws = CorpusWs::new();
    let policy = ws.policy();
    let build = || match ShellChecker::new(&policy) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("checker: {e}");
            std::process::exit(1);
        }
    };

    let argv_text = argv_line(1024);
    let sh_text = realistic_line(1024);
    let argv = build().with_interpreter(Interpreter::None);
    let shc = build().with_interpreter(Interpreter::Sh);
    accepted("argv line", &argv.check(&argv_text));
    accepted("sh line", &shc.check(&sh_text));
    println!();

    let s = measure(iters.min(2000), || {
        black_box(build());
    });
    report("build the checker (once per policy)", 0, iters.min(2000), &s);
    let s = measure(iters, || {
        black_box(tokenize_command(black_box(&argv_text)).is_ok());
    });
    report("tokenize_command (argv split)", argv_text.len(), iters, &s);
    let s = measure(iters, || {
        black_box(argv.check(black_box(&argv_text)));
    });
    report("check, argv mode", argv_text.len(), iters, &s);
    let s = measure(iters, || {
        black_box(sh::parse(black_box(&sh_text)).is_ok());
    });
    report("sh::parse", sh_text.len(), iters, &s);
    let s_sh = measure(iters, || {
        black_box(shc.check(black_box(&sh_text)));
    });
    report("check, sh mode", sh_text.len(), iters, &s_sh);

    let verdict = if s_sh.median < Duration::from_millis(1) { "microseconds: OK" } else { "MILLISECONDS: too slow" };
    println!("\n1 KB sh line: median {} per check — {verdict}", us(s_sh.median));
}
