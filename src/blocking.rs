//! The same locks for synchronous code.
//!
//! A [`Client`] here owns a small private tokio runtime that runs the connection, the watchdog
//! and the subscriber in the background; each call blocks the calling thread until it is done.
//! The owner of a lock is the calling **thread**: the same thread re-enters, other threads are
//! excluded.
//!
//! ```no_run
//! # fn demo() -> redlease::Result<()> {
//! let client = redlease::blocking::Client::connect("redis://127.0.0.1:6379")?;
//! let lock = client.lock("reports:nightly")?;
//! let guard = lock.lock()?;
//! let nested = lock.lock()?; // same thread: re-enters
//! nested.unlock()?;
//! guard.unlock()?;
//! # Ok(()) }
//! ```
//!
//! # Panics
//! Every blocking call panics when made from inside an async context (a tokio runtime), as
//! blocking there would stall the runtime's worker; use the async API there.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::runtime::{Handle, Runtime};

use crate::error::Result;
use crate::{ClientBuilder, LockStatus, Owner};

/// Owns the private runtime; shuts it down without blocking when the last handle goes.
struct Rt {
    /// Drives futures on the runtime (a multi-thread runtime's handle can block on them).
    handle: Handle,
    /// Only taken by Drop, to shut the runtime down without blocking.
    runtime: Option<Runtime>,
}

impl Rt {
    fn new(runtime: Runtime) -> Rt {
        Rt {
            handle: runtime.handle().clone(),
            runtime: Some(runtime),
        }
    }

    fn block_on<F: Future>(&self, fut: F) -> F::Output {
        if Handle::try_current().is_ok() {
            panic!("redlease::blocking called from inside an async context; use the async API");
        }
        self.handle.block_on(fut)
    }
}

impl Drop for Rt {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// A blocking [`crate::Client`]. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    inner: crate::Client,
    rt: Arc<Rt>,
}

impl Client {
    /// Connects with the default configuration.
    ///
    /// # Errors
    /// As [`crate::ClientBuilder::build`]; also [`crate::Error::InvalidArgument`] when the
    /// private runtime cannot be started.
    pub fn connect(url: &str) -> Result<Client> {
        Client::build(crate::Client::builder(url))
    }

    /// Connects with the settings of an async [`ClientBuilder`].
    ///
    /// # Errors
    /// As [`Client::connect`].
    pub fn build(builder: ClientBuilder) -> Result<Client> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("redlease-blocking")
            .enable_all()
            .build()
            .map_err(|e| crate::Error::InvalidArgument(format!("cannot start a runtime: {e}")))?;
        let rt = Arc::new(Rt::new(runtime));
        let inner = rt.block_on(builder.build())?;
        Ok(Client { inner, rt })
    }

    /// A handle to the lock `name`.
    ///
    /// # Errors
    /// [`crate::Error::InvalidName`].
    pub fn lock(&self, name: &str) -> Result<Lock> {
        Ok(Lock {
            inner: self.inner.lock(name)?,
            rt: self.rt.clone(),
        })
    }

    /// The async client underneath.
    pub fn as_async(&self) -> &crate::Client {
        &self.inner
    }

    /// Releases every hold and stops the background tasks; see [`crate::Client::shutdown`].
    ///
    /// # Errors
    /// As [`crate::Client::shutdown`].
    pub fn shutdown(&self) -> Result<()> {
        self.rt.block_on(self.inner.shutdown())
    }
}

/// A blocking [`crate::Lock`]; the owner is the calling thread unless set with
/// [`Lock::with_owner`].
#[derive(Clone)]
pub struct Lock {
    inner: crate::Lock,
    rt: Arc<Rt>,
}

impl Lock {
    /// Acquire on behalf of `owner` instead of the calling thread.
    #[must_use]
    pub fn with_owner(mut self, owner: Owner) -> Self {
        self.inner = self.inner.with_owner(owner);
        self
    }

    /// See [`crate::Lock::reentrant`].
    #[must_use]
    pub fn reentrant(mut self, reentrant: bool) -> Self {
        self.inner = self.inner.reentrant(reentrant);
        self
    }

    /// See [`crate::Lock::fenced`].
    #[must_use]
    pub fn fenced(mut self, fenced: bool) -> Self {
        self.inner = self.inner.fenced(fenced);
        self
    }

    /// See [`crate::Lock::lock_delay`].
    #[must_use]
    pub fn lock_delay(mut self, delay: std::time::Duration) -> Self {
        self.inner = self.inner.lock_delay(delay);
        self
    }

    /// See [`crate::Lock::watchdog_lease`].
    #[must_use]
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.inner = self.inner.watchdog_lease(lease);
        self
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.inner.name()
    }

    /// The lock bound to the calling thread (unless an explicit owner was set).
    fn owned(&self) -> crate::Lock {
        match self.inner.owner {
            Some(_) => self.inner.clone(),
            None => self.inner.clone().with_owner(Owner::current_thread()),
        }
    }

    fn guard(&self, guard: crate::LockGuard) -> LockGuard {
        LockGuard {
            inner: Some(guard),
            rt: self.rt.clone(),
        }
    }

    /// Blocks until acquired; the watchdog keeps the lease. See [`crate::Lock::lock`].
    ///
    /// # Errors
    /// As [`crate::Lock::lock`].
    pub fn lock(&self) -> Result<LockGuard> {
        self.lock_with(crate::LockOptions::new())
    }

    /// Blocks as `options` say (wait, lease). See [`crate::Lock::lock_with`].
    ///
    /// # Errors
    /// As [`crate::Lock::lock_with`].
    pub fn lock_with(&self, options: crate::LockOptions) -> Result<LockGuard> {
        let lock = self.owned();
        self.rt
            .block_on(lock.lock_with(options))
            .map(|g| self.guard(g))
    }

    /// One attempt. See [`crate::Lock::try_lock`].
    ///
    /// # Errors
    /// As [`crate::Lock::try_lock`].
    pub fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.try_lock_with(crate::LockOptions::once())
    }

    /// Blocks as `options` say: `None` when the wait ran out. See [`crate::Lock::try_lock_with`].
    ///
    /// # Errors
    /// As [`crate::Lock::try_lock_with`].
    pub fn try_lock_with(&self, options: crate::LockOptions) -> Result<Option<LockGuard>> {
        let lock = self.owned();
        Ok(self
            .rt
            .block_on(lock.try_lock_with(options))?
            .map(|g| self.guard(g)))
    }

    /// See [`crate::Lock::is_locked`].
    ///
    /// # Errors
    /// As [`crate::Lock::is_locked`].
    pub fn is_locked(&self) -> Result<bool> {
        self.rt.block_on(self.inner.is_locked())
    }

    /// Holds of the calling thread. See [`crate::Lock::hold_count`].
    ///
    /// # Errors
    /// As [`crate::Lock::hold_count`].
    pub fn hold_count(&self) -> Result<u32> {
        let lock = self.owned();
        self.rt.block_on(lock.hold_count())
    }

    /// See [`crate::Lock::is_held_by_current_owner`].
    ///
    /// # Errors
    /// As [`crate::Lock::is_held_by_current_owner`].
    pub fn is_held_by_current_owner(&self) -> Result<bool> {
        let lock = self.owned();
        self.rt.block_on(lock.is_held_by_current_owner())
    }

    /// See [`crate::Lock::remaining_lease`].
    ///
    /// # Errors
    /// As [`crate::Lock::remaining_lease`].
    pub fn remaining_lease(&self) -> Result<crate::RemainingLease> {
        self.rt.block_on(self.inner.remaining_lease())
    }

    /// See [`crate::Lock::status`].
    ///
    /// # Errors
    /// As [`crate::Lock::status`].
    pub fn status(&self) -> Result<LockStatus> {
        self.rt.block_on(self.inner.status())
    }

    /// See [`crate::Lock::waiters`].
    ///
    /// # Errors
    /// As [`crate::Lock::waiters`].
    pub fn waiters(&self) -> Result<Vec<crate::Waiter>> {
        self.rt.block_on(self.inner.waiters())
    }

    /// See [`crate::Lock::force_unlock`].
    ///
    /// # Errors
    /// As [`crate::Lock::force_unlock`].
    pub fn force_unlock(&self) -> Result<bool> {
        self.rt.block_on(self.inner.force_unlock())
    }

    /// Gives back one hold of the calling thread without a guard. See [`crate::Lock::unlock`].
    ///
    /// # Errors
    /// As [`crate::Lock::unlock`].
    pub fn unlock(&self) -> Result<()> {
        let lock = self.owned();
        self.rt.block_on(lock.unlock())
    }
}

/// A blocking [`crate::LockGuard`]. Dropping it releases the hold before returning (errors are
/// logged; use [`LockGuard::unlock`] to see them).
#[must_use = "if unused the lock is released immediately"]
pub struct LockGuard {
    inner: Option<crate::LockGuard>,
    rt: Arc<Rt>,
}

impl LockGuard {
    // `inner` is only taken by `unlock` (which consumes the guard) and by Drop, so it is always
    // there for these; the fallbacks only keep library code free of panics.

    /// See [`crate::LockGuard::fencing_token`].
    pub fn fencing_token(&self) -> Option<u64> {
        self.inner.as_ref().and_then(|g| g.fencing_token())
    }

    /// See [`crate::LockGuard::is_lost`].
    pub fn is_lost(&self) -> bool {
        self.inner.as_ref().is_none_or(|g| g.is_lost())
    }

    /// See [`crate::LockGuard::valid_until`].
    pub fn valid_until(&self) -> Instant {
        self.inner
            .as_ref()
            .map_or_else(Instant::now, |g| g.valid_until())
    }

    /// Blocks until the lease is lost or `timeout` passes; `true` when lost.
    pub fn wait_lost(&self, timeout: Duration) -> bool {
        let Some(lost) = self.inner.as_ref().map(|g| g.lost()) else {
            return true;
        };
        self.rt
            .block_on(async { tokio::time::timeout(timeout, lost).await.is_ok() })
    }

    /// Gives back this hold. See [`crate::LockGuard::unlock`].
    ///
    /// # Errors
    /// As [`crate::LockGuard::unlock`].
    pub fn unlock(mut self) -> Result<()> {
        match self.inner.take() {
            Some(guard) => self.rt.block_on(guard.unlock()),
            None => Ok(()),
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let Some(guard) = self.inner.take() else {
            return;
        };
        if Handle::try_current().is_err() {
            // Blocking is this API's contract, and a release spawned in the background would
            // die with the private runtime when the client goes right after the guard (the usual
            // end of `main`), leaving the key held for a whole lease.
            if let Err(e) = self.rt.handle.block_on(guard.unlock()) {
                tracing::debug!(error = %e, "release on drop failed");
            }
        } else {
            // Dropped inside some async context (a misuse we must not panic on): fall back to
            // the background release on the private runtime.
            let _context = self.rt.handle.enter();
            drop(guard);
        }
    }
}
