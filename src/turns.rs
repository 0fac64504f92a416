//! One owner's acquisitions of one lock take turns.
//!
//! The server counts an owner's holds in the order its requests arrive, and `Holds::granted`
//! reads each grant's count to tell a re-entry (count > 1) from a fresh hold (count 1, which
//! also means an earlier hold of ours was lost). That reading is exact only if the grants are
//! registered in the order the server applied them. Two acquisitions of one owner in flight at
//! once (futures of one task under `join!`, or tasks sharing an explicit `Owner`) could be
//! answered in one order and registered in the other: the first registered as fresh, the second
//! then taken for a lost re-take, a live guard marked lost and the key left held with nobody
//! renewing it. So an acquisition holds its owner's turn from sending its attempt until its grant
//! is registered; the next one of the same owner sends only after that.
//!
//! The same bookkeeping tells when an owner's acquisitions overlap at all: a nested acquisition
//! starts inside the critical section, after the outer one returned, so two in progress at once
//! are concurrent for certain (the `join!` hazard of task owners; see [`Turns::start`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use dashmap::DashMap;
use tokio::sync::{Mutex, OwnedMutexGuard};

type Key = (Arc<str>, Arc<str>);

/// The acquisitions in progress, per (lock hash, owner field).
#[derive(Default)]
pub(crate) struct Turns {
    map: DashMap<Key, Arc<Owned>, foldhash::fast::RandomState>,
}

#[derive(Default)]
struct Owned {
    /// Held from an attempt's send until its grant is registered.
    turn: Arc<Mutex<()>>,
    /// Acquisitions of this owner in progress, waits included. Changed under the map's entry lock.
    acquiring: AtomicUsize,
    /// Whether the overlap was already reported for this entry (one warning, not one per call).
    warned: AtomicBool,
}

/// One acquisition in progress; dropping it (returned, failed or cancelled) ends it.
pub(crate) struct Acquiring {
    turns: Arc<Turns>,
    key: Key,
    owned: Arc<Owned>,
    /// Whether another acquisition of the same owner was in progress when this one started.
    pub overlapping: bool,
}

/// The right to send an attempt and register its grant; the owner's next attempt waits for it.
pub(crate) type Turn = OwnedMutexGuard<()>;

impl Turns {
    /// Starts an acquisition of `hash` by `field`.
    pub fn start(self: &Arc<Self>, hash: &Arc<str>, field: &Arc<str>) -> Acquiring {
        let key = (hash.clone(), field.clone());
        // Counted under the entry's lock, so the last one leaving cannot remove the entry
        // between our finding it and counting ourselves in.
        let (owned, before) = {
            let entry = self.map.entry(key.clone()).or_default();
            let before = entry.acquiring.fetch_add(1, Ordering::AcqRel);
            (entry.clone(), before)
        };
        Acquiring {
            turns: self.clone(),
            key,
            owned,
            overlapping: before > 0,
        }
    }
}

impl Acquiring {
    /// Waits for the owner's other attempts to be registered, then holds the turn.
    pub async fn turn(&self) -> Turn {
        self.owned.turn.clone().lock_owned().await
    }

    /// True the first time an overlap is reported for this (lock, owner) while it stays busy.
    pub fn first_overlap(&self) -> bool {
        self.overlapping && !self.owned.warned.swap(true, Ordering::AcqRel)
    }
}

impl Drop for Acquiring {
    fn drop(&mut self) {
        // The entry stays in the map while any acquisition counts in it, so it is ours; the
        // last one out forgets it.
        self.turns.map.remove_if(&self.key, |_, owned| {
            owned.acquiring.fetch_sub(1, Ordering::AcqRel) == 1
        });
    }
}
