//! The MCP server over a [`Tools`] set (issue 11): what `portcullis serve`
//! runs. A thin layer: every call goes to [`Tools::call`], which passes
//! the policy, the gate and the audit; this module only speaks the
//! protocol. See `docs/mcp.md`.
//!
//! - stdio framing: one JSON-RPC message per line ([`wire`]), every
//!   incoming line bounded ([`ServerOptions::max_message`]); only protocol
//!   messages are written, logs go to stderr (never waited for: a client
//!   that does not read them loses lines, the server does not stall);
//! - both protocol eras: the `initialize` handshake (2025-11-25, accepting
//!   2025-06-18 and 2025-03-26) and the stateless 2026-07-28 revision
//!   (`server/discover`, per-request `_meta`, `resultType`, `ttlMs` and
//!   `cacheScope`, error -32022), chosen per request: a request that
//!   carries its protocol version in `_meta` is served statelessly, one
//!   without it is served under the handshake's version;
//! - the answers waiting to be written are bounded
//!   ([`ServerOptions::max_queued`]): past it the server stops reading requests
//!   until the client reads, so one that only writes cannot make it hold
//!   answers without bound;
//! - requests served concurrently; `notifications/cancelled` cancels a call
//!   (a running command's whole tree is killed; a background job whose
//!   start it cancelled is killed, since no one learns its id) and nothing
//!   more is sent for it; `notifications/progress` while a command runs, when the
//!   request carried a `progressToken`;
//! - the end of the input (or of the output, or a signal) cancels every
//!   call (each still answers, if the output is there) and disposes of the
//!   workspace: no process it started is left.
//!
//! Why not `rmcp`: its stdio transport ignores a line that is not JSON and
//! drops an oversized one without an answer, ends the service on a
//! notification before `initialize`, and picks one era for the whole
//! process; issue 11 asks for JSON-RPC errors and a server that keeps
//! serving. The protocol surface a tool server needs is small (six
//! methods, two notifications), so it is written here against the spec.

pub mod config;
pub mod stdio;
pub mod wire;

pub use config::{ServeConfig, ServeError};

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::tools::{CallCtx, Progress, Tool, ToolResult, Tools};
use wire::{Frame, Incoming, LineReader, RpcError};

/// The stateless revision this server speaks.
pub const MODERN_VERSION: &str = "2026-07-28";
/// The handshake revisions `initialize` accepts, newest first (the answer
/// to any other is the first).
pub const HANDSHAKE_VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];
/// `_meta` key: the request's protocol version (2026-07-28).
pub const META_VERSION: &str = "io.modelcontextprotocol/protocolVersion";
/// `_meta` key: the client's capabilities (2026-07-28).
pub const META_CAPABILITIES: &str = "io.modelcontextprotocol/clientCapabilities";
/// `_meta` key: the server's name and version in every modern result.
pub const META_SERVER_INFO: &str = "io.modelcontextprotocol/serverInfo";
/// How long a client may cache `tools/list` and `server/discover` (the
/// list is fixed for the life of the server: it changes only with a new
/// policy, which needs a new server).
pub const LIST_TTL_MS: u64 = 5 * 60 * 1000;
/// The most calls running at once (a cancelled call counts until it has
/// ended); more are answered with an error.
pub const MAX_IN_FLIGHT: usize = 256;
/// The default bound on the answers waiting to be written (32 MiB; see
/// [`ServerOptions::max_queued`]).
pub const DEFAULT_MAX_QUEUED: usize = 32 << 20;
/// How long the shutdown waits for cancelled calls to end.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How a server runs.
#[derive(Clone, Debug)]
pub struct ServerOptions {
    /// The longest incoming message, in bytes.
    pub max_message: usize,
    /// The most bytes of answers waiting to be written: past it the server
    /// reads no more requests (and sends no progress) until the client
    /// reads, so a client that sends and never reads cannot make it hold
    /// answers without bound (a `tools/list` of 180 bytes is answered
    /// with ~45 KB).
    pub max_queued: usize,
    /// Write a line to stderr for each protocol error and at the end (from
    /// a thread of its own: lines are dropped, never waited for, while the
    /// client does not read them).
    pub log: bool,
}

impl Default for ServerOptions {
    fn default() -> ServerOptions {
        ServerOptions { max_message: wire::DEFAULT_MAX_MESSAGE, max_queued: DEFAULT_MAX_QUEUED, log: true }
    }
}

/// Why [`Server::serve`] returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The input ended (the client closed stdin).
    InputClosed,
    /// The output could not be written (the client went away).
    OutputClosed,
    /// The caller's stop token fired (e.g. a signal).
    Stopped,
}

/// An MCP server over one tool set.
pub struct Server {
    tools: Tools,
    opts: ServerOptions,
}

impl Server {
    /// A server of `tools`.
    pub fn new(tools: Tools, opts: ServerOptions) -> Server {
        Server { tools, opts }
    }

    /// Serve requests read from `input`, answering on `output`, until the
    /// input ends, the output fails or `stop` fires. Then every call still
    /// running is cancelled (its command's tree killed; it still answers,
    /// `cancelled`), the workspace's background jobs are killed, and the
    /// answers are flushed (for up to 2 s: a client that does not read
    /// them loses them).
    pub async fn serve<R, W>(self, input: R, output: W, stop: CancellationToken) -> End
    where
        R: AsyncBufRead + Unpin,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel::<String>();
        let output_closed = CancellationToken::new();
        let queued = Arc::new(Queued { limit: self.opts.max_queued, ..Queued::default() });
        let log = Arc::new(Log::new(self.opts.log));
        let writer =
            tokio::spawn(write_lines(rx, output, Arc::clone(&queued), output_closed.clone(), Arc::clone(&log)));
        let conn = Arc::new(Conn {
            list: tools_json(&self.tools),
            tools: self.tools,
            out: tx,
            queued,
            log: Arc::clone(&log),
            handshake: Mutex::new(None),
            in_flight: Mutex::new(HashMap::new()),
        });
        let mut reader = LineReader::new(input, self.opts.max_message);
        let mut calls = JoinSet::new();
        let end = loop {
            while calls.try_join_next().is_some() {}
            let frame = tokio::select! {
                // Read on only while the client keeps up with the answers.
                f = async {
                    conn.queued.room().await;
                    reader.next().await
                } => f,
                () = output_closed.cancelled() => break End::OutputClosed,
                () = stop.cancelled() => break End::Stopped,
            };
            match frame {
                Ok(Frame::Eof) => break End::InputClosed,
                Ok(Frame::Line(line)) => conn.handle(&line, &mut calls),
                Ok(Frame::Oversized { size: n, head, tail }) => {
                    conn.log_line(&format!("skipped a message of {n} bytes (the limit is {})", self.opts.max_message));
                    conn.send(wire::response(
                        &wire::recover_id(&head, &tail),
                        Err(RpcError::new(
                            wire::INVALID_REQUEST,
                            format!(
                                "invalid request: a message of {n} bytes is longer than this server's limit of {} \
                                 bytes; send smaller messages (e.g. write a large file in parts)",
                                self.opts.max_message
                            ),
                        )
                        .with_data(json!({ "limit": self.opts.max_message, "size": n }))),
                    ));
                }
                Err(e) => {
                    conn.log_line(&format!("cannot read the input: {e}"));
                    break End::InputClosed;
                }
            }
        };
        // Cancel every call (their commands' trees are killed) and the
        // background jobs. The calls still answer, unless the output is
        // gone: a request read before the input ended (`serve < file`)
        // gets its answer, a cancelled command's says it was cancelled.
        conn.cancel_all();
        let drained = tokio::time::timeout(SHUTDOWN_GRACE, async { while calls.join_next().await.is_some() {} }).await;
        if drained.is_err() {
            conn.log_line("calls still running after the grace period were aborted");
            calls.shutdown().await;
        }
        // After the calls: a call still reading a file would otherwise
        // find the workspace disposed.
        conn.tools.workspace().dispose().await;
        conn.log_line(match end {
            End::InputClosed => "the input ended: stopped",
            End::OutputClosed => "the output is closed: stopped",
            End::Stopped => "asked to stop: stopped",
        });
        drop(conn);
        // The answers already made go out, unless the client does not read
        // them: then they are dropped, not waited for.
        let mut writer = writer;
        if tokio::time::timeout(WRITE_GRACE, &mut writer).await.is_err() {
            writer.abort();
            log.line("the client did not read the last answers: dropped");
        }
        log.flush(LOG_FLUSH);
        end
    }
}

/// How long the end waits for the answers already made to be written.
const WRITE_GRACE: Duration = Duration::from_secs(2);
/// How long the end waits for the log's last lines to be written.
const LOG_FLUSH: Duration = Duration::from_secs(1);
/// The most log lines waiting to be written; more are dropped.
const LOG_QUEUE: usize = 1024;

/// The server's log on stderr, written by a thread of its own: a client
/// that never reads its end of the pipe (the spec lets a client ignore the
/// log) must not stall the server, so while the pipe is full lines wait in
/// a bounded queue and then are dropped.
struct Log {
    tx: Mutex<Option<std::sync::mpsc::SyncSender<String>>>,
    done: Mutex<Option<std::sync::mpsc::Receiver<()>>>,
}

impl Log {
    /// A log (`on`), or one that writes nothing.
    fn new(on: bool) -> Log {
        let off = Log { tx: Mutex::new(None), done: Mutex::new(None) };
        if !on {
            return off;
        }
        let (tx, rx) = std::sync::mpsc::sync_channel::<String>(LOG_QUEUE);
        let (done_tx, done) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new().name("portcullis-serve-log".into()).spawn(move || {
            use std::io::Write;
            let mut err = std::io::stderr();
            for line in rx {
                let _ = err.write_all(line.as_bytes());
            }
            let _ = done_tx.send(());
        });
        match spawned {
            Ok(_) => Log { tx: Mutex::new(Some(tx)), done: Mutex::new(Some(done)) },
            // No thread: no log, rather than a log that can block.
            Err(_) => off,
        }
    }

    fn line(&self, msg: &str) {
        if let Some(tx) = self.tx.lock().unwrap_or_else(std::sync::PoisonError::into_inner).as_ref() {
            let _ = tx.try_send(format!("portcullis serve: {msg}\n"));
        }
    }

    /// Close the log and wait up to `limit` for what it holds to be
    /// written.
    fn flush(&self, limit: Duration) {
        drop(self.tx.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take());
        if let Some(done) = self.done.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take() {
            let _ = done.recv_timeout(limit);
        }
    }
}

/// The bytes of the lines sent to the writer and not yet written, and
/// their bound.
#[derive(Default)]
struct Queued {
    limit: usize,
    bytes: AtomicUsize,
    drained: Notify,
}

impl Queued {
    fn add(&self, n: usize) {
        self.bytes.fetch_add(n, Ordering::SeqCst);
    }

    fn written(&self, n: usize) {
        self.bytes.fetch_sub(n, Ordering::SeqCst);
        self.drained.notify_waiters();
    }

    fn full(&self) -> bool {
        self.bytes.load(Ordering::SeqCst) > self.limit
    }

    /// Wait until no more than the bound is queued.
    async fn room(&self) {
        loop {
            // Made before the check: a drain in between still wakes it.
            let drained = self.drained.notified();
            if !self.full() {
                return;
            }
            drained.await;
        }
    }
}

/// Write each line (and a newline) as it comes, until every sender is gone
/// or a write fails.
async fn write_lines<W: AsyncWrite + Unpin>(
    mut rx: mpsc::UnboundedReceiver<String>,
    mut output: W,
    queued: Arc<Queued>,
    closed: CancellationToken,
    log: Arc<Log>,
) {
    while let Some(mut line) = rx.recv().await {
        line.push('\n');
        let written = async {
            output.write_all(line.as_bytes()).await?;
            queued.written(line.len());
            // Write what else is queued before flushing once.
            while let Ok(mut more) = rx.try_recv() {
                more.push('\n');
                output.write_all(more.as_bytes()).await?;
                queued.written(more.len());
            }
            output.flush().await
        }
        .await;
        if let Err(e) = written {
            log.line(&format!("cannot write the output: {e}"));
            closed.cancel();
            return;
        }
    }
}

/// A call in flight.
struct InFlight {
    cancel: CancellationToken,
    answer: Arc<Answer>,
}

/// Whether a request may still be answered (or sent progress): set once,
/// by its answer or its cancellation.
#[derive(Default)]
struct Answer {
    done: Mutex<bool>,
}

impl Answer {
    /// Send `line` if the request is still open; `last` closes it. A
    /// notification (not `last`) is dropped while the client is behind.
    /// Whether it was sent.
    fn send_if_open(&self, conn: &Conn, line: String, last: bool) -> bool {
        let mut done = self.done.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !*done && (last || !conn.queued.full()) {
            conn.send(line);
            *done = last;
            return true;
        }
        false
    }

    fn close(&self) {
        *self.done.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = true;
    }
}

/// The era a request is served in.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Era {
    /// 2026-07-28: the request carried its version.
    Modern,
    /// A handshake version negotiated by `initialize`.
    Handshake(String),
}

struct Conn {
    tools: Tools,
    /// The `tools/list` answer's tools, made once (the set is fixed).
    list: Value,
    out: mpsc::UnboundedSender<String>,
    /// What `out` holds, in bytes.
    queued: Arc<Queued>,
    log: Arc<Log>,
    /// The version `initialize` negotiated, if one came.
    handshake: Mutex<Option<String>>,
    in_flight: Mutex<HashMap<String, InFlight>>,
}

impl Conn {
    fn send(&self, line: String) {
        // The writer is gone only when the output failed; the loop stops.
        self.queued.add(line.len() + 1);
        let _ = self.out.send(line);
    }

    fn log_line(&self, msg: &str) {
        self.log.line(msg);
    }

    fn handle(self: &Arc<Self>, line: &[u8], calls: &mut JoinSet<()>) {
        match wire::classify(line) {
            Incoming::Blank | Incoming::Response => {}
            Incoming::Invalid { id, error } => {
                self.log_line(&error.message);
                self.send(wire::response(&id, Err(error)));
            }
            Incoming::Notification { method, params } => self.notification(&method, &params),
            Incoming::Request { id, method, params } => self.request(id, &method, params, calls),
        }
    }

    fn notification(&self, method: &str, params: &Map<String, Value>) {
        // Nothing to do for the others (`notifications/initialized`, …).
        if method != "notifications/cancelled" {
            return;
        }
        let Some(id) = params.get("requestId") else { return };
        let found = self.in_flight_lock().remove(&id_key(id));
        if let Some(call) = found {
            // Nothing more is sent for it, then its command dies.
            call.answer.close();
            call.cancel.cancel();
        }
    }

    fn request(self: &Arc<Self>, id: Value, method: &str, params: Map<String, Value>, calls: &mut JoinSet<()>) {
        let meta = match params.get("_meta") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(m)) => m.clone(),
            Some(other) => {
                let e = RpcError::new(
                    wire::INVALID_PARAMS,
                    format!("invalid params: \"_meta\" is an object, not {}", wire::kind_of(other)),
                );
                return self.send(wire::response(&id, Err(e)));
            }
        };
        let answer = match method {
            "initialize" => Ok(self.initialize(&params)),
            // Under a version of its own, a ping is held to it like any request.
            "ping" if meta.contains_key(META_VERSION) => self.era(&meta).map(|era| self.finish(json!({}), Some(&era))),
            "ping" => Ok(json!({})),
            "server/discover" => Ok(self.discover()),
            "tools/list" => self.era(&meta).and_then(|era| self.list(&params, &era)),
            "tools/call" => match self.era(&meta) {
                Ok(era) => return self.call(id, params, meta, era, calls),
                Err(e) => Err(e),
            },
            "resources/list"
            | "resources/templates/list"
            | "prompts/list"
            | "completion/complete"
            | "logging/setLevel" => Err(RpcError::new(
                wire::METHOD_NOT_FOUND,
                format!("method not found: {method}: this server offers tools only (tools/list, tools/call)"),
            )),
            _ => Err(RpcError::new(
                wire::METHOD_NOT_FOUND,
                format!(
                    "method not found: {method:?}; this server answers initialize, ping, server/discover, tools/list \
                     and tools/call"
                ),
            )),
        };
        if let Err(e) = &answer {
            // Quoted: a method name is the client's text, and a newline in
            // it must not start a log line of its own.
            self.log_line(&format!("{method:?}: {}", e.message));
        }
        self.send(wire::response(&id, answer));
    }

    /// The era of a request: its own `_meta` version, else the handshake's.
    fn era(&self, meta: &Map<String, Value>) -> Result<Era, RpcError> {
        match meta.get(META_VERSION) {
            Some(Value::String(v)) if v == MODERN_VERSION => {
                if !meta.get(META_CAPABILITIES).is_some_and(Value::is_object) {
                    return Err(RpcError::new(
                        wire::INVALID_PARAMS,
                        format!(
                            "invalid params: _meta[{META_CAPABILITIES:?}] (an object) is required with protocol \
                             version {MODERN_VERSION}"
                        ),
                    ));
                }
                Ok(Era::Modern)
            }
            Some(Value::String(v)) => Err(unsupported(v)),
            Some(other) => Err(RpcError::new(
                wire::INVALID_PARAMS,
                format!("invalid params: _meta[{META_VERSION:?}] is a string, not {}", wire::kind_of(other)),
            )),
            None => match self.handshake.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone() {
                Some(v) => Ok(Era::Handshake(v)),
                None => Err(RpcError::new(
                    wire::INVALID_PARAMS,
                    format!(
                        "invalid params: no protocol version: send `initialize` first (the {} handshake), or put \
                         _meta[{META_VERSION:?}] = {MODERN_VERSION:?} and _meta[{META_CAPABILITIES:?}] in every \
                         request",
                        HANDSHAKE_VERSIONS[0]
                    ),
                )),
            },
        }
    }

    fn server_info(&self) -> Value {
        json!({ "name": "portcullis", "title": "portcullis workspace", "version": env!("CARGO_PKG_VERSION") })
    }

    fn capabilities(&self) -> Value {
        json!({ "tools": { "listChanged": false } })
    }

    fn instructions(&self) -> String {
        let ws = self.tools.workspace();
        let mut s = format!(
            "Tools over one workspace, {}: file paths are relative to it (absolute paths only inside it). Every \
             call passes the host's policy; a refusal comes back as a result with an `error` that says why and \
             what to do. Whether a command may write is the host's decision, not yours: a command without write \
             access that tries to write fails with a read-only error, and its result says `writable: false`. \
             Read a file before editing it and pass its `hash` as `expect_hash`.",
            ws.root().display()
        );
        if ws.is_readonly() {
            s.push_str(" This workspace is read-only: no tool can change it.");
        }
        s
    }

    fn initialize(&self, params: &Map<String, Value>) -> Value {
        let asked = params.get("protocolVersion").and_then(Value::as_str).unwrap_or_default();
        let version = HANDSHAKE_VERSIONS.into_iter().find(|v| *v == asked).unwrap_or(HANDSHAKE_VERSIONS[0]);
        *self.handshake.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(version.to_string());
        json!({
            "protocolVersion": version,
            "capabilities": self.capabilities(),
            "serverInfo": self.server_info(),
            "instructions": self.instructions(),
        })
    }

    fn discover(&self) -> Value {
        let mut supported = vec![MODERN_VERSION];
        supported.extend(HANDSHAKE_VERSIONS);
        self.finish(
            json!({
                "supportedVersions": supported,
                "capabilities": self.capabilities(),
                "serverInfo": self.server_info(),
                "instructions": self.instructions(),
                "ttlMs": LIST_TTL_MS,
                "cacheScope": "private",
            }),
            Some(&Era::Modern),
        )
    }

    /// A result as its era has it: a modern one says `resultType` and
    /// names the server in `_meta`.
    fn finish(&self, result: Value, era: Option<&Era>) -> Value {
        finish_with(result, era, || self.server_info())
    }

    fn list(&self, params: &Map<String, Value>, era: &Era) -> Result<Value, RpcError> {
        if let Some(c) = params.get("cursor").filter(|c| !c.is_null()) {
            return Err(RpcError::new(
                wire::INVALID_PARAMS,
                format!("invalid params: unknown cursor {c}: the tool list has one page; list again without a cursor"),
            ));
        }
        let mut result = self.list.clone();
        if *era == Era::Modern {
            result["ttlMs"] = json!(LIST_TTL_MS);
            result["cacheScope"] = json!("private");
        }
        Ok(self.finish(result, Some(era)))
    }

    fn in_flight_lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, InFlight>> {
        self.in_flight.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Forget the call in flight under `key` if it is still the one that
    /// `answer` belongs to: after a cancel the client may reuse the id
    /// while the cancelled call is still ending, and that call must not
    /// take the new one's entry (its cancel would be lost).
    fn forget(&self, key: &str, answer: &Arc<Answer>) {
        let mut in_flight = self.in_flight_lock();
        if in_flight.get(key).is_some_and(|c| Arc::ptr_eq(&c.answer, answer)) {
            in_flight.remove(key);
        }
    }

    fn cancel_all(&self) {
        for call in self.in_flight_lock().values() {
            call.cancel.cancel();
        }
    }

    fn call(
        self: &Arc<Self>,
        id: Value,
        params: Map<String, Value>,
        meta: Map<String, Value>,
        era: Era,
        calls: &mut JoinSet<()>,
    ) {
        let name = match params.get("name") {
            Some(Value::String(n)) => n.clone(),
            other => {
                let got = other.map_or("nothing", wire::kind_of);
                let e = RpcError::new(
                    wire::INVALID_PARAMS,
                    format!("invalid params of tools/call: \"name\" is the tool's name (a string), not {got}"),
                );
                return self.send(wire::response(&id, Err(e)));
            }
        };
        let args = params.get("arguments").cloned().unwrap_or(Value::Null);
        let key = id_key(&id);
        let cancel = CancellationToken::new();
        let answer = Arc::new(Answer::default());
        // Calls still running count, answered or not (every call in
        // `in_flight` is one of them): a cancelled call
        // leaves `in_flight` at once (its id may be used again) but may run
        // on until it ends (a `grep` over a large tree); counting only
        // `in_flight` let cancelled calls pile up past the bound, a thread
        // each (found in session 29's review: 645 threads).
        while calls.try_join_next().is_some() {}
        let running = calls.len();
        {
            let mut in_flight = self.in_flight_lock();
            let refusal = if in_flight.contains_key(&key) {
                Some(format!("invalid request: request id {id} is already in use by a call in flight"))
            } else if running >= MAX_IN_FLIGHT {
                Some(format!(
                    "{MAX_IN_FLIGHT} calls are running (cancelled ones count until they have ended); wait for some \
                     to finish before sending more"
                ))
            } else {
                None
            };
            if let Some(why) = refusal {
                drop(in_flight);
                let code = if why.starts_with("invalid") { wire::INVALID_REQUEST } else { wire::INTERNAL_ERROR };
                return self.send(wire::response(&id, Err(RpcError::new(code, why))));
            }
            in_flight.insert(key.clone(), InFlight { cancel: cancel.clone(), answer: Arc::clone(&answer) });
        }
        let progress =
            meta.get("progressToken").filter(|t| t.is_string() || t.is_i64() || t.is_u64()).cloned().map(|token| {
                let conn = Arc::clone(self);
                let answer = Arc::clone(&answer);
                let last = AtomicU64::new(0);
                let sink: crate::tools::ProgressSink = Arc::new(move |p: Progress| {
                    // `progress` strictly increases.
                    if p.elapsed_ms <= last.fetch_max(p.elapsed_ms, Ordering::SeqCst) {
                        return;
                    }
                    let mut params = json!({ "progressToken": token, "progress": p.elapsed_ms, "message": p.message });
                    if let Some(total) = p.total_ms {
                        params["total"] = json!(total);
                    }
                    let _ = answer.send_if_open(&conn, wire::notification("notifications/progress", params), false);
                });
                sink
            });
        let conn = Arc::clone(self);
        calls.spawn(async move {
            let ctx = CallCtx { cancel: cancel.clone(), progress };
            let result = conn.tools.call(&name, args, ctx).await;
            conn.forget(&key, &answer);
            let job = started_job(&result);
            let sent = answer.send_if_open(&conn, call_answer(&id, &result, &era, || conn.server_info()), true);
            // A background job started while its call was cancelled: the
            // client never learns its id, so no one else could stop it.
            if let (false, Some(job)) = (sent, job) {
                if let Err(e) = conn.tools.workspace().shell_kill(&job).await {
                    conn.log_line(&format!("cannot kill job {job} of a cancelled call: {}", crate::error_chain(&e)));
                }
            }
        });
    }
}

/// An id as a map key (`1` and `"1"` differ).
fn id_key(id: &Value) -> String {
    id.to_string()
}

fn unsupported(requested: &str) -> RpcError {
    RpcError::new(
        wire::UNSUPPORTED_PROTOCOL_VERSION,
        format!(
            "unsupported protocol version {requested:?}: this server serves {MODERN_VERSION} per request (in \
             _meta) and {} through `initialize`",
            HANDSHAKE_VERSIONS.join(", ")
        ),
    )
    .with_data(json!({ "supported": [MODERN_VERSION], "requested": requested }))
}

/// The tools as `tools/list` lists them (`{"tools": [...]}`), e.g. to
/// print them.
pub fn tools_json(tools: &Tools) -> Value {
    json!({ "tools": tools.list().iter().map(tool_json).collect::<Vec<_>>() })
}

/// A tool as `tools/list` has it.
fn tool_json(t: &Tool) -> Value {
    let mut v = json!({
        "name": t.name,
        "title": t.title,
        "description": t.description,
        "inputSchema": t.input_schema,
        "annotations": {
            "title": t.title,
            "readOnlyHint": t.read_only,
            "destructiveHint": t.destructive,
            "idempotentHint": t.read_only,
            "openWorldHint": false,
        },
    });
    if let Some(o) = &t.output_schema {
        v["outputSchema"] = o.clone();
    }
    v
}

/// The id of the background job a call started, if it did.
fn started_job(r: &ToolResult) -> Option<String> {
    let s = &r.structured;
    if s.get("outcome").and_then(Value::as_str) != Some("started") {
        return None;
    }
    s.get("job_id").and_then(Value::as_str).map(str::to_string)
}

/// A result as its era has it (see [`Conn::finish`]).
fn finish_with(mut result: Value, era: Option<&Era>, info: impl FnOnce() -> Value) -> Value {
    if era == Some(&Era::Modern) {
        result["resultType"] = json!("complete");
        result["_meta"] = json!({ META_SERVER_INFO: info() });
    }
    result
}

/// The answer line of a `tools/call`: its result (the structured object,
/// mirrored as text) as its era has it ([`finish_with`]), written as
/// `json!` would write it (keys sorted) but without encoding the structured
/// object a second time: `r.content` is its JSON text already
/// (`ToolResult`'s one constructor makes it so).
fn call_answer(id: &Value, r: &ToolResult, era: &Era, info: impl FnOnce() -> Value) -> String {
    let text = Value::String(r.content.clone());
    let (meta, kind) = match era {
        Era::Modern => (format!(r#""_meta":{},"#, json!({ META_SERVER_INFO: info() })), r#""resultType":"complete","#),
        Era::Handshake(_) => (String::new(), ""),
    };
    let result = format!(
        r#"{{{meta}"content":[{{"text":{text},"type":"text"}}],"isError":{},{kind}"structuredContent":{}}}"#,
        r.is_error, r.content
    );
    wire::response_text(id, &result)
}

/// A `tools/call` result: the structured object, mirrored as text.
#[cfg(test)]
fn call_result(r: ToolResult) -> Value {
    json!({
        "content": [{ "type": "text", "text": r.content }],
        "structuredContent": r.structured,
        "isError": r.is_error,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_call_answer_is_what_the_value_path_encodes() {
        let info = || json!({ "name": "portcullis", "version": "0" });
        let results = [
            ToolResult::error(crate::tools::output::ErrorInfo::new("refused", "no \"x\" here\n\u{7}é")),
            crate::tools::ToolResult::for_tests(json!({ "stdout": "a\tb", "exit_code": 0, "z": [1, null] }), false),
        ];
        for r in &results {
            for era in [Era::Modern, Era::Handshake("2025-06-18".into())] {
                for id in [json!(3), json!("x\"y")] {
                    let want = wire::response(&id, Ok(finish_with(call_result(r.clone()), Some(&era), info)));
                    assert_eq!(call_answer(&id, r, &era, info), want);
                }
            }
        }
    }
}
