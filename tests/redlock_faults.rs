//! RedLock under faults: nodes killed, frozen (SIGSTOP and CLIENT PAUSE) or restarted without
//! their data, and a holder paused past its validity.

mod support;

use redlease::LockOptions;
use std::time::{Duration, Instant};

use redlease::{Error, RedLock};
use support::{exists, key_of, node_locks_with, patient, pttl, unique_name, until_gone};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_nodes_two_killed_acquire_and_renew_three_killed_fail_with_quorum() {
    support::init_tracing();
    let mut servers = support::start_many(5);
    let name = unique_name("five");
    let key = key_of(&name);
    let lease = Duration::from_millis(900);
    let redlock = support::redlock(&servers, &name)
        .await
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
        .try_lock_with(LockOptions::new().wait(Duration::from_secs(3)))
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
    let redlock = support::redlock(&servers, &name)
        .await
        .node_timeout(Duration::from_millis(50));
    servers[2].pause();
    let started = Instant::now();
    let guard = redlock
        .lock_with(LockOptions::new().lease(Duration::from_secs(10)))
        .await;
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
        until_gone(&servers[2..=2], &key, Duration::from_secs(3)).await,
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
    let ls = node_locks_with(&servers, &name, |b| b.timeout(Duration::from_millis(400))).await;
    let redlock = RedLock::new(ls).unwrap();
    servers[0].pause();
    let started = Instant::now();
    let guard = redlock
        .lock_with(LockOptions::new().lease(Duration::from_secs(10)))
        .await;
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_millis(1200)).await;
    servers[0].resume();
    let guard = guard.expect("2 of 3 nodes answer");
    assert!(took < Duration::from_millis(400), "took {took:?}");
    assert!(
        until_gone(&servers[0..=0], &key, Duration::from_secs(3)).await,
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
    let redlock = support::redlock(&servers, &name).await;
    servers[1].client_pause(700, true);
    let started = Instant::now();
    let guard = redlock
        .try_lock_with(
            LockOptions::new()
                .wait(Duration::from_secs(2))
                .lease(Duration::from_secs(10)),
        )
        .await
        .unwrap()
        .expect("2 of 3 nodes answer");
    let took = started.elapsed();
    // Default node timeout for a 10 s lease: 50 ms.
    assert!(took < Duration::from_millis(350), "took {took:?}");
    assert_eq!(guard.held_nodes(), 2);
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(
        until_gone(&servers[1..=1], &key, Duration::from_secs(3)).await,
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
    let redlock = patient(support::redlock(&servers, &name).await).watchdog_lease(lease);
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
    let redlock = patient(support::redlock(&servers, &name).await);
    // Lease 2 s: each node gets max(150 ms, 200 ms) to answer a release.
    let guard = redlock
        .lock_with(LockOptions::new().lease(Duration::from_secs(2)))
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
        until_gone(&servers[0..=0], &key, Duration::from_secs(1)).await,
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
    let redlock = patient(support::redlock(&servers, &name).await).watchdog_lease(lease);
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
    assert!(until_gone(&servers, &key, Duration::from_secs(2)).await);
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
    let redlock = patient(support::redlock(&servers, &name).await).watchdog_lease(lease);
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
    let other = support::redlock(&servers, &name).await;
    other
        .try_lock_with(LockOptions::new().wait(Duration::from_secs(1)))
        .await
        .unwrap()
        .expect("free again")
        .unlock()
        .await
        .unwrap();
}

/// A node frozen while its release of our last guard is still on its way: our next round
/// costs that node its timeout, not the freeze. The release counts as the owner's operation in
/// flight there, and the round waited for it, past the node timeout, with the other nodes
/// held to no purpose (a short lease then ran out before the round ended).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_frozen_during_our_release_costs_the_next_round_its_timeout() {
    let servers = support::start_many(3);
    let name = unique_name("frozen-release");
    // Patient nodes (a loaded machine answers within them), far below the freeze.
    let redlock = patient(support::redlock(&servers, &name).await);
    let lease = LockOptions::new().lease(Duration::from_secs(2));
    let guard = redlock.lock_with(lease).await.unwrap();
    servers[0].pause();
    guard.unlock().await.unwrap();
    let resume = {
        let pid = servers[0].pid();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(3));
            let _ = std::process::Command::new("kill")
                .args(["-CONT", &pid.to_string()])
                .status();
        })
    };
    let started = Instant::now();
    let again = redlock.try_lock_with(lease).await;
    let took = started.elapsed();
    let again = again.unwrap().expect("two of three nodes are free");
    assert!(
        took < Duration::from_millis(1000),
        "the round took {took:?}, waiting for the frozen node"
    );
    assert_eq!(again.held_nodes(), 2);
    again.unlock().await.unwrap();
    resume.join().unwrap();
}

/// A RedLock node's acquisition whose reply is lost with its connection (a proxy in front of
/// node 0 forwards it and closes the connection before the reply) takes that node's lock once:
/// the unlock frees it on every node at once. Before, the request was sent again blindly and
/// counted twice, so after `unlock` answered `Ok` node 0 kept the key (count 1) for a lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_reply_is_lost_is_taken_once() {
    let servers = support::start_many(3);
    let proxy = support::proxy::Proxy::start(servers[0].port()).await;
    let mut nodes = vec![support::client_at(proxy.url(), |b| b).await];
    for server in &servers[1..] {
        nodes.push(support::client(server).await);
    }
    let node_lock = |name: &str| -> Vec<redlease::Lock> {
        nodes.iter().map(|c| c.lock(name).unwrap()).collect()
    };
    // Room for node 0's reconnection, undo and second send on a loaded machine.
    let redlock_of = |name: &str| {
        RedLock::new(node_lock(name))
            .unwrap()
            .node_timeout(Duration::from_secs(1))
    };
    // Once first, so the scripts are loaded and the cut request is the acquisition itself.
    let warm = redlock_of(&unique_name("lost-node-warm"));
    warm.lock().await.unwrap().unlock().await.unwrap();
    let name = unique_name("lost-node");
    let key = key_of(&name);
    let redlock = redlock_of(&name);
    proxy.cut_after("$5\r\n30000\r\n$1\r\n1\r\n", 0);
    let guard = redlock.lock().await.unwrap();
    let done = tokio::time::timeout(Duration::from_secs(1), proxy.cut_done()).await;
    assert!(done.is_ok(), "node 0's acquisition was not cut");
    assert_eq!(
        guard.held_nodes(),
        3,
        "node 0 answered on its new connection"
    );
    let count: Vec<u64> = redis::cmd("HVALS")
        .arg(&key)
        .query(&mut servers[0].conn())
        .unwrap();
    assert_eq!(count, [1], "node 0 counts the owner's hold once");
    guard.unlock().await.unwrap();
    for (i, server) in servers.iter().enumerate() {
        assert!(!exists(server, &key), "node {i} kept the key after unlock");
    }
}

/// A RedLock whose key is deleted on a majority of its nodes is lost at once: each node's loss
/// notice marks its hold lost the moment the key goes, and `lost()` resolves then, under the
/// renewal task (watchdog lease) and with a fixed lease alike. Before, the guard counted those
/// nodes as holding it until the next renewal round (a third of the lease away), or, with a
/// fixed lease, until its end: another owner could take a majority meanwhile, and the first
/// was not told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_deleted_on_a_majority_is_lost_at_once() {
    support::init_tracing();
    let servers = support::start_many(3);
    for options in [
        LockOptions::new(),
        LockOptions::new().lease(Duration::from_secs(30)),
    ] {
        let name = unique_name("gone-majority");
        let key = key_of(&name);
        let redlock = support::redlock(&servers, &name).await;
        let redlock = redlock.node_timeout(Duration::from_secs(1));
        let guard = redlock.lock_with(options).await.unwrap();
        assert_eq!(guard.held_nodes(), 3);
        // One node's key gone: a majority still holds it. Its notice shows the nodes' notices
        // are on (each is armed shortly after its grant).
        let _: () = redis::cmd("DEL")
            .arg(&key)
            .query(&mut servers[0].conn())
            .unwrap();
        let noticed = || guard.held_nodes() == 2;
        assert!(support::eventually(Duration::from_secs(3), noticed));
        assert!(!guard.is_lost(), "two of three nodes still hold it");
        let lost = guard.lost();
        let _: () = redis::cmd("DEL")
            .arg(&key)
            .query(&mut servers[1].conn())
            .unwrap();
        // Well within the renewal's period (10 s), with room for a loaded machine.
        let told = tokio::time::timeout(Duration::from_secs(3), lost).await;
        assert!(
            told.is_ok(),
            "lost() did not resolve within 3 s of the majority's loss"
        );
        assert!(guard.is_lost());
        assert_eq!(guard.held_nodes(), 1);
        // Another owner takes a majority now; the first hears `LeaseLost` at its unlock.
        let other = patient(support::redlock(&servers, &name).await);
        let theirs = other.try_lock().await.unwrap();
        assert!(theirs.is_some(), "the two free nodes were refused");
        assert!(guard.unlock().await.unwrap_err().is_lease_lost());
        theirs.unwrap().unlock().await.unwrap();
    }
}
