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
use crate::keys::HoldKey;

/// A hold noted for the loss notice, of either part of the registry.
#[derive(Clone)]
pub(crate) enum Noted {
    /// A lock's hold by its lock hash and owner field: whichever hold of that owner is the
    /// live one when it is looked at. Noting it costs two reference counts, and keeps no hold
    /// (nor its memory) alive.
    Lock(HoldKey),
    /// A family hold, with when it was noted.
    Family(Weak<dyn FamilyHold>, Instant),
}

#[derive(Default)]
pub(crate) struct Fresh {
    on: AtomicBool,
    list: Mutex<Vec<Noted>>,
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
    pub(crate) fn lock(&self, hold: &Hold) {
        if self.on.load(Ordering::Acquire) {
            self.push(Noted::Lock(hold.key.clone()));
        }
    }

    /// Notes a new family hold, while collecting.
    pub(crate) fn family(&self, hold: &Arc<dyn FamilyHold>) {
        if self.on.load(Ordering::Acquire) {
            self.push(Noted::Family(Arc::downgrade(hold), Instant::now()));
        }
    }

    fn push(&self, noted: Noted) {
        let mut list = self.list.lock();
        list.push(noted);
        if list.len() == 1 {
            drop(list);
            self.added.notify_one();
        }
    }

    /// Everything noted so far, oldest first.
    pub(crate) fn take(&self) -> Vec<Noted> {
        std::mem::take(&mut *self.list.lock())
    }
}
