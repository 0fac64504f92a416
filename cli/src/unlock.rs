//! `redlease unlock --force`: delete a lock whoever holds it.

use serde_json::json;

use crate::args::UnlockArgs;
use crate::exit::{self, Failure};
use crate::nodes::{self, quorum};
use crate::output;

pub async fn unlock(args: UnlockArgs) -> Result<u8, Failure> {
    let nodes = nodes::connect_all(&args.target).await?;
    nodes::require_majority(&nodes)?;
    let single = nodes.len() == 1;
    let locks = nodes::node_locks(&nodes, &args.name)?;
    // Every reachable node is freed, even when some are down: a majority freed frees the lock.
    let results = nodes::ask_each(
        &nodes,
        locks,
        |lock| async move { lock.force_unlock().await },
    )
    .await?;
    let freed = results.iter().filter(|a| a.result.is_ok()).count();
    let was_held = results.iter().any(|a| matches!(a.result, Ok(true)));
    if args.json {
        let per_node: Vec<_> = results
            .iter()
            .map(|a| match &a.result {
                Ok(held) => json!({"url": a.shown, "was_held": held}),
                Err(e) => json!({"url": a.shown, "error": e}),
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
            for a in &results {
                let line = match &a.result {
                    Ok(true) => "deleted".to_owned(),
                    Ok(false) => "was free".to_owned(),
                    Err(e) => format!("failed: {e}"),
                };
                output::line(format_args!("node  {}  {line}", a.shown));
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
