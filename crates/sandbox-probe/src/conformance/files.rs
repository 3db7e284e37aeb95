//! The file-system axes: write, read_deny and write_deny.

use std::os::unix::fs::PermissionsExt;

use sandbox_core::axis::LegKind;
use sandbox_core::SandboxPolicy;

use super::harness::{
    failed_with, refused, resolve, s, show, succeeded, unwitnessed, Ctx, Outcome, Tree, PY_PRELUDE,
};
use super::LegResult;
use crate::launch::minimal_env;
use crate::probe::{read, write_probe, ProbeResult};

fn verdict(pass: bool, evidence: String) -> Outcome {
    (
        if pass {
            LegResult::Passed
        } else {
            LegResult::Failed
        },
        evidence,
    )
}

/// Maps a production probe report onto a leg (used for the write and spawn deny legs).
pub(crate) fn from_probe(report: &crate::ProbeReport) -> Outcome {
    let checks = report
        .checks
        .iter()
        .map(|c| format!("{:?}: {} -> {}", c.role, c.attempted, c.observed))
        .collect::<Vec<_>>()
        .join("; ");
    match &report.result {
        ProbeResult::Witnessed => (LegResult::Passed, format!("gate probe witnessed: {checks}")),
        ProbeResult::Failed {
            attempted,
            observed,
        } => (
            LegResult::Failed,
            format!("gate probe failed: attempted {attempted}; observed {observed}"),
        ),
        ProbeResult::Unwitnessed { why } => (
            LegResult::Unwitnessed { why: why.clone() },
            format!("gate probe unwitnessed: {checks}"),
        ),
        // Says nothing of the backend: proves nothing, never passes.
        ProbeResult::Interfered { scratch, observed } => {
            let why = format!("the probe's scratch {scratch} was interfered with: {observed}");
            (
                LegResult::Unwitnessed { why: why.clone() },
                format!("gate probe interfered with: {why}"),
            )
        } // ProbeResult is non_exhaustive for other crates only; a new verdict
          // is never taken for a pass.
    }
}

pub(crate) fn write_deny_leg(ctx: &Ctx<'_>) -> Outcome {
    from_probe(&write_probe(ctx.backend))
}

const WRITE_BOUNDARY: &str = r#"
grant, sibling, outside = sys.argv[1:4]
def control():
    os.makedirs(grant + "/nested/deeper", exist_ok=True)
    open(grant + "/nested/deeper/ok", "w").write("ok")
attempt("control_nested_write", control)
attempt("same_fs", lambda: os.fstat(1).st_dev == os.stat(grant).st_dev and same_fs(outside, grant))
attempt("prefix_sibling", lambda: open(sibling + "/f", "w").write("x"))
attempt("dotdot_escape", lambda: open(grant + "/../outside/dotdot", "w").write("x"))
attempt("symlink_out", lambda: open(grant + "/link/through-link", "w").write("x"))
attempt("rename_out", lambda: os.rename(grant + "/moveme", outside + "/moved"))
attempt("hardlink_in", lambda: os.link(outside + "/existing", grant + "/hardlink"))
attempt("hardlink_twin", lambda: os.link(grant + "/twin-src", grant + "/nested/hardlink"))
attempt("truncate_outside", lambda: os.truncate(outside + "/existing", 0))
attempt("chmod_outside", lambda: os.chmod(outside + "/existing", 0o600))
attempt("ro_truncate_outside", lambda: os.open(outside + "/existing", os.O_RDONLY | os.O_TRUNC))
attempt("futimens_outside", lambda: os.utime(os.open(outside + "/existing", os.O_RDONLY), (0, 0)))
attempt("setuid_create_inside", lambda: os.open(grant + "/suid", os.O_CREAT | os.O_WRONLY, 0o4755))
attempt("handed_fd_link", lambda: link_fd(1, grant + "/handed"))
attempt("own_fd_link", lambda: link_own(outside + "/existing", grant + "/own"))
attempt("own_fd_link_twin", lambda: link_own(grant + "/twin-src", grant + "/nested/own"))
attempt("handed_fd_proc_link", lambda: link_follow("/proc/self/fd/1", grant + "/handed2"))
attempt("proc_link_twin", lambda: link_proc(grant + "/twin-src", grant + "/nested/proc"))
attempt("nested_landlock", nested_landlock)
"#;

/// Each near miss of the write boundary and the one answer that shows the
/// sandbox refused it: a refusal (`EPERM`/`EACCES`) or the exact errno of
/// the mechanism that keeps it (anything else, `ENOSYS` or a missing file,
/// is a failure, not a refusal).
const NEAR_MISSES: &[(&str, Expect)] = &[
    ("prefix_sibling", Expect::Refused),
    ("dotdot_escape", Expect::Refused),
    ("symlink_out", Expect::Refused),
    ("rename_out", Expect::Refused),
    // Landlock: a link from a directory without the REFER right (outside
    // the write paths) is EXDEV (Documentation/userspace-api/landlock.rst,
    // LANDLOCK_ACCESS_FS_REFER); the twin links within the write path.
    ("hardlink_in", Expect::Errno("EXDEV")),
    ("truncate_outside", Expect::Refused),
    ("chmod_outside", Expect::Refused),
    ("ro_truncate_outside", Expect::Refused),
    ("futimens_outside", Expect::Refused),
    ("setuid_create_inside", Expect::Refused),
    // linkat(AT_EMPTY_PATH) of a descriptor the command did not open:
    // ENOENT without CAP_DAC_READ_SEARCH (linkat(2)), which the sandbox
    // drops; the twin (a file the command opened) shows the call works.
    ("handed_fd_link", Expect::Errno("ENOENT")),
    // The same call on the command's own descriptor of a file outside:
    // the flink gate admits it (the twin), so Landlock's EXDEV decides.
    ("own_fd_link", Expect::Errno("EXDEV")),
    // Through the handed descriptor's /proc/self/fd magic link, followed
    // (linkat(AT_SYMLINK_FOLLOW); Python's os.link calls link(2), which
    // links the magic link itself and is EXDEV with no sandbox at all): the
    // twin links a file inside the write path the same way.
    ("handed_fd_proc_link", Expect::Errno("EXDEV")),
    // With a broker the filter answers EOPNOTSUPP (sandbox-seccomp,
    // table.rs `nested_landlock`); the twin is the same call in the
    // conformance process, which this kernel answers with its ABI.
    ("nested_landlock", Expect::Errno("ENOTSUP")),
];

/// The allowed twins of the write boundary's near misses.
const TWINS: &[&str] = &["hardlink_twin", "own_fd_link_twin", "proc_link_twin"];

/// What a near miss must answer.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Expect {
    /// `EPERM` or `EACCES`.
    Refused,
    /// Exactly this errno (Python's name for it).
    Errno(&'static str),
}

impl Expect {
    pub(crate) fn holds(self, value: Option<&String>) -> bool {
        match self {
            Expect::Refused => refused(value),
            Expect::Errno(name) => failed_with(value, name),
        }
    }
}

/// The near misses whose answer is not the one the mechanism gives.
pub(crate) fn unexpected(
    values: &std::collections::BTreeMap<String, String>,
    near_misses: &[(&str, Expect)],
) -> Vec<String> {
    near_misses
        .iter()
        .filter(|(k, e)| !e.holds(values.get(*k)))
        .map(|(k, e)| {
            format!(
                "{k}={} (expected {})",
                values.get(*k).map_or("(absent)", String::as_str),
                match e {
                    Expect::Refused => "err:EPERM or err:EACCES".to_owned(),
                    Expect::Errno(n) => format!("err:{n}"),
                }
            )
        })
        .collect()
}

/// The allowed twin of the `nested_landlock` near miss: the same
/// `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)` in
/// this (unconfined) process answers the kernel's ABI, so an `EOPNOTSUPP`
/// in the child is the filter's and not a kernel without Landlock.
pub(crate) fn host_landlock_abi() -> Option<i64> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: a NULL attribute with size 0 and the VERSION flag only
        // queries the ABI (Documentation/userspace-api/landlock.rst).
        let rc = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<u8>(),
                0usize,
                1u32,
            )
        };
        (rc > 0).then_some(rc)
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

pub(crate) fn write_boundary(ctx: &Ctx<'_>) -> Result<Outcome, Outcome> {
    let tree = Tree::new()?;
    let grant = tree.dir("grant")?;
    let sibling = tree.dir("grant2")?;
    let outside = tree.dir("outside")?;
    let existing = tree.file("outside/existing", "original\n")?;
    std::fs::set_permissions(&existing, std::fs::Permissions::from_mode(0o644))
        .map_err(|e| unwitnessed(e.to_string()))?;
    tree.file("grant/moveme", "m\n")?;
    tree.file("grant/twin-src", "t\n")?;
    tree.symlink("grant/link", &outside)?;
    let mtime = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let existing_mtime = mtime(&existing);
    let policy = resolve(SandboxPolicy {
        write_paths: vec![s(&grant)],
        ..SandboxPolicy::default()
    })?;
    let run = ctx.python(
        &policy,
        &format!("{PY_PRELUDE}{WRITE_BOUNDARY}"),
        &[&grant, &sibling, &outside],
    )?;
    let values = run.started()?;
    if read(&grant.join("nested/deeper/ok")).as_deref() != Some("ok") {
        return Err(unwitnessed(format!(
            "positive control not seen: a nested write inside the write path did not happen \
             ({}; the child {})",
            show(&values, &["control_nested_write"]),
            run.describe()
        )));
    }
    // What must not have changed on disk, whatever the child printed.
    let untouched = [
        ("prefix sibling file", !sibling.join("f").exists()),
        ("dotdot file", !outside.join("dotdot").exists()),
        (
            "file through symlink",
            !outside.join("through-link").exists(),
        ),
        (
            "renamed file",
            grant.join("moveme").exists() && !outside.join("moved").exists(),
        ),
        ("hard link", !grant.join("hardlink").exists()),
        (
            "handed fd's file linked inside",
            !grant.join("handed").exists()
                && !grant.join("handed2").exists()
                && !grant.join("own").exists(),
        ),
        (
            "outside file",
            read(&existing).as_deref() == Some("original\n")
                && std::fs::metadata(&existing)
                    .map(|m| m.permissions().mode() & 0o777 == 0o644)
                    .unwrap_or(false),
        ),
        (
            "outside file's timestamps",
            mtime(&existing) == existing_mtime,
        ),
        (
            "set-id file inside",
            std::fs::metadata(grant.join("suid"))
                .map(|m| m.permissions().mode() & 0o6000 == 0)
                .unwrap_or(true),
        ),
    ];
    let changed: Vec<&str> = untouched
        .iter()
        .filter(|(_, ok)| !ok)
        .map(|(n, _)| *n)
        .collect();
    let twins_ok = TWINS.iter().all(|k| succeeded(values.get(*k)));
    let host_abi = host_landlock_abi();
    if values.get("same_fs").map(String::as_str) != Some("ok:True")
        || !twins_ok
        || host_abi.is_none()
    {
        return Err(unwitnessed(format!(
            "allowed twins not seen (an exact errno proves nothing without them): {}, \
             landlock_create_ruleset(VERSION) here: {host_abi:?} (the child {})",
            show(
                &values,
                &[
                    "same_fs",
                    "hardlink_twin",
                    "own_fd_link_twin",
                    "proc_link_twin"
                ]
            ),
            run.describe()
        )));
    }
    let wrong = unexpected(&values, NEAR_MISSES);
    let keys: Vec<&str> = NEAR_MISSES.iter().map(|(k, _)| *k).collect();
    let evidence = format!(
        "control ok; twins ok ({}; landlock ABI {} unconfined); {}; {}on disk changed: {}",
        TWINS.join(", "),
        host_abi.unwrap_or_default(),
        show(&values, &keys),
        if wrong.is_empty() {
            String::new()
        } else {
            format!("NOT the mechanism's answer: {}; ", wrong.join(", "))
        },
        if changed.is_empty() {
            "nothing".to_owned()
        } else {
            changed.join(", ")
        }
    );
    Ok(verdict(wrong.is_empty() && changed.is_empty(), evidence))
}

const WRITE_WORKLOAD: &str = r#"set -e
mkdir -p "$1/build/obj/deep"
echo hello > "$1/build/obj/deep/a.o"
mv "$1/build/obj/deep/a.o" "$1/build/a.out"
cat "$1/build/a.out" > "$1/result"
rm -r "$1/build"
"#;

pub(crate) fn write_workload(ctx: &Ctx<'_>) -> Result<Outcome, Outcome> {
    let tree = Tree::new()?;
    let grant = tree.dir("grant")?;
    let policy = resolve(SandboxPolicy {
        write_paths: vec![s(&grant)],
        ..SandboxPolicy::default()
    })?;
    let run = ctx.sh(&policy, WRITE_WORKLOAD, &[&grant], &minimal_env())?;
    let result = read(&grant.join("result"));
    let pass =
        run.exited_ok() && result.as_deref() == Some("hello\n") && !grant.join("build").exists();
    Ok(verdict(
        pass,
        format!(
            "mkdir -p, write, mv, cat, rm -r under the write path: result file {:?}, build tree \
             removed: {} (the command {})",
            result,
            !grant.join("build").exists(),
            run.describe()
        ),
    ))
}

const READ_DENY: &str = r#"
root = sys.argv[1]
def rd(p):
    return len(open(p, "rb").read())
attempt("secret", lambda: rd(root + "/secret/key"))
attempt("public", lambda: rd(root + "/public/ok"))
attempt("prefix_sibling", lambda: rd(root + "/secret2/ok"))
attempt("symlink_in", lambda: rd(root + "/public/link"))
attempt("listdir_secret", lambda: len(os.listdir(root + "/secret")))
def broad():
    n = 0
    for d, _, files in os.walk(root + "/public"):
        for f in files:
            if not os.path.islink(os.path.join(d, f)):
                n += rd(os.path.join(d, f))
    import json, shlex
    n += rd("/etc/passwd") > 0
    n += len(os.listdir("/usr/bin")) > 0
    return n > 0
attempt("broad_reads", broad)
"#;

pub(crate) fn read_deny(ctx: &Ctx<'_>, leg: LegKind) -> Result<Outcome, Outcome> {
    let tree = Tree::new()?;
    let secret = tree.dir("secret")?;
    tree.file("secret/key", "secret\n")?;
    tree.file("secret2/ok", "open\n")?;
    tree.file("public/ok", "open\n")?;
    tree.file("public/tree/a/b", "bbb\n")?;
    tree.symlink("public/link", &secret.join("key"))?;
    let script = format!("{PY_PRELUDE}{READ_DENY}");
    let keys = [
        "secret",
        "public",
        "prefix_sibling",
        "symlink_in",
        "listdir_secret",
        "broad_reads",
    ];

    // Positive control: without the read deny, everything is readable.
    let open = ctx.python(&resolve(SandboxPolicy::default())?, &script, &[&tree.root])?;
    let values = open.started()?;
    if !keys.iter().all(|k| succeeded(values.get(*k))) {
        return Err(unwitnessed(format!(
            "positive control not seen: without read_deny_paths {} (the child {})",
            show(&values, &keys),
            open.describe()
        )));
    }
    let policy = resolve(SandboxPolicy {
        read_deny_paths: vec![s(&secret)],
        ..SandboxPolicy::default()
    })?;
    let run = ctx.python(&policy, &script, &[&tree.root])?;
    let v = run.started()?;
    let (pass, shown) = match leg {
        LegKind::Deny => (
            refused(v.get("secret")) && succeeded(v.get("public")),
            show(&v, &["secret", "public"]),
        ),
        LegKind::Boundary => (
            succeeded(v.get("prefix_sibling"))
                && refused(v.get("symlink_in"))
                && succeeded(v.get("listdir_secret")),
            show(&v, &["prefix_sibling", "symlink_in", "listdir_secret"]),
        ),
        LegKind::Workload => (
            v.get("broad_reads").map(String::as_str) == Some("ok:True"),
            show(&v, &["broad_reads"]),
        ),
    };
    Ok(verdict(
        pass,
        format!(
            "read_deny_paths=[{}]: {shown} (without the deny every read succeeded)",
            secret.display()
        ),
    ))
}

const WRITE_DENY: &str = r#"
g = sys.argv[1]
def w(p, mode="w"):
    with open(p, mode) as f:
        f.write("x\n")
attempt("overwrite_hook", lambda: w(g + "/.git/hooks/pre-commit"))
attempt("sibling_write", lambda: w(g + "/src/main.rs"))
attempt("create_in_denied", lambda: w(g + "/.git/hooks/new-hook"))
attempt("rename_into_denied", lambda: os.rename(g + "/src/moveme", g + "/.git/hooks/moved"))
attempt("write_through_symlink", lambda: w(g + "/src/hook-link"))
attempt("same_fs", lambda: os.fstat(1).st_dev == os.stat(g).st_dev)
attempt("own_fd_link_twin", lambda: link_own(g + "/src/main.rs", g + "/src/alias-twin"))
attempt("denied_fd_link", lambda: link_own(g + "/.git/hooks/pre-commit", g + "/src/alias"))
attempt("hardlink_out_of_denied", lambda: os.link(g + "/.git/hooks/pre-commit", g + "/src/alias2"))
attempt("rename_denied_away", lambda: os.rename(g + "/.git/hooks", g + "/.git/hooks-away"))
attempt("handed_fd_link", lambda: link_fd(1, g + "/src/handed"))
attempt("nested_landlock", nested_landlock)
def workload():
    w(g + "/src/new-file.rs")
    w(g + "/.git/config", "a")
    os.makedirs(g + "/src/module/inner", exist_ok=True)
    w(g + "/src/module/inner/lib.rs")
    os.rename(g + "/src/module/inner/lib.rs", g + "/src/module/lib.rs")
    return open(g + "/src/module/lib.rs").read().strip()
attempt("workload", workload)
"#;

pub(crate) fn write_deny_axis(ctx: &Ctx<'_>, leg: LegKind) -> Result<Outcome, Outcome> {
    let tree = Tree::new()?;
    let grant = tree.dir("grant")?;
    let hooks = tree.dir("grant/.git/hooks")?;
    let hook = tree.file("grant/.git/hooks/pre-commit", "original\n")?;
    tree.file("grant/.git/config", "[core]\n")?;
    tree.file("grant/src/main.rs", "fn main() {}\n")?;
    tree.file("grant/src/moveme", "m\n")?;
    tree.symlink("grant/src/hook-link", &hook)?;
    let script = format!("{PY_PRELUDE}{WRITE_DENY}");

    // Positive control: without write_deny_paths the hook is writable.
    let open_tree = Tree::new()?;
    let open_grant = open_tree.dir("grant")?;
    open_tree.file("grant/.git/hooks/pre-commit", "original\n")?;
    let open_policy = resolve(SandboxPolicy {
        write_paths: vec![s(&open_grant)],
        ..SandboxPolicy::default()
    })?;
    let open = ctx.python(&open_policy, &script, &[&open_grant])?;
    let ov = open.started()?;
    if !succeeded(ov.get("overwrite_hook")) {
        return Err(unwitnessed(format!(
            "positive control not seen: without write_deny_paths {} (the child {})",
            show(&ov, &["overwrite_hook"]),
            open.describe()
        )));
    }

    let policy = resolve(SandboxPolicy {
        write_paths: vec![s(&grant)],
        write_deny_paths: vec![s(&hooks)],
        ..SandboxPolicy::default()
    })?;
    let run = ctx.python(&policy, &script, &[&grant])?;
    let v = run.started()?;
    let hook_intact = read(&hook).as_deref() == Some("original\n");
    let (pass, shown) = match leg {
        LegKind::Deny => (
            refused(v.get("overwrite_hook")) && succeeded(v.get("sibling_write")) && hook_intact,
            format!(
                "{}, hook unchanged on disk: {hook_intact}",
                show(&v, &["overwrite_hook", "sibling_write"])
            ),
        ),
        LegKind::Boundary => {
            // Each near miss and the answer of the mechanism that keeps it.
            let near_misses: &[(&str, Expect)] = &[
                ("create_in_denied", Expect::Refused),
                ("rename_into_denied", Expect::Refused),
                ("write_through_symlink", Expect::Refused),
                ("hardlink_out_of_denied", Expect::Refused),
                ("rename_denied_away", Expect::Refused),
                // linkat(AT_EMPTY_PATH) of a descriptor the command did not
                // open: the kernel's ENOENT without CAP_DAC_READ_SEARCH,
                // which the sandbox drops.
                ("handed_fd_link", Expect::Errno("ENOENT")),
                // The command's own descriptor of the denied file: the
                // kernel would link it (the twin), the broker answers as the
                // kernel does for a handed one (sandbox-broker entries.rs).
                ("denied_fd_link", Expect::Errno("ENOENT")),
                ("nested_landlock", Expect::Errno("ENOTSUP")),
            ];
            let host_abi = host_landlock_abi();
            if v.get("same_fs").map(String::as_str) != Some("ok:True")
                || !succeeded(v.get("own_fd_link_twin"))
                || host_abi.is_none()
            {
                return Err(unwitnessed(format!(
                    "allowed twins not seen: {}, landlock_create_ruleset(VERSION) here: \
                     {host_abi:?} (the child {})",
                    show(&v, &["same_fs", "own_fd_link_twin"]),
                    run.describe()
                )));
            }
            let on_disk = !hooks.join("new-hook").exists()
                && !grant.join("src/handed").exists()
                && !grant.join("src/alias").exists()
                && !grant.join("src/alias2").exists()
                && !hooks.join("moved").exists()
                && hook_intact
                && hooks.is_dir();
            let wrong = unexpected(&v, near_misses);
            let keys: Vec<&str> = near_misses.iter().map(|(k, _)| *k).collect();
            (
                wrong.is_empty() && on_disk,
                format!(
                    "twins ok (own_fd_link_twin, landlock ABI {} unconfined); {}, {}denied tree \
                     unchanged on disk: {on_disk}",
                    host_abi.unwrap_or_default(),
                    show(&v, &keys),
                    if wrong.is_empty() {
                        String::new()
                    } else {
                        format!("NOT the mechanism's answer: {}; ", wrong.join(", "))
                    }
                ),
            )
        }
        LegKind::Workload => (
            v.get("workload").map(String::as_str) == Some("ok:x"),
            show(&v, &["workload"]),
        ),
    };
    Ok(verdict(
        pass,
        format!(
            "write_paths=[{}], write_deny_paths=[{}]: {shown} (without the deny the hook was \
             writable)",
            grant.display(),
            hooks.display()
        ),
    ))
}
