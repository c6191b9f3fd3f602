//! The model-facing tools (issue 11, first step): every tool's happy path
//! through the mock backend, every error kind as data (`is_error` with a
//! kind and a message, never a panic), the schemas valid JSON Schema
//! 2020-12 (inputs, outputs, and the results themselves against the output
//! schemas), `run_tests`' filter forwarded as one word and refused with
//! quotes or newlines, `all()` order, `pick`, `rename`, and the read-only
//! set (on the mock, and on the real sandbox: EROFS, checked from outside).
//! Each refusal has its control beside it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use portcullis::policy::WorkspacePolicy;
use portcullis::tools::{CallCtx, Progress, ToolResult, Tools, ToolsError, WriteAccess};
use portcullis::workspace::{CommandMatch, MockBackend, MockRun, Workspace};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::util::{available, rt, sandbox, MemAudit, Ws};

const ROOT: &str = "/nonexistent-portcullis-mock/tools";

pub(super) const CANONICAL: [&str; 13] = [
    "read_file",
    "edit_file",
    "multi_edit",
    "write_file",
    "list_dir",
    "run_shell",
    "shell_output",
    "shell_kill",
    "run_tests",
    "grep",
    "glob",
    "todo_write",
    "todo_read",
];

fn policy(extra: &str, background: bool) -> WorkspacePolicy {
    let bg = if background { "\n[shell.background]\nmax_jobs = 2\ntimeout = \"1m\"\n" } else { "" };
    let text = format!(
        "workspace = {ROOT:?}\ndeny_paths = [\".env*\"]\n[shell]\ninterpreter = \"sh\"\nallow = [\"make\", \"cargo\", \
         \"ls\", \"sleep\", \"rm\"]\ntimeout = \"30s\"\n{bg}{extra}"
    );
    WorkspacePolicy::from_toml(&text).unwrap_or_else(|e| panic!("policy: {e}"))
}

fn mock_ws(extra: &str, background: bool) -> (Workspace, MockBackend, Arc<MemAudit>) {
    let p = policy(extra, background);
    let m = MockBackend::new(&p).unwrap_or_else(|e| panic!("mock: {e}"));
    m.add_file("src/lib.rs", "pub fn f() {}\npub fn g() {}\n");
    m.add_file("src/main.rs", "fn main() { f(); f(); }\n");
    m.add_file("README.md", "hello\n");
    m.add_file(".env", "SECRET=1\n");
    m.add_file(".git/config", "[core]\n");
    let audit = Arc::new(MemAudit::default());
    let w = Workspace::builder()
        .policy(p)
        .audit(audit.clone())
        .backend(Arc::new(m.clone()))
        .build()
        .unwrap_or_else(|e| panic!("workspace: {}", portcullis::error_chain(&e)));
    (w, m, audit)
}

fn tools() -> (Tools, MockBackend, Arc<MemAudit>) {
    let (w, m, a) = mock_ws("", true);
    let t = Tools::builder(w).tests("cargo test --offline --").unwrap_or_else(|e| panic!("{e}")).build();
    (t, m, a)
}

thread_local! {
    /// One runtime per test: background jobs live across its calls.
    static RT: tokio::runtime::Runtime = rt();
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    RT.with(|r| r.block_on(f))
}

fn call(t: &Tools, name: &str, args: Value) -> ToolResult {
    block_on(t.call(name, args, CallCtx::default()))
}

/// A successful call, its structured result checked against the tool's
/// output schema.
fn ok(t: &Tools, name: &str, args: Value) -> Value {
    let r = call(t, name, args.clone());
    assert!(!r.is_error, "{name} {args}: {}", r.content);
    check_shape(t, name, &r);
    r.structured
}

/// A failed call of this kind, also checked against the output schema.
fn err(t: &Tools, name: &str, args: Value, kind: &str) -> Value {
    let r = call(t, name, args.clone());
    assert!(r.is_error, "{name} {args} should fail: {}", r.content);
    assert_eq!(r.error_kind(), Some(kind), "{name} {args}: {}", r.content);
    let msg = r.structured["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.len() > 20, "a message that says what to do: {msg}");
    check_shape(t, name, &r);
    r.structured
}

fn check_shape(t: &Tools, name: &str, r: &ToolResult) {
    assert!(r.structured.is_object(), "structured is an object: {}", r.content);
    assert_eq!(serde_json::from_str::<Value>(&r.content).ok().as_ref(), Some(&r.structured), "content mirrors it");
    let Some(tool) = t.list().into_iter().find(|x| x.name == name) else { return };
    let Some(schema) = tool.output_schema else { return };
    let v = jsonschema::draft202012::new(&schema).unwrap_or_else(|e| panic!("{name} output schema: {e}"));
    let errors: Vec<String> = v.iter_errors(&r.structured).map(|e| format!("{} at {}", e, e.instance_path)).collect();
    assert!(errors.is_empty(), "{name}: result does not match its output schema: {errors:?}\n{}", r.content);
}

#[test]
fn r0600_all_lists_the_tools_in_canonical_order() {
    let (t, _, _) = tools();
    assert_eq!(t.names(), CANONICAL);
    // Without background jobs there is no shell_output/shell_kill; without a
    // test command no run_tests.
    let (w, _, _) = mock_ws("", false);
    let plain = Tools::all(w);
    let expect: Vec<&str> =
        CANONICAL.into_iter().filter(|n| !["shell_output", "shell_kill", "run_tests"].contains(n)).collect();
    assert_eq!(plain.names(), expect);
    assert_eq!(call(&plain, "shell_output", json!({"id": "j1"})).error_kind(), Some("unknown-tool"));
    // Deterministic: the same list twice, descriptions present.
    assert_eq!(t.list(), t.list());
    for tool in t.list() {
        assert!(tool.description.len() > 40, "{}: {}", tool.name, tool.description);
        assert!(!tool.description.contains('\n'));
    }
    // A bad test command is a host error.
    let (w, _, _) = mock_ws("", false);
    assert!(matches!(Tools::builder(w).tests("cargo test\nrm -rf /"), Err(ToolsError::BadTestCommand { .. })));
}

/// One valid input per tool.
fn samples() -> Vec<(&'static str, Value)> {
    vec![
        ("read_file", json!({"path": "src/lib.rs", "offset": 1, "limit": 10})),
        ("edit_file", json!({"path": "src/lib.rs", "old_string": "a", "new_string": "b", "replace_all": true})),
        ("multi_edit", json!({"path": "src/lib.rs", "edits": [{"old_string": "a", "new_string": "b"}]})),
        ("write_file", json!({"path": "x", "content": "y"})),
        ("list_dir", json!({"path": "src", "depth": 2, "ignore": ["*.o"]})),
        ("run_shell", json!({"command": "ls", "timeout_ms": 1000, "background": false})),
        ("shell_output", json!({"id": "j1-00000000", "since": 0, "wait_ms": 10})),
        ("shell_kill", json!({"id": "j1-00000000"})),
        ("run_tests", json!({"filter": "parser::"})),
        (
            "grep",
            json!({"pattern": "fn", "path": "src", "glob": "*.rs", "ignore_case": true, "context": 1, "max_results": 5}),
        ),
        ("glob", json!({"pattern": "**/*.rs"})),
        ("todo_write", json!({"todos": [{"content": "do it", "status": "in_progress"}]})),
        ("todo_read", json!({})),
    ]
}

#[test]
fn r0601_schemas_are_valid_json_schema_2020_12() {
    let (t, _, _) = tools();
    let samples = samples();
    for tool in t.list() {
        let input = &tool.input_schema;
        assert_eq!(input["$schema"], "https://json-schema.org/draft/2020-12/schema", "{}", tool.name);
        assert_eq!(input["type"], "object", "{}: an input schema is an object", tool.name);
        assert_eq!(input["additionalProperties"], false, "{}: unknown fields refused", tool.name);
        if let Err(e) = jsonschema::draft202012::meta::validate(input) {
            panic!("{}: input schema is not valid 2020-12: {e}\n{input}", tool.name);
        }
        let out = tool.output_schema.as_ref().unwrap_or_else(|| panic!("{}: an output schema", tool.name));
        assert_eq!(out["type"], "object", "{}", tool.name);
        if let Err(e) = jsonschema::draft202012::meta::validate(out) {
            panic!("{}: output schema is not valid 2020-12: {e}\n{out}", tool.name);
        }
        let v = jsonschema::draft202012::new(input).unwrap_or_else(|e| panic!("{}: {e}", tool.name));
        let (_, sample) = samples.iter().find(|(n, _)| *n == tool.name).unwrap_or_else(|| panic!("{}", tool.name));
        assert!(v.is_valid(sample), "{}: the sample input is valid: {sample}", tool.name);
        // Control: an unknown field is invalid by the schema too, and the
        // call refuses it the same way.
        let mut bad = sample.clone();
        bad["bogus"] = json!(1);
        assert!(!v.is_valid(&bad), "{}: an unknown field is invalid", tool.name);
        err(&t, &tool.name, bad, "bad-input");
    }
    // The host decides write access: run_shell has no field for it.
    let shell = t.list().into_iter().find(|x| x.name == "run_shell").map(|x| x.input_schema).unwrap_or_default();
    let props = shell["properties"].as_object().map(|o| o.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
    assert_eq!(props, ["background", "command", "timeout_ms"]);
    // The bounds the descriptions give are in the schema too (found in
    // review: grep's "at most" was in words only).
    let grep = t.list().into_iter().find(|x| x.name == "grep").map(|x| x.input_schema).unwrap_or_default();
    let v = jsonschema::draft202012::new(&grep).unwrap_or_else(|e| panic!("{e}"));
    assert!(v.is_valid(&json!({"pattern": "x", "context": 100, "max_results": 1000})), "control: the bounds");
    assert!(!v.is_valid(&json!({"pattern": "x", "context": 101})), "{grep}");
    assert!(!v.is_valid(&json!({"pattern": "x", "max_results": 1001})), "{grep}");
}

#[test]
fn r0602_file_tools_happy_paths() {
    let (t, m, _) = tools();
    let r = ok(&t, "read_file", json!({"path": "src/lib.rs"}));
    assert_eq!(r["total_lines"], 2);
    assert!(r["content"].as_str().unwrap_or_default().contains("pub fn g()"), "{r}");
    let hash = r["hash"].as_str().unwrap_or_default().to_string();
    let w = ok(&t, "read_file", json!({"path": "src/lib.rs", "offset": 2, "limit": 1}));
    assert_eq!((w["start_line"].as_u64(), w["end_line"].as_u64()), (Some(2), Some(2)));

    let e = ok(
        &t,
        "edit_file",
        json!({"path": "src/lib.rs", "old_string": "fn g", "new_string": "fn h", "expect_hash": hash}),
    );
    assert_eq!(e["replacements"], 1);
    assert_eq!(m.contents("src/lib.rs").as_deref(), Some(&b"pub fn f() {}\npub fn h() {}\n"[..]));

    let e = ok(
        &t,
        "multi_edit",
        json!({"path": "src/main.rs", "edits": [
            {"old_string": "f(); f();", "new_string": "g(); f();"},
            {"old_string": "f()", "new_string": "h()"}
        ]}),
    );
    assert_eq!(e["replacements"], 2);
    assert_eq!(m.contents("src/main.rs").as_deref(), Some(&b"fn main() { g(); h(); }\n"[..]));

    let wr = ok(&t, "write_file", json!({"path": "notes/plan.md", "content": "1. read\n"}));
    assert_eq!((wr["created"].as_bool(), wr["bytes"].as_u64()), (Some(true), Some(8)));
    assert_eq!(m.contents("notes/plan.md").as_deref(), Some(&b"1. read\n"[..]));

    let l = ok(&t, "list_dir", json!({}));
    let paths: Vec<&str> = l["entries"].as_array().into_iter().flatten().filter_map(|e| e["path"].as_str()).collect();
    assert!(paths.contains(&"src/lib.rs") && paths.contains(&"notes"), "{paths:?}");
    assert!(!paths.iter().any(|p| p.starts_with(".git") || p.starts_with(".env")), "hidden/denied: {paths:?}");
    let l = ok(&t, "list_dir", json!({"path": "src", "depth": 1, "ignore": ["main.rs"]}));
    let paths: Vec<&str> = l["entries"].as_array().into_iter().flatten().filter_map(|e| e["path"].as_str()).collect();
    assert_eq!(paths, ["src/lib.rs"]);

    let g = ok(&t, "grep", json!({"pattern": "FN H", "ignore_case": true}));
    assert_eq!(g["matches"][0]["path"], "src/lib.rs", "{g}");
    assert_eq!(g["matches"][0]["line"], 2);
    let g = ok(&t, "grep", json!({"pattern": "SECRET"}));
    assert_eq!(g["matches"].as_array().map(Vec::len), Some(0), "denied files are not searched: {g}");
    let gl = ok(&t, "glob", json!({"pattern": "src/*.rs"}));
    assert_eq!(gl["paths"], json!(["src/lib.rs", "src/main.rs"]));
}

#[test]
fn r0603_file_errors_are_data() {
    let (t, m, _) = tools();
    let before = m.contents("src/lib.rs");
    err(&t, "edit_file", json!({"path": "src/lib.rs", "old_string": "pub fn", "new_string": "fn"}), "not-unique");
    err(&t, "edit_file", json!({"path": "src/lib.rs", "old_string": "nope", "new_string": "x"}), "not-found");
    let stale = "0".repeat(64);
    let s = err(
        &t,
        "edit_file",
        json!({"path": "src/lib.rs", "old_string": "fn f", "new_string": "fn z", "expect_hash": stale}),
        "stale-hash",
    );
    assert!(s["error"]["message"].as_str().unwrap_or_default().contains("read the file again"), "{s}");
    let me = err(
        &t,
        "multi_edit",
        json!({"path": "src/lib.rs", "edits": [
            {"old_string": "fn f", "new_string": "fn z"},
            {"old_string": "absent", "new_string": "x"}
        ]}),
        "not-found",
    );
    assert!(me["error"]["message"].as_str().unwrap_or_default().contains("edit 1"), "{me}");
    assert_eq!(m.contents("src/lib.rs"), before, "all or none: nothing changed");
    // Control: the same edit with the right text lands.
    ok(&t, "edit_file", json!({"path": "src/lib.rs", "old_string": "pub fn f", "new_string": "pub fn z"}));
    assert_ne!(m.contents("src/lib.rs"), before);

    err(&t, "read_file", json!({"path": "../outside"}), "path-escape");
    err(&t, "read_file", json!({"path": "/etc/passwd"}), "path-escape");
    err(&t, "read_file", json!({"path": ".env"}), "path-escape");
    err(&t, "read_file", json!({"path": "missing.txt"}), "no-such-file");
    // An empty path is a bad path, not an escape; no edits at all is an
    // invalid edit, as an edit that changes nothing is (found in review).
    let e = err(&t, "read_file", json!({"path": ""}), "bad-path");
    assert!(e["error"]["message"].as_str().unwrap_or_default().contains("the path is empty"), "{e}");
    err(&t, "multi_edit", json!({"path": "src/lib.rs", "edits": []}), "invalid-edit");
    // A file a read refuses as binary is not edited blind either; control:
    // its text part was there to replace.
    ok(&t, "write_file", json!({"path": "blob.bin", "content": "head\u{0}tail"}));
    err(&t, "read_file", json!({"path": "blob.bin"}), "binary");
    err(&t, "edit_file", json!({"path": "blob.bin", "old_string": "head", "new_string": "HEAD"}), "binary");
    assert_eq!(m.contents("blob.bin").as_deref(), Some(&b"head\0tail"[..]));
    err(&t, "edit_file", json!({"path": "src/lib.rs", "old_string": "fn z", "new_string": "fn z"}), "invalid-edit");
    // A write outside the jail is a path escape, as a read is (and audited
    // as denied), before anything is touched.
    err(&t, "write_file", json!({"path": "../x", "content": "y"}), "path-escape");
    let p = err(
        &t,
        "write_file",
        json!({"path": ".git/config", "content": "[core]\nhooksPath=/tmp\n"}),
        "refused-by-policy",
    );
    assert!(p["error"]["message"].as_str().unwrap_or_default().contains("nothing ran or changed"), "{p}");
    assert_eq!(m.contents(".git/config").as_deref(), Some(&b"[core]\n"[..]));
    err(&t, "grep", json!({"pattern": "a".repeat(5000)}), "unsafe-pattern");
    err(&t, "grep", json!({"pattern": "(unclosed"}), "unsafe-pattern");
    err(&t, "glob", json!({"pattern": "src/[.rs"}), "bad-glob");
    err(&t, "list_dir", json!({"path": "../"}), "path-escape");
    err(&t, "todo_write", json!({"todos": [{"content": "", "status": "pending"}]}), "todo");
}

#[test]
fn r0604_bad_input_is_data() {
    let (t, _, _) = tools();
    let u = err(&t, "rm_rf", json!({}), "unknown-tool");
    assert!(u["error"]["message"].as_str().unwrap_or_default().contains("read_file"), "names the tools: {u}");
    err(&t, "read_file", json!("src/lib.rs"), "bad-input");
    err(&t, "read_file", json!([1]), "bad-input");
    err(&t, "read_file", json!({}), "bad-input");
    let wrong = err(&t, "read_file", json!({"path": "src/lib.rs", "limit": "ten"}), "bad-input");
    assert!(wrong["error"]["message"].as_str().unwrap_or_default().contains("limit"), "names the field: {wrong}");
    let nested = err(&t, "multi_edit", json!({"path": "a", "edits": [{"old_string": "x"}]}), "bad-input");
    assert!(nested["error"]["message"].as_str().unwrap_or_default().contains("edits[0]"), "{nested}");
    // The model cannot ask for write access.
    let w = err(&t, "run_shell", json!({"command": "make", "writable": true}), "bad-input");
    assert!(w["error"]["message"].as_str().unwrap_or_default().contains("writable"), "{w}");
    err(&t, "todo_write", json!({"todos": [{"content": "x", "status": "done"}]}), "bad-input");
    // `null` arguments are `{}`: fine for todo_read, missing `path` for read_file.
    ok(&t, "todo_read", Value::Null);
    err(&t, "read_file", Value::Null, "bad-input");
}

#[test]
fn r0605_todos() {
    let (t, _, _) = tools();
    let r = ok(&t, "todo_read", json!({}));
    assert_eq!(r["counts"]["total"], 0);
    let r = ok(
        &t,
        "todo_write",
        json!({"todos": [{"id": "1", "content": "read", "status": "completed"}, {"content": "edit", "status": "in_progress"}]}),
    );
    assert_eq!(r["counts"], json!({"total": 2, "pending": 0, "in_progress": 1, "completed": 1}));
    let r = ok(&t, "todo_read", json!({}));
    assert_eq!(r["todos"][1]["content"], "edit");
    // The read-only set shares the list.
    assert_eq!(ok(&t.readonly(), "todo_read", json!({}))["counts"]["total"], 2);
}

#[test]
fn r0606_run_shell_reports_access_decided_by_the_host() {
    let (t, m, _) = tools();
    m.on_command(CommandMatch::program("make"), MockRun::exit(0).stdout("built\n").write("out/app", "bin"));
    // Default resolver: the policy's write list: the write lands.
    let r = ok(&t, "run_shell", json!({"command": "make all"}));
    assert_eq!((r["outcome"].as_str(), r["exit_code"].as_i64()), (Some("exited"), Some(0)));
    assert_eq!(r["stdout"], "built\n");
    assert_eq!(r["writable"], true);
    assert_eq!(r["refused_writes"]["count"], 0);
    assert_eq!(m.contents("out/app").as_deref(), Some(&b"bin"[..]));

    // A host resolver that gives `make` no write access: reported refused.
    let (w, m2, _) = mock_ws("", false);
    m2.on_command(CommandMatch::program("make"), MockRun::exit(0).write("out/app", "bin"));
    m2.on_command(CommandMatch::program("ls"), MockRun::exit(0).write("out/ls", "x"));
    let resolver =
        |_tool: &str, line: &str| if line.starts_with("make") { WriteAccess::None } else { WriteAccess::Policy };
    let t2 = Tools::builder(w).write_access(Arc::new(resolver)).build();
    let r = ok(&t2, "run_shell", json!({"command": "make all"}));
    assert_eq!(r["writable"], false);
    assert_eq!(r["write_grants"], json!([]));
    assert_eq!(r["refused_writes"]["count"], 1);
    assert_eq!(r["refused_writes"]["sample"], json!([format!("{ROOT}/out/app")]));
    assert_eq!(m2.contents("out/app"), None);
    // Control: the resolver lets `ls` write.
    let r = ok(&t2, "run_shell", json!({"command": "ls"}));
    assert_eq!(r["writable"], true);
    assert_eq!(m2.contents("out/ls").as_deref(), Some(&b"x"[..]));

    // A non-zero exit is a result, not an error.
    m.on_command(CommandMatch::line("make fail"), MockRun::exit(2).stderr("boom\n"));
    let r = ok(&t, "run_shell", json!({"command": "make fail"}));
    assert_eq!((r["exit_code"].as_i64(), r["stderr"].as_str()), (Some(2), Some("boom\n")));
}

#[test]
fn r0607_refused_commands_carry_their_reason() {
    let gate =
        "\n[[gate]]\nname = \"no-rm\"\ncommand = \"rm\"\nanswer = \"refuse\"\nreason = \"removing needs review\"\n";
    let (w, m, _) = mock_ws(gate, false);
    let t = Tools::all(w);
    let r = err(&t, "run_shell", json!({"command": "curl http://example.com"}), "refused-by-policy");
    assert_eq!(r["outcome"], "refused");
    assert_eq!(r["error"]["reason"], "not-allowed", "{r}");
    assert!(r["error"]["message"].as_str().unwrap_or_default().contains("curl"), "{r}");
    assert_eq!((r["writable"].as_bool(), r["write_grants"].clone()), (Some(false), json!([])));
    let r = err(&t, "run_shell", json!({"command": "ls; curl x"}), "refused-by-policy");
    assert_eq!(r["error"]["command"], "curl x", "{r}");
    let g = err(&t, "run_shell", json!({"command": "rm -rf src"}), "refused-by-gate");
    assert_eq!(g["error"]["rule"], "no-rm", "{g}");
    assert!(g["error"]["message"].as_str().unwrap_or_default().contains("removing needs review"), "{g}");
    assert!(m.commands().is_empty(), "nothing reached the backend: {:?}", m.commands());
    // Control: an allowed command reaches it.
    ok(&t, "run_shell", json!({"command": "ls"}));
    assert_eq!(m.commands(), ["ls"]);
}

#[test]
fn r0608_background_jobs() {
    let (t, m, _) = tools();
    m.on_command(CommandMatch::program("make"), MockRun::exit(0).stdout("serving\n").delay(Duration::from_millis(300)));
    let r = ok(&t, "run_shell", json!({"command": "make serve", "background": true}));
    assert_eq!(r["outcome"], "started");
    let id = r["job_id"].as_str().unwrap_or_else(|| panic!("a job id: {r}")).to_string();
    let mut out = Value::Null;
    for _ in 0..50 {
        out = ok(&t, "shell_output", json!({"id": id, "wait_ms": 200}));
        if out["status"] != "running" {
            break;
        }
    }
    assert_eq!(out["status"], "exited", "{out}");
    assert_eq!(out["stdout"], "serving\n");
    assert_eq!(out["exit_code"], 0);
    let k = ok(&t, "shell_kill", json!({"id": id}));
    assert_eq!(k["already_ended"], true, "{k}");
    err(&t, "shell_output", json!({"id": "j99-deadbeef"}), "job-not-found");
    err(&t, "shell_kill", json!({"id": "j99-deadbeef"}), "job-not-found");
    // A refused background command is a refusal like any other.
    err(&t, "run_shell", json!({"command": "curl x", "background": true}), "refused-by-policy");
    // Control of the kill: a long job is running, then killed.
    m.on_command(CommandMatch::program("sleep"), MockRun::exit(0).delay(Duration::from_secs(30)));
    let r = ok(&t, "run_shell", json!({"command": "sleep 30", "background": true}));
    let id = r["job_id"].as_str().unwrap_or_default().to_string();
    assert_eq!(ok(&t, "shell_output", json!({"id": id}))["status"], "running");
    let k = ok(&t, "shell_kill", json!({"id": id}));
    assert_eq!((k["already_ended"].as_bool(), k["status"].as_str()), (Some(false), Some("killed")), "{k}");
}

#[test]
fn r0609_run_tests_forwards_the_filter_as_one_word() {
    let (t, m, audit) = tools();
    m.on_command(CommandMatch::program("cargo"), MockRun::exit(0).stdout("ok\n"));
    ok(&t, "run_tests", json!({}));
    ok(&t, "run_tests", json!({"filter": "parser::"}));
    ok(&t, "run_tests", json!({"filter": "two words; rm -rf $HOME"}));
    assert_eq!(
        m.commands(),
        [
            "cargo test --offline --",
            "cargo test --offline -- parser::",
            "cargo test --offline -- 'two words; rm -rf $HOME'"
        ]
    );
    let records = audit.0.lock().map(|v| v.len()).unwrap_or(0);
    for bad in ["it's", "a\"b", "`id`", "a\nb", "a\rb", "--nocapture", "-x"] {
        let r = err(&t, "run_tests", json!({"filter": bad}), "bad-input");
        assert_eq!(r["error"]["kind"], "bad-input");
    }
    assert_eq!(m.commands().len(), 3, "nothing more ran");
    assert_eq!(audit.0.lock().map(|v| v.len()).unwrap_or(0), records, "rejected at input validation: not even audited");
    // The description names the configured command.
    let d = t.list().into_iter().find(|x| x.name == "run_tests").map(|x| x.description).unwrap_or_default();
    assert!(d.contains("cargo test --offline --"), "{d}");
}

#[test]
fn r0610_pick_and_rename() {
    let (t, m, _) = tools();
    let p = t.pick(&["grep", "read_file"]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.names(), ["read_file", "grep"], "the canonical order");
    err(&p, "write_file", json!({"path": "x", "content": "y"}), "unknown-tool");
    assert_eq!(m.contents("x"), None);
    ok(&p, "read_file", json!({"path": "README.md"}));
    assert!(matches!(t.pick(&["read_file", "nope"]), Err(ToolsError::Unknown { .. })));

    m.on_command(CommandMatch::program("ls"), MockRun::exit(0).stdout("a\n"));
    let r = t.rename("run_shell", "bash").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(r.names()[5], "bash");
    assert_eq!(ok(&r, "bash", json!({"command": "ls"}))["stdout"], "a\n");
    err(&r, "run_shell", json!({"command": "ls"}), "unknown-tool");
    // Other descriptions name it by its new name.
    let d = r.list().into_iter().find(|x| x.name == "shell_output").map(|x| x.description).unwrap_or_default();
    assert!(d.contains("`bash`") && !d.contains("`run_shell`"), "{d}");
    assert!(matches!(t.rename("run_shell", "grep"), Err(ToolsError::BadName { .. })));
    assert!(matches!(t.rename("run_shell", "has space"), Err(ToolsError::BadName { .. })));
    assert!(matches!(t.rename("run_shell", ""), Err(ToolsError::BadName { .. })));
    assert!(matches!(t.rename("nope", "x"), Err(ToolsError::Unknown { .. })));
    // Renamed, then picked by the new name.
    assert_eq!(r.pick(&["bash"]).map(|x| x.names().len()).ok(), Some(1));
}

#[test]
fn r0611_readonly_set_on_the_mock() {
    let (t, m, _) = tools();
    let ro = t.readonly();
    let expect: Vec<&str> =
        CANONICAL.into_iter().filter(|n| !["edit_file", "multi_edit", "write_file"].contains(n)).collect();
    assert_eq!(ro.names(), expect);
    assert!(ro.workspace().is_readonly());
    err(&ro, "write_file", json!({"path": "x", "content": "y"}), "unknown-tool");
    m.on_command(CommandMatch::program("make"), MockRun::exit(0).write("out/app", "bin"));
    let r = ok(&ro, "run_shell", json!({"command": "make"}));
    assert_eq!((r["writable"].as_bool(), r["refused_writes"]["count"].as_u64()), (Some(false), Some(1)));
    assert_eq!(m.contents("out/app"), None);
    let d = ro.list().into_iter().find(|x| x.name == "run_shell").map(|x| x.description).unwrap_or_default();
    assert!(d.contains("read-only"), "{d}");
    // Tools::all over a read-only workspace is the same set.
    assert_eq!(
        Tools::all(t.workspace().readonly()).names(),
        expect.iter().filter(|n| **n != "run_tests").copied().collect::<Vec<_>>()
    );
    // Control: the full set writes.
    ok(&t, "run_shell", json!({"command": "make"}));
    assert_eq!(m.contents("out/app").as_deref(), Some(&b"bin"[..]));
}

/// A workspace of the policy `text` in the real sandbox.
fn sandboxed(text: &str) -> Workspace {
    let p = WorkspacePolicy::from_toml(text).unwrap_or_else(|e| panic!("{e}"));
    Workspace::builder()
        .policy(p)
        .sandbox(sandbox())
        .build()
        .unwrap_or_else(|e| panic!("workspace: {}", portcullis::error_chain(&e)))
}

#[test]
fn r0612_readonly_run_shell_in_the_real_sandbox() {
    let ws = Ws::new();
    let text = format!(
        "workspace = {:?}\n[shell]\ninterpreter = \"sh\"\nallow = [\"touch\", \"sh\"]\ntimeout = \"30s\"\n",
        ws.path()
    );
    let t = Tools::all(sandboxed(&text));
    let ro = t.readonly();
    let r = call(&ro, "run_shell", json!({"command": "touch ro-marker"}));
    if !available("r0612", !r.content.contains("\"fault\""), &r.content) {
        return;
    }
    let s = &r.structured;
    assert!(!r.is_error, "{}", r.content);
    assert_eq!(s["writable"], false);
    assert_ne!(s["exit_code"], 0, "{s}");
    assert!(s["stderr"].as_str().unwrap_or_default().contains("Read-only file system"), "EROFS: {s}");
    assert!(!ws.join("ro-marker").exists(), "nothing written, seen from outside");
    // Control: the full set (the policy's write list: the workspace) writes.
    let r = call(&t, "run_shell", json!({"command": "touch rw-marker"}));
    assert!(!r.is_error, "{}", r.content);
    assert_eq!((r.structured["writable"].as_bool(), r.structured["exit_code"].as_i64()), (Some(true), Some(0)));
    assert!(ws.join("rw-marker").exists(), "the control wrote, seen from outside");
}

#[test]
fn r0613_timeouts_cancellation_and_progress() {
    let (t, m, _) = tools();
    m.on_command(CommandMatch::program("sleep"), MockRun::exit(0).delay(Duration::from_secs(20)));
    // timeout_ms lowers the policy's.
    let r = err(&t, "run_shell", json!({"command": "sleep 20", "timeout_ms": 200}), "timed-out");
    assert_eq!(r["outcome"], "timed-out");
    // Cancelled before the start: nothing ran.
    let ctx = CallCtx::default();
    ctx.cancel.cancel();
    let before = m.commands().len();
    let r = block_on(t.call("run_shell", json!({"command": "sleep 20"}), ctx));
    assert_eq!(r.error_kind(), Some("cancelled"), "{}", r.content);
    assert_eq!(m.commands().len(), before);
    // Cancelled mid-run, with progress reported meanwhile.
    let seen: Arc<Mutex<Vec<Progress>>> = Arc::default();
    let sink = seen.clone();
    let cancel = CancellationToken::new();
    let ctx = CallCtx {
        cancel: cancel.clone(),
        progress: Some(Arc::new(move |p| sink.lock().map(|mut v| v.push(p)).unwrap_or(()))),
    };
    let started = std::time::Instant::now();
    let r = block_on(async {
        let killer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(2500)).await;
            cancel.cancel();
        });
        let r = t.call("run_shell", json!({"command": "sleep 20"}), ctx).await;
        let _ = killer.await;
        r
    });
    assert_eq!(r.error_kind(), Some("cancelled"), "{}", r.content);
    assert_eq!(r.structured["outcome"], "cancelled");
    assert!(started.elapsed() < Duration::from_secs(15), "the cancel ended it");
    let seen = seen.lock().map(|v| v.clone()).unwrap_or_default();
    assert!(seen.len() >= 2, "a report each second: {seen:?}");
    assert!(seen.windows(2).all(|w| w[0].elapsed_ms < w[1].elapsed_ms));
    assert_eq!(seen[0].total_ms, Some(30_000), "the policy's timeout");
    // Control: a short command finishes on its own, no error.
    m.on_command(CommandMatch::line("sleep 0"), MockRun::exit(0));
    ok(&t, "run_shell", json!({"command": "sleep 0"}));
}

#[test]
fn r0614_descriptions_follow_the_policy_and_a_cancel_ends_a_wait() {
    // An argv-mode policy says so in run_shell's description; sh mode does not.
    let text = format!("workspace = {ROOT:?}\n[shell]\nallow = [\"ls\"]\n");
    let p = WorkspacePolicy::from_toml(&text).unwrap_or_else(|e| panic!("{e}"));
    let m = MockBackend::new(&p).unwrap_or_else(|e| panic!("{e}"));
    let w = Workspace::builder().policy(p).backend(Arc::new(m)).build().unwrap_or_else(|e| panic!("{e:?}"));
    let d = |t: &Tools| t.list().into_iter().find(|x| x.name == "run_shell").map(|x| x.description).unwrap_or_default();
    assert!(d(&Tools::all(w)).contains("no pipes"));
    let (t, m, _) = tools();
    assert!(!d(&t).contains("no pipes"), "control: sh mode");
    // A cancel ends a shell_output wait at once; the job runs on.
    m.on_command(CommandMatch::program("sleep"), MockRun::exit(0).delay(Duration::from_secs(30)));
    let id = ok(&t, "run_shell", json!({"command": "sleep 30", "background": true}))["job_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    ok(&t, "shell_output", json!({"id": id}));
    let cancel = CancellationToken::new();
    let ctx = CallCtx { cancel: cancel.clone(), progress: None };
    let started = std::time::Instant::now();
    let r = block_on(async {
        let c = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            cancel.cancel();
        });
        let r = t.call("shell_output", json!({"id": id, "since": 0, "wait_ms": 30000}), ctx).await;
        let _ = c.await;
        r
    });
    assert_eq!(r.error_kind(), Some("cancelled"), "{}", r.content);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(ok(&t, "shell_output", json!({"id": id}))["status"], "running", "the job runs on");
    // Control: without a cancel the same wait returns by itself (the wait is short here).
    ok(&t, "shell_output", json!({"id": id, "since": 0, "wait_ms": 100}));
    ok(&t, "shell_kill", json!({"id": id}));
}

#[test]
fn r0615_a_full_job_table_is_not_a_refusal_to_give_up_on() {
    // Found in review: the max_jobs refusal said "wait for one to end, kill
    // one" and then, like every refusal, "Do not retry the same action",
    // so a model that obeyed never started its job again.
    let (t, m, _) = tools();
    m.on_command(CommandMatch::program("sleep"), MockRun::exit(0).delay(Duration::from_secs(30)));
    let id = |r: &Value| r["job_id"].as_str().unwrap_or_else(|| panic!("a job id: {r}")).to_string();
    let first = id(&ok(&t, "run_shell", json!({"command": "sleep 30", "background": true})));
    ok(&t, "run_shell", json!({"command": "sleep 31", "background": true}));
    let full = err(&t, "run_shell", json!({"command": "sleep 32", "background": true}), "busy");
    let said = full["error"]["message"].as_str().unwrap_or_default();
    assert!(said.contains("wait for one to end") && said.contains("start this again"), "{full}");
    assert!(!said.to_lowercase().contains("do not retry"), "a full job table is not final: {full}");
    // A command the policy refuses is refused as such, full table or not
    // (found in review: it was answered "busy", inviting the model to end
    // a job for a start that can never run).
    let never = err(&t, "run_shell", json!({"command": "curl x", "background": true}), "refused-by-policy");
    assert!(never["error"]["message"].as_str().unwrap_or_default().to_lowercase().contains("do not retry"), "{never}");
    // CONTROL: a refusal of the command itself still says not to retry it.
    let r = err(&t, "run_shell", json!({"command": "curl x"}), "refused-by-policy");
    let said = r["error"]["message"].as_str().unwrap_or_default().to_lowercase();
    assert_eq!(said.matches("do not retry").count(), 1, "said once: {r}");
    // And the same start works once a job has ended.
    ok(&t, "shell_kill", json!({"id": first}));
    let again = ok(&t, "run_shell", json!({"command": "sleep 32", "background": true}));
    assert_eq!(again["outcome"], "started", "{again}");
}

#[test]
fn r0616_notes_for_the_host_stay_out_of_the_model_s_results() {
    // Found in review: with a writable background job running (a dev
    // server), every command's result said "git guard left to the last
    // writable run of this workspace to end ... run git on the host here
    // only when no writable command of this workspace is running": a note
    // for whoever runs git on the host, which a model cannot act on.
    let ws = Ws::new();
    let text = format!(
        "workspace = {:?}\n[shell]\ninterpreter = \"sh\"\nallow = [\"echo\", \"sleep\"]\ntimeout = \"30s\"\n\
         [shell.background]\nmax_jobs = 2\ntimeout = \"1m\"\n",
        ws.path()
    );
    let w = sandboxed(&text);
    let t = Tools::all(w.clone());
    let r = call(&t, "run_shell", json!({"command": "sleep 20", "background": true}));
    if !available("r0616", !r.content.contains("\"fault\""), &r.content) {
        return;
    }
    let job = r.structured["job_id"].as_str().unwrap_or_else(|| panic!("a job: {}", r.content)).to_string();
    let r = call(&t, "run_shell", json!({"command": "echo ok"}));
    assert_eq!((r.structured["exit_code"].as_i64(), r.structured["writable"].as_bool()), (Some(0), Some(true)));
    assert!(!r.content.contains("git guard"), "a host note reached the model: {}", r.content);
    // CONTROL: the library's result of the same run beside the job has it.
    let lib = block_on(w.exec("echo ok", portcullis::runner::ExecOptions { writable: true, ..Default::default() }))
        .unwrap_or_else(|e| panic!("{e}"));
    let notes = format!("{lib:?}");
    assert!(notes.contains("GitGuardDeferred"), "the control run was not deferred: {notes}");
    call(&t, "shell_kill", json!({"id": job}));
}

#[test]
fn r0617_run_shell_says_when_its_output_was_not_utf8() {
    // Found in review: shell_output and read_file flag replaced bytes with
    // `lossy`, run_shell did not, so a model could not tell U+FFFD in the
    // output from the real character.
    let (t, m, _) = tools();
    m.on_command(CommandMatch::program("make"), MockRun::exit(0).stdout(&b"bin\xff\xfeary\n"[..]));
    let r = ok(&t, "run_shell", json!({"command": "make blob"}));
    assert_eq!((r["lossy"].as_bool(), r["stdout"].as_str()), (Some(true), Some("bin\u{fffd}\u{fffd}ary\n")), "{r}");
    // Control: UTF-8 output, U+FFFD included, is not lossy.
    m.on_command(CommandMatch::program("ls"), MockRun::exit(0).stdout("caf\u{e9} \u{fffd}\n"));
    let r = ok(&t, "run_shell", json!({"command": "ls x"}));
    assert_eq!(r["lossy"].as_bool(), Some(false), "{r}");
}
