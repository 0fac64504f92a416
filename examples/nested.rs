//! Reentrancy: nested calls take the same lock again without deadlocking, the hold count goes
//! up and down, and the key disappears only at the last release.
//!
//! `REDIS_URL=redis://127.0.0.1:6379 cargo run --example nested`

use redlease::{Client, Lock, Owner};

async fn transfer(lock: &Lock, depth: u32) -> redlease::Result<()> {
    let guard = lock.lock().await?;
    println!(
        "{:indent$}depth {depth}: hold count {}",
        "",
        lock.hold_count().await?,
        indent = depth as usize * 2
    );
    if depth < 3 {
        Box::pin(transfer(lock, depth + 1)).await?;
    }
    guard.unlock().await
}

#[tokio::main]
async fn main() -> redlease::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    let lock = client.lock("nested:account:7")?;

    transfer(&lock, 1).await?;
    println!(
        "after the outermost release: locked = {}",
        lock.is_locked().await?
    );

    // Futures joined inside ONE task share its owner and would re-enter each other's lock.
    // Give each its own owner to get real exclusion.
    let a = lock.clone().with_owner(Owner::new());
    let b = lock.clone().with_owner(Owner::new());
    let held = a.lock().await?;
    let other = b.try_lock().await?;
    println!(
        "second explicit owner in the same task got it: {}",
        other.is_some()
    );
    held.unlock().await?;
    client.shutdown().await
}
