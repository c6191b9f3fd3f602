//! Checks on the project itself: docs that must match the code.

use portcullis_helper::report::Step;

/// docs/sandbox.md lists the helper's steps in the order of `Step`.
#[test]
fn sandbox_doc_lists_the_steps_in_order() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/sandbox.md")).unwrap_or_default();
    let mut pos = 0;
    for s in Step::ALL {
        let name = format!("`{s:?}`");
        match doc[pos..].find(&name) {
            Some(i) => pos += i + name.len(),
            None => panic!("docs/sandbox.md does not list step {name} after the previous one"),
        }
    }
}

/// The helper binary stays free of tokio.
#[test]
fn helper_links_no_tokio() {
    let bin = crate::suite::util::bin_dir().join("portcullis-helper");
    let bytes = std::fs::read(&bin).unwrap_or_else(|e| panic!("read {}: {e}", bin.display()));
    let needle = b"tokio::runtime";
    assert!(!bytes.windows(needle.len()).any(|w| w == needle), "the helper links tokio");
}

/// The example policies in examples/ are valid (read from the clone, like the docs).
#[test]
fn example_policies_parse() {
    use portcullis::policy::WorkspacePolicy;

    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut n = 0;
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "toml" || x == "json") {
            if let Err(err) = WorkspacePolicy::from_file(&p) {
                panic!("{}: {err}", p.display());
            }
            n += 1;
        }
    }
    assert!(n >= 3, "want at least three example policies in {}, found {n}", dir.display());
}

/// The library's layers import in one direction: each module uses only the
/// modules below it (see README.md's Layout). A `crate::X` path (or a `use
/// crate::{X, ..}`) in a module's source names what it imports.
#[test]
fn layers_import_in_one_direction() {
    // Module -> the crate modules it may name (besides itself).
    let allowed: &[(&str, &[&str])] = &[
        ("path", &[]),
        ("sys.rs", &[]),
        ("units.rs", &[]),
        ("hex.rs", &[]),
        ("sandbox", &["path", "sys", "units", "hex", "error_chain"]),
        ("policy", &["path", "units", "sandbox", "error_chain"]),
        ("gate", &["policy", "path", "error_chain"]),
        ("audit", &["gate", "sandbox", "policy", "path", "sys", "hex", "error_chain"]),
        ("runner", &["audit", "gate", "policy", "sandbox", "path", "sys", "units", "error_chain"]),
        ("workspace", &["runner", "audit", "gate", "policy", "sandbox", "path", "sys", "units", "hex", "error_chain"]),
        (
            "tools",
            &["workspace", "runner", "audit", "gate", "policy", "sandbox", "path", "sys", "units", "error_chain"],
        ),
        (
            "mcp",
            &[
                "tools",
                "workspace",
                "runner",
                "audit",
                "gate",
                "policy",
                "sandbox",
                "path",
                "sys",
                "units",
                "error_chain",
            ],
        ),
        ("doctor.rs", &["sandbox", "sys", "error_chain"]),
    ];
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    fn files(p: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        if p.is_dir() {
            for e in std::fs::read_dir(p).into_iter().flatten().flatten() {
                files(&e.path(), out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p.to_path_buf());
        }
    }
    let re = regex::Regex::new(r"crate::(\{[^}]*\}|[A-Za-z_]+)").unwrap_or_else(|e| panic!("{e}"));
    for (module, may) in allowed {
        let mut fs = Vec::new();
        files(&src.join(module), &mut fs);
        assert!(!fs.is_empty(), "no source for {module}");
        let own = module.trim_end_matches(".rs").replace('/', "::");
        for f in fs {
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            for line in text.lines().filter(|l| !l.trim_start().starts_with("//")) {
                for c in re.captures_iter(line) {
                    let names: Vec<String> = match c.get(1).map(|m| m.as_str()) {
                        Some(g) if g.starts_with('{') => g
                            .trim_matches(|ch| ch == '{' || ch == '}')
                            .split(',')
                            .filter_map(|n| n.trim().split("::").next().map(str::to_string))
                            .filter(|n| !n.is_empty())
                            .collect(),
                        Some(n) => vec![n.to_string()],
                        None => vec![],
                    };
                    for n in names {
                        // The crate root's re-exports count as their module.
                        let n = match n.as_str() {
                            "SandboxError" | "ExecRequest" | "ExecResult" | "Plan" | "Sandbox" => "sandbox".to_string(),
                            "Network" => continue,
                            _ => n,
                        };
                        assert!(
                            n == own || may.contains(&n.as_str()),
                            "{} (layer {module}) imports crate::{n}, which is not below it: {line}",
                            f.display()
                        );
                    }
                }
            }
        }
    }
}

/// A directory of stand-ins for `scripts/build-static` to run with, as on a
/// fresh machine: a `rustc` that names the real host triple and has no musl
/// standard library, the few tools the script uses, a `cargo` that logs its
/// arguments and makes the two binaries, and `rustup` only when `rustup` is
/// given (a script of its own). Returns (the PATH to use, the cargo log).
fn build_static_stand_ins(root: &std::path::Path, rustup: Option<&str>) -> (std::path::PathBuf, std::path::PathBuf) {
    use std::os::unix::fs::{symlink, PermissionsExt};
    let bin = root.join("path");
    std::fs::create_dir(&bin).unwrap_or_else(|e| panic!("mkdir {}: {e}", bin.display()));
    let search: Vec<std::path::PathBuf> =
        std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default()).collect();
    for tool in ["bash", "env", "sed", "ls", "cp", "mv", "mkdir", "dirname", "cc"] {
        if let Some(p) = search.iter().map(|d| d.join(tool)).find(|p| p.is_file()) {
            symlink(&p, bin.join(tool)).unwrap_or_else(|e| panic!("symlink {}: {e}", p.display()));
        }
    }
    let log = root.join("cargo.log");
    let script = |name: &str, body: &str| {
        let p = bin.join(name);
        std::fs::write(&p, body).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))
            .unwrap_or_else(|e| panic!("chmod {}: {e}", p.display()));
    };
    script(
        "cargo",
        &format!(
            "#!/bin/sh\necho \"cargo $* RUSTFLAGS=${{RUSTFLAGS-(unset)}}\" >> {log}\n\
             ex=; while [ $# -gt 0 ]; do [ \"$1\" = --target ] && t=$2; [ \"$1\" = --example ] && ex=$2; shift; done\n\
             mkdir -p \"$CARGO_TARGET_DIR/$t/release/examples\" || exit 1\n\
             for b in portcullis portcullis-helper; do echo \"$t\" > \"$CARGO_TARGET_DIR/$t/release/$b\"; done\n\
             [ -z \"$ex\" ] || echo \"$t\" > \"$CARGO_TARGET_DIR/$t/release/examples/$ex\"\n",
            log = log.display()
        ),
    );
    let libdir = root.join("musl-libdir");
    std::fs::create_dir(&libdir).unwrap_or_else(|e| panic!("mkdir {}: {e}", libdir.display()));
    script(
        "rustc",
        &format!(
            "#!/bin/sh
case \"$*\" in
-vV) echo 'rustc 1.0.0'; echo 'host: {host}' ;;
             *target-libdir*) echo {libdir} ;;
*) exit 1 ;;
esac
",
            host = host_triple(),
            libdir = libdir.display()
        ),
    );
    if let Some(body) = rustup {
        script("rustup", body);
    }
    (bin, log)
}

/// Runs scripts/build-static with `path` as PATH and a fresh
/// CARGO_TARGET_DIR; returns (exit status, stdout, stderr, target dir).
fn run_build_static(
    root: &std::path::Path,
    path: &std::path::Path,
    args: &[&str],
) -> (i32, String, String, std::path::PathBuf) {
    let target = root.join("target");
    let out = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/build-static"))
        .args(args)
        .env("PATH", path)
        .env("CARGO_TARGET_DIR", &target)
        .env_remove("PORTCULLIS_LIBC")
        .env_remove("RUSTFLAGS")
        .output()
        .unwrap_or_else(|e| panic!("run scripts/build-static: {e}"));
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr), target)
}

fn host_triple() -> String {
    let out = std::process::Command::new("rustc").arg("-vV").output().unwrap_or_else(|e| panic!("rustc -vV: {e}"));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find_map(|l| l.strip_prefix("host: "))
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no host in rustc -vV: {text}"))
}

/// What build-static did when it could not use musl: the fallback is said on
/// stderr, cargo built for the host triple (static glibc when libc.a is
/// there, else dynamic), and both binaries are in target/bin, whose path is
/// the last line of stdout.
fn assert_glibc_fallback(code: i32, stdout: &str, stderr: &str, target: &std::path::Path, log: &std::path::Path) {
    assert_eq!(code, 0, "build-static failed; stderr:\n{stderr}");
    let host = host_triple();
    let bin = target.join("bin");
    assert_eq!(stdout.lines().last(), Some(bin.to_string_lossy().as_ref()), "stdout:\n{stdout}");
    for b in ["portcullis", "portcullis-helper"] {
        let got = std::fs::read_to_string(bin.join(b))
            .unwrap_or_else(|e| panic!("{b} not in {}: {e}; stderr:\n{stderr}", bin.display()));
        assert_eq!(got.trim(), host, "{b} was not the host build");
    }
    let log = std::fs::read_to_string(log).unwrap_or_default();
    assert!(log.contains(&format!("build --release --target {host} --bins")), "cargo was called as:\n{log}");
    if stderr.contains("no static glibc") {
        assert!(!log.contains("crt-static"), "a dynamic build was announced, but:\n{log}");
    } else {
        assert!(
            log.contains(&format!(
                "--config target.{host}.rustflags = [\"-C\", \"target-feature=+crt-static\", \"-C\", \"relocation-model=static\"] RUSTFLAGS=(unset)"
            )),
            "not a static, position-dependent glibc build:\n{log}\nstderr:\n{stderr}"
        );
    }
    assert!(stderr.contains("works"), "the fallback does not say the build still works:\n{stderr}");
}

/// r0850: a user with a distribution's cargo and no rustup: build-static
/// says that the musl target cannot be added and how to get it, and builds
/// with static glibc into target/bin (stand-ins for rustc, cargo and
/// rustup: the script's choices are what is checked, not a build).
#[test]
fn r0850_build_static_without_rustup_falls_back_to_static_glibc() {
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let (path, log) = build_static_stand_ins(root.path(), None);
    let (code, stdout, stderr, target) = run_build_static(root.path(), &path, &[]);
    assert!(stderr.contains("no rustup on PATH"), "stderr:\n{stderr}");
    assert!(stderr.contains("https://rustup.rs"), "no next step in:\n{stderr}");
    assert_glibc_fallback(code, &stdout, &stderr, &target, &log);
}

/// r0851: rustup is there but cannot add the target (no network): the same
/// fallback, naming the command to retry; and the rustup that failed was
/// asked for exactly the musl target.
#[test]
fn r0851_build_static_when_rustup_fails_falls_back_to_static_glibc() {
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let asked = root.path().join("rustup.log");
    let body =
        format!("#!/bin/sh\necho \"rustup $*\" >> {}\necho 'error: could not download' >&2\nexit 1\n", asked.display());
    let (path, log) = build_static_stand_ins(root.path(), Some(&body));
    let (code, stdout, stderr, target) = run_build_static(root.path(), &path, &[]);
    let asked = std::fs::read_to_string(&asked).unwrap_or_default();
    let musl = format!("{}-unknown-linux-musl", host_triple().split('-').next().unwrap_or("x86_64"));
    assert_eq!(asked.trim(), format!("rustup target add {musl}"));
    assert!(
        stderr.contains("could not add") && stderr.contains(&format!("rustup target add {musl}")),
        "stderr:\n{stderr}"
    );
    assert_glibc_fallback(code, &stdout, &stderr, &target, &log);
}

/// r0852: README's set-up and quick start use the build users should get
/// (scripts/build-static) and the directory it leaves the binaries in.
#[test]
fn r0852_readme_set_up_uses_the_static_build() {
    let read = |p: &str| {
        std::fs::read_to_string(format!("{}/{p}", env!("CARGO_MANIFEST_DIR"))).unwrap_or_else(|e| panic!("{p}: {e}"))
    };
    let readme = read("README.md");
    let script = read("scripts/build-static");
    assert!(script.contains("bin=\"$tdir/bin\""), "scripts/build-static no longer leaves the binaries in target/bin");
    assert!(
        readme.contains(
            "    scripts/build-static && target/bin/portcullis exec --workspace . -- sh -c 'echo hi > probe'"
        ),
        "README's set-up does not run the static build"
    );
    assert!(
        readme.contains("scripts/build-static && export PATH=$PWD/target/bin:$PATH"),
        "README's quick start does not use target/bin"
    );
    assert!(!readme.contains("target/release/portcullis"), "README still runs the dynamic build's binary");
}

/// r0853: on a fresh machine with rustup, build-static adds the musl target
/// (once), builds for it, and leaves both binaries, and an example it was
/// asked for (`--example bench_driver`, as scripts/bench-spawn asks), in
/// target/bin.
#[test]
fn r0853_build_static_adds_the_musl_target_with_rustup() {
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let asked = root.path().join("rustup.log");
    let libdir = root.path().join("musl-libdir");
    let body =
        format!("#!/bin/sh\necho \"rustup $*\" >> {}\n: > {}/libstd-0123.rlib\n", asked.display(), libdir.display());
    let (path, log) = build_static_stand_ins(root.path(), Some(&body));
    let (code, stdout, stderr, target) = run_build_static(root.path(), &path, &["--example", "bench_driver"]);
    assert_eq!(code, 0, "build-static failed; stderr:\n{stderr}");
    let musl = format!("{}-unknown-linux-musl", host_triple().split('-').next().unwrap_or("x86_64"));
    assert_eq!(std::fs::read_to_string(&asked).unwrap_or_default().trim(), format!("rustup target add {musl}"));
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        log.contains(&format!(
            "build --release --target {musl} --bins --config target.{musl}.rustflags = [\"-C\", \"relocation-model=static\"] --example bench_driver RUSTFLAGS=(unset)\n"
        )),
        "cargo was called as:\n{log}"
    );
    assert!(stderr.contains("position-dependent"), "stderr:\n{stderr}");
    let bin = target.join("bin");
    assert_eq!(stdout.lines().last(), Some(bin.to_string_lossy().as_ref()), "stdout:\n{stdout}");
    for b in ["portcullis", "portcullis-helper", "bench_driver"] {
        let got = std::fs::read_to_string(bin.join(b))
            .unwrap_or_else(|e| panic!("{b} not in {}: {e}; stderr:\n{stderr}", bin.display()));
        assert_eq!(got.trim(), musl, "{b} was not the musl build");
    }
    // Again: the target is there now, so rustup is not asked twice.
    let (code, _, stderr, _) = run_build_static(root.path(), &path, &[]);
    assert_eq!(code, 0, "second build-static failed; stderr:\n{stderr}");
    assert_eq!(std::fs::read_to_string(&asked).unwrap_or_default().lines().count(), 1, "rustup was asked again");
}

/// r0868: PORTCULLIS_PIE=1 builds the position-independent binaries (no
/// relocation model of ours, the caller's RUSTFLAGS kept, or left unset so
/// that cargo's config files still count); our flag goes to the caller's
/// RUSTFLAGS when it set one; another value is refused with what to say
/// instead.
#[test]
fn r0868_build_static_builds_static_pie_on_request() {
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("tempdir: {e}"));
    let libdir = root.path().join("musl-libdir");
    let body = format!(
        "#!/bin/sh
: > {}/libstd-0123.rlib
",
        libdir.display()
    );
    let (path, log) = build_static_stand_ins(root.path(), Some(&body));
    let musl = format!("{}-unknown-linux-musl", host_triple().split('-').next().unwrap_or("x86_64"));
    let run = |pie: &str, rustflags: Option<&str>| {
        let mut c = std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/build-static"));
        c.env("PATH", &path)
            .env("CARGO_TARGET_DIR", root.path().join("target"))
            .env_remove("PORTCULLIS_LIBC")
            .env("PORTCULLIS_PIE", pie);
        match rustflags {
            Some(f) => c.env("RUSTFLAGS", f),
            None => c.env_remove("RUSTFLAGS"),
        };
        let out = c.output().unwrap_or_else(|e| panic!("run scripts/build-static: {e}"));
        (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    for (pie, flags) in [("1", Some("-C debuginfo=1")), ("1", None), ("0", Some("-C debuginfo=1"))] {
        let (code, stderr) = run(pie, flags);
        assert_eq!(code, 0, "stderr:\n{stderr}");
        assert!(stderr.contains(if pie == "1" { "static-pie" } else { "position-dependent" }), "stderr:\n{stderr}");
    }
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    let calls: Vec<&str> = log.lines().collect();
    assert_eq!(
        calls,
        [
            format!("cargo build --release --target {musl} --bins RUSTFLAGS=-C debuginfo=1"),
            format!("cargo build --release --target {musl} --bins RUSTFLAGS=(unset)"),
            format!("cargo build --release --target {musl} --bins RUSTFLAGS=-C debuginfo=1 -C relocation-model=static"),
        ],
        "cargo was called as:\n{log}"
    );
    let (code, stderr) = run("yes", None);
    assert_eq!(code, 2, "stderr:\n{stderr}");
    assert!(stderr.contains("say 1 (position-independent) or 0"), "stderr:\n{stderr}");
}
