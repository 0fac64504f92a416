//! Exporting redlease's metrics to Prometheus, ready for a dashboard.
//!
//! redlease records through the `metrics` facade (names and meanings: the crate docs,
//! *Observability*); any recorder works. This one installs `metrics-exporter-prometheus` with
//! histogram buckets (so the wait and hold times aggregate across instances), labels locks by
//! their group (`orders:42` → `orders`), runs some contended locking, one busy try, one time-out
//! and one lost lease, and prints the exposition text. With `METRICS_ADDR=127.0.0.1:9898` it
//! then serves it on `GET /metrics` until Ctrl-C, for a Prometheus scrape.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example prometheus
//! ```
//!
//! Queries a dashboard would plot from it:
//!
//! ```text
//! # acquisitions that waited, per second, per lock group
//! sum by (lock) (rate(redlease_acquire_contended_total[5m]))
//! # time-outs and errors among acquisitions
//! sum by (lock, outcome) (rate(redlease_acquire_wait_seconds_count{outcome=~"timeout|error"}[5m]))
//! # p99 wait for the lock
//! histogram_quantile(0.99, sum by (le, lock) (rate(redlease_acquire_wait_seconds_bucket[5m])))
//! # tasks waiting and locks held right now
//! sum by (lock) (redlease_waiting)    sum by (lock) (redlease_held)
//! # leases lost, by reason (alert on any)
//! sum by (reason) (increase(redlease_leases_lost_total[10m]))
//! ```

use redlease::LockOptions;
use std::error::Error;
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Bucket bounds in seconds for the wait and hold histograms: 1 ms to 1 min.
const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Installs the recorder, then lets 8 tasks take turns on one lock (waits, hand-overs, hold
/// times) while the watchdog renews it, tries a held lock once and for 50 ms, and lets one
/// fixed lease run out while its guard lives; returns the handle to render the metrics.
async fn record_some_locking(url: &str) -> Result<PrometheusHandle, Box<dyn Error>> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), BUCKETS)?
        .install_recorder()?;
    let client = redlease::Client::builder(url)
        .watchdog_lease(Duration::from_millis(600))
        // One series per group of locks, not per lock: `orders:17` → `orders`.
        .lock_label(|name| name.split(':').next().unwrap_or(name).to_owned())
        .build()
        .await?;
    let lock = client.lock("orders:17")?;
    let tasks: Vec<tokio::task::JoinHandle<redlease::Result<()>>> = (0..8)
        .map(|_| {
            let lock = lock.clone();
            tokio::spawn(async move {
                for _ in 0..20 {
                    lock.run(|_| tokio::time::sleep(Duration::from_millis(2)))
                        .await?;
                }
                Ok(())
            })
        })
        .collect();
    for task in tasks {
        task.await??;
    }
    // Held across a few watchdog rounds, so renewals show too; meanwhile a busy try and a
    // bounded wait that times out (another owner: a task of its own).
    let held = lock.lock().await?;
    let other = lock.clone();
    let probe: tokio::task::JoinHandle<redlease::Result<bool>> = tokio::spawn(async move {
        let busy = other.try_lock().await?;
        let timed_out = other
            .try_lock_with(LockOptions::new().wait(Duration::from_millis(50)))
            .await?;
        Ok(busy.is_none() && timed_out.is_none())
    });
    if !probe.await?? {
        return Err("a held lock was granted to another owner".into());
    }
    tokio::time::sleep(Duration::from_millis(700)).await;
    held.unlock().await?;
    // A fixed lease that runs out while its guard lives: a lost lease, reason `expired`.
    let short = client
        .lock("invoices:9")?
        .lock_with(LockOptions::new().lease(Duration::from_millis(50)))
        .await?;
    short.lost().await;
    let _ = short.unlock().await;
    client.shutdown().await?;
    Ok(handle)
}

/// Answers every connection with the current exposition text (enough for a scrape).
async fn serve(addr: &str, handle: PrometheusHandle) -> Result<(), Box<dyn Error>> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    println!("serving the metrics on http://{addr}/metrics (Ctrl-C to stop)");
    loop {
        let (mut socket, _) = tokio::select! {
            accepted = listener.accept() => accepted?,
            _ = tokio::signal::ctrl_c() => return Ok(()),
        };
        let mut request = [0u8; 1024];
        let _ = socket.read(&mut request).await?;
        let body = handle.render();
        let head = format!(
            "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
            body.len()
        );
        socket.write_all(head.as_bytes()).await?;
        socket.write_all(body.as_bytes()).await?;
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let handle = record_some_locking(&url).await?;
    let text = handle.render();
    for line in text.lines().filter(|l| l.starts_with("redlease_")) {
        println!("{line}");
    }
    if let Ok(addr) = std::env::var("METRICS_ADDR") {
        serve(&addr, handle).await?;
    }
    Ok(())
}

#[cfg(test)]
#[path = "../tests/support/mod.rs"]
mod support;

#[cfg(test)]
mod tests {
    use super::*;

    /// The example's own run, against a private server: the series a dashboard reads are there,
    /// with their labels, as histograms with buckets.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_example_exports_a_dashboard_ready_scrape() {
        let server = support::Server::start();
        let handle = record_some_locking(&server.url()).await.unwrap();
        let text = handle.render();
        let count = |series: &str| {
            text.lines()
                .find(|l| l.starts_with(series))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|n| n.parse::<f64>().ok())
                .unwrap_or_else(|| panic!("{series} missing from:\n{text}"))
        };
        // 8 tasks × 20 runs + the long hold + the short lease.
        let acquired =
            r#"redlease_acquire_wait_seconds_count{kind="lock",lock="orders",outcome="acquired"}"#;
        assert_eq!(count(acquired), 161.0);
        let invoices = r#"redlease_acquire_wait_seconds_count{kind="lock",lock="invoices",outcome="acquired"}"#;
        assert_eq!(count(invoices), 1.0);
        let busy =
            r#"redlease_acquire_wait_seconds_count{kind="lock",lock="orders",outcome="busy"}"#;
        assert_eq!(count(busy), 1.0);
        let timeout =
            r#"redlease_acquire_wait_seconds_count{kind="lock",lock="orders",outcome="timeout"}"#;
        assert_eq!(count(timeout), 1.0);
        let lost = r#"redlease_leases_lost_total{kind="lock",lock="invoices",reason="expired"}"#;
        assert_eq!(count(lost), 1.0);
        assert!(count(r#"redlease_acquire_contended_total{kind="lock",lock="orders"}"#) >= 1.0);
        assert_eq!(count(r#"redlease_held{kind="lock",lock="orders"}"#), 0.0);
        assert_eq!(count(r#"redlease_waiting{kind="lock",lock="orders"}"#), 0.0);
        assert_eq!(
            count(r#"redlease_hold_seconds_count{kind="lock",lock="orders"}"#),
            161.0
        );
        assert!(text.contains(r#"redlease_acquire_wait_seconds_bucket{kind="lock",lock="orders",outcome="acquired",le="0.001"}"#), "{text}");
        for metric in [
            "redlease_acquire_attempts",
            "redlease_handovers_total",
            "redlease_renewal_lag_seconds",
            "redlease_lease_left_at_renewal_seconds",
        ] {
            assert!(text.contains(metric), "{metric} missing from:\n{text}");
        }
        assert!(
            !text.contains("orders:17"),
            "a raw lock name leaked into a label:\n{text}"
        );
    }
}
