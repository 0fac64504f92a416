//! Renewals due before the watchdog's next tick: a hold granted from the server's queue
//! (`lua/queue_lock.lua`) lives only the claim lease on the server until its own lease takes over,
//! so it is renewed a third of the way into the claim lease.
//!
//! One task per client sleeps until the earliest renewal on the schedule
//! (`hold/early_renewals.rs`) is due, and sends the due ones in a round of their own, beside
//! the watchdog's ticks: a slow tick or a slow server never holds a grant's renewal back. It
//! used to be a task and a timer per grant, which cost W7 9–14% of its acquisitions per second
//! (4 and 8 processes, one CPU; `make bench`), although nearly every such hold is released long
//! before it is due.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use super::{lose, renewal};
use crate::hold::Hold;
use crate::shared::Inner;
use crate::telemetry::LostReason;

/// How soon a renewal that failed (and whose hold is still valid) is tried again.
const RETRY: Duration = Duration::from_millis(50);

/// The early renewals' task: until the client is gone, sleeps until the earliest renewal is
/// due (or one is scheduled sooner), then sends the due ones in the background.
pub(super) async fn run(weak: Weak<Inner>) {
    loop {
        let Some(inner) = weak.upgrade() else { return };
        let (next, sooner) = inner.holds.next_early();
        // Sleep holding only the notification, not the client: a dropped client must be able
        // to end this task.
        drop(inner);
        let due = async {
            match next {
                Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            // Scheduled sooner than we sleep: look again.
            _ = sooner.notified() => continue,
            _ = due => {}
        }
        let Some(inner) = weak.upgrade() else { return };
        // Those due a little later too, renewed a little early, so a steady stream of
        // hand-overs wakes this task a few times per claim lease rather than once per grant.
        let slack = inner.config.claim_lease / 6;
        let due = inner.holds.take_early(Instant::now() + slack);
        let round = join_all(
            due.iter()
                .map(|hold| renew_one(Arc::downgrade(&inner), Arc::downgrade(hold))),
        );
        // Tracked, so `Client::shutdown` waits for it.
        drop(inner.background.spawn(async move {
            round.await;
        }));
    }
}

/// Renews `hold` if it is still held, trying again while it is valid.
async fn renew_one(weak: Weak<Inner>, hold: Weak<Hold>) {
    // Bounded: each round waits, and the hold's validity ends the rounds.
    for _ in 0..1000 {
        let (Some(inner), Some(hold)) = (weak.upgrade(), hold.upgrade()) else {
            return;
        };
        let current = inner.holds.get(&hold.key);
        if !current.is_some_and(|c| Arc::ptr_eq(&c, &hold)) || hold.is_lost() {
            return;
        }
        // Paused (`testing`): the claim lease runs out, as with a stalled watchdog.
        if inner.watchdog.is_paused() {
            return;
        }
        let started = Instant::now();
        // One call per hold, to its own shard: a slow node delays only its own holds.
        match inner.node.renew(&[renewal(&hold)]).await.as_deref() {
            Ok([true]) => {
                hold.renewed(started, hold.lease_ms());
                return;
            }
            Ok(_) => {
                let why = "the key was gone at renewal";
                lose(&inner, &hold, LostReason::ServerLost, why);
                return;
            }
            Err(_) if Instant::now() >= hold.valid_until() => {
                let why = "Redis unreachable past the lease's validity";
                lose(&inner, &hold, LostReason::RenewalFailed, why);
                return;
            }
            Err(e) => {
                tracing::debug!(lock = %hold.keys.name, error = %e, "early renewal failed; trying again");
            }
        }
        drop(inner);
        tokio::time::sleep(RETRY).await;
    }
}
