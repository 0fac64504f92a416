//! The lock family's workloads (F1-F4, redlease only: the peers have no such locks), sized
//! like the workloads they compare with: F1 and F4 like W2, F2 and F3 like W3 with a fifth of
//! the rounds.

use crate::config::Counts;
use crate::runner::Runner;

/// The workloads `wants` selects (by their first word, as `--only` names them).
#[cfg(feature = "redlease")]
pub async fn family(r: &mut Runner, c: &Counts, wants: impl Fn(&str) -> bool) {
    use crate::workloads::family::{self, Kind};
    let url = r.url(0);
    let (t2, r2) = (c.w2_tasks, c.w2_rounds);
    // F1 and F4: W2's shape over `clients` clients.
    let exclusive = [
        (F1, 2, "redlease Lock", Kind::Lock),
        (F1, 2, "redlease FairLock", Kind::Fair),
        (F4, 1, "redlease Lock", Kind::Lock),
        (F4, 1, "redlease write lock", Kind::Write),
        (F4, 1, "redlease Semaphore(1)", Kind::Semaphore1),
    ];
    for (workload, clients, name, kind) in exclusive {
        if !wants(&workload[..2]) {
            continue;
        }
        r.measure(workload, name, |_| {
            let url = url.clone();
            async move { family::fair(&url, kind, clients, t2, r2).await }
        })
        .await;
    }
    let (t3, r3) = (c.w3_tasks, (c.w3_rounds / 5).max(1));
    if wants("F2") {
        r.measure(F2, "redlease ReadWriteLock", |_| {
            let url = url.clone();
            async move { family::read_mostly(&url, t3, r3).await }
        })
        .await;
    }
    if wants("F3") {
        r.measure(F3, "redlease Semaphore(8)", |_| {
            let url = url.clone();
            async move { family::semaphore(&url, t3, r3).await }
        })
        .await;
    }
}

#[cfg(not(feature = "redlease"))]
pub async fn family(r: &mut Runner, _: &Counts, _: impl Fn(&str) -> bool) {
    for w in [F1, F2, F3, F4] {
        r.not_applicable(w, "redlease", "bench built without the `redlease` feature");
    }
}

/// Workload labels; the first word is what `--only` selects.
pub const F1: &str = "F1 fair (W2 over 2 clients)";
pub const F2: &str = "F2 read-write (90% reads)";
pub const F3: &str = "F3 semaphore(8)";
pub const F4: &str = "F4 one client's hand-overs (W2, exclusive kinds)";
