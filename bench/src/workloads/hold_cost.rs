//! K2, the holds curve (issue 39): what keeping N locks costs the server. One redlease client
//! holds N locks under the watchdog (the default 30 s lease: a renewal tick every 10 s, 1,000
//! locks per script call), then, over a window of two renewal periods:
//!
//! - server time: `INFO commandstats` usec of the script calls (`EVAL`, `EVALSHA`, `FCALL`
//!   and their read-only forms: the renewals; the commands they run are inside their usec, and
//!   counted again under their own names, so only the scripts are summed), and the server
//!   process's CPU (`used_cpu_sys` + `used_cpu_user` of `INFO cpu`: every command, reading and
//!   replying, the server's own cron), per second of the window; the same CPU over a window with
//!   the client connected and nothing held is its baseline;
//! - the longest single call: `SLOWLOG` with `slowlog-log-slower-than 100` (µs) for the
//!   window (a row with no call that long shows 0), and the calls of 1 ms or more, by command
//!   (a `DETAIL` line: script calls by SHA1 prefix and key count). Redis logs the commands a
//!   script runs as entries of their own too: they are inside their script's time, so they
//!   never make the longest call, but a slow one is counted beside its script;
//! - the client's heap per hold (the counting allocator around the acquisitions, guards
//!   included), as W4 measures it.
//!
//! `SLOWLOG` from 100 µs rather than 0: every command logged would fill the log with the
//! notice's and the probes' short commands (and reading it back would be server work in the
//! window); a call that blocks the other clients is far longer than that.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use redis::aio::MultiplexedConnection;

use crate::locker::AsyncLocker as _;
use crate::model::{
    HELD, LONGEST_CALL, MEM, Measure, RENEW_SCRIPT_US_PER_SEC, RENEW_SCRIPTS_PER_SEC,
    SERVER_CPU_IDLE_PER_SEC, SERVER_CPU_PER_SEC, SLOW_CALLS, Unit, WATCHDOG_LEASE, WINDOW,
};
use crate::redlease_impl::Redlease;
use crate::stats::micros;
use crate::workloads::watchdog_scale::{hold_many, release_all};

/// The bench's own commands, left out of the slow log's calls.
const PROBES: [&str; 3] = ["info", "config", "slowlog"];
const SCRIPTS: [&str; 6] = [
    "eval",
    "evalsha",
    "eval_ro",
    "evalsha_ro",
    "fcall",
    "fcall_ro",
];
/// SLOWLOG's threshold for the window, in µs, and its length.
const SLOWLOG_FROM_US: u64 = 100;
const SLOWLOG_LEN: u64 = 10_000;
const SLOW_US: i64 = 1_000;
/// Longest baseline window (one renewal period when that is shorter).
const IDLE: Duration = Duration::from_secs(2);

/// What the server has done so far.
#[derive(Default, Clone, Copy)]
struct ServerStats {
    cpu_us: f64,
    script_us: u64,
    scripts: u64,
}

async fn server_stats(admin: &mut MultiplexedConnection) -> Result<ServerStats> {
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .arg("commandstats")
        .query_async(admin)
        .await?;
    let mut s = ServerStats::default();
    for line in info.lines() {
        for field in ["used_cpu_sys:", "used_cpu_user:"] {
            if let Some(v) = line.strip_prefix(field) {
                s.cpu_us += v.trim().parse::<f64>()? * 1e6;
            }
        }
        let Some((name, rest)) = line
            .strip_prefix("cmdstat_")
            .and_then(|l| l.split_once(':'))
        else {
            continue;
        };
        if !SCRIPTS.iter().any(|p| name.eq_ignore_ascii_case(p)) {
            continue;
        }
        let field = |key: &str| -> Result<u64> {
            let v = rest.split(',').find_map(|f| f.strip_prefix(key));
            Ok(v.with_context(|| format!("no {key} in {line}"))?.parse()?)
        };
        s.script_us += field("usec=")?;
        s.scripts += field("calls=")?;
    }
    Ok(s)
}

/// `CONFIG GET param`'s value.
async fn config_get(admin: &mut MultiplexedConnection, param: &str) -> Result<String> {
    let pair: Vec<String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg(param)
        .query_async(admin)
        .await?;
    pair.get(1)
        .cloned()
        .with_context(|| format!("no {param} in CONFIG GET"))
}

async fn config_set(admin: &mut MultiplexedConnection, pairs: &[(&str, String)]) -> Result<()> {
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("SET");
    for (param, value) in pairs {
        cmd.arg(*param).arg(value);
    }
    Ok(cmd.query_async(admin).await?)
}

/// A slow-log call's command: its name, and for a script call the script's SHA1 prefix and
/// key count (`evalsha 1a2b3c4d 1000`).
fn shape(args: &[redis::Value]) -> String {
    let text = |i: usize| match args.get(i) {
        Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
        _ => String::new(),
    };
    let name = text(0).to_lowercase();
    match name.as_str() {
        "evalsha" | "evalsha_ro" | "fcall" | "fcall_ro" => {
            format!(
                "{name} {} {}",
                text(1).chars().take(8).collect::<String>(),
                text(2)
            )
        }
        "eval" | "eval_ro" => format!("{name} <script> {}", text(2)),
        _ => name,
    }
}

/// The longest call in the slow log (probes left out), the calls of 1 ms or more, and those
/// calls counted by [`shape`], the longest's first.
async fn slowlog(admin: &mut MultiplexedConnection) -> Result<(i64, usize, String)> {
    let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query_async(admin)
        .await?;
    let (mut longest, mut slow) = (0, 0);
    let mut longest_shape = String::new();
    let mut shapes: std::collections::BTreeMap<String, usize> = Default::default();
    for entry in entries {
        let redis::Value::Array(fields) = entry else {
            continue;
        };
        let (Some(redis::Value::Int(us)), Some(redis::Value::Array(args))) =
            (fields.get(2), fields.get(3))
        else {
            continue;
        };
        let name = match args.first() {
            Some(redis::Value::BulkString(b)) => String::from_utf8_lossy(b).to_lowercase(),
            _ => String::new(),
        };
        if PROBES.contains(&name.as_str()) {
            continue;
        }
        if *us > longest {
            longest = *us;
            longest_shape = shape(args);
        }
        if *us >= SLOW_US {
            slow += 1;
            *shapes.entry(shape(args)).or_default() += 1;
        }
    }
    let by_shape: Vec<String> = shapes.iter().map(|(s, n)| format!("{s} ×{n}")).collect();
    let text = format!(
        "longest call: {longest_shape} ({longest} µs); calls ≥ 1 ms: {}",
        if by_shape.is_empty() {
            "none".into()
        } else {
            by_shape.join(", ")
        }
    );
    Ok((longest, slow, text))
}

/// K2 for `n` locks held by one client with a watchdog lease of `lease`, on the server at `url`.
pub async fn run(url: &str, n: usize, lease: Duration) -> Result<Vec<Measure>> {
    // The loss notice as REDLEASE_BENCH_LOSS_NOTICE asks (`redlease_impl::client`).
    let client = crate::redlease_impl::builder(url)
        .watchdog_lease(lease)
        .build()
        .await?;
    let l = Arc::new(Redlease { client });
    let mut admin = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let period = lease / 3;
    // The baseline: connected (warmed up), nothing held.
    super::warm_up(&*l, "bench:k2:warm").await?;
    let idle = IDLE.min(period);
    let (i0, t0) = (server_stats(&mut admin).await?, Instant::now());
    tokio::time::sleep(idle).await;
    let (i1, idle) = (server_stats(&mut admin).await?, t0.elapsed());
    let idle_cpu = (i1.cpu_us - i0.cpu_us) / idle.as_secs_f64();

    let held = hold_many(l.clone(), n).await?;
    let saved = [
        (
            "slowlog-log-slower-than",
            config_get(&mut admin, "slowlog-log-slower-than").await?,
        ),
        (
            "slowlog-max-len",
            config_get(&mut admin, "slowlog-max-len").await?,
        ),
    ];
    config_set(
        &mut admin,
        &[
            ("slowlog-log-slower-than", SLOWLOG_FROM_US.to_string()),
            ("slowlog-max-len", SLOWLOG_LEN.to_string()),
        ],
    )
    .await?;
    let window = async {
        let _: () = redis::cmd("SLOWLOG")
            .arg("RESET")
            .query_async(&mut admin)
            .await?;
        let (a, t0) = (server_stats(&mut admin).await?, Instant::now());
        tokio::time::sleep(2 * period).await;
        let (b, elapsed) = (server_stats(&mut admin).await?, t0.elapsed());
        let calls = slowlog(&mut admin).await?;
        anyhow::Ok((a, b, elapsed, calls))
    }
    .await;
    let restored = config_set(&mut admin, &saved).await;
    let (a, b, elapsed, (longest, slow, calls)) = window?;
    restored?;
    // For the K2 table's notes (runner: DETAIL lines).
    println!("{}\t{calls}", crate::model::DETAIL_LINE);
    let still_held = l.client.held_count();
    release_all(l.clone(), held.guards).await?;
    l.close().await;
    anyhow::ensure!(
        still_held >= n,
        "{still_held} of {n} holds left after the window"
    );
    let secs = elapsed.as_secs_f64();
    Ok(vec![
        Measure::new(HELD, Unit::Count, n as f64),
        Measure::new(MEM, Unit::Bytes, held.bytes_per_lock),
        Measure::new(
            RENEW_SCRIPTS_PER_SEC,
            Unit::PerSec,
            (b.scripts - a.scripts) as f64 / secs,
        ),
        Measure::new(
            RENEW_SCRIPT_US_PER_SEC,
            Unit::Micros,
            (b.script_us - a.script_us) as f64 / secs,
        ),
        Measure::new(
            SERVER_CPU_PER_SEC,
            Unit::Micros,
            (b.cpu_us - a.cpu_us) / secs,
        ),
        Measure::new(SERVER_CPU_IDLE_PER_SEC, Unit::Micros, idle_cpu),
        Measure::new(LONGEST_CALL, Unit::Micros, longest as f64),
        Measure::new(SLOW_CALLS, Unit::Count, slow as f64),
        Measure::new(WATCHDOG_LEASE, Unit::Micros, micros(lease)),
        Measure::new(WINDOW, Unit::Micros, micros(elapsed)),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_of_slow_calls() {
        let bulk = |s: &str| redis::Value::BulkString(s.as_bytes().to_vec());
        let evalsha = [bulk("EVALSHA"), bulk("0e1f41c2aa"), bulk("1000"), bulk("k")];
        assert_eq!(shape(&evalsha), "evalsha 0e1f41c2 1000");
        assert_eq!(shape(&[bulk("PEXPIRE"), bulk("k"), bulk("1")]), "pexpire");
        assert_eq!(
            shape(&[bulk("eval"), bulk("return 1"), bulk("0")]),
            "eval <script> 0"
        );
    }
}
