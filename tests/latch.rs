//! `CountDownLatch`: waiters on other clients open at the count-down that reaches zero (by its
//! message, not by their nap), the count is exact under concurrent count-downs, and bad input
//! is a typed error.

mod support;

use redlease::LockOptions;
use std::time::{Duration, Instant};

use support::{Server, clients, set_string, unique_name, until_subscribed};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_open_when_the_count_reaches_zero() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("latch");
    let latch = a.count_down_latch(&name).unwrap();
    assert!(
        latch
            .try_wait_with(LockOptions::new().wait(Duration::from_millis(10)))
            .await
            .unwrap(),
        "a latch never set is open"
    );
    assert!(latch.try_set_count(3).await.unwrap());
    assert!(!latch.try_set_count(5).await.unwrap(), "set while counting");
    assert_eq!(latch.count().await.unwrap(), 3);
    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let latch = b.count_down_latch(&name).unwrap();
            tokio::spawn(async move {
                latch.wait().await.unwrap();
                Instant::now()
            })
        })
        .collect();
    let channel = format!("{}:zero", latch.key());
    assert!(until_subscribed(&server, &channel, 1).await, "nobody waits");
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(latch.count_down().await.unwrap(), 2);
    assert_eq!(latch.count_down().await.unwrap(), 1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(waiters.iter().all(|w| !w.is_finished()), "opened at 1");
    let opened = Instant::now();
    assert_eq!(latch.count_down().await.unwrap(), 0);
    for waiter in waiters {
        let at = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        let latency = at.duration_since(opened);
        assert!(
            latency < Duration::from_millis(100),
            "woken {latency:?} after the count reached zero (nap is 1 s)"
        );
    }
    assert_eq!(latch.count_down().await.unwrap(), 0, "counted below zero");
    assert!(!support::exists(&server, latch.key()));
    assert!(
        until_subscribed(&server, &channel, 0).await,
        "subscription left behind"
    );
    // It can be set again once open.
    assert!(latch.try_set_count(1).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_count_downs_are_exact_and_a_wait_times_out() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("latch-many");
    let latch = a.count_down_latch(&name).unwrap();
    assert!(latch.try_set_count(40).await.unwrap());
    let started = Instant::now();
    assert!(
        !latch
            .try_wait_with(LockOptions::new().wait(Duration::from_millis(200)))
            .await
            .unwrap(),
        "opened while counting"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(200) && waited < Duration::from_millis(600),
        "{waited:?}"
    );
    let tasks: Vec<_> = (0..39)
        .map(|i| {
            let latch = [&a, &b][i % 2].count_down_latch(&name).unwrap();
            tokio::spawn(async move { latch.count_down().await.unwrap() })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(latch.count().await.unwrap(), 1);
    let cancelled = tokio::time::timeout(Duration::from_millis(100), latch.wait()).await;
    assert!(cancelled.is_err());
    assert_eq!(
        latch.count().await.unwrap(),
        1,
        "a cancelled wait changed the count"
    );
    assert_eq!(latch.count_down().await.unwrap(), 0);
    assert!(
        latch
            .try_wait_with(LockOptions::new().wait(Duration::from_secs(1)))
            .await
            .unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_typed_error() {
    support::init_tracing();
    let server = Server::start();
    let client = support::client(&server).await;
    assert!(client.count_down_latch("").unwrap_err().is_invalid_input());
    let latch = client.count_down_latch(&unique_name("latch-bad")).unwrap();
    assert!(latch.try_set_count(0).await.unwrap_err().is_invalid_input());
    assert!(!support::exists(&server, latch.key()));
    set_string(&server, latch.key(), "-1");
    let err = latch.count_down().await.unwrap_err();
    assert!(err.to_string().contains("positive integer"), "{err}");
    assert_eq!(
        support::get_string(&server, latch.key()).as_deref(),
        Some("-1"),
        "changed a bad value"
    );
    redis::cmd("DEL")
        .arg(latch.key())
        .query::<()>(&mut server.conn())
        .unwrap();
    redis::cmd("LPUSH")
        .arg(latch.key())
        .arg("x")
        .query::<()>(&mut server.conn())
        .unwrap();
    assert!(latch.try_set_count(1).await.unwrap_err().is_wrong_type());
    assert!(latch.count().await.unwrap_err().is_wrong_type());
}

/// A latch set again at once after it opened (here in the same transaction as the count-down
/// that opened it, so before any waiter can look): every waiter of the round that opened is
/// released. They used to read the new round's count after the message and sleep on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_latch_set_again_at_once_still_opens_for_its_waiters() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("latch-again");
    let latch = a.count_down_latch(&name).unwrap();
    assert!(latch.try_set_count(1).await.unwrap());
    let waiter = {
        let latch = b.count_down_latch(&name).unwrap();
        tokio::spawn(async move { latch.wait().await })
    };
    let channel = format!("{}:zero", latch.key());
    assert!(until_subscribed(&server, &channel, 1).await, "nobody waits");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let script = include_str!("../lua/latch.lua");
    let mut pipe = redis::pipe();
    pipe.atomic();
    for (op, n) in [("count_down", 1), ("try_set", 2)] {
        pipe.cmd("EVAL")
            .arg(script)
            .arg(2)
            .arg(latch.key())
            .arg(&channel)
            .arg(op)
            .arg(n);
    }
    let (left, set): (i64, i64) = pipe.query(&mut server.conn()).unwrap();
    assert_eq!((left, set), (0, 1));
    let opened = tokio::time::timeout(Duration::from_secs(3), waiter).await;
    assert!(
        matches!(opened, Ok(Ok(Ok(())))),
        "the waiter slept through the opening"
    );
    assert_eq!(latch.count().await.unwrap(), 2, "the new round");
}

/// A waiter whose look at the count has its connection dropped (a server restart, a killed
/// connection: here a proxy cuts the `GET`) looks again on the new connection and still opens
/// when the count reaches zero. Before, `wait()` failed with `Error::Redis`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_whose_connection_drops_goes_on() {
    let server = Server::start();
    let proxy = support::proxy::Proxy::start(server.port()).await;
    let waiter = support::client_at(proxy.url(), |b| b).await;
    let [counter] = clients(&server).await;
    let name = unique_name("latch-cut");
    let latch = counter.count_down_latch(&name).unwrap();
    assert!(latch.try_set_count(1).await.unwrap());
    proxy.cut_at("$3\r\nGET\r\n", 0);
    let waiting = {
        let latch = waiter.count_down_latch(&name).unwrap();
        tokio::spawn(async move { latch.wait().await })
    };
    let done = tokio::time::timeout(Duration::from_secs(1), proxy.cut_done()).await;
    assert!(done.is_ok(), "the look was not cut");
    tokio::time::sleep(Duration::from_millis(100)).await;
    latch.count_down().await.unwrap();
    let opened = tokio::time::timeout(Duration::from_secs(5), waiting).await;
    assert!(matches!(opened, Ok(Ok(Ok(())))), "{opened:?}");
}
