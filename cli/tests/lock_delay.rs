//! `redlease run --lock-delay`: after a holder is killed (kill -9), the next run starts only
//! when the lease and then the delay have run out; after a normal exit it starts at once.

#[path = "../../tests/support/mod.rs"]
mod support;

mod common;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{LIMIT, Running, Scratch, finish, rl};
use support::{Server, key_of, pttl, unique_name};

/// Microseconds since 1970 by this machine's clock (the server's too: it runs here).
fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as i64
}

#[test]
fn a_killed_holders_lock_is_refused_for_the_delay_after_its_lease() {
    next_run_waits_out_a_killed_holders_delay("run --wait 10s --lock-delay 3s");
}

/// The delay is the holder's: a next run that asks for none waits it out all the same.
#[test]
fn a_next_run_without_lock_delay_waits_out_the_holders_delay() {
    next_run_waits_out_a_killed_holders_delay("run --wait 10s");
}

fn next_run_waits_out_a_killed_holders_delay(next_run: &str) {
    let server = Server::start();
    let name = unique_name("killed");
    let dir = Scratch::new("lock-delay");
    let body = format!("echo $$ > {}/pid; exec sleep 60", dir.str());
    let mut holder = Running::spawn(rl(
        &server.url(),
        "run --lease 2s --lock-delay 3s",
        &name,
        &["sh", "-c", &body],
    ));
    let command = holder.wait_for_pid(&dir, "pid");
    // Let a renewal or two happen, then kill redlease without a chance to release.
    std::thread::sleep(Duration::from_millis(900));
    holder.signal(libc::SIGKILL);
    let left_ms = pttl(&server, &key_of(&name));
    assert!(
        left_ms > 0,
        "the lock is still held after the kill: {left_ms}"
    );
    let last_renewal_us = now_us() + left_ms * 1000 - 2_000_000;
    // SAFETY: kill(2) on the command our killed redlease started (it leads its own group).
    unsafe { libc::kill(-command, libc::SIGKILL) };
    drop(holder.finish(LIMIT));

    let started = format!("date +%s%6N > {}/started", dir.str());
    let next = finish(rl(&server.url(), next_run, &name, &["sh", "-c", &started]));
    assert_eq!(next.code(), Some(0), "{next:?}");
    let started_us: i64 = dir.read("started").trim().parse().expect("a time");
    let after = (started_us - last_renewal_us) as f64 / 1e6;
    assert!(
        (4.98..5.5).contains(&after),
        "`{next_run}` started {after:.3} s after the last renewal (lease 2 s + delay 3 s)"
    );
}

#[test]
fn after_a_normal_exit_the_next_run_starts_at_once() {
    let server = Server::start();
    let name = unique_name("released");
    let first = finish(rl(
        &server.url(),
        "run --lease 2s --lock-delay 3s",
        &name,
        &["true"],
    ));
    assert_eq!(first.code(), Some(0), "{first:?}");
    let at = Instant::now();
    let next = finish(rl(
        &server.url(),
        "run --wait 0 --lock-delay 3s",
        &name,
        &["true"],
    ));
    assert_eq!(next.code(), Some(0), "free at once: {next:?}");
    assert!(at.elapsed() < Duration::from_secs(2));
}
