//! `status`, `watch` and `list` show who waits for a lock (each waiting process, its place and
//! how long it has waited) and what a holder said of its hold (its metadata).

#[path = "../../tests/support/mod.rs"]
mod support;

mod common;

use std::fs;

use common::{LIMIT, Running, Scratch, finish, rl, status_json, until_stopped};
use redlease::LockOptions;
use serde_json::Value;
use support::{Server, eventually, unique_name};

/// A lock held by one `redlease run` and waited for by three more: `status --json` lists the
/// three in the order they came, each with its process and a wait age that grows; the text
/// and `watch` show them too; they are then served in that order.
#[test]
fn status_lists_three_waiting_processes_in_order() {
    let server = Server::start();
    let name = unique_name("waited");
    let dir = Scratch::new("waited");
    let mut holder = Running::spawn(rl(
        &server.url(),
        "run",
        &name,
        &["sh", "-c", &until_stopped(&dir)],
    ));
    holder.wait_for(&dir, "started");
    // Each waiter's command writes the pid of its parent, the `redlease run` that waited.
    let order = dir.path("order");
    let record = format!("echo $PPID >> {}", order.display());
    let mut waiters = Vec::new();
    for i in 0..3 {
        waiters.push(Running::spawn(rl(
            &server.url(),
            "run",
            &name,
            &["sh", "-c", &record],
        )));
        let queued = eventually(LIMIT, || {
            status_json(&server, &name)["waiters"]
                .as_array()
                .map(Vec::len)
                == Some(i + 1)
        });
        assert!(
            queued,
            "waiter {i} never showed: {}",
            status_json(&server, &name)
        );
    }
    let pids: Vec<i32> = waiters.iter().map(Running::pid).collect();

    let first = status_json(&server, &name);
    let listed = first["waiters"].as_array().unwrap();
    for (i, w) in listed.iter().enumerate() {
        assert_eq!(w["position"], i + 1, "{first}");
        assert_eq!(w["client"]["pid"], pids[i], "{first}");
        assert_eq!(w["client"]["program"], "redlease", "{first}");
        let id = w["client"]["id"].as_str().unwrap();
        assert!(w["owner"].as_str().unwrap().starts_with(id), "{first}");
        assert!(w["place_expires_ms"].as_u64().unwrap() > 0, "{first}");
    }
    let ages = |status: &Value| -> Vec<u64> {
        status["waiters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["waited_ms"].as_u64().expect("a wait age"))
            .collect()
    };
    let before = ages(&first);
    assert!(before[0] >= before[1] && before[1] >= before[2], "{first}");
    std::thread::sleep(std::time::Duration::from_millis(300));
    let after = ages(&status_json(&server, &name));
    for (a, b) in before.iter().zip(&after) {
        assert!(b >= &(a + 250), "the ages grow: {before:?} then {after:?}");
    }

    let text = finish(rl(&server.url(), "status", &name, &[])).stdout();
    for (i, pid) in pids.iter().enumerate() {
        let line = format!("queue  {}. ", i + 1);
        let shown = text
            .lines()
            .find(|l| l.starts_with(&line))
            .unwrap_or_default();
        assert!(
            shown.contains(&format!(":{pid} redlease, waiting ")),
            "{text}"
        );
    }
    let watched = finish(rl(&server.url(), "watch --json --count 1", &name, &[]));
    let event: Value = serde_json::from_str(watched.stdout().trim()).unwrap();
    assert_eq!(event["event"], "held", "{event}");
    let watched_pids: Vec<i64> = event["waiters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w["client"]["pid"].as_i64().unwrap())
        .collect();
    assert_eq!(
        watched_pids,
        pids.iter().map(|&p| i64::from(p)).collect::<Vec<_>>()
    );
    let watched = finish(rl(&server.url(), "watch --count 1", &name, &[])).stdout();
    let first_waiter = format!(":{} redlease, waiting", pids[0]);
    assert!(
        watched.contains("queue: 1. ") && watched.contains(&first_waiter),
        "{watched}"
    );

    fs::write(dir.path("stop"), "").unwrap();
    assert_eq!(holder.finish(LIMIT).code(), Some(0));
    for waiter in waiters {
        assert_eq!(waiter.finish(LIMIT).code(), Some(0));
    }
    let served: Vec<i32> = fs::read_to_string(&order)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(served, pids, "served in the order listed");
    assert_eq!(status_json(&server, &name)["waiters"], Value::Array(vec![]));
}

/// Metadata a holder gave (`LockOptions::metadata`) shows in `status` (text and JSON) and in
/// `list`.
#[test]
fn metadata_round_trips_through_status_and_list() {
    let server = Server::start();
    let name = unique_name("meta");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let client = runtime.block_on(support::client(&server));
    let guard = runtime
        .block_on(
            client
                .lock(&name)
                .unwrap()
                .lock_with(LockOptions::new().metadata("nightly export, job 8812")),
        )
        .unwrap();
    let status = status_json(&server, &name);
    assert_eq!(
        status["owners"][0]["metadata"], "nightly export, job 8812",
        "{status}"
    );
    let text = finish(rl(&server.url(), "status", &name, &[])).stdout();
    assert!(text.contains("meta   nightly export, job 8812"), "{text}");
    let listed = finish(rl(&server.url(), "list --json", &name, &[]));
    let listed: Value = serde_json::from_str(&listed.stdout()).unwrap();
    assert_eq!(
        listed["locks"][0]["holders"][0]["metadata"], "nightly export, job 8812",
        "{listed}"
    );
    let text = finish(rl(&server.url(), "list", &name, &[])).stdout();
    assert!(text.contains("[nightly export, job 8812]"), "{text}");
    runtime.block_on(guard.unlock()).unwrap();
    runtime.block_on(client.shutdown()).unwrap();
}
