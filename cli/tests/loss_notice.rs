//! `redlease run` under the default 30 s lease: its command is stopped within 300 ms of the lock
//! being deleted or evicted, not at the next renewal ten seconds later.

#[path = "../../tests/support/mod.rs"]
mod support;

mod common;

use std::time::{Duration, Instant};

use common::{LIMIT, Running, Scratch, rl, until_stopped};
use support::{Server, eventually, exists, key_of, unique_name};

/// The bar for `redlease run`.
const STOPPED_WITHIN: Duration = Duration::from_millis(300);

/// Starts `redlease run NAME -- sh` (default lease) whose command writes `got` on SIGTERM, and
/// waits until the command runs.
fn start(server: &Server, name: &str, dir: &Scratch) -> Running {
    let body = format!(
        "trap 'touch {}/got; exit 0' TERM; {}",
        dir.str(),
        until_stopped(dir)
    );
    let mut run = Running::spawn(rl(&server.url(), "run", name, &["sh", "-c", &body]));
    run.wait_for(dir, "started");
    // Past two of the loss notice's arming delays (100 ms by default), so the hold is armed.
    std::thread::sleep(Duration::from_millis(300));
    run
}

/// How long after `from` the command got SIGTERM; the run must end with status 70, saying so.
fn stopped_after(run: Running, dir: &Scratch, from: Instant) -> Duration {
    let got = dir.path("got");
    assert!(
        eventually(Duration::from_secs(5), || got.exists()),
        "the command was not stopped within 5 s"
    );
    let took = from.elapsed();
    let run = run.finish(LIMIT);
    assert_eq!(run.code(), Some(70), "{run:?}");
    assert!(run.stderr().contains("lost"), "{run:?}");
    took
}

#[test]
fn a_deleted_key_stops_the_command_at_once() {
    let server = Server::start();
    let name = unique_name("run-del");
    let dir = Scratch::new("run-del");
    let run = start(&server, &name, &dir);
    let deleted_at = Instant::now();
    let _: i64 = redis::cmd("DEL")
        .arg(key_of(&name))
        .query(&mut server.conn())
        .unwrap();
    let took = stopped_after(run, &dir, deleted_at);
    println!("DEL -> command stopped: {took:?}");
    assert!(took < STOPPED_WITHIN, "stopped {took:?} after the DEL");
}

#[test]
fn an_evicted_key_stops_the_command_at_once() {
    let server = Server::start();
    let name = unique_name("run-evict");
    let dir = Scratch::new("run-evict");
    let run = start(&server, &name, &dir);
    let key = key_of(&name);
    let mut conn = server.conn();
    let info: String = redis::cmd("INFO").arg("memory").query(&mut conn).unwrap();
    let used: u64 = info
        .lines()
        .find_map(|line| line.strip_prefix("used_memory:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO memory has used_memory");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(used + 2 * 1024 * 1024)
        .arg("maxmemory-policy")
        .arg("allkeys-lru")
        .query(&mut conn)
        .unwrap();
    let value = vec![b'x'; 64 * 1024];
    let mut gone_at = None;
    // 64 KiB a write: 2 MiB fill up within ~32; bounded far above that.
    for i in 0..2000 {
        let _: () = redis::cmd("SET")
            .arg(format!("fill:{i}"))
            .arg(&value)
            .query(&mut conn)
            .unwrap();
        if !exists(&server, &key) {
            gone_at = Some(Instant::now());
            break;
        }
    }
    let gone_at = gone_at.expect("the lock key was never evicted");
    let took = stopped_after(run, &dir, gone_at);
    println!("evicted -> command stopped: {took:?}");
    assert!(took < STOPPED_WITHIN, "stopped {took:?} after the eviction");
}
