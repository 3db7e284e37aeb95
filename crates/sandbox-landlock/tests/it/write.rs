//! Write axis: writes inside a write path work, writes outside fail and leave
//! the target unchanged, by every route the issue names.
#![cfg(target_os = "linux")]

use crate::common::*;
use std::fs;
use std::path::PathBuf;

struct Setup {
    _t: Temp,
    w: PathBuf,
    o: PathBuf,
    policy: sandbox_core::ResolvedPolicy,
}

fn setup() -> Setup {
    let t = temp();
    let w = t.path.join("w");
    let o = t.path.join("o");
    fs::create_dir_all(w.join("sub")).unwrap();
    fs::create_dir_all(&o).unwrap();
    fs::write(w.join("inside"), "inside\n").unwrap();
    fs::write(o.join("target"), "orig\n").unwrap();
    let policy = resolve(write_policy(&[&w], true));
    Setup {
        _t: t,
        w,
        o,
        policy,
    }
}

fn content(p: &std::path::Path) -> String {
    fs::read_to_string(p).unwrap()
}

#[test]
fn open_and_creat() {
    let s = setup();
    let (w, o) = (path_str(&s.w), path_str(&s.o));
    ok(&sh(
        &s.policy,
        &format!("echo new > {w}/new && echo more >> {w}/inside"),
    ));
    assert_eq!(content(&s.w.join("new")), "new\n");
    assert_eq!(content(&s.w.join("inside")), "inside\nmore\n");

    refused(&sh(&s.policy, &format!("echo x > {o}/target")));
    refused(&sh(&s.policy, &format!("echo x >> {o}/target")));
    assert_eq!(content(&s.o.join("target")), "orig\n");
    refused(&sh(&s.policy, &format!("echo x > {o}/created")));
    assert!(!s.o.join("created").exists());
}

#[test]
fn rename_across_the_boundary() {
    let s = setup();
    let (w, o) = (path_str(&s.w), path_str(&s.o));
    fs::write(s.w.join("movable"), "m\n").unwrap();
    // Positive control: renames between directories inside the write path.
    ok(&sh(
        &s.policy,
        &format!("mv {w}/movable {w}/sub/moved && mv {w}/sub/moved {w}/movable"),
    ));
    assert!(s.w.join("movable").exists());

    // Out: the file must stay inside.
    denied(&sh(&s.policy, &format!("mv {w}/movable {o}/moved")));
    assert!(s.w.join("movable").exists() && !s.o.join("moved").exists());
    // In: a file from outside must not be pulled in (and so become writable).
    denied(&sh(&s.policy, &format!("mv {o}/target {w}/stolen")));
    assert!(!s.w.join("stolen").exists());
    assert_eq!(content(&s.o.join("target")), "orig\n");
}

#[test]
fn link_across_the_boundary() {
    let s = setup();
    let (w, o) = (path_str(&s.w), path_str(&s.o));
    ok(&sh(&s.policy, &format!("ln {w}/inside {w}/sub/hard")));
    assert!(s.w.join("sub/hard").exists());

    denied(&sh(&s.policy, &format!("ln {w}/inside {o}/hard")));
    assert!(!s.o.join("hard").exists());
    // A hard link into the write path would make the outside file writable.
    denied(&sh(&s.policy, &format!("ln {o}/target {w}/hard")));
    assert!(!s.w.join("hard").exists());
    refused(&sh(&s.policy, &format!("ln -s {w}/inside {o}/soft")));
    assert!(fs::symlink_metadata(s.o.join("soft")).is_err());
}

#[test]
fn symlink_planted_inside_pointing_out() {
    let s = setup();
    let (w, o) = (path_str(&s.w), path_str(&s.o));
    ok(&sh(
        &s.policy,
        &format!("ln -s {w}/inside {w}/in-link && echo via >> {w}/in-link"),
    ));
    assert_eq!(content(&s.w.join("inside")), "inside\nvia\n");

    ok(&sh(&s.policy, &format!("ln -s {o}/target {w}/out-link")));
    refused(&sh(&s.policy, &format!("echo x > {w}/out-link")));
    assert_eq!(content(&s.o.join("target")), "orig\n");
}

#[test]
fn truncate_by_path_outside_is_refused() {
    let s = setup();
    // truncate(2) on a path, not open(O_TRUNC): python's os.truncate with a str.
    let script = |p: &str| format!("{PYTHON} -c 'import os,sys; os.truncate(sys.argv[1], 0)' {p}");
    // Positive controls: O_TRUNC and ftruncate on a writable fd inside work.
    let inside = path_str(&s.w.join("inside"));
    ok(&sh(
        &s.policy,
        &format!("{PYTHON} -c 'import os,sys; f=open(sys.argv[1],\"r+\"); os.ftruncate(f.fileno(), 1)' {inside} && : > {inside}"),
    ));
    assert_eq!(content(&s.w.join("inside")), "");
    refused(&sh(&s.policy, &script(&path_str(&s.o.join("target")))));
    assert_eq!(content(&s.o.join("target")), "orig\n");
}

#[test]
fn truncate_by_path_inside_a_write_path() {
    let s = setup();
    let script = |p: &str| format!("{PYTHON} -c 'import os,sys; os.truncate(sys.argv[1], 0)' {p}");
    ok(&sh(&s.policy, &script(&path_str(&s.w.join("inside")))));
    assert_eq!(content(&s.w.join("inside")), "");
}

#[test]
fn mkdir_mknod_mkfifo() {
    let s = setup();
    let (w, o) = (path_str(&s.w), path_str(&s.o));
    ok(&sh(
        &s.policy,
        &format!("mkdir {w}/d && mkfifo {w}/f && mknod {w}/p p"),
    ));
    assert!(s.w.join("d").is_dir() && s.w.join("f").exists() && s.w.join("p").exists());
    for cmd in [
        format!("mkdir {o}/d"),
        format!("mkfifo {o}/f"),
        format!("mknod {o}/p p"),
    ] {
        refused(&sh(&s.policy, &cmd));
    }
    assert_eq!(
        fs::read_dir(&s.o).unwrap().count(),
        1,
        "only `target` is left outside"
    );
}

#[test]
fn remove_outside_fails() {
    let s = setup();
    let (w, o) = (path_str(&s.w), path_str(&s.o));
    fs::write(s.w.join("gone"), "").unwrap();
    ok(&sh(&s.policy, &format!("rm {w}/gone")));
    assert!(!s.w.join("gone").exists());
    refused(&sh(&s.policy, &format!("rm {o}/target")));
    assert!(s.o.join("target").exists());
}

#[test]
fn chmod_outside_is_refused_inside_is_brokered() {
    use std::os::unix::fs::PermissionsExt;
    let s = setup();
    let target = s.o.join("target");
    let mode = |p: &std::path::Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let before = mode(&target);
    refused(&sh(&s.policy, &format!("chmod 600 {}", path_str(&target))));
    assert_eq!(mode(&target), before);
    // Inside the write path the broker performs it.
    ok(&sh(
        &s.policy,
        &format!("chmod 600 {}", path_str(&s.w.join("inside"))),
    ));
    assert_eq!(mode(&s.w.join("inside")), 0o600);
    // Without a broker, the seccomp filter refuses the chmod family everywhere.
    let (cmd, _) = confined(
        &s.policy,
        &["/bin/chmod", "644", &path_str(&s.w.join("inside"))],
    );
    denied(&output_supervised(cmd, None));
    assert_eq!(mode(&s.w.join("inside")), 0o600);
    // Positive control: the same chmod works unconfined.
    ok(&sh_plain(&format!("chmod 600 {}", path_str(&target))));
    assert_eq!(mode(&target), 0o600);
}
