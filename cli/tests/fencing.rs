//! `redlease run --fenced`: tokens in `$REDLEASE_TOKEN`, and a paused holder's late write
//! rejected by the resource of `examples/fencing.rs`.

#[path = "../../tests/support/mod.rs"]
mod support;

mod common;

// The example's resource check, so these tests prove exactly what the example shows.
#[path = "../../examples/fencing.rs"]
#[allow(dead_code)]
mod fencing_example;

use std::fs;
use std::process::Command;

use common::{LIMIT, Running, Scratch, finish, rl, rl_nodes, status_json};
use support::{Server, unique_name};

#[test]
fn fenced_runs_hand_out_increasing_tokens() {
    let server = Server::start();
    let name = unique_name("tokens");
    let echo = ["sh", "-c", "echo \"$REDLEASE_LOCK $REDLEASE_TOKEN\""];
    let mut seen = Vec::new();
    for _ in 0..5 {
        // Each run is a new process, so a new client.
        let out = finish(rl(&server.url(), "run --fenced", &name, &echo));
        assert_eq!(out.code(), Some(0), "{out:?}");
        seen.push(out.stdout().trim().to_owned());
    }
    let tokens: Vec<u64> = seen
        .iter()
        .map(|line| {
            let (lock, token) = line.split_once(' ').expect("lock and token");
            assert_eq!(lock, name);
            token.parse().expect("a token")
        })
        .collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    // Without --fenced no token is set, not even one inherited from an outer run.
    let mut plain = rl(
        &server.url(),
        "run",
        &name,
        &["sh", "-c", "echo \"[$REDLEASE_TOKEN]\""],
    );
    plain.env("REDLEASE_TOKEN", "99");
    assert_eq!(finish(plain).stdout().trim(), "[]");
    assert_eq!(status_json(&server, &name)["fence"], tokens[4]);
}

#[test]
fn a_paused_holders_late_write_is_rejected_by_the_resource() {
    let server = Server::start();
    let name = unique_name("paused");
    let dir = Scratch::new("paused");
    let resource = unique_name("resource");
    let fenced_write = |cmd: &mut Command| {
        cmd.env("URL", server.url())
            .env("FENCED_WRITE", fencing_example::FENCED_WRITE)
            .env("RESOURCE", &resource);
    };
    let write = "redis-cli -u \"$URL\" EVAL \"$FENCED_WRITE\" 1 \"$RESOURCE\" \"$REDLEASE_TOKEN\"";
    // The first holder's command writes when it finds `go`, whatever happened meanwhile.
    let first_body = format!(
        "echo $$ > {d}/pid; for i in $(seq 600); do [ -e {d}/go ] && break; sleep 0.02; done; \
         {write} late > {d}/late",
        d = dir.str()
    );
    let sub = "run --fenced --lease 400ms";
    let mut cmd = rl(&server.url(), sub, &name, &["sh", "-c", &first_body]);
    fenced_write(&mut cmd);
    let mut first = Running::spawn(cmd);
    // Pause redlease and its command (which leads its own process group) past the lease.
    let group = first.wait_for_pid(&dir, "pid");
    first.signal(libc::SIGSTOP);
    signal_group(group, libc::SIGSTOP);
    let second_body = format!(
        "{write} newer > {d}/newer; echo $REDLEASE_TOKEN > {d}/token",
        d = dir.str()
    );
    let mut cmd = rl(
        &server.url(),
        "run --fenced --wait 10s",
        &name,
        &["sh", "-c", &second_body],
    );
    fenced_write(&mut cmd);
    let second = finish(cmd);
    assert_eq!(second.code(), Some(0), "{second:?}");
    assert_eq!(
        dir.read("newer").trim(),
        "1",
        "the newer holder's write is accepted"
    );

    // The paused command wakes first and writes with its old token; then redlease wakes.
    fs::write(dir.path("go"), "").unwrap();
    signal_group(group, libc::SIGCONT);
    dir.wait_for("late");
    assert_eq!(dir.read("late").trim(), "0", "the late write is rejected");
    first.signal(libc::SIGCONT);
    let first = first.finish(LIMIT);
    assert_eq!(
        first.code(),
        Some(70),
        "the lost lease is reported: {first:?}"
    );
    let stored: (String, u64) = redis::cmd("HMGET")
        .arg(&resource)
        .arg("value")
        .arg("token")
        .query(&mut server.conn())
        .unwrap();
    let token: u64 = dir.read("token").trim().parse().unwrap();
    assert_eq!(stored, ("newer".to_owned(), token));
}

#[test]
fn a_redlock_hands_out_increasing_tokens() {
    let servers = support::start_many(3);
    let urls: Vec<String> = servers.iter().map(Server::url).collect();
    let name = unique_name("redlock-tokens");
    let echo = ["sh", "-c", "echo $REDLEASE_TOKEN"];
    let mut last = 0u64;
    for _ in 1..=3 {
        let out = finish(rl_nodes(&urls, "run --fenced", &name, &echo));
        assert_eq!(out.code(), Some(0), "{out:?}");
        let token: u64 = out.stdout().trim().parse().expect("a token");
        assert!(token > last, "{token} after {last}");
        last = token;
    }
}

fn signal_group(group: i32, signal: i32) {
    assert!(group > 1);
    // SAFETY: kill(2) on the process group of a command our own redlease child started.
    let rc = unsafe { libc::kill(-group, signal) };
    assert_eq!(rc, 0, "kill(-{group}, {signal}) failed");
}
