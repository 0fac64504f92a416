//! One `Guard` meaning: every guard type goes through the same test bodies, written once against
//! the [`Guard`] trait, so a difference between kinds is a failing test. `LockGuard` is the
//! reference; the crate docs promise its behaviour for every kind.
//!
//! The matrix is one module per case with one test per kind (`lost_by_server_restart::fair`).
//! Every kind is made by a small factory ([`Kind`]): how to take it, how another client tries
//! to take what it excludes, and which keys hold it on the server.

mod support;

use std::future::Future;
use std::time::{Duration, Instant};

use redlease::{Client, Guard, LockOptions, MultiLock, RedLock};
use support::{Server, unique_name};

/// The watchdog lease of the cases that wait for a loss: renewals every half second.
const SHORT_LEASE: Duration = Duration::from_millis(1500);
/// The fixed lease of the fixed-lease cases.
const FIXED_LEASE: Duration = Duration::from_secs(1);
/// Slack on every bound: a loaded machine (the CI and benchmarks share it) is slow.
const SLACK: Duration = Duration::from_secs(2);

/// Every guard type of the crate, as a factory.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Lock,
    RedLock,
    MultiLock,
    Fair,
    Read,
    Write,
    Permit,
    Leadership,
}

impl Kind {
    /// Takes the kind on `name` through `client`: kept by the watchdog, or for `lease`.
    async fn take(self, client: &Client, name: &str, lease: Option<Duration>) -> Box<dyn Guard> {
        let options = match lease {
            Some(lease) => LockOptions::new().lease(lease),
            None => LockOptions::new(),
        };
        let taken: redlease::Result<Box<dyn Guard>> = async {
            Ok::<Box<dyn Guard>, redlease::Error>(match self {
                Kind::Lock => Box::new(client.lock(name)?.lock_with(options).await?),
                Kind::RedLock => Box::new(redlock(client, name).lock_with(options).await?),
                Kind::MultiLock => Box::new(multilock(client, name).lock_with(options).await?),
                Kind::Fair => Box::new(client.fair_lock(name)?.lock_with(options).await?),
                Kind::Read => Box::new(
                    client
                        .read_write_lock(name)?
                        .read()
                        .lock_with(options)
                        .await?,
                ),
                Kind::Write => Box::new(
                    client
                        .read_write_lock(name)?
                        .write()
                        .lock_with(options)
                        .await?,
                ),
                Kind::Permit => {
                    let permits = client.permit_semaphore(name)?;
                    permits.try_set_permits(1).await?;
                    Box::new(permits.acquire_with(options).await?)
                }
                Kind::Leadership => {
                    assert!(lease.is_none(), "an election has no fixed lease");
                    Box::new(client.election(name)?.campaign("conformance").await?)
                }
            })
        }
        .await;
        taken.unwrap_or_else(|e| panic!("{self:?}: taking `{name}` failed: {e}"))
    }

    /// One attempt of `client` at what a guard of this kind on `name` excludes (for a read
    /// guard: the write lock); the guard it got, released again at once.
    async fn try_take(self, client: &Client, name: &str) -> bool {
        let got: redlease::Result<Option<Box<dyn Guard>>> = async {
            Ok(match self {
                Kind::Lock => boxed(client.lock(name)?.try_lock().await?),
                Kind::RedLock => boxed(redlock(client, name).try_lock().await?),
                Kind::MultiLock => boxed(multilock(client, name).try_lock().await?),
                Kind::Fair => boxed(client.fair_lock(name)?.try_lock().await?),
                Kind::Read | Kind::Write => {
                    boxed(client.read_write_lock(name)?.write().try_lock().await?)
                }
                Kind::Permit => boxed(client.permit_semaphore(name)?.try_acquire().await?),
                Kind::Leadership => {
                    let once = LockOptions::new().wait(Duration::ZERO);
                    boxed(client.lock(name)?.try_lock_with(once).await?)
                }
            })
        }
        .await;
        match got.unwrap_or_else(|e| panic!("{self:?}: trying `{name}` failed: {e}")) {
            Some(guard) => {
                guard.unlock().await.unwrap();
                true
            }
            None => false,
        }
    }

    /// The keys that hold a guard of this kind on `name` on the server.
    fn keys(self, client: &Client, name: &str) -> Vec<String> {
        match self {
            Kind::Lock | Kind::RedLock | Kind::Leadership => {
                vec![client.lock(name).unwrap().key().to_owned()]
            }
            Kind::MultiLock => multilock(client, name)
                .locks()
                .iter()
                .map(|lock| lock.key().to_owned())
                .collect(),
            // A `Lock` in strict mode, on the lock's own key.
            Kind::Fair => vec![client.fair_lock(name).unwrap().key().to_owned()],
            Kind::Read | Kind::Write => {
                vec![client.read_write_lock(name).unwrap().key().to_owned()]
            }
            Kind::Permit => vec![client.permit_semaphore(name).unwrap().key().to_owned()],
        }
    }

    /// Whether the server still keeps a hold of this kind on `name` (a permit semaphore keeps
    /// its total: a permit given out is a `p:<id>` field).
    fn held_on(self, server: &Server, client: &Client, name: &str) -> bool {
        let mut conn = server.conn();
        self.keys(client, name).iter().any(|key| match self {
            Kind::Permit => {
                let fields: Vec<String> = redis::cmd("HKEYS").arg(key).query(&mut conn).unwrap();
                fields.iter().any(|field| field.starts_with("p:"))
            }
            _ => redis::cmd("EXISTS")
                .arg(key)
                .query::<bool>(&mut conn)
                .unwrap(),
        })
    }

    /// Takes the hold away behind the guard's back: deletes its keys.
    fn force_unlock(self, server: &Server, client: &Client, name: &str) {
        let mut cmd = redis::cmd("DEL");
        for key in self.keys(client, name) {
            cmd.arg(key);
        }
        let deleted: u64 = cmd.query(&mut server.conn()).unwrap();
        assert!(deleted >= 1, "{self:?}: nothing to delete for `{name}`");
    }
}

fn boxed<G: Guard + 'static>(guard: Option<G>) -> Option<Box<dyn Guard>> {
    guard.map(|guard| Box::new(guard) as Box<dyn Guard>)
}

/// A RedLock over one node: the lock `name` of `client`.
fn redlock(client: &Client, name: &str) -> RedLock {
    RedLock::new(vec![client.lock(name).unwrap()]).unwrap()
}

/// A MultiLock over two locks of `client`, `name-a` and `name-b`.
fn multilock(client: &Client, name: &str) -> MultiLock {
    let members = ["a", "b"].map(|m| client.lock(&format!("{name}-{m}")).unwrap());
    MultiLock::new(members.into()).unwrap()
}

/// A client of `server` whose watchdog renews every half second, with a timeout short enough
/// for a paused server to cost a lease.
async fn short_lease_client(server: &Server) -> Client {
    support::client_with(server, |b| {
        b.watchdog_lease(SHORT_LEASE)
            .timeout(Duration::from_millis(400))
    })
    .await
}

/// Waits at most `within` for the guard's `lost()`; then it must say `is_lost()` too.
async fn assert_lost_within(kind: Kind, guard: &dyn Guard, within: Duration, how: &str) {
    let lost = tokio::time::timeout(within, guard.lost()).await;
    assert!(
        lost.is_ok(),
        "{kind:?}: lost() did not resolve within {within:?} of {how}"
    );
    assert!(
        guard.is_lost(),
        "{kind:?}: lost() resolved, is_lost() says no ({how})"
    );
}

/// The one answer of `unlock()` after a loss: [`Error::LeaseLost`](redlease::Error::LeaseLost).
async fn assert_unlock_says_lost(kind: Kind, guard: Box<dyn Guard>, how: &str) {
    match guard.unlock().await {
        Err(e) if e.is_lease_lost() => {}
        other => panic!("{kind:?}: unlock after {how} answered {other:?}, not LeaseLost"),
    }
}

/// Polls `try_take` of `other` until it succeeds, at most `within`.
async fn taken_by_other_within(kind: Kind, other: &Client, name: &str, within: Duration) -> bool {
    support::eventually_async(within, || kind.try_take(other, name)).await
}

/// Runs `case` with a fresh server, tracing, and a name of its own.
async fn with_server<F, Fut>(case: F)
where
    F: FnOnce(Server, String) -> Fut,
    Fut: Future<Output = ()>,
{
    support::init_tracing();
    case(Server::start(), unique_name("conformance")).await;
}

// ---- the cases: each body is written once, for every kind ----

/// Deleting the keys under a watchdog-kept guard: the next renewal finds them gone.
async fn lost_by_force_unlock_under_watchdog(kind: Kind) {
    with_server(|server, name| async move {
        let client = short_lease_client(&server).await;
        let guard = kind.take(&client, &name, None).await;
        assert!(!guard.is_lost(), "{kind:?}: lost right after acquisition");
        kind.force_unlock(&server, &client, &name);
        assert_lost_within(kind, &*guard, SHORT_LEASE + SLACK, "a force-unlock").await;
        assert_unlock_says_lost(kind, guard, "a force-unlock").await;
    })
    .await;
}

/// Deleting the keys under a guard with a fixed lease: nothing renews it, so the loss is known
/// when the lease ends, and `lost()` resolves then.
async fn lost_by_force_unlock_under_fixed_lease(kind: Kind) {
    with_server(|server, name| async move {
        let client = support::client(&server).await;
        let guard = kind.take(&client, &name, Some(FIXED_LEASE)).await;
        kind.force_unlock(&server, &client, &name);
        assert_lost_within(kind, &*guard, FIXED_LEASE + SLACK, "a force-unlock").await;
        assert!(
            guard.valid_until() <= Instant::now(),
            "{kind:?}: lost while still claiming validity"
        );
        assert_unlock_says_lost(kind, guard, "a force-unlock").await;
    })
    .await;
}

/// A fixed lease that simply runs out: lost at its end, and `unlock` says so.
async fn lost_when_fixed_lease_ends(kind: Kind) {
    with_server(|server, name| async move {
        let client = support::client(&server).await;
        let guard = kind.take(&client, &name, Some(FIXED_LEASE)).await;
        assert!(!guard.is_lost(), "{kind:?}: lost right after acquisition");
        assert_lost_within(kind, &*guard, FIXED_LEASE + SLACK, "the lease's end").await;
        let other = support::client(&server).await;
        assert!(
            taken_by_other_within(kind, &other, &name, SLACK).await,
            "{kind:?}: still held after its lease ended"
        );
        assert_unlock_says_lost(kind, guard, "the lease's end").await;
    })
    .await;
}

/// A released hold was not lost: a `lost()` future taken before the release (a task watching
/// for the loss) stays pending past the lease, and nothing counts a lost lease. Before, it
/// resolved when the lease would have run out, with a "lease lost" warning and metric.
async fn a_released_hold_is_never_told_lost(kind: Kind) {
    with_server(|server, name| async move {
        let client = support::client(&server).await;
        let guard = kind.take(&client, &name, Some(FIXED_LEASE)).await;
        let lost = guard.lost();
        guard.unlock().await.unwrap();
        let told = tokio::time::timeout(FIXED_LEASE + Duration::from_millis(500), lost).await;
        assert!(
            told.is_err(),
            "{kind:?}: a released hold was told lost when its lease would have ended"
        );
    })
    .await;
}

/// A server restarted without persistence forgets the hold; the next renewal finds it gone.
async fn lost_by_server_restart(kind: Kind) {
    with_server(|mut server, name| async move {
        let client = short_lease_client(&server).await;
        let guard = kind.take(&client, &name, None).await;
        server.restart();
        assert_lost_within(kind, &*guard, SHORT_LEASE + SLACK * 2, "a restart").await;
        assert_unlock_says_lost(kind, guard, "a restart").await;
    })
    .await;
}

/// A paused server answers no renewal: the guard is lost once its validity runs out, and
/// stays lost when the server comes back.
async fn lost_by_paused_server(kind: Kind) {
    with_server(|server, name| async move {
        let client = short_lease_client(&server).await;
        let guard = kind.take(&client, &name, None).await;
        server.pause();
        let lost = tokio::time::timeout(SHORT_LEASE + SLACK, guard.lost()).await;
        let (is_lost, valid_until) = (guard.is_lost(), guard.valid_until());
        server.resume();
        assert!(
            lost.is_ok(),
            "{kind:?}: lost() did not resolve while paused"
        );
        assert!(is_lost, "{kind:?}: lost() resolved, is_lost() says no");
        assert!(
            valid_until <= Instant::now(),
            "{kind:?}: lost while still claiming validity"
        );
        assert_unlock_says_lost(kind, guard, "a pause past validity").await;
    })
    .await;
}

/// Right after acquisition the guard is valid for about its lease: not less than what is
/// left, and never more.
async fn valid_until_is_within_the_lease(kind: Kind, lease: Option<Duration>) {
    with_server(|server, name| async move {
        let client = short_lease_client(&server).await;
        let asked = Instant::now();
        let guard = kind.take(&client, &name, lease).await;
        let got = Instant::now();
        let valid_until = guard.valid_until();
        let lease = lease.unwrap_or(SHORT_LEASE);
        assert!(
            valid_until > got,
            "{kind:?}: not valid right after acquisition"
        );
        assert!(
            valid_until <= asked + lease,
            "{kind:?}: valid {:?} past the request, longer than its lease {lease:?}",
            valid_until - asked
        );
        assert!(!guard.is_lost());
        guard.unlock().await.unwrap();
    })
    .await;
}

async fn valid_until_is_within_the_watchdog_lease(kind: Kind) {
    valid_until_is_within_the_lease(kind, None).await;
}

async fn valid_until_is_within_a_fixed_lease(kind: Kind) {
    valid_until_is_within_the_lease(kind, Some(FIXED_LEASE * 2)).await;
}

/// `held_count` counts the guard's hold while it lives (the watchdog renews it and shutdown
/// gives it back from the same registry) and nothing once it was unlocked.
async fn held_count_follows_the_guard(kind: Kind) {
    with_server(|server, name| async move {
        let [client] = support::clients(&server).await;
        assert_eq!(client.held_count(), 0, "{kind:?}: a hold before any");
        let guard = kind.take(&client, &name, None).await;
        assert!(client.held_count() > 0, "{kind:?}: its hold is not counted");
        guard.unlock().await.unwrap();
        assert_eq!(
            client.held_count(),
            0,
            "{kind:?}: a hold counted after unlock"
        );
    })
    .await;
}

/// Dropping a guard releases in the background: another client takes it soon, long before
/// the (default, 30 s) lease could free it.
async fn drop_releases(kind: Kind) {
    with_server(|server, name| async move {
        let [client, other] = support::clients(&server).await;
        let guard = kind.take(&client, &name, None).await;
        assert!(
            !kind.try_take(&other, &name).await,
            "{kind:?}: not exclusive"
        );
        drop(guard);
        assert!(
            taken_by_other_within(kind, &other, &name, SLACK).await,
            "{kind:?}: a dropped guard kept its hold"
        );
        assert!(
            !kind.held_on(&server, &client, &name),
            "{kind:?}: keys left"
        );
    })
    .await;
}

/// An `unlock()` whose future is dropped (after its first poll, or a moment into its request)
/// still releases: nothing stays held for the rest of the 30 s lease. The scripts are flushed
/// first, so the release meets `NOSCRIPT` and must be sent again after the caller left.
async fn cancelled_unlock_releases(kind: Kind) {
    with_server(|server, name| async move {
        let [client, other] = support::clients(&server).await;
        for cancel_after in [Duration::ZERO, Duration::from_micros(300)] {
            let guard = kind.take(&client, &name, None).await;
            redis::cmd("SCRIPT")
                .arg("FLUSH")
                .query::<()>(&mut server.conn())
                .unwrap();
            let unlock = guard.unlock();
            if cancel_after.is_zero() {
                // `timeout` polls the future once before it looks at the clock.
                let _ = tokio::time::timeout(Duration::ZERO, unlock).await;
            } else {
                let _ = support::with_precise_timeout(cancel_after, unlock).await;
            }
            assert!(
                taken_by_other_within(kind, &other, &name, SLACK).await,
                "{kind:?}: an unlock cancelled after {cancel_after:?} left the hold behind"
            );
            assert!(
                support::eventually(SLACK, || !kind.held_on(&server, &client, &name)),
                "{kind:?}: keys left after an unlock cancelled after {cancel_after:?}"
            );
        }
    })
    .await;
}

/// `Client::shutdown` gives back every hold at once: the guard is lost at once, another
/// client takes the hold right after, and `unlock` answers `Shutdown`.
async fn shutdown_releases_and_marks_lost(kind: Kind) {
    with_server(|server, name| async move {
        let [client, other] = support::clients(&server).await;
        let guard = kind.take(&client, &name, None).await;
        client.shutdown().await.unwrap();
        assert!(
            guard.is_lost(),
            "{kind:?}: still claims its hold after shutdown"
        );
        let lost = tokio::time::timeout(Duration::from_millis(100), guard.lost()).await;
        assert!(lost.is_ok(), "{kind:?}: lost() did not resolve at shutdown");
        assert!(
            kind.try_take(&other, &name).await,
            "{kind:?}: still held after shutdown"
        );
        match guard.unlock().await {
            Err(e) if e.is_shutdown() => {}
            other => panic!("{kind:?}: unlock after shutdown answered {other:?}, not Shutdown"),
        }
    })
    .await;
}

/// One module per case, one test per kind: `cancelled_unlock_releases::fair`.
macro_rules! matrix {
    (kinds [$($kind:ident => $variant:ident),* $(,)?] cases [$($case:ident),* $(,)?]) => {
        matrix!(@cases [$($kind => $variant),*] $($case)*);
    };
    (@cases $kinds:tt $($case:ident)*) => {
        $(matrix!(@case $kinds $case);)*
    };
    (@case [$($kind:ident => $variant:ident),*] $case:ident) => {
        mod $case {
            use super::Kind;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $kind() {
                    super::$case(Kind::$variant).await;
                }
            )*
        }
    };
}

matrix! {
    kinds [
        lock => Lock, red_lock => RedLock, multi_lock => MultiLock, fair => Fair,
        read => Read, write => Write, permit => Permit, leadership => Leadership,
    ]
    cases [
        lost_by_force_unlock_under_watchdog,
        lost_by_server_restart,
        lost_by_paused_server,
        valid_until_is_within_the_watchdog_lease,
        held_count_follows_the_guard,
        drop_releases,
        cancelled_unlock_releases,
        shutdown_releases_and_marks_lost,
    ]
}

// An election has no fixed lease: a leader is kept by the watchdog while it leads.
matrix! {
    kinds [
        lock => Lock, red_lock => RedLock, multi_lock => MultiLock, fair => Fair,
        read => Read, write => Write, permit => Permit,
    ]
    cases [
        lost_by_force_unlock_under_fixed_lease,
        lost_when_fixed_lease_ends,
        valid_until_is_within_a_fixed_lease,
        a_released_hold_is_never_told_lost,
    ]
}
