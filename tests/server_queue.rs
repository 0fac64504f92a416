//! The waiter queue on the server and grant-on-release (`lua/queue.lua`), across processes: a
//! release gives the lock to the first queued waiter in the same call and tells only it, so
//! processes take turns without a herd of attempts; a grant to a waiter that died passes on
//! after the claim lease; cancelled waits leave no entry and no hold.
//!
//! The multi-process tests re-run this test binary as children that execute only the
//! `#[ignore]`d `queue_worker` test, configured through `REDLEASE_QW*` variables.

mod support;

use redlease::LockOptions;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use redlease::Client;
use support::workers::{self, all_succeed, signal};
use support::{
    Cluster, Server, clients, command_calls, exists, increment_unprotected, key_of, key_slot,
    read_counter, unique_name,
};

const CLAIM: Duration = Duration::from_millis(800);

fn spawn_worker(envs: &[(&str, String)]) -> Child {
    workers::spawn_worker("queue_worker", envs, Stdio::piped())
}

/// The queue's two keys of lock `name`.
fn queue_keys(name: &str) -> [String; 2] {
    let hash = key_of(name);
    [format!("{hash}:q"), format!("{hash}:qd")]
}

fn queued(server: &Server, name: &str) -> Vec<String> {
    redis::cmd("LRANGE")
        .arg(&queue_keys(name)[0])
        .arg(0)
        .arg(-1)
        .query(&mut server.conn())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_processes_take_turns_without_a_herd() {
    eight_processes_take_turns("count", 2.8).await;
}

/// The same with a fixed lease (`LockOptions::lease`, the way most users hold a lock): the
/// grant is the waiter's whole lease, taken from its message, so a hand-over is the release
/// and the queueing attempt, as under the watchdog (it cost 3.0 calls when the waiter had to
/// claim a 2 s claim lease with an attempt of its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_processes_with_a_fixed_lease_take_turns_in_two_calls() {
    eight_processes_take_turns("count-fixed", 2.3).await;
}

/// Every other way of holding a lock hands over the same way: fenced with a fixed lease, and
/// with a lock-delay under the watchdog (a released hold leaves no delay behind).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_processes_fenced_or_with_a_lock_delay_take_turns_in_two_calls() {
    eight_processes_take_turns("count-fenced", 2.3).await;
    eight_processes_take_turns("count-delay", 2.3).await;
}

async fn eight_processes_take_turns(mode: &str, most_calls: f64) {
    let server = Server::start();
    let name = unique_name("turns");
    let counter = unique_name("turns-count");
    let (processes, rounds) = (8, 200);
    let calls_before = command_calls(&server, "evalsha");
    let started = Instant::now();
    let children: Vec<Child> = (0..processes)
        .map(|_| {
            spawn_worker(&[
                ("REDLEASE_QW", mode.into()),
                ("REDLEASE_QW_URL", server.url()),
                ("REDLEASE_QW_NAME", name.clone()),
                ("REDLEASE_QW_COUNTER", counter.clone()),
                ("REDLEASE_QW_ROUNDS", rounds.to_string()),
            ])
        })
        .collect();
    all_succeed(children).await;
    let total = processes * rounds;
    let calls = command_calls(&server, "evalsha") - calls_before;
    let per = calls as f64 / total as f64;
    eprintln!(
        "{processes} processes x {rounds} rounds in {:?}: {calls} script calls, {per:.2} per acquisition",
        started.elapsed()
    );
    assert_eq!(
        read_counter(&server, &counter),
        total as u64,
        "mutual exclusion"
    );
    // A waiter's queueing attempt and the release: about 2 (the grant is taken from its
    // message). Claiming each grant with an attempt cost 3; a release that woke every process
    // to ask cost about `processes` (8).
    assert!(per < most_calls, "{per:.2} script calls per acquisition");
    assert!(queued(&server, &name).is_empty());
    assert!(!exists(&server, &key_of(&name)));
}

/// The same turns on a Redis Cluster while the lock's slot (the lock, its queue, the counter)
/// migrates to another primary and that primary then fails over to its replica: 4 processes x
/// 150 acquisitions, the counter exact, the queue empty and the lock gone at the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_take_turns_on_a_cluster_through_a_slot_migration_and_a_failover() {
    let cluster = Cluster::start();
    let (name, from) = cluster.names_per_primary("turns-cl", 1).remove(0);
    let key = key_of(&name);
    // The lock's hash tag: the counter moves with the lock.
    let counter = format!("{{{name}}}:count");
    let (processes, rounds) = (4, 150);
    let total = (processes * rounds) as u64;
    let children: Vec<Child> = (0..processes)
        .map(|_| {
            spawn_worker(&[
                ("REDLEASE_QW", "count".into()),
                ("REDLEASE_QW_SEEDS", cluster.seeds().join(",")),
                ("REDLEASE_QW_NAME", name.clone()),
                ("REDLEASE_QW_COUNTER", counter.clone()),
                ("REDLEASE_QW_ROUNDS", rounds.to_string()),
            ])
        })
        .collect();
    let count_now =
        |cluster: &Cluster, counter: &str| read_counter(cluster.server_of(counter), counter);
    let watched = counter.clone();
    let reached = move |cluster: &Cluster, n: u64| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while count_now(cluster, &watched) < n {
            assert!(Instant::now() < deadline, "the counter stalled below {n}");
            std::thread::sleep(Duration::from_millis(10));
        }
    };
    let cluster = tokio::task::spawn_blocking(move || {
        reached(&cluster, total / 4);
        let to = *cluster
            .primaries()
            .iter()
            .find(|&&p| p != from && cluster.try_replica_of(p).is_some())
            .expect("another primary with a replica");
        cluster.migrate_slot(key_slot(&key), to);
        reached(&cluster, total / 2);
        assert_eq!(cluster.primary_of(&key), to, "the slot moved");
        cluster.failover(to);
        cluster
    })
    .await
    .unwrap();
    all_succeed(children).await;
    assert_eq!(count_now(&cluster, &counter), total, "mutual exclusion");
    let owner = cluster.server_of(&key_of(&name));
    assert!(queued(owner, &name).is_empty(), "entries left in the queue");
    assert!(!exists(owner, &key_of(&name)), "the lock is still held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_to_a_frozen_then_killed_waiter_passes_on_after_the_claim_lease() {
    let server = Server::start();
    let name = unique_name("dead-grantee");
    let [holder, next] = clients(&server).await;
    // Every process of the deployment has the same claim lease (the waiters behind a grant look
    // again within their own).
    let next = {
        drop(next);
        Client::builder(server.url())
            .claim_lease(CLAIM)
            .build()
            .await
            .unwrap()
    };
    let held = holder.lock(&name).unwrap().lock().await.unwrap();
    // The doomed waiter queues first.
    let mut doomed = spawn_worker(&[
        ("REDLEASE_QW", "wait".into()),
        ("REDLEASE_QW_URL", server.url()),
        ("REDLEASE_QW_NAME", name.clone()),
    ]);
    let first_queued = support::eventually_async(Duration::from_secs(10), || async {
        queued(&server, &name).len() == 1
    })
    .await;
    assert!(first_queued, "the worker never queued");
    let waiter = {
        let lock = next.lock(&name).unwrap();
        tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            let at = Instant::now();
            guard.unlock().await.unwrap();
            at
        })
    };
    let both = support::eventually_async(Duration::from_secs(10), || async {
        queued(&server, &name).len() == 2
    })
    .await;
    assert!(both, "the second waiter never queued");
    // Freeze the first waiter, release: the lock goes to it, and it cannot claim it.
    signal(&doomed, "STOP");
    let released = Instant::now();
    held.unlock().await.unwrap();
    signal(&doomed, "KILL");
    let _ = doomed.wait();
    let granted = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the next waiter was granted")
        .unwrap();
    let after = granted - released;
    eprintln!("granted {after:?} after the release to a dead waiter");
    assert!(
        after >= CLAIM - Duration::from_millis(50) && after <= CLAIM + Duration::from_secs(1),
        "granted {after:?} after the release; claim lease {CLAIM:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_cancelled_waits_leave_no_entry_and_no_hold() {
    let server = Server::start();
    let name = unique_name("cancelled");
    let [holder, other] = clients(&server).await;
    // Waiters in four clients, so several of them are queued on the server at once.
    let waiters: [Client; 4] = clients(&server).await;
    let held = holder.lock(&name).unwrap().lock().await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..1000u64 {
        let lock = waiters[i as usize % 4]
            .lock(&name)
            .unwrap()
            .with_owner(redlease::Owner::new());
        // Cancelled at scattered points: before, during and after queueing, and after a grant.
        let limit = Duration::from_micros(i * 97 % 30_000);
        tasks.push(tokio::spawn(async move {
            let got = match i % 3 {
                0 => tokio::time::timeout(limit, lock.lock())
                    .await
                    .ok()
                    .map(Result::unwrap),
                1 => lock
                    .try_lock_with(LockOptions::new().wait(limit))
                    .await
                    .unwrap(),
                _ => {
                    let task = tokio::spawn(async move { lock.lock().await });
                    tokio::time::sleep(limit).await;
                    task.abort();
                    task.await.ok().map(Result::unwrap)
                }
            };
            // A wait that won before its cancellation holds the lock: it gives it back.
            if let Some(guard) = got {
                guard.unlock().await.unwrap();
            }
        }));
    }
    // Release in the middle of the storm: grants race the cancellations.
    tokio::time::sleep(Duration::from_millis(10)).await;
    held.unlock().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    let guard = tokio::time::timeout(Duration::from_secs(5), other.lock(&name).unwrap().lock())
        .await
        .expect("another owner got the lock")
        .unwrap();
    guard.unlock().await.unwrap();
    let clean = support::eventually_async(Duration::from_secs(5), || async {
        let [q, qd] = queue_keys(&name);
        !exists(&server, &q) && !exists(&server, &qd) && !exists(&server, &key_of(&name))
    })
    .await;
    assert!(clean, "left: {:?}", queued(&server, &name));
}

/// A queued waiter holds the lock from the grant's message, with no call of its own: one
/// hold, valid for the claim lease until its watchdog lengthens it to the lease soon after; a
/// re-entry counts two.
#[tokio::test]
async fn a_queued_waiter_is_given_the_lock_by_the_release_and_holds_it_once() {
    let server = Server::start();
    let name = unique_name("claim-once");
    let holder = Client::builder(server.url()).build().await.unwrap();
    let waiter = Client::builder(server.url())
        .claim_lease(Duration::from_millis(1_500))
        .build()
        .await
        .unwrap();
    // The release script is loaded (a first release meets NOSCRIPT, and is sent again).
    let warm = holder.lock(&unique_name("warm")).unwrap();
    warm.lock().await.unwrap().unlock().await.unwrap();
    let held = holder.lock(&name).unwrap().lock().await.unwrap();
    let lock = waiter.lock(&name).unwrap();
    let (took, mut taken) = tokio::sync::mpsc::channel(1);
    let (reenter, reentering) = tokio::sync::oneshot::channel::<()>();
    // One task: the owner of both acquisitions.
    let waiting = tokio::spawn(async move {
        let guard = lock.lock().await?;
        // Taken from the message: valid for the claim lease at most, for now.
        let valid = guard
            .valid_until()
            .saturating_duration_since(Instant::now());
        let _ = took.send(valid).await;
        let _ = reentering.await;
        let again = lock.lock().await?;
        Ok::<_, redlease::Error>((guard, again))
    });
    let in_queue = support::eventually_async(Duration::from_secs(5), || async {
        queued(&server, &name).len() == 1
    })
    .await;
    assert!(in_queue);
    let evals = command_calls(&server, "evalsha");
    held.unlock().await.unwrap();
    let valid = tokio::time::timeout(Duration::from_secs(5), taken.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(valid <= Duration::from_millis(1_500), "{valid:?}");
    assert_eq!(
        command_calls(&server, "evalsha"),
        evals + 1,
        "the release: the grant itself cost the waiter no call"
    );
    reenter.send(()).unwrap();
    let (guard, again) = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let counts: Vec<u64> = redis::cmd("HVALS")
        .arg(key_of(&name))
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(counts, [2], "the grant is one hold, the re-entry a second");
    again.unlock().await.unwrap();
    // The watchdog took over from the claim lease (renewed at a third of it).
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    assert!(
        support::pttl(&server, &key_of(&name)) > 10_000,
        "the lease, not the claim lease"
    );
    assert!(guard.valid_until() > Instant::now() + Duration::from_secs(10));
    assert!(!guard.is_lost());
    guard.unlock().await.unwrap();
    assert!(!exists(&server, &key_of(&name)));
}

/// The child side of the multi-process tests. Does nothing unless `REDLEASE_QW` is set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of the server-queue tests; does nothing unless REDLEASE_QW is set"]
async fn queue_worker() {
    let Ok(mode) = std::env::var("REDLEASE_QW") else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("worker needs {k}"));
    // On a cluster (seeds given) faults come and go during the run: every call is retried for
    // a while (a short watchdog lease, so a hold whose release failed frees itself soon).
    let seeds = std::env::var("REDLEASE_QW_SEEDS").ok();
    let client = match &seeds {
        Some(seeds) => Client::builder_cluster(seeds.split(','))
            .claim_lease(CLAIM)
            .watchdog_lease(Duration::from_secs(2))
            .timeout(Duration::from_secs(1))
            .build()
            .await
            .unwrap(),
        None => Client::builder(var("REDLEASE_QW_URL"))
            .claim_lease(CLAIM)
            .build()
            .await
            .unwrap(),
    };
    let lock = client.lock(&var("REDLEASE_QW_NAME")).unwrap();
    match mode.as_str() {
        "count" if seeds.is_some() => {
            let counter = var("REDLEASE_QW_COUNTER");
            let rounds: usize = var("REDLEASE_QW_ROUNDS").parse().unwrap();
            for _ in 0..rounds {
                let guard = retried("lock", || lock.lock()).await;
                let get = redis::cmd("GET").arg(&counter).clone();
                let value: Option<u64> = retried("GET", || client.query(&get)).await;
                assert!(!guard.is_lost(), "the hold was lost while counting");
                let set = redis::cmd("SET")
                    .arg(&counter)
                    .arg(value.unwrap_or(0) + 1)
                    .clone();
                retried("SET", || client.query::<()>(&set)).await;
                if let Err(e) = guard.unlock().await {
                    // Its lease (2 s) frees it; the others wait that long.
                    eprintln!("worker: unlock failed: {e}");
                }
            }
        }
        "count" | "count-fixed" | "count-fenced" | "count-delay" => {
            let counter = var("REDLEASE_QW_COUNTER");
            let rounds: usize = var("REDLEASE_QW_ROUNDS").parse().unwrap();
            let fixed = LockOptions::new().lease(Duration::from_secs(10));
            let (lock, options) = match mode.as_str() {
                "count-fixed" => (lock, fixed),
                "count-fenced" => (lock.fenced(true), fixed),
                "count-delay" => (lock.lock_delay(Duration::from_secs(1)), LockOptions::new()),
                _ => (lock, LockOptions::new()),
            };
            for _ in 0..rounds {
                let guard = lock.lock_with(options).await.unwrap();
                increment_unprotected(&client, &counter).await;
                guard.unlock().await.unwrap();
            }
        }
        "wait" => {
            // Killed by the parent while it waits; the bound only ends an orphan.
            let _ = tokio::time::timeout(Duration::from_secs(60), lock.lock()).await;
        }
        other => panic!("unknown worker mode {other}"),
    }
    client.shutdown().await.unwrap();
}

/// `call` again until it succeeds, at most 100 times 50 ms apart (a cluster in transition).
async fn retried<T, F, Fut>(what: &str, mut call: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = redlease::Result<T>>,
{
    let mut tries = 0;
    loop {
        match call().await {
            Ok(value) => return value,
            Err(e) if tries < 100 => {
                tries += 1;
                eprintln!("worker: {what} failed ({e}); again");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("worker: {what} failed 100 times: {e}"),
        }
    }
}

#[tokio::test]
async fn a_wait_that_runs_out_leaves_the_queue_before_it_returns() {
    let server = Server::start();
    let name = unique_name("ran-out");
    let [holder, waiter] = clients(&server).await;
    let held = holder.lock(&name).unwrap().lock().await.unwrap();
    let lock = waiter.lock(&name).unwrap();
    assert!(
        lock.try_lock_with(LockOptions::new().wait(Duration::from_millis(200)))
            .await
            .unwrap()
            .is_none()
    );
    // Gone already, not at its deadline: a process that exits now leaves no place behind for
    // the release to give the lock to.
    assert!(queued(&server, &name).is_empty());
    held.unlock().await.unwrap();
    assert!(
        !exists(&server, &key_of(&name)),
        "nobody was given the lock"
    );
}

/// `withdraw.lua` as the client sends it.
const WITHDRAW: &str = concat!(
    include_str!("../lua/queue.lua"),
    include_str!("../lua/fence.lua"),
    include_str!("../lua/queue_lock.lua"),
    include_str!("../lua/withdraw.lua")
);

/// A waiter cancelled while its queued attempt is on its way, which the server then answers
/// only after the waiter's withdrawal (the attempt met NOSCRIPT and was sent again once its
/// script was loaded), leaves no entry behind: the release frees the lock for whoever asks
/// next, instead of granting it to nobody for a claim lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_attempt_answered_after_its_withdrawal_leaves_no_entry() {
    let server = Server::start();
    let name = unique_name("late-attempt");
    let [holder, waiter, other] = clients(&server).await;
    let held = holder.fair_lock(&name).unwrap().lock().await.unwrap();
    // The server knows the withdrawal's script, not the acquisition's.
    let mut conn = server.conn();
    redis::cmd("SCRIPT").arg("FLUSH").exec(&mut conn).unwrap();
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(WITHDRAW)
        .exec(&mut conn)
        .unwrap();
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .exec(&mut conn)
        .unwrap();
    // Writes wait: the waiter's first attempt (a FairLock's queues) and then its withdrawal
    // reach the server and wait there.
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(10_000)
        .arg("WRITE")
        .exec(&mut conn)
        .unwrap();
    let lock = waiter.fair_lock(&name).unwrap();
    let waiting = tokio::spawn(async move { lock.lock().await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    waiting.abort();
    assert!(waiting.await.is_err(), "the wait was cancelled");
    tokio::time::sleep(Duration::from_millis(300)).await;
    redis::cmd("CLIENT").arg("UNPAUSE").exec(&mut conn).unwrap();
    // The attempt met NOSCRIPT, the withdrawal ran, the attempt ran again after it (queueing
    // the waiter anew), and then the abandoned attempt's own withdrawal: 4 EVALSHA.
    let settled = support::eventually_async(Duration::from_secs(5), || async {
        command_calls(&server, "script|load") == 1
            && command_calls(&server, "evalsha") >= 4
            && queued(&server, &name).is_empty()
    })
    .await;
    assert!(
        settled,
        "script loads: {}, EVALSHA: {}, queued: {:?}",
        command_calls(&server, "script|load"),
        command_calls(&server, "evalsha"),
        queued(&server, &name)
    );
    held.unlock().await.unwrap();
    let free = other.fair_lock(&name).unwrap().try_lock().await.unwrap();
    assert!(free.is_some(), "the release granted the lock to nobody");
    free.unwrap().unlock().await.unwrap();
}

/// An attempt the server answers with the lock while the client shuts down: the hold is given
/// back, and no withdrawal follows, since the attempt's own script took the place out of the
/// queue (a withdrawal then would take out a waiter of the same owner instead).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_granted_while_the_client_shuts_down_sends_no_withdrawal() {
    let server = Server::start();
    let name = unique_name("granted-at-shutdown");
    let [client] = clients(&server).await;
    let lock = client.fair_lock(&name).unwrap();
    lock.lock().await.unwrap().unlock().await.unwrap();
    // From here on, every script the client sends is loaded anew, so a withdrawal would leave
    // its script on the server.
    let mut conn = server.conn();
    redis::cmd("SCRIPT").arg("FLUSH").exec(&mut conn).unwrap();
    // The attempt (a FairLock's queues from the first) is answered after shutdown began.
    redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(1000)
        .arg("ALL")
        .exec(&mut conn)
        .unwrap();
    let waiting = tokio::spawn(async move {
        let wait = LockOptions::new().wait(Duration::from_secs(5));
        lock.try_lock_with(wait).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (acquired, shut) = tokio::join!(waiting, client.shutdown());
    assert!(
        matches!(acquired.unwrap(), Err(redlease::Error::Shutdown)),
        "a grant answered after shutdown began is refused"
    );
    shut.unwrap();
    let free = support::eventually(Duration::from_secs(3), || !exists(&server, &key_of(&name)));
    assert!(free, "the grant was given back");
    let withdrawal = redis::Script::new(WITHDRAW).get_hash().to_string();
    let loaded: Vec<bool> = redis::cmd("SCRIPT")
        .arg("EXISTS")
        .arg(&withdrawal)
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(loaded, [false], "a withdrawal was sent after the grant");
}

/// Our lock `name` held on `ours` terms (the outer hold), then forced by another client, which
/// takes it on `theirs` terms before our watchdog notices: our lock, our outer guard, theirs.
/// Our client runs without the loss notice, which would tell it at once (tests/loss_notice.rs).
async fn taken_over(
    server: &Server,
    name: &str,
    ours: LockOptions,
    theirs: LockOptions,
) -> (redlease::Lock, redlease::LockGuard, redlease::LockGuard) {
    let our_client = support::client_with(server, |b| b.loss_notice(false)).await;
    let their_client = support::client(server).await;
    let lock = our_client.lock(name).unwrap();
    let outer = lock.lock_with(ours).await.unwrap();
    let other_lock = their_client.lock(name).unwrap();
    assert!(other_lock.force_unlock().await.unwrap());
    let other = other_lock.lock_with(theirs).await.unwrap();
    (lock, outer, other)
}

/// A nested acquisition whose outer hold is gone on the server (another process forced it and
/// took the lock) before the watchdog's next renewal: the outer guard is told at once, and the
/// nested call waits in the queue like any waiter, so the other holder's release hands it the
/// lock (it used to nap until that holder's lease ran out, 30 s, without queueing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentry_after_a_takeover_waits_in_the_queue_and_the_outer_guard_is_lost() {
    let server = Server::start();
    let name = unique_name("reentry-taken");
    let (lock, outer, other) =
        taken_over(&server, &name, LockOptions::new(), LockOptions::new()).await;
    assert!(!outer.is_lost(), "nothing has told our client yet");
    let started = Instant::now();
    // One task, so one owner: the second acquisition is a re-entry of the outer one.
    let (nested, ()) = tokio::join!(
        lock.try_lock_with(LockOptions::new().wait(Duration::from_secs(10))),
        async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            other.unlock().await.unwrap();
        }
    );
    let nested = nested
        .unwrap()
        .expect("the release handed the lock to the nested call");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert!(outer.is_lost(), "the outer guard was told");
    assert_eq!(
        lock.hold_count().await.unwrap(),
        1,
        "a fresh hold, not a re-entry"
    );
    nested.unlock().await.unwrap();
    assert!(!exists(&server, &key_of(&name)), "free again");
    drop(outer);
}

/// The same, with the outer hold's fixed lease running out while the refused re-entry is on its
/// way (the server paused): the outer hold is still the one detached, so its unlock sends
/// nothing that could take away a hold the nested call gets on the same owner field.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reentry_refused_after_the_outer_lease_ran_out_detaches_the_outer_hold() {
    let server = Server::start();
    let name = unique_name("reentry-expired");
    let fixed = |ms| LockOptions::new().lease(Duration::from_millis(ms));
    // The other holder's lease is fixed: no renewal calls to count below.
    let (lock, outer, _other) = taken_over(&server, &name, fixed(1_000), fixed(10_000)).await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!outer.is_lost());
    server.client_pause(700, false);
    let nested = lock
        .try_lock_with(LockOptions::new().wait(Duration::from_millis(1_500)))
        .await
        .unwrap();
    assert!(nested.is_none(), "the other holder keeps it");
    assert!(outer.is_lost());
    let before = command_calls(&server, "evalsha");
    assert!(outer.unlock().await.unwrap_err().is_lease_lost());
    assert_eq!(
        command_calls(&server, "evalsha") - before,
        0,
        "the lost outer hold's release went to the server"
    );
}

/// A release whose reply is lost (the server paused past the client's timeout while the release
/// was on its way; the release is tried again) gives the lock to the queued waiter of another
/// process exactly once: afterwards one holder, the waiter, whom a third client cannot join.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_reply_is_lost_leaves_exactly_one_holder() {
    let server = Server::start();
    let name = unique_name("lost-reply");
    // The waiter's claim lease (its longest nap while queued) outlasts the pause: it hears of
    // its grant from the message, not from an attempt of its own into the paused server.
    let build = || {
        Client::builder(server.url())
            .timeout(Duration::from_millis(300))
            .claim_lease(Duration::from_secs(5))
            .build()
    };
    let (holder, waiter, third) = (
        build().await.unwrap(),
        build().await.unwrap(),
        build().await.unwrap(),
    );
    let held = holder.lock(&name).unwrap().lock().await.unwrap();
    let waiting = {
        let lock = waiter.lock(&name).unwrap();
        tokio::spawn(async move { lock.lock().await })
    };
    let in_queue = support::eventually_async(Duration::from_secs(5), || async {
        queued(&server, &name).len() == 1
    })
    .await;
    assert!(in_queue, "the waiter never queued");
    server.pause();
    let releasing = tokio::spawn(async move { held.unlock().await });
    // Past the client's timeout: the first attempt's reply never comes in time.
    tokio::time::sleep(Duration::from_millis(700)).await;
    server.resume();
    let unlocked = tokio::time::timeout(Duration::from_secs(10), releasing)
        .await
        .expect("the unlock ended")
        .unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the waiter got the lock")
        .unwrap()
        .unwrap();
    eprintln!("unlock after the lost reply: {unlocked:?}");
    let owners: Vec<(String, i64)> = redis::cmd("HGETALL")
        .arg(key_of(&name))
        .query(&mut server.conn())
        .unwrap();
    assert_eq!(owners.len(), 1, "one holder: {owners:?}");
    assert!(
        owners[0].0.starts_with(&waiter.id().to_string()),
        "the waiter holds it: {owners:?}"
    );
    assert!(!guard.is_lost());
    let intruder = third.lock(&name).unwrap().try_lock().await.unwrap();
    assert!(intruder.is_none(), "a second holder");
    guard.unlock().await.unwrap();
    assert!(!exists(&server, &key_of(&name)));
}

/// A waiter cancelled right after its connection dropped still takes its place out: the
/// withdrawal is the first command on the dead connection, and is sent once more on a new
/// one. Before, it failed there and the place stayed for the holder's lease, to be granted the
/// lock and hold every waiter behind it up for a claim lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_withdrawal_on_a_dropped_connection_is_sent_again() {
    let server = Server::start();
    let [holder, waiter] = support::clients(&server).await;
    let name = unique_name("withdraw-dropped");
    let held = holder.lock(&name).unwrap().lock().await.unwrap();
    let lock = waiter.lock(&name).unwrap();
    let waiting = tokio::spawn(async move { lock.lock().await.map(drop) });
    assert!(
        support::eventually(Duration::from_secs(5), || queued(&server, &name).len() == 1),
        "the waiter never queued"
    );
    let killed: u64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query(&mut server.conn())
        .unwrap();
    assert!(killed > 0);
    waiting.abort();
    assert!(
        support::eventually(Duration::from_secs(3), || queued(&server, &name).is_empty()),
        "the cancelled waiter's place stayed: {:?}",
        queued(&server, &name)
    );
    held.unlock().await.unwrap();
}
