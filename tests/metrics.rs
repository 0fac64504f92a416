//! The operator's metrics after a scripted run against a real server: every series a dashboard
//! reads, with its labels and counts (acquire, contend, busy, time out, and a lease lost for
//! each reason).
//!
//! One test per binary: it installs the process-wide recorder.

mod support;

use support::metrics::sample;

use redlease::LockOptions;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use redlease::testing;

fn value(handle: &PrometheusHandle, name: &str, labels: &[(&str, &str)]) -> f64 {
    let text = handle.render();
    sample(&text, name, labels).unwrap_or_else(|| panic!("no {name}{labels:?} in:\n{text}"))
}

const ORDERS: [(&str, &str); 2] = [("kind", "lock"), ("lock", "orders")];

fn with<'a>(extra: (&'a str, &'a str)) -> Vec<(&'a str, &'a str)> {
    let mut labels = ORDERS.to_vec();
    labels.push(extra);
    labels
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_run_yields_every_series_with_its_labels() {
    support::init_tracing();
    let handle = PrometheusBuilder::new().install_recorder().unwrap();
    let server = support::Server::start();
    let labelled = redlease::Client::builder(server.url())
        .watchdog_lease(Duration::from_millis(400))
        .lock_label(|name| name.split(':').next().unwrap_or(name).to_owned())
        .build()
        .await
        .unwrap();
    let plain = support::client(&server).await;

    // Acquire at once, then hold: `held` counts it; hold time recorded at release.
    let lock = labelled.lock("orders:1").unwrap();
    let guard = lock.lock().await.unwrap();
    assert_eq!(value(&handle, "redlease_held", &ORDERS), 1.0);

    // Contend: a waiter of another client counts in `waiting` until it gets the lock.
    let waiter = plain.lock("orders:1").unwrap();
    let waiting = tokio::spawn(async move { waiter.lock().await.map(|g| g.name().to_owned()) });
    let counted = support::eventually_async(Duration::from_secs(5), || async {
        sample(&handle.render(), "redlease_waiting", &[("kind", "lock")]) == Some(1.0)
    })
    .await;
    assert!(
        counted,
        "the waiter counts as waiting:\n{}",
        handle.render()
    );
    guard.unlock().await.unwrap();
    assert_eq!(waiting.await.unwrap().unwrap(), "orders:1");
    assert_eq!(value(&handle, "redlease_held", &ORDERS), 0.0);
    assert_eq!(value(&handle, "redlease_waiting", &[("kind", "lock")]), 0.0);
    assert_eq!(value(&handle, "redlease_hold_seconds_count", &ORDERS), 1.0);
    let contended = [("kind", "lock")];
    assert_eq!(
        value(&handle, "redlease_acquire_contended_total", &contended),
        1.0
    );

    // Busy (one attempt) and timeout (a bounded wait), against another client's hold.
    let other = testing::hold_elsewhere(&labelled, "orders:2", Duration::from_secs(30))
        .await
        .unwrap();
    let busy = labelled.lock("orders:2").unwrap();
    assert!(busy.try_lock().await.unwrap().is_none());
    let bounded = busy
        .try_lock_with(LockOptions::new().wait(Duration::from_millis(50)))
        .await
        .unwrap();
    assert!(bounded.is_none());
    // Cancelled: the caller stops waiting (a timeout around `lock()`).
    let gave_up = tokio::time::timeout(Duration::from_millis(50), busy.lock()).await;
    assert!(gave_up.is_err());
    other.release().await.unwrap();

    // Error: the lock's key holds another Redis type.
    support::set_string(&server, &support::key_of("orders:7"), "not a lock");
    let wrong = labelled.lock("orders:7").unwrap().try_lock().await;
    assert!(wrong.unwrap_err().is_wrong_type());

    // A lease lost for each reason.
    let guard = labelled.lock("orders:3").unwrap().lock().await.unwrap();
    testing::expire_lease(&guard).await.unwrap();
    drop(guard);
    let lock = labelled.lock("orders:4").unwrap();
    let guard = lock.lock().await.unwrap();
    assert!(lock.force_unlock().await.unwrap());
    assert!(guard.is_lost());
    drop(guard);
    let guard = labelled.lock("orders:5").unwrap().lock().await.unwrap();
    let _: i64 = redis::cmd("DEL")
        .arg(support::key_of("orders:5"))
        .query(&mut server.conn())
        .unwrap();
    tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("the watchdog finds the key gone");
    drop(guard);
    let guard = labelled.lock("orders:6").unwrap().lock().await.unwrap();
    let paused = testing::pause_renewals(&labelled);
    tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("the lease runs out unrenewed");
    drop((paused, guard));

    let outcomes = [
        ("acquired", 6.0),
        ("busy", 1.0),
        ("timeout", 1.0),
        ("cancelled", 1.0),
        ("error", 1.0),
    ];
    for (outcome, count) in outcomes {
        let labels = with(("outcome", outcome));
        let name = "redlease_acquire_wait_seconds_count";
        assert_eq!(value(&handle, name, &labels), count, "{outcome}");
    }
    // The bounded wait and the cancelled one waited; the busy try did not.
    let contended = value(&handle, "redlease_acquire_contended_total", &ORDERS);
    assert_eq!(contended, 2.0);
    assert_eq!(value(&handle, "redlease_waiting", &ORDERS), 0.0);
    for reason in ["expired", "forced", "server_lost", "renewal_failed"] {
        let labels = with(("reason", reason));
        assert_eq!(
            value(&handle, "redlease_leases_lost_total", &labels),
            1.0,
            "{reason}"
        );
    }
    assert_eq!(value(&handle, "redlease_held", &ORDERS), 0.0);
    // The client without a label function: no `lock` label, ever.
    let text = handle.render();
    let unlabelled = [("kind", "lock"), ("outcome", "acquired")];
    let name = "redlease_acquire_wait_seconds_count";
    assert_eq!(sample(&text, name, &unlabelled), Some(1.0), "{text}");
    assert!(
        !text.contains("lock=\"orders:"),
        "a raw name leaked into a label:\n{text}"
    );
    // A hold given back without its guard (`Lock::unlock`, after the guard was forgotten)
    // leaves `held` too.
    let forgotten = labelled.lock("orders:9").unwrap();
    std::mem::forget(forgotten.lock().await.unwrap());
    assert_eq!(value(&handle, "redlease_held", &ORDERS), 1.0);
    forgotten.unlock().await.unwrap();
    assert_eq!(value(&handle, "redlease_held", &ORDERS), 0.0);
    // Not a lost lease: the forced count is still the one above.
    let forced = with(("reason", "forced"));
    assert_eq!(value(&handle, "redlease_leases_lost_total", &forced), 1.0);
    // Shutdown gives back what is still held: `held` falls even while a guard lives on.
    let kept = labelled.lock("orders:8").unwrap().lock().await.unwrap();
    assert_eq!(value(&handle, "redlease_held", &ORDERS), 1.0);
    labelled.shutdown().await.unwrap();
    assert_eq!(value(&handle, "redlease_held", &ORDERS), 0.0);
    drop(kept);
    plain.shutdown().await.unwrap();
}
