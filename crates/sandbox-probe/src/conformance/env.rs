//! The env axis, checked at process level: `scrub_env` then the backend's wrap.
//!
//! The facade runner owns the environment of a real run; this arm witnesses
//! that the scrub removes what the policy names and that the backend's wrap
//! neither re-injects it nor drops what must stay.

use std::ffi::OsString;

use sandbox_core::axis::LegKind;
use sandbox_core::{scrub_env, SandboxPolicy};

use super::harness::{resolve, unwitnessed, Ctx, Outcome};
use super::LegResult;

const SCRIPT: &str = r#"echo "started=ok"
echo "AWS_SECRET_ACCESS_KEY=${AWS_SECRET_ACCESS_KEY-unset}"
echo "GITHUB_TOKEN=${GITHUB_TOKEN-unset}"
echo "AWS_=${AWS_-unset}"
echo "AWSX=${AWSX-unset}"
echo "GITHUB_TOKENS=${GITHUB_TOKENS-unset}"
echo "KEEP_ME=${KEEP_ME-unset}"
echo "HOME=${HOME-unset}"
echo "uname=$(uname -s)"
"#;

pub(crate) fn leg(ctx: &Ctx<'_>, leg: LegKind) -> Result<Outcome, Outcome> {
    let policy = resolve(SandboxPolicy {
        env_deny_names: vec!["AWS_*".into(), "GITHUB_TOKEN".into()],
        ..SandboxPolicy::default()
    })?;
    let full: Vec<(OsString, OsString)> = [
        ("PATH", "/usr/local/bin:/usr/bin:/bin"),
        ("HOME", "/nonexistent-home"),
        ("AWS_SECRET_ACCESS_KEY", "secret-1"),
        ("GITHUB_TOKEN", "secret-2"),
        ("AWS_", "glob-edge"),
        ("AWSX", "near-miss"),
        ("GITHUB_TOKENS", "near-miss"),
        ("KEEP_ME", "kept"),
    ]
    .into_iter()
    .map(|(k, v)| (k.into(), v.into()))
    .collect();
    // With no sandbox at all (the proof's mutation check) nothing scrubs.
    let env = if ctx.unconfined {
        full
    } else {
        scrub_env(full, policy.env_deny_names())
    };
    let run = ctx.sh(&policy, SCRIPT, &[], &env)?;
    let v = run.started()?;
    let get = |k: &str| v.get(k).map(String::as_str).unwrap_or("(absent)");
    if get("KEEP_ME") != "kept" {
        return Err(unwitnessed(format!(
            "positive control not seen: KEEP_ME={} (the command {})",
            get("KEEP_ME"),
            run.describe()
        )));
    }
    let (pass, shown) = match leg {
        LegKind::Deny => (
            get("AWS_SECRET_ACCESS_KEY") == "unset" && get("GITHUB_TOKEN") == "unset",
            format!(
                "AWS_SECRET_ACCESS_KEY={}, GITHUB_TOKEN={}, KEEP_ME=kept",
                get("AWS_SECRET_ACCESS_KEY"),
                get("GITHUB_TOKEN")
            ),
        ),
        // Both edges of each name: `AWS_*` matches `AWS_` (an empty `*`)
        // but not `AWSX`; `GITHUB_TOKEN` is no prefix of `GITHUB_TOKENS`.
        LegKind::Boundary => (
            get("AWS_") == "unset"
                && get("AWSX") == "near-miss"
                && get("GITHUB_TOKENS") == "near-miss",
            format!(
                "AWS_={} (glob AWS_* must match it), AWSX={}, GITHUB_TOKENS={} (neither may be \
                 matched)",
                get("AWS_"),
                get("AWSX"),
                get("GITHUB_TOKENS")
            ),
        ),
        LegKind::Workload => (
            get("HOME") == "/nonexistent-home" && get("uname") == "Linux" && run.exited_ok(),
            format!("HOME={}, uname via PATH={}", get("HOME"), get("uname")),
        ),
    };
    Ok((
        if pass {
            LegResult::Passed
        } else {
            LegResult::Failed
        },
        format!(
            "process-level ({}), env_deny_names=[AWS_*, GITHUB_TOKEN]: {shown}",
            if ctx.unconfined {
                "no sandbox: nothing scrubbed"
            } else {
                "scrub_env + backend wrap"
            }
        ),
    ))
}
