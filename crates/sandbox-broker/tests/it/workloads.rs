//! Everyday tools that change metadata work inside a write path under the
//! brokered filter (the filter here only routes metadata syscalls; Landlock is
//! the backend's business).
#![cfg(target_os = "linux")]

use std::os::unix::fs::MetadataExt;

use crate::common::*;

fn run_ok(fx: &Fixture, cmd: &str) -> sandbox_broker::BrokerLog {
    let run = sh(fx.rules(&[]), cmd);
    assert_eq!(run.code, 0, "{cmd}\n{}", run.log.explain(20));
    assert_eq!(run.log.refusals().count(), 0, "{}", run.log.explain(20));
    run.log
}

#[test]
fn chmod_plus_x_then_run() {
    let fx = Fixture::new();
    let s = fx.w.join("s.sh");
    std::fs::write(&s, "#!/bin/sh\nexit 7\n").unwrap();
    let run = sh(fx.rules(&[]), &format!("chmod +x {0} && {0}", q(&s)));
    assert_eq!(run.code, 7);
    assert_eq!(mode(&s) & 0o111, 0o111);
}

#[test]
fn git_init_add_commit_config() {
    let fx = Fixture::new();
    let log = run_ok(
        &fx,
        &format!(
            "cd {} && git init -q r && cd r && git config user.name t && git config user.email t@e \
             && echo a > a && git add a && git commit -qm m && git log --oneline >/dev/null",
            q(&fx.w)
        ),
    );
    assert!(fx.w.join("r/.git/HEAD").exists());
    println!(
        "git: {} brokered calls",
        log.records.len() as u64 + log.omitted
    );
}

#[test]
fn tar_extract_preserves_modes_and_times() {
    let fx = Fixture::new();
    let src = fx.o.join("src");
    std::fs::create_dir(&src).unwrap();
    let exe = fx.file(&src.join("exe"), 0o751);
    let c = cstr(&exe);
    let times = [
        libc::timespec {
            tv_sec: 981_173_106,
            tv_nsec: 0,
        },
        libc::timespec {
            tv_sec: 981_173_106,
            tv_nsec: 0,
        },
    ];
    // SAFETY: utimensat on a live path with two timespecs.
    assert_eq!(
        unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) },
        0
    );
    let archive = fx.o.join("a.tar");
    let st = std::process::Command::new("tar")
        .arg("-cf")
        .arg(&archive)
        .arg("-C")
        .arg(&src)
        .arg("exe")
        .status()
        .unwrap();
    assert!(st.success());
    let log = run_ok(&fx, &format!("tar -xpf {} -C {}", q(&archive), q(&fx.w)));
    let got = std::fs::metadata(fx.w.join("exe")).unwrap();
    assert_eq!(got.mode() & 0o7777, 0o751);
    assert_eq!(got.mtime(), 981_173_106);
    assert!(log.performed().count() >= 2, "{}", log.explain(20));
}

#[test]
fn cc_compile_and_link() {
    let fx = Fixture::new();
    if std::process::Command::new("cc")
        .arg("--version")
        .output()
        .is_err()
    {
        panic!("cc is required for this workload test");
    }
    std::fs::write(fx.w.join("m.c"), "int main(void){return 3;}\n").unwrap();
    let run = sh(
        fx.rules(&[]),
        &format!("cd {} && cc -o m m.c && ./m", q(&fx.w)),
    );
    assert_eq!(run.code, 3, "{}", run.log.explain(20));
    assert!(
        run.log
            .performed()
            .any(|r| r.syscall.starts_with("chmod") || r.syscall.starts_with("fchmod")),
        "the linker's chmod went through the broker: {}",
        run.log.explain(20)
    );
}

#[test]
fn python_venv() {
    let fx = Fixture::new();
    let log = run_ok(
        &fx,
        &format!("python3 -m venv --without-pip {}", q(&fx.w.join("v"))),
    );
    assert!(fx.w.join("v/bin/python3").exists());
    println!("venv: {}", log.explain(0).trim());
}

/// With a read-deny path in the policy the xattr reads are brokered too:
/// `ls -l` (ACL probes) and `cp --preserve=timestamps,xattr` work, the copy
/// keeps its attribute, and nothing is refused. (`cp -a` would also set
/// `system.posix_acl_access`, which the broker refuses as before.)
#[test]
fn ls_and_cp_with_xattr_reads_brokered() {
    let fx = Fixture::with_user_xattrs();
    let src = fx.w.join("src");
    std::fs::create_dir(&src).unwrap();
    let f = fx.file(&src.join("f"), 0o640);
    set_xattr(&f, "user.k", b"value");
    let secret = fx.o.join("secret");
    std::fs::create_dir(&secret).unwrap();
    let sh = Sh::new(&format!(
        "ls -la {0} {1} /usr/bin >/dev/null && cp -r --preserve=timestamps,xattr {1} {2}",
        q(&fx.w),
        q(&src),
        q(&fx.w.join("dst"))
    ));
    let run = confined_reads(fx.read_deny_rules(&[&secret]), || sh.exec());
    assert_eq!(run.code, 0, "{}", run.log.explain(20));
    assert_eq!(run.log.refusals().count(), 0, "{}", run.log.explain(20));
    assert!(
        run.log
            .performed()
            .any(|r| r.syscall.contains("getxattr") || r.syscall.contains("listxattr")),
        "the reads went through the broker: {}",
        run.log.explain(20)
    );
    assert_eq!(
        get_xattr(&fx.w.join("dst/f"), "user.k").as_deref(),
        Some(&b"value"[..])
    );
    println!("ls + cp: {}", run.log.explain(0).trim());
}
