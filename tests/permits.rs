//! `PermitSemaphore`: permits with an id and a lease. A crashed holder's permit comes back when
//! its lease ends; permits are never over-granted; live permits are renewed and report loss;
//! a release wakes a waiter at once; cancelled acquisitions leave nothing.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use redlease::LockOptions;
use support::{Server, clients, unique_name, until_subscribed};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_holders_permit_comes_back_after_its_lease() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("permits-crash");
    let semaphore = a.permit_semaphore(&name).unwrap();
    assert!(semaphore.try_set_permits(1).await.unwrap());
    assert!(!semaphore.try_set_permits(5).await.unwrap());
    let once = LockOptions::new().wait(Duration::ZERO);
    let taken = Instant::now();
    let permit = semaphore
        .try_acquire_with(once.lease(Duration::from_millis(300)))
        .await
        .unwrap()
        .unwrap();
    std::mem::forget(permit); // the holder crashes
    let other = b.permit_semaphore(&name).unwrap();
    assert!(
        other.try_acquire().await.unwrap().is_none(),
        "two permits out of one"
    );
    let permit = other
        .try_acquire_with(LockOptions::new().wait(Duration::from_secs(2)))
        .await
        .unwrap()
        .expect("the crashed holder's permit never came back");
    let took = taken.elapsed();
    assert!(
        took >= Duration::from_millis(290) && took < Duration::from_millis(600),
        "{took:?}"
    );
    assert_eq!(other.available().await.unwrap(), 0);
    permit.release().await.unwrap();
    assert_eq!(other.available().await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_never_over_granted_and_a_release_wakes_a_waiter() {
    support::init_tracing();
    let server = Server::start();
    let [a, b] = clients(&server).await;
    let name = unique_name("permits-many");
    a.permit_semaphore(&name)
        .unwrap()
        .set_permits(2)
        .await
        .unwrap();
    let holders = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let semaphore = [&a, &b][i % 2].permit_semaphore(&name).unwrap();
            let (holders, most) = (holders.clone(), most.clone());
            tokio::spawn(async move {
                for _ in 0..4 {
                    let permit = semaphore.acquire().await.unwrap();
                    let now = holders.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    holders.fetch_sub(1, Ordering::SeqCst);
                    permit.release().await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .expect("a task starved")
            .unwrap();
    }
    assert_eq!(
        most.load(Ordering::SeqCst),
        2,
        "more than 2 holders, or never 2"
    );

    // A release wakes a waiter of another client at once (its nap would be a second).
    let semaphore = a.permit_semaphore(&name).unwrap();
    let (p1, p2) = (
        semaphore.acquire().await.unwrap(),
        semaphore.acquire().await.unwrap(),
    );
    let waiting = b.permit_semaphore(&name).unwrap();
    let task = tokio::spawn(async move {
        let permit = waiting.acquire().await.unwrap();
        (Instant::now(), permit)
    });
    let channel = format!("{}:released", semaphore.key());
    assert!(until_subscribed(&server, &channel, 1).await);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    p1.release().await.unwrap();
    let (at, permit) = task.await.unwrap();
    assert!(
        at.duration_since(released) < Duration::from_millis(100),
        "woken {:?} after the release",
        at.duration_since(released)
    );
    drop(permit); // released in the background
    p2.release().await.unwrap();
    let back = support::eventually_async(Duration::from_secs(2), || async {
        semaphore.available().await.unwrap() == 2
    })
    .await;
    assert!(back, "a dropped permit was not released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_permits_are_renewed_and_report_loss() {
    support::init_tracing();
    let server = Server::start();
    let a = support::client_with_lease(&server, Duration::from_millis(600)).await;
    let name = unique_name("permits-renew");
    let semaphore = a.permit_semaphore(&name).unwrap();
    semaphore.set_permits(1).await.unwrap();
    let permit = semaphore.acquire().await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        semaphore.available().await.unwrap(),
        0,
        "a renewed permit expired"
    );
    assert!(!permit.is_lost());
    redis::cmd("HDEL")
        .arg(semaphore.key())
        .arg(format!("p:{}", permit.id()))
        .query::<()>(&mut server.conn())
        .unwrap();
    let lost = tokio::time::timeout(Duration::from_millis(600), permit.lost()).await;
    assert!(lost.is_ok(), "lost() never resolved");
    assert!(permit.release().await.unwrap_err().is_lease_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_acquisitions_leave_nothing() {
    support::init_tracing();
    let server = Server::start();
    let client = support::client(&server).await;
    let name = unique_name("permits-cancel");
    let semaphore = client.permit_semaphore(&name).unwrap();
    assert!(client.permit_semaphore("").unwrap_err().is_invalid_input());
    assert!(
        semaphore
            .try_acquire_with(LockOptions::new().lease(Duration::ZERO))
            .await
            .unwrap_err()
            .is_invalid_input()
    );
    // Never set: no permits; a wait ends empty-handed.
    let none = semaphore
        .try_acquire_with(LockOptions::new().wait(Duration::from_millis(100)))
        .await
        .unwrap();
    assert!(none.is_none());
    semaphore.set_permits(2).await.unwrap();
    for i in 0..150u64 {
        let cut = Duration::from_micros(i * 11 % 500);
        if let Ok(Ok(permit)) = tokio::time::timeout(cut, semaphore.acquire()).await {
            permit.release().await.unwrap();
        }
    }
    let settled = support::eventually_async(Duration::from_secs(3), || async {
        semaphore.available().await.unwrap() == 2
    })
    .await;
    assert!(
        settled,
        "permits leaked: {}",
        semaphore.available().await.unwrap()
    );
}

/// A permit granted while the client shuts down: the shutdown's drain has passed and will not
/// give it back, so the acquisition gives it back itself and answers `Shutdown`. Before, it
/// answered a permit nobody renewed or released, out until its lease ran out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_granted_during_shutdown_is_given_back() {
    let server = Server::start();
    let client = support::client(&server).await;
    let semaphore = client
        .permit_semaphore(&unique_name("shutdown-grant"))
        .unwrap();
    assert!(semaphore.try_set_permits(1).await.unwrap());
    // Once first, so the client has learnt what a first acquisition learns.
    semaphore.acquire().await.unwrap().release().await.unwrap();
    server.pause();
    let acquiring = {
        let semaphore = semaphore.clone();
        tokio::spawn(async move { semaphore.acquire().await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let shutdown = {
        let client = client.clone();
        tokio::spawn(async move { client.shutdown().await })
    };
    // Resumed once the shutdown has begun (new acquisitions are refused).
    let mut begun = false;
    for _ in 0..500 {
        // Answers at once when shut down; nothing to renew otherwise.
        let probe = tokio::time::timeout(Duration::from_millis(20), client.renew_now()).await;
        if matches!(&probe, Ok(Err(e)) if e.is_shutdown()) {
            begun = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(begun, "the shutdown began");
    server.resume();
    let acquired = tokio::time::timeout(Duration::from_secs(10), acquiring)
        .await
        .expect("the acquisition returns")
        .unwrap();
    assert!(
        matches!(&acquired, Err(e) if e.is_shutdown()),
        "granted during shutdown: {:?}",
        acquired.as_ref().map(|_| "a permit")
    );
    let _ = tokio::time::timeout(Duration::from_secs(10), shutdown).await;
    let other = support::client(&server).await;
    let available = other.permit_semaphore(semaphore.name()).unwrap();
    assert_eq!(
        available.available().await.unwrap(),
        1,
        "the permit is back"
    );
}

/// A permit's acquisition and release whose connection drops (the proxy cuts the request before
/// the server, `cut_at`, or forwards it and drops the reply, `cut_after`) are sent again: the
/// acquisition takes its permit once, the release answers `Ok` and the permit is back at once.
/// Before, each failed with `Error::Redis`; a release that had run was reported failed, and one
/// that had not left the permit out for its whole lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_call_whose_connection_drops_is_sent_again() {
    let server = Server::start();
    let proxy = support::proxy::Proxy::start(server.port()).await;
    let client = support::client_at(proxy.url(), |b| b).await;
    let semaphore = client
        .permit_semaphore(&unique_name("permits-cut"))
        .unwrap();
    assert!(semaphore.try_set_permits(1).await.unwrap());
    let leased = LockOptions::new().lease(Duration::from_secs(60));
    for forwarded in [false, true] {
        proxy.cut_op("acquire", forwarded);
        let permit = semaphore.acquire_with(leased).await;
        let permit = permit.unwrap_or_else(|e| panic!("forwarded {forwarded}: acquire: {e}"));
        proxy
            .assert_cut(&format!("acquisition, forwarded {forwarded}"))
            .await;
        let available = semaphore.available().await.unwrap();
        assert_eq!(available, 0, "forwarded {forwarded}");
        proxy.cut_op("release", forwarded);
        let released = permit.release().await;
        assert!(
            released.is_ok(),
            "forwarded {forwarded}: release: {released:?}"
        );
        proxy
            .assert_cut(&format!("release, forwarded {forwarded}"))
            .await;
        let available = semaphore.available().await.unwrap();
        assert_eq!(available, 1, "forwarded {forwarded}");
    }
}
