//! Waiting among this client's own contenders for a lock: its local queue (`local_queue.rs`),
//! the head's nap between attempts, and a hand-over from a release of this client.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Lock;
use crate::error::Result;
use crate::guard::LockGuard;
use crate::hold::Grant;
use crate::local_queue::{Handover, Ticket};
use crate::node::Successor;
use crate::pubsub::Subscription;
use crate::release::{give_back, give_back_in_background};
use crate::terms::{Lease, Wait};

/// Whether a head of this client's queue should skip asking Redis and go straight to offering
/// to take the lock over: when the lock was last handed to another waiter of this client, which
/// therefore holds it. Its release hands it on to us, or frees it and wakes us directly (`local_queue.rs`),
/// so the attempt could only fail. Never for a single attempt.
pub(super) fn skip_attempt(ticket: Option<&Ticket<'_>>, wait: Wait) -> bool {
    !matches!(wait, Wait::Once) && ticket.is_some_and(|t| t.queue.handing_over())
}

/// How a nap between attempts ended.
pub(super) enum Napped {
    /// A release of this client handed us the lock.
    HandedOver(LockGuard),
    /// We gave back one hold (a hand-over that failed unanswered, or came too late to use),
    /// which may have been a grant from the queue: its message no longer counts.
    GaveBack,
    /// Woken (a message, a release, the nap's end): time for the next attempt.
    Woke,
}

impl Lock {
    /// One wait between attempts, at most `nap` long: until an unlock message, a release by
    /// this client, or (as this client's head) a release of this client that hands us the
    /// lock, which is then ours without another attempt (only with `offer`: the head's ticket
    /// when it may take the lock over).
    pub(super) async fn nap(
        &self,
        ticket: Option<&Ticket<'_>>,
        offer: Option<&Ticket<'_>>,
        sub: &Subscription,
        field: &Arc<str>,
        lease: Lease,
        nap: Duration,
    ) -> Result<Napped> {
        let lease_ms = lease.ms();
        let local_release = async {
            match ticket {
                Some(ticket) => ticket.queue.released.notified().await,
                None => std::future::pending().await,
            }
        };
        // As this client's head, offer to take the lock over from a local holder's release.
        let mut offered = offer.map(|t| {
            let successor = Successor {
                field: field.clone(),
                lease_ms,
                fenced: self.fenced,
            };
            t.offer(successor, self.give_back_later(field, lease_ms))
        });
        let handed = async {
            match offered.as_mut() {
                Some(offered) => offered.answered().await,
                None => std::future::pending().await,
            }
        };
        let answer = tokio::select! {
            biased;
            answer = handed => Some(answer),
            _ = sub.notified() => None,
            _ = local_release => None,
            _ = tokio::time::sleep(nap) => None,
        };
        let answer = match (answer, offered) {
            (Some(answer), _) => Some(answer),
            // Taken meanwhile: the release's answer is on its way, and may be the lock.
            (None, Some(offered)) => offered.withdraw().await,
            (None, None) => None,
        };
        match answer {
            Some(Handover::Granted { token, sent }) => {
                match self.confirmed(field, lease, sent).await? {
                    Some(since) => self
                        .register(field.clone(), lease, Grant::HandedOver, token, since)
                        .map(|guard| Napped::HandedOver(self.watched(guard))),
                    None => Ok(Napped::GaveBack),
                }
            }
            Some(Handover::Unknown) => {
                // The release failed unanswered: it may have handed us the lock. We held
                // nothing before, so giving back one hold is exact either way.
                let _ = give_back(&self.client, &self.keys, field, lease_ms, 1).await;
                Ok(Napped::GaveBack)
            }
            Some(Handover::Declined) | None => Ok(Napped::Woke),
        }
    }

    /// What gives back a grant handed to this waiter after it stopped waiting, before it read
    /// the answer (see `local_queue::Offered`).
    fn give_back_later(&self, field: &Arc<str>, lease_ms: u64) -> crate::local_queue::GiveBack {
        let (client, keys, field) = (self.client.clone(), self.keys.clone(), field.clone());
        Box::new(move || {
            let why = "handed the lock after it stopped waiting";
            give_back_in_background(&client, &keys, &field, lease_ms, why);
        })
    }

    /// Waits until `ticket` is at the head of this client's local queue for the lock. False
    /// when the caller's wait ran out first. A single attempt (`Wait::Once`) never queues.
    pub(super) async fn wait_turn(
        &self,
        ticket: &mut Ticket<'_>,
        wait: Wait,
        subscription: &mut Option<Subscription>,
        field: &Arc<str>,
    ) -> Result<bool> {
        let deadline = match wait {
            Wait::Once => return Ok(true),
            _ if ticket.is_head() => return Ok(true),
            Wait::Forever => Instant::now() + crate::config::MAX_DURATION,
            Wait::Until(deadline) => deadline,
        };
        if subscription.is_none() {
            // Stay subscribed while queued, so the channel is not dropped and re-made at every
            // hand-off between local waiters.
            *subscription = Some(self.subscribe_to_grants(field).await?);
        }
        tokio::select! {
            _ = ticket.wait_head() => Ok(true),
            _ = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)) => Ok(false),
        }
    }
}
