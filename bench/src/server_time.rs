//! S1's accounting: what lock+unlock pairs cost the server, by the server's own books.
//!
//! `CONFIG RESETSTAT` before the measured pairs and `INFO commandstats` after give every
//! command's calls and microseconds. A script's own commands (`redis.call`) are counted there
//! too, and their time is also inside the script call's time, so the sum of every line counts
//! them twice: the server time of a run is the sum over the commands the clients sent
//! (top-level). Which commands those are is learned from `MONITOR` (it tags a script's commands
//! `lua`) over a few calibration pairs before the run, never during it: feeding a monitor costs
//! the server time inside the very calls being measured. The main thread's CPU time (`INFO cpu`)
//! over the same pairs is reported beside it: it adds reading requests, writing replies and the
//! event loop, which commandstats leave out.

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use tokio::task::JoinSet;

use crate::locker::AsyncLocker;
use crate::model::{
    CALLS_PER_PAIR, CMDS_PER_PAIR, DETAIL_LINE, Measure, PAIRS_PER_SEC, SERVER_CPU_US, SERVER_US,
    Unit,
};
use crate::server::RedisServer;
use crate::stats::per_sec;

/// Commands only a client can send: a script cannot call a script.
const SCRIPT_CALLS: [&str; 6] = [
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "fcall",
    "fcall_ro",
];
/// What the measuring process itself sends around the pairs (left out of the sums).
const OWN: [&str; 2] = ["config", "info"];
/// The ECHO that tells the monitor the calibration pairs are done.
const MARKER: &str = "s1-calibration-done";
/// Calibration pairs (W1; W3 runs this many rounds per task, at least 1) and warm-up pairs.
const CALIBRATION: usize = 20;
const WARM_UP: usize = 20;
/// Longest the monitor waits for a line.
const MONITOR_BOUND: Duration = Duration::from_secs(20);

/// The two shapes of S1: W1 (one task, one key, one call at a time) and W3 (`tasks` tasks, a
/// key each).
#[derive(Clone, Copy, Debug)]
pub enum Shape {
    W1,
    W3 { tasks: usize },
}

impl Shape {
    /// `rounds` lock+unlock pairs per task; returns the pairs made.
    async fn pairs<L: AsyncLocker>(self, l: &Arc<L>, rounds: usize) -> Result<usize> {
        let tasks = match self {
            Shape::W1 => 1,
            Shape::W3 { tasks } => tasks,
        };
        let mut set = JoinSet::new();
        for task in 0..tasks {
            let l = l.clone();
            set.spawn(async move {
                let key = match self {
                    Shape::W1 => "bench:s1:w1".to_string(),
                    Shape::W3 { .. } => format!("bench:s1:w3:{task}"),
                };
                for _ in 0..rounds {
                    let g = l.lock(&key).await?;
                    l.unlock(g).await?;
                }
                anyhow::Ok(())
            });
        }
        while let Some(r) = set.join_next().await {
            r??;
        }
        Ok(tasks * rounds)
    }
}

/// One command's line of `INFO commandstats` (`cmdstat_<name>:calls=..,usec=..,..`).
#[derive(Clone, Debug, PartialEq)]
pub struct CmdStat {
    pub name: String,
    pub calls: u64,
    pub usec: u64,
}

pub fn parse_commandstats(info: &str) -> Result<Vec<CmdStat>> {
    let mut stats = Vec::new();
    for line in info.lines() {
        let Some((name, fields)) = line
            .trim()
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        let field = |key: &str| -> Result<u64> {
            fields
                .split(',')
                .find_map(|f| f.strip_prefix(key))
                .with_context(|| format!("no {key} in {line:?}"))?
                .parse()
                .with_context(|| format!("bad {key} in {line:?}"))
        };
        stats.push(CmdStat {
            name: name.to_string(),
            calls: field("calls=")?,
            usec: field("usec=")?,
        });
    }
    Ok(stats)
}

/// Seconds of CPU the server's main thread has used (user + system), from `INFO cpu`; the
/// whole process's where the server has no per-thread figures.
pub fn parse_cpu(info: &str) -> Result<f64> {
    let value = |key: &str| {
        info.lines()
            .find_map(|l| l.trim().strip_prefix(key))
            .and_then(|v| v.parse::<f64>().ok())
    };
    match (
        value("used_cpu_user_main_thread:"),
        value("used_cpu_sys_main_thread:"),
    ) {
        (Some(u), Some(s)) => Ok(u + s),
        _ => match (value("used_cpu_user:"), value("used_cpu_sys:")) {
            (Some(u), Some(s)) => Ok(u + s),
            _ => bail!("no used_cpu_user/used_cpu_sys in INFO cpu"),
        },
    }
}

/// Who sent each command during the calibration: a client, or a script (`lua` in MONITOR).
#[derive(Debug, Default)]
pub struct Origins {
    client: HashMap<String, u64>,
    script: HashMap<String, u64>,
}

impl Origins {
    /// Counts one MONITOR line (`+<time> [<db> <source>] "<COMMAND>" ...`).
    fn count(&mut self, line: &str) {
        let Some((source, rest)) = line.split_once(']') else {
            return;
        };
        let Some(name) = rest
            .trim_start()
            .strip_prefix('"')
            .and_then(|r| r.split('"').next())
        else {
            return;
        };
        let tally = match source.ends_with(" lua") {
            true => &mut self.script,
            false => &mut self.client,
        };
        *tally.entry(name.to_lowercase()).or_default() += 1;
    }

    /// The share of a command's calls the clients sent: 1 for script calls and for commands
    /// the calibration never saw (counted against the implementation), else as calibrated.
    /// Subcommands (`client|setinfo`) go by their container, as MONITOR names them.
    pub fn client_share(&self, name: &str) -> f64 {
        if SCRIPT_CALLS.contains(&name) {
            return 1.0;
        }
        let base = name.split('|').next().unwrap_or(name);
        let client = self.client.get(base).copied().unwrap_or(0) as f64;
        let script = self.script.get(base).copied().unwrap_or(0) as f64;
        if client + script == 0.0 {
            1.0
        } else {
            client / (client + script)
        }
    }
}

/// A MONITOR connection read on a thread of its own until the marker comes by.
struct Monitor {
    reader: std::thread::JoinHandle<Result<Origins>>,
}

impl Monitor {
    fn start(port: u16) -> Result<Monitor> {
        let mut stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(MONITOR_BOUND))?;
        stream.write_all(b"MONITOR\r\n")?;
        let mut lines = BufReader::new(stream);
        let mut ok = String::new();
        lines.read_line(&mut ok)?;
        anyhow::ensure!(ok.starts_with("+OK"), "MONITOR answered {ok:?}");
        let reader = std::thread::spawn(move || {
            let mut origins = Origins::default();
            // Bounded: every read waits at most MONITOR_BOUND, and the marker ends it.
            loop {
                let mut line = String::new();
                if lines.read_line(&mut line).context("reading MONITOR")? == 0 {
                    bail!("MONITOR closed before the calibration ended");
                }
                if line.contains(MARKER) {
                    return Ok(origins);
                }
                origins.count(&line);
            }
        });
        Ok(Monitor { reader })
    }

    async fn finish(self) -> Result<Origins> {
        tokio::task::spawn_blocking(move || match self.reader.join() {
            Ok(r) => r,
            Err(_) => bail!("the MONITOR reader panicked"),
        })
        .await?
    }
}

/// One S1 run on the server at `url`: calibration (MONITOR), warm-up, then `rounds` pairs per
/// task between `CONFIG RESETSTAT` and `INFO commandstats`. Prints one `DETAIL` line per
/// command (`name calls usec client_share pairs`) and returns the measures.
pub async fn run<L: AsyncLocker>(
    l: Arc<L>,
    url: &str,
    shape: Shape,
    rounds: usize,
) -> Result<Vec<Measure>> {
    let client = redis::Client::open(url)?;
    let mut admin = client.get_multiplexed_async_connection().await?;
    redis::cmd("FLUSHALL").query_async::<()>(&mut admin).await?;
    let monitor = Monitor::start(RedisServer::attach(url)?.port())?;
    let calibration = match shape {
        Shape::W1 => CALIBRATION,
        Shape::W3 { tasks } => (CALIBRATION / tasks).max(1),
    };
    shape.pairs(&l, calibration).await?;
    redis::cmd("ECHO")
        .arg(MARKER)
        .query_async::<String>(&mut admin)
        .await?;
    let origins = monitor.finish().await?;
    Shape::W1.pairs(&l, WARM_UP).await?;

    let info = |sections: &[&str]| {
        let mut cmd = redis::cmd("INFO");
        for s in sections {
            cmd.arg(*s);
        }
        cmd
    };
    let cpu_before = parse_cpu(&info(&["cpu"]).query_async::<String>(&mut admin).await?)?;
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async::<()>(&mut admin)
        .await?;
    let start = Instant::now();
    let pairs = shape.pairs(&l, rounds).await?;
    let elapsed = start.elapsed();
    let after: String = info(&["commandstats", "cpu"])
        .query_async(&mut admin)
        .await?;
    l.close().await;

    let cpu = parse_cpu(&after)? - cpu_before;
    let stats: Vec<CmdStat> = parse_commandstats(&after)?
        .into_iter()
        .filter(|s| !OWN.contains(&s.name.split('|').next().unwrap_or("")))
        .collect();
    let n = pairs.max(1) as f64;
    let (mut usec, mut calls, mut commands) = (0.0, 0.0, 0.0);
    for s in &stats {
        let share = origins.client_share(&s.name);
        usec += s.usec as f64 * share;
        calls += s.calls as f64 * share;
        commands += s.calls as f64;
        println!(
            "{DETAIL_LINE}\t{}\t{}\t{}\t{share}\t{pairs}",
            s.name, s.calls, s.usec
        );
    }
    Ok(vec![
        Measure::new(PAIRS_PER_SEC, Unit::PerSec, per_sec(pairs, elapsed)),
        Measure::new(SERVER_US, Unit::Ratio, usec / n),
        Measure::new(SERVER_CPU_US, Unit::Ratio, cpu * 1e6 / n),
        Measure::new(CALLS_PER_PAIR, Unit::Ratio, calls / n),
        Measure::new(CMDS_PER_PAIR, Unit::Ratio, commands / n),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commandstats_lines() {
        let info = "# Commandstats\r\n\
            cmdstat_evalsha:calls=14000,usec=812000,usec_per_call=58.00,rejected_calls=0,failed_calls=0\r\n\
            cmdstat_client|setinfo:calls=2,usec=3,usec_per_call=1.50,rejected_calls=0,failed_calls=0\r\n\
            \r\n# CPU\r\nused_cpu_sys:1.5\r\n";
        let stats = parse_commandstats(info).expect("parses");
        assert_eq!(
            stats,
            vec![
                CmdStat {
                    name: "evalsha".into(),
                    calls: 14000,
                    usec: 812000
                },
                CmdStat {
                    name: "client|setinfo".into(),
                    calls: 2,
                    usec: 3
                },
            ]
        );
    }

    #[test]
    fn cpu_prefers_the_main_thread() {
        let info = "used_cpu_sys:2.0\r\nused_cpu_user:3.0\r\n\
            used_cpu_sys_main_thread:0.5\r\nused_cpu_user_main_thread:1.25\r\n";
        assert_eq!(parse_cpu(info).expect("parses"), 1.75);
        assert_eq!(
            parse_cpu("used_cpu_sys:2.0\r\nused_cpu_user:3.0\r\n").expect("parses"),
            5.0
        );
    }

    #[test]
    fn monitor_lines_split_clients_from_scripts() {
        let mut o = Origins::default();
        for line in [
            "+1700000000.100000 [0 127.0.0.1:40000] \"SET\" \"k\" \"v\" \"NX\" \"PX\" \"10000\"",
            "+1700000000.200000 [0 127.0.0.1:40000] \"EVALSHA\" \"abc\" \"1\" \"k\" \"v\"",
            "+1700000000.200001 [0 lua] \"get\" \"k\"",
            "+1700000000.200002 [0 lua] \"del\" \"k\"",
            "+1700000000.300000 [0 127.0.0.1:40001] \"GET\" \"other\"",
            "+1700000000.300001 [0 lua] \"get\" \"k\"",
        ] {
            o.count(line);
        }
        assert_eq!(o.client_share("set"), 1.0);
        assert_eq!(o.client_share("evalsha"), 1.0);
        assert_eq!(o.client_share("del"), 0.0);
        assert!((o.client_share("get") - 1.0 / 3.0).abs() < 1e-12);
        // Never seen: counted as sent by the client.
        assert_eq!(o.client_share("hset"), 1.0);
        assert_eq!(o.client_share("pubsub|numsub"), 1.0);
    }
}
