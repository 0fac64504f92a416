//! What a workload run produces, and what the report is built from.

use std::fmt;
use std::time::Duration;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Unit {
    /// A duration in microseconds.
    Micros,
    PerSec,
    Count,
    Bytes,
}

/// One metric of one run: `value` is the metric itself or the p50 of a
/// latency distribution, `p99` is set for distributions.
#[derive(Clone, Debug)]
pub struct Measure {
    pub metric: &'static str,
    pub unit: Unit,
    pub value: f64,
    pub p99: Option<f64>,
}

impl Measure {
    pub fn new(metric: &'static str, unit: Unit, value: f64) -> Self {
        Measure {
            metric,
            unit,
            value,
            p99: None,
        }
    }

    pub fn dist(metric: &'static str, p50_us: f64, p99_us: f64) -> Self {
        Measure {
            metric,
            unit: Unit::Micros,
            value: p50_us,
            p99: Some(p99_us),
        }
    }
}

#[derive(Clone, Debug)]
pub enum Outcome {
    /// Median over the runs of each metric.
    Measured {
        runs: usize,
        measures: Vec<Measure>,
    },
    NotApplicable(String),
    TimedOut(Duration),
    Failed(String),
}

#[derive(Clone, Debug)]
pub struct Entry {
    pub workload: String,
    pub implementation: String,
    pub outcome: Outcome,
}

impl Entry {
    pub fn measure(&self, metric: &str) -> Option<&Measure> {
        match &self.outcome {
            Outcome::Measured { measures, .. } => measures.iter().find(|m| m.metric == metric),
            _ => None,
        }
    }
}

/// Error returned by a workload that passed its deadline.
#[derive(Debug)]
pub struct TimedOut;

impl fmt::Display for TimedOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("timed out")
    }
}

impl std::error::Error for TimedOut {}

// Metric names, shared by the workloads and the report.
pub const PAIR: &str = "lock+unlock latency";
pub const PAIRS_PER_SEC: &str = "lock+unlock pairs/s";
pub const ACQ_PER_SEC: &str = "acquisitions/s";
pub const COUNTER: &str = "final counter";
pub const HANDOFFS: &str = "handoffs between tasks";
pub const WAIT: &str = "lock wait";
pub const WAIT_MAX: &str = "max lock wait";
pub const HELD: &str = "locks held";
pub const MEM: &str = "client heap per held lock";
pub const TICK: &str = "renewal tick time";
pub const TICK_RT: &str = "tick round trips (RenewStats)";
pub const TICK_SCRIPTS: &str = "tick script calls seen by server";
pub const TICK_CMDS: &str = "tick commands seen by server (incl. in scripts)";
pub const LOST: &str = "locks lost in tick";
pub const FAILED_BATCHES: &str = "failed batches in tick";
pub const PERIOD_SCRIPTS: &str = "renewal script calls per 5 s period (server)";
pub const WAKE: &str = "wake-up latency";
pub const RTT: &str = "EVALSHA round trip";
pub const RTT_IDLE: &str = "EVALSHA round trip after a 2-8 ms idle gap";
pub const RTT_WAKE: &str =
    "W6-shaped: after the idle gap, one task's EVALSHA returns and wakes another for the timed one";

const METRICS: &[&str] = &[
    PAIR,
    PAIRS_PER_SEC,
    ACQ_PER_SEC,
    COUNTER,
    HANDOFFS,
    WAIT,
    WAIT_MAX,
    HELD,
    MEM,
    TICK,
    TICK_RT,
    TICK_SCRIPTS,
    TICK_CMDS,
    LOST,
    FAILED_BATCHES,
    PERIOD_SCRIPTS,
    WAKE,
    RTT,
    RTT_IDLE,
    RTT_WAKE,
];

const UNITS: &[(Unit, &str)] = &[
    (Unit::Micros, "us"),
    (Unit::PerSec, "per_s"),
    (Unit::Count, "count"),
    (Unit::Bytes, "bytes"),
];

/// Line prefix of a measure printed by a child process.
pub const MEASURE_LINE: &str = "MEASURE";

impl Measure {
    /// `MEASURE<TAB>metric<TAB>unit<TAB>value<TAB>p99` (p99 empty when none).
    pub fn to_line(&self) -> String {
        let unit = UNITS.iter().find(|u| u.0 == self.unit).map_or("?", |u| u.1);
        let p99 = self.p99.map(|p| p.to_string()).unwrap_or_default();
        format!(
            "{MEASURE_LINE}\t{}\t{unit}\t{}\t{p99}",
            self.metric, self.value
        )
    }

    pub fn from_line(line: &str) -> Option<Measure> {
        let mut f = line
            .strip_prefix(MEASURE_LINE)?
            .strip_prefix('\t')?
            .split('\t');
        let name = f.next()?;
        let metric = *METRICS.iter().find(|m| **m == name)?;
        let unit_name = f.next()?;
        let unit = UNITS.iter().find(|u| u.1 == unit_name)?.0;
        let value = f.next()?.parse().ok()?;
        let p99 = f
            .next()
            .filter(|s| !s.is_empty())
            .and_then(|s| s.parse().ok());
        Some(Measure {
            metric,
            unit,
            value,
            p99,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measure_lines_round_trip() {
        for m in [
            Measure::dist(PAIR, 31.5, 80.25),
            Measure::new(COUNTER, Unit::Count, 4000.0),
        ] {
            let back = Measure::from_line(&m.to_line()).expect("parses");
            assert_eq!(
                (back.metric, back.unit, back.value, back.p99),
                (m.metric, m.unit, m.value, m.p99)
            );
        }
        assert!(Measure::from_line("MEASURE\tnope\tus\t1\t").is_none());
    }
}
