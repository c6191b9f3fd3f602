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
