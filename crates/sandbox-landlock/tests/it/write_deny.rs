//! write_deny_paths inside a write path (`W/.git`): the denied path and its
//! ancestors cannot be written, created, removed or renamed; siblings stay
//! writable; a denied path that does not exist yet cannot be created.
#![cfg(target_os = "linux")]

use crate::common::*;
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
    // The ancestor itself stays fully usable: new entries, renames, removals
    // (the broker keeps the deny; Landlock no longer takes the ancestor's
    // entry rights away).
    ok(&sh(
        &p,
        &format!(
            "echo planted > {w}/a/new-entry && mv {w}/a/new-entry {w}/a/moved && rm {w}/a/moved"
        ),
    ));
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

/// `W/.git -> W2` (W2 outside W) and W/sub; W2 holds a file.
struct LinkSetup {
    _t: Temp,
    w: PathBuf,
    w2: PathBuf,
}

fn link_setup() -> LinkSetup {
    let t = temp();
    let (w, w2) = (t.path.join("w"), t.path.join("w2"));
    fs::create_dir_all(w.join("sub")).unwrap();
    fs::create_dir_all(w2.join("hooks")).unwrap();
    fs::create_dir_all(t.path.join("evil/hooks")).unwrap();
    fs::write(w2.join("config"), "cfg\n").unwrap();
    std::os::unix::fs::symlink(&w2, w.join(".git")).unwrap();
    LinkSetup { _t: t, w, w2 }
}

/// W2 is granted too, so only the deny (not the missing grant) keeps it safe.
fn link_policy(s: &LinkSetup, deny: bool) -> sandbox_core::ResolvedPolicy {
    resolve(SandboxPolicy {
        network: true,
        write_paths: vec![path_str(&s.w), path_str(&s.w2)],
        write_deny_paths: if deny {
            vec![path_str(&s.w.join(".git"))]
        } else {
            Vec::new()
        },
        ..Default::default()
    })
}

#[test]
fn deny_spelled_through_a_symlink_protects_the_link_entry_and_its_target() {
    let s = link_setup();
    let (w, w2) = (path_str(&s.w), path_str(&s.w2));
    let evil = path_str(&s._t.path.join("evil"));
    let p = link_policy(&s, true);
    assert!(
        p.write_deny_paths().contains(&s.w.join(".git")) && p.write_deny_paths().contains(&s.w2),
        "{:?}",
        p.write_deny_paths()
    );
    let attacks = [
        format!("rm {w}/.git"),
        format!("mv {w}/.git {w}/sub/moved"),
        format!("ln -sfn {evil} {w}/.git"),
        format!("echo x > {w}/.git/hooks/pre-commit"),
        format!("echo x >> {w}/.git/config"),
        format!("echo x > {w2}/hooks/pre-commit"),
        format!("rm {w2}/config"),
    ];
    for cmd in &attacks {
        refused(&sh(&p, cmd));
    }
    // Replacing the link by a real directory fails at its first step.
    denied(&sh(
        &p,
        &format!("rm -f {w}/.git; mkdir -p {w}/.git/hooks && echo x > {w}/.git/hooks/pre-commit"),
    ));
    assert_eq!(fs::read_link(s.w.join(".git")).unwrap(), s.w2);
    assert_eq!(fs::read_to_string(s.w2.join("config")).unwrap(), "cfg\n");
    assert!(!s.w2.join("hooks/pre-commit").exists() && !s.w.join("sub/moved").exists());
    assert!(!s._t.path.join("evil/hooks/pre-commit").exists());

    // Positive control, same policy: a non-denied subdirectory of W is writable.
    ok(&sh(
        &p,
        &format!("echo x > {w}/sub/new && rm {w}/sub/new && mkdir {w}/sub/d"),
    ));
    assert!(s.w.join("sub/d").is_dir());

    // Positive control without the deny: every attack works.
    for cmd in &attacks {
        let s2 = link_setup();
        let cmd = cmd
            .replace(&w2, &path_str(&s2.w2))
            .replace(&w, &path_str(&s2.w))
            .replace(&evil, &path_str(&s2._t.path.join("evil")));
        ok(&sh(&link_policy(&s2, false), &cmd));
    }
    let s3 = link_setup();
    ok(&sh(
        &link_policy(&s3, false),
        &format!("rm {}/.git", path_str(&s3.w)),
    ));
    assert!(fs::symlink_metadata(s3.w.join(".git")).is_err());
}
