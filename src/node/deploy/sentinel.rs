//! Redis Sentinel: the master found by name through the sentinels, and followed across failovers.
//!
//! redis-rs's sentinel client resolves the master only when asked, and its connections stay
//! pinned to the address found then. Here the command connection lives in a holder
//! ([`SentinelConn`]) that is swapped for one to the new master:
//!
//! - when a command finds the connection refused, or gets `READONLY` / `MASTERDOWN` (a demoted
//!   master): the sentinels are asked again ([`Resolver::resolve`]: `SENTINEL MASTER` on every
//!   sentinel, newest config epoch first, `ROLE` must say master), and `transport.rs` sends the
//!   command again while the caller's limit lasts (only answers that mean it was not run);
//! - when a sentinel announces a failover (`watch.rs`): new commands wait from the leader's
//!   `+selected-slave` to its `+promoted-slave`, then go to the promoted replica.
//!
//! One resolution runs at a time; callers that failed on the connection it replaced just use the
//! new one. The subscriber resolves the master the same way each time it connects, and connects
//! again whenever the holder swaps (`link.rs`).
//!
//! Credentials: those of the URL are the master's; each sentinel is asked with them too, and
//! again without them if it refuses them (sentinels often have no password).

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, ServerErrorKind, Value};

use crate::error::{Error, Result};
use crate::node::shape::server_client;

mod resolver;
mod spec;
mod watch;

pub(crate) use resolver::Resolver;
use resolver::{no_master, refused_credentials};
pub(crate) use spec::{SENTINEL_SCHEME, SentinelSpec};

/// The connection in use and the resolution that made it.
struct Current {
    conn: ConnectionManager,
    /// The master's URL.
    url: String,
    generation: u64,
}

struct Holder {
    resolver: Resolver,
    current: parking_lot::Mutex<Option<Current>>,
    /// One resolution at a time.
    resolving: tokio::sync::Mutex<()>,
    /// Resolutions finished, successful or not: callers that queued behind one take its
    /// outcome instead of asking every sentinel again one after another (while a master is
    /// down and not yet replaced, each resolution finds the same master and swaps nothing).
    resolutions: std::sync::atomic::AtomicU64,
    /// The generation of the connection in use, for the subscriber (`link.rs`): a change ends
    /// its connection, so it connects to the new master.
    switched: tokio::sync::watch::Sender<u64>,
    /// Until when commands wait, while a sentinel is promoting a replica (`watch.rs`): the old
    /// master would accept writes the new one never sees.
    paused: tokio::sync::watch::Sender<Option<tokio::time::Instant>>,
    /// The listeners for the sentinels' announcements (`watch.rs`), which end with the holder.
    listeners: crate::task::OwnedTasks,
}

/// The command connection to the master the sentinels name: cheap to clone (clones share the
/// holder), swapped for one to the new master after a failover.
#[derive(Clone)]
pub(crate) struct SentinelConn(Arc<Holder>);

impl SentinelConn {
    /// A holder that has resolved nothing yet.
    pub(crate) fn new(resolver: Resolver) -> SentinelConn {
        SentinelConn(Arc::new(Holder {
            resolver,
            current: parking_lot::Mutex::new(None),
            resolving: tokio::sync::Mutex::new(()),
            resolutions: std::sync::atomic::AtomicU64::new(0),
            switched: tokio::sync::watch::Sender::new(0),
            paused: tokio::sync::watch::Sender::new(None),
            listeners: crate::task::OwnedTasks::default(),
        }))
    }

    /// Resolves the master now, or (`lazy`) on first use, and starts listening for the
    /// sentinels' failover announcements (`watch.rs`).
    pub(crate) async fn connect(resolver: Resolver, lazy: bool) -> Result<SentinelConn> {
        let conn = SentinelConn::new(resolver);
        watch::spawn(&conn.0);
        if !lazy {
            let timeout = conn.0.resolver.timeout;
            match tokio::time::timeout(timeout, conn.refresh(0)).await {
                Ok(resolved) => resolved?,
                Err(_) => {
                    return Err(Error::Timeout {
                        operation: "connect",
                        timeout,
                    });
                }
            }
        }
        Ok(conn)
    }

    /// The resolution the connection in use came from (0: none yet).
    pub(crate) fn generation(&self) -> u64 {
        self.0.current.lock().as_ref().map_or(0, |c| c.generation)
    }

    /// The URL of the master in use, once resolved.
    pub(crate) fn master_url(&self) -> Option<String> {
        self.0.current.lock().as_ref().map(|c| c.url.clone())
    }

    /// Asks the sentinels again, unless the connection was swapped since `seen` or another
    /// caller's resolution finished while this one waited for its turn, and swaps in a
    /// connection to the master they name.
    pub(crate) async fn refresh(&self, seen: u64) -> Result<()> {
        use std::sync::atomic::Ordering;
        let asked = self.0.resolutions.load(Ordering::Acquire);
        let _turn = self.0.resolving.lock().await;
        if self.generation() != seen || self.0.resolutions.load(Ordering::Acquire) != asked {
            return Ok(());
        }
        // Boxed and erased: a resolution is rare (a failover), and its future (every sentinel
        // asked, a new connection made) would otherwise sit inline in every call's future
        // behind sentinels, and deepen the compiler's `Send` proofs of each of them past its
        // recursion limit in an application's spawned task.
        let resolve: BoxFuture<'_, _> = Box::pin(self.0.resolver.resolve());
        let resolved = resolve.await;
        self.0.resolutions.fetch_add(1, Ordering::AcqRel);
        let (addr, client) = resolved?;
        self.install(seen, &addr, client).await
    }

    /// Moves to `addr`, which a sentinel just announced it promoted, once `ROLE` there says
    /// master: sooner than [`SentinelConn::refresh`], since no sentinel names the new master
    /// before the one that led the failover tells the others.
    pub(crate) async fn promoted(&self, addr: &str) -> Result<()> {
        let _turn = self.0.resolving.lock().await;
        let seen = self.generation();
        let client = self.0.resolver.verify(addr).await?;
        self.install(seen, addr, client).await
    }

    /// Swaps in a connection to the master at `addr` (called under `resolving`), unless it is
    /// the one in use: that connection reconnects by itself.
    async fn install(&self, seen: u64, addr: &str, client: redis::Client) -> Result<()> {
        let url = self.0.resolver.spec.master_url(addr);
        if self.master_url().as_deref() == Some(url.as_str()) {
            return Ok(());
        }
        let timeout = self.0.resolver.timeout;
        let manager = ConnectionManager::new_with_config(client, manager_config(timeout));
        let conn = crate::node::bounded("connect", "", timeout, manager).await?;
        let generation = seen + 1;
        *self.0.current.lock() = Some(Current {
            conn,
            url,
            generation,
        });
        if seen != 0 {
            tracing::info!(master = %self.0.resolver.spec.master, %addr, "following the new Redis master");
            self.0.switched.send_replace(generation);
        }
        self.resume();
        Ok(())
    }

    /// What finds the master.
    pub(crate) fn resolver(&self) -> &Resolver {
        &self.0.resolver
    }

    /// Changes each time the connection is swapped for one to a new master.
    pub(crate) fn switched(&self) -> tokio::sync::watch::Receiver<u64> {
        self.0.switched.subscribe()
    }

    /// The connection in use, resolving the master first when there is none yet (lazy).
    /// Holds new commands back for at most `limit` (a failover has begun), until
    /// [`SentinelConn::resume`].
    pub(crate) fn pause(&self, limit: Duration) {
        self.0
            .paused
            .send_replace(Some(tokio::time::Instant::now() + limit));
    }

    /// Lets commands go again.
    pub(crate) fn resume(&self) {
        self.0
            .paused
            .send_if_modified(|paused| paused.take().is_some());
    }

    /// Waits while commands are held back.
    async fn unpaused(&self) {
        if self.0.paused.borrow().is_none() {
            return;
        }
        let mut paused = self.0.paused.subscribe();
        let Some(until) = *paused.borrow_and_update() else {
            return;
        };
        let resumed = paused.wait_for(Option::is_none);
        let _ = tokio::time::timeout_at(until, resumed).await;
    }

    async fn conn(&self) -> std::result::Result<ConnectionManager, RedisError> {
        self.unpaused().await;
        if let Some(current) = self.0.current.lock().as_ref() {
            return Ok(current.conn.clone());
        }
        self.refresh(0).await.map_err(into_redis)?;
        self.0
            .current
            .lock()
            .as_ref()
            .map(|c| c.conn.clone())
            .ok_or_else(|| into_redis(no_master(&self.0.resolver.spec.master, "not resolved")))
    }
}

/// The command connection's settings, as for one server (`shape::connect`), but with fewer
/// reconnection attempts: after a failover the holder moves on instead.
fn manager_config(timeout: Duration) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(None)
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(100))
}

/// A crate error as redis-rs's, for the connection traits.
pub(crate) fn into_redis(e: Error) -> RedisError {
    match e {
        Error::Redis { source, .. } => source,
        Error::UnknownMaster { name } => RedisError::from((
            ErrorKind::MasterNameNotFoundBySentinel,
            "no sentinel knows the master",
            name,
        )),
        other => RedisError::from((ErrorKind::Io, "no Redis master", other.to_string())),
    }
}

/// Whether a failed command means the master may have moved, and was not run (so it is safe to
/// send it again after asking the sentinels): a refused connection, no master found, or a
/// demoted master's `READONLY` / `MASTERDOWN`.
pub(crate) fn master_moved(e: &Error) -> bool {
    let Error::Redis { source, .. } = e else {
        return false;
    };
    matches!(
        source.kind(),
        ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
    ) || source.is_connection_refusal()
        || source.to_string().contains("no Redis master")
}

/// The connection to one server: named directly, or found through sentinels.
#[derive(Clone)]
pub(crate) enum ServerConn {
    Direct(ConnectionManager),
    Sentinel(SentinelConn),
}

impl ConnectionLike for ServerConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            ServerConn::Direct(conn) => conn.req_packed_command(cmd),
            ServerConn::Sentinel(conn) => conn.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            ServerConn::Direct(conn) => conn.req_packed_commands(pipeline, offset, count),
            ServerConn::Sentinel(conn) => conn.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            ServerConn::Direct(conn) => conn.get_db(),
            ServerConn::Sentinel(conn) => conn.get_db(),
        }
    }
}

impl ConnectionLike for SentinelConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut conn = self.conn().await?;
            conn.req_packed_command(cmd).await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let mut conn = self.conn().await?;
            conn.req_packed_commands(pipeline, offset, count).await
        })
    }

    fn get_db(&self) -> i64 {
        self.0.resolver.spec.db
    }
}
