//! `--approval ask`: after a denial, offer a one-shot re-run with the denied path writable.

use std::path::PathBuf;

use sandbox::Outcome;
use sandbox_permissions::{
    decide_escalation_on_tty, ApprovalPolicy, Escalation, EscalationRequest, JsonLinesAudit,
};

use crate::args::{PolicyFlags, RunArgs};
use crate::Fatal;

/// After a sandbox denial under `--approval ask`, asks on the terminal for a
/// one-shot re-run with the denied path writable; returns the widened flags if approved.
pub(crate) fn escalate(args: &RunArgs, outcome: &Outcome) -> Result<Option<PolicyFlags>, Fatal> {
    let sandbox::Classification::SandboxDenial { evidence } = &outcome.classification else {
        return Ok(None);
    };
    if args.approval == ApprovalPolicy::Never || args.policy.policy_json.is_some() {
        return Ok(None);
    }
    let Some(denied) = evidence.iter().find_map(|line| denied_path(line)) else {
        return Ok(None);
    };
    let Escalation::AddWritePath(path) = Escalation::write_path_for(&denied) else {
        return Ok(None);
    };
    let request = EscalationRequest {
        argv: outcome.argv.clone(),
        evidence: evidence.clone(),
        escalation: Escalation::AddWritePath(path.clone()),
    };
    let state = state_dir();
    std::fs::create_dir_all(&state)
        .map_err(|e| Fatal(format!("cannot create {}: {e}", state.display())))?;
    let audit = JsonLinesAudit::open(&JsonLinesAudit::default_path(&state))?;
    let answer = decide_escalation_on_tty(
        args.approval,
        &request,
        &audit,
        std::time::Duration::from_secs(args.approval_timeout),
    );
    if !answer.permits() {
        return Ok(None);
    }
    let mut flags = args.policy.clone();
    flags.write.push(path);
    Ok(Some(flags))
}

/// The path a denial line names: the last path before the marker, as in
/// `touch: cannot touch '/x/y': Permission denied` or
/// `/bin/sh: 1: cannot create /x/y: Permission denied`.
fn denied_path(line: &str) -> Option<PathBuf> {
    let before = [
        "Permission denied",
        "Operation not permitted",
        "Read-only file system",
    ]
    .iter()
    .find_map(|m| line.find(m).map(|i| &line[..i]))?;
    let subject = before
        .trim_end()
        .trim_end_matches(':')
        .rsplit(": ")
        .next()?;
    subject
        .split_whitespace()
        .map(|t| t.trim_matches(|c| matches!(c, '\'' | '"' | '`' | '\u{2018}' | '\u{2019}')))
        .rfind(|t| t.starts_with('/'))
        .map(PathBuf::from)
}

/// Where approval audit records go: `$XDG_STATE_HOME/sandbox`, else `~/.local/state/sandbox`.
fn state_dir() -> PathBuf {
    std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(std::env::temp_dir)
        .join("sandbox")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denied_path_is_the_object_not_the_program() {
        for (line, path) in [
            (
                "touch: cannot touch '/etc/x': Permission denied",
                Some("/etc/x"),
            ),
            (
                "/bin/sh: 1: cannot create /tmp/d/out: Permission denied",
                Some("/tmp/d/out"),
            ),
            (
                "mkdir: cannot create directory \u{2018}/x\u{2019}: Permission denied",
                Some("/x"),
            ),
            ("error: something else", None),
        ] {
            assert_eq!(denied_path(line), path.map(PathBuf::from), "{line}");
        }
    }
}
