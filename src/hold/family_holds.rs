//! The lock family's part of the registry: each family hold is registered while its guard lives
//! and deregistered when the guard releases it or drops. The watchdog renews it with the
//! client's other holds, shutdown gives it back with them; its kind says how, through
//! [`FamilyHold`].

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use crate::error::Result;
use crate::node::Presence;

/// A release in flight, as shutdown runs it.
pub(crate) type GiveBack = Pin<Box<dyn Future<Output = Result<()>> + Send>>;

/// A renewal in flight, as the watchdog runs it: true when it found the hold lost (gone, or
/// its validity ran out unconfirmed); a failed renewal within the validity is not a loss.
pub(crate) type Renewing = Pin<Box<dyn Future<Output = bool> + Send>>;

/// One live hold, seen from the watchdog and from shutdown.
pub(crate) trait FamilyHold: Send + Sync {
    /// The watchdog lease it is kept under (`None`: a fixed lease, never renewed).
    fn watchdog_lease(&self) -> Option<Duration>;
    /// Its renewal; `None` when it has none (a fixed lease) or is known lost already.
    fn renew(&self) -> Option<Renewing>;
    /// Marks the hold ended by shutdown (its guard reports it lost) and returns its release.
    fn give_back(&self) -> GiveBack;
    /// Where the server keeps it, for the loss notice (`watchdog/notice.rs`).
    fn presence(&self) -> &Presence;
    /// Neither released nor known lost.
    fn is_live(&self) -> bool;
    /// The server no longer has it (the loss notice found it gone): marks it lost. False when
    /// it was released or lost meanwhile.
    fn gone(&self, why: &str) -> bool;
}

/// The family's holds, by registration id.
#[derive(Default)]
pub(crate) struct FamilyHolds {
    next: AtomicU64,
    map: Mutex<HashMap<u64, Arc<dyn FamilyHold>>>,
}

impl FamilyHolds {
    /// Registers a hold; the returned id deregisters it.
    pub(crate) fn open(&self, hold: Arc<dyn FamilyHold>) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.map.lock().insert(id, hold);
        id
    }

    pub(crate) fn close(&self, id: u64) {
        self.map.lock().remove(&id);
    }

    /// Every registered hold.
    pub(crate) fn all(&self) -> Vec<Arc<dyn FamilyHold>> {
        self.map.lock().values().cloned().collect()
    }

    /// The renewals of every hold kept under a watchdog lease (one watchdog tick's).
    pub(crate) fn renewals(&self) -> Vec<Renewing> {
        let holds: Vec<_> = self.map.lock().values().cloned().collect();
        holds.iter().filter_map(|hold| hold.renew()).collect()
    }

    /// The shortest watchdog lease of the holds, if any.
    pub(crate) fn shortest_watchdog_lease(&self) -> Option<Duration> {
        let map = self.map.lock();
        map.values().filter_map(|hold| hold.watchdog_lease()).min()
    }

    /// Takes every registered hold out (shutdown).
    pub(crate) fn drain(&self) -> Vec<Arc<dyn FamilyHold>> {
        self.map.lock().drain().map(|(_, hold)| hold).collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.map.lock().len()
    }
}
