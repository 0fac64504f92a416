//! Ownership of background work.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::runtime::Handle;
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

/// [`Error::NoRuntime`] unless called inside a tokio runtime: checked where a call begins,
/// before anything that needs one (a timer, a connection, a spawn) would panic. One
/// thread-local read and a reference count up and down: 11.5 ns a check measured (release
/// build, a 2-core machine under load), against a round trip of tens of microseconds.
pub(crate) fn in_runtime() -> crate::Result<()> {
    tokio::runtime::Handle::try_current()
        .map(drop)
        .map_err(|_| crate::Error::NoRuntime)
}

/// Aborts its task when dropped: the owner of a background task holds one of these.
#[derive(Debug)]
pub(crate) struct AbortOnDrop(pub JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Tasks owned by one value (a batcher, a connection holder): each is aborted when the owner is
/// dropped, so none outlives what it works for; each holds its owner weakly, if at all. Tasks
/// that ended are forgotten at the next spawn, so the set is as small as the tasks running.
#[derive(Debug, Default)]
pub(crate) struct OwnedTasks(parking_lot::Mutex<Vec<AbortOnDrop>>);

impl OwnedTasks {
    /// Spawns `work` on the current runtime, owned by this set.
    ///
    /// # Panics
    /// Only as `tokio::spawn` does: outside a runtime.
    pub(crate) fn spawn(&self, work: impl Future<Output = ()> + Send + 'static) {
        let task = AbortOnDrop(tokio::spawn(work));
        let mut tasks = self.0.lock();
        tasks.retain(|t| !t.0.is_finished());
        tasks.push(task);
    }
}

/// The background work of one client: tracked, so `Client::shutdown` waits for it, and run on
/// the runtime the client was built on, whichever thread starts it (a guard dropped on a plain
/// thread included). Clones share the tracker, the runtime and the once-only warning.
#[derive(Clone, Debug)]
pub(crate) struct Background {
    tracker: TaskTracker,
    /// The runtime current when the client was built; `None` if there was none (then the
    /// runtime current at each spawn is used).
    runtime: Option<Handle>,
    /// Set once the warning that the runtime has ended was given: once per client.
    told_gone: Arc<AtomicBool>,
}

impl Background {
    /// Background work for a client built now, on the current runtime.
    pub(crate) fn new() -> Background {
        Background {
            tracker: TaskTracker::new(),
            runtime: Handle::try_current().ok(),
            told_gone: Arc::default(),
        }
    }

    /// Spawns `work`, tracked, on the client's runtime (the current one if it has none).
    ///
    /// # Panics
    /// Only as `tokio::spawn` does: a client built outside a runtime, spawning outside one.
    pub(crate) fn spawn<F>(&self, work: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        match &self.runtime {
            Some(handle) => self.tracker.spawn_on(work, handle),
            None => self.tracker.spawn(work),
        }
    }

    /// Spawns `work` on the client's runtime (the current one if it has none), untracked: for
    /// the one piece of work that [`wait`](Self::wait) must not wait for, the shutdown itself,
    /// whose outcome its callers read from the client. A runtime that has ended drops `work`
    /// unrun; without any runtime it is dropped here.
    pub(crate) fn spawn_untracked(&self, work: impl Future<Output = ()> + Send + 'static) {
        if let Some(handle) = self.handle() {
            drop(handle.spawn(work));
        }
    }

    /// No more work is tracked after this (see [`TaskTracker::close`]).
    pub(crate) fn close(&self) -> bool {
        self.tracker.close()
    }

    /// How many tracked tasks are still running (`testing/abandon_tests.rs`).
    #[cfg(all(test, feature = "testing"))]
    pub(crate) fn in_flight(&self) -> usize {
        self.tracker.len()
    }

    /// Resolves once every tracked task has ended and the tracker is closed.
    pub(crate) fn wait(&self) -> tokio_util::task::task_tracker::TaskTrackerWaitFuture<'_> {
        self.tracker.wait()
    }

    /// The runtime to run work on: the client's, or the current one.
    fn handle(&self) -> Option<Handle> {
        self.runtime.clone().or_else(|| Handle::try_current().ok())
    }

    /// Warns, once per client, that work handed over from a drop will not run: the runtime the
    /// client was built on has ended (or there never was one).
    fn tell_gone(&self) {
        if !self.told_gone.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                "the tokio runtime this client was built on has ended: a guard dropped now is not \
                 released on the server, and its key stays until its lease runs out (release \
                 guards, or call Client::shutdown, before the runtime ends)"
            );
        }
    }
}

/// Spawns `work` under `background` (so `Client::shutdown` waits for it) on the runtime the
/// client was built on, from any thread: how a `Drop`, which cannot await, hands its server
/// half over. If that runtime has ended, `work` cannot run: it is dropped unrun, the client
/// warns once, and the lease frees whatever it would have released.
pub(crate) fn spawn_from_drop<F>(background: &Background, work: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    let Some(handle) = background.handle() else {
        background.tell_gone();
        return;
    };
    // A runtime that has shut down drops a task spawned on it at once, unrun; one shutting down
    // drops it unfinished. Either way the watch sees it dropped before its end.
    let watch = Unfinished {
        background: background.clone(),
        finished: false,
    };
    let work = async move {
        work.await;
        watch.done();
    };
    drop(background.tracker.spawn_on(work, &handle));
}

/// Dropped with the work it watches: before that work finished, the runtime has ended.
struct Unfinished {
    background: Background,
    finished: bool,
}

impl Unfinished {
    /// The work ended: nothing to warn about.
    fn done(mut self) {
        self.finished = true;
    }
}

impl Drop for Unfinished {
    fn drop(&mut self) {
        if !self.finished {
            self.background.tell_gone();
        }
    }
}

/// A future that, if dropped before it finished, is finished in the background instead, and its
/// output handed to `on_abandoned`.
///
/// This is how cancellation stays safe: a request already on the wire may still succeed on the
/// server, so its outcome must be observed (and undone) even when the caller stopped waiting.
pub(crate) struct FinishOnDrop<F, C>
where
    F: Future + Send + ?Sized + 'static,
    F::Output: Send + 'static,
    C: OnAbandoned<F::Output>,
{
    // Boxed so the pinned future can move into a background task when abandoned.
    fut: Option<Pin<Box<F>>>,
    on_abandoned: Option<C>,
    tracker: Option<Background>,
    /// Made when the future is abandoned, kept until its background completion ends.
    keep: Option<KeepWhileAbandoned>,
    /// How long the background completion may run.
    expiry: Option<Expiry<F::Output>>,
}

/// The bound of an abandoned future's background completion: unfinished at `since + limit`, it
/// is dropped, and `on_abandoned` hears `expired(limit)` instead of its output.
struct Expiry<T> {
    /// On tokio's clock, as the timer that ends it (a paused or advanced test clock included).
    since: tokio::time::Instant,
    limit: Duration,
    expired: fn(Duration) -> T,
}

impl<T> Expiry<T> {
    async fn finish(self, fut: impl Future<Output = T>) -> T {
        match tokio::time::timeout_at(self.since + self.limit, fut).await {
            Ok(output) => output,
            Err(_) => (self.expired)(self.limit),
        }
    }
}

/// Makes a value (a registration, say) at the moment a future is abandoned.
type KeepWhileAbandoned = Box<dyn FnOnce() -> Box<dyn Send> + Send>;

/// What to do with the output of an abandoned future: any `FnOnce(T) -> impl Future<()>`.
pub(crate) trait OnAbandoned<T>: Send + 'static {
    fn call(self, output: T) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

impl<T, C, CF> OnAbandoned<T> for C
where
    C: FnOnce(T) -> CF + Send + 'static,
    CF: Future<Output = ()> + Send + 'static,
{
    fn call(self, output: T) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        Box::pin(self(output))
    }
}

impl<F, C> FinishOnDrop<F, C>
where
    F: Future + Send + ?Sized + 'static,
    F::Output: Send + 'static,
    C: OnAbandoned<F::Output>,
{
    pub(crate) fn new(fut: F, on_abandoned: C) -> Self
    where
        F: Sized,
    {
        FinishOnDrop::pinned(Box::pin(fut), on_abandoned)
    }

    /// As [`new`](Self::new), for a future boxed already (by a caller that passes it on before
    /// awaiting it: a large future is then moved as a pointer, not copied at each step).
    pub(crate) fn pinned(fut: Pin<Box<F>>, on_abandoned: C) -> Self {
        FinishOnDrop {
            fut: Some(fut),
            on_abandoned: Some(on_abandoned),
            tracker: None,
            keep: None,
            expiry: None,
        }
    }

    /// Bounds the background completion, for a future that arms no timer of its own because
    /// its caller bounds the wait: abandoned and still unfinished `limit` after `since`, it is
    /// dropped, and `on_abandoned` hears `expired(limit)`. Costs nothing while nobody abandons.
    pub(crate) fn expiring(
        mut self,
        since: tokio::time::Instant,
        limit: Duration,
        expired: fn(Duration) -> F::Output,
    ) -> Self {
        self.expiry = Some(Expiry {
            since,
            limit,
            expired,
        });
        self
    }

    /// Runs `start` synchronously when the future is abandoned and keeps what it returns until
    /// the background completion ends: the completion then counts as in flight from the very
    /// moment the caller stopped waiting, and costs nothing when nobody does.
    pub(crate) fn keeping_while_abandoned<G: Send + 'static>(
        mut self,
        start: impl FnOnce() -> G + Send + 'static,
    ) -> Self {
        self.keep = Some(Box::new(move || Box::new(start()) as Box<dyn Send>));
        self
    }

    /// Runs the background completion under `tracker`, so `Client::shutdown` can wait for it.
    pub(crate) fn tracked(mut self, tracker: &Background) -> Self {
        self.tracker = Some(tracker.clone());
        self
    }
}

// Only a `Pin<Box<F>>` is ever pinned, never a field in place, so moving out is fine.
impl<F, C> Unpin for FinishOnDrop<F, C>
where
    F: Future + Send + ?Sized + 'static,
    F::Output: Send + 'static,
    C: OnAbandoned<F::Output>,
{
}

impl<F, C> Future for FinishOnDrop<F, C>
where
    F: Future + Send + ?Sized + 'static,
    F::Output: Send + 'static,
    C: OnAbandoned<F::Output>,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let Some(fut) = self.fut.as_mut() else {
            // Polled after completion: a caller bug, but never a panic in library code.
            return Poll::Pending;
        };
        match fut.as_mut().poll(cx) {
            Poll::Ready(out) => {
                self.fut = None;
                Poll::Ready(out)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<F, C> Drop for FinishOnDrop<F, C>
where
    F: Future + Send + ?Sized + 'static,
    F::Output: Send + 'static,
    C: OnAbandoned<F::Output>,
{
    /// Finishes an abandoned future in the background.
    fn drop(&mut self) {
        let (Some(fut), Some(on_abandoned)) = (self.fut.take(), self.on_abandoned.take()) else {
            return;
        };
        let kept = self.keep.take().map(|start| start());
        let expiry = self.expiry.take();
        let finish = async move {
            let output = match expiry {
                Some(expiry) => expiry.finish(fut).await,
                None => fut.await,
            };
            on_abandoned.call(output).await;
            drop(kept);
        };
        match &self.tracker {
            // On the client's runtime, from any thread; warned about once if it has ended.
            Some(background) => spawn_from_drop(background, finish),
            // Untracked: on the current runtime. Without one there is nothing to finish on;
            // the lease then frees the key.
            None => {
                if let Ok(handle) = Handle::try_current() {
                    drop(handle.spawn(finish));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::sync::oneshot;
    use tokio::time::Instant;

    /// The bound the tests give: 5 s after `since`.
    const LIMIT: Duration = Duration::from_secs(5);

    /// Waits for `fut` 2 s, then abandons it (the bound runs from `since`, not from the
    /// abandonment), and answers what `on_abandoned` heard, and when, counted from `since`.
    async fn abandoned(
        fut: impl Future<Output = &'static str> + Send + 'static,
    ) -> (&'static str, Duration) {
        let (told, heard) = oneshot::channel();
        let since = Instant::now();
        let mut call = FinishOnDrop::new(fut, move |output| async move {
            let _ = told.send(output);
        })
        .expiring(since, LIMIT, |limit| match limit == LIMIT {
            true => "expired",
            false => "expired with another limit",
        });
        let waited = tokio::time::timeout(Duration::from_secs(2), &mut call).await;
        assert!(waited.is_err(), "abandoned before it ended");
        drop(call);
        // Bounded: an expiry that never fired fails here rather than hanging the test.
        let heard = tokio::time::timeout(Duration::from_secs(60), heard).await;
        let Ok(Ok(heard)) = heard else {
            panic!("not told in time: {heard:?}");
        };
        (heard, since.elapsed())
    }

    #[tokio::test(start_paused = true)]
    async fn an_abandoned_future_is_dropped_at_its_expiry() {
        let (heard, after) = abandoned(std::future::pending()).await;
        assert_eq!(heard, "expired");
        // The timer wheel rounds up to its next millisecond.
        assert!((5_000..5_010).contains(&after.as_millis()), "{after:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn an_abandoned_future_that_ends_in_time_is_heard() {
        let (heard, after) = abandoned(async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            "done"
        })
        .await;
        assert_eq!(heard, "done");
        assert!((3_000..3_010).contains(&after.as_millis()), "{after:?}");
    }
}
