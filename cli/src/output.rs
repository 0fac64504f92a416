//! Writing results to stdout.

use std::io::Write;

/// Prints `text` and a newline. A closed pipe (`redlease status | head -1`) is not an error
/// worth a panic: the reader has what it wanted.
pub fn line(text: impl std::fmt::Display) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
}
