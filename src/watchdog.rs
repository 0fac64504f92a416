//! The watchdog: one task per client renewing every watchdog-kept lock, in batches.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use tokio::sync::Notify;

use tracing::Instrument;

use crate::hold::Hold;
use crate::node::Renewal;
use crate::shared::Inner;
use crate::task::AbortOnDrop;

/// Locks per renewal script call: large enough that 100,000 locks take 100 calls, small enough
/// that one call does not stall the server for long (each lock costs two O(1) commands).
pub(crate) const BATCH: usize = 1000;

/// What one renewal tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RenewStats {
    /// Holds the tick tried to renew.
    pub locks: usize,
    /// Script calls sent, each of one shard (cluster slot) and at most 1,000 locks; they are
    /// sent concurrently, so the calls to one server travel pipelined.
    pub round_trips: usize,
    /// Holds found gone or past their validity; their guards are now lost.
    pub lost: usize,
    /// Calls that failed (Redis down, timeout); their holds are lost only once past validity.
    pub failed_batches: usize,
    /// Wall time of the tick.
    pub elapsed: Duration,
}

pub(crate) fn spawn(inner: &Arc<Inner>) -> AbortOnDrop {
    AbortOnDrop(tokio::spawn(run(
        Arc::downgrade(inner),
        inner.watchdog_wake.clone(),
    )))
}

async fn run(weak: Weak<Inner>, wake: Arc<Notify>) {
    let mut last_tick = tokio::time::Instant::now();
    loop {
        let Some(inner) = weak.upgrade() else { return };
        let lease = inner
            .holds
            .shortest_watchdog_lease()
            .unwrap_or(inner.config.watchdog_lease);
        inner.watchdog_lease_ms.store(
            lease.as_millis().min(u64::MAX as u128) as u64,
            Ordering::Release,
        );
        let period = (lease / 3).max(Duration::from_millis(1));
        // Sleep holding only the notification, not the client: a dropped client must be able to
        // end this task.
        drop(inner);
        // The next tick is due one period after the LAST tick, not after the last wake-up: every
        // fresh hold wakes us, and restarting the full period on each wake-up let a steady stream
        // of new locks starve the renewal of the ones already held (they expired).
        let woken = tokio::select! {
            _ = wake.notified() => true,
            _ = tokio::time::sleep_until(last_tick + period) => false,
        };
        if woken {
            // A new hold arrived; recompute the period (it may be shorter now).
            continue;
        }
        let due = last_tick + period;
        last_tick = tokio::time::Instant::now();
        crate::telemetry::observe(
            crate::telemetry::RENEWAL_LAG,
            last_tick.saturating_duration_since(due),
        );
        let Some(inner) = weak.upgrade() else { return };
        let span = tracing::debug_span!(
            "renew",
            locks = tracing::field::Empty,
            renewed = tracing::field::Empty,
            lost = tracing::field::Empty
        );
        let stats = renew_all(&inner).instrument(span.clone()).await;
        span.record("locks", stats.locks);
        span.record("renewed", stats.locks.saturating_sub(stats.lost));
        span.record("lost", stats.lost);
        // Keep this client's announcement alive for three periods past this tick.
        let ttl = 3 * period + Duration::from_secs(1);
        let prefix = &inner.config.prefix;
        if let Err(e) = crate::identity::announce(&inner.node, prefix, &inner.me, ttl).await {
            tracing::debug!(error = %e, "could not refresh this client's announcement");
        }
        if stats.lost > 0 || stats.failed_batches > 0 {
            tracing::debug!(?stats, "watchdog tick");
        }
    }
}

/// Renews every watchdog hold once: batches are sent concurrently, each answered flag updates
/// its hold, a failed batch marks lost only the holds already past their validity.
pub(crate) async fn renew_all(inner: &Arc<Inner>) -> RenewStats {
    let started = Instant::now();
    let mut holds = inner.holds.watchdog_holds();
    // A hold whose validity already ran out was told lost; renewing it now would keep a key
    // its holder has stopped trusting.
    let mut expired = 0;
    holds.retain(|hold| {
        let lost = hold.is_lost();
        if lost {
            expired += lose(
                inner,
                hold,
                "its validity ran out before a renewal confirmed it",
            );
        }
        !lost
    });
    // One script call carries locks of one shard (a cluster slot) only: group them, then cut
    // each group into calls of at most BATCH.
    let node = &inner.node;
    holds.sort_by_cached_key(|hold| node.shard(&hold.keys.hash));
    let mut batches: Vec<&[Arc<Hold>]> = Vec::new();
    let mut rest = holds.as_slice();
    while let Some(first) = rest.first() {
        let shard = node.shard(&first.keys.hash);
        let len = rest
            .iter()
            .take(BATCH)
            .take_while(|hold| node.shard(&hold.keys.hash) == shard)
            .count();
        let (batch, tail) = rest.split_at(len);
        batches.push(batch);
        rest = tail;
    }
    let calls = batches.iter().map(|batch| {
        let requests: Vec<Renewal<'_>> = batch
            .iter()
            .map(|h| Renewal {
                hash: &h.keys.hash,
                field: &h.field,
                lease_ms: h.lease_ms,
            })
            .collect();
        async move { inner.node.renew(&requests).await }
    });
    let results = join_all(calls).await;
    let mut stats = RenewStats {
        locks: holds.len(),
        round_trips: batches.len(),
        lost: expired,
        ..Default::default()
    };
    for (batch, result) in batches.iter().zip(results) {
        match result {
            Ok(flags) => {
                for (hold, renewed) in batch.iter().zip(flags) {
                    if renewed {
                        let left = hold.valid_until().saturating_duration_since(Instant::now());
                        crate::telemetry::observe(crate::telemetry::LEASE_LEFT_AT_RENEWAL, left);
                        hold.renewed(started);
                    } else {
                        stats.lost += lose(inner, hold, "the key was gone at renewal");
                    }
                }
            }
            Err(e) => {
                stats.failed_batches += 1;
                tracing::warn!(error = %e, locks = batch.len(), "watchdog renewal failed; will retry");
                let now = Instant::now();
                for hold in batch.iter().filter(|h| now >= h.valid_until()) {
                    stats.lost += lose(inner, hold, "Redis unreachable past the lease's validity");
                }
            }
        }
    }
    stats.elapsed = started.elapsed();
    stats
}

fn lose(inner: &Inner, hold: &Arc<Hold>, why: &str) -> usize {
    // A hold released while this round was in flight comes back "not renewed" too; it is not
    // lost (no guard is left to tell), so it must not be counted or logged as a lost lease.
    if !inner.holds.detach(hold) {
        return 0;
    }
    // `is_lost` may have marked it already (its validity ran out); it still counts once here.
    hold.mark_lost(why);
    1
}
