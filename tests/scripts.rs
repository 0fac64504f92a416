//! The Lua scripts' contracts, called directly on a real server: the answers the client relies
//! on, and above all what a retried call (after a lost reply) does. A lost reply cannot be
//! produced on demand through the library, so the retry paths are driven here by sending the
//! same request twice, exactly as `guard.rs` does after a dropped connection.

mod support;

use redis::{Connection, RedisResult, Script, Value};

use support::{Server, command_calls, exists, owners, pttl};

const HASH: &str = "t:{lock}";
const FENCE: &str = "t:{lock}:fence";
const CLIENT: &str = "client-a";
/// The scripts as the client sends them: the token-making part first.
const ACQUIRE: &str = concat!(
    include_str!("../lua/acquire_plain.lua"),
    include_str!("../lua/queue.lua"),
    include_str!("../lua/acquire_wait.lua"),
    include_str!("../lua/fence.lua"),
    include_str!("../lua/queue_lock.lua"),
    include_str!("../lua/acquire.lua")
);
const WITHDRAW: &str = concat!(
    include_str!("../lua/queue.lua"),
    include_str!("../lua/fence.lua"),
    include_str!("../lua/queue_lock.lua"),
    include_str!("../lua/withdraw.lua")
);
const RELEASE: &str = concat!(
    include_str!("../lua/release_plain.lua"),
    include_str!("../lua/queue.lua"),
    include_str!("../lua/fence.lua"),
    include_str!("../lua/queue_lock.lua"),
    include_str!("../lua/release.lua")
);
/// The fence grace the calls below pass (ms).
const GRACE: u64 = 5_000;

/// The server's clock in microseconds.
fn server_us(conn: &mut Connection) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(conn).unwrap();
    s * 1_000_000 + us
}

/// `acquire.lua` on `hash` (fenced when `fence` names the counter), lease 30 s.
fn acquire_call(
    conn: &mut Connection,
    (hash, fence): (&str, Option<&str>),
    field: &str,
    reentrant: bool,
) -> RedisResult<Value> {
    let script = Script::new(ACQUIRE);
    let mut call = script.key(hash);
    if let Some(fence) = fence {
        call.key(fence);
    }
    call.arg(field)
        .arg(30_000)
        .arg(if reentrant { "1" } else { "0" });
    if fence.is_some() {
        // The long form: fence and lock-delay keys, grace, no delay, no queue.
        call.key(format!("{hash}:delay"));
        call.arg(GRACE).arg(0).arg(0).arg(0).arg(0);
    }
    call.invoke(conn)
}

/// A reentrant, unfenced acquisition of `HASH`.
fn acquire_as(conn: &mut Connection, field: &str) -> Value {
    acquire_call(conn, (HASH, None), field, true).unwrap()
}

/// A release of `HASH` as `guard.rs` sends it: `mode` '-' (a guard's first attempt), 'r' (its
/// retry), 'a' or 'ra' (a give-back, latched every time); `successor` the waiter to hand the
/// lock to, and whether it takes a fencing token.
fn release_call(
    conn: &mut Connection,
    field: &str,
    (holds, request, mode): (u32, u64, &str),
    successor: Option<(&str, bool)>,
) -> RedisResult<i64> {
    let script = Script::new(RELEASE);
    let mut call = script.key(HASH);
    call.key(format!("{HASH}:latch:{CLIENT}:{request}"));
    if let Some((_, true)) = successor {
        call.key(FENCE);
    }
    call.arg(field).arg(30_000).arg(10_000).arg(holds).arg(mode);
    if let Some((successor, fenced)) = successor {
        call.arg(successor).arg(20_000);
        if fenced {
            call.arg(GRACE);
        }
    }
    call.invoke(conn)
}

/// An unfenced release that must succeed.
fn release_as(
    conn: &mut Connection,
    field: &str,
    holds: u32,
    request: u64,
    mode: &str,
    successor: Option<&str>,
) -> i64 {
    let successor = successor.map(|s| (s, false));
    release_call(conn, field, (holds, request, mode), successor).unwrap()
}

fn count_of(conn: &mut Connection, field: &str) -> Option<i64> {
    redis::cmd("HGET").arg(HASH).arg(field).query(conn).unwrap()
}

#[test]
fn acquire_answers_count_owner_conflict_and_remaining_lease() {
    let server = Server::start();
    let mut conn = server.conn();
    assert_eq!(acquire_as(&mut conn, "a:1"), Value::Int(1));
    assert_eq!(acquire_as(&mut conn, "a:1"), Value::Int(2));
    // Another owner learns the remaining lease, encoded as -2 - pttl.
    let Value::Int(n) = acquire_as(&mut conn, "b:1") else {
        panic!("an integer reply")
    };
    let ttl = -2 - n;
    assert!((25_000..=30_000).contains(&ttl), "remaining lease {ttl}");
    // No expiry at all is -1.
    redis::cmd("PERSIST").arg(HASH).exec(&mut conn).unwrap();
    assert_eq!(acquire_as(&mut conn, "b:1"), Value::Int(-1));
    // Non-reentrant re-entry by the holder: 0, and nothing changes.
    let again = acquire_call(&mut conn, (HASH, None), "a:1", false).unwrap();
    assert_eq!(again, Value::Int(0));
    assert_eq!(count_of(&mut conn, "a:1"), Some(2));
    // A fenced lock passes the counter as a second key and gets the token with the count: the
    // server's clock in microseconds, kept for the lease plus the grace.
    let other = ("t:{other}", Some("t:{other}:fence"));
    let before = server_us(&mut conn);
    let fenced = acquire_call(&mut conn, other, "a:1", true).unwrap();
    let after = server_us(&mut conn);
    let Value::Array(pair) = &fenced else {
        panic!("a pair: {fenced:?}")
    };
    assert_eq!(pair[0], Value::Int(1));
    let Value::Int(token) = pair[1] else {
        panic!("{fenced:?}")
    };
    assert!(
        (before..=after).contains(&token),
        "{before} <= {token} <= {after}"
    );
    let ttl = pttl(&server, "t:{other}:fence");
    assert!((30_000..=30_000 + GRACE as i64).contains(&ttl), "{ttl}");
    // A re-entry keeps the token.
    let again = acquire_call(&mut conn, other, "a:1", true).unwrap();
    assert_eq!(again, Value::Array(vec![Value::Int(2), Value::Int(token)]));
}

#[test]
fn a_retried_last_release_reports_the_first_attempts_release_and_changes_nothing() {
    let server = Server::start();
    let mut conn = server.conn();
    acquire_as(&mut conn, "a:1");
    let published = command_calls(&server, "publish");
    assert_eq!(release_as(&mut conn, "a:1", 1, 1, "-", None), 0, "released");
    assert_eq!(
        command_calls(&server, "publish"),
        published,
        "no message: nobody waits"
    );
    // The retry (the first reply was lost) finds the field gone: released, no message.
    assert_eq!(
        release_as(&mut conn, "a:1", 1, 1, "r", None),
        0,
        "the retry"
    );
    assert_eq!(command_calls(&server, "publish"), published);
    // A first attempt that finds nothing says so.
    assert_eq!(
        release_as(&mut conn, "a:1", 1, 2, "-", None),
        -1,
        "not held"
    );
}

#[test]
fn a_last_release_leaves_holds_it_does_not_know_of() {
    // The server counts one more hold than the guard knows: a grant whose cancelled caller is
    // giving it back by itself. Deleting the field would let that give-back take the owner's
    // next hold instead (seen in tests/faults.rs when a release once did).
    let server = Server::start();
    let mut conn = server.conn();
    acquire_as(&mut conn, "a:1");
    acquire_as(&mut conn, "a:1");
    assert_eq!(
        release_as(&mut conn, "a:1", 1, 1, "-", None),
        1,
        "one remains"
    );
    // Holds remained, so the answer is latched: a retry changes nothing.
    assert_eq!(release_as(&mut conn, "a:1", 1, 1, "r", None), 1);
    assert_eq!(count_of(&mut conn, "a:1"), Some(1));
    // The late give-back, then the owner's next hold is untouched by anything that came before.
    assert_eq!(release_as(&mut conn, "a:1", 1, 2, "a", None), 0);
    assert_eq!(acquire_as(&mut conn, "a:1"), Value::Int(1));
    assert_eq!(owners(&server, HASH), 1);
}

/// `release.lua`'s lean form (1 key; owner, holds), as the client sends a guard's last hold of a
/// lock without lock-delay.
fn lean_release(conn: &mut Connection, field: &str, holds: u32) -> Value {
    Script::new(RELEASE)
        .key(HASH)
        .arg(field)
        .arg(holds)
        .invoke(conn)
        .unwrap()
}

#[test]
fn the_lean_release_frees_grants_or_asks_for_the_short_form_when_holds_would_remain() {
    let server = Server::start();
    let mut conn = server.conn();
    // Nothing held: -1, nothing written.
    assert_eq!(lean_release(&mut conn, "a:1", 1), Value::Int(-1));
    // The last hold: freed, and nothing published (nobody queued, nobody watching).
    acquire_as(&mut conn, "a:1");
    let published = command_calls(&server, "publish");
    assert_eq!(lean_release(&mut conn, "a:1", 1), Value::Int(0));
    assert_eq!(owners(&server, HASH), 0);
    assert_eq!(command_calls(&server, "publish"), published);
    // Holds would remain (the server counts more than the client knew): nothing changes, and
    // the client is asked for the short form (which writes the latch a retry needs).
    acquire_as(&mut conn, "a:1");
    acquire_as(&mut conn, "a:1");
    let ttl = pttl(&server, HASH);
    assert_eq!(
        lean_release(&mut conn, "a:1", 1),
        Value::SimpleString("FULL".into())
    );
    assert_eq!(count_of(&mut conn, "a:1"), Some(2));
    assert!(pttl(&server, HASH) <= ttl);
    assert_eq!(release_as(&mut conn, "a:1", 1, 1, "-", None), 1);
    assert_eq!(release_as(&mut conn, "a:1", 1, 2, "-", None), 0);
    // With a waiter queued, the last hold is granted to it, as by the short form.
    let Value::Array(_) = wait_call(&mut conn, "a:1", 30_000) else {
        panic!("a fenced acquisition")
    };
    assert!(matches!(wait_call(&mut conn, "b:1", 20_000), Value::Int(n) if n < -2));
    assert_eq!(lean_release(&mut conn, "a:1", 1), Value::Int(0));
    assert_eq!(count_of(&mut conn, "a:1"), None);
    assert_eq!(
        count_of(&mut conn, "b:1"),
        Some(0),
        "granted to the queued waiter"
    );
    assert!(queue_of(&mut conn).is_empty());
}

/// A lean batch (one client's last holds coalesced: KEYS[i], one client id, then owner and holds
/// per entry) answers each entry as the lean form alone would, in order.
#[test]
fn a_lean_batch_answers_each_entry_as_the_lean_form() {
    let server = Server::start();
    let mut conn = server.conn();
    let [freed, unheld, nested] = ["t:{lean-1}", "t:{lean-2}", "t:{lean-3}"];
    for hash in [freed, nested, nested] {
        assert!(matches!(
            acquire_call(&mut conn, (hash, None), "a:1", true).unwrap(),
            Value::Int(1 | 2)
        ));
    }
    let reply = Script::new(RELEASE)
        .key(freed)
        .key(unheld)
        .key(nested)
        .arg("a:1")
        .arg(1)
        .arg("a:1")
        .arg(1)
        .arg("a:1")
        .arg(1)
        .invoke::<Value>(&mut conn)
        .unwrap();
    assert_eq!(
        reply,
        Value::Array(vec![
            Value::Int(0),
            Value::Int(-1),
            Value::SimpleString("FULL".into()),
        ])
    );
    assert_eq!(owners(&server, freed), 0);
    let nested_count: Option<i64> = redis::cmd("HGET")
        .arg(nested)
        .arg("a:1")
        .query(&mut conn)
        .unwrap();
    assert_eq!(nested_count, Some(2), "untouched");
}

#[test]
fn a_retried_hand_over_reports_the_same_grant() {
    let server = Server::start();
    let mut conn = server.conn();
    // Fenced: the first holder took a token (a counter far ahead of the clock makes the next
    // one exactly its successor).
    redis::cmd("SET")
        .arg(FENCE)
        .arg(4_000_000_000_000_000_i64)
        .exec(&mut conn)
        .unwrap();
    let first = acquire_call(&mut conn, (HASH, Some(FENCE)), "a:1", true).unwrap();
    let one: i64 = 4_000_000_000_000_000 + 1;
    assert_eq!(first, Value::Array(vec![Value::Int(1), Value::Int(one)]));
    let handed = |conn: &mut Connection, mode: &str| -> i64 {
        release_call(conn, "a:1", (1, 1, mode), Some(("a:2", true))).unwrap()
    };
    let published = command_calls(&server, "publish");
    // Nobody listens: handed to a:2 with the next token (reply -2 - token).
    assert_eq!(handed(&mut conn, "-"), -2 - (one + 1));
    assert_eq!(count_of(&mut conn, "a:2"), Some(1));
    assert_eq!(count_of(&mut conn, "a:1"), None);
    let ttl = pttl(&server, HASH);
    assert!(
        (15_000..=20_000).contains(&ttl),
        "the successor's lease: {ttl}"
    );
    // The retry reports the same hand-over and token, and does not hand over again.
    assert_eq!(handed(&mut conn, "r"), -2 - (one + 1));
    assert_eq!(command_calls(&server, "publish"), published, "never free");
    let counter: i64 = redis::cmd("GET").arg(FENCE).query(&mut conn).unwrap();
    assert_eq!(counter, one + 1, "one new token");
    // Once the successor released too, a retry reports a plain release.
    assert_eq!(release_as(&mut conn, "a:2", 1, 3, "-", None), 0);
    assert_eq!(release_as(&mut conn, "a:1", 1, 4, "r", Some("a:2")), 0);
}

#[test]
fn a_retried_give_back_returns_the_first_answer_and_gives_back_once() {
    let server = Server::start();
    let mut conn = server.conn();
    for _ in 0..3 {
        acquire_as(&mut conn, "a:1");
    }
    assert_eq!(release_as(&mut conn, "a:1", 1, 7, "a", None), 2);
    // The same request again (its reply was lost): the same answer, still 2 holds.
    assert_eq!(release_as(&mut conn, "a:1", 1, 7, "ra", None), 2);
    assert_eq!(count_of(&mut conn, "a:1"), Some(2));
    // A new request gives back the rest; its retry does not report "not held".
    let published = command_calls(&server, "publish");
    assert_eq!(release_as(&mut conn, "a:1", 2, 8, "a", None), 0);
    assert_eq!(release_as(&mut conn, "a:1", 2, 8, "ra", None), 0);
    assert_eq!(command_calls(&server, "publish"), published, "nobody waits");
    assert_eq!(owners(&server, HASH), 0);
    // Nothing held: -1, and that answer is latched too, so its retry cannot take a new hold.
    assert_eq!(release_as(&mut conn, "a:1", 1, 9, "a", None), -1);
    acquire_as(&mut conn, "a:1");
    assert_eq!(
        release_as(&mut conn, "a:1", 1, 9, "ra", None),
        -1,
        "latched"
    );
    assert_eq!(
        count_of(&mut conn, "a:1"),
        Some(1),
        "the new hold is untouched"
    );
}

#[test]
fn scripts_leave_keys_of_another_type_alone() {
    let server = Server::start();
    let mut conn = server.conn();
    redis::cmd("SET")
        .arg(HASH)
        .arg("x")
        .exec(&mut conn)
        .unwrap();
    let acquired = acquire_call(&mut conn, (HASH, None), "a:1", true);
    assert!(acquired.is_err(), "acquire on a string: {acquired:?}");
    let released = release_call(&mut conn, "a:1", (1, 1, "-"), None);
    assert!(released.is_err(), "release on a string: {released:?}");
    let value: String = redis::cmd("GET").arg(HASH).query(&mut conn).unwrap();
    assert_eq!(value, "x");
}

/// Whether `reply` is the error message of one batch entry (a string, `WRONGTYPE …`).
fn is_wrong_type_message(reply: &Value) -> bool {
    matches!(reply, Value::BulkString(m) if m.starts_with(b"WRONGTYPE"))
}

#[test]
fn a_batch_answers_each_entry_in_order_and_keeps_an_error_to_its_entry() {
    // One client's concurrent calls coalesced into one (`src/node/calls/batch.rs`): the entries run in
    // order, as the same calls one after another would, and a key of another type fails only
    // its own entry.
    let server = Server::start();
    let mut conn = server.conn();
    acquire_as(&mut conn, "b:1");
    let (free, text) = ("t:{free}", "t:{text}");
    redis::cmd("SET")
        .arg(text)
        .arg("x")
        .exec(&mut conn)
        .unwrap();
    let acquire = Script::new(ACQUIRE);
    let mut call = acquire.prepare_invoke();
    for hash in [HASH, free, text, free] {
        call.key(hash);
    }
    for _ in 0..4 {
        call.arg("a:1").arg(30_000).arg("1");
    }
    let Value::Array(replies) = call.invoke::<Value>(&mut conn).unwrap() else {
        panic!("a table for a batch")
    };
    assert!(
        matches!(replies[0], Value::Int(n) if n <= -2),
        "held by b: {replies:?}"
    );
    assert_eq!(replies[1], Value::Int(1), "taken");
    assert!(is_wrong_type_message(&replies[2]), "{replies:?}");
    assert_eq!(
        replies[3],
        Value::Int(2),
        "re-entered after the entry that failed"
    );
    assert_eq!(
        count_of(&mut conn, "b:1"),
        Some(1),
        "the holder's hash untouched"
    );

    let release = Script::new(RELEASE);
    let mut call = release.prepare_invoke();
    for (hash, request) in [(free, 1), (text, 2), (HASH, 3)] {
        call.key(hash)
            .key(format!("{hash}:latch:{CLIENT}:{request}"));
    }
    for (field, holds) in [("a:1", 1), ("a:1", 1), ("b:1", 1)] {
        call.arg(field).arg(30_000).arg(10_000).arg(holds).arg("-");
    }
    let published = command_calls(&server, "publish");
    let Value::Array(replies) = call.invoke::<Value>(&mut conn).unwrap() else {
        panic!("a table for a batch")
    };
    assert_eq!(
        replies[0],
        Value::Int(1),
        "one hold of two left: {replies:?}"
    );
    assert!(is_wrong_type_message(&replies[1]), "{replies:?}");
    assert_eq!(replies[2], Value::Int(0), "b's last hold released");
    assert_eq!(owners(&server, HASH), 0, "b's hash gone");
    assert_eq!(owners(&server, free), 1, "a still holds one");
    assert!(pttl(&server, free) > 25_000, "the lease kept");
    assert_eq!(command_calls(&server, "publish"), published, "nobody waits");
    let kept: String = redis::cmd("GET").arg(text).query(&mut conn).unwrap();
    assert_eq!(kept, "x", "the other type's key untouched");
}

/// `acquire.lua`'s long form for a waiter on `HASH`: fenced, queued with a slack of 2 s and a
/// claim lease of 1.5 s, its nonce 7.
fn wait_call(conn: &mut Connection, field: &str, lease: u64) -> Value {
    wait_call_as(conn, field, lease, "1")
}

/// [`wait_call`] with acquire.lua's ARGV[3] (`'2'`: a re-entry of an owner that holds it).
fn wait_call_as(conn: &mut Connection, field: &str, lease: u64, reentrant: &str) -> Value {
    let script = Script::new(ACQUIRE);
    let mut call = script.key(HASH);
    call.key(FENCE).key(format!("{HASH}:delay"));
    call.arg(field)
        .arg(lease)
        .arg(reentrant)
        .arg(GRACE)
        .arg(0)
        .arg(2_000)
        .arg(1_500)
        .arg(7);
    call.invoke(conn).unwrap()
}

fn queue_of(conn: &mut Connection) -> Vec<String> {
    redis::cmd("LRANGE")
        .arg(format!("{HASH}:q"))
        .arg(0)
        .arg(-1)
        .query(conn)
        .unwrap()
}

#[test]
fn a_release_grants_the_first_queued_waiter_who_claims_it_as_a_first_acquisition() {
    let server = Server::start();
    let mut conn = server.conn();
    let Value::Array(first) = wait_call(&mut conn, "a:1", 30_000) else {
        panic!("a fenced grant")
    };
    let Value::Int(held_token) = first[1] else {
        panic!("{first:?}")
    };
    // Two waiters queue, in order, each refused with the holder's lease.
    for waiter in ["b:1", "c:1"] {
        let Value::Int(refused) = wait_call(&mut conn, waiter, 20_000) else {
            panic!("refused")
        };
        assert!(refused < -2, "{refused}");
    }
    assert_eq!(queue_of(&mut conn), ["b:1", "c:1"]);
    let granted = command_calls(&server, "publish");
    assert_eq!(
        release_call(&mut conn, "a:1", (1, 1, "-"), None).unwrap(),
        0
    );
    assert_eq!(
        command_calls(&server, "publish"),
        granted + 1,
        "one message"
    );
    // b's hold is written with count 0 and the claim lease; c still waits.
    assert_eq!(count_of(&mut conn, "b:1"), Some(0));
    assert!(pttl(&server, HASH) <= 1_500);
    assert_eq!(queue_of(&mut conn), ["c:1"]);
    // A grant is no re-entry: claiming it takes a new token and b's own lease, count 1.
    let Value::Array(claimed) = wait_call(&mut conn, "b:1", 20_000) else {
        panic!("a fenced claim")
    };
    assert_eq!(claimed[0], Value::Int(1));
    let Value::Int(token) = claimed[1] else {
        panic!("{claimed:?}")
    };
    assert!(token > held_token);
    assert!(pttl(&server, HASH) > 15_000, "b's lease");
    // c, asking again, is refused and keeps its place.
    assert!(matches!(wait_call(&mut conn, "c:1", 20_000), Value::Int(n) if n < -2));
    assert_eq!(queue_of(&mut conn), ["c:1"]);
}

#[test]
fn a_retried_release_does_not_take_a_queued_grant_for_a_hand_over() {
    let server = Server::start();
    let mut conn = server.conn();
    wait_call(&mut conn, "a:1", 30_000);
    // a:2 (a waiter of a:1's own client) queued earlier, while another client held the lock.
    let (s, _): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
    redis::cmd("RPUSH")
        .arg(format!("{HASH}:q"))
        .arg("a:2")
        .exec(&mut conn)
        .unwrap();
    redis::cmd("HSET")
        .arg(format!("{HASH}:qd"))
        .arg("a:2")
        .arg(format!("{} 1500 - 0 3", (s + 60) * 1000))
        .exec(&mut conn)
        .unwrap();
    // Something else heads the queue, ahead of a:2 (a name listed without an entry, which the
    // walk drops), so the release grants from the queue (to a:2, count 0) rather than handing
    // over to a:2 as its own client's successor; its reply is lost.
    redis::cmd("LPUSH")
        .arg(format!("{HASH}:q"))
        .arg("~")
        .exec(&mut conn)
        .unwrap();
    assert_eq!(
        release_call(&mut conn, "a:1", (1, 1, "-"), Some(("a:2", true))).unwrap(),
        0
    );
    assert_eq!(count_of(&mut conn, "a:2"), Some(0));
    // The retry must not report a hand-over (a:2 would take a grant it has not claimed, with
    // the old holder's token, as a hold of its full lease).
    assert_eq!(
        release_call(&mut conn, "a:1", (1, 1, "r"), Some(("a:2", true))).unwrap(),
        0
    );
}

#[test]
fn a_waiter_finding_the_lock_free_behind_others_gives_it_to_the_first() {
    let server = Server::start();
    let mut conn = server.conn();
    wait_call(&mut conn, "a:1", 200);
    wait_call(&mut conn, "b:1", 20_000);
    wait_call(&mut conn, "c:1", 20_000);
    // a's lease runs out (a crashed); c asks first.
    std::thread::sleep(std::time::Duration::from_millis(300));
    let refused = wait_call(&mut conn, "c:1", 20_000);
    assert!(
        matches!(refused, Value::Int(n) if n < -2),
        "c is refused, never told it holds the lock: {refused:?}"
    );
    assert_eq!(count_of(&mut conn, "b:1"), Some(0), "granted to b");
    assert_eq!(queue_of(&mut conn), ["c:1"]);
}

/// Every kind's queue (`lua/queue.lua`) keeps a waiter's place only while its entry lives: a
/// waiter whose entry died (it stopped asking for longer than its place's life) and asks again
/// queues behind those that came meanwhile, and a release grants them first.
#[test]
fn a_waiter_whose_entry_died_queues_again_at_the_back() {
    let server = Server::start();
    let mut conn = server.conn();
    wait_call(&mut conn, "a:1", 30_000);
    wait_call(&mut conn, "b:1", 20_000);
    // b's entry dies where it stands, at the head (its deadline passed a second ago).
    let (s, _): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
    redis::cmd("HSET")
        .arg(format!("{HASH}:qd"))
        .arg("b:1")
        .arg(format!("{} 1500 {GRACE} 0 7", (s - 1) * 1000))
        .exec(&mut conn)
        .unwrap();
    wait_call(&mut conn, "c:1", 20_000);
    assert_eq!(queue_of(&mut conn), ["b:1", "c:1"], "listed, dead");
    wait_call(&mut conn, "b:1", 20_000);
    assert_eq!(queue_of(&mut conn), ["c:1", "b:1"], "b came back after c");
    assert_eq!(
        release_call(&mut conn, "a:1", (1, 1, "-"), None).unwrap(),
        0
    );
    assert_eq!(count_of(&mut conn, "c:1"), Some(0), "granted to c");
    assert_eq!(count_of(&mut conn, "b:1"), None);
    assert_eq!(queue_of(&mut conn), ["b:1"]);
}

/// A grant to a waiter with a lock-delay writes the marker; when that waiter withdraws, the
/// grant passes to the next waiter, which asked for no delay: the marker goes with the unused
/// grant, or it would refuse every acquirer (whatever their own delay) once that waiter
/// released.
#[test]
fn a_withdrawn_grant_takes_its_lock_delay_marker_with_it() {
    let server = Server::start();
    let mut conn = server.conn();
    let marker = format!("{HASH}:delay");
    acquire_as(&mut conn, "a:1");
    wait_call(&mut conn, "b:1", 30_000);
    // b asked for a 5 s lock-delay (the long form's terms: claim, grace, delay, nonce).
    let (s, _): (u64, u64) = redis::cmd("TIME").query(&mut conn).unwrap();
    redis::cmd("HSET")
        .arg(format!("{HASH}:qd"))
        .arg("b:1")
        .arg(format!("{} 1500 - 5000 7", (s + 60) * 1000))
        .exec(&mut conn)
        .unwrap();
    wait_call(&mut conn, "c:1", 30_000);
    assert_eq!(
        release_call(&mut conn, "a:1", (1, 1, "-"), None).unwrap(),
        0
    );
    assert_eq!(count_of(&mut conn, "b:1"), Some(0), "granted to b");
    assert!(exists(&server, &marker), "with b's marker");
    let withdrawn: i64 = Script::new(WITHDRAW)
        .key(HASH)
        .arg("b:1")
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(withdrawn, 1);
    assert_eq!(count_of(&mut conn, "c:1"), Some(0), "passed on to c");
    assert!(!exists(&server, &marker), "b's marker went with its grant");
}

/// A strict lock's single attempt (`FairLock::try_lock`): slack `-1`, unfenced, no claim, no
/// nonce.
fn strict_once_call(conn: &mut Connection, field: &str) -> Value {
    let script = Script::new(ACQUIRE);
    let mut call = script.key(HASH);
    call.key(FENCE).key(format!("{HASH}:delay"));
    call.arg(field)
        .arg(20_000)
        .arg("1")
        .arg("-")
        .arg(0)
        .arg(-1)
        .arg(0)
        .arg(0);
    call.invoke(conn).unwrap()
}

#[test]
fn a_strict_single_attempt_respects_the_queue_and_takes_no_place() {
    let server = Server::start();
    let mut conn = server.conn();
    // Free, nobody queued: taken.
    assert_eq!(strict_once_call(&mut conn, "n:1"), Value::Int(1));
    // Held: refused, and not queued.
    let refused = strict_once_call(&mut conn, "n:2");
    assert!(matches!(refused, Value::Int(n) if n < -2), "{refused:?}");
    assert!(
        queue_of(&mut conn).is_empty(),
        "a single attempt took a place"
    );
    let _: () = redis::cmd("DEL").arg(HASH).query(&mut conn).unwrap();
    // Free with a waiter queued (its holder's lease ran out): the waiter gets it, the newcomer
    // is refused for the waiter's claim lease and takes no place.
    wait_call(&mut conn, "a:1", 200);
    wait_call(&mut conn, "b:1", 20_000);
    std::thread::sleep(std::time::Duration::from_millis(300));
    let refused = strict_once_call(&mut conn, "n:3");
    assert!(
        matches!(refused, Value::Int(n) if n < -2),
        "a newcomer took a free lock ahead of the queue: {refused:?}"
    );
    assert_eq!(count_of(&mut conn, "b:1"), Some(0), "granted to b");
    assert_eq!(count_of(&mut conn, "n:3"), None);
    assert!(
        queue_of(&mut conn).is_empty(),
        "a single attempt took a place"
    );
}

#[test]
fn an_untaken_grant_is_claimed_by_its_owners_first_acquisition_even_non_reentrant() {
    let server = Server::start();
    let mut conn = server.conn();
    wait_call(&mut conn, "a:1", 30_000);
    wait_call(&mut conn, "b:1", 20_000);
    assert_eq!(
        release_call(&mut conn, "a:1", (1, 1, "-"), None).unwrap(),
        0
    );
    assert_eq!(count_of(&mut conn, "b:1"), Some(0), "granted to b");
    // b's plain, non-reentrant first acquisition claims it: not "already held by this owner".
    let claimed = acquire_call(&mut conn, (HASH, None), "b:1", false).unwrap();
    assert_eq!(claimed, Value::Int(1));
    assert!(pttl(&server, HASH) > 25_000, "b's lease");
}

/// The message a grant publishes, and what a holder that took the lock from it can do: it is
/// one hold (a re-entry counts two and keeps the grant's token; the release frees the lock and
/// grants the next waiter).
#[test]
fn a_grant_message_names_token_and_nonce_and_the_grant_counts_as_one_hold() {
    let server = Server::start();
    let mut conn = server.conn();
    let Value::Array(first) = wait_call(&mut conn, "a:1", 30_000) else {
        panic!("a fenced grant")
    };
    let Value::Int(held_token) = first[1] else {
        panic!("{first:?}")
    };
    wait_call(&mut conn, "b:1", 20_000);
    wait_call(&mut conn, "c:1", 20_000);
    let mut listener = server.conn();
    let mut pubsub = listener.as_pubsub();
    // Only b's client hears of it, on its own channel of the lock.
    pubsub.subscribe(format!("{HASH}:unlock")).unwrap();
    pubsub.subscribe(format!("{HASH}:unlock:b")).unwrap();
    pubsub
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    assert_eq!(
        release_call(&mut conn, "a:1", (1, 1, "-"), None).unwrap(),
        0
    );
    let message = pubsub.get_message().unwrap();
    assert_eq!(message.get_channel_name(), format!("{HASH}:unlock:b"));
    let payload: String = message.get_payload().unwrap();
    let parts: Vec<&str> = payload.split(' ').collect();
    assert_eq!(parts.len(), 5, "{payload}");
    assert_eq!(
        (parts[0], parts[1], parts[3], parts[4]),
        ("g", "1500", "7", "b:1")
    );
    let granted_token: i64 = parts[2].parse().unwrap();
    assert!(granted_token > held_token, "{granted_token} > {held_token}");
    let stored: i64 = redis::cmd("GET").arg(FENCE).query(&mut conn).unwrap();
    assert_eq!(stored, granted_token, "the counter is the grant's token");
    assert_eq!(count_of(&mut conn, "b:1"), Some(0));
    assert!(pttl(&server, HASH) <= 1_500, "the claim lease");

    // b took it from the message; its re-entry is its second hold, with the same token.
    let Value::Array(again) = wait_call_as(&mut conn, "b:1", 20_000, "2") else {
        panic!("a fenced re-entry")
    };
    assert_eq!(again, vec![Value::Int(2), Value::Int(granted_token)]);
    assert_eq!(count_of(&mut conn, "b:1"), Some(2));
    // Two releases free it; the second grants c.
    assert_eq!(
        release_call(&mut conn, "b:1", (1, 2, "-"), None).unwrap(),
        1
    );
    assert_eq!(
        release_call(&mut conn, "b:1", (1, 3, "-"), None).unwrap(),
        0
    );
    assert_eq!(count_of(&mut conn, "b:1"), None);
    assert_eq!(count_of(&mut conn, "c:1"), Some(0), "granted to c");
    // c releases the grant it took from its message without ever writing to it: one hold.
    assert_eq!(
        release_call(&mut conn, "c:1", (1, 4, "-"), None).unwrap(),
        0
    );
    assert_eq!(owners(&server, HASH), 0, "free");
}

/// A non-reentrant owner that took a grant from its message is refused its own lock again.
#[test]
fn a_taken_grant_is_held_by_a_non_reentrant_owner() {
    let server = Server::start();
    let mut conn = server.conn();
    wait_call(&mut conn, "a:1", 30_000);
    wait_call(&mut conn, "b:1", 20_000);
    release_call(&mut conn, "a:1", (1, 1, "-"), None).unwrap();
    assert_eq!(count_of(&mut conn, "b:1"), Some(0));
    // ARGV[3] '3': non-reentrant, held here.
    let script = Script::new(ACQUIRE);
    let refused: Value = script
        .key(HASH)
        .arg("b:1")
        .arg(30_000)
        .arg("3")
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(refused, Value::Int(0), "already held by this owner");
    assert_eq!(count_of(&mut conn, "b:1"), Some(0), "unchanged");
}

/// The `lua/` files a `concat!` that starts after `start` in `text` puts together, in order.
fn parts_after(text: &str, start: &str) -> Vec<String> {
    let from = text.find(start).unwrap_or_else(|| panic!("no {start}"));
    let block = &text[from..];
    let block = &block[..block.find(");").expect("the concat's end")];
    block
        .split("lua/")
        .skip(1)
        .map(|part| part[..part.find(".lua").expect("a .lua name") + 4].to_string())
        .collect()
}

/// The scripts as the client sends them (`src/scripts.rs`), as these tests send them, and as
/// `bench/scripts/server_cost.py` measures them are put together alike: a copy that drifted
/// (the cost script once measured an order the client no longer sent) fails here.
#[test]
fn every_copy_of_the_scripts_concatenates_the_clients_order() {
    let client = include_str!("../src/scripts.rs");
    let tests = include_str!("scripts.rs");
    // Read at run time: the published crate has no bench/ (and so nothing to compare there).
    let cost_path = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/scripts/server_cost.py");
    let cost = std::fs::read_to_string(cost_path).ok();
    for (client_start, test_start, cost_start) in [
        (
            "ACQUIRE_SOURCE: &str",
            "const ACQUIRE: &str",
            "ACQUIRE_PARTS =",
        ),
        (
            "RELEASE_SOURCE: &str",
            "const RELEASE: &str",
            "RELEASE_PARTS =",
        ),
    ] {
        let sent = parts_after(client, client_start);
        assert!(sent.len() >= 4, "{sent:?}");
        assert_eq!(parts_after(tests, test_start), sent, "{test_start}");
        let Some(cost) = cost.as_deref() else {
            continue;
        };
        let from = cost.find(cost_start).expect("the cost script's parts");
        let tuple = &cost[from..from + cost[from..].find(')').expect("a tuple")];
        let measured: Vec<String> = tuple
            .split('"')
            .filter(|part| part.ends_with(".lua"))
            .map(str::to_string)
            .collect();
        assert_eq!(measured, sent, "{cost_start}");
    }
}

/// A release never hands the lock from a field to itself (tasks sharing an owner): it frees
/// the lock and answers a plain release. Handing over wrote the successor's count and then
/// deleted the releasing field, the same one: the key was gone while the reply said "handed".
#[test]
fn a_release_never_hands_the_lock_to_its_own_field() {
    let server = Server::start();
    let mut conn = server.conn();
    acquire_as(&mut conn, "a:1");
    assert_eq!(release_as(&mut conn, "a:1", 1, 1, "-", Some("a:1")), 0);
    assert_eq!(count_of(&mut conn, "a:1"), None);
    assert!(!support::exists(&server, HASH));
}

/// Both renewal scripts renew on a full server (`noeviction`, over `maxmemory`): a lock with a
/// lock-delay gets its lease and its marker extended, and one whose marker went is given a new
/// one (a script's later writes are not refused, and the per-node script declares `allow-oom`).
#[test]
fn a_renewal_on_a_full_server_renews_the_lock_and_its_marker() {
    const RENEW: &str = include_str!("../lua/renew.lua");
    const RENEW_NODE: &str = include_str!("../lua/renew_node.lua");
    let server = Server::start();
    let mut conn = server.conn();
    let marker = format!("{HASH}:delay");
    for (script, marker_kept) in [
        (RENEW, true),
        (RENEW, false),
        (RENEW_NODE, true),
        (RENEW_NODE, false),
    ] {
        run(&mut conn, &["CONFIG", "SET", "maxmemory", "0"]);
        acquire_as(&mut conn, "a:1");
        if marker_kept {
            run(&mut conn, &["SET", &marker, "1", "PX", "1000"]);
        }
        run(&mut conn, &["PEXPIRE", HASH, "1000"]);
        run(
            &mut conn,
            &["CONFIG", "SET", "maxmemory-policy", "noeviction"],
        );
        run(&mut conn, &["CONFIG", "SET", "maxmemory", "1"]);
        let loaded = Script::new(script);
        let mut call = loaded.prepare_invoke();
        if script == RENEW {
            call.key(HASH);
        } else {
            call.arg(HASH);
        }
        let renewed: RedisResult<Vec<i64>> = call.arg("a:1").arg("30000+5000").invoke(&mut conn);
        run(&mut conn, &["CONFIG", "SET", "maxmemory", "0"]);
        let which = (script == RENEW, marker_kept);
        assert_eq!(renewed.unwrap(), [1], "renewed: {which:?}");
        assert!(pttl(&server, HASH) > 29_000, "lease extended: {which:?}");
        assert!(
            pttl(&server, &marker) > 34_000,
            "marker extended: {which:?}"
        );
        release_as(&mut conn, "a:1", 1, 1, "-", None);
        run(&mut conn, &["DEL", &marker]);
    }
}

/// Runs a command whose reply does not matter.
fn run(conn: &mut Connection, args: &[&str]) {
    let mut cmd = redis::cmd(args[0]);
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    let _: Value = cmd.query(conn).unwrap();
}
