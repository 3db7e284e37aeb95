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
    ".bash_logout",
    ".zshrc",
    ".zprofile",
    ".zshenv",
    ".zlogin",
    ".zlogout",
    ".profile",
    ".config/fish",
    ".gitconfig",
    // git's XDG user config and attributes (git-config(1), FILES), read as
    // .gitconfig is.
    ".config/git",
    // sshd runs ~/.ssh/rc at login and admits the keys listed here; the
    // client config's ProxyCommand and LocalCommand run commands.
    ".ssh/rc",
    ".ssh/authorized_keys",
    ".ssh/authorized_keys2",
    ".ssh/config",
    // Run at the next login: systemd user units (systemd.unit(5), user unit
    // search path) and XDG autostart entries.
    ".config/systemd",
    ".config/autostart",
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

/// Paths (relative to the home directory) workspace-write also write-denies
/// when the home directory lies in the workspace: what runs code at the
/// user's next command, login or editor session there, but in a project is
/// an ordinary name (a project's own `bin/` or `.cargo/config.toml`).
pub const HOME_PROTECTED: &[&str] = &[
    // Directories on the usual PATH (a planted `git` there runs at the next
    // git command), and Python's user site (a `.pth` file runs at every start).
    "bin",
    ".local/bin",
    ".local/lib",
    ".cargo/bin",
    "go/bin",
    // Environment and commands of the next login or X session.
    ".pam_environment",
    ".config/environment.d",
    ".xprofile",
    ".xsessionrc",
    ".xinitrc",
    // Read by interactive tools, which run or type commands they name.
    ".inputrc",
    ".tmux.conf",
    ".config/tmux",
    ".vimrc",
    ".vim",
    ".config/nvim",
    ".emacs",
    ".emacs.d",
    ".gdbinit",
    ".lldbinit",
    // Tool configs that run programs they name (rustc-wrapper, script-shell,
    // yarnPath, an index to install from, credential helpers).
    ".cargo/config",
    ".cargo/config.toml",
    ".npmrc",
    ".yarnrc",
    ".yarnrc.yml",
    ".config/pip",
    ".pip",
    ".docker/config.json",
];

/// Inside a git directory: what runs code or changes what git runs.
/// `commondir` names the directory git takes `config` and `hooks` from
/// (gitrepository-layout(5): "If this file exists, $GIT_COMMON_DIR will be
/// set to the path specified in this file"), in a main git directory too; and
/// `config.worktree` is read as config once `extensions.worktreeConfig` is
/// set.
const GIT_PROTECTED: &[&str] = &["hooks", "config", "commondir", "config.worktree"];

/// How deep [`nested_git_dirs`] looks for submodules of submodules.
const NESTED_GIT_DEPTH: usize = 8;

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

impl Protection<'_> {
    /// Whether the default entry `name` stays protected (not removed).
    fn keeps(&self, name: &str) -> bool {
        !self.remove.iter().any(|r| r.trim_end_matches('/') == name)
    }

    /// Whether git directories stay protected: unless both `.git/config`
    /// and `.git/hooks` are removed.
    pub fn keeps_git(&self) -> bool {
        self.keeps(".git/config") || self.keeps(".git/hooks")
    }
}

/// Whether `name` is a default protection [`Protection::remove`] can drop:
/// an entry of [`WORKSPACE_PROTECTED`] or [`HOME_PROTECTED`], `.git` (the
/// `.git` file), or `.git/` followed by a git directory's protected entry.
pub fn is_default_protection(name: &str) -> bool {
    let name = name.trim_end_matches('/');
    WORKSPACE_PROTECTED.contains(&name)
        || HOME_PROTECTED.contains(&name)
        || name == ".git"
        || name
            .strip_prefix(".git/")
            .is_some_and(|n| GIT_PROTECTED.contains(&n))
}

/// The absolute paths workspace-write write-denies in `workspace`, with the
/// home directory (`$HOME`) protected as well when it lies in the workspace
/// (see [`protections_with_home`]).
pub fn workspace_protections(workspace: &Path, change: &Protection<'_>) -> Vec<PathBuf> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    protections_with_home(workspace, home.as_deref(), change)
}

/// [`workspace_protections`] for the home directory `home`: when it is the
/// workspace or lies beneath it, [`WORKSPACE_PROTECTED`] and
/// [`HOME_PROTECTED`] are protected in it too (the operator's removals
/// apply to both).
pub fn protections_with_home(
    workspace: &Path,
    home: Option<&Path>,
    change: &Protection<'_>,
) -> Vec<PathBuf> {
    let mut out = protections_in(workspace, change);
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    if let Some(home) = home.filter(|h| h.is_absolute()).map(canonical) {
        if home.starts_with(canonical(workspace)) {
            out.extend(
                WORKSPACE_PROTECTED
                    .iter()
                    .chain(HOME_PROTECTED)
                    .filter(|n| change.keeps(n))
                    .map(|n| home.join(n)),
            );
            out.sort();
            out.dedup();
        }
    }
    out
}

/// The protections a write path gets in any mode, as the workspace does in
/// workspace-write ([`protections_with_home`]), or `None` when `dir` holds
/// nothing worth protecting: no protected name at its top (`.git`,
/// `.bashrc`, `.vscode`, `.claude`, ... or an operator's extra name), no
/// git repository anywhere beneath it (a folder of clones), none around it
/// (a folder inside a working tree), and no home directory. Such a write
/// path (a small build or output directory outside any repository) pays
/// nothing: a deny path beneath a write path sends its writes through the
/// broker.
///
/// A write path that is a git directory itself (`-w repo/.git`, a bare
/// repository) gets its `config`, `hooks`, `commondir` and
/// `config.worktree` protected, as a workspace's `.git` has them; a bare
/// repository beneath counts as a repository there. A write path with
/// more entries beneath it than are looked at (4,096) counts as holding one
/// (a run could otherwise hide a clone from the next run's look by filling
/// its folder).
///
/// A run can still create a protected name afresh in a write path that
/// held none (`git init` in an empty output directory outside any
/// repository): nothing the user runs reads it there unless they enter it.
pub fn write_path_protections(
    dir: &Path,
    home: Option<&Path>,
    change: &Protection<'_>,
) -> Option<Vec<PathBuf>> {
    holds_protected(dir, home, change).then(|| {
        let mut out = protections_with_home(dir, home, change);
        if is_git_dir(dir) {
            out.extend(
                GIT_PROTECTED
                    .iter()
                    .filter(|n| change.keeps(&format!(".git/{n}")))
                    .map(|n| dir.join(n)),
            );
            out.sort();
            out.dedup();
        }
        out
    })
}

/// How many entries beneath a write path [`holds_protected`] looks at for
/// a repository; beyond it the write path counts as holding one.
const REPOSITORY_SCAN: usize = 4096;

/// Whether `dir` is a git directory (a repository's `.git`, a bare
/// repository): `HEAD` and `objects`, `refs` or `commondir`, git's own
/// test (`is_git_directory`), as the broker's (`sandbox-broker`, gitdirs).
fn is_git_dir(dir: &Path) -> bool {
    let has = |n: &str| std::fs::symlink_metadata(dir.join(n)).is_ok();
    has("HEAD") && (has("objects") || has("refs") || has("commondir"))
}

fn holds_protected(dir: &Path, home: Option<&Path>, change: &Protection<'_>) -> bool {
    let canonical = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    if home.is_some_and(|h| h.is_absolute() && canonical(h).starts_with(canonical(dir))) {
        return true;
    }
    let top = |name: &str| {
        Path::new(name)
            .components()
            .next()
            .map(|c| dir.join(c))
            .is_some_and(|p| std::fs::symlink_metadata(p).is_ok())
    };
    if std::iter::once(".git")
        .chain(WORKSPACE_PROTECTED.iter().copied())
        .filter(|n| change.keeps(n))
        .chain(change.add.iter().map(String::as_str))
        .any(top)
    {
        return true;
    }
    if is_git_dir(dir) {
        return true;
    }
    // Inside a repository's working tree: a `.git` the run makes here is
    // the one git finds first for the user's next command in this folder.
    if dir
        .ancestors()
        .skip(1)
        .any(|a| std::fs::symlink_metadata(a.join(".git")).is_ok())
    {
        return true;
    }
    // Repositories anywhere beneath (a folder of clones, `src/org/repo`),
    // breadth first, symlinks not followed; a tree larger than the scan
    // counts as holding one.
    let mut seen = 0;
    let mut todo = std::collections::VecDeque::from([dir.to_path_buf()]);
    while let Some(next) = todo.pop_front() {
        let Ok(entries) = std::fs::read_dir(&next) else {
            continue;
        };
        for entry in entries {
            seen += 1;
            if seen > REPOSITORY_SCAN {
                return true;
            }
            let Ok(entry) = entry else { continue };
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                let child = entry.path();
                if std::fs::symlink_metadata(child.join(".git")).is_ok() || is_git_dir(&child) {
                    return true;
                }
                todo.push_back(child);
            }
        }
    }
    false
}

fn protections_in(workspace: &Path, change: &Protection<'_>) -> Vec<PathBuf> {
    let keep = |name: &str| change.keeps(name);
    let mut out: Vec<PathBuf> = WORKSPACE_PROTECTED
        .iter()
        .filter(|n| keep(n))
        .map(|n| workspace.join(n))
        .collect();
    let dot_git = workspace.join(".git");
    if std::fs::symlink_metadata(&dot_git).is_ok_and(|m| !m.is_dir()) && keep(".git") {
        // A `.git` file names the git directory: rewritten, it sends the
        // user's next git command to a config and hooks the command wrote.
        out.push(dot_git);
    }
    let mut dirs = git_dirs(workspace);
    let mut nested: Vec<PathBuf> = dirs.iter().flat_map(|d| nested_git_dirs(d)).collect();
    // Submodules whose git directory lies in their working tree (cloned
    // before `.git/modules` existed, or by hand): `.gitmodules` names them,
    // and `git status` in the workspace runs git there.
    nested.extend(
        config_values(
            &workspace.join(".gitmodules"),
            |s| s.starts_with("submodule"),
            "path",
        )
        .into_iter()
        .map(|p| workspace.join(p).join(".git"))
        .filter(|g| g.is_dir()),
    );
    if keep(".git/hooks") {
        // A hooks directory the repository's config names runs as
        // `.git/hooks` would (githooks(5), core.hooksPath in git-config(1)),
        // a submodule's too (`git status` runs git there).
        let top = |d: &PathBuf| -> Option<PathBuf> {
            if dirs.contains(d) {
                return Some(workspace.to_path_buf());
            }
            // A submodule's working tree: its `core.worktree`, relative to
            // its git directory, else the directory holding its `.git`.
            match core_value(&d.join("config"), "worktree") {
                Some(w) => Some(d.join(w)),
                None => (d.file_name() == Some(std::ffi::OsStr::new(".git")))
                    .then(|| d.parent().map(Path::to_path_buf))
                    .flatten(),
            }
        };
        out.extend(dirs.iter().chain(&nested).filter_map(|d| {
            let hooks = core_value(&d.join("config"), "hookspath")?;
            let hooks = Path::new(&hooks);
            match hooks.strip_prefix("~") {
                Ok(rest) => std::env::var_os("HOME").map(|h| Path::new(&h).join(rest)),
                // Relative: to the top of the working tree, where hooks run.
                Err(_) => top(d).map(|t| t.join(hooks)),
            }
        }));
    }
    dirs.extend(nested);
    if keep(".git/config") {
        // What a config includes is config too (git-config(1), INCLUDES),
        // and so is what that includes.
        let mut todo: Vec<PathBuf> = dirs.iter().map(|d| d.join("config")).collect();
        let mut seen = std::collections::BTreeSet::new();
        while let Some(config) = todo.pop() {
            if seen.len() > 64 || !seen.insert(config.clone()) {
                continue;
            }
            let found = included(&config);
            out.extend(found.iter().cloned());
            todo.extend(found);
        }
    }
    for gitdir in dirs {
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

/// `core.<key>` (`key` lowercase) as the git config file `config` sets it
/// (the last setting wins; `include` and `includeIf` files are not
/// followed), unquoted.
fn core_value(config: &Path, key: &str) -> Option<String> {
    config_values(config, |section| section == "core", key).pop()
}

/// The files `config` includes (`include.path`, `includeIf.<cond>.path`,
/// whatever the condition), as git finds them: `~/` from `$HOME`, else
/// relative to the directory of `config`.
fn included(config: &Path) -> Vec<PathBuf> {
    let base = config.parent().unwrap_or(Path::new("/"));
    config_values(
        config,
        |section| section == "include" || section.starts_with("includeif"),
        "path",
    )
    .into_iter()
    .filter_map(|p| match p.strip_prefix("~/") {
        Some(rest) => std::env::var_os("HOME").map(|h| Path::new(&h).join(rest)),
        None => Some(base.join(p)),
    })
    .collect()
}

/// Every value of `key` (lowercase) in the sections of the git config file
/// `config` for which `section` (its lowercase header, subsection
/// included) holds, in order, unquoted.
fn config_values(config: &Path, section: impl Fn(&str) -> bool, key: &str) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(config) else {
        return Vec::new();
    };
    let mut inside = false;
    let mut found = Vec::new();
    for line in text.lines() {
        let mut line = line.trim();
        if let Some(rest) = line.strip_prefix('[') {
            let Some((head, after)) = rest.split_once(']') else {
                continue;
            };
            inside = section(&head.trim().to_ascii_lowercase());
            // `[core] hooksPath = x` on one line.
            line = after.trim();
        }
        if !inside {
            continue;
        }
        let Some((name, value)) = line.split_once('=') else {
            continue;
        };
        if !name.trim().eq_ignore_ascii_case(key) {
            continue;
        }
        let value = value.trim();
        let value = match value.strip_prefix('"') {
            Some(quoted) => quoted.split('"').next().unwrap_or(""),
            None => value.split(['#', ';']).next().unwrap_or("").trim(),
        };
        if !value.is_empty() {
            found.push(value.to_owned());
        }
    }
    found
}

/// The git directories inside `gitdir` whose config git reads for this
/// workspace: submodules (`modules/<name>`, where a name may hold slashes,
/// and their own submodules; `git status` runs git in each) and linked
/// worktrees (`worktrees/<name>`, whose `commondir` names the config).
fn nested_git_dirs(gitdir: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let path = e.path();
            if path.join("HEAD").exists() {
                if depth < NESTED_GIT_DEPTH {
                    walk(&path.join("modules"), depth + 1, out);
                }
                out.push(path);
            } else if depth < NESTED_GIT_DEPTH {
                // A submodule name with a slash: `modules/a/b`.
                walk(&path, depth + 1, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(&gitdir.join("modules"), 0, &mut out);
    if let Ok(entries) = std::fs::read_dir(gitdir.join("worktrees")) {
        out.extend(
            entries
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path()),
        );
    }
    out
}

/// What a command run in a linked worktree must write, besides the worktree
/// itself, for git to commit there: the worktree's own git directory
/// (`<common>/worktrees/<name>`: index, HEAD, its logs) and the common
/// directory's `objects`, `refs` and `logs` (gitrepository-layout(5)). The
/// common directory's `config` and `hooks` are not among them, and stay
/// protected by [`workspace_protections`].
///
/// Only a worktree git itself made qualifies: `workspace/.git` is a file
/// naming a directory directly inside `<common>/worktrees`, whose
/// `commondir` names that `<common>` and whose `gitdir` names this
/// `workspace/.git` back (as `git worktree add` writes them). A `.git` file
/// planted in a workspace can name no other directory into the grant: the
/// back-link lives in the directory it would open, so forging it needs
/// write access there already.
pub fn linked_worktree_grants(workspace: &Path) -> Vec<PathBuf> {
    let dot_git = workspace.join(".git");
    if !std::fs::symlink_metadata(&dot_git).is_ok_and(|m| m.is_file()) {
        return Vec::new();
    }
    let read = |p: &Path| std::fs::read_to_string(p).ok();
    let Some(gitdir) = read(&dot_git).and_then(|text| {
        let named = text.lines().find_map(|l| l.strip_prefix("gitdir:"))?;
        std::fs::canonicalize(workspace.join(named.trim())).ok()
    }) else {
        return Vec::new();
    };
    let Some(common) = read(&gitdir.join("commondir"))
        .and_then(|c| std::fs::canonicalize(gitdir.join(c.trim())).ok())
    else {
        return Vec::new();
    };
    let back = read(&gitdir.join("gitdir")).and_then(|b| std::fs::canonicalize(b.trim()).ok());
    let this = std::fs::canonicalize(&dot_git).ok();
    if gitdir.parent() != Some(common.join("worktrees").as_path()) || back.is_none() || back != this
    {
        return Vec::new();
    }
    std::iter::once(gitdir)
        .chain(
            ["objects", "refs", "logs"]
                .iter()
                .map(|d| common.join(d))
                .filter(|d| std::fs::symlink_metadata(d).is_ok_and(|m| m.is_dir())),
        )
        .collect()
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
    fn the_home_directory_in_the_workspace_is_protected_too() {
        let root = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(root.path()).unwrap();
        let home = root.join("home/u");
        let project = home.join("project");
        std::fs::create_dir_all(&project).unwrap();
        let none = Protection::default();
        // The workspace is the home directory, or above it: both lists there.
        for ws in [&home, &root] {
            let p = protections_with_home(ws, Some(&home), &none);
            for name in [
                ".local/bin",
                "bin",
                ".cargo/config.toml",
                ".bashrc",
                ".vimrc",
            ] {
                assert!(p.contains(&home.join(name)), "{} in {}", name, ws.display());
            }
        }
        // A project beneath the home directory: its own `bin` is a plain name.
        let p = protections_with_home(&project, Some(&home), &none);
        assert!(!p
            .iter()
            .any(|p| p.starts_with(&home) && !p.starts_with(&project)));
        assert!(!p.contains(&project.join("bin")));
        assert!(p.contains(&project.join(".bashrc")));
        // No home directory, or a relative one: the workspace list alone.
        assert_eq!(
            protections_with_home(&home, None, &none),
            protections_with_home(&home, Some(Path::new("rel")), &none)
        );
        assert!(!protections_with_home(&home, None, &none).contains(&home.join("bin")));
        // The operator's removals apply to the home entries too.
        let remove = vec!["bin".to_owned(), ".bashrc".to_owned()];
        let less = Protection {
            add: &[],
            remove: &remove,
        };
        let p = protections_with_home(&root, Some(&home), &less);
        assert!(!p.contains(&home.join("bin")) && !p.contains(&home.join(".bashrc")));
        assert!(p.contains(&home.join(".local/bin")));
    }

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
    fn what_redirects_gits_config_is_protected() {
        let ws = tempfile::tempdir().unwrap();
        let git = ws.path().join(".git");
        std::fs::create_dir_all(git.join("modules/lib/a/modules/inner")).unwrap();
        std::fs::write(git.join("modules/lib/a/HEAD"), "").unwrap();
        std::fs::write(git.join("modules/lib/a/modules/inner/HEAD"), "").unwrap();
        std::fs::create_dir_all(git.join("worktrees/wt")).unwrap();
        let p = workspace_protections(ws.path(), &Protection::default());
        for want in [
            "commondir",
            "config.worktree",
            "modules/lib/a/config",
            "modules/lib/a/hooks",
            "modules/lib/a/commondir",
            "modules/lib/a/modules/inner/config",
            "worktrees/wt/commondir",
            "worktrees/wt/config.worktree",
        ] {
            assert!(p.contains(&git.join(want)), "{want}: {p:?}");
        }
        // Twin: the rest of the git directory stays writable, and a directory
        // is not protected as a whole.
        assert!(!p.contains(&git) && !p.contains(&git.join("modules/lib/a")));
        assert!(!p.iter().any(|d| d.ends_with("description")));
    }

    #[test]
    fn a_configured_hooks_directory_is_protected() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir(ws.path().join(".git")).unwrap();
        let config = ws.path().join(".git/config");
        let none = Protection::default();
        // Twin: without core.hooksPath only .git/hooks is.
        std::fs::write(&config, "[core]\n\tbare = false\n[x]\n\thooksPath = no\n").unwrap();
        let p = workspace_protections(ws.path(), &none);
        assert!(!p.contains(&ws.path().join("no")), "{p:?}");
        for (text, want) in [
            ("[core]\n\thooksPath = .githooks\n", ".githooks"),
            ("[Core]\n  HooksPath=\"tools/hooks\" ; c\n", "tools/hooks"),
            ("[core] hookspath = .husky/_ # c\n", ".husky/_"),
            ("[core]\n\thooksPath = a\n[core]\n\thooksPath = b\n", "b"),
        ] {
            std::fs::write(&config, text).unwrap();
            let p = workspace_protections(ws.path(), &none);
            assert!(p.contains(&ws.path().join(want)), "{text}: {p:?}");
        }
        std::fs::write(&config, "[core]\n\thooksPath = /abs/hooks\n").unwrap();
        assert!(workspace_protections(ws.path(), &none).contains(&PathBuf::from("/abs/hooks")));
    }

    /// The files a repository's config includes (and what they include)
    /// are protected as the config is: git reads them as its config. Twin:
    /// a config without includes adds nothing.
    #[test]
    fn included_config_files_are_protected() {
        let ws = tempfile::tempdir().unwrap();
        let git = ws.path().join(".git");
        std::fs::create_dir(&git).unwrap();
        std::fs::write(
            git.join("config"),
            "[include]\n\tpath = ../shared.gitconfig\n[includeIf \"gitdir:/x/\"]\n\tpath = more\n",
        )
        .unwrap();
        std::fs::write(git.join("more"), "[include]\npath = /abs/third\n").unwrap();
        let p = workspace_protections(ws.path(), &Protection::default());
        for want in [
            git.join("../shared.gitconfig"),
            git.join("more"),
            PathBuf::from("/abs/third"),
        ] {
            assert!(p.contains(&want), "{want:?}: {p:?}");
        }
        std::fs::write(git.join("config"), "[core]\n\tbare = false\n").unwrap();
        let p = workspace_protections(ws.path(), &Protection::default());
        assert!(!p.iter().any(|d| d.ends_with("shared.gitconfig")), "{p:?}");
    }

    /// A submodule whose git directory lies in its working tree (named by
    /// `.gitmodules`) has its config, hooks, `core.hooksPath` and includes
    /// protected at launch. Twin: a nested repository `.gitmodules` does not
    /// name is left to the broker's rule (nothing listed for it here).
    #[test]
    fn an_in_tree_submodule_is_protected_at_launch() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::create_dir(ws.path().join(".git")).unwrap();
        std::fs::write(
            ws.path().join(".gitmodules"),
            "[submodule \"lib\"]\n\tpath = vendor/lib\n\turl = ../lib\n",
        )
        .unwrap();
        let sub = ws.path().join("vendor/lib/.git");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(
            sub.join("config"),
            "[core]\n\thooksPath = .husky\n[include]\n\tpath = ../../inc\n",
        )
        .unwrap();
        let other = ws.path().join("other/.git");
        std::fs::create_dir_all(&other).unwrap();
        let p = workspace_protections(ws.path(), &Protection::default());
        for want in [
            sub.join("config"),
            sub.join("hooks"),
            ws.path().join("vendor/lib/.husky"),
            sub.join("../../inc"),
        ] {
            assert!(p.contains(&want), "{want:?}: {p:?}");
        }
        assert!(!p.iter().any(|d| d.starts_with(&other)), "{p:?}");
    }

    /// A submodule's `core.hooksPath` is protected too, relative to its
    /// working tree (`core.worktree`): `git status` in the workspace runs
    /// git there. Twin: a submodule without one adds nothing outside its
    /// git directory.
    #[test]
    fn a_submodules_configured_hooks_directory_is_protected() {
        let ws = tempfile::tempdir().unwrap();
        let module = ws.path().join(".git/modules/lib");
        std::fs::create_dir_all(&module).unwrap();
        std::fs::write(module.join("HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(
            module.join("config"),
            "[core]\n\tworktree = ../../../vendor/lib\n\thooksPath = .githooks\n",
        )
        .unwrap();
        let p = workspace_protections(ws.path(), &Protection::default());
        assert!(
            p.contains(&module.join("../../../vendor/lib/.githooks")),
            "{p:?}"
        );
        std::fs::write(
            module.join("config"),
            "[core]\n\tworktree = ../../../vendor/lib\n",
        )
        .unwrap();
        let p = workspace_protections(ws.path(), &Protection::default());
        assert!(!p.iter().any(|d| d.ends_with(".githooks")), "{p:?}");
    }

    #[test]
    fn a_git_file_is_protected_itself() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join(".git"), "gitdir: /nowhere\n").unwrap();
        let p = workspace_protections(ws.path(), &Protection::default());
        assert!(p.contains(&ws.path().join(".git")), "{p:?}");
        // Twin: a .git directory is not denied whole.
        let repo = tempfile::tempdir().unwrap();
        std::fs::create_dir(repo.path().join(".git")).unwrap();
        let p = workspace_protections(repo.path(), &Protection::default());
        assert!(!p.contains(&repo.path().join(".git")), "{p:?}");
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
