//! Replica acknowledgement (`Replicas`): `WAIT` pipelined behind the acquire and renew scripts,
//! against real primaries and replicas. A replica is made deaf by SIGSTOP (a `CLIENT PAUSE`d
//! replica still acknowledges: the replication stream is not a client command), and always
//! woken again by a drop guard.

mod support;

use std::time::{Duration, Instant};

use redlease::{Client, Error, Replicas};
use support::replica::{primary_with_replica, primary_with_replica_args, stop};
use support::{Cluster, Server};

async fn client_with(url: String, replicas: Replicas) -> Client {
    Client::builder(url)
        .replicas(replicas)
        .build()
        .await
        .expect("connect")
}

fn wait_for(replicas: u32, ms: u64) -> Replicas {
    Replicas::Wait {
        replicas,
        timeout: Duration::from_millis(ms),
    }
}

fn waits(server: &Server) -> u64 {
    support::command_calls(server, "wait")
}

/// Expects the typed shortfall with its counts.
fn assert_unacknowledged(result: Result<impl std::fmt::Debug, Error>, acknowledged: u32) {
    match result {
        Err(Error::ReplicasUnacknowledged {
            acknowledged: got,
            wanted,
            ..
        }) => {
            assert_eq!(
                (got, wanted),
                (acknowledged, 1),
                "the counts of the shortfall"
            );
        }
        other => panic!("expected ReplicasUnacknowledged, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_acquisition_succeeds_and_an_unacknowledged_one_is_given_back() {
    let (primary, replica) = primary_with_replica();
    let client = client_with(primary.url(), wait_for(1, 500)).await;
    let name = support::unique_name("acked");
    let lock = client.lock(&name).unwrap();
    let before = waits(&primary);
    let guard = lock.try_lock().await.unwrap().expect("the lock is free");
    assert!(waits(&primary) > before, "no WAIT reached the primary");
    assert!(
        support::exists(&replica, &support::key_of(&name)),
        "the replica has the key"
    );
    guard.unlock().await.unwrap();

    let _stopped = stop(&replica);
    // Per lock: a shorter wait than the client's.
    let impatient = client.lock(&name).unwrap().replicas(wait_for(1, 100));
    let started = Instant::now();
    assert_unacknowledged(impatient.try_lock().await, 0);
    assert!(
        started.elapsed() >= Duration::from_millis(100),
        "WAIT did not wait"
    );
    // lock() fails too (no retry loop), instead of waiting forever.
    let waited = tokio::time::timeout(Duration::from_secs(5), impatient.lock()).await;
    assert_unacknowledged(waited.expect("lock() returned"), 0);
    // Nothing is left held: not on the server, not in the client, and nothing renews it.
    let key = support::key_of(&name);
    assert!(
        !support::exists(&primary, &key),
        "the grant was not given back"
    );
    assert_eq!(client.held_count(), 0);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !support::exists(&primary, &key),
        "something took the key again"
    );
    // A fenced lock goes alone (never coalesced) and is given back the same way.
    let fenced = client
        .lock(&name)
        .unwrap()
        .fenced(true)
        .replicas(wait_for(1, 50));
    assert_unacknowledged(fenced.try_lock().await, 0);
    assert!(!support::exists(&primary, &key));
}

/// A release hands the lock to a waiter of the same client with no `WAIT` behind it; a lock
/// that wants acknowledgement therefore takes no hand-over: its waiter acquires (and waits)
/// itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_of_the_same_client_is_not_handed_an_unacknowledged_lock() {
    let (primary, replica) = primary_with_replica();
    let client = client_with(primary.url(), wait_for(1, 300)).await;
    let name = support::unique_name("handover");
    let lock = client.lock(&name).unwrap();
    let guard = lock.lock().await.unwrap();
    let waiting = {
        let lock = lock.clone();
        tokio::spawn(async move { lock.lock().await })
    };
    // Let the waiter try once, subscribe and settle into its nap as the client's head.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished());
    let _stopped = stop(&replica);
    guard.unlock().await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the waiter returned")
        .expect("no panic");
    assert_unacknowledged(got, 0);
    assert!(
        !support::exists(&primary, lock.key()),
        "the waiter's grant was kept"
    );
    assert_eq!(client.held_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalesced_acquisitions_wait_once_per_batch() {
    let (primary, replica) = primary_with_replica();
    let client = support::client(&primary).await;
    let names = support::unique_names("batch", 32);
    // `WAIT` holds the one connection for up to its timeout, and the batches queue behind each
    // other: a short timeout when the replica is stopped keeps them within the client timeout.
    let try_all = |client: Client, names: Vec<String>, replicas: Replicas| async move {
        let tasks: Vec<_> = names
            .into_iter()
            .map(|name| {
                let lock = client.lock(&name).unwrap().replicas(replicas);
                tokio::spawn(async move { lock.try_lock().await })
            })
            .collect();
        let mut results = Vec::new();
        for task in tasks {
            results.push(task.await.expect("no panic"));
        }
        results
    };
    // With the replica up every acquisition is granted and acknowledged.
    let before = waits(&primary);
    let granted = try_all(client.clone(), names.clone(), wait_for(1, 1000)).await;
    let guards: Vec<_> = granted
        .into_iter()
        .map(|r| r.expect("acknowledged").expect("free"))
        .collect();
    let sent = waits(&primary) - before;
    assert!(
        (1..32).contains(&sent),
        "{sent} WAITs for 32 acquisitions: they were not coalesced"
    );
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    // With it stopped every one fails and is given back: a coalesced entry that skipped WAIT
    // would have been granted.
    let _stopped = stop(&replica);
    for result in try_all(client.clone(), names.clone(), wait_for(1, 50)).await {
        assert_unacknowledged(result, 0);
    }
    for name in &names {
        assert!(
            !support::exists(&primary, &support::key_of(name)),
            "{name} kept"
        );
    }
    assert_eq!(client.held_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_without_replicas_sends_no_wait() {
    let server = Server::start();
    let auto = Replicas::Auto {
        timeout: Duration::from_millis(100),
    };
    let client = client_with(server.url(), auto).await;
    let lock = client.lock(&support::unique_name("auto-none")).unwrap();
    for _ in 0..3 {
        let guard = lock.lock().await.unwrap();
        let stats = client.renew_now().await.unwrap();
        assert_eq!((stats.locks, stats.at_risk), (1, 0));
        guard.unlock().await.unwrap();
    }
    assert_eq!(
        waits(&server),
        0,
        "Auto sent WAIT to a server without replicas"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_sends_no_wait_even_with_replicas() {
    let (primary, replica) = primary_with_replica();
    let before = waits(&primary);
    let client = support::client(&primary).await;
    let lock = client.lock(&support::unique_name("off")).unwrap();
    let guard = lock.lock().await.unwrap();
    client.renew_now().await.unwrap();
    guard.unlock().await.unwrap();
    assert_eq!(waits(&primary), before, "Off sent WAIT");
    // Off ignores a stopped replica altogether.
    let _stopped = stop(&replica);
    let guard = lock.try_lock().await.unwrap().expect("free");
    guard.unlock().await.unwrap();
    assert_eq!(waits(&primary), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_with_a_replica_waits_for_it() {
    let (primary, replica) = primary_with_replica();
    let auto = Replicas::Auto {
        timeout: Duration::from_millis(300),
    };
    let before = waits(&primary);
    let client = client_with(primary.url(), auto).await;
    let lock = client.lock(&support::unique_name("auto-one")).unwrap();
    lock.try_lock()
        .await
        .unwrap()
        .expect("free")
        .unlock()
        .await
        .unwrap();
    assert!(
        waits(&primary) > before,
        "Auto found the replica but sent no WAIT"
    );
    let _stopped = stop(&replica);
    assert_unacknowledged(lock.try_lock().await, 0);
    assert!(!support::exists(&primary, lock.key()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_without_acknowledgement_puts_the_guard_at_risk_then_loses_it() {
    let (primary, replica) = primary_with_replica();
    let lease = Duration::from_millis(900);
    let client = support::client_at(primary.url(), |b| {
        b.replicas(wait_for(1, 150))
            .watchdog_lease(lease)
            .timeout(Duration::from_millis(300))
    })
    .await;
    let guard = client
        .lock(&support::unique_name("renew"))
        .unwrap()
        .lock()
        .await
        .unwrap();
    let stats = client.renew_now().await.unwrap();
    assert_eq!((stats.locks, stats.at_risk, stats.lost), (1, 0, 0));
    assert!(!guard.is_at_risk());

    let stopped = stop(&replica);
    let stats = client.renew_now().await.unwrap();
    assert_eq!((stats.at_risk, stats.lost), (1, 0), "{stats:?}");
    assert!(guard.is_at_risk(), "the holder was not told");
    assert!(!guard.is_lost(), "lost before its validity ran out");
    // Not acknowledged, so not extended: lost once the validity of the last acknowledged
    // renewal runs out, although the primary kept renewing the key.
    let lost = tokio::time::timeout(2 * lease, guard.lost()).await;
    assert!(lost.is_ok(), "still not lost two leases later");
    assert!(guard.is_lost());
    drop(stopped);
    assert!(matches!(guard.unlock().await, Err(Error::LeaseLost { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_without_wait_fails_strict_mode_and_auto_carries_on() {
    let (primary, _replica) =
        primary_with_replica_args(&["--rename-command", "WAIT", "NOWAIT"], "NOWAIT");
    let strict = client_with(primary.url(), wait_for(1, 100)).await;
    let lock = strict.lock(&support::unique_name("unsupported")).unwrap();
    match lock.try_lock().await {
        Err(e @ Error::ReplicasUnsupported { .. }) => assert!(e.is_replicas()),
        other => panic!("expected ReplicasUnsupported, got {other:?}"),
    }
    assert!(
        !support::exists(&primary, lock.key()),
        "the grant was not given back"
    );

    let auto = Replicas::Auto {
        timeout: Duration::from_millis(100),
    };
    let tolerant = client_with(primary.url(), auto).await;
    let lock = tolerant.lock(lock.name()).unwrap();
    for _ in 0..2 {
        let guard = lock.try_lock().await.unwrap().expect("free");
        assert_eq!(tolerant.renew_now().await.unwrap().at_risk, 0);
        guard.unlock().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_settings_are_typed_errors() {
    let server = Server::start();
    let zero_replicas = Client::builder(server.url())
        .replicas(wait_for(0, 100))
        .build()
        .await;
    assert!(matches!(zero_replicas, Err(Error::InvalidArgument(_))));
    let zero_timeout = Client::builder(server.url())
        .replicas(Replicas::Auto {
            timeout: Duration::ZERO,
        })
        .build()
        .await;
    assert!(matches!(zero_timeout, Err(Error::InvalidDuration { .. })));
    let client = support::client(&server).await;
    let lock = client.lock("bad").unwrap().replicas(wait_for(1, 0));
    assert!(lock.try_lock().await.unwrap_err().is_invalid_input());
    assert_eq!(waits(&server), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_wait_reaches_only_the_keys_primary() {
    let cluster = Cluster::start();
    let client = Client::builder_cluster(cluster.seeds())
        .replicas(wait_for(1, 500))
        .build()
        .await
        .unwrap();
    let name = support::unique_name("cluster");
    let key = support::key_of(&name);
    let owner = cluster.primary_of(&key);
    let primaries = cluster.primaries();
    let count = |cluster: &Cluster| -> Vec<u64> {
        primaries
            .iter()
            .map(|&p| waits(&cluster.nodes[p]))
            .collect()
    };
    let before = count(&cluster);
    let lock = client.lock(&name).unwrap();
    let guard = lock.try_lock().await.unwrap().expect("free");
    let stats = client.renew_now().await.unwrap();
    assert_eq!((stats.locks, stats.at_risk), (1, 0));
    let after = count(&cluster);
    for (i, &p) in primaries.iter().enumerate() {
        let sent = after[i] - before[i];
        if p == owner {
            assert!(
                sent >= 2,
                "the key's primary got {sent} WAITs (acquire, renew)"
            );
        } else {
            assert_eq!(
                sent, 0,
                "WAIT reached primary {p}, which does not serve the key"
            );
        }
    }
    guard.unlock().await.unwrap();
    // Auto counts one replica per primary (INFO replication of every primary) and waits for it.
    let auto = Client::builder_cluster(cluster.seeds())
        .replicas(Replicas::Auto {
            timeout: Duration::from_millis(500),
        })
        .build()
        .await
        .unwrap();
    let before = waits(&cluster.nodes[owner]);
    let guard = auto.lock(&name).unwrap().try_lock().await.unwrap();
    guard.expect("free").unlock().await.unwrap();
    assert_eq!(
        waits(&cluster.nodes[owner]),
        before + 1,
        "Auto sent no WAIT"
    );
    // The key's replica stopped: the acquisition is given back with the counts.
    let replica = cluster.replica_of(owner);
    let stopped = stop(&cluster.nodes[replica]);
    let impatient = lock.clone().replicas(wait_for(1, 100));
    assert_unacknowledged(impatient.try_lock().await, 0);
    drop(stopped);
    assert!(!support::exists(&cluster.nodes[owner], &key));
}
