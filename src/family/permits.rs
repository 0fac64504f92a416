//! [`PermitSemaphore`]: a semaphore whose permits have an id and a lease.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::family::kept::Kept;
use crate::family::queued;
use crate::family::{Attempt, FamilyKeys, Reply, Taken, ask};
use crate::node::{FamilyScript, resent_if_dropped};
use crate::options::LockOptions;
use crate::release::{ServerHalf, finish_unlock, release_dropped};
use crate::shared::Client;
use crate::telemetry::{self, PERMIT};
use crate::terms::{Lease, Wait};
use redis::Value;

static SCRIPT: FamilyScript = FamilyScript::new(
    "permits",
    concat!(
        include_str!("../../lua/queue.lua"),
        include_str!("../../lua/queue_permits.lua"),
        include_str!("../../lua/permits.lua")
    ),
);

/// A semaphore whose permits expire (Redisson's `RPermitExpirableSemaphore`): each permit given
/// out has an id and a lease on the server's clock, so a holder that crashes gives its permit
/// back when the lease ends. A plain [`Semaphore`](crate::Semaphore) cannot: its permits are a
/// bare count, and a crashed holder's are gone for good.
///
/// Made by [`Client::permit_semaphore`]; cheap to clone. Set the number of permits with
/// [`try_set_permits`](PermitSemaphore::try_set_permits); take one with
/// [`acquire`](PermitSemaphore::acquire), which gives a [`Permit`]. Without an explicit lease the
/// permit's lease is the client's watchdog lease, renewed by the client's watchdog every third
/// of it while the `Permit` lives; [`Permit::lost`] resolves if a renewal finds it gone.
///
/// Waiters line up in a queue on the server, first come first served, whatever their client,
/// as a [`Semaphore`](crate::Semaphore)'s do: a permit freed (released, or its lease ran out)
/// goes to the first waiter in the same script call, and only that waiter's client is told.
/// A grantee of another client that died holds its permit for the claim lease at most
/// ([`Config::claim_lease`](crate::Config::claim_lease), 2 s); a permit a release hands to a
/// waiter of its own client has that waiter's lease, as a permit it took itself.
///
/// ```no_run
/// # async fn demo(client: redlease::Client) -> redlease::Result<()> {
/// let workers = client.permit_semaphore("gpu")?;
/// workers.try_set_permits(2).await?;
/// let permit = workers.acquire().await?;
/// // ... at most two holders; a crashed one's permit returns after its lease ...
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PermitSemaphore {
    client: Client,
    keys: Arc<FamilyKeys>,
    /// The channel on which the script tells this client's waiters of their grants.
    grants: Arc<str>,
}

/// One permit of a [`PermitSemaphore`]. Give it back with [`release`](Permit::release);
/// dropping it releases in the background.
#[must_use = "dropping the permit releases it"]
pub struct Permit {
    semaphore: PermitSemaphore,
    id: Arc<str>,
    kept: Kept,
    released: bool,
}

impl PermitSemaphore {
    pub(crate) fn new(client: Client, name: &str) -> Result<PermitSemaphore> {
        let keys = FamilyKeys::new(&client, name, "permits", "released")?;
        let grants = queued::grant_channel(&client, &keys.channel);
        Ok(PermitSemaphore {
            client,
            keys: Arc::new(keys),
            grants,
        })
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// The Redis hash holding the total and the permits given out.
    pub fn key(&self) -> &str {
        &self.keys.key
    }

    /// Who waits in its queue on the server, first to be served first, read without changing
    /// anything: as [`Lock::waiters`](crate::Lock::waiters); each [`Waiter::field`](crate::Waiter::field) is the permit id the
    /// waiter asks for.
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

    async fn call(&self, op: &str, arg: &str, lease_ms: u64) -> Result<Reply> {
        self.client.inner.check_open()?;
        self.send(op, arg, lease_ms).await
    }

    /// [`call`](Self::call) even while the client shuts down (its releases).
    async fn send(&self, op: &str, arg: &str, lease_ms: u64) -> Result<Reply> {
        self.send_with(op, arg, lease_ms, &[]).await
    }

    /// [`send`](Self::send) with `extra` arguments.
    async fn send_with(&self, op: &str, arg: &str, lease_ms: u64, extra: &[&str]) -> Result<Reply> {
        let lease = itoa::Buffer::new().format(lease_ms).to_owned();
        let mut args = vec![op, arg, &lease];
        args.extend_from_slice(extra);
        self.keys.send(&self.client, &SCRIPT, &args).await
    }

    /// Sets the number of permits in all (given out ones included) and wakes waiters.
    ///
    /// # Errors
    /// Redis failures, or a key of another kind.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the change made or not: it may already be on its way to
    /// the server. Nothing else is left behind.
    pub async fn set_permits(&self, permits: u32) -> Result<()> {
        let n = itoa::Buffer::new().format(permits).to_owned();
        self.call("set", &n, 0).await?.count().map(drop)
    }

    /// Sets the number of permits unless it was set before: `true` when this call set it.
    ///
    /// # Errors
    /// Redis failures, or a key of another kind.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the change made or not: it may already be on its way to
    /// the server. Nothing else is left behind.
    pub async fn try_set_permits(&self, permits: u32) -> Result<bool> {
        let n = itoa::Buffer::new().format(permits).to_owned();
        self.call("try_set", &n, 0).await?.flag()
    }

    /// Deletes the semaphore from Redis, permits given out included (their holders find them
    /// gone at their next renewal, and are told they are lost): `true` when it existed. The
    /// total is state you set, so it stays until you delete it.
    ///
    /// # Errors
    /// Redis failures.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the change made or not: it may already be on its way to
    /// the server. Nothing else is left behind.
    pub async fn delete(&self) -> Result<bool> {
        self.keys.delete(&self.client, &["q", "qd"]).await
    }

    /// Permits free now: the total minus the permits given out whose lease has not ended.
    ///
    /// # Errors
    /// Redis failures, or a key of another kind.
    ///
    /// # Cancel safety
    /// Cancel-safe: it may tidy expired state on the server, as any later call would.
    pub async fn available(&self) -> Result<u64> {
        self.call("available", "", 0).await?.count()
    }

    crate::options::ways_to_ask!(
        Permit,
        name,
        [acquire, acquire_with, try_acquire, try_acquire_with]
        /// Takes a permit, waiting as long as it takes; its lease is renewed while it lives. The
        /// same as `acquire_with(LockOptions::new())`.
        ///
        /// # Errors
        /// Redis failures, a key of another kind, [`Error::Shutdown`].
        ///
        /// # Cancel safety
        /// Cancel-safe: dropped while waiting it leaves nothing; dropped while its request is on the
        /// wire (or answered after the client's timeout), a permit granted meanwhile is released
        /// in the background, if the reply comes within the permit's lease.
    );

    /// Takes a permit on `options`' terms: wait at most `wait`, and hold it at most `lease`
    /// (no renewal); `None` when the wait ran out.
    ///
    /// # Errors
    /// As [`acquire`](Self::acquire), [`Error::InvalidDuration`] for a zero or absurd lease or
    /// wait, and [`Error::InvalidArgument`] for permits other than one (each permit has its own
    /// id and lease: take several one by one).
    ///
    /// # Cancel safety
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire_with(&self, options: LockOptions) -> Result<Option<Permit>> {
        let watchdog = self.client.inner.config.watchdog_lease;
        let (lease, wait) = options.terms(watchdog)?;
        let series = (self.client.inner.config.lock_label).series(PERMIT, &self.keys.name);
        let measured = telemetry::Acquisition::start(series);
        let granted = self.wait_for_permit(lease, wait).await;
        measured.finish_with(
            matches!(wait, Wait::Once),
            &granted,
            matches!(granted, Ok(Some(_))),
        );
        granted
    }

    /// A permit on `lease` terms, waiting as `wait` allows.
    async fn wait_for_permit(&self, lease: Lease, wait: Wait) -> Result<Option<Permit>> {
        // The waiter's name is its permit's id.
        let id = queued::waiter_name(&self.client);
        let terms = queued::terms(&self.client, wait);
        let withdrawal = self.clone().withdraw(id.clone());
        let (id_ref, terms_ref) = (&id, &terms);
        let granted = queued::wait_in_queue(
            &self.client,
            &self.grants,
            wait,
            &id,
            withdrawal,
            None,
            || async move {
                Ok(match self.attempt(id_ref, lease, terms_ref).await? {
                    Taken::Granted => Attempt::Done(()),
                    Taken::Refused(nap) => Attempt::Again(nap),
                    Taken::WouldDeadlock => Attempt::Again(None),
                })
            },
        )
        .await?;
        Ok(granted.map(|started| self.permit(id, lease, started)))
    }

    fn permit(&self, id: Arc<str>, lease: Lease, started: Instant) -> Permit {
        let renew = {
            let (semaphore, id) = (self.clone(), id.clone());
            let lease_ms = lease.ms();
            move || {
                let (semaphore, id) = (semaphore.clone(), id.clone());
                async move { semaphore.call("renew", &id, lease_ms).await?.flag() }
            }
        };
        let release = {
            let (semaphore, id) = (self.clone(), id.clone());
            move || {
                let (semaphore, id) = (semaphore.clone(), id.clone());
                async move { semaphore.give_back(&id, false).await.map(drop) }
            }
        };
        let name = self.keys.name.clone();
        // The permit's field in the semaphore's hash (`lua/permits.lua`).
        let presence = crate::node::Presence {
            key: self.keys.key.clone(),
            field: format!("p:{id}").into(),
            value: None,
        };
        let kept = Kept::new(
            &self.client,
            (PERMIT, name),
            lease,
            started,
            renew,
            release,
            presence,
        );
        Permit {
            semaphore: self.clone(),
            id,
            kept,
            released: false,
        }
    }

    /// One acquisition request for permit `id` on queue `terms`; if the caller stops waiting
    /// for its answer, a permit granted is released and a place taken is withdrawn.
    async fn attempt(&self, id: &Arc<str>, lease: Lease, terms: &[String; 2]) -> Result<Taken> {
        self.client.inner.check_open()?;
        let (this, request_id, terms) = (self.clone(), id.clone(), terms.clone());
        let request = async move {
            let duration = Some(lease.duration());
            let lease = itoa::Buffer::new().format(lease.ms()).to_owned();
            let args = ["acquire", &request_id, &lease, &terms[0], &terms[1]];
            // Sent again after a dropped connection: a permit the first send took (or a grant
            // from the queue) is found under the same id and claimed, not taken twice.
            let send = |_| {
                let keys = &this.keys;
                keys.send_acquisition(&this.client, &SCRIPT, &args, duration)
            };
            let reply = resent_if_dropped(send).await?;
            Ok(reply.taken())
        };
        let (this, permit) = (self.clone(), id.clone());
        let give_back = move || async move { this.give_back(&permit, false).await.map(drop) };
        let (this, waiter) = (self.clone(), id.clone());
        let withdraw = move || this.withdraw(waiter);
        let request = Box::pin(request);
        ask(&self.client, &self.keys.name, request, give_back, withdraw).await
    }

    /// Takes waiter `id` out of the queue; a permit granted to it and not claimed goes to the
    /// next.
    async fn withdraw(self, id: Arc<str>) {
        let withdraw = || async { self.send("withdraw", &id, 0).await?.flag() };
        queued::withdraw_retrying(&self.client, &self.keys.name, withdraw).await;
    }

    /// Gives permit `id` back: `false` when it was not given out (its lease ended). `checked`:
    /// refused once the client shuts down (shutdown's own release is not). This client's
    /// waiters the permit is handed to are told from the reply.
    ///
    /// Sent again after a dropped connection: a second send that finds the permit gone was
    /// preceded by the first, which released it (an id is never given out twice; a permit whose
    /// lease ran out is known lost before its release is sent).
    async fn give_back(&self, id: &str, checked: bool) -> Result<bool> {
        if checked {
            self.client.inner.check_open()?;
        }
        let hand_over = queued::hand_over_arg(&self.client, None);
        let args = ["release", id, "0", &hand_over];
        let send = |again: bool| {
            let reply = self.keys.send_as::<Value>(&self.client, &SCRIPT, &args);
            async move { reply.await.map(|reply| (reply, again)) }
        };
        let (reply, again) = resent_if_dropped(send).await?;
        let released = queued::resolve_handed(&self.client, &self.grants, SCRIPT.name, reply)?;
        Ok(released.flag()? || again)
    }
}

impl Permit {
    /// The name of the semaphore this permit belongs to.
    pub fn semaphore_name(&self) -> &str {
        &self.semaphore.keys.name
    }

    /// The permit's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Gives the permit back and wakes waiters.
    ///
    /// # Errors
    /// As [`LockGuard::unlock`](crate::LockGuard::unlock): [`Error::LeaseLost`] when the permit
    /// was lost while held; [`Error::Shutdown`] when the client was shut down (it released
    /// everything); [`Error::Timeout`] or [`Error::Redis`] when Redis failed (the lease then
    /// frees the permit); [`Error::NoRuntime`] outside a tokio runtime (given back in the
    /// background all the same).
    ///
    /// # Cancel safety
    /// Dropping the future still completes the release in the background.
    pub async fn release(mut self) -> Result<()> {
        self.released = true;
        let lost = self.kept.is_lost();
        self.kept.closing();
        let semaphore = &self.semaphore;
        let release: Option<ServerHalf> = Some(Box::pin(self.give_back()));
        finish_unlock(&semaphore.client, &semaphore.keys.name, lost, release).await
    }

    fn give_back(&self) -> impl Future<Output = Result<bool>> + Send + 'static {
        let (semaphore, id) = (self.semaphore.clone(), self.id.clone());
        async move {
            // Sent even while the client shuts down, whose drain no longer sees this permit
            // (`Kept::closing`), and then answered as a shut-down client answers.
            let released = semaphore.give_back(&id, false).await;
            semaphore.client.inner.check_open()?;
            released
        }
    }

    /// Resolves when the permit is known lost (see [`is_lost`](Permit::is_lost)).
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.kept.lost()
    }

    /// Whether the permit is known lost: a renewal found it gone, its validity ran out before a
    /// renewal confirmed it (for a fixed lease: the lease ran out), or the client shut down.
    pub fn is_lost(&self) -> bool {
        self.kept.is_lost()
    }

    /// Until when the permit is known valid.
    pub fn valid_until(&self) -> Instant {
        self.kept.valid_until()
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.released {
            let semaphore = &self.semaphore;
            let name = semaphore.keys.name.clone();
            release_dropped(&semaphore.client, name, self.give_back());
        }
    }
}

impl std::fmt::Debug for Permit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("semaphore", &self.semaphore.keys.name)
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}
