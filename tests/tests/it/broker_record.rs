//! What the broker's record says about a failed run (red-team R6b):
//! a refusal after a flood of performed calls is kept and makes the run a
//! sandbox denial (F4), and a call the kernel itself refuses (a non-owner's
//! `chmod`, explicit times) is answered as bare and recorded as no refusal
//! (F5). Root and nobody, each beside its twin.

use std::path::Path;
use std::process::{Command, Output};

use sandbox_tests::{
    cannot_do_its_job, is_root, sandbox, sandbox_as_nobody, sandbox_lines, shared_dir, stderr,
    users,
};

fn runner(nobody: bool) -> Command {
    if nobody {
        sandbox_as_nobody()
    } else {
        sandbox()
    }
}

fn report(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("report written"))
        .expect("report is JSON")
}

/// 4200 chmods of the run's own file, then (when `deny`) a chmod of a file
/// outside the write path; exits 1 either way.
const FLOOD: &str = r#"
import os, sys
mine, outside, deny = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
open(mine, "w").close()
for i in range(4200):
    os.chmod(mine, 0o644 if i % 2 else 0o666)
if deny:
    try:
        os.chmod(outside, 0o600)
    except OSError as e:
        print("denied:", e)
raise SystemExit(1)
"#;

fn flood(nobody: bool, w: &Path, outside: &Path, deny: bool) -> (Output, serde_json::Value) {
    let report_path = w.join(format!("flood-{nobody}-{deny}.json"));
    let out = runner(nobody)
        .args(["run", "-w"])
        .arg(w)
        .arg("--report")
        .arg(&report_path)
        .args(["--", "/usr/bin/python3", "-c", FLOOD])
        .arg(w.join(format!("mine-{nobody}-{deny}")))
        .arg(outside)
        .arg(if deny { "1" } else { "0" })
        .output()
        .expect("spawn sandbox");
    (out, report(&report_path))
}

#[test]
fn a_refusal_after_a_flood_of_performed_calls_makes_the_run_a_denial() {
    for nobody in users() {
        let (_w_dir, w) = shared_dir();
        let (_o_dir, o) = shared_dir();
        let outside = o.join("outside");
        std::fs::write(&outside, b"x").unwrap();
        if nobody {
            std::os::unix::fs::chown(&outside, Some(65534), Some(65534)).unwrap();
        }
        let (out, v) = flood(nobody, &w, &outside, true);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "nobody={nobody}: {err}");
        let m = &v["mediation"];
        assert_eq!(
            v["classification"]["class"], "sandbox_denial",
            "nobody={nobody}: {v}"
        );
        let evidence = v["classification"]["evidence"].to_string();
        assert!(
            evidence.contains(&*outside.to_string_lossy()),
            "nobody={nobody}: {evidence}"
        );
        let refused = m["refused"].as_array().expect("refused listed");
        assert_eq!(refused.len(), 1, "nobody={nobody}: {m}");
        assert_eq!(m["omitted"], 0, "nobody={nobody}: {m}");
        assert!(
            m["performed"].as_u64().unwrap() >= 4200,
            "every performed chmod is counted: {m}"
        );
        assert!(
            sandbox_lines(&out)
                .iter()
                .any(|l| l.starts_with("sandbox: refused")),
            "nobody={nobody}: no summary line: {err}"
        );
        // The refused chmod changed nothing.
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&outside).unwrap().permissions().mode() & 0o777,
            0o644
        );
        // Twin: the same flood without the refusal is the command's own
        // failure, nothing refused.
        let (out, v) = flood(nobody, &w, &outside, false);
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert_eq!(
            v["classification"]["class"], "task_failure",
            "nobody={nobody}: {v}"
        );
        assert_eq!(v["mediation"]["refused"], serde_json::json!([]));
        assert_eq!(v["mediation"]["omitted"], 0);
    }
}

/// As nobody: `chmod` and `touch -d` of a root-owned file inside the
/// write path fail bare with the kernel's EPERM; confined they fail the
/// same, and the record has no refusal (the command failed on its own
/// terms). Control: the same calls on nobody's own file outside the write
/// path are the sandbox's refusals, recorded.
#[test]
fn the_kernels_own_eperm_is_no_refusal() {
    if !is_root() {
        cannot_do_its_job(
            "the_kernels_own_eperm_is_no_refusal",
            "needs a root-owned file in a directory nobody may write",
        );
        return;
    }
    let (_w_dir, w) = shared_dir();
    let (_o_dir, o) = shared_dir();
    let roots = w.join("roots");
    std::fs::write(&roots, b"x").unwrap();
    let mine_out = o.join("mine");
    std::fs::write(&mine_out, b"x").unwrap();
    std::os::unix::fs::chown(&mine_out, Some(65534), Some(65534)).unwrap();
    let script = |f: &Path| {
        format!(
            "chmod 600 {0} 2>&1; echo chmod=$?; touch -d 2020-01-01 {0} 2>&1; echo touch=$?",
            f.display()
        )
    };
    let bare = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(["/bin/sh", "-c", &script(&roots)])
        .output()
        .unwrap();
    let bare_out = String::from_utf8_lossy(&bare.stdout).into_owned();
    assert!(
        bare_out.contains("chmod=1") && bare_out.contains("touch=1"),
        "bare: {bare_out}"
    );
    assert!(bare_out.contains("Operation not permitted"), "{bare_out}");
    // As nobody, `-w W`, the record to `report_path`; the script fails.
    let confined = |report_path: &Path, f: &Path| {
        sandbox_as_nobody()
            .args(["run", "-w"])
            .arg(&w)
            .arg("--report")
            .arg(report_path)
            .args(["--", "/bin/sh", "-c"])
            .arg(format!("{}; exit 1", script(f)))
            .output()
            .unwrap()
    };
    let report_path = w.join("notowner.json");
    let out = confined(&report_path, &roots);
    let confined_out = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(confined_out, bare_out, "confined answers as bare");
    let v = report(&report_path);
    assert_eq!(v["classification"]["class"], "task_failure", "{v}");
    assert_eq!(v["mediation"]["refused"], serde_json::json!([]), "{v}");
    assert!(
        !sandbox_lines(&out)
            .iter()
            .any(|l| l.starts_with("sandbox: refused")),
        "{}",
        stderr(&out)
    );
    // Control: nobody's own file outside the write path, refused and recorded
    // (bare it would be changed).
    let report_path = w.join("outside.json");
    let out = confined(&report_path, &mine_out);
    let v = report(&report_path);
    assert_eq!(v["classification"]["class"], "sandbox_denial", "{v}");
    let refused = v["mediation"]["refused"].as_array().unwrap();
    assert!(
        refused.len() >= 2 && refused.iter().all(|c| c["outside_write_paths"] == true),
        "{v}"
    );
    assert!(
        sandbox_lines(&out)
            .iter()
            .any(|l| l.starts_with("sandbox: refused")),
        "{}",
        stderr(&out)
    );
    // The bare twin of the control changes nobody's own file.
    let bare = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(["/bin/sh", "-c", &script(&mine_out)])
        .output()
        .unwrap();
    let bare_out = String::from_utf8_lossy(&bare.stdout);
    assert!(
        bare_out.contains("chmod=0") && bare_out.contains("touch=0"),
        "{bare_out}"
    );
}

/// `linkat` of a `/proc/self/fd/N` path; argv: source file, new name, flags.
const PROC_LINK: &str = r#"
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open(sys.argv[1], os.O_RDONLY)
rc = libc.linkat(-100, f"/proc/self/fd/{fd}".encode(), -100, sys.argv[2].encode(), int(sys.argv[3]))
print("ok" if rc == 0 else errno.errorcode[ctypes.get_errno()])
raise SystemExit(1)
"#;

/// Workload sweep P7: `linkat(AT_FDCWD, "/proc/self/fd/N", AT_FDCWD, name,
/// 0)` (Python's `os.link`) is EXDEV from the kernel, bare and under plain
/// `-w`: the source is procfs's magic link itself. Under workspace-write
/// (the broker handles links) it is the same EXDEV, and no refusal is
/// recorded: the command failed on its own terms. Twins: the same link with
/// `AT_SYMLINK_FOLLOW` of the workspace's own file is made; of a file
/// outside the workspace (opened read-only) it is the sandbox's refusal,
/// recorded (bare it would be made). Root and nobody.
#[test]
fn a_proc_fd_link_not_followed_is_exdev_and_no_refusal() {
    for nobody in users() {
        let (_w_dir, w) = shared_dir();
        let (_o_dir, o) = shared_dir();
        let (mine, outside) = (w.join("mine"), o.join("outside"));
        std::fs::write(&mine, b"x").unwrap();
        std::fs::write(&outside, b"x").unwrap();
        if nobody {
            // Its own files (protected_hardlinks: no link to another's).
            for f in [&mine, &outside] {
                std::os::unix::fs::chown(f, Some(65534), Some(65534)).unwrap();
            }
        }
        let run = |report_path: &Path, source: &Path, name: &str, flags: &str| {
            runner(nobody)
                .args(["run", "--mode", "workspace-write", "--workspace"])
                .arg(&w)
                .arg("--report")
                .arg(report_path)
                .args(["--", "/usr/bin/python3", "-c", PROC_LINK])
                .arg(source)
                .arg(w.join(name))
                .arg(flags)
                .output()
                .expect("spawn sandbox")
        };
        let r = w.join("nofollow.json");
        let out = run(&r, &mine, "new", "0");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "EXDEV",
            "nobody={nobody}: {}",
            stderr(&out)
        );
        let v = report(&r);
        assert_eq!(v["classification"]["class"], "task_failure", "{v}");
        assert_eq!(v["mediation"]["refused"], serde_json::json!([]), "{v}");
        // Wherever the file lies: outside the workspace too.
        let r = w.join("nofollow-outside.json");
        let out = run(&r, &outside, "new", "0");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "EXDEV");
        assert_eq!(report(&r)["mediation"]["refused"], serde_json::json!([]));
        // Twins, followed: the workspace's own file is linked...
        let r = w.join("follow.json");
        let out = run(&r, &mine, "linked", "1024");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            "ok",
            "nobody={nobody}: {}",
            stderr(&out)
        );
        assert_eq!(std::fs::read(w.join("linked")).unwrap(), b"x");
        // ... and a file outside it is refused (EXDEV, as Landlock answers
        // under plain -w without the refer right) and recorded.
        let r = w.join("follow-outside.json");
        let out = run(&r, &outside, "stolen", "1024");
        assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "EXDEV");
        let v = report(&r);
        assert_eq!(v["classification"]["class"], "sandbox_denial", "{v}");
        assert_eq!(
            v["mediation"]["refused"].as_array().map(Vec::len),
            Some(1),
            "{v}"
        );
        assert!(!w.join("stolen").exists());
    }
}
