//! Exporting redlease's metrics to Prometheus.
//!
//! redlease records through the `metrics` facade (names and meanings: the crate docs,
//! *Observability*); any recorder works. This one installs `metrics-exporter-prometheus`, takes
//! a few contended locks, and prints the exposition text. With `METRICS_ADDR=127.0.0.1:9898` it
//! then serves it on `GET /metrics` until Ctrl-C, for a Prometheus scrape.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example prometheus
//! ```

use std::error::Error;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Installs the recorder, then lets 8 tasks take turns on one lock (waits, hand-overs, hold
/// times) while the watchdog renews it, and returns the handle to render the metrics.
async fn record_some_locking(url: &str) -> Result<PrometheusHandle, Box<dyn Error>> {
    let handle = PrometheusBuilder::new().install_recorder()?;
    let client = redlease::Client::builder(url)
        .watchdog_lease(Duration::from_millis(600))
        .build()
        .await?;
    let lock = client.lock("metrics:demo")?;
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
    // Held across a few watchdog rounds, so renewals show too.
    lock.run(|_| tokio::time::sleep(Duration::from_millis(700)))
        .await?;
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

    /// The example's own run, against a private server: every metric it should produce is there.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_example_exports_the_lock_metrics() {
        let server = support::Server::start();
        let handle = record_some_locking(&server.url()).await.unwrap();
        let text = handle.render();
        for metric in [
            "redlease_acquire_wait_seconds",
            "redlease_acquire_attempts",
            "redlease_hold_seconds",
            "redlease_handovers_total",
            "redlease_renewal_lag_seconds",
            "redlease_lease_left_at_renewal_seconds",
        ] {
            assert!(text.contains(metric), "{metric} missing from:\n{text}");
        }
        // 8 tasks × 20 runs + 1 long one: every acquisition recorded its wait.
        let count = text
            .lines()
            .find(|l| l.starts_with("redlease_acquire_wait_seconds_count"))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|n| n.parse::<u64>().ok());
        assert_eq!(count, Some(161), "{text}");
    }
}
