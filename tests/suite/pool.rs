//! Pre-made sandboxes (issue 12): a `Sandbox` with a pool runs a command
//! whose plan a slot admits in a slot made ahead, with every property of a
//! fresh sandbox; a slot runs once; a dropped pool leaves nothing.

use std::collections::BTreeSet;
use std::time::Duration;

use portcullis::sandbox::{ExecRequest, Outcome, RunOptions, Sandbox};
use portcullis_helper::spec::MountOp;
use serde_json::json;

use super::mcp_server::Serve;
use super::util::*;

fn pooled(size: usize) -> Sandbox {
    sandbox().with_pool(size)
}

/// Wait until the pool has `n` slots ready (slots are made on threads of
/// their own), at most 10 s.
fn await_ready(sb: &Sandbox, n: usize) {
    if !await_status(sb, |s| s.ready >= n) {
        panic!("the pool never had {n} slots ready: {:?}", sb.pool_status());
    }
}

/// A pool of `n` that has learned its base from a first run of `/bin/true`
/// in `ws` (a first run finds the pool empty) and has `n` slots ready.
fn primed(test: &str, ws: &Ws, n: usize) -> (Sandbox, tokio::runtime::Runtime) {
    let (sb, rt) = (pooled(n), rt());
    let first = rt.block_on(sb.run(&ws.req(&["/bin/true"]), RunOptions::default()));
    assert!(first.is_ok_and(|r| r.outcome == Outcome::Exited { code: 0 }), "{test}: first run");
    await_ready(&sb, n);
    (sb, rt)
}

/// Whether the caller is root; if not, says on stderr that `test` runs as
/// root only, and `why`.
fn root_only(test: &str, why: &str) -> bool {
    if is_root() {
        return true;
    }
    eprintln!("{test}: root only ({why})");
    false
}

/// Whether the pool's status came to satisfy `ok` within 10 s.
fn await_status(sb: &Sandbox, ok: impl Fn(&portcullis::sandbox::PoolStatus) -> bool) -> bool {
    for _ in 0..1000 {
        if sb.pool_status().is_some_and(|s| ok(&s)) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    false
}

#[test]
fn r0820_pooled_runs_are_sandboxed_like_fresh_ones() {
    let test = "r0820";
    let ws = Ws::new();
    let (sb, rt) = primed(test, &ws, 2);
    let status = sb.pool_status();
    for i in 0..6 {
        let r = rt
            .block_on(sb.run(&ws.req(&["/bin/sh", "-c", "echo hi; echo x > probe; echo $?"]), RunOptions::default()))
            .unwrap_or_else(|e| panic!("{test}: run {i}: {}", portcullis::error_chain(&e)));
        assert_eq!(stdout(&r), "hi\n2\n", "{test}: run {i}: {r:?}");
        assert!(stderr(&r).contains("Read-only file system"), "{test}: run {i}: {}", stderr(&r));
        await_ready(&sb, 2);
    }
    let after = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
    let before = status.map(|s| s.taken).unwrap_or(0);
    assert_eq!(after.taken - before, 6, "{test}: every run took a slot: {after:?}");
    assert!(!ws.join("probe").exists(), "{test}: the write landed");
    assert!(after.off.is_none(), "{test}: {after:?}");
    // The refused write was observed in the slot as in a fresh sandbox.
    let r = rt
        .block_on(sb.run(&ws.req(&["/bin/sh", "-c", "echo x > probe2"]), RunOptions::default()))
        .unwrap_or_else(|e| panic!("{test}: {}", portcullis::error_chain(&e)));
    assert_eq!(observed(&r).count, 1, "{test}: {:?}", r.refused_writes);
    // CONTROL: a write grant works through a slot (the grant is the
    // request's own mount), and the file lands on the host.
    let mut req = ws.req(&["/bin/sh", "-c", "echo y > target/out"]);
    req.write = vec!["target".into()];
    await_ready(&sb, 2);
    let taken = sb.pool_status().map(|s| s.taken).unwrap_or(0);
    let r = rt.block_on(sb.run(&req, RunOptions::default())).unwrap_or_else(|e| panic!("{test}: {e}"));
    assert_eq!(r.outcome, Outcome::Exited { code: 0 }, "{test}: {}", stderr(&r));
    assert_eq!(ws.read("target/out"), "y\n", "{test}");
    assert_eq!(sb.pool_status().map(|s| s.taken), Some(taken + 1), "{test}: the writable run took a slot");
}

/// The mounts a command sees, as `root mount-point options - fstype source
/// super-options` lines (mountinfo without the ids and device numbers),
/// sorted.
fn mount_table(rt: &tokio::runtime::Runtime, sb: &Sandbox, ws: &Ws, late: bool, test: &str) -> Vec<String> {
    let mut req = ws.req(&["/bin/sh", "-c", "cat /proc/self/mountinfo"]);
    req.test_switches.slot_pivot_late = late;
    let r = rt.block_on(sb.run(&req, RunOptions::default())).unwrap_or_else(|e| panic!("{test}: {e}"));
    assert_eq!(r.outcome, Outcome::Exited { code: 0 }, "{test}: {}", stderr(&r));
    let ws_real = ws.path().canonicalize().unwrap_or_else(|e| panic!("{test}: {e}"));
    let mut lines: Vec<String> = stdout(&r)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-")?;
            let ws = ws_real.to_str()?;
            let (root, point, opts) = (f.get(3)?.replace(ws, "WS"), f.get(4)?.replace(ws, "WS"), f.get(5)?);
            let (fstype, source, sopts) = (f.get(sep + 1)?, f.get(sep + 2)?, f.get(sep + 3)?);
            Some(format!("{root} {point} {opts} - {fstype} {source} {sopts}"))
        })
        .collect();
    lines.sort();
    lines
}

#[test]
fn r0828_a_slot_that_pivoted_ahead_holds_the_same_mounts_as_a_fresh_sandbox() {
    let test = "r0828";
    let ws = Ws::new();
    let rt = rt();
    // CONTROL: a fresh helper's table (no pool), which holds the workspace.
    let fresh = mount_table(&rt, &sandbox().with_pool(0), &ws, false, test);
    assert!(fresh.iter().any(|l| l.split(' ').nth(1) == Some("WS")), "{test}: no workspace mount in {fresh:?}");
    // The host's own mounts that no plan binds (its /sys, say) are in
    // neither: the old root is gone in both.
    let host = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    assert!(host.lines().any(|l| l.split(' ').nth(4) == Some("/sys")), "{test}: the host has no /sys mount");
    assert!(!fresh.iter().any(|l| l.split(' ').nth(1) == Some("/sys")), "{test}: {fresh:?}");
    for late in [false, true] {
        let sb = pooled(1);
        // The first run learns the base; the second takes a slot.
        let _ = mount_table(&rt, &sb, &ws, late, test);
        await_ready(&sb, 1);
        let taken = sb.pool_status().map(|s| s.taken).unwrap_or(0);
        let pooled_table = mount_table(&rt, &sb, &ws, late, test);
        assert_eq!(sb.pool_status().map(|s| s.taken), Some(taken + 1), "{test}: the run took no slot (late {late})");
        assert_eq!(pooled_table, fresh, "{test}: a slot's mounts (pivot late: {late}) differ from a fresh sandbox's");
    }
}

/// The descriptors of `pid` that refer to the host's root directory (the
/// same device and inode as this process's `/`).
fn fds_on_host_root(pid: &str) -> Vec<String> {
    use std::os::unix::fs::MetadataExt;
    let Ok(root) = std::fs::metadata("/") else { return vec!["cannot stat /".into()] };
    let dir = format!("/proc/{pid}/fd");
    std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|f| std::fs::metadata(f.path()).is_ok_and(|m| m.dev() == root.dev() && m.ino() == root.ino()))
        .map(|f| f.file_name().to_string_lossy().into_owned())
        .collect()
}

/// The descriptors queued unread on the sockets `pid` holds that are the
/// host's root, as the socket's reader would get them (each socket taken
/// with `pidfd_getfd` and its first message peeked at: nothing is
/// consumed), and each socket that could not be taken. A copy of the
/// host's tree waiting in a socket is in no `/proc/PID/fd` entry.
fn queued_on_host_root(pid: &str) -> Vec<String> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::fs::MetadataExt;
    let Ok(root) = std::fs::metadata("/") else { return vec!["cannot stat /".into()] };
    let Ok(n) = pid.parse::<libc::pid_t>() else { return Vec::new() };
    // SAFETY: pidfd_open takes no pointers; a descriptor it returns is ours.
    let raw = unsafe { libc::syscall(libc::SYS_pidfd_open, n, 0) };
    if raw < 0 {
        return Vec::new();
    }
    // SAFETY: a fresh descriptor owned by nobody else.
    let pidfd = unsafe { OwnedFd::from_raw_fd(raw as i32) };
    let mut found = Vec::new();
    for e in std::fs::read_dir(format!("/proc/{pid}/fd")).into_iter().flatten().flatten() {
        let is_socket = std::fs::read_link(e.path()).is_ok_and(|l| l.to_string_lossy().starts_with("socket:"));
        let Some(target) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        if !is_socket {
            continue;
        }
        // SAFETY: pidfd_getfd copies the target's descriptor into our table.
        let got = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), target, 0) };
        if got < 0 {
            // Not looked at is not seen clean (a process that went is, and
            // its socket with it).
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ESRCH) && e.raw_os_error() != Some(libc::EBADF) {
                found.push(format!("socket on fd {target} not inspected: {e}"));
            }
            continue;
        }
        // SAFETY: a fresh descriptor owned by nobody else.
        let sock = unsafe { OwnedFd::from_raw_fd(got as i32) };
        let mut buf = [0u8; 64];
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        let mut space = nix::cmsg_space!([std::os::fd::RawFd; 16]);
        let flags = MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC;
        let Ok(msg) = recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut space), flags) else { continue };
        for c in msg.cmsgs().into_iter().flatten() {
            if let ControlMessageOwned::ScmRights(fds) = c {
                for fd in fds {
                    // SAFETY: SCM_RIGHTS installed it in our table.
                    let f = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
                    if f.metadata().is_ok_and(|m| m.dev() == root.dev() && m.ino() == root.ino()) {
                        found.push(format!("queued on fd {target}"));
                    }
                }
            }
        }
    }
    found
}

#[test]
fn r0829_no_process_of_a_running_slot_holds_the_host_tree() {
    let test = "r0829";
    // A slot's pid 1 is non-dumpable: only root can read its descriptors
    // from outside.
    if !root_only(test, "pid 1's descriptors are unreadable to uid 65534, by design") {
        return;
    }
    // CONTROL: the check finds a descriptor on the host's root.
    let own = std::fs::File::open("/").unwrap_or_else(|e| panic!("{test}: {e}"));
    let me = std::process::id().to_string();
    assert!(!fds_on_host_root(&me).is_empty(), "{test}: control: our own fd on / is not seen");
    // CONTROL: and one queued, unread, on a socket of ours.
    {
        use std::os::fd::AsRawFd;
        let (a, b) = nix::sys::socket::socketpair(
            nix::sys::socket::AddressFamily::Unix,
            nix::sys::socket::SockType::SeqPacket,
            None,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        )
        .unwrap_or_else(|e| panic!("{test}: {e}"));
        let fds = [own.as_raw_fd()];
        let cmsg = [nix::sys::socket::ControlMessage::ScmRights(&fds)];
        let iov = [std::io::IoSlice::new(b"h")];
        nix::sys::socket::sendmsg::<()>(a.as_raw_fd(), &iov, &cmsg, nix::sys::socket::MsgFlags::empty(), None)
            .unwrap_or_else(|e| panic!("{test}: {e}"));
        drop(own);
        assert!(!queued_on_host_root(&me).is_empty(), "{test}: control: a queued fd on / is not seen");
        drop((a, b));
    }
    let ws = Ws::new();
    let rt = rt();
    let sb = pooled(1);
    let _ = rt.block_on(sb.run(&ws.req(&["/bin/true"]), RunOptions::default()));
    await_ready(&sb, 1);
    let taken = sb.pool_status().map(|s| s.taken).unwrap_or(0);
    let look = std::thread::spawn(move || {
        // While the command sleeps: every pid 1 of ours whose command has
        // started, and that command (an idle slot's command-to-be, forked
        // ahead and still named portcullis-init, holds the copy for its
        // request).
        std::thread::sleep(Duration::from_millis(400));
        let comm_of = |pid: &str| std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        let mut seen = Vec::new();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let pid = e.file_name().to_string_lossy().into_owned();
            let comm = comm_of(&pid);
            let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
            let started = children.split_whitespace().any(|c| comm_of(c).trim() != "portcullis-init");
            if comm.trim() == "portcullis-init" && started {
                seen.push((pid.clone(), [fds_on_host_root(&pid), queued_on_host_root(&pid)].concat()));
                for child in children.split_whitespace() {
                    seen.push((child.to_string(), [fds_on_host_root(child), queued_on_host_root(child)].concat()));
                }
            }
        }
        seen
    });
    let r = rt
        .block_on(sb.run(&ws.req(&["/bin/sleep", "1"]), RunOptions::default()))
        .unwrap_or_else(|e| panic!("{test}: {e}"));
    let seen = look.join().unwrap_or_else(|_| panic!("{test}: the look panicked"));
    assert_eq!(r.outcome, Outcome::Exited { code: 0 }, "{test}: {}", stderr(&r));
    assert_eq!(sb.pool_status().map(|s| s.taken), Some(taken + 1), "{test}: the run took no slot");
    assert!(!seen.is_empty(), "{test}: no running pid 1 was found");
    for (pid, fds) in &seen {
        assert!(fds.is_empty(), "{test}: process {pid} of a running sandbox holds the host's tree on fd {fds:?}");
    }
}

/// The namespaces a command sees, from inside: `ns:inode` per kind.
const NS: &str = "for n in user mnt pid ipc uts net cgroup; do printf '%s ' $(readlink /proc/self/ns/$n); done; \
                  echo; ls /tmp; echo x > /tmp/left-by-an-earlier-run; ps -e -o pid= -o comm= 2>/dev/null | wc -l";

#[test]
fn r0821_every_slot_is_fresh_and_used_once() {
    let test = "r0821";
    let ws = Ws::new();
    let sb = pooled(3);
    let rt = rt();
    let _ = rt.block_on(sb.run(&ws.req(&["/bin/true"]), RunOptions::default()));
    let host: String = ["user", "mnt", "pid", "ipc", "uts", "net"]
        .iter()
        .map(|n| std::fs::read_link(format!("/proc/self/ns/{n}")).map(|l| l.display().to_string()).unwrap_or_default())
        .collect::<Vec<_>>()
        .join(" ");
    // Namespace inode numbers are recycled once a namespace is freed, and a
    // slot prepared for the runs' shape (taken first) is made after the
    // run before it has ended: one of its namespaces may get a number that
    // run's had. A slot used twice would show all six of them again.
    let mut previous: Vec<String> = Vec::new();
    for i in 0..6 {
        await_ready(&sb, 3);
        let r = rt
            .block_on(sb.run(&ws.req(&["/bin/sh", "-c", NS]), RunOptions::default()))
            .unwrap_or_else(|e| panic!("{test}: run {i}: {}", portcullis::error_chain(&e)));
        let out = stdout(&r);
        let mut lines = out.lines();
        let ns: Vec<&str> = lines.next().unwrap_or_default().split_whitespace().collect();
        assert_eq!(ns.len(), 7, "{test}: run {i}: {out}");
        for n in &ns[..6] {
            // Never the host's.
            assert!(!host.contains(n), "{test}: run {i}: {n} is the host's");
        }
        let now: Vec<String> = ns.iter().map(|n| n.to_string()).collect();
        assert!(previous.get(..6) != now.get(..6), "{test}: run {i}: the previous run's namespaces: {out}");
        previous = ns.iter().map(|n| n.to_string()).collect();
        // The private /tmp is empty: nothing of an earlier run is there.
        let rest: Vec<&str> = lines.collect();
        // pid 1, sh, ps and wc: nothing else runs in the slot.
        assert_eq!(rest, vec!["4"], "{test}: run {i}: /tmp held {rest:?} (or ps saw more)");
    }
    assert_eq!(sb.pool_status().map(|s| s.taken), Some(6), "{test}: {:?}", sb.pool_status());
}

fn alive(pids: &BTreeSet<u32>) -> Vec<u32> {
    let mut left: Vec<u32> =
        pids.iter().copied().filter(|p| std::path::Path::new(&format!("/proc/{p}")).exists()).collect();
    for _ in 0..100 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
        left.retain(|p| std::path::Path::new(&format!("/proc/{p}")).exists());
    }
    left
}

/// The slots a server keeps: its helper children started with `--slot`,
/// with their pid 1s.
fn slots_of(server: u32) -> BTreeSet<u32> {
    for _ in 0..500 {
        let d = descendants(server);
        let slots = d
            .iter()
            .filter(|p| {
                std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.windows(7).any(|w| w == b"\0--slot"))
            })
            .count();
        if slots >= 2 && d.len() >= 4 {
            return d;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the server {server} never had two pre-made sandboxes: {:?}", descendants(server));
}

#[test]
fn r0822_slots_die_with_the_workspace_and_with_its_process() {
    let test = "r0822";
    let ws = Ws::new();
    for kill in [false, true] {
        let mut s = Serve::start(&ws, &[]);
        s.call(1, "run_shell", json!({"command": "true"}));
        assert_eq!(s.structured(1)["exit_code"], 0, "{test}");
        let server = s.child.id();
        // CONTROL: the pool is there, from outside: two slots (each an outer
        // helper and its pid 1) waiting.
        let slots = slots_of(server);
        if kill {
            // The server gets no say: the lifeline and pid 1's parent-death
            // signal end every slot.
            let _ = s.child.kill();
            let _ = s.child.wait();
        } else {
            s.close();
            let st = s.exit_within(Duration::from_secs(10)).unwrap_or_else(|| panic!("{test}: no exit at EOF"));
            assert!(st.success(), "{test}: {st}");
        }
        assert_eq!(alive(&slots), Vec::<u32>::new(), "{test}: kill={kill}: slot processes left: {slots:?}");
    }
}

#[test]
fn r0823_a_run_no_slot_admits_runs_fresh_and_the_pool_follows() {
    let test = "r0823";
    let ws = Ws::new();
    let sb = pooled(2);
    let rt = rt();
    let run = |req: &ExecRequest, opts: RunOptions| {
        rt.block_on(sb.run(req, opts)).unwrap_or_else(|e| panic!("{test}: {}", portcullis::error_chain(&e)))
    };
    let _ = run(&ws.req(&["/bin/true"]), RunOptions::default());
    await_ready(&sb, 2);
    let before = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
    // The host's network: another base. It runs fresh (a miss) and works.
    let mut host = ws.req(&["/bin/sh", "-c", "readlink /proc/self/ns/net"]);
    host.network = portcullis::Network::Host;
    let r = run(&host, RunOptions::default());
    let host_net = std::fs::read_link("/proc/self/ns/net").map(|l| l.display().to_string()).unwrap_or_default();
    assert_eq!(stdout(&r).trim(), host_net, "{test}: the host network run did not get the host's network");
    let after = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
    assert_eq!((after.taken, after.missed), (before.taken, before.missed + 1), "{test}: {after:?}");
    // The pool now makes slots for the host network, and the next such run
    // takes one.
    await_ready(&sb, 2);
    let r = run(&host, RunOptions::default());
    assert_eq!(stdout(&r).trim(), host_net, "{test}");
    assert_eq!(sb.pool_status().map(|s| s.taken), Some(after.taken + 1), "{test}");
    // A run with stdin copied never takes a slot (its stdin is /dev/null).
    let mut copy = ws.req(&["/bin/true"]);
    copy.network = portcullis::Network::Host;
    let opts = RunOptions { stdin: portcullis::sandbox::Stdin::Copy, ..RunOptions::default() };
    let taken = sb.pool_status().map(|s| s.taken);
    let r = run(&copy, opts);
    assert_eq!(r.outcome, Outcome::Exited { code: 0 }, "{test}");
    assert_eq!(sb.pool_status().map(|s| s.taken), taken, "{test}: a stdin-copying run took a slot");
}

#[test]
fn r0824_a_pool_whose_slots_fail_turns_itself_off_and_runs_go_on() {
    let test = "r0824";
    let ws = Ws::new();
    // A helper that refuses to make slots but runs commands (and refuses
    // to be a zygote, whose children would be the real helper's: runs
    // then spawn it, after the zygote's failures).
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{test}: {e}"));
    let wrapper = dir.path().join("portcullis-helper");
    let real = bin_dir().join("portcullis-helper");
    let script =
        format!("#!/bin/sh\ncase \"$1\" in --slot|--zygote) exit 125;; esac\nexec {} \"$@\"\n", real.display());
    std::fs::write(&wrapper, script).unwrap_or_else(|e| panic!("{test}: {e}"));
    let mut perm = std::fs::metadata(&wrapper).map(|m| m.permissions()).unwrap_or_else(|e| panic!("{test}: {e}"));
    std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
    std::fs::set_permissions(&wrapper, perm).unwrap_or_else(|e| panic!("{test}: {e}"));
    let sb = Sandbox::with_helper(wrapper).with_pool(2);
    let rt = rt();
    let mut off = None;
    for i in 0..20 {
        let r = rt.block_on(sb.run(&ws.req(&["/bin/sh", "-c", "echo ok"]), RunOptions::default()));
        let r = r.unwrap_or_else(|e| panic!("{test}: run {i}: {}", portcullis::error_chain(&e)));
        assert_eq!(stdout(&r), "ok\n", "{test}: run {i}");
        off = sb.pool_status().and_then(|s| s.off);
        if off.is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let off = off.unwrap_or_else(|| panic!("{test}: the pool never turned off: {:?}", sb.pool_status()));
    assert!(off.contains("pre-made sandbox"), "{test}: {off}");
    assert_eq!(sb.pool_status().map(|s| s.taken), Some(0), "{test}");
}

#[test]
fn r0825_a_timed_out_command_in_a_slot_dies_with_its_tree() {
    let test = "r0825";
    let ws = Ws::new();
    let sb = pooled(1);
    let rt = rt();
    let _ = rt.block_on(sb.run(&ws.req(&["/bin/true"]), RunOptions::default()));
    await_ready(&sb, 1);
    let m = "31.4159";
    let mut req = ws.req(&["/bin/sh", "-c", &format!("setsid sleep {m} & sleep {m}")]);
    req.timeout = Some(Duration::from_millis(300));
    let r = rt.block_on(sb.run(&req, RunOptions::default())).unwrap_or_else(|e| panic!("{test}: {e}"));
    assert_eq!(r.outcome, Outcome::TimedOut, "{test}");
    assert_eq!(sb.pool_status().map(|s| s.taken), Some(1), "{test}: the run did not take the slot");
    assert_eq!(survivors(&format!("sleep {m}")), Vec::<String>::new(), "{test}: the tree survived");
}

#[test]
fn r0826_a_workspace_makes_its_slots_before_its_first_command() {
    let test = "r0826";
    let ws = Ws::new();
    let text = "[shell]\ninterpreter = \"sh\"\nallow = [\"echo\"]\n";
    let mut policy = portcullis::policy::WorkspacePolicy::from_toml(text).unwrap_or_else(|e| panic!("{test}: {e}"));
    policy.workspace = Some(ws.path().to_path_buf());
    // A sandbox of its own (not the suite's shared one under
    // PORTCULLIS_TEST_POOL): the workspace makes its pool from the policy.
    let own = |policy: portcullis::policy::WorkspacePolicy| {
        portcullis::workspace::Workspace::builder()
            .policy(policy)
            .sandbox(Sandbox::with_helper(bin_dir().join("portcullis-helper")))
            .build()
            .unwrap_or_else(|e| panic!("{test}: {}", portcullis::error_chain(&e)))
    };
    let w = own(policy.clone());
    let ready = |w: &portcullis::workspace::Workspace| {
        for _ in 0..1000 {
            if w.pool_status().is_some_and(|s| s.ready == 2) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    };
    assert!(ready(&w), "{test}: no slot before the first command: {:?}", w.pool_status());
    let rt = rt();
    rt.block_on(async {
        match w.exec("echo first", portcullis::runner::ExecOptions::default()).await {
            Ok(portcullis::runner::Exec::Ran(r)) => assert_eq!(r.result.stdout, b"first\n", "{test}"),
            other => panic!("{test}: {other:?}"),
        }
    });
    assert_eq!(w.pool_status().map(|s| (s.taken, s.missed)), Some((1, 0)), "{test}: the first command missed");
    rt.block_on(w.dispose());
    // `pool = 0`: none.
    policy.pool = Some(0);
    let w = own(policy);
    assert_eq!(w.pool_status(), None, "{test}: pool = 0 made a pool");
}

/// Drive `portcullis-helper --slot` by hand: the slot spec, the `k`, then
/// `spec`; returns the command's stdout and the report's records.
fn slot_by_hand(
    slot: &portcullis_helper::spec::SlotSpec,
    spec: &portcullis_helper::spec::SpawnSpec,
) -> (String, Vec<u8>) {
    use nix::sys::socket::{sendmsg, socketpair, AddressFamily, ControlMessage, MsgFlags, SockFlag, SockType};
    use std::io::{IoSlice, Read};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::process::CommandExt;
    let (ours, theirs) = socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC)
        .unwrap_or_else(|e| panic!("socketpair: {e}"));
    let (report_r, report_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap_or_else(|e| panic!("{e}"));
    let (life_r, life_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap_or_else(|e| panic!("{e}"));
    let send = |tag: u8, json: Vec<u8>| {
        // SAFETY: memfd_create with a static name.
        let raw = unsafe { libc::memfd_create(c"t".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(raw >= 0, "memfd_create: {}", std::io::Error::last_os_error());
        // SAFETY: a fresh fd, owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let mut file = std::fs::File::from(fd);
        std::io::Write::write_all(&mut file, &json).unwrap_or_else(|e| panic!("memfd: {e}"));
        let fd = OwnedFd::from(file);
        let fds = [fd.as_raw_fd()];
        sendmsg::<()>(
            ours.as_raw_fd(),
            &[IoSlice::new(&[tag])],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::empty(),
            None,
        )
        .unwrap_or_else(|e| panic!("sendmsg: {e}"));
    };
    send(b's', serde_json::to_vec(slot).unwrap_or_default());
    let (a, b, c) = (theirs.as_raw_fd(), report_w.as_raw_fd(), life_r.as_raw_fd());
    let mut cmd = std::process::Command::new(bin_dir().join("portcullis-helper"));
    cmd.arg("--slot").env_clear().stdin(std::process::Stdio::null()).stdout(std::process::Stdio::piped());
    // SAFETY: only dup2 between fork and exec (async-signal-safe).
    unsafe {
        cmd.pre_exec(move || {
            for (src, dst) in [(a, 3), (b, 4), (c, 5)] {
                if libc::dup2(src, dst) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("helper: {e}"));
    drop((theirs, report_w, life_r));
    let mut k = [0u8; 1];
    let got = nix::sys::socket::recv(ours.as_raw_fd(), &mut k, MsgFlags::empty()).unwrap_or(0);
    assert_eq!((got, k[0]), (1, b'k'), "the slot never said it was built");
    send(b'r', serde_json::to_vec(spec).unwrap_or_default());
    let mut out = String::new();
    let _ = child.stdout.take().map(|mut o| o.read_to_string(&mut out));
    let _ = child.wait();
    drop(life_w);
    let mut records = Vec::new();
    // SAFETY: report_r is ours, owned here.
    let _ = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(std::os::fd::IntoRawFd::into_raw_fd(report_r)) })
        .read_to_end(&mut records);
    (out, records)
}

#[test]
fn r0827_the_helper_itself_refuses_a_spec_its_slot_does_not_fit() {
    let test = "r0827";
    let ws = Ws::new();
    let sb = sandbox();
    let plan = |network| {
        let mut req = ws.req(&["/bin/sh", "-c", "echo ran"]);
        req.network = network;
        req.report_refused_writes = false;
        sb.plan(&req).unwrap_or_else(|e| panic!("{test}: plan: {e}")).spec
    };
    let spec = plan(portcullis::Network::None);
    // A slot making only the fresh filesystems ahead (a valid base).
    let slot = portcullis_helper::spec::SlotSpec {
        version: spec.version,
        identity: spec.identity,
        network: spec.network,
        netns: spec.netns,
        mounts: spec
            .mounts
            .iter()
            .filter(|m| matches!(m, MountOp::Tmpfs { .. } | MountOp::Proc { .. } | MountOp::Devpts { .. }))
            .cloned()
            .collect(),
        cgroup: false,
        test_switches: spec.test_switches,
    };
    let mut spec = spec;
    spec.cgroup = false;
    // This driver sends no idmapped trees (the library makes them for a
    // root caller), and a slot refuses a spec whose idmapped binds came
    // without theirs: the binds are made as they are on the host.
    for m in &mut spec.mounts {
        if let MountOp::Bind { idmap, .. } = m {
            *idmap = false;
        }
    }
    // CONTROL: the spec it fits runs.
    let (out, _) = slot_by_hand(&slot, &spec);
    assert_eq!(out, "ran\n", "{test}: control");
    // The host's network: another slot's spec. Nothing runs; the report
    // says the spec was refused.
    let mut other = plan(portcullis::Network::Host);
    other.cgroup = false;
    assert!(slot.admits(&other).is_err(), "{test}: the library's check would admit it");
    let (out, records) = slot_by_hand(&slot, &other);
    assert_eq!(out, "", "{test}: the misfit ran");
    refused_under_read_spec(test, &records);
    // An idmapped bind whose tree did not come with the request (found in
    // review: it was made from the host's path without its idmap).
    let mut missing = spec.clone();
    if let Some(MountOp::Bind { idmap, .. }) = missing.mounts.iter_mut().find(|m| matches!(m, MountOp::Bind { .. })) {
        *idmap = true;
    }
    let (out, records) = slot_by_hand(&slot, &missing);
    assert_eq!(out, "", "{test}: a request without its idmapped tree ran");
    refused_under_read_spec(test, &records);
}

/// The first record says `ReadSpec` refused the request with `EINVAL`.
fn refused_under_read_spec(test: &str, records: &[u8]) {
    let first: [u8; 16] =
        records.get(..16).and_then(|r| r.try_into().ok()).unwrap_or_else(|| panic!("{test}: no record: {records:?}"));
    match portcullis_helper::report::Record::decode(&first) {
        Some(portcullis_helper::report::Record::Error { step, errno, .. }) => {
            assert_eq!((step, errno), (Ok(portcullis_helper::report::Step::ReadSpec), libc::EINVAL), "{test}");
        }
        other => panic!("{test}: {other:?}"),
    }
}

/// The `SigIgn` and `SigCgt` masks of a `status` file's text.
fn signal_masks(status: &str) -> (u64, u64) {
    let mask = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .unwrap_or_else(|| panic!("no {key} in {status}"))
    };
    (mask("SigIgn:"), mask("SigCgt:"))
}

#[test]
fn r0831_a_command_starts_with_every_signal_at_its_default() {
    // Found in review: glibc's posix_spawn (the library's launch) leaves its
    // two reserved signals (32, 33) ignored in the helper, the C library's
    // signal() refuses to change them, and an ignored signal survives exec:
    // every command of a glibc-built library ran with them ignored.
    let test = "r0831";
    let ws = Ws::new();
    let rt = rt();
    // CONTROL: a process this test starts the same way (posix_spawn with
    // every signal at its default, as the library starts the helper) is
    // what a command inherits without the reset; with glibc it ignores
    // 32 and 33, with musl nothing: printed, not asserted.
    let child = std::process::Command::new("/bin/cat").arg("/proc/self/status").output();
    let (spawned_ign, _) = signal_masks(&String::from_utf8_lossy(&child.map(|o| o.stdout).unwrap_or_default()));
    eprintln!("{test}: a process spawned here ignores {spawned_ign:016x}");
    let sb = pooled(1);
    for (how, sb) in [("fresh", &sandbox().with_pool(0)), ("pooled", &sb)] {
        if how == "pooled" {
            let _ = rt.block_on(sb.run(&ws.req(&["/bin/true"]), RunOptions::default()));
            await_ready(sb, 1);
        }
        let taken = sb.pool_status().map(|s| s.taken);
        let r = rt
            .block_on(sb.run(&ws.req(&["/bin/cat", "/proc/self/status"]), RunOptions::default()))
            .unwrap_or_else(|e| panic!("{test}: {how}: {}", portcullis::error_chain(&e)));
        if how == "pooled" {
            assert_eq!(sb.pool_status().map(|s| s.taken), taken.map(|t| t + 1), "{test}: the run took no slot");
        }
        let (ign, cgt) = signal_masks(&stdout(&r));
        assert_eq!(ign, 0, "{test}: {how}: the command ignores signals (SigIgn {ign:016x})");
        assert_eq!(cgt, 0, "{test}: {how}: the command catches signals (SigCgt {cgt:016x})");
    }
}

#[test]
fn r0832_more_idmapped_binds_than_a_message_carries_are_refused() {
    // Found in review: a pooled run with 64 idmapped binds (and the spec's
    // memfd) was cut short in transit and reported as the command's exit
    // 125. The library refuses more than one message carries before
    // anything is sent, as a fresh run's helper does (E2BIG). (A request
    // whose trees do not match its spec: `r0827`.)
    let test = "r0832";
    if !root_only(test, "only a root caller's binds are idmapped") {
        return;
    }
    let ws = Ws::new();
    let rt = rt();
    let roots: Vec<tempfile::TempDir> = (0..70).filter_map(|_| tempfile::tempdir_in("/var/tmp").ok()).collect();
    assert_eq!(roots.len(), 70, "{test}: could not make the read roots");
    let mut req = ws.req(&["/bin/true"]);
    req.read = roots.iter().map(|d| d.path().to_path_buf()).collect();
    // CONTROL: a few read roots run, fresh and pooled.
    let mut few = ws.req(&["/bin/true"]);
    few.read = req.read[..3].to_vec();
    // A pool of two: one slot prepared for the last run's shape (which the
    // big request does not have), one plain, which it takes.
    let sb = pooled(2);
    let _ = rt.block_on(sb.run(&few, RunOptions::default()));
    await_ready(&sb, 2);
    let r = rt.block_on(sb.run(&few, RunOptions::default())).unwrap_or_else(|e| panic!("{test}: {e}"));
    assert_eq!(r.outcome, Outcome::Exited { code: 0 }, "{test}: control: {}", stderr(&r));
    for (how, sb) in [("fresh", &sandbox().with_pool(0)), ("pooled", &sb)] {
        if how == "pooled" {
            await_ready(sb, 2);
        }
        let taken = sb.pool_status().map(|s| s.taken);
        let e = match rt.block_on(sb.run(&req, RunOptions::default())) {
            Ok(r) => panic!("{test}: {how}: ran ({:?}): {}", r.outcome, stderr(&r)),
            Err(e) => portcullis::error_chain(&e),
        };
        assert!(e.contains("Argument list too long"), "{test}: {how}: {e}");
        if how == "pooled" {
            assert_eq!(sb.pool_status().map(|s| s.taken), taken.map(|t| t + 1), "{test}: the run took no slot");
        }
    }
}

/// Wait until the pool has a slot prepared for the last run's shape, at
/// most 10 s.
fn await_prepared(sb: &Sandbox, test: &str) {
    if !await_status(sb, |s| s.ready_prepared >= 1) {
        panic!("{test}: the pool never prepared a slot: {:?}", sb.pool_status());
    }
}

#[test]
fn r0833_a_prepared_slot_whose_mounts_went_stale_is_not_used() {
    // A slot prepared for the last run's shape holds the run's own mounts,
    // made before the request. What the host changed since must not show:
    // a masked file unlinked and made again (the kernel detaches the mask
    // in the slot, which would leave the new file readable), a granted
    // directory renamed away and made again (the slot's grant would write
    // into the old one), the workspace itself replaced (the slot would
    // show the old one). Each is checked from outside: what the command
    // read, where its write landed.
    let test = "r0833";
    let ws = Ws::new();
    let proj = ws.path().join("proj");
    let reset = |marker: &str| {
        std::fs::create_dir_all(proj.join("out")).unwrap_or_else(|e| panic!("{test}: {e}"));
        std::fs::write(proj.join(".env"), "SECRET\n").unwrap_or_else(|e| panic!("{test}: {e}"));
        std::fs::write(proj.join("marker"), marker).unwrap_or_else(|e| panic!("{test}: {e}"));
    };
    reset("first\n");
    let mut req = ExecRequest::new(
        &proj,
        ["/bin/sh", "-c", "cat marker; cat .env 2>&1 || true; echo written > out/f && echo wrote"],
    );
    req.deny.push(".env".into());
    req.write.push(proj.join("out"));
    let sb = pooled(2);
    let rt = rt();
    let run = |what: &str| {
        let r = rt.block_on(sb.run(&req, RunOptions::default())).unwrap_or_else(|e| panic!("{test}: {what}: {e}"));
        assert_eq!(r.outcome, Outcome::Exited { code: 0 }, "{test}: {what}: {}", stderr(&r));
        stdout(&r)
    };
    let _ = run("first run");
    // CONTROL: a prepared slot is taken, and is the sandbox the plan says.
    await_prepared(&sb, test);
    let before = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
    let out = run("prepared");
    let after = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
    assert_eq!((after.prepared, after.stale), (before.prepared + 1, before.stale), "{test}: {after:?}");
    assert!(
        out.starts_with("first\n") && out.contains("Permission denied") && !out.contains("SECRET"),
        "{test}: {out}"
    );
    assert!(out.ends_with("wrote\n"), "{test}: {out}");
    assert_eq!(std::fs::read_to_string(proj.join("out/f")).ok().as_deref(), Some("written\n"), "{test}");

    // The mask's file unlinked and made again.
    await_prepared(&sb, test);
    std::fs::remove_file(proj.join(".env")).unwrap_or_else(|e| panic!("{test}: {e}"));
    std::fs::write(proj.join(".env"), "NEW SECRET\n").unwrap_or_else(|e| panic!("{test}: {e}"));
    let before = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
    let out = run("mask replaced");
    let after = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
    assert!(out.contains("Permission denied") && !out.contains("SECRET"), "{test}: the new .env was read: {out}");
    assert_eq!((after.prepared, after.stale), (before.prepared, before.stale + 1), "{test}: {after:?}");

    // The granted directory renamed away and made again.
    await_prepared(&sb, test);
    std::fs::rename(proj.join("out"), ws.path().join("out.old")).unwrap_or_else(|e| panic!("{test}: {e}"));
    std::fs::create_dir(proj.join("out")).unwrap_or_else(|e| panic!("{test}: {e}"));
    let before = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
    let out = run("grant replaced");
    let after = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
    assert!(out.ends_with("wrote\n"), "{test}: {out}");
    assert_eq!(
        std::fs::read_to_string(proj.join("out/f")).ok().as_deref(),
        Some("written\n"),
        "{test}: not in the new out/"
    );
    assert_eq!(after.stale, before.stale + 1, "{test}: {after:?}");

    // The workspace itself renamed away and made again: its bind's mount
    // stays where the slot made it, so only the source's inode tells.
    await_prepared(&sb, test);
    std::fs::rename(&proj, ws.path().join("proj.old")).unwrap_or_else(|e| panic!("{test}: {e}"));
    reset("second\n");
    let before = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
    let out = run("workspace replaced");
    let after = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
    assert!(out.starts_with("second\n"), "{test}: the old workspace was shown: {out}");
    assert_eq!(after.stale, before.stale + 1, "{test}: {after:?}");
}

#[test]
fn r0834_a_mount_the_host_makes_after_a_slot_was_built_gives_the_slot_up() {
    // Found in review: a slot prepared for a root caller bound its sources
    // (idmapped trees) when it was prepared, and any slot copies the host's
    // tree when it is built, so a mount the host made since (a read-only
    // bind over a directory of the workspace, a tmpfs hiding one) was not
    // in the slot: it wrote where a fresh sandbox is refused with EROFS.
    // Every slot built before a change of the host's mount table is now
    // given up. Root only: the host's mount table is root's to change.
    let test = "r0834";
    if !root_only(test, "it mounts on the host") {
        return;
    }
    let ws = Ws::new();
    let sub = ws.path().join("sub");
    std::fs::create_dir(&sub).unwrap_or_else(|e| panic!("{test}: {e}"));
    let mut req = ws.req(&["/bin/sh", "-c", "echo written > sub/f && echo WROTE"]);
    req.writable = true;
    let sb = pooled(2);
    let rt = rt();
    let run = |what: &str| {
        let r = rt.block_on(sb.run(&req, RunOptions::default())).unwrap_or_else(|e| panic!("{test}: {what}: {e}"));
        (stdout(&r), stderr(&r))
    };
    let _ = run("first run");
    // CONTROL: the prepared slot is taken and writes.
    await_prepared(&sb, test);
    let before = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
    let (out, err) = run("prepared");
    let after = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
    assert_eq!(out, "WROTE\n", "{test}: control: {err}");
    assert_eq!((after.prepared, after.stale), (before.prepared + 1, before.stale), "{test}: {after:?}");
    let _ = std::fs::remove_file(sub.join("f"));
    // CONTROL: a mount the host makes elsewhere (a tmpfs on a directory
    // that is not the workspace's) changes the table but nothing the run
    // binds: the prepared slot is still taken.
    await_prepared(&sb, test);
    let elsewhere = tempfile::tempdir_in("/var/tmp").unwrap_or_else(|e| panic!("{test}: {e}"));
    let e = elsewhere.path().to_string_lossy().to_string();
    let other =
        std::process::Command::new("mount").args(["-t", "tmpfs", "none", &e]).status().is_ok_and(|st| st.success());
    let before = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
    let (out, err) = run("after a mount elsewhere");
    let after = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
    let _ = std::process::Command::new("umount").arg(&e).status();
    assert!(other, "{test}: could not mount a tmpfs on {e}");
    assert_eq!(out, "WROTE\n", "{test}: control: {err}");
    assert_eq!((after.prepared, after.stale), (before.prepared + 1, before.stale), "{test}: {after:?}");
    let _ = std::fs::remove_file(sub.join("f"));
    // The host makes `sub` read-only with a bind mount after the slots
    // were built.
    await_prepared(&sb, test);
    let s = sub.to_string_lossy().to_string();
    let mounted = std::process::Command::new("mount").args(["--bind", &s, &s]).status().is_ok_and(|st| st.success())
        && std::process::Command::new("mount")
            .args(["-o", "remount,bind,ro", &s])
            .status()
            .is_ok_and(|st| st.success());
    let before = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
    let (out, err) = run("after the host's mount");
    let after = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
    let _ = std::process::Command::new("umount").arg(&s).status();
    assert!(mounted, "{test}: could not bind-mount {s} read-only");
    assert!(
        out.is_empty() && err.contains("Read-only file system"),
        "{test}: wrote under the host's read-only bind: {out} {err}"
    );
    assert!(!sub.join("f").exists(), "{test}: the file landed");
    assert_eq!(after.prepared, before.prepared, "{test}: a slot built before the mount was taken: {after:?}");
    assert!(after.stale > before.stale, "{test}: {after:?}");
}

#[test]
fn r0835_runs_of_two_shapes_keep_their_slots() {
    // Found in review: a prepared slot was given up at the first run of
    // another shape, and a pool of one was all prepared, so two alternating
    // shapes made every run of a pool of one miss and a pool of two throw
    // a slot away per run. A pool of one now stays plain, and a prepared
    // slot is given up only after two runs of another shape.
    let test = "r0835";
    let ws = Ws::new();
    let rt = rt();
    let a = ws.req(&["/bin/true"]);
    let mut b = ws.req(&["/bin/true"]);
    b.writable = true;
    for size in [1, 2] {
        let sb = pooled(size);
        let _ = rt.block_on(sb.run(&a, RunOptions::default()));
        for i in 0..8 {
            await_ready(&sb, size);
            let req = if i % 2 == 0 { &b } else { &a };
            let r = rt.block_on(sb.run(req, RunOptions::default())).unwrap_or_else(|e| panic!("{test}: {e}"));
            assert_eq!(r.outcome, Outcome::Exited { code: 0 }, "{test}: {}", stderr(&r));
        }
        let st = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
        assert_eq!((st.taken, st.missed), (8, 1), "{test}: pool of {size}: {st:?}");
        match size {
            1 => assert_eq!(st.prepared, 0, "{test}: a pool of one prepared a slot: {st:?}"),
            _ => assert!(st.prepared >= 3, "{test}: the runs of one shape did not find their prepared slot: {st:?}"),
        }
    }
}

#[test]
fn r0836_a_prepared_slot_reads_its_request_before_its_limits() {
    // Found in review: a prepared slot set the run's limits before it read
    // its request, so an address-space limit (`limits.memory` where no
    // memory controller is in reach) bounded the memory the request was
    // read with, and a request with a big environment ended the slot with
    // SIGABRT before the command ran. The limits are set once the request
    // is read; the command gets them all the same.
    let test = "r0836";
    let ws = Ws::new();
    let rt = rt();
    let mut prime = ws.req(&["/bin/true"]);
    prime.limits.memory = Some(6 << 20);
    let mut req = ws.req(&["/bin/sh", "-c", "echo ran; ulimit -v"]);
    req.limits.memory = Some(6 << 20);
    for i in 0..15 {
        req.env.push((format!("BIG{i}").into(), "x".repeat(100 * 1024).into()));
    }
    // CONTROL: a fresh sandbox runs it.
    let fresh = rt.block_on(sandbox().run(&req, RunOptions::default())).unwrap_or_else(|e| panic!("{test}: {e}"));
    assert_eq!(fresh.outcome, Outcome::Exited { code: 0 }, "{test}: fresh: {}", stderr(&fresh));
    let sb = pooled(2);
    let _ = rt.block_on(sb.run(&prime, RunOptions::default()));
    await_prepared(&sb, test);
    let before = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
    let r = rt.block_on(sb.run(&req, RunOptions::default())).unwrap_or_else(|e| panic!("{test}: {e}"));
    let after = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
    assert_eq!(after.prepared, before.prepared + 1, "{test}: the run took no prepared slot: {after:?}");
    assert_eq!(r.outcome, Outcome::Exited { code: 0 }, "{test}: prepared: {}", stderr(&r));
    assert_eq!(stdout(&r), stdout(&fresh), "{test}: the limits differ from a fresh run's");
}

/// Run `c` with `sh -c` on the host; whether it succeeded.
fn host_sh(c: &str) -> bool {
    std::process::Command::new("sh").args(["-c", c]).status().is_ok_and(|s| s.success())
}

#[test]
fn r0837_host_mount_changes_that_no_event_or_line_shows_give_slots_up() {
    // Found in a second review, each reproduced before it was fixed: (a) a
    // slot judged for one run's sources was taken as current for another
    // run's; (b) a bind unmounted and made again over another directory
    // shows the very same mountinfo line (its id is handed out again);
    // (c) renaming a directory that holds a host mount into the workspace
    // raises no mount event. In each a pooled run showed what a fresh one
    // does not. Root only: the host's mounts are root's to change.
    let test = "r0837";
    if !root_only(test, "it mounts on the host") {
        return;
    }
    let rt = rt();
    let run = |sb: &Sandbox, req: &ExecRequest, what: &str| {
        let r = rt.block_on(sb.run(req, RunOptions::default())).unwrap_or_else(|e| panic!("{test}: {what}: {e}"));
        format!("{}{}", stdout(&r), stderr(&r))
    };
    let mk = |p: &std::path::Path| std::fs::create_dir_all(p).unwrap_or_else(|e| panic!("{test}: {e}"));

    // (a) A prepared slot for ws2, a host read-only bind over ws2/sub, a
    // run of ws1 (whose sources it does not touch), then ws2 again.
    let (ws1, ws2) = (Ws::new(), Ws::new());
    let sub = ws2.path().join("sub");
    mk(&sub);
    let a = ws1.req(&["/bin/true"]);
    let mut b = ws2.req(&["/bin/sh", "-c", "echo written > sub/f && echo WROTE"]);
    b.writable = true;
    let sb = pooled(2);
    let _ = run(&sb, &b, "(a) first");
    let _ = std::fs::remove_file(sub.join("f"));
    await_prepared(&sb, test);
    await_ready(&sb, 2);
    let s = sub.to_string_lossy().to_string();
    assert!(host_sh(&format!("mount --bind '{s}' '{s}' && mount -o remount,bind,ro '{s}'")), "{test}: (a) mount");
    let fresh = run(&sandbox(), &b, "(a) fresh");
    let _ = run(&sb, &a, "(a) ws1");
    let pooled_out = run(&sb, &b, "(a) ws2");
    let _ = host_sh(&format!("umount '{s}'"));
    assert!(fresh.contains("Read-only file system"), "{test}: (a) control: {fresh}");
    assert!(pooled_out.contains("Read-only file system") && !sub.join("f").exists(), "{test}: (a) {pooled_out}");

    // (b) A bind over ws/sub unmounted and made again from another directory.
    let (ws, data) = (Ws::new(), Ws::new());
    let (sub, src) = (ws.path().join("sub"), data.path().join("a"));
    mk(&sub);
    mk(&src);
    std::fs::write(src.join("f"), "OLD\n").unwrap_or_else(|e| panic!("{test}: {e}"));
    let (s, d) = (sub.to_string_lossy().to_string(), src.to_string_lossy().to_string());
    assert!(host_sh(&format!("mount --bind '{d}' '{s}'")), "{test}: (b) mount");
    let req = ws.req(&["/bin/cat", "sub/f"]);
    let sb = pooled(2);
    let _ = run(&sb, &req, "(b) first");
    await_prepared(&sb, test);
    let again =
        format!("umount '{s}' && mv '{d}' '{d}.old' && mkdir '{d}' && echo NEW > '{d}/f' && mount --bind '{d}' '{s}'");
    assert!(host_sh(&again), "{test}: (b) mount again");
    let fresh = run(&sandbox(), &req, "(b) fresh");
    let pooled_out = run(&sb, &req, "(b) pooled");
    let _ = host_sh(&format!("umount '{s}'"));
    assert_eq!(fresh, "NEW\n", "{test}: (b) control");
    assert_eq!(pooled_out, fresh, "{test}: (b) the pooled run showed the old directory");

    // (c) A directory holding a host read-only bind renamed into the workspace.
    let (ws, outside) = (Ws::new(), Ws::new());
    let x = outside.path().join("other/x");
    mk(&x);
    std::fs::write(x.join("f"), "UNDER\n").unwrap_or_else(|e| panic!("{test}: {e}"));
    let xs = x.to_string_lossy().to_string();
    assert!(host_sh(&format!("mount --bind '{xs}' '{xs}' && mount -o remount,bind,ro '{xs}'")), "{test}: (c) mount");
    let mut req = ws.req(&["/bin/sh", "-c", "echo written > other/x/f && echo WROTE"]);
    req.writable = true;
    let sb = pooled(2);
    let _ = run(&sb, &req, "(c) first");
    await_prepared(&sb, test);
    let moved = ws.path().join("other");
    std::fs::rename(outside.path().join("other"), &moved).unwrap_or_else(|e| panic!("{test}: {e}"));
    let fresh = run(&sandbox(), &req, "(c) fresh");
    let pooled_out = run(&sb, &req, "(c) pooled");
    let content = std::fs::read_to_string(moved.join("x/f")).unwrap_or_default();
    let _ = host_sh(&format!("umount '{}'", moved.join("x").display()));
    assert!(fresh.contains("Read-only file system"), "{test}: (c) control: {fresh}");
    assert!(pooled_out.contains("Read-only file system") && content == "UNDER\n", "{test}: (c) {pooled_out} {content}");
}

#[test]
fn r0838_a_pooled_run_gets_as_many_processes_as_a_fresh_one() {
    // Found in review: without the pids controller `--pids N` is
    // RLIMIT_NPROC, which for an unprivileged caller's fresh run also counts
    // the outer helper (it joins the sandbox's user namespace to make the
    // network); a slot makes the network in a short-lived child, so its
    // command could start one process more. Fresh, plain slot and prepared
    // slot now agree: with `--pids 1` the shell cannot fork, with 2 it can.
    let test = "r0838";
    let ws = Ws::new();
    let rt = rt();
    for pids in [1u64, 2] {
        let mut req = ws.req(&["/bin/sh", "-c", "/bin/true && echo forked"]);
        req.limits.pids = Some(pids);
        let show = |r: portcullis::sandbox::ExecResult| format!("{:?} {}", r.outcome, stdout(&r));
        let fresh = rt.block_on(sandbox().run(&req, RunOptions::default())).unwrap_or_else(|e| panic!("{test}: {e}"));
        let fresh = show(fresh);
        assert_eq!(fresh.contains("forked"), pids == 2, "{test}: control, --pids {pids}: {fresh}");
        for (how, size) in [("plain", 1), ("prepared", 2)] {
            let sb = pooled(size);
            let _ = rt.block_on(sb.run(&req, RunOptions::default()));
            match how {
                "plain" => await_ready(&sb, 1),
                _ => await_prepared(&sb, test),
            }
            let before = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
            let r = rt.block_on(sb.run(&req, RunOptions::default())).unwrap_or_else(|e| panic!("{test}: {e}"));
            let after = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
            assert_eq!(after.taken, before.taken + 1, "{test}: {how}: no slot taken: {after:?}");
            assert_eq!(show(r), fresh, "{test}: {how} slot, --pids {pids}");
        }
    }
}

#[test]
fn r0860_a_prepared_slot_takes_its_request_inline_or_in_a_memfd() {
    // A request up to `INLINE_REQUEST_MAX` bytes of JSON travels inside the
    // message to a prepared slot; a larger one in a memfd. Both reach the
    // command whole: an argument just under the limit and one just over it
    // come back with every byte, each run in a prepared slot.
    let test = "r0860";
    let ws = Ws::new();
    let rt = rt();
    let sb = pooled(2);
    let limit = portcullis_helper::spec::INLINE_REQUEST_MAX;
    let shape = |arg: &str| ws.req(&["/bin/sh", "-c", "printf %s \"$1\" | md5sum", "sh", arg]);
    let _ = rt.block_on(sb.run(&shape("prime"), RunOptions::default()));
    for (what, len) in [("inline", limit - 1024), ("in a memfd", limit + 1)] {
        let arg: String = (0..len).map(|i| char::from(b'a' + u8::try_from(i % 26).unwrap_or(0))).collect();
        let req = shape(&arg);
        let plan = sb.plan(&req).unwrap_or_else(|e| panic!("{test}: {e}"));
        let json = serde_json::to_vec(&plan.spec.request()).unwrap_or_else(|e| panic!("{test}: {e}"));
        assert_eq!(json.len() <= limit, what == "inline", "{test}: {what}: the request is {} bytes", json.len());
        // CONTROL: the same digest on the host.
        let host = std::process::Command::new("sh")
            .args(["-c", "printf %s \"$1\" | md5sum", "sh", &arg])
            .output()
            .unwrap_or_else(|e| panic!("{test}: {e}"));
        await_prepared(&sb, test);
        let before = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
        let r = rt.block_on(sb.run(&req, RunOptions::default())).unwrap_or_else(|e| panic!("{test}: {what}: {e}"));
        let after = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
        assert_eq!(after.prepared, before.prepared + 1, "{test}: {what}: no prepared slot: {after:?}");
        assert_eq!(r.outcome, Outcome::Exited { code: 0 }, "{test}: {what}: {}", stderr(&r));
        assert_eq!(stdout(&r), String::from_utf8_lossy(&host.stdout), "{test}: {what}: the argument changed");
    }
}

#[test]
fn r0861_a_mount_made_between_the_plan_and_the_take_gives_the_slot_up() {
    // Found in review: the pool judged a slot by the mount table the
    // writable plan's alias check had read, so a read-only bind the host
    // made after that read (while the plan walked the writable areas, or
    // between the plan and the take) was missed and the prepared slot
    // wrote where a fresh sandbox gets EROFS. The table is read at the
    // take. Here the host mounts inside `run_checked`'s check, which runs
    // after the plan and before the take: a new read-only bind over `sub`,
    // then (a tmpfs mounted there before, open to the sandbox's ids) that
    // mount made read-only with `remount,bind,ro`, which keeps the mount's
    // unique id and changes only its line (the slot's copy of it stays
    // writable). Root only: the host's mount table is root's to change.
    let test = "r0861";
    if !root_only(test, "it mounts on the host") {
        return;
    }
    let mount = |args: &[&str]| std::process::Command::new("mount").args(args).status().is_ok_and(|st| st.success());
    let umount = |p: &str| {
        let _ = std::process::Command::new("umount").arg(p).status();
    };
    let rt = rt();
    for (what, mounted_before) in [("a new read-only bind", false), ("a remount read-only", true)] {
        let ws = Ws::new();
        let sub = ws.path().join("sub");
        std::fs::create_dir(&sub).unwrap_or_else(|e| panic!("{test}: {e}"));
        let s = sub.to_string_lossy().to_string();
        if mounted_before {
            assert!(mount(&["-t", "tmpfs", "-o", "mode=1777", "none", &s]), "{test}: {what}: could not mount on {s}");
        }
        let mut req = ws.req(&["/bin/sh", "-c", "echo written > sub/f && echo WROTE"]);
        req.writable = true;
        let sb = pooled(2);
        // CONTROL: the prepared slot is taken and writes.
        let _ = rt.block_on(sb.run(&req, RunOptions::default()));
        await_prepared(&sb, test);
        let before = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
        let r = rt.block_on(sb.run(&req, RunOptions::default())).unwrap_or_else(|e| panic!("{test}: {e}"));
        let after = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
        assert_eq!(stdout(&r), "WROTE\n", "{test}: {what}: control: {}", stderr(&r));
        assert_eq!(after.prepared, before.prepared + 1, "{test}: {what}: control: {after:?}");
        std::fs::remove_file(sub.join("f")).unwrap_or_else(|e| panic!("{test}: {e}"));
        await_prepared(&sb, test);
        let mut made = false;
        let r = rt.block_on(sb.run_checked(&req, RunOptions::default(), |_| {
            made = if mounted_before {
                mount(&["-o", "remount,bind,ro", &s])
            } else {
                mount(&["--bind", &s, &s]) && mount(&["-o", "remount,bind,ro", &s])
            };
            Ok(())
        }));
        let landed = sub.join("f").exists();
        umount(&s);
        let r = r.unwrap_or_else(|e| panic!("{test}: {what}: {e}"));
        assert!(made, "{test}: {what}: the host's mount failed");
        assert!(!landed, "{test}: {what}: the write went through the host's read-only mount: {}", stdout(&r));
        assert!(stderr(&r).contains("Read-only file system"), "{test}: {what}: {}", stderr(&r));
    }
}

#[test]
fn r0863_runs_that_outpace_the_pool_pause_it_and_it_fills_up_after() {
    // Eight runs at once on a pool of two: most find no slot ready while
    // the pool makes more, so it stops making them (they would only be
    // fresh setups made earlier, at a higher cost) and runs go on in fresh
    // helpers, every one sandboxed; once the burst is over the pool fills
    // up again by itself, and the next run takes a slot.
    let test = "r0863";
    let ws = Ws::new();
    let (sb, rt) = primed(test, &ws, 2);
    let before = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
    let runs = rt.block_on(async {
        let mut all = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let (sb, req) = (sb.clone(), ws.req(&["/bin/sh", "-c", "echo x > probe; echo $?"]));
            all.spawn(async move { sb.run(&req, RunOptions::default()).await });
        }
        all.join_all().await
    });
    for (i, r) in runs.into_iter().enumerate() {
        let r = r.unwrap_or_else(|e| panic!("{test}: run {i}: {}", portcullis::error_chain(&e)));
        assert_eq!(stdout(&r), "2\n", "{test}: run {i}: {r:?}");
        assert!(stderr(&r).contains("Read-only file system"), "{test}: run {i}: {}", stderr(&r));
    }
    assert!(!ws.join("probe").exists(), "{test}: a write landed");
    let burst = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
    assert_eq!((burst.taken + burst.missed) - (before.taken + before.missed), 8, "{test}: {burst:?}");
    assert!(burst.missed > before.missed, "{test}: eight runs at once all found a slot: {burst:?}");
    assert!(burst.paused > before.paused, "{test}: runs outpaced the pool and it went on making slots: {burst:?}");
    // It fills up again with no run to trigger it.
    await_ready(&sb, 2);
    let r = rt.block_on(sb.run(&ws.req(&["/bin/true"]), RunOptions::default()));
    assert!(r.is_ok_and(|r| r.outcome == Outcome::Exited { code: 0 }), "{test}: the run after");
    let after = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
    assert_eq!(after.taken, burst.taken + 1, "{test}: the run after the burst took a slot: {after:?}");
    // Control: one caller's runs one after another, with no gap (each
    // comes while the slot the one before started is being made), never
    // pause it, whether or not they find a slot ready.
    for i in 0..12 {
        let r = rt.block_on(sb.run(&ws.req(&["/bin/true"]), RunOptions::default()));
        assert!(r.is_ok_and(|r| r.outcome == Outcome::Exited { code: 0 }), "{test}: run {i} after");
    }
    let calm = sb.pool_status().unwrap_or_else(|| panic!("{test}: no pool"));
    assert_eq!(calm.paused, after.paused, "{test}: runs one after another paused the pool: {calm:?}");
    assert!(calm.taken > after.taken, "{test}: {calm:?}");
}
