//! `redlease run`: hold a lock while a command runs.

use std::time::{Duration, Instant};

use humantime::format_duration;

use crate::args::RunArgs;
use crate::child::{self, Child, Launch};
use crate::exit::{self, Failure};
use crate::holder::{self, Held};
use crate::signals::{self, Incoming};

pub async fn run(args: RunArgs) -> Result<u8, Failure> {
    // Before anything is held: from here on a SIGTERM cannot kill us with the lock taken.
    let mut incoming = Incoming::install()
        .map_err(|e| Failure::new(exit::INTERNAL, format!("cannot catch signals: {e}")))?;
    let started = Instant::now();
    let held = tokio::select! {
        held = holder::acquire(&args) => held?,
        signal = incoming.recv() => {
            return Err(Failure::new(
                exit::signal_code(signal),
                format!("{} while waiting for lock \"{}\"; the command was not run", signals::name(signal), args.name),
            ));
        }
    };
    let Some(held) = held else {
        return Err(not_acquired(&args));
    };
    let acquired = Instant::now();
    if args.verbose {
        let token = held
            .fencing_token()
            .map(|t| format!(", token {t}"))
            .unwrap_or_default();
        eprintln!(
            "redlease: acquired lock \"{}\" after {}{token}",
            args.name,
            format_duration(millis(started.elapsed()))
        );
    }
    let foreground = args.foreground || child::in_terminal_foreground();
    let launch = Launch {
        command: &args.command,
        lock: &args.name,
        token: held.fencing_token(),
        env: &[],
        foreground,
    };
    let mut child = match launch.spawn() {
        Ok(child) => child,
        Err(failure) => {
            release(&args, held).await;
            return Err(failure);
        }
    };
    let why = || format!("the lease of lock \"{}\" was lost", args.name);
    let lost = held.lost();
    let outcome =
        child::supervise(&mut child, &mut incoming, foreground, args.grace, lost, why).await;
    let ran = Ran {
        child: &child,
        outcome,
        acquired,
    };
    finish(&args, held, ran, &mut incoming).await
}

/// The command, after it exited.
struct Ran<'a> {
    child: &'a Child,
    outcome: child::Outcome,
    /// When the lock was acquired (`--hold-at-least` counts from there).
    acquired: Instant,
}

/// Releases the lock (after `--hold-at-least`) and picks the exit status.
async fn finish(
    args: &RunArgs,
    held: Held,
    ran: Ran<'_>,
    incoming: &mut Incoming,
) -> Result<u8, Failure> {
    let Ran {
        child,
        outcome,
        acquired,
    } = ran;
    let status = match outcome.status {
        Ok(status) => status,
        Err(e) => {
            release(args, held).await;
            return Err(Failure::new(
                exit::INTERNAL,
                format!("lost track of the command: {e}"),
            ));
        }
    };
    let code = exit::of_child(status);
    if let Some(signal) = outcome.stopped_with {
        child.kill_leftovers();
        drop(held);
        return Err(Failure::new(
            exit::LEASE_LOST,
            format!(
                "lock \"{}\" was lost while the command ran; the command was stopped with {} \
                 (its status: {code})",
                args.name,
                signals::name(signal)
            ),
        ));
    }
    let lost_late = held.is_lost();
    if !lost_late && let Some(at_least) = args.hold_at_least {
        hold_the_rest(args, &held, acquired + at_least, incoming).await;
        if held.is_lost() {
            // The command ran to its end under the lock: its status stands.
            let _ = held.unlock().await;
            eprintln!(
                "redlease: the lease of lock \"{}\" was lost after the command exited, before \
                 --hold-at-least ran out; another run may take it sooner",
                args.name
            );
            return Ok(code);
        }
    }
    match held.unlock().await {
        Err(e) if lost_late || e.is_lease_lost() => Err(Failure::new(
            exit::LEASE_LOST,
            format!(
                "the lease of lock \"{}\" was lost before the command finished (its status: {code})",
                args.name
            ),
        )),
        Err(e) => {
            release_failed(args, &e);
            Ok(code)
        }
        Ok(()) => {
            if args.verbose {
                eprintln!(
                    "redlease: released lock \"{}\"; the command exited with {code}",
                    args.name
                );
            }
            Ok(code)
        }
    }
}

/// `--hold-at-least`: keeps the lock, after the command exited, until `until` (the process
/// waits; the watchdog goes on renewing). Ends early when the lease is lost or a signal asks
/// redlease to stop (then the lock is released at once).
async fn hold_the_rest(args: &RunArgs, held: &Held, until: Instant, incoming: &mut Incoming) {
    let left = until.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return;
    }
    if args.verbose {
        eprintln!(
            "redlease: the command exited; keeping lock \"{}\" {} more (--hold-at-least)",
            args.name,
            format_duration(millis(left))
        );
    }
    tokio::select! {
        () = tokio::time::sleep(left) => {}
        () = held.lost() => {}
        signal = incoming.recv() => eprintln!(
            "redlease: {} after the command exited; releasing lock \"{}\" before \
             --hold-at-least ran out",
            signals::name(signal),
            args.name
        ),
    }
}

/// Gives the lock back when the command could not be run or watched; errors only reported.
async fn release(args: &RunArgs, held: Held) {
    if let Err(e) = held.unlock().await {
        release_failed(args, &e);
    }
}

/// Reports a release that failed; the lock is then left to expire.
fn release_failed(args: &RunArgs, error: &redlease::Error) {
    eprintln!(
        "redlease: could not release lock \"{}\" ({error}); it expires within {}",
        args.name,
        format_duration(args.lease)
    );
}

/// The one-line failure for a lock not acquired within `--wait`; with `--quiet`, none.
fn not_acquired(args: &RunArgs) -> Failure {
    if args.quiet {
        return Failure::silent(exit::TEMPFAIL);
    }
    let within = match args.wait {
        Some(wait) if !wait.is_zero() => format!("within {}", format_duration(wait)),
        _ => "at once (--wait 0)".to_owned(),
    };
    Failure::new(
        exit::TEMPFAIL,
        format!(
            "lock \"{}\" is held elsewhere; not acquired {within}",
            args.name
        ),
    )
}

fn millis(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}
