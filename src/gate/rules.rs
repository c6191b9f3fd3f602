//! The built-in gate: the policy file's ordered `[[gate]]` rules.
//!
//! Rules are tried in order and the first that matches answers. A shell
//! line is judged command by command — every command the policy checker
//! found in it, and every command those start in turn (`find -exec`,
//! wrappers) — and the line gets the meet of the answers: any refusal
//! refuses the line; otherwise `read-only` wins over `grant`, and `grant`
//! over `allow`, and grants intersect by containment. An unmatched shell
//! command is read-only; an unmatched file operation is allowed (the path
//! jail still applies). `docs/approval.md` states the rules exactly.

use std::path::{Path, PathBuf};

use globset::GlobMatcher;

use super::meet::is_clean;
use super::{Action, BoxFuture, Decision, FsAction, Gate, GateError, ShellExec};
use crate::path::{lexical, DenyGlobs};
use crate::policy::gate::{validate, DEFAULT_RULE};
use crate::policy::{GateAnswer, GateKind, GateRule, PlannedCommand, PolicyError, WorkspacePolicy};

/// A fault of the rules gate: a grant path that could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    /// A grant's path could not be examined (permission, I/O error).
    #[error("gate rule {rule}: cannot resolve the grant {}", path.display())]
    Resolve {
        /// The rule.
        rule: String,
        /// The path, as the rule names it (made absolute).
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The compiled `[[gate]]` rules of a policy.
#[derive(Debug)]
pub struct Rules {
    workspace: PathBuf,
    rules: Vec<Compiled>,
}

#[derive(Debug)]
struct Compiled {
    label: String,
    commands: Vec<String>,
    args: Option<GlobMatcher>,
    kinds: Vec<GateKind>,
    path: Option<DenyGlobs>,
    answer: GateAnswer,
    reason: String,
    paths: Vec<PathBuf>,
}

/// Whether a rule's condition holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Match {
    No,
    /// A word decided at run time: the rule cannot tell.
    Unsure,
    Yes,
}

impl Match {
    fn and(self, other: Match) -> Match {
        match (self, other) {
            (Match::No, _) | (_, Match::No) => Match::No,
            (Match::Unsure, _) | (_, Match::Unsure) => Match::Unsure,
            _ => Match::Yes,
        }
    }

    fn or(self, other: Match) -> Match {
        match (self, other) {
            (Match::Yes, _) | (_, Match::Yes) => Match::Yes,
            (Match::Unsure, _) | (_, Match::Unsure) => Match::Unsure,
            _ => Match::No,
        }
    }
}

/// What one rule (or the default) answered for one command or operation.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Answer {
    Allow,
    Grant(Vec<PathBuf>),
    ReadOnly,
    Refuse(String),
}

impl Answer {
    fn rank(&self) -> u8 {
        match self {
            Answer::Allow => 0,
            Answer::Grant(_) => 1,
            Answer::ReadOnly => 2,
            Answer::Refuse(_) => 3,
        }
    }

    /// The meet of two answers: the more restrictive; two grants intersect.
    fn and(self, other: Answer) -> Answer {
        match (self, other) {
            (a @ Answer::Refuse(_), _) => a,
            (_, b @ Answer::Refuse(_)) => b,
            (Answer::Grant(a), Answer::Grant(b)) => Answer::Grant(intersect(&a, &b)),
            (a, b) => {
                if a.rank() >= b.rank() {
                    a
                } else {
                    b
                }
            }
        }
    }
}

/// The paths of `a` within a path of `b`, and those of `b` within one of `a`.
fn intersect(a: &[PathBuf], b: &[PathBuf]) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let both = a.iter().filter(|p| b.iter().any(|q| p.starts_with(q)));
    let both = both.chain(b.iter().filter(|q| a.iter().any(|p| q.starts_with(p))));
    for p in both {
        if !out.contains(p) {
            out.push(p.clone());
        }
    }
    out
}

/// One command of a line, as a rule sees it.
struct Cmd<'a> {
    planned: &'a PlannedCommand,
    cwd: &'a Path,
}

impl Rules {
    /// Compile `rules` for the workspace at `workspace` (its real path:
    /// relative grant paths are taken inside it, and relative `path` globs
    /// match below it). The rules are checked as the policy file is.
    pub fn new(rules: &[GateRule], workspace: &Path) -> Result<Rules, PolicyError> {
        validate(rules)?;
        let mut out = Vec::with_capacity(rules.len());
        for (i, r) in rules.iter().enumerate() {
            let label = r.label(i);
            let args =
                r.args_glob().map_err(|why| PolicyError::Invalid { key: format!("gate[{i}].args"), reason: why })?;
            let path =
                r.path_glob().map_err(|why| PolicyError::Invalid { key: format!("gate[{i}].path"), reason: why })?;
            let paths = r
                .paths
                .iter()
                .map(|p| if p.is_absolute() { p.clone() } else { workspace.join(p) })
                .map(|p| p.components().collect::<PathBuf>())
                .collect();
            out.push(Compiled {
                label,
                commands: r.command.clone(),
                args,
                kinds: r.kind.clone(),
                path,
                answer: r.answer,
                reason: r.reason.clone().unwrap_or_default(),
                paths,
            });
        }
        Ok(Rules { workspace: workspace.to_path_buf(), rules: out })
    }

    /// The decision on `action` (what [`Gate::check`] answers, synchronously).
    pub fn decide(&self, action: &Action) -> Result<Decision, GateError> {
        match action {
            Action::ShellExec(s) => self.decide_shell(s),
            Action::FsWrite(f)
            | Action::FsEdit(f)
            | Action::FsMultiEdit(f)
            | Action::FsRemove(f)
            | Action::FsMkdir(f) => self.decide_fs(action.kind(), f),
        }
    }

    fn decide_shell(&self, s: &ShellExec) -> Result<Decision, GateError> {
        let mut flat = Vec::new();
        for c in &s.commands {
            flatten(c, &mut flat);
        }
        // A line without a command (an assignment alone) is judged as one
        // command no command rule matches.
        let empty = PlannedCommand { argv: Vec::new(), dynamic: Vec::new(), runs: Vec::new(), redirects: Vec::new() };
        if flat.is_empty() {
            flat.push(&empty);
        }
        let mut line: Option<(Answer, Vec<String>)> = None;
        for planned in flat {
            let cmd = Cmd { planned, cwd: &s.cwd };
            let (answer, label) = match self.first_match(|r| r.match_shell(&cmd)) {
                Some((r, unsure)) => {
                    let answer = r.answer(unsure, &describe(planned), self)?;
                    (answer, r.label.clone())
                }
                None => (Answer::ReadOnly, DEFAULT_RULE.to_string()),
            };
            line = Some(match line.take() {
                None => (answer, vec![label]),
                Some((acc, mut labels)) => {
                    let (acc_rank, new_rank) = (acc.rank(), answer.rank());
                    let refused_before = matches!(acc, Answer::Refuse(_));
                    let met = acc.and(answer);
                    // Name the rules that gave the line its answer: the
                    // first refusal, or every rule of the winning kind.
                    if !refused_before {
                        if new_rank > acc_rank {
                            labels = vec![label];
                        } else if new_rank == acc_rank && !labels.contains(&label) {
                            labels.push(label);
                        }
                    }
                    (met, labels)
                }
            });
        }
        let (answer, labels) = line.unwrap_or((Answer::ReadOnly, vec![DEFAULT_RULE.to_string()]));
        Ok(to_decision(answer, labels.join(", ")))
    }

    fn decide_fs(&self, kind: &str, f: &FsAction) -> Result<Decision, GateError> {
        let what = format!("{kind} {}", f.path.display());
        match self.first_match(|r| r.match_fs(kind, &f.resolved, &self.workspace)) {
            Some((r, unsure)) => Ok(to_decision(r.answer(unsure, &what, self)?, r.label.clone())),
            None => Ok(to_decision(Answer::Allow, DEFAULT_RULE.to_string())),
        }
    }

    /// The first rule that answers, and whether it matched without knowing.
    fn first_match(&self, m: impl Fn(&Compiled) -> Match) -> Option<(&Compiled, bool)> {
        self.rules.iter().find_map(|r| match m(r) {
            Match::Yes => Some((r, false)),
            Match::Unsure if r.answer.is_restrictive() => Some((r, true)),
            _ => None,
        })
    }

    /// A grant path, resolved: the real path of its longest existing
    /// ancestor, and the rest as named. A path that does not resolve to a
    /// clean absolute path is kept as named (the meet drops it).
    fn resolve(&self, rule: &str, p: &Path) -> Result<PathBuf, GateError> {
        let mut rest: Vec<&std::ffi::OsStr> = Vec::new();
        let mut cur = p;
        loop {
            match std::fs::canonicalize(cur) {
                Ok(mut real) => {
                    for c in rest.iter().rev() {
                        real.push(c);
                    }
                    return Ok(real);
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => match (cur.parent(), cur.file_name()) {
                    (Some(parent), Some(name)) => {
                        rest.push(name);
                        cur = parent;
                    }
                    _ => return Ok(p.to_path_buf()),
                },
                Err(source) => {
                    let e = RulesError::Resolve { rule: rule.to_string(), path: p.to_path_buf(), source };
                    return Err(GateError(Box::new(e)));
                }
            }
        }
    }
}

fn flatten<'a>(c: &'a PlannedCommand, out: &mut Vec<&'a PlannedCommand>) {
    out.push(c);
    for r in &c.runs {
        flatten(r, out);
    }
}

fn describe(c: &PlannedCommand) -> String {
    if c.argv.is_empty() {
        "a line without a command".into()
    } else {
        format!("`{}`", c.argv.join(" "))
    }
}

fn to_decision(answer: Answer, rule: String) -> Decision {
    let rule = Some(rule);
    match answer {
        Answer::Allow => Decision::Allow { writable: true, write_grants: None, rule },
        Answer::ReadOnly => Decision::Allow { writable: false, write_grants: Some(Vec::new()), rule },
        Answer::Grant(paths) => Decision::Allow { writable: false, write_grants: Some(paths), rule },
        Answer::Refuse(reason) => Decision::Refuse { reason, rule },
    }
}

impl Compiled {
    fn kind_matches(&self, kind: &str) -> bool {
        self.kinds.is_empty() || self.kinds.iter().any(|k| k.as_str() == kind)
    }

    fn match_shell(&self, cmd: &Cmd<'_>) -> Match {
        if !self.kind_matches("shell.exec") || self.path.is_some() {
            return Match::No;
        }
        let c = cmd.planned;
        let mut m = Match::Yes;
        if !self.commands.is_empty() {
            let word = match c.argv.first() {
                None => return Match::No,
                Some(_) if c.dynamic.contains(&0) => Match::Unsure,
                Some(w) => self.commands.iter().fold(Match::No, |acc, name| acc.or(command_matches(name, w, cmd.cwd))),
            };
            m = m.and(word);
        }
        if let Some(glob) = &self.args {
            if c.argv.is_empty() {
                return Match::No;
            }
            let args = if c.dynamic.iter().any(|i| *i >= 1) {
                Match::Unsure
            } else if glob.is_match(c.argv.get(1..).unwrap_or_default().join(" ")) {
                Match::Yes
            } else {
                Match::No
            };
            m = m.and(args);
        }
        m
    }

    fn match_fs(&self, kind: &str, resolved: &Path, workspace: &Path) -> Match {
        if !self.kind_matches(kind) || !self.commands.is_empty() || self.args.is_some() {
            return Match::No;
        }
        match &self.path {
            None => Match::Yes,
            Some(globs) if globs.matching(workspace, resolved).is_some() => Match::Yes,
            Some(_) => Match::No,
        }
    }

    /// What the rule answers for `what`; `unsure`: it matched a word decided
    /// at run time (only a restrictive rule does).
    fn answer(&self, unsure: bool, what: &str, rules: &Rules) -> Result<Answer, GateError> {
        Ok(match self.answer {
            GateAnswer::Allow => Answer::Allow,
            GateAnswer::ReadOnly => Answer::ReadOnly,
            GateAnswer::Grant => {
                let mut out = Vec::new();
                for p in &self.paths {
                    let real = rules.resolve(&self.label, p)?;
                    if !out.contains(&real) {
                        out.push(real);
                    }
                }
                Answer::Grant(out)
            }
            GateAnswer::Refuse => {
                let unsure = if unsure {
                    " (the rule cannot tell whether it applies: a word is decided at run time, or the executable is \
                     named differently; a refusal then applies)"
                } else {
                    ""
                };
                Answer::Refuse(format!("{what} is refused by gate rule {}: {}{unsure}", self.label, self.reason))
            }
        })
    }
}

/// Whether the rule's `name` (a basename, or an absolute path) names the
/// command word `word`, run in `cwd`. A bare word is found on `PATH` at run
/// time, so an absolute rule matches it only unsure (by basename); a
/// basename equal but for case matches unsure too.
fn command_matches(name: &str, word: &str, cwd: &Path) -> Match {
    let base = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
    let word_base = base(word);
    let same_base = if word_base == base(name) {
        Match::Yes
    } else if word_base.eq_ignore_ascii_case(&base(name)) {
        Match::Unsure
    } else {
        return Match::No;
    };
    if !name.contains('/') {
        return same_base;
    }
    if !word.contains('/') {
        return Match::Unsure;
    }
    let full = lexical(&cwd.join(word));
    if is_clean(&full) && full == Path::new(name) {
        same_base
    } else {
        // Another spelling of the same file (`/bin/git` on a merged /usr)
        // cannot be told apart here.
        Match::Unsure
    }
}

impl Gate for Rules {
    fn check<'a>(&'a self, action: &'a Action) -> BoxFuture<'a, Result<Decision, GateError>> {
        Box::pin(std::future::ready(self.decide(action)))
    }
}

impl WorkspacePolicy {
    /// The policy's gate: its `[[gate]]` rules compiled for the workspace
    /// at `workspace_root` (its real path). `None` when the policy has no
    /// rules: the caller's request then passes as asked.
    pub fn gate(&self, workspace_root: &Path) -> Result<Option<Rules>, PolicyError> {
        if self.gate.is_empty() {
            return Ok(None);
        }
        Rules::new(&self.gate, workspace_root).map(Some)
    }
}

#[cfg(test)]
mod tests;
