//! The Lua scripts of `lua/` and their replies as typed values.
//!
//! Every reply is turned into an enum right here, so the rest of the crate never looks at raw
//! Redis values.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use crate::error::{Error, Result};

/// `acquire.lua` itself: MultiLock batches fall back to `EVAL` with it (see `multi/member.rs`).
pub(crate) const ACQUIRE_SOURCE: &str = include_str!("../lua/acquire.lua");
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_SOURCE));
pub(crate) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/release.lua")));
pub(crate) static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/renew.lua")));
pub(crate) static FORCE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/force_release.lua")));
pub(crate) static RAISE_FENCE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/raise_fence.lua")));

/// What `acquire.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Acquire {
    /// Taken (or re-entered): this owner's hold count on the server, and the fencing token.
    Acquired { count: u32, token: u64 },
    /// Another owner holds it; its remaining lease, when it has one.
    HeldElsewhere { ttl: Option<Duration> },
    /// Non-reentrant and already held by this owner.
    AlreadyHeld,
}

impl Acquire {
    pub fn parse(reply: &[i64]) -> Result<Self> {
        match *reply {
            [1, count, token] if count > 0 && token >= 0 => Ok(Acquire::Acquired {
                count: count.min(u32::MAX as i64) as u32,
                token: token as u64,
            }),
            [0, ttl] => Ok(Acquire::HeldElsewhere {
                ttl: (ttl >= 0).then(|| Duration::from_millis(ttl as u64)),
            }),
            [2, _] => Ok(Acquire::AlreadyHeld),
            _ => Err(protocol("acquire", reply)),
        }
    }
}

/// What `release.lua` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Release {
    /// The owner held nothing; nothing changed.
    NotHeld,
    /// The last hold went; the key is deleted and waiters were told.
    Released,
    /// Holds remain (their number).
    StillHeld(u32),
    /// The last hold went and the lock was handed to this client's waiter (with this fencing
    /// token, 0 when unfenced); nobody else was told.
    HandedOver { token: u64 },
}

impl Release {
    pub fn parse(reply: &[i64]) -> Result<Self> {
        match *reply {
            [-1, _] => Ok(Release::NotHeld),
            [0, 0] => Ok(Release::Released),
            [0, n] if n > 0 => Ok(Release::StillHeld(n.min(u32::MAX as i64) as u32)),
            [1, token] if token >= 0 => Ok(Release::HandedOver {
                token: token as u64,
            }),
            _ => Err(protocol("release", reply)),
        }
    }
}

fn protocol(script: &'static str, reply: &[i64]) -> Error {
    Error::Protocol {
        script,
        reply: format!("{reply:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquire_replies_parse() {
        let parse = |reply: &[i64]| Acquire::parse(reply).ok();
        assert_eq!(
            parse(&[1, 2, 7]),
            Some(Acquire::Acquired { count: 2, token: 7 })
        );
        assert_eq!(
            parse(&[0, 1500]),
            Some(Acquire::HeldElsewhere {
                ttl: Some(Duration::from_millis(1500))
            })
        );
        assert_eq!(parse(&[0, -1]), Some(Acquire::HeldElsewhere { ttl: None }));
        assert_eq!(parse(&[2, 1]), Some(Acquire::AlreadyHeld));
        assert!(Acquire::parse(&[9]).is_err());
        assert!(Acquire::parse(&[1, 0, 0]).is_err());
    }

    #[test]
    fn release_replies_parse() {
        let parse = |reply: &[i64]| Release::parse(reply).ok();
        assert_eq!(parse(&[-1, 0]), Some(Release::NotHeld));
        assert_eq!(parse(&[0, 0]), Some(Release::Released));
        assert_eq!(parse(&[0, 3]), Some(Release::StillHeld(3)));
        assert_eq!(parse(&[1, 9]), Some(Release::HandedOver { token: 9 }));
        assert!(Release::parse(&[0, -2]).is_err());
        assert!(Release::parse(&[2, 0]).is_err());
        assert!(Release::parse(&[0]).is_err());
    }
}
