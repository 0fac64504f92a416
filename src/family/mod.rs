//! The rest of the lock family on the same client: [`Semaphore`], [`PermitSemaphore`],
//! [`CountDownLatch`], [`ReadWriteLock`], [`FairLock`] (a [`Lock`](crate::Lock) in strict mode,
//! on the lock's own keys), and the [`Guard`] trait over every hold. Each other kind is one Lua
//! script (`lua/`) over keys under the kind's own suffix of the `{name}` hash tag, so a
//! semaphore, a latch and a lock may share a name, and every key of one object lives in one
//! Redis Cluster slot.
//!
//! Shared here: the keys, the input checks, and a request's lifecycle (undone when abandoned);
//! a guard's release goes through the release lifecycle of every kind (`release.rs`). Beside
//! it: the typed script replies (`reply.rs`) and the family's waiter in the one wait loop
//! (`asking.rs`). The waiters of the semaphores and the read-write lock queue on the server and
//! hear of their own grants only (`queued.rs`); the latch's wake on the object's channel.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::error::{Error, Result};
use crate::keys::LockKeys;
use crate::node::FamilyScript;
use crate::shared::Client;
use crate::task::FinishOnDrop;
pub(crate) use crate::wait::{Attempt, NAP};

mod asking;
mod fair;
mod guard;
mod kept;
mod latch;
mod permits;
mod queued;
mod reply;
mod rwlock;
mod rwlock_guard;
mod rwlock_share;
mod semaphore;

pub(crate) use asking::{Wake, wait_for};
pub use fair::{FairGuard, FairLock};
pub(crate) use guard::guard_by_methods;
pub use guard::{Guard, GuardFuture};
pub use latch::CountDownLatch;
pub use permits::{Permit, PermitSemaphore};
pub(crate) use reply::{Reply, Taken};
pub use rwlock::{ReadLock, ReadWriteLock, WriteLock};
pub use rwlock_guard::{ReadGuard, WriteGuard};
pub use semaphore::Semaphore;

/// The keys of one family object: `P:{N}:<kind>` and its channel `P:{N}:<kind>:<event>`.
#[derive(Debug)]
pub(crate) struct FamilyKeys {
    pub name: Arc<str>,
    pub key: Arc<str>,
    pub channel: Arc<str>,
}

impl FamilyKeys {
    pub(crate) fn new(client: &Client, name: &str, kind: &str, event: &str) -> Result<FamilyKeys> {
        let lock = LockKeys::new(&client.inner.config.prefix, name)?;
        let key: Arc<str> = format!("{}:{kind}", lock.hash).into();
        let channel = format!("{key}:{event}").into();
        Ok(FamilyKeys {
            name: lock.name,
            key,
            channel,
        })
    }

    /// Runs `script` on the key and the channel with `args`, even while the client shuts down
    /// (its own releases).
    pub(crate) async fn send(
        &self,
        client: &Client,
        script: &'static FamilyScript,
        args: &[&str],
    ) -> Result<Reply> {
        let n = self.send_as(client, script, args).await?;
        Ok(Reply::new(script.name, n))
    }

    /// [`send`](Self::send), for a reply of another type.
    pub(crate) async fn send_as<T: redis::FromRedisValue>(
        &self,
        client: &Client,
        script: &'static FamilyScript,
        args: &[&str],
    ) -> Result<T> {
        let keys = [&*self.key, &*self.channel];
        client.inner.node.family_call(script, &keys, args).await
    }

    /// [`send`](Self::send) for an acquisition request of a hold of `lease` (`None`: a
    /// semaphore's permits), which waits for its reply up to its [`patience`]: [`ask`] waits
    /// the client's timeout for it, and lets it finish in the background should it stop
    /// waiting (see `Node::family_request`).
    pub(crate) async fn send_acquisition(
        &self,
        client: &Client,
        script: &'static FamilyScript,
        args: &[&str],
        lease: Option<Duration>,
    ) -> Result<Reply> {
        let keys = [&*self.key, &*self.channel];
        let patience = patience(client, lease);
        let node = &client.inner.node;
        let n = node.family_request(script, &keys, args, patience).await?;
        Ok(Reply::new(script.name, n))
    }

    /// What the key holds, a string, `None` when it is absent.
    pub(crate) async fn get(&self, client: &Client) -> Result<Option<String>> {
        let get = redis::cmd("GET").arg(&*self.key).clone();
        // A read: sent again after a dropped connection (a waiter woken after a restart gets
        // its answer, not `broken pipe`).
        crate::node::resent_if_dropped(|_| client.inner.node.query(&get)).await
    }

    /// Deletes the key and the keys under it named by `suffixes` (`<key>:<suffix>`, a queue's):
    /// `true` when any existed.
    pub(crate) async fn delete(&self, client: &Client, suffixes: &[&str]) -> Result<bool> {
        let under = suffixes
            .iter()
            .map(|suffix| format!("{}:{suffix}", self.key));
        let delete = redis::cmd("DEL")
            .arg(&*self.key)
            .arg(under.collect::<Vec<_>>())
            .clone();
        let deleted: u64 = client.inner.node.query(&delete).await?;
        Ok(deleted > 0)
    }
}

/// `Debug` for handles by their name alone.
macro_rules! debug_by_name {
    ($($kind:ident),*) => {$(
        impl std::fmt::Debug for $kind {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($kind))
                    .field("name", &self.name())
                    .finish_non_exhaustive()
            }
        }
    )*};
}

debug_by_name!(
    CountDownLatch,
    FairLock,
    PermitSemaphore,
    ReadWriteLock,
    Semaphore
);

/// How long an acquisition request waits for its reply (`FamilyKeys::send_acquisition`): as
/// long as what it asks for would live, `lease` (a semaphore's permits have none: the watchdog
/// lease), at least the client's timeout, and below a year (a timer is always armed). A reply
/// later than that is not awaited: the withdrawal gives back what it took if it had run by
/// then (the server records what a semaphore's wait took); else a hold lasts its lease, and a
/// semaphore's permits stay out.
fn patience(client: &Client, lease: Option<Duration>) -> Duration {
    let config = &client.inner.config;
    let longest = crate::config::MAX_DURATION - Duration::from_secs(1);
    lease
        .unwrap_or(config.watchdog_lease)
        .max(config.timeout)
        .min(longest)
}

/// Sends one acquisition `request` for the object `name`, waiting for its answer at most the
/// client's timeout (the request itself waits up to its [`patience`]). If the caller stops
/// waiting, or the timeout runs out, the outcome is undone once it is in, in the background
/// (tracked, so `Client::shutdown` waits for it): a grant by `give_back`, anything else by
/// `withdraw` (a place in a server queue the request may have taken, `queued.rs`; a
/// semaphore's take, which the server records under its waiter's name). A grant that comes while the
/// client shuts down is given back, and the answer is [`Error::Shutdown`]. The request comes
/// boxed, and the withdrawal is made only when needed: both would otherwise be copied through
/// every attempt's future (a read lock's was 6.8 KB).
pub(crate) async fn ask<G, GF, R, W, WF>(
    client: &Client,
    name: &Arc<str>,
    request: BoxFuture<'static, Result<Taken>>,
    give_back: G,
    withdraw: W,
) -> Result<Taken>
where
    G: FnOnce() -> GF + Clone + Send + 'static,
    GF: Future<Output = Result<R>> + Send,
    W: FnOnce() -> WF + Send + 'static,
    WF: Future<Output = ()> + Send,
{
    let (late, name) = (give_back.clone(), name.clone());
    let abandoned = move |taken: Result<Taken>| async move {
        match taken {
            Ok(Taken::Granted) => {
                tracing::debug!(lock = %name, "acquire abandoned after the grant; giving it back");
                if let Err(e) = give_back().await {
                    tracing::warn!(lock = %name, error = %e, "could not give back an abandoned grant");
                }
            }
            _ => withdraw().await,
        }
    };
    let timeout = client.inner.config.timeout;
    let call = FinishOnDrop::pinned(request, abandoned).tracked(&client.inner.background);
    let taken = match tokio::time::timeout(timeout, call).await {
        Ok(taken) => taken,
        Err(_) => Err(Error::Timeout {
            operation: "acquire",
            timeout,
        }),
    };
    if let Ok(Taken::Granted) = taken
        && client.inner.check_open().is_err()
    {
        // Granted while the client shuts down: its drain may have passed, and would not give
        // this hold back (nor would anybody renew it). As the `Lock` does (`lock/grant.rs`);
        // finished in the background should the caller stop waiting.
        let give_back = async move {
            if let Err(e) = late().await {
                tracing::warn!(error = %e, "could not give back a grant made during shutdown");
            }
        };
        let give_back = FinishOnDrop::new(give_back, |()| async {});
        give_back.tracked(&client.inner.background).await;
        return Err(Error::Shutdown);
    }
    taken
}
