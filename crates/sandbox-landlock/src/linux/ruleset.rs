//! The kernel ruleset, created in the parent from a [`Plan`].

use std::os::fd::OwnedFd;

use landlock::{
    AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr, Scope, ABI,
};
use sandbox_core::ResolvedPolicy;

use super::rules::Plan;
use crate::LandlockError;

/// What the ruleset restricts besides the filesystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Extras {
    /// `CONNECT_TCP` handled with no rule (network false, ABI >= 4).
    pub connect_tcp: bool,
    /// Signals scoped to the sandbox (ABI >= 6).
    pub signal_scope: bool,
    /// Abstract unix sockets scoped to the sandbox (network false, ABI >= 6).
    pub abstract_unix_scope: bool,
}

impl Extras {
    pub(crate) fn for_policy(policy: &ResolvedPolicy, abi: ABI) -> Self {
        let no_net = super::weaken::network_ruleset(!policy.network());
        Self {
            connect_tcp: no_net && abi >= ABI::V4,
            signal_scope: abi >= ABI::V6,
            abstract_unix_scope: no_net && abi >= ABI::V6,
        }
    }
}

/// Creates the ruleset and adds every rule of `plan`; returns its fd.
///
/// Rights are chosen from the detected ABI, so the ruleset is built with
/// `CompatLevel::HardRequirement`: anything the kernel would silently drop is
/// an error instead.
pub(crate) fn build(plan: &Plan, extras: Extras) -> Result<OwnedFd, LandlockError> {
    let err = |attempted: String| {
        move |e: landlock::RulesetError| LandlockError::Ruleset {
            attempted,
            source: Box::new(e),
        }
    };
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(plan.handled)
        .map_err(err("handling the filesystem rights".into()))?;
    if extras.connect_tcp {
        ruleset = ruleset
            .handle_access(AccessNet::ConnectTcp)
            .map_err(err("handling CONNECT_TCP".into()))?;
    }
    if extras.signal_scope {
        ruleset = ruleset
            .scope(Scope::Signal)
            .map_err(err("scoping signals".into()))?;
    }
    if extras.abstract_unix_scope {
        ruleset = ruleset
            .scope(Scope::AbstractUnixSocket)
            .map_err(err("scoping abstract unix sockets".into()))?;
    }
    let mut created = ruleset
        .create()
        .map_err(err("creating the ruleset".into()))?;
    for rule in &plan.rules {
        if rule.optional {
            // `add_rule` consumes the ruleset: an optional rule is tried on
            // a throwaway one first and left out if refused
            // (`Rule::optional`).
            if !accepts(&rule.fd) {
                continue;
            }
        }
        created = created
            .add_rule(PathBeneath::new(&rule.fd, rule.access))
            .map_err(err(format!(
                "adding the rule for {} ({:?})",
                rule.path.display(),
                rule.access
            )))?;
    }
    if super::weaken::WRITE_EVERYWHERE {
        let write = plan.handled & !(AccessFs::Execute | AccessFs::ReadFile | AccessFs::ReadDir);
        let root = PathFd::new("/").map_err(|e| LandlockError::Ruleset {
            attempted: "opening / for the weaken-write rule".into(),
            source: Box::new(e),
        })?;
        created = created
            .add_rule(PathBeneath::new(root, write))
            .map_err(err("adding the weaken-write rule on /".into()))?;
    }
    let fd: Option<OwnedFd> = created.into();
    fd.ok_or_else(|| LandlockError::Unsupported {
        reason: "the landlock crate created no ruleset fd".into(),
    })
}

/// A ruleset that handles no access and scopes signals only (ABI >= 6;
/// `None` below): a domain nested with it changes nothing a process may do
/// but whom it may signal, so a spawner's child cannot signal the spawner
/// (Documentation/userspace-api/landlock.rst, "Scoped access": a scoped
/// domain reaches only processes in the same or a nested domain).
pub(crate) fn signal_scope_only(abi: ABI) -> Result<Option<OwnedFd>, LandlockError> {
    if abi < ABI::V6 {
        return Ok(None);
    }
    let err = |attempted: &str| {
        let attempted = attempted.to_owned();
        move |e: landlock::RulesetError| LandlockError::Ruleset {
            attempted,
            source: Box::new(e),
        }
    };
    let created = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .scope(Scope::Signal)
        .map_err(err("scoping signals for the spawner's children"))?
        .create()
        .map_err(err("creating the spawner's child ruleset"))?;
    let fd: Option<OwnedFd> = created.into();
    fd.map(Some).ok_or_else(|| LandlockError::Unsupported {
        reason: "the landlock crate created no ruleset fd".into(),
    })
}

/// Whether the kernel takes `fd` as a path-beneath rule's object: added to
/// a throwaway ruleset handling only WRITE_FILE (a file object, as the
/// standard fds' rules are).
fn accepts(fd: &OwnedFd) -> bool {
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::WriteFile)
        .and_then(|r| r.create())
        .and_then(|r| r.add_rule(PathBeneath::new(fd, AccessFs::WriteFile)))
        .is_ok()
}
