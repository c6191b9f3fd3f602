//! Adversarial review of the file tools' directory capability
//! (`portcullis::path::dir`, `workspace::{files, list, search}`), attacked
//! from outside: a path changed between judgement and open for every
//! operation in both resolutions, hard links to files outside, a file
//! that grows while it is read, a directory swapped for a link while
//! `glob` walks, owner and mode on replace, temporary files, odd names.
//! Each test has a control (the same operation works without the attack).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use portcullis::path::dir::Resolution;
use portcullis::path::DenyGlobs;
use portcullis::policy::{PathAccess, PolicyError};
use portcullis::workspace::files::{sha256_hex, Edit, FileError, Files, Judged, ReadOptions};
use portcullis::workspace::list::{list_dir, ListOptions};
use portcullis::workspace::search::{glob, grep, GrepOptions};

use super::util::*;

const BOTH: [Resolution; 2] = [Resolution::Openat2, Resolution::Walk];

fn files(ws: &Path, res: Resolution) -> Files {
    Files::with_resolution(jail_of(ws, &[".env*", "secrets/**"]), res).unwrap_or_else(|e| panic!("files: {e}"))
}

fn judge(f: &Files, p: impl AsRef<Path>, access: PathAccess) -> Judged {
    let p = p.as_ref();
    f.judge(p, access).unwrap_or_else(|e| panic!("judge {}: {e}", p.display()))
}

fn edit(old: &str, new: &str) -> Edit {
    Edit { old: old.into(), new: new.into(), replace_all: false }
}

fn no_deny() -> DenyGlobs {
    DenyGlobs::new(&[]).unwrap_or_else(|e| panic!("{e}"))
}

/// `<tmp>/ws` with `a/b/f.txt`, and `<tmp>/outside/` holding a secret at
/// the same relative places (`b/f.txt`, `f.txt`).
struct Pair {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
}

fn pair() -> Pair {
    let dir = tempfile::Builder::new().prefix("pc-wsr-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("{e}"));
    let ws = dir.path().join("ws");
    let outside = dir.path().join("outside");
    for d in [ws.join("a/b"), outside.join("b")] {
        std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{e}"));
    }
    for (p, s) in [
        (ws.join("a/b/f.txt"), "inside\n"),
        (outside.join("b/f.txt"), "SECRET\n"),
        (outside.join("f.txt"), "SECRET\n"),
        (outside.join("only-outside"), "SECRET\n"),
        (outside.join("b/only-outside"), "SECRET\n"),
    ] {
        std::fs::write(p, s).unwrap_or_else(|e| panic!("{e}"));
    }
    Pair { _dir: dir, ws, outside }
}

/// Where the link is swapped in after the judgement.
#[derive(Clone, Copy, Debug)]
enum Swap {
    /// `a` becomes a link to `outside` (two levels above the file).
    Top,
    /// `a/b` becomes a link to `outside` (the file's own directory).
    Parent,
    /// `a/b/f.txt` itself becomes a link to `outside/f.txt`.
    Last,
}

fn swap(p: &Pair, s: Swap) {
    let (at, to) = match s {
        Swap::Top => (p.ws.join("a"), p.outside.clone()),
        Swap::Parent => (p.ws.join("a/b"), p.outside.clone()),
        Swap::Last => (p.ws.join("a/b/f.txt"), p.outside.join("f.txt")),
    };
    std::fs::rename(&at, at.with_extension("old")).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(&to, &at).unwrap_or_else(|e| panic!("{e}"));
}

/// Every file operation, judged before a link is swapped into the path and
/// run after, in both resolutions and at every depth: nothing outside is
/// read, written, made or removed, and the operations on a changed parent
/// fail as `Changed` (ELOOP). r0308 covers one swap depth; this is every
/// operation (multi_edit, nested creation, list_dir, grep included) at
/// every depth. Control: the same judged operations without the swap work.
#[test]
fn r0350_every_operation_judged_before_a_link_swap_touches_nothing_outside() {
    let rt = rt();
    for res in BOTH {
        for s in [None, Some(Swap::Top), Some(Swap::Parent), Some(Swap::Last)] {
            let p = pair();
            let f = files(&p.ws, res);
            let jr = judge(&f, "a/b/f.txt", PathAccess::Read);
            let jw = judge(&f, "a/b/f.txt", PathAccess::Write);
            let jn = judge(&f, "a/b/new.txt", PathAccess::Write);
            let jp = judge(&f, "a/b/n1/n2/g.txt", PathAccess::Write);
            let jm = judge(&f, "a/b/d/e", PathAccess::Write);
            let jx = f.judge_remove(Path::new("a/b/f.txt")).unwrap_or_else(|e| panic!("{e}"));
            if let Some(s) = s {
                swap(&p, s);
            }
            let before = snapshot(&p.outside);
            let ctx = format!("{res:?} {s:?}");
            let mut results: Vec<(&str, Result<String, FileError>)> = vec![
                ("read", rt.block_on(f.read_file(&jr, ReadOptions::default())).map(|w| w.content)),
                ("exists", rt.block_on(f.exists(&jr)).map(|b| b.to_string())),
                ("edit", rt.block_on(f.edit_file(&jw, edit("SECRET", "pwned"), None)).map(|e| e.hash)),
                (
                    "multi_edit",
                    rt.block_on(f.multi_edit(&jw, vec![edit("SECRET", "x"), edit("x", "pwned")], None)).map(|e| e.hash),
                ),
                ("create", rt.block_on(f.write_file(&jn, b"pwned\n".to_vec())).map(|w| w.hash)),
                ("create-parents", rt.block_on(f.write_file(&jp, b"pwned\n".to_vec())).map(|w| w.hash)),
                ("mkdir", rt.block_on(f.mkdir(&jm)).map(|()| String::new())),
                ("write", rt.block_on(f.write_file(&jw, b"pwned\n".to_vec())).map(|w| w.hash)),
            ];
            results.push(("remove", rt.block_on(f.remove(&jx)).map(|()| String::new())));
            assert_eq!(snapshot(&p.outside), before, "{ctx}: nothing outside changed");
            for (op, r) in &results {
                match (s, r) {
                    // Control: all of it works without the swap (the edits
                    // find no SECRET inside: NotFound, the file untouched).
                    (None, Err(FileError::NotFound { .. })) if op.contains("edit") => {}
                    (None, Ok(out)) => assert!(!out.contains("SECRET"), "{ctx} {op}"),
                    (Some(Swap::Top | Swap::Parent), Err(FileError::Changed { source, .. })) => {
                        assert_eq!(source.raw_os_error(), Some(libc::ELOOP), "{ctx} {op}: {source}")
                    }
                    // The file itself is a link now: not read through, not
                    // written through; exists and remove act on the link.
                    (Some(Swap::Last), Err(FileError::Changed { source, .. })) => {
                        assert_eq!(source.raw_os_error(), Some(libc::ELOOP), "{ctx} {op}: {source}")
                    }
                    (Some(Swap::Last), Err(FileError::NotRegular { .. })) if *op == "write" => {}
                    (Some(Swap::Last), Ok(out))
                        if ["exists", "create", "create-parents", "mkdir", "remove"].contains(op) =>
                    {
                        assert!(!out.contains("SECRET"), "{ctx} {op}")
                    }
                    (_, other) => panic!("{ctx} {op}: {other:?}"),
                }
            }
            assert_eq!(std::fs::read_to_string(p.outside.join("f.txt")).ok().as_deref(), Some("SECRET\n"), "{ctx}");
            assert_eq!(std::fs::read_to_string(p.outside.join("b/f.txt")).ok().as_deref(), Some("SECRET\n"), "{ctx}");
            if let Some(Swap::Last) = s {
                assert!(p.outside.join("f.txt").exists(), "{ctx}: remove took the link, not its target");
            }
            // list_dir and grep of the swapped directory: nothing from outside.
            let ws = std::fs::canonicalize(&p.ws).unwrap_or_else(|e| panic!("{e}"));
            let listed = list_dir(&ws, &no_deny(), Path::new("a/b"), &ListOptions::default());
            if let Ok(l) = &listed {
                assert!(!l.entries.iter().any(|e| e.path.to_string_lossy().contains("only-outside")), "{ctx}: {l:?}");
            }
            assert_eq!(listed.is_ok(), matches!(s, None | Some(Swap::Last)), "{ctx}: {listed:?}");
            let mut o = GrepOptions::new("SECRET");
            o.path = Some(PathBuf::from("a"));
            if let Ok(g) = grep(&ws, &no_deny(), &o) {
                assert!(g.matches.is_empty(), "{ctx}: grep found {:?}", g.matches);
            }
        }
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("runtime: {e}"))
}

/// A file that another process appends to as fast as it can while it is
/// read: the read (and grep, and the edit's read) takes the file as it was
/// when opened, so it ends, its `total_bytes` is at most what the file held
/// by then, and its hash is of exactly the bytes it counted. Before the
/// fix a read streamed to whatever end-of-file it reached, racing the
/// writer (a log being written by a background job could keep a read
/// going, and its memory and time, unbounded).
#[test]
fn r0351_a_file_growing_while_read_is_read_as_it_was_when_opened() {
    let ws = Ws::new();
    let log = ws.join("grow.log");
    let chunk = vec![b'x'; 1 << 20];
    let mut first = chunk.clone();
    first.push(b'\n');
    std::fs::write(&log, &first).unwrap_or_else(|e| panic!("{e}"));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, log) = (Arc::clone(&stop), log.clone());
        std::thread::spawn(move || {
            use std::io::Write;
            let Ok(mut f) = std::fs::OpenOptions::new().append(true).open(&log) else { return 0u64 };
            let mut n = 0u64;
            // 40 MiB/s, faster than a debug build hashes, for at most
            // 8 s (320 MiB), so a broken read still ends.
            while !stop.load(Ordering::Relaxed) && n < 320 {
                if f.write_all(&chunk).is_err() {
                    break;
                }
                n += 1;
                std::thread::sleep(Duration::from_millis(25));
            }
            n
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    let rt = rt();
    let f = files(ws.path(), Resolution::Openat2);
    let j = judge(&f, "grow.log", PathAccess::Read);
    let root = std::fs::canonicalize(ws.path()).unwrap_or_default();
    let mut o = GrepOptions::new("needle");
    o.max_line_bytes = 1 << 30;
    let g = grep(&root, &no_deny(), &o);
    let size_before = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    let t = Instant::now();
    let w = rt.block_on(f.read_file(&j, ReadOptions { offset: 1, limit: Some(1), max_bytes: Some(100) }));
    let took = t.elapsed();
    // Both ended while the writer was still writing (it stops after 8 s).
    let still_writing = !writer.is_finished();
    stop.store(true, Ordering::Relaxed);
    let chunks = writer.join().unwrap_or(0);
    let w = w.unwrap_or_else(|e| panic!("read: {e}"));
    assert!(chunks > 4, "the writer kept writing during the read ({chunks} MiB)");
    // Taken at the open: not less than before it, far less than the writer wrote.
    assert!(w.total_bytes >= size_before, "{} < {size_before}", w.total_bytes);
    let size_after = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    assert!(
        w.total_bytes < size_after,
        "the read ran to the writer's end: {} of {size_after} ({took:?})",
        w.total_bytes
    );
    // The hash is of the bytes counted: the file's prefix of that length.
    let all = std::fs::read(&log).unwrap_or_default();
    let n = usize::try_from(w.total_bytes).unwrap_or(usize::MAX).min(all.len());
    assert_eq!(w.hash, sha256_hex(&all[..n]));
    assert!(g.is_ok(), "{g:?}");
    assert!(still_writing, "grep or the read ran until the writer stopped ({chunks} MiB, read took {took:?})");
}

/// A replaced file keeps its owner and mode: a root caller's write or edit
/// of another user's file leaves it that user's (before the fix it became
/// root's, and the user could no longer write their own file); setuid and
/// setgid are dropped, as before. Control: a new file is the caller's.
#[test]
fn r0352_a_replaced_file_keeps_its_owner_and_mode() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let ws = Ws::new();
    ws.write("own.txt", "one\n");
    let p = ws.join("own.txt");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o640)).unwrap_or_else(|e| panic!("{e}"));
    let owner = if in_root_pass("r0352", "chown to another user") {
        std::os::unix::fs::chown(&p, Some(1234), Some(2345)).unwrap_or_else(|e| panic!("{e}"));
        (1234, 2345)
    } else {
        let m = std::fs::metadata(&p).unwrap_or_else(|e| panic!("{e}"));
        (m.uid(), m.gid())
    };
    let rt = rt();
    for res in BOTH {
        let f = files(ws.path(), res);
        let j = judge(&f, "own.txt", PathAccess::Write);
        rt.block_on(f.write_file(&j, b"two\n".to_vec())).unwrap_or_else(|e| panic!("{e}"));
        let m = std::fs::metadata(&p).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (owner.0, owner.1, 0o640), "{res:?} write");
        rt.block_on(f.edit_file(&j, edit("two", "three"), None)).unwrap_or_else(|e| panic!("{e}"));
        let m = std::fs::metadata(&p).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (owner.0, owner.1, 0o640), "{res:?} edit");
        assert_eq!(ws.read("own.txt"), "three\n");
        std::fs::write(&p, "two\n").unwrap_or_else(|e| panic!("{e}"));
    }
    // Control: a new file belongs to the caller.
    let f = files(ws.path(), Resolution::Openat2);
    let j = judge(&f, "new.txt", PathAccess::Write);
    rt.block_on(f.write_file(&j, b"n\n".to_vec())).unwrap_or_else(|e| panic!("{e}"));
    let m = std::fs::metadata(ws.join("new.txt")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.uid(), nix::unistd::getuid().as_raw());
}

/// A name in the workspace that is a hard link to a file outside it (made
/// on the host: a sandboxed command cannot make one, Landlock refuses the
/// link with EXDEV, and protected_hardlinks lets only someone who may read
/// and write the file link it). The decision (docs/threat-model.md): the
/// file tools read it — it is a file of the workspace, and whoever linked
/// it could read it — but never write through it: a write or an edit
/// replaces the name with a new file (temp + rename), a remove unlinks the
/// name only, so the other name's content, inode and link count outside
/// are untouched. Control: the name in the workspace does change.
#[test]
fn r0353_a_hard_link_to_a_file_outside_is_read_but_never_written_through() {
    use std::os::unix::fs::MetadataExt;
    let rt = rt();
    for res in BOTH {
        let p = pair();
        let secret = p.outside.join("f.txt");
        std::fs::hard_link(&secret, p.ws.join("linked.txt")).unwrap_or_else(|e| panic!("{e}"));
        let ino = std::fs::metadata(&secret).map(|m| m.ino()).unwrap_or(0);
        let f = files(&p.ws, res);
        let w = rt
            .block_on(f.read_file(&judge(&f, "linked.txt", PathAccess::Read), ReadOptions::default()))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(w.content.contains("SECRET"), "{res:?}: read as the workspace's file");
        let j = judge(&f, "linked.txt", PathAccess::Write);
        rt.block_on(f.edit_file(&j, edit("SECRET", "edited"), None)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(std::fs::read_to_string(p.ws.join("linked.txt")).ok().as_deref(), Some("edited\n"));
        let m = std::fs::metadata(&secret).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((std::fs::read_to_string(&secret).ok().as_deref(), m.ino(), m.nlink()), (Some("SECRET\n"), ino, 1));
        std::fs::remove_file(p.ws.join("linked.txt")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::hard_link(&secret, p.ws.join("linked.txt")).unwrap_or_else(|e| panic!("{e}"));
        rt.block_on(f.write_file(&j, b"written\n".to_vec())).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(std::fs::read_to_string(&secret).ok().as_deref(), Some("SECRET\n"), "{res:?} write");
        std::fs::remove_file(p.ws.join("linked.txt")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::hard_link(&secret, p.ws.join("linked.txt")).unwrap_or_else(|e| panic!("{e}"));
        let jx = f.judge_remove(Path::new("linked.txt")).unwrap_or_else(|e| panic!("{e}"));
        rt.block_on(f.remove(&jx)).unwrap_or_else(|e| panic!("{e}"));
        assert!(!p.ws.join("linked.txt").exists());
        assert_eq!(std::fs::read_to_string(&secret).ok().as_deref(), Some("SECRET\n"), "{res:?} remove");
    }
}

/// `glob` while a directory of the workspace is swapped, again and again,
/// for a link to a directory outside: the walker lists a directory by its
/// path, so before the fix it listed the outside directory's names as if
/// they were the workspace's. Every name it returns is now checked to be a
/// regular file below the root, reached without a link. Control: the same
/// glob without the swap finds the workspace's own file.
#[test]
fn r0354_glob_lists_no_name_from_outside_while_a_directory_is_swapped() {
    let p = pair();
    let root = std::fs::canonicalize(&p.ws).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(p.ws.join("a/b/mine-1"), "x").unwrap_or_else(|e| panic!("{e}"));
    for i in 0..50 {
        std::fs::write(p.outside.join(format!("b/only-outside-{i}")), "x").unwrap_or_else(|e| panic!("{e}"));
    }
    let control = glob(&root, &no_deny(), "**/*-1", 1000).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(control.paths, vec!["a/b/mine-1".to_string()]);
    let stop = Arc::new(AtomicBool::new(false));
    let toggler = {
        let (stop, a, real, link_to) = (Arc::clone(&stop), p.ws.join("a"), p.ws.join("a.real"), p.outside.clone());
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // `a` is the real directory, then a link to outside, then back.
                let _ = std::fs::rename(&a, &real);
                let _ = std::os::unix::fs::symlink(&link_to, &a);
                std::thread::sleep(Duration::from_micros(100));
                let _ = std::fs::remove_file(&a);
                let _ = std::fs::rename(&real, &a);
                std::thread::sleep(Duration::from_micros(100));
                flips += 1;
            }
            flips
        })
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut leaked = Vec::new();
    let mut rounds = 0;
    while Instant::now() < deadline && leaked.is_empty() {
        if let Ok(r) = glob(&root, &no_deny(), "**/*", 1000) {
            leaked.extend(r.paths.into_iter().filter(|p| p.contains("only-outside")));
        }
        rounds += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let flips = toggler.join().unwrap_or(0);
    assert!(flips > 10, "the swap ran ({flips} flips in {rounds} globs)");
    assert!(leaked.is_empty(), "glob listed names outside the workspace after {rounds} rounds: {leaked:?}");
}

/// The spellings an attacker tries, each judged and run: `..` out and
/// back, absolute paths inside and out, deny globs by the spelled path
/// (a link named `.env.local`) and by the resolved one (`a/../.env`, a link
/// `cfg -> .env`), `/proc` magic links, names with a newline or bytes that
/// are not UTF-8, a 255-byte name (its temporary name still fits
/// NAME_MAX), a 256-byte one and a path past PATH_MAX (typed errors, no
/// panic). Controls: the plain spellings of the same files work.
#[test]
fn r0355_spellings_dotdot_absolute_deny_magic_links_and_odd_names() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let rt = rt();
    let p = pair();
    std::fs::write(p.ws.join(".env"), "TOKEN=1\n").unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(".env", p.ws.join("cfg")).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink("a/b/f.txt", p.ws.join(".env.local")).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink("/proc/self/root/etc/passwd", p.ws.join("magic")).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink("/proc/self/cwd", p.ws.join("cwd")).unwrap_or_else(|e| panic!("{e}"));
    let ws = std::fs::canonicalize(&p.ws).unwrap_or_else(|e| panic!("{e}"));
    for res in BOTH {
        let f = files(&p.ws, res);
        let escape = |path: &Path, access| match f.judge(path, access) {
            Err(FileError::Jail(PolicyError::PathEscape { .. })) => {}
            other => panic!("{res:?} {}: want PathEscape, got {other:?}", path.display()),
        };
        for bad in [
            PathBuf::from("a/../../outside/f.txt"),
            PathBuf::from("../outside/f.txt"),
            p.outside.join("f.txt"),
            PathBuf::from(".env"),
            PathBuf::from("a/../.env"),
            PathBuf::from("./a/b/../../.env"),
            PathBuf::from("cfg"),
            PathBuf::from(".env.local"),
            PathBuf::from("magic"),
            PathBuf::from("cwd/x"),
            PathBuf::from("/proc/self/root").join(ws.strip_prefix("/").unwrap_or(&ws)).join("a/b/f.txt"),
        ] {
            escape(&bad, PathAccess::Read);
            escape(&bad, PathAccess::Write);
        }
        // Controls: the same files, spelled plainly.
        for good in [PathBuf::from("a/b/../b/f.txt"), ws.join("a/b/f.txt"), PathBuf::from("./a//b/f.txt")] {
            let j = judge(&f, &good, PathAccess::Read);
            let w = rt.block_on(f.read_file(&j, ReadOptions::default())).unwrap_or_else(|e| panic!("{e}"));
            assert!(w.content.contains("inside"), "{res:?} {}", good.display());
        }
        // Odd names: written, read back, listed.
        let long = "n".repeat(255);
        for name in [OsStr::new("new\nline.txt"), OsStr::from_bytes(b"caf\xe9.txt"), OsStr::new(&long)] {
            let j = judge(&f, Path::new(name), PathAccess::Write);
            rt.block_on(f.write_file(&j, b"odd\n".to_vec())).unwrap_or_else(|e| panic!("{res:?} {name:?}: {e}"));
            rt.block_on(f.write_file(&j, b"odd2\n".to_vec())).unwrap_or_else(|e| panic!("{res:?} {name:?}: {e}"));
            assert_eq!(std::fs::read(p.ws.join(name)).ok().as_deref(), Some(&b"odd2\n"[..]), "{res:?} {name:?}");
            let w = rt.block_on(f.read_file(&j, ReadOptions::default())).unwrap_or_else(|e| panic!("{e}"));
            assert!(w.content.contains("odd2"));
        }
        let listed =
            list_dir(&ws, &no_deny(), Path::new(""), &ListOptions::default()).unwrap_or_else(|e| panic!("{e}"));
        for name in [&b"new\nline.txt"[..], b"caf\xe9.txt", long.as_bytes()] {
            assert!(listed.entries.iter().any(|e| e.path.as_os_str().as_bytes() == name), "{res:?} {listed:?}");
        }
        // Too long: typed errors, nothing made.
        let too_long = "n".repeat(256);
        let r = f.judge(Path::new(&too_long), PathAccess::Write).map(|j| rt.block_on(f.write_file(&j, b"x".to_vec())));
        assert!(matches!(r, Err(FileError::Jail(_)) | Ok(Err(FileError::Io { .. }))), "{res:?}: {r:?}");
        let deep: PathBuf = (0..500).map(|i| format!("d{i:07}")).collect();
        let r = f.judge(&deep, PathAccess::Write).map(|j| rt.block_on(f.write_file(&j, b"x".to_vec())));
        assert!(matches!(r, Err(FileError::Jail(_)) | Ok(Err(FileError::Io { .. }))), "{res:?}: {r:?}");
        assert!(!p.ws.join("d0000000").exists(), "{res:?}: nothing of the too-deep path was made");
    }
    // No temporary file is left beside any of them.
    let left: Vec<_> = std::fs::read_dir(&p.ws)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().as_bytes().windows(12).any(|w| w == b".portcullis-"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
