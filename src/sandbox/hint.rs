//! What to do when the command cannot be found: which `PATH` was searched
//! inside the sandbox, and where the program is on the host, if anywhere.

use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::{ExecResult, Plan, Warning};
use crate::path::SYSTEM_ROOTS;

/// The hint for a command that was not found (`ENOENT` at exec), worded
/// for the CLI's flags: `" (…)"`, or empty when there is nothing to add.
pub(super) fn not_found(plan: &Plan, program: &str) -> String {
    if program.is_empty() {
        return String::new();
    }
    if program.contains('/') {
        // The workspace and every other root are bound at their own paths,
        // so the working directory names the same place on the host.
        let on_host = host_path(plan, program);
        if std::fs::symlink_metadata(&on_host).is_err() {
            return format!(" (there is no {} on the host either: check the path)", on_host.display());
        }
        return format!(
            " ({program}, or the interpreter its #! line names, or its loader, is not in the sandbox: only the \
             system directories, the workspace, the write grants and the --read roots are; add its directory \
             with --read DIR)"
        );
    }
    let inside = plan
        .spec
        .env
        .iter()
        .find_map(|e| e.strip_prefix(b"PATH="))
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .unwrap_or_default();
    let searched = format!("not found in PATH={inside} inside the sandbox");
    let Some(host) = on_host_path(program) else {
        return format!(
            " ({searched}, nor in the caller's PATH; pass --inherit-env PATH (or --env PATH=...), and --read the \
             directory that holds {program})"
        );
    };
    let dir = host.parent().map(Path::to_path_buf).unwrap_or_default();
    let real_dir = std::fs::canonicalize(&dir).unwrap_or_else(|_| dir.clone());
    let on_inner_path = inside.split(':').any(|d| Path::new(d) == dir);
    let seen = visible(plan, &real_dir);
    let mut todo = Vec::new();
    if !on_inner_path {
        todo.push("pass --inherit-env PATH".to_string());
    }
    if !seen {
        todo.push(format!(
            "--read {} (or the toolchain's whole tree, such as --read ~/.cargo --read ~/.rustup)",
            dir.display()
        ));
    }
    if todo.is_empty() {
        return format!(" ({searched}; {program} is {} on the host)", host.display());
    }
    format!(" ({searched}; on the host it is {}: {})", host.display(), todo.join(", and "))
}

/// The hint for a command refused at exec with `EACCES`: a file that is not
/// executable, or a directory. Empty when neither is seen on the host.
pub(super) fn not_executable(plan: &Plan, program: &str) -> String {
    if !program.contains('/') {
        return String::new();
    }
    let on_host = host_path(plan, program);
    match std::fs::metadata(&on_host) {
        Ok(m) if m.is_dir() => format!(" ({program} is a directory)"),
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 == 0 => format!(
            " ({program} is not executable: make it so (chmod +x), or run it through its interpreter, such as \
             sh {program} or python3 {program})"
        ),
        _ => String::new(),
    }
}

/// Where `program` (a path with a `/`) is on the host: the sandbox binds
/// every root at its own path, so the working directory is the same there.
fn host_path(plan: &Plan, program: &str) -> PathBuf {
    Path::new(std::ffi::OsStr::from_bytes(&plan.spec.cwd)).join(program.strip_prefix("./").unwrap_or(program))
}

/// After a shell line: for each of its `programs` that the shell said it
/// could not find (`NAME: not found`, dash's and busybox's words, or
/// `NAME: command not found`, bash's, in either output stream: the line
/// may have sent its errors down a pipe), a warning with what
/// [`not_found`] says of it. The shell's own message names the program
/// but not why (the `PATH` inside, a toolchain the sandbox does not show).
pub(super) fn programs_not_found(plan: &Plan, programs: &[String], result: &mut ExecResult) {
    for p in programs.iter().filter(|p| !p.is_empty() && !p.contains('/')) {
        let said = |out: &[u8]| {
            [format!("{p}: not found"), format!("{p}: command not found")]
                .iter()
                .any(|m| out.windows(m.len()).any(|w| w == m.as_bytes()))
        };
        if !(said(&result.stderr) || said(&result.stdout)) {
            continue;
        }
        let hint = not_found(plan, p);
        if !hint.is_empty() {
            let hint = hint.strip_prefix(" (").and_then(|h| h.strip_suffix(')')).unwrap_or(&hint).to_string();
            result.warnings.push(Warning::ProgramNotFound { program: p.clone(), hint });
        }
    }
}

/// The first executable `program` in this process's own `PATH`.
fn on_host_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    path.as_bytes()
        .split(|b| *b == b':')
        .filter(|d| d.first() == Some(&b'/'))
        .map(|d| Path::new(std::ffi::OsStr::from_bytes(d)).join(program))
        .find(|p| std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// Whether the sandbox shows `dir` (a real path).
fn visible(plan: &Plan, dir: &Path) -> bool {
    SYSTEM_ROOTS.iter().any(|r| dir.starts_with(r))
        || dir.starts_with(&plan.workspace)
        || plan.read_roots.iter().any(|r| dir.starts_with(r))
        || plan.write_grants.iter().any(|g| dir.starts_with(g))
}
