//! The one wait loop under every kind that waits: the lock and the fair lock, the semaphores,
//! both sides of the read-write lock, the latch, and the rounds of `MultiLock` and `RedLock`.
//! Attempt; refused with time left, let the waiter get ready to wait (listen, take its turn)
//! and attempt again at once if it says so; then nap until a message, the kind's own wake-ups
//! or the nap's end, and attempt again; until done or the wait is spent.
//!
//! What a kind adds is a [`Waiter`]: how it attempts (and takes a grant its messages told of),
//! what it does after a refusal (every single-object waiter starts listening there and attempts
//! once more, since a message sent before it listened would be missed; the lock takes turns
//! with this client's other contenders; a `MultiLock` listens on every member held elsewhere),
//! and how it naps (the lock may be handed over by a release of this client meanwhile).

use std::future::Future;
use std::time::Duration;

use crate::error::Result;
use crate::terms::Wait;

/// How long a waiter sleeps at most when its refusal named no deadline: messages can be lost (a
/// reconnect, a failover), a key may have no expiry (PERSISTed), and a latch or semaphore has
/// no lease to time a nap by.
pub(crate) const NAP: Duration = Duration::from_secs(1);

/// What one attempt found.
pub(crate) enum Attempt<T> {
    /// Done: the value to return.
    Done(T),
    /// Refused: look again after a message, or after this long at most (`None`: [`NAP`]),
    /// never longer than [`Waiter::longest_nap`].
    Again(Option<Duration>),
}

/// After a refusal with time left, what the waiter does next ([`Waiter::refused`]).
pub(crate) enum Then {
    /// Nap, then attempt.
    Nap,
    /// Attempt again at once.
    Attempt,
}

/// One waiter's part of the loop. Each method is called from the loop only, in its order.
pub(crate) trait Waiter: Send {
    type Output: Send;

    /// One attempt.
    fn attempt(&mut self) -> impl Future<Output = Result<Attempt<Self::Output>>> + Send;

    /// After a refusal with time left: gets ready to nap (starts listening, waits for its
    /// turn). A waiter with nothing to listen to naps at once.
    fn refused(&mut self) -> impl Future<Output = Result<Then>> + Send {
        async { Ok(Then::Nap) }
    }

    /// The longest nap between attempts (a queued waiter must attempt often enough to keep
    /// its place).
    fn longest_nap(&self) -> Duration {
        Duration::MAX
    }

    /// Sleeps until a message or `nap` has passed (one with nothing to listen to: `nap`). A
    /// waiter may end the wait here with the value (the lock handed over by a release of this
    /// client).
    fn nap(&mut self, nap: Duration) -> impl Future<Output = Result<Option<Self::Output>>> + Send {
        async move {
            tokio::time::sleep(nap).await;
            Ok(None)
        }
    }

    /// The wait ran out after a refusal: `Ok` to answer "not acquired", or why it failed
    /// instead (a `RedLock` whose last round could not reach a majority).
    fn spent(&mut self) -> Result<()> {
        Ok(())
    }
}

/// Runs `waiter` until an attempt is done (`Some`) or `wait` is spent (`None`).
///
/// # Cancel safety
/// Dropping the future leaves only what the waiter's own calls leave.
pub(crate) async fn run<W: Waiter>(wait: Wait, waiter: &mut W) -> Result<Option<W::Output>> {
    loop {
        let nap = match waiter.attempt().await? {
            Attempt::Done(value) => return Ok(Some(value)),
            Attempt::Again(nap) => nap.unwrap_or(NAP),
        };
        if wait.remaining().is_none() {
            waiter.spent()?;
            return Ok(None);
        }
        if let Then::Attempt = waiter.refused().await? {
            continue;
        }
        // Bounded now, not at the refusal: `refused` may have waited, and changed the waiter.
        let nap = nap.min(waiter.longest_nap());
        let nap = match wait.remaining() {
            None => {
                waiter.spent()?;
                return Ok(None);
            }
            Some(left) => left.map_or(nap, |left| left.min(nap)),
        };
        if let Some(value) = waiter.nap(nap).await? {
            return Ok(Some(value));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use std::time::Instant;

    /// A waiter that answers from a script and records what the loop asked of it.
    struct Scripted {
        /// The attempts' answers, in order; then `Again(None)`.
        answers: Vec<Attempt<u32>>,
        /// What `refused` says, in order; then `Nap`.
        then: Vec<Then>,
        /// How long `refused` takes.
        refused_takes: Duration,
        longest: Duration,
        /// `longest_nap` from the first `refused` on.
        longest_after_refused: Option<Duration>,
        calls: Vec<&'static str>,
        naps: Vec<Duration>,
        /// What `spent` answers.
        spent: Option<Error>,
    }

    fn scripted(answers: Vec<Attempt<u32>>) -> Scripted {
        Scripted {
            answers,
            then: Vec::new(),
            refused_takes: Duration::ZERO,
            longest: Duration::MAX,
            longest_after_refused: None,
            calls: Vec::new(),
            naps: Vec::new(),
            spent: None,
        }
    }

    impl Waiter for Scripted {
        type Output = u32;

        async fn attempt(&mut self) -> Result<Attempt<u32>> {
            self.calls.push("attempt");
            Ok(match self.answers.is_empty() {
                true => Attempt::Again(None),
                false => self.answers.remove(0),
            })
        }

        async fn refused(&mut self) -> Result<Then> {
            self.calls.push("refused");
            tokio::time::sleep(self.refused_takes).await;
            if let Some(longest) = self.longest_after_refused.take() {
                self.longest = longest;
            }
            Ok(match self.then.is_empty() {
                true => Then::Nap,
                false => self.then.remove(0),
            })
        }

        fn longest_nap(&self) -> Duration {
            self.longest
        }

        /// Records the nap and sleeps a millisecond of it at most (the tests stay fast).
        async fn nap(&mut self, nap: Duration) -> Result<Option<u32>> {
            self.calls.push("nap");
            self.naps.push(nap);
            tokio::time::sleep(nap.min(Duration::from_millis(1))).await;
            Ok(None)
        }

        fn spent(&mut self) -> Result<()> {
            self.calls.push("spent");
            self.spent.take().map_or(Ok(()), Err)
        }
    }

    fn within(wait: Duration) -> Wait {
        Wait::Until(Instant::now() + wait)
    }

    #[tokio::test]
    async fn a_refusal_gets_ready_naps_and_attempts_again() {
        let answers = vec![
            Attempt::Again(Some(Duration::from_millis(2))),
            Attempt::Done(7),
        ];
        let mut waiter = scripted(answers);
        let done = run(within(Duration::from_secs(5)), &mut waiter).await;
        assert!(matches!(done, Ok(Some(7))));
        assert_eq!(waiter.calls, ["attempt", "refused", "nap", "attempt"]);
        assert_eq!(waiter.naps, [Duration::from_millis(2)]);
    }

    #[tokio::test]
    async fn an_unknown_nap_is_nap() {
        let mut waiter = scripted(vec![Attempt::Again(None), Attempt::Done(0)]);
        assert!(matches!(run(Wait::Forever, &mut waiter).await, Ok(Some(0))));
        assert_eq!(waiter.naps, [NAP]);
    }

    #[tokio::test]
    async fn a_nap_is_bounded_by_the_longest_asked_after_refused() {
        let answers = vec![
            Attempt::Again(Some(Duration::from_secs(60))),
            Attempt::Done(1),
        ];
        let mut waiter = scripted(answers);
        waiter.longest_after_refused = Some(Duration::from_millis(7));
        assert!(matches!(run(Wait::Forever, &mut waiter).await, Ok(Some(1))));
        assert_eq!(waiter.naps, [Duration::from_millis(7)]);
    }

    #[tokio::test]
    async fn a_nap_is_bounded_by_the_remaining_wait() {
        let answers = vec![
            Attempt::Again(Some(Duration::from_secs(60))),
            Attempt::Done(0),
        ];
        let mut waiter = scripted(answers);
        assert!(matches!(
            run(within(Duration::from_secs(5)), &mut waiter).await,
            Ok(Some(0))
        ));
        assert!(
            waiter.naps[0] <= Duration::from_secs(5),
            "{:?}",
            waiter.naps
        );
    }

    #[tokio::test]
    async fn then_attempt_skips_the_nap() {
        let answers = vec![Attempt::Again(None), Attempt::Done(2)];
        let mut waiter = scripted(answers);
        waiter.then = vec![Then::Attempt];
        let done = run(within(Duration::from_secs(5)), &mut waiter).await;
        assert!(matches!(done, Ok(Some(2))));
        assert_eq!(waiter.calls, ["attempt", "refused", "attempt"]);
        assert!(waiter.naps.is_empty());
    }

    #[tokio::test]
    async fn a_single_attempt_is_spent_at_its_first_refusal_and_may_fail_there() {
        let mut waiter = scripted(vec![]);
        assert!(matches!(run(Wait::Once, &mut waiter).await, Ok(None)));
        assert_eq!(waiter.calls, ["attempt", "spent"]);
        let mut waiter = scripted(vec![]);
        waiter.spent = Some(Error::Shutdown);
        let failed = run(Wait::Once, &mut waiter).await;
        assert!(matches!(failed, Err(Error::Shutdown)));
    }

    #[tokio::test]
    async fn a_wait_spent_while_refused_is_spent_and_may_fail_there() {
        let mut waiter = scripted(vec![]);
        waiter.refused_takes = Duration::from_millis(60);
        waiter.spent = Some(Error::Shutdown);
        let failed = run(within(Duration::from_millis(30)), &mut waiter).await;
        assert!(matches!(failed, Err(Error::Shutdown)));
        assert_eq!(waiter.calls, ["attempt", "refused", "spent"]);
    }

    #[tokio::test]
    async fn a_wait_that_runs_out_stops_attempting() {
        let mut waiter = scripted(vec![]);
        waiter.longest = Duration::from_millis(5);
        let started = Instant::now();
        let ended = run(within(Duration::from_millis(30)), &mut waiter).await;
        assert!(matches!(ended, Ok(None)));
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(waiter.calls.last(), Some(&"spent"));
        let attempts = waiter.calls.iter().filter(|c| **c == "attempt").count();
        assert!(
            (2..=40).contains(&attempts),
            "{attempts} attempts in 30 ms of 1 ms naps"
        );
    }
}
