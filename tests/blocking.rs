//! The blocking API: thread-based reentrancy, exclusion between threads, drop releases.

mod support;

use redlease::LockOptions;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use redlease::blocking::Client;
use support::{Server, read_counter, unique_name};

#[test]
fn same_thread_reenters_other_thread_is_excluded() {
    let server = Server::start();
    let client = Client::connect(&server.url()).unwrap();
    let lock = client.lock(&unique_name("blocking")).unwrap();
    let g1 = lock.lock().unwrap();
    let g2 = lock.lock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 2);
    let other = lock.clone();
    let excluded = std::thread::spawn(move || other.try_lock().unwrap().is_none())
        .join()
        .unwrap();
    assert!(excluded, "another thread is another owner");
    g2.unlock().unwrap();
    assert_eq!(lock.hold_count().unwrap(), 1);
    g1.unlock().unwrap();
    assert!(!lock.is_locked().unwrap());
}

#[test]
fn dropping_guard_then_client_leaves_nothing_behind() {
    let server = Server::start();
    let name = unique_name("blocking-drop");
    for _ in 0..10 {
        let client = Client::connect(&server.url()).unwrap();
        let lock = client.lock(&name).unwrap();
        let _guard = lock.lock().unwrap();
        // guard, then lock and client, dropped here: the release must not die with the runtime
    }
    let probe = Client::connect(&server.url()).unwrap();
    assert!(!probe.lock(&name).unwrap().is_locked().unwrap());
}

#[test]
fn threads_exclude_each_other_on_a_shared_counter() {
    let server = Server::start();
    let client = Client::connect(&server.url()).unwrap();
    let name = unique_name("blocking-counter");
    let counter_key = format!("{name}:counter");
    let inside = Arc::new(AtomicU32::new(0));
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let lock = client.lock(&name).unwrap();
            let url = server.url();
            let key = counter_key.clone();
            let inside = inside.clone();
            std::thread::spawn(move || {
                let mut conn = redis::Client::open(url).unwrap().get_connection().unwrap();
                for _ in 0..25 {
                    let guard = lock
                        .try_lock_with(LockOptions::new().wait(Duration::from_secs(10)))
                        .unwrap()
                        .expect("acquired");
                    assert_eq!(
                        inside.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two threads inside"
                    );
                    let value: Option<u64> = redis::cmd("GET").arg(&key).query(&mut conn).unwrap();
                    redis::cmd("SET")
                        .arg(&key)
                        .arg(value.unwrap_or(0) + 1)
                        .exec(&mut conn)
                        .unwrap();
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.unlock().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(read_counter(&server, &counter_key), 100);
}

#[test]
#[should_panic(expected = "inside an async context")]
fn blocking_call_inside_a_runtime_panics_with_a_clear_message() {
    let server = Server::start();
    let client = Client::connect(&server.url()).unwrap();
    let lock = client.lock("inside-runtime").unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let _ = lock.try_lock();
    });
}
