//! `portcullis audit verify`: walk a log's hash chain and name the first
//! line that breaks it, and why.
//!
//! What a chain shows and what it cannot (see `docs/audit.md`): an edited,
//! dropped, reordered or inserted record, a torn last line, a line that is
//! not a record, a second genesis and a first record that is not `seq` 0 are
//! all found, at the first line they affect. Records cut off at the END and
//! a whole log replaced by another self-consistent one are not: the chain
//! that remains is intact. Nor is an edit of the LAST record, which no later
//! `prev` covers. All three are found against a head recorded elsewhere
//! ([`verify_against`], `--head SEQ:HASH`).

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::chain::{self, Head, ReadHeader, MAX_LINE, VERSION};

/// A log that could not be read (exit status 125): not a verdict on it.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// The log could not be opened.
    #[error("cannot open the audit log {path}: {source}")]
    Open {
        /// The log.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The log could not be read to its end.
    #[error("cannot read the audit log {path}: {source}")]
    Read {
        /// The log.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// What is wrong with a line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Problem {
    /// The last line has no newline: an append torn by a crash, or a file
    /// cut in the middle of a record.
    Torn,
    /// The line is not JSON (or is longer than a record may be).
    NotJson {
        /// The parser's complaint.
        detail: String,
    },
    /// JSON, but not a record of this format (a field missing or of the
    /// wrong type, another version).
    NotARecord {
        /// What is missing or wrong.
        detail: String,
    },
    /// The first record's `seq` is not 0: records were cut off at the start.
    FirstSeqNotZero {
        /// Its `seq`.
        seq: u64,
    },
    /// The first record carries no genesis.
    NoGenesis,
    /// A record after the first carries a genesis: a second log was
    /// appended, or a record was forged.
    SecondGenesis,
    /// The first record's `prev` is not the hash of its genesis: one of the
    /// two was changed.
    GenesisMismatch,
    /// This line's hash is not the `prev` of the next line, whose `seq`
    /// follows: this line was edited (or the next line's `prev` was).
    Edited {
        /// The line whose `prev` does not match.
        next_line: u64,
    },
    /// The line chains from the one before, but its `seq` was changed.
    SeqEdited {
        /// The `seq` found.
        found: u64,
        /// The `seq` expected.
        expected: u64,
    },
    /// Records are missing before this line (dropped, or moved away).
    Dropped {
        /// The `seq` found.
        found: u64,
        /// The `seq` expected.
        expected: u64,
    },
    /// The line's `seq` goes back: it is out of order or a copy.
    OutOfOrder {
        /// The `seq` found.
        found: u64,
        /// The `seq` expected.
        expected: u64,
    },
    /// This line and the ones up to `through` do not belong: the line after
    /// them chains from the line before this one.
    Inserted {
        /// The last line that does not belong.
        through: u64,
    },
    /// The log ends before a recorded head: records were cut off at the end.
    EndsBeforeHead {
        /// The recorded head.
        head: Head,
    },
    /// The record at the recorded head's `seq` is not the recorded one: it
    /// (the last record then, perhaps) was edited, or the log was replaced.
    DiffersFromHead {
        /// The recorded head.
        head: Head,
        /// That record's hash in this log.
        found: String,
    },
}

impl Problem {
    fn describe(&self) -> String {
        match self {
            Problem::Torn => "it does not end with a newline: an append torn by a crash, or a file cut short".into(),
            Problem::NotJson { detail } => format!("it is not JSON ({detail})"),
            Problem::NotARecord { detail } => format!("it is not an audit record ({detail})"),
            Problem::FirstSeqNotZero { seq } => {
                format!("the first record has seq {seq}, not 0: records were cut off at the start")
            }
            Problem::NoGenesis => "the first record carries no genesis".into(),
            Problem::SecondGenesis => {
                "a record after the first carries a genesis: another log was appended, or the record was forged".into()
            }
            Problem::GenesisMismatch => {
                "the first record's prev is not the SHA-256 of its genesis: the genesis or the prev was changed".into()
            }
            Problem::Edited { next_line } => format!(
                "its hash is not the prev of line {next_line}, whose seq follows it: this record was edited \
                 (or line {next_line}'s prev was)"
            ),
            Problem::SeqEdited { found, expected } => {
                format!("it chains from the line before but has seq {found}, not {expected}: its seq was edited")
            }
            Problem::Dropped { found, expected } => format!(
                "seq {found} where {expected} was expected: {} record(s) missing before it (dropped, or moved)",
                found - expected
            ),
            Problem::OutOfOrder { found, expected } => {
                format!("seq {found} where {expected} was expected: it is out of order, or a copy")
            }
            Problem::Inserted { through } => format!(
                "it does not belong (inserted, through line {through}): the line after that chains from the line before this one"
            ),
            Problem::EndsBeforeHead { head } => {
                format!("the log ends before the recorded head {head}: records were cut off at the end, or the log was replaced")
            }
            Problem::DiffersFromHead { head, found } => format!(
                "record seq {} hashes to {found}, not to the recorded head {head}: it was edited, or the log was replaced",
                head.seq
            ),
        }
    }
}

/// The first bad line of a log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BadLine {
    /// The line, 1-based (the record with `seq` n is line n + 1 in an intact log).
    pub line: u64,
    /// What is wrong with it.
    pub problem: Problem,
}

/// The verdict on a log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct VerifyReport {
    /// The log.
    pub path: PathBuf,
    /// Whether the chain is intact (and matches the recorded head, if one was given).
    pub intact: bool,
    /// How many lines were read that chain correctly (all of them, if intact).
    pub records: u64,
    /// The first record's genesis, if it was read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub genesis: Option<String>,
    /// The last intact record's `seq` and hash (the whole log's head, if
    /// intact): compare it with one recorded elsewhere.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub head: Option<Head>,
    /// The head the log was checked against, if one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected_head: Option<Head>,
    /// The first bad line, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_bad: Option<BadLine>,
}

impl VerifyReport {
    /// The exit status of `portcullis audit verify`: 0 intact, 1 not.
    pub fn exit_code(&self) -> u8 {
        u8::from(!self.intact)
    }

    /// The verdict for people.
    pub fn render(&self) -> String {
        let p = self.path.display();
        let head = match &self.head {
            Some(h) => format!("head {h}"),
            None => "no records".to_string(),
        };
        match &self.first_bad {
            None => {
                let mut s = format!("{p}: intact, {} record(s), {head}\n", self.records);
                match &self.expected_head {
                    Some(h) => s.push_str(&format!("  matches the recorded head {h}\n")),
                    None => s.push_str(
                        "  (a chain cannot show records cut off at its end, an edited last record, or a replaced log: \
                         compare the head with one recorded elsewhere, or pass --head SEQ:HASH)\n",
                    ),
                }
                s
            }
            Some(b) => format!(
                "{p}: TAMPERED at line {}: {}\n  {} record(s) before it chain correctly ({head})\n",
                b.line,
                b.problem.describe(),
                self.records
            ),
        }
    }
}

/// Verify the log at `path`'s chain. See the module docs for what it shows.
pub fn verify(path: &Path) -> Result<VerifyReport, VerifyError> {
    verify_against(path, None)
}

/// One line as the walk keeps it.
struct Seen {
    line: u64,
    seq: u64,
    hash: [u8; 32],
}

impl Seen {
    fn head(&self) -> Head {
        Head { seq: self.seq, hash: chain::hex(&self.hash) }
    }
}

/// The report for a chain broken at `line`: the lines before it chain
/// correctly, up to `head`.
fn broken(mut report: VerifyReport, line: u64, problem: Problem, head: Option<Head>) -> VerifyReport {
    report.records = line - 1;
    report.head = head;
    if line == 1 {
        report.genesis = None;
    }
    report.first_bad = Some(BadLine { line, problem });
    report
}

/// Verify the log at `path`'s chain, and, given a head recorded earlier,
/// that the log reaches it and holds that very record there (it may have
/// grown since).
pub fn verify_against(path: &Path, expected: Option<&Head>) -> Result<VerifyReport, VerifyError> {
    let file = File::open(path).map_err(|e| VerifyError::Open { path: path.to_path_buf(), source: e })?;
    // A shared lock: an append in progress is not read half-written.
    let _lock = SharedLock::take(&file).map_err(|e| VerifyError::Read { path: path.to_path_buf(), source: e })?;
    let mut reader = BufReader::new(&file);
    let mut report = VerifyReport {
        path: path.to_path_buf(),
        intact: false,
        records: 0,
        genesis: None,
        head: None,
        expected_head: expected.cloned(),
        first_bad: None,
    };
    // Every intact line's hash, to tell an insertion from an edit.
    let mut by_hash: HashMap<[u8; 32], u64> = HashMap::new();
    // The last two intact lines.
    let mut last: Option<Seen> = None;
    let mut before_last: Option<Head> = None;
    let mut at_head: Option<String> = None;
    let mut buf = Vec::new();
    let mut n = 0u64;
    loop {
        buf.clear();
        let complete =
            read_line(&mut reader, &mut buf).map_err(|e| VerifyError::Read { path: path.to_path_buf(), source: e })?;
        let Some(complete) = complete else { break };
        n += 1;
        let here = last.as_ref().map(Seen::head);
        if !complete {
            let problem = if buf.len() > MAX_LINE {
                Problem::NotJson { detail: format!("longer than the limit of {MAX_LINE} bytes") }
            } else {
                Problem::Torn
            };
            return Ok(broken(report, n, problem, here));
        }
        let h: ReadHeader = match serde_json::from_slice::<serde_json::Value>(&buf) {
            Err(e) => {
                let detail = if buf.is_empty() { "an empty line".to_string() } else { e.to_string() };
                return Ok(broken(report, n, Problem::NotJson { detail }, here));
            }
            Ok(v) => match serde_json::from_value(v) {
                Ok(h) => h,
                Err(e) => return Ok(broken(report, n, Problem::NotARecord { detail: e.to_string() }, here)),
            },
        };
        let malformed = if h.v != VERSION {
            Some(format!("format version {}, not {VERSION}", h.v))
        } else if !chain::is_hash(&h.prev) {
            Some("its prev is not 64 hex digits".to_string())
        } else if h.event.is_empty() {
            Some("its event is empty".to_string())
        } else {
            None
        };
        if let Some(detail) = malformed {
            return Ok(broken(report, n, Problem::NotARecord { detail }, here));
        }
        let hash = chain::sha256(&buf);
        let prev = h.prev.to_ascii_lowercase();
        match &last {
            None => {
                if h.seq != 0 {
                    return Ok(broken(report, n, Problem::FirstSeqNotZero { seq: h.seq }, None));
                }
                let Some(g) = &h.genesis else {
                    return Ok(broken(report, n, Problem::NoGenesis, None));
                };
                if chain::sha256_hex(g.as_bytes()) != prev {
                    return Ok(broken(report, n, Problem::GenesisMismatch, None));
                }
                report.genesis = Some(g.clone());
            }
            Some(before) => {
                if h.genesis.is_some() {
                    return Ok(broken(report, n, Problem::SecondGenesis, here));
                }
                let expected_seq = before.seq + 1;
                let chains = chain::hex(&before.hash) == prev;
                if chains && h.seq != expected_seq {
                    return Ok(broken(report, n, Problem::SeqEdited { found: h.seq, expected: expected_seq }, here));
                }
                if !chains {
                    if let Some(&j) = chain::unhex32(&prev).and_then(|p| by_hash.get(&p)) {
                        // Line n chains from line j: j+1 ..= n-1 were put in.
                        let head = Head { seq: j - 1, hash: prev };
                        return Ok(broken(report, j + 1, Problem::Inserted { through: n - 1 }, Some(head)));
                    }
                    if h.seq == expected_seq {
                        let problem = Problem::Edited { next_line: n };
                        return Ok(broken(report, before.line, problem, before_last));
                    }
                    let problem = if h.seq > expected_seq {
                        Problem::Dropped { found: h.seq, expected: expected_seq }
                    } else {
                        Problem::OutOfOrder { found: h.seq, expected: expected_seq }
                    };
                    return Ok(broken(report, n, problem, here));
                }
            }
        }
        if expected.is_some_and(|e| e.seq == h.seq) {
            at_head = Some(chain::hex(&hash));
        }
        by_hash.insert(hash, n);
        before_last = here;
        last = Some(Seen { line: n, seq: h.seq, hash });
    }
    report.records = n;
    report.head = last.as_ref().map(Seen::head);
    if let Some(e) = expected {
        let problem = match at_head {
            None => Some((n + 1, Problem::EndsBeforeHead { head: e.clone() })),
            Some(found) if found != e.hash => Some((e.seq + 1, Problem::DiffersFromHead { head: e.clone(), found })),
            Some(_) => None,
        };
        if let Some((line, problem)) = problem {
            report.first_bad = Some(BadLine { line, problem });
            return Ok(report);
        }
    }
    report.intact = true;
    Ok(report)
}

/// Read one line into `buf` without its newline: `None` at the end,
/// `Some(true)` for a line with its newline, `Some(false)` for a last line
/// without one or a line longer than [`MAX_LINE`] (then `buf` holds more
/// than `MAX_LINE` bytes and the rest is not read).
fn read_line(reader: &mut impl BufRead, buf: &mut Vec<u8>) -> io::Result<Option<bool>> {
    loop {
        let available = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(if buf.is_empty() { None } else { Some(false) });
        }
        if let Some(i) = available.iter().position(|&b| b == b'\n') {
            buf.extend_from_slice(&available[..i]);
            reader.consume(i + 1);
            return Ok(Some(buf.len() <= MAX_LINE));
        }
        let len = available.len();
        buf.extend_from_slice(available);
        reader.consume(len);
        if buf.len() > MAX_LINE {
            return Ok(Some(false));
        }
    }
}

/// A shared `flock`, released on drop.
struct SharedLock<'a>(&'a File);

impl<'a> SharedLock<'a> {
    fn take(file: &'a File) -> io::Result<SharedLock<'a>> {
        loop {
            // SAFETY: flock on a descriptor we own; no memory is passed.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH) } == 0 {
                return Ok(SharedLock(file));
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        }
    }
}

impl Drop for SharedLock<'_> {
    fn drop(&mut self) {
        // SAFETY: as above; closing the descriptor releases it anyway.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}
