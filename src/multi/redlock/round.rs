//! Acquisition rounds in the wait loop (`wait.rs`): every node at once, a majority with
//! validity left wins, and whatever a lost round took is given back before the next.

use std::time::{Duration, Instant};

use futures_util::future::join_all;

use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::lock::Lock;
use crate::multi::member::{Outcome, attempt_one, give_back, jitter};
use crate::terms::Lease;
use crate::terms::Wait;

use super::RedLock;
use super::fence::raise_fence;
use super::guard::RedLockGuard;
use super::settings::Settings;
use super::shared::Shared;
use crate::wait::{Attempt, Waiter};

impl RedLock {
    /// Rounds until a majority grants the lock or `deadline` ends; `fixed` is a lease without
    /// renewal, else the watchdog lease applies and the guard renews.
    pub(super) async fn acquire(
        &self,
        fixed: Option<Duration>,
        deadline: Wait,
    ) -> Result<Option<RedLockGuard>> {
        let settings = self.settings(fixed)?;
        let nodes: Vec<Lock> = self.nodes.iter().map(Lock::pinned).collect();
        let mut rounds = Rounds {
            redlock: self,
            fenced: nodes.iter().any(|l| l.fenced),
            nodes,
            settings,
            unreachable_since: None,
            unreachable: None,
        };
        crate::wait::run(deadline, &mut rounds).await
    }
}

/// A RedLock's acquisition in the wait loop: each attempt a round over every node; a lost
/// round gives back what it took and the next starts after a random pause.
struct Rounds<'a> {
    redlock: &'a RedLock,
    nodes: Vec<Lock>,
    fenced: bool,
    settings: Settings,
    /// Since when no round has found enough nodes answering to form a majority.
    unreachable_since: Option<Instant>,
    /// The latest round's failure when too few nodes answered to form a majority.
    unreachable: Option<Error>,
}

impl Waiter for Rounds<'_> {
    type Output = RedLockGuard;

    async fn attempt(&mut self) -> Result<Attempt<RedLockGuard>> {
        // Outside tokio nothing can be sent (nor given back): say so before a round starts.
        crate::task::in_runtime()?;
        let settings = &self.settings;
        let started = Instant::now();
        let round = join_all(self.nodes.iter().map(|lock| {
            attempt_one(
                lock,
                Lease::Fixed(settings.lease),
                Some(settings.node_timeout),
            )
        }))
        .await;
        let name = &self.redlock.name;
        let tally = Tally::count(name, round, settings.quorum);
        if let Some(e) = tally.fatal {
            give_back(
                tally.slots.into_iter().flatten(),
                Some(settings.settle_timeout),
            )
            .await;
            return Err(e);
        }
        let slots = tally.slots;
        let mut granted = tally.acquired >= settings.quorum;
        let mut token = None;
        if granted && self.fenced {
            token = raise_fence(&slots, settings.quorum, settings.node_timeout).await;
            granted = token.is_some();
        }
        let valid_until = started
            .checked_add(settings.lease.saturating_sub(settings.drift))
            .unwrap_or(started);
        if granted && Instant::now() < valid_until {
            let nodes = std::mem::take(&mut self.nodes);
            let shared = Shared::new(name.clone(), nodes, settings, token, slots, valid_until);
            return Ok(Attempt::Done(RedLockGuard::start(shared, settings.renewed)));
        }
        give_back(slots.into_iter().flatten(), Some(settings.settle_timeout)).await;
        if granted {
            tracing::debug!(lock = %name, elapsed = ?started.elapsed(), "RedLock round took the lock too slowly to leave any validity");
        }
        // Too few answers to form a majority is a failure, not contention. Node timeouts are
        // short, so one such round may be a hiccup: waiting acquisitions go on, and give up
        // when their wait ends on such a round or when it has lasted a whole lease.
        let n = self.nodes.len();
        self.unreachable = None;
        if n - tally.failed < settings.quorum {
            let quorum_error = Error::Quorum {
                name: name.to_string(),
                nodes: n,
                needed: settings.quorum,
                acquired: tally.acquired,
                held_elsewhere: tally.held_elsewhere,
                failed: tally.failed,
            };
            let since = *self.unreachable_since.get_or_insert(started);
            if since.elapsed() >= settings.lease {
                return Err(quorum_error);
            }
            self.unreachable = Some(quorum_error);
        } else {
            self.unreachable_since = None;
        }
        Ok(Attempt::Again(Some(jitter(
            Duration::ZERO,
            self.redlock.retry_delay,
        ))))
    }

    // `refused` and `nap` as by default: nothing to listen to, since a node's unlock is not
    // announced across independent masters; the nap is the retry delay.

    fn spent(&mut self) -> Result<()> {
        self.unreachable.take().map_or(Ok(()), Err)
    }
}

/// How the nodes answered one round.
struct Tally {
    /// What each node granted, by node index.
    slots: Vec<Option<LockGuard>>,
    acquired: usize,
    held_elsewhere: usize,
    failed: usize,
    /// An error no further round can mend: a non-reentrant lock this owner already holds, or
    /// so many nodes' clients shut down that the others cannot form a majority.
    fatal: Option<Error>,
}

impl Tally {
    fn count(name: &str, round: Vec<Outcome>, quorum: usize) -> Tally {
        let nodes = round.len();
        let mut shut = 0;
        let mut tally = Tally {
            slots: Vec::with_capacity(round.len()),
            acquired: 0,
            held_elsewhere: 0,
            failed: 0,
            fatal: None,
        };
        for (i, outcome) in round.into_iter().enumerate() {
            let mut slot = None;
            let vote = match &outcome {
                Outcome::Granted(_) => "granted",
                Outcome::HeldElsewhere { .. } => "held",
                Outcome::TimedOut | Outcome::Failed(_) => "failed",
            };
            metrics::counter!(crate::telemetry::REDLOCK_VOTES, "node" => i.to_string(), "vote" => vote)
                .increment(1);
            match outcome {
                Outcome::Granted(held) => {
                    tally.acquired += 1;
                    slot = Some(held);
                }
                Outcome::HeldElsewhere { .. } => tally.held_elsewhere += 1,
                Outcome::TimedOut => {
                    tally.failed += 1;
                    tracing::debug!(lock = %name, node = i, "RedLock node did not answer in time");
                }
                Outcome::Failed(e) => {
                    tally.failed += 1;
                    tracing::debug!(lock = %name, node = i, error = %e, "RedLock node failed");
                    // No round can do better: the owner's own deadlock. A node whose client shut
                    // down is gone for good, but the others may still form a majority.
                    match e {
                        Error::WouldDeadlock { .. } => {
                            tally.fatal.get_or_insert(e);
                        }
                        Error::Shutdown => shut += 1,
                        _ => {}
                    }
                }
            }
            tally.slots.push(slot);
        }
        if nodes - shut < quorum {
            tally.fatal.get_or_insert(Error::Shutdown);
        }
        tally
    }
}
