//! The false-loss audit (`watchdog/audit.rs`) against a real server: a hold still there counts,
//! one taken again by its owner or gone does not.

use std::time::{Duration, Instant};

use std::sync::atomic::{AtomicU64, Ordering};

use super::TestServer;
use crate::node::Presence;
use crate::watchdog::audit::read_again;

/// What this test found (not the process's count, nor the log file).
static FOUND: AtomicU64 = AtomicU64::new(0);

fn found(_: &Presence) {
    FOUND.fetch_add(1, Ordering::Relaxed);
}

/// Waits (at most 5 s) until `FOUND` reaches `at_least`.
async fn until_counted(at_least: u64) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if FOUND.load(Ordering::Relaxed) >= at_least {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_still_on_the_server_counts_and_one_gone_does_not() -> crate::Result<()> {
    let Ok(server) = TestServer::start() else {
        eprintln!("no redis-server: skipped");
        return Ok(());
    };
    let holder = server.client().await?;
    let auditor = server.client().await?;
    let guard = holder.lock("audit")?.lock().await?;
    let presence = match holder.inner.holds.all().remove(0) {
        crate::hold::Noted::Lock(key) => holder.inner.holds.get(&key),
        crate::hold::Noted::Family(..) => None,
    }
    .ok_or_else(|| crate::Error::InvalidArgument("the lock's hold is not registered".into()))?
    .presence();
    // Said lost while it is held (by a client that is not taking it again): a false loss.
    read_again(&auditor.inner, presence.clone(), found);
    assert!(until_counted(1).await, "a false loss was not counted");
    // Said lost, then taken again by the same owner (a re-entry, granted after the loss):
    // the read may find the new grant, so no verdict.
    read_again(&holder.inner, presence.clone(), found);
    let again = holder.lock("audit")?.lock().await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    again.unlock().await?;
    assert_eq!(
        FOUND.load(Ordering::Relaxed),
        1,
        "a hold taken again was counted"
    );
    guard.unlock().await?;
    // Said lost once it is gone: a true loss.
    read_again(&auditor.inner, presence, found);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        FOUND.load(Ordering::Relaxed),
        1,
        "a true loss was counted as false"
    );
    holder.shutdown().await?;
    auditor.shutdown().await?;
    Ok(())
}
