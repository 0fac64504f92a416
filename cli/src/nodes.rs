//! Connecting to the Redis node(s) named on the command line, and asking them about a lock.

use std::future::Future;

use redlease::{Client, ClientBuilder, Lock, TlsOptions, WaitBy};
use tokio::task::JoinSet;

use crate::args::Target;
use crate::exit::{self, Failure};

/// One node as named by the user, and the client connected to it (or why it could not be:
/// never a bad URL or setting, which [`connect_all`] refuses).
pub struct Node {
    /// The URL with any password hidden, for messages.
    pub shown: String,
    /// The URL as given, to connect again.
    url: String,
    pub client: Result<Client, redlease::Error>,
    /// The `--tls-*` certificates, to connect again.
    tls: Option<TlsOptions>,
}

/// One node's answer to a question about a lock: its error as text when it had none.
pub struct Answer<T> {
    /// The URL with any password hidden, for messages.
    pub shown: String,
    pub result: Result<T, String>,
}

/// How many of `n` nodes make a majority.
pub fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// A client for `url` with the prefix, timeout and way of waiting of `target`, and the
/// certificates read from its `--tls-*` files.
fn builder(target: &Target, url: &str, tls: Option<&TlsOptions>) -> ClientBuilder {
    let wait_by = if target.poll {
        WaitBy::POLLING
    } else {
        WaitBy::PubSub
    };
    let builder = Client::builder(url)
        .prefix(target.prefix.clone())
        .timeout(target.redis_timeout)
        .wait_by(wait_by)
        .replicas(target.replicas);
    match tls {
        Some(tls) => builder.tls(tls.clone()),
        None => builder,
    }
}

/// Connects to every URL concurrently; the result keeps the order of the URLs. Fails (exit 64)
/// when the `--tls-*` options cannot be used or a URL or setting is bad; an unreachable node is
/// in its [`Node`].
pub async fn connect_all(target: &Target) -> Result<Vec<Node>, Failure> {
    let urls = target.urls();
    let tls = crate::tls::options(target, &urls)?;
    let mut tasks = JoinSet::new();
    for (i, url) in urls.iter().enumerate() {
        let builder = builder(target, url, tls.as_ref());
        tasks.spawn(async move { (i, builder.build().await) });
    }
    let mut clients: Vec<Option<Result<Client, redlease::Error>>> =
        urls.iter().map(|_| None).collect();
    while let Some(joined) = tasks.join_next().await {
        // A connect task only panics on a bug in the library; report it as a failure.
        if let Ok((i, client)) = joined {
            clients[i] = Some(client);
        }
    }
    // A bad URL or setting is a mistake in the command line, not a node that is down: it ends
    // the command as it does with one node, rather than being tolerated as one node down (a
    // bad URL) or reported as a majority unreachable (a bad setting fails every node).
    if let Some(failure) = misconfigured(&urls, &clients) {
        return Err(failure);
    }
    // What puts locks at risk on a server (an evicting `maxmemory-policy`), once per node.
    for client in clients.iter().flatten().flatten() {
        for warning in client.server_warnings() {
            eprintln!("redlease: warning: {warning}");
        }
    }
    Ok(urls
        .into_iter()
        .zip(clients)
        .map(|(url, client)| Node {
            shown: redact(&url),
            client: client.unwrap_or_else(|| {
                Err(redlease::Error::InvalidArgument(format!(
                    "connecting to {} panicked",
                    redact(&url)
                )))
            }),
            url,
            tls: tls.clone(),
        })
        .collect())
}

/// The failure for the first node, in the order of the URLs, whose client was refused for a bad
/// URL or setting: what [`exit::code_of`] makes a usage error, as with a single node.
fn misconfigured(
    urls: &[String],
    clients: &[Option<Result<Client, redlease::Error>>],
) -> Option<Failure> {
    urls.iter()
        .zip(clients)
        .find_map(|(url, client)| match client {
            Some(Err(e)) if exit::code_of(e) == exit::USAGE => Some(unreachable(&redact(url), e)),
            _ => None,
        })
}

/// Connects to the single node of a one-URL target; any failure ends the command, as does a
/// target of several URLs.
pub async fn connect_one(target: &Target) -> Result<Client, Failure> {
    one_deployment(target)?;
    let node = connect_all(target)
        .await?
        .pop()
        .ok_or_else(|| Failure::new(exit::USAGE, "no Redis URL given"))?;
    node.client.map_err(|e| unreachable(&node.shown, &e))
}

/// Refuses several `--url`s (exit 64, before connecting) for a subcommand that talks to one
/// deployment: it would use one of them and ignore the others, showing a lock, a list or a
/// leader of a node the user did not name alone.
fn one_deployment(target: &Target) -> Result<(), Failure> {
    let given = target.urls().len();
    if given == 1 {
        return Ok(());
    }
    Err(Failure::new(
        exit::USAGE,
        format!(
            "{given} --url given, but this subcommand talks to one Redis deployment (a server, a \
             cluster or a sentinel group); give one --url (several, for a Redlock over \
             independent masters, are for run, status and unlock)"
        ),
    ))
}

/// A client for every node, for a Redlock: a node that could not be connected to gets one that
/// connects on first use. A Redlock's quorum is a majority of the clients it is given, so
/// leaving such a node out would shrink the majority needed; with its client it keeps its
/// vote (a "no" while it is down, a "yes" once it is back).
pub async fn keep_votes(target: &Target, nodes: Vec<Node>) -> Result<Vec<Client>, Failure> {
    let mut clients = Vec::with_capacity(nodes.len());
    for node in nodes {
        let client = match node.client {
            Ok(client) => client,
            Err(_) => builder(target, &node.url, node.tls.as_ref())
                .lazy(true)
                .build()
                .await
                .map_err(|e| unreachable(&node.shown, &e))?,
        };
        clients.push(client);
    }
    Ok(clients)
}

/// Checks that a majority of the nodes answered; the error names every failed node.
pub fn require_majority(nodes: &[Node]) -> Result<(), Failure> {
    if let [node] = nodes
        && let Err(e) = &node.client
    {
        return Err(unreachable(&node.shown, e));
    }
    let reachable = nodes.iter().filter(|n| n.client.is_ok()).count();
    majority(reachable, nodes.len(), "reachable", &down_reasons(nodes))
}

/// Checks that a majority of the nodes answered a question; the error names every node that
/// did not.
pub fn require_answers<T>(answers: &[Answer<T>]) -> Result<(), Failure> {
    let answered = answers.iter().filter(|a| a.result.is_ok()).count();
    let reasons: Vec<String> = answers
        .iter()
        .filter_map(|a| a.result.as_ref().err().map(|e| reason(&a.shown, e)))
        .collect();
    majority(answered, answers.len(), "answered", &reasons)
}

/// Fails (exit 69) unless `ok` of `total` nodes is a majority; `what` the `ok` ones did,
/// `reasons` why the others did not.
fn majority(ok: usize, total: usize, what: &str, reasons: &[String]) -> Result<(), Failure> {
    if ok >= quorum(total) {
        return Ok(());
    }
    Err(Failure::new(
        exit::UNAVAILABLE,
        format!(
            "only {ok} of {total} Redis nodes {what}, {} needed ({})",
            quorum(total),
            reasons.join("; ")
        ),
    ))
}

/// "url: reason" for every node that could not be reached.
pub fn down_reasons(nodes: &[Node]) -> Vec<String> {
    nodes
        .iter()
        .filter_map(|n| n.client.as_ref().err().map(|e| reason(&n.shown, e)))
        .collect()
}

fn reason(shown: &str, error: impl std::fmt::Display) -> String {
    format!("{shown}: {error}")
}

/// The failure for a node that could not be connected to.
pub fn unreachable(shown: &str, error: &redlease::Error) -> Failure {
    Failure::from_error(format!("cannot use Redis at {shown}"), error)
}

/// The lock `name` on `client`. The one place a lock name is checked (the library refuses an
/// empty, too long or `}`-led one), so a bad name is the same usage error in every subcommand.
pub fn lock_on(client: &Client, name: &str) -> Result<Lock, Failure> {
    client
        .lock(name)
        .map_err(|e| Failure::from_error("bad lock name", &e))
}

/// The lock `name` on each client; a bad name fails on the first.
pub fn locks<'a>(
    clients: impl IntoIterator<Item = &'a Client>,
    name: &str,
) -> Result<Vec<Lock>, Failure> {
    clients
        .into_iter()
        .map(|client| lock_on(client, name))
        .collect()
}

/// The lock `name` on each node that could be connected to, in the order of the nodes (`None`
/// for a node that is down).
pub fn node_locks(nodes: &[Node], name: &str) -> Result<Vec<Option<Lock>>, Failure> {
    let mut up = locks(nodes.iter().filter_map(|n| n.client.as_ref().ok()), name)?.into_iter();
    Ok(nodes
        .iter()
        .map(|n| n.client.as_ref().ok().and_then(|_| up.next()))
        .collect())
}

/// Asks every node at once, `query` doing the asking on the node's lock (from [`node_locks`]);
/// the answers keep the order of the nodes, a down node's being why it is down. With a single
/// node there is nothing to show beside its error, so any error ends the command.
pub async fn ask_each<T, F, Fut>(
    nodes: &[Node],
    locks: Vec<Option<Lock>>,
    query: F,
) -> Result<Vec<Answer<T>>, Failure>
where
    F: Fn(Lock) -> Fut,
    Fut: Future<Output = redlease::Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let mut tasks = JoinSet::new();
    for (i, lock) in locks.into_iter().enumerate() {
        if let Some(lock) = lock {
            let asking = query(lock);
            tasks.spawn(async move { (i, asking.await) });
        }
    }
    let mut replies: Vec<Option<redlease::Result<T>>> = nodes.iter().map(|_| None).collect();
    while let Some(joined) = tasks.join_next().await {
        // A query task only panics on a bug in the library; its node shows as failed.
        if let Ok((i, reply)) = joined {
            replies[i] = Some(reply);
        }
    }
    let single = nodes.len() == 1;
    nodes
        .iter()
        .zip(replies)
        .map(|(node, reply)| {
            let result = match (&node.client, reply) {
                (Err(e), _) => Err(e.to_string()),
                (Ok(_), Some(Ok(value))) => Ok(value),
                (Ok(_), Some(Err(e))) if single => return Err(unreachable(&node.shown, &e)),
                (Ok(_), Some(Err(e))) => Err(e.to_string()),
                (Ok(_), None) if single => {
                    return Err(Failure::new(
                        exit::INTERNAL,
                        format!("asking {} panicked", node.shown),
                    ));
                }
                (Ok(_), None) => Err("asking it panicked".to_owned()),
            };
            Ok(Answer {
                shown: node.shown.clone(),
                result,
            })
        })
        .collect()
}

/// `redis://user:secret@host` → `redis://user:***@host`, so passwords stay out of logs.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    let user_info = &rest[..at];
    let user = match user_info.split_once(':') {
        Some((user, _password)) => format!("{user}:***"),
        None => "***".to_owned(),
    };
    format!("{scheme}://{user}@{}", &rest[at + 1..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(redact("redis://127.0.0.1:6379"), "redis://127.0.0.1:6379");
        assert_eq!(redact("redis://:pw@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(redact("rediss://u:p@w@h"), "rediss://u:***@h");
        assert_eq!(redact("redis://token@h"), "redis://***@h");
        assert_eq!(
            redact("redis+sentinel://:pw@a:1,b:2/mymaster/0"),
            "redis+sentinel://:***@a:1,b:2/mymaster/0"
        );
    }

    #[test]
    fn majority() {
        assert_eq!(quorum(1), 1);
        assert_eq!(quorum(2), 2);
        assert_eq!(quorum(3), 2);
        assert_eq!(quorum(5), 3);
    }
}
