//! The `portcullis` command line: `exec`, `check`, `doctor`, `audit`.

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};
use tokio_util::sync::CancellationToken;

use portcullis::policy::{
    quote_argv, quote_word, Interpreter, LinePlan, PlannedCommand, Refusal, Verdict, WorkspacePolicy,
};
use portcullis::sandbox::{describe_mount, ExecRequest, Mode, RunOptions, Sandbox, Stdin, Stream};
use portcullis::{error_chain, Network};

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

#[derive(Subcommand)]
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

#[derive(Args)]
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
    /// Print the resolved plan and run nothing.
    #[arg(long)]
    explain: bool,
    /// Test builds only: leave the mounts writable (proves Landlock alone holds).
    #[arg(long, hide = true)]
    test_skip_readonly: bool,
    /// Test builds only: skip Landlock (proves the mounts alone hold).
    #[arg(long, hide = true)]
    test_skip_landlock: bool,
    /// Test builds only: make the git guard fail (proves the run fails closed).
    #[arg(long, hide = true)]
    test_fail_git_guard: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

/// Exit statuses of `portcullis` itself: the library's (after GNU `env`,
/// `timeout` and `chroot`); every other status is the command's own.
use portcullis::sandbox::status;

/// How `exec` ended, before it becomes an exit status.
enum Outcome<'a> {
    /// Bad flags, a bad policy file, a request the library refused.
    BadInput,
    /// The policy refused the command; nothing ran.
    Refused,
    /// The sandbox failed (before or while starting the command).
    Failed(&'a portcullis::SandboxError),
    /// The command ran.
    Ran(&'a portcullis::ExecResult),
}

/// The one mapping from an outcome of `exec` to its exit status. A new
/// typed error with its own status (waiting for another writable run that
/// was cancelled: 130; that timed out: 124) gets its arm here.
fn exit_status(o: Outcome) -> u8 {
    match o {
        Outcome::BadInput | Outcome::Refused => status::FAILED,
        // The library's mapping (126/127 for a command that cannot run,
        // 124/130 for a wait ended by the timeout or a cancellation, 125
        // otherwise), so library callers and the CLI agree.
        Outcome::Failed(e) => e.exit_code(),
        // The library's mapping of how the command ended (its code,
        // 128 + a signal, 124 timed out, 130 cancelled).
        Outcome::Ran(r) => r.outcome.exit_status(),
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
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
                _ => ExitCode::from(status::FAILED),
            };
        }
    };
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("portcullis: cannot start the runtime: {e}");
            return ExitCode::from(status::FAILED);
        }
    };
    rt.block_on(async {
        match cli.cmd {
            Cmd::Exec(a) => exec(*a).await,
            Cmd::Check(a) => check(a),
            Cmd::Audit(a) => ExitCode::from(a.run(&mut std::io::stdout().lock(), &mut std::io::stderr().lock())),
            Cmd::Doctor { json } => {
                let r = portcullis::doctor::run().await;
                if json {
                    println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
                } else {
                    print!("{}", r.render());
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

/// Why `exec` stops before running anything.
enum Stop {
    /// Bad flags, a bad policy file.
    BadInput(String),
    /// The policy refused the command.
    Refused(Refusal),
}

fn bad(e: impl std::fmt::Display) -> Stop {
    Stop::BadInput(e.to_string())
}

/// The request, and the policy's verdict when there is a policy.
fn request(a: &ExecArgs) -> Result<(ExecRequest, Option<LinePlan>), Stop> {
    let (mut req, checked) = match &a.policy {
        Some(file) => {
            let (req, plan) = policy_request(a, file)?;
            (req, Some(plan))
        }
        None => {
            let ws = a.workspace.clone().ok_or_else(|| bad("--workspace DIR (or --policy FILE) is required"))?;
            let mut req = ExecRequest::new(ws, a.command.clone());
            req.writable = a.writable;
            (req, None)
        }
    };
    req.write.extend(a.write.iter().cloned());
    req.read.extend(a.read.iter().cloned());
    req.deny.extend(a.deny.iter().cloned());
    req.protect.extend(a.protect.iter().cloned());
    req.cwd = a.cwd.clone();
    if let Some(n) = a.network {
        req.network = n;
    }
    for e in &a.env {
        let (k, v) = e.split_once('=').ok_or_else(|| bad(format!("--env {e:?}: expected NAME=VALUE")))?;
        if k.is_empty() {
            return Err(bad(format!("--env {e:?}: empty name")));
        }
        if a.policy.is_some() && portcullis::policy::is_startup_var(k) {
            return Err(bad(format!("--env {k}: a shell start-up or loader variable is never passed to a command")));
        }
        req.env.push((k.into(), v.into()));
    }
    for n in &a.inherit_env {
        if a.policy.is_some() && portcullis::policy::is_startup_var(&n.to_string_lossy()) {
            return Err(bad(format!(
                "--inherit-env {}: a shell start-up or loader variable is never passed to a command",
                n.to_string_lossy()
            )));
        }
        req.inherit_env.push(n.clone());
    }
    if let Some(t) = a.timeout {
        req.timeout = Some(t);
    }
    if a.pids.is_some() {
        req.limits.pids = a.pids;
    }
    if a.memory.is_some() {
        req.limits.memory = a.memory;
    }
    if let Some(m) = a.max_output {
        req.max_output_bytes =
            usize::try_from(m).map_err(|_| bad(format!("--max-output {m}: too large for this machine")))?;
    }
    req.test_switches.skip_readonly = a.test_skip_readonly;
    req.test_switches.skip_landlock = a.test_skip_landlock;
    req.test_switches.fail_git_guard = a.test_fail_git_guard;
    if let Some(m) = a.degraded {
        req.degraded = Some(m);
    }
    if a.no_refused_writes {
        req.report_refused_writes = false;
    }
    // /bin/sh reads an sh-mode line in its locale's character set: only C,
    // POSIX or UTF-8 ones read it as the checker did.
    if checked.as_ref().is_some_and(|p| p.interpreter == Interpreter::Sh) {
        let set = req.env.iter().map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned()));
        let inherited = req.inherit_env.iter().filter_map(|n| {
            std::env::var_os(n).map(|v| (n.to_string_lossy().into_owned(), v.to_string_lossy().into_owned()))
        });
        if let Some((k, v)) = portcullis::policy::unsafe_sh_locale(set.chain(inherited)) {
            return Err(bad(format!("{k}={v}: sh mode needs a C, POSIX or UTF-8 locale (the line is read in it)")));
        }
    }
    Ok((req, checked))
}

/// Read the policy, check the command against it, and build the request
/// from both. `--writable` grants the policy's write list (the whole
/// workspace if it has none); `--write` adds grants.
fn policy_request(a: &ExecArgs, file: &std::path::Path) -> Result<(ExecRequest, LinePlan), Stop> {
    let mut policy = WorkspacePolicy::from_file(file).map_err(|e| bad(error_chain(&e)))?;
    if let Some(ws) = &a.workspace {
        policy.workspace = Some(std::path::absolute(ws).map_err(|e| bad(format!("{}: {e}", ws.display())))?);
    }
    let mut checker = policy.checker().map_err(|e| bad(error_chain(&e)))?;
    if a.sh {
        checker = checker.with_interpreter(Interpreter::Sh);
    }
    if let Some(cwd) = &a.cwd {
        checker = checker.with_cwd(cwd).map_err(|e| bad(format!("--cwd: {}", error_chain(&e))))?;
    }
    let words = a
        .command
        .iter()
        .map(|w| {
            w.to_str().map(str::to_string).ok_or_else(|| bad(format!("{w:?}: the policy checker reads UTF-8 text")))
        })
        .collect::<Result<Vec<String>, Stop>>()?;
    let verdict = match checker.interpreter() {
        Interpreter::Sh => match words.as_slice() {
            [line] => checker.check(line),
            _ => return Err(bad("with --sh, pass the line as one argument: -- 'LINE'")),
        },
        Interpreter::None => checker.check_argv(&words),
    };
    let plan = match verdict {
        Verdict::Accepted(p) => p,
        Verdict::Refused(r) => return Err(Stop::Refused(r)),
    };
    let mut req = policy.exec_request(&plan, a.writable).map_err(|e| bad(error_chain(&e)))?;
    req.policy_file = Some(file.to_path_buf());
    Ok((req, plan))
}

/// `check` exits 0 (accepted), 1 (refused) or, like every subcommand for
/// bad input, 125.
fn check(a: CheckArgs) -> ExitCode {
    let fail = |m: String| {
        eprintln!("portcullis: {m}");
        ExitCode::from(status::FAILED)
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
    let mut checker = match policy.checker() {
        Ok(c) if a.sh => c.with_interpreter(Interpreter::Sh),
        Ok(c) => c,
        Err(e) => return fail(error_chain(&e)),
    };
    if let Some(cwd) = &a.cwd {
        checker = match checker.with_cwd(cwd) {
            Ok(c) => c,
            Err(e) => return fail(format!("--cwd: {}", error_chain(&e))),
        };
    }
    let verdict = match (a.line.as_slice(), checker.interpreter()) {
        ([line], _) => checker.check(line),
        (words, Interpreter::None) => checker.check_argv(words),
        (_, Interpreter::Sh) => return fail("in sh mode, pass the line as one argument: -- 'LINE'".into()),
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&verdict).unwrap_or_default());
    } else {
        print!("{}", render_verdict(&verdict));
    }
    match verdict {
        Verdict::Accepted(_) => ExitCode::SUCCESS,
        Verdict::Refused(_) => ExitCode::from(1),
    }
}

fn render_verdict(v: &Verdict) -> String {
    fn cmd(out: &mut String, c: &PlannedCommand, indent: usize, n: Option<usize>) {
        let lead = match n {
            Some(n) => format!("{:indent$}{n}. ", ""),
            None => format!("{:indent$}runs: ", ""),
        };
        let mut line = quote_argv(&c.argv);
        let mut last_op: Option<&str> = None;
        for r in &c.redirects {
            let path = quote_word(&r.path.to_string_lossy());
            if last_op == Some(r.op.as_str()) {
                line += &format!(" or {path}");
            } else {
                line += &format!(" {} {path}", r.op);
            }
            last_op = Some(r.op.as_str());
        }
        *out += &format!("{lead}{line}\n");
        for inner in &c.runs {
            cmd(out, inner, indent + 5, None);
        }
    }
    match v {
        Verdict::Accepted(p) => {
            let mode = match p.interpreter {
                Interpreter::None => "argv mode",
                Interpreter::Sh => "sh mode",
            };
            let mut s = format!(
                "accepted ({mode}): {} command{}\n",
                p.commands.len(),
                if p.commands.len() == 1 { "" } else { "s" }
            );
            for (i, c) in p.commands.iter().enumerate() {
                cmd(&mut s, c, 2, Some(i + 1));
            }
            s
        }
        Verdict::Refused(r) => format!("refused: {}\n  command: {}\n  why: {}\n", r.reason, r.command, r.message),
    }
}

fn explain(sb: &Sandbox, plan: &portcullis::Plan, req: &ExecRequest, checked: Option<&LinePlan>) -> String {
    let mut s = String::from("portcullis plan v1\n");
    if let (Some(checked), Some(file)) = (checked, &req.policy_file) {
        let mode = match checked.interpreter {
            Interpreter::None => "argv mode",
            Interpreter::Sh => "sh mode, run with /bin/sh -c",
        };
        s += &format!("policy: {} (accepted, {mode})\n", shown(file));
        fn walk(s: &mut String, cmds: &[PlannedCommand], depth: usize) {
            for c in cmds {
                *s +=
                    &format!("policy-command: {}{}\n", "  ".repeat(depth), shown_bytes(quote_argv(&c.argv).as_bytes()));
                for r in &c.redirects {
                    *s += &format!("policy-redirect: {}{} {}\n", "  ".repeat(depth + 1), r.op, shown(&r.path));
                }
                walk(s, &c.runs, depth + 1);
            }
        }
        walk(&mut s, &checked.commands, 0);
    }
    if plan.spec.mode == portcullis::sandbox::Mode::LandlockOnly {
        s += "mode: DEGRADED landlock-only (no namespaces, no mount plan: Landlock limits reads and writes)\n";
    }
    s += &format!("workspace: {} ({})\n", shown(&plan.workspace), if plan.writable { "writable" } else { "read-only" });
    for g in &plan.write_grants {
        let note = if plan.create_grants.contains(g) { " (missing: created before the run)" } else { "" };
        s += &format!("write-grant: {}{note}\n", shown(g));
    }
    for r in &plan.read_roots {
        s += &format!("read-root: {}\n", shown(r));
    }
    for p in &plan.protected {
        s += &format!("protected: {}\n", shown(p));
    }
    for p in &plan.pinned {
        s += &format!("pinned: {}\n", shown(p));
    }
    for m in &plan.masked {
        s += &format!("masked: {}\n", shown(m));
    }
    for h in &plan.hard_linked {
        s += &format!("hard-linked: {} (another name lies outside the writable areas; kept read-only)\n", shown(h));
    }
    for p in &plan.privileged {
        s += &format!("privileged: {} (setuid, setgid or file capabilities; kept read-only)\n", shown(p));
    }
    for u in &plan.unlistable {
        s += &format!("unlistable: {} (the caller cannot list it, the command could search it; masked)\n", shown(u));
    }
    if plan.spec.mode == portcullis::sandbox::Mode::Full {
        s += &format!(
            "namespaces: user mount pid ipc uts{}\n",
            if plan.spec.network == Network::None { " net" } else { "" }
        );
    } else {
        s += "namespaces: none\n";
    }
    let full = plan.spec.mode == portcullis::sandbox::Mode::Full;
    s += &format!(
        "network: {}\n",
        match (plan.spec.network, full) {
            (Network::None, true) => "none (a private namespace with loopback only)",
            (Network::None, false) => "none (IPv4, IPv6 and unix sockets refused by seccomp)",
            (Network::Host, true) => "host",
            (Network::Host, false) => "host (unix sockets refused by seccomp)",
        }
    );
    let id = plan.spec.identity;
    s += &format!(
        "ids: uid {} gid {} inside = host uid {} gid {}{}\n",
        id.inside_uid,
        id.inside_gid,
        id.outside_uid,
        id.outside_gid,
        if !full {
            " (no user namespace: the caller's own ids)"
        } else if id.inside_uid != id.outside_uid {
            " (root caller: runs as nobody; workspace, grants and readable roots idmapped)"
        } else {
            ""
        }
    );
    for (i, op) in plan.spec.mounts.iter().enumerate() {
        s += &format!("mount {i:02}: {}\n", shown_bytes(describe_mount(op).as_bytes()));
    }
    if full {
        s += "mount: / (root tmpfs) read-only after setup\n";
    } else {
        s += "mount: none (the host's mount view; Landlock limits access)\n";
    }
    let abi = portcullis_abi();
    let scope = if abi >= 6 { ", scope signal+abstract-unix" } else { ", no scoping (needs ABI 6)" };
    let tcp = match (plan.spec.network, abi >= 4) {
        (Network::None, true) => ", tcp bind/connect denied",
        (Network::None, false) => ", no tcp rules (needs ABI 4)",
        (Network::Host, _) => "",
    };
    let reads = if full { "" } else { ", and reads (no mount plan to hide anything)" };
    s += &format!(
        "landlock: abi {abi}, handles every write right but ioctl-dev (truncate included; make-sock only beneath landlock-sockets){reads}{scope}{tcp}\n"
    );
    for r in &plan.spec.landlock.readable {
        s += &format!("landlock-readable: {}\n", shown_bytes(r));
    }
    for w in &plan.landlock_writable {
        s += &format!("landlock-writable: {}\n", shown(w));
    }
    for sp in &plan.landlock_split {
        s += &format!(
            "landlock-split: {} (its rule left out {}: rules on its {} other entries instead; no new entry, \
             removal or rename directly in {})\n",
            shown(&sp.grant),
            sp.holes.iter().map(|h| shown(h)).collect::<Vec<_>>().join(", "),
            sp.entries.len(),
            sp.closed.iter().map(|c| shown(c)).collect::<Vec<_>>().join(", ")
        );
        for e in &sp.entries {
            s += &format!("landlock-writable: {}\n", shown(e));
        }
    }
    for w in &plan.landlock_sockets {
        s += &format!("landlock-sockets: {} (unix sockets may be made only here)\n", shown(w));
    }
    for g in &plan.landlock_gaps {
        s +=
            &format!("landlock-gap: {} lies beneath a writable path; only the read-only mount protects it\n", shown(g));
    }
    let profile =
        portcullis_helper::filter::Profile { degraded: !full, network_none: plan.spec.network == Network::None };
    s += &format!(
        "seccomp: sha256 {} ({} rules, x32 refused, clone3 ENOSYS)\n",
        plan.seccomp_sha256,
        portcullis_helper::filter::entries_for(profile).len()
    );
    s += if full {
        "capabilities: none (all five sets cleared), no_new_privs\n"
    } else if id.outside_uid == 0 {
        "capabilities: none (a root caller: uid 0 with all five sets cleared and the securebits noroot, no-setuid-fixup and no-ambient-raise locked), no_new_privs\n"
    } else {
        "capabilities: none held (an unprivileged caller), no_new_privs\n"
    };
    for g in &plan.git_guard {
        s += &format!("git-guard: {} (removed after the run if the command creates it)\n", shown(g));
    }
    s += &format!(
        "limits: pids={} memory={}\n",
        req.limits.pids.map_or("none".into(), |n| n.to_string()),
        req.limits.memory.map_or("none".into(), |n| n.to_string())
    );
    s += &format!("kill: {}\n", {
        let fallback =
            if full { "pid-namespace" } else { "subreaper sweep (kill(-1) in the sandbox's Landlock domain)" };
        match sb.cgroup_host() {
            Ok(h) if nix::unistd::access(&h.parent, nix::unistd::AccessFlags::W_OK).is_ok() => {
                format!("cgroup.kill (a leaf under {}; {fallback} if none can be made)", shown(&h.parent))
            }
            Ok(h) => format!("{fallback} ({} is not writable: no delegated cgroup)", shown(&h.parent)),
            Err(e) => format!("{fallback} ({e})"),
        }
    });
    s += &format!("timeout: {}\n", req.timeout.map_or("none".into(), |t| format!("{}s", t.as_secs_f64())));
    s += &format!("cwd: {}\n", shown_bytes(&plan.spec.cwd));
    for e in &plan.spec.env {
        s += &format!("env: {}\n", shown_bytes(e));
    }
    let argv: Vec<String> = plan.spec.argv.iter().map(|a| format!("{:?}", String::from_utf8_lossy(a))).collect();
    s += &format!("argv: [{}]\n", argv.join(", "));
    s
}

/// A path for `--explain`: as it is when it is plain text, else quoted with
/// its control characters and invalid bytes escaped, so a file name cannot
/// forge a line of the plan.
fn shown(p: &std::path::Path) -> String {
    shown_bytes(p.as_os_str().as_encoded_bytes())
}

fn shown_bytes(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(t) if !t.chars().any(char::is_control) => t.to_string(),
        _ => format!("{:?}", String::from_utf8_lossy(b)).replace('\u{fffd}', "\\x??"),
    }
}

fn portcullis_abi() -> u32 {
    // SAFETY-free: the doctor module already wraps the probe.
    portcullis::doctor_landlock_abi()
}

async fn exec(a: ExecArgs) -> ExitCode {
    let (req, checked) = match request(&a) {
        Ok(r) => r,
        Err(Stop::BadInput(e)) => {
            eprintln!("portcullis: {e}");
            return ExitCode::from(exit_status(Outcome::BadInput));
        }
        Err(Stop::Refused(r)) => {
            if a.json {
                println!("{}", serde_json::to_string(&Verdict::Refused(r.clone())).unwrap_or_default());
            }
            eprintln!("portcullis: {r}");
            return ExitCode::from(exit_status(Outcome::Refused));
        }
    };
    let fail = |e: &portcullis::SandboxError, json: bool| {
        let code = exit_status(Outcome::Failed(e));
        if json {
            // A failure after the run (the git guard) still carries the
            // command's result: its output is not lost.
            let mut obj = serde_json::json!({ "error": { "message": error_chain(e), "exit_code": code } });
            if let (Some(r), Some(map)) = (e.result(), obj.as_object_mut()) {
                map.insert("result".into(), serde_json::to_value(r).unwrap_or_default());
            }
            println!("{obj}");
        } else if let Some(r) = e.result() {
            for w in &r.warnings {
                eprintln!("portcullis: warning: {w}");
            }
        }
        eprintln!("portcullis: {}", error_chain(e));
        ExitCode::from(code)
    };
    let sb = match Sandbox::new() {
        Ok(s) => s,
        Err(e) => return fail(&e, a.json),
    };
    if a.explain {
        let plan = match sb.plan(&req) {
            Ok(p) => p,
            Err(e) => return fail(&e, a.json),
        };
        if a.json {
            println!("{}", serde_json::to_string_pretty(&plan).unwrap_or_default());
        } else {
            print!("{}", explain(&sb, &plan, &req, checked.as_ref()));
        }
        return ExitCode::SUCCESS;
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
    let mut opts = RunOptions { stdin, cancel: Some(cancel), ..RunOptions::default() };
    if !a.json {
        opts.on_output = Some(Box::new(|stream, data| {
            let _ = match stream {
                Stream::Stdout => std::io::stdout().lock().write_all(data).and_then(|_| std::io::stdout().flush()),
                Stream::Stderr => std::io::stderr().lock().write_all(data),
            };
        }));
    }
    // Planned inside: a run that writes is planned once, under the
    // workspace's lock (its hard-link walk is the costly part of a plan).
    match sb.run(&req, opts).await {
        Ok(r) => {
            if a.json {
                println!("{}", serde_json::to_string(&r).unwrap_or_default());
            } else {
                if r.truncated {
                    eprintln!("portcullis: output truncated at {} bytes", req.max_output_bytes);
                }
                if r.outcome == portcullis::sandbox::Outcome::TimedOut {
                    eprintln!(
                        "portcullis: timed out after {:.1}s; the whole command tree was killed",
                        req.timeout.map_or(0.0, |t| t.as_secs_f64())
                    );
                }
                for w in &r.warnings {
                    eprintln!("portcullis: warning: {w}");
                }
            }
            ExitCode::from(exit_status(Outcome::Ran(&r)))
        }
        Err(e) => fail(&e, a.json),
    }
}

/// The static musl build's allocator (see Cargo.toml).
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOC: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;
