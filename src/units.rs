//! Sizes, durations and the floors of the limits: one parser for each, used
//! by the command line and the policy file alike, and one check for each
//! limit, used by the library whatever the request came from.

use std::time::Duration;

/// The smallest memory limit accepted: 4 MiB. Measured (Linux 6.18, x86_64,
/// `RLIMIT_AS`, the fallback when the cgroup `memory` controller is not
/// enabled): a dynamically linked `/bin/true` needs about 2.4 MiB of address
/// space and `/bin/sh -c echo` about 2.6 MiB to start; below that the exec
/// fails half-way and the command dies of `SIGSEGV` before printing
/// anything. Python needs about 13 MiB, a Rust build far more.
pub const MIN_MEMORY: u64 = 4 << 20;

/// Parse a duration: seconds as a number (`"7"`, `"0.5"`), or `"1h"`,
/// `"2m"`, `"30s"`, `"500ms"`, or a sum of them (`"1m30s"`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("an empty duration".into());
    }
    if let Ok(secs) = t.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    if t.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let n: f64 = t.parse().map_err(|_| format!("{s:?} is not a duration (e.g. 30s, 2m, 500ms, 1h)"))?;
        return Duration::try_from_secs_f64(n).map_err(|_| format!("{s:?} is out of range"));
    }
    let mut total = Duration::ZERO;
    let mut rest = t;
    while !rest.is_empty() {
        let n_end = rest.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(rest.len());
        let (num, tail) = rest.split_at(n_end);
        let u_end = tail.find(|c: char| c.is_ascii_digit()).unwrap_or(tail.len());
        let (unit, next) = tail.split_at(u_end);
        let n: f64 = num.parse().map_err(|_| format!("{s:?} is not a duration (e.g. 30s, 2m, 500ms, 1h)"))?;
        let scale = match unit.trim() {
            "ms" => 0.001,
            "s" | "sec" | "secs" => 1.0,
            "m" | "min" | "mins" => 60.0,
            "h" => 3600.0,
            _ => return Err(format!("{s:?}: unknown unit {unit:?} (use ms, s, m or h)")),
        };
        let d = Duration::try_from_secs_f64(n * scale).map_err(|_| format!("{s:?} is out of range"))?;
        total = total.checked_add(d).ok_or_else(|| format!("{s:?} is out of range"))?;
        rest = next;
    }
    Ok(total)
}

/// Parse a size: bytes as a number, or with a unit (`k`, `KiB`, `M`, `MiB`,
/// `G`, `GiB`, `T`; all powers of 1024, case-insensitive).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(end);
    let n: u64 = num.parse().map_err(|_| format!("{s:?} is not a size (e.g. 1048576, 512MiB, 2G)"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        other => return Err(format!("{s:?}: unknown unit {other:?} (use KiB, MiB, GiB or TiB)")),
    };
    n.checked_mul(1u64 << shift).ok_or_else(|| format!("{s:?} is out of range"))
}

/// A size for a message: `4 MiB`, `1536 KiB`, `100 bytes`.
pub fn show_size(n: u64) -> String {
    for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if n >= 1 << shift && n % (1 << shift) == 0 {
            return format!("{} {unit}", n >> shift);
        }
    }
    format!("{n} bytes")
}

/// Whether a memory limit leaves room to start a program.
pub fn check_memory(bytes: u64) -> Result<(), String> {
    if bytes < MIN_MEMORY {
        return Err(format!(
            "{} is too little to start a program (a shell needs about 2.6 MiB, Python 13 MiB); give at least {}, \
             e.g. 512MiB",
            show_size(bytes),
            show_size(MIN_MEMORY)
        ));
    }
    Ok(())
}

/// Whether a process limit lets the command run: it counts the command's
/// own processes, so 0 would let nothing run.
pub fn check_pids(n: u64) -> Result<(), String> {
    if n == 0 {
        return Err("0 would let nothing run (the command itself is a process); give at least 1".into());
    }
    Ok(())
}

/// Whether a timeout is a real one.
pub fn check_timeout(d: Duration) -> Result<(), String> {
    if d.is_zero() {
        return Err("0 would kill the command before it starts; give a positive duration such as 30s".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_sizes() {
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("7"), Ok(Duration::from_secs(7)));
        assert_eq!(parse_duration("0.25"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("5 fortnights").is_err());
        assert!(parse_duration("-1").is_err());
        assert!(parse_duration("inf").is_err());
        assert!(parse_duration("").is_err());
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("4GiB"), Ok(4 << 30));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("100"), Ok(100));
        assert!(parse_size("99999999999999T").is_err());
        assert!(parse_size("-5").is_err());
        assert_eq!(show_size(4 << 20), "4 MiB");
        assert_eq!(show_size(100), "100 bytes");
    }

    #[test]
    fn floors() {
        assert!(check_memory(100).is_err_and(|e| e.contains("100 bytes") && e.contains("4 MiB")));
        assert!(check_memory(MIN_MEMORY).is_ok());
        assert!(check_pids(0).is_err());
        assert!(check_pids(1).is_ok());
        assert!(check_timeout(Duration::ZERO).is_err());
        assert!(check_timeout(Duration::from_millis(1)).is_ok());
    }
}
