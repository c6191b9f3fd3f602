//! The policy core: the corpus of verdicts, the path jail on a real tree,
//! the example policies, and `portcullis check` / `exec --policy`.

use portcullis::policy::Verdict;

use super::policy_corpus::{interpreter, CorpusWs, Mode, Want, CORPUS};

fn show(v: &Verdict) -> String {
    match v {
        Verdict::Accepted(p) => {
            let names: Vec<&str> = p.commands.iter().filter_map(|c| c.argv.first().map(String::as_str)).collect();
            format!("accepted {names:?}")
        }
        Verdict::Refused(r) => format!("refused {} ({}): {}", r.reason, r.command, r.message),
    }
}

#[test]
fn corpus_verdicts() {
    let ws = CorpusWs::new();
    let policy = ws.policy();
    let mut failures = Vec::new();
    let checker = |m: Mode| match policy.checker() {
        Ok(c) => c.with_interpreter(interpreter(m)),
        Err(e) => panic!("{e}"),
    };
    let (argv, sh) = (checker(Mode::Argv), checker(Mode::Sh));
    for (mode, line, want) in CORPUS {
        let v = match mode {
            Mode::Argv => argv.check(line),
            Mode::Sh => sh.check(line),
        };
        let good = match (want, &v) {
            (Want::Ok(names), Verdict::Accepted(p)) => {
                let got: Vec<&str> = p.commands.iter().filter_map(|c| c.argv.first().map(String::as_str)).collect();
                got == *names
            }
            (Want::No(reason), Verdict::Refused(r)) => r.reason == *reason && !r.message.is_empty(),
            _ => false,
        };
        if !good {
            failures.push(format!("{mode:?} {line:?}: want {want:?}, got {}", show(&v)));
        }
    }
    assert!(failures.is_empty(), "{} of {} corpus lines wrong:\n{}", failures.len(), CORPUS.len(), failures.join("\n"));
}

#[test]
fn corpus_is_large_and_covers_every_reason() {
    for r in portcullis::policy::RefusalReason::ALL {
        assert!(CORPUS.iter().any(|(_, _, w)| matches!(w, Want::No(x) if *x == r)), "no corpus line refused with {r}");
    }
    assert!(CORPUS.iter().filter(|(m, _, w)| *m == Mode::Sh && matches!(w, Want::Ok(_))).count() >= 60);
}

// ------------------------------------------------------------ the path jail

mod jail {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::symlink;
    use std::path::{Path, PathBuf};

    use portcullis::policy::{PathAccess, PathJail, PolicyError, WorkspacePolicy};

    use super::super::util::{test_root, Ws};

    struct Fixture {
        /// Holds `ws/` (the workspace), `ws-evil/` (a prefix sibling) and `ro/` (an allowed root).
        base: tempfile::TempDir,
        jail: PathJail,
    }

    impl Fixture {
        fn new() -> Fixture {
            let base = match tempfile::Builder::new().prefix("pc-jail-").tempdir_in(test_root()) {
                Ok(d) => d,
                Err(e) => panic!("{e}"),
            };
            let b = base.path();
            for d in ["ws/src", "ws/target", "ws/secrets", "ws-evil", "ro/lib", "grant"] {
                mk(std::fs::create_dir_all(b.join(d)));
            }
            mk(std::fs::write(b.join("ws/src/main.rs"), "x"));
            mk(std::fs::write(b.join("ws-evil/loot"), "x"));
            mk(std::fs::write(b.join("ro/lib/a.txt"), "x"));
            mk(symlink("src", b.join("ws/in-link")));
            mk(symlink("../ws-evil", b.join("ws/out-link")));
            mk(symlink(b.join("ro/lib"), b.join("ws/ro-link")));
            mk(symlink("/proc/self/root", b.join("ws/proc-link")));
            mk(symlink("loop2", b.join("ws/loop1")));
            mk(symlink("loop1", b.join("ws/loop2")));
            mk(symlink("missing-target", b.join("ws/dangling")));
            let policy = WorkspacePolicy {
                workspace: Some(b.join("ws")),
                allow_paths: vec![b.join("ro")],
                deny_paths: vec!["secrets/**".into(), ".env*".into()],
                write: vec!["target".into(), b.join("grant")],
                ..WorkspacePolicy::default()
            };
            let jail = match policy.jail() {
                Ok(j) => j,
                Err(e) => panic!("{e}"),
            };
            Fixture { base, jail }
        }

        fn ws(&self) -> PathBuf {
            self.base.path().join("ws")
        }

        fn ok(&self, p: impl AsRef<Path>, access: PathAccess) -> PathBuf {
            match self.jail.resolve(p.as_ref(), access) {
                Ok(r) => r,
                Err(e) => panic!("{} refused: {e}", p.as_ref().display()),
            }
        }

        fn escape(&self, p: impl AsRef<Path>, access: PathAccess) -> String {
            match self.jail.resolve(p.as_ref(), access) {
                Err(PolicyError::PathEscape { why, .. }) => why,
                other => panic!("{}: want PathEscape, got {other:?}", p.as_ref().display()),
            }
        }
    }

    fn mk<T>(r: std::io::Result<T>) -> T {
        match r {
            Ok(v) => v,
            Err(e) => panic!("fixture: {e}"),
        }
    }

    #[test]
    fn inside_paths_resolve_to_real_paths() {
        let f = Fixture::new();
        let ws = f.ws();
        assert_eq!(f.ok("src/main.rs", PathAccess::Read), ws.join("src/main.rs"));
        assert_eq!(f.ok(ws.join("src/main.rs"), PathAccess::Read), ws.join("src/main.rs"), "absolute inside");
        assert_eq!(f.ok("in-link/main.rs", PathAccess::Write), ws.join("src/main.rs"), "a link that stays inside");
        assert_eq!(f.ok("src/../src/./main.rs", PathAccess::Read), ws.join("src/main.rs"));
        assert_eq!(
            f.ok("target/new/deeper/file", PathAccess::Write),
            ws.join("target/new/deeper/file"),
            "missing parents"
        );
        assert_eq!(f.ok("dangling", PathAccess::Write), ws.join("missing-target"), "a dangling link inside");
        assert_eq!(f.ok("ro-link/a.txt", PathAccess::Read), f.base.path().join("ro/lib/a.txt"), "into an allowed root");
        assert_eq!(f.ok(f.base.path().join("grant/x"), PathAccess::Write), f.base.path().join("grant/x"));
        // Leaving and coming back resolves inside: what counts is where it leads.
        assert_eq!(f.ok("../ws/src/main.rs", PathAccess::Read), ws.join("src/main.rs"));
    }

    #[test]
    fn escapes_are_refused_with_the_reason() {
        let f = Fixture::new();
        assert!(f.escape("../ws-evil/loot", PathAccess::Read).contains("outside the workspace"));
        assert!(f.escape(f.base.path().join("ws-evil/loot"), PathAccess::Read).contains("outside"), "prefix sibling");
        assert!(f.escape("out-link/loot", PathAccess::Read).contains("outside"), "a link leading out");
        assert!(f.escape("src/../../ws-evil", PathAccess::Read).contains("outside"));
        assert!(f.escape("/etc/passwd", PathAccess::Read).contains("outside"));
        assert!(f.escape("/", PathAccess::Read).contains("outside"));
        assert!(f.escape("proc-link/etc/passwd", PathAccess::Read).contains("/proc"), "a /proc detour");
        assert!(f.escape("/proc/self/root/etc/passwd", PathAccess::Read).contains("/proc"));
        assert!(f.escape("/proc/self/cwd/src/main.rs", PathAccess::Read).contains("/proc"), "even if it leads back");
        assert!(f.escape("loop1", PathAccess::Read).contains("symbolic links"));
        assert!(
            f.escape("nope/../../ws-evil", PathAccess::Write).contains("does not exist"),
            "`..` after a missing part"
        );
        assert!(f.escape("secrets/key", PathAccess::Read).contains("secrets/**"));
        assert!(f.escape("secrets", PathAccess::Read).contains("secrets/**"));
        assert!(f.escape("src/.env.local", PathAccess::Write).contains(".env*"));
        assert!(f.escape("ro-link/a.txt", PathAccess::Write).contains("read-only root"), "allowed roots are read-only");
        assert!(f.escape("", PathAccess::Read).contains("empty"));
    }

    #[test]
    fn deny_globs_see_link_names_and_grants_follow_the_sandbox() {
        let f = Fixture::new();
        let b = f.base.path();
        // A link whose name is denied is refused, as the sandbox masks it.
        mk(symlink("src/main.rs", f.ws().join(".env.local")));
        assert!(f.escape(".env.local", PathAccess::Read).contains(".env*"));
        // A grant spelled inside the workspace through a link that leads out
        // grants nothing outside (the sandbox refuses it).
        mk(symlink(b.join("ws-evil"), f.ws().join("cache")));
        let p = WorkspacePolicy {
            workspace: Some(f.ws()),
            write: vec![f.ws().join("cache"), b.join("ws/../ws-evil")],
            ..WorkspacePolicy::default()
        };
        let jail = match p.jail() {
            Ok(j) => j,
            Err(e) => panic!("{e}"),
        };
        for target in [b.join("ws-evil/loot"), f.ws().join("cache/loot")] {
            assert!(
                matches!(jail.resolve(&target, PathAccess::Write), Err(PolicyError::PathEscape { .. })),
                "{} must not be writable",
                target.display()
            );
        }
        // A grant containing the workspace grants what lies outside it, as
        // the sandbox does (the narrower rule wins inside).
        let p = WorkspacePolicy { workspace: Some(f.ws()), write: vec![b.to_path_buf()], ..WorkspacePolicy::default() };
        let jail = match p.jail() {
            Ok(j) => j,
            Err(e) => panic!("{e}"),
        };
        assert!(jail.resolve(&b.join("ws-evil/loot"), PathAccess::Write).is_ok());
        // A deny glob whose directories go through a link would match
        // nothing: the policy is refused, naming it.
        mk(symlink("src", f.ws().join("srclink")));
        let p = WorkspacePolicy {
            workspace: Some(f.ws()),
            deny_paths: vec!["srclink/*.rs".into()],
            ..WorkspacePolicy::default()
        };
        assert!(p.jail().is_err_and(|e| e.to_string().contains("deny_paths[0]")));
    }

    #[test]
    fn non_utf8_names_are_handled_as_bytes() {
        let f = Fixture::new();
        let name = OsStr::from_bytes(b"caf\xe9-\xff.txt");
        mk(std::fs::write(f.ws().join(name), "x"));
        assert_eq!(f.ok(Path::new(name), PathAccess::Read), f.ws().join(name));
        assert_eq!(f.ok(Path::new("src").join(name), PathAccess::Write), f.ws().join("src").join(name));
        let out = Path::new("..").join(OsStr::from_bytes(b"ws-evil")).join(name);
        assert!(f.escape(out, PathAccess::Write).contains("outside"));
    }

    #[test]
    fn the_workspace_must_exist_and_be_absolute() {
        let missing = WorkspacePolicy {
            workspace: Some(PathBuf::from("/nonexistent/portcullis/ws")),
            ..WorkspacePolicy::default()
        };
        assert!(matches!(missing.jail(), Err(PolicyError::Resolve { .. })));
        let ws = Ws::new();
        let rel = WorkspacePolicy::from_toml(&format!("workspace = {:?}\n", "relative/ws"));
        assert!(rel.is_err_and(|e| e.to_string().contains("absolute")));
        let ok = WorkspacePolicy::from_toml(&format!("workspace = {:?}\n", ws.path()));
        assert!(ok.is_ok_and(|p| p.jail().is_ok()));
    }
}

// ------------------------------------------------------------ the CLI

mod cli {
    use std::process::Output;

    use super::super::util::{available, cli, Ws};

    const POLICY: &str = r#"
[shell]
allow = ["sh", "echo", "cat", "ls", "touch", "printenv"]
deny = ["rm"]
deny_patterns = ["touch forbidden"]
inherit_env = ["PATH"]
env = { GREETING = "hello" }
timeout = "20s"
"#;

    fn policy_in(ws: &Ws, extra: &str) -> String {
        let text = format!("workspace = {:?}\nwrite = [\"out\"]\n{extra}{POLICY}", ws.path());
        ws.write("policy.toml", &text);
        ws.join("policy.toml").to_string_lossy().into_owned()
    }

    fn code(o: &Output) -> i32 {
        o.status.code().unwrap_or(-1)
    }

    fn run(args: &[&str]) -> Output {
        match cli().args(args).output() {
            Ok(o) => o,
            Err(e) => panic!("portcullis {args:?}: {e}"),
        }
    }

    #[test]
    fn check_exit_codes_and_json() {
        let ws = Ws::new();
        let p = policy_in(&ws, "");
        let ok = run(&["check", "--policy", &p, "--", "echo hi"]);
        assert_eq!(code(&ok), 0, "{}", String::from_utf8_lossy(&ok.stdout));
        assert!(String::from_utf8_lossy(&ok.stdout).starts_with("accepted (argv mode): 1 command"));
        let no = run(&["check", "--policy", &p, "--json", "--", "rm -rf src"]);
        assert_eq!(code(&no), 1);
        let v: serde_json::Value = serde_json::from_slice(&no.stdout).unwrap_or_default();
        assert_eq!(v["verdict"], "refused");
        assert_eq!(v["reason"], "denied-executable");
        let sh = run(&["check", "--policy", &p, "--sh", "--json", "--", "echo a | cat > out/x"]);
        assert_eq!(code(&sh), 0, "{}", String::from_utf8_lossy(&sh.stdout));
        let v: serde_json::Value = serde_json::from_slice(&sh.stdout).unwrap_or_default();
        assert_eq!(v["commands"][1]["argv"][0], "cat");
        assert_eq!(v["interpreter"], "sh");
        // Bad input: exit 125 (as for every failure of portcullis) with the key named.
        ws.write("bad.toml", "[shell]\nalow = [\"x\"]\n");
        let bad = run(&["check", "--policy", &ws.join("bad.toml").to_string_lossy(), "--", "ls"]);
        assert_eq!(code(&bad), 125);
        assert!(String::from_utf8_lossy(&bad.stderr).contains("alow"), "{}", String::from_utf8_lossy(&bad.stderr));
        // No policy: nothing may run.
        let none = run(&["check", "--workspace", &ws.path().to_string_lossy(), "--", "ls"]);
        assert_eq!(code(&none), 1);
    }

    #[test]
    fn exec_refuses_before_spawning_anything() {
        let ws = Ws::new();
        let p = policy_in(&ws, "");
        let before = ws.snapshot();
        for line in [vec!["touch", "forbidden"], vec!["rm", "-f", "README.md"], vec!["python3", "-c", "1"]] {
            let mut args = vec!["exec", "--policy", &p, "--writable", "--json", "--"];
            args.extend(line.iter().copied());
            let o = run(&args);
            assert_eq!(code(&o), 125, "{line:?}: {}", String::from_utf8_lossy(&o.stderr));
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
            assert_eq!(v["error"]["kind"], "refused-by-policy", "{v}");
            assert_eq!(v["writable"], false, "{v}");
        }
        assert_eq!(ws.snapshot(), before, "nothing ran");
        let multi = run(&["exec", "--policy", &p, "--sh", "--", "echo", "two"]);
        assert_eq!(code(&multi), 125, "sh mode takes the line as one argument");
        // --explain shows the policy's verdict above the sandbox plan.
        let ex = run(&["exec", "--policy", &p, "--sh", "--explain", "--", "ls src > out/x && cat out/x"]);
        let text = String::from_utf8_lossy(&ex.stdout);
        assert_eq!(code(&ex), 0, "{}", String::from_utf8_lossy(&ex.stderr));
        assert!(text.contains("(accepted, sh mode, run with /bin/sh -c)"), "{text}");
        assert!(text.contains("policy-command: ls src\n") && text.contains("policy-command: cat out/x\n"), "{text}");
        assert!(text.contains("policy-redirect:   > ") && text.contains("argv: [\"/bin/sh\", \"-c\""), "{text}");
        assert_eq!(ws.snapshot(), before, "explain runs nothing");
    }

    #[test]
    fn exec_with_a_policy_runs_in_the_sandbox_with_its_settings() {
        if !available(
            "exec_with_a_policy",
            super::super::util::sandbox().plan(&Ws::new().req(&["true"])).is_ok(),
            "no sandbox",
        ) {
            return;
        }
        let ws = Ws::new();
        ws.write("out/.keep", "");
        let p = policy_in(&ws, "");
        // The policy's env, and start-up variables never reach the command.
        let o = run(&["exec", "--policy", &p, "--", "printenv", "GREETING"]);
        assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "hello");
        // sh mode: the line runs under /bin/sh -c after every command passed;
        // --writable grants the policy's write list (out/) and nothing else.
        let o = run(&["exec", "--policy", &p, "--sh", "--writable", "--", "echo made > out/x && echo done"]);
        assert_eq!(code(&o), 0, "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(ws.read("out/x"), "made\n");
        let o = run(&["exec", "--policy", &p, "--sh", "--writable", "--", "echo no > src/x"]);
        assert_ne!(code(&o), 0);
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("Read-only file system"),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(!ws.join("src/x").exists());
        // Without --writable the grant does not apply.
        let o = run(&["exec", "--policy", &p, "--sh", "--", "echo no > out/y"]);
        assert_ne!(code(&o), 0);
        assert!(!ws.join("out/y").exists());
        // A flag that names a start-up variable is refused as bad input.
        let o = run(&["exec", "--policy", &p, "--env", "BASH_ENV=/tmp/x", "--", "echo", "x"]);
        assert_eq!(code(&o), 125);
    }
}
