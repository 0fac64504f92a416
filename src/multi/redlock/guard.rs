//! `RedLockGuard`: a RedLock held on a majority of its nodes.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use crate::error::{Error, Result};
use crate::hold::{any_changed, any_lost};
use crate::task::AbortOnDrop;

use super::renewal::renew;
use super::shared::Shared;

/// A [`RedLock`](crate::RedLock) held on a majority of its nodes. Release it with
/// [`unlock`](RedLockGuard::unlock) (errors visible) or by dropping it (background release).
///
/// The guard remembers the owner it acquired for, so it may be moved to and unlocked from any
/// task or thread.
///
/// # Drop
/// Drop never blocks: it stops the renewal at once and spawns the release on every node on the
/// runtime its clients were built on, from any thread; once that runtime has ended, the leases
/// free the keys. A guard leaked with
/// `std::mem::forget` is never released and its renewal runs on as long as the runtime does.
#[must_use = "if unused the lock is released immediately"]
#[clippy::has_significant_drop]
pub struct RedLockGuard {
    // Declared first: the renewal stops before anything else is dropped.
    renewal: Option<AbortOnDrop>,
    shared: Arc<Shared>,
}

impl RedLockGuard {
    pub(super) fn start(shared: Shared, renewed: bool) -> RedLockGuard {
        let period = (shared.lease / 3).max(Duration::from_millis(1));
        let shared = Arc::new(shared);
        let renewal =
            renewed.then(|| AbortOnDrop(tokio::spawn(renew(Arc::downgrade(&shared), period))));
        RedLockGuard { renewal, shared }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// How long the lock is still known valid: `valid_until − now`, zero once it has passed.
    ///
    /// Right after acquisition this is the Redlock validity `lease − elapsed − drift`; every
    /// renewal confirmed by a majority moves it forward. Check it before work that must not run
    /// without the lock.
    pub fn validity(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// The instant until which the lock is known valid: the start of the last round (acquisition
    /// or renewal) that a majority of nodes confirmed, plus the lease, minus the drift allowance.
    pub fn valid_until(&self) -> Instant {
        self.shared.valid_until()
    }

    /// Whether the lock is known lost: fewer than a majority of nodes still hold it (found gone
    /// by a renewal or, as soon as it sees the key go, by the node's loss notice when it is on;
    /// or given back by the shutdown of their clients), or its validity ran out
    /// (for a fixed lease, simply its end). Once lost, always lost: a renewal
    /// that succeeds after the validity ran out (the process was paused, say) does not bring
    /// the guard back.
    pub fn is_lost(&self) -> bool {
        self.shared.is_lost()
    }

    /// A future that resolves when the lock is lost (see [`is_lost`](RedLockGuard::is_lost)).
    /// It does not borrow the guard, so it can be raced against the work done under the lock.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let shared = self.shared.clone();
        async move {
            // A node's hold lost (its client shut down, say) may leave too few: look again;
            // also when one lost already changes (a lapsed node found gone). Asked again once
            // the members are sorted, so a loss in between is not missed.
            let any_member_lost = || {
                let (lost, live): (Vec<_>, Vec<_>) = shared
                    .member_holds()
                    .into_iter()
                    .partition(|hold| hold.is_lost());
                let (lost, changed) = (Box::pin(any_lost(live)), Box::pin(any_changed(lost)));
                let shared = shared.clone();
                async move {
                    if !shared.is_lost() {
                        futures_util::future::select(lost, changed).await;
                    }
                }
            };
            let lost = || shared.is_lost();
            shared.validity.until_lost(lost, any_member_lost).await
        }
    }

    /// For [fenced](crate::Lock::fenced) nodes: the largest fencing counter among the nodes
    /// that granted the lock, to which a majority of nodes were then raised. See *Fencing* on
    /// [`RedLock`](crate::RedLock) for what it guarantees.
    pub fn fencing_token(&self) -> Option<u64> {
        self.shared.token
    }

    /// On how many nodes the lock is held now, not counting one whose key was found gone, whose
    /// client shut down, or whose hold was released by name (renewal may re-take nodes that
    /// lost it).
    pub fn held_nodes(&self) -> usize {
        self.shared.held_nodes()
    }

    /// How many nodes must hold the lock: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.shared.quorum
    }

    /// Stops the renewal, then releases the lock on every node that holds it, all at once,
    /// waiting for each node at most `max(node timeout, min(lease / 10, 1 s))`; a release still
    /// unanswered then goes on in the background.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when the lock was lost while held (it is released everywhere
    /// anyway): either the guard was already lost, or fewer than a majority of nodes still had
    /// it; [`Error::Shutdown`] instead when that is because the clients of nodes were shut down
    /// (which released it there). Otherwise the first release error, but only when the nodes that could not release
    /// are so many that no other owner can form a majority until their leases run out; fewer
    /// failures are logged and the lock counts as released. [`Error::NoRuntime`] when polled
    /// outside a tokio runtime, whether or not the lock was lost: it is then released on every
    /// node in the background, on the runtime its clients were built on.
    ///
    /// # Cancel safety
    /// Dropping the future still completes every release in the background.
    pub async fn unlock(mut self) -> Result<()> {
        self.renewal.take();
        // Off the runtime no timer can run: the guard's Drop gives every member back on its
        // client's runtime instead.
        crate::task::in_runtime()?;
        let was_lost = self.shared.is_lost();
        let members = self.shared.close();
        let nodes = self.shared.nodes.len();
        let quorum = self.shared.quorum;
        let held = members.len();
        let settle = self.shared.settle_timeout;
        // A node that does not answer in time counts as failed; its release goes on in the
        // background.
        let results = join_all(members.into_iter().map(|member| async move {
            match tokio::time::timeout(settle, member.unlock()).await {
                Ok(result) => result,
                Err(_) => Err(Error::Timeout {
                    operation: "release",
                    timeout: settle,
                }),
            }
        }))
        .await;
        let (mut gone, mut shut) = (0, 0);
        let mut failures = Vec::new();
        for result in results {
            match result {
                Ok(()) => {}
                Err(e) if e.is_lease_lost() => gone += 1,
                // That node's client shut down, which gave the hold back.
                Err(e) if e.is_shutdown() => shut += 1,
                Err(e) => failures.push(e),
            }
        }
        if was_lost || held - gone - shut < quorum {
            // As a `LockGuard` says after its client's shutdown.
            if shut > 0 {
                return Err(Error::Shutdown);
            }
            return Err(Error::LeaseLost {
                name: self.shared.name.to_string(),
            });
        }
        for e in &failures {
            tracing::warn!(lock = %self.shared.name, error = %e, "RedLock release failed on a node; its lease frees it");
        }
        // Nodes that could not release may still hold our key; the rest must be able to form a
        // majority for someone else.
        let stuck = failures.len();
        match failures.into_iter().next() {
            Some(e) if nodes - stuck < quorum => Err(e),
            _ => Ok(()),
        }
    }
}

impl Drop for RedLockGuard {
    fn drop(&mut self) {
        self.renewal.take();
        // Each member guard spawns its own release.
        drop(self.shared.close());
    }
}

impl std::fmt::Debug for RedLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedLockGuard")
            .field("name", &self.shared.name)
            .field("held_nodes", &self.held_nodes())
            .field("quorum", &self.shared.quorum)
            .field("validity", &self.validity())
            .field("token", &self.shared.token)
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}
