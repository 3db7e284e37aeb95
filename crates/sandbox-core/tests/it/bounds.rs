//! For any operator policy and op, the effective policy never grants more than
//! the operator's (network, writes, subprocesses, timeout, env, deny lists).

use std::ffi::OsString;
use std::path::PathBuf;

use proptest::prelude::*;
use sandbox_core::{ExpandContext, PolicyError, SandboxPolicy, SandboxedExecOp};

const DIRS: &[&str] = &["a", "a/x", "a/y", "b", "b/x", "c"];
const NAMES: &[&str] = &["HOME", "TOKEN", "AWS_KEY", "LANG"];

fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for d in DIRS {
        std::fs::create_dir_all(dir.path().join(d)).unwrap();
    }
    dir
}

fn pick<'a>(mask: u8, from: &'a [&'a str]) -> impl Iterator<Item = &'a str> {
    from.iter()
        .enumerate()
        .filter(move |(i, _)| mask & (1 << i) != 0)
        .map(|(_, s)| *s)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]
    #[test]
    fn effective_never_exceeds_operator(
        op_net in any::<bool>(), op_sub in any::<bool>(), op_env in any::<u8>(), op_writes in any::<u8>(),
        op_timeout in 1u64..1000, op_max in 1u64..1000, op_deny in any::<u8>(),
        req_net in any::<bool>(), req_sub in any::<bool>(), req_env in proptest::option::of(any::<u8>()),
        req_writes in any::<u8>(), req_timeout in proptest::option::of(1u64..1200),
    ) {
        let dir = tree();
        let root = dir.path().to_str().unwrap().to_owned();
        let abs = |rel: &str| format!("{root}/{rel}");
        let operator = SandboxPolicy {
            network: op_net,
            allow_net: vec![],
            requests: vec![],
            write_paths: pick(op_writes, DIRS).map(abs).collect(),
            read_deny_paths: pick(op_deny, DIRS).map(abs).collect(),
            write_deny_paths: pick(op_deny >> 3, DIRS).map(abs).collect(),
            deny_subprocess: op_sub,
            env_deny_names: pick(op_env, NAMES).map(str::to_owned).collect(),
            timeout_seconds: op_timeout.min(op_max),
            max_timeout_seconds: op_max,
            allow_unix_sockets: vec![],
            protect_git_dirs: false,
            private_shm: true,
        };
        let op = SandboxedExecOp {
            argv: vec!["/bin/true".into()],
            network: req_net,
            allow_subprocess: req_sub,
            env_passthrough: req_env.map(|m| pick(m, NAMES).map(str::to_owned).collect()),
            read_paths: vec![],
            write_paths: pick(req_writes, DIRS).map(abs).collect(),
            timeout_seconds: req_timeout,
        };
        let env: Vec<OsString> = NAMES.iter().map(OsString::from).collect();
        let ctx = ExpandContext::default();
        let op_resolved = match operator.resolve(&ctx) {
            Ok(p) => p,
            // An operator write path inside its own read denial is refused.
            Err(PolicyError::WriteInsideReadDeny { write, deny }) => {
                prop_assert!(write.starts_with(&deny));
                return Ok(());
            }
            Err(other) => panic!("the operator policy does not resolve: {other}"),
        };
        match op.effective_policy(Some(&operator), &ctx, env) {
            Ok(eff) => {
                prop_assert!(!eff.network() || (op_net && req_net));
                prop_assert!(eff.deny_subprocess() || (!op_sub && req_sub));
                prop_assert!(eff.timeout_seconds() <= op_max);
                prop_assert!(eff.max_timeout_seconds() <= op_max);
                for w in eff.write_paths() {
                    prop_assert!(op_resolved.write_paths().iter().any(|o| w.starts_with(o)), "{w:?} escapes");
                }
                for n in op_resolved.env_deny_names() {
                    prop_assert!(eff.env_deny_names().contains(n));
                }
                for d in op_resolved.read_deny_paths() {
                    prop_assert!(eff.read_deny_paths().contains(d));
                }
                for d in op_resolved.write_deny_paths() {
                    prop_assert!(eff.write_deny_paths().contains(d));
                }
            }
            Err(PolicyError::TimeoutAboveCeiling { requested, ceiling }) => {
                prop_assert!(requested > ceiling);
                prop_assert_eq!(ceiling, op_max);
            }
            Err(PolicyError::WriteOutsideOperator { path }) => {
                prop_assert!(!op_resolved.write_paths().iter().any(|o| path.starts_with(o)));
            }
            Err(PolicyError::WriteInsideReadDeny { write, deny }) => {
                prop_assert!(write.starts_with(&deny));
                prop_assert!(op_resolved.read_deny_paths().contains(&deny));
            }
            Err(other) => prop_assert!(false, "unexpected refusal: {other}"),
        }
    }
}

#[test]
fn policy_round_trips_through_json_and_toml() {
    let dir = tree();
    let p = SandboxPolicy {
        network: false,
        allow_net: vec![],
        requests: vec![],
        write_paths: vec![dir.path().join("a").to_str().unwrap().into()],
        read_deny_paths: vec![dir.path().join("b/secret").to_str().unwrap().into()],
        write_deny_paths: vec![dir.path().join("a/.git").to_str().unwrap().into()],
        deny_subprocess: true,
        env_deny_names: vec!["AWS_*".into()],
        timeout_seconds: 30,
        max_timeout_seconds: 60,
        allow_unix_sockets: vec![dir.path().join("a/agent.sock").to_str().unwrap().into()],
        protect_git_dirs: true,
        private_shm: false,
    };
    let json: SandboxPolicy = serde_json::from_str(&serde_json::to_string(&p).unwrap()).unwrap();
    assert_eq!(json, p);
    let toml_text = toml::to_string(&p).unwrap();
    assert_eq!(toml::from_str::<SandboxPolicy>(&toml_text).unwrap(), p);
    let resolved = p.resolve(&ExpandContext::default()).unwrap();
    let back: sandbox_core::ResolvedPolicy =
        serde_json::from_str(&serde_json::to_string(&resolved).unwrap()).unwrap();
    assert_eq!(back, resolved);
    // Deserialising a resolved policy re-validates it: a missing write path is refused.
    let bad = serde_json::json!({"write_paths": [PathBuf::from(dir.path()).join("nope")]});
    assert!(serde_json::from_value::<sandbox_core::ResolvedPolicy>(bad).is_err());
}
