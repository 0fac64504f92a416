//! Lock-delay: when a holder's lease runs out without a release (it crashed, was paused or
//! lost its network), the next holder waits a little longer, so writes the old holder still
//! had in flight to a resource that cannot check fencing tokens land before the new one starts.
//! A normal release frees the lock at once.
//!
//! Run it against `$REDIS_URL` (default `redis://127.0.0.1:6379`), or a private server:
//!
//! ```text
//! cargo run --example lock_delay
//! scripts/with-redis.sh cargo run --example lock_delay
//! ```

use redlease::LockOptions;
use std::time::{Duration, Instant};

use redlease::Client;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let name = "lock-delay-demo";
    let delay = Duration::from_secs(1);
    let alice = Client::connect(&url).await?;
    let bob = Client::connect(&url).await?;

    // A normal release: Bob gets the lock at once.
    let guard = alice.lock(name)?.lock_delay(delay).lock().await?;
    guard.unlock().await?;
    let asked = Instant::now();
    let guard = bob.lock(name)?.lock_delay(delay).lock().await?;
    println!("after a release, bob waited {:?}", asked.elapsed());
    guard.unlock().await?;

    // Alice's short lease runs out while she stalls: the lock stays refused for the delay.
    let lease = Duration::from_millis(300);
    let stalled = alice
        .lock(name)?
        .lock_delay(delay)
        .lock_with(LockOptions::new().lease(lease))
        .await?;
    let asked = Instant::now();
    let guard = bob.lock(name)?.lock_delay(delay).lock().await?;
    println!(
        "after alice's {lease:?} lease ran out, bob waited {:?} (the lease, then the {delay:?} delay)",
        asked.elapsed()
    );
    guard.unlock().await?;
    println!(
        "alice's guard reports it: is_lost() = {}",
        stalled.is_lost()
    );

    alice.shutdown().await?;
    bob.shutdown().await?;
    Ok(())
}
