//! False losses: a hold the server was said to have lost while it was still there. With the
//! `testing` feature every loss of a reentrant lock's hold on the server's word (a renewal,
//! an early renewal, a re-entry or the loss notice found it gone) and every loss the notice
//! tells a family hold is read again at once through the client's command connection, the
//! way a lock call would reach its key (following a cluster's redirections, behind Sentinel
//! the current master); a hold found still there, and not taken again by its client, counts
//! as a false loss. `make test` and `make torture` fail when any test process counted one.
//!
//! Not read again: losses by a lease or validity running out (`expired`, `renewal_failed`:
//! that the key may outlive its holder's validity is by design, a holder cut off from the
//! server gives up before its lease can have ended there), and what a release, an `extend`,
//! a family renewal or a RedLock renewal found gone (each answers its own caller).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::keys::HoldKey;
use crate::node::Presence;
use crate::shared::Inner;

static AUDITED: AtomicU64 = AtomicU64::new(0);
static FALSE: AtomicU64 = AtomicU64::new(0);

/// Reads `presence` again in the background; counts a false loss if it is still there.
pub(crate) fn server_reported_loss(inner: &Inner, presence: Presence) {
    AUDITED.fetch_add(1, Ordering::Relaxed);
    read_again(inner, presence, record_false_loss);
}

/// Reads `presence` through the command connection; calls `still_there` if the hold is and
/// this client has not taken it again since the loss (the same owner, in a loop: its new grant,
/// not the lost one, is what the read found). Bounded by [`READ_WITHIN`], so a shutdown that
/// waits for the client's background work is not held up by a server that is down.
pub(crate) fn read_again(inner: &Inner, presence: Presence, still_there: fn(&Presence)) {
    let lost_at = Instant::now();
    let (node, client) = (inner.node.clone(), inner.this.clone());
    IN_FLIGHT.fetch_add(1, Ordering::AcqRel);
    inner.background.spawn(async move {
        let read = tokio::time::timeout(READ_WITHIN, node.has(&presence)).await;
        if let Ok(Ok(true)) = read {
            // A grant the read came after is registered by now.
            tokio::time::sleep(TAKEN_AGAIN_WITHIN).await;
            let taken_again = client.upgrade().is_some_and(|inner| {
                let key = HoldKey::new(&presence.key, &presence.field);
                (inner.holds).granted_since(&key, lost_at)
            });
            if !taken_again {
                still_there(&presence);
            }
        }
        IN_FLIGHT.fetch_sub(1, Ordering::AcqRel);
    });
}

/// Longer than a grant takes from its reply to its registration.
const TAKEN_AGAIN_WITHIN: Duration = Duration::from_millis(50);
/// The longest an audit's read may take.
const READ_WITHIN: Duration = Duration::from_millis(500);

static IN_FLIGHT: AtomicU64 = AtomicU64::new(0);

/// Reads again that have not answered yet: a count taken before they have is not final.
pub fn audits_in_flight() -> u64 {
    IN_FLIGHT.load(Ordering::Acquire)
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
