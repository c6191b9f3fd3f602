//! Concurrent runs of one workspace: no descriptor or capability passes from
//! one run to another, and the workspace lock is out of every command's
//! reach (issue 7, item 5 and hardening 2).

use std::fs;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use portcullis::sandbox::{ExecRequest, RunOptions, Stream};
use portcullis::{ExecResult, Network, SandboxError};
use tokio_util::sync::CancellationToken;

use super::util::*;

/// Run `req`; send `()` on `started` at the first output chunk.
fn run_signalling(req: &ExecRequest, started: mpsc::Sender<()>) -> Result<ExecResult, SandboxError> {
    run_with(req, Some(started), None)
}

fn run_with(
    req: &ExecRequest,
    started: Option<mpsc::Sender<()>>,
    cancel: Option<CancellationToken>,
) -> Result<ExecResult, SandboxError> {
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| panic!("runtime: {e}"));
    let on_output = started.map(|tx| {
        Box::new(move |_: Stream, _: &[u8]| {
            let _ = tx.send(());
        }) as portcullis::sandbox::OutputSink
    });
    rt.block_on(sandbox().run(req, RunOptions { on_output, cancel, ..RunOptions::default() }))
}

fn py(ws: &Ws, script: &str, args: &[&str]) -> ExecRequest {
    let mut argv = vec!["/usr/bin/python3", "-c", script];
    argv.extend_from_slice(args);
    ws.req(&argv)
}

/// The writable run: bind a socket in the workspace (and, as controls, in
/// the private /tmp, and a socketpair that carries a descriptor within the
/// run); when the bind works, hand descriptors of `.git` and a tracked file
/// to whoever connects.
const GIVER: &str = r#"
import array, errno, os, socket, sys
ws = sys.argv[1]
def err(e): return errno.errorcode.get(e.errno, str(e.errno))
t = socket.socket(socket.AF_UNIX)
try:
    t.bind("/tmp/private.sock"); print("bind_tmp OK")
except OSError as e: print("bind_tmp", err(e))
a, b = socket.socketpair()
fd = os.open(ws + "/README.md", os.O_RDONLY)
a.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))])
msg, anc, _, _ = b.recvmsg(1, socket.CMSG_SPACE(4))
got = array.array("i"); got.frombytes(anc[0][2])
print("pair", "OK" if os.read(got[0], 6) == b"readme" else "BAD")
s = socket.socket(socket.AF_UNIX)
try:
    s.bind(ws + "/.pc.sock"); print("bind_ws OK", flush=True)
except OSError as e:
    print("bind_ws", err(e)); sys.exit(0)
s.listen(1); s.settimeout(15)
c, _ = s.accept()
fds = [os.open(ws + "/.git", os.O_RDONLY | os.O_DIRECTORY), os.open(ws + "/src/lib.rs", os.O_RDWR)]
c.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
c.recv(1)
print("gave OK")
"#;

/// The read-only run: connect to the writable run's socket, take its
/// descriptors, wait until that run has ended, then write through them.
const TAKER: &str = r#"
import array, errno, os, socket, sys, time
ws = sys.argv[1]
def err(e): return errno.errorcode.get(e.errno, str(e.errno))
end = time.time() + 4
while True:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(ws + "/.pc.sock"); break
    except OSError as e:
        if time.time() > end:
            print("connect", err(e)); sys.exit(0)
        time.sleep(0.05)
print("connect OK")
msg, anc, _, _ = s.recvmsg(1, socket.CMSG_SPACE(8))
fds = array.array("i"); fds.frombytes(anc[0][2])
s.close()
end = time.time() + 20
while not os.path.exists(ws + "/go") and time.time() < end:
    time.sleep(0.05)
try:
    os.ftruncate(fds[1], 0); os.write(fds[1], b"stolen\n"); print("write OK")
except OSError as e: print("write", err(e))
try:
    os.fchmod(fds[0], 0o700); print("fchmod OK")
except OSError as e: print("fchmod", err(e))
"#;

/// One round of the attack: the giver (writable, Landlock off when
/// `break_landlock`) and the taker (read-only, or, with `taker_grant`,
/// writable in `target` only, so that `src/` and `.git` are read-only for
/// it too) run at once.
pub(super) fn fd_passing_round(break_landlock: bool, taker_grant: bool) -> (Ws, String, String) {
    let ws = Ws::with_git();
    fs::set_permissions(ws.join(".git"), fs::Permissions::from_mode(0o755)).unwrap_or_else(|e| panic!("chmod: {e}"));
    let wsp = ws.path().display().to_string();
    let mut giver = py(&ws, GIVER, &[&wsp]);
    giver.writable = true;
    giver.test_switches.skip_landlock = break_landlock;
    let mut taker = py(&ws, TAKER, &[&wsp]);
    if taker_grant {
        taker.write = vec![ws.join("target")];
    }
    let t = std::thread::spawn(move || run_ok(&taker));
    let g = run_ok(&giver);
    assert_eq!(g.outcome.code(), Some(0), "giver: {}", stderr(&g));
    // The writable run and its guard have ended: now the taker writes.
    fs::write(ws.join("go"), "").unwrap_or_else(|e| panic!("go: {e}"));
    let r = t.join().unwrap_or_else(|_| panic!("taker thread panicked"));
    assert_eq!(r.outcome.code(), Some(0), "taker: {}", stderr(&r));
    (ws, stdout(&g), stdout(&r))
}

#[test]
fn r0066_a_read_only_run_cannot_borrow_a_writable_runs_descriptors() {
    let (ws, giver, taker) = fd_passing_round(false, false);
    // The writable run cannot make a socket in the workspace (Landlock's
    // make-sock right is withheld there), while its private /tmp and a
    // socketpair within the run work.
    assert!(giver.contains("bind_ws EACCES"), "{giver}");
    assert!(giver.contains("bind_tmp OK"), "{giver}");
    assert!(giver.contains("pair OK"), "{giver}");
    assert!(taker.contains("connect ENOENT"), "{taker}");
    assert!(!ws.join(".pc.sock").exists());
    // From outside: nothing changed.
    assert_eq!(fs::metadata(ws.join(".git")).map(|m| m.mode() & 0o777).ok(), Some(0o755));
    assert_eq!(ws.read("src/lib.rs"), "pub fn f() {}\n");

    // CONTROL: with the writable run's Landlock broken (the mount alone
    // would let it bind), the same two runs do hand the descriptors over,
    // and the read-only run writes through them after the writable run and
    // its git guard are gone.
    let (ws, giver, taker) = fd_passing_round(true, false);
    assert!(giver.contains("bind_ws OK") && giver.contains("gave OK"), "{giver}");
    assert!(taker.contains("connect OK") && taker.contains("write OK"), "{taker}");
    assert!(taker.contains("fchmod OK"), "{taker}");
    assert_eq!(ws.read("src/lib.rs"), "stolen\n");
    assert_eq!(fs::metadata(ws.join(".git")).map(|m| m.mode() & 0o777).ok(), Some(0o700));
}

/// The caller's lock directory, as the library names it.
fn lock_dir() -> PathBuf {
    let uid = nix::unistd::getuid().as_raw();
    let base = if Path::new("/dev/shm").is_dir() { "/dev/shm" } else { "/tmp" };
    PathBuf::from(format!("{base}/portcullis-{uid}"))
}

fn lock_file(ws: &Ws) -> PathBuf {
    let m = fs::metadata(ws.path()).unwrap_or_else(|e| panic!("stat: {e}"));
    lock_dir().join(format!("ws2-{:x}-{:x}.lock", m.dev(), m.ino()))
}

/// The workspace's lock file as a run makes it (mode 600, in the caller's
/// lock directory, which a writable run has made): a run's cleanup that
/// leaves no record removes it, so a test that needs it makes it.
fn make_lock_file(ws: &Ws) -> PathBuf {
    use std::os::unix::fs::OpenOptionsExt;
    let file = lock_file(ws);
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&file)
        .unwrap_or_else(|e| panic!("make {}: {e}", file.display()));
    file
}

const TRY_LOCK: &str = r#"
import errno, fcntl, os, sys
def err(e): return errno.errorcode.get(e.errno, str(e.errno))
for name, p in (("dir", sys.argv[1]), ("file", sys.argv[2])):
    try:
        fd = os.open(p, os.O_RDONLY); fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB); print(name, "OK")
    except OSError as e: print(name, err(e))
if len(sys.argv) > 3:
    # The numbers can be listed (same uid); opening one, or reading where
    # it leads, needs ptrace access, which Landlock refuses across domains.
    d = "/proc/%s/fd" % sys.argv[3]
    res = set()
    for n in os.listdir(d):
        for f in (lambda p: os.close(os.open(p, os.O_RDONLY)), os.readlink):
            try: f(d + "/" + n); res.add("OK")
            except OSError as e: res.add(err(e))
    print("caller_fds", ",".join(sorted(res)))
    try: os.readlink("/proc/self/fd/0"); print("own_fds OK")
    except OSError as e: print("own_fds", err(e))
"#;

const HOLD_WS: &str = r#"
import fcntl, os, sys, time
fd = os.open(".", os.O_RDONLY)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
time.sleep(3)
"#;

#[test]
fn r0067_no_command_can_hold_the_workspace_lock() {
    let ws = Ws::new();
    // A writable run makes the lock file, in a directory of the caller's
    // (mode 700), and its cleanup removes it once no record is left
    // (lock_concurrency::r0409); the host can lock it (so the refusals
    // below are about reach alone). The file is made here as a run going
    // beside the commands below would have it.
    let mut w = ws.req(&["true"]);
    w.writable = true;
    assert_eq!(run_ok(&w).outcome.code(), Some(0));
    let (dir, file) = (lock_dir(), make_lock_file(&ws));
    let dm = fs::metadata(&dir).unwrap_or_else(|e| panic!("stat {}: {e}", dir.display()));
    assert_eq!((dm.uid(), dm.mode() & 0o777), (nix::unistd::getuid().as_raw(), 0o700));
    {
        let f = fs::File::open(&file).unwrap_or_else(|e| panic!("open: {e}"));
        let l = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock);
        assert!(l.is_ok(), "the host cannot lock {}", file.display());
    }
    let (ds, fs_) = (dir.display().to_string(), file.display().to_string());

    // Inside the full sandbox the directory does not exist: it lies on the
    // host's /dev/shm (or /tmp), and the sandbox has private ones.
    for writable in [false, true] {
        let mut req = py(&ws, TRY_LOCK, &[&ds, &fs_]);
        req.writable = writable;
        let out = stdout(&run_ok(&req));
        assert!(out.contains("dir ENOENT") && out.contains("file ENOENT"), "writable={writable}: {out}");
    }
    // A request that would show the directory is refused, not run.
    let mut req = ws.req(&["true"]);
    req.read.push(dir.clone());
    match run(&req) {
        Err(SandboxError::UnsafePath { message: m, .. }) => assert!(m.contains("workspace-lock directory"), "{m}"),
        other => panic!("--read of the lock directory: {other:?}"),
    }

    // Landlock-only mode (unprivileged callers): Landlock refuses the
    // directory, and the caller's descriptors (the held lock among them).
    if is_root() {
        eprintln!("r0067: landlock-only part skipped as root (the mode is for unprivileged callers)");
    } else if available("r0067", portcullis::doctor_landlock_abi() >= 6, "landlock-only mode needs Landlock ABI 6") {
        // The writable run above ended alone and removed the lock file:
        // made again, as a run going beside this one would have it.
        make_lock_file(&ws);
        let pid = std::process::id().to_string();
        let mut req = py(&ws, TRY_LOCK, &[&ds, &fs_, &pid]);
        req.degraded = Some(portcullis::sandbox::Mode::LandlockOnly);
        let out = stdout(&run_ok(&req));
        assert!(out.contains("dir EACCES") && out.contains("file EACCES"), "{out}");
        assert!(out.contains("caller_fds EACCES\n") && out.contains("own_fds OK"), "{out}");
    }

    // CONTROL: a command can still flock its workspace directory (the old
    // lock), and that no longer delays a writable run beside it.
    let hold = py(&ws, HOLD_WS, &[]);
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || run_signalling(&hold, tx));
    rx.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|e| panic!("the holder never locked: {e}"));
    let t0 = Instant::now();
    let mut w = ws.req(&["true"]);
    w.writable = true;
    w.timeout = Some(Duration::from_secs(1));
    let r = run_ok(&w);
    assert!(!(r.outcome == portcullis::sandbox::Outcome::TimedOut) && r.outcome.code() == Some(0), "{r:?}");
    assert!(t0.elapsed() < Duration::from_millis(2500), "the writable run waited {:?}", t0.elapsed());
    let held = t.join().unwrap_or_else(|_| panic!("holder panicked")).unwrap_or_else(|e| panic!("holder: {e}"));
    assert!(stdout(&held).contains("locked"), "{}", stdout(&held));
}

/// Hold the workspace's lock exclusive from outside, as the git guard's
/// cleanup does (writable runs hold it shared and no longer wait for each
/// other), until the returned lock is dropped.
fn hold_exclusive(ws: &Ws) -> nix::fcntl::Flock<fs::File> {
    // A writable run makes the lock directory; the lock file is made here.
    let mut req = ws.req(&["true"]);
    req.writable = true;
    run_ok(&req);
    let f = fs::OpenOptions::new().read(true).open(make_lock_file(ws)).unwrap_or_else(|e| panic!("open lock: {e}"));
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock)
        .unwrap_or_else(|(_, e)| panic!("lock the workspace: {e}"))
}

#[test]
fn r0068_a_timeout_covers_the_wait_for_the_workspace() {
    let ws = Ws::new();
    let marker = ws.join("marker");
    let m = marker.display().to_string();
    let touch = || {
        let mut r = ws.req(&["touch", &m]);
        r.writable = true;
        r
    };

    // While a cleanup holds the lock, `--timeout 1` gives up after about
    // 1 s and starts nothing.
    let held = hold_exclusive(&ws);
    let mut b = touch();
    b.timeout = Some(Duration::from_secs(1));
    let t0 = Instant::now();
    let got = run(&b);
    let took = t0.elapsed();
    match &got {
        Err(e @ SandboxError::TimedOutWaiting { waited, .. }) => {
            assert_eq!(e.exit_code(), 124);
            assert!(waited.as_millis() >= 900, "{waited:?}");
        }
        other => panic!("expected a timeout while waiting, got {other:?}"),
    }
    assert!(took >= Duration::from_millis(900) && took < Duration::from_millis(2000), "took {took:?}");
    // Cancelled while waiting: a cancellation (130), nothing started.
    let cancel = CancellationToken::new();
    let c2 = cancel.clone();
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        c2.cancel();
    });
    let t1 = Instant::now();
    match run_with(&touch(), None, Some(cancel)) {
        Err(e @ SandboxError::CancelledWaiting { .. }) => assert_eq!(e.exit_code(), 130),
        other => panic!("expected a cancellation while waiting, got {other:?}"),
    }
    assert!(t1.elapsed() < Duration::from_millis(1500), "cancel took {:?}", t1.elapsed());
    assert!(!marker.exists(), "a run that timed out or was cancelled while waiting started its command");

    // The CLI maps the wait's timeout to 124.
    let out = cli()
        .args(["exec", "--workspace"])
        .arg(ws.path())
        .args(["--writable", "--timeout", "1", "--", "touch", &m])
        .output()
        .unwrap_or_else(|e| panic!("cli: {e}"));
    assert_eq!(out.status.code(), Some(124), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing was started"));
    assert!(!marker.exists());

    // CONTROL: without a timeout the same run waits and then runs.
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        drop(held);
    });
    let t0 = Instant::now();
    let r = run_ok(&touch());
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    assert!(t0.elapsed() >= Duration::from_millis(300), "did not wait: {:?}", t0.elapsed());
    assert!(marker.exists());
    let _ = t.join();
}

/// Listen on an abstract socket; a child of the same run connects (the
/// control); then wait for a connection from elsewhere.
const ABSTRACT_SERVER: &str = r#"
import errno, os, socket, sys, time
name = "\0" + sys.argv[1]
s = socket.socket(socket.AF_UNIX); s.bind(name); s.listen(4)
c = socket.socket(socket.AF_UNIX)
try: c.connect(name); print("same_run OK", flush=True)
except OSError as e: print("same_run", errno.errorcode[e.errno], flush=True)
s.settimeout(4)
try:
    s.accept(); s.accept(); print("accepted", flush=True)
except OSError: pass
"#;

const ABSTRACT_CLIENT: &str = r#"
import errno, socket, sys
c = socket.socket(socket.AF_UNIX)
try: c.connect("\0" + sys.argv[1]); print("other_run OK")
except OSError as e: print("other_run", errno.errorcode[e.errno])
"#;

const CROSS_MOUNT: &str = r#"
import errno, os, socket, stat, sys
ws = sys.argv[1]
def err(e): return errno.errorcode.get(e.errno, str(e.errno))
s = socket.socket(socket.AF_UNIX); s.bind("/tmp/s"); s.listen(1)
for name, f in (("rename", os.rename), ("link", os.link)):
    try: f("/tmp/s", ws + "/s"); print(name, "OK")
    except OSError as e: print(name, err(e))
try: os.mknod(ws + "/n", stat.S_IFSOCK | 0o600); print("mknod_ws OK")
except OSError as e: print("mknod_ws", err(e))
try: os.mknod("/tmp/n", stat.S_IFSOCK | 0o600); print("mknod_tmp OK")
except OSError as e: print("mknod_tmp", err(e))
try:
    t = socket.socket(socket.AF_UNIX); t.bind("/dev/shm/s"); print("bind_shm OK")
except OSError as e: print("bind_shm", err(e))
"#;

#[test]
fn r0069_other_channels_between_concurrent_runs_are_closed() {
    if !clean_host_tmp("r0069") {
        return;
    }
    let ws = Ws::new();
    let wsp = ws.path().display().to_string();

    // A socket made in the private /tmp cannot be moved or linked into the
    // workspace (another mount: EXDEV), nor made there as a node (EACCES);
    // controls: the same node in /tmp, and a socket in /dev/shm, work.
    let mut req = py(&ws, CROSS_MOUNT, &[&wsp]);
    req.writable = true;
    let out = stdout(&run_ok(&req));
    for want in ["rename EXDEV", "link EXDEV", "mknod_ws EACCES", "mknod_tmp OK", "bind_shm OK"] {
        assert!(out.contains(want), "{want}: {out}");
    }
    // A write grant outside the workspace and the granted host /tmp get no
    // sockets either.
    let grant = tempfile::Builder::new().prefix("pc-grant-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("{e}"));
    fs::set_permissions(grant.path(), fs::Permissions::from_mode(0o777)).unwrap_or_else(|e| panic!("chmod: {e}"));
    let tmp_name = format!("/tmp/pc-r0069-{}.sock", std::process::id());
    let script = "import errno,socket,sys\nfor p in sys.argv[1:]:\n  s=socket.socket(socket.AF_UNIX)\n  try: s.bind(p); print(p,'OK')\n  except OSError as e: print(p,errno.errorcode[e.errno])\n";
    let g = format!("{}/s", grant.path().display());
    let mut req = py(&ws, script, &[&g, &tmp_name]);
    req.write = vec![grant.path().to_path_buf(), PathBuf::from("/tmp")];
    let out = stdout(&run_ok(&req));
    assert!(out.contains(&format!("{g} EACCES")) && out.contains(&format!("{tmp_name} EACCES")), "{out}");
    assert!(!Path::new(&tmp_name).exists());

    // Abstract sockets: with a private network namespace each run has its
    // own; with --network host they share one, and Landlock's scoping
    // refuses a connect from another run (EPERM).
    if !available("r0069", portcullis::doctor_landlock_abi() >= 6, "abstract-socket scoping needs Landlock ABI 6") {
        return;
    }
    let name = format!("pc-r0069-{}", std::process::id());
    for network in [Network::Host, Network::None] {
        let mut server = py(&ws, ABSTRACT_SERVER, &[&name]);
        server.network = network;
        let (tx, rx) = mpsc::channel();
        let t = std::thread::spawn(move || run_signalling(&server, tx));
        rx.recv_timeout(Duration::from_secs(20)).unwrap_or_else(|e| panic!("server never started: {e}"));
        let mut client = py(&ws, ABSTRACT_CLIENT, &[&name]);
        client.network = network;
        client.writable = true;
        let out = stdout(&run_ok(&client));
        let want = if network == Network::Host { "other_run EPERM" } else { "other_run ECONNREFUSED" };
        assert!(out.contains(want), "{network:?}: {out}");
        if network == Network::Host {
            // CONTROL: the socket is there: a host process (outside every
            // Landlock domain) reaches it.
            let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
                .unwrap_or_else(|e| panic!("addr: {e}"));
            let c = std::os::unix::net::UnixStream::connect_addr(&addr);
            assert!(c.is_ok(), "host connect: {c:?}");
        }
        let r = t.join().unwrap_or_else(|_| panic!("server panicked")).unwrap_or_else(|e| panic!("server: {e}"));
        assert!(stdout(&r).contains("same_run OK"), "{}", stdout(&r));
    }
}
