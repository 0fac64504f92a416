//! What a workload run produces, and what the report is built from.

use std::fmt;
use std::time::Duration;

use anyhow::{Context, Result};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Unit {
    /// A duration in microseconds.
    Micros,
    PerSec,
    Count,
    Bytes,
    /// A plain number with decimals (a fraction, a ratio, calls per acquisition).
    Ratio,
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
    /// The `DETAIL` lines of each run, for a workload's own section of the report (S1's
    /// per-command breakdown); empty for the others.
    pub details: Vec<Vec<String>>,
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

/// First word of an implementation name: "rslock RedLock(5)" -> "rslock".
pub fn family(implementation: &str) -> &str {
    implementation.split_whitespace().next().unwrap_or("")
}

/// Declares the metric names and `METRICS`, the list of them all, which maps a
/// name read back from a child process to its constant.
macro_rules! metrics {
    ($($name:ident = $text:expr;)*) => {
        $(pub const $name: &str = $text;)*
        const METRICS: &[&str] = &[$($name),*];
    };
}

// Metric names, shared by the workloads and the report.
metrics! {
    PAIR = "lock+unlock latency";
    PAIRS_PER_SEC = "lock+unlock pairs/s";
    ACQ_PER_SEC = "acquisitions/s";
    COUNTER = "final counter";
    HANDOFFS = "handoffs between tasks";
    WAIT = "lock wait";
    WAIT_MAX = "max lock wait";
    READS_PER_SEC = "read acquisitions/s";
    WRITE_WAIT_MAX = "max write lock wait";
    HELD = "locks held";
    MEM = "client heap per held lock";
    TICK = "renewal tick time";
    TICK_RT = "tick round trips (RenewStats)";
    TICK_SCRIPTS = "tick script calls seen by server";
    TICK_CMDS = "tick commands seen by server (incl. in scripts)";
    LOST = "locks lost in tick";
    FAILED_BATCHES = "failed batches in tick";
    PERIOD_SCRIPTS = "renewal script calls per 5 s period (server)";
    WAKE = "wake-up latency";
    RTT = "EVALSHA round trip";
    RTT_IDLE = "EVALSHA round trip after a 2-8 ms idle gap";
    TAKEOVER_RESIGN = "resign() to the next leader's campaign returning";
    TAKEOVER_KILL = "kill -9 of the leader to the next leader's campaign returning";
    LEASE = "leader lease";
    NOTICE = "the key gone to the holder's lost()";
    NOTICE_MAX = "max the key gone to the holder's lost() (all runs)";
    NOTICE_TRIALS = "trials (all runs)";
    RTT_WAKE = "W6-shaped: after the idle gap, one task's EVALSHA returns and wakes another for the timed one";
    ACQUISITIONS = "acquisitions";
    SCRIPTS_PER_ACQ = "script calls per acquisition (server)";
    SCRIPT_US_PER_ACQ = "server µs in script calls per acquisition (commandstats)";
    CLIENT_CPU_PER_ACQ = "client CPU µs per acquisition (all processes, user + system)";
    CLIENT_VCSW_PER_ACQ = "client voluntary context switches per acquisition (all processes)";
    CLIENT_IVCSW_PER_ACQ = "client involuntary context switches per acquisition (all processes)";
    JAIN = "fairness over processes (Jain)";
    COUNTER_OFF = "counter − acquisitions (0 = exact)";
    WRITES = "write acquisitions";
    COUNTER_OFF_WRITES = "counter − writes (0 = exact)";
    MOST_INSIDE = "most holders inside at once (INCR)";
    OVERLAPS = "acquisitions that overlapped a write, or a write anybody (0 = none)";
    SERVER_US = "server µs per pair (commandstats, top-level)";
    SERVER_CPU_US = "server CPU µs per pair (main thread, incl. I/O)";
    CALLS_PER_PAIR = "calls per pair (top-level)";
    CMDS_PER_PAIR = "commands per pair (incl. in scripts)";
    FALSE_LOSSES = "false losses (all runs; 0 expected)";
    WATCHDOG_LEASE = "watchdog lease";
    WINDOW = "measuring window";
    RENEW_SCRIPTS_PER_SEC = "renewal script calls per second (server)";
    RENEW_SCRIPT_US_PER_SEC = "server µs per second in script calls (commandstats)";
    SERVER_CPU_PER_SEC = "server CPU µs per second (used_cpu_sys + used_cpu_user)";
    SERVER_CPU_IDLE_PER_SEC = "server CPU µs per second, client connected, nothing held";
    LONGEST_CALL = "longest single call (SLOWLOG, calls ≥ 100 µs)";
    SLOW_CALLS = "calls ≥ 1 ms (SLOWLOG)";
    CLIENT_PROCS = "client processes, one held lock each";
    CONNS_PER_CLIENT = "server connections per client process";
    SERVER_MEM_PER_CLIENT = "server memory per client process (INFO used_memory)";
}

impl Unit {
    pub fn name(self) -> &'static str {
        match self {
            Unit::Micros => "us",
            Unit::PerSec => "per_s",
            Unit::Count => "count",
            Unit::Bytes => "bytes",
            Unit::Ratio => "ratio",
        }
    }

    pub fn parse(name: &str) -> Option<Unit> {
        match name {
            "us" => Some(Unit::Micros),
            "per_s" => Some(Unit::PerSec),
            "count" => Some(Unit::Count),
            "bytes" => Some(Unit::Bytes),
            "ratio" => Some(Unit::Ratio),
            _ => None,
        }
    }
}

/// Line prefix of a measure printed by a child process.
pub const MEASURE_LINE: &str = "MEASURE";
/// Line prefix of a child's other output for the report (tab-separated fields after it), kept
/// per run in [`Entry::details`].
pub const DETAIL_LINE: &str = "DETAIL";

impl Measure {
    /// `MEASURE<TAB>metric<TAB>unit<TAB>value<TAB>p99` (p99 empty when none).
    pub fn to_line(&self) -> String {
        let p99 = self.p99.map(|p| p.to_string()).unwrap_or_default();
        format!(
            "{MEASURE_LINE}\t{}\t{}\t{}\t{p99}",
            self.metric,
            self.unit.name(),
            self.value
        )
    }

    /// Parses a line of `to_line`; an unknown metric or unit is an error.
    pub fn from_line(line: &str) -> Result<Measure> {
        let parse = || -> Result<Measure> {
            let mut f = line
                .strip_prefix(MEASURE_LINE)
                .and_then(|l| l.strip_prefix('\t'))
                .context("no MEASURE prefix")?
                .split('\t');
            let name = f.next().context("no metric")?;
            let metric = *METRICS
                .iter()
                .find(|m| **m == name)
                .with_context(|| format!("unknown metric {name:?} (not in model::METRICS)"))?;
            let unit_name = f.next().context("no unit")?;
            let unit =
                Unit::parse(unit_name).with_context(|| format!("unknown unit {unit_name:?}"))?;
            let value = f.next().context("no value")?.parse()?;
            let p99 = match f.next().filter(|s| !s.is_empty()) {
                Some(p) => Some(p.parse()?),
                None => None,
            };
            Ok(Measure {
                metric,
                unit,
                value,
                p99,
            })
        };
        parse().with_context(|| format!("unparsable measure line {line:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measure_lines_round_trip() {
        let units = [
            Unit::Micros,
            Unit::PerSec,
            Unit::Count,
            Unit::Bytes,
            Unit::Ratio,
        ];
        for unit in units {
            assert_eq!(Unit::parse(unit.name()), Some(unit));
        }
        for &metric in METRICS {
            for m in [
                Measure::dist(metric, 31.5, 80.25),
                Measure::new(metric, units[metric.len() % units.len()], 4000.0),
            ] {
                let back = Measure::from_line(&m.to_line()).expect("parses");
                assert_eq!(
                    (back.metric, back.unit, back.value, back.p99),
                    (m.metric, m.unit, m.value, m.p99)
                );
            }
        }
        assert!(Measure::from_line("MEASURE\tnope\tus\t1\t").is_err());
        assert!(Measure::from_line("MEASURE\tlock wait\tfurlongs\t1\t").is_err());
        assert!(Measure::from_line("MEASURE\tlock wait\tus\tx\t").is_err());
    }
}
