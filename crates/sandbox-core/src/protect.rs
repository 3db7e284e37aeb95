//! What workspace-write protects by default, and the `secrets` preset.
//!
//! An agent that writes `.git/hooks/pre-commit`, sets `core.fsmonitor` in
//! `.git/config` or appends to `.bashrc` gets its code run outside any
//! sandbox at the user's next git command or shell. So workspace-write keeps
//! these paths write-denied inside the workspace, while everything else in
//! it stays writable (the Linux backend's broker keeps the denials without
//! taking the workspace root's own entries away).

use std::path::{Path, PathBuf};

/// Paths (relative to the workspace) workspace-write write-denies by default.
///
/// `.git/config` and `.git/hooks` are protected only when the workspace
/// already is a git repository (or a worktree or submodule pointing at one,
/// whose real git directory is protected too): a repository the command
/// creates itself with `git init` must be able to write its own config.
pub const WORKSPACE_PROTECTED: &[&str] = &[
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".zshrc",
    ".zprofile",
    ".zshenv",
    ".profile",
    ".gitconfig",
    ".gitmodules",
    ".ripgreprc",
    ".mcp.json",
    ".vscode",
    ".idea",
    ".claude/commands",
    ".claude/agents",
    ".claude/settings.json",
    ".claude/settings.local.json",
    "sandbox.toml",
    ".sandbox",
];

/// Inside a git directory: what runs code or changes what git runs.
const GIT_PROTECTED: &[&str] = &["hooks", "config"];

/// Credential files and directories the `secrets` preset read-denies (each
/// relative to the home directory, and only when present).
pub const SECRETS: &[&str] = &[
    ".ssh",
    ".aws",
    ".gnupg",
    ".config/gcloud",
    ".kube",
    ".docker/config.json",
    ".netrc",
    ".config/gh",
    ".npmrc",
    ".pypirc",
    ".cargo/credentials",
    ".cargo/credentials.toml",
    ".git-credentials",
    ".azure",
    ".config/hub",
];

/// Changes the operator makes to the default protection list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Protection<'a> {
    /// Extra paths (relative to the workspace) to protect.
    pub add: &'a [String],
    /// Default entries (as written in [`WORKSPACE_PROTECTED`], or
    /// `.git/config` / `.git/hooks`) not to protect.
    pub remove: &'a [String],
}

/// The absolute paths workspace-write write-denies in `workspace`.
pub fn workspace_protections(workspace: &Path, change: &Protection<'_>) -> Vec<PathBuf> {
    let keep = |name: &str| {
        !change
            .remove
            .iter()
            .any(|r| r.trim_end_matches('/') == name)
    };
    let mut out: Vec<PathBuf> = WORKSPACE_PROTECTED
        .iter()
        .filter(|n| keep(n))
        .map(|n| workspace.join(n))
        .collect();
    for gitdir in git_dirs(workspace) {
        for name in GIT_PROTECTED {
            if keep(&format!(".git/{name}")) {
                out.push(gitdir.join(name));
            }
        }
    }
    out.extend(change.add.iter().map(|a| workspace.join(a)));
    out.sort();
    out.dedup();
    out
}

/// The git directories behind `workspace/.git`: the directory itself, or
/// for a `.git` file (worktrees, submodules) the directory it names and, for
/// a worktree, the common directory whose hooks and config git runs.
fn git_dirs(workspace: &Path) -> Vec<PathBuf> {
    let dot_git = workspace.join(".git");
    let Ok(meta) = std::fs::symlink_metadata(&dot_git) else {
        return Vec::new();
    };
    if meta.is_dir() {
        return vec![dot_git];
    }
    let mut dirs = vec![dot_git.clone()];
    let Some(gitdir) = std::fs::read_to_string(&dot_git).ok().and_then(|text| {
        text.lines()
            .find_map(|l| l.strip_prefix("gitdir:"))
            .map(|p| workspace.join(p.trim()))
    }) else {
        return dirs;
    };
    if let Ok(common) = std::fs::read_to_string(gitdir.join("commondir")) {
        let common = gitdir.join(common.trim());
        dirs.push(std::fs::canonicalize(&common).unwrap_or(common));
    }
    dirs.push(gitdir);
    dirs
}

/// The [`SECRETS`] that exist beneath `home`.
pub fn secrets(home: &Path) -> Vec<PathBuf> {
    SECRETS
        .iter()
        .map(|s| home.join(s))
        .filter(|p| std::fs::symlink_metadata(p).is_ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repository_gets_its_hooks_and_config_protected() {
        let ws = tempfile::tempdir().unwrap();
        let none = Protection::default();
        let plain = workspace_protections(ws.path(), &none);
        assert!(plain.contains(&ws.path().join(".bashrc")));
        assert!(!plain.iter().any(|p| p.starts_with(ws.path().join(".git"))));
        std::fs::create_dir(ws.path().join(".git")).unwrap();
        let repo = workspace_protections(ws.path(), &none);
        assert!(repo.contains(&ws.path().join(".git/hooks")));
        assert!(repo.contains(&ws.path().join(".git/config")));
    }

    #[test]
    fn a_git_file_protects_the_real_git_directory() {
        let ws = tempfile::tempdir().unwrap();
        let main = tempfile::tempdir().unwrap();
        let wt = main.path().join(".git/worktrees/feature");
        std::fs::create_dir_all(&wt).unwrap();
        std::fs::write(wt.join("commondir"), "../..\n").unwrap();
        std::fs::write(
            ws.path().join(".git"),
            format!("gitdir: {}\n", wt.display()),
        )
        .unwrap();
        let p = workspace_protections(ws.path(), &Protection::default());
        assert!(p.contains(&wt.join("hooks")), "{p:?}");
        let common = std::fs::canonicalize(main.path().join(".git")).unwrap();
        assert!(p.contains(&common.join("hooks")), "{p:?}");
        assert!(
            p.contains(&ws.path().join(".git/config")),
            "the .git file's own name too"
        );
    }

    #[test]
    fn the_operator_adds_and_removes() {
        let ws = tempfile::tempdir().unwrap();
        let add = vec!["deploy/keys".to_owned()];
        let remove = vec![".vscode".to_owned(), ".idea/".to_owned()];
        let p = workspace_protections(
            ws.path(),
            &Protection {
                add: &add,
                remove: &remove,
            },
        );
        assert!(p.contains(&ws.path().join("deploy/keys")));
        assert!(!p.contains(&ws.path().join(".vscode")));
        assert!(!p.contains(&ws.path().join(".idea")));
        assert!(p.contains(&ws.path().join(".mcp.json")));
    }

    #[test]
    fn secrets_are_only_the_present_ones() {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir(home.path().join(".ssh")).unwrap();
        std::fs::write(home.path().join(".netrc"), "").unwrap();
        let s = secrets(home.path());
        assert_eq!(
            s,
            vec![home.path().join(".ssh"), home.path().join(".netrc")]
        );
    }
}
