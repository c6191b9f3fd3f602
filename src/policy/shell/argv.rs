//! Argv mode: one command, split into words like `sh` would split a line
//! with no expansions, and every unquoted shell operator refused.

use super::{Refusal, RefusalReason};

/// Split `line` into an argv: blanks separate words, `'…'` is literal,
/// `"…"` is literal except that `\` escapes `$`, `` ` ``, `"`, `\` and a
/// newline, and an unquoted `\` makes the next character literal. Nothing
/// is expanded. An unquoted `;` `&` `|` `<` `>` `` ` `` `$` `(` `)` or
/// newline is refused (`metacharacter`), with a message naming the
/// operator and the split to use instead; an open quote is refused
/// (`unbalanced-quotes`).
pub fn tokenize_command(line: &str) -> Result<Vec<String>, Refusal> {
    let b = line.as_bytes();
    let mut words = Vec::new();
    let mut cur: Vec<u8> = Vec::new();
    let mut in_word = false;
    let mut i = 0;
    let finish = |cur: &mut Vec<u8>, words: &mut Vec<String>| {
        words.push(String::from_utf8_lossy(cur).into_owned());
        cur.clear();
    };
    while i < b.len() {
        let c = b[i];
        match c {
            b' ' | b'\t' => {
                if in_word {
                    finish(&mut cur, &mut words);
                    in_word = false;
                }
                i += 1;
            }
            b'\'' => {
                in_word = true;
                let Some(end) = b[i + 1..].iter().position(|&x| x == b'\'') else {
                    return Err(unbalanced(line, "a `'` is never closed"));
                };
                cur.extend_from_slice(&b[i + 1..i + 1 + end]);
                i += end + 2;
            }
            b'"' => {
                in_word = true;
                i += 1;
                loop {
                    match b.get(i) {
                        None => return Err(unbalanced(line, "a `\"` is never closed")),
                        Some(b'"') => {
                            i += 1;
                            break;
                        }
                        Some(b'\\') => match b.get(i + 1) {
                            Some(b'\n') => i += 2,
                            Some(&n @ (b'$' | b'`' | b'"' | b'\\')) => {
                                cur.push(n);
                                i += 2;
                            }
                            _ => {
                                cur.push(b'\\');
                                i += 1;
                            }
                        },
                        Some(&x) => {
                            cur.push(x);
                            i += 1;
                        }
                    }
                }
            }
            b'\\' => match b.get(i + 1) {
                None => return Err(unbalanced(line, "the line ends with a `\\` that escapes nothing")),
                Some(b'\n') => i += 2,
                Some(_) => {
                    in_word = true;
                    // Copy the whole next character (it may be multi-byte).
                    let len = line[i + 1..].chars().next().map_or(1, char::len_utf8);
                    cur.extend_from_slice(&b[i + 1..i + 1 + len]);
                    i += 1 + len;
                }
            },
            // A line ending in newlines (or `\r\n`) ends there.
            b'\n' | b'\r' if line[i..].trim().is_empty() => break,
            b';' | b'&' | b'|' | b'<' | b'>' | b'`' | b'$' | b'(' | b')' | b'\n' => {
                // `2>` belongs to the operator: drop the fd digits from the word.
                let mut start = i;
                if matches!(c, b'<' | b'>') && in_word && !cur.is_empty() && cur.iter().all(u8::is_ascii_digit) {
                    let digits = cur.len();
                    if b[i - digits..i].iter().all(u8::is_ascii_digit) {
                        start = i - digits;
                    }
                }
                return Err(metacharacter(line, start, i));
            }
            _ => {
                in_word = true;
                cur.push(c);
                i += 1;
            }
        }
    }
    if in_word {
        finish(&mut cur, &mut words);
    }
    Ok(words)
}

fn unbalanced(line: &str, what: &str) -> Refusal {
    Refusal {
        reason: RefusalReason::UnbalancedQuotes,
        command: line.to_string(),
        message: format!("{what}; close it, or escape the quote with `\\`"),
    }
}

/// The refusal for the unquoted operator at `at` (its fd digits start at
/// `start`), naming it and suggesting the split.
fn metacharacter(line: &str, start: usize, at: usize) -> Refusal {
    let b = line.as_bytes();
    let c = b[at];
    let next = b.get(at + 1).copied();
    let op: &str = match (c, next) {
        (b'&', Some(b'&')) => "&&",
        (b'|', Some(b'|')) => "||",
        (b'&', Some(b'>')) => "&>",
        (b'>', Some(b'>')) => ">>",
        (b'<', Some(b'<')) => "<<",
        (b'>', Some(b'&')) => ">&",
        (b'$', Some(b'(')) => "$(",
        (b'$', Some(b'{')) => "${",
        (b'\n', _) => "newline",
        _ => match c {
            b';' => ";",
            b'&' => "&",
            b'|' => "|",
            b'<' => "<",
            b'>' => ">",
            b'`' => "`",
            b'$' => "$",
            b'(' => "(",
            _ => ")",
        },
    };
    let op_shown = if start < at { format!("{}{op}", &line[start..at]) } else { op.to_string() };
    let end = if op == "newline" { at + 1 } else { (at + op.len()).min(line.len()) };
    let before = line[..start].trim();
    let after = line[end..].trim();
    let message = match op {
        "&&" => format!(
            "`&&` is not supported in argv mode: run `{before}`, then `{after}`, as separate commands"
        ),
        "||" => format!(
            "`||` is not supported in argv mode: run `{before}`, and if it fails, run `{after}`, as separate commands"
        ),
        ";" if after.is_empty() => format!(
            "an unquoted `;` ends a command, which argv mode does not do: quote it (';' or \\;) if `{before}` \
             needs it as an argument (e.g. `find … -exec … \\;`), or drop it"
        ),
        ";" | "newline" => format!(
            "`{}` is not supported in argv mode: run `{before}`, then `{after}`, as separate commands",
            if op == ";" { ";" } else { "a newline" }
        ),
        "|" => format!(
            "pipes (`|`) are not supported in argv mode: run `{before}` and read its output, \
             or ask for a policy with interpreter = \"sh\""
        ),
        "&" => "`&` (background) is not supported: run the command in the foreground; background runs go through \
                 the workspace's background jobs, not `&`"
            .into(),
        "`" | "$(" => format!(
            "command substitution ({}) is not supported in argv mode: run the inner command first and pass its output literally",
            if op == "`" { "backquotes" } else { "`$(`" }
        ),
        "$" | "${" => "variables (`$`) are not expanded in argv mode: write the value literally, \
                       or quote the `$` ('$') if you mean a dollar sign"
            .into(),
        "(" | ")" => format!("`{op}` is not supported in argv mode: quote it ('{op}') if it is part of an argument"),
        _ => format!(
            "redirections (`{op_shown}`) are not supported in argv mode: run `{before}` and handle its output yourself, \
             or ask for a policy with interpreter = \"sh\""
        ),
    };
    Refusal { reason: RefusalReason::Metacharacter, command: line.to_string(), message }
}

/// Quote one word so that [`tokenize_command`] (and `sh`) read it back
/// unchanged.
pub fn quote_word(w: &str) -> String {
    let plain = !w.is_empty() && w.bytes().all(|c| c.is_ascii_alphanumeric() || b"-_./:,+@%".contains(&c) || c >= 0x80);
    if plain {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', r"'\''"))
    }
}

/// Quote an argv into one line that [`tokenize_command`] splits back into
/// the same argv.
pub fn quote_argv<S: AsRef<str>>(argv: &[S]) -> String {
    argv.iter().map(|w| quote_word(w.as_ref())).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(line: &str) -> Vec<String> {
        match tokenize_command(line) {
            Ok(v) => v,
            Err(r) => panic!("{line:?}: {r:?}"),
        }
    }

    fn refused(line: &str) -> Refusal {
        match tokenize_command(line) {
            Ok(v) => panic!("{line:?} accepted as {v:?}"),
            Err(r) => r,
        }
    }

    #[test]
    fn quoting() {
        assert_eq!(ok(r#"node -e "console.log(1)""#), ["node", "-e", "console.log(1)"]);
        assert_eq!(ok(r#"echo 'a b' "c\"d" e\ f"#), ["echo", "a b", "c\"d", "e f"]);
        assert_eq!(ok(r#"echo "a\nb" '\x'"#), ["echo", r"a\nb", r"\x"]);
        assert_eq!(ok("echo ''"), ["echo", ""]);
        assert_eq!(ok("find . -exec rm {} \\;"), ["find", ".", "-exec", "rm", "{}", ";"]);
        assert_eq!(ok("echo \"$HOME\" '$x'"), ["echo", "$HOME", "$x"]);
        assert_eq!(ok("echo é\\ü"), ["echo", "éü"]);
    }

    #[test]
    fn operators_are_named_with_the_split() {
        let r = refused("git add -A && git commit -m wip");
        assert_eq!(r.reason, RefusalReason::Metacharacter);
        assert!(r.message.contains("`git add -A`, then `git commit -m wip`"), "{}", r.message);
        assert!(refused("npm test 2>&1").message.contains("`2>&`"), "{}", refused("npm test 2>&1").message);
        assert!(refused("ls | wc").message.contains("pipes"));
        assert!(refused("echo $(id)").message.contains("$("));
        assert_eq!(refused("echo 'x").reason, RefusalReason::UnbalancedQuotes);
        assert_eq!(refused("echo x\\").reason, RefusalReason::UnbalancedQuotes);
        assert_eq!(refused("a\nb").reason, RefusalReason::Metacharacter);
    }

    #[test]
    fn quote_round_trips() {
        for argv in [vec!["a b", "it's", "", "$x", "\\", "é"], vec!["-", "--", "a=b"]] {
            let line = quote_argv(&argv);
            assert_eq!(ok(&line), argv, "{line}");
        }
    }
}
