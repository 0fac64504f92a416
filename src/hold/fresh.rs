//! The holds registered since the loss notice (`watchdog/notice.rs`) last looked: it arms the
//! server's notice for each a short while after its grant, and only while it is on. Off (the
//! default until the notice starts, and always with
//! [`Config::loss_notice`](crate::Config::loss_notice) off) an acquisition pays one atomic
//! load here.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::Hold;

#[derive(Default)]
pub(crate) struct Fresh {
    on: AtomicBool,
    list: Mutex<Vec<Weak<Hold>>>,
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

    /// Notes a new hold, while collecting.
    pub(crate) fn push(&self, hold: &Arc<Hold>) {
        if !self.on.load(Ordering::Acquire) {
            return;
        }
        let mut list = self.list.lock();
        list.push(Arc::downgrade(hold));
        if list.len() == 1 {
            drop(list);
            self.added.notify_one();
        }
    }

    /// Everything noted so far, oldest first.
    pub(crate) fn take(&self) -> Vec<Weak<Hold>> {
        std::mem::take(&mut *self.list.lock())
    }
}
