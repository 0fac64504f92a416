//! One Redis deployment the client talks to, and the typed script calls on it.
//!
//! This is the only place that knows the connection type. Lock logic calls these methods, so
//! Redis Cluster or Sentinel can be added here (every script touches one hash-tagged slot)
//! without touching it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{FromRedisValue, RedisResult, Value};

use crate::batch::{Batcher, Traffic};
use crate::client::RequestId;
use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::scripts::{self, Acquire, Release};

/// One renewal request of the watchdog's batch.
pub(crate) struct Renewal<'a> {
    pub hash: &'a str,
    pub field: &'a str,
    pub lease_ms: u64,
}

/// When `release.lua` writes the latch that makes a retry of the release harmless.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Latch {
    /// Every time: give-backs, which may race the owner's own acquisitions.
    Always,
    /// Only while holds remain: a guard's release, during which the owner cannot take the lock
    /// again (`sequence.rs`), so a retry that finds the field gone knows it was released.
    WhileHeld,
}

/// One release request, as `release.lua` takes it.
pub(crate) struct ReleaseArgs<'a> {
    pub field: &'a Arc<str>,
    pub lease_ms: u64,
    pub holds: u32,
    pub latch: Latch,
    /// This client's waiting head, to hand the lock to if this release frees it.
    pub successor: Option<&'a Successor>,
}

/// A waiter of this client to hand the lock to if this release frees it.
#[derive(Debug, Clone)]
pub(crate) struct Successor {
    pub field: Arc<str>,
    pub lease_ms: u64,
    pub fenced: bool,
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

/// Acquire and release calls made while others are in flight, coalesced (`batch.rs`).
#[derive(Default)]
struct Batches {
    traffic: Traffic,
    acquires: Arc<Batcher<AcquireEntry>>,
    releases: Arc<Batcher<ReleaseEntry>>,
}

/// One acquisition of a batch (unfenced locks only: a fenced one answers a table).
struct AcquireEntry {
    hash: Arc<str>,
    field: Arc<str>,
    lease_ms: u64,
    reentrant: bool,
}

/// One release of a batch (never a hand-over: that one goes alone).
struct ReleaseEntry {
    hash: Arc<str>,
    latch: String,
    field: Arc<str>,
    lease_ms: u64,
    holds: u32,
    mode: &'static str,
    client: Arc<str>,
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

    /// Takes (or re-enters) the lock for `field`; coalesced with other calls while some are
    /// in flight, except for fenced locks.
    pub async fn acquire(
        &self,
        keys: &LockKeys,
        field: &Arc<str>,
        lease_ms: u64,
        reentrant: bool,
        fenced: bool,
        limit: Duration,
    ) -> Result<Acquire> {
        let (_counted, alone) = self.batches.traffic.enter();
        // No blind retry here: a reply lost with its connection leaves the outcome unknown,
        // and retrying could count a grant twice. `Lock::attempt` decides (it knows whether the
        // owner already holds the lock).
        let reply = if alone || fenced {
            let bytes = 2 * keys.hash.len() + field.len() + 32;
            // `acquire_args` writes the key count: how many keys depends on the lock.
            let mut cmd = evalsha_without_keys(&scripts::ACQUIRE, 6, bytes);
            acquire_args(&mut cmd, keys, field, lease_ms, reentrant, fenced);
            self.eval("acquire", &keys.hash, limit, &scripts::ACQUIRE, &cmd)
                .await?
        } else {
            let entry = AcquireEntry {
                hash: keys.hash.clone(),
                field: field.clone(),
                lease_ms,
                reentrant,
            };
            let node = self.clone();
            let send = move |batch, limit| {
                let node = node.clone();
                async move { node.acquire_batch(batch, limit).await }
            };
            let batcher = &self.batches.acquires;
            batcher.call(entry, limit, "acquire", send).await?
        };
        Acquire::parse(&reply)
    }

    /// Sends a batch of acquisitions as one `acquire.lua` call; one reply per entry.
    async fn acquire_batch(&self, batch: Vec<AcquireEntry>, limit: Duration) -> Vec<Result<Value>> {
        let bytes: usize = batch
            .iter()
            .map(|e| e.hash.len() + e.field.len() + 16)
            .sum();
        let mut cmd = evalsha(&scripts::ACQUIRE, batch.len(), 3 * batch.len(), bytes);
        for e in &batch {
            cmd.arg(&*e.hash);
        }
        for e in &batch {
            cmd.arg(&*e.field)
                .arg(e.lease_ms)
                .arg(if e.reentrant { "1" } else { "0" });
        }
        let reply = self
            .eval("acquire", "", limit, &scripts::ACQUIRE, &cmd)
            .await;
        split_batch_reply("acquire", reply, batch.iter().map(|e| &*e.hash))
    }

    /// Gives back `release.holds` holds; `request` makes a retry of the same request harmless
    /// (`retry`: this request was sent before).
    pub async fn release(
        &self,
        keys: &LockKeys,
        release: &ReleaseArgs<'_>,
        request: RequestId<'_>,
        retry: bool,
    ) -> Result<Release> {
        // The latch must outlive every retry of this request (a few timeouts), and no longer.
        let latch_ms = (self.timeout.as_millis() as u64)
            .saturating_mul(5)
            .max(5_000);
        let successor = release.successor;
        let mode = match (retry, release.latch) {
            (false, Latch::WhileHeld) => "-",
            (true, Latch::WhileHeld) => "r",
            (false, Latch::Always) => "a",
            (true, Latch::Always) => "ra",
        };
        let (_counted, alone) = self.batches.traffic.enter();
        if !alone && successor.is_none() {
            let entry = ReleaseEntry {
                hash: keys.hash.clone(),
                latch: keys.latch(request.client, request.n).to_string(),
                field: release.field.clone(),
                lease_ms: release.lease_ms,
                holds: release.holds,
                mode,
                client: request.client.clone(),
            };
            let node = self.clone();
            let send = move |batch, _| {
                let node = node.clone();
                async move { node.release_batch(batch, latch_ms).await }
            };
            let batcher = &self.batches.releases;
            let reply = batcher.call(entry, self.timeout, "release", send).await?;
            return match reply {
                Value::Int(n) => Release::parse(n),
                other => Err(Error::Protocol {
                    script: "release",
                    reply: format!("{other:?}"),
                }),
            };
        }
        let fence_key = successor.is_some_and(|s| s.fenced);
        let bytes = 3 * keys.hash.len()
            + 2 * request.client.len()
            + release.field.len()
            + successor.map_or(0, |s| s.field.len())
            + 80;
        let mut cmd = evalsha(&scripts::RELEASE, 2 + usize::from(fence_key), 8, bytes);
        cmd.arg(&*keys.hash)
            .arg(keys.latch(request.client, request.n));
        if fence_key {
            cmd.arg(keys.fence());
        }
        cmd.arg(&**release.field)
            .arg(release.lease_ms)
            .arg(latch_ms)
            .arg(release.holds)
            .arg(mode)
            .arg(&**request.client);
        if let Some(s) = successor {
            cmd.arg(&*s.field).arg(s.lease_ms);
        }
        let reply: i64 = self
            .eval("release", &keys.hash, self.timeout, &scripts::RELEASE, &cmd)
            .await?;
        Release::parse(reply)
    }

    /// Sends a batch of releases as one `release.lua` call; one reply per entry.
    async fn release_batch(&self, batch: Vec<ReleaseEntry>, latch_ms: u64) -> Vec<Result<Value>> {
        let bytes: usize = batch
            .iter()
            .map(|e| e.hash.len() + e.latch.len() + e.field.len() + e.client.len() + 40)
            .sum();
        let mut cmd = evalsha(&scripts::RELEASE, 2 * batch.len(), 6 * batch.len(), bytes);
        for e in &batch {
            cmd.arg(&*e.hash).arg(&e.latch);
        }
        for e in &batch {
            cmd.arg(&*e.field)
                .arg(e.lease_ms)
                .arg(latch_ms)
                .arg(e.holds)
                .arg(e.mode)
                .arg(&*e.client);
        }
        let reply = self
            .eval("release", "", self.timeout, &scripts::RELEASE, &cmd)
            .await;
        split_batch_reply("release", reply, batch.iter().map(|e| &*e.hash))
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

/// Appends the key count, keys and arguments of `acquire.lua` to a command that already names
/// the script (`EVALSHA <sha>` or `EVAL <source>`). The fencing counter is a key only for a
/// fenced lock: its presence is how the script knows.
pub(crate) fn acquire_args(
    cmd: &mut redis::Cmd,
    keys: &LockKeys,
    field: &str,
    lease_ms: u64,
    reentrant: bool,
    fenced: bool,
) {
    cmd.arg(1 + usize::from(fenced)).arg(&*keys.hash);
    if fenced {
        cmd.arg(keys.fence());
    }
    cmd.arg(field)
        .arg(lease_ms)
        .arg(if reentrant { "1" } else { "0" });
}

/// One reply per entry of a batch sent as one script call (see `lua/acquire.lua`): a batch of
/// one is answered like a single call; a longer one with a table, where a string is the error
/// of that entry alone. A failure of the call is every entry's failure.
fn split_batch_reply<'a>(
    script: &'static str,
    reply: Result<Value>,
    hashes: impl ExactSizeIterator<Item = &'a str>,
) -> Vec<Result<Value>> {
    let n = hashes.len();
    match reply {
        Ok(reply) if n == 1 => vec![Ok(reply)],
        Ok(Value::Array(replies)) if replies.len() == n => replies
            .into_iter()
            .zip(hashes)
            .map(|(reply, hash)| match reply {
                Value::BulkString(message) => {
                    let message = String::from_utf8_lossy(&message);
                    let (code, detail) = message.split_once(' ').unwrap_or((&message, ""));
                    let error = redis::make_extension_error(code.into(), Some(detail.into()));
                    Err(Error::redis(script, hash, error))
                }
                reply => Ok(reply),
            })
            .collect(),
        Ok(reply) => {
            let error = Error::Protocol {
                script,
                reply: format!("{reply:?} for a batch of {n}"),
            };
            vec![Err(error); n]
        }
        Err(e) => vec![Err(e); n],
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
