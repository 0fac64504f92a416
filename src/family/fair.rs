//! [`FairLock`]: a [`Lock`] whose every attempt respects the waiter queue on the server.

use crate::error::Result;
use crate::guard::LockGuard;
use crate::lock::Lock;
use crate::options::LockOptions;
use crate::owner::Owner;
use crate::shared::Client;

/// The guard of a [`FairLock`]: a [`LockGuard`].
pub type FairGuard = LockGuard;

/// A fair lock (Redisson's `RFairLock`): owners get the lock in the order they first asked for
/// it, across every client and process, newcomers included.
///
/// Made by [`Client::fair_lock`]; cheap to clone. It is a [`Lock`] in strict mode, on the same
/// keys (`P:{N}`, its queue `P:{N}:q`, `P:{N}:qd`): a `FairLock` and a `Lock` of one name are
/// one lock. Strict mode changes one thing: every attempt respects the waiter queue on the
/// server (`docs/internals.md`). A waiting acquisition queues from its first attempt, and a
/// single attempt ([`try_lock`](FairLock::try_lock)) never takes a free lock while anybody live
/// is queued (nor takes a place itself). A plain `Lock`'s attempts of the same name may still
/// take a free lock ahead of the queue; use `FairLock` handles everywhere for strict order.
///
/// Reentrant per [`Owner`] (the current task by default, or
/// [`with_owner`](FairLock::with_owner)). The guard is a [`LockGuard`] ([`FairGuard`]): it renews
/// its lease while it lives unless taken with an explicit lease.
///
/// - **Herd-free**: a release grants the lock to the first queued waiter and tells only that
///   waiter's client, which holds it from that message on.
/// - **No stale places**: a waiter that gives up leaves the queue at once; one that crashed is
///   granted the lock and holds it for the claim lease
///   ([`Config::claim_lease`](crate::Config::claim_lease), 2 s) at most, after which the next
///   waiter takes it; one that asked for a fixed lease is granted that lease (it holds the lock
///   from the grant's message, with no call of its own), so it holds the others up for its
///   lease, as a crashed holder does.
/// - **Strict order**: every waiter, whatever its client, waits in the server's queue from its
///   first attempt and is served in that order; a newcomer never takes the lock ahead of it
///   (a single attempt is refused while anybody is queued).
///
/// ```no_run
/// # async fn demo(client: redlease::Client) -> redlease::Result<()> {
/// let turn = client.fair_lock("printer")?;
/// let guard = turn.lock().await?;
/// // ... first come, first served ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FairLock {
    lock: Lock,
}

impl FairLock {
    pub(crate) fn new(client: Client, name: &str) -> Result<FairLock> {
        let mut lock = Lock::new(client, name)?;
        lock.strict = true;
        Ok(FairLock { lock })
    }

    /// This handle acquires for `owner` (from any task) instead of the current task.
    #[must_use]
    pub fn with_owner(self, owner: Owner) -> Self {
        FairLock {
            lock: self.lock.with_owner(owner),
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.lock.name()
    }

    /// The Redis hash holding the holder: `P:{N}`, the same as [`Lock::key`]'s.
    pub fn key(&self) -> &str {
        self.lock.key()
    }

    /// Who waits in the lock's queue, first to be served first: [`Lock::waiters`].
    ///
    /// # Errors
    /// As [`Lock::waiters`].
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn waiters(&self) -> Result<Vec<crate::lock::Waiter>> {
        self.lock.waiters().await
    }

    /// The server's view of the lock, its waiters included: [`Lock::status`].
    ///
    /// # Errors
    /// As [`Lock::status`].
    ///
    /// # Cancel safety
    /// Cancel-safe: it only reads.
    pub async fn status(&self) -> Result<crate::lock::LockStatus> {
        self.lock.status().await
    }

    crate::options::ways_to_ask!(
        LockGuard,
        name,
        [lock, lock_with, try_lock, try_lock_with]
        /// Takes the lock, waiting in the queue as long as it takes; the guard renews its lease
        /// while it lives. The same as `lock_with(LockOptions::new())`.
        ///
        /// # Errors
        /// As [`Lock::lock`].
        ///
        /// # Cancel safety
        /// Cancel-safe: dropped while waiting it leaves the queue (in the background); dropped
        /// while its request is on the wire, a grant that arrives is given back.
    );

    /// Takes the lock on `options`' terms: wait at most `wait` (in the queue), hold at most
    /// `lease` (no renewal); `None` when the wait ran out, and the waiter left the queue. A
    /// single attempt (a zero wait) takes the lock only if it is free and nobody live waits
    /// for it, and takes no place in the queue.
    ///
    /// # Errors
    /// As [`Lock::try_lock_with`].
    ///
    /// # Cancel safety
    /// As [`lock`](Self::lock).
    pub async fn try_lock_with(&self, options: LockOptions) -> Result<Option<LockGuard>> {
        self.lock.try_lock_with(options).await
    }
}
