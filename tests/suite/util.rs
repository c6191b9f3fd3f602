//! Shared test helpers: finding the binaries, workspaces, tree snapshots,
//! running requests, and skipping with a reason (or failing, in CI).

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use portcullis::sandbox::{ExecRequest, RunOptions};
use portcullis::{ExecResult, Sandbox, SandboxError};

/// Directory holding `portcullis` and `portcullis-helper`: `PORTCULLIS_BIN_DIR`
/// (the unprivileged pass copies them there), else `target/<profile>`.
pub fn bin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("PORTCULLIS_BIN_DIR") {
        return PathBuf::from(d);
    }
    PathBuf::from(env!("CARGO_BIN_EXE_portcullis")).parent().map(Path::to_path_buf).unwrap_or_default()
}

/// The CLI.
pub fn cli() -> Command {
    Command::new(bin_dir().join("portcullis"))
}

/// A sandbox using the helper under test. With `PORTCULLIS_TEST_POOL=N`
/// every test's sandbox shares one pool of N pre-made sandboxes, so the
/// whole suite runs through pool slots wherever a slot admits the run.
pub fn sandbox() -> Sandbox {
    static SHARED: std::sync::OnceLock<Option<Sandbox>> = std::sync::OnceLock::new();
    let shared = SHARED.get_or_init(|| {
        let n: usize = std::env::var("PORTCULLIS_TEST_POOL").ok()?.parse().ok()?;
        Some(Sandbox::with_helper(bin_dir().join("portcullis-helper")).with_pool(n))
    });
    match shared {
        // A new sandbox sweeps the leaves of dead callers (tests count on
        // it): so does this.
        Some(s) => {
            drop(Sandbox::with_helper(bin_dir().join("portcullis-helper")));
            s.clone()
        }
        None => Sandbox::with_helper(bin_dir().join("portcullis-helper")),
    }
}

/// Whether CI demands every layer (a skip becomes a failure).
pub fn require_all() -> bool {
    std::env::var("PORTCULLIS_REQUIRE_ALL_LAYERS").is_ok_and(|v| v == "1")
}

/// Skip (return false, printing why) when `ok` is false — or fail when CI
/// demands every layer.
pub fn available(test: &str, ok: bool, why: &str) -> bool {
    if ok {
        return true;
    }
    assert!(!require_all(), "{test}: required layer missing: {why}");
    skipped(test, why);
    false
}

/// Record a skipped test where it is seen: libtest captures the output of
/// `eprintln!` and shows it only for a failing test, so a host missing a
/// layer would look fully green. A write to the stderr handle itself is not
/// captured and appears in the run's output at once (`SKIPPED name: why`);
/// and when `PORTCULLIS_SKIP_LOG` names a file (scripts/test sets it), the
/// line is appended there for the summary at the end of the run.
pub fn skipped(test: &str, why: &str) {
    use std::io::Write;
    let line = format!("SKIPPED {test}: {why}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
    if let Some(log) = std::env::var_os("PORTCULLIS_SKIP_LOG") {
        // One write of one short line with O_APPEND: lines of tests running
        // in parallel do not interleave.
        if let Ok(mut f) = fs::OpenOptions::new().append(true).open(log) {
            let _ = f.write_all(line.as_bytes());
        }
    }
}

/// Whether this part of a test runs in this pass: a part that needs host
/// root runs in the root pass of scripts/test and is noted (not failed, not
/// counted as a missing layer) in the unprivileged one.
pub fn in_root_pass(test: &str, what: &str) -> bool {
    if is_root() {
        return true;
    }
    use std::io::Write;
    let line = format!("ROOT PASS ONLY {test}: {what}\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
    false
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    nix::unistd::getuid().is_root()
}

/// A temporary workspace with a small source tree.
pub struct Ws {
    pub dir: tempfile::TempDir,
}

/// Files tests keep next to a workspace (`ws.path().with_extension(..)`:
/// a policy the sandbox must not see inside it), removed with it.
const SIBLINGS: &[&str] = &["policy.toml", "deny.toml"];

impl Drop for Ws {
    fn drop(&mut self) {
        for ext in SIBLINGS {
            let _ = fs::remove_file(self.dir.path().with_extension(ext));
        }
    }
}

/// Where test workspaces live: `PORTCULLIS_TEST_ROOT`, else `/var/tmp`. Not
/// `/tmp`: the sandbox's private /tmp is Landlock-writable, so a workspace
/// under it is guarded by the mount layer alone (a reported gap), and these
/// tests want both layers.
pub fn test_root() -> PathBuf {
    std::env::var_os("PORTCULLIS_TEST_ROOT").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/var/tmp"))
}

impl Ws {
    pub fn new() -> Ws {
        Ws::new_in(&test_root())
    }

    pub fn new_in(root: &Path) -> Ws {
        let dir = tempfile::Builder::new()
            .prefix("pc-ws-")
            .tempdir_in(root)
            .unwrap_or_else(|e| panic!("tempdir in {}: {e}", root.display()));
        let ws = Ws { dir };
        ws.write("src/main.rs", "fn main() { println!(\"hi\"); }\n");
        ws.write("src/lib.rs", "pub fn f() {}\n");
        ws.write("README.md", "readme\n");
        ws.write("target/.keep", "");
        ws
    }

    /// A workspace that is also a git repository (hooks and config).
    pub fn with_git() -> Ws {
        let ws = Ws::new();
        ws.write(".git/config", "[core]\n\trepositoryformatversion = 0\n");
        ws.write(".git/hooks/pre-commit.sample", "#!/bin/sh\n");
        ws.write(".git/HEAD", "ref: refs/heads/main\n");
        ws
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn join(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn write(&self, rel: &str, content: &str) {
        let p = self.join(rel);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).unwrap_or_else(|e| panic!("mkdir {}: {e}", parent.display()));
        }
        fs::write(&p, content).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
    }

    pub fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.join(rel)).unwrap_or_default()
    }

    /// Every entry with its type, mode, size, mtime and content.
    pub fn snapshot(&self) -> BTreeMap<PathBuf, String> {
        snapshot(self.path())
    }

    /// A request for this workspace.
    pub fn req(&self, argv: &[&str]) -> ExecRequest {
        ExecRequest::new(self.path(), argv.iter().copied())
    }
}

pub fn snapshot(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        let Ok(rd) = fs::read_dir(dir) else { return };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(m) = fs::symlink_metadata(&p) else {
                continue;
            };
            let rel = p.strip_prefix(root).unwrap_or(&p).to_path_buf();
            let kind = if m.file_type().is_symlink() {
                format!("link->{}", fs::read_link(&p).map(|t| t.display().to_string()).unwrap_or_default())
            } else if m.is_dir() {
                "dir".to_string()
            } else {
                format!("file:{:?}", fs::read(&p).unwrap_or_default())
            };
            out.insert(
                rel,
                format!(
                    "{kind} mode={:o} nlink={} mtime={}",
                    m.permissions().mode(),
                    m.nlink(),
                    m.mtime_nsec() + m.mtime() * 1_000_000_000
                ),
            );
            if m.is_dir() {
                walk(root, &p, out);
            }
        }
    }
    walk(root, root, &mut out);
    out
}

/// Run a request to completion on a fresh runtime.
pub fn run(req: &ExecRequest) -> Result<ExecResult, SandboxError> {
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| panic!("runtime: {e}"));
    rt.block_on(sandbox().run(req, RunOptions::default()))
}

/// Run and insist the sandbox came up; returns the result.
pub fn run_ok(req: &ExecRequest) -> ExecResult {
    match run(req) {
        Ok(r) => r,
        Err(e) => panic!("sandbox failed for {:?}: {}", req.argv, portcullis::error_chain(&e)),
    }
}

pub fn stdout(r: &ExecResult) -> String {
    String::from_utf8_lossy(&r.stdout).into_owned()
}

pub fn stderr(r: &ExecResult) -> String {
    String::from_utf8_lossy(&r.stderr).into_owned()
}

/// The syscall probe: a Python script run by the system's /usr/bin/python3
/// inside the sandbox, printing one line per operation: `name OK` or
/// `name ERRNO_NAME`.
pub const PROBE: &str = include_str!("../fixtures/probe.py");

/// A world-readable directory holding the probe, to pass as a read root.
pub struct ProbeDir {
    pub dir: tempfile::TempDir,
}

impl ProbeDir {
    pub fn new() -> ProbeDir {
        let dir = tempfile::Builder::new().prefix("pc-probe-").tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap_or_else(|e| panic!("chmod: {e}"));
        let p = dir.path().join("probe.py");
        fs::write(&p, PROBE).unwrap_or_else(|e| panic!("write probe: {e}"));
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap_or_else(|e| panic!("chmod: {e}"));
        ProbeDir { dir }
    }

    pub fn script(&self) -> String {
        self.dir.path().join("probe.py").display().to_string()
    }
}

/// Parse probe output into name -> result.
pub fn probe_results(out: &str) -> BTreeMap<String, String> {
    out.lines().filter_map(|l| l.split_once(' ')).map(|(a, b)| (a.to_string(), b.trim().to_string())).collect()
}

/// Run the probe with `ops` in a sandbox for `ws` built by `tweak`.
pub fn probe_in<S: AsRef<str>>(ws: &Ws, ops: &[S], tweak: impl FnOnce(&mut ExecRequest)) -> BTreeMap<String, String> {
    let pd = ProbeDir::new();
    let script = pd.script();
    let mut argv = vec!["/usr/bin/python3", script.as_str()];
    argv.extend(ops.iter().map(AsRef::as_ref));
    let mut req = ws.req(&argv);
    req.read.push(pd.dir.path().to_path_buf());
    tweak(&mut req);
    let r = run_ok(&req);
    assert_eq!(r.outcome.code(), Some(0), "probe failed: {}", stderr(&r));
    probe_results(&stdout(&r))
}

/// Run the probe on the host, outside any sandbox (the controls).
pub fn probe_on_host(cwd: &Path, ops: &[&str]) -> BTreeMap<String, String> {
    let pd = ProbeDir::new();
    let out = Command::new("/usr/bin/python3")
        .arg(pd.script())
        .args(ops)
        .current_dir(cwd)
        .output()
        .unwrap_or_else(|e| panic!("python3: {e}"));
    assert!(out.status.success(), "host probe failed: {}", String::from_utf8_lossy(&out.stderr));
    probe_results(&String::from_utf8_lossy(&out.stdout))
}

/// The raw command lines (NUL-separated argv) of every process on the host.
pub fn host_cmdlines() -> Vec<Vec<u8>> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .collect()
}

/// Run the Python `code` on the host in `cwd`, outside any sandbox (a
/// probe's control); it must succeed. Its stdout.
pub fn python_on_host(cwd: &Path, code: &str) -> String {
    let out = Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(code)
        .current_dir(cwd)
        .output()
        .unwrap_or_else(|e| panic!("python3: {e}"));
    assert!(out.status.success(), "host script failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The result word of `name` in a probe script's output (`OK`, `EPERM`,
/// ...): the first word after `name ` on its line.
pub fn probe_result<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
        .map(|r| r.split_whitespace().next().unwrap_or(""))
        .unwrap_or_else(|| panic!("no result for {name} in: {out}"))
}

/// Whether a host process with `needle` in its command line is seen
/// within ten seconds.
pub fn appears(needle: &str) -> bool {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        if !host_procs_containing(needle).is_empty() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// The host processes still running with `needle` in their command line
/// after up to a second for a torn-down tree to be reaped.
pub fn survivors(needle: &str) -> Vec<String> {
    let mut left = host_procs_containing(needle);
    for _ in 0..50 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
        left = host_procs_containing(needle);
    }
    left
}

/// Host command lines (NULs as spaces) that contain `needle`, read once.
/// A process just spawned may not show its argv yet (the parent of a
/// vfork-style spawn resumes before the kernel has set the new image's
/// argument area up); a control that looks for one uses [`appears`].
pub fn host_procs_containing(needle: &str) -> Vec<String> {
    host_cmdlines()
        .into_iter()
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(needle))
        .collect()
}

/// A current-thread runtime for one test.
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| panic!("runtime: {e}"))
}

/// Run `line` with `/bin/sh -c` in the workspace, the request adjusted by
/// `tweak`; the sandbox must come up.
pub fn sh(ws: &Ws, line: &str, tweak: impl FnOnce(&mut ExecRequest)) -> ExecResult {
    let mut req = ws.req(&["/bin/sh", "-c", line]);
    tweak(&mut req);
    run_ok(&req)
}

/// The run's refused-write report, insisting it was made.
pub fn observed(r: &ExecResult) -> &portcullis::sandbox::RefusedWrites {
    let w = &r.refused_writes;
    assert_eq!(w.state, portcullis::sandbox::ReportState::Observed, "report not made: {:?}", w.reason);
    w
}

/// An audit sink that keeps its events in memory.
#[derive(Default)]
pub struct MemAudit(pub std::sync::Mutex<Vec<portcullis::audit::Event>>);

impl portcullis::audit::Audit for MemAudit {
    fn record<'a>(
        &'a self,
        event: &'a portcullis::audit::Event,
    ) -> portcullis::gate::BoxFuture<'a, Result<(), portcullis::audit::AuditError>> {
        if let Ok(mut v) = self.0.lock() {
            v.push(event.clone());
        }
        Box::pin(std::future::ready(Ok(())))
    }
}

impl MemAudit {
    /// The events' kinds, in order.
    pub fn kinds(&self) -> Vec<&'static str> {
        use portcullis::audit::Event;
        self.0
            .lock()
            .map(|v| {
                v.iter()
                    .map(|e| match e {
                        Event::Allowed { .. } => "allowed",
                        Event::Denied { .. } => "denied",
                        Event::Outcome { .. } => "outcome",
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Set by scripts/test (and the re-run below) when `/tmp` is a fresh,
/// private tmpfs in a mount namespace of the test run's own.
const PRIVATE_TMP: &str = "PORTCULLIS_PRIVATE_TMP";

/// For a test that grants the host's `/tmp`: whether to run its body here.
///
/// A grant of `/tmp` walks all of it (deny masks, hard links, unlistable
/// directories), so a stale tree or a hard-linked clone someone left in the
/// machine's `/tmp` makes the sandbox refuse the run — correctly. The test
/// means to show what a `/tmp` grant does, not what this machine's `/tmp`
/// holds, so it runs against a clean one:
/// * under scripts/test (`PORTCULLIS_PRIVATE_TMP=1`) `/tmp` already is a
///   private, empty tmpfs: run here;
/// * as root, the test re-runs itself (this one test, the same binary) in a
///   new mount namespace with a fresh tmpfs on `/tmp`, checks that it
///   passed, and returns false;
/// * otherwise (an unprivileged `cargo test`), it uses the real `/tmp`, as
///   [`real_host_tmp`] does: run, or skip visibly when `/tmp` holds
///   something that makes the refusal correct.
pub fn clean_host_tmp(test: &str) -> bool {
    if std::env::var_os(PRIVATE_TMP).is_some_and(|v| v == "1") {
        return true;
    }
    if is_root() {
        if let Some(name) = rerunnable(test) {
            rerun_in_private_tmp(test, &name);
            return false;
        }
    }
    real_host_tmp(test)
}

/// For a test of the real host `/tmp` grant: run (true), or skip visibly
/// (false) when a `/tmp` grant is refused because of what `/tmp` holds (too
/// many hard-linked names, a directory the checks cannot list): that
/// refusal is the sandbox doing its job, not the test's subject.
pub fn real_host_tmp(test: &str) -> bool {
    let ws = Ws::new();
    let mut req = ws.req(&["true"]);
    req.write.push(PathBuf::from("/tmp"));
    match sandbox().plan(&req) {
        Ok(_) => true,
        Err(
            e @ (SandboxError::LimitExceeded { .. }
            | SandboxError::UnsafePath { .. }
            | SandboxError::GrantRefused { .. }),
        ) => {
            skipped(
                test,
                &format!(
                    "the host's /tmp holds what makes a /tmp grant refused, by design ({}); \
                     scripts/test runs this test in a private, clean /tmp",
                    portcullis::error_chain(&e)
                ),
            );
            false
        }
        // Anything else is the test's business: let its own run show it.
        Err(_) => true,
    }
}

/// The test's full name (libtest names each test's thread after it), when
/// the test binary can be re-run with it in a namespace where `/tmp` is
/// hidden: not when the binary or the helpers lie in `/tmp` themselves.
fn rerunnable(test: &str) -> Option<String> {
    let name = std::thread::current().name().map(str::to_owned)?;
    if !name.ends_with(&format!("::{test}")) && !name.contains(&format!("::{test}_")) {
        return None;
    }
    let exe = std::env::current_exe().ok()?;
    let under_tmp = |p: &Path| fs::canonicalize(p).is_ok_and(|p| p.starts_with("/tmp"));
    (!under_tmp(&exe) && !under_tmp(&bin_dir())).then_some(name)
}

fn rerun_in_private_tmp(test: &str, name: &str) {
    use std::os::unix::process::CommandExt;
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{test}: the test binary: {e}"));
    let mut cmd = Command::new(exe);
    cmd.args(["--exact", name, "--test-threads=1", "--nocapture"])
        .env(PRIVATE_TMP, "1")
        .env("PORTCULLIS_BIN_DIR", bin_dir());
    // SAFETY: the closure runs in the forked child before exec; it makes
    // three system calls and allocates nothing (the strings are literals).
    unsafe {
        cmd.pre_exec(|| {
            use nix::mount::{mount, MsFlags};
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)?;
            mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)?;
            mount(
                Some("tmpfs"),
                "/tmp",
                Some("tmpfs"),
                MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
                Some("mode=1777,size=64m"),
            )?;
            Ok(())
        });
    }
    let out = cmd.output().unwrap_or_else(|e| panic!("{test}: re-run in a private /tmp: {e}"));
    let (so, se) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && so.contains("test result: ok. 1 passed"), "{test} in a private /tmp:\n{so}\n{se}");
    // Pass its skip notes on, where they are seen.
    for line in se.lines().filter(|l| l.starts_with("SKIPPED ") || l.starts_with("ROOT PASS ONLY ")) {
        use std::io::Write;
        let _ = writeln!(std::io::stderr().lock(), "{line}");
    }
}

/// The jail of a policy that names only `ws` and the deny globs `deny`.
pub fn jail_of(ws: &Path, deny: &[&str]) -> portcullis::policy::PathJail {
    let policy = portcullis::policy::WorkspacePolicy {
        workspace: Some(ws.to_path_buf()),
        deny_paths: deny.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    portcullis::policy::PathJail::new(&policy).unwrap_or_else(|e| panic!("jail: {e}"))
}

/// A workspace on the real sandbox under `policy`, recording into a fresh
/// in-memory audit.
pub fn workspace_with(
    policy: portcullis::policy::WorkspacePolicy,
) -> (portcullis::workspace::Workspace, std::sync::Arc<MemAudit>) {
    workspace_with_sandbox(policy, sandbox())
}

/// [`workspace_with`], on this sandbox (one of its own, say, whose pool the
/// workspace then makes from the policy).
pub fn workspace_with_sandbox(
    policy: portcullis::policy::WorkspacePolicy,
    sandbox: Sandbox,
) -> (portcullis::workspace::Workspace, std::sync::Arc<MemAudit>) {
    let audit = std::sync::Arc::new(MemAudit::default());
    let w = portcullis::workspace::Workspace::builder()
        .policy(policy)
        .audit(audit.clone())
        .sandbox(sandbox)
        .build()
        .unwrap_or_else(|e| panic!("workspace: {}", portcullis::error_chain(&e)));
    (w, audit)
}

/// The pids of `root`'s descendants (from /proc, outside).
pub fn descendants(root: u32) -> std::collections::BTreeSet<u32> {
    let mut parent = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().nth(1)?.parse::<u32>().ok());
        if let Some(pp) = ppid {
            parent.push((pid, pp));
        }
    }
    let mut out = std::collections::BTreeSet::from([root]);
    loop {
        let before = out.len();
        for (pid, pp) in &parent {
            if out.contains(pp) {
                out.insert(*pid);
            }
        }
        if out.len() == before {
            break;
        }
    }
    out.remove(&root);
    out
}

/// The pre-made sandboxes among `pids`: helpers started with `--slot`.
pub fn slot_helpers(pids: &std::collections::BTreeSet<u32>) -> Vec<u32> {
    pids.iter()
        .copied()
        .filter(|p| std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.windows(7).any(|w| w == b"\0--slot")))
        .collect()
}
