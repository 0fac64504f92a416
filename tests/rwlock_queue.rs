//! The read-write lock's waiter queue on the server (`lua/queue.lua`, `lua/queue_permits.lua`,
//! `lua/rwlock.lua`): a release grants the lock to the queue's head in the same call (the first
//! readers together, or one writer) and tells only the grantees' processes, so processes take turns
//! without a herd of attempts; arrival order holds across readers and writers; a grant to a waiter
//! that died passes on after the claim lease; waits cut at any point leave nothing. Within one
//! client, a release names its own client's grantees in its reply (no message).
//!
//! The multi-process tests re-run this test binary as children that execute only the
//! `#[ignore]`d `rwlock_worker` test, configured through `REDLEASE_RW*` variables.

mod support;

use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redis::{Commands, Value};
use redlease::{Client, Error, LockOptions, Owner};
use support::workers::{self, all_succeed, signal};
use support::{Server, client, command_calls, unique_name};

const SCRIPT: &str = concat!(
    include_str!("../lua/queue.lua"),
    include_str!("../lua/queue_permits.lua"),
    include_str!("../lua/rwlock.lua")
);

/// A guard's unlock, not started yet: the guard lives in it until it is awaited.
type Unlock = std::pin::Pin<Box<dyn std::future::Future<Output = redlease::Result<()>> + Send>>;

const CLAIM: Duration = Duration::from_millis(800);

fn script_calls(server: &Server) -> u64 {
    command_calls(server, "evalsha") + command_calls(server, "eval")
}

fn published(server: &Server) -> u64 {
    command_calls(server, "publish")
}

/// The owners queued for the lock whose key is `key`.
fn queued(server: &Server, key: &str) -> Vec<String> {
    server.conn().lrange(format!("{key}:q"), 0, -1).unwrap()
}

fn queue_left(server: &Server, key: &str) -> bool {
    support::exists(server, &format!("{key}:q")) || support::exists(server, &format!("{key}:qd"))
}

/// Runs `lua/rwlock.lua` once with a batch of `(op, owner, lease ms, place life ms)` entries on
/// one lock (claim lease: 10 s; the waiter `<owner>#1`; a release hands over to the owner's
/// client, the part of `owner` before its `:`); the reply of each entry, as its integer and the
/// waiters it names (a release's grantees of its own client).
fn batch(
    server: &Server,
    key: &str,
    entries: &[(&str, &str, u64, u64)],
) -> Vec<(i64, Vec<String>)> {
    let owned: Vec<_> = entries
        .iter()
        .map(|&(op, owner, lease, life)| {
            let client = owner.split(':').next().unwrap().to_string();
            (op, owner, lease, life, format!("{owner}#1"), client)
        })
        .collect();
    run(server, key, 10_000, &owned)
}

/// [`batch`] with every argument given: `(op, owner, lease, life, waiter, hand-over)`.
fn run(
    server: &Server,
    key: &str,
    claim: u64,
    entries: &[(&str, &str, u64, u64, String, String)],
) -> Vec<(i64, Vec<String>)> {
    let channel = format!("{key}:unlock");
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(SCRIPT).arg(2 * entries.len());
    for _ in entries {
        cmd.arg(key).arg(&channel);
    }
    for (op, owner, lease, life, waiter, handover) in entries {
        let handover = match *op {
            "unread" | "unwrite" | "withdraw" => handover.as_str(),
            _ => "",
        };
        cmd.arg(2)
            .arg(7)
            .arg(*op)
            .arg(*owner)
            .arg(*lease)
            .arg(*life)
            .arg(claim);
        cmd.arg(waiter).arg(handover);
    }
    let replies: Vec<(i64, Value)> = cmd.query(&mut server.conn()).unwrap();
    replies
        .into_iter()
        .map(|(ok, reply)| {
            assert_eq!(ok, 1, "an entry failed: {reply:?}");
            match reply {
                Value::Int(n) => (n, Vec::new()),
                Value::Array(items) => {
                    let mut items = items.into_iter();
                    let Some(Value::Int(n)) = items.next() else {
                        panic!("a reply of another shape");
                    };
                    let names = items.map(|v| redis::from_redis_value(v).unwrap()).collect();
                    (n, names)
                }
                other => panic!("a reply of another shape: {other:?}"),
            }
        })
        .collect()
}

fn one(server: &Server, key: &str, op: &str, owner: &str, life: u64) -> (i64, Vec<String>) {
    batch(server, key, &[(op, owner, 30_000, life)]).remove(0)
}

/// The script alone: refused newcomers queue in arrival order; a release grants the first
/// readers together and stops at a writer; a grant to another client is a hold of count 0
/// that its owner's next attempt claims (count 1, never 2); a newcomer never passes anybody
/// queued.
#[test]
fn a_release_grants_the_queue_head_in_order() {
    let server = Server::start();
    let key = unique_name("rw-queue-lua");
    let hget = |field: &str| -> Option<String> { server.conn().hget(&key, field).unwrap() };
    assert_eq!(one(&server, &key, "write", "a:1", 0).0, 1);
    // Queued behind the writer, in this order: two readers, a writer, a reader.
    for owner in ["x:1", "x:2"] {
        assert!(one(&server, &key, "read", owner, 5_000).0 <= -2);
    }
    assert!(one(&server, &key, "write", "y:1", 5_000).0 <= -2);
    assert!(one(&server, &key, "read", "z:1", 5_000).0 <= -2);
    // A single attempt is refused and not queued.
    assert!(one(&server, &key, "read", "t:1", 0).0 <= -2);
    assert_eq!(queued(&server, &key), ["x:1#1", "x:2#1", "y:1#1", "z:1#1"]);
    let before = published(&server);
    // The release (by client a) grants both first readers, of client x: one message each; it
    // stops at the writer.
    assert_eq!(one(&server, &key, "unwrite", "a:1", 0), (0, vec![]));
    assert_eq!(published(&server) - before, 2, "one message per grantee");
    assert_eq!(hget("r:x:1").as_deref(), Some("-1"), "a grant, not claimed");
    assert_eq!(hget("r:x:2").as_deref(), Some("-1"));
    assert_eq!(queued(&server, &key), ["y:1#1", "z:1#1"]);
    // A newcomer reader does not pass the queued writer, though readers have the lock.
    assert!(one(&server, &key, "read", "t:1", 0).0 <= -2);
    // Claims: count 1, not a re-entry; the next read is one.
    assert_eq!(one(&server, &key, "read", "x:1", 5_000).0, 1);
    assert_eq!(one(&server, &key, "read", "x:1", 5_000).0, 2);
    assert_eq!(one(&server, &key, "unread", "x:1", 0).0, 1);
    assert_eq!(one(&server, &key, "unread", "x:1", 0).0, 0);
    // x:2 withdraws, its grant unclaimed: the lock goes to the writer y:1, told.
    let before = published(&server);
    assert_eq!(one(&server, &key, "withdraw", "x:2", 0), (1, vec![]));
    assert_eq!(published(&server) - before, 1);
    assert_eq!(hget("w").as_deref(), Some("y:1"));
    assert_eq!(hget("wn").as_deref(), Some("0"), "granted, not claimed");
    // An unclaimed grant is neither released nor renewed by its owner.
    assert_eq!(one(&server, &key, "unwrite", "y:1", 0).0, -1);
    assert_eq!(one(&server, &key, "renew_write", "y:1", 0).0, 0);
    assert_eq!(one(&server, &key, "write", "y:1", 5_000).0, 1);
    let before = published(&server);
    assert_eq!(one(&server, &key, "unwrite", "y:1", 0), (0, vec![]));
    assert_eq!(published(&server) - before, 1, "z:1 told");
    assert_eq!(one(&server, &key, "read", "z:1", 5_000).0, 1);
    assert_eq!(one(&server, &key, "unread", "z:1", 0).0, 0);
    assert!(!support::exists(&server, &key), "left behind");
    assert!(!queue_left(&server, &key), "queue left behind");
}

/// A release hands the lock outright to the waiters of its own client, names them in its reply
/// and publishes nothing; a waiter that missed the reply takes its hold with its next attempt
/// without counting it twice; the client's next release deletes the records of the ones that
/// took theirs; a withdrawal gives back a hold handed and not taken.
#[test]
fn a_release_hands_its_own_clients_waiters_the_lock() {
    let server = Server::start();
    let key = unique_name("rw-queue-handed");
    let hget = |field: &str| -> Option<String> { server.conn().hget(&key, field).unwrap() };
    let record = |waiter: &str| -> Option<String> {
        server.conn().hget(format!("{key}:qd"), waiter).unwrap()
    };
    assert_eq!(one(&server, &key, "write", "y:1", 0).0, 1);
    assert!(one(&server, &key, "read", "y:2", 5_000).0 <= -2);
    assert!(one(&server, &key, "read", "y:3", 5_000).0 <= -2);
    assert!(one(&server, &key, "write", "y:4", 5_000).0 <= -2);
    let before = published(&server);
    assert_eq!(
        one(&server, &key, "unwrite", "y:1", 0),
        (0, vec!["y:2#1".to_string(), "y:3#1".to_string()])
    );
    assert_eq!(published(&server) - before, 0, "handed over in the reply");
    assert_eq!(hget("r:y:2").as_deref(), Some("1"), "the hold itself");
    assert!(
        record("y:2#1").unwrap().starts_with("h r "),
        "a record of the hand-over"
    );
    // y:2 missed the reply: its next attempt takes the hold, counted once.
    assert_eq!(one(&server, &key, "read", "y:2", 5_000).0, 1);
    assert_eq!(hget("r:y:2").as_deref(), Some("1"));
    assert_eq!(record("y:2#1"), None);
    // Its next read is a re-entry.
    assert_eq!(one(&server, &key, "read", "y:2", 5_000).0, 2);
    // y:3 heard the reply; y:2's releases carry y:3's record to delete.
    let with = |op: &str, owner: &str, handover: &str| {
        let waiter = format!("{owner}#1");
        run(
            &server,
            &key,
            10_000,
            &[(op, owner, 0, 0, waiter, handover.into())],
        )
        .remove(0)
    };
    assert_eq!(with("unread", "y:2", "y y:3#1").0, 1);
    assert_eq!(record("y:3#1"), None, "the record y:3 took");
    assert_eq!(with("unread", "y:2", "y").0, 0);
    // y:3's release hands the write lock to y:4, which then stops waiting without taking it:
    // its withdrawal gives it back.
    assert_eq!(with("unread", "y:3", "y"), (0, vec!["y:4#1".to_string()]));
    assert_eq!(hget("w").as_deref(), Some("y:4"));
    assert_eq!(hget("wn").as_deref(), Some("1"));
    assert_eq!(with("withdraw", "y:4", "y").0, 1);
    assert!(!support::exists(&server, &key), "left behind");
    assert!(!queue_left(&server, &key), "queue left behind");
    // While its client shuts down ('-'), a release hands nothing over: it tells.
    assert_eq!(one(&server, &key, "write", "y:1", 0).0, 1);
    assert!(one(&server, &key, "read", "y:2", 5_000).0 <= -2);
    let before = published(&server);
    assert_eq!(with("unwrite", "y:1", "-"), (0, vec![]));
    assert_eq!(published(&server) - before, 1);
    assert_eq!(hget("r:y:2").as_deref(), Some("-1"));
    assert_eq!(with("withdraw", "y:2", "-").0, 1);
    assert!(!support::exists(&server, &key), "left behind");
    assert!(!queue_left(&server, &key), "queue left behind");
}

/// A waiter that missed the reply handing it the hold takes it later: the hold's lease starts
/// again then, since the client times it from that attempt.
#[test]
fn a_hold_taken_from_its_record_has_its_lease_from_then() {
    let server = Server::start();
    let key = unique_name("rw-queue-late-take");
    let server_ms = || -> u64 {
        let (s, us): (u64, u64) = redis::cmd("TIME").query(&mut server.conn()).unwrap();
        s * 1000 + us / 1000
    };
    let wd = || -> u64 { server.conn().hget(&key, "wd").unwrap() };
    assert_eq!(
        call(&server, &key, "write", "y:1", 30_000, 0, "y:1#1", "").0,
        1
    );
    assert!(call(&server, &key, "write", "y:2", 2_000, 5_000, "y:2#1", "").0 <= -2);
    let (_, handed) = call(&server, &key, "unwrite", "y:1", 0, 0, "", "y");
    assert_eq!(handed, ["y:2#1"]);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        call(&server, &key, "write", "y:2", 2_000, 5_000, "y:2#1", "").0,
        1
    );
    let left = wd() - server_ms();
    assert!(
        left > 1_800,
        "the hold has {left} ms left of its 2,000 ms lease"
    );
    assert!(call(&server, &key, "read", "y:3", 2_000, 5_000, "y:3#1", "").0 <= -2);
    let (_, handed) = call(&server, &key, "unwrite", "y:2", 0, 0, "", "y");
    assert_eq!(handed, ["y:3#1"]);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        call(&server, &key, "read", "y:3", 2_000, 5_000, "y:3#1", "").0,
        1
    );
    let rd: u64 = server.conn().hget(&key, "rd:y:3").unwrap();
    let left = rd - server_ms();
    assert!(
        left > 1_800,
        "the read hold has {left} ms left of its 2,000 ms lease"
    );
    assert_eq!(call(&server, &key, "unread", "y:3", 0, 0, "", "y").0, 0);
    assert!(!support::exists(&server, &key), "left behind");
}

/// A grant that its owner never claims ends with its claim lease: the next call grants on.
#[test]
fn an_unclaimed_grant_runs_out_and_passes_on() {
    let server = Server::start();
    let key = unique_name("rw-queue-claim");
    assert_eq!(one(&server, &key, "write", "a:1", 0).0, 1);
    // x:1 and y:1 queue, with a claim lease of 200 ms.
    let queue = |owner: &str| {
        let entry = (
            "write",
            owner,
            30_000,
            5_000,
            format!("{owner}#1"),
            String::new(),
        );
        run(&server, &key, 200, &[entry]).remove(0).0
    };
    assert!(queue("x:1") <= -2);
    assert!(queue("y:1") <= -2);
    assert_eq!(one(&server, &key, "unwrite", "a:1", 0).0, 0);
    let w: String = server.conn().hget(&key, "w").unwrap();
    assert_eq!(w, "x:1");
    std::thread::sleep(Duration::from_millis(300));
    // Any call finds the grant run out and grants on; x:1's late claim is refused.
    assert!(one(&server, &key, "read", "t:1", 0).0 <= -2);
    let w: String = server.conn().hget(&key, "w").unwrap();
    assert_eq!(w, "y:1");
    assert_eq!(one(&server, &key, "write", "y:1", 0).0, 1);
    assert!(one(&server, &key, "write", "x:1", 0).0 <= -2);
    assert_eq!(one(&server, &key, "unwrite", "y:1", 0).0, 0);
    // x:1's wait ends (a client withdraws it): nothing of it is left.
    assert_eq!(one(&server, &key, "withdraw", "x:1", 0).0, 0);
    assert!(!support::exists(&server, &key), "left behind");
    assert!(!queue_left(&server, &key), "queue left behind");
}

/// One entry with every argument given (claim lease: 10 s).
#[allow(clippy::too_many_arguments)]
fn call(
    server: &Server,
    key: &str,
    op: &str,
    owner: &str,
    lease: u64,
    life: u64,
    waiter: &str,
    handover: &str,
) -> (i64, Vec<String>) {
    let entry = (
        op,
        owner,
        lease,
        life,
        waiter.to_string(),
        handover.to_string(),
    );
    run(server, key, 10_000, &[entry]).remove(0)
}

/// Two waits of one owner (tasks sharing an `Owner`): the second claims the grant made to the
/// first, the first re-enters; both waits are over, so neither keeps a place, and no grant
/// to a finished wait keeps writers out later.
#[test]
fn a_wait_that_succeeds_leaves_the_queue() {
    let server = Server::start();
    let key = unique_name("rw-queue-sibling");
    let hget = |f: &str| -> Option<String> { server.conn().hget(&key, f).unwrap() };
    assert_eq!(
        call(&server, &key, "write", "a:1", 30_000, 0, "a:1#1", "").0,
        1
    );
    assert!(call(&server, &key, "read", "x:1", 30_000, 5_000, "x:1#1", "").0 <= -2);
    assert!(call(&server, &key, "write", "w:1", 30_000, 5_000, "w:1#1", "").0 <= -2);
    assert!(call(&server, &key, "read", "x:1", 30_000, 5_000, "x:1#2", "").0 <= -2);
    call(&server, &key, "unwrite", "a:1", 0, 0, "", "a");
    assert_eq!(hget("r:x:1").as_deref(), Some("-1"));
    assert_eq!(
        call(&server, &key, "read", "x:1", 30_000, 5_000, "x:1#2", "").0,
        1
    );
    assert_eq!(
        call(&server, &key, "read", "x:1", 30_000, 5_000, "x:1#1", "").0,
        2
    );
    assert_eq!(
        queued(&server, &key),
        ["w:1#1"],
        "finished waits still queued"
    );
    call(&server, &key, "unread", "x:1", 0, 0, "", "x");
    call(&server, &key, "unread", "x:1", 0, 0, "", "x");
    assert_eq!(
        call(&server, &key, "write", "w:1", 30_000, 5_000, "w:1#1", "").0,
        1
    );
    call(&server, &key, "unwrite", "w:1", 0, 0, "", "w");
    let newcomer = call(&server, &key, "write", "v:1", 30_000, 0, "v:1#1", "").0;
    assert_eq!(
        newcomer, 1,
        "a writer kept out by a grant to a finished wait"
    );
    call(&server, &key, "unwrite", "v:1", 0, 0, "", "v");
    assert!(!support::exists(&server, &key), "left behind");
    assert!(!queue_left(&server, &key), "queue left behind");
}

/// A wait that withdraws gives back only a grant made to it, not one made to another wait of
/// the same owner.
#[test]
fn a_withdrawal_gives_back_its_own_grant_only() {
    let server = Server::start();
    let key = unique_name("rw-queue-withdraw");
    let hget = |f: &str| -> Option<String> { server.conn().hget(&key, f).unwrap() };
    assert_eq!(
        call(&server, &key, "write", "a:1", 30_000, 0, "a:1#1", "").0,
        1
    );
    assert!(call(&server, &key, "write", "x:1", 30_000, 5_000, "x:1#1", "").0 <= -2);
    assert!(call(&server, &key, "write", "x:1", 30_000, 5_000, "x:1#2", "").0 <= -2);
    assert!(call(&server, &key, "write", "z:1", 30_000, 5_000, "z:1#1", "").0 <= -2);
    call(&server, &key, "unwrite", "a:1", 0, 0, "", "a");
    assert_eq!(hget("w").as_deref(), Some("x:1"));
    // x:1#2, still queued and granted nothing, withdraws; a second withdrawal is harmless.
    for _ in 0..2 {
        assert_eq!(
            call(&server, &key, "withdraw", "x:1", 0, 0, "x:1#2", "x").0,
            0
        );
    }
    assert_eq!(
        hget("w").as_deref(),
        Some("x:1"),
        "x:1#1's grant was taken from it"
    );
    // x:1#1's own withdrawal gives it back: z:1 is granted.
    assert_eq!(
        call(&server, &key, "withdraw", "x:1", 0, 0, "x:1#1", "x").0,
        1
    );
    assert_eq!(hget("w").as_deref(), Some("z:1"));
    assert_eq!(
        call(&server, &key, "write", "z:1", 30_000, 5_000, "z:1#1", "").0,
        1
    );
    call(&server, &key, "unwrite", "z:1", 0, 0, "", "z");
    assert!(!support::exists(&server, &key), "left behind");
    assert!(!queue_left(&server, &key), "queue left behind");
}

/// A hold handed to a waiter that missed the reply and came back only after its lease: its
/// record is stale. The waiter's refused attempt queues it for real (in order), and its late
/// withdrawal releases nothing its owner took since.
#[test]
fn a_stale_handed_record_is_neither_a_place_nor_a_hold() {
    let server = Server::start();
    let key = unique_name("rw-queue-stale");
    assert_eq!(
        call(&server, &key, "write", "y:1", 30_000, 0, "y:1#1", "").0,
        1
    );
    assert!(call(&server, &key, "read", "y:2", 100, 5_000, "y:2#1", "").0 <= -2);
    let (_, handed) = call(&server, &key, "unwrite", "y:1", 0, 0, "", "y");
    assert_eq!(handed, ["y:2#1"]);
    std::thread::sleep(Duration::from_millis(200));
    // The hold ran out; a writer comes in, and y:2#1 asks again: queued, first.
    assert_eq!(
        call(&server, &key, "write", "z:1", 30_000, 0, "z:1#1", "").0,
        1
    );
    assert!(call(&server, &key, "read", "y:2", 30_000, 5_000, "y:2#1", "").0 <= -2);
    assert!(call(&server, &key, "write", "q:1", 30_000, 5_000, "q:1#1", "").0 <= -2);
    assert_eq!(queued(&server, &key), ["y:2#1", "q:1#1"]);
    assert_eq!(
        call(&server, &key, "withdraw", "y:2", 0, 0, "y:2#1", "y").0,
        0
    );
    assert_eq!(
        call(&server, &key, "withdraw", "q:1", 0, 0, "q:1#1", "q").0,
        0
    );
    call(&server, &key, "unwrite", "z:1", 0, 0, "", "z");
    // Again, and this time another wait of owner y:2 reads before the late withdrawal.
    assert_eq!(
        call(&server, &key, "write", "y:1", 30_000, 0, "y:1#1", "").0,
        1
    );
    assert!(call(&server, &key, "read", "y:2", 100, 5_000, "y:2#3", "").0 <= -2);
    call(&server, &key, "unwrite", "y:1", 0, 0, "", "y");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        call(&server, &key, "read", "y:2", 30_000, 0, "y:2#4", "").0,
        1
    );
    assert_eq!(
        call(&server, &key, "withdraw", "y:2", 0, 0, "y:2#3", "y").0,
        0
    );
    let writer = call(&server, &key, "write", "w:1", 30_000, 0, "w:1#1", "").0;
    assert!(
        writer <= -2,
        "a writer got the lock while y:2#4 reads (reply {writer})"
    );
    assert_eq!(call(&server, &key, "unread", "y:2", 0, 0, "", "y").0, 0);
    assert!(!support::exists(&server, &key), "left behind");
    assert!(!queue_left(&server, &key), "queue left behind");
}

/// Two waits of one owner granted the read lock together: one that stops waiting gives back
/// its grant only, the other still claims its own.
#[test]
fn a_withdrawal_leaves_a_read_grant_shared_with_another_wait() {
    let server = Server::start();
    let key = unique_name("rw-queue-shared-grant");
    let hget = |f: &str| -> Option<String> { server.conn().hget(&key, f).unwrap() };
    assert_eq!(
        call(&server, &key, "write", "a:1", 30_000, 0, "a:1#1", "").0,
        1
    );
    assert!(call(&server, &key, "read", "x:1", 30_000, 5_000, "x:1#1", "").0 <= -2);
    assert!(call(&server, &key, "read", "x:1", 30_000, 5_000, "x:1#2", "").0 <= -2);
    assert!(call(&server, &key, "write", "z:1", 30_000, 5_000, "z:1#1", "").0 <= -2);
    call(&server, &key, "unwrite", "a:1", 0, 0, "", "a");
    assert_eq!(
        hget("r:x:1").as_deref(),
        Some("-2"),
        "two grants, not claimed"
    );
    assert_eq!(
        call(&server, &key, "withdraw", "x:1", 0, 0, "x:1#1", "x").0,
        1
    );
    assert_eq!(hget("r:x:1").as_deref(), Some("-1"));
    assert_eq!(hget("w"), None, "the writer came in beside a grant");
    assert_eq!(
        call(&server, &key, "read", "x:1", 30_000, 5_000, "x:1#2", "").0,
        1
    );
    assert_eq!(call(&server, &key, "unread", "x:1", 0, 0, "", "x").0, 0);
    assert_eq!(hget("w").as_deref(), Some("z:1"));
    assert_eq!(
        call(&server, &key, "withdraw", "z:1", 0, 0, "z:1#1", "z").0,
        1
    );
    assert!(!support::exists(&server, &key), "left behind");
    assert!(!queue_left(&server, &key), "queue left behind");
}

/// A grant that ran out unclaimed leaves its waiter's record; that waiter's late withdrawal
/// does not give back a later grant to another wait of the same owner.
#[test]
fn a_late_withdrawal_leaves_a_later_grant_alone() {
    let server = Server::start();
    let key = unique_name("rw-queue-late-withdraw");
    let hget = |f: &str| -> Option<String> { server.conn().hget(&key, f).unwrap() };
    let short = |op: &str, owner: &str, life: u64, waiter: &str, handover: &str| {
        let entry = (
            op,
            owner,
            30_000,
            life,
            waiter.to_string(),
            handover.to_string(),
        );
        run(&server, &key, 200, &[entry]).remove(0).0
    };
    assert_eq!(
        call(&server, &key, "write", "a:1", 30_000, 0, "a:1#1", "").0,
        1
    );
    assert!(short("write", "x:1", 5_000, "x:1#1", "") <= -2);
    assert!(call(&server, &key, "write", "y:1", 30_000, 5_000, "y:1#1", "").0 <= -2);
    short("unwrite", "a:1", 0, "", "a");
    assert_eq!(hget("w").as_deref(), Some("x:1"));
    std::thread::sleep(Duration::from_millis(300));
    // x:1#1's grant ran out unclaimed; y:1 goes, and x:1#2 is granted after it.
    assert_eq!(
        call(&server, &key, "write", "y:1", 30_000, 5_000, "y:1#1", "").0,
        1
    );
    assert!(call(&server, &key, "write", "x:1", 30_000, 5_000, "x:1#2", "").0 <= -2);
    call(&server, &key, "unwrite", "y:1", 0, 0, "", "y");
    assert_eq!(hget("w").as_deref(), Some("x:1"), "x:1#2 granted");
    assert_eq!(
        call(&server, &key, "withdraw", "x:1", 0, 0, "x:1#1", "x").0,
        0
    );
    assert_eq!(
        call(&server, &key, "write", "x:1", 30_000, 5_000, "x:1#2", "").0,
        1
    );
    call(&server, &key, "unwrite", "x:1", 0, 0, "", "x");
    assert!(!support::exists(&server, &key), "left behind");
}

/// A waiter whose place died (its process stalled past the place's life) and that asks again
/// is listed anew, in arrival order, whatever is left of its old entry.
#[test]
fn a_waiter_whose_place_died_queues_again_in_order() {
    let server = Server::start();
    let key = unique_name("rw-queue-dead-place");
    let hget = |f: &str| -> Option<String> { server.conn().hget(&key, f).unwrap() };
    assert_eq!(
        call(&server, &key, "write", "a:1", 30_000, 0, "a:1#1", "").0,
        1
    );
    assert!(call(&server, &key, "write", "b:1", 30_000, 300, "b:1#1", "").0 <= -2);
    assert!(call(&server, &key, "read", "c:1", 30_000, 300, "c:1#1", "").0 <= -2);
    call(&server, &key, "unwrite", "a:1", 0, 0, "", "a");
    assert_eq!(hget("w").as_deref(), Some("b:1"));
    assert_eq!(
        call(&server, &key, "write", "b:1", 30_000, 0, "b:1#1", "").0,
        1
    );
    std::thread::sleep(Duration::from_millis(450));
    assert!(call(&server, &key, "read", "c:1", 30_000, 5_000, "c:1#1", "").0 <= -2);
    assert!(call(&server, &key, "write", "d:1", 30_000, 5_000, "d:1#1", "").0 <= -2);
    assert_eq!(queued(&server, &key), ["c:1#1", "d:1#1"]);
}

fn spawn_worker(envs: &[(&str, String)]) -> Child {
    workers::spawn_worker("rwlock_worker", envs, Stdio::piped())
}

async fn claiming_client(server: &Server) -> Client {
    Client::builder(server.url())
        .claim_lease(CLAIM)
        .build()
        .await
        .unwrap()
}

/// 6 processes, one task each, 100 acquisitions each, every fifth a write: a write updates a
/// counter non-atomically, and every hold counts itself in `inside` (a write as 1,000,000), so
/// a read beside a write or two writes at once are seen. A grantee is told alone, so the
/// script calls per acquisition stay low.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn processes_read_and_write_in_turns_without_a_herd() {
    let server = Server::start();
    let name = unique_name("rw-turns");
    let (processes, rounds) = (6, 100);
    let calls_before = command_calls(&server, "evalsha");
    let children: Vec<Child> = (0..processes)
        .map(|_| {
            spawn_worker(&[
                ("REDLEASE_RW", "mix".into()),
                ("REDLEASE_RW_URL", server.url()),
                ("REDLEASE_RW_NAME", name.clone()),
                ("REDLEASE_RW_ROUNDS", rounds.to_string()),
            ])
        })
        .collect();
    all_succeed(children).await;
    let total = processes * rounds;
    let calls = command_calls(&server, "evalsha") - calls_before;
    let per = calls as f64 / total as f64;
    eprintln!("{processes} processes x {rounds}: {per:.2} script calls per acquisition");
    let counted: u64 = server.conn().get(format!("{name}:counter")).unwrap();
    assert_eq!(
        counted,
        (total / 5) as u64,
        "writes lost: a writer was not alone"
    );
    let client = client(&server).await;
    let rw = client.read_write_lock(&name).unwrap();
    assert!(!support::exists(&server, rw.key()), "left behind");
    assert!(!queue_left(&server, rw.key()), "queue keys left behind");
    assert!(per < 3.3, "{per:.2} script calls per acquisition");
}

/// A writer queued first is granted the lock when the readers leave, even while its process
/// is frozen; killed, it holds everybody up for the claim lease at most.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_to_a_frozen_then_killed_writer_passes_on_after_the_claim_lease() {
    let server = Server::start();
    let name = unique_name("rw-dead");
    let owner = claiming_client(&server).await;
    let rw = owner.read_write_lock(&name).unwrap();
    let held = rw.read().lock().await.unwrap();
    let mut doomed = spawn_worker(&[
        ("REDLEASE_RW", "wait".into()),
        ("REDLEASE_RW_URL", server.url()),
        ("REDLEASE_RW_NAME", name.clone()),
    ]);
    let until = |n: usize| {
        let (server, key) = (&server, rw.key().to_string());
        async move {
            support::eventually_async(Duration::from_secs(10), || async {
                queued(server, &key).len() >= n
            })
            .await
        }
    };
    assert!(until(1).await, "the worker never queued");
    let next = {
        let rw = owner
            .read_write_lock(&name)
            .unwrap()
            .with_owner(Owner::new());
        tokio::spawn(async move {
            let guard = rw.write().lock().await.unwrap();
            let at = Instant::now();
            guard.unlock().await.unwrap();
            at
        })
    };
    assert!(until(2).await, "the second writer never queued");
    signal(&doomed, "STOP");
    let released = Instant::now();
    held.unlock().await.unwrap();
    signal(&doomed, "KILL");
    let _ = doomed.wait();
    let granted = tokio::time::timeout(Duration::from_secs(10), next)
        .await
        .expect("the next writer was never granted")
        .unwrap();
    let after = granted - released;
    eprintln!("granted {after:?} after the release to a dead writer");
    assert!(
        after >= CLAIM - Duration::from_millis(50) && after <= CLAIM + Duration::from_secs(1),
        "granted {after:?} after the release; claim lease {CLAIM:?}"
    );
    let gone = support::eventually_async(Duration::from_secs(5), || async {
        !support::exists(&server, rw.key()) && !queue_left(&server, rw.key())
    })
    .await;
    assert!(gone, "left behind");
}

/// Waits cut at every point (first attempt, queued, grant on its way), reads and writes, while
/// another client keeps taking the lock: no place, no grant and no hold is left, and the lock
/// still works for everybody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_waits_leave_no_place_and_no_hold() {
    let server = Server::start();
    let name = unique_name("rw-cancels");
    let [owner, waiter] = support::clients(&server).await;
    let churn = {
        let rw = owner.read_write_lock(&name).unwrap();
        tokio::spawn(async move {
            for i in 0..150 {
                let guard: Unlock = match i % 3 {
                    0 => Box::pin(rw.write().lock().await.unwrap().unlock()),
                    _ => Box::pin(rw.read().lock().await.unwrap().unlock()),
                };
                tokio::time::sleep(Duration::from_millis(2)).await;
                guard.await.unwrap();
            }
        })
    };
    let rw = waiter.read_write_lock(&name).unwrap();
    let mut taken = 0;
    for i in 0..300u64 {
        let cut = Duration::from_micros(i * 37 % 3_000);
        let done = match i % 2 {
            0 => {
                tokio::time::timeout(cut, async {
                    rw.write().lock().await.unwrap().unlock().await
                })
                .await
            }
            _ => {
                tokio::time::timeout(cut, async {
                    rw.read().lock().await.unwrap().unlock().await
                })
                .await
            }
        };
        if let Ok(unlocked) = done {
            unlocked.unwrap();
            taken += 1;
        }
    }
    tokio::time::timeout(Duration::from_secs(30), churn)
        .await
        .expect("the churn starved")
        .unwrap();
    let settled = support::eventually_async(Duration::from_secs(5), || async {
        !support::exists(&server, rw.key()) && !queue_left(&server, rw.key())
    })
    .await;
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(rw.key())
        .query(&mut server.conn())
        .unwrap();
    assert!(
        settled,
        "left: {fields:?}, queue {:?} ({taken} acquisitions completed)",
        queued(&server, rw.key())
    );
    let other = owner
        .read_write_lock(&name)
        .unwrap()
        .with_owner(Owner::new());
    assert!(other.write().try_lock().await.unwrap().is_some());
}

/// 16 writers of one client, 8 writes each, each alone (a non-atomic counter in Redis); a
/// release hands the lock to the next writer outright, named in its reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_writers_take_turns() {
    support::init_tracing();
    let server = Server::start();
    let client = client(&server).await;
    let name = unique_name("rw-local-turns");
    let counter_key = format!("{name}:counter");
    let (tasks, rounds) = (16u64, 8u64);
    let inside = Arc::new(AtomicBool::new(false));
    let before = (script_calls(&server), published(&server));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..tasks {
        let rw = client.read_write_lock(&name).unwrap();
        let (inside, counter_key, url) = (inside.clone(), counter_key.clone(), server.url());
        set.spawn(async move {
            let redis = redis::Client::open(url).unwrap();
            let mut conn = redis.get_multiplexed_async_connection().await.unwrap();
            for _ in 0..rounds {
                let guard = rw.write().lock().await.unwrap();
                assert!(!inside.swap(true, Ordering::SeqCst), "two writers at once");
                let n: Option<u64> = redis::AsyncCommands::get(&mut conn, &counter_key)
                    .await
                    .unwrap();
                let _: () = redis::AsyncCommands::set(&mut conn, &counter_key, n.unwrap_or(0) + 1)
                    .await
                    .unwrap();
                inside.store(false, Ordering::SeqCst);
                guard.unlock().await.unwrap();
            }
        });
    }
    while let Some(done) = set.join_next().await {
        done.unwrap();
    }
    let calls = script_calls(&server) - before.0;
    let messages = published(&server) - before.1;
    let counted: u64 = server.conn().get(&counter_key).unwrap();
    assert_eq!(counted, tasks * rounds, "writes lost: not alone");
    let rw = client.read_write_lock(&name).unwrap();
    assert!(!support::exists(&server, rw.key()), "left behind");
    assert!(!queue_left(&server, rw.key()), "queue left behind");
    let writes = tasks * rounds;
    eprintln!("{calls} script calls and {messages} messages for {writes} writes");
    assert_eq!(
        messages, 0,
        "grants to the client's own waiters are handed over"
    );
    // A write is its refused, queueing attempt and its release, which hands the lock to the
    // next writer (no claim): about 2 calls.
    assert!(
        calls <= 2 * writes + writes / 8,
        "{calls} script calls for {writes} writes"
    );
    client.shutdown().await.unwrap();
}

/// While another client holds the write lock, eight writers of one client arrive one by one:
/// each asks once (or twice, the first, as it starts listening) and then waits without asking,
/// and all get the lock, one at a time, once the holder lets go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_writers_wait_without_asking() {
    support::init_tracing();
    let server = Server::start();
    let [holder, waiting] = support::clients(&server).await;
    let name = unique_name("rw-queued");
    let held = holder
        .read_write_lock(&name)
        .unwrap()
        .write()
        .lock()
        .await
        .unwrap();
    let inside = Arc::new(AtomicBool::new(false));
    let writer = |inside: Arc<AtomicBool>| {
        let rw = waiting
            .read_write_lock(&name)
            .unwrap()
            .with_owner(Owner::new());
        tokio::spawn(async move {
            let guard = rw.write().lock().await.unwrap();
            assert!(!inside.swap(true, Ordering::SeqCst), "two writers at once");
            tokio::time::sleep(Duration::from_millis(2)).await;
            inside.store(false, Ordering::SeqCst);
            guard.unlock().await.unwrap();
        })
    };
    let before = script_calls(&server);
    let mut writers = Vec::new();
    for _ in 0..8 {
        writers.push(writer(inside.clone()));
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    // Longer than the writer's nap would be without a holder's lease to wait for.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let asked = script_calls(&server) - before;
    let rw = waiting.read_write_lock(&name).unwrap();
    assert_eq!(queued(&server, rw.key()).len(), 8, "every writer queued");
    assert!(asked <= 9, "8 queued writers asked {asked} times");
    held.unlock().await.unwrap();
    for done in writers {
        tokio::time::timeout(Duration::from_secs(5), done)
            .await
            .expect("every writer got the lock")
            .unwrap();
    }
    assert!(!support::exists(&server, rw.key()), "left behind");
    assert!(!queue_left(&server, rw.key()), "queue left behind");
    holder.shutdown().await.unwrap();
    waiting.shutdown().await.unwrap();
}

/// How many shared read holds of this lock are on the server.
fn shares_on_server(server: &Server, key: &str) -> u64 {
    let fields: Vec<String> = redis::cmd("HKEYS")
        .arg(key)
        .query(&mut server.conn())
        .unwrap();
    fields.iter().filter(|f| f.contains(":readers-")).count() as u64
}

/// A writer that arrives while its own client's readers share the lock queues; the last
/// reader's release hands it the lock in its reply (no message, no claim).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_behind_its_own_clients_readers_is_handed_the_lock() {
    support::init_tracing();
    let server = Server::start();
    let client = client(&server).await;
    let name = unique_name("rw-after-shares");
    let rw = client.read_write_lock(&name).unwrap();
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let rw = rw.clone();
            tokio::spawn(async move { rw.read().lock().await.unwrap() })
        })
        .collect();
    let mut guards = Vec::new();
    for reader in readers {
        guards.push(reader.await.unwrap());
    }
    assert!(
        shares_on_server(&server, rw.key()) > 0,
        "the readers share a hold"
    );
    let writer = {
        let rw = rw.clone();
        tokio::spawn(async move { rw.write().lock().await.unwrap() })
    };
    let queued_up = support::eventually_async(Duration::from_secs(2), || async {
        queued(&server, rw.key()).len() == 1
    })
    .await;
    assert!(queued_up, "the writer did not queue");
    // Its attempt once it listens (every waiter's first wait makes one) is over by then.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!writer.is_finished(), "the writer got in beside readers");
    // Readers that came after a share's grant ask for the next one: each share's last release
    // is a call at most (releases in flight at once go out together), and the last hands the
    // lock over; a claim would be one more.
    let shares = shares_on_server(&server, rw.key());
    let before = (script_calls(&server), published(&server));
    let released = Instant::now();
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    let guard = tokio::time::timeout(Duration::from_secs(2), writer)
        .await
        .expect("the last reader handed the lock over")
        .unwrap();
    let after = released.elapsed();
    assert_eq!(
        published(&server) - before.1,
        0,
        "a message to our own client"
    );
    let calls = script_calls(&server) - before.0;
    assert!(
        (1..=shares).contains(&calls),
        "{calls} calls: more than the releases of the {shares} share(s) (a claim?)"
    );
    assert!(
        after < Duration::from_millis(500),
        "granted after {after:?}"
    );
    let writer: String = server.conn().hget(rw.key(), "w").unwrap();
    assert!(writer.starts_with(&*client.id().to_string()), "{writer}");
    guard.unlock().await.unwrap();
    assert!(!support::exists(&server, rw.key()), "left behind");
    client.shutdown().await.unwrap();
}

/// Readers of a client queued behind its waiting writer: the writer goes first, and its
/// release hands the readers their (shared) hold in its reply.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_behind_local_writers_are_handed_the_lock() {
    support::init_tracing();
    let server = Server::start();
    let client = client(&server).await;
    let name = unique_name("rw-readers-after");
    let rw = client.read_write_lock(&name).unwrap();
    let first = rw.write().lock().await.unwrap();
    let second = {
        let rw = rw.clone();
        tokio::spawn(async move { rw.write().lock().await.unwrap() })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let rw = rw.clone();
            tokio::spawn(async move { rw.read().lock().await.unwrap() })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        readers.iter().all(|r| !r.is_finished()),
        "a reader beside the writer"
    );
    first.unlock().await.unwrap();
    let second = tokio::time::timeout(Duration::from_secs(2), second)
        .await
        .expect("the waiting writer goes before the readers")
        .unwrap();
    assert!(
        readers.iter().all(|r| !r.is_finished()),
        "a reader beside the writer"
    );
    let before = (script_calls(&server), published(&server));
    second.unlock().await.unwrap();
    let mut guards = Vec::new();
    for reader in readers {
        guards.push(
            tokio::time::timeout(Duration::from_secs(2), reader)
                .await
                .expect("the readers were handed the lock")
                .unwrap(),
        );
    }
    assert_eq!(
        published(&server) - before.1,
        0,
        "a message to our own client"
    );
    let calls = script_calls(&server) - before.0;
    assert_eq!(
        calls, 1,
        "the release that hands the lock over, and no claim"
    );
    for guard in guards {
        guard.unlock().await.unwrap();
    }
    client.shutdown().await.unwrap();
}

/// Owner A holds the write lock; owner B (same client) waits for it; A takes the write lock
/// again (reentrant): it is granted at once, past the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reentrant_write_does_not_queue() {
    let server = Server::start();
    let c = client(&server).await;
    let name = unique_name("rw-reenter-queue");
    let a = c.read_write_lock(&name).unwrap().with_owner(Owner::new());
    let b = c.read_write_lock(&name).unwrap().with_owner(Owner::new());
    let g1 = a.write().lock().await.unwrap();
    let bw = tokio::spawn(async move {
        let g = b.write().lock().await.unwrap();
        g.unlock().await.unwrap();
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t = Instant::now();
    let g2 = a.write().lock().await.unwrap();
    let took = t.elapsed();
    g2.unlock().await.unwrap();
    g1.unlock().await.unwrap();
    bw.await.unwrap();
    assert!(
        took < Duration::from_millis(300),
        "reentrant write took {took:?}"
    );
}

/// Owner A reads in its own name (fixed lease); owner B waits to write; A asks to write:
/// WouldDeadlock at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_upgrade_is_refused_at_once_while_a_writer_waits() {
    let server = Server::start();
    let c = client(&server).await;
    let name = unique_name("rw-upgrade-queue");
    let a = c.read_write_lock(&name).unwrap().with_owner(Owner::new());
    let b = c.read_write_lock(&name).unwrap().with_owner(Owner::new());
    let r = a
        .read()
        .try_lock_with(LockOptions::new().lease(Duration::from_secs(30)))
        .await
        .unwrap()
        .unwrap();
    let bw = tokio::spawn(async move {
        let g = b.write().lock().await.unwrap();
        g.unlock().await.unwrap();
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let t = Instant::now();
    let e = a.write().lock().await;
    let took = t.elapsed();
    assert!(matches!(e, Err(Error::WouldDeadlock { .. })));
    r.unlock().await.unwrap();
    bw.await.unwrap();
    assert!(took < Duration::from_millis(300), "took {took:?}");
}

/// Eight writers of different owners of one client arrive together at a free lock, 200 times:
/// every round ends quickly (nobody waits out a nap for a grant it was not told of).
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn writers_arriving_together_take_turns_quickly() {
    let server = Server::start();
    let c = client(&server).await;
    let mut slow = 0;
    let mut worst = Duration::ZERO;
    for _ in 0..200 {
        let name = unique_name("rw-together");
        let barrier = Arc::new(tokio::sync::Barrier::new(8));
        let t = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let l = c.read_write_lock(&name).unwrap().with_owner(Owner::new());
            let barrier = barrier.clone();
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                let g = l.write().lock().await.unwrap();
                g.unlock().await.unwrap();
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let took = t.elapsed();
        worst = worst.max(took);
        if took > Duration::from_millis(500) {
            slow += 1;
        }
    }
    assert_eq!(slow, 0, "rounds over 500 ms; worst {worst:?}");
}

/// A writer future parked unpolled keeps its place only for the place's life (a few seconds
/// past its last attempt): the readers behind it then come in.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_parked_writer_holds_readers_back_for_its_place_life_at_most() {
    let server = Server::start();
    let [c, other] = support::clients(&server).await;
    let name = unique_name("rw-parked");
    // Another client reads: the writer below is refused and queues.
    let remote = other
        .read_write_lock(&name)
        .unwrap()
        .read()
        .lock()
        .await
        .unwrap();
    let w = c.read_write_lock(&name).unwrap().with_owner(Owner::new());
    let mut parked = Box::pin(async move { w.write().lock().await });
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut parked)
            .await
            .is_err()
    );
    let reader = c.read_write_lock(&name).unwrap().with_owner(Owner::new());
    let asked = Instant::now();
    let got = tokio::time::timeout(Duration::from_secs(8), reader.read().lock()).await;
    let waited = asked.elapsed();
    assert!(
        got.is_ok(),
        "the reader was held back past the parked writer's place"
    );
    assert!(
        waited > Duration::from_secs(1),
        "the reader passed a live writer ({waited:?})"
    );
    drop(got);
    drop(parked);
    remote.unlock().await.unwrap();
    c.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}

/// A worker process (run by the tests above, never on its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn rwlock_worker() {
    let Ok(mode) = std::env::var("REDLEASE_RW") else {
        return;
    };
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("worker needs {k}"));
    let client = Client::builder(var("REDLEASE_RW_URL"))
        .claim_lease(CLAIM)
        .build()
        .await
        .unwrap();
    let name = var("REDLEASE_RW_NAME");
    let rw = client.read_write_lock(&name).unwrap();
    let (inside, counter) = (format!("{name}:inside"), format!("{name}:counter"));
    match mode.as_str() {
        "mix" => {
            let rounds: usize = var("REDLEASE_RW_ROUNDS").parse().unwrap();
            for i in 0..rounds {
                let write = i % 5 == 0;
                let (guard, weight): (Unlock, i64) = match write {
                    true => (
                        Box::pin(rw.write().lock().await.unwrap().unlock()),
                        1_000_000,
                    ),
                    false => (Box::pin(rw.read().lock().await.unwrap().unlock()), 1),
                };
                let now: i64 = client
                    .query(redis::cmd("INCRBY").arg(&inside).arg(weight))
                    .await
                    .unwrap();
                assert!(
                    now == weight || (!write && now < 1_000_000),
                    "{now} inside beside a {}",
                    if write { "write" } else { "read" }
                );
                if write {
                    let n: Option<u64> =
                        client.query(redis::cmd("GET").arg(&counter)).await.unwrap();
                    tokio::task::yield_now().await;
                    let _: () = client
                        .query(redis::cmd("SET").arg(&counter).arg(n.unwrap_or(0) + 1))
                        .await
                        .unwrap();
                } else {
                    tokio::task::yield_now().await;
                }
                let _: i64 = client
                    .query(redis::cmd("DECRBY").arg(&inside).arg(weight))
                    .await
                    .unwrap();
                guard.await.unwrap();
            }
        }
        "wait" => {
            // Killed by the parent while it waits; the bound only ends an orphan.
            let _ = tokio::time::timeout(Duration::from_secs(60), rw.write().lock()).await;
        }
        other => panic!("unknown worker mode {other}"),
    }
    client.shutdown().await.unwrap();
}

/// A call that drops an expired reader and then grants the lock to another wait of the same
/// owner: the grant must see the reader gone. It read the reader's stale fields back, wrote
/// them again without counting the reader, and the owner's claim then re-entered that
/// uncounted hold: once the counted readers left, the key was deleted and a writer came in
/// while the owner still read.
#[test]
fn a_reader_dropped_as_expired_stays_dropped_when_its_owner_is_granted() {
    let server = Server::start();
    let key = unique_name("rw-queue-expired-reader");
    let hget = |f: &str| -> Option<String> { server.conn().hget(&key, f).unwrap() };
    // A writer holds; queued behind it: x:1's first wait, y:1, a writer w:1, x:1's second wait.
    assert_eq!(call(&server, &key, "write", "h:1", 30_000, 0, "", "").0, 1);
    assert!(call(&server, &key, "read", "x:1", 100, 5_000, "x:1#1", "").0 <= -2);
    assert!(call(&server, &key, "read", "y:1", 30_000, 5_000, "y:1#1", "").0 <= -2);
    assert!(call(&server, &key, "write", "w:1", 30_000, 5_000, "w:1#1", "").0 <= -2);
    assert!(call(&server, &key, "read", "x:1", 100, 5_000, "x:1#2", "").0 <= -2);
    // The writer's release grants both first readers (messages: other clients); the writer
    // behind them waits, and x:1's second wait behind it.
    call(&server, &key, "unwrite", "h:1", 0, 0, "", "h");
    assert_eq!(
        call(&server, &key, "read", "x:1", 100, 5_000, "x:1#1", "").0,
        1
    );
    assert_eq!(
        call(&server, &key, "read", "y:1", 30_000, 5_000, "y:1#1", "").0,
        1
    );
    // x:1's 100 ms read runs out; then w:1 withdraws, which drops it and grants x:1#2.
    std::thread::sleep(Duration::from_millis(300));
    call(&server, &key, "withdraw", "w:1", 0, 0, "w:1#1", "w");
    assert_eq!(hget("rn").as_deref(), Some("2"), "y:1 and x:1's grant");
    assert_eq!(
        hget("r:x:1").as_deref(),
        Some("-1"),
        "x:1 holds a grant only"
    );
    // x:1#2 claims it; the readers leave; the lock is free for a writer only then.
    assert_eq!(
        call(&server, &key, "read", "x:1", 30_000, 5_000, "x:1#2", "").0,
        1
    );
    assert_eq!(call(&server, &key, "unread", "y:1", 0, 0, "", "y").0, 0);
    assert!(
        call(&server, &key, "write", "z:1", 30_000, 0, "", "").0 <= -2,
        "a writer came in while x:1 reads"
    );
    assert_eq!(call(&server, &key, "unread", "x:1", 0, 0, "", "x").0, 0);
    assert_eq!(call(&server, &key, "write", "z:1", 30_000, 0, "", "").0, 1);
    call(&server, &key, "unwrite", "z:1", 0, 0, "", "z");
    assert!(!support::exists(&server, &key), "left behind");
    assert!(!queue_left(&server, &key), "queue left behind");
}
