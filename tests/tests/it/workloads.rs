//! Real workloads under the real stack (`sandbox run`, Landlock + seccomp +
//! the metadata broker), each inside a write path with the network off, and
//! metadata escapes that must leave their target unchanged.

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;

use sandbox_tests::sandbox;

struct Work {
    _dir: tempfile::TempDir,
    w: PathBuf,
    outside: PathBuf,
}

fn work() -> Work {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    let w = root.join("w");
    let outside = root.join("outside");
    fs::create_dir_all(&w).unwrap();
    fs::create_dir_all(&outside).unwrap();
    Work {
        _dir: dir,
        w,
        outside,
    }
}

/// `sh -c script` in `w`, confined to writing `w` (minus `deny`), network off.
fn run_in(w: &Path, deny: &[&Path], script: &str) -> Output {
    let mut cmd = sandbox();
    cmd.args([
        "run",
        "--backend",
        "landlock",
        "--on-unsupported",
        "error",
        "--no-network",
        "-w",
    ])
    .arg(w);
    for d in deny {
        cmd.arg("--write-deny").arg(d);
    }
    cmd.args(["--", "/bin/sh", "-c", script])
        .current_dir(w)
        .env("HOME", w)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("TMPDIR", w)
        .output()
        .unwrap()
}

#[track_caller]
fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn mode(p: &Path) -> u32 {
    fs::symlink_metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn git_init_add_commit_config() {
    let t = work();
    let out = ok(&run_in(
        &t.w,
        &[],
        "git init -q repo && cd repo && git config user.email a@b.c && git config user.name n \
         && echo hi > f && git add f && git commit -qm first && git log --oneline | wc -l",
    ));
    assert_eq!(out.trim(), "1");
}

#[test]
fn cc_compile_link_and_run() {
    let t = work();
    fs::write(
        t.w.join("hello.c"),
        "#include <stdio.h>\nint main(void){puts(\"hi from cc\");return 0;}\n",
    )
    .unwrap();
    let out = ok(&run_in(&t.w, &[], "cc -o hello hello.c && ./hello"));
    assert_eq!(out.trim(), "hi from cc");
    assert_eq!(
        mode(&t.w.join("hello")) & 0o111,
        0o111,
        "the linker's chmod was brokered"
    );
}

#[test]
fn tar_extract_preserves_modes_and_times() {
    let t = work();
    let src = t.w.join("src");
    fs::create_dir(&src).unwrap();
    fs::write(src.join("tool"), "#!/bin/sh\n").unwrap();
    fs::set_permissions(src.join("tool"), fs::Permissions::from_mode(0o750)).unwrap();
    ok(&std::process::Command::new("touch")
        .args(["-d", "2001-02-03 04:05:06"])
        .arg(src.join("tool"))
        .output()
        .unwrap());
    ok(&run_in(
        &t.w,
        &[],
        "tar -cf a.tar src && mkdir x && tar -xpf a.tar -C x",
    ));
    let extracted = t.w.join("x/src/tool");
    assert_eq!(mode(&extracted), 0o750);
    assert_eq!(
        fs::metadata(&extracted).unwrap().mtime(),
        fs::metadata(src.join("tool")).unwrap().mtime()
    );
}

#[test]
fn python_venv() {
    let t = work();
    let out = ok(&run_in(
        &t.w,
        &[],
        "python3 -m venv --without-pip venv && venv/bin/python -c 'import sys; print(sys.prefix)'",
    ));
    assert!(out.trim().ends_with("/venv"), "{out}");
}

#[test]
fn chmod_plus_x_then_run() {
    let t = work();
    let out = ok(&run_in(
        &t.w,
        &[],
        "printf '#!/bin/sh\\necho ran\\n' > s.sh && chmod +x s.sh && ./s.sh",
    ));
    assert_eq!(out.trim(), "ran");
}

#[test]
fn metadata_escapes_leave_targets_unchanged() {
    let t = work();
    let target = t.outside.join("target");
    fs::write(&target, "x").unwrap();
    fs::set_permissions(&target, fs::Permissions::from_mode(0o644)).unwrap();
    std::os::unix::fs::symlink(&target, t.w.join("link-out")).unwrap();
    fs::create_dir(t.w.join(".git")).unwrap();
    fs::write(t.w.join(".git/config"), "").unwrap();
    fs::set_permissions(t.w.join(".git/config"), fs::Permissions::from_mode(0o644)).unwrap();
    let git = t.w.join(".git");
    let mtime = fs::metadata(&target).unwrap().mtime();
    let tp = target.display().to_string();
    for script in [
        format!("chmod 600 {tp}"),
        "chmod 600 link-out".to_owned(),
        "chmod 600 ../outside/target".to_owned(),
        format!("exec 3<{tp} && chmod 600 /proc/self/fd/3"),
        format!("touch -d 2001-01-01 {tp}"),
        "chmod 600 .git/config".to_owned(),
    ] {
        let out = run_in(&t.w, &[&git], &script);
        assert!(!out.status.success(), "{script} succeeded");
        assert_eq!(mode(&target), 0o644, "{script}");
        assert_eq!(fs::metadata(&target).unwrap().mtime(), mtime, "{script}");
        assert_eq!(mode(&t.w.join(".git/config")), 0o644, "{script}");
    }
    // Positive control: the same chmod on a sibling inside the write path works.
    fs::write(t.w.join("inside"), "").unwrap();
    ok(&run_in(&t.w, &[&git], "chmod 600 inside"));
    assert_eq!(mode(&t.w.join("inside")), 0o600);
    // Set-id bits are never granted, even inside.
    let out = run_in(&t.w, &[&git], "chmod u+s inside");
    assert!(!out.status.success());
    assert_eq!(mode(&t.w.join("inside")), 0o600);
}

/// Python's multiprocessing (fork and spawn start methods, processes talking
/// over a Pipe) and asyncio (its socketpair self-pipe, a subprocess, a thread
/// wake-up) work under --no-network with the hardened filter. Pools and
/// Queues need POSIX semaphores in /dev/shm: the run's own (private_shm)
/// where the broker keeps the writes; with --no-private-shm only when
/// /dev/shm is a write path, which reaches every same-user object in it.
#[test]
fn python_multiprocessing_and_asyncio() {
    let work = work();
    let script = r#"
import asyncio, multiprocessing as mp, sys
def child(conn):
    conn.send(conn.recv() * 2)
def square(x):
    return x * x
async def main():
    loop = asyncio.get_running_loop()
    fut = loop.run_in_executor(None, lambda: 41 + 1)
    proc = await asyncio.create_subprocess_exec("/bin/echo", "sub", stdout=asyncio.subprocess.PIPE)
    out, _ = await proc.communicate()
    return await fut, out.decode().strip()
if __name__ == "__main__":
    for method in ("fork", "spawn"):
        ctx = mp.get_context(method)
        a, b = ctx.Pipe()
        p = ctx.Process(target=child, args=(b,))
        p.start()
        a.send(21)
        assert a.recv() == 42
        p.join()
        assert p.exitcode == 0
    if sys.argv[1:] == ["pool"]:
        with mp.get_context("spawn").Pool(2) as pool:
            assert pool.map(square, range(5)) == [0, 1, 4, 9, 16]
    print("mp ok", asyncio.run(main()))
"#;
    fs::write(work.w.join("mp.py"), script).unwrap();
    let out = ok(&run_in(&work.w, &[], "python3 mp.py"));
    assert!(out.contains("mp ok (42, 'sub')"), "{out}");
    // A Pool's semaphores are the run's own shared memory: the write path
    // is the home directory here (protected, so the broker keeps its
    // writes), and the broker makes them in /dev/shm ...
    let out = ok(&run_in(&work.w, &[], "python3 mp.py pool"));
    assert!(out.contains("mp ok (42, 'sub')"), "{out}");
    // ... refused with --no-private-shm ...
    let out = sandbox()
        .args(["run", "--no-network", "--no-private-shm", "-w"])
        .arg(&work.w)
        .args(["--", "python3", "mp.py", "pool"])
        .current_dir(&work.w)
        .env("HOME", &work.w)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("PermissionError"));
    // ... and working then with /dev/shm as a write path.
    let out = sandbox()
        .args(["run", "--no-network", "--no-private-shm", "-w"])
        .arg(&work.w)
        .args(["-w", "/dev/shm", "--", "python3", "mp.py", "pool"])
        .current_dir(&work.w)
        .output()
        .unwrap();
    assert!(ok(&out).contains("mp ok (42, 'sub')"));
}
