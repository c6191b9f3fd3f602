//! The `portcullis` command line: `exec`, `doctor`.

use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use tokio_util::sync::CancellationToken;

use portcullis::sandbox::{
    describe_mount, ExecRequest, Limits, RunOptions, Sandbox, Stdin, Stream, DEFAULT_MAX_OUTPUT,
};
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
    /// Report what this host offers each sandbox layer.
    Doctor {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum DegradedArg {
    /// No namespaces (hosts that block user namespaces): Landlock limits
    /// reads and writes, seccomp applies, the tree is swept at the end.
    LandlockOnly,
}

#[derive(Clone, Copy, ValueEnum)]
enum NetArg {
    None,
    Host,
}

#[derive(Args)]
struct ExecArgs {
    /// The workspace directory.
    #[arg(long, value_name = "DIR")]
    workspace: PathBuf,
    /// The workspace is read-only (the default).
    #[arg(long, conflicts_with = "writable")]
    read_only: bool,
    /// The whole workspace is writable (protected paths stay read-only).
    #[arg(long)]
    writable: bool,
    /// Make PATH writable: inside the workspace, the workspace itself, an
    /// absolute host path, or /tmp for the host's /tmp.
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
    /// Kill the whole command tree after SECS seconds (exit status 124).
    #[arg(long, value_name = "SECS")]
    timeout: Option<f64>,
    /// Network access.
    #[arg(long, value_enum, default_value = "none")]
    network: NetArg,
    /// Set an environment variable.
    #[arg(long = "env", value_name = "K=V")]
    env: Vec<String>,
    /// Copy a variable from this environment.
    #[arg(long = "inherit-env", value_name = "NAME")]
    inherit_env: Vec<OsString>,
    /// Most processes at once.
    #[arg(long, value_name = "N")]
    pids: Option<u64>,
    /// Most memory, in bytes.
    #[arg(long, value_name = "BYTES")]
    memory: Option<u64>,
    /// Cap on output kept and shown, stdout and stderr together.
    #[arg(long, value_name = "BYTES", default_value_t = DEFAULT_MAX_OUTPUT)]
    max_output: usize,
    /// Run in a named degraded mode (weaker isolation; the result and
    /// --explain say so), e.g. where user namespaces are unavailable.
    #[arg(long, value_enum, value_name = "MODE")]
    degraded: Option<DegradedArg>,
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
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("portcullis: cannot start the runtime: {e}");
            return ExitCode::from(125);
        }
    };
    rt.block_on(async {
        match cli.cmd {
            Cmd::Exec(a) => exec(*a).await,
            Cmd::Doctor { json } => {
                let r = portcullis::doctor::run().await;
                if json {
                    println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
                } else {
                    print!("{}", r.render());
                }
                if r.usable() {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::from(1)
                }
            }
        }
    })
}

fn request(a: &ExecArgs) -> Result<ExecRequest, String> {
    let mut req = ExecRequest::new(a.workspace.clone(), a.command.clone());
    req.writable = a.writable;
    req.write = a.write.clone();
    req.read = a.read.clone();
    req.deny = a.deny.clone();
    req.protect = a.protect.clone();
    req.cwd = a.cwd.clone();
    req.network = match a.network {
        NetArg::None => Network::None,
        NetArg::Host => Network::Host,
    };
    for e in &a.env {
        let (k, v) = e.split_once('=').ok_or_else(|| format!("--env {e:?}: expected NAME=VALUE"))?;
        if k.is_empty() {
            return Err(format!("--env {e:?}: empty name"));
        }
        req.env.push((k.into(), v.into()));
    }
    req.inherit_env = a.inherit_env.clone();
    if let Some(t) = a.timeout {
        if !(t.is_finite() && t > 0.0) {
            return Err(format!("--timeout {t}: must be a positive number of seconds"));
        }
        req.timeout = Some(Duration::from_secs_f64(t));
    }
    req.limits = Limits { pids: a.pids, memory: a.memory };
    req.max_output_bytes = a.max_output;
    req.test_switches.skip_readonly = a.test_skip_readonly;
    req.test_switches.skip_landlock = a.test_skip_landlock;
    req.degraded = a.degraded.map(|DegradedArg::LandlockOnly| portcullis::sandbox::Mode::LandlockOnly);
    Ok(req)
}

fn explain(sb: &Sandbox, plan: &portcullis::Plan, req: &ExecRequest) -> String {
    let mut s = String::from("portcullis plan v1\n");
    if plan.spec.mode == portcullis::sandbox::Mode::LandlockOnly {
        s += "mode: DEGRADED landlock-only (no namespaces, no mount plan: Landlock limits reads and writes)\n";
    }
    s += &format!(
        "workspace: {} ({})\n",
        plan.workspace.display(),
        if plan.writable { "writable" } else { "read-only" }
    );
    for g in &plan.write_grants {
        s += &format!("write-grant: {}\n", g.display());
    }
    for r in &plan.read_roots {
        s += &format!("read-root: {}\n", r.display());
    }
    for p in &plan.protected {
        s += &format!("protected: {}\n", p.display());
    }
    for p in &plan.pinned {
        s += &format!("pinned: {}\n", p.display());
    }
    for m in &plan.masked {
        s += &format!("masked: {}\n", m.display());
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
            " (root caller: runs as nobody; workspace and grants idmapped)"
        } else {
            ""
        }
    );
    for (i, op) in plan.spec.mounts.iter().enumerate() {
        s += &format!("mount {i:02}: {}\n", describe_mount(op));
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
        "landlock: abi {abi}, handles every write right but ioctl-dev (truncate included){reads}{scope}{tcp}\n"
    );
    for r in &plan.spec.landlock.readable {
        s += &format!("landlock-readable: {}\n", String::from_utf8_lossy(r));
    }
    for w in &plan.landlock_writable {
        s += &format!("landlock-writable: {}\n", w.display());
    }
    for g in &plan.landlock_gaps {
        s += &format!(
            "landlock-gap: {} lies beneath a writable path; only the read-only mount protects it\n",
            g.display()
        );
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
    } else {
        "capabilities: none held (an unprivileged caller), no_new_privs\n"
    };
    for g in &plan.git_guard {
        s += &format!("git-guard: {} (removed after the run if the command creates it)\n", g.display());
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
                format!("cgroup.kill (a leaf under {}; {fallback} if none can be made)", h.parent.display())
            }
            Ok(h) => format!("{fallback} ({} is not writable: no delegated cgroup)", h.parent.display()),
            Err(e) => format!("{fallback} ({e})"),
        }
    });
    s += &format!("timeout: {}\n", req.timeout.map_or("none".into(), |t| format!("{}s", t.as_secs_f64())));
    s += &format!("cwd: {}\n", String::from_utf8_lossy(&plan.spec.cwd));
    for e in &plan.spec.env {
        s += &format!("env: {}\n", String::from_utf8_lossy(e));
    }
    let argv: Vec<String> = plan.spec.argv.iter().map(|a| format!("{:?}", String::from_utf8_lossy(a))).collect();
    s += &format!("argv: [{}]\n", argv.join(", "));
    s
}

fn portcullis_abi() -> u32 {
    // SAFETY-free: the doctor module already wraps the probe.
    portcullis::doctor_landlock_abi()
}

async fn exec(a: ExecArgs) -> ExitCode {
    let req = match request(&a) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("portcullis: {e}");
            return ExitCode::from(2);
        }
    };
    let fail = |e: &portcullis::SandboxError, json: bool| {
        if json {
            let obj = serde_json::json!({ "error": { "message": error_chain(e), "exit_code": e.exit_code() } });
            println!("{obj}");
        }
        eprintln!("portcullis: {}", error_chain(e));
        ExitCode::from(e.exit_code())
    };
    let sb = match Sandbox::new() {
        Ok(s) => s,
        Err(e) => return fail(&e, a.json),
    };
    let plan = match sb.plan(&req) {
        Ok(p) => p,
        Err(e) => return fail(&e, a.json),
    };
    if a.explain {
        if a.json {
            println!("{}", serde_json::to_string_pretty(&plan).unwrap_or_default());
        } else {
            print!("{}", explain(&sb, &plan, &req));
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
    match sb.run_plan(&plan, &req, opts).await {
        Ok(r) => {
            if a.json {
                println!("{}", serde_json::to_string(&r).unwrap_or_default());
            } else {
                if r.truncated {
                    eprintln!("portcullis: output truncated at {} bytes", req.max_output_bytes);
                }
                if r.timed_out {
                    eprintln!(
                        "portcullis: timed out after {:.1}s; the whole command tree was killed",
                        req.timeout.map_or(0.0, |t| t.as_secs_f64())
                    );
                }
                for w in &r.warnings {
                    eprintln!("portcullis: warning: {w}");
                }
            }
            let code = if r.timed_out {
                124
            } else if r.cancelled {
                130
            } else {
                match (r.exit_code, r.signal) {
                    (Some(c), _) => c,
                    (None, Some(s)) => 128 + s,
                    _ => 125,
                }
            };
            ExitCode::from(u8::try_from(code & 0xff).unwrap_or(125))
        }
        Err(e) => fail(&e, a.json),
    }
}

/// The static musl build's allocator (see Cargo.toml).
#[cfg(target_env = "musl")]
#[global_allocator]
static ALLOC: dlmalloc::GlobalDlmalloc = dlmalloc::GlobalDlmalloc;
