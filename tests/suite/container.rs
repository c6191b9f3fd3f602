//! portcullis inside a container, reproduced here without one.
//!
//! The default seccomp profiles of Docker and of containerd (Kubernetes'
//! RuntimeDefault), for a container without CAP_SYS_ADMIN, answer `clone3`
//! with ENOSYS (so that libc falls back to `clone`) and `unshare`, `setns`,
//! `mount`, `umount2`, `pivot_root`, the new mount API, `sethostname` and
//! `clone` with any namespace flag with EPERM; Landlock, seccomp and prctl
//! stay allowed. [`Profile::Container`] is a filter of that shape, written
//! from that behaviour (moby's `profiles/seccomp/default.json`), and
//! installed in the test's child just before it execs `portcullis`, as a
//! container runtime installs its profile before it execs the entrypoint:
//! everything portcullis starts inherits it. Nothing of it is in the product.
//! [`Profile::Clone3Only`] answers only `clone3` with ENOSYS.
//!
//! As root the filter is installed without no_new_privs (as runc does, with
//! CAP_SYS_ADMIN); as uid 65534 the kernel requires no_new_privs first.

use std::collections::BTreeMap;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output};

use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule,
};

use super::util::{available, cli, is_root, survivors, Ws};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Profile {
    /// Docker's / containerd's default profile as a container without
    /// CAP_SYS_ADMIN sees it (only the parts that concern portcullis).
    Container,
    /// Only `clone3` answers ENOSYS; namespaces stay allowed.
    Clone3Only,
}

/// The namespace flags Docker's profile masks in `clone`'s flags
/// (2114060288 = 0x7E020000).
const NS_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    libc::CLONE_NEWCGROUP as u64,
];

fn arch() -> seccompiler::TargetArch {
    std::env::consts::ARCH.try_into().unwrap_or_else(|e| panic!("seccompiler arch: {e:?}"))
}

fn compile(rules: BTreeMap<i64, Vec<SeccompRule>>, action: SeccompAction) -> BpfProgram {
    let f = SeccompFilter::new(rules, SeccompAction::Allow, action, arch()).unwrap_or_else(|e| panic!("filter: {e}"));
    BpfProgram::try_from(f).unwrap_or_else(|e| panic!("compile: {e}"))
}

/// The programs of `profile`, in installation order.
fn programs(profile: Profile) -> Vec<BpfProgram> {
    let enosys = compile([(libc::SYS_clone3, vec![])].into_iter().collect(), SeccompAction::Errno(libc::ENOSYS as u32));
    if profile == Profile::Clone3Only {
        return vec![enosys];
    }
    // clone: EPERM when any namespace flag is set (one rule per flag; rules
    // of a syscall are OR'ed).
    let clone_rules = NS_FLAGS
        .iter()
        .map(|f| {
            let c = SeccompCondition::new(0, SeccompCmpArgLen::Qword, SeccompCmpOp::MaskedEq(*f), *f)
                .unwrap_or_else(|e| panic!("condition: {e}"));
            SeccompRule::new(vec![c]).unwrap_or_else(|e| panic!("rule: {e}"))
        })
        .collect();
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = [
        libc::SYS_unshare,
        libc::SYS_setns,
        libc::SYS_mount,
        libc::SYS_umount2,
        libc::SYS_pivot_root,
        libc::SYS_open_tree,
        libc::SYS_move_mount,
        libc::SYS_fsopen,
        libc::SYS_fsconfig,
        libc::SYS_fsmount,
        libc::SYS_fspick,
        libc::SYS_mount_setattr,
        libc::SYS_sethostname,
        libc::SYS_setdomainname,
    ]
    .into_iter()
    .map(|nr| (nr, vec![]))
    .collect();
    rules.insert(libc::SYS_clone, clone_rules);
    vec![enosys, compile(rules, SeccompAction::Errno(libc::EPERM as u32))]
}

/// `cmd` with `profile` installed in the child before it execs.
pub(super) fn under(profile: Profile, mut cmd: Command) -> Command {
    let progs = programs(profile);
    let nnp = !is_root();
    // SAFETY: the closure runs between fork and exec in the child of a
    // multithreaded process, so it only makes async-signal-safe syscalls
    // (prctl, seccomp) on memory prepared before the fork; it allocates
    // nothing (the sock_fprog lives on the stack, io::Error from an errno
    // does not allocate).
    unsafe {
        cmd.pre_exec(move || {
            if nnp && libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            for p in &progs {
                let fprog =
                    libc::sock_fprog { len: p.len() as libc::c_ushort, filter: p.as_ptr() as *mut libc::sock_filter };
                // SECCOMP_SET_MODE_FILTER = 1, no flags.
                if libc::syscall(libc::SYS_seccomp, 1, 0, &fprog as *const libc::sock_fprog) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd
}

fn output(mut cmd: Command) -> Output {
    cmd.output().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `portcullis exec --json ARGS -- ARGV`, parsed.
fn exec_json(profile: Option<Profile>, args: &[&str], argv: &[&str]) -> (Output, serde_json::Value) {
    let mut cmd = cli();
    cmd.arg("exec").arg("--json").args(args).arg("--").args(argv);
    let out = output(match profile {
        Some(p) => under(p, cmd),
        None => cmd,
    });
    let v = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("json ({e}): {} / {}", text(&out.stdout), text(&out.stderr)));
    (out, v)
}

fn ws_arg(ws: &Ws) -> String {
    ws.path().display().to_string()
}

pub(super) fn landlock_only_available(test: &str) -> bool {
    available(test, portcullis::doctor_landlock_abi() >= 6, "the landlock-only mode needs Landlock ABI 6 (Linux 6.12)")
}

/// Python one-liner: try to create `path` for writing, print OK or the errno name.
fn try_write(path: &str) -> String {
    format!(
        "import errno\ntry:\n    open('{path}', 'w').write('x')\n    print('write OK')\nexcept OSError as e:\n    print('write', errno.errorcode[e.errno])"
    )
}

#[test]
fn r0070_container_profile_landlock_only_runs_confined() {
    if !landlock_only_available("r0070") {
        return;
    }
    let ws = Ws::new();
    let before = ws.snapshot();
    let w = ws_arg(&ws);
    let probe = try_write("f");
    // The command runs, as the caller's uid, and a write to the read-only
    // workspace is refused by Landlock with EACCES; nothing lands.
    let (out, v) = exec_json(
        Some(Profile::Container),
        &["--degraded", "landlock-only", "--workspace", &w],
        &["sh", "-c", &format!("echo ran; id -u; grep ^Cap /proc/self/status; /usr/bin/python3 -c \"{probe}\"")],
    );
    assert_eq!(v["outcome"]["code"], 0, "{v}\n{}", text(&out.stderr));
    let stdout = v["stdout"].as_str().unwrap_or_default().to_string();
    assert!(stdout.starts_with("ran\n"), "{stdout}");
    let uid = nix::unistd::getuid().as_raw().to_string();
    assert_eq!(stdout.lines().nth(1), Some(uid.as_str()), "{stdout}");
    assert!(stdout.contains("write EACCES"), "{stdout}");
    assert_eq!(v["enforcement"]["mode"], "landlock-only");
    assert_eq!(v["enforcement"]["clone"], "clone", "clone3 answers ENOSYS under the profile: {v}");
    // No capability after an execve (grep is one). As root the bounding set
    // is emptied too; an unprivileged caller cannot touch it (no
    // CAP_SETPCAP), and with no_new_privs it grants nothing.
    let caps: Vec<&str> = stdout.lines().filter(|l| l.starts_with("Cap")).collect();
    assert_eq!(caps.len(), 5, "{stdout}");
    for l in caps.iter().filter(|l| is_root() || !l.starts_with("CapBnd")) {
        assert!(l.ends_with("0000000000000000"), "a capability is left: {l}");
    }
    assert_eq!(ws.snapshot(), before, "the read-only workspace changed");

    // CONTROL: the same write with --writable lands (the command and the
    // probe work; the refusal above is the sandbox's). As root this is a
    // root-owned workspace written by a uid-0 command without capabilities.
    let (out, v) = exec_json(
        Some(Profile::Container),
        &["--degraded", "landlock-only", "--writable", "--workspace", &w],
        &["/usr/bin/python3", "-c", &probe],
    );
    assert_eq!(v["outcome"]["code"], 0, "{v}\n{}", text(&out.stderr));
    assert_eq!(v["stdout"], "write OK\n", "{v}");
    assert_eq!(ws.read("f"), "x");

    if is_root() {
        // Root's command holds no CAP_DAC_OVERRIDE: a mode-000 file in its
        // own (readable) workspace cannot be read. CONTROL: host root reads it.
        ws.write("locked", "secret\n");
        std::fs::set_permissions(ws.join("locked"), std::os::unix::fs::PermissionsExt::from_mode(0o000))
            .unwrap_or_else(|e| panic!("chmod: {e}"));
        assert_eq!(ws.read("locked"), "secret\n");
        let (_, v) = exec_json(
            Some(Profile::Container),
            &["--degraded", "landlock-only", "--workspace", &w],
            &["sh", "-c", "cat locked; echo rc=$?"],
        );
        let stderr = v["stderr"].as_str().unwrap_or_default();
        assert!(stderr.contains("Permission denied"), "{v}");
        assert!(v["stdout"].as_str().unwrap_or_default().contains("rc=1"), "{v}");
    }
}

#[test]
fn r0071_container_profile_timeout_kills_the_tree() {
    if !landlock_only_available("r0071") {
        return;
    }
    let ws = Ws::new();
    let w = ws_arg(&ws);
    let marker = format!("9{}.{}", std::process::id(), std::time::UNIX_EPOCH.elapsed().map_or(0, |d| d.subsec_nanos()));
    let script = format!("setsid sleep {marker} & echo $! > target/pid; (sleep {marker} &); sleep {marker}");
    let start = std::time::Instant::now();
    let (out, v) = exec_json(
        Some(Profile::Container),
        &["--degraded", "landlock-only", "--write", "target", "--timeout", "2", "--workspace", &w],
        &["sh", "-c", &script],
    );
    assert_eq!(out.status.code(), Some(124), "{v}\n{}", text(&out.stderr));
    assert_eq!(v["outcome"]["kind"], "timed-out", "{v}");
    assert!(start.elapsed() < std::time::Duration::from_secs(30));
    // CONTROL: the tree was started (the background sleeper's pid landed).
    let pid = ws.read("target/pid");
    assert!(pid.trim().parse::<u32>().is_ok(), "the command did not start its tree: {pid:?}");
    // Nothing of it survives: no sleeper with the marker anywhere on the host.
    let left = survivors(&marker);
    assert!(left.is_empty(), "survivors of the timeout: {left:?}");
}

#[test]
fn r0072_container_profile_refuses_the_full_sandbox_in_one_line() {
    // CONTROL 1: the filter reproduces the profile: `unshare -U` works
    // without it and fails with EPERM under it.
    if Path::new("/usr/bin/unshare").exists() {
        let bare = output({
            let mut c = Command::new("/usr/bin/unshare");
            c.args(["-U", "true"]);
            c
        });
        assert!(bare.status.success(), "unshare -U without the filter: {}", text(&bare.stderr));
        let filtered = output(under(Profile::Container, {
            let mut c = Command::new("/usr/bin/unshare");
            c.args(["-U", "true"]);
            c
        }));
        assert!(!filtered.status.success());
        assert!(text(&filtered.stderr).contains("Operation not permitted"), "{}", text(&filtered.stderr));
    }
    // CONTROL 2: without the filter the full sandbox runs the command.
    let ok = Ws::new();
    let mut cmd = cli();
    cmd.args(["exec", "--writable", "--workspace"]).arg(ok.path()).args(["--", "sh", "-c", "echo x > ran"]);
    let out = output(cmd);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(ok.read("ran"), "x\n");

    // Under the profile: refused before the command runs, with the reason
    // and the way out on one line.
    let ws = Ws::new();
    let mut cmd = cli();
    cmd.args(["exec", "--writable", "--workspace"]).arg(ws.path()).args(["--", "sh", "-c", "echo x > ran"]);
    let out = output(under(Profile::Container, cmd));
    assert_eq!(out.status.code(), Some(125), "{}", text(&out.stderr));
    let stderr = text(&out.stderr);
    eprintln!("under the container profile: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "not one line: {stderr}");
    for want in [
        "portcullis: the full sandbox cannot run: user namespaces are blocked here: clone(CLONE_NEWUSER",
        "after clone3 answered ENOSYS",
        "failed with EPERM",
        "seccomp",
        "--degraded landlock-only",
        "docs/deployment.md",
    ] {
        assert!(stderr.contains(want), "{want:?} missing from: {stderr}");
    }
    assert!(!ws.join("ran").exists(), "the command ran");
    // The same with --json.
    let (out, v) = exec_json(Some(Profile::Container), &["--workspace", &ws_arg(&ws)], &["true"]);
    assert_eq!(out.status.code(), Some(125));
    let msg = v["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.starts_with("the full sandbox cannot run: user namespaces are blocked here"), "{v}");
}

#[test]
fn r0073_doctor_under_container_profile_names_the_mode_that_works() {
    // CONTROL: on this host, without the filter, the full sandbox works.
    let mut cmd = cli();
    cmd.arg("doctor");
    let out = output(cmd);
    let report = text(&out.stdout);
    assert!(out.status.success(), "{report}\n{}", text(&out.stderr));
    assert!(report.contains("user namespaces   ok"), "{report}");
    assert!(report.contains("works here        the full sandbox"), "{report}");

    let mut cmd = cli();
    cmd.arg("doctor");
    let out = output(under(Profile::Container, cmd));
    let report = text(&out.stdout);
    eprintln!("doctor under the container profile:\n{report}");
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(!report.contains("user namespaces   ok"), "{report}");
    let line = report.lines().find(|l| l.starts_with("user namespaces")).unwrap_or_default();
    assert!(line.contains("MISSING user namespaces are blocked here: clone(CLONE_NEWUSER"), "{line}");
    assert!(line.contains("EPERM") && line.contains("--degraded landlock-only"), "{line}");
    assert!(report.contains("  no  full sandbox: does not work here: the full sandbox cannot run"), "{report}");
    if portcullis::doctor_landlock_abi() >= 6 {
        assert!(
            report.contains("  yes degraded mode landlock-only (opt-in, --degraded landlock-only): works here"),
            "{report}"
        );
        assert!(report.contains("works here        --degraded landlock-only"), "{report}");
        assert!(report.contains("pid 1 made with clone (clone3 answers ENOSYS"), "{report}");
    }
    let mut cmd = cli();
    cmd.args(["doctor", "--json"]);
    let out = output(under(Profile::Container, cmd));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("json: {e}"));
    assert_eq!(v["user_namespaces"]["ok"], false, "{v}");
    if portcullis::doctor_landlock_abi() >= 6 {
        assert_eq!(v["works_here"], "landlock-only", "{v}");
    }
}

#[test]
fn r0074_without_clone3_the_full_sandbox_falls_back_to_clone() {
    let ws = Ws::new();
    let before = ws.snapshot();
    let w = ws_arg(&ws);
    let probe = try_write("f");
    let argv = ["sh", "-c", &format!("/usr/bin/python3 -c \"{probe}\"; grep '^0::' /proc/self/cgroup")];
    // CONTROL: without the filter pid 1 is made with clone3.
    let (out, v) = exec_json(None, &["--workspace", &w], &argv);
    assert_eq!(v["outcome"]["code"], 0, "{v}\n{}", text(&out.stderr));
    assert_eq!(v["enforcement"]["clone"], "clone3", "{v}");
    let control_stdout = v["stdout"].as_str().unwrap_or_default().to_string();
    assert!(control_stdout.contains("write EROFS"), "{v}");

    // Under a filter that answers only clone3 with ENOSYS: the full sandbox
    // still runs (the clone fallback), with the same refusal.
    let (out, v) = exec_json(Some(Profile::Clone3Only), &["--workspace", &w], &argv);
    assert_eq!(v["outcome"]["code"], 0, "{v}\n{}", text(&out.stderr));
    assert_eq!(v["enforcement"]["clone"], "clone", "{v}");
    assert_eq!(v["enforcement"]["mode"], "full");
    let stdout = v["stdout"].as_str().unwrap_or_default();
    assert!(stdout.contains("write EROFS"), "{v}");
    assert_eq!(ws.snapshot(), before, "the read-only workspace changed");
    if v["enforcement"]["kill_mechanism"] == "cgroup-kill" {
        // Joined through cgroup.procs: the command runs in the per-command leaf.
        let leaf = stdout.lines().find(|l| l.starts_with("0::")).unwrap_or_default();
        assert!(leaf.rsplit('/').next().unwrap_or_default().starts_with("portcullis-"), "not in its leaf: {stdout}");
        assert!(control_stdout.contains("/portcullis-"), "{control_stdout}");
    }

    // The tree is killed on timeout on the fallback path too.
    let marker = format!("8{}.{}", std::process::id(), std::time::UNIX_EPOCH.elapsed().map_or(0, |d| d.subsec_nanos()));
    let script = format!("setsid sleep {marker} & echo $! > /tmp/pid; cat /tmp/pid; sleep {marker}");
    let (out, v) = exec_json(Some(Profile::Clone3Only), &["--timeout", "2", "--workspace", &w], &["sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(124), "{v}");
    assert!(v["stdout"].as_str().unwrap_or_default().trim().parse::<u32>().is_ok(), "the tree did not start: {v}");
    let left = survivors(&marker);
    assert!(left.is_empty(), "survivors of the timeout: {left:?}");
}

#[test]
fn r0075_without_clone3_pre_made_and_prepared_slots_run_the_same_sandbox() {
    // `portcullis serve` under a filter that answers `clone3` with ENOSYS:
    // its slots are made with the `clone` fallback, and once a command has
    // run, one is prepared for that shape (its own mounts, Landlock and
    // seccomp done ahead). Several commands then run in slots, a plain one
    // and prepared ones: every write lands in the (writable) workspace and
    // every command runs confined (the CONTROL: the same calls without the
    // filter).
    use super::mcp_server::{Serve, POLICY};
    use serde_json::json;
    for profile in [None, Some(Profile::Clone3Only)] {
        let ws = Ws::new();
        let policy = ws.path().with_extension("policy.toml");
        std::fs::write(&policy, POLICY).unwrap_or_else(|e| panic!("policy: {e}"));
        let mut cmd = cli();
        cmd.arg("serve").arg("--workspace").arg(ws.path()).arg("--policy").arg(&policy);
        let mut s = Serve::spawn(match profile {
            Some(p) => under(p, cmd),
            None => cmd,
        });
        for i in 0..4 {
            let id = i64::from(i) + 1;
            if i == 1 {
                // The pool made at the server's start is all plain; the
                // first slot taken is replaced by a prepared one.
                std::thread::sleep(std::time::Duration::from_millis(300));
            }
            if i > 1 && is_root() {
                // As root the filter comes without no_new_privs: a process
                // of the server's with it is a prepared slot's command,
                // confined and waiting.
                let prepared = (0..300).any(|_| {
                    let found = super::util::descendants(s.child.id()).iter().any(|p| {
                        std::fs::read_to_string(format!("/proc/{p}/status")).is_ok_and(|t| t.contains("NoNewPrivs:\t1"))
                    });
                    if !found {
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                    found
                });
                assert!(prepared, "{profile:?} call {i}: no prepared slot");
            }
            s.call(id, "run_shell", json!({"command": format!("echo {i} > f{i} && cat f{i} /proc/self/status")}));
            let r = s.structured(id);
            let out = r["stdout"].as_str().unwrap_or_default();
            assert!(out.starts_with(&format!("{i}\n")), "{profile:?} call {i}: {r}");
            // Confined as a fresh sandbox's command is: no capability,
            // no_new_privs, a seccomp filter.
            for want in ["CapEff:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"] {
                assert!(out.contains(want), "{profile:?} call {i}: no {want:?}: {out}");
            }
            assert_eq!(std::fs::read_to_string(ws.path().join(format!("f{i}"))).ok(), Some(format!("{i}\n")));
        }
        s.close();
        let st = s.exit_within(std::time::Duration::from_secs(10)).unwrap_or_else(|| panic!("no exit at EOF"));
        assert!(st.success(), "{profile:?}: {st}");
    }
}
