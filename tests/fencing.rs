//! Fencing tokens: strictly increasing across clients, expiry (of the lock and of the counter
//! itself), force-unlock, server restarts (with AOF) and counters left by older versions; the
//! counters expire once their locks are idle; and a resource that uses them rejects a paused
//! holder's late write.

mod support;

// The example's resource check, so these tests prove what the example shows.
#[path = "../examples/fencing.rs"]
#[allow(dead_code)]
mod fencing_example;

use redlease::LockOptions;
use std::time::Duration;

use futures_util::StreamExt;

use redlease::{Client, Lock};
use support::{Server, client, clients, pttl, unique_name};

/// The server's clock in microseconds: tokens follow it.
fn server_us(server: &Server) -> u64 {
    let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut server.conn()).unwrap();
    s * 1_000_000 + us
}

/// A client whose fencing counters outlive their lease by `grace`.
async fn client_with_grace(server: &Server, grace: Duration) -> Client {
    Client::builder(server.url())
        .fence_grace(grace)
        .build()
        .await
        .expect("client")
}

/// The keys of the server matching `pattern`, by `SCAN`.
fn keys_like(server: &Server, pattern: &str) -> Vec<String> {
    let mut conn = server.conn();
    let mut cursor = 0u64;
    let mut keys = Vec::new();
    // SCAN ends when the cursor comes back to 0; a bound keeps a broken server from looping.
    for _ in 0..100_000 {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query(&mut conn)
            .unwrap();
        keys.extend(batch);
        cursor = next;
        if cursor == 0 {
            return keys;
        }
    }
    panic!("SCAN did not finish")
}

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
async fn tokens_increase_across_clients_and_follow_the_servers_clock() {
    let server = Server::start();
    let name = unique_name("fence-clients");
    let before = server_us(&server);
    let mut tokens = Vec::new();
    for _ in 0..5 {
        let client = client(&server).await;
        tokens.push(token_of_one_hold(&fenced(&client, &name)).await);
        client.shutdown().await.unwrap();
    }
    let after = server_us(&server);
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    assert!(
        tokens.iter().all(|t| (before..=after).contains(t)),
        "{before} <= {tokens:?} <= {after}"
    );
}

#[tokio::test]
async fn reentry_keeps_the_token_and_plain_locks_have_none() {
    let server = Server::start();
    let client = client(&server).await;
    let name = unique_name("fence-reentry");
    let lock = fenced(&client, &name);
    let outer = lock.lock().await.unwrap();
    let inner = lock.lock().await.unwrap();
    let token = outer.fencing_token().unwrap();
    assert_eq!(
        inner.fencing_token(),
        Some(token),
        "a re-entry is not a new holder"
    );
    inner.unlock().await.unwrap();
    outer.unlock().await.unwrap();
    let plain = client.lock(&name).unwrap().lock().await.unwrap();
    assert_eq!(plain.fencing_token(), None);
    plain.unlock().await.unwrap();
    assert_eq!(
        lock.status().await.unwrap().fence,
        Some(token),
        "plain holds use no token"
    );
    assert!(token_of_one_hold(&lock).await > token);
}

#[tokio::test]
async fn tokens_keep_counting_after_expiry_and_force_unlock() {
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("fence-lost");
    let lock_a = fenced(&a, &name);
    let lock_b = fenced(&b, &name);

    let expired = lock_a
        .lock_with(LockOptions::new().lease(Duration::from_millis(100)))
        .await
        .unwrap();
    let first = expired.fencing_token().unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let forced = lock_b.lock().await.unwrap();
    let second = forced.fencing_token().unwrap();
    assert!(second > first, "after an expiry: {second} after {first}");
    assert!(lock_a.force_unlock().await.unwrap());
    let third = token_of_one_hold(&lock_a).await;
    assert!(
        third > second,
        "after a force-unlock: {third} after {second}"
    );
    assert!(expired.unlock().await.unwrap_err().is_lease_lost());
    assert!(forced.unlock().await.unwrap_err().is_lease_lost());
}

#[tokio::test]
async fn tokens_survive_a_server_restart_with_aof() {
    let mut server = Server::builder().appendonly(true).start();
    let name = unique_name("fence-restart");
    let before = {
        let client = client(&server).await;
        let lock = fenced(&client, &name);
        let mut last = 0;
        for _ in 0..3 {
            let token = token_of_one_hold(&lock).await;
            assert!(token > last);
            last = token;
        }
        // Crash while a holder has the lock: its token must not be handed out again.
        let guard = lock.lock().await.unwrap();
        let token = guard.fencing_token().unwrap();
        assert!(token > last);
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
    let paused = fenced(&a, &name)
        .lock_with(LockOptions::new().lease(lease))
        .await
        .unwrap();
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

#[tokio::test]
async fn tokens_increase_after_the_counter_itself_expired() {
    let server = Server::start();
    let client = client_with_grace(&server, Duration::from_millis(100)).await;
    let name = unique_name("fence-counter-gone");
    let lock = fenced(&client, &name);
    let first = lock
        .lock_with(LockOptions::new().lease(Duration::from_millis(200)))
        .await
        .unwrap();
    let token = first.fencing_token().unwrap();
    let counter = format!("redlease:{{{name}}}:fence");
    let ttl = pttl(&server, &counter);
    assert!(0 < ttl && ttl <= 300, "lease + grace: {ttl}");
    first.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(pttl(&server, &counter), -2, "the counter expired");
    let next = token_of_one_hold(&lock).await;
    assert!(next > token, "{next} after {token}");
}

#[tokio::test]
async fn a_counter_left_by_an_older_version_is_below_every_new_token() {
    let server = Server::start();
    let client = client(&server).await;
    let name = unique_name("fence-upgrade");
    let counter = format!("redlease:{{{name}}}:fence");
    // Older versions counted 1, 2, 3, ... in a key that never expired.
    redis::cmd("SET")
        .arg(&counter)
        .arg(41)
        .exec(&mut server.conn())
        .unwrap();
    let token = token_of_one_hold(&fenced(&client, &name)).await;
    assert!(token > 41);
    assert!(pttl(&server, &counter) > 0, "the counter now expires");
}

#[tokio::test]
async fn a_guard_holding_past_its_counters_expiry_keeps_its_token_and_the_next_is_larger() {
    let server = Server::start();
    let client = Client::builder(server.url())
        .fence_grace(Duration::ZERO)
        .watchdog_lease(Duration::from_millis(600))
        .build()
        .await
        .unwrap();
    let name = unique_name("fence-long-hold");
    let lock = fenced(&client, &name);
    let held = lock.lock().await.unwrap();
    let token = held.fencing_token().unwrap();
    let counter = format!("redlease:{{{name}}}:fence");
    // The watchdog renews the lock, not the counter: it expires under the hold.
    let gone = support::eventually_async(Duration::from_secs(3), || async {
        pttl(&server, &counter) == -2
    })
    .await;
    assert!(gone, "the counter outlived its lease under a renewed hold");
    assert!(!held.is_lost());
    let again = lock.lock().await.unwrap();
    assert_eq!(
        again.fencing_token(),
        Some(token),
        "a re-entry keeps the guard's token"
    );
    again.unlock().await.unwrap();
    held.unlock().await.unwrap();
    let other = client_with_grace(&server, Duration::ZERO).await;
    let next = token_of_one_hold(&fenced(&other, &name)).await;
    assert!(next > token, "{next} after {token}");
}

#[tokio::test]
async fn ten_thousand_fenced_names_leave_no_counter_behind() {
    let server = Server::start();
    let client = client_with_grace(&server, Duration::from_millis(200)).await;
    let prefix = unique_name("fence-many");
    let names: Vec<String> = (0..10_000).map(|i| format!("{prefix}:{i}")).collect();
    let mut last = std::collections::HashMap::new();
    // The first round's counters live long enough (5 s lease) to count them all; the second's
    // come after they expired.
    let leases = [Duration::from_secs(5), Duration::from_secs(1)];
    for (round, lease) in leases.into_iter().enumerate() {
        let tokens: Vec<u64> = futures_util::stream::iter(names.iter())
            .map(|name| {
                let lock = fenced(&client, name);
                async move {
                    let guard = lock
                        .lock_with(LockOptions::new().lease(lease))
                        .await
                        .expect("lock");
                    let token = guard.fencing_token().expect("a token");
                    guard.unlock().await.expect("unlock");
                    token
                }
            })
            .buffered(64)
            .collect()
            .await;
        for (name, token) in names.iter().zip(tokens) {
            if let Some(before) = last.insert(name.clone(), token) {
                assert!(
                    token > before,
                    "{name}: {token} after {before} in round {round}"
                );
            }
        }
        let ours = format!("redlease:{{{prefix}:*");
        if round == 0 {
            let left = keys_like(&server, &ours);
            assert_eq!(
                left.len(),
                10_000,
                "one counter a name, for the lease and the grace"
            );
        }
        // Past the lease of the last write and the grace: nothing is left.
        let gone = support::eventually(Duration::from_secs(12), || {
            keys_like(&server, &ours).is_empty()
        });
        let left = keys_like(&server, &ours);
        assert!(gone, "{} keys left, such as {:?}", left.len(), left.first());
    }
}
