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
        ("sandbox", &["path", "sys", "units", "error_chain"]),
        ("policy", &["path", "units", "sandbox", "error_chain"]),
        ("gate", &["policy", "path", "error_chain"]),
        ("audit", &["gate", "sandbox", "policy", "path", "sys", "error_chain"]),
        ("runner", &["audit", "gate", "policy", "sandbox", "path", "sys", "units", "error_chain"]),
        ("workspace", &["runner", "audit", "gate", "policy", "sandbox", "path", "sys", "units", "error_chain"]),
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
