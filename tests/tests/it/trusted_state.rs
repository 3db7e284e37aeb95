//! Nothing a later run trusts can be written or named by a confined run:
//! each attack beside its allowed twin. The threat table is in the docs of
//! `sandbox::trusted`.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;

#[cfg(target_os = "linux")]
use sandbox_tests::{cannot_do_its_job, with_private_mounts};
use sandbox_tests::{is_root, sandbox, sandbox_as_nobody, sandbox_lines, stderr};

fn code(out: &Output) -> Option<i32> {
    out.status.code()
}

/// Exactly one `sandbox:` line, containing `needle`.
#[track_caller]
fn one_line(out: &Output, needle: &str) {
    let lines = sandbox_lines(out);
    assert_eq!(lines.len(), 1, "{lines:?}\n{}", stderr(out));
    assert!(lines[0].contains(needle), "{lines:?} lacks {needle:?}");
}

fn canonical_tmp() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let p = std::fs::canonicalize(t.path()).unwrap();
    (t, p)
}

fn sh(script: &str) -> Vec<String> {
    ["--", "/bin/sh", "-c", script].map(str::to_owned).to_vec()
}

/// Runs `sandbox run --config CONFIG -w W -- sh -c SCRIPT`.
fn run_with_config(config: &Path, w: &Path, script: &str) -> Output {
    sandbox()
        .arg("run")
        .arg("--config")
        .arg(config)
        .arg("-w")
        .arg(w)
        .args(sh(script))
        .output()
        .unwrap()
}

/// A `--config` reached through a link inside a write path, or a link
/// elsewhere to a file inside one, is refused: the command could re-point
/// the link (or rewrite its target) and so write the next run's rules.
/// Twin: the same file named directly, outside the write paths, is used.
#[test]
fn config_link_inside_a_write_path() {
    let (_w, w) = canonical_tmp();
    let (_o, outside) = canonical_tmp();
    let real = outside.join("real.toml");
    std::fs::write(&real, "[sandbox]\n").unwrap();
    symlink(&real, w.join("cfg.toml")).unwrap();
    let inside = w.join("inside.toml");
    std::fs::write(&inside, "[sandbox]\n").unwrap();
    symlink(&inside, outside.join("to-inside.toml")).unwrap();
    symlink(&w, outside.join("dir-link")).unwrap();
    let marker = w.join("ran");
    let touch = format!("touch {}", marker.display());
    for (config, entry) in [
        (w.join("cfg.toml"), w.join("cfg.toml")),
        (outside.join("to-inside.toml"), inside.clone()),
        (outside.join("dir-link/inside.toml"), inside.clone()),
    ] {
        let out = run_with_config(&config, &w, &touch);
        assert_eq!(code(&out), Some(125), "{config:?}: {}", stderr(&out));
        one_line(&out, &format!("reached through {}", entry.display()));
        assert!(!marker.exists(), "{config:?}: nothing ran");
    }
    // Twin: the link's target named directly, and a link outside the write
    // paths to a file outside them.
    symlink(&real, outside.join("link.toml")).unwrap();
    for config in [real, outside.join("link.toml")] {
        let out = run_with_config(&config, &w, &touch);
        assert_eq!(code(&out), Some(0), "{config:?}: {}", stderr(&out));
        assert!(marker.exists());
        std::fs::remove_file(&marker).unwrap();
    }
}

/// A config that is a FIFO, a device or a huge file is refused at once,
/// before anything is read from it (a FIFO would block forever, /dev/zero
/// would be read whole). Twin: a small regular file is read.
#[test]
fn config_fifo_and_device() {
    let (_d, dir) = canonical_tmp();
    let fifo = dir.join("fifo.toml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let big = dir.join("big.toml");
    let mut text = "[sandbox]\n".to_owned();
    text.push_str(&"# padding\n".repeat(200_000));
    std::fs::write(&big, text).unwrap();
    for (config, needle) in [
        (fifo.as_path(), "is not a regular file"),
        (Path::new("/dev/zero"), "is not a regular file"),
        (dir.as_path(), "is not a regular file"),
        (big.as_path(), "is larger than 1048576 bytes"),
    ] {
        let started = std::time::Instant::now();
        let out = sandbox()
            .arg("run")
            .arg("--config")
            .arg(config)
            .args(sh("echo ran"))
            .output()
            .unwrap();
        assert_eq!(code(&out), Some(125), "{config:?}: {}", stderr(&out));
        one_line(&out, needle);
        assert!(out.stdout.is_empty(), "{config:?}: nothing ran");
        assert!(started.elapsed().as_secs() < 30, "{config:?} blocked");
    }
    let small = dir.join("small.toml");
    std::fs::write(&small, "[sandbox]\n").unwrap();
    let out = sandbox()
        .arg("run")
        .arg("--config")
        .arg(&small)
        .args(sh("echo ran"))
        .output()
        .unwrap();
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n");
}

/// A run started without `HOME` (and without `XDG_CONFIG_HOME`) still
/// protects the config directory of the user's passwd home, which a later
/// run with `HOME` set loads. Root only: the passwd home of root is
/// `/root` (nobody's is `/nonexistent`, which nobody cannot create). The
/// attack runs against a fresh `/root` in a mount namespace of the test's,
/// so it always finds no config yet and never touches the host's. Twin:
/// the rest of the passwd home stays writable.
#[cfg(target_os = "linux")]
#[test]
fn config_planted_without_home() {
    if !is_root() {
        cannot_do_its_job(
            "config_planted_without_home",
            "needs root (the passwd home is /root)",
        );
        return;
    }
    // /root is a fresh tmpfs in a mount namespace of the test's: no config
    // there yet whatever the host holds, and the host's is never touched.
    with_private_mounts(&["/root"], plant_the_config_without_home)
        .expect("a mount namespace with a tmpfs on /root (root)");
}

#[cfg(target_os = "linux")]
fn plant_the_config_without_home() {
    let home = PathBuf::from("/root");
    let dir = home.join(".config/sandbox");
    let config = dir.join("config.toml");
    assert!(!config.exists() && !dir.exists(), "a fresh /root");
    let twin = home.join(format!(".sandbox-tests-twin-{}", std::process::id()));
    let script = format!(
        "mkdir -p {d}; printf '[sandbox]\\n' > {c}; echo ok > {t}",
        d = dir.display(),
        c = config.display(),
        t = twin.display()
    );
    let out = sandbox()
        .env_remove("HOME")
        .env_remove("XDG_CONFIG_HOME")
        .arg("run")
        .arg("-w")
        .arg(&home)
        .args(sh(&script))
        .current_dir("/")
        .output()
        .unwrap();
    let planted = config.exists();
    let twin_ok = std::fs::read_to_string(&twin).ok();
    assert_ne!(code(&out), Some(125), "{}", stderr(&out));
    assert!(!planted, "the run planted {config:?}: {}", stderr(&out));
    assert_eq!(twin_ok.as_deref(), Some("ok\n"), "{}", stderr(&out));
}

/// Red-team R7 F3: a run started without `XDG_CONFIG_HOME` whose write
/// path holds the directory the victim's runs name by it writes
/// `sandbox/config.toml` there choosing the noop backend; the victim's next
/// run (with that `XDG_CONFIG_HOME`) does not read it: the user config lies
/// in the passwd home whatever the environment says, and the victim's run
/// fails naming the file (exit 125), so nothing runs unconfined. Positive control: a config at the passwd home's
/// `.config/sandbox/config.toml` is read by the same run (noop: the write
/// outside lands). Root only, against a fresh `/root` in a mount namespace
/// of the test's; nobody (no usable passwd home) locates its config by the
/// environment, the documented gap (`fail_closed::
/// the_user_config_is_discovered_and_a_named_missing_one_is_an_error`).
#[cfg(target_os = "linux")]
#[test]
fn a_config_planted_under_another_runs_xdg_config_home_is_not_read() {
    if !is_root() {
        cannot_do_its_job(
            "a_config_planted_under_another_runs_xdg_config_home_is_not_read",
            "needs root (the passwd home is /root)",
        );
        return;
    }
    with_private_mounts(&["/root"], plant_a_config_under_xdg_config_home)
        .expect("a mount namespace with a tmpfs on /root (root)");
}

#[cfg(target_os = "linux")]
fn plant_a_config_under_xdg_config_home() {
    let (_t, root) = canonical_tmp();
    let (data, home) = (root.join("data"), root.join("home"));
    let xdg = data.join("config");
    std::fs::create_dir_all(&xdg).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let noop = "[sandbox]\nbackend = \"noop\"\non_unsupported = \"ignore\"\n";
    let planted = xdg.join("sandbox/config.toml");
    let out = sandbox()
        .env_remove("XDG_CONFIG_HOME")
        .env("HOME", &home)
        .args(["run", "--mode", "workspace-write", "--workspace"])
        .arg(&data)
        .args(sh(&format!(
            "mkdir -p {d} && printf '{noop}' > {c} && echo PLANTED",
            d = xdg.join("sandbox").display(),
            c = planted.display()
        )))
        .current_dir(&data)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("PLANTED") && planted.is_file(),
        "the hostile run could not write its own workspace: {}",
        stderr(&out)
    );
    let outside = root.join("outside");
    let victim = || {
        sandbox()
            .env("XDG_CONFIG_HOME", &xdg)
            .env("HOME", &home)
            .arg("run")
            .args(sh(&format!("echo x > {}", outside.display())))
            .current_dir(&root)
            .output()
            .unwrap()
    };
    // Refused, naming the planted file: neither read nor skipped silently.
    let out = victim();
    assert_eq!(code(&out), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("config {} is not read", planted.display())),
        "{}",
        stderr(&out)
    );
    assert!(!outside.exists(), "the planted config was read");
    // Positive control: the passwd home's config is read (the planted one
    // removed).
    std::fs::remove_file(&planted).unwrap();
    std::fs::create_dir_all("/root/.config/sandbox").unwrap();
    std::fs::write("/root/.config/sandbox/config.toml", noop).unwrap();
    let out = victim();
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert!(outside.exists(), "the passwd home's config was not read");
}

/// Red-team R7 F1: a run started without `XDG_CACHE_HOME` (or with
/// another `HOME`) whose write path holds the directory the victim's runs
/// name by it computes the victim workspace's cache key and plants a cargo
/// `config.toml` (a `rustc-wrapper`) under
/// `sandbox-tools/<key>/cargo` there; the victim's next run on its
/// workspace is given its cargo cache beneath the passwd home instead,
/// without the plant. Positive control: what the victim's run leaves in
/// its cache, its next run finds (a warm cache). Root only, against a
/// fresh `/root` in a mount namespace of the test's; nobody (no usable
/// passwd home) locates its caches by the environment, the documented gap.
#[cfg(target_os = "linux")]
#[test]
fn a_cache_planted_under_another_runs_cache_home_is_not_used() {
    if !is_root() {
        cannot_do_its_job(
            "a_cache_planted_under_another_runs_cache_home_is_not_used",
            "needs root (the passwd home is /root)",
        );
        return;
    }
    with_private_mounts(&["/root"], plant_a_cache_under_xdg_cache_home)
        .expect("a mount namespace with a tmpfs on /root (root)");
}

#[cfg(target_os = "linux")]
fn plant_a_cache_under_xdg_cache_home() {
    let (_t, root) = canonical_tmp();
    let (data, home, ws) = (root.join("data"), root.join("home"), root.join("wsA"));
    for d in [&data, &home, &ws] {
        std::fs::create_dir_all(d).unwrap();
    }
    let key = sandbox::runner::CacheKey::of_write_roots([ws.clone()]);
    let mut planted = Vec::new();
    // Under the victim's XDG_CACHE_HOME, and under its HOME's `.cache`.
    for (var, base) in [
        ("XDG_CACHE_HOME", data.join("cache")),
        ("HOME", data.join("home")),
    ] {
        let cargo = match var {
            "HOME" => base.join(".cache"),
            _ => base.clone(),
        }
        .join("sandbox-tools")
        .join(key.as_str())
        .join("cargo");
        let out = sandbox()
            .env_remove("XDG_CACHE_HOME")
            .env("HOME", &home)
            .args(["run", "--mode", "workspace-write", "--workspace"])
            .arg(&data)
            .args(sh(&format!(
                "mkdir -p {c} && printf '[build]\\nrustc-wrapper = \"/bin/false\"\\n' \
                 > {c}/config.toml && echo PLANTED",
                c = cargo.display()
            )))
            .current_dir(&data)
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("PLANTED")
                && cargo.join("config.toml").is_file(),
            "the hostile run could not write its own workspace: {}",
            stderr(&out)
        );
        planted.push((var, base));
    }
    let want = PathBuf::from("/root/.cache/sandbox-tools")
        .join(key.as_str())
        .join("cargo");
    for (var, base) in planted {
        let victim = |script: &str| {
            let mut cmd = sandbox();
            match var {
                "HOME" => cmd.env_remove("XDG_CACHE_HOME").env("HOME", &base),
                _ => cmd.env("XDG_CACHE_HOME", &base).env("HOME", &home),
            };
            cmd.args([
                "run",
                "--cache",
                "cargo",
                "--mode",
                "workspace-write",
                "--workspace",
            ])
            .arg(&ws)
            .args(sh(script))
            .current_dir(&ws)
            .output()
            .unwrap()
        };
        let out = victim(
            "echo \"$CARGO_HOME\"; test -e \"$CARGO_HOME/config.toml\" && echo SEEN; \
             echo warm > \"$CARGO_HOME/warm\"",
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(code(&out), Some(0), "{var}: {}", stderr(&out));
        assert_eq!(text.lines().next(), want.to_str(), "{var}: {text}");
        assert!(!text.contains("SEEN"), "{var}: the plant was used: {text}");
        // Positive control: the victim's own cache is warm on its next run.
        let out = victim("cat \"$CARGO_HOME/warm\"");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "warm\n",
            "{var}: {}",
            stderr(&out)
        );
        std::fs::remove_file(want.join("warm")).unwrap();
    }
}

/// With `~/.config` a link (a dotfiles checkout) that the run could
/// replace, the run is refused: write-denying the link's target would not
/// stop the command re-pointing the link. Twin: granted only the directory
/// the link points into, the run goes ahead and the config directory there
/// stays unwritable, while its neighbours are writable.
#[test]
fn config_dir_behind_a_replaceable_link() {
    let (_h, home) = canonical_tmp();
    let dotfiles = home.join("dotfiles");
    std::fs::create_dir_all(dotfiles.join("config")).unwrap();
    symlink(dotfiles.join("config"), home.join(".config")).unwrap();
    let run = |w: &Path, script: &str| {
        sandbox()
            .env("HOME", &home)
            .env_remove("XDG_CONFIG_HOME")
            .arg("run")
            .arg("-w")
            .arg(w)
            .args(sh(script))
            .output()
            .unwrap()
    };
    let out = run(&home, "echo ran");
    assert_eq!(code(&out), Some(125), "{}", stderr(&out));
    one_line(
        &out,
        &format!("reached through {}", home.join(".config").display()),
    );
    assert!(out.stdout.is_empty());
    let plant = format!(
        "mkdir -p {c}/sandbox; echo '[sandbox]' > {c}/sandbox/config.toml; echo ok > {c}/other",
        c = home.join(".config").display()
    );
    let out = run(&dotfiles, &plant);
    assert_ne!(code(&out), Some(125), "{}", stderr(&out));
    assert!(!dotfiles.join("config/sandbox/config.toml").exists());
    assert_eq!(
        std::fs::read_to_string(dotfiles.join("config/other")).unwrap(),
        "ok\n"
    );
}

/// The self-test's verdict is never looked for where `$XDG_RUNTIME_DIR`
/// says: a run granted that directory could have forged it there. Root: the
/// verdict lives in `/run/sandbox` (the twin: it is recorded there).
#[test]
fn verdict_forged_in_a_runtime_dir() {
    let (_r, runtime) = canonical_tmp();
    std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
    // What an earlier run with `-w RUNTIME` could have left.
    let forged = runtime.join("sandbox");
    std::fs::create_dir(&forged).unwrap();
    let out = sandbox()
        .env("XDG_RUNTIME_DIR", &runtime)
        .args(["run", "--", "/bin/true"])
        .output()
        .unwrap();
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert_eq!(
        std::fs::read_dir(&forged).unwrap().count(),
        0,
        "nothing was recorded under $XDG_RUNTIME_DIR"
    );
    if is_root() {
        let recorded = std::fs::read_dir("/run/sandbox")
            .unwrap()
            .flatten()
            .any(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("gate-landlock-")
            });
        assert!(recorded, "the verdict is kept in /run/sandbox");
    }
}

/// The outcome record's temporary file cannot be taken first: its name is
/// not predictable from the runner's pid, so planting every name the old
/// scheme used changes nothing. Twin: the record is written.
#[test]
fn report_tmp_name_unpredictable() {
    let (_w, w) = canonical_tmp();
    let report = w.join("out.json");
    // The command plants the names `.out.json.<pid>.tmp` for every pid near
    // its own (the runner's pid is its parent's).
    let script = "p=$PPID; for i in $(seq -5 5); do mkdir .out.json.$((p+i)).tmp; done; exit 3";
    let out = sandbox()
        .current_dir(&w)
        .arg("run")
        .arg("--report")
        .arg(&report)
        .arg("-w")
        .arg(&w)
        .args(sh(script))
        .output()
        .unwrap();
    assert_eq!(code(&out), Some(3), "{}", stderr(&out));
    assert!(sandbox_lines(&out).is_empty(), "{}", stderr(&out));
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(v["termination"]["code"], 3, "{v}");
}

/// When the record cannot be written after all (the command made its path a
/// directory), the exit status is the command's and one line says why.
#[test]
fn an_unwritable_report_keeps_the_commands_status() {
    let (_w, w) = canonical_tmp();
    let report = w.join("out.json");
    let out = sandbox()
        .arg("run")
        .arg("--report")
        .arg(&report)
        .arg("-w")
        .arg(&w)
        .args(sh(&format!("mkdir {}; exit 7", report.display())))
        .output()
        .unwrap();
    assert_eq!(code(&out), Some(7), "{}", stderr(&out));
    one_line(&out, "exit status is the command's (7)");
}

/// Under `-w /` the run's cgroups stay out of reach: no process moves out of
/// its containment, raises its limit or makes a cgroup beneath it. The
/// targets are the cgroups the run is in, whichever hierarchies this host
/// mounts (v2, v1 controllers, or both): the command finds each from
/// `/proc/self/cgroup` and the cgroup mounts, and shows it exists, lists
/// the command's own pid and (for `pids`) holds the run's `--pids 40`
/// before attacking it (this host: v1 `pids` and the v2 hierarchy at
/// `/sys/fs/cgroup/unified`, both named for the run). Twin: a file elsewhere under `/` is written.
#[test]
fn cgroups_stay_out_of_reach_under_write_root() {
    assert!(
        is_root(),
        "the run's limits need cgroups only root may create here"
    );
    let (_t, dir) = canonical_tmp();
    let file = dir.join("wrote");
    let out = sandbox()
        .args(["run", "-w", "/", "--pids", "40", "--"])
        .args(["python3", "-c", CGROUP_ATTACKS])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            stderr(&out)
        )
    });
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "yes\n", "{r}");
    let own = r["own"].as_array().unwrap();
    // The cgroups made for this run (the runner names them `sandbox-run-…`);
    // the command's others (a host's own placement) are attacked too.
    let runs: Vec<_> = own
        .iter()
        .filter(|c| c["dir"].as_str().unwrap().contains("/sandbox-run-"))
        .collect();
    assert!(!runs.is_empty(), "the run is in a cgroup of its own: {r}");
    // The run's pids limit is among them (v2 or v1 `pids`).
    assert!(
        runs.iter().any(|c| c["pids.max"] == "40"),
        "a target holds the run's --pids 40: {r}"
    );
    for c in own {
        assert_eq!(c["member"], true, "{c}");
        for attack in ["raise", "leave", "leave_to_root", "mkdir", "subtree"] {
            if let Some(result) = c.get(attack) {
                assert_ne!(result, "ok", "{attack} on {c}");
            }
        }
        if c.get("pids.max").is_some() {
            assert_eq!(c["pids.max_after"], c["pids.max"], "{c}");
        }
    }
    assert_eq!(r["cgroup_before"], r["cgroup_after"], "{r}");
}

/// Run under `-w /`: finds the command's own cgroups and attacks each;
/// prints a JSON report. `argv[1]`: the twin file to write.
const CGROUP_ATTACKS: &str = r#"
import json, os, sys
def err(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return e.strerror
def write(path, text):
    with open(path, "w") as f:
        f.write(text)
mounts = []
for line in open("/proc/self/mountinfo"):
    left, right = line.split(" - ")
    fstype, _, opts = right.split()[:3]
    if fstype in ("cgroup", "cgroup2"):
        mounts.append((fstype, left.split()[4], set(opts.split(","))))
before = open("/proc/self/cgroup").read()
own = []
for line in before.splitlines():
    hid, ctrls, path = line.split(":", 2)
    if path == "/":
        continue
    for fstype, point, opts in mounts:
        if (hid == "0") == (fstype == "cgroup2") and (hid == "0" or set(ctrls.split(",")) & opts):
            d = point + path
            if not os.path.isdir(d):
                continue
            c = {"dir": d, "member": str(os.getpid()) in open(d + "/cgroup.procs").read().split()}
            if os.path.exists(d + "/pids.max"):
                c["pids.max"] = open(d + "/pids.max").read().strip()
                c["raise"] = err(lambda: write(d + "/pids.max", "max"))
                c["pids.max_after"] = open(d + "/pids.max").read().strip()
            c["leave"] = err(lambda: write(os.path.dirname(d) + "/cgroup.procs", str(os.getpid())))
            c["leave_to_root"] = err(lambda: write(point + "/cgroup.procs", str(os.getpid())))
            c["mkdir"] = err(lambda: os.mkdir(d + "/escape"))
            if fstype == "cgroup2":
                c["subtree"] = err(lambda: write(d + "/cgroup.subtree_control", "+pids"))
            own.append(c)
write(sys.argv[1], "yes\n")
print(json.dumps({"own": own, "cgroup_before": before, "cgroup_after": open("/proc/self/cgroup").read()}))
"#;

/// A write path inside trusted state is refused with one line: a cgroup
/// hierarchy (its `cgroup.procs` would let the command leave its
/// containment) or a config directory (the next run's rules). Twin: the
/// config directory's parent as a write path runs, with it write-denied.
#[test]
fn a_write_path_inside_trusted_state_is_refused() {
    let (_t, home) = canonical_tmp();
    let config = home.join(".config/sandbox");
    std::fs::create_dir_all(&config).unwrap();
    for w in [Path::new("/sys/fs/cgroup/pids"), config.as_path()] {
        let out = sandbox()
            .args(["run", "-w"])
            .arg(w)
            .args(["--", "/bin/true"])
            .env("HOME", &home)
            .output()
            .unwrap();
        assert_eq!(code(&out), Some(125), "{}", stderr(&out));
        one_line(&out, "which later runs trust");
    }
    let parent = home.join(".config");
    let out = sandbox()
        .args(["run", "-w"])
        .arg(&parent)
        .args(sh(&format!(
            "echo x > {}/config.toml && echo PLANTED; echo y > {}/other && echo WROTE",
            config.display(),
            parent.display()
        )))
        .env("HOME", &home)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("WROTE") && !text.contains("PLANTED"),
        "{text}"
    );
}

/// A config with a second name inside a write path (a hard link a dotfile
/// manager or an earlier unconfined step made) is refused: the run could
/// rewrite it through that name and set the next run's rules, and no walk
/// of the named path sees the other name. Nor can a confined run make such
/// a link itself. Twin: with the link gone, the same config is used and the
/// run goes ahead; and a link between two files of the write path is made.
/// As root and as nobody.
#[test]
fn a_config_with_a_second_name_is_refused() {
    let users: &[bool] = if is_root() { &[false, true] } else { &[false] };
    for &nobody in users {
        let (_o, outside) = canonical_tmp();
        let (_w, w) = canonical_tmp();
        let config = outside.join("config.toml");
        std::fs::write(&config, "[sandbox]\n").unwrap();
        let second = w.join("notes.toml");
        std::fs::hard_link(&config, &second).unwrap();
        if nobody {
            std::fs::set_permissions(&outside, std::fs::Permissions::from_mode(0o755)).unwrap();
            std::os::unix::fs::chown(&w, Some(65534), Some(65534)).unwrap();
        }
        let run = |script: &str| {
            let mut cmd = if nobody {
                sandbox_as_nobody()
            } else {
                sandbox()
            };
            cmd.arg("run")
                .arg("--config")
                .arg(&config)
                .arg("-w")
                .arg(&w)
                .args(sh(script))
                .output()
                .unwrap()
        };
        let ran = w.join("ran");
        let out = run(&format!("touch {}", ran.display()));
        assert_eq!(code(&out), Some(125), "nobody {nobody}: {}", stderr(&out));
        one_line(&out, "has 2 hard links");
        assert!(!ran.exists(), "nothing ran");
        std::fs::remove_file(&second).unwrap();
        // Twin: one name, the run goes ahead; the command cannot give the
        // config a second name in its write path, and can link its own files.
        let script = format!(
            "ln {c} {w}/again 2>/dev/null && echo linked-config; : > {w}/a; ln {w}/a {w}/b && \
             echo linked-own; touch {r}",
            c = config.display(),
            w = w.display(),
            r = ran.display()
        );
        let out = run(&script);
        assert_eq!(code(&out), Some(0), "nobody {nobody}: {}", stderr(&out));
        assert_eq!(String::from_utf8_lossy(&out.stdout), "linked-own\n");
        assert!(ran.exists());
        assert_eq!(
            std::os::unix::fs::MetadataExt::nlink(&std::fs::metadata(&config).unwrap()),
            1
        );
    }
}

/// Runs `sh -c SCRIPT` with `--report REPORT -w W` (and `extra` flags).
fn run_with_report(w: &Path, report: &Path, extra: &[&str], script: &str) -> Output {
    sandbox()
        .arg("run")
        .args(extra)
        .arg("--report")
        .arg(report)
        .arg("-w")
        .arg(w)
        .args(sh(script))
        .output()
        .unwrap()
}

/// The record of what the run did.
fn record(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The command moves the report's directory away, makes a new one and
/// leaves a forged record in it, then writes outside its write paths: the
/// record the user asked for is still the sandbox's (with the refusal), and
/// one line says the directory was replaced. When the path then leads where
/// the run could not write (a link the command left), nothing is written
/// there: the record goes to the moved directory and the line says where.
/// Twin: left alone, the record lands where asked and nothing is said.
#[test]
fn a_replaced_report_directory_does_not_hide_the_record() {
    let (_w, w) = canonical_tmp();
    let (_o, outside) = canonical_tmp();
    let sub = w.join("sub");
    let report = sub.join("rep.json");
    let forged = r#"{"classification":{"class":"ok"}}"#;
    let denied = outside.join("denied");
    let attack = |replace: &str| {
        std::fs::create_dir(&sub).unwrap();
        let script = format!(
            "mv {s} {w}/moved && {replace} && printf '%s' '{forged}' > {s}/rep.json; \
             echo x > {d}; exit 0",
            s = sub.display(),
            w = w.display(),
            d = denied.display()
        );
        run_with_report(&w, &report, &["-q"], &script)
    };
    // A new directory in its place, inside the write path.
    let out = attack(&format!("mkdir {}", sub.display()));
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    one_line(&out, "its directory was moved or replaced during the run");
    one_line(&out, "the record was written at");
    let v = record(&report);
    assert!(
        v["mediation"]["refused"].to_string().contains("denied"),
        "the real record: {v}"
    );
    assert!(!denied.exists());
    std::fs::remove_dir_all(&sub).unwrap();
    std::fs::remove_dir_all(w.join("moved")).unwrap();
    // A link to a directory the run may not write.
    let out = attack(&format!("ln -s {} {}", outside.display(), sub.display()));
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    one_line(
        &out,
        &format!(
            "the record was written in {} instead",
            w.join("moved").display()
        ),
    );
    assert!(
        !outside.join("rep.json").exists(),
        "nothing written through the link"
    );
    let v = record(&w.join("moved/rep.json"));
    assert!(
        v["mediation"]["refused"].to_string().contains("denied"),
        "{v}"
    );
    std::fs::remove_file(&sub).unwrap();
    // Twin: the directory left where it was.
    std::fs::create_dir(&sub).unwrap();
    let out = run_with_report(
        &w,
        &report,
        &[],
        &format!("echo x > {}; exit 0", denied.display()),
    );
    assert_eq!(code(&out), Some(0), "{}", stderr(&out));
    assert!(
        sandbox_lines(&out).iter().all(|l| !l.contains("--report")),
        "{}",
        stderr(&out)
    );
    assert!(record(&report)["mediation"]["refused"]
        .to_string()
        .contains("denied"));
}

/// Paths the command chose, refused under workspace-write, reach the
/// terminal escaped in the summary and in `--explain`: no escape sequence
/// (window title), no carriage return that overwrites the line, no newline
/// that adds a `sandbox:` line of the command's choosing. Twin: the same
/// summary names a plain refused path as it is.
#[test]
fn refused_paths_reach_the_terminal_escaped() {
    let (_w, w) = canonical_tmp();
    let (_h, home) = canonical_tmp();
    std::fs::create_dir_all(w.join(".git/hooks")).unwrap();
    let script = r#"
        for n in "$(printf 'a\033]0;owned\007')" "$(printf 'b\rsandbox: all clear')" \
                 "$(printf 'c\nsandbox: all clear, nothing refused')" plain; do
            { true > ".git/hooks/$n"; } 2>/dev/null
        done
        exit 1"#;
    for explain in [false, true] {
        let mut cmd = sandbox();
        cmd.current_dir(&w).env("HOME", &home).args([
            "run",
            "--mode",
            "workspace-write",
            "--workspace",
            ".",
        ]);
        if explain {
            cmd.arg("--explain");
        }
        let out = cmd.args(sh(script)).output().unwrap();
        let text = stderr(&out);
        // A failed run: the summary is printed (after a successful one, only
        // under --explain).
        assert_eq!(code(&out), Some(1), "{text}");
        assert!(
            !out.stderr.iter().any(|&b| matches!(b, 0x1b | 0x07 | b'\r')),
            "raw control bytes: {text:?}"
        );
        assert!(
            !text.lines().any(|l| l.starts_with("sandbox: all clear")),
            "{text}"
        );
        let hooks = w.join(".git/hooks");
        let shown = [
            format!("{}/a\\u{{1b}}]0;owned\\u{{7}}", hooks.display()),
            format!("{}/b\\rsandbox: all clear", hooks.display()),
        ];
        for s in &shown {
            assert!(text.contains(s.as_str()), "{s} in {text}");
        }
        if explain {
            assert!(
                text.contains(&format!(
                    "{}/c\\nsandbox: all clear, nothing refused",
                    hooks.display()
                )),
                "{text}"
            );
            assert!(
                text.contains(&format!("{}/plain", hooks.display())),
                "{text}"
            );
        } else {
            one_line(&out, "refused 4 file changes");
        }
        assert_eq!(std::fs::read_dir(&hooks).unwrap().count(), 0);
    }
}

/// The record on stdout (`--report -`) writes a refused path's C1
/// control (CSI), DEL and bidirectional override as `\uXXXX` escapes (the
/// JSON value is unchanged), so the raw bytes never reach a terminal;
/// twin: a plain refused path is in the same record as it is. Also a
/// session's events.
#[test]
fn records_on_stdout_carry_no_raw_terminal_controls() {
    let (_w, w) = canonical_tmp();
    let (_h, home) = canonical_tmp();
    std::fs::create_dir_all(w.join(".git/hooks")).unwrap();
    let script = r#"
        for n in "$(printf 'a\302\2332J\177\342\200\256txt')" plain; do
            { true > ".git/hooks/$n"; } 2>/dev/null
        done
        exit 1"#;
    let raw = |out: &[u8]| {
        out.windows(2).any(|w| w == [0xc2, 0x9b])
            || out.windows(3).any(|w| w == [0xe2, 0x80, 0xae])
            || out.contains(&0x7f)
    };
    let out = sandbox()
        .current_dir(&w)
        .env("HOME", &home)
        .args([
            "run",
            "--report",
            "-",
            "--mode",
            "workspace-write",
            "--workspace",
            ".",
        ])
        .args(sh(script))
        .output()
        .unwrap();
    assert_eq!(code(&out), Some(1), "{}", stderr(&out));
    assert!(
        !raw(&out.stdout),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("\\u009b2J\\u007f\\u202etxt"), "{text}");
    let record: serde_json::Value = serde_json::from_str(&text).unwrap();
    let refused = record["mediation"]["refused"].to_string();
    assert!(refused.contains("/plain"), "{refused}");
    let hooks = w.join(".git/hooks");
    let wanted = format!("{}/a\u{9b}2J\u{7f}\u{202e}txt", hooks.display());
    assert!(
        record["mediation"]["refused"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["target"] == wanted.as_str()),
        "{refused}"
    );

    // A session's exit event, the same.
    let mut child = sandbox()
        .current_dir(&w)
        .env("HOME", &home)
        .args(["session", "--mode", "workspace-write", "--workspace", "."])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let request = serde_json::json!({"id": "1", "op": "run", "argv": ["/bin/sh", "-c", script]});
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        writeln!(stdin, "{request}").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        !raw(&out.stdout),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("\\u009b2J\\u007f\\u202etxt"), "{text}");
    assert!(text.contains("/plain"), "{text}");
}

/// The run's private `$TMPDIR` (`--private-tmp`, and workspace-write's) is
/// its user's alone (0700), whatever the umask. Twin: the run writes there.
#[test]
fn the_private_tmp_is_the_users_alone() {
    let (_w, w) = canonical_tmp();
    for mode in [
        &["--private-tmp", "-w"][..],
        &["--mode", "workspace-write", "--workspace"],
    ] {
        let out = sandbox()
            .env("HOME", &w)
            .arg("run")
            .args(mode)
            .arg(&w)
            .args(sh(
                "umask 0; stat -c %a \"$TMPDIR\"; echo x > \"$TMPDIR/f\" && echo wrote",
            ))
            .output()
            .unwrap();
        assert_eq!(code(&out), Some(0), "{mode:?}: {}", stderr(&out));
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "700\nwrote\n",
            "{mode:?}"
        );
    }
}
