//! Background jobs: commands that keep running while the caller does other
//! work, read a bounded window at a time (`start_shell`, `shell_output`,
//! `shell_kill` of the agent's tool belt).
//!
//! A [`Jobs`] registry is cheap to clone (an `Arc` inside): a workspace
//! holds one and shares it with its projections. Every job goes through
//! [`Runner`] exactly as a foreground command does (policy check, gate,
//! audit, sandbox); the gate sees `background: true`.
//!
//! **Starting.** [`Jobs::start`] needs the policy's `[shell.background]`
//! table; without it (or without a policy) the job is refused by the
//! policy, with how to enable it. At most `shell.background.max_jobs` jobs
//! of the registry run at once (a slot is reserved before the gate is asked,
//! so two starts cannot both take the last one); one more is refused naming
//! the limit. Both refusals are values ([`Started::Refused`]), recorded in
//! the audit as `denied` like any other. A job's timeout is
//! `shell.background.timeout`, lowered (never raised) by the caller's
//! `ExecOptions::timeout`. Its stdin is `/dev/null`, never the host's fd 0.
//! A cancellation token given to [`Jobs::start`] kills the job when it is
//! cancelled; one already cancelled starts nothing (the sandbox refuses to
//! spawn: status `killed`, exit code 130, the audit's outcome `cancelled`).
//!
//! **Ids.** `j<n>-<8 hex>`: a sequence number, never reused within the
//! registry, and 32 random bits, so an id cannot be guessed from another.
//!
//! **Output.** Each job keeps only the newest `shell.max_output_bytes`
//! (lowered, never raised, by `ExecOptions::max_output`) of its output in a
//! ring. Every byte of either stream gets the next number of one sequence
//! over both; a read's `cursor` is the number the next byte will get, so
//! [`Jobs::output`] with `since: Some(cursor)` returns exactly what came
//! next on either stream: nothing repeated, nothing missed, except what fell
//! out of the ring meanwhile, which `dropped_bytes` counts (`since: None`
//! reads from the first byte the job wrote). Output is given as text:
//! invalid UTF-8 is replaced by U+FFFD and `lossy` says so. A character is
//! never split by a read or by the ring: up to 3 bytes of a character not
//! yet complete are held back until the rest arrives (or the job ends), and
//! a cut of the ring that would start inside a character drops the rest of
//! it too (counted in `dropped_bytes`). A read with `wait` returns as soon
//! as new output arrives or the job ends, else when `wait` passes (capped at
//! [`MAX_WAIT`]); it waits on a notification, never by polling.
//!
//! **Ending.** A job ends `exited` (its own exit, `signal` set when a
//! signal ended it, `exit_code` then 128 + n), `killed` ([`Jobs::kill`],
//! [`Jobs::dispose`], its cancellation token: code 130), `timed-out` (code
//! 124) or `failed` (a sandbox fault, or an audit record that could not be
//! written: `error` names it; `exit_code` is the sandbox's own, 125–127).
//! The final result is kept with the output: exit code, signal, refused
//! writes count, duration, warnings, error. [`Jobs::kill`] returns once
//! the sandbox has killed the whole tree (the cgroup emptied and removed,
//! the helper reaped); killing a job that already ended is not an error
//! (the report says so). Only processes this registry's sandbox runs
//! started are ever signalled: a job is killed through its own cancellation
//! token, never through a pid.
//!
//! **Memory.** An ended job's output is released once a read has returned
//! its end (its status and result stay); at most [`KEEP_ENDED`] ended jobs
//! are remembered (the oldest forgotten first, then `NotFound`). So the
//! registry holds at most `max_jobs + KEEP_ENDED` rings.
//!
//! **Disposal.** [`Jobs::dispose`] makes the registry refuse new jobs
//! ([`JobError::Disposed`]), kills every job and waits until each tree is
//! gone. Dropping the last handle cancels every job without waiting: the
//! runs end on the runtime as a kill does. If the runtime itself is dropped
//! with jobs running, each run's future is dropped: the helper's lifeline
//! closes (it kills the sandbox's pid 1, which takes the pid namespace
//! down), the helper is reaped (killed after 1 s), and the cgroup is
//! killed and removed; no process is left behind (tests r0427, r0428).
//!
//! **Writable jobs.** A writable job holds the workspace's lock *shared*
//! for its whole life, as every writable run does (`sandbox::pending`): later
//! writable commands and jobs of the workspace, and of its scopes, run
//! beside it; the git guard of all of them is done by the last to end.

use std::collections::{HashMap, VecDeque};
use std::ffi::OsString;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::audit::RefusalKind;
use crate::gate::Action;
use crate::runner::{Exec, ExecOptions, Prepared, Refused, RunError, Runner};
use crate::sandbox::{ExecResult, Outcome, ReportState, RunOptions, Stdin, Stream};

/// The longest a read waits for new output.
pub const MAX_WAIT: Duration = Duration::from_secs(30);

/// How many ended jobs a registry remembers.
pub const KEEP_ENDED: usize = 32;

/// Most chunks a ring keeps (a stream of tiny alternating writes would
/// otherwise cost far more than its bytes).
const MAX_CHUNKS: usize = 1 << 14;

/// What [`Jobs::start`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Started {
    /// The job runs.
    Job {
        /// Its id.
        id: String,
        /// The write access it runs with: what was asked, met with the
        /// gate's answer.
        access: crate::gate::Access,
    },
    /// It was refused (and recorded as denied); nothing runs.
    Refused(Refused),
}

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum JobStatus {
    /// Still running (or being set up).
    Running,
    /// The command ended by itself (an exit or a signal of its own).
    Exited,
    /// Killed: [`Jobs::kill`], [`Jobs::dispose`] or its cancellation token.
    Killed,
    /// Its timeout passed; the whole tree was killed.
    TimedOut,
    /// The sandbox failed, or the audit could not record the run.
    Failed,
}

/// One read of a job's output, and where the job is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct JobOutput {
    /// The job.
    pub id: String,
    /// Standard output since the cursor read from.
    pub stdout: String,
    /// Standard error since the cursor read from.
    pub stderr: String,
    /// Pass it as `since` to read only what comes next.
    pub cursor: u64,
    /// Bytes between `since` and the oldest byte kept that fell out of
    /// the ring (or were released after an earlier read of the job's end).
    pub dropped_bytes: u64,
    /// Whether anything was dropped (`dropped_bytes > 0`).
    pub truncated: bool,
    /// Invalid UTF-8 was replaced by U+FFFD.
    pub lossy: bool,
    /// Where the job is.
    pub status: JobStatus,
    /// Its exit status, once it ended: the command's code, 128 + n for a
    /// signal, 124 timed out, 130 killed, the sandbox's 125–127 for a fault.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// The signal that ended the command, if one did (by itself).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Writes the kernel refused (when the report was made).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused_writes: Option<u64>,
    /// How long it ran, once it ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// The sandbox's warnings about the run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The fault a `failed` job ended in (or a kill before it started).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What [`Jobs::kill`] found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct KillReport {
    /// The job.
    pub id: String,
    /// How it ended (`killed`, unless it had ended, or ended by itself
    /// while the kill was on its way).
    pub status: JobStatus,
    /// It had ended before the kill: nothing was signalled.
    pub already_ended: bool,
}

/// A job could not be started, found or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JobError {
    /// No such job.
    #[error(
        "no background job {id}: it was never started here, or it ended and was forgotten (the last {KEEP_ENDED} ended jobs are kept); check the id"
    )]
    NotFound {
        /// The id asked for.
        id: String,
    },
    /// The registry was disposed.
    #[error("the workspace was disposed: it starts no more background jobs; make a new workspace")]
    Disposed,
    /// A cursor no read of this job returned.
    #[error("background job {id}: cursor {cursor} is past its output (its newest cursor is {latest}); pass a cursor an earlier read returned, or none")]
    BadCursor {
        /// The job.
        id: String,
        /// The cursor given.
        cursor: u64,
        /// The newest cursor.
        latest: u64,
    },
    /// The job could not be judged or started (the policy, the gate, the
    /// caller's options).
    #[error(transparent)]
    Run(#[from] RunError),
}

/// A run of one stream's bytes, `start` the sequence number of its first.
#[derive(Debug)]
struct Chunk {
    stream: Stream,
    start: u64,
    data: Vec<u8>,
}

/// The newest `cap` bytes of a job's output, in one sequence over both
/// streams.
#[derive(Debug)]
struct Ring {
    cap: usize,
    chunks: VecDeque<Chunk>,
    kept: usize,
    /// The sequence number the next byte gets.
    total: u64,
    /// The start of a character not yet complete, per stream.
    pending: [Vec<u8>; 2],
}

fn slot(s: Stream) -> usize {
    match s {
        Stream::Stdout => 0,
        Stream::Stderr => 1,
    }
}

fn is_continuation(b: u8) -> bool {
    b & 0xC0 == 0x80
}

/// Where an incomplete UTF-8 character at the end of `b` starts (`b.len()`
/// when there is none): only a valid prefix of a character is held back.
fn incomplete_tail(b: &[u8]) -> usize {
    let from = b.len().saturating_sub(3);
    let Some(lead) = (from..b.len()).rev().find(|&i| !is_continuation(b[i])) else { return b.len() };
    match std::str::from_utf8(&b[lead..]) {
        Err(e) if e.valid_up_to() == 0 && e.error_len().is_none() => lead,
        _ => b.len(),
    }
}

/// Past the continuation bytes at `at` (a cut there would split a
/// character).
fn char_boundary(b: &[u8], mut at: usize) -> usize {
    let stop = (at + 3).min(b.len());
    while at < stop && is_continuation(b[at]) {
        at += 1;
    }
    at
}

impl Ring {
    fn new(cap: usize) -> Ring {
        Ring { cap, chunks: VecDeque::new(), kept: 0, total: 0, pending: [Vec::new(), Vec::new()] }
    }

    fn oldest(&self) -> u64 {
        self.total - self.kept as u64
    }

    fn push(&mut self, stream: Stream, data: &[u8]) {
        let pending = &mut self.pending[slot(stream)];
        let mut bytes = std::mem::take(pending);
        bytes.extend_from_slice(data);
        let cut = incomplete_tail(&bytes);
        *pending = bytes.split_off(cut);
        self.append(stream, bytes);
    }

    /// The held-back bytes, as they are (the job ended).
    fn finish(&mut self) {
        for s in [Stream::Stdout, Stream::Stderr] {
            let held = std::mem::take(&mut self.pending[slot(s)]);
            self.append(s, held);
        }
    }

    fn append(&mut self, stream: Stream, mut bytes: Vec<u8>) {
        if bytes.is_empty() {
            return;
        }
        let mut start = self.total;
        self.total += bytes.len() as u64;
        if bytes.len() > self.cap {
            let cut = char_boundary(&bytes, bytes.len() - self.cap);
            bytes.drain(..cut);
            start += cut as u64;
            self.chunks.clear();
            self.kept = 0;
        }
        self.kept += bytes.len();
        match self.chunks.back_mut() {
            Some(last) if last.stream == stream && last.start + last.data.len() as u64 == start => {
                last.data.extend_from_slice(&bytes)
            }
            _ => self.chunks.push_back(Chunk { stream, start, data: bytes }),
        }
        self.evict();
    }

    fn evict(&mut self) {
        while self.kept > self.cap || self.chunks.len() > MAX_CHUNKS {
            let excess = self.kept.saturating_sub(self.cap);
            let too_many = self.chunks.len() > MAX_CHUNKS;
            let Some(front) = self.chunks.front_mut() else { break };
            let cut = if too_many { front.data.len() } else { char_boundary(&front.data, excess) };
            if cut >= front.data.len() {
                self.kept -= front.data.len();
                self.chunks.pop_front();
            } else {
                front.data.drain(..cut);
                front.start += cut as u64;
                self.kept -= cut;
            }
        }
    }

    /// Everything kept from `since` on, per stream, and how much between
    /// `since` and the oldest byte kept was dropped.
    fn read(&self, since: u64) -> ([Vec<u8>; 2], u64) {
        let oldest = self.oldest();
        let dropped = oldest.saturating_sub(since);
        let from = since.max(oldest);
        let mut out = [Vec::new(), Vec::new()];
        for c in &self.chunks {
            let end = c.start + c.data.len() as u64;
            if end <= from {
                continue;
            }
            let skip = usize::try_from(from.saturating_sub(c.start)).unwrap_or(usize::MAX).min(c.data.len());
            out[slot(c.stream)].extend_from_slice(&c.data[skip..]);
        }
        (out, dropped)
    }

    /// Free the bytes (the job's end was read); the sequence stays.
    fn release(&mut self) {
        self.chunks = VecDeque::new();
        self.kept = 0;
    }
}

/// How a job ended.
#[derive(Debug, Clone, Default)]
struct End {
    exit_code: Option<i32>,
    signal: Option<i32>,
    refused_writes: Option<u64>,
    duration_ms: Option<u64>,
    warnings: Vec<String>,
    error: Option<String>,
}

#[derive(Debug)]
struct JobState {
    ring: Ring,
    status: JobStatus,
    end: End,
    /// A read returned the job's end (its bytes were released).
    collected: bool,
}

#[derive(Debug)]
struct Job {
    id: String,
    state: Mutex<JobState>,
    changed: Notify,
    cancel: CancellationToken,
}

impl Job {
    fn lock(&self) -> MutexGuard<'_, JobState> {
        // A panic while the lock was held cannot leave the ring
        // inconsistent in a way a read could not survive.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn output(&self, stream: Stream, data: &[u8]) {
        self.lock().ring.push(stream, data);
        self.changed.notify_waiters();
    }

    fn ended(&self, status: JobStatus, end: End) {
        {
            let mut st = self.lock();
            st.ring.finish();
            st.status = status;
            st.end = end;
        }
        self.changed.notify_waiters();
    }

    /// Wait until the job ended.
    async fn wait_end(&self) -> JobStatus {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let status = self.lock().status;
            if status != JobStatus::Running {
                return status;
            }
            notified.await;
        }
    }
}

#[derive(Debug, Default)]
struct Registry {
    jobs: HashMap<String, Arc<Job>>,
    /// Jobs running or being started (slots taken).
    running: usize,
    next: u64,
    disposed: bool,
    /// Ended jobs, oldest first.
    ended: VecDeque<String>,
}

#[derive(Debug)]
struct Inner {
    registry: Mutex<Registry>,
    /// Every job's token is a child of it.
    root: CancellationToken,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last handle is gone: kill every job (their runs end on the
        // runtime; nothing waits here).
        self.root.cancel();
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The background jobs of one workspace (see the module's documentation).
#[derive(Debug, Clone)]
pub struct Jobs {
    inner: Arc<Inner>,
}

impl Default for Jobs {
    fn default() -> Self {
        Jobs::new()
    }
}

/// Gives back a reserved slot unless the job took it over.
struct Slot<'a> {
    inner: &'a Inner,
    armed: bool,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        if self.armed {
            let mut reg = self.inner.lock();
            reg.running = reg.running.saturating_sub(1);
        }
    }
}

fn refusal(message: String) -> Refused {
    Refused { kind: RefusalKind::RefusedByPolicy, message, command: None, reason: None, rule: None, while_busy: false }
}

fn millis(d: Duration) -> Option<u64> {
    Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The status and exit code an outcome of the sandbox means for a job.
fn of_outcome(o: Outcome) -> (JobStatus, Option<i32>, Option<i32>) {
    let code = i32::from(o.exit_status());
    match o {
        Outcome::Exited { code } => (JobStatus::Exited, Some(code), None),
        Outcome::Signaled { signal } => (JobStatus::Exited, Some(code), Some(signal)),
        Outcome::TimedOut => (JobStatus::TimedOut, Some(code), None),
        Outcome::Cancelled => (JobStatus::Killed, Some(code), None),
    }
}

fn of_result(r: &ExecResult) -> (JobStatus, End) {
    let (status, exit_code, signal) = of_outcome(r.outcome);
    let end = End {
        exit_code,
        signal,
        refused_writes: (r.refused_writes.state == ReportState::Observed).then_some(r.refused_writes.count),
        duration_ms: millis(r.duration),
        warnings: r.warnings.iter().filter(|w| !w.concerns_the_host_only()).map(ToString::to_string).collect(),
        error: None,
    };
    (status, end)
}

/// How a job's run ended, as the job reports it.
fn job_end(result: Result<Exec, RunError>, started: std::time::Instant) -> (JobStatus, End) {
    match result {
        Ok(Exec::Ran(r)) => of_result(&r.result),
        Ok(Exec::Cancelled(n)) => (
            JobStatus::Killed,
            End {
                exit_code: Some(i32::from(crate::sandbox::status::CANCELLED)),
                error: Some(n.message),
                duration_ms: millis(started.elapsed()),
                ..End::default()
            },
        ),
        Ok(Exec::Refused(r)) => (
            JobStatus::Failed,
            End { error: Some(r.to_string()), duration_ms: millis(started.elapsed()), ..End::default() },
        ),
        Err(e) => {
            let error = Some(crate::error_chain(&e));
            match e.result() {
                Some(r) => {
                    // The command ran, but a step after it (the git guard,
                    // the cgroup, the audit) failed: the job failed.
                    let (_, end) = of_result(r);
                    (JobStatus::Failed, End { error, ..end })
                }
                None => {
                    let code = e.exit_code();
                    let status = match code {
                        crate::sandbox::status::CANCELLED => JobStatus::Killed,
                        crate::sandbox::status::TIMED_OUT => JobStatus::TimedOut,
                        _ => JobStatus::Failed,
                    };
                    let end = End {
                        exit_code: Some(i32::from(code)),
                        duration_ms: millis(started.elapsed()),
                        error,
                        ..End::default()
                    };
                    (status, end)
                }
            }
        }
    }
}

/// Record a refusal as denied, and return it.
async fn recorded(runner: &Runner, action: Box<Action>, refused: Refused) -> Result<Started, JobError> {
    runner.run_prepared(Prepared::Refused { action, refused: refused.clone() }, RunOptions::default()).await?;
    Ok(Started::Refused(refused))
}

/// Waits for `token` (forever without one).
async fn cancelled(token: Option<CancellationToken>) {
    match token {
        Some(t) => t.cancelled().await,
        None => std::future::pending().await,
    }
}

impl Jobs {
    /// An empty registry.
    pub fn new() -> Jobs {
        Jobs { inner: Arc::new(Inner { registry: Mutex::default(), root: CancellationToken::new() }) }
    }

    /// Judge, gate, record and start `words` (the argv, or with `opts.sh`
    /// one line) as a background job of `runner`; `cancel`, when given,
    /// kills the job when it is cancelled (one already cancelled starts
    /// nothing). A refusal is recorded as denied and returned as a value.
    pub async fn start(
        &self,
        runner: Arc<Runner>,
        words: &[OsString],
        opts: ExecOptions,
        cancel: Option<CancellationToken>,
    ) -> Result<Started, JobError> {
        self.start_input(runner, words, None, opts, cancel, None).await
    }

    /// The same for one line of text, read as the policy reads lines (see
    /// [`Runner::prepare_line`]).
    pub async fn start_line(
        &self,
        runner: Arc<Runner>,
        line: &str,
        opts: ExecOptions,
        cancel: Option<CancellationToken>,
    ) -> Result<Started, JobError> {
        self.start_input(runner, &[OsString::from(line)], Some(line), opts, cancel, None).await
    }

    /// [`Jobs::start_line`], carried out by `executor` instead of the
    /// sandbox (a backend's own, such as the mock's).
    pub async fn start_line_with(
        &self,
        runner: Arc<Runner>,
        line: &str,
        opts: ExecOptions,
        cancel: Option<CancellationToken>,
        executor: Arc<dyn crate::runner::Executor>,
    ) -> Result<Started, JobError> {
        self.start_input(runner, &[OsString::from(line)], Some(line), opts, cancel, Some(executor)).await
    }

    async fn start_input(
        &self,
        runner: Arc<Runner>,
        words: &[OsString],
        line: Option<&str>,
        mut opts: ExecOptions,
        cancel: Option<CancellationToken>,
        executor: Option<Arc<dyn crate::runner::Executor>>,
    ) -> Result<Started, JobError> {
        opts.background = true;
        let cancel = cancel.or_else(|| opts.cancel.clone());
        let bg = runner.policy().and_then(|p| p.shell.as_ref()).map(|s| (s.background.clone(), s.max_output_bytes));
        let (bg, max_output) = match bg {
            Some((Some(bg), max)) => (bg, max),
            _ => {
                let why = if runner.policy().is_none() {
                    "background jobs need a policy with a [shell.background] table (max_jobs, timeout); run the command in the foreground, or give the workspace such a policy"
                } else {
                    "background jobs are not enabled by the policy: add a [shell.background] table (max_jobs = 4, timeout = \"1h\") to enable them, or run the command in the foreground"
                };
                return self.refuse(&runner, words, &opts, refusal(why.into())).await;
            }
        };
        // The runner gives a background command `bg.timeout`, which the
        // caller's `opts.timeout` can only lower.
        let cap = opts.max_output.map_or(max_output, |m| m.min(max_output));
        let cap = usize::try_from(cap).unwrap_or(usize::MAX);
        // A command the policy refuses is refused as such, whatever the
        // job table holds: "busy" would have a model end a job for a start
        // that can never run. (The policy's checker alone: no gate asked.)
        if let Some(Prepared::Refused { action, refused }) = runner.refused_by_policy(line, words, &opts)? {
            return recorded(&runner, action, refused).await;
        }
        // Take a slot before the gate is asked: two starts cannot both get
        // the last one.
        let slot = {
            let mut reg = self.inner.lock();
            if reg.disposed {
                return Err(JobError::Disposed);
            }
            if reg.running >= bg.max_jobs as usize {
                None
            } else {
                reg.running += 1;
                Some(Slot { inner: &self.inner, armed: true })
            }
        };
        let Some(mut slot) = slot else {
            let why = format!(
                "{} background jobs are running, the most shell.background.max_jobs allows: wait for one to end \
                 (read its output) or stop one (kill it), then start this again; or ask the user to raise the limit",
                bg.max_jobs
            );
            return self.refuse(&runner, words, &opts, Refused { while_busy: true, ..refusal(why) }).await;
        };
        let prepared = match line {
            Some(l) => runner.prepare_line(l, &opts).await?,
            None => runner.prepare(words, &opts).await?,
        };
        let (prepared, access) = match prepared {
            Prepared::Refused { action, refused } => return recorded(&runner, action, refused).await,
            Prepared::Ready(ready) => {
                let access = ready.effective.clone();
                (Prepared::Ready(ready), access)
            }
        };
        let job = {
            let mut reg = self.inner.lock();
            if reg.disposed {
                return Err(JobError::Disposed);
            }
            reg.next += 1;
            let mut rand = [0u8; 4];
            crate::sys::random(&mut rand);
            let id = format!("j{}-{}", reg.next, rand.iter().map(|b| format!("{b:02x}")).collect::<String>());
            let job = Arc::new(Job {
                id: id.clone(),
                state: Mutex::new(JobState {
                    ring: Ring::new(cap),
                    status: JobStatus::Running,
                    end: End::default(),
                    collected: false,
                }),
                changed: Notify::new(),
                cancel: self.inner.root.child_token(),
            });
            reg.jobs.insert(id, job.clone());
            slot.armed = false;
            job
        };
        if cancel.as_ref().is_some_and(CancellationToken::is_cancelled) {
            job.cancel.cancel();
        }
        let id = job.id.clone();
        let registry = Arc::downgrade(&self.inner);
        tokio::spawn(run_job(runner, executor, prepared, job, cancel, registry));
        Ok(Started::Job { id, access })
    }

    /// Record and return a refusal of the registry's own.
    async fn refuse(
        &self,
        runner: &Runner,
        words: &[OsString],
        opts: &ExecOptions,
        refused: Refused,
    ) -> Result<Started, JobError> {
        recorded(runner, Box::new(runner.unchecked_action(words, opts)), refused).await
    }

    fn get(&self, id: &str) -> Result<Arc<Job>, JobError> {
        self.inner.lock().jobs.get(id).cloned().ok_or_else(|| JobError::NotFound { id: id.to_string() })
    }

    /// The job's output from `since` (a cursor an earlier read returned;
    /// `None`: from its first byte) and where it is. With `wait`, a read
    /// that would return nothing new from a running job waits (at most
    /// [`MAX_WAIT`]) until output arrives or the job ends.
    pub async fn output(&self, id: &str, since: Option<u64>, wait: Duration) -> Result<JobOutput, JobError> {
        let job = self.get(id)?;
        let deadline = tokio::time::Instant::now() + wait.min(MAX_WAIT);
        let from = since.unwrap_or(0);
        loop {
            let notified = job.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut st = job.lock();
                if from > st.ring.total {
                    return Err(JobError::BadCursor { id: id.to_string(), cursor: from, latest: st.ring.total });
                }
                let ready = st.ring.total > from || st.status != JobStatus::Running;
                if ready || tokio::time::Instant::now() >= deadline {
                    return Ok(read(&job.id, &mut st, from));
                }
            }
            // A timeout only ends the wait: the next turn reads.
            let _ = tokio::time::timeout_at(deadline, notified).await;
        }
    }

    /// Kill the job's whole tree and wait until it is gone.
    pub async fn kill(&self, id: &str) -> Result<KillReport, JobError> {
        let job = self.get(id)?;
        let before = job.lock().status;
        if before != JobStatus::Running {
            return Ok(KillReport { id: job.id.clone(), status: before, already_ended: true });
        }
        job.cancel.cancel();
        let status = job.wait_end().await;
        Ok(KillReport { id: job.id.clone(), status, already_ended: false })
    }

    /// Refuse new jobs from now on, kill every job and wait until every
    /// tree is gone.
    pub async fn dispose(&self) {
        let jobs: Vec<Arc<Job>> = {
            let mut reg = self.inner.lock();
            reg.disposed = true;
            reg.jobs.values().cloned().collect()
        };
        self.inner.root.cancel();
        for job in jobs {
            job.wait_end().await;
        }
    }

    /// The ids of the jobs the registry knows (running and remembered).
    pub fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.inner.lock().jobs.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// How many jobs are running (or being started).
    pub fn running(&self) -> usize {
        self.inner.lock().running
    }
}

/// One read: what is kept from `from` on; a read that returns the end of
/// an ended job releases its bytes.
fn read(id: &str, st: &mut JobState, from: u64) -> JobOutput {
    let ([out, err], dropped) = st.ring.read(from);
    let ((stdout, l1), (stderr, l2)) = (super::lossy_text(out), super::lossy_text(err));
    let output = JobOutput {
        id: id.to_string(),
        stdout,
        stderr,
        cursor: st.ring.total,
        dropped_bytes: dropped,
        truncated: dropped > 0,
        lossy: l1 || l2,
        status: st.status,
        exit_code: st.end.exit_code,
        signal: st.end.signal,
        refused_writes: st.end.refused_writes,
        duration_ms: st.end.duration_ms,
        warnings: st.end.warnings.clone(),
        error: st.end.error.clone(),
    };
    if st.status != JobStatus::Running && !st.collected {
        st.collected = true;
        st.ring.release();
    }
    output
}

/// The job's run, then its end recorded and the registry's books kept.
async fn run_job(
    runner: Arc<Runner>,
    executor: Option<Arc<dyn crate::runner::Executor>>,
    prepared: Prepared,
    job: Arc<Job>,
    caller: Option<CancellationToken>,
    registry: Weak<Inner>,
) {
    let started = std::time::Instant::now();
    let sink = job.clone();
    let run = RunOptions {
        stdin: Stdin::Null,
        on_output: Some(Box::new(move |stream, data| sink.output(stream, data))),
        cancel: Some(job.cancel.clone()),
        stream_only: true,
    };
    let exec = runner.run_prepared_by(prepared, run, executor.as_deref());
    tokio::pin!(exec);
    let result = tokio::select! {
        biased;
        r = &mut exec => r,
        () = cancelled(caller) => {
            job.cancel.cancel();
            exec.await
        }
    };
    let (status, end) = job_end(result, started);
    job.ended(status, end);
    if let Some(inner) = registry.upgrade() {
        let mut reg = inner.lock();
        reg.running = reg.running.saturating_sub(1);
        reg.ended.push_back(job.id.clone());
        while reg.ended.len() > KEEP_ENDED {
            if let Some(old) = reg.ended.pop_front() {
                reg.jobs.remove(&old);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(r: &Ring, since: u64) -> (String, String, u64) {
        let ([o, e], d) = r.read(since);
        (String::from_utf8_lossy(&o).into_owned(), String::from_utf8_lossy(&e).into_owned(), d)
    }

    #[test]
    fn one_sequence_over_both_streams() {
        let mut r = Ring::new(100);
        r.push(Stream::Stdout, b"ab");
        r.push(Stream::Stderr, b"cd");
        let c = r.total;
        r.push(Stream::Stdout, b"ef");
        assert_eq!(all(&r, 0), ("abef".into(), "cd".into(), 0));
        assert_eq!(all(&r, c), ("ef".into(), String::new(), 0));
    }

    #[test]
    fn the_ring_keeps_the_newest_and_counts_the_rest() {
        let mut r = Ring::new(10);
        for i in 0..10u8 {
            r.push(if i % 2 == 0 { Stream::Stdout } else { Stream::Stderr }, &[b'0' + i; 3]);
        }
        let (o, e, d) = all(&r, 0);
        assert_eq!(o.len() + e.len(), 10);
        assert_eq!(d + 10, 30);
        assert_eq!(r.total, 30);
    }

    #[test]
    fn a_character_is_never_split() {
        let mut r = Ring::new(5);
        // "é" is 2 bytes: held back until its second byte arrives.
        r.push(Stream::Stdout, b"a\xc3");
        assert_eq!(r.total, 1);
        r.push(Stream::Stdout, b"\xa9");
        assert_eq!(all(&r, 0).0, "aé");
        // A cut inside "€" (3 bytes) drops all of it.
        r.push(Stream::Stdout, "€€".as_bytes());
        let (o, _, d) = all(&r, 0);
        assert_eq!(o, "€");
        assert_eq!(d as usize + o.len(), 1 + 2 + 6);
        // Invalid bytes are not held back; the end flushes a partial one.
        r.push(Stream::Stderr, b"\xff\xe2\x82");
        r.finish();
        assert_eq!(r.pending, [Vec::<u8>::new(), Vec::new()]);
    }
}
