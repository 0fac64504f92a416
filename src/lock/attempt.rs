//! One cancel-safe acquisition attempt: the request, its undo and retry after a dropped
//! connection, its completion in the background when the caller stops waiting, and the replica
//! acknowledgement it may ask for.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use futures_util::future::BoxFuture;

use crate::config::Replicas;
use crate::error::{Error, Result};
use crate::keys::{HoldKey, LockKeys};
use crate::node::{Acks, AcquireTerms, Latch, QueueTerms, ReleaseArgs, WaitFor};
use crate::queue_place::withdraw_entry;
use crate::release::give_back;
use crate::scripts::{Acquire, Release};
use crate::shared::Client;
use crate::task::FinishOnDrop;
use crate::telemetry;
use crate::turns::Releasing;

use super::Lock;

/// Sends one acquire. If this future is dropped while the request is in flight, the request
/// is finished in the background, and a grant is given back or a queue entry withdrawn, so
/// cancellation never leaves a hold or an entry behind.
///
/// A request that gets no answer within the client timeout is abandoned the same way: it
/// keeps waiting for its reply in the background (as long as a grant could live), and only
/// a grant seen in that reply is given back. This used to release blindly after any
/// "unavailable" error, even one whose request was never sent (refused, or waiting for a
/// reconnect), and with retries: the release could land after this owner's next, real
/// acquisition and take it away (tests/faults.rs, `failed_attempts_during_an_outage_...`).
/// When the connection drops the outcome stays unknown, and the lease frees a grant.
///
/// With `replicas` asking for acknowledgement, `WAIT` follows the script on its connection;
/// too few acknowledgements give the grant back and fail the attempt (see [`acknowledged`]).
/// Answers with the queue terms of the request whose reply it is: `queue`, or after a dropped
/// connection the retry's, which kept the place under a nonce of its own. (A caller that
/// stopped waiting, whose retry goes unqueued, hears nothing.)
pub(super) async fn send(
    lock: &Lock,
    key: &HoldKey,
    lease_ms: u64,
    reentry: bool,
    replicas: Replicas,
    queue: Option<QueueTerms>,
) -> Result<(Acquire, Option<QueueTerms>)> {
    let client = &lock.client;
    let wait = client.inner.node.wait_for(replicas).await;
    // The server holds the reply up to the WAIT timeout.
    let timeout = client.inner.config.timeout + wait.map_or(Duration::ZERO, |w| w.timeout);
    let lease = Duration::from_millis(lease_ms);
    // On tokio's clock, as the timers that bound the request.
    let sent = Instant::now();
    // A reply later than the lease carries nothing to give back.
    let patience = lease.max(timeout);
    let requeued = Arc::new(Mutex::new(None));
    let abandoned_flag = Arc::new(AtomicBool::new(false));
    let request = Request {
        client: client.clone(),
        keys: lock.keys.clone(),
        key: key.clone(),
        terms: AcquireTerms {
            lease_ms,
            reentrant: lock.reentrant,
            held: reentry,
            fenced: lock.fenced,
            delay_ms: lock.delay_ms(),
            queue,
            strict: lock.strict,
        },
        patience,
        wait,
        requeued: requeued.clone(),
        abandoned: abandoned_flag.clone(),
    };
    let abandoned = request.clone();
    // Should the caller stop waiting, the request (its undo and withdrawal after a dropped
    // connection included) and a give-back or a withdrawal finish in the background: they
    // count as an operation of this owner in flight until then (`turns.rs`), so the owner's
    // next acquisition waits for them and takes no grant from a message meanwhile.
    let in_flight = in_flight(client, key);
    let in_flight = move || {
        abandoned_flag.store(true, Ordering::Release);
        in_flight()
    };
    // Erased (boxed it is anyway, to finish in the background): the compiler's `Send` proofs
    // of every future that awaits an acquisition then stop here, well inside the recursion
    // limit, whatever the application's futures around them.
    let run: BoxFuture<'static, _> = Box::pin(request.run());
    // The request arms no timer of its own: the caller's timeout bounds it here, and
    // `patience` once the caller stops waiting.
    let call = FinishOnDrop::pinned(run, move |outcome| abandoned.undo_abandoned(outcome, sent))
        .tracked(&client.inner.background)
        .keeping_while_abandoned(in_flight)
        .expiring(sent, patience, |patience| {
            Err(Error::Timeout {
                operation: "acquire",
                timeout: patience,
            })
        });
    match tokio::time::timeout(timeout, call).await {
        Ok(outcome) => outcome.map(|acquire| {
            let answered = match *requeued.lock() {
                None => queue,
                Some(nonce) => queue.map(|terms| QueueTerms { nonce, ..terms }),
            };
            (acquire, answered)
        }),
        Err(_) => Err(Error::Timeout {
            operation: "acquire",
            timeout,
        }),
    }
}

/// One acquire as sent, owned, so that it can finish in the background.
#[derive(Clone)]
struct Request {
    client: Client,
    keys: Arc<LockKeys>,
    /// The lock's hash and the owner's field.
    key: HoldKey,
    terms: AcquireTerms,
    /// How long the request may wait for its reply, once its caller stopped waiting.
    patience: Duration,
    wait: Option<WaitFor>,
    /// The nonce of the queued retry that kept the place after a dropped connection, if one
    /// answered.
    requeued: Arc<Mutex<Option<u64>>>,
    /// Set when the caller stops waiting (its place is then withdrawn).
    abandoned: Arc<AtomicBool>,
}

impl Request {
    /// The request, retried once after a dropped connection, and its acknowledgement judged.
    async fn run(self) -> Result<Acquire> {
        let node = &self.client.inner.node;
        let (keys, field) = (&self.keys, &self.key.field);
        let outcome = node
            .acquire(keys, field, self.terms, self.patience, self.wait)
            .await;
        let outcome = match outcome {
            // The connection manager notices a dead connection (server restart, killed
            // connection) only when a command fails on it; try once more on the new one.
            Err(Error::Redis { source, .. }) if source.is_connection_dropped() => {
                self.after_dropped_connection(source).await
            }
            outcome => outcome,
        };
        let lease_ms = self.terms.lease_ms;
        acknowledged(&self.client, keys, &self.key, lease_ms, self.wait, outcome?).await
    }

    /// The request once more, after its connection dropped with the outcome unknown: its
    /// possible grant undone first; a caller that still waits keeps its place in the queue
    /// (the retry refreshes it), one that stopped has its possible entry withdrawn.
    async fn after_dropped_connection(
        &self,
        source: redis::RedisError,
    ) -> Result<(Acquire, Option<Acks>)> {
        // We hold it already, or another task of this owner does (a shared `Owner`, taken after
        // this acquisition started): a retry could count one grant twice, and the undo could
        // release that task's hold. The owner's turn, held until this request's grant is
        // registered, keeps other acquisitions from registering meanwhile; a hand-over from a
        // release of this client to another task of the owner does not take it.
        if self.terms.held || self.client.inner.holds.get(&self.key).is_some() {
            return Err(Error::Redis {
                operation: "acquire",
                source,
            });
        }
        let node = &self.client.inner.node;
        // The first request may have taken the lock: undone. It may also have been granted the
        // lock from the queue, unclaimed (count 0): for a caller that still waits, that grant
        // stays for the retry to claim, so the waiter keeps its turn. No message naming that
        // request counts (the retry's nonce is new).
        let waiting = || !self.abandoned.load(Ordering::Acquire);
        let keep_place = self.terms.queue.is_some() && waiting();
        to_the_end(&self.client, &self.key, self.undo(keep_place)).await;
        let mut terms = AcquireTerms {
            queue: None,
            ..self.terms
        };
        if let Some(queue) = self.terms.queue {
            if waiting() {
                // It keeps its place, which the retry refreshes under a new nonce. (Should it
                // stop waiting from now on, `undo_abandoned` withdraws the place once this
                // request is done.)
                let nonce = self.client.inner.next_nonce();
                *self.requeued.lock() = Some(nonce);
                terms.queue = Some(QueueTerms { nonce, ..queue });
            } else {
                // It stopped waiting: its place goes (with a grant the undo kept), and the
                // retry asks unqueued.
                let (client, keys) = (self.client.clone(), self.keys.clone());
                let field = self.key.field.clone();
                let withdraw = async move { withdraw_entry(&client, &keys, &field).await };
                to_the_end(&self.client, &self.key, withdraw).await;
            }
        }
        let (keys, field) = (&self.keys, &self.key.field);
        node.acquire(keys, field, terms, self.patience, self.wait)
            .await
    }

    /// The first request may have run. We held nothing, so a release undoes its grant if there
    /// was one and is a no-op otherwise (`keep_grant`: a grant from the queue it did not claim
    /// stays); it and the retry go out in this order on the new connection.
    fn undo(&self, keep_grant: bool) -> impl Future<Output = ()> + Send + 'static {
        let (client, keys, field, terms) = (
            self.client.clone(),
            self.keys.clone(),
            self.key.field.clone(),
            self.terms,
        );
        async move {
            let inner = &client.inner;
            let undo = ReleaseArgs {
                field: &field,
                lease_ms: terms.lease_ms,
                holds: 1,
                latch: Latch::Always,
                delay_ms: Some(terms.delay_ms),
                successor: None,
                last: false,
                keep_grant,
            };
            let undone = inner
                .node
                .release(&keys, &undo, inner.request_id(), false)
                .await;
            if let Ok(Release::Released) = undone {
                // It had been granted: our queued waiters hear of it only here.
                inner.local_queues.released(&keys.hash);
            }
        }
    }
}

impl Request {
    /// Undoes what this request, sent at `sent` and abandoned by its caller, left according to
    /// its `outcome`: a grant, or a queue entry.
    async fn undo_abandoned(self, outcome: Result<Acquire>, sent: Instant) {
        let (client, keys, field) = (&self.client, &self.keys, &self.key.field);
        let Ok(Acquire::Acquired { .. }) = outcome else {
            // A refusal that queued us (or an error after which it may have): the caller's
            // place was withdrawn when it stopped waiting, possibly before this request
            // reached the server (sent again after NOSCRIPT or a cluster redirect), and the
            // entry it wrote then waits for nobody: a release would grant it, and the lock
            // idle for a claim lease. Withdraw again, now that the request is done; unless
            // another wait of this owner is in progress (tasks sharing an `Owner`): the
            // entry is that wait's now, and so may be a grant it is taking from a message.
            if self.terms.queue.is_some() && !(client.inner.turns).acquiring(&self.key) {
                withdraw_entry(client, keys, field).await;
            }
            return;
        };
        // This grant is ours alone, so releasing one hold undoes exactly it, even if the
        // owner acquired again meanwhile; unless it could expire before the release lands,
        // which would then take a later hold instead. It lives at least until `sent +
        // lease`; half of that leaves the release room to arrive.
        let lease_ms = self.terms.lease_ms;
        if sent.elapsed() >= Duration::from_millis(lease_ms) / 2 {
            tracing::debug!(lock = %keys.name, "abandoned grant answered too late to give back; it expires with its lease");
            return;
        }
        tracing::debug!(lock = %keys.name, "acquire abandoned after the grant; giving it back");
        if let Err(e) = give_back(client, keys, field, lease_ms, 1).await {
            tracing::warn!(lock = %keys.name, error = %e, "could not give back an abandoned grant; it expires with its lease");
        }
    }
}

/// An acquisition's outcome once `WAIT` (if one was asked for) is judged: a grant acknowledged
/// by fewer replicas than wanted, or by a server that cannot acknowledge in strict mode, is given
/// back here, inside the request (so a cancelled caller's grant is given back too), and fails
/// the attempt with the counts. A re-entry gives back its one hold; earlier holds stay.
async fn acknowledged(
    client: &Client,
    keys: &Arc<LockKeys>,
    key: &HoldKey,
    lease_ms: u64,
    wait: Option<WaitFor>,
    (outcome, acks): (Acquire, Option<Acks>),
) -> Result<Acquire> {
    let (Acquire::Acquired { .. }, Some(want), Some(acks)) = (&outcome, wait, acks) else {
        return Ok(outcome);
    };
    let Some(short) = acks.short_of(want) else {
        return Ok(outcome);
    };
    metrics::counter!(telemetry::REPLICAS_SHORT, "write" => "acquire").increment(1);
    tracing::warn!(lock = %keys.name, ?short, "too few replicas acknowledged the acquisition; giving it back");
    let (given, keys_given, field_given) = (client.clone(), keys.clone(), key.field.clone());
    to_the_end(client, key, async move {
        let keys = &keys_given;
        match give_back(&given, keys, &field_given, lease_ms, 1).await {
            // Our waiters hear of a release of this client only here.
            Ok(Release::Released) => given.inner.local_queues.released(&keys.hash),
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(lock = %keys.name, error = %e, "could not give back an unacknowledged grant; it expires with its lease");
            }
        }
    })
    .await;
    Err(short.into_error(&keys.name))
}

/// Runs a clean-up `step` of the request (an undo, a withdrawal, a give-back and what it
/// tells this client's waiters) to its end: should the request run out of time around it
/// ([`FinishOnDrop::expiring`]), the step finishes in the background, and still counts as an
/// operation of this owner in flight (`turns.rs`) until it has: a release landing after the
/// owner's next grant would take that grant away. (Needed because `expiring` bounds the
/// whole request, its clean-up included.)
async fn to_the_end(
    client: &Client,
    key: &HoldKey,
    step: impl Future<Output = ()> + Send + 'static,
) {
    FinishOnDrop::new(step, |()| async {})
        .tracked(&client.inner.background)
        .keeping_while_abandoned(in_flight(client, key))
        .await;
}

/// What makes an abandoned operation of `key`'s owner count as in flight (`turns.rs`), from the
/// moment it is abandoned until its background completion ends: the owner's next acquisition
/// waits for it and takes no grant from a message meanwhile.
fn in_flight(client: &Client, key: &HoldKey) -> impl FnOnce() -> Releasing + Send + 'static {
    let (turns, key) = (client.inner.turns.clone(), key.clone());
    move || turns.start_release(&key)
}
