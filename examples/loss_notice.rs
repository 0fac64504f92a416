//! The loss notice: a job holds a lock under the default 30 s watchdog lease, and another
//! process (here another client, as an operator's `redlease unlock --force` would) takes the
//! lock away. The server tells the holder at once: `guard.lost()` resolves within milliseconds,
//! not at the next renewal ten seconds later, and the job stops.
//!
//! `REDIS_URL=redis://127.0.0.1:6379 cargo run --example loss_notice`

use std::time::{Duration, Instant};

use redlease::Client;

#[tokio::main]
async fn main() -> redlease::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    // The notice is on by default; `.loss_notice(false)` switches it off.
    let holder = Client::connect(&url).await?;
    let operator = Client::connect(&url).await?;
    let name = "loss_notice:nightly-import";
    let guard = holder.lock(name)?.lock().await?;

    let forced_at = tokio::spawn({
        let operator = operator.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let forced = operator.lock(name)?.force_unlock().await?;
            println!("[operator] force unlock from another client: {forced}");
            redlease::Result::Ok(Instant::now())
        }
    });

    let job = async {
        for step in 1..=100 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            println!("[job] step {step}/100");
        }
    };
    tokio::select! {
        _ = job => println!("[job] finished"),
        _ = guard.lost() => {
            let forced_at = forced_at.await.expect("the operator task")?;
            println!("[job] told the lock is gone {:?} after the force unlock; stopping", forced_at.elapsed());
        }
    }
    // Lost: `unlock` says so.
    assert!(guard.unlock().await.unwrap_err().is_lease_lost());
    holder.shutdown().await?;
    operator.shutdown().await?;
    Ok(())
}
