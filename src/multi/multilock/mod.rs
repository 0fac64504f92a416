//! `MultiLock`: several locks held as one, all or none.
//!
//! This file is the public type and its documentation; `acquire` holds the acquisition rounds
//! and `guard` the `MultiLockGuard`.

mod acquire;
mod guard;

use std::collections::HashSet;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::lock::Lock;
use crate::options::LockOptions;

pub use guard::MultiLockGuard;

/// Several locks taken and released as one: either every member is held, or none is.
///
/// Use it when one operation needs several resources at once — moving stock between two
/// warehouses, say — and holding only some of them is useless. Members may belong to different
/// [`Client`](crate::Client)s and servers. Every member must be held; for a majority of
/// independent servers guarding *one* resource, use [`RedLock`](crate::RedLock).
///
/// ```no_run
/// # async fn demo(client: redlease::Client) -> redlease::Result<()> {
/// use redlease::MultiLock;
///
/// let both = MultiLock::new(vec![
///     client.lock("warehouse:north")?,
///     client.lock("warehouse:south")?,
/// ])?;
/// let guard = both.lock().await?; // both or neither; the watchdog keeps them
/// // ... move the stock ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
///
/// # How it acquires
/// The first attempt sends one acquire to every member at once, so when none is held it costs
/// one round trip however many members there are. When a member is held elsewhere, what that
/// attempt took is given back and a waiting acquisition then waits for each member in turn, in
/// its lock's queue on the server like any waiter of that lock, holding the members granted so
/// far: a busy lock hands over to the MultiLock in its turn, so ordinary traffic on a member
/// cannot starve it (measured behind 1 and 8 processes of 4 tasks churning a member: a median
/// wait of 17 and 84 ms, against a plain waiter's 10 and 83 ms; `tests/multilock_turn.rs`
/// asserts within 10×). Members are awaited in one global order (by lock key, then server),
/// whatever order they were given in, so two MultiLocks over shared members can never hold one
/// each and wait for the other. Code that takes the same locks one at a time while holding
/// another must take them in that order too (or wait boundedly): a waiting MultiLock holds the
/// members granted so far. Once all are held, a member taken early that was lost meanwhile
/// (its key deleted or evicted) sends the MultiLock back to waiting for all of them, so the
/// guard is never handed out with a member known lost; with a fixed lease, members taken
/// early are extended to the whole lease (unless this owner already held one under the
/// watchdog, or for longer: its lease is left as it is). Giving up (the wait ran out, an error, a dropped future) leaves
/// every queue and gives back every member held.
///
/// A single [`try_lock`](MultiLock::try_lock) makes the first attempt only. Racing `try_lock`s on
/// members of *different servers* can all return `None`; on one server the requests of one
/// attempt leave on one connection back to back, and in practice the first to arrive takes
/// everything.
///
/// # Owners and reentrancy
/// Each member acts for its own owner (by default the current task, pinned when the acquisition
/// starts), exactly like a single [`Lock`]: the same owner taking the same `MultiLock` again
/// re-enters every member, and the guard remembers the owners it acquired for. Members sharing
/// a server and name are rejected by [`MultiLock::new`].
///
/// # Errors and waiting
/// As for a single lock, a Redis failure ends the wait with that error (after giving back what
/// the round took); only "held by another owner" is waited out.
#[derive(Clone)]
pub struct MultiLock {
    members: Arc<[Lock]>,
}

impl MultiLock {
    /// A lock over `locks`, all of which must be held.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `locks` is empty or names one lock twice (the same name
    /// on the same client, or on the same server and database with the same key prefix).
    pub fn new(locks: Vec<Lock>) -> Result<MultiLock> {
        if locks.is_empty() {
            return Err(Error::InvalidArgument(
                "a MultiLock needs at least one lock".into(),
            ));
        }
        let mut seen = HashSet::new();
        for lock in &locks {
            // One client always talks to one keyspace, so this also catches a lock given twice.
            if !seen.insert((lock.keyspace(), lock.keys.hash.clone())) {
                return Err(Error::InvalidArgument(format!(
                    "lock `{}` ({} on {}) appears twice in the MultiLock",
                    lock.name(),
                    lock.key(),
                    lock.keyspace()
                )));
            }
        }
        Ok(MultiLock {
            members: locks.into(),
        })
    }

    /// The member locks, in the order given to [`MultiLock::new`].
    pub fn locks(&self) -> &[Lock] {
        &self.members
    }

    crate::options::ways_to_ask!(
        MultiLockGuard,
        names,
        [lock, lock_with, try_lock, try_lock_with]
        /// Waits until every member is held, then keeps them with their clients' watchdogs while
        /// the guard lives (each member with its own watchdog lease). The same as
        /// `lock_with(LockOptions::new())`.
        ///
        /// # Errors
        /// The first member error of the round that failed: [`Error::WouldDeadlock`] (a
        /// non-reentrant member already held by its owner), [`Error::ConcurrentAcquisition`]
        /// (the task acquires a member concurrently), [`Error::WrongType`],
        /// [`Error::Timeout`], [`Error::Redis`], [`Error::Shutdown`]. Whatever that round had taken
        /// is given back first.
        ///
        /// # Cancel safety
        /// Cancel-safe: dropping the future leaves no member held and nothing renewed; grants that
        /// arrive after the drop are given back in the background.
    );

    /// Takes every member as `options` say (the same [`LockOptions`] as every lock kind takes):
    /// waits at most `wait`, and holds every member for `lease` without renewal (by default
    /// the watchdogs keep them); `None` when the wait ran out, and nothing stays held then. A
    /// zero wait makes one round. [`Error::Busy`] from `lock_with` names the members,
    /// `+`-joined.
    ///
    /// # Errors
    /// As [`MultiLock::lock`], plus [`Error::InvalidDuration`] for a bad wait or lease, and
    /// [`Error::InvalidArgument`] for permits other than one.
    ///
    /// # Cancel safety
    /// As [`MultiLock::lock`].
    pub async fn try_lock_with(&self, options: LockOptions) -> Result<Option<MultiLockGuard>> {
        let (lease, wait) = options.lease_and_wait()?;
        self.acquire(lease, wait).await
    }

    /// The members' names, `+`-joined, for errors about the whole set.
    fn names(&self) -> String {
        let names: Vec<&str> = self.members.iter().map(Lock::name).collect();
        names.join("+")
    }
}

impl std::fmt::Debug for MultiLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiLock")
            .field("members", &self.members)
            .finish()
    }
}
