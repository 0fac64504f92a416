//! Command-line flags and workload sizes.

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

use crate::affinity::Placement;
use crate::model::family;

/// The command line, parsed by clap (`redlease-bench --help`).
#[derive(Parser)]
#[command(
    name = "redlease-bench",
    about = "Benchmarks redlease against peer crates and the bare EVALSHA floor, in one run.",
    after_help = "Starts its own 5 redis-servers ($REDLEASE_SERVER_BIN, default redis-server) on loopback."
)]
struct Args {
    /// Smoke run with ~1/20 of the counts.
    #[arg(long)]
    quick: bool,
    /// Workloads to run (W1..W7, C1, C3, C4, C6, C7, F1..F4, P2, P3, E1, E2, L1, L1C, L1S, K1..K3,
    /// R1, T1, S1; default all). P2 and P3 are F2 and F3 across processes, as W7; L1C and L1S
    /// are L1 on the cluster and behind Sentinel; K1..K3 the cost curves (waiters, holds,
    /// clients).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Implementations to run (redlease, rslock, redlock, rlock, redisson, floor+reply,
    /// floor+call; the floor always runs).
    #[arg(long, value_delimiter = ',')]
    impls: Vec<String>,
    /// Runs per workload and implementation; the median is reported.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..))]
    runs: u16,
    /// Time cap of one run, in seconds.
    #[arg(long, default_value_t = 120)]
    cap: u64,
    /// Report path [default: <workspace>/target/bench-report.md].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Tokio worker threads per measuring process [default: the CPUs left to clients].
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..))]
    workers: Option<u16>,
    /// same: redis-servers and clients pinned to one CPU (stable numbers); split: servers on
    /// the first CPU, clients on the others; none: not pinned.
    #[arg(long, value_enum, default_value_t = Placement::Same)]
    placement: Placement,
    /// W7, C7, P2 and P3: seconds each run of a cell contends (all processes at once).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=60))]
    w7_secs: u64,
    /// W7, C7, P2 and P3: the numbers of processes (one task each) to run, one cell per number.
    #[arg(long, value_delimiter = ',', default_values_t = [4usize, 8])]
    w7_procs: Vec<usize>,
    /// Internal (a W7, C7, P2 or P3 process of a cell): this process's index.
    #[arg(long, hide = true)]
    w7_worker: Option<usize>,
    /// Internal (child process): the one cell to run, WORKLOAD IMPLEMENTATION.
    #[arg(long, num_args = 2, value_names = ["WORKLOAD", "IMPLEMENTATION"], hide = true)]
    cell: Option<Vec<String>>,
    /// For bench/scripts/client_cost.sh: makes PAIRS lock+unlock pairs of one task with IMPL
    /// (redlease or rslock) against the first of --urls, and exits (run under callgrind).
    #[arg(long, num_args = 2, value_names = ["IMPL", "PAIRS"], hide = true)]
    client_cost: Option<Vec<String>>,
    /// For bench/scripts/handover_cost.sh: N acquisitions of one redlease `Lock` on the
    /// hand-over key, as ROLE: `holder` keeps each hold a while, `waiter` gives each back at
    /// once (run under callgrind); against the first of --urls, and exits.
    #[arg(long, num_args = 2, value_names = ["ROLE", "N"], hide = true)]
    handover_cost: Option<Vec<String>>,
    /// Internal (child process): the servers' URLs.
    #[arg(long, value_delimiter = ',', hide = true)]
    urls: Vec<String>,
    /// Internal (child process): the bench cluster's `redis+cluster://` URL.
    #[arg(long, hide = true)]
    cluster_url: Option<String>,
    /// Internal (child process): the URL of the primary that has a replica (R1).
    #[arg(long, hide = true)]
    replica_url: Option<String>,
    /// Internal (child process): the T1 server's plain URL, TLS URL and CA certificate file.
    #[arg(long, num_args = 3, value_names = ["PLAIN_URL", "TLS_URL", "CA_FILE"], hide = true)]
    tls_server: Option<Vec<String>>,
    /// Internal (child process): the L1S Sentinel deployment's `redis+sentinel://` URL and its
    /// master's `redis://` URL.
    #[arg(long, num_args = 2, value_names = ["SENTINEL_URL", "MASTER_URL"], hide = true)]
    sentinel: Option<Vec<String>>,
    /// Internal (child process): an S1 server, `LABEL=URL` (repeated).
    #[arg(long, hide = true)]
    s1_server: Vec<String>,
    /// Internal (child process): the CPUs an S1 cell's process runs on.
    #[arg(long, value_delimiter = ',', hide = true)]
    s1_client_cpus: Vec<usize>,
}

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
    /// S1's W1 pairs (half of W1's: with the server on another CPU every request waits for it
    /// to wake, ~6,000 pairs/s here, and S1 runs 4 such cells 3 times).
    pub s1_w1: usize,
    /// K2: the numbers of locks one client holds; its watchdog lease (the default 30 s; 3 s with
    /// `--quick`, so a window of two renewal periods stays short).
    pub k2_holds: Vec<usize>,
    #[cfg_attr(not(feature = "redlease"), expect(dead_code))]
    pub k2_lease: Duration,
    /// K3: client processes, one held lock each.
    pub k3_clients: usize,
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
            s1_w1: 10_000,
            k2_holds: vec![1_000, 10_000, 100_000],
            k2_lease: Duration::from_secs(30),
            k3_clients: 100,
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
            s1_w1: 500,
            k2_holds: vec![1_000, 10_000],
            k2_lease: Duration::from_secs(3),
            k3_clients: 20,
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
    /// `--client-cost IMPL PAIRS` (see bench/scripts/client_cost.sh).
    pub client_cost: Option<(String, usize)>,
    /// `--handover-cost ROLE N` (see bench/scripts/handover_cost.sh).
    pub handover_cost: Option<(String, usize)>,
    pub urls: Vec<String>,
    /// The bench cluster (started by the parent when a cluster workload runs).
    pub cluster_url: Option<String>,
    /// The primary with a replica (started by the parent when R1 runs).
    pub replica_url: Option<String>,
    /// The Sentinel deployment's URL and its master's (started by the parent when L1S runs).
    pub sentinel: Option<(String, String)>,
    /// The server with a TLS port (started by the parent when T1 runs).
    pub tls: Option<crate::tls_suite::Target>,
    /// W7/C7/P2/P3: seconds of contention per run, and the process counts.
    pub w7_secs: u64,
    pub w7_procs: Vec<usize>,
    /// Set in a W7 process (started by a W7 cell's child, see workloads/processes.rs).
    pub w7_worker: Option<usize>,
    /// S1's servers (`LABEL=URL`, started by the parent when S1 runs), and the CPUs of its
    /// measuring processes.
    pub s1_servers: Vec<String>,
    pub s1_client_cpus: Vec<usize>,
}

impl Config {
    /// Parses the command line; `--help` prints the usage and exits.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Config {
        let args = Args::parse_from(std::iter::once("redlease-bench".to_string()).chain(args));
        let default_out = concat!(env!("CARGO_MANIFEST_DIR"), "/../target/bench-report.md");
        Config {
            quick: args.quick,
            only: args.only.iter().map(|w| w.trim().to_uppercase()).collect(),
            impls: args.impls.iter().map(|i| i.trim().to_lowercase()).collect(),
            runs: usize::from(args.runs),
            cap: Duration::from_secs(args.cap),
            out: args.out.unwrap_or_else(|| PathBuf::from(default_out)),
            workers: args.workers.map(usize::from),
            placement: args.placement,
            placed: "not pinned".into(),
            counts: if args.quick {
                Counts::quick()
            } else {
                Counts::full()
            },
            cell: args.cell.and_then(|c| match <[String; 2]>::try_from(c) {
                Ok([workload, implementation]) => Some((workload, implementation)),
                Err(_) => None,
            }),
            client_cost: args
                .client_cost
                .and_then(|c| match <[String; 2]>::try_from(c) {
                    Ok([implementation, pairs]) => Some((implementation, pairs.parse().ok()?)),
                    Err(_) => None,
                }),
            handover_cost: args
                .handover_cost
                .and_then(|c| match <[String; 2]>::try_from(c) {
                    Ok([role, n]) => Some((role, n.parse().ok()?)),
                    Err(_) => None,
                }),
            urls: args.urls,
            w7_secs: if args.quick { 1 } else { args.w7_secs },
            w7_procs: args
                .w7_procs
                .into_iter()
                .filter(|k| (1..=64).contains(k))
                .collect(),
            w7_worker: args.w7_worker,
            cluster_url: args.cluster_url,
            replica_url: args.replica_url,
            sentinel: args
                .sentinel
                .and_then(|s| match <[String; 2]>::try_from(s) {
                    Ok([sentinel, master]) => Some((sentinel, master)),
                    Err(_) => None,
                }),
            s1_servers: args.s1_server,
            s1_client_cpus: args.s1_client_cpus,
            tls: args
                .tls_server
                .and_then(|t| match <[String; 3]>::try_from(t) {
                    Ok([plain_url, tls_url, ca_file]) => Some(crate::tls_suite::Target {
                        plain_url,
                        tls_url,
                        ca_file: PathBuf::from(ca_file),
                    }),
                    Err(_) => None,
                }),
        }
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
            "--w7-secs".into(),
            self.w7_secs.to_string(),
        ];
        if !self.w7_procs.is_empty() {
            // A cell's process runs only a K its suite makes a cell of.
            let procs: Vec<String> = self.w7_procs.iter().map(|k| k.to_string()).collect();
            args.extend(["--w7-procs".into(), procs.join(",")]);
        }
        if let Some(workers) = self.workers {
            args.extend(["--workers".into(), workers.to_string()]);
        }
        if self.quick {
            args.push("--quick".into());
        }
        if let Some(url) = &self.cluster_url {
            args.extend(["--cluster-url".into(), url.clone()]);
        }
        if let Some(url) = &self.replica_url {
            args.extend(["--replica-url".into(), url.clone()]);
        }
        if let Some((sentinel, master)) = &self.sentinel {
            args.extend(["--sentinel".into(), sentinel.clone(), master.clone()]);
        }
        for s in &self.s1_servers {
            args.extend(["--s1-server".into(), s.clone()]);
        }
        if !self.s1_client_cpus.is_empty() {
            let cpus: Vec<String> = self.s1_client_cpus.iter().map(|c| c.to_string()).collect();
            args.extend(["--s1-client-cpus".into(), cpus.join(",")]);
        }
        if let Some(t) = &self.tls {
            let ca = t.ca_file.to_string_lossy().into_owned();
            args.extend([
                "--tls-server".into(),
                t.plain_url.clone(),
                t.tls_url.clone(),
                ca,
            ]);
        }
        args
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A measuring process gets the T1 server and the other servers as the parent has them.
    #[test]
    fn child_args_carry_the_tls_server() {
        let mut parent = Config::parse(["--only".to_string(), "T1".into()]);
        assert!(parent.wants("T1") && !parent.wants("W1"));
        parent.tls = Some(crate::tls_suite::Target {
            plain_url: "redis://127.0.0.1:7001/".into(),
            tls_url: "rediss://127.0.0.1:7002/".into(),
            ca_file: PathBuf::from("/tmp/bench-tls/ca.crt"),
        });
        let urls = ["redis://127.0.0.1:7000/".to_string()];
        let mut args = parent.child_args(&urls);
        args.extend([
            "--cell".into(),
            "T1 W1 over TLS".into(),
            "redlease TLS".into(),
        ]);
        let child = Config::parse(args);
        let tls = child.tls.as_ref().expect("the child knows the TLS server");
        assert_eq!(tls.plain_url, "redis://127.0.0.1:7001/");
        assert_eq!(tls.tls_url, "rediss://127.0.0.1:7002/");
        assert_eq!(tls.ca_file, PathBuf::from("/tmp/bench-tls/ca.crt"));
        assert_eq!(child.urls, urls);
        assert!(child.wants("T1") && !child.wants("R1"));
    }

    /// An L1S cell's process gets the Sentinel deployment the parent started.
    #[test]
    fn child_args_carry_the_sentinel_deployment() {
        let mut parent = Config::parse(["--only".to_string(), "L1S".into()]);
        assert!(parent.wants("L1S") && !parent.wants("L1"));
        parent.sentinel = Some((
            "redis+sentinel://127.0.0.1:26379/benchmaster".into(),
            "redis://127.0.0.1:7001/".into(),
        ));
        let child = Config::parse(parent.child_args(&["redis://127.0.0.1:7000/".to_string()]));
        let (sentinel, master) = child.sentinel.expect("the child knows the deployment");
        assert_eq!(sentinel, "redis+sentinel://127.0.0.1:26379/benchmaster");
        assert_eq!(master, "redis://127.0.0.1:7001/");
    }

    /// A W7-style cell's process knows the parent's process counts (else it finds no cell for
    /// a K other than the defaults, and reports nothing).
    #[test]
    fn child_args_carry_the_process_counts() {
        let parent = Config::parse(["--w7-procs".to_string(), "4,16".into()]);
        assert_eq!(parent.w7_procs, [4, 16]);
        let child = Config::parse(parent.child_args(&["redis://127.0.0.1:7000/".to_string()]));
        assert_eq!(child.w7_procs, [4, 16]);
    }
}
