//! A job under a RedLock over several independent Redis masters.
//!
//! The lock is held while a majority of the masters grant it, renewed every second (lease 3 s)
//! on all of them at once. The job checks the lock's validity before each step and stops if
//! the lock is lost — for example when you stop a majority of the masters while it runs.
//!
//! ```text
//! for port in 7001 7002 7003; do redis-server --port $port --daemonize yes --save '' ; done
//! REDLOCK_URLS=redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003 \
//!     cargo run --example redlock
//! ```
//!
//! Without `$REDLOCK_URLS` it explains this and exits without touching any server.

use redlease::LockOptions;
use std::time::{Duration, Instant};

use redlease::{Client, RedLock};

#[tokio::main]
async fn main() -> redlease::Result<()> {
    let urls: Vec<String> = std::env::var("REDLOCK_URLS")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(String::from)
        .collect();
    if urls.is_empty() {
        println!(
            "Set REDLOCK_URLS to the comma-separated URLs of independent Redis masters (3 or 5 \
             for Redlock; not replicas of each other), e.g.\n\n  \
             REDLOCK_URLS=redis://127.0.0.1:7001,redis://127.0.0.1:7002,redis://127.0.0.1:7003 \
             cargo run --example redlock\n\nNothing was started or contacted."
        );
        return Ok(());
    }

    // One client per master. A master that is down at start-up is left out here; a RedLock
    // over the rest still works as long as they are a majority of the list.
    let mut clients = Vec::new();
    for url in &urls {
        let connecting = Client::builder(url).timeout(Duration::from_secs(1)).build();
        match connecting.await {
            Ok(client) => clients.push(client),
            Err(e) => println!("[setup] {url}: {e}; continuing without it"),
        }
    }
    let locks = clients
        .iter()
        .map(|c| Ok(c.lock("examples:redlock-job")?.fenced(true)))
        .collect::<redlease::Result<Vec<_>>>()?;
    if locks.len() < urls.len() / 2 + 1 {
        println!(
            "[setup] only {} of {} masters reachable: no majority",
            locks.len(),
            urls.len()
        );
        return Ok(());
    }
    let redlock = RedLock::new(locks)?.watchdog_lease(Duration::from_secs(3));

    let started = Instant::now();
    let Some(guard) = redlock
        .try_lock_with(LockOptions::new().wait(Duration::from_secs(10)))
        .await?
    else {
        println!("[job] someone else holds the lock; giving up after 10 s");
        return Ok(());
    };
    println!(
        "[job] acquired on {} of {} masters (quorum {}) in {:?}; validity {:?}; fencing token {:?}",
        guard.held_nodes(),
        redlock.nodes().len(),
        guard.quorum(),
        started.elapsed(),
        guard.validity(),
        guard.fencing_token(),
    );

    let job = async {
        for step in 1..=10 {
            tokio::time::sleep(Duration::from_secs(1)).await;
            // Before each write: is the lock still known valid? (Pass the fencing token to the
            // resource too, so it can refuse a writer that was paused past its lease.)
            println!(
                "[job] step {step}/10: held on {} masters, validity {:?}",
                guard.held_nodes(),
                guard.validity()
            );
        }
    };
    tokio::select! {
        _ = job => {
            println!("[job] done; releasing");
            guard.unlock().await?;
        }
        _ = guard.lost() => {
            println!("[job] lost the majority after {:?}: stopping", started.elapsed());
            if let Err(e) = guard.unlock().await {
                println!("[job] unlock says: {e}");
            }
        }
    }
    for client in &clients {
        client.shutdown().await?;
    }
    Ok(())
}
