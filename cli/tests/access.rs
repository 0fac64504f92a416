//! Refusals at connect: a Redis user missing a right exits 77 naming it, a TLS server the
//! system does not trust exits 78; neither leaves anything behind.

#[path = "../../tests/support/mod.rs"]
mod support;

mod common;

use std::fs;

use common::{Scratch, finish, rl};
use support::tls::{TlsCluster, TlsServer};
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

/// The certificates of `server`'s CA in files, as an operator would have them.
fn cert_files(server: &TlsServer) -> Scratch {
    let dir = Scratch::new("tls");
    let pki = &server.pki;
    for (file, pem) in [
        ("ca.crt", &pki.ca_pem),
        ("client.crt", &pki.client_cert_pem),
        ("client.key", &pki.client_key_pem),
    ] {
        fs::write(dir.path(file), pem).expect("writing a certificate");
    }
    dir
}

/// Lock script calls the server ran (read on its plain port): a lock was really taken.
fn script_calls(server: &TlsServer) -> u64 {
    ["eval", "evalsha"]
        .iter()
        .map(|command| support::command_calls(&server.server, command))
        .sum()
}

#[test]
fn tls_ca_makes_a_private_ca_trusted_on_every_subcommand() {
    let Some(server) = TlsServer::start(false) else {
        return;
    };
    let certs = cert_files(&server);
    let ca = certs.path("ca.crt");
    let ca = ca.to_str().expect("utf-8 path");
    let name = unique_name("cli-tls-ca");
    let before = script_calls(&server);
    let sub = format!("run --tls-ca {ca}");
    let done = finish(rl(
        &server.url(),
        &sub,
        &name,
        &["sh", "-c", "echo ran-under-lock"],
    ));
    assert_eq!(done.code(), Some(0), "stderr: {}", done.stderr());
    assert_eq!(done.stdout().trim(), "ran-under-lock");
    assert!(script_calls(&server) > before, "no lock script ran");
    // The same CA from the environment, for the other subcommands.
    for sub in ["status --json", "list", "unlock --force"] {
        let name = if sub == "list" { "*" } else { &name };
        let mut cmd = rl(&server.url(), sub, name, &[]);
        cmd.env("REDLEASE_TLS_CA", ca);
        let done = finish(cmd);
        assert_eq!(done.code(), Some(0), "{sub}: stderr: {}", done.stderr());
    }
    let mut watch = rl(&server.url(), "watch --count 1", &name, &[]);
    watch.env("REDLEASE_TLS_CA", ca);
    let done = finish(watch);
    assert_eq!(done.code(), Some(0), "watch: stderr: {}", done.stderr());
    assert!(done.stdout().contains("free"), "watch: {}", done.stdout());
}

#[test]
fn tls_cert_and_key_pass_a_server_that_requires_client_certificates() {
    let Some(server) = TlsServer::start(true) else {
        return;
    };
    let certs = cert_files(&server);
    let path = |file: &str| certs.path(file).to_str().expect("utf-8 path").to_owned();
    let name = unique_name("cli-mtls");
    // Trusting the server is not enough: it refuses a client without a certificate.
    let sub = format!("run --tls-ca {}", path("ca.crt"));
    let done = finish(rl(&server.url(), &sub, &name, &["true"]));
    assert_eq!(done.code(), Some(78), "stderr: {}", done.stderr());
    let before = script_calls(&server);
    let sub = format!(
        "run --tls-ca {} --tls-cert {} --tls-key {}",
        path("ca.crt"),
        path("client.crt"),
        path("client.key")
    );
    let done = finish(rl(&server.url(), &sub, &name, &["true"]));
    assert_eq!(done.code(), Some(0), "stderr: {}", done.stderr());
    assert!(script_calls(&server) > before, "no lock script ran");
}

#[test]
fn tls_ca_reaches_every_node_of_a_tls_cluster() {
    let Some(cluster) = TlsCluster::start() else {
        return;
    };
    let certs = cert_files(&cluster.nodes[0]);
    let ca = certs.path("ca.crt");
    let ca = ca.to_str().expect("utf-8 path");
    let url = cluster.url();
    // Untrusted first: the cluster's CA is private.
    let name = unique_name("cli-tls-cluster");
    let done = finish(rl(&url, "run", &name, &["true"]));
    assert_eq!(done.code(), Some(78), "stderr: {}", done.stderr());
    let calls = |c: &TlsCluster| c.nodes.iter().map(script_calls).sum::<u64>();
    let before = calls(&cluster);
    let sub = format!("run --tls-ca {ca}");
    let done = finish(rl(&url, &sub, &name, &["sh", "-c", "echo ran-under-lock"]));
    assert_eq!(done.code(), Some(0), "stderr: {}", done.stderr());
    assert_eq!(done.stdout().trim(), "ran-under-lock");
    assert!(calls(&cluster) > before, "no lock script ran");
    let mut list = rl(&url, "list", "*", &[]);
    list.env("REDLEASE_TLS_CA", ca);
    let done = finish(list);
    assert_eq!(done.code(), Some(0), "list: stderr: {}", done.stderr());
}

#[test]
fn unusable_tls_options_exit_64_before_connecting() {
    let certs = Scratch::new("tls-bad");
    fs::write(certs.path("ca.crt"), "not a certificate").expect("writing");
    let ca = certs
        .path("ca.crt")
        .to_str()
        .expect("utf-8 path")
        .to_owned();
    let missing = certs
        .path("missing.crt")
        .to_str()
        .expect("utf-8")
        .to_owned();
    // No server: none of these may get as far as connecting (that would be 69, not 64).
    let dead = common::dead_url();
    let tls_dead = dead.replacen("redis://", "rediss://", 1);
    let cases = [
        (
            dead.clone(),
            format!("status --tls-ca {ca}"),
            "need TLS URLs",
        ),
        (
            tls_dead.clone(),
            format!("status --tls-ca {missing}"),
            "cannot read",
        ),
        (
            tls_dead.clone(),
            format!("status --tls-ca {ca}"),
            "no PEM CERTIFICATE",
        ),
        (
            tls_dead.clone(),
            format!("status --tls-cert {ca}"),
            "--tls-key",
        ),
    ];
    for (url, sub, says) in cases {
        let done = finish(rl(&url, &sub, "L", &[]));
        assert_eq!(done.code(), Some(64), "{sub}: stderr: {}", done.stderr());
        assert!(
            done.stderr().contains(says),
            "{sub}: stderr: {}",
            done.stderr()
        );
    }
}
