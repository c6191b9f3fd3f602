//! The command's stdin: it never holds the caller's pipe or socket itself,
//! and input it does not read stays with the caller.
//!
//! Each test drives the CLI the way a user does (a shell pipeline or a
//! socket as its stdin) and checks from outside, on the caller's side, what
//! the caller can still read. They run in the full sandbox and, for an
//! unprivileged caller, in the landlock-only mode (which root cannot use,
//! see `degraded::r0033_landlock_only_mode_is_a_named_degradation`).

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::process::{Command, Output, Stdio};

use super::util::*;

/// The sandbox modes to try: the full sandbox always, the landlock-only mode
/// for an unprivileged caller on a kernel that offers it.
fn modes(test: &str) -> Vec<(&'static str, &'static str)> {
    let mut out = vec![("full", "")];
    if is_root() {
        eprintln!("{test}: the landlock-only mode is exercised in the unprivileged pass (running as root)");
    } else if available(test, portcullis::doctor_landlock_abi() >= 6, "landlock-only mode needs Landlock ABI 6") {
        out.push(("landlock-only", "--degraded landlock-only"));
    }
    out
}

/// Run `script` under `sh -c` with `$P` the CLI, `$W` the workspace and
/// `$M` the mode's flags (unquoted on purpose: empty or two words).
fn sh(ws: &Ws, mode: &str, script: &str) -> Output {
    Command::new("sh")
        .args(["-c", script])
        .env("P", bin_dir().join("portcullis"))
        .env("W", ws.path())
        .env("M", mode)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("sh: {e}"))
}

fn text(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn both(o: &Output) -> String {
    format!("stdout: {}\nstderr: {}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// The CLI with a socket as its stdin; returns the output.
fn cli_on_socket(ws: &Ws, mode: &str, stdin: UnixStream, argv: &[&str]) -> Output {
    let w = ws.path().display().to_string();
    let mut args = vec!["exec", "--workspace", w.as_str()];
    args.extend(mode.split_whitespace());
    args.push("--");
    args.extend_from_slice(argv);
    cli().args(&args).stdin(Stdio::from(OwnedFd::from(stdin))).output().unwrap_or_else(|e| panic!("cli: {e}"))
}

fn pair() -> (UnixStream, UnixStream) {
    UnixStream::pair().unwrap_or_else(|e| panic!("socketpair: {e}"))
}

/// Whatever is waiting on `s` now (it must not block: the peer end must be
/// shut down or the read must find data).
fn drain(s: &mut UnixStream) -> Vec<u8> {
    let mut v = Vec::new();
    s.read_to_end(&mut v).unwrap_or_else(|e| panic!("read the rest: {e}"));
    v
}

/// Found in review (issue 7): for an unprivileged caller `echo … >
/// /proc/self/fd/0` inside the command reopened the caller's own stdin pipe
/// for writing, and the caller's next read got the injected line; a socket
/// on stdin let the command write to (and shut down) the caller's peer.
/// The command now holds a fresh pipe that the library relays into, and no
/// other descriptor of the caller's.
#[test]
fn r0063_a_command_cannot_write_into_the_callers_stdin() {
    let ws = Ws::new();
    // Control: outside portcullis the same reopen injects into the caller's
    // pipe, so the checks below can see an injection.
    let o = sh(&ws, "", "printf '1\\n' | { sh -c 'echo injected > /proc/self/fd/0'; cat; }");
    let out = text(&o);
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["1", "injected"], "the control must inject: {}", both(&o));

    let (denied, rc) = if is_root() {
        // As root the command runs as host nobody, which may not open a
        // pipe of root's at all.
        ("Permission denied", "rc=2")
    } else {
        ("", "rc=0")
    };
    for (name, mode) in modes("r0063") {
        // The command injects and reads nothing: the caller reads exactly
        // its own line, nothing injected and nothing lost.
        let o = sh(
            &ws,
            mode,
            "printf '1\\n' | { \"$P\" exec --workspace \"$W\" $M -- sh -c 'echo injected > /proc/self/fd/0; echo rc=$?'; \
             echo ---; cat; }",
        );
        assert_eq!(text(&o), format!("{rc}\n---\n1\n"), "{name}: {}", both(&o));
        assert!(String::from_utf8_lossy(&o.stderr).contains(denied), "{name}: {}", both(&o));
        // Where the reopen succeeds the line lands in the command's own
        // relay pipe: the command reads it back itself. The caller's line
        // was read by the command, so the caller gets nothing more.
        let o = sh(
            &ws,
            mode,
            "printf '1\\n' | { \"$P\" exec --workspace \"$W\" $M -- sh -c 'echo injected > /proc/self/fd/0; cat'; \
             echo ---; cat; }",
        );
        let out = text(&o);
        let (cmd, caller) = out.split_once("---\n").unwrap_or_else(|| panic!("{name}: {}", both(&o)));
        let mut lines: Vec<&str> = cmd.lines().collect();
        lines.sort_unstable();
        let want = if is_root() { vec!["1"] } else { vec!["1", "injected"] };
        assert_eq!(lines, want, "{name}: {}", both(&o));
        assert_eq!(caller, "", "{name}: {}", both(&o));

        // A socket on stdin: the command's fd 0 is a pipe's read end, so it
        // can neither write to the caller's peer (EBADF) nor shut the
        // socket down (not a socket: ENOTSOCK).
        let code = "import os, socket\n\
                    try:\n    os.write(0, b'to-peer'); print('wrote')\nexcept OSError as e: print('write', e.errno)\n\
                    try:\n    socket.socket(fileno=0).shutdown(socket.SHUT_RDWR); print('shut')\n\
                    except OSError as e: print('shutdown', e.errno)\n";
        let (mine, theirs) = pair();
        theirs.shutdown(std::net::Shutdown::Write).unwrap_or_else(|e| panic!("{e}"));
        let o = cli_on_socket(&ws, mode, theirs, &["/usr/bin/python3", "-c", code]);
        assert_eq!(text(&o), format!("write {}\nshutdown {}\n", libc::EBADF, libc::ENOTSOCK), "{name}: {}", both(&o));
        let mut mine = mine;
        assert_eq!(drain(&mut mine), b"", "{name}: nothing reached the caller's peer");
    }
    // The flags of the caller's pipe are not the command's to change: its
    // O_NONBLOCK lands on its own pipe. Control: run directly, it sticks to
    // the caller's pipe.
    let set = "/usr/bin/python3 -c 'import os; os.set_blocking(0, False)'";
    let after = "/usr/bin/python3 -c 'import os; print(os.get_blocking(0))'";
    let o = sh(&ws, "", &format!("sleep 1 | {{ {set}; {after}; }}"));
    assert_eq!(text(&o), "False\n", "the control must share the flag: {}", both(&o));
    for (name, mode) in modes("r0063") {
        let o = sh(&ws, mode, &format!("sleep 1 | {{ \"$P\" exec --workspace \"$W\" $M -- {set}; {after}; }}"));
        assert_eq!(text(&o), "True\n", "{name}: {}", both(&o));
    }

    // Control for the socket: run directly, the same program writes to the
    // caller's peer.
    let (mut mine, theirs) = pair();
    let o = Command::new("/usr/bin/python3")
        .args(["-c", "import os\nos.write(0, b'to-peer')\n"])
        .stdin(Stdio::from(OwnedFd::from(theirs)))
        .output()
        .unwrap_or_else(|e| panic!("python3: {e}"));
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(drain(&mut mine), b"to-peer");

    // Nothing else of the caller's is handed on either: with an extra open
    // descriptor (fd 7, not close-on-exec) and a piped stdin, the command
    // holds only 0, 1 and 2 (3 is the listing's own), and none of them is
    // the caller's stdin pipe or stdout pipe (pipe inodes are global, so
    // the links compare across the sandbox).
    let code = "import os\n\
                print(' '.join(sorted(os.listdir('/proc/self/fd'))))\n\
                print(' '.join(os.readlink('/proc/self/fd/%d' % i) for i in range(3)))\n";
    for (name, mode) in modes("r0063") {
        let script = format!(
            "exec 7</etc/hostname; printf x | {{ readlink /proc/self/fd/0 /proc/self/fd/1; \
             \"$P\" exec --workspace \"$W\" $M -- /usr/bin/python3 -c \"{code}\"; }}"
        );
        let o = sh(&ws, mode, &script);
        let out = text(&o);
        let l: Vec<&str> = out.lines().collect();
        assert_eq!(l.len(), 4, "{name}: {}", both(&o));
        let (caller_in, caller_out) = (l[0], l[1]);
        assert!(caller_in.starts_with("pipe:") && caller_out.starts_with("pipe:"), "{name}: {}", both(&o));
        assert_eq!(l[2], "0 1 2 3", "{name}: only stdin, stdout, stderr: {}", both(&o));
        let links: Vec<&str> = l[3].split(' ').collect();
        assert_eq!(links.len(), 3, "{name}: {}", both(&o));
        for link in &links {
            assert!(link.starts_with("pipe:"), "{name}: {}", both(&o));
            assert!(*link != caller_in && *link != caller_out, "{name}: a descriptor of the caller's: {}", both(&o));
        }
    }
}

/// What "consumed" means: the bytes the command's processes have read from
/// their stdin by the time the run ends. Exactly those are taken from the
/// caller's pipe or socket; the rest stays there for the caller's next
/// reader, as if the command had run directly.
#[test]
fn r0064_input_the_command_did_not_read_stays_with_the_caller() {
    let ws = Ws::new();
    for (name, mode) in modes("r0064") {
        // A `while read` loop around portcullis keeps all its lines.
        let o = sh(
            &ws,
            mode,
            "printf '1\\n2\\n3\\n' | { n=0; while read l; do n=$((n+1)); \"$P\" exec --workspace \"$W\" $M -- true; \
             done; echo $n; }",
        );
        assert_eq!(text(&o), "3\n", "{name}: {}", both(&o));
        // Control: a command that reads everything takes it all, once.
        let o = sh(
            &ws,
            mode,
            "printf '1\\n2\\n3\\n' | { n=0; while read l; do n=$((n+1)); \"$P\" exec --workspace \"$W\" $M -- cat; \
             done; echo $n; }",
        );
        assert_eq!(text(&o), "2\n3\n1\n", "{name}: {}", both(&o));
        // A command that reads part: the caller gets exactly the rest.
        let o = sh(&ws, mode, "printf 'a\\nb\\n' | { \"$P\" exec --workspace \"$W\" $M -- head -c2 >/dev/null; cat; }");
        assert_eq!(text(&o), "b\n", "{name}: {}", both(&o));
        let o = sh(
            &ws,
            mode,
            "printf 'a\\nb\\nc\\n' | { \"$P\" exec --workspace \"$W\" $M -- sh -c 'read x; echo got $x'; cat; }",
        );
        assert_eq!(text(&o), "got a\nb\nc\n", "{name}: {}", both(&o));

        // The same for a socket on stdin.
        let (mut mine, theirs) = pair();
        mine.write_all(b"a\nb\n").unwrap_or_else(|e| panic!("{e}"));
        mine.shutdown(std::net::Shutdown::Write).unwrap_or_else(|e| panic!("{e}"));
        let keep = theirs.try_clone().unwrap_or_else(|e| panic!("{e}"));
        let o = cli_on_socket(&ws, mode, theirs, &["head", "-c2"]);
        assert_eq!(o.stdout, b"a\n", "{name}: {}", both(&o));
        let mut keep = keep;
        assert_eq!(drain(&mut keep), b"b\n", "{name}: the unread part stays in the caller's socket");
        // Control: a command that reads everything leaves nothing.
        let (mut mine, theirs) = pair();
        mine.write_all(b"a\nb\n").unwrap_or_else(|e| panic!("{e}"));
        mine.shutdown(std::net::Shutdown::Write).unwrap_or_else(|e| panic!("{e}"));
        let keep = theirs.try_clone().unwrap_or_else(|e| panic!("{e}"));
        let o = cli_on_socket(&ws, mode, theirs, &["cat"]);
        assert_eq!(o.stdout, b"a\nb\n", "{name}: {}", both(&o));
        let mut keep = keep;
        assert_eq!(drain(&mut keep), b"", "{name}");
    }
}

/// Pseudo-random bytes (xorshift), so a lost, repeated or reordered block
/// changes the hash.
fn noise(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

fn sha256(path: &std::path::Path) -> String {
    let o = Command::new("sha256sum").arg(path).output().unwrap_or_else(|e| panic!("sha256sum: {e}"));
    String::from_utf8_lossy(&o.stdout).split(' ').next().unwrap_or_default().to_string()
}

/// A big input (64 MiB) reaches the command intact through the relay, from
/// a pipe and from a socket; and when the command stops part-way, the
/// caller reads exactly the rest.
#[test]
fn r0065_a_large_input_arrives_intact_and_the_rest_stays_with_the_caller() {
    const LEN: usize = 64 << 20;
    const HEAD: usize = 1_000_003;
    let ws = Ws::new();
    let dir = tempfile::Builder::new().prefix("pc-r0065-").tempdir_in(test_root()).unwrap_or_else(|e| panic!("{e}"));
    let data = noise(LEN);
    let all = dir.path().join("all");
    std::fs::write(&all, &data).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.path().join("head"), &data[..HEAD]).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(dir.path().join("tail"), &data[HEAD..]).unwrap_or_else(|e| panic!("{e}"));
    let want = |f: &str| sha256(&dir.path().join(f));
    for (name, mode) in modes("r0065") {
        let script = format!("cat {} | \"$P\" exec --workspace \"$W\" $M -- sha256sum", all.display());
        let o = sh(&ws, mode, &script);
        assert_eq!(text(&o), format!("{}  -\n", want("all")), "{name}: {}", both(&o));
        let script = format!(
            "cat {} | {{ \"$P\" exec --workspace \"$W\" $M -- head -c {HEAD} | sha256sum; sha256sum; }}",
            all.display()
        );
        let o = sh(&ws, mode, &script);
        assert_eq!(text(&o), format!("{}  -\n{}  -\n", want("head"), want("tail")), "{name}: {}", both(&o));

        // The same from a socket, written by a thread while the command runs.
        let (mut mine, theirs) = pair();
        let keep = theirs.try_clone().unwrap_or_else(|e| panic!("{e}"));
        let writer = {
            let data = data.clone();
            std::thread::spawn(move || {
                let r = mine.write_all(&data);
                let _ = mine.shutdown(std::net::Shutdown::Write);
                r
            })
        };
        let o = cli_on_socket(&ws, mode, theirs, &["head", "-c", &HEAD.to_string()]);
        assert_eq!(o.stdout.len(), HEAD, "{name}: {}", String::from_utf8_lossy(&o.stderr));
        assert!(o.stdout == data[..HEAD], "{name}: the head differs");
        let mut keep = keep;
        let rest = drain(&mut keep);
        assert!(writer.join().is_ok_and(|r| r.is_ok()), "{name}: the writer failed");
        assert_eq!(rest.len(), LEN - HEAD, "{name}");
        assert!(rest == data[HEAD..], "{name}: the rest differs");
    }
}

#[test]
fn r0027_piped_stdin_is_a_pipe_not_the_callers_file() {
    // Found in review: the caller's stdin file could be truncated, chmod-ed
    // or touched through fd 0. The CLI now copies input through a pipe.
    let ws = Ws::new();
    ws.write("in.txt", "data\n");
    let input = std::fs::File::open(ws.join("in.txt")).unwrap_or_else(|e| panic!("{e}"));
    let w = ws.path().display().to_string();
    let code = "import os, stat\n\
                print(stat.S_ISFIFO(os.fstat(0).st_mode))\n\
                print(os.read(0, 100))\n\
                for f in (lambda: os.fchmod(0, 0o777), lambda: os.ftruncate(0, 0), lambda: os.open('/proc/self/fd/0', os.O_RDONLY | os.O_TRUNC)):\n\
                \x20   try:\n        f()\n    except OSError as e:\n        print('refused', e.errno)\n";
    let out = cli()
        .args(["exec", "--workspace", &w, "--", "/usr/bin/python3", "-c", code])
        .stdin(input)
        .output()
        .unwrap_or_else(|e| panic!("cli: {e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("True\nb'data\\n'\n"), "{text} {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(ws.read("in.txt"), "data\n");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(ws.join("in.txt")).map(|m| m.permissions().mode()).unwrap_or(0);
    assert_eq!(mode & 0o777, 0o644, "the input file's mode changed");
}

#[test]
fn r0036_piped_and_redirected_input_is_not_consumed() {
    // Found in the last review: the stdin copy thread read the caller's
    // input ahead; a `while read` loop around portcullis lost its lines.
    let ws = Ws::new();
    ws.write("lines", "1\n2\n3\n4\n5\n");
    let w = ws.path().display().to_string();
    let bin = bin_dir().join("portcullis");
    let script = format!(
        "n=0; while read l; do n=$((n+1)); {} exec --workspace {w} -- true; done < {w}/lines; echo $n",
        bin.display()
    );
    let out = std::process::Command::new("sh").args(["-c", &script]).output().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "5", "{}", String::from_utf8_lossy(&out.stderr));
    // Control: the command still receives the input when it reads it.
    let script = format!("{} exec --workspace {w} -- wc -l < {w}/lines", bin.display());
    let out = std::process::Command::new("sh").args(["-c", &script]).output().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "5");
}

#[test]
fn r0038_null_stdin_is_the_null_device_and_other_devices_still_go_through_a_pipe() {
    // Speed: a stdin that is /dev/null (what an agent's tool call usually
    // gives) needs no feeding thread; the command gets /dev/null of its own.
    let ws = Ws::new();
    let w = ws.path().display().to_string();
    let code = "import os, stat\n\
                st = os.fstat(0)\n\
                print(stat.S_ISCHR(st.st_mode), os.major(st.st_rdev), os.minor(st.st_rdev), stat.S_ISFIFO(st.st_mode))\n\
                print(os.read(0, 10))\n";
    let run = |stdin: std::fs::File| {
        let out = cli()
            .args(["exec", "--workspace", &w, "--", "/usr/bin/python3", "-c", code])
            .stdin(stdin)
            .output()
            .unwrap_or_else(|e| panic!("cli: {e}"));
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    };
    let null = std::fs::File::open("/dev/null").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run(null), "True 1 3 False\nb''\n");
    // Control: another device (/dev/zero) is not handed on but copied
    // through a pipe, as before.
    let zero = std::fs::File::open("/dev/zero").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run(zero), "False 0 0 True\nb'\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00'\n");
}
