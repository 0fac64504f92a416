//! Renewals due before the watchdog's next tick: a hold granted from the server's queue
//! (`lua/queue.lua`) lives only the claim lease on the server until its own lease takes over,
//! so it is renewed a third of the way into the claim lease, by the watchdog's task.
//!
//! A schedule (`hold/early_renewals.rs`) rather than a task per grant: a task (with its timer)
//! per hand-over cost W7 9–14% of its acquisitions per second (4 and 8 processes, one CPU;
//! `make bench`), although nearly every such hold is released long before it is due.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio::time::Instant as TokioInstant;

use super::{lose, renew_holds};
use crate::hold::Hold;
use crate::shared::Inner;
use crate::telemetry::LostReason;

/// How soon a renewal that failed (and whose hold is still valid) is tried again.
const RETRY: Duration = Duration::from_millis(50);

/// Renews `hold` at `at`, ahead of the watchdog's schedule (see the module's doc). A hold
/// released by then costs nothing; a failed call is tried again while the hold is valid.
pub(crate) fn renew_early(inner: &Inner, hold: &Arc<Hold>, at: Instant) {
    let early = &inner.early_renewals;
    if early.schedule(hold, at) {
        early.sooner().notify_one();
    }
}

/// Sleeps until the watchdog's tick is `due`, renewing the early renewals that fall due
/// meanwhile. True when woken before by a new hold (the period may be shorter now).
pub(super) async fn wait_for_tick(weak: &Weak<Inner>, wake: &Notify, due: TokioInstant) -> bool {
    // Ends at `due`: each round sleeps until the earliest renewal or the tick (a renewal
    // scheduled sooner than that wakes it once: only a new earliest one does), and the renewals
    // due are taken off the schedule.
    loop {
        let Some(inner) = weak.upgrade() else {
            tokio::time::sleep_until(due).await;
            return false;
        };
        let early = inner.early_renewals.next().map(TokioInstant::from_std);
        let wake_at = early.map_or(due, |e| e.min(due));
        // Sleep holding only the notifications, not the client (see `run`).
        let sooner = inner.early_renewals.sooner();
        drop(inner);
        tokio::select! {
            _ = wake.notified() => return true,
            // A renewal due sooner than we sleep: look again.
            _ = sooner.notified() => continue,
            _ = tokio::time::sleep_until(wake_at) => {}
        }
        if let Some(inner) = weak.upgrade() {
            renew_due(&inner).await;
        }
        if TokioInstant::now() >= due {
            return false;
        }
    }
}

/// Renews the holds due now that are still held (in the calls the watchdog's ticks use).
async fn renew_due(inner: &Arc<Inner>) {
    // Those due a little later too, renewed a little early, so a steady stream of hand-overs
    // wakes the task a few times per claim lease rather than once per grant.
    let slack = inner.config.claim_lease / 6;
    let mut holds = inner.early_renewals.take_due(Instant::now() + slack);
    holds.retain(|hold| {
        let current = inner.holds.get(&hold.keys.hash, &hold.field);
        current.is_some_and(|c| Arc::ptr_eq(&c, hold)) && !hold.is_lost()
    });
    // Paused (`testing`): the claim lease runs out, as with a stalled watchdog.
    if holds.is_empty()
        || inner
            .renewals_paused
            .load(std::sync::atomic::Ordering::Acquire)
            > 0
    {
        return;
    }
    let started = Instant::now();
    // A grant from the queue never asks for replica acknowledgement (`Lock::hold_from_grant`).
    let (outcomes, _, _) = renew_holds(inner, &holds, None).await;
    for (hold, outcome) in holds.iter().zip(outcomes) {
        match outcome {
            Ok((true, _)) => hold.renewed(started),
            Ok((false, _)) => {
                let why = "the key was gone at renewal";
                lose(inner, hold, LostReason::ServerLost, why);
            }
            Err(_) if Instant::now() >= hold.valid_until() => {
                let why = "Redis unreachable past the lease's validity";
                lose(inner, hold, LostReason::RenewalFailed, why);
            }
            Err(e) => {
                tracing::debug!(lock = %hold.keys.name, error = %e, "early renewal failed; trying again");
                inner.early_renewals.schedule(hold, Instant::now() + RETRY);
            }
        }
    }
}
