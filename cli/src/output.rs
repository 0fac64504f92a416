//! Writing results to stdout.

use std::io::Write;

/// Prints `text` and a newline. A closed pipe (`redlease status | head -1`) is not an error
/// worth a panic: the reader has what it wanted.
pub fn line(text: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
}

/// `text` on one line: control characters (a line break, a tab, an escape sequence) escaped as
/// Rust writes them (`\n`, `\u{1b}`); every other character as it is.
pub fn one_line(text: &str) -> String {
    escaped(text, false)
}

/// `text` in double quotes, on one line: as [`one_line`], with `"` and `\` escaped too.
pub fn quoted(text: &str) -> String {
    format!("\"{}\"", escaped(text, true))
}

fn escaped(text: &str, quoting: bool) -> String {
    let mut shown = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' | '\\' if quoting => shown.extend(['\\', c]),
            c if c.is_control() => shown.extend(c.escape_default()),
            c => shown.push(c),
        }
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_shown_on_one_line() {
        assert_eq!(
            quoted("a\n\"b\" C:\\x caf\u{e9}"),
            r#""a\n\"b\" C:\\x café""#
        );
        assert_eq!(one_line("host\r\n\u{1b}[31m"), r"host\r\n\u{1b}[31m");
        assert_eq!(
            quoted("e\u{301}"),
            "\"e\u{301}\"",
            "a combining accent stays as it is"
        );
    }
}
