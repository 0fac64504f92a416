//! The pause between two tries of something that failed: it doubles from a first pause up to
//! a longest one while the failures go on, and starts over after a success. Every retry loop
//! of the client uses it, with one of the bounds named here; a polling waiter's pause, which
//! is also drawn at random, is `pubsub/channel.rs`'s `Poll`.

use std::time::Duration;

#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    first: Duration,
    max: Duration,
    next: Duration,
}

/// The longest pause between two connection attempts to a server: the command connection's
/// own reconnections (`node/deploy/dial.rs`) and the loss notice's, so both are back about
/// together after an outage.
pub(crate) const LONGEST_RECONNECT: Duration = Duration::from_millis(500);

impl Backoff {
    /// Connecting again to a server (the loss notice's connections, a cluster primary's, a
    /// hold's check that could not settle): from 10 ms up to [`LONGEST_RECONNECT`].
    pub(crate) const fn reconnect() -> Backoff {
        Backoff::new(Duration::from_millis(10), LONGEST_RECONNECT)
    }

    /// A call sent again while a cluster or a Sentinel group is in transition (a failover, a
    /// slot moving): from 20 ms up to 200 ms, within the call's own time limit.
    pub(crate) const fn resend() -> Backoff {
        Backoff::new(Duration::from_millis(20), Duration::from_millis(200))
    }

    /// The subscriber connecting, or subscribing to a channel, again: from `first` (20 ms to
    /// subscribe, 50 ms to connect) up to 1 s, so waiters that lost their channel hear again
    /// soon and a server that is down is not asked more than once a second.
    pub(crate) const fn subscriber(first: Duration) -> Backoff {
        Backoff::new(first, Duration::from_secs(1))
    }

    /// Work that must get through eventually but is in nobody's way meanwhile (a Sentinel
    /// listener's reconnection, a queue place's withdrawal): from 100 ms up to 5 s.
    pub(crate) const fn patient() -> Backoff {
        Backoff::new(Duration::from_millis(100), Duration::from_secs(5))
    }

    pub(crate) const fn new(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            next: first,
        }
    }

    /// The pause the next failure will take.
    pub(crate) fn peek(&self) -> Duration {
        self.next
    }

    /// The pause to take now; the one after is twice as long, up to the longest.
    pub(crate) fn pause(&mut self) -> Duration {
        let now = self.next;
        self.next = (self.next * 2).min(self.max);
        now
    }

    /// Sleeps for [`pause`](Backoff::pause).
    pub(crate) async fn sleep(&mut self) {
        tokio::time::sleep(self.pause()).await;
    }

    /// After a success: the next failure pauses for the first pause again.
    pub(crate) fn reset(&mut self) {
        self.next = self.first;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_up_to_the_longest_and_starts_over() {
        let ms = Duration::from_millis;
        let mut backoff = Backoff::new(ms(10), ms(35));
        let pauses: Vec<Duration> = (0..4).map(|_| backoff.pause()).collect();
        assert_eq!(pauses, [ms(10), ms(20), ms(35), ms(35)]);
        backoff.reset();
        assert_eq!(backoff.peek(), ms(10));
    }
}
