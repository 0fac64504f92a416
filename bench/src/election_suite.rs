//! The election's workloads (E1, E2; redlease only: the peers have no election).

use crate::config::Counts;
use crate::runner::Runner;

#[cfg(feature = "redlease")]
pub async fn election(r: &mut Runner, c: &Counts) {
    use crate::workloads::election;
    let url = r.url(0);
    let rounds = (c.w6 / 2).max(5);
    r.measure(E1, "redlease Election", |_| {
        let url = url.clone();
        async move { election::resign_takeover(&url, rounds).await }
    })
    .await;
    // A round waits out a lease: a few rounds of a 1 s lease.
    let kills = (c.w6 / 20).clamp(2, 5);
    r.measure(E2, "redlease Election", |_| {
        let url = url.clone();
        async move { election::kill_takeover(&url, kills, std::time::Duration::from_secs(1)).await }
    })
    .await;
}

#[cfg(not(feature = "redlease"))]
pub async fn election(r: &mut Runner, _: &Counts) {
    for w in [E1, E2] {
        r.not_applicable(w, "redlease", "bench built without the `redlease` feature");
    }
}

/// Workload labels; the first word is what `--only` selects.
pub const E1: &str = "E1 election: resign to takeover";
pub const E2: &str = "E2 election: kill -9 to takeover";
