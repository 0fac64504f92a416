//! One real `redis-server` (or `valkey-server`) child process per [`Server`].
//!
//! The server runs in the foreground as our child, so we always know its pid and can kill it
//! by that pid, never by name. Its stdout and stderr (the server log) go to `server.log` in
//! its private temp dir; the log is printed when a test panics while the server is alive.

use std::ffi::OsString;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::binary::{default_binary, flavor_of, valkey_binary};
use super::host::{LOG_FILE, append_log_line, free_port, make_temp_dir, read_log, ready_pid};

/// How long a (re)started server may take to answer PING.
const READY_TIMEOUT: Duration = Duration::from_secs(5);
/// Fresh starts pick a new free port each attempt; another process may grab it in between.
const START_ATTEMPTS: usize = 5;
/// Restarts keep their port, which a client's ephemeral port may hold for a moment.
const RESTART_ATTEMPTS: usize = 10;
const RESTART_BACKOFF: Duration = Duration::from_millis(200);
/// Timeout for the connection returned by [`Server::conn`], so a frozen server cannot hang a test.
const CONN_TIMEOUT: Duration = Duration::from_secs(5);

/// Options for [`Server::builder`].
#[derive(Debug, Clone, Default)]
pub struct Builder {
    binary: Option<PathBuf>,
    appendonly: bool,
    extra: Vec<OsString>,
    port_args: Vec<&'static str>,
}

impl Builder {
    /// `--appendonly yes --appendfsync always` so data survives [`Server::kill`] +
    /// [`Server::restart`]. Default: no. (With `everysec`, Redis may hold back its AOF writes
    /// for up to 2 s while a background fsync is slow, and answer the client meanwhile: a
    /// SIGKILL then loses writes the client saw acknowledged. It did, in a CI run under load.)
    pub fn appendonly(mut self, on: bool) -> Self {
        self.appendonly = on;
        self
    }

    /// The server binary. Default: `$REDLEASE_SERVER_BIN`, else `redis-server` from `PATH`.
    pub fn binary(mut self, path: impl Into<PathBuf>) -> Self {
        self.binary = Some(path.into());
        self
    }

    /// One extra command-line argument, e.g. `.arg("--maxclients").arg("100")`.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.extra.push(arg.into());
        self
    }

    /// One more port the server listens on, given by `arg` (`--cluster-port`, `--tls-port`):
    /// a free one is picked with `--port`'s at each start attempt, since another process may
    /// take either in between, and kept by a restart ([`Server::port_of`]).
    pub fn port_arg(mut self, arg: &'static str) -> Self {
        self.port_args.push(arg);
        self
    }

    /// Starts the server and waits until it answers PING. Panics (with the log) on failure.
    pub fn start(self) -> Server {
        // Every test that starts a server gets the log filter and the worker-panic hook.
        super::init_tracing();
        let binary = self.binary.unwrap_or_else(default_binary);
        let mut args: Vec<OsString> = [
            "--bind",
            "127.0.0.1",
            "--daemonize",
            "no",
            "--save",
            "",
            "--appendonly",
            if self.appendonly { "yes" } else { "no" },
            "--appendfsync",
            if self.appendonly {
                "always"
            } else {
                "everysec"
            },
            // DEBUG SLEEP / SEGFAULT for fault tests; off by default in Debian's build.
            "--enable-debug-command",
            "local",
        ]
        .iter()
        .map(OsString::from)
        .collect();
        args.extend(self.extra);
        let dir = make_temp_dir();
        let mut server = Server {
            binary,
            args,
            port: 0,
            ports: self.port_args.into_iter().map(|arg| (arg, 0)).collect(),
            dir,
            child: None,
        };
        server.spawn_fresh();
        server
    }
}

/// A running server; killed and its dir removed on Drop.
#[derive(Debug)]
pub struct Server {
    binary: PathBuf,
    /// Everything but `--port`, the other ports and `--dir`, reused by [`Server::restart`].
    args: Vec<OsString>,
    port: u16,
    /// The other ports (`Builder::port_arg`), by their argument.
    ports: Vec<(&'static str, u16)>,
    dir: PathBuf,
    child: Option<Child>,
}

impl Server {
    /// A default server: no persistence, free loopback port.
    pub fn start() -> Server {
        Server::builder().start()
    }

    pub fn builder() -> Builder {
        Builder::default()
    }

    /// A Valkey server when a binary is found (see [`valkey_binary`]), else `None`: the caller
    /// prints a skip line and returns.
    pub fn start_valkey() -> Option<Server> {
        valkey_binary().map(|bin| Server::builder().binary(bin).start())
    }

    /// `redis://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The port given by `arg` ([`Builder::port_arg`]).
    pub fn port_of(&self, arg: &str) -> Option<u16> {
        self.ports.iter().find(|(a, _)| *a == arg).map(|(_, p)| *p)
    }

    /// The server's pid. Panics if it was killed and not restarted.
    pub fn pid(&self) -> u32 {
        self.child().id()
    }

    /// The server's private working dir (AOF files, log).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// `"redis"` or `"valkey"`, for messages.
    pub fn flavor(&self) -> &'static str {
        flavor_of(&self.binary)
    }

    /// True while the child process has not exited.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// SIGKILL and reap, like a crash. No-op if already killed.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            // Err only means it already exited; wait() reaps it either way.
            let _ = child.kill();
            child
                .wait()
                .expect("reaping the killed server process failed");
        }
    }

    /// Starts the server again on the same ports and dir (kills it first if it still runs),
    /// waiting until it answers PING. Without `appendonly`, all data is gone.
    pub fn restart(&mut self) {
        self.kill();
        append_log_line(&self.dir, "--- support: restart ---");
        for attempt in 1..=RESTART_ATTEMPTS {
            match self.spawn_and_wait(self.port) {
                Ok(()) => return,
                Err(StartError::PortInUse) if attempt < RESTART_ATTEMPTS => {
                    std::thread::sleep(RESTART_BACKOFF)
                }
                Err(e) => self.fail(&format!("restart on port {} failed: {e}", self.port)),
            }
        }
        self.fail(&format!(
            "port {} stayed in use; restart gave up",
            self.port
        ));
    }

    /// Freezes the whole process (SIGSTOP): connects still succeed, nothing answers.
    pub fn pause(&self) {
        self.signal("STOP");
    }

    /// Undoes [`Server::pause`] (SIGCONT).
    pub fn resume(&self) {
        self.signal("CONT");
    }

    /// `CLIENT PAUSE ms ALL` (every command waits) or `WRITE` (writes wait, reads answer).
    pub fn client_pause(&self, ms: u64, all: bool) {
        redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(ms)
            .arg(if all { "ALL" } else { "WRITE" })
            .query::<()>(&mut self.conn())
            .expect("CLIENT PAUSE failed");
    }

    /// A fresh sync connection for assertions, with 5 s read/write timeouts.
    pub fn conn(&self) -> redis::Connection {
        let client = redis::Client::open(self.url()).expect("invalid test server URL");
        let conn = client
            .get_connection_with_timeout(CONN_TIMEOUT)
            .unwrap_or_else(|e| panic!("connecting to test server {} failed: {e}", self.url()));
        conn.set_read_timeout(Some(CONN_TIMEOUT))
            .expect("setting read timeout failed");
        conn.set_write_timeout(Some(CONN_TIMEOUT))
            .expect("setting write timeout failed");
        conn
    }

    /// The server log so far (all runs, restarts marked).
    pub fn log(&self) -> String {
        read_log(&self.dir)
    }

    fn child(&self) -> &Child {
        self.child
            .as_ref()
            .expect("test server is not running (killed and not restarted)")
    }

    fn signal(&self, sig: &str) {
        let pid = self.pid().to_string();
        let status = Command::new("kill")
            .args([&format!("-{sig}"), pid.as_str()])
            .status()
            .expect("running `kill` failed");
        assert!(status.success(), "kill -{sig} {pid} failed: {status}");
    }

    /// First start: a new free port per attempt, since another process may take ours.
    fn spawn_fresh(&mut self) {
        for _ in 0..START_ATTEMPTS {
            let port = free_port();
            for (_, other) in &mut self.ports {
                *other = free_port();
            }
            // Each attempt gets a clean log, so a failure shows only its own output.
            File::create(self.dir.join(LOG_FILE)).expect("creating the server log failed");
            match self.spawn_and_wait(port) {
                Ok(()) => return,
                Err(StartError::PortInUse) => continue,
                Err(e) => self.fail(&format!("start on port {port} failed: {e}")),
            }
        }
        self.fail(&format!("no free port after {START_ATTEMPTS} attempts"));
    }

    fn spawn_and_wait(&mut self, port: u16) -> Result<(), StartError> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.dir.join(LOG_FILE))
            .expect("opening the server log failed");
        let log_err = log.try_clone().expect("cloning the log file handle failed");
        let log_len_before = fs::metadata(self.dir.join(LOG_FILE)).map_or(0, |m| m.len());
        let child = Command::new(&self.binary)
            .arg("--port")
            .arg(port.to_string())
            .arg("--dir")
            .arg(&self.dir)
            .args(
                self.ports
                    .iter()
                    .flat_map(|(arg, p)| [arg.to_string(), p.to_string()]),
            )
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "could not run {:?}: {e}. Install redis-server (`make deps`) or set \
                     REDLEASE_SERVER_BIN to a redis-server/valkey-server binary",
                    self.binary
                )
            });
        self.port = port;
        self.child = Some(child);
        let result = self.wait_ready();
        if let Err(StartError::Exited(_)) = result {
            self.child = None; // already reaped by try_wait
            let log = read_log(&self.dir);
            let this_run = log.get(log_len_before as usize..).unwrap_or(&log);
            if this_run.contains("Address already in use") {
                return Err(StartError::PortInUse);
            }
        }
        result
    }

    /// Waits until OUR process (checked by pid: another server may own the port) answers
    /// PING, or exits, or [`READY_TIMEOUT`] passes.
    fn wait_ready(&mut self) -> Result<(), StartError> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let poll = Duration::from_millis(10);
        let max_polls = READY_TIMEOUT.as_millis() / poll.as_millis() + 1;
        let child = self.child.as_mut().expect("wait_ready without a child");
        let pid = child.id();
        for _ in 0..max_polls {
            if let Some(status) = child.try_wait().expect("polling the server process failed") {
                return Err(StartError::Exited(status));
            }
            if ready_pid(self.port) == Some(pid) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(poll);
        }
        Err(StartError::NotReady)
    }

    /// Kills the child, then panics with the log attached.
    fn fail(&mut self, what: &str) -> ! {
        self.kill();
        panic!(
            "test {} server ({:?}): {what}\n--- server log ({}) ---\n{}",
            self.flavor(),
            self.binary,
            self.dir.display(),
            self.log()
        );
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() && self.child.is_some() {
            eprintln!(
                "--- {} server log (port {}, {}) ---\n{}--- end of server log ---",
                self.flavor(),
                self.port,
                self.dir.display(),
                self.log()
            );
        }
        // Never panic in Drop: a second panic would abort and hide the first.
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

#[derive(Debug)]
enum StartError {
    PortInUse,
    Exited(ExitStatus),
    NotReady,
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::PortInUse => write!(f, "port in use"),
            StartError::Exited(status) => write!(f, "server exited early ({status})"),
            StartError::NotReady => write!(f, "no PONG within {READY_TIMEOUT:?}"),
        }
    }
}
