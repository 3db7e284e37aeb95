//! Workspace-write gives every package tool a private cache by default:
//! real tools run with their default cache locations (no variable set by
//! the test) end as they end bare (exit status and standard output), as
//! root and as nobody, while the user's own caches (`~/.npm`,
//! `~/.cache/pip`, `~/.cargo`) are never written. No registry is used: the
//! packages are local (a directory, a wheel, a vendored crate standing in
//! for crates.io). Twin: `--no-default-caches` gives the old behaviour,
//! where `npm pack` fails on the unwritable `~/.npm`.
#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sandbox_tests::{cannot_do_its_job, sandbox_bin};

const NOBODY: u32 = 65534;

#[derive(Clone, Copy, Debug, PartialEq)]
enum User {
    Root,
    Nobody,
}

struct Scene {
    _dir: tempfile::TempDir,
    /// The workspace.
    w: PathBuf,
    /// The user's home directory (outside the workspace), owned by the user.
    home: PathBuf,
}

/// A scene made by `setup`, owned by `user`.
fn scene(user: User, setup: &dyn Fn(&Path)) -> Scene {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let (w, home) = (root.join("w"), root.join("home"));
    std::fs::create_dir(&w).unwrap();
    std::fs::create_dir(&home).unwrap();
    setup(&w);
    if user == User::Nobody {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
        let st = Command::new("chown")
            .args(["-R", &format!("{NOBODY}:{NOBODY}")])
            .arg(&w)
            .arg(&home)
            .status()
            .unwrap();
        assert!(st.success());
    }
    Scene { _dir: dir, w, home }
}

/// Runs `script` with `sh -c` in `s.w` as `user`: bare when `confined` is
/// `None`, else under workspace-write with these extra flags. `path` goes
/// first on `$PATH` (a toolchain's `bin`).
fn sh(s: &Scene, user: User, confined: Option<&[&str]>, path: &str, script: &str) -> Output {
    sh_in(s, &s.w, user, confined, path, script)
}

/// [`sh`] with `w` as the workspace (and working directory) instead.
fn sh_in(
    s: &Scene,
    w: &Path,
    user: User,
    confined: Option<&[&str]>,
    path: &str,
    script: &str,
) -> Output {
    let mut cmd = match user {
        User::Root => Command::new("/bin/sh"),
        User::Nobody => {
            let mut c = Command::new("setpriv");
            c.args([
                &format!("--reuid={NOBODY}"),
                &format!("--regid={NOBODY}"),
                "--clear-groups",
                "--",
                "/bin/sh",
            ]);
            c
        }
    };
    if let Some(extra) = confined {
        cmd = match user {
            User::Root => Command::new(sandbox_bin()),
            User::Nobody => {
                let mut c = Command::new("setpriv");
                c.args([
                    &format!("--reuid={NOBODY}"),
                    &format!("--regid={NOBODY}"),
                    "--clear-groups",
                    "--",
                ])
                .arg(sandbox_bin());
                c
            }
        };
        cmd.args(["run", "--mode", "workspace-write", "--workspace"])
            .arg(w)
            .args(extra)
            .args(["--", "/bin/sh"]);
    }
    let old = std::env::var("PATH").unwrap_or_default();
    cmd.args(["-c", script])
        .current_dir(w)
        .env_remove("SANDBOX_CONFIG")
        .env_remove("XDG_CACHE_HOME")
        .env_remove("CARGO_HOME")
        .env_remove("RUSTUP_TOOLCHAIN")
        .env_remove("npm_config_cache")
        .env_remove("PIP_CACHE_DIR")
        .env("XDG_CONFIG_HOME", "/nonexistent/sandbox-tests-config")
        .env("HOME", &s.home)
        .env("PATH", format!("{path}:{old}"))
        // npm's update check would ask the registry.
        .env("npm_config_update_notifier", "false")
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Every entry in `home` but the sandbox's own tool caches, with its size
/// and modification time (a file's).
fn snapshot(home: &Path) -> Vec<(PathBuf, u64, i64)> {
    use std::os::unix::fs::MetadataExt;
    fn walk(dir: &Path, skip: &Path, out: &mut Vec<(PathBuf, u64, i64)>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            // The runner makes `~/.cache` for its tool caches when missing.
            if p == skip || p == skip.parent().unwrap() && p.is_dir() {
                if p != skip {
                    walk(&p, skip, out);
                }
                continue;
            }
            let m = std::fs::symlink_metadata(&p).unwrap();
            // A directory's own times change with what is made in it
            // (`~/.cache` with `sandbox-tools`): its entries say that.
            let (size, mtime) = if m.is_dir() {
                (0, 0)
            } else {
                (m.size(), m.mtime())
            };
            out.push((p.clone(), size, mtime));
            if m.is_dir() {
                walk(&p, skip, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(home, &home.join(".cache/sandbox-tools"), &mut out);
    out.sort();
    out
}

/// Runs `script` bare and under workspace-write (each in a fresh scene made
/// by `setup`, as `user`) and asserts both end the same; the confined run
/// leaves the home directory as it was, but for the private tool caches,
/// and uses the one named `cache`.
fn same(
    name: &str,
    user: User,
    path: &str,
    setup: &dyn Fn(&Path),
    script: &str,
    cache: Option<&str>,
) {
    let bare_scene = scene(user, setup);
    let bare = sh(&bare_scene, user, None, path, script);
    assert!(
        bare.status.success(),
        "{name} {user:?}: the workload fails bare, so it proves nothing:\n{}",
        text(&bare)
    );
    let s = scene(user, setup);
    let _gone = Gone(vec![cache_dir(user, &s.home, &s.w)]);
    let before = snapshot(&s.home);
    let got = sh(&s, user, Some(&[]), path, script);
    let strip = |o: &Output, s: &Scene| {
        String::from_utf8_lossy(&o.stdout)
            .replace(&s.w.display().to_string(), "W")
            .replace(&s.home.display().to_string(), "HOME")
    };
    assert_eq!(
        (got.status.code(), strip(&got, &s)),
        (bare.status.code(), strip(&bare, &bare_scene)),
        "{name} {user:?}:\nconfined: {}\nbare: {}",
        text(&got),
        text(&bare)
    );
    assert_eq!(
        snapshot(&s.home),
        before,
        "{name} {user:?}: the user's own caches were written"
    );
    let Some(cache) = cache else {
        return;
    };
    let private = cache_dir(user, &s.home, &s.w).join(cache);
    assert!(
        std::fs::read_dir(&private).is_ok_and(|mut d| d.next().is_some()),
        "{name} {user:?}: nothing in {}",
        private.display()
    );
}

/// The directory of the tool caches of the runs of `user` whose one write
/// root is `w` (the workspace): `sandbox-tools/<key>` beneath the passwd
/// home's `.cache` (root's), whatever `$HOME` says; beneath `home/.cache`
/// (the run's `$HOME`) for nobody, whose passwd home (`/nonexistent`) is
/// no usable directory.
fn cache_dir(user: User, home: &Path, w: &Path) -> PathBuf {
    let key = sandbox::runner::CacheKey::of_write_roots([w.to_path_buf()]);
    let base = match user {
        User::Root => sandbox_core::home::trusted_home().unwrap_or_else(|| home.to_owned()),
        User::Nobody => home.to_owned(),
    };
    base.join(".cache/sandbox-tools").join(key.as_str())
}

/// Removes the cache directories it names when dropped (root's lie in its
/// real `~/.cache`).
struct Gone(Vec<PathBuf>);

impl Drop for Gone {
    fn drop(&mut self) {
        for dir in &self.0 {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Whether the runs as nobody can be made here (setpriv and chown need
/// root); says so when not.
fn as_nobody_here(test: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        cannot_do_its_job(test, "running as nobody needs root");
        return false;
    }
    true
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A local package to install and pack, and an app to install it into.
fn npm_scene(w: &Path) {
    let pkg = w.join("pkg");
    std::fs::create_dir_all(pkg.join("lib")).unwrap();
    std::fs::write(
        pkg.join("package.json"),
        r#"{"name":"pkg","version":"1.0.0","main":"lib/index.js"}"#,
    )
    .unwrap();
    std::fs::write(pkg.join("lib/index.js"), "module.exports='pkg ok';\n").unwrap();
    std::fs::create_dir(w.join("app")).unwrap();
    std::fs::write(
        w.join("app/package.json"),
        r#"{"name":"app","version":"1.0.0"}"#,
    )
    .unwrap();
}

const NPM: &str = "cd pkg && npm pack --loglevel=error && cd ../app && \
     npm install --no-audit --no-fund --loglevel=error ../pkg/pkg-1.0.0.tgz >/dev/null && \
     node -e 'console.log(require(\"pkg\"))'";

fn npm_install_and_pack(user: User) {
    if user == User::Nobody && !as_nobody_here("npm as nobody") {
        return;
    }
    assert!(have("npm"), "npm is not installed: .ci/run installs it");
    same("npm", user, "/nonexistent", &npm_scene, NPM, Some("npm"));
}

#[test]
fn npm_install_and_pack_with_the_default_cache_as_root() {
    npm_install_and_pack(User::Root);
}

#[test]
fn npm_install_and_pack_with_the_default_cache_as_nobody() {
    npm_install_and_pack(User::Nobody);
}

/// Twin: without the default caches, `npm pack` fails as it did (npm cannot
/// write `~/.npm`), and `~/.npm` stays as it was.
#[test]
fn without_default_caches_npm_pack_finds_its_cache_unwritable() {
    for user in [User::Root, User::Nobody] {
        if user == User::Nobody && !as_nobody_here("npm without default caches as nobody") {
            continue;
        }
        let s = scene(user, &npm_scene);
        std::fs::create_dir(s.home.join(".npm")).unwrap();
        let before = snapshot(&s.home);
        let got = sh(
            &s,
            user,
            Some(&["--no-default-caches"]),
            "/nonexistent",
            "cd pkg && npm pack --loglevel=error",
        );
        assert_ne!(got.status.code(), Some(0), "{user:?}: {}", text(&got));
        assert_eq!(snapshot(&s.home), before, "{user:?}");
        assert!(!s.home.join(".cache/sandbox-tools").exists(), "{user:?}");
    }
}

/// A wheel made by hand (no build backend, no index).
fn pip_scene(w: &Path) {
    let st = Command::new("/usr/bin/python3")
        .current_dir(w)
        .args([
            "-c",
            r#"
import base64, hashlib, os, zipfile
os.mkdir("wheels")
files = {
    "localpkg/__init__.py": "VALUE = 'local ok'\n",
    "localpkg-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: localpkg\nVersion: 1.0\n",
    "localpkg-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
for p, c in files.items():
    d = base64.urlsafe_b64encode(hashlib.sha256(c.encode()).digest()).rstrip(b"=").decode()
    record.append(f"{p},sha256={d},{len(c)}")
record.append("localpkg-1.0.dist-info/RECORD,,")
files["localpkg-1.0.dist-info/RECORD"] = "\n".join(record) + "\n"
with zipfile.ZipFile("wheels/localpkg-1.0-py3-none-any.whl", "w") as z:
    for p, c in files.items():
        z.writestr(p, c)
"#,
        ])
        .status()
        .unwrap();
    assert!(st.success());
}

fn pip_install_into_a_venv(user: User) {
    if user == User::Nobody && !as_nobody_here("pip as nobody") {
        return;
    }
    let ok = Command::new("/usr/bin/python3")
        .args(["-c", "import ensurepip"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        return cannot_do_its_job(
            "pip_install_into_a_venv",
            "/usr/bin/python3 has no ensurepip (python3-venv)",
        );
    }
    same(
        "pip",
        user,
        "/nonexistent",
        &pip_scene,
        "/usr/bin/python3 -m venv venv && ./venv/bin/pip install -q --disable-pip-version-check \
         --no-index --find-links wheels localpkg && \
         ./venv/bin/python -c 'import localpkg; print(localpkg.VALUE)'",
        // pip keeps nothing of a local wheel; where it would is asked below.
        None,
    );
    let s = scene(user, &|_| {});
    let got = sh(
        &s,
        user,
        Some(&[]),
        "/nonexistent",
        "/usr/bin/python3 -m pip cache dir",
    );
    assert_eq!(
        String::from_utf8_lossy(&got.stdout).trim(),
        cache_dir(user, &s.home, &s.w).join("pip").to_str().unwrap(),
        "{}",
        text(&got)
    );
}

#[test]
fn pip_install_into_a_venv_with_the_default_cache_as_root() {
    pip_install_into_a_venv(User::Root);
}

#[test]
fn pip_install_into_a_venv_with_the_default_cache_as_nobody() {
    pip_install_into_a_venv(User::Nobody);
}

/// A crate with a registry dependency (`dep = "1"` from crates.io), which a
/// vendored directory source in the project's `.cargo/config.toml`
/// replaces: no network, but cargo resolves it as a registry package and
/// takes its package-cache lock in `CARGO_HOME`.
fn cargo_scene(w: &Path) {
    let c = w.join("c");
    for d in ["src", ".cargo", "vendor/dep/src"] {
        std::fs::create_dir_all(c.join(d)).unwrap();
    }
    let files = [
        (
            "Cargo.toml",
            "[package]\nname = \"c\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
             [dependencies]\ndep = \"1\"\n",
        ),
        (
            ".cargo/config.toml",
            "[source.crates-io]\nreplace-with = \"vendored\"\n\n\
             [source.vendored]\ndirectory = \"vendor\"\n",
        ),
        (
            "vendor/dep/Cargo.toml",
            "[package]\nname = \"dep\"\nversion = \"1.0.0\"\nedition = \"2021\"\n",
        ),
        (
            "vendor/dep/src/lib.rs",
            "pub fn hi() -> &'static str { \"dep ok\" }\n",
        ),
        (
            "vendor/dep/.cargo-checksum.json",
            "{\"files\":{},\"package\":null}\n",
        ),
        (
            "src/main.rs",
            "fn main() { println!(\"{}\", dep::hi()); }\n",
        ),
    ];
    for (path, text) in files {
        std::fs::write(c.join(path), text).unwrap();
    }
}

/// The active toolchain's directory (`rustc --print sysroot`): its `bin`
/// holds cargo and rustc themselves, not rustup's proxies (which would
/// need `RUSTUP_HOME` in root's home).
fn sysroot() -> Option<PathBuf> {
    let out = Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// Runs `f` with the toolchain reachable by nobody: on a thread in a mount
/// namespace of its own, the sysroot bound onto a directory anyone can
/// enter (root's home, where rustup keeps it, is 0700); the processes `f`
/// starts inherit the namespace.
fn with_toolchain_for_nobody(sysroot: &Path, f: impl FnOnce(&Path) + Send) {
    let dir = tempfile::tempdir().unwrap();
    let at = std::fs::canonicalize(dir.path()).unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                use std::ffi::CString;
                use std::os::unix::ffi::OsStrExt;
                let src = CString::new(sysroot.as_os_str().as_bytes()).unwrap();
                let dst = CString::new(at.as_os_str().as_bytes()).unwrap();
                // SAFETY: plain system calls on this thread's own state with
                // NUL-terminated strings alive here.
                unsafe {
                    assert_eq!(libc::unshare(libc::CLONE_NEWNS), 0, "unshare");
                    assert_eq!(
                        libc::mount(
                            std::ptr::null(),
                            c"/".as_ptr(),
                            std::ptr::null(),
                            libc::MS_REC | libc::MS_PRIVATE,
                            std::ptr::null(),
                        ),
                        0,
                        "private /"
                    );
                    assert_eq!(
                        libc::mount(
                            src.as_ptr(),
                            dst.as_ptr(),
                            std::ptr::null(),
                            libc::MS_BIND | libc::MS_REC,
                            std::ptr::null(),
                        ),
                        0,
                        "bind the sysroot: {}",
                        std::io::Error::last_os_error()
                    );
                }
                f(&at)
            })
            .join()
            .unwrap_or_else(|e| std::panic::resume_unwind(e))
    })
}

const CARGO: &str = "cd c && cargo build -q && ./target/debug/c";

#[test]
fn cargo_build_with_a_registry_dependency_and_the_default_cargo_home_as_root() {
    let Some(sysroot) = sysroot() else {
        return cannot_do_its_job("cargo build", "no rustc on PATH");
    };
    let bin = sysroot.join("bin");
    same(
        "cargo",
        User::Root,
        bin.to_str().unwrap(),
        &cargo_scene,
        CARGO,
        Some("cargo"),
    );
}

#[test]
fn cargo_build_with_a_registry_dependency_and_the_default_cargo_home_as_nobody() {
    if !as_nobody_here("cargo as nobody") {
        return;
    }
    let Some(sysroot) = sysroot() else {
        return cannot_do_its_job("cargo build", "no rustc on PATH");
    };
    with_toolchain_for_nobody(&sysroot, |at| {
        let bin = at.join("bin");
        same(
            "cargo",
            User::Nobody,
            bin.to_str().unwrap(),
            &cargo_scene,
            CARGO,
            Some("cargo"),
        );
    });
}

/// Red-team R6b F1: a run on workspace A plants a `rustc-wrapper` in its
/// `CARGO_HOME` (the default cargo cache, which cargo reads
/// `config.toml` from); the user's later `cargo build` on workspace B does
/// not run it: B's `CARGO_HOME` is another directory, where nothing of A's
/// lies, and the build ends as bare. Positive control: a build on
/// workspace A runs the planted wrapper (the cache persists within a
/// workspace, so the plant would have worked had B shared it).
fn a_cargo_config_planted_from_one_workspace(user: User, path: &str) {
    let s = scene(user, &cargo_scene);
    let a = s.w.parent().unwrap().join("a");
    std::fs::create_dir(&a).unwrap();
    cargo_scene(&a);
    let _gone = Gone(vec![
        cache_dir(user, &s.home, &a),
        cache_dir(user, &s.home, &s.w),
    ]);
    if user == User::Nobody {
        let st = Command::new("chown")
            .args(["-R", &format!("{NOBODY}:{NOBODY}")])
            .arg(&a)
            .status()
            .unwrap();
        assert!(st.success());
    }
    let plant = "printf '#!/bin/sh\\necho planted > \"$(pwd)/PWNED\"\\nexec \"$@\"\\n' \
                 > \"$CARGO_HOME/w.sh\" && chmod +x \"$CARGO_HOME/w.sh\" && \
                 printf '[build]\\nrustc-wrapper = \"%s/w.sh\"\\n' \"$CARGO_HOME\" \
                 > \"$CARGO_HOME/config.toml\" && echo \"$CARGO_HOME\"";
    let planted = sh_in(&s, &a, user, Some(&[]), path, plant);
    assert!(planted.status.success(), "{user:?}: {}", text(&planted));
    let home_a = String::from_utf8_lossy(&planted.stdout).trim().to_owned();
    assert_eq!(
        Path::new(&home_a),
        cache_dir(user, &s.home, &a).join("cargo"),
        "{user:?}"
    );
    let pwned = |w: &Path| {
        let out = Command::new("find")
            .arg(w)
            .args(["-name", "PWNED"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    // Workspace B: its own CARGO_HOME, without A's config; the build runs
    // as bare and nothing of A's ran.
    let b = sh(
        &s,
        user,
        Some(&[]),
        path,
        &format!("echo \"$CARGO_HOME\"; test -e \"$CARGO_HOME/config.toml\" && echo SEEN; {CARGO}"),
    );
    let out = String::from_utf8_lossy(&b.stdout).into_owned();
    assert!(b.status.success(), "{user:?}: {}", text(&b));
    assert!(
        out.ends_with("dep ok\n") && !out.contains("SEEN"),
        "{user:?}: {}",
        text(&b)
    );
    let home_b = out.lines().next().unwrap_or_default();
    assert_ne!(home_b, home_a, "{user:?}");
    assert_eq!(
        Path::new(home_b),
        cache_dir(user, &s.home, &s.w).join("cargo")
    );
    assert_eq!(pwned(&s.w), "", "{user:?}: A's wrapper ran in B");
    // Positive control: on workspace A the planted wrapper runs.
    let again = sh_in(&s, &a, user, Some(&[]), path, CARGO);
    assert!(again.status.success(), "{user:?}: {}", text(&again));
    assert!(
        !pwned(&a).is_empty(),
        "{user:?}: the wrapper did not run in A: {}",
        text(&again)
    );
}

#[test]
fn a_cargo_config_planted_from_one_workspace_does_not_run_in_another_as_root() {
    let Some(sysroot) = sysroot() else {
        return cannot_do_its_job("cargo build", "no rustc on PATH");
    };
    a_cargo_config_planted_from_one_workspace(User::Root, sysroot.join("bin").to_str().unwrap());
}

#[test]
fn a_cargo_config_planted_from_one_workspace_does_not_run_in_another_as_nobody() {
    if !as_nobody_here("cargo as nobody") {
        return;
    }
    let Some(sysroot) = sysroot() else {
        return cannot_do_its_job("cargo build", "no rustc on PATH");
    };
    with_toolchain_for_nobody(&sysroot, |at| {
        a_cargo_config_planted_from_one_workspace(User::Nobody, at.join("bin").to_str().unwrap());
    });
}
