//! A real Redis Cluster (or Valkey cluster) of 3 primaries and 3 replicas on free loopback
//! ports: six [`Server`]s started with `--cluster-enabled yes`, joined by
//! `redis-cli --cluster create ... --cluster-replicas 1`. Each node is killed by its own pid
//! when the [`Cluster`] drops (through its [`Server`]).

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::server::Server;
use super::shard::key_slot;

/// How long the cluster may take to agree on its slots and link its replicas.
const FORM_TIMEOUT: Duration = Duration::from_secs(30);

/// One node as `CLUSTER NODES` describes it.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub id: String,
    pub port: u16,
    pub primary: bool,
    /// For a replica: the id of its primary.
    pub primary_id: Option<String>,
    /// For a primary: its slot ranges (inclusive).
    pub slots: Vec<(u16, u16)>,
}

pub struct Cluster {
    pub nodes: Vec<Server>,
}

impl Cluster {
    /// Six nodes of the default server binary (see [`Server::builder`]), formed and settled.
    pub fn start() -> Cluster {
        Cluster::start_with(None)
    }

    /// The same with `binary` (a valkey-server, say). `redis-cli --cluster create` waits
    /// without end for nodes that never meet (a cluster bus port taken meanwhile, say): it is
    /// given 30 s, then the nodes are stopped and started again on fresh ports, three times.
    pub fn start_with(binary: Option<std::path::PathBuf>) -> Cluster {
        let mut last = String::new();
        for _ in 0..3 {
            let nodes = start_nodes(binary.as_deref());
            match create(&nodes, Duration::from_secs(30)) {
                Ok(()) => {
                    let cluster = Cluster { nodes };
                    cluster.until_settled();
                    return cluster;
                }
                Err(why) => {
                    eprintln!("cluster create failed, starting over: {why}");
                    last = why;
                }
            }
        }
        panic!("redis-cli --cluster create failed three times: {last}");
    }

    /// A Valkey cluster when a valkey-server is found, else `None` (the caller skips).
    pub fn start_valkey() -> Option<Cluster> {
        super::valkey_binary().map(|bin| Cluster::start_with(Some(bin)))
    }

    /// The URL of every node, as seeds.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes.iter().map(Server::url).collect()
    }

    /// `redis+cluster://127.0.0.1:P1,127.0.0.1:P2,...`: the URL form of the whole cluster.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port()))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// A running node's view of the topology.
    pub fn topology(&self) -> Vec<NodeInfo> {
        let mut last = String::new();
        for node in &self.nodes {
            if let Ok(text) = cluster_nodes(node) {
                return parse_nodes(&text);
            }
            last = format!("node {} did not answer", node.port());
        }
        panic!("no node answers CLUSTER NODES: {last}");
    }

    /// Index in `nodes` of the primary that serves `key` now.
    pub fn primary_of(&self, key: &str) -> usize {
        let slot = key_slot(key);
        let topology = self.topology();
        let node = topology
            .iter()
            .find(|n| n.primary && n.slots.iter().any(|&(a, b)| a <= slot && slot <= b))
            .unwrap_or_else(|| panic!("no primary serves slot {slot}"));
        self.index_of_port(node.port)
    }

    /// The server that serves `key` now (for probes: `exists`, `owners`, `pttl`, ...).
    pub fn server_of(&self, key: &str) -> &Server {
        &self.nodes[self.primary_of(key)]
    }

    /// Indexes of the current primaries, in port order.
    pub fn primaries(&self) -> Vec<usize> {
        let mut ports: Vec<u16> = self
            .topology()
            .iter()
            .filter(|n| n.primary && !n.slots.is_empty())
            .map(|n| n.port)
            .collect();
        ports.sort_unstable();
        ports.into_iter().map(|p| self.index_of_port(p)).collect()
    }

    /// Index of a replica of the primary at `primary`.
    pub fn replica_of(&self, primary: usize) -> usize {
        self.try_replica_of(primary)
            .unwrap_or_else(|| panic!("no replica of {}", self.nodes[primary].port()))
    }

    /// Index of a replica of the primary at `primary`, if it has one now.
    pub fn try_replica_of(&self, primary: usize) -> Option<usize> {
        let topology = self.topology();
        let port = self.nodes[primary].port();
        let id = &topology.iter().find(|n| n.port == port)?.id;
        let replica = topology
            .iter()
            .find(|n| n.primary_id.as_deref() == Some(id))?;
        Some(self.index_of_port(replica.port))
    }

    /// Starts a killed node again and waits until every node sees it back as a replica with
    /// its link to its primary up.
    pub fn restart(&mut self, node: usize) {
        self.nodes[node].restart();
        let port = self.nodes[node].port();
        self.until(|c| {
            let linked = redis::cmd("INFO")
                .arg("replication")
                .query::<String>(&mut c.nodes[node].conn())
                .is_ok_and(|info| info.contains("master_link_status:up"));
            linked && c.agreeing(|t| t.iter().any(|n| n.port == port && n.primary_id.is_some()))
        });
    }

    /// `n` lock names for each current primary (name → the primary index), found by hashing
    /// `prefix-i` for i = 0.. (the lock key is `redlease:{name}`).
    pub fn names_per_primary(&self, prefix: &str, n: usize) -> Vec<(String, usize)> {
        let topology = self.topology();
        let mut found: HashMap<usize, usize> = HashMap::new();
        let mut names = Vec::new();
        let primaries = topology.iter().filter(|n| n.primary && !n.slots.is_empty());
        let total = primaries.count();
        for i in 0..100_000 {
            let name = super::unique_name(&format!("{prefix}{i}"));
            let slot = key_slot(&format!("redlease:{{{name}}}"));
            let owner = topology
                .iter()
                .find(|n| n.primary && n.slots.iter().any(|&(a, b)| a <= slot && slot <= b))
                .map(|n| self.index_of_port(n.port));
            if let Some(owner) = owner {
                let count = found.entry(owner).or_default();
                if *count < n {
                    *count += 1;
                    names.push((name, owner));
                }
            }
            if found.len() == total && found.values().all(|&c| c == n) {
                return names;
            }
        }
        panic!("could not find {n} names for each primary");
    }

    /// `CLUSTER FAILOVER` on the replica of `primary`; waits until every running node sees the
    /// replica as primary. Returns the index of the new primary.
    pub fn failover(&self, primary: usize) -> usize {
        let replica = self.replica_of(primary);
        redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .query::<()>(&mut self.nodes[replica].conn())
            .expect("CLUSTER FAILOVER");
        let port = self.nodes[replica].port();
        self.until(|c| {
            c.agreeing(|t| {
                t.iter()
                    .any(|n| n.port == port && n.primary && !n.slots.is_empty())
            })
        });
        replica
    }

    /// Waits until the replica of the killed `primary` has taken over, as every running node
    /// sees it; returns its index.
    pub fn until_promoted(&mut self, replica: usize) -> usize {
        let port = self.nodes[replica].port();
        self.until(|c| {
            c.agreeing(|t| {
                t.iter()
                    .any(|n| n.port == port && n.primary && !n.slots.is_empty())
            })
        });
        replica
    }

    /// Moves `slot` (with its keys) to the primary at `to`: SETSLOT IMPORTING/MIGRATING,
    /// MIGRATE of every key, SETSLOT NODE on both and the others.
    pub fn migrate_slot(&self, slot: u16, to: usize) {
        let (from, to_id) = self.move_slot_keys(slot, to);
        self.finish_migration(slot, from, to, &to_id);
    }

    /// The first half of [`migrate_slot`](Self::migrate_slot): the slot is left MIGRATING on
    /// its owner and IMPORTING at `to`, with every key already at `to` (the owner answers ASK
    /// for them). Returns the owner and the target's node id.
    pub fn move_slot_keys(&self, slot: u16, to: usize) -> (usize, String) {
        let topology = self.topology();
        let from_info = topology
            .iter()
            .find(|n| n.primary && n.slots.iter().any(|&(a, b)| a <= slot && slot <= b))
            .expect("slot owner")
            .clone();
        let from = self.index_of_port(from_info.port);
        assert_ne!(from, to, "slot {slot} is already there");
        let to_id = topology
            .iter()
            .find(|n| n.port == self.nodes[to].port())
            .expect("target")
            .id
            .clone();
        let setslot = |node: usize, how: &str, id: &str| {
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg(how)
                .arg(id)
                .query::<()>(&mut self.nodes[node].conn())
                .unwrap_or_else(|e| panic!("SETSLOT {slot} {how} on {node}: {e}"));
        };
        setslot(to, "IMPORTING", &from_info.id);
        setslot(from, "MIGRATING", &to_id);
        loop {
            let keys: Vec<String> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(100)
                .query(&mut self.nodes[from].conn())
                .expect("GETKEYSINSLOT");
            if keys.is_empty() {
                break;
            }
            let mut migrate = redis::cmd("MIGRATE");
            migrate
                .arg("127.0.0.1")
                .arg(self.nodes[to].port())
                .arg("")
                .arg(0)
                .arg(5000)
                .arg("KEYS")
                .arg(&keys);
            migrate
                .query::<()>(&mut self.nodes[from].conn())
                .expect("MIGRATE");
        }
        (from, to_id)
    }

    /// The second half of [`migrate_slot`](Self::migrate_slot): SETSLOT NODE everywhere.
    pub fn finish_migration(&self, slot: u16, from: usize, to: usize, to_id: &str) {
        let setslot = |node: usize| {
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("NODE")
                .arg(to_id)
                .query::<()>(&mut self.nodes[node].conn())
                .unwrap_or_else(|e| panic!("SETSLOT {slot} NODE on {node}: {e}"));
        };
        setslot(to);
        setslot(from);
        for (i, node) in self.nodes.iter().enumerate() {
            if i != from && i != to {
                // A replica or a node that is down may refuse; gossip tells it later.
                let _ = redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg("NODE")
                    .arg(to_id)
                    .query::<()>(&mut node.conn());
            }
        }
    }

    fn index_of_port(&self, port: u16) -> usize {
        self.nodes
            .iter()
            .position(|n| n.port() == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
    }

    /// True when every running node answers and `check` holds for each one's view.
    fn agreeing(&self, check: impl Fn(&[NodeInfo]) -> bool) -> bool {
        self.nodes.iter().all(|node| match cluster_nodes(node) {
            Ok(text) => check(&parse_nodes(&text)),
            // A killed node is not asked.
            Err(_) => !node_alive(node),
        })
    }

    fn until(&self, cond: impl Fn(&Cluster) -> bool) {
        let start = Instant::now();
        while start.elapsed() < FORM_TIMEOUT {
            if cond(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the cluster did not settle within {FORM_TIMEOUT:?}");
    }

    /// Every node says `cluster_state:ok`, and every replica's link to its primary is up.
    fn until_settled(&self) {
        self.until(|c| {
            c.nodes.iter().all(|node| {
                let Ok(info) = redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query::<String>(&mut node.conn())
                else {
                    return false;
                };
                let Ok(replication) = redis::cmd("INFO")
                    .arg("replication")
                    .query::<String>(&mut node.conn())
                else {
                    return false;
                };
                info.contains("cluster_state:ok")
                    && (replication.contains("role:master")
                        || replication.contains("master_link_status:up"))
            }) && c.agreeing(|t| {
                t.iter()
                    .filter(|n| n.primary && !n.slots.is_empty())
                    .count()
                    == 3
            })
        });
    }
}

fn node_alive(node: &Server) -> bool {
    redis::Client::open(node.url())
        .and_then(|c| c.get_connection_with_timeout(Duration::from_millis(200)))
        .is_ok()
}

fn cluster_nodes(node: &Server) -> redis::RedisResult<String> {
    let client = redis::Client::open(node.url())?;
    let mut conn = client.get_connection_with_timeout(Duration::from_millis(500))?;
    conn.set_read_timeout(Some(Duration::from_secs(2)))?;
    redis::cmd("CLUSTER").arg("NODES").query(&mut conn)
}

fn parse_nodes(text: &str) -> Vec<NodeInfo> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 || fields[2].contains("fail") || fields[2].contains("noaddr") {
                return None;
            }
            let port = fields[1]
                .split(['@', ','])
                .next()?
                .rsplit(':')
                .next()?
                .parse()
                .ok()?;
            let primary = fields[2].contains("master");
            let slots = fields[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|n| (n, n)),
                })
                .collect();
            Some(NodeInfo {
                id: fields[0].to_owned(),
                port,
                primary,
                primary_id: (fields[3] != "-").then(|| fields[3].to_owned()),
                slots,
            })
        })
        .collect()
}

/// Six cluster-enabled nodes on free ports.
fn start_nodes(binary: Option<&std::path::Path>) -> Vec<Server> {
    (0..6)
        .map(|_| {
            let mut builder = Server::builder()
                .arg("--cluster-enabled")
                .arg("yes")
                .arg("--cluster-node-timeout")
                .arg("1000")
                .port_arg("--cluster-port")
                // A primary that lost its slots' majority keeps answering reads; we never
                // read from one, and writes fail either way.
                .arg("--cluster-require-full-coverage")
                .arg("no");
            if let Some(binary) = binary {
                builder = builder.binary(binary);
            }
            builder.start()
        })
        .collect()
}

/// `redis-cli --cluster create` over `nodes` (3 primaries, 3 replicas), killed after `limit`.
fn create(nodes: &[Server], limit: Duration) -> Result<(), String> {
    let mut create = Command::new("redis-cli");
    create.arg("--cluster").arg("create");
    for node in nodes {
        create.arg(format!("127.0.0.1:{}", node.port()));
    }
    create.args(["--cluster-replicas", "1", "--cluster-yes"]);
    create.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = create
        .spawn()
        .map_err(|e| format!("running redis-cli: {e}"))?;
    let deadline = Instant::now() + limit;
    while child.try_wait().map_err(|e| e.to_string())?.is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            let out = child.wait_with_output().map_err(|e| e.to_string())?;
            return Err(format!(
                "not done after {limit:?}: {}",
                String::from_utf8_lossy(&out.stdout)
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ))
}
