//! The spawn axis.

use sandbox_core::SandboxPolicy;

use super::files::from_probe;
use super::harness::{
    refused, resolve, s, show, succeeded, unwitnessed, Ctx, Outcome, Tree, PY_PRELUDE,
};
use super::LegResult;
use crate::launch::minimal_env;
use crate::probe::{read, spawn_probe};

pub(crate) fn deny(ctx: &Ctx<'_>) -> Outcome {
    from_probe(&spawn_probe(ctx.backend))
}

const BOUNDARY: &str = r#"
import subprocess, threading
g = sys.argv[1]
def fork():
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
attempt("fork", fork)
def spawn():
    pid = os.posix_spawn("/bin/true", ["true"], {})
    os.waitpid(pid, 0)
attempt("posix_spawn", spawn)
attempt("subprocess", lambda: subprocess.run(["/bin/true"]).returncode)
def thread():
    box = []
    t = threading.Thread(target=lambda: box.append(7))
    t.start()
    t.join()
    return box[0]
attempt("thread", thread)
sys.stdout.flush()
os.execv("/bin/sh", ["sh", "-c", 'echo exec > "$1/exec"', "sh", g])
"#;

const REFUSED: &[&str] = &["fork", "posix_spawn", "subprocess"];

pub(crate) fn boundary(ctx: &Ctx<'_>) -> Result<Outcome, Outcome> {
    let script = format!("{PY_PRELUDE}{BOUNDARY}");
    let run_under = |deny_subprocess: bool| -> Result<_, Outcome> {
        let tree = Tree::new()?;
        let grant = tree.dir("grant")?;
        let policy = resolve(SandboxPolicy {
            write_paths: vec![s(&grant)],
            deny_subprocess,
            ..SandboxPolicy::default()
        })?;
        let run = ctx.python(&policy, &script, &[&grant])?;
        let values = run.started()?;
        let exec = read(&grant.join("exec")).as_deref() == Some("exec\n");
        Ok((values, exec, run.describe()))
    };
    // Positive control: with subprocesses allowed, every attempt works.
    let (open, open_exec, how) = run_under(false)?;
    if !REFUSED.iter().all(|k| succeeded(open.get(*k))) || !open_exec {
        return Err(unwitnessed(format!(
            "positive control not seen: with deny_subprocess false {}, exec ran: {open_exec} \
             (the child {how})",
            show(&open, REFUSED)
        )));
    }
    let (v, exec, _) = run_under(true)?;
    // The filter's EPERM, nothing else: EAGAIN or ENOMEM from a fork is the
    // host's limits, not the policy (the twin above forked under them).
    let pass = REFUSED.iter().all(|k| refused(v.get(*k)))
        && v.get("thread").map(String::as_str) == Some("ok:7")
        && exec;
    Ok((
        if pass {
            LegResult::Passed
        } else {
            LegResult::Failed
        },
        format!(
            "deny_subprocess=true: {}, own exec ran: {exec} (with deny_subprocess=false all \
             succeeded)",
            show(&v, &["fork", "posix_spawn", "subprocess", "thread"])
        ),
    ))
}

const WORKLOAD: &str = r#"set -e
/bin/echo c a b | /usr/bin/tr ' ' '\n' | /usr/bin/sort | /usr/bin/tail -n 1 > "$1/out"
"#;

pub(crate) fn workload(ctx: &Ctx<'_>) -> Result<Outcome, Outcome> {
    let tree = Tree::new()?;
    let grant = tree.dir("grant")?;
    let policy = resolve(SandboxPolicy {
        write_paths: vec![s(&grant)],
        ..SandboxPolicy::default()
    })?;
    let run = ctx.sh(&policy, WORKLOAD, &[&grant], &minimal_env())?;
    let out = read(&grant.join("out"));
    let pass = run.exited_ok() && out.as_deref() == Some("c\n");
    Ok((
        if pass {
            LegResult::Passed
        } else {
            LegResult::Failed
        },
        format!(
            "deny_subprocess=false: a four-process pipeline wrote {out:?} (expected \"c\\n\"; the \
             command {})",
            run.describe()
        ),
    ))
}
