//! The shell checker: the verdict on a command line before anything runs.
//!
//! In argv mode (the default) a line is one command, split into words with
//! no shell semantics. In `sh` mode the line is parsed and every simple
//! command in it — inside `;`, `&&`, `||`, pipes, `( )`, `$( )`, backticks
//! and here-documents — is checked; redirection targets and `cd`
//! directories must be literal paths inside the jail. Either way each
//! command then passes the same rules: the deny list, the allow list, the
//! deny patterns, the command rules and predicate, the refusal of runners
//! the checker cannot see into, and the wrappers whose inner command is
//! checked too. The verdict is the plan (every command that may run) or a
//! refusal with a reason the model can act on.

mod argv;
mod rules;
pub mod sh;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use argv::{quote_argv, quote_word, tokenize_command};

use super::{Interpreter, PathAccess, PathJail, PolicyError, WorkspacePolicy};
use rules::Rules;
use sh::{Event, RedirOp, SimpleCommand, Word};

/// Longest line checked (1 MiB).
pub const MAX_LINE: usize = 1 << 20;

/// Why a line was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RefusalReason {
    /// An unquoted shell operator in argv mode.
    Metacharacter,
    /// A quote (or a final backslash) is never closed.
    UnbalancedQuotes,
    /// The executable is on the deny list.
    DeniedExecutable,
    /// The executable is not on the allow list, a command rule or the
    /// predicate refused it, or no shell section lets anything run.
    NotAllowed,
    /// A deny pattern matches the command.
    DeniedPattern,
    /// A runner the checker cannot see into (`sh -c`, `xargs`, `sudo`, …).
    NestedCommand,
    /// Syntax the checker does not read with confidence.
    UnsupportedSyntax,
    /// A redirection target or `cd` directory outside the jail.
    PathEscape,
}

impl RefusalReason {
    /// Every reason, in the order of this enum.
    pub const ALL: [RefusalReason; 8] = [
        RefusalReason::Metacharacter,
        RefusalReason::UnbalancedQuotes,
        RefusalReason::DeniedExecutable,
        RefusalReason::NotAllowed,
        RefusalReason::DeniedPattern,
        RefusalReason::NestedCommand,
        RefusalReason::UnsupportedSyntax,
        RefusalReason::PathEscape,
    ];

    /// The reason's name, as in JSON (`denied-pattern`).
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalReason::Metacharacter => "metacharacter",
            RefusalReason::UnbalancedQuotes => "unbalanced-quotes",
            RefusalReason::DeniedExecutable => "denied-executable",
            RefusalReason::NotAllowed => "not-allowed",
            RefusalReason::DeniedPattern => "denied-pattern",
            RefusalReason::NestedCommand => "nested-command",
            RefusalReason::UnsupportedSyntax => "unsupported-syntax",
            RefusalReason::PathEscape => "path-escape",
        }
    }
}

impl std::fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refused line: why, which command, and a message for the model.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refusal {
    /// Why.
    pub reason: RefusalReason,
    /// The command refused (the whole line for a syntax error).
    pub command: String,
    /// What to do instead, in words a model can act on.
    pub message: String,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "refused ({}): {}", self.reason, self.message)
    }
}

impl std::error::Error for Refusal {}

/// A predicate's decision on one command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PredicateDecision {
    /// The command may run (other rules still apply).
    Allow,
    /// The command is refused (`not-allowed`), optionally saying why.
    Deny(Option<String>),
}

/// What a predicate is told besides the argv.
#[derive(Clone, Debug)]
pub struct CommandCtx<'a> {
    /// The whole line.
    pub line: &'a str,
    /// The wrappers this command runs under (`["timeout", "nice"]`), outermost first.
    pub via: &'a [String],
    /// Which argv words are decided at run time (shown as their source text).
    pub dynamic: &'a [bool],
    /// The workspace's real path.
    pub workspace: &'a Path,
}

/// One command the line may run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedCommand {
    /// Its words; a word decided at run time is its source text (`$HOME`).
    pub argv: Vec<String>,
    /// Indices of the words decided at run time (expansions, globs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dynamic: Vec<usize>,
    /// The commands it starts in turn (a wrapper's command, `find -exec`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runs: Vec<PlannedCommand>,
    /// Files it opens by redirection, resolved (`sh` mode).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub redirects: Vec<PlannedRedirect>,
}

/// A redirection of a planned command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlannedRedirect {
    /// `<`, `>`, `>>` or `<>`, with its fd if one was written.
    pub op: String,
    /// The resolved path.
    pub path: PathBuf,
}

/// An accepted line: every command it may run, in order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinePlan {
    /// How the line is run.
    pub interpreter: Interpreter,
    /// The line as given.
    pub line: String,
    /// The simple commands, in the order the shell meets them.
    pub commands: Vec<PlannedCommand>,
}

/// The verdict on a line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum Verdict {
    /// Every command passed.
    Accepted(LinePlan),
    /// Something did not.
    Refused(Refusal),
}

impl Verdict {
    /// The plan, if accepted.
    pub fn plan(&self) -> Option<&LinePlan> {
        match self {
            Verdict::Accepted(p) => Some(p),
            Verdict::Refused(_) => None,
        }
    }

    /// The refusal, if refused.
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            Verdict::Accepted(_) => None,
            Verdict::Refused(r) => Some(r),
        }
    }
}

/// Check `line` against `policy` (its own interpreter). Runs nothing. The
/// error is a policy that cannot be used (e.g. its workspace is missing);
/// a refused line is a [`Verdict::Refused`].
pub fn check_shell_command(policy: &WorkspacePolicy, line: &str) -> Result<Verdict, PolicyError> {
    Ok(ShellChecker::new(policy)?.check(line))
}

/// A policy compiled for checking lines: build it once, check many.
#[derive(Clone)]
pub struct ShellChecker {
    policy: Arc<WorkspacePolicy>,
    rules: Option<Arc<Rules>>,
    jail: PathJail,
    interpreter: Interpreter,
    cwd: PathBuf,
}

impl ShellChecker {
    /// Compile `policy` (a copy of it: the checker owns what it checks
    /// against, so a long-lived owner can hold both).
    pub fn new(policy: &WorkspacePolicy) -> Result<Self, PolicyError> {
        ShellChecker::shared(Arc::new(policy.clone()))
    }

    /// Compile a policy shared with its other users.
    pub fn shared(policy: Arc<WorkspacePolicy>) -> Result<Self, PolicyError> {
        let jail = PathJail::new(&policy)?;
        let rules = policy.shell.as_ref().map(|s| Arc::new(Rules::new(s)));
        let interpreter = policy.shell.as_ref().map_or(Interpreter::None, |s| s.interpreter);
        let cwd = jail.root().to_path_buf();
        Ok(ShellChecker { policy, rules, jail, interpreter, cwd })
    }

    /// Compile `policy` for a workspace that is not on this disk (a mock
    /// backend's in-memory tree): redirections and `cd` are judged by a
    /// [`PathJail::virtual_root`], lexically, as for a tree without links.
    pub fn virtual_root(policy: &WorkspacePolicy) -> Result<Self, PolicyError> {
        let policy = Arc::new(policy.clone());
        let jail = PathJail::virtual_root(&policy)?;
        let rules = policy.shell.as_ref().map(|s| Arc::new(Rules::new(s)));
        let interpreter = policy.shell.as_ref().map_or(Interpreter::None, |s| s.interpreter);
        let cwd = jail.root().to_path_buf();
        Ok(ShellChecker { policy, rules, jail, interpreter, cwd })
    }

    /// Read lines as `interpreter` instead of the policy's (the CLI's `--sh`).
    pub fn with_interpreter(mut self, interpreter: Interpreter) -> Self {
        self.interpreter = interpreter;
        self
    }

    /// Lines run in `cwd` (relative to the workspace, or absolute; it must
    /// be inside the jail) instead of the workspace root: redirections and
    /// `cd` are resolved from there.
    pub fn with_cwd(mut self, cwd: &Path) -> Result<Self, PolicyError> {
        self.cwd = self.jail.resolve(cwd, PathAccess::Read)?;
        Ok(self)
    }

    /// The policy checked against.
    pub fn policy(&self) -> &WorkspacePolicy {
        &self.policy
    }

    /// How lines are read.
    pub fn interpreter(&self) -> Interpreter {
        self.interpreter
    }

    /// The verdict on an argv that is already split (no shell reads it, so
    /// its words may hold any character): the rules of argv mode.
    pub fn check_argv(&self, argv: &[String]) -> Verdict {
        let line = quote_argv(argv);
        let Some(rules) = &self.rules else {
            return Verdict::Refused(Refusal {
                reason: RefusalReason::NotAllowed,
                command: line,
                message: "this workspace's policy has no [shell] section, so no command may run (the host may add one: [shell] allow = [\"git\", ...])".into(),
            });
        };
        if argv.is_empty() {
            return Verdict::Refused(refuse(RefusalReason::UnsupportedSyntax, "", "an empty command".into()));
        }
        let ctx = rules::LineCtx { line: &line, workspace: self.jail.root(), sh: false };
        let args: Vec<rules::Arg> = argv.iter().cloned().map(rules::Arg::literal).collect();
        match rules.check(&ctx, &args, &[]) {
            Ok(c) => Verdict::Accepted(LinePlan { interpreter: Interpreter::None, line, commands: vec![c] }),
            Err(r) => Verdict::Refused(r),
        }
    }

    /// The jail used for redirections and `cd`.
    pub fn jail(&self) -> &PathJail {
        &self.jail
    }

    /// The verdict on `line`.
    pub fn check(&self, line: &str) -> Verdict {
        match self.check_inner(line) {
            Ok(p) => Verdict::Accepted(p),
            Err(r) => Verdict::Refused(r),
        }
    }

    fn check_inner(&self, line: &str) -> Result<LinePlan, Refusal> {
        let syntax = |m: &str| Refusal {
            reason: RefusalReason::UnsupportedSyntax,
            command: line.chars().take(200).collect(),
            message: m.to_string(),
        };
        if line.len() > MAX_LINE {
            return Err(syntax("the line is longer than 1 MiB"));
        }
        if line.contains('\0') {
            return Err(syntax("the line contains a NUL byte"));
        }
        let Some(rules) = &self.rules else {
            return Err(Refusal {
                reason: RefusalReason::NotAllowed,
                command: line.to_string(),
                message: "this workspace's policy has no [shell] section, so no command may run (the host may add one: [shell] allow = [\"git\", ...])".into(),
            });
        };
        let ctx = rules::LineCtx { line, workspace: self.jail.root(), sh: self.interpreter == Interpreter::Sh };
        let commands = match self.interpreter {
            Interpreter::None => {
                let argv = tokenize_command(line)?;
                if argv.is_empty() {
                    return Err(syntax("an empty command line"));
                }
                let args: Vec<rules::Arg> = argv.into_iter().map(rules::Arg::literal).collect();
                vec![rules.check(&ctx, &args, &[])?]
            }
            Interpreter::Sh => self.check_sh(rules, &ctx)?,
        };
        Ok(LinePlan { interpreter: self.interpreter, line: line.to_string(), commands })
    }

    fn check_sh(&self, rules: &Rules, ctx: &rules::LineCtx<'_>) -> Result<Vec<PlannedCommand>, Refusal> {
        let events = sh::parse(ctx.line)?;
        // Every directory a command may be in: a `cd` adds one (it may also
        // fail, or be skipped by `&&`/`||`), a subshell's stay inside it.
        let start = self.cwd.clone();
        let mut cwds: Vec<Vec<Cwd>> = vec![vec![Cwd { logical: start.clone(), physical: start }]];
        let mut out = Vec::new();
        for ev in events {
            match ev {
                Event::Enter => {
                    let top = cwds.last().cloned().unwrap_or_default();
                    cwds.push(top);
                }
                Event::Leave => {
                    if cwds.len() > 1 {
                        cwds.pop();
                    }
                }
                Event::Command(cmd) => {
                    let here = cwds.last().cloned().unwrap_or_default();
                    let (planned, new_dirs) = self.check_simple(rules, ctx, &cmd, &here)?;
                    if let Some(top) = cwds.last_mut() {
                        for d in new_dirs {
                            if !top.contains(&d) {
                                top.push(d);
                            }
                        }
                        if top.len() > 32 {
                            return Err(refuse(
                                RefusalReason::UnsupportedSyntax,
                                &cmd.source,
                                "more than 32 `cd` directories in one line".into(),
                            ));
                        }
                    }
                    if let Some(p) = planned {
                        out.push(p);
                    }
                }
            }
        }
        Ok(out)
    }

    /// Check one simple command of an `sh` line; returns its plan (none for
    /// a bare assignment or redirection) and the directories a `cd` in it
    /// may lead to.
    fn check_simple(
        &self,
        rules: &Rules,
        ctx: &rules::LineCtx<'_>,
        cmd: &SimpleCommand,
        cwds: &[Cwd],
    ) -> Result<(Option<PlannedCommand>, Vec<Cwd>), Refusal> {
        let src = cmd.source.as_str();
        for (name, value) in &cmd.assigns {
            rules::check_assignment(name, src)?;
            rules::check_locale(name, value.is_literal().then_some(value.text.as_str()), src)?;
        }
        let mut redirects = Vec::new();
        for r in &cmd.redirs {
            let access = match r.op {
                RedirOp::Dup | RedirOp::HereDoc => continue,
                RedirOp::Read => PathAccess::Read,
                RedirOp::Write | RedirOp::Append | RedirOp::ReadWrite => PathAccess::Write,
            };
            if !r.target.is_literal() {
                return Err(refuse(
                    RefusalReason::UnsupportedSyntax,
                    src,
                    format!("the redirection target `{}` is decided at run time: write a literal path", r.target.raw),
                ));
            }
            let physical: Vec<PathBuf> = cwds.iter().map(|c| c.physical.clone()).collect();
            let path = self.judge_path(&r.target.text, access, &physical, src, "redirection target")?;
            let op = match r.op {
                RedirOp::Read => "<",
                RedirOp::Append => ">>",
                RedirOp::ReadWrite => "<>",
                _ => ">",
            };
            let op = match r.fd {
                Some(fd) => format!("{fd}{op}"),
                None => op.to_string(),
            };
            for p in path {
                redirects.push(PlannedRedirect { op: op.clone(), path: p });
            }
        }
        if cmd.words.is_empty() {
            if redirects.is_empty() {
                return Ok((None, Vec::new()));
            }
            return Ok((
                Some(PlannedCommand { argv: Vec::new(), dynamic: Vec::new(), runs: Vec::new(), redirects }),
                Vec::new(),
            ));
        }
        let first = &cmd.words[0];
        if !first.is_literal() {
            return Err(refuse(
                RefusalReason::UnsupportedSyntax,
                src,
                format!("the command name `{}` is decided at run time: write the command literally", first.raw),
            ));
        }
        let args: Vec<rules::Arg> = cmd.words.iter().map(rules::Arg::from_word).collect();
        if first.text == "cd" {
            rules.check_cd_allowed(&args)?;
            let (dir, physical_only) = cd_target(&cmd.words, src)?;
            let new_dirs = self.cd(&dir, physical_only, cwds, src)?;
            let argv = args.iter().map(|a| a.text.clone()).collect();
            return Ok((Some(PlannedCommand { argv, dynamic: Vec::new(), runs: Vec::new(), redirects }), new_dirs));
        }
        let mut planned = rules.check(ctx, &args, &[])?;
        planned.redirects = redirects;
        Ok((Some(planned), Vec::new()))
    }

    /// Where `cd DIR` may lead from each possible directory. The shell's
    /// `cd` is logical by default: it removes `..` against the path it was
    /// given (`l/..` is the directory holding `l`, wherever `l` points),
    /// then changes to that; bash falls back to the physical path when that
    /// fails. Both must be inside the jail.
    fn cd(&self, dir: &str, physical_only: bool, cwds: &[Cwd], src: &str) -> Result<Vec<Cwd>, Refusal> {
        let mut out = Vec::new();
        let escape = |why: String| refuse(RefusalReason::PathEscape, src, format!("cd directory `{dir}`: {why}"));
        for cwd in cwds {
            let physical =
                self.judge_path(dir, PathAccess::Read, std::slice::from_ref(&cwd.physical), src, "cd directory")?;
            for p in physical {
                out.push(Cwd { logical: p.clone(), physical: p });
            }
            if physical_only {
                continue;
            }
            // `..` removed by spelling alone, as a shell's logical `cd` does.
            let logical = crate::path::lexical(&cwd.logical.join(dir));
            if !logical.starts_with(self.jail.root()) {
                return Err(escape(format!(
                    "read as `cd` reads it, it leads to {}, outside the workspace",
                    logical.display()
                )));
            }
            let real = self.jail.resolve(&logical, PathAccess::Read).map_err(|e| match e {
                PolicyError::PathEscape { why, .. } => escape(why),
                e => escape(crate::error_chain(&e)),
            })?;
            out.push(Cwd { logical, physical: real });
        }
        Ok(out)
    }

    /// Resolve `path` from every possible working directory; every result
    /// must be inside the jail.
    fn judge_path(
        &self,
        path: &str,
        access: PathAccess,
        cwds: &[PathBuf],
        src: &str,
        what: &str,
    ) -> Result<Vec<PathBuf>, Refusal> {
        let devices = match access {
            PathAccess::Read => READ_DEVICES,
            PathAccess::Write => WRITE_DEVICES,
        };
        if devices.contains(&path) {
            return Ok(vec![PathBuf::from(path)]);
        }
        let mut out = Vec::new();
        let root = [self.cwd.clone()];
        let cwds = if cwds.is_empty() { &root[..] } else { cwds };
        for cwd in cwds {
            match self.jail.resolve_in(cwd, Path::new(path), access) {
                Ok(p) => {
                    if !out.contains(&p) {
                        out.push(p);
                    }
                }
                Err(PolicyError::PathEscape { why, .. }) => {
                    return Err(refuse(RefusalReason::PathEscape, src, format!("{what} `{path}`: {why}")));
                }
                Err(e) => {
                    return Err(refuse(
                        RefusalReason::PathEscape,
                        src,
                        format!("{what} `{path}`: {}", crate::error_chain(&e)),
                    ));
                }
            }
        }
        Ok(out)
    }
}

/// A directory a command may run in: as the shell spells it (`$PWD`, what
/// a logical `cd ..` works from) and as the kernel sees it (what relative
/// paths are opened from).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Cwd {
    logical: PathBuf,
    physical: PathBuf,
}

/// Device files a redirection may always read. `/dev/stdin` reopens what
/// fd 0 already reads.
const READ_DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/random", "/dev/urandom", "/dev/stdin"];

/// Device files a redirection may always write. Not `/dev/stdout` or
/// `/dev/stderr`: they reopen whatever file fd 1 or 2 points to, for
/// writing (`exec 1< ro-file; echo x > /dev/stdout`); write `>&2` instead.
const WRITE_DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full"];

fn refuse(reason: RefusalReason, command: &str, message: String) -> Refusal {
    Refusal { reason, command: command.to_string(), message }
}

/// The directory of a `cd` command: exactly one literal operand after
/// `-L`/`-P`/`-e` and an optional `--`.
fn cd_target(words: &[Word], src: &str) -> Result<(String, bool), Refusal> {
    let mut rest = &words[1..];
    let mut physical = false;
    while let Some((w, tail)) = rest.split_first() {
        // An option cluster (`-P`, `-LP`, `-eL`): the shell reads every
        // letter; the last of -L and -P wins.
        let cluster = w.text.len() > 1 && w.text.starts_with('-') && w.text[1..].chars().all(|c| "LPe".contains(c));
        if w.is_literal() && cluster {
            if let Some(last) = w.text.chars().rev().find(|c| matches!(c, 'L' | 'P')) {
                physical = last == 'P';
            }
            rest = tail;
        } else {
            break;
        }
    }
    let mut dashdash = false;
    if let Some((w, tail)) = rest.split_first() {
        if w.is_literal() && w.text == "--" {
            rest = tail;
            dashdash = true;
        }
    }
    let [dir] = rest else {
        return Err(refuse(
            RefusalReason::UnsupportedSyntax,
            src,
            "`cd` needs exactly one directory (a bare `cd` goes to $HOME, outside the workspace)".into(),
        ));
    };
    if !dir.is_literal() {
        return Err(refuse(
            RefusalReason::UnsupportedSyntax,
            src,
            format!("the `cd` directory `{}` is decided at run time: write a literal path", dir.raw),
        ));
    }
    if dir.text == "-" || dir.text.is_empty() {
        return Err(refuse(RefusalReason::UnsupportedSyntax, src, "`cd`: name the directory".into()));
    }
    if dir.text.starts_with('-') && !dashdash {
        return Err(refuse(
            RefusalReason::UnsupportedSyntax,
            src,
            format!(
                "`cd {}`: an unknown option (only -L, -P and -e); write `cd -- DIR` for a name starting with `-`",
                dir.text
            ),
        ));
    }
    Ok((dir.text.clone(), physical))
}

#[cfg(test)]
mod tests;
