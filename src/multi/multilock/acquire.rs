//! MultiLock acquisition rounds: one acquire per member, all at once (one round trip per
//! client); a lost round gives back what it took, then waits for an unlock of a blocker.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{join_all, select_all};

use crate::acquire::nap_for;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::lock::Lock;
use crate::multi::member::{Outcome, attempt_batch, give_back, jitter};
use crate::pubsub::Subscription;
use crate::shared::Client;
use crate::terms::Lease;
use crate::terms::Wait;

use super::{MultiLock, MultiLockGuard};

/// Upper bound of the random pause after a lost round, so contenders woken by the same unlock
/// do not collide again in lockstep.
const MAX_JITTER: Duration = Duration::from_millis(50);

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
            let lease = match fixed {
                Some(lease) => Lease::fixed(lease)?,
                None => lock.watchdog()?,
            };
            members.push((lock.pinned(), lease));
        }
        let batches = by_client(&members);
        let mut waits: Vec<Option<Subscription>> = members.iter().map(|_| None).collect();
        let mut lost_rounds = 0u32;
        loop {
            let (held, blockers, error) = round(&members, &batches).await;
            if blockers.is_empty() && error.is_none() {
                return Ok(Some(MultiLockGuard::new(held)));
            }
            give_back(held, None).await;
            if let Some(e) = error {
                return Err(e);
            }
            let Some(left) = deadline.remaining() else {
                return Ok(None);
            };
            // Listen on every blocking member before sleeping, then try again at once: an
            // unlock may have come before we listened.
            if listen_to_new_blockers(&members, &blockers, &mut waits).await? {
                continue;
            }
            wait_for_unlock(&blockers, &waits, left).await;
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

/// One round over every member: what was granted, which members are held elsewhere, and the
/// first error.
async fn round(
    members: &[(Lock, Lease)],
    batches: &[Batch],
) -> (Vec<LockGuard>, Vec<Blocker>, Option<Error>) {
    let round = join_all(
        batches
            .iter()
            .map(|b| attempt_batch(&b.client, &b.members, None, true)),
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

/// Subscribes to the unlock channel of every blocker not listened to yet; whether there was
/// any.
async fn listen_to_new_blockers(
    members: &[(Lock, Lease)],
    blockers: &[Blocker],
    waits: &mut [Option<Subscription>],
) -> Result<bool> {
    let missing: Vec<usize> = blockers
        .iter()
        .map(|(i, _)| *i)
        .filter(|i| waits[*i].is_none())
        .collect();
    if missing.is_empty() {
        return Ok(false);
    }
    let subscribed = join_all(missing.iter().map(|&i| members[i].0.subscribe_to_unlocks())).await;
    for (i, sub) in missing.into_iter().zip(subscribed) {
        waits[i] = Some(sub?);
    }
    Ok(true)
}

/// Sleeps until an unlock message for a blocker arrives or the shortest blocker's TTL runs out
/// (a second for a blocker without one), but no longer than `left`.
async fn wait_for_unlock(
    blockers: &[Blocker],
    waits: &[Option<Subscription>],
    left: Option<Duration>,
) {
    let mut nap = blockers
        .iter()
        .map(|(_, ttl)| nap_for(*ttl))
        .min()
        .unwrap_or_else(|| nap_for(None));
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
