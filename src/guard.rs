//! `LockGuard`: proof of a hold, and the ways to give it back.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::gate::{Handover, Offer};
use crate::hold::{Hold, LocalRelease};
use crate::keys::LockKeys;
use crate::node::{Latch, ReleaseArgs};
use crate::scripts::Release;
use crate::task::FinishOnDrop;
use crate::turns::Releasing;

/// One hold of a lock. Release it with [`unlock`](LockGuard::unlock), which reports errors;
/// dropping it releases in the background instead.
///
/// A guard keeps its [`Client`] alive. It remembers the owner it acquired for, so it may be
/// moved to and unlocked from any task or thread.
///
/// # Drop
/// Drop never blocks and never panics: it updates the local state at once (the hold count, and
/// the watchdog stops renewing at the last hold) and spawns the release on the runtime that is
/// current at drop time. Without a runtime the lease frees the key when it runs out.
#[must_use = "if unused the lock is released immediately"]
pub struct LockGuard {
    client: Client,
    hold: Arc<Hold>,
    /// False once `unlock` took over the release, so Drop does nothing more.
    armed: bool,
}

impl LockGuard {
    pub(crate) fn new(client: Client, hold: Arc<Hold>) -> LockGuard {
        LockGuard {
            client,
            hold,
            armed: true,
        }
    }

    pub(crate) fn hold(&self) -> &Arc<Hold> {
        &self.hold
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.hold().keys.name
    }

    /// The fencing token of this hold, for fenced locks ([`Lock::fenced`](crate::Lock::fenced)).
    /// Re-entries share the token of the first acquisition.
    pub fn fencing_token(&self) -> Option<u64> {
        self.hold().token
    }

    /// Whether the lease is known to be lost: the watchdog found the key gone, could not reach
    /// Redis before [`valid_until`](LockGuard::valid_until), or a fixed lease ran out.
    pub fn is_lost(&self) -> bool {
        self.hold().is_lost()
    }

    /// A future that resolves when the lease is lost (see [`is_lost`](LockGuard::is_lost)). It
    /// does not borrow the guard, so it can be raced against the work done under the lock:
    ///
    /// ```no_run
    /// # async fn demo(lock: redlease::Lock) -> redlease::Result<()> {
    /// # async fn long_job() {}
    /// let guard = lock.lock().await?;
    /// tokio::select! {
    ///     _ = long_job() => guard.unlock().await?,
    ///     _ = guard.lost() => eprintln!("lease lost; stopping"),
    /// }
    /// # Ok(()) }
    /// ```
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.hold().lost()
    }

    /// The instant until which the lease is known valid: start of the last successful
    /// acquisition or renewal, plus the lease, minus a drift allowance.
    pub fn valid_until(&self) -> Instant {
        self.hold().valid_until()
    }

    /// Sets the lease of a lock held with a fixed lease to `lease` from now (rslock's and
    /// node-redlock's `extend`): longer to keep working, or shorter. Re-entries share one lease,
    /// so it applies to all of this owner's holds of the lock.
    ///
    /// ```no_run
    /// # async fn demo(lock: redlease::Lock) -> redlease::Result<()> {
    /// use std::time::Duration;
    ///
    /// let guard = lock.lock_with_lease(Duration::from_secs(5)).await?;
    /// // ... the work takes longer than planned ...
    /// guard.extend(Duration::from_secs(5)).await?;
    /// guard.unlock().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when the lease was already lost (then nothing is extended);
    /// [`Error::InvalidArgument`] for a lock kept by the watchdog, which renews it by itself;
    /// [`Error::InvalidDuration`] for a zero or absurd lease; [`Error::Timeout`] or
    /// [`Error::Redis`] when Redis fails (the old lease then still runs).
    ///
    /// # Cancel safety
    /// Dropping the future may or may not extend the lease; the guard stays valid either way.
    pub async fn extend(&self, lease: std::time::Duration) -> Result<()> {
        let lease_ms = crate::config::lease_ms("lease", lease)?;
        let hold = self.hold();
        if matches!(hold.lease, crate::hold::Lease::Watchdog(_)) {
            return Err(Error::InvalidArgument(format!(
                "lock `{}` is kept by the watchdog; extend is for locks with a fixed lease",
                hold.keys.name
            )));
        }
        let lost = || Error::LeaseLost {
            name: hold.keys.name.to_string(),
        };
        if hold.is_lost() {
            return Err(lost());
        }
        let started = Instant::now();
        let renewal = crate::node::Renewal {
            hash: &hold.keys.hash,
            field: &hold.field,
            lease_ms,
        };
        let inner = &self.client.inner;
        let renewed = inner.node.renew(std::slice::from_ref(&renewal)).await?;
        if renewed.first() != Some(&true) {
            hold.mark_lost("the key was gone when its lease was to be extended");
            inner.holds.detach(hold);
            return Err(lost());
        }
        // Too late to count: the lease may have run out before the extension landed.
        if hold.is_lost() {
            return Err(lost());
        }
        hold.extended(started, lease, inner.config.drift(lease));
        Ok(())
    }

    /// Gives back this hold; the key goes (and a waiter is woken) when it was the owner's last.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when the lease was lost while held (nothing is released then);
    /// [`Error::Shutdown`] when the client was shut down (it released everything);
    /// [`Error::Timeout`] or [`Error::Redis`] when Redis failed on every retry (the lease then
    /// frees the key: the watchdog no longer renews it).
    ///
    /// # Cancel safety
    /// Dropping the future still completes the release in the background.
    pub async fn unlock(mut self) -> Result<()> {
        self.armed = false;
        let hold = self.hold.clone();
        release(&self.client, &hold).await
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let hold = self.hold.clone();
        // Local state first and synchronously, as documented: the release used to do this inside
        // the spawned task, so the watchdog kept renewing a dropped guard's hold until that task
        // ran (forever if the runtime was shutting down and never ran it).
        let Ok(local) = release_locally(&self.client, &hold) else {
            // Lost or shut down: nothing of ours left on the server to give back.
            return;
        };
        let client = self.client.clone();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let background = client.inner.background.clone();
            let release = async move {
                if let Err(e) = release_remotely(&client, &hold, local).await {
                    if !e.is_lease_lost() && !matches!(e, Error::Shutdown) {
                        tracing::warn!(lock = %hold.keys.name, error = %e, "background release failed; the lease will free the key");
                    }
                }
            };
            // Tracked, so `Client::shutdown` waits for it.
            drop(background.spawn_on(release, &handle));
        }
        // No runtime: the watchdog no longer renews it; the lease frees the key.
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("LockGuard");
        d.field("name", &self.hold.keys.name)
            .field("token", &self.hold.token)
            .field("lost", &self.hold.is_lost());
        d.finish_non_exhaustive()
    }
}

/// Gives back one guard's hold: local bookkeeping first (synchronously, so the watchdog stops
/// renewing at once), then the server.
pub(crate) async fn release(client: &Client, hold: &Arc<Hold>) -> Result<()> {
    let local = release_locally(client, hold)?;
    // Lost by time (no renewal confirmed in time) but still our registered hold: give it back
    // on the server all the same, in case the key survived, and report the loss.
    let lost = hold.is_lost();
    let released = release_remotely(client, hold, local).await;
    if lost {
        return Err(Error::LeaseLost {
            name: hold.keys.name.to_string(),
        });
    }
    released
}

/// The synchronous half of [`release`]: one guard fewer in the registry, and the release
/// registered as in flight before the owner can ask for the lock again (`turns.rs`).
fn release_locally(client: &Client, hold: &Arc<Hold>) -> Result<(LocalRelease, Releasing)> {
    let inner = &client.inner;
    match inner.holds.release(hold) {
        LocalRelease::Detached => {
            // Either lost (and maybe re-taken since by the same owner, so the server's hold is
            // not ours to decrement) or released by shutdown.
            inner.check_open()?;
            Err(Error::LeaseLost {
                name: hold.keys.name.to_string(),
            })
        }
        other => Ok((
            other,
            inner.turns.start_release(&hold.keys.hash, &hold.field),
        )),
    }
}

/// The server half of [`release`], after [`release_locally`] succeeded. The last hold goes to
/// this client's waiting head, if there is one (see `gate.rs`).
async fn release_remotely(
    client: &Client,
    hold: &Arc<Hold>,
    (local, releasing): (LocalRelease, Releasing),
) -> Result<()> {
    let inner = &client.inner;
    let (holds, offer) = match local {
        // Every hold the server counts for us goes, maybe to our waiting head.
        LocalRelease::Last => (
            hold.server_count(1),
            inner.gates.take_offer(&hold.keys.hash),
        ),
        _ => (1, None),
    };
    let request = Request {
        keys: hold.keys.clone(),
        field: hold.field.clone(),
        lease_ms: hold.lease_ms,
        holds,
        latch: Latch::WhileHeld,
    };
    match send(client, request, offer, Some(releasing)).await? {
        Release::NotHeld => {
            hold.mark_lost("the hold was gone from the server at release");
            Err(Error::LeaseLost {
                name: hold.keys.name.to_string(),
            })
        }
        Release::Released | Release::HandedOver { .. } => Ok(()),
        Release::StillHeld(_) => Ok(()),
    }
}

/// Gives back `holds` holds of `field` outside a guard (abandoned grants, shutdown, a lock
/// released by name): the release writes its latch every time, so a retry is harmless even if
/// the owner takes the lock again meanwhile. Retries on a lost reply; finishes in the
/// background if the caller stops waiting.
pub(crate) async fn release_on_server(
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
    };
    send(client, request, None, None).await
}

/// One release as sent, owned so that it can finish in the background.
struct Request {
    keys: Arc<LockKeys>,
    field: Arc<str>,
    lease_ms: u64,
    holds: u32,
    latch: Latch,
}

/// Sends one release with a fresh request id, retrying on a lost reply (the script makes the
/// retry harmless), then answers `offer` and ends `releasing`. Finishes in the background if
/// the caller stops waiting, so the waiter offered the lock always hears what became of it.
async fn send(
    client: &Client,
    request: Request,
    offer: Option<Offer>,
    releasing: Option<Releasing>,
) -> Result<Release> {
    let tracker = client.inner.background.clone();
    let client = client.clone();
    let work = async move {
        let inner = &client.inner;
        let id = inner.request_id();
        let sent = Instant::now();
        let keys = &request.keys;
        let args = ReleaseArgs {
            field: &request.field,
            lease_ms: request.lease_ms,
            holds: request.holds,
            latch: request.latch,
            successor: offer.as_ref().map(|o| &o.successor),
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
            Ok(Release::Released | Release::NotHeld) => inner.gates.released(&request.keys.hash),
            // Before the answer, so the next head already knows a local waiter holds it.
            Ok(Release::HandedOver { .. }) => inner.gates.handed_over(&request.keys.hash),
            _ => {}
        }
        if let Some(offer) = offer {
            answer(&client, &request.keys, offer, &outcome, sent);
        }
        outcome
    };
    FinishOnDrop::new(work, |_| async {})
        .tracked(&tracker)
        .await
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
        Ok(Release::HandedOver { token }) => Handover::Granted {
            token: *token,
            sent,
        },
        Ok(_) => Handover::Declined,
        Err(_) => Handover::Unknown,
    };
    let may_hold = answer.may_hold();
    if offer.reply.send(answer).is_err() && may_hold {
        let successor = &offer.successor;
        let why = "the waiter handed the lock stopped waiting";
        give_back_in_background(client, keys, &successor.field, successor.lease_ms, why);
    }
}

/// Gives back one hold of `field` in the background (tracked, so shutdown waits for it): a
/// grant nobody will use. `why` is logged. Safe from a drop: without a runtime there is nothing
/// to run on, and the lease frees the key.
pub(crate) fn give_back_in_background(
    client: &Client,
    keys: &Arc<LockKeys>,
    field: &Arc<str>,
    lease_ms: u64,
    why: &'static str,
) {
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let (owner, keys, field) = (client.clone(), keys.clone(), field.clone());
    let give_back = async move {
        tracing::debug!(lock = %keys.name, "{why}; giving it back");
        let _ = release_on_server(&owner, &keys, &field, lease_ms, 1).await;
    };
    drop(client.inner.background.spawn_on(give_back, &handle));
}
