//! A running command's refusals as `refused` events, while it runs: one
//! thread for the whole session ([`Watcher`]) looks every [`LIVE_POLL`]
//! while a command runs and sleeps between commands, so a command costs
//! no thread of its own; the last look, once the command has ended, is
//! made by the session's loop ([`Watcher::end`]), before its exit event.
//! For [`LINGER`] after a command it keeps its pace instead of sleeping,
//! so that a next command soon after is found without a wake-up.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sandbox::runner::MediatedCall;
use serde_json::{Map, Value};

use super::approvals;

/// How often a running command's refusals are looked for.
pub(super) const LIVE_POLL: Duration = Duration::from_millis(5);

/// How long after a command the watcher keeps looking every
/// [`LIVE_POLL`] for the next before it sleeps until woken: a command
/// begun meanwhile costs no wake-up of another thread on its way in.
const LINGER: Duration = Duration::from_millis(100);

/// A command's refusals so far (`sandbox::runner` tap, `MediationTap::live`):
/// those not yet handed out and how many it had; `None` while the
/// supervisor cannot tell. Never waits.
pub(super) type Live = Box<dyn Fn() -> Option<(Vec<MediatedCall>, u64)> + Send + 'static>;

/// What [`Watcher::end`] returns: how many refusals the command had, how
/// many `refused` events were queued, and the refusals `live` returned (a
/// kept command's exit event lists them).
pub(super) type Watched = (u64, u64, Vec<MediatedCall>);

/// The one command watched.
struct Job {
    events: approvals::Events,
    /// When it began: its deferred `started` event is released once it
    /// has run [`LIVE_POLL`] ([`Watcher::begin`]).
    begun: Instant,
    id: Value,
    live: Live,
    had: u64,
    sent: u64,
    seen: Vec<MediatedCall>,
}

impl Job {
    /// One look: each refusal `live` returns becomes a `refused` event for
    /// the command, never waiting for the harness (an event that finds the
    /// queue full is dropped). The broker hands out the first 100 of a
    /// command at most (`Between::LIVE_CAP` in `sandbox-broker`), so the
    /// command's rate bounds neither this work nor the queue.
    fn look(&mut self) {
        let Some((calls, count)) = (self.live)() else {
            return;
        };
        self.had = self.had.max(count);
        // A filter refusal of setsid says why ([`crate::show::refusal_reason`]).
        for call in crate::show::with_reasons(&calls) {
            let mut e = Map::new();
            e.insert("id".into(), self.id.clone());
            e.insert("event".into(), "refused".into());
            if let Ok(Value::Object(fields)) = serde_json::to_value(&call) {
                e.extend(fields);
            }
            if self.events.try_send(&Value::Object(e)) {
                self.sent += 1;
            }
            self.seen.push(call);
        }
    }
}

#[derive(Default)]
struct State {
    job: Option<Job>,
    quit: bool,
    /// The thread waits at most [`LIVE_POLL`] (it finds a new job by
    /// itself); when false it sleeps until [`Watcher::begin`] wakes it.
    polling: bool,
}

/// The session's refusal watcher (one thread, started with the session,
/// ended when it is dropped).
pub(super) struct Watcher {
    state: Arc<(Mutex<State>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn lock(m: &Mutex<State>) -> MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Watcher {
    /// Starts the thread. Without it (it could not be started) no event
    /// comes while a command runs; [`Watcher::end`] still looks once.
    pub(super) fn start() -> Self {
        let state: Arc<(Mutex<State>, Condvar)> = Arc::default();
        let theirs = Arc::clone(&state);
        let thread = std::thread::Builder::new()
            .name("session-refused".into())
            .spawn(move || {
                let (m, cv) = &*theirs;
                let mut s = lock(m);
                let mut idle_since: Option<Instant> = None;
                loop {
                    if s.quit {
                        return;
                    }
                    if s.job.is_none() {
                        let since = *idle_since.get_or_insert_with(Instant::now);
                        if since.elapsed() >= LINGER {
                            s.polling = false;
                            s = cv.wait(s).unwrap_or_else(|p| p.into_inner());
                        } else {
                            s.polling = true;
                            s = cv
                                .wait_timeout(s, LIVE_POLL)
                                .map(|(s, _)| s)
                                .unwrap_or_else(|p| p.into_inner().0);
                        }
                        continue;
                    }
                    idle_since = None;
                    s.polling = true;
                    // A command runs: look every LIVE_POLL (the lock is
                    // released while waiting; a look never waits).
                    s = cv
                        .wait_timeout(s, LIVE_POLL)
                        .map(|(s, _)| s)
                        .unwrap_or_else(|p| p.into_inner().0);
                    if let Some(job) = s.job.as_mut() {
                        if job.begun.elapsed() >= LIVE_POLL {
                            job.events.release();
                        }
                        job.look();
                    }
                }
            })
            .ok();
        Watcher { state, thread }
    }

    /// Whether its thread runs (else nothing is sent while a command runs).
    pub(super) fn watches(&self) -> bool {
        self.thread.is_some()
    }

    /// Watches the command `id` from now on: its refusals, as `live` gives
    /// them, become `refused` events on `events`, and an event deferred on
    /// `events` ([`approvals::Events::defer`], its `started`) is released
    /// once it has run [`LIVE_POLL`], if nothing sent it before.
    pub(super) fn begin(
        &self,
        events: approvals::Events,
        id: Value,
        live: impl Fn() -> Option<(Vec<MediatedCall>, u64)> + Send + 'static,
    ) {
        let (m, cv) = &*self.state;
        let mut s = lock(m);
        s.job = Some(Job {
            events,
            begun: Instant::now(),
            id,
            live: Box::new(live),
            had: 0,
            sent: 0,
            seen: Vec::new(),
        });
        // A polling thread finds the job within LIVE_POLL by itself.
        if !s.polling {
            cv.notify_all();
        }
    }

    /// Stops watching the command (which has ended), looks once more, and
    /// says what it had and what was sent; zeros when none is watched.
    pub(super) fn end(&self) -> Watched {
        // Taken under the lock: a look of the thread's is over, and no
        // other follows for this command.
        let job = lock(&self.state.0).job.take();
        match job {
            Some(mut job) => {
                job.look();
                (job.had, job.sent, job.seen)
            }
            None => (0, 0, Vec::new()),
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let (m, cv) = &*self.state;
        lock(m).quit = true;
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
