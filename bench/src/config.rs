//! Command-line flags and workload sizes.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Result, bail};

use crate::affinity::Placement;
use crate::model::family;

pub const USAGE: &str = "usage: redlease-bench [--quick] [--only W1,W2,...] [--impls redlease,rslock,...]
                      [--runs N] [--cap SECONDS] [--out PATH] [--workers N] [--placement same|split|none]
  --quick   smoke run with ~1/20 of the counts
  --only    workloads to run (W1..W6; default all)
  --impls   implementations to run (redlease, rslock, redlock, rlock, redisson; the floor always runs)
  --runs    runs per workload and implementation, median reported (default 3)
  --cap     time cap of one run in seconds (default 120)
  --out     report path (default <workspace>/target/bench-report.md)
  --workers tokio worker threads per measuring process (default: CPUs left to clients)
  --placement  same (default): redis-servers and clients pinned to one CPU (stable numbers);
            split: servers on the first CPU, clients on the others; none: not pinned
Starts its own 5 redis-servers ($REDLEASE_SERVER_BIN, default redis-server) on loopback.";

pub struct Counts {
    pub w1: usize,
    pub w2_tasks: usize,
    pub w2_rounds: usize,
    pub w3_tasks: usize,
    pub w3_rounds: usize,
    pub w4: [usize; 2],
    pub w5: usize,
    pub w6: usize,
    /// Single floor round trips measured for W6.
    pub rtt: usize,
}

impl Counts {
    pub fn full() -> Self {
        Counts {
            w1: 20_000,
            w2_tasks: 8,
            w2_rounds: 500,
            w3_tasks: 64,
            w3_rounds: 1_000,
            w4: [10_000, 100_000],
            w5: 2_000,
            w6: 100,
            rtt: 20_000,
        }
    }

    pub fn quick() -> Self {
        Counts {
            w1: 1_000,
            w2_tasks: 8,
            w2_rounds: 25,
            w3_tasks: 64,
            w3_rounds: 50,
            w4: [500, 5_000],
            w5: 100,
            w6: 10,
            rtt: 1_000,
        }
    }
}

pub struct Config {
    pub quick: bool,
    pub only: Vec<String>,
    pub impls: Vec<String>,
    pub runs: usize,
    pub cap: Duration,
    pub out: PathBuf,
    /// Tokio worker threads of each measuring process (default: the CPUs
    /// left to the clients).
    pub workers: Option<usize>,
    pub placement: Placement,
    /// How the run was placed on CPUs, for the report.
    pub placed: String,
    pub counts: Counts,
    /// Child process (internal): the one cell to run, and the servers' URLs.
    pub cell: Option<(String, String)>,
    pub urls: Vec<String>,
}

impl Config {
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Config> {
        let mut cfg = Config {
            quick: false,
            only: Vec::new(),
            impls: Vec::new(),
            runs: 3,
            cap: Duration::from_secs(120),
            out: PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../target/bench-report.md"
            )),
            workers: None,
            placement: Placement::Same,
            placed: "not pinned".into(),
            counts: Counts::full(),
            cell: None,
            urls: Vec::new(),
        };
        let mut args = args.into_iter();
        while let Some(a) = args.next() {
            let mut value = || {
                args.next()
                    .ok_or_else(|| anyhow::anyhow!("{a} needs a value\n{USAGE}"))
            };
            match a.as_str() {
                "--quick" => cfg.quick = true,
                "--only" => cfg.only = list(&value()?.to_uppercase()),
                "--impls" => cfg.impls = list(&value()?.to_lowercase()),
                "--runs" => cfg.runs = value()?.parse::<usize>()?.max(1),
                "--cap" => cfg.cap = Duration::from_secs(value()?.parse()?),
                "--out" => cfg.out = value()?.into(),
                "--workers" => cfg.workers = Some(value()?.parse::<usize>()?.max(1)),
                "--placement" => {
                    cfg.placement = match value()?.as_str() {
                        "same" => Placement::Same,
                        "split" => Placement::Split,
                        "none" => Placement::None,
                        other => bail!("unknown placement {other}\n{USAGE}"),
                    }
                }
                "--cell" => cfg.cell = Some((value()?, value()?)),
                "--urls" => cfg.urls = list(&value()?),
                "-h" | "--help" => bail!("{USAGE}"),
                other => bail!("unknown argument {other}\n{USAGE}"),
            }
        }
        if cfg.quick {
            cfg.counts = Counts::quick();
        }
        Ok(cfg)
    }

    pub fn wants(&self, workload: &str) -> bool {
        match &self.cell {
            Some((w, _)) => family(w) == workload,
            None => self.only.is_empty() || self.only.iter().any(|w| w == workload),
        }
    }

    /// Arguments that give a child process the same counts, cap and servers.
    pub fn child_args(&self, urls: &[String]) -> Vec<String> {
        let mut args = vec![
            "--cap".into(),
            self.cap.as_secs().to_string(),
            "--urls".into(),
            urls.join(","),
        ];
        if let Some(workers) = self.workers {
            args.extend(["--workers".into(), workers.to_string()]);
        }
        if self.quick {
            args.push("--quick".into());
        }
        args
    }
}

fn list(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(String::from)
        .collect()
}
