//! The schedule of early renewals: holds granted from the server's queue (`lua/queue.lua`)
//! live only the claim lease on the server until they are renewed, a third of the way into
//! it. A task of the client's (`watchdog/early.rs`) sleeps until the earliest is due and
//! renews them; a schedule rather than a task and a timer per grant, since nearly every such
//! hold is released long before it is due.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::{Arc, Weak};
use std::time::Instant;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::Hold;

/// The holds due for an early renewal, earliest first.
#[derive(Default)]
pub(crate) struct EarlyRenewals {
    due: Mutex<BinaryHeap<Reverse<Due>>>,
    /// Wakes the early renewals' task when a renewal is due before any it knew of.
    sooner: Arc<Notify>,
}

struct Due {
    at: Instant,
    hold: Weak<Hold>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Due) -> bool {
        self.at == other.at
    }
}

impl Eq for Due {}

impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Due) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Due {
    fn cmp(&self, other: &Due) -> std::cmp::Ordering {
        self.at.cmp(&other.at)
    }
}

impl EarlyRenewals {
    /// Schedules `hold`'s renewal at `at`. True when it is now the earliest due: the early
    /// renewals' task, asleep until a later time, must be woken.
    pub(crate) fn schedule(&self, hold: &Arc<Hold>, at: Instant) -> bool {
        let mut due = self.due.lock();
        let earliest = due.peek().is_none_or(|Reverse(first)| at < first.at);
        due.push(Reverse(Due {
            at,
            hold: Arc::downgrade(hold),
        }));
        earliest
    }

    /// Fires when a renewal is scheduled sooner than every other (`schedule` returned true).
    pub(crate) fn sooner(&self) -> Arc<Notify> {
        self.sooner.clone()
    }

    /// When the earliest renewal is due.
    pub(crate) fn next(&self) -> Option<Instant> {
        self.due.lock().peek().map(|Reverse(first)| first.at)
    }

    /// The holds due by `now`, taken off the schedule (those already gone are dropped).
    pub(crate) fn take_due(&self, now: Instant) -> Vec<Arc<Hold>> {
        let mut due = self.due.lock();
        let mut holds = Vec::new();
        while due.peek().is_some_and(|Reverse(first)| first.at <= now) {
            if let Some(Reverse(first)) = due.pop()
                && let Some(hold) = first.hold.upgrade()
            {
                holds.push(hold);
            }
        }
        holds
    }
}
