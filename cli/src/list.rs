//! `redlease list`: the locks held now, with their holders (and what they said of their hold,
//! its metadata), hold counts, leases, listening clients and fences, for people or (`--json`,
//! the waiters too) for scripts.

use std::time::Duration;

use humantime::format_duration;
use redlease::{Client, ClientInfo, LockStatus, Waiter};
use serde_json::{Value, json};

use crate::args::ListArgs;
use crate::exit::Failure;
use crate::nodes;
use crate::output;

pub async fn list(args: ListArgs) -> Result<u8, Failure> {
    let client = nodes::connect_one(&args.target).await?;
    let names = client
        .held_locks(&args.pattern, args.limit)
        .await
        .map_err(|e| Failure::from_error("cannot list the locks", &e))?;
    let mut held = Vec::with_capacity(names.len());
    for name in names {
        let status = nodes::lock_on(&client, &name)?
            .status()
            .await
            .map_err(|e| Failure::from_error(format_args!("cannot inspect `{name}`"), &e))?;
        // Released between the scan and now.
        if !status.holders.is_empty() {
            held.push((name, status));
        }
    }
    if args.json {
        output::line(to_json(&client, &held));
    } else if held.is_empty() {
        output::line(format!("no held lock matches `{}`", args.pattern));
    } else {
        output::line(to_text(&held).trim_end());
    }
    Ok(0)
}

/// `host:pid program (holds×) [metadata]`, or the owner field when the holder did not
/// announce itself.
pub fn holder_text(status: &LockStatus) -> String {
    status
        .holders
        .iter()
        .map(|h| {
            let who = process_text(h.client.as_ref(), &h.field);
            match &h.metadata {
                Some(meta) => format!("{who} ({}×) [{meta}]", h.holds),
                None => format!("{who} ({}×)", h.holds),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// `host:pid program`, or `field` when its client did not announce itself.
pub fn process_text(client: Option<&ClientInfo>, field: &str) -> String {
    match client {
        Some(c) => format!("{}:{} {}", c.host, c.pid, c.program),
        None => field.to_owned(),
    }
}

/// One waiter for people: `host:pid program, waiting 2s 104ms`.
pub fn waiter_text(w: &Waiter) -> String {
    let who = process_text(w.client.as_ref(), &w.field);
    match w.waited {
        Some(waited) => format!("{who}, waiting {}", format_duration(whole_ms(waited))),
        None => format!("{who}, waiting (since unknown)"),
    }
}

/// `d` to the millisecond, as people read it.
fn whole_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis() as u64)
}

/// A client as JSON.
pub fn client_json(client: Option<&ClientInfo>) -> Value {
    client.map_or(Value::Null, |c| {
        json!({"id": c.id, "host": c.host, "pid": c.pid, "program": c.program,
               "started_ms": c.started_ms, "version": c.version})
    })
}

/// The waiters as JSON, first to be served first (shared with `status` and `watch`).
pub fn waiters_json(waiters: &[Waiter]) -> Vec<Value> {
    waiters
        .iter()
        .map(|w| {
            json!({
                "position": w.position,
                "owner": w.field,
                "waited_ms": w.waited.map(|d| d.as_millis() as u64),
                "place_expires_ms": w.place_expires_in.as_millis() as u64,
                "client": client_json(w.client.as_ref()),
            })
        })
        .collect()
}

fn lease_text(lease: Option<Duration>) -> String {
    lease.map_or("no expiry".to_owned(), |d| {
        format_duration(Duration::from_millis(d.as_millis() as u64)).to_string()
    })
}

fn to_text(held: &[(String, LockStatus)]) -> String {
    let width = held
        .iter()
        .map(|(name, _)| name.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let mut out = format!(
        "{:width$}  {:>10}  {:>7}  {:>5}  HOLDER\n",
        "LOCK", "LEASE", "WAITING", "FENCE"
    );
    for (name, status) in held {
        let fence = status.fence.map_or("-".to_owned(), |f| f.to_string());
        out += &format!(
            "{name:width$}  {:>10}  {:>7}  {fence:>5}  {}\n",
            lease_text(status.remaining_lease),
            status.listening_clients,
            holder_text(status)
        );
    }
    out
}

/// One holder as JSON (shared with `watch`).
pub fn holders_json(status: &LockStatus) -> Vec<Value> {
    status
        .holders
        .iter()
        .map(|h| {
            json!({"owner": h.field, "holds": h.holds, "client": client_json(h.client.as_ref()),
                   "metadata": h.metadata})
        })
        .collect()
}

fn to_json(client: &Client, held: &[(String, LockStatus)]) -> Value {
    let prefix = &client.config().prefix;
    let locks: Vec<Value> = held
        .iter()
        .map(|(name, s)| {
            json!({
                "name": name,
                "key": format!("{prefix}:{{{name}}}"),
                "holders": holders_json(s),
                "remaining_lease_ms": s.remaining_lease.map(|d| d.as_millis() as u64),
                "listening_clients": s.listening_clients,
                "waiters": waiters_json(&s.waiters),
                "fence": s.fence,
            })
        })
        .collect();
    json!({ "locks": locks })
}
