//! A family hold's lease: its validity, its lost signal, and (without an explicit lease) the
//! task that renews it every third of the lease while its guard lives.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::open_holds::{GiveBack, OpenHold, OpenHolds};
use crate::shared::Client;
use crate::task::AbortOnDrop;
use crate::terms::{Lease, Validity};

struct State {
    name: Arc<str>,
    validity: Validity,
}

impl State {
    fn is_lost(&self) -> bool {
        if self.validity.is_marked() {
            return true;
        }
        if self.validity.ran_out() {
            self.lose("its validity ran out before a renewal confirmed it");
            return true;
        }
        false
    }

    fn lose(&self, why: &str) {
        let name = &self.name;
        self.validity
            .mark(|| tracing::warn!(lock = %name, "hold lost: {why}"));
    }
}

/// The lease side of one hold; dropping it stops the renewal and takes the hold off the list
/// that shutdown gives back.
pub(crate) struct Kept {
    state: Arc<State>,
    _renewal: Option<AbortOnDrop>,
    open: (Arc<OpenHolds>, u64),
}

/// What shutdown does with a hold still open: ends it (its guard reports it lost) and
/// releases it.
struct AtShutdown<R> {
    state: Arc<State>,
    release: R,
}

impl<R, Fut> OpenHold for AtShutdown<R>
where
    R: Fn() -> Fut + Send + Sync,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    fn give_back(&self) -> GiveBack {
        self.state.lose("the client shut down");
        Box::pin((self.release)())
    }
}

impl Kept {
    /// A hold of `client` granted by a request sent at `started`. A watchdog lease is renewed
    /// by `renew` (`Ok(true)`: renewed, `Ok(false)`: the hold is gone); `release` gives the hold
    /// back if the client shuts down while the guard lives.
    pub(super) fn new<F, Fut, R, RFut>(
        client: &Client,
        name: Arc<str>,
        lease: Lease,
        started: Instant,
        renew: F,
        release: R,
    ) -> Kept
    where
        F: Fn() -> Fut + Send + 'static,
        Fut: Future<Output = Result<bool>> + Send + 'static,
        R: Fn() -> RFut + Send + Sync + 'static,
        RFut: Future<Output = Result<()>> + Send + 'static,
    {
        let drift = client.inner.config.drift(lease.duration());
        let valid_until = started + lease.duration().saturating_sub(drift);
        let state = Arc::new(State {
            name,
            validity: Validity::new(valid_until),
        });
        let renewal = match lease {
            Lease::Watchdog(lease) => {
                let state = state.clone();
                let task = renew_loop(state, lease.saturating_sub(drift), lease / 3, renew);
                Some(AbortOnDrop(tokio::spawn(task)))
            }
            Lease::Fixed(_) => None,
        };
        let registry = client.inner.open_holds.clone();
        let id = registry.open(Arc::new(AtShutdown {
            state: state.clone(),
            release,
        }));
        Kept {
            state,
            _renewal: renewal,
            open: (registry, id),
        }
    }

    /// Lost when marked so, or once `valid_until` has passed without a confirmed renewal (for a
    /// fixed lease: once it ran out), as a [`LockGuard`](crate::LockGuard)'s. Sticky.
    pub(super) fn is_lost(&self) -> bool {
        self.state.is_lost()
    }

    pub(super) fn valid_until(&self) -> Instant {
        self.state.validity.until()
    }

    /// Resolves once the hold is known lost: marked so, or its validity ran out.
    pub(super) fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let state = self.state.clone();
        async move {
            let lost = || state.is_lost();
            state.validity.until_lost(lost, std::future::pending).await
        }
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        self.open.0.close(self.open.1);
    }
}

/// Renews every `period` until aborted, the hold is found gone, or the validity runs out
/// without a confirmed renewal.
async fn renew_loop<F, Fut>(state: Arc<State>, valid_for: Duration, period: Duration, renew: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<bool>>,
{
    let period = period.max(Duration::from_millis(1));
    loop {
        tokio::time::sleep(period).await;
        if state.validity.is_marked() {
            return;
        }
        let sent = Instant::now();
        match renew().await {
            // Too late to count: the validity may have run out before the renewal landed.
            Ok(true) if state.is_lost() => return,
            Ok(true) => state.validity.set(sent + valid_for),
            Ok(false) => return state.lose("a renewal found it gone"),
            Err(e) => {
                tracing::debug!(lock = %state.name, error = %e, "renewal failed");
                if state.is_lost() {
                    return;
                }
            }
        }
    }
}
