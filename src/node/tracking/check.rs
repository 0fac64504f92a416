//! Reading whether holds are still on the server, and arming their notices with the same
//! read: a hold's place ([`Presence`]) and its read, and the reads of many holds spread over
//! the tracking connections ([`Tracked::check`]).

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;

use super::{Tracked, Unavailable, classify, role_of};
use crate::node::Node;
use crate::node::shape::slot;

/// Keys read per pipeline. Each read is a command of its own, so a pipeline never holds the
/// server the way one script call does; the bound keeps one round's replies small.
const CHECKS_PER_CALL: usize = 1000;

/// Where the server keeps one hold: a field of a hash, and the value that field must have when
/// the field alone does not name the holder (a read-write lock's writer, `w`).
#[derive(Debug, Clone)]
pub(crate) struct Presence {
    pub key: Arc<str>,
    pub field: Arc<str>,
    pub value: Option<Arc<str>>,
}

impl Presence {
    /// The read that tells whether the hold is there.
    fn read(&self) -> redis::Cmd {
        let mut read = redis::cmd(if self.value.is_some() {
            "HGET"
        } else {
            "HEXISTS"
        });
        read.arg(&*self.key).arg(&*self.field);
        read
    }

    /// Whether `reply` to [`read`](Presence::read) says the hold is there: `None` when it
    /// cannot say (a node that does not serve the key now: `ASK` for a slot being moved).
    /// `MOVED` and other refusals are errors (`Err`): the connections are made again.
    fn held(&self, reply: redis::Value) -> Result<Option<bool>, Unavailable> {
        Ok(Some(match (&self.value, reply) {
            (None, redis::Value::Int(n)) => n == 1,
            (None, redis::Value::Boolean(held)) => held,
            (Some(value), redis::Value::BulkString(bytes)) => bytes.as_slice() == value.as_bytes(),
            (Some(_), redis::Value::Nil) => false,
            // Somebody wrote another type at the key: no lock's hash any more.
            (_, redis::Value::ServerError(e)) if e.code() == "WRONGTYPE" => false,
            // The key is at the slot's next owner, or not yet: ask again later.
            (_, redis::Value::ServerError(e)) if e.code() == "ASK" => return Ok(None),
            (_, redis::Value::ServerError(e)) if e.code() == "MOVED" => {
                return Err(Unavailable::Moved(format!("{}: {e:?}", self.key)));
            }
            // A refused read (LOADING after a restart, BUSY behind a slow script, NOPERM)
            // armed nothing and says nothing: the connection is made again and its holds
            // checked anew.
            (_, redis::Value::ServerError(e)) => {
                return Err(Unavailable::Down(format!(
                    "a check of {} was refused: {e:?}",
                    self.key
                )));
            }
            // Anything else: not known gone (the renewal will tell).
            (_, other) => {
                tracing::debug!(key = %self.key, reply = ?other, "unexpected check reply");
                true
            }
        }))
    }
}

impl Node {
    /// Whether the hold is on the server, read through the command connection: where the
    /// hold's renewals and release go (following a cluster's redirections, behind Sentinel
    /// the master the client follows).
    pub(crate) async fn has(&self, presence: &Presence) -> crate::Result<bool> {
        let reply = self.query::<redis::Value>(&presence.read()).await?;
        match presence.held(reply) {
            Ok(Some(held)) => Ok(held),
            Ok(None) | Err(_) => Err(crate::Error::Protocol {
                script: "hexists",
                reply: "a presence read the server did not answer".into(),
            }),
        }
    }
}

impl Tracked {
    /// Which connection reads `key`: the one, or its slot's primary's.
    fn route(&self, key: &str) -> Result<usize, Unavailable> {
        if self.routes.is_empty() {
            return Ok(0);
        }
        let slot = slot(key);
        self.routes
            .iter()
            .find(|((first, last), _)| (*first..=*last).contains(&slot))
            .map(|(_, index)| *index)
            .ok_or_else(|| Unavailable::Down(format!("slot {slot} has no primary in the map")))
    }

    /// Whether each hold is still on the server (`HEXISTS key field`, or `HGET key field`
    /// compared with its value), in order; `None` where the server could not say. Each read
    /// arms tracking of its key: any later change of it is pushed. On a cluster each primary
    /// reads its own keys, all at once, and a primary that could not be reached at connect
    /// says nothing for its keys (never armed: they stay unsettled until it is reopened) while
    /// the others answer for theirs.
    pub(crate) async fn check(
        &mut self,
        holds: &[&Presence],
    ) -> Result<Vec<Option<bool>>, Unavailable> {
        let mut by_conn: Vec<Vec<usize>> = vec![Vec::new(); self.conns.len()];
        for (i, hold) in holds.iter().enumerate() {
            by_conn[self.route(&hold.key)?].push(i);
        }
        self.reopen(&by_conn);
        let (role, timeout) = (self.behind_sentinel, self.timeout);
        let asked: Vec<(usize, Vec<&Presence>)> = by_conn
            .iter()
            .enumerate()
            .filter(|(conn, mine)| !mine.is_empty() && self.conns[*conn].is_some())
            .map(|(conn, mine)| (conn, mine.iter().map(|&i| holds[i]).collect()))
            .collect();
        let reads = asked.iter().map(|(conn, mine)| {
            let mut conn = self.conns[*conn].clone();
            async move {
                match conn.as_mut() {
                    Some(conn) => read(conn, mine, role, timeout).await,
                    None => Ok(vec![None; mine.len()]),
                }
            }
        });
        let answers = join_all(reads).await;
        let mut out = vec![None; holds.len()];
        for ((conn, _), answer) in asked.iter().zip(answers) {
            match answer {
                Ok(flags) => {
                    for (&i, held) in by_conn[*conn].iter().zip(flags) {
                        out[i] = held;
                    }
                }
                // A connection that stopped answering, or a stale map: the connections are
                // made again and every hold checked anew (what a dropped connection tracked is
                // forgotten by its server). On a cluster a primary that cannot be reached
                // then leaves the others watched (`connect_cluster`).
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }
}

/// [`Tracked::check`] on one connection; `role`: behind Sentinel, also ask `ROLE`.
async fn read(
    conn: &mut MultiplexedConnection,
    holds: &[&Presence],
    role: bool,
    timeout: Duration,
) -> Result<Vec<Option<bool>>, Unavailable> {
    let mut out = Vec::with_capacity(holds.len());
    for chunk in holds.chunks(CHECKS_PER_CALL) {
        let mut pipe = redis::pipe();
        // A read refused (WRONGTYPE, ASK) answers for its hold only, not for the batch.
        pipe.ignore_errors();
        for hold in chunk {
            pipe.add_command(hold.read());
        }
        // Behind Sentinel, a master demoted to a replica in a failover empties itself for a
        // full sync: reads there would report holds gone that the new master has. The
        // reads count only if the server was still a master after them.
        if role {
            pipe.cmd("ROLE");
        }
        let read = pipe.query_async::<Vec<redis::Value>>(conn);
        let mut replies = match tokio::time::timeout(timeout, read).await {
            Ok(replies) => replies.map_err(classify)?,
            Err(_) => {
                return Err(Unavailable::Down(format!("no answer within {timeout:?}")));
            }
        };
        if role {
            let role = replies.pop();
            if role.as_ref().and_then(role_of) != Some(b"master".as_slice()) {
                return Err(Unavailable::Down(format!(
                    "the server is no longer the master: ROLE answered {role:?}"
                )));
            }
        }
        if replies.len() != chunk.len() {
            return Err(Unavailable::Down(format!(
                "{} replies to {} reads",
                replies.len(),
                chunk.len()
            )));
        }
        for (hold, reply) in chunk.iter().zip(replies) {
            out.push(hold.held(reply)?);
        }
    }
    Ok(out)
}
