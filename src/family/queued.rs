//! Waiting in a queue on the server (`lua/queue.lua`, `lua/queue_permits.lua`: a semaphore's,
//! a read-write lock's), from the client's side: the waiter's name in the queue, its place
//! (withdrawn when the wait ends without a grant), and a release's reply that hands grants to
//! this client's waiters.
//!
//! A waiter's attempts carry its name, one per wait: `<client id>:w<n>` for the semaphores,
//! `<owner field>#<n>` for the read-write lock. Refused, an attempt queues the waiter (or keeps
//! its place); a call that frees what waiters want grants it to the first waiters that fit
//! and tells each grantee's client alone, on `<channel>:<client id>`, where the waiter listens
//! ([`Wake::Grant`](super::Wake::Grant)); its next attempt claims the grant. A release names
//! this client's own waiters it handed what they wait for in its reply
//! ([`resolve_handed`]): they are resolved from it, without a message or another attempt
//! ([`HandedWaiters`] keeps their names until the client's next release deletes the server's
//! records of them).

use crate::backoff::Backoff;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use redis::Value;

use super::{Attempt, NAP, Reply, Wake, wait_for};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::queue_place::QueuePlace;
use crate::shared::Client;
use crate::terms::Wait;

/// How long a waiter's place in a queue lives past its latest attempt: a waiter attempts at
/// least once per [`NAP`], and an attempt may take the client's timeout (or the claim lease,
/// if longer) to land, so only a waiter that died (or hangs) loses its place.
fn place_life(config: &Config) -> Duration {
    2 * NAP + config.queue_slack()
}

/// Numbers the waits of this process.
static WAITS: AtomicU64 = AtomicU64::new(0);

/// A new waiter's name in a queue: `<client id>:w<n>`, so a grant's message goes to its client.
pub(crate) fn waiter_name(client: &Client) -> Arc<str> {
    let n = WAITS.fetch_add(1, Ordering::Relaxed);
    format!("{}:w{n}", client.inner.id_text).into()
}

/// A new waiter's name in a read-write lock's queue: `<owner field>#<n>`, one per wait, so a
/// grant's message goes to its client and the script finds the owner in it.
pub(crate) fn waiter_of(field: &str) -> Arc<str> {
    let n = WAITS.fetch_add(1, Ordering::Relaxed);
    format!("{field}#{n}").into()
}

/// A new name for one release of a semaphore (`<client id>:r<n>`), by which the script knows
/// it if it is sent again.
pub(crate) fn release_name(client: &Client) -> Arc<str> {
    let n = WAITS.fetch_add(1, Ordering::Relaxed);
    format!("{}:r{n}", client.inner.id_text).into()
}

/// The channel on which the scripts tell this client's waiters of their grants.
pub(crate) fn grant_channel(client: &Client, channel: &str) -> Arc<str> {
    format!("{channel}:{}", client.inner.id_text).into()
}

/// The queue terms of an attempt, as the scripts take them: how long the place lives (0 for
/// a single attempt, never queued) and the claim lease of a grant, in ms.
pub(crate) fn terms(client: &Client, wait: Wait) -> [String; 2] {
    let life = match wait {
        Wait::Once => Duration::ZERO,
        Wait::Until(_) | Wait::Forever => place_life(&client.inner.config),
    };
    let claim = client.inner.config.claim_lease;
    [life, claim].map(|d| d.as_millis().to_string())
}

/// How many times a withdrawal is sent before it is given up on: a grant a release of this
/// client handed the waiter comes back only through it (the server keeps its record a minute
/// past the place), so a failed one is sent again, with pauses from 100 ms doubling up to 5 s
/// (about 20 s in all), while the client is open.
const WITHDRAW_TRIES: u32 = 10;

/// The pauses between a withdrawal's tries, in all, with room to spare (about 21 s).
const WITHDRAW_PAUSES: Duration = Duration::from_secs(25);

/// For how many minutes the server must find the record of a semaphore's call
/// (`lua/semaphore.lua`): longer than an acquisition's reply is waited for and its withdrawal
/// then tried, so a withdrawal finds what the acquisition took unheard.
pub(crate) fn record_minutes(client: &Client) -> String {
    let config = &client.inner.config;
    let span = super::patience(client, None) + WITHDRAW_TRIES * config.timeout + WITHDRAW_PAUSES;
    span.as_secs().div_ceil(60).to_string()
}

/// Sends `withdraw` (one withdrawal call of the semaphore `name`) until it succeeds, at most
/// [`WITHDRAW_TRIES`] times, and once only after the client shut down.
pub(crate) async fn withdraw_retrying<F, Fut>(client: &Client, name: &str, mut withdraw: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool>>,
{
    let mut backoff = Backoff::patient();
    for attempt in 1..=WITHDRAW_TRIES {
        let Err(e) = withdraw().await else {
            return;
        };
        if attempt == WITHDRAW_TRIES || client.inner.check_open().is_err() {
            tracing::warn!(semaphore = %name, error = %e, "could not withdraw from the queue; the place ends a few seconds after its last attempt, permits handed to it or taken unheard stay out");
            return;
        }
        tracing::debug!(semaphore = %name, error = %e, "withdrawal failed; sending it again");
        backoff.sleep().await;
    }
}

/// Waits in the queue as `waiter` (listening on `grants`), attempting with `attempt` as
/// [`wait_for`] does, which a release of this client handing the waiter what it waits for ends
/// without an attempt (noted in `handed`). Granted, returns when the latest attempt was sent.
/// A wait that ends without a grant runs `withdrawal` before it returns `None`; one cancelled
/// or failed runs it in the background. A single attempt (`Wait::Once`) never queues: it runs
/// it only when cancelled or after an error that may have followed its send, since it may
/// have taken something unheard.
///
/// # Cancel safety
/// As [`wait_for`]'s; the place is withdrawn in the background.
pub(crate) async fn wait_in_queue<F, Fut>(
    client: &Client,
    grants: &Arc<str>,
    wait: Wait,
    waiter: &Arc<str>,
    withdrawal: impl Future<Output = ()> + Send + 'static,
    handed: Option<&HandedWaiters>,
    attempt: F,
) -> Result<Option<Instant>>
where
    F: FnMut() -> Fut + Send,
    Fut: Future<Output = Result<Attempt<()>>> + Send,
{
    // A single attempt never queues; its place is only for what it may have taken unheard (a
    // semaphore's permits, whose take the script records).
    let withdrawal = Box::pin(withdrawal);
    let place = QueuePlace::new(client, move || withdrawal);
    let once = matches!(wait, Wait::Once);
    let wake = Wake::Grant {
        waiter: waiter.clone(),
        handed,
    };
    // A failed wait leaves its place to be withdrawn in the background: the withdrawal is sent
    // again while it fails (`withdraw_retrying`), for up to about 20 s, which the caller of a
    // wait that failed (Redis unreachable) must not wait out.
    let taken = match wait_for(client, grants, wait, wake, attempt).await {
        Ok(taken) => taken,
        // Nothing reached the server, or nothing was written: nothing to withdraw.
        Err(e) if once && !maybe_sent(&e) => {
            place.taken();
            return Err(e);
        }
        Err(e) => return Err(e),
    };
    match taken {
        // The script took the place out with the grant; a refused single attempt has none.
        Some(_) => place.taken(),
        None if once => place.taken(),
        None => place.withdraw().await,
    }
    Ok(taken)
}

/// Names of this client's calls on one object whose records on the server can go, since the
/// client has their outcome: waiters that took what a release of this client handed them (the
/// script keeps a record of each, for a waiter that missed the reply), and a semaphore's
/// acquisitions and releases (kept so a call sent again does nothing twice). The client's next
/// release carries them, and deletes them. One per object and client.
#[derive(Default)]
pub(crate) struct HandedWaiters(parking_lot::Mutex<Vec<Arc<str>>>);

/// The most records one release deletes (more wait for the next, or end at their deadline).
const FORGET_PER_RELEASE: usize = 64;

/// The most names kept for the next releases to delete.
const KEPT: usize = 4 * FORGET_PER_RELEASE;

impl HandedWaiters {
    /// The record of `name` can go. Past [`KEPT`] names, the oldest is dropped: its record
    /// ends by itself (a client that acquires and never releases, whose list would grow).
    pub(crate) fn push(&self, name: Arc<str>) {
        let mut names = self.0.lock();
        if names.len() >= KEPT {
            names.remove(0);
        }
        names.push(name);
    }

    /// The records the next release deletes.
    pub(crate) fn take(&self) -> Vec<Arc<str>> {
        let mut handed = self.0.lock();
        let from = handed.len().saturating_sub(FORGET_PER_RELEASE);
        handed.drain(from..).collect()
    }

    /// Records a release took (`take`) and did not delete, since it failed: the next one does.
    pub(crate) fn put_back(&self, names: Vec<Arc<str>>) {
        for name in names {
            self.push(name);
        }
    }
}

/// A release's hand-over argument (`lua/queue_permits.lua`'s `handing_to`): this client's id, whose
/// waiters the release hands what it frees (`-` while the client shuts down: its waiters are
/// quitting), then the waiters of `handed` whose records go.
pub(crate) fn hand_over_arg(client: &Client, handed: Option<&HandedWaiters>) -> String {
    hand_over_text(client, &handed.map(HandedWaiters::take).unwrap_or_default())
}

/// [`hand_over_arg`] with the records `forget` names.
pub(crate) fn hand_over_text(client: &Client, forget: &[Arc<str>]) -> String {
    let mut hand_over = match client.inner.check_open() {
        Ok(()) => client.inner.id_text.to_string(),
        Err(_) => "-".to_string(),
    };
    for name in forget {
        hand_over.push(' ');
        hand_over.push_str(name);
    }
    hand_over
}

/// The reply of a release (`lua/queue_permits.lua`'s `with_handed`): its integer, alone or
/// followed by this client's waiters the release handed permits to. Each of those, listening
/// on `grants`, is told at once ([`Subscriber::handed`](crate::pubsub::Subscriber::handed)).
///
/// # Errors
/// [`Error::Protocol`] for a reply of another shape (`script` names it).
pub(crate) fn resolve_handed(
    client: &Client,
    grants: &str,
    script: &'static str,
    reply: Value,
) -> Result<Reply> {
    let malformed = |reply: &Value| Error::Protocol {
        script,
        reply: format!("{reply:?}"),
    };
    match reply {
        Value::Int(n) => Ok(Reply::new(script, n)),
        Value::Array(ref items) => {
            let Some((Value::Int(n), handed)) = items.split_first() else {
                return Err(malformed(&reply));
            };
            for waiter in handed {
                let Value::BulkString(name) = waiter else {
                    return Err(malformed(&reply));
                };
                let name = std::str::from_utf8(name).map_err(|_| malformed(&reply))?;
                client.inner.subscriber.handed(grants, name);
            }
            Ok(Reply::new(script, *n))
        }
        other => Err(malformed(&other)),
    }
}

/// Whether an attempt that failed with `error` may have taken something: not one refused
/// before anything was sent (bad input, shutdown, a connection refused) or one the script
/// refused before writing (a key of another type).
fn maybe_sent(error: &Error) -> bool {
    let refused = matches!(error, Error::Redis { source, .. } if source.is_connection_refusal());
    !(error.is_invalid_input() || error.is_shutdown() || error.is_wrong_type() || refused)
}
