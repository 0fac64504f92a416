//! Mutual exclusion under contention: tasks, clients and OS processes incrementing a counter
//! with a non-atomic GET/SET, a holder process killed with SIGKILL, and no leftovers after a
//! storm of lock/unlock.
//!
//! The multi-process tests re-run this test binary as children that execute only the
//! `#[ignore]`d `worker_process` test, configured through `REDLEASE_WORKER*` variables.

mod support;

use redlease::LockOptions;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redlease::Client;
use support::{
    Server, channels, client, clients, connect, increment_unprotected, join_within, read_counter,
    unique_name, unique_names, until_no_channels,
};

const WORKER_LEASE: Duration = Duration::from_secs(1);
const LOCKED_MARKER: &str = "REDLEASE-WORKER-LOCKED";

/// `rounds` times: lock, increment the counter unprotected by anything but the lock, unlock.
/// Without exclusion the counter ends short.
async fn increment(client: &Client, name: &str, counter: &str, rounds: usize) {
    let lock = client.lock(name).unwrap();
    for _ in 0..rounds {
        let guard = lock.lock().await.unwrap();
        increment_unprotected(client, counter).await;
        guard.unlock().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_clients_increment_a_counter_exactly_1600_times() {
    support::init_tracing();
    let server = Server::start();
    let name = unique_name("counter");
    let counter = unique_name("count");
    let start = Instant::now();
    let mut clients = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let c = client(&server).await;
        clients.push(c.clone());
        let (name, counter) = (name.clone(), counter.clone());
        tasks.push(tokio::spawn(async move {
            increment(&c, &name, &counter, 100).await
        }));
    }
    join_within(
        tasks,
        Duration::from_secs(60),
        "a client did not finish its 100 rounds within 60 s",
    )
    .await;
    eprintln!("16 x 100 rounds took {:?}", start.elapsed());
    assert_eq!(read_counter(&server, &counter), 1600);
    for c in &clients {
        assert_eq!(c.held_count(), 0);
    }
}

fn spawn_worker(envs: &[(&str, String)], stdout: Stdio) -> Child {
    support::workers::spawn_worker("worker_process", envs, stdout)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_processes_increment_a_counter_exactly_1600_times() {
    let server = Server::start();
    let name = unique_name("proc-counter");
    let counter = unique_name("proc-count");
    let start = Instant::now();
    let children: Vec<Child> = (0..4)
        .map(|_| {
            spawn_worker(
                &[
                    ("REDLEASE_WORKER", "count".into()),
                    ("REDLEASE_WORKER_URL", server.url()),
                    ("REDLEASE_WORKER_NAME", name.clone()),
                    ("REDLEASE_WORKER_COUNTER", counter.clone()),
                    ("REDLEASE_WORKER_CLIENTS", "4".into()),
                    ("REDLEASE_WORKER_ROUNDS", "100".into()),
                ],
                Stdio::null(),
            )
        })
        .collect();
    let statuses = tokio::task::spawn_blocking(move || {
        children
            .into_iter()
            .map(|mut child| support::workers::wait_child(&mut child, Duration::from_secs(90)))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    eprintln!(
        "4 processes x 4 clients x 100 rounds took {:?}",
        start.elapsed()
    );
    for status in statuses {
        assert!(status.success(), "a worker failed: {status}");
    }
    assert_eq!(read_counter(&server, &counter), 1600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_holder_process_frees_the_lock_within_one_lease() {
    let server = Server::start();
    let name = unique_name("sigkill");
    let mut child = spawn_worker(
        &[
            ("REDLEASE_WORKER", "hold".into()),
            ("REDLEASE_WORKER_URL", server.url()),
            ("REDLEASE_WORKER_NAME", name.clone()),
        ],
        Stdio::piped(),
    );
    let stdout = child.stdout.take().expect("piped stdout");
    let marker = tokio::task::spawn_blocking(move || {
        // Bounded: the child prints a few harness lines, then the marker.
        BufReader::new(stdout)
            .lines()
            .take(100)
            .map_while(Result::ok)
            .any(|line| line.trim() == LOCKED_MARKER)
    });
    let locked = tokio::time::timeout(Duration::from_secs(30), marker).await;
    if !matches!(locked, Ok(Ok(true))) {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the worker never reported holding the lock: {locked:?}");
    }

    let other = client(&server).await;
    let lock = other.lock(&name).unwrap();
    // Two leases: the child's watchdog keeps it, so it is still held.
    tokio::time::sleep(2 * WORKER_LEASE).await;
    let still_held = lock.try_lock().await.unwrap();
    if still_held.is_some() {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the child's lock was not kept by its watchdog");
    }

    child.kill().expect("SIGKILL the holder");
    child.wait().expect("reap the holder");
    let killed_at = Instant::now();
    let guard = lock
        .try_lock_with(LockOptions::new().wait(Duration::from_secs(5)))
        .await
        .unwrap()
        .expect("acquired after the holder died");
    let took = killed_at.elapsed();
    assert!(
        took <= WORKER_LEASE + Duration::from_millis(500),
        "acquired {took:?} after SIGKILL; the lease is {WORKER_LEASE:?}"
    );
    guard.unlock().await.unwrap();
}

/// 32 workers (4 clients x 8 tasks) x 1,000 lock/unlock over 5 names; afterwards no hold, no
/// key and no subscription remain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storm_of_32_workers_on_5_names_leaves_no_channel_and_no_hold() {
    support::init_tracing();
    let server = Server::start();
    let names = unique_names("storm", 5);
    let inside: Arc<Vec<AtomicBool>> = Arc::new((0..5).map(|_| AtomicBool::new(false)).collect());
    let clients = clients::<4>(&server).await;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for worker in 0..32 {
        let client = clients[worker % 4].clone();
        let (names, inside) = (names.clone(), inside.clone());
        tasks.push(tokio::spawn(async move {
            let locks: Vec<_> = names.iter().map(|n| client.lock(n).unwrap()).collect();
            for round in 0..1000 {
                let i = (worker + round) % 5;
                let guard = locks[i].lock().await.unwrap();
                assert!(
                    !inside[i].swap(true, Ordering::SeqCst),
                    "two holders of {} at once",
                    names[i]
                );
                // Stay inside across a suspension point, so another holder could run meanwhile.
                tokio::task::yield_now().await;
                inside[i].store(false, Ordering::SeqCst);
                guard.unlock().await.unwrap();
            }
        }));
    }
    join_within(
        tasks,
        Duration::from_secs(120),
        "a worker did not finish its 1,000 rounds",
    )
    .await;
    let took = start.elapsed();
    eprintln!(
        "32,000 lock/unlock took {took:?} ({:.0}/s)",
        32_000.0 / took.as_secs_f64()
    );
    for c in &clients {
        assert_eq!(c.held_count(), 0, "a hold survived the storm");
    }
    let clean = until_no_channels(&server, Duration::from_secs(3)).await;
    assert!(clean, "leftover channels: {:?}", channels(&server));
    for c in &clients {
        for n in &names {
            assert!(
                !c.lock(n).unwrap().is_locked().await.unwrap(),
                "{n} still locked"
            );
        }
    }
}

/// The child side of the multi-process tests. Does nothing unless `REDLEASE_WORKER` is set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "child process of the exclusion tests; does nothing unless REDLEASE_WORKER is set"]
async fn worker_process() {
    let Ok(mode) = std::env::var("REDLEASE_WORKER") else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("worker needs {k}"));
    let url = var("REDLEASE_WORKER_URL");
    let name = var("REDLEASE_WORKER_NAME");
    match mode.as_str() {
        "count" => {
            let counter = var("REDLEASE_WORKER_COUNTER");
            let clients: usize = var("REDLEASE_WORKER_CLIENTS").parse().unwrap();
            let rounds: usize = var("REDLEASE_WORKER_ROUNDS").parse().unwrap();
            let mut tasks = Vec::new();
            for _ in 0..clients {
                let c = connect(&url).await;
                let (name, counter) = (name.clone(), counter.clone());
                tasks.push(tokio::spawn(async move {
                    increment(&c, &name, &counter, rounds).await
                }));
            }
            for task in tasks {
                task.await.unwrap();
            }
        }
        "hold" => {
            let c = Client::builder(url)
                .watchdog_lease(WORKER_LEASE)
                .build()
                .await
                .unwrap();
            let guard = c.lock(&name).unwrap().lock().await.unwrap();
            println!("{LOCKED_MARKER}");
            // The parent kills us long before this; the bound only ends an orphan.
            tokio::time::sleep(Duration::from_secs(60)).await;
            guard.unlock().await.unwrap();
        }
        other => panic!("unknown worker mode {other}"),
    }
}
