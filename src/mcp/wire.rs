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
    /// A line longer than the bound, skipped to its end: this many bytes.
    Oversized(usize),
    /// The end of the input.
    Eof,
}

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
        let mut skipped: Option<usize> = None;
        loop {
            let avail = self.inner.fill_buf().await?;
            if avail.is_empty() {
                return Ok(match skipped {
                    Some(n) => Frame::Oversized(n),
                    None if line.is_empty() => Frame::Eof,
                    None => self.bounded(line),
                });
            }
            let (chunk, used, end) = match memchr::memchr(b'\n', avail) {
                Some(i) => (&avail[..i], i + 1, true),
                None => (avail, avail.len(), false),
            };
            match skipped.as_mut() {
                Some(n) => *n += chunk.len(),
                // One byte more for a `\r` before the `\n`, which is not
                // part of the message.
                None if line.len() + chunk.len() > self.max.saturating_add(1) => {
                    skipped = Some(line.len() + chunk.len());
                    line = Vec::new();
                }
                None => line.extend_from_slice(chunk),
            }
            self.inner.consume(used);
            if end {
                return Ok(match skipped {
                    Some(n) => Frame::Oversized(n),
                    None => self.bounded(line),
                });
            }
        }
    }

    /// A whole line without its `\r`, if it is within the bound.
    fn bounded(&self, line: Vec<u8>) -> Frame {
        let line = trim_cr(line);
        if line.len() > self.max {
            Frame::Oversized(line.len())
        } else {
            Frame::Line(line)
        }
    }
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
    let msg = match answer {
        Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
        Err(e) => json!({ "jsonrpc": "2.0", "id": id, "error": e.to_json() }),
    };
    msg.to_string()
}

/// A notification line.
pub fn notification(method: &str, params: Value) -> String {
    json!({ "jsonrpc": "2.0", "method": method, "params": params }).to_string()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

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
                Frame::Oversized(16),
                Frame::Line(b"short".to_vec()),
                Frame::Line(b"last".to_vec()),
                Frame::Eof
            ]
        );
        assert_eq!(frames(b"", 10).await, vec![Frame::Eof]);
        assert_eq!(frames(b"01234567890123", 10).await, vec![Frame::Oversized(14), Frame::Eof]);
        // The bound is the message's: a `\r` before the `\n` is not counted.
        assert_eq!(
            frames(b"0123456789\r\n0123456789a\r\n0123456789a\n0123456789a", 10).await,
            vec![
                Frame::Line(b"0123456789".to_vec()),
                Frame::Oversized(12),
                Frame::Oversized(11),
                Frame::Oversized(11),
                Frame::Eof
            ]
        );
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
