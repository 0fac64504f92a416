//! A hold's metadata ([`LockOptions::metadata`](crate::LockOptions::metadata)): stored after
//! the lock is taken, in the holding client's announcement (`identity.rs`), so an acquisition
//! without metadata pays nothing for it; its last release removes it (`release.rs`).

use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::error::Result;
use crate::guard::LockGuard;

use super::Lock;

/// Stores `metadata` with the hold `got` (if any) of `lock`: the guard, or the write's error
/// after giving the lock back.
pub(super) async fn stored_with(
    lock: &Lock,
    got: Option<LockGuard>,
    metadata: Option<&str>,
) -> Result<Option<LockGuard>> {
    let (Some(guard), Some(text)) = (&got, metadata) else {
        return Ok(got);
    };
    let inner = &lock.client.inner;
    let hold = guard.hold();
    hold.set_metadata();
    // The announcement lives as long as the watchdog makes it (its lease and a second,
    // `watchdog.rs`): never written shorter here.
    let watchdog = match inner.watchdog.lease_ms.load(Ordering::Acquire) {
        u64::MAX => inner.config.watchdog_lease,
        ms => inner.config.watchdog_lease.max(Duration::from_millis(ms)),
    };
    let ttl = watchdog + Duration::from_secs(1);
    let what = (&*hold.keys.hash, &*hold.key.field);
    let prefix = &inner.config.prefix;
    // Boxed, as the unlock below: only an acquisition with metadata writes it, and inline
    // these would make every acquisition's future 4 KB larger (copied as it is set up).
    let store = crate::identity::store_metadata(&inner.node, prefix, &inner.me, ttl, what, text);
    let store: BoxFuture<'_, _> = Box::pin(store);
    let stored = store.await;
    match stored {
        Ok(()) => Ok(got),
        Err(e) => {
            if let Some(guard) = got {
                // The hold without what it was to carry is not the one asked for.
                let unlock: BoxFuture<'_, _> = Box::pin(guard.unlock());
                let _ = unlock.await;
            }
            Err(e)
        }
    }
}
