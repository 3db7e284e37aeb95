//! [`ResolvedPolicy::nested_within`]: a nested run's policy can only narrow
//! the outer run's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use proptest::prelude::*;

use super::*;

/// A fixed tree: `a`, `a/b`, `c` (directories).
fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
    std::fs::create_dir_all(dir.path().join("c")).unwrap();
    dir
}

fn at(root: &Path, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|n| root.join(n).to_string_lossy().into_owned())
        .collect()
}

fn resolve(p: SandboxPolicy) -> ResolvedPolicy {
    p.resolve(&ExpandContext::default()).unwrap()
}

const HOUR: Duration = Duration::from_secs(3600);

#[test]
fn a_write_path_outside_the_outer_run_is_refused_and_one_inside_is_kept() {
    let dir = tree();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let outer = resolve(SandboxPolicy {
        write_paths: at(&root, &["a"]),
        ..SandboxPolicy::default()
    });
    let wider = resolve(SandboxPolicy {
        write_paths: at(&root, &["c"]),
        ..SandboxPolicy::default()
    });
    let err = wider.nested_within(&outer, HOUR).unwrap_err();
    assert!(
        matches!(&err, PolicyError::WriteOutsideOuterRun { path } if path.ends_with("c")),
        "{err}"
    );
    assert!(err.to_string().contains("can only narrow"), "{err}");
    // Twin: a write path beneath the outer's is kept as it is.
    let inner = resolve(SandboxPolicy {
        write_paths: at(&root, &["a/b"]),
        ..SandboxPolicy::default()
    });
    let nested = inner.nested_within(&outer, HOUR).unwrap();
    assert_eq!(nested.write_paths(), &[root.join("a/b")]);
    // No write paths at all is narrower still.
    let none = resolve(SandboxPolicy::default());
    assert!(none
        .nested_within(&outer, HOUR)
        .unwrap()
        .write_paths()
        .is_empty());
}

#[test]
fn denials_unite_and_network_intersects() {
    let dir = tree();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let outer = resolve(SandboxPolicy {
        write_paths: at(&root, &["a"]),
        read_deny_paths: at(&root, &["c"]),
        write_deny_paths: at(&root, &["a/b"]),
        env_deny_names: vec!["OUTER_*".into()],
        deny_subprocess: true,
        network: false,
        ..SandboxPolicy::default()
    });
    let inner = resolve(SandboxPolicy {
        write_paths: at(&root, &["a"]),
        read_deny_paths: at(&root, &["a/b"]),
        env_deny_names: vec!["INNER".into()],
        network: true,
        allow_net: vec!["example.com:443".parse().unwrap()],
        ..SandboxPolicy::default()
    });
    let nested = inner.nested_within(&outer, HOUR).unwrap();
    assert!(!nested.network(), "off beats an allowlist");
    assert!(nested.allow_net().is_empty());
    assert!(nested.deny_subprocess());
    assert!(nested.read_deny_paths().contains(&root.join("c")));
    assert!(nested.read_deny_paths().contains(&root.join("a/b")));
    assert!(nested.write_deny_paths().contains(&root.join("a/b")));
    assert_eq!(nested.env_deny_names(), &["INNER", "OUTER_*"]);
    // An allowlist in an allowlist: the inner's rules must lie within.
    let listed = |rule: &str| {
        resolve(SandboxPolicy {
            network: true,
            allow_net: vec![rule.parse().unwrap()],
            ..SandboxPolicy::default()
        })
    };
    let outer = listed("*.example.com:443");
    let within = listed("api.example.com:443");
    assert_eq!(
        within.nested_within(&outer, HOUR).unwrap().allow_net(),
        within.allow_net()
    );
    assert!(listed("example.org:443")
        .nested_within(&outer, HOUR)
        .is_err());
    // An open inner run takes the outer's list.
    let open = resolve(SandboxPolicy::default());
    let nested = open.nested_within(&outer, HOUR).unwrap();
    assert_eq!(nested.network_mode(), NetworkMode::Allowlist);
    assert_eq!(nested.allow_net(), outer.allow_net());
}

#[test]
fn the_timeout_is_the_smallest_and_never_past_the_outer_runs_end() {
    let with = |timeout_seconds| {
        resolve(SandboxPolicy {
            timeout_seconds,
            ..SandboxPolicy::default()
        })
    };
    let outer = with(100);
    assert_eq!(
        with(300)
            .nested_within(&outer, HOUR)
            .unwrap()
            .timeout_seconds(),
        100
    );
    assert_eq!(
        with(30)
            .nested_within(&outer, HOUR)
            .unwrap()
            .timeout_seconds(),
        30
    );
    assert_eq!(
        with(30)
            .nested_within(&outer, Duration::from_millis(7_200))
            .unwrap()
            .timeout_seconds(),
        8,
        "the outer run's time left, rounded up"
    );
    assert_eq!(
        with(30)
            .nested_within(&outer, Duration::ZERO)
            .unwrap()
            .timeout_seconds(),
        1,
        "never zero (the outer run's end ends it anyway)"
    );
}

/// One choice of policy over the tree of [`tree`].
#[derive(Debug, Clone)]
struct Pick {
    write: Vec<usize>,
    read_deny: Vec<usize>,
    write_deny: Vec<usize>,
    net: usize,
    deny_subprocess: bool,
    env: Vec<usize>,
    timeout: u64,
    shm: bool,
    git: bool,
}

const DIRS: [&str; 3] = ["a", "a/b", "c"];
const ENV: [&str; 3] = ["A", "B_*", "C"];
const NETS: [&[&str]; 4] = [
    &[],
    &["*.example.com:443"],
    &["api.example.com:443"],
    &["example.org"],
];

fn pick() -> impl Strategy<Value = Pick> {
    let idx = |n: usize| proptest::collection::vec(0..n, 0..3);
    (
        idx(3),
        idx(3),
        idx(3),
        0..5usize,
        any::<bool>(),
        idx(3),
        1..700u64,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(
            |(write, read_deny, write_deny, net, deny_subprocess, env, timeout, shm, git)| Pick {
                write,
                read_deny,
                write_deny,
                net,
                deny_subprocess,
                env,
                timeout,
                shm,
                git,
            },
        )
}

fn build(root: &Path, p: &Pick) -> Option<ResolvedPolicy> {
    let names = |ix: &[usize]| -> Vec<String> {
        ix.iter()
            .map(|&i| root.join(DIRS[i]).to_string_lossy().into_owned())
            .collect()
    };
    SandboxPolicy {
        write_paths: names(&p.write),
        read_deny_paths: names(&p.read_deny),
        write_deny_paths: names(&p.write_deny),
        // 4: off; 0: on; else an allowlist.
        network: p.net != 4,
        allow_net: NETS[p.net % 4].iter().map(|r| r.parse().unwrap()).collect(),
        deny_subprocess: p.deny_subprocess,
        env_deny_names: p.env.iter().map(|&i| ENV[i].to_owned()).collect(),
        timeout_seconds: p.timeout.min(600),
        protect_git_dirs: p.git,
        private_shm: p.shm,
        ..SandboxPolicy::default()
    }
    .resolve(&ExpandContext::default())
    // A write path inside a read denial does not resolve: not a policy.
    .ok()
}

fn covered(paths: &[PathBuf], by: &[PathBuf]) -> bool {
    paths.iter().all(|p| by.iter().any(|w| p.starts_with(w)))
}

proptest! {
    /// Whatever both sides ask, the nested policy is at most the outer's on
    /// every field (and at most the inner's).
    #[test]
    fn a_nested_policy_never_widens_the_outer(outer in pick(), inner in pick(), left in 0..2_000u64) {
        let dir = tree();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let (Some(outer), Some(inner)) = (build(&root, &outer), build(&root, &inner)) else {
            return Ok(());
        };
        let remaining = Duration::from_millis(left * 100);
        let Ok(n) = inner.nested_within(&outer, remaining) else {
            return Ok(());
        };
        for side in [&outer, &inner] {
            prop_assert!(covered(n.write_paths(), side.write_paths()));
            prop_assert!(side.read_deny_paths().iter().all(|d| n.read_deny_paths().contains(d)));
            prop_assert!(side.write_deny_paths().iter().all(|d| n.write_deny_paths().contains(d)));
            prop_assert!(n.network() <= side.network());
            if side.network_mode() == NetworkMode::Allowlist {
                prop_assert!(n.network_mode() != NetworkMode::On);
                prop_assert!(n.allow_net().iter().all(|r| side.allow_net().iter().any(|o| r.within(o))));
            }
            if side.network_mode() == NetworkMode::Off {
                prop_assert_eq!(n.network_mode(), NetworkMode::Off);
            }
            prop_assert!(n.deny_subprocess() >= side.deny_subprocess());
            prop_assert!(side.env_deny_names().iter().all(|e| n.env_deny_names().contains(e)));
            prop_assert!(n.timeout_seconds() <= side.timeout_seconds());
            prop_assert!(n.max_timeout_seconds() <= side.max_timeout_seconds());
            prop_assert!(n.private_shm() <= side.private_shm());
            prop_assert!(n.protects_git_dirs() >= side.protects_git_dirs());
            prop_assert!(covered(n.allow_unix_sockets(), side.allow_unix_sockets()));
            // What the nested run may write, the side may write too.
            for d in DIRS {
                let p = root.join(d);
                prop_assert!(!n.may_write(&p) || side.may_write(&p), "{}", p.display());
            }
        }
        let ceil = remaining.as_secs() + u64::from(remaining.subsec_nanos() > 0);
        prop_assert!(n.timeout_seconds() <= ceil.max(1));
    }
}

#[test]
fn a_write_path_inside_the_outer_runs_read_denial_is_refused() {
    let dir = tree();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let outer = resolve(SandboxPolicy {
        write_paths: at(&root, &["a"]),
        read_deny_paths: at(&root, &["a/b"]),
        ..SandboxPolicy::default()
    });
    let inner = resolve(SandboxPolicy {
        write_paths: at(&root, &["a/b"]),
        ..SandboxPolicy::default()
    });
    let err = inner.nested_within(&outer, HOUR).unwrap_err();
    assert!(
        matches!(&err, PolicyError::WriteInsideReadDeny { write, deny }
            if write.ends_with("a/b") && deny.ends_with("a/b")),
        "{err}"
    );
    // Twin: the outer's own write path, the denial beneath it, is kept.
    let same = resolve(SandboxPolicy {
        write_paths: at(&root, &["a"]),
        ..SandboxPolicy::default()
    });
    let nested = same.nested_within(&outer, HOUR).unwrap();
    assert_eq!(nested.write_paths(), &[root.join("a")]);
    assert_eq!(nested.read_deny_paths(), &[root.join("a/b")]);
}
