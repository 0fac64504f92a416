//! Runs each (workload, implementation) a few times under a time cap and
//! keeps the median of every metric.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;

use crate::model::{COUNTER, Entry, Measure, Outcome, TimedOut};
use crate::server::RedisServer;
use crate::stats::median;

pub struct Runner {
    pub runs: usize,
    pub cap: Duration,
    pub servers: Arc<Vec<RedisServer>>,
    pub entries: Vec<Entry>,
    /// Implementations to measure (all when empty).
    pub impls: Vec<String>,
}

impl Runner {
    pub fn wants(&self, implementation: &str) -> bool {
        let family = implementation.split_whitespace().next().unwrap_or("");
        family == "floor" || self.impls.is_empty() || self.impls.iter().any(|i| i == family)
    }

    /// Runs `f(deadline)` `self.runs` times on flushed servers; a run that
    /// passes the deadline (or the cap plus a grace period) ends the series.
    pub async fn measure<F, Fut>(&mut self, workload: &str, implementation: &str, mut f: F)
    where
        F: FnMut(Instant) -> Fut,
        Fut: Future<Output = Result<Vec<Measure>>>,
    {
        if !self.wants(implementation) {
            return;
        }
        let mut runs: Vec<Vec<Measure>> = Vec::new();
        let mut failure = None;
        for run in 1..=self.runs {
            eprint!("{workload:<6} {implementation:<34} run {run}/{} ...", self.runs);
            if let Err(e) = self.flush() {
                failure = Some(Outcome::Failed(format!("flush: {e:#}")));
                eprintln!(" flush failed: {e:#}");
                break;
            }
            let started = Instant::now();
            let deadline = started + self.cap;
            let grace = self.cap + Duration::from_secs(10);
            match tokio::time::timeout(grace, f(deadline)).await {
                Ok(Ok(m)) => {
                    eprintln!(" {:.1} s", started.elapsed().as_secs_f64());
                    runs.push(m);
                }
                Ok(Err(e)) if e.is::<TimedOut>() => {
                    eprintln!(" timed out");
                    failure = Some(Outcome::TimedOut(self.cap));
                    break;
                }
                Err(_) => {
                    eprintln!(" timed out");
                    failure = Some(Outcome::TimedOut(self.cap));
                    break;
                }
                Ok(Err(e)) => {
                    eprintln!(" failed: {e:#}");
                    failure = Some(Outcome::Failed(format!("{e:#}")));
                    break;
                }
            }
        }
        let outcome = failure.unwrap_or_else(|| combine(&runs));
        self.push(workload, implementation, outcome);
    }

    pub fn not_applicable(&mut self, workload: &str, implementation: &str, reason: &str) {
        if self.wants(implementation) {
            self.push(workload, implementation, Outcome::NotApplicable(reason.into()));
        }
    }

    pub fn push(&mut self, workload: &str, implementation: &str, outcome: Outcome) {
        self.entries.push(Entry {
            workload: workload.into(),
            implementation: implementation.into(),
            outcome,
        });
    }

    pub fn url(&self, i: usize) -> String {
        self.servers[i].url()
    }

    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    fn flush(&self) -> Result<()> {
        self.servers.iter().try_for_each(RedisServer::flush)
    }
}

/// Median of each metric over the runs (the minimum for the W2 counter), in
/// the order of the first run.
fn combine(runs: &[Vec<Measure>]) -> Outcome {
    let Some(first) = runs.first() else {
        return Outcome::Failed("no run".into());
    };
    let measures = first
        .iter()
        .map(|m| {
            let same = || runs.iter().filter_map(|r| r.iter().find(|x| x.metric == m.metric));
            let values: Vec<f64> = same().map(|x| x.value).collect();
            let p99s: Vec<f64> = same().filter_map(|x| x.p99).collect();
            // A lost update in any run must show: the counter reports its worst run.
            let value = if m.metric == COUNTER {
                values.iter().copied().fold(f64::INFINITY, f64::min)
            } else {
                median(&values)
            };
            Measure {
                metric: m.metric,
                unit: m.unit,
                value,
                p99: m.p99.map(|_| median(&p99s)),
            }
        })
        .collect();
    Outcome::Measured { runs: runs.len(), measures }
}
