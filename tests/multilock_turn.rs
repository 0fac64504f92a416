//! A MultiLock gets its turn while another process keeps a member busy: its members wait in
//! their locks' server queues like any waiter, one after another in one global order, so the
//! busy process's releases hand the member over to it; two MultiLocks over the same members in
//! opposite orders never deadlock; a MultiLock cancelled at any point leaves no entry and no
//! hold.
//!
//! The churning processes re-run this test binary as children that execute only the
//! `#[ignore]`d `churn_worker` test, configured through `REDLEASE_MT*` variables; each tells
//! its count of critical sections on stdout.

mod support;

use std::io::Read;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use redlease::{Client, LockOptions, MultiLock};
use support::workers::{self, wait_child};
use support::{Cluster, Server, unique_name};

/// Where the test runs: one server or a cluster, and how to reach it.
enum Target {
    One(Server),
    Cluster(Cluster),
}

impl Target {
    fn envs(&self) -> (&'static str, String) {
        match self {
            Target::One(server) => ("REDLEASE_MT_URL", server.url()),
            Target::Cluster(cluster) => ("REDLEASE_MT_SEEDS", cluster.seeds().join(",")),
        }
    }

    async fn client(&self) -> Client {
        match self {
            Target::One(server) => Client::connect(&server.url()).await.unwrap(),
            Target::Cluster(cluster) => Client::builder_cluster(cluster.seeds())
                .build()
                .await
                .unwrap(),
        }
    }
}

/// The names of one run: the busy member, the quiet one, the shared counter, the stop flag.
struct Names {
    busy: String,
    quiet: String,
    counter: String,
    stop: String,
}

impl Names {
    fn new(tag: &str) -> Names {
        Names {
            busy: unique_name(&format!("{tag}-busy")),
            quiet: unique_name(&format!("{tag}-quiet")),
            counter: unique_name(&format!("{tag}-counter")),
            stop: unique_name(&format!("{tag}-stop")),
        }
    }
}

fn spawn_churn(target: &Target, names: &Names, tasks: usize) -> Child {
    workers::spawn_worker(
        "churn_worker",
        &[
            target.envs(),
            ("REDLEASE_MT", "churn".into()),
            ("REDLEASE_MT_LOCK", names.busy.clone()),
            ("REDLEASE_MT_COUNTER", names.counter.clone()),
            ("REDLEASE_MT_STOP", names.stop.clone()),
            ("REDLEASE_MT_TASKS", tasks.to_string()),
        ],
        Stdio::piped(),
    )
}

/// Stops the churners and answers their critical sections, summed.
async fn stop_churn(client: &Client, names: &Names, children: Vec<Child>) -> u64 {
    client
        .query::<()>(redis::cmd("SET").arg(&names.stop).arg(1))
        .await
        .unwrap();
    tokio::task::spawn_blocking(move || {
        let mut total = 0;
        for mut child in children {
            let status = wait_child(&mut child, Duration::from_secs(60));
            assert!(status.success(), "a churner failed: {status}");
            let mut out = String::new();
            child
                .stdout
                .take()
                .unwrap()
                .read_to_string(&mut out)
                .unwrap();
            let line = out
                .lines()
                .find_map(|l| l.strip_prefix("sections "))
                .unwrap();
            total += line.trim().parse::<u64>().unwrap();
        }
        total
    })
    .await
    .unwrap()
}

async fn counter(client: &Client, key: &str) -> u64 {
    let value: Option<u64> = client.query(redis::cmd("GET").arg(key)).await.unwrap();
    value.unwrap_or(0)
}

/// The counter once more, non-atomically (read, pause, write): exact only under exclusion.
async fn increment(client: &Client, key: &str) {
    let value = counter(client, key).await;
    tokio::time::sleep(Duration::from_millis(2)).await;
    client
        .query::<()>(redis::cmd("SET").arg(key).arg(value + 1))
        .await
        .unwrap();
}

/// Waits until the churners have been through `n` critical sections (they are running).
async fn until_churning(client: &Client, names: &Names, n: u64) {
    for _ in 0..500 {
        if counter(client, &names.counter).await >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the churners never got going");
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

/// `processes` × `tasks` churn the busy member; a MultiLock over it and a quiet member, with a
/// 6 s wait, gets through every time (it used to time out behind 4 churning tasks), within 10×
/// a plain waiter's median; the counter, updated by both sides under the lock, is exact.
async fn a_multilock_gets_its_turn_behind_churn(target: Target, processes: usize, tasks: usize) {
    let names = Names::new("turn");
    let client = target.client().await;
    let children: Vec<Child> = (0..processes)
        .map(|_| spawn_churn(&target, &names, tasks))
        .collect();
    until_churning(&client, &names, 20).await;
    let multi = MultiLock::new(vec![
        client.lock(&names.busy).unwrap(),
        client.lock(&names.quiet).unwrap(),
    ])
    .unwrap();
    let plain = client.lock(&names.busy).unwrap();
    let wait = LockOptions::new().wait(Duration::from_secs(6));
    let (mut multi_waits, mut plain_waits, mut ours) = (Vec::new(), Vec::new(), 0);
    for _ in 0..5 {
        let started = Instant::now();
        let held = multi.try_lock_with(wait).await.unwrap();
        let held = held.expect("the MultiLock got its turn within its wait");
        multi_waits.push(started.elapsed());
        increment(&client, &names.counter).await;
        ours += 1;
        held.unlock().await.unwrap();

        let started = Instant::now();
        let held = plain
            .try_lock_with(wait)
            .await
            .unwrap()
            .expect("a plain waiter");
        plain_waits.push(started.elapsed());
        increment(&client, &names.counter).await;
        ours += 1;
        held.unlock().await.unwrap();
    }
    let theirs = stop_churn(&client, &names, children).await;
    let (multi_median, plain_median) = (median(multi_waits), median(plain_waits));
    eprintln!(
        "{processes} x {tasks} churning: MultiLock median wait {multi_median:?}, plain waiter \
         {plain_median:?}"
    );
    assert_eq!(
        counter(&client, &names.counter).await,
        theirs + ours,
        "mutual exclusion"
    );
    assert!(
        multi_median <= plain_median * 10 + Duration::from_millis(20),
        "MultiLock {multi_median:?} against a plain waiter's {plain_median:?}"
    );
    client.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multilock_gets_its_turn_behind_a_busy_process() {
    a_multilock_gets_its_turn_behind_churn(Target::One(Server::start()), 1, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multilock_gets_its_turn_behind_eight_busy_processes() {
    a_multilock_gets_its_turn_behind_churn(Target::One(Server::start()), 8, 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multilock_gets_its_turn_behind_a_busy_process_on_a_cluster() {
    a_multilock_gets_its_turn_behind_churn(Target::Cluster(Cluster::start()), 1, 4).await;
}

/// Two MultiLocks (two clients) over the same members given in opposite orders, each taken 15
/// times while a process churns one member: both finish (no deadlock: members are awaited in
/// one global order whatever the given one), and the counter is exact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_multilocks_under_churn_never_deadlock() {
    let target = Target::One(Server::start());
    let names = Names::new("opposite");
    let client = target.client().await;
    let children = vec![spawn_churn(&target, &names, 4)];
    until_churning(&client, &names, 20).await;
    let mut tasks = Vec::new();
    for reversed in [false, true] {
        let client = target.client().await;
        let (mut a, mut b) = (names.busy.clone(), names.quiet.clone());
        if reversed {
            std::mem::swap(&mut a, &mut b);
        }
        let counter_key = names.counter.clone();
        tasks.push(tokio::spawn(async move {
            let multi =
                MultiLock::new(vec![client.lock(&a).unwrap(), client.lock(&b).unwrap()]).unwrap();
            for _ in 0..15 {
                let held = multi.lock().await.unwrap();
                increment(&client, &counter_key).await;
                held.unlock().await.unwrap();
            }
            client.shutdown().await.unwrap();
        }));
    }
    support::join_within(tasks, Duration::from_secs(60), "both MultiLocks finish").await;
    let theirs = stop_churn(&client, &names, children).await;
    assert_eq!(counter(&client, &names.counter).await, theirs + 30);
    client.shutdown().await.unwrap();
}

/// MultiLock acquisitions cut short at varying points while a process churns one member:
/// afterwards neither member is held and neither queue has an entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_multilocks_leave_no_entry_and_no_hold() {
    let server = Server::start();
    let target = Target::One(server);
    let names = Names::new("cancel");
    let client = target.client().await;
    let children = vec![spawn_churn(&target, &names, 4)];
    until_churning(&client, &names, 20).await;
    let multi = MultiLock::new(vec![
        client.lock(&names.busy).unwrap(),
        client.lock(&names.quiet).unwrap(),
    ])
    .unwrap();
    let mut got = 0;
    for i in 0..40u64 {
        let budget = Duration::from_micros(200 + (i * 1_237) % 20_000);
        if let Ok(held) = tokio::time::timeout(budget, multi.lock()).await {
            got += 1;
            held.unwrap().unlock().await.unwrap();
        }
    }
    eprintln!("{got} of 40 cut-short MultiLocks got through");
    let _ = stop_churn(&client, &names, children).await;
    let Target::One(server) = &target else {
        unreachable!()
    };
    let settled = support::eventually(Duration::from_secs(5), || {
        [&names.busy, &names.quiet].iter().all(|name| {
            let key = support::key_of(name);
            !support::exists(server, &key)
                && !support::exists(server, &format!("{key}:q"))
                && !support::exists(server, &format!("{key}:qd"))
        })
    });
    assert!(settled, "a member held or an entry left behind");
    assert_eq!(client.held_count(), 0);
    client.shutdown().await.unwrap();
}

/// The child side: `REDLEASE_MT_TASKS` tasks take the lock, update the counter under it with
/// 5 ms of work, release, and go again at once, until the stop flag is set (at most 60 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of the MultiLock turn tests; does nothing unless REDLEASE_MT is set"]
async fn churn_worker() {
    if std::env::var("REDLEASE_MT").is_err() {
        return;
    }
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("worker needs {k}"));
    let client = match std::env::var("REDLEASE_MT_SEEDS") {
        Ok(seeds) => Client::builder_cluster(seeds.split(','))
            .build()
            .await
            .unwrap(),
        Err(_) => Client::connect(&var("REDLEASE_MT_URL")).await.unwrap(),
    };
    let tasks: usize = var("REDLEASE_MT_TASKS").parse().unwrap();
    let (counter_key, stop) = (var("REDLEASE_MT_COUNTER"), var("REDLEASE_MT_STOP"));
    let lock = client.lock(&var("REDLEASE_MT_LOCK")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut running = Vec::new();
    for _ in 0..tasks {
        let (client, lock) = (client.clone(), lock.clone());
        let (counter_key, stop) = (counter_key.clone(), stop.clone());
        running.push(tokio::spawn(async move {
            let mut sections = 0u64;
            while Instant::now() < deadline {
                let stopped: bool = client.query(redis::cmd("EXISTS").arg(&stop)).await.unwrap();
                if stopped {
                    break;
                }
                let held = lock.lock().await.unwrap();
                let value = counter(&client, &counter_key).await;
                tokio::time::sleep(Duration::from_millis(5)).await;
                client
                    .query::<()>(redis::cmd("SET").arg(&counter_key).arg(value + 1))
                    .await
                    .unwrap();
                held.unlock().await.unwrap();
                sections += 1;
            }
            sections
        }));
    }
    let mut total = 0;
    for task in running {
        total += task.await.unwrap();
    }
    println!("sections {total}");
    client.shutdown().await.unwrap();
}
