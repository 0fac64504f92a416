//! False losses: a hold the server was said to have lost (a renewal, or the loss notice's
//! check, found it gone) while it was still there. With the `testing` feature every such loss
//! is read again at once through the client's command connection, the way a lock call would
//! reach its key (following a cluster's redirections, behind Sentinel the current master); a
//! hold found still there counts as a false loss. The test suite's fault runs (`make torture`)
//! and the benchmark report the count, which must stay 0.
//!
//! Losses by a lease or validity running out (`expired`, `renewal_failed`) are not counted:
//! that the key may outlive its holder's validity is by design (a holder cut off from the
//! server gives up before its lease can have ended there).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::node::Presence;
use crate::shared::Inner;

static AUDITED: AtomicU64 = AtomicU64::new(0);
static FALSE: AtomicU64 = AtomicU64::new(0);

/// Reads `presence` again in the background; counts a false loss if it is still there.
pub(crate) fn server_reported_loss(inner: &Inner, presence: Presence) {
    AUDITED.fetch_add(1, Ordering::Relaxed);
    read_again(inner, presence, record_false_loss);
}

/// Reads `presence` through the command connection; calls `still_there` if the hold is. A
/// reply that cannot say (the server is down) is no verdict.
fn read_again(inner: &Inner, presence: Presence, still_there: fn(&Presence)) {
    let node = inner.node.clone();
    inner.background.spawn(async move {
        let mut read = redis::cmd(if presence.value.is_some() {
            "HGET"
        } else {
            "HEXISTS"
        });
        read.arg(&*presence.key).arg(&*presence.field);
        let found = match &presence.value {
            None => node.query::<bool>(&read).await.ok() == Some(true),
            Some(value) => node
                .query::<Option<String>>(&read)
                .await
                .ok()
                .flatten()
                .is_some_and(|found| found == **value),
        };
        if found {
            still_there(&presence);
        }
    });
}

/// Counts it, logs it, and when [`FALSE_LOSS_LOG`] names a file (`make test` and `make
/// torture` set it) appends a line there, so a run of many test processes can be checked.
fn record_false_loss(presence: &Presence) {
    FALSE.fetch_add(1, Ordering::Relaxed);
    tracing::error!(key = %presence.key, field = %presence.field, "false loss: a hold reported lost is still on the server");
    if let Some(path) = std::env::var_os(FALSE_LOSS_LOG) {
        use std::io::Write;
        let line = format!("{} {}\n", presence.key, presence.field);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path);
        if let Ok(mut file) = file {
            let _ = file.write_all(line.as_bytes());
        }
    }
}

/// The environment variable naming the file every false loss of the process is appended to.
pub const FALSE_LOSS_LOG: &str = "REDLEASE_FALSE_LOSS_LOG";

/// How many holds in this process were marked lost on the server's word (a renewal or the
/// loss notice found them gone) while they were still on the server, read again right after.
/// Every test run should see 0.
pub fn false_losses() -> u64 {
    FALSE.load(Ordering::Relaxed)
}

/// How many server-reported losses [`false_losses`] has read again so far (its denominator).
pub fn audited_losses() -> u64 {
    AUDITED.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

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
    async fn a_hold_still_on_the_server_counts_and_one_gone_does_not() {
        let Ok(server) = crate::testing::TestServer::start() else {
            eprintln!("no redis-server: skipped");
            return;
        };
        let client = server.client().await.unwrap();
        let guard = client.lock("audit").unwrap().lock().await.unwrap();
        let presence = match client.inner.holds.all().remove(0) {
            crate::hold::Noted::Lock(hash, field) => client.inner.holds.get(&hash, &field),
            crate::hold::Noted::Family(..) => None,
        }
        .expect("the lock's hold")
        .presence();
        // Said lost while it is held: a false loss.
        read_again(&client.inner, presence.clone(), found);
        assert!(until_counted(1).await, "a false loss was not counted");
        guard.unlock().await.unwrap();
        // Said lost once it is gone: a true loss.
        read_again(&client.inner, presence, found);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            FOUND.load(Ordering::Relaxed),
            1,
            "a true loss was counted as false"
        );
        client.shutdown().await.unwrap();
    }
}
