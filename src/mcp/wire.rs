//! The stdio framing and JSON-RPC 2.0 messages of MCP: one UTF-8 JSON
//! message per line, read with a bound (a line longer than the bound is
//! skipped to its end, never held in memory, and answered with an error),
//! and classified into requests, notifications and what is not a message.

use std::io;

use serde_json::{json, Map, Value};
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

/// The default bound on one incoming message (4 MiB): a `write_file` of a
/// large file fits, a runaway client does not exhaust memory.
pub const DEFAULT_MAX_MESSAGE: usize = 4 << 20;

/// JSON-RPC: the message is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC: the JSON is not a request (or is too large to read).
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC: no such method.
pub const METHOD_NOT_FOUND: i64 = -32601;
/// JSON-RPC: the parameters do not fit the method.
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC: the server failed.
pub const INTERNAL_ERROR: i64 = -32603;
/// MCP 2026-07-28: the request's protocol version is not one the server
/// speaks.
pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;

/// One line of input.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A whole line, without its `\n` (and a `\r` before it).
    Line(Vec<u8>),
    /// A line longer than the bound, skipped to its end.
    Oversized {
        /// Its length in bytes.
        size: usize,
        /// Its first bytes and its last (at most [`KEPT`] each), to find
        /// the request's id in.
        head: Vec<u8>,
        /// Its last bytes.
        tail: Vec<u8>,
    },
    /// The end of the input.
    Eof,
}

/// How many bytes of each end of an oversized line are kept.
pub const KEPT: usize = 256;

/// Reads lines of at most `max` bytes from `R`.
pub struct LineReader<R> {
    inner: R,
    max: usize,
}

impl<R: AsyncBufRead + Unpin> LineReader<R> {
    /// A reader of lines of at most `max` bytes.
    pub fn new(inner: R, max: usize) -> LineReader<R> {
        LineReader { inner, max }
    }

    /// The next line. An unterminated last line counts as a line. Not
    /// cancel-safe: a dropped call loses the part of the line it read.
    pub async fn next(&mut self) -> io::Result<Frame> {
        let mut line = Vec::new();
        let mut skipped: Option<Skipped> = None;
        loop {
            let avail = self.inner.fill_buf().await?;
            if avail.is_empty() {
                return Ok(match skipped {
                    Some(s) => s.frame(),
                    None if line.is_empty() => Frame::Eof,
                    None => self.bounded(line),
                });
            }
            let (chunk, used, end) = match memchr::memchr(b'\n', avail) {
                Some(i) => (&avail[..i], i + 1, true),
                None => (avail, avail.len(), false),
            };
            match skipped.as_mut() {
                Some(s) => s.add(chunk),
                // One byte more for a `\r` before the `\n`, which is not
                // part of the message.
                None if line.len() + chunk.len() > self.max.saturating_add(1) => {
                    let mut s = Skipped::default();
                    s.add(&line);
                    s.add(chunk);
                    skipped = Some(s);
                    line = Vec::new();
                }
                None => line.extend_from_slice(chunk),
            }
            self.inner.consume(used);
            if end {
                return Ok(match skipped {
                    Some(s) => s.frame(),
                    None => self.bounded(line),
                });
            }
        }
    }

    /// A whole line without its `\r`, if it is within the bound.
    fn bounded(&self, line: Vec<u8>) -> Frame {
        let line = trim_cr(line);
        if line.len() > self.max {
            let mut s = Skipped::default();
            s.add(&line);
            s.frame()
        } else {
            Frame::Line(line)
        }
    }
}

/// What is kept of a line being skipped: its size and its two ends.
#[derive(Default)]
struct Skipped {
    size: usize,
    head: Vec<u8>,
    tail: Vec<u8>,
}

impl Skipped {
    fn add(&mut self, chunk: &[u8]) {
        self.size += chunk.len();
        let room = KEPT.saturating_sub(self.head.len());
        self.head.extend_from_slice(&chunk[..room.min(chunk.len())]);
        self.tail.extend_from_slice(&chunk[chunk.len().saturating_sub(KEPT)..]);
        if self.tail.len() > KEPT {
            self.tail.drain(..self.tail.len() - KEPT);
        }
    }

    fn frame(self) -> Frame {
        Frame::Oversized { size: self.size, head: self.head, tail: trim_cr(self.tail) }
    }
}

/// The id of a request too large to read, from the two ends of its line,
/// so that the error can be matched to the request (a client waits for an
/// answer to its id, and drops one to `null`). Only where it is certain to
/// be the message's own: a top-level member among the simple members at
/// the start (`{"jsonrpc":"2.0","id":7,…`) or at the end (`…,"id":7}`,
/// as the TypeScript SDK writes it). Else `null`.
pub fn recover_id(head: &[u8], tail: &[u8]) -> Value {
    use std::sync::LazyLock;
    // A primitive: a number, a string without escapes, true/false/null.
    const PRIM: &str = r#"(?:-?[0-9]+(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?|"[^"\\]*"|true|false|null)"#;
    static HEAD: LazyLock<Option<regex::bytes::Regex>> = LazyLock::new(|| {
        regex::bytes::Regex::new(&format!(
            r#"^\s*\{{(?:\s*"[A-Za-z_]+"\s*:\s*{PRIM}\s*,)*?\s*"id"\s*:\s*({PRIM})\s*[,}}]"#
        ))
        .ok()
    });
    static TAIL: LazyLock<Option<regex::bytes::Regex>> = LazyLock::new(|| {
        regex::bytes::Regex::new(&format!(
            r#"[{{,]\s*"id"\s*:\s*({PRIM})(?:\s*,\s*"[A-Za-z_]+"\s*:\s*{PRIM})*\s*\}}\s*$"#
        ))
        .ok()
    });
    let found = [(&*HEAD, head), (&*TAIL, tail)].into_iter().find_map(|(re, text)| {
        let caps = re.as_ref()?.captures(text)?;
        serde_json::from_slice::<Value>(caps.get(1)?.as_bytes()).ok().filter(is_valid_id)
    });
    found.unwrap_or(Value::Null)
}

fn trim_cr(mut line: Vec<u8>) -> Vec<u8> {
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    line
}

/// A JSON-RPC error object.
#[derive(Clone, Debug, PartialEq)]
pub struct RpcError {
    /// The code.
    pub code: i64,
    /// What went wrong and what to do.
    pub message: String,
    /// More, for a program.
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with this code and message.
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError { code, message: message.into(), data: None }
    }

    /// The same error with `data`.
    pub fn with_data(mut self, data: Value) -> RpcError {
        self.data = Some(data);
        self
    }

    /// As JSON.
    pub fn to_json(&self) -> Value {
        let mut e = json!({ "code": self.code, "message": self.message });
        if let Some(d) = &self.data {
            e["data"] = d.clone();
        }
        e
    }
}

/// What one line held.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    /// A request: answered exactly once (unless cancelled).
    Request {
        /// Its id (a string or an integer), echoed in the answer.
        id: Value,
        /// The method.
        method: String,
        /// Its parameters (an object; absent counts as empty).
        params: Map<String, Value>,
    },
    /// A notification: never answered.
    Notification {
        /// The method.
        method: String,
        /// Its parameters.
        params: Map<String, Value>,
    },
    /// A response to a request of ours (we send none): ignored.
    Response,
    /// Not a message: answer with this error (to `id`, or to `null`).
    Invalid {
        /// The request's id, when one could be read.
        id: Value,
        /// The error.
        error: RpcError,
    },
    /// A blank line: ignored.
    Blank,
}

/// Classify one line.
pub fn classify(line: &[u8]) -> Incoming {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Incoming::Blank;
    }
    let value: Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => {
            return Incoming::Invalid {
                id: Value::Null,
                error: RpcError::new(
                    PARSE_ERROR,
                    format!("parse error: the line is not JSON ({e}); send one JSON-RPC message per line, UTF-8"),
                ),
            }
        }
    };
    let invalid = |id: Value, why: String| Incoming::Invalid { id, error: RpcError::new(INVALID_REQUEST, why) };
    let Value::Object(mut msg) = value else {
        let why = if value.is_array() {
            "invalid request: JSON-RPC batches are not part of MCP; send one message per line".to_string()
        } else {
            "invalid request: a message is a JSON object".to_string()
        };
        return invalid(Value::Null, why);
    };
    // The id, when it is one a response can carry.
    let id = match msg.remove("id") {
        None => None,
        Some(v @ (Value::String(_) | Value::Number(_))) if is_valid_id(&v) => Some(v),
        // MCP: an id is never null (a notification has none).
        Some(Value::Null) if msg.contains_key("method") => {
            return invalid(Value::Null, "invalid request: an id is a string or an integer, never null".to_string())
        }
        Some(Value::Null) => None,
        Some(other) => {
            return invalid(
                Value::Null,
                format!("invalid request: an id is a string or an integer, not {}", kind_of(&other)),
            )
        }
    };
    let reply_to = id.clone().unwrap_or(Value::Null);
    if msg.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid(reply_to, "invalid request: \"jsonrpc\" must be \"2.0\"".to_string());
    }
    let method = match msg.remove("method") {
        Some(Value::String(m)) => m,
        Some(other) => {
            return invalid(reply_to, format!("invalid request: \"method\" is a string, not {}", kind_of(&other)))
        }
        None if id.is_some() && (msg.contains_key("result") || msg.contains_key("error")) => return Incoming::Response,
        None => return invalid(reply_to, "invalid request: no \"method\"".to_string()),
    };
    let params = match msg.remove("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(p)) => p,
        Some(other) => {
            let error = RpcError::new(
                INVALID_PARAMS,
                format!("invalid params of {method:?}: \"params\" is an object, not {}", kind_of(&other)),
            );
            return match id {
                Some(id) => Incoming::Invalid { id, error },
                // A notification is never answered, not even for bad params.
                None => Incoming::Blank,
            };
        }
    };
    match id {
        Some(id) => Incoming::Request { id, method, params },
        None => Incoming::Notification { method, params },
    }
}

fn is_valid_id(v: &Value) -> bool {
    match v {
        Value::String(_) => true,
        Value::Number(n) => n.is_i64() || n.is_u64(),
        _ => false,
    }
}

/// The JSON type of `v`, in words.
pub fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A response line: the result or the error for `id`.
pub fn response(id: &Value, answer: Result<Value, RpcError>) -> String {
    // Written as `json!` would (its keys sorted), without building and
    // walking a map of it first: every answer of the server is encoded here.
    match answer {
        Ok(result) => response_text(id, &result.to_string()),
        Err(e) => format!(r#"{{"error":{},"id":{id},"jsonrpc":"2.0"}}"#, e.to_json()),
    }
}

/// A response line for `id` whose result is `result`, JSON text already
/// encoded (a `tools/call` answer is written around its result's text).
pub fn response_text(id: &Value, result: &str) -> String {
    format!(r#"{{"id":{id},"jsonrpc":"2.0","result":{result}}}"#)
}

/// A notification line.
pub fn notification(method: &str, params: Value) -> String {
    json!({ "jsonrpc": "2.0", "method": method, "params": params }).to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_response_is_what_json_macro_encodes() {
        let ids = [json!(7), json!("a \"quoted\" id\n"), json!(null), json!(-1.5)];
        let result = json!({ "content": [{ "type": "text", "text": "{\"x\":1}" }], "isError": false, "z": "\u{1}é" });
        for id in &ids {
            let want = json!({ "jsonrpc": "2.0", "id": id, "result": result }).to_string();
            assert_eq!(response(id, Ok(result.clone())), want);
            let e = RpcError::new(INVALID_PARAMS, "bad \"x\"");
            let want = json!({ "jsonrpc": "2.0", "id": id, "error": e.to_json() }).to_string();
            assert_eq!(response(id, Err(e)), want);
        }
    }

    async fn frames(input: &[u8], max: usize) -> Vec<Frame> {
        let mut r = LineReader::new(tokio::io::BufReader::with_capacity(7, input), max);
        let mut out = Vec::new();
        loop {
            let f = r.next().await.unwrap();
            let end = f == Frame::Eof;
            out.push(f);
            if end {
                return out;
            }
        }
    }

    #[tokio::test]
    async fn lines_are_bounded_and_a_long_one_is_skipped_whole() {
        let input = b"{\"a\":1}\r\n0123456789abcdef\nshort\nlast";
        assert_eq!(
            frames(input, 10).await,
            vec![
                Frame::Line(b"{\"a\":1}".to_vec()),
                Frame::Oversized { size: 16, head: b"0123456789abcdef".to_vec(), tail: b"0123456789abcdef".to_vec() },
                Frame::Line(b"short".to_vec()),
                Frame::Line(b"last".to_vec()),
                Frame::Eof
            ]
        );
        assert_eq!(frames(b"", 10).await, vec![Frame::Eof]);
        let f = frames(b"01234567890123", 10).await;
        assert!(matches!(f[0], Frame::Oversized { size: 14, .. }), "{f:?}");
    }

    #[test]
    fn the_id_of_an_oversized_request_is_found_only_where_it_is_certain() {
        let id = |head: &str, tail: &str| recover_id(head.as_bytes(), tail.as_bytes());
        assert_eq!(id(r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"#, ""), json!(7));
        assert_eq!(id(r#"{"id":"a-1","jsonrpc":"2.0""#, ""), json!("a-1"));
        assert_eq!(id(r#"{"jsonrpc":"2.0","method":"tools/call","id":12,"params""#, ""), json!(12));
        assert_eq!(id("", r#"xxxx"}},"jsonrpc":"2.0","id":12}"#), json!(12));
        assert_eq!(id("", r#"xxxx"}},"id":"q","jsonrpc":"2.0"}"#), json!("q"));
        // Nested ids are not the request's.
        assert_eq!(id(r#"{"params":{"id":3},"id":4"#, r#"x"}}}"#), Value::Null);
        assert_eq!(id("", r#"{"todos":[{"id":5}]}}"#), Value::Null);
        assert_eq!(id("", r#"\"id\":5}"}"#), Value::Null);
        assert_eq!(id(r#"{"jsonrpc":"2.0","id":{"x":1}"#, ""), Value::Null);
        assert_eq!(id(r#"{"jsonrpc":"2.0","id":1.5,"#, ""), Value::Null);
    }

    #[tokio::test]
    async fn a_cr_before_the_newline_is_not_counted() {
        let f = frames(b"0123456789\r\n0123456789a\r\n0123456789a\n0123456789a", 10).await;
        let sizes: Vec<Option<usize>> = f
            .iter()
            .map(|x| match x {
                Frame::Oversized { size, .. } => Some(*size),
                _ => None,
            })
            .collect();
        assert_eq!(f[0], Frame::Line(b"0123456789".to_vec()));
        assert_eq!(sizes, vec![None, Some(12), Some(11), Some(11), None]);
        assert_eq!(f[4], Frame::Eof);
    }

    #[test]
    fn messages_are_classified() {
        assert!(matches!(classify(b"{"), Incoming::Invalid { error: RpcError { code: PARSE_ERROR, .. }, .. }));
        assert!(matches!(classify(b"[]"), Incoming::Invalid { error: RpcError { code: INVALID_REQUEST, .. }, .. }));
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":{},"method":"x"}"#),
            Incoming::Invalid { id: Value::Null, error: RpcError { code: INVALID_REQUEST, .. } }
        ));
        assert!(matches!(
            classify(br#"{"jsonrpc":"1.0","id":3,"method":"x"}"#),
            Incoming::Invalid { id: Value::Number(_), error: RpcError { code: INVALID_REQUEST, .. } }
        ));
        assert!(matches!(
            classify(br#"{"jsonrpc":"2.0","id":3,"method":"x","params":[1]}"#),
            Incoming::Invalid { error: RpcError { code: INVALID_PARAMS, .. }, .. }
        ));
        assert_eq!(classify(br#"{"jsonrpc":"2.0","id":3,"result":{}}"#), Incoming::Response);
        assert!(matches!(classify(br#"{"jsonrpc":"2.0","method":"n"}"#), Incoming::Notification { .. }));
        assert!(matches!(classify(br#"{"jsonrpc":"2.0","id":"a","method":"m"}"#), Incoming::Request { .. }));
        assert_eq!(classify(b"  "), Incoming::Blank);
        assert!(matches!(classify(b"\xff\xfe"), Incoming::Invalid { error: RpcError { code: PARSE_ERROR, .. }, .. }));
    }
}
