//! Leader election: three "instances" (clients, as three processes would have) campaign for
//! one election; the leader writes to a fenced resource with its term, an observer prints
//! every change, and the leaders step down in turn (resigning, or losing the lease when an
//! "operator" deletes the lock), so each standby takes over with a greater term.
//!
//! `REDIS_URL=redis://127.0.0.1:6379 cargo run --example election`

use std::time::Duration;

use futures_util::StreamExt;
use redlease::{Client, LeadOptions, Leading};

/// The resource: refuses a write whose term is below one it already accepted (the check a
/// database or storage API does with the term it is given).
const FENCED_WRITE: &str = "\
if tonumber(ARGV[1]) < tonumber(redis.call('GET', KEYS[1]) or '0') then return 0 end
redis.call('SET', KEYS[1], ARGV[1])
return 1";

async fn write(client: &Client, term: u64) -> redlease::Result<bool> {
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(FENCED_WRITE)
        .arg(1)
        .arg("example:election:resource")
        .arg(term);
    Ok(client.query::<i64>(&cmd).await? == 1)
}

#[tokio::main]
async fn main() -> redlease::Result<()> {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let name = "example:scheduler";
    let connect = || async {
        Client::builder(&url)
            .watchdog_lease(Duration::from_secs(2))
            .build()
            .await
    };

    // The observer: the state now, then every change, woken by the election's messages.
    let watcher = connect().await?;
    let mut changes = watcher.election(name)?.observe();
    let observer = tokio::spawn(async move {
        while let Some(change) = changes.next().await {
            match change {
                Ok(change) => match (&change.leader, change.cause) {
                    (Some(leader), cause) => println!(
                        "[observer] rev {} {:?}: {} leads in term {} (pid {})",
                        change.revision, cause, leader.value, leader.term, leader.process.pid
                    ),
                    (None, cause) => {
                        println!("[observer] rev {} {:?}: no leader", change.revision, cause)
                    }
                },
                Err(e) => println!("[observer] {e}"),
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Three instances, each running the same service loop on whichever of them leads.
    let mut instances = Vec::new();
    for i in 1..=3 {
        let client = connect().await?;
        let election = client.election(name)?;
        instances.push(tokio::spawn(async move {
            let me = format!("instance-{i}");
            let options = LeadOptions::new().rejoin(true);
            let body = |leading: Leading| {
                let (client, me) = (client.clone(), me.clone());
                async move { serve(&client, &me, leading).await }
            };
            election
                .lead_with(options, &format!("instance-{i}"), body)
                .await
        }));
    }

    // An operator deletes the lock under the second leader: its lease is lost, its body is
    // cancelled, and a standby takes over (the first and third leaders resign by themselves).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let operator = connect().await?;
    println!(
        "[operator] force unlock: {}",
        operator.lock(name)?.force_unlock().await?
    );

    for instance in instances {
        match tokio::time::timeout(Duration::from_secs(20), instance).await {
            Ok(Ok(Ok(()))) => {}
            other => println!("an instance ended with {other:?}"),
        }
    }
    observer.abort();
    Ok(())
}

/// What the leader does: three rounds of fenced writes, then step down (so the example ends).
async fn serve(client: &Client, me: &str, leading: Leading) {
    println!("[{me}] leading in term {}", leading.term());
    for round in 1..=3 {
        match write(client, leading.term()).await {
            Ok(true) => println!("[{me}] round {round}: wrote with term {}", leading.term()),
            Ok(false) => {
                println!("[{me}] the resource refused term {}: stop", leading.term());
                return;
            }
            Err(e) => println!("[{me}] {e}"),
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    println!("[{me}] done; resigning so the next instance takes over at once");
}
