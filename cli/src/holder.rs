//! Taking the lock for `run`: one node, or Redlock over several, behind one small interface.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use redlease::{Lock, LockGuard, Owner, RedLock, RedLockGuard};

use crate::args::RunArgs;
use crate::exit::{self, Failure};
use crate::nodes::{self, Node, down_reasons, quorum};

/// The lock, held.
pub enum Held {
    One(LockGuard),
    /// Redlock: held on a majority of several independent masters.
    Many(RedLockGuard),
}

impl Held {
    pub fn token(&self) -> Option<u64> {
        match self {
            Held::One(guard) => guard.fencing_token(),
            Held::Many(guard) => guard.fencing_token(),
        }
    }

    /// Resolves when the lease is lost; owns what it needs, so it can live beside `self`.
    pub fn lost(&self) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        match self {
            Held::One(guard) => Box::pin(guard.lost()),
            Held::Many(guard) => Box::pin(guard.lost()),
        }
    }

    pub fn is_lost(&self) -> bool {
        match self {
            Held::One(guard) => guard.is_lost(),
            Held::Many(guard) => guard.is_lost(),
        }
    }

    pub async fn unlock(self) -> redlease::Result<()> {
        match self {
            Held::One(guard) => guard.unlock().await,
            Held::Many(guard) => guard.unlock().await,
        }
    }
}

/// Waits for the lock as `--wait` says. `Ok(None)`: not acquired in time.
pub async fn acquire(args: &RunArgs) -> Result<Option<Held>, Failure> {
    let urls = args.target.urls();
    if urls.len() > 1 {
        return acquire_redlock(args).await;
    }
    let client = nodes::connect_one(&args.target).await?;
    let lock = configure(client.lock(&args.name), args)?
        // One explicit owner: the hold must not depend on which task happens to run this.
        .with_owner(Owner::new());
    let acquired = match args.wait {
        None => lock.lock().await.map(Some),
        Some(Duration::ZERO) => lock.try_lock().await,
        Some(wait) => lock.try_lock_for(wait).await,
    };
    let shown = nodes::redact(&urls[0]);
    acquired
        .map(|guard| guard.map(Held::One))
        .map_err(|e| Failure::from_error(format_args!("lock \"{}\" on {shown}", args.name), &e))
}

fn configure(lock: redlease::Result<Lock>, args: &RunArgs) -> Result<Lock, Failure> {
    Ok(lock
        .map_err(|e| Failure::from_error("bad lock name", &e))?
        .fenced(args.fenced)
        .watchdog_lease(args.lease))
}

/// Redlock over every `--url`.
async fn acquire_redlock(args: &RunArgs) -> Result<Option<Held>, Failure> {
    let nodes = nodes::connect_all(&args.target).await;
    let usable = usable_nodes(&nodes)?;
    let locks = usable
        .iter()
        .map(|client| configure(client.lock(&args.name), args))
        .collect::<Result<Vec<_>, _>>()?;
    let redlock = RedLock::new(locks)
        .map_err(|e| Failure::from_error("bad --url list", &e))?
        .with_owner(Owner::new())
        .watchdog_lease(args.lease)
        .node_timeout(node_timeout(args));
    let acquired = match args.wait {
        None => redlock.lock().await.map(Some),
        Some(Duration::ZERO) => redlock.try_lock().await,
        Some(wait) => redlock.try_lock_for(wait).await,
    };
    acquired
        .map(|guard| guard.map(Held::Many))
        .map_err(|e| Failure::from_error(format_args!("lock \"{}\"", args.name), &e))
}

/// How long one node may take to answer an acquire. The library's default (at most 50 ms)
/// suits services on a fast network; a command-line tool starts once and pays for a cold
/// script cache, so it gets a tenth of the lease, capped by `--timeout`.
fn node_timeout(args: &RunArgs) -> Duration {
    (args.lease / 10).min(args.target.timeout)
}

/// The connected nodes, when they can form a majority of ALL the nodes given.
///
/// A RedLock counts its majority over the nodes it has a client for, and a node that cannot be
/// connected to has none. Leaving it out is safe only while a majority of the remaining nodes
/// is still a majority of all of them: with an odd number of nodes, one may be down.
fn usable_nodes(nodes: &[Node]) -> Result<Vec<redlease::Client>, Failure> {
    nodes::require_majority(nodes)?;
    let up: Vec<redlease::Client> = nodes
        .iter()
        .filter_map(|n| n.client.as_ref().ok().cloned())
        .collect();
    if quorum(up.len()) >= quorum(nodes.len()) {
        return Ok(up);
    }
    let down = down_reasons(nodes);
    Err(Failure::new(
        exit::UNAVAILABLE,
        format!(
            "{} of {} Redis nodes are down ({}); redlease can take a Redlock with at most one \
             node down, and only with an odd number of nodes",
            down.len(),
            nodes.len(),
            down.join("; ")
        ),
    ))
}
