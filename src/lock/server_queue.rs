//! The server's queue as this client's waiters use it: the terms an attempt queues with, a
//! grant taken from its message, and the channel a waiter listens on.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::{Replicas, WaitBy};
use crate::error::Result;
use crate::guard::LockGuard;
use crate::hold::Grant;
use crate::keys::HoldKey;
use crate::node::QueueTerms;
use crate::pubsub::Subscription;
use crate::terms::Lease;

use super::{Lock, grant};

/// How this client's waiters queue on the server (`queue_place.rs`), for an attempt.
pub(super) fn terms(lock: &Lock, lease: Lease) -> QueueTerms {
    let inner = &lock.client.inner;
    let config = &inner.config;
    let claim_ms = config.claim_lease.as_millis() as u64;
    let slack_ms = config.queue_slack().as_millis() as u64;
    // A fixed lease is the grant's whole lease: the waiter holds the lock from the grant's
    // message on, for its lease, with no attempt to claim it (a claim lease the waiter
    // lengthened itself cost a third script call per hand-over). A waiter that died while
    // queued then keeps a granted lock for its lease, as a holder that died does. Not for a
    // client that polls, whose next look may come later than that lease's end: it claims
    // the grant with its next attempt, within the claim lease.
    let claim_ms = match (lease, config.wait_by) {
        (Lease::Fixed(_), WaitBy::PubSub) => lease.ms(),
        _ => claim_ms,
    };
    let nonce = inner.next_nonce();
    QueueTerms {
        slack_ms,
        claim_ms,
        nonce,
    }
}

/// The lock granted to us by a release, from its message (`lua/queue_lock.lua`): the guard, its
/// validity counted from `sent`, when the attempt that queued us went out (the grant came
/// after the server queued us), for the grant's claim lease; the watchdog lengthens that to
/// the lease soon after. `None` when the message cannot be trusted alone: the claim lease
/// is half spent, the lock wants replica acknowledgement (a grant has no `WAIT` behind it),
/// a fixed lease is longer than the grant's (a client that polls), or the grant came without
/// the token a fenced lock needs. The next attempt then claims the grant (count 1, the lease,
/// a token).
pub(super) fn grant_from_message(
    lock: &Lock,
    key: &HoldKey,
    lease: Lease,
    terms: QueueTerms,
    sent: Instant,
    token: Option<u64>,
) -> Result<Option<LockGuard>> {
    let inner = &lock.client.inner;
    let claim = Duration::from_millis(terms.claim_ms);
    let whole = match lease {
        Lease::Fixed(_) => lease.ms() <= terms.claim_ms,
        Lease::Watchdog(_) => true,
    };
    if !whole
        || lock.replicas_wanted() != Replicas::Off
        || (lock.fenced && token.is_none())
        || sent.elapsed() >= claim / 2
    {
        return Ok(None);
    }
    let (granted, token) = (Grant::Counted(1), token.unwrap_or(0));
    let guard = grant::guard(lock, key, lease, granted, token, sent)?;
    let hold = guard.hold();
    hold.cap_validity(sent + claim.saturating_sub(inner.config.drift(claim)));
    if let Lease::Watchdog(_) = lease {
        inner.holds.renew_early(hold, sent + claim / 3);
    }
    Ok(Some(guard))
}

/// Listens for the grants of this lock to this client's queued waiters (`lua/queue_lock.lua`),
/// on the client's own channel of the lock: other clients' grants and releases never wake it.
pub(super) async fn subscribe(lock: &Lock, field: &Arc<str>) -> Result<Subscription> {
    let channel = lock.grant_channel();
    let subscription = (lock.client.inner.subscriber)
        .subscribe(channel, false)
        .await?;
    Ok(subscription.grants_to(field.clone()))
}
