//! `RedLock`: one lock over several independent Redis masters, held by a majority.
//!
//! This file is the public type and its documentation; the engine is split by concern:
//! `settings` (node list checks, defaults, the numbers of one acquisition), `round`
//! (acquisition rounds), `fence` (fencing tokens), and for the guard, `shared` (state shared
//! with the renewal task), `renewal` (that task) and `guard` (`RedLockGuard`).

mod fence;
mod guard;
mod renewal;
mod round;
mod settings;
mod shared;

use std::sync::Arc;
use std::time::Duration;

#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::lock::Lock;
use crate::options::LockOptions;
use crate::owner::Owner;

use settings::{DEFAULT_DRIFT_FACTOR, DEFAULT_RETRY_DELAY, check_nodes};

pub use guard::RedLockGuard;

/// One lock over `N` independent Redis masters (the Redlock algorithm): held while a majority of
/// them grant it.
///
/// Build it from one [`Lock`] per master — the same name on a [`Client`](crate::Client) of each
/// server. It tolerates the failure of a minority of masters: with 5, any 2 may be down, slow or
/// restarted without the lock being lost or handed out twice (within the assumptions below).
///
/// ```no_run
/// # async fn demo(urls: &[&str]) -> redlease::Result<()> {
/// use redlease::{Client, RedLock};
///
/// let mut locks = Vec::new();
/// for url in urls {
///     locks.push(Client::connect(url).await?.lock("nightly-report")?);
/// }
/// let redlock = RedLock::new(locks)?;
/// let guard = redlock.lock().await?; // renewed on every master while `guard` lives
/// tokio::select! {
///     _ = async { /* the job */ } => guard.unlock().await?,
///     _ = guard.lost() => eprintln!("lost the quorum; stop writing"),
/// }
/// # Ok(()) }
/// ```
///
/// # How it acquires
/// Each round sends the acquire to every master at once, each with its own time limit
/// ([`node_timeout`](RedLock::node_timeout)), so a master that is down or frozen costs at most
/// that limit, and a round costs one round trip to the slowest live master whatever `N` is
/// (Redisson's `RedissonRedLock` goes master after master). The round succeeds when at least
/// `N/2 + 1` masters granted the lock **and** the validity `lease − elapsed − drift` is still
/// positive, where `elapsed` is the round's duration and `drift = lease × drift_factor + 2 ms`.
/// Otherwise the lock is given back on every master that granted it — and on every master that
/// did not answer in time, since the request may still be applied there — and the next round
/// starts after a random delay of up to [`retry_delay`](RedLock::retry_delay).
///
/// A round in which so many masters fail or time out that no majority is possible is retried
/// too (node timeouts are short, so one such round may be a hiccup), but a waiting acquisition
/// gives up with [`Error::Quorum`] when its wait ends on such a round, or when no majority has
/// answered for a whole lease. `Ok(None)` therefore always means "held elsewhere", and the
/// error tells how many masters granted, refused and failed.
///
/// # Renewal
/// Acquisitions without a [`lease`](LockOptions::lease) ([`lock`](RedLock::lock),
/// [`try_lock`](RedLock::try_lock), and `lock_with` / `try_lock_with` with a wait only) keep
/// the lock with a renewal task of the guard (not
/// the clients' watchdogs): every third of the lease it extends the lease on every master at
/// once, and takes the lock again on masters that lost it or never granted it (a restarted
/// master, say) when they are free. Each master gets `max(node timeout, min(lease / 10, 1 s))`
/// to answer. A renewal counts when a majority of masters confirm it; the guard's validity then
/// becomes `start of the round + lease − drift`, and a round short of a majority is retried
/// after a sixth of the lease. The guard is **lost** — [`RedLockGuard::lost`] resolves — as soon
/// as fewer than a majority of masters still hold it, or when its validity runs out without a
/// majority confirming a renewal.
///
/// # What Redlock does and does not guarantee
/// Redlock is a lease, and its safety rests on assumptions; know them before relying on it:
/// - **Clocks.** Every master expires keys by its own clock, and the validity assumes all of
///   them run at about the same rate as ours (the drift allowance covers 1 % by default). A
///   master whose clock jumps forward (an operator, NTP stepping) expires the key early; if that
///   happens on enough masters, two owners can each hold a majority.
/// - **Persistence.** A master restarted without persistence has forgotten the lock; with too
///   few remaining holders another owner can take a majority. Run the masters with
///   `appendonly yes` and `appendfsync always`, or keep a restarted master out of service for
///   longer than the lease (Redis's "delayed restarts"). Renewal re-takes the lock on a
///   restarted master, which narrows but does not close that window.
/// - **Pauses.** No lease protects a resource from a holder that stops (GC, swap, SIGSTOP, a
///   long `await`) past its validity and then goes on writing. Check
///   [`RedLockGuard::validity`] before each write, race the work against
///   [`RedLockGuard::lost`], and for writes that must never interleave let the resource reject
///   stale writers with a **fencing token** (next point).
/// - **Fencing.** Over [fenced](Lock::fenced) locks the guard's
///   [`fencing_token`](RedLockGuard::fencing_token) is the largest counter among the masters
///   that granted the lock, and that counter is then raised to it on every granting master
///   (a majority must confirm). Because any two majorities share a master, tokens of
///   successive holders increase while the counters live (the lease plus
///   [`Config::fence_grace`](crate::Config::fence_grace) after the last hold). Past that, each
///   master's next token follows its clock (see [`Lock::fenced`]), so tokens keep increasing as
///   long as the masters' clocks agree to within that time: a master whose clock runs ahead
///   raises the tokens, and the others catch up only once their clocks pass its last token. A
///   master that lost its counter (restarted without its data) starts again from its clock.
/// - **Replication** is not part of the algorithm: use independent masters, not a primary and
///   its replicas (a failover can drop a fresh lock).
///
/// # Owners and reentrancy
/// Every master's lock acts for the same owner: by default the current task (pinned when the
/// acquisition starts), or [`RedLock::with_owner`]. Each master's [`Client`](crate::Client) has
/// its own id, so the hash field differs per master; that is expected. The same owner taking
/// the same `RedLock` again re-enters it on every master that grants it.
#[derive(Clone)]
pub struct RedLock {
    nodes: Arc<[Lock]>,
    name: Arc<str>,
    node_timeout: Option<Duration>,
    drift_factor: f64,
    retry_delay: Duration,
    watchdog_lease: Option<Duration>,
}

impl RedLock {
    /// A RedLock over `locks`, one per independent master, all with the same name.
    ///
    /// Logs a warning for fewer than 3 masters (no failure is tolerated) or an even number
    /// (one more master than the odd number below it, but no more failures tolerated).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `locks` is empty, when the names differ, when two locks
    /// share a client or a server (same `host:port`: one process is one failure domain, so it
    /// must not vote twice, whatever the database or key prefix), or when some locks are
    /// [fenced](Lock::fenced) and others not. Servers are compared by the `host:port` of their
    /// URL, so one server reached under two names (`localhost` and `127.0.0.1`) is not caught.
    pub fn new(locks: Vec<Lock>) -> Result<RedLock> {
        let name = check_nodes(&locks)?;
        Ok(RedLock {
            nodes: locks.into(),
            name,
            node_timeout: None,
            drift_factor: DEFAULT_DRIFT_FACTOR,
            retry_delay: DEFAULT_RETRY_DELAY,
            watchdog_lease: None,
        })
    }

    /// Acquire on every node on behalf of `owner` instead of the current task.
    #[must_use]
    pub fn with_owner(mut self, owner: Owner) -> Self {
        self.nodes = self
            .nodes
            .iter()
            .map(|lock| lock.clone().with_owner(owner))
            .collect();
        self
    }

    /// How long each node may take to answer one acquire (and, at least, one renewal). Must be
    /// well below the lease. Defaults to `lease / 200`, clamped to 20–50 ms, and never more
    /// than a third of the lease.
    #[must_use]
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = Some(timeout);
        self
    }

    /// Clock drift allowance as a fraction of the lease; 2 ms are added on top. Must lie in
    /// `0.0..0.5`. Defaults to 0.01.
    #[must_use]
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = factor;
        self
    }

    /// Longest random delay between two rounds of a waiting acquisition. Defaults to 50 ms.
    #[must_use]
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// The lease of renewed acquisitions. Defaults to the shortest watchdog lease among the
    /// nodes' locks ([`Lock::watchdog_lease`], else their client's
    /// [`Config::watchdog_lease`](crate::Config::watchdog_lease)).
    #[must_use]
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.watchdog_lease = Some(lease);
        self
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The locks, one per node, in the order given to [`RedLock::new`].
    pub fn nodes(&self) -> &[Lock] {
        &self.nodes
    }

    /// How many nodes must grant the lock: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    crate::options::ways_to_ask!(
        RedLockGuard,
        name,
        [lock, lock_with, try_lock, try_lock_with]
        /// Waits until a majority of nodes grant the lock, then renews it while the guard lives.
        /// The same as `lock_with(LockOptions::new())`.
        ///
        /// # Errors
        /// [`Error::Quorum`] when so many nodes fail or time out that no majority is possible, for
        /// a whole lease in a row (shorter outages are waited out like contention); the error counts
        /// how the nodes answered in the last round.
        /// [`Error::WouldDeadlock`] for non-reentrant locks already held by this owner;
        /// [`Error::InvalidArgument`] or [`Error::InvalidDuration`] for bad settings. Whatever the
        /// failed round took is given back first.
        ///
        /// # Cancel safety
        /// Cancel-safe: dropping the future leaves no node held and no renewal running; grants
        /// that arrive after the drop are given back in the background.
    );

    /// Rounds until a majority grants the lock as `options` say: waits at most `wait`, and
    /// holds it for `lease` without renewal (the guard is lost when its validity runs out); by
    /// default the guard renews it. `None` when the wait is spent with the lock held elsewhere
    /// (or a single round was too slow to leave any validity). A zero wait makes one round.
    ///
    /// # Errors
    /// As [`RedLock::lock`]; [`Error::Quorum`] when the wait ends on a round in which too many
    /// nodes failed or timed out to form a majority (a single round included).
    /// [`Error::InvalidArgument`] for permits other than one.
    ///
    /// # Cancel safety
    /// As [`RedLock::lock`].
    pub async fn try_lock_with(&self, options: LockOptions) -> Result<Option<RedLockGuard>> {
        let (lease, wait) = options.lease_and_wait()?;
        self.acquire(lease, wait).await
    }
}

impl std::fmt::Debug for RedLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedLock")
            .field("name", &self.name)
            .field("nodes", &self.nodes.len())
            .field("node_timeout", &self.node_timeout)
            .field("drift_factor", &self.drift_factor)
            .finish_non_exhaustive()
    }
}
