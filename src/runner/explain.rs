//! Rendering for people: `check`'s verdict and `exec --explain`'s plan.
//! Every path goes through [`shown`], so a file name cannot forge a line.

use crate::policy::{quote_argv, quote_word, Interpreter, PlannedCommand, Verdict};
use crate::sandbox::{describe_mount, Mode};
use crate::Network;

use super::Ready;

/// `portcullis check`'s text: the verdict, each command on its line.
pub fn render_verdict(v: &Verdict) -> String {
    fn cmd(out: &mut String, c: &PlannedCommand, indent: usize, n: Option<usize>) {
        let lead = match n {
            Some(n) => format!("{:indent$}{n}. ", ""),
            None => format!("{:indent$}runs: ", ""),
        };
        let mut line = quote_argv(&c.argv);
        let mut last_op: Option<&str> = None;
        for r in &c.redirects {
            let path = quote_word(&r.path.to_string_lossy());
            if last_op == Some(r.op.as_str()) {
                line += &format!(" or {path}");
            } else {
                line += &format!(" {} {path}", r.op);
            }
            last_op = Some(r.op.as_str());
        }
        *out += &format!("{lead}{line}\n");
        for inner in &c.runs {
            cmd(out, inner, indent + 5, None);
        }
    }
    match v {
        Verdict::Accepted(p) => {
            let mode = match p.interpreter {
                Interpreter::None => "argv mode",
                Interpreter::Sh => "sh mode",
            };
            let mut s = format!(
                "accepted ({mode}): {} command{}\n",
                p.commands.len(),
                if p.commands.len() == 1 { "" } else { "s" }
            );
            for (i, c) in p.commands.iter().enumerate() {
                cmd(&mut s, c, 2, Some(i + 1));
            }
            s
        }
        Verdict::Refused(r) => format!("refused: {}\n  command: {}\n  why: {}\n", r.reason, r.command, r.message),
    }
}

/// `check`'s line for the gate's answer (a line that asks for the whole
/// workspace).
pub fn render_gate(d: &crate::gate::Decision) -> String {
    use crate::gate::Decision;
    match d {
        Decision::Refuse { reason, rule } => {
            format!("gate: refuses it (rule {}): {reason}\n", rule.as_deref().unwrap_or("?"))
        }
        Decision::Allow { writable, write_grants, rule } => {
            let rule = rule.as_deref().unwrap_or("?");
            match (writable, write_grants) {
                (true, None) => format!("gate: write access as asked (rule {rule})\n"),
                (_, Some(g)) if g.is_empty() => format!("gate: runs read-only (rule {rule})\n"),
                (false, None) => format!("gate: runs read-only but for the grants it asks (rule {rule})\n"),
                (_, Some(g)) => format!(
                    "gate: may write only {} (rule {rule})\n",
                    g.iter().map(|p| shown(p)).collect::<Vec<_>>().join(", ")
                ),
            }
        }
    }
}

/// `--explain`'s text: exactly what will run, from the plan the sandbox
/// made (and the access the gate left the command).
pub fn explain(plan: &crate::sandbox::Plan, ready: &Ready) -> String {
    let req = &ready.request;
    let checked = ready.checked.as_ref();
    let mut s = String::from("portcullis plan v1\n");
    if let (Some(checked), Some(file)) = (checked, &req.policy_file) {
        let mode = match checked.interpreter {
            Interpreter::None => "argv mode",
            Interpreter::Sh => "sh mode, run with /bin/sh -c",
        };
        s += &format!("policy: {} (accepted, {mode})\n", shown(file));
        fn walk(s: &mut String, cmds: &[PlannedCommand], depth: usize) {
            for c in cmds {
                *s +=
                    &format!("policy-command: {}{}\n", "  ".repeat(depth), shown_bytes(quote_argv(&c.argv).as_bytes()));
                for r in &c.redirects {
                    *s += &format!("policy-redirect: {}{} {}\n", "  ".repeat(depth + 1), r.op, shown(&r.path));
                }
                walk(s, &c.runs, depth + 1);
            }
        }
        walk(&mut s, &checked.commands, 0);
    }
    let asked = ready.action.asked();
    let access = |a: &crate::gate::Access| a.describe(shown);
    if let Some(rule) = &ready.rule {
        s += &format!("gate: rule {} answered\n", shown_bytes(rule.as_bytes()));
    }
    if asked != ready.effective {
        s += &format!("gate: asked for {}; runs with {}\n", access(&asked), access(&ready.effective));
    }
    for d in &ready.dropped {
        s += &format!("gate-dropped: {} (named by the gate but not asked for: never added)\n", shown(d));
    }
    if plan.spec.mode == Mode::LandlockOnly {
        s += "mode: DEGRADED landlock-only (no namespaces, no mount plan: Landlock limits reads and writes)\n";
    }
    s += &format!("workspace: {} ({})\n", shown(&plan.workspace), if plan.writable { "writable" } else { "read-only" });
    for g in &plan.write_grants {
        let note = if plan.create_grants.contains(g) { " (missing: created before the run)" } else { "" };
        s += &format!("write-grant: {}{note}\n", shown(g));
    }
    for r in &plan.read_roots {
        s += &format!("read-root: {}\n", shown(r));
    }
    for p in &plan.protected {
        s += &format!("protected: {}\n", shown(p));
    }
    for p in &plan.pinned {
        s += &format!("pinned: {}\n", shown(p));
    }
    for m in &plan.masked {
        s += &format!("masked: {}\n", shown(m));
    }
    for h in &plan.hard_linked {
        s += &format!("hard-linked: {} (another name lies outside the writable areas; kept read-only)\n", shown(h));
    }
    for p in &plan.privileged {
        s += &format!("privileged: {} (setuid, setgid or file capabilities; kept read-only)\n", shown(p));
    }
    for u in &plan.unlistable {
        s += &format!("unlistable: {} (the caller cannot list it, the command could search it; masked)\n", shown(u));
    }
    if plan.spec.mode == Mode::Full {
        s += &format!(
            "namespaces: user mount pid ipc uts{}\n",
            match (plan.spec.network, plan.spec.netns) {
                (Network::None, portcullis_helper::spec::Netns::Private) => " net",
                (Network::None, _) => " (net: the workspace's)",
                _ => "",
            }
        );
    } else {
        s += "namespaces: none\n";
    }
    let full = plan.spec.mode == Mode::Full;
    let shared = crate::sandbox::NetworkNamespace::of(&plan.spec) == crate::sandbox::NetworkNamespace::Shared;
    s += &format!(
        "network: {}\n",
        match (plan.spec.network, full) {
            (Network::None, true) if shared => "none (shared with the workspace's commands: loopback only)",
            (Network::None, true) => "none (a private namespace with loopback only)",
            (Network::None, false) => "none (IPv4, IPv6 and unix sockets refused by seccomp)",
            (Network::Host, true) => "host",
            (Network::Host, false) => "host (unix sockets refused by seccomp)",
        }
    );
    let id = plan.spec.identity;
    s += &format!(
        "ids: uid {} gid {} inside = host uid {} gid {}{}\n",
        id.inside_uid,
        id.inside_gid,
        id.outside_uid,
        id.outside_gid,
        if !full {
            " (no user namespace: the caller's own ids)"
        } else if id.inside_uid != id.outside_uid {
            " (root caller: runs as nobody; workspace, grants and readable roots idmapped)"
        } else {
            ""
        }
    );
    for (i, op) in plan.spec.mounts.iter().enumerate() {
        s += &format!("mount {i:02}: {}\n", shown_bytes(describe_mount(op).as_bytes()));
    }
    if full {
        s += "mount: / (root tmpfs) read-only after setup\n";
    } else {
        s += "mount: none (the host's mount view; Landlock limits access)\n";
    }
    let abi = crate::sys::landlock_abi();
    let scope = if abi >= 6 { ", scope signal+abstract-unix" } else { ", no scoping (needs ABI 6)" };
    let tcp = match (plan.spec.network, abi >= 4) {
        // The full mode's namespace holds only loopback: tcp there is allowed.
        (Network::None, _) if full => "",
        (Network::None, true) => ", tcp bind/connect denied",
        (Network::None, false) => ", no tcp rules (needs ABI 4)",
        (Network::Host, _) => "",
    };
    let reads = if full { "" } else { ", and reads (no mount plan to hide anything)" };
    let truncate = if plan.spec.landlock.truncate {
        "truncate included"
    } else {
        "and truncate, left to the read-only mounts and seccomp"
    };
    s += &format!(
        "landlock: abi {abi}, handles every write right but ioctl-dev ({truncate}; make-sock only beneath landlock-sockets){reads}{scope}{tcp}\n"
    );
    for r in &plan.spec.landlock.readable {
        s += &format!("landlock-readable: {}\n", shown_bytes(r));
    }
    for w in &plan.landlock_writable {
        s += &format!("landlock-writable: {}\n", shown(w));
    }
    for sp in &plan.landlock_split {
        s += &format!(
            "landlock-split: {} (its rule left out {}: rules on its {} other entries instead; no new entry, \
             removal or rename directly in {})\n",
            shown(&sp.grant),
            sp.holes.iter().map(|h| shown(h)).collect::<Vec<_>>().join(", "),
            sp.entries.len(),
            sp.closed.iter().map(|c| shown(c)).collect::<Vec<_>>().join(", ")
        );
        for e in &sp.entries {
            s += &format!("landlock-writable: {}\n", shown(e));
        }
    }
    for w in &plan.landlock_sockets {
        s += &format!("landlock-sockets: {} (unix sockets may be made only here)\n", shown(w));
    }
    for g in &plan.landlock_gaps {
        s +=
            &format!("landlock-gap: {} lies beneath a writable path; only the read-only mount protects it\n", shown(g));
    }
    let profile =
        portcullis_helper::filter::Profile { degraded: !full, network_none: plan.spec.network == Network::None };
    s += &format!(
        "seccomp: sha256 {} ({} rules, x32 refused, clone3 ENOSYS)\n",
        plan.seccomp_sha256,
        portcullis_helper::filter::entries_for(profile).len()
    );
    s += if full {
        "capabilities: none (all five sets cleared), no_new_privs\n"
    } else if id.outside_uid == 0 {
        "capabilities: none (a root caller: uid 0 with all five sets cleared and the securebits noroot, no-setuid-fixup and no-ambient-raise locked), no_new_privs\n"
    } else {
        "capabilities: none held (an unprivileged caller), no_new_privs\n"
    };
    for g in &plan.git_guard {
        s += &format!("git-guard: {} (removed after the run if the command creates it)\n", shown(g));
    }
    let c = &plan.containment;
    let how = |m: Option<crate::sandbox::LimitMechanism>| match m {
        Some(crate::sandbox::LimitMechanism::Cgroup) => " (cgroup)",
        Some(crate::sandbox::LimitMechanism::RlimitNproc) => " (RLIMIT_NPROC, per sandbox)",
        Some(crate::sandbox::LimitMechanism::RlimitAs) => " (RLIMIT_AS, per process)",
        None => "",
    };
    s += &format!(
        "limits: pids={}{} memory={}{}\n",
        req.limits.pids.map_or("none".into(), |n| n.to_string()),
        how(c.limits.pids),
        req.limits.memory.map_or("none".into(), |n| n.to_string()),
        how(c.limits.memory)
    );
    s += &format!(
        "kill: {}\n",
        match (&c.cgroup, &c.cgroup_fallback, full) {
            (Some(g), _, _) => format!(
                "cgroup.kill (a leaf under {}; the run fails, nothing started, if it cannot be made)",
                shown(&g.parent)
            ),
            (None, why, true) => format!("pid-namespace ({})", why.as_deref().unwrap_or("no cgroup")),
            (None, why, false) => format!(
                "subreaper sweep (kill(-1) in the sandbox's Landlock domain; {})",
                why.as_deref().unwrap_or("no cgroup")
            ),
        }
    );
    s += &format!("timeout: {}\n", req.timeout.map_or("none".into(), |t| format!("{}s", t.as_secs_f64())));
    s += &format!("cwd: {}\n", shown_bytes(&plan.spec.cwd));
    for e in &plan.spec.env {
        s += &format!("env: {}\n", shown_bytes(e));
    }
    let argv: Vec<String> = plan.spec.argv.iter().map(|a| format!("{:?}", String::from_utf8_lossy(a))).collect();
    s += &format!("argv: [{}]\n", argv.join(", "));
    s
}

/// A path for `--explain`: as it is when it is plain text, else quoted with
/// its control characters and invalid bytes escaped, so a file name cannot
/// forge a line of the plan.
pub fn shown(p: &std::path::Path) -> String {
    shown_bytes(p.as_os_str().as_encoded_bytes())
}

/// Bytes for `--explain`, escaped as [`shown`] does.
pub fn shown_bytes(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(t) if !t.chars().any(char::is_control) => t.to_string(),
        _ => format!("{:?}", String::from_utf8_lossy(b)).replace('\u{fffd}', "\\x??"),
    }
}
