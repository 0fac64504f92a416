//! Connecting to the Redis node(s) named on the command line.

use redlease::Client;
use tokio::task::JoinSet;

use crate::args::Target;
use crate::exit::{self, Failure};

/// One node as named by the user, and the client connected to it (or why not).
pub struct Node {
    /// The URL with any password hidden, for messages.
    pub shown: String,
    pub client: Result<Client, redlease::Error>,
}

/// How many of `n` nodes make a majority.
pub fn quorum(n: usize) -> usize {
    n / 2 + 1
}

/// Connects to every URL concurrently; the result keeps the order of the URLs.
pub async fn connect_all(target: &Target) -> Vec<Node> {
    let urls = target.urls();
    let mut tasks = JoinSet::new();
    for (i, url) in urls.iter().enumerate() {
        let builder = Client::builder(url.clone())
            .prefix(target.prefix.clone())
            .timeout(target.timeout);
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
    urls.iter()
        .zip(clients)
        .map(|(url, client)| Node {
            shown: redact(url),
            client: client.unwrap_or_else(|| {
                Err(redlease::Error::InvalidArgument(format!(
                    "connecting to {} panicked",
                    redact(url)
                )))
            }),
        })
        .collect()
}

/// Connects to the single node of a one-URL target; any failure ends the command.
pub async fn connect_one(target: &Target) -> Result<Client, Failure> {
    let node = connect_all(target)
        .await
        .pop()
        .ok_or_else(|| Failure::new(exit::USAGE, "no Redis URL given"))?;
    node.client.map_err(|e| unreachable(&node.shown, &e))
}

/// Checks that a majority of the nodes answered; the error names every failed node.
pub fn require_majority(nodes: &[Node]) -> Result<(), Failure> {
    let reachable = nodes.iter().filter(|n| n.client.is_ok()).count();
    if reachable >= quorum(nodes.len()) {
        return Ok(());
    }
    if let [node] = nodes {
        if let Err(e) = &node.client {
            return Err(unreachable(&node.shown, e));
        }
    }
    let reasons = down_reasons(nodes);
    Err(Failure::new(
        exit::UNAVAILABLE,
        format!(
            "only {reachable} of {} Redis nodes reachable, {} needed ({})",
            nodes.len(),
            quorum(nodes.len()),
            reasons.join("; ")
        ),
    ))
}

/// The failure for a node that could not be connected to.
/// "url: reason" for every node that could not be reached.
pub fn down_reasons(nodes: &[Node]) -> Vec<String> {
    nodes
        .iter()
        .filter_map(|n| n.client.as_ref().err().map(|e| format!("{}: {e}", n.shown)))
        .collect()
}

pub fn unreachable(shown: &str, error: &redlease::Error) -> Failure {
    Failure::from_error(format_args!("cannot use Redis at {shown}"), error)
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
    }

    #[test]
    fn majority() {
        assert_eq!(quorum(1), 1);
        assert_eq!(quorum(2), 2);
        assert_eq!(quorum(3), 2);
        assert_eq!(quorum(5), 3);
    }
}
