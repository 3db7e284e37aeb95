//! Audit events of approval requests, written as JSON lines.
//!
//! Audit records are for operators. They never go into what a caller shows a model.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::outcome::{ApprovalOutcome, ApprovalPolicy};
use crate::request::ApprovalRequest;

/// One audit record. Serialised with an `event` tag: `asked` or `decided`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum AuditEvent {
    /// A request entered the approval service.
    Asked {
        /// Correlates `asked` with its `decided`.
        request_id: String,
        /// Milliseconds since the Unix epoch.
        at_unix_ms: u64,
        /// The session's approval policy.
        policy: ApprovalPolicy,
        /// Whether the run may prompt a human.
        interactive: bool,
        /// One line for a human.
        summary: String,
        /// The full request.
        request: ApprovalRequest,
    },
    /// A request was decided.
    Decided {
        /// Correlates `asked` with its `decided`.
        request_id: String,
        /// Milliseconds since the Unix epoch.
        at_unix_ms: u64,
        /// The outcome returned to the caller.
        outcome: ApprovalOutcome,
        /// The answerer that took the request, if one did.
        answerer: Option<String>,
        /// Why this outcome (policy, no answerer, a panic, a malformed answer, ...).
        reason: String,
    },
}

pub(crate) fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Failure to record an audit event.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuditError {
    /// Opening or writing the audit target failed.
    #[error(
        "could not write the approval audit log {target}: {source}; check that it is writable"
    )]
    Write {
        /// The file path, or `writer` for a plain writer.
        target: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The event could not be serialised.
    #[error("could not serialise an approval audit event: {0}")]
    Serialize(#[from] serde_json::Error),
}

/// Where audit events go.
pub trait AuditSink {
    /// Records one event durably enough for the caller to rely on it.
    fn record(&self, event: &AuditEvent) -> Result<(), AuditError>;
}

/// Writes each event as one JSON line to a writer, flushing after each.
#[derive(Debug)]
pub struct JsonLinesAudit<W: Write> {
    target: String,
    out: Mutex<W>,
}

impl<W: Write> JsonLinesAudit<W> {
    /// Audits into `writer`.
    pub fn new(writer: W) -> Self {
        Self {
            target: "writer".to_owned(),
            out: Mutex::new(writer),
        }
    }

    /// The writer back.
    pub fn into_inner(self) -> W {
        self.out.into_inner().unwrap_or_else(|e| e.into_inner())
    }
}

impl JsonLinesAudit<File> {
    /// Appends to the file at `path`, creating it (mode 0600) if needed.
    ///
    /// Never through a symlink (`O_NOFOLLOW`: a confined run may write where
    /// the log lives), and only to a regular file with one name (no hard
    /// link another run could write through). Each record is one
    /// `O_APPEND` write, so a crash leaves at most a partial last line.
    pub fn open(path: &Path) -> Result<Self, AuditError> {
        let fail = |source| AuditError::Write {
            target: path.display().to_string(),
            source,
        };
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(fail)?;
        let meta = file.metadata().map_err(fail)?;
        if !meta.is_file() {
            return Err(fail(io::Error::other(
                "the audit log path is not a regular file",
            )));
        }
        // A second name (a hard link in some run's write path) would let
        // that run rewrite the record of what was approved.
        if meta.nlink() != 1 {
            return Err(fail(io::Error::other(format!(
                "the audit log has {} hard links, and a run that may write where another of its \
                 names lies could rewrite it; give it one name (move the other names away)",
                meta.nlink()
            ))));
        }
        Ok(Self {
            target: path.display().to_string(),
            out: Mutex::new(file),
        })
    }

    /// The audit log path inside a project state folder: `<state>/approvals-audit.jsonl`.
    pub fn default_path(state_dir: &Path) -> PathBuf {
        state_dir.join("approvals-audit.jsonl")
    }
}

impl<W: Write> AuditSink for JsonLinesAudit<W> {
    fn record(&self, event: &AuditEvent) -> Result<(), AuditError> {
        let mut line = serde_json::to_vec(event)?;
        line.push(b'\n');
        // A panic elsewhere while holding the lock leaves the writer usable: every write is a whole line.
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        out.write_all(&line)
            .and_then(|()| out.flush())
            .map_err(|source| AuditError::Write {
                target: self.target.clone(),
                source,
            })
    }
}

impl<S: AuditSink + ?Sized> AuditSink for &S {
    fn record(&self, event: &AuditEvent) -> Result<(), AuditError> {
        (**self).record(event)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A symlink planted at the log path is not followed, and its target is
    /// untouched; a directory there is refused; the twin: a plain path opens.
    #[test]
    fn the_log_is_never_opened_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious\n").unwrap();
        let link = dir.path().join("audit.jsonl");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(JsonLinesAudit::open(&link).is_err());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
        let sub = dir.path().join("sub");
        std::fs::create_dir(&sub).unwrap();
        assert!(JsonLinesAudit::open(&sub).is_err());
        assert!(JsonLinesAudit::open(&dir.path().join("plain.jsonl")).is_ok());
    }

    /// A log with a second name is refused and left as it was; the twin:
    /// once the other name is gone, the same file opens.
    #[test]
    fn a_log_with_a_hard_link_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.jsonl");
        std::fs::write(&log, "kept\n").unwrap();
        let other = dir.path().join("notes.txt");
        std::fs::hard_link(&log, &other).unwrap();
        let err = JsonLinesAudit::open(&log).unwrap_err().to_string();
        assert!(err.contains("2 hard links"), "{err}");
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "kept\n");
        std::fs::remove_file(&other).unwrap();
        assert!(JsonLinesAudit::open(&log).is_ok());
    }

    #[test]
    fn file_sink_appends_json_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = JsonLinesAudit::default_path(dir.path());
        for id in ["a", "b"] {
            let sink = JsonLinesAudit::open(&path).unwrap();
            sink.record(&AuditEvent::Decided {
                request_id: id.into(),
                at_unix_ms: 1,
                outcome: ApprovalOutcome::Rejected,
                answerer: None,
                reason: "test".into(),
            })
            .unwrap();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["event"], "decided");
        assert_eq!(lines[0]["outcome"], "rejected");
        assert_eq!(lines[1]["request_id"], "b");
    }

    #[test]
    fn open_failure_names_the_path() {
        let err = JsonLinesAudit::open(Path::new("/nonexistent-dir-for-test/audit.jsonl"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("/nonexistent-dir-for-test/audit.jsonl"),
            "{err}"
        );
    }
}
