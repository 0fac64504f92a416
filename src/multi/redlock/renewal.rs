//! The renewal task of a `RedLockGuard`: every third of the lease, extend the lease on every
//! node at once and take the lock again on nodes that lost it; lost when a majority no longer
//! holds it or the validity runs out.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use crate::guard::LockGuard;
use crate::hold::Hold;
use crate::multi::member::{Outcome, attempt_one};
use crate::shared::Client;
use crate::terms::Lease;

use super::shared::Shared;

/// One node's client and our hold there, if the lock is held on it.
type Held = Option<(Client, Arc<Hold>)>;

/// What a renewal round came to.
enum Round {
    Renewed,
    /// Fewer than a quorum confirmed, but the validity has not run out: try again sooner.
    Short,
    /// Lost, or the guard was released.
    Stop,
}

/// One node's part of a renewal round.
enum Step {
    /// Renewed for the lease in ms it was sent with.
    Renewed(Arc<Hold>, u64),
    /// The node answered that our hold is gone.
    Gone,
    /// Taken again on a node that did not hold it.
    Retaken(LockGuard),
    /// No answer, an error, or (for a node we did not hold) held elsewhere.
    Failed,
}

impl Shared {
    /// One renewal round over every node at once.
    async fn renew_round(&self) -> Round {
        let started = Instant::now();
        let Some(plan) = self.held_now() else {
            return Round::Stop;
        };
        let steps = join_all(
            plan.into_iter()
                .enumerate()
                .map(|(i, held)| self.renew_node(i, held)),
        )
        .await;
        // Members leave the state under the lock but are dropped after it: dropping a guard
        // spawns its release.
        let mut leaving = Vec::new();
        let tally = self.apply_steps(steps, started, &mut leaving);
        drop(leaving);
        match tally {
            Some((renewed, held, expired)) => self.judge_round(renewed, held, expired),
            None => Round::Stop,
        }
    }

    /// Per node, its client and hold where the lock is held there; `None` once unlocked.
    fn held_now(&self) -> Option<Vec<Held>> {
        let state = self.state.lock();
        if state.closed {
            return None;
        }
        let held = state.slots.iter().map(|slot| {
            slot.as_ref()
                .map(|h| (h.client().clone(), h.hold().clone()))
        });
        Some(held.collect())
    }

    /// Applies each node's step to the state, extending the validity when a quorum renewed in
    /// time; members that leave go into `leaving`, to be dropped after the state's lock. Gives
    /// the nodes renewed, the nodes still held, and whether the validity had run out; `None`
    /// once unlocked.
    fn apply_steps(
        &self,
        steps: Vec<Step>,
        started: Instant,
        leaving: &mut Vec<LockGuard>,
    ) -> Option<(usize, usize, bool)> {
        let mut state = self.state.lock();
        if state.closed {
            // Unlocked meanwhile: whatever was taken again goes back.
            leaving.extend(steps.into_iter().filter_map(|step| match step {
                Step::Retaken(held) => Some(held),
                _ => None,
            }));
            return None;
        }
        // Judged before this round's answers can move it.
        let expired = self.validity.ran_out();
        let mut renewed = 0;
        for (i, step) in steps.into_iter().enumerate() {
            match step {
                Step::Renewed(hold, lease_ms) => {
                    hold.renewed(started, lease_ms);
                    renewed += 1;
                }
                Step::Gone => {
                    if let Some(held) = state.slots[i].take() {
                        held.client().inner.holds.detach(held.hold());
                        let why = "the key was gone from this RedLock node";
                        let reason = crate::telemetry::LostReason::ServerLost;
                        held.hold().mark_lost(reason, why);
                        leaving.push(held);
                    }
                }
                Step::Retaken(held) => {
                    if state.slots[i].is_none() {
                        state.slots[i] = Some(held);
                        renewed += 1;
                    } else {
                        leaving.push(held);
                    }
                }
                Step::Failed => {}
            }
        }
        if renewed >= self.quorum && !expired {
            let until = started + self.lease.saturating_sub(self.drift);
            self.validity.extend(until);
        }
        Some((renewed, state.slots.iter().flatten().count(), expired))
    }

    /// What a round that renewed on `renewed` nodes, with `held` nodes still holding the lock,
    /// came to: lost past the validity or below a quorum of holds; short below a quorum renewed.
    fn judge_round(&self, renewed: usize, held: usize, expired: bool) -> Round {
        if expired || self.validity.is_marked() {
            self.mark_lost(&format!(
                "its validity ran out; the last round renewed on {renewed} of {} nodes (quorum {})",
                self.nodes.len(),
                self.quorum
            ));
            return Round::Stop;
        }
        if held < self.quorum {
            self.mark_lost(&format!(
                "only {held} of {} nodes still hold it (quorum {})",
                self.nodes.len(),
                self.quorum
            ));
            return Round::Stop;
        }
        if renewed < self.quorum {
            tracing::warn!(lock = %self.name, renewed, quorum = self.quorum, "RedLock renewal short of a quorum; retrying before the validity runs out");
            return Round::Short;
        }
        Round::Renewed
    }

    async fn renew_node(&self, i: usize, held: Held) -> Step {
        let lease_ms = self.lease.as_millis() as u64;
        let Some((client, hold)) = held else {
            // A node we do not hold (restarted, or it failed when we acquired): take it again
            // when it is free, to keep as many nodes as possible behind the lock.
            let lock = &self.nodes[i];
            return match attempt_one(lock, Lease::Fixed(self.lease), Some(self.node_timeout)).await
            {
                Outcome::Granted(held) => {
                    tracing::debug!(lock = %self.name, node = i, "RedLock taken again on a node");
                    Step::Retaken(held)
                }
                _ => Step::Failed,
            };
        };
        let inner = &client.inner;
        let renewal = async {
            // In the owner's turn, as an extension is: a hold shared with a single-lock guard
            // of the same owner keeps its longer lease, read after the owner's re-entries
            // in flight, so the two reach the server and the hold in one order.
            let _extending = inner.turns.extending(&hold.key).await;
            let lease_ms = lease_ms.max(hold.lease_ms());
            let renewed = inner.node.renew(&[hold.renewal(lease_ms)]).await;
            renewed.map(|flags| (flags, lease_ms))
        };
        match tokio::time::timeout(self.settle_timeout, renewal).await {
            Ok(Ok((flags, lease_ms))) if flags == [true] => Step::Renewed(hold, lease_ms),
            Ok(Ok(_)) => Step::Gone,
            Ok(Err(e)) => {
                tracing::debug!(lock = %self.name, node = i, error = %e, "RedLock renewal failed on a node");
                Step::Failed
            }
            Err(_) => {
                tracing::debug!(lock = %self.name, node = i, "RedLock renewal timed out on a node");
                Step::Failed
            }
        }
    }
}

/// Renews every third of the lease until the guard goes or the lock is lost. Holds only a
/// `Weak`, so a dropped guard (which also aborts this task) ends it.
pub(super) async fn renew(weak: Weak<Shared>, period: Duration) {
    let mut pause = period;
    loop {
        tokio::time::sleep(pause).await;
        let Some(shared) = weak.upgrade() else { return };
        pause = match shared.renew_round().await {
            Round::Renewed => period,
            Round::Short => period / 2,
            Round::Stop => return,
        };
    }
}
