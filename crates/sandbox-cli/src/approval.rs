//! `--approval ask`: after a denial, offer a one-shot re-run with the denied path writable.

use std::path::{Path, PathBuf};

use sandbox::runner::Outcome;
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
/// names exactly that object, never an ancestor, and never `/`, a system
/// directory, a protection or a file directly in the home directory
/// ([`offer`]); a write to a tool's own cache offers `--cache TOOL`.
pub(crate) fn escalate(args: &RunArgs, outcome: &Outcome) -> Result<Option<PolicyFlags>, Fatal> {
    if args.approval == ApprovalPolicy::Never || args.policy.policy_json.is_some() {
        return Ok(None);
    }
    let Some(mediation) = &outcome.mediation else {
        return Ok(None);
    };
    // What a careful user would offer ([`offer`]): exactly the refused
    // object, never a protection or a file directly in the home directory;
    // for a tool's own cache, a private one (`--cache TOOL`).
    // An intercepted request a rule would admit: exactly that rule (the
    // method and normalised path the proxy refused).
    let Some((refused, escalation)) = mediation.refused.iter().find_map(|c| {
        if let Some(rule) = request_offer(c) {
            return Some((c, Escalation::AddRequestRule(rule.to_string())));
        }
        let target = Path::new(&c.target);
        let escalation = match offer(target).filter(|_| c.outside_write_paths)? {
            Offer::Write(p) if p == target => Escalation::AddWritePath(p),
            Offer::Cache(tool) => Escalation::UseToolCache(tool),
            _ => return None,
        };
        Some((c, escalation))
    }) else {
        return Ok(None);
    };
    // The flag, its value one shell word (`crate::show::propose`, the one
    // quoting of every proposal): this line goes to CI logs, where it is
    // copied.
    let proposed = match &escalation {
        Escalation::UseToolCache(tool) => crate::show::propose("--cache", &tool.to_string()),
        Escalation::AddRequestRule(rule) => crate::show::propose("--allow-request", rule),
        _ => crate::show::propose("-w", &refused.target),
    };
    let flag = match proposed {
        crate::show::Proposal::Flag(flag) => format!("to allow it: {flag}"),
        crate::show::Proposal::Unquotable(why) => format!("no flag proposed: {why}"),
        _ => "no flag proposed".to_owned(),
    };
    let request = EscalationRequest {
        argv: outcome.argv.clone(),
        evidence: vec![format!(
            "the sandbox refused {} of {}: {}",
            refused.syscall, refused.target, refused.reason
        )],
        escalation: escalation.clone(),
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
             terminals), so nothing was escalated; {} stays {} ({flag})",
            refused.target,
            if refused.syscall == "request" {
                "refused"
            } else {
                "unwritable"
            }
        ));
    }
    if !answer.permits() {
        return Ok(None);
    }
    let mut flags = args.policy.clone();
    match escalation {
        Escalation::UseToolCache(tool) => flags.cache.push(tool),
        Escalation::AddRequestRule(rule) => match rule.parse() {
            Ok(rule) => flags.egress.allow_request.push(rule),
            Err(_) => return Ok(None),
        },
        _ => flags.write.push(PathBuf::from(&refused.target)),
    }
    Ok(Some(flags))
}

/// The request rule that would admit an intercepted request the proxy
/// refused for want of one (its record's reason names it); `None` for any
/// other refusal (a smuggling shape, a placeholder, an ambiguous path).
pub(crate) fn request_offer(
    call: &sandbox::runner::MediatedCall,
) -> Option<sandbox::policy::RequestRule> {
    if call.syscall != "request" {
        return None;
    }
    // The proxy wrote the flag's value as one shell word
    // (`sandbox::policy::flag`).
    let (_, flag) = call.reason.split_once("(to admit it: --allow-request ")?;
    sandbox::policy::shell_unword(flag.strip_suffix(')')?)?
        .parse()
        .ok()
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

/// What a careful user would offer for a write refused outside the write
/// paths.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Offer {
    /// `-w PATH`: the object itself when it exists, else the nearest
    /// directory that does (where the call would have made it).
    Write(PathBuf),
    /// `--cache TOOL`: the object lies in that tool's own cache in the home
    /// directory; the run gets a private one instead of the user's real one.
    Cache(sandbox::policy::ToolCache),
    /// `--private-tmp`: a new file directly in the shared `/tmp` (or
    /// `/var/tmp`), where a tool that follows `$TMPDIR` (a compiler, a
    /// linker) writes; the run gets a private one instead of all of `/tmp`.
    PrivateTmp,
    /// Nothing, and why.
    Withheld(&'static str),
}

/// The offer for a write refused on `target` (`None`: nothing of it exists).
/// Never a protection (the paths workspace-write protects, in the home
/// directory or any project: rc files, `.git/hooks`, editor and tool
/// configs), nor a directory of the home directory holding one (`-w
/// ~/.config` would open `~/.config/autostart`), nor a single file directly
/// in the home directory, nor what [`may_propose`] forbids.
pub(crate) fn offer(target: &Path) -> Option<Offer> {
    let absolute = |name: &str| {
        std::env::var_os(name)
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
    };
    let home = absolute("HOME");
    let cache = absolute("XDG_CACHE_HOME");
    offer_in(target, home.as_deref(), cache.as_deref())
}

/// [`offer`] with the home directory `home` and the cache directory
/// `cache` (`None`: `~/.cache`).
fn offer_in(target: &Path, home: Option<&Path>, cache: Option<&Path>) -> Option<Offer> {
    if let Some(tool) = home.and_then(|h| tool_cache_of(target, h, cache)) {
        return Some(Offer::Cache(tool));
    }
    let existing = target.ancestors().find(|p| p.exists())?;
    let shared_tmp = [Path::new("/tmp"), Path::new("/var/tmp")];
    if target.parent() == Some(existing) && shared_tmp.contains(&existing) {
        return Some(Offer::PrivateTmp);
    }
    if protected(target, home) || protected(existing, home) {
        return Some(Offer::Withheld(
            "it is a protected path (a file that runs code at the next shell, login, git command or editor session), which approvals never widen",
        ));
    }
    if home.is_some_and(|h| existing.parent() == Some(h) && !existing.is_dir()) {
        return Some(Offer::Withheld(
            "it is a single file directly in the home directory",
        ));
    }
    let home_or_above = home.is_some_and(|h| h.starts_with(existing));
    Some(if may_propose(existing) && !home_or_above {
        Offer::Write(existing.to_path_buf())
    } else {
        Offer::Withheld(
            "it lies in /, a system directory, or the home directory itself or above it",
        )
    })
}

/// The tool whose own cache in `home` holds `path` (`~/.npm`,
/// `~/.cache/pip`, `~/.cargo`, `~/go/pkg/mod`, `~/.cache/go-build`,
/// `~/.cache/yarn`, `~/.cache/pnpm`, `~/.local/share/pnpm/store`,
/// `~/.cache/uv`; `$XDG_CACHE_HOME` for `~/.cache`).
fn tool_cache_of(
    path: &Path,
    home: &Path,
    cache: Option<&Path>,
) -> Option<sandbox::policy::ToolCache> {
    use sandbox::policy::ToolCache as T;
    let cache = cache.map_or_else(|| home.join(".cache"), Path::to_path_buf);
    [
        (home.join(".npm"), T::Npm),
        (cache.join("pip"), T::Pip),
        (home.join(".cargo"), T::Cargo),
        (home.join("go/pkg/mod"), T::Go),
        (cache.join("go-build"), T::Go),
        (cache.join("yarn"), T::Yarn),
        (cache.join("pnpm"), T::Pnpm),
        (home.join(".local/share/pnpm/store"), T::Pnpm),
        (cache.join("uv"), T::Uv),
    ]
    .into_iter()
    .find(|(dir, _)| path.starts_with(dir))
    .map(|(_, tool)| tool)
}

/// Whether `path` is (or lies beneath) a path workspace-write protects in
/// a project (`WORKSPACE_PROTECTED` and a git directory's hooks and config,
/// after any directory), or, in the home directory, one it protects there
/// too (`HOME_PROTECTED`) or a directory that holds one.
fn protected(path: &Path, home: Option<&Path>) -> bool {
    use sandbox::protect::{HOME_PROTECTED, WORKSPACE_PROTECTED};
    const GIT: &[&str] = &[
        ".git/hooks",
        ".git/config",
        ".git/commondir",
        ".git/config.worktree",
    ];
    let names: Vec<_> = path.components().collect();
    let in_project = (0..names.len()).any(|i| {
        let tail: PathBuf = names[i..].iter().collect();
        WORKSPACE_PROTECTED
            .iter()
            .chain(GIT)
            .any(|p| tail.starts_with(p))
    });
    let in_home = home.is_some_and(|h| match path.strip_prefix(h) {
        Ok(rel) if !rel.as_os_str().is_empty() => WORKSPACE_PROTECTED
            .iter()
            .chain(HOME_PROTECTED)
            .any(|p| rel.starts_with(p) || Path::new(p).starts_with(rel)),
        _ => false,
    });
    in_project || in_home
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_request_offers_exactly_the_rule_that_admits_it() {
        let call = |syscall: &str, reason: &str| sandbox::runner::MediatedCall {
            syscall: syscall.into(),
            target: "POST https://pkgs.example.com/upload".into(),
            reason: reason.into(),
            outside_write_paths: false,
        };
        let refused = call(
            "request",
            "no request rule admits it (to admit it: --allow-request 'POST https://pkgs.example.com/upload')",
        );
        assert_eq!(
            request_offer(&refused).unwrap().to_string(),
            "POST https://pkgs.example.com/upload"
        );
        // Its twins: refusals no rule would lift offer nothing.
        for reason in [
            "more than one Content-Length",
            "the request carries the placeholder of the secret T, which goes only to a.example.com (attempted exfiltration)",
            "the path is refused whatever the rules: the path climbs above '/' with '..'",
        ] {
            assert!(request_offer(&call("request", reason)).is_none(), "{reason}");
        }
        assert!(request_offer(&call(
            "proxy",
            "x (to admit it: --allow-request 'POST https://pkgs.example.com/upload')"
        ))
        .is_none());
    }

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

    /// A careful user's offers in a home directory: `--cache TOOL` for a
    /// tool's own cache (never `-w` on it), nothing for an rc file, a
    /// protected project path, a directory holding a protection, or a
    /// single file directly in the home directory. Twins: a directory of
    /// the home directory, and a file in a project, are offered as `-w`.
    #[test]
    fn offers_are_what_a_careful_user_would_make() {
        let t = tempfile::tempdir().unwrap();
        let home = std::fs::canonicalize(t.path()).unwrap();
        for d in [
            ".npm/_cacache",
            ".cache/pip/http",
            ".cargo/registry",
            "go/pkg/mod/x",
            ".cache/yarn/v6",
            ".config/app",
            "proj/.git/hooks",
            "proj/.vscode",
            "data",
        ] {
            std::fs::create_dir_all(home.join(d)).unwrap();
        }
        for f in [".bashrc", ".python_history", "proj/main.rs"] {
            std::fs::write(home.join(f), "").unwrap();
        }
        let at = |rel: &str| offer_in(&home.join(rel), Some(&home), None);
        use sandbox::policy::ToolCache as T;
        for (rel, tool) in [
            (".npm/_cacache/index", T::Npm),
            (".cache/pip/http/x", T::Pip),
            (".cargo/.package-cache", T::Cargo),
            (".cargo/registry/cache/y", T::Cargo),
            ("go/pkg/mod/x/y", T::Go),
            (".cache/go-build/aa/bb", T::Go),
            (".cache/yarn/v6/z", T::Yarn),
            (".cache/pnpm/metadata/x", T::Pnpm),
            (".local/share/pnpm/store/v10/files/00/x", T::Pnpm),
            (".cache/uv/wheels-v5/x", T::Uv),
        ] {
            assert_eq!(at(rel), Some(Offer::Cache(tool)), "{rel}");
        }
        for rel in [
            ".bashrc",
            ".zshrc",
            ".config/fish/config.fish",
            ".config/newapp/x",
            ".local/bin/git",
            "proj/.git/hooks/pre-commit",
            "proj/.vscode/settings.json",
            "proj/.bashrc",
            ".python_history",
        ] {
            assert!(
                matches!(at(rel), Some(Offer::Withheld(_))),
                "{rel}: {:?}",
                at(rel)
            );
        }
        // A new file directly in /tmp: a private $TMPDIR, not all of /tmp;
        // deeper, the directory as any other.
        assert_eq!(
            offer_in(
                Path::new("/tmp/sandbox-offer-test-missing"),
                Some(&home),
                None
            ),
            Some(Offer::PrivateTmp)
        );
        // A new name directly in the home directory: the home directory
        // itself would be offered, which never is.
        assert!(matches!(at(".lesshst"), Some(Offer::Withheld(_))));
        assert_eq!(
            at(".config/app/state"),
            Some(Offer::Write(home.join(".config/app")))
        );
        assert_eq!(at("data/out"), Some(Offer::Write(home.join("data"))));
        assert_eq!(
            at("proj/main.rs"),
            Some(Offer::Write(home.join("proj/main.rs")))
        );
        // $XDG_CACHE_HOME moves pip's and yarn's caches.
        let xdg = home.join("xdg");
        assert_eq!(
            offer_in(&xdg.join("pip/a"), Some(&home), Some(&xdg)),
            Some(Offer::Cache(T::Pip))
        );
    }
}
