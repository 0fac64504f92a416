//! The acquisition frame of a lock: traced and measured, this client's turn first if it has
//! contenders, then the wait loop (`wait.rs`) around the lock's waiter (`waiter.rs`), and the
//! place in the server's queue withdrawn when the wait ends without the lock.

use tracing::Instrument;

use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::keys::HoldKey;
use crate::local_queue::Ticket;
use crate::owner::Owner;
use crate::telemetry;
use crate::terms::{Lease, Wait};
use crate::turns::Acquiring;

use super::waiter::{LockWaiter, Terms};
use super::{Lock, contenders, server_queue};

/// Takes the lock on `lease` terms, waiting as `wait` allows: the guard, or `None` when the
/// wait ran out. Traced as the `acquire` span; a success records the wait and attempts.
pub(super) async fn take(lock: &Lock, lease: Lease, wait: Wait) -> Result<Option<LockGuard>> {
    let span = tracing::debug_span!(
        "acquire",
        lock = %lock.keys.name,
        owner = tracing::field::Empty,
        attempts = tracing::field::Empty,
        wait_ms = tracing::field::Empty,
    );
    let series = (lock.client.inner.config.lock_label).series(telemetry::LOCK, &lock.keys.name);
    let mut measured = telemetry::Acquisition::start(series);
    let mut attempts = 0u32;
    let acquired = wait_for_grant(lock, lease, wait, &mut attempts, &mut measured)
        .instrument(span.clone())
        .await;
    let outcome = match &acquired {
        Ok(Some(_)) => telemetry::Outcome::Acquired,
        Ok(None) if matches!(wait, Wait::Once) => telemetry::Outcome::Busy,
        Ok(None) => telemetry::Outcome::Timeout,
        Err(_) => telemetry::Outcome::Error,
    };
    let waited = measured.finish(outcome);
    if let Ok(Some(_)) = &acquired {
        span.record("attempts", attempts);
        span.record("wait_ms", waited.as_secs_f64() * 1e3);
        metrics::histogram!(telemetry::ACQUIRE_ATTEMPTS).record(f64::from(attempts));
    }
    acquired
}

/// The acquisition: this client's turn first if it has contenders, then the wait loop
/// (attempt, queue, listen, nap) until granted or the wait is spent.
async fn wait_for_grant(
    lock: &Lock,
    lease: Lease,
    wait: Wait,
    attempts: &mut u32,
    measured: &mut telemetry::Acquisition,
) -> Result<Option<LockGuard>> {
    let inner = &lock.client.inner;
    inner.check_open()?;
    let replicas = lock.replicas_wanted();
    replicas.validate()?;
    // A hand-over from a release of this client is written by that release, with no `WAIT`
    // behind it: a lock that wants replica acknowledgement takes no hand-overs, so every
    // grant of it comes through an attempt (the release frees it and wakes us instead).
    // A lock-delay's marker is written by acquisitions and renewals, not by a hand-over,
    // so such a lock takes none either.
    lock.check_lock_delay()?;
    let take_over = inner.node.wait_for(replicas).await.is_none() && lock.lock_delay.is_none();
    let owner = lock.owner();
    tracing::Span::current().record("owner", tracing::field::display(&owner));
    let field = owner.field(&inner.id_text);
    let key = HoldKey::new(&lock.keys.hash, &field);
    let acquiring = start(lock, owner, &key).await?;
    let mut subscription = None;
    // Re-entry never waits, so it skips the local queue (queueing behind waiters that wait
    // for us would deadlock).
    let reentered = inner.holds.get(&key);
    let mut ticket = local_ticket(lock, reentered.is_some());
    if ticket.as_ref().is_some_and(|t| !t.is_head()) && !matches!(wait, Wait::Once) {
        measured.waits();
    }
    if let Some(ticket) = ticket.as_mut()
        && !contenders::wait_turn(lock, ticket, wait, &mut subscription, &field).await?
    {
        return Ok(None);
    }
    let reentered = reentered.or_else(|| contenders::held_after_turn(lock, &key, &mut ticket));
    // Whether to ask Redis now, or only wait for our turn to be handed the lock.
    let try_now = !contenders::skip_attempt(ticket.as_ref(), wait);
    // A lock this client waited for a moment ago: its channel still listens, so the first
    // attempt may queue us at once (registered first, so a grant message is not missed),
    // which saves the attempt after subscribing.
    if subscription.is_none()
        && reentered.is_none()
        && !matches!(wait, Wait::Once)
        && (inner.subscriber).listens()
        && (inner.subscriber).is_live(lock.grant_channel())
    {
        subscription = Some(server_queue::subscribe(lock, &field).await?);
    }
    let mut waiter = LockWaiter {
        lock,
        terms: Terms {
            lease,
            wait,
            replicas,
            take_over,
        },
        acquiring: &acquiring,
        reentered,
        ticket,
        listening: subscription,
        place: None,
        queued_by: None,
        try_now,
        ttl: None,
        attempts,
        measured,
    };
    let outcome = crate::wait::run(wait, &mut waiter).await;
    // Whatever ended the wait without the lock (an error, shutdown, the wait running out),
    // our place in the server's queue goes before the caller hears of it: a process that
    // exits then leaves no place for a release to give the lock to.
    if let Some(place) = waiter.place.take() {
        place.withdraw().await;
    }
    outcome
}

/// Starts `owner`'s acquisition, once its releases of the lock still in flight are done
/// (`turns.rs`).
async fn start(lock: &Lock, owner: Owner, key: &HoldKey) -> Result<Acquiring> {
    let acquiring = lock.client.inner.turns.start(key);
    // Two acquisitions of one implicit owner in progress at once are concurrent for certain
    // (a nested one starts after the outer one returned): admitted, they would both hold.
    if acquiring.overlapping() && owner.is_implicit() {
        return Err(Error::ConcurrentAcquisition {
            name: lock.keys.name.to_string(),
            owner: owner.to_string(),
        });
    }
    acquiring.settled().await;
    Ok(acquiring)
}

/// This acquisition's ticket in the client's local queue for the lock, if it takes turns now:
/// only when this client already has contenders for the lock (else after a failed attempt:
/// the uncontended path touches no queue). Never for a re-entry, nor for a strict lock, whose
/// waiters all wait in the server's queue in arrival order whatever their client
/// (`FairLock`).
fn local_ticket(lock: &Lock, reentry: bool) -> Option<Ticket<'_>> {
    match reentry || lock.strict {
        true => None,
        false => (lock.client.inner.local_queues).join_if_contended(&lock.keys.hash),
    }
}
