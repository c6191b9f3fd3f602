//! The gate's declarative rules, through the example policies: each is
//! accepted by `portcullis check`, and its rules answer as its comments say
//! (with the meet of the asked and the allowed access).

use std::path::{Path, PathBuf};

use portcullis::gate::{Access, Action, Backend, FsAction, Met, ShellExec};
use portcullis::policy::{Interpreter, WorkspacePolicy};

use crate::suite::util::{cli, Ws};

/// The example policies: `PORTCULLIS_EXAMPLES_DIR` (the unprivileged pass
/// copies them where uid 65534 can read them), else the checkout's.
fn examples() -> PathBuf {
    match std::env::var_os("PORTCULLIS_EXAMPLES_DIR") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("examples"),
    }
}

fn gate_examples() -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(examples())
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("gate-")))
        .collect();
    out.sort();
    out
}

#[test]
fn r0140_every_gate_example_is_accepted_by_portcullis_check() {
    let ws = Ws::with_git();
    let files = gate_examples();
    assert!(files.len() >= 3, "want the three gate examples, found {files:?}");
    for f in &files {
        let out = cli()
            .args(["check", "--policy"])
            .arg(f)
            .arg("--workspace")
            .arg(ws.path())
            .args(["--", "git status"])
            .output()
            .unwrap_or_else(|e| panic!("portcullis check: {e}"));
        assert_eq!(out.status.code(), Some(0), "{}: {}", f.display(), String::from_utf8_lossy(&out.stderr));
        let p = WorkspacePolicy::from_file(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert!(matches!(p.gate(ws.path()), Ok(Some(_))), "{}: no gate", f.display());
    }
    // The control: a file with a bad rule is refused by check, naming it.
    let bad = ws.path().join("bad.toml");
    std::fs::write(&bad, "[[gate]]\ncommand = \"git\"\nanswer = \"maybe\"\n").unwrap_or_else(|e| panic!("{e}"));
    let out = cli()
        .args(["check", "--policy"])
        .arg(&bad)
        .arg("--workspace")
        .arg(ws.path())
        .args(["--", "git status"])
        .output()
        .unwrap_or_else(|e| panic!("portcullis check: {e}"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("gate[0].answer") && err.contains("expected one of"), "{err}");
}

/// One example, loaded for a workspace, judging lines as the checker plans them.
struct Ex {
    policy: WorkspacePolicy,
    ws: PathBuf,
}

impl Ex {
    fn load(name: &str, ws: &Ws) -> Ex {
        let mut policy = WorkspacePolicy::from_file(&examples().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let real = std::fs::canonicalize(ws.path()).unwrap_or_else(|e| panic!("{e}"));
        policy.workspace = Some(real.clone());
        Ex { policy, ws: real }
    }

    fn shell(&self, line: &str, asked: Access) -> Action {
        let checker = self.policy.checker().unwrap_or_else(|e| panic!("{e}"));
        let plan = match checker.check(line).plan() {
            Some(p) => p.clone(),
            None => panic!("the policy refuses {line:?}"),
        };
        Action::ShellExec(ShellExec {
            line: line.into(),
            interpreter: Interpreter::Sh,
            commands: plan.commands,
            cwd: self.ws.clone(),
            workspace: Some(self.ws.clone()),
            asked,
            background: false,
            backend: Backend::Sandbox,
        })
    }

    fn write(&self, rel: &str) -> Action {
        Action::FsWrite(FsAction { path: rel.into(), resolved: self.ws.join(rel), backend: Backend::Direct })
    }

    fn meet(&self, action: &Action) -> Result<Met, String> {
        let rules = self.policy.gate(&self.ws).ok().flatten().unwrap_or_else(|| panic!("no gate"));
        let d = rules.decide(action).unwrap_or_else(|e| panic!("{e}"));
        action.asked().meet(&d, &self.ws).map_err(|r| format!("{}: {}", r.rule.unwrap_or_default(), r.reason))
    }

    fn ok(&self, action: &Action) -> Met {
        self.meet(action).unwrap_or_else(|e| panic!("refused: {e}"))
    }
}

fn all() -> Access {
    Access { writable: true, write_grants: Vec::new() }
}

#[test]
fn r0141_the_gate_examples_do_what_they_say() {
    let ws = Ws::with_git();
    let tmp = std::fs::canonicalize("/tmp").unwrap_or_else(|e| panic!("{e}"));

    // git may write only .git/.
    let ex = Ex::load("gate-git-writes-git.toml", &ws);
    let git = ex.ws.join(".git");
    let m = ex.ok(&ex.shell("git commit -am wip", all()));
    assert_eq!(m.effective, Access { writable: false, write_grants: vec![git.clone()] });
    // The control: without the gate the same request keeps the workspace.
    assert_eq!(
        all()
            .meet(&portcullis::gate::Decision::Allow { writable: true, write_grants: None, rule: None }, &ex.ws)
            .map(|m| m.effective),
        Ok(all())
    );
    assert_eq!(ex.ok(&ex.shell("git log | wc -l", all())).effective, Access::read_only());
    assert_eq!(ex.ok(&ex.shell("echo hi > notes.txt", all())).effective, Access::read_only());
    let m = ex.ok(&ex.shell("git commit -am wip", Access::read_only()));
    assert_eq!((m.effective, m.dropped), (Access::read_only(), vec![git]), "a rule cannot hand out access");

    // Tests may write target/ and /tmp.
    let ex = Ex::load("gate-tests-write-target.toml", &ws);
    let target = ex.ws.join("target");
    let asked = Access { writable: false, write_grants: vec![target.clone(), tmp.clone()] };
    let m = ex.ok(&ex.shell("cargo test --offline", asked.clone()));
    assert_eq!(m.effective.write_grants, vec![target.clone(), tmp.clone()]);
    assert_eq!(ex.ok(&ex.shell("make test", asked.clone())).effective.write_grants, vec![target.clone(), tmp.clone()]);
    assert_eq!(ex.ok(&ex.shell("cargo build", asked.clone())).effective.write_grants, vec![target.clone()]);
    assert_eq!(ex.ok(&ex.shell("rm -rf src", asked.clone())).effective, Access::read_only());
    assert_eq!(ex.ok(&ex.shell("cargo test && rm -rf src", asked.clone())).effective, Access::read_only());
    let only_target = Access { writable: false, write_grants: vec![target.clone()] };
    let m = ex.ok(&ex.shell("cargo test", only_target));
    assert_eq!((m.effective.write_grants, m.dropped), (vec![target.clone()], vec![tmp.clone()]));
    let e = ex.meet(&ex.write("target/debug/x"));
    assert!(e.as_ref().is_err_and(|e| e.starts_with("no-direct-writes-in-target:")), "{e:?}");
    assert_eq!(ex.ok(&ex.write("src/new.rs")).effective.write_grants, vec![ex.ws.join("src/new.rs")]);

    // git push refused.
    let ex = Ex::load("gate-no-push.toml", &ws);
    for line in ["git push origin main", "git push", "ls && git push --force"] {
        let e = ex.meet(&ex.shell(line, all()));
        assert!(e.as_ref().is_err_and(|e| e.starts_with("no-push:") && e.contains("git push")), "{line}: {e:?}");
    }
    let e = ex.meet(&ex.shell("git -C . push", all()));
    assert!(e.as_ref().is_err_and(|e| e.starts_with("git-options-first:")), "{e:?}");
    let e = ex.meet(&ex.shell("git $SUB origin", all()));
    assert!(e.as_ref().is_err_and(|e| e.contains("decided at run time")), "{e:?}");
    assert_eq!(ex.ok(&ex.shell("git commit -am wip", all())).effective, all(), "the control: other git commands write");
    assert_eq!(ex.ok(&ex.shell("echo hi", all())).effective, Access::read_only());
}
