//! The loss notice's tests (`tests/loss_notice*.rs`): a hold armed for the notice, and the time
//! from a cause to its guard's `lost()`.

use std::time::{Duration, Instant};

use redlease::{Client, LockGuard};

/// What every loss-notice test asserts (the bars, 50 ms at the 99th percentile on one
/// server, 200 ms elsewhere, are measured by `make bench`; a loaded test machine gets more
/// room).
pub const NOTICE_WITHIN: Duration = Duration::from_secs(1);

/// Longer than two of the loss notice's arming delays (100 ms by default), so a hold is armed.
pub const SETTLE: Duration = Duration::from_millis(250);

/// Holds `name` through `client` under the watchdog, then waits until it is armed.
pub async fn hold(client: &Client, name: &str) -> LockGuard {
    let guard = client.lock(name).unwrap().lock().await.unwrap();
    tokio::time::sleep(SETTLE).await;
    assert!(!guard.is_lost(), "lost before anything happened");
    guard
}

/// Runs `cause` now and returns how long `lost()` took after it, or `None` past `within`.
pub async fn lost_after(
    guard: &LockGuard,
    within: Duration,
    cause: impl FnOnce(),
) -> Option<Duration> {
    let lost = guard.lost();
    let started = Instant::now();
    cause();
    tokio::time::timeout(within, lost)
        .await
        .ok()
        .map(|()| started.elapsed())
}
