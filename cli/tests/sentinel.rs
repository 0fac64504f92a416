//! The CLI on a master found through Redis Sentinel, named by the URL form
//! `redis+sentinel://host:port,.../<master-name>`.

#[path = "../../tests/support/mod.rs"]
mod support;

mod common;

use std::fs;

use common::{LIMIT, Running, Scratch, finish, rl, until_stopped};
use serde_json::Value;
use support::sentinel::SentinelGroup;
use support::{key_of, unique_name};

#[test]
fn run_and_status_through_sentinels_and_an_unknown_master_name() {
    let group = SentinelGroup::start();
    let url = group.url();
    let name = unique_name("cli-sentinel");
    let dir = Scratch::new("sentinel");
    let body = until_stopped(&dir);
    let mut run = Running::spawn(rl(
        &url,
        "run --fenced --lease 10s",
        &name,
        &["sh", "-c", &body],
    ));
    run.wait_for(&dir, "started");
    let master = &group.servers[group.master()];
    assert!(
        support::exists(master, &key_of(&name)),
        "held on the master"
    );
    let out = finish(rl(&url, "status --json", &name, &[]));
    assert_eq!(out.code(), Some(0), "{out:?}");
    let held: Value = serde_json::from_str(&out.stdout()).unwrap();
    assert_eq!(held["held"], true, "{held}");
    assert!(held["fence"].as_u64().is_some_and(|f| f > 1), "{held}");
    fs::write(dir.path("stop"), "").unwrap();
    assert_eq!(run.finish(LIMIT).code(), Some(0));
    assert!(!support::exists(master, &key_of(&name)));

    // A name no sentinel monitors: Redis unusable (69), with the name in the message.
    let wrong = url.replace("/mymaster", "/no-such-master");
    let out = finish(rl(&wrong, "run", &name, &["true"]));
    assert_eq!(out.code(), Some(69), "{out:?}");
    assert!(out.stderr().contains("no-such-master"), "{out:?}");
    // No master name at all: a usage error (64).
    let nameless = url.replace("/mymaster", "");
    assert_eq!(
        finish(rl(&nameless, "run", &name, &["true"])).code(),
        Some(64)
    );
}
