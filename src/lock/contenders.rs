//! Waiting among this client's own contenders for a lock: its local queue (`local_queue.rs`),
//! the head's wait between attempts, and a hand-over from a release of this client.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::guard::LockGuard;
use crate::hold::Grant;
use crate::hold::Hold;
use crate::keys::HoldKey;
use crate::local_queue::{GiveBack, OfferAnswer, Offered, Ticket};
use crate::node::Successor;
use crate::pubsub::Subscription;
use crate::release::{give_back, give_back_once_answered};
use crate::terms::{Lease, Wait};

use super::{Lock, grant, server_queue};

/// Whether a head of this client's queue should skip asking Redis and go straight to offering
/// to take the lock over: when the lock was last handed to another waiter of this client, which
/// therefore holds it. Its release hands it on to us, or frees it and wakes us directly
/// (`local_queue.rs`), so the attempt could only fail. Never for a single attempt.
pub(super) fn skip_attempt(ticket: Option<&Ticket<'_>>, wait: Wait) -> bool {
    !matches!(wait, Wait::Once) && ticket.is_some_and(|t| t.queue.handed_to().is_some())
}

/// How long the head that skipped its attempt waits for the hold it skipped it for: as long
/// as that hold is valid. Its release or its loss to the watchdog wakes the head sooner, but
/// a fixed lease that runs out wakes nobody. Zero when it is not registered (any more): the
/// head asks at once.
pub(super) fn handed_hold_left(lock: &Lock, ticket: Option<&Ticket<'_>>) -> Duration {
    let handed_to = ticket.and_then(|t| t.queue.handed_to());
    let hold = handed_to.and_then(|field| {
        let holds = &lock.client.inner.holds;
        holds.get(&HoldKey::new(&lock.keys.hash, &field))
    });
    hold.map_or(Duration::ZERO, |hold| {
        hold.valid_until().saturating_duration_since(Instant::now())
    })
}

/// How a wait between attempts ended.
pub(super) enum Woken {
    /// A release of this client handed us the lock.
    HandedOver(LockGuard),
    /// We gave back one hold (a hand-over that failed unanswered, or came too late to use),
    /// which may have been a grant from the queue: its message no longer counts.
    GaveBack,
    /// Woken (a message, a release, the nap's end): time for the next attempt.
    ToAttempt,
}

/// The waiter that waits between attempts: who it is, on what terms, and (as this client's
/// head) its place in the local queue.
pub(super) struct Napping<'a> {
    pub lock: &'a Lock,
    pub ticket: Option<&'a Ticket<'a>>,
    /// Whether it may be handed the lock by a release of this client.
    pub take_over: bool,
    pub key: &'a HoldKey,
    pub lease: Lease,
}

/// One wait between attempts, at most `nap` long: until an unlock message, a release by this
/// client, or (as this client's head that may take the lock over) a release of this client
/// that hands us the lock, which is then ours without another attempt.
pub(super) async fn wait_between_attempts(
    napping: Napping<'_>,
    sub: &Subscription,
    nap: Duration,
) -> Result<Woken> {
    let local_release = async {
        match napping.ticket {
            Some(ticket) => ticket.queue.released.notified().await,
            None => std::future::pending().await,
        }
    };
    // As this client's head, offer to take the lock over from a local holder's release.
    let mut offered = offer(&napping);
    let handed_over = async {
        match offered.as_mut() {
            Some(offered) => offered.answered().await,
            None => std::future::pending().await,
        }
    };
    let answer = tokio::select! {
        biased;
        answer = handed_over => Some(answer),
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
    take_answer(&napping, answer).await
}

/// The head's offer to take the lock over, left at the local queue; `None` when it is not the
/// head or may not take the lock over.
fn offer(napping: &Napping<'_>) -> Option<Offered> {
    let ticket = napping.ticket.filter(|_| napping.take_over)?;
    let lease_ms = napping.lease.ms();
    let successor = Successor {
        field: napping.key.field.clone(),
        lease_ms,
        fenced: napping.lock.fenced,
    };
    Some(ticket.offer(
        successor,
        give_back_later(napping.lock, &napping.key.field, lease_ms),
    ))
}

/// What the answer to an offer (if one came) makes of the wait.
async fn take_answer(napping: &Napping<'_>, answer: Option<OfferAnswer>) -> Result<Woken> {
    let Napping {
        lock, key, lease, ..
    } = *napping;
    let field = &key.field;
    match answer {
        Some(OfferAnswer::Granted { token, sent }) => {
            match grant::confirmed(lock, field, lease, sent).await? {
                Some(since) => {
                    let granted = Grant::HandedOver;
                    grant::guard(lock, key, lease, granted, token, since).map(Woken::HandedOver)
                }
                None => Ok(Woken::GaveBack),
            }
        }
        Some(OfferAnswer::Unknown) => {
            // The release failed unanswered: it may have handed us the lock. We held
            // nothing before, so giving back one hold is exact either way.
            let _ = give_back(&lock.client, &lock.keys, field, lease.ms(), 1).await;
            Ok(Woken::GaveBack)
        }
        Some(OfferAnswer::Declined) | None => Ok(Woken::ToAttempt),
    }
}

/// What gives back a grant handed to this waiter after it stopped waiting, before it read
/// the answer (see `local_queue::Offered`).
fn give_back_later(lock: &Lock, field: &Arc<str>, lease_ms: u64) -> GiveBack {
    let (client, keys, field) = (lock.client.clone(), lock.keys.clone(), field.clone());
    Box::new(move |answer| give_back_once_answered(&client, &keys, &field, lease_ms, answer))
}

/// Waits until `ticket` is at the head of this client's local queue for the lock. False
/// when the caller's wait ran out first. A single attempt (`Wait::Once`) never queues.
pub(super) async fn wait_turn(
    lock: &Lock,
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
        *subscription = Some(server_queue::subscribe(lock, field).await?);
    }
    tokio::select! {
        _ = ticket.wait_head() => Ok(true),
        _ = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)) => Ok(false),
    }
}

/// After our turn in the client's queue (`ticket`): the hold of our owner if a task sharing
/// it (`Owner`) was handed the lock meanwhile. That makes this a re-entry, which never waits
/// for that owner's own release, so it leaves the queue.
pub(super) fn held_after_turn(
    lock: &Lock,
    key: &HoldKey,
    ticket: &mut Option<Ticket<'_>>,
) -> Option<Arc<Hold>> {
    ticket.as_ref()?;
    let held = lock.client.inner.holds.get(key)?;
    *ticket = None;
    Some(held)
}
