//! `Lock`: the handle to one named lock, and its public operations (what is done without a
//! guard, reads and operators' writes: `lock/status.rs`). Only these two files hold
//! `impl Lock`; the
//! engine under them is functions called by path, one concern a file:
//!
//! - `acquire.rs`: the acquisition frame (tracing, metrics, this client's turn, the wait loop
//!   of `wait.rs`, the server queue's place withdrawn when the wait ends without the lock);
//! - `waiter.rs`: the lock's waiter in that loop (each attempt, what a refusal leads to);
//! - `attempt.rs`: one cancel-safe request to the server, its undo and retry;
//! - `server_queue.rs`: queueing on the server, and a grant taken from its message;
//! - `contenders.rs`: this client's own contenders (`local_queue.rs`) and the hand-over
//!   from a release of this client;
//! - `grant.rs`: a grant confirmed and registered, the guard made;
//! - `metadata.rs`, `scope.rs`: a hold's metadata, and running a body under the lock.
//!
//! Below the lock and its guard, and shared with them: `release.rs` (holds given back, from
//! `unlock` and from `Drop`), `queue_place.rs`, `local_queue.rs`, `turns.rs` and `wait.rs`.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::config::{Replicas, lease_ms};
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::keys::{HoldKey, LockKeys};
use crate::options::LockOptions;
use crate::owner::Owner;
use crate::shared::Client;
use crate::terms::{Lease, Wait};

mod acquire;
mod attempt;
mod contenders;
mod grant;
mod metadata;
mod scope;
mod server_queue;
mod status;
mod waiter;

pub(crate) use grant::register;
pub use scope::HeldLock;
pub(crate) use status::read_waiters;
pub use status::{Holder, LockStatus, RemainingLease, Waiter};

/// A handle to one named lock of a [`Client`]. Cheap to clone; holds nothing by itself.
///
/// Taking the lock returns a [`LockGuard`]; the lock is released when the guard is unlocked or
/// dropped.
///
/// ```no_run
/// # async fn demo(client: redlease::Client) -> redlease::Result<()> {
/// use std::time::Duration;
/// use redlease::LockOptions;
///
/// let lock = client.lock("inventory:sku-9")?;
/// // Wait as long as it takes; the watchdog keeps the lease alive while `guard` lives.
/// let guard = lock.lock().await?;
/// guard.unlock().await?;
///
/// // Give up after 500 ms; hold for at most 10 s without renewal.
/// let options = LockOptions::new().wait(Duration::from_millis(500)).lease(Duration::from_secs(10));
/// if let Some(guard) = lock.try_lock_with(options).await? {
///     guard.unlock().await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Lock {
    pub(crate) client: Client,
    pub(crate) keys: Arc<LockKeys>,
    pub(crate) owner: Option<Owner>,
    pub(crate) reentrant: bool,
    pub(crate) fenced: bool,
    /// How long the lock stays refused after a lease ran out without a release.
    pub(crate) lock_delay: Option<Duration>,
    pub(crate) watchdog_lease: Option<Duration>,
    pub(crate) replicas: Option<Replicas>,
    /// Every attempt respects the server's queue (a [`FairLock`](crate::FairLock)): a waiter
    /// queues from its first attempt, and a single attempt never takes a free lock while
    /// anybody live is queued (nor queues itself). Always the script's long form.
    pub(crate) strict: bool,
    /// This client's grant channel of the lock, named at its first use ([`Lock::grant_channel`]).
    grant_channel: OnceLock<Arc<str>>,
}

impl Lock {
    pub(crate) fn new(client: Client, name: &str) -> Result<Lock> {
        let keys = LockKeys::new(&client.inner.config.prefix, name)?;
        Ok(Lock {
            client,
            keys: Arc::new(keys),
            owner: None,
            reentrant: true,
            fenced: false,
            lock_delay: None,
            watchdog_lease: None,
            replicas: None,
            strict: false,
            grant_channel: OnceLock::new(),
        })
    }

    /// Acquire on behalf of `owner` instead of the current task or thread.
    ///
    /// Use one explicit owner per logical holder when futures run concurrently inside one task
    /// (see *Reentrancy* in the crate docs).
    #[must_use]
    pub fn with_owner(mut self, owner: Owner) -> Self {
        self.owner = Some(owner);
        self
    }

    /// Whether the same owner may take the lock again while holding it. Defaults to `true`;
    /// with `false`, a second acquisition by the holder fails with [`Error::WouldDeadlock`].
    #[must_use]
    pub fn reentrant(mut self, reentrant: bool) -> Self {
        self.reentrant = reentrant;
        self
    }

    /// Hand out fencing tokens: every first acquisition gets a number greater than every earlier
    /// one for this name ([`LockGuard::fencing_token`]). Defaults to `false`.
    ///
    /// A token is the larger of the last token plus one and the server's clock in microseconds
    /// (`TIME`, read inside the acquiring script). Its counter key `P:{N}:fence` lives as long as
    /// the lease plus [`Config::fence_grace`](crate::Config::fence_grace) (60 s by default), so
    /// fencing costs memory only for locks in use, and a token made after the counter expired is
    /// still above every earlier one. Tokens therefore also stay increasing across a failover
    /// that lost the counter's last write, as long as the promoted replica's clock is not behind
    /// the old primary's by more than the failover took. Tokens from versions that counted
    /// 1, 2, 3, ... are far below the clock, so an upgrade needs no data migration; upgrade
    /// every client before relying on tokens, since an older client counts up from an expired
    /// counter's 0.
    #[must_use]
    pub fn fenced(mut self, fenced: bool) -> Self {
        self.fenced = fenced;
        self
    }

    /// After a lease that ran out without a release (a holder that crashed, paused or lost its
    /// connection), keep the lock refused for `delay` more, so writes the old holder still had
    /// in flight land before the next holder starts (Chubby's and Consul's lock-delay). A
    /// release or [`force_unlock`](Lock::force_unlock) frees the lock at once, as always.
    /// Defaults to none; [`Duration::ZERO`] turns it off.
    ///
    /// Decided on the server's clock inside the scripts: the holder keeps a marker
    /// `P:{N}:delay` alive for its lease plus the delay (with every renewal), and a release
    /// deletes it. The marker binds **every** acquisition of the name, whatever its own setting:
    /// a [`Lock`] or [`FairLock`](crate::FairLock) handle without a delay, a
    /// [`MultiLock`](crate::MultiLock) or [`RedLock`](crate::RedLock) member, an
    /// [`Election`](crate::Election) candidate, `redlease run` without `--lock-delay`. The delay
    /// is the holder's setting, as in Chubby: it protects the resource from the stale holder,
    /// whoever comes next. Waiters sleep until the delay ends, without polling. A handle with a
    /// delay takes no local hand-over from its own client's releases.
    ///
    /// # Errors
    /// A delay over [`MAX_DURATION`](crate::MAX_DURATION) fails each acquisition with
    /// [`Error::InvalidDuration`].
    #[must_use]
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = (!delay.is_zero()).then_some(delay);
        self
    }

    /// The lock-delay in whole milliseconds (at least 1 when set), 0 for none.
    pub(crate) fn delay_ms(&self) -> u64 {
        self.lock_delay.map_or(0, |d| {
            (d.as_millis().min(u128::from(u64::MAX)) as u64).max(1)
        })
    }

    /// Rejects an absurd lock-delay before anything is written.
    pub(crate) fn check_lock_delay(&self) -> Result<()> {
        match self.lock_delay {
            Some(d) => crate::config::check_duration("lock delay", d).map(|_| ()),
            None => Ok(()),
        }
    }

    /// The watchdog lease of this lock, instead of the client's
    /// [`Config::watchdog_lease`](crate::Config::watchdog_lease).
    #[must_use]
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.watchdog_lease = Some(lease);
        self
    }

    /// Whether this lock's acquisitions and renewals wait for replicas to acknowledge them,
    /// instead of the client's [`Config::replicas`](crate::Config::replicas). See [`Replicas`]
    /// and `docs/replicas.md`.
    ///
    /// An acquisition acknowledged by too few replicas is given back and fails with
    /// [`Error::ReplicasUnacknowledged`]: `lock()` does not retry it (missing replicas are a
    /// state of the deployment, not contention for the lock). A watchdog renewal acknowledged
    /// by too few leaves the guard [at risk](LockGuard::is_at_risk) and, if that lasts past
    /// its validity, lost.
    #[must_use]
    pub fn replicas(mut self, replicas: Replicas) -> Self {
        self.replicas = Some(replicas);
        self
    }

    /// The replica acknowledgement this lock asks for: its own, else the client's.
    pub(crate) fn replicas_wanted(&self) -> Replicas {
        self.replicas.unwrap_or(self.client.inner.config.replicas)
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.keys.name
    }

    /// The Redis key of the lock's hash.
    pub fn key(&self) -> &str {
        &self.keys.hash
    }

    /// The client this lock belongs to.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// This client's grant channel of the lock (`P:{N}:unlock:<client id>`, see
    /// `lock/server_queue.rs`): named once per handle, not at every acquisition.
    pub(crate) fn grant_channel(&self) -> &Arc<str> {
        self.grant_channel
            .get_or_init(|| self.keys.grant_channel(&self.client.inner.id_text))
    }

    /// This lock acting for the owner that is current now (the calling task unless explicit), so
    /// attempts polled later or from a renewal task act for the same owner.
    pub(crate) fn pinned(&self) -> Lock {
        let mut lock = self.clone();
        lock.owner = Some(self.owner());
        lock
    }

    /// The server this lock's client talks to (`host:port`; behind Sentinel, the sentinels and
    /// the master's name).
    pub(crate) fn server_addr(&self) -> String {
        self.client.inner.node.keyspace().server.clone()
    }

    /// `host:port/db`: one logical keyspace.
    pub(crate) fn keyspace(&self) -> String {
        let keyspace = self.client.inner.node.keyspace();
        format!("{}/{}", keyspace.server, keyspace.db)
    }

    /// Who acquires through this handle here: see [`Owner`] for the order of the rules.
    pub(crate) fn owner(&self) -> Owner {
        if let Some(owner) = self.owner {
            return owner;
        }
        let inner = &self.client.inner;
        let holds = |owner: Owner| {
            let field = owner.field(&inner.id_text);
            (inner.holds)
                .get(&HoldKey::new(&self.keys.hash, &field))
                .is_some()
        };
        crate::owner::scope_owner(holds).unwrap_or_else(Owner::current_task_or_thread)
    }

    pub(crate) fn field(&self) -> Arc<str> {
        self.owner().field(&self.client.inner.id_text)
    }

    /// The checked lease and wait of `options` for this lock (its watchdog lease when none
    /// is given).
    pub(crate) fn terms_of(&self, options: &LockOptions) -> Result<(Lease, Wait)> {
        options.lock_terms(self.watchdog()?.duration())
    }

    /// This lock's watchdog lease (its own, else the client's), checked.
    pub(crate) fn watchdog(&self) -> Result<Lease> {
        let lease = self
            .watchdog_lease
            .unwrap_or(self.client.inner.config.watchdog_lease);
        lease_ms("watchdog lease", lease)?;
        Ok(Lease::Watchdog(lease))
    }

    /// Waits until the lock is acquired, then keeps it with the watchdog while the guard lives.
    /// The same as `lock_with(LockOptions::new())`.
    ///
    /// # Errors
    /// [`Error::WouldDeadlock`] when non-reentrant and already held by this owner;
    /// [`Error::WrongType`] when the key holds something else; [`Error::Timeout`] or
    /// [`Error::Redis`] when Redis fails (the wait does not hide errors); [`Error::Shutdown`].
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future leaves no hold and no renewal behind, even when the
    /// server granted the lock just as the future was dropped (that grant is given back).
    pub async fn lock(&self) -> Result<LockGuard> {
        self.lock_with(LockOptions::new()).await
    }

    /// Takes the lock as `options` say: waits at most [`wait`](LockOptions::wait) (without
    /// limit by default) and holds it for [`lease`](LockOptions::lease) without renewal (kept
    /// by the watchdog by default). The type's documentation has an example.
    ///
    /// # Errors
    /// As [`Lock::lock`], plus [`Error::Busy`] when a bounded wait ran out,
    /// [`Error::InvalidDuration`] for a zero or absurd lease or an absurd wait, and
    /// [`Error::InvalidArgument`] for permits other than one.
    ///
    /// # Cancel safety
    /// As [`Lock::lock`].
    pub async fn lock_with(&self, options: LockOptions) -> Result<LockGuard> {
        let got = self.try_lock_with(options).await?;
        options.held(|| self.keys.name.to_string(), got)
    }

    /// One attempt: the guard if the lock was free (or already held by this owner), else `None`.
    /// The same as `try_lock_with(LockOptions::new().wait(Duration::ZERO))`.
    ///
    /// # Errors
    /// As [`Lock::lock`].
    ///
    /// # Cancel safety
    /// As [`Lock::lock`].
    pub async fn try_lock(&self) -> Result<Option<LockGuard>> {
        self.try_lock_with(LockOptions::once()).await
    }

    /// Takes the lock as `options` say (see [`Lock::lock_with`]): `None` when the wait ran out.
    /// A zero [`wait`](LockOptions::wait) makes one attempt.
    ///
    /// # Errors
    /// As [`Lock::lock_with`], without [`Error::Busy`].
    ///
    /// # Cancel safety
    /// As [`Lock::lock`].
    pub async fn try_lock_with(&self, options: LockOptions) -> Result<Option<LockGuard>> {
        let (lease, wait) = self.terms_of(&options)?;
        let metadata = options.checked_metadata()?;
        let got = acquire::take(self, lease, wait).await?;
        metadata::stored_with(self, got, metadata).await
    }

    /// Waits for the lock, runs `body` under it as **its own owner**, and releases it when the
    /// body ends. The safe way to lock in async code.
    ///
    /// The body is a *lock scope*: acquisitions of the same lock inside it (nested `run`s, or
    /// `lock()` on any handle of this lock without an explicit owner) re-enter, while bodies
    /// running concurrently in one task — `join!`, `select!`, `for_each_concurrent`,
    /// `buffer_unordered` — exclude each other, as separate tasks would. A task spawned from the
    /// body is a new owner.
    ///
    /// The lease is kept by the watchdog. If it is lost anyway (Redis unreachable past the
    /// lease, the key deleted or expired), the body is **cancelled** — dropped at its next
    /// `.await` — and `run` returns [`Error::LeaseLost`]: work that must not go on without the
    /// lock stops. [`HeldLock::lost`] tells work the body hands elsewhere.
    ///
    /// ```no_run
    /// # async fn demo(client: redlease::Client) -> redlease::Result<()> {
    /// use futures_util::StreamExt;
    ///
    /// // 16 orders at a time in this one task; orders of one account never overlap.
    /// futures_util::stream::iter(0..1_000u32)
    ///     .for_each_concurrent(16, |order| {
    ///         let client = client.clone();
    ///         async move {
    ///             let account = client.lock(&format!("account:{}", order % 4)).unwrap();
    ///             account.run(|_held| async { /* debit, credit */ }).await.unwrap();
    ///         }
    ///     })
    ///     .await;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Lock::lock`] for taking the lock; [`Error::LeaseLost`] when the lease was lost
    /// while the body ran (the body was cancelled). A release that fails after the body
    /// finished does not hide its result: it is logged, and the lease frees the key (the
    /// watchdog no longer renews it).
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future drops the body and releases the lock in the background
    /// (or gives back a grant still on its way).
    pub async fn run<F, Fut, T>(&self, body: F) -> Result<T>
    where
        F: FnOnce(HeldLock) -> Fut,
        Fut: Future<Output = T>,
    {
        self.try_run(LockOptions::new(), body)
            .await?
            .ok_or(Error::Shutdown)
    }

    /// [`Lock::run`] with a bounded wait or a fixed lease: `Ok(None)` when the wait ran out (the
    /// body did not run).
    ///
    /// ```no_run
    /// # async fn demo(lock: redlease::Lock) -> redlease::Result<()> {
    /// use std::time::Duration;
    /// use redlease::LockOptions;
    ///
    /// let once = LockOptions::new().wait(Duration::ZERO);
    /// match lock.try_run(once, |_held| async { 42 }).await? {
    ///     Some(answer) => assert_eq!(answer, 42),
    ///     None => println!("busy; another instance does it"),
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Lock::run`], plus [`Error::InvalidDuration`] for a bad wait or lease.
    ///
    /// # Cancel safety
    /// As [`Lock::run`].
    pub async fn try_run<F, Fut, T>(&self, options: LockOptions, body: F) -> Result<Option<T>>
    where
        F: FnOnce(HeldLock) -> Fut,
        Fut: Future<Output = T>,
    {
        let terms = self.terms_of(&options)?;
        let metadata = options.checked_metadata()?;
        scope::run(self, terms, metadata, body).await
    }

    /// Takes the lock on `lease` terms, waiting as `wait` allows (`lock/acquire.rs`): the
    /// guard, or `None` when the wait ran out.
    ///
    /// Not an `async fn`: the frame's future itself, one future fewer in every caller's stack,
    /// which the compiler walks to prove it `Send` (up to a recursion limit that an election
    /// spawned by an application reaches).
    pub(crate) fn acquire(
        &self,
        lease: Lease,
        wait: Wait,
    ) -> impl Future<Output = Result<Option<LockGuard>>> + Send + '_ {
        acquire::take(self, lease, wait)
    }
}

impl std::fmt::Debug for Lock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lock")
            .field("name", &self.keys.name)
            .field("owner", &self.owner)
            .field("reentrant", &self.reentrant)
            .field("fenced", &self.fenced)
            .field("lock_delay", &self.lock_delay)
            .field("strict", &self.strict)
            .finish_non_exhaustive()
    }
}
