//! `Client`'s public API: connecting (`ClientBuilder`), the lock kinds it hands out, renewal,
//! shutdown and the operator's views. The state behind it is in `shared.rs`.

use std::sync::Arc;
use std::time::Duration;

use uuid::Uuid;

use crate::config::{Config, Replicas, WaitBy};
use crate::election::Election;
#[cfg(doc)]
use crate::error::Error;
use crate::error::Result;
use crate::family::{CountDownLatch, FairLock, PermitSemaphore, ReadWriteLock, Semaphore};
use crate::identity::{self, ClientInfo};
use crate::lock::Lock;
use crate::node::{Dial, Node, Target, denied};
use crate::shared::{Client, Inner};
use crate::telemetry::{LockLabel, LostReason};
use crate::watchdog::{self, RenewStats};

mod connection;
mod deployments;

/// Builds a [`Client`]; see [`Client::builder`].
#[derive(Debug, Clone)]
#[must_use]
pub struct ClientBuilder {
    target: Target,
    config: Config,
    lazy: bool,
    dial: Dial,
    check_rights: bool,
}

impl ClientBuilder {
    /// Default settings for `target`.
    pub(super) fn new(target: Target) -> ClientBuilder {
        ClientBuilder {
            target,
            config: Config::default(),
            lazy: false,
            dial: Dial::default(),
            check_rights: true,
        }
    }

    /// Prefix of every key and channel. Defaults to `"redlease"`.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.config.prefix = prefix.into();
        self
    }

    /// Lease of watchdog-kept locks (renewed every third of it). Defaults to 30 seconds.
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.config.watchdog_lease = lease;
        self
    }

    /// How long a fencing counter outlives the lease it was last written with; see
    /// [`Config::fence_grace`]. Defaults to 60 seconds.
    pub fn fence_grace(mut self, grace: Duration) -> Self {
        self.config.fence_grace = grace;
        self
    }

    /// How long a lock given to a queued waiter stays its own until claimed; see
    /// [`Config::claim_lease`]. Defaults to 2 seconds.
    pub fn claim_lease(mut self, lease: Duration) -> Self {
        self.config.claim_lease = lease;
        self
    }

    /// How long a lock's channel stays subscribed after its last waiter left; see
    /// [`Config::channel_linger`]. Defaults to 500 milliseconds; zero unsubscribes at once.
    pub fn channel_linger(mut self, linger: Duration) -> Self {
        self.config.channel_linger = linger;
        self
    }

    /// Whether the server tells this client at once when a held lock's key is deleted,
    /// flushed, evicted or forced; see [`Config::loss_notice`]. Defaults to `true`; switch it
    /// off for servers or proxies without `CLIENT TRACKING`.
    pub fn loss_notice(mut self, on: bool) -> Self {
        self.config.loss_notice = on;
        self
    }

    /// How long after its grant a hold is armed for the loss notice; see
    /// [`Config::loss_notice_delay`]. Defaults to 10 milliseconds.
    pub fn loss_notice_delay(mut self, delay: Duration) -> Self {
        self.config.loss_notice_delay = delay;
        self
    }

    /// Limit for connecting and for each round trip. Defaults to 2 seconds.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.config.timeout = timeout;
        self
    }

    /// Connect on first use instead of in [`build`](ClientBuilder::build), so a server that
    /// is down at start-up fails only the operations that need it (and later ones succeed once
    /// it is up). Useful for RedLock, whose quorum is counted over every node given, reachable
    /// or not. Defaults to `false`: `build` fails when the server cannot be reached.
    pub fn lazy(mut self, lazy: bool) -> Self {
        self.lazy = lazy;
        self
    }

    /// How many times a release is retried when its reply was lost (the retry is idempotent).
    /// Defaults to 2.
    pub fn release_retries(mut self, retries: u32) -> Self {
        self.config.release_retries = retries;
        self
    }

    /// Safety margin subtracted from every lease when computing how long a lock is known
    /// valid, as a fraction of the lease (2 ms are added on top); from 0.0 to below 0.5.
    /// Defaults to 0.01.
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.config.drift_factor = factor;
        self
    }

    /// How waiters of every lock kind learn that what they wait for may be free: pub/sub
    /// messages (the default) or, for proxies without pub/sub, polling with backoff
    /// ([`WaitBy::POLLING`]).
    ///
    /// ```no_run
    /// # async fn demo() -> redlease::Result<()> {
    /// let client = redlease::Client::builder("redis://proxy:6379")
    ///     .wait_by(redlease::WaitBy::POLLING)
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn wait_by(mut self, wait_by: WaitBy) -> Self {
        self.config.wait_by = wait_by;
        self
    }

    /// Whether the locks of this client wait for replicas to acknowledge their acquisitions
    /// and renewals (`WAIT`); [`Lock::replicas`] overrides it per lock. Defaults to
    /// [`Replicas::Off`] (no `WAIT` is sent).
    ///
    /// ```no_run
    /// # async fn demo() -> redlease::Result<()> {
    /// use std::time::Duration;
    ///
    /// let client = redlease::Client::builder("redis://primary:6379")
    ///     .replicas(redlease::Replicas::Wait { replicas: 1, timeout: Duration::from_millis(100) })
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn replicas(mut self, replicas: Replicas) -> Self {
        self.config.replicas = replicas;
        self
    }

    /// Labels this client's per-lock metrics (acquire wait, contention, `waiting`, `held`,
    /// hold time, leases lost) with `lock = group(name)`. Off by default: without it those
    /// metrics have one series per kind (and outcome or reason), whatever the lock names.
    ///
    /// Every distinct value is a series of its own in your metrics backend for as long as the
    /// process lives, so map names to a few groups: `orders:42` and `orders:43` both to
    /// `orders`. Returning the name itself is safe only when the set of names is small and
    /// fixed. `group` runs on every acquisition and grant, so keep it cheap.
    ///
    /// ```no_run
    /// # async fn demo() -> redlease::Result<()> {
    /// let client = redlease::Client::builder("redis://127.0.0.1:6379")
    ///     // `orders:42` → `orders`, `invoice` → `invoice`.
    ///     .lock_label(|name| name.split(':').next().unwrap_or(name).to_owned())
    ///     .build()
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn lock_label(mut self, group: impl Fn(&str) -> String + Send + Sync + 'static) -> Self {
        self.config.lock_label = LockLabel::mapped(group);
        self
    }

    /// Connects and starts the watchdog.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] or [`Error::InvalidDuration`] for a bad URL or setting;
    /// [`Error::Timeout`] or [`Error::Redis`] when the server cannot be reached within the
    /// timeout; [`Error::UnknownMaster`] when no sentinel knows the master's name;
    /// [`Error::Tls`] when the TLS handshake fails (an untrusted server certificate, a
    /// refused client certificate); [`Error::NoPermission`] when the Redis user lacks a right
    /// this crate needs (see [`check_rights`](ClientBuilder::check_rights)); [`Error::Auth`]
    /// when the server refuses the credentials (none given, or wrong); [`Error::NoRuntime`]
    /// when polled outside a tokio runtime.
    pub async fn build(self) -> Result<Client> {
        crate::task::in_runtime()?;
        self.config.validate()?;
        if let Some(risk) = self.config.risks() {
            tracing::warn!("{risk}");
        }
        let mut node = Node::connect(&self.target, self.config.timeout, self.lazy, &self.dial)
            .await
            .map_err(|e| denied(e, &self.config.prefix))?;
        node.set_fence_grace(self.config.fence_grace);
        node.report_server_warnings(self.config.refuse_evicting_servers)?;
        if self.check_rights {
            let pubsub = self.config.wait_by == WaitBy::PubSub;
            if self.lazy {
                node.check_rights_on_first_use(&self.config.prefix, pubsub);
            } else {
                node.check_rights(&self.config.prefix, pubsub).await?;
            }
        }
        let id = Uuid::new_v4();
        let id_text: Arc<str> = id.to_string().into();
        let me = ClientInfo::this_process(&id_text);
        if !self.lazy {
            // Announced now so operators see who holds what at once; the watchdog refreshes it.
            let ttl = self.config.watchdog_lease + Duration::from_secs(1);
            let announced = identity::announce(&node, &self.config.prefix, &me, ttl).await;
            if let Err(e) = announced {
                tracing::warn!(error = %e, "could not announce this client; lock holders will be shown by id only");
            }
        }
        let inner = Inner::new(id, me, self.config, node);
        let _ = inner.dialed.set((self.target, self.dial));
        inner.watchdog.start(watchdog::spawn(&inner));
        Ok(Client { inner })
    }
}

impl ClientBuilder {
    /// A builder for another client of the deployment `client` connected to, with its
    /// settings (connected at once; its rights are not checked again).
    #[cfg(feature = "testing")]
    pub(crate) fn like(client: &Client) -> Option<ClientBuilder> {
        let (target, dial) = client.inner.dialed.get()?.clone();
        Some(ClientBuilder {
            target,
            config: client.inner.config.clone(),
            lazy: false,
            dial,
            check_rights: false,
        })
    }
}

impl Client {
    /// Connects with the default [`Config`].
    ///
    /// # Errors
    /// As [`ClientBuilder::build`].
    pub async fn connect(url: &str) -> Result<Client> {
        Client::builder(url).build().await
    }

    /// A builder for a client of the server at `url` (`redis://[user:pass@]host:port[/db]`).
    ///
    /// A URL of the form `redis+cluster://[user:pass@]host:port[,host:port...]` names a Redis
    /// Cluster by some of its nodes instead, as [`builder_cluster`](Client::builder_cluster)
    /// does (the credentials and any `?query` apply to every node); and a URL of the form
    /// `redis+sentinel://[user:pass@]host:port[,host:port...]/<master-name>[/db][?query]` names
    /// a master through Redis Sentinel, as [`builder_sentinel`](Client::builder_sentinel) does.
    pub fn builder(url: impl Into<String>) -> ClientBuilder {
        ClientBuilder::new(Target::parse(&url.into()))
    }

    /// A handle to the lock `name`. Nothing is sent to Redis until you use it.
    ///
    /// Names are UTF-8, 1 to 4096 bytes, and must not start with `}` (the name becomes the
    /// Redis Cluster hash tag of the lock's keys).
    ///
    /// # Errors
    /// [`Error::InvalidName`] for an empty, too long or `}`-led name.
    pub fn lock(&self, name: &str) -> Result<Lock> {
        Lock::new(self.clone(), name)
    }

    /// A handle on the counting semaphore `name` (see [`Semaphore`]).
    ///
    /// # Errors
    /// [`Error::InvalidName`] for an empty or too long name.
    pub fn semaphore(&self, name: &str) -> Result<Semaphore> {
        Semaphore::new(self.clone(), name)
    }

    /// A handle on the semaphore with expiring permits `name` (see [`PermitSemaphore`]).
    ///
    /// # Errors
    /// [`Error::InvalidName`] for an empty or too long name.
    pub fn permit_semaphore(&self, name: &str) -> Result<PermitSemaphore> {
        PermitSemaphore::new(self.clone(), name)
    }

    /// A handle on the fair (first come, first served) lock `name` (see [`FairLock`]).
    ///
    /// # Errors
    /// [`Error::InvalidName`] for an empty or too long name.
    pub fn fair_lock(&self, name: &str) -> Result<FairLock> {
        FairLock::new(self.clone(), name)
    }

    /// A handle on the count-down latch `name` (see [`CountDownLatch`]).
    ///
    /// # Errors
    /// [`Error::InvalidName`] for an empty or too long name.
    pub fn count_down_latch(&self, name: &str) -> Result<CountDownLatch> {
        CountDownLatch::new(self.clone(), name)
    }

    /// A handle on the election `name` (see [`Election`]): candidates campaign for it, the
    /// winner leads with a term that is its fencing token, and anyone can ask who leads or
    /// observe the changes. The election uses the lock `name` (and keys beside it).
    ///
    /// # Errors
    /// [`Error::InvalidName`] for an empty, too long or `}`-led name.
    pub fn election(&self, name: &str) -> Result<Election> {
        Election::new(self.clone(), name)
    }

    /// A handle on the read-write lock `name` (see [`ReadWriteLock`]).
    ///
    /// # Errors
    /// [`Error::InvalidName`] for an empty or too long name.
    pub fn read_write_lock(&self, name: &str) -> Result<ReadWriteLock> {
        ReadWriteLock::new(self.clone(), name)
    }

    /// This client's id, the first part of every owner field it writes.
    pub fn id(&self) -> Uuid {
        self.inner.id
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// How many holds this client keeps now, every kind: one per (lock, owner) of the
    /// reentrant locks however often it was re-entered, one per family hold (a read-write
    /// lock's read hold shared by this client's readers counts once).
    pub fn held_count(&self) -> usize {
        self.inner.holds.len()
    }

    /// Renews every watchdog-kept lock now, as one watchdog tick would, and reports what it
    /// did. Meant for benchmarks and diagnostics; the watchdog runs on its own.
    ///
    /// # Errors
    /// Never for a failed batch (those count in [`RenewStats::failed_batches`]); only
    /// [`Error::Shutdown`].
    pub async fn renew_now(&self) -> Result<RenewStats> {
        self.inner.check_open()?;
        Ok(watchdog::renew_all(&self.inner).await)
    }

    /// Releases every hold of this client (every lock kind: locks, fair locks, read-write and
    /// permit holds), stops the watchdog and the subscriber, and makes every later operation fail with
    /// [`Error::Shutdown`]. Guards still alive then report themselves lost (their `lost()`
    /// resolves) and [`Error::Shutdown`] from `unlock`, every kind alike. Plain [`Semaphore`]
    /// permits have no owner and stay taken.
    ///
    /// # Errors
    /// The first error met while releasing; the remaining holds are released anyway and the
    /// tasks are stopped in every case.
    pub async fn shutdown(&self) -> Result<()> {
        if !self.inner.begin_shutdown() {
            return Ok(());
        }
        // Wake every waiter of this client: each finds the client shut down and gives up.
        self.inner.local_queues.close_all();
        self.inner.subscriber.wake_all();
        // Let releases and give-backs already under way finish first, within the timeout.
        self.inner.background.close();
        let pending = self.inner.background.wait();
        if tokio::time::timeout(self.inner.config.timeout, pending)
            .await
            .is_err()
        {
            tracing::warn!("shutdown: background releases still running after the timeout");
        }
        // The usual release path, retries on a dropped connection included; everything the
        // server counts for each hold goes (adopted holds too).
        let drained = self.inner.holds.drain();
        // Their guards no longer hold them, as the family's guards are told below.
        for (hold, _) in &drained.locks {
            hold.mark_lost(LostReason::Shutdown, "the client shut down");
        }
        let releases = drained.locks.into_iter().map(|(hold, guards)| async move {
            let holds = hold.server_count(guards.max(1));
            crate::release::give_back(self, &hold.keys, &hold.field, hold.lease_ms, holds).await
        });
        // The lock family's guards still alive: each is told it is lost, then released.
        let family = drained.family.into_iter().map(|hold| hold.give_back());
        let (locks, family) = futures_util::future::join(
            futures_util::future::join_all(releases),
            futures_util::future::join_all(family),
        )
        .await;
        let lock_errors = locks.into_iter().filter_map(Result::err);
        let first_error = lock_errors
            .chain(family.into_iter().filter_map(Result::err))
            .next();
        self.inner.watchdog.stop();
        let inner = &self.inner;
        if let Err(e) = identity::withdraw(&inner.node, &inner.config.prefix, &inner.me).await {
            tracing::debug!(error = %e, "could not withdraw this client's announcement; it expires");
        }
        self.inner.subscriber.stop();
        first_error.map_or(Ok(()), Err)
    }

    /// The names of the locks that are held now, whose names match the glob `pattern` (`*` for
    /// all), at most `limit`: a `SCAN` of the server, or of every primary of a cluster, for
    /// operators (`redlease list`). Not a snapshot: locks taken or released during the scan
    /// may or may not show.
    ///
    /// ```no_run
    /// # async fn demo(client: redlease::Client) -> redlease::Result<()> {
    /// for name in client.held_locks("orders:*", 100).await? {
    ///     let status = client.lock(&name)?.status().await?;
    ///     println!("{name}: {:?}", status.holders);
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`Error::Timeout`] or [`Error::Redis`] when a server fails.
    pub async fn held_locks(&self, pattern: &str, limit: usize) -> Result<Vec<String>> {
        self.inner.check_open()?;
        let prefix = &self.inner.config.prefix;
        let keys = self
            .inner
            .node
            .scan_hashes(&format!("{prefix}:{{{pattern}}}"), limit)
            .await?;
        let head = format!("{prefix}:{{");
        let mut names: Vec<String> = keys
            .iter()
            .filter_map(|key| key.strip_prefix(&head)?.strip_suffix('}'))
            .map(str::to_owned)
            .collect();
        names.sort_unstable();
        Ok(names)
    }

    /// Sends one raw command with the client's timeout (for tools and tests).
    ///
    /// # Errors
    /// [`Error::Redis`] or [`Error::Timeout`].
    pub async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        self.inner.node.query(cmd).await
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.inner.id)
            .field("prefix", &self.inner.config.prefix)
            .finish_non_exhaustive()
    }
}
