//! The lock family's holds that `Client::shutdown` gives back: each is registered while its
//! guard lives and deregistered when the guard releases it or drops. (The plain `Lock`'s holds
//! are counted in `hold.rs`, which shutdown drains the same way.)

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::error::Result;

/// A release in flight, as shutdown runs it.
pub(crate) type GiveBack = Pin<Box<dyn Future<Output = Result<()>> + Send>>;

/// One live hold, seen from shutdown.
pub(crate) trait OpenHold: Send + Sync {
    /// Marks the hold ended by shutdown (its guard reports it lost) and returns its release.
    fn give_back(&self) -> GiveBack;
}

#[derive(Default)]
pub(crate) struct OpenHolds {
    next: AtomicU64,
    map: Mutex<HashMap<u64, Arc<dyn OpenHold>>>,
}

impl OpenHolds {
    /// Registers a hold; the returned id deregisters it.
    pub(crate) fn open(&self, hold: Arc<dyn OpenHold>) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.map.lock().insert(id, hold);
        id
    }

    pub(crate) fn close(&self, id: u64) {
        self.map.lock().remove(&id);
    }

    /// Takes every registered hold out (shutdown).
    pub(crate) fn drain(&self) -> Vec<Arc<dyn OpenHold>> {
        self.map.lock().drain().map(|(_, hold)| hold).collect()
    }
}
