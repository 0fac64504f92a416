//! `redlease unlock --force`: delete a lock whoever holds it.

use serde_json::json;

use crate::args::UnlockArgs;
use crate::exit::{self, Failure};
use crate::nodes::{self, quorum};
use crate::output;

pub async fn unlock(args: UnlockArgs) -> Result<u8, Failure> {
    let nodes = nodes::connect_all(&args.target).await;
    nodes::require_majority(&nodes)?;
    let single = nodes.len() == 1;
    // Every reachable node is freed, even when some are down: a majority freed frees the lock.
    let mut results = Vec::with_capacity(nodes.len());
    for node in &nodes {
        let outcome = match &node.client {
            Err(e) => Err(e.to_string()),
            Ok(client) => {
                let lock = client
                    .lock(&args.name)
                    .map_err(|e| Failure::from_error("bad lock name", &e))?;
                match lock.force_unlock().await {
                    Ok(was_held) => Ok(was_held),
                    Err(e) if single => return Err(nodes::unreachable(&node.shown, &e)),
                    Err(e) => Err(e.to_string()),
                }
            }
        };
        results.push((node.shown.clone(), outcome));
    }
    let freed = results.iter().filter(|(_, r)| r.is_ok()).count();
    let was_held = results.iter().any(|(_, r)| matches!(r, Ok(true)));
    if args.json {
        let per_node: Vec<_> = results
            .iter()
            .map(|(url, r)| match r {
                Ok(held) => json!({"url": url, "was_held": held}),
                Err(e) => json!({"url": url, "error": e}),
            })
            .collect();
        output::line(json!({"name": args.name, "was_held": was_held, "nodes": per_node}));
    } else {
        let what = if was_held {
            "was held; it is free now (its holder finds out at its next renewal)"
        } else {
            "was not held"
        };
        output::line(format_args!("lock \"{}\" {what}", args.name));
        if !single {
            for (url, r) in &results {
                let line = match r {
                    Ok(true) => "deleted".to_owned(),
                    Ok(false) => "was free".to_owned(),
                    Err(e) => format!("failed: {e}"),
                };
                output::line(format_args!("node  {url}  {line}"));
            }
        }
    }
    if freed < quorum(results.len()) {
        return Err(Failure::new(
            exit::UNAVAILABLE,
            format!(
                "only {freed} of {} nodes could be unlocked; a majority still may hold \"{}\"",
                results.len(),
                args.name
            ),
        ));
    }
    Ok(0)
}
