//! The library variant of `scripts/bench-spawn`: one `Workspace`, held for
//! the whole run as a host program holds it, running one command per line
//! read on stdin.
//!
//!     bench_driver --policy P [--workspace WS] [--audit FILE] [--writable]
//!                  [--write DIR]... [--env NAME=VALUE]... [--max-output BYTES] [--lines]
//!
//! Each input line is `ID LINE`; `LINE` goes to `Workspace::exec` as a host's
//! call would (checked by the policy, gated, audited when `--audit` is given
//! or the policy names a log, run in the sandbox), each in a task of its own,
//! so several may be in flight. When a command has ended the driver writes
//! `ID ok EXIT_CODE` (or `ID ended OUTCOME`, `ID refused KIND: WHY`, `ID
//! cancelled`, `ID error MESSAGE`) and a newline, in the order the commands end; with
//! `--lines`, `ID ok EXIT_CODE LINES`, LINES the number of lines the command
//! wrote on stdout (`scripts/bench-workloads` checks every variant did the
//! same work). `--write`, `--env` and `--max-output` go to every command's
//! `ExecOptions`. End of input: the
//! driver waits for what is in flight, disposes of the workspace and exits 0.
//! The first line it writes is `ready`, once the workspace is built.
//!
//! An example rather than a binary: it is built from this repository against
//! the library's public API only (what a host program sees), it ships with
//! nobody's install, and `cargo test` compiles it, so it cannot rot.
//! The runtime and the stdio are the ones `portcullis serve` uses (multi-thread,
//! 2 workers, the loop on a worker; stdin and stdout read and written on the
//! runtime when pipes), so the library and the server are compared on equal
//! terms.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use portcullis::runner::{Exec, ExecOptions};
use portcullis::sandbox::Outcome;
use portcullis::workspace::Workspace;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::Mutex;

/// The driver's stdout.
type Output = std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>;

struct Args {
    policy: PathBuf,
    workspace: Option<PathBuf>,
    audit: Option<PathBuf>,
    writable: bool,
    write: Vec<PathBuf>,
    env: Vec<(OsString, OsString)>,
    max_output: Option<u64>,
    lines: bool,
}

fn usage(why: &str) -> String {
    format!(
        "bench_driver: {why}\nusage: bench_driver --policy FILE [--workspace DIR] [--audit FILE] [--writable] \
         [--write DIR]... [--env NAME=VALUE]... [--max-output BYTES] [--lines]"
    )
}

fn parse_args() -> Result<Args, String> {
    let mut policy = None;
    let mut workspace = None;
    let mut audit = None;
    let mut writable = false;
    let (mut write, mut env, mut max_output, mut lines) = (Vec::new(), Vec::new(), None, false);
    let mut it = std::env::args_os().skip(1);
    while let Some(a) = it.next() {
        let mut value =
            |name: &str| it.next().map(PathBuf::from).ok_or_else(|| usage(&format!("{name} needs a value")));
        match a.to_str() {
            Some("--policy") => policy = Some(value("--policy")?),
            Some("--workspace") => workspace = Some(value("--workspace")?),
            Some("--audit") => audit = Some(value("--audit")?),
            Some("--writable") => writable = true,
            Some("--lines") => lines = true,
            Some("--write") => write.push(value("--write")?),
            Some("--env") => {
                let v = value("--env")?.into_os_string();
                let text = v.to_str().ok_or_else(|| usage("--env: not UTF-8"))?;
                let (k, val) = text.split_once('=').ok_or_else(|| usage("--env needs NAME=VALUE"))?;
                env.push((OsString::from(k), OsString::from(val)));
            }
            Some("--max-output") => {
                let v = value("--max-output")?;
                let n = v.to_str().and_then(|t| t.parse::<u64>().ok());
                max_output = Some(n.ok_or_else(|| usage("--max-output needs a number of bytes"))?);
            }
            _ => return Err(usage(&format!("unknown argument {}", a.to_string_lossy()))),
        }
    }
    let policy = policy.ok_or_else(|| usage("--policy is required"))?;
    Ok(Args { policy, workspace, audit, writable, write, env, max_output, lines })
}

/// One answer line for a finished command.
fn answer(id: &str, done: Result<Exec, portcullis::workspace::WorkspaceError>, lines: bool) -> String {
    match done {
        Ok(Exec::Ran(r)) => match r.result.outcome {
            Outcome::Exited { code } if lines => {
                let n = r.result.stdout.iter().filter(|b| **b == b'\n').count();
                format!("{id} ok {code} {n}\n")
            }
            Outcome::Exited { code } => format!("{id} ok {code}\n"),
            other => format!("{id} ended {other:?}\n"),
        },
        Ok(Exec::Refused(why)) => format!("{id} refused {:?}: {}\n", why.kind, why.message.replace('\n', " ")),
        Ok(Exec::Cancelled(_)) => format!("{id} cancelled\n"),
        Err(e) => format!("{id} error {}\n", portcullis::error_chain(&e).replace('\n', " ")),
    }
}

async fn run(args: Args) -> Result<(), String> {
    let mut b = Workspace::builder().policy_file(&args.policy).map_err(|e| portcullis::error_chain(&e))?;
    if let Some(ws) = args.workspace {
        b = b.workspace(ws);
    }
    if let Some(log) = args.audit {
        b = b.audit_log(log);
    }
    let ws = Arc::new(b.build().map_err(|e| portcullis::error_chain(&e))?);
    // Stdin and stdout as `portcullis serve` reads and writes them: on the
    // runtime's own threads when they are pipes (tokio's own stdin and
    // stdout hand every read and write to its blocking pool and back, a
    // wake-up of another thread each way), so that the library and the
    // server are measured with the same I/O.
    let out = Arc::new(Mutex::new(portcullis::mcp::stdio::stdout()));
    let say = |out: Arc<Mutex<Output>>, line: String| async move {
        let mut o = out.lock().await;
        // A closed stdout (the harness died) ends nothing here: the input's
        // end does.
        let _ = o.write_all(line.as_bytes()).await;
        let _ = o.flush().await;
    };
    say(out.clone(), "ready\n".into()).await;

    let mut lines = BufReader::new(portcullis::mcp::stdio::stdin()).lines();
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        let line = match lines.next_line().await {
            Ok(Some(l)) => l,
            Ok(None) => break,
            Err(e) => return Err(format!("reading stdin: {e}")),
        };
        // Reap what has finished, so the set does not grow over a long run.
        while tasks.try_join_next().is_some() {}
        let Some((id, cmd)) = line.split_once(' ') else {
            say(out.clone(), format!("{line} error the line is not `ID COMMAND`\n")).await;
            continue;
        };
        let (id, cmd) = (id.to_owned(), cmd.to_owned());
        let (ws, out) = (ws.clone(), out.clone());
        let opts = ExecOptions {
            writable: args.writable,
            write: args.write.clone(),
            env: args.env.clone(),
            max_output: args.max_output,
            ..ExecOptions::default()
        };
        let lines = args.lines;
        tasks.spawn(async move {
            let done = ws.exec(&cmd, opts).await;
            say(out, answer(&id, done, lines)).await;
        });
    }
    while tasks.join_next().await.is_some() {}
    if std::env::var_os("BENCH_DRIVER_POOL").is_some() {
        // How many commands found a slot ready (the rest ran in a fresh
        // sandbox): a benchmark can say whether the pool kept up.
        eprintln!("bench_driver: pool {:?}", ws.pool_status());
    }
    ws.dispose().await;
    Ok(())
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(m) => {
            eprintln!("{m}");
            return ExitCode::from(2);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bench_driver: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    // On a worker, as `portcullis serve` runs its loop.
    let ran = rt.block_on(async { tokio::spawn(run(args)).await.unwrap_or_else(|e| Err(format!("{e}"))) });
    match ran {
        Ok(()) => ExitCode::SUCCESS,
        Err(m) => {
            eprintln!("bench_driver: {m}");
            let _ = std::io::stderr().flush();
            ExitCode::FAILURE
        }
    }
}

/// The allocator of the static musl build, as `portcullis` itself uses it
/// (see Cargo.toml): musl's own unmaps memory on nearly every free of a
/// larger block, and in a multi-threaded process every unmap interrupts the
/// other cores to flush their TLBs (measured here: ~0.45 ms of the library's
/// kernel time per command). A host program built for musl should do the same.
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOC: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;
