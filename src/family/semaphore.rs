//! [`Semaphore`]: a counting semaphore shared by every client of the deployment.

use std::sync::Arc;

#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::family::{Attempt, FamilyKeys, Taken, Wake, ask, positive, wait_for};
use crate::node::FamilyScript;
use crate::scope::LockOptions;
use crate::shared::Client;

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
/// Waiters sleep on the semaphore's channel (one subscriber connection per client) and try again
/// when permits are released or set, or after at most a second without a message. Every release
/// wakes every waiter, and there is no queue: a waiter for many permits may wait while others
/// take them one by one.
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
}

impl Semaphore {
    pub(crate) fn new(client: Client, name: &str) -> Result<Semaphore> {
        let keys = FamilyKeys::new(&client, name, "semaphore", "released")?;
        Ok(Semaphore {
            client,
            keys: Arc::new(keys),
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
        let n = itoa::Buffer::new().format(n).to_owned();
        self.keys.send(&self.client, &SCRIPT, &[op, &n]).await
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

    /// The permits available now (0 for a semaphore never set).
    ///
    /// # Errors
    /// When Redis fails, or the key does not hold a count of permits.
    pub async fn available(&self) -> Result<u64> {
        self.keys.count(&self.client, SCRIPT.name).await
    }

    /// Deletes the semaphore from Redis: `true` when it existed. A semaphore's permits are
    /// state you set, so they stay until you delete them; its next use sees a semaphore never
    /// set (no permits).
    ///
    /// # Errors
    /// When Redis fails.
    pub async fn delete(&self) -> Result<bool> {
        self.keys.delete(&self.client).await
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
        let taken = wait_for(
            &self.client,
            &self.keys.channel,
            wait,
            Wake::PERMITS,
            || async {
                Ok(match self.attempt(permits).await? {
                    Taken::Granted => Attempt::Done(()),
                    _ => Attempt::Again(None),
                })
            },
        )
        .await?;
        Ok(taken.is_some())
    }

    /// One acquisition request; if the caller stops waiting for its answer, permits it took are
    /// given back in the background.
    async fn attempt(&self, permits: u32) -> Result<Taken> {
        let this = self.clone();
        let request = async move {
            Ok(match this.call("acquire", permits).await? {
                1 => Taken::Granted,
                _ => Taken::Refused(None),
            })
        };
        let this = self.clone();
        let give_back = move || async move { this.release(permits).await };
        ask(&self.client, &self.keys.name, request, give_back).await
    }
}
