//! `Guard`: one trait over every hold, so one collection can keep and release any of them.

mod support;

use std::time::{Duration, Instant};

use redlease::Guard;
use support::{Server, unique_name};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_is_a_guard() {
    support::init_tracing();
    let server = Server::start();
    let client = support::client(&server).await;
    let name = unique_name("guards");
    let permits = client.permit_semaphore(&name).unwrap();
    permits.set_permits(1).await.unwrap();
    let lock = client.lock(&name).unwrap().fenced(true);
    let rw = client.read_write_lock(&format!("{name}-rw")).unwrap();
    let held: Vec<Box<dyn Guard>> = vec![
        Box::new(lock.lock().await.unwrap()),
        Box::new(rw.write().lock().await.unwrap()),
        Box::new(rw.read().lock().await.unwrap()),
        Box::new(permits.acquire().await.unwrap()),
    ];
    let names: Vec<&str> = held.iter().map(|g| g.name()).collect();
    assert_eq!(names, [name.as_str(), rw.name(), rw.name(), name.as_str()]);
    assert!(held[0].fencing_token().is_some());
    assert!(held[1].fencing_token().is_none());
    for guard in &held {
        assert!(!guard.is_lost());
        assert!(guard.valid_until() > Instant::now() + Duration::from_secs(20));
        let lost = tokio::time::timeout(Duration::from_millis(20), guard.lost()).await;
        assert!(lost.is_err(), "{} reported lost", guard.name());
    }
    for guard in held {
        guard.unlock().await.unwrap();
    }
    assert!(!support::exists(&server, lock.key()));
    assert!(!support::exists(&server, rw.key()));
    assert_eq!(permits.available().await.unwrap(), 1);
}

/// `Client::shutdown` gives back every kind of hold still guarded, at once: another client can
/// take each right after (without waiting out a 30 s lease), and the family's guards report
/// themselves lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_gives_back_every_kind_of_hold() {
    let server = Server::start();
    let (client, other) = (
        support::client(&server).await,
        support::client(&server).await,
    );
    let name = unique_name("shutdown");
    let permits = client.permit_semaphore(&name).unwrap();
    permits.set_permits(1).await.unwrap();
    let (rw_name, fair_name) = (format!("{name}-rw"), format!("{name}-fair"));
    let held: Vec<Box<dyn Guard>> = vec![
        Box::new(client.lock(&name).unwrap().lock().await.unwrap()),
        Box::new(
            client
                .read_write_lock(&rw_name)
                .unwrap()
                .write()
                .lock()
                .await
                .unwrap(),
        ),
        Box::new(client.fair_lock(&fair_name).unwrap().lock().await.unwrap()),
        Box::new(permits.acquire().await.unwrap()),
    ];
    client.shutdown().await.unwrap();
    for guard in &held[1..] {
        assert!(guard.is_lost(), "{} still claims its hold", guard.name());
    }
    let once = redlease::LockOptions::new().wait(Duration::ZERO);
    let lock = other
        .lock(&name)
        .unwrap()
        .try_lock_with(once)
        .await
        .unwrap();
    assert!(lock.is_some(), "the lock is still held");
    let rw = other.read_write_lock(&rw_name).unwrap();
    assert!(
        rw.write().try_lock().await.unwrap().is_some(),
        "the write lock is still held"
    );
    let fair = other.fair_lock(&fair_name).unwrap();
    assert!(
        fair.try_lock().await.unwrap().is_some(),
        "the fair lock is still held"
    );
    let permit = other
        .permit_semaphore(&name)
        .unwrap()
        .try_acquire()
        .await
        .unwrap();
    assert!(permit.is_some(), "the permit is still taken");
    drop(held);
}
