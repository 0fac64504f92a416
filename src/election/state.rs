//! The election's server state (`lua/election.lua`): its keys, the script's operations, and
//! its replies as typed values.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use crate::error::{Error, Result};
use crate::identity::ClientInfo;
use crate::keys::LockKeys;
use crate::node::FamilyScript;
use crate::shared::Client;

static SCRIPT: FamilyScript = FamilyScript::new("election", include_str!("../../lua/election.lua"));

/// How long an election's state and log outlive the lock's lease: a vacancy shorter than this
/// keeps the revision and `transitions` counting on; after a longer one they start again (an
/// observer then sees a restart). Bounded, so an election that is no longer used leaves nothing.
pub(crate) const RETENTION: Duration = Duration::from_secs(3600);

/// The keys of election `N`: the lock `P:{N}`, `P:{N}:election`, `P:{N}:election:log` and the
/// channel `P:{N}:election:changed`, all in the slot of the hash tag `{N}`.
#[derive(Debug)]
pub(crate) struct ElectionKeys {
    pub lock: Arc<LockKeys>,
    pub state: String,
    pub log: String,
    pub channel: Arc<str>,
}

impl ElectionKeys {
    pub(crate) fn new(lock: Arc<LockKeys>) -> ElectionKeys {
        let state = format!("{}:election", lock.hash);
        ElectionKeys {
            log: format!("{state}:log"),
            channel: format!("{state}:changed").into(),
            state,
            lock,
        }
    }

    fn all(&self) -> [&str; 4] {
        [&self.lock.hash, &self.state, &self.log, &self.channel]
    }
}

/// Why the election's state changed last.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ChangeCause {
    /// A candidate won: a new term began.
    Elected,
    /// The leader published a new value ([`Leadership::proclaim`](crate::Leadership::proclaim)).
    Proclaimed,
    /// The leader resigned (or its [`Leadership`](crate::Leadership) was dropped, or its
    /// client shut down).
    Resigned,
    /// The leader's client found its lease lost (the watchdog found the lock gone, or Redis
    /// stayed unreachable past the leadership's validity) and said so.
    Lost,
    /// The leader's lease ran out and its client said nothing first (a crash, a pause, a
    /// partition); recorded by the first client that looked.
    Expired,
}

impl ChangeCause {
    fn parse(why: &str) -> Option<ChangeCause> {
        Some(match why {
            "elected" => ChangeCause::Elected,
            "proclaimed" => ChangeCause::Proclaimed,
            "resigned" => ChangeCause::Resigned,
            "lost" => ChangeCause::Lost,
            "expired" => ChangeCause::Expired,
            _ => return None,
        })
    }

    /// The cause as one lowercase word (`elected`, `proclaimed`, `resigned`, `lost`,
    /// `expired`), as the CLI prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeCause::Elected => "elected",
            ChangeCause::Proclaimed => "proclaimed",
            ChangeCause::Resigned => "resigned",
            ChangeCause::Lost => "lost",
            ChangeCause::Expired => "expired",
        }
    }
}

/// The leader of an election, from [`Election::leader`](crate::Election::leader) and
/// [`Election::observe`](crate::Election::observe).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The value the leader published (at its win, or by its last `proclaim`).
    pub value: String,
    /// Its term: its fencing token, greater than every earlier term of the election.
    pub term: u64,
    /// The process that leads (host, pid, program; its client's id).
    pub process: ClientInfo,
    /// When its term began, in milliseconds since the Unix epoch by the server's clock.
    pub since_ms: u64,
}

/// One recorded state of the election (the current one, or one of the log).
#[derive(Debug, Clone)]
pub(crate) struct Record {
    pub revision: u64,
    pub transitions: u64,
    pub cause: Option<ChangeCause>,
    /// The leader, while the state is `leading`.
    pub leader: Option<Leader>,
    /// When this change was recorded (server clock, ms).
    pub at_ms: u64,
}

impl Record {
    /// Decodes `<len>:<bytes>` fields in the order of `FIELDS` in `lua/election.lua`.
    fn decode(raw: &[u8]) -> Option<Record> {
        let mut fields: Vec<String> = Vec::with_capacity(15);
        let mut rest = raw;
        while !rest.is_empty() {
            let colon = rest.iter().position(|&b| b == b':')?;
            let len: usize = std::str::from_utf8(&rest[..colon]).ok()?.parse().ok()?;
            let body = rest.get(colon + 1..colon + 1 + len)?;
            fields.push(String::from_utf8_lossy(body).into_owned());
            rest = &rest[colon + 1 + len..];
        }
        let [
            rev,
            transitions,
            state,
            why,
            term,
            _field,
            client,
            host,
            pid,
            program,
            started_ms,
            version,
            value,
            since_ms,
            at_ms,
        ] = <[String; 15]>::try_from(fields).ok()?;
        let number = |s: &str| s.parse::<u64>().ok();
        let leader = match state.as_str() {
            "leading" => Some(Leader {
                value,
                term: number(&term)?,
                process: ClientInfo {
                    id: client,
                    host,
                    pid: pid.parse().ok()?,
                    program,
                    started_ms: number(&started_ms).unwrap_or(0),
                    version,
                },
                since_ms: number(&since_ms).unwrap_or(0),
            }),
            _ => None,
        };
        Some(Record {
            revision: number(&rev)?,
            transitions: number(&transitions).unwrap_or(0),
            cause: ChangeCause::parse(&why),
            leader,
            at_ms: number(&at_ms).unwrap_or(0),
        })
    }
}

/// What `read` found.
#[derive(Debug)]
pub(crate) struct Read {
    /// The current state; `None` when the election has none (never used, or expired).
    pub current: Option<Record>,
    /// The lock's remaining lease; `None` when free or without expiry.
    pub lock_ttl: Option<Duration>,
    /// The changes after the revision asked for, oldest first.
    pub changes: Vec<Record>,
}

/// What `won` answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Won {
    /// Recorded as the leader at this revision; the election had been recorded vacant this
    /// long before (when known).
    Recorded {
        revision: u64,
        vacant_for: Option<Duration>,
    },
    /// The lock no longer holds the candidate's field.
    NotHeld,
    /// The recorded term is not below the candidate's: the fencing counter went back.
    StaleTerm { recorded: u64 },
}

fn protocol(reply: &Value) -> Error {
    Error::Protocol {
        script: "election",
        reply: format!("{reply:?}"),
    }
}

/// The script's operation that records the end of a term (`resigned` or `lost`).
pub(crate) const END: &str = "resign";

/// The script's operation that records the leader's new value.
pub(crate) const PROCLAIM: &str = "proclaim";

/// The script's calls on one election.
pub(crate) struct Calls<'a> {
    pub client: &'a Client,
    pub keys: &'a ElectionKeys,
}

impl Calls<'_> {
    /// Runs the operation `op` with its arguments `args` (after the retention).
    async fn call(&self, op: &str, args: &[&str]) -> Result<Value> {
        let inner = &self.client.inner;
        if op == END {
            // Recording the end of a term is part of giving it back, as the release of its
            // lock is: a resignation dropped just before `Client::shutdown` (which waits for
            // it) still says "resigned", or the next reader would say "expired".
            crate::task::in_runtime()?;
        } else {
            inner.check_open()?;
        }
        let retention = itoa::Buffer::new()
            .format(RETENTION.as_millis() as u64)
            .to_owned();
        let mut all = Vec::with_capacity(args.len() + 2);
        all.push(op);
        all.push(retention.as_str());
        all.extend_from_slice(args);
        // Sent again after a dropped connection when a second run changes nothing: a win
        // already recorded answers as recorded, a resignation already recorded as not leading.
        // Not a proclamation, which a second run would record twice (its caller hears the
        // error, and may proclaim again).
        let keys = self.keys.all();
        let send = |_| inner.node.family_call(&SCRIPT, &keys, &all);
        if op == PROCLAIM {
            return send(false).await;
        }
        crate::node::resent_if_dropped(send).await
    }

    /// Records `field` (holding the lock with `term`) as the leader publishing `value`.
    pub(crate) async fn won(&self, field: &str, term: u64, value: &str) -> Result<Won> {
        let me = &self.client.inner.me;
        let term = term.to_string();
        let pid = me.pid.to_string();
        let started = me.started_ms.to_string();
        let reply = self
            .call(
                "won",
                &[
                    field,
                    &term,
                    value,
                    &me.id,
                    &me.host,
                    &pid,
                    &me.program,
                    &started,
                    &me.version,
                ],
            )
            .await?;
        let ints = ints(&reply).ok_or_else(|| protocol(&reply))?;
        match ints.as_slice() {
            [1, revision, vacant_ms] if *revision > 0 => Ok(Won::Recorded {
                revision: *revision as u64,
                vacant_for: (*vacant_ms >= 0).then(|| Duration::from_millis(*vacant_ms as u64)),
            }),
            [0] => Ok(Won::NotHeld),
            [-1, recorded] if *recorded >= 0 => Ok(Won::StaleTerm {
                recorded: *recorded as u64,
            }),
            _ => Err(protocol(&reply)),
        }
    }

    /// `proclaim`, `resign` (with `extra` the cause) or `refresh` by the leader `field` of
    /// `term`: the new revision, or `None` when it does not lead.
    pub(crate) async fn as_leader(
        &self,
        op: &str,
        field: &str,
        term: u64,
        extra: Option<&str>,
    ) -> Result<Option<u64>> {
        let term = term.to_string();
        let mut args = vec![field, &term];
        args.extend(extra);
        let reply = self.call(op, &args).await?;
        let ints = ints(&reply).ok_or_else(|| protocol(&reply))?;
        match ints.as_slice() {
            [1, revision] if *revision >= 0 => Ok(Some(*revision as u64)),
            [0] => Ok(None),
            _ => Err(protocol(&reply)),
        }
    }

    /// The current state, and the changes after revision `since` (none when `None`).
    pub(crate) async fn read(&self, since: Option<u64>) -> Result<Read> {
        let since = since.map_or_else(|| "-1".to_owned(), |rev| rev.to_string());
        let reply = self.call("read", &[&since]).await?;
        let Value::Array(parts) = &reply else {
            return Err(protocol(&reply));
        };
        let [current, ttl, Value::Array(changes)] = parts.as_slice() else {
            return Err(protocol(&reply));
        };
        let current = match bytes(current) {
            Some([]) => None,
            Some(raw) => Some(Record::decode(raw).ok_or_else(|| protocol(&reply))?),
            None => return Err(protocol(&reply)),
        };
        let lock_ttl = match ttl {
            Value::Int(ms) => (*ms >= 0).then(|| Duration::from_millis(*ms as u64)),
            _ => return Err(protocol(&reply)),
        };
        let decoded = changes
            .iter()
            .map(|change| bytes(change).and_then(Record::decode))
            .collect::<Option<Vec<Record>>>()
            .ok_or_else(|| protocol(&reply))?;
        Ok(Read {
            current,
            lock_ttl,
            changes: decoded,
        })
    }
}

fn ints(reply: &Value) -> Option<Vec<i64>> {
    let Value::Array(items) = reply else {
        return None;
    };
    items
        .iter()
        .map(|item| match item {
            Value::Int(n) => Some(*n),
            _ => None,
        })
        .collect()
}

fn bytes(value: &Value) -> Option<&[u8]> {
    match value {
        Value::BulkString(raw) => Some(raw),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(fields: &[&str]) -> Vec<u8> {
        fields
            .iter()
            .flat_map(|f| format!("{}:{f}", f.len()).into_bytes())
            .collect()
    }

    #[test]
    fn records_decode_leading_and_vacant() -> Result<(), &'static str> {
        let leading = encode(&[
            "7", "3", "leading", "elected", "42", "c:o", "c", "h:1", "99", "prog", "5", "0.1.0",
            "a:b 9", "1000", "1001",
        ]);
        let record = Record::decode(&leading).ok_or("a leading record decodes")?;
        assert_eq!(record.revision, 7);
        assert_eq!(record.transitions, 3);
        assert_eq!(record.cause, Some(ChangeCause::Elected));
        let leader = record.leader.ok_or("a leading record has a leader")?;
        assert_eq!((leader.term, leader.value.as_str()), (42, "a:b 9"));
        assert_eq!(
            (leader.process.host.as_str(), leader.process.pid),
            ("h:1", 99)
        );
        let vacant = encode(&[
            "8", "3", "vacant", "resigned", "42", "c:o", "c", "h", "99", "prog", "5", "0.1.0", "",
            "1000", "1002",
        ]);
        let record = Record::decode(&vacant).ok_or("a vacant record decodes")?;
        assert!(record.leader.is_none());
        assert_eq!(record.cause, Some(ChangeCause::Resigned));
        assert!(Record::decode(b"3:abc").is_none());
        assert!(Record::decode(b"9:abc").is_none());
        Ok(())
    }
}
