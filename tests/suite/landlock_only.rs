//! The landlock-only mode keeps its own promises: what an adversarial review
//! of it found, attempted for real and checked from outside, each with a
//! control (the same attempt works without the sandbox or with the
//! restriction off) and a pinned errno. The mode runs for unprivileged
//! callers only, so these run in the unprivileged pass of `scripts/test`
//! (`scripts/test-as-nobody landlock_only`); as root they say so and return.

use std::ffi::CString;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use portcullis::sandbox::{ExecRequest, Mode};

use super::util::probe_result as result;
use super::util::*;

/// Whether this test can run the mode here (and says why not).
fn mode_available(test: &str) -> bool {
    if is_root() {
        eprintln!("{test}: the landlock-only mode runs in the unprivileged pass (running as root)");
        return false;
    }
    available(test, portcullis::doctor_landlock_abi() >= 6, "landlock-only mode needs Landlock ABI 6")
}

/// The prologue of every script: `t(name, f)` prints `name OK [value]` or
/// `name ERRNAME`; `c(r)` turns a negative libc return into an OSError.
const PRELUDE: &str = "import ctypes, errno, fcntl, os, struct, sys\n\
libc = ctypes.CDLL(None, use_errno=True)\n\
def t(name, f):\n    try:\n        r = f(); print(name, 'OK', '' if r is None else r)\n    except OSError as e:\n        print(name, errno.errorcode.get(e.errno, e.errno))\n\
def c(r):\n    if r < 0: raise OSError(ctypes.get_errno(), 'call')\n    return r\n";

/// Run `script` with /usr/bin/python3 in the landlock-only mode for `ws`.
fn in_mode(ws: &Ws, script: &str, tweak: impl FnOnce(&mut ExecRequest)) -> String {
    let body = format!("{PRELUDE}{script}");
    let mut req = ws.req(&["/usr/bin/python3", "-c", &body]);
    req.degraded = Some(Mode::LandlockOnly);
    tweak(&mut req);
    let r = run_ok(&req);
    assert_eq!(r.enforcement.mode, Mode::LandlockOnly);
    assert_eq!(r.outcome.code(), Some(0), "script failed: {}", stderr(&r));
    stdout(&r)
}

/// Run the same `script` on the host, outside any sandbox (the control).
fn on_host(cwd: &Path, script: &str) -> String {
    python_on_host(cwd, &format!("{PRELUDE}{script}"))
}

/// The value printed after `name OK`.
fn value<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(" OK ")))
        .unwrap_or_else(|| panic!("no value for {name} in: {out}"))
        .trim()
}

/// `ioctl` flags, version and fsxattr of `file`, and its ctime, from outside.
fn metadata_of(file: &Path) -> (String, u64, i64, i64) {
    let out = on_host(
        file.parent().unwrap_or(Path::new("/")),
        &format!(
            "fd = os.open({f:?}, os.O_RDONLY)\n\
             t('flags', lambda: struct.unpack('l', fcntl.ioctl(fd, 0x80086601, bytes(8)))[0])\n\
             t('version', lambda: struct.unpack('l', fcntl.ioctl(fd, 0x80087601, bytes(8)))[0])\n\
             t('xflags', lambda: struct.unpack('I', fcntl.ioctl(fd, 0x801c581f, bytes(28))[:4])[0])\n",
            f = file.display().to_string()
        ),
    );
    let m = std::fs::metadata(file).unwrap_or_else(|e| panic!("stat {}: {e}", file.display()));
    (out, m.ctime() as u64, m.ctime_nsec(), m.mtime())
}

#[test]
fn r0080_metadata_ioctls_are_refused_in_landlock_only_mode() {
    // Found in review: the filter refused `file_setattr` but not its ioctl
    // forms, so in a read-only workspace FS_IOC_SETFLAGS, FS_IOC_SETVERSION
    // and FS_IOC_FSSETXATTR changed the file's flags, generation and ctime.
    if !mode_available("r0080") {
        return;
    }
    let ws = Ws::new();
    let file = ws.join("README.md");
    // FS_NODUMP_FL (0x40) and FS_XFLAG_NODUMP (0x80): flags an owner may set.
    let script = format!(
        "fd = os.open({f:?}, os.O_RDONLY)\n\
         flags = struct.unpack('l', fcntl.ioctl(fd, 0x80086601, bytes(8)))[0]\n\
         t('getflags', lambda: flags)\n\
         t('setflags', lambda: fcntl.ioctl(fd, 0x40086602, struct.pack('l', flags | 0x40)) and None)\n\
         t('setflags32', lambda: fcntl.ioctl(fd, 0x40046602, struct.pack('i', flags | 0x40)) and None)\n\
         t('setversion', lambda: fcntl.ioctl(fd, 0x40087602, struct.pack('l', 4242)) and None)\n\
         x = bytearray(fcntl.ioctl(fd, 0x801c581f, bytes(28)))\n\
         x[0] |= 0x80\n\
         t('fssetxattr', lambda: fcntl.ioctl(fd, 0x401c5820, bytes(x)) and None)\n\
         t('fiemap', lambda: fcntl.ioctl(fd, 0xc020660b, struct.pack('QQIIII', 0, 2**64 - 1, 0, 0, 0, 0)) and None)\n",
        f = file.display().to_string()
    );
    let before = metadata_of(&file);
    let out = in_mode(&ws, &script, |_| {});
    for op in ["setflags", "setflags32", "setversion", "fssetxattr"] {
        assert_eq!(result(&out, op), "EPERM", "{op}: {out}");
    }
    // The descriptor itself worked: reading ioctls pass.
    assert_eq!(result(&out, "getflags"), "OK", "{out}");
    assert_eq!(result(&out, "fiemap"), "OK", "{out}");
    assert_eq!(metadata_of(&file), before, "the read-only file's flags, generation or ctime changed");
    // The same in a writable area: metadata changes are refused everywhere in
    // this mode, as chmod is.
    ws.write("target/out.o", "o\n");
    let out_w = in_mode(
        &ws,
        &script.replace(&file.display().to_string(), &ws.join("target/out.o").display().to_string()),
        |r| r.write.push("target".into()),
    );
    assert_eq!(result(&out_w, "setflags"), "EPERM", "{out_w}");
    assert_eq!(result(&out_w, "fssetxattr"), "EPERM", "{out_w}");

    // Control: the same script on the host changes all three.
    let host = on_host(ws.path(), &script);
    for op in ["setflags", "setversion", "fssetxattr"] {
        assert_eq!(result(&host, op), "OK", "control {op}: {host}");
    }
    let after = metadata_of(&file);
    assert_ne!(after.0, before.0, "control: the flags did not change on the host");
    assert_ne!((after.1, after.2), (before.1, before.2), "control: the ctime did not change on the host");
}

/// Whether the host's POSIX message queue `name` exists (from outside).
fn mq_exists(name: &str) -> bool {
    let c = CString::new(name).unwrap_or_default();
    // SAFETY: mq_open with a valid C string and no O_CREAT; the descriptor is
    // closed right away.
    let q = unsafe { libc::mq_open(c.as_ptr(), libc::O_RDONLY) };
    if q < 0 {
        assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::ENOENT));
        return false;
    }
    // SAFETY: q is the descriptor just opened.
    unsafe { libc::mq_close(q) };
    true
}

fn mq_create(name: &str) {
    let c = CString::new(name).unwrap_or_default();
    // SAFETY: mq_open(O_CREAT) with a valid name, mode and default attributes.
    let q = unsafe {
        libc::mq_open(c.as_ptr(), libc::O_CREAT | libc::O_RDWR, 0o600, std::ptr::null_mut::<libc::mq_attr>())
    };
    assert!(q >= 0, "mq_open {name}: {}", std::io::Error::last_os_error());
    // SAFETY: q is the descriptor just opened.
    unsafe { libc::mq_close(q) };
}

fn mq_remove(name: &str) {
    let c = CString::new(name).unwrap_or_default();
    // SAFETY: mq_unlink with a valid C string.
    unsafe { libc::mq_unlink(c.as_ptr()) };
}

#[test]
fn r0081_host_posix_message_queues_are_out_of_reach() {
    // Found in review: with no ipc namespace, mq_unlink removed a host queue
    // and mq_open(O_CREAT) left a new one behind although the open failed.
    if !mode_available("r0081") {
        return;
    }
    let ws = Ws::new();
    let host_q = format!("/pc-r0081-host-{}", std::process::id());
    let new_q = format!("/pc-r0081-new-{}", std::process::id());
    mq_create(&host_q);
    assert!(mq_exists(&host_q));
    // Raw syscalls: glibc's mq_unlink turns EPERM into EACCES.
    let script = format!(
        "t('mq_unlink', lambda: c(libc.syscall({unlink}, {host:?}.encode())))\n\
         t('mq_open_creat', lambda: c(libc.syscall({open}, {new:?}.encode(), os.O_CREAT | os.O_RDWR, 0o600, None)))\n\
         t('mq_open', lambda: c(libc.syscall({open}, {host:?}.encode(), os.O_RDONLY, 0, None)))\n",
        unlink = libc::SYS_mq_unlink,
        open = libc::SYS_mq_open,
        host = host_q.trim_start_matches('/'),
        new = new_q.trim_start_matches('/'),
    );
    let out = in_mode(&ws, &script, |_| {});
    for op in ["mq_unlink", "mq_open_creat", "mq_open"] {
        assert_eq!(result(&out, op), "EPERM", "{op}: {out}");
    }
    assert!(mq_exists(&host_q), "the host's queue was removed from the sandbox");
    assert!(!mq_exists(&new_q), "the sandbox left a new queue on the host");

    // Control: the same script on the host removes the one and makes the other.
    let host = on_host(ws.path(), &script);
    assert_eq!(result(&host, "mq_unlink"), "OK", "control: {host}");
    assert_eq!(result(&host, "mq_open_creat"), "OK", "control: {host}");
    let gone = !mq_exists(&host_q);
    let made = mq_exists(&new_q);
    mq_remove(&host_q);
    mq_remove(&new_q);
    assert!(gone && made, "control: the host script did not remove and create the queues");
}

#[test]
fn r0082_outside_the_plan_no_watches_and_no_xattrs_by_path() {
    // Found in review: outside the plan, `ls ~/.ssh` is refused, but getxattr
    // read a user xattr and inotify reported names and every access. Both
    // are refused now; readlink still shows a link's target (no kernel
    // control exists: the documented gap, pinned so the docs stay true).
    if !mode_available("r0082") {
        return;
    }
    let ws = Ws::new();
    let outside = Ws::new();
    let secret = outside.join("README.md");
    let link = outside.join("key-link");
    std::os::unix::fs::symlink("/srv/the-target", &link).unwrap_or_else(|e| panic!("symlink: {e}"));
    ws.write("notes.txt", "n\n");
    for (path, val) in [(&secret, "hidden-value"), (&ws.join("notes.txt"), "inside-value")] {
        let p = CString::new(path.display().to_string()).unwrap_or_default();
        // SAFETY: valid C strings and a buffer of the given length.
        let r = unsafe { libc::setxattr(p.as_ptr(), c"user.pc".as_ptr(), val.as_ptr().cast(), val.len(), 0) };
        if !available("r0082", r == 0, "the test filesystem takes no user xattrs") {
            return;
        }
    }
    let script = format!(
        "t('getxattr', lambda: os.getxattr({s:?}, 'user.pc').decode())\n\
         t('listxattr', lambda: ','.join(os.listxattr({s:?})))\n\
         t('lgetxattr', lambda: os.getxattr({s:?}, 'user.pc', follow_symlinks=False).decode())\n\
         def watch():\n    fd = c(libc.inotify_init1(0))\n    return c(libc.inotify_add_watch(fd, {d:?}.encode(), 0xfff))\n\
         t('inotify', watch)\n\
         t('inotify_add_watch', lambda: c(libc.syscall({add}, 0, {d:?}.encode(), 0xfff)))\n\
         t('fanotify', lambda: c(libc.fanotify_init(0x200, 0)))\n\
         t('read', lambda: open({s:?}).read())\n\
         t('readlink', lambda: os.readlink({l:?}))\n\
         fd = os.open('notes.txt', os.O_RDONLY)\n\
         t('fgetxattr', lambda: os.getxattr(fd, 'user.pc').decode())\n",
        s = secret.display().to_string(),
        d = outside.path().display().to_string(),
        l = link.display().to_string(),
        add = libc::SYS_inotify_add_watch,
    );
    let out = in_mode(&ws, &script, |_| {});
    for (op, want) in [
        ("getxattr", "ENOTSUP"),
        ("listxattr", "ENOTSUP"),
        ("lgetxattr", "ENOTSUP"),
        ("inotify", "EPERM"),
        ("inotify_add_watch", "EPERM"),
        ("fanotify", "EPERM"),
        ("read", "EACCES"),
    ] {
        assert_eq!(result(&out, op), want, "{op}: {out}");
    }
    // A descriptor Landlock let the command open still has its xattrs.
    assert_eq!(value(&out, "fgetxattr"), "inside-value", "{out}");
    // The documented gap: no Landlock right covers readlink.
    assert_eq!(value(&out, "readlink"), "/srv/the-target", "{out}");

    // Control: on the host the same calls read the value and watch the dir.
    let host = on_host(ws.path(), &script);
    assert_eq!(value(&host, "getxattr"), "hidden-value", "control: {host}");
    assert!(value(&host, "listxattr").contains("user.pc"), "control: {host}");
    assert_eq!(result(&host, "inotify"), "OK", "control: {host}");
    assert_eq!(result(&host, "fanotify"), "OK", "control: {host}");
}

/// Pids of the processes whose parent is `ppid` and whose comm is `comm`.
fn children_named(ppid: u32, comm: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
        // pid (comm) state ppid ...
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        let name = &stat[open + 1..close];
        let ppid_field = stat[close + 1..].split_whitespace().nth(1).and_then(|p| p.parse::<u32>().ok());
        if name == comm && ppid_field == Some(ppid) {
            out.push(pid);
        }
    }
    out
}

/// Kill every process whose command line starts with `tag` (cleanup after a
/// failure, so no sleeper outlives the test).
fn kill_tagged(tag: &str) {
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
        if std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c.starts_with(tag.as_bytes())) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
    }
}

fn wait_until(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

#[test]
fn r0083_a_killed_helper_takes_the_tree_with_it() {
    // Found in review: when portcullis-helper was killed with SIGKILL, the
    // command's tree kept running (no pid namespace dies with pid 1 here).
    if !mode_available("r0083") {
        return;
    }
    let ws = Ws::new();
    let tag = format!("pc-r0083-{}", std::process::id());
    let script = format!(
        "(setsid bash -c 'exec -a {tag}-daemon sleep 300' &); (bash -c 'exec -a {tag}-child sleep 300' &); exec -a {tag}-main sleep 300"
    );
    let mut child = cli()
        .args(["exec", "--degraded", "landlock-only", "--workspace"])
        .arg(ws.path())
        .args(["--", "bash", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("portcullis exec: {e}"));
    let names = ["daemon", "child", "main"].map(|n| format!("{tag}-{n} 300"));
    let all_up = || names.iter().all(|n| host_procs_containing(n).iter().any(|c| c.trim() == n));
    // Control: the tree is up before the kill, three processes of it.
    let up = wait_until(Duration::from_secs(20), all_up);
    let helpers = children_named(child.id(), "portcullis-help");
    if !up || helpers.len() != 1 {
        let _ = child.kill();
        let out = child.wait_with_output().map(|o| String::from_utf8_lossy(&o.stderr).into_owned());
        panic!("control: the tree did not come up ({up}) or no single helper ({helpers:?}): {out:?}");
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(helpers[0]), nix::sys::signal::Signal::SIGKILL)
        .unwrap_or_else(|e| panic!("kill the helper: {e}"));
    let swept = wait_until(Duration::from_secs(5), || !names.iter().any(|n| !host_procs_containing(n).is_empty()));
    let status = child.wait().unwrap_or_else(|e| panic!("wait: {e}"));
    let survivors: Vec<String> = names.iter().flat_map(|n| host_procs_containing(n)).collect();
    if !swept {
        kill_tagged(&tag);
    }
    assert!(swept, "the command's tree outlived the killed helper: {survivors:?}");
    assert_eq!(status.code(), Some(125), "the CLI reports the dead helper as a setup failure");
}

#[test]
fn r0084_cross_directory_renames_and_links_work_where_writable() {
    // Found in review: every cross-directory rename or link failed with
    // EXDEV in the landlock-only mode, even inside writable areas (the
    // supervisors' scope-only Landlock layers refused Refer). Granting it
    // must not let a read-only file move or be linked into a writable area.
    let ws = Ws::new();
    ws.write("target/a/x", "x\n");
    ws.write("target/b/z", "z\n");
    ws.write("build/.keep", "");
    let script = "t('rename_within', lambda: os.rename('target/a/x', 'target/x'))\n\
         t('link_within', lambda: os.link('target/x', 'target/a/y'))\n\
         t('rename_dir_across', lambda: os.rename('target/b', 'build/b'))\n\
         t('rename_ro_in', lambda: os.rename('src/main.rs', 'target/main.rs'))\n\
         t('link_ro_in', lambda: os.link('src/lib.rs', 'target/lib.rs'))\n\
         t('rename_out', lambda: os.rename('target/x', 'src/x'))\n";
    let grants = |r: &mut ExecRequest| {
        r.write.push("target".into());
        r.write.push("build".into());
    };
    let src_before = snapshot(&ws.join("src"));

    // The full sandbox, as a reference (both passes): renames inside a grant
    // work; across grants and out of the read-only source, each grant is a
    // mount of its own, so EXDEV.
    let body = format!("{PRELUDE}{script}");
    let mut req = ws.req(&["/usr/bin/python3", "-c", &body]);
    grants(&mut req);
    let full = stdout(&run_ok(&req));
    assert_eq!(result(&full, "rename_within"), "OK", "{full}");
    assert_eq!(result(&full, "link_within"), "OK", "{full}");
    for op in ["rename_dir_across", "rename_ro_in", "link_ro_in", "rename_out"] {
        assert_eq!(result(&full, op), "EXDEV", "full sandbox {op}: {full}");
    }
    assert_eq!(snapshot(&ws.join("src")), src_before);
    // Put the tree back for the landlock-only run.
    std::fs::rename(ws.join("target/x"), ws.join("target/a/x")).unwrap_or_else(|e| panic!("reset: {e}"));
    std::fs::remove_file(ws.join("target/a/y")).unwrap_or_else(|e| panic!("reset: {e}"));

    if !mode_available("r0084") {
        return;
    }
    let out = in_mode(&ws, script, grants);
    for (op, want) in [
        ("rename_within", "OK"),
        ("link_within", "OK"),
        ("rename_dir_across", "OK"),
        // Landlock: no RemoveFile right in the read-only source.
        ("rename_ro_in", "EACCES"),
        // Landlock: no Refer right on the read-only source (a hard link would
        // be a writable name for a read-only file).
        ("link_ro_in", "EXDEV"),
        // Landlock: no MakeReg right in the read-only destination.
        ("rename_out", "EACCES"),
    ] {
        assert_eq!(result(&out, op), want, "{op}: {out}");
    }
    // From outside: the moves landed, nothing left or entered the source.
    assert_eq!(ws.read("target/x"), "x\n");
    assert!(!ws.join("target/a/x").exists());
    assert_eq!(std::fs::metadata(ws.join("target/a/y")).map(|m| m.nlink()).unwrap_or(0), 2);
    assert_eq!(ws.read("build/b/z"), "z\n");
    assert!(!ws.join("target/main.rs").exists() && !ws.join("target/lib.rs").exists());
    assert_eq!(snapshot(&ws.join("src")), src_before, "the read-only source changed");

    // Control: with the whole workspace writable the refused three work.
    let control = "t('rename_ro_in', lambda: os.rename('src/main.rs', 'target/main.rs'))\n\
         t('link_ro_in', lambda: os.link('src/lib.rs', 'target/lib.rs'))\n\
         t('rename_out', lambda: os.rename('target/x', 'src/x'))\n";
    let out = in_mode(&ws, control, |r| r.writable = true);
    for op in ["rename_ro_in", "link_ro_in", "rename_out"] {
        assert_eq!(result(&out, op), "OK", "control {op}: {out}");
    }
    assert_eq!(ws.read("target/main.rs"), "fn main() { println!(\"hi\"); }\n");
}
