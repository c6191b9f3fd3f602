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
        "set -e; mkdir evil; cd evil; {G} init -q .; echo x > f; {G} add f; {G} commit -qm x
         git config filter.pwn.clean \"sh -c 'touch {m}; cat'\"
         echo '* filter=pwn' > .gitattributes; cd ..
         {G} update-index --add --cacheinfo 160000,$(git -C evil rev-parse HEAD),evil
         printf '[submodule \"evil\"]\\n\\tpath = evil\\n\\turl = ./evil\\n\\tignore = none\\n' > .gitmodules
         touch -m -d @1000000000 evil/f; echo planted",
        m = m.path().display()
    );
    let r = run_ok(&writable(&ws, &script));
    assert_eq!((r.exit_code, stdout(&r).as_str()), (Some(0), "planted\n"), "{}", stderr(&r));
    assert!(!ws.join("evil/.git").exists(), "{:?}", r.warnings);
    let w = r
        .warnings
        .iter()
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
    assert_eq!((r.exit_code, stdout(&r).as_str()), (Some(0), "added\n"), "{}\n{:?}", stderr(&r), r.warnings);
    assert!(!ws.join("vendor/lib/.git").exists(), "{:?}", r.warnings);
    assert_eq!(ws.read("vendor/lib/lib.c"), "lib\n");
    assert!(ws.join(".git/modules/vendor/lib/HEAD").is_file());
    let w = r
        .warnings
        .iter()
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
    assert!(!r.warnings.iter().any(|w| w.contains("submodule the command added")), "{:?}", r.warnings);
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
        assert_eq!((r.exit_code, stdout(&r).as_str()), (Some(0), want), "{}", stderr(&r));
        if want == "two\n" {
            assert!(
                r.warnings.iter().any(|w| w.contains("vendor/lib/.git created by the command")),
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
    assert!(r.exit_code != Some(0) && stderr(&r).contains("Read-only file system"), "{}", stderr(&r));
    assert_eq!(ws.read("emb/.git/config"), config);
    drop(git_in(ws.path(), &["status"]));
    assert!(!m.take(), "plain host git status ran the planted fsmonitor");
    // Control: emb no longer a submodule, the write goes through.
    let r = run_ok(&writable(&ws, &format!("{G} rm -q --cached emb && echo out")));
    assert_eq!(stdout(&r), "out\n", "{}", stderr(&r));
    let r = run_ok(&writable(&ws, &plant_emb(&m)));
    assert_eq!((r.exit_code, stdout(&r).as_str()), (Some(0), "wrote\n"), "{}", stderr(&r));
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
        Err(SandboxError::BadRequest(msg)) => {
            assert!(msg.contains(".git/index is a symbolic link") && msg.contains("cp --remove-destination"), "{msg}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(ws.read("emb/.git/config"), config);
    drop(git_in(ws.path(), &["status"]));
    assert!(!m.take(), "plain host git status ran the planted fsmonitor");
    // A read-only run is not refused (nothing to protect).
    let r = run_ok(&ws.req(&["true"]));
    assert_eq!(r.exit_code, Some(0), "{}", stderr(&r));
    // Control: the link replaced by its file, the run goes ahead and is
    // stopped by the carve-out.
    fs::remove_file(ws.join(".git/index")).unwrap_or_else(|e| panic!("{e}"));
    fs::rename(ws.join(".git/index.real"), ws.join(".git/index")).unwrap_or_else(|e| panic!("{e}"));
    let r = run_ok(&writable(&ws, &plant_emb(&m)));
    assert!(r.exit_code != Some(0) && stderr(&r).contains("Read-only file system"), "{}", stderr(&r));
    assert_eq!(ws.read("emb/.git/config"), config);
    // A `.gitmodules` that is a link refuses too.
    fs::rename(ws.join(".gitmodules"), ws.join(".gitmodules.real")).unwrap_or_else(|e| panic!("{e}"));
    symlink(".gitmodules.real", ws.join(".gitmodules")).unwrap_or_else(|e| panic!("{e}"));
    match run(&writable(&ws, "true")) {
        Err(SandboxError::BadRequest(msg)) => assert!(msg.contains(".gitmodules is a symbolic link"), "{msg}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
}
