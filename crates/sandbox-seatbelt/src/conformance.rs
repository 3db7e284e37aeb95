//! Profile-text conformance legs: each axis's deny, boundary and workload
//! legs checked against the generated SBPL text, parsed with [`crate::sbpl`].
//!
//! These are [`WitnessStrength::ProfileText`]: they show the profile says the
//! right thing, not that `sandbox-exec` enforces it. The behavioral legs run
//! only on macOS (`tests/macos_behavior.rs`).

use std::path::Path;

use sandbox_core::axis::{LegKind, WitnessStrength};
use sandbox_core::{Axis, ExpandContext, ResolvedPolicy, SandboxPolicy};

use crate::paths::macos_canonical;
use crate::profile::{profile, SeatbeltProfile};
use crate::sbpl::{validate, Action, Rule, Sexp, DEVICE_LITERALS};

/// The strength of every leg in this module.
pub const WITNESS: WitnessStrength = WitnessStrength::ProfileText;

/// The axes with profile-text legs.
pub const PROFILE_TEXT_AXES: &[Axis] = &[
    Axis::Network,
    Axis::Write,
    Axis::Spawn,
    Axis::ReadDeny,
    Axis::WriteDeny,
];

/// Evidence of a passed leg (`Ok`) or the reason it failed (`Err`).
pub type LegResult = Result<String, String>;

/// Operations that give network access.
const NETWORK_OPS: &[&str] = &[
    "network-bind",
    "network-inbound",
    "network-outbound",
    "system-socket",
];

/// Existing on every macOS and Linux host; `/private/tmp` on macOS.
const WRITE_DIR: &str = "/tmp";
const PROTECTED: &str = "/tmp/sandbox-conformance-protected";
const SECRET: &str = "/tmp/sandbox-conformance-secret";

/// Runs leg `leg` of `axis` against generated profile text.
///
/// Evidence starts with `profile-text:` (see [`WITNESS`]). An axis outside
/// [`PROFILE_TEXT_AXES`] is an `Err`, never a pass.
pub fn profile_text_leg(axis: Axis, leg: LegKind) -> LegResult {
    leg_with(axis, leg, &|policy| {
        profile(policy).map_err(|e| e.to_string())
    })
    .map(|evidence| format!("profile-text: {evidence}"))
}

/// Turns a resolved policy into a profile; tests substitute broken generators.
type Gen<'a> = &'a dyn Fn(&ResolvedPolicy) -> Result<SeatbeltProfile, String>;

fn leg_with(axis: Axis, leg: LegKind, gen: Gen) -> LegResult {
    match (axis, leg) {
        (Axis::Network, LegKind::Deny) => network_deny(gen),
        (Axis::Network, LegKind::Boundary) => network_boundary(gen),
        (Axis::Network, LegKind::Workload) => network_workload(gen),
        (Axis::Write, LegKind::Deny) => write_deny_outside(gen),
        (Axis::Write, LegKind::Boundary) => write_boundary(gen),
        (Axis::Write, LegKind::Workload) => write_workload(gen, with_write(policy(false, false))),
        (Axis::WriteDeny, LegKind::Workload) => write_workload(gen, write_deny_policy()),
        (Axis::Spawn, LegKind::Deny) => spawn_deny(gen),
        (Axis::Spawn, LegKind::Boundary) => spawn_boundary(gen),
        (Axis::Spawn, LegKind::Workload) => spawn_workload(gen),
        (Axis::ReadDeny, LegKind::Deny) => read_deny_deny(gen),
        (Axis::ReadDeny, LegKind::Boundary) => read_deny_boundary(gen),
        (Axis::ReadDeny, LegKind::Workload) => read_deny_workload(gen),
        (Axis::WriteDeny, LegKind::Deny) => write_deny_deny(gen),
        (Axis::WriteDeny, LegKind::Boundary) => write_deny_boundary(gen),
        (axis, _) => Err(format!(
            "seatbelt has no profile-text leg for axis `{axis}` (it is enforced by the runner)"
        )),
    }
}

/// Every leg of every axis in [`PROFILE_TEXT_AXES`], in order.
pub fn run_all() -> Vec<(Axis, LegKind, LegResult)> {
    PROFILE_TEXT_AXES
        .iter()
        .flat_map(|&axis| LegKind::ALL.map(|leg| (axis, leg, profile_text_leg(axis, leg))))
        .collect()
}

/// A profile generated from a real resolved policy, and its checked rules.
struct Generated {
    profile: SeatbeltProfile,
    rules: Vec<Rule>,
}

fn generate(gen: Gen, policy: SandboxPolicy) -> Result<Generated, String> {
    let resolved = policy
        .resolve(&ExpandContext::default())
        .map_err(|e| format!("cannot resolve the leg's policy: {e}"))?;
    let profile = gen(&resolved)?;
    let rules = validate(&profile.text).map_err(|e| format!("malformed profile: {e}"))?;
    if let Some(r) = rules
        .iter()
        .find(|r| r.action == Action::Allow && r.has("default"))
    {
        return Err(format!("the profile allows by default: {r:?}"));
    }
    Ok(Generated { profile, rules })
}

fn policy(network: bool, deny_subprocess: bool) -> SandboxPolicy {
    SandboxPolicy {
        network,
        deny_subprocess,
        ..SandboxPolicy::default()
    }
}

fn with_write(mut p: SandboxPolicy) -> SandboxPolicy {
    p.write_paths = vec![WRITE_DIR.into()];
    p
}

/// The macOS name of `path` after the host canonicalised it.
fn expected_value(path: &str) -> Result<String, String> {
    let base = std::fs::canonicalize(WRITE_DIR)
        .map_err(|e| format!("cannot canonicalise {WRITE_DIR}: {e}"))?;
    let host = match Path::new(path).strip_prefix(WRITE_DIR) {
        Ok(rest) if !rest.as_os_str().is_empty() => base.join(rest),
        _ => base,
    };
    Ok(macos_canonical(&host).to_string_lossy().into_owned())
}

/// Index of the first rule matching `pred`, or an error naming `what`.
fn find(rules: &[Rule], what: &str, pred: impl Fn(&Rule) -> bool) -> Result<usize, String> {
    rules
        .iter()
        .position(pred)
        .ok_or_else(|| format!("no rule {what}"))
}

fn unconditional(rule: &Rule, action: Action, op: &str) -> bool {
    rule.action == action && rule.has(op) && rule.filters.is_empty()
}

/// The rule has exactly `literal` and `subpath` filters on parameter `name`.
fn literal_and_subpath(rule: &Rule, name: &str) -> bool {
    let filters = rule.param_filters();
    filters.len() == rule.filters.len()
        && filters.contains(&("literal", name))
        && filters.contains(&("subpath", name))
}

fn network_deny(gen: Gen) -> LegResult {
    let g = generate(gen, policy(false, false))?;
    if let Some(r) = g
        .rules
        .iter()
        .find(|r| r.action == Action::Allow && NETWORK_OPS.iter().any(|op| r.has(op)))
    {
        return Err(format!("network=false profile allows network: {r:?}"));
    }
    Ok(format!(
        "network=false: none of {} rules allows {}; (deny default) refuses them",
        g.rules.len(),
        NETWORK_OPS.join("/")
    ))
}

fn network_boundary(gen: Gen) -> LegResult {
    let g = generate(gen, policy(false, false))?;
    if let Some(r) = g
        .rules
        .iter()
        .find(|r| NETWORK_OPS.iter().any(|op| r.has(op)))
    {
        return Err(format!(
            "network=false profile has a network rule beyond (deny default): {r:?}"
        ));
    }
    if !g.profile.text.contains("socketpair") {
        return Err("network=false profile does not state the socketpair exception".into());
    }
    Ok(
        "network=false: no rule names a network operation, so unix socketpairs (governed by \
        none) survive and every connect/bind/listen, unix paths included, falls to (deny default)"
            .into(),
    )
}

fn network_workload(gen: Gen) -> LegResult {
    let g = generate(gen, policy(true, false))?;
    for op in NETWORK_OPS {
        find(&g.rules, &format!("allowing {op} unconditionally"), |r| {
            unconditional(r, Action::Allow, op)
        })?;
    }
    find(&g.rules, "allowing the DNS configuration lookup", |r| {
        r.action == Action::Allow
            && r.has("mach-lookup")
            && r.filters.iter().any(|f| {
                f.args()
                    == [Sexp::Str(
                        "com.apple.SystemConfiguration.DNSConfiguration".into(),
                    )]
            })
    })?;
    Ok(format!(
        "network=true: {} allowed unconditionally, with the DNS/TLS service lookups",
        NETWORK_OPS.join("/")
    ))
}

/// Write-granting rules: every filter must be a write-path subpath or a device.
fn write_deny_outside(gen: Gen) -> LegResult {
    let g = generate(gen, with_write(policy(false, false)))?;
    let mut granted = Vec::new();
    for r in g.rules.iter().filter(|r| {
        r.action == Action::Allow && r.operations.iter().any(|o| o.starts_with("file-write"))
    }) {
        if r.filters.is_empty() {
            return Err(format!("unconditional write allow: {r:?}"));
        }
        for f in &r.filters {
            let ok = match (f.head(), f.args()) {
                (Some("subpath"), [p]) if p.head() == Some("param") => {
                    matches!(p.args(), [Sexp::Str(n)] if n.starts_with("WRITE_PATH_"))
                }
                (Some("literal"), [Sexp::Str(s)]) => DEVICE_LITERALS.contains(&s.as_str()),
                (Some("regex"), [Sexp::Regex(_)]) => true,
                _ => false,
            };
            if !ok {
                return Err(format!(
                    "write allowed by an unexpected filter {f:?} in {r:?}"
                ));
            }
            granted.push(f.clone());
        }
    }
    Ok(format!(
        "write_paths=[{WRITE_DIR}]: writes allowed only by {} filters (write-path subpaths and \
         fixed devices); all else falls to (deny default)",
        granted.len()
    ))
}

fn write_boundary(gen: Gen) -> LegResult {
    let g = generate(gen, with_write(policy(false, false)))?;
    let expected = expected_value(WRITE_DIR)?;
    match g.profile.param("WRITE_PATH_0") {
        Some(v) if v == expected => {}
        other => return Err(format!("WRITE_PATH_0 is {other:?}, expected {expected:?}")),
    }
    find(&g.rules, "allowing writes to /dev/null", |r| {
        r.action == Action::Allow
            && r.has("file-write-data")
            && r.filters
                .iter()
                .any(|f| f.args() == [Sexp::Str("/dev/null".into())])
    })?;
    let ro = generate(gen, policy(false, false))?;
    if !ro.profile.params.is_empty() {
        return Err(format!(
            "read-only profile has parameters {:?}",
            ro.profile.params
        ));
    }
    Ok(format!(
        "write path passed as its macOS name {expected:?} and matched by subpath (whole \
         components); /dev/null stays writable; a read-only policy has no write parameter"
    ))
}

/// Writes beneath the write path stay allowed; for `write_deny`, next to the
/// denied path (a later deny may only name write-deny parameters).
fn write_workload(gen: Gen, policy: SandboxPolicy) -> LegResult {
    let g = generate(gen, policy)?;
    let at = find(&g.rules, "allowing file-write* beneath WRITE_PATH_0", |r| {
        r.action == Action::Allow
            && r.has("file-write*")
            && r.param_filters().contains(&("subpath", "WRITE_PATH_0"))
    })?;
    let later_denies: Vec<&Rule> = g.rules[at..]
        .iter()
        .filter(|r| r.action == Action::Deny && r.has("file-write*"))
        .collect();
    for r in &later_denies {
        let params = r.param_filters();
        if params.is_empty()
            || params.len() != r.filters.len()
            || params
                .iter()
                .any(|(_, n)| !n.starts_with("WRITE_DENY_PATH_"))
        {
            return Err(format!(
                "a later rule denies more than the write-deny paths: {r:?}"
            ));
        }
    }
    Ok(format!(
        "(allow file-write* (subpath (param \"WRITE_PATH_0\"))); {} later deny rule(s), \
         limited to write-deny parameters",
        later_denies.len()
    ))
}

fn spawn_deny(gen: Gen) -> LegResult {
    let g = generate(gen, policy(true, true))?;
    if let Some(r) = g
        .rules
        .iter()
        .find(|r| r.action == Action::Allow && r.has("process-fork"))
    {
        return Err(format!(
            "deny_subprocess profile allows process-fork: {r:?}"
        ));
    }
    Ok("deny_subprocess: no rule allows process-fork; (deny default) refuses it".into())
}

fn spawn_boundary(gen: Gen) -> LegResult {
    let g = generate(gen, policy(true, true))?;
    find(&g.rules, "allowing process-exec* unconditionally", |r| {
        unconditional(r, Action::Allow, "process-exec*")
    })?;
    Ok(
        "deny_subprocess: (allow process-exec*) keeps the command's own exec (non-forking control)"
            .into(),
    )
}

fn spawn_workload(gen: Gen) -> LegResult {
    let g = generate(gen, policy(true, false))?;
    find(&g.rules, "allowing process-fork unconditionally", |r| {
        unconditional(r, Action::Allow, "process-fork")
    })?;
    Ok("subprocesses allowed: (allow process-fork)".into())
}

fn read_deny_policy() -> SandboxPolicy {
    SandboxPolicy {
        read_deny_paths: vec![SECRET.into()],
        ..policy(false, false)
    }
}

fn read_deny_deny(gen: Gen) -> LegResult {
    let g = generate(gen, read_deny_policy())?;
    let allow = find(&g.rules, "allowing file-read* broadly", |r| {
        unconditional(r, Action::Allow, "file-read*")
    })?;
    let deny = find(&g.rules, "denying file-read* on READ_DENY_PATH_0", |r| {
        r.action == Action::Deny
            && r.has("file-read*")
            && literal_and_subpath(r, "READ_DENY_PATH_0")
    })?;
    if deny < allow {
        return Err("the read deny precedes the broad read allow, which would override it".into());
    }
    if let Some(r) = g.rules[deny..]
        .iter()
        .find(|r| r.action == Action::Allow && r.has("file-read*"))
    {
        return Err(format!("a later rule allows reads again: {r:?}"));
    }
    let expected = expected_value(SECRET)?;
    if g.profile.param("READ_DENY_PATH_0") != Some(expected.as_str()) {
        return Err(format!(
            "READ_DENY_PATH_0 is not {expected:?}: {:?}",
            g.profile.params
        ));
    }
    Ok(format!(
        "read deny of {expected:?} (literal and subpath) follows the broad read allow"
    ))
}

fn read_deny_boundary(gen: Gen) -> LegResult {
    let g = generate(gen, read_deny_policy())?;
    if let Some(r) = g
        .rules
        .iter()
        .find(|r| r.action == Action::Deny && r.has("file-read*") && r.filters.is_empty())
    {
        return Err(format!("unconditional read deny: {r:?}"));
    }
    find(&g.rules, "allowing file-read* broadly", |r| {
        unconditional(r, Action::Allow, "file-read*")
    })?;
    Ok("the read deny is limited to its parameter; every other read stays allowed".into())
}

fn read_deny_workload(gen: Gen) -> LegResult {
    let g = generate(gen, policy(false, false))?;
    find(&g.rules, "allowing file-read* broadly", |r| {
        unconditional(r, Action::Allow, "file-read*")
    })?;
    if let Some(r) = g
        .rules
        .iter()
        .find(|r| r.action == Action::Deny && r.has("file-read*"))
    {
        return Err(format!("a policy without read denies denies reads: {r:?}"));
    }
    Ok("no read_deny_paths: (allow file-read*) and no read deny".into())
}

fn write_deny_policy() -> SandboxPolicy {
    SandboxPolicy {
        write_deny_paths: vec![PROTECTED.into()],
        ..with_write(policy(false, false))
    }
}

fn write_deny_deny(gen: Gen) -> LegResult {
    let g = generate(gen, write_deny_policy())?;
    let allow = find(&g.rules, "allowing writes beneath WRITE_PATH_0", |r| {
        r.action == Action::Allow && r.param_filters().contains(&("subpath", "WRITE_PATH_0"))
    })?;
    let deny = find(&g.rules, "denying file-write* on WRITE_DENY_PATH_0", |r| {
        r.action == Action::Deny
            && r.has("file-write*")
            && literal_and_subpath(r, "WRITE_DENY_PATH_0")
    })?;
    if deny < allow {
        return Err("the write deny precedes the write allow, which would override it".into());
    }
    if let Some(r) = g.rules[deny..]
        .iter()
        .find(|r| r.action == Action::Allow && r.has("file-write*"))
    {
        return Err(format!("a later rule allows writes again: {r:?}"));
    }
    let expected = expected_value(PROTECTED)?;
    if g.profile.param("WRITE_DENY_PATH_0") != Some(expected.as_str()) {
        return Err(format!(
            "WRITE_DENY_PATH_0 is not {expected:?}: {:?}",
            g.profile.params
        ));
    }
    Ok(format!(
        "write deny of {expected:?} (literal and subpath, so first-time creation too) follows \
         the write allow"
    ))
}

fn write_deny_boundary(gen: Gen) -> LegResult {
    let g = generate(gen, write_deny_policy())?;
    if let Some(r) = g
        .rules
        .iter()
        .find(|r| r.action == Action::Deny && r.has("file-write*") && r.filters.is_empty())
    {
        return Err(format!("unconditional write deny: {r:?}"));
    }
    find(&g.rules, "allowing writes beneath WRITE_PATH_0", |r| {
        r.action == Action::Allow && r.param_filters().contains(&("subpath", "WRITE_PATH_0"))
    })?;
    Ok(
        "the write deny is limited to its parameter; the rest of the write path stays writable"
            .into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_leg_passes_with_evidence() {
        let results = run_all();
        assert_eq!(results.len(), PROFILE_TEXT_AXES.len() * 3);
        for (axis, leg, result) in results {
            let evidence = result.unwrap_or_else(|e| panic!("{axis} {}: {e}", leg.as_str()));
            assert!(evidence.starts_with("profile-text: "), "{evidence}");
            println!("{:<10} {:<8} {evidence}", axis.as_str(), leg.as_str());
        }
    }

    /// A generator that appends `extra` to the text of a correct profile.
    fn broken(extra: &'static str) -> impl Fn(&ResolvedPolicy) -> Result<SeatbeltProfile, String> {
        move |policy| {
            let mut p = profile(policy).map_err(|e| e.to_string())?;
            p.text.push_str(extra);
            Ok(p)
        }
    }

    /// Each leg fails when the profile it checks is wrong in the way it guards against.
    #[test]
    fn legs_fail_on_broken_profiles() {
        let cases: &[(Axis, LegKind, &'static str)] = &[
            (Axis::Network, LegKind::Deny, "(allow network-outbound)\n"),
            (Axis::Network, LegKind::Boundary, "(deny network-bind)\n"),
            (Axis::Write, LegKind::Deny, "(allow file-write*)\n"),
            (
                Axis::Write,
                LegKind::Deny,
                "(allow file-write-data (literal \"/dev/x\"))\n",
            ),
            (Axis::Write, LegKind::Workload, "(deny file-write*)\n"),
            (
                Axis::WriteDeny,
                LegKind::Workload,
                "(deny file-write* (subpath (param \"WRITE_PATH_0\")))\n",
            ),
            (Axis::Spawn, LegKind::Deny, "(allow process-fork)\n"),
            (Axis::ReadDeny, LegKind::Deny, "(allow file-read*)\n"),
            (Axis::ReadDeny, LegKind::Boundary, "(deny file-read*)\n"),
            (
                Axis::ReadDeny,
                LegKind::Workload,
                "(deny file-read* (subpath (param \"READ_DENY_PATH_0\")))\n",
            ),
            (Axis::WriteDeny, LegKind::Deny, "(allow file-write*)\n"),
            (Axis::WriteDeny, LegKind::Boundary, "(deny file-write*)\n"),
            (Axis::Network, LegKind::Deny, "(allow default)\n"),
            (
                Axis::Spawn,
                LegKind::Deny,
                "(allow file-read* (subpath \"/etc\"))\n",
            ),
            (Axis::Spawn, LegKind::Deny, "(allow file-read*\n"),
        ];
        for (axis, leg, extra) in cases {
            let gen = broken(extra);
            assert!(
                leg_with(*axis, *leg, &gen).is_err(),
                "{axis} {} passed with {extra:?}",
                leg.as_str()
            );
        }
        // Legs that need a rule fail when it is missing.
        let strip = |from: &'static str| {
            move |policy: &ResolvedPolicy| {
                let mut p = profile(policy).map_err(|e| e.to_string())?;
                p.text = p.text.replace(from, "");
                Ok(p)
            }
        };
        for (axis, leg, from) in [
            (Axis::Spawn, LegKind::Boundary, "(allow process-exec*)"),
            (Axis::Spawn, LegKind::Workload, "(allow process-fork)"),
            (Axis::Network, LegKind::Workload, "(allow system-socket)"),
            (Axis::ReadDeny, LegKind::Deny, "(allow file-read*)"),
        ] {
            assert!(
                leg_with(axis, leg, &strip(from)).is_err(),
                "{axis} {} passed without {from}",
                leg.as_str()
            );
        }
    }

    #[test]
    fn runner_axes_are_not_passed() {
        assert!(profile_text_leg(Axis::Env, LegKind::Deny).is_err());
        assert!(profile_text_leg(Axis::Timeout, LegKind::Workload).is_err());
    }
}
