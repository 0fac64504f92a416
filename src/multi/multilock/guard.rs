//! `MultiLockGuard`: every member of a `MultiLock`, held together.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use crate::error::Result;
use crate::guard::LockGuard;
use crate::hold::any_lost;
use crate::multi::member::release_all;

/// Every member of a [`MultiLock`](crate::MultiLock), held together. Release with
/// [`unlock`](MultiLockGuard::unlock) (errors visible) or by dropping it (background release).
///
/// The guard keeps each member's owner, so it may be moved to and unlocked from any task.
///
/// # Drop
/// As for [`LockGuard`](crate::LockGuard), per member: renewals stop at once and the releases
/// are spawned on the current runtime.
#[must_use = "if unused the locks are released immediately"]
#[clippy::has_significant_drop]
pub struct MultiLockGuard {
    members: Vec<LockGuard>,
    /// The member names, `+`-joined.
    name: String,
}

impl MultiLockGuard {
    pub(super) fn new(members: Vec<LockGuard>) -> MultiLockGuard {
        let names: Vec<&str> = members.iter().map(LockGuard::name).collect();
        let name = names.join("+");
        MultiLockGuard { members, name }
    }

    /// The member names, `+`-joined (as [`Error::Busy`](crate::Error::Busy) names the set).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The member names, in member order.
    pub fn names(&self) -> Vec<&str> {
        self.members.iter().map(|h| &*h.hold().keys.name).collect()
    }

    /// The fencing token of each member (see [`Lock::fenced`]), in member order.
    ///
    /// [`Lock::fenced`]: crate::Lock::fenced
    pub fn fencing_tokens(&self) -> Vec<Option<u64>> {
        self.members.iter().map(|h| h.hold().token).collect()
    }

    /// Whether any member's lease is known to be lost; then the set is no longer held as a
    /// whole.
    pub fn is_lost(&self) -> bool {
        self.members.iter().any(|h| h.hold().is_lost())
    }

    /// Resolves when any member's lease is lost (see [`LockGuard::lost`](crate::LockGuard::lost)).
    /// It does not borrow the guard.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        // Never empty: `MultiLock::new` rejects an empty list.
        any_lost(self.members.iter().map(|h| h.hold().clone()).collect())
    }

    /// The earliest instant until which every member is known valid.
    pub fn valid_until(&self) -> Instant {
        self.members
            .iter()
            .map(|h| h.hold().valid_until())
            .min()
            .unwrap_or_else(Instant::now)
    }

    /// Releases every member concurrently. Every member is released whatever happens to the
    /// others; use [`unlock_each`](MultiLockGuard::unlock_each) to see every result.
    ///
    /// # Errors
    /// The first failure in member order: [`Error::LeaseLost`] when that member's lease was lost
    /// while held, else as [`LockGuard::unlock`](crate::LockGuard::unlock).
    ///
    /// [`Error::LeaseLost`]: crate::Error::LeaseLost
    ///
    /// # Cancel safety
    /// Dropping the future still completes every release in the background.
    pub async fn unlock(self) -> Result<()> {
        self.unlock_each().await.into_iter().collect()
    }

    /// Releases every member concurrently and returns one result per member, in member order.
    ///
    /// # Errors
    /// None of its own: each member's result is as [`LockGuard::unlock`](crate::LockGuard::unlock)'s.
    ///
    /// # Cancel safety
    /// As [`MultiLockGuard::unlock`].
    pub async fn unlock_each(mut self) -> Vec<Result<()>> {
        let members = std::mem::take(&mut self.members);
        let names: Vec<Arc<str>> = members.iter().map(|h| h.hold().keys.name.clone()).collect();
        let results = release_all(members).await;
        for (name, result) in names.iter().zip(&results) {
            if let Err(e) = result {
                tracing::debug!(lock = %name, error = %e, "MultiLock member release failed");
            }
        }
        results
    }
}

impl std::fmt::Debug for MultiLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MultiLockGuard")
            .field("members", &self.names())
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}
