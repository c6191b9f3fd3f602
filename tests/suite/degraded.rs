//! The landlock-only mode as a named degradation: what it confines, what it
//! refuses by name, and that its sweep takes the whole tree.
//!
//! Every attempt is real, each has a control that shows the same attempt
//! works with the restriction off, and each pins the errno or the typed
//! refusal.

use std::path::PathBuf;

use portcullis::SandboxError;

use super::util::*;

#[test]
fn r0033_landlock_only_mode_is_a_named_degradation() {
    use portcullis::sandbox::{KillMechanism, Mode};
    // Root runs it too (in a container root has no user namespaces either):
    // its command is uid 0 without capabilities (suite::container::r0070).
    let ws = Ws::new();
    if !available("landlock_only", portcullis::doctor_landlock_abi() >= 6, "landlock-only mode needs Landlock ABI 6") {
        return;
    }
    let outside = Ws::new();
    let p = |r: &str| ws.join(r).display().to_string();
    let marker = format!("sleep 6{}", std::process::id() % 1000);
    let ops = [
        format!("write:{}", p("src/main.rs")),
        format!("create:{}", p("target/out.o")),
        format!("read:{}", outside.join("README.md").display()),
        "read:/etc/hostname".to_string(),
        "connect:127.0.0.1:9".to_string(),
        "write:/dev/null".to_string(),
    ];
    let before = super::util::snapshot(&ws.join("src"));
    let res = probe_in(&ws, &ops, |r| {
        r.degraded = Some(Mode::LandlockOnly);
        r.write.push(PathBuf::from("target"));
    });
    assert_eq!(res[&ops[0]], "EACCES", "{res:?}");
    assert_eq!(res[&ops[1]], "OK");
    assert_eq!(res[&ops[2]], "EACCES", "paths outside the plan are unreadable");
    assert!(res[&ops[3]].starts_with("OK"));
    assert!(res[&ops[4]] == "EPERM" || res[&ops[4]] == "EACCES", "no network: {res:?}");
    assert_eq!(res[&ops[5]], "OK");
    assert_eq!(super::util::snapshot(&ws.join("src")), before);
    // The tree is swept: a setsid daemon does not survive.
    let mut req = ws.req(&["bash", "-c", &format!("(setsid {marker} &); echo started")]);
    req.degraded = Some(Mode::LandlockOnly);
    let r = run_ok(&req);
    assert_eq!(r.enforcement.mode, Mode::LandlockOnly);
    assert!(matches!(r.enforcement.kill_mechanism, KillMechanism::Subreaper | KillMechanism::CgroupKill));
    let alive = host_procs_containing(&marker).iter().any(|c| c.trim() == marker);
    assert!(!alive, "a daemon survived the landlock-only run");
    // Control: the same write succeeds with the workspace writable.
    let res = probe_in(&ws, &[&ops[0]], |r| {
        r.degraded = Some(Mode::LandlockOnly);
        r.writable = true;
    });
    assert_eq!(res[&ops[0]], "OK");
    // What it cannot do is refused by name.
    let mut req = ws.req(&["true"]);
    req.degraded = Some(Mode::LandlockOnly);
    req.deny.push(".env".into());
    assert!(matches!(run(&req), Err(SandboxError::Unsupported { message: m, .. }) if m.contains("mount namespace")));
    let pids_cgroup = sandbox().cgroup_host().is_ok_and(|h| h.controllers.iter().any(|c| c == "pids"));
    if !pids_cgroup {
        let mut req = ws.req(&["true"]);
        req.degraded = Some(Mode::LandlockOnly);
        req.limits.pids = Some(5);
        assert!(matches!(run(&req), Err(SandboxError::Unsupported { message: m, .. }) if m.contains("pids")));
    }

    // Found in review of this mode: the sweepers could be crippled with
    // prlimit, host unix sockets and SysV IPC were reachable, metadata of
    // any owned file could change, /dev was readable, and a fork storm
    // could outrun the sweep.
    let tag = format!("storm{}", std::process::id());
    let script = format!(
        "import os, socket, resource, ctypes, errno, time\n\
         libc = ctypes.CDLL(None, use_errno=True)\n\
         def t(name, f):\n    try:\n        f(); print(name, 'OK')\n    except OSError as e:\n        print(name, errno.errorcode.get(e.errno))\n\
         pid1 = os.getppid()\n\
         t('prlimit', lambda: resource.prlimit(pid1, resource.RLIMIT_NOFILE, (0, 0)))\n\
         t('setpriority', lambda: os.setpriority(os.PRIO_PROCESS, pid1, 19))\n\
         t('kill', lambda: os.kill(pid1, 9))\n\
         t('unix', lambda: socket.socket(socket.AF_UNIX))\n\
         t('netlink', lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))\n\
         t('prio_user', lambda: os.setpriority(os.PRIO_USER, 0, 5))\n\
         t('chmod', lambda: os.chmod('{f}', 0o777))\n\
         t('utime', lambda: os.utime('{f}', (0, 0)))\n\
         def shm():\n    r = libc.shmget(0x5eed, 4096, 0o1600)\n    if r < 0: raise OSError(ctypes.get_errno(), 'shmget')\n\
         t('shmget', shm)\n\
         t('ptmx', lambda: open('/dev/ptmx', 'rb'))\n\
         def spawn():\n    for attempt in range(200):\n        try:\n            return os.fork()\n        except OSError:\n            time.sleep(0.01)\n    os._exit(1)\n\
         for i in range(20):\n    if spawn() == 0:\n        os.setsid()\n        for j in range(3):\n            if spawn() == 0:\n                os.execv('/bin/sleep', ['{tag}', '300'])\n        os._exit(0)\n\
         def count():\n    n = 0\n    for d in os.listdir('/proc'):\n        try:\n            n += open('/proc/' + d + '/cmdline', 'rb').read().startswith(b'{tag}\\0')\n        except OSError:\n            pass\n    return n\n\
         deadline = time.time() + 5\n\
         while count() == 0 and time.time() < deadline:\n    time.sleep(0.05)\n\
         print('storm', count())\n",
        f = ws.join("README.md").display(),
    );
    let mut req = ws.req(&["/usr/bin/python3", "-c", &script]);
    req.degraded = Some(Mode::LandlockOnly);
    req.timeout = Some(std::time::Duration::from_secs(20));
    let r = run_ok(&req);
    let out = stdout(&r);
    for (op, want) in [
        ("prlimit", "EPERM"),
        ("setpriority", "EPERM"),
        ("kill", "EPERM"),
        ("unix", "EPERM"),
        ("netlink", "EPERM"),
        ("prio_user", "EPERM"),
        ("chmod", "EPERM"),
        ("utime", "EPERM"),
        ("shmget", "EPERM"),
        ("ptmx", "EACCES"),
    ] {
        assert!(out.contains(&format!("{op} {want}")), "{op}: expected {want}: {out} {}", stderr(&r));
    }
    let storm: usize =
        out.lines().find_map(|l| l.strip_prefix("storm ")).and_then(|n| n.trim().parse().ok()).unwrap_or(0);
    assert!(storm > 0, "control: the fork storm never started: {out} {}", stderr(&r));
    let survivors = host_procs_containing(&tag).len();
    assert_eq!(survivors, 0, "the fork storm outlived the run");
}
