//! `redlease run` as users run it: exclusion, exit statuses, renewal, lost leases, signals.

#[path = "../../tests/support/mod.rs"]
mod support;

mod common;

use std::fs;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{
    BIN, LIMIT, Running, Scratch, alive, finish, hold_elsewhere, rl, status_json, until_stopped,
};
use serde_json::Value;
use support::{Server, eventually, unique_name};

#[test]
fn sixty_runs_from_six_processes_never_overlap() {
    const RUNS: usize = 60;
    const WORKERS: usize = 6;
    let server = Server::start();
    let name = unique_name("counter");
    let dir = Scratch::new("counter");
    fs::write(dir.path("counter"), "0").unwrap();
    // `set -C` makes `> marker` an O_EXCL create: it fails while another run is inside.
    // (`true`, not the special builtin `:`, whose failed redirection would end the shell.)
    let body = format!(
        "set -C; d='{}'; if ! true 2>/dev/null > $d/marker; then echo x >> $d/overlaps; fi; \
         n=$(cat $d/counter); sleep 0.05; echo $((n + 1)) >| $d/counter; rm -f $d/marker",
        dir.str()
    );
    let tickets = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..WORKERS {
            scope.spawn(|| {
                while tickets.fetch_add(1, Ordering::SeqCst) < RUNS {
                    let run = rl(&server.url(), "run --wait 20s", &name, &["sh", "-c", &body]);
                    let out = finish(run);
                    if out.code() != Some(0) {
                        failures.lock().unwrap().push(format!("{out:?}"));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(failures.is_empty(), "failed runs: {failures:#?}");
    assert_eq!(dir.read("counter").trim(), RUNS.to_string());
    assert_eq!(dir.read("overlaps"), "", "runs overlapped");
    eprintln!(
        "{RUNS} runs by {WORKERS} processes in {:?}",
        started.elapsed()
    );
}

/// `--poll` (for proxies without pub/sub): runs still take turns, and nothing subscribes.
#[test]
fn polling_runs_take_turns_without_subscribing() {
    let server = Server::start();
    let name = unique_name("poll");
    let dir = Scratch::new("poll");
    fs::write(dir.path("counter"), "0").unwrap();
    let body = format!(
        "set -C; d='{}'; if ! true 2>/dev/null > $d/marker; then echo x >> $d/overlaps; fi; \
         n=$(cat $d/counter); sleep 0.1; echo $((n + 1)) >| $d/counter; rm -f $d/marker",
        dir.str()
    );
    let runs: Vec<_> = (0..4)
        .map(|_| {
            Running::spawn(rl(
                &server.url(),
                "run --poll --wait 20s",
                &name,
                &["sh", "-c", &body],
            ))
        })
        .collect();
    for run in runs {
        let out = run.finish(LIMIT);
        assert_eq!(out.code(), Some(0), "{out:?}");
    }
    assert_eq!(dir.read("counter").trim(), "4");
    assert_eq!(dir.read("overlaps"), "", "runs overlapped");
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.conn())
        .unwrap();
    assert!(
        !stats.contains("cmdstat_subscribe"),
        "a polling run subscribed: {stats}"
    );
}

#[test]
fn the_commands_exit_status_passes_through() {
    let server = Server::start();
    let name = unique_name("codes");
    for code in [0, 3, 42] {
        let script = format!("exit {code}");
        let out = finish(rl(&server.url(), "run", &name, &["sh", "-c", &script]));
        assert_eq!(out.code(), Some(code), "{out:?}");
    }
    // Death by a signal is reported like a shell does: 128 + N.
    let out = finish(rl(&server.url(), "run", &name, &["sh", "-c", "kill -9 $$"]));
    assert_eq!(out.code(), Some(128 + 9), "{out:?}");
    let out = finish(rl(&server.url(), "run", &name, &["/no/such/command"]));
    assert_eq!(out.code(), Some(127), "{out:?}");
    assert_eq!(
        status_json(&server, &name)["held"],
        false,
        "released each time"
    );
}

#[test]
fn wait_timeout_exits_75_naming_the_lock() {
    let server = Server::start();
    let name = unique_name("busy");
    hold_elsewhere(&server, &name);
    let out = finish(rl(&server.url(), "run --wait 300ms", &name, &["true"]));
    assert_eq!(out.code(), Some(75), "{out:?}");
    assert!(out.stderr().contains(&name), "{out:?}");
    assert_eq!(out.stderr().lines().count(), 1, "one line: {out:?}");
    assert!(out.elapsed >= Duration::from_millis(300), "{out:?}");
    assert!(out.elapsed < Duration::from_secs(5), "{out:?}");
    // flock's spellings of the same bound.
    for wait in ["run --wait 0", "run -w 0", "run --timeout 0"] {
        let out = finish(rl(&server.url(), wait, &name, &["true"]));
        assert_eq!(out.code(), Some(75), "{wait}: {out:?}");
    }
}

/// `REDLEASE_LOG=debug` shows the acquisition, the watchdog's renewals and the release, one
/// plain line each (no colour codes in a log file); without it a healthy run says nothing.
#[test]
fn debug_log_shows_acquire_renewals_and_release() {
    let server = Server::start();
    let name = unique_name("logged");
    let mut cmd = rl(&server.url(), "run --lease 600ms", &name, &["sleep", "0.5"]);
    cmd.env("REDLEASE_LOG", "debug");
    let out = finish(cmd);
    assert_eq!(out.code(), Some(0), "{out:?}");
    let log = out.stderr();
    assert!(log.contains(&format!("acquire{{lock={name}")), "{log}");
    assert!(log.contains("renew{locks=1 renewed=1 lost=0}"), "{log}");
    assert!(log.contains(&format!("release{{lock={name}")), "{log}");
    assert!(log.contains("outcome=\"released\""), "{log}");
    assert!(!log.contains('\u{1b}'), "colour codes: {log}");
    let quiet = finish(rl(&server.url(), "run", &name, &["true"]));
    assert_eq!(quiet.code(), Some(0), "{quiet:?}");
    assert_eq!(quiet.stderr(), "", "{quiet:?}");
}

#[test]
fn force_unlock_stops_the_command_with_sigterm() {
    let server = Server::start();
    let name = unique_name("forced");
    let dir = Scratch::new("forced");
    let body = format!(
        "trap 'echo TERM > {}/got; exit 0' TERM; {}",
        dir.str(),
        until_stopped(&dir)
    );
    let mut run = Running::spawn(rl(
        &server.url(),
        "run --lease 900ms",
        &name,
        &["sh", "-c", &body],
    ));
    run.wait_for(&dir, "started");
    let forced_at = Instant::now();
    let out = finish(rl(&server.url(), "unlock --force", &name, &[]));
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(out.stdout().contains("was held"), "{out:?}");
    let run = run.finish(LIMIT);
    let stopped_after = forced_at.elapsed();
    assert_eq!(run.code(), Some(70), "{run:?}");
    assert!(run.stderr().contains("lost"), "{run:?}");
    assert_eq!(dir.read("got").trim(), "TERM", "the command got SIGTERM");
    // One renewal period is a third of the lease (300 ms); allow for process start and jitter.
    assert!(
        stopped_after < Duration::from_millis(1500),
        "{stopped_after:?}"
    );
}

#[test]
fn a_command_ignoring_sigterm_is_killed_after_grace() {
    let server = Server::start();
    let name = unique_name("stubborn");
    let dir = Scratch::new("stubborn");
    // The background sleep (a grandchild) must die too: it is in the command's process group.
    let body = format!(
        "trap '' TERM; sleep 30 & echo $! > {d}/grandchild; touch {d}/started; wait",
        d = dir.str()
    );
    let sub = "run --lease 600ms --grace 700ms";
    let mut run = Running::spawn(rl(&server.url(), sub, &name, &["sh", "-c", &body]));
    run.wait_for(&dir, "started");
    let forced_at = Instant::now();
    finish(rl(&server.url(), "unlock --force", &name, &[]));
    let run = run.finish(LIMIT);
    let stopped_after = forced_at.elapsed();
    assert_eq!(run.code(), Some(70), "{run:?}");
    assert!(run.stderr().contains("SIGKILL"), "{run:?}");
    assert!(
        stopped_after >= Duration::from_millis(700),
        "{stopped_after:?}"
    );
    assert!(stopped_after < Duration::from_secs(3), "{stopped_after:?}");
    let grandchild: i32 = dir.read("grandchild").trim().parse().expect("a pid");
    assert!(
        eventually(Duration::from_secs(2), || !alive(grandchild)),
        "the command's child survived"
    );
}

#[test]
fn the_watchdog_keeps_the_lock_for_three_leases() {
    let server = Server::start();
    let name = unique_name("long");
    let dir = Scratch::new("long");
    // At its very end the command asks redlease itself whether its lock is still held.
    let body = format!(
        "sleep 1.5; '{BIN}' status --json --url '{}' '{name}' > {}/status.json",
        server.url(),
        dir.str()
    );
    let out = finish(rl(
        &server.url(),
        "run --lease 500ms",
        &name,
        &["sh", "-c", &body],
    ));
    assert_eq!(out.code(), Some(0), "{out:?}");
    let status: Value = serde_json::from_str(&dir.read("status.json")).expect("status JSON");
    assert_eq!(status["held"], true, "{status}");
    assert_eq!(
        status["owners"].as_array().map(Vec::len),
        Some(1),
        "{status}"
    );
    let left = status["remaining_lease_ms"].as_u64().expect("a lease");
    assert!(left > 0 && left <= 500, "{status}");
    assert_eq!(status_json(&server, &name)["held"], false);
}

#[test]
fn a_killed_runner_frees_the_lock_within_one_lease() {
    let server = Server::start();
    let name = unique_name("killed");
    let dir = Scratch::new("killed");
    let body = format!("echo $$ > {}/pid; exec sleep 30", dir.str());
    let mut first = Running::spawn(rl(
        &server.url(),
        "run --lease 1s",
        &name,
        &["sh", "-c", &body],
    ));
    let pid = first.wait_for_pid(&dir, "pid");
    first.signal(libc::SIGKILL);
    let killed_at = Instant::now();
    let second = finish(rl(&server.url(), "run --wait 10s", &name, &["true"]));
    assert_eq!(second.code(), Some(0), "{second:?}");
    assert!(
        killed_at.elapsed() < Duration::from_millis(2000),
        "{second:?}"
    );
    drop(first.finish(LIMIT));
    // The orphaned command got SIGTERM from the kernel when redlease died.
    assert!(
        eventually(Duration::from_secs(2), || !alive(pid)),
        "orphan {pid} still runs"
    );
}

#[test]
fn sigterm_to_redlease_is_forwarded_and_the_lock_released() {
    let server = Server::start();
    let name = unique_name("forward");
    let dir = Scratch::new("forward");
    let body = format!("trap 'exit 9' TERM; {}", until_stopped(&dir));
    let mut run = Running::spawn(rl(&server.url(), "run", &name, &["sh", "-c", &body]));
    run.wait_for(&dir, "started");
    run.signal(libc::SIGTERM);
    let run = run.finish(LIMIT);
    assert_eq!(run.code(), Some(9), "the command's own status: {run:?}");
    assert_eq!(status_json(&server, &name)["held"], false);
}

#[test]
fn a_signal_while_waiting_gives_up_without_running() {
    let server = Server::start();
    let name = unique_name("waiting");
    let dir = Scratch::new("waiting");
    hold_elsewhere(&server, &name);
    let ran = dir.path("ran");
    let ran = ran.to_str().unwrap();
    let run = Running::spawn(rl(&server.url(), "run", &name, &["touch", ran]));
    std::thread::sleep(Duration::from_millis(300));
    run.signal(libc::SIGINT);
    let run = run.finish(LIMIT);
    assert_eq!(run.code(), Some(128 + 2), "{run:?}");
    assert!(!dir.path("ran").exists(), "the command must not run");
}

#[test]
fn the_command_leads_its_own_process_group_unless_foreground() {
    let server = Server::start();
    let name = unique_name("group");
    // Fields 1 and 5 of /proc/PID/stat: pid and process group ("sh" has no space in its name).
    let show = ["sh", "-c", "cut -d' ' -f1,5 /proc/$$/stat"];
    let out = finish(rl(&server.url(), "run", &name, &show));
    let text = out.stdout();
    let (pid, group) = text.trim().split_once(' ').expect("pid and group");
    assert_eq!(pid, group, "its own group by default");
    let out = finish(rl(&server.url(), "run --foreground", &name, &show));
    let text = out.stdout();
    let (pid, group) = text.trim().split_once(' ').expect("pid and group");
    assert_ne!(pid, group, "redlease's group with --foreground");
    // SAFETY: getpgrp has no preconditions; redlease inherited the test's process group.
    assert_eq!(group, unsafe { libc::getpgrp() }.to_string());
}
