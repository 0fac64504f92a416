//! Test support: real server processes, probes of what they hold, clients and the lock moves
//! many tests repeat, and a few small helpers.
//!
//! Integration tests use it as `mod support;`; the CLI crate's tests use
//! `#[path = "../../tests/support/mod.rs"] mod support;`. Besides `redlease` it needs only the
//! dev-dependencies `redis` (sync API), `tokio` and `tracing-subscriber` (env-filter).
//!
//! - `server`: [`Server`], a private redis-server (or valkey-server) to start, kill, restart,
//!   freeze and thaw.
//! - `cluster`: [`Cluster`], six of them formed into a Redis Cluster (3 primaries, 3 replicas),
//!   with failover, slot migration and the names that hash to each primary; `shard`: slots
//!   and shard-channel subscribers ([`key_slot`], [`shard_numsub`]).
//! - `probe`: what a server holds, read straight from it: [`exists`], [`owners`], [`pttl`],
//!   [`channels`], [`until_subscribed`], [`until_gone`], [`until_no_channels`], ...
//! - `sentinel`: [`sentinel::SentinelGroup`], a master, two replicas and three sentinels, with
//!   kill -9 of the master and the wait for a promotion.
//! - `torture`: the randomized fault run with its fencing oracle, for any deployment shape.
//! - `locks`: [`client`]s of a server, the nodes of a RedLock ([`node_locks`], [`redlock`]),
//!   and the lock moves tests repeat: [`spawn_waiter`],
//!   [`woken_after_unlock`], [`try_lock_retrying`], [`join_within`], the unprotected counter
//!   of the exclusion tests ([`increment_unprotected`], [`read_counter`]), ...
//!
//! ```ignore
//! let mut server = support::Server::start();
//! let [holder, waiter] = support::clients(&server).await;
//! assert!(!support::exists(&server, &support::key_of("report")));
//! server.kill();
//! server.restart();
//! ```

// Each test file uses a different subset of this module.
#![allow(dead_code, unused_imports)]

mod binary;
mod cluster;
mod host;
mod locks;
pub mod metrics;
pub mod notice;
mod probe;
pub mod proxy;
pub mod replica;
pub mod sentinel;
mod server;
mod shard;
pub mod tls;
pub mod torture;
pub mod workers;

pub use binary::{server_flavor, valkey_binary};
pub use cluster::Cluster;
pub use locks::{
    client, client_at, client_with, client_with_lease, clients, connect, increment_unprotected,
    join_within, key_of, locked_out, node_locks, node_locks_with, patient, read_counter, redlock,
    spawn_waiter, take_and_release, try_lock_retrying, unlock_channel, until_free,
    woken_after_unlock,
};
pub use probe::{
    assert_ttl_kept, channels, command_calls, exists, get_string, numsub, owners, pttl, set_string,
    until_gone, until_no_channels, until_subscribed,
};
pub use server::{Builder, Server};
pub use shard::{
    Contended, cluster_client, cluster_client_with_lease, contend, key_slot, shard_numsub,
    unlock_wakes, until_shard_subscribed, until_shard_subscribed_anywhere,
};

use std::future::Future;
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How often [`eventually`] and [`eventually_async`] look again.
const POLL_EVERY: Duration = Duration::from_millis(10);

/// Starts `n` independent servers (e.g. Redlock masters), each on its own port and dir.
pub fn start_many(n: usize) -> Vec<Server> {
    (0..n).map(|_| Server::start()).collect()
}

/// Installs a `tracing` subscriber once per test binary: filter from `RUST_LOG` (default
/// `warn`), output through the test writer so it is captured per test. Also installs the
/// panic hook of [`fail_on_worker_panics`].
pub fn init_tracing() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        fail_on_worker_panics();
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
        // try_init: another harness in the same binary may have installed one already.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    });
}

/// A panic in a task spawned on a multi-thread runtime's worker is caught by tokio and seen
/// only by whoever awaits its handle; a background task of the library (a release, the
/// watchdog) has nobody who does. This hook ends the test binary on such a panic, so it fails
/// the run instead of passing unseen. Panics on a test's own thread (its assertions, and tasks
/// of a current-thread runtime) fail that test as usual.
fn fail_on_worker_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default(info);
        if std::thread::current().name() == Some("tokio-runtime-worker") {
            eprintln!("a spawned task panicked on a tokio worker (above): failing the test binary");
            std::process::exit(101);
        }
    }));
}

/// A lock name no other test (in this or another process) uses: `prefix-pid-n-nanos`.
pub fn unique_name(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{n}-{nanos}", std::process::id())
}

/// `n` lock names no other test uses: `prefix0-…`, `prefix1-…`, and so on.
pub fn unique_names(prefix: &str, n: usize) -> Vec<String> {
    (0..n)
        .map(|i| unique_name(&format!("{prefix}{i}")))
        .collect()
}

/// Polls `cond` every 10 ms until it is true (returns `true`) or `timeout` passes (returns
/// `false`). Blocks the thread: in async tests use [`eventually_async`].
///
/// ```ignore
/// assert!(support::eventually(Duration::from_secs(2), || !server.is_running()), "still up");
/// ```
pub fn eventually(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    for _ in 0..polls(timeout) {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(POLL_EVERY);
    }
    cond()
}

/// The async twin of [`eventually`]: awaits `cond()` every 10 ms until it yields `true` or
/// `timeout` passes.
pub async fn eventually_async<F, Fut>(timeout: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    for _ in 0..polls(timeout) {
        if cond().await {
            return true;
        }
        if Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
    cond().await
}

/// Like `tokio::time::timeout`, but precise below a millisecond (tokio's timer wheel rounds up
/// to whole milliseconds, which would let almost every attempt finish): a plain thread sleeps
/// for `budget` and then cancels `fut` by winning the race. `None` when `fut` was cancelled.
pub async fn with_precise_timeout<T>(budget: Duration, fut: impl Future<Output = T>) -> Option<T> {
    let (fire, fired) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        std::thread::sleep(budget);
        let _ = fire.send(());
    });
    tokio::select! {
        out = fut => Some(out),
        _ = fired => None,
    }
}

/// Upper bound on poll rounds, so a loop ends even if the clock misbehaves.
fn polls(timeout: Duration) -> u128 {
    timeout.as_millis() / POLL_EVERY.as_millis() + 2
}
