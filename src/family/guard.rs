//! [`Guard`]: what every hold of the family has in common, so code (the CLI, a supervisor) can
//! keep any of them: a [`LockGuard`], a [`RedLockGuard`], a [`ReadGuard`] or [`WriteGuard`], a
//! [`FairGuard`], a [`Permit`], a [`MultiLockGuard`] (named by its members, `+`-joined), or an
//! election's [`Leadership`](crate::Leadership).
//!
//! They mean the same everywhere: `tests/guard_conformance.rs` runs one body per behaviour for
//! every guard type, and [`LockGuard`]'s documentation is the reference.

use std::future::Future;
use std::pin::Pin;
use std::time::Instant;

use crate::error::Result;
use crate::family::{Permit, ReadGuard, WriteGuard};
use crate::guard::LockGuard;
use crate::multi::{MultiLockGuard, RedLockGuard};

/// A boxed future, as the object-safe methods of [`Guard`] return.
pub type GuardFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// A hold of any lock kind: its name, its lost signal and validity, its fencing token, and its
/// release. Object-safe: `Box<dyn Guard>` holds any of them.
///
/// ```no_run
/// # async fn demo(client: redlease::Client) -> redlease::Result<()> {
/// use redlease::Guard;
/// let held: Vec<Box<dyn Guard>> = vec![
///     Box::new(client.lock("a")?.lock().await?),
///     Box::new(client.read_write_lock("b")?.read().lock().await?),
///     Box::new(client.permit_semaphore("c")?.acquire().await?),
/// ];
/// for guard in held {
///     println!("{} valid for {:?}", guard.name(), guard.valid_until().elapsed());
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
pub trait Guard: Send + Sync {
    /// The name of the lock (or semaphore) held.
    fn name(&self) -> &str;
    /// Whether the hold is known lost.
    fn is_lost(&self) -> bool;
    /// Resolves when the hold is known lost.
    fn lost(&self) -> GuardFuture<()>;
    /// Until when the hold is known valid.
    fn valid_until(&self) -> Instant;
    /// The fencing token, for kinds and locks that have one.
    fn fencing_token(&self) -> Option<u64> {
        None
    }
    /// Releases the hold.
    ///
    /// # Errors
    /// As [`LockGuard::unlock`], for every kind:
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) when the hold was lost while held,
    /// [`Error::Shutdown`](crate::Error::Shutdown) when the client was shut down (which
    /// released it), Redis failures.
    ///
    /// # Cancel safety
    /// Dropping the future still completes the release in the background.
    fn unlock(self: Box<Self>) -> GuardFuture<Result<()>>;
}

impl Guard for LockGuard {
    fn name(&self) -> &str {
        LockGuard::name(self)
    }
    fn is_lost(&self) -> bool {
        LockGuard::is_lost(self)
    }
    fn lost(&self) -> GuardFuture<()> {
        Box::pin(LockGuard::lost(self))
    }
    fn valid_until(&self) -> Instant {
        LockGuard::valid_until(self)
    }
    fn fencing_token(&self) -> Option<u64> {
        LockGuard::fencing_token(self)
    }
    fn unlock(self: Box<Self>) -> GuardFuture<Result<()>> {
        Box::pin(LockGuard::unlock(*self))
    }
}

impl Guard for RedLockGuard {
    fn name(&self) -> &str {
        RedLockGuard::name(self)
    }
    fn is_lost(&self) -> bool {
        RedLockGuard::is_lost(self)
    }
    fn lost(&self) -> GuardFuture<()> {
        Box::pin(RedLockGuard::lost(self))
    }
    fn valid_until(&self) -> Instant {
        RedLockGuard::valid_until(self)
    }
    fn fencing_token(&self) -> Option<u64> {
        RedLockGuard::fencing_token(self)
    }
    fn unlock(self: Box<Self>) -> GuardFuture<Result<()>> {
        Box::pin(RedLockGuard::unlock(*self))
    }
}

impl Guard for MultiLockGuard {
    fn name(&self) -> &str {
        MultiLockGuard::name(self)
    }
    fn is_lost(&self) -> bool {
        MultiLockGuard::is_lost(self)
    }
    fn lost(&self) -> GuardFuture<()> {
        Box::pin(MultiLockGuard::lost(self))
    }
    fn valid_until(&self) -> Instant {
        MultiLockGuard::valid_until(self)
    }
    fn unlock(self: Box<Self>) -> GuardFuture<Result<()>> {
        Box::pin(MultiLockGuard::unlock(*self))
    }
}

macro_rules! family_guard {
    ($guard:ty, $unlock:ident, $name:expr) => {
        impl Guard for $guard {
            fn name(&self) -> &str {
                $name(self)
            }
            fn is_lost(&self) -> bool {
                <$guard>::is_lost(self)
            }
            fn lost(&self) -> GuardFuture<()> {
                Box::pin(<$guard>::lost(self))
            }
            fn valid_until(&self) -> Instant {
                <$guard>::valid_until(self)
            }
            fn unlock(self: Box<Self>) -> GuardFuture<Result<()>> {
                Box::pin(<$guard>::$unlock(*self))
            }
        }
    };
}

family_guard!(ReadGuard, unlock, ReadGuard::name);
family_guard!(WriteGuard, unlock, WriteGuard::name);
family_guard!(Permit, release, Permit::semaphore_name);
