//! `RedLockGuard`, the state it shares with its renewal task, and that task.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::hold::{Hold, Lease};
use crate::lock::Lock;
use crate::node::Renewal;
use crate::task::AbortOnDrop;

use super::member::{Held, Outcome};
use super::redlock::Settings;

/// What a guard and its renewal task share.
pub(crate) struct Shared {
    name: Arc<str>,
    /// One lock per node, owner pinned: renewal re-acquires with them.
    nodes: Vec<Lock>,
    quorum: usize,
    lease: Duration,
    drift: Duration,
    node_timeout: Duration,
    settle_timeout: Duration,
    token: Option<u64>,
    state: Mutex<State>,
    lost: AtomicBool,
    lost_notify: Notify,
}

struct State {
    /// What we hold on each node, by node index.
    slots: Vec<Option<Held>>,
    valid_until: Instant,
    /// Set by unlock and drop: from then on nothing may be added.
    closed: bool,
}

/// What a renewal round came to.
enum Round {
    Renewed,
    /// Fewer than a quorum confirmed, but the validity has not run out: try again sooner.
    Short,
    /// Lost, or the guard was released.
    Stop,
}

/// One node's part of a renewal round.
enum Step {
    Renewed(Arc<Hold>),
    /// The node answered that our hold is gone.
    Gone,
    /// Taken again on a node that did not hold it.
    Retaken(Held),
    /// No answer, an error, or (for a node we did not hold) held elsewhere.
    Failed,
}

impl Shared {
    pub fn new(
        name: Arc<str>,
        nodes: Vec<Lock>,
        settings: &Settings,
        token: Option<u64>,
        slots: Vec<Option<Held>>,
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
                valid_until,
                closed: false,
            }),
            lost: AtomicBool::new(false),
            lost_notify: Notify::new(),
        }
    }

    fn valid_until(&self) -> Instant {
        self.state.lock().valid_until
    }

    fn is_lost(&self) -> bool {
        if self.lost.load(Ordering::Acquire) {
            return true;
        }
        if Instant::now() < self.valid_until() {
            return false;
        }
        // Sticky: the caller may already have acted on the loss, so a renewal that lands after
        // the validity ran out must not bring the guard back.
        if !self.lost.swap(true, Ordering::AcqRel) {
            tracing::debug!(lock = %self.name, "RedLock validity ran out");
            self.lost_notify.notify_waiters();
        }
        true
    }

    fn mark_lost(&self, why: &str) {
        if !self.lost.swap(true, Ordering::AcqRel) {
            tracing::warn!(lock = %self.name, "RedLock lost: {why}");
            self.lost_notify.notify_waiters();
        }
    }

    fn held_nodes(&self) -> usize {
        self.state.lock().slots.iter().flatten().count()
    }

    /// Takes every member out for release and forbids adding new ones.
    fn close(&self) -> Vec<Held> {
        let mut state = self.state.lock();
        state.closed = true;
        state.slots.iter_mut().filter_map(Option::take).collect()
    }

    /// One renewal round over every node at once.
    async fn renew_round(&self) -> Round {
        let started = Instant::now();
        let plan: Vec<Option<(Client, Arc<Hold>)>> = {
            let state = self.state.lock();
            if state.closed {
                return Round::Stop;
            }
            state
                .slots
                .iter()
                .map(|slot| slot.as_ref().map(|h| (h.client.clone(), h.hold.clone())))
                .collect()
        };
        let steps = join_all(
            plan.into_iter()
                .enumerate()
                .map(|(i, held)| self.renew_node(i, held)),
        )
        .await;
        // Members leave the state under the lock but are dropped after it: dropping a guard
        // spawns its release.
        let mut leaving = Vec::new();
        let (renewed, held, expired) = {
            let mut state = self.state.lock();
            if state.closed {
                // Unlocked meanwhile: whatever was taken again goes back.
                leaving.extend(steps.into_iter().filter_map(|step| match step {
                    Step::Retaken(held) => Some(held),
                    _ => None,
                }));
                return Round::Stop;
            }
            // Judged before this round's answers can move it.
            let expired = Instant::now() >= state.valid_until;
            let mut renewed = 0;
            for (i, step) in steps.into_iter().enumerate() {
                match step {
                    Step::Renewed(hold) => {
                        hold.renewed(started);
                        renewed += 1;
                    }
                    Step::Gone => {
                        if let Some(held) = state.slots[i].take() {
                            held.client.inner.holds.detach(&held.hold);
                            held.hold
                                .mark_lost("the key was gone from this RedLock node");
                            leaving.push(held);
                        }
                    }
                    Step::Retaken(held) => {
                        if state.slots[i].is_none() {
                            state.slots[i] = Some(held);
                            renewed += 1;
                        } else {
                            leaving.push(held);
                        }
                    }
                    Step::Failed => {}
                }
            }
            if renewed >= self.quorum && !expired {
                let until = started + self.lease.saturating_sub(self.drift);
                if until > state.valid_until {
                    state.valid_until = until;
                }
            }
            (renewed, state.slots.iter().flatten().count(), expired)
        };
        drop(leaving);
        if expired || self.lost.load(Ordering::Acquire) {
            self.mark_lost(&format!(
                "its validity ran out; the last round renewed on {renewed} of {} nodes (quorum {})",
                self.nodes.len(),
                self.quorum
            ));
            return Round::Stop;
        }
        if held < self.quorum {
            self.mark_lost(&format!(
                "only {held} of {} nodes still hold it (quorum {})",
                self.nodes.len(),
                self.quorum
            ));
            return Round::Stop;
        }
        if renewed < self.quorum {
            tracing::warn!(lock = %self.name, renewed, quorum = self.quorum, "RedLock renewal short of a quorum; retrying before the validity runs out");
            return Round::Short;
        }
        Round::Renewed
    }

    async fn renew_node(&self, i: usize, held: Option<(Client, Arc<Hold>)>) -> Step {
        let lease_ms = self.lease.as_millis() as u64;
        let Some((client, hold)) = held else {
            // A node we do not hold (restarted, or it failed when we acquired): take it again
            // when it is free, to keep as many nodes as possible behind the lock.
            let lock = &self.nodes[i];
            return match lock
                .attempt_member(Lease::Fixed(self.lease), Some(self.node_timeout))
                .await
            {
                Outcome::Granted(held) => {
                    tracing::debug!(lock = %self.name, node = i, "RedLock taken again on a node");
                    Step::Retaken(held)
                }
                _ => Step::Failed,
            };
        };
        let batch = [Renewal {
            hash: &hold.keys.hash,
            field: &hold.field,
            // A hold shared with a single-lock guard of the same owner keeps its longer lease.
            lease_ms: lease_ms.max(hold.lease_ms),
        }];
        let reply = tokio::time::timeout(self.settle_timeout, client.inner.node.renew(&batch));
        match reply.await {
            Ok(Ok(flags)) if flags == [true] => Step::Renewed(hold),
            Ok(Ok(_)) => Step::Gone,
            Ok(Err(e)) => {
                tracing::debug!(lock = %self.name, node = i, error = %e, "RedLock renewal failed on a node");
                Step::Failed
            }
            Err(_) => {
                tracing::debug!(lock = %self.name, node = i, "RedLock renewal timed out on a node");
                Step::Failed
            }
        }
    }
}

/// Renews every third of the lease until the guard goes or the lock is lost. Holds only a
/// `Weak`, so a dropped guard (which also aborts this task) ends it.
async fn renew(weak: Weak<Shared>, period: Duration) {
    let mut pause = period;
    loop {
        tokio::time::sleep(pause).await;
        let Some(shared) = weak.upgrade() else { return };
        pause = match shared.renew_round().await {
            Round::Renewed => period,
            Round::Short => period / 2,
            Round::Stop => return,
        };
    }
}

/// A [`RedLock`](crate::RedLock) held on a majority of its nodes. Release it with
/// [`unlock`](RedLockGuard::unlock) (errors visible) or by dropping it (background release).
///
/// The guard remembers the owner it acquired for, so it may be moved to and unlocked from any
/// task or thread.
///
/// # Drop
/// Drop never blocks: it stops the renewal at once and spawns the release on every node on the
/// current runtime; without a runtime the leases free the keys. A guard leaked with
/// `std::mem::forget` is never released and its renewal runs on as long as the runtime does.
#[must_use = "if unused the lock is released immediately"]
pub struct RedLockGuard {
    // Declared first: the renewal stops before anything else is dropped.
    renewal: Option<AbortOnDrop>,
    shared: Arc<Shared>,
}

impl RedLockGuard {
    pub(crate) fn start(shared: Shared, renewed: bool) -> RedLockGuard {
        let period = (shared.lease / 3).max(Duration::from_millis(1));
        let shared = Arc::new(shared);
        let renewal =
            renewed.then(|| AbortOnDrop(tokio::spawn(renew(Arc::downgrade(&shared), period))));
        RedLockGuard { renewal, shared }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// How long the lock is still known valid: `valid_until − now`, zero once it has passed.
    ///
    /// Right after acquisition this is the Redlock validity `lease − elapsed − drift`; every
    /// renewal confirmed by a majority moves it forward. Check it before work that must not run
    /// without the lock.
    pub fn validity(&self) -> Duration {
        self.valid_until().saturating_duration_since(Instant::now())
    }

    /// The instant until which the lock is known valid: the start of the last round (acquisition
    /// or renewal) that a majority of nodes confirmed, plus the lease, minus the drift allowance.
    pub fn valid_until(&self) -> Instant {
        self.shared.valid_until()
    }

    /// Whether the lock is known lost: fewer than a majority of nodes still hold it, or its
    /// validity ran out (for a fixed lease, simply its end). Once lost, always lost: a renewal
    /// that succeeds after the validity ran out (the process was paused, say) does not bring
    /// the guard back.
    pub fn is_lost(&self) -> bool {
        self.shared.is_lost()
    }

    /// A future that resolves when the lock is lost (see [`is_lost`](RedLockGuard::is_lost)).
    /// It does not borrow the guard, so it can be raced against the work done under the lock.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let shared = self.shared.clone();
        async move {
            loop {
                let notified = shared.lost_notify.notified();
                tokio::pin!(notified);
                // Register before checking so a concurrent `mark_lost` cannot be missed.
                notified.as_mut().enable();
                if shared.is_lost() {
                    return;
                }
                let until = tokio::time::Instant::from_std(shared.valid_until());
                tokio::select! {
                    _ = notified => {}
                    // A renewal may have moved the validity meanwhile: look again.
                    _ = tokio::time::sleep_until(until) => {}
                }
            }
        }
    }

    /// For [fenced](crate::Lock::fenced) nodes: the largest fencing counter among the nodes
    /// that granted the lock, to which a majority of nodes were then raised. See *Fencing* on
    /// [`RedLock`](crate::RedLock) for what it guarantees.
    pub fn fencing_token(&self) -> Option<u64> {
        self.shared.token
    }

    /// On how many nodes the lock is held now (renewal may re-take nodes that lost it).
    pub fn held_nodes(&self) -> usize {
        self.shared.held_nodes()
    }

    /// How many nodes must hold the lock: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.shared.quorum
    }

    /// Stops the renewal, then releases the lock on every node that holds it, all at once,
    /// waiting for each node at most `max(node timeout, min(lease / 10, 1 s))`; a release still
    /// unanswered then goes on in the background.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when the lock was lost while held (it is released everywhere
    /// anyway): either the guard was already lost, or fewer than a majority of nodes still had
    /// it. Otherwise the first release error, but only when the nodes that could not release
    /// are so many that no other owner can form a majority until their leases run out; fewer
    /// failures are logged and the lock counts as released.
    ///
    /// # Cancel safety
    /// Dropping the future still completes every release in the background.
    pub async fn unlock(mut self) -> Result<()> {
        self.renewal.take();
        let was_lost = self.shared.is_lost();
        let members = self.shared.close();
        let nodes = self.shared.nodes.len();
        let quorum = self.shared.quorum;
        let held = members.len();
        let settle = self.shared.settle_timeout;
        // A node that does not answer in time counts as failed; its release goes on in the
        // background.
        let results = join_all(members.into_iter().map(|member| async move {
            match tokio::time::timeout(settle, member.guard.unlock()).await {
                Ok(result) => result,
                Err(_) => Err(Error::Timeout {
                    operation: "release",
                    timeout: settle,
                }),
            }
        }))
        .await;
        let mut gone = 0;
        let mut failures = Vec::new();
        for result in results {
            match result {
                Ok(()) => {}
                Err(e) if e.is_lease_lost() => gone += 1,
                Err(e) => failures.push(e),
            }
        }
        if was_lost || held - gone < quorum {
            return Err(Error::LeaseLost {
                name: self.shared.name.to_string(),
            });
        }
        for e in &failures {
            tracing::warn!(lock = %self.shared.name, error = %e, "RedLock release failed on a node; its lease frees it");
        }
        // Nodes that could not release may still hold our key; the rest must be able to form a
        // majority for someone else.
        let stuck = failures.len();
        match failures.into_iter().next() {
            Some(e) if nodes - stuck < quorum => Err(e),
            _ => Ok(()),
        }
    }
}

impl Drop for RedLockGuard {
    fn drop(&mut self) {
        self.renewal.take();
        // Each member guard spawns its own release.
        drop(self.shared.close());
    }
}

impl std::fmt::Debug for RedLockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedLockGuard")
            .field("name", &self.shared.name)
            .field("held_nodes", &self.held_nodes())
            .field("quorum", &self.shared.quorum)
            .field("validity", &self.validity())
            .field("token", &self.shared.token)
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}
