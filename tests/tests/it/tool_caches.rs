//! `--cache TOOL`: a private, persistent cache per package tool, kept
//! between runs of one trust domain (the same write roots), while the
//! user's own caches stay out of the run's reach; a cache directory
//! replaced by a symlink is refused, never followed; what a run on one
//! workspace leaves in its caches no run on another sees.

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

/// `sandbox-tools/<key>` of the runs that may write `roots`.
fn keyed(home: &Path, roots: &[&Path]) -> PathBuf {
    let key = sandbox::runner::CacheKey::of_write_roots(roots.iter().map(|r| r.to_path_buf()));
    home.join(".cache/sandbox-tools").join(key.as_str())
}

/// What one run leaves in its npm cache the next run reads; the tool's
/// variable names the cache; the user's own `~/.npm` stays unwritable.
/// Twin: the write into the cache succeeds in the same run as the refused
/// one.
#[test]
fn a_tool_cache_persists_and_the_users_cache_stays_untouched() {
    let (_t, home) = home();
    std::fs::create_dir(home.join(".npm")).unwrap();
    // A run with no write path: the key of no roots.
    let cache = keyed(&home, &[]).join("npm");
    let out = run(
        &home,
        &["--cache", "npm"],
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
    let out = run(
        &home,
        &["--cache", "npm"],
        "cat \"$npm_config_cache/probe\"",
    );
    assert_eq!(stdout(&out), "v1\n");
    // Without --cache, the same run has neither the variable nor the grant.
    let out = run(&home, &[], &format!("echo v2 > {}/probe", cache.display()));
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
    let tools = keyed(&home, &[]);
    std::fs::create_dir_all(&tools).unwrap();
    std::os::unix::fs::symlink(&target, tools.join("pip")).unwrap();
    let out = run(&home, &["--cache", "pip"], "echo x > \"$PIP_CACHE_DIR/f\"");
    assert_eq!(out.status.code(), Some(125));
    let lines = sandbox_lines(&out);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains("is a symlink"), "{lines:?}");
    assert!(!target.join("f").exists());
    std::fs::remove_file(tools.join("pip")).unwrap();
    let out = run(&home, &["--cache", "pip"], "echo x > \"$PIP_CACHE_DIR/f\"");
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
    let out = run(
        &home,
        &["--config", config.to_str().unwrap()],
        "echo $CARGO_HOME; touch \"$CARGO_HOME/ok\" && echo OK",
    );
    let text = stdout(&out);
    assert!(
        text.contains(keyed(&home, &[]).join("cargo").to_str().unwrap()) && text.contains("OK"),
        "{text}"
    );
    let bad = home.join("bad.toml");
    std::fs::write(&bad, "[sandbox]\ncaches = [\"maven\"]\n").unwrap();
    let out = run(&home, &["--config", bad.to_str().unwrap()], "true");
    assert_eq!(out.status.code(), Some(125));
    assert!(sandbox_lines(&out)[0].contains("unknown tool cache \"maven\""));
}

/// A cache base on a kernel filesystem (where `mkdir` makes a cgroup) is
/// refused, and nothing is left there. Twin: a real base works.
#[test]
fn a_cache_on_a_kernel_filesystem_is_refused() {
    let (_t, home) = home();
    let out = sandbox()
        .args(["run", "--cache", "npm", "--", "/bin/true"])
        .env("HOME", &home)
        .env("XDG_CACHE_HOME", "/sys/fs/cgroup/pids")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125));
    assert!(!Path::new("/sys/fs/cgroup/pids/sandbox-tools").exists());
    let out = run(&home, &["--cache", "npm"], "true");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A symlink on the way to the caches (`~/.cache` pointing elsewhere, as an
/// earlier run that could write `$HOME` might leave) is refused, never
/// followed; and no run that can write `~/.cache` can swap the caches'
/// directory for one. Twin: that run writes elsewhere in `~/.cache`.
#[test]
fn the_way_to_the_caches_cannot_be_redirected() {
    let (_t, home) = home();
    let elsewhere = home.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, home.join(".cache")).unwrap();
    let out = run(&home, &["--cache", "pip"], "true");
    assert_eq!(out.status.code(), Some(125));
    assert!(
        sandbox_lines(&out)[0].contains("is a symlink on the way"),
        "{:?}",
        sandbox_lines(&out)
    );
    assert!(!elsewhere.join("sandbox-tools").exists());

    std::fs::remove_file(home.join(".cache")).unwrap();
    let out = run(&home, &["--cache", "pip"], "true");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cache = home.join(".cache");
    let out = run(
        &home,
        &["-w", cache.to_str().unwrap()],
        "mv \"$HOME/.cache/sandbox-tools\" \"$HOME/.cache/moved\" && echo MOVED; \
         ln -s / \"$HOME/.cache/sandbox-tools/npm\" && echo LINKED; \
         echo x > \"$HOME/.cache/other\" && echo WROTE",
    );
    let text = stdout(&out);
    assert!(text.contains("WROTE"), "{text}");
    assert!(
        !text.contains("MOVED") && !text.contains("LINKED"),
        "{text}"
    );
    assert!(keyed(&home, &[]).join("pip").is_dir());
}

/// A run whose write paths hold the caches' directory (`-w ~/.cache`, a
/// workspace that is the home directory) could make another domain's key
/// directory and plant a cache there: `--cache npm` is refused naming the
/// write path, the default caches are left out with one line, and the
/// whole caches' directory stays write-denied (no key directory made, no
/// cache written, nothing moved). Twin: the same run writes elsewhere in
/// `~/.cache`, and without `-w ~/.cache` it is given the npm cache.
#[test]
fn a_run_that_may_write_the_caches_directory_gets_no_cache() {
    let (_t, home) = home();
    let cache = home.join(".cache");
    let pip = keyed(&home, &[]).join("pip");
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
    // The key a run on workspace `ws` would have: predictable, so a run that
    // may write the caches' directory must not be able to make it.
    let ws = home.join("ws");
    std::fs::create_dir(&ws).unwrap();
    let victim = keyed(&home, &[&ws]);
    let out = sandbox()
        .args(["run", "--mode", "workspace-write", "--workspace"])
        .arg(&home)
        .args(["--", "/bin/sh", "-c"])
        .arg(format!(
            "echo \"npm=$npm_config_cache\"; \
             mkdir -p {v}/cargo && echo MADE; \
             echo x > {pip}/planted && echo PIP; \
             mv \"$HOME/.cache/sandbox-tools\" \"$HOME/.cache/moved\" && echo MOVED; \
             echo x > \"$HOME/.cache/other\" && echo OTHER",
            v = victim.display(),
            pip = pip.display()
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
        &["--cache", "npm"],
        "echo v > \"$npm_config_cache/probe\" && echo NPM",
    );
    assert!(stdout(&out).contains("NPM"), "{}", stdout(&out));
    assert!(keyed(&home, &[]).join("npm/probe").exists());
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
