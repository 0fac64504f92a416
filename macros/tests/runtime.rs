//! `#[redlease::locked]` against a real redis-server: exclusion, the busy policies, retries, the
//! key built from the arguments, re-entry of nested calls, leases and a lost lease.

#[path = "../../tests/support/mod.rs"]
mod support;

use redlease::LockOptions;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use redlease::{Client, Error, HeldLock, locked};
use support::Server;

/// Every wait of these tests is bounded by this.
const WITHIN: Duration = Duration::from_secs(10);

async fn within<T>(fut: impl Future<Output = T>) -> T {
    tokio::time::timeout(WITHIN, fut)
        .await
        .expect("finished in time")
}

/// The hold counts in the lock hash at `key` (one per owner).
fn hold_counts(server: &Server, key: &str) -> Vec<u32> {
    redis::cmd("HVALS")
        .arg(key)
        .query(&mut server.conn())
        .expect("HVALS")
}

// ---------------------------------------------------------------- exclusion

#[locked(key = "counter:{name}", client = client)]
async fn bump_locked(client: &Client, name: &str, counter: &str) -> redlease::Result<()> {
    support::increment_unprotected(client, counter).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_exclude_each_other() {
    const CALLS: u64 = 24;
    let server = Server::start();
    let client = support::client(&server).await;
    let name = support::unique_name("excl");

    // The same increments without the lock lose updates: the test can tell.
    let bare = format!("{name}:bare");
    within(join_all(
        (0..CALLS).map(|_| support::increment_unprotected(&client, &bare)),
    ))
    .await;
    let lost = support::read_counter(&server, &bare);
    assert!(
        lost < CALLS,
        "unprotected increments all landed ({lost}); the race is not shown"
    );

    // Concurrently in one task (each call is its own owner), and from several tasks.
    let counter = format!("{name}:locked");
    let in_one_task = join_all((0..CALLS).map(|_| bump_locked(&client, &name, &counter)));
    for result in within(in_one_task).await {
        result.expect("locked call");
    }
    let tasks: Vec<_> = (0..CALLS)
        .map(|_| {
            let (client, name, counter) = (client.clone(), name.clone(), counter.clone());
            tokio::spawn(async move { bump_locked(&client, &name, &counter).await })
        })
        .collect();
    for task in tasks {
        within(task).await.expect("task").expect("locked call");
    }
    assert_eq!(support::read_counter(&server, &counter), 2 * CALLS);
    assert!(!support::exists(
        &server,
        &support::key_of(&format!("counter:{name}"))
    ));
}

// ---------------------------------------------------------------- busy = skip / error

/// What `nightly_report` returns when another owner holds the report's lock.
const SKIPPED: u32 = 999;

#[locked(key = "report:{day}", client = client, busy = skip(Ok(Some(SKIPPED + runs.load(Ordering::SeqCst)))))]
async fn nightly_report(
    client: Client,
    day: &str,
    runs: &AtomicU32,
) -> redlease::Result<Option<u32>> {
    let _ = &client;
    Ok(Some(runs.fetch_add(1, Ordering::SeqCst) + 1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_returns_the_named_value_while_held_elsewhere() {
    let server = Server::start();
    let [holder, caller] = support::clients(&server).await;
    let day = support::unique_name("day");
    let runs = AtomicU32::new(0);

    let guard = holder
        .lock(&format!("report:{day}"))
        .unwrap()
        .lock()
        .await
        .unwrap();
    let skipped = within(nightly_report(caller.clone(), &day, &runs)).await;
    assert_eq!(
        skipped.expect("no error"),
        Some(SKIPPED),
        "the value named in `skip`"
    );
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "the body ran while the lock was held"
    );

    guard.unlock().await.unwrap();
    let ran = within(nightly_report(caller.clone(), &day, &runs)).await;
    assert_eq!(ran.expect("no error"), Some(1));
}

#[derive(Debug)]
enum ShopError {
    Lock(Error),
    OutOfStock(u32),
}

impl From<Error> for ShopError {
    fn from(e: Error) -> Self {
        ShopError::Lock(e)
    }
}

#[locked(key = "stock:{sku}", client = client, wait = "200ms", busy = error)]
async fn take_stock(client: &Client, sku: u32, amount: u32) -> Result<u32, ShopError> {
    if amount > 10 {
        return Err(ShopError::OutOfStock(sku));
    }
    Ok(10 - amount)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_error_returns_busy_through_from_and_body_errors_pass() {
    let server = Server::start();
    let [holder, caller] = support::clients(&server).await;
    let sku = 4711;

    let guard = holder
        .lock(&format!("stock:{sku}"))
        .unwrap()
        .lock()
        .await
        .unwrap();
    let start = Instant::now();
    let busy = within(take_stock(&caller, sku, 1)).await;
    let waited = start.elapsed();
    match busy {
        Err(ShopError::Lock(Error::Busy { name, waited })) => {
            assert_eq!(name, format!("stock:{sku}"));
            assert_eq!(waited, Duration::from_millis(200));
        }
        other => panic!("expected the busy timeout, got {other:?}"),
    }
    assert!(
        waited >= Duration::from_millis(190),
        "gave up after {waited:?}"
    );
    guard.unlock().await.unwrap();

    assert_eq!(
        within(take_stock(&caller, sku, 3)).await.expect("free now"),
        7
    );
    match within(take_stock(&caller, sku, 11)).await {
        Err(ShopError::OutOfStock(s)) => assert_eq!(s, sku),
        other => panic!("the body's own error should pass unchanged, got {other:?}"),
    }
    assert!(!support::exists(
        &server,
        &support::key_of(&format!("stock:{sku}"))
    ));
}

// ---------------------------------------------------------------- retries

#[locked(key = "job:{id}", client = client, retries = 3, pause = "60ms", busy = skip(Ok(false)))]
async fn job(client: &Client, id: &str, runs: &AtomicU32) -> redlease::Result<bool> {
    runs.fetch_add(1, Ordering::SeqCst);
    Ok(true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_try_again_after_each_pause() {
    let server = Server::start();
    let [holder, caller] = support::clients(&server).await;
    let id = support::unique_name("job");
    let runs = AtomicU32::new(0);
    let name = format!("job:{id}");

    // Held (fixed lease, so no renewal scripts) for longer than all tries: 1 + 3 attempts.
    let guard = holder
        .lock(&name)
        .unwrap()
        .lock_with(LockOptions::new().lease(Duration::from_secs(5)))
        .await
        .unwrap();
    let before = support::command_calls(&server, "evalsha");
    let start = Instant::now();
    let outcome = within(job(&caller, &id, &runs)).await.expect("no error");
    let took = start.elapsed();
    let attempts = support::command_calls(&server, "evalsha") - before;
    assert!(!outcome, "skipped");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(
        attempts, 4,
        "one try and three retries, one script call each"
    );
    assert!(
        took >= Duration::from_millis(180),
        "three pauses of 60 ms took {took:?}"
    );
    guard.unlock().await.unwrap();

    // Freed during the retries: a later try gets it and the body runs.
    let guard = holder
        .lock(&name)
        .unwrap()
        .lock_with(LockOptions::new().lease(Duration::from_secs(5)))
        .await
        .unwrap();
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(90)).await;
        guard.unlock().await.unwrap();
    });
    let outcome = within(job(&caller, &id, &runs)).await.expect("no error");
    within(release).await.unwrap();
    assert!(
        outcome,
        "a retry after the release should have run the body"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

// ---------------------------------------------------------------- key, lease, held

struct Order {
    id: u64,
    region: &'static str,
}

impl Order {
    fn region(&self) -> &str {
        self.region
    }
}

struct OrderService {
    client: Client,
    shop: &'static str,
}

impl OrderService {
    #[locked(key = "order:{self.shop}:{order.id}:{order.region()}:{{x}}", client = self.client, lease = "1500ms", held = held)]
    async fn pay(&self, order: &Order, server: &Server) -> redlease::Result<(String, i64, usize)> {
        let key = support::key_of(held.name());
        Ok((
            held.name().to_owned(),
            support::pttl(server, &key),
            support::owners(server, &key),
        ))
    }

    #[locked(key = "order:{order.id}", client = self.client, held = held, fenced = true)]
    async fn refund(&self, order: &Order, server: &Server) -> redlease::Result<(i64, Option<u64>)> {
        let ttl = support::pttl(server, &support::key_of(held.name()));
        Ok((ttl, held.fencing_token()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_is_built_from_the_arguments_and_leases_apply() {
    let server = Server::start();
    let service = OrderService {
        client: support::client(&server).await,
        shop: "north",
    };
    let order = Order {
        id: 42,
        region: "eu",
    };

    let (name, ttl, owners) = within(service.pay(&order, &server)).await.unwrap();
    assert_eq!(name, "order:north:42:eu:{x}");
    assert_eq!(
        owners,
        1,
        "the lock hash `{}` held by one owner",
        support::key_of(&name)
    );
    assert!(ttl > 0 && ttl <= 1500, "fixed lease of 1.5 s, PTTL {ttl}");
    assert!(
        !support::exists(&server, &support::key_of(&name)),
        "released after the body"
    );

    // No lease given: the watchdog's (30 s by default).
    let (ttl, first) = within(service.refund(&order, &server)).await.unwrap();
    assert!(ttl > 1500 && ttl <= 30_000, "watchdog lease, PTTL {ttl}");
    // `fenced = true`: each first acquisition gets a larger token.
    let (_, second) = within(service.refund(&order, &server)).await.unwrap();
    let (first, second) = (first.expect("a token"), second.expect("a token"));
    assert!(second > first, "tokens {first} then {second}");
}

// ---------------------------------------------------------------- nesting

#[locked(key = "account:{id}", client = client)]
async fn transfer(client: &Client, id: u32, server: &Server) -> redlease::Result<Vec<u32>> {
    audit(client, id, server).await
}

#[locked(key = "account:{id}", client = client, busy = error)]
async fn audit(client: &Client, id: u32, server: &Server) -> redlease::Result<Vec<u32>> {
    Ok(hold_counts(
        server,
        &support::key_of(&format!("account:{id}")),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_calls_reenter_and_others_are_kept_out() {
    let server = Server::start();
    let client = support::client(&server).await;
    let id = 7;

    // `audit` makes one attempt: it succeeds only by re-entering `transfer`'s hold.
    let counts = within(transfer(&client, id, &server))
        .await
        .expect("re-entered");
    assert_eq!(counts, vec![2], "one owner holding twice");
    assert!(!support::exists(&server, &support::key_of("account:7")));

    // A call that is not nested is another owner, even in the same task.
    let guard = client.lock("account:7").unwrap().lock().await.unwrap();
    let outside = within(audit(&client, id, &server)).await;
    assert!(
        matches!(outside, Err(Error::Busy { .. })),
        "a separate call should find the lock busy: {outside:?}"
    );
    guard.unlock().await.unwrap();
}

// ---------------------------------------------------------------- lost lease, static client

static SHARED: OnceLock<Client> = OnceLock::new();

fn shared() -> &'static Client {
    SHARED.get().expect("set by the test")
}

#[locked(key = "long:{name}", client = shared(), on_lost = cancel, held = held)]
async fn long_job(name: &str, server: &Server, finished: &AtomicU32) -> redlease::Result<()> {
    let _: &HeldLock = &held;
    // Someone deletes the lock under us; the next watchdog round finds it gone.
    let _: () = redis::cmd("DEL")
        .arg(support::key_of(held.name()))
        .query(&mut server.conn())
        .expect("DEL");
    shared().renew_now().await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    finished.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_lease_cancels_the_body_and_returns_lease_lost() {
    let server = Server::start();
    let _ = SHARED.set(support::client(&server).await);
    let name = support::unique_name("long");
    let finished = AtomicU32::new(0);

    let start = Instant::now();
    let outcome = within(long_job(&name, &server, &finished)).await;
    assert!(
        matches!(&outcome, Err(Error::LeaseLost { name: n }) if *n == format!("long:{name}")),
        "{outcome:?}"
    );
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "the body was not cancelled"
    );
    assert_eq!(finished.load(Ordering::SeqCst), 0);
}

// ---------------------------------------------------------------- cancellation

#[locked(key = "slow:{name}", client = client)]
async fn slow(client: &Client, name: &str) -> redlease::Result<()> {
    tokio::time::sleep(Duration::from_secs(30)).await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_call_releases_the_lock() {
    let server = Server::start();
    let client = support::client(&server).await;
    let name = support::unique_name("slow");
    let key = support::key_of(&format!("slow:{name}"));

    let mut call = Box::pin(slow(&client, &name));
    let held = tokio::select! {
        _ = &mut call => false,
        held = support::eventually_async(WITHIN, || async { support::exists(&server, &key) }) => held,
    };
    assert!(held, "the call should hold the lock while its body runs");
    // While the future lives (even unpolled) the lock stays held; dropping it releases.
    drop(call);
    let lock = client.lock(&format!("slow:{name}")).unwrap();
    assert!(
        support::until_free(&lock, WITHIN).await,
        "still held after the call was dropped"
    );
    assert!(!support::exists(&server, &key));
    assert_eq!(client.held_count(), 0, "the watchdog still renews it");
}
