//! The engine under `MultiLock` and `RedLock`: one cancel-safe acquisition attempt on one member
//! lock, with an optional time limit, and the bookkeeping that turns a grant into a guard.
//!
//! A grant becomes a `LockGuard` (registered with its client like any single-lock grant) the
//! moment the reply is read, so a caller that is cancelled while other members are still in
//! flight drops guards, and dropped guards release in the background. A request whose reply never
//! came in time may still have been applied by the server; it is finished (and undone) in the
//! background.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;
use futures_util::future::join_all;

use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::keys::{HoldKey, LockKeys};
use crate::lock::Lock;
use crate::node::AcquireCall;
use crate::scripts::Acquire;
use crate::shared::{Client, Inner};
use crate::task::FinishOnDrop;
use crate::terms::Lease;
use crate::turns::{Acquiring, Releasing, Turn};

/// What one attempt on one member came to.
pub(crate) enum Outcome {
    Granted(LockGuard),
    HeldElsewhere {
        ttl: Option<Duration>,
    },
    Failed(Error),
    /// No reply within the attempt's limit; the request is finished and undone in the background.
    TimedOut,
}

/// One acquisition attempt on `lock` alone; see [`attempt_batch`].
pub(crate) async fn attempt_one(lock: &Lock, lease: Lease, limit: Option<Duration>) -> Outcome {
    let batch = [(lock.clone(), lease)];
    let mut outcomes = attempt_batch(&lock.client, &batch, limit).await;
    outcomes.pop().unwrap_or(Outcome::TimedOut)
}

/// A batch's replies, one per lock, or the error that left them all unknown.
type Replies = Result<Vec<Result<Acquire>>>;

/// One lock of a batch, as sent.
struct Planned {
    keys: Arc<LockKeys>,
    /// The lock and the owner acquiring it.
    key: HoldKey,
    lease_ms: u64,
    reentrant: bool,
    fenced: bool,
    delay_ms: u64,
    /// The owner held nothing here before: an unanswered request can be undone blindly.
    fresh: bool,
}

/// One acquisition attempt on every lock of `batch`, all of which belong to `client`, in one
/// round trip. `limit` bounds the wait for the owners' turns and the reply (the client's own
/// timeout applies too).
/// One outcome per lock, in order. A refused member leaves nothing on the server: members
/// of a MultiLock that wait do so in their locks' queues, one after another (`multilock/`).
///
/// The acquires travel as one pipeline, so they reach the server back to back: of several
/// callers racing for the same locks of one server, the first batch to arrive takes all of
/// them instead of each caller taking a few and all of them failing.
pub(crate) async fn attempt_batch(
    client: &Client,
    batch: &[(Lock, Lease)],
    limit: Option<Duration>,
) -> Vec<Outcome> {
    let failed =
        |e: Error| -> Vec<Outcome> { batch.iter().map(|_| Outcome::Failed(e.clone())).collect() };
    if let Err(e) = check_batch(client, batch) {
        return failed(e);
    }
    let plan = plan_batch(&client.inner, batch);
    let timed_out = || batch.iter().map(|_| Outcome::TimedOut).collect();
    // `limit` bounds the wait for the owners' turns too: an earlier operation of theirs may
    // be waiting for a frozen server (`turns.rs`).
    let deadline = limit.map(|limit| tokio::time::Instant::now() + limit);
    let turns = wait_for_turns(&client.inner, batch, &plan);
    tokio::pin!(turns);
    // Most turns are free at once: no timer then.
    let turns = match ((&mut turns).now_or_never(), deadline) {
        (Some(turns), _) => turns,
        (None, Some(deadline)) => match tokio::time::timeout_at(deadline, turns).await {
            Ok(turns) => turns,
            Err(_) => return timed_out(),
        },
        (None, None) => turns.await,
    };
    // Both held until the grants are registered.
    let (_acquiring, _turns) = match turns {
        Ok(turns) => turns,
        Err(e) => return failed(e),
    };
    let started = Instant::now();
    let limit = deadline.map(|deadline| deadline - tokio::time::Instant::now().min(deadline));
    if limit == Some(Duration::ZERO) {
        // Spent on the turns: nothing is sent (it would only be undone).
        return timed_out();
    }
    match send_batch(client, &plan, limit).await {
        Some(Ok(replies)) => register_grants(batch, &plan, replies, started),
        Some(Err(e)) => failed(duplicate(&e)),
        None => timed_out(),
    }
}

/// Why no lock of the batch may be attempted: the client is shut down, or a lock's lock-delay
/// is out of range.
fn check_batch(client: &Client, batch: &[(Lock, Lease)]) -> Result<()> {
    client.inner.check_open()?;
    batch
        .iter()
        .try_for_each(|(lock, _)| lock.check_lock_delay())
}

/// Each lock of the batch as it will be sent.
fn plan_batch(inner: &Inner, batch: &[(Lock, Lease)]) -> Arc<[Planned]> {
    batch
        .iter()
        .map(|(lock, lease)| {
            let key = HoldKey::new(&lock.keys.hash, &lock.field());
            Planned {
                // For a re-entry a blind release could take away the earlier hold, so it is
                // not sent (the lease then bounds the stray count).
                fresh: inner.holds.get(&key).is_none(),
                keys: lock.keys.clone(),
                key,
                lease_ms: lease.ms(),
                reentrant: lock.reentrant,
                fenced: lock.fenced,
                delay_ms: lock.delay_ms(),
            }
        })
        .collect()
}

/// As for a single lock (`turns.rs`): waits for this owner's releases of each lock in flight,
/// and takes each (lock, owner)'s turn, for the caller to hold until the grants are registered.
/// Turns are taken in key order, each once, so two batches of one owner cannot wait for each
/// other.
async fn wait_for_turns(
    inner: &Inner,
    batch: &[(Lock, Lease)],
    plan: &[Planned],
) -> Result<(Vec<Acquiring>, Vec<Turn>)> {
    let mut order: Vec<&Planned> = plan.iter().collect();
    order.sort_by(|a, b| (&a.key.hash, &a.key.field).cmp(&(&b.key.hash, &b.key.field)));
    order.dedup_by(|a, b| a.key == b.key);
    let acquiring: Vec<_> = order.iter().map(|p| inner.turns.start(&p.key)).collect();
    // As `Lock::acquire` does: an implicit owner's acquisitions of a lock in progress at once
    // are concurrent for certain, and refused before anything is sent.
    let overlapping = order.iter().zip(&acquiring).find(|(_, a)| a.overlapping());
    if let Some((planned, _)) = overlapping {
        let owner = batch
            .iter()
            .map(|(lock, _)| lock.owner())
            .find(|owner| owner.is_implicit());
        if let Some(owner) = owner {
            return Err(Error::ConcurrentAcquisition {
                name: planned.keys.name.to_string(),
                owner: owner.to_string(),
            });
        }
    }
    let mut turns = Vec::with_capacity(acquiring.len());
    for a in &acquiring {
        a.settled().await;
        turns.push(a.turn().await);
    }
    Ok((acquiring, turns))
}

/// Sends the batch and waits for its replies, `None` past `limit`. Abandoned (by the limit or
/// a cancelled caller), the request is finished and undone in the background; failed with an
/// unknown outcome, what it may have taken is undone there too.
async fn send_batch(
    client: &Client,
    plan: &Arc<[Planned]>,
    limit: Option<Duration>,
) -> Option<Replies> {
    let request = {
        let (client, plan) = (client.clone(), plan.clone());
        async move { acquire_pipelined(&client, &plan).await }
    };
    let cleanup = {
        let (client, plan) = (client.clone(), plan.clone());
        move |outcome: Replies| async move {
            undo_batch(&client, &plan, &outcome).await;
        }
    };
    // Finished in the background, the request and its undo count as an operation in flight
    // of each member's owner from the moment the caller stops waiting (`turns.rs`): the
    // owner's next acquisition must not reach a server between a grant and its undo.
    let abandoned = {
        let (client, plan) = (client.clone(), plan.clone());
        move || in_flight(&client, &plan)
    };
    let call = FinishOnDrop::new(request, cleanup)
        .tracked(&client.inner.background)
        .keeping_while_abandoned(abandoned);
    let reply = match limit {
        None => call.await,
        Some(limit) => tokio::time::timeout(limit, call).await.ok()?,
    };
    if let Err(e) = &reply
        && outcome_unknown(e)
        && plan.iter().any(|p| p.fresh)
    {
        let (client, plan) = (client.clone(), plan.clone());
        // Tracked like every other give-back, so `Client::shutdown` waits for it; in flight
        // for the owners from now, as above.
        let releasing = in_flight(&client, &plan);
        let background = client.inner.background.clone();
        background.spawn(async move {
            let _ = undo_unanswered(&client, &plan).await;
            drop(releasing);
        });
    }
    Some(reply)
}

/// Registers an operation in flight for the owner of each lock of `plan` (`turns.rs`), until
/// what this returns is dropped.
fn in_flight(client: &Client, plan: &[Planned]) -> Vec<Releasing> {
    let turns = &client.inner.turns;
    plan.iter().map(|p| turns.start_release(&p.key)).collect()
}

/// Each member's outcome from its reply: a grant becomes a guard, registered at once.
fn register_grants(
    batch: &[(Lock, Lease)],
    plan: &[Planned],
    replies: Vec<Result<Acquire>>,
    started: Instant,
) -> Vec<Outcome> {
    replies
        .into_iter()
        .zip(batch.iter().zip(plan.iter()))
        .map(|(reply, ((lock, lease), p))| match reply {
            Ok(Acquire::Acquired { count, token }) => {
                match crate::lock::register(
                    lock,
                    &p.key,
                    *lease,
                    crate::hold::Grant::Counted(count),
                    token,
                    started,
                ) {
                    Ok(guard) => Outcome::Granted(guard),
                    Err(e) => Outcome::Failed(e),
                }
            }
            Ok(Acquire::HeldElsewhere { ttl }) => Outcome::HeldElsewhere { ttl },
            Ok(Acquire::AlreadyHeld) => Outcome::Failed(Error::WouldDeadlock {
                name: lock.keys.name.to_string(),
            }),
            Err(e) => Outcome::Failed(e),
        })
        .collect()
}

/// Sends the batch as one pipelined node call (see [`Node::acquire_pipelined`]), once more
/// after its connection dropped, as a single lock's acquisition is. Each request may have
/// counted, so the members the owner holds nothing of are undone at once (a release of one
/// hold each, harmless where nothing was taken), in order on the new connection before
/// anything else of this batch; the batch is sent again only when the owner held none of them
/// and every undo was answered. Otherwise the caller hears the error: a member the owner held
/// before is not undone (a blind release could take that earlier hold), and the lease bounds
/// what its lost request may have counted.
///
/// [`Node::acquire_pipelined`]: crate::node::Node::acquire_pipelined
async fn acquire_pipelined(client: &Client, plan: &[Planned]) -> Replies {
    let mut again = true;
    loop {
        let replies = send_pipelined(client, plan).await;
        let Err(Error::Redis { source, .. }) = &replies else {
            return replies;
        };
        // A refused connection sent nothing (redis-rs counts it as dropped too).
        if !source.is_connection_dropped() || source.is_connection_refusal() {
            return replies;
        }
        let undone = undo_unanswered(client, plan).await;
        if !(again && undone && plan.iter().all(|p| held_nothing(client, p))) {
            return replies;
        }
        again = false;
    }
}

/// Whether the owner holds nothing of `p`'s lock, before and now (a hand-over from a release of
/// this client may have given it some meanwhile).
fn held_nothing(client: &Client, p: &Planned) -> bool {
    p.fresh && client.inner.holds.get(&p.key).is_none()
}

/// The batch as one pipelined node call, sent once.
async fn send_pipelined(client: &Client, plan: &[Planned]) -> Replies {
    let calls: Vec<AcquireCall<'_>> = plan
        .iter()
        .map(|p| AcquireCall {
            keys: &p.keys,
            field: &p.key.field,
            lease_ms: p.lease_ms,
            reentrant: p.reentrant,
            held: !p.fresh,
            fenced: p.fenced,
            delay_ms: p.delay_ms,
        })
        .collect();
    client.inner.node.acquire_pipelined(&calls).await
}

/// A batch-wide error, once per member.
fn duplicate(e: &Error) -> Error {
    match e {
        Error::Timeout { operation, timeout } => Error::Timeout {
            operation,
            timeout: *timeout,
        },
        Error::Redis { operation, source } => Error::Redis {
            operation,
            source: source.clone(),
        },
        Error::Shutdown => Error::Shutdown,
        other => Error::Protocol {
            script: "acquire",
            reply: other.to_string(),
        },
    }
}

/// Gives back what an abandoned batch took: every grant, and when the whole batch went
/// unanswered, every lock the owner did not hold before.
async fn undo_batch(client: &Client, plan: &[Planned], outcome: &Replies) {
    match outcome {
        Ok(replies) => {
            let granted = replies
                .iter()
                .zip(plan)
                .filter(|(reply, _)| matches!(reply, Ok(Acquire::Acquired { .. })));
            join_all(granted.map(|(_, p)| undo(client, p))).await;
        }
        Err(e) if outcome_unknown(e) => {
            let _ = undo_unanswered(client, plan).await;
        }
        Err(_) => {}
    }
}

/// Undoes the members of a request that went unanswered which the owner holds nothing of, then
/// and now (see [`held_nothing`]); whether every undo was answered.
async fn undo_unanswered(client: &Client, plan: &[Planned]) -> bool {
    let unheld = plan.iter().filter(|p| held_nothing(client, p));
    let undone = join_all(unheld.map(|p| undo(client, p))).await;
    undone.into_iter().all(|undone| undone)
}

/// Whether the server may have applied a request that failed on our side, and nothing undid it
/// yet: a timeout, or a connection that broke after the request may have been written (not a
/// dropped one: [`acquire_pipelined`] undid that one where it happened).
fn outcome_unknown(e: &Error) -> bool {
    match e {
        Error::Timeout { .. } => true,
        Error::Redis { source, .. } => {
            e.is_unavailable() && !source.is_connection_refusal() && !source.is_connection_dropped()
        }
        _ => false,
    }
}

/// Gives back what an abandoned or failed request may have taken; whether the give-back was
/// answered. The release goes over the same connection after the request, so the server applies
/// it after the acquire even when both wait behind a paused server.
async fn undo(client: &Client, p: &Planned) -> bool {
    match crate::release::give_back(client, &p.keys, &p.key.field, p.lease_ms, 1).await {
        Ok(_) => {
            tracing::debug!(lock = %p.keys.name, "gave back an abandoned acquisition");
            true
        }
        Err(e) => {
            tracing::warn!(lock = %p.keys.name, error = %e, "could not give back an abandoned acquisition; it expires with its lease");
            false
        }
    }
}

/// Releases members concurrently; one result per member, in order. Every member is attempted
/// whatever happens to the others.
pub(crate) async fn release_all(members: Vec<LockGuard>) -> Vec<Result<()>> {
    join_all(members.into_iter().map(LockGuard::unlock)).await
}

/// Gives back a failed round's grants, logging (not returning) what could not be released: the
/// caller's error is about the acquisition, and the leases free whatever is left. With a
/// `limit` it waits no longer (a node that stops answering now must not hold up the caller);
/// releases still running then finish in the background.
pub(crate) async fn give_back(
    members: impl IntoIterator<Item = LockGuard>,
    limit: Option<Duration>,
) {
    let members: Vec<LockGuard> = members.into_iter().collect();
    let names: Vec<Arc<str>> = members.iter().map(|h| h.hold().keys.name.clone()).collect();
    let released = release_all(members);
    let results = match limit {
        None => released.await,
        Some(limit) => match tokio::time::timeout(limit, released).await {
            Ok(results) => results,
            Err(_) => {
                tracing::debug!(
                    "give-back still running after {limit:?}; finishing in the background"
                );
                return;
            }
        },
    };
    for (name, result) in names.iter().zip(results) {
        if let Err(e) = result {
            tracing::warn!(lock = %name, error = %e, "could not give back a partial grant; it expires with its lease");
        }
    }
}

/// A uniformly random duration in `[low, high]` (whole microseconds).
pub(crate) fn jitter(low: Duration, high: Duration) -> Duration {
    let (low, high) = (low.as_micros() as u64, high.as_micros() as u64);
    if high <= low {
        return Duration::from_micros(low);
    }
    Duration::from_micros(rand::random_range(low..=high))
}
