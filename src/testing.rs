//! A server for your tests, and faults on demand for testing how your code reacts to a lost
//! lease, a slow grant and a busy lock (the `testing` feature).
//!
//! [`TestServer`] starts a private `redis-server` (or `valkey-server`) for a test and kills it
//! when dropped: no Redis to set up, no URL to pass (see [its docs](TestServer#getting-a-server-in-ci)
//! for installing the binary in CI):
//!
//! ```no_run
//! # async fn body() -> redlease::Result<()> {
//! let server = redlease::testing::TestServer::start()?;
//! let client = server.client().await?;
//! # Ok(()) }
//! ```
//!
//! Each helper acts on a real server the way the fault would happen in production, through
//! the same protocol, so what your code sees is what it would see then:
//!
//! | helper | what happens | your code sees |
//! |---|---|---|
//! | [`expire_lease`] | the guard's lock expires on the server now, and its lease ends in this client | [`LockGuard::lost`] resolves, `unlock` returns [`Error::LeaseLost`], [`Lock::run`] cancels its body; metric reason `expired` |
//! | [`pause_renewals`] | the client's watchdog stops renewing while the pause lives | leases run out after their length, as with Redis unreachable: guards are lost (reason `renewal_failed`), the keys expire on the server |
//! | [`hold_elsewhere`] | a second client of the same deployment holds the lock with a fixed lease | [`Lock::try_lock`] returns `None`, `try_lock_with` a wait runs out, `lock()` waits until the lease ends or [`HeldElsewhere::release`] |
//!
//! With the feature on, a loss the server reported (a renewal, or the loss notice's check,
//! found the hold gone) is read again at once; a hold still there is a *false loss*, counted by
//! [`false_losses`] (our own test runs fail on one) and, when the [`FALSE_LOSS_LOG`]
//! environment variable names a file, appended to it.
//!
//! Enable it for your tests only:
//!
//! ```toml
//! [dev-dependencies]
//! redlease = { version = "0.1", features = ["testing"] }
//! ```
//!
//! A test of code that must stop when its lease is lost; the body of a `#[tokio::test]`
//! (`examples/testing.rs` runs this and the others, each against its own [`TestServer`]):
//!
//! ```no_run
//! # async fn body() -> redlease::Result<()> {
//! use std::time::Duration;
//!
//! let server = redlease::testing::TestServer::start()?;
//! let client = server.client().await?;
//! let lock = client.lock("report")?;
//! let guard = lock.lock().await?;
//! redlease::testing::expire_lease(&guard).await?;
//! // Your code's reaction: here, the lost signal it races its work against.
//! tokio::time::timeout(Duration::from_secs(1), guard.lost())
//!     .await
//!     .expect("lost() resolves at once");
//! assert!(guard.unlock().await.unwrap_err().is_lease_lost());
//! client.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! Family guards ([`Guard`](crate::Guard): semaphores' permits, read-write locks) renew in
//! the same watchdog, so [`pause_renewals`] pauses them too; RedLock guards renew on a task of
//! their own, which it does not pause. [`expire_lease`] takes a [`LockGuard`] (a [`Lock`]'s or
//! a `FairLock`'s, or one member of a `MultiLock`'s).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::client::ClientBuilder;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
#[cfg(doc)]
use crate::lock::Lock;
use crate::shared::{Client, Inner};

/// Expires the key on the server only while it still holds this owner's field: a lapse never
/// takes a lock someone else holds by now. KEYS: the lock's hash. ARGV: the owner field.
/// Returns 1 when it expired the key, 0 when the owner held nothing.
const LAPSE: &str = "if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then \
    return redis.call('pexpire', KEYS[1], 1) end return 0";

/// Makes the guard's lease lapse now, as if it had run out: the lock's key expires on the
/// server (no unlock message is sent; other clients' waiters find it free when they look
/// again, as after a real expiry), and the guard is lost at once: [`LockGuard::lost`]
/// resolves, [`LockGuard::unlock`] returns [`Error::LeaseLost`], a [`Lock::run`] holding it
/// holding it would cancel its body, and `redlease_leases_lost_total{reason="expired"}` counts
/// it. Every guard
/// of the same hold (the owner's re-entries) is lost with it.
///
/// ```no_run
/// # async fn body(client: redlease::Client) -> redlease::Result<()> {
/// use std::time::Duration;
///
/// /// The code under test: works in steps until done or the lease is lost.
/// async fn export(guard: &redlease::LockGuard) -> &'static str {
///     tokio::select! {
///         _ = tokio::time::sleep(Duration::from_secs(60)) => "finished",
///         _ = guard.lost() => "abandoned",
///     }
/// }
///
/// let guard = client.lock("nightly-export")?.lock().await?;
/// let (outcome, lapsed) = tokio::join!(export(&guard), async {
///     tokio::time::sleep(Duration::from_millis(50)).await;
///     redlease::testing::expire_lease(&guard).await
/// });
/// lapsed?;
/// assert_eq!(outcome, "abandoned");
/// # Ok(()) }
/// ```
///
/// It sends one `EVAL` (a Redis user restricted to redlease's rights needs `+eval` for it).
///
/// # Errors
/// [`Error::LeaseLost`] when the guard was already lost; [`Error::Shutdown`] after the client
/// shut down; a Redis error when the server could not be told (the guard is then untouched).
///
/// # Cancel safety
/// Dropping the future after the call was sent may leave the lease expired or not.
pub async fn expire_lease(guard: &LockGuard) -> Result<()> {
    let hold = guard.hold();
    let inner = &guard.client().inner;
    inner.check_open()?;
    if hold.is_lost() {
        return Err(Error::LeaseLost {
            name: hold.keys.name.to_string(),
        });
    }
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(LAPSE)
        .arg(1)
        .arg(&*hold.keys.hash)
        .arg(&*hold.key.field);
    let _expired: i64 = inner.node.query(&cmd).await?;
    inner.holds.detach(hold);
    hold.lapse("its lease was made to lapse (redlease::testing::expire_lease)");
    Ok(())
}

/// Stops the client's watchdog from renewing anything until the returned value is dropped, as
/// if Redis were unreachable or the watchdog stalled: every watchdog-kept lease runs out after
/// its length (the client's [`watchdog_lease`](crate::Config::watchdog_lease)), its guard is
/// lost (reason `renewal_failed`) and its key expires on the server. Renewals resume when the
/// last pause is dropped; a guard lost meanwhile stays lost.
///
/// ```no_run
/// # async fn body(url: &str) -> redlease::Result<()> {
/// use std::time::Duration;
///
/// let client = redlease::Client::builder(url)
///     .watchdog_lease(Duration::from_millis(300))
///     .build()
///     .await?;
/// let guard = client.lock("import")?.lock().await?;
/// let paused = redlease::testing::pause_renewals(&client);
/// tokio::time::timeout(Duration::from_secs(2), guard.lost())
///     .await
///     .expect("the lease runs out within its 300 ms");
/// drop(paused);
/// # Ok(()) }
/// ```
pub fn pause_renewals(client: &Client) -> RenewalsPaused {
    client.inner.watchdog.paused.fetch_add(1, Ordering::AcqRel);
    RenewalsPaused {
        inner: Arc::clone(&client.inner),
    }
}

/// A pause of a client's renewals, from [`pause_renewals`]; renewals resume when it is
/// dropped (and no other pause is in force).
#[must_use = "renewals resume as soon as the pause is dropped"]
pub struct RenewalsPaused {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RenewalsPaused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RenewalsPaused")
            .field("client", &self.inner.id)
            .finish()
    }
}

impl Drop for RenewalsPaused {
    fn drop(&mut self) {
        self.inner.watchdog.paused.fetch_sub(1, Ordering::AcqRel);
        // The next round may be overdue: let the watchdog look now.
        self.inner.watchdog.wake.notify_one();
    }
}

/// Holds the lock `name` from another client (a second connection to `client`'s deployment,
/// with its settings, so another client id and process-like owner) with a fixed lease `hold`.
/// Your code, through `client`, meets a lock held by someone else: `try_lock` returns `None`,
/// a bounded wait times out, `lock()` waits. The hold ends when its lease runs out on the
/// server (as a crashed holder's would: no unlock message, waiters wake when the lease ends)
/// or earlier with [`HeldElsewhere::release`] (as a live holder's unlock: waiters are woken
/// at once). Dropping the value releases it in the background.
///
/// ```no_run
/// # async fn body(client: redlease::Client) -> redlease::Result<()> {
/// use std::time::Duration;
///
/// let busy = redlease::testing::hold_elsewhere(&client, "payments", Duration::from_secs(5)).await?;
/// let lock = client.lock("payments")?;
/// assert!(lock.try_lock().await?.is_none());
/// busy.release().await?;
/// assert!(lock.try_lock().await?.is_some());
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`Error::Busy`] when the lock is held already (by anyone); [`Error::InvalidName`] or
/// [`Error::InvalidDuration`] for a bad name or lease; [`Error::Shutdown`] after `client` shut
/// down; a Redis error when the other client cannot connect or acquire.
///
/// # Cancel safety
/// Dropping the future may leave the hold taken; it ends with its lease.
pub async fn hold_elsewhere(client: &Client, name: &str, hold: Duration) -> Result<HeldElsewhere> {
    client.inner.check_open()?;
    // Bad input fails here, before a second client connects.
    client.lock(name)?;
    crate::config::lease_ms("lease", hold)?;
    let builder = ClientBuilder::like(client).ok_or_else(|| {
        Error::InvalidArgument("hold_elsewhere: the client has no connection settings".into())
    })?;
    let other = builder.build().await?;
    let lock = other.lock(name)?;
    match lock
        .try_lock_with(crate::LockOptions::once().lease(hold))
        .await
    {
        Ok(Some(guard)) => Ok(HeldElsewhere { guard, other }),
        Ok(None) => {
            other.shutdown().await?;
            Err(Error::Busy {
                name: name.to_owned(),
                waited: Duration::ZERO,
            })
        }
        Err(e) => {
            let _ = other.shutdown().await;
            Err(e)
        }
    }
}

/// A lock held by another client, from [`hold_elsewhere`].
#[must_use = "if unused the lock is released at once"]
#[derive(Debug)]
pub struct HeldElsewhere {
    guard: LockGuard,
    other: Client,
}

impl HeldElsewhere {
    /// The other client (to look at its guard's lock, or to shut it down as a process would
    /// end).
    pub fn client(&self) -> &Client {
        &self.other
    }

    /// The other client's guard.
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// Releases the lock as its holder would (waiters are woken), and closes the other client.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when the lease ran out first (nothing was released), or a Redis
    /// error.
    ///
    /// # Cancel safety
    /// Dropping the future may leave the hold given back or not; it ends with its lease.
    pub async fn release(self) -> Result<()> {
        let released = self.guard.unlock().await;
        self.other.shutdown().await?;
        released
    }
}

mod server;

pub use crate::watchdog::audit::{FALSE_LOSS_LOG, audited_losses, audits_in_flight, false_losses};
pub use server::{SERVER_BIN_ENV, TestServer};

#[cfg(test)]
mod abandon_tests;
#[cfg(test)]
mod audit_tests;
