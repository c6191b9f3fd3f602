//! The rules every command of a line must pass, and the wrappers whose
//! inner command is checked too.

use std::ops::Range;
use std::path::Path;

use super::sh::{is_digits, is_name, Word};
use super::{quote_word, CommandCtx, PlannedCommand, PredicateDecision, Refusal, RefusalReason};
use crate::policy::{is_startup_var, DenyPattern, RuleAction, ShellPolicy};

/// Deepest chain of wrappers followed (`nice timeout env … cmd`).
const MAX_WRAPPERS: usize = 8;

/// Programs that run commands the checker cannot see: a shell reading a
/// string or a script, a string evaluated, a list read from input, another
/// user or root, another root or namespace, a tracer. Refused while deny
/// rules are in force unless `allow` names them.
const RUNNERS: &[&str] = &[
    "sh",
    "bash",
    "dash",
    "zsh",
    "ksh",
    "ksh93",
    "mksh",
    "pdksh",
    "ash",
    "yash",
    "posh",
    "rbash",
    "fish",
    "csh",
    "tcsh",
    "busybox",
    "toybox",
    "eval",
    "source",
    ".",
    "trap",
    "fc",
    "xargs",
    "parallel",
    "sudo",
    "doas",
    "su",
    "runuser",
    "pkexec",
    "sg",
    "newgrp",
    "setsid",
    "setpriv",
    "chroot",
    "unshare",
    "nsenter",
    "systemd-run",
    "stdbuf",
    "ionice",
    "chrt",
    "taskset",
    "flock",
    "watch",
    "script",
    "strace",
    "ltrace",
    "gdb",
    "valgrind",
    "perf",
    "expect",
    "ssh",
    "tmux",
    "screen",
    "dbus-run-session",
    "start-stop-daemon",
    "daemonize",
    "at",
    "batch",
    "firejail",
    "bwrap",
    "proot",
    "fakeroot",
    "fakechroot",
    "catchsegv",
    "unbuffer",
    "compgen",
    "complete",
    "setarch",
    "linux32",
    "linux64",
    "i386",
    "x86_64",
    "prlimit",
    "runcon",
    "choom",
    "uclampset",
    "ssh-agent",
    "numactl",
    "cgexec",
    "capsh",
    "aa-exec",
    "systemd-nspawn",
    "nsjail",
    "chpst",
    "eatmydata",
    "faketime",
    "torsocks",
    "proxychains",
    "xvfb-run",
    "dbus-launch",
    "rlwrap",
    "jobs",
];

/// The builtins of dash and bash (bash 5.2's `enable -a`, dash's
/// `builtin`s).
const SH_BUILTINS: &[&str] = &[
    ".",
    ":",
    "[",
    "alias",
    "bg",
    "bind",
    "break",
    "builtin",
    "caller",
    "cd",
    "command",
    "compgen",
    "complete",
    "compopt",
    "continue",
    "declare",
    "dirs",
    "disown",
    "echo",
    "enable",
    "eval",
    "exec",
    "exit",
    "export",
    "false",
    "fc",
    "fg",
    "getopts",
    "hash",
    "help",
    "history",
    "jobs",
    "kill",
    "let",
    "local",
    "logout",
    "mapfile",
    "popd",
    "printf",
    "pushd",
    "pwd",
    "read",
    "readarray",
    "readonly",
    "return",
    "set",
    "shift",
    "shopt",
    "source",
    "suspend",
    "test",
    "times",
    "trap",
    "true",
    "type",
    "typeset",
    "ulimit",
    "umask",
    "unalias",
    "unset",
    "wait",
    "chdir",
];

/// The builtins whose effect the checker follows (or that have none it
/// needs to): the others are refused in sh mode.
const FOLLOWED_BUILTINS: &[&str] = &[
    ":", "[", "builtin", "cd", "command", "echo", "exec", "exit", "export", "false", "getopts", "kill", "printf",
    "pwd", "read", "readonly", "set", "shift", "test", "times", "true", "type", "ulimit", "umask", "unset", "wait",
];

/// The line being checked.
pub(super) struct LineCtx<'a> {
    pub line: &'a str,
    pub workspace: &'a Path,
    pub sh: bool,
}

/// One word of a command.
#[derive(Clone, Debug)]
pub(super) struct Arg {
    pub text: String,
    pub dynamic: bool,
}

impl Arg {
    pub fn literal(text: String) -> Self {
        Arg { text, dynamic: false }
    }

    pub fn from_word(w: &Word) -> Self {
        Arg { text: w.text.clone(), dynamic: !w.is_literal() }
    }
}

/// How far a pattern matches a command.
enum Match {
    No,
    /// A word decided at run time could complete it.
    Maybe(usize),
    Yes,
}

/// The shell section, ready to check commands.
pub(super) struct Rules {
    sh: ShellPolicy,
    allow: Option<Vec<String>>,
    deny: Vec<String>,
    in_force: bool,
}

impl Rules {
    pub fn new(sh: &ShellPolicy) -> Self {
        let allow = sh.allow.as_ref().map(|a| a.iter().map(|n| n.to_lowercase()).collect());
        let deny = sh.deny.iter().map(|n| n.to_lowercase()).collect();
        let in_force = sh.allow.is_some()
            || !sh.deny.is_empty()
            || !sh.deny_patterns.is_empty()
            || !sh.allow_command.is_empty()
            || sh.predicate.is_some();
        Rules { sh: sh.clone(), allow, deny, in_force }
    }

    /// `cd` needs no allow entry in `sh` mode, but the deny list still applies.
    pub fn check_cd_allowed(&self, args: &[Arg]) -> Result<(), Refusal> {
        if self.deny.iter().any(|d| d == "cd") {
            return Err(self.refusal(
                RefusalReason::DeniedExecutable,
                args,
                "`cd` is denied by this workspace's policy",
            ));
        }
        Ok(())
    }

    fn refusal(&self, reason: RefusalReason, args: &[Arg], message: impl Into<String>) -> Refusal {
        Refusal { reason, command: shown(args), message: message.into() }
    }

    /// Check one command (and what it runs).
    pub fn check(&self, ctx: &LineCtx<'_>, args: &[Arg], via: &[String]) -> Result<PlannedCommand, Refusal> {
        let Some(exe) = args.first() else {
            return Err(self.refusal(RefusalReason::UnsupportedSyntax, args, "a wrapper with no command after it"));
        };
        if via.len() > MAX_WRAPPERS {
            return Err(self.refusal(
                RefusalReason::UnsupportedSyntax,
                args,
                format!("more than {MAX_WRAPPERS} wrappers around one command"),
            ));
        }
        if exe.dynamic {
            return Err(self.refusal(
                RefusalReason::UnsupportedSyntax,
                args,
                format!("the command name `{}` is decided at run time: write the command literally", exe.text),
            ));
        }
        let base = basename(&exe.text);
        let lower = base.to_lowercase();
        if base.is_empty() {
            return Err(self.refusal(RefusalReason::NotAllowed, args, format!("`{}` names no program", exe.text)));
        }
        let shown_cmd = shown(args);
        let final_word = "do not retry it in another form";

        if self.deny.contains(&lower) {
            return Err(self.refusal(
                RefusalReason::DeniedExecutable,
                args,
                format!("`{base}` is denied by this workspace's policy; {final_word}"),
            ));
        }
        let named = self.allow.as_ref().is_some_and(|a| a.contains(&lower) || a.contains(&exe.text.to_lowercase()));
        if let Some(allow) = &self.allow {
            if !named {
                if RUNNERS.contains(&lower.as_str()) {
                    return Err(self.nested(args, base));
                }
                let mut list: Vec<&str> = allow.iter().map(String::as_str).take(24).collect();
                if allow.len() > 24 {
                    list.push("…");
                }
                let list = if list.is_empty() { "nothing".to_string() } else { list.join(", ") };
                return Err(self.refusal(
                    RefusalReason::NotAllowed,
                    args,
                    format!("`{base}` is not on this workspace's allow list (allowed: {list})"),
                ));
            }
        }

        let joined = joined(&lower, args);
        let any_dynamic = args.iter().any(|a| a.dynamic);
        for p in &self.sh.deny_patterns {
            match p {
                DenyPattern::Prefix(words) => match prefix_match(words, args) {
                    Match::Yes => {
                        return Err(self.refusal(
                            RefusalReason::DeniedPattern,
                            args,
                            format!(
                                "`{shown_cmd}` matches the denied pattern `{}`; {final_word}",
                                super::quote_argv(words)
                            ),
                        ))
                    }
                    Match::Maybe(i) => {
                        return Err(self.maybe(
                            RefusalReason::DeniedPattern,
                            args,
                            i,
                            &format!("the denied pattern `{}`", super::quote_argv(words)),
                        ))
                    }
                    Match::No => {}
                },
                DenyPattern::Regex(re) => {
                    if re.is_match(&joined) {
                        return Err(self.refusal(
                            RefusalReason::DeniedPattern,
                            args,
                            format!("`{shown_cmd}` matches the denied pattern /{}/; {final_word}", re.as_str()),
                        ));
                    }
                    if any_dynamic && regex_may_apply(re.as_str(), &lower, args) {
                        let i = args.iter().position(|a| a.dynamic).unwrap_or(0);
                        return Err(self.maybe(
                            RefusalReason::DeniedPattern,
                            args,
                            i,
                            &format!("the denied pattern /{}/", re.as_str()),
                        ));
                    }
                }
            }
        }

        for rule in &self.sh.allow_command {
            let m = match (&rule.argv, &rule.regex) {
                (Some(words), _) => prefix_match(words, args),
                // A regex cannot vouch for words it only saw as `$X`: an
                // allow rule does not match through them.
                (None, Some(_)) if any_dynamic && rule.action == RuleAction::Allow => Match::No,
                (None, Some(re)) if re.is_match(&joined) => Match::Yes,
                (None, Some(re)) if any_dynamic && regex_may_apply(re.as_str(), &lower, args) => {
                    Match::Maybe(args.iter().position(|a| a.dynamic).unwrap_or(0))
                }
                _ => Match::No,
            };
            match (m, rule.action) {
                (Match::No, _) | (Match::Maybe(_), RuleAction::Allow) => continue,
                (Match::Yes, RuleAction::Allow) => break,
                (Match::Yes, RuleAction::Deny) => {
                    let why =
                        rule.reason.clone().unwrap_or_else(|| "a command rule of this workspace refuses it".into());
                    return Err(self.refusal(RefusalReason::NotAllowed, args, format!("`{shown_cmd}`: {why}")));
                }
                (Match::Maybe(i), RuleAction::Deny) => {
                    let why = rule.reason.as_deref().unwrap_or("a command rule of this workspace");
                    return Err(self.maybe(RefusalReason::NotAllowed, args, i, &format!("a command rule ({why})")));
                }
            }
        }

        if let Some(pred) = &self.sh.predicate {
            let texts: Vec<String> = args.iter().map(|a| a.text.clone()).collect();
            let dynamic: Vec<bool> = args.iter().map(|a| a.dynamic).collect();
            let cctx = CommandCtx { line: ctx.line, via, dynamic: &dynamic, workspace: ctx.workspace };
            if let PredicateDecision::Deny(why) = pred(&texts, &cctx) {
                let why = why.unwrap_or_else(|| "this workspace's policy refuses it".into());
                return Err(self.refusal(RefusalReason::NotAllowed, args, format!("`{shown_cmd}`: {why}")));
            }
        }

        if ctx.sh {
            self.sh_builtin(&lower, args)?;
        }
        // A `cd` the checker follows is one at the start of a command; run
        // by a wrapper (`command cd`, `builtin cd`, bash's `time cd`) it
        // would move the shell unseen.
        if !via.is_empty() && matches!(lower.as_str(), "cd" | "pushd" | "popd" | "chdir") {
            return Err(self.refusal(
                RefusalReason::UnsupportedSyntax,
                args,
                format!("`{lower}` run by `{}`: write the `cd` on its own", via.join(" ")),
            ));
        }
        if RUNNERS.contains(&lower.as_str()) && self.in_force && !named {
            return Err(self.nested(args, base));
        }

        let mut runs = Vec::new();
        match wrapped(&lower, args, ctx.sh).map_err(|m| self.refusal(RefusalReason::UnsupportedSyntax, args, m))? {
            Wrapped::Not | Wrapped::Nothing => {}
            Wrapped::Inner(ranges) => {
                let mut via2 = via.to_vec();
                via2.push(lower.clone());
                for r in ranges {
                    // find puts the file found wherever `{}` stands in a
                    // word: those words are decided at run time.
                    let inner: Vec<Arg> = args[r]
                        .iter()
                        .map(|a| Arg {
                            text: a.text.clone(),
                            dynamic: a.dynamic || (lower == "find" && a.text.contains("{}")),
                        })
                        .collect();
                    runs.push(self.check(ctx, &inner, &via2)?);
                }
            }
        }
        Ok(PlannedCommand {
            argv: args.iter().map(|a| a.text.clone()).collect(),
            dynamic: args.iter().enumerate().filter(|(_, a)| a.dynamic).map(|(i, _)| i).collect(),
            runs,
            redirects: Vec::new(),
        })
    }

    fn nested(&self, args: &[Arg], base: &str) -> Refusal {
        self.refusal(
            RefusalReason::NestedCommand,
            args,
            format!(
                "`{base}` runs commands the checker cannot see into, so it is refused under this workspace's rules; \
                 run the inner command directly"
            ),
        )
    }

    fn maybe(&self, reason: RefusalReason, args: &[Arg], i: usize, what: &str) -> Refusal {
        let word = args.get(i).map_or("", |a| a.text.as_str());
        self.refusal(
            reason,
            args,
            format!(
                "`{word}` is decided at run time and could make this command match {what}; write the argument literally"
            ),
        )
    }

    /// `sh` builtins that reshape the line or assign variables.
    fn sh_builtin(&self, lower: &str, args: &[Arg]) -> Result<(), Refusal> {
        let unsupported = |m: String| self.refusal(RefusalReason::UnsupportedSyntax, args, m);
        // A builtin of dash or bash runs as the builtin whatever programs
        // exist: only the ones whose effect the checker knows may run.
        if SH_BUILTINS.contains(&lower) && !FOLLOWED_BUILTINS.contains(&lower) && !RUNNERS.contains(&lower) {
            return Err(unsupported(format!(
                "`{lower}` is a shell builtin whose effect the checker does not follow; run the commands themselves"
            )));
        }
        let rest = &args[1..];
        match lower {
            // bash's `test -v NAME` evaluates an array subscript in NAME, and a
            // word decided at run time may turn out to be `-v` (or split
            // into `-v NAME`).
            "test" | "[" => {
                if rest.iter().any(|a| a.dynamic) {
                    return Err(unsupported(format!(
                        "`{lower}` with a word decided at run time (bash's `{lower} -v` would evaluate it as a \
                         variable name); test a literal path or string"
                    )));
                }
                if rest.iter().any(|a| matches!(a.text.as_str(), "-v" | "-R"))
                    && rest.iter().any(|a| a.text.contains('['))
                {
                    return Err(unsupported(format!(
                        "`{lower} -v` with a `[`: bash evaluates it as an array subscript"
                    )));
                }
            }
            // `printf -v NAME` (also `-vNAME`) assigns a variable.
            "printf" if args.get(1).is_some_and(|a| a.dynamic || a.text.starts_with("-v")) => {
                return Err(unsupported("`printf -v` assigns a variable (bash-only); print the value instead".into()));
            }
            // bash's `printf %n NAME` assigns NAME: the format may not hold a
            // `%n`, nor be decided at run time.
            "printf" => {
                let format = if rest.first().is_some_and(|a| a.text == "--") { rest.get(1) } else { rest.first() };
                if let Some(f) = format {
                    if f.dynamic || printf_assigns(&f.text) {
                        return Err(unsupported(
                            "a `printf` format with `%n` (or decided at run time) assigns a variable in bash".into(),
                        ));
                    }
                }
            }
            // dash's `getopts -- NAME` takes `--` as the option string.
            "getopts" if rest.first().is_some_and(|a| a.dynamic || a.text.starts_with('-')) => {
                return Err(unsupported("`getopts`: the option string may not start with `-`".into()));
            }
            // `set` options that change how later words are read: only a
            // known list passes.
            "set" => set_options(rest).map_err(unsupported)?,
            _ => {}
        }
        // The option letters each takes (none with an argument: bash's
        // `read -aNAME`, `wait -pNAME`, `export -f` are refused), then the
        // variable names.
        let letters = match lower {
            "export" => "np",
            "readonly" => "p",
            "unset" => "v",
            "wait" => "nf",
            "read" => "r",
            "getopts" => "",
            _ => return Ok(()),
        };
        let mut i = 0;
        while let Some(a) = rest.get(i).filter(|a| a.text.starts_with('-') && a.text.len() > 1 && !a.dynamic) {
            i += 1;
            if a.text == "--" {
                break;
            }
            if !a.text[1..].chars().all(|c| letters.contains(c)) {
                return Err(unsupported(format!(
                    "`{lower} {}`: only the options {} are supported here",
                    a.text,
                    if letters.is_empty() { "(none)".to_string() } else { format!("-{letters}") }
                )));
            }
        }
        let mut names = rest.get(i..).unwrap_or_default();
        if lower == "getopts" {
            // `getopts OPTSTRING NAME [ARG…]`: only NAME is a variable.
            names = names.get(1..2).unwrap_or_default();
        }
        for a in names {
            if a.dynamic {
                return Err(unsupported(format!("`{lower}` with a word decided at run time could name any variable")));
            }
            let name = a.text.split('=').next().unwrap_or_default();
            if name.ends_with('+') {
                return Err(unsupported(format!("`{lower} {name}=…`: `+=` appends (bash-only)")));
            }
            if name.contains('[') {
                return Err(unsupported(format!(
                    "`{lower}` with a `[` in a variable name: bash evaluates it as an array subscript"
                )));
            }
            if !is_name(name) && lower != "wait" {
                return Err(unsupported(format!("`{lower}`: `{name}` is not a variable name")));
            }
            if is_name(name) {
                check_assignment(name, &shown(args))?;
                let value = (lower == "export" || lower == "readonly")
                    .then(|| a.text.split_once('=').map(|(_, v)| v))
                    .flatten();
                if value.is_some() || !matches!(lower, "export" | "readonly" | "unset") {
                    check_locale(name, value, &shown(args))?;
                }
            }
        }
        Ok(())
    }
}

/// A shell reads the rest of the line in the character set of its locale:
/// in a legacy multibyte one (GBK, Big5, Shift JIS) a byte the checker
/// reads as `\` or `` ` `` can be part of a character. A line may set the
/// shell's locale only to C, POSIX or a UTF-8 one (`value` None: decided
/// at run time, e.g. by `read`).
pub(super) fn check_locale(name: &str, value: Option<&str>, src: &str) -> Result<(), Refusal> {
    if !crate::policy::is_locale_var(name) || value.is_some_and(crate::policy::is_safe_locale) {
        return Ok(());
    }
    Err(Refusal {
        reason: RefusalReason::UnsupportedSyntax,
        command: src.to_string(),
        message: format!("`{name}` may be set only to C, POSIX or a UTF-8 locale, written literally"),
    })
}

/// The `set` options a line may use: they change error handling and
/// tracing, not how words are read (`-k`, `-H`, `-o posix` … do).
fn set_options(rest: &[Arg]) -> Result<(), String> {
    const FLAGS: &str = "euxfvaCn";
    const NAMED: &[&str] =
        &["errexit", "nounset", "xtrace", "noglob", "verbose", "allexport", "noclobber", "noexec", "pipefail"];
    let mut i = 0;
    while let Some(a) = rest.get(i) {
        let t = a.text.as_str();
        if a.dynamic {
            return Err(format!("`set {t}`: a word decided at run time could be any option"));
        }
        if t == "--" || t == "-" || !(t.starts_with('-') || t.starts_with('+')) {
            // Positional parameters follow.
            return Ok(());
        }
        if t == "-o" || t == "+o" {
            match rest.get(i + 1) {
                Some(n) if !n.dynamic && NAMED.contains(&n.text.as_str()) => i += 2,
                Some(n) => return Err(format!("`set {t} {}`: only {} are supported", n.text, NAMED.join(", "))),
                None => return Ok(()),
            }
            continue;
        }
        if !t[1..].chars().all(|c| FLAGS.contains(c)) {
            return Err(format!(
                "`set {t}`: only the options -{} and -o {} are supported (others change how later words are read)",
                FLAGS,
                NAMED.join("|")
            ));
        }
        i += 1;
    }
    Ok(())
}

/// Variables a line may not assign: they change what the rest of the line
/// (or a shell it starts) runs.
pub(super) fn check_assignment(name: &str, src: &str) -> Result<(), Refusal> {
    let message = if name == "PATH" {
        "assigning `PATH` changes which programs the checked names run; set PATH in the policy \
         (shell.env or shell.inherit_env) instead"
            .to_string()
    } else if crate::policy::BASH_INTEGER_VARS.contains(&name) {
        format!("bash evaluates an assignment to `{name}` as arithmetic (where `a[$(cmd)]` runs cmd), so a line may not assign it")
    } else if is_startup_var(name) {
        format!("`{name}` changes how a shell or the loader reads what follows, so a line may not assign it")
    } else {
        return Ok(());
    };
    Err(Refusal { reason: RefusalReason::UnsupportedSyntax, command: src.to_string(), message })
}

fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

fn shown(args: &[Arg]) -> String {
    args.iter().map(|a| if a.dynamic { a.text.clone() } else { quote_word(&a.text) }).collect::<Vec<_>>().join(" ")
}

fn joined(lower_base: &str, args: &[Arg]) -> String {
    let mut s = lower_base.to_string();
    for a in &args[1..] {
        s.push(' ');
        s.push_str(&a.text);
    }
    s
}

fn prefix_match(words: &[String], args: &[Arg]) -> Match {
    for (i, w) in words.iter().enumerate() {
        let Some(a) = args.get(i) else { return Match::No };
        if i == 0 {
            if !basename(&a.text).eq_ignore_ascii_case(basename(w)) {
                return Match::No;
            }
            continue;
        }
        if a.dynamic {
            return Match::Maybe(i);
        }
        if a.text != *w {
            return Match::No;
        }
    }
    Match::Yes
}

/// Whether a regex over the words joined by spaces might match some
/// command that begins with the literal words of `args` (up to the first
/// word decided at run time). False only when the regex is anchored (`^`)
/// on literal text that the command's literal start already contradicts.
fn regex_may_apply(re: &str, base: &str, args: &[Arg]) -> bool {
    let Some(rest) = re.strip_prefix('^') else { return true };
    let lit: String = rest.chars().take_while(|c| !"\\.+*?()|[]{}^$".contains(*c)).collect();
    // A quantifier applies to the character before it: drop that one.
    let lit: String = match rest[lit.len()..].chars().next() {
        Some('*' | '?' | '{') => lit.chars().take(lit.chars().count().saturating_sub(1)).collect(),
        _ => lit,
    };
    let mut known = base.to_string();
    for a in &args[1..] {
        known.push(' ');
        if a.dynamic {
            break;
        }
        known.push_str(&a.text);
    }
    lit.chars().zip(known.chars()).all(|(a, b)| a == b)
}

/// What a wrapper runs.
enum Wrapped {
    /// Not a wrapper.
    Not,
    /// A wrapper that runs nothing here (`command -v`, `env` alone).
    Nothing,
    /// The commands it runs: ranges of the argv.
    Inner(Vec<Range<usize>>),
}

/// Find the command a wrapper runs. An error is the reason the checker
/// cannot tell.
/// How a wrapper reads its options (GNU getopt, no abbreviations: an
/// option not listed here is refused, since the checker could not tell
/// where the command starts).
struct Opts {
    /// Options that take no argument.
    flags: &'static [&'static str],
    /// Options with an argument: apart (`-s KILL`, `--signal KILL`) or
    /// attached (`-sKILL`, `--signal=KILL`).
    with_arg: &'static [&'static str],
    /// Long options whose argument is optional and only attached (`--block-signal[=SIG]`).
    optional_arg: &'static [&'static str],
    /// Short flags that may be bundled (`-iv`).
    bundle: &'static str,
    /// `-N` (digits) is an option (`nice -10`).
    numeric: bool,
}

const ENV: Opts = Opts {
    flags: &["-i", "--ignore-environment", "-0", "--null", "-v", "--debug", "-", "--list-signal-handling"],
    with_arg: &["-u", "--unset", "-C", "--chdir"],
    optional_arg: &["--block-signal", "--default-signal", "--ignore-signal"],
    bundle: "i0v",
    numeric: false,
};
const TIME: Opts = Opts {
    flags: &["-p", "-v", "-a", "-q", "--verbose", "--portability", "--append", "--quiet"],
    with_arg: &["-f", "-o", "--format", "--output"],
    optional_arg: &[],
    bundle: "pvaq",
    numeric: false,
};
const TIMEOUT: Opts = Opts {
    flags: &["--preserve-status", "--foreground", "-v", "--verbose"],
    with_arg: &["-s", "--signal", "-k", "--kill-after"],
    optional_arg: &[],
    bundle: "v",
    numeric: false,
};
const NICE: Opts = Opts { flags: &[], with_arg: &["-n", "--adjustment"], optional_arg: &[], bundle: "", numeric: true };
const NOHUP: Opts = Opts { flags: &[], with_arg: &[], optional_arg: &[], bundle: "", numeric: false };
const COMMAND: Opts =
    Opts { flags: &["-p", "-v", "-V"], with_arg: &[], optional_arg: &[], bundle: "pvV", numeric: false };
const EXEC: Opts = Opts { flags: &["-c", "-l"], with_arg: &["-a"], optional_arg: &[], bundle: "cl", numeric: false };
const BUILTIN: Opts = Opts { flags: &[], with_arg: &[], optional_arg: &[], bundle: "", numeric: false };

/// The index of the first operand after the options of `args[0]`.
fn skip_options(lower: &str, args: &[Arg], o: &Opts) -> Result<usize, String> {
    let mut i = 1;
    while let Some(a) = args.get(i).map(|a| a.text.as_str()) {
        let attached = |opt: &&str| {
            if opt.starts_with("--") {
                a.strip_prefix(*opt).is_some_and(|r| r.starts_with('='))
            } else {
                a.len() > opt.len() && a.starts_with(*opt)
            }
        };
        if a == "--" {
            return Ok(i + 1);
        }
        if o.flags.contains(&a) {
            i += 1;
            continue;
        }
        if !a.starts_with('-') || a == "-" {
            break;
        }
        if o.with_arg.contains(&a) {
            i += 2;
            continue;
        }
        let one_word = o.with_arg.iter().any(attached)
            || o.optional_arg.contains(&a)
            || o.optional_arg.iter().any(|opt| a.strip_prefix(*opt).is_some_and(|r| r.starts_with('=')))
            || (!a.starts_with("--") && !o.bundle.is_empty() && a[1..].chars().all(|c| o.bundle.contains(c)))
            || (o.numeric && is_digits(a[1..].trim_start_matches('-')));
        if !one_word {
            return Err(format!("`{lower}`: unknown option `{a}`, so the command it runs cannot be known"));
        }
        i += 1;
    }
    Ok(i)
}

fn wrapped(lower: &str, args: &[Arg], sh: bool) -> Result<Wrapped, String> {
    let n = args.len();
    let at = |i: usize| args.get(i).map(|a| a.text.as_str());
    let inner_from = |i: usize| -> Result<Wrapped, String> {
        if let Some(d) = args[..i.min(n)].iter().position(|a| a.dynamic) {
            return Err(format!(
                "`{}`: `{}` is decided at run time, so the command it runs cannot be known",
                lower, args[d].text
            ));
        }
        Ok(if i < n { Wrapped::Inner(std::iter::once(i..n).collect()) } else { Wrapped::Nothing })
    };
    match lower {
        "env" => {
            let options = args[1..].iter().take_while(|a| a.text.starts_with('-') && a.text != "--");
            if options.into_iter().any(|a| a.text.starts_with("-S") || a.text.starts_with("--split-string")) {
                return Err(env_s());
            }
            let mut i = skip_options(lower, args, &ENV)?;
            while let Some(a) = args.get(i) {
                let Some((name, _)) = a.text.split_once('=') else { break };
                if a.dynamic {
                    return Err(format!("`env`: `{}` is decided at run time", a.text));
                }
                if !name.is_empty() {
                    check_assignment(name, a.text.as_str()).map_err(|r| r.message)?;
                }
                i += 1;
            }
            inner_from(i)
        }
        // bash's `time` keyword takes only `-p`; GNU time's options would be
        // run as a command there.
        "time"
            if sh
                && (at(1).is_some_and(|a| a.starts_with('-') && a != "-p")
                    || (at(1) == Some("-p") && at(2).is_some_and(|a| a.starts_with('-')))) =>
        {
            Err("in sh mode `time` takes only `-p` (bash's `time` keyword knows no other option)".into())
        }
        // bash's `time` is followed by a pipeline, in which `!`, `[[`,
        // `coproc`, `{` … keep their meaning as reserved words, and a
        // `NAME=value` word is an assignment.
        "time"
            if sh
                && args.get(if at(1) == Some("-p") { 2 } else { 1 }).is_some_and(|a| {
                    super::sh::RESERVED.contains(&a.text.as_str())
                        || a.text == "time"
                        || a.text.split_once('=').is_some_and(|(n, _)| is_name(n.trim_end_matches('+')))
                }) =>
        {
            Err("in sh mode `time` must be followed by a plain command (bash reads `!`, `[[`, `{`, `NAME=value` … \
                 after it as syntax)"
                .into())
        }
        // dash's `exec` takes no options: it would run `-a` as the command.
        "exec" if sh && at(1).is_some_and(|a| a.starts_with('-')) => {
            Err("in sh mode `exec` takes no options (sh's `exec` would run the option as a command)".into())
        }
        "time" => inner_from(skip_options(lower, args, &TIME)?),
        "nice" => inner_from(skip_options(lower, args, &NICE)?),
        "nohup" => inner_from(skip_options(lower, args, &NOHUP)?),
        "builtin" => inner_from(skip_options(lower, args, &BUILTIN)?),
        "exec" => inner_from(skip_options(lower, args, &EXEC)?),
        "timeout" => {
            // The duration, then the command.
            let i = skip_options(lower, args, &TIMEOUT)?;
            match args.get(i) {
                None => Err("`timeout` needs a duration and a command".into()),
                Some(d) if d.dynamic => Err(format!("`timeout`: `{}` is decided at run time", d.text)),
                Some(_) if i + 1 >= n => Err("`timeout` needs a command after the duration".into()),
                Some(_) => inner_from(i + 1),
            }
        }
        "command" => {
            let i = skip_options(lower, args, &COMMAND)?;
            if args[1..i].iter().any(|a| a.text != "--" && a.text.contains(['v', 'V'])) {
                // `command -v NAME` looks NAME up and runs nothing.
                return inner_from(n).map(|_| Wrapped::Nothing);
            }
            inner_from(i)
        }
        "find" => {
            if let Some(d) = args.iter().position(|a| a.dynamic) {
                return Err(format!(
                    "`find`: `{}` is decided at run time and could add `-exec`; write the arguments literally",
                    args[d].text
                ));
            }
            let mut ranges = Vec::new();
            let mut i = 1;
            while i < n {
                let a = args[i].text.as_str();
                if matches!(a, "-exec" | "-execdir" | "-ok" | "-okdir") {
                    let start = i + 1;
                    let mut j = start;
                    let mut end = None;
                    while j < n {
                        let t = args[j].text.as_str();
                        if t == ";" || (t == "+" && j > start && args[j - 1].text == "{}") {
                            end = Some(j);
                            break;
                        }
                        j += 1;
                    }
                    let Some(end) = end else {
                        return Err(format!("`find {a}` is not ended by `;` or `{{}} +`"));
                    };
                    if end == start {
                        return Err(format!("`find {a}` has no command"));
                    }
                    if args[start].text.contains("{}") {
                        return Err(format!(
                            "`find {a} {}`: the command would be the file found, decided at run time",
                            args[start].text
                        ));
                    }
                    ranges.push(start..end);
                    i = end + 1;
                } else {
                    i += 1;
                }
            }
            Ok(if ranges.is_empty() { Wrapped::Not } else { Wrapped::Inner(ranges) })
        }
        _ => Ok(Wrapped::Not),
    }
}

/// Whether a printf format holds a `%n` conversion (flags, width and
/// precision allowed between, `%%` skipped).
fn printf_assigns(format: &str) -> bool {
    let b = format.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            i += 1;
            if b.get(i) == Some(&b'%') {
                i += 1;
                continue;
            }
            while b.get(i).is_some_and(|c| b"#-+ 0'123456789.*".contains(c)) {
                i += 1;
            }
            if b.get(i) == Some(&b'n') {
                return true;
            }
        } else {
            i += 1;
        }
    }
    false
}

fn env_s() -> String {
    "`env -S` splits a string into a command the checker does not parse; pass the words separately".into()
}
