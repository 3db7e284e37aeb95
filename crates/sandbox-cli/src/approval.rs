//! `--approval ask`: after a denial, offer a one-shot re-run with the denied path writable.

use std::path::{Path, PathBuf};

use sandbox::Outcome;
use sandbox_permissions::{
    decide_escalation_on_tty, session_is_interactive, ApprovalOutcome, ApprovalPolicy, Escalation,
    EscalationRequest, JsonLinesAudit,
};

use crate::args::{PolicyFlags, RunArgs};
use crate::Fatal;

/// After a sandbox denial under `--approval ask`, asks on the terminal for a
/// one-shot re-run with the refused path writable; returns the widened flags
/// if approved.
///
/// The proposal comes only from what the sandbox recorded itself: a broker
/// refusal of an existing object for lying outside every write path (never
/// a deny path, never the command's own output, which it could forge). It
/// names exactly that object, never an ancestor, and never `/` or a system
/// directory ([`may_propose`]).
pub(crate) fn escalate(args: &RunArgs, outcome: &Outcome) -> Result<Option<PolicyFlags>, Fatal> {
    if args.approval == ApprovalPolicy::Never || args.policy.policy_json.is_some() {
        return Ok(None);
    }
    let Some(mediation) = &outcome.mediation else {
        return Ok(None);
    };
    let Some(refused) = mediation
        .refused
        .iter()
        .find(|c| c.outside_write_paths && may_propose(Path::new(&c.target)))
    else {
        return Ok(None);
    };
    let path = PathBuf::from(&refused.target);
    let request = EscalationRequest {
        argv: outcome.argv.clone(),
        evidence: vec![format!(
            "the sandbox refused {} of {}: {}",
            refused.syscall, refused.target, refused.reason
        )],
        escalation: Escalation::AddWritePath(path.clone()),
    };
    let state = sandbox::trusted::state_dir().ok_or_else(|| {
        Fatal("no place for the approval audit log: set HOME or XDG_STATE_HOME".into())
    })?;
    std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
        .create(&state)
        .map_err(|e| Fatal(format!("cannot create {}: {e}", state.display())))?;
    let audit = JsonLinesAudit::open(&JsonLinesAudit::default_path(&state))?;
    let answer = decide_escalation_on_tty(
        args.approval,
        &request,
        &audit,
        std::time::Duration::from_secs(args.approval_timeout),
    );
    if answer == ApprovalOutcome::Unavailable && !session_is_interactive() {
        // Asked for, so said: nobody was there to answer.
        crate::show::say(&format!(
            "sandbox: --approval ask: no terminal to ask (stdin and stderr are not both \
             terminals), so nothing was escalated; {} stays unwritable (to allow it: -w {})",
            path.display(),
            path.display()
        ));
    }
    if !answer.permits() {
        return Ok(None);
    }
    let mut flags = args.policy.clone();
    flags.write.push(path);
    Ok(Some(flags))
}

/// Directories whose contents an approval never offers to make writable.
const SYSTEM_DIRS: &[&str] = &[
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/proc",
    "/run",
    "/sbin",
    "/sys",
    "/usr",
    "/var/lib",
    "/System",
    "/Library",
    "/private/etc",
];

/// Whether `path` may be offered as a write path: absolute, existing, not
/// `/`, not a system directory or anything beneath one, not the home
/// directory itself or one of its ancestors.
pub(crate) fn may_propose(path: &Path) -> bool {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    path.is_absolute()
        && path.exists()
        && path.parent().is_some()
        && !SYSTEM_DIRS.iter().any(|d| path.starts_with(d))
        && !home.is_some_and(|h| h.starts_with(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_root_a_system_directory_or_an_ancestor_of_home() {
        for path in [
            "/",
            "/etc",
            "/etc/passwd",
            "/usr/bin",
            "/usr",
            "/proc/self",
            "relative",
        ] {
            assert!(!may_propose(Path::new(path)), "{path}");
        }
        if let Some(home) = std::env::var_os("HOME") {
            let home = PathBuf::from(home);
            for a in home.ancestors() {
                assert!(!may_propose(a), "{}", a.display());
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "").unwrap();
        assert!(
            may_propose(&file),
            "an ordinary existing file may be offered"
        );
        assert!(!may_propose(&dir.path().join("missing")));
    }
}
