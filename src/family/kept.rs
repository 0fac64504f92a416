//! A family hold's lease: its validity and its lost signal, and its place among the client's
//! open holds, where (without an explicit lease) the watchdog renews it while its guard lives.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::error::Result;
use crate::hold::{FamilyHold, FamilyHolds, GiveBack, Renewing};
use crate::node::Presence;
use crate::shared::Client;
use crate::telemetry::{LostReason, Series};
use crate::terms::{Lease, Validity};

struct State {
    name: Arc<str>,
    validity: Validity,
    /// Its guard is gone: a renewal in flight then tells nobody anything.
    closed: AtomicBool,
    /// Its metrics: counted in `held` from the grant until it is lost or its guard is gone.
    series: Series,
    granted_at: Instant,
    /// Still counted in `held`.
    counted: AtomicBool,
    /// A fixed lease (never renewed): running out is expiry, not a failed renewal.
    fixed: bool,
}

impl State {
    fn is_lost(&self) -> bool {
        if self.validity.is_marked() {
            return true;
        }
        if self.validity.ran_out() {
            match self.fixed {
                true => self.lose(LostReason::Expired, "its fixed lease ran out"),
                false => self.lose(
                    LostReason::RenewalFailed,
                    "its validity ran out before a renewal confirmed it",
                ),
            }
            return true;
        }
        false
    }

    fn lose(&self, reason: LostReason, why: &str) {
        let name = &self.name;
        self.validity.mark(|| {
            tracing::warn!(lock = %name, "hold lost: {why}");
            self.series.lost(reason);
            self.let_go(false);
        });
    }

    /// Out of `held` (once), with the hold's time when it was released rather than lost.
    fn let_go(&self, released: bool) {
        if self.counted.swap(false, Ordering::AcqRel) {
            self.series
                .let_go(released.then(|| self.granted_at.elapsed()));
        }
    }
}

/// The lease side of one hold; dropping it takes the hold off the client's list of open
/// holds, which the watchdog renews and shutdown gives back.
pub(crate) struct Kept {
    state: Arc<State>,
    open: (Arc<FamilyHolds>, u64),
}

/// A hold as the watchdog and shutdown see it.
struct Open<F, R> {
    state: Arc<State>,
    lease: Lease,
    /// How long a confirmed renewal keeps it valid: the lease less the drift allowance.
    valid_for: Duration,
    renew: F,
    release: R,
    /// Where the server keeps it (the loss notice reads it there).
    presence: Presence,
}

impl<F, Fut, R, RFut> FamilyHold for Open<F, R>
where
    F: Fn() -> Fut + Send + Sync,
    Fut: Future<Output = Result<bool>> + Send + 'static,
    R: Fn() -> RFut + Send + Sync,
    RFut: Future<Output = Result<()>> + Send + 'static,
{
    fn watchdog_lease(&self) -> Option<Duration> {
        match self.lease {
            Lease::Watchdog(lease) => Some(lease),
            Lease::Fixed(_) => None,
        }
    }

    fn renew(&self) -> Option<Renewing> {
        if self.state.validity.is_marked() || self.watchdog_lease().is_none() {
            return None;
        }
        let (state, valid_for, renew) = (self.state.clone(), self.valid_for, (self.renew)());
        Some(Box::pin(async move {
            // Released since the watchdog's snapshot (before, or while the renewal was on the
            // wire): nobody is left to tell.
            let closed = || state.closed.load(Ordering::Acquire);
            if closed() {
                return false;
            }
            // Too late to renew: the validity ran out before a renewal confirmed it.
            if state.is_lost() {
                return true;
            }
            let sent = Instant::now();
            let renewed = renew.await;
            if closed() {
                return false;
            }
            match renewed {
                Ok(true) if state.is_lost() => true,
                Ok(true) => {
                    state.validity.set(sent + valid_for);
                    false
                }
                Ok(false) => {
                    state.lose(LostReason::ServerLost, "a renewal found it gone");
                    true
                }
                Err(e) => {
                    tracing::debug!(lock = %state.name, error = %e, "renewal failed");
                    state.is_lost()
                }
            }
        }))
    }

    /// Ends it (its guard reports it lost) and releases it.
    fn give_back(&self) -> GiveBack {
        self.state
            .lose(LostReason::Shutdown, "the client shut down");
        Box::pin((self.release)())
    }

    fn presence(&self) -> &Presence {
        &self.presence
    }

    fn is_live(&self) -> bool {
        !self.state.closed.load(Ordering::Acquire) && !self.state.is_lost()
    }

    fn gone(&self, why: &str) -> bool {
        if !self.is_live() {
            return false;
        }
        // Known gone: valid no longer, then marked, so whoever hears of the loss finds the
        // validity ended too. (An `is_lost` in between would record the loss as a lapsed
        // validity instead: the metric's reason only.)
        self.state.validity.cap(Instant::now());
        self.state.lose(LostReason::ServerLost, why);
        true
    }
}

impl Kept {
    /// A hold of `client` granted by a request sent at `started`. A watchdog lease is renewed
    /// by the client's watchdog with `renew` (`Ok(true)`: renewed, `Ok(false)`: the hold is
    /// gone); `release` gives the hold back if the client shuts down while the guard lives.
    /// Counted in the metrics of its kind (`telemetry.rs`, with its name) while it is held;
    /// `presence` says where the server keeps it, for the loss notice.
    pub(super) fn new<F, Fut, R, RFut>(
        client: &Client,
        (kind, name): (&'static str, Arc<str>),
        lease: Lease,
        started: Instant,
        renew: F,
        release: R,
        presence: Presence,
    ) -> Kept
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<bool>> + Send + 'static,
        R: Fn() -> RFut + Send + Sync + 'static,
        RFut: Future<Output = Result<()>> + Send + 'static,
    {
        let valid_for = lease
            .duration()
            .saturating_sub(client.inner.config.drift(lease.duration()));
        let series = (client.inner.config.lock_label).series(kind, &name);
        series.hold_began();
        let state = Arc::new(State {
            name,
            validity: Validity::new(started + valid_for),
            closed: AtomicBool::new(false),
            series,
            granted_at: Instant::now(),
            counted: AtomicBool::new(true),
            fixed: matches!(lease, Lease::Fixed(_)),
        });
        let registry = client.inner.holds.family.clone();
        let open: Arc<dyn FamilyHold> = Arc::new(Open {
            state: state.clone(),
            lease,
            valid_for,
            renew,
            release,
            presence,
        });
        let id = registry.open(open.clone());
        client.inner.holds.fresh.family(&open);
        client.inner.watchdog.adopt(lease);
        Kept {
            state,
            open: (registry, id),
        }
    }

    /// Its guard is releasing it: from now on nothing it hears of the hold (a renewal in
    /// flight, the loss notice of its own release's write) makes it lost. Called before the
    /// release is sent, since the server's answer (and its notice) may come before the guard is
    /// gone. It leaves the registry here, so a shutdown that drains it meanwhile does not give
    /// it back a second time: the guard's own release does.
    pub(super) fn closing(&self) {
        // Once: a guard's release and then its drop both close it.
        if self.state.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        // A lapse before counts as a loss; nothing after (see `Validity`).
        self.state.is_lost();
        self.state.validity.end();
        self.open.0.close(self.open.1);
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
        self.closing();
        // A lease that ran out while the guard lived was lost, not released.
        self.state.is_lost();
        self.state.let_go(true);
    }
}
