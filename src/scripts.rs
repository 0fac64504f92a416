//! The lock's Lua scripts of `lua/` and their replies as typed values.
//!
//! Every reply of a lock script is turned into an enum right here, so the rest of the crate
//! never looks at raw Redis values; the lock family's integer replies are typed once in
//! `family/reply.rs`.

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use crate::error::{Error, Result};

/// `acquire.lua` as sent: MultiLock batches fall back to `EVAL` with it (see `multi/member.rs`).
/// The scripts that hand out fencing tokens start with `fence.lua`, the one place that says how
/// a token is made.
pub(crate) const ACQUIRE_SOURCE: &str = concat!(
    include_str!("../lua/acquire_plain.lua"),
    include_str!("../lua/queue.lua"),
    include_str!("../lua/acquire_wait.lua"),
    include_str!("../lua/fence.lua"),
    include_str!("../lua/queue_lock.lua"),
    include_str!("../lua/acquire.lua")
);
pub(crate) static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_SOURCE));
/// `release.lua` as sent (the cluster's variant is made from it, `node/deploy/shape.rs`).
pub(crate) const RELEASE_SOURCE: &str = concat!(
    include_str!("../lua/release_plain.lua"),
    include_str!("../lua/queue.lua"),
    include_str!("../lua/fence.lua"),
    include_str!("../lua/queue_lock.lua"),
    include_str!("../lua/release.lua")
);
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_SOURCE));
/// `withdraw.lua` as sent.
pub(crate) const WITHDRAW_SOURCE: &str = concat!(
    include_str!("../lua/queue.lua"),
    include_str!("../lua/fence.lua"),
    include_str!("../lua/queue_lock.lua"),
    include_str!("../lua/withdraw.lua")
);
pub(crate) static WITHDRAW: LazyLock<Script> = LazyLock::new(|| Script::new(WITHDRAW_SOURCE));
pub(crate) static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/renew.lua")));
/// `force_release.lua` as sent.
pub(crate) const FORCE_RELEASE_SOURCE: &str = concat!(
    include_str!("../lua/queue.lua"),
    include_str!("../lua/fence.lua"),
    include_str!("../lua/queue_lock.lua"),
    include_str!("../lua/force_release.lua")
);
pub(crate) static FORCE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(FORCE_RELEASE_SOURCE));
pub(crate) static RAISE_FENCE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(concat!(
        include_str!("../lua/fence.lua"),
        include_str!("../lua/raise_fence.lua")
    ))
});

/// `waiters.lua`: reads a waiter queue, changing nothing.
pub(crate) static WAITERS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/waiters.lua")));

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
    pub(crate) fn parse(reply: &Value) -> Result<Self> {
        let count = |n: i64| n.min(u32::MAX as i64) as u32;
        match reply {
            Value::Int(n) if *n >= 1 => Ok(Acquire::Acquired {
                count: count(*n),
                token: 0,
            }),
            Value::Int(0) => Ok(Acquire::AlreadyHeld),
            Value::Int(n) => {
                let ttl = -2 - n;
                Ok(Acquire::HeldElsewhere {
                    ttl: (ttl >= 0).then(|| Duration::from_millis(ttl as u64)),
                })
            }
            Value::Array(pair) => match pair.as_slice() {
                [Value::Int(n), Value::Int(token)] if *n >= 1 && *token >= 0 => {
                    Ok(Acquire::Acquired {
                        count: count(*n),
                        token: *token as u64,
                    })
                }
                _ => Err(protocol("acquire", reply)),
            },
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
    pub(crate) fn parse(reply: i64) -> Result<Self> {
        match reply {
            -1 => Ok(Release::NotHeld),
            0 => Ok(Release::Released),
            n if n > 0 => Ok(Release::StillHeld(n.min(u32::MAX as i64) as u32)),
            n => Ok(Release::HandedOver {
                token: (-2 - n) as u64,
            }),
        }
    }
}

/// What `renew.lua` or `renew_node.lua` answered for a call of `locks` locks: per lock, in
/// order, whether it was renewed (only a 1 is trusted; a lock not renewed by node is renewed
/// again the per-slot way, which says for certain).
pub(crate) fn renewed(script: &'static str, reply: Value, locks: usize) -> Result<Vec<bool>> {
    let Value::Array(flags) = &reply else {
        return Err(protocol(script, &reply));
    };
    if flags.len() != locks {
        return Err(Error::Protocol {
            script,
            reply: format!("{} flags for {locks} locks", flags.len()),
        });
    }
    flags
        .iter()
        .map(|flag| match flag {
            Value::Int(n) => Ok(*n == 1),
            _ => Err(protocol(script, &reply)),
        })
        .collect()
}

fn protocol(script: &'static str, reply: &Value) -> Error {
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
        let parse = |reply: Value| Acquire::parse(&reply).ok();
        let pair = |a, b| Value::Array(vec![Value::Int(a), Value::Int(b)]);
        assert_eq!(
            parse(Value::Int(2)),
            Some(Acquire::Acquired { count: 2, token: 0 })
        );
        assert_eq!(
            parse(pair(2, 7)),
            Some(Acquire::Acquired { count: 2, token: 7 })
        );
        assert_eq!(
            parse(Value::Int(-1502)),
            Some(Acquire::HeldElsewhere {
                ttl: Some(Duration::from_millis(1500))
            })
        );
        assert_eq!(
            parse(Value::Int(-2)),
            Some(Acquire::HeldElsewhere {
                ttl: Some(Duration::ZERO)
            })
        );
        assert_eq!(
            parse(Value::Int(-1)),
            Some(Acquire::HeldElsewhere { ttl: None })
        );
        assert_eq!(parse(Value::Int(0)), Some(Acquire::AlreadyHeld));
        assert_eq!(parse(pair(0, 7)), None);
        assert_eq!(parse(pair(1, -1)), None);
        assert_eq!(parse(Value::Nil), None);
    }

    #[test]
    fn renewal_replies_parse() {
        let ints = |v: &[i64]| Value::Array(v.iter().map(|&n| Value::Int(n)).collect());
        assert_eq!(
            renewed("renew", ints(&[1, 0, 1]), 3).ok(),
            Some(vec![true, false, true])
        );
        assert!(renewed("renew", ints(&[1, 0]), 3).is_err(), "a flag short");
        assert!(renewed("renew", Value::Int(1), 1).is_err(), "not an array");
        let mixed = Value::Array(vec![Value::Int(1), Value::Nil]);
        assert!(renewed("renew", mixed, 2).is_err(), "not an integer");
    }

    #[test]
    fn release_replies_parse() {
        let parse = |reply| Release::parse(reply).ok();
        assert_eq!(parse(-1), Some(Release::NotHeld));
        assert_eq!(parse(0), Some(Release::Released));
        assert_eq!(parse(3), Some(Release::StillHeld(3)));
        assert_eq!(parse(-2), Some(Release::HandedOver { token: 0 }));
        assert_eq!(parse(-11), Some(Release::HandedOver { token: 9 }));
    }
}
