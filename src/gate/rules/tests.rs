use std::path::{Path, PathBuf};

use super::*;
use crate::gate::{Access, Backend, GateRefusal};
use crate::policy::{Interpreter, PolicyError, WorkspacePolicy};

/// A workspace directory (its real path) and the temporary dir holding it.
struct Fx {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    out: PathBuf,
}

fn fx() -> Fx {
    // Not below /tmp: the rules grant /tmp, and the workspace must lie beside it.
    let dir = tempfile::Builder::new().prefix("portcullis-gate").tempdir_in("/var/tmp");
    let dir = dir.unwrap_or_else(|e| panic!("{e}"));
    let root = std::fs::canonicalize(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    let ws = root.join("ws");
    let out = root.join("out");
    for d in [&ws, &ws.join(".git"), &ws.join("target"), &out] {
        std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("{e}"));
    }
    Fx { _dir: dir, ws, out }
}

fn rules(fx: &Fx, toml: &str) -> Rules {
    let p = WorkspacePolicy::from_toml(toml).unwrap_or_else(|e| panic!("{e}"));
    match p.gate(&fx.ws) {
        Ok(Some(r)) => r,
        Ok(None) => panic!("no gate"),
        Err(e) => panic!("{e}"),
    }
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap_or_else(|e| panic!("{e}"));
    rt.block_on(f)
}

/// The decision, through the async trait (as a host calls it).
fn decide(r: &Rules, a: &Action) -> Decision {
    let g: &dyn Gate = r;
    block_on(g.check(a)).unwrap_or_else(|e| panic!("{e}"))
}

fn pc(argv: &[&str]) -> PlannedCommand {
    PlannedCommand {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        dynamic: Vec::new(),
        runs: Vec::new(),
        redirects: Vec::new(),
    }
}

fn dynamic(mut c: PlannedCommand, at: &[usize]) -> PlannedCommand {
    c.dynamic = at.to_vec();
    c
}

fn runs(mut c: PlannedCommand, inner: Vec<PlannedCommand>) -> PlannedCommand {
    c.runs = inner;
    c
}

fn shell(fx: &Fx, commands: Vec<PlannedCommand>, asked: Access) -> Action {
    let line = commands.iter().map(|c| c.argv.join(" ")).collect::<Vec<_>>().join(" | ");
    Action::ShellExec(ShellExec {
        line,
        interpreter: Interpreter::Sh,
        commands,
        cwd: fx.ws.clone(),
        workspace: Some(fx.ws.clone()),
        asked,
        background: false,
        backend: Backend::Sandbox,
    })
}

fn writable() -> Access {
    Access { writable: true, write_grants: Vec::new() }
}

fn fs(fx: &Fx, kind: &str, rel: &str) -> Action {
    let f = FsAction { path: rel.into(), resolved: fx.ws.join(rel), backend: Backend::Direct };
    match kind {
        "fs.write" => Action::FsWrite(f),
        "fs.edit" => Action::FsEdit(f),
        "fs.multi_edit" => Action::FsMultiEdit(f),
        "fs.remove" => Action::FsRemove(f),
        "fs.mkdir" => Action::FsMkdir(f),
        other => panic!("{other}"),
    }
}

fn allow(rule: &str) -> Decision {
    Decision::Allow { writable: true, write_grants: None, rule: Some(rule.into()) }
}

fn read_only(rule: &str) -> Decision {
    Decision::Allow { writable: false, write_grants: Some(Vec::new()), rule: Some(rule.into()) }
}

fn grant(rule: &str, paths: &[&Path]) -> Decision {
    Decision::Allow {
        writable: false,
        write_grants: Some(paths.iter().map(|p| p.to_path_buf()).collect()),
        rule: Some(rule.into()),
    }
}

fn refusal(d: &Decision) -> (&str, &str) {
    match d {
        Decision::Refuse { reason, rule } => (reason.as_str(), rule.as_deref().unwrap_or_default()),
        other => panic!("not refused: {other:?}"),
    }
}

const TRIO: &str = r#"
[[gate]]
name = "no-push"
command = "git"
args = "push*"
answer = "refuse"
reason = "git push needs review"

[[gate]]
name = "git"
command = "git"
answer = "grant"
paths = [".git"]

[[gate]]
name = "tests"
command = ["cargo", "make"]
args = "test*"
answer = "grant"
paths = ["target", "/tmp"]

[[gate]]
name = "builds"
command = "cargo"
answer = "allow"
"#;

#[test]
fn each_answer() {
    let fx = fx();
    let r = rules(&fx, TRIO);
    let d = decide(&r, &shell(&fx, vec![pc(&["git", "push", "origin", "main"])], writable()));
    let (reason, rule) = refusal(&d);
    assert_eq!(rule, "no-push");
    assert!(reason.contains("`git push origin main`") && reason.contains("no-push"), "{reason}");
    assert!(reason.contains("git push needs review"), "{reason}");
    let d = decide(&r, &shell(&fx, vec![pc(&["git", "commit", "-m", "x"])], writable()));
    assert_eq!(d, grant("git", &[&fx.ws.join(".git")]));
    let d = decide(&r, &shell(&fx, vec![pc(&["cargo", "test", "--all"])], writable()));
    assert_eq!(d, grant("tests", &[&fx.ws.join("target"), &std::fs::canonicalize("/tmp").unwrap_or_default()]));
    let d = decide(&r, &shell(&fx, vec![pc(&["cargo", "build"])], writable()));
    assert_eq!(d, allow("builds"));
    let ro = rules(&fx, "[[gate]]\ncommand = \"ls\"\nanswer = \"read-only\"\n");
    assert_eq!(decide(&ro, &shell(&fx, vec![pc(&["ls", "-l"])], writable())), read_only("gate[0]"));
}

#[test]
fn the_first_matching_rule_answers() {
    let fx = fx();
    // `git push` meets no-push before the git grant.
    let r = rules(&fx, TRIO);
    assert_eq!(refusal(&decide(&r, &shell(&fx, vec![pc(&["git", "push"])], writable()))).1, "no-push");
    // The other order: the grant answers first and the refusal never applies.
    let swapped = r#"
[[gate]]
command = "git"
answer = "grant"
paths = [".git"]

[[gate]]
command = "git"
args = "push*"
answer = "refuse"
reason = "never reached"
"#;
    let r = rules(&fx, swapped);
    let d = decide(&r, &shell(&fx, vec![pc(&["git", "push"])], writable()));
    assert_eq!(d, grant("gate[0]", &[&fx.ws.join(".git")]));
}

#[test]
fn unmatched_shell_commands_are_read_only_and_file_operations_allowed() {
    let fx = fx();
    let r = rules(&fx, TRIO);
    assert_eq!(decide(&r, &shell(&fx, vec![pc(&["rm", "-rf", "."])], writable())), read_only("default"));
    for kind in ["fs.write", "fs.edit", "fs.multi_edit", "fs.remove", "fs.mkdir"] {
        assert_eq!(decide(&r, &fs(&fx, kind, "src/lib.rs")), allow("default"), "{kind}");
    }
    // A line with no command at all (`X=1`) is a shell command too.
    assert_eq!(decide(&r, &shell(&fx, vec![], writable())), read_only("default"));
    // No [[gate]] list: no gate.
    let p = WorkspacePolicy::from_toml("write = [\"target\"]\n").unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(p.gate(&fx.ws), Ok(None)));
}

#[test]
fn a_line_gets_the_meet_of_its_commands() {
    let fx = fx();
    let r = rules(&fx, TRIO);
    // grant ∧ default read-only: read-only, and the default is named.
    let d = decide(&r, &shell(&fx, vec![pc(&["git", "log"]), pc(&["wc", "-l"])], writable()));
    assert_eq!(d, read_only("default"));
    // allow ∧ grant: the grant.
    let d = decide(&r, &shell(&fx, vec![pc(&["cargo", "build"]), pc(&["git", "add", "."])], writable()));
    assert_eq!(d, grant("git", &[&fx.ws.join(".git")]));
    // grant ∧ grant: the paths both allow (by containment).
    let d = decide(&r, &shell(&fx, vec![pc(&["cargo", "test"]), pc(&["git", "status"])], writable()));
    assert_eq!(d, grant("tests, git", &[]), "target+/tmp ∩ .git is nothing");
    let nested = r#"
[[gate]]
name = "wide"
command = "make"
answer = "grant"
paths = ["target", "/tmp"]

[[gate]]
name = "narrow"
command = "cp"
answer = "grant"
paths = ["target/debug", ".git"]
"#;
    let r2 = rules(&fx, nested);
    let d = decide(&r2, &shell(&fx, vec![pc(&["make"]), pc(&["cp", "a", "b"])], writable()));
    assert_eq!(d, grant("wide, narrow", &[&fx.ws.join("target/debug")]));
    // allow ∧ allow: allow, both named once.
    let d = decide(&r, &shell(&fx, vec![pc(&["cargo", "build"]), pc(&["cargo", "doc"])], writable()));
    assert_eq!(d, allow("builds"));
    // Any refusal refuses the whole line, whatever comes before or after.
    let d = decide(&r, &shell(&fx, vec![pc(&["cargo", "build"]), pc(&["git", "push"]), pc(&["ls"])], writable()));
    let (reason, rule) = refusal(&d);
    assert_eq!(rule, "no-push");
    assert!(reason.contains("`git push`"), "{reason}");
}

#[test]
fn commands_a_command_starts_are_judged_too() {
    let fx = fx();
    let r = rules(&fx, "[[gate]]\nname = \"no-rm\"\ncommand = \"rm\"\nanswer = \"refuse\"\nreason = \"no deleting\"\n\n[[gate]]\ncommand = \"find\"\nanswer = \"allow\"\n");
    // find -exec rm: the inner rm is refused.
    let find = runs(pc(&["find", ".", "-exec", "rm", "{}", ";"]), vec![pc(&["rm", "{}"])]);
    assert_eq!(refusal(&decide(&r, &shell(&fx, vec![find], writable()))).1, "no-rm");
    // Deeper: env → xargs → rm.
    let deep = runs(pc(&["env", "xargs", "rm"]), vec![runs(pc(&["xargs", "rm"]), vec![pc(&["rm"])])]);
    assert_eq!(refusal(&decide(&r, &shell(&fx, vec![deep], writable()))).1, "no-rm");
    // A find that starts nothing allowed: the control.
    assert_eq!(decide(&r, &shell(&fx, vec![pc(&["find", ".", "-name", "x"])], writable())), allow("gate[1]"));
    // An allowed find whose -exec runs an unmatched command: read-only.
    let find_cat = runs(pc(&["find", ".", "-exec", "cat", "{}", ";"]), vec![pc(&["cat", "{}"])]);
    assert_eq!(decide(&r, &shell(&fx, vec![find_cat], writable())), read_only("default"));
}

#[test]
fn the_checkers_plan_of_find_exec_is_judged_command_by_command() {
    // The plan as the policy checker builds it, not as a test writes it.
    let fx = fx();
    let text = format!(
        "workspace = {:?}\n[shell]\ninterpreter = \"sh\"\n\n[[gate]]\nname = \"no-rm\"\ncommand = \"rm\"\nanswer = \"refuse\"\nreason = \"r\"\n\n[[gate]]\ncommand = \"find\"\nanswer = \"allow\"\n",
        fx.ws
    );
    let p = WorkspacePolicy::from_toml(&text).unwrap_or_else(|e| panic!("{e}"));
    let r = p.gate(&fx.ws).ok().flatten().unwrap_or_else(|| panic!("no gate"));
    let checker = p.checker().unwrap_or_else(|e| panic!("{e}"));
    let plan_of = |line: &str| match checker.check(line).plan() {
        Some(plan) => plan.commands.clone(),
        None => panic!("refused by the checker: {line}"),
    };
    let d = decide(&r, &shell(&fx, plan_of("find . -name '*.o' -exec rm {} +"), writable()));
    assert_eq!(refusal(&d).1, "no-rm");
    let d = decide(&r, &shell(&fx, plan_of("find . -name '*.o' -print"), writable()));
    assert_eq!(d, allow("gate[1]"));
    let d = decide(&r, &shell(&fx, plan_of("ls && find . -print | rm -f x"), writable()));
    assert_eq!(refusal(&d).1, "no-rm");
}

#[test]
fn dynamic_words_match_restrictive_rules_only() {
    let fx = fx();
    let r = rules(&fx, TRIO);
    // `git $X`: no-push cannot rule it out, so it refuses, and says why.
    let d = decide(&r, &shell(&fx, vec![dynamic(pc(&["git", "$X"]), &[1])], writable()));
    let (reason, rule) = refusal(&d);
    assert_eq!(rule, "no-push");
    assert!(reason.contains("decided at run time"), "{reason}");
    // `cargo test $ARGS`: the grant rule with `args` does not match; the
    // next matching rule (allow without args) does.
    let d = decide(&r, &shell(&fx, vec![dynamic(pc(&["cargo", "test", "$ARGS"]), &[2])], writable()));
    assert_eq!(d, allow("builds"));
    // A rule without `args` is not unsure about dynamic arguments.
    let g = rules(&fx, "[[gate]]\ncommand = \"git\"\nanswer = \"grant\"\npaths = [\".git\"]\n");
    let d = decide(&g, &shell(&fx, vec![dynamic(pc(&["git", "$X"]), &[1])], writable()));
    assert_eq!(d, grant("gate[0]", &[&fx.ws.join(".git")]));
    // A dynamic command word: a `command` rule cannot know it.
    let d = decide(&g, &shell(&fx, vec![dynamic(pc(&["$TOOL", "x"]), &[0])], writable()));
    assert_eq!(d, read_only("default"), "a grant rule does not match `$TOOL`");
    let no = rules(&fx, "[[gate]]\ncommand = \"curl\"\nanswer = \"refuse\"\nreason = \"no network\"\n");
    assert!(matches!(
        decide(&no, &shell(&fx, vec![dynamic(pc(&["$TOOL"]), &[0])], writable())),
        Decision::Refuse { .. }
    ));
    // The control: a static command the rule does not name passes it.
    assert_eq!(decide(&no, &shell(&fx, vec![pc(&["ls"])], writable())), read_only("default"));
    // A read-only rule with `args` matches a dynamic command too.
    let ro = rules(&fx, "[[gate]]\ncommand = \"sed\"\nargs = \"-n *\"\nanswer = \"read-only\"\n\n[[gate]]\ncommand = \"sed\"\nanswer = \"allow\"\n");
    assert_eq!(
        decide(&ro, &shell(&fx, vec![dynamic(pc(&["sed", "$E", "f"]), &[1])], writable())),
        read_only("gate[0]")
    );
    assert_eq!(decide(&ro, &shell(&fx, vec![pc(&["sed", "-i", "s/a/b/", "f"])], writable())), allow("gate[1]"));
}

#[test]
fn executables_match_by_basename_or_absolute_path() {
    let fx = fx();
    let r = rules(&fx, TRIO);
    for word in ["git", "/usr/bin/git", "./git", "/opt/x/bin/git"] {
        assert_eq!(refusal(&decide(&r, &shell(&fx, vec![pc(&[word, "push"])], writable()))).1, "no-push", "{word}");
    }
    assert_eq!(decide(&r, &shell(&fx, vec![pc(&["gitk", "push"])], writable())), read_only("default"));
    // An absolute rule: the same path matches; a bare name (found on PATH at
    // run time) or another directory matches only a restrictive rule.
    let abs = r#"
[[gate]]
command = "/usr/bin/git"
answer = "allow"

[[gate]]
command = "/usr/bin/curl"
answer = "refuse"
reason = "no network"
"#;
    let a = rules(&fx, abs);
    assert_eq!(decide(&a, &shell(&fx, vec![pc(&["/usr/bin/git", "log"])], writable())), allow("gate[0]"));
    assert_eq!(decide(&a, &shell(&fx, vec![pc(&["/usr/bin/../bin/git"])], writable())), allow("gate[0]"));
    assert_eq!(decide(&a, &shell(&fx, vec![pc(&["git", "log"])], writable())), read_only("default"));
    assert_eq!(decide(&a, &shell(&fx, vec![pc(&["/bin/git", "log"])], writable())), read_only("default"));
    for word in ["/usr/bin/curl", "curl", "/bin/curl", "CURL"] {
        assert_eq!(refusal(&decide(&a, &shell(&fx, vec![pc(&[word])], writable()))).1, "gate[1]", "{word}");
    }
}

#[test]
fn kind_and_path_select_file_operations() {
    let fx = fx();
    let r = rules(
        &fx,
        r#"
[[gate]]
name = "secrets"
path = "secrets/**"
answer = "refuse"
reason = "secrets are managed elsewhere"

[[gate]]
name = "no-rmdir-src"
kind = ["fs.remove"]
path = "src"
answer = "refuse"
reason = "keep the sources"

[[gate]]
name = "ci"
kind = "fs.write"
path = ".github/workflows/*.yml"
answer = "read-only"

[[gate]]
name = "cache"
path = "/var/cache/**"
answer = "refuse"
reason = "write in the workspace"
"#,
    );
    for kind in ["fs.write", "fs.edit", "fs.multi_edit", "fs.remove", "fs.mkdir"] {
        assert_eq!(refusal(&decide(&r, &fs(&fx, kind, "secrets/db.key"))).1, "secrets", "{kind}");
        assert_eq!(refusal(&decide(&r, &fs(&fx, kind, "secrets"))).1, "secrets", "dir/** covers dir ({kind})");
    }
    assert_eq!(refusal(&decide(&r, &fs(&fx, "fs.remove", "src/main.rs"))).1, "no-rmdir-src", "below a match");
    assert_eq!(decide(&r, &fs(&fx, "fs.write", "src/main.rs")), allow("default"), "another kind");
    assert_eq!(decide(&r, &fs(&fx, "fs.write", ".github/workflows/ci.yml")), read_only("ci"));
    assert_eq!(decide(&r, &fs(&fx, "fs.edit", ".github/workflows/ci.yml")), allow("default"));
    assert_eq!(decide(&r, &fs(&fx, "fs.write", ".github/workflows/sub/ci.yml")), allow("default"), "* stops at /");
    let outside = Action::FsWrite(FsAction {
        path: "/var/cache/x".into(),
        resolved: "/var/cache/x".into(),
        backend: Backend::Direct,
    });
    assert_eq!(refusal(&decide(&r, &outside)).1, "cache");
    // A path rule never answers for a shell command, nor a command rule for a file.
    assert_eq!(decide(&r, &shell(&fx, vec![pc(&["cat", "secrets/db.key"])], writable())), read_only("default"));
    let c = rules(&fx, "[[gate]]\ncommand = \"git\"\nanswer = \"refuse\"\nreason = \"x\"\n");
    assert_eq!(decide(&c, &fs(&fx, "fs.write", "git")), allow("default"));
    // A kind alone: every action of that kind.
    let k = rules(&fx, "[[gate]]\nkind = [\"fs.remove\", \"shell.exec\"]\nanswer = \"refuse\"\nreason = \"x\"\n");
    assert!(matches!(decide(&k, &fs(&fx, "fs.remove", "a")), Decision::Refuse { .. }));
    assert!(matches!(decide(&k, &shell(&fx, vec![pc(&["ls"])], writable())), Decision::Refuse { .. }));
    assert_eq!(decide(&k, &fs(&fx, "fs.mkdir", "a")), allow("default"));
}

#[test]
fn with_the_meet_the_trio_gives_what_the_examples_promise() {
    let fx = fx();
    let r = rules(&fx, TRIO);
    let tmp = std::fs::canonicalize("/tmp").unwrap_or_else(|e| panic!("{e}"));
    let meet = |action: &Action| action.asked().meet(&decide(&r, action), &fx.ws);
    // git asked writable: only .git stays writable.
    let m = meet(&shell(&fx, vec![pc(&["git", "commit"])], writable())).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.effective, Access { writable: false, write_grants: vec![fx.ws.join(".git")] });
    // git asked read-only: stays read-only, the gate's .git is dropped.
    let m = meet(&shell(&fx, vec![pc(&["git", "commit"])], Access::read_only())).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.effective, Access::read_only());
    assert_eq!(m.dropped, vec![fx.ws.join(".git")]);
    // Tests asked with the workspace and /tmp: target and /tmp.
    let asked = Access { writable: true, write_grants: vec![tmp.clone()] };
    let m = meet(&shell(&fx, vec![pc(&["cargo", "test"])], asked)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.effective, Access { writable: false, write_grants: vec![fx.ws.join("target"), tmp.clone()] });
    // Tests asked with target only: /tmp is dropped.
    let asked = Access { writable: false, write_grants: vec![fx.ws.join("target")] };
    let m = meet(&shell(&fx, vec![pc(&["cargo", "test"])], asked)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.effective.write_grants, vec![fx.ws.join("target")]);
    assert_eq!(m.dropped, vec![tmp]);
    // git push: refused, with the rule.
    let e = meet(&shell(&fx, vec![pc(&["git", "push"])], writable()));
    assert!(matches!(e, Err(GateRefusal { rule: Some(ref n), .. }) if n == "no-push"), "{e:?}");
}

#[test]
fn a_grant_through_a_link_resolves_and_cannot_leave_the_asked_grant() {
    let fx = fx();
    let secret = fx.out.parent().unwrap_or(&fx.out).join("secret");
    std::fs::create_dir_all(&secret).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(&secret, fx.out.join("link")).unwrap_or_else(|e| panic!("{e}"));
    let text = format!(
        "[[gate]]\ncommand = \"make\"\nanswer = \"grant\"\npaths = [{:?}, {:?}]\n",
        fx.out.join("link"),
        fx.out.join("new/dir")
    );
    let r = rules(&fx, &text);
    let action = shell(&fx, vec![pc(&["make"])], Access { writable: false, write_grants: vec![fx.out.clone()] });
    let d = decide(&r, &action);
    assert_eq!(d, grant("gate[0]", &[&secret, &fx.out.join("new/dir")]), "resolved; a missing rest kept as named");
    let m = action.asked().meet(&d, &fx.ws).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.effective.write_grants, vec![fx.out.join("new/dir")]);
    assert_eq!(m.dropped, vec![secret]);
}

fn parse_err(text: &str) -> String {
    match WorkspacePolicy::from_toml(text) {
        Ok(_) => panic!("accepted: {text}"),
        Err(e @ (PolicyError::Parse { .. } | PolicyError::Invalid { .. })) => e.to_string(),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn parse_errors_name_the_rule_and_key() {
    let ok = "[[gate]]\ncommand = \"ls\"\nanswer = \"allow\"\n\n[[gate]]\ncommand = \"ls\"\nanswer = \"allow\"\n\n";
    let cases: &[(&str, &[&str])] = &[
        ("[[gate]]\ncommand = \"ls\"\nanswer = \"maybe\"\n", &["gate[2].answer", "expected one of", "read-only"]),
        ("[[gate]]\ncommand = \"ls\"\n", &["gate[2]", "answer"]),
        ("[[gate]]\ncommand = \"ls\"\nanswer = \"refuse\"\n", &["gate[2].reason", "needs a reason"]),
        ("[[gate]]\ncommand = \"ls\"\nanswer = \"refuse\"\nreason = \" \"\n", &["gate[2].reason", "empty"]),
        ("[[gate]]\ncommand = \"ls\"\nanswer = \"grant\"\n", &["gate[2].paths", "read-only"]),
        ("[[gate]]\ncommand = \"ls\"\nanswer = \"allow\"\npaths = [\"x\"]\n", &["gate[2].paths", "only a grant"]),
        ("[[gate]]\ncommand = \"ls\"\nanswer = \"allow\"\nreason = \"x\"\n", &["gate[2].reason", "only a refuse"]),
        ("[[gate]]\ncommand = \"ls\"\nanswer = \"grant\"\npaths = [\"../up\"]\n", &["gate[2].paths[0]", ".."]),
        ("[[gate]]\ncommand = \"ls\"\nanswer = \"grant\"\npaths = [\"/\"]\n", &["gate[2].paths[0]"]),
        ("[[gate]]\ncommand = \"ls\"\nanswer = \"allow\"\ncolour = 1\n", &["gate[2].colour", "unknown field"]),
        ("[[gate]]\nkind = \"fs.delete\"\nanswer = \"allow\"\n", &["gate[2].kind", "fs.remove"]),
        ("[[gate]]\nkind = [\"fs.write\", \"x\"]\nanswer = \"allow\"\n", &["gate[2].kind[1]", "expected one of"]),
        ("[[gate]]\ncommand = []\nanswer = \"allow\"\n", &["gate[2].command", "empty list"]),
        ("[[gate]]\ncommand = \"bin/git\"\nanswer = \"allow\"\n", &["gate[2].command", "absolute"]),
        ("[[gate]]\ncommand = [\"git\", \"a b\"]\nanswer = \"allow\"\n", &["gate[2].command[1]"]),
        ("[[gate]]\ncommand = \"ls\"\nargs = \"[\"\nanswer = \"allow\"\n", &["gate[2].args", "bad glob"]),
        ("[[gate]]\npath = \"a/../b\"\nanswer = \"allow\"\n", &["gate[2].path", ".."]),
        ("[[gate]]\npath = \"x\"\ncommand = \"ls\"\nanswer = \"allow\"\n", &["gate[2].path", "cannot match both"]),
        (
            "[[gate]]\ncommand = \"ls\"\nkind = \"fs.write\"\nanswer = \"allow\"\n",
            &["gate[2].kind", "excludes shell.exec"],
        ),
        ("[[gate]]\npath = \"x\"\nkind = \"shell.exec\"\nanswer = \"allow\"\n", &["gate[2].kind", "only shell.exec"]),
        ("[[gate]]\nname = \"gate[0]\"\nanswer = \"allow\"\n", &["gate[2].name", "two rules"]),
        ("[[gate]]\nname = \"default\"\nanswer = \"allow\"\n", &["gate[2].name", "built-in default"]),
        ("[[gate]]\nname = \"\"\nanswer = \"allow\"\n", &["gate[2].name", "empty"]),
    ];
    for (bad, wants) in cases {
        let e = parse_err(&format!("{ok}{bad}"));
        for w in *wants {
            assert!(e.contains(w), "{bad:?}: {e} lacks {w:?}");
        }
    }
    // JSON reads the same, with the same keys.
    let e = WorkspacePolicy::from_json(r#"{"gate":[{"command":"ls","answer":"allow"},{"answer":"nope"}]}"#);
    assert!(e.as_ref().is_err_and(|e| e.to_string().contains("gate[1].answer")), "{e:?}");
    let j =
        WorkspacePolicy::from_json(r#"{"gate":[{"command":["git"],"args":"push*","answer":"refuse","reason":"r"}]}"#);
    let t = WorkspacePolicy::from_toml(
        "[[gate]]\ncommand = \"git\"\nargs = \"push*\"\nanswer = \"refuse\"\nreason = \"r\"\n",
    );
    assert_eq!(j.map(|p| p.gate).ok(), t.map(|p| p.gate).ok());
}

#[test]
fn rules_serialise_and_read_back() {
    let p = WorkspacePolicy::from_toml(TRIO).unwrap_or_else(|e| panic!("{e}"));
    let text = serde_json::to_string(&p).unwrap_or_else(|e| panic!("{e}"));
    let back = WorkspacePolicy::from_json(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(back.gate, p.gate);
}

#[test]
fn a_grant_that_cannot_be_resolved_is_a_gate_error_not_a_decision() {
    let fx = fx();
    // A path below a regular file: ENOTDIR, not a missing path.
    let file = fx.out.join("file");
    std::fs::write(&file, "x").unwrap_or_else(|e| panic!("{e}"));
    let text = format!("[[gate]]\ncommand = \"make\"\nanswer = \"grant\"\npaths = [{:?}]\n", file.join("x"));
    let r = rules(&fx, &text);
    let g: &dyn Gate = &r;
    let e = match block_on(g.check(&shell(&fx, vec![pc(&["make"])], writable()))) {
        Err(e) => crate::error_chain(&e),
        Ok(d) => panic!("decided: {d:?}"),
    };
    assert!(e.contains("gate rule gate[0]: cannot resolve the grant") && e.contains("Not a directory"), "{e}");
    // The control: the same rule over a missing path decides.
    let text = format!("[[gate]]\ncommand = \"make\"\nanswer = \"grant\"\npaths = [{:?}]\n", fx.out.join("x"));
    let r = rules(&fx, &text);
    assert_eq!(decide(&r, &shell(&fx, vec![pc(&["make"])], writable())), grant("gate[0]", &[&fx.out.join("x")]));
}
