//! Fencing tokens: a resource that rejects the late write of a holder whose lease ran out.
//!
//! A lease-based lock cannot stop a holder that was paused (a GC pause, swap, SIGSTOP, a slow
//! network) past its lease: another client takes the lock, and then the paused one wakes up and
//! writes as if it still held it. A fenced lock gives every holder a token greater than every
//! earlier one; the resource remembers the greatest token it has seen and refuses older ones.
//!
//! Here the resource is a Redis hash (`value` plus the `token` of the last accepted write) and
//! the check is one small Lua script, so the comparison and the write are atomic. Any store
//! with a conditional write can do the same: `UPDATE ... WHERE last_token <= $token` in SQL,
//! a compare-and-set in etcd, an `If-Match` header on an object store.
//!
//! Run it against `$REDIS_URL` (default `redis://127.0.0.1:6379`), or a private server:
//!
//! ```text
//! cargo run --example fencing
//! scripts/with-redis.sh cargo run --example fencing
//! ```

use redlease::LockOptions;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redlease::Client;

/// The resource's conditional write: accept a token at least as great as the last one
/// accepted, reject older ones.
///
/// KEYS[1] the resource: a hash with `value` and `token`. ARGV[1] the writer's fencing token,
/// ARGV[2] the new value. Returns 1 when written, 0 when rejected.
pub const FENCED_WRITE: &str = r#"
local token = tonumber(ARGV[1])
if token == nil then
    return redis.error_reply('ERR the fencing token must be a number')
end
local last = tonumber(redis.call('HGET', KEYS[1], 'token') or '0')
if token < last then
    return 0
end
redis.call('HSET', KEYS[1], 'value', ARGV[2], 'token', ARGV[1])
return 1
"#;

/// Writes `value` to `resource` with `token`; `Ok(false)` when the resource refused it because a
/// newer holder wrote first.
pub async fn fenced_write(
    conn: &mut impl ConnectionLike,
    resource: &str,
    token: u64,
    value: &str,
) -> redis::RedisResult<bool> {
    let written: i64 = redis::Script::new(FENCED_WRITE)
        .key(resource)
        .arg(token)
        .arg(value)
        .invoke_async(conn)
        .await?;
    Ok(written == 1)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let name = "fencing-demo";
    let resource = "fencing-demo:resource";
    let mut storage = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;

    // Two clients, as if on two machines.
    let alice = Client::connect(&url).await?;
    let bob = Client::connect(&url).await?;

    // Alice takes the lock with a short fixed lease (no watchdog), so a pause can outlast it.
    let lease = Duration::from_millis(500);
    let alice_guard = alice
        .lock(name)?
        .fenced(true)
        .lock_with(LockOptions::new().lease(lease))
        .await?;
    let alice_token = alice_guard
        .fencing_token()
        .ok_or("a fenced lock has a token")?;
    println!("alice holds `{name}` with token {alice_token}, then stalls (GC, swap, SIGSTOP) ...");
    tokio::time::sleep(lease + Duration::from_millis(200)).await;

    // Alice's lease ran out while she stalled: Bob gets the lock and a greater token.
    let bob_guard = bob.lock(name)?.fenced(true).lock().await?;
    let bob_token = bob_guard
        .fencing_token()
        .ok_or("a fenced lock has a token")?;
    let bob_wrote = fenced_write(&mut storage, resource, bob_token, "written by bob").await?;
    println!("bob holds `{name}` with token {bob_token}; his write accepted: {bob_wrote}");
    bob_guard.unlock().await?;

    // Alice wakes up, unaware, and writes with her old token: the resource refuses it.
    let alice_wrote = fenced_write(&mut storage, resource, alice_token, "written by alice").await?;
    println!("alice wakes up and writes with token {alice_token}; accepted: {alice_wrote}");
    println!(
        "alice's guard knows it too: is_lost() = {}",
        alice_guard.is_lost()
    );
    match alice_guard.unlock().await {
        Err(e) if e.is_lease_lost() => println!("alice's unlock: {e}"),
        other => println!("alice's unlock: {other:?}"),
    }

    let (value, token): (String, u64) = redis::cmd("HMGET")
        .arg(resource)
        .arg("value")
        .arg("token")
        .query_async(&mut storage)
        .await?;
    println!("the resource holds {value:?} from token {token}");
    assert!(
        bob_wrote && !alice_wrote,
        "the stale write must be rejected"
    );

    alice.shutdown().await?;
    bob.shutdown().await?;
    Ok(())
}
