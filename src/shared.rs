//! What every lock of a client shares: the connection, the client identity, the local holds
//! and queues, the subscriber and the watchdog's wake-up. Below every lock kind (`lock`,
//! `multi`, `family`, `watchdog`, `release` build on it); `client.rs` adds the public API.

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use dashmap::DashMap;
use parking_lot::Mutex;
use tokio::sync::Notify;
use uuid::Uuid;

use crate::config::Config;
use crate::error::{Error, Result};
use crate::hold::Holds;
use crate::identity::ClientInfo;
use crate::local_queue::LocalQueues;
use crate::node::{Dial, Node, Target};
use crate::pubsub::Subscriber;
use crate::task::{AbortOnDrop, Background};
use crate::terms::Lease;
use crate::turns::Turns;

/// A connection to one Redis server (or one Redis Cluster) plus everything its locks share: the client id that names
/// this process in lock owners, the watchdog and the pub/sub subscriber.
///
/// Cheap to clone: clones share one connection, one watchdog task and one subscriber
/// connection. Create one per process (or per Redis deployment) and pass clones around.
///
/// ```no_run
/// # async fn demo() -> redlease::Result<()> {
/// let client = redlease::Client::connect("redis://127.0.0.1:6379").await?;
/// let guard = client.lock("orders:42")?.lock().await?;
/// // ... critical section ...
/// guard.unlock().await?;
/// client.shutdown().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub id: Uuid,
    /// This process as the client announces itself (`identity.rs`).
    pub me: ClientInfo,
    /// `id` as text, the prefix of every owner field.
    pub id_text: Arc<str>,
    pub config: Config,
    pub node: Node,
    /// Every hold of this client, every kind.
    pub holds: Holds,
    pub local_queues: LocalQueues,
    /// Lock kinds' state within this client, per lock (a read-write lock's waiters and shared
    /// read holds).
    pub local_states: LocalStates,
    /// Acquisitions and guard releases in progress, per (lock, owner): acquisitions take turns
    /// and wait for the owner's releases in flight.
    pub turns: Arc<Turns>,
    /// Background releases and give-backs, which `shutdown` waits for, on the runtime the
    /// client was built on.
    pub background: Background,
    pub subscriber: Arc<Subscriber>,
    /// The watchdog's task and what wakes it (`watchdog.rs` renews `holds`).
    pub watchdog: Watchdog,
    /// Where and how the client connected, so `testing` can connect another client alike.
    pub dialed: OnceLock<(Target, Dial)>,
    shut_down: AtomicBool,
    /// The outcome of the shutdown begun by `shut_down`, once it has ended: every call of
    /// `Client::shutdown` answers it.
    shutdown_outcome: tokio::sync::watch::Sender<Option<Result<()>>>,
    next_request: AtomicU64,
    /// This client, for work that outlives the call that starts it and must not keep the
    /// client alive.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub this: Weak<Inner>,
}

impl Inner {
    pub(crate) fn new(id: Uuid, me: ClientInfo, config: Config, node: Node) -> Arc<Self> {
        let id_text: Arc<str> = id.to_string().into();
        Arc::new_cyclic(|this| Inner {
            this: this.clone(),
            id,
            me,
            subscriber: Subscriber::new(
                node.link(),
                config.timeout,
                id_text.clone(),
                config.wait_by,
                config.channel_linger,
            ),
            id_text,
            config,
            node,
            holds: Holds::default(),
            local_queues: LocalQueues::default(),
            local_states: LocalStates::default(),
            turns: Arc::default(),
            background: Background::new(),
            watchdog: Watchdog::default(),
            dialed: OnceLock::new(),
            shut_down: AtomicBool::new(false),
            shutdown_outcome: tokio::sync::watch::Sender::new(None),
            next_request: AtomicU64::new(0),
        })
    }

    /// Marks the client shut down; `false` if it already was.
    pub(crate) fn begin_shutdown(&self) -> bool {
        !self.shut_down.swap(true, Ordering::AcqRel)
    }

    /// Says how the shutdown ended.
    pub(crate) fn end_shutdown(&self, outcome: Result<()>) {
        self.shutdown_outcome.send_replace(Some(outcome));
    }

    /// The outcome of the shutdown begun, once it has ended.
    pub(crate) async fn shutdown_outcome(&self) -> Result<()> {
        let mut outcome = self.shutdown_outcome.subscribe();
        match outcome.wait_for(Option::is_some).await {
            Ok(ended) => ended.clone().unwrap_or(Ok(())),
            // The sender lives in `self`: it cannot be gone while we read.
            Err(_) => Err(Error::Shutdown),
        }
    }

    /// Whether the client still takes calls, where an async call begins: not shut down, and
    /// polled inside a tokio runtime (outside one, its timers and connections would panic).
    /// Synchronous code that asks only about shutdown uses [`is_shut_down`](Inner::is_shut_down).
    pub(crate) fn check_open(&self) -> Result<()> {
        if self.is_shut_down() {
            Err(Error::Shutdown)
        } else {
            crate::task::in_runtime()
        }
    }

    /// Whether [`Client::shutdown`](crate::Client::shutdown) began.
    pub(crate) fn is_shut_down(&self) -> bool {
        self.shut_down.load(Ordering::Acquire)
    }

    /// A number unique to this client: names a waiter's queued attempt (`lua/queue_lock.lua`).
    pub(crate) fn next_nonce(&self) -> u64 {
        self.next_request.fetch_add(1, Ordering::Relaxed)
    }

    /// A request id unique to this client, for idempotent releases.
    pub(crate) fn request_id(&self) -> crate::node::RequestId<'_> {
        crate::node::RequestId {
            client: &self.id_text,
            n: self.next_request.fetch_add(1, Ordering::Relaxed),
        }
    }
}

/// The watchdog as the rest of the client sees it: its task, what wakes it, and its pauses.
pub(crate) struct Watchdog {
    /// Wakes the task: a hold came whose lease is shorter than the current period's, or the
    /// renewals resumed.
    pub wake: Arc<Notify>,
    /// The lease the current period is based on (ms).
    pub lease_ms: AtomicU64,
    task: Mutex<Option<AbortOnDrop>>,
    /// Pauses in force (`testing`): while above zero, no renewal is sent and leases run out
    /// as they would with the watchdog stalled.
    pub paused: AtomicUsize,
}

impl Default for Watchdog {
    fn default() -> Self {
        Watchdog {
            wake: Arc::default(),
            lease_ms: AtomicU64::new(u64::MAX),
            task: Mutex::new(None),
            paused: AtomicUsize::new(0),
        }
    }
}

impl Watchdog {
    pub(crate) fn start(&self, task: AbortOnDrop) {
        *self.task.lock() = Some(task);
    }

    pub(crate) fn stop(&self) {
        self.task.lock().take();
    }

    /// Tells the watchdog about a new hold: only a lease shorter than its current period's
    /// wakes it (waking it for every lock would rescan every hold each time).
    pub(crate) fn adopt(&self, lease: Lease) {
        if let Lease::Watchdog(lease) = lease {
            let ms = lease.as_millis().min(u64::MAX as u128) as u64;
            if self.lease_ms.fetch_min(ms, Ordering::AcqRel) > ms {
                self.wake.notify_one();
            }
        }
    }

    /// Whether a pause (`testing`) is in force.
    pub(crate) fn is_paused(&self) -> bool {
        self.paused.load(Ordering::Acquire) > 0
    }
}

/// State that a lock kind keeps per lock within one client, shared by every handle of the lock
/// and dropped with the last one. Typed by the kind (this layer does not know the kinds).
#[derive(Default)]
pub(crate) struct LocalStates {
    map: DashMap<Arc<str>, Weak<dyn Any + Send + Sync>, foldhash::fast::RandomState>,
}

impl LocalStates {
    /// The state of lock `key`, made when no handle of the lock has it.
    pub(crate) fn of<T: Default + Send + Sync + 'static>(&self, key: &Arc<str>) -> Arc<T> {
        let mut entry = self
            .map
            .entry(key.clone())
            .or_insert_with(|| Weak::<T>::new());
        if let Some(state) = entry.upgrade().and_then(|s| s.downcast::<T>().ok()) {
            return state;
        }
        let state = Arc::new(T::default());
        let erased: Arc<dyn Any + Send + Sync> = state.clone();
        *entry = Arc::downgrade(&erased);
        drop(entry);
        // Forget locks no handle uses any more, now and then (amortized O(1) a call).
        let len = self.map.len();
        if len >= 64 && len.is_power_of_two() {
            self.map.retain(|_, state| state.strong_count() > 0);
        }
        state
    }
}
