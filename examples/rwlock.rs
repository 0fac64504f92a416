//! Read-write lock: readers share the lock, a writer waits for them and keeps new readers out
//! while it waits; a writer may also read (downgrade), a reader may not write (upgrade).
//!
//! Run with `REDIS_URL=redis://127.0.0.1:6379 cargo run --example rwlock`.

use std::time::{Duration, Instant};

use redlease::{Client, LockOptions, Owner};

#[tokio::main]
async fn main() -> redlease::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    let name = format!("example:prices:{}", client.id());
    let started = Instant::now();
    let at = move || started.elapsed().as_millis();

    // Two readers at once, each its own owner. They share one read hold on the server (one
    // client's concurrent readers do), renewed while their guards live; each guard still
    // releases only its own place.
    let readers: Vec<_> = (0..2)
        .map(|i| {
            let lock = client
                .read_write_lock(&name)
                .map(|l| l.with_owner(Owner::new()));
            tokio::spawn(async move {
                let reading = lock?.read().lock().await?;
                println!("{:>5} ms  reader {i} in", at());
                tokio::time::sleep(Duration::from_millis(300)).await;
                println!("{:>5} ms  reader {i} out", at());
                reading.unlock().await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;

    // The writer waits for both readers.
    let prices = client.read_write_lock(&name)?;
    let writing = prices.write().lock().await?;
    println!("{:>5} ms  writer in", at());
    // Downgrade: the writer reads too, then lets the write lock go and stays a reader.
    let reading = prices.read().lock().await?;
    writing.unlock().await?;
    println!("{:>5} ms  writer downgraded to a reader", at());
    // A reader asking for the write lock is refused at once instead of deadlocking.
    let upgrade = prices.write().try_lock_with(LockOptions::new()).await;
    println!(
        "upgrade refused: {}",
        upgrade.is_err_and(|e| e.is_would_deadlock())
    );
    reading.unlock().await?;
    for reader in readers {
        if let Ok(outcome) = reader.await {
            outcome?;
        }
    }
    client.shutdown().await
}
