//! Runs each (workload, implementation) cell a few times under a time cap and
//! keeps the median of every metric.
//!
//! Every run of a cell is a fresh child process (this binary with `--cell`),
//! so that background tasks, threads, connections and heap left by one
//! implementation cannot disturb the next, and so that a run past its cap can
//! be killed. The parent owns the redis-servers and flushes them between runs.

use std::future::Future;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::model::{
    COUNTER, COUNTER_OFF, COUNTER_OFF_WRITES, DETAIL_LINE, Entry, FALSE_LOSSES, MEASURE_LINE,
    MOST_INSIDE, Measure, NOTICE_MAX, NOTICE_TRIALS, OVERLAPS, Outcome, TimedOut, family,
};
use crate::server::RedisServer;
use crate::stats::median;

const TIMED_OUT_LINE: &str = "TIMEDOUT";
const ERROR_LINE: &str = "ERROR";

pub enum Mode {
    /// Spawns `exe args.. --cell WORKLOAD IMPLEMENTATION` per run.
    Parent { exe: PathBuf, args: Vec<String> },
    /// Runs only this cell, once, and prints its measures.
    Child {
        workload: String,
        implementation: String,
    },
}

pub struct Runner {
    pub mode: Mode,
    pub runs: usize,
    pub cap: Duration,
    pub servers: Arc<Vec<RedisServer>>,
    pub entries: Vec<Entry>,
    /// Implementations to measure (all when empty); the floor always runs.
    pub impls: Vec<String>,
    /// Entries (indexes) of the cells waiting for `run_queued`.
    pub queued: Vec<usize>,
}

impl Runner {
    pub fn wants(&self, implementation: &str) -> bool {
        let family = family(implementation);
        family == "floor" || self.impls.is_empty() || self.impls.iter().any(|i| i == family)
    }

    /// Measures one cell: `f(deadline)` does one run and returns its measures.
    /// The parent only queues the cell; `run_queued` runs the queued cells.
    pub async fn measure<F, Fut>(&mut self, workload: &str, implementation: &str, f: F)
    where
        F: FnMut(Instant) -> Fut,
        Fut: Future<Output = Result<Vec<Measure>>>,
    {
        match &self.mode {
            Mode::Child {
                workload: w,
                implementation: i,
            } => {
                if w == workload && i == implementation {
                    // A fault-free workload's redlease cell also reports its false losses
                    // (unless it counted them itself, over its own processes).
                    let watched = crate::losses::watched(workload, implementation);
                    let mut f = f;
                    run_here(self.cap, move |deadline| {
                        let run = f(deadline);
                        async move {
                            let mut measures = run.await?;
                            if watched && !measures.iter().any(|m| m.metric == FALSE_LOSSES) {
                                measures.push(crate::losses::measure(0));
                            }
                            Ok(measures)
                        }
                    })
                    .await;
                }
            }
            Mode::Parent { .. } if self.wants(implementation) => {
                self.queued.push(self.entries.len());
                self.push(workload, implementation, Outcome::Failed("not run".into()));
            }
            Mode::Parent { .. } => {}
        }
    }

    /// Runs the queued cells round-robin (run 1 of every cell, then run 2, ...)
    /// so that a change in machine load hits all of them alike; a cell that
    /// fails or times out is not run again.
    pub async fn run_queued(&mut self) {
        let queued = std::mem::take(&mut self.queued);
        let mut runs: Vec<Vec<Vec<Measure>>> = vec![Vec::new(); queued.len()];
        let mut details: Vec<Vec<Vec<String>>> = vec![Vec::new(); queued.len()];
        let mut failed: Vec<Option<Outcome>> = vec![None; queued.len()];
        for run in 1..=self.runs {
            for (k, &idx) in queued.iter().enumerate() {
                if failed[k].is_some() {
                    continue;
                }
                let (w, i) = (
                    &self.entries[idx].workload,
                    &self.entries[idx].implementation,
                );
                eprint!("{w:<12} {i:<30} run {run}/{} ...", self.runs);
                let started = Instant::now();
                let result = match self.servers.iter().try_for_each(RedisServer::flush) {
                    Ok(()) => self.run_child(w, i).await,
                    Err(e) => Err(e.context("flush")),
                };
                match result {
                    Ok((m, d)) => {
                        details[k].push(d);
                        let first = m.first().map(|m| {
                            format!("{} {}", m.metric, crate::report::fmt_value(m.unit, m.value))
                        });
                        let secs = started.elapsed().as_secs_f64();
                        eprintln!(" {secs:.1} s  {}", first.unwrap_or_default());
                        runs[k].push(m);
                    }
                    Err(e) if e.is::<TimedOut>() => {
                        eprintln!(" timed out");
                        failed[k] = Some(Outcome::TimedOut(self.cap));
                    }
                    Err(e) => {
                        eprintln!(" failed: {e:#}");
                        failed[k] = Some(Outcome::Failed(format!("{e:#}")));
                    }
                }
            }
        }
        for (k, idx) in queued.into_iter().enumerate() {
            self.entries[idx].outcome = failed[k].take().unwrap_or_else(|| combine(&runs[k]));
            self.entries[idx].details = std::mem::take(&mut details[k]);
        }
    }

    pub fn not_applicable(&mut self, workload: &str, implementation: &str, reason: &str) {
        if matches!(self.mode, Mode::Parent { .. }) && self.wants(implementation) {
            self.push(
                workload,
                implementation,
                Outcome::NotApplicable(reason.into()),
            );
        }
    }

    fn push(&mut self, workload: &str, implementation: &str, outcome: Outcome) {
        self.entries.push(Entry {
            workload: workload.into(),
            implementation: implementation.into(),
            outcome,
            details: Vec::new(),
        });
    }

    pub fn url(&self, i: usize) -> String {
        self.servers[i].url()
    }

    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    /// One run of a cell in a child process: its measures and its `DETAIL` lines.
    async fn run_child(
        &self,
        workload: &str,
        implementation: &str,
    ) -> Result<(Vec<Measure>, Vec<String>)> {
        let Mode::Parent { exe, args } = &self.mode else {
            unreachable!("only the parent spawns runs");
        };
        let child = tokio::process::Command::new(exe)
            .args(args)
            .args(["--cell", workload, implementation])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("spawning a run")?;
        let grace = self.cap + Duration::from_secs(15);
        let out = match tokio::time::timeout(grace, child.wait_with_output()).await {
            Ok(out) => out?,
            Err(_) => return Err(TimedOut.into()),
        };
        let stdout = String::from_utf8_lossy(&out.stdout);
        let mut measures = Vec::new();
        let mut details = Vec::new();
        for line in stdout.lines() {
            if line == TIMED_OUT_LINE {
                return Err(TimedOut.into());
            } else if let Some(err) = line.strip_prefix(ERROR_LINE) {
                anyhow::bail!("{}", err.trim());
            } else if line.starts_with(MEASURE_LINE) {
                measures.push(Measure::from_line(line)?);
            } else if let Some(d) = line.strip_prefix(DETAIL_LINE) {
                details.push(d.trim_start_matches('\t').to_string());
            }
        }
        if !out.status.success() || measures.is_empty() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(3).collect();
            anyhow::bail!(
                "run exited with {} and no result: {}",
                out.status,
                tail.join(" / ")
            );
        }
        Ok((measures, details))
    }
}

/// The child side: one run, printed on stdout for the parent.
async fn run_here<F, Fut>(cap: Duration, mut f: F)
where
    F: FnMut(Instant) -> Fut,
    Fut: Future<Output = Result<Vec<Measure>>>,
{
    let deadline = Instant::now() + cap;
    match tokio::time::timeout(cap + Duration::from_secs(5), f(deadline)).await {
        Ok(Ok(measures)) => measures.iter().for_each(|m| println!("{}", m.to_line())),
        Ok(Err(e)) if e.is::<TimedOut>() => println!("{TIMED_OUT_LINE}"),
        Err(_) => println!("{TIMED_OUT_LINE}"),
        Ok(Err(e)) => println!("{ERROR_LINE} {}", format!("{e:#}").replace('\n', " ")),
    }
}

/// Median of each metric over the runs (the minimum for the W2 counter, the worst run for the
/// other checks, so that a lost update or an overlap in any run shows; the sum of false losses
/// and of L1's trials, the largest of L1's maxima), in the order of the first run.
fn combine(runs: &[Vec<Measure>]) -> Outcome {
    let Some(first) = runs.first() else {
        return Outcome::Failed("no run".into());
    };
    let measures = first
        .iter()
        .map(|m| {
            let same = || {
                runs.iter()
                    .filter_map(|r| r.iter().find(|x| x.metric == m.metric))
            };
            let values: Vec<f64> = same().map(|x| x.value).collect();
            let p99s: Vec<f64> = same().filter_map(|x| x.p99).collect();
            let value = if m.metric == COUNTER {
                values.iter().copied().fold(f64::INFINITY, f64::min)
            } else if m.metric == COUNTER_OFF
                || m.metric == COUNTER_OFF_WRITES
                || m.metric == OVERLAPS
            {
                // The worst run: a lost update in any run shows.
                values
                    .iter()
                    .copied()
                    .fold(0.0_f64, |a, b| if b.abs() > a.abs() { b } else { a })
            } else if m.metric == MOST_INSIDE || m.metric == NOTICE_MAX {
                values.iter().copied().fold(f64::NEG_INFINITY, f64::max)
            } else if m.metric == FALSE_LOSSES || m.metric == NOTICE_TRIALS {
                values.iter().sum()
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
    Outcome::Measured {
        runs: runs.len(),
        measures,
    }
}
