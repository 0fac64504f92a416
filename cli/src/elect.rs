//! `redlease elect`: run a command only while this process leads an election.

use humantime::format_duration;
use redlease::{Election, Leadership};

use crate::args::ElectArgs;
use crate::child::{self, Launch};
use crate::exit::{self, Failure};
use crate::nodes;
use crate::signals::{self, Incoming};

pub async fn elect(args: ElectArgs) -> Result<u8, Failure> {
    // Before anything is held: from here on a SIGTERM cannot kill us while leading.
    let mut incoming = Incoming::install()
        .map_err(|e| Failure::new(exit::INTERNAL, format!("cannot catch signals: {e}")))?;
    // Refuses several --url (an election runs on one deployment) before connecting.
    let client = nodes::connect_one(&args.target).await?;
    let election = client
        .election(&args.name)
        .map_err(|e| Failure::from_error("bad election name", &e))?
        .lease(args.lease)
        .lock_delay(args.lock_delay.unwrap_or_default());
    let foreground = args.foreground || child::in_terminal_foreground();
    // One turn per term: with --rejoin as long as terms are lost, each turn waiting in a
    // campaign or in the command.
    loop {
        let leadership = tokio::select! {
            won = election.campaign(&args.value) => won.map_err(|e| {
                Failure::from_error(format_args!("election \"{}\"", args.name), &e)
            })?,
            signal = incoming.recv() => {
                return Err(Failure::new(
                    exit::signal_code(signal),
                    format!("{} while waiting to lead \"{}\"; the command was not run", signals::name(signal), args.name),
                ));
            }
        };
        let term = leadership.term();
        if args.verbose {
            eprintln!("redlease: leading \"{}\" in term {term}", args.name);
        }
        let env = [
            ("REDLEASE_ELECTION", args.name.clone()),
            ("REDLEASE_TERM", term.to_string()),
        ];
        let launch = Launch {
            command: &args.command,
            lock: &args.name,
            token: Some(term),
            env: &env,
            foreground,
        };
        let mut child = match launch.spawn() {
            Ok(child) => child,
            Err(failure) => {
                resign(&args, leadership).await;
                return Err(failure);
            }
        };
        let why = || {
            format!(
                "the leadership of \"{}\" (term {}) was lost",
                args.name,
                leadership.term()
            )
        };
        let lost = leadership.lost();
        let outcome =
            child::supervise(&mut child, &mut incoming, foreground, args.grace, lost, why).await;
        let status = match outcome.status {
            Ok(status) => status,
            Err(e) => {
                resign(&args, leadership).await;
                return Err(Failure::new(
                    exit::INTERNAL,
                    format!("lost track of the command: {e}"),
                ));
            }
        };
        let code = exit::of_child(status);
        let Some(signal) = outcome.stopped_with else {
            // The command finished while leading: its status is ours.
            resign(&args, leadership).await;
            if args.verbose {
                eprintln!(
                    "redlease: resigned \"{}\" (term {term}); the command exited with {code}",
                    args.name
                );
            }
            return Ok(code);
        };
        child.kill_leftovers();
        drop(leadership);
        if !args.rejoin {
            return Err(Failure::new(
                exit::LEASE_LOST,
                format!(
                    "the leadership of \"{}\" (term {term}) was lost while the command ran; the \
                     command was stopped with {} (its status: {code})",
                    args.name,
                    signals::name(signal)
                ),
            ));
        }
        eprintln!(
            "redlease: the leadership of \"{}\" (term {term}) was lost; the command was stopped \
             with {}; campaigning again",
            args.name,
            signals::name(signal)
        );
    }
}

/// Resigns, which hands over at once; errors are only reported (the lease ends the term).
async fn resign(args: &ElectArgs, leadership: Leadership) {
    if let Err(e) = leadership.resign().await
        && !e.is_lease_lost()
    {
        eprintln!(
            "redlease: could not resign \"{}\" ({e}); the term ends within {}",
            args.name,
            format_duration(args.lease)
        );
    }
}

/// The election `name` on `client`; a bad name is a usage failure.
pub fn election_on(client: &redlease::Client, name: &str) -> Result<Election, Failure> {
    client
        .election(name)
        .map_err(|e| Failure::from_error("bad election name", &e))
}
