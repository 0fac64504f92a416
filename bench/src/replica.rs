//! A private primary with one replica (`--replicaof`), for the replica-acknowledgement rows:
//! both killed on drop (through their [`RedisServer`]s).

use std::time::{Duration, Instant};

use anyhow::{Result, bail};

use crate::server::RedisServer;

pub struct ReplicaPair {
    pub primary: RedisServer,
    pub replica: RedisServer,
}

impl ReplicaPair {
    /// Starts the primary, then its replica, and waits (at most 10 s) until they are linked.
    pub fn start(cpus: Option<&[usize]>) -> Result<Self> {
        let primary = RedisServer::start(cpus)?;
        let extra = [
            "--replicaof".to_string(),
            "127.0.0.1".into(),
            primary.port().to_string(),
        ];
        let replica = RedisServer::start_with(cpus, &extra)?;
        let pair = ReplicaPair { primary, replica };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !pair.linked()? {
            if Instant::now() > deadline {
                bail!("the bench replica never linked to its primary");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(pair)
    }

    fn linked(&self) -> Result<bool> {
        let info = |server: &RedisServer| -> Result<String> {
            let mut c = redis::Client::open(server.url())?.get_connection()?;
            Ok(redis::cmd("INFO").arg("replication").query(&mut c)?)
        };
        Ok(info(&self.primary)?.contains("connected_slaves:1")
            && info(&self.replica)?.contains("master_link_status:up"))
    }
}
