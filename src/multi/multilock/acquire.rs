//! MultiLock acquisition rounds in the wait loop (`wait.rs`): one acquire per member, all at
//! once (one round trip per client); a lost round gives back what it took, then waits for an
//! unlock of a blocker.

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
use crate::wait::{Attempt, Then, Waiter};

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
        let waits = members.iter().map(|_| None).collect();
        let mut rounds = Rounds {
            members,
            batches,
            waits,
            blockers: Vec::new(),
            lost_rounds: 0,
            deadline,
        };
        crate::wait::run(deadline, &mut rounds).await
    }
}

/// A MultiLock's acquisition in the wait loop: each attempt a round over every member; a lost
/// round gives back what it took and waits for an unlock of a member held elsewhere.
struct Rounds {
    members: Vec<(Lock, Lease)>,
    batches: Vec<Batch>,
    /// Per member, its unlock channel once it blocked a round.
    waits: Vec<Option<Subscription>>,
    /// The members held elsewhere in the latest round.
    blockers: Vec<Blocker>,
    lost_rounds: u32,
    deadline: Wait,
}

impl Waiter for Rounds {
    type Output = MultiLockGuard;

    async fn attempt(&mut self) -> Result<Attempt<MultiLockGuard>> {
        let (held, blockers, error) = round(&self.members, &self.batches).await;
        if blockers.is_empty() && error.is_none() {
            return Ok(Attempt::Done(MultiLockGuard::new(held)));
        }
        give_back(held, None).await;
        if let Some(e) = error {
            return Err(e);
        }
        // Until an unlock message for a blocker, or the shortest blocker's TTL runs out (a
        // second for a blocker without one).
        let nap = blockers.iter().map(|(_, ttl)| nap_for(*ttl)).min();
        self.blockers = blockers;
        Ok(Attempt::Again(nap))
    }

    /// Listens on every blocking member before sleeping, and tries again at once if any is
    /// new: an unlock may have come before we listened.
    async fn refused(&mut self) -> Result<Then> {
        let missing: Vec<usize> = self
            .blockers
            .iter()
            .map(|(i, _)| *i)
            .filter(|i| self.waits[*i].is_none())
            .collect();
        if missing.is_empty() {
            return Ok(Then::Nap);
        }
        let members = &self.members;
        let subscribed = join_all(missing.iter().map(|&i| members[i].0.subscribe_to_unlocks()));
        for (i, sub) in missing.into_iter().zip(subscribed.await) {
            self.waits[i] = Some(sub?);
        }
        Ok(Then::Attempt)
    }

    /// Sleeps until an unlock message for a blocker arrives or `nap` has passed, then a
    /// random pause, so contenders woken by the same unlock do not collide again in
    /// lockstep.
    async fn nap(&mut self, nap: Duration) -> Result<Option<MultiLockGuard>> {
        let listening: Vec<_> = self
            .blockers
            .iter()
            .filter_map(|(i, _)| self.waits[*i].as_ref())
            .map(|sub| Box::pin(sub.notified()))
            .collect();
        let woken = async move {
            // Every blocker was subscribed by `refused`; `select_all` panics on nothing.
            if listening.is_empty() {
                std::future::pending::<()>().await;
            }
            select_all(listening).await;
        };
        tokio::select! {
            _ = woken => {}
            _ = tokio::time::sleep(nap) => {}
        }
        self.lost_rounds = self.lost_rounds.saturating_add(1);
        let mut pause = jitter(
            Duration::ZERO,
            Duration::from_millis(1 << self.lost_rounds.min(6)).min(MAX_JITTER),
        );
        if let Some(left) = self.deadline.remaining().flatten() {
            pause = pause.min(left);
        }
        tokio::time::sleep(pause).await;
        Ok(None)
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
