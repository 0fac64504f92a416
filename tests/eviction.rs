//! A server whose `maxmemory-policy` may evict lock keys is reported when the client connects:
//! `Client::server_warnings`, a `tracing` warning naming the policy and the fix, and a metric;
//! `refuse_evicting_servers` makes connecting fail instead. The policy is learnt from `INFO`,
//! or from `CONFIG GET` for a user without `INFO`.

mod support;

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use redlease::{Client, Error, ServerWarning};
use support::{Cluster, Server};

/// The rights of docs/acl.md for one server and the default prefix (as in `tests/acl.rs`).
const LEAST: &str = "resetkeys resetchannels ~redlease:* &redlease:* -@all \
    +evalsha +script|load +publish +subscribe +unsubscribe \
    +get +hget +hmget +hgetall +hset +hmset +pexpire +exists +del \
    +hsetnx +hexists +hincrby +hdel +set +incr +incrby +decr +decrby \
    +rpush +lindex +lrem +lpop +type +pttl +time +pubsub|numsub +info";

fn set_policy(server: &Server, policy: &str) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg(policy)
        .query(&mut server.conn())
        .expect("CONFIG SET maxmemory-policy");
}

fn set_user(server: &Server, user: &str, rules: &str) {
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER")
        .arg(user)
        .arg("reset")
        .arg("on")
        .arg(">pw");
    for rule in rules.split_whitespace() {
        cmd.arg(rule);
    }
    let _: () = cmd.query(&mut server.conn()).expect("ACL SETUSER");
}

fn acl_log(server: &Server) -> Vec<String> {
    let entries: Vec<redis::Value> = redis::cmd("ACL")
        .arg("LOG")
        .query(&mut server.conn())
        .expect("ACL LOG");
    entries.iter().map(|entry| format!("{entry:?}")).collect()
}

fn node_of(server: &Server) -> String {
    format!("127.0.0.1:{}", server.port())
}

/// The process-wide metrics recorder of this test binary, installed on first use.
fn metrics() -> &'static PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        PrometheusBuilder::new()
            .install_recorder()
            .expect("install the recorder")
    })
}

/// Log lines written by `tracing` while a test's subscriber is the thread's default.
#[derive(Clone, Default)]
struct Logged(Arc<Mutex<Vec<u8>>>);

impl Logged {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl Write for Logged {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Connects to `server` (current-thread runtime: the build runs on this thread) and answers
/// the client with what it logged at `warn` meanwhile.
async fn connect_logged(url: String) -> (Client, String) {
    let logged = Logged::default();
    let writer = logged.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_max_level(tracing::Level::WARN)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    let client = support::connect(&url).await;
    (client, logged.text())
}

#[tokio::test]
async fn a_policy_that_may_evict_lock_keys_is_reported() {
    let metrics = metrics();
    for policy in ["allkeys-lru", "volatile-lru"] {
        let server = Server::start();
        set_policy(&server, policy);
        let (client, logged) = connect_logged(server.url()).await;
        let expected = ServerWarning::Eviction {
            node: node_of(&server),
            policy: policy.to_owned(),
        };
        assert_eq!(
            client.server_warnings(),
            std::slice::from_ref(&expected),
            "{policy}"
        );
        assert!(expected.to_string().contains("noeviction"), "{expected}");
        assert!(logged.contains("WARN"), "{policy}: not warned: {logged}");
        assert!(
            logged.contains(policy),
            "{policy}: policy not named: {logged}"
        );
        assert!(
            logged.contains("CONFIG SET maxmemory-policy noeviction"),
            "{policy}: fix not named: {logged}"
        );
        let series =
            format!("redlease_server_warnings_total{{warning=\"eviction\",policy=\"{policy}\"}}");
        let text = metrics.render();
        assert!(text.contains(&series), "no {series} in:\n{text}");
        client.shutdown().await.unwrap();
    }
}

#[tokio::test]
async fn noeviction_is_not_reported_and_not_refused() {
    let server = Server::start();
    set_policy(&server, "noeviction");
    let (client, logged) = connect_logged(server.url()).await;
    assert_eq!(client.server_warnings(), []);
    assert!(!logged.contains("maxmemory-policy"), "{logged}");
    let strict = Client::builder(server.url())
        .refuse_evicting_servers(true)
        .build()
        .await
        .expect("noeviction is not refused");
    assert!(strict.config().refuse_evicting_servers);
    assert_eq!(strict.server_warnings(), []);
}

#[tokio::test]
async fn refusing_evicting_servers_fails_connect_with_the_typed_error() {
    let server = Server::start();
    set_policy(&server, "allkeys-lfu");
    let refused = Client::builder(server.url())
        .refuse_evicting_servers(true)
        .build()
        .await
        .expect_err("an evicting server is refused");
    match refused {
        Error::EvictingServer { node, policy } => {
            assert_eq!(node, node_of(&server));
            assert_eq!(policy, "allkeys-lfu");
        }
        other => panic!("not EvictingServer: {other:?}"),
    }
    // The default only warns.
    let client = support::client(&server).await;
    assert_eq!(client.server_warnings().len(), 1);
}

#[tokio::test]
async fn a_least_privilege_user_without_config_learns_the_policy_from_info() {
    let server = Server::start();
    set_policy(&server, "volatile-lru");
    set_user(&server, "locker", LEAST);
    let url = format!("redis://locker:pw@127.0.0.1:{}", server.port());
    let client = support::connect(&url).await;
    let warnings = client.server_warnings();
    assert!(
        matches!(&warnings[..], [ServerWarning::Eviction { policy, .. }] if policy == "volatile-lru"),
        "{warnings:?}"
    );
    // INFO answered: no CONFIG GET was tried, nothing was refused.
    assert_eq!(acl_log(&server), Vec::<String>::new());
}

#[tokio::test]
async fn a_user_without_info_learns_the_policy_from_config_get() {
    let server = Server::start();
    set_policy(&server, "allkeys-random");
    let rules = LEAST.replace("+info", "+config|get");
    set_user(&server, "configured", &rules);
    let url = format!("redis://configured:pw@127.0.0.1:{}", server.port());
    let client = support::connect(&url).await;
    let warnings = client.server_warnings();
    assert!(
        matches!(&warnings[..], [ServerWarning::Eviction { policy, .. }] if policy == "allkeys-random"),
        "{warnings:?}"
    );
}

#[tokio::test]
async fn a_user_with_neither_right_connects_unwarned() {
    let server = Server::start();
    set_policy(&server, "allkeys-lru");
    set_user(&server, "blind", &LEAST.replace("+info", ""));
    let url = format!("redis://blind:pw@127.0.0.1:{}", server.port());
    let client = Client::builder(url)
        .refuse_evicting_servers(true)
        .build()
        .await
        .expect("an unknown policy is not refused");
    assert_eq!(client.server_warnings(), []);
}

#[tokio::test]
async fn a_lazy_client_learns_nothing_at_connect() {
    let server = Server::start();
    set_policy(&server, "allkeys-lru");
    let client = Client::builder(server.url())
        .lazy(true)
        .build()
        .await
        .unwrap();
    assert_eq!(client.server_warnings(), []);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_primary_of_a_cluster_is_checked() {
    let cluster = Cluster::start();
    for node in &cluster.nodes {
        set_policy(node, "volatile-ttl");
    }
    let client = Client::builder(cluster.url()).build().await.unwrap();
    let mut nodes: Vec<String> = client
        .server_warnings()
        .into_iter()
        .map(|warning| match warning {
            ServerWarning::Eviction { node, policy } => {
                assert_eq!(policy, "volatile-ttl");
                node
            }
            other => panic!("{other:?}"),
        })
        .collect();
    nodes.sort();
    let mut primaries: Vec<String> = cluster
        .primaries()
        .into_iter()
        .map(|i| node_of(&cluster.nodes[i]))
        .collect();
    primaries.sort();
    assert_eq!(nodes, primaries);
}
