//! The broker thread: receive, decide, perform, answer, record.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::answer::{answer_with, record, unresolved_decision};
use crate::budget::{CpuBudget, RunBudget, Spent};
use crate::caller::{errno_of, Caller, Identity};
use crate::connect::{self, Next};
use crate::entries::{self, Outcome};
use crate::error::BrokerError;
use crate::fifo::Fifos;
use crate::identity::{caller_identity, with_credentials, Own, UmaskUse};
use crate::log::{BrokerDecision, BrokerLog, BrokerRecord, BrokerTarget, Refusal};
use crate::notif::{Listener, Received};
use crate::ops;
use crate::pool::{Pool, Rejected, Task, MAX_CONNECTS};
use crate::resolve::{Access, BrokerRules, Start, Unresolved};
use crate::syscalls::{self, EntryCall, Op, Request, Subject};
use sandbox_seccomp::{Handler, MetaForm, AUDIT_ARCH};

/// Serves a seccomp listener on its own thread until [`Broker::finish`].
///
/// Dropping a `Broker` without `finish` stops it too (the log is lost).
#[derive(Debug)]
pub struct Broker {
    stop: OwnedFd,
    thread: Option<JoinHandle<BrokerLog>>,
    between: Between,
}

/// Ends one command's share of a broker serving many commands in turn (a
/// session's shared launch): the broker's thread takes it between its
/// requests. Cloned freely; see [`Between::take`].
#[derive(Clone)]
pub struct Between(Arc<BetweenShared>);

struct BetweenShared {
    /// Written to ask the thread (an eventfd).
    ask: OwnedFd,
    /// How many times the thread answered, and what it handed over.
    done: std::sync::Mutex<(u64, BrokerLog)>,
    /// How many times the listener was readable (counted by the thread
    /// before it receives), and the count when it last answered: equal,
    /// nothing reached the broker since, so there is nothing to close.
    seen: std::sync::atomic::AtomicU64,
    closed_at: std::sync::atomic::AtomicU64,
    cv: std::sync::Condvar,
    /// The current command's refusals as they are answered, for
    /// [`Between::live`]: the first [`Between::LIVE_CAP`] kept, all counted.
    live: std::sync::Mutex<Live>,
    /// The run's git directory guard (set by the thread once it has its
    /// rules), for [`Between::git_dirs_made`].
    git: std::sync::OnceLock<Arc<crate::gitdirs::GitGuard>>,
}

/// See [`BetweenShared::live`].
#[derive(Default)]
struct Live {
    /// Not yet read by [`Between::live`].
    records: Vec<BrokerRecord>,
    /// The command's refusals so far.
    count: u64,
    /// The command was closed ([`Between::take`]): the next refusal or read
    /// starts the next command.
    closed: bool,
}

impl std::fmt::Debug for Between {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Between").finish_non_exhaustive()
    }
}

impl Between {
    fn new() -> Result<Self, BrokerError> {
        // SAFETY: eventfd returns a fresh fd or -1.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(BrokerError::Notify {
                what: "eventfd for the between-commands signal",
                source: io::Error::last_os_error(),
            });
        }
        Ok(Between(Arc::new(BetweenShared {
            // SAFETY: fresh fd.
            ask: unsafe { OwnedFd::from_raw_fd(raw) },
            done: std::sync::Mutex::new((0, BrokerLog::default())),
            seen: std::sync::atomic::AtomicU64::new(0),
            closed_at: std::sync::atomic::AtomicU64::new(0),
            cv: std::sync::Condvar::new(),
            live: std::sync::Mutex::default(),
            git: std::sync::OnceLock::new(),
        })))
    }

    /// Asks the broker's thread to close the command that just ended (all
    /// of whose processes are gone): what it left waiting (FIFO openers)
    /// is dropped, the shared memory it left removed, the CPU budget
    /// refilled; returns what the broker answered for it since the last
    /// call (capped at [`BrokerLog::MAX_REFUSALS`] refusals and
    /// [`BrokerLog::MAX_RECORDS`] other answers, the rest counted), or `None` when the
    /// thread did not answer within `wait` (stopped, or held).
    pub fn take(&self, wait: Duration) -> Option<BrokerLog> {
        use std::sync::atomic::Ordering::SeqCst;
        let shared = &self.0;
        // Nothing reached the broker since it last closed a command: every
        // per-command state is as it left it (a notification of a caller
        // that is gone is removed from the listener's queue, seccomp_unotify(2),
        // so none can arrive for the command that ended).
        if shared.seen.load(SeqCst) == shared.closed_at.load(SeqCst) {
            return Some(BrokerLog::default());
        }
        let before = shared.done.lock().ok()?.0;
        let one: u64 = 1;
        // SAFETY: writes 8 bytes to our eventfd.
        unsafe { libc::write(shared.ask.as_raw_fd(), (&one as *const u64).cast(), 8) };
        let guard = shared.done.lock().ok()?;
        let (mut guard, _) = shared
            .cv
            .wait_timeout_while(guard, wait, |(n, _)| *n == before)
            .ok()?;
        if guard.0 == before {
            return None;
        }
        Some(std::mem::take(&mut guard.1))
    }

    /// The git directories the run made so far, where they are now (see
    /// [`BrokerLog::git_dirs_made`]), without closing the command (unlike
    /// [`Between::take`]) and without the thread: every one since the
    /// broker started, those named by an earlier [`Between::take`]
    /// included. Empty when the policy does not protect git directories,
    /// or before the thread has its rules.
    pub fn git_dirs_made(&self) -> Vec<std::path::PathBuf> {
        self.0
            .git
            .get()
            .map(|git| git.made_git_dirs().0)
            .unwrap_or_default()
    }

    /// How many refusals of one command [`Between::live`] hands out at most
    /// (the command sets the rate; the rest are only counted).
    pub const LIVE_CAP: usize = 100;

    /// The refusals of the current command answered since the last call
    /// (at most [`Self::LIVE_CAP`] per command in all), and how many the
    /// command had so far, those beyond the cap included. The command is
    /// the one since the last [`Between::take`] (or the broker's start).
    ///
    /// What a command closed by [`Between::take`] left unread is returned
    /// by the next call, unless the next command had a refusal first.
    pub fn live(&self) -> (Vec<BrokerRecord>, u64) {
        match self.0.live.lock() {
            Ok(mut live) => {
                let out = (std::mem::take(&mut live.records), live.count);
                if live.closed {
                    *live = Live::default();
                }
                out
            }
            Err(_) => (Vec::new(), 0),
        }
    }

    /// Offers the refusals among `records` (just answered) to
    /// [`Between::live`]. Never waits: when the reader holds the lock, they
    /// are only lost to the live view (the log keeps them).
    fn offer(&self, records: &[BrokerRecord]) {
        let refused = records
            .iter()
            .filter(|r| matches!(r.decision, BrokerDecision::Refused { .. }));
        let Ok(mut live) = self.0.live.try_lock() else {
            return;
        };
        for r in refused {
            if live.closed {
                *live = Live::default();
            }
            live.count += 1;
            if usize::try_from(live.count).is_ok_and(|n| n <= Self::LIVE_CAP) {
                live.records.push(r.clone());
            }
        }
    }

    fn answer(&self, log: &mut BrokerLog) {
        if let Ok(mut live) = self.0.live.lock() {
            live.closed = true;
        }
        let mut ask = 0u64;
        // SAFETY: reads the eventfd's 8-byte counter into a local.
        unsafe { libc::read(self.0.ask.as_raw_fd(), (&mut ask as *mut u64).cast(), 8) };
        let seen = self.0.seen.load(std::sync::atomic::Ordering::SeqCst);
        if let Ok(mut done) = self.0.done.lock() {
            self.0
                .closed_at
                .store(seen, std::sync::atomic::Ordering::SeqCst);
            done.1.absorb(log);
            done.0 += 1;
            self.0.cv.notify_all();
        }
    }
}

impl Broker {
    /// Starts serving notifications from `listener` on a thread.
    ///
    /// The thread starts with the credentials of the thread calling `start`
    /// and takes on each caller's for the duration of its request.
    pub fn start(listener: OwnedFd, rules: BrokerRules) -> Result<Broker, BrokerError> {
        let (broker, ready) = Self::spawn(move || Ok((listener, rules)), RunBudget::default())?;
        match ready.recv() {
            Ok(Ok(())) => Ok(broker),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ended_early()),
        }
    }

    /// Starts the broker's thread before the child that will send its
    /// listener over `channel` (the runner's end of [`listener_channel`](crate::listener_channel))
    /// exists, so that the thread gets ready while the child starts:
    /// [`PendingBroker::ready`] then waits for it. `fixed`: the credentials
    /// the child was prepared with, taken as every caller's only when the
    /// child vouches for them (see [`FixedCredentials`](crate::FixedCredentials)).
    ///
    /// `budget`: what the broker may spend on the run's calls (its CPU
    /// time, its worker threads), derived from the run's limits
    /// ([`RunBudget::from_limits`]); a call beyond it waits.
    ///
    /// The thread starts with the credentials of the thread calling this.
    pub fn start_receiving(
        channel: OwnedFd,
        rules: BrokerRules,
        fixed: Option<crate::FixedCredentials>,
        budget: RunBudget,
    ) -> Result<PendingBroker, BrokerError> {
        // Shut down to end the thread's receive when no listener will come.
        let waker = channel.try_clone().map_err(BrokerError::Thread)?;
        let broker = Self::spawn(
            move || {
                let (listener, vouched) =
                    crate::recv_listener(&channel).map_err(|e| BrokerError::FdPassing {
                        reason: format!("the child's seccomp listener never arrived: {e}"),
                    })?;
                Ok(match fixed {
                    // The child checked its ids and capabilities just before.
                    Some(fixed) if vouched => (listener, rules.with_fixed_credentials(fixed)),
                    _ => (listener, rules),
                })
            },
            budget,
        )?;
        Ok(PendingBroker {
            broker: Some(broker.0),
            ready: broker.1,
            waker,
        })
    }

    /// The broker's thread, taking its listener and rules from `receive`.
    fn spawn(
        receive: impl FnOnce() -> Result<(OwnedFd, BrokerRules), BrokerError> + Send + 'static,
        budget: RunBudget,
    ) -> Result<(Broker, Receiver<Result<(), BrokerError>>), BrokerError> {
        // SAFETY: eventfd returns a fresh fd or -1.
        let raw = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if raw < 0 {
            return Err(BrokerError::Notify {
                what: "eventfd for the stop signal",
                source: io::Error::last_os_error(),
            });
        }
        // SAFETY: fresh fd.
        let stop = unsafe { OwnedFd::from_raw_fd(raw) };
        let stop_for_thread = stop.try_clone().map_err(BrokerError::Thread)?;
        let between = Between::new()?;
        let between_for_thread = between.clone();
        let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
        let thread = std::thread::Builder::new()
            .name("sandbox-broker".into())
            .spawn(move || {
                let set_up = own_fs().and_then(|()| {
                    let (listener, rules) = receive()?;
                    let listener = Arc::new(Listener::new(listener)?);
                    let own = Own::current(rules.fixed.as_ref(), rules.umask_routed)
                        .map_err(BrokerError::OwnCredentials)?;
                    Ok((listener, rules, own))
                });
                match set_up {
                    Ok((listener, rules, own)) => {
                        if let Some(git) = &rules.git {
                            let _ = between_for_thread.0.git.set(Arc::clone(git));
                        }
                        let _ = ready_tx.send(Ok(()));
                        serve(
                            &listener,
                            &rules,
                            &own,
                            &stop_for_thread,
                            &budget,
                            &between_for_thread,
                        )
                    }
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        BrokerLog::default()
                    }
                }
            })
            .map_err(BrokerError::Thread)?;
        Ok((
            Broker {
                stop,
                thread: Some(thread),
                between,
            },
            ready_rx,
        ))
    }

    /// What ends one command's share of this broker ([`Between::take`]).
    pub fn between(&self) -> Between {
        self.between.clone()
    }

    /// Stops the broker (call it after the confined process tree ended) and
    /// returns what it answered.
    pub fn finish(mut self) -> BrokerLog {
        self.stop_and_join().unwrap_or_default()
    }

    fn stop_and_join(&mut self) -> Option<BrokerLog> {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes to our eventfd.
        unsafe { libc::write(self.stop.as_raw_fd(), (&one as *const u64).cast(), 8) };
        let thread = self.thread.take()?;
        Some(thread.join().unwrap_or_else(|_| BrokerLog {
            stopped_by_error: Some("the broker thread panicked".into()),
            ..BrokerLog::default()
        }))
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.stop_and_join();
    }
}

/// A broker whose thread is still taking its listener
/// ([`Broker::start_receiving`]).
///
/// Dropping it ends the thread's wait for the listener and stops it.
#[derive(Debug)]
pub struct PendingBroker {
    broker: Option<Broker>,
    ready: Receiver<Result<(), BrokerError>>,
    waker: OwnedFd,
}

impl PendingBroker {
    /// Waits up to `within` for the broker to have its listener and serve
    /// it (call it once the child is spawned: it sent the listener before
    /// its exec), or says why it does not.
    pub fn ready(mut self, within: Duration) -> Result<Broker, BrokerError> {
        match self.ready.recv_timeout(within) {
            Ok(Ok(())) => Ok(self.broker.take().ok_or_else(ended_early)?),
            Ok(Err(e)) => Err(e),
            Err(RecvTimeoutError::Timeout) => Err(BrokerError::FdPassing {
                reason: format!(
                    "the child's seccomp listener never arrived within {} s",
                    within.as_secs()
                ),
            }),
            Err(RecvTimeoutError::Disconnected) => Err(ended_early()),
        }
    }
}

impl Drop for PendingBroker {
    fn drop(&mut self) {
        if self.broker.is_some() {
            // SAFETY: shutdown on our own socket; the thread's receive then
            // returns at once (no other copy of the child's end needs to close).
            unsafe { libc::shutdown(self.waker.as_raw_fd(), libc::SHUT_RDWR) };
        }
    }
}

fn ended_early() -> BrokerError {
    BrokerError::Thread(io::Error::other(
        "the broker thread ended before it was ready",
    ))
}

/// Gives the broker thread a umask of its own (`unshare(CLONE_FS)`), so that
/// taking on a caller's umask changes no other thread of the runner.
fn own_fs() -> Result<(), BrokerError> {
    // SAFETY: unshare(CLONE_FS) affects only the calling thread.
    if unsafe { libc::unshare(libc::CLONE_FS) } != 0 {
        return Err(BrokerError::Thread(io::Error::other(format!(
            "unshare(CLONE_FS) for the broker thread's own umask: {}",
            io::Error::last_os_error()
        ))));
    }
    Ok(())
}

/// Serves the listener until `stop`, within `budget`: while the run's CPU
/// share is spent, no request is taken (the callers wait in the kernel) and
/// no FIFO is tried; the writers waiting for a FIFO's reader are tried
/// again between requests ([`Fifos`]).
fn serve(
    listener: &Arc<Listener>,
    rules: &BrokerRules,
    own: &Own,
    stop: &OwnedFd,
    budget: &RunBudget,
    between: &Between,
) -> BrokerLog {
    let mut log = BrokerLog::default();
    let spent = Spent::default();
    let spent_again = spent.clone();
    // Between commands (a shared launch): the git directories named so far.
    let mut git_named = std::collections::HashSet::new();
    let mut git_unnamed = 0usize;
    let workers = budget.workers(MAX_CONNECTS);
    let pool = Pool::new(
        Arc::clone(listener),
        own.creds.clone(),
        workers,
        spent.clone(),
    );
    let mut cpu = CpuBudget::new(budget, spent);
    let mut fifos = Fifos::default();
    loop {
        let held = cpu.hold();
        let fifo_due = fifos.due_in();
        if held.is_none() && fifo_due == Some(Duration::ZERO) {
            let mut fatal = None;
            fifos.retry(listener, own, &mut log, &mut fatal);
            if let Some(fatal) = fatal {
                log.stopped_by_error = Some(fatal);
                break;
            }
            continue;
        }
        // Held: only the stop signal is watched (poll skips a negative fd).
        let mut fds = [
            libc::pollfd {
                fd: if held.is_some() { -1 } else { listener.raw() },
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: stop.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: between.0.ask.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        let timeout = held.or(fifo_due).map_or(-1, |d| {
            i32::try_from(d.as_millis().max(1)).unwrap_or(i32::MAX)
        });
        // SAFETY: three live pollfds.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), 3, timeout) };
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            log.stopped_by_error = Some(format!("poll on the seccomp listener: {err}"));
            break;
        }
        if fds[2].revents & libc::POLLIN != 0 {
            // Between two commands of a shared launch: every process of the
            // one that ended is gone.
            pool.drain_into(&mut log);
            std::mem::take(&mut fifos).finish(&mut log);
            if let Some(shm) = &rules.shm {
                log.shm_removed.extend(shm.remove_left());
            }
            cpu = CpuBudget::new(budget, spent_again.clone());
            // The repositories made so far stay the session's; each is
            // named once, in the command that made it.
            if let Some(git) = &rules.git {
                let (made, unnamed) = git.made_git_dirs();
                log.git_dirs_made = made
                    .into_iter()
                    .filter(|p| git_named.insert(p.clone()))
                    .collect();
                log.git_dirs_unnamed = unnamed.saturating_sub(git_unnamed);
                git_unnamed = unnamed;
            }
            between.answer(&mut log);
            continue;
        }
        if fds[0].revents & libc::POLLIN != 0 {
            // Counted before the receive (see `Between::take`).
            between
                .0
                .seen
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            match listener.recv() {
                Ok(Received::Notification(n)) => {
                    let (record, fatal) = handle(listener, rules, own, &pool, &mut fifos, &n);
                    let mut answered = pool.take_done();
                    answered.extend(record);
                    // Offered before the log keeps them: a refusal past the
                    // log's cap is still counted live.
                    between.offer(&answered);
                    for record in answered {
                        log.push(record);
                    }
                    if let Some(fatal) = fatal {
                        // The thread's credentials are no longer known: stop
                        // (closing the listener fails every later call).
                        log.stopped_by_error = Some(fatal);
                        break;
                    }
                }
                Ok(Received::Gone) => {}
                Err(err) => {
                    log.stopped_by_error = Some(format!("SECCOMP_IOCTL_NOTIF_RECV: {err}"));
                    break;
                }
            }
            continue;
        }
        if fds[1].revents != 0 {
            break;
        }
        if fds[0].revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            // No process uses the filter any more.
            break;
        }
    }
    pool.finish(&mut log);
    fifos.finish(&mut log);
    if let Some(git) = &rules.git {
        (log.git_dirs_made, log.git_dirs_unnamed) = git.made_git_dirs();
    }
    if let Some(shm) = &rules.shm {
        // The run has ended: what it left in /dev/shm goes with it.
        log.shm_removed = shm.remove_left();
    }
    log
}

/// Decides and answers one notification (a connect is answered by the worker
/// that performs it: no record yet); the second value is set when the
/// broker thread could not return to its own credentials.
fn handle(
    listener: &Listener,
    rules: &BrokerRules,
    own: &Own,
    pool: &Pool,
    fifos: &mut Fifos,
    n: &libc::seccomp_notif,
) -> (Option<BrokerRecord>, Option<String>) {
    let nr = i64::from(n.data.nr);
    let tid = n.pid as i32;
    // The seccomp table's row for the call says which handler decodes it.
    let found = u32::try_from(n.data.nr)
        .ok()
        .and_then(sandbox_seccomp::handler);
    let (name, handler) = match found {
        Some(found) if n.data.arch == AUDIT_ARCH => found,
        _ => {
            let decision = BrokerDecision::Refused {
                reason: Refusal::UnknownSyscall { nr },
            };
            let record = answer(
                listener,
                n.id,
                tid,
                "unknown",
                BrokerTarget::default(),
                decision,
            );
            return (Some(record), None);
        }
    };
    let mut target = BrokerTarget::default();
    let mut fatal = None;
    if handler == Handler::Umask {
        // Noted, then run by the kernel as made: a mask by value, nothing to
        // read again. Not recorded: it changes nothing outside the caller.
        if let Some(umasks) = &own.umasks {
            umasks.borrow_mut().changing(tid, n.data.args[0] as u32);
        }
        if let Err(err) = listener.continue_call(n.id) {
            tracing::warn!(%err, "letting a umask call continue failed");
        }
        return (None, None);
    }
    if handler == Handler::Process {
        return (process_call(listener, n, tid, name), None);
    }
    if handler == Handler::Socket {
        return (Some(socket_call(listener, rules, own, n, tid, name)), None);
    }
    if handler == Handler::Listen {
        let (decision, refused) = connect::decide_listen(listener, rules, n, &mut target);
        let record = answer_with(listener, n.id, tid, name, target, decision, refused);
        return (Some(record), None);
    }
    if handler == Handler::Bind {
        let (decision, refused) =
            connect::decide_bind(listener, rules, own, n, &mut target, &mut fatal);
        let record = answer_with(listener, n.id, tid, name, target, decision, refused);
        return (Some(record), fatal);
    }
    if handler == Handler::Connect {
        let record = match connect::decide(listener, rules, own, n, &mut target, &mut fatal) {
            Next::Answer { decision, refused } => Some(answer_with(
                listener, n.id, tid, name, target, decision, refused,
            )),
            // The thread's credentials are unknown: a new worker would inherit them.
            Next::Perform(job) if fatal.is_some() => Some(answer_with(
                listener,
                n.id,
                tid,
                name,
                job.target,
                BrokerDecision::Refused {
                    reason: Refusal::CallerCredentials {
                        change: crate::log::CredentialChange::Capabilities,
                    },
                },
                libc::EPERM,
            )),
            // Submitted with the thread's own credentials (restored above).
            Next::Perform(job) => match pool.submit(Task::Connect(job)) {
                Ok(()) => None,
                Err(Rejected::Full(job)) => Some(answer_with(
                    listener,
                    n.id,
                    tid,
                    name,
                    job.target().clone(),
                    BrokerDecision::Refused {
                        reason: Refusal::TooManyConnects {
                            limit: MAX_CONNECTS,
                        },
                    },
                    libc::EAGAIN,
                )),
                Err(Rejected::Unavailable(job)) => Some(answer_with(
                    listener,
                    n.id,
                    tid,
                    name,
                    job.target().clone(),
                    BrokerDecision::Failed {
                        errno: libc::EAGAIN,
                    },
                    libc::EPERM,
                )),
            },
        };
        return (record, fatal);
    }
    if let Handler::Exec(form) = handler {
        // Routed only for a refusal of Landlock's to be recorded.
        return match crate::reads::observe_exec(
            listener,
            rules,
            own,
            n,
            form,
            &mut target,
            &mut fatal,
        ) {
            crate::reads::Observed::Continue => {
                if let Err(err) = listener.continue_call(n.id) {
                    tracing::warn!(%err, "letting an exec continue failed");
                }
                (None, fatal)
            }
            crate::reads::Observed::Refused(reason) => {
                let decision = BrokerDecision::Refused { reason };
                let record = answer_with(listener, n.id, tid, name, target, decision, libc::EACCES);
                (Some(record), fatal)
            }
        };
    }
    if crate::reads::plain_read(handler, &n.data.args) {
        // Routed only for a refusal of Landlock's to be recorded
        // (`crate::reads`): continued unless Landlock would refuse it.
        return match crate::reads::observe(
            listener,
            rules,
            own,
            n,
            handler,
            &mut target,
            &mut fatal,
        ) {
            crate::reads::Observed::Continue => {
                if let Err(err) = listener.continue_call(n.id) {
                    tracing::warn!(%err, "letting a read-only open continue failed");
                }
                (None, fatal)
            }
            crate::reads::Observed::Refused(reason) => {
                let decision = BrokerDecision::Refused { reason };
                let record = answer_with(listener, n.id, tid, name, target, decision, libc::EACCES);
                (Some(record), fatal)
            }
        };
    }
    let answered = decide(listener, rules, own, n, handler, &mut target, &mut fatal);
    let record = match answered {
        Answer::BrokerDecision(decision) => {
            let refused = match &decision {
                // As Landlock answers a write outside its rules (and a
                // truncate, with its truncate right): a deny path, or a name
                // the broker keeps for one, answers as a place Landlock refuses.
                BrokerDecision::Refused {
                    reason:
                        Refusal::OutsideWritePaths
                        | Refusal::WriteDenyPath
                        | Refusal::AncestorOfDenyPath
                        | Refusal::DanglingSymlink
                        | Refusal::SymlinkInGitDir
                        | Refusal::GitDirBeforeRun
                        | Refusal::ProcfsPath,
                } if matches!(
                    handler,
                    Handler::Entry(_) | Handler::Metadata(MetaForm::Truncate)
                ) =>
                {
                    libc::EACCES
                }
                // An open or entry beneath a read-deny path: Landlock's
                // answer to an open that needs READ_FILE there.
                BrokerDecision::Refused {
                    reason: Refusal::ReadDenyPath,
                } if matches!(handler, Handler::Entry(_)) => libc::EACCES,
                // Landlock refuses a link that would make a file reachable
                // with more rights with EXDEV (Documentation/userspace-api/
                // landlock.rst, LANDLOCK_ACCESS_FS_REFER), so callers copy.
                BrokerDecision::Refused {
                    reason: Refusal::LinkFromOutside,
                } => libc::EXDEV,
                _ => libc::EPERM,
            };
            answer_with(listener, n.id, tid, name, target, decision, refused)
        }
        Answer::Fd {
            fd,
            cloexec,
            deferred,
        } => answer_fd(
            listener,
            own,
            (n.id, tid, name),
            target,
            &fd,
            cloexec,
            deferred,
        ),
        Answer::Continue => {
            // Not the run's shared memory, and no other rule of the
            // broker's: the kernel decides it with the command's own
            // Landlock domain, as without a broker (continuing grants
            // nothing, whatever the caller's memory says by then).
            if let Err(err) = listener.continue_call(n.id) {
                tracing::warn!(%err, "letting an entry call continue failed");
            }
            return (None, fatal);
        }
        Answer::WaitFifo {
            fd,
            flags,
            identity,
        } => {
            // Kept until a reader comes, however many wait: no thread is
            // held per writer, and none is answered an error the kernel's
            // blocking open would not give.
            fifos.add(entries::FifoOpen {
                id: n.id,
                tid,
                syscall: name,
                target,
                identity,
                fd,
                flags,
            });
            return (None, fatal);
        }
    };
    (Some(record), fatal)
}

/// A call on another process ([`Handler::Process`]): let the kernel run it
/// as made (its arguments are integers, or a pointer it reads itself) when
/// the target belongs to the run, else refuse it. A run's processes are the
/// caller's session: the command starts in a session of its own, and no
/// process outside it can join (setsid(2), setpgid(2) refuse another
/// session). A target that does not exist gets `ESRCH`, as from the kernel.
///
/// Between this check and the call the target could exit and its pid be
/// given to a new process outside the run: pids are handed out cyclically
/// (`alloc_pid`, kernel/pid.c), so a freed pid comes back only after the
/// whole pid space has been used, which no process does within the
/// microseconds of this answer. The kernel's own same-owner check still
/// applies to the call.
/// `socket` of a kind the filter refuses (it sends every refusal here to
/// be recorded): under egress rules with a datagram namespace, an IP
/// datagram socket is made there, with the caller's flags, and handed over;
/// any other kind is refused.
fn socket_call(
    listener: &Listener,
    rules: &BrokerRules,
    own: &Own,
    n: &libc::seccomp_notif,
    tid: i32,
    name: &str,
) -> BrokerRecord {
    // The kernel reads all three as int.
    let [domain, ty, protocol] = [0, 1, 2].map(|i| n.data.args[i] as i32);
    let target = BrokerTarget {
        path: Some(crate::connect::describe_socket(domain, ty, protocol)),
        ..BrokerTarget::default()
    };
    // What the kernel answers before any policy (__sys_socket, then
    // __sock_create: flags, then the type's range, then the family's).
    if let Some(errno) = socket_args_error(domain, ty) {
        return answer(
            listener,
            n.id,
            tid,
            name,
            target,
            BrokerDecision::Failed { errno },
        );
    }
    let refused = |target, reason| {
        answer(
            listener,
            n.id,
            tid,
            name,
            target,
            BrokerDecision::Refused { reason },
        )
    };
    let datagram = matches!(domain, libc::AF_INET | libc::AF_INET6)
        && ty & 0xf == libc::SOCK_DGRAM
        && matches!(protocol, 0 | libc::IPPROTO_UDP);
    match rules.dns().and_then(|d| d.datagrams.as_ref()) {
        Some(maker) if datagram => match maker.socket(domain, ty & !libc::SOCK_CLOEXEC, protocol) {
            Ok(sock) => {
                let cloexec = ty & libc::SOCK_CLOEXEC != 0;
                let call = (n.id, tid, name);
                let deferred = entries::Deferred::default();
                answer_fd(listener, own, call, target, &sock, cloexec, deferred)
            }
            // No namespace (its message says why): refused, as without one.
            Err(e) if e.raw_os_error().is_none() => {
                let call = target.path.as_deref().unwrap_or("socket");
                let resolved = Some(PathBuf::from(format!("{call}: {e}")));
                refused(
                    BrokerTarget { resolved, ..target },
                    Refusal::SocketNotAllowed,
                )
            }
            // The kernel's own answer (EINVAL for unknown flags, EMFILE, ...).
            Err(e) => answer_failed(listener, n.id, tid, name, target, &e),
        },
        _ if rules.network => refused(target, Refusal::SocketNotAllowed),
        _ => refused(target, Refusal::NetworkOff),
    }
}

/// The errno `socket(domain, ty, _)` fails with whatever the policy:
/// `EINVAL` for flags other than `SOCK_NONBLOCK`/`SOCK_CLOEXEC` or a type
/// past `SOCK_PACKET`, `EAFNOSUPPORT` for a family past `AF_MAX` (46 since
/// Linux 5.15, include/linux/socket.h; a family a later kernel adds is
/// refused as any other, only with `EPERM` instead).
fn socket_args_error(domain: i32, ty: i32) -> Option<i32> {
    const SOCK_TYPE_MASK: i32 = 0xf;
    // SOCK_PACKET (10) + 1; libc deprecates the name.
    const SOCK_MAX: i32 = 11;
    const AF_MAX: i32 = 46;
    if ty & !SOCK_TYPE_MASK & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC) != 0
        || ty & SOCK_TYPE_MASK >= SOCK_MAX
    {
        return Some(libc::EINVAL);
    }
    (!(0..AF_MAX).contains(&domain)).then_some(libc::EAFNOSUPPORT)
}

fn process_call(
    listener: &Listener,
    n: &libc::seccomp_notif,
    tid: i32,
    name: &str,
) -> Option<BrokerRecord> {
    let a = n.data.args;
    let nr = i64::from(n.data.nr);
    // setpriority(which, who, ...): PRIO_PROCESS 0, PRIO_PGRP 1;
    // ioprio_set(which, who, ...): IOPRIO_WHO_PROCESS 1, IOPRIO_WHO_PGRP 2.
    // A user as target is never the run's alone.
    let target = match nr {
        libc::SYS_setpriority if a[0] as i32 <= 1 => a[1] as i32,
        libc::SYS_ioprio_set if (1..=2).contains(&(a[0] as i32)) => a[1] as i32,
        libc::SYS_setpriority | libc::SYS_ioprio_set => -1,
        _ => a[0] as i32,
    };
    let target_record = BrokerTarget {
        path: Some(format!("pid {target}")),
        ..BrokerTarget::default()
    };
    if target > 0 {
        // SAFETY: getsid has no memory effects.
        let theirs = unsafe { libc::getsid(target) };
        let missing = theirs < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        // SAFETY: as above.
        if theirs >= 0 && theirs == unsafe { libc::getsid(tid) } {
            if let Err(err) = listener.continue_call(n.id) {
                tracing::warn!(%err, "letting a call on a process of the run continue failed");
            }
            return None;
        }
        if missing {
            return Some(answer_with(
                listener,
                n.id,
                tid,
                name,
                target_record,
                BrokerDecision::Failed { errno: libc::ESRCH },
                libc::EPERM,
            ));
        }
    }
    Some(answer_with(
        listener,
        n.id,
        tid,
        name,
        target_record,
        BrokerDecision::Refused {
            reason: Refusal::ForeignProcess,
        },
        libc::EPERM,
    ))
}

/// How a request is answered: a decision, an fd to install in the caller,
/// or a FIFO open for a worker to wait on.
enum Answer {
    BrokerDecision(BrokerDecision),
    Fd {
        fd: OwnedFd,
        cloexec: bool,
        deferred: entries::Deferred,
    },
    WaitFifo {
        fd: OwnedFd,
        flags: i32,
        identity: Identity,
    },
    /// Let the kernel decide (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`): an entry
    /// call routed only for the run's shared memory that is none of it.
    Continue,
}

impl From<BrokerDecision> for Answer {
    fn from(d: BrokerDecision) -> Self {
        Answer::BrokerDecision(d)
    }
}

fn decide(
    listener: &Listener,
    rules: &BrokerRules,
    own: &Own,
    n: &libc::seccomp_notif,
    handler: Handler,
    target: &mut BrokerTarget,
    fatal: &mut Option<String>,
) -> Answer {
    let unreadable = |e: io::Error| crate::connect::unreadable_caller(&e);
    let mut caller = Caller::unopened(n.pid as i32);
    let decoded = syscalls::decode(handler, n.data.args, &caller);
    // The run's shared memory: the names a call has in /dev/shm (all of
    // its paths, or it is none of the shared memory's business).
    let mut shm_names = None;
    if let (Some(shm), Ok(Request::Entry(call))) = (&rules.shm, &decoded) {
        if shm.continue_others {
            // What the filter refuses without the shared memory's routing
            // (flags and modes by value: the caller cannot change them).
            if let Some(reason) = crate::shm::filter_refusal(n.data.nr, n.data.args) {
                return BrokerDecision::Refused { reason }.into();
            }
        }
        shm_names = crate::shm::names(shm, &mut caller, call);
        if shm_names.is_none() && shm.continue_others {
            return Answer::Continue;
        }
    }
    let needs_fd = match &decoded {
        Ok(Request::Meta(subject, _)) => subject.needs_fd(),
        Ok(Request::Entry(call)) => call.needs_fd(),
        Ok(Request::Nothing) | Err(_) => false,
    };
    let umask = match &decoded {
        Ok(Request::Entry(call)) if call.applies_umask() => {
            match own
                .umasks
                .as_ref()
                .and_then(|u| u.borrow_mut().lookup(caller.tid()))
            {
                Some(mask) => UmaskUse::Kept(mask),
                None => UmaskUse::Read,
            }
        }
        _ => UmaskUse::None,
    };
    // Under fixed credentials an entry call on absolute paths whose umask is
    // kept (or that applies none) needs nothing from /proc/TID.
    let without_proc = own.fixed.is_some()
        && !needs_fd
        && !matches!(umask, UmaskUse::Read)
        && matches!(&decoded, Ok(Request::Entry(call)) if call.paths_absolute());
    if !without_proc {
        if let Err(e) = caller.open_proc() {
            return match listener.id_valid(n.id) {
                Ok(false) => BrokerDecision::CallerGone,
                _ => unreadable(e),
            }
            .into();
        }
    }
    // A umask read now is kept with the caller's pidfd (see `umasks`).
    if needs_fd || (matches!(umask, UmaskUse::Read) && own.umasks.is_some()) {
        caller.open_pidfd();
    }
    // TOCTOU guard: the memory we read and the handles we opened belong to the
    // thread that made this request only if it is still waiting for the answer.
    match listener.id_valid(n.id) {
        Ok(true) => {}
        Ok(false) => return BrokerDecision::CallerGone.into(),
        // Fail closed: answer EPERM rather than act on unverified data.
        Err(e) => return unreadable(e).into(),
    }
    let request = match decoded {
        Ok(d) => d,
        Err(e) => {
            return match errno_of(&e) {
                errno @ (libc::EFAULT
                | libc::EINVAL
                | libc::ERANGE
                | libc::E2BIG
                | libc::ENAMETOOLONG) => BrokerDecision::Failed { errno },
                _ => unreadable(e),
            }
            .into()
        }
    };
    let (subject, op) = match request {
        Request::Nothing => return BrokerDecision::Performed.into(),
        Request::Meta(subject, op) => (subject, op),
        Request::Entry(call) => {
            let answer = decide_entry(rules, own, &caller, &call, shm_names, umask, target, fatal);
            return match call {
                EntryCall::Open { .. } => no_fd_slot(&caller, answer),
                _ => answer,
            };
        }
    };
    match &subject {
        Subject::Fd(fd) => target.fd = Some(*fd),
        Subject::At { dirfd, path, .. } => {
            target.path = Some(String::from_utf8_lossy(path.as_bytes()).into_owned());
            target.fd = (*dirfd != libc::AT_FDCWD).then_some(*dirfd);
        }
    }
    let identity = match caller_identity(&caller, own, UmaskUse::None) {
        Ok(id) => id,
        Err(e) => return unreadable(e).into(),
    };
    let start = match rules.start(&caller, &subject) {
        Ok(start) => start,
        Err(unresolved) => return unresolved_decision(unresolved, target).into(),
    };
    let acted = match with_credentials(own, &identity, fatal, || {
        act(rules, start, &op, &identity, target)
    }) {
        Ok(acted) => acted,
        Err(refused) => return refused.into(),
    };
    match acted {
        Acted::Done(decision) => decision,
        Acted::Read(back) => write_back(listener, n.id, &caller, back),
    }
    .into()
}

/// An open that did not come to an fd for the caller: when the caller's fd
/// table is full, the kernel answers `EMFILE` before it walks the path
/// (`get_unused_fd_flags` in `do_sys_openat2`, fs/open.c), so before any of
/// the path's errors and any refusal, and a `FIFO` open never waits (red-team
/// R6a F2). An open that came to an fd meets a full table at its install.
fn no_fd_slot(caller: &Caller, answer: Answer) -> Answer {
    let failed = matches!(
        answer,
        Answer::BrokerDecision(BrokerDecision::Refused { .. } | BrokerDecision::Failed { .. })
            | Answer::WaitFifo { .. }
    );
    if failed && caller.fd_table_full() {
        return BrokerDecision::Failed {
            errno: libc::EMFILE,
        }
        .into();
    }
    answer
}

/// Records what an entry call names, takes its handles, and decides and
/// performs it with the caller's credentials and umask. `shm_names`: its
/// names in `/dev/shm`, when all its paths lie there (see [`crate::shm`]).
#[allow(clippy::too_many_arguments)]
fn decide_entry(
    rules: &BrokerRules,
    own: &Own,
    caller: &Caller,
    call: &EntryCall,
    shm_names: Option<Vec<std::ffi::CString>>,
    umask: UmaskUse,
    target: &mut BrokerTarget,
    fatal: &mut Option<String>,
) -> Answer {
    let (first, dirfd) = match call {
        EntryCall::Open { at, .. }
        | EntryCall::Mknod { at, .. }
        | EntryCall::Mkdir { at, .. }
        | EntryCall::Unlink { at, .. }
        | EntryCall::Symlink { at, .. } => (&at.path, at.dirfd),
        EntryCall::Rename { from, .. } | EntryCall::Link { from, .. } => (&from.path, from.dirfd),
    };
    target.path = Some(String::from_utf8_lossy(first.as_bytes()).into_owned());
    target.fd = (dirfd != libc::AT_FDCWD).then_some(dirfd);
    let identity = match caller_identity(caller, own, umask) {
        Ok(id) => id,
        Err(e) => return crate::connect::unreadable_caller(&e).into(),
    };
    let shm = rules.shm.as_ref().zip(shm_names.as_deref());
    // Only the shared memory's own calls, the rest in the kernel: no handles.
    let starts = match shm {
        Some((shm, _)) if shm.continue_others => None,
        _ => match entries::starts(rules, caller, call) {
            Ok(starts) => Some(starts),
            Err(unresolved) => return unresolved_decision(unresolved, target).into(),
        },
    };
    let acted = with_credentials(own, &identity, fatal, || {
        // The thread's own umask (CLONE_FS unshared): what creating calls
        // apply (the other calls apply none, and may not have read it).
        if call.applies_umask() {
            own.set_umask(identity.umask);
        }
        if let Some((shm, names)) = shm {
            if let Some(done) = shm.act(call, names) {
                if let Some(name) = names.last() {
                    target.resolved = Some(shm.path_of(name));
                }
                return Some(done);
            }
        }
        starts.map(|starts| entries::act(rules, caller, call, starts, target))
    });
    let acted = match acted {
        Ok(Some(acted)) => Ok(acted),
        Ok(None) => return Answer::Continue,
        Err(refused) => Err(refused),
    };
    match acted {
        Ok(Ok(Outcome::Done(decision))) => decision.into(),
        Ok(Ok(Outcome::Fd {
            fd,
            cloexec,
            deferred,
        })) => Answer::Fd {
            fd,
            cloexec,
            deferred,
        },
        Ok(Ok(Outcome::WaitFifo { fd, flags })) => Answer::WaitFifo {
            fd,
            flags,
            identity,
        },
        Ok(Err(unresolved)) => unresolved_decision(unresolved, target).into(),
        Err(refused) => refused.into(),
    }
}

/// What happened with the caller's credentials on: a decision, or bytes for
/// the caller's buffer (written with the broker's own credentials).
enum Acted {
    Done(BrokerDecision),
    Read(ops::ReadBack),
}

/// Resolves, checks and performs `op` (the thread holds the caller's credentials).
fn act(
    rules: &BrokerRules,
    start: Start,
    op: &Op,
    identity: &Identity,
    target: &mut BrokerTarget,
) -> Acted {
    let access = if op.is_read() {
        Access::Read
    } else {
        Access::Change
    };
    let first = match rules.reach_start(start) {
        Ok(first) => first,
        Err(unresolved) => return Acted::Done(unresolved_decision(unresolved, target)),
    };
    if let Op::Truncate { .. } = op {
        // vfs_truncate (fs/open.c) answers EISDIR and EINVAL for what is not
        // a regular file before its permission checks and security hook.
        if let Ok(st) = crate::resolve::fstat(&first) {
            match st.st_mode & libc::S_IFMT {
                libc::S_IFREG => {}
                libc::S_IFDIR => {
                    return Acted::Done(BrokerDecision::Failed {
                        errno: libc::EISDIR,
                    })
                }
                _ => {
                    return Acted::Done(BrokerDecision::Failed {
                        errno: libc::EINVAL,
                    })
                }
            }
        }
    }
    if let Op::Chmod { .. } = op {
        // notify_change (fs/attr.c) answers EOPNOTSUPP for a mode change of
        // a symlink (fchmodat2 with AT_SYMLINK_NOFOLLOW) before any
        // permission check, wherever the link lies.
        if crate::resolve::fstat(&first).is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFLNK)
        {
            return Acted::Done(BrokerDecision::Failed {
                errno: libc::EOPNOTSUPP,
            });
        }
    }
    // The run's own shared memory (`private_shm`): truncated by path as by
    // its fd, and its mode, owner and times changed (red-team O1: `touch`
    // or `fchmod` of the run's own segment was refused as outside the write
    // paths), whatever its name now; the kernel's checks below still apply,
    // and the policy's (set-id bits, giving it away).
    let own_shm = match (op, &rules.shm) {
        (
            Op::Truncate { .. } | Op::Chmod { .. } | Op::Chown { .. } | Op::Times { .. },
            Some(shm),
        ) => crate::resolve::fstat(&first)
            .ok()
            .filter(|st| shm.owns_stat(st)),
        _ => None,
    };
    // An inode of no file system the policy names (a pipe, a socket, an
    // anon_inode): in no path, so no path rule is about it, and the kernel
    // answers its metadata calls as bare (red-team R6a F7: `fchmod` or
    // `futimens` of a stdout pipe was refused).
    let pathless = crate::resolve::pathless(&first);
    if let Some(stat) = own_shm.or(pathless) {
        let obj = crate::resolve::Object {
            path: std::fs::read_link(format!("/proc/self/fd/{}", first.as_raw_fd()))
                .unwrap_or_default(),
            fd: first,
            stat,
        };
        target.resolved = Some(obj.path.clone());
        if let Err(denied) = ops::check(op, identity, &obj.stat) {
            return Acted::Done(denied_decision(denied));
        }
        if op.is_read() {
            return match ops::read(op, &obj) {
                Ok(back) => Acted::Read(back),
                Err(e) => Acted::Done(BrokerDecision::Failed {
                    errno: errno_of(&e),
                }),
            };
        }
        return Acted::Done(match ops::perform(op, &obj) {
            Ok(()) => BrokerDecision::Performed,
            Err(e) => BrokerDecision::Failed {
                errno: errno_of(&e),
            },
        });
    }
    // The kernel's answers from an xattr's name and value come before its
    // permission checks, and so before any refusal of the policy's.
    if let Ok(st) = crate::resolve::fstat(&first) {
        if let Some(errno) = ops::xattr_kernel_first(op, identity, &st) {
            return Acted::Done(BrokerDecision::Failed { errno });
        }
    }
    let admitted = match access {
        Access::Change => match rules.admit_change(&first) {
            // An unlinked object (nlink 0: an O_TMPFILE, a deleted file or
            // FIFO the caller holds open): admitted only when it was made
            // inside a write path (see `admit_unlinked`); one handed in from
            // outside is refused as its named twin is. Never its size or
            // contents.
            Err(Unresolved::Refused(Refusal::NoPath, _))
                if !matches!(op, Op::Truncate { .. }) && unlinked_file(&first) =>
            {
                rules.admit_unlinked(&first)
            }
            other => other,
        },
        Access::Read => rules.admit_read(first),
    };
    let obj = match admitted {
        Ok(obj) => obj,
        Err(unresolved) => return Acted::Done(unresolved_decision(unresolved, target)),
    };
    target.resolved = Some(PathBuf::from(&obj.path));
    if let Err(denied) = ops::check(op, identity, &obj.stat) {
        return Acted::Done(denied_decision(denied));
    }
    let failed = |e: io::Error| BrokerDecision::Failed {
        errno: errno_of(&e),
    };
    if op.is_read() {
        return match ops::read(op, &obj) {
            Ok(back) => Acted::Read(back),
            Err(e) => Acted::Done(failed(e)),
        };
    }
    Acted::Done(match ops::perform(op, &obj) {
        Ok(()) => BrokerDecision::Performed,
        Err(e) => failed(e),
    })
}

/// The answer to a call [`ops::check`] turned down: the kernel's own errno
/// for a check that mirrors the kernel's (no refusal: the caller would get
/// the same unconfined), a refusal for the policy's.
fn denied_decision(denied: ops::Denied) -> BrokerDecision {
    match denied {
        ops::Denied::Kernel(errno) => BrokerDecision::Failed { errno },
        ops::Denied::Policy(reason) => BrokerDecision::Refused { reason },
    }
}

/// Whether `fd`'s object has no name left (`st_nlink` 0).
fn unlinked_file(fd: &OwnedFd) -> bool {
    crate::resolve::fstat(fd).is_ok_and(|st| st.st_nlink == 0)
}

/// Copies an xattr read's bytes into the caller's buffer, re-checking right
/// before that the request is still pending (its thread id is still the caller's).
fn write_back(
    listener: &Listener,
    id: u64,
    caller: &Caller,
    back: ops::ReadBack,
) -> BrokerDecision {
    if !back.bytes.is_empty() {
        match listener.id_valid(id) {
            Ok(true) => {}
            Ok(false) => return BrokerDecision::CallerGone,
            Err(e) => return crate::connect::unreadable_caller(&e),
        }
        if let Err(e) = caller.write(back.buf, &back.bytes) {
            if errno_of(&e) == libc::ESRCH {
                return BrokerDecision::CallerGone;
            }
            // As the kernel's copy to user space: any failure is EFAULT.
            return BrokerDecision::Failed {
                errno: libc::EFAULT,
            };
        }
    }
    BrokerDecision::Read {
        len: back.len as u64,
    }
}

fn answer(
    listener: &Listener,
    id: u64,
    tid: i32,
    name: &str,
    target: BrokerTarget,
    decision: BrokerDecision,
) -> BrokerRecord {
    answer_with(listener, id, tid, name, target, decision, libc::EPERM)
}

/// Answers the call with the errno of `e`, the kernel's own failure.
fn answer_failed(
    listener: &Listener,
    id: u64,
    tid: i32,
    name: &str,
    target: BrokerTarget,
    e: &io::Error,
) -> BrokerRecord {
    let decision = BrokerDecision::Failed { errno: errno_of(e) };
    answer(listener, id, tid, name, target, decision)
}

/// Hands `fd` to the caller as the call's result; an install that fails
/// (e.g. `EMFILE`) is answered with its errno, and undoes what the open did
/// ([`entries::Deferred`]: a file it created is unlinked). What the open left
/// to do once installed (`O_TRUNC`) is done before the call is answered.
fn answer_fd(
    listener: &Listener,
    own: &Own,
    (id, tid, name): (u64, i32, &str),
    target: BrokerTarget,
    fd: &OwnedFd,
    cloexec: bool,
    deferred: entries::Deferred,
) -> BrokerRecord {
    let pending = deferred.pending();
    let finish = |newfd: i32| match deferred.finish(fd) {
        Ok(()) => listener
            .send(id, i64::from(newfd), 0)
            .map(|sent| sent.then_some(newfd)),
        // Installed already: the caller keeps that fd (nothing can take it
        // back), the call fails with the kernel's errno for the truncation.
        Err(e) => Err(e),
    };
    let sent = match own.cpu.pin(tid) {
        // Installed while pinned; answered once the masks are back.
        Some(pinned) => {
            let added = listener.add_fd(id, fd.as_raw_fd(), cloexec, false);
            pinned.restore();
            // On a send error the fd is the caller's already; the call is
            // answered below.
            match added {
                Ok(Some(newfd)) => finish(newfd),
                other => other,
            }
        }
        None if pending => match listener.add_fd(id, fd.as_raw_fd(), cloexec, false) {
            Ok(Some(newfd)) => finish(newfd),
            other => other,
        },
        None => listener.add_fd(id, fd.as_raw_fd(), cloexec, true),
    };
    let decision = match sent {
        Ok(Some(fd)) => BrokerDecision::Opened { fd },
        Ok(None) => BrokerDecision::CallerGone,
        Err(e) => {
            deferred.undo(fd);
            return answer_failed(listener, id, tid, name, target, &e);
        }
    };
    record(name, tid, target, decision)
}
