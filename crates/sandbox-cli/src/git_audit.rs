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
    let text = std::fs::read_to_string(dot_git).ok()?;
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
    if let Ok(common) = std::fs::read_to_string(gitdir.join("commondir")) {
        configs.push(gitdir.join(common.trim()).join("config"));
    }
    let mut entries = Vec::new();
    let mut seen = BTreeSet::new();
    for config in configs {
        read_config(&config, 0, &mut seen, &mut entries);
    }
    let mut out: Vec<String> = entries
        .iter()
        .map(|(k, _)| k)
        .filter(|k| runs(k))
        .cloned()
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
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
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
}
