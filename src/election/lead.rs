//! [`Election::lead`](crate::Election::lead): run a body while leading, stop it when the
//! leadership is lost, and campaign again if asked to.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use super::Election;
use super::leadership::{Leadership, Leading};
use crate::error::{Error, Result};

/// How [`Election::lead_with`] behaves when the leadership is lost. Defaults: no rejoin, one
/// second between campaigns that failed on a Redis error.
///
/// ```
/// use std::time::Duration;
/// use redlease::LeadOptions;
///
/// let options = LeadOptions::new().rejoin(true).retry_after(Duration::from_millis(500));
/// assert!(options.rejoin);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LeadOptions {
    /// Campaign again when the leadership is lost (and when a campaign fails on a Redis error
    /// that may pass: the server unreachable, a timeout), and run the body again in the new
    /// term. Defaults to `false`: the loss ends `lead` with [`Error::LeaseLost`].
    pub rejoin: bool,
    /// With `rejoin`, the pause after a campaign that failed on a Redis error. Defaults to one
    /// second; more than zero and at most 365 days (else `lead_with` answers
    /// [`Error::InvalidDuration`]: zero would campaign in a loop without a pause while Redis
    /// is down).
    pub retry_after: Duration,
}

impl Default for LeadOptions {
    fn default() -> Self {
        LeadOptions {
            rejoin: false,
            retry_after: Duration::from_secs(1),
        }
    }
}

impl LeadOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets [`rejoin`](LeadOptions::rejoin).
    #[must_use]
    pub fn rejoin(mut self, rejoin: bool) -> Self {
        self.rejoin = rejoin;
        self
    }

    /// Sets [`retry_after`](LeadOptions::retry_after).
    #[must_use]
    pub fn retry_after(mut self, pause: Duration) -> Self {
        self.retry_after = pause;
        self
    }
}

/// Errors a rejoining `lead` waits out rather than returning.
fn passing(error: &Error) -> bool {
    error.is_unavailable() || error.is_timeout() || error.is_lease_lost()
}

impl Election {
    /// Campaigns with `value`, runs `body` while leading, and resigns when it finishes: the
    /// common "run this on exactly one instance" in one call. The body is dropped (cancelled at
    /// its next `.await`) as soon as the leadership is lost; it gets a [`Leading`] with the
    /// term to pass along with its side effects.
    ///
    /// ```no_run
    /// # async fn demo(client: redlease::Client) -> redlease::Result<()> {
    /// # async fn publish_schedule(term: u64) {}
    /// let election = client.election("scheduler")?;
    /// election
    ///     .lead("host-a:8080", |leading| async move {
    ///         loop {
    ///             publish_schedule(leading.term()).await;
    ///             tokio::time::sleep(std::time::Duration::from_secs(10)).await;
    ///         }
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Election::campaign`]; and [`Error::LeaseLost`] when the leadership was lost before
    /// the body finished (the body was cancelled). Use [`lead_with`](Election::lead_with) with
    /// [`LeadOptions::rejoin`] to campaign again instead.
    ///
    /// # Cancel safety
    /// Cancel-safe: dropping the future drops the body and resigns in the background (or gives
    /// back a win still on its way).
    pub async fn lead<F, Fut, T>(&self, value: &str, body: F) -> Result<T>
    where
        F: FnMut(Leading) -> Fut,
        Fut: Future<Output = T>,
    {
        self.lead_with(LeadOptions::default(), value, body).await
    }

    /// [`Election::lead`] with options: with [`LeadOptions::rejoin`], a lost leadership (or a
    /// campaign that fails on an unreachable Redis) leads to a new campaign, and the body runs
    /// again in each new term until it finishes once.
    ///
    /// ```no_run
    /// # async fn demo(client: redlease::Client) -> redlease::Result<()> {
    /// use redlease::LeadOptions;
    ///
    /// let election = client.election("compactor")?;
    /// let rejoin = LeadOptions::new().rejoin(true);
    /// election
    ///     .lead_with(rejoin, "worker-7", |leading| async move {
    ///         println!("leading in term {}", leading.term());
    ///         std::future::pending::<()>().await // until the process stops
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// As [`Election::lead`]; with `rejoin`, only errors that do not pass by themselves (bad
    /// input, shutdown, a key of another type, a refused ACL) end it.
    /// [`Error::InvalidDuration`] before anything is sent for a `retry_after` of zero or over
    /// 365 days with `rejoin`.
    ///
    /// # Cancel safety
    /// As [`Election::lead`].
    pub async fn lead_with<F, Fut, T>(
        &self,
        options: LeadOptions,
        value: &str,
        mut body: F,
    ) -> Result<T>
    where
        F: FnMut(Leading) -> Fut,
        Fut: Future<Output = T>,
    {
        if options.rejoin {
            crate::config::check_duration("retry pause", options.retry_after)?;
        }
        // One turn per term; with `rejoin` it runs as long as the service does, each turn
        // waiting in a campaign or a body.
        loop {
            // Boxed: the campaign's future type is deep, and nested in a caller's spawned
            // future with the body's it overflowed the compiler's `Send` check (E0275).
            let campaign: Pin<Box<dyn Future<Output = Result<Leadership>> + Send + '_>> =
                Box::pin(self.campaign(value));
            let leadership = match campaign.await {
                Ok(leadership) => leadership,
                Err(e) if options.rejoin && passing(&e) => {
                    tracing::warn!(election = %self.name(), error = %e, "campaign failed; trying again");
                    tokio::time::sleep(options.retry_after).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            let lost = leadership.lost();
            let finished = tokio::select! {
                // A body that finishes in the same poll as the loss is taken as finished.
                biased;
                value = body(leadership.leading()) => Some(value),
                () = lost => None,
            };
            match finished {
                Some(value) => {
                    let term = leadership.term();
                    if let Err(e) = leadership.resign().await
                        && !e.is_lease_lost()
                    {
                        tracing::warn!(election = %self.name(), term, error = %e, "could not resign after the body finished; the lease ends the term");
                    }
                    return Ok(value);
                }
                None => {
                    let term = leadership.term();
                    drop(leadership);
                    if !options.rejoin {
                        return Err(Error::LeaseLost {
                            name: self.name().to_owned(),
                        });
                    }
                    tracing::warn!(election = %self.name(), term, "leadership lost; the body was stopped; campaigning again");
                }
            }
        }
    }
}
