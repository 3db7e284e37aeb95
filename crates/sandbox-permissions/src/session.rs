//! The session event log: sandbox-mode and approval-policy changes as JSON
//! lines, replayed to rebuild a session's effective mode and policy
//! (`sandbox exec-op --session FILE` takes its approval policy from it).
//!
//! Each line is `{"schema":1,"at_ms":…,"event":{…}}`, written by the
//! harness that runs the session (one `O_APPEND` write per line; the
//! crate's `session_log` example is such a writer). The file is opened
//! without following symlinks. A crash mid-write leaves at most a partial
//! last line, which [`replay`] ignores: the last complete line wins.

use std::fs::OpenOptions;
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use sandbox_core::SandboxMode;
use serde::Deserialize;

use crate::outcome::ApprovalPolicy;

/// The schema version of every line.
const SESSION_SCHEMA: u32 = 1;
/// The largest log replayed (a line is about 100 bytes).
const MAX_LOG_BYTES: u64 = 64 << 20;

/// One change to a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
#[non_exhaustive]
pub enum SessionEvent {
    /// The session's sandbox mode became `mode`.
    ModeChanged {
        /// The new mode.
        mode: SandboxMode,
    },
    /// The session's approval policy became `policy`.
    ApprovalPolicyChanged {
        /// The new policy.
        policy: ApprovalPolicy,
    },
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    schema: u32,
    #[allow(dead_code)]
    at_ms: u64,
    event: SessionEvent,
}

/// A session's effective settings, as replayed from its log.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionState {
    /// The last mode set, if any.
    pub mode: Option<SandboxMode>,
    /// The last approval policy set, if any.
    pub approval: Option<ApprovalPolicy>,
}

impl SessionState {
    /// The state after `event`.
    fn apply(&mut self, event: SessionEvent) {
        match event {
            SessionEvent::ModeChanged { mode } => self.mode = Some(mode),
            SessionEvent::ApprovalPolicyChanged { policy } => self.approval = Some(policy),
        }
    }
}

/// Why a session log could not be replayed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SessionLogError {
    /// The file could not be opened or read.
    #[error("session log {}: {source}", path.display())]
    Io {
        /// The log file.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// A complete line is not a known event of this schema.
    #[error("session log {} line {line}: {message}", path.display())]
    Malformed {
        /// The log file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

/// Replays the log at `path`: every complete line in order; a partial last
/// line (a crash mid-write) is ignored. A missing file is an empty session.
/// Only a regular file of at most 64 MiB is read, opened without blocking:
/// a FIFO or a device put at the path (by a run that may write there) is
/// an error, never a read that waits for a writer or never ends.
pub fn replay(path: &Path) -> Result<SessionState, SessionLogError> {
    let io = |source| SessionLogError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut text = String::new();
    match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => {
            let meta = f.metadata().map_err(io)?;
            if !meta.is_file() {
                return Err(io(io::Error::other("not a regular file")));
            }
            if meta.len() > MAX_LOG_BYTES {
                return Err(io(io::Error::other(format!(
                    "larger than {} MiB",
                    MAX_LOG_BYTES >> 20
                ))));
            }
            f.take(MAX_LOG_BYTES)
                .read_to_string(&mut text)
                .map_err(io)?;
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(SessionState::default()),
        Err(e) => return Err(io(e)),
    }
    let complete = match text.rfind('\n') {
        Some(end) => &text[..end],
        None => "",
    };
    let mut state = SessionState::default();
    for (i, raw) in complete.split('\n').enumerate() {
        if raw.trim().is_empty() {
            continue;
        }
        let malformed = |message: String| SessionLogError::Malformed {
            path: path.to_path_buf(),
            line: i + 1,
            message,
        };
        let line: Line = serde_json::from_str(raw).map_err(|e| malformed(e.to_string()))?;
        if line.schema != SESSION_SCHEMA {
            return Err(malformed(format!(
                "schema {} is not {SESSION_SCHEMA}",
                line.schema
            )));
        }
        state.apply(line.event);
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `events` as the log's lines, each complete.
    fn lines(events: &[SessionEvent]) -> String {
        events
            .iter()
            .map(|e| {
                let event = serde_json::to_string(e).unwrap();
                format!("{{\"schema\":1,\"at_ms\":5,\"event\":{event}}}\n")
            })
            .collect()
    }

    #[test]
    fn replay_rebuilds_the_last_mode_and_policy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl");
        std::fs::write(
            &path,
            lines(&[
                SessionEvent::ModeChanged {
                    mode: SandboxMode::ReadOnly,
                },
                SessionEvent::ApprovalPolicyChanged {
                    policy: ApprovalPolicy::Never,
                },
                SessionEvent::ModeChanged {
                    mode: SandboxMode::WorkspaceWrite,
                },
            ]),
        )
        .unwrap();
        let state = replay(&path).unwrap();
        assert_eq!(state.mode, Some(SandboxMode::WorkspaceWrite));
        assert_eq!(state.approval, Some(ApprovalPolicy::Never));
        assert_eq!(
            replay(&dir.path().join("missing")).unwrap(),
            SessionState::default()
        );
    }

    #[test]
    fn a_truncated_last_line_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl");
        let full = lines(&[
            SessionEvent::ModeChanged {
                mode: SandboxMode::ReadOnly,
            },
            SessionEvent::ModeChanged {
                mode: SandboxMode::WorkspaceWrite,
            },
        ]);
        // A crash mid-write of a third line.
        let torn =
            full.clone() + r#"{"schema":1,"at_ms":5,"event":{"kind":"mode-changed","mode":"danger"#;
        std::fs::write(&path, &torn).unwrap();
        assert_eq!(
            replay(&path).unwrap().mode,
            Some(SandboxMode::WorkspaceWrite)
        );
        // A complete but malformed line is an error, never skipped silently.
        let bad = full + "{\"schema\":1,\"at_ms\":5,\"event\":{\"kind\":\"nope\"}}\n";
        std::fs::write(&path, &bad).unwrap();
        assert!(matches!(
            replay(&path),
            Err(SessionLogError::Malformed { line: 3, .. })
        ));
    }

    #[test]
    fn the_log_is_never_read_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(
            &victim,
            lines(&[SessionEvent::ApprovalPolicyChanged {
                policy: ApprovalPolicy::Never,
            }]),
        )
        .unwrap();
        let link = dir.path().join("session.jsonl");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        assert!(replay(&link).is_err());
        assert!(replay(&victim).is_ok());
    }

    /// A FIFO at the log's path (no writer: a blocking open never returns)
    /// and an oversized log are errors at once; the twin, a regular log,
    /// replays.
    #[test]
    fn a_fifo_or_a_huge_log_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo.jsonl");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        let e = replay(&fifo).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let huge = dir.path().join("huge.jsonl");
        std::fs::File::create(&huge)
            .unwrap()
            .set_len(MAX_LOG_BYTES + 1)
            .unwrap();
        let e = replay(&huge).unwrap_err().to_string();
        assert!(e.contains("larger than 64 MiB"), "{e}");
        let twin = dir.path().join("twin.jsonl");
        std::fs::write(
            &twin,
            lines(&[SessionEvent::ApprovalPolicyChanged {
                policy: ApprovalPolicy::Never,
            }]),
        )
        .unwrap();
        assert_eq!(replay(&twin).unwrap().approval, Some(ApprovalPolicy::Never));
    }
}
