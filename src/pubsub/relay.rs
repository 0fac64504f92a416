//! Relay waiting: one message wakes one waiter of a class, and a waiter that got what it waited
//! for passes the turn on.
//!
//! A read-write lock's waiters in one client all listen on one channel. Woken together by every
//! release, each sends an attempt, and under contention nearly all of them are refused again:
//! with 64 tasks on one read-write lock that herd was eight refused script calls for every
//! granted one. Relay waiters instead take turns: the first waiter of a class to see a message
//! claims it and attempts; if it is granted, the next ones are likely to be too (more readers),
//! so it wakes `pass` more; if it is refused, the rest sleep on. (The semaphores do not need
//! this: their waiters queue on the server, which tells each grantee alone, `lua/fifo.lua`.)
//! A turn is never lost: a waiter dropped while holding one (cancelled, timed out, failed)
//! passes it on, a shutdown or reconnect still wakes everybody, and every waiter keeps its own
//! bounded nap.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

use super::channel::{Channel, Subscription};

/// How many classes of relay waiters one channel has (a read-write lock's readers and writers).
pub(super) const RELAY_CLASSES: usize = 2;

/// Which turns a relay waiter takes: its class's, and how many it passes on when granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RelayClass {
    /// Waiters of different classes on one channel take turns independently.
    pub class: usize,
    /// How many waiters a granted one wakes (0: a grant leaves nothing for the others).
    pub pass: usize,
}

/// One class's turns on one channel.
#[derive(Default)]
pub(super) struct Relay {
    /// The newest message epoch some waiter has claimed.
    claimed: AtomicU64,
    /// Turns passed on by waiters (a permit is kept when nobody waits yet).
    baton: Notify,
}

impl Subscription {
    /// Resolves when it is this waiter's turn: it claimed a new message for its class, was
    /// passed a turn, or everybody was woken (shutdown, reconnect). When the client polls,
    /// every pause ends a turn.
    ///
    /// # Cancel safety
    /// Cancel-safe: a turn is claimed only on the way out; the [`Turn`] it returns passes
    /// itself on if it is dropped unused.
    pub(crate) async fn turn(&self, relay: RelayClass) -> Turn {
        // Made only on the way out: a turn dropped unclaimed must not pass anything on.
        let turn = || Turn {
            channel: self.channel.clone(),
            relay,
            pass_on_drop: true,
        };
        if self.polls() {
            self.notified().await;
            return turn();
        }
        let channel = &self.channel;
        let turns = &channel.relays[relay.class.min(RELAY_CLASSES - 1)];
        let everyone_before = channel.everyone.load(Ordering::Acquire);
        loop {
            let baton = turns.baton.notified();
            tokio::pin!(baton);
            baton.as_mut().enable();
            tokio::select! {
                () = self.on_message() => {
                    if channel.everyone.load(Ordering::Acquire) > everyone_before {
                        return turn();
                    }
                    let seen = self.seen.load(Ordering::Acquire);
                    if turns.claimed.fetch_max(seen, Ordering::AcqRel) < seen {
                        return turn();
                    }
                }
                () = &mut baton => return turn(),
            }
        }
    }
}

impl Channel {
    /// Gives every relay waiter of `class` waiting now a turn.
    pub(super) fn wake_class(&self, class: usize) {
        self.relays[class.min(RELAY_CLASSES - 1)]
            .baton
            .notify_waiters();
    }

    /// Gives one relay waiter of `class` a turn (the next to wait if none waits now).
    pub(super) fn wake_one(&self, class: usize) {
        self.relays[class.min(RELAY_CLASSES - 1)].baton.notify_one();
    }
}

/// A relay turn being used. Granted, it wakes the class's next waiters; refused, it ends; dropped
/// unused (an error, a cancelled wait), it wakes one waiter so the turn is not lost.
pub(crate) struct Turn {
    channel: Arc<Channel>,
    relay: RelayClass,
    pass_on_drop: bool,
}

impl Turn {
    fn turns(&self) -> &Relay {
        &self.channel.relays[self.relay.class.min(RELAY_CLASSES - 1)]
    }

    fn pass(&self, n: usize) {
        for _ in 0..n {
            self.turns().baton.notify_one();
        }
    }

    /// What this waiter waited for was granted: the next ones may be lucky too.
    pub(crate) fn granted(mut self) {
        self.pass_on_drop = false;
        self.pass(self.relay.pass);
    }

    /// Refused: the others sleep on until the next message.
    pub(crate) fn refused(mut self) {
        self.pass_on_drop = false;
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        if self.pass_on_drop {
            self.pass(1);
        }
    }
}
