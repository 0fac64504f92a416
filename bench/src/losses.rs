//! False losses: a holder's lease marked lost in a fault-free workload (W1–W7, K1–K3), where
//! nothing deletes, flushes, evicts or forces a key and every server stays up. Any such loss is
//! a false one.
//!
//! Counted from the library's own metric: every process of the bench installs a `metrics`
//! recorder that counts `redlease_leases_lost_total` increments (every reason but `shutdown`:
//! a hold given back by `Client::shutdown` while its guard lived is a guard the workload left
//! behind, not a loss) and hands out no-op handles for every other metric, so the library's
//! hot paths pay a name comparison per metric call. A redlease cell of a fault-free workload
//! adds the count of its process (and, for K processes, theirs) as the measure
//! [`FALSE_LOSSES`]; the report sums them over every cell and run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};

use crate::model::{Entry, FALSE_LOSSES, Measure, Unit as MUnit, family};

const LEASES_LOST: &str = "redlease_leases_lost_total";

static LOST: LazyLock<Arc<AtomicU64>> = LazyLock::new(|| Arc::new(AtomicU64::new(0)));

struct LostCounter;

impl Recorder for LostCounter {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        let shutdown = key
            .labels()
            .any(|l| l.key() == "reason" && l.value() == "shutdown");
        if key.name() == LEASES_LOST && !shutdown {
            Counter::from_arc(LOST.clone())
        } else {
            Counter::noop()
        }
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// Installs the counting recorder for this process (once; later calls do nothing).
pub fn install() {
    let _ = metrics::set_global_recorder(LostCounter);
}

/// Leases lost in this process so far.
pub fn count() -> u64 {
    LOST.load(Ordering::Relaxed)
}

/// The fault-free workloads whose redlease cells report their false losses.
const FAULT_FREE: [&str; 10] = ["W1", "W2", "W3", "W4", "W5", "W6", "W7", "K1", "K2", "K3"];

/// Whether a cell reports its false losses.
pub fn watched(workload: &str, implementation: &str) -> bool {
    FAULT_FREE.contains(&family(workload)) && family(implementation) == "redlease"
}

/// This process's count as the cell's measure.
pub fn measure(extra: u64) -> Measure {
    Measure::new(FALSE_LOSSES, MUnit::Count, (count() + extra) as f64)
}

/// The report's line: false losses summed over every cell (and run) that counted them.
pub fn summary(entries: &[Entry]) -> String {
    let counted: Vec<(&Entry, f64)> = entries
        .iter()
        .filter_map(|e| e.measure(FALSE_LOSSES).map(|m| (e, m.value)))
        .collect();
    if counted.is_empty() {
        return String::new();
    }
    let total: f64 = counted.iter().map(|(_, v)| v).sum();
    let cells: Vec<String> = counted
        .iter()
        .filter(|(_, v)| *v > 0.0)
        .map(|(e, v)| format!("{} / {}: {v:.0}", e.workload, e.implementation))
        .collect();
    let verdict = if total == 0.0 {
        "0 (expected 0)".to_string()
    } else {
        format!("❌ {total:.0} (expected 0): {}", cells.join("; "))
    };
    format!(
        "False losses (a holder's lease marked lost in a fault-free workload, every redlease \
         cell of W1–W7 and K1–K3, all runs; `redlease_leases_lost_total`, reason `shutdown` \
         excluded): {verdict}, over {} cells.\n\n",
        counted.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_free_redlease_cells_are_watched() {
        assert!(watched("W1", "redlease"));
        assert!(watched("W4 (10,000)", "redlease"));
        assert!(watched("W5", "redlease RedLock(5)"));
        assert!(watched("W7 4 processes", "redlease FairLock"));
        assert!(watched(
            "K1 waiters 64 processes",
            "redlease Lock, fixed lease"
        ));
        assert!(!watched("W1", "rslock"));
        assert!(!watched("W7 4 processes", "floor (BLPOP/LPUSH token)"));
        assert!(!watched("L1 loss notice, one server", "redlease Lock: DEL"));
        assert!(!watched("E2", "redlease"));
    }

    /// The library's lost-lease counter is counted, except for holds given back at shutdown;
    /// other metrics are not.
    #[test]
    fn counts_lost_leases_but_not_shutdowns() {
        let before = count();
        metrics::with_local_recorder(&LostCounter, || {
            metrics::counter!(LEASES_LOST, "kind" => "lock", "reason" => "server_lost")
                .increment(1);
            metrics::counter!(LEASES_LOST, "kind" => "lock", "reason" => "renewal_failed")
                .increment(2);
            metrics::counter!(LEASES_LOST, "kind" => "lock", "reason" => "shutdown").increment(5);
            metrics::counter!("redlease_handovers_total", "kind" => "lock").increment(7);
        });
        assert_eq!(count() - before, 3);
    }
}
