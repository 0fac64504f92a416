//! How a shared read hold is asked for and handed to the readers that wait for it: a
//! background task per share asks like any reader; the readers wait for its outcome.

use std::sync::Arc;
use std::time::Instant;

use super::{Outcome, ReadShares, Share, Slot, take_if_done};
use crate::family::rwlock::{Asking, Hold, Kind, ReadWriteLock};
use crate::family::rwlock_guard::kept;
use crate::terms::{Lease, Wait};
use tokio::sync::watch;

/// What a reader that waited for a share's grant got.
pub(crate) enum Joined {
    Member(Arc<Share>),
    TimedOut,
    Alone,
}

impl ReadShares {
    /// The task asking for share `id` got it at `started`.
    fn granted(&self, lock: &ReadWriteLock, id: u64, field: Arc<str>, started: Instant) {
        let lease = Lease::Watchdog(lock.client.inner.config.watchdog_lease);
        let share = Arc::new(Share {
            kept: kept(lock, Hold::Share, field.clone(), lease, started),
            field,
        });
        if lock.client.inner.check_open().is_err() {
            // Shutdown gave back the holds it knew of; this one came after.
            lock.give_back(share);
            return self.failed(id);
        }
        let mut state = self.state.lock();
        let Some(forming) = state.forming.take_if(|f| f.id == id) else {
            // Everyone stopped waiting as the grant came.
            drop(state);
            lock.give_back(share);
            return;
        };
        // Closed from its grant on: the readers that waited for it enter, later ones form the
        // next share (a 5 ms window for newcomers, with a task per share to close it, measured
        // slower in F2 and P2: docs/performance.md).
        state.live.push(Slot {
            share: share.clone(),
            owners: Vec::new(),
            pending: forming.interest,
        });
        forming.outcome.send_replace(Outcome::Granted(share));
    }

    /// The task asking for share `id` ended without a grant.
    fn failed(&self, id: u64) {
        let mut state = self.state.lock();
        if let Some(forming) = state.forming.take_if(|f| f.id == id) {
            forming.outcome.send_replace(Outcome::Failed);
        }
    }
}

/// Asks for share `id` for as long as readers wait for it (aborted when none does).
pub(super) async fn form(lock: ReadWriteLock, id: u64) {
    // Ended any other way (a panic, its runtime gone), the readers must not wait for it.
    struct Unfinished(ReadWriteLock, u64);
    impl Drop for Unfinished {
        fn drop(&mut self) {
            self.0.shares.failed(self.1);
        }
    }
    let _unfinished = Unfinished(lock.clone(), id);
    let field: Arc<str> = format!("{}:readers-{id}", lock.client.inner.id_text).into();
    let lease = Lease::Watchdog(lock.client.inner.config.watchdog_lease);
    let shares = &lock.shares;
    match lock
        .wait_hold(Kind::Read, &field, lease, Wait::Forever, Asking::Own)
        .await
    {
        Ok(Some(started)) => shares.granted(&lock, id, field, started),
        Ok(None) => shares.failed(id),
        Err(e) => {
            tracing::debug!(lock = %lock.keys.name, error = %e, "a shared read hold was not granted; its readers ask alone");
            shares.failed(id);
        }
    }
}

/// A reader waiting for a share's grant; dropped unclaimed, it gives up its place.
pub(crate) struct Interest {
    pub(super) lock: ReadWriteLock,
    pub(super) id: u64,
    pub(super) outcome: watch::Receiver<Outcome>,
    pub(super) owner: Arc<str>,
    pub(super) done: bool,
}

impl Interest {
    /// Waits (on `wait`'s terms) for the grant and takes the reader's place in the share.
    ///
    /// # Cancel safety
    /// Dropped while waiting, the reader gives up its place (see `Drop`).
    pub(crate) async fn granted(mut self, wait: Wait) -> Joined {
        let changed = self.outcome.wait_for(|o| !matches!(o, Outcome::Pending));
        let outcome = match wait {
            Wait::Until(at) => match tokio::time::timeout_at(at.into(), changed).await {
                Ok(outcome) => outcome.map(|o| o.clone()),
                Err(_) => return Joined::TimedOut,
            },
            _ => changed.await.map(|o| o.clone()),
        };
        let Ok(Outcome::Granted(share)) = outcome else {
            self.done = true;
            return Joined::Alone;
        };
        self.done = true;
        let mut state = self.lock.shares.state.lock();
        match state.slot_mut(&share) {
            Some(slot) if slot.usable() => {
                slot.pending -= 1;
                slot.enter(&self.owner);
                Joined::Member(share)
            }
            // Lost (or no longer confirmed) before this reader came: it asks alone.
            _ => {
                drop(state);
                self.unclaim(&share);
                Joined::Alone
            }
        }
    }
}

impl Interest {
    /// Gives up the place kept for this reader in `share`'s grant (a share left empty and done
    /// with is released).
    fn unclaim(&self, share: &Arc<Share>) {
        let mut state = self.lock.shares.state.lock();
        let Some(slot) = state.slot_mut(share) else {
            return;
        };
        slot.pending -= 1;
        let done = take_if_done(&mut state, share);
        drop(state);
        if let Some(share) = done {
            self.lock.give_back(share);
        }
    }
}

impl Drop for Interest {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut state = self.lock.shares.state.lock();
        if let Some(forming) = state.forming.as_mut().filter(|f| f.id == self.id) {
            forming.interest -= 1;
            if forming.interest == 0 {
                // Nobody waits: stop asking (a grant on the wire is given back).
                if let Some(forming) = state.forming.take() {
                    forming.task.abort();
                }
            }
            return;
        }
        drop(state);
        if let Outcome::Granted(share) = self.outcome.borrow().clone() {
            self.unclaim(&share);
        }
    }
}
