//! Giving holds back, for every kind. A guard's release does its kind's local half
//! synchronously (the watchdog stops renewing at once), then hands its server half to one
//! lifecycle: [`finish_unlock`] runs it to its end even if the caller stops waiting, answers
//! `LeaseLost` for a hold that was gone, and runs it on the client's runtime when polled
//! outside one; [`release_dropped`] does so from a guard's Drop on any thread. The Lock's own
//! halves are [`release_hold`] and [`release_hold_in_background`] (the lock goes, or is handed
//! to this client's waiting head, at the owner's last hold); the family's kinds supply theirs.
//! [`give_back`] gives back holds no guard owns (abandoned grants, shutdown, a lock released
//! by name), finished in the background if its caller stops waiting. Every release retries a
//! lost reply (the script makes the retry harmless).

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use futures_util::future::BoxFuture;
use tokio::sync::oneshot;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::hold::{Hold, LocalRelease};
use crate::keys::{HoldKey, LockKeys};
use crate::local_queue::{Offer, OfferAnswer};
use crate::node::{Latch, ReleaseArgs};
use crate::scripts::Release;
use crate::shared::Client;
use crate::task::{FinishOnDrop, spawn_from_drop};
use crate::turns::Releasing;

/// Gives back one guard's hold: local bookkeeping first (synchronously, so the watchdog stops
/// renewing at once), then the server.
pub(crate) async fn release_hold(client: &Client, hold: &Arc<Hold>) -> Result<()> {
    if let Err(e) = crate::task::in_runtime() {
        // Polled outside tokio: the caller hears of it, and the hold is released as a dropped
        // guard's is, on the client's runtime (a guard that unlocks is never dropped armed).
        release_hold_in_background(client, hold);
        return Err(e);
    }
    let local = match release_locally(client, hold) {
        Ok(local) => local,
        Err(e) => {
            if stale_metadata(client, hold) {
                // Boxed: rare, and it would double the size of every unlock's future.
                let forget: BoxFuture<'_, ()> = Box::pin(forget_metadata(client, hold));
                forget.await;
            }
            return Err(e);
        }
    };
    // Lost by time (no renewal confirmed in time) but still our registered hold: give it back
    // on the server all the same, in case the key survived, and report the loss.
    let lost = hold.is_lost();
    let server: ServerHalf = Box::pin(release_remotely(client.clone(), hold.clone(), local));
    finish_unlock(client, &hold.keys.name, lost, Some(server)).await
}

/// [`release_hold`] from a guard's Drop: the local half at once, the server half spawned on
/// the client's runtime from any thread (tracked, so `Client::shutdown` waits for it). Once that
/// runtime has ended the watchdog no longer renews the hold, and the lease frees the key.
pub(crate) fn release_hold_in_background(client: &Client, hold: &Arc<Hold>) {
    // Local state first and synchronously: a release that did this inside the spawned task let
    // the watchdog renew a dropped guard's hold until the task ran (forever if the runtime was
    // shutting down and never ran it).
    let Ok(local) = release_locally(client, hold) else {
        // Lost or shut down: nothing of ours left on the server to give back (but the lost
        // hold's metadata).
        if stale_metadata(client, hold) {
            let background = &client.inner.background;
            let (client, hold) = (client.clone(), hold.clone());
            let forget = async move { forget_metadata(&client, &hold).await };
            spawn_from_drop(background, forget);
        }
        return;
    };
    let server = release_remotely(client.clone(), hold.clone(), local);
    release_dropped(client, hold.keys.name.clone(), server);
}

/// The server half of a guard's release, boxed (see [`finish_unlock`]); erased, so the futures
/// around it stay shallow for the compiler's `Send` proofs.
pub(crate) type ServerHalf = BoxFuture<'static, Result<bool>>;

/// The end of every guard's release, once its kind has done the local half: `release` (`None`:
/// nothing to send) is the server half, which runs to its end even when the caller stops
/// waiting (tracked, so `Client::shutdown` waits for it) and answers whether the hold was still
/// there; a hold gone then, or known `lost` before, is [`Error::LeaseLost`]. Polled outside
/// tokio, the caller hears so and the server half runs on the client's runtime, as a dropped
/// guard's ([`release_dropped`]). Boxed by the caller: the server half (2 KB) is then moved as
/// a pointer through the unlock's futures, where it was copied at each step (`LockGuard::unlock`'s
/// future was 4 KB, now 240 bytes).
pub(crate) async fn finish_unlock(
    client: &Client,
    name: &Arc<str>,
    lost: bool,
    release: Option<ServerHalf>,
) -> Result<()> {
    if let Err(e) = crate::task::in_runtime() {
        if let Some(release) = release {
            release_dropped(client, name.clone(), release);
        }
        return Err(e);
    }
    let background = &client.inner.background;
    let held = match release {
        Some(release) => {
            let released = FinishOnDrop::pinned(release, |_| async {})
                .tracked(background)
                .await;
            match released {
                Ok(held) => held,
                // Known lost: that is the answer, whatever the release met (a hold told of
                // its loss at once may be released before the connection is back); but a
                // client shut down says so.
                Err(e) if lost && !matches!(e, Error::Shutdown) => false,
                Err(e) => return Err(e),
            }
        }
        None => true,
    };
    if lost || !held {
        let name = name.to_string();
        return Err(Error::LeaseLost { name });
    }
    Ok(())
}

/// A dropped guard's server half (of any kind), spawned on the client's runtime from any thread
/// (see [`spawn_from_drop`]); once that runtime has ended, the lease frees the hold.
pub(crate) fn release_dropped<F>(client: &Client, name: Arc<str>, release: F)
where
    F: Future<Output = Result<bool>> + Send + 'static,
{
    let release = async move {
        if let Err(e) = release.await
            && !matches!(e, Error::Shutdown)
        {
            tracing::warn!(lock = %name, error = %e, "release of a dropped guard failed; it expires with its lease");
        }
    };
    spawn_from_drop(&client.inner.background, release);
}

/// The synchronous half of [`release_hold`]: one guard fewer in the registry, and the release
/// registered as in flight before the owner can ask for the lock again (`turns.rs`).
fn release_locally(client: &Client, hold: &Arc<Hold>) -> Result<(LocalRelease, Releasing)> {
    let inner = &client.inner;
    match inner.holds.release(hold) {
        LocalRelease::Detached => {
            // Either lost (and maybe re-taken since by the same owner, so the server's hold is
            // not ours to decrement) or released by shutdown.
            if inner.is_shut_down() {
                return Err(Error::Shutdown);
            }
            Err(Error::LeaseLost {
                name: hold.keys.name.to_string(),
            })
        }
        other => Ok((other, inner.turns.start_release(&hold.key))),
    }
}

/// The server half of [`release_hold`], after [`release_locally`] succeeded: whether the hold
/// was still on the server. The last hold goes to this client's waiting head, if there is one
/// (see `local_queue.rs`).
async fn release_remotely(
    client: Client,
    hold: Arc<Hold>,
    (local, releasing): (LocalRelease, Releasing),
) -> Result<bool> {
    let inner = &client.inner;
    let last = local == LocalRelease::Last;
    let (holds, offer) = match last {
        // Every hold the server counts for us goes, maybe to our waiting head.
        true => (
            hold.server_count(1),
            (inner.local_queues).take_offer(&hold.keys.hash, &hold.key.field),
        ),
        false => (1, None),
    };
    let request = Request {
        keys: hold.keys.clone(),
        field: hold.key.field.clone(),
        lease_ms: hold.lease_ms(),
        holds,
        latch: Latch::WhileHeld,
        delay_ms: hold.delay(),
        last,
    };
    if last && hold.has_metadata() {
        // Before the release: once the lock is given back the owner may take it again with
        // new metadata, which a removal sent after the release could delete.
        forget_metadata(&client, &hold).await;
    }
    match send(client, request, offer, Some(releasing)).await? {
        Release::NotHeld => {
            let why = "the hold was gone from the server at release";
            hold.mark_lost(crate::telemetry::LostReason::ServerLost, why);
            Ok(false)
        }
        Release::Released | Release::HandedOver { .. } | Release::StillHeld(_) => {
            if last && hold.outlived_by_a_guard() {
                // A guard left holding nothing by a release by name is told, quietly (a hold
                // found gone above is a loss, counted).
                hold.mark_released_by_name();
            }
            Ok(true)
        }
    }
}

/// Whether `hold`, lost, left metadata that no hold of its owner has now (a hold taken since
/// with metadata has its own, which stays). Not at shutdown: the announcement goes then.
fn stale_metadata(client: &Client, hold: &Hold) -> bool {
    let inner = &client.inner;
    hold.has_metadata()
        && inner.check_open().is_ok()
        && inner
            .holds
            .get(&hold.key)
            .is_none_or(|now| !now.has_metadata())
}

/// Removes the metadata of `hold` (its last release) from the client's announcement. A failure
/// is only logged: the hold is gone, and status shows a holder's metadata only.
async fn forget_metadata(client: &Client, hold: &Hold) {
    let inner = &client.inner;
    let (prefix, me) = (&inner.config.prefix, &inner.me);
    let what = (&*hold.keys.hash, &*hold.key.field);
    if let Err(e) = crate::identity::drop_metadata(&inner.node, prefix, me, what).await {
        tracing::debug!(lock = %hold.keys.name, error = %e, "could not remove the hold's metadata");
    }
}

/// Gives back `holds` holds of `field` outside a guard (abandoned grants, shutdown, a lock
/// released by name): the release writes its latch every time, so a retry is harmless even if
/// the owner takes the lock again meanwhile. Retries on a lost reply; finishes in the
/// background if the caller stops waiting.
pub(crate) async fn give_back(
    client: &Client,
    keys: &Arc<LockKeys>,
    field: &Arc<str>,
    lease_ms: u64,
    holds: u32,
) -> Result<Release> {
    let request = Request {
        keys: keys.clone(),
        field: field.clone(),
        lease_ms,
        holds,
        latch: Latch::Always,
        // A give-back is a release: it ends a lock-delay marker as a guard's release does (a
        // lock without one has no marker to delete).
        delay_ms: Some(0),
        last: false,
    };
    FinishOnDrop::new(send(client.clone(), request, None, None), |_| async {})
        .tracked(&client.inner.background)
        .await
}

/// One release as sent, owned so that it can finish in the background.
struct Request {
    keys: Arc<LockKeys>,
    field: Arc<str>,
    lease_ms: u64,
    holds: u32,
    latch: Latch,
    delay_ms: Option<u64>,
    /// See `ReleaseArgs::last`.
    last: bool,
}

/// Sends one release with a fresh request id, retrying on a lost reply (the script makes the
/// retry harmless), then answers `offer` and ends `releasing`. Its caller finishes it in the
/// background if it stops waiting ([`finish_unlock`], [`give_back`]), so the waiter offered
/// the lock always hears what became of it.
fn send(
    client: Client,
    request: Request,
    offer: Option<Offer>,
    releasing: Option<Releasing>,
) -> impl Future<Output = Result<Release>> + Send + 'static {
    let span = tracing::debug_span!(
        "release",
        lock = %request.keys.name,
        owner = %request.field,
        outcome = tracing::field::Empty,
    );
    async move {
        let inner = &client.inner;
        let id = inner.request_id();
        let sent = Instant::now();
        let keys = &request.keys;
        let args = ReleaseArgs {
            field: &request.field,
            lease_ms: request.lease_ms,
            holds: request.holds,
            latch: request.latch,
            delay_ms: request.delay_ms,
            successor: offer.as_ref().map(|o| &o.successor),
            last: request.last,
            keep_grant: false,
        };
        let mut attempt = 0;
        let outcome = loop {
            // Later attempts are retries of the same request: the script makes them harmless.
            match inner.node.release(keys, &args, id, attempt > 0).await {
                Err(e) if e.is_unavailable() && attempt < inner.config.release_retries => {
                    attempt += 1;
                    tracing::debug!(lock = %keys.name, error = %e, attempt, "retrying release");
                }
                outcome => break outcome,
            }
        };
        drop(releasing);
        match outcome {
            // Our waiters ignore our own unlock messages (`pubsub.rs`): tell them here. Also
            // when our hold was gone (expired): the lock may be free, and a head that skipped
            // its attempt because we held it must look again.
            Ok(Release::Released | Release::NotHeld) => {
                inner.local_queues.released(&request.keys.hash)
            }
            // Before the answer, so the next head already knows a local waiter holds it.
            Ok(Release::HandedOver { .. }) => {
                crate::telemetry::count(crate::telemetry::HANDOVERS);
                if let Some(offer) = &offer {
                    let handed_to = &offer.successor.field;
                    inner
                        .local_queues
                        .note_handed_over(&request.keys.hash, handed_to)
                }
            }
            _ => {}
        }
        if let Some(offer) = offer {
            answer(&client, &request.keys, offer, &outcome, sent);
        }
        let said = match &outcome {
            Ok(Release::Released) => "released",
            Ok(Release::HandedOver { .. }) => "handed over",
            Ok(Release::StillHeld(_)) => "still held",
            Ok(Release::NotHeld) => "not held",
            Err(_) => "failed",
        };
        tracing::Span::current().record("outcome", said);
        outcome
    }
    .instrument(span)
}

/// Tells the waiter that offered to take the lock over what became of it. A waiter that has
/// stopped waiting cannot take a grant: it is given back.
fn answer(
    client: &Client,
    keys: &Arc<LockKeys>,
    offer: Offer,
    outcome: &Result<Release>,
    sent: Instant,
) {
    let answer = match outcome {
        Ok(Release::HandedOver { token }) => OfferAnswer::Granted {
            token: *token,
            sent,
        },
        Ok(_) => OfferAnswer::Declined,
        Err(_) => OfferAnswer::Unknown,
    };
    let may_hold = answer.may_hold();
    if offer.reply.send(answer).is_err() && may_hold {
        let successor = &offer.successor;
        let why = "the waiter handed the lock stopped waiting";
        give_back_in_background(client, keys, &successor.field, successor.lease_ms, why);
    }
}

/// Gives back one hold of `field` in the background (tracked, so shutdown waits for it): a
/// grant nobody will use. `why` is logged. Safe from a drop on any thread: once the client's
/// runtime has ended there is nothing to run on, and the lease frees the key.
pub(crate) fn give_back_in_background(
    client: &Client,
    keys: &Arc<LockKeys>,
    field: &Arc<str>,
    lease_ms: u64,
    why: &'static str,
) {
    give_back_if(client, keys, field, lease_ms, why, std::future::ready(true));
}

/// [`give_back_in_background`] for a waiter that stopped waiting after a release took its
/// offer: once the release's `answer` is in, and only if it may have handed the lock over.
/// Counted as the owner's release in flight from now, not from the answer: the owner's next
/// acquisition must not reach the server between the hand-over and its give-back (it would
/// meet the handed hold as its own).
pub(crate) fn give_back_once_answered(
    client: &Client,
    keys: &Arc<LockKeys>,
    field: &Arc<str>,
    lease_ms: u64,
    answer: oneshot::Receiver<OfferAnswer>,
) {
    // A release that ended without answering may have handed it over.
    let may_hold = async move { answer.await.map_or(true, |answer| answer.may_hold()) };
    let why = "handed the lock after it stopped waiting";
    give_back_if(client, keys, field, lease_ms, why, may_hold);
}

/// Gives back one hold of `field` in the background once `may_hold` says so, as the owner's
/// release in flight from now until it is done.
fn give_back_if(
    client: &Client,
    keys: &Arc<LockKeys>,
    field: &Arc<str>,
    lease_ms: u64,
    why: &'static str,
    may_hold: impl Future<Output = bool> + Send + 'static,
) {
    // A release of the owner in flight (`turns.rs`): its next acquisition waits for it, and
    // takes no grant from a message meanwhile.
    let releasing = (client.inner.turns).start_release(&HoldKey::new(&keys.hash, field));
    let (owner, keys, field) = (client.clone(), keys.clone(), field.clone());
    let give_back = async move {
        if may_hold.await {
            tracing::debug!(lock = %keys.name, "{why}; giving it back");
            let _ = give_back(&owner, &keys, &field, lease_ms, 1).await;
        }
        drop(releasing);
    };
    spawn_from_drop(&client.inner.background, give_back);
}
