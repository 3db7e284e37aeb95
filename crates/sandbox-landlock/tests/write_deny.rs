//! write_deny_paths inside a write path (`W/.git`): the denied path and its
//! ancestors cannot be written, created, removed or renamed; siblings stay
//! writable; a denied path that does not exist yet cannot be created.
#![cfg(target_os = "linux")]

mod common;

use common::*;
use sandbox_core::SandboxPolicy;
use std::fs;
use std::path::{Path, PathBuf};

struct Setup {
    _t: Temp,
    w: PathBuf,
}

fn setup() -> Setup {
    let t = temp();
    let w = t.path.join("w");
    fs::create_dir_all(w.join("a/.git/objects")).unwrap();
    fs::create_dir_all(w.join("src")).unwrap();
    fs::create_dir_all(w.join("b")).unwrap();
    fs::write(w.join("a/.git/config"), "cfg\n").unwrap();
    fs::write(w.join("a/.git/objects/o1"), "o\n").unwrap();
    fs::write(w.join("a/README"), "readme\n").unwrap();
    fs::write(w.join("src/main.c"), "int main;\n").unwrap();
    fs::write(w.join("b/existing"), "e\n").unwrap();
    Setup { _t: t, w }
}

fn policy(w: &Path, deny: &[&str]) -> sandbox_core::ResolvedPolicy {
    resolve(SandboxPolicy {
        network: true,
        write_paths: vec![path_str(w)],
        write_deny_paths: deny.iter().map(|d| path_str(&w.join(d))).collect(),
        ..Default::default()
    })
}

#[test]
fn denied_path_is_not_writable_and_siblings_are() {
    let s = setup();
    let p = policy(&s.w, &["a/.git"]);
    let w = path_str(&s.w);
    // Siblings along the path stay writable.
    ok(&sh(&p, &format!(
        "echo more >> {w}/a/README && echo x >> {w}/src/main.c && mkdir {w}/src/new && echo n > {w}/src/new/f && rm {w}/src/new/f"
    )));
    assert_eq!(
        fs::read_to_string(s.w.join("a/README")).unwrap(),
        "readme\nmore\n"
    );
    // Reading the denied path still works (only writes are denied).
    ok(&sh(&p, &format!("cat {w}/a/.git/config")));

    for cmd in [
        format!("echo x >> {w}/a/.git/config"),
        format!("echo x > {w}/a/.git/new"),
        format!("echo x > {w}/a/.git/objects/o2"),
        format!("rm {w}/a/.git/config"),
        format!("rm {w}/a/.git/objects/o1"),
        format!("mkdir {w}/a/.git/hooks"),
        format!("mv {w}/a/.git/config {w}/src/config"),
        format!("mv {w}/src/main.c {w}/a/.git/main.c"),
    ] {
        refused(&sh(&p, &cmd));
    }
    assert_eq!(
        fs::read_to_string(s.w.join("a/.git/config")).unwrap(),
        "cfg\n"
    );
    assert!(s.w.join("a/.git/objects/o1").exists());
    assert!(!s.w.join("a/.git/new").exists() && !s.w.join("a/.git/hooks").exists());
    assert!(s.w.join("src/main.c").exists());
}

#[test]
fn denied_path_and_ancestors_cannot_be_removed_or_renamed() {
    let s = setup();
    let w = path_str(&s.w);
    let cmds = [
        format!("mv {w}/a/.git {w}/a/git2"),
        format!("mv {w}/a/.git {w}/src/git2"),
        format!("rm -rf {w}/a/.git"),
        format!("mv {w}/a {w}/a2"),
        format!("rm -rf {w}/a"),
        format!("echo planted > {w}/a/new-entry"),
    ];
    // Positive control: without the deny, every one of these works.
    for cmd in &cmds {
        let s2 = setup();
        let open = policy(&s2.w, &[]);
        let cmd = cmd.replace(&w, &path_str(&s2.w));
        ok(&sh(&open, &cmd));
    }
    let p = policy(&s.w, &["a/.git"]);
    for cmd in &cmds {
        denied(&sh(&p, cmd));
    }
    assert_eq!(
        fs::read_to_string(s.w.join("a/.git/config")).unwrap(),
        "cfg\n"
    );
    assert!(!s.w.join("a2").exists() && !s.w.join("a/git2").exists());
}

#[test]
fn not_yet_existing_denied_path_cannot_be_created() {
    let s = setup();
    let w = path_str(&s.w);
    let p = policy(&s.w, &["b/.git"]);
    // Sibling files of the missing path stay writable.
    ok(&sh(&p, &format!("echo more >> {w}/b/existing")));
    for cmd in [
        format!("mkdir {w}/b/.git"),
        format!("echo x > {w}/b/.git"),
        format!("ln -s {w}/src {w}/b/.git"),
        format!("mv {w}/src {w}/b/.git"),
    ] {
        refused(&sh(&p, &cmd));
    }
    assert!(fs::symlink_metadata(s.w.join("b/.git")).is_err());
    // Positive control: without the deny the same path can be created.
    ok(&sh(&policy(&s.w, &[]), &format!("mkdir {w}/b/.git")));
    assert!(s.w.join("b/.git").is_dir());
}

#[test]
fn deny_at_or_above_the_write_path_wins() {
    let s = setup();
    let w = path_str(&s.w);
    let p = resolve(SandboxPolicy {
        network: true,
        write_paths: vec![path_str(&s.w.join("src"))],
        write_deny_paths: vec![w.clone()],
        ..Default::default()
    });
    refused(&sh(&p, &format!("echo x >> {w}/src/main.c")));
    let open = policy(&s.w, &[]);
    ok(&sh(&open, &format!("echo x >> {w}/src/main.c")));
}

#[test]
fn symlinked_sibling_does_not_carry_the_split_grant_outside() {
    // Splitting grants rights entry by entry; a symlink entry must not pass
    // them on to its target.
    let s = setup();
    let outside = s._t.path.join("outside");
    fs::create_dir(&outside).unwrap();
    fs::write(outside.join("f"), "orig\n").unwrap();
    std::os::unix::fs::symlink(&outside, s.w.join("out-link")).unwrap();
    let w = path_str(&s.w);
    let p = policy(&s.w, &["a/.git"]);
    refused(&sh(&p, &format!("echo x >> {w}/out-link/f")));
    refused(&sh(&p, &format!("echo x > {w}/out-link/new")));
    assert_eq!(fs::read_to_string(outside.join("f")).unwrap(), "orig\n");
    // Positive control: a real sibling directory is writable.
    ok(&sh(&p, &format!("echo x > {w}/src/new")));
}
