//! `status`, `unlock --force`, unreachable servers, several `--url`s, and `--help`.

#[path = "../../tests/support/mod.rs"]
mod support;

mod common;

use std::fs;

use common::{
    LIMIT, Running, Scratch, dead_url, finish, redlease, rl, rl_nodes, status_json,
    status_json_nodes, until_stopped,
};
use serde_json::Value;
use support::{Server, unique_name};

#[test]
fn status_shows_holder_lease_and_fence() {
    let server = Server::start();
    let name = unique_name("status");
    let dir = Scratch::new("status");
    let sub = "run --fenced --lease 10s";
    let body = until_stopped(&dir);
    let mut run = Running::spawn(rl(&server.url(), sub, &name, &["sh", "-c", &body]));
    run.wait_for(&dir, "started");
    let held = status_json(&server, &name);
    assert_eq!(held["held"], true, "{held}");
    let fence = held["fence"].as_u64().expect("a fence");
    assert!(fence > 1, "{held}");
    assert_eq!(held["owners"][0]["holds"], 1, "{held}");
    let left = held["remaining_lease_ms"].as_u64().expect("a lease");
    assert!(left > 5_000 && left <= 10_000, "{held}");
    let text = finish(rl(&server.url(), "status", &name, &[])).stdout();
    assert!(text.contains("state  held"), "{text}");
    assert!(text.contains(&format!("fence  {fence}")), "{text}");

    fs::write(dir.path("stop"), "").unwrap();
    assert_eq!(run.finish(LIMIT).code(), Some(0));
    let free = status_json(&server, &name);
    assert_eq!(free["held"], false, "{free}");
    assert_eq!(
        free["fence"], fence,
        "the counter stays for its grace: {free}"
    );
    let text = finish(rl(&server.url(), "status", &name, &[])).stdout();
    assert!(text.contains("state  free"), "{text}");
}

#[test]
fn unlock_force_says_whether_anything_was_held() {
    let server = Server::start();
    let name = unique_name("unlock");
    let out = finish(rl(&server.url(), "unlock --force --json", &name, &[]));
    assert_eq!(out.code(), Some(0), "{out:?}");
    let json: Value = serde_json::from_str(&out.stdout()).unwrap();
    assert_eq!(json["was_held"], false, "{json}");
    common::hold_elsewhere(&server, &name);
    let out = finish(rl(&server.url(), "unlock --force", &name, &[]));
    assert!(out.stdout().contains("was held"), "{out:?}");
    assert_eq!(status_json(&server, &name)["held"], false);
    let out = finish(rl(&server.url(), "unlock", &name, &[]));
    assert_eq!(out.code(), Some(64), "--force is required: {out:?}");
}

#[test]
fn no_server_exits_69_for_every_subcommand() {
    let url = dead_url();
    for sub in ["run", "status", "unlock --force"] {
        let command: &[&str] = if sub == "run" { &["true"] } else { &[] };
        let out = finish(rl(&url, sub, "L", command));
        assert_eq!(out.code(), Some(69), "{sub}: {out:?}");
        assert!(out.stderr().contains(&url), "names the server: {out:?}");
    }
    // $REDIS_URL is the fallback for --url.
    let mut status = redlease(&["status", "L"]);
    status.env("REDIS_URL", &url);
    assert_eq!(finish(status).code(), Some(69));
    let server = Server::start();
    let mut status = redlease(&["status", "L"]);
    status.env("REDIS_URL", server.url());
    assert_eq!(finish(status).code(), Some(0));
}

#[test]
fn several_urls_run_a_redlock_held_by_a_majority() {
    let servers = support::start_many(3);
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    let name = unique_name("redlock");
    let dir = Scratch::new("redlock");
    let body = until_stopped(&dir);
    let sub = "run --lease 2s";
    let mut holder = Running::spawn(rl_nodes(&urls, sub, &name, &["sh", "-c", &body]));
    holder.wait_for(&dir, "started");
    let status = status_json_nodes(&urls, &name);
    assert_eq!(status["held"], true, "{status}");
    assert_eq!(status["nodes_held"], 3, "{status}");
    // One node down of three is still a majority, and the lock is held there.
    let partial = [urls[0].clone(), urls[1].clone(), dead_url()];
    let busy = finish(rl_nodes(&partial, "run --wait 300ms", &name, &["true"]));
    assert_eq!(busy.code(), Some(75), "{busy:?}");
    fs::write(dir.path("stop"), "").unwrap();
    assert_eq!(holder.finish(LIMIT).code(), Some(0));
    let next = finish(rl_nodes(&partial, "run", &name, &["true"]));
    assert_eq!(next.code(), Some(0), "{next:?}");

    // Two of three down: no majority, for any subcommand.
    let (down1, down2) = (dead_url(), dead_url());
    let minority = [urls[0].clone(), down1.clone(), down2];
    for sub in ["run", "status", "unlock --force"] {
        let command: &[&str] = if sub == "run" { &["true"] } else { &[] };
        let out = finish(rl_nodes(&minority, sub, &name, command));
        assert_eq!(out.code(), Some(69), "{sub}: {out:?}");
        assert!(out.stderr().contains(&down1), "{out:?}");
    }
    let status = status_json_nodes(&partial, &name);
    assert_eq!(status["nodes"][2]["reachable"], false, "{status}");
}

#[test]
fn four_urls_with_one_down_still_take_a_redlock() {
    let servers = support::start_many(3);
    let mut urls: Vec<String> = servers.iter().map(Server::url).collect();
    let down = dead_url();
    urls.push(down.clone());
    let name = unique_name("redlock4");
    let dir = Scratch::new("redlock4");
    let body = until_stopped(&dir);
    // The down node keeps its vote: the quorum is 3 of all 4, which the 3 live ones make.
    let mut holder = Running::spawn(rl_nodes(
        &urls,
        "run --lease 2s",
        &name,
        &["sh", "-c", &body],
    ));
    holder.wait_for(&dir, "started");
    let status = status_json_nodes(&urls, &name);
    assert_eq!(status["held"], true, "{status}");
    assert_eq!(status["quorum"], 3, "{status}");
    assert_eq!(status["nodes_held"], 3, "{status}");
    assert_eq!(status["nodes"][3]["reachable"], false, "{status}");
    let busy = finish(rl_nodes(&urls, "run --wait 300ms", &name, &["true"]));
    assert_eq!(busy.code(), Some(75), "{busy:?}");
    fs::write(dir.path("stop"), "").unwrap();
    let done = holder.finish(LIMIT);
    assert_eq!(done.code(), Some(0), "{done:?}");
    assert_eq!(status_json_nodes(&urls, &name)["nodes_held"], 0);

    // Verbose says which node is down and that it still counts.
    let out = finish(rl_nodes(&urls, "run -v", &name, &["sh", "-c", "echo ran"]));
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert_eq!(out.stdout(), "ran\n", "{out:?}");
    assert!(out.stderr().contains(&down), "{out:?}");
    assert!(out.stderr().contains("3 of all 4"), "{out:?}");

    // Two of four down: 2 reachable is no majority of 4, refused at once.
    let half = [urls[0].clone(), urls[1].clone(), down.clone(), dead_url()];
    let out = finish(rl_nodes(&half, "run", &name, &["true"]));
    assert_eq!(out.code(), Some(69), "{out:?}");
    assert!(out.stderr().contains(&down), "{out:?}");
}

/// A bad setting or URL is a usage error (64) with several `--url`s as with one, not
/// unreachable nodes (69), and one bad URL among good ones is not tolerated as a down node.
#[test]
fn several_urls_report_a_bad_setting_or_url_as_usage_error() {
    let servers = support::start_many(3);
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    let bad_settings = [
        ("prefix", "the key prefix must not be empty"),
        ("--prefix a{", "must not contain"),
        ("--replicas 1:500us", "at least 1 millisecond"),
    ];
    for sub in ["run", "status", "unlock --force"] {
        let command: &[&str] = if sub == "run" { &["true"] } else { &[] };
        for (setting, says) in bad_settings {
            let mut cmd = if setting == "prefix" {
                rl_nodes(&urls, sub, "L", command)
            } else {
                rl_nodes(&urls, &format!("{sub} {setting}"), "L", command)
            };
            // An empty $REDLEASE_PREFIX is the only way to give an empty prefix.
            if setting == "prefix" {
                cmd.env("REDLEASE_PREFIX", "");
            }
            let out = finish(cmd);
            assert_eq!(out.code(), Some(64), "{sub} {setting}: {out:?}");
            assert!(out.stderr().contains(says), "{sub} {setting}: {out:?}");
            assert!(
                !out.stderr().contains("reachable"),
                "{sub} {setting}: {out:?}"
            );
        }
        let one_bad = [urls[0].clone(), urls[1].clone(), "nosuch://x".to_owned()];
        let out = finish(rl_nodes(&one_bad, sub, "L", command));
        assert_eq!(out.code(), Some(64), "{sub} with a bad URL: {out:?}");
        assert!(out.stderr().contains("nosuch://x"), "{sub}: {out:?}");
    }
}

/// The subcommands that talk to one deployment refuse several `--url`s before connecting,
/// rather than silently using the last one.
#[test]
fn one_deployment_subcommands_refuse_several_urls() {
    let servers = support::start_many(2);
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    for sub in [
        "list",
        "watch --count 1",
        "leader",
        "observe --count 1",
        "elect",
    ] {
        let command: &[&str] = if sub == "elect" { &["true"] } else { &[] };
        let out = finish(rl_nodes(&urls, sub, "L", command));
        assert_eq!(out.code(), Some(64), "{sub}: {out:?}");
        assert!(out.stderr().contains("give one --url"), "{sub}: {out:?}");
        assert!(out.stdout().is_empty(), "{sub}: {out:?}");
    }
}

#[test]
fn help_has_examples_and_usage_errors_exit_64() {
    for sub in ["run", "status", "unlock"] {
        let out = finish(redlease(&[sub, "--help"]));
        assert_eq!(out.code(), Some(0));
        assert!(out.stdout().contains("Examples:"), "{sub}: {out:?}");
    }
    let out = finish(redlease(&["run", "L"]));
    assert_eq!(out.code(), Some(64), "no command: {out:?}");
    let out = finish(redlease(&["run", "--lease", "ten", "L", "true"]));
    assert_eq!(out.code(), Some(64), "bad duration: {out:?}");
}

/// `status` names the holder's process; `list` shows every held lock with its holder.
#[test]
fn status_and_list_name_the_holding_process() {
    let server = Server::start();
    let name = unique_name("listed");
    let other = unique_name("listed-other");
    let dir = Scratch::new("listed");
    let body = until_stopped(&dir);
    let mut run = Running::spawn(rl(
        &server.url(),
        "run --lease 10s",
        &name,
        &["sh", "-c", &body],
    ));
    run.wait_for(&dir, "started");
    common::hold_elsewhere(&server, &other);
    let held = status_json(&server, &name);
    let client = &held["owners"][0]["client"];
    assert_eq!(client["pid"], run.pid(), "{held}");
    assert_eq!(client["program"], "redlease", "{held}");
    let text = finish(rl(&server.url(), "status", &name, &[])).stdout();
    assert!(text.contains(&format!(":{} redlease", run.pid())), "{text}");

    let out = finish(redlease(&["list", "--url", &server.url(), "--json"]));
    assert_eq!(out.code(), Some(0), "{out:?}");
    let listed: Value = serde_json::from_str(&out.stdout()).unwrap();
    let locks = listed["locks"].as_array().unwrap();
    let mine = locks
        .iter()
        .find(|l| l["name"] == name.as_str())
        .expect("listed");
    assert_eq!(mine["holders"][0]["client"]["pid"], run.pid(), "{listed}");
    let left = mine["remaining_lease_ms"].as_u64().unwrap();
    assert!(left > 5_000 && left <= 10_000, "{listed}");
    let foreign = locks
        .iter()
        .find(|l| l["name"] == other.as_str())
        .expect("listed");
    assert_eq!(foreign["holders"][0]["owner"], "someone-else:1", "{listed}");
    assert!(
        foreign["holders"][0]["client"].is_null(),
        "no announcement: {listed}"
    );
    let pattern = format!("{}*", &name[..name.len() - 3]);
    let text = finish(redlease(&["list", "--url", &server.url(), &pattern])).stdout();
    assert!(text.contains(&name) && !text.contains(&other), "{text}");

    fs::write(dir.path("stop"), "").unwrap();
    assert_eq!(run.finish(LIMIT).code(), Some(0));
    let out = finish(redlease(&["list", "--url", &server.url(), "--json", &name]));
    let listed: Value = serde_json::from_str(&out.stdout()).unwrap();
    assert_eq!(listed["locks"].as_array().unwrap().len(), 0, "{listed}");
}

/// `watch` prints the starting state, then each change: held, released.
#[test]
fn watch_prints_each_change() {
    let server = Server::start();
    let name = unique_name("watched");
    let watch = Running::spawn(rl(
        &server.url(),
        "watch --json --count 3 --for 20s --interval 20ms",
        &name,
        &[],
    ));
    std::thread::sleep(std::time::Duration::from_millis(300));
    let out = finish(rl(&server.url(), "run", &name, &["sleep", "0.5"]));
    assert_eq!(out.code(), Some(0), "{out:?}");
    let done = watch.finish(LIMIT);
    assert_eq!(done.code(), Some(0), "{done:?}");
    let events: Vec<Value> = done
        .stdout()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["free", "held", "released"], "{}", done.stdout());
    assert_eq!(events[1]["holders"][0]["client"]["program"], "redlease");
}
