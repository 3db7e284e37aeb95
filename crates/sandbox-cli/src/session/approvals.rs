//! `sandbox session --approval channel`: the proxy holds a connection or
//! request the policy refuses and asks the harness, over the session's
//! channel, while the command waits (docs/session.md, "Approvals").
//!
//! The decider ([`ChannelDecider`]) travels in the run's egress options; it
//! queues a `permission` event (written by the [`Events`] thread, so a
//! harness that stops reading never blocks the proxy's connection thread)
//! and keeps the proxy's [`Reply`] until an `approve` request answers it;
//! a `session` answer covers the name (or IP literal) asked about, and for
//! a `resolution` question the local addresses it named. Requests are read
//! by a thread of their own
//! ([`spawn_reader`]), so answers arrive while a command runs; other
//! requests are queued for the session's loop. Only the harness writes the
//! channel: commands never hold it (session.rs moves it above fd 2,
//! close-on-exec, and lends commands their own pipes), so nothing a command
//! writes can answer a question.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::net::IpAddr;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use sandbox::runner::{Decider, Decision, Pending, Reply, Settled};
use sandbox_permissions::{
    ApprovalOutcome, ApprovalPolicy, ApprovalRequest, AuditEvent, AuditSink, Escalation,
    EscalationRequest, JsonLinesAudit,
};
use serde_json::{Map, Value};

use crate::Fatal;

/// How many bytes of events wait for the harness before [`Events::send`]
/// waits and [`Events::try_send`] refuses (one event beyond it is always
/// taken when none waits).
const QUEUED_CAP: usize = 1 << 20;

/// The channel's output, shared by the session's loop, the reading thread
/// and the decider: events are queued and written in order by a thread of
/// their own, so a harness that stops reading stdout blocks that thread
/// alone, never a proxy thread asking a question (whose hold limit then
/// runs out: denied). The session's loop, which waits for its events to
/// be written anyway, writes them itself when nothing is queued before
/// them ([`Events::send_now`]).
#[derive(Clone)]
pub(super) struct Events {
    queue: Arc<(Mutex<Queue>, Condvar)>,
    /// The channel's output, written by the thread or by
    /// [`Events::send_now`] (whoever set [`Queue::writing`]).
    out: Arc<File>,
}

#[derive(Default)]
struct Queue {
    lines: VecDeque<Vec<u8>>,
    /// Bytes in `lines`.
    bytes: usize,
    /// Whether a line is being written (by the thread, or by
    /// [`Events::send_now`]): no other write starts meanwhile.
    writing: bool,
    /// Callers waiting on the condition variable besides the thread (for
    /// room, or for the queue to be written).
    waiting: usize,
    /// Whether a write failed (the harness went away): later events are
    /// dropped.
    broken: bool,
    /// A line held back ([`Events::defer`]): it goes out before any other,
    /// with the next one or when released.
    deferred: Option<Vec<u8>>,
}

impl Queue {
    /// Moves the deferred line, if any, to the end of the queue.
    fn release(&mut self) -> bool {
        match self.deferred.take() {
            Some(line) => {
                self.bytes += line.len();
                self.lines.push_back(line);
                true
            }
            None => false,
        }
    }
}

impl Events {
    /// Events written to `out` by a new thread.
    pub(super) fn new(out: File) -> Self {
        let queue = Arc::new((Mutex::new(Queue::default()), Condvar::new()));
        let out = Arc::new(out);
        let events = Events {
            queue: Arc::clone(&queue),
            out: Arc::clone(&out),
        };
        let spawned = std::thread::Builder::new()
            .name("session-events".into())
            .spawn(move || loop {
                let (m, ready) = &*queue;
                let mut q = lock(m);
                let line = loop {
                    if !q.writing {
                        if let Some(line) = q.lines.pop_front() {
                            break line;
                        }
                    }
                    q = ready.wait(q).unwrap_or_else(|p| p.into_inner());
                };
                q.bytes -= line.len();
                let (_q, _) = write_unlocked(m, &out, q, &line);
                ready.notify_all();
            });
        if spawned.is_err() {
            // No writer: every event is lost, as if the harness had gone.
            lock(&events.queue.0).broken = true;
        }
        events
    }

    fn line(event: &Value) -> Vec<u8> {
        // C1 controls and reordering marks from the command (paths, hosts,
        // output) as `\uXXXX`: a harness may show the stream on a terminal.
        let mut line = sandbox::runner::json_terminal_safe(event, false)
            .unwrap_or_else(|_| event.to_string())
            .into_bytes();
        line.push(b'\n');
        line
    }

    /// Queues `line` if there is room (`wait`: waits for room); `false`
    /// when there is none, or the channel is broken.
    fn queue(&self, line: Vec<u8>, wait: bool) -> bool {
        let (m, ready) = &*self.queue;
        let mut q = lock(m);
        loop {
            if q.broken {
                return false;
            }
            if q.lines.is_empty() || q.bytes + line.len() <= QUEUED_CAP {
                break;
            }
            if !wait {
                return false;
            }
            q.waiting += 1;
            q = ready.wait(q).unwrap_or_else(|p| p.into_inner());
            q.waiting -= 1;
        }
        q.release();
        q.bytes += line.len();
        q.lines.push_back(line);
        ready.notify_all();
        true
    }

    /// Holds one event back until the next is sent (both then go out in
    /// one write) or [`Events::release`] is called; events sent after it
    /// never overtake it. For a `started` event: a command that ends
    /// soon has it written with its exit event, one wake-up of the harness
    /// instead of two.
    pub(super) fn defer(&self, event: &Value) {
        let (m, ready) = &*self.queue;
        let mut q = lock(m);
        if q.broken {
            return;
        }
        if q.release() {
            ready.notify_all();
        }
        q.deferred = Some(Self::line(event));
    }

    /// Queues the deferred event, if any, for the writing thread.
    pub(super) fn release(&self) {
        let (m, ready) = &*self.queue;
        if lock(m).release() {
            ready.notify_all();
        }
    }

    /// Queues one event as one line (never interleaved with another),
    /// waiting while [`QUEUED_CAP`] bytes wait already.
    pub(super) fn send(&self, event: &Value) {
        self.queue(Self::line(event), true);
    }

    /// Queues one event unless [`QUEUED_CAP`] bytes wait already; never
    /// waits. `false` when it was not queued.
    pub(super) fn try_send(&self, event: &Value) -> bool {
        self.queue(Self::line(event), false)
    }

    /// Waits until every queued event is written (or the channel broke).
    #[cfg(test)]
    pub(super) fn flush(&self) {
        let (m, ready) = &*self.queue;
        drop(until_written(ready, lock(m)));
    }

    /// Writes one event as one line after every event queued before it,
    /// on the calling thread, and returns once it is written (or the
    /// channel broke): [`Events::send`] then waiting until it is written,
    /// without the hand-off to the writing thread and back (one wake-up fewer
    /// before the harness reads it).
    pub(super) fn send_now(&self, event: &Value) {
        let mut line = Self::line(event);
        let (m, ready) = &*self.queue;
        let mut q = until_written(ready, lock(m));
        if q.broken {
            return;
        }
        // Nothing is queued: the deferred line goes first, in the same write.
        if let Some(mut first) = q.deferred.take() {
            first.append(&mut line);
            line = first;
        }
        let (q, failed) = write_unlocked(m, &self.out, q, &line);
        // The thread waits for `writing` to end only when lines came
        // meanwhile; others wait for room or the end of the queue.
        if failed || q.waiting > 0 || !q.lines.is_empty() {
            ready.notify_all();
        }
    }

    /// Whether a write failed (the harness went away).
    pub(super) fn broken(&self) -> bool {
        lock(&self.queue.0).broken
    }
}

/// Waits (counted in `waiting`) until every queued line is written or the
/// channel broke.
fn until_written<'a>(ready: &Condvar, mut q: MutexGuard<'a, Queue>) -> MutexGuard<'a, Queue> {
    while !q.broken && (q.writing || !q.lines.is_empty()) {
        q.waiting += 1;
        q = ready.wait(q).unwrap_or_else(|p| p.into_inner());
        q.waiting -= 1;
    }
    q
}

/// Writes `line` to `out` with the queue unlocked, marked `writing`
/// meanwhile (no other write starts); the queue locked again, and whether
/// the write failed (then the channel is broken: its lines are dropped).
fn write_unlocked<'a>(
    m: &'a Mutex<Queue>,
    mut out: &File,
    mut q: MutexGuard<'a, Queue>,
    line: &[u8],
) -> (MutexGuard<'a, Queue>, bool) {
    q.writing = true;
    drop(q);
    let failed = out.write_all(line).is_err();
    let mut q = lock(m);
    q.writing = false;
    if failed {
        q.broken = true;
        q.lines.clear();
        q.bytes = 0;
    }
    (q, failed)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One line read from the channel, as session.rs's loop takes it.
pub(super) type Line = std::io::Result<Option<Result<Vec<u8>, String>>>;

/// Reads request lines on a thread of its own: `approve` requests go to
/// `approvals` at once (also while a command runs), every other line (and
/// the end of input) to the returned queue. At the end of input every held
/// question is denied.
pub(super) fn spawn_reader(
    mut input: BufReader<File>,
    approvals: Option<Approvals>,
    read_line: fn(&mut BufReader<File>) -> Line,
) -> Receiver<Line> {
    let (tx, rx): (Sender<Line>, Receiver<Line>) = std::sync::mpsc::channel();
    std::thread::spawn(move || loop {
        let line = read_line(&mut input);
        let last = !matches!(line, Ok(Some(_)));
        if let (Some(approvals), Ok(Some(Ok(bytes)))) = (&approvals, &line) {
            if let Some(request) = approve_request(bytes) {
                approvals.answer(request);
                continue;
            }
        }
        if last {
            if let Some(approvals) = &approvals {
                approvals.close();
            }
        }
        if tx.send(line).is_err() || last {
            return;
        }
    });
    rx
}

/// The fields of a line whose `op` is `approve`.
fn approve_request(bytes: &[u8]) -> Option<Map<String, Value>> {
    let text = std::str::from_utf8(bytes).ok()?;
    match serde_json::from_str::<Value>(text.trim()) {
        Ok(Value::Object(map)) if map.get("op").and_then(Value::as_str) == Some("approve") => {
            Some(map)
        }
        _ => None,
    }
}

/// What a `session` answer admits from then on.
#[derive(Clone, PartialEq, Eq, Hash)]
enum Grant {
    /// A host and port: a name (whatever non-local addresses it resolves
    /// to), or an IP literal at the address shown.
    Connect(String, u16),
    /// An admitted name's local addresses, those shown when granted.
    Resolution(String, u16),
    Rule(String),
}

/// What `pending` asks for: its grant, and the addresses it would reach
/// (empty for a name not looked up yet, or a request).
fn grant_of(pending: &Pending) -> Option<(Grant, BTreeSet<IpAddr>)> {
    match pending {
        Pending::Connect {
            host,
            port,
            addresses,
            resolution,
            ..
        } => {
            let host = host.to_ascii_lowercase();
            let grant = if *resolution {
                Grant::Resolution(host, *port)
            } else {
                Grant::Connect(host, *port)
            };
            Some((grant, addresses.iter().flatten().copied().collect()))
        }
        Pending::Request { rule, .. } => Some((Grant::Rule(rule.clone()), BTreeSet::new())),
        _ => None,
    }
}

/// A question sent to the harness and not yet taken off the books.
struct Asked {
    reply: Reply,
    /// The run request it was asked during.
    run: Value,
    /// Its `permission` event's fields, but the event name.
    fields: Map<String, Value>,
}

/// How many entries a command's exit event lists in `approvals` at most
/// ([`Booked`]); the rest are counted in a last entry.
pub(super) const MAX_BOOKED: usize = 256;

/// What a command's exit event lists: at most [`MAX_BOOKED`] entries. An
/// entry the proxy settled unasked (a `session grant`, a denial because
/// the channel was full or the session closed) is booked once per distinct
/// entry, with how many times (`count`): a command that opens 100,000
/// connections under one grant adds one entry, not 100,000. Past the cap,
/// entries are counted (`omitted`), as refusals are.
#[derive(Default)]
struct Booked {
    entries: Vec<Value>,
    /// Each unasked entry's text (without `count`) and its index.
    unasked: HashMap<String, usize>,
    omitted: u64,
}

impl Booked {
    fn book(&mut self, entry: Value) {
        let Value::Object(mut fields) = entry else {
            return;
        };
        if !fields.contains_key("permission") {
            let text = Value::Object(fields.clone()).to_string();
            if let Some(&i) = self.unasked.get(&text) {
                if let Some(Value::Object(same)) = self.entries.get_mut(i) {
                    let n = same.get("count").and_then(Value::as_u64).unwrap_or(1);
                    same.insert("count".into(), n.saturating_add(1).into());
                }
                return;
            }
            if self.entries.len() < MAX_BOOKED {
                self.unasked.insert(text, self.entries.len());
            }
            fields.insert("count".into(), 1.into());
        }
        if self.entries.len() >= MAX_BOOKED {
            self.omitted = self.omitted.saturating_add(1);
            return;
        }
        self.entries.push(Value::Object(fields));
    }

    /// The exit event's `approvals`: the entries, then, when some were
    /// left out, `{"kind": "omitted", "count": N}`.
    fn into_list(self) -> Vec<Value> {
        let mut list = self.entries;
        if self.omitted > 0 {
            list.push(serde_json::json!({"kind": "omitted", "count": self.omitted}));
        }
        list
    }
}

#[derive(Default)]
struct State {
    /// The run request whose command runs now.
    run: Value,
    asked: HashMap<String, Asked>,
    /// What each run's exit event lists, by run id (as JSON text).
    log: HashMap<String, Booked>,
    /// `session` answers: each grant with the addresses shown when it was
    /// given (a later question is admitted unasked only when its addresses
    /// are among them).
    grants: HashMap<Grant, BTreeSet<IpAddr>>,
    closed: bool,
}

/// The session's approvals: the decider the proxy asks and the books the
/// channel's answers and the exit events use.
#[derive(Clone)]
pub(crate) struct Approvals {
    inner: Arc<Inner>,
}

struct Inner {
    events: Events,
    limit: Duration,
    audit: JsonLinesAudit<File>,
    state: Mutex<State>,
}

/// The decider a run's egress asks ([`sandbox::runner::EgressOptions::decider`]):
/// about the command running now, or, bound to a kept command's id
/// ([`Approvals::decider_for`]), about that command alone.
pub(crate) struct ChannelDecider(Approvals, Option<Value>);

impl std::fmt::Debug for ChannelDecider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelDecider")
            .field("limit", &self.0.inner.limit)
            .finish_non_exhaustive()
    }
}

impl Decider for ChannelDecider {
    fn ask(&self, pending: Pending, reply: Reply) {
        self.0.ask(pending, reply, self.1.as_ref());
    }

    fn hold_limit(&self) -> Duration {
        self.0.inner.limit
    }
}

/// A fresh permission id: `p` and 16 hex digits from `/dev/urandom`.
fn permission_id() -> Option<String> {
    let mut random = [0u8; 8];
    File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut random))
        .ok()?;
    Some(format!(
        "p{}",
        random
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    ))
}

fn key(run: &Value) -> String {
    run.to_string()
}

fn fields_of(pending: &Pending) -> Map<String, Value> {
    let mut f = Map::new();
    match pending {
        Pending::Connect {
            host,
            port,
            addresses,
            local,
            resolution,
        } => {
            f.insert("kind".into(), "connect".into());
            f.insert("host".into(), host.clone().into());
            f.insert("port".into(), (*port).into());
            // A name not looked up yet: no addresses, nothing known local.
            let (addresses, local) = match addresses {
                Some(addresses) => (
                    addresses
                        .iter()
                        .map(|ip| Value::from(ip.to_string()))
                        .collect::<Vec<_>>()
                        .into(),
                    Value::from(*local),
                ),
                None => (Value::Null, Value::Null),
            };
            f.insert("addresses".into(), addresses);
            f.insert("local".into(), local);
            f.insert("resolution".into(), (*resolution).into());
        }
        Pending::Request {
            host,
            port,
            method,
            url,
            rule,
        } => {
            f.insert("kind".into(), "request".into());
            f.insert("host".into(), host.clone().into());
            f.insert("port".into(), (*port).into());
            f.insert("method".into(), method.clone().into());
            f.insert("url".into(), url.clone().into());
            f.insert("rule".into(), rule.clone().into());
        }
        _ => {
            f.insert("kind".into(), "other".into());
        }
    }
    f
}

fn escalation_of(fields: &Map<String, Value>) -> Escalation {
    match fields.get("rule").and_then(Value::as_str) {
        Some(rule) => Escalation::AddRequestRule(rule.to_owned()),
        None => {
            let host = fields.get("host").and_then(Value::as_str).unwrap_or("");
            let port = fields.get("port").and_then(Value::as_u64).unwrap_or(0);
            let host = if host.contains(':') {
                format!("[{host}]")
            } else {
                host.to_owned()
            };
            Escalation::AdmitDestination(format!("{host}:{port}"))
        }
    }
}

impl Approvals {
    /// The session's approvals, answered over `events`' channel within
    /// `limit`; the audit log is opened (or made) now, so a session that
    /// could not record its answers does not start.
    pub(crate) fn new(events: Events, limit: Duration) -> Result<Self, Fatal> {
        let state = sandbox::trusted::state_dir().ok_or_else(|| {
            Fatal("no place for the approval audit log: set HOME or XDG_STATE_HOME".into())
        })?;
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
            .create(&state)
            .map_err(|e| Fatal(format!("cannot create {}: {e}", state.display())))?;
        let audit = JsonLinesAudit::open(&JsonLinesAudit::default_path(&state))
            .map_err(|e| Fatal(format!("session: {e}")))?;
        Ok(Approvals {
            inner: Arc::new(Inner {
                events,
                limit,
                audit,
                state: Mutex::default(),
            }),
        })
    }

    /// The decider for the runs' egress options.
    pub(crate) fn decider(&self) -> Arc<dyn Decider> {
        Arc::new(ChannelDecider(self.clone(), None))
    }

    /// The decider for the egress of the run of request `id` alone (a kept
    /// command's run of its own): its questions are asked and booked under
    /// `id`, also after its exit event (then with `"kept": true`, booked
    /// for its `kept_ended` event), and only its end settles them.
    pub(crate) fn decider_for(&self, id: &Value) -> Arc<dyn Decider> {
        Arc::new(ChannelDecider(self.clone(), Some(id.clone())))
    }

    fn audit_asked(&self, permission: &str, run: &Value, fields: &Map<String, Value>) {
        let request = ApprovalRequest::Escalation(EscalationRequest {
            argv: vec![format!("session run {run}")],
            evidence: vec![format!(
                "the proxy held {} while the harness was asked",
                Value::Object(fields.clone())
            )],
            escalation: escalation_of(fields),
        });
        let _ = self.inner.audit.record(&AuditEvent::Asked {
            request_id: permission.to_owned(),
            at_unix_ms: now_ms(),
            policy: ApprovalPolicy::Ask,
            interactive: false,
            summary: request.summary(),
            request,
        });
    }

    fn audit_decided(&self, permission: &str, answer: &str, by: &str) {
        let outcome = match (answer, by) {
            ("once" | "session", _) => ApprovalOutcome::AllowedOnce,
            (_, "channel") => ApprovalOutcome::Rejected,
            (_, "malformed answer") => ApprovalOutcome::Unavailable,
            _ => ApprovalOutcome::Cancelled,
        };
        let _ = self.inner.audit.record(&AuditEvent::Decided {
            request_id: permission.to_owned(),
            at_unix_ms: now_ms(),
            outcome,
            answerer: (by == "channel").then(|| "channel".to_owned()),
            reason: format!("session --approval channel: {answer}, by {by}"),
        });
    }

    /// Books an entry for the exit event of `run` ([`Booked`]: bounded).
    fn book(state: &mut State, run: &Value, entry: Value) {
        state.log.entry(key(run)).or_default().book(entry);
    }

    fn ask(&self, pending: Pending, reply: Reply, bound: Option<&Value>) {
        let mut fields = fields_of(&pending);
        let mut state = lock(&self.inner.state);
        let run = bound.cloned().unwrap_or_else(|| state.run.clone());
        // Asked by a kept command's processes after its exit event.
        let kept = bound.is_some_and(|id| *id != state.run);
        if state.closed {
            reply.answer(Decision::Deny);
            fields.insert("answer".into(), "deny".into());
            fields.insert("by".into(), "session closed".into());
            Self::book(&mut state, &run, Value::Object(fields));
            return;
        }
        let granted = grant_of(&pending).is_some_and(|(grant, addrs)| {
            state
                .grants
                .get(&grant)
                .is_some_and(|shown| addrs.is_subset(shown))
        });
        if granted {
            reply.answer(Decision::Session);
            fields.insert("answer".into(), "session".into());
            fields.insert("by".into(), "session grant".into());
            Self::book(&mut state, &run, Value::Object(fields));
            return;
        }
        let Some(permission) = permission_id() else {
            reply.answer(Decision::Deny);
            fields.insert("answer".into(), "deny".into());
            fields.insert("by".into(), "no random id".into());
            Self::book(&mut state, &run, Value::Object(fields));
            return;
        };
        let mut event = Map::new();
        event.insert("event".into(), "permission".into());
        event.insert("permission".into(), permission.clone().into());
        event.insert("id".into(), run.clone());
        if kept {
            event.insert("kept".into(), true.into());
        }
        event.extend(fields.clone());
        event.insert(
            "timeout_ms".into(),
            u64::try_from(self.inner.limit.as_millis())
                .unwrap_or(u64::MAX)
                .into(),
        );
        // Queued under the lock (an answer cannot overtake its question),
        // never waiting for the harness to read: a question the channel
        // has no room for is denied at once.
        if !self.inner.events.try_send(&Value::Object(event)) {
            reply.answer(Decision::Deny);
            fields.insert("answer".into(), "deny".into());
            let by = if self.inner.events.broken() {
                "session closed"
            } else {
                "channel full"
            };
            fields.insert("by".into(), by.into());
            Self::book(&mut state, &run, Value::Object(fields));
            return;
        }
        self.audit_asked(&permission, &run, &fields);
        state.asked.insert(permission, Asked { reply, run, fields });
    }

    /// Takes an `approve` request's answer.
    fn answer(&self, mut request: Map<String, Value>) {
        let id = request.remove("id").unwrap_or(Value::Null);
        request.remove("op");
        let permission = request.remove("permission");
        let answer = request.remove("answer");
        let error = |message: String| {
            let mut e = Map::new();
            if !id.is_null() {
                e.insert("id".into(), id.clone());
            }
            e.insert("event".into(), "error".into());
            if let Some(p) = &permission {
                e.insert("permission".into(), p.clone());
            }
            e.insert("message".into(), message.into());
            self.inner.events.send(&Value::Object(e));
        };
        let Some(permission) = permission.as_ref().and_then(Value::as_str) else {
            return error("an approve request needs \"permission\" (a string)".into());
        };
        let mut state = lock(&self.inner.state);
        let Some(asked) = state.asked.remove(permission) else {
            drop(state);
            return error(format!(
                "no question {permission:?} is waiting (answered, timed out, or never asked)"
            ));
        };
        let decision = match answer.as_ref().and_then(Value::as_str) {
            Some("once") if request.is_empty() => Some(Decision::Once),
            Some("session") if request.is_empty() => Some(Decision::Session),
            Some("deny") if request.is_empty() => Some(Decision::Deny),
            _ => None,
        };
        let (word, by) = match decision {
            Some(Decision::Once) => ("once", "channel"),
            Some(Decision::Session) => ("session", "channel"),
            Some(_) => ("deny", "channel"),
            None => ("deny", "malformed answer"),
        };
        let mut entry = asked.fields.clone();
        entry.insert("permission".into(), permission.into());
        if asked.reply.answer(decision.unwrap_or(Decision::Deny)) {
            if decision == Some(Decision::Session) {
                if let Some((grant, addrs)) = grant_of_fields(&asked.fields) {
                    state.grants.entry(grant).or_default().extend(addrs);
                }
            }
            entry.insert("answer".into(), word.into());
            entry.insert("by".into(), by.into());
            Self::book(&mut state, &asked.run, Value::Object(entry));
            drop(state);
            self.audit_decided(permission, word, by);
            if decision.is_none() {
                error(format!(
                    "malformed answer to {permission:?}: \"answer\" is \"once\", \"session\" or \
                     \"deny\", and nothing else is sent; denied"
                ));
            }
        } else {
            let by = settled_by(asked.reply.settled());
            entry.insert("answer".into(), "deny".into());
            entry.insert("by".into(), by.into());
            Self::book(&mut state, &asked.run, Value::Object(entry));
            drop(state);
            self.audit_decided(permission, "deny", by);
            error(format!(
                "the question {permission:?} was settled already ({by}): denied"
            ));
        }
    }

    /// A command starts for the run request `id`.
    pub(crate) fn begin(&self, id: &Value) {
        let mut state = lock(&self.inner.state);
        state.run = id.clone();
        state.log.remove(&key(id));
    }

    /// The command of run `id` ended: every question it left is denied
    /// (unless `settle` is false: a command kept alive keeps them until
    /// its run ends), and what was asked and answered during it (since the
    /// last call) is returned (for its exit or `kept_ended` event).
    pub(crate) fn end(&self, id: &Value, settle: bool) -> Vec<Value> {
        if settle {
            self.settle(id);
        }
        let mut state = lock(&self.inner.state);
        if state.run == *id {
            state.run = Value::Null;
        }
        let log = state
            .log
            .remove(&key(id))
            .map(Booked::into_list)
            .unwrap_or_default();
        drop(state);
        log
    }

    /// Denies every question run `id` has waiting ("command ended"),
    /// booked for it; another run's questions are left as they are.
    pub(crate) fn settle(&self, id: &Value) {
        let mut state = lock(&self.inner.state);
        let left: Vec<String> = state
            .asked
            .iter()
            .filter(|(_, a)| a.run == *id)
            .map(|(p, _)| p.clone())
            .collect();
        let mut decided = Vec::new();
        for permission in left {
            if let Some(asked) = state.asked.remove(&permission) {
                asked.reply.answer(Decision::Deny);
                let by = match asked.reply.settled() {
                    Some(Settled::TimedOut) => "timeout",
                    _ => "command ended",
                };
                let mut entry = asked.fields;
                entry.insert("permission".into(), permission.clone().into());
                entry.insert("answer".into(), "deny".into());
                entry.insert("by".into(), by.into());
                Self::book(&mut state, &asked.run, Value::Object(entry));
                decided.push((permission, by));
            }
        }
        drop(state);
        for (permission, by) in decided {
            self.audit_decided(&permission, "deny", by);
        }
    }

    /// The session ends: every held question is denied, and later ones are
    /// denied unasked.
    pub(crate) fn close(&self) {
        let mut state = lock(&self.inner.state);
        state.closed = true;
        let asked: Vec<(String, Asked)> = state.asked.drain().collect();
        for (permission, asked) in asked {
            asked.reply.answer(Decision::Deny);
            let by = settled_by(asked.reply.settled());
            let by = if by == "channel" {
                "session closed"
            } else {
                by
            };
            let mut entry = asked.fields;
            entry.insert("permission".into(), permission.clone().into());
            entry.insert("answer".into(), "deny".into());
            entry.insert("by".into(), by.into());
            Self::book(&mut state, &asked.run, Value::Object(entry));
            self.audit_decided(&permission, "deny", by);
        }
    }
}

/// [`grant_of`] from a question's event fields.
fn grant_of_fields(fields: &Map<String, Value>) -> Option<(Grant, BTreeSet<IpAddr>)> {
    if let Some(rule) = fields.get("rule").and_then(Value::as_str) {
        return Some((Grant::Rule(rule.to_owned()), BTreeSet::new()));
    }
    let host = fields.get("host")?.as_str()?.to_ascii_lowercase();
    let port = u16::try_from(fields.get("port")?.as_u64()?).ok()?;
    let addrs = match fields.get("addresses")? {
        Value::Null => BTreeSet::new(),
        addresses => addresses
            .as_array()?
            .iter()
            .map(|a| a.as_str()?.parse().ok())
            .collect::<Option<BTreeSet<IpAddr>>>()?,
    };
    let grant = if fields.get("resolution")?.as_bool()? {
        Grant::Resolution(host, port)
    } else {
        Grant::Connect(host, port)
    };
    Some((grant, addrs))
}

fn settled_by(settled: Option<Settled>) -> &'static str {
    match settled {
        Some(Settled::TimedOut) => "timeout",
        Some(Settled::Stopped) => "command ended",
        _ => "channel",
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn granted(host: &str) -> Value {
        serde_json::json!({"kind": "connect", "host": host, "port": 443, "addresses": null,
            "local": null, "resolution": false, "answer": "session", "by": "session grant"})
    }

    /// F6: 10,000 connections admitted by one `session` grant are one
    /// entry with their count; 10,000 distinct unasked entries (a command
    /// choosing host names while the channel is full) and 10,000 asked
    /// ones are capped at [`MAX_BOOKED`], the rest counted. The twin: a
    /// few entries are listed as they came, nothing omitted.
    #[test]
    fn a_commands_approvals_are_bounded_and_counted() {
        let run = Value::from("r1");
        let mut state = State::default();
        let asked = |i: usize| {
            let mut e = granted("a.example.com");
            e["permission"] = format!("p{i:016x}").into();
            e["by"] = "channel".into();
            e
        };
        Approvals::book(&mut state, &run, asked(0));
        for _ in 0..10_000 {
            Approvals::book(&mut state, &run, granted("a.example.com"));
        }
        let list = state.log.remove(&key(&run)).unwrap().into_list();
        assert_eq!(list.len(), 2, "{list:?}");
        assert_eq!(list[0]["by"], "channel");
        assert!(list[0].get("count").is_none(), "{}", list[0]);
        assert_eq!(list[1]["by"], "session grant");
        assert_eq!(list[1]["count"], 10_000);

        for i in 0..10_000 {
            let mut e = granted(&format!("h{i}.example.com"));
            e["answer"] = "deny".into();
            e["by"] = "channel full".into();
            Approvals::book(&mut state, &run, e);
            Approvals::book(&mut state, &run, asked(i + 1));
        }
        let list = state.log.remove(&key(&run)).unwrap().into_list();
        assert_eq!(list.len(), MAX_BOOKED + 1, "at most the cap, and the count");
        let last = list.last().unwrap();
        assert_eq!(last["kind"], "omitted");
        assert_eq!(last["count"], (20_000 - MAX_BOOKED) as u64);
        assert!(Value::from(list.clone()).to_string().len() < 100_000);

        // The twin: a few, each listed once, in order.
        for host in ["a.example.com", "b.example.com", "a.example.com"] {
            Approvals::book(&mut state, &run, granted(host));
        }
        Approvals::book(&mut state, &run, asked(1));
        let list = state.log.remove(&key(&run)).unwrap().into_list();
        let hosts: Vec<&str> = list.iter().map(|e| e["host"].as_str().unwrap()).collect();
        assert_eq!(hosts, ["a.example.com", "b.example.com", "a.example.com"]);
        assert_eq!(list[0]["count"], 2);
        assert_eq!(list[1]["count"], 1);
        assert_eq!(list[2]["by"], "channel");
    }

    /// A harness that reads nothing: sends wait for room, a question
    /// (`try_send`) beyond [`QUEUED_CAP`] unread bytes is refused at once
    /// instead of waiting; twin: once the harness reads, it is taken.
    #[test]
    fn an_unread_channel_refuses_questions_past_its_cap_and_never_waits() {
        let (mut read, write) = std::io::pipe().unwrap();
        let events = Events::new(File::from(std::os::fd::OwnedFd::from(write)));
        let big = Value::String("x".repeat(QUEUED_CAP / 2 + 1024));
        // The first is taken by the writer, which blocks on the full pipe;
        // the second waits in the queue.
        events.send(&big);
        events.send(&big);
        assert!(
            !events.try_send(&big),
            "past the cap: refused, not waited for"
        );
        assert!(events.try_send(&Value::from("small")), "within the cap");
        assert!(!events.broken());
        let drained = std::thread::spawn(move || {
            let mut all = Vec::new();
            let _ = read.read_to_end(&mut all);
            all
        });
        events.flush();
        assert!(events.try_send(&big), "read: room again");
        events.flush();
        drop(events);
        drop(drained);
    }

    /// A deferred event is never overtaken: it goes out before an event
    /// queued after it, in one write with a `send_now` after it, or alone
    /// once released; twin: nothing is written while it is only deferred.
    #[test]
    fn a_deferred_event_goes_first_and_only_once() {
        use std::os::fd::AsRawFd;
        let (mut read, write) = std::io::pipe().unwrap();
        let events = Events::new(File::from(std::os::fd::OwnedFd::from(write)));
        let pending = |read: &std::io::PipeReader| {
            let mut n: libc::c_int = 0;
            // SAFETY: FIONREAD writes one int.
            unsafe { libc::ioctl(read.as_raw_fd(), libc::FIONREAD, &mut n) };
            n
        };
        let lines = |read: &mut std::io::PipeReader, want: usize| {
            let mut got = Vec::new();
            while got.iter().filter(|&&b| b == b'\n').count() < want {
                let mut buf = [0u8; 256];
                let n = read.read(&mut buf).unwrap();
                got.extend_from_slice(&buf[..n]);
            }
            String::from_utf8(got).unwrap()
        };
        // With send_now: one write holds both lines.
        events.defer(&Value::from("started 1"));
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(pending(&read), 0, "deferred: nothing written yet");
        events.send_now(&Value::from("exit 1"));
        assert_eq!(lines(&mut read, 2), "\"started 1\"\n\"exit 1\"\n");
        // Queued after it (a refusal, a question): it goes first.
        events.defer(&Value::from("started 2"));
        assert!(events.try_send(&Value::from("refused 2")));
        events.send_now(&Value::from("exit 2"));
        assert_eq!(
            lines(&mut read, 3),
            "\"started 2\"\n\"refused 2\"\n\"exit 2\"\n"
        );
        // Released: written alone, and not again with the exit.
        events.defer(&Value::from("started 3"));
        events.release();
        assert_eq!(lines(&mut read, 1), "\"started 3\"\n");
        events.send_now(&Value::from("exit 3"));
        assert_eq!(lines(&mut read, 1), "\"exit 3\"\n");
    }
}
