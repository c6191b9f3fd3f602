//! The tools' structured results where the workspace has no type of its
//! own for them: a command's result (`run_shell`, `run_tests`), a write, the
//! todo list, and the error object every failed call carries.

use schemars::JsonSchema;
use serde::Serialize;

use crate::runner::{Exec, Refused};
use crate::sandbox::{Outcome, ReportState};
use crate::workspace::files::Written;
use crate::workspace::todos::{Todo, TodoCounts};

/// Why a call did not do what was asked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ErrorInfo {
    /// A stable name to branch on: `bad-input`, `unknown-tool`, `path-escape`, `refused-by-policy`,
    /// `refused-by-gate`, `busy`, `not-found`, `not-unique`, `stale-hash`, `invalid-edit`, `too-many-edits`, `binary`,
    /// `not-regular`, `changed`, `no-such-file`, `unsafe-pattern`, `bad-glob`, `bad-path`, `todo`,
    /// `job-not-found`, `bad-cursor`, `timed-out`, `cancelled`, `io`, `fault`, `disposed`.
    pub kind: String,
    /// What happened and what to do next.
    pub message: String,
    /// The policy checker's reason for a refused command (e.g. `not-allowed`, `metacharacter`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The command the policy refused, or the gate rule that refused it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// The gate rule that answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

impl ErrorInfo {
    /// An error of this kind.
    pub fn new(kind: impl Into<String>, message: impl Into<String>) -> ErrorInfo {
        ErrorInfo { kind: kind.into(), message: message.into(), reason: None, command: None, rule: None }
    }

    /// A refusal of the policy or the gate.
    pub fn refused(r: &Refused) -> ErrorInfo {
        let kind = r.kind_name();
        let reason =
            r.reason.as_ref().and_then(|x| serde_json::to_value(x).ok()).and_then(|v| v.as_str().map(str::to_string));
        let next = if r.while_busy || r.message.to_ascii_lowercase().contains("do not retry") {
            // The message says what frees a job (the same start then
            // works), or already says not to retry: once is enough.
            "; nothing ran or changed"
        } else {
            "; nothing ran or changed. Do not retry the same action: change it, or ask the user"
        };
        ErrorInfo {
            kind: kind.into(),
            message: format!("{r}{next}"),
            reason,
            command: r.command.clone(),
            rule: r.rule.clone(),
        }
    }
}

/// How a command ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RunOutcome {
    /// It exited (see `exit_code`).
    Exited,
    /// A signal killed it (see `signal`).
    Signaled,
    /// Its timeout passed; its whole process tree was killed.
    TimedOut,
    /// It was cancelled; its whole process tree was killed (or it never started).
    Cancelled,
    /// It started as a background job (see `job_id`).
    Started,
    /// It was refused and never ran (see `error`).
    Refused,
}

/// The writes the kernel refused.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub struct RefusedWritesOut {
    /// Whether they were watched: `observed`, `off`, `unavailable` (then the count says nothing).
    pub state: String,
    /// How many writes were refused.
    pub count: u64,
    /// Some of the paths, absolute.
    pub sample: Vec<String>,
}

/// The result of a command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct RunOutput {
    /// How it ended.
    pub outcome: RunOutcome,
    /// Its exit code (when it exited).
    pub exit_code: Option<i32>,
    /// The signal that killed it (when signaled).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// What it printed on stdout (invalid UTF-8 shown as U+FFFD).
    pub stdout: String,
    /// What it printed on stderr.
    pub stderr: String,
    /// Output was cut at the workspace's cap.
    pub truncated: bool,
    /// Some output was not UTF-8 and is shown with U+FFFD (as `shell_output` and `read_file` say).
    pub lossy: bool,
    /// Whether the whole workspace was writable to it (decided by the host and the gate, not by the call).
    pub writable: bool,
    /// The paths it could write besides, absolute: the policy's write grants when the workspace was not
    /// writable as a whole (empty when it was, or without any write access).
    pub write_grants: Vec<String>,
    /// The writes the kernel refused: act on these ("no write access there"), do not retry them blindly.
    pub refused_writes: RefusedWritesOut,
    /// How long it ran, in milliseconds.
    pub duration_ms: u64,
    /// The sandbox it ran in: `full` (namespaces, read-only mounts, Landlock, seccomp), `landlock-only` (a
    /// degraded mode for hosts without user namespaces: Landlock refuses writes with EACCES instead of EROFS) or
    /// `mock` (a scripted backend: nothing ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// The background job's id, for `shell_output` and `shell_kill` (background runs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// Notes of the sandbox (e.g. a lowered write access).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// Why it was refused, or why it did not finish.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorInfo>,
}

impl RunOutput {
    fn empty(outcome: RunOutcome) -> RunOutput {
        RunOutput {
            outcome,
            exit_code: None,
            signal: None,
            stdout: String::new(),
            stderr: String::new(),
            truncated: false,
            lossy: false,
            writable: false,
            write_grants: Vec::new(),
            refused_writes: RefusedWritesOut { state: "off".into(), ..RefusedWritesOut::default() },
            duration_ms: 0,
            sandbox: None,
            job_id: None,
            warnings: Vec::new(),
            error: None,
        }
    }

    /// A refused command: nothing ran, no access.
    pub fn refused(r: &Refused) -> RunOutput {
        RunOutput { error: Some(ErrorInfo::refused(r)), ..RunOutput::empty(RunOutcome::Refused) }
    }

    /// A background job started.
    pub fn started(id: String, writable: bool) -> RunOutput {
        RunOutput { job_id: Some(id), writable, ..RunOutput::empty(RunOutcome::Started) }
    }

    /// What a foreground command did.
    pub fn of(exec: &Exec) -> RunOutput {
        match exec {
            Exec::Refused(r) => RunOutput::refused(r),
            Exec::Cancelled(n) => RunOutput {
                exit_code: Some(130),
                // Said once: the runner's own message may say it already.
                error: Some(ErrorInfo::new(
                    "cancelled",
                    if n.message.contains("nothing ran") {
                        n.message.clone()
                    } else {
                        format!("{}; nothing ran", n.message)
                    },
                )),
                ..RunOutput::empty(RunOutcome::Cancelled)
            },
            Exec::Ran(ran) => {
                let r = &ran.result;
                let (outcome, exit_code, signal, error) = match r.outcome {
                    Outcome::Exited { code } => (RunOutcome::Exited, Some(code), None, None),
                    Outcome::Signaled { signal } => (RunOutcome::Signaled, None, Some(signal), None),
                    Outcome::TimedOut => (
                        RunOutcome::TimedOut,
                        None,
                        None,
                        Some(ErrorInfo::new(
                            "timed-out",
                            "the command ran past its timeout and its whole process tree was killed; run something \
                             shorter, or start it with background: true and poll it with shell_output",
                        )),
                    ),
                    Outcome::Cancelled => (
                        RunOutcome::Cancelled,
                        None,
                        None,
                        Some(ErrorInfo::new(
                            "cancelled",
                            "the command was cancelled and its whole process tree killed",
                        )),
                    ),
                };
                let rw = &r.refused_writes;
                let state = match rw.state {
                    ReportState::Observed => "observed",
                    ReportState::Off => "off",
                    ReportState::Unavailable => "unavailable",
                };
                let mut warnings: Vec<String> =
                    r.warnings.iter().filter(|w| !w.concerns_the_host_only()).map(ToString::to_string).collect();
                if let Some(note) = ran.access_note() {
                    warnings.push(note);
                }
                if rw.count > 0 {
                    // Said plainly, so the model does not retry the write.
                    let n = rw.count;
                    let (writes, were) = if n == 1 { ("write was", "it") } else { ("writes were", "them") };
                    let sample: Vec<String> = rw.sample.iter().map(|p| p.display().to_string()).collect();
                    let at = if sample.is_empty() { String::new() } else { format!(": {}", sample.join(", ")) };
                    warnings.push(format!(
                        "{n} {writes} refused because this command had no write access there{at}. The host decides \
                         what a command may write; running {were} again fails the same way"
                    ));
                }
                let (stdout, lossy_out) = crate::workspace::lossy_text(r.stdout.clone());
                let (stderr, lossy_err) = crate::workspace::lossy_text(r.stderr.clone());
                RunOutput {
                    outcome,
                    exit_code,
                    signal,
                    stdout,
                    stderr,
                    truncated: r.truncated,
                    lossy: lossy_out || lossy_err,
                    writable: r.writable,
                    write_grants: r.write_grants.iter().map(|p| p.display().to_string()).collect(),
                    refused_writes: RefusedWritesOut {
                        state: state.into(),
                        count: rw.count,
                        sample: rw.sample.iter().map(|p| p.display().to_string()).collect(),
                    },
                    duration_ms: u64::try_from(r.duration.as_millis()).unwrap_or(u64::MAX),
                    sandbox: Some(match r.enforcement.backend {
                        crate::sandbox::EnforcedBy::Mock => "mock".to_string(),
                        crate::sandbox::EnforcedBy::Sandbox => r.enforcement.mode.name().to_string(),
                    }),
                    job_id: None,
                    warnings,
                    error,
                }
            }
        }
    }
}

/// The result of `write_file`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct WriteOutput {
    /// The file written, as given.
    pub path: String,
    /// Bytes written.
    pub bytes: u64,
    /// Whether the file is new.
    pub created: bool,
    /// The SHA-256 of the new content (a valid `expect_hash` for the next edit).
    pub hash: String,
}

impl WriteOutput {
    /// From the workspace's answer.
    pub fn of(path: &str, w: Written) -> WriteOutput {
        WriteOutput { path: path.to_string(), bytes: w.bytes, created: w.created, hash: w.hash }
    }
}

/// The todo list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct TodoOutput {
    /// The items, in order.
    pub todos: Vec<Todo>,
    /// How many items stand where.
    pub counts: TodoCounts,
}

/// The result of a failed call (its `error`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, JsonSchema)]
pub struct ErrorOutput {
    /// What went wrong and what to do next.
    pub error: ErrorInfo,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runner::NotStarted;

    #[test]
    fn a_cancelled_command_says_nothing_ran_once() {
        let says = |message: &str| {
            let out = RunOutput::of(&Exec::Cancelled(NotStarted { id: "a1".into(), message: message.into() }));
            out.error.map(|e| (e.kind, e.message)).unwrap_or_default()
        };
        assert_eq!(
            says("cancelled before it started: nothing ran"),
            ("cancelled".to_string(), "cancelled before it started: nothing ran".to_string())
        );
        assert_eq!(
            says("the call was cancelled before the job started"),
            ("cancelled".to_string(), "the call was cancelled before the job started; nothing ran".to_string())
        );
    }
}
