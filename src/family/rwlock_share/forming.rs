//! How a shared read hold is asked for and handed to the readers that wait for it: a
//! background task per share asks like any reader; the readers wait for its outcome.

use std::sync::Arc;
use std::time::Instant;

use super::{JOIN_WINDOW, Outcome, ReadShares, Share, Slot, give_back, release, take_if_done};
use crate::family::kept::Kept;
use crate::family::rwlock::{Asking, Kind, ReadWriteLock};
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
            kept: kept(lock, field.clone(), lease, started),
            field,
        });
        if lock.client.inner.check_open().is_err() {
            // Shutdown gave back the holds it knew of; this one came after.
            give_back(lock, share);
            return self.failed(id);
        }
        let mut state = self.state.lock();
        let Some(forming) = state.forming.take_if(|f| f.id == id) else {
            // Everyone stopped waiting as the grant came.
            drop(state);
            return give_back(lock, share);
        };
        for older in &mut state.live {
            older.closed = true;
        }
        state.live.push(Slot {
            share: share.clone(),
            owners: Vec::new(),
            pending: forming.interest,
            most: forming.interest,
            // A writer of this client came meanwhile: only the waiting readers enter.
            closed: lock.local.writers_wait(),
        });
        forming
            .outcome
            .send_replace(Outcome::Granted(share.clone()));
        drop(state);
        let tracker = lock.client.inner.background.clone();
        let lock = lock.clone();
        let window = async move {
            tokio::time::sleep(JOIN_WINDOW).await;
            if let Some(share) = lock.local.shares.close(&share) {
                let _ = release(&lock, &share, false).await;
            }
        };
        drop(tracker.spawn(window));
    }

    /// The task asking for share `id` ended without a grant.
    fn failed(&self, id: u64) {
        let mut state = self.state.lock();
        if let Some(forming) = state.forming.take_if(|f| f.id == id) {
            forming.outcome.send_replace(Outcome::Failed);
        }
    }
}

/// The lease side of a share: renewed while it lives, released at shutdown.
fn kept(lock: &ReadWriteLock, field: Arc<str>, lease: Lease, started: Instant) -> Kept {
    let renew = {
        let (lock, field) = (lock.clone(), field.clone());
        let lease_ms = lease.ms();
        move || {
            let (lock, field) = (lock.clone(), field.clone());
            async move { Ok(lock.call(Kind::Read.ops().2, &field, lease_ms).await? == 1) }
        }
    };
    let release = {
        let lock = lock.clone();
        move || {
            let (lock, field) = (lock.clone(), field.clone());
            async move { lock.release_share(&field, false).await.map(drop) }
        }
    };
    let name = lock.keys.name.clone();
    Kept::new(&lock.client, name, lease, started, renew, release)
}

/// Asks for share `id` for as long as readers wait for it (aborted when none does).
pub(super) async fn form(lock: ReadWriteLock, id: u64) {
    // Ended any other way (a panic, its runtime gone), the readers must not wait for it.
    struct Unfinished(ReadWriteLock, u64);
    impl Drop for Unfinished {
        fn drop(&mut self) {
            self.0.local.shares.failed(self.1);
        }
    }
    let _unfinished = Unfinished(lock.clone(), id);
    let field: Arc<str> = format!("{}:readers-{id}", lock.client.inner.id_text).into();
    let lease = Lease::Watchdog(lock.client.inner.config.watchdog_lease);
    let shares = &lock.local.shares;
    match lock
        .wait_hold(Kind::Read, &field, lease, Wait::Forever, Asking::Share)
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
        let mut state = self.lock.local.shares.state.lock();
        let slot = state
            .live
            .iter_mut()
            .find(|s| Arc::ptr_eq(&s.share, &share));
        let Some(slot) = slot else {
            return Joined::Alone;
        };
        slot.pending -= 1;
        if !slot.usable() {
            // Lost (or no longer confirmed) before this reader came: it asks alone.
            let done = take_if_done(&mut state, &share);
            drop(state);
            if let Some(share) = done {
                give_back(&self.lock, share);
            }
            return Joined::Alone;
        }
        slot.enter(&self.owner);
        Joined::Member(share)
    }
}

impl Drop for Interest {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut state = self.lock.local.shares.state.lock();
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
        let Outcome::Granted(share) = self.outcome.borrow().clone() else {
            return;
        };
        let Some(slot) = state
            .live
            .iter_mut()
            .find(|s| Arc::ptr_eq(&s.share, &share))
        else {
            return;
        };
        slot.pending -= 1;
        let Some(share) = take_if_done(&mut state, &share) else {
            return;
        };
        drop(state);
        give_back(&self.lock, share);
    }
}
