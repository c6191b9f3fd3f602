//! From a policy, a checked line and a caller's options to one sandbox
//! request: the logic every front end shares (the command line, the server).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::policy::{is_startup_var, unsafe_sh_locale, Interpreter, LinePlan, WorkspacePolicy};
use crate::sandbox::{ExecRequest, Limits};

use super::{ExecOptions, RunError};

/// The sandbox request that runs an accepted line under `policy`: `sh -c
/// LINE` in `sh` mode, the argv otherwise; readable roots, deny globs,
/// protected paths, network, limits, environment and timeout from the
/// policy (a background job's is `shell.background.timeout`); `writable`
/// asks for the policy's `write` list (or the whole workspace when the
/// list is empty).
pub(crate) fn from_policy(
    policy: &WorkspacePolicy,
    plan: &LinePlan,
    writable: bool,
    background: bool,
) -> Result<ExecRequest, RunError> {
    let ws = policy.workspace_root()?;
    let argv: Vec<OsString> = match plan.interpreter {
        Interpreter::Sh => vec!["/bin/sh".into(), "-c".into(), plan.line.clone().into()],
        Interpreter::None => match plan.commands.first() {
            Some(c) => c.argv.iter().map(OsString::from).collect(),
            None => return Err(RunError::input("command", "the checked line has no command")),
        },
    };
    let mut req = ExecRequest::new(ws, argv);
    if plan.interpreter == Interpreter::Sh {
        req.programs = programs(&plan.commands);
    }
    req.read = policy.allow_paths.clone();
    req.deny = policy.deny_paths.clone();
    req.protect = policy.protect.clone();
    req.network = policy.network;
    req.limits = Limits { pids: policy.limits.pids, memory: policy.limits.memory };
    req.degraded = policy.degraded;
    req.report_refused_writes = policy.report_refused_writes.unwrap_or(true);
    if writable {
        if policy.write.is_empty() {
            req.writable = true;
        } else {
            req.write = policy.write.clone();
        }
    }
    if let Some(sh) = &policy.shell {
        req.inherit_env = sh.inherit_env.iter().filter(|n| !is_startup_var(n)).map(OsString::from).collect();
        req.env = sh
            .env
            .iter()
            .filter(|(k, _)| !is_startup_var(k))
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect();
        req.timeout = Some(match &sh.background {
            Some(bg) if background => bg.timeout,
            _ => sh.timeout,
        });
        req.max_output_bytes = usize::try_from(sh.max_output_bytes).unwrap_or(usize::MAX);
    }
    Ok(req)
}

/// The programs a shell line names (and the commands they start in turn),
/// each once, for the hint when the shell cannot find one.
fn programs(commands: &[crate::policy::PlannedCommand]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut todo: Vec<&crate::policy::PlannedCommand> = commands.iter().collect();
    while let Some(c) = todo.pop() {
        if let Some(p) = c.argv.first().filter(|_| !c.dynamic.contains(&0)) {
            if !out.contains(p) {
                out.push(p.clone());
            }
        }
        todo.extend(c.runs.iter());
    }
    out
}

/// Lay the caller's options over a request: they extend the lists and
/// override the scalars (a timeout only lowers the policy's). With a policy, start-up and loader variables are
/// refused by name (the policy's own are dropped in [`from_policy`]).
pub(crate) fn merge(req: &mut ExecRequest, o: &ExecOptions, policy: bool) -> Result<(), RunError> {
    req.write.extend(o.write.iter().cloned());
    req.read.extend(o.read.iter().cloned());
    req.deny.extend(o.deny.iter().cloned());
    req.protect.extend(o.protect.iter().cloned());
    req.cwd = o.cwd.clone();
    if let Some(n) = o.network {
        req.network = n;
    }
    for (k, v) in &o.env {
        let name = k.to_string_lossy();
        if k.is_empty() {
            return Err(RunError::input("env", format!("{}={}: empty name", name, v.to_string_lossy())));
        }
        if policy && is_startup_var(&name) {
            return Err(RunError::input(
                format!("env {name}"),
                "a shell start-up or loader variable is never passed to a command",
            ));
        }
        req.env.push((k.clone(), v.clone()));
    }
    for n in &o.inherit_env {
        if policy && is_startup_var(&n.to_string_lossy()) {
            return Err(RunError::input(
                format!("inherit-env {}", n.to_string_lossy()),
                "a shell start-up or loader variable is never passed to a command",
            ));
        }
        req.inherit_env.push(n.clone());
    }
    // With a policy, the caller's timeout can only lower the policy's
    // (`shell.timeout`, or a background job's `shell.background.timeout`).
    if o.timeout.is_some() {
        req.timeout = if policy { super::lowered_timeout(req.timeout, o.timeout) } else { o.timeout };
    }
    if o.pids.is_some() {
        req.limits.pids = o.pids;
    }
    if o.memory.is_some() {
        req.limits.memory = o.memory;
    }
    if let Some(m) = o.max_output {
        req.max_output_bytes = usize::try_from(m)
            .map_err(|_| RunError::input("max-output", format!("{m}: too large for this machine")))?;
    }
    req.test_switches = o.test_switches;
    if let Some(on) = o.report_refused_writes {
        req.report_refused_writes = on;
    }
    if o.degraded.is_some() {
        req.degraded = o.degraded;
    }
    Ok(())
}

/// `/bin/sh` reads an sh-mode line in its locale's character set: only C,
/// POSIX or UTF-8 ones read it as the checker did.
pub(crate) fn check_sh_locale(req: &ExecRequest) -> Result<(), RunError> {
    let set = req.env.iter().map(|(k, v)| (k.to_string_lossy().into_owned(), v.to_string_lossy().into_owned()));
    let inherited = req.inherit_env.iter().filter_map(|n| {
        std::env::var_os(n).map(|v| (n.to_string_lossy().into_owned(), v.to_string_lossy().into_owned()))
    });
    match unsafe_sh_locale(set.chain(inherited)) {
        Some((k, v)) => Err(RunError::input(
            format!("{k}={v}"),
            "sh mode needs a C, POSIX or UTF-8 locale (the line is read in it)",
        )),
        None => Ok(()),
    }
}

/// A write grant as the gate compares it: absolute, and real as far as it
/// exists (a missing grant inside the workspace is created by the sandbox,
/// so its missing tail is kept as spelled, lexically cleaned).
pub(crate) fn resolve_grant(ws: &Path, g: &Path) -> PathBuf {
    let abs = if g.is_absolute() { g.to_path_buf() } else { ws.join(g) };
    let clean = crate::path::lexical(&abs);
    let mut head = clean.clone();
    let mut tail = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(&head) {
            let mut out = real;
            for t in tail.iter().rev() {
                out.push(t);
            }
            return out;
        }
        match (head.file_name().map(|n| n.to_os_string()), head.parent().map(Path::to_path_buf)) {
            (Some(n), Some(p)) => {
                tail.push(n);
                head = p;
            }
            _ => return clean,
        }
    }
}
