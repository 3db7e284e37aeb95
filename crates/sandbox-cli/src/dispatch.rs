//! `exec-op`'s dispatch through the permission model (seed 002): before the
//! sandbox runs, the scope the op envelope declares is checked against what
//! the skill holds, and an op whose scope no layer grants is refused with
//! nothing run.
//!
//! The scope: each `write_paths` entry (`file.write`), each `read_paths`
//! entry (`file.read`), and `network: true` (`network/*`), paths expanded as
//! the envelope's and resolved through existing symlinks (as the sandbox
//! resolves them); the write paths are taken from the op's resolved policy
//! itself, so the paths checked are the paths enforced. The layers, first match wins
//! ([`sandbox_permissions::PermissionModel::check`]):
//! * defaults: reading and writing beneath the workspace (the CLI's built-in
//!   op bound), no network;
//! * the operator's pre-approvals, `[permissions.pre_approved]` in the same
//!   config file (`"<skill>/<op>/<path>" = "allow"`);
//! * grants approved in an earlier interactive run, in `approvals.json` of
//!   the sandbox's state directory ([`sandbox::trusted::state_dir`]: trusted
//!   state, write-denied in every confined run that could reach it).
//!
//! Grants are keyed by skill (`--skill`, default `exec-op`) and never
//! inherited. A run that is not interactive never asks: a missing grant is a
//! refusal naming the op and the keys. An interactive one (stdin and stderr
//! terminals) under the approval policy `ask` asks once on the terminal for
//! all of them; an approval is stored for later runs. The approval policy is
//! the session log's last (`--session FILE`, replayed), else the config's
//! `[permissions] approval`, else `ask`.
//!
//! The scope is what the op declares, checked after the operator's bound
//! (which refuses a request beyond it before anyone is asked): a grant does
//! not widen the bound, and the bound does not stand in for a grant.

use std::path::{Path, PathBuf};
use std::time::Duration;

use sandbox::policy::{ExpandContext, ResolvedPolicy, SandboxedExecOp};
use sandbox_permissions::{
    replay, session_is_interactive, ApprovalPolicy, ApprovalStore, Approvals, Declaration,
    Defaults, JsonLinesAudit, Op, PermissionError, PermissionModel, PermissionsConfig, SkillCall,
    SkillName, Target, TerminalAnswerer,
};

use crate::Fatal;

/// How long an interactive approval prompt waits for an answer.
const PROMPT_TIMEOUT: Duration = Duration::from_secs(300);

/// What `exec-op` dispatches with.
pub(crate) struct Dispatch<'a> {
    /// The skill the op runs for (grants are keyed by it).
    pub(crate) skill: &'a str,
    /// The workspace (`{{workspace}}`), the defaults' scope.
    pub(crate) workspace: &'a Path,
    /// The operator config file, whose `[permissions]` table is read.
    pub(crate) config: Option<&'a Path>,
    /// The session log to replay for the approval policy.
    pub(crate) session: Option<&'a Path>,
}

/// The scope `op` declares, as (operation, target) pairs. The write
/// targets are the write paths of `policy`, the op's policy as it will be
/// enforced (resolved once, through symlinks): resolving the envelope's
/// paths again here could meet a link re-pointed in between (by a confined
/// run that may write where it lies), and grant one path while another runs.
fn declared_scope(
    op: &SandboxedExecOp,
    policy: &ResolvedPolicy,
    ctx: &ExpandContext,
) -> Result<Vec<(Op, Target)>, Fatal> {
    let mut needs = Vec::new();
    for path in policy.write_paths() {
        needs.push((Op::FileWrite, Target::path(path.clone())?));
    }
    // Reads are not confined to `read_paths` (the policy has no read
    // allowlist): these are the declared scope only.
    for path in &op.read_paths {
        let expanded = ctx.expand("read_paths", path)?;
        needs.push((Op::FileRead, Target::path(resolved(&expanded))?));
    }
    if op.network {
        needs.push((Op::Network, Target::Any));
    }
    Ok(needs)
}

/// `path` with its longest existing prefix canonicalised (symlinks
/// followed, as the sandbox will), the rest appended lexically.
fn resolved(path: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut cur = path;
    loop {
        if let Ok(real) = std::fs::canonicalize(cur) {
            return rest.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (cur.parent(), cur.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name.to_owned());
                cur = parent;
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// Checks the scope `op` declares before anything runs; `Err` is the
/// refusal (exit 125), naming the op and what it lacks.
pub(crate) fn check(
    d: &Dispatch<'_>,
    op: &SandboxedExecOp,
    policy: &ResolvedPolicy,
    ctx: &ExpandContext,
) -> Result<(), Fatal> {
    let needs = declared_scope(op, policy, ctx)?;
    let skill = SkillName::new(d.skill).map_err(|e| Fatal(format!("--skill: {e}")))?;
    let permissions = match d.config {
        Some(path) => PermissionsConfig::load(path)?,
        None => PermissionsConfig::default(),
    };
    let workspace = std::fs::canonicalize(d.workspace).map_err(|e| {
        Fatal(format!(
            "cannot resolve the workspace {}: {e}",
            d.workspace.display()
        ))
    })?;
    let defaults = Defaults::new(&workspace, std::slice::from_ref(&workspace))?;
    // Without a state directory (no HOME, no passwd home) nothing is
    // stored: an approval then holds for this run only.
    let scratch;
    let state = match sandbox::trusted::state_dir() {
        Some(dir) => dir,
        None => {
            scratch = tempfile::tempdir()?;
            scratch.path().to_path_buf()
        }
    };
    let store = ApprovalStore::load(&state)?;
    let mut model = PermissionModel::new(defaults, &permissions, store);
    let call = SkillCall::root(skill);
    let declaration = Declaration { phase: None, needs };
    if model.missing(&call, &declaration).is_empty() {
        return Ok(());
    }
    let session = match d.session {
        Some(path) => replay(path)?.approval,
        None => None,
    };
    let policy = session
        .or(permissions.approval)
        .unwrap_or(ApprovalPolicy::Ask);
    let interactive = session_is_interactive();
    let result = if interactive && policy == ApprovalPolicy::Ask {
        std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
            .create(&state)
            .map_err(|e| Fatal(format!("cannot create {}: {e}", state.display())))?;
        let audit = JsonLinesAudit::open(&JsonLinesAudit::default_path(&state))?;
        let mut approvals = Approvals::new(policy, true, audit);
        if let Ok(tty) = TerminalAnswerer::open_tty(PROMPT_TIMEOUT) {
            approvals.push(tty);
        }
        model.ensure(&call, &declaration, &approvals)
    } else {
        // Never asked: `ensure` refuses before any answerer or audit record.
        let audit = JsonLinesAudit::new(std::io::sink());
        model.ensure(&call, &declaration, &Approvals::new(policy, false, audit))
    };
    result.map_err(|e| refusal(op, policy, &e))
}

/// The one line a refused op gets: the op (its argv) and why.
fn refusal(op: &SandboxedExecOp, policy: ApprovalPolicy, e: &PermissionError) -> Fatal {
    let why = match (e, policy) {
        // The model's own text says "not interactive"; under `never` an
        // interactive run is refused the same way, for another reason.
        (PermissionError::NotGranted { skill, keys }, ApprovalPolicy::Never) => {
            let keys: Vec<String> = keys.iter().map(ToString::to_string).collect();
            format!(
                "skill {skill} needs {} which neither the config nor an earlier approval \
                 grants, and the approval policy is never, so nothing is asked; pre-approve \
                 them in the config ([permissions.pre_approved] \"<key>\" = \"allow\")",
                keys.join(", ")
            )
        }
        _ => e.to_string(),
    };
    Fatal(format!(
        "exec-op `{}` refused before it ran: its declared scope is not granted: {why}",
        op.argv.join(" ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A path through a symlink is the grant target the sandbox would
    /// enforce (the link's target), and a part that does not exist yet is
    /// kept lexically beneath the resolved rest.
    #[test]
    fn declared_paths_resolve_as_the_sandbox_will() {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        std::fs::create_dir(real.join("out")).unwrap();
        std::os::unix::fs::symlink(real.join("out"), real.join("link")).unwrap();
        assert_eq!(resolved(&real.join("link/new/f")), real.join("out/new/f"));
        assert_eq!(resolved(&real.join("out")), real.join("out"));
        let op: SandboxedExecOp = SandboxedExecOp::from_json(
            r#"{"argv":["true"],"network":true,"write_paths":["{{workspace}}/link"],"read_paths":["/usr"]}"#,
        )
        .unwrap();
        let ctx = ExpandContext {
            home: None,
            workspace: Some(real.clone()),
        };
        let policy = op.effective_policy(None, &ctx, []).unwrap();
        let scope = declared_scope(&op, &policy, &ctx).unwrap();
        assert_eq!(
            scope,
            [
                (Op::FileWrite, Target::path(real.join("out")).unwrap()),
                (
                    Op::FileRead,
                    Target::path(std::fs::canonicalize("/usr").unwrap()).unwrap()
                ),
                (Op::Network, Target::Any),
            ]
        );
    }

    /// The write scope checked is the one enforced: a link re-pointed
    /// between the policy's resolution and the check (by a concurrent
    /// confined run that may write in the workspace) does not make the
    /// check see a granted path while another one is given to the op.
    #[test]
    fn the_write_scope_checked_is_the_one_enforced() {
        let dir = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(dir.path()).unwrap();
        let (ws, srv) = (real.join("ws"), real.join("srv"));
        std::fs::create_dir_all(ws.join("out")).unwrap();
        std::fs::create_dir_all(&srv).unwrap();
        let link = ws.join("link");
        std::os::unix::fs::symlink(&srv, &link).unwrap();
        let op =
            SandboxedExecOp::from_json(r#"{"argv":["true"],"write_paths":["{{workspace}}/link"]}"#)
                .unwrap();
        let ctx = ExpandContext {
            home: None,
            workspace: Some(ws.clone()),
        };
        let policy = op.effective_policy(None, &ctx, []).unwrap();
        assert_eq!(policy.write_paths(), std::slice::from_ref(&srv));
        // Re-pointed into the workspace (which the defaults grant).
        std::fs::remove_file(&link).unwrap();
        std::os::unix::fs::symlink(ws.join("out"), &link).unwrap();
        let scope = declared_scope(&op, &policy, &ctx).unwrap();
        assert_eq!(scope, [(Op::FileWrite, Target::path(srv).unwrap())]);
    }

    /// The `[permissions]` table of the documented config (docs/config.md)
    /// parses as the dispatch reads it, and the documented session-log line
    /// replays to its policy.
    #[test]
    fn the_documented_permissions_forms_parse() {
        let doc = include_str!("../../../docs/config.md");
        let toml = doc
            .split("```toml\n")
            .nth(1)
            .and_then(|b| b.split("```").next())
            .unwrap();
        let c = PermissionsConfig::from_toml_str(toml, Path::new("docs/config.md")).unwrap();
        assert_eq!(c.approval, Some(ApprovalPolicy::Ask));
        let keys: Vec<String> = c.pre_approved_keys().map(ToString::to_string).collect();
        assert_eq!(
            keys,
            ["exec-op/file.write/srv/build-out", "fetch/network/*"]
        );
        let line = doc
            .lines()
            .find_map(|l| l.trim().strip_prefix("`{\"schema\":1"))
            .and_then(|l| l.split('`').next())
            .unwrap()
            .replace('…', "1");
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("session.jsonl");
        std::fs::write(&log, format!("{{\"schema\":1{line}\n")).unwrap();
        assert_eq!(replay(&log).unwrap().approval, Some(ApprovalPolicy::Never));
    }
}
