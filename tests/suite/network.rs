//! One network per workspace (issue 12): with `network = "none"` the
//! commands of one `Workspace` share one network namespace with only
//! loopback. Each test checks from outside: a TCP connect from the test
//! process, the host's `/proc/*/ns/net` and `/proc/*/fd/*` links; each
//! refusal has its control and its errno pinned.

use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use portcullis::policy::WorkspacePolicy;
use portcullis::runner::{Exec, ExecOptions};
use portcullis::sandbox::NetworkNamespace;
use portcullis::workspace::jobs::Started;
use portcullis::workspace::Workspace;

use serde_json::json;

use super::mcp_server::Serve;
use super::util::{cli, rt, workspace_with, Ws};

/// Serves `hello` on 127.0.0.1:argv[1]; prints `ready` (and, given a path
/// in argv[2], writes it there) once it listens.
const SERVER: &str = r#"import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
if len(sys.argv) > 2:
    open(sys.argv[2], "w").write("ready\n")
print("ready", flush=True)
while True:
    c, _ = s.accept()
    c.sendall(b"hello\n")
    c.close()
"#;

/// Connects to 127.0.0.1:argv[1]: `OK <what it read>`, or the errno's name.
const CLIENT: &str = r#"import errno, socket, sys
try:
    c = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
    print("OK " + c.recv(100).decode().strip())
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e)))
"#;

fn scripts(ws: &Ws) {
    ws.write("server.py", SERVER);
    ws.write("client.py", CLIENT);
}

fn policy(ws: &Ws, extra: &str) -> WorkspacePolicy {
    let text = format!(
        "workspace = {:?}\n{extra}\n[shell]\ninterpreter = \"sh\"\nallow = [\"python3\", \"readlink\", \"sh\", \"true\"]\ntimeout = \"60s\"\n[shell.background]\nmax_jobs = 4\ntimeout = \"120s\"\n",
        ws.path()
    );
    WorkspacePolicy::from_toml(&text).unwrap_or_else(|e| panic!("policy: {e}"))
}

fn workspace(ws: &Ws, extra: &str) -> Workspace {
    workspace_with(policy(ws, extra)).0
}

/// A port nothing on the host listens on (bound once, then let go).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
    l.local_addr().map(|a| a.port()).unwrap_or_else(|e| panic!("local_addr: {e}"))
}

async fn exec(w: &Workspace, line: &str) -> portcullis::runner::Ran {
    match w.exec(line, ExecOptions::default()).await {
        Ok(Exec::Ran(r)) => *r,
        Ok(other) => panic!("{line}: expected a run, got {other:?}"),
        Err(e) => panic!("{line}: {}", portcullis::error_chain(&e)),
    }
}

async fn out(w: &Workspace, line: &str) -> String {
    let r = exec(w, line).await;
    String::from_utf8_lossy(&r.result.stdout).trim().to_string()
}

/// Start the server as a background job of `w` and wait until it listens.
async fn serve(w: &Workspace, port: u16) -> String {
    let id = match w.start_shell(&format!("python3 server.py {port}"), ExecOptions::default()).await {
        Ok(Started::Job { id, .. }) => id,
        Ok(other) => panic!("server: expected a job, got {other:?}"),
        Err(e) => panic!("server: {}", portcullis::error_chain(&e)),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = String::new();
    let mut cursor = None;
    while !seen.contains("ready") {
        assert!(Instant::now() < deadline, "the server job never listened: {seen:?}");
        let o = w
            .shell_output(&id, cursor, Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("output: {}", portcullis::error_chain(&e)));
        seen.push_str(&o.stdout);
        seen.push_str(&o.stderr);
        assert!(o.status == portcullis::workspace::jobs::JobStatus::Running || seen.contains("ready"), "{o:?}");
        cursor = Some(o.cursor);
    }
    id
}

/// The errno's name of a connect from the test process (the host).
fn host_connect(port: u16) -> String {
    match std::net::TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(5)) {
        Ok(_) => "OK".into(),
        Err(e) => format!("{:?}", nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(0))),
    }
}

/// `net:[inode]` of a command's network namespace.
async fn netns_of(w: &Workspace) -> String {
    let link = out(w, "readlink /proc/self/ns/net").await;
    assert!(link.starts_with("net:["), "{link:?}");
    link
}

/// Every process of the host (that this uid may look at) in `link`'s
/// namespace or holding a descriptor of it.
fn holders(link: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let p = e.path();
        if std::fs::read_link(p.join("ns/net")).is_ok_and(|l| l.as_os_str() == link) {
            found.push(format!("{name} (in it)"));
        }
        for fd in std::fs::read_dir(p.join("fd")).into_iter().flatten().flatten() {
            if std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == link) {
                found.push(format!("{name} (fd {})", fd.file_name().to_string_lossy()));
            }
        }
    }
    found
}

/// Poll until nothing holds `link` (bounded).
fn gone(link: &str, within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    loop {
        let h = holders(link);
        if h.is_empty() || Instant::now() > deadline {
            return h;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn r0800_a_background_server_is_reachable_by_later_commands_of_the_workspace() {
    let ws = Ws::new();
    scripts(&ws);
    let w = workspace(&ws, "");
    let port = free_port();
    let private = super::util::run_ok(&ws.req(&["true"]));
    rt().block_on(async {
        serve(&w, port).await;
        let r = exec(&w, &format!("python3 client.py {port}")).await;
        assert_eq!(String::from_utf8_lossy(&r.result.stdout).trim(), "OK hello", "{:?}", r.result);
        assert_eq!(r.result.enforcement.network_namespace, NetworkNamespace::Shared);
        // Joined from the workspace's user namespace, the run is contained
        // as a private one is (the cgroup's clone3, the same kill).
        assert_eq!(r.result.enforcement.kill_mechanism, private.enforcement.kill_mechanism);
        assert_eq!(r.result.enforcement.clone, private.enforcement.clone);
        assert_eq!(r.result.enforcement.limits, private.enforcement.limits);
        // Every command is in the same namespace, and it is not the host's.
        let (a, b) = (netns_of(&w).await, netns_of(&w).await);
        assert_eq!(a, b);
        let host = std::fs::read_link("/proc/self/ns/net").unwrap_or_default();
        assert_ne!(host.as_os_str(), a.as_str(), "the workspace's network is the host's");
        w.dispose().await;
    });
}

/// The control of r0800's other direction: the same two commands through
/// `portcullis exec` (one shot: a private namespace each) do not reach each
/// other.
#[test]
fn r0801_one_shot_commands_keep_a_private_network_each() {
    let ws = Ws::new();
    scripts(&ws);
    let port = free_port();
    let w = ws.path().display().to_string();
    let ready = ws.join("ready");
    let mut server: Child = cli()
        .args(["exec", "--writable", "--timeout", "120", "--workspace", &w, "--", "python3", "server.py"])
        .arg(port.to_string())
        .arg(&ready)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("portcullis exec: {e}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready.exists() {
        if Instant::now() > deadline || server.try_wait().ok().flatten().is_some() {
            let _ = server.kill();
            panic!("the one-shot server never listened");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let client = cli()
        .args(["exec", "--workspace", &w, "--", "python3", "client.py"])
        .arg(port.to_string())
        .output()
        .unwrap_or_else(|e| panic!("portcullis exec: {e}"));
    let _ = server.kill();
    let _ = server.wait();
    let said = String::from_utf8_lossy(&client.stdout);
    assert_eq!(said.lines().next(), Some("ECONNREFUSED"), "{said}\n{}", String::from_utf8_lossy(&client.stderr));
    // And the host does not reach the one-shot server either.
    assert_eq!(host_connect(port), "ECONNREFUSED");
}

#[test]
fn r0802_another_workspace_and_the_host_cannot_reach_it() {
    let (ws, other) = (Ws::new(), Ws::new());
    scripts(&ws);
    scripts(&other);
    let (w, w2) = (workspace(&ws, ""), workspace(&other, ""));
    let port = free_port();
    rt().block_on(async {
        serve(&w, port).await;
        assert_eq!(out(&w, &format!("python3 client.py {port}")).await, "OK hello", "control: its own workspace");
        assert_eq!(out(&w2, &format!("python3 client.py {port}")).await, "ECONNREFUSED", "another workspace");
        assert_ne!(netns_of(&w).await, netns_of(&w2).await);
        assert_eq!(host_connect(port), "ECONNREFUSED", "the host reached the workspace's server");
        // Control: a listener of the host is reachable from the host.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
        let hp = l.local_addr().map(|a| a.port()).unwrap_or_default();
        assert_eq!(host_connect(hp), "OK");
        w.dispose().await;
        w2.dispose().await;
    });
}

#[test]
fn r0803_a_command_cannot_reach_the_hosts_loopback() {
    let ws = Ws::new();
    scripts(&ws);
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("bind: {e}"));
    let port = l.local_addr().map(|a| a.port()).unwrap_or_default();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            let _ = std::io::Write::write_all(&mut &c, b"host\n");
        }
    });
    rt().block_on(async {
        let w = workspace(&ws, "");
        assert_eq!(out(&w, &format!("python3 client.py {port}")).await, "ECONNREFUSED");
        w.dispose().await;
        // Control: with network = "host" the same command reaches it.
        let h = workspace(&ws, "network = \"host\"");
        let r = exec(&h, &format!("python3 client.py {port}")).await;
        assert_eq!(String::from_utf8_lossy(&r.result.stdout).trim(), "OK host");
        assert_eq!(r.result.enforcement.network_namespace, NetworkNamespace::Host);
        h.dispose().await;
    });
}

#[test]
fn r0804_the_network_goes_with_the_workspace_on_dispose() {
    let ws = Ws::new();
    scripts(&ws);
    let w = workspace(&ws, "");
    let port = free_port();
    rt().block_on(async {
        serve(&w, port).await;
        let link = netns_of(&w).await;
        let held = holders(&link);
        // The server's processes are in it and this process holds its fd.
        assert!(held.iter().any(|h| h.ends_with("(in it)")), "{held:?}");
        let me = std::process::id().to_string();
        assert!(held.iter().any(|h| h.starts_with(&format!("{me} (fd"))), "{held:?}");
        w.dispose().await;
        let left = gone(&link, Duration::from_secs(10));
        assert!(left.is_empty(), "still held after dispose: {left:?}");
        let after = w.exec("true", ExecOptions::default()).await;
        assert!(after.is_err(), "a disposed workspace ran a command: {after:?}");
    });
}

#[test]
fn r0805_the_network_goes_when_the_workspace_is_dropped() {
    let ws = Ws::new();
    scripts(&ws);
    let port = free_port();
    let link = rt().block_on(async {
        let w = workspace(&ws, "");
        serve(&w, port).await;
        let link = netns_of(&w).await;
        drop(w);
        link
    });
    let left = gone(&link, Duration::from_secs(10));
    assert!(left.is_empty(), "still held after the workspace was dropped: {left:?}");
}

/// Scopes and read-only views are the same workspace: the same network.
#[test]
fn r0806_projections_share_the_workspace_network() {
    let ws = Ws::new();
    scripts(&ws);
    ws.write("sub/keep", "");
    let w = workspace(&ws, "");
    rt().block_on(async {
        let whole = netns_of(&w).await;
        let ro = w.readonly();
        assert_eq!(netns_of(&ro).await, whole);
        let scope = w.scope("sub").unwrap_or_else(|e| panic!("scope: {}", portcullis::error_chain(&e)));
        assert_eq!(netns_of(&scope).await, whole);
        w.dispose().await;
    });
}

/// `--explain` and the result say which network a command gets.
#[test]
fn r0807_explain_names_the_network() {
    let ws = Ws::new();
    let w = ws.path().display().to_string();
    let o =
        cli().args(["exec", "--explain", "--workspace", &w, "--", "true"]).output().unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("network: none (a private namespace with loopback only)"), "{text}");
    assert!(!text.contains("tcp bind/connect denied"), "{text}");
    let r = super::util::run_ok(&ws.req(&["true"]));
    assert_eq!(r.enforcement.network_namespace, NetworkNamespace::Private);
    let shared = super::util::sandbox().with_shared_network();
    let plan = shared.plan(&ws.req(&["true"])).unwrap_or_else(|e| panic!("plan: {e}"));
    let userns = !super::util::is_root();
    assert_eq!(plan.spec.netns, portcullis_helper::spec::Netns::Shared { userns });
    assert!(!plan.spec.landlock.deny_tcp, "Landlock would refuse the loopback the commands share");
}

/// `portcullis serve` with a policy allowing the scripts, in `ws`.
fn serve_cmd(ws: &Ws, extra: &str) -> std::process::Command {
    let policy = ws.path().with_extension("policy.toml");
    let text = format!(
        "{extra}\n[shell]\ninterpreter = \"sh\"\nallow = [\"python3\", \"readlink\", \"sh\", \"true\"]\n[shell.background]\n"
    );
    std::fs::write(&policy, text).unwrap_or_else(|e| panic!("policy: {e}"));
    let mut cmd = cli();
    cmd.arg("serve").arg("--workspace").arg(ws.path()).arg("--policy").arg(&policy);
    cmd
}

fn shell(s: &mut Serve, id: i64, line: &str) -> serde_json::Value {
    s.call(id, "run_shell", json!({ "command": line }));
    s.structured(id)
}

fn said(v: &serde_json::Value) -> String {
    v["stdout"].as_str().unwrap_or_default().trim().to_string()
}

/// The holder of the namespace is `portcullis serve`: SIGKILLed, nothing
/// is left that holds the network (its jobs die with their lifelines).
#[test]
fn r0808_the_network_goes_when_the_serving_process_is_killed() {
    let ws = Ws::new();
    scripts(&ws);
    let port = free_port();
    let mut s = Serve::spawn(serve_cmd(&ws, ""));
    s.call(1, "run_shell", json!({ "command": format!("python3 server.py {port}"), "background": true }));
    assert_eq!(s.structured(1)["outcome"], "started");
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut id = 2;
    loop {
        let r = shell(&mut s, id, &format!("python3 client.py {port}"));
        if said(&r) == "OK hello" {
            break;
        }
        assert!(Instant::now() < deadline, "the server job is not reachable: {r}");
        std::thread::sleep(Duration::from_millis(50));
        id += 1;
    }
    let link = said(&shell(&mut s, 100, "readlink /proc/self/ns/net"));
    assert!(link.starts_with("net:["), "{link}");
    let pid = s.child.id().to_string();
    let held = holders(&link);
    assert!(held.iter().any(|h| h.starts_with(&format!("{pid} (fd"))), "serve does not hold it: {held:?}");
    assert!(held.iter().any(|h| h.ends_with("(in it)")), "the server job is not in it: {held:?}");
    let _ = s.child.kill();
    let _ = s.child.wait();
    let left = gone(&link, Duration::from_secs(10));
    assert!(left.is_empty(), "still held after serve was SIGKILLed: {left:?}");
}

/// Under a container's seccomp profile the workspace's network cannot be
/// made, and the full sandbox not either: one line says so, as for a run's
/// own namespaces; the landlock-only mode (no namespaces) runs.
#[test]
fn r0809_under_a_container_profile_it_degrades_visibly() {
    use super::container::{landlock_only_available, under, Profile};
    let ws = Ws::new();
    scripts(&ws);
    let mut s = Serve::spawn(under(Profile::Container, serve_cmd(&ws, "")));
    s.call(1, "run_shell", json!({ "command": "true" }));
    let r = s.result(1);
    let text = r.to_string();
    assert_eq!(r["isError"], true, "{r}");
    assert!(text.contains("the full sandbox cannot run: user namespaces are blocked here"), "{r}");
    assert!(text.contains("for the workspace's network") && text.contains("--degraded landlock-only"), "{r}");
    drop(s);
    // Control: without the profile the same server runs the command.
    let mut s = Serve::spawn(serve_cmd(&ws, ""));
    let r = shell(&mut s, 1, "readlink /proc/self/ns/net");
    assert!(said(&r).starts_with("net:["), "{r}");
    drop(s);
    if landlock_only_available("r0809") {
        let mut s = Serve::spawn(under(Profile::Container, serve_cmd(&ws, "degraded = \"landlock-only\"")));
        let r = shell(&mut s, 1, "true");
        assert_eq!(r["outcome"], "exited", "{r}");
        assert_eq!(r["sandbox"], "landlock-only", "{r}");
    }
}

/// Forks sleeping children until a fork fails: prints how many succeeded.
const FORKS: &str = "import os, time\nn = 0\nfor i in range(20):\n    try:\n        pid = os.fork()\n    except OSError:\n        break\n    if pid == 0:\n        time.sleep(2)\n        os._exit(0)\n    n += 1\nprint('forked', n, flush=True)\n";

/// `limits.pids` counts the command's processes alike in the shared and
/// the private network (whichever mechanism enforces it: with
/// `RLIMIT_NPROC`, the outer helper of a shared run is counted in the
/// workspace's user namespace, not the sandbox's).
#[test]
fn r0810_the_pids_limit_counts_the_same_in_the_shared_network() {
    let ws = Ws::new();
    ws.write("forks.py", FORKS);
    let w = workspace(&ws, "[limits]\npids = 4");
    // The workspace runs its lines with `sh -c`, whose shell counts too.
    let mut req = ws.req(&["sh", "-c", "python3 forks.py"]);
    req.limits.pids = Some(4);
    let private = super::util::run_ok(&req);
    let want = super::util::stdout(&private).trim().to_string();
    assert!(want == "forked 2" || want == "forked 3", "private: {private:?}");
    rt().block_on(async {
        let r = exec(&w, "python3 forks.py").await;
        assert_eq!(r.result.enforcement.network_namespace, NetworkNamespace::Shared);
        assert_eq!(r.result.enforcement.limits.pids, private.enforcement.limits.pids);
        assert_eq!(String::from_utf8_lossy(&r.result.stdout).trim(), want, "{:?}", r.result);
        w.dispose().await;
    });
}

/// Commands that start together on a fresh workspace make one network
/// between them, not one each.
#[test]
fn r0811_concurrent_first_commands_make_one_network() {
    let ws = Ws::new();
    let w = workspace(&ws, "");
    rt().block_on(async {
        let (a, b, c) = tokio::join!(netns_of(&w), netns_of(&w), netns_of(&w));
        assert_eq!(a, b);
        assert_eq!(b, c);
        w.dispose().await;
        let left = gone(&a, Duration::from_secs(10));
        assert!(left.is_empty(), "still held after dispose: {left:?}");
    });
}

/// A plan that joins a shared network, run on a sandbox that has none, is
/// refused before anything starts, saying what to do.
#[test]
fn r0812_a_shared_plan_on_a_sandbox_without_one_is_refused() {
    let ws = Ws::new();
    let req = ws.req(&["true"]);
    let plan = super::util::sandbox()
        .with_shared_network()
        .plan(&req)
        .unwrap_or_else(|e| panic!("plan: {}", portcullis::error_chain(&e)));
    let private = super::util::sandbox();
    let r = rt().block_on(private.run_plan(&plan, &req, portcullis::sandbox::RunOptions::default()));
    let msg = r.as_ref().err().map(|e| portcullis::error_chain(e)).unwrap_or_default();
    assert!(msg.contains("joins a shared network") && msg.contains("plan with the sandbox that runs it"), "{r:?}");
    // Control: the same plan runs on a sandbox with a shared network.
    let shared = super::util::sandbox().with_shared_network();
    let ok = rt().block_on(shared.run_plan(&plan, &req, portcullis::sandbox::RunOptions::default()));
    assert!(ok.is_ok_and(|r| r.enforcement.network_namespace == NetworkNamespace::Shared));
}
