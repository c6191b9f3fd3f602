//! The tools' inputs: one type per tool, read with `deny_unknown_fields`
//! (a field the schema does not name is refused, not ignored). Their doc
//! comments are written for a model: they become the descriptions of the
//! JSON Schemas the tools publish (the struct's own comment is the tool's
//! description), so schema and code cannot drift.

use schemars::JsonSchema;
use serde::Deserialize;

use crate::workspace::todos::Todo;

/// Read a text file of the workspace as numbered lines (`cat -n` style). Returns a window of at most `limit`
/// lines from line `offset`, the file's total line count, whether the window was cut, and `hash`: the SHA-256
/// of the whole file. Pass that hash as `expect_hash` to `edit_file` or `multi_edit` so the edit is refused if
/// the file changed since you read it. Paths are relative to the workspace root; paths outside it and denied
/// paths are refused.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileInput {
    /// The file, relative to the workspace root (e.g. `src/main.rs`).
    pub path: String,
    /// The first line to return, counting from 1 (default 1).
    #[serde(default)]
    pub offset: Option<usize>,
    /// The most lines to return (default: the workspace's setting, usually 2000).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Replace one exact piece of text in a file. `old_string` must occur exactly once in the file (include enough
/// surrounding lines to make it unique), unless `replace_all` is true. Whitespace and indentation must match the
/// file exactly; do not include the line-number prefixes `read_file` shows. Pass `expect_hash` (the `hash` from
/// your last `read_file`) so the edit is refused if the file changed since.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditFileInput {
    /// The file, relative to the workspace root.
    pub path: String,
    /// The exact text to replace (not empty).
    pub old_string: String,
    /// The text to put in its place (must differ from `old_string`).
    pub new_string: String,
    /// Replace every occurrence instead of requiring exactly one.
    #[serde(default)]
    pub replace_all: bool,
    /// The file's `hash` as `read_file` returned it: the edit is refused (`stale-hash`) if the file changed.
    #[serde(default)]
    pub expect_hash: Option<String>,
}

/// One replacement of a `multi_edit`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditItem {
    /// The exact text to replace (must occur exactly once after the earlier edits, unless `replace_all`).
    pub old_string: String,
    /// The text to put in its place.
    pub new_string: String,
    /// Replace every occurrence.
    #[serde(default)]
    pub replace_all: bool,
}

/// Apply several exact replacements to one file, in order, all or none: if any edit fails, the file is left
/// unchanged and the error names the failing edit's index (from 0). Each edit sees the text the earlier ones
/// produced. At most 100 edits.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MultiEditInput {
    /// The file, relative to the workspace root.
    pub path: String,
    /// The replacements, applied in order.
    pub edits: Vec<EditItem>,
    /// The file's `hash` as `read_file` returned it: the edits are refused (`stale-hash`) if the file changed.
    #[serde(default)]
    pub expect_hash: Option<String>,
}

/// Write a whole file: create it (with its missing parent directories) or replace it. The write is atomic and
/// an existing file keeps its permissions. Prefer `edit_file` for changing part of an existing file.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WriteFileInput {
    /// The file, relative to the workspace root.
    pub path: String,
    /// The file's complete new content.
    pub content: String,
}

/// List a directory of the workspace, recursively to `depth` levels. Symbolic links are reported, never
/// followed; denied paths are hidden; `.git` and `node_modules` are hidden by default.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListDirInput {
    /// The directory, relative to the workspace root (default: the root).
    #[serde(default)]
    pub path: Option<String>,
    /// Levels to list (1: only the directory's own entries; default and maximum: the workspace's setting).
    #[serde(default)]
    pub depth: Option<u32>,
    /// More globs to hide, besides the defaults: a name at any depth (`target`, `*.log`) or a path from the
    /// root containing `/` (`docs/build`).
    #[serde(default)]
    pub ignore: Option<Vec<String>>,
}

/// Run one shell command line in the workspace, inside a kernel sandbox: no network unless the workspace allows
/// it, stdin is empty, and the policy checks every command of the line first (a refused command runs nothing and
/// the result says why). Whether the command may write to the workspace is decided by the host, not by you: the
/// result's `writable` and `write_grants` say what access it had, and `refused_writes` lists writes the kernel
/// refused. Paths the policy denies are hidden from commands: each shows as an empty file or directory
/// nobody can read (so `git status` lists a tracked one as modified): that is the policy, not a change, and there
/// is nothing to fix. `timeout_ms`
/// can only shorten the workspace's timeout. With `background: true` the command starts as a background job and
/// the result carries its `job_id`: read its output with `shell_output` and stop it with `shell_kill`.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunShellInput {
    /// The command line (one line; e.g. `cargo build --offline 2>&1 | tail -20`).
    pub command: String,
    /// Kill the command after this many milliseconds (at most the workspace's timeout; leave it out for the
    /// workspace's own).
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub timeout_ms: Option<u64>,
    /// Start it as a background job (a server, a watcher) and return at once with its `job_id`.
    #[serde(default)]
    pub background: bool,
}

/// Read the output of a background job started by `run_shell` with `background: true`: what it printed since
/// `since` (a `cursor` an earlier call returned; omit it to read from the oldest output kept), waiting up to
/// `wait_ms` for new output if there is none yet, and whether the job is still running.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellOutputInput {
    /// The job's id (`job_id` in the result of `run_shell`).
    pub id: String,
    /// The `cursor` of your last `shell_output` for this job: only newer output is returned.
    #[serde(default)]
    pub since: Option<u64>,
    /// Wait up to this many milliseconds for new output (default 0, at most 30000).
    #[serde(default)]
    pub wait_ms: Option<u64>,
}

/// Stop a background job: its whole process tree is killed. Returns once it is gone.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShellKillInput {
    /// The job's id (`job_id` in the result of `run_shell`).
    pub id: String,
}

/// Run the project's tests with the workspace's configured test command, in the same sandbox as `run_shell`.
/// Give `filter` to run only the tests whose names match it (it is passed to the test runner as one argument).
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunTestsInput {
    /// Only tests whose names match this (e.g. `parser::` or `test_login`). No quotes, no newlines, and it
    /// cannot start with `-`.
    #[serde(default)]
    pub filter: Option<String>,
}

/// Search file contents with a regular expression (Rust regex syntax, linear time), respecting `.gitignore` and
/// the workspace's deny list. Returns matching lines with their paths and line numbers.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrepInput {
    /// The regular expression (e.g. `fn\s+main`, `TODO|FIXME`).
    pub pattern: String,
    /// A file or directory to search, relative to the workspace root (default: everything).
    #[serde(default)]
    pub path: Option<String>,
    /// Only files matching this glob: without `/` it matches file names at any depth (`*.rs`), with `/` paths
    /// from the root (`src/**/*.ts`).
    #[serde(default)]
    pub glob: Option<String>,
    /// Match regardless of case.
    #[serde(default)]
    pub ignore_case: bool,
    /// Lines of context before and after each match (at most 100).
    #[serde(default)]
    #[schemars(range(max = 100))]
    pub context: Option<usize>,
    /// The most matching lines returned (default and maximum 1000); more sets `truncated`.
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub max_results: Option<usize>,
}

/// List the files matching a glob, relative to the workspace root (`**/*.rs`, `src/*.ts`, `Cargo.toml`),
/// respecting `.gitignore` and the deny list.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GlobInput {
    /// The glob.
    pub pattern: String,
}

/// Replace your todo list with these items (at most 100): plan multi-step work, mark one item `in_progress` while
/// you work on it and `completed` when done. The list is shared by everything working in this workspace.
#[derive(Clone, Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TodoWriteInput {
    /// The whole new list, in order.
    pub todos: Vec<Todo>,
}

/// Read your todo list and how many items are pending, in progress and completed.
#[derive(Clone, Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TodoReadInput {}
