//! The fields of a `/proc/PID/stat` line, for the library (a process's
//! parent) and the helper (the CPU a process is on).

/// Field `n` of a `/proc/PID/stat` line, numbered as proc(5) numbers them
/// from 1 (the pid); fields 1 and 2 are not given. The fields are counted
/// after the command name's closing parenthesis: the name (field 2) may
/// hold anything, spaces and parentheses too.
pub fn field(stat: &str, n: usize) -> Option<&str> {
    let after_name = n.checked_sub(3)?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(after_name)
}

#[cfg(test)]
mod tests {
    use super::field;

    #[test]
    fn fields_are_counted_after_the_name() {
        let stat = "42 (a) b (c) d) S 7 42 42 0 -1";
        assert_eq!(field(stat, 3), Some("S"));
        assert_eq!(field(stat, 4), Some("7"));
        assert_eq!(field(stat, 2), None);
        assert_eq!(field(stat, 40), None);
        assert_eq!(field("no name here", 4), None);
    }
}
