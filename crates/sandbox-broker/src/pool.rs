//! The worker threads that perform admitted connects, so that a connect
//! that waits (seconds, until the caller's timeout) never holds up the
//! broker thread, which keeps serving the caller's other requests. (Writers
//! waiting for a FIFO's reader hold no worker: see [`crate::fifo`].)
//!
//! At most [`MAX_CONNECTS`] connects are under way or queued at once; beyond
//! that [`Pool::submit`] hands the job back (answered `EAGAIN`). Workers
//! number at most the run's thread budget ([`RunBudget::workers`]: its
//! `--pids`, at most [`MAX_CONNECTS`]); the jobs beyond wait in the queue
//! for a free one. The CPU time each worker spends on a job is charged to
//! the run's CPU budget ([`crate::budget`]). Workers start on
//! demand, block every signal (a signal meant for the runner never interrupts
//! a connect), take on the caller's credentials for the connect and give them
//! back; a worker that could not get its own back ends, taking them with it.
//!
//! [`RunBudget::workers`]: crate::budget::RunBudget::workers

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::answer::answer_with;
use crate::budget::{thread_cpu, Spent};
use crate::connect::{self, Done, Job, SLICE};
use crate::creds::{self, AssumeError, Credentials};
use crate::log::{
    BrokerDecision, BrokerLog, BrokerRecord, BrokerTarget, CredentialChange, Refusal,
};
use crate::notif::Listener;

/// Connects under way or queued at once, at most.
pub(crate) const MAX_CONNECTS: usize = 64;
/// A worker's stack: it only decodes nothing, assumes credentials and connects.
const STACK: usize = 256 * 1024;
/// How long [`Pool::finish`] waits for workers still connecting: each looks
/// at the stop flag at least once a [`SLICE`].
const FINISH_WAIT: Duration = Duration::from_millis(3 * SLICE.as_millis() as u64);

/// A call a worker performs.
pub(crate) enum Task {
    Connect(Job),
}

impl Task {
    fn id(&self) -> u64 {
        match self {
            Task::Connect(j) => j.id,
        }
    }

    fn tid(&self) -> i32 {
        match self {
            Task::Connect(j) => j.tid,
        }
    }

    /// What the call names, for the record.
    pub(crate) fn target(&self) -> &BrokerTarget {
        match self {
            Task::Connect(j) => &j.target,
        }
    }

    /// The syscall's name, for the record.
    pub(crate) fn syscall(&self) -> &'static str {
        match self {
            Task::Connect(_) => "connect",
        }
    }

    fn identity(&self) -> &crate::caller::Identity {
        match self {
            Task::Connect(j) => &j.identity,
        }
    }
}

/// Why a task was handed back.
pub(crate) enum Rejected {
    /// [`MAX_CONNECTS`] are under way.
    Full(Box<Task>),
    /// The broker stops, or no worker thread could be started.
    Unavailable(Box<Task>),
}

pub(crate) struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    listener: Arc<Listener>,
    /// The broker thread's own credentials, which workers start with.
    own: Credentials,
    /// Workers at most (the run's thread budget).
    workers: usize,
    /// Where workers put the CPU time they spend, for the run's budget.
    spent: Spent,
    stop: AtomicBool,
    state: Mutex<State>,
    /// Signalled when a job is queued or the pool stops.
    work: Condvar,
    /// Signalled when a worker ends.
    ended: Condvar,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Task>,
    /// (request id, caller tid, target, syscall) of the jobs being performed.
    running: Vec<(u64, i32, BrokerTarget, &'static str)>,
    /// Records of answered jobs, until the broker thread takes them.
    done: Vec<BrokerRecord>,
    threads: usize,
    /// Workers waiting for a job.
    idle: usize,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    // A worker never panics while holding the lock; if one did, the state
    // (plain counters and queues) is still whole.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn gone(syscall: &str, job_tid: i32, target: BrokerTarget) -> BrokerRecord {
    BrokerRecord {
        syscall: syscall.into(),
        pid: job_tid,
        target,
        decision: BrokerDecision::CallerGone,
    }
}

impl Pool {
    /// Workers answer on `listener`; `own` are the credentials of the thread
    /// that will call [`Pool::submit`] (new workers inherit them). At most
    /// `workers` run at once; they add the CPU time they spend to `spent`.
    pub(crate) fn new(
        listener: Arc<Listener>,
        own: Credentials,
        workers: usize,
        spent: Spent,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                listener,
                own,
                workers: workers.clamp(1, MAX_CONNECTS),
                spent,
                stop: AtomicBool::new(false),
                state: Mutex::new(State::default()),
                work: Condvar::new(),
                ended: Condvar::new(),
            }),
        }
    }

    /// Queues `job` for a worker, starting one when none is free. Call it
    /// with the thread's own credentials: a new worker inherits them.
    pub(crate) fn submit(&self, job: Task) -> Result<(), Rejected> {
        let mut st = lock(&self.inner.state);
        if self.inner.stop.load(Ordering::Relaxed) {
            return Err(Rejected::Unavailable(Box::new(job)));
        }
        if st.queue.len() + st.running.len() >= MAX_CONNECTS {
            return Err(Rejected::Full(Box::new(job)));
        }
        st.queue.push_back(job);
        // Each waiting worker takes one queued job; start another for the
        // rest, within the run's thread budget (beyond it, jobs wait).
        if st.queue.len() > st.idle && st.threads < self.inner.workers {
            let inner = Arc::clone(&self.inner);
            let spawned = std::thread::Builder::new()
                .name("sandbox-broker-connect".into())
                .stack_size(STACK)
                .spawn(move || work(&inner));
            match spawned {
                Ok(_) => st.threads += 1,
                Err(e) if st.threads == 0 => {
                    tracing::warn!(%e, "starting a connect worker failed");
                    let job = st.queue.pop_back();
                    return match job {
                        Some(job) => Err(Rejected::Unavailable(Box::new(job))),
                        None => Ok(()),
                    };
                }
                // The running workers take it in turn.
                Err(e) => tracing::warn!(%e, "starting another connect worker failed"),
            }
        }
        self.inner.work.notify_one();
        Ok(())
    }

    /// Moves the records of answered connects into `log`.
    pub(crate) fn drain_into(&self, log: &mut BrokerLog) {
        for record in self.take_done() {
            log.push(record);
        }
    }

    /// The records of the connects answered since the last call.
    pub(crate) fn take_done(&self) -> Vec<BrokerRecord> {
        std::mem::take(&mut lock(&self.inner.state).done)
    }

    /// Stops the workers: each ends within about a [`SLICE`] (a caller that
    /// no longer waits is not waited for). Waits for them a little, then
    /// records what they answered, and the connects still under way as
    /// [`BrokerDecision::CallerGone`] (the run ended first). A worker still inside
    /// a connect that does not wait in slices (neither UNIX-stream nor TCP)
    /// is left to end on its own.
    pub(crate) fn finish(&self, log: &mut BrokerLog) {
        self.inner.stop.store(true, Ordering::Relaxed);
        let mut st = lock(&self.inner.state);
        self.inner.work.notify_all();
        let deadline = Instant::now() + FINISH_WAIT;
        while st.threads > 0 {
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                break;
            };
            st = match self.inner.ended.wait_timeout(st, left) {
                Ok((st, _)) => st,
                Err(e) => e.into_inner().0,
            };
        }
        let done = std::mem::take(&mut st.done);
        let running = std::mem::take(&mut st.running);
        let queued = std::mem::take(&mut st.queue);
        drop(st);
        for record in done {
            log.push(record);
        }
        for (_, tid, target, syscall) in running {
            log.push(gone(syscall, tid, target));
        }
        for job in queued {
            log.push(gone(job.syscall(), job.tid(), job.target().clone()));
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.inner.stop.store(true, Ordering::Relaxed);
        self.inner.work.notify_all();
    }
}

/// Blocks every signal on the calling thread.
fn block_signals() {
    // SAFETY: sigset_t is plain data, filled by sigfillset; the mask is the
    // calling thread's.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
    }
}

fn work(inner: &Inner) {
    block_signals();
    // Inherited from the broker thread, which holds its own when it submits.
    let mut sound = Credentials::current().is_ok_and(|c| c == inner.own);
    let mut st = lock(&inner.state);
    loop {
        if let Some(job) = st.queue.pop_front() {
            if inner.stop.load(Ordering::Relaxed) {
                st.done
                    .push(gone(job.syscall(), job.tid(), job.target().clone()));
                continue;
            }
            st.running
                .push((job.id(), job.tid(), job.target().clone(), job.syscall()));
            drop(st);
            let id = job.id();
            let cpu = thread_cpu();
            let (record, still_sound) = run(inner, job, sound);
            inner.spent.add(thread_cpu().saturating_sub(cpu));
            sound = still_sound;
            st = lock(&inner.state);
            st.running.retain(|(r, ..)| *r != id);
            st.done.push(record);
            if !sound {
                break;
            }
            continue;
        }
        if inner.stop.load(Ordering::Relaxed) {
            break;
        }
        st.idle += 1;
        st = match inner.work.wait(st) {
            Ok(st) => st,
            Err(e) => e.into_inner(),
        };
        st.idle -= 1;
    }
    st.threads -= 1;
    drop(st);
    inner.ended.notify_all();
}

/// Performs one job with the caller's credentials and answers it; the second
/// value says whether the thread has its own credentials afterwards.
fn run(inner: &Inner, job: Task, sound: bool) -> (BrokerRecord, bool) {
    let listener = &inner.listener;
    let refuse = |job: Task, change: CredentialChange| {
        let decision = BrokerDecision::Refused {
            reason: Refusal::CallerCredentials { change },
        };
        answer_with(
            listener,
            job.id(),
            job.tid(),
            job.syscall(),
            job.target().clone(),
            decision,
            libc::EPERM,
        )
    };
    if !sound {
        return (refuse(job, CredentialChange::Capabilities), false);
    }
    let assumed = match creds::assume(&inner.own, job.identity()) {
        Ok(a) => a,
        Err(AssumeError::Refused(change)) => return (refuse(job, change), true),
        Err(AssumeError::Restore(change, e)) => {
            tracing::warn!(%e, "a connect worker could not restore its credentials");
            return (refuse(job, change), false);
        }
    };
    let done = match &job {
        Task::Connect(c) => connect::perform(c, listener, &inner.stop),
    };
    let sound = match assumed.restore() {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(%e, "a connect worker could not restore its credentials");
            false
        }
    };
    let decision = match done {
        Done::Errno(0) => BrokerDecision::Performed,
        Done::Errno(errno) => BrokerDecision::Failed { errno },
        Done::Gone => BrokerDecision::CallerGone,
        // As every connect the egress rules refuse.
        Done::NoLongerOwn => BrokerDecision::Refused {
            reason: Refusal::NetNotAllowed,
        },
    };
    // The caller may have died while the connect waited.
    let decision = match listener.id_valid(job.id()) {
        Ok(true) => decision,
        _ => BrokerDecision::CallerGone,
    };
    let record = answer_with(
        listener,
        job.id(),
        job.tid(),
        job.syscall(),
        job.target().clone(),
        decision,
        libc::ECONNREFUSED,
    );
    (record, sound)
}
