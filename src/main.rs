//! The `portcullis` command line: `exec`, `check`, `doctor`, `audit`, `serve`.

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use portcullis::policy::WorkspacePolicy;
use portcullis::runner::{check_line, explain, gate_preview, Exec, ExecOptions, Line, Prepared, RunError, Runner};
use portcullis::sandbox::{Mode, RunOptions, Stdin, Stream};
use portcullis::{error_chain, Network};

/// `eprintln!` that cannot abort: a closed stderr or a broken pipe there
/// (`2> >(exec true)`, a parent that closed its end) made `eprintln!` panic,
/// and the release build aborts on a panic, before the server answered
/// anything. The text is lost; the work goes on.
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

/// `println!` that cannot abort (a reader that went away: `| head -1`).
macro_rules! outln {
    ($($arg:tt)*) => {{
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

/// `print!` that cannot abort.
macro_rules! out {
    ($($arg:tt)*) => {{
        let _ = write!(std::io::stdout().lock(), $($arg)*);
    }};
}

#[derive(Parser)]
#[command(
    name = "portcullis",
    version,
    about = "A policy-jailed workspace and sandboxed command executor for AI coding agents"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

/// Each subcommand's arguments are built only when it is the one given
/// (`defer`): a one-shot `portcullis exec` does not build `serve`'s,
/// `check`'s and `audit`'s on every start.
#[derive(Subcommand)]
#[command(defer = true)]
enum Cmd {
    /// Run one command in the sandbox.
    Exec(Box<ExecArgs>),
    /// Judge a command line against a policy, running nothing.
    Check(CheckArgs),
    /// Report what this host offers each sandbox layer.
    Doctor {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Check an audit log's chain, or report who could write where.
    #[command(subcommand)]
    Audit(portcullis::audit::cli::AuditCmd),
    /// Serve the workspace's tools to an agent over MCP (stdio).
    Serve(ServeArgs),
}

#[derive(Args)]
struct ServeArgs {
    /// The workspace directory (overrides the policy's).
    #[arg(long, value_name = "DIR", required_unless_present = "policy")]
    workspace: Option<PathBuf>,
    /// The policy (TOML, or JSON if it ends in .json): which commands may
    /// run, what they may write, the gate, limits. Without one, no command
    /// may run (the file tools still work inside the workspace).
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// Record every call in this audit log (JSON Lines, hash-chained;
    /// overrides the policy's `audit`).
    #[arg(long, value_name = "FILE")]
    audit: Option<PathBuf>,
    /// Offer `run_tests`, running this command line with the model's test
    /// filter appended as one word (e.g. "cargo test --offline --").
    #[arg(long, value_name = "LINE")]
    tests: Option<String>,
    /// Offer only the tools that cannot change the workspace; commands run
    /// without write access.
    #[arg(long)]
    readonly: bool,
    /// Commands never get write access: a write fails with a read-only
    /// error (the file tools still write, each write checked and audited).
    /// Without it, a command may write what the policy's `write` list
    /// names (the whole workspace if it names nothing), unless a gate rule
    /// takes that away.
    #[arg(long)]
    read_only_commands: bool,
    /// Offer only these tools (comma-separated names, e.g.
    /// read_file,grep,glob).
    #[arg(long, value_name = "NAMES", value_delimiter = ',')]
    tools: Vec<String>,
    /// Print the tools as `tools/list` lists them (names, descriptions,
    /// input and output schemas) and exit.
    #[arg(long)]
    print_tools: bool,
    /// The longest incoming message: bytes, or a size such as `8MiB`.
    #[arg(long, value_name = "SIZE", value_parser = portcullis::units::parse_size, default_value = "4MiB")]
    max_message: u64,
    /// The most answers waiting for the client to read them: bytes, or a
    /// size such as `32MiB`. Past it no more requests are read until the
    /// client reads.
    #[arg(long, value_name = "SIZE", value_parser = portcullis::units::parse_size, default_value = "32MiB")]
    max_queued: u64,
}

/// `--network`: a [`Network`] by name, the accepted names listed in the
/// help and in the error.
fn network_parser() -> impl TypedValueParser<Value = Network> {
    PossibleValuesParser::new(Network::ALL.iter().map(|n| PossibleValue::new(n.name())))
        .try_map(|s| s.parse::<Network>())
}

/// `--degraded`: a degraded [`Mode`] by name, each listed with what it
/// keeps.
fn degraded_parser() -> impl TypedValueParser<Value = Mode> {
    PossibleValuesParser::new(Mode::DEGRADED.iter().map(|m| PossibleValue::new(m.name()).help(m.summary())))
        .try_map(|s| Mode::degraded(&s))
}

#[derive(Args)]
struct CheckArgs {
    /// The policy file (TOML, or JSON if it ends in .json). Without one,
    /// no command may run.
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// The workspace directory (default: the policy's, else the current one).
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Read the line as `sh` syntax, whatever the policy says.
    #[arg(long)]
    sh: bool,
    /// The directory the line would run in (default: the workspace).
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Print the verdict as JSON.
    #[arg(long)]
    json: bool,
    /// The command line, as one argument; several arguments are taken as
    /// an argv already split (as `exec` takes them), argv mode only.
    #[arg(last = true, required = true, value_name = "LINE")]
    line: Vec<String>,
}

#[derive(Args, Default)]
#[cfg_attr(test, derive(Debug, PartialEq))]
struct ExecArgs {
    /// The workspace directory (overrides the policy's).
    #[arg(long, value_name = "DIR", required_unless_present = "policy")]
    workspace: Option<PathBuf>,
    /// Check the command against this policy first, and take readable
    /// roots, deny globs, write grants, environment and limits from it
    /// (the flags below override or extend them).
    #[arg(long, value_name = "FILE")]
    policy: Option<PathBuf>,
    /// With --policy: the command is one `sh` line, checked command by
    /// command, then run with /bin/sh -c.
    #[arg(long, requires = "policy")]
    sh: bool,
    /// The workspace is read-only (the default).
    #[arg(long, conflicts_with = "writable")]
    read_only: bool,
    /// Let the command write: the whole workspace, or with --policy what the
    /// policy's `write` list names (the whole workspace if it names nothing).
    /// Protected paths stay read-only.
    #[arg(long)]
    writable: bool,
    /// Make PATH writable: inside the workspace (a missing directory there is
    /// created), the workspace itself, an absolute host path, or /tmp for the
    /// host's /tmp.
    #[arg(long = "write", value_name = "PATH")]
    write: Vec<PathBuf>,
    /// An extra read-only root.
    #[arg(long = "read", value_name = "PATH")]
    read: Vec<PathBuf>,
    /// Mask paths matching GLOB (relative to the workspace, or absolute).
    #[arg(long = "deny", value_name = "GLOB")]
    deny: Vec<String>,
    /// Keep PATH read-only even in a writable area (adds to .git/hooks, .git/config).
    #[arg(long = "protect", value_name = "PATH")]
    protect: Vec<PathBuf>,
    /// Working directory inside the sandbox (default: the workspace).
    #[arg(long, value_name = "DIR")]
    cwd: Option<PathBuf>,
    /// Kill the whole command tree after this long (exit status 124):
    /// seconds (`30`, `0.5`) or a duration (`500ms`, `2m`, `1m30s`).
    #[arg(long, value_name = "DURATION", value_parser = portcullis::units::parse_duration)]
    timeout: Option<Duration>,
    /// Network access (default: none, or the policy's).
    #[arg(long, value_parser = network_parser())]
    network: Option<Network>,
    /// Set an environment variable.
    #[arg(long = "env", value_name = "K=V")]
    env: Vec<String>,
    /// Copy a variable from this environment.
    #[arg(long = "inherit-env", value_name = "NAME")]
    inherit_env: Vec<OsString>,
    /// Most processes of the command at once (at least 1).
    #[arg(long, value_name = "N")]
    pids: Option<u64>,
    /// Most memory: bytes, or a size such as `512MiB`, `4GiB` (at least 4 MiB).
    #[arg(long, value_name = "SIZE", value_parser = portcullis::units::parse_size)]
    memory: Option<u64>,
    /// Cap on output kept and shown, stdout and stderr together: bytes or a
    /// size such as `64KiB` (default: 1 MiB, or the policy's).
    #[arg(long, value_name = "SIZE", value_parser = portcullis::units::parse_size)]
    max_output: Option<u64>,
    /// Run in a named degraded mode (weaker isolation; the result and
    /// --explain say so), e.g. where user namespaces are unavailable.
    #[arg(long, value_name = "MODE", value_parser = degraded_parser())]
    degraded: Option<Mode>,
    /// Do not watch for refused writes (no observer filter; the result's
    /// `refused_writes` says "off"). Overrides the policy's
    /// `report_refused_writes`.
    #[arg(long)]
    no_refused_writes: bool,
    /// Print the result (with captured output) as JSON instead of streaming.
    #[arg(long)]
    json: bool,
    /// Print the resolved plan and run nothing (the gate is asked, nothing
    /// is recorded).
    #[arg(long)]
    explain: bool,
    /// Record the command in this audit log (JSON Lines, hash-chained;
    /// overrides the policy's `audit`): an `allowed` record, synced before
    /// it starts, or a `denied` one, then its outcome.
    #[arg(long, value_name = "FILE")]
    audit: Option<PathBuf>,
    /// Test builds only: leave the mounts writable (proves Landlock alone holds).
    #[arg(long, hide = true)]
    test_skip_readonly: bool,
    /// Test builds only: skip Landlock (proves the mounts alone hold).
    #[arg(long, hide = true)]
    test_skip_landlock: bool,
    /// Test builds only: skip the main seccomp filter (measures its cost;
    /// proves the other layers alone hold).
    #[arg(long, hide = true)]
    test_skip_seccomp: bool,
    /// Test builds only: make the git guard fail (proves the run fails closed).
    #[arg(long, hide = true)]
    test_fail_git_guard: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// The exit status of a failure of portcullis itself (bad input, a refusal,
/// a sandbox that could not be set up); every other status is the
/// command's own, or the library's mapping of a fault.
const FAILED: u8 = portcullis::sandbox::status::FAILED;

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let quick = quick::exec_args(&args).map(|a| Cli { cmd: Cmd::Exec(Box::new(a)) });
    let cli = match quick.map_or_else(|| Cli::try_parse_from(&args), Ok) {
        Ok(c) => c,
        Err(e) => {
            // --help and --version print on stdout and succeed; every other
            // parse error is bad input, for every subcommand.
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp
                | clap::error::ErrorKind::DisplayVersion
                | clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
                    if e.exit_code() == 0 =>
                {
                    ExitCode::SUCCESS
                }
                _ => ExitCode::from(FAILED),
            };
        }
    };
    if let Cmd::Serve(a) = cli.cmd {
        return serve(a);
    }
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            say!("portcullis: cannot start the runtime: {e}");
            return ExitCode::from(FAILED);
        }
    };
    rt.block_on(async {
        match cli.cmd {
            Cmd::Exec(a) => exec(*a).await,
            Cmd::Check(a) => check(a),
            Cmd::Serve(_) => ExitCode::from(FAILED),
            Cmd::Audit(a) => ExitCode::from(a.run(&mut std::io::stdout().lock(), &mut std::io::stderr().lock())),
            Cmd::Doctor { json } => {
                let r = portcullis::doctor::run().await;
                if json {
                    outln!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
                } else {
                    out!("{}", r.render());
                }
                // Like check, a report: 0 the full sandbox works, 1 it does not.
                if r.usable() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                }
            }
        }
    })
}

/// `serve`: the MCP server on stdin/stdout until stdin ends or a signal
/// (SIGTERM, SIGINT, SIGHUP) comes; 0 then, 125 when it cannot start.
fn serve(a: ServeArgs) -> ExitCode {
    let fail = |m: String| {
        say!("portcullis serve: {m}");
        ExitCode::from(FAILED)
    };
    // Calls run side by side: a long command does not hold up a read.
    let rt = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => return fail(format!("cannot start the runtime: {e}")),
    };
    let end = rt.block_on(async {
        let config = portcullis::mcp::ServeConfig {
            workspace: a.workspace.clone(),
            policy: a.policy.clone(),
            audit: a.audit.clone(),
            tests: a.tests.clone(),
            readonly: a.readonly,
            read_only_commands: a.read_only_commands,
            tools: a.tools.clone(),
        };
        let tools = config.tools().map_err(|e| portcullis::error_chain(&e))?;
        if a.print_tools {
            let text = serde_json::to_string_pretty(&portcullis::mcp::tools_json(&tools)).unwrap_or_default();
            // A closed pipe (`| head`) is not a failure worth a panic.
            let _ = writeln!(std::io::stdout().lock(), "{text}");
            return Ok(None);
        }
        let max_message = usize::try_from(a.max_message).unwrap_or(usize::MAX);
        if max_message < 1024 {
            return Err(format!("--max-message {max_message}: at least 1 KiB"));
        }
        say!(
            "portcullis serve: workspace {}, tools: {}; speaking MCP on stdin/stdout",
            tools.workspace().root().display(),
            tools.names().join(", ")
        );
        let stop = tokio_util::sync::CancellationToken::new();
        spawn_signal_stop(stop.clone()).map_err(|e| format!("cannot watch for signals: {e}"))?;
        let max_queued = usize::try_from(a.max_queued).unwrap_or(usize::MAX);
        if max_queued < 64 * 1024 {
            return Err(format!("--max-queued {max_queued}: at least 64 KiB"));
        }
        let opts = portcullis::mcp::ServerOptions { max_message, max_queued, log: true };
        let input = tokio::io::BufReader::with_capacity(64 * 1024, portcullis::mcp::stdio::stdin());
        let output = portcullis::mcp::stdio::stdout();
        // The server's loop runs on a runtime worker, not on this thread:
        // the calls it spawns then start on the worker that read them (no
        // wake-up of another thread per request), and the answers' writer
        // too.
        let server = portcullis::mcp::Server::new(tools, opts);
        tokio::spawn(server.serve(input, output, stop))
            .await
            .map(Some)
            .map_err(|e| format!("the server's task ended abnormally: {e}"))
    });
    // The blocking thread reading stdin may still wait on it (a signal
    // ended the server): do not wait for it.
    rt.shutdown_timeout(Duration::from_millis(100));
    match end {
        Ok(_) => ExitCode::SUCCESS,
        Err(m) => fail(m),
    }
}

/// Cancel `stop` at SIGTERM, SIGINT or SIGHUP.
fn spawn_signal_stop(stop: tokio_util::sync::CancellationToken) -> std::io::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut hup = signal(SignalKind::hangup())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
            _ = hup.recv() => {}
        }
        stop.cancel();
    });
    Ok(())
}

/// `check` exits 0 (accepted), 1 (refused) or, like every subcommand for
/// bad input, 125.
fn check(a: CheckArgs) -> ExitCode {
    let fail = |m: String| {
        say!("portcullis: {m}");
        ExitCode::from(FAILED)
    };
    let mut policy = match &a.policy {
        Some(f) => match WorkspacePolicy::from_file(f) {
            Ok(p) => p,
            Err(e) => return fail(error_chain(&e)),
        },
        None => WorkspacePolicy::default(),
    };
    if let Some(ws) = &a.workspace {
        policy.workspace = Some(ws.clone());
    }
    if policy.workspace.is_none() {
        match std::env::current_dir() {
            Ok(d) => policy.workspace = Some(d),
            Err(e) => return fail(format!("no workspace and no current directory: {e}")),
        }
    }
    let line = match a.line.as_slice() {
        [line] => Line::Text(line),
        words => Line::Argv(words),
    };
    let verdict = match check_line(&policy, line, a.sh, a.cwd.as_deref()) {
        Ok(v) => v,
        Err(e) => return fail(error_chain(&e)),
    };
    // An accepted line is shown to the policy's gate as `exec --writable`
    // would show it: a refusal there refuses the line (exit 1) too.
    let gate = match verdict.plan() {
        Some(plan) => match gate_preview(&policy, plan, a.cwd.as_deref()) {
            Ok(g) => g,
            Err(e) => return fail(error_chain(&e)),
        },
        None => None,
    };
    if a.json {
        let mut v = serde_json::to_value(&verdict).unwrap_or_default();
        if let (Some(g), Some(map)) = (&gate, v.as_object_mut()) {
            map.insert("gate".into(), serde_json::to_value(g).unwrap_or_default());
        }
        outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        out!("{}", explain::render_verdict(&verdict));
        if let Some(g) = &gate {
            out!("{}", explain::render_gate(g));
        }
    }
    match (verdict, gate) {
        (_, Some(portcullis::gate::Decision::Refuse { .. })) => ExitCode::from(1),
        (portcullis::policy::Verdict::Accepted(_), _) => ExitCode::SUCCESS,
        (portcullis::policy::Verdict::Refused(_), _) => ExitCode::from(1),
    }
}

/// The flags as the library's options (the front end only splits `K=V`).
fn options(a: &ExecArgs) -> Result<ExecOptions, String> {
    let mut env = Vec::new();
    for e in &a.env {
        let (k, v) = e.split_once('=').ok_or_else(|| format!("--env {e:?}: expected NAME=VALUE"))?;
        env.push((OsString::from(k), OsString::from(v)));
    }
    Ok(ExecOptions {
        cancel: None,
        sh: a.sh,
        writable: a.writable,
        write: a.write.clone(),
        read: a.read.clone(),
        deny: a.deny.clone(),
        protect: a.protect.clone(),
        cwd: a.cwd.clone(),
        timeout: a.timeout,
        network: a.network,
        env,
        inherit_env: a.inherit_env.clone(),
        pids: a.pids,
        memory: a.memory,
        max_output: a.max_output,
        degraded: a.degraded,
        background: false,
        report_refused_writes: if a.no_refused_writes { Some(false) } else { None },
        test_switches: portcullis::sandbox::TestSwitches {
            skip_readonly: a.test_skip_readonly,
            skip_landlock: a.test_skip_landlock,
            skip_seccomp: a.test_skip_seccomp,
            fail_git_guard: a.test_fail_git_guard,
            slot_pivot_late: false,
        },
    })
}

fn runner(a: &ExecArgs) -> Result<Runner, RunError> {
    // One command: its sandbox's teardown is finished by the settle below.
    let mut b = Runner::builder().one_shot();
    if let Some(f) = &a.policy {
        b = b.policy_file(f)?;
    }
    if let Some(ws) = &a.workspace {
        b = b.workspace(ws);
    }
    if let Some(log) = &a.audit {
        b = b.audit_log(log);
    }
    b.build()
}

/// A fault: its message, and with `--json` the error as data (with the
/// command's result when it ran).
fn fault(e: &RunError, json: bool) -> ExitCode {
    let code = e.exit_code();
    if json {
        let mut obj =
            serde_json::json!({ "error": { "kind": "failed", "message": error_chain(e), "exit_code": code } });
        if let (Some(r), Some(map)) = (e.result(), obj.as_object_mut()) {
            map.insert("result".into(), serde_json::to_value(r).unwrap_or_default());
        }
        outln!("{obj}");
    } else if let Some(r) = e.result() {
        for w in &r.warnings {
            say!("portcullis: warning: {w}");
        }
    }
    say!("portcullis: {}", error_chain(e));
    ExitCode::from(code)
}

async fn exec(a: ExecArgs) -> ExitCode {
    let opts = match options(&a) {
        Ok(o) => o,
        Err(m) => {
            say!("portcullis: {m}");
            return ExitCode::from(FAILED);
        }
    };
    let runner = match runner(&a) {
        Ok(r) => r,
        Err(e) => return fault(&e, a.json),
    };
    let prepared = match runner.prepare(&a.command, &opts).await {
        Ok(p) => p,
        Err(e) => return fault(&e, a.json),
    };
    if a.explain {
        return match &prepared {
            Prepared::Refused { refused, .. } => refusal(&Exec::Refused(refused.clone()), a.json),
            Prepared::Ready(ready) => match runner.plan(ready) {
                Ok(plan) if a.json => {
                    outln!("{}", serde_json::to_string_pretty(&plan).unwrap_or_default());
                    ExitCode::SUCCESS
                }
                Ok(plan) => {
                    out!("{}", explain::explain(&plan, ready));
                    ExitCode::SUCCESS
                }
                Err(e) => fault(&e, a.json),
            },
        };
    }
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut int), Ok(mut term)) = (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) else {
            return;
        };
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        c2.cancel();
    });
    // A terminal is never handed on (no keystroke games, no fchmod of the
    // caller's tty); piped or redirected input is copied through a pipe.
    let stdin = if std::io::stdin().is_terminal() { Stdin::Null } else { Stdin::Copy };
    let mut run = RunOptions { stdin, cancel: Some(cancel), ..RunOptions::default() };
    if !a.json {
        run.on_output = Some(Box::new(|stream, data| {
            let _ = match stream {
                Stream::Stdout => std::io::stdout().lock().write_all(data).and_then(|_| std::io::stdout().flush()),
                Stream::Stderr => std::io::stderr().lock().write_all(data),
            };
        }));
    }
    let (cap, timeout) = match &prepared {
        Prepared::Ready(r) => (r.request.max_output_bytes, r.request.timeout),
        Prepared::Refused { .. } => (0, None),
    };
    let ran = runner.run_prepared(prepared, run).await;
    // The result is out once nothing of the command is left; the sandbox's
    // own processes and cgroup go just after. The CLI exits only then.
    if let Ok(sb) = runner.sandbox() {
        if !sb.settle(std::time::Duration::from_secs(10)).await {
            say!(
                "portcullis: warning: the sandbox's own processes did not exit within 10 s of the command's end \
                 (nothing of the command is left); its cgroup leaf may stay until the next run sweeps it"
            );
        }
    }
    match ran {
        Ok(e @ Exec::Refused(_)) => refusal(&e, a.json),
        Ok(e @ Exec::Cancelled(_)) => {
            if a.json {
                outln!("{}", e.to_json());
            }
            if let Exec::Cancelled(n) = &e {
                say!("portcullis: {}", n.message);
            }
            ExitCode::from(e.exit_status())
        }
        Ok(Exec::Ran(r)) => {
            if a.json {
                outln!("{}", serde_json::to_string(&r).unwrap_or_default());
            } else {
                if let Some(note) = r.access_note() {
                    say!("portcullis: {note}");
                }
                if r.result.truncated {
                    say!("portcullis: output truncated at {cap} bytes (raise --max-output to keep more)");
                }
                if r.result.outcome == portcullis::sandbox::Outcome::TimedOut {
                    say!(
                        "portcullis: timed out after {:.1}s; the whole command tree was killed (raise --timeout if it needs longer)",
                        timeout.map_or(0.0, |t| t.as_secs_f64())
                    );
                }
                for w in &r.result.warnings {
                    say!("portcullis: warning: {w}");
                }
                if r.result.refused_writes.count > 0 {
                    let w = &r.result.refused_writes;
                    let shown: Vec<String> = w.sample.iter().take(5).map(|p| p.display().to_string()).collect();
                    say!(
                        "portcullis: {} write{} refused (no write access there): {}{}",
                        w.count,
                        if w.count == 1 { " was" } else { "s were" },
                        shown.join(", "),
                        if (w.count as usize) > shown.len() { ", …" } else { "" }
                    );
                }
            }
            ExitCode::from(Exec::Ran(r).exit_status())
        }
        Err(e) => fault(&e, a.json),
    }
}

/// A refusal: data for `--json`, a line on stderr; exit 125.
fn refusal(e: &Exec, json: bool) -> ExitCode {
    if json {
        outln!("{}", e.to_json());
    }
    if let Exec::Refused(r) = e {
        say!("portcullis: {r}");
    }
    ExitCode::from(e.exit_status())
}

/// The static musl build's allocator (see Cargo.toml).
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOC: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;

/// `portcullis exec` parsed without clap, for the plain cases. clap builds
/// its whole model of the subcommand (28 arguments, their parsers and
/// rules) before it reads a word: about 0.1 ms of every one-shot command
/// on the project's VM, 3 % of it (docs/sandbox.md, "Session 22").
///
/// [`exec_args`] answers only where it takes the words exactly as clap
/// does, and `None` for anything else: a short option, an unknown or
/// repeated one, `--help`, a flag with a value, a value that starts with
/// `-` or is empty, one clap's parser would refuse, a broken rule
/// (`--sh` without `--policy`, `--read-only` with `--writable`, neither
/// `--workspace` nor `--policy`), no `--` or no command after it. clap
/// then parses, and reports, as before. `tests::quick_parse_agrees_with_clap`
/// holds the two to the same answer on generated command lines.
mod quick {
    use std::ffi::{OsStr, OsString};
    use std::path::PathBuf;

    use portcullis::sandbox::Mode;
    use portcullis::Network;

    use super::ExecArgs;

    pub(super) fn exec_args(args: &[OsString]) -> Option<ExecArgs> {
        let (head, rest) = args.get(1..)?.split_first()?;
        if head != "exec" {
            return None;
        }
        let split = rest.iter().position(|a| a == "--")?;
        let (opts, command) = (&rest[..split], &rest[split + 1..]);
        if command.is_empty() {
            return None;
        }
        let mut a = ExecArgs { command: command.to_vec(), ..ExecArgs::default() };
        let mut words = opts.iter();
        while let Some(word) = words.next() {
            let word = word.to_str()?.strip_prefix("--")?;
            let (name, inline) = match word.split_once('=') {
                Some((n, v)) => (n, Some(OsString::from(v))),
                None => (word, None),
            };
            if let Some(flag) = flag(&mut a, name) {
                if inline.is_some() || std::mem::replace(flag, true) {
                    return None;
                }
                continue;
            }
            let value = match inline {
                Some(v) => v,
                None => {
                    let v = words.next()?;
                    if v.as_encoded_bytes().first() == Some(&b'-') {
                        return None;
                    }
                    v.clone()
                }
            };
            if value.is_empty() {
                return None;
            }
            take(&mut a, name, value)?;
        }
        let rules = (a.workspace.is_some() || a.policy.is_some())
            && (!a.sh || a.policy.is_some())
            && !(a.read_only && a.writable);
        rules.then_some(a)
    }

    fn flag<'a>(a: &'a mut ExecArgs, name: &str) -> Option<&'a mut bool> {
        Some(match name {
            "sh" => &mut a.sh,
            "read-only" => &mut a.read_only,
            "writable" => &mut a.writable,
            "no-refused-writes" => &mut a.no_refused_writes,
            "json" => &mut a.json,
            "explain" => &mut a.explain,
            "test-skip-readonly" => &mut a.test_skip_readonly,
            "test-skip-landlock" => &mut a.test_skip_landlock,
            "test-skip-seccomp" => &mut a.test_skip_seccomp,
            "test-fail-git-guard" => &mut a.test_fail_git_guard,
            _ => return None,
        })
    }

    /// Set an option's value; `None` for an unknown option, a second value
    /// of a single one, or a value its parser refuses.
    fn take(a: &mut ExecArgs, name: &str, value: OsString) -> Option<()> {
        fn once<T>(slot: &mut Option<T>, v: T) -> Option<()> {
            slot.is_none().then(|| *slot = Some(v))
        }
        fn add<T>(list: &mut Vec<T>, v: T) -> Option<()> {
            list.push(v);
            Some(())
        }
        let text = |v: &OsStr| v.to_str().map(str::to_owned);
        match name {
            "workspace" => once(&mut a.workspace, PathBuf::from(value)),
            "policy" => once(&mut a.policy, PathBuf::from(value)),
            "cwd" => once(&mut a.cwd, PathBuf::from(value)),
            "audit" => once(&mut a.audit, PathBuf::from(value)),
            "write" => add(&mut a.write, PathBuf::from(value)),
            "read" => add(&mut a.read, PathBuf::from(value)),
            "protect" => add(&mut a.protect, PathBuf::from(value)),
            "deny" => add(&mut a.deny, text(&value)?),
            "env" => add(&mut a.env, text(&value)?),
            "inherit-env" => add(&mut a.inherit_env, value),
            "timeout" => once(&mut a.timeout, portcullis::units::parse_duration(&text(&value)?).ok()?),
            "memory" => once(&mut a.memory, portcullis::units::parse_size(&text(&value)?).ok()?),
            "max-output" => once(&mut a.max_output, portcullis::units::parse_size(&text(&value)?).ok()?),
            "pids" => once(&mut a.pids, text(&value)?.parse::<u64>().ok()?),
            "network" => {
                let v = text(&value)?;
                let n = Network::ALL.iter().find(|n| n.name() == v)?;
                once(&mut a.network, *n)
            }
            "degraded" => {
                let v = text(&value)?;
                let m = Mode::DEGRADED.iter().find(|m| m.name() == v)?;
                once(&mut a.degraded, *m)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStringExt;

    /// Generated `portcullis exec` lines: every word the quick parse takes
    /// it takes as clap does, and the plain lines it takes at all.
    #[test]
    fn quick_parse_agrees_with_clap() {
        let names = [
            "workspace",
            "policy",
            "sh",
            "read-only",
            "writable",
            "write",
            "read",
            "deny",
            "protect",
            "cwd",
            "timeout",
            "network",
            "env",
            "inherit-env",
            "pids",
            "memory",
            "max-output",
            "degraded",
            "no-refused-writes",
            "json",
            "explain",
            "audit",
            "test-skip-readonly",
            "test-skip-landlock",
            "test-skip-seccomp",
            "test-fail-git-guard",
            "help",
            "version",
            "jsonx",
            "work",
            "",
        ];
        let values: [&[u8]; 22] = [
            b".",
            b"/tmp/ws",
            b"",
            b"-x",
            b"--",
            b"5",
            b"+7",
            b"-3",
            b"1m30s",
            b"0.5",
            b"4MiB",
            b"3 MiB",
            b"none",
            b"host",
            b"None",
            b"landlock-only",
            b"full",
            b"K=V",
            b"*.env",
            b"\xff\xfe",
            b"a=b=c",
            b"18446744073709551616",
        ];
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        let (mut taken, mut cases) = (0, 0);
        for _ in 0..40_000 {
            let mut argv: Vec<OsString> = vec!["portcullis".into(), "exec".into()];
            for _ in 0..next(6) {
                let name = names[next(names.len())];
                let value = values[next(values.len())].to_vec();
                match next(8) {
                    0 => argv.push(format!("-{name}").into()),
                    1 | 2 => {
                        let mut w = format!("--{name}=").into_bytes();
                        w.extend(value);
                        argv.push(OsString::from_vec(w));
                    }
                    3 => argv.push(format!("--{name}").into()),
                    _ => {
                        argv.push(format!("--{name}").into());
                        argv.push(OsString::from_vec(value));
                    }
                }
            }
            // Mostly a workspace, so that lines the quick parse takes are common.
            if next(3) != 0 {
                argv.insert(2 + next(argv.len() - 1), "--workspace=/w".into());
            }
            match next(6) {
                0 => {}
                1 => argv.push("--".into()),
                _ => argv.extend([
                    "--".into(),
                    "/bin/true".into(),
                    OsString::from_vec(values[next(values.len())].to_vec()),
                ]),
            }
            cases += 1;
            let quick = quick::exec_args(&argv);
            let clap = Cli::try_parse_from(&argv);
            if let Some(q) = quick {
                taken += 1;
                match clap {
                    Ok(Cli { cmd: Cmd::Exec(c) }) => assert_eq!(q, *c, "{argv:?}"),
                    Ok(_) => panic!("clap parsed another subcommand: {argv:?}"),
                    Err(e) => panic!("the quick parse took what clap refuses ({e}): {argv:?}"),
                }
            }
        }
        eprintln!("the quick parse took {taken} of {cases} lines");
        assert!(taken * 20 > cases, "the quick parse took {taken} of {cases} lines");
        // The plain lines are taken.
        for line in [
            &["exec", "--workspace", ".", "--", "/bin/true"][..],
            &["exec", "--workspace=/w", "--writable", "--timeout", "5", "--pids", "256", "--", "make", "test"],
            &["exec", "--policy", "p.toml", "--sh", "--json", "--", "echo hi > f"],
            &["exec", "--workspace", ".", "--deny", ".env*", "--network", "host", "--", "ls", "--", "-l"],
        ] {
            let argv: Vec<OsString> =
                std::iter::once("portcullis").chain(line.iter().copied()).map(OsString::from).collect();
            let q = quick::exec_args(&argv).unwrap_or_else(|| panic!("not taken: {line:?}"));
            match Cli::try_parse_from(&argv) {
                Ok(Cli { cmd: Cmd::Exec(c) }) => assert_eq!(q, *c),
                _ => panic!("clap did not parse {line:?}"),
            }
        }
    }
}
