//! Exit statuses (sysexits.h where one fits, the shell's conventions for the command) and the
//! one failure type every subcommand returns.

use std::fmt;
use std::process::ExitStatus;

use redlease::Error;

/// Bad arguments (also a bad URL or lock name).
pub const USAGE: u8 = 64;
/// Redis answered with data we cannot use (the lock key holds another type).
pub const DATA: u8 = 65;
/// Redis could not be reached, or fewer than a majority of the nodes.
pub const UNAVAILABLE: u8 = 69;
/// The lease was lost while the command ran.
pub const LEASE_LOST: u8 = 70;
/// An internal failure: the runtime, signal handling or waiting for the command failed, or
/// the library answered in a way redlease does not expect (sysexits' EX_OSERR; 70 is taken
/// by [`LEASE_LOST`], which scripts test for).
pub const INTERNAL: u8 = 71;
/// The lock was not acquired within `--wait`.
pub const TEMPFAIL: u8 = 75;
/// Redis sent a reply this version does not understand.
pub const PROTOCOL: u8 = 76;
/// The Redis user (ACL) lacks a right redlease needs; the message names it (EX_NOPERM).
pub const NO_PERMISSION: u8 = 77;
/// The TLS handshake failed: an untrusted or misnamed server certificate, or a refused client
/// certificate (EX_CONFIG: a setting to fix, not an outage).
pub const TLS: u8 = 78;
/// The command exists but could not be executed (like a shell).
pub const CANNOT_EXECUTE: u8 = 126;
/// The command was not found (like a shell).
pub const NOT_FOUND: u8 = 127;

/// Why redlease stops early: the exit status and a one-line message for stderr (none when
/// empty).
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    /// A failure that prints nothing: the status says it all (`run --quiet` on a busy lock).
    pub fn silent(code: u8) -> Failure {
        Failure::new(code, String::new())
    }

    /// A library error, with `context` saying what was being done.
    pub fn from_error(context: impl fmt::Display, error: &Error) -> Failure {
        Failure::new(code_of(error), format!("{context}: {error}"))
    }
}

/// The exit status for a library error.
pub fn code_of(error: &Error) -> u8 {
    if error.is_unavailable() {
        return UNAVAILABLE;
    }
    if error.is_invalid_input() {
        return USAGE;
    }
    if error.is_lease_lost() {
        return LEASE_LOST;
    }
    match error {
        Error::WrongType { .. } => DATA,
        Error::Protocol { .. } => PROTOCOL,
        Error::NoPermission { .. } => NO_PERMISSION,
        Error::Tls { .. } => TLS,
        // Refused us (NOAUTH, READONLY replica, OOM), or too few Redlock nodes answered:
        // either way the service cannot be used.
        // A master name no sentinel knows is a Redis that cannot be used, as an unreachable one.
        Error::Redis { .. }
        | Error::Auth { .. }
        | Error::Timeout { .. }
        | Error::Quorum { .. }
        | Error::UnknownMaster { .. } => UNAVAILABLE,
        // Too few replicas acknowledged (the lock was given back), or WAIT is refused.
        _ if error.is_replicas() => UNAVAILABLE,
        _ => INTERNAL,
    }
}

/// The status a shell would report for the command: its exit code, or 128+N for signal N.
pub fn of_child(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => signal_code(signal),
        // Stopped or continued are not final states; wait() never reports them.
        (None, None) => INTERNAL,
    }
}

/// 128 + N, as a shell reports death by signal N.
pub fn signal_code(signal: i32) -> u8 {
    (128 + signal).clamp(0, 255) as u8
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn child_status_maps_like_a_shell() {
        assert_eq!(of_child(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(of_child(ExitStatus::from_raw(libc::SIGTERM)), 143);
        assert_eq!(of_child(ExitStatus::from_raw(libc::SIGKILL)), 137);
    }
}
