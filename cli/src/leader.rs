//! `redlease leader` (who leads an election) and `redlease observe` (one line per change).

use redlease::{Leader, LeaderChange};
use serde_json::{Value, json};

use crate::args::{LeaderArgs, ObserveArgs};
use crate::elect::election_on;
use crate::exit::Failure;
use crate::nodes;
use crate::output;

pub async fn leader(args: LeaderArgs) -> Result<u8, Failure> {
    let client = nodes::connect_one(&args.target).await?;
    let election = election_on(&client, &args.name)?;
    let status = election.status().await.map_err(|e| {
        Failure::from_error(format_args!("cannot read election \"{}\"", args.name), &e)
    })?;
    if args.json {
        output::line(json!({
            "election": args.name,
            "leader": status.leader.as_ref().map(leader_json),
            "revision": status.revision,
            "transitions": status.transitions,
            "last_change": status.last_change.map(|c| c.as_str()),
            "changed_at_ms": status.changed_at_ms,
            "remaining_lease_ms": status.remaining_lease.map(|d| d.as_millis() as u64),
        }));
        return Ok(0);
    }
    match &status.leader {
        Some(leader) => {
            let lease = status
                .remaining_lease
                .map(|d| format!(", lease left {}", humantime::format_duration(millis(d))))
                .unwrap_or_default();
            output::line(format!(
                "{} is led by {}{lease}",
                output::quoted(&args.name),
                leader_text(leader)
            ));
        }
        None => {
            let last = status
                .last_change
                .map(|c| format!(" (last change: {})", c.as_str()))
                .unwrap_or_default();
            output::line(format!(
                "{} has no leader{last}",
                output::quoted(&args.name)
            ));
        }
    }
    Ok(0)
}

pub async fn observe(args: ObserveArgs) -> Result<u8, Failure> {
    let client = nodes::connect_one(&args.target).await?;
    let election = election_on(&client, &args.name)?;
    let mut changes = election.observe();
    let deadline = async {
        match args.duration {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(deadline);
    let mut shown = 0usize;
    // One turn per change (or error): the stream waits for messages, not a busy loop.
    loop {
        let change = tokio::select! {
            change = changes.next_change() => change,
            () = &mut deadline => return Ok(0),
            _ = tokio::signal::ctrl_c() => return Ok(0),
        };
        match change {
            Ok(change) => {
                print_change(&args, &change);
                shown += 1;
                if args.count.is_some_and(|n| shown >= n) {
                    return Ok(0);
                }
            }
            // The first read decides whether Redis can be reached at all.
            Err(e) if shown == 0 => {
                return Err(Failure::from_error(
                    format_args!("cannot observe election \"{}\"", args.name),
                    &e,
                ));
            }
            Err(e) => eprintln!("redlease: {e}; still observing"),
        }
    }
}

fn print_change(args: &ObserveArgs, change: &LeaderChange) {
    let event = match (change.initial, change.cause) {
        (true, _) => "now",
        (false, Some(cause)) => cause.as_str(),
        (false, None) => "reset",
    };
    if args.json {
        output::line(json!({
            "election": args.name,
            "event": event,
            "cause": change.cause.map(|c| c.as_str()),
            "revision": change.revision,
            "transitions": change.transitions,
            "at_ms": change.at_ms,
            "leader": change.leader.as_ref().map(leader_json),
            "missed": change.missed,
            "restarted": change.restarted,
        }));
        return;
    }
    // The server's clock when the change was recorded; now for an election without one.
    let at = match change.at_ms {
        0 => std::time::SystemTime::now(),
        ms => std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms),
    };
    let at = humantime::format_rfc3339_millis(at);
    let mut text = format!("{at}  {event:<10}  rev {:<5}  ", change.revision);
    match &change.leader {
        Some(leader) => text.push_str(&format!("led by {}", leader_text(leader))),
        None => text.push_str("no leader"),
    }
    if change.missed > 0 {
        text.push_str(&format!(
            "  ({} changes missed before this one)",
            change.missed
        ));
    }
    if change.restarted {
        text.push_str("  (the election's history started over)");
    }
    output::line(text);
}

/// The leader on one line: its value quoted, with quotes, line breaks and other control
/// characters escaped, as they are in its host and program (a value may hold any text; `--json`
/// has them as they are).
fn leader_text(leader: &Leader) -> String {
    let value = match leader.value.as_str() {
        "" => String::new(),
        value => format!("{} ", output::quoted(value)),
    };
    let (host, program) = (&leader.process.host, &leader.process.program);
    format!(
        "{value}(term {}, host {}, pid {}, {})",
        leader.term,
        output::one_line(host),
        leader.process.pid,
        output::one_line(program)
    )
}

fn leader_json(leader: &Leader) -> Value {
    json!({
        "value": leader.value,
        "term": leader.term,
        "host": leader.process.host,
        "pid": leader.process.pid,
        "program": leader.process.program,
        "client": leader.process.id,
        "since_ms": leader.since_ms,
    })
}

fn millis(d: std::time::Duration) -> std::time::Duration {
    std::time::Duration::from_millis(d.as_millis() as u64)
}
