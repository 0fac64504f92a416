//! `redlease list`: the locks held now, with their holders, hold counts, leases, listening
//! clients and fences, for people or (`--json`) for scripts.

use std::time::Duration;

use humantime::format_duration;
use redlease::{Client, LockStatus};
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

/// `host:pid program`, or the owner field when the holder did not announce itself.
pub fn holder_text(status: &LockStatus) -> String {
    status
        .holders
        .iter()
        .map(|h| match &h.client {
            Some(c) => format!("{}:{} {} ({}×)", c.host, c.pid, c.program, h.holds),
            None => format!("{} ({}×)", h.field, h.holds),
        })
        .collect::<Vec<_>>()
        .join(", ")
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
            let client = h.client.as_ref().map(|c| {
                json!({"id": c.id, "host": c.host, "pid": c.pid, "program": c.program,
                       "started_ms": c.started_ms, "version": c.version})
            });
            json!({"owner": h.field, "holds": h.holds, "client": client})
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
                "fence": s.fence,
            })
        })
        .collect();
    json!({ "locks": locks })
}
