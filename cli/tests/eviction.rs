//! A server whose `maxmemory-policy` may evict the lock's key is warned about on stderr; the
//! command still runs.

#[path = "../../tests/support/mod.rs"]
mod support;

mod common;

use common::{finish, rl};
use support::{Server, unique_name};

fn set_policy(server: &Server, policy: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg(policy)
        .query(&mut server.conn())
        .expect("CONFIG SET maxmemory-policy");
}

#[test]
fn run_warns_on_stderr_when_the_server_may_evict_its_key() {
    let server = Server::start();
    set_policy(&server, "allkeys-lru");
    let done = finish(rl(
        &server.url(),
        "run",
        &unique_name("cli-evict"),
        &["true"],
    ));
    assert_eq!(done.code(), Some(0), "stderr: {}", done.stderr());
    let stderr = done.stderr();
    assert!(stderr.contains("warning"), "stderr: {stderr}");
    assert!(
        stderr.contains("maxmemory-policy allkeys-lru"),
        "stderr: {stderr}"
    );
    assert!(stderr.contains("noeviction"), "stderr: {stderr}");

    set_policy(&server, "noeviction");
    let done = finish(rl(
        &server.url(),
        "run",
        &unique_name("cli-evict"),
        &["true"],
    ));
    assert_eq!(done.code(), Some(0), "stderr: {}", done.stderr());
    assert!(
        !done.stderr().contains("maxmemory-policy"),
        "stderr: {}",
        done.stderr()
    );
}
