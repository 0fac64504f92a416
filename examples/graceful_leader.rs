//! A leader that steps down when its process is told to stop (SIGTERM, as systemd, Kubernetes
//! and `kill` send; or Ctrl-C), so the next candidate leads within milliseconds instead of
//! after the stopped leader's lease (30 s by default) runs out.
//!
//! Run it in two or three terminals, then stop the leader with `kill <pid>` (or Ctrl-C): the
//! next one prints its new term at once.
//!
//! ```text
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example graceful_leader
//! ```

use std::time::Duration;

use redlease::{Client, Leading};
use tokio::signal::unix::{SignalKind, signal};

/// The leader's work: runs until the process is told to stop (or the leadership is lost,
/// when `lead` drops it).
async fn serve(leading: Leading) {
    loop {
        println!(
            "pid {} leads in term {}",
            std::process::id(),
            leading.term()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = Client::connect(&url).await?;
    let election = client.election("example:graceful-leader")?;
    let me = format!("pid {}", std::process::id());
    // Before campaigning, so a stop while waiting to lead is handled the same way.
    let mut terminate = signal(SignalKind::terminate())?;
    println!("{me} campaigns");
    tokio::select! {
        led = election.lead(&me, serve) => led?,
        _ = terminate.recv() => println!("{me}: SIGTERM, resigning"),
        _ = tokio::signal::ctrl_c() => println!("{me}: Ctrl-C, resigning"),
    }
    // `select!` dropped `lead`, which resigns in the background: the term is recorded as
    // resigned and the lock released, which wakes the next candidate at once. `shutdown`
    // waits for that to reach Redis before the process exits.
    client.shutdown().await?;
    Ok(())
}
