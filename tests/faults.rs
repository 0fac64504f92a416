//! Server faults: Redis down, restarted with and without its data, and the subscriber
//! connection dropped under a waiter.

mod support;

use std::time::{Duration, Instant};

use redlease::{Client, LockGuard};
use support::{
    Server, client_with, eventually_async, exists, join_within, spawn_waiter, take_and_release,
    try_lock_retrying, unique_name, unlock_channel, until_subscribed, woken_after_unlock,
};
use tokio::task::JoinHandle;

const TIMEOUT: Duration = Duration::from_millis(500);

/// A client whose commands time out after [`TIMEOUT`].
async fn client(server: &Server) -> Client {
    client_with(server, |b| b.timeout(TIMEOUT)).await
}

/// Retries `try_lock` until it succeeds (for at most 10 s), then releases; the elapsed time.
async fn until_acquired(lock: &redlease::Lock) -> Duration {
    let start = Instant::now();
    let guard = try_lock_retrying(lock, Duration::from_secs(10))
        .await
        .unwrap_or_else(|| panic!("no acquisition within {:?}", start.elapsed()));
    guard.unlock().await.unwrap();
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_fails_fast_when_redis_is_down_and_works_after_restart() {
    support::init_tracing();
    let mut server = Server::start();
    let client = client(&server).await;
    let lock = client.lock(&unique_name("down")).unwrap();
    take_and_release(&lock).await;

    server.kill();
    // Several calls: the first meets the dropped connection, later ones the refused reconnect.
    for attempt in 0..3 {
        let start = Instant::now();
        let err = lock.try_lock().await.map(|g| g.is_some()).unwrap_err();
        let took = start.elapsed();
        assert!(err.is_unavailable(), "attempt {attempt}: {err:?}");
        assert!(
            took < Duration::from_secs(2),
            "attempt {attempt} took {took:?}"
        );
    }
    // A waiting lock() does not hide the outage either.
    let start = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(5), lock.lock())
        .await
        .expect("lock() hung while Redis was down")
        .map(std::mem::forget)
        .unwrap_err();
    assert!(err.is_unavailable(), "{err:?}");
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );

    server.restart();
    let took = until_acquired(&lock).await;
    eprintln!("locking worked again {took:?} after the restart");
    // And the watchdog path works on the new connection too.
    let guard = lock.lock().await.unwrap();
    assert!(exists(&server, lock.key()));
    guard.unlock().await.unwrap();
    assert!(!exists(&server, lock.key()));
    assert_eq!(client.held_count(), 0);
}

/// Acquisitions that failed during an outage may have been granted unseen, and whatever the
/// client does about that must never touch a hold the same owner takes after the outage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_attempts_during_an_outage_never_release_a_later_hold() {
    let mut server = Server::start();
    let client = client(&server).await;
    let lock = client.lock(&unique_name("outage-later")).unwrap();
    server.kill();
    for _ in 0..3 {
        assert!(lock.try_lock().await.map(|g| g.is_some()).is_err());
    }
    server.restart();
    // The same owner (this thread) takes it once the server is back.
    let guard = try_lock_retrying(&lock, Duration::from_secs(5))
        .await
        .expect("no acquisition after the restart");
    // Longer than any retry of anything sent during the outage could still be under way.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        lock.hold_count().await.unwrap(),
        1,
        "the hold taken after the outage was released behind its guard"
    );
    assert!(!guard.is_lost());
    guard.unlock().await.unwrap();
    assert_eq!(client.held_count(), 0);
}

/// An acquire that timed out on a frozen server is applied once the server runs again; that
/// late grant is given back rather than blocking everyone for the 30 s watchdog lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_timed_out_on_a_paused_server_is_given_back() {
    let server = Server::start();
    let client = client(&server).await;
    let lock = client.lock(&unique_name("paused")).unwrap();
    server.client_pause(1500, true);
    let start = Instant::now();
    let err = lock.try_lock().await.map(|g| g.is_some()).unwrap_err();
    assert!(matches!(err, redlease::Error::Timeout { .. }), "{err:?}");
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(client.held_count(), 0);
    // The pause ends at 1.5 s; the queued acquire runs then, and its grant must go at once.
    let given_back = eventually_async(Duration::from_secs(5), || async {
        start.elapsed() > Duration::from_millis(1500) && !exists(&server, lock.key())
    })
    .await;
    assert!(
        given_back,
        "the late grant was kept: {:?}",
        lock.status().await
    );
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "{:?}",
        start.elapsed()
    );
    // And the owner can take it normally afterwards, undisturbed.
    let guard = lock.try_lock().await.unwrap().expect("free");
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_without_persistence_makes_lost_resolve_within_one_renewal_period() {
    support::init_tracing();
    let mut server = Server::start();
    let lease = Duration::from_secs(3); // renewal every 1 s
    let client = client_with(&server, |b| b.watchdog_lease(lease).timeout(TIMEOUT)).await;
    let lock = client.lock(&unique_name("restart-lost")).unwrap();
    let guard = lock.lock().await.unwrap();
    let lost = guard.lost();

    server.restart(); // no AOF: the key is gone
    let restarted_at = Instant::now();
    tokio::time::timeout(2 * lease, lost)
        .await
        .expect("lost() did not resolve after a restart that dropped the key");
    let took = restarted_at.elapsed();
    assert!(
        took <= lease / 3 + Duration::from_millis(500),
        "lost() took {took:?} after the restart; the renewal period is {:?}",
        lease / 3
    );
    assert!(guard.is_lost());
    let err = guard.unlock().await.unwrap_err();
    assert!(err.is_lease_lost(), "{err:?}");
    assert_eq!(client.held_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_survives_a_restart_with_appendonly() {
    let mut server = Server::builder().appendonly(true).start();
    let lease = Duration::from_secs(3);
    let client = client_with(&server, |b| b.watchdog_lease(lease).timeout(TIMEOUT)).await;
    let lock = client.lock(&unique_name("aof")).unwrap();
    let guard = lock.lock().await.unwrap();
    server.restart();
    // Two renewal periods on the new server.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!guard.is_lost(), "the persisted lock was reported lost");
    assert!(exists(&server, lock.key()));
    let rival = client.lock(lock.name()).unwrap();
    let excluded = tokio::spawn(async move { rival.try_lock().await.map(|g| g.is_none()) });
    assert!(excluded.await.unwrap().unwrap(), "another owner took it");
    guard.unlock().await.unwrap();
    assert!(!exists(&server, lock.key()));
}

/// A lock held by one client, with the default 30 s lease (so no waiter can be explained by the
/// holder's TTL running out), and waited for by tasks of another client whose subscriber
/// listens on the lock's unlock channel.
struct Contended {
    /// Kept alive as long as its hold.
    _holder: Client,
    waiters: Client,
    held: LockGuard,
    /// The lock's unlock channel.
    channel: String,
    /// One per waiter, yielding when it got the lock.
    tasks: Vec<JoinHandle<Instant>>,
}

async fn contended(server: &Server, prefix: &str, waiters: usize) -> Contended {
    let holder = client(server).await;
    let waiting = client(server).await;
    let name = unique_name(prefix);
    let lock = holder.lock(&name).unwrap();
    let channel = unlock_channel(lock.key());
    let held = lock.lock().await.unwrap();
    let tasks = (0..waiters)
        .map(|_| spawn_waiter(waiting.lock(&name).unwrap()))
        .collect();
    assert!(
        until_subscribed(server, &channel, 1).await,
        "the waiters never subscribed"
    );
    Contended {
        _holder: holder,
        waiters: waiting,
        held,
        channel,
        tasks,
    }
}

fn kill_pubsub_clients(server: &Server) -> u64 {
    redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query(&mut server.conn())
        .expect("CLIENT KILL TYPE pubsub")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_gets_the_lock_after_its_subscriber_connection_was_killed() {
    support::init_tracing();
    let server = Server::start();
    let mut c = contended(&server, "sub-kill", 1).await;

    assert_eq!(kill_pubsub_clients(&server), 1);
    // The subscriber reconnects and subscribes again.
    assert!(
        until_subscribed(&server, &c.channel, 1).await,
        "the subscriber did not come back"
    );
    let took = woken_after_unlock(c.held, c.tasks.remove(0), Duration::from_secs(5)).await;
    assert!(
        took < Duration::from_secs(1),
        "woken {took:?} after the unlock"
    );
}

/// The unlock happens while the subscriber connection is down (its reconnect is refused by a
/// full `maxclients`), so the message certainly reaches nobody: the reconnect must wake every
/// waiter to look again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_woken_after_a_reconnect_that_lost_the_unlock_message() {
    let server = Server::start();
    let c = contended(&server, "lost-msg", 2).await;
    tokio::time::sleep(Duration::from_millis(100)).await;

    // One admin connection throughout: while maxclients is full no new one gets in.
    let mut admin = server.conn();
    let connected: u64 = redis::cmd("INFO")
        .arg("clients")
        .query::<String>(&mut admin)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("connected_clients in INFO");
    let set_maxclients = |admin: &mut redis::Connection, n: u64| {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxclients")
            .arg(n)
            .query::<()>(admin)
            .expect("CONFIG SET maxclients")
    };
    // After the kill, the remaining connections fill every slot.
    set_maxclients(&mut admin, connected - 1);
    let killed: u64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("pubsub")
        .query(&mut admin)
        .unwrap();
    assert_eq!(killed, 1);
    tokio::time::sleep(Duration::from_millis(300)).await; // a few refused reconnects
    let (_, listeners): (String, u64) = redis::cmd("PUBSUB")
        .arg("NUMSUB")
        .arg(&c.channel)
        .query(&mut admin)
        .unwrap();
    assert_eq!(
        listeners, 0,
        "the subscriber got back in despite maxclients"
    );
    c.held.unlock().await.unwrap(); // its message reaches nobody
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(c.tasks.iter().all(|waiter| !waiter.is_finished()));

    set_maxclients(&mut admin, 10_000);
    let start = Instant::now();
    join_within(
        c.tasks,
        Duration::from_secs(10),
        "a waiter slept through the reconnect",
    )
    .await;
    // The reconnect backoff is capped at 1 s; the holder's lease was 30 s.
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(c.waiters.held_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_gets_the_lock_after_a_server_restart() {
    let mut server = Server::builder().appendonly(true).start();
    let mut c = contended(&server, "restart-wait", 1).await;

    // With AOF the holder's key survives; the waiter must keep waiting, then be woken by the
    // unlock on the new connection.
    server.restart();
    assert!(
        until_subscribed(&server, &c.channel, 1).await,
        "the subscriber did not come back after the restart"
    );
    let waiter = c.tasks.remove(0);
    if waiter.is_finished() {
        // Say what happened: the waiter's own outcome, and what the server holds now (it
        // failed once in CI under load, not since: this is what a next failure should show).
        let outcome = waiter.await.map(|_| "took the lock");
        let key = c.channel.trim_end_matches(":unlock");
        let state: Vec<String> = redis::cmd("HGETALL")
            .arg(key)
            .query(&mut server.conn())
            .unwrap_or_default();
        let queue: Vec<String> = redis::cmd("LRANGE")
            .arg(format!("{key}:q"))
            .arg(0)
            .arg(-1)
            .query(&mut server.conn())
            .unwrap_or_default();
        panic!(
            "the waiter ended while the lock is held: {outcome:?}; the holder {} lost; \
             server: {key} = {state:?}, queue {queue:?}",
            if c.held.is_lost() { "is" } else { "is not" }
        );
    }
    assert!(!c.held.is_lost());
    let took = woken_after_unlock(c.held, waiter, Duration::from_secs(5)).await;
    assert!(took < Duration::from_secs(1), "{took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_gets_a_lock_whose_key_a_restart_dropped() {
    let mut server = Server::start();
    let mut c = contended(&server, "restart-drop", 1).await;

    // Without persistence the holder's key is gone and no message will ever say so: the
    // reconnect wakes the waiter, which finds the lock free.
    server.restart();
    let restarted = Instant::now();
    let acquired = tokio::time::timeout(Duration::from_secs(10), c.tasks.remove(0))
        .await
        .expect("the waiter waited on a lock that no longer exists")
        .unwrap();
    let took = acquired.duration_since(restarted);
    assert!(
        took < Duration::from_secs(3),
        "acquired {took:?} after the restart"
    );
    drop(c.held);
}
