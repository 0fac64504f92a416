//! The loss notice on a Redis Cluster: one tracking connection per primary of the slot map,
//! and a primary that cannot be reached (killed, its failover under way) opened again in the
//! background while the others stay watched.

use std::time::Duration;

use futures_util::future::join_all;
use redis::aio::MultiplexedConnection;
use redis::{ConnectionAddr, PushInfo};
use tokio::sync::{mpsc, oneshot};

use super::super::Node;
use super::super::calls::renew_by_node::fingerprint;
use super::{Moves, Tracked, Unavailable, classify, open_tracked, resp3};
use crate::backoff::Backoff;
use crate::task::AbortOnDrop;

/// A cluster's primaries as the notice opened them.
pub(super) struct Primaries {
    node: Box<Node>,
    clients: Vec<redis::Client>,
    pushes: mpsc::UnboundedSender<PushInfo>,
    /// When each was last tried while unreachable, and the pause before the next try.
    tried: Vec<Option<(tokio::time::Instant, Backoff)>>,
    /// The attempt under way for each unreachable primary, if any: in a task of its own, so a
    /// primary that hangs (frozen, cut off) holds up no check of the others' holds.
    opening: Vec<Option<Opening>>,
}

/// An attempt to open a primary's connection again, and where its outcome arrives.
type Opening = (
    AbortOnDrop,
    oneshot::Receiver<Result<MultiplexedConnection, Unavailable>>,
);

/// On a cluster: one connection per primary of the slot map read now, whatever the number of
/// its slot ranges. A primary that cannot be reached (killed, its failover under way) leaves
/// the others watched; a refusal (rights, no RESP3) counts for all.
pub(crate) async fn connect_cluster(
    node: &Node,
    seed: &redis::Client,
    timeout: Duration,
    pushes: mpsc::UnboundedSender<PushInfo>,
) -> Result<Tracked, Unavailable> {
    // Watched from before this connect's own read: any map read after it, by the watchdog's
    // tick or this read itself, is seen and compared.
    let map = node.slot_map.subscribe();
    let owners = node
        .slot_owners()
        .await
        .map_err(|e| Unavailable::Down(e.to_string()))?;
    if owners.is_empty() {
        return Err(Unavailable::Down("no slot map".into()));
    }
    let moves = Moves::Cluster(map, fingerprint(&owners));
    let mut primaries: Vec<(String, u16)> = Vec::new();
    let mut routes = Vec::with_capacity(owners.len());
    for owner in owners {
        let at = (owner.host, owner.port);
        let index = match primaries.iter().position(|known| *known == at) {
            Some(index) => index,
            None => {
                primaries.push(at);
                primaries.len() - 1
            }
        };
        routes.push((owner.slots, index));
    }
    let clients = primaries
        .iter()
        .map(|(host, port)| at_address(seed, host, *port))
        .collect::<Result<Vec<_>, _>>()?;
    let opens = clients
        .iter()
        .map(|client| open_tracked(client, timeout, pushes.clone()));
    let mut conns = Vec::with_capacity(clients.len());
    let mut failure = None;
    for opened in join_all(opens).await {
        match opened {
            Ok(conn) => conns.push(Some(conn)),
            Err(Unavailable::Refused(why)) => return Err(Unavailable::Refused(why)),
            Err(down) => {
                tracing::debug!(why = %down, "loss notice: a primary is unreachable");
                failure = Some(down);
                conns.push(None);
            }
        }
    }
    if let (Some(failure), false) = (failure, conns.iter().any(Option::is_some)) {
        return Err(failure);
    }
    let tried = conns.iter().map(|_| None).collect();
    let opening = conns.iter().map(|_| None).collect();
    let mut tracked = Tracked::new(conns, routes, moves, timeout);
    tracked.primaries = Some(Primaries {
        node: Box::new(node.clone()),
        clients,
        pushes,
        tried,
        opening,
    });
    Ok(tracked)
}

/// A RESP3 client for the cluster node at `host:port`, with the seed's settings (TLS, user).
fn at_address(seed: &redis::Client, host: &str, port: u16) -> Result<redis::Client, Unavailable> {
    let info = seed.get_connection_info().clone();
    let addr = match info.addr() {
        ConnectionAddr::TcpTls {
            insecure,
            tls_params,
            ..
        } => ConnectionAddr::TcpTls {
            host: host.to_owned(),
            port,
            insecure: *insecure,
            tls_params: tls_params.clone(),
        },
        _ => ConnectionAddr::Tcp(host.to_owned(), port),
    };
    resp3(&redis::Client::open(info.set_addr(addr)).map_err(classify)?)
}

impl Tracked {
    /// On a cluster, opens again the primaries that could not be reached and have holds to
    /// read: takes what an attempt under way brought, or starts one, each no sooner than its
    /// pause allows. A failed attempt reads the slot map anew, and a map that moved (a failover
    /// done) reopens every connection ([`Moves`]). Never waits for an attempt.
    pub(super) fn reopen(&mut self, by_conn: &[Vec<usize>]) {
        let Some(primaries) = self.primaries.as_mut() else {
            return;
        };
        let now = tokio::time::Instant::now();
        for (i, conn) in self.conns.iter_mut().enumerate() {
            if conn.is_some() || by_conn[i].is_empty() {
                continue;
            }
            let tried = primaries.tried[i].get_or_insert_with(|| (now, Backoff::reconnect()));
            if let Some((_, outcome)) = primaries.opening[i].as_mut() {
                match outcome.try_recv() {
                    Err(oneshot::error::TryRecvError::Empty) => continue,
                    Ok(Ok(opened)) => {
                        *conn = Some(opened);
                        primaries.tried[i] = None;
                        primaries.opening[i] = None;
                        continue;
                    }
                    Ok(Err(e)) => {
                        tracing::debug!(why = %e, "loss notice: a primary is still unreachable");
                        tried.0 = now + tried.1.pause();
                    }
                    Err(oneshot::error::TryRecvError::Closed) => {}
                }
                primaries.opening[i] = None;
            }
            if tried.0 > now {
                continue;
            }
            let (tx, rx) = oneshot::channel();
            let (client, pushes) = (primaries.clients[i].clone(), primaries.pushes.clone());
            let (node, timeout) = (primaries.node.clone(), self.timeout);
            let attempt = tokio::spawn(async move {
                let opened = open_tracked(&client, timeout, pushes).await;
                if opened.is_err() {
                    // Published for the notice's `Moves`.
                    let _ = node.slot_owners().await;
                }
                let _ = tx.send(opened);
            });
            primaries.opening[i] = Some((AbortOnDrop(attempt), rx));
        }
    }
}
