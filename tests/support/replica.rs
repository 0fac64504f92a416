//! A primary with one replica, linked and acknowledging writes, and a way to freeze a server
//! for the length of a scope (tests/replicas.rs).

use std::time::Duration;

use super::Server;

const SETTLE: Duration = Duration::from_secs(10);

/// A primary and one replica of it, linked (`master_link_status:up`, `connected_slaves:1`).
pub fn primary_with_replica() -> (Server, Server) {
    primary_with_replica_args(&[], "WAIT")
}

/// The same, the primary started with `primary_args`, and `wait` its name of `WAIT`.
pub fn primary_with_replica_args(primary_args: &[&str], wait: &str) -> (Server, Server) {
    // Without the default 5 s pause before a diskless full sync, the replica links at once.
    let mut builder = Server::builder().arg("--repl-diskless-sync-delay").arg("0");
    for arg in primary_args {
        builder = builder.arg(*arg);
    }
    let primary = builder.start();
    let replica = Server::builder()
        .arg("--replicaof")
        .arg("127.0.0.1")
        .arg(primary.port().to_string())
        .start();
    let linked = super::eventually(SETTLE, || {
        // `state=online`: WAIT counts only replicas past their initial sync.
        let primary_view = info(&primary, "replication");
        info(&replica, "replication").contains("master_link_status:up")
            && primary_view.contains("connected_slaves:1")
            && primary_view.contains("state=online")
    });
    assert!(linked, "the replica never linked to its primary");
    // Just after its sync a replica may not acknowledge yet: wait until it does.
    let acknowledging = super::eventually(SETTLE, || {
        let mut conn = primary.conn();
        let _: () = redis::cmd("SET")
            .arg("replicas-probe")
            .arg(1)
            .query(&mut conn)
            .expect("SET");
        let acks: u64 = redis::cmd(wait)
            .arg(1)
            .arg(200)
            .query(&mut conn)
            .expect("WAIT");
        acks == 1
    });
    assert!(acknowledging, "the replica never acknowledged a write");
    (primary, replica)
}

pub fn info(server: &Server, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query(&mut server.conn())
        .expect("INFO")
}

/// SIGSTOPs a server until dropped (SIGCONT), so a failed assertion never leaves it frozen.
pub struct Stopped<'a>(&'a Server);

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        self.0.resume();
    }
}

pub fn stop(server: &Server) -> Stopped<'_> {
    server.pause();
    Stopped(server)
}
