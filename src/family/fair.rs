//! [`FairLock`]: a reentrant lock granted first come, first served across every client.

use std::future::Future;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::family::arrivals::{Arrival, Arrivals};
use crate::family::kept::Kept;
use crate::family::{Attempt, FamilyKeys, Wake, finish_release, wait_for};
use crate::node::FamilyScript;
use crate::owner::Owner;
use crate::scope::LockOptions;
use crate::shared::Client;
use crate::task::FinishOnDrop;
use crate::terms::{Lease, Wait};

static SCRIPT: FamilyScript = FamilyScript::new("fair", include_str!("../../lua/fair.lua"));

/// How long a waiter keeps its place in the queue without asking again. A waiter asks at least
/// once a second, so only a waiter that crashed keeps its place this long, and holds up the
/// ones behind it for this long at most.
pub(crate) const WAITER_LEASE: Duration = Duration::from_secs(3);

/// A fair lock (Redisson's `RFairLock`): owners get the lock in the order they first asked for
/// it, across every client and process.
///
/// Made by [`Client::fair_lock`]; cheap to clone. Reentrant per [`Owner`] (the current task by
/// default, or [`with_owner`](FairLock::with_owner)). `lock`, `try_lock` and `try_lock_with`, as
/// for [`Lock`](crate::Lock); the [`FairGuard`] renews its lease while it lives unless taken
/// with an explicit lease.
///
/// - **Herd-free**: a release wakes only the first waiter (each waiter listens on a channel of
///   its own), not everybody. When that waiter is of the releasing client, the release wakes
///   it itself and its attempt goes out in the same script call, without a message.
/// - **No stale places**: the queue's deadlines are on the server's clock, and a waiter keeps
///   its place only while it keeps asking (at least once a second); one that crashed holds up
///   the others for 3 s at most, and one that gives up leaves the queue at once.
///
/// ```no_run
/// # async fn demo(client: redlease::Client) -> redlease::Result<()> {
/// let turn = client.fair_lock("printer")?;
/// let guard = turn.lock().await?;
/// // ... first come, first served ...
/// guard.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct FairLock {
    client: Client,
    keys: Arc<FamilyKeys>,
    queue: Arc<str>,
    waiters: Arc<str>,
    wake: Arc<str>,
    /// This client's waiters in the lock's queue, oldest first (kept in the client's
    /// `LocalStates`): a release hands over to the oldest, the first in the whole queue
    /// whenever this client's waiter is first there. It wakes that waiter itself, whose
    /// attempt then rides behind the release in one script call, and the script publishes no
    /// message to it when it is indeed first.
    local: Arc<Arrivals>,
    owner: Option<Owner>,
}

/// A hold of a [`FairLock`]. Release it with [`unlock`](FairGuard::unlock); dropping it releases
/// in the background.
#[must_use = "dropping the guard releases the lock"]
pub struct FairGuard {
    lock: FairLock,
    field: Arc<str>,
    kept: Kept,
    released: bool,
}

impl FairLock {
    pub(crate) fn new(client: Client, name: &str) -> Result<FairLock> {
        let keys = FamilyKeys::new(&client, name, "fair", "wake:")?;
        let queue = format!("{}:queue", keys.key).into();
        let waiters = format!("{}:waiters", keys.key).into();
        let wake = keys.channel.clone();
        Ok(FairLock {
            local: client.inner.local_states.of::<Arrivals>(&keys.key),
            client,
            keys: Arc::new(keys),
            queue,
            waiters,
            wake,
            owner: None,
        })
    }

    /// This handle acquires for `owner` (from any task) instead of the current task.
    pub fn with_owner(mut self, owner: Owner) -> Self {
        self.owner = Some(owner);
        self
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// The Redis hash holding the holder.
    pub fn key(&self) -> &str {
        &self.keys.key
    }

    async fn call(&self, op: &str, field: &str, lease_ms: u64, waiter_ms: u64) -> Result<i64> {
        self.client.inner.check_open()?;
        self.send(op, field, lease_ms, waiter_ms, "", None::<fn()>)
            .await
    }

    /// Gives back one hold of `field` (`checked`: refused once the client shuts down). When
    /// this client has a waiter, the oldest one is woken as soon as the release is queued, so
    /// its attempt rides behind it (granted when it is first in the queue).
    async fn release(&self, field: &str, checked: bool) -> Result<i64> {
        if checked {
            self.client.inner.check_open()?;
        }
        let Some(head) = self.local.oldest_besides(field) else {
            return self.send("release", field, 0, 0, "", None::<fn()>).await;
        };
        let channel = format!("{}{head}", self.wake);
        let subscriber = &self.client.inner.subscriber;
        let wake = move || subscriber.wake_local(&channel);
        self.send("release", field, 0, 0, &head, Some(wake)).await
    }

    /// One call of `lua/fair.lua`, even while the client shuts down; `wake` runs once it is
    /// queued (`Node::family_call_then`), `local_head` as the script's `ARGV[6]`.
    async fn send(
        &self,
        op: &str,
        field: &str,
        lease_ms: u64,
        waiter_ms: u64,
        local_head: &str,
        wake: Option<impl FnOnce()>,
    ) -> Result<i64> {
        let lease = itoa::Buffer::new().format(lease_ms).to_owned();
        let waiter = itoa::Buffer::new().format(waiter_ms).to_owned();
        let keys = [&*self.keys.key, &*self.queue, &*self.waiters];
        let args = [op, field, &lease, &waiter, &*self.wake, local_head];
        self.client
            .inner
            .node
            .family_call_then(&SCRIPT, &keys, &args, wake)
            .await
    }

    /// Takes the lock, waiting as long as it takes; the guard renews its lease while it lives.
    /// The same as `lock_with(LockOptions::new())`.
    ///
    /// # Errors
    /// Redis failures, a key of another kind, [`Error::Shutdown`].
    ///
    /// # Cancel safety
    /// Cancel-safe: dropped while waiting it leaves the queue (in the background); dropped
    /// while its request is on the wire, a grant that arrives is given back.
    pub async fn lock(&self) -> Result<FairGuard> {
        self.lock_with(LockOptions::new()).await
    }

    /// Takes the lock on `options`' terms (see [`try_lock_with`](Self::try_lock_with)).
    ///
    /// # Errors
    /// As [`try_lock_with`](Self::try_lock_with), plus [`Error::Busy`] when a bounded wait ran
    /// out.
    ///
    /// # Cancel safety
    /// As [`lock`](Self::lock).
    pub async fn lock_with(&self, options: LockOptions) -> Result<FairGuard> {
        let got = self.try_lock_with(options).await?;
        options.held(|| self.keys.name.to_string(), got)
    }

    /// Takes the lock if it is free and nobody waits for it; `None` otherwise (a single attempt
    /// takes no place in the queue).
    ///
    /// # Errors
    /// As [`lock`](Self::lock).
    ///
    /// # Cancel safety
    /// As [`lock`](Self::lock).
    pub async fn try_lock(&self) -> Result<Option<FairGuard>> {
        self.try_lock_with(LockOptions::once()).await
    }

    /// Takes the lock on `options`' terms: wait at most `wait` (in the queue), hold at most
    /// `lease` (no renewal); `None` when the wait ran out, and the waiter left the queue.
    ///
    /// # Errors
    /// As [`lock`](Self::lock), [`Error::InvalidDuration`] for a zero or absurd lease or
    /// wait, and [`Error::InvalidArgument`] for permits other than one.
    ///
    /// # Cancel safety
    /// As [`lock`](Self::lock).
    pub async fn try_lock_with(&self, options: LockOptions) -> Result<Option<FairGuard>> {
        let watchdog = self.client.inner.config.watchdog_lease;
        let (lease, wait) = options.terms(watchdog)?;
        let owner = self.owner.unwrap_or_else(Owner::current);
        let field = owner.field(&self.client.inner.id_text);
        let waiter_ms = match wait {
            Wait::Once => 0,
            _ => WAITER_LEASE.as_millis() as u64,
        };
        let place = Place {
            lock: self.clone(),
            field: field.clone(),
            queued: AtomicBool::new(false),
            listed: OnceLock::new(),
        };
        let channel: Arc<str> = format!("{}{field}", self.wake).into();
        let (field_ref, place_ref) = (&field, &place);
        let granted = wait_for(
            &self.client,
            &channel,
            wait,
            Wake::All,
            move || async move {
                let started = Instant::now();
                Ok(match self.attempt(field_ref, lease, waiter_ms).await? {
                    n if n >= 1 => Attempt::Done(started),
                    n => {
                        place_ref.queued.store(waiter_ms > 0, Ordering::Relaxed);
                        if waiter_ms > 0 {
                            place_ref.list();
                        }
                        let ttl = (-2 - n).max(0) as u64;
                        Attempt::Again(Some(Duration::from_millis(ttl + 1)))
                    }
                })
            },
        )
        .await?;
        let Some(started) = granted else {
            return Ok(None);
        };
        // The grant took us out of the queue.
        place.queued.store(false, Ordering::Relaxed);
        drop(place);
        let renew = {
            let (lock, field) = (self.clone(), field.clone());
            let lease_ms = lease.ms();
            move || {
                let (lock, field) = (lock.clone(), field.clone());
                async move { Ok(lock.call("renew", &field, lease_ms, 0).await? == 1) }
            }
        };
        let release = {
            let (lock, field) = (self.clone(), field.clone());
            move || {
                let (lock, field) = (lock.clone(), field.clone());
                async move { lock.release(&field, false).await.map(drop) }
            }
        };
        let name = self.keys.name.clone();
        let kept = Kept::new(&self.client, name, lease, started, renew, release);
        Ok(Some(FairGuard {
            lock: self.clone(),
            field,
            kept,
            released: false,
        }))
    }

    /// One acquisition request; a grant whose caller stopped waiting is given back.
    async fn attempt(&self, field: &Arc<str>, lease: Lease, waiter_ms: u64) -> Result<i64> {
        let (this, request_field) = (self.clone(), field.clone());
        let request = async move {
            this.call("acquire", &request_field, lease.ms(), waiter_ms)
                .await
        };
        let (this, field) = (self.clone(), field.clone());
        let call = FinishOnDrop::new(request, move |outcome: Result<i64>| async move {
            if let Ok(n) = outcome
                && n >= 1
            {
                tracing::debug!(lock = %this.keys.name, "acquire abandoned after the grant; giving it back");
                if let Err(e) = this.release(&field, true).await {
                    tracing::warn!(lock = %this.keys.name, error = %e, "could not give back an abandoned grant; it expires with its lease");
                }
            }
        })
        .tracked(&self.client.inner.background);
        call.await
    }
}

/// A waiter's place in the queue: left (in the background) when its wait ends without the
/// lock, cancelled or timed out, so the owners behind it need not wait out its waiter lease.
/// Listed among the client's [`Arrivals`] from its first refusal until the wait ends.
struct Place {
    lock: FairLock,
    field: Arc<str>,
    queued: AtomicBool,
    listed: OnceLock<Arrival>,
}

impl Place {
    /// Lists this wait among the client's waiters (once).
    fn list(&self) {
        self.listed
            .get_or_init(|| self.lock.local.arrive(&self.field));
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if !self.queued.load(Ordering::Relaxed) {
            return;
        }
        let (lock, field) = (self.lock.clone(), self.field.clone());
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let leave = async move {
                if let Err(e) = lock.call("withdraw", &field, 0, 0).await {
                    tracing::debug!(lock = %lock.keys.name, error = %e, "could not leave the queue; the place expires");
                }
            };
            drop(self.lock.client.inner.background.spawn_on(leave, &handle));
        }
    }
}

impl FairGuard {
    /// Releases this hold; the last one wakes the first waiter.
    ///
    /// # Errors
    /// As [`LockGuard::unlock`](crate::LockGuard::unlock): [`Error::LeaseLost`] when the hold
    /// was lost while held; [`Error::Shutdown`] when the client was shut down (it released
    /// everything); [`Error::Timeout`] or [`Error::Redis`] when Redis failed (the lease then
    /// frees the lock).
    ///
    /// # Cancel safety
    /// Dropping the future still completes the release in the background.
    pub async fn unlock(mut self) -> Result<()> {
        self.released = true;
        let lost = self.kept.is_lost();
        let (lock, field) = (self.lock.clone(), self.field.clone());
        let release = async move { lock.release(&field, true).await };
        let reply = finish_release(&self.lock.client, release).await?;
        if reply < 0 || lost {
            return Err(Error::LeaseLost {
                name: self.lock.keys.name.to_string(),
            });
        }
        Ok(())
    }

    /// Resolves when the hold is known lost (see [`is_lost`](FairGuard::is_lost)).
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.kept.lost()
    }

    /// Whether the hold is known lost: a renewal found it gone, its validity ran out before a
    /// renewal confirmed it (for a fixed lease: the lease ran out), or the client shut down.
    pub fn is_lost(&self) -> bool {
        self.kept.is_lost()
    }

    /// Until when the hold is known valid.
    pub fn valid_until(&self) -> Instant {
        self.kept.valid_until()
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.lock.keys.name
    }
}

impl Drop for FairGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let (lock, field) = (self.lock.clone(), self.field.clone());
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let release = async move {
                if let Err(e) = lock.release(&field, true).await {
                    tracing::warn!(lock = %lock.keys.name, error = %e, "release of a dropped fair lock guard failed; it expires with its lease");
                }
            };
            drop(self.lock.client.inner.background.spawn_on(release, &handle));
        }
    }
}

impl std::fmt::Debug for FairLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairLock")
            .field("name", &self.keys.name)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for FairGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FairGuard")
            .field("name", &self.lock.keys.name)
            .finish_non_exhaustive()
    }
}
