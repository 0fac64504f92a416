//! The script calls that wait for replicas: `WAIT n timeout` pipelined right behind a lock
//! script (acquisitions) or a renewal, on the same connection, and what its answer means for
//! the lock (`deploy/replicas.rs` decides how many to wait for).
//!
//! On one server the pipeline leaves on the one multiplexed connection. On a cluster a lone
//! `WAIT` would go to every primary (redis-rs routes it to all and answers the minimum); in a
//! pipeline behind the script it goes where the script goes, to the key's primary: redis-rs
//! sends a pipeline to the node of its first keyed command.
//!
//! `WAIT` blocks the connection it is sent on until it answers: other commands of this client
//! queue behind it for up to the timeout (see `docs/replicas.md`).

use std::time::Duration;

use redis::{ErrorKind, RedisResult, ServerErrorKind, Value};

use crate::error::{Error, Result};
use crate::node::replicas::{Acks, WaitFor};
use crate::node::{Node, bounded};

impl Node {
    /// Runs the script call `cmd` with `WAIT` behind it in one pipeline: the script's reply
    /// and what `WAIT` answered. `NOSCRIPT` loads the script and sends both again; a cluster in
    /// transition sends them again (neither the script nor `WAIT` ran then).
    pub(in crate::node) async fn eval_acked(
        &self,
        operation: &'static str,
        key: &str,
        limit: Duration,
        script: &redis::Script,
        cmd: &redis::Cmd,
        wait: WaitFor,
    ) -> Result<(Value, Acks)> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.add_command(cmd.clone()).add_command(wait.command());
        let pipe = &pipe;
        // The server holds the reply for up to the WAIT timeout.
        let limit = limit + wait.timeout;
        self.checked_request(limit, |limit| async move {
            let first = self.send_acked(operation, key, limit, pipe).await?;
            let (reply, acks) = match first {
                (Err(e), _) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    self.load_script(operation, script).await?;
                    self.send_acked(operation, key, limit, pipe).await?
                }
                other => other,
            };
            let reply = reply.map_err(|e| Error::redis(operation, key, e))?;
            Ok((reply, self.read_acks(wait, acks)))
        })
        .await
    }

    /// Sends `pipe` (a script call and `WAIT`) and answers both replies.
    async fn send_acked(
        &self,
        operation: &'static str,
        key: &str,
        limit: Duration,
        pipe: &redis::Pipeline,
    ) -> Result<(RedisResult<Value>, RedisResult<Value>)> {
        let mut conn = self.conn.clone();
        let replies: Vec<RedisResult<Value>> =
            bounded(operation, key, limit, pipe.query_async(&mut conn)).await?;
        let mut replies = replies.into_iter();
        match (replies.next(), replies.next()) {
            (Some(reply), Some(acks)) => Ok((reply, acks)),
            _ => Err(Error::Protocol {
                script: operation,
                reply: "fewer than two replies to a script call and WAIT".into(),
            }),
        }
    }
}
