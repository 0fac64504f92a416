//! A family script's integer reply, typed once for every kind.

use std::time::Duration;

use crate::error::{Error, Result};

/// A family script's integer reply, typed here for every kind: each script says what its
/// answers mean, and an answer outside them is one error, [`Error::Protocol`] naming the
/// script, instead of a guess at each call site.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reply {
    script: &'static str,
    n: i64,
}

impl Reply {
    pub(crate) fn new(script: &'static str, n: i64) -> Reply {
        Reply { script, n }
    }

    /// A yes or no (set, renewed, released, withdrawn, taken): 1 or 0.
    ///
    /// # Errors
    /// [`Error::Protocol`] for any other answer.
    pub(crate) fn flag(self) -> Result<bool> {
        match self.n {
            1 => Ok(true),
            0 => Ok(false),
            _ => Err(self.unexpected()),
        }
    }

    /// A count (permits, a latch's count, holds left), never negative.
    ///
    /// # Errors
    /// [`Error::Protocol`] for a negative answer.
    pub(crate) fn count(self) -> Result<u64> {
        u64::try_from(self.n).map_err(|_| self.unexpected())
    }

    /// A release's answer: the holds left (`Some`), or `None` when the owner held nothing
    /// (`-1`).
    ///
    /// # Errors
    /// [`Error::Protocol`] for any other negative answer.
    pub(crate) fn holds_left(self) -> Result<Option<u64>> {
        match self.n {
            -1 => Ok(None),
            _ => self.count().map(Some),
        }
    }

    /// An acquisition's answer (`lua/permits.lua`, `lua/rwlock.lua`): a hold count `n >= 1`
    /// granted, `0` an upgrade refused, `-1` refused, `n <= -2` refused until `-n - 2` ms from
    /// now at the latest. Every integer is one of these.
    pub(crate) fn taken(self) -> Taken {
        match self.n {
            1.. => Taken::Granted,
            0 => Taken::WouldDeadlock,
            -1 => Taken::Refused(None),
            n => Taken::Refused(Some(Duration::from_millis((-2 - n) as u64 + 1))),
        }
    }

    fn unexpected(self) -> Error {
        Error::Protocol {
            script: self.script,
            reply: self.n.to_string(),
        }
    }
}

/// What a family script answered to an acquisition ([`Reply::taken`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Taken {
    Granted,
    /// Not now: worth asking again after this long at most (`None`: no deadline known).
    Refused(Option<Duration>),
    /// A write asked by an owner that reads and does not write: an upgrade would deadlock.
    WouldDeadlock,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(n: i64) -> Reply {
        Reply::new("test", n)
    }

    #[test]
    fn a_reply_outside_what_the_script_answers_is_a_protocol_error() {
        assert!(matches!(reply(1).flag(), Ok(true)));
        assert!(matches!(reply(0).flag(), Ok(false)));
        for n in [2, -1, i64::MIN] {
            let answer = reply(n).flag();
            assert!(
                matches!(&answer, Err(Error::Protocol { script: "test", reply }) if *reply == n.to_string()),
                "{answer:?}"
            );
        }
        assert!(matches!(reply(7).count(), Ok(7)));
        assert!(matches!(reply(-1).count(), Err(Error::Protocol { .. })));
        assert!(matches!(reply(-1).holds_left(), Ok(None)));
        assert!(matches!(reply(0).holds_left(), Ok(Some(0))));
        assert!(matches!(
            reply(-2).holds_left(),
            Err(Error::Protocol { .. })
        ));
    }

    #[test]
    fn every_acquisition_answer_is_taken_or_refused() {
        assert_eq!(reply(3).taken(), Taken::Granted);
        assert_eq!(reply(0).taken(), Taken::WouldDeadlock);
        assert_eq!(reply(-1).taken(), Taken::Refused(None));
        assert_eq!(
            reply(-2 - 40).taken(),
            Taken::Refused(Some(Duration::from_millis(41)))
        );
    }
}
