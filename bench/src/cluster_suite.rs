//! The cluster workloads (C1, C3, C4, C6: W1, W3, W4 and W6 on a 3-primary Redis Cluster),
//! each with redlease on one server in the same run for the ratio.

#[cfg(feature = "redlease")]
use std::sync::Arc;

use crate::config::Counts;
use crate::runner::Runner;

pub const C1: &str = "C1 cluster W1";
pub const C3: &str = "C3 cluster W3";
pub const C4: &str = "C4 cluster W4";
pub const C6: &str = "C6 cluster W6";
/// The labels' first words, as `--only` names them (C7: W7 on the cluster, workloads/processes.rs).
pub const SELECTORS: [&str; 5] = ["C1", "C3", "C4", "C6", "C7"];

pub const ONE_SERVER: &str = "redlease one server";
pub const CLUSTER: &str = "redlease cluster";
/// rslock's cluster mode, on the same cluster (its ratio is against redlease's).
#[cfg(feature = "redlease")]
pub const RSLOCK_CLUSTER: &str = "rslock cluster";

/// `redis+cluster://h1:p1,h2:p2` → `redis://h1:p1/`, `redis://h2:p2/`.
pub fn seed_urls(cluster_url: &str) -> Vec<String> {
    let hosts = cluster_url.trim_start_matches("redis+cluster://");
    hosts.split(',').map(|h| format!("redis://{h}/")).collect()
}

#[cfg(feature = "redlease")]
pub async fn cluster(r: &mut Runner, c: &Counts, cluster_url: &str, wants: impl Fn(&str) -> bool) {
    use crate::peers::rslock::Rslock;
    use crate::redlease_impl::Redlease;
    use crate::workloads::{many_keys, one_caller, wake_up};

    let url = r.url(0);
    let targets = [(ONE_SERVER, url.clone()), (CLUSTER, cluster_url.to_owned())];
    for (name, target) in targets.iter().filter(|_| wants("C1")) {
        let n = c.w1;
        r.measure(C1, name, |_| {
            let target = target.clone();
            async move { one_caller::run(Arc::new(Redlease::new(&target).await?), n).await }
        })
        .await;
    }
    if wants("C1") {
        let (n, seeds) = (c.w1, seed_urls(cluster_url));
        r.measure(C1, RSLOCK_CLUSTER, |_| {
            let seeds = seeds.clone();
            async move { one_caller::run(Arc::new(Rslock::new_cluster(&seeds)?), n).await }
        })
        .await;
    }
    for (name, target) in targets.iter().filter(|_| wants("C3")) {
        let (tasks, rounds) = (c.w3_tasks, c.w3_rounds);
        r.measure(C3, name, |_| {
            let target = target.clone();
            async move {
                many_keys::run(Arc::new(Redlease::new(&target).await?), tasks, rounds).await
            }
        })
        .await;
    }
    if wants("C3") {
        let (tasks, rounds, seeds) = (c.w3_tasks, c.w3_rounds, seed_urls(cluster_url));
        r.measure(C3, RSLOCK_CLUSTER, |_| {
            let seeds = seeds.clone();
            async move { many_keys::run(Arc::new(Rslock::new_cluster(&seeds)?), tasks, rounds).await }
        })
        .await;
    }
    for (name, target) in targets.iter().filter(|_| wants("C4")) {
        let n = c.w4[1];
        r.measure(C4, name, |_| {
            let target = target.clone();
            async move { renewal_tick(Arc::new(Redlease::new(&target).await?), n).await }
        })
        .await;
    }
    if !wants("C6") {
        return;
    }
    r.measure(C6, "floor (1 EVALSHA)", |_| {
        crate::floor::round_trip(url.clone(), c.rtt)
    })
    .await;
    for (name, target) in &targets {
        let n = c.w6;
        r.measure(C6, name, |_| {
            let target = target.clone();
            async move { wake_up::run(Arc::new(Redlease::new(&target).await?), n).await }
        })
        .await;
    }
}

#[cfg(not(feature = "redlease"))]
pub async fn cluster(r: &mut Runner, _: &Counts, _: &str, _: impl Fn(&str) -> bool) {
    for w in [C1, C3, C4, C6] {
        r.not_applicable(w, CLUSTER, "bench built without the `redlease` feature");
    }
}

/// W4 by the client's own counts (a cluster has no one server to count on): `n` held locks,
/// then one forced renewal of all of them.
#[cfg(feature = "redlease")]
async fn renewal_tick(
    l: Arc<crate::redlease_impl::Redlease>,
    n: usize,
) -> anyhow::Result<Vec<crate::model::Measure>> {
    use std::time::Instant;

    use crate::model::{HELD, LOST, MEM, Measure, TICK, TICK_RT, Unit};
    use crate::stats::micros;
    use crate::workloads::watchdog_scale::{hold_many, release_all};

    let held = hold_many(l.clone(), n).await?;
    let t0 = Instant::now();
    let stats = l.renew_now().await?;
    let wall = t0.elapsed();
    release_all(l.clone(), held.guards).await?;
    crate::locker::AsyncLocker::close(&*l).await;
    anyhow::ensure!(
        stats.locks >= n,
        "renewed {} of {n} held locks",
        stats.locks
    );
    Ok(vec![
        Measure::new(HELD, Unit::Count, stats.locks as f64),
        Measure::new(MEM, Unit::Bytes, held.bytes_per_lock),
        Measure::new(TICK, Unit::Micros, micros(wall)),
        Measure::new(TICK_RT, Unit::Count, stats.round_trips as f64),
        Measure::new(LOST, Unit::Count, stats.lost as f64),
    ])
}
