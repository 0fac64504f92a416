//! The guards of a [`ReadWriteLock`](crate::ReadWriteLock): one hold each, renewed by its own
//! task while it lives when taken without an explicit lease.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::error::{Error, Result};
use crate::family::rwlock::{Kind, ReadWriteLock};
use crate::task::AbortOnDrop;
use crate::terms::Lease;

/// What a hold and its renewal task share.
struct State {
    valid_until: Mutex<Instant>,
    lost: AtomicBool,
    lost_notify: Notify,
}

impl State {
    fn lose(&self, name: &str, why: &str) {
        if !self.lost.swap(true, Ordering::AcqRel) {
            tracing::warn!(lock = %name, "read-write lock hold lost: {why}");
            self.lost_notify.notify_waiters();
        }
    }
}

/// One read or write hold.
pub(crate) struct RwHold {
    lock: ReadWriteLock,
    kind: Kind,
    field: Arc<str>,
    state: Arc<State>,
    _renewal: Option<AbortOnDrop>,
    released: bool,
}

impl RwHold {
    pub(crate) fn new(
        lock: ReadWriteLock,
        kind: Kind,
        field: Arc<str>,
        lease: Lease,
        started: Instant,
    ) -> RwHold {
        let drift = lock.client.inner.config.drift(lease.duration());
        let state = Arc::new(State {
            valid_until: Mutex::new(started + lease.duration().saturating_sub(drift)),
            lost: AtomicBool::new(false),
            lost_notify: Notify::new(),
        });
        let renewal = match lease {
            Lease::Watchdog(lease) => Some(AbortOnDrop(tokio::spawn(renew(
                lock.clone(),
                kind,
                field.clone(),
                lease,
                drift,
                state.clone(),
            )))),
            Lease::Fixed(_) => None,
        };
        RwHold {
            lock,
            kind,
            field,
            state,
            _renewal: renewal,
            released: false,
        }
    }

    async fn unlock(mut self) -> Result<()> {
        self.released = true;
        let lost = self.state.lost.load(Ordering::Acquire);
        let reply = self.lock.call(self.kind.ops().1, &self.field, 0).await?;
        if reply < 0 || lost {
            return Err(Error::LeaseLost {
                name: self.lock.keys.name.to_string(),
            });
        }
        Ok(())
    }

    fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let state = self.state.clone();
        async move {
            loop {
                let notified = state.lost_notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                if state.lost.load(Ordering::Acquire) {
                    return;
                }
                notified.await;
            }
        }
    }
}

/// Renews a hold every third of its lease until the guard goes (which aborts this task), the
/// hold is found gone, or the validity runs out without a confirmed renewal.
async fn renew(
    lock: ReadWriteLock,
    kind: Kind,
    field: Arc<str>,
    lease: Duration,
    drift: Duration,
    state: Arc<State>,
) {
    let renew_op = kind.ops().2;
    let lease_ms = lease.as_millis() as u64;
    let period = (lease / 3).max(Duration::from_millis(1));
    loop {
        tokio::time::sleep(period).await;
        let sent = Instant::now();
        match lock.call(renew_op, &field, lease_ms).await {
            Ok(1) => {
                *state.valid_until.lock() = sent + lease.saturating_sub(drift);
            }
            Ok(_) => return state.lose(&lock.keys.name, "the hold was found gone"),
            Err(e) => {
                tracing::debug!(lock = %lock.keys.name, error = %e, "read-write lock renewal failed");
                if Instant::now() >= *state.valid_until.lock() {
                    return state.lose(&lock.keys.name, "its validity ran out before a renewal");
                }
            }
        }
    }
}

impl Drop for RwHold {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let (lock, field, op) = (self.lock.clone(), self.field.clone(), self.kind.ops().1);
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let release = async move {
                if let Err(e) = lock.call(op, &field, 0).await {
                    tracing::warn!(lock = %lock.keys.name, error = %e, "release of a dropped read-write lock guard failed; it expires with its lease");
                }
            };
            drop(self.lock.client.inner.background.spawn_on(release, &handle));
        }
    }
}

macro_rules! guard {
    ($guard:ident, $what:literal) => {
        #[doc = concat!("A hold of the ", $what, " lock of a [`ReadWriteLock`](crate::ReadWriteLock). Release it with [`unlock`](Self::unlock); dropping it releases in the background.")]
        #[must_use = "dropping the guard releases the lock"]
        pub struct $guard(pub(crate) RwHold);

        impl $guard {
            /// Releases this hold.
            ///
            /// # Errors
            /// [`Error::LeaseLost`] when the hold was gone before the release (its lease ran
            /// out); Redis failures.
            ///
            /// # Cancel safety
            /// Dropping the future may leave the release unsent; the hold then ends with its
            /// lease.
            pub async fn unlock(self) -> Result<()> {
                self.0.unlock().await
            }

            /// Resolves when the hold is known lost (a renewal found it gone, or could not
            /// confirm it before its validity ran out). Never resolves for a fixed lease.
            pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
                self.0.lost()
            }

            /// Whether the hold is known lost.
            pub fn is_lost(&self) -> bool {
                self.0.state.lost.load(Ordering::Acquire)
            }

            /// Until when the hold is known valid: the start of the last confirmed acquisition
            /// or renewal, plus the lease, minus the drift allowance.
            pub fn valid_until(&self) -> Instant {
                *self.0.state.valid_until.lock()
            }

            /// The lock's name.
            pub fn name(&self) -> &str {
                &self.0.lock.keys.name
            }
        }

        impl std::fmt::Debug for $guard {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($guard))
                    .field("name", &self.0.lock.keys.name)
                    .finish_non_exhaustive()
            }
        }
    };
}

guard!(ReadGuard, "read");
guard!(WriteGuard, "write");
