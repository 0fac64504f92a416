//! `RedLock`: one lock over several independent Redis masters, held by a majority.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use crate::config::{check_duration, lease_ms};
use crate::error::{Error, Result};
use crate::hold::Lease;
use crate::lock::Lock;
use crate::owner::Owner;

use super::member::{Deadline, Held, Outcome, give_back, jitter};
use super::redlock_guard::{RedLockGuard, Shared};

/// Raises a node's fencing counter to the token a RedLock hands out; see the file's header.
const RAISE_FENCE: &str = include_str!("raise_fence.lua");

/// Default [`RedLock::drift_factor`].
const DEFAULT_DRIFT_FACTOR: f64 = 0.01;
/// Default [`RedLock::retry_delay`].
const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(50);

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
/// [`lock`](RedLock::lock), [`try_lock`](RedLock::try_lock) and
/// [`try_lock_for`](RedLock::try_lock_for) keep the lock with a renewal task of the guard (not
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
///   successive holders increase — as long as no master's counter goes back, which again needs
///   persistence: a master restarted without its data starts counting from zero.
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
        let Some(first) = locks.first() else {
            return Err(Error::InvalidArgument(
                "a RedLock needs at least one node".into(),
            ));
        };
        let name: Arc<str> = first.keys.name.clone();
        let mut clients = HashSet::new();
        let mut servers = HashSet::new();
        for (i, lock) in locks.iter().enumerate() {
            if lock.keys.name != name {
                return Err(Error::InvalidArgument(format!(
                    "every RedLock node must lock the same name: node 0 locks `{name}`, node {i} `{}`",
                    lock.keys.name
                )));
            }
            if !clients.insert(lock.client.inner.id) {
                return Err(Error::InvalidArgument(format!(
                    "RedLock node {i} uses the same client ({}) as an earlier node; give each master its own client",
                    lock.client.inner.id
                )));
            }
            let server = lock.server_addr();
            if !servers.insert(server.clone()) {
                return Err(Error::InvalidArgument(format!(
                    "RedLock node {i} is on server {server} like an earlier node; each node must be an independent master"
                )));
            }
            if lock.fenced != first.fenced {
                return Err(Error::InvalidArgument(format!(
                    "RedLock node {i} is {}fenced but node 0 is {}fenced; fence all nodes or none",
                    if lock.fenced { "" } else { "not " },
                    if first.fenced { "" } else { "not " },
                )));
            }
        }
        let n = locks.len();
        if n < 3 {
            tracing::warn!(lock = %name, nodes = n, "RedLock over fewer than 3 nodes tolerates no node failure");
        } else if n % 2 == 0 {
            tracing::warn!(lock = %name, nodes = n, "RedLock over an even number of nodes tolerates no more failures than one node fewer");
        }
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

    /// Waits until a majority of nodes grant the lock, then renews it while the guard lives.
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
    pub async fn lock(&self) -> Result<RedLockGuard> {
        self.acquire(None, Deadline::Forever)
            .await?
            .ok_or(Error::Shutdown)
    }

    /// Waits until a majority of nodes grant the lock and holds it for `lease`, without
    /// renewal; the guard is lost when its validity runs out.
    ///
    /// # Errors
    /// As [`RedLock::lock`].
    ///
    /// # Cancel safety
    /// As [`RedLock::lock`].
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<RedLockGuard> {
        self.acquire(Some(lease), Deadline::Forever)
            .await?
            .ok_or(Error::Shutdown)
    }

    /// One round: the guard when a majority granted the lock in time, `None` when it is held
    /// elsewhere (or the round was too slow to leave any validity).
    ///
    /// # Errors
    /// [`Error::Quorum`] when so many nodes failed or timed out in the round that no majority
    /// was possible; otherwise as [`RedLock::lock`].
    ///
    /// # Cancel safety
    /// As [`RedLock::lock`].
    pub async fn try_lock(&self) -> Result<Option<RedLockGuard>> {
        self.acquire(None, Deadline::Once).await
    }

    /// Rounds until a majority grants the lock (renewed) or `wait` is spent (`None`).
    ///
    /// # Errors
    /// [`Error::Quorum`] when the wait ends on a round in which too many nodes failed or timed
    /// out to form a majority (rather than `None`, which means the lock is held elsewhere), or
    /// as [`RedLock::lock`]; plus [`Error::InvalidDuration`] for a zero or absurd wait.
    ///
    /// # Cancel safety
    /// As [`RedLock::lock`].
    pub async fn try_lock_for(&self, wait: Duration) -> Result<Option<RedLockGuard>> {
        self.acquire(None, Deadline::after(wait)?).await
    }

    /// Rounds until a majority grants the lock for `lease` (no renewal) or `wait` is spent.
    ///
    /// # Errors
    /// As [`RedLock::try_lock_for`].
    ///
    /// # Cancel safety
    /// As [`RedLock::lock`].
    pub async fn try_lock_for_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<RedLockGuard>> {
        self.acquire(Some(lease), Deadline::after(wait)?).await
    }

    fn settings(&self, fixed: Option<Duration>) -> Result<Settings> {
        let (lease, renewed) = match fixed {
            Some(lease) => (lease, false),
            None => (self.default_watchdog_lease()?, true),
        };
        lease_ms("lease", lease)?;
        let node_timeout = match self.node_timeout {
            Some(t) => {
                check_duration("node timeout", t)?;
                if t >= lease {
                    return Err(Error::InvalidArgument(format!(
                        "the RedLock node timeout ({t:?}) must be well below the lease ({lease:?})"
                    )));
                }
                t
            }
            None => default_node_timeout(lease),
        };
        if !(0.0..0.5).contains(&self.drift_factor) {
            return Err(Error::InvalidArgument(format!(
                "drift factor {} is outside 0.0..0.5",
                self.drift_factor
            )));
        }
        check_duration("retry delay", self.retry_delay)?;
        Ok(Settings {
            lease,
            renewed,
            node_timeout,
            settle_timeout: node_timeout.max((lease / 10).min(Duration::from_secs(1))),
            drift: lease.mul_f64(self.drift_factor) + Duration::from_millis(2),
            quorum: self.quorum(),
        })
    }

    fn default_watchdog_lease(&self) -> Result<Duration> {
        if let Some(lease) = self.watchdog_lease {
            return Ok(lease);
        }
        let mut shortest = None;
        for lock in self.nodes.iter() {
            let lease = lock.watchdog()?.duration();
            shortest = Some(shortest.map_or(lease, |s: Duration| s.min(lease)));
        }
        // `new` rejects an empty node list.
        shortest.ok_or_else(|| Error::InvalidArgument("a RedLock needs at least one node".into()))
    }

    async fn acquire(
        &self,
        fixed: Option<Duration>,
        deadline: Deadline,
    ) -> Result<Option<RedLockGuard>> {
        let settings = self.settings(fixed)?;
        let nodes: Vec<Lock> = self.nodes.iter().map(Lock::pinned).collect();
        let n = nodes.len();
        let fenced = nodes.iter().any(|l| l.fenced);
        let lease = Lease::Fixed(settings.lease);
        // Since when no round has found enough nodes answering to form a majority.
        let mut unreachable_since: Option<Instant> = None;
        loop {
            let started = Instant::now();
            let round = join_all(
                nodes
                    .iter()
                    .map(|lock| lock.attempt_member(lease, Some(settings.node_timeout))),
            )
            .await;
            let mut slots: Vec<Option<Held>> = Vec::with_capacity(n);
            let (mut acquired, mut held_elsewhere, mut failed) = (0, 0, 0);
            let mut fatal = None;
            for (i, outcome) in round.into_iter().enumerate() {
                let mut slot = None;
                match outcome {
                    Outcome::Granted(held) => {
                        acquired += 1;
                        slot = Some(held);
                    }
                    Outcome::HeldElsewhere { .. } => held_elsewhere += 1,
                    Outcome::TimedOut => {
                        failed += 1;
                        tracing::debug!(lock = %self.name, node = i, "RedLock node did not answer in time");
                    }
                    Outcome::Failed(e) => {
                        failed += 1;
                        tracing::debug!(lock = %self.name, node = i, error = %e, "RedLock node failed");
                        if matches!(e, Error::WouldDeadlock { .. }) {
                            fatal.get_or_insert(e);
                        }
                    }
                }
                slots.push(slot);
            }
            if let Some(e) = fatal {
                give_back_within(settings.settle_timeout, slots).await;
                return Err(e);
            }
            let mut granted = acquired >= settings.quorum;
            let mut token = None;
            if granted && fenced {
                token = raise_fence(&slots, settings.quorum, settings.node_timeout).await;
                granted = token.is_some();
            }
            let valid_until = started
                .checked_add(settings.lease.saturating_sub(settings.drift))
                .unwrap_or(started);
            if granted && Instant::now() < valid_until {
                let shared = Shared::new(
                    self.name.clone(),
                    nodes,
                    &settings,
                    token,
                    slots,
                    valid_until,
                );
                return Ok(Some(RedLockGuard::start(shared, settings.renewed)));
            }
            give_back_within(settings.settle_timeout, slots).await;
            if granted {
                tracing::debug!(lock = %self.name, elapsed = ?started.elapsed(), "RedLock round took the lock too slowly to leave any validity");
            }
            let quorum_error = || Error::Quorum {
                name: self.name.to_string(),
                nodes: n,
                needed: settings.quorum,
                acquired,
                held_elsewhere,
                failed,
            };
            // Too few answers to form a majority is a failure, not contention. Node timeouts are
            // short, so one such round may be a hiccup: waiting acquisitions go on, and give up
            // when their wait ends on such a round or when it has lasted a whole lease.
            let unreachable = n - failed < settings.quorum;
            if unreachable {
                let since = *unreachable_since.get_or_insert(started);
                if since.elapsed() >= settings.lease {
                    return Err(quorum_error());
                }
            } else {
                unreachable_since = None;
            }
            let Some(left) = deadline.remaining() else {
                return if unreachable {
                    Err(quorum_error())
                } else {
                    Ok(None)
                };
            };
            let mut pause = jitter(Duration::ZERO, self.retry_delay);
            if let Some(left) = left {
                pause = pause.min(left);
            }
            tokio::time::sleep(pause).await;
        }
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

/// The numbers one acquisition works with.
pub(crate) struct Settings {
    pub lease: Duration,
    /// Whether the guard renews (watchdog mode) or just expires (fixed lease).
    pub renewed: bool,
    pub node_timeout: Duration,
    /// How long a renewal or a release may wait for one node: longer than an acquire may
    /// (nobody is racing), still short of the lease.
    pub settle_timeout: Duration,
    pub drift: Duration,
    pub quorum: usize,
}

/// Gives back a failed round's grants, waiting at most `limit`: a node that stops answering
/// now must not hold up the caller. Releases still running then finish in the background.
async fn give_back_within(limit: Duration, slots: Vec<Option<Held>>) {
    let members: Vec<Held> = slots.into_iter().flatten().collect();
    if tokio::time::timeout(limit, give_back(members))
        .await
        .is_err()
    {
        tracing::debug!(
            "RedLock give-back still running after {limit:?}; finishing in the background"
        );
    }
}

/// `lease / 200` within 20–50 ms: far below the lease (Redis suggests 5–50 ms for a 10 s
/// lease) yet above loopback and LAN round trips under load. Never above a third of the lease.
fn default_node_timeout(lease: Duration) -> Duration {
    (lease / 200)
        .clamp(Duration::from_millis(20), Duration::from_millis(50))
        .min(lease / 3)
        .max(Duration::from_millis(1))
}

/// The largest fencing counter among the granting nodes, once a majority of nodes have been
/// raised to it; `None` when too few confirmed.
async fn raise_fence(slots: &[Option<Held>], quorum: usize, limit: Duration) -> Option<u64> {
    let token = slots.iter().flatten().filter_map(|h| h.hold.token).max()?;
    let raised = join_all(slots.iter().flatten().map(|held| async move {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(RAISE_FENCE)
            .arg(1)
            .arg(&held.hold.keys.fence)
            .arg(token);
        let reply = tokio::time::timeout(limit, held.client.inner.node.query::<u64>(&cmd)).await;
        matches!(reply, Ok(Ok(counter)) if counter >= token)
    }))
    .await;
    let confirmed = raised.into_iter().filter(|ok| *ok).count();
    (confirmed >= quorum).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_timeout_scales_with_the_lease() {
        let ms = Duration::from_millis;
        assert_eq!(default_node_timeout(Duration::from_secs(30)), ms(50));
        assert_eq!(default_node_timeout(Duration::from_secs(10)), ms(50));
        assert_eq!(default_node_timeout(Duration::from_secs(6)), ms(30));
        assert_eq!(default_node_timeout(Duration::from_secs(1)), ms(20));
        assert_eq!(default_node_timeout(ms(30)), ms(10));
        assert_eq!(default_node_timeout(ms(1)), ms(1));
    }
}
