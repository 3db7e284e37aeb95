//! Holding a destination (or an intercepted request) the rules refuse
//! while a [`Decider`] is asked: approvals while the call waits.

use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How long a held connection waits for its answer unless the decider says
/// otherwise ([`Decider::hold_limit`]).
pub const DEFAULT_HOLD_LIMIT: Duration = Duration::from_secs(30);

/// How many connections one proxy holds at once unless
/// [`crate::ProxyOptions::max_held`] says otherwise; beyond it a refused
/// destination is refused without asking ([`crate::RefusalReason::HeldLimit`]).
pub const DEFAULT_MAX_HELD: usize = 16;

/// Decides, while the command waits, whether a destination or request the
/// rules refuse is admitted after all.
///
/// [`Decider::ask`] is called on the connection's own thread (never the
/// accepting one) and must return at once: the decider keeps the [`Reply`]
/// and answers it later, from any thread. The proxy waits at most
/// [`Decider::hold_limit`]; a question not answered by then, or still
/// pending when the proxy stops, is denied.
pub trait Decider: Send + Sync + fmt::Debug {
    /// Asks about `pending`; the answer goes to `reply`.
    fn ask(&self, pending: Pending, reply: Reply);

    /// The longest a connection is held for an answer.
    fn hold_limit(&self) -> Duration {
        DEFAULT_HOLD_LIMIT
    }
}

/// What the command asked for that the rules refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Pending {
    /// A connection (HTTP `CONNECT`, plain HTTP, SOCKS5) to a host (a name
    /// as requested, or an IP literal) and port no egress rule admits.
    ///
    /// A name is asked about twice at most, and looked up only once the
    /// decider admitted it: first by name alone (`addresses` `None`:
    /// nothing was looked up, so a name the decider refuses never reaches
    /// a resolver); then, only when one of the addresses it resolved to is
    /// local, again with those addresses (`resolution`), and the
    /// connection goes there only on a second yes. An IP literal is asked
    /// about once, naming itself.
    Connect {
        /// The host as requested.
        host: String,
        /// The port.
        port: u16,
        /// Where an admitted connection goes, and nowhere else: `None` for
        /// a name not looked up yet (its first question); an IP literal
        /// itself; for a `resolution`, the addresses the admitted name
        /// resolved to, the proxy's own excepted (a later resolution of the
        /// name does not widen them).
        addresses: Option<Vec<IpAddr>>,
        /// Whether one of `addresses` is this host or a network near it: a
        /// special-range address ([`sandbox_core::net::is_special`]:
        /// loopback, private, link-local, ...) or one configured on one of
        /// this host's interfaces. `false` when `addresses` is `None`
        /// (nothing is known yet); always `true` for a `resolution`.
        local: bool,
        /// Whether this is the second question about a name: the decider
        /// admitted `host` (an earlier question about it, with `addresses`
        /// `None`, was answered once or session), and it resolved to
        /// `addresses`, one of which is local.
        resolution: bool,
    },
    /// A request to an intercepted host that no request rule admits.
    Request {
        /// The intercepted host.
        host: String,
        /// Its port.
        port: u16,
        /// The request's method.
        method: String,
        /// `https://host[:port]/path` (the path normalised, no query).
        url: String,
        /// The request rule that would admit it (`METHOD URL`).
        rule: String,
    },
}

/// An answer to a [`Pending`] question.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decision {
    /// Admit this one connection or request.
    Once,
    /// Admit it; the decider answers the same question itself from now on
    /// (the proxy keeps no grants: a decider shared by several proxies
    /// remembers them for all).
    Session,
    /// Refuse it, as without a decider.
    Deny,
}

impl Decision {
    /// Whether the connection or request goes through.
    pub fn admits(self) -> bool {
        matches!(self, Decision::Once | Decision::Session)
    }
}

/// How a held question ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settled {
    /// The decider answered in time.
    Answered(Decision),
    /// No answer within [`Decider::hold_limit`]: denied.
    TimedOut,
    /// The proxy stopped (the run ended) first: denied.
    Stopped,
}

impl Settled {
    /// The decision that applied (`Deny` unless answered otherwise).
    pub fn decision(self) -> Decision {
        match self {
            Settled::Answered(d) => d,
            _ => Decision::Deny,
        }
    }
}

/// Where a [`Decider`] sends its answer to one question; clones share it.
/// The first of an answer, the hold limit and the proxy's stop settles it.
#[derive(Clone)]
pub struct Reply {
    cell: Arc<(Mutex<Option<Settled>>, Condvar)>,
}

impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reply")
            .field("settled", &self.settled())
            .finish()
    }
}

impl Default for Reply {
    fn default() -> Self {
        Self::new()
    }
}

impl Reply {
    /// A question not yet settled (for deciders' tests; the proxy makes
    /// its own).
    pub fn new() -> Self {
        Reply {
            cell: Arc::new((Mutex::new(None), Condvar::new())),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<Settled>> {
        self.cell.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn settle(&self, how: Settled) -> bool {
        let mut state = self.lock();
        if state.is_some() {
            return false;
        }
        *state = Some(how);
        self.cell.1.notify_all();
        true
    }

    /// Answers; `false` when the question was settled already (answered,
    /// timed out, or the proxy stopped), and then the answer changes
    /// nothing.
    pub fn answer(&self, decision: Decision) -> bool {
        self.settle(Settled::Answered(decision))
    }

    /// How the question ended, `None` while it waits.
    pub fn settled(&self) -> Option<Settled> {
        *self.lock()
    }

    /// Settles it as stopped (the proxy is stopping).
    pub(crate) fn stop(&self) {
        self.settle(Settled::Stopped);
    }

    /// Waits until settled, at most `limit` (then it is timed out).
    pub(crate) fn wait(&self, limit: Duration) -> Settled {
        let deadline = Instant::now() + limit;
        let mut state = self.lock();
        loop {
            if let Some(how) = *state {
                return how;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                *state = Some(Settled::TimedOut);
                self.cell.1.notify_all();
                return Settled::TimedOut;
            }
            state = match self.cell.1.wait_timeout(state, left) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_settlement_wins() {
        let r = Reply::new();
        assert_eq!(r.settled(), None);
        assert!(r.answer(Decision::Once));
        assert!(!r.answer(Decision::Deny));
        r.stop();
        assert_eq!(r.wait(Duration::ZERO), Settled::Answered(Decision::Once));
        let r = Reply::new();
        assert_eq!(r.wait(Duration::from_millis(1)), Settled::TimedOut);
        assert!(!r.answer(Decision::Session), "a late answer admits nothing");
        assert_eq!(r.settled().map(Settled::decision), Some(Decision::Deny));
        let r = Reply::new();
        r.stop();
        assert_eq!(r.wait(Duration::from_secs(60)), Settled::Stopped);
    }

    #[test]
    fn an_answer_from_another_thread_ends_the_wait() {
        let r = Reply::new();
        let other = r.clone();
        let t = std::thread::spawn(move || other.answer(Decision::Session));
        assert_eq!(
            r.wait(Duration::from_secs(600)),
            Settled::Answered(Decision::Session)
        );
        assert!(t.join().unwrap());
    }
}
