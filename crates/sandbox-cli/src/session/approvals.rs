//! `sandbox session --approval channel`: the proxy holds a connection or
//! request the policy refuses and asks the harness, over the session's
//! channel, while the command waits (docs/session.md, "Approvals").
//!
//! The decider ([`ChannelDecider`]) travels in the run's egress options; it
//! writes a `permission` event and keeps the proxy's [`Reply`] until an
//! `approve` request answers it. Requests are read by a thread of their own
//! ([`spawn_reader`]), so answers arrive while a command runs; other
//! requests are queued for the session's loop. Only the harness writes the
//! channel: commands never hold it (session.rs moves it above fd 2,
//! close-on-exec, and lends commands their own pipes), so nothing a command
//! writes can answer a question.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufReader, Read, Write};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use sandbox::runner::{Decider, Decision, Pending, Reply, Settled};
use sandbox_permissions::{
    ApprovalOutcome, ApprovalPolicy, ApprovalRequest, AuditEvent, AuditSink, Escalation,
    EscalationRequest, JsonLinesAudit,
};
use serde_json::{Map, Value};

use crate::Fatal;

/// The channel's output, shared by the session's loop and the decider.
#[derive(Clone)]
pub(super) struct Events {
    out: Arc<Mutex<(File, bool)>>,
}

impl Events {
    pub(super) fn new(out: File) -> Self {
        Events {
            out: Arc::new(Mutex::new((out, false))),
        }
    }

    /// Writes one event as one line (never interleaved with another).
    pub(super) fn send(&self, event: &Value) {
        let mut line = event.to_string();
        line.push('\n');
        let mut out = lock(&self.out);
        if out.0.write_all(line.as_bytes()).is_err() {
            out.1 = true;
        }
    }

    /// Whether a write failed (the harness went away).
    pub(super) fn broken(&self) -> bool {
        lock(&self.out).1
    }
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
    Connect(String, u16),
    Rule(String),
}

fn grant_of(pending: &Pending) -> Option<Grant> {
    match pending {
        Pending::Connect { host, port } => Some(Grant::Connect(host.to_ascii_lowercase(), *port)),
        Pending::Request { rule, .. } => Some(Grant::Rule(rule.clone())),
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

#[derive(Default)]
struct State {
    /// The run request whose command runs now.
    run: Value,
    asked: HashMap<String, Asked>,
    /// What each run's exit event lists, by run id (as JSON text).
    log: HashMap<String, Vec<Value>>,
    grants: HashSet<Grant>,
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

/// The decider a run's egress asks ([`sandbox::runner::EgressOptions::decider`]).
pub(crate) struct ChannelDecider(Approvals);

impl std::fmt::Debug for ChannelDecider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelDecider")
            .field("limit", &self.0.inner.limit)
            .finish_non_exhaustive()
    }
}

impl Decider for ChannelDecider {
    fn ask(&self, pending: Pending, reply: Reply) {
        self.0.ask(pending, reply);
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
        Pending::Connect { host, port } => {
            f.insert("kind".into(), "connect".into());
            f.insert("host".into(), host.clone().into());
            f.insert("port".into(), (*port).into());
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
        Arc::new(ChannelDecider(self.clone()))
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

    /// Books an entry for the exit event of `run`.
    fn book(state: &mut State, run: &Value, entry: Value) {
        state.log.entry(key(run)).or_default().push(entry);
    }

    fn ask(&self, pending: Pending, reply: Reply) {
        let mut fields = fields_of(&pending);
        let mut state = lock(&self.inner.state);
        let run = state.run.clone();
        if state.closed {
            reply.answer(Decision::Deny);
            fields.insert("answer".into(), "deny".into());
            fields.insert("by".into(), "session closed".into());
            Self::book(&mut state, &run, Value::Object(fields));
            return;
        }
        if grant_of(&pending).is_some_and(|g| state.grants.contains(&g)) {
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
        event.extend(fields.clone());
        event.insert(
            "timeout_ms".into(),
            u64::try_from(self.inner.limit.as_millis())
                .unwrap_or(u64::MAX)
                .into(),
        );
        self.audit_asked(&permission, &run, &fields);
        state.asked.insert(permission, Asked { reply, run, fields });
        // Written under the lock: an answer cannot overtake its question.
        self.inner.events.send(&Value::Object(event));
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
                if let Some(grant) = grant_of_fields(&asked.fields) {
                    state.grants.insert(grant);
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

    /// The command of run `id` ended: every question it left is denied,
    /// and what was asked and answered during it is returned (for its exit
    /// event).
    pub(crate) fn end(&self, id: &Value) -> Vec<Value> {
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
        state.run = Value::Null;
        let log = state.log.remove(&key(id)).unwrap_or_default();
        drop(state);
        for (permission, by) in decided {
            self.audit_decided(&permission, "deny", by);
        }
        log
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

fn grant_of_fields(fields: &Map<String, Value>) -> Option<Grant> {
    if let Some(rule) = fields.get("rule").and_then(Value::as_str) {
        return Some(Grant::Rule(rule.to_owned()));
    }
    let host = fields.get("host")?.as_str()?.to_ascii_lowercase();
    let port = u16::try_from(fields.get("port")?.as_u64()?).ok()?;
    Some(Grant::Connect(host, port))
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
