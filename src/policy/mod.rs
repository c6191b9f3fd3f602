//! The workspace policy: what an agent may read, write and run.
//!
//! A [`WorkspacePolicy`] is plain data, read from TOML (the CLI's
//! `--policy FILE`) or JSON, or built in code. It is checked when it is
//! read: unknown keys and bad values are refused with the key's path and
//! the reason, regexes are compiled, durations and sizes parsed. Nothing
//! here runs a command.
//!
//! Three things are built on it:
//! - [`PathJail`]: realpath resolution of a path against the workspace,
//!   accepted inside the workspace or an allowed root and off the deny list;
//! - [`check_shell_command`] / [`ShellChecker`]: the verdict on a command
//!   line (argv mode, or `sh` mode which parses the line and checks every
//!   command in it) before anything runs;
//! - the sandbox request for an accepted command (readable roots, deny
//!   globs, write grants, environment, limits), which the runner builds
//!   from it ([`crate::runner`]).

pub mod gate;
mod jail;
pub mod shell;

use std::collections::BTreeMap;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

use crate::path::DenyGlobs;
pub use gate::{GateAnswer, GateKind, GateRule};
pub use jail::{PathAccess, PathJail};
pub use shell::{
    check_shell_command, quote_argv, quote_word, tokenize_command, CommandCtx, LinePlan, PlannedCommand,
    PlannedRedirect, PredicateDecision, Refusal, RefusalReason, ShellChecker, Verdict,
};

use crate::sandbox::DEFAULT_MAX_OUTPUT;
pub use crate::units::{parse_duration, parse_size};
use portcullis_helper::spec::{Mode, Network};

/// Everything that can be wrong with a policy, or with a path it is asked
/// to judge.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The policy file could not be read.
    #[error("cannot read policy file {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The policy text is not valid TOML/JSON, or a key is unknown or has a
    /// bad value.
    #[error("{origin}: {key}: {message}")]
    Parse {
        /// The file name, or `<toml>` / `<json>` for text.
        origin: String,
        /// The key's path, e.g. `shell.deny_patterns[1].regex` (`.` for the top).
        key: String,
        /// What is wrong.
        message: String,
    },
    /// A value that parsed but cannot be used as it is.
    #[error("policy: {key}: {reason}")]
    Invalid {
        /// The key's path.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// A path that is not inside the jail, or is on the deny list.
    #[error("path escapes the workspace jail: {}: {why}", path.display())]
    PathEscape {
        /// The path as given.
        path: PathBuf,
        /// Why it was refused.
        why: String,
    },
    /// A path could not be examined (permission, I/O error).
    #[error("cannot resolve {}", path.display())]
    Resolve {
        /// The path as given.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl PolicyError {
    fn invalid(key: impl Into<String>, reason: impl Into<String>) -> Self {
        PolicyError::Invalid { key: key.into(), reason: reason.into() }
    }
}

/// The policy of one workspace.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspacePolicy {
    /// The jail root: absolute; resolved to its real path when used. The
    /// CLI's `--workspace` overrides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<PathBuf>,
    /// Extra readable roots outside the workspace (absolute).
    #[serde(default)]
    pub allow_paths: Vec<PathBuf>,
    /// Globs (`*`, `**`, `?`) that nothing may read or write, even inside
    /// the workspace; a pattern without `/` matches a name at any depth, and
    /// a match on a directory covers everything below it.
    #[serde(default)]
    pub deny_paths: Vec<String>,
    /// Write grants used when a command may write: paths inside the
    /// workspace (relative or absolute) or absolute host paths (`/tmp`:
    /// the host's `/tmp`). Empty: a writable command may write the whole
    /// workspace.
    #[serde(default)]
    pub write: Vec<PathBuf>,
    /// Paths that stay read-only even when the workspace is writable, on
    /// top of `.git/hooks`, `.git/config` and the policy file itself.
    #[serde(default)]
    pub protect: Vec<PathBuf>,
    /// Network access of commands.
    #[serde(default)]
    pub network: Network,
    /// Resource limits of each command.
    #[serde(default)]
    pub limits: LimitsPolicy,
    /// Opt into a named degraded sandbox where the host lacks user
    /// namespaces. Absent: the full sandbox, or a refusal.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "degraded_opt::deserialize")]
    pub degraded: Option<Mode>,
    /// Report the writes the kernel refused during each command
    /// (`refused_writes` of the result). Absent: on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report_refused_writes: Option<bool>,
    /// What may run. Absent: nothing may run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shell: Option<ShellPolicy>,
    /// Read windows of the file tools.
    #[serde(default)]
    pub read: ReadPolicy,
    /// Bounds of directory listings.
    #[serde(default)]
    pub list: ListPolicy,
    /// The gate's rules (`[[gate]]`), in order. Empty: no gate (a request
    /// passes as asked). Compiled by `WorkspacePolicy::gate` (`gate::rules`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gate: Vec<GateRule>,
    /// The audit log every action is recorded in (JSON Lines, hash-chained;
    /// see docs/audit.md): absolute, or relative to the policy file's
    /// directory. It must lie outside the workspace and every write grant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<PathBuf>,
    /// Sync the audit log every this many records (default 1: every record
    /// is on disk before its action starts; more is faster, and a machine
    /// crash can lose up to that many minus one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit_batch: Option<std::num::NonZeroU32>,
    /// Sandboxes a workspace keeps made ahead, so that a command starts
    /// without waiting for its namespaces and system mounts (default
    /// [`DEFAULT_POOL`]; `0`: none, every command makes its own). Each is
    /// used for one command only. Used by a long-lived workspace
    /// (`Workspace`, `portcullis serve`), not by `portcullis exec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<u32>,
}

/// Pre-made sandboxes of a workspace whose policy says nothing (`pool`).
pub const DEFAULT_POOL: u32 = 2;
/// The most pre-made sandboxes a policy may ask for.
pub const MAX_POOL: u32 = 16;

/// Resource limits of each command.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsPolicy {
    /// Most processes at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pids: Option<u64>,
    /// Most memory: bytes, or a string with a unit (`"512MiB"`, `"2G"`).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "size_opt")]
    pub memory: Option<u64>,
}

/// How a command line is read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Interpreter {
    /// The line is split into one argv and run without a shell (the default).
    #[default]
    None,
    /// The line is parsed as `sh` syntax, every command in it is checked, and
    /// it runs with `/bin/sh -c`.
    Sh,
}

/// What may run, and how.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShellPolicy {
    /// How a line is read.
    #[serde(default)]
    pub interpreter: Interpreter,
    /// Executable basenames that may run. Absent: anything not denied.
    /// Present: exhaustive (an empty list lets nothing run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
    /// Executable basenames that may never run; deny wins over allow.
    #[serde(default)]
    pub deny: Vec<String>,
    /// Argument rules: a word prefix (`"git push --force"`) or a regex
    /// (`{ regex = '^git reset --hard\b' }`) over the command's words.
    #[serde(default)]
    pub deny_patterns: Vec<DenyPattern>,
    /// Declarative command rules, first match decides.
    #[serde(default)]
    pub allow_command: Vec<CommandRule>,
    /// A predicate every command must pass (library API only).
    #[serde(skip)]
    pub predicate: Option<CommandPredicate>,
    /// Names copied from the caller's environment.
    #[serde(default)]
    pub inherit_env: Vec<String>,
    /// Variables set for every command (they win over inherited ones).
    #[serde(default, deserialize_with = "unique_map")]
    pub env: BTreeMap<String, String>,
    /// Wall-clock cap per command: seconds, or `"120s"`, `"2m"`, `"500ms"`.
    #[serde(default = "default_timeout", with = "duration")]
    pub timeout: Duration,
    /// Cap on the output kept, stdout and stderr together.
    #[serde(default = "default_max_output", with = "size")]
    pub max_output_bytes: u64,
    /// Background commands; absent: refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background: Option<BackgroundPolicy>,
}

impl Default for ShellPolicy {
    fn default() -> Self {
        ShellPolicy {
            interpreter: Interpreter::None,
            allow: None,
            deny: Vec::new(),
            deny_patterns: Vec::new(),
            allow_command: Vec::new(),
            predicate: None,
            inherit_env: Vec::new(),
            env: BTreeMap::new(),
            timeout: default_timeout(),
            max_output_bytes: default_max_output(),
            background: None,
        }
    }
}

impl fmt::Debug for ShellPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ShellPolicy")
            .field("interpreter", &self.interpreter)
            .field("allow", &self.allow)
            .field("deny", &self.deny)
            .field("deny_patterns", &self.deny_patterns)
            .field("allow_command", &self.allow_command)
            .field("predicate", &self.predicate.as_ref().map(|_| "<fn>"))
            .field("inherit_env", &self.inherit_env)
            .field("env", &self.env)
            .field("timeout", &self.timeout)
            .field("max_output_bytes", &self.max_output_bytes)
            .field("background", &self.background)
            .finish()
    }
}

fn default_timeout() -> Duration {
    Duration::from_secs(120)
}

fn default_max_output() -> u64 {
    DEFAULT_MAX_OUTPUT as u64
}

/// Background commands.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackgroundPolicy {
    /// Most background commands at once.
    #[serde(default = "default_max_jobs")]
    pub max_jobs: u32,
    /// Wall-clock cap of a background command.
    #[serde(default = "default_bg_timeout", with = "duration")]
    pub timeout: Duration,
}

fn default_max_jobs() -> u32 {
    4
}

fn default_bg_timeout() -> Duration {
    Duration::from_secs(3600)
}

/// Read windows of the file tools.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadPolicy {
    /// Lines in a window when the caller names none.
    #[serde(default = "default_lines")]
    pub default_lines: u64,
    /// Most bytes of returned content (line numbers included); absent: no cap.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "size_opt")]
    pub max_bytes: Option<u64>,
}

impl Default for ReadPolicy {
    fn default() -> Self {
        ReadPolicy { default_lines: default_lines(), max_bytes: None }
    }
}

fn default_lines() -> u64 {
    2000
}

/// Bounds of directory listings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListPolicy {
    /// Globs hidden from listings (not a security boundary: use `deny_paths`).
    #[serde(default = "default_ignore")]
    pub ignore: Vec<String>,
    /// Deepest level listed.
    #[serde(default = "default_depth")]
    pub max_depth: u32,
    /// Most entries returned.
    #[serde(default = "default_entries")]
    pub max_entries: u32,
}

impl Default for ListPolicy {
    fn default() -> Self {
        ListPolicy { ignore: default_ignore(), max_depth: default_depth(), max_entries: default_entries() }
    }
}

fn default_ignore() -> Vec<String> {
    vec!["node_modules".into(), ".git".into()]
}

fn default_depth() -> u32 {
    5
}

fn default_entries() -> u32 {
    500
}

/// An argument rule: a command matching it is refused (`denied-pattern`).
#[derive(Clone)]
pub enum DenyPattern {
    /// The command's words begin with these words (the first compared by
    /// basename, case-insensitively): `"git push --force"`.
    Prefix(Vec<String>),
    /// The regex finds a match in the command's words joined by single
    /// spaces, the first word being the executable's basename.
    Regex(regex::Regex),
}

impl DenyPattern {
    /// A prefix pattern from its text (split like an argv-mode command).
    pub fn prefix(text: &str) -> Result<Self, PolicyError> {
        let words = tokenize_command(text)
            .map_err(|r| PolicyError::invalid("shell.deny_patterns", format!("{text:?}: {}", r.message)))?;
        if words.is_empty() {
            return Err(PolicyError::invalid("shell.deny_patterns", "an empty pattern would match every command"));
        }
        Ok(DenyPattern::Prefix(words))
    }

    /// A regex pattern.
    pub fn regex(text: &str) -> Result<Self, PolicyError> {
        compile_regex(text).map(DenyPattern::Regex).map_err(|e| PolicyError::invalid("shell.deny_patterns", e))
    }
}

fn compile_regex(text: &str) -> Result<regex::Regex, String> {
    regex::RegexBuilder::new(text)
        .size_limit(1 << 20)
        .dfa_size_limit(1 << 20)
        .build()
        .map_err(|e| format!("bad regex {text:?}: {e}"))
}

impl fmt::Debug for DenyPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DenyPattern::Prefix(w) => write!(f, "Prefix({})", quote_argv(w)),
            DenyPattern::Regex(r) => write!(f, "Regex({:?})", r.as_str()),
        }
    }
}

impl Serialize for DenyPattern {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            DenyPattern::Prefix(w) => s.serialize_str(&quote_argv(w)),
            DenyPattern::Regex(r) => {
                let mut m = BTreeMap::new();
                m.insert("regex", r.as_str());
                m.serialize(s)
            }
        }
    }
}

impl<'de> Deserialize<'de> for DenyPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = DenyPattern;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a word prefix such as \"git push --force\", or { regex = \"...\" }")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DenyPattern, E> {
                let words = tokenize_command(v).map_err(|r| E::custom(format!("{v:?}: {}", r.message)))?;
                if words.is_empty() {
                    return Err(E::custom("an empty pattern would match every command"));
                }
                Ok(DenyPattern::Prefix(words))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DenyPattern, A::Error> {
                let mut regex = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key != "regex" {
                        return Err(de::Error::unknown_field(&key, &["regex"]));
                    }
                    let text: String = map.next_value()?;
                    regex = Some(compile_regex(&text).map_err(de::Error::custom)?);
                }
                regex.map(DenyPattern::Regex).ok_or_else(|| de::Error::missing_field("regex"))
            }
        }
        d.deserialize_any(V)
    }
}

/// What a command rule decides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RuleAction {
    /// Refuse the command (`not-allowed`, with the rule's reason).
    #[default]
    Deny,
    /// Stop here: the command passes the rules (allow/deny lists and deny
    /// patterns still apply).
    Allow,
}

/// A declarative command rule (`[[shell.allow_command]]`): a command whose
/// words begin with `argv` (the first by basename), or match `regex`, gets
/// `action`. Rules are tried in order; the first match decides; no match
/// lets the command pass.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandRule {
    /// Word prefix to match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub argv: Option<Vec<String>>,
    /// Regex over the words joined by spaces.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "regex_opt")]
    pub regex: Option<regex::Regex>,
    /// What a match decides.
    #[serde(default)]
    pub action: RuleAction,
    /// Told to the model when the rule refuses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The verdict of a predicate on one command.
pub type CommandPredicate = Arc<dyn Fn(&[String], &shell::CommandCtx<'_>) -> PredicateDecision + Send + Sync>;

impl WorkspacePolicy {
    /// Read a policy file: TOML, or JSON when the name ends in `.json`. It
    /// must be a regular file of at most 1 MiB (not a FIFO that never ends,
    /// nor `/dev/zero`).
    pub fn from_file(path: &Path) -> Result<Self, PolicyError> {
        use std::io::Read;
        let read_err = |source| PolicyError::Read { path: path.to_path_buf(), source };
        let file = std::fs::File::open(path).map_err(read_err)?;
        let meta = file.metadata().map_err(read_err)?;
        if !meta.is_file() {
            return Err(read_err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a regular file")));
        }
        let mut bytes = Vec::new();
        file.take(MAX_POLICY_BYTES + 1).read_to_end(&mut bytes).map_err(read_err)?;
        if bytes.len() as u64 > MAX_POLICY_BYTES {
            return Err(read_err(std::io::Error::new(std::io::ErrorKind::InvalidData, "larger than 1 MiB")));
        }
        let text = String::from_utf8(bytes)
            .map_err(|_| read_err(std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text")))?;
        let origin = path.display().to_string();
        if path.extension().is_some_and(|e| e == "json") {
            Self::parse_json(&text, &origin)
        } else {
            Self::parse_toml(&text, &origin)
        }
    }

    /// Parse TOML text.
    pub fn from_toml(text: &str) -> Result<Self, PolicyError> {
        Self::parse_toml(text, "<toml>")
    }

    /// Parse JSON text.
    pub fn from_json(text: &str) -> Result<Self, PolicyError> {
        Self::parse_json(text, "<json>")
    }

    fn parse_toml(text: &str, origin: &str) -> Result<Self, PolicyError> {
        let de = toml::Deserializer::parse(text).map_err(|e| PolicyError::Parse {
            origin: origin.into(),
            key: ".".into(),
            message: toml_message(text, &e),
        })?;
        let p: Self = serde_path_to_error::deserialize(de).map_err(|e| PolicyError::Parse {
            origin: origin.into(),
            key: e.path().to_string(),
            message: toml_message(text, e.inner()),
        })?;
        p.validate()?;
        Ok(p)
    }

    fn parse_json(text: &str, origin: &str) -> Result<Self, PolicyError> {
        let mut de = serde_json::Deserializer::from_str(text);
        let p: Self = serde_path_to_error::deserialize(&mut de).map_err(|e| PolicyError::Parse {
            origin: origin.into(),
            key: e.path().to_string(),
            message: e.inner().to_string(),
        })?;
        de.end().map_err(|e| PolicyError::Parse { origin: origin.into(), key: ".".into(), message: e.to_string() })?;
        p.validate()?;
        Ok(p)
    }

    /// Check the values serde cannot: absolute paths, names, limits.
    pub fn validate(&self) -> Result<(), PolicyError> {
        if let Some(ws) = &self.workspace {
            if !ws.is_absolute() {
                return Err(PolicyError::invalid("workspace", format!("{} is not an absolute path", ws.display())));
            }
        }
        for (i, p) in self.allow_paths.iter().enumerate() {
            if !p.is_absolute() {
                return Err(PolicyError::invalid(
                    format!("allow_paths[{i}]"),
                    format!("{} is not an absolute path", p.display()),
                ));
            }
        }
        for (i, g) in self.deny_paths.iter().enumerate() {
            DenyGlobs::new(std::slice::from_ref(g)).map_err(|e| PolicyError::invalid(format!("deny_paths[{i}]"), e))?;
        }
        for (i, w) in self.write.iter().enumerate() {
            if w.as_os_str().is_empty() {
                return Err(PolicyError::invalid(format!("write[{i}]"), "an empty path"));
            }
        }
        if let Some(n) = self.limits.pids {
            crate::units::check_pids(n).map_err(|why| PolicyError::invalid("limits.pids", why))?;
        }
        if let Some(m) = self.limits.memory {
            crate::units::check_memory(m).map_err(|why| PolicyError::invalid("limits.memory", why))?;
        }
        if let Some(n) = self.pool.filter(|n| *n > MAX_POOL) {
            return Err(PolicyError::invalid(
                "pool",
                format!(
                    "{n} pre-made sandboxes is more than {MAX_POOL}; each is two idle processes and their namespaces"
                ),
            ));
        }
        if let Some(sh) = &self.shell {
            for (list, names) in [("allow", sh.allow.as_deref().unwrap_or_default()), ("deny", &sh.deny)] {
                for (i, n) in names.iter().enumerate() {
                    if n.is_empty() || n.chars().any(char::is_whitespace) {
                        return Err(PolicyError::invalid(
                            format!("shell.{list}[{i}]"),
                            format!("{n:?} is not an executable name"),
                        ));
                    }
                }
            }
            for (i, r) in sh.allow_command.iter().enumerate() {
                match (&r.argv, &r.regex) {
                    (Some(a), None) if a.is_empty() => {
                        return Err(PolicyError::invalid(
                            format!("shell.allow_command[{i}].argv"),
                            "an empty prefix would match every command",
                        ))
                    }
                    (Some(_), None) | (None, Some(_)) => {}
                    _ => {
                        return Err(PolicyError::invalid(
                            format!("shell.allow_command[{i}]"),
                            "give exactly one of `argv` and `regex`",
                        ))
                    }
                }
            }
            for (i, n) in sh.inherit_env.iter().enumerate() {
                check_env_name(n).map_err(|why| PolicyError::invalid(format!("shell.inherit_env[{i}]"), why))?;
            }
            for n in sh.env.keys() {
                check_env_name(n).map_err(|why| PolicyError::invalid(format!("shell.env.{n}"), why))?;
            }
            if let Err(why) = crate::units::check_timeout(sh.timeout) {
                return Err(PolicyError::invalid("shell.timeout", why));
            }
            if usize::try_from(sh.max_output_bytes).is_err() {
                return Err(PolicyError::invalid("shell.max_output_bytes", "too large for this machine"));
            }
            if let Some(bg) = &sh.background {
                if bg.max_jobs == 0 {
                    return Err(PolicyError::invalid(
                        "shell.background.max_jobs",
                        "0: omit [shell.background] instead",
                    ));
                }
            }
        }
        if self.list.max_depth == 0 || self.list.max_entries == 0 {
            return Err(PolicyError::invalid("list", "max_depth and max_entries must be at least 1"));
        }
        if self.read.default_lines == 0 {
            return Err(PolicyError::invalid("read.default_lines", "must be at least 1"));
        }
        gate::validate(&self.gate)?;
        Ok(())
    }

    /// The workspace root: `workspace` as given (the CLI may override it).
    pub fn workspace_root(&self) -> Result<&Path, PolicyError> {
        self.workspace.as_deref().ok_or_else(|| {
            PolicyError::invalid("workspace", "no workspace: set `workspace` in the policy or pass --workspace")
        })
    }

    /// The path jail of this policy (resolves the workspace's real path).
    pub fn jail(&self) -> Result<PathJail, PolicyError> {
        PathJail::new(self)
    }

    /// A checker for command lines (compiles everything once).
    pub fn checker(&self) -> Result<ShellChecker, PolicyError> {
        ShellChecker::new(self)
    }
}

/// Largest policy file read.
const MAX_POLICY_BYTES: u64 = 1 << 20;

/// Shell start-up and loader variables: never passed to a command. A shell
/// reads them before it reads the line the checker saw (`ENV`, `BASH_ENV`,
/// exported functions), or they change what a checked line runs (`IFS`,
/// `CDPATH`, `LD_PRELOAD`).
pub fn is_startup_var(name: &str) -> bool {
    const NAMES: &[&str] = &[
        "ENV",
        "BASH_ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "IFS",
        "PS4",
        "CDPATH",
        "PROMPT_COMMAND",
        "GLOBIGNORE",
        "BASH_XTRACEFD",
        "EXECIGNORE",
        "POSIXLY_CORRECT",
        "BASH_LOADABLES_PATH",
        "ZDOTDIR",
        // glibc loads iconv modules from here, in any program.
        "GCONV_PATH",
        "GETCONF_DIR",
        "DIRSTACK",
    ];
    // Every `BASH*` variable is bash's own (BASH_ENV, BASH_FUNC_*, BASH_CMDS
    // and BASH_ALIASES, which fill the command hash and the aliases, …).
    NAMES.contains(&name) || BASH_INTEGER_VARS.contains(&name) || name.starts_with("BASH") || name.starts_with("LD_")
}

/// bash's integer variables: assigning one evaluates arithmetic, where an
/// array subscript `a[$(cmd)]` runs cmd.
pub const BASH_INTEGER_VARS: &[&str] =
    &["OPTIND", "RANDOM", "SRANDOM", "HISTCMD", "SECONDS", "BASHPID", "LINENO", "EPOCHSECONDS", "EPOCHREALTIME"];

/// The variables that set a shell's own character set.
pub fn is_locale_var(name: &str) -> bool {
    matches!(name, "LC_ALL" | "LC_CTYPE" | "LANG")
}

/// The first `(name, value)` that would give an sh-mode shell a locale the
/// checker does not read lines in, if any.
pub fn unsafe_sh_locale(vars: impl IntoIterator<Item = (String, String)>) -> Option<(String, String)> {
    vars.into_iter().find(|(k, v)| is_locale_var(k) && !is_safe_locale(v))
}

/// A locale whose character set a shell reads as the checker does: C,
/// POSIX, or UTF-8 (every byte of a multibyte character is >= 0x80).
pub fn is_safe_locale(v: &str) -> bool {
    // A `/` would make glibc load locale files from a path of the line's choosing.
    let lower = v.to_ascii_lowercase();
    !lower.contains('/')
        && (matches!(lower.as_str(), "" | "c" | "posix") || lower.ends_with(".utf-8") || lower.ends_with(".utf8"))
}

fn check_env_name(n: &str) -> Result<(), String> {
    let ok = !n.is_empty()
        && !n.starts_with(|c: char| c.is_ascii_digit())
        && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !ok {
        return Err(format!("{n:?} is not a variable name"));
    }
    if is_startup_var(n) {
        return Err(format!("{n} is a shell start-up or loader variable and is never passed to a command"));
    }
    Ok(())
}

/// A TOML error on one line: where, and what.
fn toml_message(text: &str, e: &toml::de::Error) -> String {
    let msg = e.message().split_whitespace().collect::<Vec<_>>().join(" ");
    match e.span() {
        Some(span) => {
            let before = text.get(..span.start).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("line {line}, column {col}: {msg}")
        }
        None => msg,
    }
}

/// A map whose keys must be unique (JSON allows a key twice; the second
/// would silently win).
fn unique_map<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    struct V;
    impl<'de> Visitor<'de> for V {
        type Value = BTreeMap<String, String>;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a table of NAME = \"value\"")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            while let Some((k, v)) = map.next_entry::<String, String>()? {
                if out.contains_key(&k) {
                    return Err(de::Error::custom(format!("{k} is given twice")));
                }
                out.insert(k, v);
            }
            Ok(out)
        }
    }
    d.deserialize_map(V)
}

/// A number, or a string parsed by `parse`.
fn num_or_str<'de, D, T>(
    d: D,
    what: &'static str,
    from_u64: fn(u64) -> T,
    parse: fn(&str) -> Result<T, String>,
) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
{
    struct V<T> {
        what: &'static str,
        from_u64: fn(u64) -> T,
        parse: fn(&str) -> Result<T, String>,
    }
    impl<'de, T> Visitor<'de> for V<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.what)
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
            Ok((self.from_u64)(v))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
            u64::try_from(v).map(self.from_u64).map_err(|_| E::custom(format!("{v} is negative")))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
            (self.parse)(v).map_err(E::custom)
        }
    }
    d.deserialize_any(V { what, from_u64, parse })
}

mod duration {
    use super::*;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        if d.subsec_millis() == 0 {
            s.serialize_str(&format!("{}s", d.as_secs()))
        } else {
            s.serialize_str(&format!("{}ms", d.as_millis()))
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        num_or_str(d, "seconds, or a duration such as \"120s\", \"2m\", \"500ms\"", Duration::from_secs, parse_duration)
    }
}

mod size {
    use super::*;

    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(*v)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        num_or_str(d, "bytes, or a size such as \"512MiB\"", |v| v, parse_size)
    }
}

mod size_opt {
    use super::*;

    pub fn serialize<S: Serializer>(v: &Option<u64>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.serialize_u64(*v),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        size::deserialize(d).map(Some)
    }
}

/// `degraded`: only a degraded mode by name (`landlock-only`); the full
/// sandbox is asked for by leaving the key out.
mod degraded_opt {
    use super::*;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Mode>, D::Error> {
        let name = String::deserialize(d)?;
        Mode::degraded(&name).map(Some).map_err(de::Error::custom)
    }
}

mod regex_opt {
    use super::*;

    pub fn serialize<S: Serializer>(v: &Option<regex::Regex>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(r) => s.serialize_str(r.as_str()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<regex::Regex>, D::Error> {
        let text = String::deserialize(d)?;
        compile_regex(&text).map(Some).map_err(de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issue_example_parses() {
        let p = WorkspacePolicy::from_toml(
            r#"
workspace = "/srv/agents/alice/repo"
allow_paths = ["/opt/toolchains"]
deny_paths = [".env*", "secrets/**"]
write = ["target", "/tmp"]

[shell]
interpreter = "none"
allow = ["git", "cargo", "ls", "cat"]
deny = ["rm", "curl"]
deny_patterns = ["git push --force", { regex = '^git reset --hard\b' }]
inherit_env = ["PATH", "LANG"]
timeout = "120s"
max_output_bytes = 1048576
"#,
        );
        let p = match p {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        };
        let sh = p.shell.as_ref().map(|s| (s.timeout, s.deny_patterns.len(), s.max_output_bytes));
        assert_eq!(sh, Some((Duration::from_secs(120), 2, 1_048_576)));
    }

    fn err(text: &str) -> String {
        match WorkspacePolicy::from_toml(text) {
            Ok(_) => panic!("accepted: {text}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_key() {
        assert!(err("[shell]\nallow = [\"git\"]\ncolour = 1\n").contains("shell"), "{}", err("[shell]\ncolour = 1\n"));
        assert!(err("[shell]\ncolour = 1\n").contains("colour"));
        let e = err("[shell]\ndeny_patterns = [\"x\", { regex = '(' }]\n");
        assert!(e.contains("shell.deny_patterns[1]") && e.contains("regex"), "{e}");
        let e = err("[shell]\ntimeout = \"soon\"\n");
        assert!(e.contains("shell.timeout") && e.contains("soon"), "{e}");
        let e = err("workspace = \"relative/dir\"\n");
        assert!(e.contains("workspace") && e.contains("absolute"), "{e}");
        let e = err("[shell]\ninherit_env = [\"PATH\", \"BASH_ENV\"]\n");
        assert!(e.contains("shell.inherit_env[1]") && e.contains("start-up"), "{e}");
        let e = err("[shell]\ninterpreter = \"bash\"\n");
        assert!(e.contains("shell.interpreter"), "{e}");
        let e = err("[limits]\nmemory = \"12 parsecs\"\n");
        assert!(e.contains("limits.memory"), "{e}");
        let e = err("[[shell.allow_command]]\nreason = \"x\"\n");
        assert!(e.contains("shell.allow_command[0]"), "{e}");
        let e = err("[limits]\nmemory = 0\n");
        assert!(e.contains("limits.memory"), "{e}");
        let dup = WorkspacePolicy::from_json(r#"{"shell":{"env":{"A":"1","A":"2"}}}"#);
        assert!(dup.is_err_and(|e| e.to_string().contains("twice")));
        for bad in ["/dev/zero", "/", "/nonexistent/policy.toml"] {
            assert!(WorkspacePolicy::from_file(Path::new(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn json_and_toml_agree() {
        let j = WorkspacePolicy::from_json(
            r#"{"workspace":"/w","shell":{"interpreter":"sh","allow":["git"],"timeout":30,
                "deny_patterns":["git push --force",{"regex":"^git reset"}]}}"#,
        );
        let j = match j {
            Ok(j) => j,
            Err(e) => panic!("{e}"),
        };
        let s = j.shell.as_ref().map(|s| (s.interpreter, s.timeout));
        assert_eq!(s, Some((Interpreter::Sh, Duration::from_secs(30))));
        assert!(
            WorkspacePolicy::from_json(r#"{"shell":{"alow":["git"]}}"#).is_err_and(|e| e.to_string().contains("alow"))
        );
        // Serialising and reading back gives the same policy.
        let text = serde_json::to_string(&j).unwrap_or_default();
        let back = WorkspacePolicy::from_json(&text).map(|b| format!("{b:?}"));
        assert_eq!(back.ok(), Some(format!("{j:?}")));
    }
}
