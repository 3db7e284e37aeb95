//! What a user sees when the sandbox refused something: the writes the
//! kernel refuses on its own in a plain `-w` run appear under `--explain`
//! and `--report`, named as the entry the call would make; each refusal
//! comes with the flag that admits it, and applying that flag makes the
//! re-run pass. Deny paths and system directories are never proposed.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Output;

use sandbox_tests::{sandbox, stderr};

fn canonical_tmp() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let p = std::fs::canonicalize(t.path()).unwrap();
    (t, p)
}

/// `sandbox run --explain ARGS -- sh -c SCRIPT` in `cwd`.
fn explain(cwd: &Path, args: &[&str], script: &str) -> Output {
    sandbox()
        .arg("run")
        .arg("--explain")
        .args(args)
        .args(["--", "/bin/sh", "-c", script])
        .current_dir(cwd)
        .output()
        .unwrap()
}

/// The flags `--explain` proposed (`to admit it: FLAG VALUE`).
fn proposals(out: &Output) -> Vec<Vec<String>> {
    stderr(out)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("to admit it: "))
        .map(|f| f.splitn(2, ' ').map(str::to_owned).collect())
        .collect()
}

/// In a plain `-w` run, Landlock refuses writes outside the write paths in
/// the kernel; under `--explain` each is listed with the path it would have
/// made (not its directory) and `-w` for the nearest existing directory.
/// Applied, the proposal makes the same command pass. Twin: the write
/// inside the write path, in the same run, succeeds.
#[test]
fn kernel_refusals_of_a_plain_w_run_are_explained_and_the_proposal_admits_them() {
    let (_a, a) = canonical_tmp();
    let (_b, b) = canonical_tmp();
    let script = format!(
        "echo in > {a}/f && mkdir {b}/ws && echo out > {b}/ws/f",
        a = a.display(),
        b = b.display()
    );
    let out = explain(&a, &["-w", a.to_str().unwrap()], &script);
    assert_ne!(out.status.code(), Some(0));
    assert_eq!(std::fs::read_to_string(a.join("f")).unwrap(), "in\n");
    let text = stderr(&out);
    assert!(
        text.contains(&format!(
            "refused mkdir on {}/ws: outside the write paths",
            b.display()
        )),
        "{text}"
    );
    let proposed = proposals(&out);
    assert_eq!(
        proposed,
        vec![vec!["-w".to_owned(), b.display().to_string()]],
        "{text}"
    );

    let mut args = vec!["-w".to_owned(), a.display().to_string()];
    args.extend(proposed.concat());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = explain(&a, &args, &script);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(std::fs::read_to_string(b.join("ws/f")).unwrap(), "out\n");
}

/// `--report` alone observes kernel refusals too: the record's mediation
/// lists the refused create. Twin: without `--report` or `--explain`, the
/// run is not observed (nothing is routed through the broker), and the
/// command fails the same way.
#[test]
fn report_records_kernel_refusals() {
    let (_a, a) = canonical_tmp();
    let (_b, b) = canonical_tmp();
    let report = a.join("r.json");
    let script = format!("touch {}/new", b.display());
    let out = sandbox()
        .args(["run", "-q", "-w", a.to_str().unwrap(), "--report"])
        .arg(&report)
        .args(["--", "/bin/sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    let refused = record["mediation"]["refused"].as_array().unwrap();
    assert!(
        refused
            .iter()
            .any(|c| c["target"] == format!("{}/new", b.display())
                && c["outside_write_paths"] == true),
        "{record}"
    );
    let out = sandbox()
        .args(["run", "-w", a.to_str().unwrap()])
        .args(["--", "/bin/sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(!b.join("new").exists());
}

/// A connect refused by IP proposes `--allow-net IP:PORT`; a name the proxy
/// refused proposes `--allow-net NAME:PORT`; each applied lets the re-run
/// reach a listener on loopback.
#[test]
fn network_proposals_admit_the_destination() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buf = [0u8; 1024];
            let _ = stream.read(&mut buf);
            let _ = stream
                .write_all(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok");
        }
    });
    let (_d, dir) = canonical_tmp();
    let other = "--allow-net=192.0.2.1:1";
    let by_ip = format!(
        "exec /usr/bin/python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port})); print('connected')\""
    );
    // Through the proxy: the runner's NO_PROXY sends loopback around it.
    let by_name = format!(
        "export NO_PROXY= no_proxy=; exec /usr/bin/python3 -c \"import urllib.request; print(urllib.request.urlopen('http://localhost:{port}/').read().decode())\""
    );
    for (script, expect) in [
        (&by_ip, format!("127.0.0.1:{port}")),
        (&by_name, format!("localhost:{port}")),
    ] {
        let out = explain(&dir, &[other], script);
        assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
        let proposed = proposals(&out);
        assert_eq!(
            proposed,
            vec![vec!["--allow-net".to_owned(), expect.clone()]],
            "{}",
            stderr(&out)
        );
        let flag = format!("--allow-net={expect}");
        let out = explain(&dir, &[other, &flag], script);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }
}

/// A protected path under workspace-write is never proposed, nor is a
/// system directory; both say why. Twin: the workspace write beside them
/// succeeds in the same run.
#[test]
fn protections_and_system_directories_are_never_proposed() {
    let (_w, ws) = canonical_tmp();
    std::fs::create_dir(ws.join(".vscode")).unwrap();
    let out = explain(
        &ws,
        &["--mode", "workspace-write", "--workspace", "."],
        "echo ok > ok; echo x > .vscode/settings.json; echo x > /etc/sandbox-test-never",
    );
    assert_eq!(std::fs::read_to_string(ws.join("ok")).unwrap(), "ok\n");
    let text = stderr(&out);
    assert!(proposals(&out).is_empty(), "{text}");
    assert!(
        text.contains("not proposed: it is a deny path or a protection"),
        "{text}"
    );
    assert!(
        text.contains("not proposed: it lies in /, a system directory"),
        "{text}"
    );
}

/// Observing writes changes no answer: a hard link from outside the write
/// paths is `EXDEV` (as Landlock answers it) and a writing open through
/// `/proc/self/root` is `EACCES`, with `--explain` and without. Twin: a
/// link inside the write path is made in both.
#[test]
fn observed_runs_answer_as_plain_ones() {
    let (_w, w) = canonical_tmp();
    let (_o, o) = canonical_tmp();
    std::fs::write(o.join("f"), "x").unwrap();
    std::fs::write(w.join("in"), "x").unwrap();
    let script = format!(
        "import os\n\
         def t(f):\n\
         \x20   try:\n\
         \x20       f(); print('ok')\n\
         \x20   except OSError as e: print(e.errno)\n\
         t(lambda: os.link('{o}/f', '{w}/l'))\n\
         t(lambda: open('/proc/self/root{o}/g', 'w'))\n\
         t(lambda: os.link('{w}/in', '{w}/in2'))\n\
         for n in ('l', 'in2'):\n\
         \x20   if os.path.exists('{w}/' + n): os.unlink('{w}/' + n)\n",
        o = o.display(),
        w = w.display()
    );
    let answers = |explain: bool| {
        let mut c = sandbox();
        c.arg("run");
        if explain {
            c.arg("--explain");
        } else {
            c.arg("-q");
        }
        let out = c
            .arg("-w")
            .arg(&w)
            .args(["--", "/usr/bin/python3", "-c", &script])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let plain = answers(false);
    assert_eq!(plain, format!("{}\n{}\nok\n", libc::EXDEV, libc::EACCES));
    assert_eq!(answers(true), plain);
}

/// Proposals a careful user would make: a write to a tool's own cache in
/// the home directory proposes `--cache TOOL` (never `-w` on the user's
/// real cache), and applied it lets the re-run pass without touching that
/// cache; an rc file (`~/.bashrc`) and a single file directly in the home
/// directory are never proposed, and say why. Twin: an ordinary directory
/// of the home directory is proposed as `-w`.
#[test]
fn caches_get_cache_and_rc_files_and_home_files_nothing() {
    let (_h, home) = canonical_tmp();
    let (_w, w) = canonical_tmp();
    for d in [".npm", "data"] {
        std::fs::create_dir(home.join(d)).unwrap();
    }
    std::fs::write(home.join(".python_history"), "").unwrap();
    let run = |extra: &[&str]| {
        sandbox()
            .arg("run")
            .arg("--explain")
            .args(["-w", w.to_str().unwrap()])
            .args(extra)
            .args(["--", "/bin/sh", "-c"])
            .arg(
                "c=${npm_config_cache:-$HOME/.npm}; mkdir -p \"$c/_cacache\" && echo x > \"$c/_cacache/index\"; \
                 s=$?; echo x >> \"$HOME/.bashrc\"; echo x >> \"$HOME/.python_history\"; \
                 echo x > \"$HOME/data/out\"; exit $s",
            )
            .env("HOME", &home)
            .env_remove("XDG_CACHE_HOME")
            .current_dir(&w)
            .output()
            .unwrap()
    };
    let out = run(&[]);
    let text = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{text}");
    let mut proposed = proposals(&out);
    proposed.sort();
    let mut want = vec![
        vec!["--cache".to_owned(), "npm".to_owned()],
        vec!["-w".to_owned(), home.join("data").display().to_string()],
    ];
    want.sort();
    assert_eq!(proposed, want, "{text}");
    assert!(
        text.contains("not proposed: it is a protected path"),
        "{text}"
    );
    assert!(
        text.contains("not proposed: it is a single file directly in the home directory"),
        "{text}"
    );
    assert!(!home.join(".npm/_cacache").exists());
    // Applied, --cache npm admits the cache write, in a cache of the run's
    // own: the user's ~/.npm stays untouched.
    let out = run(&["--cache", "npm"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!home.join(".npm/_cacache").exists());
    assert_eq!(std::fs::read_to_string(home.join(".bashrc")).ok(), None);
}

/// A new file directly in the shared `/tmp` (a linker's scratch file in a
/// plain `-w` run) proposes `--private-tmp`, a `$TMPDIR` of the run's own,
/// not `-w /tmp`; applied, a tool that follows `$TMPDIR` passes. The same
/// refusal is listed once however often it was made. Twin: a run that
/// already has a private `$TMPDIR` and still writes to `/tmp` itself is
/// proposed `-w /tmp`.
#[test]
fn a_scratch_file_in_tmp_proposes_a_private_tmp() {
    let (_w, w) = canonical_tmp();
    let name = format!("sandbox-explain-{}", std::process::id());
    // $TMPDIR when it is the run's private one, else /tmp (whatever the
    // test's own environment says).
    let script = format!(
        "d=/tmp; case \"$TMPDIR\" in */sandbox-tmp-*) d=$TMPDIR;; esac; \
         for i in 1 2 3; do echo x > \"$d/{name}\" 2>/dev/null; done; echo x > \"$d/{name}\""
    );
    let out = explain(&w, &["-w", w.to_str().unwrap()], &script);
    let text = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert_eq!(
        proposals(&out),
        vec![vec!["--private-tmp".to_owned()]],
        "{text}"
    );
    assert!(text.contains("(4 times)"), "{text}");
    let out = explain(&w, &["-w", w.to_str().unwrap(), "--private-tmp"], &script);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!Path::new("/tmp").join(&name).exists());
    // Already private: /tmp written by name needs /tmp.
    let by_name = format!("echo x > /tmp/{name}");
    let out = explain(&w, &["-w", w.to_str().unwrap(), "--private-tmp"], &by_name);
    let text = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{text}");
    assert_eq!(
        proposals(&out),
        vec![vec!["-w".to_owned(), "/tmp".to_owned()]],
        "{text}"
    );
}

/// Reads and execs the read denials refused are recorded under `--explain`
/// (see `read_refusals.rs`); what Landlock still refuses without a record,
/// a script whose interpreter lies beneath a read-deny path, is named as a
/// possible cause after a failure. Twin: a failure under a policy without
/// read denials gets no such line.
#[test]
fn kernel_refusals_without_a_record_are_named_after_a_failure() {
    let (_t, dir) = canonical_tmp();
    let secret = dir.join("secret");
    std::fs::create_dir(&secret).unwrap();
    sandbox_tests::copy_for_exec(Path::new("/bin/sh"), &secret.join("sh"));
    sandbox_tests::write_for_exec(
        &dir.join("script"),
        &format!("#!{}\nexit 0\n", secret.join("sh").display()),
    );
    std::fs::set_permissions(
        dir.join("script"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let deny = [
        "-w",
        dir.to_str().unwrap(),
        "--read-deny",
        secret.to_str().unwrap(),
    ];
    let out = explain(&dir, &deny, "./script");
    assert_eq!(out.status.code(), Some(126), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(err.contains("failed on its own terms"), "{err}");
    assert!(
        err.contains("not recorded: a script whose interpreter lies beneath the 1 read-deny"),
        "{err}"
    );
    // The exec of the interpreter itself and a read of it are recorded: a
    // sandbox denial, no "not recorded" line.
    for script in ["secret/sh -c true", "cat secret/sh"] {
        let out = explain(&dir, &deny, script);
        assert_ne!(out.status.code(), Some(0));
        let err = stderr(&out);
        assert!(err.contains("the sandbox refused something"), "{err}");
        assert!(!err.contains("not recorded"), "{err}");
    }
    // Twin: no read denials, same kind of failure.
    let out = explain(&dir, &["-w", dir.to_str().unwrap()], "exit 3");
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    assert!(err.contains("failed on its own terms"), "{err}");
    // (As root, root's dropped capabilities are named: see below.)
    assert!(!err.contains("read-deny"), "{err}");
}

/// With `--no-network`, a connect is refused with EPERM and recorded with
/// its address: the summary line after the failure and `--report` name it,
/// and the run is a sandbox denial. The kernel's own errors come first and
/// are no refusal: a connect on a file gets ENOTSOCK. Twin: with the
/// network on, the same connect reaches the listener.
#[test]
fn connects_refused_by_no_network_are_recorded() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (_d, dir) = canonical_tmp();
    let report = dir.join("r.json");
    let script = format!(
        "import errno, os, socket, sys\n\
         def code(f):\n\
         \x20   try:\n\
         \x20       f()\n\
         \x20       return 'ok'\n\
         \x20   except OSError as e:\n\
         \x20       return errno.errorcode[e.errno]\n\
         s = socket.socket()\n\
         f = os.open('/etc/hostname', os.O_RDONLY)\n\
         print(code(lambda: socket.socket(fileno=f).connect(('127.0.0.1', {port}))),\n\
         \x20     code(lambda: s.connect(('127.0.0.1', {port}))))\n\
         sys.exit(0 if code(lambda: socket.create_connection(('127.0.0.1', {port}))) == 'ok' else 1)\n"
    );
    let run = |extra: &[&str]| {
        sandbox()
            .args(["run", "-w", dir.to_str().unwrap(), "--report"])
            .arg(&report)
            .args(extra)
            .args(["--", "/usr/bin/python3", "-c", &script])
            .current_dir(&dir)
            .output()
            .unwrap()
    };
    let out = run(&["--no-network"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.trim(), "ENOTSOCK EPERM", "{}", stderr(&out));
    let err = stderr(&out);
    let address = format!("127.0.0.1:{port}");
    assert!(
        err.lines()
            .any(|l| l.starts_with("sandbox: refused") && l.contains(&address)),
        "{err}"
    );
    let record: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
    assert_eq!(
        record["classification"]["class"], "sandbox_denial",
        "{record}"
    );
    let refused = record["mediation"]["refused"].as_array().unwrap();
    assert!(
        refused
            .iter()
            .any(|c| c["syscall"] == "connect" && c["target"] == address.as_str()),
        "{record}"
    );
    // Twin: the network on.
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    drop(listener);
}

/// A run `cmd` in `cwd`, as nobody when `nobody` (else as the test's user).
fn run_as(nobody: bool, cwd: &Path, args: &[&str]) -> Output {
    let mut cmd = if nobody {
        sandbox_tests::sandbox_as_nobody()
    } else {
        sandbox()
    };
    cmd.arg("run").args(args).current_dir(cwd).output().unwrap()
}

/// The `sandbox:` lines saying processes were ended after the command.
#[cfg(target_os = "linux")]
fn ended_lines(out: &Output) -> Vec<String> {
    sandbox_tests::sandbox_lines(out)
        .into_iter()
        .filter(|l| l.contains("the command left running when it exited"))
        .collect()
}

/// `sandbox run -- setsid CMD` (the runner makes the command a group
/// leader, so setsid(1) forks and its parent exits 0 at once) ends CMD with
/// the run: one `sandbox:` line says so without `--explain`, with how many
/// and what to use for background work; `-q` leaves it out. Twin: a run
/// that leaves nothing says no such thing. Root and nobody.
#[cfg(target_os = "linux")]
#[test]
fn processes_a_run_ended_after_its_command_are_said() {
    for nobody in sandbox_tests::users() {
        let (_d, d) = sandbox_tests::shared_dir();
        let w = d.to_str().unwrap();
        let out = run_as(
            nobody,
            &d,
            // `sleep` itself: a shell in between may or may not fork first.
            &["-w", w, "--", "setsid", "sleep", "30"],
        );
        let ctx = format!("nobody={nobody}: {}", stderr(&out));
        assert_eq!(out.status.code(), Some(0), "{ctx}");
        let said = ended_lines(&out);
        assert_eq!(said.len(), 1, "{ctx}");
        assert!(
            said[0].starts_with("sandbox: ended 1 process ")
                && said[0].contains("a run ends with its command")
                && said[0].contains("\"keep\""),
            "{ctx}"
        );
        let out = run_as(
            nobody,
            &d,
            &["-q", "-w", w, "--", "sh", "-c", "sleep 30 & exit 0"],
        );
        assert!(
            ended_lines(&out).is_empty(),
            "nobody={nobody} -q: {}",
            stderr(&out)
        );
        // Twin: nothing left behind, nothing said.
        let out = run_as(nobody, &d, &["-w", w, "--", "sh", "-c", "sleep 0 & wait"]);
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(
            sandbox_tests::sandbox_lines(&out).is_empty(),
            "nobody={nobody}: {}",
            stderr(&out)
        );
    }
}

/// A plain `-w` run that failed with no refusal the broker saw says, in
/// one line, that the writes the kernel refused are not recorded in this
/// mode and `--explain` shows them; `-q`, `--explain` and `--report` leave
/// it out. Twin: the same run that succeeds says nothing.
#[test]
fn a_failed_plain_run_says_kernel_refused_writes_are_not_recorded() {
    const HINT: &str = "sandbox: writes the kernel refused are not recorded in this mode; \
                        rerun with --explain to see them";
    let (_a, a) = canonical_tmp();
    let (_b, b) = canonical_tmp();
    let w = a.to_str().unwrap();
    let write = format!("echo x > {}/f", b.display());
    let out = run_as(false, &a, &["-w", w, "--", "/bin/sh", "-c", &write]);
    assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
    if cfg!(target_os = "linux") {
        assert_eq!(
            sandbox_tests::sandbox_lines(&out),
            vec![HINT],
            "{}",
            stderr(&out)
        );
    }
    for quiet in [&["-q"][..], &["--explain"], &["--report", "/dev/null"]] {
        let mut args = quiet.to_vec();
        args.extend(["-w", w, "--", "/bin/sh", "-c", &write]);
        let out = run_as(false, &a, &args);
        assert_ne!(out.status.code(), Some(0), "{quiet:?}: {}", stderr(&out));
        assert!(!stderr(&out).contains(HINT), "{quiet:?}: {}", stderr(&out));
    }
    // Twin: the write inside the write path succeeds, nothing is said.
    let inside = format!("echo x > {w}/f");
    let out = run_as(false, &a, &["-w", w, "--", "/bin/sh", "-c", &inside]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        sandbox_tests::sandbox_lines(&out).is_empty(),
        "{}",
        stderr(&out)
    );
}

/// A call the filter refused outright has no target: `--explain` lists it
/// without " on ", and a refused `setsid` (a run without a delegated
/// cgroup, contained by process group: nobody's) says why and what it
/// breaks (git's detached auto-maintenance). Twin: a refusal with a target,
/// in the same run, keeps " on TARGET".
#[cfg(target_os = "linux")]
#[test]
fn a_refused_setsid_says_why_and_names_no_empty_target() {
    // Root's runs have a delegated cgroup here, which allows setsid.
    let nobody = sandbox_tests::is_root();
    let (_d, d) = sandbox_tests::shared_dir();
    let (_o, o) = sandbox_tests::shared_dir();
    let w = d.join("w");
    std::fs::create_dir(&w).unwrap();
    std::fs::set_permissions(&w, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let script = format!("setsid -w true; echo x > {}/f; exit 3", o.display());
    let out = run_as(
        nobody,
        &d,
        &[
            "--explain",
            "-w",
            w.to_str().unwrap(),
            "--",
            "/bin/sh",
            "-c",
            &script,
        ],
    );
    let text = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(
        text.contains(
            "    refused setsid: refused by the seccomp filter: runs without a delegated \
             cgroup are contained by process group, which a new session would leave (git's \
             detached auto-maintenance is one: git config maintenance.auto false"
        ),
        "{text}"
    );
    assert!(!text.contains(" on :"), "{text}");
    assert!(
        text.contains(&format!(" on {}/f: outside the write paths", o.display())),
        "{text}"
    );
}

/// As root, what root's capabilities would allow fails in a run (they are
/// dropped): `--explain` after such a failure names it under "not
/// recorded" (chown to another user, tar --no-same-owner). Twin: the same
/// failure as nobody (an ordinary user, no capabilities to lose) does not.
#[cfg(target_os = "linux")]
#[test]
fn explain_names_roots_dropped_capabilities_after_a_failure_as_root() {
    const LINE: &str = "not recorded: the run is uid 0 but root's capabilities are dropped";
    let (_d, d) = sandbox_tests::shared_dir();
    let w = d.to_str().unwrap();
    std::fs::write(d.join("f"), "x").unwrap();
    std::fs::set_permissions(
        d.join("f"),
        std::os::unix::fs::PermissionsExt::from_mode(0o666),
    )
    .unwrap();
    let chown = "chown 1000:1000 f";
    for nobody in sandbox_tests::users() {
        let out = run_as(
            nobody,
            &d,
            &["--explain", "-w", w, "--", "/bin/sh", "-c", chown],
        );
        let text = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "nobody={nobody}: {text}");
        assert!(text.contains("failed on its own terms"), "{text}");
        let root = !nobody && sandbox_tests::is_root();
        assert_eq!(text.contains(LINE), root, "nobody={nobody}: {text}");
        if root {
            assert!(text.contains("tar --no-same-owner"), "{text}");
        }
    }
}
