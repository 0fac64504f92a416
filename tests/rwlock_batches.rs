//! `ReadWriteLock` under load: one client's concurrent calls leave as batches of one script call
//! (`lua/rwlock.lua` reads and writes each lock once per batch, keeping a count and bounds of
//! the readers and intents instead of reading the whole hash). What must hold: readers never
//! beside a writer, writers alone (a non-atomic counter under the write lock), the counts and
//! bounds exact after expiries, nothing left behind, and a batch entry's error its own.

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use redis::Commands;
use redlease::{LockOptions, Owner};
use support::{Server, clients, unique_name};

fn fields(server: &Server, key: &str) -> HashMap<String, String> {
    redis::cmd("HGETALL")
        .arg(key)
        .query(&mut server.conn())
        .unwrap()
}

fn script_calls(server: &Server) -> u64 {
    support::command_calls(server, "evalsha") + support::command_calls(server, "eval")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_readers_and_writers_exclude_and_leave_nothing() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("rw-batches");
    let counter_key = format!("{name}:counter");
    // > 0: readers inside; -1: a writer inside.
    let inside = Arc::new(AtomicI64::new(0));
    let (tasks, rounds) = (48usize, 40usize);
    let before = script_calls(&server);
    let mut set = tokio::task::JoinSet::new();
    for task in 0..tasks {
        let rw = [&a, &b][task % 2].read_write_lock(&name).unwrap();
        let (inside, counter_key, url) = (inside.clone(), counter_key.clone(), server.url());
        set.spawn(async move {
            let client = redis::Client::open(url).unwrap();
            let mut conn = client.get_multiplexed_async_connection().await.unwrap();
            let mut writes = 0u64;
            for round in 0..rounds {
                if (task + round) % 5 == 0 {
                    let guard = rw.write().lock().await.unwrap();
                    assert_eq!(
                        inside.swap(-1, Ordering::SeqCst),
                        0,
                        "a writer beside others"
                    );
                    let n: Option<u64> = redis::AsyncCommands::get(&mut conn, &counter_key)
                        .await
                        .unwrap();
                    tokio::task::yield_now().await;
                    let _: () =
                        redis::AsyncCommands::set(&mut conn, &counter_key, n.unwrap_or(0) + 1)
                            .await
                            .unwrap();
                    assert_eq!(inside.swap(0, Ordering::SeqCst), -1);
                    guard.unlock().await.unwrap();
                    writes += 1;
                } else {
                    let guard = rw.read().lock().await.unwrap();
                    assert!(
                        inside.fetch_add(1, Ordering::SeqCst) >= 0,
                        "a reader beside a writer"
                    );
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.unlock().await.unwrap();
                }
            }
            writes
        });
    }
    let mut writes = 0;
    while let Some(done) = set.join_next().await {
        writes += done.unwrap();
    }
    let counted: u64 = server.conn().get(&counter_key).unwrap();
    assert_eq!(
        counted, writes,
        "writes lost: not alone under the write lock"
    );
    let rw = a.read_write_lock(&name).unwrap();
    // The last reader out releases the shared read hold.
    let gone = || !support::exists(&server, rw.key());
    assert!(
        support::eventually(Duration::from_secs(1), gone),
        "left behind: {:?}",
        fields(&server, rw.key())
    );
    // Coalesced: fewer script calls than requests (sent alone, every acquisition and release
    // would be a call of its own, and every refused attempt one more).
    let calls = script_calls(&server) - before;
    let requests = 2 * (tasks * rounds) as u64;
    assert!(
        calls < requests,
        "{calls} script calls for {requests} requests"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_readers_leave_the_counts_exact() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("rw-counts");
    let once = || LockOptions::new().wait(Duration::ZERO);
    // Three readers that crash with 200 ms leases, one that holds for 30 s.
    for _ in 0..3 {
        let crashed = a.read_write_lock(&name).unwrap().with_owner(Owner::new());
        let reading = crashed.read();
        let guard = reading.try_lock_with(once().lease(Duration::from_millis(200)));
        std::mem::forget(guard.await.unwrap().unwrap());
    }
    let alive = a.read_write_lock(&name).unwrap().with_owner(Owner::new());
    let held = alive
        .read()
        .try_lock_with(once().lease(Duration::from_secs(30)))
        .await
        .unwrap()
        .unwrap();
    let key = alive.key().to_string();
    assert_eq!(fields(&server, &key)["rn"], "4");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let writer = b.read_write_lock(&name).unwrap();
    assert!(
        writer.write().try_lock().await.unwrap().is_none(),
        "a writer beside a live reader"
    );
    // That call dropped the crashed readers and made the bounds exact.
    let after = fields(&server, &key);
    let readers = after.keys().filter(|f| f.starts_with("r:")).count();
    let deadlines: Vec<u64> = after
        .iter()
        .filter(|(f, _)| f.starts_with("rd:"))
        .map(|(_, d)| d.parse().unwrap())
        .collect();
    assert_eq!((readers, deadlines.len()), (1, 1), "{after:?}");
    assert_eq!(after["rn"], "1");
    assert_eq!(after["rlo"], deadlines[0].to_string());
    assert_eq!(after["rhi"], deadlines[0].to_string());
    held.unlock().await.unwrap();
    let w = writer
        .write()
        .try_lock()
        .await
        .unwrap()
        .expect("free after the last reader");
    let with_writer = fields(&server, &key);
    assert!(
        !with_writer.contains_key("rn") && !with_writer.keys().any(|f| f.starts_with("r:")),
        "{with_writer:?}"
    );
    w.unlock().await.unwrap();
    assert!(!support::exists(&server, &key));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_of_a_batch_fails_alone() {
    support::init_tracing();
    let server = Server::start();
    let [a, _] = clients(&server).await;
    let (good, bad) = (unique_name("batch-good"), unique_name("batch-bad"));
    let sem = a.semaphore(&good).unwrap();
    sem.set_permits(1000).await.unwrap();
    let (bad_sem, bad_rw) = (a.semaphore(&bad).unwrap(), a.read_write_lock(&bad).unwrap());
    let _: () = server
        .conn()
        .rpush(bad_sem.key(), "not a semaphore")
        .unwrap();
    let _: () = server.conn().set(bad_rw.key(), "not a lock").unwrap();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..64 {
        let (sem, bad_sem, bad_rw) = (sem.clone(), bad_sem.clone(), bad_rw.clone());
        let rw = a.read_write_lock(&good).unwrap();
        set.spawn(async move {
            match i % 4 {
                0 => sem.acquire().await.map(drop).map_err(|e| e.to_string()),
                1 => bad_sem
                    .release(1)
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string()),
                2 => bad_rw
                    .read()
                    .try_lock()
                    .await
                    .map(drop)
                    .map_err(|e| e.to_string()),
                _ => match rw.read().try_lock().await {
                    Ok(Some(g)) => g.unlock().await.map_err(|e| e.to_string()),
                    Ok(None) => Err("refused".into()),
                    Err(e) => Err(e.to_string()),
                },
            }
            .map_err(|e| (i, e))
        });
    }
    let mut refused = 0;
    while let Some(done) = set.join_next().await {
        match done.unwrap() {
            Ok(()) => {}
            Err((i, e)) if i % 4 == 1 || i % 4 == 2 => {
                assert!(e.contains("WRONGTYPE"), "entry {i}: {e}");
                refused += 1;
            }
            Err((i, e)) => panic!("entry {i} failed with its batch: {e}"),
        }
    }
    assert_eq!(refused, 32, "a key of another type was used");
    assert_eq!(sem.available().await.unwrap(), 1000 - 16);
}
