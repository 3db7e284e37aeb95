//! The command's own standard fds opened again by their paths
//! (`/dev/stdout`, `/dev/stderr`, `/proc/self/fd/N`, the file's name), as
//! scripts do (`echo x > /dev/stderr`, `tee /dev/stderr`): allowed as the
//! fd is open (a log file outside the write paths, a terminal), in every
//! mode, root and nobody; nothing else beside that file, and no write
//! through a file handed as stdin (open for reading only).
#![cfg(target_os = "linux")]

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use sandbox_tests::{sandbox, sandbox_as_nobody, shared_dir, users};

fn cmd(nobody: bool) -> Command {
    if nobody {
        sandbox_as_nobody()
    } else {
        sandbox()
    }
}

/// A file anyone may write (0666) in `dir`.
fn open_file(dir: &std::path::Path, name: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, "").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    path
}

#[test]
fn a_log_file_given_as_stdout_and_stderr_opens_by_its_paths_and_nothing_beside_it() {
    let (_w, w) = shared_dir();
    let (_out, out) = shared_dir();
    let w = w.to_str().unwrap();
    for nobody in users() {
        for mode in [
            vec!["-w", w],
            vec!["-w", w, "--explain"],
            vec!["--mode", "workspace-write", "--workspace", w],
        ] {
            let log = open_file(&out, "build.log");
            let other = open_file(&out, "other.log");
            let script = format!(
                "echo out >> /dev/stdout; echo err | tee -a /dev/stderr >/dev/null; \
                 echo fd >> /proc/self/fd/1; echo other >> {}; echo done",
                other.display()
            );
            let file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
            let status = cmd(nobody)
                .arg("run")
                .args(&mode)
                .args(["--", "sh", "-c", &script])
                .stdout(Stdio::from(file.try_clone().unwrap()))
                .stderr(Stdio::from(file))
                .status()
                .unwrap();
            let text = std::fs::read_to_string(&log).unwrap();
            let who = format!("nobody={nobody} {mode:?}: {text}");
            // The allowed twin: every path to the log file.
            for line in ["out\n", "err\n", "fd\n", "done\n"] {
                assert!(text.contains(line), "{line:?} missing; {who}");
            }
            // The denial: the file beside it stays untouched.
            assert_eq!(std::fs::read_to_string(&other).unwrap(), "", "{who}");
            assert!(text.contains("Permission denied"), "{who}");
            assert_eq!(status.code(), Some(0), "{who}");
        }
    }
}

#[test]
fn a_file_given_as_stdin_is_not_written_through_its_paths() {
    let (_w, w) = shared_dir();
    let (_in, input) = shared_dir();
    for nobody in users() {
        let file = open_file(&input, "input.txt");
        std::fs::write(&file, "data\n").unwrap();
        let out = cmd(nobody)
            .args(["run", "-w", w.to_str().unwrap(), "--", "sh", "-c"])
            .arg("cat /dev/stdin; echo x >> /dev/stdin || echo refused")
            .stdin(Stdio::from(std::fs::File::open(&file).unwrap()))
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        // Read through its path (the twin), not written.
        assert_eq!(stdout, "data\nrefused\n", "nobody={nobody}");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "data\n");
    }
}

#[test]
fn a_terminal_given_as_stdout_opens_by_its_path() {
    let (_w, w) = shared_dir();
    for nobody in users() {
        let (master, slave) = sandbox_tests::new_pty();
        let mut master = std::fs::File::from(master);
        if nobody {
            // nobody's own terminal, as a login gives it: the path is then
            // writable by its mode, as bare.
            use std::os::fd::AsRawFd;
            // SAFETY: fchown on a live fd.
            assert_eq!(
                unsafe { libc::fchown(slave.as_raw_fd(), 65534, u32::MAX) },
                0
            );
        }
        let mut child = cmd(nobody)
            .args(["run", "-q", "-w", w.to_str().unwrap(), "--", "sh", "-c"])
            .arg("echo on-tty > /dev/stdout && test -t 1 && echo still-a-tty")
            .stdin(Stdio::null())
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave))
            .spawn()
            .unwrap();
        let status = child.wait().unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        // The runner and the command are gone: what they wrote is in the
        // pty's buffer; a read past it fails (EIO), which ends the loop.
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
        }
        let seen = String::from_utf8_lossy(&seen);
        assert!(seen.contains("on-tty"), "nobody={nobody}: {seen}");
        assert!(seen.contains("still-a-tty"), "nobody={nobody}: {seen}");
        assert_eq!(status.code(), Some(0), "nobody={nobody}: {seen}");
    }
}
