//! Human-readable output: the `--explain` summary and report levels.

use sandbox::Outcome;

/// The `--explain` summary: classification, evidence and broker refusals.
pub(crate) fn explain(outcome: &Outcome) -> String {
    let mut out = format!(
        "sandbox: explain: backend {}, exit {}, ",
        outcome.backend,
        outcome.exit_code()
    );
    match &outcome.classification {
        sandbox::Classification::Ok => out.push_str("ok\n"),
        sandbox::Classification::TaskFailure => {
            out.push_str("the command failed on its own terms\n")
        }
        sandbox::Classification::Timeout => out.push_str("ended by the timeout\n"),
        sandbox::Classification::SandboxDenial { evidence } => {
            out.push_str("the sandbox refused something:\n");
            for line in evidence {
                out.push_str(&format!("  {line}\n"));
            }
        }
        sandbox::Classification::RunnerFailure { reason } => {
            out.push_str(&format!("runner failure: {reason}\n"))
        }
        _ => out.push_str("unclassified\n"),
    }
    if let Some(m) = &outcome.mediation {
        out.push_str(&format!(
            "  metadata broker: {} performed, {} refused{}\n",
            m.performed,
            m.refused.len(),
            if m.omitted > 0 {
                format!(" ({} not recorded)", m.omitted)
            } else {
                String::new()
            }
        ));
        for call in m.refused.iter().take(20) {
            out.push_str(&format!(
                "    refused {} on {}: {}\n",
                call.syscall, call.target, call.reason
            ));
        }
        if let Some(e) = &m.error {
            out.push_str(&format!("    broker stopped early: {e}\n"));
        }
    }
    if outcome.leftover_processes_ended > 0 {
        out.push_str(&format!(
            "  ended {} leftover process(es) after the command exited\n",
            outcome.leftover_processes_ended
        ));
    }
    out
}

pub(crate) fn level_text(level: &sandbox::Level) -> String {
    match level {
        sandbox::Level::Full => "full".into(),
        sandbox::Level::Partial { gaps } => format!("partial: {}", gaps.join("; ")),
        sandbox::Level::None { reason } => format!("none: {reason}"),
        _ => "unknown".into(),
    }
}
