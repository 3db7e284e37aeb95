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
}

/// The refusals since the window opened, of connections accepted in it.
#[derive(Default)]
struct Window {
    /// Which window is open (counts the closed ones).
    generation: u64,
    first: Vec<Refused>,
    total: u64,
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
        Some(Ticket(Arc::clone(self)))
    }

    /// The places taken now.
    #[cfg(test)]
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

/// One connection's place in a [`Budget`]; dropping it frees the place
/// (on every path: the [`Slot`] holding it is dropped with the connection).
struct Ticket(Arc<Budget>);

impl Drop for Ticket {
    fn drop(&mut self) {
        self.0.used.fetch_sub(1, Ordering::AcqRel);
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
    /// in it (the first [`MAX_REFUSALS_KEPT`]) and how many there were.
    pub(crate) fn take_window(&self) -> (Vec<Refused>, u64) {
        let mut window = lock(&self.window);
        window.generation += 1;
        window.handed = 0;
        let total = std::mem::take(&mut window.total);
        (std::mem::take(&mut window.first), total)
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
        let ticket = match &self.opts.budget {
            Some(budget) => Some(budget.take()?),
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
        let (closed, total) = shared.take_window();
        assert_eq!((hosts(&closed), total), (vec!["one.example"], 1));
        // A connection of the closed window refuses after it closed.
        serve(late, "late.example");
        let next = shared.claim().unwrap();
        serve(next, "two.example");
        let (window, total) = shared.take_window();
        assert_eq!((hosts(&window), total), (vec!["two.example"], 1));
        assert_eq!(
            hosts(&shared.refusals()),
            ["one.example", "late.example", "two.example"],
            "the run's log has all of them"
        );
    }

    /// Two proxies of one process share its budget: two connections held
    /// through one fill a budget of 2, and the other's next connection is
    /// closed at once, unserved (no refusal answered or recorded); twin:
    /// once one of them closes, the other's next connection is served (its
    /// refusal answered and recorded), and every place is freed at the end.
    #[test]
    fn two_proxies_share_the_process_budget() {
        use std::io::{Read, Write};

        let budget = Budget::new(2);
        let start = || {
            let opts = ProxyOptions::default().budget(Arc::clone(&budget));
            crate::Proxy::start(EgressRules::new(Vec::new()), opts).unwrap()
        };
        let (mut a, mut b) = (start(), start());
        let wait_used = |n: usize| {
            let deadline = Instant::now() + Duration::from_secs(10);
            while budget.used() != n {
                assert!(Instant::now() < deadline, "{} used, not {n}", budget.used());
                std::thread::sleep(Duration::from_millis(10));
            }
        };
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
        wait_used(0);
        // Idle clients of `a` hold their places (waiting for a head).
        let held1 = TcpStream::connect(a.addr()).unwrap();
        let held2 = TcpStream::connect(a.addr()).unwrap();
        wait_used(2);
        assert_eq!(ask(&b), "", "closed unserved: the budget is spent");
        assert_eq!(b.refusals().len(), 1, "nothing served, nothing recorded");
        // One of `a`'s closes: its place is `b`'s next connection's.
        drop(held1);
        wait_used(1);
        assert!(ask(&b).starts_with("HTTP/1.1 403 "));
        assert_eq!(b.refusals().len(), 2);
        drop(held2);
        wait_used(0);
        a.shutdown();
        b.shutdown();
        assert_eq!(budget.used(), 0, "no place leaked");
    }
}
