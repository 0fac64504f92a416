//! The lock family records the same series as `Lock` (acquisitions with their outcome, holds,
//! hold time, leases lost by reason), each under its own `kind`: `read`, `write`, `permit`,
//! `semaphore`.
//!
//! One test per binary: it installs the process-wide recorder.

mod support;

use support::metrics::sample;

use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use redlease::LockOptions;

fn value(handle: &PrometheusHandle, name: &str, labels: &[(&str, &str)]) -> f64 {
    let text = handle.render();
    sample(&text, name, labels).unwrap_or_else(|| panic!("no {name}{labels:?} in:\n{text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_family_kind_records_acquisitions_holds_and_losses() {
    support::init_tracing();
    let handle = PrometheusBuilder::new().install_recorder().unwrap();
    let server = support::Server::start();
    let client = redlease::Client::builder(server.url())
        .watchdog_lease(Duration::from_millis(600))
        .build()
        .await
        .unwrap();
    let other = support::client(&server).await;

    // Write and read sides: held while the guard lives, hold time at release.
    let rw = client
        .read_write_lock(&support::unique_name("m-rw"))
        .unwrap();
    let write = rw.write().lock().await.unwrap();
    assert_eq!(value(&handle, "redlease_held", &[("kind", "write")]), 1.0);
    write.unlock().await.unwrap();
    assert_eq!(value(&handle, "redlease_held", &[("kind", "write")]), 0.0);
    assert_eq!(
        value(&handle, "redlease_hold_seconds_count", &[("kind", "write")]),
        1.0
    );
    let read = rw.read().lock().await.unwrap();
    assert_eq!(value(&handle, "redlease_held", &[("kind", "read")]), 1.0);
    // Busy: a writer of another client makes one attempt.
    let busy = other
        .read_write_lock(rw.name())
        .unwrap()
        .write()
        .try_lock()
        .await;
    assert!(busy.unwrap().is_none());
    read.unlock().await.unwrap();
    assert_eq!(value(&handle, "redlease_held", &[("kind", "read")]), 0.0);
    for (kind, acquired) in [("write", 1.0), ("read", 1.0)] {
        let labels = [("kind", kind), ("outcome", "acquired")];
        let count = value(&handle, "redlease_acquire_wait_seconds_count", &labels);
        assert_eq!(count, acquired, "{kind}");
    }
    let busy = [("kind", "write"), ("outcome", "busy")];
    assert_eq!(
        value(&handle, "redlease_acquire_wait_seconds_count", &busy),
        1.0
    );

    // Permits: a fixed lease that ran out is `expired`; a hold deleted on the server is found
    // gone by a renewal, `server_lost`.
    let permits = client
        .permit_semaphore(&support::unique_name("m-permits"))
        .unwrap();
    permits.set_permits(2).await.unwrap();
    let fixed = permits
        .acquire_with(LockOptions::new().lease(Duration::from_millis(150)))
        .await
        .unwrap();
    assert_eq!(value(&handle, "redlease_held", &[("kind", "permit")]), 1.0);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(fixed.is_lost());
    let expired = [("kind", "permit"), ("reason", "expired")];
    assert_eq!(value(&handle, "redlease_leases_lost_total", &expired), 1.0);
    assert_eq!(value(&handle, "redlease_held", &[("kind", "permit")]), 0.0);
    drop(fixed);
    assert_eq!(value(&handle, "redlease_held", &[("kind", "permit")]), 0.0);
    let kept = permits.acquire().await.unwrap();
    let _: i64 = redis::cmd("DEL")
        .arg(permits.key())
        .query(&mut server.conn())
        .unwrap();
    tokio::time::timeout(Duration::from_secs(3), kept.lost())
        .await
        .expect("the watchdog finds the permit gone");
    let gone = [("kind", "permit"), ("reason", "server_lost")];
    assert_eq!(value(&handle, "redlease_leases_lost_total", &gone), 1.0);
    drop(kept);
    assert_eq!(value(&handle, "redlease_held", &[("kind", "permit")]), 0.0);

    // A counting semaphore: acquisitions and their outcome (it has no holds to count).
    let semaphore = client.semaphore(&support::unique_name("m-sem")).unwrap();
    semaphore.set_permits(1).await.unwrap();
    semaphore.acquire().await.unwrap();
    let waited = semaphore
        .try_acquire_with(LockOptions::new().wait(Duration::from_millis(50)))
        .await
        .unwrap();
    assert!(!waited);
    for outcome in ["acquired", "timeout"] {
        let labels = [("kind", "semaphore"), ("outcome", outcome)];
        let count = value(&handle, "redlease_acquire_wait_seconds_count", &labels);
        assert_eq!(count, 1.0, "{outcome}");
    }
    semaphore.release(1).await.unwrap();
    client.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}
