//! `redlease status`: the server's view of a lock (holders, their metadata, the waiters in
//! its queue), for people or (`--json`) for scripts.

use std::collections::BTreeMap;
use std::time::Duration;

use humantime::format_duration;
use redlease::LockStatus;
use serde_json::{Value, json};

use crate::args::StatusArgs;
use crate::exit::Failure;
use crate::list;
use crate::nodes::{self, Answer, quorum};
use crate::output;

/// One node's answer (with a single node, every error ends the command instead).
type NodeView = Answer<LockStatus>;

fn held(view: &NodeView) -> bool {
    matches!(&view.result, Ok(s) if !s.owners.is_empty())
}

pub async fn status(args: StatusArgs) -> Result<u8, Failure> {
    let nodes = nodes::connect_all(&args.target).await?;
    nodes::require_majority(&nodes)?;
    let locks = nodes::node_locks(&nodes, &args.name)?;
    // The same on every node: the name and prefix make it.
    let key = locks
        .iter()
        .flatten()
        .next()
        .map(|lock| lock.key().to_owned())
        .unwrap_or_default();
    let views = nodes::ask_each(&nodes, locks, |lock| async move { lock.status().await }).await?;
    nodes::require_answers(&views)?;
    if args.json {
        output::line(to_json(&args.name, &key, &views));
    } else {
        output::line(to_text(&args.name, &key, &views).trim_end());
    }
    Ok(0)
}

/// How long a majority of the nodes still hold the lock: the quorum-th longest remaining lease
/// among the holding nodes. For one node, simply its remaining lease.
fn majority_lease(views: &[NodeView]) -> Option<Duration> {
    let mut leases: Vec<Duration> = views
        .iter()
        .filter(|v| held(v))
        .filter_map(|v| v.result.as_ref().ok()?.remaining_lease)
        .collect();
    leases.sort_unstable_by(|a, b| b.cmp(a));
    leases.get(quorum(views.len()) - 1).copied()
}

fn highest_fence(views: &[NodeView]) -> Option<u64> {
    views
        .iter()
        .filter_map(|v| v.result.as_ref().ok()?.fence)
        .max()
}

/// Every owner field seen, with its largest hold count and on how many nodes it holds.
fn owners(views: &[NodeView]) -> BTreeMap<String, (u64, usize)> {
    let mut all = BTreeMap::new();
    for status in views.iter().filter_map(|v| v.result.as_ref().ok()) {
        for (owner, holds) in &status.owners {
            let entry = all.entry(owner.clone()).or_insert((0, 0));
            entry.0 = entry.0.max(*holds);
            entry.1 += 1;
        }
    }
    all
}

/// What `owner` said of its hold (its metadata), as any node has it.
fn metadata_of<'a>(views: &'a [NodeView], owner: &str) -> Option<&'a str> {
    views
        .iter()
        .filter_map(|v| v.result.as_ref().ok())
        .flat_map(|s| s.holders.iter())
        .find_map(|h| h.metadata.as_deref().filter(|_| h.field == owner))
}

/// The process behind `owner`, as its client announced itself on any node.
fn process_of<'a>(views: &'a [NodeView], owner: &str) -> Option<&'a redlease::ClientInfo> {
    views
        .iter()
        .filter_map(|v| v.result.as_ref().ok())
        .flat_map(|s| s.holders.iter())
        .find(|h| h.field == owner && h.client.is_some())?
        .client
        .as_ref()
}

/// The waiters of a single node (with several, each node's are shown with it).
fn single_node_waiters(views: &[NodeView]) -> &[redlease::Waiter] {
    match views {
        [one] => one.result.as_ref().map_or(&[], |s| &s.waiters),
        _ => &[],
    }
}

fn ms(d: Option<Duration>) -> Value {
    d.map_or(Value::Null, |d| json!(d.as_millis() as u64))
}

fn to_json(name: &str, key: &str, views: &[NodeView]) -> Value {
    let nodes_held = views.iter().filter(|v| held(v)).count();
    let owners: Vec<Value> = owners(views)
        .into_iter()
        .map(|(owner, (holds, nodes))| {
            let client = list::client_json(process_of(views, &owner));
            let metadata = metadata_of(views, &owner);
            json!({"owner": owner, "holds": holds, "nodes": nodes, "client": client,
                   "metadata": metadata})
        })
        .collect();
    let per_node: Vec<Value> = views
        .iter()
        .map(|v| match &v.result {
            Ok(s) => json!({
                "url": v.shown,
                "reachable": true,
                "held": !s.owners.is_empty(),
                "owners": s.owners.iter().map(|(o, h)| json!({"owner": o, "holds": h})).collect::<Vec<_>>(),
                "remaining_lease_ms": ms(s.remaining_lease),
                "fence": s.fence,
                "listening_clients": s.listening_clients,
                "waiters": list::waiters_json(&s.waiters),
            }),
            Err(e) => json!({"url": v.shown, "reachable": false, "error": e}),
        })
        .collect();
    json!({
        "name": name,
        "key": key,
        "held": nodes_held >= quorum(views.len()),
        "nodes_held": nodes_held,
        "quorum": quorum(views.len()),
        "owners": owners,
        "waiters": list::waiters_json(single_node_waiters(views)),
        "remaining_lease_ms": ms(majority_lease(views)),
        "fence": highest_fence(views),
        "nodes": per_node,
    })
}

fn to_text(name: &str, key: &str, views: &[NodeView]) -> String {
    let mut out = format!("lock   {name}\nkey    {key}\n");
    let nodes_held = views.iter().filter(|v| held(v)).count();
    let held = nodes_held >= quorum(views.len());
    let state = if views.len() == 1 {
        if held { "held" } else { "free" }.to_owned()
    } else {
        format!(
            "{} (held on {nodes_held} of {} nodes, {} needed)",
            if held { "held" } else { "free" },
            views.len(),
            quorum(views.len())
        )
    };
    out += &format!("state  {state}\n");
    // Each node's client has its own id, so with several nodes the owners are shown per node.
    if views.len() == 1 {
        for (owner, (holds, _)) in owners(views) {
            out += &format!("owner  {owner} ({holds} {})\n", plural(holds, "hold"));
            if let Some(c) = process_of(views, &owner) {
                out += &format!("by     {}:{} {}\n", c.host, c.pid, c.program);
            }
            if let Some(meta) = metadata_of(views, &owner) {
                out += &format!("meta   {meta}\n");
            }
        }
        if let Some(Ok(s)) = views.first().map(|v| &v.result)
            && s.listening_clients > 0
        {
            out += &format!(
                "wait   {} {}\n",
                s.listening_clients,
                plural(s.listening_clients, "client")
            );
        }
        for w in single_node_waiters(views) {
            out += &format!("queue  {}. {}\n", w.position, list::waiter_text(w));
        }
    }
    if held {
        let lease = majority_lease(views).map_or("no expiry".to_owned(), |d| {
            format!("{} left", format_duration(d))
        });
        out += &format!("lease  {lease}\n");
    }
    let fence = highest_fence(views).map_or("none (never fenced)".to_owned(), |f| f.to_string());
    out += &format!("fence  {fence}\n");
    if views.len() > 1 {
        for v in views {
            out += &format!("node   {}  {}\n", v.shown, node_line(v));
        }
    }
    out
}

fn node_line(v: &NodeView) -> String {
    match &v.result {
        Err(e) => format!("unreachable: {e}"),
        Ok(s) if s.owners.is_empty() => format!("free, fence {}", fence_text(s.fence)),
        Ok(s) => format!(
            "held by {}, {}, fence {}",
            s.owners
                .iter()
                .map(|(owner, holds)| format!("{owner} ({holds} {})", plural(*holds, "hold")))
                .collect::<Vec<_>>()
                .join(", "),
            s.remaining_lease
                .map_or("no expiry".to_owned(), |d| format!(
                    "{} left",
                    format_duration(d)
                )),
            fence_text(s.fence)
        ),
    }
}

fn fence_text(fence: Option<u64>) -> String {
    fence.map_or("none".to_owned(), |f| f.to_string())
}

fn plural(n: u64, word: &str) -> String {
    if n == 1 {
        word.to_owned()
    } else {
        format!("{word}s")
    }
}
