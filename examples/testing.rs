//! Testing your own code's reaction to a lost lease, a slow grant and a busy lock, with
//! `redlease::testing` (the `testing` feature) against a real server.
//!
//! The three tests at the bottom are the ones to copy into your crate (with
//! `redlease = { version = "0.1", features = ["testing"] }` under `[dev-dependencies]`): each
//! starts its own server in one line, `TestServer::start()`, a `redis-server` (or
//! `valkey-server`) from `PATH` that is killed when the test ends; nothing to set up, no URL.
//! `cargo test --example testing --features testing` runs them. `main` runs the same checks
//! against `$REDIS_URL` when set, else against a `TestServer` too:
//!
//! ```text
//! cargo run --example testing --features testing
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example testing --features testing
//! ```

use redlease::LockOptions;
use std::time::Duration;

use redlease::{Client, LockGuard, testing};

/// The code under test: exports in steps under a lock, and stops as soon as the lease is lost
/// (another process may hold the lock by then).
async fn export(guard: &LockGuard, steps: u32) -> Result<u32, &'static str> {
    for step in 0..steps {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(20)) => {}
            _ = guard.lost() => return Err("lease lost: export abandoned"),
        }
        let _ = step;
    }
    Ok(steps)
}

/// The code under test: runs the nightly job unless another process holds its lock, waiting
/// at most `patience` for it.
async fn nightly(client: &Client, patience: Duration) -> redlease::Result<&'static str> {
    let lock = client.lock("nightly")?;
    Ok(
        match lock
            .try_lock_with(LockOptions::new().wait(patience))
            .await?
        {
            Some(guard) => {
                guard.unlock().await?;
                "ran"
            }
            None => "skipped: running elsewhere",
        },
    )
}

/// A lease lost in the middle of the work: the export stops, and the unlock says so.
async fn export_stops_when_its_lease_lapses(url: &str) -> redlease::Result<()> {
    let client = Client::connect(url).await?;
    let guard = client.lock("export")?.lock().await?;
    let (outcome, lapsed) = tokio::join!(export(&guard, 1_000), async {
        tokio::time::sleep(Duration::from_millis(60)).await;
        testing::expire_lease(&guard).await
    });
    lapsed?;
    assert_eq!(outcome, Err("lease lost: export abandoned"));
    assert!(guard.unlock().await.unwrap_err().is_lease_lost());
    client.shutdown().await
}

/// Renewals that stop getting through (Redis unreachable, a stalled process): the lease runs
/// out after its length and the export stops.
async fn export_stops_when_renewals_fail(url: &str) -> redlease::Result<()> {
    let client = Client::builder(url)
        .watchdog_lease(Duration::from_millis(300))
        .build()
        .await?;
    let guard = client.lock("export")?.lock().await?;
    let paused = testing::pause_renewals(&client);
    // 1,000 steps of 20 ms would take 20 s; the 300 ms lease ends it long before.
    let outcome = tokio::time::timeout(Duration::from_secs(5), export(&guard, 1_000))
        .await
        .expect("the export stops within the lease");
    assert_eq!(outcome, Err("lease lost: export abandoned"));
    drop(paused);
    client.shutdown().await
}

/// Another process runs the job: ours skips it after waiting, and runs once that one is done.
async fn nightly_skips_while_another_process_runs_it(url: &str) -> redlease::Result<()> {
    let client = Client::connect(url).await?;
    let elsewhere = testing::hold_elsewhere(&client, "nightly", Duration::from_secs(30)).await?;
    let patience = Duration::from_millis(100);
    assert_eq!(
        nightly(&client, patience).await?,
        "skipped: running elsewhere"
    );
    elsewhere.release().await?;
    assert_eq!(nightly(&client, patience).await?, "ran");
    client.shutdown().await
}

#[tokio::main]
async fn main() -> redlease::Result<()> {
    // Kept alive until the end of main (when no URL is given).
    let mut server = None;
    let url = match std::env::var("REDIS_URL") {
        Ok(url) => url,
        Err(_) => server.insert(testing::TestServer::start()?).url(),
    };
    export_stops_when_its_lease_lapses(&url).await?;
    export_stops_when_renewals_fail(&url).await?;
    nightly_skips_while_another_process_runs_it(&url).await?;
    println!("all three reactions as expected");
    Ok(())
}

#[cfg(test)]
mod tests {
    use redlease::testing::TestServer;

    #[tokio::test]
    async fn export_stops_when_its_lease_lapses() {
        let server = TestServer::start().unwrap();
        super::export_stops_when_its_lease_lapses(&server.url())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn export_stops_when_renewals_fail() {
        let server = TestServer::start().unwrap();
        super::export_stops_when_renewals_fail(&server.url())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn nightly_skips_while_another_process_runs_it() {
        let server = TestServer::start().unwrap();
        super::nightly_skips_while_another_process_runs_it(&server.url())
            .await
            .unwrap();
    }
}
