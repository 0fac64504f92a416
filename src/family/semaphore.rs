//! [`Semaphore`]: a counting semaphore shared by every client of the deployment.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::family::{Attempt, FamilyKeys, NAP, Wake, positive, wait_for};
use crate::node::FamilyScript;
use crate::scope::LockOptions;
use crate::shared::Client;
use crate::task::{FinishOnDrop, spawn_from_drop};
use crate::terms::Wait;

static SCRIPT: FamilyScript =
    FamilyScript::new("semaphore", include_str!("../../lua/semaphore.lua"));

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
/// takers of one. A grantee claims its permits with one more call as soon as it hears of
/// the grant; a waiter that died (or stopped waiting unheard) holds the queue up for 2 s at
/// most ([`Config::claim_lease`](crate::Config::claim_lease)) once granted, and its place
/// ends 3 s after its last attempt (a waiter attempts at least once a second).
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
}

/// How long a waiter's place in the queue lives past its latest attempt: a waiter attempts at
/// least once per [`NAP`], so only one that died (or hangs) loses its place.
const PLACE_LIFE: Duration = Duration::from_secs(3 * NAP.as_secs());

/// Numbers the waits of this process: a waiter in the queue is `<client id>:s<n>`.
static WAITS: AtomicU64 = AtomicU64::new(0);

impl Semaphore {
    pub(crate) fn new(client: Client, name: &str) -> Result<Semaphore> {
        let keys = FamilyKeys::new(&client, name, "semaphore", "released")?;
        let grants = format!("{}:{}", keys.channel, client.inner.id_text).into();
        Ok(Semaphore {
            client,
            keys: Arc::new(keys),
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

    async fn call(&self, op: &str, n: u32) -> Result<i64> {
        self.client.inner.check_open()?;
        self.send(op, n, &[]).await
    }

    /// Sets the available permits to `permits` whatever they were, and wakes waiters.
    ///
    /// # Errors
    /// When Redis fails, or the key holds something else.
    pub async fn set_permits(&self, permits: u32) -> Result<()> {
        self.call("set", permits).await.map(drop)
    }

    /// Sets the available permits to `permits` unless the semaphore was set before: `true` when
    /// this call set them.
    ///
    /// # Errors
    /// When Redis fails, or the key holds something else.
    pub async fn try_set_permits(&self, permits: u32) -> Result<bool> {
        Ok(self.call("try_set", permits).await? == 1)
    }

    /// The permits available now (0 for a semaphore never set); permits granted to a waiter
    /// that has not claimed them yet are not available.
    ///
    /// # Errors
    /// When Redis fails, or the key does not hold a count of permits.
    pub async fn available(&self) -> Result<u64> {
        let available = self.call("available", 0).await?;
        Ok(u64::try_from(available).unwrap_or(0))
    }

    /// Deletes the semaphore from Redis, its queue with it: `true` when it existed. A
    /// semaphore's permits are state you set, so they stay until you delete them; its next use
    /// sees a semaphore never set (no permits).
    ///
    /// # Errors
    /// When Redis fails.
    pub async fn delete(&self) -> Result<bool> {
        let key = &*self.keys.key;
        let queue = [format!("{key}:q"), format!("{key}:qd"), format!("{key}:g")];
        let deleted: u64 = (self.client.inner.node)
            .query(redis::cmd("DEL").arg(key).arg(&queue))
            .await?;
        Ok(deleted > 0)
    }

    /// Gives back `permits` permits and wakes the waiters.
    ///
    /// Not retried: a reply lost with its connection leaves unknown whether the permits were
    /// added, and adding them twice would let too many holders in.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for zero permits; Redis failures; a key of another kind.
    pub async fn release(&self, permits: u32) -> Result<()> {
        positive("permits", permits)?;
        self.call("release", permits).await.map(drop)
    }

    /// Takes one permit, waiting as long as it takes. The same as
    /// `acquire_with(LockOptions::new())`.
    ///
    /// # Errors
    /// Redis failures; a key of another kind; [`Error::Shutdown`].
    ///
    /// # Cancel safety
    /// Cancel-safe: dropped while waiting, it leaves nothing; dropped while its request is on
    /// the wire, the request's outcome is awaited in the background and permits it took are
    /// released.
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
        let waiter: Arc<str> = format!(
            "{}:s{}",
            self.client.inner.id_text,
            WAITS.fetch_add(1, Ordering::Relaxed)
        )
        .into();
        // A single attempt is never queued.
        let queued = !matches!(wait, Wait::Once);
        let place = Place {
            semaphore: self.clone(),
            waiter: waiter.clone(),
            armed: queued,
        };
        let taken = wait_for(
            &self.client,
            &self.grants,
            wait,
            Wake::Grant(waiter.clone()),
            || async {
                Ok(match self.attempt(permits, &waiter, queued).await? {
                    true => Attempt::Done(()),
                    false => Attempt::Again(None),
                })
            },
        )
        .await?;
        match taken {
            // The script took the place out with the permits.
            Some(()) => place.disarm(),
            // Withdrawn before the caller hears of it: nothing of the wait is left.
            None => place.withdraw().await,
        }
        Ok(taken.is_some())
    }

    /// One acquisition request for `waiter` (`queued`: refused, it takes or keeps its place in
    /// the queue). If the caller stops waiting for its answer, permits it took are released and
    /// a place it took is withdrawn, in the background once the answer is in.
    async fn attempt(&self, permits: u32, waiter: &Arc<str>, queued: bool) -> Result<bool> {
        self.client.inner.check_open()?;
        let (this, who) = (self.clone(), waiter.clone());
        let request = async move {
            let life = match queued {
                true => PLACE_LIFE.as_millis() as u64,
                false => 0,
            };
            let claim = this.client.inner.config.claim_lease.as_millis();
            let (life, claim) = (life.to_string(), claim.to_string());
            let taken = this
                .send("acquire", permits, &[&who, &life, &claim])
                .await?;
            Ok(taken == 1)
        };
        let (this, who) = (self.clone(), waiter.clone());
        let abandoned = move |taken: Result<bool>| async move {
            let undone = match taken {
                Ok(true) => this.send("release", permits, &[]).await,
                _ => this.send("withdraw", 0, &[&who]).await,
            };
            if let Err(e) = undone {
                tracing::warn!(semaphore = %this.keys.name, error = %e, "could not undo an abandoned acquisition; a place ends 3 s after it was taken, permits stay taken");
            }
        };
        FinishOnDrop::new(request, abandoned)
            .tracked(&self.client.inner.background)
            .await
    }

    /// Runs `op` for `n` permits with `extra` arguments, even while the client shuts down (its
    /// own undoing).
    async fn send(&self, op: &str, n: u32, extra: &[&str]) -> Result<i64> {
        let n = itoa::Buffer::new().format(n).to_owned();
        let mut args = vec![op, &n];
        args.extend_from_slice(extra);
        self.keys.send(&self.client, &SCRIPT, &args).await
    }
}

/// A waiter's place in the semaphore's queue; withdrawn unless [`disarm`](Place::disarm)ed,
/// in the background when dropped: the entry goes, and permits granted to it go to the next.
struct Place {
    semaphore: Semaphore,
    waiter: Arc<str>,
    armed: bool,
}

impl Place {
    fn disarm(mut self) {
        self.armed = false;
    }

    async fn withdraw(mut self) {
        if self.armed {
            self.armed = false;
            self.semaphore.withdraw(&self.waiter).await;
        }
    }
}

impl Semaphore {
    async fn withdraw(&self, waiter: &str) {
        if let Err(e) = self.send("withdraw", 0, &[waiter]).await {
            tracing::debug!(semaphore = %self.keys.name, error = %e, "could not withdraw from the queue; the place ends 3 s after its last attempt");
        }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (semaphore, waiter) = (self.semaphore.clone(), self.waiter.clone());
        let background = semaphore.client.inner.background.clone();
        spawn_from_drop(
            &background,
            async move { semaphore.withdraw(&waiter).await },
        );
    }
}
