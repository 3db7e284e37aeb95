//! The state the proxy handle, the acceptor and the connections share: the
//! rules, the registry of open sockets (so shutdown can close them), the
//! refusal log, and each connection's slot.

use std::collections::HashMap;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sandbox_core::net::{EgressRules, HostAddrs};

use crate::hold::{Pending, Reply, Settled};
use crate::{ProxyOptions, Refused, MAX_REFUSALS_KEPT};

/// State shared by the proxy handle, the acceptor and the connections.
pub(crate) struct Shared {
    pub(crate) rules: EgressRules,
    /// This host's own addresses, read when the proxy started (only when a
    /// wildcard rule needs them; empty otherwise).
    pub(crate) own: HostAddrs,
    pub(crate) opts: ProxyOptions,
    /// The proxy's own listening address.
    pub(crate) addr: SocketAddr,
    pub(crate) stopping: AtomicBool,
    log: Mutex<RefusalLog>,
    /// The refusals of the current window (one command of a shared
    /// launch), which [`Shared::take_window`] closes.
    window: Mutex<Window>,
    live: Mutex<Live>,
    idle: Condvar,
    /// The questions connections wait on, settled as stopped on shutdown.
    held: Mutex<Held>,
    /// Its own places in the process's [`Budget`] (when it has one).
    reserved: Option<Arc<Reserved>>,
}

#[derive(Default)]
struct Held {
    next_id: u64,
    waiting: HashMap<u64, Reply>,
}

#[derive(Default)]
struct RefusalLog {
    first: Vec<Refused>,
    total: u64,
    ended: Ended,
}

/// Connections the proxy ended for a bound of its own, not for a rule:
/// none is a refusal, each is counted in the run's record
/// ([`Ended::add_to`]).
#[derive(Default, Clone, Copy)]
pub(crate) struct Ended {
    /// Closed on accept: its `max_connections` or the process's
    /// [`Budget`] was reached, or no thread could serve it.
    at_limit: u64,
    /// Cut after the client had ended its side and the upstream stayed
    /// silent [`crate::relay::HALF_CLOSED_IDLE`].
    silent: u64,
    /// Closed on accept: the client was not one of the run's processes
    /// ([`crate::RunPeers`]), or could not be looked up.
    foreign: u64,
}

impl Ended {
    /// Adds these counts to a run's (or a command's) record.
    pub(crate) fn add_to(self, m: &mut sandbox_core::Mediation) {
        let n = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        m.egress_closed_at_limit = m.egress_closed_at_limit.saturating_add(n(self.at_limit));
        m.egress_cut_silent = m.egress_cut_silent.saturating_add(n(self.silent));
        m.egress_foreign_closed = m.egress_foreign_closed.saturating_add(n(self.foreign));
    }

    #[cfg(test)]
    pub(crate) fn silent(&self) -> u64 {
        self.silent
    }

    #[cfg(all(test, target_os = "linux"))]
    pub(crate) fn foreign(&self) -> u64 {
        self.foreign
    }
}

/// The refusals since the window opened, of connections accepted in it.
#[derive(Default)]
struct Window {
    /// Which window is open (counts the closed ones).
    generation: u64,
    first: Vec<Refused>,
    total: u64,
    ended: Ended,
    /// How many of `first` [`Shared::live_window`] handed out.
    handed: usize,
}

std::thread_local! {
    /// The window the connection this thread serves was accepted in
    /// (set when the thread tracks its client, [`Slot::track`]).
    static CONNECTION_WINDOW: std::cell::Cell<Option<u64>> = const { std::cell::Cell::new(None) };
}

/// Open connections: their count and clones of their sockets.
#[derive(Default)]
struct Live {
    next_id: u64,
    count: usize,
    /// Each open connection's window (see [`Slot::window`]) and sockets.
    sockets: HashMap<u64, (u64, Vec<TcpStream>)>,
    /// The connections of windows before this one are ended
    /// ([`Shared::end_window`]): one that tracks a socket later is shut
    /// down at once.
    ended_before: u64,
}

/// Connections several proxies of one process share: a runner hosts many
/// egresses at once (a session's shared run, each kept command's, each
/// nested run's), and all of their connections hold descriptors of the one
/// process. A proxy given a budget ([`ProxyOptions::budget`]) serves a
/// connection only with a place in it as well as under its own
/// [`ProxyOptions::max_connections`].
#[derive(Debug)]
pub(crate) struct Budget {
    size: usize,
    used: AtomicUsize,
}

impl Budget {
    /// A budget of `size` connections at once (at least 1).
    pub(crate) fn new(size: usize) -> Arc<Self> {
        Arc::new(Self {
            size: size.max(1),
            used: AtomicUsize::new(0),
        })
    }

    /// One place, unless all `size` are taken; freed when the ticket drops.
    fn take(self: &Arc<Self>) -> Option<Ticket> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used < self.size).then_some(used + 1)
            })
            .ok()?;
        Some(Ticket::Shared(Arc::clone(self)))
    }

    /// The places taken now.
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// Sets aside places for one proxy, for as long as it lives: an
    /// eighth of the budget, 1 to [`MAX_RESERVED`], as many of them as are
    /// free now. A proxy started while others hold their connections (a
    /// session's shared egress, started before any kept command's or
    /// nested run's) so keeps that many however the others fill the rest.
    pub(crate) fn reserve(self: &Arc<Self>) -> Arc<Reserved> {
        let want = (self.size / 8).clamp(1, MAX_RESERVED);
        let mut got = 0;
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                got = want.min(self.size.saturating_sub(used));
                Some(used + got)
            });
        Arc::new(Reserved {
            budget: Arc::clone(self),
            size: got,
            used: AtomicUsize::new(0),
        })
    }
}

/// The most places [`Budget::reserve`] sets aside for one proxy.
const MAX_RESERVED: usize = 16;

/// A proxy's own places in a [`Budget`] ([`Budget::reserve`]): its
/// connections take these first, then the budget's free ones; they go back
/// to the budget when the proxy and its last connection are gone.
#[derive(Debug)]
pub(crate) struct Reserved {
    budget: Arc<Budget>,
    size: usize,
    used: AtomicUsize,
}

impl Reserved {
    /// One of the proxy's own places, else one of the budget's.
    fn take(self: &Arc<Self>) -> Option<Ticket> {
        let own = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                (used < self.size).then_some(used + 1)
            })
            .is_ok();
        if own {
            return Some(Ticket::Own(Arc::clone(self)));
        }
        self.budget.take()
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.size, Ordering::AcqRel);
    }
}

/// One connection's place in a [`Budget`]; dropping it frees the place
/// (on every path: the [`Slot`] holding it is dropped with the connection).
enum Ticket {
    /// One of the budget's shared places.
    Shared(Arc<Budget>),
    /// One of its proxy's own places ([`Reserved`]).
    Own(Arc<Reserved>),
}

impl Drop for Ticket {
    fn drop(&mut self) {
        match self {
            Ticket::Shared(budget) => budget.used.fetch_sub(1, Ordering::AcqRel),
            Ticket::Own(reserved) => reserved.used.fetch_sub(1, Ordering::AcqRel),
        };
    }
}

/// Locks `m`, also when a thread panicked while holding it: the data is
/// counters and socket handles, still consistent enough to serve and stop.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Shared {
    pub(crate) fn new(
        rules: EgressRules,
        own: HostAddrs,
        opts: ProxyOptions,
        addr: SocketAddr,
    ) -> Self {
        let reserved = opts.budget.as_ref().map(Budget::reserve);
        Self {
            rules,
            own,
            opts,
            addr,
            stopping: AtomicBool::new(false),
            log: Mutex::default(),
            window: Mutex::default(),
            live: Mutex::default(),
            idle: Condvar::new(),
            held: Mutex::default(),
            reserved,
        }
    }

    pub(crate) fn refuse(&self, refused: Refused) {
        let mut log = lock(&self.log);
        log.total += 1;
        if log.first.len() < MAX_REFUSALS_KEPT {
            log.first.push(refused.clone());
        }
        drop(log);
        // A connection of a closed window (its command has ended) is not
        // the current command's: its refusal is in the run's log only.
        let mut window = lock(&self.window);
        let of = CONNECTION_WINDOW.with(std::cell::Cell::get);
        if of.is_some_and(|g| g != window.generation) {
            return;
        }
        window.total += 1;
        if window.first.len() < MAX_REFUSALS_KEPT {
            window.first.push(refused);
        }
    }

    /// Closes the current window and opens the next: the refusals recorded
    /// in it (the first [`MAX_REFUSALS_KEPT`]), how many there were, and
    /// the connections ended for the proxy's own bounds.
    pub(crate) fn take_window(&self) -> (Vec<Refused>, u64, Ended) {
        let mut window = lock(&self.window);
        window.generation += 1;
        window.handed = 0;
        let total = std::mem::take(&mut window.total);
        let ended = std::mem::take(&mut window.ended);
        (std::mem::take(&mut window.first), total, ended)
    }

    /// The connections ended for the proxy's own bounds, in all.
    pub(crate) fn ended(&self) -> Ended {
        lock(&self.log).ended
    }

    /// Counts a connection closed on accept (over a limit), for the
    /// current window.
    pub(crate) fn closed_at_limit(&self) {
        lock(&self.log).ended.at_limit += 1;
        lock(&self.window).ended.at_limit += 1;
    }

    /// Counts a connection closed on accept because its client is not one
    /// of the run's processes ([`crate::RunPeers`]). In the run's count
    /// only, never a window's: nothing says which command it would be.
    pub(crate) fn closed_foreign(&self) {
        lock(&self.log).ended.foreign += 1;
    }

    /// The current window's refusals since the last call, and how many it
    /// had so far.
    pub(crate) fn live_window(&self) -> (Vec<Refused>, u64) {
        let mut window = lock(&self.window);
        let new = window.first[window.handed..].to_vec();
        window.handed = window.first.len();
        (new, window.total)
    }

    pub(crate) fn refusals(&self) -> Vec<Refused> {
        lock(&self.log).first.clone()
    }

    pub(crate) fn refusal_count(&self) -> u64 {
        lock(&self.log).total
    }

    /// A slot for one more connection, unless `max_connections` are open
    /// or the process's [`Budget`] (when the proxy has one) is spent.
    pub(crate) fn claim(self: &Arc<Self>) -> Option<Slot> {
        let mut live = lock(&self.live);
        if live.count >= self.opts.max_connections {
            return None;
        }
        let ticket = match &self.reserved {
            Some(reserved) => Some(reserved.take()?),
            None => None,
        };
        live.count += 1;
        live.next_id += 1;
        Some(Slot {
            shared: Arc::clone(self),
            id: live.next_id,
            window: lock(&self.window).generation,
            _ticket: ticket,
        })
    }

    /// Asks the decider about `pending` and waits for the answer, at most
    /// its hold limit; `None` without a decider, `Err(held)` when
    /// [`ProxyOptions::max_held`] questions wait already (or the proxy is
    /// stopping: `held` is then 0).
    pub(crate) fn hold(&self, pending: Pending) -> Option<Result<Settled, usize>> {
        let decider = self.opts.decider.as_ref()?;
        let reply = Reply::new();
        let id = {
            let mut held = lock(&self.held);
            if self.stopping.load(Ordering::SeqCst) {
                return Some(Ok(Settled::Stopped));
            }
            if held.waiting.len() >= self.opts.max_held {
                return Some(Err(held.waiting.len()));
            }
            held.next_id += 1;
            let id = held.next_id;
            held.waiting.insert(id, reply.clone());
            id
        };
        decider.ask(pending, reply.clone());
        let settled = reply.wait(decider.hold_limit());
        lock(&self.held).waiting.remove(&id);
        Some(Ok(settled))
    }

    /// Shuts down every open connection's sockets, so their threads end,
    /// and denies every held question.
    pub(crate) fn close_all(&self) {
        for reply in lock(&self.held).waiting.values() {
            reply.stop();
        }
        let live = lock(&self.live);
        for socket in live.sockets.values().flat_map(|(_, s)| s) {
            let _ = socket.shutdown(Shutdown::Both);
        }
    }

    /// Ends the connections accepted in the current window or before it
    /// that are still open (a shared launch's command has ended:
    /// [`crate::EgressTap::take`]): shuts their sockets down both ways, so
    /// their threads end and free their slots, however their peers behave
    /// (an upstream that never answers nor closes). One of them that
    /// tracks a socket later is shut down then ([`Slot::track`]).
    pub(crate) fn end_window(&self) {
        let generation = lock(&self.window).generation;
        let mut live = lock(&self.live);
        live.ended_before = live.ended_before.max(generation + 1);
        for (window, sockets) in live.sockets.values() {
            if *window <= generation {
                for socket in sockets {
                    let _ = socket.shutdown(Shutdown::Both);
                }
            }
        }
    }

    /// Denies every question held now (the command they were asked for
    /// has ended: a shared launch's [`crate::EgressTap::take`]), so their
    /// connections refuse and end before the command's window closes.
    pub(crate) fn deny_held(&self) {
        for reply in lock(&self.held).waiting.values() {
            reply.stop();
        }
    }

    /// Waits until no connection is open, at most `grace`.
    pub(crate) fn wait_idle(&self, grace: Duration) {
        let deadline = Instant::now() + grace;
        let mut live = lock(&self.live);
        while live.count > 0 {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            live = match self.idle.wait_timeout(live, left) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }
}

/// One open connection's place in [`Live`]; dropping it frees the place.
pub(crate) struct Slot {
    pub(crate) shared: Arc<Shared>,
    id: u64,
    /// The refusal window it was accepted in.
    window: u64,
    /// Its place in the process's [`Budget`], freed with the slot.
    _ticket: Option<Ticket>,
}

impl Slot {
    /// Counts this connection cut after its client had ended its side and
    /// the upstream stayed silent (for the window it was accepted in).
    pub(crate) fn cut_silent(&self) {
        self.silence_note().note();
    }

    /// What counts this connection's silence cut where the slot is not at
    /// hand ([`crate::relay::read_while_heard`]'s callers).
    pub(crate) fn silence_note(&self) -> SilenceNote {
        SilenceNote {
            shared: Arc::clone(&self.shared),
            window: self.window,
        }
    }

    /// Registers a clone of `socket` so that shutdown can close it; when
    /// the proxy is already stopping, closes it at once.
    pub(crate) fn track(&self, socket: &TcpStream) {
        // Its refusals, on this thread, belong to the window it was
        // accepted in ([`Shared::refuse`]).
        CONNECTION_WINDOW.with(|w| w.set(Some(self.window)));
        let clone = socket.try_clone();
        let mut live = lock(&self.shared.live);
        if self.shared.stopping.load(Ordering::SeqCst) || self.window < live.ended_before {
            let _ = socket.shutdown(Shutdown::Both);
            return;
        }
        match clone {
            Ok(clone) => live
                .sockets
                .entry(self.id)
                .or_insert_with(|| (self.window, Vec::new()))
                .1
                .push(clone),
            // Without a clone shutdown could not reach it: do not serve it.
            Err(_) => {
                let _ = socket.shutdown(Shutdown::Both);
            }
        }
    }
}

/// A slot of a proxy of its own, with the default options (unit tests).
#[cfg(test)]
pub(crate) fn test_slot() -> Slot {
    let shared = Arc::new(Shared::new(
        EgressRules::new(Vec::new()),
        HostAddrs::new([]),
        ProxyOptions::default(),
        "127.0.0.1:9".parse().expect("an address"),
    ));
    shared.claim().expect("a slot")
}

/// Counts one connection's silence cut ([`Slot::cut_silent`]).
pub(crate) struct SilenceNote {
    shared: Arc<Shared>,
    window: u64,
}

impl SilenceNote {
    pub(crate) fn note(&self) {
        lock(&self.shared.log).ended.silent += 1;
        let mut window = lock(&self.shared.window);
        if window.generation == self.window {
            window.ended.silent += 1;
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut live = lock(&self.shared.live);
        live.sockets.remove(&self.id);
        live.count = live.count.saturating_sub(1);
        self.shared.idle.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RefusalReason;

    fn refused(host: &str) -> Refused {
        Refused {
            host: host.to_owned(),
            port: 80,
            reason: RefusalReason::NameNotListed,
        }
    }

    fn hosts(list: &[Refused]) -> Vec<&str> {
        list.iter().map(|r| r.host.as_str()).collect()
    }

    /// Each window holds the refusals of the connections accepted in it;
    /// one a connection of a closed window makes later is in the run's log
    /// only, not in the next window (twin: the next window's own
    /// connection's refusal is in it), and the live view hands each out
    /// once.
    #[test]
    fn a_late_refusal_of_a_closed_window_is_not_the_next_ones() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::new(
            EgressRules::new(Vec::new()),
            HostAddrs::new([]),
            ProxyOptions::default(),
            addr,
        ));
        let serve = |slot: Slot, host: &'static str| {
            let client = TcpStream::connect(addr).unwrap();
            std::thread::spawn(move || {
                slot.track(&client);
                slot.shared.refuse(refused(host));
            })
            .join()
            .unwrap();
        };
        let first = shared.claim().unwrap();
        serve(first, "one.example");
        assert_eq!(hosts(&shared.live_window().0), ["one.example"]);
        assert!(shared.live_window().0.is_empty(), "handed out once");
        let late = shared.claim().unwrap();
        let (closed, total, _) = shared.take_window();
        assert_eq!((hosts(&closed), total), (vec!["one.example"], 1));
        // A connection of the closed window refuses after it closed.
        serve(late, "late.example");
        let next = shared.claim().unwrap();
        serve(next, "two.example");
        let (window, total, _) = shared.take_window();
        assert_eq!((hosts(&window), total), (vec!["two.example"], 1));
        assert_eq!(
            hosts(&shared.refusals()),
            ["one.example", "late.example", "two.example"],
            "the run's log has all of them"
        );
    }

    /// Two proxies of one process share its budget, each with places of
    /// its own (an eighth: 2 of 16): connections held through one take its
    /// own places and then every free one, and its next connection is
    /// closed at once, unserved (no refusal answered or recorded); the
    /// other still serves with its own places (a kept command's flood
    /// leaves the session's egress its own), and once those are held too,
    /// its next is closed; twin: once one of the first's closes, the other's
    /// next connection is served (its refusal answered and recorded), and
    /// every place is freed at the end.
    #[test]
    fn two_proxies_share_the_process_budget() {
        use std::io::{Read, Write};

        let budget = Budget::new(16);
        let start = || {
            let opts = ProxyOptions::default().budget(Arc::clone(&budget));
            crate::Proxy::start(EgressRules::new(Vec::new()), opts).unwrap()
        };
        let (a, b) = (start(), start());
        let wait_used = |n: usize| {
            let deadline = Instant::now() + Duration::from_secs(10);
            while budget.used() != n {
                assert!(Instant::now() < deadline, "{} used, not {n}", budget.used());
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        // Each proxy's own 2 are set aside.
        wait_used(4);
        // Served: answered 403 for a name no rule lists (empty: closed).
        let ask = |proxy: &crate::Proxy| {
            let mut s = TcpStream::connect(proxy.addr()).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            let _ = s.write_all(b"CONNECT unlisted.example:443 HTTP/1.1\r\n\r\n");
            let mut answer = Vec::new();
            let _ = s.read_to_end(&mut answer);
            String::from_utf8_lossy(&answer).into_owned()
        };
        // Positive control: a proxy with room serves.
        assert!(ask(&b).starts_with("HTTP/1.1 403 "));
        assert_eq!(b.refusals().len(), 1);
        // Idle clients of `a` hold places (waiting for a head): its own 2,
        // then the 12 free ones.
        let mut held_a = Vec::new();
        for n in 1..=14 {
            held_a.push(TcpStream::connect(a.addr()).unwrap());
            wait_used(4 + n.max(2) - 2);
        }
        wait_used(16);
        assert_eq!(ask(&a), "", "closed unserved: the budget is spent");
        assert_eq!(a.refusals().len(), 0, "nothing served, nothing recorded");
        // `b` still serves with its own places.
        assert!(ask(&b).starts_with("HTTP/1.1 403 "));
        assert_eq!(b.refusals().len(), 2);
        // (Its served connection's thread has ended and freed its place.)
        std::thread::sleep(Duration::from_millis(300));
        let held_b = [
            TcpStream::connect(b.addr()).unwrap(),
            TcpStream::connect(b.addr()).unwrap(),
        ];
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(ask(&b), "", "closed unserved: its own places are held too");
        assert_eq!(b.refusals().len(), 2);
        // One of `a`'s closes: its place is `b`'s next connection's.
        held_a.pop();
        wait_used(15);
        assert!(ask(&b).starts_with("HTTP/1.1 403 "));
        assert_eq!(b.refusals().len(), 3);
        drop(held_a);
        drop(held_b);
        wait_used(4);
        drop(a);
        drop(b);
        wait_used(0);
        assert_eq!(budget.used(), 0, "no place leaked");
    }
}
