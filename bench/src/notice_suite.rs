//! The loss notice's workloads (redlease only: no peer is told of a lost lock before its next
//! renewal): L1 on one server, L1C on the 3-primary cluster, L1S behind Sentinel; one cell per
//! cause (workloads/loss_notice.rs).

use crate::config::Counts;
use crate::runner::Runner;
use crate::targets::Context;

/// Workload labels; the first word is what `--only` selects.
pub const L1: &str = "L1 loss notice, one server";
pub const L1C: &str = "L1C loss notice, cluster (3 primaries)";
pub const L1S: &str = "L1S loss notice, Sentinel (master + replica, 3 sentinels)";
pub const SELECTORS: [&str; 3] = ["L1", L1C_SELECTOR, L1S_SELECTOR];
/// L1C runs on the bench's cluster, L1S on a Sentinel deployment: the parent starts them.
pub const L1C_SELECTOR: &str = "L1C";
pub const L1S_SELECTOR: &str = "L1S";

/// Where L1C and L1S run (the parent starts them; `None` when it could not, with why).
#[cfg_attr(not(feature = "redlease"), expect(dead_code))]
pub struct Deployments {
    pub cluster_url: Option<String>,
    /// The `redis+sentinel://` URL and the master's `redis://` URL.
    pub sentinel: Option<(String, String)>,
    pub sentinel_missing: Option<String>,
}

/// Trials per cause and run: 100 (10 with `--quick`).
#[cfg(feature = "redlease")]
fn trials(c: &Counts) -> usize {
    c.w6.clamp(10, 100)
}

#[cfg(feature = "redlease")]
pub async fn loss_notice(
    r: &mut Runner,
    c: &Counts,
    wants: impl Fn(&str) -> bool,
    d: &Deployments,
) {
    use crate::cluster_suite::seed_urls;
    use crate::workloads::loss_notice::{Cause, Deployment, Target};

    let trials = trials(c);
    let mut targets = Vec::new();
    if wants("L1") {
        let url = r.url(0);
        let target = Target {
            deployment: Deployment::One,
            client_url: url.clone(),
            nodes: vec![url],
        };
        targets.push((L1, Some(target), ""));
    }
    if wants("L1C") {
        let target = d.cluster_url.as_ref().map(|url| Target {
            deployment: Deployment::Cluster,
            client_url: url.clone(),
            nodes: seed_urls(url),
        });
        targets.push((L1C, target, "no cluster"));
    }
    if wants("L1S") {
        let target = d.sentinel.as_ref().map(|(sentinel, master)| Target {
            deployment: Deployment::Sentinel,
            client_url: sentinel.clone(),
            nodes: vec![master.clone()],
        });
        let why = d
            .sentinel_missing
            .as_deref()
            .unwrap_or("no Sentinel deployment");
        targets.push((L1S, target, why));
    }
    for (label, target, why) in targets {
        let Some(target) = target else {
            r.not_applicable(label, "redlease Lock", why);
            continue;
        };
        for cause in Cause::ALL {
            r.measure(label, cause.name(target.deployment), |deadline| {
                let target = target.clone();
                async move {
                    crate::workloads::loss_notice::loss_notice(&target, cause, trials, deadline)
                        .await
                }
            })
            .await;
        }
    }
}

#[cfg(not(feature = "redlease"))]
pub async fn loss_notice(
    r: &mut Runner,
    _: &Counts,
    wants: impl Fn(&str) -> bool,
    _: &Deployments,
) {
    for label in [L1, L1C, L1S] {
        if wants(crate::model::family(label)) {
            r.not_applicable(
                label,
                "redlease",
                "bench built without the `redlease` feature",
            );
        }
    }
}

/// L1 at a glance: one row per deployment and cause, against issue 36's bars (one server: p99
/// ≤ 50 ms and max ≤ 200 ms; the cluster and Sentinel: p99 ≤ 200 ms).
pub fn report(ctx: &Context) -> String {
    use crate::model::{NOTICE, NOTICE_MAX, NOTICE_TRIALS, Outcome, Unit};
    use crate::report::fmt_value;
    let rows: Vec<_> = ctx
        .entries
        .iter()
        .filter(|e| SELECTORS.contains(&crate::model::family(&e.workload)))
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "L1 at a glance (the key gone to the holder's `lost()`; p50 and p99 are the medians over \
         the runs, max the largest of all runs; bars of issue 36):\n\n\
         | Deployment | Cause | p50 | p99 | max | trials | bar |\n|---|---|---:|---:|---:|---:|---|\n",
    );
    for e in rows {
        let deployment = e.workload.split_once(", ").map_or("", |(_, d)| d);
        let cause = e
            .implementation
            .split_once(": ")
            .map_or(e.implementation.as_str(), |(_, c)| c);
        let Outcome::Measured { .. } = &e.outcome else {
            let why = match &e.outcome {
                Outcome::NotApplicable(why) => format!("n/a: {why}"),
                Outcome::TimedOut(cap) => format!("timed out (cap {} s)", cap.as_secs()),
                Outcome::Failed(err) => format!("failed: {}", err.replace('|', "/")),
                Outcome::Measured { .. } => unreachable!(),
            };
            out += &format!("| {deployment} | {cause} | {why} | | | | |\n");
            continue;
        };
        let us = |v: Option<f64>| v.map_or("—".into(), |v| fmt_value(Unit::Micros, v));
        let notice = e.measure(NOTICE);
        let (p50, p99) = (notice.map(|m| m.value), notice.and_then(|m| m.p99));
        let max = e.measure(NOTICE_MAX).map(|m| m.value);
        let trials = e.measure(NOTICE_TRIALS).map_or(0.0, |m| m.value);
        let one_server = crate::model::family(&e.workload) == "L1";
        let met = match (p99, max) {
            (Some(p99), Some(max)) if one_server => p99 <= 50_000.0 && max <= 200_000.0,
            (Some(p99), _) => p99 <= 200_000.0,
            _ => false,
        };
        let bar = match (one_server, met) {
            (true, true) => "✅ p99 ≤ 50 ms, max ≤ 200 ms",
            (true, false) => "❌ p99 ≤ 50 ms, max ≤ 200 ms",
            (false, true) => "✅ p99 ≤ 200 ms",
            (false, false) => "❌ p99 ≤ 200 ms",
        };
        out += &format!(
            "| {deployment} | {cause} | {} | {} | {} | {trials:.0} | {bar} |\n",
            us(p50),
            us(p99),
            us(max)
        );
    }
    out + "\n"
}
