//! A human answers on a terminal: the prompt for escalations and grants.

use std::fs::{File, OpenOptions};
use std::io::{self, IsTerminal, Read, Write};
use std::os::fd::AsFd;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::termios::{tcflush, FlushArg};

use crate::answerer::{Answer, Answerer};
use crate::audit::AuditSink;
use crate::chain::decide_escalation;
use crate::escalation::EscalationRequest;
use crate::outcome::{ApprovalOutcome, ApprovalPolicy};
use crate::request::ApprovalRequest;

const MAX_ATTEMPTS: u32 = 3;
const MAX_LINE: usize = 1024;
const MAX_EVIDENCE_LINES: usize = 20;
const MAX_SHOWN_CHARS: usize = 300;

/// Asks a human on a terminal: `y`/`yes` is `allowed-once`, `n`/`no`/empty is
/// `rejected`, end of input or no answer before the timeout is `cancelled`.
///
/// Interactive: never asked in a non-interactive run. If constructed with
/// `interactive = false` it delegates without writing anything.
pub struct TerminalAnswerer<R, W> {
    io: Mutex<(R, W)>,
    interactive: bool,
    timeout: Duration,
}

impl<R: Read + AsFd, W: Write> TerminalAnswerer<R, W> {
    /// Prompts on `output` and reads the answer from `input` (a terminal, or
    /// anything pollable). `timeout` bounds the whole prompt.
    pub fn new(input: R, output: W, interactive: bool, timeout: Duration) -> Self {
        Self {
            io: Mutex::new((input, output)),
            interactive,
            timeout,
        }
    }
}

impl TerminalAnswerer<File, File> {
    /// Prompts on the controlling terminal (`/dev/tty`); interactive only if
    /// [`session_is_interactive`] also holds.
    pub fn open_tty(timeout: Duration) -> io::Result<Self> {
        let input = OpenOptions::new().read(true).write(true).open("/dev/tty")?;
        let output = input.try_clone()?;
        let interactive = session_is_interactive() && input.is_terminal();
        Ok(Self::new(input, output, interactive, timeout))
    }
}

/// Whether this process may prompt: stdin and stderr are both terminals.
pub fn session_is_interactive() -> bool {
    io::stdin().is_terminal() && io::stderr().is_terminal()
}

/// Decides a one-shot escalation for a CLI run, prompting on `/dev/tty` when
/// `policy` is `ask` and the session is interactive; never opens the terminal otherwise.
pub fn decide_escalation_on_tty(
    policy: ApprovalPolicy,
    request: &EscalationRequest,
    audit: &dyn AuditSink,
    timeout: Duration,
) -> ApprovalOutcome {
    let interactive = session_is_interactive();
    let terminal = if policy == ApprovalPolicy::Ask && interactive {
        TerminalAnswerer::open_tty(timeout).ok()
    } else {
        None
    };
    match &terminal {
        Some(t) => decide_escalation(policy, interactive, request, &[t], audit),
        None => decide_escalation(policy, interactive, request, &[], audit),
    }
}

impl<R: Read + AsFd, W: Write> Answerer for TerminalAnswerer<R, W> {
    fn name(&self) -> &str {
        "terminal"
    }

    fn interactive(&self) -> bool {
        true
    }

    fn answer(&self, request: &ApprovalRequest) -> Answer {
        if !self.interactive {
            return Answer::Delegate;
        }
        let mut guard = self.io.lock().unwrap_or_else(|e| e.into_inner());
        let (input, output) = &mut *guard;
        match converse(input, output, request, self.timeout) {
            Ok(answer) => answer,
            Err(e) => Answer::Malformed(format!("terminal I/O failed: {e}")),
        }
    }
}

enum Reply {
    Line(String),
    EndOfInput,
    TimedOut,
}

fn converse<R: Read + AsFd, W: Write>(
    input: &mut R,
    output: &mut W,
    request: &ApprovalRequest,
    timeout: Duration,
) -> io::Result<Answer> {
    let deadline = Instant::now() + timeout;
    // Discard type-ahead so a keystroke made before the question cannot answer it.
    if input.as_fd().is_terminal() {
        tcflush(input.as_fd(), FlushArg::TCIFLUSH).map_err(io::Error::from)?;
    }
    let question = question(request, timeout);
    output.write_all(describe(request).as_bytes())?;
    for _ in 0..MAX_ATTEMPTS {
        output.write_all(question.as_bytes())?;
        output.flush()?;
        match read_line(input, deadline)? {
            Reply::EndOfInput => {
                // Best effort: the terminal may be gone, which is why input ended.
                let _ = output.write_all(b"\nend of input: cancelled\n");
                return Ok(Answer::Decide(ApprovalOutcome::Cancelled));
            }
            Reply::TimedOut => {
                writeln!(
                    output,
                    "\nno answer within {} s: cancelled",
                    timeout.as_secs()
                )?;
                return Ok(Answer::Decide(ApprovalOutcome::Cancelled));
            }
            Reply::Line(line) => match line.trim().to_ascii_lowercase().as_str() {
                "y" | "yes" => return Ok(Answer::Decide(ApprovalOutcome::AllowedOnce)),
                "n" | "no" | "" => return Ok(Answer::Decide(ApprovalOutcome::Rejected)),
                _ => output.write_all(b"please answer y or n\n")?,
            },
        }
    }
    output.write_all(b"no valid answer: treated as unavailable (not allowed)\n")?;
    output.flush()?;
    Ok(Answer::Malformed(format!(
        "no y/n answer after {MAX_ATTEMPTS} attempts"
    )))
}

/// Reads one line, waiting at most until `deadline`.
fn read_line<R: Read + AsFd>(input: &mut R, deadline: Instant) -> io::Result<Reply> {
    let mut line = Vec::new();
    let mut buf = [0u8; 256];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Reply::TimedOut);
        }
        let wait = PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX);
        let mut fds = [PollFd::new(input.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, wait) {
            Ok(0) => return Ok(Reply::TimedOut),
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
        let n = match input.read(&mut buf) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            // A terminal whose other side is gone reads as EIO.
            Err(e) if e.raw_os_error() == Some(Errno::EIO as i32) => 0,
            Err(e) => return Err(e),
        };
        if n == 0 {
            return Ok(Reply::EndOfInput);
        }
        line.extend_from_slice(&buf[..n]);
        if let Some(end) = line.iter().position(|&b| b == b'\n') {
            line.truncate(end);
            return Ok(Reply::Line(String::from_utf8_lossy(&line).into_owned()));
        }
        if line.len() > MAX_LINE {
            return Ok(Reply::Line("<overlong>".to_owned()));
        }
    }
}

fn describe(request: &ApprovalRequest) -> String {
    let mut text = String::new();
    match request {
        ApprovalRequest::Escalation(e) => {
            text.push_str("\nThe sandbox denied this command:\n  $ ");
            text.push_str(&shown(&e.argv.join(" ")));
            text.push('\n');
            if !e.evidence.is_empty() {
                text.push_str("Evidence:\n");
                for line in e.evidence.iter().take(MAX_EVIDENCE_LINES) {
                    text.push_str("  ");
                    text.push_str(&shown(line));
                    text.push('\n');
                }
                if e.evidence.len() > MAX_EVIDENCE_LINES {
                    text.push_str(&format!(
                        "  ... {} more line(s)\n",
                        e.evidence.len() - MAX_EVIDENCE_LINES
                    ));
                }
            }
            text.push_str("Proposed one-shot escalation: ");
            text.push_str(&shown(&e.escalation.describe()));
            text.push('\n');
        }
        ApprovalRequest::Grants(g) => {
            text.push_str(&format!("\nSkill {}", shown(&g.skill.to_string())));
            if let Some(phase) = &g.phase {
                text.push_str(&format!(" (phase {})", shown(phase)));
            }
            text.push_str(" asks for permissions beyond the defaults:\n");
            for k in &g.keys {
                text.push_str("  ");
                text.push_str(&shown(&k.to_string()));
                text.push('\n');
            }
        }
    }
    text
}

fn question(request: &ApprovalRequest, timeout: Duration) -> String {
    let what = match request {
        ApprovalRequest::Escalation(_) => "Re-run the command once with this escalation?",
        ApprovalRequest::Grants(_) => {
            "Grant these to this skill (remembered in the approvals file)?"
        }
    };
    format!(
        "{what} [y/N] (no answer within {} s cancels) ",
        timeout.as_secs()
    )
}

/// Text from the command or the request, made safe for a terminal
/// ([`sandbox_core::terminal_safe`]), and cut when long.
fn shown(text: &str) -> String {
    let safe = sandbox_core::terminal_safe(text);
    match safe.char_indices().nth(MAX_SHOWN_CHARS) {
        Some((cut, _)) => format!("{}...", &safe[..cut]),
        None => safe.into_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shown_neutralises_escape_sequences() {
        assert_eq!(shown("a\x1b[2Jb\r\n"), "a\\u{1b}[2Jb\\r\\n");
        assert_eq!(shown(&"x".repeat(400)).len(), MAX_SHOWN_CHARS + 3);
    }
}
