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
            // Just past the edge: a command that ignores SIGTERM is still
            // ended at the timeout. Its twin, just inside: one that ends
            // before the timeout keeps its own exit code.
            let end = run(sh("trap '' TERM; sleep 60", &[]))?;
            let twin = run(sh("exit 7", &[]))?;
            if twin.timed_out || twin.exit_code != Some(7) {
                return Err(unwitnessed(format!(
                    "allowed twin not seen: `exit 7` under timeout_seconds=1 ended timed_out={}, \
                     exit={:?}",
                    twin.timed_out, twin.exit_code
                )));
            }
            (
                end.timed_out && end.exit_code == Some(124),
                format!(
                    "`trap '' TERM; sleep 60` under timeout_seconds=1: timed_out={}, exit={:?} \
                     (twin `exit 7`: timed_out=false, exit=Some(7))",
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

/// A runner with no sandbox at all, for the proof's mutation check: it
/// ignores the policy (no timeout, no containment) and waits for the
/// command up to a bound of the harness's own
/// ([`UnconfinedRunner::HARNESS_BOUND`]), then kills the command's first
/// process only, as a runner without containment would leave the rest.
///
/// The process groups it started are killed when it is dropped, so nothing
/// the check started outlives it.
#[derive(Debug, Default)]
pub struct UnconfinedRunner {
    groups: std::sync::Mutex<Vec<i32>>,
}

impl UnconfinedRunner {
    /// How long the harness waits for a command before it gives up on it.
    pub const HARNESS_BOUND: Duration = Duration::from_secs(3);
}

impl TimeoutRunner for UnconfinedRunner {
    fn run(
        &self,
        _backend: &dyn sandbox_core::Backend,
        _policy: &sandbox_core::ResolvedPolicy,
        argv: &[OsString],
    ) -> Result<super::RunEnd, String> {
        use std::os::unix::process::CommandExt;
        use std::process::{Command, Stdio};
        let (program, args) = argv.split_first().ok_or("empty argv")?;
        let mut child = Command::new(program)
            .args(args)
            .env_clear()
            .envs(crate::launch::minimal_env())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", program.to_string_lossy()))?;
        let pid = i32::try_from(child.id()).map_err(|e| e.to_string())?;
        if let Ok(mut groups) = self.groups.lock() {
            groups.push(pid);
        }
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
                return Ok(super::RunEnd {
                    timed_out: false,
                    exit_code: status.code(),
                });
            }
            if start.elapsed() >= Self::HARNESS_BOUND {
                // The first process only; its group goes when the runner is dropped.
                let _ = child.kill();
                let _ = child.wait();
                return Ok(super::RunEnd {
                    timed_out: false,
                    exit_code: None,
                });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for UnconfinedRunner {
    fn drop(&mut self) {
        let groups = match self.groups.get_mut() {
            Ok(g) => std::mem::take(g),
            Err(poisoned) => std::mem::take(poisoned.into_inner()),
        };
        for pgid in groups {
            // SAFETY: kill(2) on a process group this runner created (its
            // leader's pid cannot be reused while the group has members).
            unsafe { libc::kill(-pgid, libc::SIGKILL) };
        }
    }
}
