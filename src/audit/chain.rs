//! The hash chain's rules, shared by the writer ([`super::jsonl`]) and the
//! readers ([`super::verify`], [`super::grants`]).
//!
//! A record is one line of JSON. Its hash is the SHA-256 of the line's exact
//! bytes without the newline, written as 64 lowercase hex digits. A record's
//! `prev` is the hash of the record before it; the first record's `prev` is
//! the SHA-256 of its `genesis` value (the 64 hex digits as ASCII), so that
//! `printf %s GENESIS | sha256sum` reproduces it.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The format version every record carries as `"v"`.
pub const VERSION: u32 = 1;

/// The longest record a log may hold, newline excluded (1 MiB). The writer
/// refuses a longer record; the readers call a longer line malformed, so a
/// damaged file cannot make them read without bound.
pub const MAX_LINE: usize = 1 << 20;

/// The fields every record starts with, in this order, before the event's own.
#[derive(Serialize)]
pub(crate) struct Header<'a> {
    pub v: u32,
    pub seq: u64,
    pub time: &'a str,
    pub pid: u32,
    pub prev: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub genesis: Option<&'a str>,
}

/// The chain fields of a record as read back (the event's fields are ignored).
#[derive(Deserialize)]
pub(crate) struct ReadHeader {
    pub v: u32,
    pub seq: u64,
    #[allow(dead_code)]
    pub time: String,
    #[allow(dead_code)]
    pub pid: u32,
    pub prev: String,
    #[serde(default)]
    pub genesis: Option<String>,
    pub event: String,
}

/// The position of a log's last record: its `seq` and its hash. Recorded
/// elsewhere (a ticket, another machine), it lets `verify --head` show that
/// records were cut off at the end or the whole log was replaced.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    /// The last record's `seq`.
    pub seq: u64,
    /// The SHA-256 of the last record's line (64 lowercase hex digits).
    pub hash: String,
}

impl fmt::Display for Head {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.seq, self.hash)
    }
}

/// A head given as `SEQ:HASH` that is not one.
#[derive(Debug, thiserror::Error)]
#[error("a head is SEQ:HASH (a record number, a colon, 64 hex digits), not {0:?}")]
pub struct BadHead(pub String);

impl FromStr for Head {
    type Err = BadHead;

    fn from_str(s: &str) -> Result<Head, BadHead> {
        let bad = || BadHead(s.to_string());
        let (seq, hash) = s.split_once(':').ok_or_else(bad)?;
        let seq = seq.parse::<u64>().map_err(|_| bad())?;
        if !is_hash(hash) {
            return Err(bad());
        }
        Ok(Head { seq, hash: hash.to_ascii_lowercase() })
    }
}

/// Whether `s` is 64 hex digits.
pub(crate) fn is_hash(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

pub(crate) use crate::hex::hex;

/// 64 hex digits as 32 bytes.
pub(crate) fn unhex32(s: &str) -> Option<[u8; 32]> {
    if !is_hash(s) {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// The SHA-256 of `bytes`, raw.
pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

pub(crate) use crate::hex::sha256_hex;

/// `time` as RFC 3339 in UTC with milliseconds: `2025-01-31T08:05:09.042Z`.
pub(crate) fn rfc3339_ms(time: std::time::SystemTime) -> String {
    let d = time.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    let (y, m, day) = civil_from_days(days);
    format!("{y:04}-{m:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z", rem / 3600, (rem / 60) % 60, rem % 60, d.subsec_millis())
}

/// The proleptic Gregorian date of a day count since 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    (y, u32::try_from(m).unwrap_or(1), u32::try_from(d).unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn times_are_rfc3339_utc_with_milliseconds() {
        assert_eq!(rfc3339_ms(UNIX_EPOCH), "1970-01-01T00:00:00.000Z");
        // 2024-02-29T23:59:59.999Z (a leap day).
        let t = UNIX_EPOCH + Duration::from_millis(1_709_251_199_999);
        assert_eq!(rfc3339_ms(t), "2024-02-29T23:59:59.999Z");
        let t = UNIX_EPOCH + Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(rfc3339_ms(t), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn heads_parse_and_print() {
        let h: Head = format!("7:{}", "AB".repeat(32)).parse().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(h.seq, 7);
        assert_eq!(h.to_string(), format!("7:{}", "ab".repeat(32)));
        assert!("7".parse::<Head>().is_err());
        assert!("x:00".parse::<Head>().is_err());
        assert!(format!("7:{}", "g".repeat(64)).parse::<Head>().is_err());
    }

    #[test]
    fn hashes_are_lowercase_hex_sha256() {
        // echo -n abc | sha256sum
        let h = sha256_hex(b"abc");
        assert_eq!(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(unhex32(&h), Some(sha256(b"abc")));
        assert_eq!(unhex32("00"), None);
    }
}
