//! Quickstart: take a lock, see it held, release it, and watch a second owner wait for it.
//!
//! Run with `make demo` (starts a private redis-server when `$REDIS_URL` is unset) or
//! `REDIS_URL=redis://127.0.0.1:6379 cargo run --example quickstart`.

use std::time::{Duration, Instant};

use redlease::Client;

#[tokio::main]
async fn main() -> redlease::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    println!("connected to {url} as client {}", client.id());

    let lock = client.lock("quickstart:orders:42")?;
    let guard = lock.lock().await?;
    println!(
        "acquired `{}`: locked={} hold_count={} remaining lease={:?}",
        lock.name(),
        lock.is_locked().await?,
        lock.hold_count().await?,
        lock.remaining_lease().await?,
    );

    // Another task is another owner: it waits (on pub/sub, not polling) until we release.
    let waiter = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let asked = Instant::now();
            let guard = lock.lock().await?;
            println!("waiter got the lock after {:?}", asked.elapsed());
            guard.unlock().await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    guard.unlock().await?;
    println!(
        "released after holding it 300 ms (unlock took {:?})",
        released.elapsed()
    );
    waiter.await.expect("the waiter task panicked")?;

    println!("locked at the end: {}", lock.is_locked().await?);
    client.shutdown().await
}
