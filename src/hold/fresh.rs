//! The holds registered since the loss notice (`watchdog/notice.rs`) last looked, of every
//! kind: it arms the server's notice for each a short while after its grant, and only while it
//! is on. Off (until the notice starts, and always with
//! [`Config::loss_notice`](crate::Config::loss_notice) off) an acquisition pays one atomic load
//! here.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::{FamilyHold, Hold};

/// A hold noted for the loss notice, of either part of the registry.
#[derive(Clone)]
pub(crate) enum Noted {
    Lock(Weak<Hold>),
    Family(Weak<dyn FamilyHold>),
}

#[derive(Default)]
pub(crate) struct Fresh {
    on: AtomicBool,
    /// Each with when it was noted.
    list: Mutex<Vec<(Instant, Noted)>>,
    /// Wakes the loss notice when the list stops being empty.
    pub added: Notify,
}

impl Fresh {
    /// Starts (or stops) collecting; stopping forgets what was collected.
    pub(crate) fn collect(&self, on: bool) {
        self.on.store(on, Ordering::Release);
        if !on {
            self.list.lock().clear();
        }
    }

    /// Notes a new lock hold, while collecting.
    pub(crate) fn lock(&self, hold: &Arc<Hold>) {
        if self.on.load(Ordering::Acquire) {
            self.push(Noted::Lock(Arc::downgrade(hold)));
        }
    }

    /// Notes a new family hold, while collecting.
    pub(crate) fn family(&self, hold: &Arc<dyn FamilyHold>) {
        if self.on.load(Ordering::Acquire) {
            self.push(Noted::Family(Arc::downgrade(hold)));
        }
    }

    fn push(&self, noted: Noted) {
        let mut list = self.list.lock();
        list.push((Instant::now(), noted));
        if list.len() == 1 {
            drop(list);
            self.added.notify_one();
        }
    }

    /// Everything noted so far, oldest first.
    pub(crate) fn take(&self) -> Vec<(Instant, Noted)> {
        std::mem::take(&mut *self.list.lock())
    }
}
