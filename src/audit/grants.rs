//! `portcullis audit grants`: from a log to "who could write where, and
//! what was refused".
//!
//! Records are joined by `id`. Per path (an *area*): the commands granted
//! write access there (the workspace when `effective.writable`, each
//! `effective.write_grants` path, a file operation's resolved path), and the
//! writes refused there, by which rule. A refused write's path (from an
//! outcome's `refused_writes.sample`) is counted in the longest area that
//! contains it (`/` holds the ones outside every area); the part of
//! `refused_writes.count` beyond the sample names no path, and is reported
//! per command as refused in "the command's read-only areas" as a whole.
//! Denied actions are listed with their refusal kind, reason and rule.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::verify::{self, VerifyError, VerifyReport};
use super::{Event, RefusalKind, Status};
use crate::gate::Action;

/// How an area was opened to a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Via {
    /// The whole workspace was writable.
    Workspace,
    /// A write grant named the path.
    WriteGrant,
    /// A direct file operation wrote it.
    FileOperation,
}

/// What an area is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum AreaKind {
    /// A workspace a command ran in.
    Workspace,
    /// A path a write grant named.
    WriteGrant,
    /// A file a direct operation named.
    File,
    /// `/`: everything outside the other areas.
    Elsewhere,
}

/// A command given write access to an area.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Granted {
    /// The action's id.
    pub id: String,
    /// The command line, or the file operation and its path.
    pub command: String,
    /// How.
    pub via: Via,
    /// The gate rule that answered, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// How it ended (`completed, exit 0`), or that no outcome was recorded.
    pub outcome: String,
}

/// Writes of one command refused in one area.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RefusedHere {
    /// The action's id.
    pub id: String,
    /// The command line.
    pub command: String,
    /// Why it had no write access there: `rule NAME`, `asked read-only`, or
    /// `outside the write access it had`.
    pub by: String,
    /// How many of the sampled paths lie in this area.
    pub count: u64,
    /// Those paths.
    pub paths: Vec<PathBuf>,
}

/// One path and what happened there.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AreaReport {
    /// The path.
    pub area: PathBuf,
    /// What it is (the first kind it was seen as, workspace first).
    pub kind: AreaKind,
    /// Commands granted write access here, in log order.
    pub granted: Vec<Granted>,
    /// RefusedHere writes here (sampled paths only), in all.
    pub refused_writes: u64,
    /// Per command.
    pub refused: Vec<RefusedHere>,
}

/// RefusedHere writes beyond a command's sample: no path is known for them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unsampled {
    /// The action's id.
    pub id: String,
    /// The command line.
    pub command: String,
    /// As in [`RefusedHere::by`].
    pub by: String,
    /// How many (the outcome's count minus its sample).
    pub count: u64,
}

/// A refused action.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DeniedEntry {
    /// The action's id.
    pub id: String,
    /// `shell.exec`, `fs.write`, …
    pub action: String,
    /// The command line, or the file operation's path.
    pub command: String,
    /// Who refused it.
    pub refusal: RefusalKind,
    /// Why.
    pub reason: String,
    /// The rule, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

/// The report. Built from the records as they are: check [`Self::chain`]
/// before trusting it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct GrantsReport {
    /// The chain's verdict on the same file.
    pub chain: VerifyReport,
    /// Per path, sorted by path.
    pub areas: Vec<AreaReport>,
    /// RefusedHere writes with no sampled path, per command.
    pub unsampled: Vec<Unsampled>,
    /// RefusedHere actions, in log order.
    pub denied: Vec<DeniedEntry>,
    /// Lines that are not records (skipped), 1-based.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped_lines: Vec<u64>,
}

/// An allowed action as the join keeps it.
struct Allowed {
    action: Action,
    effective: crate::gate::Access,
    rule: Option<String>,
}

struct Ended {
    status: Status,
    exit_code: Option<i32>,
    signal: Option<i32>,
    refused: Option<super::RefusedWritesRecord>,
}

fn command_of(action: &Action) -> String {
    match action {
        Action::ShellExec(s) => s.line.clone(),
        Action::FsWrite(f) | Action::FsEdit(f) | Action::FsMultiEdit(f) | Action::FsRemove(f) | Action::FsMkdir(f) => {
            format!("{} {}", action.kind(), f.path.display())
        }
    }
}

fn outcome_of(end: Option<&Ended>) -> String {
    let Some(e) = end else { return "no outcome recorded (still running, or the host stopped)".to_string() };
    let status = match e.status {
        Status::Completed => "completed",
        Status::Failed => "failed",
        Status::TimedOut => "timed out",
        Status::Cancelled => "cancelled",
    };
    match (e.exit_code, e.signal) {
        (Some(c), _) => format!("{status}, exit {c}"),
        (None, Some(s)) => format!("{status}, signal {s}"),
        _ => status.to_string(),
    }
}

fn refused_by(a: &Allowed) -> String {
    match &a.rule {
        Some(r) => format!("rule {r}"),
        None if !a.action.asked().writes() => "asked read-only".to_string(),
        None => "outside the write access it had".to_string(),
    }
}

/// Build the grants report of the log at `path`.
pub fn grants(path: &Path) -> Result<GrantsReport, VerifyError> {
    let chain = verify::verify(path)?;
    let file = File::open(path).map_err(|e| VerifyError::Open { path: path.to_path_buf(), source: e })?;
    let read_err = |e: io::Error| VerifyError::Read { path: path.to_path_buf(), source: e };
    let mut order: Vec<String> = Vec::new();
    let mut allowed: HashMap<String, Allowed> = HashMap::new();
    let mut ended: HashMap<String, Ended> = HashMap::new();
    let mut denied = Vec::new();
    let mut skipped_lines = Vec::new();
    for (i, line) in BufReader::new(file).split(b'\n').enumerate() {
        let line = line.map_err(read_err)?;
        let n = u64::try_from(i).unwrap_or(u64::MAX).saturating_add(1);
        let Ok(event) = serde_json::from_slice::<Event>(&line) else {
            skipped_lines.push(n);
            continue;
        };
        match event {
            Event::Allowed { id, action, effective, rule } => {
                order.push(id.clone());
                allowed.insert(id, Allowed { action, effective, rule });
            }
            Event::Denied { id, action, refusal, reason, rule } => denied.push(DeniedEntry {
                id,
                action: action.kind().to_string(),
                command: command_of(&action),
                refusal,
                reason,
                rule,
            }),
            Event::Outcome { id, status, exit_code, signal, refused_writes, .. } => {
                ended.insert(id, Ended { status, exit_code, signal, refused: refused_writes });
            }
        }
    }

    let mut areas: BTreeMap<PathBuf, AreaReport> = BTreeMap::new();
    let mut area = |p: &Path, kind: AreaKind| -> PathBuf {
        let e = areas.entry(p.to_path_buf()).or_insert_with(|| AreaReport {
            area: p.to_path_buf(),
            kind,
            granted: Vec::new(),
            refused_writes: 0,
            refused: Vec::new(),
        });
        e.kind = e.kind.min(kind);
        p.to_path_buf()
    };
    area(Path::new("/"), AreaKind::Elsewhere);
    let mut grants_of: Vec<(PathBuf, Granted)> = Vec::new();
    for id in &order {
        let Some(a) = allowed.get(id) else { continue };
        let command = command_of(&a.action);
        let outcome = outcome_of(ended.get(id));
        let granted = |via| Granted {
            id: id.clone(),
            command: command.clone(),
            via,
            rule: a.rule.clone(),
            outcome: outcome.clone(),
        };
        match &a.action {
            Action::ShellExec(s) => {
                let ws = area(s.workspace.as_deref().unwrap_or(&s.cwd), AreaKind::Workspace);
                if a.effective.writable {
                    grants_of.push((ws, granted(Via::Workspace)));
                }
                for g in &a.effective.write_grants {
                    grants_of.push((area(g, AreaKind::WriteGrant), granted(Via::WriteGrant)));
                }
            }
            Action::FsWrite(f)
            | Action::FsEdit(f)
            | Action::FsMultiEdit(f)
            | Action::FsRemove(f)
            | Action::FsMkdir(f) => {
                let p = area(&f.resolved, AreaKind::File);
                if a.effective.writes() {
                    grants_of.push((p, granted(Via::FileOperation)));
                }
            }
        }
    }
    for (p, g) in grants_of {
        if let Some(r) = areas.get_mut(&p) {
            r.granted.push(g);
        }
    }

    let mut unsampled = Vec::new();
    for id in &order {
        let (Some(a), Some(Ended { refused: Some(rw), .. })) = (allowed.get(id), ended.get(id)) else { continue };
        let command = command_of(&a.action);
        let by = refused_by(a);
        let cwd = match &a.action {
            Action::ShellExec(s) => s.cwd.clone(),
            _ => PathBuf::from("/"),
        };
        let mut per_area: BTreeMap<PathBuf, Vec<PathBuf>> = BTreeMap::new();
        for p in &rw.sample {
            let p = cwd.join(p);
            let best = areas.keys().filter(|k| p.starts_with(k)).max_by_key(|k| k.components().count()).cloned();
            per_area.entry(best.unwrap_or_else(|| PathBuf::from("/"))).or_default().push(p);
        }
        for (k, paths) in per_area {
            if let Some(r) = areas.get_mut(&k) {
                let count = u64::try_from(paths.len()).unwrap_or(u64::MAX);
                r.refused_writes += count;
                r.refused.push(RefusedHere { id: id.clone(), command: command.clone(), by: by.clone(), count, paths });
            }
        }
        let beyond = rw.count.saturating_sub(u64::try_from(rw.sample.len()).unwrap_or(u64::MAX));
        if beyond > 0 {
            unsampled.push(Unsampled { id: id.clone(), command, by, count: beyond });
        }
    }
    let areas = areas
        .into_values()
        .filter(|r| r.kind != AreaKind::Elsewhere || !r.refused.is_empty() || !r.granted.is_empty())
        .collect();
    Ok(GrantsReport { chain, areas, unsampled, denied, skipped_lines })
}

impl GrantsReport {
    /// The exit status of `portcullis audit grants`: 0 (the report was
    /// made; a broken chain is reported in it, not by the status).
    pub fn exit_code(&self) -> u8 {
        0
    }

    /// The report for people.
    pub fn render(&self) -> String {
        let mut s = String::new();
        let c = &self.chain;
        match &c.first_bad {
            None => s.push_str(&format!(
                "audit log {}: chain intact, {} record(s), head {}\n",
                c.path.display(),
                c.records,
                c.head.as_ref().map_or_else(|| "none".to_string(), ToString::to_string)
            )),
            Some(b) => s.push_str(&format!(
                "audit log {}: CHAIN BROKEN at line {} (run `portcullis audit verify`): what follows may not be what happened\n",
                c.path.display(),
                b.line
            )),
        }
        for a in &self.areas {
            let kind = match a.kind {
                AreaKind::Workspace => "workspace",
                AreaKind::WriteGrant => "write grant",
                AreaKind::File => "file",
                AreaKind::Elsewhere => "outside every other area",
            };
            s.push_str(&format!("\n{} ({kind})\n", a.area.display()));
            if a.granted.is_empty() {
                s.push_str("  write access: nobody\n");
            } else {
                s.push_str("  write access granted to:\n");
                for g in &a.granted {
                    let via = match g.via {
                        Via::Workspace => "writable workspace",
                        Via::WriteGrant => "write grant",
                        Via::FileOperation => "file operation",
                    };
                    let rule = g.rule.as_ref().map_or_else(String::new, |r| format!(", rule {r}"));
                    s.push_str(&format!("    [{}] {}  ({via}{rule}; {})\n", g.id, g.command, g.outcome));
                }
            }
            s.push_str(&format!("  writes refused: {}\n", a.refused_writes));
            for r in &a.refused {
                let paths: Vec<String> = r.paths.iter().map(|p| p.display().to_string()).collect();
                s.push_str(&format!("    {} by [{}] {}  ({}): {}\n", r.count, r.id, r.command, r.by, paths.join(", ")));
            }
        }
        if !self.unsampled.is_empty() {
            s.push_str("\nrefused writes beyond the samples (no path recorded; in the command's read-only areas as a whole):\n");
            for u in &self.unsampled {
                s.push_str(&format!("  {} by [{}] {}  ({})\n", u.count, u.id, u.command, u.by));
            }
        }
        s.push_str(&format!("\ndenied actions: {}\n", self.denied.len()));
        for d in &self.denied {
            let kind = match d.refusal {
                RefusalKind::RefusedByPolicy => "refused-by-policy",
                RefusalKind::RefusedByGate => "refused-by-gate",
            };
            let rule = d.rule.as_ref().map_or_else(String::new, |r| format!(", rule {r}"));
            s.push_str(&format!("  [{}] {} {}  ({kind}{rule}): {}\n", d.id, d.action, d.command, d.reason));
        }
        if !self.skipped_lines.is_empty() {
            let lines: Vec<String> = self.skipped_lines.iter().map(ToString::to_string).collect();
            s.push_str(&format!("\nlines that are not records, skipped: {}\n", lines.join(", ")));
        }
        s
    }
}
