//! MultiLock acquisition: one round over every member at once (one round trip per client);
//! when a member is held elsewhere, the round gives back what it took and the MultiLock waits
//! for its members in turn, in their locks' server queues.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::lock::Lock;
use crate::multi::member::{Outcome, attempt_batch, give_back};
use crate::shared::Client;
use crate::terms::Lease;
use crate::terms::Wait;

use super::{MultiLock, MultiLockGuard};

/// A member held elsewhere: its position, and its holder's remaining TTL if it has one.
type Blocker = (usize, Option<Duration>);

impl MultiLock {
    /// `fixed`: a lease without renewal, else each member's watchdog lease.
    pub(super) async fn acquire(
        &self,
        fixed: Option<Duration>,
        deadline: Wait,
    ) -> Result<Option<MultiLockGuard>> {
        let mut members = Vec::with_capacity(self.members.len());
        for lock in self.members.iter() {
            // Before any member is sent: one client's batch would find it after the others'.
            lock.check_lock_delay()?;
            let lease = match fixed {
                Some(lease) => Lease::fixed(lease)?,
                None => lock.watchdog()?,
            };
            members.push((lock.pinned(), lease));
        }
        // Every member at once: one round trip per client when nobody holds any of them.
        let (held, blockers, error) = round(&members, &by_client(&members)).await;
        if blockers.is_empty() && error.is_none() {
            return Ok(Some(MultiLockGuard::new(held)));
        }
        give_back(held, None).await;
        if let Some(e) = error {
            return Err(e);
        }
        if deadline.remaining().is_none() {
            return Ok(None);
        }
        in_turn(&members, fixed, deadline).await
    }
}

/// Waits for each member in its lock's server queue like any waiter, one after another in one
/// global order (by key, then server), holding the members granted so far. A busy lock hands
/// over to the MultiLock in its turn, so ordinary traffic on a member cannot starve it; and two
/// MultiLocks over shared members take them in the same order, so neither can hold one while
/// waiting for another the other holds. Giving up (the wait ran out, an error) gives back what
/// was held; a member's wait is cancel-safe, and a dropped future drops the guards it held,
/// which release them.
///
/// Once all are held, each member taken early is checked before the guard is handed out (see
/// [`keep_early`]): one lost meanwhile (another owner may have taken it) gives everything back,
/// and the members are awaited again within the wait.
async fn in_turn(
    members: &[(Lock, Lease)],
    fixed: Option<Duration>,
    deadline: Wait,
) -> Result<Option<MultiLockGuard>> {
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by_cached_key(|&i| (members[i].0.keys.hash.clone(), members[i].0.keyspace()));
    // Each round ends with every member held or the wait spent (or an error).
    loop {
        let mut held: Vec<Option<LockGuard>> = members.iter().map(|_| None).collect();
        for &i in &order {
            let (lock, lease) = &members[i];
            match lock.acquire(*lease, deadline).await {
                Ok(Some(guard)) => held[i] = Some(guard),
                outcome => {
                    give_back(held.into_iter().flatten(), None).await;
                    return outcome.map(|_| None);
                }
            }
        }
        let held: Vec<LockGuard> = held.into_iter().flatten().collect();
        let last = order.last().copied();
        let earlier = order.iter().filter(|&&i| Some(i) != last);
        let kept = join_all(earlier.map(|&i| keep_early(&held[i], fixed))).await;
        match kept.into_iter().find_map(Result::err) {
            None => return Ok(Some(MultiLockGuard::new(held))),
            Some(e) => {
                give_back(held, None).await;
                if !e.is_lease_lost() {
                    return Err(e);
                }
                if deadline.remaining().is_none() {
                    return Ok(None);
                }
            }
        }
    }
}

/// Whether a member taken before the last one is still good to hand out: not lost meanwhile
/// (its key deleted or evicted: the loss notice marked it), and with a `fixed` lease, extended
/// to that lease from now, since its own kept running while the later members were awaited.
/// Not extended when the owner held it already in a way that needs none: under the watchdog,
/// which renews it, or valid at least that long (a longer lease of its own, which an
/// extension would shorten).
///
/// # Errors
/// [`Error::LeaseLost`] when it was lost; what [`LockGuard::extend`] answers.
async fn keep_early(guard: &LockGuard, fixed: Option<Duration>) -> Result<()> {
    let hold = guard.hold();
    if guard.is_lost() {
        return Err(Error::LeaseLost {
            name: hold.keys.name.to_string(),
        });
    }
    let Some(lease) = fixed else {
        return Ok(());
    };
    let watchdog = matches!(hold.lease(), Lease::Watchdog(_));
    if watchdog || hold.valid_until() >= Instant::now() + lease {
        return Ok(());
    }
    guard.extend(lease).await
}

/// One round over every member: what was granted, which members are held elsewhere, and the
/// first error.
async fn round(
    members: &[(Lock, Lease)],
    batches: &[Batch],
) -> (Vec<LockGuard>, Vec<Blocker>, Option<Error>) {
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
    (held, blockers, error)
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
