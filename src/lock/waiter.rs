//! One acquisition of a lock as the wait loop (`wait.rs`) runs it: each attempt (a grant
//! taken from its message, else a request to the server), what a refusal leads to (taking
//! turns with this client's other contenders, listening), and the waits between attempts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Replicas;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::hold::{Grant, Hold};
use crate::keys::HoldKey;
use crate::local_queue::Ticket;
use crate::node::QueueTerms;
use crate::pubsub::Subscription;
use crate::queue_place::QueuePlace;
use crate::scripts::Acquire;
use crate::telemetry::{self, LostReason};
use crate::terms::{Lease, Wait};
use crate::turns::Acquiring;
use crate::wait::{Attempt, Then, Waiter};

use super::contenders::{self, Napping, Woken};
use super::{Lock, attempt, grant, server_queue};

/// What an acquisition asks for, fixed for its whole wait.
#[derive(Clone, Copy)]
pub(super) struct Terms {
    pub lease: Lease,
    pub wait: Wait,
    pub replicas: Replicas,
    /// Whether this waiter may be handed the lock by a release of this client
    /// (`contenders.rs`).
    pub take_over: bool,
}

/// One acquisition of a lock, as the wait loop runs it.
pub(super) struct LockWaiter<'a> {
    pub lock: &'a Lock,
    pub terms: Terms,
    pub acquiring: &'a Acquiring,
    /// The hold this acquisition re-enters, if any: kept, since if the server says another
    /// owner holds the lock, this is the hold that is gone.
    pub reentered: Option<Arc<Hold>>,
    /// Its turn among this client's contenders for the lock, once it takes turns.
    pub ticket: Option<Ticket<'a>>,
    /// The lock's grant channel of this client, once this waiter listens.
    pub listening: Option<Subscription>,
    /// Our place in the lock's queue on the server, once an attempt may have queued us.
    pub place: Option<QueuePlace>,
    /// The terms and send time of the latest attempt that queued us, if its answer was a
    /// refusal: a grant's message naming it hands us the lock
    /// (`server_queue::grant_from_message`). Cleared when an attempt goes out (it claims any
    /// earlier grant, or finds it gone), when we gave back a hold that may have been the
    /// grant, and with the place.
    pub queued_by: Option<(QueueTerms, Instant)>,
    /// Whether to ask Redis at the next attempt, or only wait for our turn to be handed the
    /// lock.
    pub try_now: bool,
    /// The holder's remaining lease, as the latest refusal told it.
    pub ttl: Option<Duration>,
    pub attempts: &'a mut u32,
    pub measured: &'a mut telemetry::Acquisition,
}

/// Just past a holder's remaining lease `ttl`.
fn past(ttl: Option<Duration>) -> Option<Duration> {
    ttl.map(|t| t + Duration::from_millis(1))
}

impl Waiter for LockWaiter<'_> {
    type Output = LockGuard;

    async fn attempt(&mut self) -> Result<Attempt<LockGuard>> {
        self.claim_or_ask().await
    }

    async fn refused(&mut self) -> Result<Then> {
        self.measured.waits();
        if self.ticket.is_none() && self.reentered.is_none() && !self.lock.strict {
            return self.take_turns().await;
        }
        self.listen_or_nap().await
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
        let napping = Napping {
            lock: self.lock,
            ticket: self.ticket.as_ref(),
            take_over: self.terms.take_over,
            key: self.key(),
            lease: self.terms.lease,
        };
        match contenders::wait_between_attempts(napping, listening, nap).await? {
            Woken::HandedOver(guard) => {
                // Handed over by a release of this client: that was the attempt (the release
                // took our queue entry out).
                *self.attempts += 1;
                self.place_taken();
                Ok(Some(guard))
            }
            // A grant from the queue may have been given back with it.
            Woken::GaveBack => {
                self.queued_by = None;
                Ok(None)
            }
            Woken::ToAttempt => Ok(None),
        }
    }
}

impl<'a> LockWaiter<'a> {
    /// The lock and owner of this acquisition (its turn's: one value for the whole wait).
    fn key(&self) -> &'a HoldKey {
        self.acquiring.key()
    }

    /// The owner's field in the lock.
    fn field(&self) -> &'a Arc<str> {
        &self.acquiring.key().field
    }

    /// One attempt ([`Waiter::attempt`]): a grant its message told of, else a request to the
    /// server.
    async fn claim_or_ask(&mut self) -> Result<Attempt<LockGuard>> {
        // Shutdown wakes every waiter; none may take a lock the stopped watchdog won't keep.
        self.lock.client.inner.check_open()?;
        if let Some(guard) = self.grant_from_message()? {
            return Ok(self.granted(guard));
        }
        if !std::mem::replace(&mut self.try_now, true) {
            // Skipped for a hold handed to a task of ours: wait for it at most while it lasts.
            self.ttl = Some(contenders::handed_hold_left(
                self.lock,
                self.ticket.as_ref(),
            ));
            return Ok(self.again());
        }
        // Held until the grant is registered, so this owner's grants register in the order
        // the server applied them (`turns.rs`).
        let _turn = self.acquiring.turn().await;
        *self.attempts += 1;
        let started = Instant::now();
        let queue = self.queue_terms();
        let (lock, reentry) = (self.lock, self.reentered.is_some());
        let (lease_ms, replicas) = (self.terms.lease.ms(), self.terms.replicas);
        let (answer, answered) =
            attempt::send(lock, self.key(), lease_ms, reentry, replicas, queue).await?;
        match answer {
            Acquire::Acquired { count, token } => self.acquired(count, token, started).await,
            Acquire::AlreadyHeld => Err(Error::WouldDeadlock {
                name: lock.keys.name.to_string(),
            }),
            Acquire::HeldElsewhere { ttl } => Ok(self.held_elsewhere(ttl, started, answered)),
        }
    }

    /// The lock from a grant's message naming our latest queued attempt, if one came and can
    /// be trusted alone; else the next attempt claims it.
    fn grant_from_message(&mut self) -> Result<Option<LockGuard>> {
        let Some(listening) = self.listening.as_ref() else {
            return Ok(None);
        };
        let nonce = self.queued_by.map(|(terms, _)| terms.nonce);
        let Some(token) = listening.take_grant(self.field(), nonce) else {
            return Ok(None);
        };
        let Some((terms, sent)) = self.queued_by else {
            return Ok(None);
        };
        // With another operation of this owner on the lock in flight, the grant is claimed
        // with an attempt instead (`Acquiring::alone`).
        let (lock, lease) = (self.lock, self.terms.lease);
        let taken = match self.acquiring.alone() {
            true => server_queue::grant_from_message(lock, self.key(), lease, terms, sent, token)?,
            false => None,
        };
        if taken.is_none() {
            // Claimed by the next attempt, now.
            self.try_now = true;
        }
        Ok(taken)
    }

    /// The terms to queue with, if this attempt queues: a waiter (listening: past its first
    /// attempt) does, and a strict lock's waiter from its first attempt on (`Lock::strict`).
    /// Arms our place first, so a wait that ends now withdraws whatever the attempt wrote.
    fn queue_terms(&mut self) -> Option<QueueTerms> {
        let lock = self.lock;
        let queue = ((self.listening.is_some() || lock.strict)
            && self.reentered.is_none()
            && !matches!(self.terms.wait, Wait::Once))
        .then(|| server_queue::terms(lock, self.terms.lease));
        // A grant to an earlier attempt of ours is claimed by this one, or gone.
        self.queued_by = None;
        if queue.is_some() && self.place.is_none() {
            self.place = Some(QueuePlace::in_lock(&lock.client, &lock.keys, self.field()));
        }
        queue
    }

    /// The attempt sent at `started` was granted: its guard, or (spent on arrival and not
    /// confirmed) another attempt within the wait.
    async fn acquired(
        &mut self,
        count: u32,
        token: u64,
        started: Instant,
    ) -> Result<Attempt<LockGuard>> {
        let (lock, lease) = (self.lock, self.terms.lease);
        // A re-entry joins a hold whose validity stands on its own: confirming it with a
        // renewal on this acquisition's lease could shorten the key under the earlier guards.
        let since = match count {
            1 => grant::confirmed(lock, self.field(), lease, started).await?,
            _ => Some(started),
        };
        let Some(since) = since else {
            self.ttl = Some(Duration::ZERO);
            return Ok(self.again());
        };
        // The script took our place out with the grant: marked before registering, which
        // fails at shutdown (the hold is given back then, and a withdrawal would take out a
        // waiter of the same owner).
        self.place_taken();
        let key = self.key();
        let guard = grant::guard(lock, key, lease, Grant::Counted(count), token, since)?;
        Ok(Attempt::Done(guard))
    }

    /// Another owner holds the lock, for `ttl` more, as the attempt sent at `started` found;
    /// `answered`: the queue terms of the request that answered (after a dropped connection,
    /// its retry's, under a nonce of its own), if it queued.
    fn held_elsewhere(
        &mut self,
        ttl: Option<Duration>,
        started: Instant,
        answered: Option<QueueTerms>,
    ) -> Attempt<LockGuard> {
        self.reentered_hold_gone();
        if let Some(terms) = answered.filter(|_| self.place.is_some()) {
            // Only a grant naming this attempt may come now.
            self.queued_by = Some((terms, started));
        }
        self.ttl = ttl;
        self.again()
    }

    /// Another owner holds the lock: the hold we re-entered is gone on the server (forced, or
    /// lost in a restart or failover). Its guard is told now rather than at the next renewal,
    /// and this acquisition waits as a fresh one: queued, not napping until the other holder's
    /// lease ends. Detached even if its validity ran out meanwhile (nothing else detaches a
    /// fixed lease), so its release cannot touch the hold this acquisition takes.
    fn reentered_hold_gone(&mut self) {
        if let Some(hold) = self.reentered.take() {
            let why = "another owner held the lock at a re-entry";
            crate::watchdog::lose(&self.lock.client.inner, &hold, LostReason::ServerLost, why);
        }
    }

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

    /// Contended: from now on take turns with this client's other contenders.
    async fn take_turns(&mut self) -> Result<Then> {
        let (lock, field, key) = (self.lock, self.field(), self.key());
        let wait = self.terms.wait;
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
        if !contenders::wait_turn(lock, joined, wait, listening, field).await? {
            return Ok(Then::Nap);
        }
        if queued {
            // Our turn came after others had theirs: the lock may well be free now, or held
            // by our own owner (a task sharing it was handed the lock): a re-entry.
            let skip = contenders::skip_attempt(Some(joined), wait);
            self.reentered = contenders::held_after_turn(lock, key, &mut self.ticket);
            self.try_now = self.reentered.is_some() || !skip;
            return Ok(Then::Attempt);
        }
        // First in line at once: another attempt right now would meet the same holder (it
        // cost W6 and W2 a round trip per wait); listen first.
        self.listen_or_nap().await
    }

    /// Listens only after a failed attempt (the uncontended path stays one round trip); the
    /// unlock may have happened before we listened, so it attempts again at once, and that
    /// attempt queues us.
    async fn listen_or_nap(&mut self) -> Result<Then> {
        if self.listening.is_some() {
            return Ok(Then::Nap);
        }
        self.listening = Some(server_queue::subscribe(self.lock, self.field()).await?);
        Ok(Then::Attempt)
    }
}
