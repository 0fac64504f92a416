//! Waiting by polling (`WaitBy::Polling`), for proxies without pub/sub: every lock kind still
//! waits and wakes, mutual exclusion holds, and the server never sees a SUBSCRIBE.

mod support;

use redlease::LockOptions;
use std::time::{Duration, Instant};

use redis::Commands;
use redlease::{Client, Error, MultiLock, WaitBy};
use support::{Server, client_with, unique_name};

const POLL: WaitBy = WaitBy::Polling {
    first: Duration::from_millis(2),
    max: Duration::from_millis(40),
};

async fn polling_client(server: &Server) -> Client {
    client_with(server, |b| b.wait_by(POLL)).await
}

/// Subscription commands the server has run since it started.
fn subscribes(server: &Server) -> u64 {
    support::command_calls(server, "subscribe") + support::command_calls(server, "ssubscribe")
}

/// Runs `wait` while something else holds, checks it is still waiting after 150 ms, frees it
/// with `free`, and returns how long the waiter took after that.
async fn waits_then_wakes<W, F>(wait: W, free: F) -> Duration
where
    W: Future<Output = ()> + Send + 'static,
    F: Future<Output = ()>,
{
    let waiter = tokio::spawn(async move {
        wait.await;
        Instant::now()
    });
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(!waiter.is_finished(), "the waiter did not wait");
    free.await;
    let freed = Instant::now();
    let done = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter was not woken within 5 s")
        .unwrap();
    done.saturating_duration_since(freed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_polling_waiter_gets_the_lock_without_subscribing() {
    let server = Server::start();
    let (a, b) = (polling_client(&server).await, polling_client(&server).await);
    let name = unique_name("poll");
    let held = a
        .lock(&name)
        .unwrap()
        .lock_with(LockOptions::new().lease(Duration::from_secs(30)))
        .await
        .unwrap();
    let lock = b.lock(&name).unwrap();
    let took = waits_then_wakes(
        async move {
            let guard = lock.lock().await.unwrap();
            guard.unlock().await.unwrap();
        },
        async move { held.unlock().await.unwrap() },
    )
    .await;
    // The pause is at most 40 ms; a 30 s lease means only polling explains a prompt wake-up.
    assert!(
        took < Duration::from_secs(1),
        "took the lock {took:?} after the release"
    );
    assert_eq!(subscribes(&server), 0, "a polling client subscribed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_waiters_exclude_each_other() {
    let server = Server::start();
    let clients = [polling_client(&server).await, polling_client(&server).await];
    let name = unique_name("poll-mutex");
    let counter = format!("{name}:counter");
    let tasks: Vec<_> = (0..6)
        .map(|i| {
            let lock = clients[i % 2].lock(&name).unwrap();
            let (url, counter) = (server.url(), counter.clone());
            tokio::spawn(async move {
                let mut conn = redis::Client::open(url).unwrap();
                for _ in 0..15 {
                    let guard = lock.lock().await.unwrap();
                    // A non-atomic increment: only mutual exclusion keeps it exact.
                    let n: u64 = conn.get::<_, Option<u64>>(&counter).unwrap().unwrap_or(0);
                    tokio::task::yield_now().await;
                    let _: () = conn.set(&counter, n + 1).unwrap();
                    guard.unlock().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("the polling waiters did not finish in 30 s")
            .unwrap();
    }
    let total: u64 = server.conn().get(&counter).unwrap();
    assert_eq!(total, 90);
    assert_eq!(subscribes(&server), 0, "a polling client subscribed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lock_kind_waits_by_polling() {
    let server = Server::start();
    let (a, b) = (polling_client(&server).await, polling_client(&server).await);
    let slow = Duration::from_secs(1);

    let name = unique_name("poll-sem");
    let held = a.semaphore(&name).unwrap();
    held.set_permits(1).await.unwrap();
    held.acquire().await.unwrap();
    let waiting = b.semaphore(&name).unwrap();
    let took = waits_then_wakes(
        async move { waiting.acquire().await.unwrap() },
        async move { held.release(1).await.unwrap() },
    )
    .await;
    assert!(took < slow, "semaphore: {took:?}");

    let name = unique_name("poll-latch");
    let latch = a.count_down_latch(&name).unwrap();
    assert!(latch.try_set_count(1).await.unwrap());
    let waiting = b.count_down_latch(&name).unwrap();
    let took = waits_then_wakes(async move { waiting.wait().await.unwrap() }, async move {
        latch.count_down().await.unwrap();
    })
    .await;
    assert!(took < slow, "latch: {took:?}");

    let name = unique_name("poll-rw");
    let reader = a
        .read_write_lock(&name)
        .unwrap()
        .read()
        .lock()
        .await
        .unwrap();
    let writer = b.read_write_lock(&name).unwrap().write();
    let took = waits_then_wakes(
        async move { writer.lock().await.unwrap().unlock().await.unwrap() },
        async move { reader.unlock().await.unwrap() },
    )
    .await;
    assert!(took < slow, "read-write lock: {took:?}");

    let name = unique_name("poll-fair");
    let first = a.fair_lock(&name).unwrap().lock().await.unwrap();
    let second = b.fair_lock(&name).unwrap();
    let took = waits_then_wakes(
        async move { second.lock().await.unwrap().unlock().await.unwrap() },
        async move { first.unlock().await.unwrap() },
    )
    .await;
    assert!(took < slow, "fair lock: {took:?}");

    let names = [unique_name("poll-m1"), unique_name("poll-m2")];
    let one = a.lock(&names[1]).unwrap().lock().await.unwrap();
    let both = MultiLock::new(names.iter().map(|n| b.lock(n).unwrap()).collect()).unwrap();
    let took = waits_then_wakes(
        async move { both.lock().await.unwrap().unlock().await.unwrap() },
        async move { one.unlock().await.unwrap() },
    )
    .await;
    assert!(took < slow, "MultiLock: {took:?}");

    assert_eq!(subscribes(&server), 0, "a polling client subscribed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_polling_pauses_are_refused_at_build() {
    let server = Server::start();
    let zero = WaitBy::Polling {
        first: Duration::ZERO,
        max: Duration::from_millis(10),
    };
    let reversed = WaitBy::Polling {
        first: Duration::from_millis(50),
        max: Duration::from_millis(10),
    };
    let err = Client::builder(server.url())
        .wait_by(zero)
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidDuration { .. }), "{err:?}");
    let err = Client::builder(server.url())
        .wait_by(reversed)
        .build()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
}

/// A polling client's release hands the read-write lock to its own queued writer: the writer
/// is woken at once, not at its next pause (the default pauses grow to 500 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_handed_to_a_polling_waiter_wakes_it_at_once() {
    let server = Server::start();
    let client = client_with(&server, |b| b.wait_by(WaitBy::POLLING)).await;
    let rw = client.read_write_lock(&unique_name("poll-handed")).unwrap();
    let mut took = Vec::new();
    for _ in 0..2 {
        let held = rw.write().lock().await.unwrap();
        let waiting = rw.clone().with_owner(redlease::Owner::new());
        let waiter = tokio::spawn(async move {
            let guard = waiting.write().lock().await.unwrap();
            let at = Instant::now();
            guard.unlock().await.unwrap();
            at
        });
        // Long enough for the waiter's pauses to reach their 500 ms ceiling.
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        let released = Instant::now();
        held.unlock().await.unwrap();
        took.push(waiter.await.unwrap().saturating_duration_since(released));
    }
    assert!(
        took.iter().all(|t| *t < Duration::from_millis(100)),
        "the handed waiter took {took:?}"
    );
    client.shutdown().await.unwrap();
}
