//! SOCKS5 (RFC 1928): no authentication, `CONNECT` only.
//!
//! Hand-written: the protocol is a few fixed-layout messages, smaller than
//! any crate's API for it (and those crates are async).

use std::io::{self, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::time::Instant;

use crate::deadline::read_exact_by;
use crate::relay::relay;
use crate::state::Slot;
use crate::target::{open, Failure, Host, Target};

const VERSION: u8 = 0x05;
const NO_AUTH: u8 = 0x00;
const NO_ACCEPTABLE: u8 = 0xFF;
const CMD_CONNECT: u8 = 0x01;
const ATYP_V4: u8 = 0x01;
const ATYP_NAME: u8 = 0x03;
const ATYP_V6: u8 = 0x04;

/// Reply codes (RFC 1928 section 6).
mod rep {
    pub const SUCCEEDED: u8 = 0x00;
    pub const GENERAL: u8 = 0x01;
    pub const NOT_ALLOWED: u8 = 0x02;
    pub const NET_UNREACHABLE: u8 = 0x03;
    pub const HOST_UNREACHABLE: u8 = 0x04;
    pub const REFUSED: u8 = 0x05;
    pub const COMMAND: u8 = 0x07;
    pub const ADDRESS_TYPE: u8 = 0x08;
}

/// A reply with `code` and the bound address (`0.0.0.0:0` when none).
fn reply(client: &mut TcpStream, code: u8, bound: Option<SocketAddr>) -> io::Result<()> {
    let bound = bound.unwrap_or_else(|| SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0));
    let mut out = vec![VERSION, code, 0x00];
    match bound.ip() {
        IpAddr::V4(ip) => {
            out.push(ATYP_V4);
            out.extend_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            out.push(ATYP_V6);
            out.extend_from_slice(&ip.octets());
        }
    }
    out.extend_from_slice(&bound.port().to_be_bytes());
    client.write_all(&out)
}

/// The reply code for a failure to reach a target.
fn failure_code(failure: &Failure) -> u8 {
    match failure {
        Failure::Refused(_) => rep::NOT_ALLOWED,
        Failure::Unresolvable(_) => rep::HOST_UNREACHABLE,
        Failure::Unreachable(e) => match (e.kind(), e.raw_os_error()) {
            (io::ErrorKind::ConnectionRefused, _) => rep::REFUSED,
            (io::ErrorKind::TimedOut, _) => rep::HOST_UNREACHABLE,
            (_, Some(libc::ENETUNREACH)) => rep::NET_UNREACHABLE,
            (_, Some(libc::EHOSTUNREACH)) => rep::HOST_UNREACHABLE,
            _ => rep::GENERAL,
        },
    }
}

/// What the request asked for, or the reply code that refuses it.
fn read_request(client: &mut TcpStream, deadline: Instant) -> io::Result<Result<Target, u8>> {
    let mut head = [0u8; 4];
    read_exact_by(client, &mut head, deadline)?;
    let [version, command, _reserved, atyp] = head;
    if version != VERSION {
        return Ok(Err(rep::GENERAL));
    }
    let host = match atyp {
        ATYP_V4 => {
            let mut ip = [0u8; 4];
            read_exact_by(client, &mut ip, deadline)?;
            Host::Ip(IpAddr::V4(Ipv4Addr::from(ip)))
        }
        ATYP_V6 => {
            let mut ip = [0u8; 16];
            read_exact_by(client, &mut ip, deadline)?;
            Host::Ip(IpAddr::V6(Ipv6Addr::from(ip)))
        }
        ATYP_NAME => {
            let mut len = [0u8; 1];
            read_exact_by(client, &mut len, deadline)?;
            let mut name = vec![0u8; usize::from(len[0])];
            read_exact_by(client, &mut name, deadline)?;
            // Bytes other than printable ASCII are escaped (`\x1b`): such
            // text never matches a rule, and the refusal log stays plain.
            Host::from_text(&name.escape_ascii().to_string())
        }
        _ => return Ok(Err(rep::ADDRESS_TYPE)),
    };
    let mut port = [0u8; 2];
    read_exact_by(client, &mut port, deadline)?;
    if command != CMD_CONNECT {
        return Ok(Err(rep::COMMAND));
    }
    Ok(Ok(Target {
        host,
        port: u16::from_be_bytes(port),
    }))
}

/// Serves one SOCKS5 connection.
pub(crate) fn serve(slot: &Slot, mut client: TcpStream, deadline: Instant) {
    let mut greeting = [0u8; 2];
    if read_exact_by(&mut client, &mut greeting, deadline).is_err() {
        return;
    }
    let mut methods = vec![0u8; usize::from(greeting[1])];
    if read_exact_by(&mut client, &mut methods, deadline).is_err() {
        return;
    }
    if !methods.contains(&NO_AUTH) {
        let _ = client.write_all(&[VERSION, NO_ACCEPTABLE]);
        return;
    }
    if client.write_all(&[VERSION, NO_AUTH]).is_err() {
        return;
    }
    let target = match read_request(&mut client, deadline) {
        Ok(Ok(target)) => target,
        Ok(Err(code)) => {
            let _ = reply(&mut client, code, None);
            return;
        }
        Err(_) => return,
    };
    // A host a request rule names is intercepted here as after an HTTP
    // `CONNECT`: the proxy itself is the other end.
    #[cfg(target_os = "linux")]
    if let (Some(interception), Host::Name(name)) = (&slot.shared.opts.interception, &target.host) {
        if interception.inner.intercepts(name, target.port) {
            let bound = client.local_addr().ok();
            if reply(&mut client, rep::SUCCEEDED, bound).is_err() {
                return;
            }
            return crate::intercept::serve(
                slot,
                &interception.inner,
                client,
                name,
                target.port,
                None,
            );
        }
    }
    let mut upstream = match open(&slot.shared, &target) {
        Ok(upstream) => upstream,
        Err(failure) => {
            let _ = reply(&mut client, failure_code(&failure), None);
            return;
        }
    };
    if reply(&mut client, rep::SUCCEEDED, upstream.local_addr().ok()).is_err() {
        return;
    }
    // On a port a request rule intercepts, a TLS ClientHello must ask for
    // the tunnel's own host (crate::sni).
    #[cfg(target_os = "linux")]
    {
        let Some(first) = crate::sni::gate(slot, &mut client, &upstream, &target, Vec::new())
        else {
            return;
        };
        if !first.is_empty() && upstream.write_all(&first).is_err() {
            return;
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = &mut upstream;
    relay(slot, client, upstream);
}
