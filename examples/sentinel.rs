//! Locks on a master found through Redis Sentinel, kept across a failover.
//!
//! Run with `bash scripts/with-sentinel.sh cargo run --example sentinel` (starts a private
//! master, two replicas and three sentinels) or with `REDIS_SENTINEL_URL` set to
//! `redis+sentinel://host:port,host:port/<master-name>` for yours. With `HOLD_SECS=30` the lock
//! is held that long while the example prints which server answers: run
//! `redis-cli -p <sentinel port> SENTINEL FAILOVER mymaster` meanwhile and watch it move.

use std::time::Duration;

use redlease::Client;

#[tokio::main]
async fn main() -> redlease::Result<()> {
    let url = std::env::var("REDIS_SENTINEL_URL")
        .unwrap_or_else(|_| "redis+sentinel://127.0.0.1:26379/mymaster".into());
    let hold_secs: u64 = std::env::var("HOLD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    // `Client::builder_sentinel("mymaster", ["10.0.0.1:26379", ...])` does the same from a list.
    let client = Client::builder(&url)
        .watchdog_lease(Duration::from_secs(6))
        .build()
        .await?;
    println!(
        "connected to {url}: master at port {}",
        port(&client).await?
    );

    // Fenced, so a resource can refuse a holder that a failover made stale.
    let lock = client.lock("orders:42")?.fenced(true);
    let guard = lock.lock().await?;
    println!(
        "`{}` held with fencing token {:?}",
        guard.name(),
        guard.fencing_token()
    );
    for _ in 0..hold_secs {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_secs(1)) => {}
            () = guard.lost() => break,
        }
        // A failed query during the failover itself is expected; the next one follows.
        match port(&client).await {
            Ok(port) => println!("master at port {port}, lock lost: {}", guard.is_lost()),
            Err(e) => println!("no answer ({e}), lock lost: {}", guard.is_lost()),
        }
    }
    if guard.is_lost() {
        // The promoted replica had not received the lock: stop using what it protected.
        println!("the lock was lost in a failover");
    } else {
        guard.unlock().await?;
        println!("released");
    }
    client.shutdown().await
}

/// The port of the server the client's commands reach.
async fn port(client: &Client) -> redlease::Result<u16> {
    let info: String = client.query(redis::cmd("INFO").arg("server")).await?;
    Ok(info
        .lines()
        .find_map(|line| line.strip_prefix("tcp_port:"))
        .and_then(|port| port.trim().parse().ok())
        .unwrap_or(0))
}
