//! `LockGuard`: proof of a hold, and the ways to give it back.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::hold::Hold;
use crate::release;
use crate::shared::Client;

/// One hold of a lock. Release it with [`unlock`](LockGuard::unlock), which reports errors;
/// dropping it releases in the background instead.
///
/// A guard keeps its [`Client`] alive. It remembers the owner it acquired for, so it may be
/// moved to and unlocked from any task or thread.
///
/// # Drop
/// Drop never blocks and never panics: it updates the local state at once (the hold count, and
/// the watchdog stops renewing at the last hold) and spawns the release on the runtime the
/// client was built on, from whatever thread drops it (a plain `std::thread` included). Once
/// that runtime has ended nothing can send the release: the client warns once (`tracing`) and
/// the lease frees the key when it runs out.
#[must_use = "if unused the lock is released immediately"]
#[clippy::has_significant_drop]
pub struct LockGuard {
    client: Client,
    hold: Arc<Hold>,
    /// False once `unlock` took over the release, so Drop does nothing more.
    armed: bool,
}

impl LockGuard {
    pub(crate) fn new(client: Client, hold: Arc<Hold>) -> LockGuard {
        LockGuard {
            client,
            hold,
            armed: true,
        }
    }

    pub(crate) fn hold(&self) -> &Arc<Hold> {
        &self.hold
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.hold().keys.name
    }

    /// The fencing token of this hold, for fenced locks ([`Lock::fenced`](crate::Lock::fenced)).
    /// Re-entries share the token of the first acquisition.
    pub fn fencing_token(&self) -> Option<u64> {
        self.hold().token
    }

    /// Whether the lease is known to be lost: the watchdog found the key gone, could not reach
    /// Redis before [`valid_until`](LockGuard::valid_until), a fixed lease ran out, or the
    /// client was [shut down](crate::Client::shutdown) (which released it).
    pub fn is_lost(&self) -> bool {
        self.hold().is_lost()
    }

    /// Whether the lease is at risk: the watchdog's last renewal reached the primary but fewer
    /// replicas acknowledged it than the lock's [`Replicas`](crate::Replicas) setting wants.
    /// The validity is then not extended, so unless a later renewal is acknowledged in time the
    /// guard becomes [lost](LockGuard::is_lost) when [`valid_until`](LockGuard::valid_until)
    /// passes. Always `false` without replica acknowledgement.
    pub fn is_at_risk(&self) -> bool {
        self.hold().is_at_risk()
    }

    /// A future that resolves when the lease is lost (see [`is_lost`](LockGuard::is_lost)). It
    /// does not borrow the guard, so it can be raced against the work done under the lock. A
    /// release ends the hold without losing it: a future that outlives the last release stays
    /// pending (no alarm when the lease would have run out), unless a hold of it was released by
    /// name meanwhile ([`Lock::unlock`](crate::Lock::unlock)): a guard then outlives the hold,
    /// and every guard's future resolves to tell it.
    ///
    /// ```no_run
    /// # async fn demo(lock: redlease::Lock) -> redlease::Result<()> {
    /// # async fn long_job() {}
    /// let guard = lock.lock().await?;
    /// tokio::select! {
    ///     _ = long_job() => guard.unlock().await?,
    ///     _ = guard.lost() => eprintln!("lease lost; stopping"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.hold().lost()
    }

    /// The instant until which the lease is known valid: start of the last successful
    /// acquisition or renewal, plus the lease, minus a drift allowance.
    pub fn valid_until(&self) -> Instant {
        self.hold().valid_until()
    }

    /// Sets the lease of a lock held with a fixed lease to `lease` from now (rslock's and
    /// node-redlock's `extend`): longer to keep working, or shorter. Re-entries share one lease,
    /// so it applies to all of this owner's holds of the lock.
    ///
    /// ```no_run
    /// # async fn demo(lock: redlease::Lock) -> redlease::Result<()> {
    /// use std::time::Duration;
    /// use redlease::LockOptions;
    ///
    /// let guard = lock.lock_with(LockOptions::new().lease(Duration::from_secs(5))).await?;
    /// // ... the work takes longer than planned ...
    /// guard.extend(Duration::from_secs(5)).await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when the lease was already lost (then nothing is extended);
    /// [`Error::InvalidArgument`] for a lock kept by the watchdog, which renews it by itself;
    /// [`Error::InvalidDuration`] for a zero or absurd lease; [`Error::Timeout`] or
    /// [`Error::Redis`] when Redis fails (the old lease then still runs).
    ///
    /// # Cancel safety
    /// Dropping the future may or may not extend the lease; the guard stays valid either way.
    pub async fn extend(&self, lease: std::time::Duration) -> Result<()> {
        let lease_ms = crate::config::lease_ms("lease", lease)?;
        let hold = self.hold();
        let inner = &self.client.inner;
        // In the owner's turn: this extension and the owner's re-entries change the hold in
        // the order the server applied them (`Hold::reentered`).
        let _extending = inner.turns.extending(&hold.key).await;
        if matches!(hold.lease(), crate::terms::Lease::Watchdog(_)) {
            return Err(Error::InvalidArgument(format!(
                "lock `{}` is kept by the watchdog; extend is for locks with a fixed lease",
                hold.keys.name
            )));
        }
        let lost = || Error::LeaseLost {
            name: hold.keys.name.to_string(),
        };
        if hold.is_lost() {
            return Err(lost());
        }
        let started = Instant::now();
        let renewal = hold.renewal(lease_ms);
        let renewed = inner.node.renew(std::slice::from_ref(&renewal)).await?;
        if renewed.first() != Some(&true) {
            let why = "the key was gone when its lease was to be extended";
            hold.mark_lost(crate::telemetry::LostReason::ServerLost, why);
            inner.holds.detach(hold);
            return Err(lost());
        }
        // Too late to count: the lease may have run out before the extension landed.
        if hold.is_lost() {
            return Err(lost());
        }
        hold.extended(started, lease, inner.config.drift(lease));
        Ok(())
    }

    /// Gives back this hold; the key goes (and a waiter is woken) when it was the owner's last.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when the lease was lost while held (nothing is released then);
    /// [`Error::Shutdown`] when the client was shut down (it released everything);
    /// [`Error::Timeout`] or [`Error::Redis`] when Redis failed on every retry (the lease then
    /// frees the key: the watchdog no longer renews it); [`Error::NoRuntime`] when polled
    /// outside a tokio runtime (the hold is then given back in the background, on the runtime
    /// the client was built on).
    ///
    /// # Cancel safety
    /// Dropping the future still completes the release in the background.
    pub async fn unlock(mut self) -> Result<()> {
        self.armed = false;
        let hold = self.hold.clone();
        release::release_hold(&self.client, &hold).await
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.armed {
            release::release_hold_in_background(&self.client, &self.hold);
        }
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("LockGuard");
        d.field("name", &self.hold.keys.name)
            .field("token", &self.hold.token)
            .field("lost", &self.hold.is_lost());
        d.finish_non_exhaustive()
    }
}
