//! `--cache TOOL`: a private, persistent cache per package tool, kept
//! between runs of one trust domain (the same write roots), while the
//! user's own caches stay out of the run's reach; a cache directory
//! replaced by a symlink is refused, never followed; what a run on one
//! workspace leaves in its caches no run on another sees.
//!
//! The caches live beneath the passwd home of the user (root's `/root`),
//! whatever `$HOME` and `$XDG_CACHE_HOME` say; only a user without a
//! usable passwd home (nobody's `/nonexistent`) has them beneath `$HOME`.
//! Each test keys its caches by write roots in a temporary directory of its
//! own, so tests stay apart in root's real `~/.cache`, and removes them.

use std::path::{Path, PathBuf};
use std::process::Output;

use sandbox_tests::{sandbox, sandbox_lines};

fn home() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let p = std::fs::canonicalize(t.path()).unwrap();
    (t, p)
}

fn run(home: &Path, args: &[&str], script: &str) -> Output {
    sandbox()
        .arg("run")
        .args(args)
        .args(["--", "/bin/sh", "-c", script])
        .env("HOME", home)
        .env_remove("XDG_CACHE_HOME")
        .current_dir(home)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The directory the caches' directory lies in for a run with `$HOME` set
/// to `home`: the passwd home's `.cache` when it is usable, else
/// `home/.cache` (and `$XDG_CACHE_HOME` is unset in these runs).
fn cache_base(home: &Path) -> PathBuf {
    sandbox_core::home::trusted_home()
        .unwrap_or_else(|| home.to_owned())
        .join(".cache")
}

/// `sandbox-tools/<key>` of the runs that may write `roots`.
fn keyed(home: &Path, roots: &[&Path]) -> PathBuf {
    let key = sandbox::runner::CacheKey::of_write_roots(roots.iter().map(|r| r.to_path_buf()));
    cache_base(home).join("sandbox-tools").join(key.as_str())
}

/// Removes the key directories it names when dropped (they may lie in the
/// user's real `~/.cache`).
struct Gone(Vec<PathBuf>);

impl Drop for Gone {
    fn drop(&mut self) {
        for dir in &self.0 {
            if std::fs::remove_dir_all(dir).is_err() {
                let _ = std::fs::remove_file(dir);
            }
        }
    }
}

/// A workspace directory `name` inside `home`, and the run arguments that
/// make it the run's one write root.
fn workspace(home: &Path, name: &str) -> (PathBuf, Vec<String>) {
    let ws = home.join(name);
    std::fs::create_dir_all(&ws).unwrap();
    let args = ["--mode", "workspace-write", "--workspace"]
        .into_iter()
        .map(str::to_owned)
        .chain([ws.to_str().unwrap().to_owned()])
        .collect();
    (ws, args)
}

fn strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// What one run leaves in its npm cache the next run reads; the tool's
/// variable names the cache; the user's own `~/.npm` stays unwritable.
/// Twin: the write into the cache succeeds in the same run as the refused
/// one.
#[test]
fn a_tool_cache_persists_and_the_users_cache_stays_untouched() {
    let (_t, home) = home();
    std::fs::create_dir(home.join(".npm")).unwrap();
    let (ws, ws_args) = workspace(&home, "ws");
    let _gone = Gone(vec![keyed(&home, &[&ws])]);
    let cache = keyed(&home, &[&ws]).join("npm");
    let with_cache = [strs(&ws_args), vec!["--cache", "npm"]].concat();
    let out = run(
        &home,
        &with_cache,
        "echo v1 > \"$npm_config_cache/probe\" && echo CACHED; echo x > \"$HOME/.npm/planted\" && echo PLANTED; echo $npm_config_cache",
    );
    let text = stdout(&out);
    assert!(
        text.contains("CACHED"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains("PLANTED"), "{text}");
    assert!(text.contains(cache.to_str().unwrap()), "{text}");
    assert!(!home.join(".npm/planted").exists());
    let out = run(&home, &with_cache, "cat \"$npm_config_cache/probe\"");
    assert_eq!(stdout(&out), "v1\n");
    // Without --cache (nor the default caches), the same run has neither
    // the variable nor the grant.
    let out = run(
        &home,
        &[strs(&ws_args), vec!["--no-default-caches"]].concat(),
        &format!("echo v2 > {}/probe", cache.display()),
    );
    assert_ne!(out.status.code(), Some(0));
    assert_eq!(
        std::fs::read_to_string(cache.join("probe")).unwrap(),
        "v1\n"
    );
}

/// A cache directory that is a symlink (as a run that could write
/// `~/.cache/sandbox-tools` could leave one) is refused with one line, and
/// its target is not made writable. Twin: once it is a directory again,
/// the run goes ahead.
#[test]
fn a_cache_replaced_by_a_symlink_is_refused() {
    let (_t, home) = home();
    let target = home.join("elsewhere");
    std::fs::create_dir(&target).unwrap();
    let (ws, ws_args) = workspace(&home, "ws");
    let tools = keyed(&home, &[&ws]);
    let _gone = Gone(vec![tools.clone()]);
    std::fs::create_dir_all(&tools).unwrap();
    std::os::unix::fs::symlink(&target, tools.join("pip")).unwrap();
    let args = [strs(&ws_args), vec!["--cache", "pip"]].concat();
    let out = run(&home, &args, "echo x > \"$PIP_CACHE_DIR/f\"");
    assert_eq!(out.status.code(), Some(125));
    let lines = sandbox_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("is a symlink"), "{lines:?}");
    assert!(!target.join("f").exists());
    std::fs::remove_file(tools.join("pip")).unwrap();
    let out = run(&home, &args, "echo x > \"$PIP_CACHE_DIR/f\"");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(tools.join("pip/f").exists());
}

/// The config's `caches` gives every run the cache, as `--cache` does;
/// an unknown tool is refused naming it.
#[test]
fn config_caches_apply_to_every_run() {
    let (_t, home) = home();
    let config = home.join("config.toml");
    std::fs::write(&config, "[sandbox]\ncaches = [\"cargo\"]\n").unwrap();
    let (ws, ws_args) = workspace(&home, "ws");
    let _gone = Gone(vec![keyed(&home, &[&ws])]);
    let out = run(
        &home,
        &[strs(&ws_args), vec!["--config", config.to_str().unwrap()]].concat(),
        "echo $CARGO_HOME; touch \"$CARGO_HOME/ok\" && echo OK",
    );
    let text = stdout(&out);
    assert!(
        text.contains(keyed(&home, &[&ws]).join("cargo").to_str().unwrap()) && text.contains("OK"),
        "{text}"
    );
    let bad = home.join("bad.toml");
    std::fs::write(&bad, "[sandbox]\ncaches = [\"maven\"]\n").unwrap();
    let out = run(&home, &["--config", bad.to_str().unwrap()], "true");
    assert_eq!(out.status.code(), Some(125));
    assert!(sandbox_lines(&out)[0].contains("unknown tool cache \"maven\""));
}

/// A cache base on a kernel filesystem (where `mkdir` makes a cgroup) is
/// refused, and nothing is left there; with a usable passwd home the
/// environment cannot name one (`$XDG_CACHE_HOME` is not followed: the run
/// is given its cache beneath the passwd home, and nothing is made under
/// the named base either). Twin: a real base works.
#[test]
fn a_cache_on_a_kernel_filesystem_is_refused() {
    let (_t, home) = home();
    let (ws, ws_args) = workspace(&home, "ws");
    let _gone = Gone(vec![keyed(&home, &[&ws])]);
    let out = sandbox()
        .arg("run")
        .args(&ws_args)
        .args([
            "--cache",
            "npm",
            "--",
            "/bin/sh",
            "-c",
            "echo $npm_config_cache",
        ])
        .env("HOME", &home)
        .env("XDG_CACHE_HOME", "/sys/fs/cgroup/pids")
        .output()
        .unwrap();
    assert!(!Path::new("/sys/fs/cgroup/pids/sandbox-tools").exists());
    if sandbox_core::home::trusted_home().is_some() {
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            stdout(&out).trim(),
            keyed(&home, &[&ws]).join("npm").to_str().unwrap()
        );
    } else {
        assert_eq!(out.status.code(), Some(125));
    }
    let out = run(
        &home,
        &[strs(&ws_args), vec!["--cache", "npm"]].concat(),
        "true",
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A symlink on the way to the caches (the key's directory pointing
/// elsewhere, as an earlier run that could write there might leave) is
/// refused, never followed; and no run that can write the directory the
/// caches' directory lies in (`~/.cache`) can swap the caches' directory
/// for one. Twin: that run writes elsewhere in `~/.cache`.
#[test]
fn the_way_to_the_caches_cannot_be_redirected() {
    let (_t, home) = home();
    let (ws, ws_args) = workspace(&home, "ws");
    let keydir = keyed(&home, &[&ws]);
    let base = cache_base(&home);
    let other = base.join(format!("sandbox-test-other-{}", std::process::id()));
    let _gone = Gone(vec![keydir.clone(), other.clone()]);
    let elsewhere = home.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::create_dir_all(keydir.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &keydir).unwrap();
    let args = [strs(&ws_args), vec!["--cache", "pip"]].concat();
    let out = run(&home, &args, "true");
    assert_eq!(out.status.code(), Some(125));
    assert!(
        sandbox_lines(&out)[0].contains("is a symlink on the way"),
        "{:?}",
        sandbox_lines(&out)
    );
    assert!(!elsewhere.join("pip").exists());

    std::fs::remove_file(&keydir).unwrap();
    let out = run(&home, &args, "true");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (b, t, o) = (base.display(), base.join("sandbox-tools"), other.display());
    let t = t.display();
    let out = run(
        &home,
        &["-w", base.to_str().unwrap()],
        &format!(
            "mv \"{t}\" \"{b}/moved-{pid}\" && echo MOVED; \
             ln -s / \"{t}/npm\" && echo LINKED; \
             echo x > \"{o}\" && echo WROTE",
            pid = std::process::id()
        ),
    );
    let text = stdout(&out);
    assert!(text.contains("WROTE"), "{text}");
    assert!(
        !text.contains("MOVED") && !text.contains("LINKED"),
        "{text}"
    );
    assert!(keydir.join("pip").is_dir());
}

/// A run whose write paths hold the caches' directory (`-w ~/.cache`, a
/// workspace that holds it) could make another domain's key directory and
/// plant a cache there: `--cache npm` is refused naming the write path, the
/// default caches are left out with one line, and the whole caches'
/// directory stays write-denied (no key directory made, no cache written,
/// nothing moved). Twin: the same run writes elsewhere in `~/.cache`, and
/// without the write path above it a run is given the npm cache.
#[test]
fn a_run_that_may_write_the_caches_directory_gets_no_cache() {
    let (_t, home) = home();
    let cache = cache_base(&home);
    let (a, a_args) = workspace(&home, "a");
    let (b, _) = workspace(&home, "b");
    let pip = keyed(&home, &[&a]).join("pip");
    // The key a run on workspace `b` would have: predictable, so a run that
    // may write the caches' directory must not be able to make it.
    let victim = keyed(&home, &[&b]);
    let other = cache.join(format!("sandbox-test-other-{}", std::process::id()));
    let _gone = Gone(vec![keyed(&home, &[&a]), victim.clone(), other.clone()]);
    std::fs::create_dir_all(&pip).unwrap();
    let out = run(
        &home,
        &["--cache", "npm", "-w", cache.to_str().unwrap()],
        "echo ran",
    );
    assert_eq!(out.status.code(), Some(125), "{}", stdout(&out));
    let lines = sandbox_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].contains("--cache")
            && lines[0].contains(&format!("write path {}", cache.display())),
        "{lines:?}"
    );
    assert!(!stdout(&out).contains("ran"));
    let out = sandbox()
        .args(["run", "--mode", "workspace-write", "--workspace"])
        .arg(&cache)
        .args(["--", "/bin/sh", "-c"])
        .arg(format!(
            "echo \"npm=$npm_config_cache\"; \
             mkdir -p {v}/cargo && echo MADE; \
             echo x > {pip}/planted && echo PIP; \
             mv \"{c}/sandbox-tools\" \"{c}/moved-{pid}\" && echo MOVED; \
             echo x > \"{o}\" && echo OTHER",
            v = victim.display(),
            pip = pip.display(),
            c = cache.display(),
            o = other.display(),
            pid = std::process::id(),
        ))
        .env("HOME", &home)
        .env_remove("XDG_CACHE_HOME")
        .env_remove("npm_config_cache")
        .env_remove("SANDBOX_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent/sandbox-tests-config")
        .current_dir(&home)
        .output()
        .unwrap();
    let text = stdout(&out);
    let lines = sandbox_lines(&out);
    assert!(
        text.contains("npm=\n") && text.contains("OTHER"),
        "{text}{lines:?}"
    );
    assert!(
        !text.contains("MADE") && !text.contains("PIP") && !text.contains("MOVED"),
        "{text}"
    );
    assert!(!victim.exists() && !pip.join("planted").exists());
    assert!(
        lines.iter().any(|l| l.contains("no private tool caches")),
        "{lines:?}"
    );
    // Twin: without the write path above it, the run is given its cache.
    let out = run(
        &home,
        &[strs(&a_args), vec!["--cache", "npm"]].concat(),
        "echo v > \"$npm_config_cache/probe\" && echo NPM",
    );
    assert!(stdout(&out).contains("NPM"), "{}", stdout(&out));
    assert!(keyed(&home, &[&a]).join("npm/probe").exists());
}

/// Red-team R6b F1: a run on workspace A plants a cargo config and a file
/// in its caches; a run on workspace B is given other directories, where
/// neither is. Positive control: a second run on A finds both (the caches
/// persist within a workspace), and a run on A with one more write path
/// (a wider domain) is given yet another.
#[test]
fn a_cache_planted_in_one_workspace_is_not_seen_from_another() {
    let (_t, home) = home();
    let (a, b) = (home.join("a"), home.join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    let _gone = Gone(vec![
        keyed(&home, &[&a]),
        keyed(&home, &[&b]),
        keyed(&home, &[&a, &b]),
    ]);
    let ws = |w: &Path, extra: &[&str], script: &str| {
        let mut args = vec![
            "--mode",
            "workspace-write",
            "--workspace",
            w.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        run(&home, &args, script)
    };
    let plant = "printf '[build]\\nrustc-wrapper = \"%s/w.sh\"\\n' \"$CARGO_HOME\" \
                 > \"$CARGO_HOME/config.toml\" && echo x > \"$npm_config_cache/planted\" && \
                 echo \"$CARGO_HOME\"";
    let out = ws(&a, &[], plant);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cargo_a = stdout(&out).trim().to_owned();
    assert_eq!(Path::new(&cargo_a), keyed(&home, &[&a]).join("cargo"));
    let look = "echo \"$CARGO_HOME\"; test -e \"$CARGO_HOME/config.toml\" && echo CONFIG; \
                test -e \"$npm_config_cache/planted\" && echo PLANTED; true";
    let out = ws(&b, &[], look);
    let text = stdout(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        text.lines().next(),
        keyed(&home, &[&b]).join("cargo").to_str()
    );
    assert!(!text.contains(&cargo_a), "{text}");
    assert!(
        !text.contains("CONFIG") && !text.contains("PLANTED"),
        "{text}"
    );
    // Run B cannot reach A's cache either.
    let out = ws(
        &b,
        &[],
        &format!("echo y > {cargo_a}/config.toml && echo WROTE; true"),
    );
    assert!(!stdout(&out).contains("WROTE"), "{}", stdout(&out));
    // Positive control: A again sees what it left.
    let out = ws(&a, &[], look);
    let text = stdout(&out);
    assert!(text.starts_with(&format!("{cargo_a}\n")), "{text}");
    assert!(
        text.contains("CONFIG") && text.contains("PLANTED"),
        "{text}"
    );
    // A wider domain (A and B) is another key: it does not see A's plant.
    let out = ws(&a, &["-w", b.to_str().unwrap()], look);
    let text = stdout(&out);
    assert_eq!(
        text.lines().next(),
        keyed(&home, &[&a, &b]).join("cargo").to_str()
    );
    assert!(
        !text.contains("CONFIG") && !text.contains("PLANTED"),
        "{text}"
    );
    // A write path inside the workspace adds nothing: the same key as A's.
    let inner = a.join("sub");
    std::fs::create_dir(&inner).unwrap();
    let out = ws(&a, &["-w", inner.to_str().unwrap()], look);
    assert!(stdout(&out).contains("CONFIG"), "{}", stdout(&out));
}

/// Nested runs key by their own policy: one on the outer run's workspace
/// shares its caches (writes there, and the outer run sees it); a narrower
/// one (a directory inside the workspace) is another domain, whose
/// directory the outer run may not make: its default caches are left out
/// with one line, it cannot write the outer's cache (its tools read it),
/// and no directory of its key appears.
#[cfg(target_os = "linux")]
#[test]
fn a_nested_run_keys_its_caches_by_its_own_write_paths() {
    let (_t, home) = home();
    let ws = home.join("ws");
    let sub = ws.join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    let _gone = Gone(vec![keyed(&home, &[&ws]), keyed(&home, &[&sub])]);
    let bin = sandbox_tests::sandbox_bin();
    let nested = |w: &Path, script: &str| {
        format!(
            "{} run --mode workspace-write --workspace {} -- /bin/sh -c '{script}'",
            bin.display(),
            w.display()
        )
    };
    let script = format!(
        "echo \"outer=$CARGO_HOME\"; {}; {}; ls \"$CARGO_HOME\"",
        nested(
            &ws,
            "echo \"same=$CARGO_HOME\"; touch \"$CARGO_HOME/same\" && echo SAME-WROTE"
        ),
        nested(
            &sub,
            "echo \"narrow=$CARGO_HOME\"; touch \"$CARGO_HOME/narrow\" && echo NARROW-WROTE"
        ),
    );
    let out = run(
        &home,
        &[
            "--mode",
            "workspace-write",
            "--workspace",
            ws.to_str().unwrap(),
        ],
        &script,
    );
    let text = stdout(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    let outer = keyed(&home, &[&ws]).join("cargo");
    let o = outer.display();
    assert!(text.contains(&format!("outer={o}\n")), "{text}{err}");
    // Positive control: the same write roots, the same cache, written.
    assert!(
        text.contains(&format!("same={o}\n")) && text.contains("SAME-WROTE"),
        "{text}{err}"
    );
    assert!(text.lines().any(|l| l == "same"), "{text}");
    // Narrower: no cache of its own, the outer's not writable.
    assert!(!text.contains("NARROW-WROTE"), "{text}{err}");
    assert!(!outer.join("narrow").exists());
    assert!(!keyed(&home, &[&sub]).exists());
    assert_eq!(
        err.lines()
            .filter(|l| l.contains("no private tool caches"))
            .count(),
        1,
        "{err}"
    );
}
