//! Drives the terminal prompt through a real pseudo-terminal.

use std::fs::File;
use std::io::{Read, Write};
use std::thread;
use std::time::Duration;

use nix::pty::openpty;
use sandbox_permissions::{
    Answerer, ApprovalOutcome, ApprovalPolicy, ApprovalRequest, Approvals, AuditSink, Escalation,
    EscalationRequest, JsonLinesAudit, TerminalAnswerer,
};

/// The one-shot escalation `request` decided under `policy` by `terminal`
/// alone, in an interactive run.
fn decide_escalation(
    policy: ApprovalPolicy,
    request: &EscalationRequest,
    terminal: &dyn Answerer,
    audit: &dyn AuditSink,
) -> ApprovalOutcome {
    let mut approvals = Approvals::new(policy, true, audit);
    approvals.push(terminal);
    approvals.request(&ApprovalRequest::Escalation(request.clone()))
}

/// The human's side of the terminal.
struct Human {
    master: File,
    seen: String,
}

impl Human {
    /// Reads terminal output until it contains `needle`.
    fn wait_for(&mut self, needle: &str) {
        let mut buf = [0u8; 512];
        while !self.seen.contains(needle) {
            let n = self.master.read(&mut buf).expect("read pty master");
            assert!(
                n > 0,
                "terminal closed before {needle:?}; saw {:?}",
                self.seen
            );
            self.seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    }

    fn type_line(&mut self, line: &str) {
        self.master.write_all(line.as_bytes()).unwrap();
        self.master.write_all(b"\n").unwrap();
    }
}

fn request() -> EscalationRequest {
    EscalationRequest {
        argv: vec!["touch".into(), "/srv/data/out.txt".into()],
        evidence: vec![
            "touch: cannot touch '/srv/data/out.txt': Permission denied".into(),
            "sneaky \x1b]0;owned\x07 title".into(),
        ],
        escalation: Escalation::AddWritePath("/srv/data".into()),
    }
}

/// Runs the escalation decision on the slave side in a thread while `script`
/// plays the human on the master side. Returns the outcome, the terminal
/// transcript and the audit lines.
fn session(
    interactive: bool,
    timeout: Duration,
    script: impl FnOnce(&mut Human),
) -> (ApprovalOutcome, String, Vec<serde_json::Value>) {
    let pty = openpty(None, None).expect("openpty");
    let slave_in = File::from(pty.slave);
    let slave_out = slave_in.try_clone().unwrap();
    let decider = thread::spawn(move || {
        let terminal = TerminalAnswerer::new(slave_in, slave_out, interactive, timeout);
        let audit = JsonLinesAudit::new(Vec::new());
        let outcome = decide_escalation(ApprovalPolicy::Ask, &request(), &terminal, &audit);
        (outcome, audit.into_inner())
    });
    let mut human = Human {
        master: File::from(pty.master),
        seen: String::new(),
    };
    script(&mut human);
    let (outcome, audit) = decider.join().expect("decider thread");
    let audit = String::from_utf8(audit)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (outcome, human.seen, audit)
}

const LONG: Duration = Duration::from_secs(600);

#[test]
fn yes_allows_once_and_the_prompt_shows_evidence_and_escalation() {
    let (outcome, seen, audit) = session(true, LONG, |h| {
        h.wait_for("[y/N]");
        h.type_line("y");
    });
    assert_eq!(outcome, ApprovalOutcome::AllowedOnce);
    assert!(seen.contains("$ touch /srv/data/out.txt"), "{seen}");
    assert!(
        seen.contains("cannot touch '/srv/data/out.txt': Permission denied"),
        "{seen}"
    );
    assert!(seen.contains("add /srv/data to the write paths"), "{seen}");
    // Escape sequences from the command's output are shown, not interpreted.
    assert!(
        !seen.contains('\x1b') && seen.contains("\\u{1b}]0;owned"),
        "{seen}"
    );
    assert_eq!(audit[1]["outcome"], "allowed-once");
    assert_eq!(audit[1]["answerer"], "terminal");
}

#[test]
fn no_rejects() {
    let (outcome, _, audit) = session(true, LONG, |h| {
        h.wait_for("[y/N]");
        h.type_line("no");
    });
    assert_eq!(outcome, ApprovalOutcome::Rejected);
    assert_eq!(audit[1]["outcome"], "rejected");
}

#[test]
fn unclear_answer_is_asked_again() {
    let (outcome, seen, _) = session(true, LONG, |h| {
        h.wait_for("[y/N]");
        h.type_line("maybe");
        h.wait_for("please answer y or n");
        // The question is asked again after the hint.
        let after_hint = h
            .seen
            .split("please answer y or n")
            .last()
            .unwrap()
            .to_owned();
        h.seen = after_hint;
        h.wait_for("[y/N]");
        h.type_line("yes");
    });
    assert_eq!(outcome, ApprovalOutcome::AllowedOnce);
    assert!(seen.contains("[y/N]"), "{seen}");
}

#[test]
fn garbage_every_time_is_unavailable() {
    let (outcome, _, audit) = session(true, LONG, |h| {
        for _ in 0..3 {
            h.wait_for("[y/N]");
            h.seen.clear();
            h.type_line("perhaps");
        }
        h.wait_for("not allowed");
    });
    assert_eq!(outcome, ApprovalOutcome::Unavailable);
    assert!(
        audit[1]["reason"].as_str().unwrap().contains("malformed"),
        "{audit:?}"
    );
}

#[test]
fn no_answer_until_timeout_is_cancelled() {
    let (outcome, seen, audit) = session(true, Duration::from_millis(200), |h| {
        h.wait_for("cancelled");
    });
    assert_eq!(outcome, ApprovalOutcome::Cancelled);
    assert!(seen.contains("no answer within"), "{seen}");
    assert_eq!(audit[1]["outcome"], "cancelled");
}

#[test]
fn type_ahead_does_not_answer() {
    // "y" typed before the question is discarded; the human then says no.
    let pty = openpty(None, None).expect("openpty");
    let mut master = File::from(pty.master);
    master.write_all(b"y\n").unwrap();
    let slave_in = File::from(pty.slave);
    let slave_out = slave_in.try_clone().unwrap();
    let decider = thread::spawn(move || {
        let terminal = TerminalAnswerer::new(slave_in, slave_out, true, LONG);
        let audit = JsonLinesAudit::new(Vec::new());
        decide_escalation(ApprovalPolicy::Ask, &request(), &terminal, &audit)
    });
    let mut human = Human {
        master,
        seen: String::new(),
    };
    human.wait_for("[y/N]");
    human.type_line("n");
    assert_eq!(decider.join().unwrap(), ApprovalOutcome::Rejected);
}

#[test]
fn not_interactive_writes_nothing_and_is_unavailable() {
    for (flag, policy) in [(false, ApprovalPolicy::Ask), (true, ApprovalPolicy::Never)] {
        let pty = openpty(None, None).expect("openpty");
        let slave_in = File::from(pty.slave);
        let mut slave_out = slave_in.try_clone().unwrap();
        let terminal = TerminalAnswerer::new(slave_in, slave_out.try_clone().unwrap(), flag, LONG);
        let audit = JsonLinesAudit::new(Vec::new());
        let outcome = decide_escalation(policy, &request(), &terminal, &audit);
        let expected = if flag {
            ApprovalOutcome::Rejected
        } else {
            ApprovalOutcome::Unavailable
        };
        assert_eq!(outcome, expected);
        // The first thing on the terminal is our marker: no prompt was written.
        slave_out.write_all(b"MARKER\n").unwrap();
        let mut human = Human {
            master: File::from(pty.master),
            seen: String::new(),
        };
        human.wait_for("MARKER");
        assert!(human.seen.starts_with("MARKER"), "{:?}", human.seen);
    }
}

#[test]
fn closed_terminal_is_cancelled() {
    let (outcome, _, _) = session(true, LONG, |h| {
        h.wait_for("[y/N]");
        // Hang up: the human's side goes away.
        let dead = File::open("/dev/null").unwrap();
        drop(std::mem::replace(&mut h.master, dead));
    });
    assert_eq!(outcome, ApprovalOutcome::Cancelled);
}
