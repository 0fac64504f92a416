//! Running code under a lock (`Lock::run` and `Lock::try_run`), each body its own owner, and
//! what the body knows of the lock ([`HeldLock`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::hold::Hold;
use crate::terms::{Lease, Wait};

use super::{Lock, acquire, metadata};

/// What the body of [`Lock::run`] knows about the lock it runs under. Cheap to clone; it does
/// not keep the lock by itself (the lock is released when the body ends).
#[derive(Clone)]
pub struct HeldLock {
    hold: Arc<Hold>,
}

impl HeldLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.hold.keys.name
    }

    /// The fencing token, for fenced locks ([`Lock::fenced`]): pass it to the resource so it can
    /// reject writes from an older holder.
    pub fn fencing_token(&self) -> Option<u64> {
        self.hold.token
    }

    /// Whether the lease is known to be lost (see [`LockGuard::is_lost`]), or the body is over
    /// and the lock released.
    pub fn is_lost(&self) -> bool {
        self.hold.is_over()
    }

    /// Resolves when the lease is lost or the lock is released once the body is over. `run`
    /// already stops the body at a loss; this is for work the body hands to other tasks, which
    /// must stop either way.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.hold.over()
    }

    /// The instant until which the lease is known valid (see [`LockGuard::valid_until`]); once
    /// the lock is released, no later than that.
    pub fn valid_until(&self) -> Instant {
        self.hold.valid_until()
    }
}

impl std::fmt::Debug for HeldLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldLock")
            .field("name", &self.hold.keys.name)
            .field("token", &self.hold.token)
            .field("lost", &self.hold.is_lost())
            .finish()
    }
}

/// [`Lock::try_run`] once its terms are checked: the lock taken on `lease` and `wait` in a new
/// lock scope, `body` run under it and cancelled if the lease is lost, the lock released when
/// the body ends.
///
/// Not an `async fn`: the scope's future itself, so that a caller's stack of futures is no
/// deeper than with the body written in `Lock::try_run` (the compiler walks that stack to
/// prove it `Send`, up to a recursion limit an application's `tokio::spawn` can reach).
pub(super) fn run<'a, F, Fut, T>(
    lock: &'a Lock,
    (lease, wait): (Lease, Wait),
    metadata: Option<&'a str>,
    body: F,
) -> impl Future<Output = Result<Option<T>>> + 'a
where
    F: FnOnce(HeldLock) -> Fut + 'a,
    Fut: Future<Output = T> + 'a,
    T: 'a,
{
    crate::owner::in_new_scope(async move {
        let got = acquire::take(lock, lease, wait).await?;
        let Some(guard) = metadata::stored_with(lock, got, metadata).await? else {
            return Ok(None);
        };
        let held = HeldLock {
            hold: guard.hold().clone(),
        };
        let lost = guard.lost();
        let finished = tokio::select! {
            // A body that finishes in the same poll as the loss is taken as finished.
            biased;
            value = body(held) => Some(value),
            _ = lost => None,
        };
        match finished {
            Some(value) => {
                release_after_body(guard).await;
                Ok(Some(value))
            }
            None => Err(Error::LeaseLost {
                name: lock.keys.name.to_string(),
            }),
        }
    })
}

/// Releases the lock of a body that finished: the body's value stands whatever the release says.
async fn release_after_body(guard: LockGuard) {
    let name = guard.name().to_owned();
    if let Err(e) = guard.unlock().await {
        tracing::warn!(lock = %name, error = %e, "release after the body finished failed; the lease frees the key");
    }
}
