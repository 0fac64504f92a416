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
    finish(&args, held, &child, outcome).await
}

/// Releases the lock and picks the exit status.
async fn finish(
    args: &RunArgs,
    held: Held,
    child: &Child,
    outcome: child::Outcome,
) -> Result<u8, Failure> {
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

/// The one-line failure for a lock not acquired within `--wait`.
fn not_acquired(args: &RunArgs) -> Failure {
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
