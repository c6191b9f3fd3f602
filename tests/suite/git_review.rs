//! What an adversarial review of the git protections found (issue 7's
//! fresh review), each attack run for real and checked from outside with a
//! host git and marker files: a gitlink to a repository the command made,
//! an unpopulated submodule whose path was a file when the run was planned,
//! and an index the planner could not read.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use portcullis::sandbox::Cleanup;
use portcullis::SandboxError;

use super::gitutil::{host_git, writable, Marker, README_FLAGS};
use super::util::*;

/// Host git in `dir`, file URLs allowed and `main` the first branch.
fn git_in(dir: &Path, args: &[&str]) -> Output {
    let mut all = vec!["-c", "protocol.file.allow=always", "-c", "init.defaultBranch=main"];
    all.extend_from_slice(args);
    host_git(dir, &all)
}

fn git_ok(dir: &Path, args: &[&str]) -> String {
    let out = git_in(dir, args);
    assert!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `git <four flags> <args>` (success not required: only what it runs).
fn four(ws: &Ws, args: &[&str]) {
    let mut all = README_FLAGS.to_vec();
    all.extend_from_slice(args);
    drop(git_in(ws.path(), &all));
}

/// A workspace that is a git repository with one commit.
fn repo() -> Ws {
    let ws = Ws::new();
    git_ok(ws.path(), &["init", "-q"]);
    git_ok(ws.path(), &["add", "-A"]);
    git_ok(ws.path(), &["commit", "-qm", "init"]);
    ws
}

/// Git inside the sandbox, with an identity.
const G: &str = "git -c user.name=t -c user.email=t@t -c init.defaultBranch=main -c protocol.file.allow=always";

/// A `.gitmodules` naming `evil` with `ignore = none` (which beats
/// `-c diff.ignoreSubmodules=all`).
const GITMODULES: &str =
    "printf '[submodule \"evil\"]\\n\\tpath = evil\\n\\turl = ./evil\\n\\tignore = none\\n' > .gitmodules";

/// A script that makes `evil/`, a repository whose clean filter touches
/// `m` (no gitlink for it yet).
fn filter_repo(m: &Marker) -> String {
    format!(
        "set -e; mkdir evil; cd evil; {G} init -q .; echo x > f; {G} add f; {G} commit -qm x
         git config filter.pwn.clean \"sh -c 'touch {m}; cat'\"
         echo '* filter=pwn' > .gitattributes; cd ..",
        m = m.path().display()
    )
}

/// The review's F1: a writable run makes a repository `evil/` with a clean
/// filter in its config, adds a gitlink for it to the writable index and a
/// `.gitmodules` saying `ignore = none` (which beats
/// `-c diff.ignoreSubmodules=all`), and makes `evil/f` stat-dirty. After
/// the run `evil/.git` is renamed aside (kept), the warning says how to
/// restore it, and host git with the README's four flags (`status`, `diff`)
/// runs nothing. Control: restored as the warning says, the same host git
/// runs the planted filter; `--ignore-submodules=all` on the command line
/// stops it even then (what the README now recommends for status/diff).
#[test]
fn r0090_a_gitlink_to_a_repository_the_command_made_is_quarantined() {
    let ws = repo();
    let m = Marker::new();
    let script = format!(
        "{}
         {G} update-index --add --cacheinfo 160000,$(git -C evil rev-parse HEAD),evil
         {GITMODULES}; touch -m -d @1000000000 evil/f; echo planted",
        filter_repo(&m)
    );
    let r = run_ok(&writable(&ws, &script));
    assert_eq!((r.outcome.code(), stdout(&r).as_str()), (Some(0), "planted\n"), "{}", stderr(&r));
    assert!(!ws.join("evil/.git").exists(), "{:?}", r.warnings);
    let w = r
        .warnings
        .iter()
        .map(ToString::to_string)
        .find(|w| w.contains("is a submodule the command added"))
        .unwrap_or_else(|| panic!("no warning: {:?}", r.warnings));
    let restore = w.split("restore it with: ").nth(1).unwrap_or_else(|| panic!("{w}"));
    assert!(w.contains(&ws.join("evil").display().to_string()) && restore.starts_with("mv "), "{w}");
    // The command's repository is kept, whole.
    let kept: Vec<PathBuf> = fs::read_dir(ws.join("evil"))
        .unwrap_or_else(|e| panic!("{e}"))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().contains(".git.portcullis-quarantined-"))
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert!(kept[0].join("config").is_file() && kept[0].join("HEAD").is_file());
    for args in [&["status"][..], &["diff"], &["diff", "HEAD"]] {
        four(&ws, args);
        assert!(!m.take(), "host git {args:?} with the four flags ran the planted filter");
    }
    // Control: restored as the warning says, the attack is real.
    let out = Command::new("sh").args(["-c", restore]).output().unwrap_or_else(|e| panic!("{e}"));
    assert!(out.status.success(), "{restore}: {}", String::from_utf8_lossy(&out.stderr));
    assert!(ws.join("evil/.git/config").is_file());
    four(&ws, &["status", "--ignore-submodules=all"]);
    four(&ws, &["diff", "--ignore-submodules=all"]);
    assert!(!m.take(), "--ignore-submodules=all on the command line let the filter run");
    four(&ws, &["status"]);
    assert!(m.take(), "control: the restored repository's filter did not run");
}

/// Found in session 26's review: a tree named only in `.gitmodules` was
/// "known" to the plan, so the after-run quarantine left a gitlink added
/// there alone. Run 1 makes a repository with a planted clean filter at
/// `evil` and a `.gitmodules` entry for it, no gitlink (git does not enter
/// it: nothing to quarantine). Run 2 adds the gitlink: its `.git` is now
/// quarantined, and host git runs nothing; control: restored as the
/// warning says, host git runs the filter.
#[test]
fn r0887_a_gitlink_added_at_a_tree_named_only_in_gitmodules_is_quarantined() {
    let ws = repo();
    let m = Marker::new();
    let plant = format!("{}\n{GITMODULES}; touch -m -d @1000000000 evil/f; echo planted", filter_repo(&m));
    let r = run_ok(&writable(&ws, &plant));
    assert_eq!((r.outcome.code(), stdout(&r).as_str()), (Some(0), "planted\n"), "{}", stderr(&r));
    assert!(ws.join("evil/.git/config").is_file(), "{:?}", r.warnings);
    four(&ws, &["status"]);
    assert!(!m.take(), "control: without a gitlink host git entered evil");
    let link =
        format!("set -e; {G} update-index --add --cacheinfo 160000,$(git -C evil rev-parse HEAD),evil; echo linked");
    let r = run_ok(&writable(&ws, &link));
    assert_eq!((r.outcome.code(), stdout(&r).as_str()), (Some(0), "linked\n"), "{}", stderr(&r));
    let w = quarantine_warning(&r);
    assert!(!ws.join("evil/.git").exists(), "{w}");
    nothing_runs_until_restored(&ws, &w, &m);
}

/// Found in session 26's third review: the quarantine exempted any tree
/// reached through a gitlink of an index the plan read, including the index
/// of a repository the command made. Run 1 makes `a/` (named in
/// `.gitmodules`, no gitlink at `a`) whose own index has a gitlink to a
/// planted `a/evil`. Run 2 adds `a/evil` as a gitlink of the workspace's
/// index: new in that index, so quarantined, and host git runs nothing.
/// Controls: before run 2, host git does not enter `a/evil`; restored as
/// the warning says, host git runs the filter.
#[test]
fn r0888_a_gitlink_into_a_tree_of_a_planted_index_is_quarantined() {
    let ws = repo();
    let m = Marker::new();
    let plant = format!(
        "set -e; mkdir a; cd a; {G} init -q .
         {}
         {G} update-index --add --cacheinfo 160000,$(git -C evil rev-parse HEAD),evil
         touch -m -d @1000000000 evil/f; cd ..
         printf '[submodule \"a\"]\\n\\tpath = a\\n\\turl = ./a\\n' > .gitmodules; echo planted",
        filter_repo(&m)
    );
    let r = run_ok(&writable(&ws, &plant));
    assert_eq!((r.outcome.code(), stdout(&r).as_str()), (Some(0), "planted\n"), "{}", stderr(&r));
    assert!(ws.join("a/evil/.git/config").is_file(), "{:?}", r.warnings);
    four(&ws, &["status"]);
    assert!(!m.take(), "control: without a top-level gitlink host git entered a/evil");
    let link = format!(
        "set -e; {G} update-index --add --cacheinfo 160000,$(git -C a/evil rev-parse HEAD),a/evil
         printf '[submodule \"x\"]\\n\\tpath = a/evil\\n\\turl = ./x\\n\\tignore = none\\n' >> .gitmodules
         echo linked"
    );
    let r = run_ok(&writable(&ws, &link));
    assert_eq!((r.outcome.code(), stdout(&r).as_str()), (Some(0), "linked\n"), "{}", stderr(&r));
    assert!(!ws.join("a/evil/.git").exists(), "not quarantined: {:?}", r.warnings);
    nothing_runs_until_restored(&ws, &quarantine_warning(&r), &m);
}

/// The quarantine's warning in `r` (the one that says how to restore).
fn quarantine_warning(r: &portcullis::ExecResult) -> String {
    r.warnings
        .iter()
        .map(ToString::to_string)
        .find(|w| w.contains("is a submodule the command added"))
        .unwrap_or_else(|| panic!("no quarantine: {:?}", r.warnings))
}

/// Host git (`status`, `diff`, the four flags) runs nothing of the planted
/// filter; control: restored as the warning `w` says, `status` runs it.
fn nothing_runs_until_restored(ws: &Ws, w: &str, m: &Marker) {
    for args in [&["status"][..], &["diff"]] {
        four(ws, args);
        assert!(!m.take(), "host git {args:?} with the four flags ran the planted filter");
    }
    let restore = w.split("restore it with: ").nth(1).unwrap_or_else(|| panic!("{w}"));
    let out = Command::new("sh").args(["-c", restore]).output().unwrap_or_else(|e| panic!("{e}"));
    assert!(out.status.success(), "{restore}: {}", String::from_utf8_lossy(&out.stderr));
    four(ws, &["status"]);
    assert!(m.take(), "control: the restored repository's filter did not run");
}

/// A legitimate `git submodule add` in a writable run: the new submodule's
/// `.git` file is renamed aside with a warning, its files and its git dir
/// under `.git/modules` kept; restored as the warning says, it is a working
/// submodule again (host `git submodule init` registers it, since
/// `.git/config` was read-only in the run; `git -C vendor/lib log`).
/// And an existing submodule is left alone (its gitlink was in the plan).
#[test]
fn r0091_a_submodule_added_in_a_run_is_kept_and_restorable() {
    let ws = repo();
    let script = format!(
        "set -e; mkdir /tmp/src; cd /tmp/src; {G} init -q .; echo lib > lib.c; {G} add lib.c; {G} commit -qm lib
         cd \"$OLDPWD\"; {G} submodule add -q /tmp/src vendor/lib; {G} commit -qm 'add lib'; echo added"
    );
    let r = run_ok(&writable(&ws, &script));
    assert_eq!((r.outcome.code(), stdout(&r).as_str()), (Some(0), "added\n"), "{}\n{:?}", stderr(&r), r.warnings);
    assert!(!ws.join("vendor/lib/.git").exists(), "{:?}", r.warnings);
    assert_eq!(ws.read("vendor/lib/lib.c"), "lib\n");
    assert!(ws.join(".git/modules/vendor/lib/HEAD").is_file());
    let w = r
        .warnings
        .iter()
        .map(ToString::to_string)
        .find(|w| w.contains("is a submodule the command added"))
        .unwrap_or_else(|| panic!("no warning: {:?}", r.warnings));
    let restore = w.split("restore it with: ").nth(1).unwrap_or_else(|| panic!("{w}"));
    let out = Command::new("sh").args(["-c", restore]).output().unwrap_or_else(|e| panic!("{e}"));
    assert!(out.status.success(), "{restore}: {}", String::from_utf8_lossy(&out.stderr));
    // `.git/config` was read-only in the run, so the submodule is not
    // registered there yet (`-`): `git submodule init` on the host does it.
    let status = git_ok(ws.path(), &["submodule", "status"]);
    assert!(status.starts_with('-') && status.contains("vendor/lib"), "{status}");
    git_ok(ws.path(), &["submodule", "init", "-q"]);
    let status = git_ok(ws.path(), &["submodule", "status"]);
    assert!(status.starts_with(' ') && status.contains("vendor/lib"), "{status}");
    assert!(git_ok(&ws.join("vendor/lib"), &["log", "--oneline"]).contains("lib"));
    // The next run knows the submodule: nothing is renamed.
    let r = run_ok(&writable(&ws, "echo x > vendor/lib/lib.c && echo ok"));
    assert_eq!(stdout(&r), "ok\n", "{}", stderr(&r));
    assert!(ws.join("vendor/lib/.git").is_file(), "{:?}", r.warnings);
    assert!(!r.warnings.iter().any(|w| w.to_string().contains("submodule the command added")), "{:?}", r.warnings);
}

/// The review's F2: an unpopulated submodule `vendor/lib`, only `--write
/// vendor` granted. Run 1 makes `vendor/lib` a file; run 2 (planned with a
/// file on the gitlink's path) makes it a repository with `core.fsmonitor`.
/// The `.git` is guarded all the same: removed after run 2, and a plain
/// host `git status` runs nothing. Control: the same two scripts run on the
/// host without the sandbox make that `git status` run the fsmonitor.
#[test]
fn r0092_an_unpopulated_submodule_path_made_a_file_stays_guarded() {
    let m = Marker::new();
    let src = repo();
    let setup = || {
        let ws = repo();
        ws.write("vendor/keep", "v\n");
        git_ok(ws.path(), &["add", "vendor/keep"]);
        git_ok(ws.path(), &["submodule", "add", "-q", &src.path().display().to_string(), "vendor/lib"]);
        git_ok(ws.path(), &["commit", "-qm", "sub"]);
        git_ok(ws.path(), &["submodule", "deinit", "-q", "-f", "vendor/lib"]);
        assert!(ws.join("vendor/lib").is_dir() && !ws.join("vendor/lib/.git").exists());
        ws
    };
    let run1 = "rmdir vendor/lib && echo notadir > vendor/lib && echo one";
    let run2 = format!(
        "rm vendor/lib && mkdir vendor/lib && cd vendor/lib && git init -q . && \
         git config core.fsmonitor 'touch {}; false #' && echo two",
        m.path().display()
    );
    let ws = setup();
    for (script, want) in [(run1, "one\n"), (run2.as_str(), "two\n")] {
        let mut req = ws.req(&["sh", "-c", script]);
        req.write = vec![PathBuf::from("vendor")];
        let r = run_ok(&req);
        assert_eq!((r.outcome.code(), stdout(&r).as_str()), (Some(0), want), "{}", stderr(&r));
        if want == "two\n" {
            assert!(
                r.warnings.iter().any(|w| w.to_string().contains("vendor/lib/.git created by the command")),
                "{:?}",
                r.warnings
            );
        }
    }
    assert!(!ws.join("vendor/lib/.git").exists());
    drop(git_in(ws.path(), &["status"]));
    assert!(!m.take(), "plain host git status ran the planted fsmonitor");
    // Control: without the sandbox, the same steps make it run.
    let ws = setup();
    for script in [run1, run2.as_str()] {
        let out = Command::new("sh").args(["-c", script]).current_dir(ws.path()).output();
        assert!(out.is_ok_and(|o| o.status.success()));
    }
    drop(git_in(ws.path(), &["status"]));
    assert!(m.take(), "control: the planted fsmonitor did not run");
}

/// A repository with an embedded submodule `emb` (`emb/.git` a directory).
fn with_embedded() -> Ws {
    let ws = repo();
    fs::create_dir(ws.join("emb")).unwrap_or_else(|e| panic!("{e}"));
    git_ok(&ws.join("emb"), &["init", "-q", "."]);
    ws.write("emb/f", "e\n");
    git_ok(&ws.join("emb"), &["add", "f"]);
    git_ok(&ws.join("emb"), &["commit", "-qm", "e"]);
    git_ok(ws.path(), &["submodule", "add", "-q", "./emb", "emb"]);
    git_ok(ws.path(), &["commit", "-qm", "emb"]);
    ws
}

/// Run 2 of F3: the planted fsmonitor in the embedded submodule's config.
fn plant_emb(m: &Marker) -> String {
    format!(
        "printf '[core]\\n\\tfsmonitor = \"touch {}; false #\"\\n' >> emb/.git/config && echo wrote",
        m.path().display()
    )
}

/// The review's F3a: run 1 stages an entry with a 70,000-byte name sorting
/// before `emb` (git accepts it) and drops `.gitmodules`; the planner used
/// to stop at 64 KiB names and miss every later gitlink, so run 2 could
/// write `emb/.git/config`. Long names are read now: run 2's write gets
/// `EROFS`, the config is unchanged and a plain host `git status` runs
/// nothing. Control: with `emb` really taken out of the index (not a
/// submodule any more) the same write succeeds.
#[test]
fn r0093_a_long_index_name_does_not_hide_a_submodule() {
    let m = Marker::new();
    let ws = with_embedded();
    let config = ws.read("emb/.git/config");
    let run1 = format!(
        "{G} update-index --add --cacheinfo 100644,$(git hash-object -w /dev/null),$(printf '%070000d' 0) && \
         {G} rm -q --cached .gitmodules && rm .gitmodules && echo one"
    );
    let r = run_ok(&writable(&ws, &run1));
    assert_eq!(stdout(&r), "one\n", "{}", stderr(&r));
    let r = run_ok(&writable(&ws, &plant_emb(&m)));
    assert!(r.outcome.code() != Some(0) && stderr(&r).contains("Read-only file system"), "{}", stderr(&r));
    assert_eq!(ws.read("emb/.git/config"), config);
    drop(git_in(ws.path(), &["status"]));
    assert!(!m.take(), "plain host git status ran the planted fsmonitor");
    // Control: emb no longer a submodule, the write goes through.
    let r = run_ok(&writable(&ws, &format!("{G} rm -q --cached emb && echo out")));
    assert_eq!(stdout(&r), "out\n", "{}", stderr(&r));
    let r = run_ok(&writable(&ws, &plant_emb(&m)));
    assert_eq!((r.outcome.code(), stdout(&r).as_str()), (Some(0), "wrote\n"), "{}", stderr(&r));
    assert_ne!(ws.read("emb/.git/config"), config);
}

/// The review's F3b: run 1 replaces `.git/index` by a symbolic link to a
/// copy (git follows it). The planner used to read nothing through it and
/// go on; now run 1 itself fails after the run (the index cannot be checked
/// for gitlinks: `AfterRun`, naming the index), and the next writable run
/// is refused before it starts, with what to do; the embedded submodule's
/// config is unchanged and a plain host `git status` runs nothing. A
/// `.gitmodules` that is a link refuses the same way. Control: with the
/// link replaced by its file (the advice's `cp`), the run goes ahead and
/// the write gets `EROFS`.
#[test]
fn r0094_an_index_the_planner_cannot_read_refuses_a_writable_run() {
    let m = Marker::new();
    let ws = with_embedded();
    let config = ws.read("emb/.git/config");
    let run1 = "mv .git/index .git/index.real && ln -s index.real .git/index && echo one";
    match run(&writable(&ws, run1)) {
        Err(SandboxError::AfterRun { cleanup: Cleanup::GitGuard, step, path, result: Some(r), .. }) => {
            assert_eq!(path, ws.join(".git/index"));
            assert!(step.contains("index"), "{step}");
            assert_eq!(stdout(&r), "one\n");
        }
        other => panic!("expected AfterRun, got {other:?}"),
    }
    match run(&writable(&ws, &plant_emb(&m))) {
        Err(SandboxError::UnsafePath { message: msg, .. }) => {
            assert!(msg.contains(".git/index is a symbolic link") && msg.contains("cp --remove-destination"), "{msg}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(ws.read("emb/.git/config"), config);
    drop(git_in(ws.path(), &["status"]));
    assert!(!m.take(), "plain host git status ran the planted fsmonitor");
    // A read-only run is not refused (nothing to protect).
    let r = run_ok(&ws.req(&["true"]));
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    // Control: the link replaced by its file, the run goes ahead and is
    // stopped by the carve-out.
    fs::remove_file(ws.join(".git/index")).unwrap_or_else(|e| panic!("{e}"));
    fs::rename(ws.join(".git/index.real"), ws.join(".git/index")).unwrap_or_else(|e| panic!("{e}"));
    let r = run_ok(&writable(&ws, &plant_emb(&m)));
    assert!(r.outcome.code() != Some(0) && stderr(&r).contains("Read-only file system"), "{}", stderr(&r));
    assert_eq!(ws.read("emb/.git/config"), config);
    // A `.gitmodules` that is a link refuses too.
    fs::rename(ws.join(".gitmodules"), ws.join(".gitmodules.real")).unwrap_or_else(|e| panic!("{e}"));
    symlink(".gitmodules.real", ws.join(".gitmodules")).unwrap_or_else(|e| panic!("{e}"));
    match run(&writable(&ws, "true")) {
        Err(SandboxError::UnsafePath { message: msg, .. }) => {
            assert!(msg.contains(".gitmodules is a symbolic link"), "{msg}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

// The confirmation review (issue 7): entries the planner took for
// something other than what git takes them for.

/// A version 2 index holding just `entries` (mode, name, object name in
/// hex), written as git would but for the names, which are not checked;
/// the trailing checksum is zero, which git reads as "not computed".
fn raw_index(entries: &[(u32, &str, &str)]) -> Vec<u8> {
    let mut sorted = entries.to_vec();
    sorted.sort_by(|a, b| a.1.as_bytes().cmp(b.1.as_bytes()));
    let mut out = b"DIRC".to_vec();
    out.extend_from_slice(&2u32.to_be_bytes());
    out.extend_from_slice(&u32::try_from(sorted.len()).unwrap_or(0).to_be_bytes());
    for (mode, name, oid) in sorted {
        let start = out.len();
        for v in [0, 0, 0, 0, 0, 0, mode, 0, 0, 0] {
            out.extend_from_slice(&u32::to_be_bytes(v));
        }
        for i in (0..oid.len()).step_by(2) {
            out.push(u8::from_str_radix(&oid[i..i + 2], 16).unwrap_or_else(|e| panic!("{oid}: {e}")));
        }
        out.extend_from_slice(&u16::try_from(name.len().min(0xfff)).unwrap_or(0).to_be_bytes());
        out.extend_from_slice(name.as_bytes());
        out.resize(out.len() + 8 - (out.len() - start) % 8, 0);
    }
    out.extend_from_slice(&[0u8; 20]);
    out
}

/// The run failed after the command ran, because the index at `index`
/// could not be trusted (the message says `why`); its result.
fn index_failed(
    r: Result<portcullis::sandbox::ExecResult, SandboxError>,
    index: &Path,
    why: &str,
) -> Box<portcullis::sandbox::ExecResult> {
    match r {
        Err(e @ SandboxError::AfterRun { cleanup: Cleanup::GitGuard, .. }) => {
            let msg = e.to_string();
            let SandboxError::AfterRun { path, result: Some(r), .. } = e else { panic!("no result: {msg}") };
            assert_eq!(path, index, "{msg}");
            assert!(msg.contains(why), "{msg}");
            r
        }
        other => panic!("expected AfterRun for {}, got {other:?}", index.display()),
    }
}

/// The `.git.portcullis-quarantined-*` entries in `dir`.
fn quarantined(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().contains(".git.portcullis-quarantined-"))
                .collect()
        })
        .unwrap_or_default()
}

/// Put the quarantined `.git` of `tree` back (to show the attack is real).
fn restore(tree: &Path) {
    let q = quarantined(tree);
    assert_eq!(q.len(), 1, "{q:?}");
    fs::rename(&q[0], tree.join(".git")).unwrap_or_else(|e| panic!("{e}"));
}

/// The shell that makes a repository `dir` whose config has a clean filter
/// touching the marker, stat-dirty, with a `.gitmodules` entry `ignore =
/// none` spelled `path` (which beats `-c diff.ignoreSubmodules=all`).
fn evil_repo(dir: &str, path: &str, m: &Marker) -> String {
    format!(
        "mkdir {dir} && cd {dir} && {G} init -q . && echo x > f && {G} add f && {G} commit -qm x &&
         git config filter.pwn.clean \"sh -c 'touch {m}; cat'\" && echo '* filter=pwn' > .gitattributes && cd .. &&
         printf '[submodule \"e\"]\\n\\tpath = {path}\\n\\turl = ./{dir}\\n\\tignore = none\\n' > .gitmodules &&
         touch -m -d @1000000000 {dir}/f",
        m = m.path().display()
    )
}

/// A repository with a tracked file `a`.
fn repo_with_a() -> Ws {
    let ws = repo();
    ws.write("a", "a\n");
    git_ok(ws.path(), &["add", "a"]);
    git_ok(ws.path(), &["commit", "-qm", "a"]);
    ws
}

/// The confirmation review's c01 and c02 (finding A). A split index stores
/// an entry that replaces one of its shared index with an EMPTY name (git
/// takes the name from the shared entry, the mode from the replacement),
/// which the planner used to read as a gitlink at the workspace itself.
/// (c01) A run makes the index split, replaces the tracked file `a` by a
/// repository with a planted filter and the entry `a` by a gitlink: the
/// run fails after the command (`AfterRun`, naming the index and the split
/// index), `a/.git` is quarantined all the same (every path of the shared
/// index is a suspect), and host git with the four flags and plain runs
/// nothing. Control: the same steps without `--split-index` are
/// quarantined with a warning and no failure; and either way, restored,
/// the filter runs (the attack is real). (c02) A run re-stages the user's
/// embedded submodule `emb` through a split index and drops `.gitmodules`:
/// that run fails after the command, the next writable run is refused
/// before it starts (saying `--no-split-index`), and `emb/.git/config` is
/// unchanged. Control: without the split index the next run gets `EROFS`.
#[test]
fn r0105_a_split_index_cannot_hide_a_gitlink() {
    let m = Marker::new();
    for split in [true, false] {
        let ws = repo_with_a();
        let script = format!(
            "set -e; {} rm a; {}; {G} update-index --cacheinfo 160000,$(git -C a rev-parse HEAD),a; echo planted",
            if split { "git update-index --split-index;" } else { "" },
            evil_repo("a", "a", &m)
        );
        let r = match run(&writable(&ws, &script)) {
            Ok(r) if !split => Box::new(r),
            r if split => index_failed(r, &ws.join(".git/index"), "is a split index"),
            other => panic!("control: {other:?}"),
        };
        assert_eq!(stdout(&r), "planted\n", "{}", stderr(&r));
        if split {
            assert!(fs::read_dir(ws.join(".git"))
                .unwrap_or_else(|e| panic!("{e}"))
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("sharedindex.")));
        }
        assert!(!ws.join("a/.git").exists(), "split {split}: {:?}", r.warnings);
        assert!(
            r.warnings.iter().any(|w| w.to_string().contains("is a submodule the command added")),
            "{:?}",
            r.warnings
        );
        four(&ws, &["status"]);
        assert!(!m.take(), "split {split}: host git status with the four flags ran the planted filter");
        touch_dirty(&ws.join("a/f"));
        drop(git_in(ws.path(), &["status"]));
        assert!(!m.take(), "split {split}: plain host git status ran the planted filter");
        restore(&ws.join("a"));
        touch_dirty(&ws.join("a/f"));
        four(&ws, &["status"]);
        assert!(m.take(), "split {split}: control: the restored repository's filter did not run");
    }
    // c02: the user's embedded submodule hidden from the next run's plan.
    for split in [true, false] {
        let ws = with_embedded();
        let config = ws.read("emb/.git/config");
        let run1 = format!(
            "set -e; {G} update-index --cacheinfo 100644,$(git hash-object -w /dev/null),emb; {}
             {G} update-index --cacheinfo 160000,$(git -C emb rev-parse HEAD),emb
             {G} rm -q --cached .gitmodules; rm .gitmodules; echo one",
            if split { "git update-index --split-index" } else { "" }
        );
        let r = match run(&writable(&ws, &run1)) {
            Ok(r) if !split => Box::new(r),
            r if split => index_failed(r, &ws.join(".git/index"), "is a split index"),
            other => panic!("control: {other:?}"),
        };
        assert_eq!(stdout(&r), "one\n", "{}", stderr(&r));
        match run(&writable(&ws, &plant_emb(&m))) {
            Err(SandboxError::UnsafePath { message: msg, .. }) if split => {
                assert!(msg.contains(".git/index is a split index") && msg.contains("--no-split-index"), "{msg}")
            }
            Ok(r) if !split => {
                assert!(r.outcome.code() != Some(0) && stderr(&r).contains("Read-only file system"), "{}", stderr(&r))
            }
            other => panic!("split {split}: {other:?}"),
        }
        assert_eq!(ws.read("emb/.git/config"), config);
        drop(git_in(ws.path(), &["status"]));
        assert!(!m.take(), "split {split}: plain host git status ran the planted fsmonitor");
        if split {
            // Made whole as the refusal says, the next run is planned.
            git_ok(ws.path(), &["-c", "core.splitIndex=false", "update-index", "--no-split-index"]);
            let r = run_ok(&writable(&ws, &plant_emb(&m)));
            assert!(r.outcome.code() != Some(0) && stderr(&r).contains("Read-only file system"), "{}", stderr(&r));
        }
    }
}

/// Make `f` stat-dirty for git (an old mtime).
fn touch_dirty(f: &Path) {
    let out = Command::new("touch").args(["-m", "-d", "@1000000000"]).arg(f).output();
    assert!(out.is_ok_and(|o| o.status.success()));
}

/// The confirmation review's c03 and c05 (finding B): a gitlink spelled
/// `./evil` (raw index bytes; git reads it as it is, stats `./evil` and
/// enters it as a submodule). (c03) A run plants one, with a repository
/// and filter: the run fails after the command (naming the index and the
/// entry), `evil/.git` is quarantined (the name as git resolves it), host
/// git with the four flags runs nothing. Control: the same index with the
/// canonical name `evil` is quarantined without a failure, and restored,
/// either runs the filter. (c05) A run re-stages the user's embedded
/// submodule as `./emb` and drops `.gitmodules`: it fails after the run,
/// the next writable run is refused (naming the entry, saying how to
/// rebuild the index), `emb/.git/config` is unchanged. Control: `emb`
/// spelled canonically, the next run gets `EROFS`.
#[test]
fn r0106_a_gitlink_spelled_as_git_never_writes_is_refused() {
    let m = Marker::new();
    let oid = "1".repeat(40);
    for name in ["./evil", "evil"] {
        let ws = repo();
        fs::write(ws.join(".payload"), raw_index(&[(0o160000, name, &oid)])).unwrap_or_else(|e| panic!("{e}"));
        let script = format!("set -e; {}; mv .payload .git/index; echo planted", evil_repo("evil", name, &m));
        let canonical = name == "evil";
        let r = match run(&writable(&ws, &script)) {
            Ok(r) if canonical => Box::new(r),
            r if !canonical => index_failed(r, &ws.join(".git/index"), "\"./evil\" (mode 160000)"),
            other => panic!("control: {other:?}"),
        };
        assert_eq!(stdout(&r), "planted\n", "{}", stderr(&r));
        assert!(!ws.join("evil/.git").exists(), "{name}: {:?}", r.warnings);
        assert!(host_git(ws.path(), &["ls-files", "-s"]).stdout.ends_with(format!("\t{name}\n").as_bytes()));
        four(&ws, &["status"]);
        assert!(!m.take(), "{name}: host git status with the four flags ran the planted filter");
        restore(&ws.join("evil"));
        touch_dirty(&ws.join("evil/f"));
        four(&ws, &["status"]);
        assert!(m.take(), "{name}: control: the restored repository's filter did not run");
    }
    // c05: the user's embedded submodule hidden from the next run's plan.
    for name in ["./emb", "emb"] {
        let ws = with_embedded();
        let config = ws.read("emb/.git/config");
        let head = git_ok(&ws.join("emb"), &["rev-parse", "HEAD"]);
        fs::write(ws.join(".payload"), raw_index(&[(0o160000, name, head.trim())])).unwrap_or_else(|e| panic!("{e}"));
        let run1 = "mv .payload .git/index && rm .gitmodules && echo one";
        let canonical = name == "emb";
        let r = match run(&writable(&ws, run1)) {
            Ok(r) if canonical => Box::new(r),
            r if !canonical => index_failed(r, &ws.join(".git/index"), "\"./emb\""),
            other => panic!("control: {other:?}"),
        };
        assert_eq!(stdout(&r), "one\n", "{}", stderr(&r));
        match run(&writable(&ws, &plant_emb(&m))) {
            Err(SandboxError::UnsafePath { message: msg, .. }) if !canonical => {
                assert!(msg.contains("never writes, \"./emb\"") && msg.contains("reset -q"), "{msg}")
            }
            Ok(r) if canonical => {
                assert!(r.outcome.code() != Some(0) && stderr(&r).contains("Read-only file system"), "{}", stderr(&r))
            }
            other => panic!("{name}: {other:?}"),
        }
        assert_eq!(ws.read("emb/.git/config"), config);
        drop(git_in(ws.path(), &["status"]));
        assert!(!m.take(), "{name}: plain host git status ran the planted fsmonitor");
    }
}

/// Found while closing the above: git takes any mode whose type bits are
/// 160000 for a gitlink (`S_ISGITLINK`), so a gitlink of mode 160644 is
/// entered as a submodule; the planner only took exactly 160000. A run
/// plants one: it fails after the command (naming the mode), `evil/.git`
/// is quarantined, host git with the four flags runs nothing; restored,
/// the filter runs (the control: git does enter it). And a sparse index
/// (whose sparse directories hide their entries) refuses a writable run,
/// saying how to make it full; made full, the run goes ahead.
#[test]
fn r0107_a_gitlink_of_any_gitlink_mode_and_a_sparse_index_are_caught() {
    let m = Marker::new();
    let ws = repo();
    fs::write(ws.join(".payload"), raw_index(&[(0o160644, "evil", &"1".repeat(40))])).unwrap_or_else(|e| panic!("{e}"));
    let script = format!("set -e; {}; mv .payload .git/index; echo planted", evil_repo("evil", "evil", &m));
    let r = index_failed(run(&writable(&ws, &script)), &ws.join(".git/index"), "\"evil\" (mode 160644)");
    assert_eq!(stdout(&r), "planted\n", "{}", stderr(&r));
    assert!(!ws.join("evil/.git").exists(), "{:?}", r.warnings);
    four(&ws, &["status"]);
    assert!(!m.take(), "host git status with the four flags ran the planted filter");
    restore(&ws.join("evil"));
    touch_dirty(&ws.join("evil/f"));
    four(&ws, &["status"]);
    assert!(m.take(), "control: the restored repository's filter did not run (git did not take 160644 for a gitlink)");
    // A sparse index.
    let ws = repo();
    ws.write("d1/a", "a\n");
    ws.write("d2/b", "b\n");
    git_ok(ws.path(), &["add", "d1", "d2"]);
    git_ok(ws.path(), &["commit", "-qm", "dirs"]);
    git_ok(ws.path(), &["sparse-checkout", "set", "--cone", "--sparse-index", "d1"]);
    match run(&writable(&ws, "true")) {
        Err(SandboxError::UnsafePath { message: msg, .. }) => {
            assert!(msg.contains("is a sparse index") && msg.contains("--no-sparse-index"), "{msg}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    git_ok(ws.path(), &["sparse-checkout", "reapply", "--no-sparse-index"]);
    let r = run_ok(&writable(&ws, "echo ok"));
    assert_eq!(stdout(&r), "ok\n", "{}", stderr(&r));
}

/// A version 2 index of one entry whose name-length field is `name`'s
/// length and whose NUL padding starts with `pad` (git goes by the length
/// and copies the byte after it, `evi` + `l`; a reader scanning to the NUL
/// reads `evil/x`). With `pad` empty, an index as git writes it.
fn length_index(mode: u32, name: &str, pad: &str, oid: &str) -> Vec<u8> {
    let mut out = b"DIRC".to_vec();
    out.extend_from_slice(&2u32.to_be_bytes());
    out.extend_from_slice(&1u32.to_be_bytes());
    for v in [0, 0, 0, 0, 0, 0, mode, 0, 0, 0] {
        out.extend_from_slice(&u32::to_be_bytes(v));
    }
    for i in (0..oid.len()).step_by(2) {
        out.push(u8::from_str_radix(&oid[i..i + 2], 16).unwrap_or_else(|e| panic!("{oid}: {e}")));
    }
    out.extend_from_slice(&u16::try_from(name.len()).unwrap_or(0).to_be_bytes());
    out.extend_from_slice(name.as_bytes());
    let end = 12 + ((62 + name.len() + 8) & !7);
    assert!(out.len() + pad.len() < end, "the padding must keep a NUL");
    out.extend_from_slice(pad.as_bytes());
    out.resize(end, 0);
    out.extend_from_slice(&[0u8; 20]);
    out
}

/// The third review's r01 and r02 (F1, F2): git takes an index entry's name
/// from the length field in its flags (`create_from_disk` copies that many
/// bytes and the one after) and never checks the padding; the planner read
/// the name up to the NUL. (r01) A run plants a gitlink whose field says
/// `evi` with padding `l/x`: git reads `evil`, the planner read `evil/x`
/// and left `evil/.git` in place. Now the run fails after the command
/// (naming both readings), `evil/.git` is quarantined, host git with the
/// four flags runs nothing; restored, it runs the filter (git does enter
/// `evil`). Control: the consistent name `evil` is quarantined without a
/// failure. (r02) A run re-stages the user's embedded submodule `emb` as
/// `em` + `b/q`: the next writable run is refused (it could write
/// `emb/.git/config`); control: `emb` written as git writes it, the next
/// run's write gets `EROFS`. Both leave the config unchanged, and a plain
/// host git status runs nothing.
#[test]
fn r0109_a_name_whose_length_and_nul_disagree_is_refused() {
    let m = Marker::new();
    let oid = "1".repeat(40);
    for (name, pad) in [("evi", "l/x"), ("evil", "")] {
        let ws = repo();
        fs::write(ws.join(".payload"), length_index(0o160000, name, pad, &oid)).unwrap_or_else(|e| panic!("{e}"));
        let script = format!("set -e; {}; mv .payload .git/index; echo planted", evil_repo("evil", "evil", &m));
        let desync = !pad.is_empty();
        let r = match run(&writable(&ws, &script)) {
            Ok(r) if !desync => Box::new(r),
            r if desync => index_failed(
                r,
                &ws.join(".git/index"),
                "says \"evi\" while its name runs to the first NUL as \"evil/x\"",
            ),
            other => panic!("control: {other:?}"),
        };
        assert_eq!(stdout(&r), "planted\n", "{}", stderr(&r));
        assert!(!ws.join("evil/.git").exists(), "{name}: {:?}", r.warnings);
        // Git reads `evil` either way (from the malformed index, at times
        // with bytes of its own memory after it: a CI run listed
        // `"evil\261\321\001"`).
        let listed = host_git(ws.path(), &["ls-files", "-s"]).stdout;
        let shown = String::from_utf8_lossy(&listed);
        assert!(shown.contains("\tevil\n") || shown.contains("\t\"evil\\"), "{shown}");
        four(&ws, &["status"]);
        assert!(!m.take(), "{name}+{pad}: host git status with the four flags ran the planted filter");
        restore(&ws.join("evil"));
        touch_dirty(&ws.join("evil/f"));
        four(&ws, &["status"]);
        assert!(m.take(), "{name}+{pad}: control: the restored repository's filter did not run");
    }
    for (name, pad) in [("em", "b/q"), ("emb", "")] {
        let ws = with_embedded();
        let config = ws.read("emb/.git/config");
        let head = git_ok(&ws.join("emb"), &["rev-parse", "HEAD"]);
        fs::write(ws.join(".payload"), length_index(0o160000, name, pad, head.trim()))
            .unwrap_or_else(|e| panic!("{e}"));
        let desync = !pad.is_empty();
        let r = match run(&writable(&ws, "mv .payload .git/index && rm .gitmodules && echo one")) {
            Ok(r) if !desync => Box::new(r),
            r if desync => index_failed(r, &ws.join(".git/index"), "says \"em\""),
            other => panic!("control: {other:?}"),
        };
        assert_eq!(stdout(&r), "one\n", "{}", stderr(&r));
        let listed = host_git(ws.path(), &["ls-files", "-s"]).stdout;
        assert!(listed.ends_with(b"\temb\n"), "{}", String::from_utf8_lossy(&listed));
        match run(&writable(&ws, &plant_emb(&m))) {
            Err(SandboxError::UnsafePath { message: msg, .. }) if desync => {
                assert!(msg.contains("name-length field says \"em\"") && msg.contains("reset -q"), "{msg}")
            }
            Ok(r) if !desync => {
                assert!(r.outcome.code() != Some(0) && stderr(&r).contains("Read-only file system"), "{}", stderr(&r))
            }
            other => panic!("{name}+{pad}: {other:?}"),
        }
        assert_eq!(ws.read("emb/.git/config"), config);
        drop(git_in(ws.path(), &["status"]));
        assert!(!m.take(), "{name}+{pad}: plain host git status ran the planted fsmonitor");
    }
}

/// The third review's r03 (N1): `git ls-files` and `git grep
/// --recurse-submodules` (with `submodule.active`, as `git clone
/// --recurse-submodules` leaves it) enter a gitlink through a symbolic
/// link, which the quarantine skipped. A run makes `real/evil` (its
/// fsmonitor touching the marker), `lnk -> real` and the gitlink
/// `lnk/evil`: after the run the link is removed, with a warning naming it
/// (the repository behind it kept), and host git runs nothing. Control: the
/// link put back, host `git ls-files --recurse-submodules` runs the planted
/// fsmonitor. The planning side: such a gitlink already in the index, its
/// link in the workspace, refuses a writable run (naming the link); with
/// the directory in place of the link the run goes ahead and the
/// submodule's config is read-only (`EROFS`).
#[test]
fn r0110_a_gitlink_through_a_link_is_not_entered() {
    let m = Marker::new();
    let ws = repo();
    git_ok(ws.path(), &["config", "submodule.active", "."]);
    let script = format!(
        "set -e; mkdir -p real/evil; cd real/evil; {G} init -q .; echo x > f; {G} add f; {G} commit -qm x
         {} >> .git/config; cd ../..; ln -s real lnk
         {G} update-index --add --cacheinfo 160000,$(git -C real/evil rev-parse HEAD),lnk/evil
         printf '[submodule \"e\"]\\n\\tpath = lnk/evil\\n\\turl = ./x\\n' > .gitmodules; echo planted",
        m.fsmonitor()
    );
    let r = run_ok(&writable(&ws, &script));
    assert_eq!((r.outcome.code(), stdout(&r).as_str()), (Some(0), "planted\n"), "{}", stderr(&r));
    let lnk = ws.join("lnk").display().to_string();
    assert!(
        r.warnings.iter().any(|w| w.to_string().contains("through the symbolic link") && w.to_string().contains(&lnk)),
        "{:?}",
        r.warnings
    );
    assert!(fs::symlink_metadata(ws.join("lnk")).is_err() && ws.join("real/evil/.git/config").is_file());
    for args in [&["ls-files", "--recurse-submodules"][..], &["grep", "--recurse-submodules", "-l", "x"], &["status"]] {
        drop(git_in(ws.path(), args));
        assert!(!m.take(), "host git {args:?} ran the planted fsmonitor");
    }
    // Control: through the link again, git enters it.
    symlink("real", ws.join("lnk")).unwrap_or_else(|e| panic!("{e}"));
    drop(git_in(ws.path(), &["ls-files", "--recurse-submodules"]));
    assert!(m.take(), "control: git ls-files --recurse-submodules did not enter lnk/evil");
    // Planning: the same gitlink and link before a writable run.
    let config = ws.read("real/evil/.git/config");
    match run(&writable(&ws, &format!("{} >> real/evil/.git/config", m.fsmonitor()))) {
        Err(SandboxError::UnsafePath { message: msg, .. }) => {
            assert!(msg.contains("symbolic link") && msg.contains(&lnk) && msg.contains("rm -q --cached"), "{msg}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(ws.read("real/evil/.git/config"), config);
    // Control: the directory in place of the link is a protected submodule.
    fs::remove_file(ws.join("lnk")).unwrap_or_else(|e| panic!("{e}"));
    fs::rename(ws.join("real"), ws.join("lnk")).unwrap_or_else(|e| panic!("{e}"));
    let r = run_ok(&writable(&ws, &format!("{} >> lnk/evil/.git/config", m.fsmonitor())));
    assert!(r.outcome.code() != Some(0) && stderr(&r).contains("Read-only file system"), "{}", stderr(&r));
    assert_eq!(ws.read("lnk/evil/.git/config"), config);
}

/// The third review's r04 (N2): a linked worktree's own index
/// (`.git/worktrees/<id>/index`) was never read, so a gitlink a run added
/// there (to a repository it made in the worktree) was not quarantined, and
/// host git status inside the worktree ran the planted filter. Now
/// `wt/evil/.git` is quarantined, the warning names that index, and host git
/// with the four flags in `wt` runs nothing; restored, it runs the filter
/// (the control). The same for a worktree the run itself adds (`git
/// worktree add wt2`), whose index the plan could not know.
#[test]
fn r0111_a_linked_worktrees_own_index_is_read() {
    let m = Marker::new();
    let ws = repo();
    git_ok(ws.path(), &["worktree", "add", "-q", "wt"]);
    for (wt, add) in [("wt", ""), ("wt2", "git worktree add -q wt2 2>/dev/null;")] {
        let script = format!(
            "set -e; {add} cd {wt}; {}
             {G} update-index --add --cacheinfo 160000,$(git -C evil rev-parse HEAD),evil; echo planted",
            evil_repo("evil", "evil", &m)
        );
        let r = run_ok(&writable(&ws, &script));
        assert_eq!((r.outcome.code(), stdout(&r).as_str()), (Some(0), "planted\n"), "{}", stderr(&r));
        let index = ws.join(".git/worktrees").join(wt).join("index").display().to_string();
        assert!(r.warnings.iter().any(|w| w.to_string().contains(&index)), "{wt}: {:?}", r.warnings);
        let tree = ws.join(wt);
        assert!(!tree.join("evil/.git").exists(), "{wt}: {:?}", r.warnings);
        let mut all = README_FLAGS.to_vec();
        all.push("status");
        drop(git_in(&tree, &all));
        assert!(!m.take(), "{wt}: host git status with the four flags in the worktree ran the planted filter");
        restore(&tree.join("evil"));
        touch_dirty(&tree.join("evil/f"));
        drop(git_in(&tree, &all));
        assert!(m.take(), "{wt}: control: the restored repository's filter did not run");
    }
}

/// Run each of `scripts` with `sh -c` on the host in `twin` (the control of
/// a two-run attack: the same steps without the sandbox), isolated from the
/// caller's git configuration; each must succeed.
fn on_host(twin: &Ws, scripts: &[String]) {
    for script in scripts {
        let out = Command::new("sh")
            .args(["-c", script])
            .current_dir(twin.path())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(out.status.success(), "host: {}", String::from_utf8_lossy(&out.stderr));
    }
}

/// The fourth review: a submodule `.git` file whose target does not exist
/// yet (run 1 writes `.gitmodules` and `evil/.git` = `gitdir:
/// ../.git/modules/x`) made the tree look protected, but nothing guarded the
/// target; run 2 made `.git/modules/x` a repository with a clean filter and
/// added the gitlink, and the README-flags `git status` ran the filter. The
/// missing target is guarded now: removed after the run that creates it.
#[test]
fn r0116_a_gitfile_naming_a_missing_git_dir_is_guarded() {
    let plant = |m: &Marker| {
        format!(
            "set -e; here=$(pwd); b=$(mktemp -d)
             {G} init -q \"$b\" && cd \"$b\" && echo x > f && {G} add f && {G} commit -qm x && cd \"$here\"
             mkdir -p .git/modules && cp -a \"$b/.git\" .git/modules/x
             git --git-dir=.git/modules/x config core.worktree ../../../evil
             git --git-dir=.git/modules/x config filter.pwn.clean \"sh -c 'touch {m}; cat'\"
             cp \"$b/f\" evil/f; echo '* filter=pwn' > evil/.gitattributes
             git update-index --add --cacheinfo 160000,$(git --git-dir=.git/modules/x rev-parse HEAD),evil
             touch -m -d @1000000000 evil/f; rm -rf \"$b\"",
            m = m.path().display()
        )
    };
    let first = "printf '[submodule \"e\"]\\n\\tpath = evil\\n\\turl = ./evil\\n\\tignore = none\\n' > .gitmodules \
                 && mkdir evil && echo 'gitdir: ../.git/modules/x' > evil/.git";

    // Control: without the sandbox's guard (the same two steps on the host)
    // the README-flags status runs the planted filter.
    let m = Marker::new();
    let twin = repo();
    on_host(&twin, &[first.to_string(), plant(&m)]);
    four(&twin, &["status"]);
    assert!(m.take(), "control: the planted filter did not run on the host");

    let m = Marker::new();
    let ws = repo();
    let r = run_ok(&writable(&ws, first));
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    let r = run_ok(&writable(&ws, &plant(&m)));
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    assert!(
        r.warnings
            .iter()
            .any(|w| w.to_string().contains(".git/modules/x") && w.to_string().contains("created by the command")),
        "{:?}",
        r.warnings
    );
    assert!(!ws.join(".git/modules/x").exists(), "the planted git dir is still there");
    four(&ws, &["status"]);
    four(&ws, &["diff"]);
    drop(git_in(ws.path(), &["status"]));
    assert!(!m.take(), "host git ran the planted filter");
}

/// The fifth review: a dangling `.git` link in a submodule tree whose target
/// has a `..` after a missing directory (`evil/.git ->
/// ../.git/modules/nothere/../x`) could not be resolved, and an unresolvable
/// way was read as one without a replaceable link; the next run made
/// `.git/modules/x` a repository with a clean filter and added the gitlink.
/// Every link met counts now, so that run is refused.
#[test]
fn r0117_a_dangling_dot_git_link_with_dotdot_refuses_the_next_writable_run() {
    let first = "printf '[submodule \"e\"]\\n\\tpath = evil\\n\\turl = ./evil\\n\\tignore = none\\n' > .gitmodules \
                 && mkdir evil && ln -s ../.git/modules/nothere/../x evil/.git";
    let plant = |m: &Marker| {
        format!(
            "set -e; here=$(pwd); b=$(mktemp -d)
             {G} init -q \"$b\" && cd \"$b\" && echo x > f && {G} add f && {G} commit -qm x && cd \"$here\"
             mkdir -p .git/modules/nothere && cp -a \"$b/.git\" .git/modules/x
             git --git-dir=.git/modules/x config core.worktree ../../../evil
             git --git-dir=.git/modules/x config filter.pwn.clean \"sh -c 'touch {m}; cat'\"
             cp \"$b/f\" evil/f; echo '* filter=pwn' > evil/.gitattributes
             git update-index --add --cacheinfo 160000,$(git --git-dir=.git/modules/x rev-parse HEAD),evil
             touch -m -d @1000000000 evil/f; rm -rf \"$b\"",
            m = m.path().display()
        )
    };
    // Control: the same two steps on the host make the README-flags status
    // run the planted filter.
    let m = Marker::new();
    let twin = repo();
    on_host(&twin, &[first.to_string(), plant(&m)]);
    four(&twin, &["status"]);
    assert!(m.take(), "control: the planted filter did not run on the host");

    let m = Marker::new();
    let ws = repo();
    let r = run_ok(&writable(&ws, first));
    assert_eq!(r.outcome.code(), Some(0), "{}", stderr(&r));
    match run(&writable(&ws, &plant(&m))) {
        Err(SandboxError::UnsafePath { message: msg, .. }) => {
            assert!(msg.contains("evil/.git") && msg.contains("symbolic link"), "{msg}")
        }
        other => panic!("expected the run to be refused, got {other:?}"),
    }
    assert!(!ws.join(".git/modules/x").exists(), "the refused run made the git dir");
    four(&ws, &["status"]);
    four(&ws, &["diff"]);
    assert!(!m.take(), "host git ran the planted filter");
}
