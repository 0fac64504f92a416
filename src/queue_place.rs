//! A waiter's place in a lock's server-side queue (`lua/queue.lua`), from the client's side.
//!
//! A waiter's attempts after its first queue it on the server: a release then gives the lock
//! to the first queued waiter in the same script call and names it in one message to that
//! waiter's client alone, so only that waiter acts (it holds the lock from the message, or
//! claims the grant with its next attempt) and every other waiter keeps sleeping. The place is armed before an attempt that may queue goes out; when
//! the wait ends without the lock (it ran out, it was cancelled, it failed) the place is
//! withdrawn in the background: the entry goes, and a grant that had not been claimed yet goes
//! to the next waiter. The withdrawal counts as a release in flight of this owner (`turns.rs`),
//! so the owner's next acquisition is sent after it.

use std::sync::Arc;
use std::time::Instant;

use crate::keys::LockKeys;
use crate::node::QueueTerms;
use crate::shared::Client;
use crate::task::spawn_from_drop;

/// A queue entry that may exist on the server for (`keys`, `field`); withdrawn on drop unless
/// [`taken`](QueuePlace::taken).
pub(crate) struct QueuePlace {
    client: Client,
    keys: Arc<LockKeys>,
    field: Arc<str>,
    armed: bool,
    /// The terms and send time of the latest attempt that queued us, if its answer was a
    /// refusal: a grant's message naming it hands us the lock (`Lock::hold_from_grant`). Cleared
    /// when an attempt goes out (it claims any earlier grant, or finds it gone) and when we
    /// gave back a hold that may have been the grant; gone with the place when withdrawn.
    pub(crate) queued_by: Option<(QueueTerms, Instant)>,
}

impl QueuePlace {
    pub(crate) fn new(client: &Client, keys: &Arc<LockKeys>, field: &Arc<str>) -> QueuePlace {
        QueuePlace {
            client: client.clone(),
            keys: keys.clone(),
            field: field.clone(),
            armed: true,
            queued_by: None,
        }
    }

    /// The lock was granted: the script took the entry out.
    pub(crate) fn taken(mut self) {
        self.armed = false;
    }

    /// The wait ran out: withdraws now, so the place is gone when the caller hears `None` (a
    /// process that exits right after would leave it to its deadline, and a grant to it would
    /// idle the lock for a claim lease). Dropped while in flight, it finishes in the background.
    pub(crate) async fn withdraw(mut self) {
        let inner = &self.client.inner;
        let releasing = inner.turns.start_release(&self.keys.hash, &self.field);
        withdraw_entry(&self.client, &self.keys, &self.field).await;
        self.armed = false;
        drop(releasing);
    }
}

/// Takes `field`'s entry out of the lock's server queue (`lua/withdraw.lua`); a grant to it
/// that was not taken yet goes to the next waiter, and this client's own waiters are told.
/// A failure is logged: the entry then ends at its deadline, a grant at its claim lease.
pub(crate) async fn withdraw_entry(client: &Client, keys: &LockKeys, field: &str) {
    match client.inner.node.withdraw(keys, field).await {
        Ok(true) => {
            tracing::debug!(lock = %keys.name, "gave back a grant its waiter stopped waiting for");
            // This client's own waiters hear of it only here (the message is ours).
            client.inner.local_queues.released(&keys.hash);
        }
        Ok(false) => {}
        Err(e) => {
            tracing::debug!(lock = %keys.name, error = %e, "could not withdraw a queue entry; it ends at its deadline");
        }
    }
}

impl Drop for QueuePlace {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let inner = &self.client.inner;
        let releasing = inner.turns.start_release(&self.keys.hash, &self.field);
        let (client, keys, field) = (self.client.clone(), self.keys.clone(), self.field.clone());
        let withdraw = async move {
            withdraw_entry(&client, &keys, &field).await;
            drop(releasing);
        };
        // No runtime: the entry dies at its deadline, a grant at its claim lease.
        spawn_from_drop(&inner.background, withdraw);
    }
}
