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

/// `impl Guard` by the type's own methods of the same names: `name`, the release
/// (`unlock`, or a permit's `release`), and the fencing token for kinds that have one.
macro_rules! guard_by_methods {
    ($guard:ty, $name:expr, $unlock:expr $(, $token:expr)?) => {
        impl $crate::family::Guard for $guard {
            fn name(&self) -> &str {
                $name(self)
            }
            fn is_lost(&self) -> bool {
                <$guard>::is_lost(self)
            }
            fn lost(&self) -> $crate::family::GuardFuture<()> {
                Box::pin(<$guard>::lost(self))
            }
            fn valid_until(&self) -> std::time::Instant {
                <$guard>::valid_until(self)
            }
            $(fn fencing_token(&self) -> Option<u64> {
                $token(self)
            })?
            fn unlock(self: Box<Self>) -> $crate::family::GuardFuture<$crate::error::Result<()>> {
                Box::pin($unlock(*self))
            }
        }
    };
}
pub(crate) use guard_by_methods;

guard_by_methods!(
    LockGuard,
    LockGuard::name,
    LockGuard::unlock,
    LockGuard::fencing_token
);
guard_by_methods!(
    RedLockGuard,
    RedLockGuard::name,
    RedLockGuard::unlock,
    RedLockGuard::fencing_token
);
guard_by_methods!(MultiLockGuard, MultiLockGuard::name, MultiLockGuard::unlock);
guard_by_methods!(ReadGuard, ReadGuard::name, ReadGuard::unlock);
guard_by_methods!(WriteGuard, WriteGuard::name, WriteGuard::unlock);
guard_by_methods!(Permit, Permit::semaphore_name, Permit::release);
