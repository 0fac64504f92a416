//! How a command reaches the deployment: bounded by the timeout, once more after a dropped
//! connection, again while a cluster is in transition, with the script loaded on NOSCRIPT, and
//! pipelines split per slot on a cluster.

use std::future::Future;
use std::time::Duration;

use redis::{FromRedisValue, RedisResult};

use crate::backoff::Backoff;
use crate::error::{Error, Result};
use crate::node::Node;
use crate::node::sentinel::{self, SentinelConn, ServerConn};
use crate::node::shape::{self, Conn};

impl Node {
    /// Runs an arbitrary command (tests, tools) with the node's timeout.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        self.through_transitions(self.timeout, |limit| {
            let mut conn = self.conn.clone();
            async move { bounded("query", "", limit, cmd.query_async(&mut conn)).await }
        })
        .await
    }

    /// Runs a pipeline with the node's timeout, once more after a dropped connection (its
    /// commands' repetition must be harmless). Its commands leave back to back on the one
    /// connection, so another caller's commands cannot come in between.
    pub(crate) async fn query_pipeline<T: FromRedisValue>(
        &self,
        operation: &'static str,
        key: &str,
        pipe: &redis::Pipeline,
    ) -> Result<T> {
        self.pipeline(operation, key, pipe, true).await
    }

    /// [`query_pipeline`](Node::query_pipeline) sent once: for commands that must not run twice
    /// (a MultiLock's or RedLock's acquisitions, which would count twice). After a dropped
    /// connection the caller hears the error, with the outcome unknown.
    pub(crate) async fn query_pipeline_once<T: FromRedisValue>(
        &self,
        operation: &'static str,
        key: &str,
        pipe: &redis::Pipeline,
    ) -> Result<T> {
        self.pipeline(operation, key, pipe, false).await
    }

    async fn pipeline<T: FromRedisValue>(
        &self,
        operation: &'static str,
        key: &str,
        pipe: &redis::Pipeline,
        again: bool,
    ) -> Result<T> {
        if self.rights_pending() {
            self.rights_checked().await?;
        }
        if let Some(groups) = self.pipeline_groups(pipe) {
            return self
                .query_pipeline_split(operation, key, pipe, groups, again)
                .await;
        }
        self.through_transitions(self.timeout, |limit| {
            once_more_if_dropped_when(again, move || {
                let mut conn = self.conn.clone();
                async move { bounded(operation, key, limit, pipe.query_async(&mut conn)).await }
            })
        })
        .await
    }

    /// On a cluster, the commands of `pipe` grouped by slot (indexes in order), when they span
    /// more than one: redis-rs sends a pipeline to one node, and a node refuses the keys of
    /// slots it does not serve (CROSSSLOT, or MOVED).
    pub(in crate::node) fn pipeline_groups(
        &self,
        pipe: &redis::Pipeline,
    ) -> Option<Vec<Vec<usize>>> {
        let Conn::Cluster(_) = self.conn else {
            return None;
        };
        let mut groups: Vec<(Option<u16>, Vec<usize>)> = Vec::new();
        for (i, cmd) in pipe.cmd_iter().enumerate() {
            let slot = shape::command_slot(cmd);
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, group)) => group.push(i),
                None => groups.push((slot, vec![i])),
            }
        }
        (groups.len() > 1).then(|| groups.into_iter().map(|(_, group)| group).collect())
    }

    /// Sends each slot's commands of `pipe` as a pipeline of its own, all at once, and answers
    /// their replies in the order of `pipe`, as one pipeline with `ignore_errors` would: a
    /// failed command's error is its own reply. A group that fails as a whole fails the call.
    pub(in crate::node) async fn query_pipeline_split<T: FromRedisValue>(
        &self,
        operation: &'static str,
        key: &str,
        pipe: &redis::Pipeline,
        groups: Vec<Vec<usize>>,
        again: bool,
    ) -> Result<T> {
        let commands: Vec<&redis::Cmd> = pipe.cmd_iter().collect();
        let calls = groups.iter().map(|group| {
            let mut part = redis::pipe();
            part.ignore_errors();
            for &i in group {
                part.add_command(commands[i].clone());
            }
            async move {
                self.through_transitions(self.timeout, |limit| {
                    let part = &part;
                    once_more_if_dropped_when(again, move || {
                        let mut conn = self.conn.clone();
                        async move {
                            let query = part.query_async::<Vec<redis::Value>>(&mut conn);
                            bounded(operation, key, limit, query).await
                        }
                    })
                })
                .await
            }
        });
        let replies = futures_util::future::join_all(calls).await;
        let mut values = vec![redis::Value::Nil; commands.len()];
        for (group, reply) in groups.iter().zip(replies) {
            let reply = reply?;
            if reply.len() != group.len() {
                return Err(Error::Protocol {
                    script: operation,
                    reply: format!("{} replies for a pipeline of {}", reply.len(), group.len()),
                });
            }
            for (&i, value) in group.iter().zip(reply) {
                values[i] = value;
            }
        }
        redis::from_redis_value(redis::Value::Array(values))
            .map_err(|e| Error::redis(operation, key, e.into()))
    }

    /// Runs an `evalsha` command, loading the script once when the server does not know it
    /// (NOSCRIPT: first use, a server restarted or flushed since, or a replica just promoted).
    pub(in crate::node) async fn eval<T: FromRedisValue>(
        &self,
        operation: &'static str,
        key: &str,
        limit: Duration,
        script: &redis::Script,
        cmd: &redis::Cmd,
    ) -> Result<T> {
        self.checked_request(limit, |limit| {
            self.eval_once(operation, key, limit, script, cmd)
        })
        .await
    }

    /// Sends a script request through [`through_transitions`](Self::through_transitions),
    /// after a lazy client's rights check (run once, before its first script call).
    pub(in crate::node) async fn checked_request<T, F, Fut>(
        &self,
        limit: Duration,
        request: F,
    ) -> Result<T>
    where
        F: FnMut(Duration) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        if self.rights_pending() {
            self.rights_checked().await?;
        }
        self.through_transitions(limit, request).await
    }

    /// Sends `request` again, until `limit` is spent, while a cluster answers that it did not run
    /// it because a slot is moving or a primary is being elected (MOVED or ASK that redis-rs's
    /// own redirects did not settle, TRYAGAIN, CLUSTERDOWN, MASTERDOWN, or READONLY from a
    /// primary just demoted). Those answers mean the command was not applied, so sending it again
    /// is safe for every script. One server's answers are returned as they are: a READONLY there
    /// means the URL names a replica, which waiting does not change. Behind sentinels, an answer
    /// that means the master moved (see [`sentinel::master_moved`]) has the sentinels asked
    /// again before the request is sent again.
    pub(in crate::node) async fn through_transitions<T, F, Fut>(
        &self,
        limit: Duration,
        mut request: F,
    ) -> Result<T>
    where
        F: FnMut(Duration) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        match &self.conn {
            Conn::Server(ServerConn::Direct(_)) => return request(limit).await,
            Conn::Server(ServerConn::Sentinel(conn)) => {
                // Boxed: inlined, this future deepens every caller's past the layout limit.
                return Box::pin(following_master(conn, limit, request)).await;
            }
            Conn::Cluster(_) => {}
        }
        let deadline = tokio::time::Instant::now() + limit;
        let mut backoff = Backoff::resend();
        loop {
            let remaining = remaining(limit, deadline);
            match request(remaining).await {
                Err(e) if in_transition(&e) && remaining > backoff.peek() * 2 => {
                    tracing::debug!(error = %e, "cluster in transition; sending again");
                    backoff.sleep().await;
                }
                outcome => return outcome,
            }
        }
    }

    pub(in crate::node) async fn eval_once<T: FromRedisValue>(
        &self,
        operation: &'static str,
        key: &str,
        limit: Duration,
        script: &redis::Script,
        cmd: &redis::Cmd,
    ) -> Result<T> {
        let mut conn = self.conn.clone();
        match bounded(operation, key, limit, cmd.query_async(&mut conn)).await {
            Err(Error::Redis { source, .. })
                if source.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
            {
                load(operation, key, limit, script, &mut conn).await?;
                bounded(operation, key, limit, cmd.query_async(&mut conn)).await
            }
            other => other,
        }
    }

    /// [`eval`](Node::eval) with the node's timeout, once more after a dropped connection: for
    /// scripts whose repetition is harmless (renew, force unlock, raise fence).
    pub(in crate::node) async fn eval_retried<T: FromRedisValue>(
        &self,
        operation: &'static str,
        key: &str,
        script: &redis::Script,
        cmd: &redis::Cmd,
    ) -> Result<T> {
        once_more_if_dropped(|| self.eval(operation, key, self.timeout, script, cmd)).await
    }
}

/// [`Node::through_transitions`] behind sentinels: sends `request` again, until `limit` is
/// spent, after each answer meaning the master moved, asking the sentinels in between (one
/// resolution for all the callers that failed on the same connection).
async fn following_master<T, F, Fut>(
    conn: &SentinelConn,
    limit: Duration,
    mut request: F,
) -> Result<T>
where
    F: FnMut(Duration) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    let mut backoff = Backoff::resend();
    loop {
        let seen = conn.generation();
        let remaining = remaining(limit, deadline);
        match request(remaining).await {
            Err(e) if sentinel::master_moved(&e) && remaining > backoff.peek() * 2 => {
                tracing::debug!(error = %e, "the master may have moved; asking the sentinels");
                let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
                match tokio::time::timeout(remaining, conn.refresh(seen)).await {
                    Ok(Err(e)) if !sentinel::master_moved(&e) => return Err(e),
                    Ok(Ok(())) if conn.generation() != seen => continue,
                    _ => {}
                }
                backoff.sleep().await;
            }
            outcome => return outcome,
        }
    }
}

/// What is left of `limit` before `deadline`; [`UNBOUNDED`] stays unbounded (the caller bounds
/// the wait, so the sends that follow arm no timer either).
fn remaining(limit: Duration, deadline: tokio::time::Instant) -> Duration {
    match limit >= UNBOUNDED {
        true => UNBOUNDED,
        false => deadline.saturating_duration_since(tokio::time::Instant::now()),
    }
}

/// Whether a cluster's answer means the command was not run while a slot moves or a primary is
/// elected (see [`Node::through_transitions`]).
fn in_transition(e: &Error) -> bool {
    use redis::ServerErrorKind as Kind;
    let Error::Redis { source, .. } = e else {
        return false;
    };
    matches!(
        source.kind(),
        redis::ErrorKind::Server(
            Kind::Moved
                | Kind::Ask
                | Kind::TryAgain
                | Kind::ClusterDown
                | Kind::MasterDown
                | Kind::ReadOnly
        )
    )
}

/// Runs `request`, and once more if it failed on a dropped connection.
///
/// The connection manager notices a dead connection (server restart, `CLIENT KILL`) only when a
/// command fails on it, and reconnects then. Without this second try every restart failed one
/// command per caller: a waiter woken after a restart got `broken pipe` instead of the lock, and
/// the watchdog learned of a lost key a whole renewal period late. The retry waits for the new
/// connection within the usual timeout; a second failure is returned as it is, but a refused
/// one (see [`resent_if_dropped`]).
pub(in crate::node) async fn once_more_if_dropped<T, F, Fut>(mut request: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    resent_if_dropped(|_| request()).await
}

/// [`once_more_if_dropped`] when `again`, else `request` sent once.
async fn once_more_if_dropped_when<T, F, Fut>(again: bool, mut request: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    if again {
        once_more_if_dropped(request).await
    } else {
        request().await
    }
}

/// [`once_more_if_dropped`] for a request that tells its second send (`request(true)`) from the
/// first: a script that records what the first did answers the second from it. A second send
/// refused tells nothing of the first, which may have run: the first's error is returned.
pub(crate) async fn resent_if_dropped<T, F, Fut>(mut request: F) -> Result<T>
where
    F: FnMut(bool) -> Fut,
    Fut: Future<Output = Result<T>>,
{
    match request(false).await {
        Err(Error::Redis { source, operation }) if source.is_connection_dropped() => {
            tracing::debug!(operation, error = %source, "connection dropped; trying once more");
            match request(true).await {
                Err(Error::Redis { source: second, .. }) if second.is_connection_refusal() => {
                    Err(Error::Redis { source, operation })
                }
                outcome => outcome,
            }
        }
        outcome => outcome,
    }
}

/// An `EVALSHA <sha> <nkeys>` command; the caller appends keys, then `args` more arguments
/// with `bytes` bytes in all (an estimate). A plain `Cmd` packs every argument into one buffer,
/// where `ScriptInvocation` allocates one per argument on the hot path; sizing it up front
/// saves the buffer's regrowth, which showed in the profile.
pub(in crate::node) fn evalsha(
    script: &redis::Script,
    nkeys: usize,
    args: usize,
    bytes: usize,
) -> redis::Cmd {
    let mut cmd = evalsha_without_keys(script, nkeys + args, bytes);
    cmd.arg(nkeys);
    cmd
}

/// `EVALSHA <sha>`, sized for `items` more arguments (the key count included) of `bytes` bytes.
pub(in crate::node) fn evalsha_without_keys(
    script: &redis::Script,
    items: usize,
    bytes: usize,
) -> redis::Cmd {
    let mut cmd = redis::Cmd::with_capacity(3 + items, 48 + bytes);
    cmd.arg("EVALSHA").arg(script.get_hash());
    cmd
}

/// A call's limit when its caller bounds the wait itself: [`bounded`] then arms no timer, and
/// the cluster's and Sentinel's resends go on until the caller stops them.
pub(in crate::node) const UNBOUNDED: Duration = crate::config::MAX_DURATION;

/// Bounds a Redis future by the configured timeout and types its error. A limit of
/// [`UNBOUNDED`] or more (a year: no configured duration is longer, `Config::validate`) arms
/// no timer: its caller bounds the wait.
pub(crate) async fn bounded<T>(
    operation: &'static str,
    key: &str,
    timeout: Duration,
    fut: impl Future<Output = RedisResult<T>>,
) -> Result<T> {
    if timeout >= UNBOUNDED {
        return fut.await.map_err(|e| Error::redis(operation, key, e));
    }
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(Error::redis(operation, key, e)),
        Err(_) => Err(Error::Timeout { operation, timeout }),
    }
}

impl Node {
    /// Loads `script` into the deployment (every primary of a cluster), within the timeout: what
    /// a call that met `NOSCRIPT` does before it is sent again.
    pub(in crate::node) async fn load_script(
        &self,
        operation: &'static str,
        script: &redis::Script,
    ) -> Result<()> {
        let mut conn = self.conn.clone();
        load(operation, "", self.timeout, script, &mut conn).await
    }
}

/// `SCRIPT LOAD` of `script` on `conn`, bounded by `limit`.
async fn load(
    operation: &'static str,
    key: &str,
    limit: Duration,
    script: &redis::Script,
    conn: &mut Conn,
) -> Result<()> {
    bounded(operation, key, limit, script.load_async(conn)).await?;
    Ok(())
}
