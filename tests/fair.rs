//! `FairLock`: first come, first served across clients, newcomers included (a `Lock` in strict
//! mode, on the lock's own keys `P:{N}` and its queue `P:{N}:q`); a waiter that gives up leaves
//! no stale place; a crashed waiter holds the others up for the claim lease at most; a release
//! wakes only the first waiter.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use redlease::{LockOptions, Owner};
use support::{Server, clients, unique_name};

/// The lock's queue on the server (`lua/queue.lua`), the same for a `Lock` and a `FairLock`.
fn queue_of(key: &str) -> String {
    format!("{key}:q")
}

fn queued(server: &Server, key: &str) -> Vec<String> {
    redis::cmd("LRANGE")
        .arg(queue_of(key))
        .arg(0)
        .arg(-1)
        .query(&mut server.conn())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_from_two_clients_get_it_in_order() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("fair");
    let lease = Duration::from_millis(150);
    let first = a.fair_lock(&name).unwrap().with_owner(Owner::new());
    let held = first
        .try_lock_with(LockOptions::new().lease(lease))
        .await
        .unwrap()
        .unwrap();
    std::mem::forget(held); // nobody unlocks: each lease runs out
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..6 {
        let lock = [&a, &b][i % 2]
            .fair_lock(&name)
            .unwrap()
            .with_owner(Owner::new());
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let options = LockOptions::new()
                .wait(Duration::from_secs(10))
                .lease(lease);
            let guard = lock
                .try_lock_with(options)
                .await
                .unwrap()
                .expect("waited 10 s in vain");
            order.lock().unwrap().push(i);
            std::mem::forget(guard);
        }));
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    for waiter in waiters {
        tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3, 4, 5]);
}

/// A newcomer never takes a free lock while anybody live is queued: a single attempt is
/// refused (and takes no place), a waiting one queues behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_does_not_barge_ahead_of_queued_waiters() {
    support::init_tracing();
    let server = Server::start();
    let [a, b, c] = clients(&server).await;
    let name = unique_name("fair-barge");
    let holder = a.fair_lock(&name).unwrap();
    let key = holder.key().to_owned();
    let held = holder
        .try_lock_with(LockOptions::new().lease(Duration::from_secs(30)))
        .await
        .unwrap()
        .unwrap();
    std::mem::forget(held); // gone by hand below, as when a lease runs out
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let waiter = {
        let (lock, order) = (b.fair_lock(&name).unwrap(), order.clone());
        tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            order.lock().unwrap().push("waiter");
            tokio::time::sleep(Duration::from_millis(100)).await;
            guard.unlock().await.unwrap();
        })
    };
    assert!(
        support::eventually_async(Duration::from_secs(2), || async {
            queued(&server, &key).len() == 1
        })
        .await,
        "the waiter queued"
    );
    // The lock is free with a waiter queued, and nobody told it (a lease that ran out).
    let _: () = redis::Commands::del(&mut server.conn(), &key).unwrap();
    let newcomer = c.fair_lock(&name).unwrap();
    assert!(
        newcomer.try_lock().await.unwrap().is_none(),
        "a single attempt took the lock from a queued waiter"
    );
    assert!(
        queued(&server, &key).is_empty(),
        "the single attempt took a place, or the waiter was not granted the lock"
    );
    let late = {
        let (lock, order) = (
            c.fair_lock(&name).unwrap().with_owner(Owner::new()),
            order.clone(),
        );
        tokio::spawn(async move {
            let options = LockOptions::new().wait(Duration::from_secs(5));
            let guard = lock.lock_with(options).await.unwrap();
            order.lock().unwrap().push("newcomer");
            guard.unlock().await.unwrap();
        })
    };
    for task in [waiter, late] {
        tokio::time::timeout(Duration::from_secs(6), task)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(*order.lock().unwrap(), ["waiter", "newcomer"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_gives_up_leaves_no_stale_place() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("fair-stale");
    let holder = a.fair_lock(&name).unwrap();
    let guard = holder.lock().await.unwrap();
    let quitter = b.fair_lock(&name).unwrap();
    let options = LockOptions::new().wait(Duration::from_millis(200));
    assert!(quitter.try_lock_with(options).await.unwrap().is_none());
    let left = support::eventually_async(Duration::from_millis(500), || async {
        queued(&server, holder.key()).is_empty()
    })
    .await;
    assert!(
        left,
        "the quitter kept its place: {:?}",
        queued(&server, holder.key())
    );
    guard.unlock().await.unwrap();
    let third = b.fair_lock(&name).unwrap().with_owner(Owner::new());
    let got = third
        .try_lock()
        .await
        .unwrap()
        .expect("a stale place kept the lock from a newcomer");
    // A release wakes only the first waiter: the second stays asleep. On two clients: within
    // one client only the first waiter waits in the server's queue (the others take turns
    // behind it locally), and this counts the server's queue.
    let w1 = a.fair_lock(&name).unwrap().with_owner(Owner::new());
    let w2 = b.fair_lock(&name).unwrap().with_owner(Owner::new());
    let t1 = tokio::spawn(async move { (w1.lock().await.unwrap(), Instant::now()) });
    assert!(
        support::eventually_async(Duration::from_secs(2), || async {
            queued(&server, holder.key()).len() == 1
        })
        .await
    );
    let t2 = tokio::spawn(async move { w2.lock().await.unwrap() });
    assert!(
        support::eventually_async(Duration::from_secs(2), || async {
            queued(&server, holder.key()).len() == 2
        })
        .await
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    got.unlock().await.unwrap();
    let (g1, at) = t1.await.unwrap();
    let latency = at.duration_since(released);
    assert!(
        latency < Duration::from_millis(100),
        "the first waiter woke {latency:?} after the release"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!t2.is_finished(), "the second waiter got a held lock");
    g1.unlock().await.unwrap();
    tokio::time::timeout(Duration::from_secs(2), t2)
        .await
        .unwrap()
        .unwrap()
        .unlock()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_waiter_delays_the_others_by_the_claim_lease_at_most() {
    support::init_tracing();
    let server = Server::start();
    let a = support::client(&server).await;
    let name = unique_name("fair-crash");
    let holder = a.fair_lock(&name).unwrap();
    let guard = holder.lock().await.unwrap();
    // The crashing waiter: its own client on its own runtime, which is then torn down.
    let url = server.url();
    let (crash_name, key) = (name.clone(), holder.key().to_owned());
    let crashed_at = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let waiter_url = url.clone();
        runtime.spawn(async move {
            let client = support::connect(&waiter_url).await;
            let _ = client.fair_lock(&crash_name).unwrap().lock().await;
        });
        let server_conn = redis::Client::open(url).unwrap();
        let mut conn = server_conn.get_connection().unwrap();
        for _ in 0..200 {
            let n: usize = redis::cmd("LLEN")
                .arg(queue_of(&key))
                .query(&mut conn)
                .unwrap();
            if n == 1 {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        runtime.shutdown_background();
        Instant::now()
    })
    .join()
    .unwrap();
    assert_eq!(
        queued(&server, holder.key()).len(),
        1,
        "the crashed waiter is not in the queue"
    );
    let next = a.fair_lock(&name).unwrap().with_owner(Owner::new());
    let waiting = tokio::spawn(async move { (next.lock().await.unwrap(), Instant::now()) });
    assert!(
        support::eventually_async(Duration::from_secs(2), || async {
            queued(&server, holder.key()).len() == 2
        })
        .await
    );
    guard.unlock().await.unwrap();
    let (got, at) = tokio::time::timeout(Duration::from_secs(6), waiting)
        .await
        .unwrap()
        .unwrap();
    let delay = at.duration_since(crashed_at);
    // Not withdrawn (a crash cannot): the release granted the lock to the crashed waiter, first
    // in the queue, which held it for the claim lease (`Config::claim_lease`, 2 s by default)
    // until the next waiter took it. The margin covers the wait for the second entry before the
    // release, and the next waiter's attempt just past the claim lease's end.
    let claim = Duration::from_secs(2);
    assert!(
        delay >= claim,
        "only {delay:?}: the crashed waiter was not granted the lock"
    );
    assert!(
        delay < claim + Duration::from_secs(1),
        "held up {delay:?} by a crashed waiter (claim lease 2 s)"
    );
    got.unlock().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewed_waiters_get_the_lock_in_order_and_alone() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("fair-chain");
    let counter = format!("{name}:counter");
    let first = a.fair_lock(&name).unwrap().lock().await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..8 {
        let lock = [&a, &b][i % 2]
            .fair_lock(&name)
            .unwrap()
            .with_owner(Owner::new());
        let (order, url, counter) = (order.clone(), server.url(), counter.clone());
        waiters.push(tokio::spawn(async move {
            let mut conn = redis::Client::open(url)
                .unwrap()
                .get_multiplexed_async_connection()
                .await
                .unwrap();
            let guard = lock.lock().await.unwrap();
            order.lock().unwrap().push(i);
            // Non-atomic under the lock: a second holder would lose an increment.
            let n: Option<u64> = redis::AsyncCommands::get(&mut conn, &counter)
                .await
                .unwrap();
            tokio::task::yield_now().await;
            let _: () = redis::AsyncCommands::set(&mut conn, &counter, n.unwrap_or(0) + 1)
                .await
                .unwrap();
            guard.unlock().await.unwrap();
        }));
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    first.unlock().await.unwrap();
    for waiter in waiters {
        tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .unwrap()
            .unwrap();
    }
    assert_eq!(*order.lock().unwrap(), [0, 1, 2, 3, 4, 5, 6, 7]);
    let n: u64 = redis::Commands::get(&mut server.conn(), &counter).unwrap();
    assert_eq!(n, 8);
}

fn script_calls(server: &Server) -> u64 {
    support::command_calls(server, "evalsha") + support::command_calls(server, "eval")
}

/// A release grants the lock to the first queued waiter in its own script call, whichever client
/// it belongs to, and that waiter holds it from the one message sent to its client: one script
/// call per hand-over, one message.
// One thread: a woken task runs before the batch it joins leaves, every time.
#[tokio::test]
async fn a_release_hands_over_to_the_first_queued_waiter_in_one_call() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("fair-local");
    let fair = a.fair_lock(&name).unwrap();
    let key = fair.key().to_string();
    let mut held = fair.lock().await.unwrap();
    // Twice: the first hand-over may also load a script (NOSCRIPT, a second call), the second
    // one is counted.
    for round in 0..2 {
        let waiter = {
            let fair = fair.clone();
            tokio::spawn(async move { fair.lock().await.unwrap() })
        };
        assert!(
            support::eventually_async(Duration::from_secs(2), || async {
                queued(&server, &key).len() == 1
            })
            .await,
            "the waiter queued"
        );
        // Queued by its first attempt; it naps once it subscribed and tried again.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let (calls, published) = (
            script_calls(&server),
            support::command_calls(&server, "publish"),
        );
        held.unlock().await.unwrap();
        held = tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .expect("handed over")
            .unwrap();
        if round == 1 {
            assert_eq!(
                script_calls(&server) - calls,
                1,
                "release and grant in one call"
            );
        }
        assert_eq!(
            support::command_calls(&server, "publish"),
            published + 1,
            "one message, to the waiter's client"
        );
    }
    let next = held;
    // Another client's waiter first: the release publishes to it.
    let other = {
        let fair = b.fair_lock(&name).unwrap();
        tokio::spawn(async move { fair.lock().await.unwrap() })
    };
    assert!(
        support::eventually_async(Duration::from_secs(2), || async {
            queued(&server, &key).len() == 1
        })
        .await,
        "the other client's waiter queued"
    );
    let published = support::command_calls(&server, "publish");
    next.unlock().await.unwrap();
    let last = tokio::time::timeout(Duration::from_secs(2), other)
        .await
        .expect("the other client's waiter was told")
        .unwrap();
    assert_eq!(support::command_calls(&server, "publish"), published + 1);
    last.unlock().await.unwrap();
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A `FairLock` and a `Lock` of one name are one lock, on the same keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_lock_and_a_lock_of_one_name_are_one_lock() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("fair-same");
    let (fair, lock) = (a.fair_lock(&name).unwrap(), b.lock(&name).unwrap());
    assert_eq!(fair.key(), lock.key());
    let held = fair.lock().await.unwrap();
    assert!(lock.try_lock().await.unwrap().is_none());
    held.unlock().await.unwrap();
    let held = lock.lock().await.unwrap();
    assert!(fair.try_lock().await.unwrap().is_none());
    held.unlock().await.unwrap();
}

/// The ids of the server's normal (command) connections, but the one asking.
fn normal_ids(server: &Server) -> Vec<u64> {
    let mut conn = server.conn();
    let me: u64 = redis::cmd("CLIENT").arg("ID").query(&mut conn).unwrap();
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("normal")
        .query(&mut conn)
        .unwrap();
    let id = |line: &str| {
        let field = line.split(' ').find_map(|f| f.strip_prefix("id="))?;
        field.parse().ok().filter(|id| *id != me)
    };
    list.lines().filter_map(id).collect()
}

/// A waiter whose connection drops keeps its place in line: its next look meets the dead
/// connection, and the retry on a new one refreshes its place. Before, the retry withdrew it
/// and it queued again behind the waiters that came after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_connection_drops_keeps_its_place() {
    support::init_tracing();
    let server = Server::start();
    let holder = support::client(&server).await;
    let name = unique_name("fair-dropped");
    let lock = holder.fair_lock(&name).unwrap();
    let key = lock.key().to_owned();
    let held = lock.lock().await.unwrap();
    let before = normal_ids(&server);
    let first = support::client(&server).await;
    let first_ids: Vec<u64> = normal_ids(&server)
        .into_iter()
        .filter(|id| !before.contains(id))
        .collect();
    let [second, third] = clients(&server).await;
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (who, client) in [("first", &first), ("second", &second), ("third", &third)] {
        let (lock, order) = (client.fair_lock(&name).unwrap(), order.clone());
        tasks.push(tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            order.lock().unwrap().push(who);
            guard.unlock().await.unwrap();
        }));
        let n = tasks.len();
        let in_line = || async { queued(&server, &key).len() == n };
        assert!(
            support::eventually_async(Duration::from_secs(2), in_line).await,
            "{who} never queued"
        );
    }
    for id in &first_ids {
        let _: redis::RedisResult<()> = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("ID")
            .arg(id)
            .query(&mut server.conn());
    }
    // The first waiter looks again within a claim lease (2 s), on the dead connection, and
    // its retry connects anew.
    let killed = normal_ids(&server);
    let reconnected = || normal_ids(&server).iter().any(|id| !killed.contains(id));
    assert!(
        support::eventually(Duration::from_secs(5), reconnected),
        "the first waiter never looked again"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    held.unlock().await.unwrap();
    for task in tasks {
        let done = tokio::time::timeout(Duration::from_secs(10), task).await;
        assert!(matches!(done, Ok(Ok(()))), "a waiter never got the lock");
    }
    assert_eq!(*order.lock().unwrap(), ["first", "second", "third"]);
}

/// Two tasks of one shared `Owner` wait for a `FairLock`. When it frees, one task claims it
/// and the other's attempt, which enters the hold again, is cut off with its connection (a
/// proxy drops the request and closes the connection). Its retry cannot tell whether that
/// attempt ran, and must not "undo" it with a release of the owner: that release freed the
/// first task's hold, and a waiter of another client took the lock while the first task held
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_attempt_of_a_shared_owner_never_releases_its_other_tasks_hold() {
    support::init_tracing();
    let server = Server::start();
    let [blocker, other] = clients(&server).await;
    let proxy = support::proxy::Proxy::start(server.port()).await;
    let shared = support::client_at(proxy.url(), |b| b).await;
    let name = unique_name("fair-shared-owner");
    let key = blocker.fair_lock(&name).unwrap().key().to_owned();
    let held = blocker.fair_lock(&name).unwrap().lock().await.unwrap();
    let owner = Owner::new();
    let (granted, mut grants) = tokio::sync::mpsc::unbounded_channel();
    let mut tasks = Vec::new();
    for task in 0..2 {
        let lock = shared.fair_lock(&name).unwrap().with_owner(owner);
        let granted = granted.clone();
        tasks.push(tokio::spawn(async move {
            let outcome = lock.lock().await;
            let _ = granted.send((task, outcome.is_ok()));
            outcome
        }));
    }
    let in_line = || async { !queued(&server, &key).is_empty() };
    assert!(support::eventually_async(Duration::from_secs(2), in_line).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The first attempt after the release claims the grant; the second is cut.
    proxy.cut_at("EVALSHA", 1);
    held.unlock().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), proxy.cut_done())
        .await
        .expect("no second attempt was sent");
    let (first, ok) = tokio::time::timeout(Duration::from_secs(5), grants.recv())
        .await
        .expect("neither task was granted the lock")
        .unwrap();
    assert!(ok, "the first task failed");
    let first = tasks.remove(first).await.unwrap().unwrap();
    let second = tasks.remove(0);
    // Another client waits for the lock meanwhile.
    let other_lock = other.fair_lock(&name).unwrap();
    let behind = tokio::spawn(async move {
        other_lock
            .try_lock_with(LockOptions::new().wait(Duration::from_secs(10)))
            .await
    });
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert!(
        !first.is_lost(),
        "the first task was told its hold was lost"
    );
    assert!(
        !behind.is_finished(),
        "another client took the lock from the first task"
    );
    assert!(
        support::exists(&server, &key),
        "the first task's hold is gone from the server"
    );
    first.unlock().await.unwrap();
    if let Ok(Ok(Ok(guard))) = tokio::time::timeout(Duration::from_secs(10), second).await {
        guard.unlock().await.unwrap();
    }
    let behind = tokio::time::timeout(Duration::from_secs(40), behind).await;
    assert!(matches!(behind, Ok(Ok(Ok(Some(_))))), "{behind:?}");
}

/// A waiter granted the lock from the queue, whose claim is cut off with its connection (a
/// proxy drops the request and closes the connection), keeps its turn: its retry claims the
/// grant instead of passing it on to the waiter behind it (which was served first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_whose_claim_is_cut_keeps_its_turn() {
    support::init_tracing();
    let server = Server::start();
    let [holder, second] = clients(&server).await;
    let proxy = support::proxy::Proxy::start(server.port()).await;
    // A client that wants replica acknowledgement (none here, so no `WAIT` is sent) claims a
    // grant with an attempt, never from its message alone: the attempt the proxy cuts.
    let replicas = redlease::Replicas::Auto {
        timeout: Duration::from_millis(100),
    };
    let first = support::client_at(proxy.url(), |b| b.replicas(replicas)).await;
    let name = unique_name("fair-cut-claim");
    let key = holder.fair_lock(&name).unwrap().key().to_owned();
    let held = holder.fair_lock(&name).unwrap().lock().await.unwrap();
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (who, client) in [("first", &first), ("second", &second)] {
        let (lock, order) = (client.fair_lock(&name).unwrap(), order.clone());
        tasks.push(tokio::spawn(async move {
            let guard = lock.lock().await.unwrap();
            order.lock().unwrap().push(who);
            tokio::time::sleep(Duration::from_millis(100)).await;
            guard.unlock().await.unwrap();
        }));
        let n = tasks.len();
        let in_line = || async { queued(&server, &key).len() == n };
        assert!(
            support::eventually_async(Duration::from_secs(2), in_line).await,
            "{who} never queued"
        );
    }
    proxy.cut_at("EVALSHA", 0);
    held.unlock().await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), proxy.cut_done())
        .await
        .expect("the first waiter never claimed its grant");
    assert!(
        order.lock().unwrap().is_empty(),
        "the cut request was not a claim"
    );
    for task in tasks {
        let done = tokio::time::timeout(Duration::from_secs(15), task).await;
        assert!(matches!(done, Ok(Ok(()))), "a waiter never got the lock");
    }
    assert_eq!(*order.lock().unwrap(), ["first", "second"]);
}
