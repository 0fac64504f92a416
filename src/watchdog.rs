//! The watchdog: one task per client renewing every watchdog-kept hold of every kind (locks in
//! batches, the lock family's holds by their kinds' coalesced script calls).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use tokio::sync::Notify;

use tracing::Instrument;

use crate::error::Result;
use crate::hold::Hold;
use crate::node::{Acks, RENEWAL_BATCH, Renewal, Shortfall, WaitFor};
use crate::shared::Inner;
use crate::task::AbortOnDrop;
use crate::telemetry::LostReason;

#[cfg(feature = "testing")]
pub(crate) mod audit;
mod early;
mod notice;

/// What one renewal tick did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RenewStats {
    /// Holds the tick tried to renew, of every kind.
    pub locks: usize,
    /// Script calls sent for locks, each of one shard (cluster slot) and at most 200 locks;
    /// they are sent concurrently, so the calls to one server travel pipelined. (The lock
    /// family's holds renew through their kinds' coalesced script calls, not counted here.)
    pub round_trips: usize,
    /// Holds found gone or past their validity; their guards are now lost.
    pub lost: usize,
    /// Calls that failed (Redis down, timeout); their holds are lost only once past validity.
    pub failed_batches: usize,
    /// Holds renewed on the primary but acknowledged by fewer replicas than their lock wants
    /// ([`Replicas`](crate::Replicas)): their validity was not extended.
    pub at_risk: usize,
    /// Wall time of the tick.
    pub elapsed: Duration,
}

pub(crate) fn spawn(inner: &Arc<Inner>) -> AbortOnDrop {
    AbortOnDrop(tokio::spawn(run(
        Arc::downgrade(inner),
        inner.watchdog.wake.clone(),
    )))
}

async fn run(weak: Weak<Inner>, wake: Arc<Notify>) {
    // The early renewals' task ends with this one (aborted with it) or with the client.
    let _early = AbortOnDrop(tokio::spawn(early::run(weak.clone())));
    // So does the loss notice's (`notice.rs`), when it is on.
    let _notice = AbortOnDrop(tokio::spawn(notice::run(weak.clone())));
    let mut last_tick = tokio::time::Instant::now();
    loop {
        let Some(inner) = weak.upgrade() else { return };
        let lease = inner.holds.shortest_watchdog_lease();
        let lease = lease.unwrap_or(inner.config.watchdog_lease);
        inner.watchdog.lease_ms.store(
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
    let expired = drop_expired(inner, &mut holds);
    // Paused (`testing`): nothing is renewed, so leases run out as with a stalled watchdog.
    if inner.watchdog.is_paused() {
        return RenewStats {
            locks: holds.len(),
            lost: expired,
            elapsed: started.elapsed(),
            ..Default::default()
        };
    }
    let (holds, wants) = pair_with_wants(inner, holds).await;
    // The lock family's holds renew alongside, each by its own script call (coalesced per
    // script by the node, `node/calls/family_calls.rs`).
    let family = inner.holds.family.renewals();
    let family_holds = family.len();
    let ((outcomes, round_trips, failed_batches), family) =
        futures_util::future::join(renew_by_want(inner, &holds, &wants), join_all(family)).await;
    let family_lost = family.into_iter().filter(|lost| *lost).count();
    let mut stats = RenewStats {
        locks: holds.len() + family_holds,
        round_trips,
        failed_batches,
        lost: expired + family_lost,
        ..Default::default()
    };
    let now = Instant::now();
    for ((hold, want), outcome) in holds.iter().zip(wants).zip(outcomes) {
        apply_outcome(inner, hold, want, outcome, started, now, &mut stats);
    }
    stats.elapsed = started.elapsed();
    stats
}

/// Drops the holds whose validity already ran out, telling their guards they are lost (renewing
/// one now would keep a key its holder has stopped trusting); gives how many were lost.
fn drop_expired(inner: &Inner, holds: &mut Vec<Arc<Hold>>) -> usize {
    let mut expired = 0;
    holds.retain(|hold| {
        let lost = hold.is_lost();
        if lost {
            let why = "its validity ran out before a renewal confirmed it";
            expired += lose(inner, hold, LostReason::RenewalFailed, why);
        }
        !lost
    });
    expired
}

/// Pairs each hold with the replica acknowledgement its lock wants; those that want one first.
async fn pair_with_wants(
    inner: &Inner,
    holds: Vec<Arc<Hold>>,
) -> (Vec<Arc<Hold>>, Vec<Option<WaitFor>>) {
    let mut wants = Vec::with_capacity(holds.len());
    for hold in &holds {
        wants.push(inner.node.wait_for(hold.replicas()).await);
    }
    let mut paired: Vec<(Arc<Hold>, Option<WaitFor>)> = holds.into_iter().zip(wants).collect();
    paired.sort_by_key(|(_, want)| want.is_none());
    paired.into_iter().unzip()
}

/// Renews holds paired by [`pair_with_wants`]: those whose lock asks for replica
/// acknowledgement in calls of their own with `WAIT` behind each (for the most any of them
/// wants), alongside the rest, which send no `WAIT`. Outcomes in the holds' order.
async fn renew_by_want(
    inner: &Arc<Inner>,
    holds: &[Arc<Hold>],
    wants: &[Option<WaitFor>],
) -> (Vec<Outcome>, usize, usize) {
    let acked = wants.iter().take_while(|want| want.is_some()).count();
    let wait = wants.iter().flatten().copied().reduce(WaitFor::max);
    let (with_wait, without) = holds.split_at(acked);
    let ((mut outcomes, trips, failed), (rest, more_trips, more_failed)) =
        futures_util::future::join(
            renew_holds(inner, with_wait, wait),
            renew_holds(inner, without, None),
        )
        .await;
    outcomes.extend(rest);
    (outcomes, trips + more_trips, failed + more_failed)
}

/// Applies one hold's renewal outcome to it, judged at `now`: renewed (its validity extended
/// only when enough replicas acknowledged), at risk, or lost; unknown, it waits for a later tick
/// until its validity runs out.
fn apply_outcome(
    inner: &Inner,
    hold: &Arc<Hold>,
    want: Option<WaitFor>,
    outcome: Outcome,
    started: Instant,
    now: Instant,
    stats: &mut RenewStats,
) {
    match outcome {
        Ok((true, acks)) => match short_of(want, acks) {
            None => {
                let left = hold.valid_until().saturating_duration_since(now);
                crate::telemetry::observe(crate::telemetry::LEASE_LEFT_AT_RENEWAL, left);
                hold.renewed(started, hold.lease_ms());
                hold.set_at_risk(false);
            }
            Some(_) if now >= hold.valid_until() => {
                let why = "too few replicas acknowledged its renewals within the lease's validity";
                stats.lost += lose(inner, hold, LostReason::RenewalFailed, why);
            }
            Some(short) => {
                stats.at_risk += 1;
                at_risk(hold, &short);
            }
        },
        Ok((false, _)) => {
            let why = "the key was gone at renewal";
            stats.lost += lose(inner, hold, LostReason::ServerLost, why);
        }
        Err(_) if now >= hold.valid_until() => {
            let why = "Redis unreachable past the lease's validity";
            stats.lost += lose(inner, hold, LostReason::RenewalFailed, why);
        }
        Err(_) => {}
    }
}

/// How a renewal answered `acks` falls short of what its hold wants, if it does.
fn short_of(want: Option<WaitFor>, acks: Option<Acks>) -> Option<Shortfall> {
    let (want, acks) = want.zip(acks)?;
    acks.short_of(want)
}

/// Tells of a hold renewed on the primary but not acknowledged by enough replicas: its validity
/// was not extended, so it is lost when that runs out unless a later renewal is acknowledged.
fn at_risk(hold: &Hold, short: &Shortfall) {
    metrics::counter!(crate::telemetry::REPLICAS_SHORT, "write" => "renew").increment(1);
    if !hold.set_at_risk(true) {
        tracing::warn!(lock = %hold.keys.name, owner = %hold.key.field, ?short, "lease at risk: too few replicas acknowledged its renewal; lost at its validity unless a later one is acknowledged");
    } else {
        tracing::debug!(lock = %hold.keys.name, ?short, "renewal again acknowledged by too few replicas");
    }
}

/// Per hold: renewed or not (with what `WAIT` answered), or the error that left it unknown;
/// the script calls; the calls that failed.
async fn renew_holds(
    inner: &Arc<Inner>,
    holds: &[Arc<Hold>],
    wait: Option<WaitFor>,
) -> (Vec<Outcome>, usize, usize) {
    if holds.is_empty() {
        return (Vec::new(), 0, 0);
    }
    if inner.node.is_cluster() {
        renew_on_cluster(inner, holds, wait).await
    } else {
        renew_on_server(inner, holds, wait).await
    }
}

/// One hold's renewal: renewed or not, and what `WAIT` answered when one was asked for.
type Outcome = Result<(bool, Option<Acks>)>;

/// [`renew_holds`] on one server: calls of up to [`RENEWAL_BATCH`] locks, sent concurrently.
async fn renew_on_server(
    inner: &Arc<Inner>,
    holds: &[Arc<Hold>],
    wait: Option<WaitFor>,
) -> (Vec<Outcome>, usize, usize) {
    let batches: Vec<&[Arc<Hold>]> = holds.chunks(RENEWAL_BATCH).collect();
    let calls = batches.iter().map(|batch| {
        let requests: Vec<Renewal<'_>> = batch.iter().map(|h| renewal(h)).collect();
        async move { inner.node.renew_acked(&requests, wait).await }
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
/// (`node/calls/renew_by_node.rs`).
async fn renew_on_cluster(
    inner: &Arc<Inner>,
    holds: &[Arc<Hold>],
    wait: Option<WaitFor>,
) -> (Vec<Outcome>, usize, usize) {
    let requests: Vec<Renewal<'_>> = holds.iter().map(|h| renewal(h)).collect();
    let round = inner.node.renew_by_node(&requests, wait).await;
    let failed = round.flags.iter().filter(|f| f.is_err()).count();
    if let Some(Err(e)) = round.flags.iter().find(|f| f.is_err()) {
        tracing::warn!(error = %e, locks = failed, "watchdog renewal failed; will retry");
    }
    (round.flags, round.calls, usize::from(failed > 0))
}

fn renewal(hold: &Hold) -> Renewal<'_> {
    hold.renewal(hold.lease_ms())
}

/// Detaches `hold` and tells its guard it is lost: 1, or 0 when it was released meanwhile.
pub(crate) fn lose(inner: &Inner, hold: &Arc<Hold>, reason: LostReason, why: &str) -> usize {
    // A hold released while this round was in flight comes back "not renewed" too; it is not
    // lost (no guard is left to tell), so it must not be counted or logged as a lost lease.
    if !inner.holds.detach(hold) {
        return 0;
    }
    // The lock may be free now: this client's head waiter, which may be napping because the
    // lock was handed to this hold (`local_queue.rs`), must look again.
    inner.local_queues.released(&hold.keys.hash);
    #[cfg(feature = "testing")]
    if reason == LostReason::ServerLost {
        audit::server_reported_loss(inner, hold.presence());
    }
    // A hold known gone is valid no longer: its validity ends now. Only once it is detached
    // here: a hold released meanwhile (its own release deleted the key the notice saw go) must
    // not lapse under its release, which would then answer `LeaseLost`.
    if reason == LostReason::ServerLost {
        hold.cap_validity(std::time::Instant::now());
    }
    // `is_lost` may have marked it already (its validity ran out); it still counts once here.
    hold.mark_lost(reason, why);
    1
}
