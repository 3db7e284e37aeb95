//! The accepting loop and the per-connection threads.

use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::deadline::peek_by;
use crate::peer::Gate;
use crate::state::{Shared, Slot};

/// Stack of a connection thread: buffers live on the heap.
const STACK: usize = 256 * 1024;

/// Accepts connections until `woken` becomes readable (its peer closed).
pub(crate) fn accept_loop(shared: &Arc<Shared>, listener: &TcpListener, woken: &UnixStream) {
    // Who may be served: the run's processes only, when the proxy is a
    // run's (checked here, before a slot, a byte, a question or a record).
    let mut gate = shared.opts.peers.clone().map(Gate::new);
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
            Ok((stream, peer)) => {
                if let Some(gate) = &mut gate {
                    if !gate.admits(peer, shared.addr) {
                        // Closed at once, unread (counted first: whoever
                        // sees it closed sees it counted).
                        shared.closed_foreign();
                        drop(stream);
                        continue;
                    }
                }
                dispatch(shared, stream)
            }
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
        shared.closed_at_limit();
        return;
    };
    let spawned = std::thread::Builder::new()
        .name("sandbox-proxy-conn".into())
        .stack_size(STACK)
        .spawn(move || serve(slot, stream));
    // On failure the closure, its slot and the stream are dropped: closed.
    if spawned.is_err() {
        shared.closed_at_limit();
    }
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
