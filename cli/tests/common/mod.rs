//! Running the `redlease` binary in tests: clean environment, bounded waits, and every process
//! killed by its own pid when a test ends early.

// Each test file uses a different subset.
#![allow(dead_code)]

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{Server, eventually, key_of, unique_name};

pub const BIN: &str = env!("CARGO_BIN_EXE_redlease");
/// No single command in these tests should take longer; a hang fails the test instead.
pub const LIMIT: Duration = Duration::from_secs(30);

/// `redlease ARGS` with a clean environment (no inherited URL, prefix, token or log setting).
pub fn redlease(args: &[&str]) -> Command {
    let mut cmd = Command::new(BIN);
    cmd.args(args)
        .env_remove("REDIS_URL")
        .env_remove("REDLEASE_PREFIX")
        .env_remove("REDLEASE_TOKEN")
        .env_remove("REDLEASE_LOG")
        .env_remove("REDLEASE_POLL")
        .stdin(Stdio::null());
    cmd
}

/// `redlease SUB --url URL [OPTIONS] NAME [-- COMMAND...]`, where `sub` is the subcommand and
/// its options separated by spaces (`"run --wait 1s"`).
pub fn rl(url: &str, sub: &str, name: &str, command: &[&str]) -> Command {
    rl_nodes(&[url.to_owned()], sub, name, command)
}

/// [`rl`] with one `--url` per node.
pub fn rl_nodes(urls: &[String], sub: &str, name: &str, command: &[&str]) -> Command {
    let mut words: Vec<&str> = sub.split_whitespace().collect();
    let options = words.split_off(1.min(words.len()));
    for url in urls {
        words.extend(["--url", url.as_str()]);
    }
    words.extend(options);
    words.push(name);
    if !command.is_empty() {
        words.push("--");
        words.extend(command);
    }
    redlease(&words)
}

/// A process we started; killed (by its pid) and reaped on Drop unless it was waited for.
pub struct Running {
    child: Option<Child>,
    started: Instant,
}

impl Running {
    pub fn spawn(mut cmd: Command) -> Running {
        let child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting redlease");
        Running {
            child: Some(child),
            started: Instant::now(),
        }
    }

    /// Waits (bounded) until the command under the lock created `file`; fails at once, with
    /// redlease's output, if redlease exited instead.
    pub fn wait_for(&mut self, dir: &Scratch, file: &str) {
        let path = dir.path(file);
        let child = self.child.as_mut().expect("still running");
        eventually(LIMIT, || {
            path.exists() || !matches!(child.try_wait(), Ok(None))
        });
        if !path.exists() {
            let out = self.child.take().map(Child::wait_with_output);
            panic!("{} did not appear: {out:?}", path.display());
        }
    }

    /// Waits (bounded) until the command under the lock wrote a pid to `file`, and returns it.
    /// `echo $$ > file` creates the file before it writes, so existence alone is not enough.
    pub fn wait_for_pid(&mut self, dir: &Scratch, file: &str) -> i32 {
        self.wait_for(dir, file);
        dir.wait_for(file);
        dir.read(file).trim().parse().expect("a pid")
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("still running").id() as i32
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on the pid of our own unreaped child.
        let rc = unsafe { libc::kill(self.pid(), signal) };
        assert_eq!(rc, 0, "kill({}, {signal}) failed", self.pid());
    }

    /// Waits at most `limit` for the exit; kills the process and panics if it is still running.
    pub fn finish(mut self, limit: Duration) -> Finished {
        let mut child = self.child.take().expect("finished twice");
        let exited = eventually(limit, || !matches!(child.try_wait(), Ok(None)));
        let elapsed = self.started.elapsed();
        if !exited {
            let _ = child.kill();
        }
        let output = child
            .wait_with_output()
            .expect("collecting redlease output");
        let finished = Finished { output, elapsed };
        assert!(exited, "redlease still ran after {limit:?}: {finished:?}");
        finished
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

#[derive(Debug)]
pub struct Finished {
    pub output: Output,
    /// From spawn to exit.
    pub elapsed: Duration,
}

impl Finished {
    pub fn code(&self) -> Option<i32> {
        self.output.status.code()
    }
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
}

/// Runs `cmd` to completion (at most [`LIMIT`]).
pub fn finish(cmd: Command) -> Finished {
    Running::spawn(cmd).finish(LIMIT)
}

/// A private scratch dir, removed on Drop.
pub struct Scratch(PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let dir = std::env::temp_dir().join(unique_name(&format!("redlease-cli-{tag}")));
        fs::create_dir_all(&dir).expect("creating scratch dir");
        Scratch(dir)
    }
    pub fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
    pub fn str(&self) -> &str {
        self.0.to_str().expect("utf-8 temp dir")
    }
    /// Waits (bounded) until `file` exists and is not empty.
    pub fn wait_for(&self, file: &str) {
        assert!(
            eventually(LIMIT, || !self.read(file).is_empty()),
            "{} did not appear within {LIMIT:?}",
            self.path(file).display()
        );
    }
    pub fn read(&self, file: &str) -> String {
        fs::read_to_string(self.path(file)).unwrap_or_default()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

/// A shell loop that touches `DIR/started`, then runs until `DIR/stop` appears (at most 12 s).
pub fn until_stopped(dir: &Scratch) -> String {
    format!(
        "touch {d}/started; for i in $(seq 600); do [ -e {d}/stop ] && break; sleep 0.02; done",
        d = dir.str()
    )
}

/// `redlease status --json` on one server, parsed; the command must succeed.
pub fn status_json(server: &Server, name: &str) -> Value {
    status_json_nodes(&[server.url()], name)
}

/// [`status_json`] with one `--url` per node.
pub fn status_json_nodes(urls: &[String], name: &str) -> Value {
    let out = finish(rl_nodes(urls, "status --json", name, &[]));
    assert_eq!(out.code(), Some(0), "status failed: {out:?}");
    serde_json::from_str(&out.stdout()).expect("status --json prints JSON")
}

/// Makes `name` held by somebody else for 20 s, straight in Redis.
pub fn hold_elsewhere(server: &Server, name: &str) {
    let key = key_of(name);
    redis::pipe()
        .hset(&key, "someone-else:1", 1)
        .pexpire(&key, 20_000)
        .query::<()>(&mut server.conn())
        .expect("HSET + PEXPIRE");
}

/// A URL nobody listens on (a port that was free a moment ago).
pub fn dead_url() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    format!("redis://127.0.0.1:{port}")
}

/// True while `pid` exists and is not a zombie.
pub fn alive(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        })
        .unwrap_or(false)
}
