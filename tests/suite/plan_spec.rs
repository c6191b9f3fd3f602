//! The plan is what runs: the spawn spec `--explain --json` and
//! `Sandbox::plan` show is byte for byte the one the helper receives
//! (nothing edits it after planning), and a run that cannot make the
//! per-command cgroup its plan counted on fails closed instead of running
//! with less.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, Mutex};

use portcullis::sandbox::{CgroupPlan, RunOptions};
use portcullis::{ExecResult, Plan, SandboxError};
use portcullis_helper::spec::{RlimitKind, SpawnSpec};

use super::util::*;

/// The debug hook (`#[cfg(debug_assertions)]` builds only) that makes the
/// library write the encoded spec it hands the helper to a file.
const SPEC_OUT: &str = "PORTCULLIS_DEBUG_SPEC_OUT";

fn exec(args: &[&str], spec_out: Option<&Path>) -> Output {
    let mut c = cli();
    c.arg("exec").args(args);
    match spec_out {
        Some(p) => c.env(SPEC_OUT, p),
        None => c.env_remove(SPEC_OUT),
    };
    c.output().unwrap_or_else(|e| panic!("cli: {e}"))
}

fn args(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

fn json(out: &Output, what: &str) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{what}: json: {e}: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// `--explain --json` shows the plan's spawn spec, and a run of the same
/// command line hands the helper exactly those bytes (captured through the
/// library's debug hook): `RLIMIT_CORE 0`, the fallback rlimits for
/// `--pids`/`--memory`, `cgroup` and `observe` are all in the plan. The
/// result's enforcement repeats the plan's containment (kill mechanism,
/// cgroup fallback, limits). CONTROL: the capture is real — a run of
/// another command captures a spec that differs from the explained one, a
/// run without the hook writes nothing, and the command ran (its marker is
/// there, checked from outside).
#[test]
fn r0202_the_plan_is_the_spec_the_helper_receives() {
    let test = "r0202_the_plan_is_the_spec_the_helper_receives";
    let ws = Ws::new();
    let w = ws.path().display().to_string();
    let out_dir = tempfile::tempdir_in(test_root()).unwrap_or_else(|e| panic!("tempdir: {e}"));
    let captured = out_dir.path().join("spec.json");
    let cmd = ["--workspace", &w, "--write", "target", "--pids", "64", "--memory", "1GiB", "--json"];
    let argv = ["--", "sh", "-c", "echo ran > target/ran"];
    let with =
        |extra: &[&str]| -> Vec<String> { cmd.iter().chain(extra).chain(&argv).map(|s| s.to_string()).collect() };

    let explain_args = with(&["--explain"]);
    let out = exec(&args(&explain_args), None);
    assert_eq!(out.status.code(), Some(0), "{test}: explain: {}", String::from_utf8_lossy(&out.stderr));
    let plan = json(&out, "explain");
    assert!(!captured.exists(), "{test}: --explain ran something");
    let shown: SpawnSpec = serde_json::from_value(plan["spec"].clone())
        .unwrap_or_else(|e| panic!("{test}: --explain --json has no spawn spec: {e}: {}", plan["spec"]));

    // The run: the helper receives exactly the explained spec.
    let run_args = with(&[]);
    let out = exec(&args(&run_args), Some(&captured));
    assert_eq!(out.status.code(), Some(0), "{test}: run: {}", String::from_utf8_lossy(&out.stderr));
    let result = json(&out, "run");
    assert!(ws.join("target/ran").exists(), "{test}: the command did not run");
    let sent = std::fs::read(&captured).unwrap_or_else(|e| panic!("{test}: no spec captured: {e}"));
    let expected = serde_json::to_vec(&shown).unwrap_or_else(|e| panic!("encode: {e}"));
    assert!(
        sent == expected,
        "{test}: the helper received another spec than --explain showed:\nexplained: {}\nreceived:  {}",
        String::from_utf8_lossy(&expected),
        String::from_utf8_lossy(&sent)
    );

    // What the plan decided is in it, not added at run time.
    let kinds: Vec<(RlimitKind, u64)> = shown.rlimits.iter().map(|r| (r.resource, r.value)).collect();
    assert!(kinds.contains(&(RlimitKind::Core, 0)), "{test}: RLIMIT_CORE 0 not planned: {kinds:?}");
    let c = &plan["containment"];
    assert_eq!(shown.cgroup, !c["cgroup"].is_null(), "{test}: spec.cgroup vs containment: {c}");
    assert_eq!(c["cgroup_fallback"].is_null(), !c["cgroup"].is_null(), "{test}: {c}");
    let by_rlimit = |limit: &str, kind: RlimitKind| {
        let rlimit = c["limits"][limit] != "cgroup";
        assert_eq!(kinds.iter().any(|(k, _)| *k == kind), rlimit, "{test}: {limit}: {c} vs {kinds:?}");
    };
    by_rlimit("pids", RlimitKind::Nproc);
    by_rlimit("memory", RlimitKind::As);
    assert!(shown.observe, "{test}: the refused-write report is on by default, in the plan");
    let e = &result["enforcement"];
    for key in ["kill_mechanism", "cgroup_fallback", "limits"] {
        assert_eq!(e[key], c[key], "{test}: the result's {key} is not the plan's");
    }
    // The plan counts on a cgroup exactly where the host offers one.
    let host_cgroup =
        sandbox().cgroup_host().is_ok_and(|h| nix::unistd::access(&h.parent, nix::unistd::AccessFlags::W_OK).is_ok());
    assert_eq!(shown.cgroup, host_cgroup, "{test}: {c}");

    // CONTROL: another command line captures another spec (the capture
    // is the run's own, not a copy of the plan).
    std::fs::remove_file(&captured).unwrap_or_else(|e| panic!("rm: {e}"));
    let other: Vec<String> =
        cmd.iter().chain(&["--", "sh", "-c", "echo other > target/other"]).map(|s| s.to_string()).collect();
    let out = exec(&args(&other), Some(&captured));
    assert_eq!(out.status.code(), Some(0), "{test}: control: {}", String::from_utf8_lossy(&out.stderr));
    let sent = std::fs::read(&captured).unwrap_or_else(|e| panic!("{test}: control: no spec captured: {e}"));
    assert_ne!(sent, expected, "{test}: control: a different command captured the same spec");
    let got: SpawnSpec = serde_json::from_slice(&sent).unwrap_or_else(|e| panic!("{test}: control: {e}"));
    assert_eq!(got.argv.last().map(Vec::as_slice), Some(&b"echo other > target/other"[..]), "{test}: control");
    // CONTROL: without the hook nothing is written.
    std::fs::remove_file(&captured).unwrap_or_else(|e| panic!("rm: {e}"));
    let out = exec(&args(&run_args), None);
    assert_eq!(out.status.code(), Some(0), "{test}: control: {}", String::from_utf8_lossy(&out.stderr));
    assert!(!captured.exists(), "{test}: control: the spec was captured without the hook");
}

fn run_plan(plan: &Plan, req: &portcullis::ExecRequest, seen: Arc<Mutex<Vec<u8>>>) -> Result<ExecResult, SandboxError> {
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| panic!("runtime: {e}"));
    let opts = RunOptions {
        on_output: Some(Box::new(move |_, chunk| seen.lock().map(|mut s| s.extend_from_slice(chunk)).unwrap_or(()))),
        ..RunOptions::default()
    };
    rt.block_on(sandbox().run_plan(plan, req, opts))
}

/// A plan that counts on a per-command cgroup which cannot be made when the
/// run starts (its parent is gone) fails with `SandboxError::Cgroup`, naming
/// the leaf it tried and `ENOENT`, exit 125, saying nothing ran and to run
/// again; the command did not run (no output reached the caller) and no
/// cgroup is left. A plan whose spec and containment disagree about the
/// cgroup is refused too. CONTROL: the same plan, unedited, runs and its
/// output reaches the caller.
#[test]
fn r0203_a_cgroup_the_plan_counted_on_fails_the_run_closed() {
    let test = "r0203_a_cgroup_the_plan_counted_on_fails_the_run_closed";
    let ws = Ws::new();
    let req = ws.req(&["echo", "ran"]);
    let plan = sandbox().plan(&req).unwrap_or_else(|e| panic!("plan: {e}"));

    // CONTROL: as planned, it runs.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let r = run_plan(&plan, &req, seen.clone()).unwrap_or_else(|e| panic!("{test}: control: {e}"));
    assert_eq!(r.outcome.code(), Some(0), "{test}: control: {}", stderr(&r));
    assert_eq!(seen.lock().map(|s| s.clone()).unwrap_or_default(), b"ran\n", "{test}: control: no output");
    assert_eq!(r.enforcement.kill_mechanism, plan.containment.kill_mechanism, "{test}: control");

    // The plan counts on a cgroup whose parent is gone.
    let gone = PathBuf::from(format!("/sys/fs/cgroup/portcullis-r0203-gone-{}", std::process::id()));
    let mut stale = plan.clone();
    stale.containment.cgroup = Some(CgroupPlan { parent: gone.clone(), pids_max: None, memory_max: None });
    stale.spec.cgroup = true;
    let seen = Arc::new(Mutex::new(Vec::new()));
    match run_plan(&stale, &req, seen.clone()) {
        Err(e @ SandboxError::Cgroup { .. }) => {
            let SandboxError::Cgroup { stage, path, source } = &e else { unreachable!() };
            assert_eq!(*stage, "create the per-command cgroup", "{test}");
            assert!(path.starts_with(&gone), "{test}: names {}", path.display());
            assert_eq!(source.raw_os_error(), Some(libc::ENOENT), "{test}: {source}");
            assert_eq!(e.exit_code(), 125, "{test}");
            let m = e.to_string();
            assert!(m.contains("nothing ran") && m.contains("run again"), "{test}: {m}");
        }
        other => panic!("{test}: expected SandboxError::Cgroup, got {other:?}"),
    }
    assert!(seen.lock().map(|s| s.is_empty()).unwrap_or(false), "{test}: the command ran");
    assert!(!gone.exists(), "{test}: {} was made", gone.display());

    // A spec that says "cgroup" where the containment makes none (or the
    // other way round) is refused before anything starts.
    let mut odd = plan.clone();
    odd.spec.cgroup = odd.containment.cgroup.is_none();
    let seen = Arc::new(Mutex::new(Vec::new()));
    match run_plan(&odd, &req, seen.clone()) {
        Err(SandboxError::Invalid { what, message }) => {
            assert_eq!(what, "plan", "{test}");
            assert!(message.contains("plan again"), "{test}: {message}");
        }
        other => panic!("{test}: expected a refusal of the inconsistent plan, got {other:?}"),
    }
    assert!(seen.lock().map(|s| s.is_empty()).unwrap_or(false), "{test}: the inconsistent plan ran");
}
