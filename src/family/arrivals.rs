//! One client's waiters of one lock, by owner, in the order they came: a read-write lock's
//! writer queues up behind one that came before it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// Numbers the arrivals of every lock (unique within the process), in order.
static NEXT: AtomicU64 = AtomicU64::new(1);

/// The waiters that arrived and are still there, oldest first.
#[derive(Default)]
pub(crate) struct Arrivals {
    list: Mutex<Vec<(u64, Arc<str>)>>,
}

impl Arrivals {
    /// `owner` arrives: listed until the returned entry drops.
    pub(crate) fn arrive(self: &Arc<Self>, owner: &Arc<str>) -> Arrival {
        let seq = NEXT.fetch_add(1, Ordering::Relaxed);
        self.list.lock().push((seq, owner.clone()));
        Arrival {
            arrivals: self.clone(),
            seq,
            owner: owner.clone(),
        }
    }
}

/// A waiter listed in its [`Arrivals`] while it lives.
pub(crate) struct Arrival {
    arrivals: Arc<Arrivals>,
    seq: u64,
    owner: Arc<str>,
}

impl Arrival {
    /// Whether a waiter of another owner came before this one and is still there.
    pub(crate) fn behind_another(&self) -> bool {
        let list = self.arrivals.list.lock();
        list.iter()
            .any(|(seq, owner)| *seq < self.seq && **owner != *self.owner)
    }
}

impl Drop for Arrival {
    fn drop(&mut self) {
        let mut list = self.arrivals.list.lock();
        if let Some(i) = list.iter().position(|(seq, _)| *seq == self.seq) {
            list.remove(i);
        }
    }
}
