//! Profile-text conformance legs: each axis's deny, boundary and workload
//! legs checked against the generated SBPL text, parsed with [`crate::sbpl`].
//!
//! These are [`WitnessStrength::ProfileText`]: they show the profile says the
//! right thing, not that `sandbox-exec` enforces it. The behavioral legs run
//! only on macOS (`tests/it/macos_behavior.rs`).

use std::path::Path;

use sandbox_core::axis::{LegKind, WitnessStrength};
use sandbox_core::{Axis, ExpandContext, ResolvedPolicy, SandboxPolicy};

use crate::paths::macos_canonical;
use crate::profile::{profile, ProfileInput, SeatbeltProfile};
use crate::sbpl::{
    validate, Action, Rule, Sexp, DEVICE_LITERALS, GIT_CONFIG_REGEX, GIT_HOOKS_REGEX,
    GIT_LINK_REGEX,
};

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
/// A protected name whose folder (`.claude`) need not exist.
const PROTECTED: &str = "/tmp/sandbox-conformance-protected/.claude/settings.json";
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

/// Services that reach the network on a caller's behalf; closed under
/// `network = false` after Apple's base profile (which grants trustd).
const NETWORK_SERVICES: &[&str] = &[
    "com.apple.SecurityServer",
    "com.apple.dnssd.service",
    "com.apple.networkd",
    "com.apple.nsurlsessiond",
    "com.apple.ocspd",
    "com.apple.trustd",
    "com.apple.trustd.agent",
];

/// A pathname socket `allow_unix_sockets` lists in the legs (its directory exists).
const UNIX_SOCKET: &str = "/tmp/sandbox-conformance.sock";

/// Whether `f` is `(HEAD (param "PREFIX_N"))`.
fn param_filter(f: &Sexp, head: &str, prefix: &str) -> bool {
    f.head() == Some(head)
        && matches!(f.args(), [p] if p.head() == Some("param")
            && matches!(p.args(), [Sexp::Str(n)] if n.starts_with(prefix)))
}

/// Whether `f` is `(global-name NAME)`.
fn names_service(f: &Sexp, name: &str) -> bool {
    f.head() == Some("global-name") && f.args() == [Sexp::Str(name.into())]
}

/// Rules allowing a network operation: each filter must be an IP filter from
/// `ip_ok`, a write-path subpath, an `allow_unix_sockets` parameter or
/// mDNSResponder's socket; none may be unconditional. Returns how many
/// rules admit UNIX sockets by parameter.
fn unix_sockets_confined(rules: &[Rule], ip_ok: &dyn Fn(&Sexp) -> bool) -> Result<usize, String> {
    let mut by_param = 0;
    for r in rules
        .iter()
        .filter(|r| r.action == Action::Allow && NETWORK_OPS[..3].iter().any(|op| r.has(op)))
    {
        if r.filters.is_empty() {
            return Err(format!(
                "unconditional network allow (every host UNIX socket): {r:?}"
            ));
        }
        for f in &r.filters {
            let unix_param = f.head() == Some("remote")
                && matches!(f.args(), [Sexp::Atom(kind), inner] if kind == "unix-socket"
                    && param_filter(inner, "path-literal", "UNIX_SOCKET_"));
            let ok = ip_ok(f)
                || param_filter(f, "subpath", "WRITE_PATH_")
                || unix_param
                || (f.head() == Some("literal")
                    && f.args() == [Sexp::Str("/private/var/run/mDNSResponder".into())]
                    && r.has("network-outbound")
                    && r.operations.len() == 1);
            if !ok {
                return Err(format!(
                    "network allowed by an unexpected filter {f:?} in {r:?}"
                ));
            }
            if unix_param || param_filter(f, "subpath", "WRITE_PATH_") {
                by_param += 1;
            }
        }
    }
    Ok(by_param)
}

/// `(remote ip "localhost:N")` or `(local ip "localhost:*")`.
fn loopback_filter(f: &Sexp) -> bool {
    matches!((f.head(), f.args()), (Some("remote" | "local"), [Sexp::Atom(ip), Sexp::Str(a)])
        if ip == "ip" && a.starts_with("localhost:"))
}

fn any_ip_filter(f: &Sexp) -> bool {
    matches!((f.head(), f.args()), (Some("remote" | "local"), [Sexp::Atom(ip), Sexp::Str(a)])
        if ip == "ip" && a == "*:*")
}

fn with_unix(mut p: SandboxPolicy) -> SandboxPolicy {
    p.allow_unix_sockets = vec![UNIX_SOCKET.into()];
    p
}

/// The parameter `name` holds the macOS name of `path`.
fn param_is(g: &Generated, name: &str, path: &str) -> Result<(), String> {
    let expected = expected_value(path)?;
    match g.profile.param(name) {
        Some(v) if v == expected => Ok(()),
        other => Err(format!("{name} is {other:?}, expected {expected:?}")),
    }
}

/// Mode off: no network operation allowed, the network-reaching services
/// Apple's base profile grants (trustd) closed again.
fn network_deny(gen: Gen) -> LegResult {
    let g = generate(gen, policy(false, false))?;
    if let Some(r) = g
        .rules
        .iter()
        .find(|r| r.action == Action::Allow && NETWORK_OPS.iter().any(|op| r.has(op)))
    {
        return Err(format!("network=false profile allows network: {r:?}"));
    }
    for name in NETWORK_SERVICES {
        let at = find(&g.rules, &format!("denying mach-lookup of {name}"), |r| {
            r.action == Action::Deny
                && r.has("mach-lookup")
                && r.filters.iter().any(|f| names_service(f, name))
        })?;
        if let Some(r) = g.rules[at..].iter().find(|r| {
            r.action == Action::Allow
                && r.has("mach-lookup")
                && r.filters.iter().any(|f| names_service(f, name))
        }) {
            return Err(format!("a later rule allows {name} again: {r:?}"));
        }
    }
    Ok(format!(
        "network=false: none of {} rules allows {}; (deny default) refuses them; mach-lookup of \
         {} denied after the bsd.sb import",
        g.rules.len(),
        NETWORK_OPS.join("/"),
        NETWORK_SERVICES.join(", ")
    ))
}

/// Mode off keeps socketpairs; mode allowlist: loopback only, listed ports
/// not bindable, host UNIX sockets only by parameter.
fn network_boundary(gen: Gen) -> LegResult {
    let g = generate(gen, with_unix(with_write(policy(false, false))))?;
    if let Some(r) = g
        .rules
        .iter()
        .find(|r| r.action == Action::Allow && NETWORK_OPS.iter().any(|op| r.has(op)))
    {
        return Err(format!(
            "network=false profile allows a network operation: {r:?}"
        ));
    }
    if !g.profile.text.contains("socketpair") {
        return Err("network=false profile does not state the socketpair exception".into());
    }
    let listed = SandboxPolicy {
        allow_net: vec!["127.0.0.1:8080"
            .parse()
            .map_err(|e| format!("egress rule: {e}"))?],
        ..with_unix(with_write(policy(true, false)))
    };
    let a = generate(gen, listed)?;
    let by_param = unix_sockets_confined(&a.rules, &loopback_filter)?;
    if by_param < 2 {
        return Err(format!(
            "allowlist profile admits {by_param} UNIX socket parameter(s), expected the write path and the listed socket"
        ));
    }
    param_is(&a, "UNIX_SOCKET_0", UNIX_SOCKET)?;
    find(
        &a.rules,
        "denying a bind of the listed loopback port",
        |r| {
            r.action == Action::Deny
                && r.has("network-bind")
                && r.filters.iter().any(|f| {
                    f.args() == [Sexp::Atom("ip".into()), Sexp::Str("localhost:8080".into())]
                })
        },
    )?;
    if let Some(r) = a.rules.iter().find(|r| {
        r.action == Action::Allow
            && r.filters.iter().any(|f| {
                f.args()
                    .iter()
                    .any(|x| x == &Sexp::Str("/private/var/run/mDNSResponder".into()))
            })
    }) {
        return Err(format!(
            "allowlist profile reaches mDNSResponder (DNS to anywhere): {r:?}"
        ));
    }
    Ok(
        "network=false: no rule allows a network operation, so unix socketpairs (governed by \
        none) survive and every connect/bind/listen, unix paths included, falls to (deny default); \
        allowlist: IP only to localhost ports, listed ports not bindable, host UNIX sockets only \
        beneath WRITE_PATH_* and at UNIX_SOCKET_* (path-literal), no mDNSResponder"
            .into(),
    )
}

/// Mode on: IP anywhere, host UNIX sockets only by parameter, the name and
/// TLS services.
fn network_workload(gen: Gen) -> LegResult {
    let g = generate(gen, with_unix(with_write(policy(true, false))))?;
    find(&g.rules, "allowing system-socket unconditionally", |r| {
        unconditional(r, Action::Allow, "system-socket")
    })?;
    find(&g.rules, "allowing network-outbound to any IP", |r| {
        r.action == Action::Allow
            && r.has("network-outbound")
            && r.filters.iter().any(any_ip_filter)
    })?;
    find(&g.rules, "allowing network-bind on any IP", |r| {
        r.action == Action::Allow && r.has("network-bind") && r.filters.iter().any(any_ip_filter)
    })?;
    let by_param = unix_sockets_confined(&g.rules, &any_ip_filter)?;
    if by_param < 2 {
        return Err(format!(
            "network=true admits {by_param} UNIX socket parameter(s), expected the write path and the listed socket"
        ));
    }
    param_is(&g, "UNIX_SOCKET_0", UNIX_SOCKET)?;
    find(&g.rules, "allowing the DNS configuration lookup", |r| {
        r.action == Action::Allow
            && r.has("mach-lookup")
            && r.filters
                .iter()
                .any(|f| names_service(f, "com.apple.SystemConfiguration.DNSConfiguration"))
    })?;
    let bare = generate(gen, policy(true, false))?;
    if unix_sockets_confined(&bare.rules, &any_ip_filter)? != 0 {
        return Err("network=true without write paths or sockets admits a UNIX socket".into());
    }
    Ok(
        "network=true: IP to and from any address; host UNIX sockets only beneath WRITE_PATH_* \
         and at UNIX_SOCKET_* (every other one falls to (deny default), none without write paths \
         or allow_unix_sockets); DNS/TLS service lookups"
            .into(),
    )
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
                // The run's own terminal, by parameter; never a regex over all terminals.
                (Some("literal"), [_]) => param_filter(f, "literal", "TERMINAL_"),
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
    // With a terminal: it is named by parameter, and only it.
    let tty = ProfileInput {
        terminals: vec!["/dev/ttys003".into()],
        ..ProfileInput::default()
    }
    .profile()
    .map_err(|e| e.to_string())?;
    let rules = validate(&tty.text).map_err(|e| format!("malformed profile: {e}"))?;
    find(&rules, "allowing the run's terminal by parameter", |r| {
        r.action == Action::Allow
            && r.has("file-write-data")
            && r.param_filters() == [("literal", "TERMINAL_0")]
    })?;
    if tty.param("TERMINAL_0") != Some("/dev/ttys003") {
        return Err(format!(
            "TERMINAL_0 is not the run's terminal: {:?}",
            tty.params
        ));
    }
    Ok(format!(
        "write_paths=[{WRITE_DIR}]: writes allowed only by {} filters (write-path subpaths and \
         fixed devices); the run's own terminal only as (literal (param \"TERMINAL_0\")), no \
         regex over terminals; all else falls to (deny default)",
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
    keychain_closed_under_read_denies(gen)?;
    Ok(format!(
        "read deny of {expected:?} (literal and subpath) follows the broad read allow; with read \
         denies (--secrets) com.apple.SecurityServer (the keychain) is denied, network on or off"
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
    procargs_denied(&g)?;
    Ok(
        "the read deny is limited to its parameter; every other read stays allowed; sysctl reads \
         stay allowed except kern.procargs* (other processes' arguments and environment)"
            .into(),
    )
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
    // Every ancestor inside the write path: never unlinked, never made.
    let ancestors: Vec<&str> = g
        .profile
        .params
        .iter()
        .filter(|(n, _)| n.starts_with("DENY_ANCESTOR_"))
        .map(|(n, _)| n.as_str())
        .collect();
    if ancestors.len() < 3 {
        return Err(format!(
            "expected the write path, its subdirectory and .claude as ancestors: {:?}",
            g.profile.params
        ));
    }
    for name in &ancestors {
        find(
            &g.rules,
            &format!("denying unlink and creation of {name}"),
            |r| {
                r.action == Action::Deny
                    && r.has("file-write-unlink")
                    && r.has("file-write-create")
                    && r.param_filters().contains(&("literal", name))
            },
        )?;
    }
    Ok(format!(
        "write deny of {expected:?} (literal and subpath, so first-time creation too) follows \
         the write allow; its {} ancestors inside the write path (.claude included, existing or \
         not) are never unlinked, and never made (no symlink, no directory renamed into place)",
        ancestors.len()
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
    git_dirs(gen)?;
    Ok(
        "the write deny is limited to its parameter; the rest of the write path stays writable; \
         protect_git_dirs: config/config.worktree/commondir/hooks of any git directory beneath \
         each write path (existing or not, nested too) denied as (require-all (subpath (param \
         WRITE_PATH_N)) (regex ...)), .git files/symlinks not made; without it no regex"
            .into(),
    )
}

/// Git directories under `protect_git_dirs`: every regex rule is a deny
/// scoped to a write-path parameter by `require-all`.
fn git_dirs(gen: Gen) -> Result<(), String> {
    let mut p = with_write(policy(false, false));
    p.protect_git_dirs = true;
    let g = generate(gen, p)?;
    let scoped = |f: &Sexp, re: &str| {
        f.head() == Some("require-all")
            && f.args()
                .iter()
                .any(|x| param_filter(x, "subpath", "WRITE_PATH_0"))
            && f.args()
                .iter()
                .any(|x| x.head() == Some("regex") && x.args() == [Sexp::Regex(re.into())])
    };
    for re in [GIT_CONFIG_REGEX, GIT_HOOKS_REGEX] {
        find(
            &g.rules,
            &format!("denying writes matching {re} beneath WRITE_PATH_0"),
            |r| {
                r.action == Action::Deny
                    && r.has("file-write*")
                    && r.filters.iter().any(|f| scoped(f, re))
            },
        )?;
    }
    find(
        &g.rules,
        "denying a .git file or symlink beneath WRITE_PATH_0",
        |r| {
            r.action == Action::Deny
                && r.has("file-write-create")
                && r.filters.iter().any(|f| scoped(f, GIT_LINK_REGEX))
        },
    )?;
    for r in &g.rules {
        for f in &r.filters {
            let has_regex =
                f.head() == Some("regex") || f.args().iter().any(|x| x.head() == Some("regex"));
            if has_regex
                && (r.action != Action::Deny
                    || !f
                        .args()
                        .iter()
                        .any(|x| param_filter(x, "subpath", "WRITE_PATH_")))
            {
                return Err(format!(
                    "a regex not scoped to a write path by a deny: {r:?}"
                ));
            }
        }
    }
    let plain = generate(gen, with_write(policy(false, false)))?;
    if plain.profile.text.contains("(regex") {
        return Err("a profile without protect_git_dirs has a regex".into());
    }
    Ok(())
}

/// Process arguments (`kern.procargs*`) are not readable through sysctl.
fn procargs_denied(g: &Generated) -> Result<(), String> {
    let allow = find(&g.rules, "allowing sysctl-read", |r| {
        r.action == Action::Allow && r.has("sysctl-read")
    })?;
    let deny = find(&g.rules, "denying sysctl-read of kern.procargs*", |r| {
        r.action == Action::Deny
            && r.has("sysctl-read")
            && r.filters.iter().any(|f| {
                f.head() == Some("sysctl-name-prefix")
                    && f.args() == [Sexp::Str("kern.procargs".into())]
            })
    })?;
    if deny < allow {
        return Err("the kern.procargs deny precedes the sysctl-read allow".into());
    }
    if let Some(r) = g.rules[deny..]
        .iter()
        .find(|r| r.action == Action::Allow && r.has("sysctl-read"))
    {
        return Err(format!("a later rule allows sysctl reads again: {r:?}"));
    }
    Ok(())
}

/// With the network on, the keychain service only without read denies.
fn keychain_closed_under_read_denies(gen: Gen) -> Result<(), String> {
    let allows = |g: &Generated| {
        g.rules.iter().any(|r| {
            r.action == Action::Allow
                && r.has("mach-lookup")
                && r.filters
                    .iter()
                    .any(|f| names_service(f, "com.apple.SecurityServer"))
        })
    };
    let denied = generate(
        gen,
        SandboxPolicy {
            read_deny_paths: vec![SECRET.into()],
            ..policy(true, false)
        },
    )?;
    if allows(&denied) {
        return Err("read denies with the network on still reach com.apple.SecurityServer".into());
    }
    find(&denied.rules, "denying com.apple.SecurityServer", |r| {
        r.action == Action::Deny
            && r.has("mach-lookup")
            && r.filters
                .iter()
                .any(|f| names_service(f, "com.apple.SecurityServer"))
    })?;
    if !allows(&generate(gen, policy(true, false))?) {
        return Err("network on without read denies does not reach the keychain service".into());
    }
    Ok(())
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
            (
                Axis::Network,
                LegKind::Boundary,
                "(allow network-outbound (remote unix-socket))\n",
            ),
            (Axis::Network, LegKind::Workload, "(allow network-outbound)\n"),
            (
                Axis::Network,
                LegKind::Workload,
                "(allow network-outbound (subpath (param \"READ_DENY_PATH_0\")))\n",
            ),
            (
                Axis::Network,
                LegKind::Deny,
                "(allow mach-lookup (global-name \"com.apple.trustd\"))\n",
            ),
            (
                Axis::Write,
                LegKind::Deny,
                "(allow file-write-data (regex #\"^/dev/ttys[0-9]+$\"))\n",
            ),
            (
                Axis::WriteDeny,
                LegKind::Boundary,
                "(allow file-write* (require-all (subpath (param \"WRITE_PATH_0\")) (regex #\"/[.]git$\")))\n",
            ),
            (Axis::ReadDeny, LegKind::Boundary, "(allow sysctl-read)\n"),
            (
                Axis::ReadDeny,
                LegKind::Deny,
                "(allow mach-lookup (global-name \"com.apple.SecurityServer\"))\n",
            ),
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
        let replace = |from: &'static str, to: &'static str| {
            move |policy: &ResolvedPolicy| {
                let mut p = profile(policy).map_err(|e| e.to_string())?;
                p.text = p.text.replace(from, to);
                Ok(p)
            }
        };
        let strip = |from: &'static str| replace(from, "");
        assert!(
            leg_with(
                Axis::WriteDeny,
                LegKind::Deny,
                &replace(
                    "deny file-write-unlink file-write-create",
                    "deny file-write-unlink"
                )
            )
            .is_err(),
            "write_deny deny passed with ancestors that can be made"
        );
        for (axis, leg, from) in [
            (Axis::Spawn, LegKind::Boundary, "(allow process-exec*)"),
            (Axis::Spawn, LegKind::Workload, "(allow process-fork)"),
            (Axis::Network, LegKind::Workload, "(allow system-socket)"),
            (Axis::ReadDeny, LegKind::Deny, "(allow file-read*)"),
            (
                Axis::ReadDeny,
                LegKind::Boundary,
                "(deny sysctl-read (sysctl-name-prefix \"kern.procargs\"))",
            ),
            (Axis::Network, LegKind::Deny, "(global-name \"com.apple.trustd\")"),
            (
                Axis::Network,
                LegKind::Boundary,
                "(deny network-bind\n  (local ip \"localhost:8080\"))",
            ),
            (
                Axis::WriteDeny,
                LegKind::Boundary,
                "(require-all (subpath (param \"WRITE_PATH_0\")) (regex #\"/[.]git/(.+/)?hooks(/|$)\"))",
            ),
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
