//! The shared backend suite (issue 10, "Backends"): one set of scenarios,
//! each run against the local backend (a real directory, the sandbox) and
//! the mock (an in-memory tree under a root that does not exist on this
//! disk, no sandbox), with the same policy, the same seeded files and the
//! same expectations. A scenario that passes on the mock means the same on
//! the real backend. Each checks from outside the workspace (the disk, or
//! the mock's tree through `MockBackend::contents`) and the audit's
//! records; each refusal has its control beside it (the same call, allowed).
//!
//! Commands are shared only where they do not run: a refusal by the
//! checker is the same value and record on both; what a command that runs
//! does legitimately differs (the mock is scripted, see `ws_mock.rs`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use portcullis::policy::WorkspacePolicy;
use portcullis::runner::{Exec, ExecOptions};
use portcullis::workspace::files::{Edit, ReadOptions};
use portcullis::workspace::list::ListOptions;
use portcullis::workspace::search::GrepOptions;
use portcullis::workspace::{MockBackend, Workspace, WorkspaceError};

use super::util::{rt, sandbox, MemAudit, Ws};

/// The mock's root: absent from this disk on purpose.
const MOCK_ROOT: &str = "/nonexistent-portcullis-mock/app";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Local,
    Mock,
}

/// One workspace of either backend, with a way to seed and inspect files
/// from outside.
struct Fx {
    kind: Kind,
    w: Workspace,
    audit: Arc<MemAudit>,
    root: PathBuf,
    local: Option<Ws>,
    mock: Option<MockBackend>,
}

impl Fx {
    fn seed(&self, rel: &str, data: &[u8]) {
        match (&self.local, &self.mock) {
            (Some(ws), _) => {
                let p = ws.join(rel);
                if let Some(d) = p.parent() {
                    std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("mkdir {}: {e}", d.display()));
                }
                std::fs::write(&p, data).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
            }
            (None, Some(m)) => m.add_file(rel, data.to_vec()),
            _ => unreachable!(),
        }
    }

    /// A file's bytes as they are now, seen from outside.
    fn contents(&self, rel: &str) -> Option<Vec<u8>> {
        match (&self.local, &self.mock) {
            (Some(ws), _) => std::fs::read(ws.join(rel)).ok(),
            (None, Some(m)) => m.contents(rel),
            _ => None,
        }
    }

    fn exists(&self, rel: &str) -> bool {
        match (&self.local, &self.mock) {
            (Some(ws), _) => std::fs::symlink_metadata(ws.join(rel)).is_ok(),
            (None, Some(m)) => m.exists_raw(rel),
            _ => false,
        }
    }
}

fn policy_text(root: &Path, extra: &str) -> String {
    format!(
        "workspace = {root:?}\ndeny_paths = [\".env*\", \"secrets\"]\n{extra}\n[shell]\ninterpreter = \"sh\"\nallow = \
         [\"ls\", \"touch\", \"cat\", \"echo\", \"true\"]\ntimeout = \"30s\"\n"
    )
}

fn fixture(kind: Kind, extra: &str) -> Fx {
    let audit = Arc::new(MemAudit::default());
    match kind {
        Kind::Local => {
            let ws = Ws::new();
            let root = std::fs::canonicalize(ws.path()).unwrap_or_else(|e| panic!("canonicalize: {e}"));
            let p = WorkspacePolicy::from_toml(&policy_text(ws.path(), extra)).unwrap_or_else(|e| panic!("{e}"));
            let w = Workspace::builder()
                .policy(p)
                .audit(audit.clone())
                .sandbox(sandbox())
                .build()
                .unwrap_or_else(|e| panic!("local workspace: {}", portcullis::error_chain(&e)));
            Fx { kind, w, audit, root, local: Some(ws), mock: None }
        }
        Kind::Mock => {
            let root = PathBuf::from(MOCK_ROOT);
            assert!(!root.exists(), "the mock's root must not exist on this disk");
            let p = WorkspacePolicy::from_toml(&policy_text(&root, extra)).unwrap_or_else(|e| panic!("{e}"));
            let mock = MockBackend::new(&p).unwrap_or_else(|e| panic!("mock: {e}"));
            // What `Ws::new` seeds.
            mock.add_file("src/main.rs", "fn main() { println!(\"hi\"); }\n");
            mock.add_file("src/lib.rs", "pub fn f() {}\n");
            mock.add_file("README.md", "readme\n");
            mock.add_file("target/.keep", "");
            let w = Workspace::builder()
                .policy(p)
                .audit(audit.clone())
                .backend(Arc::new(mock.clone()))
                .build()
                .unwrap_or_else(|e| panic!("mock workspace: {}", portcullis::error_chain(&e)));
            Fx { kind, w, audit, root, local: None, mock: Some(mock) }
        }
    }
}

/// Run `scenario` against both backends.
fn both(extra: &str, scenario: fn(&Fx)) {
    for kind in [Kind::Local, Kind::Mock] {
        let fx = fixture(kind, extra);
        scenario(&fx);
    }
}

fn err_kind<T: std::fmt::Debug>(r: &Result<T, WorkspaceError>) -> &'static str {
    match r {
        Err(e) => e.kind(),
        Ok(v) => panic!("expected an error, got {v:?}"),
    }
}

#[test]
fn r0520_read_window_and_hash_are_the_same() {
    both("", |fx| {
        fx.seed("notes.txt", b"one\ntwo\nthree\nfour\n");
        let w = rt()
            .block_on(fx.w.read_file("notes.txt", ReadOptions { offset: 2, limit: Some(2), max_bytes: None }))
            .unwrap_or_else(|e| panic!("{:?}: {e}", fx.kind));
        assert_eq!(w.content, "     2\ttwo\n     3\tthree\n", "{:?}", fx.kind);
        assert_eq!((w.start_line, w.end_line, w.total_lines, w.total_bytes), (2, 3, 4, 19), "{:?}", fx.kind);
        assert!(w.truncated && !w.bytes_capped && !w.lossy, "{:?}", fx.kind);
        assert_eq!(w.hash, portcullis::workspace::files::sha256_hex(b"one\ntwo\nthree\nfour\n"));
        // Binary and missing files answer the same kinds.
        fx.seed("blob.bin", b"ab\0cd");
        let r = rt().block_on(fx.w.read_file("blob.bin", ReadOptions::default()));
        assert_eq!(err_kind(&r), "binary", "{:?}", fx.kind);
        let r = rt().block_on(fx.w.read_file("missing.txt", ReadOptions::default()));
        assert_eq!(err_kind(&r), "no-such-file", "{:?}", fx.kind);
    });
}

#[test]
fn r0521_byte_cap_cuts_multibyte_text_on_a_character_boundary() {
    // The policy's ceiling, and a caller's lower one.
    both("[read]\nmax_bytes = 12\n", |fx| {
        fx.seed("u.txt", "éééé\nx\n".as_bytes());
        let w = rt().block_on(fx.w.read_file("u.txt", ReadOptions::default())).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(w.content, "     1\téé", "{:?}", fx.kind);
        assert!(w.bytes_capped && w.truncated && w.content.len() <= 12, "{:?}", fx.kind);
        let opts = ReadOptions { offset: 1, limit: None, max_bytes: Some(9) };
        let w = rt().block_on(fx.w.read_file("u.txt", opts)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(w.content, "     1\té", "{:?}", fx.kind);
        // Control: a caller cannot raise the ceiling.
        let opts = ReadOptions { offset: 1, limit: None, max_bytes: Some(1000) };
        let w = rt().block_on(fx.w.read_file("u.txt", opts)).unwrap_or_else(|e| panic!("{e}"));
        assert!(w.content.len() <= 12 && w.bytes_capped, "{:?}", fx.kind);
    });
}

#[test]
fn r0522_a_stale_hash_edit_is_refused_and_changes_nothing() {
    both("", |fx| {
        fx.seed("a.txt", b"one\ntwo\n");
        let e = |old: &str, new: &str| Edit { old: old.into(), new: new.into(), replace_all: false };
        rt().block_on(async {
            let page = fx.w.read_file("a.txt", ReadOptions::default()).await.unwrap_or_else(|e| panic!("{e}"));
            // Control: pinned to the hash read, the edit applies.
            let done = fx.w.edit_file("a.txt", e("two", "2"), Some(page.hash.clone())).await;
            let done = done.unwrap_or_else(|e| panic!("{:?}: {e}", fx.kind));
            assert_eq!(done.replacements, 1);
            let stale = fx.w.edit_file("a.txt", e("one", "1"), Some(page.hash)).await;
            assert_eq!(err_kind(&stale), "stale-hash", "{:?}", fx.kind);
            let r = fx.w.edit_file("a.txt", e("zzz", "y"), None).await;
            assert_eq!(err_kind(&r), "not-found", "{:?}", fx.kind);
            fx.seed("b.txt", b"x x\n");
            let r = fx.w.edit_file("b.txt", e("x", "y"), None).await;
            assert_eq!(err_kind(&r), "not-unique", "{:?}", fx.kind);
        });
        assert_eq!(fx.contents("a.txt").as_deref(), Some(&b"one\n2\n"[..]), "{:?}", fx.kind);
        assert_eq!(fx.contents("b.txt").as_deref(), Some(&b"x x\n"[..]), "{:?}", fx.kind);
    });
}

#[test]
fn r0523_multi_edit_is_all_or_none_and_names_the_failing_edit() {
    both("", |fx| {
        fx.seed("m.txt", b"alpha beta gamma\n");
        let e = |old: &str, new: &str| Edit { old: old.into(), new: new.into(), replace_all: false };
        let r = rt().block_on(fx.w.multi_edit("m.txt", vec![e("alpha", "A"), e("beta", "B"), e("delta", "D")], None));
        match &r {
            Err(WorkspaceError::File(portcullis::workspace::files::FileError::NotFound { edit_index, .. })) => {
                assert_eq!(*edit_index, Some(2), "{:?}", fx.kind)
            }
            other => panic!("{:?}: {other:?}", fx.kind),
        }
        assert_eq!(fx.contents("m.txt").as_deref(), Some(&b"alpha beta gamma\n"[..]), "none applied");
        // Control: the first two alone apply, in order.
        let done = rt().block_on(fx.w.multi_edit("m.txt", vec![e("alpha", "A"), e("A beta", "AB")], None));
        assert_eq!(done.map(|d| d.replacements).ok(), Some(2), "{:?}", fx.kind);
        assert_eq!(fx.contents("m.txt").as_deref(), Some(&b"AB gamma\n"[..]), "{:?}", fx.kind);
        let many = vec![e("a", "b"); 101];
        let r = rt().block_on(fx.w.multi_edit("m.txt", many, None));
        assert_eq!(err_kind(&r), "too-many-edits", "{:?}", fx.kind);
    });
}

#[test]
fn r0524_paths_that_escape_are_refused() {
    both("", |fx| {
        rt().block_on(async {
            for p in ["../outside.txt", "src/../../outside.txt", "/etc/passwd"] {
                let r = fx.w.read_file(p, ReadOptions::default()).await;
                assert_eq!(err_kind(&r), "path-escape", "{:?} read {p}", fx.kind);
                let r = fx.w.write_file(p, "x").await;
                assert_eq!(err_kind(&r), "path-escape", "{:?} write {p}", fx.kind);
            }
            // Control: `..` that stays inside is fine.
            let ok = fx.w.read_file("src/../README.md", ReadOptions::default()).await;
            assert!(ok.is_ok(), "{:?}: {ok:?}", fx.kind);
            let abs = fx.root.join("README.md");
            let ok = fx.w.read_file(&abs, ReadOptions::default()).await;
            assert!(ok.is_ok(), "{:?}: {ok:?}", fx.kind);
        });
        assert!(!fx.exists("../outside.txt"), "{:?}: nothing was written outside", fx.kind);
        // Each refused write is audited as denied.
        assert_eq!(fx.audit.kinds().iter().filter(|k| **k == "denied").count(), 3, "{:?}", fx.kind);
    });
}

#[test]
fn r0525_deny_globs_hold_for_reads_and_writes() {
    both("", |fx| {
        fx.seed(".env", b"SECRET=1\n");
        fx.seed("secrets/key.pem", b"KEY\n");
        rt().block_on(async {
            for p in [".env", ".env.local", "secrets/key.pem", "src/.env"] {
                let r = fx.w.read_file(p, ReadOptions::default()).await;
                assert_eq!(err_kind(&r), "path-escape", "{:?} read {p}", fx.kind);
                let r = fx.w.write_file(p, "x").await;
                assert_eq!(err_kind(&r), "path-escape", "{:?} write {p}", fx.kind);
                let r = fx.w.exists(p).await;
                assert_eq!(err_kind(&r), "path-escape", "{:?} exists {p}", fx.kind);
            }
            // Control: a near name is not denied.
            fx.w.write_file("env.txt", "ok").await.unwrap_or_else(|e| panic!("{:?}: {e}", fx.kind));
        });
        assert_eq!(fx.contents(".env").as_deref(), Some(&b"SECRET=1\n"[..]));
        assert!(!fx.exists(".env.local") && !fx.exists("src/.env"));
    });
}

#[test]
fn r0526_writes_into_git_and_protected_paths_are_refused() {
    both("protect = [\"ci\"]\n", |fx| {
        fx.seed(".git/config", b"[core]\n");
        fx.seed("ci/deploy.yml", b"on: push\n");
        rt().block_on(async {
            for p in [".git/config", ".git/hooks/pre-commit", ".GIT/x", "ci/deploy.yml"] {
                let r = fx.w.write_file(p, "x").await;
                assert_eq!(err_kind(&r), "refused-by-policy", "{:?} {p}", fx.kind);
            }
            let r = fx.w.remove(".git/config").await;
            assert_eq!(err_kind(&r), "refused-by-policy", "{:?}", fx.kind);
            // Control: reading them is fine, and so is writing next to them.
            let page = fx.w.read_file(".git/config", ReadOptions::default()).await;
            assert!(page.is_ok(), "{:?}: {page:?}", fx.kind);
            fx.w.write_file("gitnotes/x", "x").await.unwrap_or_else(|e| panic!("{:?}: {e}", fx.kind));
        });
        assert_eq!(fx.contents(".git/config").as_deref(), Some(&b"[core]\n"[..]));
        assert!(!fx.exists(".git/hooks/pre-commit"));
        assert_eq!(fx.contents("ci/deploy.yml").as_deref(), Some(&b"on: push\n"[..]));
    });
}

#[test]
fn r0527_list_dir_is_bounded_and_hides_denied_entries() {
    both("[list]\nmax_depth = 2\nmax_entries = 50\n", |fx| {
        fx.seed(".env", b"x");
        fx.seed("secrets/a", b"x");
        fx.seed("node_modules/m/index.js", b"x");
        fx.seed("src/deep/er/x.rs", b"x");
        let ls = |opts: ListOptions| rt().block_on(fx.w.list_dir("", opts)).unwrap_or_else(|e| panic!("{e}"));
        let all = ls(fx.w.list_options());
        let paths: Vec<String> = all.entries.iter().map(|e| e.path.display().to_string()).collect();
        assert_eq!(
            paths,
            ["README.md", "src", "src/deep", "src/lib.rs", "src/main.rs", "target", "target/.keep"],
            "{:?}",
            fx.kind
        );
        assert_eq!((all.skipped_denied, all.skipped_ignored, all.truncated), (2, 1, false), "{:?}", fx.kind);
        let sizes: Vec<u64> = all.entries.iter().filter(|e| e.path.ends_with("README.md")).map(|e| e.size).collect();
        assert_eq!(sizes, [7]);
        // The cap, and a depth beyond the policy's is lowered to it.
        let capped = ls(ListOptions { depth: 9, max_entries: 3, ignore: vec![] });
        assert_eq!(capped.entries.len(), 3, "{:?}", fx.kind);
        assert!(capped.truncated);
        let deep = ls(ListOptions { depth: 9, max_entries: 50, ignore: vec![] });
        assert!(!deep.entries.iter().any(|e| e.path.starts_with("src/deep/er")), "{:?}", fx.kind);
        let r = rt().block_on(fx.w.list_dir("secrets", fx.w.list_options()));
        assert_eq!(err_kind(&r), "path-escape", "{:?}", fx.kind);
        let r = rt().block_on(fx.w.list_dir("../", fx.w.list_options()));
        assert_eq!(err_kind(&r), "path-escape", "{:?}", fx.kind);
        let r = rt().block_on(fx.w.list_dir("README.md", fx.w.list_options()));
        assert_eq!(err_kind(&r), "bad-path", "{:?}", fx.kind);
        let r = rt().block_on(fx.w.list_dir("nope", fx.w.list_options()));
        assert_eq!(err_kind(&r), "no-such-file", "{:?}", fx.kind);
    });
}

#[test]
fn r0528_grep_and_glob_answer_the_same() {
    both("", |fx| {
        fx.seed("src/a.rs", b"fn alpha() {}\n// TODO one\nlet x = 1;\n");
        fx.seed("src/b.rs", b"// todo two\n");
        fx.seed("docs/c.md", b"TODO three\n");
        fx.seed(".env", b"TODO secret\n");
        fx.seed("secrets/s.txt", b"TODO secret\n");
        fx.seed("node_modules/m.js", b"TODO vendored\n");
        fx.seed("gen/out.rs", b"TODO generated\n");
        fx.seed(".gitignore", b"gen/\n");
        fx.seed("bin.dat", b"TODO\0binary\n");
        rt().block_on(async {
            let r = fx.w.grep(GrepOptions::new("TODO")).await.unwrap_or_else(|e| panic!("{e}"));
            let got: Vec<(String, u64)> = r.matches.iter().map(|m| (m.path.clone(), m.line)).collect();
            assert_eq!(got, [("docs/c.md".to_string(), 1), ("src/a.rs".to_string(), 2)], "{:?}", fx.kind);
            let s = &r.files_skipped;
            assert_eq!((s.denied, s.ignored, s.binary), (2, 1, 1), "{:?}: {r:?}", fx.kind);
            let mut o = GrepOptions::new("todo");
            o.ignore_case = true;
            o.glob = Some("*.rs".into());
            o.context = 1;
            let r = fx.w.grep(o).await.unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(r.matches.len(), 2, "{:?}", fx.kind);
            assert_eq!(r.matches[0].before.len(), 1);
            assert_eq!(r.matches[0].after.first().map(|c| c.text.as_str()), Some("let x = 1;"));
            let mut o = GrepOptions::new("TODO");
            o.max_results = 1;
            let r = fx.w.grep(o).await.unwrap_or_else(|e| panic!("{e}"));
            assert!(r.truncated && r.matches.len() == 1, "{:?}", fx.kind);
            let r = fx.w.grep(GrepOptions::new("x".repeat(5000))).await;
            assert_eq!(err_kind(&r), "unsafe-pattern", "{:?}", fx.kind);
            let r = fx.w.grep(GrepOptions::new("(")).await;
            assert_eq!(err_kind(&r), "unsafe-pattern", "{:?}", fx.kind);
            let mut o = GrepOptions::new("TODO");
            o.path = Some("secrets".into());
            assert_eq!(err_kind(&fx.w.grep(o).await), "path-escape", "{:?}", fx.kind);
            let mut o = GrepOptions::new("TODO");
            o.path = Some("../x".into());
            assert_eq!(err_kind(&fx.w.grep(o).await), "bad-path", "{:?}", fx.kind);
            let g = fx.w.glob("*.rs", 100).await.unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(g.paths, ["src/a.rs", "src/b.rs", "src/lib.rs", "src/main.rs"], "{:?}", fx.kind);
            let g = fx.w.glob("src/*.rs", 2).await.unwrap_or_else(|e| panic!("{e}"));
            assert!(g.truncated && g.paths.len() == 2, "{:?}", fx.kind);
            assert_eq!(err_kind(&fx.w.glob("[", 10).await), "bad-glob", "{:?}", fx.kind);
            assert_eq!(err_kind(&fx.w.glob("../*", 10).await), "bad-glob", "{:?}", fx.kind);
        });
    });
}

#[test]
fn r0529_the_readonly_view_refuses_every_mutation() {
    both("", |fx| {
        let ro = fx.w.readonly();
        let e = Edit { old: "readme".into(), new: "x".into(), replace_all: false };
        rt().block_on(async {
            assert_eq!(err_kind(&ro.write_file("x.txt", "x").await), "refused-by-policy", "{:?}", fx.kind);
            assert_eq!(err_kind(&ro.edit_file("README.md", e.clone(), None).await), "refused-by-policy");
            assert_eq!(err_kind(&ro.multi_edit("README.md", vec![e.clone()], None).await), "refused-by-policy");
            assert_eq!(err_kind(&ro.mkdir("d").await), "refused-by-policy");
            assert_eq!(err_kind(&ro.remove("README.md").await), "refused-by-policy");
            // Reads work in the view; control: the full view writes.
            assert!(ro.read_file("README.md", ReadOptions::default()).await.is_ok());
            fx.w.write_file("x.txt", "x").await.unwrap_or_else(|e| panic!("{:?}: {e}", fx.kind));
        });
        assert_eq!(fx.contents("README.md").as_deref(), Some(&b"readme\n"[..]), "{:?}", fx.kind);
        assert!(!fx.exists("d"));
        assert_eq!(fx.audit.kinds().iter().filter(|k| **k == "denied").count(), 5, "{:?}", fx.kind);
    });
}

#[test]
fn r0530_a_scope_cannot_reach_its_parent() {
    both("", |fx| {
        fx.seed("pkg/a/inner.txt", b"inner\n");
        fx.seed("secret.txt", b"parent\n");
        let s = fx.w.scope("pkg/a").unwrap_or_else(|e| panic!("{:?}: {e}", fx.kind));
        assert_eq!(s.root(), fx.root.join("pkg/a"), "{:?}", fx.kind);
        rt().block_on(async {
            let page = s.read_file("inner.txt", ReadOptions::default()).await.unwrap_or_else(|e| panic!("{e}"));
            assert!(page.content.contains("inner"));
            assert_eq!(err_kind(&s.read_file("../../secret.txt", ReadOptions::default()).await), "path-escape");
            let abs = fx.root.join("secret.txt");
            assert_eq!(err_kind(&s.read_file(&abs, ReadOptions::default()).await), "path-escape", "{:?}", fx.kind);
            assert_eq!(err_kind(&s.write_file("../../secret.txt", "x").await), "path-escape");
            let l = s.list_dir("", s.list_options()).await.unwrap_or_else(|e| panic!("{e}"));
            let paths: Vec<_> = l.entries.iter().map(|e| e.path.display().to_string()).collect();
            assert_eq!(paths, ["inner.txt"], "{:?}", fx.kind);
            let g = s.glob("*.txt", 10).await.unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(g.paths, ["inner.txt"], "{:?}", fx.kind);
            // Writes in the scope land inside it; the scope of a file is refused.
            s.write_file("made.txt", "m").await.unwrap_or_else(|e| panic!("{e}"));
            assert!(fx.w.scope("README.md").is_err(), "{:?}", fx.kind);
            // Control: the parent reads the parent's file.
            assert!(fx.w.read_file("secret.txt", ReadOptions::default()).await.is_ok());
        });
        assert_eq!(fx.contents("pkg/a/made.txt").as_deref(), Some(&b"m"[..]));
        assert_eq!(fx.contents("secret.txt").as_deref(), Some(&b"parent\n"[..]));
    });
}

/// The same sequence of calls on each backend, and the kinds of the audit
/// records it leaves.
fn audited_sequence(fx: &Fx) -> Vec<&'static str> {
    let e = Edit { old: "readme".into(), new: "README".into(), replace_all: false };
    rt().block_on(async {
        let _ = fx.w.write_file("a.txt", "a").await;
        let _ = fx.w.edit_file("README.md", e.clone(), None).await;
        let _ = fx.w.edit_file("README.md", e.clone(), None).await; // not-found: allowed, failed outcome
        let _ =
            fx.w.multi_edit("a.txt", vec![Edit { old: "a".into(), new: "b".into(), replace_all: false }], None).await;
        let _ = fx.w.mkdir("d/e").await;
        let _ = fx.w.remove("d/e").await;
        let _ = fx.w.write_file(".env", "x").await; // denied
        let _ = fx.w.write_file("../x", "x").await; // denied
        let _ = fx.w.readonly().write_file("b.txt", "x").await; // denied
                                                                // A command the checker refuses: never reaches either backend.
        let r = fx.w.exec("rm -rf src", ExecOptions::default()).await;
        assert!(matches!(r, Ok(Exec::Refused(_))), "{:?}: {r:?}", fx.kind);
        // Reads are not audited.
        let _ = fx.w.read_file("a.txt", ReadOptions::default()).await;
        let _ = fx.w.grep(GrepOptions::new("x")).await;
    });
    fx.audit.kinds()
}

#[test]
fn r0531_the_audit_records_the_same_kinds_on_both() {
    let local = audited_sequence(&fixture(Kind::Local, ""));
    let mock = audited_sequence(&fixture(Kind::Mock, ""));
    assert_eq!(local, mock);
    let count = |k: &str| local.iter().filter(|x| **x == k).count();
    assert_eq!((count("allowed"), count("outcome"), count("denied")), (6, 6, 4), "{local:?}");
    // The actions' kinds too.
    let kinds = |fx: &Fx| -> Vec<String> {
        fx.audit
            .0
            .lock()
            .map(|v| {
                v.iter()
                    .filter_map(|e| match e {
                        portcullis::audit::Event::Allowed { action, .. }
                        | portcullis::audit::Event::Denied { action, .. } => Some(action.kind().to_string()),
                        _ => None,
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let (l, m) = (fixture(Kind::Local, ""), fixture(Kind::Mock, ""));
    audited_sequence(&l);
    audited_sequence(&m);
    assert_eq!(kinds(&l), kinds(&m));
    assert!(kinds(&l).contains(&"shell.exec".to_string()));
}
