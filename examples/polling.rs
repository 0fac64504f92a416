//! Waiting without pub/sub: behind a proxy that has no SUBSCRIBE (some managed Redis offerings
//! and Redis-protocol proxies), waiters poll with capped exponential backoff instead. Two
//! workers take turns on one lock; neither client ever subscribes.
//!
//! Run with `REDIS_URL=redis://127.0.0.1:6379 cargo run --example polling`.

use std::time::{Duration, Instant};

use redlease::{Client, WaitBy};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    // Two clients, as two processes would be. Pauses from 5 ms, doubling up to 500 ms; or
    // choose your own with `WaitBy::Polling { first, max }`.
    let mut clients = Vec::new();
    for _ in 0..2 {
        clients.push(
            Client::builder(&url)
                .wait_by(WaitBy::POLLING)
                .build()
                .await?,
        );
    }
    let name = format!("example:polling:{}", clients[0].id());
    let started = Instant::now();

    let workers: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(worker, client)| {
            let lock = client.lock(&name);
            tokio::spawn(async move {
                let lock = lock?;
                for round in 0..3 {
                    let guard = lock.lock().await?;
                    let at = started.elapsed().as_millis();
                    println!("{at:>5} ms  worker {worker} holds the lock (round {round})");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    guard.unlock().await?;
                    // Work outside the lock; meanwhile the other worker's next poll finds it free.
                    tokio::time::sleep(Duration::from_millis(60)).await;
                }
                Ok::<(), redlease::Error>(())
            })
        })
        .collect();
    for worker in workers {
        worker.await??;
    }
    for client in clients {
        client.shutdown().await?;
    }
    Ok(())
}
