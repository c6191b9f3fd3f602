//! `sh` mode: parse a line of POSIX shell into the simple commands it will
//! run, refusing what cannot be read with confidence.
//!
//! The parser reads the subset of the POSIX grammar whose meaning is the
//! same in dash and bash: lists (`;`, newline), `&&`, `||`, pipelines
//! (`|`, `!`), subshells `( … )`, simple commands with `NAME=value`
//! prefixes, words with quotes and backslashes, parameter expansions
//! `$NAME` / `${NAME}`, command substitutions `$( … )` and `` `…` ``,
//! redirections (`<`, `>`, `>>`, `>|`, `<>`, `N>&M`, `N<&M`, `N>&-`) and
//! here-documents. Everything else is `unsupported-syntax`: compound
//! commands, functions, arithmetic, brace expansion, other `${…}` forms,
//! bash-only syntax (`&>`, `<<<`, `<( )`, `$'…'`, `[[`, `((`), and `&`.
//!
//! The output is a flat list of events in execution order: each simple
//! command (its words, assignments and redirections), and the entry and
//! exit of each subshell (a `( … )` or a command substitution), which the
//! checker needs to follow `cd`.

use super::{Refusal, RefusalReason};

/// Deepest nesting of subshells and substitutions.
const MAX_DEPTH: usize = 64;

/// One word after quote removal.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Word {
    /// The value after quote removal; parts decided at run time appear as
    /// their source text (`$HOME`, `$(date)`).
    pub text: String,
    /// The word as written.
    pub raw: String,
    /// Some part is decided at run time (an expansion or a substitution).
    pub dynamic: bool,
    /// An unquoted glob character (`*`, `?`, `[…]`) or a leading `~`: the
    /// shell may turn it into other words.
    pub pattern: bool,
    /// Some part was quoted.
    pub quoted: bool,
    /// Length of an unquoted `NAME=` prefix (an assignment when the word
    /// comes before the command name).
    pub assign: Option<usize>,
}

impl Word {
    /// Whether the shell passes this word through unchanged.
    pub fn is_literal(&self) -> bool {
        !self.dynamic && !self.pattern
    }
}

/// A redirection's operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedirOp {
    /// `<`
    Read,
    /// `>`, `>|`
    Write,
    /// `>>`
    Append,
    /// `<>`
    ReadWrite,
    /// `N>&M`, `N<&M`, `N>&-`: no file.
    Dup,
    /// `<<`, `<<-`: the body is in the line.
    HereDoc,
}

/// One redirection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redir {
    /// The fd number written before the operator, if any.
    pub fd: Option<u32>,
    /// The operator.
    pub op: RedirOp,
    /// The target word (the file, the fd, or the here-document delimiter).
    pub target: Word,
}

/// One simple command.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SimpleCommand {
    /// `NAME=value` prefixes: the name and the value.
    pub assigns: Vec<(String, Word)>,
    /// The command name and its arguments.
    pub words: Vec<Word>,
    /// Redirections, in order.
    pub redirs: Vec<Redir>,
    /// The command as written (for messages).
    pub source: String,
}

/// What the line does, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A simple command runs.
    Command(SimpleCommand),
    /// A subshell starts (`(`, `$(`, `` ` ``): a `cd` inside stays inside.
    Enter,
    /// The subshell ends.
    Leave,
}

/// Parse `line`.
pub fn parse(line: &str) -> Result<Vec<Event>, Refusal> {
    let mut p = Parser {
        s: line.as_bytes(),
        src: line,
        pos: 0,
        events: Vec::new(),
        heredocs: Vec::new(),
        outer_pending: 0,
        depth: 0,
    };
    p.list(None)?;
    if !p.heredocs.is_empty() {
        return Err(p.unsupported("a here-document is missing its end line"));
    }
    Ok(p.events)
}

/// Where a backquoted substitution stands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Quoting {
    None,
    Double,
    HereDoc,
}

struct PendingHeredoc {
    delim: String,
    strip_tabs: bool,
    expand: bool,
}

struct Parser<'a> {
    s: &'a [u8],
    src: &'a str,
    pos: usize,
    events: Vec<Event>,
    heredocs: Vec<PendingHeredoc>,
    /// Here-documents opened before the `(`, `$(` or `` ` `` being read,
    /// whose bodies are still to come: a newline inside would be read
    /// differently by dash and bash, so it is refused.
    outer_pending: usize,
    depth: usize,
}

/// Words that are syntax, not commands, in command position (in dash or bash).
pub(super) const RESERVED: &[&str] = &[
    "if", "then", "else", "elif", "fi", "do", "done", "case", "esac", "while", "until", "for", "in", "{", "}", "!",
    "[[", "]]", "function", "select", "coproc",
];

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn peek_at(&self, n: usize) -> Option<u8> {
        self.s.get(self.pos + n).copied()
    }

    fn refuse(&self, reason: RefusalReason, message: impl Into<String>) -> Refusal {
        Refusal { reason, command: self.src.to_string(), message: message.into() }
    }

    fn unsupported(&self, message: impl Into<String>) -> Refusal {
        self.refuse(RefusalReason::UnsupportedSyntax, message)
    }

    /// Skip blanks, line continuations that follow a blank, and a comment.
    ///
    /// A shell removes every backslash-newline before it reads tokens, so
    /// one elsewhere can join `$` and `(` into `$(`, `(` and `(` into `((`,
    /// or `i` and `f` into `if`. Only one after a blank is harmless (it
    /// cannot join anything); the others are refused where they occur.
    fn blanks(&mut self) {
        loop {
            match self.peek() {
                Some(b' ' | b'\t') => self.pos += 1,
                Some(b'\\')
                    if self.peek_at(1) == Some(b'\n')
                        && self.pos > 0
                        && matches!(self.s[self.pos - 1], b' ' | b'\t') =>
                {
                    self.pos += 2
                }
                Some(b'#') => {
                    while self.peek().is_some_and(|c| c != b'\n') {
                        self.pos += 1;
                    }
                }
                _ => return,
            }
        }
    }

    /// Skip blanks and newlines (reading any here-document bodies due).
    fn linebreaks(&mut self) -> Result<(), Refusal> {
        loop {
            self.blanks();
            if self.peek() == Some(b'\n') {
                if self.outer_pending > 0 {
                    return Err(self.unsupported(
                        "a newline inside `( )`, `$( )` or `` ` ` `` while a here-document opened before it is \
                         still waiting for its body: end the here-document first",
                    ));
                }
                self.pos += 1;
                self.heredoc_bodies()?;
            } else {
                return Ok(());
            }
        }
    }

    /// Read a nested list up to `)`, keeping the here-documents pending
    /// outside apart from the ones opened inside (which must end inside).
    fn nested_list(&mut self) -> Result<(), Refusal> {
        let saved = std::mem::take(&mut self.heredocs);
        self.outer_pending += saved.len();
        let r = self.list(Some(b')'));
        self.outer_pending -= saved.len();
        r?;
        if !self.heredocs.is_empty() {
            return Err(self.unsupported("a here-document opened inside `( )` or `$( )` must end inside it"));
        }
        self.heredocs = saved;
        Ok(())
    }

    fn enter(&mut self) -> Result<(), Refusal> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.unsupported(format!("nested more than {MAX_DEPTH} levels deep")));
        }
        self.events.push(Event::Enter);
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
        self.events.push(Event::Leave);
    }

    /// list := and_or ((';' | newline) and_or)*, up to `end` or the end.
    fn list(&mut self, end: Option<u8>) -> Result<(), Refusal> {
        let mut any = false;
        loop {
            self.linebreaks()?;
            match self.peek() {
                None => {
                    return match end {
                        Some(e) => Err(self.unsupported(format!("a `(` is never closed by `{}`", e as char))),
                        None if any => Ok(()),
                        None => Err(self.unsupported("an empty command line")),
                    };
                }
                Some(c) if Some(c) == end => {
                    return if any { Ok(()) } else { Err(self.unsupported("an empty `( )`")) };
                }
                _ => {}
            }
            self.and_or()?;
            any = true;
            self.blanks();
            match self.peek() {
                Some(b';') if self.peek_at(1) == Some(b';') => return Err(self.unsupported("`;;` outside `case`")),
                Some(b';') if self.peek_at(1) == Some(b'&') => return Err(self.unsupported("`;&` is bash-only")),
                Some(b';') => self.pos += 1,
                Some(b'\n') => {}
                Some(b'&') if self.peek_at(1) == Some(b'>') => {
                    return Err(self.unsupported("`&>` is a bash-only redirection: write `>FILE 2>&1`"))
                }
                Some(b'&') => {
                    return Err(self.unsupported(
                        "`&` (background) is not supported: run it in the foreground; background runs go through \
                         the workspace's background jobs, not `&`",
                    ))
                }
                Some(c) if Some(c) == end => {}
                None => {}
                Some(b')') => return Err(self.unsupported("a `)` with no `(`")),
                Some(c) => return Err(self.unsupported(format!("unexpected `{}`", c as char))),
            }
        }
    }

    fn and_or(&mut self) -> Result<(), Refusal> {
        self.pipeline()?;
        loop {
            self.blanks();
            match (self.peek(), self.peek_at(1)) {
                (Some(b'&'), Some(b'&')) | (Some(b'|'), Some(b'|')) => {
                    self.pos += 2;
                    self.linebreaks()?;
                    self.pipeline()?;
                }
                _ => return Ok(()),
            }
        }
    }

    fn pipeline(&mut self) -> Result<(), Refusal> {
        self.blanks();
        if self.peek() == Some(b'!') && matches!(self.peek_at(1), Some(b' ' | b'\t')) {
            self.pos += 1;
            self.blanks();
        }
        self.command()?;
        loop {
            self.blanks();
            match (self.peek(), self.peek_at(1)) {
                (Some(b'|'), Some(b'&')) => return Err(self.unsupported("`|&` is bash-only: write `2>&1 |`")),
                (Some(b'|'), Some(b'|')) => return Ok(()),
                (Some(b'|'), _) => {
                    self.pos += 1;
                    self.linebreaks()?;
                    self.command()?;
                }
                _ => return Ok(()),
            }
        }
    }

    fn command(&mut self) -> Result<(), Refusal> {
        self.blanks();
        if self.peek() == Some(b'(') {
            if self.peek_at(1) == Some(b'(') {
                return Err(self.unsupported("`((` (arithmetic, or nested subshells read differently by shells)"));
            }
            let start = self.pos;
            self.pos += 1;
            self.enter()?;
            self.nested_list()?;
            self.pos += 1;
            self.leave();
            // Redirections of the subshell itself.
            let mut cmd = SimpleCommand::default();
            loop {
                self.blanks();
                if !self.redirection(&mut cmd)? {
                    break;
                }
            }
            if !cmd.redirs.is_empty() {
                cmd.source = self.src[start..self.pos].to_string();
                self.events.push(Event::Command(cmd));
            }
            return self.after_command();
        }
        self.simple_command()
    }

    /// What may follow a command: an operator, a `)`, a newline or the end.
    fn after_command(&mut self) -> Result<(), Refusal> {
        self.blanks();
        match self.peek() {
            None | Some(b';' | b'&' | b'|' | b'\n' | b')') => Ok(()),
            Some(_) => Err(self.unsupported("a command after `( … )` without an operator")),
        }
    }

    fn simple_command(&mut self) -> Result<(), Refusal> {
        let start = self.pos;
        let mut cmd = SimpleCommand::default();
        loop {
            self.blanks();
            match self.peek() {
                None | Some(b';' | b'&' | b'|' | b'\n' | b')') => break,
                Some(b'(') => {
                    return Err(if cmd.words.len() == 1 {
                        self.unsupported("function definitions are not supported")
                    } else {
                        self.unsupported("an unexpected `(`: quote it if it is part of an argument")
                    });
                }
                _ => {}
            }
            if self.redirection(&mut cmd)? {
                continue;
            }
            let w = self.word(false)?;
            if cmd.words.is_empty() {
                if let Some(n) = w.assign {
                    let name = w.raw[..n].to_string();
                    if w.raw.as_bytes().get(n + 1) == Some(&b'(') {
                        return Err(self.unsupported("array assignments are bash-only"));
                    }
                    let value = Word {
                        text: w.text.get(n + 1..).unwrap_or_default().to_string(),
                        raw: w.raw.get(n + 1..).unwrap_or_default().to_string(),
                        ..w
                    };
                    cmd.assigns.push((name, value));
                    continue;
                }
                if !w.quoted && RESERVED.contains(&w.raw.as_str()) {
                    return Err(self.unsupported(format!(
                        "`{}`: compound commands (if, for, while, case, {{ … }}) and functions are not supported; \
                         run the commands one by one",
                        w.raw
                    )));
                }
                if w.raw.ends_with("+=") || (w.raw.contains("+=") && w.raw.split("+=").next().is_some_and(is_name)) {
                    return Err(self.unsupported("`+=` assignments are bash-only"));
                }
            }
            if w.raw.starts_with('{')
                && w.raw.ends_with('}')
                && is_name(&w.raw[1..w.raw.len() - 1])
                && matches!(self.peek(), Some(b'<' | b'>'))
            {
                return Err(self.unsupported(format!("`{}>`: named file descriptors are bash-only", w.raw)));
            }
            cmd.words.push(w);
        }
        if cmd.words.is_empty() && cmd.assigns.is_empty() && cmd.redirs.is_empty() {
            return Err(match self.peek() {
                Some(c) => self.unsupported(format!("`{}` where a command was expected", c as char)),
                None => self.unsupported("a command is missing at the end of the line"),
            });
        }
        cmd.source = self.src[start..self.pos].trim().to_string();
        self.events.push(Event::Command(cmd));
        Ok(())
    }

    /// Parse a redirection at the cursor into `cmd`; false if there is none.
    fn redirection(&mut self, cmd: &mut SimpleCommand) -> Result<bool, Refusal> {
        let start = self.pos;
        let mut i = self.pos;
        while self.s.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        let Some(op_c) = self.s.get(i).copied().filter(|c| matches!(c, b'<' | b'>')) else {
            return Ok(false);
        };
        // `{name}>` allocates an fd in bash and is a word in dash.
        // One digit only: dash reads `10>` as the word `10` and `>`, bash
        // and busybox read a number past 2^31 so too.
        let fd = match &self.s[start..i] {
            [] => None,
            [d] => Some(u32::from(d - b'0')),
            _ => {
                return Err(self.unsupported(format!(
                    "`{}>`: an fd number of more than one digit is read as a word by some shells",
                    &self.src[start..i]
                )))
            }
        };
        self.pos = i + 1;
        let next = self.peek();
        let op = match (op_c, next) {
            (b'<', Some(b'<')) => {
                self.pos += 1;
                if self.peek() == Some(b'<') {
                    return Err(self.unsupported("`<<<` here-strings are bash-only: use a here-document"));
                }
                let strip_tabs = self.peek() == Some(b'-');
                if strip_tabs {
                    self.pos += 1;
                }
                self.blanks();
                let target = self.word(true)?;
                if target.raw.is_empty() {
                    return Err(self.unsupported("a here-document needs a delimiter"));
                }
                if target.raw.contains(['$', '`']) {
                    return Err(self.unsupported("a here-document delimiter with `$` or `` ` ``"));
                }
                self.heredocs.push(PendingHeredoc { delim: target.text.clone(), strip_tabs, expand: !target.quoted });
                cmd.redirs.push(Redir { fd, op: RedirOp::HereDoc, target });
                return Ok(true);
            }
            (b'<', Some(b'>')) => {
                self.pos += 1;
                RedirOp::ReadWrite
            }
            (b'<', Some(b'&')) | (b'>', Some(b'&')) => {
                self.pos += 1;
                RedirOp::Dup
            }
            (b'>', Some(b'>')) => {
                self.pos += 1;
                RedirOp::Append
            }
            (b'>', Some(b'|')) => {
                self.pos += 1;
                RedirOp::Write
            }
            (_, Some(b'(')) => {
                return Err(self.unsupported("process substitution `<( )` / `>( )` is bash-only"));
            }
            (b'<', _) => RedirOp::Read,
            _ => RedirOp::Write,
        };
        self.blanks();
        if matches!(self.peek(), None | Some(b';' | b'&' | b'|' | b'\n' | b'(' | b')' | b'<' | b'>')) {
            return Err(self.unsupported("a redirection without a target"));
        }
        let target = self.word(false)?;
        if op == RedirOp::Dup && !(target.is_literal() && (target.text == "-" || is_digits(&target.text))) {
            return Err(self.unsupported(format!(
                "`>&{}`: only `N>&M` and `N>&-` are supported (`>&FILE` is bash-only; write `>FILE 2>&1`)",
                target.raw
            )));
        }
        cmd.redirs.push(Redir { fd, op, target });
        Ok(true)
    }

    /// Read the bodies of the here-documents due at this newline.
    fn heredoc_bodies(&mut self) -> Result<(), Refusal> {
        let due = std::mem::take(&mut self.heredocs);
        for h in due {
            let mut found = false;
            while self.pos < self.s.len() {
                let end = self.s[self.pos..].iter().position(|&c| c == b'\n').map_or(self.s.len(), |n| self.pos + n);
                let line = &self.src[self.pos..end];
                let body_start = self.pos;
                self.pos = (end + 1).min(self.s.len());
                let cmp = if h.strip_tabs { line.trim_start_matches('\t') } else { line };
                if cmp == h.delim {
                    found = true;
                    break;
                }
                let trailing = line.bytes().rev().take_while(|&c| c == b'\\').count();
                if h.expand && trailing % 2 == 1 {
                    return Err(self.unsupported(
                        "a line of an unquoted here-document ends with `\\`, which joins it with the next line: \
                         quote the delimiter (<<'EOF') or end the line otherwise",
                    ));
                }
                if h.expand {
                    self.heredoc_line(body_start, end)?;
                }
            }
            if !found {
                return Err(self.unsupported(format!("the here-document `{}` is never ended", h.delim)));
            }
        }
        Ok(())
    }

    /// Find the substitutions in one line of an unquoted here-document.
    fn heredoc_line(&mut self, start: usize, end: usize) -> Result<(), Refusal> {
        let saved = self.pos;
        self.pos = start;
        let mut scratch = Word::default();
        while self.pos < end {
            match self.peek() {
                Some(b'\\') => self.pos += 2,
                Some(b'$') => {
                    self.pos += 1;
                    self.dollar(&mut scratch)?;
                }
                Some(b'`') => {
                    self.pos += 1;
                    self.backtick(&mut scratch, Quoting::HereDoc)?;
                }
                _ => self.pos += 1,
            }
        }
        self.pos = saved;
        Ok(())
    }

    /// Read one word. `delimiter`: a here-document delimiter (no
    /// substitutions are run in it).
    fn word(&mut self, delimiter: bool) -> Result<Word, Refusal> {
        let start = self.pos;
        let mut w = Word::default();
        let mut text: Vec<u8> = Vec::new();
        let mut name_prefix = true;
        let mut open_bracket = false;
        let mut braces: Vec<usize> = Vec::new();
        while let Some(c) = self.peek() {
            match c {
                b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'<' | b'>' | b'(' | b')' => break,
                b'\\' => {
                    name_prefix = false;
                    match self.peek_at(1) {
                        None => return Err(self.unbalanced("the line ends with a `\\` that escapes nothing")),
                        Some(b'\n') => return Err(self.continuation()),
                        Some(_) => {
                            w.quoted = true;
                            let len = self.src[self.pos + 1..].chars().next().map_or(1, char::len_utf8);
                            text.extend_from_slice(&self.s[self.pos + 1..self.pos + 1 + len]);
                            self.pos += 1 + len;
                        }
                    }
                }
                b'\'' => {
                    name_prefix = false;
                    w.quoted = true;
                    let Some(n) = self.s[self.pos + 1..].iter().position(|&x| x == b'\'') else {
                        return Err(self.unbalanced("a `'` is never closed"));
                    };
                    text.extend_from_slice(&self.s[self.pos + 1..self.pos + 1 + n]);
                    self.pos += n + 2;
                }
                b'"' => {
                    name_prefix = false;
                    w.quoted = true;
                    self.pos += 1;
                    self.dquote(&mut w, &mut text, delimiter)?;
                }
                b'$' if !delimiter => {
                    name_prefix = false;
                    let at = self.pos;
                    self.pos += 1;
                    if matches!(self.peek(), Some(b'\'' | b'"')) {
                        return Err(self.unsupported("`$'…'` and `$\"…\"` quoting are bash-only"));
                    }
                    if self.dollar(&mut w)? {
                        text.extend_from_slice(&self.s[at..self.pos]);
                    } else {
                        text.push(b'$');
                    }
                }
                b'`' if !delimiter => {
                    name_prefix = false;
                    let at = self.pos;
                    self.pos += 1;
                    self.backtick(&mut w, Quoting::None)?;
                    text.extend_from_slice(&self.s[at..self.pos]);
                }
                b'=' if name_prefix && w.assign.is_none() && self.pos > start => {
                    if is_name(&self.src[start..self.pos]) {
                        w.assign = Some(self.pos - start);
                    }
                    name_prefix = false;
                    text.push(c);
                    self.pos += 1;
                }
                _ => {
                    if !(c.is_ascii_alphanumeric() || c == b'_') {
                        name_prefix = false;
                    }
                    match c {
                        b'*' | b'?' => w.pattern = true,
                        b'[' => open_bracket = true,
                        b']' if open_bracket => w.pattern = true,
                        // bash expands `~` at the start of a word and, in any
                        // word shaped like an assignment (`a=~`, `a+=~`,
                        // `x=a:~`), after `=` and `:`.
                        b'~' if self.pos == start
                            || (self.pos > start && matches!(self.s[self.pos - 1], b'=' | b':')) =>
                        {
                            w.pattern = true
                        }
                        b'{' => braces.push(self.pos),
                        b'}' => {
                            if let Some(o) = braces.pop() {
                                let inner = &self.src[o + 1..self.pos];
                                if inner.contains(',') || inner.contains("..") {
                                    return Err(self.unsupported(format!(
                                        "brace expansion `{}` (bash expands it, sh does not): write the words out",
                                        &self.src[o..=self.pos]
                                    )));
                                }
                            }
                        }
                        _ => {}
                    }
                    text.push(c);
                    self.pos += 1;
                }
            }
        }
        w.raw = self.src[start..self.pos].to_string();
        w.text = String::from_utf8_lossy(&text).into_owned();
        // A `~` after `=` or `:` in an assignment is expanded too.
        if let Some(n) = w.assign {
            let v = &w.raw[n + 1..];
            if v.starts_with('~') || v.contains(":~") {
                w.pattern = true;
            }
        }
        Ok(w)
    }

    fn continuation(&self) -> Refusal {
        self.unsupported(
            "a line continuation (`\\` before a newline) is only supported after a blank, between words: \
             elsewhere the shell joins it with the next line into something else",
        )
    }

    fn unbalanced(&self, what: &str) -> Refusal {
        self.refuse(RefusalReason::UnbalancedQuotes, format!("{what}; close it, or escape the quote with `\\`"))
    }

    /// The inside of `"…"` (the cursor is past the opening quote).
    fn dquote(&mut self, w: &mut Word, text: &mut Vec<u8>, delimiter: bool) -> Result<(), Refusal> {
        loop {
            match self.peek() {
                None => return Err(self.unbalanced("a `\"` is never closed")),
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(());
                }
                Some(b'\\') => match self.peek_at(1) {
                    Some(b'\n') => return Err(self.continuation()),
                    Some(n @ (b'$' | b'`' | b'"' | b'\\')) => {
                        text.push(n);
                        self.pos += 2;
                    }
                    _ => {
                        text.push(b'\\');
                        self.pos += 1;
                    }
                },
                Some(b'$') if !delimiter => {
                    let at = self.pos;
                    self.pos += 1;
                    if self.dollar(w)? {
                        text.extend_from_slice(&self.s[at..self.pos]);
                    } else {
                        text.push(b'$');
                    }
                }
                Some(b'`') if !delimiter => {
                    let at = self.pos;
                    self.pos += 1;
                    self.backtick(w, Quoting::Double)?;
                    text.extend_from_slice(&self.s[at..self.pos]);
                }
                Some(c) => {
                    text.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    /// After a `$`: an expansion (true, and `w` is dynamic) or a literal
    /// `$` (false).
    fn dollar(&mut self, w: &mut Word) -> Result<bool, Refusal> {
        match self.peek() {
            Some(b'(') => {
                if self.peek_at(1) == Some(b'(') {
                    return Err(self.unsupported("arithmetic expansion `$(( ))` is not supported"));
                }
                self.pos += 1;
                self.enter()?;
                self.nested_list()?;
                self.pos += 1;
                self.leave();
                w.dynamic = true;
                Ok(true)
            }
            Some(b'{') => {
                let start = self.pos + 1;
                let mut i = start;
                while self.s.get(i).is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'_') {
                    i += 1;
                }
                let name = &self.src[start..i];
                let simple = !name.is_empty() && (is_name(name) || is_digits(name)) && self.s.get(i) == Some(&b'}');
                if !simple {
                    let end =
                        self.s[self.pos..].iter().position(|&c| c == b'}').map_or(self.s.len(), |n| self.pos + n + 1);
                    return Err(self.unsupported(format!(
                        "`${}`: only `$NAME` and `${{NAME}}` expansions are supported",
                        &self.src[self.pos..end]
                    )));
                }
                self.pos = i + 1;
                w.dynamic = true;
                Ok(true)
            }
            Some(b'[') => Err(self.unsupported("`$[ ]` arithmetic is bash-only")),
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => {
                while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_') {
                    self.pos += 1;
                }
                w.dynamic = true;
                Ok(true)
            }
            Some(b'0'..=b'9' | b'@' | b'*' | b'#' | b'?' | b'-' | b'$' | b'!') => {
                self.pos += 1;
                w.dynamic = true;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// After an opening backquote: find its end, undo its escapes and parse
    /// the inside as a line of its own.
    fn backtick(&mut self, w: &mut Word, quoting: Quoting) -> Result<(), Refusal> {
        let mut inner: Vec<u8> = Vec::new();
        loop {
            match self.peek() {
                None => return Err(self.unbalanced("a `` ` `` is never closed")),
                Some(b'`') => {
                    self.pos += 1;
                    break;
                }
                Some(b'\\') => match self.peek_at(1) {
                    Some(b'\n') => return Err(self.continuation()),
                    Some(n @ (b'$' | b'`' | b'\\')) => {
                        inner.push(n);
                        self.pos += 2;
                    }
                    // In a here-document body dash unescapes `\"` and bash
                    // keeps it: refuse rather than guess.
                    Some(b'"') if quoting == Quoting::HereDoc => {
                        return Err(self.unsupported(
                            "`\\\"` inside backquotes in a here-document is read differently by dash and bash: \
                             use $( ) instead",
                        ))
                    }
                    Some(b'"') if quoting == Quoting::Double => {
                        inner.push(b'"');
                        self.pos += 2;
                    }
                    Some(n) => {
                        inner.push(b'\\');
                        inner.push(n);
                        self.pos += 2;
                    }
                    None => return Err(self.unbalanced("a `` ` `` is never closed")),
                },
                Some(c) => {
                    inner.push(c);
                    self.pos += 1;
                }
            }
        }
        let inner = String::from_utf8_lossy(&inner).into_owned();
        self.enter()?;
        let mut sub = Parser {
            s: inner.as_bytes(),
            src: &inner,
            pos: 0,
            events: Vec::new(),
            heredocs: Vec::new(),
            outer_pending: self.outer_pending + self.heredocs.len(),
            depth: self.depth,
        };
        sub.list(None)?;
        if !sub.heredocs.is_empty() {
            return Err(self.unsupported("a here-document inside `` ` `` is missing its end line"));
        }
        self.events.append(&mut sub.events);
        self.leave();
        w.dynamic = true;
        Ok(())
    }
}

/// A shell variable name.
pub fn is_name(s: &str) -> bool {
    let mut b = s.bytes();
    b.next().is_some_and(|c| c.is_ascii_alphabetic() || c == b'_') && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// A non-empty run of ASCII digits.
pub(super) fn is_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|c| c.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmds(line: &str) -> Vec<Vec<String>> {
        match parse(line) {
            Ok(ev) => ev
                .into_iter()
                .filter_map(|e| match e {
                    Event::Command(c) => Some(c.words.into_iter().map(|w| w.text).collect()),
                    _ => None,
                })
                .collect(),
            Err(r) => panic!("{line:?}: {r:?}"),
        }
    }

    fn refused(line: &str) -> RefusalReason {
        match parse(line) {
            Ok(ev) => panic!("{line:?} parsed: {ev:?}"),
            Err(r) => r.reason,
        }
    }

    #[test]
    fn lists_pipes_and_substitutions() {
        assert_eq!(
            cmds("git add -A && git commit -m 'wip'"),
            [vec!["git", "add", "-A"], vec!["git", "commit", "-m", "wip"]]
        );
        assert_eq!(cmds("a | b || c; d\ne"), [["a"], ["b"], ["c"], ["d"], ["e"]]);
        assert_eq!(
            cmds("echo \"$(date +%s)\" `id -u`"),
            [vec!["date", "+%s"], vec!["id", "-u"], vec!["echo", "$(date +%s)", "`id -u`"]]
        );
        assert_eq!(cmds("(cd src && ls) > /dev/null"), [vec!["cd", "src"], vec!["ls"], vec![]]);
        assert_eq!(cmds("FOO=1 BAR='x y' make"), [["make"]]);
        assert_eq!(cmds("cat <<EOF\nhello $(whoami)\nEOF\nls"), [vec!["cat"], vec!["whoami"], vec!["ls"]]);
        assert_eq!(cmds("cat <<'EOF'\nhello $(whoami)\nEOF"), [["cat"]]);
        assert_eq!(cmds("echo a # $(comment)"), [["echo", "a"]]);
        assert_eq!(cmds("echo \\`x\\` \\$y"), [["echo", "`x`", "$y"]]);
    }

    #[test]
    fn unsupported_constructs() {
        for line in [
            "if true; then ls; fi",
            "for f in *; do echo $f; done",
            "f() { ls; }",
            "{ ls; }",
            "echo $((1+2))",
            "echo {a,b}",
            "echo ${x:-y}",
            "ls &",
            "ls &> out",
            "cat <<< hi",
            "diff <(ls) <(ls)",
            "echo $'x'",
            "[[ -f x ]]",
            "((x++))",
            "a=(1 2)",
            "cat <<EOF\nno end",
            "ls >&out",
            "ls |& cat",
            "x+=1 ls",
        ] {
            assert_eq!(refused(line), RefusalReason::UnsupportedSyntax, "{line}");
        }
        for line in ["echo 'x", "echo \"x", "echo `x", "echo x\\"] {
            assert_eq!(refused(line), RefusalReason::UnbalancedQuotes, "{line}");
        }
    }
}
