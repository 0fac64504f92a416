//! Clients of a test server and the lock moves many tests repeat: waiters that report when they
//! got the lock, bounded retries and joins, and the unprotected counter that exclusion tests
//! race on.

use std::time::{Duration, Instant};

use redlease::{Client, ClientBuilder, Lock, LockGuard, RedLock};
use tokio::task::JoinHandle;

use super::{Server, eventually_async};

/// How long [`try_lock_retrying`] pauses between attempts.
const RETRY_EVERY: Duration = Duration::from_millis(100);

/// A client of the server at `url`, with default settings.
pub async fn connect(url: &str) -> Client {
    Client::connect(url)
        .await
        .expect("connect to the test server")
}

/// A client of `server`, with default settings.
pub async fn client(server: &Server) -> Client {
    connect(&server.url()).await
}

/// `N` independent clients of `server`: `let [holder, waiter] = clients(&server).await;`.
pub async fn clients<const N: usize>(server: &Server) -> [Client; N] {
    let mut all = Vec::with_capacity(N);
    for _ in 0..N {
        all.push(client(server).await);
    }
    match all.try_into() {
        Ok(all) => all,
        Err(_) => unreachable!("exactly N clients were made"),
    }
}

/// A client of `server` built with `settings` applied to its builder.
pub async fn client_with(
    server: &Server,
    settings: impl FnOnce(ClientBuilder) -> ClientBuilder,
) -> Client {
    client_at(server.url(), settings).await
}

/// A client of the deployment at `url` (a sentinel group, a TLS port, a replicated primary)
/// built with `settings`.
pub async fn client_at(
    url: impl Into<String>,
    settings: impl FnOnce(ClientBuilder) -> ClientBuilder,
) -> Client {
    settings(Client::builder(url))
        .build()
        .await
        .expect("connect to the test deployment")
}

/// A client of `server` whose watchdog lease is `lease`.
pub async fn client_with_lease(server: &Server, lease: Duration) -> Client {
    client_with(server, |b| b.watchdog_lease(lease)).await
}

/// One lock on `name` per server, each through a fresh client: the nodes of a RedLock.
pub async fn node_locks(servers: &[Server], name: &str) -> Vec<Lock> {
    node_locks_with(servers, name, |b| b).await
}

/// [`node_locks`] with `settings` applied to every client's builder:
/// `node_locks_with(&servers, &name, |b| b.timeout(Duration::from_millis(400)))`.
pub async fn node_locks_with(
    servers: &[Server],
    name: &str,
    settings: impl Fn(ClientBuilder) -> ClientBuilder,
) -> Vec<Lock> {
    let mut locks = Vec::with_capacity(servers.len());
    for server in servers {
        locks.push(client_with(server, &settings).await.lock(name).unwrap());
    }
    locks
}

/// A RedLock on `name` over `servers`, one fresh client (default settings) per server.
pub async fn redlock(servers: &[Server], name: &str) -> RedLock {
    RedLock::new(node_locks(servers, name).await).expect("a valid RedLock node list")
}

/// `redlock` with a node timeout loose enough that every live node answers even on a loaded
/// test machine, for tests that count nodes (the default, 20–50 ms, is exercised by the
/// others).
pub fn patient(redlock: RedLock) -> RedLock {
    redlock.node_timeout(Duration::from_millis(150))
}

/// The key of lock `name` under the default prefix.
pub fn key_of(name: &str) -> String {
    format!("redlease:{{{name}}}")
}

/// The channel that announces unlocks of the lock at `key`.
pub fn unlock_channel(key: &str) -> String {
    format!("{key}:unlock")
}

/// Polls until nobody holds `lock`, for at most `within`; whether it came free.
pub async fn until_free(lock: &Lock, within: Duration) -> bool {
    eventually_async(within, || async { !lock.is_locked().await.unwrap() }).await
}

/// Whether the default owner of `client` is kept out of lock `name`: one `try_lock`, released
/// again if it got in.
pub async fn locked_out(client: &Client, name: &str) -> bool {
    client
        .lock(name)
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .is_none()
}

/// Takes `lock`, which must be free, with one `try_lock`, and releases it.
pub async fn take_and_release(lock: &Lock) {
    lock.try_lock()
        .await
        .unwrap()
        .unwrap()
        .unlock()
        .await
        .unwrap();
}

/// Retries `try_lock` every 100 ms (a server coming back, say), errors included, until it
/// succeeds or `within` has passed; the guard, or `None`.
pub async fn try_lock_retrying(lock: &Lock, within: Duration) -> Option<LockGuard> {
    let start = Instant::now();
    for _ in 0..within.as_millis() / RETRY_EVERY.as_millis() {
        if let Ok(Some(guard)) = lock.try_lock().await {
            return Some(guard);
        }
        if start.elapsed() > within {
            break;
        }
        tokio::time::sleep(RETRY_EVERY).await;
    }
    None
}

/// Spawns a task that waits for `lock`, releases it at once, and yields when it got it.
pub fn spawn_waiter(lock: Lock) -> JoinHandle<Instant> {
    tokio::spawn(async move {
        let guard = lock.lock().await.unwrap();
        let at = Instant::now();
        guard.unlock().await.unwrap();
        at
    })
}

/// Unlocks `held`, then waits at most `limit` for `waiter` to report; how long after the unlock
/// the waiter got the lock.
pub async fn woken_after_unlock(
    held: LockGuard,
    waiter: JoinHandle<Instant>,
    limit: Duration,
) -> Duration {
    let unlocked = Instant::now();
    held.unlock().await.unwrap();
    let acquired = tokio::time::timeout(limit, waiter)
        .await
        .unwrap_or_else(|_| panic!("the waiter was not woken within {limit:?} of the unlock"))
        .unwrap();
    acquired.duration_since(unlocked)
}

/// Awaits every task in turn, each for at most `limit`; panics with `what` on one that
/// overstays, and with its panic on one that failed.
pub async fn join_within<T>(
    tasks: impl IntoIterator<Item = JoinHandle<T>>,
    limit: Duration,
    what: &str,
) -> Vec<T> {
    let mut results = Vec::new();
    for task in tasks {
        let joined = tokio::time::timeout(limit, task)
            .await
            .unwrap_or_else(|_| panic!("{what}"));
        results.push(joined.unwrap());
    }
    results
}

/// One unprotected increment of the counter at `key`: read it, yield (inviting a racer in),
/// write it back + 1. Without a lock around it, racing increments lose updates.
pub async fn increment_unprotected(client: &Client, key: &str) {
    let value: Option<u64> = client.query(redis::cmd("GET").arg(key)).await.unwrap();
    tokio::task::yield_now().await;
    client
        .query::<()>(redis::cmd("SET").arg(key).arg(value.unwrap_or(0) + 1))
        .await
        .unwrap();
}

/// The counter at `key`; 0 while there is none.
pub fn read_counter(server: &Server, key: &str) -> u64 {
    redis::cmd("GET")
        .arg(key)
        .query::<Option<u64>>(&mut server.conn())
        .expect("GET")
        .unwrap_or(0)
}
