//! Semaphore: cap how many jobs run at once across every process, here 8 tasks sharing 3
//! permits; then a count-down latch that a coordinator waits on until every worker is done.
//!
//! Run with `REDIS_URL=redis://127.0.0.1:6379 cargo run --example semaphore`.

use redlease::LockOptions;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redlease::Client;

#[tokio::main]
async fn main() -> redlease::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    let name = format!("example:exports:{}", client.id());

    let slots = client.semaphore(&name)?;
    slots.set_permits(3).await?;
    let done = client.count_down_latch(&name)?;
    done.try_set_count(8).await?;

    let running = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    for job in 0..8 {
        let (slots, done, running) = (slots.clone(), done.clone(), running.clone());
        tokio::spawn(async move {
            slots.acquire().await?;
            let now = running.fetch_add(1, Ordering::SeqCst) + 1;
            println!(
                "{:>5} ms  job {job} runs ({now} at once)",
                started.elapsed().as_millis()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            running.fetch_sub(1, Ordering::SeqCst);
            slots.release(1).await?;
            done.count_down().await?;
            Ok::<(), redlease::Error>(())
        });
    }
    let all_done = done
        .try_wait_with(LockOptions::new().wait(Duration::from_secs(10)))
        .await?;
    println!(
        "latch open: {all_done} after {:?}; permits available: {}",
        started.elapsed(),
        slots.available().await?
    );
    client.shutdown().await
}
