//! RedLock over several independent masters: majority, node timeouts, renewal, faults.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redlease::{Client, Error, Lock, RedLock};
use support::{Server, unique_name};

async fn client(server: &Server) -> Client {
    Client::connect(&server.url())
        .await
        .expect("connect to the test server")
}

/// One fresh client per server, each locking `name`.
async fn locks(servers: &[Server], name: &str) -> Vec<Lock> {
    let mut locks = Vec::new();
    for server in servers {
        locks.push(client(server).await.lock(name).unwrap());
    }
    locks
}

fn exists(server: &Server, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query(&mut server.conn())
        .expect("EXISTS")
}

fn owners(server: &Server, key: &str) -> usize {
    redis::cmd("HLEN")
        .arg(key)
        .query(&mut server.conn())
        .expect("HLEN")
}

fn pttl(server: &Server, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query(&mut server.conn())
        .expect("PTTL")
}

/// A node timeout loose enough that every live node answers even on a loaded test machine, for
/// tests that count nodes (the default, 20–50 ms, is exercised by the others).
fn patient(redlock: RedLock) -> RedLock {
    redlock.node_timeout(Duration::from_millis(150))
}

fn key_of(name: &str) -> String {
    format!("redlease:{{{name}}}")
}

#[tokio::test]
async fn three_nodes_one_held_elsewhere_acquires_two_held_elsewhere_fails() {
    support::init_tracing();
    let servers = support::start_many(3);
    let name = unique_name("majority");
    let key = key_of(&name);
    let theirs = locks(&servers, &name).await;
    let redlock = RedLock::new(locks(&servers, &name).await).unwrap();
    assert_eq!(redlock.quorum(), 2);

    let blocker0 = theirs[0].lock().await.unwrap();
    let lease = Duration::from_secs(5);
    let guard = redlock
        .try_lock_for_with_lease(Duration::from_millis(500), lease)
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
            .try_lock_for(Duration::from_millis(300))
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_two_killed_acquire_and_renew_three_killed_fail_with_quorum() {
    support::init_tracing();
    let mut servers = support::start_many(5);
    let name = unique_name("five");
    let key = key_of(&name);
    let lease = Duration::from_millis(900);
    let redlock = RedLock::new(locks(&servers, &name).await)
        .unwrap()
        .watchdog_lease(lease);
    servers[0].kill();
    servers[1].kill();

    let started = Instant::now();
    let guard = redlock.lock().await.expect("3 of 5 nodes are up");
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(guard.held_nodes(), 3);
    tokio::time::sleep(lease * 2 + lease / 2).await;
    assert!(!guard.is_lost(), "renewal on 3 of 5 nodes keeps the lock");
    assert!(
        guard.validity() > lease / 3,
        "validity {:?}",
        guard.validity()
    );
    for server in &servers[2..] {
        let ttl = pttl(server, &key);
        assert!(
            ttl > (lease / 3).as_millis() as i64,
            "lease renewed: pttl {ttl}"
        );
    }
    guard.unlock().await.unwrap();

    servers[2].kill();
    let started = Instant::now();
    let err = redlock
        .try_lock_for(Duration::from_secs(3))
        .await
        .expect_err("2 of 5 nodes cannot form a majority");
    let took = started.elapsed();
    match err {
        Error::Quorum {
            nodes: 5,
            needed: 3,
            acquired: 2,
            held_elsewhere: 0,
            failed: 3,
            ..
        } => {}
        other => panic!("expected a quorum error, got {other:?}"),
    }
    assert!(
        took < Duration::from_secs(3),
        "failed within the wait: {took:?}"
    );
    for server in &servers[3..] {
        assert!(
            !exists(server, &key),
            "a failed round left the key on a live node"
        );
    }
}

/// A frozen node (SIGSTOP) costs the round its node timeout, not the pause; once it runs again
/// it applies the acquire it had queued, and that late grant is given back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigstopped_node_costs_its_timeout_and_its_late_grant_is_released() {
    support::init_tracing();
    let servers = support::start_many(3);
    let name = unique_name("sigstop");
    let key = key_of(&name);
    let redlock = RedLock::new(locks(&servers, &name).await)
        .unwrap()
        .node_timeout(Duration::from_millis(50));
    servers[2].pause();
    let started = Instant::now();
    let guard = redlock.lock_with_lease(Duration::from_secs(10)).await;
    let took = started.elapsed();
    let resume_at = Instant::now() + Duration::from_millis(800);
    tokio::time::sleep_until(resume_at.into()).await;
    servers[2].resume();
    let guard = guard.expect("2 of 3 nodes answer");
    assert!(
        took < Duration::from_millis(400),
        "took {took:?}, not about the node timeout"
    );
    assert_eq!(guard.held_nodes(), 2);
    assert!(
        support::eventually_async(Duration::from_secs(3), || async {
            !exists(&servers[2], &key)
        })
        .await,
        "the paused node's late grant must be released"
    );
    assert!(exists(&servers[0], &key) && exists(&servers[1], &key));
    guard.unlock().await.unwrap();
}

/// The same with a pause longer than the client's own command timeout: the acquire's outcome
/// is never seen, so a release is sent after it blindly, and the node applies both in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_frozen_past_the_client_timeout_is_still_cleaned_up() {
    support::init_tracing();
    let servers = support::start_many(3);
    let name = unique_name("longstop");
    let key = key_of(&name);
    let mut ls = Vec::new();
    for server in &servers {
        let client = Client::builder(server.url())
            .timeout(Duration::from_millis(400))
            .build()
            .await
            .unwrap();
        ls.push(client.lock(&name).unwrap());
    }
    let redlock = RedLock::new(ls).unwrap();
    servers[0].pause();
    let started = Instant::now();
    let guard = redlock.lock_with_lease(Duration::from_secs(10)).await;
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    servers[0].resume();
    let guard = guard.expect("2 of 3 nodes answer");
    assert!(took < Duration::from_millis(400), "took {took:?}");
    assert!(
        support::eventually_async(Duration::from_secs(3), || async {
            !exists(&servers[0], &key)
        })
        .await,
        "the frozen node's grant must be released after it resumes"
    );
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_paused_node_costs_only_its_timeout() {
    support::init_tracing();
    let servers = support::start_many(3);
    let name = unique_name("clientpause");
    let key = key_of(&name);
    let redlock = RedLock::new(locks(&servers, &name).await).unwrap();
    servers[1].client_pause(700, true);
    let started = Instant::now();
    let guard = redlock
        .try_lock_for_with_lease(Duration::from_secs(2), Duration::from_secs(10))
        .await
        .unwrap()
        .expect("2 of 3 nodes answer");
    let took = started.elapsed();
    // Default node timeout for a 10 s lease: 50 ms.
    assert!(took < Duration::from_millis(350), "took {took:?}");
    assert_eq!(guard.held_nodes(), 2);
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(
        support::eventually_async(Duration::from_secs(3), || async {
            !exists(&servers[1], &key)
        })
        .await,
        "the paused node's late grant must be released"
    );
    guard.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_node_is_retaken_and_losing_a_majority_resolves_lost() {
    support::init_tracing();
    let mut servers = support::start_many(3);
    let name = unique_name("restart");
    let key = key_of(&name);
    let lease = Duration::from_millis(600);
    let redlock =
        patient(RedLock::new(locks(&servers, &name).await).unwrap()).watchdog_lease(lease);
    let guard = redlock.lock().await.unwrap();
    assert_eq!(guard.held_nodes(), 3);
    let lost = guard.lost();
    tokio::pin!(lost);

    // One node forgets everything: the other two keep the quorum, renewal goes on, and the
    // forgetful node is taken again at the next renewal.
    servers[0].restart();
    assert!(!exists(&servers[0], &key));
    assert!(
        support::eventually_async(Duration::from_secs(3), || async {
            exists(&servers[0], &key)
        })
        .await,
        "renewal takes the restarted node again"
    );
    tokio::time::sleep(lease * 2).await;
    assert!(!guard.is_lost());
    assert_eq!(guard.held_nodes(), 3);
    assert!(
        tokio::time::timeout(Duration::from_millis(10), &mut lost)
            .await
            .is_err()
    );

    // Two of three forget it: no majority holds it any more.
    servers[1].kill();
    servers[2].kill();
    servers[1].restart();
    servers[2].restart();
    let started = Instant::now();
    tokio::time::timeout(lease * 3, &mut lost)
        .await
        .expect("lost() resolves once a majority forgot the lock");
    assert!(guard.is_lost());
    eprintln!("lost {:?} after the majority restart", started.elapsed());
    let err = guard.unlock().await.unwrap_err();
    assert!(err.is_lease_lost(), "{err:?}");
    for server in &servers {
        assert!(!exists(server, &key));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unlock_with_a_frozen_node_is_bounded_and_cleans_up_after_it_resumes() {
    support::init_tracing();
    let servers = support::start_many(3);
    let name = unique_name("frozen-unlock");
    let key = key_of(&name);
    let redlock = patient(RedLock::new(locks(&servers, &name).await).unwrap());
    // Lease 2 s: each node gets max(150 ms, 200 ms) to answer a release.
    let guard = redlock
        .lock_with_lease(Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(guard.held_nodes(), 3);
    servers[0].pause();
    let started = Instant::now();
    let unlocked = guard.unlock().await;
    let took = started.elapsed();
    servers[0].resume();
    unlocked.expect("2 of 3 released: free for a majority elsewhere");
    assert!(took < Duration::from_millis(800), "unlock took {took:?}");
    assert!(!exists(&servers[1], &key) && !exists(&servers[2], &key));
    assert!(
        support::eventually_async(Duration::from_secs(1), || async {
            !exists(&servers[0], &key)
        })
        .await,
        "the frozen node applies the release once it resumes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn majority_frozen_during_renewal_loses_the_lock_and_leaves_nothing() {
    support::init_tracing();
    let servers = support::start_many(3);
    let name = unique_name("frozen-majority");
    let key = key_of(&name);
    let lease = Duration::from_millis(600);
    let redlock =
        patient(RedLock::new(locks(&servers, &name).await).unwrap()).watchdog_lease(lease);
    let guard = redlock.lock().await.unwrap();
    // One frozen node: the other two renew.
    servers[2].pause();
    tokio::time::sleep(lease * 2).await;
    assert!(!guard.is_lost(), "2 of 3 keep renewing");
    // Two frozen: no renewal can reach a majority; the validity runs out.
    servers[1].pause();
    let started = Instant::now();
    tokio::time::timeout(lease * 2, guard.lost())
        .await
        .expect("lost() resolves when the validity runs out");
    assert!(started.elapsed() <= lease + Duration::from_millis(100));
    let err = guard.unlock().await.unwrap_err();
    assert!(err.is_lease_lost(), "{err:?}");
    servers[1].resume();
    servers[2].resume();
    // Queued renewals run first, then the releases: nothing survives the unlock.
    assert!(
        support::eventually_async(Duration::from_secs(2), || async {
            servers.iter().all(|s| !exists(s, &key))
        })
        .await
    );
    tokio::time::sleep(lease).await;
    assert!(servers.iter().all(|s| !exists(s, &key)));
}

/// The holder itself stalls past its validity (a GC pause, swap): the guard is lost, and stays
/// lost even though the renewal task could reach every node again afterwards.
#[tokio::test(flavor = "current_thread")]
async fn holder_paused_past_its_validity_stays_lost() {
    let servers = support::start_many(3);
    let name = unique_name("gc-pause");
    let lease = Duration::from_millis(300);
    let redlock =
        patient(RedLock::new(locks(&servers, &name).await).unwrap()).watchdog_lease(lease);
    let guard = redlock.lock().await.unwrap();
    // Blocks the only runtime thread: no renewal can run meanwhile.
    std::thread::sleep(lease + Duration::from_millis(50));
    assert!(guard.is_lost());
    tokio::time::sleep(lease).await;
    assert!(guard.is_lost(), "a late renewal must not revive the guard");
    tokio::time::timeout(Duration::from_millis(10), guard.lost())
        .await
        .expect("lost() resolves at once");
    assert!(guard.unlock().await.unwrap_err().is_lease_lost());
    let other = RedLock::new(locks(&servers, &name).await).unwrap();
    other
        .try_lock_for(Duration::from_secs(1))
        .await
        .unwrap()
        .expect("free again")
        .unlock()
        .await
        .unwrap();
}

#[tokio::test]
async fn fixed_lease_validity_runs_out_and_the_guard_is_lost() {
    let servers = support::start_many(3);
    let name = unique_name("validity");
    let redlock = RedLock::new(locks(&servers, &name).await).unwrap();
    let lease = Duration::from_millis(500);
    let started = Instant::now();
    let guard = redlock.lock_with_lease(lease).await.unwrap();
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
    let ls = locks(&servers, &name).await;
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
    let other = RedLock::new(locks(&servers, &name).await).unwrap();
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

/// Tokens come from each node's own counter; the guard raises the granting nodes to the
/// largest, so the next holder's token is larger even when it meets other nodes.
#[tokio::test]
async fn fenced_tokens_increase_across_holders_with_uneven_counters() {
    let servers = support::start_many(3);
    let name = unique_name("fenced");
    let key = key_of(&name);
    redis::cmd("SET")
        .arg(format!("{key}:fence"))
        .arg(100)
        .query::<()>(&mut servers[0].conn())
        .unwrap();
    let fenced = |ls: Vec<Lock>| ls.into_iter().map(|l| l.fenced(true)).collect::<Vec<_>>();
    let a = patient(RedLock::new(fenced(locks(&servers, &name).await)).unwrap());
    let b = patient(RedLock::new(fenced(locks(&servers, &name).await)).unwrap());

    let first = a.lock().await.unwrap();
    let t1 = first.fencing_token().expect("fenced");
    assert_eq!(t1, 101);
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

    let unfenced = RedLock::new(locks(&servers, &name).await).unwrap();
    let guard = unfenced.lock().await.unwrap();
    assert_eq!(guard.fencing_token(), None);
    guard.unlock().await.unwrap();
}

#[tokio::test]
async fn new_rejects_bad_node_lists() {
    let servers = support::start_many(3);
    let name = unique_name("reject");
    let ls = locks(&servers, &name).await;
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
        .lock_with_lease(Duration::from_millis(500))
        .await
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err:?}");
}

#[tokio::test]
async fn dropped_guard_stops_renewing_and_releases_everywhere() {
    let servers = support::start_many(3);
    let name = unique_name("drop");
    let key = key_of(&name);
    let redlock = RedLock::new(locks(&servers, &name).await)
        .unwrap()
        .watchdog_lease(Duration::from_millis(300));
    let guard = redlock.lock().await.unwrap();
    drop(guard);
    // Released by the drop itself, long before the lease would end.
    assert!(
        support::eventually_async(Duration::from_millis(250), || async {
            servers.iter().all(|s| !exists(s, &key))
        })
        .await
    );
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
    let theirs = locks(&servers, &name).await;
    let blocker0 = theirs[0].lock().await.unwrap();
    let blocker1 = theirs[1].lock().await.unwrap();
    let redlock = RedLock::new(locks(&servers, &name).await)
        .unwrap()
        .retry_delay(Duration::from_millis(2));
    for i in 0..60u64 {
        let limit = Duration::from_micros(50 + i * 97);
        let _ = tokio::time::timeout(limit, redlock.lock()).await;
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
            let ls = locks(&servers, &name).await;
            let tally = ls[0].client().clone();
            let redlock = RedLock::new(ls).unwrap();
            for _ in 0..ROUNDS {
                let guard = redlock
                    .try_lock_for_with_lease(Duration::from_secs(30), Duration::from_secs(2))
                    .await
                    .unwrap()
                    .expect("acquired within the wait");
                assert!(guard.validity() > Duration::ZERO);
                let value: Option<u64> =
                    tally.query(redis::cmd("GET").arg(&counter)).await.unwrap();
                tokio::task::yield_now().await;
                tally
                    .query::<()>(redis::cmd("SET").arg(&counter).arg(value.unwrap_or(0) + 1))
                    .await
                    .unwrap();
                guard.unlock().await.unwrap();
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(50), task)
            .await
            .expect("workers finish in time")
            .unwrap();
    }
    let total: u64 = redis::cmd("GET")
        .arg(&counter)
        .query(&mut servers[0].conn())
        .unwrap();
    assert_eq!(total, WORKERS * ROUNDS);
    eprintln!(
        "{} RedLock(5) rounds by {WORKERS} contenders in {:?}",
        WORKERS * ROUNDS,
        started.elapsed()
    );
}
