//! The registry of every hold of the client ([`Holds`]): one [`Hold`] per (lock, owner) of the
//! reentrant locks, the lock family's holds, and the holds the loss notice has yet to arm.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use dashmap::mapref::entry::Entry;

use super::early_renewals::EarlyRenewals;
use super::{FamilyHold, FamilyHolds, Fresh, Hold, Noted};
use crate::keys::HoldKey;
use crate::telemetry::LostReason;
use crate::terms::Lease;

/// What the server said about a grant being registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grant {
    /// An acquisition, answered with the owner's hold count after it.
    Counted(u32),
    /// A hand-over from a release of this client: the field was absent and is now 1. Any hold of
    /// ours registered since came after it on the server, so it is joined, never taken for lost.
    HandedOver,
}

/// What giving back one guard's hold did locally.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum LocalRelease {
    /// Other guards of the same hold remain.
    Remaining,
    /// That was the last guard; the hold left the registry (and the watchdog).
    Last,
    /// The hold had already left the registry: lost, or released by shutdown.
    Detached,
}

#[derive(Default)]
pub(crate) struct Holds {
    /// foldhash, not SipHash: every acquisition and release hashes its key here a few times.
    map: DashMap<HoldKey, Arc<Hold>, foldhash::fast::RandomState>,
    /// Holds granted from the queue, renewed before their claim lease ends (`watchdog/early.rs`).
    pub(super) early: EarlyRenewals,
    /// The lock family's holds (shared with their guards, which deregister them).
    pub family: Arc<FamilyHolds>,
    /// Holds registered since the loss notice last looked (`watchdog/notice.rs`).
    pub fresh: Arc<Fresh>,
    /// When each (lock, owner) was last granted: the false-loss audit (`watchdog/audit.rs`)
    /// tells a hold taken again from the one it reads after a loss.
    #[cfg(feature = "testing")]
    last_grants: DashMap<HoldKey, Instant, foldhash::fast::RandomState>,
}

/// What shutdown took out of the registry: every hold of every kind.
pub(crate) struct Drained {
    /// The reentrant locks' holds, each with its number of live guards.
    pub locks: Vec<(Arc<Hold>, u32)>,
    pub family: Vec<Arc<dyn FamilyHold>>,
}

impl Holds {
    /// The live hold of `key`, if any.
    pub(crate) fn get(&self, key: &HoldKey) -> Option<Arc<Hold>> {
        let hold = self.map.get(key)?.value().clone();
        (!hold.is_lost()).then_some(hold)
    }

    /// Whether `key` was granted after `since` (testing's false-loss audit).
    #[cfg(feature = "testing")]
    pub(crate) fn granted_since(&self, key: &HoldKey, since: Instant) -> bool {
        self.last_grants.get(key).is_some_and(|at| *at > since)
    }

    /// Records a grant from the server and returns the hold the new guard belongs to, and
    /// whether it is a new hold.
    ///
    /// The count tells a re-entry (> 1) from a fresh acquisition (1): when the server says
    /// fresh but we still have a hold, that hold's lease was lost behind our back. When our
    /// hold is lost locally (validity ran out) but the server still counts it, the new hold
    /// adopts those server holds, so its last release frees the key.
    ///
    /// Exact only when one owner's grants are registered in the order the server applied them:
    /// the caller holds the owner's turn (`turns.rs`) from sending the request until this call.
    pub(crate) fn granted(
        &self,
        key: &HoldKey,
        grant: Grant,
        make: impl FnOnce() -> Hold,
    ) -> (Arc<Hold>, bool) {
        #[cfg(feature = "testing")]
        self.last_grants.insert(key.clone(), Instant::now());
        let server_count = match grant {
            Grant::Counted(count) => count,
            Grant::HandedOver => 1,
        };
        let fresh = |orphans: u32| {
            let hold = make();
            hold.orphans.store(orphans, Ordering::Release);
            let hold = Arc::new(hold);
            self.fresh.lock(&hold);
            hold
        };
        match self.map.entry(key.clone()) {
            Entry::Occupied(mut entry) => {
                let current = entry.get().clone();
                let joins = server_count > 1 || grant == Grant::HandedOver;
                if joins && !current.is_lost() {
                    current.guards.fetch_add(1, Ordering::AcqRel);
                    return (current, false);
                }
                let why = "the server no longer had this hold when it was taken again";
                current.mark_lost(LostReason::ServerLost, why);
                // The lost hold's guards are detached and will never release on the server;
                // whatever of theirs the server still counts is ours to give back.
                let stranded = current.guards.load(Ordering::Acquire);
                let hold = fresh(server_count.saturating_sub(1).min(stranded));
                entry.insert(hold.clone());
                (hold, true)
            }
            Entry::Vacant(entry) => {
                // Extra server holds here belong to grants still being given back by their
                // cancelled callers (see `Lock::attempt`); they release themselves.
                let hold = fresh(0);
                entry.insert(hold.clone());
                (hold, true)
            }
        }
    }

    /// Gives back one guard of `hold`; the last one takes the hold out of the `held` gauge
    /// (its hold time recorded).
    pub(crate) fn release(&self, hold: &Arc<Hold>) -> LocalRelease {
        self.release_one(hold, false)
    }

    /// [`release`](Holds::release) for a release by name ([`Lock::unlock`](crate::Lock::unlock)):
    /// when it is not the last, a guard of the hold will outlive the hold, which is noted in the
    /// same step, so the last release cannot miss it.
    pub(crate) fn release_by_name(&self, hold: &Arc<Hold>) -> LocalRelease {
        self.release_one(hold, true)
    }

    fn release_one(&self, hold: &Arc<Hold>, by_name: bool) -> LocalRelease {
        // Under the entry's lock: the guard count is read and the hold removed at once.
        let mut registered = false;
        let removed = self.map.remove_if(&hold.key, |_, current| {
            registered = Arc::ptr_eq(current, hold);
            if !registered {
                return false;
            }
            let last = hold.guards.fetch_sub(1, Ordering::AcqRel) <= 1;
            if !last && by_name {
                hold.note_released_by_name();
            }
            last
        });
        match (removed, registered) {
            (Some(_), _) => {
                hold.end();
                hold.let_go(true);
                LocalRelease::Last
            }
            (None, true) => LocalRelease::Remaining,
            (None, false) => LocalRelease::Detached,
        }
    }

    /// Removes `hold` (lost, or released at shutdown) so it is neither renewed nor re-entered.
    /// False when it had already left the registry (released meanwhile).
    pub(crate) fn detach(&self, hold: &Arc<Hold>) -> bool {
        self.map
            .remove_if(&hold.key, |_, current| Arc::ptr_eq(current, hold))
            .is_some()
    }

    /// Every hold the watchdog must renew. Clones the `Arc`s so no map reference lives across
    /// an `.await`.
    pub(crate) fn watchdog_holds(&self) -> Vec<Arc<Hold>> {
        self.map
            .iter()
            .filter(|e| matches!(e.value().lease(), Lease::Watchdog(_)))
            .map(|e| e.value().clone())
            .collect()
    }

    /// Every hold of every kind.
    pub(crate) fn all(&self) -> Vec<Noted> {
        let locks = self.map.iter().map(|e| Noted::Lock(e.key().clone()));
        let family = self.family.all();
        let now = Instant::now();
        let family = family
            .iter()
            .map(|hold| Noted::Family(Arc::downgrade(hold), now));
        locks.chain(family).collect()
    }

    /// Every hold of the lock `hash`, whatever its owner (a walk over all holds).
    pub(crate) fn of_lock(&self, hash: &Arc<str>) -> Vec<Arc<Hold>> {
        self.map
            .iter()
            .filter(|e| e.key().hash == *hash)
            .map(|e| e.value().clone())
            .collect()
    }

    /// Takes every hold out (for shutdown).
    pub(crate) fn drain(&self) -> Drained {
        let all: Vec<Arc<Hold>> = self.map.iter().map(|e| e.value().clone()).collect();
        let locks = all
            .into_iter()
            .filter_map(|hold| {
                let (_, hold) = self
                    .map
                    .remove_if(&hold.key, |_, current| Arc::ptr_eq(current, &hold))?;
                let guards = hold.guards.load(Ordering::Acquire);
                // Given back by shutdown: no longer held, whatever its guards do later.
                hold.let_go(true);
                Some((hold, guards))
            })
            .collect();
        Drained {
            locks,
            family: self.family.drain(),
        }
    }

    /// The shortest watchdog lease held, of every kind, if any.
    pub(crate) fn shortest_watchdog_lease(&self) -> Option<Duration> {
        let locks = self.map.iter().filter_map(|e| match e.value().lease() {
            Lease::Watchdog(d) => Some(d),
            Lease::Fixed(_) => None,
        });
        locks.chain(self.family.shortest_watchdog_lease()).min()
    }

    /// How many holds there are, of every kind.
    pub(crate) fn len(&self) -> usize {
        self.map.len() + self.family.len()
    }
}
