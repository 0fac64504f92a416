//! The acquisition engine: the wait loop around one attempt (`attempt.rs`). The server's queue
//! and the grants taken from its messages are in `acquire/grant.rs`; waiting among this
//! client's own contenders in `acquire/local.rs`.

use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::config::Replicas;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::hold::Grant;
use crate::lock::Lock;
use crate::node::QueueTerms;
use crate::queue_place::QueuePlace;
use crate::scripts::Acquire;
use crate::telemetry::{self, LostReason};
use crate::terms::{Lease, Wait};

mod grant;
mod local;

use local::{Napped, skip_attempt};

/// How long to sleep between attempts when the holder's key has no expiry and no unlock
/// message arrives (someone PERSISTed it, or a message was lost).
const RECHECK_WITHOUT_TTL: Duration = Duration::from_secs(1);

/// How long a waiter may sleep on a holder with remaining lease `ttl` before trying again: just
/// past the expiry (the unlock message never comes when a lease simply runs out).
pub(crate) fn nap_for(ttl: Option<Duration>) -> Duration {
    ttl.map_or(RECHECK_WITHOUT_TTL, |t| t + Duration::from_millis(1))
}

impl Lock {
    /// Takes the lock on `lease` terms, waiting as `wait` allows: the guard, or `None` when the
    /// wait ran out. Traced as the `acquire` span; a success records the wait and attempts.
    pub(crate) async fn acquire(&self, lease: Lease, wait: Wait) -> Result<Option<LockGuard>> {
        let span = tracing::debug_span!(
            "acquire",
            lock = %self.keys.name,
            owner = tracing::field::Empty,
            attempts = tracing::field::Empty,
            wait_ms = tracing::field::Empty,
        );
        let series = (self.client.inner.config.lock_label).series(telemetry::LOCK, &self.keys.name);
        let mut measured = telemetry::Acquisition::start(series);
        let mut attempts = 0u32;
        let acquired = self
            .wait_for_grant(lease, wait, &mut attempts, &mut measured)
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

    /// The acquisition loop: attempt, queue, subscribe, nap, until granted or the wait is spent.
    async fn wait_for_grant(
        &self,
        lease: Lease,
        wait: Wait,
        attempts: &mut u32,
        measured: &mut telemetry::Acquisition,
    ) -> Result<Option<LockGuard>> {
        let inner = &self.client.inner;
        inner.check_open()?;
        let replicas = self.replicas_wanted()?;
        // A hand-over from a release of this client is written by that release, with no `WAIT`
        // behind it: a lock that wants replica acknowledgement takes no hand-overs, so every
        // grant of it comes through `attempt` (the release frees it and wakes us instead).
        // A lock-delay's marker is written by acquisitions and renewals, not by a hand-over,
        // so such a lock takes none either.
        self.check_lock_delay()?;
        let take_over = inner.node.wait_for(replicas).await.is_none() && self.lock_delay.is_none();
        let owner = self.owner();
        tracing::Span::current().record("owner", tracing::field::display(&owner));
        let field = owner.field(&inner.id_text);
        let lease_ms = lease.ms();
        let acquiring = inner.turns.start(&self.keys.hash, &field);
        if acquiring.first_overlap() && owner.is_implicit() {
            tracing::warn!(
                lock = %self.keys.name,
                %owner,
                "two acquisitions of one owner are in progress at once: futures polled \
                 concurrently in one task share its owner and re-enter each other's lock; run \
                 each under `Lock::run` (its own owner) to exclude them"
            );
        }
        // This owner's releases of the lock still in flight come first (`turns.rs`).
        acquiring.settled().await;
        let mut subscription = None;
        // Re-entry never waits, so it skips the local queue (queueing behind waiters that wait
        // for us would deadlock). Others join it only when this client already has contenders
        // for the lock, or after a failed attempt: the uncontended path touches no queue.
        // The hold this acquisition re-enters, if any: kept, since if the server says another
        // owner holds the lock, this is the hold that is gone.
        let mut reentered = inner.holds.get(&self.keys.hash, &field);
        // A strict lock's waiters all wait in the server's queue, in arrival order whatever
        // their client (`FairLock`): none takes turns locally.
        let mut ticket = match reentered.is_some() || self.strict {
            true => None,
            false => inner.local_queues.join_if_contended(&self.keys.hash),
        };
        if ticket.as_ref().is_some_and(|t| !t.is_head()) && !matches!(wait, Wait::Once) {
            measured.waits();
        }
        if let Some(ticket) = ticket.as_mut()
            && !self
                .wait_turn(ticket, wait, &mut subscription, &field)
                .await?
        {
            return Ok(None);
        }
        // Whether to ask Redis now, or only wait for our turn to be handed the lock.
        let mut try_now = !skip_attempt(ticket.as_ref(), wait);
        let mut ttl = None;
        // A lock this client waited for a moment ago: its channel still listens, so the first
        // attempt may queue us at once (registered first, so a grant message is not missed),
        // which saves the attempt after subscribing.
        if subscription.is_none()
            && reentered.is_none()
            && !matches!(wait, Wait::Once)
            && inner
                .subscriber
                .is_live(&self.keys.grant_channel(&inner.id_text))
        {
            subscription = Some(self.subscribe_to_grants(&field).await?);
        }
        // Our place in the lock's queue on the server, once an attempt may have queued us.
        let mut place: Option<QueuePlace> = None;
        // The terms and send time of the latest attempt that queued us, if its answer was a
        // refusal: a grant's message naming it hands us the lock (`Lock::hold_from_grant`).
        // Cleared when an attempt goes out (it claims any earlier grant, or finds it gone), when
        // we gave back a hold that may have been the grant, and with the place.
        let mut queued_by: Option<(QueueTerms, Instant)> = None;
        let outcome = async {
            loop {
                // Shutdown wakes every waiter; none may take a lock the stopped watchdog won't keep.
                inner.check_open()?;
                if let Some(sub) = subscription.as_ref()
                    && let Some(token) = sub.take_grant(&field, queued_by.map(|(t, _)| t.nonce))
                    && let Some((terms, sent)) = queued_by
                {
                    // With another operation of this owner on the lock in flight, the grant is
                    // claimed with an attempt instead (`Acquiring::alone`).
                    let taken = match acquiring.alone() {
                        true => self.hold_from_grant(&field, lease, terms, sent, token)?,
                        false => None,
                    };
                    match taken {
                        Some(guard) => {
                            if let Some(place) = place.take() {
                                place.taken();
                            }
                            return Ok(Some(guard));
                        }
                        // Claimed by the next attempt, now.
                        None => try_now = true,
                    }
                }
                if try_now {
                    // Held until the grant is registered, so this owner's grants register in the
                    // order the server applied them (`turns.rs`).
                    let _turn = acquiring.turn().await;
                    *attempts += 1;
                    let started = Instant::now();
                    // A waiter (subscribed: past its first attempt) queues on the server; a strict
                    // lock's waiter from its first attempt on (`Lock::strict`).
                    let queue = ((subscription.is_some() || self.strict)
                        && reentered.is_none()
                        && !matches!(wait, Wait::Once))
                    .then(|| self.queue_terms(lease));
                    // A grant to an earlier attempt of ours is claimed by this one, or gone.
                    queued_by = None;
                    if queue.is_some() && place.is_none() {
                        place = Some(QueuePlace::in_lock(&self.client, &self.keys, &field));
                    }
                    let (answer, answered_queued) = self
                        .attempt(&field, lease_ms, reentered.is_some(), replicas, queue)
                        .await?;
                    ttl = match answer {
                        Acquire::Acquired { count, token } => {
                            let grant = Grant::Counted(count);
                            match self.confirmed(&field, lease, started).await? {
                                Some(since) => {
                                    if let Some(place) = place.take() {
                                        place.taken();
                                    }
                                    let guard = self.register(field, lease, grant, token, since)?;
                                    return Ok(Some(self.watched(guard)));
                                }
                                // Spent on arrival and not confirmed: try again, within the wait.
                                None => Some(Duration::ZERO),
                            }
                        }
                        Acquire::AlreadyHeld => {
                            return Err(Error::WouldDeadlock {
                                name: self.keys.name.to_string(),
                            });
                        }
                        Acquire::HeldElsewhere { ttl } => {
                            // Another owner holds the lock: the hold we re-entered is gone on
                            // the server (forced, or lost in a restart or failover). Its guard
                            // is told now rather than at the next renewal, and this acquisition
                            // waits as a fresh one: queued, not napping until the other holder's
                            // lease ends. Detached even if its validity ran out meanwhile
                            // (nothing else detaches a fixed lease), so its release cannot
                            // touch the hold this acquisition takes.
                            if let Some(hold) = reentered.take() {
                                let why = "another owner held the lock at a re-entry";
                                crate::watchdog::lose(inner, &hold, LostReason::ServerLost, why);
                            }
                            if let Some(terms) = queue.filter(|_| place.is_some()) {
                                if !answered_queued {
                                    // Answered by the unqueued retry after a dropped
                                    // connection, which took us out of the queue: queue again
                                    // at once (a new nonce), before any wait.
                                    if wait.remaining().is_some() {
                                        continue;
                                    }
                                } else {
                                    // Only a grant naming this attempt may come now.
                                    queued_by = Some((terms, started));
                                }
                            }
                            ttl
                        }
                    };
                }
                try_now = true;
                let Some(remaining) = wait.remaining() else {
                    if let Some(place) = place.take() {
                        place.withdraw().await;
                    }
                    return Ok(None);
                };
                measured.waits();
                if ticket.is_none() && reentered.is_none() && !self.strict {
                    // Contended: from now on take turns with this client's other contenders.
                    let joined = ticket.insert(inner.local_queues.join(&self.keys.hash));
                    let queued = !joined.is_head();
                    if queued && let Some(place) = place.take() {
                        // Only this client's head waits in the server's queue: a grant to a waiter
                        // behind it locally would never be claimed. Awaited, so our own next
                        // queued attempt comes after it.
                        queued_by = None;
                        place.withdraw().await;
                    }
                    if !self
                        .wait_turn(joined, wait, &mut subscription, &field)
                        .await?
                    {
                        return Ok(None);
                    }
                    if queued {
                        // Our turn came after others had theirs: the lock may well be free now.
                        try_now = !skip_attempt(Some(joined), wait);
                        continue;
                    }
                    // First in line at once: another attempt right now would meet the same holder
                    // (it cost W6 and W2 a round trip per wait); subscribe first, just below.
                }
                let Some(sub) = subscription.as_ref() else {
                    // Subscribe only after a failed attempt (the uncontended path stays one round
                    // trip), then try again at once: the unlock may have happened before we listened,
                    // and this attempt queues us.
                    subscription = Some(self.subscribe_to_grants(&field).await?);
                    continue;
                };
                // Wake on the unlock message, or when the holder's lease runs out (the message is
                // lost when a lease simply expires), or at our own deadline.
                let mut nap = nap_for(ttl);
                if let Some(left) = remaining {
                    nap = nap.min(left);
                }
                if place.is_some() {
                    // Queued: look again within a claim lease. That keeps our entry alive, and
                    // if the lock was granted to a waiter that never takes it (it died), we are
                    // the next one within a claim lease of its grant: nobody else tells us.
                    nap = nap.min(inner.config.claim_lease);
                }
                let offer = ticket.as_ref().filter(|_| take_over);
                match self
                    .nap(ticket.as_ref(), offer, sub, &field, lease, nap)
                    .await?
                {
                    Napped::HandedOver(guard) => {
                        // Handed over by a release of this client: that was the attempt (the
                        // release took our queue entry out).
                        *attempts += 1;
                        if let Some(place) = place.take() {
                            place.taken();
                        }
                        return Ok(Some(guard));
                    }
                    // A grant from the queue may have been given back with it.
                    Napped::GaveBack => queued_by = None,
                    Napped::Woke => {}
                }
            }
        }
        .await;
        // Whatever ended the wait without the lock (an error, shutdown, the wait running out),
        // our place in the server's queue goes before the caller hears of it: a process that
        // exits then leaves no place for a release to give the lock to.
        if let Some(place) = place.take() {
            place.withdraw().await;
        }
        outcome
    }

    /// The replica acknowledgement this lock asks for (its own, else the client's), checked.
    fn replicas_wanted(&self) -> Result<Replicas> {
        let replicas = self.replicas.unwrap_or(self.client.inner.config.replicas);
        replicas.validate()?;
        Ok(replicas)
    }

    /// `guard`, its hold told which acknowledgement the watchdog's renewals ask for.
    fn watched(&self, guard: LockGuard) -> LockGuard {
        let replicas = self.replicas.unwrap_or(self.client.inner.config.replicas);
        guard.hold().set_replicas(replicas);
        guard
    }
}
