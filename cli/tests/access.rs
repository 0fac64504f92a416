//! Refusals at connect: a Redis user missing a right exits 77 naming it, a TLS server the
//! system does not trust exits 78; neither leaves anything behind.

#[path = "../../tests/support/mod.rs"]
mod support;

mod common;

use common::{finish, rl};
use support::tls::TlsServer;
use support::{Server, unique_name};

#[test]
fn a_user_without_publish_exits_77_naming_it() {
    let server = Server::start();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("nopub")
        .arg("reset")
        .arg("on")
        .arg(">pw")
        .arg("~redlease:*")
        .arg("&redlease:*")
        .arg("+@all")
        .arg("-publish")
        .query(&mut server.conn())
        .expect("ACL SETUSER");
    let url = format!("redis://nopub:pw@127.0.0.1:{}", server.port());
    let name = unique_name("cli-acl");
    let done = finish(rl(&url, "run", &name, &["true"]));
    assert_eq!(done.code(), Some(77), "stderr: {}", done.stderr());
    assert!(
        done.stderr().contains("PUBLISH"),
        "stderr: {}",
        done.stderr()
    );
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("redlease:*")
        .query(&mut server.conn())
        .expect("KEYS");
    assert!(keys.is_empty(), "left behind: {keys:?}");
}

#[test]
fn an_untrusted_tls_server_exits_78() {
    let Some(server) = TlsServer::start(false) else {
        return;
    };
    let name = unique_name("cli-tls");
    let done = finish(rl(&server.url(), "run", &name, &["true"]));
    assert_eq!(done.code(), Some(78), "stderr: {}", done.stderr());
    assert!(done.stderr().contains("TLS"), "stderr: {}", done.stderr());
}
