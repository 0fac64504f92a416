//! What happens to a grant before its guard is handed out: confirmed if it arrived late, then
//! registered with the client (reentrancy, watchdog).
//!
//! Every way a single lock is granted ends here (an attempt's reply, a grant's message, a
//! hand-over from a release of this client), and so do the members of MultiLock and RedLock.

use std::sync::Arc;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::hold::{Grant, Hold};
use crate::keys::HoldKey;
use crate::node::Renewal;
use crate::release::give_back_in_background;
use crate::shared::Inner;
use crate::terms::Lease;

use super::Lock;

/// A grant is handed out only with most of its lease ahead of it. One that arrives with less
/// than half left (the server or the network stalled past it: the reply of a `SIGSTOP`ped
/// server comes after its resume) is renewed first, and its validity runs from that renewal:
/// `Some(start of the validity)`. `None` when it could not be confirmed (the key expired
/// meanwhile, or the renewal was slow again); it is then given back, and the caller may try
/// again within its wait.
///
/// # Cancel safety
/// A grant not yet registered when the caller stops waiting is given back in the background.
pub(super) async fn confirmed(
    lock: &Lock,
    field: &Arc<str>,
    lease: Lease,
    started: Instant,
) -> Result<Option<Instant>> {
    let half = lease.duration() / 2;
    if started.elapsed() < half {
        return Ok(Some(started));
    }
    tracing::debug!(lock = %lock.keys.name, "grant arrived with its lease half spent; renewing it before use");
    let mut unconfirmed = Unconfirmed {
        lock,
        field,
        lease_ms: lease.ms(),
        armed: true,
    };
    let renewing = Instant::now();
    let renewal = Renewal {
        hash: &lock.keys.hash,
        field,
        lease_ms: lease.ms(),
        delay_ms: lock.delay_ms(),
    };
    let renewed = (lock.client.inner.node)
        .renew(std::slice::from_ref(&renewal))
        .await?;
    match renewed.first() {
        Some(true) if renewing.elapsed() < half => {
            unconfirmed.confirmed();
            Ok(Some(renewing))
        }
        Some(true) => Ok(None),
        // Expired meanwhile: nothing of it is left to give back.
        _ => {
            unconfirmed.confirmed();
            Ok(None)
        }
    }
}

/// Registers a grant with the client (reentrancy, watchdog) and builds its guard; shared by
/// single locks and the members of MultiLock and RedLock. Synchronous, so a cancelled caller
/// cannot leave the local state half-done.
///
/// # Errors
/// [`Error::Shutdown`] when the client shut down while the grant was on its way: nothing
/// would renew it, so it is given back.
pub(crate) fn register(
    lock: &Lock,
    key: &HoldKey,
    lease: Lease,
    grant: Grant,
    token: u64,
    started: Instant,
) -> Result<LockGuard> {
    let inner: &Arc<Inner> = &lock.client.inner;
    if inner.check_open().is_err() {
        let why = "granted during shutdown";
        give_back_in_background(&lock.client, &lock.keys, &key.field, lease.ms(), why);
        return Err(Error::Shutdown);
    }
    let drift = inner.config.drift(lease.duration());
    let token = lock.fenced.then_some(token);
    let delay_ms = lock.delay_ms();
    let keys = lock.keys.clone();
    let series = (inner.config.lock_label).series(crate::telemetry::LOCK, &keys.name);
    let (hold, fresh) = inner.holds.granted(key, grant, || {
        Hold::new(keys, key.clone(), lease, token, drift, started, series)
    });
    hold.raise_delay(delay_ms);
    if !fresh {
        hold.reentered(lease, started, drift);
    }
    inner.watchdog.adopt(lease);
    Ok(LockGuard::new(lock.client.clone(), hold))
}

/// A single lock's grant as its guard: [registered](register), and its hold told which
/// acknowledgement the watchdog's renewals ask for (the lock's own, else the client's).
pub(super) fn guard(
    lock: &Lock,
    key: &HoldKey,
    lease: Lease,
    grant: Grant,
    token: u64,
    started: Instant,
) -> Result<LockGuard> {
    let guard = register(lock, key, lease, grant, token, started)?;
    guard.hold().set_replicas(lock.replicas_wanted());
    Ok(guard)
}

/// A grant on the server that no guard owns yet: given back in the background unless
/// [`confirmed`](Unconfirmed::confirmed) (registered, or found gone) before it is dropped.
struct Unconfirmed<'a> {
    lock: &'a Lock,
    field: &'a Arc<str>,
    lease_ms: u64,
    armed: bool,
}

impl Unconfirmed<'_> {
    fn confirmed(&mut self) {
        self.armed = false;
    }
}

impl Drop for Unconfirmed<'_> {
    fn drop(&mut self) {
        if self.armed {
            let why = "grant not confirmed";
            let (client, keys) = (&self.lock.client, &self.lock.keys);
            give_back_in_background(client, keys, self.field, self.lease_ms, why);
        }
    }
}
