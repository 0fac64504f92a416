//! What a server process needs from the host: a free port, a private dir, its log file there,
//! and a readiness probe over plain TCP.

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The server log, in the server's dir.
pub(super) const LOG_FILE: &str = "server.log";

/// A port that was free a moment ago (the OS picks it; we release it for the server).
pub(super) fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .expect("binding 127.0.0.1:0 to find a free port failed")
        .port()
}

/// A new dir under the system temp dir; `create_dir` (not `_all`) fails on a name clash,
/// so we retry with the next name.
pub(super) fn make_temp_dir() -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let base = std::env::temp_dir();
    for _ in 0..100 {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let dir = base.join(format!("redlease-test-{}-{n}-{nanos}", std::process::id()));
        match fs::create_dir(&dir) {
            Ok(()) => return dir,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => panic!("creating test server dir {} failed: {e}", dir.display()),
        }
    }
    panic!(
        "no unused temp dir name under {} after 100 tries",
        base.display()
    );
}

pub(super) fn read_log(dir: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut f) = File::open(dir.join(LOG_FILE)) {
        let mut bytes = Vec::new();
        let _ = f.read_to_end(&mut bytes);
        text = String::from_utf8_lossy(&bytes).into_owned();
    }
    text
}

pub(super) fn append_log_line(dir: &Path, line: &str) {
    if let Ok(mut f) = File::options().append(true).open(dir.join(LOG_FILE)) {
        let _ = writeln!(f, "{line}");
    }
}

/// The pid of the server on `port` if it answers PING (not LOADING); plain RESP over std, so
/// readiness checks never depend on the client library under test.
pub(super) fn ready_pid(port: u16) -> Option<u32> {
    let io_timeout = Duration::from_millis(500);
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, io_timeout).ok()?;
    stream.set_read_timeout(Some(io_timeout)).ok()?;
    stream.set_write_timeout(Some(io_timeout)).ok()?;
    // PING then INFO server, pipelined: the PONG proves readiness, INFO names the process.
    stream
        .write_all(b"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n")
        .ok()?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    if !line.starts_with("+PONG") {
        return None; // e.g. -LOADING while an AOF is read back
    }
    line.clear();
    reader.read_line(&mut line).ok()?;
    // RESP2 bulk string "$<len>"; INFO server is a few KiB.
    let len: usize = line.strip_prefix('$')?.trim().parse().ok()?;
    if len > 1 << 20 {
        return None;
    }
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    String::from_utf8_lossy(&body)
        .lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .and_then(|pid| pid.trim().parse().ok())
}
