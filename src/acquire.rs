//! The acquisition engine: a lock's waiter in the wait loop (`wait.rs`), around one attempt
//! (`attempt.rs`). The server's queue and the grants taken from its messages are in
//! `acquire/grant.rs`; waiting among this client's own contenders in `acquire/local.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Instrument;

use crate::config::Replicas;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::hold::{Grant, Hold};
use crate::local_queue::Ticket;
use crate::lock::Lock;
use crate::node::QueueTerms;
use crate::pubsub::Subscription;
use crate::queue_place::QueuePlace;
use crate::scripts::Acquire;
use crate::telemetry::{self, LostReason};
use crate::terms::{Lease, Wait};
use crate::turns::Acquiring;
use crate::wait::{Attempt, Then, Waiter};

mod grant;
mod local;

use local::{Napped, skip_attempt};

/// Just past a holder's remaining lease `ttl`.
fn past(ttl: Option<Duration>) -> Option<Duration> {
    ttl.map(|t| t + Duration::from_millis(1))
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

    /// The acquisition: this client's turn first if it has contenders, then the wait loop
    /// (attempt, queue, listen, nap) until granted or the wait is spent.
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
        let acquiring = inner.turns.start(&self.keys.hash, &field);
        // Two acquisitions of one implicit owner in progress at once are concurrent for certain
        // (a nested one starts after the outer one returned): admitted, they would both hold.
        if acquiring.overlapping() && owner.is_implicit() {
            return Err(Error::ConcurrentAcquisition {
                name: self.keys.name.to_string(),
                owner: owner.to_string(),
            });
        }
        // This owner's releases of the lock still in flight come first (`turns.rs`).
        acquiring.settled().await;
        let mut subscription = None;
        // Re-entry never waits, so it skips the local queue (queueing behind waiters that wait
        // for us would deadlock). Others join it only when this client already has contenders
        // for the lock, or after a failed attempt: the uncontended path touches no queue.
        let reentered = inner.holds.get(&self.keys.hash, &field);
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
        let try_now = !skip_attempt(ticket.as_ref(), wait);
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
        let mut waiter = LockWaiter {
            lock: self,
            listening: subscription,
            field,
            lease,
            wait,
            replicas,
            take_over,
            acquiring: &acquiring,
            ticket,
            reentered,
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

/// One acquisition of a lock, as the wait loop (`wait.rs`) runs it.
struct LockWaiter<'a> {
    lock: &'a Lock,
    /// The lock's grant channel of this client, once this waiter listens.
    listening: Option<Subscription>,
    field: Arc<str>,
    lease: Lease,
    wait: Wait,
    replicas: Replicas,
    /// Whether this waiter may be handed the lock by a release of this client (`local.rs`).
    take_over: bool,
    acquiring: &'a Acquiring,
    /// Its turn among this client's contenders for the lock, once it takes turns.
    ticket: Option<Ticket<'a>>,
    /// The hold this acquisition re-enters, if any: kept, since if the server says another
    /// owner holds the lock, this is the hold that is gone.
    reentered: Option<Arc<Hold>>,
    /// Our place in the lock's queue on the server, once an attempt may have queued us.
    place: Option<QueuePlace>,
    /// The terms and send time of the latest attempt that queued us, if its answer was a
    /// refusal: a grant's message naming it hands us the lock (`Lock::hold_from_grant`).
    /// Cleared when an attempt goes out (it claims any earlier grant, or finds it gone), when
    /// we gave back a hold that may have been the grant, and with the place.
    queued_by: Option<(QueueTerms, Instant)>,
    /// Whether to ask Redis at the next attempt, or only wait for our turn to be handed the
    /// lock.
    try_now: bool,
    /// The holder's remaining lease, as the latest refusal told it.
    ttl: Option<Duration>,
    attempts: &'a mut u32,
    measured: &'a mut telemetry::Acquisition,
}

impl LockWaiter<'_> {
    /// A refusal: nap until just past the holder's lease (the unlock message never comes when
    /// a lease simply runs out), unless a message comes first.
    fn again(&self) -> Attempt<LockGuard> {
        Attempt::Again(past(self.ttl))
    }

    /// The guard of a hold the server granted us, our place in its queue taken with it.
    fn granted(&mut self, guard: LockGuard) -> Attempt<LockGuard> {
        self.place_taken();
        Attempt::Done(guard)
    }

    /// The grant took our place in the server's queue out with it.
    fn place_taken(&mut self) {
        if let Some(place) = self.place.take() {
            place.taken();
        }
    }
}

impl Waiter for LockWaiter<'_> {
    type Output = LockGuard;

    async fn attempt(&mut self) -> Result<Attempt<LockGuard>> {
        loop {
            match self.attempt_once().await? {
                Some(attempt) => return Ok(attempt),
                // Answered by the unqueued retry after a dropped connection, which took us out
                // of the queue: queue again at once (a new nonce), before any wait.
                None if self.wait.remaining().is_some() => {}
                None => return Ok(self.again()),
            }
        }
    }

    async fn refused(&mut self) -> Result<Then> {
        self.measured.waits();
        if self.ticket.is_none() && self.reentered.is_none() && !self.lock.strict {
            return self.take_turns().await;
        }
        self.listen().await
    }

    fn longest_nap(&self) -> Duration {
        // Queued: look again within a claim lease. That keeps our entry alive, and if the lock
        // was granted to a waiter that never takes it (it died), we are the next one within a
        // claim lease of its grant: nobody else tells us.
        match self.place {
            Some(_) => self.lock.client.inner.config.claim_lease,
            None => Duration::MAX,
        }
    }

    /// Wakes on the unlock message, a release of this client, or when the holder's lease runs
    /// out; as this client's head it may be handed the lock meanwhile.
    async fn nap(&mut self, nap: Duration) -> Result<Option<LockGuard>> {
        let Some(listening) = self.listening.as_ref() else {
            // Not reached: `refused` made it listen before any nap.
            tokio::time::sleep(nap).await;
            return Ok(None);
        };
        let offer = self.ticket.as_ref().filter(|_| self.take_over);
        let (ticket, field) = (self.ticket.as_ref(), &self.field);
        let napped = self
            .lock
            .nap(ticket, offer, listening, field, self.lease, nap)
            .await?;
        match napped {
            Napped::HandedOver(guard) => {
                // Handed over by a release of this client: that was the attempt (the release
                // took our queue entry out).
                *self.attempts += 1;
                self.place_taken();
                Ok(Some(guard))
            }
            // A grant from the queue may have been given back with it.
            Napped::GaveBack => {
                self.queued_by = None;
                Ok(None)
            }
            Napped::Woke => Ok(None),
        }
    }
}

impl LockWaiter<'_> {
    /// One attempt ([`Waiter::attempt`]); `None` when the unqueued retry after a dropped
    /// connection answered it, which took us out of the queue.
    async fn attempt_once(&mut self) -> Result<Option<Attempt<LockGuard>>> {
        let lock = self.lock;
        let inner = &lock.client.inner;
        // Shutdown wakes every waiter; none may take a lock the stopped watchdog won't keep.
        inner.check_open()?;
        if let Some(sub) = self.listening.as_ref()
            && let Some(token) = sub.take_grant(&self.field, self.queued_by.map(|(t, _)| t.nonce))
            && let Some((terms, sent)) = self.queued_by
        {
            // With another operation of this owner on the lock in flight, the grant is
            // claimed with an attempt instead (`Acquiring::alone`).
            let taken = match self.acquiring.alone() {
                true => lock.hold_from_grant(&self.field, self.lease, terms, sent, token)?,
                false => None,
            };
            match taken {
                Some(guard) => return Ok(Some(self.granted(guard))),
                // Claimed by the next attempt, now.
                None => self.try_now = true,
            }
        }
        if !std::mem::replace(&mut self.try_now, true) {
            return Ok(Some(self.again()));
        }
        // Held until the grant is registered, so this owner's grants register in the order
        // the server applied them (`turns.rs`).
        let _turn = self.acquiring.turn().await;
        *self.attempts += 1;
        let started = Instant::now();
        // A waiter (listening: past its first attempt) queues on the server; a strict lock's
        // waiter from its first attempt on (`Lock::strict`).
        let queue = ((self.listening.is_some() || lock.strict)
            && self.reentered.is_none()
            && !matches!(self.wait, Wait::Once))
        .then(|| lock.queue_terms(self.lease));
        // A grant to an earlier attempt of ours is claimed by this one, or gone.
        self.queued_by = None;
        if queue.is_some() && self.place.is_none() {
            self.place = Some(QueuePlace::in_lock(&lock.client, &lock.keys, &self.field));
        }
        let reentry = self.reentered.is_some();
        let (answer, answered_queued) = lock
            .attempt(&self.field, self.lease.ms(), reentry, self.replicas, queue)
            .await?;
        self.ttl = match answer {
            Acquire::Acquired { count, token } => {
                let grant = Grant::Counted(count);
                match lock.confirmed(&self.field, self.lease, started).await? {
                    Some(since) => {
                        // The script took our place out with the grant: marked before
                        // registering, which fails at shutdown (the hold is given back then,
                        // and a withdrawal would take out a waiter of the same owner).
                        self.place_taken();
                        let field = self.field.clone();
                        let guard = lock.register(field, self.lease, grant, token, since)?;
                        return Ok(Some(Attempt::Done(lock.watched(guard))));
                    }
                    // Spent on arrival and not confirmed: try again, within the wait.
                    None => Some(Duration::ZERO),
                }
            }
            Acquire::AlreadyHeld => {
                return Err(Error::WouldDeadlock {
                    name: lock.keys.name.to_string(),
                });
            }
            Acquire::HeldElsewhere { ttl } => {
                // Another owner holds the lock: the hold we re-entered is gone on the server
                // (forced, or lost in a restart or failover). Its guard is told now rather than
                // at the next renewal, and this acquisition waits as a fresh one: queued, not
                // napping until the other holder's lease ends. Detached even if its validity
                // ran out meanwhile (nothing else detaches a fixed lease), so its release
                // cannot touch the hold this acquisition takes.
                if let Some(hold) = self.reentered.take() {
                    let why = "another owner held the lock at a re-entry";
                    crate::watchdog::lose(inner, &hold, LostReason::ServerLost, why);
                }
                if let Some(terms) = queue.filter(|_| self.place.is_some()) {
                    if !answered_queued {
                        return Ok(None);
                    }
                    // Only a grant naming this attempt may come now.
                    self.queued_by = Some((terms, started));
                }
                ttl
            }
        };
        Ok(Some(self.again()))
    }

    /// Contended: from now on take turns with this client's other contenders.
    async fn take_turns(&mut self) -> Result<Then> {
        let lock = self.lock;
        let joined = self
            .ticket
            .insert(lock.client.inner.local_queues.join(&lock.keys.hash));
        let queued = !joined.is_head();
        if queued && let Some(place) = self.place.take() {
            // Only this client's head waits in the server's queue: a grant to a waiter behind
            // it locally would never be claimed. Awaited, so our own next queued attempt comes
            // after it.
            self.queued_by = None;
            place.withdraw().await;
        }
        let listening = &mut self.listening;
        // Not our turn by the wait's end: the loop finds the wait spent before any nap.
        if !lock
            .wait_turn(joined, self.wait, listening, &self.field)
            .await?
        {
            return Ok(Then::Nap);
        }
        if queued {
            // Our turn came after others had theirs: the lock may well be free now.
            self.try_now = !skip_attempt(Some(joined), self.wait);
            return Ok(Then::Attempt);
        }
        // First in line at once: another attempt right now would meet the same holder (it
        // cost W6 and W2 a round trip per wait); listen first.
        self.listen().await
    }

    /// Listens only after a failed attempt (the uncontended path stays one round trip); the
    /// unlock may have happened before we listened, so it attempts again at once, and that
    /// attempt queues us.
    async fn listen(&mut self) -> Result<Then> {
        if self.listening.is_some() {
            return Ok(Then::Nap);
        }
        self.listening = Some(self.lock.subscribe_to_grants(&self.field).await?);
        Ok(Then::Attempt)
    }
}
