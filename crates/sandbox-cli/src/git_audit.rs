//! After a workspace-write run: git repositories the command made whose
//! config or hooks run programs.
//!
//! A repository from before the run keeps its config and hooks unwritable
//! (the broker protects every git directory beneath the write paths). A
//! repository the run makes is its own (`git init`, `git clone` are everyday
//! work), but git reaches it from the parent: added to the parent's index as
//! a gitlink, it is a submodule to `git status`, which runs git there, with
//! that repository's `core.fsmonitor`. So the sandbox says which new ones
//! carry code that git would run, once, after the run. The repositories are
//! those the broker saw made (it made the directory and wrote a `HEAD` in
//! it), wherever they are; without a broker (no record of the run's entries)
//! the workspace is walked before and after, within bounds.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// How deep beneath the workspace repositories are looked for (walk only).
const DEPTH: usize = 6;
/// How many directory entries the walk reads at most.
const BUDGET: usize = 50_000;
/// How deep `include.path` chains are followed (git's own limit is 10).
const INCLUDE_DEPTH: usize = 10;
/// The most of one file the audit reads (a config, a `.git` file,
/// `commondir`), and the most hooks it names per directory: the command
/// made these files, and the runner reading them must stay bounded.
const FILE_CAP: u64 = 1 << 20;
const HOOKS_CAP: usize = 1000;
/// The value beside a config file the audit did not read ([`Read::Refused`]).
const NOT_READ: &str = "\0not read";

/// What the audit read of a file the command could have made.
enum Read {
    /// Missing or unreadable: git would see nothing either.
    Nothing,
    Text(String),
    /// Not read, and why: a FIFO (whose open or read would block the
    /// runner forever: nothing of the run is left to write it), a device
    /// (`/dev/zero` never ends), or a file over [`FILE_CAP`].
    Refused(&'static str),
}

/// `path` read without ever blocking or growing without bound: only a
/// regular file (checked before the open, which is non-blocking and takes
/// no terminal, and again on the open file), at most [`FILE_CAP`] bytes.
fn read_bounded(path: &Path) -> Read {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt;
    let regular = |m: &std::fs::Metadata| {
        if !m.is_file() {
            Err("not a regular file")
        } else if m.len() > FILE_CAP {
            Err("over 1 MiB")
        } else {
            Ok(())
        }
    };
    let Ok(meta) = std::fs::metadata(path) else {
        return Read::Nothing;
    };
    if let Err(why) = regular(&meta) {
        return Read::Refused(why);
    }
    let Ok(file) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
    else {
        return Read::Nothing;
    };
    match file.metadata() {
        Ok(meta) => {
            if let Err(why) = regular(&meta) {
                return Read::Refused(why);
            }
        }
        Err(_) => return Read::Nothing,
    }
    let mut bytes = Vec::new();
    if file.take(FILE_CAP).read_to_end(&mut bytes).is_err() {
        return Read::Nothing;
    }
    match String::from_utf8(bytes) {
        Ok(text) => Read::Text(text),
        Err(_) => Read::Nothing,
    }
}

/// The text of `path` when it is a small regular file ([`read_bounded`]).
fn read_text(path: &Path) -> Option<String> {
    match read_bounded(path) {
        Read::Text(text) => Some(text),
        Read::Nothing | Read::Refused(_) => None,
    }
}

/// Config keys whose value git runs as a program (git-config(1)).
const RUNS: &[&str] = &[
    "core.fsmonitor",
    "core.hookspath",
    "core.sshcommand",
    "core.gitproxy",
    "core.editor",
    "core.pager",
    "core.askpass",
    "sequence.editor",
    "diff.external",
    "gpg.program",
    "credential.helper",
    "uploadpack.packobjectshook",
];

/// Section prefixes whose subsection keys git runs (`filter.<x>.clean`, ...).
const RUNS_IN: &[(&str, &[&str])] = &[
    ("filter.", &["clean", "smudge", "process"]),
    ("diff.", &["textconv", "command"]),
    ("merge.", &["driver"]),
    ("gpg.", &["program"]),
    ("credential.", &["helper"]),
    ("remote.", &["uploadpack", "receivepack", "vcs"]),
    ("pager.", &[]),
];

/// The git directories (`.git` directories and files) beneath `root`.
pub(crate) fn git_dirs(root: &Path) -> BTreeSet<PathBuf> {
    let mut found = BTreeSet::new();
    let mut budget = BUDGET;
    walk(root, 0, &mut budget, &mut found);
    found
}

fn walk(dir: &Path, depth: usize, budget: &mut usize, found: &mut BTreeSet<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if *budget == 0 {
            return;
        }
        *budget -= 1;
        let name = e.file_name();
        let Ok(kind) = e.file_type() else { continue };
        if name == ".git" {
            found.insert(e.path());
            continue;
        }
        if kind.is_dir() && depth < DEPTH && name != "node_modules" && name != "target" {
            walk(&e.path(), depth + 1, budget, found);
        }
    }
}

/// Whether `dir` is a git directory or lies in one (`HEAD`, and `objects`
/// and `refs` or a `commondir`): a place the sandbox writes nothing of its
/// own, whatever the run could write, since git reads it.
pub(crate) fn in_git_dir(dir: &Path) -> bool {
    dir.ancestors().any(|d| {
        d.join("HEAD").symlink_metadata().is_ok()
            && ((d.join("objects").is_dir() && d.join("refs").is_dir())
                || d.join("commondir").is_file())
    })
}

/// The git directory `dot_git` names: itself, or what a `.git` file points to.
fn git_dir_of(dot_git: &Path) -> Option<PathBuf> {
    if dot_git.is_dir() {
        return Some(dot_git.to_path_buf());
    }
    let text = read_text(dot_git)?;
    let p = PathBuf::from(text.lines().find_map(|l| l.strip_prefix("gitdir:"))?.trim());
    Some(if p.is_absolute() {
        p
    } else {
        dot_git.parent().unwrap_or(Path::new("/")).join(p)
    })
}

/// What in the repository at `dot_git` (a git directory or a `.git` file)
/// runs programs: config keys (in `config`, `config.worktree` and the common
/// directory's config, every `include.path` and `includeIf.*.path` they
/// name followed, whatever its condition) and hooks (in `hooks` and where
/// `core.hooksPath` points).
pub(crate) fn runs_code(dot_git: &Path) -> Vec<String> {
    let Some(gitdir) = git_dir_of(dot_git) else {
        return Vec::new();
    };
    let mut configs = vec![gitdir.join("config"), gitdir.join("config.worktree")];
    if let Some(common) = read_text(&gitdir.join("commondir")) {
        configs.push(gitdir.join(common.trim()).join("config"));
    }
    let mut entries = Vec::new();
    let mut seen = BTreeSet::new();
    for config in configs {
        read_config(&config, 0, &mut seen, &mut entries);
    }
    let mut out: Vec<String> = entries
        .iter()
        .filter(|(k, v)| runs(k) || v == NOT_READ)
        .map(|(k, _)| k.clone())
        .collect();
    out.dedup();
    let worktree = dot_git.parent().unwrap_or(Path::new("/"));
    let mut hook_dirs = vec![gitdir.join("hooks")];
    hook_dirs.extend(
        entries
            .iter()
            .filter(|(k, _)| k == "core.hookspath")
            .map(|(_, v)| expand(v, worktree)),
    );
    for dir in hook_dirs {
        if let Ok(hooks) = std::fs::read_dir(&dir) {
            out.extend(
                hooks
                    .flatten()
                    .take(HOOKS_CAP)
                    .map(|h| h.file_name().to_string_lossy().into_owned())
                    .filter(|n| !n.ends_with(".sample"))
                    .map(|n| format!("{}/{n}", dir.display())),
            );
        }
    }
    out
}

/// Whether git runs the value of the config key `key` as a program.
fn runs(key: &str) -> bool {
    RUNS.contains(&key)
        || RUNS_IN.iter().any(|(section, keys)| {
            key.strip_prefix(section)
                .and_then(|rest| rest.rsplit_once('.').map(|(_, k)| k).or(Some(rest)))
                .is_some_and(|k| keys.is_empty() || keys.contains(&k))
        })
}

/// `path` as git reads a path value: `~/` from `$HOME`, relative to `base`.
fn expand(path: &str, base: &Path) -> PathBuf {
    match (path.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => Path::new(&home).join(rest),
        _ => base.join(path),
    }
}

/// The entries of the git config file `path` and of every file it includes,
/// as `(section[.subsection].key, value)`.
fn read_config(
    path: &Path,
    depth: usize,
    seen: &mut BTreeSet<PathBuf>,
    out: &mut Vec<(String, String)>,
) {
    if depth > INCLUDE_DEPTH || !seen.insert(path.to_path_buf()) {
        return;
    }
    let text = match read_bounded(path) {
        Read::Text(text) => text,
        Read::Nothing => return,
        // Named in the warning: git reading it would block or never end,
        // or read what the audit did not.
        Read::Refused(why) => {
            out.push((
                format!("{} ({why}: not read)", path.display()),
                NOT_READ.to_owned(),
            ));
            return;
        }
    };
    let base = path.parent().unwrap_or(Path::new("/"));
    for (key, value) in config_entries(&text) {
        let include =
            key == "include.path" || (key.starts_with("includeif.") && key.ends_with(".path"));
        if include {
            read_config(&expand(&value, base), depth + 1, seen, out);
        }
        out.push((key, value));
    }
}

/// The entries a git config text sets, as `(section[.subsection].key,
/// value)`: section and key lowercase, the subsection's case kept, as git
/// does; a value's quotes removed.
fn config_entries(text: &str) -> Vec<(String, String)> {
    let mut section = String::new();
    let mut entries = Vec::new();
    for line in text.lines() {
        let mut line = line.trim();
        if let Some(rest) = line.strip_prefix('[') {
            let Some((head, after)) = rest.split_once(']') else {
                continue;
            };
            section = match head.split_once(char::is_whitespace) {
                Some((name, sub)) => {
                    format!(
                        "{}.{}",
                        name.to_ascii_lowercase(),
                        sub.trim().trim_matches('"')
                    )
                }
                None => head.trim().to_ascii_lowercase(),
            };
            line = after.trim();
        }
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        let (key, value) = match line.split_once('=') {
            Some((k, v)) => (k.trim(), v.trim()),
            None => (line.split([' ', '\t']).next().unwrap_or(""), ""),
        };
        let value = match value.strip_prefix('"') {
            Some(quoted) => quoted.split('"').next().unwrap_or(""),
            None => value.split(['#', ';']).next().unwrap_or("").trim(),
        };
        let key = key.to_ascii_lowercase();
        if !key.is_empty() && !section.is_empty() {
            entries.push((format!("{section}.{key}"), value.to_owned()));
        }
    }
    entries
}

/// One `sandbox:` line per repository in `made` (git directories or `.git`
/// files the run made) that runs code.
pub(crate) fn warnings<'a>(made: impl IntoIterator<Item = &'a PathBuf>) -> Vec<String> {
    made.into_iter()
        .filter_map(|dot_git| {
            let runs = runs_code(dot_git);
            let at = if dot_git.file_name() == Some(std::ffi::OsStr::new(".git")) {
                dot_git.parent().unwrap_or(dot_git)
            } else {
                dot_git
            };
            (!runs.is_empty()).then(|| {
                format!(
                    "sandbox: the run made a git repository at {} whose {} run programs; git in \
                     the workspace would run them (a submodule's fsmonitor runs at `git status`): \
                     review it before running git there",
                    at.display(),
                    runs.join(", ")
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_keys_are_read_with_sections_and_subsections() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config");
        std::fs::write(
            &config,
            "[core]\n\tFSMonitor = x\n\tbare = false\n[filter \"lfs\"]\n\tclean = y\n# c\n[user] name = a\n",
        )
        .unwrap();
        let keys: Vec<String> = config_entries(&std::fs::read_to_string(&config).unwrap())
            .into_iter()
            .map(|(k, _)| k)
            .collect();
        assert_eq!(
            keys,
            [
                "core.fsmonitor",
                "core.bare",
                "filter.lfs.clean",
                "user.name"
            ]
        );
        let git = dir.path().join(".git");
        std::fs::create_dir_all(git.join("hooks")).unwrap();
        std::fs::rename(&config, git.join("config")).unwrap();
        std::fs::write(git.join("hooks/pre-commit.sample"), "").unwrap();
        std::fs::write(git.join("hooks/post-checkout"), "").unwrap();
        assert_eq!(
            runs_code(&git),
            [
                "core.fsmonitor".to_owned(),
                "filter.lfs.clean".to_owned(),
                format!("{}/post-checkout", git.join("hooks").display())
            ]
        );
    }

    /// Programs named in an included file, in `config.worktree`, or in a
    /// hooks directory `core.hooksPath` names are found too.
    #[test]
    fn includes_worktree_config_and_hooks_path_are_followed() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join(".git");
        std::fs::create_dir_all(git.join("hooks")).unwrap();
        std::fs::write(
            git.join("config"),
            "[include]\n\tpath = ../inc/a\n[includeIf \"gitdir:/x/\"]\n\tpath = ../inc/b\n\
             [core]\n\thooksPath = myhooks\n",
        )
        .unwrap();
        std::fs::create_dir_all(dir.path().join("inc")).unwrap();
        std::fs::write(
            dir.path().join("inc/a"),
            "[core]\n\tfsmonitor = \"touch /tmp/x\"\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("inc/b"), "[include]\npath = c\n").unwrap();
        std::fs::write(dir.path().join("inc/c"), "[diff \"x\"]\n\ttextconv = cat\n").unwrap();
        std::fs::write(git.join("config.worktree"), "[pager]\n\tlog = less\n").unwrap();
        std::fs::create_dir_all(dir.path().join("myhooks")).unwrap();
        std::fs::write(dir.path().join("myhooks/pre-commit"), "").unwrap();
        let runs = runs_code(&git);
        for want in [
            "core.fsmonitor",
            "diff.x.textconv",
            "core.hookspath",
            "pager.log",
        ] {
            assert!(runs.iter().any(|r| r == want), "{want} in {runs:?}");
        }
        assert!(
            runs.iter().any(|r| r.ends_with("myhooks/pre-commit")),
            "{runs:?}"
        );
        // Twin: a config that runs nothing says nothing.
        std::fs::write(git.join("config"), "[user]\n\tname = a\n").unwrap();
        std::fs::remove_file(git.join("config.worktree")).unwrap();
        assert!(runs_code(&git).is_empty());
    }

    /// The files a run made are read without blocking and within bounds: a
    /// FIFO `config` (no writer: a blocking open never returns), an include
    /// of `/dev/zero` (never ends) and an oversized include are named, not
    /// read; the twin, a small regular include, is read.
    #[test]
    fn a_fifo_a_device_or_a_huge_file_is_named_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let git = dir.path().join(".git");
        std::fs::create_dir_all(&git).unwrap();
        let fifo = std::process::Command::new("mkfifo")
            .arg(git.join("config"))
            .status()
            .unwrap();
        assert!(fifo.success());
        let runs = runs_code(&git);
        assert_eq!(runs.len(), 1, "{runs:?}");
        assert!(runs[0].ends_with("config (not a regular file: not read)"));
        std::fs::remove_file(git.join("config")).unwrap();
        let big = dir.path().join("big");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(FILE_CAP + 1)
            .unwrap();
        std::fs::write(dir.path().join("small"), "[core]\n\tpager = less\n").unwrap();
        std::fs::write(
            git.join("config"),
            "[include]\n\tpath = /dev/zero\n\tpath = ../big\n\tpath = ../small\n",
        )
        .unwrap();
        let runs = runs_code(&git);
        assert!(runs.contains(&"/dev/zero (not a regular file: not read)".to_owned()));
        assert!(runs
            .iter()
            .any(|r| r.ends_with("big (over 1 MiB: not read)")));
        assert!(runs.contains(&"core.pager".to_owned()), "{runs:?}");
        assert_eq!(runs.len(), 3, "{runs:?}");
    }
}
