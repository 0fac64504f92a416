//! `MultiLock`: several locks held as one, all or none.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::{join_all, select_all};

use crate::client::Client;
use crate::config::lease_ms;
use crate::error::{Error, Result};
use crate::hold::Lease;
use crate::lock::Lock;
use crate::pubsub::Subscription;

use super::member::{Deadline, Held, Outcome, attempt_batch, give_back, jitter, release_all};

/// Longest sleep between rounds when a blocking holder's key has no expiry and no unlock message
/// arrives.
const RECHECK_WITHOUT_TTL: Duration = Duration::from_secs(1);
/// Upper bound of the random pause after a lost round, so contenders woken by the same unlock
/// do not collide again in lockstep.
const MAX_JITTER: Duration = Duration::from_millis(50);

/// Several locks taken and released as one: either every member is held, or none is.
///
/// Use it when one operation needs several resources at once — moving stock between two
/// warehouses, say — and holding only some of them is useless. Members may belong to different
/// [`Client`](crate::Client)s and servers. Every member must be held; for a majority of
/// independent servers guarding *one* resource, use [`RedLock`](crate::RedLock).
///
/// ```no_run
/// # async fn demo(client: redlease::Client) -> redlease::Result<()> {
/// use redlease::MultiLock;
///
/// let both = MultiLock::new(vec![
///     client.lock("warehouse:north")?,
///     client.lock("warehouse:south")?,
/// ])?;
/// let guard = both.lock().await?; // both or neither; the watchdog keeps them
/// // ... move the stock ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
///
/// # How it acquires
/// Each round sends one acquire to every member at once, so a round costs one round trip
/// however many members there are (Redisson's `RedissonMultiLock` goes member after member).
/// When any member is held elsewhere, the members this round did take are released before
/// anything else happens, and the next round starts when an unlock message arrives on a blocking
/// member (or its holder's lease runs out), after a short random pause.
///
/// Concurrent rounds can split the members between contenders (A takes one member, B another),
/// and then all of them lose that round; waiting acquisitions retry with growing random pauses
/// until one of them wins. A single [`try_lock`](MultiLock::try_lock) does not retry, so racing
/// `try_lock`s on members of *different servers* can all return `None`. On one server the
/// requests of one round leave on one connection back to back, and in practice the first round
/// to arrive takes everything.
///
/// # Owners and reentrancy
/// Each member acts for its own owner (by default the current task, pinned when the acquisition
/// starts), exactly like a single [`Lock`]: the same owner taking the same `MultiLock` again
/// re-enters every member, and the guard remembers the owners it acquired for. Members sharing
/// a server and name are rejected by [`MultiLock::new`].
///
/// # Errors and waiting
/// As for a single lock, a Redis failure ends the wait with that error (after giving back what
/// the round took); only "held by another owner" is waited out.
#[derive(Clone)]
pub struct MultiLock {
    members: Arc<[Lock]>,
}

impl MultiLock {
    /// A lock over `locks`, all of which must be held.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `locks` is empty or names one lock twice (the same name
    /// on the same client, or on the same server and database with the same key prefix).
    pub fn new(locks: Vec<Lock>) -> Result<MultiLock> {
        if locks.is_empty() {
            return Err(Error::InvalidArgument(
                "a MultiLock needs at least one lock".into(),
            ));
        }
        let mut seen = HashSet::new();
        for lock in &locks {
            // One client always talks to one keyspace, so this also catches a lock given twice.
            if !seen.insert((lock.keyspace(), lock.keys.hash.clone())) {
                return Err(Error::InvalidArgument(format!(
                    "lock `{}` ({} on {}) appears twice in the MultiLock",
                    lock.name(),
                    lock.key(),
                    lock.keyspace()
                )));
            }
        }
        Ok(MultiLock {
            members: locks.into(),
        })
    }

    /// The member locks, in the order given to [`MultiLock::new`].
    pub fn locks(&self) -> &[Lock] {
        &self.members
    }

    /// Waits until every member is held, then keeps them with their clients' watchdogs while
    /// the guard lives (each member with its own watchdog lease).
    ///
    /// # Errors
    /// The first member error of the round that failed: [`Error::WouldDeadlock`] (a
    /// non-reentrant member already held by its owner), [`Error::WrongType`],
    /// [`Error::Timeout`], [`Error::Redis`], [`Error::Shutdown`]. Whatever that round had taken
    /// is given back first.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future leaves no member held and nothing renewed; grants that
    /// arrive after the drop are given back in the background.
    pub async fn lock(&self) -> Result<MultiLockGuard> {
        self.acquire(None, Deadline::Forever)
            .await?
            .ok_or(Error::Shutdown)
    }

    /// Waits until every member is held and holds them for `lease`, with no renewal.
    ///
    /// # Errors
    /// As [`MultiLock::lock`], plus [`Error::InvalidDuration`] for a zero or absurd lease.
    ///
    /// # Cancel safety
    /// As [`MultiLock::lock`].
    pub async fn lock_with_lease(&self, lease: Duration) -> Result<MultiLockGuard> {
        self.acquire(Some(lease), Deadline::Forever)
            .await?
            .ok_or(Error::Shutdown)
    }

    /// One round: the guard when every member could be taken, else `None` (and nothing held).
    ///
    /// # Errors
    /// As [`MultiLock::lock`].
    ///
    /// # Cancel safety
    /// As [`MultiLock::lock`].
    pub async fn try_lock(&self) -> Result<Option<MultiLockGuard>> {
        self.acquire(None, Deadline::Once).await
    }

    /// Waits at most `wait` for every member (watchdog leases); `None` when the wait ran out.
    ///
    /// # Errors
    /// As [`MultiLock::lock`], plus [`Error::InvalidDuration`] for a zero or absurd wait.
    ///
    /// # Cancel safety
    /// As [`MultiLock::lock`].
    pub async fn try_lock_for(&self, wait: Duration) -> Result<Option<MultiLockGuard>> {
        self.acquire(None, Deadline::after(wait)?).await
    }

    /// Waits at most `wait` for every member and holds them for `lease` without renewal.
    ///
    /// # Errors
    /// As [`MultiLock::try_lock_for`], plus [`Error::InvalidDuration`] for a bad lease.
    ///
    /// # Cancel safety
    /// As [`MultiLock::lock`].
    pub async fn try_lock_for_with_lease(
        &self,
        wait: Duration,
        lease: Duration,
    ) -> Result<Option<MultiLockGuard>> {
        self.acquire(Some(lease), Deadline::after(wait)?).await
    }

    /// `fixed`: a lease without renewal, else each member's watchdog lease.
    async fn acquire(
        &self,
        fixed: Option<Duration>,
        deadline: Deadline,
    ) -> Result<Option<MultiLockGuard>> {
        let mut members = Vec::with_capacity(self.members.len());
        for lock in self.members.iter() {
            let lease = match fixed {
                Some(lease) => {
                    lease_ms("lease", lease)?;
                    Lease::Fixed(lease)
                }
                None => lock.watchdog()?,
            };
            members.push((lock.pinned(), lease));
        }
        let batches = by_client(&members);
        let mut waits: Vec<Option<Subscription>> = members.iter().map(|_| None).collect();
        let mut lost_rounds = 0u32;
        loop {
            let round = join_all(
                batches
                    .iter()
                    .map(|b| attempt_batch(&b.client, &b.members, None)),
            )
            .await;
            let mut outcomes: Vec<Option<Outcome>> = members.iter().map(|_| None).collect();
            for (batch, replies) in batches.iter().zip(round) {
                for (&i, outcome) in batch.positions.iter().zip(replies) {
                    outcomes[i] = Some(outcome);
                }
            }
            let mut held = Vec::with_capacity(members.len());
            let mut blockers = Vec::new();
            let mut error = None;
            for (i, outcome) in outcomes.into_iter().enumerate() {
                // Every position belongs to exactly one batch.
                let Some(outcome) = outcome else { continue };
                match outcome {
                    Outcome::Granted(h) => held.push(h),
                    Outcome::HeldElsewhere { ttl } => blockers.push((i, ttl)),
                    Outcome::Failed(e) => {
                        error.get_or_insert(e);
                    }
                    // Not produced without a limit; the client's own timeout reports a failure.
                    Outcome::TimedOut => {
                        error.get_or_insert(Error::Timeout {
                            operation: "acquire",
                            timeout: members[i].0.client.inner.config.timeout,
                        });
                    }
                }
            }
            if blockers.is_empty() && error.is_none() {
                return Ok(Some(MultiLockGuard { members: held }));
            }
            give_back(held).await;
            if let Some(e) = error {
                return Err(e);
            }
            let Some(left) = deadline.remaining() else {
                return Ok(None);
            };
            // Listen on every blocking member before sleeping, then try again at once: an
            // unlock may have come before we listened.
            let missing: Vec<usize> = blockers
                .iter()
                .map(|(i, _)| *i)
                .filter(|i| waits[*i].is_none())
                .collect();
            if !missing.is_empty() {
                let subscribed = join_all(missing.iter().map(|&i| {
                    let lock = &members[i].0;
                    lock.client.inner.subscriber.subscribe(&lock.keys.channel)
                }))
                .await;
                for (i, sub) in missing.into_iter().zip(subscribed) {
                    waits[i] = Some(sub?);
                }
                continue;
            }
            let mut nap = blockers
                .iter()
                .map(|(_, ttl)| ttl.map_or(RECHECK_WITHOUT_TTL, |t| t + Duration::from_millis(1)))
                .min()
                .unwrap_or(RECHECK_WITHOUT_TTL);
            if let Some(left) = left {
                nap = nap.min(left);
            }
            let listening: Vec<_> = blockers
                .iter()
                .filter_map(|(i, _)| waits[*i].as_ref())
                .map(|sub| Box::pin(sub.notified()))
                .collect();
            let woken = async move {
                // Every blocker was subscribed above; `select_all` panics on nothing.
                if listening.is_empty() {
                    std::future::pending::<()>().await;
                }
                select_all(listening).await;
            };
            tokio::select! {
                _ = woken => {}
                _ = tokio::time::sleep(nap) => {}
            }
            lost_rounds = lost_rounds.saturating_add(1);
            let mut pause = jitter(
                Duration::ZERO,
                Duration::from_millis(1 << lost_rounds.min(6)).min(MAX_JITTER),
            );
            if let Some(left) = deadline.remaining().flatten() {
                pause = pause.min(left);
            }
            tokio::time::sleep(pause).await;
        }
    }
}

/// The members of one client: acquired in one round trip.
struct Batch {
    client: Client,
    members: Vec<(Lock, Lease)>,
    /// Where each member sits in the MultiLock.
    positions: Vec<usize>,
}

/// The members grouped by client, in order of first appearance.
fn by_client(members: &[(Lock, Lease)]) -> Vec<Batch> {
    let mut batches: Vec<Batch> = Vec::new();
    for (i, member) in members.iter().enumerate() {
        let client = &member.0.client;
        match batches
            .iter_mut()
            .find(|b| Arc::ptr_eq(&b.client.inner, &client.inner))
        {
            Some(batch) => {
                batch.members.push(member.clone());
                batch.positions.push(i);
            }
            None => batches.push(Batch {
                client: client.clone(),
                members: vec![member.clone()],
                positions: vec![i],
            }),
        }
    }
    batches
}

impl std::fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiLock")
            .field("members", &self.members)
            .finish()
    }
}

/// Every member of a [`MultiLock`], held together. Release with
/// [`unlock`](MultiLockGuard::unlock) (errors visible) or by dropping it (background release).
///
/// The guard keeps each member's owner, so it may be moved to and unlocked from any task.
///
/// # Drop
/// As for [`LockGuard`](crate::LockGuard), per member: renewals stop at once and the releases
/// are spawned on the current runtime.
#[must_use = "if unused the locks are released immediately"]
pub struct MultiLockGuard {
    members: Vec<Held>,
}

impl MultiLockGuard {
    /// The member names, in member order.
    pub fn names(&self) -> Vec<&str> {
        self.members.iter().map(|h| &*h.hold.keys.name).collect()
    }

    /// The fencing token of each member (see [`Lock::fenced`]), in member order.
    pub fn fencing_tokens(&self) -> Vec<Option<u64>> {
        self.members.iter().map(|h| h.hold.token).collect()
    }

    /// Whether any member's lease is known to be lost; then the set is no longer held as a
    /// whole.
    pub fn is_lost(&self) -> bool {
        self.members.iter().any(|h| h.hold.is_lost())
    }

    /// Resolves when any member's lease is lost (see [`LockGuard::lost`](crate::LockGuard::lost)).
    /// It does not borrow the guard.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let each: Vec<_> = self
            .members
            .iter()
            .map(|h| Box::pin(h.hold.lost()))
            .collect();
        async move {
            // Never empty: `MultiLock::new` rejects an empty list.
            if !each.is_empty() {
                select_all(each).await;
            }
        }
    }

    /// The earliest instant until which every member is known valid.
    pub fn valid_until(&self) -> Instant {
        self.members
            .iter()
            .map(|h| h.hold.valid_until())
            .min()
            .unwrap_or_else(Instant::now)
    }

    /// Releases every member concurrently. Every member is released whatever happens to the
    /// others; use [`unlock_each`](MultiLockGuard::unlock_each) to see every result.
    ///
    /// # Errors
    /// The first failure in member order: [`Error::LeaseLost`] when that member's lease was lost
    /// while held, else as [`LockGuard::unlock`](crate::LockGuard::unlock).
    ///
    /// # Cancel safety
    /// Dropping the future still completes every release in the background.
    pub async fn unlock(self) -> Result<()> {
        self.unlock_each().await.into_iter().collect()
    }

    /// Releases every member concurrently and returns one result per member, in member order.
    ///
    /// # Cancel safety
    /// As [`MultiLockGuard::unlock`].
    pub async fn unlock_each(mut self) -> Vec<Result<()>> {
        let members = std::mem::take(&mut self.members);
        let names: Vec<Arc<str>> = members.iter().map(|h| h.hold.keys.name.clone()).collect();
        let results = release_all(members).await;
        for (name, result) in names.iter().zip(&results) {
            if let Err(e) = result {
                tracing::debug!(lock = %name, error = %e, "MultiLock member release failed");
            }
        }
        results
    }
}

impl std::fmt::Debug for MultiLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiLockGuard")
            .field("members", &self.names())
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}
