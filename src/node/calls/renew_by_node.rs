//! The watchdog's renewal on a Redis Cluster, by node rather than by slot.
//!
//! A script call may declare keys of one slot only, so renewing per slot costs one call per
//! slot that holds a lock: 100,000 locks spread over a cluster's 16,384 slots took ~16,000
//! calls and 2.6 s per tick (`make bench`, C4). Here the locks are grouped by the primary that
//! serves their slot (from `CLUSTER SLOTS`, asked once per tick) and each primary gets calls of
//! up to [`RENEWAL_BATCH`] locks of any of its slots (`lua/renew_node.lua`, which may reach keys of
//! several slots of its node). Only a "renewed" answer is trusted: a lock the node did not
//! renew (not held, or its slot moved), and every lock of a call that failed (a node that just
//! became a replica answers READONLY), is renewed again the per-slot way, which follows
//! redirections and says for certain.
//!
//! When the held locks ask for replica acknowledgement, `WAIT` follows each call in one
//! pipeline to the same node (`deploy/replicas.rs`), and each lock gets its call's answer.

use std::collections::HashMap;

use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, RedisResult, Value};

use crate::error::{Error, Result};
use crate::node::replicas::{Acks, WaitFor};
use crate::node::shape::{Conn, slot};
use crate::node::{Node, Renewal, bounded};

/// Locks per renewal script call, on one server and per node of a cluster. A script call runs
/// alone on its server: every other client waits until it ends. One lock costs the script about
/// 2 µs of server time (`HEXISTS`, `PEXPIRE`, and the loss notice's invalidation; Redis 7.0 on
/// this project's 2-core VM, 100,000 held locks), so a call of 200 takes about 0.4–0.5 ms, while
/// the 1,000 of earlier versions held the server 2–2.4 ms alone and up to 13.5 ms beside a busy
/// client (`make bench` K2). Smaller calls cost more round trips (500 per tick for 100,000 locks,
/// sent concurrently) for the same server time per lock.
pub(crate) const RENEWAL_BATCH: usize = 200;

const RENEW_NODE: &str = include_str!("../../../lua/renew_node.lua");

/// A lock's answer so far in a round: `None` until a call settles it.
type Flag = Option<Result<(bool, Option<Acks>)>>;

/// What one renewal round found for each lock, and what it cost.
pub(crate) struct NodeRenewal {
    /// Per lock, in order: renewed or not, and what `WAIT` answered after its call (when one
    /// was asked for); `Err` when no call could say.
    pub flags: Vec<Result<(bool, Option<Acks>)>>,
    /// Script calls sent (by node, and per slot for the rest).
    pub calls: usize,
}

/// What tells two slot maps apart: their ranges and primaries, hashed.
pub(crate) fn fingerprint(owners: &[Owner]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut ranges: Vec<(u16, u16, &str, u16)> = owners
        .iter()
        .map(|o| (o.slots.0, o.slots.1, o.host.as_str(), o.port))
        .collect();
    ranges.sort_unstable();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    ranges.hash(&mut hasher);
    hasher.finish()
}

/// A primary, by address; the slots it serves.
pub(crate) struct Owner {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) slots: (u16, u16),
}

impl Node {
    /// Renews `batch` on a cluster: by node first, per slot for whatever that did not settle.
    /// On one server it is [`Node::renew`] in calls of [`RENEWAL_BATCH`].
    pub(crate) async fn renew_by_node(
        &self,
        batch: &[Renewal<'_>],
        wait: Option<WaitFor>,
    ) -> NodeRenewal {
        let mut flags: Vec<Flag> = (0..batch.len()).map(|_| None).collect();
        let mut calls = 0;
        if let Conn::Cluster(_) = &self.conn
            && let Ok(owners) = self.slot_owners().await
        {
            calls += self.renew_on_nodes(&owners, batch, wait, &mut flags).await;
        }
        calls += self.renew_per_slot(batch, wait, &mut flags).await;
        NodeRenewal {
            flags: flags
                .into_iter()
                .map(|f| f.unwrap_or(Ok((false, None))))
                .collect(),
            calls,
        }
    }

    /// The locks of `batch` grouped by the primary that serves their slot, in calls of up to
    /// [`RENEWAL_BATCH`] per primary: each lock renewed is flagged so; the rest stay unflagged,
    /// for [`renew_per_slot`](Self::renew_per_slot). Answers the calls sent.
    async fn renew_on_nodes(
        &self,
        owners: &[Owner],
        batch: &[Renewal<'_>],
        wait: Option<WaitFor>,
        flags: &mut [Flag],
    ) -> usize {
        let mut by_node: HashMap<(&str, u16), Vec<usize>> = HashMap::new();
        for (i, r) in batch.iter().enumerate() {
            let s = slot(r.hash);
            if let Some(o) = owners.iter().find(|o| o.slots.0 <= s && s <= o.slots.1) {
                by_node.entry((&o.host, o.port)).or_default().push(i);
            }
        }
        let sends = by_node.iter().flat_map(|((host, port), indices)| {
            indices.chunks(RENEWAL_BATCH).map(move |chunk| async move {
                (chunk, self.renew_at(host, *port, batch, chunk, wait).await)
            })
        });
        let replies = futures_util::future::join_all(sends).await;
        let calls = replies.len();
        for (chunk, reply) in replies {
            let Ok((renewed, acks)) = reply else { continue };
            for (&i, ok) in chunk.iter().zip(renewed) {
                if ok {
                    flags[i] = Some(Ok((true, acks.clone())));
                }
            }
        }
        calls
    }

    /// The per-slot way, which follows redirections and says for certain, for every lock of
    /// `batch` not flagged yet. Answers the calls sent (one per slot of each chunk).
    async fn renew_per_slot(
        &self,
        batch: &[Renewal<'_>],
        wait: Option<WaitFor>,
        flags: &mut [Flag],
    ) -> usize {
        let rest: Vec<usize> = (0..batch.len()).filter(|&i| flags[i].is_none()).collect();
        let sends = rest.chunks(RENEWAL_BATCH).map(|chunk| async move {
            let requests: Vec<Renewal<'_>> = chunk.iter().map(|&i| batch[i]).collect();
            let mut slots: Vec<_> = requests.iter().map(|r| self.shard(r.hash)).collect();
            slots.sort_unstable();
            slots.dedup();
            (chunk, slots.len(), self.renew_acked(&requests, wait).await)
        });
        let mut calls = 0;
        for (chunk, slots, reply) in futures_util::future::join_all(sends).await {
            calls += slots;
            match reply {
                Ok(renewed) => {
                    for (&i, ok) in chunk.iter().zip(renewed) {
                        flags[i] = Some(Ok(ok));
                    }
                }
                Err(e) => {
                    for &i in chunk {
                        flags[i] = Some(Err(e.clone()));
                    }
                }
            }
        }
        calls
    }

    /// One `renew_node.lua` call at the primary `host:port` for the locks `chunk` of `batch`,
    /// with `WAIT` behind it in one pipeline when `wait` asks for it.
    async fn renew_at(
        &self,
        host: &str,
        port: u16,
        batch: &[Renewal<'_>],
        chunk: &[usize],
        wait: Option<WaitFor>,
    ) -> Result<(Vec<bool>, Option<Acks>)> {
        let Conn::Cluster(conn) = &self.conn else {
            return Err(Error::InvalidArgument(
                "renew by node needs a cluster".into(),
            ));
        };
        let mut cmd = Cmd::new();
        cmd.arg("EVAL").arg(RENEW_NODE).arg(0);
        for &i in chunk {
            let r = &batch[i];
            cmd.arg(r.hash).arg(r.field).arg(r.lease_arg());
        }
        let at = SingleNodeRoutingInfo::ByAddress {
            host: host.to_owned(),
            port,
        };
        let mut conn = conn.clone();
        let (reply, acks) = match wait {
            None => {
                let send = conn.route_command(cmd, RoutingInfo::SingleNode(at));
                (bounded("renew", "", self.timeout, send).await?, None)
            }
            Some(wait) => {
                let mut pipe = redis::pipe();
                pipe.add_command(cmd).add_command(wait.command());
                let send = conn.route_pipeline(pipe, 0, 2, at);
                let limit = self.timeout + wait.timeout;
                let mut replies = bounded("renew", "", limit, send).await?.into_iter();
                let (Some(reply), Some(acks)) = (replies.next(), replies.next()) else {
                    return Err(Error::Protocol {
                        script: "renew_node",
                        reply: "fewer than two replies to a renewal and WAIT".into(),
                    });
                };
                let acks: RedisResult<Value> = match acks {
                    Value::ServerError(e) => Err(e.into()),
                    other => Ok(other),
                };
                (reply, Some(self.read_acks(wait, acks)))
            }
        };
        if let Value::ServerError(e) = reply {
            return Err(Error::redis("renew", "", e.into()));
        }
        Ok((
            crate::scripts::renewed("renew_node", reply, chunk.len())?,
            acks,
        ))
    }

    /// Which primary serves which slots (`CLUSTER SLOTS`, from any node); on one server, none.
    pub(crate) async fn slot_owners(&self) -> Result<Vec<Owner>> {
        let Conn::Cluster(conn) = &self.conn else {
            return Ok(Vec::new());
        };
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SLOTS");
        let mut conn = conn.clone();
        let send = conn.route_command(cmd, RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random));
        let reply = bounded("renew", "", self.timeout, send).await?;
        let Value::Array(ranges) = reply else {
            return Err(Error::Protocol {
                script: "cluster slots",
                reply: format!("{reply:?}"),
            });
        };
        let mut owners = Vec::new();
        for range in ranges {
            let Value::Array(fields) = range else {
                continue;
            };
            let (Some(start), Some(end), Some(Value::Array(primary))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                continue;
            };
            let (Ok(start), Ok(end)) = (
                redis::from_redis_value_ref::<u16>(start),
                redis::from_redis_value_ref::<u16>(end),
            ) else {
                continue;
            };
            let (Some(host), Some(port)) = (primary.first(), primary.get(1)) else {
                continue;
            };
            let (Ok(host), Ok(port)) = (
                redis::from_redis_value_ref::<String>(host),
                redis::from_redis_value_ref::<u16>(port),
            ) else {
                continue;
            };
            owners.push(Owner {
                host,
                port,
                slots: (start, end),
            });
        }
        let fingerprint = fingerprint(&owners);
        self.slot_map.send_if_modified(|seen| {
            let changed = *seen != fingerprint;
            *seen = fingerprint;
            changed
        });
        Ok(owners)
    }
}
