//! The watchdog: one task per client renewing every watchdog-kept lock, in batches.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use tokio::sync::Notify;

use tracing::Instrument;

use crate::error::Result;
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
    let (outcomes, round_trips, failed_batches) = if inner.node.is_cluster() {
        renew_on_cluster(inner, &holds).await
    } else {
        renew_on_server(inner, &holds).await
    };
    let mut stats = RenewStats {
        locks: holds.len(),
        round_trips,
        failed_batches,
        lost: expired,
        ..Default::default()
    };
    let now = Instant::now();
    for (hold, outcome) in holds.iter().zip(outcomes) {
        match outcome {
            Ok(true) => {
                let left = hold.valid_until().saturating_duration_since(now);
                crate::telemetry::observe(crate::telemetry::LEASE_LEFT_AT_RENEWAL, left);
                hold.renewed(started);
            }
            Ok(false) => stats.lost += lose(inner, hold, "the key was gone at renewal"),
            Err(_) if now >= hold.valid_until() => {
                stats.lost += lose(inner, hold, "Redis unreachable past the lease's validity");
            }
            Err(_) => {}
        }
    }
    stats.elapsed = started.elapsed();
    stats
}

/// Per hold: renewed or not, or the error that left it unknown; the script calls; the calls
/// that failed. On one server: calls of up to [`BATCH`] locks, sent concurrently.
async fn renew_on_server(
    inner: &Arc<Inner>,
    holds: &[Arc<Hold>],
) -> (Vec<Result<bool>>, usize, usize) {
    let batches: Vec<&[Arc<Hold>]> = holds.chunks(BATCH).collect();
    let calls = batches.iter().map(|batch| {
        let requests: Vec<Renewal<'_>> = batch.iter().map(|h| renewal(h)).collect();
        async move { inner.node.renew(&requests).await }
    });
    let results = join_all(calls).await;
    let mut outcomes = Vec::with_capacity(holds.len());
    let mut failed = 0;
    for (batch, result) in batches.iter().zip(results) {
        match result {
            Ok(flags) => outcomes.extend(flags.into_iter().map(Ok)),
            Err(e) => {
                failed += 1;
                tracing::warn!(error = %e, locks = batch.len(), "watchdog renewal failed; will retry");
                outcomes.extend(batch.iter().map(|_| Err(e.clone())));
            }
        }
    }
    (outcomes, batches.len(), failed)
}

/// As [`renew_on_server`], on a cluster: by node first, per slot for the rest
/// (`node/renew_by_node.rs`).
async fn renew_on_cluster(
    inner: &Arc<Inner>,
    holds: &[Arc<Hold>],
) -> (Vec<Result<bool>>, usize, usize) {
    let requests: Vec<Renewal<'_>> = holds.iter().map(|h| renewal(h)).collect();
    let round = inner.node.renew_by_node(&requests).await;
    let failed = round.flags.iter().filter(|f| f.is_err()).count();
    if let Some(Err(e)) = round.flags.iter().find(|f| f.is_err()) {
        tracing::warn!(error = %e, locks = failed, "watchdog renewal failed; will retry");
    }
    (round.flags, round.calls, usize::from(failed > 0))
}

fn renewal(hold: &Hold) -> Renewal<'_> {
    Renewal {
        hash: &hold.keys.hash,
        field: &hold.field,
        lease_ms: hold.lease_ms,
    }
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
