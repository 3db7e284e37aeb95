//! The splice relays' pipes are bounded for the process (src/pipes.rs): a
//! test binary of its own, so the pipes this process holds are the proxy's.
//!
//! The kernel accounts pipe pages to the user across the host; past
//! `fs.pipe-user-pages-soft` every new pipe of the user's unprivileged
//! processes (every sandboxed command's) is 8 KiB. Silent tunnels took 2
//! MiB each and put the user over it at 32: here 40 silent tunnels hold no
//! pipe, and 40 echoing ones (80 directions with bytes to move) hold at
//! most the process's share, the rest copied, every byte relayed whole.

#![cfg(target_os = "linux")]

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use sandbox_proxy::{EgressRule, Proxy, ProxyOptions};

const TUNNELS: usize = 40;
const BYTES: usize = 128 * 1024;

/// The pipes this process holds (their `pipe:[inode]` names). Only names:
/// `F_GETPIPE_SZ` would wait on a relay's pipe while its splice(2) waits
/// for the socket with the pipe locked.
fn pipes() -> BTreeSet<String> {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|entry| std::fs::read_link(entry.path()).ok())
        .map(|target| target.to_string_lossy().into_owned())
        .filter(|target| target.starts_with("pipe:"))
        .collect()
}

/// Waits (bounded) until `done` holds, polling every 50 ms.
fn settle(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "never: {what}");
        thread::sleep(Duration::from_millis(50));
    }
}

fn read_head(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// The places the process's share holds with the host's soft limit (as
/// src/pipes.rs counts: an eighth of it, 1 MiB pipes within half of it,
/// 64 KiB ones for the rest).
fn places() -> usize {
    let soft = std::fs::read_to_string("/proc/sys/fs/pipe-user-pages-soft")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(16384);
    let share = soft / 8;
    let large = (share / 2) / 256;
    let small = (share - large * 256) / 16;
    large + small
}

#[test]
fn silent_tunnels_hold_no_pipe_and_busy_ones_at_most_the_share() {
    let baseline = pipes().len();
    // An echo origin: every connection gets back what it sends; a
    // connection stays open and silent until its client sends.
    let origin = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = origin.local_addr().unwrap().port();
    let (accepted, seen) = mpsc::channel();
    thread::spawn(move || {
        for conn in origin.incoming() {
            let Ok(conn) = conn else { continue };
            let _ = accepted.send(());
            thread::spawn(move || {
                let mut back = conn.try_clone().unwrap();
                let _ = std::io::copy(&mut &conn, &mut back);
                let _ = back.shutdown(Shutdown::Write);
            });
        }
    });
    let rules: Vec<EgressRule> = vec![format!("localhost:{port}").parse().unwrap()];
    let proxy = Proxy::start(rules, ProxyOptions::default()).unwrap();

    let mut clients = Vec::new();
    for _ in 0..TUNNELS {
        let mut s = TcpStream::connect(proxy.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        write!(
            s,
            "CONNECT localhost:{port} HTTP/1.1\r\nHost: localhost\r\n\r\n"
        )
        .unwrap();
        let head = read_head(&mut s);
        assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
        clients.push(s);
    }
    for _ in 0..TUNNELS {
        seen.recv_timeout(Duration::from_secs(20)).unwrap();
    }
    // Every relay thread has started (each waits on its source now).
    thread::sleep(Duration::from_millis(500));
    assert_eq!(
        pipes().len(),
        baseline,
        "{TUNNELS} silent tunnels hold pipes: {:?}",
        pipes()
    );

    // Positive control: bytes both ways through every tunnel (80
    // directions), splice where the share allows and a copy past it.
    let writers: Vec<_> = clients
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let mut s = s.try_clone().unwrap();
            thread::spawn(move || {
                let data: Vec<u8> = (0..BYTES).map(|b| (b * 7 + i) as u8).collect();
                s.write_all(&data).unwrap();
            })
        })
        .collect();
    for (i, s) in clients.iter_mut().enumerate() {
        let mut got = vec![0u8; BYTES];
        s.read_exact(&mut got).unwrap();
        let want: Vec<u8> = (0..BYTES).map(|b| (b * 7 + i) as u8).collect();
        assert!(got == want, "tunnel {i}: the echo differs");
    }
    for w in writers {
        w.join().unwrap();
    }
    // Both directions of every tunnel have moved bytes: each took its
    // place (or found none and copied) and holds it until the tunnel ends.
    let held = pipes().len() - baseline;
    assert_eq!(
        held,
        places().min(2 * TUNNELS),
        "pipes held by {TUNNELS} busy tunnels: {:?}",
        pipes()
    );
    assert!(held > 0, "no relay spliced");

    // Ended tunnels give their pipes back.
    for s in &clients {
        let _ = s.shutdown(Shutdown::Write);
    }
    for s in &mut clients {
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
        assert!(rest.is_empty());
    }
    drop(clients);
    settle("the relays' pipes are closed", || pipes().len() == baseline);
    drop(proxy);
}
