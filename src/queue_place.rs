//! A waiter's place in a server-side queue, from the client's side: one type for every kind
//! (`lua/queue.lua`: a lock's, granted by `lua/queue_lock.lua`; a semaphore's or a read-write
//! lock's, granted by `lua/queue_permits.lua`).
//!
//! A waiter's attempts after its first queue it on the server: a call that frees what the
//! queue's head wants gives it to that waiter in the same script call and tells that waiter's
//! client alone, so only that waiter acts and every other waiter keeps sleeping. The place is
//! armed before an attempt that may queue goes out; when the wait ends without a grant (it ran
//! out, it was cancelled, it failed) the place is withdrawn: the entry goes, and a grant that
//! had not been claimed yet goes to the next waiter. A wait that runs out withdraws before its
//! caller hears `None` (a process that exits right after would leave its place to its
//! deadline, and a grant to it would idle the object for a claim lease), and so does a lock's
//! wait that failed; a cancelled wait, and a family wait that failed (its withdrawal is sent
//! again while it fails, for up to about 20 s), withdraw in the background.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::keys::{HoldKey, LockKeys};
use crate::shared::Client;
use crate::task::{Background, FinishOnDrop, spawn_from_drop};

/// A withdrawal as it runs.
type Withdrawal = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Starts a withdrawal: what must happen at the moment the wait ends (a lock's withdrawal
/// counts as a release in flight from then on) runs synchronously, the server call in the
/// future it returns.
type StartWithdrawal = Box<dyn FnOnce() -> Withdrawal + Send>;

/// A queue entry that may exist on the server; withdrawn unless [`taken`](QueuePlace::taken).
pub(crate) struct QueuePlace {
    background: Background,
    withdraw: Option<StartWithdrawal>,
}

impl QueuePlace {
    /// The place of a waiter whose withdrawal `withdraw` starts.
    pub(crate) fn new(
        client: &Client,
        withdraw: impl FnOnce() -> Withdrawal + Send + 'static,
    ) -> QueuePlace {
        QueuePlace {
            background: client.inner.background.clone(),
            withdraw: Some(Box::new(withdraw)),
        }
    }

    /// The place of `field` in the lock `keys`' queue (`lua/withdraw.lua` withdraws it). The
    /// withdrawal counts as a release in flight of this owner (`turns.rs`), so the owner's next
    /// acquisition is sent after it.
    pub(crate) fn in_lock(client: &Client, keys: &Arc<LockKeys>, field: &Arc<str>) -> QueuePlace {
        let (owner, keys, field) = (client.clone(), keys.clone(), field.clone());
        QueuePlace::new(client, move || {
            let client = owner;
            let releasing = (client.inner.turns).start_release(&HoldKey::new(&keys.hash, &field));
            Box::pin(async move {
                withdraw_entry(&client, &keys, &field).await;
                drop(releasing);
            })
        })
    }

    /// The grant was claimed: the script took the place out.
    pub(crate) fn taken(mut self) {
        self.withdraw = None;
    }

    /// The wait ended without a grant: withdraws now, so nothing of it is left when the caller
    /// hears so. Dropped unfinished, the withdrawal finishes in the background.
    pub(crate) async fn withdraw(mut self) {
        if let Some(withdraw) = self.withdraw.take() {
            FinishOnDrop::new(withdraw(), |()| async {})
                .tracked(&self.background)
                .await;
        }
    }
}

impl Drop for QueuePlace {
    fn drop(&mut self) {
        if let Some(withdraw) = self.withdraw.take() {
            // No runtime: the entry ends at its deadline, a grant to it with its claim lease.
            spawn_from_drop(&self.background, withdraw());
        }
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
