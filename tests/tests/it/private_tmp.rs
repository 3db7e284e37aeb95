//! The private `TMPDIR` goes with its run or session (red team F7): as a
//! non-root user, a directory the command closed (`chmod 000`), a mode-000
//! file and the `TMPDIR` itself made 0500 do not keep it (nor what the run
//! put there) in `/tmp`; what cannot be removed is said on stderr. Beside
//! the positive control (a plain file goes with it); root and nobody.
#![cfg(target_os = "linux")]

use std::io::Write;
use std::process::Stdio;

use sandbox_tests::{sandbox, sandbox_as_nobody, shared_dir, users};

const CLOSE: &str = "mkdir -p $TMPDIR/d/e; echo data > $TMPDIR/d/e/f; echo x > $TMPDIR/g; \
                     chmod 000 $TMPDIR/g $TMPDIR/d/e; chmod 500 $TMPDIR/d; \
                     ln -s / $TMPDIR/root; chmod 500 $TMPDIR; echo $TMPDIR";
const PLAIN: &str = "echo data > $TMPDIR/f; echo $TMPDIR";

/// `sandbox run --private-tmp`: the closed TMPDIR is removed, nothing said;
/// the control too.
#[test]
fn a_closed_private_tmpdir_is_removed_after_a_run() {
    for nobody in users() {
        let (_tmp, dir) = shared_dir();
        for script in [CLOSE, PLAIN] {
            let mut cmd = if nobody {
                sandbox_as_nobody()
            } else {
                sandbox()
            };
            let out = cmd
                .args(["run", "--private-tmp", "-w"])
                .arg(&dir)
                .args(["--", "/bin/sh", "-c", script])
                .output()
                .unwrap();
            assert!(out.status.success(), "{out:?}");
            let tmpdir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
            assert!(tmpdir.contains("sandbox-tmp-"), "{out:?}");
            assert!(
                std::fs::symlink_metadata(&tmpdir).is_err(),
                "nobody {nobody}: {tmpdir} survived the run ({script})"
            );
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!err.contains("could not be removed"), "{err}");
        }
        // The link's target, `/`, is intact (not followed).
        assert!(std::path::Path::new("/tmp").is_dir());
    }
}

/// A session's TMPDIR closed by a command is removed at the session's end.
#[test]
fn a_closed_private_tmpdir_is_removed_after_a_session() {
    for nobody in users() {
        let (_tmp, dir) = shared_dir();
        let mut cmd = if nobody {
            sandbox_as_nobody()
        } else {
            sandbox()
        };
        let mut child = cmd
            .args(["session", "--private-tmp", "-w"])
            .arg(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let req = serde_json::json!({"id": "1", "op": "run", "argv": ["/bin/sh", "-c", CLOSE], "output": true});
        writeln!(stdin, "{req}").unwrap();
        writeln!(stdin, "{}", serde_json::json!({"op": "close"})).unwrap();
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        let events = String::from_utf8_lossy(&out.stdout);
        let exit: serde_json::Value = events
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|e| e["event"] == "exit")
            .unwrap();
        let tmpdir = exit["stdout"].as_str().unwrap().trim().to_owned();
        assert!(tmpdir.contains("sandbox-tmp-"), "{exit}");
        assert!(
            std::fs::symlink_metadata(&tmpdir).is_err(),
            "nobody {nobody}: {tmpdir} survived the session"
        );
        assert!(
            !String::from_utf8_lossy(&out.stderr).contains("could not be removed"),
            "{out:?}"
        );
    }
}

/// A tree deeper than the removal holds fds for (256 directories), closed
/// at the bottom, goes too, nothing said.
#[test]
fn a_deep_closed_private_tmpdir_is_removed() {
    for nobody in users() {
        let (_tmp, dir) = shared_dir();
        let mut cmd = if nobody {
            sandbox_as_nobody()
        } else {
            sandbox()
        };
        let script = "cd $TMPDIR; i=0; while [ $i -lt 600 ]; do mkdir d; cd d; i=$((i+1)); done; \
                      echo x > f; chmod 000 .; echo $TMPDIR";
        let out = cmd
            .args(["run", "--private-tmp", "-w"])
            .arg(&dir)
            .args(["--", "/bin/sh", "-c", script])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let tmpdir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(tmpdir.contains("sandbox-tmp-"), "{out:?}");
        assert!(
            std::fs::symlink_metadata(&tmpdir).is_err(),
            "nobody {nobody}: {tmpdir} survived"
        );
        assert!(
            !String::from_utf8_lossy(&out.stderr).contains("could not be removed"),
            "{out:?}"
        );
    }
}

/// What cannot be removed is said on stderr, the path escaped: a file made
/// immutable (`chattr +i`, by this test as root, while the run waits) keeps
/// the TMPDIR, made in a temporary directory whose name holds an escape
/// character; the line names it, the escape not raw. Needs root for
/// `chattr` (the runner itself runs as root and as nobody).
#[test]
fn a_private_tmpdir_that_cannot_be_removed_is_named_escaped() {
    assert!(
        sandbox_tests::is_root(),
        "chattr +i needs root: run this test as root"
    );
    for nobody in users() {
        let (_tmp, dir) = shared_dir();
        let base = dir.join("esc\x1b[31mdir");
        std::fs::create_dir(&base).unwrap();
        std::fs::set_permissions(&base, std::os::unix::fs::PermissionsExt::from_mode(0o777))
            .unwrap();
        let d = dir.display();
        let script = format!(
            "echo x > $TMPDIR/f; echo \"$TMPDIR\" > {d}/path; \
             while [ ! -e {d}/go ]; do sleep 0.05; done"
        );
        let mut cmd = if nobody {
            sandbox_as_nobody()
        } else {
            sandbox()
        };
        let child = cmd
            .env("TMPDIR", &base)
            .args(["run", "--private-tmp", "-w"])
            .arg(&dir)
            .args(["--", "/bin/sh", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
        let tmpdir = loop {
            if let Ok(p) = std::fs::read_to_string(dir.join("path")) {
                if p.ends_with('\n') {
                    break p.trim_end_matches('\n').to_owned();
                }
            }
            assert!(std::time::Instant::now() < until, "the run did not start");
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        let f = format!("{tmpdir}/f");
        assert!(std::process::Command::new("chattr")
            .args(["+i", &f])
            .status()
            .unwrap()
            .success());
        std::fs::write(dir.join("go"), "").unwrap();
        let out = child.wait_with_output().unwrap();
        let _ = std::process::Command::new("chattr")
            .args(["-i", &f])
            .status();
        let survived = std::path::Path::new(&tmpdir).exists();
        let _ = std::fs::remove_dir_all(&tmpdir);
        let _ = std::fs::remove_file(dir.join("path"));
        let _ = std::fs::remove_file(dir.join("go"));
        assert!(out.status.success(), "{out:?}");
        assert!(survived, "nobody {nobody}: {tmpdir} was removed");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("sandbox: the private temporary directory ")
                && err.contains("could not be removed: Operation not permitted"),
            "nobody {nobody}: {err}"
        );
        assert!(
            !err.contains('\x1b'),
            "nobody {nobody}: raw escape in {err:?}"
        );
        assert!(err.contains("sandbox-tmp-"), "{err}");
    }
}

/// The removal is no deputy (red team G3): a root command that cannot
/// remove another user's files in its write path (nobody's directory, 755)
/// moves the root-owned directory above them into `$TMPDIR`; the root
/// runner, removing the TMPDIR without capabilities, leaves nobody's files
/// (and so the TMPDIR, named on stderr). Twin (the positive control): the
/// command's own tree moved in the same way goes with the TMPDIR. Root
/// only (the files of another user; as nobody the runner has no
/// capabilities to lend).
#[test]
fn the_removal_deletes_nothing_the_command_could_not() {
    assert!(
        sandbox_tests::is_root(),
        "another user's files need root: run this test as root"
    );
    for theirs in [true, false] {
        let (_tmp, dir) = shared_dir();
        let p = dir.join("p");
        std::fs::create_dir_all(p.join("a/sub")).unwrap();
        std::fs::write(p.join("a/f"), "precious").unwrap();
        std::fs::write(p.join("a/sub/g"), "precious2").unwrap();
        if theirs {
            for q in ["a", "a/f", "a/sub", "a/sub/g"] {
                std::os::unix::fs::chown(p.join(q), Some(65534), Some(65534)).unwrap();
            }
        }
        let out = sandbox()
            .args(["run", "--private-tmp", "-w"])
            .arg(&dir)
            .current_dir(&dir)
            .args([
                "--",
                "/bin/sh",
                "-c",
                "rm -rf p/a 2>/dev/null; echo mine > $TMPDIR/own; mv p \"$TMPDIR/\"; \
                 echo \"$TMPDIR\"",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let tmpdir = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        assert!(tmpdir.contains("sandbox-tmp-"), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let moved = std::path::Path::new(&tmpdir).join("p/a");
        let kept = (
            moved.join("f").exists(),
            moved.join("sub/g").exists(),
            std::path::Path::new(&tmpdir).join("own").exists(),
            std::path::Path::new(&tmpdir).exists(),
        );
        let _ = std::fs::remove_dir_all(&tmpdir);
        if theirs {
            assert!(
                kept.0 && kept.1,
                "nobody's files were deleted by the runner: {err}"
            );
            // What was the command's own went.
            assert!(!kept.2, "the command's own file stayed");
            assert!(
                err.contains("sandbox: the private temporary directory ")
                    && err.contains("could not be removed"),
                "{err}"
            );
        } else {
            assert!(!kept.3, "{tmpdir} survived: {err}");
            assert!(!err.contains("could not be removed"), "{err}");
        }
    }
}
