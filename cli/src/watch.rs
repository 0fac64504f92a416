//! `redlease watch`: one line per change of a lock's state (its holders, the waiters in its
//! queue), as it happens.

use redlease::LockStatus;
use serde_json::json;

use crate::args::WatchArgs;
use crate::exit::Failure;
use crate::list::{holder_text, holders_json, waiter_text, waiters_json};
use crate::nodes;
use crate::output;

/// What changed between two looks at a lock.
#[derive(Debug, PartialEq, Eq)]
enum Change {
    /// Taken while it was free.
    Held,
    /// Free now; it was held.
    Released,
    /// Another owner holds it now, with no free look in between (a hand-over, or a release
    /// and a new holder faster than the interval).
    HandedOver,
    /// The same owner took it again or gave back a re-entry.
    Recounted,
    /// The same holds; the waiters in its queue changed (one came, one left or was served).
    Queue,
}

fn change(before: Option<&LockStatus>, now: &LockStatus) -> Option<Change> {
    let owners = |s: &LockStatus| s.owners.iter().map(|(o, _)| o.clone()).collect::<Vec<_>>();
    let was_held = before.is_some_and(|b| !b.owners.is_empty());
    let is_held = !now.owners.is_empty();
    match (was_held, is_held) {
        (false, true) => Some(Change::Held),
        (true, false) => Some(Change::Released),
        (true, true) => {
            let before = before?;
            if owners(before) != owners(now) {
                Some(Change::HandedOver)
            } else if before.owners != now.owners {
                Some(Change::Recounted)
            } else {
                queue_changed(before, now)
            }
        }
        (false, false) => before.and_then(|b| queue_changed(b, now)),
    }
}

/// [`Change::Queue`] when other waiters are in the queue, or in another order.
fn queue_changed(before: &LockStatus, now: &LockStatus) -> Option<Change> {
    let fields = |s: &LockStatus| {
        s.waiters
            .iter()
            .map(|w| w.field.clone())
            .collect::<Vec<_>>()
    };
    (fields(before) != fields(now)).then_some(Change::Queue)
}

pub async fn watch(args: WatchArgs) -> Result<u8, Failure> {
    let client = nodes::connect_one(&args.target).await?;
    let lock = nodes::lock_on(&client, &args.name)?;
    let mut last: Option<LockStatus> = None;
    let mut shown = 0usize;
    let deadline = args.duration.map(|d| tokio::time::Instant::now() + d);
    loop {
        let status = lock
            .status()
            .await
            .map_err(|e| Failure::from_error(format_args!("cannot inspect `{}`", args.name), &e))?;
        let event = match &last {
            // The first look says where we start.
            None => Some(if status.owners.is_empty() {
                "free"
            } else {
                "held"
            }),
            Some(before) => change(Some(before), &status).map(|c| match c {
                Change::Held => "held",
                Change::Released => "released",
                Change::HandedOver => "handed over",
                Change::Recounted => "recounted",
                Change::Queue => "queue",
            }),
        };
        if let Some(event) = event {
            print_event(&args, event, &status);
            shown += 1;
            if args.count.is_some_and(|n| shown >= n) {
                return Ok(0);
            }
        }
        last = Some(status);
        let nap = tokio::time::sleep(args.interval);
        tokio::select! {
            _ = nap => {}
            _ = tokio::signal::ctrl_c() => return Ok(0),
        }
        if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
            return Ok(0);
        }
    }
}

fn print_event(args: &WatchArgs, event: &str, status: &LockStatus) {
    let at = humantime::format_rfc3339_millis(std::time::SystemTime::now());
    if args.json {
        output::line(json!({
            "at": at.to_string(),
            "event": event,
            "name": args.name,
            "holders": holders_json(status),
            "waiters": waiters_json(&status.waiters),
            "remaining_lease_ms": status.remaining_lease.map(|d| d.as_millis() as u64),
            "fence": status.fence,
        }));
        return;
    }
    let mut line = format!("{at}  {event:<11}  {}", args.name);
    if !status.holders.is_empty() {
        line += &format!("  by {}", holder_text(status));
    }
    if !status.waiters.is_empty() {
        let waiting: Vec<String> = status
            .waiters
            .iter()
            .map(|w| format!("{}. {}", w.position, waiter_text(w)))
            .collect();
        line += &format!("  queue: {}", waiting.join("; "));
    }
    output::line(line);
}
