//! One client's concurrent acquire and release calls leave as one script call (`src/node/calls/batch.rs`):
//! it happens, the locks stay exclusive, an error stays with its own caller, and neither a
//! cancelled caller, a frozen server nor a restart leaves anything behind.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redlease::{Client, Error};
use support::{
    Server, client, client_with, command_calls, exists, get_string, increment_unprotected,
    join_within, key_of, read_counter, set_string, take_and_release, unique_name, unique_names,
    until_gone,
};

const TASKS: usize = 64;
const ROUNDS: usize = 20;

/// `TASKS` tasks of `client`, task `i` locking `names[i % names.len()]` `ROUNDS` times and
/// incrementing that name's counter (`<name>:count`) unprotected by anything but the lock.
async fn run_tasks(client: &Client, names: &[String]) {
    let mut tasks = Vec::new();
    for i in 0..TASKS {
        let (client, name) = (client.clone(), names[i % names.len()].clone());
        tasks.push(tokio::spawn(async move {
            let lock = client.lock(&name).unwrap();
            let counter = format!("{name}:count");
            for _ in 0..ROUNDS {
                let guard = lock.lock().await.unwrap();
                increment_unprotected(&client, &counter).await;
                guard.unlock().await.unwrap();
            }
        }));
    }
    join_within(tasks, Duration::from_secs(60), "a task did not finish").await;
}

/// Every lock of `names` is released on the server within 5 s (a grant nobody holds is given
/// back in the background).
async fn assert_released(server: &Server, names: &[String]) {
    for name in names {
        let servers = std::slice::from_ref(server);
        let gone = until_gone(servers, &key_of(name), Duration::from_secs(5)).await;
        assert!(gone, "`{name}` left held");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_share_script_calls_and_every_count_is_exact() {
    support::init_tracing();
    let server = Server::start();
    let client = client(&server).await;
    // A key per task: without coalescing, exactly two script calls per lock+unlock pair.
    let names = unique_names("own", TASKS);
    let before = command_calls(&server, "evalsha");
    run_tasks(&client, &names).await;
    let calls = command_calls(&server, "evalsha") - before;
    let pairs = (TASKS * ROUNDS) as u64;
    eprintln!("{pairs} lock+unlock pairs took {calls} script calls");
    assert!(
        calls <= pairs,
        "{calls} script calls for {pairs} pairs: no coalescing"
    );
    for name in &names {
        assert_eq!(
            read_counter(&server, &format!("{name}:count")),
            ROUNDS as u64
        );
        assert!(!exists(&server, &key_of(name)), "`{name}` left held");
    }
    assert_eq!(client.held_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalesced_calls_keep_contended_locks_exclusive() {
    support::init_tracing();
    let server = Server::start();
    let client = client(&server).await;
    // Eight tasks on each of eight locks: waiting, hand-overs and batches all at once.
    let names = unique_names("shared", 8);
    run_tasks(&client, &names).await;
    let per_lock = (TASKS / names.len() * ROUNDS) as u64;
    for name in &names {
        let count = read_counter(&server, &format!("{name}:count"));
        assert_eq!(count, per_lock, "`{name}`: lost updates");
        assert!(!exists(&server, &key_of(name)), "`{name}` left held");
    }
}

#[tokio::test]
async fn a_key_of_another_type_fails_only_its_own_caller_in_a_batch() {
    let server = Server::start();
    let client = client(&server).await;
    let text = unique_name("text");
    set_string(&server, &key_of(&text), "x");
    let names = unique_names("fine", 16);
    // Scripts loaded, so that every acquisition below is one call or part of one.
    take_and_release(&client.lock(&names[0]).unwrap()).await;
    // On this one-thread runtime the first call goes out alone and the others, made while it
    // is in flight, are sent together.
    let before = command_calls(&server, "evalsha");
    let mut tasks = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let name = if i % 4 == 2 {
            text.clone()
        } else {
            name.clone()
        };
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let outcome = client.lock(&name).unwrap().try_lock().await;
            (name, outcome)
        }));
    }
    let mut held = Vec::new();
    for task in tasks {
        let (name, outcome) = task.await.unwrap();
        match outcome {
            Err(Error::WrongType { key }) => {
                assert_eq!(name, text, "only the string's callers fail");
                assert_eq!(key, key_of(&text));
            }
            Ok(Some(guard)) => {
                assert_eq!(guard.name(), name);
                held.push(guard);
            }
            other => panic!("`{name}`: {other:?}"),
        }
    }
    let calls = command_calls(&server, "evalsha") - before;
    assert!(calls <= 2, "{calls} script calls for 16 acquisitions");
    assert_eq!(held.len(), 12, "every other caller got its lock");
    assert_eq!(get_string(&server, &key_of(&text)).as_deref(), Some("x"));
    let held: Vec<String> = held.into_iter().map(|g| g.name().to_owned()).collect();
    // The guards are dropped: released in the background.
    assert_released(&server, &held).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn callers_cancelled_inside_a_batch_leave_nothing_behind() {
    support::init_tracing();
    let server = Server::start();
    let client = client(&server).await;
    let names = unique_names("cancelled", 32);
    for round in 0..10 {
        let mut tasks = Vec::new();
        for name in &names {
            let lock = client.lock(name).unwrap();
            tasks.push(tokio::spawn(async move {
                let guard = lock.lock().await;
                // Held for long, so a grant still held at the end was not given back.
                tokio::time::sleep(Duration::from_secs(60)).await;
                drop(guard);
            }));
        }
        // Abort the tasks while their calls are queued, sent, or just answered.
        tokio::time::sleep(Duration::from_micros(100 * round)).await;
        for task in &tasks {
            task.abort();
        }
        for task in tasks {
            let _ = task.await;
        }
    }
    assert_released(&server, &names).await;
    assert_eq!(client.held_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_grants_that_come_after_the_callers_gave_up_are_given_back() {
    support::init_tracing();
    let server = Server::start();
    let client = client_with(&server, |b| b.timeout(Duration::from_millis(500))).await;
    let names = unique_names("paused", 16);
    // Scripts loaded, so the calls below are the acquisitions alone.
    take_and_release(&client.lock(&names[0]).unwrap()).await;
    // Every command waits 1.5 s: the calls (one alone, the rest batched) time out first.
    server.client_pause(1500, true);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for name in &names {
        let lock = client.lock(name).unwrap();
        tasks.push(tokio::spawn(async move {
            lock.try_lock().await.map(|g| g.is_some())
        }));
    }
    for task in tasks {
        let outcome = task.await.unwrap();
        assert!(matches!(outcome, Err(Error::Timeout { .. })), "{outcome:?}");
    }
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(client.held_count(), 0);
    // The pause ends at 1.5 s and every queued acquisition runs then: all granted, and every
    // grant must be given back at once rather than block the lock for its 30 s lease.
    assert_released(&server, &names).await;
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    // And the owners take their locks normally afterwards, undisturbed by late give-backs.
    let mut guards = Vec::new();
    for name in &names {
        let guard = client.lock(name).unwrap().try_lock().await.unwrap();
        guards.push(guard.expect("free after the give-back"));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for name in &names {
        assert_eq!(
            client.lock(name).unwrap().hold_count().await.unwrap(),
            1,
            "`{name}`"
        );
    }
    for guard in guards {
        guard.unlock().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_calls_recover_from_a_server_restart() {
    support::init_tracing();
    let mut server = Server::start();
    let client = client_with(&server, |b| b.timeout(Duration::from_millis(500))).await;
    let names = unique_names("restart", 32);
    let restarted = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for name in &names {
        let (lock, restarted) = (client.lock(name).unwrap(), restarted.clone());
        tasks.push(tokio::spawn(async move {
            // Lock/unlock pairs until 20 have completed after the restart; failures while the
            // server is down (or its connection is being replaced) are expected.
            let (mut after, mut failures) = (0, 0);
            let deadline = Instant::now() + Duration::from_secs(20);
            while after < 20 && Instant::now() < deadline {
                let outcome = match lock.lock().await {
                    Ok(guard) => guard.unlock().await,
                    Err(e) => Err(e),
                };
                match outcome {
                    Ok(()) if restarted.load(Ordering::Acquire) => after += 1,
                    Ok(()) => {}
                    Err(e) => {
                        assert!(e.is_unavailable() || e.is_lease_lost(), "{e:?}");
                        failures += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
            (after, failures)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.kill();
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.restart();
    restarted.store(true, Ordering::Release);
    let mut failures = 0;
    for (task, name) in tasks.into_iter().zip(&names) {
        let (after, failed) = task.await.unwrap();
        assert_eq!(after, 20, "`{name}` made {after} pairs after the restart");
        failures += failed;
    }
    eprintln!("{failures} failed pairs around the restart");
    assert_eq!(client.held_count(), 0);
    for name in &names {
        assert!(!exists(&server, &key_of(name)), "`{name}` left held");
    }
}
