//! Waiting for a lock: woken by the unlock message at once, by the holder's TTL when no message
//! comes, and every waiter in turn.

mod support;

use redlease::LockOptions;
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{
    Server, channels, client, clients, join_within, key_of, spawn_waiter, unique_name,
    unlock_channel, until_subscribed, woken_after_unlock,
};

/// Waits until `n` connections listen on the unlock channel of `key`.
async fn until_waiting(server: &Server, key: &str, n: u64) {
    let channel = unlock_channel(key);
    let ok = until_subscribed(server, &channel, n).await;
    assert!(ok, "{n} waiter(s) never subscribed to {channel}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_wakes_within_50ms_of_unlock() {
    support::init_tracing();
    let server = Server::start();
    let [holder, waiter] = clients(&server).await;
    let name = unique_name("wake");
    let lock = holder.lock(&name).unwrap();
    for round in 0..5 {
        // A 30 s fixed lease: only the unlock message can explain a fast wake-up.
        let held = lock
            .lock_with(LockOptions::new().lease(Duration::from_secs(30)))
            .await
            .unwrap();
        let waiting = spawn_waiter(waiter.lock(&name).unwrap());
        until_waiting(&server, lock.key(), 1).await;
        // Let the waiter settle into its wait (past its second attempt).
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "the waiter took a held lock");
        let took = woken_after_unlock(held, waiting, Duration::from_secs(5)).await;
        assert!(
            took <= Duration::from_millis(50),
            "round {round}: the waiter took the lock {took:?} after the unlock"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_takes_an_expired_lock_within_its_ttl() {
    let server = Server::start();
    let [holder, waiter] = clients(&server).await;
    let name = unique_name("expire");
    // The holder never unlocks: its key simply expires, and no message is published.
    let held = holder
        .lock(&name)
        .unwrap()
        .lock_with(LockOptions::new().lease(Duration::from_secs(1)))
        .await
        .unwrap();
    let start = Instant::now();
    let guard = tokio::time::timeout(Duration::from_secs(5), waiter.lock(&name).unwrap().lock())
        .await
        .expect("the waiter did not get an expired lock within 5 s")
        .unwrap();
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(850) && took <= Duration::from_millis(1500),
        "acquired after {took:?}; the holder's TTL was 1 s"
    );
    assert!(held.is_lost());
    assert_eq!(
        waiter.lock(&name).unwrap().hold_count().await.unwrap(),
        1,
        "the waiter holds it now"
    );
    assert!(held.unlock().await.unwrap_err().is_lease_lost());
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_lock_with_a_wait_gets_a_lock_released_during_the_wait() {
    let server = Server::start();
    let [holder, waiter] = clients(&server).await;
    let name = unique_name("try-for");
    let held = holder.lock(&name).unwrap().lock().await.unwrap();
    let lock = waiter.lock(&name).unwrap();
    let start = Instant::now();
    let waiting = tokio::spawn(async move {
        lock.try_lock_with(LockOptions::new().wait(Duration::from_secs(10)))
            .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.unlock().await.unwrap();
    let guard = waiting
        .await
        .unwrap()
        .unwrap()
        .expect("acquired within the wait");
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(2),
        "{took:?}"
    );
    guard.unlock().await.unwrap();
}

/// Many waiters of one client: each unlock wakes one, and every one gets its turn long before
/// any 30 s lease could run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_waiters_all_get_the_lock_in_turn() {
    let server = Server::start();
    let [holder, waiters] = clients(&server).await;
    let name = unique_name("turns");
    let held = holder.lock(&name).unwrap().lock().await.unwrap();
    let inside = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let tasks: Vec<_> = (0..6)
        .map(|_| {
            let lock = waiters.lock(&name).unwrap();
            let inside = inside.clone();
            tokio::spawn(async move {
                let guard = lock.lock().await.unwrap();
                let before = inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                assert_eq!(before, 0, "two waiters inside at once");
                tokio::time::sleep(Duration::from_millis(20)).await;
                inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                guard.unlock().await.unwrap();
            })
        })
        .collect();
    until_waiting(&server, &key_of(&name), 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let start = Instant::now();
    held.unlock().await.unwrap();
    join_within(tasks, Duration::from_secs(10), "a waiter was left waiting").await;
    let took = start.elapsed();
    assert!(
        took < Duration::from_secs(3),
        "six 20 ms turns took {took:?}"
    );
    assert_eq!(waiters.held_count(), 0);
}

/// Waiters in different clients (as in different processes): every one is woken in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_in_other_clients_all_get_the_lock_in_turn() {
    let server = Server::start();
    let name = unique_name("clients");
    let holder = client(&server).await;
    let held = holder.lock(&name).unwrap().lock().await.unwrap();
    let waiters = clients::<5>(&server).await;
    let tasks: Vec<_> = waiters
        .iter()
        .map(|c| {
            let lock = c.lock(&name).unwrap();
            tokio::spawn(async move {
                let guard = lock.lock().await.unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
                guard.unlock().await.unwrap();
            })
        })
        .collect();
    until_waiting(&server, &key_of(&name), 5).await;
    let start = Instant::now();
    held.unlock().await.unwrap();
    join_within(tasks, Duration::from_secs(10), "a waiter was left waiting").await;
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    for c in &waiters {
        assert_eq!(c.held_count(), 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_unsubscribes_once_it_has_the_lock() {
    let server = Server::start();
    let [holder, waiter] = clients(&server).await;
    let name = unique_name("unsub");
    let lock = holder.lock(&name).unwrap();
    let held = lock.lock().await.unwrap();
    let waiting = {
        let lock = waiter.lock(&name).unwrap();
        tokio::spawn(async move { lock.lock().await.unwrap() })
    };
    until_waiting(&server, lock.key(), 1).await;
    held.unlock().await.unwrap();
    let guard = waiting.await.unwrap();
    let channel = unlock_channel(lock.key());
    let left = until_subscribed(&server, &channel, 0).await;
    assert!(left, "still subscribed: {:?}", channels(&server));
    guard.unlock().await.unwrap();
}
