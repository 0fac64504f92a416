//! The CLI on a Redis Cluster, named by the URL form `redis+cluster://host:port,host:port`.

#[path = "../../tests/support/mod.rs"]
mod support;

mod common;

use std::fs;

use common::{LIMIT, Running, Scratch, finish, rl, until_stopped};
use serde_json::Value;
use support::{Cluster, key_of, unique_name};

fn status(url: &str, name: &str) -> Value {
    let out = finish(rl(url, "status --json", name, &[]));
    assert_eq!(out.code(), Some(0), "status failed: {out:?}");
    serde_json::from_str(&out.stdout()).expect("status --json prints JSON")
}

#[test]
fn run_status_and_unlock_on_a_cluster() {
    let cluster = Cluster::start();
    let url = cluster.url();
    for (name, primary) in cluster.names_per_primary("cli", 1) {
        let dir = Scratch::new("cluster");
        let body = until_stopped(&dir);
        let mut run = Running::spawn(rl(
            &url,
            "run --fenced --lease 10s",
            &name,
            &["sh", "-c", &body],
        ));
        run.wait_for(&dir, "started");
        let key = key_of(&name);
        assert!(
            support::exists(&cluster.nodes[primary], &key),
            "held on its primary"
        );
        let held = status(&url, &name);
        assert_eq!(held["held"], true, "{held}");
        assert!(held["fence"].as_u64().is_some_and(|f| f > 1), "{held}");
        // A second run waits briefly and gives up: the lock is held.
        let busy = finish(rl(&url, "run --wait 200ms", &name, &["true"]));
        assert_ne!(busy.code(), Some(0), "{busy:?}");
        fs::write(dir.path("stop"), "").unwrap();
        assert_eq!(run.finish(LIMIT).code(), Some(0));
        assert_eq!(status(&url, &name)["held"], false);

        redis::pipe()
            .hset(&key, "someone-else:1", 1)
            .pexpire(&key, 20_000)
            .query::<()>(&mut cluster.nodes[primary].conn())
            .expect("HSET + PEXPIRE");
        let out = finish(rl(&url, "unlock --force --json", &name, &[]));
        assert_eq!(out.code(), Some(0), "{out:?}");
        let json: Value = serde_json::from_str(&out.stdout()).unwrap();
        assert_eq!(json["was_held"], true, "{json}");
        assert!(!support::exists(&cluster.nodes[primary], &key));
    }
    let name = unique_name("cli-redact");
    let out = finish(rl(
        &url.replace("redis+cluster://", "redis+cluster://user:secret@"),
        "status",
        &name,
        &[],
    ));
    assert!(
        !out.stderr().contains("secret") && !out.stdout().contains("secret"),
        "{out:?}"
    );
}
