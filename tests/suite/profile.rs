//! The compiled access profile (`sandbox::Profile`): a plan made with it is
//! the plan a fresh `Sandbox::plan` makes, and everything a run (or the
//! host) can change between commands is seen by the next plan made with the
//! same profile: a file under a deny glob, a `.git/hooks` created, a
//! submodule added, a grant's link swapped.

use std::fs;
use std::path::Path;

use portcullis::runner::{ExecOptions, Prepared, Runner};
use portcullis::sandbox::{ExecRequest, PathRefusal, Profile, RunOptions, Warning};
use portcullis::{ExecResult, SandboxError};

use super::gitutil::host_git;
use super::util::{rt, sandbox, stdout, test_root, Ws};

fn profile(req: &ExecRequest) -> Profile {
    sandbox().profile(req).unwrap_or_else(|e| panic!("profile: {e}"))
}

/// Run with the profile (`Sandbox::run_checked_with`).
fn run_with(p: &Profile, req: &ExecRequest) -> Result<ExecResult, SandboxError> {
    rt().block_on(sandbox().run_checked_with(Some(p), req, RunOptions::default(), |_| Ok(())))
}

fn run_ok_with(p: &Profile, req: &ExecRequest) -> ExecResult {
    run_with(p, req).unwrap_or_else(|e| panic!("run {:?}: {}", req.argv, portcullis::error_chain(&e)))
}

/// The plan as `--explain --json` prints it.
fn json(plan: &portcullis::Plan) -> serde_json::Value {
    serde_json::to_value(plan).unwrap_or_else(|e| panic!("{e}"))
}

/// Plan `req` fresh and with `p`: both succeed with the same plan, or both
/// fail with the same error.
fn same_plan(p: &Profile, req: &ExecRequest) {
    let sb = sandbox();
    match (sb.plan(req), sb.plan_with(p, req)) {
        (Ok(a), Ok(b)) => assert_eq!(json(&a), json(&b), "{:?}", req),
        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
        (a, b) => panic!("fresh {:?} vs profile {:?}", a.map(|_| ()), b.map(|_| ())),
    }
}

fn sh_req(ws: &Ws, line: &str) -> ExecRequest {
    ws.req(&["/bin/sh", "-c", line])
}

/// A repository on the host with one commit.
fn git_repo(dir: &Path) {
    fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{e}"));
    host_git(dir, &["init", "-q"]);
    fs::write(dir.join("README"), "lib\n").unwrap_or_else(|e| panic!("{e}"));
    host_git(dir, &["add", "-A"]);
    host_git(dir, &["commit", "-qm", "init"]);
}

#[test]
fn r0450_the_profile_plans_what_a_fresh_plan_plans() {
    let ws = Ws::new();
    git_repo(ws.path());
    ws.write(".env", "S=1\n");
    ws.write("src/deep/server.key", "K\n");
    ws.write("secrets/token", "t\n");
    ws.write("gen/out", "o\n");
    let deny = vec![".env*".to_string(), "*.key".to_string(), "secrets".to_string()];
    let mut base = ws.req(&["true"]);
    base.deny = deny.clone();
    let p = profile(&base);
    let mut cases: Vec<ExecRequest> = Vec::new();
    cases.push(base.clone());
    let mut w = base.clone();
    w.writable = true;
    cases.push(w.clone());
    let mut g = base.clone();
    g.write = vec!["target".into(), "gen".into(), "/tmp".into()];
    cases.push(g);
    // Globs the profile was not compiled for (one more, another order):
    // compiled for the request, as a fresh plan does.
    let mut extra = w.clone();
    extra.deny.push("*.pem".into());
    cases.push(extra);
    let mut reordered = w.clone();
    reordered.deny.reverse();
    cases.push(reordered);
    let mut net = w.clone();
    net.network = portcullis::Network::Host;
    net.cwd = Some("src".into());
    net.env.push(("A".into(), "1".into()));
    cases.push(net);
    // Refusals agree too: a missing readable root.
    let mut missing = base.clone();
    missing.read.push("/nonexistent-pc-profile".into());
    cases.push(missing);
    for req in &cases {
        same_plan(&p, req);
    }
    // The runner's plans (its profile, its held checker) are the fresh ones.
    let policy = portcullis::policy::WorkspacePolicy::from_toml(&format!(
        "workspace = {:?}\ndeny_paths = [\".env*\", \"*.key\", \"secrets\"]\nwrite = [\"target\", \"gen\"]\n[shell]\ninterpreter = \"sh\"\nallow = [\"cat\", \"true\"]\n",
        ws.path().display().to_string()
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let runner = Runner::builder().policy(policy).sandbox(sandbox()).build().unwrap_or_else(|e| panic!("{e}"));
    let opts = ExecOptions { sh: true, writable: true, ..ExecOptions::default() };
    let prepared =
        rt().block_on(runner.prepare(&["cat README > gen/x".into()], &opts)).unwrap_or_else(|e| panic!("{e}"));
    let Prepared::Ready(ready) = prepared else { panic!("refused: {prepared:?}") };
    let held = runner.plan(&ready).unwrap_or_else(|e| panic!("{e}"));
    let fresh = ready.plan(runner.sandbox().unwrap_or_else(|e| panic!("{e}"))).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(json(&held), json(&fresh));
    assert!(held.masked.contains(&fs::canonicalize(ws.join(".env")).unwrap_or_default()), "{:?}", held.masked);
}

#[test]
fn r0451_a_file_a_writable_run_creates_under_a_deny_glob_is_masked_next_run() {
    let ws = Ws::new();
    let mut req = sh_req(&ws, "echo planted > new.secret; echo made");
    req.writable = true;
    req.deny = vec!["*.secret".into()];
    let p = profile(&req);
    let r = run_ok_with(&p, &req);
    assert_eq!(stdout(&r), "made\n");
    assert_eq!(ws.read("new.secret"), "planted\n", "the writable run made it (it did not exist before)");
    // The next run, same profile: the new file is masked.
    let mut read = sh_req(&ws, "cat new.secret; echo rc=$?");
    read.deny = vec!["*.secret".into()];
    let r = run_ok_with(&p, &read);
    let out = stdout(&r);
    assert!(out.ends_with("rc=1\n") && !out.contains("planted"), "{out:?} {}", super::util::stderr(&r));
    assert!(super::util::stderr(&r).contains("Permission denied"), "EACCES: {}", super::util::stderr(&r));
    // Control: without the deny glob the same read sees it.
    let mut open = sh_req(&ws, "cat new.secret; echo rc=$?");
    open.deny.clear();
    assert_eq!(stdout(&run_ok_with(&p, &open)), "planted\nrc=0\n");
}

#[test]
fn r0452_a_missing_hooks_directory_is_guarded_then_protected_once_it_exists() {
    let ws = Ws::new();
    ws.write(".git/config", "[core]\n\trepositoryformatversion = 0\n");
    ws.write(".git/HEAD", "ref: refs/heads/main\n");
    assert!(!ws.join(".git/hooks").exists());
    let mut req = sh_req(&ws, "mkdir .git/hooks && echo made");
    req.writable = true;
    let p = profile(&req);
    let r = run_ok_with(&p, &req);
    assert_eq!(stdout(&r), "made\n", "{}", super::util::stderr(&r));
    // The plan made with the profile guarded the missing directory: what
    // the run created is gone.
    let hooks_path = fs::canonicalize(ws.join(".git")).unwrap_or_default().join("hooks");
    assert!(
        r.warnings.iter().any(|w| matches!(w, Warning::GitGuardRemoved { path } if *path == hooks_path)),
        "{:?}",
        r.warnings
    );
    assert!(!ws.join(".git/hooks").exists());
    // The host makes it (as `git init` does); the tree changed since the
    // profile was compiled.
    fs::create_dir(ws.join(".git/hooks")).unwrap_or_else(|e| panic!("{e}"));
    // The next writable run with the same profile protects it.
    let line = "echo 'touch /x' > .git/hooks/pre-commit; echo hook=$?; echo ok > .git/description; echo other=$?";
    let mut next = sh_req(&ws, line);
    next.writable = true;
    let plan = sandbox().plan_with(&p, &next).unwrap_or_else(|e| panic!("{e}"));
    let hooks = fs::canonicalize(ws.join(".git/hooks")).unwrap_or_default();
    assert!(plan.protected.contains(&hooks), "{:?}", plan.protected);
    let r = run_ok_with(&p, &next);
    let (out, err) = (stdout(&r), super::util::stderr(&r));
    assert!(out.contains("hook=2"), "{out} {err}");
    assert!(err.contains("Read-only file system"), "EROFS: {err}");
    assert!(!ws.join(".git/hooks/pre-commit").exists(), "nothing reached the host");
    // Control: the rest of the git dir is writable in the same run.
    assert!(out.contains("other=0"), "{out}");
    assert_eq!(ws.read(".git/description"), "ok\n");
}

#[test]
fn r0453_a_submodule_the_host_adds_is_known_to_the_next_plan() {
    let ws = Ws::new();
    git_repo(ws.path());
    let origin =
        tempfile::Builder::new().prefix("pc-origin-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("{e}"));
    git_repo(origin.path());
    let mut req = sh_req(&ws, "true");
    req.writable = true;
    let p = profile(&req);
    let before = sandbox().plan_with(&p, &req).unwrap_or_else(|e| panic!("{e}"));
    let sub = ws.join("vendor/lib");
    assert!(!before.git_trees.iter().any(|t| t.ends_with("vendor/lib")), "{:?}", before.git_trees);
    let out = host_git(
        ws.path(),
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            &origin.path().display().to_string(),
            "vendor/lib",
        ],
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    host_git(ws.path(), &["commit", "-qm", "sub"]);
    assert!(sub.join(".git").is_file());
    // The same profile: the next plan knows the submodule, as a fresh one.
    same_plan(&p, &req);
    let after = sandbox().plan_with(&p, &req).unwrap_or_else(|e| panic!("{e}"));
    let real_sub = fs::canonicalize(&sub).unwrap_or_default();
    assert!(after.git_trees.contains(&real_sub), "{:?}", after.git_trees);
    let sub_config = fs::canonicalize(ws.join(".git/modules/vendor/lib/config")).unwrap_or_default();
    assert!(after.protected.contains(&sub_config), "{:?}", after.protected);
    // For real: the submodule's config is read-only in the next run, its
    // working tree writable (control).
    let before_cfg = fs::read(&sub_config).unwrap_or_default();
    let mut write = sh_req(
        &ws,
        "echo '[core]' >> .git/modules/vendor/lib/config; echo cfg=$?; echo x > vendor/lib/new; echo tree=$?",
    );
    write.writable = true;
    let r = run_ok_with(&p, &write);
    let (out, err) = (stdout(&r), super::util::stderr(&r));
    assert!(out.contains("cfg=2") && err.contains("Read-only file system"), "{out} {err}");
    assert_eq!(fs::read(&sub_config).unwrap_or_default(), before_cfg, "the submodule's config is unchanged");
    assert!(out.contains("tree=0"), "{out}");
    assert!(sub.join("new").exists());
}

#[test]
fn r0454_a_grant_whose_link_is_swapped_between_runs_is_refused_as_before() {
    let ws = Ws::new();
    fs::create_dir_all(ws.join("gen")).unwrap_or_else(|e| panic!("{e}"));
    let outside = tempfile::Builder::new().prefix("pc-out-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("{e}"));
    let mut req = sh_req(&ws, "echo x > gen/f && echo wrote");
    req.write = vec!["gen".into()];
    let p = profile(&req);
    // Control: the grant works while it is a directory.
    assert_eq!(stdout(&run_ok_with(&p, &req)), "wrote\n");
    assert_eq!(ws.read("gen/f"), "x\n");
    // Between runs `gen` becomes a link to a directory outside.
    fs::remove_dir_all(ws.join("gen")).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(outside.path(), ws.join("gen")).unwrap_or_else(|e| panic!("{e}"));
    let fresh = sandbox().plan(&req).map(|_| ()).map_err(|e| e.to_string());
    match run_with(&p, &req) {
        Err(e @ SandboxError::PathEscape { .. }) => assert_eq!(Err(e.to_string()), fresh, "refused as before"),
        Err(e @ SandboxError::UnsafePath { reason: PathRefusal::ThroughSymlink, .. }) => {
            assert_eq!(Err(e.to_string()), fresh, "refused as before")
        }
        other => panic!("expected a refusal, got {:?}", other.map(|r| stdout(&r))),
    }
    assert!(!outside.path().join("f").exists(), "nothing was written outside");
}

/// The checker a runner holds resolves paths against the workspace's real
/// path as it was when the runner was built; before each use the runner
/// checks that the jail still resolves the same (`PathJail::is_current`)
/// and compiles afresh when it does not.
#[test]
fn r0455_the_runners_held_checker_follows_a_workspace_that_resolves_elsewhere() {
    use portcullis::policy::{Verdict, WorkspacePolicy};
    use portcullis::runner::{check_line, Line};
    let (a, b) = (Ws::new(), Ws::new());
    let links = tempfile::Builder::new().prefix("pc-link-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("{e}"));
    let name = links.path().join("ws");
    std::os::unix::fs::symlink(a.path(), &name).unwrap_or_else(|e| panic!("{e}"));
    let policy = WorkspacePolicy::from_toml(&format!(
        "workspace = {:?}\n[shell]\ninterpreter = \"sh\"\nallow = [\"cat\"]\n",
        name.display().to_string()
    ))
    .unwrap_or_else(|e| panic!("{e}"));
    let runner = Runner::builder().policy(policy.clone()).sandbox(sandbox()).build().unwrap_or_else(|e| panic!("{e}"));
    let line = ["cat README.md > out.txt".to_string()];
    let target = |v: Verdict| match v {
        Verdict::Accepted(p) => p.commands[0].redirects[0].path.clone(),
        Verdict::Refused(r) => panic!("refused: {r:?}"),
    };
    let held = |r: &Runner| target(r.check_line(Line::Argv(&line), true, None).unwrap_or_else(|e| panic!("{e}")));
    let fresh = || target(check_line(&policy, Line::Argv(&line), true, None).unwrap_or_else(|e| panic!("{e}")));
    let real = |w: &Ws| fs::canonicalize(w.path()).unwrap_or_default().join("out.txt");
    // Control: while the name leads to `a`, both resolve there.
    assert_eq!(held(&runner), real(&a));
    assert_eq!(fresh(), real(&a));
    // The name now leads to `b`: the held checker is not used stale.
    fs::remove_file(&name).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(b.path(), &name).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(fresh(), real(&b));
    assert_eq!(held(&runner), real(&b), "the runner's checker resolved against the old workspace");
}
