//! Running code under a lock: `Lock::run` and `Lock::try_run`, each body its own owner.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::hold::Hold;
use crate::lock::Lock;
use crate::terms::Lease;
use crate::terms::Wait;

/// How to take a lock: how long to wait, how the lease is kept, and (semaphores) how many
/// permits. The one set of terms every kind takes: `lock_with` / `try_lock_with` on [`Lock`],
/// [`FairLock`](crate::FairLock), the [`ReadWriteLock`](crate::ReadWriteLock)'s sides,
/// [`MultiLock`](crate::MultiLock), [`RedLock`](crate::RedLock) and
/// [`blocking::Lock`](crate::blocking::Lock); `acquire_with` / `try_acquire_with` on the
/// semaphores; [`CountDownLatch::try_wait_with`](crate::CountDownLatch::try_wait_with) (a wait
/// only).
///
/// The default waits as long as it takes, keeps the lease with the watchdog (renewed while
/// the lock is held) and takes one permit, like [`Lock::lock`].
///
/// ```
/// use std::time::Duration;
/// use redlease::LockOptions;
///
/// // One attempt; if it succeeds, hold for at most 10 s without renewal.
/// let once = LockOptions::new().wait(Duration::ZERO).lease(Duration::from_secs(10));
/// // Wait up to 2 s; the watchdog keeps the lease while held.
/// let patient = LockOptions::new().wait(Duration::from_secs(2));
/// // Three permits of a `Semaphore`, waiting up to 1 s.
/// let three = LockOptions::new().permits(3).wait(Duration::from_secs(1));
/// # let _ = (once, patient, three);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[must_use]
pub struct LockOptions {
    wait: Option<Duration>,
    lease: Option<Duration>,
    permits: Option<u32>,
}

impl LockOptions {
    /// Wait as long as it takes; lease kept by the watchdog; one permit.
    pub fn new() -> LockOptions {
        LockOptions::default()
    }

    /// Wait at most `wait` for the lock. `Duration::ZERO` makes one attempt (Redisson's
    /// `tryLock(0, ...)`). Defaults to waiting without limit.
    ///
    /// When the wait runs out, `try_lock_with` answers `None` and `lock_with` fails with
    /// [`Error::Busy`].
    pub fn wait(mut self, wait: Duration) -> LockOptions {
        self.wait = Some(wait);
        self
    }

    /// Hold the lock for `lease` at most, with no renewal: it expires by itself. Defaults to
    /// the watchdog lease, renewed while the lock is held.
    ///
    /// A [`Semaphore`](crate::Semaphore)'s permits and a
    /// [`CountDownLatch`](crate::CountDownLatch) have no lease: they refuse one with
    /// [`Error::InvalidArgument`].
    pub fn lease(mut self, lease: Duration) -> LockOptions {
        self.lease = Some(lease);
        self
    }

    /// Take `permits` permits at once, for a [`Semaphore`](crate::Semaphore). Defaults to 1.
    ///
    /// Zero permits, and more than one for any other kind (a lock, a
    /// [`PermitSemaphore`](crate::PermitSemaphore)'s single permit), are refused with
    /// [`Error::InvalidArgument`] when the options are used.
    pub fn permits(mut self, permits: u32) -> LockOptions {
        self.permits = Some(permits);
        self
    }

    /// One attempt: `wait(Duration::ZERO)`, what every `try_lock()` asks for.
    pub(crate) fn once() -> LockOptions {
        LockOptions::new().wait(Duration::ZERO)
    }

    /// The lease as given (`None`: the watchdog's), for kinds that check it themselves
    /// (MultiLock, RedLock), with the checked wait; one permit only.
    pub(crate) fn lease_and_wait(&self) -> Result<(Option<Duration>, Wait)> {
        self.one_permit()?;
        Ok((self.lease, self.checked_wait()?))
    }

    /// The checked lease and wait of these options for `lock`.
    pub(crate) fn resolve(&self, lock: &Lock) -> Result<(Lease, Wait)> {
        self.terms(lock.watchdog()?.duration())
    }

    /// The checked lease and wait of these options, `watchdog` being the lease kept by renewal
    /// when no lease is given (the lock family's kinds, which have no lease of their own); one
    /// permit only.
    pub(crate) fn terms(&self, watchdog: Duration) -> Result<(Lease, Wait)> {
        self.one_permit()?;
        let lease = match self.lease {
            Some(lease) => Lease::fixed(lease)?,
            None => {
                crate::config::lease_ms("watchdog lease", watchdog)?;
                Lease::Watchdog(watchdog)
            }
        };
        Ok((lease, self.checked_wait()?))
    }

    /// The checked permits and wait of options for a [`Semaphore`](crate::Semaphore), whose
    /// permits have no lease.
    pub(crate) fn permits_and_wait(&self) -> Result<(u32, Wait)> {
        self.no_lease("a Semaphore's permits have")?;
        let permits = self.permits.unwrap_or(1);
        crate::family::positive("permits", permits)?;
        Ok((permits, self.checked_wait()?))
    }

    /// The checked wait of options for a [`CountDownLatch`](crate::CountDownLatch), which
    /// takes nothing: no lease, no permits.
    pub(crate) fn wait_only(&self) -> Result<Wait> {
        self.no_lease("a CountDownLatch has")?;
        self.one_permit()?;
        self.checked_wait()
    }

    /// Refuses a lease, for kinds that hold nothing with one (`what` says so in the error).
    fn no_lease(&self, what: &str) -> Result<()> {
        match self.lease {
            Some(_) => Err(Error::InvalidArgument(format!(
                "{what} no lease; LockOptions::lease does not apply"
            ))),
            None => Ok(()),
        }
    }

    /// Refuses a count of permits other than one, for kinds that hold one thing.
    fn one_permit(&self) -> Result<()> {
        match self.permits {
            None | Some(1) => Ok(()),
            Some(0) => crate::family::positive("permits", 0),
            Some(n) => Err(Error::InvalidArgument(format!(
                "permits ({n}) apply to a Semaphore only; this kind holds one"
            ))),
        }
    }

    /// The checked wait of these options.
    fn checked_wait(&self) -> Result<Wait> {
        match self.wait {
            Some(wait) => Wait::until(wait),
            None => Ok(Wait::Forever),
        }
    }

    /// What `lock_with` answers for an acquisition that ended with `got`: the guard, else
    /// [`Error::Busy`] when the wait ran out (a bounded wait) or [`Error::Shutdown`] (an
    /// unbounded wait ends without the lock only when the client shuts down).
    pub(crate) fn held<G>(&self, name: impl FnOnce() -> String, got: Option<G>) -> Result<G> {
        got.ok_or_else(|| match self.wait {
            Some(waited) => Error::Busy {
                name: name(),
                waited,
            },
            None => Error::Shutdown,
        })
    }
}

/// The ways to ask that a kind derives from its `try_lock_with` (`$try_with`, which does the
/// work and carries the kind's documentation): `lock` (as long as it takes, with the doc
/// comments given), `lock_with` (on `options`' terms, [`Error::Busy`] for `None`) and
/// `try_lock` (one attempt), under the kind's names; `$name` names the object in the error.
macro_rules! ways_to_ask {
    ($guard:ty, $name:ident, [$lock:ident, $with:ident, $try:ident, $try_with:ident] $(#[$doc:meta])*) => {
        $(#[$doc])*
        pub async fn $lock(&self) -> $crate::error::Result<$guard> {
            self.$with($crate::scope::LockOptions::new()).await
        }

        #[doc = concat!("The same as [`", stringify!($try_with), "`](Self::", stringify!($try_with), "), but a bounded wait that runs out is an error.")]
        ///
        /// # Errors
        #[doc = concat!("As [`", stringify!($try_with), "`](Self::", stringify!($try_with), "), plus [`Error::Busy`](crate::Error::Busy) when a bounded wait ran out.")]
        ///
        /// # Cancel safety
        #[doc = concat!("As [`", stringify!($lock), "`](Self::", stringify!($lock), ").")]
        pub async fn $with(&self, options: $crate::scope::LockOptions) -> $crate::error::Result<$guard> {
            let got = self.$try_with(options).await?;
            options.held(|| self.$name().to_string(), got)
        }

        #[doc = concat!("One attempt: the same as `", stringify!($try_with), "` with a zero wait.")]
        ///
        /// # Errors
        #[doc = concat!("As [`", stringify!($try_with), "`](Self::", stringify!($try_with), ").")]
        ///
        /// # Cancel safety
        #[doc = concat!("As [`", stringify!($lock), "`](Self::", stringify!($lock), ").")]
        pub async fn $try(&self) -> $crate::error::Result<Option<$guard>> {
            self.$try_with($crate::scope::LockOptions::once()).await
        }
    };
}
pub(crate) use ways_to_ask;

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
        let (lease, wait) = options.resolve(self)?;
        crate::owner::in_new_scope(async move {
            let Some(guard) = self.acquire(lease, wait).await? else {
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
