//! `--cache TOOL`: a private, persistent cache per package tool, kept
//! between runs, while the user's own caches stay out of the run's reach;
//! a cache directory replaced by a symlink is refused, never followed.

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

/// What one run leaves in its npm cache the next run reads; the tool's
/// variable names the cache; the user's own `~/.npm` stays unwritable.
/// Twin: the write into the cache succeeds in the same run as the refused
/// one.
#[test]
fn a_tool_cache_persists_and_the_users_cache_stays_untouched() {
    let (_t, home) = home();
    std::fs::create_dir(home.join(".npm")).unwrap();
    let cache = home.join(".cache/sandbox-tools/npm");
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
    let tools = home.join(".cache/sandbox-tools");
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
        text.contains(".cache/sandbox-tools/cargo") && text.contains("OK"),
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
    assert!(cache.join("sandbox-tools/pip").is_dir());
}

/// `--cache npm` with `-w ~/.cache`: the npm cache stays writable (it is a
/// write path of its own), while the caches' directory itself and every
/// other tool's cache stay protected. Before the fix the whole
/// `sandbox-tools` was write-denied, the npm cache with it.
#[test]
fn a_tool_cache_stays_writable_beside_a_write_path_above_it() {
    let (_t, home) = home();
    let cache = home.join(".cache");
    std::fs::create_dir_all(cache.join("sandbox-tools/pip")).unwrap();
    let out = run(
        &home,
        &["--cache", "npm", "-w", cache.to_str().unwrap()],
        "echo v > \"$npm_config_cache/probe\" && echo NPM; \
         echo x > \"$HOME/.cache/other\" && echo OTHER; \
         echo x > \"$HOME/.cache/sandbox-tools/pip/planted\" && echo PIP; \
         mkdir \"$HOME/.cache/sandbox-tools/cargo\" && echo CARGO; \
         mv \"$HOME/.cache/sandbox-tools\" \"$HOME/.cache/moved\" && echo MOVED; \
         true",
    );
    let text = stdout(&out);
    assert!(text.contains("NPM") && text.contains("OTHER"), "{text}");
    assert!(
        !text.contains("PIP") && !text.contains("CARGO") && !text.contains("MOVED"),
        "{text}"
    );
    assert!(cache.join("sandbox-tools/npm/probe").exists());
    assert!(!cache.join("sandbox-tools/pip/planted").exists());
    // Twin: without --cache, the whole caches' directory stays protected.
    let out = run(
        &home,
        &["-w", cache.to_str().unwrap()],
        "echo v > \"$HOME/.cache/sandbox-tools/npm/probe2\" && echo NPM; true",
    );
    assert!(!stdout(&out).contains("NPM"), "{}", stdout(&out));
}
