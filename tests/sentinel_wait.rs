//! Redis Sentinel with replica acknowledgement (`Replicas`, `WAIT`) across a failover, against
//! real processes: a master, two replicas and three sentinels per test (`support::sentinel`).
//! What `WAIT` buys (no acknowledged lock is lost by a kill -9 of the master), what happens
//! without it when the replicas lag (the lock vanishes, its guard is reported lost), and
//! `Replicas::Auto` counting the replicas again after a failover or a shortfall.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redlease::{Error, Replicas};
use support::sentinel::SentinelGroup;
use support::{exists, key_of, pttl, unique_name};

/// Sentinels here fail over within a few seconds of a kill (`down-after-milliseconds 1000`).
const FAILOVER_LIMIT: Duration = Duration::from_secs(15);

fn start_group() -> SentinelGroup {
    tokio::task::block_in_place(SentinelGroup::start)
}

/// `Replicas::Wait` for both replicas of the group.
fn both_replicas(ms: u64) -> Replicas {
    Replicas::Wait {
        replicas: 2,
        timeout: Duration::from_millis(ms),
    }
}

/// The hold counts in a lock's hash (one field per owner).
fn hold_counts(server: &support::Server, key: &str) -> Vec<i64> {
    redis::cmd("HVALS")
        .arg(key)
        .query(&mut server.conn())
        .unwrap_or_default()
}

/// With `WAIT` on, every lock handed out was acknowledged by both replicas: whichever one the
/// sentinels promote after a kill -9 of the master has every lock, with its hold count, and
/// the holder keeps renewing them there (acknowledged again once the old master rejoins as a
/// replica) while another client's waiter still cannot take them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_wait_no_acknowledged_lock_is_lost_by_the_failover() {
    let mut group = start_group();
    let lease = Duration::from_secs(9);
    let holder = support::client_at(group.url(), |b| {
        b.watchdog_lease(lease).replicas(both_replicas(500))
    })
    .await;
    let other = support::client_at(group.url(), |b| b.watchdog_lease(lease)).await;
    let names = support::unique_names("sentinel-wait", 5);
    let mut guards = Vec::new();
    for name in &names {
        guards.push(holder.lock(name).unwrap().lock().await.unwrap());
    }
    // Re-entered: its hash counts two holds, which must survive too.
    guards.push(holder.lock(&names[0]).unwrap().lock().await.unwrap());
    let old = group.master();
    for name in &names {
        for i in (0..3).filter(|&i| i != old) {
            // No waiting: WAIT answered only once both replicas had the write.
            assert!(
                exists(&group.servers[i], &key_of(name)),
                "{name} was handed out before replica {i} had it"
            );
        }
    }
    let waiters: Vec<_> = names
        .iter()
        .map(|name| {
            let lock = other.lock(name).unwrap();
            tokio::spawn(async move { lock.lock().await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(200)).await;

    let killed_at = Instant::now();
    tokio::task::block_in_place(|| group.kill_master());
    let new = tokio::task::block_in_place(|| group.until_promoted(old, FAILOVER_LIMIT));
    eprintln!("promoted {:?} after the kill", killed_at.elapsed());
    for (i, name) in names.iter().enumerate() {
        let want = if i == 0 { vec![2] } else { vec![1] };
        assert_eq!(
            hold_counts(&group.servers[new], &key_of(name)),
            want,
            "{name} on the new master"
        );
    }
    // The new master has one replica left; with the old master back as its replica, both
    // acknowledge again, and a renewal there is acknowledged for every lock.
    tokio::task::block_in_place(|| group.rejoin_as_replica(old, new));
    let renewed = support::eventually_async(Duration::from_secs(5), || async {
        let stats = holder.renew_now().await.unwrap();
        stats.locks == names.len() && stats.lost == 0 && stats.at_risk == 0
    })
    .await;
    assert!(renewed, "no acknowledged renewal on the new master");
    for name in &names {
        let left = pttl(&group.servers[new], &key_of(name));
        assert!(
            left > (lease - Duration::from_secs(2)).as_millis() as i64,
            "{name} not renewed on the new master: {left} ms left"
        );
    }
    eprintln!(
        "renewed and acknowledged on the new master {:?} after the kill",
        killed_at.elapsed()
    );
    for guard in &guards {
        assert!(!guard.is_lost(), "a guard whose lock survived reports lost");
        assert!(!guard.is_at_risk());
    }
    for (name, waiter) in names.iter().zip(&waiters) {
        assert!(!waiter.is_finished(), "the waiter took {name}");
        assert!(
            other
                .lock(name)
                .unwrap()
                .try_lock()
                .await
                .unwrap()
                .is_none(),
            "another client took {name} after the failover"
        );
    }
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    for waiter in waiters {
        let guard = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter got the lock once it was unlocked")
            .unwrap()
            .unwrap();
        guard.unlock().await.unwrap();
    }
    holder.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}

/// `Replicas::Auto` after a replica went away (killed; no failover): the first acquisition
/// falls short of the count it made with both replicas, and the replicas are counted again
/// for the next one, which waits for the replica that is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_counts_the_replicas_again_after_one_went_away() {
    let mut group = start_group();
    let auto = support::client_at(group.url(), |b| {
        b.replicas(Replicas::Auto {
            timeout: Duration::from_millis(200),
        })
    })
    .await;
    let lock = auto.lock(&unique_name("sentinel-auto-gone")).unwrap();
    lock.try_lock()
        .await
        .unwrap()
        .expect("free")
        .unlock()
        .await
        .unwrap();
    let master = group.master();
    let replica = (0..3).find(|&i| i != master).expect("a replica");
    group.servers[replica].kill();
    let master = &group.servers[master];
    let dropped = support::eventually(Duration::from_secs(5), || {
        support::replica::info(master, "replication").contains("connected_slaves:1")
    });
    assert!(dropped, "the master still counts the killed replica");
    match lock.try_lock().await {
        Err(Error::ReplicasUnacknowledged {
            acknowledged,
            wanted,
            ..
        }) => assert_eq!((acknowledged, wanted), (1, 2)),
        other => panic!("expected the count of two to fall short, got {other:?}"),
    }
    let waits_before = support::command_calls(master, "wait");
    let guard = lock.try_lock().await.unwrap().expect("free");
    assert!(
        support::command_calls(master, "wait") > waits_before,
        "Auto stopped waiting for the replica that is left"
    );
    guard.unlock().await.unwrap();
    auto.shutdown().await.unwrap();
}

/// The contrast, in one failover: the replicas lag (frozen, their links dropped) when locks
/// are taken, then the master is killed. Without `WAIT` the lock is handed out, vanishes with
/// the failover (another client takes it), and its guard is reported lost at its next
/// renewal, while a lock taken before the lag survives. With `WAIT` the acquisition fails with
/// `ReplicasUnacknowledged` instead and leaves nothing behind. `Replicas::Auto`, which counted
/// two replicas on the old master, counts again on the new one (one replica left) instead of
/// failing every acquisition for want of the dead master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_wait_a_lock_taken_while_replicas_lag_vanishes_with_the_failover() {
    let mut group = start_group();
    // Long enough for the replicated lock to be renewed on the new master before it expires.
    let lease = Duration::from_secs(6);
    let plain = support::client_at(group.url(), |b| b.watchdog_lease(lease)).await;
    let waiting = support::client_at(group.url(), |b| {
        b.watchdog_lease(lease).replicas(both_replicas(100))
    })
    .await;
    let auto = support::client_at(group.url(), |b| {
        b.replicas(Replicas::Auto {
            timeout: Duration::from_millis(300),
        })
    })
    .await;
    let kept_name = unique_name("sentinel-lag-kept");
    let lost_name = unique_name("sentinel-lag-lost");
    let refused_name = unique_name("sentinel-lag-refused");
    // Auto counts the two replicas and waits for both.
    let old = group.master();
    let waits_before = support::command_calls(&group.servers[old], "wait");
    auto.lock(&unique_name("sentinel-auto"))
        .unwrap()
        .try_lock()
        .await
        .unwrap()
        .expect("free")
        .unlock()
        .await
        .unwrap();
    assert!(support::command_calls(&group.servers[old], "wait") > waits_before);

    let kept = plain.lock(&kept_name).unwrap().lock().await.unwrap();
    let replicated = support::eventually(Duration::from_secs(5), || {
        (0..3)
            .filter(|&i| i != old)
            .all(|i| exists(&group.servers[i], &key_of(&kept_name)))
    });
    assert!(
        replicated,
        "the lock taken before the lag reached both replicas"
    );

    // A fenced lock taken and released before the lag: its counter reaches the replicas.
    let fenced_name = unique_name("sentinel-lag-fenced");
    let fenced = |c: &redlease::Client| c.lock(&fenced_name).unwrap().fenced(true);
    let replicated_token = {
        let guard = fenced(&plain).lock().await.unwrap();
        let token = guard.fencing_token().unwrap();
        guard.unlock().await.unwrap();
        token
    };
    let counter = format!("{}:fence", key_of(&fenced_name));
    let replicated = support::eventually(Duration::from_secs(5), || {
        (0..3)
            .filter(|&i| i != old)
            .all(|i| exists(&group.servers[i], &counter))
    });
    assert!(replicated, "the fencing counter reached both replicas");

    let lagging = group.lag_replicas(old);
    let doomed = plain.lock(&lost_name).unwrap().lock().await.unwrap();
    // Its token is written on the old master only, and lost with it.
    let lost_token = fenced(&plain).lock().await.unwrap();
    let lost_token = {
        let token = lost_token.fencing_token().unwrap();
        assert!(token > replicated_token);
        drop(lost_token);
        token
    };
    match waiting.lock(&refused_name).unwrap().lock().await {
        Err(Error::ReplicasUnacknowledged {
            acknowledged,
            wanted,
            ..
        }) => assert_eq!((acknowledged, wanted), (0, 2)),
        other => panic!("expected ReplicasUnacknowledged, got {other:?}"),
    }
    assert!(exists(&group.servers[old], &key_of(&lost_name)));
    assert!(
        !exists(&group.servers[old], &key_of(&refused_name)),
        "the unacknowledged grant was kept"
    );
    assert_eq!(waiting.held_count(), 0);

    let killed_at = Instant::now();
    tokio::task::block_in_place(|| group.kill_master());
    drop(lagging);
    let new = tokio::task::block_in_place(|| group.until_promoted(old, FAILOVER_LIMIT));
    eprintln!("promoted {:?} after the kill", killed_at.elapsed());
    assert!(exists(&group.servers[new], &key_of(&kept_name)));
    assert!(
        !exists(&group.servers[new], &key_of(&lost_name)),
        "the promoted replica had the write made while it lagged"
    );
    // The plain client's next renewal, on the new master, finds the lock gone.
    let reported = tokio::time::timeout(lease + Duration::from_secs(3), doomed.lost()).await;
    assert!(
        reported.is_ok(),
        "the vanished lock's guard was not reported lost"
    );
    eprintln!("reported lost {:?} after the kill", killed_at.elapsed());
    assert!(doomed.is_lost());
    assert!(!kept.is_lost(), "the replicated lock was reported lost");
    assert!(matches!(
        doomed.unlock().await,
        Err(Error::LeaseLost { .. })
    ));
    // The new master never saw the lost token, yet hands out a larger one (tokens follow its
    // clock), so a resource that saw the lost token still accepts the next holder and only it.
    // One replica is left (the old master is dead); it may need a moment to link.
    let one_replica = Replicas::Wait {
        replicas: 1,
        timeout: Duration::from_millis(500),
    };
    let mut after = None;
    for _ in 0..20 {
        match fenced(&waiting).replicas(one_replica).lock().await {
            Ok(guard) => {
                after = Some(guard);
                break;
            }
            Err(e) if e.is_replicas() => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(e) => panic!("{e:?}"),
        }
    }
    let after = after.expect("an acknowledged fenced lock on the new master");
    let token = after.fencing_token().unwrap();
    assert!(
        token > lost_token,
        "token {token} after the failover, {lost_token} lost with the old master"
    );
    after.unlock().await.unwrap();
    // The danger WAIT guards against: a second holder of a lock whose first guard was handed out.
    let second = waiting.lock(&lost_name).unwrap().replicas(Replicas::Off);
    let taken = second
        .try_lock()
        .await
        .unwrap()
        .expect("the vanished lock is free");
    taken.unlock().await.unwrap();
    assert!(
        waiting
            .lock(&kept_name)
            .unwrap()
            .replicas(Replicas::Off)
            .try_lock()
            .await
            .unwrap()
            .is_none(),
        "the replicated lock is still held"
    );

    // Auto counts the replicas again on the new master: one is left, and it acknowledges.
    // (Right after the promotion the other replica may not be linked yet: Auto then counts
    // none and sends no WAIT, and counts again shortly.)
    let new_master = &group.servers[new];
    let refused = AtomicUsize::new(0);
    let acquired = support::eventually_async(Duration::from_secs(8), || async {
        let waits_before = support::command_calls(new_master, "wait");
        let lock = auto.lock(&unique_name("sentinel-auto-after")).unwrap();
        match lock.try_lock().await {
            Ok(Some(guard)) => {
                guard.unlock().await.unwrap();
                support::command_calls(new_master, "wait") > waits_before
            }
            Ok(None) => panic!("a fresh lock was held"),
            Err(e) => {
                assert!(e.is_replicas(), "unexpected error {e:?}");
                refused.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    })
    .await;
    let refused = refused.into_inner();
    eprintln!("Auto on the new master: {refused} acquisitions refused before one was acknowledged");
    assert!(
        acquired,
        "Auto never had an acquisition acknowledged on the new master ({refused} refused)"
    );
    kept.unlock().await.unwrap();
    for client in [plain, waiting, auto] {
        client.shutdown().await.unwrap();
    }
}
