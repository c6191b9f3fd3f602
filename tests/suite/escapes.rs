//! Escape attempts against the real kernel.
//!
//! Every test runs the real helper and tries the escape for real, pins the
//! exact answer the sandbox gives (an errno from the probe, a flag of the
//! result), shows with a control that the same attempt works — or fails
//! differently — when the restriction is off (on the host, or in a sandbox
//! with the option relaxed), and checks from outside that nothing changed or
//! survived. They pass as root (per-command cgroup, `cgroup.kill`) and as an
//! unprivileged user (no cgroup: pid-namespace teardown); where the two
//! legitimately differ the test branches on `is_root()` and says so.
//!
//! The shell scripts below use bash and never rely on a device node:
//! dash aborts an asynchronous command when it cannot open `/dev/null` for
//! its stdin, bash only warns, so a broken `/dev` cannot make a "nothing
//! survived" check pass vacuously (the daemons would never have started).
//! Each script also proves, from inside, that its processes were running.

use std::collections::BTreeMap;
use std::fs;
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use portcullis::sandbox::{ExecRequest, KillMechanism, LandlockStatus, Limits};
use portcullis::Network;

use super::util::*;

// ---------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A number no other test (in this process or another) uses: the pid and a
/// counter. Used as a `sleep` argument, so it is all digits.
fn unique() -> String {
    format!("{}{:04}", std::process::id(), SEQ.fetch_add(1, Ordering::Relaxed))
}

/// A generous safety timeout for runs that should end by themselves.
const SAFETY: Duration = Duration::from_secs(60);

/// The probe's answer for `op`, or a marker that it printed none.
fn res<'a>(m: &'a BTreeMap<String, String>, op: &str) -> &'a str {
    m.get(op).map_or("<no answer>", String::as_str)
}

/// Every host process whose command line contains `needle`, as
/// `pid: argv...`. Zombies have an empty command line and do not count.
fn host_procs_with(needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(rd) = fs::read_dir("/proc") else { return out };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())) else {
            continue;
        };
        let Ok(raw) = fs::read(e.path().join("cmdline")) else { continue };
        let args: Vec<String> =
            raw.split(|b| *b == 0).filter(|a| !a.is_empty()).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
        if args.iter().any(|a| a.contains(needle)) {
            out.push(format!("{pid}: {}", args.join(" ")));
        }
    }
    out
}

/// A bash function `count` that sets `c` to the number of processes whose
/// command line is exactly one of `cmds` (e.g. `sleep 123`). It spawns only
/// `tr`, whose own command line matches none of them.
fn bash_count_fn(cmds: &[String]) -> String {
    let pats: Vec<String> = cmds.iter().map(|c| format!("\"{c} \"")).collect();
    format!(
        "count() {{ c=0; for f in /proc/[0-9]*/cmdline; do s=$(tr '\\0' ' ' < \"$f\" 2>&-); \
         case \"$s\" in {}) c=$((c+1));; esac; done; }}",
        pats.join("|")
    )
}

/// Bash that waits (up to ~10 s) until `n` matching processes run, then
/// prints `running=<count>`.
fn bash_wait_for(n: usize) -> String {
    format!("i=0; count; while [ \"$c\" -lt {n} ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); count; done; echo running=$c")
}

/// A host process the controls can inspect and trace: `sleep`, already
/// exec'd when `spawn` returns. Killed and reaped on drop.
struct HostSleeper(Child);

impl HostSleeper {
    fn new(arg: &str) -> HostSleeper {
        let c = Command::new("sleep")
            .arg(arg)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn sleep: {e}"));
        HostSleeper(c)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for HostSleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The per-command cgroup leaf the command reported from `/proc/self/cgroup`
/// (the cgroup namespace is not unshared, so the path is the host's).
fn leaf_from(out: &str) -> Option<String> {
    out.lines().find_map(|l| l.strip_prefix("0::")).map(str::to_owned)
}

/// As root: the leaf must be one of ours and must be gone now. As an
/// unprivileged caller there is no leaf: the command stays in our cgroup.
fn assert_leaf_removed(test: &str, out: &str) {
    let own = fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let own = leaf_from(&own).unwrap_or_default();
    let Some(cg) = leaf_from(out) else { panic!("{test}: the command printed no cgroup2 line:\n{out}") };
    let sb = sandbox();
    match sb.cgroup_host() {
        Ok(host) if is_root() => {
            let name = Path::new(&cg).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let prefix = format!("portcullis-{}-", std::process::id());
            assert!(name.starts_with(&prefix), "{test}: the command ran in {cg}, not in a per-command leaf {prefix}*");
            let dir = host.parent.join(&name);
            assert!(cg.ends_with(&format!("/{name}")), "{test}: {cg}");
            assert!(!dir.exists(), "{test}: the cgroup leaf {} survived the run", dir.display());
        }
        _ => {
            eprintln!(
                "{test}: no per-command cgroup as uid {} (pid-namespace teardown); the command stayed in {cg}",
                nix::unistd::getuid()
            );
            assert_eq!(cg, own, "{test}: without a cgroup the command should stay in the caller's cgroup");
        }
    }
}

// ---------------------------------------------------------------------------
// 1. seccomp
// ---------------------------------------------------------------------------

/// Syscalls the filter refuses, with the errno the sandbox must give. The
/// arguments are harmless (invalid), so the same op on the host fails — or
/// succeeds — for a reason other than the filter.
const REFUSED: &[(&str, &str)] = &[
    ("x32", "EPERM"),
    ("io_uring", "EPERM"),
    ("tiocsti", "EPERM"),
    ("unshare_user", "EPERM"),
    ("clone3", "ENOSYS"),
    ("vsock", "EPERM"),
    ("sys:mount:0:0:0:0:0", "EPERM"),
    ("sys:bpf:0:0:0", "EPERM"),
    ("sys:keyctl:0:0:0", "EPERM"),
    // UFFD_USER_MODE_ONLY: allowed on the host even with
    // vm.unprivileged_userfaultfd=0, so the control is meaningful.
    ("sys:userfaultfd:1", "EPERM"),
    ("sys:perf_event_open:0:0:0:0:0", "EPERM"),
    ("sys:setns:0:0", "EPERM"),
    ("sys:open_tree:0:0:0", "EPERM"),
    // Linux 6.15: open_tree with mount attributes; the host answers EBADF
    // (or ENOSYS before 6.15).
    ("sys:open_tree_attr:0:0:0:0:0", "EPERM"),
    // quotactl on an open file's filesystem (Linux 5.14), as quotactl is.
    ("sys:quotactl_fd:0:0:0:0", "EPERM"),
];

#[test]
fn seccomp_refuses_dangerous_syscalls_with_pinned_errnos() {
    let test = "seccomp_refuses_dangerous_syscalls_with_pinned_errnos";
    let ws = Ws::new();
    let before = ws.snapshot();
    let mut ops: Vec<&str> = REFUSED.iter().map(|(op, _)| *op).collect();
    ops.push("ptrace_attach:1");
    let inside = probe_in(&ws, &ops, |r| r.timeout = Some(SAFETY));
    let host = probe_on_host(ws.path(), &ops);

    for (op, want) in REFUSED {
        assert_eq!(res(&inside, op), *want, "{test}: {op} inside the sandbox (all: {inside:?})");
        let h = res(&host, op);
        assert!(
            !h.starts_with("EXC:") && h != "<no answer>" && h != "UNKNOWN_OP",
            "{test}: host control for {op} broke: {h}"
        );
        if h == *want {
            // The host refuses it too (a hardened sysctl, a container's own
            // filter): the control cannot tell the layers apart here.
            available(test, false, &format!("the host itself answers {op} with {h}; no control"));
        }
    }
    // The controls on this kind of host, pinned where the kernel is stable.
    assert_eq!(res(&host, "unshare_user"), "OK", "{test}: a user namespace on the host");
    assert!(
        ["EINVAL", "EFAULT"].contains(&res(&host, "clone3")),
        "{test}: host clone3 with a NULL, zero-sized argument: {}",
        res(&host, "clone3")
    );
    assert_eq!(res(&host, "tiocsti"), "ENOTTY", "{test}: host TIOCSTI on /dev/null");
    assert!(["ENOSYS", "OK"].contains(&res(&host, "x32")), "{test}: host x32 getpid: {}", res(&host, "x32"));

    // ptrace of pid 1 is refused inside ...
    assert_eq!(res(&inside, "ptrace_attach:1"), "EPERM", "{test}: ptrace of the sandbox's pid 1");
    // ... and of a dumpable sibling with the same uid, which the kernel alone
    // would allow: the EPERM is the filter's.
    let pd = ProbeDir::new();
    let script = format!("sleep 30 & exec /usr/bin/python3 {} ptrace_attach:$!", pd.script());
    let mut req = ws.req(&["/bin/bash", "-c", &script]);
    req.read.push(pd.dir.path().to_path_buf());
    req.timeout = Some(SAFETY);
    let r = run_ok(&req);
    let sib = probe_results(&stdout(&r));
    let sib_res: Vec<&String> = sib.iter().filter(|(k, _)| k.starts_with("ptrace_attach:")).map(|(_, v)| v).collect();
    assert_eq!(sib_res, [&"EPERM".to_string()], "{test}: ptrace of a sibling inside: {}{}", stdout(&r), stderr(&r));
    // Control: on the host, attaching to our own child works.
    let sleeper = HostSleeper::new("61");
    let op = format!("ptrace_attach:{}", sleeper.pid());
    let h = probe_on_host(ws.path(), &[&op]);
    assert_eq!(res(&h, &op), "OK", "{test}: host control: ptrace of our own child");
    drop(sleeper);

    // The process state behind the refusals.
    let st = [
        "status:Seccomp",
        "status:NoNewPrivs",
        "status:CapEff",
        "status:CapPrm",
        "status:CapInh",
        "status:CapBnd",
        "status:CapAmb",
    ];
    let inside = probe_in(&ws, &st, |r| r.timeout = Some(SAFETY));
    assert_eq!(res(&inside, "status:Seccomp"), "2", "{test}: seccomp filter mode inside");
    assert_eq!(res(&inside, "status:NoNewPrivs"), "1", "{test}: no_new_privs inside");
    for cap in &st[2..] {
        assert_eq!(res(&inside, cap), "0000000000000000", "{test}: {cap} inside");
    }
    let host = probe_on_host(ws.path(), &st);
    eprintln!(
        "{test}: host Seccomp={} NoNewPrivs={} CapEff={}",
        res(&host, "status:Seccomp"),
        res(&host, "status:NoNewPrivs"),
        res(&host, "status:CapEff")
    );
    if is_root() {
        assert_ne!(
            res(&host, "status:CapEff"),
            "0000000000000000",
            "{test}: control: a root caller has capabilities on the host"
        );
    }

    assert_eq!(ws.snapshot(), before, "{test}: the workspace changed");
}

// ---------------------------------------------------------------------------
// 2. pid 1
// ---------------------------------------------------------------------------

#[test]
fn sandbox_pid1_cannot_be_read_or_traced() {
    let test = "sandbox_pid1_cannot_be_read_or_traced";
    let ws = Ws::new();
    // Pid 1 is the sandbox's own init, not the host's.
    let mut req = ws.req(&["cat", "/proc/1/comm"]);
    req.timeout = Some(SAFETY);
    let r = run_ok(&req);
    assert_eq!(stdout(&r).trim(), "portcullis-init", "{test}: /proc/1 inside is the sandbox init: {}", stderr(&r));

    let ops = [
        "read:/proc/1/environ",
        "read:/proc/1/mem",
        "ptrace_attach:1",
        "read:/proc/self/environ",
        "read:/proc/self/mem",
    ];
    let inside = probe_in(&ws, &ops, |r| r.timeout = Some(SAFETY));
    assert_eq!(res(&inside, "read:/proc/1/environ"), "EACCES", "{test}: {inside:?}");
    assert_eq!(res(&inside, "read:/proc/1/mem"), "EACCES", "{test}: {inside:?}");
    assert_eq!(res(&inside, "ptrace_attach:1"), "EPERM", "{test}: {inside:?}");
    // Control inside: the same files of the command itself pass the access
    // check (mem then fails reading address 0, with EIO).
    assert!(res(&inside, "read:/proc/self/environ").starts_with("OK:"), "{test}: {inside:?}");
    assert_eq!(res(&inside, "read:/proc/self/mem"), "EIO", "{test}: {inside:?}");

    // Control on the host: a dumpable process of ours can be read and traced.
    let sleeper = HostSleeper::new("62");
    let pid = sleeper.pid();
    let (env, mem, tr) =
        (format!("read:/proc/{pid}/environ"), format!("read:/proc/{pid}/mem"), format!("ptrace_attach:{pid}"));
    let host = probe_on_host(ws.path(), &[&env, &mem, &tr]);
    assert!(res(&host, &env).starts_with("OK:"), "{test}: host control {host:?}");
    assert_eq!(res(&host, &mem), "EIO", "{test}: host control {host:?}");
    assert_eq!(res(&host, &tr), "OK", "{test}: host control {host:?}");
}

// ---------------------------------------------------------------------------
// 3. inherited fds
// ---------------------------------------------------------------------------

#[test]
fn no_inherited_fds_beyond_stdio() {
    let test = "no_inherited_fds_beyond_stdio";
    let ws = Ws::new();
    // Leak an fd on purpose: not close-on-exec, so every child of this test
    // process (the helper included) inherits it. Harmless elsewhere: it is
    // /dev/null opened read-only.
    let leak = fs::File::open("/dev/null").unwrap_or_else(|e| panic!("open /dev/null: {e}"));
    nix::fcntl::fcntl(&leak, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()))
        .unwrap_or_else(|e| panic!("clear FD_CLOEXEC: {e}"));
    let n = leak.as_raw_fd().to_string();
    let list = "ls /proc/$$/fd";

    // Control: a host child sees the leaked fd.
    let out =
        Command::new("/bin/sh").args(["-c", list]).stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("sh: {e}"));
    let host_fds: Vec<String> = String::from_utf8_lossy(&out.stdout).split_whitespace().map(str::to_owned).collect();
    assert!(host_fds.contains(&n), "{test}: control: the leaked fd {n} reaches a host child: {host_fds:?}");

    // Inside: only 0, 1 and 2 (the shell lists its own fds from `ls`).
    let mut req = ws.req(&["/bin/sh", "-c", list]);
    req.timeout = Some(SAFETY);
    let r = run_ok(&req);
    let listed = stdout(&r);
    let inside: Vec<&str> = listed.split_whitespace().collect();
    assert_eq!(inside, ["0", "1", "2"], "{test}: fds of the sandboxed shell (stderr: {})", stderr(&r));

    // The probe's view: it fstat()s every fd number, so it holds none itself.
    let p = probe_in(&ws, &["fds"], |r| r.timeout = Some(SAFETY));
    assert_eq!(res(&p, "fds"), "0,1,2", "{test}: probe fds inside");
    drop(leak);
}

// ---------------------------------------------------------------------------
// 4. daemons
// ---------------------------------------------------------------------------

#[test]
fn daemons_do_not_survive_the_command() {
    let test = "daemons_do_not_survive_the_command";
    let ws = Ws::new();
    let n = unique();
    let (a, b, c) = (format!("3131{n}"), format!("3132{n}"), format!("3133{n}"));
    let cmds = [format!("sleep {a}"), format!("sleep {b}"), format!("sleep {c}")];
    // setsid (new session), a double fork (reparented), nohup (SIGHUP
    // ignored); then wait until all three run, and exit at once.
    let script = format!(
        "{count}; setsid sleep {a} & (sleep {b} &) ; nohup sleep {c} >/tmp/nohup.out 2>&1 & {wait}; echo started",
        count = bash_count_fn(&cmds),
        wait = bash_wait_for(3),
    );
    let mut req = ws.req(&["/bin/bash", "-c", &script]);
    req.timeout = Some(SAFETY);
    let r = run_ok(&req);
    let out = stdout(&r);
    assert!(!(r.outcome == portcullis::sandbox::Outcome::TimedOut), "{test}: the command should end by itself");
    assert_eq!(r.outcome.code(), Some(0), "{test}: {out}{}", stderr(&r));
    assert!(
        out.contains("running=3\n") && out.contains("started"),
        "{test}: the daemons never ran inside: {out}{}",
        stderr(&r)
    );
    // From outside, right after the run returned: nothing left.
    let left = host_procs_with(&n);
    assert!(left.is_empty(), "{test}: processes survived the sandbox: {left:?}");

    // Control: the same kind of process started on the host is visible to
    // this scan (and would survive), then is killed.
    let m = format!("3134{}", unique());
    let mut ctl = Command::new("setsid")
        .args(["sleep", &m])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("setsid sleep: {e}"));
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = host_procs_with(&m);
    while seen.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        seen = host_procs_with(&m);
    }
    let _ = ctl.kill();
    let _ = ctl.wait();
    assert_eq!(seen.len(), 1, "{test}: control: the scan finds a host `setsid sleep {m}`: {seen:?}");
    assert!(host_procs_with(&m).is_empty(), "{test}: control process not cleaned up");
}

// ---------------------------------------------------------------------------
// 5. timeout
// ---------------------------------------------------------------------------

#[test]
fn timeout_kills_the_whole_tree_and_removes_the_cgroup() {
    let test = "timeout_kills_the_whole_tree_and_removes_the_cgroup";
    let ws = Ws::new();
    let n = format!("1000{}", unique());
    let script = format!(
        "{count}; cat /proc/self/cgroup; for i in 1 2 3; do sleep {n} & done; {wait}; wait",
        count = bash_count_fn(&[format!("sleep {n}")]),
        wait = bash_wait_for(3),
    );
    let mut req = ws.req(&["/bin/bash", "-c", &script]);
    req.timeout = Some(Duration::from_secs(1));
    let start = Instant::now();
    let r = run_ok(&req);
    let took = start.elapsed();
    let out = stdout(&r);
    // The sandbox's kill (SIGKILL to the tree) is the outcome `TimedOut`,
    // whatever pid 1 reported, and maps to 124.
    assert_eq!(r.outcome, portcullis::sandbox::Outcome::TimedOut, "{test}: not timed out: {r:?}");
    assert_eq!(r.outcome.exit_status(), 124, "{test}");
    assert!(took < Duration::from_secs(5), "{test}: took {took:?}");
    assert!(out.contains("running=3\n"), "{test}: the sleepers never ran: {out}{}", stderr(&r));
    let left = host_procs_with(&n);
    assert!(left.is_empty(), "{test}: sleepers survived the timeout: {left:?}");
    assert_leaf_removed(test, &out);
    assert!(r.warnings.is_empty(), "{test}: cleanup warnings: {:?}", r.warnings);

    // Control: a command that ends in time is not touched by the same timeout.
    let mut req = ws.req(&["/bin/sh", "-c", "echo quick"]);
    req.timeout = Some(Duration::from_secs(1));
    let r = run_ok(&req);
    assert!(!(r.outcome == portcullis::sandbox::Outcome::TimedOut), "{test}: control timed out");
    assert_eq!(r.outcome.code(), Some(0), "{test}: control: {}", stderr(&r));
    assert_eq!(stdout(&r), "quick\n");
}

// ---------------------------------------------------------------------------
// 6. fork bomb
// ---------------------------------------------------------------------------

/// Fork up to 40 sleeping children and print how many forks succeeded.
const FORK_COUNT: &str = "import os, time\nn = 0\nfor i in range(40):\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n    if pid == 0:\n        time.sleep(3)\n        os._exit(0)\n    n += 1\nprint('forked', n, flush=True)\n";

#[test]
fn fork_bomb_is_contained() {
    let test = "fork_bomb_is_contained";
    let ws = Ws::new();

    // First, safely (at most 40 children): is the process limit enforced at
    // all? Never start a real bomb where it is not.
    let mut req = ws.req(&["/usr/bin/python3", "-c", FORK_COUNT]);
    req.limits = Limits { pids: Some(16), memory: None };
    req.timeout = Some(SAFETY);
    let r = run_ok(&req);
    let forked: usize = stdout(&r).trim().strip_prefix("forked ").and_then(|s| s.parse().ok()).unwrap_or(usize::MAX);
    assert!(
        forked < 16,
        "{test}: limits.pids=16 is not enforced: {forked} forks succeeded (mechanism {:?}, kill {:?}, uid {}); \
         refusing to run the fork bomb. (RLIMIT_NPROC binds only because no command runs as host uid 0)",
        r.enforcement.limits.pids,
        r.enforcement.kill_mechanism,
        nix::unistd::getuid(),
    );
    // Control: without the limit the same script forks all 40.
    let mut req = ws.req(&["/usr/bin/python3", "-c", FORK_COUNT]);
    req.timeout = Some(SAFETY);
    let r = run_ok(&req);
    assert_eq!(stdout(&r).trim(), "forked 40", "{test}: control without a limit: {}", stderr(&r));

    // The bomb. `exec sleep` keeps the main shell alive without a fork, so
    // only the timeout ends the run.
    let n = format!("4242{}", unique());
    let script = format!("b(){{ b|b& }}; b; exec sleep {n}");
    let mut req = ws.req(&["/bin/bash", "-c", &script]);
    req.limits = Limits { pids: Some(64), memory: None };
    req.timeout = Some(Duration::from_secs(3));
    let start = Instant::now();
    let r = run_ok(&req);
    let took = start.elapsed();
    assert!(
        (r.outcome == portcullis::sandbox::Outcome::TimedOut),
        "{test}: the bomb was not timed out: exit {:?} signal {:?}",
        r.outcome.code(),
        r.outcome.signal()
    );
    assert!(took < Duration::from_secs(3 + 7), "{test}: took {took:?}");
    let left = host_procs_with(&n);
    assert!(
        left.is_empty(),
        "{test}: {} bomb processes survived: {:?}",
        left.len(),
        left.iter().take(5).collect::<Vec<_>>()
    );
}

// ---------------------------------------------------------------------------
// 7. network
// ---------------------------------------------------------------------------

#[test]
fn no_network_by_default_tcp_loopback() {
    let test = "no_network_by_default_tcp_loopback";
    let ws = Ws::new();
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("listen: {e}"));
    l.set_nonblocking(true).unwrap_or_else(|e| panic!("nonblocking: {e}"));
    let port = l.local_addr().map(|a| a.port()).unwrap_or_else(|e| panic!("local_addr: {e}"));
    let op = format!("connect:127.0.0.1:{port}");

    let inside = probe_in(&ws, &[&op], |r| r.timeout = Some(SAFETY));
    // The sandbox's network namespace holds only its own loopback, where
    // nothing listens: ECONNREFUSED (Landlock no longer refuses TCP in the
    // full mode, so that a workspace's commands reach each other over the
    // loopback they share: see network.rs).
    assert_eq!(res(&inside, &op), "ECONNREFUSED", "{test}: {inside:?}");
    assert!(l.accept().is_err(), "{test}: the listener got a connection from the sandbox");

    // Control: the same sandbox with the host's network connects.
    let host_net = probe_in(&ws, &[&op], |r| {
        r.timeout = Some(SAFETY);
        r.network = Network::Host;
    });
    assert_eq!(res(&host_net, &op), "OK", "{test}: control with Network::Host: {host_net:?}");
    assert!(l.accept().is_ok(), "{test}: control: the listener saw the connection");
}

#[test]
fn abstract_unix_sockets_are_out_of_reach() {
    let test = "abstract_unix_sockets_are_out_of_reach";
    let ws = Ws::new();
    let name = format!("portcullis-escape-{}", unique());
    let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap_or_else(|e| panic!("abstract addr: {e}"));
    let l = UnixListener::bind_addr(&addr).unwrap_or_else(|e| panic!("bind @{name}: {e}"));
    l.set_nonblocking(true).unwrap_or_else(|e| panic!("nonblocking: {e}"));
    let op = format!("connect_unix:@{name}");

    // Default: another network namespace, where the name does not exist.
    let inside = probe_in(&ws, &[&op], |r| r.timeout = Some(SAFETY));
    assert_eq!(res(&inside, &op), "ECONNREFUSED", "{test}: {inside:?}");
    // With the host's network the name is found, and Landlock's scope (ABI 6+)
    // refuses it.
    if available(test, portcullis::doctor_landlock_abi() >= 6, "Landlock ABI < 6: no abstract-socket scoping") {
        let host_net = probe_in(&ws, &[&op], |r| {
            r.timeout = Some(SAFETY);
            r.network = Network::Host;
        });
        assert_eq!(res(&host_net, &op), "EPERM", "{test}: Network::Host: {host_net:?}");
    }
    assert!(l.accept().is_err(), "{test}: the listener got a connection from the sandbox");

    // Control: from the host the socket answers.
    let host = probe_on_host(ws.path(), &[&op]);
    assert_eq!(res(&host, &op), "OK", "{test}: host control {host:?}");
    assert!(l.accept().is_ok(), "{test}: control: the listener saw the host's connection");
}

#[test]
fn unix_socket_outside_the_sandbox_is_invisible() {
    let test = "unix_socket_outside_the_sandbox_is_invisible";
    let ws = Ws::new();
    let dir = tempfile::Builder::new().prefix("pc-sock-").tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let path = dir.path().join(format!("s{}.sock", unique()));
    let l = UnixListener::bind(&path).unwrap_or_else(|e| panic!("bind {}: {e}", path.display()));
    l.set_nonblocking(true).unwrap_or_else(|e| panic!("nonblocking: {e}"));
    let op = format!("connect_unix:{}", path.display());

    let inside = probe_in(&ws, &[&op], |r| r.timeout = Some(SAFETY));
    assert_eq!(res(&inside, &op), "ENOENT", "{test}: {inside:?}");
    let inside_host_net = probe_in(&ws, &[&op], |r| {
        r.timeout = Some(SAFETY);
        r.network = Network::Host;
    });
    assert_eq!(
        res(&inside_host_net, &op),
        "ENOENT",
        "{test}: the host network does not make files visible: {inside_host_net:?}"
    );
    assert!(l.accept().is_err(), "{test}: the listener got a connection from the sandbox");

    let host = probe_on_host(ws.path(), &[&op]);
    assert_eq!(res(&host, &op), "OK", "{test}: host control {host:?}");
    assert!(l.accept().is_ok(), "{test}: control: the listener saw the host's connection");
}

// ---------------------------------------------------------------------------
// 8. output floods
// ---------------------------------------------------------------------------

#[test]
fn output_flood_is_capped_without_hanging() {
    let test = "output_flood_is_capped_without_hanging";
    let ws = Ws::new();
    // 50 MB through a pipe (no device node needed).
    let mut req = ws.req(&["/bin/sh", "-c", "yes | head -c 50000000"]);
    req.max_output_bytes = 1 << 20;
    req.timeout = Some(SAFETY);
    let start = Instant::now();
    let r = run_ok(&req);
    let took = start.elapsed();
    assert!(r.truncated, "{test}: not truncated");
    assert_eq!(r.stdout.len() + r.stderr.len(), 1 << 20, "{test}: kept {} + {}", r.stdout.len(), r.stderr.len());
    assert_eq!(r.stdout.len(), 1 << 20, "{test}: stderr: {}", stderr(&r));
    assert_eq!(r.outcome.code(), Some(0), "{test}: the writer must not be blocked or killed by the cap");
    assert!(!(r.outcome == portcullis::sandbox::Outcome::TimedOut));
    assert!(took < Duration::from_secs(20), "{test}: took {took:?}");

    // An endless writer: the cap does not end it, the timeout does.
    let mut req = ws.req(&["yes"]);
    req.max_output_bytes = 64 << 10;
    req.timeout = Some(Duration::from_secs(2));
    let start = Instant::now();
    let r = run_ok(&req);
    let took = start.elapsed();
    assert!(
        r.truncated && (r.outcome == portcullis::sandbox::Outcome::TimedOut),
        "{test}: yes: truncated={} timed_out={}",
        r.truncated,
        (r.outcome == portcullis::sandbox::Outcome::TimedOut)
    );
    assert_eq!(r.stdout.len(), 64 << 10, "{test}: yes kept {}", r.stdout.len());
    assert!(took < Duration::from_secs(10), "{test}: yes took {took:?}");

    // Control: output under the cap is kept whole and not flagged.
    let mut req = ws.req(&["/bin/sh", "-c", "yes | head -c 1000"]);
    req.max_output_bytes = 64 << 10;
    req.timeout = Some(SAFETY);
    let r = run_ok(&req);
    assert!(!r.truncated, "{test}: control flagged as truncated");
    assert_eq!(r.stdout.len(), 1000, "{test}: control");
}

// ---------------------------------------------------------------------------
// 9. host surfaces
// ---------------------------------------------------------------------------

#[test]
fn kernel_knobs_and_host_dirs_are_out_of_reach() {
    let test = "kernel_knobs_and_host_dirs_are_out_of_reach";
    let ws = Ws::new();
    let hostname = fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let sysrq_on_host = Path::new("/proc/sysrq-trigger").exists();
    let ops = [
        "read:/proc/sys/kernel/hostname",
        "write:/proc/sys/kernel/hostname",
        "write:/proc/sysrq-trigger",
        "exists:/sys",
        "exists:/root",
    ];
    let inside = probe_in(&ws, &ops, |r| r.timeout = Some(SAFETY));
    // Visible (the control inside), but read-only.
    assert!(res(&inside, "read:/proc/sys/kernel/hostname").starts_with("OK:"), "{test}: {inside:?}");
    assert_eq!(res(&inside, "write:/proc/sys/kernel/hostname"), "EROFS", "{test}: {inside:?}");
    if sysrq_on_host {
        assert_eq!(res(&inside, "write:/proc/sysrq-trigger"), "EROFS", "{test}: {inside:?}");
    } else {
        eprintln!(
            "{test}: this kernel has no /proc/sysrq-trigger (CONFIG_MAGIC_SYSRQ off); checking it is absent inside too"
        );
        assert_eq!(res(&inside, "write:/proc/sysrq-trigger"), "ENOENT", "{test}: {inside:?}");
    }
    assert_eq!(res(&inside, "exists:/sys"), "no", "{test}: {inside:?}");
    assert_eq!(res(&inside, "exists:/root"), "no", "{test}: {inside:?}");
    // Control: on the host both directories are there (never write the
    // host's knobs as a control).
    let host = probe_on_host(ws.path(), &["exists:/sys", "exists:/root"]);
    assert_eq!(res(&host, "exists:/sys"), "yes", "{test}: host control");
    assert_eq!(res(&host, "exists:/root"), "yes", "{test}: host control");
    // From outside: unchanged.
    assert_eq!(
        fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default(),
        hostname,
        "{test}: the hostname changed"
    );
}

#[test]
fn root_caller_cannot_read_root_only_files() {
    let test = "root_caller_cannot_read_root_only_files";
    if !is_root() {
        eprintln!("{test}: not applicable as uid {}: only a root caller is uid 0 inside, and the file modes alone keep /etc/shadow from others", nix::unistd::getuid());
        return;
    }
    if !available(test, Path::new("/etc/shadow").is_file(), "this host has no /etc/shadow") {
        return;
    }
    let ws = Ws::new();
    let inside = probe_in(&ws, &["read:/etc/shadow", "read:/etc/passwd"], |r| r.timeout = Some(SAFETY));
    assert_eq!(res(&inside, "read:/etc/shadow"), "EACCES", "{test}: {inside:?}");
    assert!(res(&inside, "read:/etc/passwd").starts_with("OK:"), "{test}: /etc itself stays readable: {inside:?}");
    // Control: root reads it on the host.
    let host = probe_on_host(ws.path(), &["read:/etc/shadow"]);
    assert!(res(&host, "read:/etc/shadow").starts_with("OK:"), "{test}: host control {host:?}");
}

// ---------------------------------------------------------------------------
// 10. reported mechanisms
// ---------------------------------------------------------------------------

#[test]
fn result_reports_the_kill_mechanism_and_layers_in_force() {
    let test = "result_reports_the_kill_mechanism_and_layers_in_force";
    let ws = Ws::new();
    let mut req: ExecRequest = ws.req(&["cat", "/proc/self/cgroup"]);
    req.timeout = Some(SAFETY);
    let r = run_ok(&req);
    assert_eq!(r.outcome.code(), Some(0), "{test}: {}", stderr(&r));
    let cg = leaf_from(&stdout(&r)).unwrap_or_default();
    let own = leaf_from(&fs::read_to_string("/proc/self/cgroup").unwrap_or_default()).unwrap_or_default();
    if is_root() {
        let sb = sandbox();
        if available(test, sb.cgroup_host().is_ok(), "no cgroup2 mount visible to this root caller") {
            assert_eq!(
                r.enforcement.kill_mechanism,
                KillMechanism::CgroupKill,
                "{test}: fallback: {:?}",
                r.enforcement.cgroup_fallback
            );
            assert_eq!(r.enforcement.cgroup_fallback, None);
            // Control: the command really ran in a per-command leaf.
            assert!(cg.contains(&format!("/portcullis-{}-", std::process::id())), "{test}: command cgroup {cg}");
        }
    } else {
        assert_eq!(r.enforcement.kill_mechanism, KillMechanism::PidNamespace, "{test}");
        assert!(
            r.enforcement.cgroup_fallback.as_deref().is_some_and(|s| !s.is_empty()),
            "{test}: the fallback must say why: {:?}",
            r.enforcement.cgroup_fallback
        );
        // Control: no leaf, the command stayed in the caller's cgroup.
        assert_eq!(cg, own, "{test}");
    }
    let abi = portcullis::doctor_landlock_abi();
    assert!(abi > 0, "{test}: the kernel offers no Landlock; the sandbox should have refused to run");
    assert_eq!(r.enforcement.landlock_abi, abi, "{test}: Landlock ABI in force vs the kernel's");
    assert_eq!(r.enforcement.landlock, LandlockStatus::Full, "{test}");
    assert!(r.enforcement.seccomp, "{test}: seccomp not reported");
    assert_eq!(r.enforcement.network, Network::None, "{test}");
}
