//! A real Redis Sentinel group on free loopback ports: one master, two replicas (each a
//! [`Server`]) and three sentinels (`redis-server <conf> --sentinel`, quorum 2,
//! `down-after-milliseconds 1000`). Every process is our child, killed by its own pid when the
//! group drops.

use std::fs::{self, File};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::host::{LOG_FILE, free_port, make_temp_dir, read_log, ready_pid};
use super::server::Server;

/// The name the sentinels monitor the master under.
pub const MASTER_NAME: &str = "mymaster";
/// How long the group may take to link its replicas and let the sentinels find each other.
const FORM_TIMEOUT: Duration = Duration::from_secs(15);
const POLL: Duration = Duration::from_millis(20);

/// One sentinel process.
#[derive(Debug)]
pub struct SentinelProcess {
    pub port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl SentinelProcess {
    fn start(master_port: u16) -> SentinelProcess {
        let dir = make_temp_dir();
        for _ in 0..5 {
            let port = free_port();
            let conf = dir.join("sentinel.conf");
            fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {dir}\n\
                     sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n\
                     sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                     sentinel failover-timeout {MASTER_NAME} 5000\n\
                     sentinel parallel-syncs {MASTER_NAME} 2\n",
                    dir = dir.display()
                ),
            )
            .expect("writing sentinel.conf");
            let log = File::create(dir.join(LOG_FILE)).expect("creating the sentinel log");
            let log_err = log.try_clone().expect("cloning the log handle");
            let mut child = Command::new(super::binary::default_binary())
                .arg(&conf)
                .arg("--sentinel")
                .stdin(Stdio::null())
                .stdout(log)
                .stderr(log_err)
                .spawn()
                .expect("running redis-server --sentinel");
            let pid = child.id();
            let deadline = Instant::now() + Duration::from_secs(5);
            let mut ready = false;
            for _ in 0..250 {
                if matches!(child.try_wait(), Ok(Some(_))) || Instant::now() > deadline {
                    break;
                }
                if ready_pid(port) == Some(pid) {
                    ready = true;
                    break;
                }
                std::thread::sleep(POLL);
            }
            if ready {
                return SentinelProcess {
                    port,
                    dir,
                    child: Some(child),
                };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("no sentinel could start; log:\n{}", read_log(&dir));
    }

    /// A sync connection to this sentinel.
    pub fn conn(&self) -> redis::Connection {
        let client = redis::Client::open(format!("redis://127.0.0.1:{}", self.port)).unwrap();
        let conn = client
            .get_connection_with_timeout(Duration::from_secs(2))
            .expect("connecting to a sentinel");
        conn.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        conn
    }

    /// The master's port as this sentinel names it.
    pub fn master_port(&self) -> Option<u16> {
        let addr: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(MASTER_NAME)
            .query(&mut self.conn())
            .ok()?;
        addr.map(|(_, port)| port)
    }

    fn count(&self, what: &str) -> usize {
        redis::cmd("SENTINEL")
            .arg(what)
            .arg(MASTER_NAME)
            .query::<Vec<redis::Value>>(&mut self.conn())
            .map_or(0, |v| v.len())
    }
}

impl Drop for SentinelProcess {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- sentinel log (port {}) ---\n{}",
                self.port,
                read_log(&self.dir)
            );
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// One master, two replicas, three sentinels.
pub struct SentinelGroup {
    /// The data nodes; `servers[0]` is the first master.
    pub servers: Vec<Server>,
    pub sentinels: Vec<SentinelProcess>,
}

impl SentinelGroup {
    /// Starts the group and waits until the replicas are in sync and every sentinel knows both
    /// replicas and the two other sentinels (so a failover can be agreed on).
    pub fn start() -> SentinelGroup {
        // Without the default 5 s pause before a diskless full sync, a replica (re)links at once.
        let master = Server::builder()
            .arg("--repl-diskless-sync-delay")
            .arg("0")
            .start();
        let master_port = master.port();
        let mut servers = vec![master];
        for _ in 0..2 {
            servers.push(
                Server::builder()
                    .arg("--repl-diskless-sync-delay")
                    .arg("0")
                    .arg("--replicaof")
                    .arg("127.0.0.1")
                    .arg(master_port.to_string())
                    .start(),
            );
        }
        let sentinels = (0..3)
            .map(|_| SentinelProcess::start(master_port))
            .collect();
        let group = SentinelGroup { servers, sentinels };
        let formed = super::eventually(FORM_TIMEOUT, || {
            group.servers[1..]
                .iter()
                .all(|s| role(s) == "slave" && linked(s))
                && group
                    .sentinels
                    .iter()
                    .all(|s| s.count("replicas") == 2 && s.count("sentinels") == 2)
        });
        assert!(
            formed,
            "the sentinel group did not form in {FORM_TIMEOUT:?}"
        );
        group
    }

    /// `redis+sentinel://127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3/mymaster`
    pub fn url(&self) -> String {
        format!(
            "redis+sentinel://{}/{MASTER_NAME}",
            self.sentinel_addrs().join(",")
        )
    }

    /// `127.0.0.1:PORT` of every sentinel.
    pub fn sentinel_addrs(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect()
    }

    /// Index in `servers` of the master a majority of sentinels names now.
    pub fn master(&self) -> usize {
        self.try_master()
            .expect("no majority of sentinels names one master of this group's servers")
    }

    fn index_of(&self, port: u16) -> usize {
        self.servers
            .iter()
            .position(|s| s.port() == port)
            .unwrap_or_else(|| panic!("no server on port {port}"))
    }

    /// kill -9 of the current master; its index.
    pub fn kill_master(&mut self) -> usize {
        let master = self.master();
        self.servers[master].kill();
        master
    }

    /// Waits until a majority of sentinels names a master other than `old` and that server
    /// answers ROLE as a master; its index. Panics after `within`.
    pub fn until_promoted(&self, old: usize, within: Duration) -> usize {
        self.try_until_promoted(old, within)
            .unwrap_or_else(|| panic!("no replica was promoted within {within:?}"))
    }

    /// [`SentinelGroup::until_promoted`], `None` after `within`.
    pub fn try_until_promoted(&self, old: usize, within: Duration) -> Option<usize> {
        let deadline = Instant::now() + within;
        for _ in 0..within.as_millis() / POLL.as_millis() + 1 {
            let ports: Vec<u16> = self
                .sentinels
                .iter()
                .filter_map(SentinelProcess::master_port)
                .collect();
            let old_port = self.servers[old].port();
            let new = ports
                .iter()
                .copied()
                .find(|p| *p != old_port && ports.iter().filter(|q| *q == p).count() >= 2);
            if let Some(port) = new {
                let i = self.index_of(port);
                if role(&self.servers[i]) == "master" {
                    return Some(i);
                }
            }
            if Instant::now() > deadline {
                break;
            }
            std::thread::sleep(POLL);
        }
        None
    }

    /// The master named by a majority of sentinels, if they agree on one.
    pub fn try_master(&self) -> Option<usize> {
        let ports: Vec<u16> = self
            .sentinels
            .iter()
            .filter_map(SentinelProcess::master_port)
            .collect();
        let port = ports
            .iter()
            .copied()
            .find(|p| ports.iter().filter(|q| *q == p).count() >= 2)?;
        self.servers.iter().position(|s| s.port() == port)
    }

    /// Whether the master has a replica in sync (`state=online`), which a failover needs.
    pub fn has_online_replica(&self, master: usize) -> bool {
        let Ok(client) = redis::Client::open(self.servers[master].url()) else {
            return false;
        };
        let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_millis(500)) else {
            return false;
        };
        let _ = conn.set_read_timeout(Some(Duration::from_millis(500)));
        redis::cmd("INFO")
            .arg("replication")
            .query::<String>(&mut conn)
            .is_ok_and(|info| info.contains("state=online"))
    }

    /// `SENTINEL FAILOVER` through the first sentinel that accepts it: a planned failover.
    pub fn planned_failover(&self) -> bool {
        self.sentinels.iter().any(|s| {
            redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg(MASTER_NAME)
                .query::<()>(&mut s.conn())
                .is_ok()
        })
    }

    /// Starts server `i` again after a kill, on its port, empty; the sentinels make it a
    /// replica of the current master.
    pub fn restart(&mut self, i: usize) {
        self.servers[i].restart();
    }

    /// Starts the killed server `i` again, empty, as a replica of `master` at once (the
    /// sentinels would convert it only after seconds), and waits until `master` has every
    /// other server as an acknowledging replica (`WAIT 2` answers 2).
    pub fn rejoin_as_replica(&mut self, i: usize, master: usize) {
        self.servers[i].restart();
        let port = self.servers[master].port().to_string();
        let _: () = redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(port)
            .query(&mut self.servers[i].conn())
            .expect("REPLICAOF");
        let master = &self.servers[master];
        let acknowledging = super::eventually(FORM_TIMEOUT, || {
            let mut conn = master.conn();
            let _: () = redis::cmd("SET")
                .arg("rejoin-probe")
                .arg(1)
                .query(&mut conn)
                .expect("SET");
            let acks: u64 = redis::cmd("WAIT")
                .arg(2)
                .arg(200)
                .query(&mut conn)
                .expect("WAIT");
            acks == 2
        });
        assert!(acknowledging, "the rejoined server never acknowledged");
    }

    /// Makes the replicas of `master` lag behind it until the returned guard drops: each is
    /// frozen (SIGSTOP) and the master drops its replication links (`CLIENT KILL TYPE
    /// replica`), so a write the master takes from now on reaches no replica, not even from a
    /// socket buffer once they go on. Drop the guard (SIGCONT) only after killing the master,
    /// or the replicas reconnect and fetch what they missed.
    pub fn lag_replicas(&self, master: usize) -> Lagging {
        let pids: Vec<u32> = (0..self.servers.len())
            .filter(|&i| i != master)
            .map(|i| self.servers[i].pid())
            .collect();
        let lagging = Lagging(pids);
        assert!(lagging.signal("STOP"), "could not SIGSTOP the replicas");
        let _: u64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("replica")
            .query(&mut self.servers[master].conn())
            .expect("CLIENT KILL TYPE replica");
        lagging
    }
}

/// Replicas frozen by [`SentinelGroup::lag_replicas`] (by pid, so the group can still be
/// changed meanwhile); dropping it lets them go on (SIGCONT), so a failed assertion never
/// leaves them frozen.
pub struct Lagging(Vec<u32>);

impl Lagging {
    /// Sends `sig` to every replica; whether every `kill` succeeded.
    fn signal(&self, sig: &str) -> bool {
        self.0.iter().all(|pid| {
            Command::new("kill")
                .args([format!("-{sig}"), pid.to_string()])
                .status()
                .is_ok_and(|status| status.success())
        })
    }
}

impl Drop for Lagging {
    fn drop(&mut self) {
        let _ = self.signal("CONT");
    }
}

/// `ROLE`'s first word ("master", "slave"), or "" when the server does not answer.
pub fn role(server: &Server) -> String {
    let Ok(client) = redis::Client::open(server.url()) else {
        return String::new();
    };
    let Ok(mut conn) = client.get_connection_with_timeout(Duration::from_millis(500)) else {
        return String::new();
    };
    let _ = conn.set_read_timeout(Some(Duration::from_millis(500)));
    redis::cmd("ROLE")
        .query::<Vec<redis::Value>>(&mut conn)
        .ok()
        .and_then(|v| match v.first() {
            Some(redis::Value::BulkString(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        })
        .unwrap_or_default()
}

/// Whether a replica's link to its master is up (initial sync done).
fn linked(server: &Server) -> bool {
    redis::cmd("INFO")
        .arg("replication")
        .query::<String>(&mut server.conn())
        .is_ok_and(|info| info.contains("master_link_status:up"))
}
