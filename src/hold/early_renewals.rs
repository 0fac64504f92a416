//! The schedule of early renewals: holds granted from the server's queue (`lua/queue_lock.lua`)
//! live only the claim lease on the server until they are renewed, a third of the way into
//! it. A task of the client's (`watchdog/early.rs`) sleeps until the earliest is due and
//! renews them; a schedule rather than a task and a timer per grant, since nearly every such
//! hold is released long before it is due.

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};
use std::time::Instant;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::{Hold, Holds};

/// The holds due for an early renewal, by due time.
#[derive(Default)]
pub(crate) struct EarlyRenewals {
    due: Mutex<BTreeMap<Instant, Vec<Weak<Hold>>>>,
    /// Wakes the early renewals' task when a renewal is due before any it knew of.
    sooner: Arc<Notify>,
}

impl Holds {
    /// Schedules `hold`'s renewal at `at`, waking the early renewals' task if it is now the
    /// earliest (the task sleeps until the earliest it knew of).
    pub(crate) fn renew_early(&self, hold: &Arc<Hold>, at: Instant) {
        let early = &self.early;
        let mut due = early.due.lock();
        let earliest = due.first_key_value().is_none_or(|(first, _)| at < *first);
        due.entry(at).or_default().push(Arc::downgrade(hold));
        drop(due);
        if earliest {
            early.sooner.notify_one();
        }
    }

    /// When the earliest early renewal is due, and what fires when one is scheduled sooner.
    pub(crate) fn next_early(&self) -> (Option<Instant>, Arc<Notify>) {
        let early = &self.early;
        let next = early.due.lock().first_key_value().map(|(at, _)| *at);
        (next, early.sooner.clone())
    }

    /// The holds due early before `by`, taken off the schedule (those already gone are dropped).
    pub(crate) fn take_early(&self, by: Instant) -> Vec<Arc<Hold>> {
        let mut due = self.early.due.lock();
        let later = due.split_off(&by);
        let taken = std::mem::replace(&mut *due, later);
        drop(due);
        taken
            .into_values()
            .flatten()
            .filter_map(|hold| hold.upgrade())
            .collect()
    }
}
