//! Expiring permits: a worker that "crashes" while holding a permit gives it back when the
//! permit's lease ends, where a plain semaphore would lose it for good.
//!
//! Run with `REDIS_URL=redis://127.0.0.1:6379 cargo run --example permits`.

use std::time::{Duration, Instant};

use redlease::{Client, LockOptions};

#[tokio::main]
async fn main() -> redlease::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    let gpus = client.permit_semaphore(&format!("example:gpu:{}", client.id()))?;
    gpus.try_set_permits(1).await?;

    // A worker takes the only permit with a 500 ms lease, then vanishes without releasing it.
    let permit = gpus
        .try_acquire_with(LockOptions::new().lease(Duration::from_millis(500)))
        .await?;
    if let Some(permit) = permit {
        println!("crashing worker holds permit {}", permit.id());
        std::mem::forget(permit);
    }
    let asked = Instant::now();
    // The next worker keeps its permit as long as it lives (renewed in the background).
    let permit = gpus.acquire().await?;
    println!("next worker got a permit after {:?}", asked.elapsed());
    permit.release().await?;
    println!("available again: {}", gpus.available().await?);
    client.shutdown().await
}
