//! One owner's operations on one lock reach Redis in an order the client can account for.
//!
//! Two rules, both per (lock, owner):
//!
//! 1. **Acquisitions take turns.** The server counts an owner's holds in the order its requests
//!    arrive, and `Holds::granted` reads each grant's count to tell a re-entry (count > 1) from
//!    a fresh hold (count 1, which also means an earlier hold of ours was lost). That reading is
//!    exact only if grants are registered in the order the server applied them. Two acquisitions
//!    of one owner in flight at once (futures of one task under `join!`, tasks sharing an
//!    explicit `Owner`) could be answered in one order and registered in the other: a live
//!    guard taken for lost, and the key left held with nobody renewing it. So an acquisition
//!    holds its owner's [`Turn`] from sending its attempt until its grant is registered.
//! 2. **An acquisition waits for the owner's releases in flight.** A guard's last release
//!    writes no latch (measured: a latch on every unlock costs the server 15k more instructions
//!    per lock/unlock pair, +19%, and leaves one key per unlock alive for the latch's lifetime),
//!    so a retry of that release after a dropped connection infers from the owner's missing
//!    field that the first attempt ran. That holds only if the owner cannot take the lock again
//!    between the two attempts; a dropped guard is released in the background while its owner
//!    goes on, so its next acquisition waits for that release ([`Acquiring::settled`]).
//!
//! The same bookkeeping tells when an owner's acquisitions overlap at all: a nested acquisition
//! starts inside the critical section, after the outer one returned, so two in progress at once
//! are concurrent for certain (the `join!` hazard of task owners).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use dashmap::DashMap;
use tokio::sync::{Notify, Semaphore};

use crate::keys::HoldKey;

/// Operations in progress, per (lock hash, owner field).
#[derive(Default)]
pub(crate) struct Turns {
    map: DashMap<HoldKey, Arc<Owned>, foldhash::fast::RandomState>,
}

/// One owner's operations on one lock. The counts change only under the map's entry lock, and
/// the entry leaves the map when both are zero.
struct Owned {
    /// One permit: held from an attempt's send until its grant is registered. Inline rather
    /// than an `Arc<Mutex>` with an owned guard: one allocation fewer per acquisition.
    turn: Semaphore,
    /// Acquisitions in progress, waits included.
    acquiring: AtomicUsize,
    /// Guard releases in flight.
    releasing: AtomicUsize,
    /// Woken when the last release in flight finished.
    released: Notify,
}

impl Default for Owned {
    fn default() -> Owned {
        Owned {
            turn: Semaphore::new(1),
            acquiring: AtomicUsize::new(0),
            releasing: AtomicUsize::new(0),
            released: Notify::new(),
        }
    }
}

impl Owned {
    fn idle(&self) -> bool {
        self.acquiring.load(Ordering::Acquire) == 0 && self.releasing.load(Ordering::Acquire) == 0
    }

    /// Waits for the turn and holds it until the [`Turn`] is dropped.
    async fn take_turn(owned: &Arc<Owned>) -> Turn {
        // The permit is given back by `Turn`'s Drop, not by a guard that borrows the entry.
        let taken = match owned.turn.acquire().await {
            Ok(permit) => {
                permit.forget();
                true
            }
            Err(_) => false,
        };
        Turn {
            owned: owned.clone(),
            taken,
        }
    }
}

/// One acquisition in progress; dropping it (returned, failed or cancelled) ends it.
pub(crate) struct Acquiring {
    turns: Arc<Turns>,
    key: HoldKey,
    owned: Arc<Owned>,
    /// Whether another acquisition of the same owner was in progress when this one started.
    overlapping: bool,
}

/// One release in flight; dropping it (finished, or given up) lets the owner's acquisitions of
/// the lock go on.
pub(crate) struct Releasing {
    turns: Arc<Turns>,
    key: HoldKey,
    owned: Arc<Owned>,
}

/// The right to send an attempt and register its grant; the owner's next attempt waits for it.
/// Dropping it passes the turn on.
pub(crate) struct Turn {
    owned: Arc<Owned>,
    /// Whether a permit was taken (always: the semaphore is never closed).
    taken: bool,
}

impl Drop for Turn {
    fn drop(&mut self) {
        if self.taken {
            self.owned.turn.add_permits(1);
        }
    }
}

impl Turns {
    /// Starts an acquisition of the lock by the owner of `key`.
    pub(crate) fn start(self: &Arc<Self>, key: &HoldKey) -> Acquiring {
        let (key, owned, before) = self.count_in(key, |owned| &owned.acquiring);
        Acquiring {
            turns: self.clone(),
            key,
            owned,
            overlapping: before > 0,
        }
    }

    /// Starts an operation that sets the lease of `key`'s hold, once the owner's attempts in
    /// flight are registered (see [`Extending`]).
    pub(crate) async fn extending(self: &Arc<Self>, key: &HoldKey) -> Extending {
        let releasing = self.start_release(key);
        Extending {
            _turn: Owned::take_turn(&releasing.owned).await,
            _releasing: releasing,
        }
    }

    /// Registers a guard's release of the lock by the owner of `key`; synchronous, so it is in
    /// place before the owner can ask for the lock again.
    pub(crate) fn start_release(self: &Arc<Self>, key: &HoldKey) -> Releasing {
        let (key, owned, _) = self.count_in(key, |owned| &owned.releasing);
        Releasing {
            turns: self.clone(),
            key,
            owned,
        }
    }

    /// Whether an acquisition of this owner on this lock is in progress (waits included).
    pub(crate) fn acquiring(&self, key: &HoldKey) -> bool {
        self.map
            .get(key)
            .is_some_and(|owned| owned.acquiring.load(Ordering::Acquire) > 0)
    }

    /// Counts one more operation in `counter` of the entry of `key`, made if needed. Under the
    /// entry's lock, so the last one leaving cannot remove the entry between our finding it and
    /// counting ourselves in. Returns the count before.
    fn count_in(
        &self,
        key: &HoldKey,
        counter: impl Fn(&Owned) -> &AtomicUsize,
    ) -> (HoldKey, Arc<Owned>, usize) {
        let entry = self.map.entry(key.clone()).or_default();
        let before = counter(&entry).fetch_add(1, Ordering::AcqRel);
        let owned = entry.clone();
        drop(entry);
        (key.clone(), owned, before)
    }

    /// Counts one operation out of `counter`; the entry goes when nothing is left in it.
    fn count_out(&self, key: &HoldKey, counter: impl Fn(&Owned) -> &AtomicUsize) {
        self.map.remove_if(key, |_, owned| {
            counter(owned).fetch_sub(1, Ordering::AcqRel);
            owned.idle()
        });
    }
}

impl Acquiring {
    /// Waits until no release of this owner's that started before is in flight. Each is bounded
    /// by the client's timeout and retries, so this is too.
    pub(crate) async fn settled(&self) {
        // The common case, without setting up a wake-up.
        if self.owned.releasing.load(Ordering::Acquire) == 0 {
            return;
        }
        let released = self.owned.released.notified();
        tokio::pin!(released);
        // Listen before looking, so the last release finishing in between is not missed.
        released.as_mut().enable();
        if self.owned.releasing.load(Ordering::Acquire) == 0 {
            return;
        }
        released.await;
    }

    /// Waits for the owner's other attempts to be registered, then holds the turn.
    pub(crate) async fn turn(&self) -> Turn {
        Owned::take_turn(&self.owned).await
    }

    /// Whether this acquisition is the owner's only operation on the lock in progress: no other
    /// acquisition, no release, withdrawal or give-back in flight. Only then may a grant be taken
    /// from its message: the server cannot tell a grant taken that way from one not taken, so a
    /// withdrawal or give-back of the owner landing later would pass it on.
    pub(crate) fn alone(&self) -> bool {
        self.owned.acquiring.load(Ordering::Acquire) == 1
            && self.owned.releasing.load(Ordering::Acquire) == 0
    }

    /// The lock and owner this acquisition is of.
    pub(crate) fn key(&self) -> &HoldKey {
        &self.key
    }

    /// Whether another acquisition of the same owner was in progress when this one started.
    pub(crate) fn overlapping(&self) -> bool {
        self.overlapping
    }
}

/// An operation that sets a hold's lease outside an acquisition (`LockGuard::extend`, a
/// RedLock node's renewal), for as long as it lives: in flight for the owner (its acquisitions
/// wait for it) and holding the owner's turn (it waits for their attempts in flight), so it and
/// the owner's re-entries reach the server and the hold in one order.
pub(crate) struct Extending {
    _turn: Turn,
    _releasing: Releasing,
}

impl Drop for Acquiring {
    fn drop(&mut self) {
        self.turns.count_out(&self.key, |owned| &owned.acquiring);
    }
}

impl Drop for Releasing {
    fn drop(&mut self) {
        self.turns.count_out(&self.key, |owned| &owned.releasing);
        if self.owned.releasing.load(Ordering::Acquire) == 0 {
            self.owned.released.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// The turns, and the keys of two owners of one lock.
    fn names() -> (Arc<Turns>, HoldKey, HoldKey) {
        let (hash, field, other): (Arc<str>, Arc<str>, Arc<str>) =
            ("h".into(), "f".into(), "g".into());
        (
            Arc::default(),
            HoldKey::new(&hash, &field),
            HoldKey::new(&hash, &other),
        )
    }

    #[tokio::test]
    async fn an_acquisition_waits_for_the_owners_releases_only() {
        let (turns, field, other) = names();
        let first = turns.start_release(&field);
        let second = turns.start_release(&field);
        let other_owner = turns.start(&other);
        let not_held_up = tokio::time::timeout(Duration::from_secs(1), other_owner.settled());
        assert!(not_held_up.await.is_ok(), "another owner must not wait");
        let waiter = {
            let (turns, field) = (turns.clone(), field.clone());
            tokio::spawn(async move { turns.start(&field).settled().await })
        };
        drop(first);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "one release is still in flight");
        drop(second);
        let woken = tokio::time::timeout(Duration::from_secs(1), waiter).await;
        assert!(matches!(woken, Ok(Ok(()))), "the last release must wake it");
        drop(other_owner);
        assert!(turns.map.is_empty(), "idle entries are forgotten");
    }

    #[tokio::test]
    async fn one_owners_attempts_take_turns_and_overlaps_are_seen() {
        let (turns, field, other) = names();
        let a = turns.start(&field);
        let b = turns.start(&field);
        let c = turns.start(&other);
        assert!(!a.overlapping && b.overlapping && !c.overlapping);
        assert!(b.overlapping() && !a.overlapping());
        let held = a.turn().await;
        let blocked = tokio::time::timeout(Duration::from_millis(50), b.turn()).await;
        assert!(
            blocked.is_err(),
            "the owner's second attempt must wait its turn"
        );
        let free = tokio::time::timeout(Duration::from_millis(50), c.turn()).await;
        assert!(free.is_ok(), "another owner does not wait");
        drop(held);
        let next = tokio::time::timeout(Duration::from_secs(1), b.turn()).await;
        assert!(next.is_ok(), "the turn passes on");
    }
}
