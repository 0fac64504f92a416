//! An acquisition's request against a real server that answers nothing: the request arms no
//! timer of its own (`lock/attempt.rs`), and its background completion, once its caller gave
//! up, still ends by its lease (`FinishOnDrop::expiring`).

use std::time::{Duration, Instant};

use super::TestServer;
use crate::{Client, LockOptions};

/// The request arms no timer of its own: a caller that stops waiting leaves it to finish in
/// the background, and there it still ends by its lease on a server that answers nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_request_ends_by_its_lease_on_a_server_that_never_answers() -> crate::Result<()>
{
    let Ok(server) = TestServer::start() else {
        eprintln!("no redis-server: skipped");
        return Ok(());
    };
    let timeout = Duration::from_millis(200);
    let client = Client::builder(server.url())
        .timeout(timeout)
        .build()
        .await?;
    let lock = client.lock("abandoned")?;
    // Connected, the script loaded.
    let Some(first) = lock.try_lock().await? else {
        panic!("the lock is free");
    };
    first.unlock().await?;
    let background = &client.inner.background;
    let idle = Instant::now() + Duration::from_secs(5);
    while background.in_flight() > 0 && Instant::now() < idle {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        background.in_flight(),
        0,
        "nothing left from the first hold"
    );

    // Every command now waits (far longer than the test: the server is killed at its end).
    let paused = redis::Client::open(server.url())
        .and_then(|c| c.get_connection())
        .and_then(|mut admin| {
            redis::cmd("CLIENT")
                .arg("PAUSE")
                .arg(60_000)
                .arg("ALL")
                .query::<()>(&mut admin)
        });
    assert!(paused.is_ok(), "CLIENT PAUSE: {paused:?}");
    let started = Instant::now();
    let lease = Duration::from_secs(1);
    let refused = lock.try_lock_with(LockOptions::new().lease(lease)).await;
    assert!(
        matches!(refused, Err(crate::Error::Timeout { .. })),
        "{refused:?}"
    );
    assert!(started.elapsed() < lease, "{:?}", started.elapsed());
    assert_eq!(
        background.in_flight(),
        1,
        "the request finishes in the background"
    );

    // Ended by its lease (1 s after it was sent), while the server still answers nothing.
    let mut ended = None;
    while started.elapsed() < Duration::from_millis(2_500) {
        if background.in_flight() == 0 {
            ended = Some(started.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let Some(ended) = ended else {
        panic!("the abandoned request outlived its lease");
    };
    assert!(ended >= lease, "ended before its lease: {ended:?}");
    assert!(
        ended < lease + Duration::from_secs(1),
        "ended late: {ended:?}"
    );
    Ok(())
}
