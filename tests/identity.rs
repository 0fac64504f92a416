//! Who holds a lock: every client announces its process, and `status` names it.

mod support;

use std::time::Duration;

use support::Server;

/// `status` names the holder's host, pid and program, not only its uuid.
#[tokio::test]
async fn status_names_the_process_that_holds_the_lock() {
    let server = Server::start();
    let [holder, viewer] = support::clients::<2>(&server).await;
    let guard = holder.lock("who").unwrap().lock().await.unwrap();
    let status = viewer.lock("who").unwrap().status().await.unwrap();
    assert_eq!(status.holders.len(), 1);
    let held = &status.holders[0];
    assert_eq!(held.holds, 1);
    assert!(held.field.starts_with(&holder.id().to_string()));
    let info = held.client.as_ref().expect("the holder announced itself");
    assert_eq!(info.id, holder.id().to_string());
    assert_eq!(info.pid, std::process::id());
    assert_eq!(info.host, gethostname());
    let program = std::env::current_exe().unwrap();
    assert_eq!(info.program, program.file_name().unwrap().to_string_lossy());
    assert!(info.started_ms > 0);
    assert_eq!(status.listening_clients, 0);
    // Two tasks of one client wait: one listening client.
    let waiters: Vec<_> = (0..2)
        .map(|_| support::spawn_waiter(viewer.lock("who").unwrap()))
        .collect();
    let lock = viewer.lock("who").unwrap();
    let listening = support::eventually_async(Duration::from_secs(5), || async {
        lock.status().await.unwrap().listening_clients == 1
    })
    .await;
    assert!(listening, "one client waits");
    guard.unlock().await.unwrap();
    support::join_within(waiters, Duration::from_secs(5), "the waiters get it").await;
    let free = viewer.lock("who").unwrap().status().await.unwrap();
    assert!(free.holders.is_empty() && free.owners.is_empty());
}

/// The announcement is a small key with a lease that the watchdog keeps alive, and shutdown
/// removes it.
#[tokio::test]
async fn the_announcement_lives_while_the_client_does() {
    let server = Server::start();
    let lease = Duration::from_millis(600);
    let client = support::client_with_lease(&server, lease).await;
    let key = format!("redlease:client:{}", client.id());
    assert!(support::exists(&server, &key));
    // Several of its TTLs later it is still there: the watchdog refreshes it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(support::exists(&server, &key), "the watchdog let it expire");
    let ttl = support::pttl(&server, &key);
    assert!(
        ttl > 0 && ttl <= 2_000,
        "a lease of a few periods, got {ttl} ms"
    );
    client.shutdown().await.unwrap();
    assert!(!support::exists(&server, &key), "shutdown withdraws it");
}

fn gethostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned()
}

/// `held_locks` lists the held locks by name (glob), not their fence counters or other keys.
#[tokio::test]
async fn held_locks_lists_what_is_held() {
    let server = Server::start();
    let client = support::client(&server).await;
    let a = client
        .lock("orders:1")
        .unwrap()
        .fenced(true)
        .lock()
        .await
        .unwrap();
    let b = client.lock("orders:2").unwrap().lock().await.unwrap();
    let c = client.lock("users:1").unwrap().lock().await.unwrap();
    support::set_string(&server, "redlease:{orders:9}:fence", "4");
    assert_eq!(
        client.held_locks("orders:*", 100).await.unwrap(),
        vec!["orders:1".to_owned(), "orders:2".to_owned()]
    );
    assert_eq!(client.held_locks("*", 100).await.unwrap().len(), 3);
    assert_eq!(
        client.held_locks("*", 2).await.unwrap().len(),
        2,
        "the limit holds"
    );
    for guard in [a, b, c] {
        guard.unlock().await.unwrap();
    }
    assert!(client.held_locks("*", 100).await.unwrap().is_empty());
}

/// A prefix is matched as written, glob characters included: `app[1]` is not the glob that
/// matches `app1` (which listed nothing), and `a*`'s scan does not count other prefixes'
/// locks against the limit.
#[tokio::test]
async fn held_locks_takes_the_prefix_literally() {
    let server = Server::start();
    let bracketed = support::client_with(&server, |b| b.prefix("app[1]")).await;
    let starred = support::client_with(&server, |b| b.prefix("a*")).await;
    let other = support::client_with(&server, |b| b.prefix("ab")).await;
    let held = bracketed.lock("x").unwrap().lock().await.unwrap();
    let mut others = Vec::new();
    for i in 0..3 {
        others.push(other.lock(&format!("y{i}")).unwrap().lock().await.unwrap());
    }
    let starred_held = starred.lock("z").unwrap().lock().await.unwrap();
    assert_eq!(bracketed.held_locks("*", 10).await.unwrap(), ["x"]);
    assert_eq!(starred.held_locks("*", 1).await.unwrap(), ["z"]);
    held.unlock().await.unwrap();
    starred_held.unlock().await.unwrap();
    for guard in others {
        guard.unlock().await.unwrap();
    }
}
