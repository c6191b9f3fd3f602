//! `Sandbox::run_plan` runs exactly the plan it was given: a writable plan
//! the tree no longer matches is refused with a typed error, never silently
//! replaced by a fresh one.

use portcullis::sandbox::RunOptions;
use portcullis::{ExecResult, Plan, SandboxError};

use super::util::*;

fn run_plan(plan: &Plan, req: &portcullis::ExecRequest) -> Result<ExecResult, SandboxError> {
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| panic!("runtime: {e}"));
    rt.block_on(sandbox().run_plan(plan, req, RunOptions::default()))
}

/// A change to the tree: what it is, the plan field it changes first, how.
type Change = (&'static str, &'static str, fn(&Ws));

/// A writable plan made before the tree changed (a new hard link to a file
/// outside the grant, a new setuid program in it) is refused with `PlanChanged`
/// naming the part of the plan that differs, exit 125, and the command does
/// not run (checked from outside: its marker is missing). CONTROL: a
/// current plan runs, and `Sandbox::run` on the changed tree (planning
/// under the lock itself) runs too.
#[test]
fn r0200_run_plan_refuses_a_stale_writable_plan() {
    let cases: [Change; 2] = [
        ("a new hard link", "hard_linked", |ws| {
            std::fs::hard_link(ws.join("src/main.rs"), ws.join("target/main.rs"))
                .unwrap_or_else(|e| panic!("link: {e}"))
        }),
        ("a new setuid program", "landlock_gaps", |ws| {
            use std::os::unix::fs::PermissionsExt;
            ws.write("target/tool", "#!/bin/sh\n");
            std::fs::set_permissions(ws.join("target/tool"), std::fs::Permissions::from_mode(0o4755))
                .unwrap_or_else(|e| panic!("chmod: {e}"))
        }),
    ];
    // `part`: the first field (in name order) the change makes differ; the
    // setuid program changes `privileged`, `spec.mounts` and, since it is
    // kept read-only beneath the grant, `landlock_gaps`.
    for (change, part, make) in cases {
        let ws = Ws::new();
        let mut req = ws.req(&["sh", "-c", "touch target/ran"]);
        req.write.push("target".into());

        // CONTROL: planned, unchanged, run: the command ran.
        let plan = sandbox().plan(&req).unwrap_or_else(|e| panic!("plan: {e}"));
        let r = run_plan(&plan, &req).unwrap_or_else(|e| panic!("{change}: control: {}", portcullis::error_chain(&e)));
        assert!(r.outcome.success(), "{change}: control: {}", stderr(&r));
        assert!(ws.join("target/ran").exists(), "{change}: control: the command did not run");
        std::fs::remove_file(ws.join("target/ran")).unwrap_or_else(|e| panic!("rm: {e}"));

        // Planned, then the tree changed: refused, typed, nothing ran.
        let plan = sandbox().plan(&req).unwrap_or_else(|e| panic!("plan: {e}"));
        make(&ws);
        let before = ws.snapshot();
        match run_plan(&plan, &req) {
            Err(e @ SandboxError::PlanChanged { .. }) => {
                let SandboxError::PlanChanged { what, workspace } = &e else { unreachable!() };
                assert!(what.starts_with(part), "{change}: names {what:?}, expected {part:?}");
                assert_eq!(workspace, &plan.workspace);
                assert_eq!(e.exit_code(), 125);
                let m = e.to_string();
                assert!(m.contains("plan again") && m.contains("Sandbox::run"), "{m}");
            }
            other => panic!("{change}: expected PlanChanged, got {other:?}"),
        }
        assert!(!ws.join("target/ran").exists(), "{change}: the stale plan ran");
        assert_eq!(ws.snapshot(), before, "{change}: the refused run changed the tree");

        // CONTROL: Sandbox::run plans under the lock itself and runs.
        let r = run_ok(&req);
        assert!(r.outcome.success(), "{change}: run: {}", stderr(&r));
        assert!(ws.join("target/ran").exists(), "{change}: run: the command did not run");
    }
}
