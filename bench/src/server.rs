//! Private redis-server processes on free loopback ports, killed on drop.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

pub struct RedisServer {
    child: Child,
    port: u16,
}

impl RedisServer {
    /// Starts `redis-server` (or `$REDIS_SERVER`) in the foreground on a free
    /// 127.0.0.1 port, without persistence, and waits until it answers PING.
    pub fn start() -> Result<Self> {
        let bin = std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".into());
        let port = free_port()?;
        let child = Command::new(&bin)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(["--loglevel", "warning", "--maxclients", "10000"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("cannot start {bin}"))?;
        let server = RedisServer { child, port };
        server.wait_ready()?;
        Ok(server)
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

    /// Commands the server has processed so far (INFO stats), to count the
    /// round trips of a renewal tick from the server side.
    pub fn commands_processed(&self) -> Result<u64> {
        let mut c = redis::Client::open(self.url())?.get_connection()?;
        let info: String = redis::cmd("INFO").arg("stats").query(&mut c)?;
        info.lines()
            .find_map(|l| l.strip_prefix("total_commands_processed:"))
            .and_then(|v| v.trim().parse().ok())
            .context("no total_commands_processed in INFO stats")
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}
