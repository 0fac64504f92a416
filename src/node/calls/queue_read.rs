//! Reading a waiter queue (`lua/queue.lua`) without changing it (`lua/waiters.lua`): who waits,
//! in what order, since when, on the server's clock.

use redis::Value;

use crate::error::{Error, Result};
use crate::node::{Node, evalsha};
use crate::scripts;

/// How many names of a queue one read looks at, from the head. The script walks the list
/// with `LINDEX` (a right every user has, docs/acl.md; `LRANGE` is not one), and blocks the
/// server while it runs: 1,000 names are read in well under a millisecond, and a queue longer
/// than that is not one a person reads name by name.
pub(crate) const MAX_WAITERS_READ: usize = 1_000;

/// One live entry of a queue, as the server has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct QueueEntry {
    /// The name queued: an owner field (a lock), or `<owner field>#<wait id>` (the family).
    pub name: String,
    /// When the entry dies without another attempt of its waiter (server clock, ms).
    pub deadline_ms: u64,
    /// When the name was listed (server clock, ms); `None` for an entry written by a version
    /// that did not keep it.
    pub listed_ms: Option<u64>,
}

/// A queue read at one instant.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct QueueView {
    /// The server's clock when it was read, in ms.
    pub now_ms: u64,
    /// The live entries, first to be granted first.
    pub entries: Vec<QueueEntry>,
}

impl Node {
    /// The queue of the object whose key is `key` (`<key>:q`, `<key>:qd`), read in one script
    /// call that writes nothing.
    ///
    /// # Errors
    /// [`Error::Timeout`], [`Error::Redis`] (a queue key of another type: WRONGTYPE), or
    /// [`Error::Protocol`] for a reply of another shape.
    pub(crate) async fn read_queue(&self, key: &str) -> Result<QueueView> {
        let list = format!("{key}:q");
        let entries = format!("{key}:qd");
        let mut cmd = evalsha(&scripts::WAITERS, 2, 1, list.len() + entries.len() + 8);
        cmd.arg(&list).arg(&entries).arg(MAX_WAITERS_READ);
        let reply: Value = self
            .eval_retried("read queue", key, &scripts::WAITERS, &cmd)
            .await?;
        parse(&reply).ok_or_else(|| Error::Protocol {
            script: "waiters",
            reply: format!("{reply:?}"),
        })
    }
}

fn int(value: &Value) -> Option<u64> {
    match value {
        Value::Int(n) => u64::try_from(*n).ok(),
        Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?.parse().ok(),
        _ => None,
    }
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// When a name was listed, in ms, from its record `<s> <us>` (TIME's reply, `lua/queue.lua`);
/// `None` without one (an entry of an older version) or for a damaged one.
fn listed_ms(record: &str) -> Option<u64> {
    let (s, us) = record.split_once(' ')?;
    let (s, us): (u64, u64) = (s.parse().ok()?, us.parse().ok()?);
    s.checked_mul(1000)?.checked_add(us / 1000)
}

/// `{now, name, deadline, listed or '', ...}` as a [`QueueView`]; `None` for another shape.
fn parse(reply: &Value) -> Option<QueueView> {
    let Value::Array(items) = reply else {
        return None;
    };
    let (now, rest) = items.split_first()?;
    if rest.len() % 3 != 0 {
        return None;
    }
    let entries = rest
        .chunks_exact(3)
        .map(|e| {
            Some(QueueEntry {
                name: text(&e[0])?,
                deadline_ms: int(&e[1])?,
                listed_ms: listed_ms(&text(&e[2])?),
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(QueueView {
        now_ms: int(now)?,
        entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn a_reply_parses_in_order_and_a_missing_listing_is_none() {
        let reply = Value::Array(vec![
            Value::Int(1_000),
            bulk("a:1"),
            Value::Int(5_000),
            bulk("0 900123"),
            bulk("b:2"),
            Value::Int(6_000),
            bulk(""),
        ]);
        let view = parse(&reply);
        assert_eq!(
            view,
            Some(QueueView {
                now_ms: 1_000,
                entries: vec![
                    QueueEntry {
                        name: "a:1".into(),
                        deadline_ms: 5_000,
                        listed_ms: Some(900),
                    },
                    QueueEntry {
                        name: "b:2".into(),
                        deadline_ms: 6_000,
                        listed_ms: None,
                    },
                ],
            })
        );
    }

    #[test]
    fn a_listing_record_is_read_to_the_millisecond_and_a_damaged_one_is_none() {
        assert_eq!(listed_ms("1796457805 95123"), Some(1_796_457_805_095));
        assert_eq!(listed_ms("1796457805"), None);
        assert_eq!(listed_ms("soon 5"), None);
        assert_eq!(listed_ms(""), None);
    }

    #[test]
    fn a_reply_of_another_shape_is_none() {
        assert_eq!(parse(&Value::Int(1)), None);
        assert_eq!(parse(&Value::Array(vec![])), None);
        assert_eq!(parse(&Value::Array(vec![Value::Int(1), bulk("a:1")])), None);
        assert_eq!(
            parse(&Value::Array(vec![
                Value::Int(1),
                bulk("a:1"),
                bulk("soon"),
                bulk("")
            ])),
            None
        );
    }
}
