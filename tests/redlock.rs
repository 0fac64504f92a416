//! RedLock over several independent masters: majority, validity, reentrancy, fencing, bad node
//! lists, release and exclusion. Node and holder faults are in `redlock_faults.rs`.

mod support;

use redlease::LockOptions;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redlease::{Error, Lock, RedLock};
use support::{
    client, exists, increment_unprotected, join_within, key_of, node_locks, owners, patient,
    read_counter, set_string, unique_name, until_gone, with_precise_timeout,
};

#[tokio::test]
async fn three_nodes_one_held_elsewhere_acquires_two_held_elsewhere_fails() {
    support::init_tracing();
    let servers = support::start_many(3);
    let name = unique_name("majority");
    let key = key_of(&name);
    let theirs = node_locks(&servers, &name).await;
    let redlock = support::redlock(&servers, &name).await;
    assert_eq!(redlock.quorum(), 2);

    let blocker0 = theirs[0].lock().await.unwrap();
    let lease = Duration::from_secs(5);
    let guard = redlock
        .try_lock_with(
            LockOptions::new()
                .wait(Duration::from_millis(500))
                .lease(lease),
        )
        .await
        .unwrap()
        .expect("2 of 3 is a majority");
    assert_eq!(guard.held_nodes(), 2);
    assert!(guard.validity() > Duration::from_secs(4) && guard.validity() < lease);
    assert!(exists(&servers[1], &key) && exists(&servers[2], &key));
    guard.unlock().await.unwrap();
    assert!(!exists(&servers[1], &key) && !exists(&servers[2], &key));

    let blocker1 = theirs[1].lock().await.unwrap();
    assert!(redlock.try_lock().await.unwrap().is_none());
    let started = Instant::now();
    assert!(
        redlock
            .try_lock_with(LockOptions::new().wait(Duration::from_millis(300)))
            .await
            .unwrap()
            .is_none(),
        "1 of 3 is not a majority"
    );
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(started.elapsed() < Duration::from_millis(900));
    // Nothing of ours is left: node 2 free, nodes 0 and 1 only the other owner's.
    assert!(!exists(&servers[2], &key));
    assert_eq!(owners(&servers[0], &key), 1);
    assert_eq!(owners(&servers[1], &key), 1);
    blocker0.unlock().await.unwrap();
    blocker1.unlock().await.unwrap();
}

#[tokio::test]
async fn fixed_lease_validity_runs_out_and_the_guard_is_lost() {
    let servers = support::start_many(3);
    let name = unique_name("validity");
    let redlock = support::redlock(&servers, &name).await;
    let lease = Duration::from_millis(500);
    let started = Instant::now();
    let guard = redlock
        .lock_with(LockOptions::new().lease(lease))
        .await
        .unwrap();
    let acquired = Instant::now();
    // validity = lease − elapsed − (lease × 0.01 + 2 ms), from the start of the round.
    let drift = Duration::from_millis(7);
    assert!(guard.validity() <= lease - drift);
    assert!(guard.valid_until() >= started + lease - drift);
    assert!(guard.valid_until() <= acquired + lease - drift);
    assert!(guard.validity() > lease - drift - Duration::from_millis(200));
    tokio::time::timeout(Duration::from_secs(2), guard.lost())
        .await
        .expect("lost() resolves at the end of the validity");
    assert!(guard.is_lost());
    assert!(started.elapsed() >= lease - drift - Duration::from_millis(5));
    assert!(guard.unlock().await.unwrap_err().is_lease_lost());
}

#[tokio::test]
async fn reentrant_acquisition_counts_on_every_node() {
    let servers = support::start_many(3);
    let name = unique_name("reentrant");
    let ls = node_locks(&servers, &name).await;
    let redlock = patient(RedLock::new(ls.clone()).unwrap());
    let outer = redlock.lock().await.unwrap();
    let inner = redlock
        .try_lock()
        .await
        .unwrap()
        .expect("same task re-enters");
    for lock in &ls {
        assert_eq!(lock.hold_count().await.unwrap(), 2);
    }
    let other = support::redlock(&servers, &name).await;
    assert!(other.try_lock().await.unwrap().is_none());
    inner.unlock().await.unwrap();
    for lock in &ls {
        assert_eq!(lock.hold_count().await.unwrap(), 1);
    }
    outer.unlock().await.unwrap();
    other
        .try_lock()
        .await
        .unwrap()
        .expect("free")
        .unlock()
        .await
        .unwrap();
}

/// Tokens come from each node's counter and clock; the guard raises the granting nodes to the
/// largest, so the next holder's token is larger even when it meets other nodes. A node whose
/// clock runs ahead (here: its counter an hour ahead) only makes tokens larger, and a node that
/// lost its counter (deleted) cannot make them smaller.
#[tokio::test]
async fn fenced_tokens_increase_across_holders_with_uneven_counters() {
    let servers = support::start_many(3);
    let name = unique_name("fenced");
    let key = key_of(&name);
    let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut servers[0].conn()).unwrap();
    let ahead = (s + 3600) * 1_000_000 + us;
    set_string(&servers[0], &format!("{key}:fence"), &ahead.to_string());
    let fenced = |ls: Vec<Lock>| ls.into_iter().map(|l| l.fenced(true)).collect::<Vec<_>>();
    let a = patient(RedLock::new(fenced(node_locks(&servers, &name).await)).unwrap());
    let b = patient(RedLock::new(fenced(node_locks(&servers, &name).await)).unwrap());

    let first = a.lock().await.unwrap();
    let t1 = first.fencing_token().expect("fenced");
    assert_eq!(t1, ahead + 1);
    first.unlock().await.unwrap();

    // Node 0, the one with the big counter, is held elsewhere: b meets only nodes 1 and 2.
    let blocker = client(&servers[0])
        .await
        .lock(&name)
        .unwrap()
        .lock()
        .await
        .unwrap();
    let second = b.lock().await.unwrap();
    assert_eq!(second.held_nodes(), 2);
    let t2 = second.fencing_token().expect("fenced");
    assert!(t2 > t1, "token went back: {t1} then {t2}");
    second.unlock().await.unwrap();
    blocker.unlock().await.unwrap();

    // Two masters lose their counter (restarts without persistence, an operator's DEL) and the
    // next holder meets only them: counters that counted 1, 2, 3 would start again at 1; tokens
    // that follow the clock stay above the last one (on another name, without the counter an
    // hour ahead, which only the clock catching up can pass).
    let other = unique_name("fenced-lost-counters");
    let other_key = key_of(&other);
    let a = patient(RedLock::new(fenced(node_locks(&servers, &other).await)).unwrap());
    let b = patient(RedLock::new(fenced(node_locks(&servers, &other).await)).unwrap());
    let first = a.lock().await.unwrap();
    let t1 = first.fencing_token().expect("fenced");
    first.unlock().await.unwrap();
    for server in &servers[1..] {
        redis::cmd("DEL")
            .arg(format!("{other_key}:fence"))
            .exec(&mut server.conn())
            .unwrap();
    }
    let blocker = client(&servers[0])
        .await
        .lock(&other)
        .unwrap()
        .lock()
        .await
        .unwrap();
    let second = b.lock().await.unwrap();
    assert_eq!(second.held_nodes(), 2);
    let t2 = second.fencing_token().expect("fenced");
    assert!(
        t2 > t1,
        "token went back after lost counters: {t1} then {t2}"
    );
    second.unlock().await.unwrap();
    blocker.unlock().await.unwrap();

    let unfenced = support::redlock(&servers, &name).await;
    let guard = unfenced.lock().await.unwrap();
    assert_eq!(guard.fencing_token(), None);
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn new_rejects_bad_node_lists() {
    let servers = support::start_many(3);
    let name = unique_name("reject");
    let ls = node_locks(&servers, &name).await;
    let invalid = |r: redlease::Result<RedLock>| {
        let err = r.expect_err("must be rejected");
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
        err.to_string()
    };
    eprintln!("{}", invalid(RedLock::new(vec![])));
    // The same client twice.
    eprintln!(
        "{}",
        invalid(RedLock::new(vec![
            ls[0].clone(),
            ls[0].clone(),
            ls[1].clone()
        ]))
    );
    // Two clients of one server.
    let again = client(&servers[0]).await.lock(&name).unwrap();
    eprintln!(
        "{}",
        invalid(RedLock::new(vec![ls[0].clone(), again, ls[1].clone()]))
    );
    // Different names.
    let other = ls[2].client().lock("another-name").unwrap();
    eprintln!(
        "{}",
        invalid(RedLock::new(vec![ls[0].clone(), ls[1].clone(), other]))
    );
    // Fenced and unfenced mixed.
    let mixed = vec![ls[0].clone().fenced(true), ls[1].clone(), ls[2].clone()];
    eprintln!("{}", invalid(RedLock::new(mixed)));
    // Two nodes (or an even number) are allowed, with a warning.
    assert!(RedLock::new(ls[..2].to_vec()).is_ok());
    assert!(RedLock::new(ls.clone()).is_ok());
    // A node timeout that is not below the lease is rejected at use.
    let slow = RedLock::new(ls)
        .unwrap()
        .node_timeout(Duration::from_secs(1));
    let err = slow
        .lock_with(LockOptions::new().lease(Duration::from_millis(500)))
        .await
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err:?}");
}

#[tokio::test]
async fn dropped_guard_stops_renewing_and_releases_everywhere() {
    let servers = support::start_many(3);
    let name = unique_name("drop");
    let key = key_of(&name);
    let redlock = support::redlock(&servers, &name)
        .await
        .watchdog_lease(Duration::from_millis(300));
    let guard = redlock.lock().await.unwrap();
    drop(guard);
    // Released by the drop itself, long before the lease would end.
    assert!(until_gone(&servers, &key, Duration::from_millis(250)).await);
    // And nothing renews or re-takes it afterwards.
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(servers.iter().all(|s| !exists(s, &key)));

    let guard = redlock.lock().await.unwrap();
    guard.unlock().await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(servers.iter().all(|s| !exists(s, &key)));
}

#[tokio::test]
async fn cancelled_acquisitions_leave_nothing_behind() {
    let servers = support::start_many(3);
    let name = unique_name("cancel");
    let key = key_of(&name);
    let theirs = node_locks(&servers, &name).await;
    let blocker0 = theirs[0].lock().await.unwrap();
    let blocker1 = theirs[1].lock().await.unwrap();
    let redlock = support::redlock(&servers, &name)
        .await
        .retry_delay(Duration::from_millis(2));
    for i in 0..60u64 {
        let limit = Duration::from_micros(50 + i * 97);
        let outcome = with_precise_timeout(limit, redlock.lock()).await;
        assert!(
            outcome.is_none(),
            "lock() returned while two of three nodes were held elsewhere"
        );
    }
    assert!(
        support::eventually_async(Duration::from_secs(3), || async {
            !exists(&servers[2], &key)
                && owners(&servers[0], &key) == 1
                && owners(&servers[1], &key) == 1
        })
        .await,
        "a cancelled acquisition left a hold behind"
    );
    blocker0.unlock().await.unwrap();
    blocker1.unlock().await.unwrap();
}

/// Eight contenders, each with its own five clients, take turns 200 times each; under the lock
/// they increment a counter with GET then SET, which loses updates without exclusion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_eight_clients_two_hundred_rounds() {
    const WORKERS: u64 = 8;
    const ROUNDS: u64 = 200;
    support::init_tracing();
    let servers = Arc::new(support::start_many(5));
    let name = unique_name("mutex");
    let counter = unique_name("mutex-counter");
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        let (servers, name, counter) = (servers.clone(), name.clone(), counter.clone());
        tasks.push(tokio::spawn(async move {
            let ls = node_locks(&servers, &name).await;
            let tally = ls[0].client().clone();
            let redlock = RedLock::new(ls).unwrap();
            for _ in 0..ROUNDS {
                let guard = redlock
                    .try_lock_with(
                        LockOptions::new()
                            .wait(Duration::from_secs(30))
                            .lease(Duration::from_secs(2)),
                    )
                    .await
                    .unwrap()
                    .expect("acquired within the wait");
                assert!(guard.validity() > Duration::ZERO);
                increment_unprotected(&tally, &counter).await;
                guard.unlock().await.unwrap();
            }
        }));
    }
    join_within(tasks, Duration::from_secs(50), "workers finish in time").await;
    assert_eq!(read_counter(&servers[0], &counter), WORKERS * ROUNDS);
    eprintln!(
        "{} RedLock(5) rounds by {WORKERS} contenders in {:?}",
        WORKERS * ROUNDS,
        started.elapsed()
    );
}

/// A node whose client was shut down is gone for good, but only a lost majority ends the
/// acquisition: with one of three shut down the other two still take the lock; with two, it
/// ends at once with `Shutdown` (no waiting out the wait, no `Quorum`).
#[tokio::test]
async fn a_shut_down_node_fails_the_redlock_only_without_a_majority() {
    let servers = support::start_many(3);
    let name = unique_name("shut-node");
    let key = key_of(&name);
    let mut clients = Vec::new();
    for server in &servers {
        clients.push(client(server).await);
    }
    let locks: Vec<Lock> = clients.iter().map(|c| c.lock(&name).unwrap()).collect();
    let redlock = RedLock::new(locks).unwrap();
    clients[0].shutdown().await.unwrap();
    let wait = LockOptions::new().wait(Duration::from_secs(2));
    let guard = redlock
        .try_lock_with(wait)
        .await
        .unwrap()
        .expect("two of three nodes are a majority");
    assert_eq!(guard.held_nodes(), 2);
    assert!(exists(&servers[1], &key) && exists(&servers[2], &key));
    assert!(!exists(&servers[0], &key));
    guard.unlock().await.unwrap();

    clients[1].shutdown().await.unwrap();
    let started = Instant::now();
    let error = redlock.try_lock_with(wait).await.unwrap_err();
    assert!(error.is_shutdown(), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    assert!(
        !exists(&servers[2], &key),
        "the lone node's grant was given back"
    );
}
