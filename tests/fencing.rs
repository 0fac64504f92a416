//! Fencing tokens: strictly increasing across clients, expiry, force-unlock and server
//! restarts (with AOF), and a resource that uses them rejects a paused holder's late write.

mod support;

// The example's resource check, so these tests prove what the example shows.
#[path = "../examples/fencing.rs"]
#[allow(dead_code)]
mod fencing_example;

use std::time::Duration;

use redlease::{Client, Lock};
use support::{Server, client, clients, unique_name};

fn fenced(client: &Client, name: &str) -> Lock {
    client.lock(name).expect("a valid name").fenced(true)
}

/// One acquisition and release; the token it got.
async fn token_of_one_hold(lock: &Lock) -> u64 {
    let guard = lock.lock().await.expect("lock");
    let token = guard.fencing_token().expect("a fenced lock has a token");
    guard.unlock().await.expect("unlock");
    token
}

#[tokio::test]
async fn tokens_count_up_across_clients() {
    let server = Server::start();
    let name = unique_name("fence-clients");
    let mut tokens = Vec::new();
    for _ in 0..5 {
        let client = client(&server).await;
        tokens.push(token_of_one_hold(&fenced(&client, &name)).await);
        client.shutdown().await.unwrap();
    }
    assert_eq!(tokens, [1, 2, 3, 4, 5]);
}

#[tokio::test]
async fn reentry_keeps_the_token_and_plain_locks_have_none() {
    let server = Server::start();
    let client = client(&server).await;
    let name = unique_name("fence-reentry");
    let lock = fenced(&client, &name);
    let outer = lock.lock().await.unwrap();
    let inner = lock.lock().await.unwrap();
    assert_eq!(outer.fencing_token(), Some(1));
    assert_eq!(
        inner.fencing_token(),
        Some(1),
        "a re-entry is not a new holder"
    );
    inner.unlock().await.unwrap();
    outer.unlock().await.unwrap();
    let plain = client.lock(&name).unwrap().lock().await.unwrap();
    assert_eq!(plain.fencing_token(), None);
    plain.unlock().await.unwrap();
    assert_eq!(
        lock.status().await.unwrap().fence,
        Some(1),
        "plain holds use no token"
    );
    assert_eq!(token_of_one_hold(&lock).await, 2);
}

#[tokio::test]
async fn tokens_keep_counting_after_expiry_and_force_unlock() {
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("fence-lost");
    let lock_a = fenced(&a, &name);
    let lock_b = fenced(&b, &name);

    let expired = lock_a
        .lock_with_lease(Duration::from_millis(100))
        .await
        .unwrap();
    assert_eq!(expired.fencing_token(), Some(1));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let forced = lock_b.lock().await.unwrap();
    assert_eq!(forced.fencing_token(), Some(2), "after an expiry");
    assert!(lock_a.force_unlock().await.unwrap());
    assert_eq!(token_of_one_hold(&lock_a).await, 3, "after a force-unlock");
    assert!(expired.unlock().await.unwrap_err().is_lease_lost());
    assert!(forced.unlock().await.unwrap_err().is_lease_lost());
}

#[tokio::test]
async fn tokens_survive_a_server_restart_with_aof() {
    let mut server = Server::builder()
        .appendonly(true)
        .arg("--appendfsync")
        .arg("always")
        .start();
    let name = unique_name("fence-restart");
    let before = {
        let client = client(&server).await;
        let lock = fenced(&client, &name);
        for expected in 1..=3 {
            assert_eq!(token_of_one_hold(&lock).await, expected);
        }
        // Crash while a holder has the lock: its token must not be handed out again.
        let guard = lock.lock().await.unwrap();
        let token = guard.fencing_token().unwrap();
        server.kill();
        drop(guard);
        client.shutdown().await.ok();
        token
    };
    server.restart();
    let client = client(&server).await;
    let lock = fenced(&client, &name);
    // The holder's hash came back with its lease too; force it free like an operator would.
    lock.force_unlock().await.unwrap();
    let after = token_of_one_hold(&lock).await;
    assert_eq!(before, 4);
    assert!(
        after > before,
        "token {after} after a restart, {before} before"
    );
}

#[tokio::test]
async fn paused_holders_late_write_is_rejected() {
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("fence-pause");
    let resource = unique_name("fence-resource");
    let mut storage = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();

    let lease = Duration::from_millis(200);
    let paused = fenced(&a, &name).lock_with_lease(lease).await.unwrap();
    let old = paused.fencing_token().unwrap();
    tokio::time::sleep(lease * 2).await; // the "GC pause"
    let newer = fenced(&b, &name).lock().await.unwrap();
    let new = newer.fencing_token().unwrap();
    assert!(new > old);
    assert!(
        fencing_example::fenced_write(&mut storage, &resource, new, "new")
            .await
            .unwrap()
    );
    assert!(
        !fencing_example::fenced_write(&mut storage, &resource, old, "stale")
            .await
            .unwrap(),
        "the late write with token {old} must be rejected after {new}"
    );
    // The same holder may write again with its token.
    assert!(
        fencing_example::fenced_write(&mut storage, &resource, new, "again")
            .await
            .unwrap()
    );
    assert!(paused.is_lost());
    newer.unlock().await.unwrap();
}
