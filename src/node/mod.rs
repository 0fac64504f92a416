//! One Redis deployment the client talks to, and the typed script calls on it.
//!
//! This is the only place that knows the connection type. Lock logic calls these methods, so
//! Redis Cluster or Sentinel can be added here (every script touches one hash-tagged slot)
//! without touching it. The lock scripts' calls, alone and coalesced, are in `lock_calls.rs`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, RedisResult};

use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::scripts;

mod lock_calls;

use lock_calls::Batches;
pub(crate) use lock_calls::{Latch, ReleaseArgs, Successor, acquire_args};

/// Names one release request (`<client uuid>:<n>`), so a retry of it is recognised.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestId<'a> {
    pub client: &'a Arc<str>,
    pub n: u64,
}

/// One renewal request of the watchdog's batch.
pub(crate) struct Renewal<'a> {
    pub hash: &'a str,
    pub field: &'a str,
    pub lease_ms: u64,
}

/// The server's view of one lock, for `status` and introspection.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    pub owners: Vec<(String, u64)>,
    pub ttl: Option<Duration>,
    pub fence: Option<u64>,
}

#[derive(Clone)]
pub(crate) struct Node {
    conn: ConnectionManager,
    client: redis::Client,
    timeout: Duration,
    batches: Arc<Batches>,
}

impl Node {
    /// Connects now, or (`lazy`) on first use so that a server that is down at start-up
    /// only fails the operations that need it.
    pub async fn connect(url: &str, timeout: Duration, lazy: bool) -> Result<Node> {
        let client = redis::Client::open(url)
            .map_err(|e| Error::InvalidArgument(format!("bad Redis URL `{url}`: {e}")))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            // No response timeout here: every call below is bounded by `bounded`, and an
            // abandoned acquire must be able to wait longer for its reply, to give back a late
            // grant (see `Lock::attempt`). redis-rs's limit was only a timer around the reply.
            .set_response_timeout(None)
            // Reconnection is retried on the next command anyway; a long retry chain would
            // only stretch the time a caller waits for a down server.
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let conn = if lazy {
            ConnectionManager::new_lazy_with_config(client.clone(), config)
                .map_err(|e| Error::redis("connect", "", e))?
        } else {
            let connect = ConnectionManager::new_with_config(client.clone(), config);
            bounded("connect", "", timeout, connect).await?
        };
        Ok(Node {
            conn,
            client,
            timeout,
            batches: Arc::default(),
        })
    }

    pub fn redis_client(&self) -> &redis::Client {
        &self.client
    }

    /// Renews a batch of leases in one round trip; one flag per lock, in order.
    pub async fn renew(&self, batch: &[Renewal<'_>]) -> Result<Vec<bool>> {
        let bytes: usize = batch.iter().map(|r| r.hash.len() + r.field.len() + 8).sum();
        let mut cmd = evalsha(&scripts::RENEW, batch.len(), 2 * batch.len(), bytes);
        // KEYS: the hashes; ARGV: field and lease of each, in the same order.
        for r in batch {
            cmd.arg(r.hash);
        }
        for r in batch {
            cmd.arg(r.field).arg(r.lease_ms);
        }
        let reply: Vec<i64> = self
            .eval_retried("renew", "", &scripts::RENEW, &cmd)
            .await?;
        if reply.len() != batch.len() {
            return Err(Error::Protocol {
                script: "renew",
                reply: format!("{reply:?}"),
            });
        }
        Ok(reply.into_iter().map(|flag| flag == 1).collect())
    }

    pub async fn force_release(&self, keys: &LockKeys) -> Result<bool> {
        let mut cmd = evalsha(&scripts::FORCE_RELEASE, 2, 0, 2 * keys.hash.len() + 8);
        cmd.arg(&*keys.hash).arg(keys.channel());
        let reply: i64 = self
            .eval_retried("force unlock", &keys.hash, &scripts::FORCE_RELEASE, &cmd)
            .await?;
        Ok(reply == 1)
    }

    /// Raises the lock's fencing counter to at least `token` (RedLock); the counter after.
    pub async fn raise_fence(&self, keys: &LockKeys, token: u64) -> Result<u64> {
        let mut cmd = evalsha(&scripts::RAISE_FENCE, 1, 1, keys.hash.len() + 16);
        cmd.arg(keys.fence()).arg(token);
        self.eval_retried("raise fence", &keys.hash, &scripts::RAISE_FENCE, &cmd)
            .await
    }

    /// Owners, remaining lease and fencing counter, read in one pipelined round trip.
    pub async fn snapshot(&self, keys: &LockKeys) -> Result<Snapshot> {
        let mut pipe = redis::pipe();
        pipe.hgetall(&*keys.hash)
            .pttl(&*keys.hash)
            .get(keys.fence());
        let (owners, ttl, fence): (Vec<(String, u64)>, i64, Option<u64>) =
            self.query_pipeline("inspect", &keys.hash, &pipe).await?;
        Ok(Snapshot {
            owners,
            ttl: (ttl >= 0).then(|| Duration::from_millis(ttl as u64)),
            fence,
        })
    }

    /// The hold count of one owner field (0 when it holds nothing).
    pub async fn hold_count(&self, keys: &LockKeys, field: &str) -> Result<u32> {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(&*keys.hash).arg(field);
        let cmd = &cmd;
        let count: Option<u32> = once_more_if_dropped(|| {
            let mut conn = self.conn.clone();
            async move {
                bounded(
                    "hold count",
                    &keys.hash,
                    self.timeout,
                    cmd.query_async(&mut conn),
                )
                .await
            }
        })
        .await?;
        Ok(count.unwrap_or(0))
    }

    /// Runs an arbitrary command (tests, tools) with the node's timeout.
    pub async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let mut conn = self.conn.clone();
        bounded("query", "", self.timeout, cmd.query_async(&mut conn)).await
    }

    /// Runs a pipeline with the node's timeout. Its commands leave back to back on the one
    /// connection, so another caller's commands cannot come in between (MultiLock batches).
    pub async fn query_pipeline<T: FromRedisValue>(
        &self,
        operation: &'static str,
        key: &str,
        pipe: &redis::Pipeline,
    ) -> Result<T> {
        once_more_if_dropped(|| {
            let mut conn = self.conn.clone();
            async move { bounded(operation, key, self.timeout, pipe.query_async(&mut conn)).await }
        })
        .await
    }

    /// Runs an `evalsha` command, loading the script once when the server does not know it
    /// (NOSCRIPT: first use, or a server restarted or flushed since).
    async fn eval<T: FromRedisValue>(
        &self,
        operation: &'static str,
        key: &str,
        limit: Duration,
        script: &redis::Script,
        cmd: &redis::Cmd,
    ) -> Result<T> {
        let mut conn = self.conn.clone();
        match bounded(operation, key, limit, cmd.query_async(&mut conn)).await {
            Err(Error::Redis { source, .. })
                if source.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                bounded(operation, key, limit, script.load_async(&mut conn)).await?;
                bounded(operation, key, limit, cmd.query_async(&mut conn)).await
            }
            other => other,
        }
    }

    /// [`eval`](Node::eval) with the node's timeout, once more after a dropped connection: for
    /// scripts whose repetition is harmless (renew, force unlock, raise fence).
    async fn eval_retried<T: FromRedisValue>(
        &self,
        operation: &'static str,
        key: &str,
        script: &redis::Script,
        cmd: &redis::Cmd,
    ) -> Result<T> {
        once_more_if_dropped(|| self.eval(operation, key, self.timeout, script, cmd)).await
    }
}

/// Runs `request`, and once more if it failed on a dropped connection.
///
/// The connection manager notices a dead connection (server restart, `CLIENT KILL`) only when a
/// command fails on it, and reconnects then. Without this second try every restart failed one
/// command per caller: a waiter woken after a restart got `broken pipe` instead of the lock, and
/// the watchdog learned of a lost key a whole renewal period late. The retry waits for the new
/// connection within the usual timeout; a second failure is returned as it is.
async fn once_more_if_dropped<T, F, Fut>(mut request: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    match request().await {
        Err(Error::Redis { source, operation }) if source.is_connection_dropped() => {
            tracing::debug!(operation, error = %source, "connection dropped; trying once more");
            request().await
        }
        outcome => outcome,
    }
}

/// An `EVALSHA <sha> <nkeys>` command; the caller appends keys, then `args` more arguments
/// with `bytes` bytes in all (an estimate). A plain `Cmd` packs every argument into one buffer,
/// where `ScriptInvocation` allocates one per argument on the hot path; sizing it up front
/// saves the buffer's regrowth, which showed in the profile.
fn evalsha(script: &redis::Script, nkeys: usize, args: usize, bytes: usize) -> redis::Cmd {
    let mut cmd = evalsha_without_keys(script, nkeys + args, bytes);
    cmd.arg(nkeys);
    cmd
}

/// `EVALSHA <sha>`, sized for `items` more arguments (the key count included) of `bytes` bytes.
fn evalsha_without_keys(script: &redis::Script, items: usize, bytes: usize) -> redis::Cmd {
    let mut cmd = redis::Cmd::with_capacity(3 + items, 48 + bytes);
    cmd.arg("EVALSHA").arg(script.get_hash());
    cmd
}

/// Bounds a Redis future by the configured timeout and types its error.
pub(crate) async fn bounded<T>(
    operation: &'static str,
    key: &str,
    timeout: Duration,
    fut: impl Future<Output = RedisResult<T>>,
) -> Result<T> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(Error::redis(operation, key, e)),
        Err(_) => Err(Error::Timeout { operation, timeout }),
    }
}
