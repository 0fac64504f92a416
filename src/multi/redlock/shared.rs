//! What a `RedLockGuard` and its renewal task share: the nodes, the numbers, what is held on
//! each node, the validity, and whether the lock is lost.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::guard::LockGuard;
use crate::hold::Hold;
use crate::lock::Lock;
use crate::terms::Validity;

use super::settings::Settings;

/// What a guard and its renewal task share.
pub(super) struct Shared {
    pub(super) name: Arc<str>,
    /// One lock per node, owner pinned: renewal re-acquires with them.
    pub(super) nodes: Vec<Lock>,
    pub(super) quorum: usize,
    pub(super) lease: Duration,
    pub(super) drift: Duration,
    pub(super) node_timeout: Duration,
    pub(super) settle_timeout: Duration,
    pub(super) token: Option<u64>,
    pub(super) state: Mutex<State>,
    pub(super) validity: Validity,
}

pub(super) struct State {
    /// What we hold on each node, by node index.
    pub(super) slots: Vec<Option<LockGuard>>,
    /// Set by unlock and drop: from then on nothing may be added.
    pub(super) closed: bool,
}

impl Shared {
    pub(super) fn new(
        name: Arc<str>,
        nodes: Vec<Lock>,
        settings: &Settings,
        token: Option<u64>,
        slots: Vec<Option<LockGuard>>,
        valid_until: Instant,
    ) -> Shared {
        Shared {
            name,
            nodes,
            quorum: settings.quorum,
            lease: settings.lease,
            drift: settings.drift,
            node_timeout: settings.node_timeout,
            settle_timeout: settings.settle_timeout,
            token,
            state: Mutex::new(State {
                slots,
                closed: false,
            }),
            validity: Validity::new(valid_until),
        }
    }

    pub(super) fn valid_until(&self) -> Instant {
        self.validity.until()
    }

    pub(super) fn is_lost(&self) -> bool {
        if self.validity.is_marked() {
            return true;
        }
        if !self.validity.ran_out() {
            if self.open_holds() >= self.quorum {
                return false;
            }
            self.mark_lost("fewer than a majority of its nodes still hold it");
            return true;
        }
        // Sticky: the caller may already have acted on the loss, so a renewal that lands after
        // the validity ran out must not bring the guard back.
        let name = &self.name;
        self.validity
            .mark(|| tracing::debug!(lock = %name, "RedLock validity ran out"));
        true
    }

    /// How many nodes still hold it: through an open client (`Client::shutdown` gives back the
    /// holds of its client), and not found gone (a node's loss notice, when it is on, marks its
    /// hold so as soon as it sees the key go, long before the next renewal finds it gone; see
    /// [`holds`]). Unlocked (closed), it counts every node, so a `lost()` that outlives the
    /// guard does not resolve for the release.
    fn open_holds(&self) -> usize {
        if self.state.lock().closed {
            return self.nodes.len();
        }
        self.held_nodes()
    }

    /// The holds of the nodes held now, whose loss may make the lock lost.
    pub(super) fn member_holds(&self) -> Vec<Arc<Hold>> {
        let state = self.state.lock();
        let held = state.slots.iter().flatten();
        held.map(|guard| guard.hold().clone()).collect()
    }

    /// Marks it lost; known lost, it is valid no longer: its validity ends now (as a hold's the
    /// loss notice finds gone).
    pub(super) fn mark_lost(&self, why: &str) {
        let name = &self.name;
        self.validity.cap(Instant::now());
        self.validity
            .mark(|| tracing::warn!(lock = %name, "RedLock lost: {why}"));
    }

    pub(super) fn held_nodes(&self) -> usize {
        let state = self.state.lock();
        state
            .slots
            .iter()
            .flatten()
            .filter(|held| holds(held))
            .count()
    }

    /// Takes every member out for release and forbids adding new ones.
    pub(super) fn close(&self) -> Vec<LockGuard> {
        // A lapse before counts as a loss; nothing after (see `Validity`).
        self.is_lost();
        self.validity.end();
        let mut state = self.state.lock();
        state.closed = true;
        state.slots.iter_mut().filter_map(Option::take).collect()
    }
}

/// Whether a node's guard still holds the lock: its client is open, its key was not found gone
/// there (or forced), and its hold was not released (by name, through that node's client). A node whose renewals go unanswered still counts: the guard's own
/// validity, which only a majority's renewals move, answers for that.
fn holds(held: &LockGuard) -> bool {
    let hold = held.hold();
    !held.client().inner.is_shut_down() && !hold.is_gone() && !hold.is_released()
}
