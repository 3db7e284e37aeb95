//! Relaying bytes both ways between a client and its destination.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};

use crate::state::Slot;

/// Copy buffer per direction: large reads keep a bulk transfer to few
/// syscalls (std's `io::copy` uses 8 KiB between two sockets).
const BUF: usize = 64 * 1024;

/// Copies `from` to `to` until end of stream, then shuts `to`'s write side
/// (the half-close travels on). On an error both sockets are shut down
/// entirely, so the other direction ends too.
fn pump(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = vec![0u8; BUF];
    let result: io::Result<()> = (|| loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        to.write_all(&buf[..n])?;
    })();
    match result {
        Ok(()) => {
            let _ = to.shutdown(Shutdown::Write);
        }
        Err(_) => {
            let _ = from.shutdown(Shutdown::Both);
            let _ = to.shutdown(Shutdown::Both);
        }
    }
}

/// Relays between `client` and `upstream` until both directions ended:
/// client to upstream on a second thread, upstream to client on this one.
pub(crate) fn relay(slot: &Slot, client: TcpStream, upstream: TcpStream) {
    slot.track(&upstream);
    let _ = client.set_read_timeout(None);
    let (client2, upstream2) = match (client.try_clone(), upstream.try_clone()) {
        (Ok(c), Ok(u)) => (c, u),
        _ => return,
    };
    let up = std::thread::Builder::new()
        .name("sandbox-proxy-relay".into())
        .stack_size(128 * 1024)
        .spawn(move || pump(client2, upstream2));
    let Ok(up) = up else {
        // Dropping the clones and the originals closes both connections.
        return;
    };
    pump(upstream, client);
    let _ = up.join();
}
