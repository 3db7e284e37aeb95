//! Real workloads under a write path with network false: git, python, cc,
//! tar and make. TMPDIR and HOME point inside the write path.
#![cfg(target_os = "linux")]

use crate::common::*;
use std::fs;
use std::process::Output;

struct Work {
    _t: Temp,
    w: String,
    policy: sandbox_core::ResolvedPolicy,
}

fn work() -> Work {
    let t = temp();
    let w = t.path.join("w");
    fs::create_dir_all(w.join("tmp")).unwrap();
    fs::create_dir_all(w.join("home")).unwrap();
    let policy = resolve(write_policy(&[&w], false));
    Work {
        w: path_str(&w),
        _t: t,
        policy,
    }
}

impl Work {
    fn run(&self, script: &str) -> Output {
        let tmp = format!("{}/tmp", self.w);
        let home = format!("{}/home", self.w);
        sh_env(
            &self.policy,
            &format!("set -e; cd {}; {script}", self.w),
            &[("TMPDIR", &tmp), ("HOME", &home), ("LC_ALL", "C")],
        )
    }
}

#[test]
fn git_init_add_commit() {
    let w = work();
    let out = ok(&w.run(
        "git init -q repo && cd repo && echo hello > f && git add f \
         && git -c user.name=t -c user.email=t@example.invalid commit -q -m first \
         && git log --format=%s",
    ));
    assert_eq!(out.trim(), "first");
}

#[test]
fn git_add_commit_in_a_repo_initialised_outside() {
    let w = work();
    ok(&sh_plain(&format!("git init -q {}/repo", w.w)));
    let out = ok(&w.run(
        "cd repo && echo hello > f && mkdir d && echo x > d/g && git add f d \
         && git -c user.name=t -c user.email=t@example.invalid commit -q -m first \
         && echo more >> f \
         && git -c user.name=t -c user.email=t@example.invalid commit -q -a -m second \
         && git log --format=%s",
    ));
    assert_eq!(out.trim(), "second\nfirst");
}

#[test]
fn python_writes_files() {
    let w = work();
    let out = ok(&w.run(&format!(
        "{PYTHON} -c 'import pathlib, tempfile; pathlib.Path(\"out\").mkdir(); pathlib.Path(\"out/a.txt\").write_text(\"a\"); tempfile.NamedTemporaryFile(); print(pathlib.Path(\"out/a.txt\").read_text())'"
    )));
    assert_eq!(out.trim(), "a");
}

#[test]
fn python_venv() {
    let w = work();
    let out = ok(&w.run(&format!(
        "{PYTHON} -m venv --without-pip venv && venv/bin/python -c 'import sys; print(sys.prefix)'"
    )));
    assert!(out.trim().ends_with("/venv"), "{out}");
}

#[test]
fn cc_compile_and_run() {
    let w = work();
    fs::write(
        format!("{}/hello.c", w.w),
        "#include <stdio.h>\nint main(void){puts(\"hello from cc\");return 0;}\n",
    )
    .unwrap();
    let out = ok(&w.run("cc -o hello hello.c && ./hello"));
    assert_eq!(out.trim(), "hello from cc");
}

#[test]
fn cc_compile_and_run_through_the_loader() {
    // The output lacks its x bit (see `cc_compile_and_run`), so run it
    // through the dynamic loader, which only needs to read it.
    let loader = if cfg!(target_arch = "aarch64") {
        "/lib/ld-linux-aarch64.so.1"
    } else {
        "/lib64/ld-linux-x86-64.so.2"
    };
    let w = work();
    fs::write(
        format!("{}/hello.c", w.w),
        "#include <stdio.h>\nint main(void){puts(\"hello from cc\");return 0;}\n",
    )
    .unwrap();
    let out = ok(&w.run(&format!("cc -o hello hello.c && {loader} ./hello")));
    assert_eq!(out.trim(), "hello from cc");
}

#[test]
fn tar_extract_restoring_owner_mode_and_times() {
    let w = work();
    let out = ok(&w.run(
        "mkdir -p src/d && echo one > src/d/one && tar -cf a.tar src && mkdir x && tar -xf a.tar -C x && cat x/src/d/one",
    ));
    assert_eq!(out.trim(), "one");
}

#[test]
fn tar_create_and_extract() {
    let w = work();
    let out = ok(&w.run(
        "mkdir -p src/d && echo one > src/d/one && tar -cf a.tar src && mkdir x && tar -xf a.tar -C x --no-same-owner --no-same-permissions -m && cat x/src/d/one",
    ));
    assert_eq!(out.trim(), "one");
}

#[test]
fn make_builds_a_target() {
    let w = work();
    fs::write(
        format!("{}/Makefile", w.w),
        "out.txt: in.txt\n\tcp in.txt out.txt\n\techo built >> out.txt\n",
    )
    .unwrap();
    fs::write(format!("{}/in.txt", w.w), "in\n").unwrap();
    ok(&w.run("make -s"));
    assert_eq!(
        fs::read_to_string(format!("{}/out.txt", w.w)).unwrap(),
        "in\nbuilt\n"
    );
}
