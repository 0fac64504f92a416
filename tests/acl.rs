//! ACL least privilege: a Redis user with exactly the rights docs/acl.md lists runs every lock
//! move, and a user missing one right fails at connect with that right named, before any lock
//! is taken.

mod support;

use std::time::Duration;

use redlease::{Client, Error, LockGuard, Owner, WaitBy};
use support::{Server, key_of, spawn_waiter, take_and_release, unique_name, woken_after_unlock};

/// The rights of docs/acl.md for one server and the default prefix (`redlease`).
const LEAST: &str = "resetkeys resetchannels ~redlease:* &redlease:* -@all \
    +evalsha +script|load +publish +subscribe +unsubscribe \
    +get +hget +hmget +hgetall +hset +hmset +pexpire +exists +del \
    +hsetnx +hexists +hincrby +hdel +set +incr +incrby +decr +decrby \
    +rpush +lindex +lrem +lpop +type +pttl +time +pubsub|numsub +info +client|tracking";

/// Creates (or resets) `user` with password `pw` and the rights `rules` (space-separated).
fn set_user(server: &Server, user: &str, rules: &str) {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER")
        .arg(user)
        .arg("reset")
        .arg("on")
        .arg("><pw>");
    for rule in rules.split_whitespace() {
        cmd.arg(rule);
    }
    let _: () = cmd.query(&mut server.conn()).expect("ACL SETUSER");
}

fn url_of(server: &Server, user: &str) -> String {
    format!("redis://{user}:<pw>@127.0.0.1:{}", server.port())
}

/// What the server refused (ACL LOG), as one line per entry.
fn acl_log(server: &Server) -> Vec<String> {
    let entries: Vec<redis::Value> = redis::cmd("ACL")
        .arg("LOG")
        .query(&mut server.conn())
        .expect("ACL LOG");
    entries.iter().map(|entry| format!("{entry:?}")).collect()
}

fn connected_clients(server: &Server) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("clients")
        .query(&mut server.conn())
        .expect("INFO clients");
    info.lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("connected_clients in INFO")
}

fn keys(server: &Server) -> Vec<String> {
    redis::cmd("KEYS")
        .arg("redlease:*")
        .query(&mut server.conn())
        .expect("KEYS")
}

/// The moves every least-privilege test makes: a fenced lock, a waiter of another client woken
/// by the unlock message (`subscribed` tells when it listens), a second fenced hold with a larger
/// token, and a renewal round without failures. Returns the second hold.
async fn fenced_round(
    holder: &Client,
    waiter: &Client,
    name: &str,
    subscribed: impl AsyncFn() -> bool,
) -> LockGuard {
    let fenced = |client: &Client| client.lock(name).unwrap().fenced(true);
    let guard = fenced(holder).lock().await.unwrap();
    let first = guard.fencing_token().expect("a fencing token");
    let waiting = spawn_waiter(fenced(waiter));
    assert!(subscribed().await, "the waiter never subscribed");
    let woken = woken_after_unlock(guard, waiting, Duration::from_secs(5)).await;
    assert!(woken < Duration::from_secs(1), "woken after {woken:?}");
    let again = fenced(holder).lock().await.unwrap();
    assert!(again.fencing_token().expect("a token") > first);
    assert_eq!(holder.renew_now().await.unwrap().failed_batches, 0);
    again
}

/// One move of each kind of the lock family, a writer waiting for a reader among them (its
/// intent and its wake-up).
async fn family_round(client: &Client, name: &str) {
    let rw = client.read_write_lock(name).unwrap();
    let reading = rw.read().lock().await.unwrap();
    let writer = client
        .read_write_lock(name)
        .unwrap()
        .with_owner(Owner::new());
    let writing = tokio::spawn(async move { writer.write().lock().await.map(drop) });
    tokio::time::sleep(Duration::from_millis(50)).await;
    reading.unlock().await.unwrap();
    writing.await.unwrap().unwrap();
    let semaphore = client.semaphore(name).unwrap();
    semaphore.set_permits(2).await.unwrap();
    semaphore.acquire().await.unwrap();
    semaphore.release(1).await.unwrap();
    let permits = client.permit_semaphore(name).unwrap();
    permits.set_permits(1).await.unwrap();
    permits.acquire().await.unwrap().release().await.unwrap();
    let latch = client.count_down_latch(name).unwrap();
    assert!(latch.try_set_count(1).await.unwrap());
    latch.count_down().await.unwrap();
    latch.wait().await.unwrap();
    let fair = client.fair_lock(name).unwrap();
    fair.lock().await.unwrap().unlock().await.unwrap();
    // A hold's metadata is written to, and removed from, the client's announcement.
    let with_metadata = redlease::LockOptions::new().metadata("job 1");
    let lock = client.lock(name).unwrap();
    lock.lock_with(with_metadata)
        .await
        .unwrap()
        .unlock()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_least_privilege_user_does_everything() {
    let server = Server::start();
    set_user(&server, "locker", LEAST);
    let url = url_of(&server, "locker");
    let holder = Client::connect(&url).await.unwrap();
    let waiter = Client::connect(&url).await.unwrap();
    // The check's subscriber connections are closed by now: the two command connections and
    // the one of this probe are left (the loss notice connects at a client's first hold).
    assert!(
        support::eventually(Duration::from_secs(1), || connected_clients(&server) == 3),
        "the check left a connection open: {} clients",
        connected_clients(&server)
    );
    let name = unique_name("acl");
    let channel = support::unlock_channel(&key_of(&name));
    let again = fenced_round(&holder, &waiter, &name, async || {
        support::until_subscribed(&server, &channel, 1).await
    })
    .await;
    let status = holder.lock(&name).unwrap().status().await.unwrap();
    assert_eq!(status.holders.len(), 1, "{status:?}");
    again.unlock().await.unwrap();
    family_round(&holder, &name).await;
    holder.shutdown().await.unwrap();
    waiter.shutdown().await.unwrap();
    let refused = acl_log(&server);
    assert!(refused.is_empty(), "the server refused: {refused:?}");
}

/// Builds a client as `user`, whose rights are the least ones less `minus` (e.g. `-publish`).
async fn build_without(server: &Server, user: &str, minus: &str) -> Error {
    set_user(server, user, &format!("{LEAST} {minus}"));
    Client::builder(url_of(server, user))
        .build()
        .await
        .map(|_| panic!("a client without {minus} was built"))
        .unwrap_err()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_right_is_named_at_connect() {
    let server = Server::start();
    for (minus, named) in [
        ("-publish", "PUBLISH"),
        ("-script|load", "SCRIPT LOAD"),
        ("-evalsha", "EVALSHA"),
        ("-hset", "HSET"),
        ("-subscribe", "SUBSCRIBE"),
        ("-pubsub|numsub", "PUBSUB NUMSUB"),
        ("-get", "GET"),
        ("-hmset", "HMSET"),
        ("-hmget", "HMGET"),
    ] {
        let error = build_without(&server, "partial", minus).await;
        let Error::NoPermission { right, .. } = &error else {
            panic!("without {minus}: {error:?}");
        };
        assert!(right.contains(named), "without {minus}: {right}");
        assert!(error.is_no_permission());
        assert!(!error.is_unavailable());
        assert!(keys(&server).is_empty(), "left behind: {:?}", keys(&server));
    }

    // Keys and channels under another prefix only.
    set_user(
        &server,
        "elsewhere",
        &LEAST.replace("~redlease:*", "~other:*"),
    );
    let error = Client::connect(&url_of(&server, "elsewhere"))
        .await
        .expect_err("a user without the prefix's keys was let in");
    let Error::NoPermission { right, .. } = &error else {
        panic!("{error:?}");
    };
    assert!(right.contains("~redlease:*"), "{right}");
    set_user(&server, "deaf", &LEAST.replace("&redlease:*", "&other:*"));
    let error = Client::connect(&url_of(&server, "deaf"))
        .await
        .expect_err("a user without the prefix's channels was let in");
    let Error::NoPermission { right, .. } = &error else {
        panic!("{error:?}");
    };
    assert!(right.contains("&redlease:*"), "{right}");
    assert!(keys(&server).is_empty(), "left behind: {:?}", keys(&server));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn polling_needs_no_subscribe() {
    let server = Server::start();
    set_user(
        &server,
        "poller",
        &format!("{LEAST} -subscribe -unsubscribe"),
    );
    let client =
        support::client_at(url_of(&server, "poller"), |b| b.wait_by(WaitBy::POLLING)).await;
    let name = unique_name("acl-poll");
    let guard = client.lock(&name).unwrap().lock().await.unwrap();
    guard.unlock().await.unwrap();
    client.shutdown().await.unwrap();
    // Unchecked, the same user's client is built and fails later instead.
    let unchecked = Client::builder(url_of(&server, "poller"))
        .check_rights(false)
        .build()
        .await;
    assert!(unchecked.is_ok(), "{unchecked:?}");
}

/// The cluster additions of docs/acl.md: sharded pub/sub, the topology reads, and ASKING.
const CLUSTER_EXTRA: &str = "+spublish +ssubscribe +sunsubscribe +pubsub|shardnumsub \
    +cluster|slots +cluster|nodes +asking +eval +ping";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_least_privilege_user_does_everything_on_a_cluster() {
    let cluster = support::Cluster::start();
    for node in &cluster.nodes {
        set_user(node, "locker", &format!("{LEAST} {CLUSTER_EXTRA}"));
    }
    let seeds: Vec<String> = cluster
        .seeds()
        .iter()
        .map(|seed| seed.replacen("redis://", "redis://locker:<pw>@", 1))
        .collect();
    let holder = Client::connect_cluster(seeds.clone()).await.unwrap();
    let waiter = Client::connect_cluster(seeds.clone()).await.unwrap();
    let name = unique_name("acl-cluster");
    let again = fenced_round(&holder, &waiter, &name, async || {
        support::until_shard_subscribed(&cluster, &key_of(&name), 1).await
    })
    .await;
    again.unlock().await.unwrap();
    holder.shutdown().await.unwrap();
    waiter.shutdown().await.unwrap();
    for node in &cluster.nodes {
        let refused = acl_log(node);
        assert!(refused.is_empty(), "{} refused: {refused:?}", node.port());
    }

    // Without sharded publishing, or the plain EVAL of the renewal by node, or the topology,
    // the check names what is missing.
    for (minus, named) in [
        ("-spublish", "SPUBLISH"),
        ("-ssubscribe", "SSUBSCRIBE"),
        ("-eval", "EVAL"),
        ("-cluster|slots", "CLUSTER SLOTS"),
    ] {
        for node in &cluster.nodes {
            set_user(node, "locker", &format!("{LEAST} {CLUSTER_EXTRA} {minus}"));
        }
        let error = Client::connect_cluster(seeds.clone()).await.unwrap_err();
        let Error::NoPermission { right, .. } = &error else {
            panic!("without {minus}: {error:?}");
        };
        assert!(right.contains(named), "without {minus}: {right}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lazy_client_checks_before_its_first_lock() {
    let server = Server::start();
    set_user(&server, "lazy", &format!("{LEAST} -publish"));
    let client = Client::builder(url_of(&server, "lazy"))
        .lazy(true)
        .build()
        .await
        .expect("a lazy client connects on first use");
    let name = unique_name("acl-lazy");
    let error = client.lock(&name).unwrap().try_lock().await.unwrap_err();
    let Error::NoPermission { right, .. } = &error else {
        panic!("{error:?}");
    };
    assert!(right.contains("PUBLISH"), "{right}");
    assert!(keys(&server).is_empty(), "left behind: {:?}", keys(&server));

    // Once the right is granted, the next call checks again, passes, and takes the lock.
    set_user(&server, "lazy", LEAST);
    let guard = client.lock(&name).unwrap().try_lock().await.unwrap();
    assert!(guard.is_some(), "not granted after the right was given");
    guard.unwrap().unlock().await.unwrap();
    // Checked once: later calls run no check (each check loads its probe script; the lock
    // scripts are loaded by now).
    let loads_before = support::command_calls(&server, "script|load");
    take_and_release(&client.lock(&name).unwrap()).await;
    assert_eq!(
        support::command_calls(&server, "script|load"),
        loads_before,
        "checked again"
    );
    client.shutdown().await.unwrap();
}
