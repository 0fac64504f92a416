//! [`Leadership`]: a won term, held as a lock guard; [`Leading`], what a body led by
//! [`Election::lead`](crate::Election::lead) knows of it.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tracing::Instrument;

use super::state::{Calls, END, ElectionKeys, PROCLAIM, RETENTION, Won};
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::hold::Hold;
use crate::shared::Client;
use crate::task::{AbortOnDrop, spawn_from_drop};

/// Longest value a leader may publish: it is copied into every change of the election's log.
pub(crate) const MAX_VALUE_LEN: usize = 64 * 1024;

pub(crate) fn check_value(value: &str) -> Result<()> {
    if value.len() > MAX_VALUE_LEN {
        return Err(Error::InvalidArgument(format!(
            "an election value is at most {MAX_VALUE_LEN} bytes, not {}",
            value.len()
        )));
    }
    Ok(())
}

/// One term of one leader, shared by its [`Leadership`] and the [`Leading`] handles.
pub(crate) struct Term {
    pub client: Client,
    pub keys: Arc<ElectionKeys>,
    pub hold: Arc<Hold>,
    pub term: u64,
    value: Mutex<String>,
    /// Set when its end is on its way (resigned, or its `Leadership` dropped): it is never
    /// recorded again from then on.
    ending: AtomicBool,
}

impl Term {
    pub(crate) fn new(
        client: Client,
        keys: Arc<ElectionKeys>,
        hold: Arc<Hold>,
        term: u64,
        value: String,
    ) -> Term {
        Term {
            client,
            keys,
            hold,
            term,
            value: Mutex::new(value),
            ending: AtomicBool::new(false),
        }
    }

    fn calls(&self) -> Calls<'_> {
        Calls {
            client: &self.client,
            keys: &self.keys,
        }
    }

    fn lost_error(&self) -> Error {
        Error::LeaseLost {
            name: self.keys.lock.name.to_string(),
        }
    }

    /// Records the end of this term (`why`: `resigned` or `lost`) if it is still the recorded
    /// one; the new revision, or `None` when it no longer was.
    pub(crate) async fn end(&self, why: &str) -> Result<Option<u64>> {
        self.calls()
            .as_leader(END, &self.hold.key.field, self.term, Some(why))
            .await
    }

    /// Records this term as the election's leader again when the state no longer names it
    /// while its lease holds (a failover lost the win's write, or the key was deleted): without
    /// it, observers see no leader and `proclaim` fails for the whole term. True when it is
    /// recorded again; false when the lease is gone, or a later term is recorded.
    async fn record_again(&self) -> Result<bool> {
        if self.hold.is_over() || self.ending.load(Ordering::Acquire) {
            return Ok(false);
        }
        let value = self.value.lock().clone();
        let field = &self.hold.key.field;
        match self.calls().won(field, self.term, &value).await? {
            Won::Recorded { .. } => {
                let name = &self.keys.lock.name;
                tracing::warn!(election = %name, term = self.term, "the election's state had lost this leader; recorded again");
                Ok(true)
            }
            Won::NotHeld | Won::StaleTerm { .. } => Ok(false),
        }
    }

    /// Marks the term as ending (it is never recorded again from now on), and says what its
    /// end records: `lost` for a lease lost (whoever heard of it first: the monitor, aborted
    /// with its `Leadership`, may not have said so), `resigned` otherwise, a shutdown included
    /// (a deliberate stop, as the monitor says too).
    fn start_ending(&self) -> &'static str {
        self.ending.store(true, Ordering::Release);
        match self.hold.is_lost() && !self.client.inner.is_shut_down() {
            true => "lost",
            false => "resigned",
        }
    }

    async fn proclaim(&self, value: &str) -> Result<()> {
        check_value(value)?;
        if self.hold.is_over() {
            return Err(self.lost_error());
        }
        let span =
            tracing::debug_span!("proclaim", election = %self.keys.lock.name, term = self.term);
        let (calls, field) = (self.calls(), &self.hold.key.field);
        let said = async {
            let proclaim = || calls.as_leader(PROCLAIM, field, self.term, Some(value));
            match proclaim().await? {
                None if self.record_again().await? => proclaim().await,
                said => Ok(said),
            }
        };
        match said.instrument(span).await? {
            Some(_) => {
                *self.value.lock() = value.to_owned();
                Ok(())
            }
            None => Err(self.lost_error()),
        }
    }
}

/// What the body of [`Election::lead`](crate::Election::lead) knows about the term it runs
/// in. Cheap to clone and `'static`, so it can be moved into tasks the body spawns; it does not
/// keep the leadership by itself.
#[derive(Clone)]
pub struct Leading {
    term: Arc<Term>,
}

impl Leading {
    /// The election's name.
    pub fn name(&self) -> &str {
        &self.term.keys.lock.name
    }

    /// The term: greater than every earlier term of this election, so a resource can refuse
    /// writes that carry an older one (see *Terms and fencing* in the [`Election`](crate::Election) docs).
    pub fn term(&self) -> u64 {
        self.term.term
    }

    /// The value this leader published last.
    pub fn value(&self) -> String {
        self.term.value.lock().clone()
    }

    /// Whether the leadership is known to be lost (see [`LockGuard::is_lost`]), or the term
    /// is over: resigned, or its [`Leadership`] dropped (from the moment the release is on its
    /// way, before another candidate can win).
    pub fn is_lost(&self) -> bool {
        self.term.hold.is_over()
    }

    /// Resolves when the leadership is lost or the term is over (see
    /// [`is_lost`](Leading::is_lost)). [`Election::lead`](crate::Election::lead) already stops
    /// the body then; this is for work the body hands to other tasks.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.term.hold.over()
    }

    /// The instant until which the leadership is known valid (see [`LockGuard::valid_until`]);
    /// once the term is over, no later than its end.
    pub fn valid_until(&self) -> Instant {
        self.term.hold.valid_until()
    }

    /// Publishes a new value without a new election (see [`Leadership::proclaim`]).
    ///
    /// # Errors
    /// As [`Leadership::proclaim`].
    ///
    /// # Cancel safety
    /// As [`Leadership::proclaim`].
    pub async fn proclaim(&self, value: &str) -> Result<()> {
        self.term.proclaim(value).await
    }
}

impl std::fmt::Debug for Leading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leading")
            .field("election", &self.term.keys.lock.name)
            .field("term", &self.term.term)
            .finish_non_exhaustive()
    }
}

/// A won term of an [`Election`](crate::Election): this candidate leads while it lives and is
/// not [lost](Leadership::is_lost).
///
/// It is a guard on the election's lock, kept by the watchdog. End it with
/// [`resign`](Leadership::resign), which hands over at once and reports errors; dropping it
/// resigns in the background instead.
///
/// # Drop
/// Drop never blocks and never panics: it stops renewing at once and spawns the resignation
/// (record the vacancy, then release the lock) on the runtime the client was built on, from any
/// thread. Once that runtime has ended, the lease frees the lock when it runs out.
#[must_use = "if unused the leadership is resigned immediately"]
pub struct Leadership {
    leading: Leading,
    /// `None` once `resign` took it.
    guard: Option<LockGuard>,
    /// Says "lost" on the server when the lease is lost, keeps the state from expiring, and
    /// records the leader again if the state lost it.
    _monitor: Option<AbortOnDrop>,
}

/// How often a leader pushes back the expiry of the election's state (it expires
/// [`RETENTION`] after the lock otherwise): a quarter of it, so three refreshes may fail.
const REFRESH_EVERY: Duration = Duration::from_secs(RETENTION.as_secs() / 4);

impl Leadership {
    /// A term just recorded: starts its monitor on the current runtime.
    pub(crate) fn new(term: Arc<Term>, guard: LockGuard) -> Leadership {
        let monitor = tokio::runtime::Handle::try_current()
            .ok()
            .map(|handle| AbortOnDrop(handle.spawn(monitor(term.clone()))));
        Leadership {
            leading: Leading { term },
            guard: Some(guard),
            _monitor: monitor,
        }
    }

    /// A handle on this term for other tasks (what the body of
    /// [`Election::lead`](crate::Election::lead) gets).
    pub fn leading(&self) -> Leading {
        self.leading.clone()
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        self.leading.name()
    }

    /// The term, this leadership's fencing token: strictly greater than the term of every
    /// earlier leader of this election. Pass it with every side effect, so the resource can
    /// refuse a paused leader's late writes.
    pub fn term(&self) -> u64 {
        self.leading.term()
    }

    /// The value this leader published last.
    pub fn value(&self) -> String {
        self.leading.value()
    }

    /// Whether the leadership is known to be lost: the lease was found gone, Redis could not
    /// be reached before [`valid_until`](Leadership::valid_until), or the client shut down.
    pub fn is_lost(&self) -> bool {
        self.leading.is_lost()
    }

    /// A future that resolves when the leadership is lost (see
    /// [`is_lost`](Leadership::is_lost)); it does not borrow the guard, so race the leader's
    /// work against it.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.leading.lost()
    }

    /// The instant until which the leadership is known valid: the start of the last
    /// successful acquisition or renewal of its lease, plus the lease, minus a drift allowance.
    /// No other candidate can win before it on the same server.
    pub fn valid_until(&self) -> Instant {
        self.leading.valid_until()
    }

    /// Publishes `value` as this leader's value without a new election: observers see a
    /// [`Proclaimed`](crate::ChangeCause::Proclaimed) change with the same term.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when this candidate no longer leads (nothing is published);
    /// [`Error::InvalidArgument`] for a value over 64 KiB; [`Error::Timeout`] or
    /// [`Error::Redis`] when Redis fails (the value may or may not be published then).
    ///
    /// # Cancel safety
    /// Dropping the future may or may not publish the value; the leadership is unaffected.
    pub async fn proclaim(&self, value: &str) -> Result<()> {
        self.leading.proclaim(value).await
    }

    /// Steps down: records the vacancy (observers see
    /// [`Resigned`](crate::ChangeCause::Resigned)) and releases the lock, which wakes the
    /// waiting candidates at once; the next one does not wait for the lease to run out.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] when the leadership was already lost (nothing was released);
    /// [`Error::Shutdown`] when the client was shut down; [`Error::Timeout`] or
    /// [`Error::Redis`] when Redis failed (the lease then frees the lock: it is no longer
    /// renewed).
    ///
    /// # Cancel safety
    /// Dropping the future still completes the resignation in the background.
    pub async fn resign(mut self) -> Result<()> {
        let Some(guard) = self.guard.take() else {
            return Ok(());
        };
        let term = self.leading.term.clone();
        let span =
            tracing::debug_span!("resign", election = %term.keys.lock.name, term = term.term);
        let why = term.start_ending();
        let resign = async move {
            let ended = term.end(why).await;
            let released = guard.unlock().await;
            // A lost lease is the answer, whatever recording the end met (a leader told of
            // its loss at once may resign before the connection is back).
            released?;
            ended.map(drop)
        };
        // Finished in the background when the caller stops waiting; shutdown waits for it.
        let background = self.leading.term.client.inner.background.clone();
        match background.spawn(resign.instrument(span)).await {
            Ok(result) => result,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Aborted: only a runtime shutting down does that.
            Err(_) => Err(Error::Shutdown),
        }
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        let Some(guard) = self.guard.take() else {
            return;
        };
        let term = self.leading.term.clone();
        let background = term.client.inner.background.clone();
        let why = term.start_ending();
        // Runs on the client's runtime; once that has ended, the lease frees the lock.
        let resign = async move {
            if let Err(e) = term.end(why).await
                && !e.is_shutdown()
            {
                tracing::debug!(election = %term.keys.lock.name, error = %e, "could not record the resignation; the lock's release still ends the term");
            }
            drop(guard.unlock().await);
        };
        spawn_from_drop(&background, resign);
    }
}

impl std::fmt::Debug for Leadership {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Leadership")
            .field("election", &self.name())
            .field("term", &self.term())
            .field("lost", &self.is_lost())
            .finish_non_exhaustive()
    }
}

/// While the term lasts: when its lease is lost, say so on the server (observers see
/// [`Lost`](crate::ChangeCause::Lost) at once rather than at the lease's expiry; a loss to
/// the client's shutdown is a [`Resigned`](crate::ChangeCause::Resigned)); meanwhile keep the
/// election's state from expiring, and record the leader again when the state no longer names
/// it (first a lease after the win, then at each refresh).
async fn monitor(term: Arc<Term>) {
    let lost = term.hold.lost();
    tokio::pin!(lost);
    // The first look a lease after the win: a failover that lost the win's write has shown
    // by then (the lease that backs the term was renewed on the new primary).
    let mut next = term.hold.lease().duration().min(REFRESH_EVERY);
    loop {
        tokio::select! {
            () = &mut lost => {
                // Lost to a shutdown of its client: a deliberate stop, as a resignation is.
                let why = term.start_ending();
                if let Err(e) = term.end(why).await {
                    tracing::debug!(election = %term.keys.lock.name, error = %e, "could not record the lost leadership; it is recorded when its lease runs out");
                }
                return;
            }
            () = tokio::time::sleep(next) => {
                next = REFRESH_EVERY;
                let refreshed = term
                    .calls()
                    .as_leader("refresh", &term.hold.key.field, term.term, None)
                    .await;
                // Not on record while the lease holds: the state lost this leader.
                let refreshed = match refreshed {
                    Ok(None) => term.record_again().await.map(drop),
                    other => other.map(drop),
                };
                if let Err(e) = refreshed {
                    tracing::debug!(election = %term.keys.lock.name, error = %e, "could not refresh the election's state");
                }
            }
        }
    }
}

// A leadership is a hold like the others: `Box<dyn Guard>` keeps it, its fencing token is
// the term, and `unlock` resigns.
crate::family::guard_by_methods!(
    Leadership,
    Leadership::name,
    Leadership::resign,
    |leadership: &Leadership| Some(leadership.term())
);
