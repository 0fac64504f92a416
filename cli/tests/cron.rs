//! `redlease run` from cron: `--quiet` (a busy lock exits 75 and prints nothing) and
//! `--hold-at-least` (a fleet whose crons fire a little apart runs a short job once).

#[path = "../../tests/support/mod.rs"]
mod support;

mod common;

use std::time::{Duration, Instant};

use common::{LIMIT, Running, Scratch, dead_url, finish, hold_elsewhere, rl, status_json};
use support::{Server, unique_name};

#[test]
fn quiet_on_a_busy_lock_prints_nothing_and_exits_75() {
    let server = Server::start();
    let name = unique_name("quiet");
    hold_elsewhere(&server, &name);
    for sub in ["run --wait 0 --quiet", "run -q --wait 300ms"] {
        let out = finish(rl(&server.url(), sub, &name, &["true"]));
        assert_eq!(out.code(), Some(75), "{sub}: {out:?}");
        assert_eq!(out.stderr(), "", "{sub}: nothing on stderr");
        assert_eq!(out.stdout(), "", "{sub}: nothing on stdout");
    }
    // Without it the loser says why (the line cron would mail).
    let out = finish(rl(&server.url(), "run --wait 0", &name, &["true"]));
    assert_eq!(out.code(), Some(75), "{out:?}");
    assert!(out.stderr().contains(&name), "{out:?}");
}

#[test]
fn quiet_still_reports_other_failures() {
    let out = finish(rl(&dead_url(), "run --wait 0 --quiet", "job", &["true"]));
    assert_eq!(out.code(), Some(69), "{out:?}");
    assert!(out.stderr().starts_with("redlease: "), "{out:?}");
    // And it does not hide the command's own output or status.
    let server = Server::start();
    let name = unique_name("quiet-ran");
    let out = finish(rl(
        &server.url(),
        "run --quiet",
        &name,
        &["sh", "-c", "echo out; echo err >&2; exit 3"],
    ));
    assert_eq!(out.code(), Some(3), "{out:?}");
    assert_eq!(
        (out.stdout().as_str(), out.stderr().as_str()),
        ("out\n", "err\n")
    );
}

/// Two hosts' crons fire 1 s apart and each runs a 0.2 s job with `--wait 0`: the lines in
/// `DIR/ran` (one per run of the job), and each redlease's result. The second starts 1 s after
/// the first, and not before the first's job started (a slow machine must not swap them);
/// with `first_done`, not before the first exited either.
fn two_skewed_runs(sub: &str, first_done: bool) -> (Scratch, Vec<common::Finished>) {
    let server = Server::start();
    let name = unique_name("cron");
    let dir = Scratch::new("cron");
    let job = format!("echo $$ >> {}/ran; sleep 0.2", dir.str());
    let started = Instant::now();
    let mut first = Running::spawn(rl(&server.url(), sub, &name, &["sh", "-c", &job]));
    first.wait_for(&dir, "ran");
    std::thread::sleep(Duration::from_secs(1).saturating_sub(started.elapsed()));
    let mut first = Some(first);
    let early = if first_done {
        first.take().map(|run| run.finish(LIMIT))
    } else {
        None
    };
    let second = Running::spawn(rl(&server.url(), sub, &name, &["sh", "-c", &job]));
    let first = early
        .or_else(|| first.map(|run| run.finish(LIMIT)))
        .expect("the first run");
    let finished = vec![first, second.finish(LIMIT)];
    assert_eq!(
        status_json(&server, &name)["held"],
        false,
        "released at the end"
    );
    (dir, finished)
}

#[test]
fn hold_at_least_runs_a_short_job_once_across_skewed_crons() {
    let (dir, out) = two_skewed_runs("run --wait 0 --quiet --hold-at-least 5s", false);
    assert_eq!(dir.read("ran").lines().count(), 1, "ran once: {out:?}");
    assert_eq!(out[0].code(), Some(0), "{out:?}");
    assert_eq!(out[1].code(), Some(75), "the second found it held: {out:?}");
    assert_eq!(out[1].stderr(), "", "{out:?}");
    // The first kept the lock for the 5 s, then released it and exited.
    let held = out[0].elapsed;
    assert!(
        held >= Duration::from_secs(5) && held < Duration::from_secs(10),
        "{held:?}"
    );
}

#[test]
fn without_hold_at_least_both_skewed_crons_run_the_job() {
    let (dir, out) = two_skewed_runs("run --wait 0", true);
    assert_eq!(dir.read("ran").lines().count(), 2, "{out:?}");
    assert!(out.iter().all(|o| o.code() == Some(0)), "{out:?}");
}

/// A command that outlasts `--hold-at-least` is released as soon as it exits.
#[test]
fn hold_at_least_shorter_than_the_command_adds_nothing() {
    let server = Server::start();
    let name = unique_name("longer");
    let started = Instant::now();
    let out = finish(rl(
        &server.url(),
        "run --hold-at-least 100ms",
        &name,
        &["sleep", "0.6"],
    ));
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(started.elapsed() < Duration::from_millis(2500), "{out:?}");
    assert_eq!(status_json(&server, &name)["held"], false);
}

/// The hold after the command ends with a release: a lock-delay (for holders that died) does
/// not start, so the next run after DUR takes the lock at once.
#[test]
fn hold_at_least_ends_with_a_release_not_a_lock_delay() {
    let server = Server::start();
    let name = unique_name("delayed");
    let dir = Scratch::new("delayed");
    let done = dir.path("done");
    let mut first = Running::spawn(rl(
        &server.url(),
        "run --lock-delay 10s --hold-at-least 3s",
        &name,
        &["touch", done.to_str().unwrap()],
    ));
    first.wait_for(&dir, "done");
    std::thread::sleep(Duration::from_millis(300));
    let busy = finish(rl(
        &server.url(),
        "run --wait 0 --lock-delay 10s",
        &name,
        &["true"],
    ));
    assert_eq!(
        busy.code(),
        Some(75),
        "still held after the command: {busy:?}"
    );
    let first = first.finish(LIMIT);
    assert_eq!(first.code(), Some(0), "{first:?}");
    let ran = dir.path("ran");
    let next = finish(rl(
        &server.url(),
        "run --wait 0 --lock-delay 10s",
        &name,
        &["touch", ran.to_str().unwrap()],
    ));
    assert_eq!(
        next.code(),
        Some(0),
        "taken at once after the hold: {next:?}"
    );
    assert!(ran.exists());
}

/// A SIGTERM while only the hold is left (the command exited) releases at once and exits with
/// the command's status.
#[test]
fn a_signal_during_the_hold_releases_at_once() {
    let server = Server::start();
    let name = unique_name("stopped");
    let dir = Scratch::new("stopped");
    let job = format!("touch {}/done; exit 4", dir.str());
    let mut run = Running::spawn(rl(
        &server.url(),
        "run --hold-at-least 30s",
        &name,
        &["sh", "-c", &job],
    ));
    run.wait_for(&dir, "done");
    // The command has exited (or is exiting); the lock is still held.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(status_json(&server, &name)["held"], true);
    run.signal(libc::SIGTERM);
    let out = run.finish(Duration::from_secs(5));
    assert_eq!(out.code(), Some(4), "the command's status: {out:?}");
    assert!(out.stderr().contains("SIGTERM"), "{out:?}");
    assert_eq!(status_json(&server, &name)["held"], false);
}
