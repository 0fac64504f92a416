//! Taking the lock for `run`: one node, or Redlock over several, held as a `Guard`.

use std::time::Duration;

use redlease::{Guard, Lock, LockOptions, Owner, RedLock};

use crate::args::RunArgs;
use crate::exit::Failure;
use crate::nodes::{self, quorum};

/// The lock, held: a `LockGuard` on one node, or a `RedLockGuard` on a majority of several
/// independent masters, through the library's one `Guard` interface.
pub type Held = Box<dyn Guard>;

/// Waits for the lock as `--wait` says. `Ok(None)`: not acquired in time.
pub async fn acquire(args: &RunArgs) -> Result<Option<Held>, Failure> {
    let urls = args.target.urls();
    if urls.len() > 1 {
        return acquire_redlock(args).await;
    }
    let client = nodes::connect_one(&args.target).await?;
    let lock = configure(nodes::lock_on(&client, &args.name)?, args)
        // One explicit owner: the hold must not depend on which task happens to run this.
        .with_owner(Owner::new());
    let acquired = lock.try_lock_with(options(args)).await;
    let shown = nodes::redact(&urls[0]);
    acquired
        .map(|guard| guard.map(|g| Box::new(g) as Held))
        .map_err(|e| Failure::from_error(format_args!("lock \"{}\" on {shown}", args.name), &e))
}

/// `--wait` as the library's options: no `--wait` waits as long as it takes, `--wait 0` makes
/// one attempt. The lease stays the watchdog's (`--lease` sets the watchdog lease).
fn options(args: &RunArgs) -> LockOptions {
    match args.wait {
        None => LockOptions::new(),
        Some(wait) => LockOptions::new().wait(wait),
    }
}

fn configure(lock: Lock, args: &RunArgs) -> Lock {
    lock.fenced(args.fenced)
        .watchdog_lease(args.lease)
        .lock_delay(args.lock_delay.unwrap_or_default())
}

/// Redlock over every `--url`. A majority must be reachable now; the nodes that are down still
/// count toward the quorum, which is a majority of every node given.
async fn acquire_redlock(args: &RunArgs) -> Result<Option<Held>, Failure> {
    let nodes = nodes::connect_all(&args.target).await?;
    nodes::require_majority(&nodes)?;
    let down = nodes::down_reasons(&nodes);
    if args.verbose && !down.is_empty() {
        eprintln!(
            "redlease: {} of {} Redis nodes are down ({}); they still count: the lock needs {} of \
             all {}",
            down.len(),
            nodes.len(),
            down.join("; "),
            quorum(nodes.len()),
            nodes.len()
        );
    }
    let clients = nodes::keep_votes(&args.target, nodes).await?;
    let locks = nodes::locks(&clients, &args.name)?
        .into_iter()
        .map(|lock| configure(lock, args))
        .collect();
    let redlock = RedLock::new(locks)
        .map_err(|e| Failure::from_error("bad --url list", &e))?
        .with_owner(Owner::new())
        .watchdog_lease(args.lease)
        .node_timeout(node_timeout(args));
    let acquired = redlock.try_lock_with(options(args)).await;
    acquired
        .map(|guard| guard.map(|g| Box::new(g) as Held))
        .map_err(|e| Failure::from_error(format_args!("lock \"{}\"", args.name), &e))
}

/// How long one node may take to answer an acquire. The library's default (at most 50 ms)
/// suits services on a fast network; a command-line tool starts once and pays for a cold
/// script cache, so it gets a tenth of the lease, capped by `--redis-timeout`.
fn node_timeout(args: &RunArgs) -> Duration {
    (args.lease / 10).min(args.target.redis_timeout)
}
