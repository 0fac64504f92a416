//! Who holds a lock, what they said they are doing, and who waits for it, in what order and
//! since when: a holder that tells what it runs (`LockOptions::metadata`) and two clients
//! that wait, listed with `Lock::status` as any process (or `redlease status`) sees them.
//!
//! Run with `REDIS_URL=redis://127.0.0.1:6379 cargo run --example waiters`.

use std::time::Duration;

use redlease::{Client, LockOptions};

#[tokio::main]
async fn main() -> redlease::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let holder = Client::connect(&url).await?;
    let name = format!("example:reports:{}", holder.id());
    let guard = holder
        .lock(&name)?
        .lock_with(LockOptions::new().metadata("monthly report, job 8812"))
        .await?;

    // Two other clients (in real life: other processes, other hosts) wait, 200 ms apart.
    let mut waiting = Vec::new();
    for _ in 0..2 {
        let client = Client::connect(&url).await?;
        let lock = client.lock(&name)?;
        waiting.push(tokio::spawn(async move {
            let guard = lock.lock().await?;
            guard.unlock().await?;
            client.shutdown().await
        }));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;

    let status = holder.lock(&name)?.status().await?;
    for h in &status.holders {
        let pid = h.client.as_ref().map_or(0, |c| c.pid);
        println!("held by pid {pid}: {:?}", h.metadata);
    }
    for w in &status.waiters {
        let pid = w.client.as_ref().map_or(0, |c| c.pid);
        println!(
            "{}. pid {pid} ({}), waiting {:?}",
            w.position, w.field, w.waited
        );
    }

    guard.unlock().await?;
    for task in waiting {
        if let Ok(outcome) = task.await {
            outcome?;
        }
    }
    holder.shutdown().await
}
