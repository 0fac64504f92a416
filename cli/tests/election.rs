//! `redlease elect`, `leader` and `observe` as users run them: one command at a time across
//! processes, hand-over at the command's exit, a lost leadership stopping the command (and
//! `--rejoin` running it again in a greater term), and one observed line per change.

#[path = "../../tests/support/mod.rs"]
mod support;

mod common;

use std::fs::File;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{LIMIT, Running, Scratch, finish, redlease, rl};
use serde_json::Value;
use support::{Server, eventually, unique_name};

/// A command that appends its term to `DIR/terms`, touches `DIR/started.WHO`, then runs until
/// `DIR/stop.WHO` appears (at most 12 s).
fn leader_body(dir: &Scratch, who: &str) -> String {
    format!(
        "echo \"$REDLEASE_TERM\" >> {d}/terms; touch {d}/started.{who}; \
         for i in $(seq 600); do [ -e {d}/stop.{who} ] && break; sleep 0.02; done",
        d = dir.str()
    )
}

fn terms(dir: &Scratch) -> Vec<u64> {
    dir.read("terms")
        .lines()
        .map(|l| l.trim().parse().expect("a term"))
        .collect()
}

fn leader_json(server: &Server, name: &str) -> Value {
    let out = finish(rl(&server.url(), "leader --json", name, &[]));
    assert_eq!(out.code(), Some(0), "{out:?}");
    serde_json::from_str(&out.stdout()).expect("one JSON object")
}

#[test]
fn elect_runs_the_command_only_while_leading_and_hands_over_when_it_exits() {
    let server = Server::start();
    let name = unique_name("elect");
    let dir = Scratch::new("elect");
    let mut a = Running::spawn(rl(
        &server.url(),
        "elect --lease 20s --value a",
        &name,
        &["sh", "-c", &leader_body(&dir, "a")],
    ));
    a.wait_for(&dir, "started.a");
    let b = Running::spawn(rl(
        &server.url(),
        "elect --lease 20s --value b",
        &name,
        &["sh", "-c", &leader_body(&dir, "b")],
    ));
    std::thread::sleep(Duration::from_millis(700));
    assert!(!dir.path("started.b").exists(), "b ran while a led");
    let status = leader_json(&server, &name);
    assert_eq!(status["leader"]["value"], "a");
    let first = terms(&dir);
    assert_eq!(status["leader"]["term"].as_u64(), first.first().copied());
    assert!(status["leader"]["pid"].as_u64().is_some());
    let text = finish(rl(&server.url(), "leader", &name, &[]));
    assert!(text.stdout().contains("\"a\""), "{text:?}");

    // The command's exit resigns: b runs long before a's 20 s lease would have run out.
    std::fs::write(dir.path("stop.a"), "").unwrap();
    let stopped = Instant::now();
    let a = a.finish(LIMIT);
    assert_eq!(a.code(), Some(0), "{a:?}");
    assert!(
        eventually(Duration::from_secs(5), || dir.path("started.b").exists()),
        "b did not take over"
    );
    let took = stopped.elapsed();
    assert!(took < Duration::from_secs(3), "b took over after {took:?}");
    let all = terms(&dir);
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(all[1] > all[0], "terms {all:?}");
    std::fs::write(dir.path("stop.b"), "").unwrap();
    let b = b.finish(LIMIT);
    assert_eq!(b.code(), Some(0), "{b:?}");
    let status = leader_json(&server, &name);
    assert_eq!(status["leader"], Value::Null);
    assert_eq!(status["transitions"], 2);
    assert_eq!(status["last_change"], "resigned");
    let text = finish(rl(&server.url(), "leader", &name, &[]));
    assert!(text.stdout().contains("has no leader"), "{text:?}");
}

#[test]
fn a_lost_leadership_stops_the_command_and_rejoin_runs_it_again_in_a_greater_term() {
    let server = Server::start();
    let name = unique_name("rejoin");
    let dir = Scratch::new("rejoin");
    let mut elect = Running::spawn(rl(
        &server.url(),
        "elect --rejoin --lease 600ms --grace 2s --value r",
        &name,
        &["sh", "-c", &leader_body(&dir, "r")],
    ));
    elect.wait_for(&dir, "started.r");
    std::fs::remove_file(dir.path("started.r")).unwrap();
    // An operator frees the lock: the watchdog finds it gone, the command is stopped, and
    // redlease campaigns again.
    let unlock = finish(rl(&server.url(), "unlock --force", &name, &[]));
    assert_eq!(unlock.code(), Some(0), "{unlock:?}");
    elect.wait_for(&dir, "started.r");
    let all = terms(&dir);
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(all[1] > all[0], "terms {all:?}");
    std::fs::write(dir.path("stop.r"), "").unwrap();
    let out = elect.finish(LIMIT);
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(out.stderr().contains("campaigning again"), "{out:?}");

    // Without --rejoin the loss ends redlease with 70.
    let dir = Scratch::new("no-rejoin");
    let mut elect = Running::spawn(rl(
        &server.url(),
        "elect --lease 600ms --grace 2s",
        &name,
        &["sh", "-c", &leader_body(&dir, "n")],
    ));
    elect.wait_for(&dir, "started.n");
    let unlock = finish(rl(&server.url(), "unlock --force", &name, &[]));
    assert_eq!(unlock.code(), Some(0), "{unlock:?}");
    let out = elect.finish(LIMIT);
    assert_eq!(out.code(), Some(70), "{out:?}");
    assert!(out.stderr().contains("was lost"), "{out:?}");
}

/// `redlease observe` with its output in a file, killed by its pid on Drop.
struct Observer {
    child: Child,
}

impl Drop for Observer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn observe_prints_one_line_per_change_in_order() {
    let server = Server::start();
    let name = unique_name("observe");
    let dir = Scratch::new("observe");
    let out = File::create(dir.path("observed")).unwrap();
    let mut cmd = redlease(&[
        "observe",
        "--url",
        &server.url(),
        "--json",
        "--count",
        "5",
        &name,
    ]);
    cmd.stdout(Stdio::from(out)).stderr(Stdio::inherit());
    let mut observer = Observer {
        child: cmd.spawn().expect("starting redlease observe"),
    };
    assert!(
        eventually(LIMIT, || dir.read("observed").lines().count() >= 1),
        "no first line"
    );
    for value in ["one", "two"] {
        let run = finish(rl(
            &server.url(),
            &format!("elect --value {value}"),
            &name,
            &["true"],
        ));
        assert_eq!(run.code(), Some(0), "{run:?}");
    }
    let exited = eventually(LIMIT, || !matches!(observer.child.try_wait(), Ok(None)));
    assert!(exited, "observe did not stop after 5 lines");
    let lines: Vec<Value> = dir
        .read("observed")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON lines"))
        .collect();
    let events: Vec<&str> = lines.iter().map(|l| l["event"].as_str().unwrap()).collect();
    assert_eq!(
        events,
        ["now", "elected", "resigned", "elected", "resigned"],
        "{lines:#?}"
    );
    let revisions: Vec<u64> = lines
        .iter()
        .map(|l| l["revision"].as_u64().unwrap())
        .collect();
    assert_eq!(revisions, [0, 1, 2, 3, 4]);
    assert_eq!(lines[1]["leader"]["value"], "one");
    assert_eq!(lines[3]["leader"]["value"], "two");
    let t1 = lines[1]["leader"]["term"].as_u64().unwrap();
    let t2 = lines[3]["leader"]["term"].as_u64().unwrap();
    assert!(t2 > t1);
    assert!(
        lines
            .iter()
            .all(|l| l["missed"] == 0 && l["restarted"] == false)
    );
}

/// `leader` prints the leader on one line whatever its value: a line break (or a quote) in the
/// value is escaped, not printed raw to split the line.
#[test]
fn a_value_with_a_line_break_is_printed_on_one_line() {
    let server = Server::start();
    let name = unique_name("elect-value");
    let dir = Scratch::new("elect-value");
    let url = server.url();
    let body = leader_body(&dir, "a");
    let args = [
        "elect", "--url", &url, "--lease", "20s", "--value", "a\n\"b\"", &name, "--", "sh", "-c",
        &body,
    ];
    let mut a = Running::spawn(redlease(&args));
    a.wait_for(&dir, "started.a");
    let text = finish(rl(&url, "leader", &name, &[]));
    let shown = text.stdout();
    assert_eq!(shown.trim_end().lines().count(), 1, "{text:?}");
    assert!(shown.contains(r#""a\n\"b\"""#), "{text:?}");
    std::fs::write(dir.path("stop.a"), "").unwrap();
    assert_eq!(a.finish(LIMIT).code(), Some(0));
}
