//! Private redis-server processes on free loopback ports, killed on drop.

use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// The redis-server executable: `$REDLEASE_SERVER_BIN`, default `redis-server`.
pub fn server_bin() -> String {
    std::env::var("REDLEASE_SERVER_BIN").unwrap_or_else(|_| "redis-server".into())
}

pub struct RedisServer {
    /// None for a server started by another process (see `attach`).
    child: Option<Child>,
    port: u16,
}

impl RedisServer {
    /// Starts `redis-server` (or `$REDLEASE_SERVER_BIN`) in the foreground on a free
    /// 127.0.0.1 port, without persistence, and waits until it answers PING.
    /// Pinned to `cpus` when given.
    pub fn start(cpus: Option<&[usize]>) -> Result<Self> {
        Self::start_with(cpus, &[])
    }

    /// [`start`](Self::start) with more arguments for redis-server (e.g. cluster mode).
    pub fn start_with(cpus: Option<&[usize]>, extra: &[String]) -> Result<Self> {
        Self::start_bin(&server_bin(), cpus, extra)
    }

    /// [`start_with`](Self::start_with) with another server executable (S1's Valkey).
    pub fn start_bin(bin: &str, cpus: Option<&[usize]>, extra: &[String]) -> Result<Self> {
        let port = free_port()?;
        let mut cmd = Command::new(bin);
        if let Some(cpus) = cpus {
            let cpus = cpus.to_vec();
            // SAFETY: the hook only makes the sched_setaffinity system call.
            unsafe { cmd.pre_exec(move || crate::affinity::pin(&cpus)) };
        }
        let child = cmd
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--loglevel", "warning", "--maxclients", "10000"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("cannot start {bin}"))?;
        let server = RedisServer {
            child: Some(child),
            port,
        };
        server.wait_ready()?;
        Ok(server)
    }

    /// A server started by the parent process, known by its URL.
    pub fn attach(url: &str) -> Result<Self> {
        let port = url
            .trim_end_matches('/')
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .with_context(|| format!("no port in {url}"))?;
        Ok(RedisServer { child: None, port })
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn wait_ready(&self) -> Result<()> {
        let client = redis::Client::open(self.url())?;
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let pong = client
                .get_connection()
                .and_then(|mut c| redis::cmd("PING").query::<String>(&mut c));
            match pong {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    bail!("redis-server on port {} not ready: {e}", self.port)
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }

    /// FLUSHALL, so that every workload starts on an empty server.
    pub fn flush(&self) -> Result<()> {
        let mut c = redis::Client::open(self.url())?.get_connection()?;
        redis::cmd("FLUSHALL").query::<()>(&mut c)?;
        Ok(())
    }

    /// What the server has processed so far (INFO stats, commandstats), to
    /// count the round trips of a renewal from the server side.
    pub fn counters(&self) -> Result<Counters> {
        let mut c = redis::Client::open(self.url())?.get_connection()?;
        let info: String = redis::cmd("INFO")
            .arg("stats")
            .arg("commandstats")
            .query(&mut c)?;
        let mut counters = Counters::default();
        for line in info.lines() {
            if let Some(v) = line.strip_prefix("total_commands_processed:") {
                counters.commands = v.trim().parse()?;
            }
            for cmd in [
                "cmdstat_eval:",
                "cmdstat_evalsha:",
                "cmdstat_fcall:",
                "cmdstat_evalsha_ro:",
            ] {
                if let Some(rest) = line.strip_prefix(cmd) {
                    let calls = rest.split(',').find_map(|f| f.strip_prefix("calls="));
                    counters.scripts +=
                        calls.context("no calls= in commandstats")?.parse::<u64>()?;
                }
            }
        }
        Ok(counters)
    }
}

/// "Redis 7.0.15", "Valkey 9.1.2": the product and version `bin --version` prints.
pub fn version_label(bin: &str) -> Result<String> {
    let out = Command::new(bin)
        .arg("--version")
        .output()
        .with_context(|| format!("cannot run {bin} --version"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let product = text.split_whitespace().next().unwrap_or("?");
    let version = text
        .split_whitespace()
        .find_map(|w| w.strip_prefix("v="))
        .with_context(|| format!("no version in {bin} --version: {text}"))?;
    Ok(format!("{product} {version}"))
}

/// Server-side counts: every command (those run inside scripts included) and
/// top-level script calls (EVAL, EVALSHA, FCALL: one per round trip of a
/// scripted renewal).
#[derive(Clone, Copy, Debug, Default)]
pub struct Counters {
    pub commands: u64,
    pub scripts: u64,
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}
