//! The timeout axis, through a facade runner supplied by the caller.

use std::ffi::OsString;
use std::time::Duration;

use sandbox_core::axis::LegKind;
use sandbox_core::SandboxPolicy;

use super::harness::{resolve, s, unwitnessed, Ctx, Outcome, Tree};
use super::{LegResult, TimeoutRunner};

/// A background descendant that appends to a file every 50 ms, and a
/// foreground sleep far past the timeout.
const OVERRUN: &str = r#"(while :; do echo beat >> "$1/beat"; sleep 0.05; done) &
sleep 60
"#;

fn sh(script: &str, args: &[&std::path::Path]) -> Vec<OsString> {
    let mut argv: Vec<OsString> = vec!["/bin/sh".into(), "-c".into(), script.into(), "sh".into()];
    argv.extend(args.iter().map(|a| OsString::from(a.as_os_str())));
    argv
}

pub(crate) fn leg(
    ctx: &Ctx<'_>,
    runner: &dyn TimeoutRunner,
    leg: LegKind,
) -> Result<Outcome, Outcome> {
    let tree = Tree::new()?;
    let grant = tree.dir("grant")?;
    let policy = resolve(SandboxPolicy {
        write_paths: vec![s(&grant)],
        timeout_seconds: 1,
        ..SandboxPolicy::default()
    })?;
    let run = |argv: Vec<OsString>| {
        runner
            .run(ctx.backend, &policy, &argv)
            .map_err(|e| unwitnessed(format!("the runner failed: {e}")))
    };
    let (pass, evidence) = match leg {
        LegKind::Deny => {
            let end = run(sh(OVERRUN, &[&grant]))?;
            let beat = grant.join("beat");
            let size = || std::fs::metadata(&beat).map(|m| m.len()).unwrap_or(0);
            let before = size();
            if before == 0 {
                return Err(unwitnessed(
                    "the background descendant never ran, so its silence would prove nothing",
                ));
            }
            // Long enough for a surviving descendant to beat several times.
            std::thread::sleep(Duration::from_millis(500));
            let after = size();
            (
                end.timed_out && after == before,
                format!(
                    "timeout_seconds=1 against `sleep 60` with a beating descendant: timed_out={}, \
                     exit={:?}, beat file {before} -> {after} bytes over 500 ms after the run",
                    end.timed_out, end.exit_code
                ),
            )
        }
        LegKind::Boundary => {
            let end = run(sh("exit 7", &[]))?;
            (
                !end.timed_out && end.exit_code == Some(7),
                format!(
                    "`exit 7` under timeout_seconds=1: timed_out={}, exit={:?}",
                    end.timed_out, end.exit_code
                ),
            )
        }
        LegKind::Workload => {
            let end = run(sh(r#"/bin/echo a | /usr/bin/tr a b > "$1/out""#, &[&grant]))?;
            let out = crate::probe::read(&grant.join("out"));
            (
                !end.timed_out && end.exit_code == Some(0) && out.as_deref() == Some("b\n"),
                format!(
                    "pipeline under timeout_seconds=1: timed_out={}, exit={:?}, output {out:?}",
                    end.timed_out, end.exit_code
                ),
            )
        }
    };
    Ok((
        if pass {
            LegResult::Passed
        } else {
            LegResult::Failed
        },
        evidence,
    ))
}
