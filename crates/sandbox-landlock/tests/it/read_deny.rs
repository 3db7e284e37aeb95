//! read_deny_paths: a fake `~/.ssh` under a temporary HOME cannot be read, by
//! path or through `/proc/self/root`, while its siblings and the rest of the
//! system stay readable.
#![cfg(target_os = "linux")]

use crate::common::*;
use sandbox_core::{ExpandContext, SandboxPolicy};
use std::fs;
use std::path::PathBuf;

struct Setup {
    _t: Temp,
    home: PathBuf,
    w: PathBuf,
    policy: sandbox_core::ResolvedPolicy,
}

fn setup() -> Setup {
    let t = temp();
    let home = t.path.join("home");
    let w = t.path.join("w");
    fs::create_dir_all(home.join(".ssh")).unwrap();
    fs::create_dir_all(home.join(".sshx")).unwrap();
    fs::create_dir_all(w.join("secret")).unwrap();
    fs::create_dir_all(w.join("links")).unwrap();
    fs::write(home.join(".ssh/id_rsa"), "SECRET\n").unwrap();
    fs::write(home.join(".sshx/f"), "prefix-sibling\n").unwrap();
    fs::write(home.join("notes"), "notes\n").unwrap();
    fs::write(w.join("secret/key"), "WSECRET\n").unwrap();
    fs::write(w.join("open"), "open\n").unwrap();
    let ctx = ExpandContext {
        home: Some(home.clone()),
        workspace: Some(w.clone()),
    };
    let policy = SandboxPolicy {
        write_paths: vec!["{{workspace}}".into()],
        read_deny_paths: vec!["~/.ssh".into(), "{{workspace}}/secret".into()],
        ..Default::default()
    }
    .resolve(&ctx)
    .unwrap();
    Setup {
        _t: t,
        home,
        w,
        policy,
    }
}

#[test]
fn denied_file_cannot_be_read_siblings_can() {
    let s = setup();
    let h = path_str(&s.home);
    let out = ok(&sh(&s.policy, &format!(
        "cat {h}/notes {h}/.sshx/f /etc/passwd >/dev/null && cat {h}/notes && ls {h}/.sshx && ls /usr >/dev/null && echo listed"
    )));
    assert!(
        out.contains("notes") && out.contains("f\n") && out.contains("listed"),
        "{out}"
    );

    for cmd in [
        format!("cat {h}/.ssh/id_rsa"),
        format!("cat /proc/self/root{h}/.ssh/id_rsa"),
        format!("cd / && cat .{h}/.ssh/id_rsa"),
        format!("cd {h} && cat .ssh/../.ssh/id_rsa"),
        format!("cp {h}/.ssh/id_rsa {}/copy", path_str(&s.w)),
    ] {
        let err = refused(&sh(&s.policy, &cmd));
        assert!(!err.contains("SECRET"));
    }
    // Positive control: unconfined, the same file reads.
    assert!(ok(&sh_plain(&format!("cat {h}/.ssh/id_rsa"))).contains("SECRET"));
}

#[test]
fn links_do_not_reach_the_denied_file() {
    let s = setup();
    let (h, w) = (path_str(&s.home), path_str(&s.w));
    // A symlink resolves to the denied path; a new hard link is refused.
    ok(&sh(
        &s.policy,
        &format!("ln -s {h}/.ssh/id_rsa {w}/links/link"),
    ));
    refused(&sh(&s.policy, &format!("cat {w}/links/link")));
    denied(&sh(
        &s.policy,
        &format!("ln {h}/.ssh/id_rsa {w}/links/hard"),
    ));
    assert!(!s.w.join("links/hard").exists());
    // Positive control: a symlink to a readable sibling reads.
    ok(&sh(
        &s.policy,
        &format!("ln -s {h}/notes {w}/links/notes-link && cat {w}/links/notes-link"),
    ));
}

#[test]
fn read_deny_inside_a_write_path_removes_reads_and_writes() {
    let s = setup();
    let w = path_str(&s.w);
    ok(&sh(
        &s.policy,
        &format!("cat {w}/open && echo more >> {w}/open"),
    ));
    refused(&sh(&s.policy, &format!("cat {w}/secret/key")));
    refused(&sh(&s.policy, &format!("echo x > {w}/secret/key")));
    assert_eq!(
        fs::read_to_string(s.w.join("secret/key")).unwrap(),
        "WSECRET\n"
    );
}

#[test]
fn programs_still_execute_with_reads_handled() {
    let s = setup();
    let out = ok(&sh(
        &s.policy,
        &format!("{PYTHON} -c 'print(6*7)' && /usr/bin/env true && echo ran"),
    ));
    assert!(out.contains("42") && out.contains("ran"), "{out}");
}

#[test]
fn ancestors_stay_listable_and_denied_names_are_visible_but_not_contents() {
    // READ_DIR is not handled (a documented gap): the ancestors of a denied
    // path list, so do the names inside it, but no content reads.
    let s = setup();
    let h = path_str(&s.home);
    ok(&sh(
        &s.policy,
        &format!("ls {h} >/dev/null && ls / >/dev/null"),
    ));
    let names = ok(&sh(&s.policy, &format!("ls {h}/.ssh")));
    assert!(names.contains("id_rsa"), "{names}");
    let err = refused(&sh(&s.policy, &format!("cat {h}/.ssh/id_rsa")));
    assert!(!err.contains("SECRET"));
    ok(&sh(&s.policy, &format!("cat {h}/notes")));
}

#[test]
fn read_deny_spelled_through_a_symlink_denies_the_target_and_the_link() {
    // `w/key-link -> t/hidden` (a final link) and `w/dir-link -> t/vault`
    // with `w/dir-link/key` denied (an intermediate link): the target is
    // refused through the link and directly, the link entry cannot be
    // removed or replaced, and what sits beside the denied target reads.
    let t = temp();
    let (w, hidden, vault) = (
        t.path.join("w"),
        t.path.join("hidden"),
        t.path.join("vault"),
    );
    fs::create_dir_all(&w).unwrap();
    fs::create_dir_all(&hidden).unwrap();
    fs::create_dir_all(&vault).unwrap();
    fs::write(hidden.join("key"), "HSECRET\n").unwrap();
    fs::write(vault.join("key"), "VSECRET\n").unwrap();
    fs::write(vault.join("sibling"), "vault-sibling\n").unwrap();
    fs::write(t.path.join("beside"), "beside\n").unwrap();
    std::os::unix::fs::symlink(&hidden, w.join("key-link")).unwrap();
    std::os::unix::fs::symlink(&vault, w.join("dir-link")).unwrap();
    let policy = |deny: bool| {
        resolve(SandboxPolicy {
            write_paths: vec![path_str(&w)],
            read_deny_paths: if deny {
                vec![
                    path_str(&w.join("key-link")),
                    path_str(&w.join("dir-link/key")),
                ]
            } else {
                Vec::new()
            },
            ..Default::default()
        })
    };
    let p = policy(true);
    let (ws, h, v) = (path_str(&w), path_str(&hidden), path_str(&vault));
    let reads = [
        format!("cat {ws}/key-link/key"),
        format!("cat {h}/key"),
        format!("cat {ws}/dir-link/key"),
        format!("cat {v}/key"),
    ];
    for cmd in &reads {
        let err = refused(&sh(&p, cmd));
        assert!(!err.contains("SECRET"), "{err}");
    }
    for cmd in [
        format!("rm {ws}/key-link"),
        format!("ln -sfn {} {ws}/dir-link", path_str(&t.path)),
    ] {
        refused(&sh(&p, &cmd));
    }
    assert_eq!(fs::read_link(w.join("key-link")).unwrap(), hidden);
    assert_eq!(fs::read_link(w.join("dir-link")).unwrap(), vault);
    // Positive controls under the same policy: the siblings read, through
    // the link too (only `dir-link/key` was denied, not all of the vault).
    let out = ok(&sh(
        &p,
        &format!(
            "cat {}/beside {v}/sibling {ws}/dir-link/sibling",
            path_str(&t.path)
        ),
    ));
    assert_eq!(out, "beside\nvault-sibling\nvault-sibling\n");
    // Without the deny, the same reads succeed.
    let open = policy(false);
    for cmd in &reads {
        assert!(ok(&sh(&open, cmd)).contains("SECRET"));
    }
}

/// Extended attribute values of a read-denied file are not readable (the
/// filter hands xattr reads to the broker under read denials); a sibling's are.
#[test]
fn xattr_values_of_denied_paths_are_refused() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let (secret, open) = (root.join("secret"), root.join("open"));
    for f in [&secret, &open] {
        std::fs::write(f, "x").unwrap();
        let c = std::ffi::CString::new(f.to_str().unwrap()).unwrap();
        // SAFETY: valid C strings and buffer.
        let rc = unsafe {
            libc::setxattr(
                c.as_ptr(),
                c"user.k".as_ptr(),
                b"value".as_ptr().cast(),
                5,
                0,
            )
        };
        assert_eq!(rc, 0, "this filesystem must support user xattrs");
    }
    let w = temp();
    let policy = resolve(sandbox_core::SandboxPolicy {
        write_paths: vec![path_str(&w.path)],
        read_deny_paths: vec![path_str(&secret)],
        ..Default::default()
    });
    let get = |p: &std::path::Path, call: &str| {
        format!(
            "{PYTHON} -c 'import os; print(os.{call}(\"{}\", \"user.k\"))'",
            p.display()
        )
    };
    let out = ok(&sh(&policy, &get(&open, "getxattr")));
    assert!(out.contains("value"), "{out}");
    let err = denied(&sh(&policy, &get(&secret, "getxattr")));
    assert!(
        err.contains("PermissionError") || err.contains("not permitted"),
        "{err}"
    );
    let list = |p: &std::path::Path| {
        format!(
            "{PYTHON} -c 'import os; print(os.listxattr(\"{}\"))'",
            p.display()
        )
    };
    assert!(ok(&sh(&policy, &list(&open))).contains("user.k"));
    denied(&sh(&policy, &list(&secret)));
    // Without the denial the same read works: the refusal is the policy's.
    let plain = resolve(write_policy(&[&w.path], true));
    assert!(ok(&sh(&plain, &get(&secret, "getxattr"))).contains("value"));
}
