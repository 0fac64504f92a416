//! Fair lock: five tasks ask 20 ms apart and get the lock in that order, each handed it by its
//! predecessor's release (one client's waiters take turns locally; the first of them waits in
//! the server's queue, where no newcomer of any client gets ahead of it).
//!
//! Run with `REDIS_URL=redis://127.0.0.1:6379 cargo run --example fair`.

use std::time::{Duration, Instant};

use redlease::{Client, Owner};

#[tokio::main]
async fn main() -> redlease::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    let name = format!("example:printer:{}", client.id());
    let first = client.fair_lock(&name)?.lock().await?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..5 {
        let lock = client.fair_lock(&name)?.with_owner(Owner::new());
        tasks.push(tokio::spawn(async move {
            let guard = lock.lock().await?;
            println!(
                "{:>5} ms  task {i} has the lock",
                started.elapsed().as_millis()
            );
            tokio::time::sleep(Duration::from_millis(30)).await;
            guard.unlock().await
        }));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    first.unlock().await?;
    for task in tasks {
        if let Ok(outcome) = task.await {
            outcome?;
        }
    }
    client.shutdown().await
}
