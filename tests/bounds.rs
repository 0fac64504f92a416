//! The public types can cross tasks and threads, and the futures can be spawned.

mod support;

use std::future::Future;

use redlease::{
    Client, HeldLock, Lock, LockGuard, LockOptions, MultiLock, MultiLockGuard, Owner, RedLock,
    RedLockGuard,
};

fn send_sync_static<T: Send + Sync + 'static>() {}

fn spawnable<F: Future + Send + 'static>(_: F) {}

#[test]
fn handles_and_guards_are_send_sync_and_static() {
    send_sync_static::<Client>();
    send_sync_static::<Lock>();
    send_sync_static::<LockGuard>();
    send_sync_static::<HeldLock>();
    send_sync_static::<LockOptions>();
    send_sync_static::<MultiLock>();
    send_sync_static::<MultiLockGuard>();
    send_sync_static::<RedLock>();
    send_sync_static::<RedLockGuard>();
    send_sync_static::<Owner>();
    send_sync_static::<redlease::Error>();
    send_sync_static::<redlease::blocking::Client>();
}

/// Compile-time only: every waiting future (and `run` with a `Send` body) can be spawned.
#[allow(dead_code)]
fn futures_are_send(lock: Lock, guard: LockGuard, multi: MultiLock, red: RedLock) {
    spawnable({
        let lock = lock.clone();
        async move { lock.lock().await }
    });
    spawnable({
        let lock = lock.clone();
        async move { lock.try_lock_with(LockOptions::new()).await }
    });
    spawnable({
        let lock = lock.clone();
        async move { lock.run(|held| async move { held.fencing_token() }).await }
    });
    spawnable(async move { guard.unlock().await });
    spawnable(async move { multi.lock().await });
    spawnable(async move { red.lock().await });
}

/// The watchdog runs on tokio's clock: with the clock paused, advancing it by a third of the
/// lease renews the lock at once (the server's TTL jumps back up), without waiting 10 real
/// seconds.
#[tokio::test]
async fn the_watchdog_renews_on_tokios_clock() {
    let server = support::Server::start();
    let client = support::client(&server).await;
    let guard = client.lock("paused").unwrap().lock().await.unwrap();
    let key = support::key_of("paused");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let before = support::pttl(&server, &key);
    assert!(before < 29_000, "30 s lease, 1.5 s later: {before} ms");
    tokio::time::pause();
    tokio::time::advance(std::time::Duration::from_secs(10)).await;
    tokio::time::resume();
    let renewed = support::eventually_async(std::time::Duration::from_secs(3), || async {
        support::pttl(&server, &key) > 29_000
    })
    .await;
    assert!(
        renewed,
        "no renewal after a third of the lease on tokio's clock"
    );
    guard.unlock().await.unwrap();
}
