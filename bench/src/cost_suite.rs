//! The cost curves of issue 39 beyond K1 (the waiter curve, on W7's machinery in
//! workloads/processes.rs): K2, the holds curve (workloads/hold_cost.rs), and K3, the clients
//! curve (workloads/clients.rs).

use crate::config::Counts;
use crate::runner::Runner;
use crate::targets::Context;

pub const K2_IMPL: &str = "redlease Lock (watchdog)";

pub fn k2_label(n: usize) -> String {
    format!(
        "K2 holds ({})",
        crate::report::fmt_value(crate::model::Unit::Count, n as f64)
    )
}

pub fn k3_label(n: usize) -> String {
    format!("K3 clients ({n} processes)")
}

#[cfg(feature = "redlease")]
pub async fn holds(r: &mut Runner, c: &Counts) {
    let url = r.url(0);
    let lease = c.k2_lease;
    for &n in &c.k2_holds {
        r.measure(&k2_label(n), K2_IMPL, |_| {
            let url = url.clone();
            async move { crate::workloads::hold_cost::run(&url, n, lease).await }
        })
        .await;
    }
}

#[cfg(feature = "redlease")]
pub async fn clients(r: &mut Runner, c: &Counts) {
    use crate::workloads::clients::{REDLEASE, RSLOCK, run};
    let (url, n) = (r.url(0), c.k3_clients);
    for implementation in [REDLEASE, RSLOCK] {
        r.measure(&k3_label(n), implementation, |_| {
            let url = url.clone();
            async move { run(implementation, &url, n).await }
        })
        .await;
    }
}

#[cfg(not(feature = "redlease"))]
pub async fn holds(r: &mut Runner, c: &Counts) {
    for &n in &c.k2_holds {
        r.not_applicable(
            &k2_label(n),
            K2_IMPL,
            "bench built without the `redlease` feature",
        );
    }
}

#[cfg(not(feature = "redlease"))]
pub async fn clients(r: &mut Runner, c: &Counts) {
    let label = k3_label(c.k3_clients);
    r.not_applicable(
        &label,
        "redlease",
        "bench built without the `redlease` feature",
    );
}

/// K2 and K3 at a glance (medians over the runs).
pub fn report(ctx: &Context) -> String {
    use crate::model::{
        CONNS_PER_CLIENT, Entry, LONGEST_CALL, MEM, RENEW_SCRIPT_US_PER_SEC, RENEW_SCRIPTS_PER_SEC,
        SERVER_CPU_IDLE_PER_SEC, SERVER_CPU_PER_SEC, SERVER_MEM_PER_CLIENT, SLOW_CALLS, Unit,
        WATCHDOG_LEASE, family,
    };
    use crate::report::fmt_value;
    let of = |selector: &str| -> Vec<&Entry> {
        ctx.entries
            .iter()
            .filter(|e| {
                family(&e.workload) == selector && e.measure(MEM).is_some()
                    || family(&e.workload) == selector && e.measure(CONNS_PER_CLIENT).is_some()
            })
            .collect()
    };
    let show = |e: &Entry, metric: &str, unit: Unit| {
        e.measure(metric)
            .map(|m| fmt_value(unit, m.value))
            .unwrap_or_default()
    };
    let mut out = String::new();
    let k2 = of("K2");
    if !k2.is_empty() {
        out += "K2 at a glance (one client holding N locks under the watchdog; server figures per \
                second over two renewal periods; \"% of a core\" is the server process's CPU, its \
                idle baseline beside it; longest call from SLOWLOG, 0 = none ≥ 100 µs):\n\n\
                | Holds | lease | client heap / hold | renewal script calls/s | server µs/s in script calls | \
                server CPU, % of a core | idle baseline | longest call | calls ≥ 1 ms |\n\
                |---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
        for e in k2 {
            let pct = |metric: &str| {
                e.measure(metric)
                    .map(|m| format!("{:.2} %", m.value / 1e4))
                    .unwrap_or_default()
            };
            let holds = e.workload.trim_start_matches("K2 holds ");
            out += &format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                holds.trim_matches(|c| c == '(' || c == ')'),
                show(e, WATCHDOG_LEASE, Unit::Micros),
                show(e, MEM, Unit::Bytes),
                show(e, RENEW_SCRIPTS_PER_SEC, Unit::Ratio),
                show(e, RENEW_SCRIPT_US_PER_SEC, Unit::Micros),
                pct(SERVER_CPU_PER_SEC),
                pct(SERVER_CPU_IDLE_PER_SEC),
                show(e, LONGEST_CALL, Unit::Micros),
                show(e, SLOW_CALLS, Unit::Count),
            );
        }
        out += "\n";
        for e in of("K2") {
            if let Some(first) = e.details.first().and_then(|d| d.first()) {
                out += &format!("- {} (first run): {first}\n", e.workload);
            }
        }
        out += "\n";
    }
    let k3 = of("K3");
    if !k3.is_empty() {
        out += "K3 at a glance (N client processes, one held lock each; the server's INFO before \
                they start and once all hold, per process):\n\n\
                | Clients | Implementation | server connections per client | server memory per client |\n\
                |---|---|---:|---:|\n";
        for e in k3 {
            out += &format!(
                "| {} | {} | {} | {} |\n",
                e.workload
                    .trim_start_matches("K3 clients (")
                    .trim_end_matches(" processes)"),
                e.implementation,
                show(e, CONNS_PER_CLIENT, Unit::Ratio),
                show(e, SERVER_MEM_PER_CLIENT, Unit::Bytes),
            );
        }
        out += "\n";
    }
    out
}
