//! The differential test of `sh` mode against real shells: every accepted
//! `sh` line of the corpus runs under `dash -c` and `bash -c` with a PATH
//! of recording stubs, and the commands the shell actually started are
//! compared with the checker's plan. This is the proof that nothing the
//! checker did not see can run.
//!
//! The stub directory holds one recorder script and a symlink to it named
//! after every executable in /usr/bin, /bin, /usr/sbin and /sbin and every
//! command name of every plan, so a command the checker did not see is
//! recorded rather than "not found". The recorder appends its name and
//! argv (NUL-separated, count first) to a file of its own in a log
//! directory whose path is written into the script (a line cannot
//! redirect it by changing the environment), prints one line (so `$( )`
//! and pipes have input) and exits 0. Builtins are not recorded: the
//! shells themselves say which names are builtins (`command -v`).
//!
//! Checks, per line and shell:
//! - safety: every recorded command matches a command of the plan (at any
//!   depth: a wrapper's inner command counts), argv for argv — a word
//!   decided at run time matches any run of words (it may split, glob or
//!   vanish);
//! - completeness: every top-level planned command that is an external
//!   command of that shell was started (a builtin wrapper — `command`,
//!   `exec`, bash's `time` — must start its inner command), unless the line
//!   holds `||` or `exit`, which may skip commands. A stub wrapper starts
//!   nothing, so the inner commands of external wrappers are not expected;
//! - nothing was "not found": a shell trying to start a name with no stub
//!   is a start the recorder could not see.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use portcullis::policy::{Interpreter, PlannedCommand, Verdict, WorkspacePolicy};

use super::policy_corpus::{CorpusWs, Mode, CORPUS};
use super::util::{available, test_root};

/// Lines excluded from the comparison because they show a known
/// discrepancy between the checker and the shells, reported for a fix in
/// src/policy/shell. Remove a line once the checker is fixed (the test
/// fails while an excluded line agrees with both shells).
///
/// Empty: every discrepancy this test found (a backslash-newline joining
/// `$` and `(` or splitting a reserved word, a here-document line ending in
/// `\`, `$(\<newline>(` read as arithmetic, bash's array subscripts in
/// variable names, `compgen -C` / `mapfile -C`, and `time` / `exec` options
/// the shells' builtins do not take) is now refused by the checker; those
/// lines are in the corpus and in `PROBES` as regressions.
const KNOWN_DIFF: &[&str] = &[];

/// Probe lines of this file (besides the corpus): constructs where a
/// checker and a shell are most likely to read a line differently.
const PROBES: &[&str] = &[
    "echo \"$\\\n(rm -rf src)\"",
    "cat <<EOF\n$\\\n(rm -rf src)\nEOF",
    "cat <<true\nx\\\ntrue\necho '$(rm -rf src)'\ntrue",
    "time -v git status",
    "time -p git status",
    "time -- git status",
    "exec -a x git status",
    "exec -c git status",
    "exec -- git status",
    "command -p git status",
    "command -- git status",
    "command git status",
    "nice -n 5 git status",
    "env -i git status",
    "echo $(\\\n(id))",
    "\\time git status",
    "builtin echo hi",
    "echo `echo \\`id\\``",
    "echo \"`echo \\\"$(id)\\\"`\"",
    "X=$(id) git status",
    "git status # $(id)",
    "echo a#$(id)",
    "cat <<EOF\n\\$(id) $(date)\nEOF",
    "echo $(cat <<EOF\n$(id)\nEOF\n)",
    "git log | time git status",
    "! time git status",
    "cat <<EOF; id\nbody $(date)\nEOF",
    "cat <<-EOF\n\t$(id)\n\tEOF",
    "find . -name x -exec ls {} \\;",
    "timeout -s KILL 5 git status",
    "echo ${PWD}$(id)",
    "echo x\\\n$(id)",
    "id \\\n&& git status",
    "FOO=\"$(id)\" BAR=`date` env",
    "echo $\\\n(rm -rf src)",
    "id='a[$(rm -rf src)]'; echo $(\\\n(id))",
    "unset 'a[$(rm -rf src)]'",
    "read 'a[$(rm -rf src)]' < README.md",
    "test -v 'a[$(rm -rf src)]'",
    "[ -v 'a[$(rm -rf src)]' ]",
    "printf '%d' 'a[$(rm -rf src)]'",
    "export 'a[$(rm -rf src)]=1'",
    "time -f %e git status",
    "[ 'a[$(rm -rf src)]' -eq 1 ]",
    "builtin read 'a[$(rm -rf src)]' < README.md",
    "command test -v 'a[$(rm -rf src)]'",
];

/// A policy with no allow list (anything not denied may run), for the
/// probes that need names the corpus policy does not allow.
const OPEN_POLICY: &str = r#"
[shell]
interpreter = "sh"
deny = ["rm", "curl", "wget", "dd"]
"#;

/// Probes checked against [`OPEN_POLICY`].
const OPEN_PROBES: &[&str] = &[
    "i\\\nf true; t\\\nhen rm -rf src; f\\\ni",
    "u\\\nntil false; d\\\no rm -rf src; break; d\\\none",
    "compgen -C 'rm -rf src' x",
    "mapfile -C 'rm -rf src' -c 1 arr < README.md",
    "let 'a[$(rm -rf src)]=1'",
    "declare 'a[$(rm -rf src)]=1'",
    "typeset 'a[$(rm -rf src)]=1'",
    "readonly 'a[$(rm -rf src)]=1'",
    "getopts a 'a[$(rm -rf src)]'",
    "shift 'a[$(rm -rf src)]'",
    "kill -l 'a[$(rm -rf src)]'",
    "exit 'a[$(rm -rf src)]'",
    "ulimit -c 'a[$(rm -rf src)]'",
    "unset -v 'a[$(rm -rf src)]'",
    "git status",
];

/// How long one line may run.
const LINE_TIMEOUT: Duration = Duration::from_secs(10);

/// Directories whose executables get a stub.
const BIN_DIRS: &[&str] = &["/usr/bin", "/bin", "/usr/sbin", "/sbin"];

/// Builtin wrappers that start their inner command themselves.
const BUILTIN_WRAPPERS: &[&str] = &["command", "exec", "time"];

fn find_shell(name: &str) -> Option<PathBuf> {
    ["/usr/bin", "/bin"].iter().map(|d| Path::new(d).join(name)).find(|p| p.is_file())
}

fn must<T, E: std::fmt::Display>(r: Result<T, E>, what: impl std::fmt::Display) -> T {
    match r {
        Ok(v) => v,
        Err(e) => panic!("{what}: {e}"),
    }
}

/// The stub PATH and the recorder's log directory.
struct Stubs {
    _dir: tempfile::TempDir,
    bin: PathBuf,
    log: PathBuf,
}

impl Stubs {
    fn new(names: &BTreeSet<String>) -> Stubs {
        let root = test_root();
        let dir = must(
            tempfile::Builder::new().prefix("pc-diff-").tempdir_in(&root),
            format!("tempdir in {}", root.display()),
        );
        let bin = dir.path().join("bin");
        let log = dir.path().join("log");
        must(fs::create_dir(&bin), "mkdir bin");
        must(fs::create_dir(&log), "mkdir log");
        let recorder = dir.path().join("recorder");
        // Builtins only: an external command here would find a stub.
        let script = format!(
            "#!/bin/sh\n\
             printf '%s\\0' \"$#\" \"${{0##*/}}\" \"$@\" >>'{}'/\"r.$$\"\n\
             printf 'stub-%s\\n' \"${{0##*/}}\"\n\
             exit 0\n",
            log.display()
        );
        assert!(!log.display().to_string().contains('\''), "the log path holds a quote: {}", log.display());
        must(fs::write(&recorder, script), "write recorder");
        must(fs::set_permissions(&recorder, fs::Permissions::from_mode(0o755)), "chmod recorder");
        for n in names {
            if n.is_empty() || n.contains('/') || n == "." || n == ".." {
                continue;
            }
            let link = bin.join(n);
            if let Err(e) = std::os::unix::fs::symlink(&recorder, &link) {
                if e.kind() != std::io::ErrorKind::AlreadyExists {
                    panic!("symlink {}: {e}", link.display());
                }
            }
        }
        Stubs { _dir: dir, bin, log }
    }

    /// Take every record written since the last call.
    fn take(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        let mut files: Vec<PathBuf> =
            must(fs::read_dir(&self.log), "read log dir").flatten().map(|e| e.path()).collect();
        files.sort();
        for f in files {
            let bytes = must(fs::read(&f), format!("read {}", f.display()));
            must(fs::remove_file(&f), format!("rm {}", f.display()));
            let mut fields = bytes.split(|&b| b == 0).map(|s| String::from_utf8_lossy(s).into_owned());
            while let Some(count) = fields.next() {
                if count.is_empty() {
                    break;
                }
                let n: usize = match count.parse() {
                    Ok(n) => n,
                    Err(e) => panic!("corrupt record in {}: count {count:?}: {e}", f.display()),
                };
                let rec: Vec<String> = fields.by_ref().take(n + 1).collect();
                assert_eq!(rec.len(), n + 1, "truncated record in {}", f.display());
                out.push(rec);
            }
        }
        out
    }
}

/// What one run of a line did.
struct Run {
    records: Vec<Vec<String>>,
    status: String,
    stderr: String,
}

/// Run `line` with `shell -c` in a fresh corpus workspace, under the stubs.
fn run_line(shell: &Path, stubs: &Stubs, line: &str) -> Run {
    let ws = CorpusWs::new();
    let _ = stubs.take();
    let err_path = stubs.log.parent().map_or_else(|| PathBuf::from("/dev/null"), |p| p.join("stderr"));
    let err_file = must(fs::File::create(&err_path), "create stderr file");
    let mut cmd = Command::new(shell);
    cmd.arg("-c")
        .arg(line)
        .env_clear()
        .env("PATH", &stubs.bin)
        .env("HOME", ws.path())
        // For a reader of the environment only: the recorder's log path is
        // written into it, so a line that unsets LOG cannot hide a start.
        .env("LOG", &stubs.log)
        .current_dir(ws.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err_file)
        .process_group(0);
    let mut child = must(cmd.spawn(), format!("spawn {}", shell.display()));
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break format!("{s}"),
            Ok(None) if start.elapsed() > LINE_TIMEOUT => {
                if let Ok(pid) = i32::try_from(child.id()) {
                    let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), nix::sys::signal::SIGKILL);
                }
                let _ = child.wait();
                break format!("killed after {LINE_TIMEOUT:?}");
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(2)),
            Err(e) => panic!("wait {}: {e}", shell.display()),
        }
    };
    let stderr = fs::read_to_string(&err_path).unwrap_or_default();
    Run { records: stubs.take(), status, stderr }
}

/// Which of `names` are external commands (found on the stub PATH) in
/// `shell`, as the shell itself says (`command -v`).
fn externals(shell: &Path, stubs: &Stubs, names: &BTreeSet<String>) -> BTreeSet<String> {
    let names: Vec<&String> = names.iter().filter(|n| !n.is_empty() && !n.starts_with('-')).collect();
    let script = "i=0; for n in \"$@\"; do i=$((i+1)); p=$(command -v \"$n\"); \
                  case $p in /*) printf '%s\\n' \"$i\";; esac; done";
    let out = must(
        Command::new(shell)
            .arg("-c")
            .arg(script)
            .arg("classify")
            .args(&names)
            .env_clear()
            .env("PATH", &stubs.bin)
            .stdin(Stdio::null())
            .output(),
        format!("run {}", shell.display()),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter_map(|l| l.trim().parse::<usize>().ok())
        .filter_map(|i| names.get(i.wrapping_sub(1)).map(|s| s.to_string()))
        .collect()
}

/// Every planned command, wrappers' inner commands included.
fn flatten<'a>(cmds: &'a [PlannedCommand], out: &mut Vec<&'a PlannedCommand>) {
    for c in cmds {
        if !c.argv.is_empty() {
            out.push(c);
        }
        flatten(&c.runs, out);
    }
}

/// Whether a recorded argv is one the planned command may become: the same
/// name, and the same words, a word decided at run time standing for any
/// run of words (empty included).
fn matches(planned: &PlannedCommand, rec: &[String]) -> bool {
    let (Some(name), Some(rname)) = (planned.argv.first(), rec.first()) else { return false };
    if name != rname || planned.dynamic.contains(&0) {
        return false;
    }
    let pat = &planned.argv[1..];
    let words = &rec[1..];
    if planned.dynamic.is_empty() {
        return pat == words;
    }
    let wild = |i: usize| planned.dynamic.contains(&(i + 1));
    // can[i][j]: pat[i..] matches words[j..].
    let mut can = vec![vec![false; words.len() + 1]; pat.len() + 1];
    can[pat.len()][words.len()] = true;
    for i in (0..pat.len()).rev() {
        for j in (0..=words.len()).rev() {
            can[i][j] = if wild(i) {
                can[i + 1][j] || (j < words.len() && can[i][j + 1])
            } else {
                j < words.len() && pat[i] == words[j] && can[i + 1][j + 1]
            };
        }
    }
    can[0][0]
}

/// The commands a shell must have started, each as its alternatives: a
/// top-level external command; the inner command of a builtin wrapper (or
/// the wrapper itself, which may also be run as an external command:
/// `\\time`, or bash's `time` after a `|`).
fn expected<'a>(cmds: &'a [PlannedCommand], ext: &BTreeSet<String>, out: &mut Vec<Vec<&'a PlannedCommand>>) {
    for c in cmds {
        let Some(name) = c.argv.first() else { continue };
        if ext.contains(name) {
            out.push(vec![c]);
        } else if BUILTIN_WRAPPERS.contains(&name.as_str()) {
            let mut inner = Vec::new();
            expected(&c.runs, ext, &mut inner);
            for mut alts in inner {
                alts.push(c);
                out.push(alts);
            }
        }
    }
}

fn show_cmd(c: &PlannedCommand) -> String {
    let words: Vec<String> = c
        .argv
        .iter()
        .enumerate()
        .map(|(i, w)| if c.dynamic.contains(&i) { format!("<{w}>") } else { format!("{w:?}") })
        .collect();
    format!("[{}]", words.join(", "))
}

fn show_rec(r: &[String]) -> String {
    format!("{r:?}")
}

/// The discrepancies of one run, if any.
fn compare(line: &str, shell: &str, plan: &[PlannedCommand], ext: &BTreeSet<String>, run: &Run) -> Option<String> {
    let mut all = Vec::new();
    flatten(plan, &mut all);
    let mut problems = Vec::new();
    for r in &run.records {
        if !all.iter().any(|p| matches(p, r)) {
            problems.push(format!("  started but not planned: {}", show_rec(r)));
        }
    }
    let skippable = line.contains("||") || line.contains("exit");
    if !skippable {
        let mut want = Vec::new();
        expected(plan, ext, &mut want);
        for alts in want {
            if !run.records.iter().any(|r| alts.iter().any(|p| matches(p, r))) {
                let shown: Vec<String> = alts.iter().map(|p| show_cmd(p)).collect();
                problems.push(format!("  planned but not started: {}", shown.join(" or ")));
            }
        }
    }
    for l in run.stderr.lines() {
        if l.contains("not found") {
            problems.push(format!("  a start the stubs could not record: {l}"));
        }
    }
    if run.status.starts_with("killed") {
        problems.push(format!("  {}", run.status));
    }
    if problems.is_empty() {
        return None;
    }
    let planned: Vec<String> = all.iter().map(|c| show_cmd(c)).collect();
    let recorded: Vec<String> = run.records.iter().map(|r| show_rec(r)).collect();
    Some(format!(
        "line {line:?} under {shell} ({}):\n{}\n  planned:  {}\n  recorded: {}\n  stderr:   {:?}",
        run.status,
        problems.join("\n"),
        planned.join(" "),
        recorded.join(" "),
        run.stderr.trim_end()
    ))
}

fn executables_on_host() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for d in BIN_DIRS {
        for e in fs::read_dir(d).into_iter().flatten().flatten() {
            if let Some(n) = e.file_name().to_str() {
                names.insert(n.to_string());
            }
        }
    }
    names
}

/// Whether a `command -p` (which ignores PATH) is planned.
fn uses_default_path(cmds: &[PlannedCommand]) -> bool {
    cmds.iter().any(|c| {
        let opts = c.argv.iter().skip(1).take_while(|w| w.to_string().starts_with('-') && w.as_str() != "--");
        (c.argv.first().is_some_and(|n| n == "command") && opts.into_iter().any(|w| w.to_string().contains('p')))
            || uses_default_path(&c.runs)
    })
}

fn planned_names(cmds: &[PlannedCommand], out: &mut BTreeSet<String>) {
    for c in cmds {
        if let Some(n) = c.argv.first() {
            out.insert(n.clone());
        }
        planned_names(&c.runs, out);
    }
}

#[test]
fn sh_lines_run_exactly_the_planned_commands_under_dash_and_bash() {
    let test = "policy_diff";
    let dash = find_shell("dash");
    let bash = find_shell("bash");
    if !available(test, dash.is_some(), "dash is not installed (/usr/bin/dash or /bin/dash)")
        || !available(test, bash.is_some(), "bash is not installed (/usr/bin/bash or /bin/bash)")
    {
        return;
    }
    let shells: Vec<(&str, PathBuf)> =
        [("dash", dash), ("bash", bash)].into_iter().filter_map(|(n, p)| p.map(|p| (n, p))).collect();
    // The corpus line `echo hi > /tmp/portcullis-corpus-probe.txt` really
    // redirects (only the programs are stubs): the file is removed after
    // the test, pass or fail, unless it was there before.
    let _probe = RemoveAfter::new(Path::new("/tmp/portcullis-corpus-probe.txt"));

    // Pass 1: the plans.
    let ws = CorpusWs::new();
    let policy = ws.policy();
    let mut open = must(WorkspacePolicy::from_toml(OPEN_POLICY), "open policy");
    open.workspace = Some(ws.path().to_path_buf());
    let checker = must(policy.checker(), "corpus checker").with_interpreter(Interpreter::Sh);
    let open_checker = must(open.checker(), "open checker").with_interpreter(Interpreter::Sh);
    let corpus = CORPUS.iter().filter(|(m, _, _)| *m == Mode::Sh).map(|(_, l, _)| (*l, &checker, false));
    let probes = PROBES.iter().map(|l| (*l, &checker, true));
    let open_probes = OPEN_PROBES.iter().map(|l| (*l, &open_checker, true));
    let mut lines: Vec<(&str, Vec<PlannedCommand>)> = Vec::new();
    let mut unrunnable = Vec::new();
    let mut names = executables_on_host();
    for (line, checker, probe) in corpus.chain(probes).chain(open_probes) {
        let plan = match checker.check(line) {
            Verdict::Accepted(plan) => plan,
            Verdict::Refused(r) => {
                if probe {
                    eprintln!("{test}: probe {line:?} refused ({}): not run", r.reason);
                }
                continue;
            }
        };
        let mut these = BTreeSet::new();
        planned_names(&plan.commands, &mut these);
        if let Some(n) = these.iter().find(|n| n.contains('/')) {
            // A path is not looked up on PATH: the real program would run
            // and nothing would be recorded.
            unrunnable.push(format!("{line:?} (runs `{n}` by path)"));
            continue;
        }
        if uses_default_path(&plan.commands) {
            unrunnable.push(format!("{line:?} (`command -p` looks the name up on the default PATH, not the stubs)"));
            continue;
        }
        names.extend(these);
        lines.push((line, plan.commands));
    }
    for u in &unrunnable {
        eprintln!("{test}: not run (cannot be stubbed): {u}");
    }
    let stubs = Stubs::new(&names);
    let all_names: BTreeSet<String> = {
        let mut s = BTreeSet::new();
        for (_, plan) in &lines {
            planned_names(plan, &mut s);
        }
        s.extend(["cat", "wc", "git", "echo"].map(String::from));
        s
    };

    // The harness itself: stubs record (argv with blanks and newlines
    // intact), builtins do not.
    for (sh, path) in &shells {
        let run = run_line(path, &stubs, "cat README.md | wc -l; echo hi; git commit -m 'a b\nc' \"\"");
        let got: BTreeSet<Vec<String>> = run.records.into_iter().collect();
        let want: BTreeSet<Vec<String>> =
            [vec!["cat", "README.md"], vec!["wc", "-l"], vec!["git", "commit", "-m", "a b\nc", ""]]
                .into_iter()
                .map(|v| v.into_iter().map(String::from).collect())
                .collect();
        assert_eq!(got, want, "the recording stubs do not work under {sh} (stderr: {})", run.stderr);
        let ext = externals(path, &stubs, &all_names);
        assert!(ext.contains("git") && !ext.contains("echo"), "{sh}: `command -v` classification is off: {ext:?}");
    }

    // Pass 2: run every line under every shell.
    let mut failures = Vec::new();
    let mut stale = Vec::new();
    let mut compared = 0;
    let ext: BTreeMap<&str, BTreeSet<String>> =
        shells.iter().map(|(sh, path)| (*sh, externals(path, &stubs, &all_names))).collect();
    for (line, plan) in &lines {
        let known = KNOWN_DIFF.contains(line);
        let mut diffs = Vec::new();
        for (sh, path) in &shells {
            let run = run_line(path, &stubs, line);
            let empty = BTreeSet::new();
            let e = ext.get(sh).unwrap_or(&empty);
            if let Some(d) = compare(line, sh, plan, e, &run) {
                diffs.push(d);
            }
        }
        if known {
            if diffs.is_empty() {
                stale.push(format!("{line:?} is in KNOWN_DIFF but now agrees with dash and bash: remove it"));
            } else {
                eprintln!("{test}: known discrepancy (excluded):\n{}", diffs.join("\n"));
            }
            continue;
        }
        compared += 1;
        failures.extend(diffs);
    }
    eprintln!(
        "{test}: compared {compared} accepted sh lines under {} ({} known, {} not runnable)",
        shells.iter().map(|(s, _)| *s).collect::<Vec<_>>().join(" and "),
        KNOWN_DIFF.len(),
        unrunnable.len()
    );
    assert!(compared > 0, "no accepted sh line in the corpus to compare");
    assert!(
        failures.is_empty() && stale.is_empty(),
        "{} discrepancies between the checker's plans and the shells:\n{}\n{}",
        failures.len(),
        failures.join("\n"),
        stale.join("\n")
    );
}

#[test]
fn plan_matching_treats_run_time_words_as_any_run_of_words() {
    let p = PlannedCommand {
        argv: ["cat", "$f", "x", "*.rs"].map(String::from).to_vec(),
        dynamic: vec![1, 3],
        runs: Vec::new(),
        redirects: Vec::new(),
    };
    let m = |r: &[&str]| matches(&p, &r.iter().map(|s| s.to_string()).collect::<Vec<_>>());
    assert!(m(&["cat", "x"]));
    assert!(m(&["cat", "a", "b", "x", "m.rs", "n.rs"]));
    assert!(!m(&["cat", "a"]));
    assert!(!m(&["grep", "x"]));
    let lit = PlannedCommand { argv: ["ls", "-l"].map(String::from).to_vec(), ..p.clone() };
    let lit = PlannedCommand { dynamic: Vec::new(), ..lit };
    assert!(matches(&lit, &["ls".to_string(), "-l".to_string()]));
    assert!(!matches(&lit, &["ls".to_string(), "-l".to_string(), "x".to_string()]));
}

/// Removes a file the test makes outside its own directories when dropped,
/// if it did not exist when made.
struct RemoveAfter<'a>(Option<&'a Path>);

impl<'a> RemoveAfter<'a> {
    fn new(path: &'a Path) -> Self {
        RemoveAfter((!path.exists()).then_some(path))
    }
}

impl Drop for RemoveAfter<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.0 {
            let _ = std::fs::remove_file(p);
        }
    }
}
