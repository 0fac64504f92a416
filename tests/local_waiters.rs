//! Many waiters in one client (semaphores, read-write locks): a release wakes only the waiters
//! it lets in, not the whole herd, and all the waiters it lets in come in at once, not at
//! their nap.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use support::{Server, client, command_calls, unique_name};

/// 24 tasks of one client take turns on one permit. Woken all together, every release sent
/// each remaining waiter to the server, nearly all to be refused: ~24 × 25 / 2 = 300 refused
/// attempts on top of the 48 calls that acquire and release. Relay waiters send one attempt per
/// release and two more per grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_one_local_waiter_not_the_herd() {
    support::init_tracing();
    let server = Server::start();
    let client = client(&server).await;
    let semaphore = client.semaphore(&unique_name("relay")).unwrap();
    assert!(semaphore.try_set_permits(1).await.unwrap());
    semaphore.acquire().await.unwrap();

    const TASKS: usize = 24;
    let holders = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (semaphore, holders, done) = (semaphore.clone(), holders.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            semaphore.acquire().await.unwrap();
            assert_eq!(
                holders.fetch_add(1, Ordering::SeqCst),
                0,
                "two holders of one permit"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
            holders.fetch_sub(1, Ordering::SeqCst);
            semaphore.release(1).await.unwrap();
            done.fetch_add(1, Ordering::SeqCst);
        }));
    }
    // Every task has tried once and waits.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = command_calls(&server, "evalsha");
    semaphore.release(1).await.unwrap();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(30), task)
            .await
            .expect("every waiter got the permit in time")
            .unwrap();
    }
    let calls = command_calls(&server, "evalsha") - before;
    assert_eq!(done.load(Ordering::SeqCst), TASKS);
    // 1 release + 24 × (acquire + release) = 49; relay turns add ≤ 3 per grant.
    assert!(
        calls <= 49 + 3 * TASKS as u64,
        "{calls} script calls for {TASKS} hand-overs: the herd was woken"
    );
}

/// 16 local readers wait for a writer. Its release lets them all in at once: sharing one
/// hold (watchdog leases), or each in its own name (fixed leases, all granted by the release).
/// A reader left to find out by itself would sleep until its nap (a second).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_released_by_a_writer_all_come_in_at_once() {
    for fixed in [false, true] {
        readers_released_by_a_writer(fixed).await;
    }
}

async fn readers_released_by_a_writer(fixed: bool) {
    support::init_tracing();
    let server = Server::start();
    let client = client(&server).await;
    let rw = client.read_write_lock(&unique_name("readers-rw")).unwrap();
    let writer = rw.write().lock().await.unwrap();

    const READERS: usize = 16;
    let mut readers = Vec::new();
    for _ in 0..READERS {
        let rw = rw.clone().with_owner(redlease::Owner::new());
        readers.push(tokio::spawn(async move {
            // Held until the test ends: every reader is granted alongside the others.
            let guard = match fixed {
                true => {
                    let options = redlease::LockOptions::new().lease(Duration::from_secs(30));
                    rw.read().lock_with(options).await.unwrap()
                }
                false => rw.read().lock().await.unwrap(),
            };
            (Instant::now(), guard)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    writer.unlock().await.unwrap();
    let mut guards = Vec::new();
    let mut last = Duration::ZERO;
    for reader in readers {
        let (at, guard) = tokio::time::timeout(Duration::from_secs(10), reader)
            .await
            .expect("every reader got in")
            .unwrap();
        last = last.max(at.saturating_duration_since(released));
        guards.push(guard);
    }
    assert!(
        last < Duration::from_millis(600),
        "the last reader got in {last:?} after the writer left: it waited for its nap (1 s)"
    );
    for guard in guards {
        guard.unlock().await.unwrap();
    }
}
