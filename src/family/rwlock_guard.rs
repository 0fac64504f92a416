//! The guards of a [`ReadWriteLock`](crate::ReadWriteLock): one hold each, renewed by the
//! client's watchdog while it lives when taken without an explicit lease.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::family::kept::Kept;
use crate::family::rwlock::{Hold, Kind, ReadWriteLock};
use crate::family::rwlock_share::{OwnHeld, Share};
use crate::release::{ServerHalf, finish_unlock, release_dropped};
use crate::telemetry;
use crate::terms::Lease;

/// The lease side of `hold` of `field`, granted by a request sent at `started`: renewed while
/// it lives (watchdog), released at shutdown.
pub(crate) fn kept(
    lock: &ReadWriteLock,
    hold: Hold,
    field: Arc<str>,
    lease: Lease,
    started: Instant,
) -> Kept {
    let renew = {
        let (lock, field) = (lock.clone(), field.clone());
        let lease_ms = lease.ms();
        move || {
            let (lock, field) = (lock.clone(), field.clone());
            async move {
                lock.call(hold.kind().ops().2, &field, lease_ms)
                    .await?
                    .flag()
            }
        }
    };
    // Where the hold is in the lock's hash (`lua/rwlock.lua`): a reader's count `r:<owner>`,
    // the writer's name in `w`.
    let presence = match hold.kind() {
        Kind::Read => crate::node::Presence {
            key: lock.keys.key.clone(),
            field: format!("r:{field}").into(),
            value: None,
        },
        Kind::Write => crate::node::Presence {
            key: lock.keys.key.clone(),
            field: "w".into(),
            value: Some(field.clone()),
        },
    };
    let release = {
        let lock = lock.clone();
        move || {
            let (lock, field) = (lock.clone(), field.clone());
            async move { lock.release(hold, &field, false).await.map(drop) }
        }
    };
    let name = lock.keys.name.clone();
    let kind = match hold.kind() {
        Kind::Read => telemetry::READ,
        Kind::Write => telemetry::WRITE,
    };
    Kept::new(
        &lock.client,
        (kind, name),
        lease,
        started,
        renew,
        release,
        presence,
    )
}

/// One read or write hold.
pub(crate) struct RwHold {
    lock: ReadWriteLock,
    kind: Kind,
    /// The owner's field.
    field: Arc<str>,
    held: Held,
    released: bool,
}

enum Held {
    /// A hold in the owner's name, counted while it lives (`ReadShares::own_held`).
    Own { kept: Kept, _counted: OwnHeld },
    /// A place in this client's shared read hold (`rwlock_share.rs`).
    Shared(Arc<Share>),
}

impl RwHold {
    pub(crate) fn new(
        lock: ReadWriteLock,
        kind: Kind,
        field: Arc<str>,
        lease: Lease,
        started: Instant,
    ) -> RwHold {
        let kept = kept(&lock, Hold::Own(kind), field.clone(), lease, started);
        let counted = lock.shares.own_held(&field);
        RwHold {
            lock,
            kind,
            field,
            held: Held::Own {
                kept,
                _counted: counted,
            },
            released: false,
        }
    }

    /// Owner `field`'s place in `share`, which it already took.
    pub(crate) fn shared(lock: ReadWriteLock, share: Arc<Share>, field: Arc<str>) -> RwHold {
        RwHold {
            lock,
            kind: Kind::Read,
            field,
            held: Held::Shared(share),
            released: false,
        }
    }

    pub(crate) fn kept(&self) -> &Kept {
        match &self.held {
            Held::Own { kept, .. } => kept,
            Held::Shared(share) => &share.kept,
        }
    }

    /// Gives up this hold locally: what to release on the server (nothing for a share's member
    /// that is not the last one out).
    fn leave(&self) -> Option<(Hold, Arc<str>)> {
        match &self.held {
            Held::Own { .. } => Some((Hold::Own(self.kind), self.field.clone())),
            Held::Shared(share) => {
                let share = self.lock.shares.leave(share, &self.field)?;
                Some((Hold::Share, share.field.clone()))
            }
        }
    }

    /// The release of this hold on the server: none for a share's member that is not the
    /// last one out (see [`leave`](Self::leave)).
    fn give_back(&self) -> Option<impl Future<Output = Result<bool>> + Send + 'static> {
        let (hold, field) = self.leave()?;
        // Its own hold, or the share it was the last one out of: released from now on.
        self.kept().closing();
        let lock = self.lock.clone();
        Some(async move {
            // Sent even while the client shuts down, whose drain no longer sees this hold
            // (`Kept::closing`), and then answered as a shut-down client answers.
            let released = lock.release(hold, &field, false).await;
            lock.client.inner.check_open()?;
            released
        })
    }

    async fn unlock(mut self) -> Result<()> {
        self.released = true;
        // Known lost before: a share no longer confirmed valid counts as lost for each member,
        // the last one out or not.
        let lost = self.kept().is_lost();
        let release = self.give_back().map(|r| Box::pin(r) as ServerHalf);
        finish_unlock(&self.lock.client, &self.lock.keys.name, lost, release).await
    }
}

impl Drop for RwHold {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        if let Some(release) = self.give_back() {
            release_dropped(&self.lock.client, self.lock.keys.name.clone(), release);
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
            /// As [`LockGuard::unlock`](crate::LockGuard::unlock): [`Error::LeaseLost`] when
            /// the hold was lost while held; [`Error::Shutdown`] when the client was shut down
            /// (it released everything); [`Error::Timeout`] or [`Error::Redis`] when Redis
            /// failed (the lease then frees the lock); [`Error::NoRuntime`] outside a tokio
            /// runtime (released in the background all the same).
            ///
            /// # Cancel safety
            /// Dropping the future still completes the release in the background.
            pub async fn unlock(self) -> Result<()> {
                self.0.unlock().await
            }

            /// Resolves when the hold is known lost (see [`is_lost`](Self::is_lost)).
            pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
                self.0.kept().lost()
            }

            /// Whether the hold is known lost: a renewal found it gone, its validity ran out
            /// before a renewal confirmed it (for a fixed lease: the lease ran out), or the
            /// client shut down.
            pub fn is_lost(&self) -> bool {
                self.0.kept().is_lost()
            }

            /// Until when the hold is known valid: the start of the last confirmed acquisition
            /// or renewal, plus the lease, minus the drift allowance.
            pub fn valid_until(&self) -> Instant {
                self.0.kept().valid_until()
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
