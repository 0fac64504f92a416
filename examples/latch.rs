//! Count-down latch: a coordinator waits until three workers (any process) have checked in.
//!
//! Run with `REDIS_URL=redis://127.0.0.1:6379 cargo run --example latch`.

use redlease::LockOptions;
use std::time::{Duration, Instant};

use redlease::Client;

#[tokio::main]
async fn main() -> redlease::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    let ready = client.count_down_latch(&format!("example:ready:{}", client.id()))?;
    ready.try_set_count(3).await?;
    let started = Instant::now();
    for worker in 0..3u64 {
        let ready = ready.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100 * (worker + 1))).await;
            let left = ready.count_down().await?;
            println!("worker {worker} ready; {left} to go");
            Ok::<(), redlease::Error>(())
        });
    }
    let open = ready
        .try_wait_with(LockOptions::new().wait(Duration::from_secs(5)))
        .await?;
    println!("all ready: {open} after {:?}", started.elapsed());
    client.shutdown().await
}
