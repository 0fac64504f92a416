//! Ownership of background work.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

/// Aborts its task when dropped: the owner of a background task holds one of these.
#[derive(Debug)]
pub(crate) struct AbortOnDrop(pub JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A future that, if dropped before it finished, is finished in the background instead, and its
/// output handed to `on_abandoned`.
///
/// This is how cancellation stays safe: a request already on the wire may still succeed on the
/// server, so its outcome must be observed (and undone) even when the caller stopped waiting.
pub(crate) struct FinishOnDrop<T: Send + 'static> {
    fut: Option<BoxFuture<T>>,
    on_abandoned: Option<Box<dyn FnOnce(T) -> BoxFuture<()> + Send>>,
    tracker: Option<TaskTracker>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<T: Send + 'static> FinishOnDrop<T> {
    pub fn new<F, C, CF>(fut: F, on_abandoned: C) -> Self
    where
        F: Future<Output = T> + Send + 'static,
        C: FnOnce(T) -> CF + Send + 'static,
        CF: Future<Output = ()> + Send + 'static,
    {
        FinishOnDrop {
            fut: Some(Box::pin(fut)),
            on_abandoned: Some(Box::new(move |out| Box::pin(on_abandoned(out)))),
            tracker: None,
        }
    }

    /// Runs the background completion under `tracker`, so `Client::shutdown` can wait for it.
    pub fn tracked(mut self, tracker: &TaskTracker) -> Self {
        self.tracker = Some(tracker.clone());
        self
    }
}

impl<T: Send + 'static> Future for FinishOnDrop<T> {
    type Output = T;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
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

impl<T: Send + 'static> Drop for FinishOnDrop<T> {
    fn drop(&mut self) {
        let (Some(fut), Some(on_abandoned)) = (self.fut.take(), self.on_abandoned.take()) else {
            return;
        };
        // Without a runtime there is nothing to finish on; the lease then frees the key.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let finish = async move { on_abandoned(fut.await).await };
            match &self.tracker {
                Some(tracker) => drop(tracker.spawn_on(finish, &handle)),
                None => drop(handle.spawn(finish)),
            }
        }
    }
}
