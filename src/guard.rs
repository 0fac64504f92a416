//! `LockGuard`: proof of a hold, and the ways to give it back.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use crate::client::Client;
use crate::error::{Error, Result};
use crate::hold::{Hold, LocalRelease};
use crate::keys::LockKeys;
use crate::scripts::Release;
use crate::task::FinishOnDrop;

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

/// The synchronous half of [`release`]: one guard fewer in the registry.
fn release_locally(client: &Client, hold: &Arc<Hold>) -> Result<LocalRelease> {
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
        other => Ok(other),
    }
}

/// The server half of [`release`], after [`release_locally`] succeeded.
async fn release_remotely(client: &Client, hold: &Arc<Hold>, local: LocalRelease) -> Result<()> {
    let inner = &client.inner;
    let holds = match local {
        LocalRelease::Last => hold.server_count(1),
        _ => 1,
    };
    match release_on_server(client, &hold.keys, &hold.field, hold.lease_ms, holds).await? {
        Release::NotHeld => {
            hold.mark_lost("the hold was gone from the server at release");
            Err(Error::LeaseLost {
                name: hold.keys.name.to_string(),
            })
        }
        Release::Released => {
            inner.gates.released(&hold.keys.hash);
            Ok(())
        }
        Release::StillHeld(_) => Ok(()),
    }
}

/// Sends one release with a fresh request id, retrying on a lost reply (the script makes the
/// retry idempotent). Finishes in the background if the caller stops waiting.
pub(crate) async fn release_on_server(
    client: &Client,
    keys: &Arc<LockKeys>,
    field: &Arc<str>,
    lease_ms: u64,
    holds: u32,
) -> Result<Release> {
    let tracker = client.inner.background.clone();
    let (client, keys, field) = (client.clone(), keys.clone(), field.clone());
    let request = async move {
        let inner = &client.inner;
        let id = inner.request_id();
        let mut attempt = 0;
        loop {
            match inner
                .node
                .release(&keys, &field, lease_ms, holds, id, attempt > 0)
                .await
            {
                Err(e) if e.is_unavailable() && attempt < inner.config.release_retries => {
                    attempt += 1;
                    tracing::debug!(lock = %keys.name, error = %e, attempt, "retrying release");
                }
                outcome => return outcome,
            }
        }
    };
    FinishOnDrop::new(request, |_| async {})
        .tracked(&tracker)
        .await
}
