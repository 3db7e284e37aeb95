//! `sandbox session`: many commands under one policy, driven over
//! newline-delimited JSON (requests on stdin, events on stdout, or both on
//! the UNIX socket of `--channel-fd`; schema and examples in
//! docs/session.md).
//!
//! Version 1 resolves the policy, the config, the backend (and its
//! self-test), the private TMPDIR and the tool caches once, at session
//! start. Each command then keeps its own containment (nothing it started
//! outlives it), its own timeout and its own refusals: by default forked
//! by the session's zygote, one confined launch shared by all commands
//! (`sandbox::zygote`), or, where that cannot hold (`--launch
//! per-command`, Landlock ABI < 6, another backend), run
//! through [`sandbox::runner::run`] exactly as `sandbox run` does. A
//! command run with `"keep": true` (shared launch only) runs on a zygote
//! of its own (`sandbox::zygote::Shared::run_kept`) whose background
//! processes live until the session ends, when they are ended and a
//! `kept_ended` event says so. Commands run one at a time; a request that arrives while one
//! runs waits until its exit event has been written. With `--approval
//! channel`, requests are read on a thread of their own
//! ([`approvals::spawn_reader`]), so `approve` answers reach the proxy's
//! held connections while the command runs (session/approvals.rs);
//! otherwise the session's loop reads them (a thread again once a kept
//! command lives, so a stop signal is seen while it waits).
//!
//! The channel is never a command's: at start the session moves its stdin
//! and stdout to descriptors above 2 (close-on-exec; the launch closes every
//! inherited fd above 2 anyway) and puts `/dev/null` on fds 0 and 1. For each
//! command, fd 0 is `/dev/null` or a pipe holding the request's `stdin`, and
//! fds 1 and 2 are pipes the session drains (`"output": true`, returned
//! bounded in the exit event) or `/dev/null`. So nothing a command writes,
//! and nothing any library code prints, can reach the channel.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use serde_json::{json, Map, Value};

use sandbox::{
    policy::ResolvedPolicy,
    runner::{Outcome, RunRequest},
};

use crate::args::{ConfigFlags, LimitFlags, PolicyFlags};
use crate::{error_chain, git_audit, show, Fatal};

mod approvals;
mod refusals;

/// The version of the session's request and event schema (`"v"` in `hello`).
pub(crate) const SESSION_SCHEMA: u32 = 1;
/// Bytes of each of a command's stdout and stderr an exit event returns.
const OUTPUT_CAP: usize = 1 << 20;
/// The longest request line read (longer ones are refused and skipped).
const LINE_CAP: usize = 16 << 20;

#[derive(Args)]
pub(crate) struct SessionArgs {
    #[command(flatten)]
    pub(crate) policy: PolicyFlags,
    #[command(flatten)]
    pub(crate) config: ConfigFlags,
    /// Limits on each command's run.
    #[command(flatten)]
    pub(crate) limits: LimitFlags,
    /// `channel`: a connection or request the policy refuses is held while
    /// the harness is asked (a `permission` event, answered by an `approve`
    /// request); `none`: refused at once. With the network off, `channel`
    /// makes it an allowlist of nothing: every connection is asked about.
    #[arg(long, value_name = "none|channel", default_value = "none")]
    pub(crate) approval: SessionApproval,
    /// Seconds a held connection or request waits for its answer (then
    /// denied).
    #[arg(long, value_name = "SECS", default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) approval_timeout: u64,
    /// `shared`: one confined launch for the whole session forks each
    /// command (Linux, landlock backend, Landlock ABI >= 6; otherwise per
    /// command, and `hello` says which and why);
    /// `per-command`: each command gets a launch of its own.
    #[arg(long, value_name = "shared|per-command", default_value = "shared")]
    pub(crate) launch: SessionLaunch,
    /// Read requests from and write events to the inherited UNIX stream
    /// socket FD (above 2) instead of stdin and stdout, which the session
    /// then leaves alone. No command inherits it.
    #[arg(long, value_name = "FD", value_parser = clap::value_parser!(i32).range(3..))]
    pub(crate) channel_fd: Option<i32>,
}

/// How a session launches its commands.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SessionLaunch {
    /// One confined launch (the zygote) forks each command.
    Shared,
    /// A confined launch per command, as `sandbox run`.
    PerCommand,
}

/// How a session answers what its policy refuses.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum SessionApproval {
    /// Refused at once, as `sandbox run` does.
    None,
    /// Held while the harness is asked over the channel.
    Channel,
}

/// `sandbox session`.
pub(crate) fn cmd_session(args: SessionArgs) -> Result<i32, Fatal> {
    // SAFETY: setting a disposition; no other thread exists yet. A harness
    // that goes away must not kill the session while a command runs (its
    // tree must still be ended).
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let mut chan = Channel::take(args.channel_fd)?;
    // Caught from the start, for the whole session (F3): a stop signal
    // between commands (or while one's events are made) ends the session as
    // the end of input does (kept runs ended, `closed`, the private TMPDIR
    // removed), never the process where it stands.
    let _stop = match crate::stop_runs_on_signals() {
        Ok(guard) => guard,
        Err(Fatal(message)) => {
            chan.send(&json!({"event": "error", "fatal": true, "message": message}));
            return Err(Fatal(message));
        }
    };
    let approvals = match args.approval {
        SessionApproval::Channel => match approvals::Approvals::new(
            chan.output.clone(),
            std::time::Duration::from_secs(args.approval_timeout),
        ) {
            Ok(a) => Some(a),
            Err(Fatal(message)) => {
                chan.send(&json!({"event": "error", "fatal": true, "message": message}));
                return Err(Fatal(message));
            }
        },
        SessionApproval::None => None,
    };
    chan.start_reading(approvals.clone());
    let session = match Session::open(&args, approvals) {
        Ok(s) => s,
        Err(Fatal(message)) => {
            chan.send(&json!({"event": "error", "fatal": true, "message": message}));
            return Err(Fatal(message));
        }
    };
    chan.send(&session.hello());
    session.serve(&mut chan)
}

/// The harness's side: requests in, events out, on descriptors no command
/// gets.
struct Channel {
    /// Read by the session's loop, until [`Channel::read_on_a_thread`]
    /// hands it to the reading thread.
    input: Option<BufReader<std::fs::File>>,
    /// The lines that thread read.
    lines: Option<std::sync::mpsc::Receiver<approvals::Line>>,
    output: approvals::Events,
    /// `/dev/null`, put on the standard fds the session does not lend a command.
    null: OwnedFd,
    /// The session's own stderr, put back on fd 2 after each command.
    stderr: OwnedFd,
    /// Whether writing an event failed (the harness went away).
    broken: bool,
    /// With `--channel-fd`, the session's own stdin and stdout, held (never
    /// read or written) while `/dev/null` is on fds 0 and 1.
    _own: Option<(OwnedFd, OwnedFd)>,
}

impl Channel {
    /// Moves stdin and stdout above 2 and puts `/dev/null` on fds 0 and 1;
    /// the channel is stdin and stdout, or the UNIX stream socket
    /// `socket` (made close-on-exec at once).
    fn take(socket: Option<RawFd>) -> Result<Self, Fatal> {
        let socket = socket.map(channel_socket).transpose()?;
        let null = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .map_err(|e| Fatal(format!("session: cannot open /dev/null: {e}")))?;
        let null = OwnedFd::from(null);
        let stdin = dup_high(0)?;
        let stdout = dup_high(1)?;
        let stderr = dup_high(2)?;
        put(&null, 0)?;
        put(&null, 1)?;
        let (input, output, own) = match socket {
            Some(socket) => {
                let output = socket
                    .try_clone()
                    .map_err(|e| Fatal(format!("session: cannot use the channel socket: {e}")))?;
                (socket, output, Some((stdin, stdout)))
            }
            None => (stdin, stdout, None),
        };
        Ok(Channel {
            input: Some(BufReader::new(std::fs::File::from(input))),
            lines: None,
            output: approvals::Events::new(std::fs::File::from(output)),
            null,
            stderr,
            broken: false,
            _own: own,
        })
    }

    /// Writes one event as one line, and waits until it (and every event
    /// before it) is written.
    fn send(&mut self, event: &Value) {
        self.output.send_now(event);
        if self.output.broken() {
            self.broken = true;
        }
    }

    /// Queues one event without waiting for it to be written (the next
    /// [`Channel::send`] waits for both, in order).
    fn queue(&mut self, event: &Value) {
        self.output.send(event);
    }

    /// With `approvals`, reads requests on a thread from now on: `approve`
    /// answers go to `approvals` as they come (while a command runs), the
    /// rest wait for [`Channel::next_line`]. Without, the session's loop
    /// reads each request itself when it is ready for it (no hand-off
    /// between threads per request), until it must also look for stop
    /// signals while it waits ([`Channel::next_line_or_stop`]).
    fn start_reading(&mut self, approvals: Option<approvals::Approvals>) {
        if approvals.is_some() {
            self.read_on_a_thread(approvals);
        }
    }

    fn read_on_a_thread(&mut self, approvals: Option<approvals::Approvals>) {
        // The reader takes what was read ahead with it (its buffer).
        if let Some(input) = self.input.take() {
            self.lines = Some(approvals::spawn_reader(input, approvals, read_line));
        }
    }

    /// The next request line (`Ok(None)` at end of input); a line longer
    /// than [`LINE_CAP`] is skipped and `Err` names it.
    fn next_line(&mut self) -> approvals::Line {
        match (&self.lines, &mut self.input) {
            (Some(lines), _) => lines.recv().unwrap_or(Ok(None)),
            (None, Some(input)) => read_line(input),
            (None, None) => Ok(None),
        }
    }

    /// [`Channel::next_line`]; with `watch`, looks for a stop signal
    /// while it waits (`Err` with the signal's number).
    fn next_line_or_stop(&mut self, watch: bool) -> Result<approvals::Line, i32> {
        if !watch {
            return Ok(self.next_line());
        }
        // Read here while each line comes whole, looking for a stop signal
        // every 50 ms meanwhile; a read could wait for the rest of a line
        // past a stop signal: from a part of a line on, the requests are
        // read on a thread.
        if let (None, Some(input)) = (&self.lines, &mut self.input) {
            loop {
                if input.buffer().contains(&b'\n') {
                    return Ok(read_line(input));
                }
                if let Some(sig) = sandbox::runner::stop_requested() {
                    return Err(sig);
                }
                if !input.buffer().is_empty() {
                    break;
                }
                let mut p = libc::pollfd {
                    fd: input.get_ref().as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one pollfd, valid for the call.
                if unsafe { libc::poll(&mut p, 1, 50) } <= 0 {
                    continue;
                }
                // Readable: one read(2), which does not wait.
                match input.fill_buf() {
                    Ok([]) => return Ok(Ok(None)),
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Ok(Err(e)),
                }
            }
        }
        if self.lines.is_none() {
            self.read_on_a_thread(None);
        }
        let Some(lines) = &self.lines else {
            return Ok(Ok(None));
        };
        loop {
            if let Some(sig) = sandbox::runner::stop_requested() {
                return Err(sig);
            }
            match lines.recv_timeout(std::time::Duration::from_millis(50)) {
                Ok(line) => return Ok(line),
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return Ok(Ok(None)),
            }
        }
    }
}

/// Reads one request line from `input` (see [`Channel::next_line`]).
fn read_line(input: &mut BufReader<std::fs::File>) -> approvals::Line {
    let mut line = Vec::new();
    let n = (&mut *input)
        .take(LINE_CAP as u64 + 1)
        .read_until(b'\n', &mut line)?;
    if n == 0 {
        return Ok(None);
    }
    if line.len() > LINE_CAP && line.last() != Some(&b'\n') {
        // Skip to the end of that line.
        loop {
            let mut rest = Vec::new();
            let n = (&mut *input)
                .take(LINE_CAP as u64)
                .read_until(b'\n', &mut rest)?;
            if n == 0 || rest.last() == Some(&b'\n') {
                break;
            }
        }
        return Ok(Some(Err(format!(
            "request line longer than {LINE_CAP} bytes: skipped"
        ))));
    }
    Ok(Some(Ok(line)))
}

/// Takes the inherited descriptor `fd` as the channel: it must be an open
/// UNIX stream socket. It is made close-on-exec before anything else.
fn channel_socket(fd: RawFd) -> Result<OwnedFd, Fatal> {
    let refuse = |what: String| {
        Fatal(format!(
            "session: --channel-fd {fd}: {what}, not a UNIX stream socket"
        ))
    };
    // SAFETY: F_SETFD on a descriptor number; no memory involved.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
        return Err(refuse(format!(
            "not an open descriptor ({})",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: an all-zero `stat` is a valid value of a plain C struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat fills `st` on success.
    if unsafe { libc::fstat(fd, &mut st) } < 0 {
        return Err(refuse(format!(
            "cannot stat it ({})",
            std::io::Error::last_os_error()
        )));
    }
    let kind = match st.st_mode & libc::S_IFMT {
        libc::S_IFSOCK => None,
        libc::S_IFREG => Some("a regular file"),
        libc::S_IFIFO => Some("a pipe"),
        libc::S_IFCHR => Some("a character device"),
        libc::S_IFDIR => Some("a directory"),
        libc::S_IFBLK => Some("a block device"),
        _ => Some("an unknown kind of file"),
    };
    if let Some(kind) = kind {
        return Err(refuse(kind.to_owned()));
    }
    // SAFETY: an all-zero `sockaddr_storage` is a valid plain C struct.
    let mut addr: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: getsockname fills at most `len` bytes of `addr`.
    if unsafe { libc::getsockname(fd, std::ptr::addr_of_mut!(addr).cast(), &mut len) } < 0 {
        return Err(refuse(format!(
            "a socket whose address cannot be read ({})",
            std::io::Error::last_os_error()
        )));
    }
    let family = i32::from(addr.ss_family);
    if family != libc::AF_UNIX {
        let name = match family {
            libc::AF_INET => "an IPv4 socket".to_owned(),
            libc::AF_INET6 => "an IPv6 socket".to_owned(),
            f => format!("a socket of address family {f}"),
        };
        return Err(refuse(name));
    }
    let mut ty: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt fills at most `len` bytes of `ty`.
    if unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            std::ptr::addr_of_mut!(ty).cast(),
            &mut len,
        )
    } < 0
    {
        return Err(refuse(format!(
            "a UNIX socket whose type cannot be read ({})",
            std::io::Error::last_os_error()
        )));
    }
    if ty != libc::SOCK_STREAM {
        let name = match ty {
            libc::SOCK_DGRAM => "a UNIX datagram socket".to_owned(),
            libc::SOCK_SEQPACKET => "a UNIX seqpacket socket".to_owned(),
            t => format!("a UNIX socket of type {t}"),
        };
        return Err(refuse(name));
    }
    // SAFETY: `fd` is open and handed to the session by its parent; nothing
    // else in the session owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fd` duplicated to a descriptor above 2, close-on-exec.
fn dup_high(fd: RawFd) -> Result<OwnedFd, Fatal> {
    // SAFETY: F_DUPFD_CLOEXEC makes a new descriptor; no memory involved.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(Fatal(format!(
            "session: cannot take over descriptor {fd}: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: `new` was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// Puts `from` on descriptor `to` (0, 1 or 2).
fn put(from: &OwnedFd, to: RawFd) -> Result<(), Fatal> {
    // SAFETY: dup2 between two descriptor numbers; `to` is a standard fd
    // the session manages itself.
    if unsafe { libc::dup2(from.as_raw_fd(), to) } < 0 {
        return Err(Fatal(format!(
            "session: cannot set descriptor {to}: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// A pipe, both ends close-on-exec: (read, write).
fn pipe() -> Result<(OwnedFd, OwnedFd), Fatal> {
    let mut fds = [0; 2];
    // SAFETY: pipe fills two fds on success; fcntl takes them by value. (macOS
    // has no pipe2; no thread of the session forks meanwhile: commands are
    // launched from this thread only.)
    let made = unsafe {
        libc::pipe(fds.as_mut_ptr()) == 0
            && fds
                .iter()
                .all(|&fd| libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) == 0)
    };
    if !made {
        return Err(Fatal(format!(
            "session: cannot make a pipe: {}",
            std::io::Error::last_os_error()
        )));
    }
    // SAFETY: both fds were just opened and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// What one command's output stream held: the first [`OUTPUT_CAP`] bytes
/// and how many more were dropped.
struct Captured {
    kept: Vec<u8>,
    dropped: u64,
}

/// Set once a command's run has ended. The pipes the session lent it may
/// still be held by a process outside the run (a command can pass an fd
/// over a unix socket to another run's process), so after the end the
/// session takes what the pipe holds and stops: it never waits for that
/// process to close its copy.
type Ended = Arc<std::sync::atomic::AtomicBool>;

fn has_ended(ended: &Ended) -> bool {
    ended.load(std::sync::atomic::Ordering::Acquire)
}

/// Makes the session's own end of a pipe non-blocking (the command's end,
/// another open file description, stays as it was).
fn set_nonblocking(fd: &OwnedFd) -> Result<(), Fatal> {
    // SAFETY: fcntl on a descriptor this function borrows; no memory involved.
    let done = unsafe {
        let flags = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        flags >= 0 && libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) == 0
    };
    if !done {
        return Err(Fatal(format!(
            "session: cannot make a pipe non-blocking: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// Waits at most 50 ms for `fd` to be ready for `events`.
fn wait_ready(fd: RawFd, events: libc::c_short) {
    let mut p = libc::pollfd {
        fd,
        events,
        revents: 0,
    };
    // SAFETY: one pollfd, valid for the call.
    unsafe { libc::poll(&mut p, 1, 50) };
}

/// Drains `read` (non-blocking) while the command runs, so a chatty command
/// never blocks, keeping the first [`OUTPUT_CAP`] bytes; once the run has
/// ended, to the end of what the pipe holds.
fn drain(read: OwnedFd, ended: Ended) -> std::thread::JoinHandle<Captured> {
    std::thread::spawn(move || capture(&read, &ended))
}

/// What [`drain`] does, on the calling thread.
fn capture(read: &OwnedFd, ended: &Ended) -> Captured {
    let fd = read.as_raw_fd();
    let mut kept = Vec::new();
    let mut dropped = 0u64;
    let mut buf = [0u8; 16 * 1024];
    let mut after_end = 0usize;
    loop {
        // Read before looking at `ended`: what the command wrote before
        // it ended is in the pipe.
        let done = has_ended(ended);
        match read_some(fd, &mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let room = OUTPUT_CAP.saturating_sub(kept.len()).min(n);
                kept.extend_from_slice(&buf[..room]);
                dropped += (n - room) as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if done {
                    break;
                }
                wait_ready(fd, libc::POLLIN);
            }
            Err(_) => break,
        }
        // A process outside the run writing without pause: stop after
        // more than any pipe holds (`F_SETPIPE_SZ` is bounded by
        // `pipe-max-size`, 1 MiB by default).
        if done {
            after_end += 1;
            if after_end > 2 * OUTPUT_CAP / buf.len() {
                break;
            }
        }
    }
    Captured { kept, dropped }
}

/// One `read(2)` of `fd` into `buf`.
fn read_some(fd: RawFd, buf: &mut [u8]) -> std::io::Result<usize> {
    // SAFETY: reads at most `buf.len()` bytes into `buf`.
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    if n < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(n as usize)
}

/// A kept command's output pipe ([`drain_kept`]): what the exit event
/// returns, and the thread that goes on reading.
// Off Linux nothing is kept (no shared launch): never read there.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
struct KeptDrain {
    captured: std::sync::mpsc::Receiver<Captured>,
    /// Bytes read and discarded after the exit event.
    discarded: std::thread::JoinHandle<u64>,
}

/// [`drain`] for a kept command: once the main process's run has ended and
/// what the pipe held is taken, the same thread keeps reading and
/// discarding what the command's background processes write (so none
/// blocks or gets `SIGPIPE`) until every writer is gone, or, once `over`
/// is set (the session ends, its kept runs ended), the pipe is empty.
fn drain_kept(read: OwnedFd, ended: Ended, over: Ended) -> KeptDrain {
    let (tx, rx) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        let _ = tx.send(capture(&read, &ended));
        let fd = read.as_raw_fd();
        let mut buf = [0u8; 16 * 1024];
        let mut discarded = 0u64;
        let mut after_over = 0usize;
        loop {
            let last = has_ended(&over);
            match read_some(fd, &mut buf) {
                Ok(0) => break,
                Ok(n) => discarded += n as u64,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if last {
                        break;
                    }
                    wait_ready(fd, libc::POLLIN);
                }
                Err(_) => break,
            }
            if last {
                after_over += 1;
                if after_over > 2 * OUTPUT_CAP / buf.len() {
                    break;
                }
            }
        }
        discarded
    });
    KeptDrain {
        captured: rx,
        discarded: handle,
    }
}

/// Writes `bytes` to `write` (non-blocking) until all is written, the
/// reader closes its end, or the run has ended.
fn feed(write: OwnedFd, bytes: Vec<u8>, ended: Ended) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let fd = write.as_raw_fd();
        let mut file = std::fs::File::from(write);
        let mut rest = &bytes[..];
        while !rest.is_empty() && !has_ended(&ended) {
            match file.write(rest) {
                Ok(n) => rest = &rest[n..],
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    wait_ready(fd, libc::POLLOUT)
                }
                // EPIPE (SIGPIPE is ignored): the command closed its end.
                Err(_) => break,
            }
        }
    })
}

/// A run request's fields, as read from the channel.
#[derive(Default)]
struct RunFields {
    argv: Vec<String>,
    cwd: Option<PathBuf>,
    /// Variables to set (a string) or unset (`null`), applied to the
    /// session's environment before the policy's `env_deny_names` scrub it.
    env: Option<std::collections::BTreeMap<String, Option<String>>>,
    timeout: Option<u64>,
    stdin: Option<String>,
    output: bool,
    /// The command's background processes live until the session ends.
    keep: bool,
}

impl RunFields {
    /// Reads the fields of a run request (`id` and `op` taken out); `Err`
    /// names the field that is missing, unknown or of the wrong type.
    fn parse(fields: Map<String, Value>) -> Result<Self, String> {
        fn get<T: serde::de::DeserializeOwned>(name: &str, v: Value) -> Result<T, String> {
            serde_json::from_value(v).map_err(|e| format!("bad \"{name}\": {e}"))
        }
        let mut f = RunFields::default();
        let mut argv = None;
        for (name, v) in fields {
            match name.as_str() {
                "argv" => argv = Some(get(&name, v)?),
                "cwd" => f.cwd = get(&name, v)?,
                "env" => f.env = get(&name, v)?,
                "timeout" => f.timeout = get(&name, v)?,
                "stdin" => f.stdin = get(&name, v)?,
                "output" => f.output = get::<Option<bool>>(&name, v)?.unwrap_or(false),
                "keep" => f.keep = get::<Option<bool>>(&name, v)?.unwrap_or(false),
                _ => {
                    return Err(format!(
                        "unknown field {name:?} (a run takes argv, cwd, env, timeout, stdin, \
                         output, keep)"
                    ))
                }
            }
        }
        f.argv = argv.ok_or("a run request needs \"argv\" (an array of strings)")?;
        Ok(f)
    }
}

/// What the session resolved at its start.
struct Session {
    policy: Option<ResolvedPolicy>,
    backend: Arc<dyn sandbox::backend::Backend>,
    /// Every command's request, but for its argv and what it asks.
    base: RunRequest,
    /// The kept commands (`"keep": true`) whose processes live until the
    /// session ends (dropped before the private TMPDIR: dropping one ends
    /// its run).
    kept: std::cell::RefCell<Vec<KeptRun>>,
    /// The private TMPDIR, removed when the session ends.
    _private_tmp: Option<crate::private_tmp::PrivateTmp>,
    /// `--approval channel`: what the proxy holds is asked over the channel.
    approvals: Option<approvals::Approvals>,
    /// Held while a command is kept: a stop signal between commands ends
    /// the session's kept runs and the session (the serving loop looks).
    kept_stop: std::cell::RefCell<Option<sandbox::runner::StopSignals>>,
    /// The shared launch, when the session uses one.
    shared: Option<Shared>,
    /// Why the session launches per command although `shared` was asked.
    per_command_why: Option<String>,
    /// Sends each command's refusals as `refused` events while it runs.
    watcher: refusals::Watcher,
    /// The repositories every command made, audited after each (F6).
    git: git_audit::Memory,
}

/// At most this many kept commands' runs are alive in one session.
const MAX_KEPT: usize = 8;

/// A kept command's run (`sandbox::zygote::Kept`).
#[cfg(target_os = "linux")]
type Kept = sandbox::zygote::Kept;
/// None off Linux (keep needs the shared launch).
#[cfg(not(target_os = "linux"))]
enum Kept {}

/// A kept command, until the session ends.
// Off Linux nothing is kept (no shared launch): never read there.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
struct KeptRun {
    /// Its request's id.
    id: Value,
    run: Kept,
    /// Its output pipes, still read (and discarded), with `"output": true`.
    drains: Vec<(&'static str, KeptDrain)>,
    /// Set when the session ends: the drains stop once their pipe is empty.
    over: Ended,
    /// The git audit's warnings its exit event gave: `kept_ended` names
    /// only the others.
    audited: Vec<String>,
}

/// The shared launch (`sandbox::zygote::Shared`).
#[cfg(target_os = "linux")]
type Shared = std::cell::RefCell<sandbox::zygote::Shared>;
#[cfg(not(target_os = "linux"))]
struct Shared;

impl Session {
    fn open(args: &SessionArgs, approvals: Option<approvals::Approvals>) -> Result<Self, Fatal> {
        let operator = crate::load_config(&args.config)?;
        let config = &operator.config;
        let private_tmp = crate::private_tmp_for(&args.policy)?;
        let tmp = private_tmp.as_ref().map(|t| t.path().to_path_buf());
        let (policy, caches) = crate::policy_and_caches(&args.policy, config, tmp.as_deref())?;
        let backend: Arc<dyn sandbox::backend::Backend> = match &policy {
            Some(policy) => {
                sandbox::backend::resolve_backend_for(config, policy)
                    .map_err(|e| Fatal(error_chain::error_chain(&e)))?
                    .backend
            }
            None => Arc::new(sandbox::backend::NoopBackend),
        };
        let mut base = RunRequest::new(Vec::new(), policy.clone());
        base.trusted_files = operator.trusted_files();
        for (tool, dir) in caches {
            base.env_overrides.extend(tool.env(&dir));
        }
        if let Some(tmp) = &tmp {
            base.env_overrides
                .push(("TMPDIR".into(), tmp.clone().into_os_string()));
        }
        // The operator's limits are ceilings a request only lowers.
        base.limits = args.limits.resources().bounded_by(&config.limits);
        base.allow_unlimited =
            (args.limits.allow_unlimited && config.limits.is_empty()) || config.allow_unlimited;
        base.require_full = config.require_full;
        // Every refusal of a command is listed in its exit event, those the
        // kernel makes on its own included.
        base.observe_writes = true;
        // The egress flags (`--upstream-ca`, `--secret`) and the operator's
        // `[sandbox.egress]`, as `sandbox run` takes them.
        base.egress = args
            .policy
            .egress
            .options(&config.egress)
            .with_decider(approvals.as_ref().map(|a| a.decider()));
        let (shared, per_command_why) = match args.launch {
            SessionLaunch::PerCommand => (None, None),
            SessionLaunch::Shared => match start_shared(&backend, &base) {
                Ok(s) => (Some(s), None),
                Err(why) => (None, Some(why)),
            },
        };
        Ok(Session {
            policy,
            backend,
            base,
            kept: std::cell::RefCell::default(),
            kept_stop: std::cell::RefCell::default(),
            _private_tmp: private_tmp,
            approvals,
            shared,
            per_command_why,
            watcher: refusals::Watcher::start(),
            git: git_audit::Memory::default(),
        })
    }

    fn hello(&self) -> Value {
        json!({
            "event": "hello",
            "v": SESSION_SCHEMA,
            "backend": if self.policy.is_some() {
                self.backend.name().to_owned()
            } else {
                "none (danger-full-access)".to_owned()
            },
            "policy": self.policy.as_ref().map(|p| summary(p, self.approvals.is_some())),
            "ops": if self.approvals.is_some() {
                json!(["run", "approve", "close"])
            } else {
                json!(["run", "close"])
            },
            "approval": if self.approvals.is_some() { "channel" } else { "none" },
            "concurrency": 1,
            "output_cap": OUTPUT_CAP,
            "launch": if self.shared.is_some() { "shared" } else { "per-command" },
            "launch_note": self.per_command_why,
            "max_kept": if self.shared.is_some() { MAX_KEPT } else { 0 },
        })
    }

    /// Answers requests until `close`, end of input, or a stop signal.
    fn serve(self, chan: &mut Channel) -> Result<i32, Fatal> {
        loop {
            if chan.broken {
                return Ok(0);
            }
            // The stop signals are caught for the whole session (F3): one
            // between commands ends it as the end of input does.
            let line = match chan.next_line_or_stop(true) {
                Err(sig) => {
                    self.end_kept(chan);
                    chan.send(&json!({"event": "closed", "why": "stopped by a signal"}));
                    return Ok(128 + sig);
                }
                Ok(line) => line,
            };
            let line = match line {
                Ok(None) => {
                    self.end_kept(chan);
                    chan.send(&json!({"event": "closed", "why": "end of input"}));
                    return Ok(0);
                }
                Ok(Some(Ok(line))) => line,
                Ok(Some(Err(why))) => {
                    chan.send(&error(&Value::Null, &why));
                    continue;
                }
                Err(e) => return Err(Fatal(format!("session: cannot read requests: {e}"))),
            };
            let text = match std::str::from_utf8(&line) {
                Ok(t) => t.trim(),
                Err(_) => {
                    chan.send(&error(&Value::Null, "request is not UTF-8"));
                    continue;
                }
            };
            if text.is_empty() {
                continue;
            }
            let mut request: Map<String, Value> = match serde_json::from_str(text) {
                Ok(Value::Object(map)) => map,
                Ok(other) => {
                    chan.send(&error(
                        &Value::Null,
                        &format!("request must be a JSON object, not {}", kind(&other)),
                    ));
                    continue;
                }
                Err(e) => {
                    chan.send(&error(&Value::Null, &format!("request is not JSON: {e}")));
                    continue;
                }
            };
            let id = request.remove("id").unwrap_or(Value::Null);
            if !matches!(id, Value::Null | Value::String(_) | Value::Number(_)) {
                chan.send(&error(
                    &Value::Null,
                    &format!("\"id\" must be a string or a number, not {}", kind(&id)),
                ));
                continue;
            }
            let op = request.remove("op");
            match op.as_ref().and_then(Value::as_str) {
                Some("close") => {
                    if let Some(field) = request.keys().next() {
                        chan.send(&error(&id, &format!("close takes no field {field:?}")));
                        continue;
                    }
                    self.end_kept(chan);
                    chan.send(&with_id(&id, json!({"event": "closed", "why": "close"})));
                    return Ok(0);
                }
                Some("run") if id.is_null() => {
                    chan.send(&error(&id, "a run request needs an \"id\""));
                }
                Some("run") => {
                    let fields = match RunFields::parse(request) {
                        Ok(f) => f,
                        Err(why) => {
                            chan.send(&error(&id, &why));
                            continue;
                        }
                    };
                    if let Some(code) = self.run(chan, &id, fields)? {
                        self.end_kept(chan);
                        chan.send(&json!({"event": "closed", "why": "stopped by a signal"}));
                        return Ok(code);
                    }
                }
                Some(other) => chan.send(&error(
                    &id,
                    &format!("unknown op {other:?} (this session knows \"run\" and \"close\")"),
                )),
                None => chan.send(&error(
                    &id,
                    match op {
                        None => "request has no \"op\"",
                        Some(_) => "\"op\" must be a string",
                    },
                )),
            }
        }
    }

    /// Runs one command and writes its events; `Some(code)` when a stop
    /// signal ended it and the session must end with `code`.
    fn run(&self, chan: &mut Channel, id: &Value, fields: RunFields) -> Result<Option<i32>, Fatal> {
        if fields.keep {
            // A kept run none of whose processes is left frees its slot
            // now: it is ended and its `kept_ended` sent.
            self.end_finished_kept(chan);
            if let Err(why) = self.may_keep() {
                chan.send(&error(id, &why));
                return Ok(None);
            }
            if self.kept_stop.borrow().is_none() {
                // From now on a stop signal between commands is caught: the
                // serving loop ends the kept runs and the session.
                match crate::stop_runs_on_signals() {
                    Ok(guard) => *self.kept_stop.borrow_mut() = Some(guard),
                    Err(Fatal(why)) => {
                        chan.send(&error(id, &format!("keep: {why}; nothing was run")));
                        return Ok(None);
                    }
                }
            }
        }
        let req = match self.request(&fields) {
            Ok(req) => req,
            Err(why) => {
                chan.send(&error(id, &why));
                return Ok(None);
            }
        };
        // Before anything else of this command; held back until it has
        // run the watcher's LIVE_POLL (5 ms), so that a command that ends
        // sooner has it written with its exit event: one wake-up of the
        // harness, not two (docs/session.md, "started").
        let started_event = with_id(
            id,
            json!({
                "event": "started",
                "argv": fields.argv,
                "timeout": req.policy.as_ref().map(|p| p.timeout_seconds()),
            }),
        );
        if self.watcher.watches() {
            chan.output.defer(&started_event);
        } else {
            chan.send(&started_event);
        }
        let started = Instant::now();
        if let Some(approvals) = &self.approvals {
            approvals.begin(id);
        }
        // The command's refusals, as they are answered (`refused` events).
        // Launched on its own, its run's broker and egress say them; by the
        // shared launch, the zygote's.
        let slot = Arc::new(std::sync::OnceLock::new());
        let egress = Arc::new(std::sync::OnceLock::<sandbox::runner::EgressTap>::new());
        let mut req = req;
        req.tap = Some(Arc::clone(&slot));
        req.egress_tap = Some(Arc::clone(&egress));
        let shared_live = self.shared_live();
        self.watcher
            .begin(chan.output.clone(), id.clone(), move || {
                let broker = slot.get().and_then(|tap| tap.live());
                match (broker, egress.get().map(|e| e.live())) {
                    (None, None) => shared_live.as_ref().and_then(|live| live()),
                    (broker, egress) => {
                        let (mut calls, mut count) = broker.unwrap_or_default();
                        if let Some((more, n)) = egress {
                            calls.extend(more);
                            count += n;
                        }
                        Some((calls, count))
                    }
                }
            });
        // A kept command's run has an egress of its own (`run_kept`): its
        // questions, also those its processes ask after its exit, are its
        // own, asked and booked under its id ("kept": true after its exit).
        if fields.keep {
            if let Some(approvals) = &self.approvals {
                if req.egress.decider.is_some() {
                    req.egress.decider = Some(approvals.decider_for(id));
                }
            }
        }
        let launched = self.launch(chan, req, &fields);
        let (had, sent, seen) = self.watcher.end();
        // A command kept alive keeps its held questions (its processes
        // wait on them); they are settled when its run ends.
        let lives_on = matches!(&launched, Ok(l) if l.kept.is_some());
        let asked = self.approvals.as_ref().map(|a| a.end(id, !lives_on));
        let Launched {
            result,
            kept,
            stdout,
            stderr,
            drains,
            over,
        } = match launched {
            Ok(launched) => launched,
            // The session cannot lend or take back the standard fds (or
            // catch the stop signals): the request still gets its answer,
            // and the session ends (125).
            Err(Fatal(why)) => {
                chan.send(&with_id(
                    id,
                    json!({
                        "event": "exit",
                        "status": sandbox::runner::EXIT_SANDBOX,
                        "classification": "runner_failure",
                        "reason": why,
                        "timed_out": false,
                        "duration_ms": started.elapsed().as_secs_f64() * 1000.0,
                        "refusals": [],
                    }),
                ));
                return Err(Fatal(why));
            }
        };
        let mut audited = Vec::new();
        let mut event = match result {
            Ok(mut outcome) => {
                if let Some(run) = &kept {
                    // Its run goes on: the refusals so far are those the
                    // live view handed out, the repositories those its
                    // broker saw made so far (the run's record comes with
                    // `kept_ended`, which audits those made later).
                    let git_dirs_made = kept_git_dirs_made(run);
                    audited = git_audit::warnings(
                        &git_dirs_made,
                        &git_audit::Scope::of(outcome.policy.as_ref(), &self.base.egress.secrets),
                    );
                    let m = sandbox::runner::Mediation {
                        omitted: usize::try_from(had)
                            .unwrap_or(usize::MAX)
                            .saturating_sub(seen.len()),
                        refused: seen,
                        git_dirs_made,
                        ..Default::default()
                    };
                    outcome.classification = outcome.classification.with_refusals(&m);
                    outcome.mediation = Some(m);
                }
                exit_event(&outcome, &self.base.egress.secrets, &self.git)
            }
            Err(err) => {
                let mut e = Map::new();
                e.insert("status".into(), err.exit_code().into());
                e.insert("classification".into(), "runner_failure".into());
                e.insert("reason".into(), error_chain::error_chain(&err).into());
                e.insert("timed_out".into(), false.into());
                e.insert(
                    "duration_ms".into(),
                    json!(started.elapsed().as_secs_f64() * 1000.0),
                );
                e.insert("refusals".into(), json!([]));
                e
            }
        };
        for (name, captured) in [("stdout", stdout), ("stderr", stderr)] {
            if let Some(c) = captured {
                event.insert(
                    name.into(),
                    String::from_utf8_lossy(&c.kept).into_owned().into(),
                );
                event.insert(format!("{name}_dropped"), c.dropped.into());
            }
        }
        if let Some(asked) = asked {
            event.insert("approvals".into(), asked.into());
        }
        // The live count stops where the log's cap does: the exit event's
        // count goes on.
        let listed = event
            .get("refusals")
            .and_then(Value::as_array)
            .map_or(0, Vec::len) as u64
            + event
                .get("refusals_omitted")
                .and_then(Value::as_u64)
                .unwrap_or(0);
        let had = had.max(listed);
        if had > sent {
            event.insert("refused_events_dropped".into(), (had - sent).into());
        }
        if fields.keep {
            event.insert("kept".into(), kept.as_ref().map_or(0, alive_at_exit).into());
        }
        let mut exit = Map::new();
        exit.insert("id".into(), id.clone());
        exit.insert("event".into(), "exit".into());
        exit.extend(event);
        chan.send(&Value::Object(exit));
        match kept {
            Some(run) => self.kept.borrow_mut().push(KeptRun {
                id: id.clone(),
                run,
                drains,
                over,
                audited,
            }),
            None => over.store(true, std::sync::atomic::Ordering::Release),
        }
        Ok(sandbox::runner::stop_requested().map(|sig| 128 + sig))
    }

    /// Whether a command may be kept now: `Err` says why not (the session
    /// launches per command, or [`MAX_KEPT`] kept runs are alive).
    fn may_keep(&self) -> Result<(), String> {
        if self.shared.is_none() {
            let why = self
                .per_command_why
                .as_deref()
                .unwrap_or("--launch per-command was asked");
            return Err(format!(
                "keep needs the shared launch; this session launches each command on its \
                 own because {why}: nothing was run (start the session with --launch shared \
                 on Linux, the landlock backend with Landlock ABI >= 6, or \
                 run the background process and what uses it in one command)"
            ));
        }
        let alive = self.kept.borrow().iter().filter(|k| k.running()).count();
        if alive >= MAX_KEPT {
            return Err(format!(
                "keep: at most {MAX_KEPT} kept commands live in one session, and {alive} do \
                 (each has processes alive; they end when the session ends): nothing was run; \
                 run it without keep"
            ));
        }
        Ok(())
    }

    /// Ends the kept commands' runs that have ended on their own (none of
    /// their processes left, or their deadline) and writes a `kept_ended`
    /// event for each, in the order they were kept; the others go on.
    fn end_finished_kept(&self, chan: &mut Channel) {
        let (ended, live): (Vec<KeptRun>, Vec<KeptRun>) =
            std::mem::take(&mut *self.kept.borrow_mut())
                .into_iter()
                .partition(|k| !k.running());
        *self.kept.borrow_mut() = live;
        for e in end_kept_runs(ended, &self.base.egress.secrets, self.approvals.as_ref()) {
            chan.queue(&Value::Object(e));
        }
    }

    /// Ends every kept command's run (all at once: SIGTERM, the grace
    /// period, SIGKILL) and writes a `kept_ended` event for each, in the
    /// order they were kept.
    fn end_kept(&self, chan: &mut Channel) {
        let kept = std::mem::take(&mut *self.kept.borrow_mut());
        let ended = end_kept_runs(kept, &self.base.egress.secrets, self.approvals.as_ref());
        for e in ended {
            chan.queue(&Value::Object(e));
        }
        *self.kept_stop.borrow_mut() = None;
    }

    /// The run request for `fields`: the session's, with the command, its
    /// working directory, environment and timeout; `Err` names bad input.
    fn request(&self, fields: &RunFields) -> Result<RunRequest, String> {
        if fields.argv.is_empty() {
            return Err("\"argv\" is empty: nothing to run".into());
        }
        if let Some(arg) = fields.argv.iter().find(|a| a.contains('\0')) {
            return Err(format!("\"argv\" holds a NUL byte: {arg:?}"));
        }
        let mut req = self.base.clone();
        req.argv = fields.argv.iter().map(OsString::from).collect();
        if let Some(cwd) = &fields.cwd {
            if cwd.as_os_str().as_bytes().contains(&0) {
                return Err(format!("\"cwd\" holds a NUL byte: {}", cwd.display()));
            }
            if !cwd.is_dir() {
                return Err(format!("\"cwd\" {} is not a directory", cwd.display()));
            }
            // A relative one is the session's own cwd's, as a launch of its
            // own resolves it: the shared launch's zygote runs in `/`.
            let cwd = if cwd.is_relative() {
                std::env::current_dir()
                    .map_err(|e| format!("\"cwd\" {}: the session's cwd: {e}", cwd.display()))?
                    .join(cwd)
            } else {
                cwd.clone()
            };
            req.cwd = Some(cwd);
        }
        if let Some(changes) = &fields.env {
            let mut env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
            for (name, value) in changes {
                if name.is_empty() || name.contains('=') || name.contains('\0') {
                    return Err(format!("\"env\" names a bad variable: {name:?}"));
                }
                if value.as_deref().is_some_and(|v| v.contains('\0')) {
                    return Err(format!("\"env\" value of {name} holds a NUL byte"));
                }
                env.retain(|(n, _)| n.as_bytes() != name.as_bytes());
                if let Some(value) = value {
                    env.push((name.into(), value.into()));
                }
            }
            req.env = Some(env);
        }
        if let Some(secs) = fields.timeout {
            let Some(policy) = &self.policy else {
                return Err(
                    "\"timeout\": a danger-full-access session runs commands unconfined, \
                     with no timeout"
                        .into(),
                );
            };
            if secs == 0 {
                return Err("\"timeout\" must be at least 1 second".into());
            }
            let mut raw = policy.to_policy();
            raw.timeout_seconds = secs;
            // Resolving a resolved policy again changes nothing but the
            // timeout, which the ceiling bounds as `--timeout` is bounded.
            req.policy = Some(
                raw.resolve(&sandbox::policy::ExpandContext::default())
                    .map_err(|e| format!("\"timeout\" {secs}: {e}"))?,
            );
        }
        Ok(req)
    }

    /// Lends the command fds 0-2, runs it, takes them back.
    fn launch(
        &self,
        chan: &mut Channel,
        mut req: RunRequest,
        fields: &RunFields,
    ) -> Result<Launched, Fatal> {
        let ended = Ended::default();
        let over = Ended::default();
        let feeder = match &fields.stdin {
            Some(text) => {
                let (read, write) = pipe()?;
                set_nonblocking(&write)?;
                put(&read, 0)?;
                drop(read);
                Some(feed(write, text.clone().into_bytes(), ended.clone()))
            }
            None => None,
        };
        let mut drainers = Vec::new();
        if fields.output {
            let (out_read, out_write) = pipe()?;
            let (err_read, err_write) = pipe()?;
            set_nonblocking(&out_read)?;
            set_nonblocking(&err_read)?;
            put(&out_write, 1)?;
            put(&err_write, 2)?;
            // Only fds 1 and 2 hold the write ends now.
            drop((out_write, err_write));
            for (name, read) in [("stdout", out_read), ("stderr", err_read)] {
                drainers.push((
                    name,
                    if fields.keep {
                        Drainer::Kept(drain_kept(read, ended.clone(), over.clone()))
                    } else {
                        Drainer::Plain(drain(read, ended.clone()))
                    },
                ));
            }
        }
        // Without output, the runner gives the command /dev/null as stderr.
        req.echo_stderr = fields.output;
        let (result, kept) = {
            let _stop = crate::stop_runs_on_signals()?;
            let stdio = [
                0,
                1,
                if fields.output {
                    2
                } else {
                    chan.null.as_raw_fd()
                },
            ];
            if fields.keep {
                match self.run_kept(&req, stdio) {
                    Some(Ok((outcome, kept))) => (Ok(outcome), kept),
                    Some(Err(e)) => (Err(e), None),
                    None => (
                        Err(sandbox::runner::RunError::SharedLaunch(format!(
                            "keep needs the shared launch, and this request's argv and \
                             environment exceed its {} bytes: nothing was run",
                            sandbox_max_request()
                        ))),
                        None,
                    ),
                }
            } else {
                let result = match self.run_shared(&req, stdio) {
                    Some(result) => result,
                    None => sandbox::runner::run(self.backend.as_ref(), &req),
                };
                (result, None)
            }
        };
        // Nothing the run started is alive (but a kept command's
        // processes): taking the fds back closes the session's last write
        // ends, and the drains see the end (or, when a process outside the
        // run or a kept process holds a copy, take what the pipe holds).
        put(&chan.null, 0)?;
        put(&chan.null, 1)?;
        put(&chan.stderr, 2)?;
        ended.store(true, std::sync::atomic::Ordering::Release);
        if let Some(feeder) = feeder {
            let _ = feeder.join();
        }
        let none = || Captured {
            kept: Vec::new(),
            dropped: 0,
        };
        let mut captured = Vec::new();
        let mut drains = Vec::new();
        for (name, drainer) in drainers {
            match drainer {
                Drainer::Plain(h) => captured.push(h.join().unwrap_or_else(|_| none())),
                Drainer::Kept(d) => {
                    captured.push(d.captured.recv().unwrap_or_else(|_| none()));
                    drains.push((name, d));
                }
            }
        }
        let mut captured = captured.into_iter();
        Ok(Launched {
            result,
            kept,
            stdout: captured.next(),
            stderr: captured.next(),
            drains,
            over,
        })
    }
}

/// What [`Session::launch`] returns.
struct Launched {
    result: Result<Outcome, sandbox::runner::RunError>,
    /// A kept command whose processes are alive.
    kept: Option<Kept>,
    stdout: Option<Captured>,
    stderr: Option<Captured>,
    /// A kept command's output pipes, still read.
    drains: Vec<(&'static str, KeptDrain)>,
    /// Stops them once set.
    over: Ended,
}

/// A command's output pipe's reader.
enum Drainer {
    Plain(std::thread::JoinHandle<Captured>),
    Kept(KeptDrain),
}

/// The largest request the shared launch takes.
#[cfg(target_os = "linux")]
fn sandbox_max_request() -> usize {
    sandbox::zygote::MAX_REQUEST
}

#[cfg(not(target_os = "linux"))]
fn sandbox_max_request() -> usize {
    128 * 1024
}

impl KeptRun {
    /// Whether its run still lives.
    fn running(&self) -> bool {
        #[cfg(target_os = "linux")]
        return self.run.running();
        #[cfg(not(target_os = "linux"))]
        match self.run {}
    }
}

/// How many processes of a kept command were alive when its main process
/// exited.
fn alive_at_exit(kept: &Kept) -> usize {
    #[cfg(target_os = "linux")]
    return kept.alive_at_exit();
    #[cfg(not(target_os = "linux"))]
    match *kept {}
}

/// The git directories a kept command's processes made so far (none when
/// its broker cannot tell).
fn kept_git_dirs_made(kept: &Kept) -> Vec<std::path::PathBuf> {
    #[cfg(target_os = "linux")]
    return kept.git_dirs_made().unwrap_or_default();
    #[cfg(not(target_os = "linux"))]
    match *kept {}
}

/// Ends `kept` (all at once) and returns each one's `kept_ended` event
/// (`secrets`: the session's, whose files the git audit does not read).
#[cfg(target_os = "linux")]
fn end_kept_runs(
    mut kept: Vec<KeptRun>,
    secrets: &[sandbox::policy::SecretSpec],
    approvals: Option<&approvals::Approvals>,
) -> Vec<Map<String, Value>> {
    for k in &mut kept {
        // Its held questions are denied first ("command ended"): its
        // processes then end without waiting on them.
        if let Some(a) = approvals {
            a.settle(&k.id);
        }
        k.run.begin_end();
    }
    let mut events = Vec::new();
    for k in kept {
        let end = k.run.end();
        // What it asked and was answered since its exit event.
        let asked = approvals.map(|a| a.end(&k.id, true));
        k.over.store(true, std::sync::atomic::Ordering::Release);
        let mut e = Map::new();
        e.insert("id".into(), k.id);
        e.insert("event".into(), "kept_ended".into());
        let mut ended = end.ended.unwrap_or(0);
        let mut timed_out = false;
        let mut refused = Vec::new();
        let mut omitted = 0;
        let mut summary = Vec::new();
        match &end.run {
            Some(Ok(run)) => {
                ended += run.leftover_processes_ended;
                timed_out = run.timed_out;
                if let Some(m) = &run.mediation {
                    refused = crate::show::with_reasons(&m.refused);
                    omitted = m.omitted;
                    // The git audit over every repository its processes
                    // made, from its start to its end (its broker saw all
                    // of them; no later command's did), but for what its
                    // exit event said already: each warning once (one
                    // given code-running config after the exit event is
                    // a new warning).
                    // With its nested runs' (F7).
                    summary = git_audit::warnings(
                        &git_audit::made_in(run),
                        &git_audit::Scope::of(run.policy.as_ref(), secrets),
                    );
                    summary.retain(|w| !k.audited.contains(w));
                }
            }
            Some(Err(err)) => {
                e.insert("reason".into(), error_chain::error_chain(err).into());
            }
            None => {
                e.insert("reason".into(), "its run's thread failed".into());
            }
        }
        e.insert("processes_ended".into(), ended.into());
        e.insert("timed_out".into(), timed_out.into());
        e.insert("refusals".into(), json!(refused));
        if omitted > 0 {
            e.insert("refusals_omitted".into(), omitted.into());
        }
        if let Some(asked) = asked {
            e.insert("approvals".into(), Value::Array(asked));
        }
        // The records of the runs nested in it, as an exit event has them.
        if !end.nested.is_empty() {
            e.insert("nested".into(), json!(end.nested));
        }
        if end.nested_omitted > 0 {
            e.insert("nested_omitted".into(), end.nested_omitted.into());
        }
        if !summary.is_empty() {
            e.insert("summary".into(), json!(summary));
        }
        for (name, d) in k.drains {
            let discarded = d.discarded.join().unwrap_or(0);
            e.insert(format!("{name}_discarded"), discarded.into());
        }
        events.push(e);
    }
    events
}

#[cfg(not(target_os = "linux"))]
fn end_kept_runs(
    kept: Vec<KeptRun>,
    _: &[sandbox::policy::SecretSpec],
    _: Option<&approvals::Approvals>,
) -> Vec<Map<String, Value>> {
    kept.into_iter().map(|k| match k.run {}).collect()
}

/// Starts the shared launch for `base`, or says why it cannot serve.
#[cfg(target_os = "linux")]
fn start_shared(
    backend: &Arc<dyn sandbox::backend::Backend>,
    base: &RunRequest,
) -> Result<Shared, String> {
    let program = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
    sandbox::zygote::Shared::start(Arc::clone(backend), base.clone(), program)
        .map(std::cell::RefCell::new)
        .map_err(|e| e.to_string())
}

#[cfg(not(target_os = "linux"))]
fn start_shared(_: &Arc<dyn sandbox::backend::Backend>, _: &RunRequest) -> Result<Shared, String> {
    Err("the shared launch is Linux only".into())
}

impl Session {
    /// Runs `req` by the shared launch; `None` when it cannot take this
    /// request (the caller launches it on its own).
    #[cfg(target_os = "linux")]
    fn run_shared(
        &self,
        req: &RunRequest,
        stdio: [RawFd; 3],
    ) -> Option<Result<Outcome, sandbox::runner::RunError>> {
        self.shared.as_ref()?.borrow_mut().run(req, stdio)
    }

    /// What [`sandbox::zygote::Shared::live`] says, with a shared launch.
    #[cfg(target_os = "linux")]
    fn shared_live(&self) -> Option<Box<LiveRefusals>> {
        let live = self.shared.as_ref()?.borrow().live();
        Some(Box::new(live))
    }

    #[cfg(not(target_os = "linux"))]
    fn shared_live(&self) -> Option<Box<LiveRefusals>> {
        None
    }

    /// Runs `req` as a kept command by the shared launch (a zygote of its
    /// own); `None` when the request is beyond it.
    #[cfg(target_os = "linux")]
    #[allow(clippy::type_complexity)]
    fn run_kept(
        &self,
        req: &RunRequest,
        stdio: [RawFd; 3],
    ) -> Option<Result<(Outcome, Option<Kept>), sandbox::runner::RunError>> {
        self.shared.as_ref()?.borrow_mut().run_kept(req, stdio)
    }

    #[cfg(not(target_os = "linux"))]
    #[allow(clippy::type_complexity)]
    fn run_kept(
        &self,
        _: &RunRequest,
        _: [RawFd; 3],
    ) -> Option<Result<(Outcome, Option<Kept>), sandbox::runner::RunError>> {
        None
    }

    #[cfg(not(target_os = "linux"))]
    fn run_shared(
        &self,
        _: &RunRequest,
        _: [RawFd; 3],
    ) -> Option<Result<Outcome, sandbox::runner::RunError>> {
        None
    }
}

/// A command's refusals so far (`sandbox::runner` tap, `MediationTap::live`).
type LiveRefusals =
    dyn Fn() -> Option<(Vec<sandbox::runner::MediatedCall>, u64)> + Send + Sync + 'static;

/// The exit event's fields for a command that ran: the record's status,
/// classification and refusals, in the words `sandbox run` uses.
/// `secrets`: the session's (`--secret`), whose files the git audit does
/// not read.
fn exit_event(
    outcome: &Outcome,
    secrets: &[sandbox::policy::SecretSpec],
    git: &git_audit::Memory,
) -> Map<String, Value> {
    let mut e = Map::new();
    e.insert("status".into(), outcome.exit_code().into());
    // The record's classification, flattened: `class` as `classification`,
    // and its own fields (`evidence`, `reason`, `limit`, `detail`) beside it.
    if let Ok(Value::Object(class)) = serde_json::to_value(&outcome.classification) {
        for (name, value) in class {
            let name = if name == "class" {
                "classification".into()
            } else {
                name
            };
            e.insert(name, value);
        }
    }
    e.insert("timed_out".into(), outcome.timed_out.into());
    e.insert("duration_ms".into(), json!(outcome.duration_ms));
    let refused = outcome
        .mediation
        .as_ref()
        .map(|m| crate::show::with_reasons(&m.refused))
        .unwrap_or_default();
    e.insert("refusals".into(), json!(refused));
    if let Some(m) = &outcome.mediation {
        if m.omitted > 0 {
            e.insert("refusals_omitted".into(), m.omitted.into());
        }
    }
    e.insert(
        "leftover_processes_ended".into(),
        outcome.leftover_processes_ended.into(),
    );
    // The records of the runs nested in the command, as `--report` has them.
    if !outcome.nested.is_empty() {
        e.insert("nested".into(), json!(outcome.nested));
    }
    if outcome.omitted.nested > 0 {
        e.insert("nested_omitted".into(), outcome.omitted.nested.into());
    }
    // With those of its nested runs (F7), and every earlier command's (F6).
    let made = git_audit::made_in(outcome);
    let summary: Vec<String> = [
        show::refusal_summary(outcome),
        // The timeout's line when the timeout ended the run.
        show::limit_summary(outcome),
        show::unheld_summary(outcome),
        show::runner_summary(outcome),
        show::egress_summary(outcome),
    ]
    .into_iter()
    .flatten()
    .chain(git.warnings(
        made,
        &git_audit::Scope::of(outcome.policy.as_ref(), secrets),
    ))
    .chain(git_audit::unnamed_warning(outcome))
    .collect();
    if !summary.is_empty() {
        e.insert("summary".into(), json!(summary));
    }
    e
}

/// What a session's policy is, for `hello`. With the network off and
/// questions asked over the channel (`asks`), the network is `ask`: a
/// command's TCP connections through the proxy are asked about.
fn summary(policy: &ResolvedPolicy, asks: bool) -> Value {
    let network = match policy.network_mode() {
        sandbox::policy::NetworkMode::Off if asks => "ask",
        mode => mode.as_str(),
    };
    json!({
        "network": network,
        "allow_net": policy.allow_net().iter().map(|r| r.to_string()).collect::<Vec<_>>(),
        "write_paths": policy.write_paths(),
        "write_deny_paths": policy.write_deny_paths(),
        "read_deny_paths": policy.read_deny_paths(),
        "deny_subprocess": policy.deny_subprocess(),
        "env_deny_names": policy.env_deny_names(),
        "timeout_seconds": policy.timeout_seconds(),
        "max_timeout_seconds": policy.max_timeout_seconds(),
    })
}

fn error(id: &Value, message: &str) -> Value {
    json!({"id": id, "event": "error", "message": message})
}

/// `event` with `"id"` first when there is one.
fn with_id(id: &Value, event: Value) -> Value {
    let mut map = Map::new();
    if !id.is_null() {
        map.insert("id".into(), id.clone());
    }
    if let Value::Object(rest) = event {
        map.extend(rest);
    }
    Value::Object(map)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
