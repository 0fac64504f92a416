//! One round of the loss notice's checks: each hold read on its tracking connection, a hold
//! found gone confirmed through the command connection before it is lost, the rest armed, and
//! what could not be settled kept for a later round.

use std::sync::Arc;

use futures_util::{StreamExt, stream};
use tokio::time::Instant;

use super::super::lose;
use super::Armed;
use crate::backoff::Backoff;
use crate::hold::{FamilyHold, Hold, Noted};
use crate::node::{Presence, Tracked, Unavailable};
use crate::shared::Inner;
use crate::telemetry::LostReason;

/// Confirmations of holds found gone in flight at once (each one read through the command
/// connection, which batches concurrent calls): a flush of every hold confirms them in waves.
const CONFIRMS_AT_ONCE: usize = 64;

/// Holds whose check could not say (a key in a slot being moved, a verdict the command
/// connection could not confirm yet, as while it reconnects after a restart): checked again
/// alone, rather than every hold of every primary, after a pause that grows as a failed
/// connection's does ([`Backoff::reconnect`]) while rounds stay unsettled.
pub(super) struct Unsettled {
    holds: Vec<Noted>,
    at: Option<Instant>,
    backoff: Backoff,
}

impl Default for Unsettled {
    fn default() -> Unsettled {
        Unsettled {
            holds: Vec::new(),
            at: None,
            backoff: Backoff::reconnect(),
        }
    }
}

impl Unsettled {
    pub(super) fn push(&mut self, noted: Noted) {
        let pause = self.backoff.peek();
        self.at.get_or_insert_with(|| Instant::now() + pause);
        self.holds.push(noted);
    }

    /// After a round of checks of unsettled holds: none left, the next pause is the first
    /// again.
    pub(super) fn after_round(&mut self) {
        if self.holds.is_empty() {
            self.backoff.reset();
        }
    }

    /// Resolves when they are to be checked again (never while there are none).
    pub(super) async fn due(&self) {
        match self.at {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }

    /// Takes them to be checked again; those still unsettled after wait twice as long.
    pub(super) fn take(&mut self) -> Vec<Noted> {
        self.at = None;
        self.backoff.pause();
        std::mem::take(&mut self.holds)
    }
}

/// One hold being checked: a lock's or a family kind's.
enum Live {
    Lock(Arc<Hold>),
    Family(Arc<dyn FamilyHold>),
}

impl Live {
    /// The hold, if it is still this client's and not known lost.
    fn of(inner: &Inner, noted: &Noted) -> Option<Live> {
        match noted {
            Noted::Lock(key) => inner.holds.get(key).map(Live::Lock),
            Noted::Family(hold, _) => {
                let hold = hold.upgrade()?;
                hold.is_live().then_some(Live::Family(hold))
            }
        }
    }

    /// Which hold it is (its address).
    fn id(&self) -> usize {
        match self {
            Live::Lock(hold) => Arc::as_ptr(hold) as *const () as usize,
            Live::Family(hold) => Arc::as_ptr(hold) as *const () as usize,
        }
    }

    fn presence(&self) -> Presence {
        match self {
            Live::Lock(hold) => hold.presence(),
            Live::Family(hold) => hold.presence().clone(),
        }
    }

    /// Tells its guard it is lost: 1, or 0 when it was released meanwhile (see [`lose`]).
    fn lose(&self, inner: &Inner, why: &str) -> usize {
        match self {
            Live::Lock(hold) => lose(inner, hold, LostReason::ServerLost, why),
            Live::Family(hold) => {
                let gone = hold.gone(why);
                #[cfg(feature = "testing")]
                if gone {
                    crate::watchdog::audit::server_reported_loss(inner, hold.presence().clone());
                }
                usize::from(gone)
            }
        }
    }
}

/// Checks `holds` on the server in one round: those gone are lost at once, the rest armed
/// (in `armed`). Holds released or replaced meanwhile, or already lost, are left alone. A
/// hold the tracking connection finds gone is lost only once the command connection (the
/// way its renewals and its release reach it) finds it gone too: a tracking connection on
/// the wrong server (a map or master that moved unseen) can then cost a notice, never a
/// false loss. Holds whose check could not say, or whose two reads disagree (the same owner
/// took it again between them, or the tracking read was on a server cut off from the rest),
/// go to `unsettled`, and the connections stay: a moved map reopens them (`Moves`). Returns
/// how many were lost.
pub(super) async fn check(
    inner: &Inner,
    tracked: &mut Tracked,
    holds: Vec<Noted>,
    armed: &mut Armed,
    unsettled: &mut Unsettled,
) -> Result<usize, Unavailable> {
    // A lock taken and released again and again is noted each time: one read per hold.
    let mut seen = std::collections::HashSet::new();
    let (noted, live): (Vec<Noted>, Vec<Live>) = holds
        .into_iter()
        .filter_map(|noted| Live::of(inner, &noted).map(|live| (noted, live)))
        .filter(|(_, live)| seen.insert(live.id()))
        .unzip();
    if live.is_empty() {
        return Ok(0);
    }
    let presences: Vec<Presence> = live.iter().map(Live::presence).collect();
    let reads: Vec<&Presence> = presences.iter().collect();
    let flags = tracked.check(&reads).await?;
    // A flush of many holds confirms them a bounded number at a time.
    let gone: Vec<&Presence> = (presences.iter().zip(&flags))
        .filter(|(_, held)| **held == Some(false))
        .map(|(presence, _)| presence)
        .collect();
    let reads: Vec<_> = gone.into_iter().map(|p| inner.node.has(p)).collect();
    let confirmations: Vec<_> = stream::iter(reads)
        .buffered(CONFIRMS_AT_ONCE)
        .collect()
        .await;
    let mut confirmations = confirmations.into_iter();
    let mut lost = 0;
    for (((noted, live), presence), held) in noted.into_iter().zip(&live).zip(presences).zip(flags)
    {
        match held {
            Some(true) => armed.entry(presence.key).or_default().push(noted),
            None => unsettled.push(noted),
            Some(false) => match confirmations.next() {
                Some(Ok(false)) => {
                    let why = "the server reported its key changed and it no longer holds it";
                    lost += live.lose(inner, why);
                }
                Some(Ok(true)) => {
                    tracing::debug!(key = %presence.key, "the tracking read found gone a hold the server has; checked again");
                    unsettled.push(noted);
                }
                _ => unsettled.push(noted),
            },
        }
    }
    Ok(lost)
}
