//! `Guard`: one trait over every hold, so one collection can keep and release any of them.
//! What each behaviour means, kind by kind, is `guard_conformance.rs`.

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
    let members = ["a", "b"].map(|m| client.lock(&format!("{name}-{m}")).unwrap());
    let both = redlease::MultiLock::new(members.into()).unwrap();
    let held: Vec<Box<dyn Guard>> = vec![
        Box::new(lock.lock().await.unwrap()),
        Box::new(rw.write().lock().await.unwrap()),
        Box::new(rw.read().lock().await.unwrap()),
        Box::new(permits.acquire().await.unwrap()),
        Box::new(both.lock().await.unwrap()),
    ];
    let names: Vec<&str> = held.iter().map(|g| g.name()).collect();
    let joined = format!("{name}-a+{name}-b");
    assert_eq!(
        names,
        [name.as_str(), rw.name(), rw.name(), name.as_str(), &joined]
    );
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
