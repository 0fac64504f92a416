//! A hold handed over by the server's queue lives the claim lease until it is renewed early
//! (`src/watchdog/early.rs`): that renewal must not wait on anything but the hold's own server.

mod support;

use std::time::{Duration, Instant};

use redlease::Client;
use support::{Cluster, key_of, pttl};

/// On a cluster whose one primary hangs (paused), locks handed over on the other primaries keep
/// their leases while their guards live: neither the watchdog's tick, which waits on the paused
/// primary for a lock held there, nor a renewal routed through another node holds their early
/// renewals back. (Each renewal asked a random node for the slot map during a version of the
/// schedule: 5–10 of 10–12 grants were lost.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_keep_their_lease_while_another_primary_hangs() {
    const PAUSE_MS: u64 = 6_000;
    let cluster = Cluster::start();
    let names = cluster.names_per_primary("early", 10);
    let (paused_name, paused) = names[0].clone();
    let others: Vec<(String, usize)> = names
        .iter()
        .filter(|(_, p)| *p != paused)
        .cloned()
        .collect();
    let waiter = Client::builder_cluster(cluster.seeds())
        .timeout(Duration::from_secs(4))
        .build()
        .await
        .unwrap();
    let holder = Client::builder_cluster(cluster.seeds())
        .build()
        .await
        .unwrap();
    // Scripts loaded on every primary, for both clients.
    for (name, _) in &names {
        for client in [&waiter, &holder] {
            client
                .lock(name)
                .unwrap()
                .lock()
                .await
                .unwrap()
                .unlock()
                .await
                .unwrap();
        }
    }
    // The waiter's subscriber connected to every node, and a first early renewal made.
    {
        let name = &others[others.len() - 1].0;
        let held = holder.lock(name).unwrap().lock().await.unwrap();
        let lock = waiter.lock(name).unwrap();
        let waiting = tokio::spawn(async move { lock.lock().await });
        tokio::time::sleep(Duration::from_millis(150)).await;
        held.unlock().await.unwrap();
        let guard = waiting.await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        guard.unlock().await.unwrap();
    }
    // A lock of the waiter's client on the primary about to hang, so the watchdog's next tick
    // waits on it (a 3 s lease: ticks every second).
    let stuck = waiter
        .lock(&paused_name)
        .unwrap()
        .watchdog_lease(Duration::from_secs(3))
        .lock()
        .await
        .unwrap();
    cluster.nodes[paused].client_pause(PAUSE_MS, true);
    let started = Instant::now();
    let mut kept = Vec::new();
    // Bounded: one hand-over per lock of the other primaries, within the pause.
    for (name, primary) in others.iter().take(6) {
        let held = holder.lock(name).unwrap().lock().await.unwrap();
        let lock = waiter.lock(name).unwrap();
        let waiting = tokio::spawn(async move { lock.lock().await });
        tokio::time::sleep(Duration::from_millis(150)).await;
        held.unlock().await.unwrap();
        let guard = tokio::time::timeout(Duration::from_secs(3), waiting)
            .await
            .expect("handed over within 3 s")
            .unwrap()
            .unwrap();
        // Held past the claim lease (2 s): only its early renewal keeps it.
        let (name, primary) = (name.clone(), *primary);
        kept.push(tokio::spawn(async move {
            let lost = tokio::time::timeout(Duration::from_millis(2_500), guard.lost())
                .await
                .is_ok();
            (name, primary, lost, guard)
        }));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(
        started.elapsed() < Duration::from_millis(PAUSE_MS),
        "the hand-overs ran during the pause"
    );
    for check in kept {
        let (name, primary, lost, guard) = check.await.unwrap();
        assert!(!lost, "{name}: lost while its guard lived");
        assert!(
            pttl(&cluster.nodes[primary], &key_of(&name)) > 2_000,
            "{name}: renewed"
        );
        guard.unlock().await.unwrap();
    }
    drop(stuck);
}
