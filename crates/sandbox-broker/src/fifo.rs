//! Writers waiting for a FIFO's reader: the kernel makes a blocking
//! `O_WRONLY` open of a FIFO wait until a reader opens it (fifo(7)), for as
//! many writers as there are. The broker opens without blocking, so it is
//! told `ENXIO` while there is no reader ([`crate::entries`]); then the
//! caller is kept here, and the broker thread tries its open again, with the
//! caller's credentials, until a reader is there, the caller stops waiting
//! (a signal, its death) or the broker stops.
//!
//! No thread waits per writer: one try per FIFO and round answers for every
//! writer waiting on it (without a reader, all of them would get `ENXIO`),
//! so neither the number of writers nor of FIFOs is capped, and no writer is
//! ever answered an error the kernel's open would not give it. The rounds
//! come every millisecond at first, then every [`MAX_PAUSE`] at most, and
//! are the broker thread's work, held to the run's CPU share with the rest
//! ([`crate::budget`]).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use crate::answer::{answer_with, record};
use crate::entries::FifoOpen;
use crate::identity::{with_credentials, Own};
use crate::log::{BrokerDecision, BrokerLog};
use crate::notif::Listener;

/// The longest pause between two rounds of tries.
const MAX_PAUSE: Duration = Duration::from_millis(20);
/// The first pause after a writer comes.
const FIRST_PAUSE: Duration = Duration::from_millis(1);

struct Waiter {
    open: FifoOpen,
    /// Device and inode of the FIFO.
    key: (u64, u64),
}

/// The writers waiting for a reader.
#[derive(Default)]
pub(crate) struct Fifos {
    waiting: Vec<Waiter>,
    next: Option<Instant>,
    pause: Duration,
}

impl Fifos {
    /// Keeps `open` until its FIFO has a reader.
    pub(crate) fn add(&mut self, open: FifoOpen) {
        let key = crate::resolve::fstat(&open.fd).map_or((0, 0), |st| (st.st_dev, st.st_ino));
        self.waiting.push(Waiter { open, key });
        self.pause = FIRST_PAUSE;
        let soon = Instant::now() + FIRST_PAUSE;
        self.next = Some(self.next.map_or(soon, |n| n.min(soon)));
    }

    /// How long until the next round; `None` when no writer waits.
    pub(crate) fn due_in(&self) -> Option<Duration> {
        self.next
            .map(|at| at.saturating_duration_since(Instant::now()))
    }

    /// One round: forgets the writers that stopped waiting, then tries each
    /// FIFO's open once for the first writer on it (again for the next only
    /// when that one got its answer). `fatal` is set when the thread could
    /// not take back its own credentials; the round stops there.
    pub(crate) fn retry(
        &mut self,
        listener: &Listener,
        own: &Own,
        log: &mut BrokerLog,
        fatal: &mut Option<String>,
    ) {
        self.waiting.retain(|w| {
            let waits = matches!(listener.id_valid(w.open.id), Ok(true));
            if !waits {
                log.push(gone(&w.open));
            }
            waits
        });
        let mut unread: HashSet<(u64, u64)> = HashSet::new();
        let mut i = 0;
        while i < self.waiting.len() && fatal.is_none() {
            let w = &self.waiting[i];
            if unread.contains(&w.key) {
                i += 1;
                continue;
            }
            let tried = with_credentials(own, &w.open.identity, fatal, || w.open.try_open());
            let answer = match tried {
                // No reader yet: nor for any writer of this FIFO this round.
                Ok(Ok(None)) => {
                    unread.insert(w.key);
                    i += 1;
                    continue;
                }
                Ok(Ok(Some(fd))) => Ok(fd),
                Ok(Err(errno)) => Err(BrokerDecision::Failed { errno }),
                Err(refused) => Err(refused),
            };
            let w = self.waiting.remove(i);
            let record = match answer {
                Ok(fd) => w.open.hand_over(listener, fd),
                Err(decision) => answer_with(
                    listener,
                    w.open.id,
                    w.open.tid,
                    w.open.syscall,
                    w.open.target,
                    decision,
                    libc::EPERM,
                ),
            };
            log.push(record);
        }
        if self.waiting.is_empty() {
            self.next = None;
            self.pause = FIRST_PAUSE;
        } else {
            self.pause = (self.pause * 2).clamp(FIRST_PAUSE, MAX_PAUSE);
            self.next = Some(Instant::now() + self.pause);
        }
    }

    /// The broker stops: the writers still waiting are recorded as gone
    /// (the run ended first).
    pub(crate) fn finish(self, log: &mut BrokerLog) {
        for w in self.waiting {
            log.push(gone(&w.open));
        }
    }
}

fn gone(open: &FifoOpen) -> crate::log::BrokerRecord {
    record(
        open.syscall,
        open.tid,
        open.target.clone(),
        BrokerDecision::CallerGone,
    )
}
