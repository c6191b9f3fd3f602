//! Model-facing tools over a [`Workspace`] (issue 11, first step): one
//! typed input per tool (its JSON Schema 2020-12 generated from the Rust
//! type by `schemars`, so schema and code cannot drift), a description
//! written for a model, and [`Tools::call`], which turns every failure a
//! model can cause into a [`ToolResult`] with `is_error` and a message that
//! says what to do next — never a panic or a Rust error. See `docs/tools.md`.
//!
//! What the host decides stays out of the inputs: whether a command may
//! write is a [`WriteResolver`] (default: the policy's `write` list, which
//! the gate may still narrow), the test command of `run_tests` is
//! configured, and nothing lets the model read or change the policy.
//!
//! - [`input`]: the inputs (with `deny_unknown_fields`);
//! - [`output`]: the results the workspace has no type for (commands,
//!   writes, todos, errors).

pub mod input;
pub mod output;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Map, Value};
use tokio_util::sync::CancellationToken;

use crate::runner::{Exec, ExecOptions};
use crate::workspace::files::{Edit, ReadOptions};
use crate::workspace::jobs::Started;
use crate::workspace::search::{GrepOptions, DEFAULT_MAX_RESULTS, MAX_CONTEXT};
use crate::workspace::{Workspace, WorkspaceError};

use input::*;
use output::{ErrorInfo, ErrorOutput, RunOutput, TodoOutput, WriteOutput};

/// The most files `glob` returns.
pub const MAX_GLOB_RESULTS: usize = 1000;
/// The longest `shell_output` wait a model may ask for.
pub const MAX_WAIT_MS: u64 = 30_000;
/// The most bytes of a `run_tests` filter.
pub const MAX_FILTER_BYTES: usize = 512;
/// How often a running command reports progress.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// The tools, in the canonical order of issue 11.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ToolKind {
    /// `read_file`.
    ReadFile,
    /// `edit_file`.
    EditFile,
    /// `multi_edit`.
    MultiEdit,
    /// `write_file`.
    WriteFile,
    /// `list_dir`.
    ListDir,
    /// `run_shell`.
    RunShell,
    /// `shell_output` (only with `[shell.background]`).
    ShellOutput,
    /// `shell_kill` (only with `[shell.background]`).
    ShellKill,
    /// `run_tests` (only with a configured test command).
    RunTests,
    /// `grep`.
    Grep,
    /// `glob`.
    Glob,
    /// `todo_write`.
    TodoWrite,
    /// `todo_read`.
    TodoRead,
}

impl ToolKind {
    /// Every tool, in the canonical order.
    pub const ALL: [ToolKind; 13] = [
        ToolKind::ReadFile,
        ToolKind::EditFile,
        ToolKind::MultiEdit,
        ToolKind::WriteFile,
        ToolKind::ListDir,
        ToolKind::RunShell,
        ToolKind::ShellOutput,
        ToolKind::ShellKill,
        ToolKind::RunTests,
        ToolKind::Grep,
        ToolKind::Glob,
        ToolKind::TodoWrite,
        ToolKind::TodoRead,
    ];

    /// The tool's own name.
    pub fn name(self) -> &'static str {
        match self {
            ToolKind::ReadFile => "read_file",
            ToolKind::EditFile => "edit_file",
            ToolKind::MultiEdit => "multi_edit",
            ToolKind::WriteFile => "write_file",
            ToolKind::ListDir => "list_dir",
            ToolKind::RunShell => "run_shell",
            ToolKind::ShellOutput => "shell_output",
            ToolKind::ShellKill => "shell_kill",
            ToolKind::RunTests => "run_tests",
            ToolKind::Grep => "grep",
            ToolKind::Glob => "glob",
            ToolKind::TodoWrite => "todo_write",
            ToolKind::TodoRead => "todo_read",
        }
    }

    /// The tool of this own name.
    pub fn from_name(name: &str) -> Option<ToolKind> {
        ToolKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// A short human-readable title.
    pub fn title(self) -> &'static str {
        match self {
            ToolKind::ReadFile => "Read a file",
            ToolKind::EditFile => "Edit a file",
            ToolKind::MultiEdit => "Edit a file in several places",
            ToolKind::WriteFile => "Write a file",
            ToolKind::ListDir => "List a directory",
            ToolKind::RunShell => "Run a command",
            ToolKind::ShellOutput => "Read a background command's output",
            ToolKind::ShellKill => "Stop a background command",
            ToolKind::RunTests => "Run the tests",
            ToolKind::Grep => "Search file contents",
            ToolKind::Glob => "Find files by name",
            ToolKind::TodoWrite => "Write the todo list",
            ToolKind::TodoRead => "Read the todo list",
        }
    }

    /// Whether the tool changes nothing (a hint for clients).
    pub fn reads_only(self) -> bool {
        matches!(
            self,
            ToolKind::ReadFile
                | ToolKind::ListDir
                | ToolKind::ShellOutput
                | ToolKind::Grep
                | ToolKind::Glob
                | ToolKind::TodoRead
        )
    }

    /// Whether the tool writes files (dropped from a read-only set).
    pub fn writes_files(self) -> bool {
        matches!(self, ToolKind::EditFile | ToolKind::MultiEdit | ToolKind::WriteFile)
    }

    fn input_schema(self) -> Value {
        match self {
            ToolKind::ReadFile => schema::<ReadFileInput>(),
            ToolKind::EditFile => schema::<EditFileInput>(),
            ToolKind::MultiEdit => schema::<MultiEditInput>(),
            ToolKind::WriteFile => schema::<WriteFileInput>(),
            ToolKind::ListDir => schema::<ListDirInput>(),
            ToolKind::RunShell => schema::<RunShellInput>(),
            ToolKind::ShellOutput => schema::<ShellOutputInput>(),
            ToolKind::ShellKill => schema::<ShellKillInput>(),
            ToolKind::RunTests => schema::<RunTestsInput>(),
            ToolKind::Grep => schema::<GrepInput>(),
            ToolKind::Glob => schema::<GlobInput>(),
            ToolKind::TodoWrite => schema::<TodoWriteInput>(),
            ToolKind::TodoRead => schema::<TodoReadInput>(),
        }
    }

    fn output_schema(self) -> Value {
        use crate::workspace::files::{Edited, ReadWindow};
        use crate::workspace::jobs::{JobOutput, KillReport};
        use crate::workspace::list::ListResult;
        use crate::workspace::search::{GlobResult, GrepResult};
        match self {
            ToolKind::ReadFile => or_error::<ReadWindow>(),
            ToolKind::EditFile | ToolKind::MultiEdit => or_error::<Edited>(),
            ToolKind::WriteFile => or_error::<WriteOutput>(),
            ToolKind::ListDir => or_error::<ListResult>(),
            // A command's result carries its own `error` too (a refusal
            // still says it had no write access); bad input has only that.
            ToolKind::RunShell | ToolKind::RunTests => or_error::<RunOutput>(),
            ToolKind::ShellOutput => or_error::<JobOutput>(),
            ToolKind::ShellKill => or_error::<KillReport>(),
            ToolKind::Grep => or_error::<GrepResult>(),
            ToolKind::Glob => or_error::<GlobResult>(),
            ToolKind::TodoWrite | ToolKind::TodoRead => or_error::<TodoOutput>(),
        }
    }
}

/// The JSON Schema (2020-12) of `T` as an input (what deserializes).
fn schema<T: JsonSchema>() -> Value {
    let mut v = schemars::schema_for!(T).to_value();
    strip_numeric_formats(&mut v);
    v
}

/// Drop schemars' `format` names for Rust's number types (`uint`,
/// `uint64`, `int32`, `double`, …): not formats JSON Schema defines, so
/// validators warn about each one (ajv, in the MCP TypeScript SDK, prints a
/// line per keyword); `type` and `minimum` already say what they meant.
fn strip_numeric_formats(v: &mut Value) {
    const NUMERIC: [&str; 12] =
        ["int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "float", "double"];
    match v {
        Value::Object(m) => {
            if m.get("format").and_then(Value::as_str).is_some_and(|f| NUMERIC.contains(&f)) {
                m.remove("format");
            }
            m.values_mut().for_each(strip_numeric_formats);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_numeric_formats),
        _ => {}
    }
}

/// The JSON Schema (2020-12) of `T` as a result (what serializes: a
/// field skipped when empty is not required).
fn out_schema<T: JsonSchema>() -> Value {
    let mut v = schemars::generate::SchemaSettings::draft2020_12()
        .for_serialize()
        .into_generator()
        .into_root_schema_for::<T>()
        .to_value();
    strip_numeric_formats(&mut v);
    v
}

/// The schema of a result that is `T` or, for a failed call, an
/// [`ErrorOutput`]: an object either way (`$defs` gathered at the root, so
/// every `$ref` still resolves).
fn or_error<T: JsonSchema>() -> Value {
    let mut defs = Map::new();
    let mut branch = |mut v: Value| {
        if let Some(obj) = v.as_object_mut() {
            obj.remove("$schema");
            if let Some(Value::Object(d)) = obj.remove("$defs") {
                defs.extend(d);
            }
        }
        v
    };
    let ok = branch(out_schema::<T>());
    let err = branch(out_schema::<ErrorOutput>());
    let mut root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "anyOf": [ok, err],
    });
    if !defs.is_empty() {
        root["$defs"] = Value::Object(defs);
    }
    root
}

/// A tool as a model sees it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Tool {
    /// Its name (possibly renamed by the host).
    pub name: String,
    /// What it does, for a model.
    pub description: String,
    /// The JSON Schema (2020-12) of its input: an object.
    pub input_schema: Value,
    /// The JSON Schema (2020-12) of its structured result: an object.
    pub output_schema: Option<Value>,
    /// A short title, for people.
    pub title: String,
    /// It changes nothing (a hint: clients treat it as untrusted).
    pub read_only: bool,
    /// It may change or remove what is there (files, a running job, or,
    /// for a command with write access, anything writable).
    pub destructive: bool,
}

/// What one call produced: always an object in `structured`, mirrored as
/// JSON text in `content`.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolResult {
    /// The structured result as JSON text.
    pub content: String,
    /// The structured result (a JSON object). A failed call has an `error`
    /// object with its `kind` and `message`.
    pub structured: Value,
    /// The call failed (a refusal, bad input, a fault): the model should
    /// read `error` and act on it.
    pub is_error: bool,
}

impl ToolResult {
    fn ok<T: Serialize>(value: &T) -> ToolResult {
        match serde_json::to_value(value) {
            Ok(v @ Value::Object(_)) => ToolResult::of(v, false),
            Ok(other) => ToolResult::of(json!({ "value": other }), false),
            Err(e) => ToolResult::error(ErrorInfo::new("fault", format!("the result could not be encoded: {e}"))),
        }
    }

    fn of(structured: Value, is_error: bool) -> ToolResult {
        ToolResult { content: structured.to_string(), structured, is_error }
    }

    /// Test support: a result of `structured` (an object).
    #[cfg(test)]
    pub(crate) fn for_tests(structured: Value, is_error: bool) -> ToolResult {
        ToolResult::of(structured, is_error)
    }

    /// A failed call.
    pub fn error(e: ErrorInfo) -> ToolResult {
        ToolResult::of(json!({ "error": e }), true)
    }

    fn run(r: RunOutput) -> ToolResult {
        let is_error = r.error.is_some();
        let mut t = ToolResult::ok(&r);
        t.is_error = is_error;
        t
    }

    /// The error's kind, if the call failed.
    pub fn error_kind(&self) -> Option<&str> {
        self.structured.get("error")?.get("kind")?.as_str()
    }
}

/// A progress report of a running call.
#[derive(Clone, Debug, PartialEq)]
pub struct Progress {
    /// Milliseconds since the call started.
    pub elapsed_ms: u64,
    /// The call's limit in milliseconds, if known (a command's timeout).
    pub total_ms: Option<u64>,
    /// What is going on, in words.
    pub message: String,
}

/// Where progress reports go.
pub type ProgressSink = Arc<dyn Fn(Progress) + Send + Sync>;

/// What a call runs under: its cancellation (a command's whole tree is
/// killed when it fires) and where progress goes.
#[derive(Clone, Default)]
pub struct CallCtx {
    /// Cancels the call.
    pub cancel: CancellationToken,
    /// Receives progress reports of long calls (running commands).
    pub progress: Option<ProgressSink>,
}

impl std::fmt::Debug for CallCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallCtx").field("cancelled", &self.cancel.is_cancelled()).finish_non_exhaustive()
    }
}

/// The write access a command asks for, decided by the host.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteAccess {
    /// None: the workspace is read-only to it.
    None,
    /// The policy's `write` list (the whole workspace if it names nothing).
    Policy,
    /// The policy's `write` list and these paths.
    Paths(Vec<PathBuf>),
}

/// Decides, host-side, the write access of each command a model runs
/// (`tool` is `run_shell` or `run_tests`, `command` the line). The gate may
/// still take access away; a read-only tool set never asks for any.
pub trait WriteResolver: Send + Sync {
    /// The access `command` asks for.
    fn resolve(&self, tool: &str, command: &str) -> WriteAccess;
}

impl<F: Fn(&str, &str) -> WriteAccess + Send + Sync> WriteResolver for F {
    fn resolve(&self, tool: &str, command: &str) -> WriteAccess {
        self(tool, command)
    }
}

/// Why a tool set could not be made as asked (host errors, not model
/// errors).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ToolsError {
    /// No tool of this name in the set.
    #[error("no tool named {name:?} in this set; the tools are: {known}")]
    Unknown {
        /// The name asked for.
        name: String,
        /// The names there are.
        known: String,
    },
    /// A new name is taken or not a valid tool name.
    #[error("{name:?} cannot name a tool: {why}")]
    BadName {
        /// The name.
        name: String,
        /// Why.
        why: &'static str,
    },
    /// A `run_tests` command that is empty or has more than one line.
    #[error("test command {command:?}: {why}")]
    BadTestCommand {
        /// The command.
        command: String,
        /// Why.
        why: &'static str,
    },
}

#[derive(Clone, Debug)]
struct Entry {
    kind: ToolKind,
    name: String,
}

/// Builds a [`Tools`] set over a workspace.
pub struct ToolsBuilder {
    ws: Workspace,
    tests: Option<String>,
    write: Arc<dyn WriteResolver>,
}

impl ToolsBuilder {
    /// `run_tests` runs this base command line (e.g. `cargo test
    /// --offline --`); the model's filter is appended as one quoted word.
    /// Without it there is no `run_tests` tool.
    pub fn tests(mut self, command: impl Into<String>) -> Result<Self, ToolsError> {
        let command = command.into();
        if command.trim().is_empty() {
            return Err(ToolsError::BadTestCommand { command, why: "it is empty" });
        }
        if command.contains(['\n', '\r', '\0']) {
            return Err(ToolsError::BadTestCommand { command, why: "it must be one line" });
        }
        self.tests = Some(command);
        Ok(self)
    }

    /// Decide each command's write access with this resolver (default:
    /// [`WriteAccess::Policy`] for every command).
    pub fn write_access(mut self, resolver: Arc<dyn WriteResolver>) -> Self {
        self.write = resolver;
        self
    }

    /// Every tool the workspace supports, in the canonical order:
    /// `shell_output`/`shell_kill` only with `[shell.background]`,
    /// `run_tests` only with a test command, the file-writing tools not on
    /// a read-only workspace.
    pub fn build(self) -> Tools {
        let background = self.ws.policy().and_then(|p| p.shell.as_ref()).is_some_and(|s| s.background.is_some());
        let readonly = self.ws.is_readonly();
        let entries = ToolKind::ALL
            .into_iter()
            .filter(|k| background || !matches!(k, ToolKind::ShellOutput | ToolKind::ShellKill))
            .filter(|k| self.tests.is_some() || *k != ToolKind::RunTests)
            .filter(|k| !(readonly && k.writes_files()))
            .map(|kind| Entry { kind, name: kind.name().to_string() })
            .collect();
        Tools { inner: Arc::new(Inner { ws: self.ws, tests: self.tests, write: self.write }), entries }
    }
}

struct Inner {
    ws: Workspace,
    tests: Option<String>,
    write: Arc<dyn WriteResolver>,
}

/// A set of model-facing tools over one [`Workspace`]. Cheap to clone.
#[derive(Clone)]
pub struct Tools {
    inner: Arc<Inner>,
    entries: Vec<Entry>,
}

impl std::fmt::Debug for Tools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tools").field("names", &self.names()).field("workspace", &self.inner.ws).finish()
    }
}

impl Tools {
    /// Start building a tool set over `ws`.
    pub fn builder(ws: Workspace) -> ToolsBuilder {
        ToolsBuilder { ws, tests: None, write: Arc::new(|_: &str, _: &str| WriteAccess::Policy) }
    }

    /// Every tool `ws` supports, with the defaults (see
    /// [`ToolsBuilder::build`]).
    pub fn all(ws: Workspace) -> Tools {
        Tools::builder(ws).build()
    }

    /// The workspace the tools work on.
    pub fn workspace(&self) -> &Workspace {
        &self.inner.ws
    }

    /// The names of the set, in order.
    pub fn names(&self) -> Vec<&str> {
        self.entries.iter().map(|e| e.name.as_str()).collect()
    }

    /// The tools as a model sees them, in order.
    pub fn list(&self) -> Vec<Tool> {
        self.entries.iter().map(|e| self.describe(e)).collect()
    }

    /// A least-privilege subset: these tools (by their current names), in
    /// the set's order.
    pub fn pick(&self, names: &[&str]) -> Result<Tools, ToolsError> {
        for n in names {
            self.entry(n).ok_or_else(|| self.unknown(n))?;
        }
        let entries = self.entries.iter().filter(|e| names.contains(&e.name.as_str())).cloned().collect();
        Ok(Tools { inner: Arc::clone(&self.inner), entries })
    }

    /// The same set with the tool `from` called `to` (e.g. `run_shell` as
    /// `bash`). A name is 1–64 of `A-Z a-z 0-9 _ -`, unique in the set.
    pub fn rename(&self, from: &str, to: &str) -> Result<Tools, ToolsError> {
        let at = self.entries.iter().position(|e| e.name == from).ok_or_else(|| self.unknown(from))?;
        let valid =
            !to.is_empty() && to.len() <= 64 && to.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !valid {
            return Err(ToolsError::BadName { name: to.into(), why: "a tool name is 1 to 64 of A-Z a-z 0-9 _ -" });
        }
        if from != to && self.entry(to).is_some() {
            return Err(ToolsError::BadName { name: to.into(), why: "another tool of the set has it" });
        }
        let mut entries = self.entries.clone();
        if let Some(e) = entries.get_mut(at) {
            e.name = to.to_string();
        }
        Ok(Tools { inner: Arc::clone(&self.inner), entries })
    }

    /// The read-only set over [`Workspace::readonly`]: the file-writing
    /// tools dropped, `run_shell` (and `run_tests`) kept and always run
    /// without write access, whatever the resolver says (the kernel
    /// enforces it). Names and order are kept.
    pub fn readonly(&self) -> Tools {
        let entries = self.entries.iter().filter(|e| !e.kind.writes_files()).cloned().collect();
        let inner = Inner {
            ws: self.inner.ws.readonly(),
            tests: self.inner.tests.clone(),
            write: Arc::new(|_: &str, _: &str| WriteAccess::None),
        };
        Tools { inner: Arc::new(inner), entries }
    }

    fn entry(&self, name: &str) -> Option<&Entry> {
        self.entries.iter().find(|e| e.name == name)
    }

    fn unknown(&self, name: &str) -> ToolsError {
        ToolsError::Unknown { name: name.to_string(), known: self.names().join(", ") }
    }

    fn describe(&self, e: &Entry) -> Tool {
        let input_schema = e.kind.input_schema();
        let mut description =
            input_schema.get("description").and_then(Value::as_str).unwrap_or_default().replace('\n', " ");
        // The descriptions name the tools by their own names; say which
        // names they have here.
        for other in &self.entries {
            if other.name != other.kind.name() {
                description = description.replace(&format!("`{}`", other.kind.name()), &format!("`{}`", other.name));
            }
        }
        let argv = self
            .inner
            .ws
            .policy()
            .and_then(|p| p.shell.as_ref())
            .is_some_and(|s| s.interpreter == crate::policy::Interpreter::None);
        if argv && e.kind == ToolKind::RunShell {
            description.push_str(
                " This workspace reads a command as one program and its arguments: no pipes, redirections, `;` or \
                 `&&`; run one command per call.",
            );
        }
        if self.inner.ws.is_readonly() && matches!(e.kind, ToolKind::RunShell | ToolKind::RunTests) {
            description.push_str(" This workspace is read-only: commands run without write access.");
        }
        if let (ToolKind::RunTests, Some(base)) = (e.kind, &self.inner.tests) {
            description.push_str(&format!(" The test command is `{base}`."));
        }
        // A command of a read-only set cannot write; it is not a read-only
        // tool for that (it may still kill what it started, or use the
        // network the policy allows).
        let destructive = !e.kind.reads_only() && e.kind != ToolKind::TodoWrite;
        Tool {
            name: e.name.clone(),
            description,
            input_schema,
            output_schema: Some(e.kind.output_schema()),
            title: e.kind.title().to_string(),
            read_only: e.kind.reads_only(),
            destructive,
        }
    }

    /// Call the tool named `name` (its current name) with `args` (a JSON
    /// object; `null` counts as `{}`). Every failure a model can cause is a
    /// result with `is_error`; so are faults (kind `fault`).
    pub async fn call(&self, name: &str, args: Value, ctx: CallCtx) -> ToolResult {
        let Some(e) = self.entry(name) else {
            return ToolResult::error(ErrorInfo::new(
                "unknown-tool",
                format!("there is no tool named {name:?}; the tools are: {}", self.names().join(", ")),
            ));
        };
        let args = if args.is_null() { Value::Object(Map::new()) } else { args };
        let ws = &self.inner.ws;
        match e.kind {
            ToolKind::ReadFile => {
                with(&e.name, args, |i: ReadFileInput| async move {
                    let opts = ReadOptions { offset: i.offset.unwrap_or(1), limit: i.limit, max_bytes: None };
                    ws.read_file(&i.path, opts).await.map(|w| ToolResult::ok(&w))
                })
                .await
            }
            ToolKind::EditFile => {
                with(&e.name, args, |i: EditFileInput| async move {
                    let edit = Edit { old: i.old_string, new: i.new_string, replace_all: i.replace_all };
                    ws.edit_file(&i.path, edit, i.expect_hash).await.map(|r| ToolResult::ok(&r))
                })
                .await
            }
            ToolKind::MultiEdit => {
                with(&e.name, args, |i: MultiEditInput| async move {
                    let edits = i
                        .edits
                        .into_iter()
                        .map(|x| Edit { old: x.old_string, new: x.new_string, replace_all: x.replace_all })
                        .collect();
                    ws.multi_edit(&i.path, edits, i.expect_hash).await.map(|r| ToolResult::ok(&r))
                })
                .await
            }
            ToolKind::WriteFile => {
                with(&e.name, args, |i: WriteFileInput| async move {
                    ws.write_file(&i.path, i.content).await.map(|w| ToolResult::ok(&WriteOutput::of(&i.path, w)))
                })
                .await
            }
            ToolKind::ListDir => {
                with(&e.name, args, |i: ListDirInput| async move {
                    let mut opts = ws.list_options();
                    if let Some(d) = i.depth {
                        opts.depth = d;
                    }
                    opts.ignore.extend(i.ignore.unwrap_or_default());
                    let path = i.path.unwrap_or_default();
                    ws.list_dir(&path, opts).await.map(|r| ToolResult::ok(&r))
                })
                .await
            }
            ToolKind::RunShell => match parse::<RunShellInput>(&e.name, args) {
                Ok(i) if i.timeout_ms == Some(0) => ToolResult::error(ErrorInfo::new(
                    "bad-input",
                    format!(
                        "{}: timeout_ms 0 would kill the command before it starts; give a positive number of \
                         milliseconds, or leave it out for the workspace's timeout",
                        e.name
                    ),
                )),
                Ok(i) if i.background => self.background(&e.name, i, ctx).await,
                Ok(i) => self.command(e.kind, &e.name, &i.command, i.timeout_ms, ctx).await,
                Err(bad) => bad,
            },
            ToolKind::RunTests => match parse::<RunTestsInput>(&e.name, args) {
                Ok(i) => match self.test_line(i.filter.as_deref()) {
                    Ok(line) => self.command(e.kind, &e.name, &line, None, ctx).await,
                    Err(why) => ToolResult::error(ErrorInfo::new("bad-input", format!("{}: {why}", e.name))),
                },
                Err(bad) => bad,
            },
            ToolKind::ShellOutput => {
                with(&e.name, args, |i: ShellOutputInput| async move {
                    let wait = Duration::from_millis(i.wait_ms.unwrap_or(0).min(MAX_WAIT_MS));
                    let cancel = ctx.cancel.clone();
                    // A cancel ends the wait (only a read: the job runs on).
                    tokio::select! {
                        o = ws.shell_output(&i.id, i.since, wait) => o.map(|o| ToolResult::ok(&o)),
                        () = cancel.cancelled() => Ok(ToolResult::error(ErrorInfo::new(
                            "cancelled",
                            "the wait for output was cancelled; the job runs on (shell_kill stops it)",
                        ))),
                    }
                })
                .await
            }
            ToolKind::ShellKill => {
                with(&e.name, args, |i: ShellKillInput| async move {
                    ws.shell_kill(&i.id).await.map(|k| ToolResult::ok(&k))
                })
                .await
            }
            ToolKind::Grep => {
                with(&e.name, args, |i: GrepInput| async move {
                    let mut opts = GrepOptions::new(i.pattern);
                    opts.path = i.path.map(PathBuf::from);
                    opts.glob = i.glob;
                    opts.ignore_case = i.ignore_case;
                    opts.context = i.context.unwrap_or(0).min(MAX_CONTEXT);
                    opts.max_results = i.max_results.unwrap_or(DEFAULT_MAX_RESULTS).clamp(1, DEFAULT_MAX_RESULTS);
                    opts.cancel = Some(ctx.cancel.clone());
                    ws.grep(opts).await.map(|r| ToolResult::ok(&r))
                })
                .await
            }
            ToolKind::Glob => {
                with(&e.name, args, |i: GlobInput| async move {
                    ws.glob_cancellable(&i.pattern, MAX_GLOB_RESULTS, ctx.cancel.clone())
                        .await
                        .map(|r| ToolResult::ok(&r))
                })
                .await
            }
            ToolKind::TodoWrite => {
                with(&e.name, args, |i: TodoWriteInput| async move {
                    ws.write_todos(i.todos)?;
                    let (todos, counts) = ws.read_todos();
                    Ok(ToolResult::ok(&TodoOutput { todos, counts }))
                })
                .await
            }
            ToolKind::TodoRead => {
                with(&e.name, args, |_: TodoReadInput| async move {
                    let (todos, counts) = ws.read_todos();
                    Ok(ToolResult::ok(&TodoOutput { todos, counts }))
                })
                .await
            }
        }
    }

    /// The options of a command a model runs: the host's write access
    /// (never the model's), the model's timeout (the workspace keeps only
    /// a lower one), the call's cancellation.
    fn exec_options(&self, tool: &str, line: &str, timeout_ms: Option<u64>, ctx: &CallCtx) -> ExecOptions {
        let (writable, write) = match self.inner.write.resolve(tool, line) {
            WriteAccess::None => (false, Vec::new()),
            WriteAccess::Policy => (true, Vec::new()),
            WriteAccess::Paths(p) => (true, p),
        };
        ExecOptions {
            writable,
            write,
            timeout: timeout_ms.map(Duration::from_millis),
            cancel: Some(ctx.cancel.clone()),
            ..ExecOptions::default()
        }
    }

    /// Run a foreground command, reporting progress while it runs.
    async fn command(
        &self,
        kind: ToolKind,
        tool: &str,
        line: &str,
        timeout_ms: Option<u64>,
        ctx: CallCtx,
    ) -> ToolResult {
        let ws = &self.inner.ws;
        let opts = ws.command_options(self.exec_options(kind.name(), line, timeout_ms, &ctx));
        let total_ms = opts.timeout.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX));
        let run = ws.exec(line, opts);
        let done = match &ctx.progress {
            None => run.await,
            Some(sink) => {
                tokio::pin!(run);
                let start = tokio::time::Instant::now();
                let mut tick = tokio::time::interval_at(start + PROGRESS_EVERY, PROGRESS_EVERY);
                loop {
                    tokio::select! {
                        r = &mut run => break r,
                        _ = tick.tick() => sink(Progress {
                            elapsed_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
                            total_ms,
                            message: format!("{tool}: running"),
                        }),
                    }
                }
            }
        };
        match done {
            Ok(exec) => ToolResult::run(RunOutput::of(&exec)),
            Err(e) => failed(tool, &e),
        }
    }

    /// Start a background job.
    async fn background(&self, tool: &str, i: RunShellInput, ctx: CallCtx) -> ToolResult {
        let ws = &self.inner.ws;
        // The job outlives the call: the call's cancellation must not kill
        // it (`shell_kill` does), but one cancelled before the start
        // starts nothing.
        if ctx.cancel.is_cancelled() {
            return ToolResult::run(RunOutput::of(&Exec::Cancelled(crate::runner::NotStarted {
                id: String::new(),
                message: "the call was cancelled before the job started".into(),
            })));
        }
        let mut opts = self.exec_options(ToolKind::RunShell.name(), &i.command, i.timeout_ms, &ctx);
        opts.cancel = None;
        match ws.start_shell(&i.command, opts).await {
            Ok(Started::Job { id, access }) => {
                let mut r = RunOutput::started(id, access.writable);
                r.write_grants = access.write_grants.iter().map(|p| p.display().to_string()).collect();
                ToolResult::run(r)
            }
            Ok(Started::Refused(r)) => ToolResult::run(RunOutput::refused(&r)),
            Err(e) => failed(tool, &e),
        }
    }

    /// The `run_tests` line: the base command, and the filter as one word.
    fn test_line(&self, filter: Option<&str>) -> Result<String, String> {
        let base = self.inner.tests.as_deref().ok_or("no test command is configured for this workspace")?;
        let Some(f) = filter.filter(|f| !f.is_empty()) else {
            return Ok(base.to_string());
        };
        if f.len() > MAX_FILTER_BYTES {
            return Err(format!("the filter is {} bytes; at most {MAX_FILTER_BYTES}", f.len()));
        }
        if f.contains(['\'', '"', '`']) {
            return Err("the filter cannot contain quotes; give a plain test-name fragment".into());
        }
        if f.chars().any(char::is_control) {
            return Err("the filter cannot contain newlines or control characters; give one test-name fragment".into());
        }
        if f.starts_with('-') {
            return Err("the filter cannot start with `-` (it would be read as an option); give a test name".into());
        }
        // One word in both modes: `quote_word` is read back unchanged by
        // the argv tokenizer and by `sh`.
        Ok(format!("{base} {}", crate::policy::quote_word(f)))
    }
}

/// Parse `args` as the tool's input, or the `bad-input` result.
fn parse<T: DeserializeOwned>(tool: &str, args: Value) -> Result<T, ToolResult> {
    if !args.is_object() {
        return Err(ToolResult::error(ErrorInfo::new(
            "bad-input",
            format!("{tool}: the arguments must be a JSON object as the tool's input schema describes"),
        )));
    }
    serde_path_to_error::deserialize(args).map_err(|e| {
        let at = e.path().to_string();
        let inner = e.into_inner();
        let at = if at == "." { String::new() } else { format!(" at {at}") };
        ToolResult::error(ErrorInfo::new(
            "bad-input",
            format!("{tool}: invalid arguments{at}: {inner}; call it again with arguments that match its input schema"),
        ))
    })
}

/// Parse, run, and turn a workspace error into a result.
async fn with<T, F, Fut>(tool: &str, args: Value, f: F) -> ToolResult
where
    T: DeserializeOwned,
    F: FnOnce(T) -> Fut,
    Fut: std::future::Future<Output = Result<ToolResult, WorkspaceError>>,
{
    match parse::<T>(tool, args) {
        Ok(i) => f(i).await.unwrap_or_else(|e| failed(tool, &e)),
        Err(bad) => bad,
    }
}

/// A workspace error as a result: its kind, its message and what to do
/// next.
fn failed(tool: &str, e: &WorkspaceError) -> ToolResult {
    let kind = e.kind();
    if let WorkspaceError::Refused(r) = e {
        return ToolResult::error(ErrorInfo::refused(r));
    }
    let next = match kind {
        "stale-hash" => "read the file again and redo the edit against what it holds now, with its new hash",
        "not-found" => "read the file again and copy the exact text (without line-number prefixes)",
        "not-unique" => "add surrounding lines to old_string until it occurs once, or set replace_all",
        "path-escape" => "use a path inside the workspace that the policy does not deny",
        "no-such-file" => "check the path with list_dir or glob",
        "bad-path" => "check the path with list_dir or glob (symbolic links are not followed)",
        "timed-out" => "give a longer timeout_ms, or leave it out for the workspace's own",
        "job-not-found" => "use a job_id that run_shell returned",
        "unsafe-pattern" | "bad-glob" => "simplify the pattern",
        "fault" | "io" => "this is not caused by the arguments; tell the user",
        "disposed" => "the workspace is closed; tell the user",
        _ => "",
    };
    let message = crate::error_chain(e);
    let message = if next.is_empty() { format!("{tool}: {message}") } else { format!("{tool}: {message}; {next}") };
    ToolResult::error(ErrorInfo::new(kind, message))
}

/// The examples of `docs/tools.md`, compiled with the doctests.
#[cfg(doctest)]
#[doc = include_str!("../../docs/tools.md")]
pub struct ToolsDocExamples;
