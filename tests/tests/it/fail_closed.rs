//! Fail closed, and trust only the operator: each refusal beside its working twin.

use std::path::Path;

use std::os::unix::fs::PermissionsExt;

#[cfg(target_os = "linux")]
use sandbox_tests::is_root;
#[cfg(target_os = "linux")]
use sandbox_tests::{cannot_do_its_job, sandbox_as_nobody, with_private_mounts};
use sandbox_tests::{run, sandbox, sandbox_lines};

fn code(out: &std::process::Output) -> Option<i32> {
    out.status.code()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Exactly one `sandbox:` line, containing `needle`.
#[track_caller]
fn one_line(out: &std::process::Output, needle: &str) {
    let lines = sandbox_lines(out);
    assert_eq!(lines.len(), 1, "{lines:?}\n{}", stderr(out));
    assert!(lines[0].contains(needle), "{lines:?} lacks {needle:?}");
}

fn write_script(target: &Path) -> String {
    format!("echo x > {}", target.display())
}

/// A `sandbox.toml` in the working directory is never read: it is the file a
/// cloned repository or an earlier confined run controls.
#[test]
fn a_config_in_the_working_directory_is_ignored() {
    let cwd = tempfile::tempdir().unwrap();
    let grant = tempfile::tempdir().unwrap();
    let outside = cwd.path().join("outside-write");
    std::fs::write(
        cwd.path().join("sandbox.toml"),
        "[sandbox]\nbackend = \"noop\"\non_unsupported = \"ignore\"\n",
    )
    .unwrap();
    let out = sandbox()
        .current_dir(cwd.path())
        .args(["run", "-w", grant.path().to_str().unwrap(), "--"])
        .args(["/bin/sh", "-c", &write_script(&outside)])
        .output()
        .unwrap();
    assert_ne!(code(&out), Some(0), "{}", stderr(&out));
    assert!(!outside.exists(), "the planted config unconfined the run");
    // Twin: the same file named by the operator ($SANDBOX_CONFIG) is used.
    let out = sandbox()
        .current_dir(cwd.path())
        .env("SANDBOX_CONFIG", cwd.path().join("sandbox.toml"))
        .args(["run", "-w", grant.path().to_str().unwrap(), "--"])
        .args(["/bin/sh", "-c", &write_script(&outside)])
        .output()
        .unwrap();
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert!(outside.exists(), "the operator's config chose noop");
}

/// The user config is discovered at `.config/sandbox/config.toml` of the
/// passwd home, whatever `$XDG_CONFIG_HOME` says (one there is not read:
/// the run fails naming it and where to move it); as root against a fresh `/root` in a mount
/// namespace of the test's. A user without a usable passwd home (nobody's
/// `/nonexistent`) has it at `$XDG_CONFIG_HOME/sandbox/config.toml`, the
/// documented gap. A named missing config is an error.
#[cfg(target_os = "linux")]
#[test]
fn the_user_config_is_discovered_and_a_named_missing_one_is_an_error() {
    let xdg = tempfile::tempdir().unwrap();
    std::fs::create_dir(xdg.path().join("sandbox")).unwrap();
    let network = |xdg: &Path| {
        let out = sandbox()
            .env("XDG_CONFIG_HOME", xdg)
            .args(["policy"])
            .output()
            .unwrap();
        assert_eq!(code(&out), Some(0), "{}", stderr(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["policy"]["network"].clone()
    };
    let bounded = "[sandbox.policy]\nnetwork = false\n";
    if sandbox_core::home::trusted_home().is_some() {
        if !is_root() {
            cannot_do_its_job(
                "the user config is discovered in the passwd home",
                "needs root (a fresh /root in a mount namespace)",
            );
        } else {
            with_private_mounts(&["/root"], || {
                // An XDG config is not read, nor skipped without a word
                // (its restrictions would be dropped): an error naming it
                // and where the user config is read from.
                let planted = xdg.path().join("sandbox/config.toml");
                std::fs::write(&planted, bounded).unwrap();
                let out = sandbox()
                    .env("XDG_CONFIG_HOME", xdg.path())
                    .args(["policy"])
                    .output()
                    .unwrap();
                assert_eq!(code(&out), Some(125), "{}", stderr(&out));
                let text = stderr(&out);
                assert!(
                    text.contains(&planted.display().to_string())
                        && text.contains("/root/.config/sandbox/config.toml")
                        && text.contains("is not read"),
                    "{text}"
                );
                // Moved to the passwd home: read, and it bounds the policy.
                std::fs::remove_file(&planted).unwrap();
                std::fs::create_dir_all("/root/.config/sandbox").unwrap();
                std::fs::write("/root/.config/sandbox/config.toml", bounded).unwrap();
                assert_eq!(
                    network(xdg.path()),
                    false,
                    "the passwd home's config bounds the policy"
                );
                // The same file through a symlinked home is read, not
                // refused (red team R8 F2); a dangling link where the
                // environment names the config is no config (R8 F3).
                let link = xdg.path().join("home-link");
                std::os::unix::fs::symlink("/root", &link).unwrap();
                let out = sandbox()
                    .env_remove("XDG_CONFIG_HOME")
                    .env("HOME", &link)
                    .args(["policy"])
                    .output()
                    .unwrap();
                assert_eq!(code(&out), Some(0), "{}", stderr(&out));
                let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
                assert_eq!(v["policy"]["network"], false);
                std::os::unix::fs::symlink("/nonexistent-target", &planted).unwrap();
                assert_eq!(network(xdg.path()), false, "a dangling link failed the run");
            })
            .expect("a mount namespace with a tmpfs on /root (root)");
        }
    } else {
        std::fs::write(xdg.path().join("sandbox/config.toml"), bounded).unwrap();
        assert_eq!(
            network(xdg.path()),
            false,
            "the user config bounds the policy"
        );
    }
    let out = sandbox()
        .env("SANDBOX_CONFIG", xdg.path().join("typo.toml"))
        .args(["run", "--", "/bin/true"])
        .output()
        .unwrap();
    assert_eq!(code(&out), Some(125));
    one_line(&out, "typo.toml");
}

/// No working backend: an error by default, a warning only when asked for.
#[test]
fn a_missing_backend_is_an_error_by_default() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    // Seatbelt does not exist on Linux.
    let out = run(&[
        "run",
        "--backend",
        "seatbelt",
        "--",
        "/bin/sh",
        "-c",
        &touch,
    ]);
    assert_eq!(code(&out), Some(125), "{}", stderr(&out));
    one_line(&out, "seatbelt");
    assert!(!marker.exists(), "nothing ran");
    let out = run(&[
        "run",
        "--backend",
        "seatbelt",
        "--on-unsupported",
        "warn",
        "--",
        "/bin/sh",
        "-c",
        &touch,
    ]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert!(marker.exists(), "warn was asked for explicitly");
}

#[test]
fn check_fails_when_nothing_is_enforced() {
    let out = run(&["check", "--backend", "noop"]);
    assert_eq!(code(&out), Some(1), "{}", stderr(&out));
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing is enforced"));
    let out = run(&["check", "--json", "--backend", "noop"]);
    assert_eq!(code(&out), Some(1));
    let out = run(&["check"]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
}

#[test]
fn danger_full_access_needs_the_operator() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let touch = format!("touch {}", marker.display());
    let args = [
        "run",
        "--mode",
        "danger-full-access",
        "--",
        "/bin/sh",
        "-c",
        &touch,
    ];
    let out = run(&args);
    assert_eq!(code(&out), Some(125));
    one_line(&out, "allow_danger_full_access");
    assert!(!marker.exists());
    let config = dir.path().join("op.toml");
    std::fs::write(&config, "[sandbox]\nallow_danger_full_access = true\n").unwrap();
    let out = sandbox()
        .env("SANDBOX_CONFIG", &config)
        .args(args)
        .output()
        .unwrap();
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert!(marker.exists());
}

/// Without an operator policy an op envelope is bounded by the built-in
/// bound: writes inside the workspace only, no network. The bound holds
/// whatever is granted: the network declared and pre-approved for the
/// skill (`[permissions.pre_approved]`) is still off.
#[test]
fn an_op_envelope_cannot_widen_itself() {
    let ws = tempfile::tempdir().unwrap();
    let ws_path = std::fs::canonicalize(ws.path()).unwrap();
    let out_dir = ws_path.join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let op = |write: &str, script: &str| {
        let p = ws_path.join("op.json");
        std::fs::write(
            &p,
            serde_json::json!({
                "argv": ["/bin/sh", "-c", script],
                "write_paths": [write],
                "network": true,
            })
            .to_string(),
        )
        .unwrap();
        p
    };
    let marker = out_dir.join("ran");
    let touch = format!("touch {}", marker.display());
    let wide = op("/", &touch);
    let out = run(&[
        "exec-op",
        "--workspace",
        ws_path.to_str().unwrap(),
        "--op",
        wide.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), Some(125), "{}", stderr(&out));
    assert_eq!(sandbox_lines(&out).len(), 1, "{}", stderr(&out));
    assert!(!marker.exists());
    // Twin: a write path inside the workspace runs, and network is off.
    let probe = format!(
        "{touch}; python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 9), timeout=5)' 2>/dev/null && echo NET || echo NONET"
    );
    let narrow = op(out_dir.to_str().unwrap(), &probe);
    let config = ws_path.join("config.toml");
    std::fs::write(
        &config,
        "[permissions.pre_approved]\n\"exec-op/network/*\" = \"allow\"\n",
    )
    .unwrap();
    let out = run(&[
        "exec-op",
        "--config",
        config.to_str().unwrap(),
        "--workspace",
        ws_path.to_str().unwrap(),
        "--op",
        narrow.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert!(marker.exists());
    assert!(String::from_utf8_lossy(&out.stdout).contains("NONET"));
}

#[test]
fn a_config_inside_a_write_path_is_refused() {
    let w = tempfile::tempdir().unwrap();
    let config = w.path().join("config.toml");
    std::fs::write(&config, "[sandbox]\n").unwrap();
    let marker = w.path().join("ran");
    let touch = format!("touch {}", marker.display());
    let args = |write: &Path| {
        vec![
            "run".to_owned(),
            "--config".into(),
            config.to_str().unwrap().into(),
            "-w".into(),
            write.to_str().unwrap().into(),
            "--".into(),
            "/bin/sh".into(),
            "-c".into(),
            touch.clone(),
        ]
    };
    let out = sandbox().args(args(w.path())).output().unwrap();
    assert_eq!(code(&out), Some(125), "{}", stderr(&out));
    one_line(&out, "lies inside a write path");
    assert!(!marker.exists());
    let other = tempfile::tempdir().unwrap();
    let out = sandbox().args(args(other.path())).output().unwrap();
    // The twin runs (the touch itself is refused: W is not writable then;
    // the one line after that failure says such writes are not recorded).
    assert_ne!(code(&out), Some(125), "{}", stderr(&out));
    assert!(
        sandbox_lines(&out)
            .iter()
            .all(|l| l.contains("the kernel refused are not recorded in this mode")),
        "{}",
        stderr(&out)
    );
}

#[test]
fn usage_errors_exit_125_with_one_line_and_help_exits_0() {
    for args in [
        &["run", "--no-such-flag", "--", "/bin/true"][..],
        &["frobnicate"],
        &["run", "--timeout", "soon", "--", "/bin/true"],
        &[],
    ] {
        let out = run(args);
        assert_eq!(code(&out), Some(125), "{args:?}: {}", stderr(&out));
        assert_eq!(sandbox_lines(&out).len(), 1, "{args:?}: {}", stderr(&out));
    }
    for args in [&["--help"][..], &["--version"], &["run", "--help"]] {
        let out = run(args);
        assert_eq!(code(&out), Some(0), "{args:?}");
        assert!(!out.stdout.is_empty());
    }
}

/// The self-test's cached verdict lives only in the runtime directory
/// (`/run/sandbox` for root, `/run/user/UID/sandbox` for others), and no
/// confined run can write it, even one granted the whole of that directory.
/// As root, and as nobody with a runtime directory of its own (made on a
/// tmpfs over `/run/user` in a mount namespace of the test's, so the host's
/// is untouched). Twin: a file beside the cache is written by the same run.
#[cfg(target_os = "linux")]
#[test]
fn no_confined_run_can_forge_the_cached_verdict() {
    if !is_root() {
        cannot_do_its_job(
            "no_confined_run_can_forge_the_cached_verdict",
            "needs root (/run/sandbox, and setpriv for nobody's /run/user/65534)",
        );
        return;
    }
    forge_the_verdict(Path::new("/run"), sandbox, "root");
    with_private_mounts(&["/run/user"], || {
        let base = Path::new("/run/user/65534");
        std::fs::create_dir(base).unwrap();
        std::fs::set_permissions(base, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::os::unix::fs::chown(base, Some(65534), Some(65534)).unwrap();
        forge_the_verdict(base, sandbox_as_nobody, "nobody");
    })
    .expect("a mount namespace with a tmpfs on /run/user (root)");
}

#[cfg(target_os = "linux")]
/// A run granted `base` (`cli`'s runtime directory) tries to overwrite the
/// verdict file in `base/sandbox` and to add one beside it, and writes a
/// file in a directory beside the cache.
fn forge_the_verdict(base: &Path, cli: fn() -> std::process::Command, who: &str) {
    // A first run fills the cache.
    let out = cli().args(["run", "--", "/bin/true"]).output().unwrap();
    assert_eq!(code(&out), Some(0), "{who}: {}", stderr(&out));
    let cache = base.join("sandbox");
    let verdict = std::fs::read_dir(&cache)
        .unwrap_or_else(|e| panic!("{who}: {cache:?}: {e}"))
        .flatten()
        .map(|e| e.path())
        .find(|p| p.to_string_lossy().contains("gate-landlock-"))
        .unwrap_or_else(|| panic!("{who}: a verdict file in {cache:?}"));
    let before = std::fs::read(&verdict).unwrap();
    assert!(
        String::from_utf8_lossy(&before).ends_with("passed\n"),
        "{who}: the target is a recorded verdict: {before:?}"
    );
    let twin = tempfile::tempdir_in(base).unwrap();
    std::os::unix::fs::chown(twin.path(), Some(owner(base)), None).unwrap();
    let new = cache.join(format!("new-{}", std::process::id()));
    let script = format!(
        "echo forged > {v}; echo forged > {n}; echo ok > {t}/other",
        v = verdict.display(),
        n = new.display(),
        t = twin.path().display()
    );
    let out = cli()
        .arg("run")
        .arg("-w")
        .arg(base)
        .args(["--", "/bin/sh", "-c", &script])
        .output()
        .unwrap();
    let created = new.exists();
    let _ = std::fs::remove_file(&new);
    assert_ne!(code(&out), Some(125), "{who}: {}", stderr(&out));
    // The twin write beside the cache happened; the cache did not change.
    assert_eq!(
        std::fs::read_to_string(twin.path().join("other"))
            .ok()
            .as_deref(),
        Some("ok\n"),
        "{who}: {}",
        stderr(&out)
    );
    assert_eq!(std::fs::read(&verdict).unwrap(), before, "{who}");
    assert!(!created, "{who}: a file was added to {cache:?}");
}

#[cfg(target_os = "linux")]
fn owner(p: &Path) -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).unwrap().uid()
}

/// Without a runtime directory (CI containers, no login session) nothing is
/// cached in the `$HOME` a run names (a run may write it): only the passwd
/// home's `.cache` would hold it, and nobody's is `/nonexistent`.
#[test]
fn without_a_runtime_dir_an_unprivileged_user_caches_nothing() {
    let home = tempfile::tempdir().unwrap();
    std::fs::set_permissions(home.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let bin = sandbox_tests::sandbox_bin();
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&bin)
        .args(["run", "-w"])
        .arg(home.path())
        .args(["--", "/bin/sh", "-c", "echo ok > \"$HOME/ran\""])
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("XDG_CACHE_HOME")
        .env_remove("SANDBOX_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent/sandbox-tests-config")
        .env("HOME", home.path())
        .current_dir("/")
        .output()
        .expect("setpriv (util-linux) runs the CLI as nobody");
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert!(home.path().join("ran").exists(), "the run itself worked");
    assert!(
        !home.path().join(".cache").exists(),
        "nothing cached in $HOME"
    );
}

/// With the home directory as the workspace and no user config yet, the
/// command must not create the config that every later run loads (here
/// `backend = "noop"` with `on_unsupported = "ignore"`: no confinement at
/// all): the user config directory is write-denied wherever a write path
/// reaches it, existing or not. Twin: the rest of `~/.config` stays
/// writable, and a later run stays confined.
#[test]
fn a_run_cannot_create_the_config_of_the_next_run() {
    let home = tempfile::tempdir().unwrap();
    let home = std::fs::canonicalize(home.path()).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let marker = outside.path().join("unconfined");
    let run_in_home = |script: &str| {
        sandbox()
            .args(["run", "--mode", "workspace-write", "--workspace", "."])
            .args(["--", "/bin/sh", "-c", script])
            .current_dir(&home)
            .env("HOME", &home)
            .env_remove("XDG_CONFIG_HOME")
            .output()
            .unwrap()
    };
    let plant = "mkdir -p .config/sandbox && \
                 printf '[sandbox]\\nbackend = \"noop\"\\non_unsupported = \"ignore\"\\n' \
                 > .config/sandbox/config.toml";
    for attack in [
        plant.to_owned(),
        "mkdir -p x && echo '[sandbox]' > x/config.toml && mkdir -p .config && mv x .config/sandbox"
            .to_owned(),
        format!("ln -s {} .config/sandbox", outside.path().display()),
    ] {
        let out = run_in_home(&attack);
        assert_ne!(code(&out), Some(0), "{attack}: {}", stderr(&out));
        assert!(
            std::fs::symlink_metadata(home.join(".config/sandbox")).is_err(),
            "{attack} made the config directory"
        );
    }
    // A later run from the same home stays confined.
    let out = run_in_home(&format!("touch {}", marker.display()));
    assert!(!marker.exists(), "{}", stderr(&out));
    // Twin: another directory in ~/.config is writable.
    let out = run_in_home("mkdir -p .config/other && echo x > .config/other/f");
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
}

/// A run inside a run without the nest capability (its variable removed:
/// `tests/tests/it/nested.rs` has the runs that use it) is refused, closed,
/// with the real cause (the outer run's seccomp filter answers Landlock's
/// calls), not "disabled at boot"; as root and as nobody. Twin: the same
/// inner command outside the run works and confines.
#[cfg(target_os = "linux")]
#[test]
fn a_run_inside_a_run_fails_naming_the_enclosing_filter() {
    let w = tempfile::tempdir().unwrap();
    std::fs::set_permissions(w.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let inner = |cmd: &mut std::process::Command| {
        cmd.arg("run")
            .arg("-w")
            .arg(w.path())
            .arg("--")
            .arg("/bin/sh")
            .arg("-c")
            .arg(format!("touch {}/made", w.path().display()));
    };
    for nobody in [false, true] {
        let ctx = format!("nobody={nobody}");
        let outer = || {
            if nobody {
                sandbox_as_nobody()
            } else {
                sandbox()
            }
        };
        // Twin: the inner run alone.
        let mut alone = outer();
        inner(&mut alone);
        let out = alone.output().unwrap();
        assert_eq!(code(&out), Some(0), "{ctx}: {}", stderr(&out));
        std::fs::remove_file(w.path().join("made")).unwrap();
        let mut nested = outer();
        nested
            .arg("run")
            .arg("-w")
            .arg(w.path())
            .arg("--")
            .args(["env", "-u", "SANDBOX_NEST_FD"])
            .arg(sandbox_tests::sandbox_bin());
        inner(&mut nested);
        let out = nested.output().unwrap();
        let err = stderr(&out);
        assert_eq!(code(&out), Some(125), "{ctx}: {err}");
        assert!(err.contains("seccomp filter"), "{ctx}: {err}");
        assert!(
            err.contains("a sandbox run inside a run is not supported"),
            "{ctx}: {err}"
        );
        assert!(!err.contains("lsm="), "{ctx}: {err}");
        assert!(!w.path().join("made").exists(), "{ctx}: nothing ran");
    }
}
