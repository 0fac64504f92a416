//! A long job under a watchdog-kept lock: the lease is 3 s but the job runs for 10 s, renewed
//! every second. Midway, an "operator" force-unlocks the lock; the job notices through
//! `guard.lost()` and stops instead of running on unprotected.
//!
//! `REDIS_URL=redis://127.0.0.1:6379 cargo run --example long_task`

use std::time::{Duration, Instant};

use redlease::Client;

#[tokio::main]
async fn main() -> redlease::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::builder(&url)
        .watchdog_lease(Duration::from_secs(3))
        .build()
        .await?;
    let lock = client.lock("long_task:nightly-import")?;
    let guard = lock.lock().await?;
    let started = Instant::now();

    let operator = {
        let lock = lock.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(6)).await;
            println!("[operator] force unlock: {}", lock.force_unlock().await?);
            redlease::Result::Ok(())
        })
    };

    let job = async {
        for step in 1..=10 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            println!(
                "[job] step {step}/10 at {:?}, remaining lease {:?}",
                started.elapsed(),
                lock.remaining_lease()
                    .await
                    .ok()
                    .and_then(|left| left.duration())
            );
        }
    };
    tokio::select! {
        _ = job => {
            println!("[job] finished; releasing");
            guard.unlock().await?;
        }
        _ = guard.lost() => {
            println!("[job] lease lost after {:?}: stopping the job", started.elapsed());
            let err = guard.unlock().await.expect_err("a lost lease cannot be released");
            println!("[job] unlock says: {err}");
        }
    }
    operator.await.expect("operator task panicked")?;
    client.shutdown().await
}
