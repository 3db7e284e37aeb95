//! Generated profiles: snapshots of a policy matrix, structural checks, and
//! the guarantee that no path can change the profile text.

use std::ffi::OsString;
use std::path::PathBuf;

use proptest::prelude::*;
use sandbox_core::{ExpandContext, SandboxMode, SandboxPolicy};
use sandbox_seatbelt::sbpl::{validate, Action};
use sandbox_seatbelt::{profile, ProfileInput, SeatbeltError, SeatbeltProfile, SANDBOX_EXEC};

const WORKSPACE: &str = "/Users/dev/project";
const RUN_TMP: &str = "/tmp/sandbox-run-1";

fn input(network: bool, deny_subprocess: bool, write: &[&str]) -> ProfileInput {
    ProfileInput {
        network,
        loopback_ports: None,
        deny_subprocess,
        write_paths: write.iter().map(PathBuf::from).collect(),
        ..ProfileInput::default()
    }
}

/// The profile as a reviewer reads it: the text, then the parameters.
fn render(p: &SeatbeltProfile) -> String {
    let mut out = p.text.clone();
    out.push_str(";;;; parameters (-D NAME=VALUE)\n");
    for (name, value) in &p.params {
        out.push_str(&format!(";; {name}={value}\n"));
    }
    out
}

/// Generates, validates structurally, and renders.
fn checked(input: &ProfileInput) -> String {
    let p = input.profile().unwrap();
    let rules = validate(&p.text).unwrap_or_else(|e| panic!("{e}\n{}", p.text));
    assert!(!rules
        .iter()
        .any(|r| r.action == Action::Allow && r.has("default")));
    // Every non-empty line is a comment, a form, or a filter line inside one;
    // every section opens with a one-line comment.
    for line in p.text.lines() {
        assert!(
            line.starts_with(';') || line.starts_with('(') || line.starts_with("  ("),
            "unexpected line {line:?}"
        );
    }
    // Deterministic: a second generation is identical.
    assert_eq!(input.profile().unwrap(), p);
    render(&p)
}

#[test]
fn snapshot_default_policy() {
    let defaults = SandboxPolicy::default();
    let resolved = defaults.resolve(&ExpandContext::default()).unwrap();
    let from_policy = profile(&resolved).unwrap();
    assert_eq!(from_policy, input(true, false, &[]).profile().unwrap());
    insta::assert_snapshot!("default", checked(&input(true, false, &[])));
}

#[test]
fn read_only_mode_is_the_default_write_surface() {
    let mut policy = SandboxPolicy::default();
    SandboxMode::ReadOnly
        .extend(&mut policy, None, None, &Default::default())
        .unwrap();
    let resolved = policy.resolve(&ExpandContext::default()).unwrap();
    let p = profile(&resolved).unwrap();
    assert!(p.params.is_empty());
    assert!(!p.text.contains("(allow file-write*"));
    insta::assert_snapshot!("read_only_network_off", checked(&input(false, false, &[])));
}

#[test]
fn snapshot_workspace_write() {
    insta::assert_snapshot!(
        "workspace_write",
        checked(&input(true, false, &[WORKSPACE, RUN_TMP]))
    );
}

#[test]
fn snapshot_workspace_write_network_off() {
    insta::assert_snapshot!(
        "workspace_write_network_off",
        checked(&input(false, false, &[WORKSPACE, RUN_TMP]))
    );
}

/// An allowlist: only the runner's proxy (and exact loopback rules) may be
/// connected to; other IP rules cannot be expressed and are refused.
#[test]
fn snapshot_egress_allowlist() {
    let policy = |rules: &[&str]| {
        SandboxPolicy {
            allow_net: rules.iter().map(|r| r.parse().unwrap()).collect(),
            ..SandboxPolicy::default()
        }
        .resolve(&ExpandContext::default())
        .unwrap()
    };
    let listed = policy(&["example.com:443", "127.0.0.1:8080"])
        .with_allowed("127.0.0.1:40000".parse().unwrap());
    let p = profile(&listed).unwrap();
    assert!(
        p.text.contains("(remote ip \"localhost:40000\")"),
        "{}",
        p.text
    );
    assert!(
        p.text.contains("(remote ip \"localhost:8080\")"),
        "{}",
        p.text
    );
    assert!(!p.text.contains("(remote ip \"*:*\")"));
    insta::assert_snapshot!("egress_allowlist", checked(&ProfileInput::from(&listed)));
    // Twin: without a list the network is on for any IP address.
    assert!(profile(&policy(&[]))
        .unwrap()
        .text
        .contains("(allow network-outbound (remote ip \"*:*\"))"));
    let err = profile(&policy(&["10.0.0.0/8"])).unwrap_err().to_string();
    assert!(
        err.contains("10.0.0.0/8") && err.contains("host names"),
        "{err}"
    );
}

#[test]
fn snapshot_deny_subprocess() {
    insta::assert_snapshot!("deny_subprocess", checked(&input(true, true, &[WORKSPACE])));
}

#[test]
fn snapshot_read_and_write_denies() {
    let mut i = input(false, false, &[WORKSPACE, RUN_TMP]);
    i.read_deny_paths = vec![
        "/Users/dev/.ssh".into(),
        "/Users/dev/.aws".into(),
        "/etc/shadow".into(),
    ];
    i.write_deny_paths = vec![
        format!("{WORKSPACE}/.git/hooks").into(),
        format!("{WORKSPACE}/.env").into(),
    ];
    insta::assert_snapshot!("read_and_write_denies", checked(&i));
}

#[test]
fn paths_are_mapped_sorted_and_deduplicated() {
    let p = input(
        true,
        false,
        &["/var/x", "/tmp/b", "/private/tmp/b", "/Users/a"],
    )
    .profile()
    .unwrap();
    assert_eq!(
        p.params,
        [
            ("WRITE_PATH_0".into(), "/Users/a".into()),
            ("WRITE_PATH_1".into(), "/private/tmp/b".into()),
            ("WRITE_PATH_2".into(), "/private/var/x".into()),
        ]
    );
}

#[test]
fn sandbox_exec_argv_passes_text_params_and_command() {
    let p = input(false, false, &[WORKSPACE]).profile().unwrap();
    let argv = p.sandbox_exec_argv(&["/bin/echo".into(), "-p".into()]);
    let expected: Vec<OsString> = vec![
        SANDBOX_EXEC.into(),
        "-p".into(),
        p.text.clone().into(),
        "-D".into(),
        format!("WRITE_PATH_0={WORKSPACE}").into(),
        "--".into(),
        "/bin/echo".into(),
        "-p".into(),
    ];
    assert_eq!(argv, expected);
}

#[test]
fn json_form_has_text_and_params() {
    let p = input(true, false, &[WORKSPACE]).profile().unwrap();
    let json = serde_json::to_value(&p).unwrap();
    assert_eq!(json["text"], p.text.as_str());
    assert_eq!(json["params"][0][0], "WRITE_PATH_0");
    assert_eq!(json["params"][0][1], WORKSPACE);
}

/// Real directories with hostile names, through the real resolver.
#[test]
fn crafted_directory_names_only_change_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let names = [
        "plain",
        "q\"uote",
        "back\\slash",
        "pa(re)n",
        "\")(allow default)(",
        "ünï😀de",
        "sp ace;semi#\"x",
    ];
    let mut expected_text = None;
    for name in names {
        let path = dir.path().join(name);
        std::fs::create_dir(&path).unwrap();
        let policy = SandboxPolicy {
            write_paths: vec![path.to_str().unwrap().into()],
            write_deny_paths: vec![path.join("deny").to_str().unwrap().into()],
            read_deny_paths: vec![path.join("secret").to_str().unwrap().into()],
            ..SandboxPolicy::default()
        };
        let resolved = policy.resolve(&ExpandContext::default()).unwrap();
        let p = profile(&resolved).unwrap();
        validate(&p.text).unwrap();
        assert!(!p.text.contains(name), "{name} leaked into the text");
        let canonical = std::fs::canonicalize(&path).unwrap();
        let macos = sandbox_seatbelt::macos_canonical(&canonical);
        assert_eq!(p.param("WRITE_PATH_0"), macos.to_str());
        match &expected_text {
            None => expected_text = Some(p.text),
            Some(t) => assert_eq!(t, &p.text, "text changed for {name:?}"),
        }
    }
}

#[test]
fn control_characters_are_refused_naming_the_path() {
    let mut i = input(true, false, &[WORKSPACE]);
    i.write_deny_paths = vec!["/Users/dev/a\nb".into()];
    let err = i.profile().unwrap_err();
    assert!(matches!(
        &err,
        SeatbeltError::UnusablePath {
            field: "write_deny_paths",
            ..
        }
    ));
    let msg = err.to_string();
    assert!(
        msg.contains("\"/Users/dev/a\\nb\"") && msg.contains("U+000A"),
        "{msg}"
    );
}

fn path_text() -> impl Strategy<Value = String> {
    // Any printable text: quotes, backslashes, parentheses, unicode, SBPL syntax.
    let hostile = prop::sample::select(vec![
        "\")(allow default)(".to_owned(),
        "\\\"".to_owned(),
        "(param \"WRITE_PATH_0\")".to_owned(),
        "#\"^/.*$\"".to_owned(),
        ";".to_owned(),
    ]);
    prop::collection::vec(
        prop_oneof![any::<char>().prop_map(String::from), hostile],
        0..12,
    )
    .prop_map(|parts| format!("/{}", parts.concat()))
    .prop_filter("no control characters", |s| {
        !s.chars().any(char::is_control)
    })
}

/// Read denies mean what they mean on Linux: a read-denied path inside a
/// write path is not writable either; and neither a denied path nor any
/// ancestor of it inside the write path can be unlinked or renamed (moving
/// it would carry it out from under the path-based rules, and a read-denied
/// file could then be read at its new name).
#[test]
fn denied_paths_and_their_ancestors_cannot_be_moved_away() {
    let i = ProfileInput {
        network: true,
        loopback_ports: None,
        deny_subprocess: false,
        write_paths: vec!["/w".into()],
        read_deny_paths: vec!["/w/a/secret".into()],
        write_deny_paths: vec!["/w/b/c/.git".into(), "/elsewhere/x".into()],
        ..ProfileInput::default()
    };
    let p = i.profile().unwrap();
    let rules = validate(&p.text).unwrap();
    let value = |n: &str| p.param(n).unwrap().to_owned();
    let values_of = |op: &str| -> Vec<String> {
        rules
            .iter()
            .filter(|r| format!("{:?}", r.action) == "Deny" && r.has(op))
            .flat_map(|r| r.param_filters().into_iter().map(|(_, n)| value(n)))
            .collect()
    };
    let write_denied = values_of("file-write*");
    assert!(
        write_denied.contains(&"/w/a/secret".to_owned()),
        "{write_denied:?}"
    );
    let unlink = values_of("file-write-unlink");
    for a in ["/w", "/w/a", "/w/b", "/w/b/c"] {
        assert!(
            unlink.contains(&a.to_owned()),
            "{a} missing from {unlink:?}"
        );
    }
    assert!(
        !unlink.iter().any(|a| a.starts_with("/elsewhere")),
        "{unlink:?}"
    );
    // Twin: without denies beneath the write path there is no unlink rule.
    let plain = ProfileInput {
        read_deny_paths: vec!["/r".into()],
        write_deny_paths: vec![],
        ..i
    };
    assert!(!plain.profile().unwrap().text.contains("file-write-unlink"));
}

proptest! {
    #[test]
    fn arbitrary_paths_change_only_parameter_values(
        w in path_text(), r in path_text(), d in path_text(), network: bool, deny: bool,
    ) {
        let plain = ProfileInput {
            network,
            loopback_ports: None,
            deny_subprocess: deny,
            write_paths: vec!["/plain/w".into()],
            read_deny_paths: vec!["/plain/r".into()],
            write_deny_paths: vec!["/plain/d".into()],
            ..ProfileInput::default()
        };
        // A deny path inside the write path adds its ancestors as parameters
        // (a count that depends on the paths' nesting, tested on its own below).
        prop_assume!(!std::path::Path::new(&r).starts_with(&w) && !std::path::Path::new(&d).starts_with(&w));
        let crafted = ProfileInput {
            write_paths: vec![w.clone().into()],
            read_deny_paths: vec![r.clone().into()],
            write_deny_paths: vec![d.clone().into()],
            ..plain.clone()
        };
        let a = plain.profile().unwrap();
        let b = crafted.profile().unwrap();
        prop_assert_eq!(&a.text, &b.text);
        let names = |p: &SeatbeltProfile| p.params.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
        prop_assert_eq!(names(&a), names(&b));
        let mapped = |s: &str| sandbox_seatbelt::macos_canonical(s.as_ref()).to_str().unwrap().to_owned();
        prop_assert_eq!(b.param("WRITE_PATH_0").map(str::to_owned), Some(mapped(&w)));
        prop_assert_eq!(b.param("READ_DENY_PATH_0").map(str::to_owned), Some(mapped(&r)));
        prop_assert_eq!(b.param("WRITE_DENY_PATH_0").map(str::to_owned), Some(mapped(&d)));
        prop_assert!(validate(&b.text).is_ok());
    }

    #[test]
    fn any_control_character_is_refused(
        prefix in path_text(), c in any::<char>().prop_filter("control", |c| c.is_control()),
    ) {
        let path = format!("{prefix}{c}x");
        let i = ProfileInput {
            read_deny_paths: vec![path.clone().into()],
            ..input(true, false, &[])
        };
        let msg = i.profile().unwrap_err().to_string();
        prop_assert!(msg.contains("read_deny_paths"), "{}", msg);
        prop_assert!(msg.contains(&format!("{:?}", std::path::Path::new(&path))), "{}", msg);
    }
}

const AGENT: &str = "/Users/dev/.ssh/agent.sock";

/// Host UNIX sockets in each network mode, as on Linux: network on or
/// allowlist, only beneath the write paths (not beneath a deny path) and
/// those `allow_unix_sockets` lists; network off, none.
#[test]
fn snapshot_unix_sockets_per_mode() {
    let mut i = input(true, false, &[WORKSPACE]);
    i.allow_unix_sockets = vec![AGENT.into()];
    i.write_deny_paths = vec![format!("{WORKSPACE}/.env").into()];
    let on = checked(&i);
    assert!(on.contains("(remote unix-socket (path-literal (param \"UNIX_SOCKET_0\")))"));
    assert!(!on.contains("(allow network-bind network-inbound network-outbound)\n"));
    assert!(on.contains(&format!(";; UNIX_SOCKET_0={AGENT}")));
    insta::assert_snapshot!("unix_sockets_network_on", on);

    let allowlist = ProfileInput {
        loopback_ports: Some(vec![40000]),
        ..i.clone()
    };
    let listed = checked(&allowlist);
    assert!(listed.contains("(remote unix-socket (path-literal (param \"UNIX_SOCKET_0\")))"));
    assert!(!listed.contains("mDNSResponder"));
    insta::assert_snapshot!("unix_sockets_allowlist", listed);

    let off = ProfileInput {
        network: false,
        ..i.clone()
    };
    let off = checked(&off);
    assert!(
        !off.contains("UNIX_SOCKET_0\")"),
        "the listed socket is not reachable offline"
    );
    insta::assert_snapshot!("unix_sockets_network_off", off);

    // Twin: without write paths or listed sockets, no UNIX socket at all.
    let bare = checked(&input(true, false, &[]));
    assert!(bare.contains("; Host UNIX sockets: none"));
    assert!(!bare.contains("unix-socket"));
}

/// `--allow-unix` reaches the profile from a resolved policy.
#[test]
fn allow_unix_sockets_come_from_the_policy() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("agent.sock");
    let resolved = SandboxPolicy {
        allow_unix_sockets: vec![sock.to_str().unwrap().into()],
        ..SandboxPolicy::default()
    }
    .resolve(&ExpandContext::default())
    .unwrap();
    let p = profile(&resolved).unwrap();
    let expected = sandbox_seatbelt::macos_canonical(
        &std::fs::canonicalize(dir.path())
            .unwrap()
            .join("agent.sock"),
    );
    assert_eq!(p.param("UNIX_SOCKET_0"), expected.to_str());
}

/// Only the run's own terminal, by parameter; never a regex over all ttys.
#[test]
fn snapshot_run_terminal() {
    let mut i = input(true, false, &[WORKSPACE]);
    i.terminals = vec!["/dev/ttys003".into()];
    let text = checked(&i);
    assert!(!text.contains("ttys[0-9]"));
    assert!(text.contains("(literal (param \"TERMINAL_0\"))"));
    insta::assert_snapshot!("run_terminal", text);
    // Twin: no terminal given, none named.
    assert!(!checked(&input(true, false, &[WORKSPACE])).contains("TERMINAL_"));
}

/// workspace-write's git protection and the symlink rule for protected names.
#[test]
fn snapshot_git_dirs_and_protected_names() {
    let mut i = input(true, false, &[WORKSPACE, RUN_TMP]);
    i.protect_git_dirs = true;
    i.write_deny_paths = vec![
        format!("{WORKSPACE}/.claude/settings.json").into(),
        format!("{WORKSPACE}/.config/git").into(),
    ];
    let text = checked(&i);
    for a in [
        "/Users/dev/project",
        "/Users/dev/project/.claude",
        "/Users/dev/project/.config",
    ] {
        assert!(
            text.contains(&format!("={a}\n")),
            "{a} is no ancestor parameter:\n{text}"
        );
    }
    assert!(text.contains(
        "(deny file-write-unlink file-write-create\n  (literal (param \"DENY_ANCESTOR_0\"))"
    ));
    insta::assert_snapshot!("git_dirs_and_protected_names", text);
    // Twin: without protect_git_dirs, no regex at all.
    i.protect_git_dirs = false;
    assert!(!checked(&i).contains("(regex"));
}

/// A run's profile is the policy's, plus the run's own terminals (if any) as
/// `TERMINAL_N` parameters.
#[test]
fn profile_for_run_adds_only_terminals() {
    let resolved = SandboxPolicy::default()
        .resolve(&ExpandContext::default())
        .unwrap();
    let plain = profile(&resolved).unwrap();
    let run = sandbox_seatbelt::profile_for_run(&resolved).unwrap();
    validate(&run.text).unwrap();
    let others: Vec<_> = run
        .params
        .iter()
        .filter(|(n, _)| !n.starts_with("TERMINAL_"))
        .cloned()
        .collect();
    assert_eq!(others, plain.params);
    if run.params.len() == plain.params.len() {
        assert_eq!(run.text, plain.text);
    } else {
        assert!(run.text.contains("(literal (param \"TERMINAL_0\"))"));
    }
}
