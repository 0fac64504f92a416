//! A RedLock's node list checks, its defaults, and the numbers one acquisition works with.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{check_duration, lease_ms};
use crate::error::{Error, Result};
use crate::lock::Lock;

use super::RedLock;

/// Default [`RedLock::drift_factor`].
pub(super) const DEFAULT_DRIFT_FACTOR: f64 = 0.01;
/// Default [`RedLock::retry_delay`].
pub(super) const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(50);

/// The common name of `locks`, once they are fit to be the nodes of one RedLock (see
/// [`RedLock::new`] for the rules); warns about node counts that tolerate fewer failures than
/// they seem to.
pub(super) fn check_nodes(locks: &[Lock]) -> Result<Arc<str>> {
    let Some(first) = locks.first() else {
        return Err(Error::InvalidArgument(
            "a RedLock needs at least one node".into(),
        ));
    };
    let name: Arc<str> = first.keys.name.clone();
    let mut clients = HashSet::new();
    let mut servers = HashSet::new();
    for (i, lock) in locks.iter().enumerate() {
        if lock.keys.name != name {
            return Err(Error::InvalidArgument(format!(
                "every RedLock node must lock the same name: node 0 locks `{name}`, node {i} `{}`",
                lock.keys.name
            )));
        }
        if !clients.insert(lock.client.inner.id) {
            return Err(Error::InvalidArgument(format!(
                "RedLock node {i} uses the same client ({}) as an earlier node; give each master its own client",
                lock.client.inner.id
            )));
        }
        let server = lock.server_addr();
        if !servers.insert(server.clone()) {
            return Err(Error::InvalidArgument(format!(
                "RedLock node {i} is on server {server} like an earlier node; each node must be an independent master"
            )));
        }
        if lock.fenced != first.fenced {
            return Err(Error::InvalidArgument(format!(
                "RedLock node {i} is {}fenced but node 0 is {}fenced; fence all nodes or none",
                if lock.fenced { "" } else { "not " },
                if first.fenced { "" } else { "not " },
            )));
        }
    }
    let n = locks.len();
    if n < 3 {
        tracing::warn!(lock = %name, nodes = n, "RedLock over fewer than 3 nodes tolerates no node failure");
    } else if n.is_multiple_of(2) {
        tracing::warn!(lock = %name, nodes = n, "RedLock over an even number of nodes tolerates no more failures than one node fewer");
    }
    Ok(name)
}

/// The numbers one acquisition works with.
pub(super) struct Settings {
    pub lease: Duration,
    /// Whether the guard renews (watchdog mode) or just expires (fixed lease).
    pub renewed: bool,
    pub node_timeout: Duration,
    /// How long a renewal or a release may wait for one node: longer than an acquire may
    /// (nobody is racing), still short of the lease.
    pub settle_timeout: Duration,
    pub drift: Duration,
    pub quorum: usize,
}

impl RedLock {
    /// The settings of one acquisition: `fixed` is a lease without renewal, else the watchdog
    /// lease applies.
    pub(super) fn settings(&self, fixed: Option<Duration>) -> Result<Settings> {
        let (lease, renewed) = match fixed {
            Some(lease) => (lease, false),
            None => (self.default_watchdog_lease()?, true),
        };
        lease_ms("lease", lease)?;
        let node_timeout = match self.node_timeout {
            Some(t) => {
                check_duration("node timeout", t)?;
                if t >= lease {
                    return Err(Error::InvalidArgument(format!(
                        "the RedLock node timeout ({t:?}) must be well below the lease ({lease:?})"
                    )));
                }
                t
            }
            None => default_node_timeout(lease),
        };
        if !(0.0..0.5).contains(&self.drift_factor) {
            return Err(Error::InvalidArgument(format!(
                "drift factor {} is outside 0.0..0.5",
                self.drift_factor
            )));
        }
        check_duration("retry delay", self.retry_delay)?;
        // Checked per attempt too, where a node's error only counts as a failed node.
        self.nodes.iter().try_for_each(Lock::check_lock_delay)?;
        Ok(Settings {
            lease,
            renewed,
            node_timeout,
            settle_timeout: node_timeout.max((lease / 10).min(Duration::from_secs(1))),
            drift: lease.mul_f64(self.drift_factor) + Duration::from_millis(2),
            quorum: self.quorum(),
        })
    }

    fn default_watchdog_lease(&self) -> Result<Duration> {
        if let Some(lease) = self.watchdog_lease {
            return Ok(lease);
        }
        let mut shortest = None;
        for lock in self.nodes.iter() {
            let lease = lock.watchdog()?.duration();
            shortest = Some(shortest.map_or(lease, |s: Duration| s.min(lease)));
        }
        // `new` rejects an empty node list.
        shortest.ok_or_else(|| Error::InvalidArgument("a RedLock needs at least one node".into()))
    }
}

/// `lease / 200` within 20–50 ms: far below the lease (Redis suggests 5–50 ms for a 10 s
/// lease) yet above loopback and LAN round trips under load. Never above a third of the lease.
fn default_node_timeout(lease: Duration) -> Duration {
    (lease / 200)
        .clamp(Duration::from_millis(20), Duration::from_millis(50))
        .min(lease / 3)
        .max(Duration::from_millis(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_timeout_scales_with_the_lease() {
        let ms = Duration::from_millis;
        assert_eq!(default_node_timeout(Duration::from_secs(30)), ms(50));
        assert_eq!(default_node_timeout(Duration::from_secs(10)), ms(50));
        assert_eq!(default_node_timeout(Duration::from_secs(6)), ms(30));
        assert_eq!(default_node_timeout(Duration::from_secs(1)), ms(20));
        assert_eq!(default_node_timeout(ms(30)), ms(10));
        assert_eq!(default_node_timeout(ms(1)), ms(1));
    }
}
