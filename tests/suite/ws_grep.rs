//! The workspace's `grep` and `glob` (`portcullis::workspace::search`):
//! matches with their context, the filters and caps, and the jail: denied
//! files never opened (an inotify watch from outside sees no open), FIFOs
//! never opened, links never followed, `.gitignore` rules applied, a
//! pathological pattern bounded.
//!
//! Each restriction has a control: the same search finds the file (and
//! opens it) with the restriction off.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
use portcullis::path::DenyGlobs;
use portcullis::workspace::search::{glob, grep, GrepOptions, GrepResult, SearchError, MAX_PATTERN_BYTES};

use super::util::*;

fn no_deny() -> DenyGlobs {
    deny(&[])
}

fn deny(globs: &[&str]) -> DenyGlobs {
    let g: Vec<String> = globs.iter().map(|s| s.to_string()).collect();
    DenyGlobs::new(&g).unwrap_or_else(|e| panic!("deny globs: {e}"))
}

fn search(root: &Path, d: &DenyGlobs, o: &GrepOptions) -> GrepResult {
    grep(root, d, o).unwrap_or_else(|e| panic!("grep {:?}: {e}", o.pattern))
}

/// `grep` on another thread, failing the test if it takes longer than `secs`
/// (a hang on a FIFO would otherwise hang the suite).
fn search_within(secs: u64, root: &Path, d: DenyGlobs, o: GrepOptions) -> GrepResult {
    let (tx, rx) = mpsc::channel();
    let root = root.to_path_buf();
    std::thread::spawn(move || {
        let _ = tx.send(grep(&root, &d, &o).map_err(|e| e.to_string()));
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(r) => r.unwrap_or_else(|e| panic!("grep: {e}")),
        Err(_) => panic!("grep did not return within {secs} s"),
    }
}

fn paths(r: &GrepResult) -> Vec<&str> {
    let mut v: Vec<&str> = r.matches.iter().map(|m| m.path.as_str()).collect();
    v.dedup();
    v
}

/// An inotify watch on `p` for opens and reads.
fn watch(p: &Path) -> Inotify {
    let ino = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).unwrap_or_else(|e| panic!("inotify: {e}"));
    ino.add_watch(p, AddWatchFlags::IN_OPEN | AddWatchFlags::IN_ACCESS)
        .unwrap_or_else(|e| panic!("watch {}: {e}", p.display()));
    ino
}

/// The events seen so far (0 when none: the read says EAGAIN).
fn events(ino: &Inotify) -> usize {
    match ino.read_events() {
        Ok(ev) => ev.len(),
        Err(nix::errno::Errno::EAGAIN) => 0,
        Err(e) => panic!("inotify read: {e}"),
    }
}

#[test]
fn r0320_grep_returns_matches_with_their_context() {
    let ws = Ws::new();
    ws.write("a.txt", "one\ntwo\nneedle 1\nthree\nfour\nfive\nneedle 2\nsix\n");
    ws.write("sub/b.txt", "needle 3\n");
    let mut o = GrepOptions::new("needle \\d");
    o.context = 2;
    let r = search(ws.path(), &no_deny(), &o);
    assert_eq!(paths(&r), ["a.txt", "sub/b.txt"]);
    assert_eq!(r.matches.len(), 3, "{r:?}");
    let m = &r.matches[0];
    assert_eq!((m.line, m.text.as_str()), (3, "needle 1"));
    let lines = |v: &[portcullis::workspace::search::ContextLine]| {
        v.iter().map(|c| (c.line, c.text.clone())).collect::<Vec<_>>()
    };
    assert_eq!(lines(&m.before), [(1, "one".into()), (2, "two".into())]);
    assert_eq!(lines(&m.after), [(4, "three".into()), (5, "four".into())]);
    // Overlapping context: each match still carries its own two lines.
    let m = &r.matches[1];
    assert_eq!((m.line, lines(&m.before)), (7, vec![(5, "four".into()), (6, "five".into())]));
    assert_eq!(lines(&m.after), [(8, "six".into())]);
    let m = &r.matches[2];
    assert!(m.before.is_empty() && m.after.is_empty());
    assert!(!r.truncated);
    // The Ws tree's three files plus these two.
    assert_eq!(r.files_searched, 6, "{r:?}");
}

#[test]
fn r0321_ignore_case_and_fixed_strings() {
    let ws = Ws::new();
    ws.write("a.txt", "Hello World\nhello.world\nhelloXworld\n");
    let r = search(ws.path(), &no_deny(), &GrepOptions::new("hello.world"));
    assert_eq!(r.matches.iter().map(|m| m.line).collect::<Vec<_>>(), [2, 3], "a regex dot matches any character");
    let mut o = GrepOptions::new("hello.world");
    o.fixed_strings = true;
    let r = search(ws.path(), &no_deny(), &o);
    assert_eq!(r.matches.iter().map(|m| m.line).collect::<Vec<_>>(), [2], "a literal dot matches a dot");
    let mut o = GrepOptions::new("hello world");
    o.ignore_case = true;
    let r = search(ws.path(), &no_deny(), &o);
    assert_eq!(r.matches.iter().map(|m| m.line).collect::<Vec<_>>(), [1]);
    // Control: case matters by default.
    assert!(search(ws.path(), &no_deny(), &GrepOptions::new("hello world")).matches.is_empty());
}

#[test]
fn r0322_glob_and_path_narrow_the_files() {
    let ws = Ws::new();
    ws.write("src/x.rs", "target_word\n");
    ws.write("src/deep/y.rs", "target_word\n");
    ws.write("docs/x.md", "target_word\n");
    let mut o = GrepOptions::new("target_word");
    o.glob = Some("*.rs".into());
    assert_eq!(paths(&search(ws.path(), &no_deny(), &o)), ["src/deep/y.rs", "src/x.rs"]);
    o.glob = Some("src/*.rs".into());
    assert_eq!(paths(&search(ws.path(), &no_deny(), &o)), ["src/x.rs"], "`*` does not cross `/`");
    o.glob = None;
    o.path = Some("src/deep".into());
    assert_eq!(paths(&search(ws.path(), &no_deny(), &o)), ["src/deep/y.rs"]);
    o.path = Some("docs/x.md".into());
    assert_eq!(paths(&search(ws.path(), &no_deny(), &o)), ["docs/x.md"], "a single file");
    // Control: no filter finds all three.
    assert_eq!(search(ws.path(), &no_deny(), &GrepOptions::new("target_word")).matches.len(), 3);
}

#[test]
fn r0323_max_results_truncates() {
    let ws = Ws::new();
    for i in 0..20 {
        ws.write(&format!("f{i:02}.txt"), "hit\nhit\nhit\n");
    }
    let mut o = GrepOptions::new("hit");
    o.max_results = 7;
    o.threads = 2;
    let r = search(ws.path(), &no_deny(), &o);
    assert!(r.truncated);
    assert_eq!(r.matches.len(), 7, "exactly the cap");
    let mut sorted = r.matches.clone();
    sorted.sort_by(|a, b| (a.path.as_str(), a.line).cmp(&(b.path.as_str(), b.line)));
    assert_eq!(sorted, r.matches, "sorted by path and line");
    // Control: at the exact count nothing is truncated.
    o.max_results = 60;
    let r = search(ws.path(), &no_deny(), &o);
    assert_eq!((r.matches.len(), r.truncated), (60, false));
}

#[test]
fn r0324_binary_files_are_skipped_and_counted() {
    let ws = Ws::new();
    std::fs::write(ws.join("blob.bin"), b"magic_word\n\0\x01\x02magic_word\n").unwrap_or_else(|e| panic!("{e}"));
    ws.write("text.txt", "magic_word\n");
    let r = search(ws.path(), &no_deny(), &GrepOptions::new("magic_word"));
    assert_eq!(paths(&r), ["text.txt"], "no match from a binary file, not even before its NUL");
    assert_eq!(r.files_skipped.binary, 1, "{r:?}");
    // Control: the same file without the NUL matches twice.
    std::fs::write(ws.join("blob.bin"), b"magic_word\n\x01\x02magic_word\n").unwrap_or_else(|e| panic!("{e}"));
    let r = search(ws.path(), &no_deny(), &GrepOptions::new("magic_word"));
    assert_eq!(r.matches.iter().filter(|m| m.path == "blob.bin").count(), 2);
    assert_eq!(r.files_skipped.binary, 0);
}

#[test]
fn r0325_a_denied_file_is_never_opened() {
    let ws = Ws::new();
    ws.write("secrets/key.pem", "password=hunter2\n");
    ws.write(".env", "password=hunter2\n");
    ws.write("ok.txt", "password=public\n");
    let key = ws.join("secrets/key.pem");
    let env = ws.join(".env");
    let (wk, we) = (watch(&key), watch(&env));
    let d = deny(&["secrets", ".env*"]);
    let r = search(ws.path(), &d, &GrepOptions::new("password"));
    assert_eq!(paths(&r), ["ok.txt"]);
    assert_eq!(r.files_skipped.denied, 2, "{r:?}");
    assert_eq!((events(&wk), events(&we)), (0, 0), "inotify saw a denied file opened");
    // The glob of `glob` hides them too.
    let g = glob(ws.path(), &d, "*", 100).unwrap_or_else(|e| panic!("{e}"));
    assert!(!g.paths.iter().any(|p| p.contains("key.pem") || p == ".env"), "{g:?}");
    // Asking for the denied path itself is a typed refusal.
    let mut o = GrepOptions::new("password");
    o.path = Some("secrets/key.pem".into());
    match grep(ws.path(), &d, &o) {
        Err(SearchError::Denied { glob, .. }) => assert_eq!(glob, "secrets"),
        other => panic!("expected Denied, got {other:?}"),
    }
    assert_eq!(events(&wk), 0);
    // Control: without the deny globs both are opened and matched.
    let r = search(ws.path(), &no_deny(), &GrepOptions::new("password"));
    assert_eq!(paths(&r), [".env", "ok.txt", "secrets/key.pem"]);
    assert!(events(&wk) > 0 && events(&we) > 0, "the watch sees an open");
}

#[test]
fn r0326_a_fifo_named_like_a_match_is_never_opened() {
    let ws = Ws::new();
    ws.write("real.txt", "pipe_word\n");
    let fifo = ws.join("pipe_word.txt");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o644))
        .unwrap_or_else(|e| panic!("mkfifo: {e}"));
    // A FIFO as a directory's .gitignore, which the walker would read.
    ws.write("sub/x.txt", "pipe_word\n");
    nix::unistd::mkfifo(&ws.join("sub/.gitignore"), nix::sys::stat::Mode::from_bits_truncate(0o644))
        .unwrap_or_else(|e| panic!("mkfifo: {e}"));
    let wf = watch(&fifo);
    let mut o = GrepOptions::new("pipe_word");
    o.glob = Some("*.txt".into());
    let r = search_within(20, ws.path(), no_deny(), o.clone());
    assert_eq!(paths(&r), ["real.txt"]);
    assert_eq!(r.files_skipped.special, 2, "the FIFO and the directory with a FIFO .gitignore: {r:?}");
    assert_eq!(events(&wf), 0, "inotify saw the FIFO opened");
    // Asking for the FIFO by name: no hang, counted, nothing returned.
    o.path = Some("pipe_word.txt".into());
    let r = search_within(20, ws.path(), no_deny(), o.clone());
    assert!(r.matches.is_empty() && r.files_skipped.special == 1, "{r:?}");
    assert_eq!(events(&wf), 0);
    // Control: the directory is searched once its .gitignore is a file.
    std::fs::remove_file(ws.join("sub/.gitignore")).unwrap_or_else(|e| panic!("{e}"));
    o.path = None;
    let r = search_within(20, ws.path(), no_deny(), o);
    assert_eq!(paths(&r), ["real.txt", "sub/x.txt"]);
    assert_eq!(r.files_skipped.special, 1);
    // A FIFO .gitignore in the directory searched: a typed refusal, no hang.
    nix::unistd::mkfifo(&ws.join(".gitignore"), nix::sys::stat::Mode::from_bits_truncate(0o644))
        .unwrap_or_else(|e| panic!("mkfifo: {e}"));
    let (tx, rx) = mpsc::channel();
    let root = ws.path().to_path_buf();
    std::thread::spawn(move || {
        let _ = tx
            .send(matches!(grep(&root, &no_deny(), &GrepOptions::new("pipe_word")), Err(SearchError::BadPath { .. })));
    });
    assert_eq!(rx.recv_timeout(Duration::from_secs(20)).ok(), Some(true), "BadPath, within 20 s");
    // Control: with the ignore rules off the same search runs.
    let mut off = GrepOptions::new("pipe_word");
    off.gitignore = false;
    off.glob = Some("*.txt".into());
    assert_eq!(paths(&search_within(20, ws.path(), no_deny(), off)), ["real.txt", "sub/x.txt"]);
}

#[test]
fn r0327_gitignore_rules_are_respected() {
    let ws = Ws::new();
    ws.write(".gitignore", "build/\n*.log\n!keep.log\n");
    ws.write("build/out.txt", "ignored_word\n");
    ws.write("run.log", "ignored_word\n");
    ws.write("keep.log", "ignored_word\n");
    ws.write("sub/.gitignore", "local.txt\n");
    ws.write("sub/local.txt", "ignored_word\n");
    ws.write("sub/deeper/run.log", "ignored_word\n");
    ws.write("sub/seen.txt", "ignored_word\n");
    let o = GrepOptions::new("ignored_word");
    let r = search(ws.path(), &no_deny(), &o);
    assert_eq!(paths(&r), ["keep.log", "sub/seen.txt"], "{r:?}");
    // Searching below the root still applies the root's rules.
    let mut below = o.clone();
    below.path = Some("sub".into());
    assert_eq!(paths(&search(ws.path(), &no_deny(), &below)), ["sub/seen.txt"]);
    // A .gitignore above the root is not read.
    let inner = GrepOptions::new("ignored_word");
    let r = search(&ws.join("build"), &no_deny(), &inner);
    assert_eq!(paths(&r), ["out.txt"]);
    // Control: with the rules off every file matches.
    let mut off = o;
    off.gitignore = false;
    assert_eq!(search(ws.path(), &no_deny(), &off).matches.len(), 6);
}

#[test]
fn r0328_symlinks_to_outside_are_not_followed() {
    let ws = Ws::new();
    let outside = Ws::new();
    outside.write("secret.txt", "outside_word\n");
    symlink(outside.path(), ws.join("out")).unwrap_or_else(|e| panic!("{e}"));
    symlink(outside.join("secret.txt"), ws.join("link.txt")).unwrap_or_else(|e| panic!("{e}"));
    let w = watch(&outside.join("secret.txt"));
    let r = search(ws.path(), &no_deny(), &GrepOptions::new("outside_word"));
    assert!(r.matches.is_empty(), "{r:?}");
    assert_eq!(r.files_skipped.links, 2);
    assert_eq!(events(&w), 0, "the target was opened");
    let mut o = GrepOptions::new("outside_word");
    o.path = Some("out".into());
    match grep(ws.path(), &no_deny(), &o) {
        Err(SearchError::BadPath { reason, .. }) => assert!(reason.contains("symbolic link"), "{reason}"),
        other => panic!("expected BadPath, got {other:?}"),
    }
    let g = glob(ws.path(), &no_deny(), "*.txt", 100).unwrap_or_else(|e| panic!("{e}"));
    assert!(!g.paths.iter().any(|p| p.contains("secret") || p == "link.txt"), "{g:?}");
    // Control: the target matches when searched where it lives.
    let r = search(outside.path(), &no_deny(), &GrepOptions::new("outside_word"));
    assert_eq!(paths(&r), ["secret.txt"]);
    assert!(events(&w) > 0);
}

#[test]
fn r0329_a_pathological_pattern_returns_quickly() {
    let ws = Ws::new();
    let line = "a".repeat(100_000);
    ws.write("evil.txt", &format!("{line}\n{line}b\n"));
    // Exponential for a backtracking engine on the first line.
    let mut o = GrepOptions::new("^(a+)+b$");
    o.line_cap = 10;
    let t = Instant::now();
    let r = search(ws.path(), &no_deny(), &o);
    let took = t.elapsed();
    assert!(took < Duration::from_secs(10), "took {took:?}");
    // Control: the pattern works, finding the second line only.
    assert_eq!(r.matches.iter().map(|m| m.line).collect::<Vec<_>>(), [2]);
    assert!(r.matches[0].cut && r.matches[0].text.len() == 10);
    // A pattern over the length cap, or compiling too large, is refused.
    let big = GrepOptions::new("a".repeat(MAX_PATTERN_BYTES + 1));
    assert!(matches!(grep(ws.path(), &no_deny(), &big), Err(SearchError::PatternTooLong { .. })));
    let huge = GrepOptions::new("((((a{100}){100}){100}){100})");
    assert!(matches!(grep(ws.path(), &no_deny(), &huge), Err(SearchError::BadPattern { .. })));
}

#[test]
fn r0330_long_lines_are_cut_and_huge_lines_skip_the_file() {
    let ws = Ws::new();
    ws.write("wide.txt", &format!("long_word {}\n", "é".repeat(3000)));
    ws.write("huge.txt", &format!("long_word {}\n", "x".repeat(3 << 20)));
    let r = search(ws.path(), &no_deny(), &GrepOptions::new("long_word"));
    assert_eq!(paths(&r), ["wide.txt"]);
    let m = &r.matches[0];
    assert!(m.cut && m.text.len() <= 2000 && m.text.starts_with("long_word é"), "cut on a char boundary");
    assert_eq!(r.lines_cut, 1);
    assert_eq!(r.files_skipped.long_line, 1, "{r:?}");
    // Control: with a larger line limit the huge file is searched.
    let mut o = GrepOptions::new("long_word");
    o.max_line_bytes = 8 << 20;
    let r = search(ws.path(), &no_deny(), &o);
    assert_eq!(paths(&r), ["huge.txt", "wide.txt"]);
    assert_eq!(r.files_skipped.long_line, 0);
}

#[test]
fn r0331_git_and_node_modules_are_skipped_by_default() {
    let ws = Ws::with_git();
    ws.write(".git/notes.txt", "skip_word\n");
    ws.write("node_modules/pkg/index.js", "skip_word\n");
    ws.write("web/node_modules/x.js", "skip_word\n");
    ws.write(".github/ci.yml", "skip_word\n");
    let r = search(ws.path(), &no_deny(), &GrepOptions::new("skip_word"));
    assert_eq!(paths(&r), [".github/ci.yml"], "hidden files are searched");
    assert_eq!(r.files_skipped.ignored, 3);
    // Control: with the default ignores off all four match.
    let mut o = GrepOptions::new("skip_word");
    o.default_ignores = false;
    assert_eq!(search(ws.path(), &no_deny(), &o).matches.len(), 4);
}

#[test]
fn r0332_glob_lists_matching_files_in_order() {
    let ws = Ws::new();
    for p in ["b.rs", "a/z.rs", "a/b/c.rs", "x.md", "node_modules/m.rs"] {
        ws.write(p, "");
    }
    ws.write(".gitignore", "gen/\n");
    ws.write("gen/g.rs", "");
    let g = glob(ws.path(), &no_deny(), "*.rs", 100).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(g.paths, ["a/b/c.rs", "a/z.rs", "b.rs", "src/lib.rs", "src/main.rs"]);
    assert!(!g.truncated);
    let g = glob(ws.path(), &no_deny(), "a/**/*.rs", 100).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(g.paths, ["a/b/c.rs", "a/z.rs"]);
    let g = glob(ws.path(), &no_deny(), "*.rs", 2).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((g.paths.len(), g.truncated), (2, true));
    let g2 = glob(ws.path(), &no_deny(), "*.rs", 2).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(g.paths, g2.paths, "the same first two every time");
    let g = glob(ws.path(), &deny(&["a"]), "*.rs", 100).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(g.paths, ["b.rs", "src/lib.rs", "src/main.rs"]);
    assert!(matches!(glob(ws.path(), &no_deny(), "../*", 10), Err(SearchError::BadGlob { .. })));
}

#[test]
fn r0333_paths_outside_the_root_are_refused() {
    let ws = Ws::new();
    for bad in ["../x", "/etc", "src/../../x"] {
        let mut o = GrepOptions::new("x");
        o.path = Some(bad.into());
        match grep(ws.path(), &no_deny(), &o) {
            Err(SearchError::BadPath { .. }) => {}
            other => panic!("{bad}: expected BadPath, got {other:?}"),
        }
    }
    let mut o = GrepOptions::new("x");
    o.path = Some("nope".into());
    match grep(ws.path(), &no_deny(), &o) {
        Err(SearchError::BadPath { reason, .. }) => assert!(reason.contains("no such"), "{reason}"),
        other => panic!("expected BadPath, got {other:?}"),
    }
    // Control: a plain relative path works.
    let mut o = GrepOptions::new("main");
    o.path = Some("./src".into());
    assert_eq!(paths(&search(ws.path(), &no_deny(), &o)), ["src/main.rs"]);
}

#[test]
fn r0334_grep_on_a_20000_file_tree() {
    let ws = Ws::new();
    for d in 0..100 {
        for f in 0..200 {
            let n = d * 200 + f;
            let body = if n % 97 == 0 {
                format!("fn f{n}() {{ unique_marker_{n}(); }}\n")
            } else {
                format!("fn f{n}() {{}}\n")
            };
            ws.write(&format!("d{d:03}/f{f:03}.rs"), &body);
        }
    }
    let t = Instant::now();
    let r = search(ws.path(), &no_deny(), &GrepOptions::new(r"unique_marker_\d+"));
    let took = t.elapsed();
    assert_eq!(r.matches.len(), (0..20_000).filter(|n| n % 97 == 0).count());
    assert_eq!(r.files_searched, 20_004, "and the four files of the Ws tree");
    assert!(took < Duration::from_secs(60), "took {took:?}");
}
