//! What the server holds, read straight from it for assertions: keys, lock hashes, TTLs,
//! subscriptions and plain string values. Each call opens its own connection.

use std::time::{Duration, Instant};

use super::{Server, eventually_async};

/// Whether `key` exists.
pub fn exists(server: &Server, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query(&mut server.conn())
        .expect("EXISTS")
}

/// How many owners hold the lock hash at `key` (its HLEN; 0 when there is none).
pub fn owners(server: &Server, key: &str) -> usize {
    redis::cmd("HLEN")
        .arg(key)
        .query(&mut server.conn())
        .expect("HLEN")
}

/// The TTL of `key` in milliseconds: -1 when it has none, -2 when the key does not exist.
pub fn pttl(server: &Server, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query(&mut server.conn())
        .expect("PTTL")
}

/// Checks every 100 ms for `during` that `key` has a TTL of at most `max_ms` and has not expired:
/// past its first lease, only renewal explains that.
pub async fn assert_ttl_kept(server: &Server, key: &str, max_ms: i64, during: Duration) {
    let start = Instant::now();
    while start.elapsed() < during {
        let ttl = pttl(server, key);
        assert!(
            ttl > 0 && ttl <= max_ms,
            "PTTL {ttl} after {:?}",
            start.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every channel that has a subscriber.
pub fn channels(server: &Server) -> Vec<String> {
    redis::cmd("PUBSUB")
        .arg("CHANNELS")
        .arg("*")
        .query(&mut server.conn())
        .expect("PUBSUB CHANNELS")
}

/// How many connections subscribe to `channel`.
pub fn numsub(server: &Server, channel: &str) -> u64 {
    listeners(server, ("CHANNELS", "NUMSUB"), channel)
}

/// Subscriptions to `channel` and to the channels under it (`<channel>:<client id>`, where a
/// `Lock`'s queued waiters hear of their grants): one per client listening for the lock. `how`
/// names the PUBSUB subcommands (plain or shard channels).
pub fn listeners(server: &Server, how: (&str, &str), channel: &str) -> u64 {
    listeners_on(&mut server.conn(), how, channel).expect("PUBSUB")
}

/// [`listeners`] on a connection of one's own; `None` when a command fails.
pub fn listeners_on(conn: &mut redis::Connection, how: (&str, &str), channel: &str) -> Option<u64> {
    let escaped: String = channel
        .chars()
        .flat_map(|c| match c {
            '*' | '?' | '[' | ']' | '\\' => vec!['\\', c],
            c => vec![c],
        })
        .collect();
    let mut names: Vec<Vec<u8>> = redis::cmd("PUBSUB")
        .arg(how.0)
        .arg(format!("{escaped}:*"))
        .query(conn)
        .ok()?;
    names.push(channel.as_bytes().to_vec());
    // The reply repeats the channel names, which need not be UTF-8.
    let counts: Vec<(Vec<u8>, u64)> = redis::cmd("PUBSUB")
        .arg(how.1)
        .arg(&names)
        .query(conn)
        .ok()?;
    Some(counts.iter().map(|(_, n)| n).sum())
}

/// Waits (at most 5 s) until exactly `n` connections subscribe to `channel`; whether they did.
pub async fn until_subscribed(server: &Server, channel: &str, n: u64) -> bool {
    eventually_async(Duration::from_secs(5), || async {
        numsub(server, channel) == n
    })
    .await
}

/// Waits (at most `within`) until `key` exists on none of `servers`; whether it went. For one
/// server: `until_gone(std::slice::from_ref(&server), ..)`.
pub async fn until_gone(servers: &[Server], key: &str, within: Duration) -> bool {
    eventually_async(within, || async {
        servers.iter().all(|server| !exists(server, key))
    })
    .await
}

/// Waits (at most `within`) until no channel of `server` has a subscriber; whether that came.
pub async fn until_no_channels(server: &Server, within: Duration) -> bool {
    eventually_async(within, || async { channels(server).is_empty() }).await
}

/// Sets `key` to the string `value` (a key of the wrong type for a lock, say).
pub fn set_string(server: &Server, key: &str, value: &str) {
    redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query::<()>(&mut server.conn())
        .expect("SET");
}

/// The string at `key`, if any.
pub fn get_string(server: &Server, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query(&mut server.conn())
        .expect("GET")
}

/// How many times the server ran `command` (lower case), scripts' inner calls included, from
/// `INFO commandstats`; 0 before its first call.
pub fn command_calls(server: &Server, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.conn())
        .expect("INFO commandstats");
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().expect("a call count"))
}
