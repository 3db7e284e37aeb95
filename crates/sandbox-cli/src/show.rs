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

/// One line saying what the sandbox refused during the run, in the user's
/// terms, or `None` when it refused nothing: printed on stderr after the
/// command ended (never among its own output), `--quiet` to leave it out.
/// Probes of the controlling terminal (`/dev/tty`, which shells open to look
/// for job control; a run has none) are not counted.
pub(crate) fn refusal_summary(outcome: &Outcome) -> Option<String> {
    let m = outcome.mediation.as_ref()?;
    let refused: Vec<&sandbox::MediatedCall> = m
        .refused
        .iter()
        .filter(|c| c.target != "/dev/tty")
        .collect();
    if refused.is_empty() {
        return None;
    }
    let (nets, files): (Vec<_>, Vec<_>) = refused
        .iter()
        .partition(|c| matches!(c.syscall.as_str(), "proxy" | "connect"));
    let mut parts = Vec::new();
    if !nets.is_empty() {
        parts.push(format!(
            "{} ({})",
            plural(nets.len(), "connection"),
            first_targets(&nets, |c| {
                if c.syscall == "proxy" {
                    format!("{} not in --allow-net", c.target)
                } else {
                    c.target.clone()
                }
            })
        ));
    }
    if !files.is_empty() {
        let outside = files.iter().all(|c| c.outside_write_paths);
        parts.push(format!(
            "{} ({}{})",
            plural(files.len(), "file change"),
            first_targets(&files, |c| c.target.clone()),
            if outside {
                ": outside the write paths"
            } else {
                ""
            }
        ));
    }
    let more = if m.omitted > 0 {
        format!(" and {} more", m.omitted)
    } else {
        String::new()
    };
    Some(format!(
        "sandbox: refused {}{more}; --explain for details",
        parts.join(", ")
    ))
}

fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// The first two distinct targets, then how many others.
fn first_targets(
    calls: &[&&sandbox::MediatedCall],
    show: impl Fn(&sandbox::MediatedCall) -> String,
) -> String {
    let mut seen: Vec<String> = Vec::new();
    for c in calls {
        let s = show(c);
        if !seen.contains(&s) {
            seen.push(s);
        }
    }
    let rest = seen.len().saturating_sub(2);
    let mut text = seen.into_iter().take(2).collect::<Vec<_>>().join(", ");
    if rest > 0 {
        text.push_str(&format!(
            ", {rest} other{}",
            if rest == 1 { "" } else { "s" }
        ));
    }
    text
}

pub(crate) fn level_text(level: &sandbox::Level) -> String {
    match level {
        sandbox::Level::Full => "full".into(),
        sandbox::Level::Partial { gaps } => format!("partial: {}", gaps.join("; ")),
        sandbox::Level::None { reason } => format!("none: {reason}"),
        _ => "unknown".into(),
    }
}
