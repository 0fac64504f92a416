//! The script calls of the lock family (semaphores, latches, read-write locks): one door for
//! every family script, which picks the script's variant for this deployment (sharded pub/sub on
//! a cluster) and loads it on NOSCRIPT.

use std::sync::OnceLock;

use redis::{FromRedisValue, Script};

use super::shape::{Conn, sharded};
use super::{Node, evalsha};
use crate::error::Result;

/// A family script, in the variant for one server and the one for a cluster, each made on
/// first use.
pub(crate) struct FamilyScript {
    /// The script's name, for errors and spans.
    pub name: &'static str,
    source: &'static str,
    plain: OnceLock<Script>,
    sharded: OnceLock<Script>,
}

impl FamilyScript {
    pub(crate) const fn new(name: &'static str, source: &'static str) -> Self {
        FamilyScript {
            name,
            source,
            plain: OnceLock::new(),
            sharded: OnceLock::new(),
        }
    }

    fn get(&self, cluster: bool) -> &Script {
        match cluster {
            false => self.plain.get_or_init(|| Script::new(self.source)),
            true => self
                .sharded
                .get_or_init(|| Script::new(&sharded::variant(self.source))),
        }
    }
}

impl Node {
    /// Runs `script` on `keys` (all of one lock, so of one cluster slot) with `args`, within the
    /// node's timeout. Not sent again after a lost reply: most family scripts count, and a
    /// second run would count twice. A cluster's answers that mean "not run" (a moving slot, an
    /// election) are sent again, as for every script.
    pub(crate) async fn family_call<T: FromRedisValue>(
        &self,
        script: &FamilyScript,
        keys: &[&str],
        args: &[&str],
    ) -> Result<T> {
        let cluster = matches!(self.conn, Conn::Cluster(_));
        let script_variant = script.get(cluster);
        let bytes = keys.iter().chain(args).map(|s| s.len()).sum::<usize>();
        let mut cmd = evalsha(script_variant, keys.len(), args.len(), bytes);
        for key in keys {
            cmd.arg(*key);
        }
        for arg in args {
            cmd.arg(*arg);
        }
        let key = keys.first().copied().unwrap_or("");
        self.eval(script.name, key, self.timeout, script_variant, &cmd)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::sharded;

    #[test]
    fn every_family_publish_is_rewritten_for_a_cluster() {
        for source in [
            include_str!("../../lua/semaphore.lua"),
            include_str!("../../lua/latch.lua"),
            include_str!("../../lua/rwlock.lua"),
            include_str!("../../lua/permits.lua"),
            include_str!("../../lua/fair.lua"),
        ] {
            assert!(
                source.contains("redis.call('PUBLISH', "),
                "nothing to rewrite"
            );
            let rewritten = sharded::variant(source);
            // Only the prelude's own fallback is left.
            let plain = rewritten.matches("redis.call('PUBLISH'").count();
            assert_eq!(plain, 1, "{rewritten}");
        }
    }
}
