//! The git audit after a run (`crates/sandbox-cli/src/git_audit.rs`): the
//! runner reads the configs and hook directories of the repositories the
//! command made and warns of programs git would run there. The command
//! made those files, so the audit is bounded (red-team F1), reads only
//! what a process of the runner's uid without capabilities could (F5),
//! covers repositories nested runs made (F7), and in a session covers the
//! repositories earlier commands made (F6).

use std::io::Write;
use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use sandbox_tests::{is_root, sandbox, sandbox_as_nobody, sandbox_bin, shared_dir, users};
use serde_json::{json, Value};

/// `git init` of a repository before the run, in `ws`: its git directory
/// is write-denied, so the broker mediates the workspace and names the
/// repositories the command makes.
fn old_repo(ws: &Path) {
    let old = std::process::Command::new("git")
        .args(["init", "-q"])
        .arg(ws.join("old"))
        .status()
        .unwrap();
    assert!(old.success());
    // Anyone may write beneath the workspace (the policy decides).
    let chmod = std::process::Command::new("chmod")
        .args(["-R", "a+rwX"])
        .arg(ws)
        .status()
        .unwrap();
    assert!(chmod.success());
}

/// `sandbox run --mode workspace-write -w ws -- sh -c script`, as nobody or not.
fn run(nobody: bool, ws: &Path, script: &str) -> Output {
    let mut cmd = if nobody {
        sandbox_as_nobody()
    } else {
        sandbox()
    };
    cmd.args(["run", "--mode", "workspace-write", "--workspace"])
        .arg(ws)
        .args(["--", "/bin/sh", "-c", script])
        .current_dir(ws)
        .env("HOME", ws)
        .output()
        .unwrap()
}

/// The shell function that makes a bare-bones repository by hand.
const MKREPO: &str = "mkrepo() { mkdir -p \"$1/.git/objects\" \"$1/.git/refs\" && \
                      echo 'ref: refs/heads/main' > \"$1/.git/HEAD\"; }; ";

/// The `sandbox:` line naming the repository at `at`.
fn line_for<'a>(err: &'a str, at: &Path) -> Option<&'a str> {
    let at = format!("repository at {} ", at.display());
    err.lines().find(|l| l.contains(&at))
}

/// A config including itself many ways (`path = dK/../config`, each a
/// different spelling: B^11 reads before), the same with 1 MB of padding,
/// and a hooks directory of 1000 long names named 2000 times by
/// `core.hooksPath`: the run ends in seconds, its stderr bounded, each
/// repository still named with what it runs (the positive control: the
/// audit still reads them).
#[test]
fn the_audit_of_what_the_command_made_is_bounded() {
    for nobody in users() {
        let (_dir, ws) = shared_dir();
        old_repo(&ws);
        let src = tempfile::tempdir().unwrap();
        let s = src.path();
        std::fs::set_permissions(s, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let fan = |b: usize| {
            let mut c = "[core]\n\tfsmonitor = echo pwned\n[include]\n".to_owned();
            for i in 0..b {
                c.push_str(&format!("\tpath = d{i}/../config\n"));
            }
            c
        };
        std::fs::write(s.join("fan"), fan(6)).unwrap();
        let mut pad = fan(3);
        for _ in 0..10_000 {
            pad.push(';');
            pad.push_str(&"#".repeat(99));
            pad.push('\n');
        }
        std::fs::write(s.join("pad"), pad).unwrap();
        std::fs::write(s.join("hooks"), {
            let mut c = "[core]\n".to_owned();
            for _ in 0..2000 {
                c.push_str("\thooksPath = h\n");
            }
            c
        })
        .unwrap();
        for f in ["fan", "pad", "hooks"] {
            std::fs::set_permissions(
                s.join(f),
                std::os::unix::fs::PermissionsExt::from_mode(0o644),
            )
            .unwrap();
        }
        let script = format!(
            "set -e; {MKREPO} src={s}; \
             mkrepo fan; for i in 0 1 2 3 4 5; do mkdir fan/.git/d$i; done; \
             cp $src/fan fan/.git/config; \
             mkrepo pad; for i in 0 1 2; do mkdir pad/.git/d$i; done; \
             cp $src/pad pad/.git/config; \
             mkrepo hooks; mkdir hooks/h; i=0; \
             while [ $i -lt 1000 ]; do : > hooks/h/$(printf '%0200d' $i); i=$((i+1)); done; \
             cp $src/hooks hooks/.git/config; echo made",
            s = s.display()
        );
        let begun = Instant::now();
        let out = run(nobody, &ws, &script);
        let took = begun.elapsed();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "made\n", "{err}");
        assert!(out.status.success(), "{err}");
        assert!(took < Duration::from_secs(30), "{took:?}: {err}");
        assert!(err.len() < 64 * 1024, "{} bytes of stderr", err.len());
        for name in ["fan", "pad"] {
            let line = line_for(&err, &ws.join(name)).unwrap_or_else(|| panic!("{err}"));
            assert!(line.contains("core.fsmonitor"), "{line}");
        }
        let line = line_for(&err, &ws.join("hooks")).unwrap_or_else(|| panic!("{err}"));
        assert!(line.contains("core.hookspath"), "{line}");
        // The 1000 hooks are listed once, twenty of them named.
        assert!(line.contains(", 981 more"), "{line}");
        assert!(line.len() < 16 * 1024, "{} bytes", line.len());
    }
}

/// A root runner's audit reads only what a capability-less process of its
/// uid could (F5): a nobody-owned 0700 directory in the workspace named by
/// `core.hooksPath` is not listed (the command could not list it either).
/// Positive control: a readable hooks directory beside it is listed.
#[test]
fn the_audit_does_not_list_what_the_command_could_not() {
    for nobody in users() {
        let (_dir, ws) = shared_dir();
        old_repo(&ws);
        let alice = ws.join("alice");
        std::fs::create_dir(&alice).unwrap();
        std::fs::write(alice.join("id_ed25519"), "secret").unwrap();
        // Owned by someone else than the runner: nobody for root, root
        // for nobody (or this user's own 0000 directory when not root).
        if is_root() && !nobody {
            let chown = std::process::Command::new("chown")
                .args(["-R", "65534:65534"])
                .arg(&alice)
                .status()
                .unwrap();
            assert!(chown.success());
        }
        let mode = if is_root() { 0o700 } else { 0o000 };
        std::fs::set_permissions(&alice, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .unwrap();
        let script = format!(
            "{MKREPO} ls alice; echo ls=$?; mkrepo r && mkdir pub && : > pub/pre-commit && \
             printf '[core]\\n\\thooksPath = {a}\\n\\thooksPath = {p}\\n' > r/.git/config",
            a = alice.display(),
            p = ws.join("pub").display()
        );
        let out = run(nobody, &ws, &script);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("ls=2"),
            "{err}"
        );
        let line = line_for(&err, &ws.join("r")).unwrap_or_else(|| panic!("{err}"));
        assert!(!line.contains("id_ed25519"), "{line}");
        assert!(line.contains("pub/pre-commit"), "{line}");
        std::fs::set_permissions(&alice, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
    }
}

/// A repository a nested `sandbox run` made is audited by the outer run
/// too (F7; the inner run's own warnings are thrown away here). Twin: the
/// same repository made by the outer command directly.
#[test]
fn the_outer_run_audits_what_nested_runs_made() {
    for nobody in users() {
        let (_dir, ws) = shared_dir();
        old_repo(&ws);
        let make = format!(
            "{MKREPO} mkrepo r && printf '[core]\\n\\tfsmonitor = touch pwned\\n' > r/.git/config"
        );
        let nested = format!(
            "{} run -w {} -- /bin/sh -c \"$0\" 2>/dev/null",
            sandbox_bin().display(),
            ws.display()
        );
        for (how, script) in [
            ("nested", format!("cd {}; {nested}", ws.display())),
            ("direct", make.clone()),
        ] {
            let _ = std::fs::remove_dir_all(ws.join("r"));
            let mut cmd = if nobody {
                sandbox_as_nobody()
            } else {
                sandbox()
            };
            let out = cmd
                .args(["run", "--mode", "workspace-write", "--workspace"])
                .arg(&ws)
                .args(["--", "/bin/sh", "-c", &script, &make])
                .current_dir(&ws)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr).into_owned();
            assert!(out.status.success(), "{how}: {err}");
            assert!(
                std::fs::read_to_string(ws.join("r/.git/config"))
                    .unwrap()
                    .contains("fsmonitor"),
                "{how}"
            );
            let line = line_for(&err, &ws.join("r")).unwrap_or_else(|| panic!("{how}: {err}"));
            assert!(line.contains("core.fsmonitor"), "{how}: {line}");
        }
        // In a session, the nested run's repository is in the command's
        // exit event, either launch.
        for launch in ["shared", "per-command"] {
            let _ = std::fs::remove_dir_all(ws.join("r"));
            let w = ws.display().to_string();
            let events = session(
                nobody,
                &[
                    "--mode",
                    "workspace-write",
                    "--workspace",
                    &w,
                    "--launch",
                    launch,
                ],
                &[json!({"id": "n", "op": "run", "cwd": w,
                         "argv": ["/bin/sh", "-c", format!("cd {w}; {nested}"), make]})],
            );
            let exit = events
                .iter()
                .find(|e| e["id"] == "n" && e["event"] == "exit")
                .unwrap_or_else(|| panic!("{launch}: {events:?}"));
            assert_eq!(exit["status"], 0, "{launch}: {exit}");
            let at = format!("repository at {w}/r ");
            assert!(
                exit["summary"]
                    .as_array()
                    .is_some_and(|s| s.iter().any(|l| {
                        l.as_str()
                            .is_some_and(|l| l.contains(&at) && l.contains("core.fsmonitor"))
                    })),
                "{launch}: {exit}"
            );
        }
    }
}

/// The events of a session (`flags`) given `requests`, until it closes.
fn session(nobody: bool, flags: &[&str], requests: &[Value]) -> Vec<Value> {
    let mut cmd = if nobody {
        sandbox_as_nobody()
    } else {
        sandbox()
    };
    let mut child = cmd
        .arg("session")
        .args(flags)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    for r in requests {
        writeln!(stdin, "{r}").unwrap();
    }
    writeln!(stdin, "{}", json!({"op": "close"})).unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// In a session, a clean repository one command made and the next gave
/// `core.fsmonitor` (F6): with the shared launch, the second command's
/// exit event warns (and the third's does not repeat it); launched per
/// command, the second command's write is refused (the repository is from
/// before it: its config protected) or warned of. Twin: made and given
/// the key by one command, warned of.
#[test]
fn a_session_audits_repositories_earlier_commands_made() {
    for nobody in users() {
        for launch in ["shared", "per-command"] {
            let (_dir, ws) = shared_dir();
            old_repo(&ws);
            let w = ws.display().to_string();
            let clean = format!(
                "{MKREPO} mkrepo r && printf '[core]\\n\\tbare = false\\n' > r/.git/config"
            );
            let arm = "printf '[core]\\n\\tfsmonitor = touch pwned\\n' >> r/.git/config";
            let twin = format!(
                "{MKREPO} mkrepo t && cd t/.git && {}",
                arm.replace("r/.git/", "")
            );
            let req = |id: &str, script: &str| json!({"id": id, "op": "run", "argv": ["/bin/sh", "-c", script], "cwd": w});
            let events = session(
                nobody,
                &[
                    "--mode",
                    "workspace-write",
                    "--workspace",
                    &w,
                    "--launch",
                    launch,
                ],
                &[
                    req("1", &clean),
                    req("2", arm),
                    req("3", "true"),
                    req("twin", &twin),
                ],
            );
            let exit = |id: &str| {
                events
                    .iter()
                    .find(|e| e["id"] == id && e["event"] == "exit")
                    .unwrap_or_else(|| panic!("{launch}: no exit for {id}: {events:?}"))
                    .clone()
            };
            let names = |e: &Value, at: &str| {
                e["summary"].as_array().is_some_and(|s| {
                    s.iter().any(|l| {
                        l.as_str().is_some_and(|l| {
                            l.contains(&format!("repository at {w}/{at} "))
                                && l.contains("core.fsmonitor")
                        })
                    })
                })
            };
            let armed = std::fs::read_to_string(ws.join("r/.git/config"))
                .unwrap()
                .contains("fsmonitor");
            let second = exit("2");
            assert!(
                names(&second, "r") || !armed,
                "{launch}: armed={armed}, {second}"
            );
            if launch == "shared" {
                assert!(armed, "{launch}: the write went through in a shared launch");
            }
            assert!(!names(&exit("1"), "r"), "{launch}");
            assert!(!names(&exit("3"), "r"), "{launch}: said twice");
            assert!(names(&exit("twin"), "t"), "{launch}: {}", exit("twin"));
        }
    }
}

/// Red-team F1 (rt3): settings git runs as programs that the audit missed
/// are named, each in a repository `git init` made in the run: a `\`
/// continuation hiding `core.fsmonitor` behind `[user]` (b),
/// `gpg.ssh.defaultKeyCommand` (c), an `ext::` remote with
/// `protocol.ext.allow` (d), `interactive.diffFilter` and a `!` alias (e),
/// a NUL cutting `[core "fsmonitor\0"]` into `core.fsmonitor` (f), and a
/// setting the audit does not know (g: `trace2.eventTarget`, named apart).
/// Positive controls: `a` (`core.fsmonitor`, as before) is named, and a
/// repository `git clone` made, then given `git config user.*` and
/// `pull.rebase`, and its source `git init` made are not.
#[test]
fn the_audit_names_what_git_runs_and_not_what_clone_writes() {
    for nobody in users() {
        let (_dir, ws) = shared_dir();
        old_repo(&ws);
        let script = "set -e; export GIT_CONFIG_NOSYSTEM=1; \
            for r in a b c d e f g; do git init -q $r; done; \
            printf '[core]\\n\\tfsmonitor = touch pwned-a\\n' >> a/.git/config; \
            printf '[core]\\n\\tzzz = x \\\\\\n[user]\\n\\tfsmonitor = \"touch pwned-b; false\"\\n' \
              >> b/.git/config; \
            printf '[commit]\\n\\tgpgsign = true\\n[gpg]\\n\\tformat = ssh\\n[gpg \"ssh\"]\\n\\t\
              defaultKeyCommand = touch pwned-c\\n' >> c/.git/config; \
            printf '[protocol \"ext\"]\\n\\tallow = always\\n[remote \"origin\"]\\n\\t\
              url = ext::sh -c touch%% pwned-d\\n' >> d/.git/config; \
            printf '[interactive]\\n\\tdiffFilter = touch pwned-e\\n[alias]\\n\\tst = !touch x\\n' \
              >> e/.git/config; \
            printf '[core \"fsmonitor\\000\"]\\n\\tx = touch pwned-f\\n' >> f/.git/config; \
            printf '[trace2]\\n\\teventTarget = /tmp/x\\n' >> g/.git/config; \
            git init -q src; \
            git -C src -c user.name=a -c user.email=a@b commit -q --allow-empty -m x; \
            git clone -q src dst; git -C dst config user.name 'A U Thor'; \
            git -C dst config user.email a@example.com; git -C dst config pull.rebase false; \
            echo made";
        let out = run(nobody, &ws, script);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "made\n", "{err}");
        assert!(out.status.success(), "{err}");
        // git itself reads the hidden ones as the audit names them.
        for (repo, key, value) in [
            ("b", "core.fsmonitor", "touch pwned-b; false"),
            ("f", "core.fsmonitor", "touch pwned-f"),
        ] {
            let got = std::process::Command::new("git")
                .args(["config", "--file"])
                .arg(ws.join(repo).join(".git/config"))
                .args(["--get", key])
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&got.stdout).trim(), value, "{repo}");
        }
        for (repo, names) in [
            ("a", &["core.fsmonitor"][..]),
            ("b", &["core.fsmonitor"]),
            ("c", &["gpg.ssh.defaultkeycommand"]),
            ("d", &["protocol.ext.allow", "remote.origin.url"]),
            ("e", &["interactive.difffilter", "alias.st"]),
            ("f", &["core.fsmonitor"]),
        ] {
            let line = line_for(&err, &ws.join(repo)).unwrap_or_else(|| panic!("{repo}: {err}"));
            for name in names {
                assert!(line.contains(name), "{repo}: {name} in {line}");
            }
            assert!(line.contains(" run programs"), "{repo}: {line}");
        }
        let line = line_for(&err, &ws.join("g")).unwrap_or_else(|| panic!("g: {err}"));
        assert!(
            line.contains(
                "whose config sets trace2.eventtarget, which the git audit does not know to be \
                 harmless"
            ),
            "{line}"
        );
        for clean in ["src", "dst"] {
            assert!(line_for(&err, &ws.join(clean)).is_none(), "{clean}: {err}");
        }
        assert!(
            std::fs::read_to_string(ws.join("dst/.git/config"))
                .unwrap()
                .contains("A U Thor"),
            "{err}"
        );
    }
}

/// The four shapes of red-team round 4, each warned of as root and as
/// nobody: a hook in the common directory a `commondir` names (F1), a
/// hook behind more `.sample` names than the audit lists (F2), a hooks
/// directory the audit may search but not read (F3) and a config with
/// `core.fsmonitor` it may not read (F3b: root's git reads both). Positive
/// control: a plain `git init` repository (only `.sample` hooks) says
/// nothing.
#[test]
fn hidden_or_unreadable_hooks_and_configs_are_named() {
    for nobody in users() {
        let (_dir, ws) = shared_dir();
        old_repo(&ws);
        let script = "set -e; export GIT_CONFIG_NOSYSTEM=1; \
            for r in plain ch cap nr cn; do git init -q $r; done; \
            mkdir -p common/hooks; echo ../../common > ch/.git/commondir; \
            : > common/hooks/pre-commit; \
            i=0; while [ $i -lt 1100 ]; do : > cap/.git/hooks/s$i.sample; i=$((i+1)); done; \
            : > cap/.git/hooks/pre-commit; \
            : > nr/.git/hooks/pre-commit; chmod 111 nr/.git/hooks; \
            printf '[core]\\n\\tfsmonitor = touch pwned\\n' >> cn/.git/config; \
            chmod 000 cn/.git/config; echo made";
        let out = run(nobody, &ws, script);
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "made\n", "{err}");
        for (repo, want) in [
            ("ch", "common/hooks/pre-commit".to_owned()),
            ("cap", "cap/.git/hooks/pre-commit".to_owned()),
            (
                "nr",
                format!(
                    "{}: not read (permission denied): git may still run it",
                    ws.join("nr/.git/hooks").display()
                ),
            ),
            (
                "cn",
                format!(
                    "{}: not read (permission denied): git may still run it",
                    ws.join("cn/.git/config").display()
                ),
            ),
        ] {
            let line = line_for(&err, &ws.join(repo)).unwrap_or_else(|| panic!("{repo}: {err}"));
            assert!(line.contains(&want), "{repo}: {want} in {line}");
        }
        // Searched still: the hook in the unreadable directory is named.
        let nr = line_for(&err, &ws.join("nr")).unwrap_or_default();
        assert!(nr.contains("nr/.git/hooks/pre-commit"), "{nr}");
        assert!(line_for(&err, &ws.join("plain")).is_none(), "{err}");
        for (p, m) in [("nr/.git/hooks", 0o755), ("cn/.git/config", 0o644)] {
            std::fs::set_permissions(ws.join(p), std::os::unix::fs::PermissionsExt::from_mode(m))
                .unwrap();
        }
    }
}
