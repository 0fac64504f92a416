//! Running code under a lock: `Lock::run` and `Lock::try_run`, each body its own owner.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::hold::Hold;
use crate::lock::Lock;
use crate::options::LockOptions;

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

    /// Whether the lease is known to be lost (see [`LockGuard::is_lost`]).
    pub fn is_lost(&self) -> bool {
        self.hold.is_lost()
    }

    /// Resolves when the lease is lost. `run` already stops the body then; this is for work the
    /// body hands to other tasks.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.hold.lost()
    }

    /// The instant until which the lease is known valid (see [`LockGuard::valid_until`]).
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

impl Lock {
    /// Waits for the lock, runs `body` under it as **its own owner**, and releases it when the
    /// body ends. The safe way to lock in async code.
    ///
    /// The body is a *lock scope*: acquisitions of the same lock inside it (nested `run`s, or
    /// `lock()` on any handle of this lock without an explicit owner) re-enter, while bodies
    /// running concurrently in one task — `join!`, `select!`, `for_each_concurrent`,
    /// `buffer_unordered` — exclude each other, as separate tasks would. A task spawned from the
    /// body is a new owner.
    ///
    /// The lease is kept by the watchdog. If it is lost anyway (Redis unreachable past the
    /// lease, the key deleted or expired), the body is **cancelled** — dropped at its next
    /// `.await` — and `run` returns [`Error::LeaseLost`]: work that must not go on without the
    /// lock stops. [`HeldLock::lost`] tells work the body hands elsewhere.
    ///
    /// ```no_run
    /// # async fn demo(client: redlease::Client) -> redlease::Result<()> {
    /// use futures_util::StreamExt;
    ///
    /// // 16 orders at a time in this one task; orders of one account never overlap.
    /// futures_util::stream::iter(0..1_000u32)
    ///     .for_each_concurrent(16, |order| {
    ///         let client = client.clone();
    ///         async move {
    ///             let account = client.lock(&format!("account:{}", order % 4)).unwrap();
    ///             account.run(|_held| async { /* debit, credit */ }).await.unwrap();
    ///         }
    ///     })
    ///     .await;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Lock::lock`] for taking the lock; [`Error::LeaseLost`] when the lease was lost
    /// while the body ran (the body was cancelled). A release that fails after the body
    /// finished does not hide its result: it is logged, and the lease frees the key (the
    /// watchdog no longer renews it).
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future drops the body and releases the lock in the background
    /// (or gives back a grant still on its way).
    pub async fn run<F, Fut, T>(&self, body: F) -> Result<T>
    where
        F: FnOnce(HeldLock) -> Fut,
        Fut: Future<Output = T>,
    {
        self.try_run(LockOptions::new(), body)
            .await?
            .ok_or(Error::Shutdown)
    }

    /// [`Lock::run`] with a bounded wait or a fixed lease: `Ok(None)` when the wait ran out (the
    /// body did not run).
    ///
    /// ```no_run
    /// # async fn demo(lock: redlease::Lock) -> redlease::Result<()> {
    /// use std::time::Duration;
    /// use redlease::LockOptions;
    ///
    /// let once = LockOptions::new().wait(Duration::ZERO);
    /// match lock.try_run(once, |_held| async { 42 }).await? {
    ///     Some(answer) => assert_eq!(answer, 42),
    ///     None => println!("busy; another instance does it"),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Lock::run`], plus [`Error::InvalidDuration`] for a bad wait or lease.
    ///
    /// # Cancel safety
    /// As [`Lock::run`].
    pub async fn try_run<F, Fut, T>(&self, options: LockOptions, body: F) -> Result<Option<T>>
    where
        F: FnOnce(HeldLock) -> Fut,
        Fut: Future<Output = T>,
    {
        let (lease, wait) = self.terms_of(&options)?;
        let metadata = options.checked_metadata()?;
        crate::owner::in_new_scope(async move {
            let got = self.acquire(lease, wait).await?;
            let Some(guard) = self.with_metadata(got, metadata).await? else {
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
                    name: self.keys.name.to_string(),
                }),
            }
        })
        .await
    }
}

/// Releases the lock of a body that finished: the body's value stands whatever the release says.
async fn release_after_body(guard: LockGuard) {
    let name = guard.name().to_owned();
    if let Err(e) = guard.unlock().await {
        tracing::warn!(lock = %name, error = %e, "release after the body finished failed; the lease frees the key");
    }
}
