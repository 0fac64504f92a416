//! The loss notice's workload (L1; redlease only: no peer is told of a lost lock before its
//! next renewal).

use crate::config::Counts;
use crate::runner::Runner;

/// L1: the loss notice on one server, 50 trials of each cause (10 with `--quick`).
#[cfg(feature = "redlease")]
pub async fn loss_notice(r: &mut Runner, c: &Counts) {
    let url = r.url(0);
    let trials = (c.w6 / 2).clamp(10, 100);
    r.measure(L1, "redlease Lock", |_| {
        let url = url.clone();
        async move { crate::workloads::loss_notice::loss_notice(&url, trials).await }
    })
    .await;
}

#[cfg(not(feature = "redlease"))]
pub async fn loss_notice(r: &mut Runner, _: &Counts) {
    r.not_applicable(L1, "redlease", "bench built without the `redlease` feature");
}

/// Workload label; the first word is what `--only` selects.
pub const L1: &str = "L1 loss notice: a held key deleted, flushed, forced";
