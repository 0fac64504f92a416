//! Signals sent to redlease, and signals it sends to the command.

use std::future::poll_fn;
use std::io;
use std::task::Poll;

use tokio::signal::unix::{Signal, SignalKind, signal};

/// The signals redlease catches and passes on to the command.
const FORWARDED: [i32; 6] = [
    libc::SIGHUP,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGTERM,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Catches the forwarded signals from the moment it is created, so none of them can kill
/// redlease while it holds a lock: the lock must be released, not left to expire.
pub struct Incoming {
    streams: Vec<(i32, Signal)>,
}

impl Incoming {
    pub fn install() -> io::Result<Incoming> {
        let streams = FORWARDED
            .iter()
            .map(|&n| signal(SignalKind::from_raw(n)).map(|s| (n, s)))
            .collect::<io::Result<_>>()?;
        Ok(Incoming { streams })
    }

    /// The next signal received (its number).
    pub async fn recv(&mut self) -> i32 {
        poll_fn(|cx| {
            for (n, stream) in &mut self.streams {
                if let Poll::Ready(Some(())) = stream.poll_recv(cx) {
                    return Poll::Ready(*n);
                }
            }
            Poll::Pending
        })
        .await
    }
}

/// Whether to pass `signal` on. A command in redlease's process group (`--foreground`) already
/// got the terminal's SIGINT and SIGQUIT itself; a second copy could cut its cleanup short.
pub fn should_forward(signal: i32, foreground: bool) -> bool {
    !(foreground && (signal == libc::SIGINT || signal == libc::SIGQUIT))
}

/// The name of a signal for messages: `SIGTERM`, or `signal 40`.
pub fn name(signal: i32) -> String {
    let known = match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGKILL => "SIGKILL",
        libc::SIGTERM => "SIGTERM",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        _ => return format!("signal {signal}"),
    };
    known.to_owned()
}

/// Sends `signal` to the process `pid`, or to its whole process group when `group`. A target
/// that is already gone is not an error.
pub fn send(pid: i32, group: bool, signal: i32) -> io::Result<()> {
    // kill(0) and kill(-1) would hit our own group or every process we may signal.
    if pid <= 1 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("refusing to signal pid {pid}"),
        ));
    }
    let target = if group { -pid } else { pid };
    // SAFETY: kill(2) has no memory-safety preconditions.
    if unsafe { libc::kill(target, signal) } == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(libc::ESRCH) {
        Ok(())
    } else {
        Err(err)
    }
}
