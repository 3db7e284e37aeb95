//! The operator's `[sandbox.policy]` bounds only what it sets (#41): a field
//! left out bounds nothing, the runner's own directories for a run (its
//! private `TMPDIR`, the tool caches) are no request a write bound refuses,
//! and the documented example config (docs/config.md) works with every mode and flag. Twins:
//! what a set bound refuses stays refused.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Output};

use sandbox_tests::{assert_exit, sandbox_bin, stderr};

/// Who runs the CLI.
#[derive(Clone, Copy, Debug)]
enum As {
    Root,
    Nobody,
}

/// A scene: a workspace, a cache base and a config, all usable by nobody.
struct Scene {
    _dir: tempfile::TempDir,
    root: PathBuf,
    ws: PathBuf,
    cache: PathBuf,
    config: PathBuf,
}

fn scene(config: &str) -> Scene {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let ws = root.join("ws");
    let cache = root.join("cache");
    for d in [&ws, &cache] {
        std::fs::create_dir(d).unwrap();
    }
    for d in [&root, &ws, &cache] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let config_path = root.join("config.toml");
    std::fs::write(&config_path, config.replace("WS", ws.to_str().unwrap())).unwrap();
    Scene {
        _dir: dir,
        root,
        ws,
        cache,
        config: config_path,
    }
}

/// `sandbox run --config <scene's> <args>` as `who`, from the workspace.
fn run(who: As, s: &Scene, args: &[&str]) -> Output {
    let mut cmd = match who {
        As::Root => Command::new(sandbox_bin()),
        As::Nobody => sandbox_tests::sandbox_as_nobody(),
    };
    cmd.env_remove("SANDBOX_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent/sandbox-tests-config")
        .env("XDG_CACHE_HOME", &s.cache)
        .env_remove("XDG_RUNTIME_DIR")
        .current_dir(&s.ws)
        .arg("run")
        .arg("--config")
        .arg(&s.config)
        .args(args)
        .output()
        .expect("run the CLI")
}

/// The documented example config (the one TOML block of docs/config.md).
fn documented_config() -> String {
    let doc = include_str!("../../../docs/config.md");
    doc.split("```toml\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("docs/config.md has a TOML block")
        .to_owned()
}

fn ws_arg(s: &Scene) -> &str {
    s.ws.to_str().unwrap()
}

/// The documented example config with -w, --mode workspace-write,
/// --private-tmp, --cache npm and --timeout (each alone, then all at once)
/// runs, and the command writes where each gives it. As root and nobody
/// (with `allow_unlimited = true` added where no cgroup holds the config's
/// limits).
/// Twins: a write path outside the config's `write_paths` and a timeout
/// above its ceiling are still refused (125, one clear line).
#[test]
fn the_readme_config_runs_with_every_mode_and_flag() {
    for who in [As::Root, As::Nobody] {
        let config = match who {
            As::Root => documented_config(),
            // The config's [sandbox.limits] need cgroups nobody may not
            // create here, which only the operator may waive
            // (`unheld_limits_refuse_the_run_unless_allowed`).
            As::Nobody => documented_config().replacen(
                "[sandbox]\n",
                "[sandbox]\nallow_unlimited = true\n",
                1,
            ),
        };
        let s = scene(&config);
        let ws = ws_arg(&s);
        let cases: &[(&str, &[&str], &str)] = &[
            ("-w", &["-w", ws], "echo a > \"$W/a\""),
            (
                "--mode workspace-write",
                &["--mode", "workspace-write"],
                "echo b > \"$W/b\" && echo b > \"$TMPDIR/b\"",
            ),
            (
                "--private-tmp",
                &["--private-tmp"],
                "echo c > \"$TMPDIR/c\"",
            ),
            (
                "--cache npm",
                &["--cache", "npm"],
                "echo d > \"$npm_config_cache/d\"",
            ),
            ("--timeout", &["--timeout", "300"], "true"),
            (
                "all of them",
                &[
                    "-w",
                    ws,
                    "--mode",
                    "workspace-write",
                    "--private-tmp",
                    "--cache",
                    "npm",
                    "--timeout",
                    "600",
                ],
                "echo e > \"$W/e\" && echo e > \"$TMPDIR/e\" && echo e > \"$npm_config_cache/e\"",
            ),
        ];
        for (name, flags, script) in cases {
            let mut args = vec!["--workspace", ws];
            args.extend_from_slice(flags);
            let script = script.replace("$W", ws);
            args.extend_from_slice(&["--", "/bin/sh", "-c", &script]);
            let out = run(who, &s, &args);
            assert_eq!(
                out.status.code(),
                Some(0),
                "{who:?} documented config with {name}: {}",
                stderr(&out)
            );
        }
        assert!(s.ws.join("a").exists() && s.ws.join("e").exists());
        // Twin: a write path outside the operator's write paths.
        let outside = s.root.to_str().unwrap();
        let out = run(
            who,
            &s,
            &["--workspace", ws, "-w", outside, "--", "/bin/true"],
        );
        assert_exit(&out, 125);
        assert!(
            stderr(&out).contains("outside the operator's write paths"),
            "{who:?}: {}",
            stderr(&out)
        );
        // Twin: a timeout above the ceiling names the config line.
        let out = run(
            who,
            &s,
            &["--workspace", ws, "--timeout", "1800", "--", "/bin/true"],
        );
        assert_exit(&out, 125);
        assert!(
            stderr(&out).contains("`max_timeout_seconds = 1800` under `[sandbox.policy]`"),
            "{who:?}: {}",
            stderr(&out)
        );
    }
}

/// A config that sets only `max_timeout_seconds` bounds only the timeout:
/// -w runs go, and a longer --timeout is possible. Twins: a timeout above
/// that ceiling is refused, naming the line to raise it; `write_paths = []`
/// set allows no write path.
#[test]
fn a_config_with_only_the_ceiling_bounds_only_the_timeout() {
    for who in [As::Root, As::Nobody] {
        let s = scene("[sandbox.policy]\nmax_timeout_seconds = 3600\n");
        let ws = ws_arg(&s);
        let script = format!("echo x > {ws}/x");
        let out = run(
            who,
            &s,
            &[
                "-w",
                ws,
                "--timeout",
                "1800",
                "--",
                "/bin/sh",
                "-c",
                &script,
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{who:?}: {}", stderr(&out));
        assert!(s.ws.join("x").exists());
        let out = run(
            who,
            &s,
            &[
                "--mode",
                "workspace-write",
                "--workspace",
                ws,
                "--",
                "/bin/true",
            ],
        );
        assert_eq!(out.status.code(), Some(0), "{who:?}: {}", stderr(&out));
        // Twin: above this ceiling.
        let out = run(who, &s, &["-w", ws, "--timeout", "4000", "--", "/bin/true"]);
        assert_exit(&out, 125);
        assert!(
            stderr(&out).contains("`max_timeout_seconds = 4000`"),
            "{who:?}: {}",
            stderr(&out)
        );
        // Twin: an empty write bound, set, allows no write path.
        let closed = scene("[sandbox.policy]\nwrite_paths = []\n");
        let out = run(who, &closed, &["-w", ws_arg(&closed), "--", "/bin/true"]);
        assert_exit(&out, 125);
        assert!(
            stderr(&out).contains("outside the operator's write paths"),
            "{who:?}: {}",
            stderr(&out)
        );
    }
}

/// Without a config, --timeout above the default ceiling (600 s) is refused
/// with the config line that allows it.
#[test]
fn a_timeout_above_the_default_ceiling_names_the_config_line() {
    let out = sandbox_tests::run(&["run", "--timeout", "1800", "--", "/bin/true"]);
    assert_exit(&out, 125);
    let err = stderr(&out);
    assert!(
        err.contains("above the ceiling of 600 s")
            && err.contains("`max_timeout_seconds = 1800` under `[sandbox.policy]`"),
        "{err}"
    );
}
