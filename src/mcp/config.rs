//! What `portcullis serve` serves, built from its settings: the workspace
//! (policy, audit log), the tool set (test command, read-only, a subset).
//! The command line only parses flags into a [`ServeConfig`].

use std::path::{Path, PathBuf};

use crate::policy::WorkspacePolicy;
use crate::tools::{Tools, ToolsError, WriteAccess};
use crate::workspace::{Workspace, WorkspaceError};

/// The settings of a server.
#[derive(Clone, Debug, Default)]
pub struct ServeConfig {
    /// The workspace directory (overrides the policy's).
    pub workspace: Option<PathBuf>,
    /// The policy file (TOML, or JSON if it ends in `.json`).
    pub policy: Option<PathBuf>,
    /// The audit log (overrides the policy's `audit`).
    pub audit: Option<PathBuf>,
    /// The base command line of `run_tests` (none: no such tool).
    pub tests: Option<String>,
    /// Only the tools that cannot change the workspace; commands without
    /// write access.
    pub readonly: bool,
    /// Commands never get write access (the file tools still write,
    /// each write checked and audited on its own).
    pub read_only_commands: bool,
    /// Only these tools (empty: all).
    pub tools: Vec<String>,
}

/// Why a server could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The workspace could not be set up.
    #[error("{0}")]
    Workspace(#[from] WorkspaceError),
    /// The policy file lies inside the workspace and cannot be hidden from
    /// the model there.
    #[error(
        "{}: the policy file lies inside the workspace {}, and {why}: keep the policy file outside the workspace",
        policy.display(),
        workspace.display()
    )]
    PolicyInWorkspace {
        /// The policy file.
        policy: PathBuf,
        /// The workspace.
        workspace: PathBuf,
        /// Why it cannot be hidden.
        why: &'static str,
    },
    /// The tool set could not be made as asked.
    #[error("{what}: {source}")]
    Tools {
        /// The setting (`--tests`, `--tools`).
        what: &'static str,
        /// Why.
        source: ToolsError,
    },
}

impl ServeConfig {
    /// The tool set to serve.
    ///
    /// A policy file inside the workspace is hidden from the model: its
    /// real path (that file alone, not its name at any depth) is added to
    /// the deny list, so no file tool reads it and a command sees it
    /// masked (it also stays read-only, as for every caller). The model
    /// learns the rules that concern it from refusals, never by reading
    /// or editing them. In the landlock-only mode, which cannot mask a
    /// path, such a policy is refused ([`ServeError::PolicyInWorkspace`]).
    pub fn tools(&self) -> Result<Tools, ServeError> {
        let mut b = Workspace::builder();
        if let Some(f) = &self.policy {
            b = b.policy_file(f)?;
            let workspace = self.workspace.clone();
            if let Some(policy) = b.policy_mut() {
                hide_policy_file(f, workspace.or_else(|| policy.workspace.clone()).as_deref(), policy)?;
            }
        }
        if let Some(ws) = &self.workspace {
            b = b.workspace(ws);
        }
        if let Some(log) = &self.audit {
            b = b.audit_log(log);
        }
        let ws = b.build()?;
        let mut tb = Tools::builder(ws);
        if let Some(t) = &self.tests {
            tb = tb.tests(t).map_err(|source| ServeError::Tools { what: "--tests", source })?;
        }
        if self.read_only_commands {
            tb = tb.write_access(std::sync::Arc::new(|_: &str, _: &str| WriteAccess::None));
        }
        let mut tools = tb.build();
        if self.readonly {
            tools = tools.readonly();
        }
        if !self.tools.is_empty() {
            let names: Vec<&str> = self.tools.iter().map(String::as_str).collect();
            tools = tools.pick(&names).map_err(|source| ServeError::Tools { what: "--tools", source })?;
        }
        Ok(tools)
    }
}

/// Add the policy file `f` to `policy`'s deny list when it lies inside
/// the workspace `root`; refuse where that cannot hide it.
fn hide_policy_file(f: &Path, root: Option<&Path>, policy: &mut WorkspacePolicy) -> Result<(), ServeError> {
    let Some((root, real)) = root.and_then(|r| inside(f, r).map(|real| (r, real))) else {
        return Ok(());
    };
    let refuse = |why| ServeError::PolicyInWorkspace { policy: f.to_path_buf(), workspace: root.to_path_buf(), why };
    if policy.degraded == Some(portcullis_helper::spec::Mode::LandlockOnly) {
        return Err(refuse(
            "the landlock-only mode cannot hide it from commands (it has no mount namespace to mask it with, so \
             every command would be refused)",
        ));
    }
    // Its real path: a bare name would be a name at any depth.
    let Some(real) = real.to_str() else {
        return Err(refuse("its path is not UTF-8, which a deny glob cannot name"));
    };
    policy.deny_paths.push(glob_literal(real));
    Ok(())
}

/// A deny glob that matches `path` literally: every character a deny glob
/// reads specially, `\` included (`globset::escape` leaves it, and `\x`
/// would mean `x`), is escaped with `\`.
fn glob_literal(path: &str) -> String {
    let mut g = String::with_capacity(path.len());
    for c in path.chars() {
        if matches!(c, '\\' | '*' | '?' | '[' | ']' | '{' | '}') {
            g.push('\\');
        }
        g.push(c);
    }
    g
}

/// `file`'s real path when it lies inside `root` (both resolved).
fn inside(file: &Path, root: &Path) -> Option<PathBuf> {
    let file = std::fs::canonicalize(file).ok()?;
    let root = std::fs::canonicalize(root).ok()?;
    (file != root && file.starts_with(&root)).then_some(file)
}
