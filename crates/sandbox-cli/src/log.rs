//! Log events from the libraries to stderr: the message, then any fields.
//!
//! `SANDBOX_LOG` sets the most verbose level shown (`error`, `warn`, `info`,
//! `debug` or `trace`; default `warn`). Events of other crates than this
//! project's (`h2`, `rustls`, `tokio`, ...) are shown only when
//! `SANDBOX_LOG` is set: what they warn about is often a peer's (the
//! command's) doing, such as an HTTP/2 `PING` acknowledgement nobody sent,
//! which a command could otherwise repeat to fill the user's screen (red
//! team R9 F1).
//!
//! An event never waits for stderr: it is queued ([`QUEUED`] lines at
//! most, the rest dropped and counted) and written by a thread of its own,
//! started with the first event. A harness that never reads the runner's
//! stderr pipe so blocks that thread alone, never a broker or proxy thread
//! that logged a warning the command provoked (which would stall every
//! later brokered call or connection of a session). [`flush`] gives the
//! queue a moment before the process exits.
//!
//! This small subscriber stands in for `tracing-subscriber`, whose registry
//! and directive parser (with its regex engine) more than doubled the code
//! a launch pages in and cost about 60 µs on every `sandbox run`, for
//! output this plain.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};

/// Lines waiting for stderr at most; more are dropped (and counted).
const QUEUED: usize = 256;

/// How long [`flush`] waits for the queued lines.
const FLUSH_WAIT: Duration = Duration::from_millis(200);

/// Installs the subscriber for this process.
pub(crate) fn init() {
    let asked = match std::env::var("SANDBOX_LOG").as_deref().map(str::trim) {
        Ok("error") => Some(Level::ERROR),
        Ok("warn") => Some(Level::WARN),
        Ok("info") => Some(Level::INFO),
        Ok("debug") => Some(Level::DEBUG),
        Ok("trace") => Some(Level::TRACE),
        _ => None,
    };
    // Fails only if a subscriber is already set, which then keeps logging.
    let _ = tracing::subscriber::set_global_default(StderrLog {
        max: asked.unwrap_or(Level::WARN),
        others: asked.is_some(),
    });
}

/// Waits a moment ([`FLUSH_WAIT`]) for the lines still queued: called
/// before the process exits. Returns at once when none was logged.
pub(crate) fn flush() {
    if let Some(q) = QUEUE.get() {
        q.drain(FLUSH_WAIT);
    }
}

struct StderrLog {
    max: Level,
    /// Whether other crates' events are shown (`SANDBOX_LOG` set).
    others: bool,
}

/// Whether an event of `target` at `level` is shown.
fn shown(target: &str, level: Level, max: Level, others: bool) -> bool {
    level <= max && (others || target.starts_with("sandbox"))
}

impl Subscriber for StderrLog {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        shown(metadata.target(), *metadata.level(), self.max, self.others)
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(self.max.into())
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        // Spans carry nothing this subscriber prints.
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let mut line = Line::default();
        event.record(&mut line);
        QUEUE
            .get_or_init(|| Queue::start(|line: String| crate::show::say(&line)))
            .push(format!("{}{}", line.message, line.fields));
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

static QUEUE: OnceLock<Queue> = OnceLock::new();

/// Lines on their way to stderr, written by a thread of their own.
struct Queue {
    /// `None` when the thread could not be started: lines are dropped.
    tx: Option<SyncSender<String>>,
    /// Lines queued and not yet written.
    pending: std::sync::Arc<AtomicUsize>,
    /// Lines dropped (the queue was full).
    dropped: AtomicUsize,
}

impl Queue {
    /// Starts the thread that hands each line to `write` (which escapes
    /// it: a value may carry text from the command or the file system).
    fn start(write: impl Fn(String) + Send + 'static) -> Queue {
        let (tx, rx) = sync_channel::<String>(QUEUED);
        let pending = std::sync::Arc::new(AtomicUsize::new(0));
        let theirs = std::sync::Arc::clone(&pending);
        let spawned = std::thread::Builder::new()
            .name("sandbox-log".into())
            .spawn(move || {
                for line in rx {
                    write(line);
                    theirs.fetch_sub(1, Ordering::AcqRel);
                }
            });
        Queue {
            tx: spawned.ok().map(|_| tx),
            pending,
            dropped: AtomicUsize::new(0),
        }
    }

    /// Queues `line` unless [`QUEUED`] lines wait already; never waits.
    fn push(&self, line: String) {
        let Some(tx) = &self.tx else {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        self.pending.fetch_add(1, Ordering::AcqRel);
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = tx.try_send(line) {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Waits until every queued line is written, or `wait` has passed.
    fn drain(&self, wait: Duration) {
        let until = Instant::now() + wait;
        while self.pending.load(Ordering::Acquire) > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

#[derive(Default)]
struct Line {
    message: String,
    fields: String,
}

impl Visit for Line {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Other crates' events are shown only when `SANDBOX_LOG` asks; this
    /// project's warnings always. Twin: a debug event of ours only when
    /// asked for that level.
    #[test]
    fn other_crates_are_quiet_unless_asked() {
        assert!(!shown(
            "h2::proto::ping_pong",
            Level::WARN,
            Level::WARN,
            false
        ));
        assert!(!shown("rustls::conn", Level::ERROR, Level::WARN, false));
        assert!(shown(
            "h2::proto::ping_pong",
            Level::WARN,
            Level::WARN,
            true
        ));
        assert!(shown(
            "sandbox_broker::broker",
            Level::WARN,
            Level::WARN,
            false
        ));
        assert!(!shown(
            "sandbox_broker::broker",
            Level::DEBUG,
            Level::WARN,
            false
        ));
        assert!(shown(
            "sandbox_broker::broker",
            Level::DEBUG,
            Level::DEBUG,
            true
        ));
    }

    /// A writer that never finishes (stderr a full pipe nobody reads) holds
    /// no logging thread: every push returns, at most QUEUED lines wait,
    /// the rest are dropped and counted. Twin: a writer that writes gets
    /// every line, in order, and `drain` sees them written.
    #[test]
    fn a_stuck_stderr_never_holds_the_logger() {
        let (hold, release) = std::sync::mpsc::channel::<()>();
        let release = Mutex::new(release);
        let q = Queue::start(move |_line| {
            // Blocks as a write to a full pipe would, until the test ends.
            let _ = release.lock().unwrap().recv();
        });
        for i in 0..10 * QUEUED {
            q.push(format!("line {i}"));
        }
        let waiting = q.pending.load(Ordering::Acquire);
        assert!(waiting <= QUEUED + 1, "{waiting} lines wait");
        assert!(q.dropped.load(Ordering::Relaxed) >= 9 * QUEUED - 1);
        drop(hold);

        let (tx, rx) = std::sync::mpsc::channel();
        let tx = Mutex::new(tx);
        let q = Queue::start(move |line| tx.lock().unwrap().send(line).unwrap());
        for i in 0..100 {
            q.push(format!("line {i}"));
        }
        q.drain(Duration::from_secs(60));
        assert_eq!(q.pending.load(Ordering::Acquire), 0);
        assert_eq!(q.dropped.load(Ordering::Relaxed), 0);
        let got: Vec<String> = rx.try_iter().collect();
        let want: Vec<String> = (0..100).map(|i| format!("line {i}")).collect();
        assert_eq!(got, want);
    }
}
