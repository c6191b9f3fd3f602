//! What a command costs with the workspace's shared network against a
//! private network namespace per command, in one run; std::time and
//! getrusage only. Run with `scripts/bench-network [ROUNDS]` (or `cargo
//! bench --bench network`).
//!
//! Two sandboxes on the same helper: `Sandbox::with_helper` (a private
//! network namespace made per run, as `portcullis exec` does) and the same
//! `with_shared_network` (one namespace made on the first run, as a
//! `Workspace` and `portcullis serve` do). Each round runs `/bin/true`
//! once in each, in an order alternating round by round, so that a shared
//! machine's drift hits both alike. Printed per variant: the median and
//! p90 wall time of `Sandbox::run` and the median CPU time of the run
//! (this process and its reaped children: the helper, pid 1, the command).
//! The kernel's teardown of a network namespace runs later in a kernel
//! worker, charged to nobody: the CPU figures leave it out, and the
//! throughput test that follows (`NET_BATCH` runs, default 200, with 4 in
//! flight, in batches alternating between the variants) counts it.

use std::time::{Duration, Instant};

use std::sync::Arc;

use portcullis::sandbox::{ExecRequest, RunOptions, Sandbox};

fn cpu() -> Duration {
    let usage = |who| {
        // SAFETY: getrusage fills the zeroed struct it is given.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: as above; `who` is RUSAGE_SELF or RUSAGE_CHILDREN.
        unsafe { libc::getrusage(who, &mut u) };
        let t = |tv: libc::timeval| Duration::new(tv.tv_sec as u64, tv.tv_usec as u32 * 1000);
        t(u.ru_utime) + t(u.ru_stime)
    };
    usage(libc::RUSAGE_SELF) + usage(libc::RUSAGE_CHILDREN)
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

fn main() {
    let rounds: usize = std::env::var("NET_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(400);
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().and_then(|d| d.parent()).map(|d| d.to_path_buf()).unwrap_or_default();
    let helper = dir.join("portcullis-helper");
    if !helper.is_file() {
        eprintln!("bench-network: build the helper first ({} is missing)", helper.display());
        std::process::exit(1);
    }
    let ws = std::env::temp_dir().join(format!("pc-bench-net-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&ws) {
        eprintln!("bench-network: {}: {e}", ws.display());
        std::process::exit(1);
    }
    let private = Arc::new(Sandbox::with_helper(helper.clone()));
    let shared = Arc::new(Sandbox::with_helper(helper).with_shared_network());
    let req = ExecRequest::new(&ws, ["/bin/true"]);
    // One thread for the latency (as a CLI's), two for the throughput.
    let (rt, mt) = match (
        tokio::runtime::Builder::new_current_thread().enable_all().build(),
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build(),
    ) {
        (Ok(rt), Ok(mt)) => (rt, mt),
        (Err(e), _) | (_, Err(e)) => {
            eprintln!("bench-network: runtime: {e}");
            std::process::exit(1);
        }
    };
    let run = |sb: &Sandbox| -> (Duration, Duration) {
        let (c0, t0) = (cpu(), Instant::now());
        let r = rt.block_on(sb.run(&req, RunOptions::default()));
        let (wall, c) = (t0.elapsed(), cpu() - c0);
        match r {
            Ok(r) if r.outcome.exit_status() == 0 => (wall, c),
            Ok(r) => panic!("bench-network: /bin/true did not exit 0: {r:?}"),
            Err(e) => panic!("bench-network: {}", portcullis::error_chain(&e)),
        }
    };
    // Warm up both (the shared one makes its namespace here).
    for _ in 0..20 {
        run(&private);
        run(&shared);
    }
    let (mut pw, mut pc, mut sw, mut sc) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..rounds {
        let order: [bool; 2] = if i % 2 == 0 { [false, true] } else { [true, false] };
        for is_shared in order {
            if is_shared {
                let (w, c) = run(&shared);
                sw.push(w);
                sc.push(c);
            } else {
                let (w, c) = run(&private);
                pw.push(w);
                pc.push(c);
            }
        }
    }
    // Throughput: `batch` runs with 4 in flight, 3 batches of each
    // variant, alternating.
    let batch: usize = std::env::var("NET_BATCH").ok().and_then(|s| s.parse().ok()).unwrap_or(200);
    let flight = |sb: &Arc<Sandbox>| -> f64 {
        let t0 = Instant::now();
        mt.block_on(async {
            let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let mut tasks = Vec::new();
            for _ in 0..4 {
                let (sb, req, next) = (Arc::clone(sb), req.clone(), Arc::clone(&next));
                tasks.push(tokio::spawn(async move {
                    while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < batch {
                        match sb.run(&req, RunOptions::default()).await {
                            Ok(r) if r.outcome.exit_status() == 0 => {}
                            other => panic!("bench-network: {other:?}"),
                        }
                    }
                }));
            }
            for t in tasks {
                let _ = t.await;
            }
        });
        batch as f64 / t0.elapsed().as_secs_f64()
    };
    let (mut pt, mut st) = (Vec::new(), Vec::new());
    for i in 0..6 {
        if i % 2 == 0 {
            pt.push(flight(&private));
        } else {
            st.push(flight(&shared));
        }
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let _ = std::fs::remove_dir_all(&ws);
    println!("bench-network: {rounds} interleaved rounds of /bin/true through Sandbox::run");
    let (pm, sm) = (pct(&mut pw, 0.5), pct(&mut sw, 0.5));
    let (pcm, scm) = (pct(&mut pc, 0.5), pct(&mut sc, 0.5));
    println!(
        "  private netns per run   wall median {:7.0} µs  p90 {:7.0} µs   cpu median {:6.0} µs",
        us(pm),
        us(pct(&mut pw, 0.9)),
        us(pcm)
    );
    println!(
        "  shared workspace netns  wall median {:7.0} µs  p90 {:7.0} µs   cpu median {:6.0} µs",
        us(sm),
        us(pct(&mut sw, 0.9)),
        us(scm)
    );
    println!(
        "  shared/private: wall {:.2}×, cpu {:.2}× ({:+.0} µs wall, {:+.0} µs cpu per run)",
        us(sm) / us(pm),
        us(scm) / us(pcm),
        us(sm) - us(pm),
        us(scm) - us(pcm)
    );
    let (ptm, stm) = (med(&mut pt), med(&mut st));
    println!(
        "  throughput, 4 in flight ({batch} runs a batch, median of 3): private {ptm:.0}/s, shared {stm:.0}/s ({:.2}×)",
        stm / ptm
    );
}
