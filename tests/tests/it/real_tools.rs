//! Real tools run under workspace-write (and plain `-w`) as they run bare:
//! each workload runs twice in fresh copies of the same scene, bare and
//! confined, and must end the same way (exit status and what it printed or
//! made). Every tool here is one agents run every day; each broke once on a
//! syscall whose answer the broker changed.
#![cfg(target_os = "linux")]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use sandbox_tests::sandbox_bin;

/// How a workload is run.
#[derive(Clone, Copy, Debug, PartialEq)]
enum How {
    Bare,
    /// `-w W`.
    Write,
    /// `--mode workspace-write --workspace W`.
    Workspace,
}

struct Scene {
    _dir: tempfile::TempDir,
    /// The workspace (the write path).
    w: PathBuf,
    /// A directory outside the write paths.
    outside: PathBuf,
}

fn scene() -> Scene {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let (w, outside) = (root.join("w"), root.join("outside"));
    std::fs::create_dir(&w).unwrap();
    std::fs::create_dir(&outside).unwrap();
    Scene {
        _dir: dir,
        w,
        outside,
    }
}

/// Runs `script` with `sh -c` in `s.w`, `how`.
fn sh(s: &Scene, how: How, script: &str) -> Output {
    let mut cmd = match how {
        How::Bare => Command::new("/bin/sh"),
        _ => {
            let mut c = Command::new(sandbox_bin());
            c.arg("run");
            if how == How::Write {
                c.arg("-w").arg(&s.w);
            } else {
                c.args(["--mode", "workspace-write", "--workspace"])
                    .arg(&s.w);
            }
            c.args(["--", "/bin/sh"]);
            c
        }
    };
    cmd.args(["-c", script])
        .current_dir(&s.w)
        .env_remove("SANDBOX_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent/sandbox-tests-config")
        // Outside the workspace: a home inside it would be protected.
        .env("HOME", &s.outside)
        .env("OUT", &s.outside)
        // rustup's proxies find their toolchains here, not in the new HOME.
        .env("RUSTUP_HOME", rustup_home())
        .output()
        .unwrap()
}

fn rustup_home() -> PathBuf {
    std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".rustup")))
        .unwrap_or_else(|| PathBuf::from("/root/.rustup"))
}

fn text(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `script` bare and confined (each in a fresh scene made by `setup`)
/// and asserts both end the same: exit status and standard output.
fn same(name: &str, setup: impl Fn(&Scene), script: &str) {
    let bare_scene = scene();
    setup(&bare_scene);
    let bare = sh(&bare_scene, How::Bare, script);
    assert!(
        bare.status.success(),
        "{name}: the workload fails bare, so it proves nothing:\n{}",
        text(&bare)
    );
    for how in [How::Write, How::Workspace] {
        let s = scene();
        setup(&s);
        let got = sh(&s, how, script);
        let strip = |o: &Output, s: &Scene| {
            String::from_utf8_lossy(&o.stdout)
                .replace(&s.w.display().to_string(), "W")
                .replace(&s.outside.display().to_string(), "OUT")
        };
        assert_eq!(
            (got.status.code(), strip(&got, &s)),
            (bare.status.code(), strip(&bare, &bare_scene)),
            "{name} {how:?}:\nconfined: {}\nbare: {}",
            text(&got),
            text(&bare)
        );
    }
}

fn nothing(_: &Scene) {}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn rm_f_of_a_missing_path_outside() {
    same(
        "rm -f",
        nothing,
        "rm -f \"$OUT/nonexistent\" /tmp/sandbox-tests-nonexistent-$$ && echo gone",
    );
}

#[test]
fn mkdir_p_through_existing_parents() {
    // Node's fs.mkdirSync(recursive) and Java's createDirectories make every
    // parent in turn and accept EEXIST: the workspace root itself and /tmp.
    same(
        "mkdir -p",
        nothing,
        "mkdir -p \"$PWD/a/b/c\" && mkdir -p /tmp \"$PWD\" && mkdir \"$PWD\" 2>&1; echo made",
    );
}

#[test]
fn install_and_cp_keep_modes_and_acls() {
    same(
        "install, cp -p, cp -a",
        |s| {
            std::fs::create_dir_all(s.w.join("src/sub")).unwrap();
            std::fs::write(s.w.join("src/tool"), "#!/bin/sh\necho tool\n").unwrap();
            std::fs::write(s.w.join("src/sub/data"), "data\n").unwrap();
        },
        "install -m 755 src/tool bin-tool && install -d -m 750 dest && \
         cp -p src/tool dest/p && cp -a src dest/a && \
         stat -c '%a %n' bin-tool dest dest/p dest/a/tool dest/a/sub/data",
    );
}

#[test]
fn make_install_into_a_prefix_in_the_workspace() {
    if !have("make") {
        panic!("make is not installed: .ci/run installs it");
    }
    same(
        "make install",
        |s| {
            std::fs::write(
                s.w.join("Makefile"),
                "PREFIX ?= $(CURDIR)/prefix\nall: hello\nhello:\n\tprintf '#!/bin/sh\\necho hi\\n' > hello\n\
                 install: all\n\tinstall -d $(PREFIX)/bin\n\tinstall -m 755 hello $(PREFIX)/bin/hello\n",
            )
            .unwrap();
        },
        "make -s install && ./prefix/bin/hello && stat -c '%a' prefix/bin/hello",
    );
}

#[test]
fn a_fifo_written_before_it_is_read() {
    // `exec 5> fifo` blocks until a reader opens it, as the kernel does.
    same(
        "fifo",
        nothing,
        "mkfifo f; (sleep 0.3; cat f > got) & exec 5> f; echo through >&5; exec 5>&-; wait; cat got",
    );
}

#[test]
fn git_worktree_and_submodule() {
    same(
        "git worktree, submodule",
        |s| {
            let git = |dir: &Path, args: &[&str]| {
                let out = Command::new("git")
                    .args(args)
                    .current_dir(dir)
                    .env("HOME", &s.outside)
                    .env("GIT_CONFIG_NOSYSTEM", "1")
                    .output()
                    .unwrap();
                assert!(out.status.success(), "{}", text(&out));
            };
            let c = ["-c", "user.name=t", "-c", "user.email=t@example.com"];
            for repo in ["main", "lib"] {
                let d = s.w.join(repo);
                std::fs::create_dir(&d).unwrap();
                git(&d, &["init", "-q", "-b", "main"]);
                std::fs::write(d.join("f"), repo).unwrap();
                git(&d, &["add", "f"]);
                git(&d, &[&c[..], &["commit", "-q", "-m", "one"]].concat());
            }
        },
        "cd main && export GIT_CONFIG_NOSYSTEM=1 && \
         git -c user.name=t -c user.email=t@example.com worktree add -q ../wt -b wt && \
         git -c protocol.file.allow=always -c user.name=t -c user.email=t@example.com \
             submodule -q add ../lib lib && \
         git -c user.name=t -c user.email=t@example.com commit -q -m sub && \
         cat ../wt/f lib/f && git status --porcelain | wc -l",
    );
}

#[test]
fn a_python_venv() {
    same(
        "venv",
        nothing,
        "/usr/bin/python3 -m venv --without-pip venv && ./venv/bin/python -c 'import sys; print(sys.prefix != sys.base_prefix)'",
    );
}

#[test]
fn npm_install_of_a_local_package() {
    if !have("npm") {
        panic!("npm is not installed: .ci/run installs it");
    }
    same(
        "npm install",
        |s| {
            let pkg = s.w.join("pkg");
            std::fs::create_dir_all(pkg.join("lib")).unwrap();
            std::fs::write(
                pkg.join("package.json"),
                r#"{"name":"pkg","version":"1.0.0","main":"lib/index.js"}"#,
            )
            .unwrap();
            for i in 0..20 {
                std::fs::write(
                    pkg.join(format!("lib/m{i}.js")),
                    format!("module.exports={i};\n"),
                )
                .unwrap();
            }
            std::fs::write(pkg.join("lib/index.js"), "module.exports='pkg ok';\n").unwrap();
            std::fs::create_dir(s.w.join("app")).unwrap();
            std::fs::write(
                s.w.join("app/package.json"),
                r#"{"name":"app","version":"1.0.0"}"#,
            )
            .unwrap();
        },
        "cd app && npm_config_cache=\"$PWD/../.npm\" npm install --offline --no-audit --no-fund \
         --loglevel=error ../pkg >/dev/null && node -e 'console.log(require(\"pkg\"))'",
    );
}

#[test]
fn cargo_build_of_a_small_crate_offline() {
    same(
        "cargo build",
        |s| {
            std::fs::create_dir_all(s.w.join("c/src")).unwrap();
            std::fs::write(
                s.w.join("c/Cargo.toml"),
                "[package]\nname = \"c\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
            )
            .unwrap();
            std::fs::write(
                s.w.join("c/src/main.rs"),
                "fn main() { println!(\"built\"); }\n",
            )
            .unwrap();
        },
        // Plain -w has no private TMPDIR (the linker's temporaries).
        "cd c && mkdir tmp && TMPDIR=\"$PWD/tmp\" CARGO_HOME=\"$PWD/../.cargo\" \
         CARGO_TARGET_DIR=\"$PWD/target\" cargo build -q --offline && ./target/debug/c",
    );
}

#[test]
fn priorities_limits_and_affinity_by_pid_on_the_runs_own_processes() {
    // renice -p $$, prlimit by pid, a thread pinned by its tid (OpenMP, MKL).
    same(
        "renice, prlimit, sched_setaffinity by pid",
        nothing,
        "renice -n 3 -p $$ >/dev/null && /usr/bin/python3 -c '\n\
import os, resource, threading\n\
resource.prlimit(os.getpid(), resource.RLIMIT_NOFILE, resource.getrlimit(resource.RLIMIT_NOFILE))\n\
cpus = os.sched_getaffinity(0)\n\
def pin():\n    os.sched_setaffinity(threading.get_native_id(), cpus)\n\
t = threading.Thread(target=pin); t.start(); t.join()\n\
child = os.fork()\n\
if child == 0:\n    import time; time.sleep(2); os._exit(0)\n\
os.setpriority(os.PRIO_PROCESS, child, 5)\n\
print(os.getpriority(os.PRIO_PROCESS, child))\n\
os.kill(child, 9); os.waitpid(child, 0)\n\
'",
    );
}

/// A process outside the run, of the same user, is never a target: its
/// priority and limits stay as they were. Twin: the same calls on the run's
/// own process work (the test above).
#[test]
fn a_process_outside_the_run_is_never_reniced_or_limited() {
    let s = scene();
    let mut victim = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = victim.id();
    let script = format!(
        "renice -n 7 -p {pid} && echo reniced; \
         /usr/bin/python3 -c 'import os, resource; resource.prlimit({pid}, resource.RLIMIT_CPU, (1, 1))' \
         && echo limited; \
         /usr/bin/python3 -c 'import os; os.sched_setaffinity({pid}, {{0}})' && echo pinned; \
         renice -n 1 -p $$ >/dev/null && echo own"
    );
    for how in [How::Write, How::Workspace] {
        let out = sh(&s, how, &script);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(stdout, "own\n", "{how:?}: {}", text(&out));
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    // Field 19 (nice) is the 17th after the command name.
    assert_eq!(fields[16], "0", "the outside process was reniced");
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    assert!(
        limits
            .lines()
            .any(|l| l.starts_with("Max cpu time") && l.contains("unlimited")),
        "{limits}"
    );
    let _ = victim.kill();
    let _ = victim.wait();
}

/// `--private-tmp` gives a plain `-w` run the private `$TMPDIR` that
/// workspace-write has (mktemp, gcc and Python's tempfile need one), removed
/// after the run. Twin: without it, `/tmp` stays unwritable.
#[test]
fn a_private_tmpdir_for_plain_write_runs() {
    let s = scene();
    let script =
        "f=$(mktemp) && echo ok > \"$f\" && case \"$f\" in \"$TMPDIR\"/*) echo \"$TMPDIR\";; esac";
    let run = |extra: &[&str]| {
        Command::new(sandbox_bin())
            .args(["run", "-w"])
            .arg(&s.w)
            .args(extra)
            .args(["--", "/bin/sh", "-c", script])
            .env_remove("TMPDIR")
            .env_remove("SANDBOX_CONFIG")
            .env("XDG_CONFIG_HOME", "/nonexistent/sandbox-tests-config")
            .env("HOME", &s.outside)
            .current_dir(&s.w)
            .output()
            .unwrap()
    };
    let out = run(&["--private-tmp"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let tmp = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    assert!(tmp.contains("sandbox-tmp-"), "{}", text(&out));
    assert!(
        !Path::new(&tmp).exists(),
        "the private TMPDIR outlived the run"
    );
    let out = run(&[]);
    assert_ne!(out.status.code(), Some(0), "mktemp in /tmp: {}", text(&out));
}
