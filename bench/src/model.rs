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
        Measure { metric, unit, value, p99: None }
    }

    pub fn dist(metric: &'static str, p50_us: f64, p99_us: f64) -> Self {
        Measure { metric, unit: Unit::Micros, value: p50_us, p99: Some(p99_us) }
    }
}

#[derive(Clone, Debug)]
pub enum Outcome {
    /// Median over the runs of each metric.
    Measured { runs: usize, measures: Vec<Measure> },
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
pub const TICK_CMDS: &str = "tick commands seen by server";
pub const LOST: &str = "locks lost in tick";
pub const PERIOD_CMDS: &str = "renewal commands per renewal period";
pub const WAKE: &str = "wake-up latency";
pub const RTT: &str = "EVALSHA round trip";
