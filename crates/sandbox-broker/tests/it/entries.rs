//! Writing opens and directory-entry calls under a write path W with deny paths
//! beneath it (W/.git/hooks, W/.git/config, W/.bashrc): everyday shell work in
//! W is performed, every call on a denied path or one of its ancestors is
//! refused and leaves the target as it was. Each attack beside its allowed
//! twin. The filter routes what the production one does (`entry_filter`).
#![cfg(target_os = "linux")]

use std::path::Path;

use crate::common::*;
use sandbox_broker::{BrokerDecision, BrokerLog, BrokerRules, Refusal};

const DENY: &[&str] = &[".git/hooks", ".git/config", ".bashrc"];

/// W with an existing `.git` (config and hooks present), `.bashrc` absent.
fn fixture() -> Fixture {
    let fx = Fixture::new();
    std::fs::create_dir_all(fx.w.join(".git/hooks")).unwrap();
    std::fs::write(fx.w.join(".git/config"), "[core]\n").unwrap();
    std::fs::write(fx.w.join(".git/hooks/pre-commit.sample"), "#!/bin/sh\n").unwrap();
    std::fs::write(fx.w.join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
    fx
}

fn rules(fx: &Fixture) -> BrokerRules {
    fx.rules(DENY)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A snapshot of the denied paths: (relative path, content or listing).
fn denied_state(fx: &Fixture) -> Vec<(String, String)> {
    let mut out = vec![
        (".git/config".into(), read(&fx.w.join(".git/config"))),
        (
            ".bashrc".into(),
            std::fs::symlink_metadata(fx.w.join(".bashrc"))
                .map(|_| "present".to_owned())
                .unwrap_or_else(|_| "absent".into()),
        ),
    ];
    let mut hooks: Vec<String> = std::fs::read_dir(fx.w.join(".git/hooks"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            format!("{}={}", e.file_name().to_string_lossy(), read(&e.path()))
        })
        .collect();
    hooks.sort();
    out.push((".git/hooks".into(), hooks.join(",")));
    out
}

fn run_ok(fx: &Fixture, cmd: &str) -> BrokerLog {
    let run = sh_entries(rules(fx), cmd);
    assert_eq!(run.code, 0, "{cmd}\n{}", run.log.explain(20));
    assert_eq!(refusals(&run.log), vec![], "{cmd}\n{}", run.log.explain(20));
    run.log
}

/// `cmd` fails, the broker refused it with `reason`, and the denied paths are unchanged.
fn refused(fx: &Fixture, cmd: &str, reason: Refusal) -> BrokerLog {
    let before = denied_state(fx);
    let run = sh_entries(rules(fx), cmd);
    assert_ne!(run.code, 0, "{cmd} must fail\n{}", run.log.explain(20));
    assert!(
        refusals(&run.log).contains(&reason),
        "{cmd}: expected {reason:?}\n{}",
        run.log.explain(20)
    );
    assert_eq!(denied_state(fx), before, "{cmd} changed a denied path");
    run.log
}

#[test]
fn everyday_shell_work_in_the_write_path() {
    let fx = fixture();
    let w = q(&fx.w);
    let log = run_ok(
        &fx,
        &format!(
            "set -e; cd {w}
             mkdir -p a/b/c
             touch f a/b/g
             echo one > a/f2
             echo two >> a/f2
             mv f a/b/h
             rm a/b/g
             ln a/f2 hard
             ln -s f2 a/sym
             cat a/sym > copy
             rm -r a/b
             mkdir .git/objects
             echo 1 > .git/objects/x
             echo ok > .bashrc2
             mv .bashrc2 .profile"
        ),
    );
    assert_eq!(read(&fx.w.join("a/f2")), "one\ntwo\n");
    assert_eq!(read(&fx.w.join("hard")), "one\ntwo\n");
    assert_eq!(read(&fx.w.join("copy")), "one\ntwo\n");
    assert_eq!(read(&fx.w.join(".git/objects/x")), "1\n");
    assert_eq!(read(&fx.w.join(".profile")), "ok\n");
    assert!(!fx.w.join("a/b").exists());
    assert!(!fx.w.join("f").exists());
    assert!(log.performed().count() > 10, "{}", log.explain(5));
}

#[test]
fn writing_a_denied_file_is_refused_and_its_sibling_written() {
    let fx = fixture();
    let w = q(&fx.w);
    run_ok(
        &fx,
        &format!("echo ok > {w}/.git/description && echo more >> {w}/.git/description"),
    );
    assert_eq!(read(&fx.w.join(".git/description")), "ok\nmore\n");
    refused(
        &fx,
        &format!("echo evil > {w}/.git/config"),
        Refusal::WriteDenyPath,
    );
    refused(
        &fx,
        &format!("echo evil >> {w}/.git/config"),
        Refusal::WriteDenyPath,
    );
    // Through another spelling: a symlink, `..`, a case variant.
    std::os::unix::fs::symlink(".git/config", fx.w.join("cfg")).unwrap();
    refused(&fx, &format!("echo evil > {w}/cfg"), Refusal::WriteDenyPath);
    refused(
        &fx,
        &format!("echo evil > {w}/.git/hooks/../config"),
        Refusal::WriteDenyPath,
    );
    // (A case-insensitive filesystem would open .git/config for it.)
    refused(
        &fx,
        &format!("echo evil > {w}/.git/CONFIG"),
        Refusal::WriteDenyPath,
    );
    assert!(!fx.w.join(".git/CONFIG").exists());
}

#[test]
fn creating_in_a_denied_directory_is_refused_and_beside_it_performed() {
    let fx = fixture();
    let w = q(&fx.w);
    run_ok(
        &fx,
        &format!("echo ok > {w}/.git/pre-commit && mkdir {w}/.git/info"),
    );
    for cmd in [
        format!("echo evil > {w}/.git/hooks/pre-commit"),
        format!("touch {w}/.git/hooks/pre-commit"),
        format!("mkdir {w}/.git/hooks/sub"),
        format!("ln -s /bin/true {w}/.git/hooks/pre-commit"),
        format!("ln {w}/.git/pre-commit {w}/.git/hooks/pre-commit"),
        format!("mv {w}/.git/pre-commit {w}/.git/hooks/pre-commit"),
        format!("mkfifo {w}/.git/hooks/pre-commit"),
        format!("echo evil > {w}/.git/hooks/pre-commit.sample"),
        format!("rm {w}/.git/hooks/pre-commit.sample"),
        format!("mv {w}/.git/hooks/pre-commit.sample {w}/x"),
    ] {
        refused(&fx, &cmd, Refusal::WriteDenyPath);
    }
    assert!(fx.w.join(".git/pre-commit").exists());
}

#[test]
fn a_denied_file_that_does_not_exist_is_never_created() {
    let fx = fixture();
    let w = q(&fx.w);
    run_ok(
        &fx,
        &format!(
            "echo ok > {w}/.bashrc2 && touch {w}/.bash_profile && ln -s .bashrc2 {w}/.bashrc3"
        ),
    );
    for cmd in [
        format!("echo evil > {w}/.bashrc"),
        format!("touch {w}/.bashrc"),
        format!("ln -s /tmp/evil {w}/.bashrc"),
        format!("ln {w}/.bashrc2 {w}/.bashrc"),
        format!("mv {w}/.bashrc2 {w}/.bashrc"),
        format!("mkdir {w}/.bashrc"),
        format!("cd {w} && echo evil > ./.bashrc"),
    ] {
        refused(&fx, &cmd, Refusal::WriteDenyPath);
    }
    // A dangling symlink whose target is the denied file: the target is
    // admitted like any new name, and refused.
    std::os::unix::fs::symlink(".bashrc", fx.w.join("rc")).unwrap();
    refused(&fx, &format!("echo evil > {w}/rc"), Refusal::WriteDenyPath);
    assert_eq!(read(&fx.w.join(".bashrc2")), "ok\n");
}

#[test]
fn moving_replacing_or_removing_an_ancestor_is_refused() {
    let fx = fixture();
    let w = q(&fx.w);
    // Twins: a sibling directory of .git moves, is replaced and removed.
    run_ok(
        &fx,
        &format!(
            "set -e; cd {w}; mkdir -p d/sub other; echo 1 > d/sub/f; mv d e; mkdir e2; mv -T e2 other; rm -rf e; test -d other"
        ),
    );
    assert!(!fx.w.join("e").exists());
    refused(
        &fx,
        &format!("mv {w}/.git {w}/moved"),
        Refusal::AncestorOfDenyPath,
    );
    refused(
        &fx,
        &format!("mv -T {w}/other {w}/.git"),
        Refusal::AncestorOfDenyPath,
    );
    // rmdir of the non-empty .git: the kernel's ENOTEMPTY, no refusal
    // (issue 41); it stays.
    let run = sh_entries(rules(&fx), &format!("rmdir {w}/.git"));
    assert_ne!(run.code, 0);
    assert_eq!(refusals(&run.log), vec![], "{}", run.log.explain(20));
    assert!(run.log.records.iter().any(|r| matches!(
        r.decision,
        BrokerDecision::Failed {
            errno: libc::ENOTEMPTY
        }
    )));
    assert!(fx.w.join(".git/HEAD").exists());
    // rm -rf removes what is not denied and nothing denied (it leaves the
    // directories it could not empty).
    refused(&fx, &format!("rm -rf {w}/.git"), Refusal::WriteDenyPath);
    assert!(
        !fx.w.join(".git/HEAD").exists(),
        "the rest of .git is removed"
    );
    assert!(fx.w.join(".git/hooks/pre-commit.sample").exists());
}

#[test]
fn exchanging_an_ancestor_is_refused() {
    let fx = fixture();
    let (git, other, x, y) = (
        cstr(&fx.w.join(".git")),
        cstr(&fx.w.join("other")),
        cstr(&fx.w.join("x")),
        cstr(&fx.w.join("y")),
    );
    std::fs::create_dir(fx.w.join("other")).unwrap();
    std::fs::create_dir(fx.w.join("x")).unwrap();
    std::fs::create_dir(fx.w.join("y")).unwrap();
    let exchange = |a: &std::ffi::CString, b: &std::ffi::CString| {
        // SAFETY (child): one syscall with live paths.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_renameat2,
                libc::AT_FDCWD,
                a.as_ptr(),
                libc::AT_FDCWD,
                b.as_ptr(),
                libc::RENAME_EXCHANGE,
            )
        };
        result(rc as i32)
    };
    let before = denied_state(&fx);
    let run = confined_entries(rules(&fx), || exchange(&other, &git));
    assert_eq!(run.code, libc::EACCES, "{}", run.log.explain(5));
    assert_eq!(refusals(&run.log), vec![Refusal::AncestorOfDenyPath]);
    assert_eq!(denied_state(&fx), before);
    assert!(fx.w.join(".git/config").exists());
    // Twin: two other directories exchange.
    std::fs::write(fx.w.join("x/in-x"), "").unwrap();
    let run = confined_entries(rules(&fx), || exchange(&x, &y));
    assert_eq!(run.code, 0, "{}", run.log.explain(5));
    assert!(fx.w.join("y/in-x").exists());
}

#[test]
fn a_link_in_the_place_of_a_missing_ancestor_is_refused_a_directory_is_not() {
    let fx = Fixture::new();
    let w = q(&fx.w);
    std::fs::create_dir(fx.w.join("fake")).unwrap();
    let deny = |fx: &Fixture| fx.rules(&["nope/hooks"]);
    let run = sh_entries(deny(&fx), &format!("ln -s fake {w}/nope"));
    assert_ne!(run.code, 0);
    assert_eq!(refusals(&run.log), vec![Refusal::AncestorOfDenyPath]);
    assert!(std::fs::symlink_metadata(fx.w.join("nope")).is_err());
    let run = sh_entries(deny(&fx), &format!("mv {w}/fake {w}/nope"));
    assert_ne!(run.code, 0);
    assert_eq!(refusals(&run.log), vec![Refusal::AncestorOfDenyPath]);
    // Twin: a real directory there; its denied child stays refused.
    let run = sh_entries(
        deny(&fx),
        &format!("mkdir {w}/nope && mkdir {w}/nope/other"),
    );
    assert_eq!(run.code, 0, "{}", run.log.explain(5));
    let run = sh_entries(deny(&fx), &format!("mkdir {w}/nope/hooks"));
    assert_ne!(run.code, 0);
    assert_eq!(refusals(&run.log), vec![Refusal::WriteDenyPath]);
    assert!(!fx.w.join("nope/hooks").exists());
}

#[test]
fn hard_linking_a_denied_file_is_refused_and_its_sibling_linked() {
    let fx = fixture();
    let w = q(&fx.w);
    run_ok(
        &fx,
        &format!("ln {w}/.git/HEAD {w}/head && ln -s .git/config {w}/cfg-link"),
    );
    assert_eq!(read(&fx.w.join("head")), read(&fx.w.join(".git/HEAD")));
    refused(
        &fx,
        &format!("ln {w}/.git/config {w}/x"),
        Refusal::WriteDenyPath,
    );
    refused(
        &fx,
        &format!("ln -L {w}/cfg-link {w}/x"),
        Refusal::WriteDenyPath,
    );
    assert!(!fx.w.join("x").exists());
    // From outside the write path: refused as Landlock refuses it (EXDEV,
    // tests/tests/it/explain.rs compares the two).
    let outside = fx.file(&fx.o.join("f"), 0o644);
    let run = sh_entries(rules(&fx), &format!("ln {} {w}/x", q(&outside)));
    assert_ne!(run.code, 0);
    assert_eq!(refusals(&run.log), vec![Refusal::LinkFromOutside]);
    assert!(!fx.w.join("x").exists());
}

#[test]
fn a_hard_link_made_before_the_run_does_not_reach_the_denied_file() {
    let fx = fixture();
    std::fs::hard_link(fx.w.join(".git/config"), fx.w.join("alias")).unwrap();
    refused(
        &fx,
        &format!("echo evil > {}", q(&fx.w.join("alias"))),
        Refusal::WriteDenyPath,
    );
    assert_eq!(read(&fx.w.join(".git/config")), "[core]\n");
}

#[test]
fn writes_outside_the_write_path_are_refused() {
    let fx = fixture();
    let o = q(&fx.o);
    fx.file(&fx.o.join("existing"), 0o644);
    for cmd in [
        format!("echo x > {o}/new"),
        format!("echo x > {o}/existing"),
        format!("mkdir {o}/d"),
        format!("rm {o}/existing"),
        format!("mv {o}/existing {o}/moved"),
        format!("mv {o}/existing {}/moved", q(&fx.w)),
        format!("ln -s x {o}/link"),
    ] {
        let run = sh_entries(rules(&fx), &cmd);
        assert_ne!(run.code, 0, "{cmd}");
        assert_eq!(
            refusals(&run.log),
            vec![Refusal::OutsideWritePaths],
            "{cmd}"
        );
    }
    assert_eq!(read(&fx.o.join("existing")), "x");
    let names: Vec<_> = std::fs::read_dir(&fx.o)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec!["existing"]);
}

#[test]
fn dev_null_dev_stderr_and_friends_work() {
    let fx = fixture();
    // fd 2 is a file outside W, open for writing: reopening it grants nothing new.
    let log = fx.o.join("stderr.log");
    let cmd = format!(
        "exec 2>{log}; echo a > /dev/null && echo b > /dev/stderr && echo c >> /dev/fd/2 \
         && head -c 4 /dev/zero > /dev/null && : > /dev/zero && echo d > {w}/devnull",
        log = q(&log),
        w = q(&fx.w)
    );
    std::os::unix::fs::symlink("/dev/null", fx.w.join("devnull")).unwrap();
    // The shell's own `exec 2>` is outside W: run it unconfined first, then
    // the rest confined with fd 2 inherited.
    let file = std::fs::File::create(&log).unwrap();
    let cmd = cmd.replacen(&format!("exec 2>{}; ", q(&log)), "", 1);
    let sh = Sh::new(&cmd);
    let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
    let run = confined_entries(rules(&fx), || {
        // SAFETY (child): dup2 then exec.
        if unsafe { libc::dup2(fd, 2) } != 2 {
            return 126;
        }
        sh.exec()
    });
    assert_eq!(run.code, 0, "{}", run.log.explain(20));
    assert_eq!(refusals(&run.log), vec![]);
    assert_eq!(read(&log), "b\nc\n");
    // Twin: stdin is a read-only file outside W; writing to it is refused.
    let input = fx.file(&fx.o.join("input"), 0o644);
    let sh = Sh::new("echo x > /dev/stdin");
    let c = cstr(&input);
    let run = confined_entries(rules(&fx), || {
        // SAFETY (child): open, dup2, exec.
        unsafe {
            let fd = libc::open(c.as_ptr(), libc::O_RDONLY);
            if fd < 0 || libc::dup2(fd, 0) != 0 {
                return 126;
            }
        }
        sh.exec()
    });
    assert_ne!(run.code, 0);
    assert_eq!(refusals(&run.log), vec![Refusal::OutsideWritePaths]);
    assert_eq!(read(&input), "x");
}

#[test]
fn git_works_in_the_write_path() {
    let fx = Fixture::new();
    let w = q(&fx.w);
    // git init before the deny paths apply (it writes .git/config and hooks).
    let st = std::process::Command::new("git")
        .args(["init", "-q"])
        .arg(&fx.w)
        .status()
        .expect("git is required for this test");
    assert!(st.success());
    let config = read(&fx.w.join(".git/config"));
    let hooks = std::fs::read_dir(fx.w.join(".git/hooks")).unwrap().count();
    let log = run_ok(
        &fx,
        &format!(
            "set -e; cd {w}; export HOME={w}/home GIT_CONFIG_NOSYSTEM=1; mkdir home
             echo a > a; mkdir -p src/m; echo b > src/m/b
             git add a src
             git -c user.name=t -c user.email=t@e commit -qm one
             echo c >> a; git mv src/m/b src/m/c; git rm -q --cached a; git add a
             git -c user.name=t -c user.email=t@e commit -qm two
             git checkout -q -b topic; git tag v1; git log --oneline > log.txt
             git status --porcelain > status.txt; git gc -q
             git init -q sub && cd sub && echo s > s && git add s \
               && git -c user.name=t -c user.email=t@e commit -qm sub"
        ),
    );
    assert_eq!(read(&fx.w.join("log.txt")).lines().count(), 2);
    assert_eq!(read(&fx.w.join(".git/config")), config);
    assert_eq!(
        std::fs::read_dir(fx.w.join(".git/hooks")).unwrap().count(),
        hooks
    );
    assert!(fx.w.join("sub/.git/config").exists());
    println!("git: {}", log.explain(0).trim());
}

#[test]
fn a_write_deny_outside_the_paths_git_writes_leaves_git_init_working() {
    let fx = Fixture::new();
    let run = sh_entries(
        fx.rules(&[".mcp.json", ".vscode"]),
        &format!(
            "set -e; cd {}; git init -q r; cd r; echo a > a; git add a; \
             git -c user.name=t -c user.email=t@e commit -qm m",
            q(&fx.w)
        ),
    );
    assert_eq!(run.code, 0, "{}", run.log.explain(20));
    assert_eq!(refusals(&run.log), vec![]);
    let run = sh_entries(
        fx.rules(&[".mcp.json", ".vscode"]),
        &format!("echo '{{}}' > {}", q(&fx.w.join(".mcp.json"))),
    );
    assert_ne!(run.code, 0);
    assert!(!fx.w.join(".mcp.json").exists());
}

#[test]
fn everyday_tools_work_with_entries_brokered() {
    let fx = fixture();
    let (w, o) = (q(&fx.w), q(&fx.o));
    // An archive with a directory, a symlink and a hard link, made outside.
    let src = fx.o.join("src");
    std::fs::create_dir_all(src.join("dir")).unwrap();
    std::fs::write(src.join("dir/file"), "content\n").unwrap();
    std::os::unix::fs::symlink("dir/file", src.join("sym")).unwrap();
    std::fs::hard_link(src.join("dir/file"), src.join("hard")).unwrap();
    let st = std::process::Command::new("tar")
        .args(["-cf", "a.tar", "-C", "src", "dir", "sym", "hard"])
        .current_dir(&fx.o)
        .status()
        .unwrap();
    assert!(st.success());
    std::fs::write(fx.w.join("m.c"), "int main(void){return 3;}\n").unwrap();
    let run = sh_entries(
        rules(&fx),
        &format!(
            "set -e; cd {w}
             tar -xpf {o}/a.tar -C {w}
             cp -r dir dir2
             sed -i s/content/changed/ dir2/file
             sort -o sorted dir/file
             t=$(mktemp -p {w}); echo t > \"$t\"; mv \"$t\" moved
             cp moved installed
             mkdir tmp; TMPDIR={w}/tmp cc -o m m.c; ./m || test $? = 3
             python3 -c 'import tempfile,os; f=tempfile.NamedTemporaryFile(dir=\".\", delete=False); f.write(b\"p\"); f.close(); os.replace(f.name, \"py\")'
             find dir2 -name file -delete"
        ),
    );
    // sed -i copies the ACL (system.posix_acl_access), which the metadata
    // rules refuse as before (sed goes on without it); this host's python3
    // probes /dev/tty for writing, outside the write paths as under Landlock.
    assert_eq!(run.code, 0, "{}", run.log.explain(20));
    for r in run.log.refusals() {
        let tty = r.target.resolved.as_deref() == Some(Path::new("/dev/tty"));
        assert!(
            matches!(
                &r.decision,
                BrokerDecision::Refused {
                    reason: Refusal::XattrNamespace
                }
            ) || (tty
                && matches!(
                    &r.decision,
                    BrokerDecision::Refused {
                        reason: Refusal::OutsideWritePaths
                    }
                )),
            "{r}"
        );
    }
    let log = run.log;
    assert_eq!(read(&fx.w.join("sym")), "content\n");
    assert_eq!(read(&fx.w.join("hard")), "content\n");
    assert_eq!(read(&fx.w.join("moved")), "t\n");
    assert_eq!(read(&fx.w.join("installed")), "t\n");
    assert_eq!(read(&fx.w.join("py")), "p");
    assert!(!fx.w.join("dir2/file").exists());
    assert!(fx.w.join("m").exists());
    println!("tools: {}", log.explain(0).trim());
}

/// Red-team R6a F2: with every fd slot used, an open fails `EMFILE` and
/// changes nothing, as the kernel (which takes the slot before it walks the
/// path): an existing file keeps its bytes (`O_TRUNC` is applied only once
/// the fd is installed), a new name is not left behind (the creation is
/// undone when the install fails), an `O_CREAT|O_EXCL` lockfile can be
/// taken on retry, and an open the policy refuses answers `EMFILE` first
/// (no refusal). Twins with one slot free: the lockfile is taken, a second
/// existing file truncated.
#[test]
fn an_open_with_no_fd_slot_free_changes_nothing() {
    let fx = fixture();
    let (kept, emptied) = (fx.w.join("kept"), fx.w.join("emptied"));
    for f in [&kept, &emptied] {
        std::fs::write(f, "precious data\n").unwrap();
    }
    let (new, lock, outside) = (fx.w.join("new"), fx.w.join("lock"), fx.o.join("x"));
    let [k, e, n, l, o] = [&kept, &emptied, &new, &lock, &outside].map(|p| cstr(p));
    let run = confined_entries(rules(&fx), move || {
        let trunc = libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC;
        let excl = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        // SAFETY (child): plain syscalls on live NUL-terminated paths.
        unsafe {
            let lim = libc::rlimit {
                rlim_cur: 32,
                rlim_max: 32,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return 100;
            }
            let mut last = -1;
            loop {
                let fd = libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY);
                if fd < 0 {
                    break;
                }
                last = fd;
            }
            let emfile = |path: &std::ffi::CString, flags| {
                libc::open(path.as_ptr(), flags, 0o644) < 0 && errno() == libc::EMFILE
            };
            let mut bad = 0;
            for (bit, path, flags) in [
                (1, &k, trunc),
                (2, &n, trunc),
                (4, &l, excl),
                (8, &o, trunc),
            ] {
                if !emfile(path, flags) {
                    bad |= bit;
                }
            }
            // One slot free: the twins.
            libc::close(last);
            let fd = libc::open(l.as_ptr(), excl, 0o644);
            if fd < 0 {
                bad |= 16;
            }
            libc::close(fd);
            let fd = libc::open(e.as_ptr(), trunc, 0o644);
            if fd < 0 {
                bad |= 32;
            }
            libc::close(fd);
            bad
        }
    });
    assert_eq!(run.code, 0, "{}", run.log.explain(20));
    assert_eq!(refusals(&run.log), vec![], "{}", run.log.explain(20));
    assert_eq!(read(&kept), "precious data\n");
    assert!(!new.exists() && !outside.exists());
    assert!(lock.exists());
    assert_eq!(read(&emptied), "");
}

/// `/proc/self/fd/NN` for an fd below 100, in a fixed buffer (async-signal-safe).
fn proc_fd_path(fd: i32) -> [u8; 17] {
    let mut buf = *b"/proc/self/fd/\0\0\0";
    buf[14] = b'0' + (fd / 10) as u8;
    buf[15] = b'0' + (fd % 10) as u8;
    buf
}

/// Opens `file` read-only, then links `/proc/self/fd/N` to `new` with
/// `flags`: 0, or errno; 99 when the open fails.
fn link_via_proc<'a>(
    file: &'a std::ffi::CString,
    new: &'a std::ffi::CString,
    flags: i32,
) -> impl FnOnce() -> i32 + 'a {
    move || {
        // SAFETY (child): open, then linkat through the magic link.
        unsafe {
            let fd = libc::open(file.as_ptr(), libc::O_RDONLY);
            if !(0..99).contains(&fd) {
                return 99;
            }
            let from = proc_fd_path(fd);
            result(libc::linkat(
                libc::AT_FDCWD,
                from.as_ptr().cast(),
                libc::AT_FDCWD,
                new.as_ptr(),
                flags,
            ))
        }
    }
}

/// Workload sweep P7: `linkat` of the caller's `/proc/self/fd/N` without
/// `AT_SYMLINK_FOLLOW` (Python's `os.link`) links the magic link itself,
/// procfs's inode: the kernel answers `EXDEV` (after the new name's
/// `EEXIST`), wherever the file lies, and the broker answers the same with
/// no refusal; a closed fd's link is `ENOENT`. A `/proc` path through a
/// symlink on the way stays refused. Twins, followed: the file inside is
/// linked, the one outside refused.
#[test]
fn a_proc_fd_link_not_followed_is_the_kernels_exdev() {
    let fx = fixture();
    let inside = cstr(&fx.file(&fx.w.join("f"), 0o644));
    let outside = cstr(&fx.file(&fx.o.join("f"), 0o644));
    let new = cstr(&fx.w.join("new"));
    let existing = cstr(&fx.file(&fx.w.join("existing"), 0o644));
    for file in [&inside, &outside] {
        let run = confined_entries(rules(&fx), link_via_proc(file, &new, 0));
        assert_eq!(run.code, libc::EXDEV, "{file:?}");
        assert_eq!(refusals(&run.log), vec![], "{file:?}");
    }
    let run = confined_entries(rules(&fx), link_via_proc(&inside, &existing, 0));
    assert_eq!(run.code, libc::EEXIST);
    assert_eq!(refusals(&run.log), vec![]);
    let run = confined_entries(rules(&fx), || {
        // SAFETY (child): linkat of a closed fd's link.
        result(unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                c"/proc/self/fd/98".as_ptr(),
                libc::AT_FDCWD,
                new.as_ptr(),
                0,
            )
        })
    });
    assert_eq!(run.code, libc::ENOENT);
    assert_eq!(refusals(&run.log), vec![]);
    // Through /proc/self/cwd (a symlink on the way): still refused.
    let run = confined_entries(rules(&fx), || {
        // SAFETY (child): linkat through the cwd magic link.
        result(unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                c"/proc/self/cwd/x".as_ptr(),
                libc::AT_FDCWD,
                new.as_ptr(),
                0,
            )
        })
    });
    assert_eq!(run.code, libc::EACCES);
    assert_eq!(refusals(&run.log), vec![Refusal::ProcfsPath]);
    assert!(!fx.w.join("new").exists());
    // Twins, followed.
    let run = confined_entries(
        rules(&fx),
        link_via_proc(&outside, &new, libc::AT_SYMLINK_FOLLOW),
    );
    assert_ne!(run.code, 0);
    assert_eq!(refusals(&run.log), vec![Refusal::LinkFromOutside]);
    assert!(!fx.w.join("new").exists());
    let run = confined_entries(
        rules(&fx),
        link_via_proc(&inside, &new, libc::AT_SYMLINK_FOLLOW),
    );
    assert_eq!(run.code, 0);
    assert_eq!(read(&fx.w.join("new")), "x");
    assert_eq!(refusals(&run.log), vec![]);
}
