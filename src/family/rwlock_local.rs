//! Local hand-over for a [`ReadWriteLock`](crate::ReadWriteLock): which waiters one handle (and
//! its clones) has, so that a write release wakes the ones it lets in as soon as the release is
//! queued. Their attempts then ride in the same script call, behind the release, and are
//! granted there, instead of a round trip and a message later (`Node::family_call_then`).
//!
//! Waiting writers keep new readers out (`lua/rwlock.lua`), so a write release hands over to
//! one waiting writer while one waits, and to every waiting reader when none does. Each wake-up
//! is a guess (holds and waiters of other handles and clients are unknown here): a waiter woken
//! in vain is refused and waits on, and the release's message still comes.
//!
//! It also counts the writers asking or waiting, by owner: a writer that arrives behind a
//! writer of another owner waits for its turn without asking the server (`rwlock/acquire.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Instant;

use parking_lot::Mutex;

use super::arrivals::{Arrival, Arrivals};
use super::rwlock::{Hold, Kind, WRITE_INTENT};
use super::rwlock_share::ReadShares;
use crate::pubsub::Subscriber;

/// One lock's waiters per side, and its shared read holds (`rwlock_share.rs`), in one client
/// (kept in the client's `LocalStates`, so every handle of the lock sees the same).
#[derive(Default)]
pub(crate) struct LocalTurns {
    readers_waiting: Arc<AtomicUsize>,
    writers_waiting: Arc<AtomicUsize>,
    /// The writers asking or waiting now, in the order they came, with their owners.
    writers: Arc<Arrivals>,
    /// When a writer of this client last asked or queued up (see [`LocalTurns::writers_wait_fresh`]).
    writer_active: Mutex<Option<Instant>>,
    pub(crate) shares: ReadShares,
}

impl LocalTurns {
    /// A waiter of `kind`, counted once [`Waiting::arm`]ed, until disarmed or dropped.
    pub(crate) fn waiting(&self, kind: Kind) -> Waiting {
        let counter = match kind {
            Kind::Read => &self.readers_waiting,
            Kind::Write => &self.writers_waiting,
        };
        Waiting {
            counter: counter.clone(),
            armed: AtomicBool::new(false),
        }
    }

    /// Lists a writer for `owner` as asking or waiting until the returned entry drops.
    pub(crate) fn writer_asks(&self, owner: &Arc<str>) -> Arrival {
        self.writers.arrive(owner)
    }

    /// A writer of this client asks, or queues up: readers of the client hold back for
    /// [`WRITE_INTENT`] from now (see [`writers_wait_fresh`](Self::writers_wait_fresh)).
    pub(crate) fn writer_active(&self) {
        *self.writer_active.lock() = Some(Instant::now());
    }

    /// Whether a writer of this client waits and asked or queued up within [`WRITE_INTENT`]:
    /// the client's new readers hold back for it (its intent keeps them out on the server, or
    /// it waits for a local hand-over without one). A writer future parked unpolled stops
    /// counting after that long, as its intent on the server would.
    pub(crate) fn writers_wait_fresh(&self) -> bool {
        self.writers_wait()
            && self
                .writer_active
                .lock()
                .is_some_and(|at| at.elapsed() < WRITE_INTENT)
    }

    /// Whether a writer of this client waits (its intent keeps new readers out).
    pub(crate) fn writers_wait(&self) -> bool {
        self.writers_waiting.load(Ordering::Acquire) > 0
    }

    /// Whom a release of `hold` lets in: after a write, a waiting writer or else every waiting
    /// reader; after a shared read hold (often this client's last reader), a waiting writer;
    /// after an owner's own read, nobody (the last reader's message wakes a writer).
    pub(crate) fn to_wake(&self, hold: Hold) -> Option<Kind> {
        if hold == Hold::Own(Kind::Read) {
            return None;
        }
        if self.writers_waiting.load(Ordering::Acquire) > 0 {
            Some(Kind::Write)
        } else if hold == Hold::Own(Kind::Write) && self.readers_waiting.load(Ordering::Acquire) > 0
        {
            Some(Kind::Read)
        } else {
            None
        }
    }

    /// Wakes one waiting writer, or every waiting reader.
    pub(crate) fn wake(subscriber: &Subscriber, channel: &str, whom: Kind) {
        match whom {
            Kind::Write => subscriber.wake_one(channel, Kind::Write.class()),
            Kind::Read => subscriber.wake_class(channel, Kind::Read.class()),
        }
    }
}

/// A waiter counted in [`LocalTurns`] while armed.
#[derive(Debug)]
pub(crate) struct Waiting {
    counter: Arc<AtomicUsize>,
    armed: AtomicBool,
}

impl Waiting {
    /// The waiter waits (counted once).
    pub(crate) fn arm(&self) {
        if !self.armed.swap(true, Ordering::AcqRel) {
            self.counter.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The waiter is done waiting; true when it was counted.
    pub(crate) fn disarm(&self) -> bool {
        let armed = self.armed.swap(false, Ordering::AcqRel);
        if armed {
            self.counter.fetch_sub(1, Ordering::AcqRel);
        }
        armed
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.disarm();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiter_counts_once_while_armed_and_never_after() {
        let turns = LocalTurns::default();
        let count = || turns.writers_waiting.load(Ordering::Acquire);
        let first = turns.waiting(Kind::Write);
        let second = turns.waiting(Kind::Write);
        assert_eq!(count(), 0, "counted before it waits");
        first.arm();
        first.arm();
        second.arm();
        assert_eq!(count(), 2);
        assert!(first.disarm());
        assert!(!first.disarm(), "disarmed twice");
        drop(first);
        assert_eq!(count(), 1);
        // A cancelled wait drops its waiter armed.
        drop(second);
        assert_eq!(count(), 0);
        assert_eq!(turns.readers_waiting.load(Ordering::Acquire), 0);
    }
}
