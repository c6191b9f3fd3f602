//! What a fresh adversarial review of the two sandbox modes found (issue 7/8),
//! attempted for real and checked from outside, each with a control (the
//! same attempt works on the host or with the restriction off) and a pinned
//! errno or typed refusal. Run as root and as uid 65534.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use portcullis::sandbox::{ExecRequest, Mode};
use portcullis::SandboxError;

use super::util::probe_result as result;
use super::util::*;

/// The prologue of every script: `t(name, f)` prints `name OK [value]` or
/// `name ERRNAME`; `c(r)` turns a negative libc return into an OSError.
const PRELUDE: &str = "import ctypes, errno, fcntl, mmap, os, socket, struct, sys, time\n\
libc = ctypes.CDLL(None, use_errno=True)\n\
def t(name, f):\n    try:\n        r = f(); print(name, 'OK', '' if r is None else r, flush=True)\n    except OSError as e:\n        print(name, errno.errorcode.get(e.errno, e.errno), flush=True)\n\
def c(r):\n    if r < 0: raise OSError(ctypes.get_errno(), 'call')\n    return r\n";

/// A request running `script` with /usr/bin/python3 in `ws`.
fn py(ws: &Ws, script: &str) -> ExecRequest {
    ws.req(&["/usr/bin/python3", "-c", &format!("{PRELUDE}{script}")])
}

/// Run `req` and return its stdout (it must exit 0).
fn out_of(req: &ExecRequest) -> String {
    let r = run_ok(req);
    assert_eq!(r.outcome.code(), Some(0), "script failed: {}", stderr(&r));
    stdout(&r)
}

/// Run the same `script` on the host, outside any sandbox (the control).
fn on_host(cwd: &Path, script: &str) -> String {
    python_on_host(cwd, &format!("{PRELUDE}{script}"))
}

fn landlock_only_available(test: &str) -> bool {
    available(test, portcullis::doctor_landlock_abi() >= 6, "landlock-only mode needs Landlock ABI 6")
}

fn real(p: &Path) -> PathBuf {
    fs::canonicalize(p).unwrap_or_else(|e| panic!("canonicalize {}: {e}", p.display()))
}

fn chmod(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode)).unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
}

fn mode_of(p: &Path) -> u32 {
    fs::metadata(p).map(|m| m.mode() & 0o7777).unwrap_or_else(|e| panic!("stat {}: {e}", p.display()))
}

/// Replace a file's content through a shared mapping (no write(2), which
/// would strip the setuid bit), and the siblings that need a writable
/// descriptor: write, truncate, copy_file_range and FICLONE into it.
fn overwrite_script(files: &[(&str, &Path)]) -> String {
    let mut s = String::from(
        "PAY = b'#!/bin/sh\\necho PWNED\\n'\n\
         def via_mmap(p):\n    fd = os.open(p, os.O_RDWR)\n    m = mmap.mmap(fd, 0, mmap.MAP_SHARED)\n    \
         m[:len(PAY)] = PAY.ljust(len(PAY))\n    m.flush(); m.close(); os.close(fd)\n\
         def via_copy(p):\n    src = os.open('/proc/self/exe', os.O_RDONLY)\n    dst = os.open(p, os.O_WRONLY)\n    \
         os.copy_file_range(src, dst, 8, 0, 0)\n\
         def via_clone(p):\n    src = os.open(sys.argv[0] if sys.argv[0] != '-c' else '/proc/self/exe', os.O_RDONLY)\n    \
         dst = os.open(p, os.O_WRONLY)\n    fcntl.ioctl(dst, 0x40049409, src)\n",
    );
    for (name, p) in files {
        let p = p.display();
        s += &format!("t('{name}.mmap', lambda: via_mmap({p:?}))\n", p = p.to_string());
        // The siblings would destroy a control's mapped content: only for
        // the files that are meant to stay.
        if !name.starts_with("ctl") {
            s += &format!(
                "t('{name}.truncate', lambda: os.truncate({p:?}, 0))\n\
                 t('{name}.copy', lambda: via_copy({p:?}))\nt('{name}.clone', lambda: via_clone({p:?}))\n",
                p = p.to_string()
            );
        }
    }
    s
}

const ORIGINAL: &str = "#!/bin/sh\necho original program\n";

#[test]
fn r0100_a_setuid_program_in_a_writable_workspace_cannot_be_rewritten() {
    // Found in review: a writable run could replace a setuid program's
    // content through a shared mapping, which keeps the setuid bit (write(2)
    // would strip it); any host user then ran the command's code as the
    // file's owner (root, for a root caller's workspace: Electron's
    // chrome-sandbox is made root-owned 4755).
    let ws = Ws::new();
    ws.write("dist/chrome-sandbox", ORIGINAL);
    ws.write("dist/setgid-tool", ORIGINAL);
    ws.write("dist/plain", ORIGINAL);
    ws.write("dist/locking", ORIGINAL);
    let suid = ws.join("dist/chrome-sandbox");
    let sgid = ws.join("dist/setgid-tool");
    let plain = ws.join("dist/plain");
    let locking = ws.join("dist/locking");
    chmod(&suid, 0o4755);
    chmod(&sgid, 0o2755);
    chmod(&plain, 0o755);
    // setgid without group execute counts too (write(2) keeps the bit, an
    // access ACL can add the execute bits: r0112).
    chmod(&locking, 0o2644);

    let mut req = ws.req(&["true"]);
    req.writable = true;
    let plan = sandbox().plan(&req).unwrap_or_else(|e| panic!("plan: {e}"));
    assert_eq!(plan.privileged, vec![real(&suid), real(&locking), real(&sgid)], "{:?}", plan.privileged);
    assert!(plan.landlock_gaps.contains(&real(&suid)), "only the mount guards it: a reported Landlock gap");
    let out = cli()
        .args(["exec", "--explain", "--writable", "--workspace"])
        .arg(ws.path())
        .args(["--", "true"])
        .output()
        .unwrap_or_else(|e| panic!("cli: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!("privileged: {}", real(&suid).display()))
            && text.contains(&format!("read-only {}", real(&suid).display())),
        "{text}"
    );

    // The attack, with the control in the same run: the same program
    // without the bit is rewritten as usual.
    let mut req =
        py(&ws, &overwrite_script(&[("suid", &suid), ("sgid", &sgid), ("lock", &locking), ("ctl.plain", &plain)]));
    req.writable = true;
    let out = out_of(&req);
    for name in ["suid", "sgid", "lock"] {
        for how in ["mmap", "truncate", "copy", "clone"] {
            assert_eq!(result(&out, &format!("{name}.{how}")), "EROFS", "{name}.{how}: {out}");
        }
    }
    assert_eq!(result(&out, "ctl.plain.mmap"), "OK", "control: the plain program is writable: {out}");
    // From outside: the privileged programs are untouched, bits and all; the
    // control's content changed.
    for p in [&suid, &sgid, &locking] {
        assert_eq!(fs::read_to_string(p).unwrap_or_default(), ORIGINAL, "{}", p.display());
    }
    assert_eq!(mode_of(&suid), 0o4755);
    assert_eq!(mode_of(&sgid), 0o2755);
    assert_eq!(mode_of(&locking), 0o2644);
    assert!(fs::read_to_string(&plain).unwrap_or_default().contains("PWNED"), "control: the mapping wrote it");

    // The same in a write grant.
    let mut req = py(&ws, &overwrite_script(&[("suid", &suid)]));
    req.write.push("dist".into());
    assert_eq!(result(&out_of(&req), "suid.mmap"), "EROFS");
    assert_eq!(fs::read_to_string(&suid).unwrap_or_default(), ORIGINAL);
}

#[test]
fn r0101_privileged_programs_refuse_landlock_only_runs_and_file_grants() {
    let ws = Ws::new();
    ws.write("dist/chrome-sandbox", ORIGINAL);
    let suid = ws.join("dist/chrome-sandbox");
    chmod(&suid, 0o4755);
    let marker = ws.join("target/ran");
    let sh = format!("echo x > {}", marker.display());

    // A file grant that is itself a setuid program cannot also be read-only.
    let mut req = ws.req(&["sh", "-c", &sh]);
    req.write.push("dist/chrome-sandbox".into());
    let e = run(&req).map(|r| r.outcome.code());
    assert!(
        matches!(&e, Err(SandboxError::GrantRefused { message: m, .. }) if m.contains("is a privileged program (setuid")
            && m.contains("chmod u-s")),
        "{e:?}"
    );

    // File capabilities count too (setting them needs root).
    if is_root() {
        ws.write("dist/capped", ORIGINAL);
        let capped = ws.join("dist/capped");
        chmod(&capped, 0o755);
        // VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE, CAP_NET_RAW (13) permitted.
        let mut v = Vec::new();
        for w in [0x0200_0001u32, 1 << 13, 0, 0, 0] {
            v.extend_from_slice(&w.to_le_bytes());
        }
        let c = std::ffi::CString::new(capped.display().to_string()).unwrap_or_default();
        // SAFETY: both strings are NUL-terminated, the buffer lives across the call.
        let r = unsafe { libc::setxattr(c.as_ptr(), c"security.capability".as_ptr(), v.as_ptr().cast(), v.len(), 0) };
        assert_eq!(r, 0, "setxattr: {}", std::io::Error::last_os_error());
        let mut req = ws.req(&["true"]);
        req.writable = true;
        let plan = sandbox().plan(&req).unwrap_or_else(|e| panic!("plan: {e}"));
        assert_eq!(plan.privileged, vec![real(&capped), real(&suid)]);
        let mut req = py(&ws, &overwrite_script(&[("cap", &capped)]));
        req.writable = true;
        assert_eq!(result(&out_of(&req), "cap.mmap"), "EROFS");
        fs::remove_file(&capped).unwrap_or_else(|e| panic!("rm: {e}"));
    }

    if !landlock_only_available("r0101") {
        return;
    }
    // The landlock-only mode has no mounts: the run is refused by name.
    let mut req = ws.req(&["sh", "-c", &sh]);
    req.writable = true;
    req.degraded = Some(Mode::LandlockOnly);
    let e = run(&req).map(|r| r.outcome.code());
    assert!(
        matches!(&e, Err(SandboxError::Unsupported { message: m, .. }) if m.contains("landlock-only mode cannot keep privileged programs")
            && m.contains(&real(&suid).display().to_string()) && m.contains("chmod u-s")),
        "{e:?}"
    );
    assert!(!marker.exists(), "nothing ran");
    // Control: with the bit cleared the same run works.
    chmod(&suid, 0o755);
    let r = run_ok(&req);
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    assert!(marker.exists());
}

/// A host datagram service at `path` (as /dev/log or journald's socket are).
fn host_service(path: &Path) -> std::os::unix::net::UnixDatagram {
    let s = std::os::unix::net::UnixDatagram::bind(path).unwrap_or_else(|e| panic!("bind {}: {e}", path.display()));
    chmod(path, 0o666);
    s.set_nonblocking(true).unwrap_or_else(|e| panic!("nonblocking: {e}"));
    s
}

/// Every datagram waiting at the service.
fn received(s: &std::os::unix::net::UnixDatagram) -> Vec<String> {
    let mut out = Vec::new();
    let mut buf = [0u8; 256];
    while let Ok(n) = s.recv(&mut buf) {
        out.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    out
}

/// Reach the service at `sock` from socketpair ends and a plain socket.
fn datagram_script(sock: &Path, listener: &Path) -> String {
    format!(
        "P = {p:?}\nL = {l:?}\n\
         t('pair.dgram', lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM))\n\
         t('pair.dgram_cloexec', lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC))\n\
         t('pair.seqpacket', lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET))\n\
         def dgram_send():\n    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)\n    a.sendto(b'forged by dgram pair', P)\n\
         def dgram_connect():\n    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)\n    b.connect(P); b.send(b'forged by connect')\n\
         t('dgram.sendto', dgram_send)\nt('dgram.connect', dgram_connect)\n\
         a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_NONBLOCK)\n\
         t('pair.stream', lambda: a.send(b'x') and None)\n\
         t('stream.sendto', lambda: a.sendto(b'forged by stream pair', P))\n\
         t('stream.connect_dgram', lambda: b.connect(P))\n\
         t('stream.connect', lambda: b.connect(L))\n\
         t('stream.sendto_stream', lambda: a.sendto(b'forged', L))\n\
         def seq_send():\n    c, d = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)\n    c.sendto(b'forged by seqpacket pair', P)\n    return 'peer got ' + d.recv(64).decode()\n\
         def seq_connect(to):\n    c, d = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n    c.connect(to)\n\
         t('seqpacket.sendto', seq_send)\n\
         t('seqpacket.connect', lambda: seq_connect(L))\n\
         t('seqpacket.connect_dgram', lambda: seq_connect(P))\n\
         def plain():\n    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n    s.sendto(b'forged by socket', P)\n\
         t('socket.sendto', plain)\n",
        p = sock.display().to_string(),
        l = listener.display().to_string()
    )
}

#[test]
fn r0102_no_datagram_reaches_a_host_socket_from_a_socketpair() {
    // Found in review: the landlock-only mode refused socket(AF_UNIX) but
    // not socketpair(AF_UNIX, SOCK_DGRAM), whose end could sendto() (or
    // connect() to) any host path datagram socket, outside every Landlock
    // rule: a host service got a forged datagram with the caller's
    // credentials.
    let ws = Ws::new();
    let outside = Ws::new();
    let sock = outside.join("svc.sock");
    let svc = host_service(&sock);
    // A host stream service too (an ssh-agent, a D-Bus bus).
    let lsock = outside.join("agent.sock");
    let listener =
        std::os::unix::net::UnixListener::bind(&lsock).unwrap_or_else(|e| panic!("bind {}: {e}", lsock.display()));
    chmod(&lsock, 0o666);
    listener.set_nonblocking(true).unwrap_or_else(|e| panic!("nonblocking: {e}"));
    let script = datagram_script(&sock, &lsock);
    let _c = std::os::unix::net::UnixStream::connect(&lsock).unwrap_or_else(|e| panic!("connect: {e}"));
    assert!(listener.accept().is_ok(), "control: a host process reaches the listener");
    // Control: a host process reaches the service.
    let host = std::os::unix::net::UnixDatagram::unbound().unwrap_or_else(|e| panic!("socket: {e}"));
    host.send_to(b"from the host", &sock).unwrap_or_else(|e| panic!("send_to: {e}"));
    assert_eq!(received(&svc), vec!["from the host".to_string()], "control: the host service receives");
    // Control: the script itself works on the host (the datagrams land).
    let out = on_host(ws.path(), &script);
    assert_eq!(result(&out, "dgram.sendto"), "OK", "{out}");
    assert_eq!(received(&svc).len(), 3, "control: the script's datagrams reach the service from the host: {out}");

    // The full sandbox: unix sockets are allowed, but a host path socket
    // outside the plan is not in the mount view at all.
    let out = out_of(&py(&ws, &script));
    assert_eq!(result(&out, "pair.dgram"), "OK", "{out}");
    for op in ["dgram.sendto", "dgram.connect", "socket.sendto"] {
        assert_eq!(result(&out, op), "ENOENT", "{op}: {out}");
    }
    assert_eq!(received(&svc), Vec::<String>::new(), "nothing reached the host service from the full sandbox");

    if !landlock_only_available("r0102") {
        return;
    }
    let mut req = py(&ws, &script);
    req.degraded = Some(Mode::LandlockOnly);
    let out = out_of(&req);
    for op in ["pair.dgram", "pair.dgram_cloexec", "dgram.sendto", "dgram.connect", "socket.sendto"] {
        assert_eq!(result(&out, op), "EPERM", "{op}: {out}");
    }
    // A stream pair works, and a connected stream end cannot be pointed
    // elsewhere. A seqpacket pair too (Rust's std makes one to spawn, and
    // cargo could not run rustc without it; found in review): its
    // `sendto` goes to its peer whatever address it names, and it cannot
    // be connected anew.
    assert_eq!(result(&out, "pair.seqpacket"), "OK", "{out}");
    assert_eq!(result(&out, "seqpacket.sendto"), "OK", "{out}");
    assert!(out.contains("seqpacket.sendto OK peer got forged by seqpacket pair"), "{out}");
    assert_eq!(result(&out, "seqpacket.connect"), "EPROTOTYPE", "{out}");
    assert_eq!(result(&out, "seqpacket.connect_dgram"), "EPROTOTYPE", "{out}");
    assert_eq!(result(&out, "pair.stream"), "OK", "{out}");
    assert_eq!(result(&out, "stream.sendto"), "EISCONN", "{out}");
    assert_eq!(result(&out, "stream.connect"), "EISCONN", "{out}");
    assert_eq!(result(&out, "stream.sendto_stream"), "EISCONN", "{out}");
    assert_eq!(result(&out, "stream.connect_dgram"), "EPROTOTYPE", "{out}");
    assert_eq!(received(&svc), Vec::<String>::new(), "nothing reached the host service, checked from outside");
    assert!(
        listener.accept().is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "no connection reached the host listener"
    );
}

/// Take a read lease (and a dnotify watch) on `file`.
fn lease_script(file: &Path, dir: &Path) -> String {
    format!(
        "fd = os.open({f:?}, os.O_RDONLY)\n\
         t('lease', lambda: fcntl.fcntl(fd, fcntl.F_SETLEASE, fcntl.F_RDLCK) and None)\n\
         t('getlease', lambda: fcntl.fcntl(fd, fcntl.F_GETLEASE))\n\
         d = os.open({d:?}, os.O_RDONLY | os.O_DIRECTORY)\n\
         t('notify', lambda: fcntl.fcntl(d, fcntl.F_NOTIFY, fcntl.DN_MODIFY | fcntl.DN_MULTISHOT) and None)\n\
         t('getfl', lambda: fcntl.fcntl(fd, fcntl.F_GETFL) and None)\n",
        f = file.display().to_string(),
        d = dir.display().to_string()
    )
}

#[test]
fn r0104_no_lease_on_a_file_the_command_may_only_read() {
    // Found in review: a read lease taken by the command on a file it may
    // only read (the read-only workspace, a read root; any readable file in
    // landlock-only mode) held every host writer up to lease-break-time.
    let ws = Ws::new();
    let file = ws.join("README.md");
    let script = lease_script(&file, ws.path());
    // Control: on the host the same lease is granted (F_RDLCK is 0).
    let host = on_host(ws.path(), &script);
    assert_eq!(result(&host, "lease"), "OK", "control: the host grants the lease: {host}");
    assert_eq!(result(&host, "notify"), "OK", "control: the host grants dnotify: {host}");

    let out = out_of(&py(&ws, &script));
    assert_eq!(result(&out, "lease"), "EPERM", "{out}");
    assert_eq!(result(&out, "getfl"), "OK", "other fcntl commands work: {out}");
    // From outside: a host writer is not held up after the run either.
    let t = std::time::Instant::now();
    fs::write(&file, "host write\n").unwrap_or_else(|e| panic!("write: {e}"));
    assert!(t.elapsed() < std::time::Duration::from_secs(2));

    if !landlock_only_available("r0104") {
        return;
    }
    let mut req = py(&ws, &script);
    req.degraded = Some(Mode::LandlockOnly);
    let out = out_of(&req);
    assert_eq!(result(&out, "lease"), "EPERM", "{out}");
    assert_eq!(result(&out, "notify"), "EPERM", "dnotify is refused like inotify: {out}");
    assert_eq!(result(&out, "getfl"), "OK", "{out}");
}

/// A FIFO at `path`, with `input` waiting in it; returns a read-write
/// descriptor (it keeps the FIFO open both ways, so no open blocks) and a
/// read-only one to hand the CLI as its stdin.
fn fifo_with(path: &Path, input: &[u8]) -> (fs::File, fs::File) {
    use std::io::Write;
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o666))
        .unwrap_or_else(|e| panic!("mkfifo {}: {e}", path.display()));
    chmod(path, 0o666);
    let mut rw = fs::OpenOptions::new().read(true).write(true).open(path).unwrap_or_else(|e| panic!("open: {e}"));
    rw.write_all(input).unwrap_or_else(|e| panic!("write: {e}"));
    let r = fs::File::open(path).unwrap_or_else(|e| panic!("open: {e}"));
    (rw, r)
}

/// What is left in the FIFO (read without blocking).
fn left_in(rw: &fs::File) -> Vec<u8> {
    use std::io::Read;
    use std::os::fd::AsFd;
    let fl = nix::fcntl::fcntl(rw.as_fd(), nix::fcntl::FcntlArg::F_GETFL).unwrap_or_else(|e| panic!("{e}"));
    let fl = nix::fcntl::OFlag::from_bits_truncate(fl) | nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(rw.as_fd(), nix::fcntl::FcntlArg::F_SETFL(fl)).unwrap_or_else(|e| panic!("{e}"));
    let mut out = Vec::new();
    let mut buf = [0u8; 256];
    let mut f = rw;
    while let Ok(n) = f.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

#[test]
fn r0103_a_named_fifo_on_stdin_inside_the_sandbox_view_refuses_the_run() {
    // Found in review: the relay keeps the command off the caller's stdin
    // descriptor, but a named FIFO inside the workspace could be opened by
    // name: the command stole the caller's input or injected lines into it.
    let ws = Ws::new();
    let outside = Ws::new();
    let marker = ws.join("target/ran");
    let attack = format!(
        "(echo INJECTED > {fifo}) 2>/dev/null; timeout 1 head -c 3 {fifo} 2>/dev/null; echo ran > {m}",
        fifo = ws.join("in").display(),
        m = marker.display()
    );
    let modes: &[&[&str]] = if landlock_only_available("r0103") {
        &[&["--writable"], &["--writable", "--degraded", "landlock-only"]]
    } else {
        &[&["--writable"]]
    };
    for mode in modes {
        let fifo = ws.join("in");
        let (rw, r) = fifo_with(&fifo, b"l1\nl2\n");
        let out = cli()
            .arg("exec")
            .args(*mode)
            .arg("--workspace")
            .arg(ws.path())
            .args(["--", "sh", "-c", &attack])
            .stdin(r)
            .output()
            .unwrap_or_else(|e| panic!("cli: {e}"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{mode:?}: {err}");
        assert!(
            err.contains(&format!("the caller's stdin is the named FIFO {}", real(&fifo).display()))
                && err.contains("a named FIFO is never passed")
                && err.contains("anonymous pipe"),
            "{mode:?}: {err}"
        );
        assert!(!marker.exists(), "{mode:?}: nothing ran");
        assert_eq!(left_in(&rw), b"l1\nl2\n", "{mode:?}: the caller's input is whole, nothing injected");
        fs::remove_file(&fifo).unwrap_or_else(|e| panic!("rm: {e}"));

        // Control: the same run with a FIFO outside the sandbox's view that
        // has no name left (unlinked once opened) runs, and the command
        // cannot reach the FIFO by its old name. (One that still has a name
        // is refused wherever it lies: r0114.)
        let far = outside.join("in");
        let (rw, r) = fifo_with(&far, b"l1\nl2\n");
        fs::remove_file(&far).unwrap_or_else(|e| panic!("rm: {e}"));
        let probe = format!(
            "(echo INJECTED > {f}) 2>/dev/null || echo cannot-open; echo ran > {m}",
            f = far.display(),
            m = marker.display()
        );
        let out = cli()
            .arg("exec")
            .args(*mode)
            .arg("--workspace")
            .arg(ws.path())
            .args(["--", "sh", "-c", &probe])
            .stdin(r)
            .output()
            .unwrap_or_else(|e| panic!("cli: {e}"));
        assert!(out.status.success(), "{mode:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stdout).contains("cannot-open"), "{mode:?}");
        assert!(marker.exists(), "control {mode:?}: the run ran");
        assert_eq!(left_in(&rw), b"l1\nl2\n", "{mode:?}");
        fs::remove_file(&marker).unwrap_or_else(|e| panic!("rm: {e}"));
    }
}

/// `u::rwx,g::r-x,o::r-x` as a `system.posix_acl_access` value: version 2,
/// then (tag, perm, id) for the owner, the group and others.
const ACL_755: &str = "struct.pack('<I', 2) + b''.join(struct.pack('<HHI', tag, perm, 0xffffffff) \
                       for tag, perm in ((0x01, 7), (0x04, 5), (0x20, 5)))";

/// Put a program in `p` with write(2) (which keeps the setgid bit of a file
/// without group execute), then make it executable through an access ACL
/// (no chmod: the ACL sets the mode bits, and keeps the setgid bit).
fn setgid_acl_script(files: &[(&str, &Path)]) -> String {
    let mut s = format!(
        "ACL = {ACL_755}\n\
         def write(p):\n    fd = os.open(p, os.O_WRONLY)\n    os.write(fd, b'#!/bin/sh\\necho PWNED\\n'); os.close(fd)\n\
         def acl(p):\n    fd = os.open(p, os.O_RDONLY)\n    os.setxattr(fd, 'system.posix_acl_access', ACL); os.close(fd)\n    \
         return oct(os.stat(p).st_mode & 0o7777)\n"
    );
    for (name, p) in files {
        let p = p.display().to_string();
        s += &format!("t('{name}.write', lambda: write({p:?}))\nt('{name}.acl', lambda: acl({p:?}))\n");
    }
    s
}

#[test]
fn r0112_a_setgid_file_without_group_execute_cannot_become_a_setgid_program() {
    // Found in the third review: a setgid file without group execute (root:root
    // 2644) in a writable area was left writable (the bit "marks mandatory
    // locking"); write(2) keeps the bit there, and an access ACL with
    // g::r-x then set the execute bits and kept it: a setgid-root program
    // with the command's code on the host.
    let ws = Ws::new();
    ws.write("dist/tool", ORIGINAL);
    ws.write("dist/ctl", ORIGINAL);
    let tool = ws.join("dist/tool");
    let ctl = ws.join("dist/ctl");
    chmod(&tool, 0o2644);
    chmod(&ctl, 0o644);

    // Control with the restriction off: on the host the same steps turn a
    // 2644 file the writer owns into a setgid program.
    let host = Ws::new();
    host.write("tool", ORIGINAL);
    let host_tool = host.join("tool");
    chmod(&host_tool, 0o2644);
    let out = on_host(host.path(), &setgid_acl_script(&[("host", &host_tool)]));
    assert_eq!(result(&out, "host.write"), "OK", "{out}");
    assert_eq!(result(&out, "host.acl"), "OK", "{out}");
    assert_eq!(mode_of(&host_tool), 0o2755, "control: write(2) and the ACL keep the setgid bit: {out}");

    let mut req = ws.req(&["true"]);
    req.writable = true;
    let plan = sandbox().plan(&req).unwrap_or_else(|e| panic!("plan: {e}"));
    assert_eq!(plan.privileged, vec![real(&tool)], "{:?}", plan.privileged);

    let mut req = py(&ws, &setgid_acl_script(&[("tool", &tool), ("ctl", &ctl)]));
    req.writable = true;
    let out = out_of(&req);
    assert_eq!(result(&out, "tool.write"), "EROFS", "{out}");
    assert_eq!(result(&out, "tool.acl"), "EROFS", "{out}");
    // Control in the same run: the same file without the bit is written and
    // made executable through the ACL.
    assert_eq!(result(&out, "ctl.write"), "OK", "{out}");
    assert_eq!(result(&out, "ctl.acl"), "OK", "{out}");
    // From outside.
    assert_eq!(fs::read_to_string(&tool).unwrap_or_default(), ORIGINAL);
    assert_eq!(mode_of(&tool), 0o2644);
    assert!(fs::read_to_string(&ctl).unwrap_or_default().contains("PWNED"), "control: ctl was written");
    assert_eq!(mode_of(&ctl), 0o755, "control: the ACL set the mode bits");

    // A file grant that is such a file cannot also be read-only.
    let mut req = ws.req(&["true"]);
    req.write.push("dist/tool".into());
    let e = run(&req).map(|r| r.outcome.code());
    assert!(
        matches!(&e, Err(SandboxError::GrantRefused { message: m, .. }) if m.contains("is a privileged program (setgid to gid")),
        "{e:?}"
    );
    if !landlock_only_available("r0112") {
        return;
    }
    let mut req = ws.req(&["true"]);
    req.writable = true;
    req.degraded = Some(Mode::LandlockOnly);
    let e = run(&req).map(|r| r.outcome.code());
    assert!(
        matches!(&e, Err(SandboxError::Unsupported { message: m, .. }) if m.contains("landlock-only mode cannot keep privileged programs")
            && m.contains(&real(&tool).display().to_string())),
        "{e:?}"
    );
}

/// Set `security.capability` (CAP_SETUID, permitted and effective) on `p`.
fn set_caps(p: &Path) {
    // VFS_CAP_REVISION_2 | VFS_CAP_FLAGS_EFFECTIVE, CAP_SETUID (7) permitted.
    let mut v = Vec::new();
    for w in [0x0200_0001u32, 1 << 7, 0, 0, 0] {
        v.extend_from_slice(&w.to_le_bytes());
    }
    let c = std::ffi::CString::new(p.display().to_string()).unwrap_or_default();
    // SAFETY: both strings are NUL-terminated, the buffer lives across the call.
    let r = unsafe { libc::setxattr(c.as_ptr(), c"security.capability".as_ptr(), v.as_ptr().cast(), v.len(), 0) };
    assert_eq!(r, 0, "setxattr {}: {}", p.display(), std::io::Error::last_os_error());
}

/// Whether `p` carries `security.capability`.
fn has_caps(p: &Path) -> bool {
    let c = std::ffi::CString::new(p.display().to_string()).unwrap_or_default();
    // SAFETY: both strings are NUL-terminated; a null buffer of size 0 asks
    // only for the value's size.
    unsafe { libc::getxattr(c.as_ptr(), c"security.capability".as_ptr(), std::ptr::null_mut(), 0) > 0 }
}

#[test]
fn r0113_a_file_with_capabilities_and_no_execute_bit_cannot_be_rewritten() {
    // Found in the third review: a 0644 file with security.capability was
    // left writable (the xattr was looked for on executables only); the
    // command put its code in through a shared mapping (which keeps the
    // xattr) and chmod 755 (allowed: no setuid/setgid bit): a cap_setuid
    // program of its making on the host.
    if !in_root_pass("r0113", "setting file capabilities needs root") {
        return;
    }
    let ws = Ws::new();
    ws.write("dist/helper", ORIGINAL);
    ws.write("dist/ctl", ORIGINAL);
    let helper = ws.join("dist/helper");
    let ctl = ws.join("dist/ctl");
    chmod(&helper, 0o644);
    chmod(&ctl, 0o644);
    set_caps(&helper);
    assert!(has_caps(&helper) && !has_caps(&ctl));

    let mut req = ws.req(&["true"]);
    req.writable = true;
    let plan = sandbox().plan(&req).unwrap_or_else(|e| panic!("plan: {e}"));
    assert_eq!(plan.privileged, vec![real(&helper)], "{:?}", plan.privileged);

    let script = format!(
        "{}t('helper.chmod', lambda: os.chmod({h:?}, 0o755))\nt('ctl.chmod', lambda: os.chmod({c:?}, 0o755))\n",
        overwrite_script(&[("helper", &helper), ("ctl", &ctl)]),
        h = helper.display().to_string(),
        c = ctl.display().to_string()
    );
    let mut req = py(&ws, &script);
    req.writable = true;
    let out = out_of(&req);
    for how in ["mmap", "truncate", "copy", "clone", "chmod"] {
        assert_eq!(result(&out, &format!("helper.{how}")), "EROFS", "helper.{how}: {out}");
    }
    // Control in the same run: the same file without the xattr is rewritten
    // through the mapping and made executable.
    assert_eq!(result(&out, "ctl.mmap"), "OK", "{out}");
    assert_eq!(result(&out, "ctl.chmod"), "OK", "{out}");
    // From outside: the capability file is untouched, xattr and all.
    assert_eq!(fs::read_to_string(&helper).unwrap_or_default(), ORIGINAL);
    assert_eq!(mode_of(&helper), 0o644);
    assert!(has_caps(&helper), "the capabilities are still there (nothing rewrote the file)");
    assert!(fs::read_to_string(&ctl).unwrap_or_default().contains("PWNED"), "control: ctl was rewritten");
    assert_eq!(mode_of(&ctl), 0o755);
}

/// A long-lived sandbox remembers the files it found without capabilities
/// (so that its next walks need not look them up; since session 29 by the
/// directory they are in): a capability set on one of them between two
/// plans changes its ctime, and the next plan keeps it read-only. Checked
/// from outside in a run: the program is not rewritten; control in the
/// same run: its neighbour without capabilities is.
#[test]
fn r0115_capabilities_set_between_two_plans_of_one_sandbox_are_seen() {
    if !in_root_pass("r0115", "setting file capabilities needs root") {
        return;
    }
    let ws = Ws::new();
    ws.write("dist/tool", ORIGINAL);
    ws.write("dist/other", ORIGINAL);
    let (tool, other) = (ws.join("dist/tool"), ws.join("dist/other"));
    chmod(&tool, 0o755);
    // Files changed within two seconds before a walk are never
    // remembered (`links::CTIME_MARGIN`): these must be older.
    std::thread::sleep(std::time::Duration::from_millis(2200));
    let sb = sandbox();
    let mut req = ws.req(&["true"]);
    req.writable = true;
    for i in 0..2 {
        let plan = sb.plan(&req).unwrap_or_else(|e| panic!("plan {i}: {e}"));
        assert!(plan.privileged.is_empty(), "plan {i}: {:?}", plan.privileged);
    }
    set_caps(&tool);
    let plan = sb.plan(&req).unwrap_or_else(|e| panic!("plan: {e}"));
    assert_eq!(plan.privileged, vec![real(&tool)], "the capability set since is not seen");
    let mut req = ws.req(&["sh", "-c", "echo PWNED >> dist/tool; echo PWNED >> dist/other"]);
    req.writable = true;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| panic!("{e}"));
    let r = rt
        .block_on(sb.run(&req, portcullis::sandbox::RunOptions::default()))
        .unwrap_or_else(|e| panic!("run: {}", portcullis::error_chain(&e)));
    assert!(stderr(&r).contains("Read-only file system"), "{}", stderr(&r));
    assert_eq!(fs::read_to_string(&tool).unwrap_or_default(), ORIGINAL);
    assert!(has_caps(&tool));
    assert!(fs::read_to_string(&other).unwrap_or_default().contains("PWNED"), "control: other was not written");
}

/// A bind mount of `src` at `dst` for the test's life.
struct Bind(PathBuf);

impl Bind {
    fn new(src: &Path, dst: &Path) -> Bind {
        use nix::mount::{mount, MsFlags};
        mount(Some(src), dst, None::<&str>, MsFlags::MS_BIND, None::<&str>)
            .unwrap_or_else(|e| panic!("bind {} at {}: {e}", src.display(), dst.display()));
        Bind(dst.to_path_buf())
    }
}

impl Drop for Bind {
    fn drop(&mut self) {
        let _ = nix::mount::umount2(&self.0, nix::mount::MntFlags::MNT_DETACH);
    }
}

#[test]
fn r0114_a_named_fifo_on_stdin_is_refused_wherever_it_was_opened() {
    // Found in the third review: the refusal judged the path /proc/self/fd/0
    // showed, so a FIFO in the workspace opened through a host bind of it
    // (outside the view) was let through, and the command opened it by its
    // name in the workspace. Now every named FIFO with a name is refused.
    let ws = Ws::new();
    let outside = Ws::new();
    let marker = ws.join("target/ran");
    let fifo = ws.join("in");
    let attack = format!(
        "(echo INJECTED > {f}) 2>/dev/null; timeout 1 head -c 3 {f} 2>/dev/null; echo ran > {m}",
        f = fifo.display(),
        m = marker.display()
    );
    let exec = |stdin: std::process::Stdio, argv: &[&str]| {
        cli()
            .args(["exec", "--writable", "--workspace"])
            .arg(ws.path())
            .arg("--")
            .args(argv)
            .stdin(stdin)
            .output()
            .unwrap_or_else(|e| panic!("cli: {e}"))
    };
    let refused = |out: &std::process::Output, name: &Path, what: &str| {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{what}: {err}");
        assert!(
            err.contains(&format!("the caller's stdin is the named FIFO {}", name.display()))
                && err.contains("a named FIFO is never passed")
                && err.contains("cat FIFO | portcullis exec"),
            "{what}: {err}"
        );
    };
    // A FIFO outside the view (before: let through; the same FIFO may be in
    // the view by another way portcullis cannot see).
    let far = outside.join("in");
    let (rw, r) = fifo_with(&far, b"l1\nl2\n");
    let out = exec(r.into(), &["sh", "-c", &format!("echo ran > {}", marker.display())]);
    refused(&out, &real(&far), "outside the view");
    assert!(!marker.exists(), "nothing ran");
    assert_eq!(left_in(&rw), b"l1\nl2\n");
    drop(rw);
    fs::remove_file(&far).unwrap_or_else(|e| panic!("rm: {e}"));

    // The review's case: the workspace FIFO opened through a bind alias of
    // the workspace (mounting needs host root).
    if in_root_pass("r0114", "the bind alias needs host root to mount") {
        let (rw, _r) = fifo_with(&fifo, b"l1\nl2\n");
        let alias = Ws::new();
        let _bind = Bind::new(ws.path(), alias.path());
        let by_alias = alias.join("in");
        let r = fs::File::open(&by_alias).unwrap_or_else(|e| panic!("open: {e}"));
        let out = exec(r.into(), &["sh", "-c", &attack]);
        refused(&out, &by_alias, "through a bind alias");
        assert!(!marker.exists(), "nothing ran");
        assert_eq!(left_in(&rw), b"l1\nl2\n", "the caller's input is whole, nothing injected");
        drop(_bind);
        fs::remove_file(&fifo).unwrap_or_else(|e| panic!("rm: {e}"));
    }

    // Control: the same input through `cat FIFO |` runs, and the command
    // reads it from its stdin.
    let (rw, r) = fifo_with(&far, b"l1\nl2\n");
    drop(r);
    let mut cat = Command::new("cat")
        .arg(&far)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cat: {e}"));
    let pipe = cat.stdout.take().unwrap_or_else(|| panic!("cat's stdout"));
    // `rw` keeps a writer (cat's open does not block, the input is not
    // dropped); the command takes its two lines, then cat gets its EOF.
    let out = exec(pipe.into(), &["sh", "-c", &format!("head -n 2; echo ran > {}", marker.display())]);
    drop(rw);
    let _ = cat.wait();
    assert!(out.status.success(), "control: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "l1\nl2\n", "control: the command read the input");
    assert!(marker.exists(), "control: the run ran");
    fs::remove_file(&marker).unwrap_or_else(|e| panic!("rm: {e}"));

    // A FIFO with no name left (unlinked after it was opened) runs too.
    fs::remove_file(&far).unwrap_or_else(|e| panic!("rm: {e}"));
    let (rw, r) = fifo_with(&far, b"l1\nl2\n");
    fs::remove_file(&far).unwrap_or_else(|e| panic!("rm: {e}"));
    drop(rw);
    let out = exec(r.into(), &["sh", "-c", &format!("cat; echo ran > {}", marker.display())]);
    assert!(out.status.success(), "unlinked: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "l1\nl2\n", "the command read the unlinked FIFO's input");
    assert!(marker.exists());
}
