//! The accepting loop, per-connection threads, the registry of open sockets
//! (so shutdown can close them) and the refusal log.

use std::collections::HashMap;
use std::io::{self, Read};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use sandbox_core::net::{EgressRules, HostAddrs};

use crate::{ProxyOptions, Refused, MAX_REFUSALS_KEPT};

/// Stack of a connection thread: buffers live on the heap.
const STACK: usize = 256 * 1024;

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
    live: Mutex<Live>,
    idle: Condvar,
}

#[derive(Default)]
struct RefusalLog {
    first: Vec<Refused>,
    total: u64,
}

/// Open connections: their count and clones of their sockets.
#[derive(Default)]
struct Live {
    next_id: u64,
    count: usize,
    sockets: HashMap<u64, Vec<TcpStream>>,
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
            live: Mutex::default(),
            idle: Condvar::new(),
        }
    }

    pub(crate) fn refuse(&self, refused: Refused) {
        let mut log = lock(&self.log);
        log.total += 1;
        if log.first.len() < MAX_REFUSALS_KEPT {
            log.first.push(refused);
        }
    }

    pub(crate) fn refusals(&self) -> Vec<Refused> {
        lock(&self.log).first.clone()
    }

    pub(crate) fn refusal_count(&self) -> u64 {
        lock(&self.log).total
    }

    /// A slot for one more connection, unless `max_connections` are open.
    fn claim(self: &Arc<Self>) -> Option<Slot> {
        let mut live = lock(&self.live);
        if live.count >= self.opts.max_connections {
            return None;
        }
        live.count += 1;
        live.next_id += 1;
        Some(Slot {
            shared: Arc::clone(self),
            id: live.next_id,
        })
    }

    /// Shuts down every open connection's sockets, so their threads end.
    pub(crate) fn close_all(&self) {
        let live = lock(&self.live);
        for socket in live.sockets.values().flatten() {
            let _ = socket.shutdown(Shutdown::Both);
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
}

impl Slot {
    /// Registers a clone of `socket` so that shutdown can close it; when
    /// the proxy is already stopping, closes it at once.
    pub(crate) fn track(&self, socket: &TcpStream) {
        let clone = socket.try_clone();
        let mut live = lock(&self.shared.live);
        if self.shared.stopping.load(Ordering::SeqCst) {
            let _ = socket.shutdown(Shutdown::Both);
            return;
        }
        match clone {
            Ok(clone) => live.sockets.entry(self.id).or_default().push(clone),
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

/// Accepts connections until `woken` becomes readable (its peer closed).
pub(crate) fn accept_loop(shared: &Arc<Shared>, listener: &TcpListener, woken: &UnixStream) {
    let mut fds = [
        libc::pollfd {
            fd: listener.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: woken.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    loop {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        for fd in &mut fds {
            fd.revents = 0;
        }
        // SAFETY: `fds` is a valid array of two pollfd for the call; both
        // descriptors stay open while the borrowed listener and socket live.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, -1) };
        if n < 0 {
            if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                std::thread::sleep(Duration::from_millis(20));
            }
            continue;
        }
        if fds[1].revents != 0 {
            return;
        }
        match listener.accept() {
            Ok((stream, _)) => dispatch(shared, stream),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) => {}
            // Out of descriptors or memory: wait a little rather than spin.
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Serves `stream` on a thread of its own, or closes it when the proxy is
/// full or no thread can be started.
fn dispatch(shared: &Arc<Shared>, stream: TcpStream) {
    let Some(slot) = shared.claim() else {
        return;
    };
    let spawned = std::thread::Builder::new()
        .name("sandbox-proxy-conn".into())
        .stack_size(STACK)
        .spawn(move || serve(slot, stream));
    // On failure the closure, its slot and the stream are dropped: closed.
    drop(spawned);
}

/// One client connection: sniffs the protocol and hands over.
fn serve(slot: Slot, mut client: TcpStream) {
    // A listener's O_NONBLOCK is inherited by accepted sockets on BSDs.
    if client.set_nonblocking(false).is_err() {
        return;
    }
    slot.track(&client);
    let _ = client.set_nodelay(true);
    let deadline = Instant::now() + slot.shared.opts.head_timeout;
    let mut first = [0u8; 1];
    match peek_by(&mut client, &mut first, deadline) {
        Ok(1) if first[0] == 0x05 => crate::socks::serve(&slot, client, deadline),
        Ok(1) => crate::http::serve(&slot, client, deadline),
        _ => {}
    }
}

/// Sets the read timeout to what is left until `deadline`.
fn time_left(stream: &TcpStream, deadline: Instant) -> io::Result<()> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        return Err(io::ErrorKind::TimedOut.into());
    }
    stream.set_read_timeout(Some(left))
}

/// A read timeout shows as `WouldBlock` on Unix: call it `TimedOut`.
fn timed_out(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::WouldBlock {
        io::ErrorKind::TimedOut.into()
    } else {
        e
    }
}

fn peek_by(stream: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> io::Result<usize> {
    loop {
        time_left(stream, deadline)?;
        match stream.peek(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r.map_err(timed_out),
        }
    }
}

/// One read that ends by `deadline`.
pub(crate) fn read_by(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Instant,
) -> io::Result<usize> {
    loop {
        time_left(stream, deadline)?;
        match stream.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => return r.map_err(timed_out),
        }
    }
}

/// Fills `buf` by `deadline`; an early end of stream is `UnexpectedEof`.
pub(crate) fn read_exact_by(
    stream: &mut TcpStream,
    buf: &mut [u8],
    deadline: Instant,
) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        match read_by(stream, &mut buf[filled..], deadline)? {
            0 => return Err(io::ErrorKind::UnexpectedEof.into()),
            n => filled += n,
        }
    }
    Ok(())
}
