//! A harness's side of the session log: appends sandbox-mode and
//! approval-policy changes as JSON lines, then replays the file as
//! `sandbox exec-op --session FILE` does.
//!
//! ```text
//! cargo run -p sandbox-permissions --example session_log -- /tmp/session.jsonl never
//! ```
//!
//! Each line is written with one `O_APPEND` write (a crash leaves at most a
//! partial last line, which replay ignores), never through a symlink, and
//! the file is created 0600.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::time::{SystemTime, UNIX_EPOCH};

use sandbox_core::SandboxMode;
use sandbox_permissions::{replay, ApprovalPolicy, SessionEvent};

fn append(path: &std::path::Path, event: SessionEvent) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let at_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    let line = serde_json::json!({ "schema": 1, "at_ms": at_ms, "event": event });
    file.write_all(format!("{line}\n").as_bytes())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let path = std::path::PathBuf::from(args.next().ok_or("usage: session_log FILE [ask|never]")?);
    let policy: ApprovalPolicy = match args.next() {
        Some(p) => p.to_str().ok_or("ask or never")?.parse()?,
        None => ApprovalPolicy::Never,
    };
    append(
        &path,
        SessionEvent::ModeChanged {
            mode: SandboxMode::WorkspaceWrite,
        },
    )?;
    append(&path, SessionEvent::ApprovalPolicyChanged { policy })?;
    let state = replay(&path)?;
    println!(
        "mode {:?}, approval policy {:?}",
        state.mode, state.approval
    );
    Ok(())
}
