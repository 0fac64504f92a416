//! [`Semaphore`]: a counting semaphore shared by every client of the deployment.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::family::queued;
use crate::family::{Attempt, FamilyKeys, Reply, Taken, ask};
use crate::node::{FamilyScript, resent_if_dropped};
use crate::options::{LockOptions, positive};
use crate::shared::Client;
use crate::telemetry::{self, SEMAPHORE};
use crate::terms::Wait;

static SCRIPT: FamilyScript = FamilyScript::new(
    "semaphore",
    concat!(
        include_str!("../../lua/queue.lua"),
        include_str!("../../lua/queue_permits.lua"),
        include_str!("../../lua/semaphore.lua")
    ),
);

/// A counting semaphore (Redisson's `RSemaphore`): a number of permits in Redis that any task
/// of any client takes with [`acquire`](Semaphore::acquire) (or, several at once,
/// [`acquire_with`](Semaphore::acquire_with)) and gives back with
/// [`release`](Semaphore::release).
///
/// Made by [`Client::semaphore`]; cheap to clone. Set the number of permits once with
/// [`try_set_permits`](Semaphore::try_set_permits) (or [`set_permits`](Semaphore::set_permits));
/// a semaphore never set has no permits, so acquisitions wait.
///
/// Permits are not owned: any caller may release them, and a holder that crashes before its
/// release leaks its permits for good. Use a lock with a lease when a crashed worker must not
/// keep capacity.
///
/// Waiters line up in a queue on the server, first come first served, whatever their client:
/// a call that frees permits (a release, a `set`) grants them to the first waiters that fit,
/// in the same script call, and tells each grantee's client alone. The other waiters sleep on,
/// and a newcomer does not pass anybody queued, so a waiter for many permits is not starved by
/// takers of one. In turn, a waiter for more permits than will ever be free holds back every
/// waiter behind it until it stops waiting (as a fair semaphore's does, such as tokio's): give
/// large requests a bounded [`wait`](LockOptions::wait).
///
/// A grantee of another client claims its permits with one more call as soon as it hears of
/// the grant; one that died (or stopped waiting unheard) holds the queue up for the claim
/// lease at most ([`Config::claim_lease`](crate::Config::claim_lease), 2 s), after which its
/// permits go to the next. A release hands permits to a waiter of its own client at once (its
/// reply names the waiter: no message, no claim); a waiter whose process dies right then
/// keeps them, as a holder that crashes does. A waiter's place ends a few seconds after its
/// last attempt (2 s plus the longer of the client's timeout and the claim lease); a live
/// waiter attempts at least once a second.
///
/// ```no_run
/// # async fn demo(client: redlease::Client) -> redlease::Result<()> {
/// let slots = client.semaphore("exports")?;
/// slots.try_set_permits(4).await?;
/// slots.acquire().await?;
/// // ... at most four of these run at once, across every process ...
/// slots.release(1).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Semaphore {
    client: Client,
    keys: Arc<FamilyKeys>,
    /// The channel on which the script tells this client's waiters of their grants.
    grants: Arc<str>,
    /// The server's records of this client's calls whose outcome it has: waiters that took
    /// permits (a release of this client may have handed them over), releases. Its next
    /// release deletes them (else they end by themselves, in three minutes by default).
    handed: Arc<queued::HandedWaiters>,
    /// For how many minutes the server must find the record of a call (from the settings).
    record_minutes: Arc<str>,
}

impl Semaphore {
    pub(crate) fn new(client: Client, name: &str) -> Result<Semaphore> {
        let keys = FamilyKeys::new(&client, name, "semaphore", "released")?;
        let grants = queued::grant_channel(&client, &keys.channel);
        let keys = Arc::new(keys);
        Ok(Semaphore {
            record_minutes: queued::record_minutes(&client).into(),
            handed: client
                .inner
                .local_states
                .of::<queued::HandedWaiters>(&keys.key),
            client,
            keys,
            grants,
        })
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// The Redis key holding the available permits.
    pub fn key(&self) -> &str {
        &self.keys.key
    }

    /// Who waits in its queue on the server, first to be served first, read without changing
    /// anything: as [`Lock::waiters`](crate::Lock::waiters); each [`Waiter::field`](crate::Waiter::field) names one wait,
    /// `<client uuid>:w<n>` (a semaphore's permits have no owner).
    ///
    /// # Errors
    /// [`Error::WrongType`](crate::Error::WrongType), [`Error::Timeout`](crate::Error::Timeout)
    /// or [`Error::Redis`](crate::Error::Redis).
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn waiters(&self) -> Result<Vec<crate::lock::Waiter>> {
        crate::lock::read_waiters(&self.client, &self.keys.key, false).await
    }

    async fn call(&self, op: &str, n: u32) -> Result<Reply> {
        self.client.inner.check_open()?;
        self.send(op, n, &[]).await
    }

    /// Sets the available permits to `permits` whatever they were, and wakes waiters.
    ///
    /// # Errors
    /// When Redis fails, or the key holds something else.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the change made or not: it may already be on its way to
    /// the server. Nothing else is left behind.
    pub async fn set_permits(&self, permits: u32) -> Result<()> {
        self.call("set", permits).await?.count().map(drop)
    }

    /// Sets the available permits to `permits` unless the semaphore was set before: `true` when
    /// this call set them.
    ///
    /// # Errors
    /// When Redis fails, or the key holds something else.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the change made or not: it may already be on its way to
    /// the server. Nothing else is left behind.
    pub async fn try_set_permits(&self, permits: u32) -> Result<bool> {
        self.call("try_set", permits).await?.flag()
    }

    /// The permits available now (0 for a semaphore never set); permits granted to a waiter
    /// that has not claimed them yet are not available.
    ///
    /// # Errors
    /// When Redis fails, or the key does not hold a count of permits.
    ///
    /// # Cancel safety
    /// Cancel-safe: it may tidy expired state on the server, as any later call would.
    pub async fn available(&self) -> Result<u64> {
        self.call("available", 0).await?.count()
    }

    /// Deletes the semaphore from Redis, its queue with it: `true` when it existed. A
    /// semaphore's permits are state you set, so they stay until you delete them; its next use
    /// sees a semaphore never set (no permits).
    ///
    /// # Errors
    /// When Redis fails.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the change made or not: it may already be on its way to
    /// the server. Nothing else is left behind.
    pub async fn delete(&self) -> Result<bool> {
        // With the records of this client's calls (others' end by themselves).
        let own = &*self.client.inner.id_text;
        self.send("delete", 0, &[own]).await?.flag()
    }

    /// Gives back `permits` permits and wakes the waiters.
    ///
    /// Sent once more should its connection drop: the server keeps a record of the call (until
    /// this client's next release, or a few minutes), so the permits are added once whether the
    /// first send ran or not. This client's waiters the first send handed them to then learn
    /// so at their next attempt (within a second) rather than from the reply. (A first send
    /// held up on its way, by a proxy that kept it after the connection dropped, until after
    /// the second would add them again.)
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for zero permits; Redis failures (after which the permits
    /// may have been added or not); a key of another kind.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the permits added or not: the call may already be on its
    /// way to the server. If they were handed to this client's own waiters, those learn so at
    /// their next attempt rather than at once; the server's records of calls it would have
    /// deleted end by themselves (in three minutes by default).
    pub async fn release(&self, permits: u32) -> Result<()> {
        positive("permits", permits)?;
        self.client.inner.check_open()?;
        let n = itoa::Buffer::new().format(permits).to_owned();
        let call = queued::release_name(&self.client);
        let forget = self.handed.take();
        let hand_over = queued::hand_over_text(&self.client, &forget);
        let minutes = &*self.record_minutes;
        let send = |again: bool| {
            let args = [
                "release",
                &n,
                &hand_over,
                &call,
                if again { "1" } else { "0" },
                minutes,
            ];
            async move { self.keys.send_as(&self.client, &SCRIPT, &args).await }
        };
        let reply = match resent_if_dropped(send).await {
            Ok(reply) => reply,
            Err(e) => {
                self.handed.put_back(forget);
                return Err(e);
            }
        };
        self.handed.push(call);
        queued::resolve_handed(&self.client, &self.grants, SCRIPT.name, reply)?
            .count()
            .map(drop)
    }

    /// Takes one permit, waiting as long as it takes. The same as
    /// `acquire_with(LockOptions::new())`.
    ///
    /// A request whose connection drops is sent once more: the server keeps a record of what
    /// each wait took (until this client's next release, or a few minutes), so the second send
    /// answers what the first did, and does not take permits again. A wait that fails, or
    /// whose reply never comes, gives back in the background what its requests took. (A first
    /// send held up on its way, by a proxy that kept it after the connection dropped, until
    /// after the second or the withdrawal would take its permits unheard.)
    ///
    /// # Errors
    /// Redis failures; a key of another kind; [`Error::Shutdown`].
    ///
    /// # Cancel safety
    /// Cancel-safe: dropped while waiting, it leaves nothing; dropped while its request is on
    /// the wire (or answered after the client's timeout), the request's outcome is awaited in
    /// the background and permits it took are given back.
    pub async fn acquire(&self) -> Result<()> {
        self.acquire_with(LockOptions::new()).await
    }

    /// Takes [`permits`](LockOptions::permits) permits (1 by default), waiting at most
    /// [`wait`](LockOptions::wait) (without limit by default).
    ///
    /// ```no_run
    /// # async fn demo(slots: redlease::Semaphore) -> redlease::Result<()> {
    /// use redlease::LockOptions;
    ///
    /// slots.acquire_with(LockOptions::new().permits(3)).await?;
    /// // ... work that needs three slots ...
    /// slots.release(3).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`acquire`](Semaphore::acquire); [`Error::Busy`] when a bounded wait ran out;
    /// [`Error::InvalidArgument`] for zero permits or a lease (permits here have none: see
    /// [`PermitSemaphore`](crate::PermitSemaphore)); [`Error::InvalidDuration`] for an absurd
    /// wait.
    ///
    /// # Cancel safety
    /// As [`acquire`](Semaphore::acquire).
    pub async fn acquire_with(&self, options: LockOptions) -> Result<()> {
        let taken = self.try_acquire_with(options).await?;
        options.held(|| self.keys.name.to_string(), taken.then_some(()))
    }

    /// Takes one permit if one is available now: `true` when taken.
    ///
    /// # Errors
    /// As [`acquire`](Semaphore::acquire).
    ///
    /// # Cancel safety
    /// As [`acquire`](Semaphore::acquire).
    pub async fn try_acquire(&self) -> Result<bool> {
        self.try_acquire_with(LockOptions::once()).await
    }

    /// Takes permits as `options` say (see [`acquire_with`](Semaphore::acquire_with)): `true`
    /// when taken, `false` when the wait ran out. A zero wait is one attempt.
    ///
    /// # Errors
    /// As [`acquire_with`](Semaphore::acquire_with), without [`Error::Busy`].
    ///
    /// # Cancel safety
    /// As [`acquire`](Semaphore::acquire).
    pub async fn try_acquire_with(&self, options: LockOptions) -> Result<bool> {
        let (permits, wait) = options.permits_and_wait()?;
        let series = (self.client.inner.config.lock_label).series(SEMAPHORE, &self.keys.name);
        let measured = telemetry::Acquisition::start(series);
        let taken = self.wait_for_permits(permits, wait).await;
        measured.finish_with(
            matches!(wait, Wait::Once),
            &taken,
            matches!(taken, Ok(true)),
        );
        taken
    }

    /// `permits` permits, waiting as `wait` allows.
    async fn wait_for_permits(&self, permits: u32, wait: Wait) -> Result<bool> {
        let waiter = queued::waiter_name(&self.client);
        let terms = queued::terms(&self.client, wait);
        let withdrawal = self.clone().withdraw(waiter.clone());
        let (waiter_ref, terms) = (&waiter, &terms);
        let taken = queued::wait_in_queue(
            &self.client,
            &self.grants,
            wait,
            &waiter,
            withdrawal,
            None,
            || async move {
                Ok(match self.attempt(permits, waiter_ref, terms).await? {
                    Taken::Granted => Attempt::Done(()),
                    _ => Attempt::Again(None),
                })
            },
        )
        .await?;
        if taken.is_some() {
            // The server's record of what the wait took can go.
            self.handed.push(waiter);
        }
        Ok(taken.is_some())
    }

    /// One acquisition request for `waiter` on queue `terms`, sent once more should its
    /// connection drop; if the caller stops waiting for its answer, what it took is given
    /// back and a place it took is withdrawn (both by the withdrawal).
    async fn attempt(&self, permits: u32, waiter: &Arc<str>, terms: &[String; 2]) -> Result<Taken> {
        self.client.inner.check_open()?;
        let (this, who, terms) = (self.clone(), waiter.clone(), terms.clone());
        let request = async move {
            let n = itoa::Buffer::new().format(permits).to_owned();
            let (keys, client) = (&this.keys, &this.client);
            let minutes = &*this.record_minutes;
            let send = |again: bool| {
                let args = [
                    "acquire",
                    &n,
                    &who,
                    &terms[0],
                    &terms[1],
                    if again { "1" } else { "0" },
                    minutes,
                ];
                async move { keys.send_acquisition(client, &SCRIPT, &args, None).await }
            };
            Ok(match resent_if_dropped(send).await?.flag()? {
                true => Taken::Granted,
                false => Taken::Refused(None),
            })
        };
        let (this, who) = (self.clone(), waiter.clone());
        let give_back = move || async move {
            this.withdraw(who).await;
            Ok::<(), Error>(())
        };
        let (this, who) = (self.clone(), waiter.clone());
        let withdraw = move || this.withdraw(who);
        let request = Box::pin(request);
        ask(&self.client, &self.keys.name, request, give_back, withdraw).await
    }

    /// Takes `waiter` out of the queue and gives back what it took: permits granted to it and
    /// not claimed go to the next, permits its acquisition took unheard back to the count.
    async fn withdraw(self, waiter: Arc<str>) {
        let minutes = &*self.record_minutes;
        let args = [&*waiter, minutes];
        let withdraw = || async { self.send("withdraw", 0, &args).await?.flag() };
        queued::withdraw_retrying(&self.client, &self.keys.name, withdraw).await;
    }

    /// Runs `op` for `n` permits with `extra` arguments, even while the client shuts down (its
    /// own undoing).
    async fn send(&self, op: &str, n: u32, extra: &[&str]) -> Result<Reply> {
        let n = itoa::Buffer::new().format(n).to_owned();
        let mut args = vec![op, &n];
        args.extend_from_slice(extra);
        self.keys.send(&self.client, &SCRIPT, &args).await
    }
}
