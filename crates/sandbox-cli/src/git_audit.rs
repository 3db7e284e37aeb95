//! After a workspace-write run: git repositories the command made inside
//! the workspace whose config or hooks run programs.
//!
//! A nested repository is the command's own (workspace-write protects only
//! the git directories that existed when the run started), but git reaches
//! it from the parent: added to the parent's index as a gitlink, it is a
//! submodule to `git status`, which runs git there, with that repository's
//! `core.fsmonitor`. The sandbox cannot refuse making repositories (`git
//! init`, `git clone` are everyday work), so it says which new ones carry
//! code that git would run, once, after the run.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// How deep beneath the workspace repositories are looked for.
const DEPTH: usize = 6;
/// How many directory entries the walk reads at most.
const BUDGET: usize = 50_000;

/// Config keys whose value git runs as a program (git-config(1)).
const RUNS: &[&str] = &[
    "core.fsmonitor",
    "core.hookspath",
    "core.sshcommand",
    "core.editor",
    "core.pager",
    "core.askpass",
    "sequence.editor",
    "diff.external",
    "gpg.program",
    "credential.helper",
];

/// Section prefixes whose subsection keys git runs (`filter.<x>.clean`, ...).
const RUNS_IN: &[(&str, &[&str])] = &[
    ("filter.", &["clean", "smudge", "process"]),
    ("diff.", &["textconv", "command"]),
    ("merge.", &["driver"]),
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

/// What in the repository at `dot_git` runs programs: config keys and hooks.
pub(crate) fn runs_code(dot_git: &Path) -> Vec<String> {
    let gitdir = if dot_git.is_dir() {
        dot_git.to_path_buf()
    } else {
        match std::fs::read_to_string(dot_git).ok().and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("gitdir:"))
                .map(str::trim)
                .map(PathBuf::from)
        }) {
            Some(p) if p.is_absolute() => p,
            Some(p) => dot_git.parent().unwrap_or(Path::new("/")).join(p),
            None => return Vec::new(),
        }
    };
    let mut out: Vec<String> = config_keys(&gitdir.join("config"))
        .into_iter()
        .filter(|k| {
            RUNS.contains(&k.as_str())
                || RUNS_IN.iter().any(|(section, keys)| {
                    k.strip_prefix(section)
                        .and_then(|rest| rest.rsplit_once('.'))
                        .is_some_and(|(_, key)| keys.contains(&key))
                })
        })
        .collect();
    if let Ok(hooks) = std::fs::read_dir(gitdir.join("hooks")) {
        out.extend(
            hooks
                .flatten()
                .map(|h| h.file_name().to_string_lossy().into_owned())
                .filter(|n| !n.ends_with(".sample"))
                .map(|n| format!("hooks/{n}")),
        );
    }
    out
}

/// The keys a git config file sets, lowercase `section[.subsection].key`
/// (subsection case kept as git does).
fn config_keys(path: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let mut section = String::new();
    let mut keys = Vec::new();
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
        let key = line
            .split(['=', ' ', '\t'])
            .next()
            .unwrap_or("")
            .to_ascii_lowercase();
        if !key.is_empty() && !section.is_empty() {
            keys.push(format!("{section}.{key}"));
        }
    }
    keys
}

/// One `sandbox:` line per repository made during the run (not in
/// `before`) that runs code.
pub(crate) fn warnings(root: &Path, before: &BTreeSet<PathBuf>) -> Vec<String> {
    git_dirs(root)
        .difference(before)
        .filter_map(|dot_git| {
            let runs = runs_code(dot_git);
            (!runs.is_empty()).then(|| {
                format!(
                    "sandbox: the run made a git repository at {} whose {} run programs; git in \
                     the workspace would run them (a submodule's fsmonitor runs at `git status`): \
                     review it before running git there",
                    dot_git.parent().unwrap_or(dot_git).display(),
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
        assert_eq!(
            config_keys(&config),
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
            ["core.fsmonitor", "filter.lfs.clean", "hooks/post-checkout"]
        );
    }
}
