//! What this client holds, every kind: one `Hold` per (lock, owner) of the reentrant locks,
//! shared by all guards of that owner, and the lock family's holds (`family_holds.rs`).
//!
//! The registry is the source of truth for local reentrancy and for the watchdog: a hold is
//! renewed exactly while it is in the registry, and it leaves synchronously at its last
//! release, so a renewal never outlives an unlock. Shutdown takes every hold out at once
//! ([`Holds::drain`]).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::config::Replicas;
use crate::keys::{HoldKey, LockKeys};
use crate::telemetry::{LostReason, Series};
use crate::terms::{Lease, Validity};

mod early_renewals;
mod family_holds;
mod fresh;
mod registry;

pub(crate) use family_holds::{FamilyHold, FamilyHolds, GiveBack, Renewing};
pub(crate) use fresh::{Fresh, Noted};
pub(crate) use registry::{Grant, Holds, LocalRelease};

pub(crate) struct Hold {
    pub keys: Arc<LockKeys>,
    /// The lock's hash key and the owner's field.
    pub key: HoldKey,
    /// The lease it is kept on, and the drift allowed on it: a re-entry may lengthen both
    /// ([`Hold::reentered`]).
    terms: Mutex<(Lease, Duration)>,
    pub token: Option<u64>,
    /// The lock's lock-delay in milliseconds (0: none), renewed with the lease: the largest of
    /// the handles this owner took it through.
    delay_ms: AtomicU64,
    /// Live guards of this hold. Changed only under the registry's entry lock.
    guards: AtomicU32,
    /// Holds released by name ([`Lock::unlock`](crate::Lock::unlock)) while guards of it
    /// lived: as many guards live on past its last release, holding nothing, and are told then.
    released_by_name: AtomicU32,
    /// Server-side holds adopted from a lost predecessor of this owner that the server still
    /// counted; given back with this hold's last guard so the key does not outlive it.
    orphans: AtomicU32,
    validity: Validity,
    /// When the hold was registered, for the hold-time metric.
    pub granted_at: Instant,
    /// The replica acknowledgement its renewals ask for (its lock's, set when granted).
    replicas: Mutex<Replicas>,
    /// The last renewal was acknowledged by fewer replicas than wanted.
    at_risk: AtomicBool,
    /// Its labels in the metrics; `counted` while it counts in the `held` gauge.
    series: Series,
    counted: AtomicBool,
    /// Marked lost as gone from the server or forced ([`LostReason::ServerLost`],
    /// [`LostReason::Forced`]; also a hold replaced after a lapse, whose count passed to the new
    /// one), not merely lapsed on this client's clock: a RedLock counts such a node as no longer
    /// holding it.
    gone: AtomicBool,
    /// Metadata of this owner's hold is stored in the client's announcement
    /// ([`LockOptions::metadata`](crate::LockOptions::metadata)): its last release removes it.
    metadata: AtomicBool,
}

impl Hold {
    pub(crate) fn new(
        keys: Arc<LockKeys>,
        key: HoldKey,
        lease: Lease,
        token: Option<u64>,
        drift: Duration,
        started: Instant,
        series: Series,
    ) -> Hold {
        series.hold_began();
        Hold {
            keys,
            key,
            terms: Mutex::new((lease, drift)),
            token,
            delay_ms: AtomicU64::new(0),
            guards: AtomicU32::new(1),
            released_by_name: AtomicU32::new(0),
            orphans: AtomicU32::new(0),
            validity: Validity::new(started + lease.duration().saturating_sub(drift)),
            granted_at: Instant::now(),
            replicas: Mutex::new(Replicas::Off),
            at_risk: AtomicBool::new(false),
            series,
            counted: AtomicBool::new(true),
            gone: AtomicBool::new(false),
            metadata: AtomicBool::new(false),
        }
    }

    /// The lease it is kept on: renewed by the watchdog, or fixed.
    pub(crate) fn lease(&self) -> Lease {
        self.terms.lock().0
    }

    /// Its lease in milliseconds, as the scripts take it.
    pub(crate) fn lease_ms(&self) -> u64 {
        self.lease().ms()
    }

    /// Takes note of a re-entry granted on `lease` (sent at `started`, `drift` allowed on it).
    /// A re-entry never shortens the key's expiry on the server (`acquire.lua`):
    /// - a renewed hold stays on its own lease: its next renewal sets that again, so a longer
    ///   fixed re-entry changes nothing the hold may count on;
    /// - a fixed hold re-entered under the watchdog is renewed from now on, on that lease, so
    ///   no guard of it expires while another one is renewed;
    /// - a fixed hold re-entered on a longer fixed lease is valid as long as that one.
    ///
    /// Exact only in the order the server applied the re-entry and the owner's extensions:
    /// both hold the owner's turn (`turns.rs`).
    pub(crate) fn reentered(&self, lease: Lease, started: Instant, drift: Duration) {
        let until = started + lease.duration().saturating_sub(drift);
        let mut terms = self.terms.lock();
        match (terms.0, lease) {
            (Lease::Watchdog(_), _) => {}
            // Renewed from now on: valid as far as this re-entry's lease reaches, and then as
            // far as each renewal's, not to the fixed lease's end (a renewal sets a shorter
            // expiry, and renewals that failed would go unnoticed until then). A reply later
            // than the watchdog lease (possible only with one shorter than the client's
            // timeout) leaves it lost: safe, if needlessly so.
            (Lease::Fixed(_), Lease::Watchdog(_)) => {
                *terms = (lease, drift);
                self.validity.set(until);
            }
            (Lease::Fixed(held), Lease::Fixed(asked)) => {
                *terms = (Lease::Fixed(held.max(asked)), terms.1.max(drift));
                self.validity.extend(until);
            }
        }
    }

    /// Takes note that metadata of this hold is (about to be) stored.
    pub(crate) fn set_metadata(&self) {
        self.metadata.store(true, Ordering::Relaxed);
    }

    /// Whether metadata of this hold was stored, for its last release to remove.
    pub(crate) fn has_metadata(&self) -> bool {
        self.metadata.load(Ordering::Relaxed)
    }

    /// Takes it out of the `held` gauge, once; `released`: by its last guard's release (its
    /// hold time is recorded).
    pub(crate) fn let_go(&self, released: bool) {
        if self.counted.swap(false, Ordering::AcqRel) {
            self.series
                .let_go(released.then(|| self.granted_at.elapsed()));
        }
    }

    /// Takes note that the lock was taken (or re-entered) with a lock-delay of `delay_ms`.
    pub(crate) fn raise_delay(&self, delay_ms: u64) {
        self.delay_ms.fetch_max(delay_ms, Ordering::Relaxed);
    }

    /// What a release tells `release.lua` of the lock-delay: `None` when no handle set one.
    pub(crate) fn delay(&self) -> Option<u64> {
        let delay = self.delay_ms.load(Ordering::Relaxed);
        (delay > 0).then_some(delay)
    }

    /// Where the server keeps it: its owner field in the lock's hash.
    pub(crate) fn presence(&self) -> crate::node::Presence {
        crate::node::Presence {
            key: self.keys.hash.clone(),
            field: self.key.field.clone(),
            value: None,
        }
    }

    /// A renewal of this hold for `lease_ms`.
    pub(crate) fn renewal(&self, lease_ms: u64) -> crate::node::Renewal<'_> {
        crate::node::Renewal {
            hash: &self.keys.hash,
            field: &self.key.field,
            lease_ms,
            delay_ms: self.delay_ms.load(Ordering::Relaxed),
        }
    }

    /// The instant until which the lease is known to be valid: the start of the last successful
    /// acquisition or renewal, plus the lease, minus the drift allowance.
    pub(crate) fn valid_until(&self) -> Instant {
        self.validity.until()
    }

    /// The replica acknowledgement this hold's renewals ask for.
    pub(crate) fn replicas(&self) -> Replicas {
        *self.replicas.lock()
    }

    /// Sets what this hold's renewals ask for (the lock of its latest grant decides).
    pub(crate) fn set_replicas(&self, replicas: Replicas) {
        *self.replicas.lock() = replicas;
    }

    /// Whether the last renewal was acknowledged by fewer replicas than wanted.
    pub(crate) fn is_at_risk(&self) -> bool {
        self.at_risk.load(Ordering::Acquire)
    }

    /// Records whether the last renewal fell short of its replicas; the previous state.
    pub(crate) fn set_at_risk(&self, at_risk: bool) -> bool {
        self.at_risk.swap(at_risk, Ordering::AcqRel)
    }

    /// Records a successful renewal for `lease_ms` that was sent at `started`. A hold the
    /// watchdog renews counts no further than its own lease, whatever a renewal of a longer
    /// one said (a RedLock member's, of a hold shared with a single-lock guard): the
    /// watchdog's next renewal may set that shorter expiry.
    pub(crate) fn renewed(&self, started: Instant, lease_ms: u64) {
        let (lease, drift) = *self.terms.lock();
        let lease = match lease {
            Lease::Watchdog(own) => own.min(Duration::from_millis(lease_ms)),
            Lease::Fixed(_) => Duration::from_millis(lease_ms),
        };
        self.validity.extend(started + lease.saturating_sub(drift));
    }

    /// Lowers the validity to `until` if it is later: a grant from the queue is valid only for
    /// its claim lease until its first renewal.
    pub(crate) fn cap_validity(&self, until: Instant) {
        self.validity.cap(until);
    }

    /// Records a successful extension to `lease`, sent at `started`: the validity follows the
    /// new lease exactly, shorter or longer.
    pub(crate) fn extended(&self, started: Instant, lease: Duration, drift: Duration) {
        self.validity.set(started + lease.saturating_sub(drift));
    }

    /// Ends its validity now and marks it lost as an expired lease (`testing`).
    #[cfg(feature = "testing")]
    pub(crate) fn lapse(&self, why: &str) {
        self.validity.set(Instant::now());
        self.mark_lost(LostReason::Expired, why);
    }

    /// Lost when marked so, or once `valid_until` has passed without a successful renewal
    /// (for a fixed lease: once it ran out). Sticky: a late renewal does not bring it back.
    pub(crate) fn is_lost(&self) -> bool {
        if self.validity.is_marked() {
            return true;
        }
        if self.validity.ran_out() {
            let reason = match self.lease() {
                Lease::Fixed(_) => LostReason::Expired,
                Lease::Watchdog(_) => LostReason::RenewalFailed,
            };
            self.mark_lost(reason, "its validity ran out before a renewal confirmed it");
            return true;
        }
        false
    }

    /// Ends it at its last release: a lapse of its validity before still counts as a loss,
    /// nothing after it does (see [`Validity`]).
    pub(crate) fn end(&self) {
        self.is_lost();
        self.validity.end();
    }

    /// Whether it is over: lost, or ended by its last release. What handles that tell work
    /// when to stop (a leader's term, a `run` body's scope) report as lost.
    pub(crate) fn is_over(&self) -> bool {
        self.is_lost() || self.validity.is_ended()
    }

    /// Resolves when the hold is [over](Hold::is_over).
    pub(crate) fn over(self: &Arc<Self>) -> impl Future<Output = ()> + Send + 'static + use<> {
        let hold = Arc::clone(self);
        async move {
            let over = || hold.is_over();
            hold.validity.until_lost(over, std::future::pending).await
        }
    }

    /// What the server counts for this hold while `guards` guards live: one per guard, plus
    /// any adopted ones. The last guard (or shutdown) gives back all of it.
    pub(crate) fn server_count(&self, guards: u32) -> u32 {
        guards + self.orphans.load(Ordering::Acquire)
    }

    /// One of its holds was released by name, not its last: a guard of it will outlive it.
    pub(crate) fn note_released_by_name(&self) {
        self.released_by_name.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether a guard of it outlives its last release (see [`note_released_by_name`]).
    ///
    /// [`note_released_by_name`]: Hold::note_released_by_name
    pub(crate) fn outlived_by_a_guard(&self) -> bool {
        self.released_by_name.load(Ordering::Acquire) > 0
    }

    /// Marks it lost without a warning or a lost lease counted: its last hold was released by
    /// name ([`Lock::unlock`](crate::Lock::unlock)), most often for a guard that was forgotten,
    /// whose `lost()` nobody awaits; a guard that lives on is told all the same.
    pub(crate) fn mark_released_by_name(&self) {
        let name = &self.keys.name;
        self.validity.mark(|| {
            tracing::debug!(lock = %name, "its last hold was released by name; a guard of it that lives on holds nothing");
        });
    }

    /// Whether the server was found without it, or it was forced (see the field `gone`).
    pub(crate) fn is_gone(&self) -> bool {
        self.gone.load(Ordering::Acquire)
    }

    /// Marks the lease lost and wakes every `lost()` future. Returns true the first time.
    pub(crate) fn mark_lost(&self, reason: LostReason, why: &str) -> bool {
        if matches!(reason, LostReason::ServerLost | LostReason::Forced) {
            self.gone.store(true, Ordering::Release);
        }
        let first = self.validity.mark(|| {
            tracing::warn!(lock = %self.keys.name, owner = %self.key.field, "lease lost: {why}");
            self.series.lost(reason);
            self.let_go(false);
        });
        if !first {
            // Marked before (a lapse), lost again now (found gone, its client shut down): who
            // counts such holds (a RedLock) looks again.
            self.validity.wake();
        }
        first
    }

    /// Whether its last hold was released (by its guards, or by name).
    pub(crate) fn is_released(&self) -> bool {
        self.validity.is_ended()
    }

    /// Resolves at its next change from now (counted now, not when first polled): a mark, its
    /// end, or found gone after a lapse.
    pub(crate) fn changed(self: &Arc<Self>) -> impl Future<Output = ()> + Send + 'static + use<> {
        let (hold, seen) = (Arc::clone(self), self.validity.changes());
        async move { hold.validity.changed_since(seen).await }
    }

    /// Resolves when the lease is lost: marked lost by the watchdog or a release, or its
    /// validity ran out (no renewal confirmed in time, or a fixed lease expired).
    pub(crate) fn lost(self: &Arc<Self>) -> impl Future<Output = ()> + Send + 'static + use<> {
        let hold = Arc::clone(self);
        async move {
            let lost = || hold.is_lost();
            hold.validity.until_lost(lost, std::future::pending).await
        }
    }
}

/// Resolves when any of `holds` is lost; never, for none.
pub(crate) fn any_lost(holds: Vec<Arc<Hold>>) -> impl Future<Output = ()> + Send + 'static {
    first_of(holds.iter().map(|hold| Box::pin(hold.lost())).collect())
}

/// Resolves at the next change of any of `holds` (see [`Hold::changed`]); never, for none.
pub(crate) fn any_changed(holds: Vec<Arc<Hold>>) -> impl Future<Output = ()> + Send + 'static {
    first_of(holds.iter().map(|hold| Box::pin(hold.changed())).collect())
}

/// Resolves when the first of `each` does; never, for none.
async fn first_of<F: Future<Output = ()> + Unpin>(each: Vec<F>) {
    if each.is_empty() {
        std::future::pending::<()>().await;
    }
    futures_util::future::select_all(each).await;
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.let_go(false);
    }
}
