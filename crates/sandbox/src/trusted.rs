//! What a later run trusts, kept out of every confined run's reach.
//!
//! One rule: every file, directory, name or id that a later run trusts is
//! either beyond the reach of every confined run *whatever that run's
//! environment says*, or named by something no confined run can forge or
//! predict. A run may start with a different `$HOME`, no `$HOME` at all, or
//! another `$XDG_CONFIG_HOME` than the next one; what one run protects must
//! not depend on that.
//!
//! | Trusted state | A later run trusts it to | Kept out of reach by | Attacked by |
//! |---|---|---|---|
//! | Operator config directories: `<passwd home>/.config/sandbox` (real and effective uid; the one the config is read from, [`sandbox_core::config_candidates`], whatever the environment says), `$XDG_CONFIG_HOME/sandbox`, `$HOME/.config/sandbox` (read only by a user without a usable passwd home, [`sandbox_core::home`]), `/etc/sandbox`; the approval state directories beside them (`<passwd home>/.local/state/sandbox`, the one [`state_dir`] uses; `$XDG_STATE_HOME/sandbox`, `$HOME/.local/state/sandbox`) | set its backend and bounds; grant an op's declared scope (`approvals.json`, read by `sandbox exec-op`); keep the record of what was approved | write-denied in every run whose write paths reach them, whether a config exists there or not ([`protect_trusted`]); a run is refused when a symlink it could replace lies on the way to one | `trusted_state::config_planted_without_home`, `a_config_planted_under_another_runs_xdg_config_home_is_not_read`, `config_dir_behind_a_replaceable_link`, `harness::no_confined_run_can_write_the_approvals_file` |
//! | The loaded config file (`--config`, `$SANDBOX_CONFIG`, or the one found) | be the file the operator named | refused when any entry on the way to it, a link or its target included, lies in a write path ([`check_trusted_file`]); a non-regular file or one over [`sandbox_core::MAX_CONFIG_BYTES`] is refused | `trusted_state::config_link_inside_a_write_path`, `config_fifo_and_device` |
//! | Another name of a trusted file (a hard link to the config, the cached verdict, the approvals file or the approval audit log, made before the run in a place some run may write) | nothing: no walk of the named path sees it | a trusted file must have one name (`st_nlink == 1`, [`single_name`]): the config is refused with one `sandbox:` line, the verdict is not trusted (the self-test runs and records it under a new inode), the approvals file and the audit log are refused (and a symlink at either is never followed); a confined run cannot make the link itself (Landlock refuses a link that would give the file write access it lacks: `EXDEV`) | `trusted_state::a_config_with_a_second_name_is_refused`, the unit tests `verdict::a_verdict_with_a_second_name_is_not_trusted`, `store::a_linked_approvals_file_is_refused` and `audit::a_log_with_a_hard_link_is_refused` |
//! | The self-test verdict | let it skip the self-test | kept only at `/run/user/<euid>/sandbox` (`/run/sandbox` for root; without a runtime directory `<passwd home>/.cache/sandbox`), places no environment variable moves, in a directory owned by the user that no one else may write; write-denied in every run that reaches it | `trusted_state::verdict_forged_in_a_runtime_dir`, `fail_closed::no_confined_run_can_forge_the_cached_verdict` |
//! | Per-run cgroups and their sweep | end a dead runner's survivors | named by pid, process start time and a random token; alive while that pid has that start time, so a reused pid does not keep survivors alive; a name already taken is never reused | `trusted_state::survivor_with_the_runners_pid` and the unit tests in `contain.rs` |
//! | The run's cgroups under `/sys/fs/cgroup` (containment and `--memory`/`--pids`/`--cpu`) | hold every process of the run, to its limits | write-denied in every run whose write paths reach them (`-w /`), so no process moves out or raises a limit | `limits::a_command_cannot_raise_or_leave_its_limits`, `trusted_state::cgroups_stay_out_of_reach_under_write_root` |
//! | The tool caches' directory (`<passwd home>/.cache/sandbox-tools`, which no environment variable moves, see [`crate::runner::tools_root`]; write-denied also beneath `$XDG_CACHE_HOME`/`$HOME` and each passwd home) | be given, one tool's directory at a time, as a write path, only to runs of the trust domain that filled it (`sandbox-tools/<key>/<tool>`, the key a hash of the run's write roots: [`crate::runner::CacheKey`]) | write-denied in every run whose write paths reach it, so no run swaps it (or an ancestor) for a link or makes another key's directory, and such a run gets no cache inside it; the way to it may hold no symlink, and it may not lie on a cgroup, sysfs or proc filesystem; only `sandbox-tools/<key>/<tool>` may be a write path inside it | `trusted_state::a_cache_planted_under_another_runs_cache_home_is_not_used`, `tool_caches::the_way_to_the_caches_cannot_be_redirected`, `a_cache_on_a_kernel_filesystem_is_refused`, `a_cache_planted_in_one_workspace_is_not_seen_from_another`, `a_run_that_may_write_the_caches_directory_gets_no_cache` |
//! | Every trusted directory above | hold what later runs read | a write path inside one is refused outright (one `sandbox:` line) | `trusted_state::a_write_path_inside_trusted_state_is_refused` |
//! | The outcome record (`--report`) | say what the run did | written to a temporary file of unpredictable name, renamed over the record through a directory fd opened before the run; after the run the directory is looked up by name again, and one the command put in its place takes the record only where the run could write itself (else the record goes to the first directory, wherever it now is), with one line saying so; if it still cannot be written the CLI says so in one line and keeps the command's exit status | `trusted_state::report_tmp_name_unpredictable`, `a_replaced_report_directory_does_not_hide_the_record` |
//! | The user's screen: every line the CLI prints after or around a run (the refusal summary, `--explain`, warnings, approval prompts, `check`, log events) | show what happened, in the sandbox's own words | text from the command or the file system is shown escaped ([`sandbox_core::terminal_safe`]: controls, escape sequences, line breaks, reordering marks), one printed line per line; the resolver answers a name that is no host name `FORMERR` and records it escaped | `trusted_state::refused_paths_reach_the_terminal_escaped`, `dns::a_name_that_is_no_host_name_is_malformed_and_shown_escaped`, the CLI's unit test `show::every_printer_shows_command_text_escaped_on_its_own_line` |
//!
//! The operator config and verdict are the CLI's and the facade's; the
//! write-denials are added by [`crate::runner::run`] itself, so a harness that
//! embeds the library protects them too.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::path::{Component, Path, PathBuf};

use sandbox_core::{PolicyError, ResolvedPolicy};

/// Why a run's policy would leave trusted state in the command's reach.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrustedStateError {
    /// An entry on the way to trusted state lies in a write path: the
    /// command could replace it (re-point a link, swap a directory) and so
    /// choose what a later run reads.
    #[error(
        "{what} {} is reached through {}, which lies inside a write path of this run: the \
         command could replace it and change what the next run trusts; move it out of the \
         write paths or narrow them",
        .path.display(), .entry.display()
    )]
    Reachable {
        /// What the trusted state is (`"the operator config"`, ...).
        what: &'static str,
        /// The trusted file or directory, as named.
        path: PathBuf,
        /// The entry the command could replace.
        entry: PathBuf,
    },
    /// A write path lies inside trusted state: the command could write what
    /// a later run trusts (a config, a cgroup's limits).
    #[error(
        "write path {} lies inside {}, which later runs trust (operator config, records, \
         cgroups, tool caches); a run may not write there: give a path outside it",
        .path.display(), .dir.display()
    )]
    WritePathInside {
        /// The write path.
        path: PathBuf,
        /// The trusted directory it lies in.
        dir: PathBuf,
    },
    /// A trusted file has another name: the write-denials and the walk of
    /// the way to it hold for the name the operator gave, and a run that
    /// may write where another name lies could rewrite the file through it.
    #[error(
        "{what} {} has {links} hard links, and a run that may write where another of its names \
         lies could rewrite it through that name; give it one name (copy it to a new file and \
         replace it with the copy, or remove the other names)",
        .path.display()
    )]
    HardLinked {
        /// What the trusted file is (`"the operator config"`, ...).
        what: &'static str,
        /// The file, as named.
        path: PathBuf,
        /// How many names it has (`st_nlink`).
        links: u64,
    },
    /// Adding the write-deny paths failed.
    #[error("cannot write-deny {}: {source}", .dir.display())]
    Protect {
        /// The directory that was to be write-denied.
        dir: PathBuf,
        /// Why the policy refused it.
        source: PolicyError,
    },
}

/// Every directory a later run of this user may load trusted state from or
/// keep its records in, whatever its environment: the operator config
/// directories (`$XDG_CONFIG_HOME/sandbox`, `~/.config/sandbox`) and the
/// approval audit directories (`$XDG_STATE_HOME/sandbox`,
/// `~/.local/state/sandbox`) for this process's `$HOME` and for the passwd
/// home of its real and effective user, `/etc/sandbox`, the self-test
/// cache, the tool caches' directory (see [`crate::runner::tools_root`]), and
/// (Linux) `/sys/fs/cgroup`, where the run's containment and limits live.
pub fn trusted_dirs() -> Vec<PathBuf> {
    let homes: Vec<PathBuf> = env_dir("HOME").into_iter().chain(passwd_homes()).collect();
    let mut dirs: Vec<PathBuf> = [env_dir("XDG_CONFIG_HOME"), env_dir("XDG_STATE_HOME")]
        .into_iter()
        .flatten()
        .chain(homes.iter().map(|h| h.join(".config")))
        .chain(homes.iter().map(|h| h.join(".local/state")))
        .map(|base| base.join("sandbox"))
        .chain([PathBuf::from("/etc/sandbox")])
        .chain(crate::verdict::cache_dir())
        .chain(crate::caches::tools_root())
        // And where this process's environment would put them: a user
        // without a usable passwd home has its caches there.
        .chain(
            env_dir("XDG_CACHE_HOME")
                .into_iter()
                .chain(env_dir("HOME").map(|h| h.join(".cache")))
                .map(|base| base.join(crate::caches::TOOLS)),
        )
        // The tool caches of the passwd homes too: a run with another
        // `$HOME` must not reach this user's.
        .chain(
            passwd_homes()
                .into_iter()
                .map(|h| h.join(".cache").join(crate::caches::TOOLS)),
        )
        .chain(cfg!(target_os = "linux").then(|| PathBuf::from("/sys/fs/cgroup")))
        .collect();
    dirs.sort();
    dirs.dedup();
    dirs
}

/// Where the approvals (`approvals.json`, the grants `sandbox exec-op`
/// trusts) and their audit log go: `.local/state/sandbox` of the user's
/// passwd home ([`sandbox_core::home::trusted_home`]), which no environment
/// variable moves: a run started without `$XDG_STATE_HOME` whose write
/// paths hold the directory this user's other runs name by it could
/// otherwise write the grants they trust. Only without a usable passwd
/// home (a known gap for such accounts, see [`sandbox_core::home`]):
/// `$XDG_STATE_HOME/sandbox`, else `$HOME/.local/state/sandbox`. Never a
/// shared directory such as `/tmp`, where another user could plant a link.
pub fn state_dir() -> Option<PathBuf> {
    sandbox_core::home::trusted_home()
        .map(|h| h.join(".local/state"))
        .or_else(|| env_dir("XDG_STATE_HOME"))
        .or_else(|| env_dir("HOME").map(|h| h.join(".local/state")))
        .map(|base| base.join("sandbox"))
}

/// An absolute directory named by the environment variable `name`.
fn env_dir(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
}

/// `policy` with every [`trusted_dirs`] directory that a write path reaches
/// write-denied (whether it exists yet or not). Refused when a symlink on the
/// way to one of them lies in a write path: the denial holds the link's
/// current target, and the command could re-point the link.
pub fn protect_trusted(
    policy: &ResolvedPolicy,
) -> Result<Cow<'_, ResolvedPolicy>, TrustedStateError> {
    if policy.write_paths().is_empty() {
        return Ok(Cow::Borrowed(policy));
    }
    let mut reached = Vec::new();
    for dir in trusted_dirs() {
        let entries = entries_on_the_way(&dir);
        if let Some(link) = entries.iter().find(|e| e.link && e.replaceable(policy)) {
            return Err(TrustedStateError::Reachable {
                what: "the trusted directory",
                path: dir,
                entry: link.path.clone(),
            });
        }
        let resolved = entries.last().map_or(dir.clone(), |e| e.path.clone());
        // Inside trusted state no write path may lie, but a tool's own
        // cache (`sandbox-tools/<key>/<tool>`), and that only where the run
        // may not write the caches' directory: a run that may could make
        // another key's directory and plant a cache for other workspaces.
        let reaches = policy.may_write(&resolved);
        let a_tool_cache = |w: &Path| {
            let key = w.parent();
            !reaches
                && dir.file_name() == Some(OsStr::new(crate::caches::TOOLS))
                && key.and_then(Path::parent) == Some(resolved.as_path())
                && key
                    .and_then(Path::file_name)
                    .and_then(OsStr::to_str)
                    .is_some_and(crate::caches::is_key_name)
                && w.file_name()
                    .and_then(OsStr::to_str)
                    .is_some_and(|n| n.parse::<sandbox_core::ToolCache>().is_ok())
        };
        if let Some(inside) = policy
            .write_paths()
            .iter()
            .find(|w| w.starts_with(&resolved) && !a_tool_cache(w))
        {
            return Err(TrustedStateError::WritePathInside {
                path: inside.clone(),
                dir: resolved,
            });
        }
        if reaches {
            reached.push(resolved);
        }
    }
    if reached.is_empty() {
        return Ok(Cow::Borrowed(policy));
    }
    let mut raw = policy.to_policy();
    raw.write_deny_paths
        .extend(reached.iter().map(|d| d.to_string_lossy().into_owned()));
    raw.resolve(&sandbox_core::ExpandContext::default())
        .map(Cow::Owned)
        .map_err(|source| TrustedStateError::Protect {
            dir: reached[0].clone(),
            source,
        })
}

/// Refuses `policy` when a run under it could change what is read at
/// `file`: an entry on the way (each directory, each link and each link's
/// target, the file itself) lies in a directory it may write, so it could be
/// replaced, or the file itself lies in a write path, so it could be
/// rewritten, or the file has another name ([`single_name`]).
pub fn check_trusted_file(
    policy: &ResolvedPolicy,
    what: &'static str,
    file: &Path,
) -> Result<(), TrustedStateError> {
    if let Ok(meta) = std::fs::metadata(file) {
        single_name(what, file, &meta)?;
    }
    let entries = entries_on_the_way(file);
    let rewritable = entries.last().filter(|e| policy.may_write(&e.path));
    match entries
        .iter()
        .find(|e| e.replaceable(policy))
        .or(rewritable)
    {
        Some(entry) => Err(TrustedStateError::Reachable {
            what,
            path: file.to_path_buf(),
            entry: entry.path.clone(),
        }),
        None => Ok(()),
    }
}

/// Refuses a trusted regular file with more than one name (`st_nlink`): a
/// hard link is another path to the same inode, which no walk of the named
/// path sees, and it may lie in a write path of this run or a later one.
/// Nothing lists an inode's other names, so one name is the only proof.
pub fn single_name(
    what: &'static str,
    file: &Path,
    meta: &std::fs::Metadata,
) -> Result<(), TrustedStateError> {
    use std::os::unix::fs::MetadataExt;
    if meta.is_file() && meta.nlink() > 1 {
        return Err(TrustedStateError::HardLinked {
            what,
            path: file.to_path_buf(),
            links: meta.nlink(),
        });
    }
    Ok(())
}

/// One directory entry a path lookup passes.
#[derive(Debug, PartialEq, Eq)]
struct Entry {
    /// The entry's canonical parent joined with its name (a link is not
    /// followed: this is the link itself).
    path: PathBuf,
    link: bool,
}

impl Entry {
    /// Whether a run under `policy` could remove, rename or replace this
    /// entry: its directory lies in a write path.
    fn replaceable(&self, policy: &ResolvedPolicy) -> bool {
        self.path.parent().is_some_and(|dir| policy.may_write(dir))
    }
}

/// The most symlinks one lookup follows (the kernel's `MAXSYMLINKS`, 40).
const MAX_LINKS: usize = 40;

/// Every entry the kernel's lookup of `path` passes, in order: each
/// component under its canonical parent, a symlink as itself followed by the
/// entries of its target. Components that do not exist are kept as named
/// (what is created there later is created under the same parent). A
/// relative `path` is taken from the current directory.
fn entries_on_the_way(path: &Path) -> Vec<Entry> {
    let start = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .unwrap_or_else(|_| PathBuf::from("/"))
            .join(path)
    };
    let mut todo: Vec<OsString> = names(&start);
    todo.reverse();
    let mut at = PathBuf::from("/");
    let mut out = Vec::new();
    let mut links = 0;
    while let Some(name) = todo.pop() {
        if name == ".." {
            at.pop();
            continue;
        }
        let entry = at.join(&name);
        match std::fs::symlink_metadata(&entry) {
            Ok(meta) if meta.file_type().is_symlink() && links < MAX_LINKS => {
                links += 1;
                let target = std::fs::read_link(&entry).unwrap_or_default();
                out.push(Entry {
                    path: entry,
                    link: true,
                });
                if target.is_absolute() {
                    at = PathBuf::from("/");
                }
                todo.extend(names(&target).into_iter().rev());
            }
            _ => {
                out.push(Entry {
                    path: entry.clone(),
                    link: false,
                });
                at = entry;
            }
        }
    }
    out
}

/// The names of `path`'s components (`.` dropped, `..` kept).
fn names(path: &Path) -> Vec<OsString> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            Component::ParentDir => Some(OsStr::new("..").to_owned()),
            _ => None,
        })
        .collect()
}

/// The passwd home directories of this process's real and effective user.
fn passwd_homes() -> Vec<PathBuf> {
    // SAFETY: getuid and geteuid have no preconditions.
    let (uid, euid) = unsafe { (libc::getuid(), libc::geteuid()) };
    let mut homes: Vec<PathBuf> = passwd_home_of(uid).into_iter().collect();
    if euid != uid {
        homes.extend(passwd_home_of(euid));
        homes.dedup();
    }
    homes
}

/// The passwd home of `uid`, looked up once per process and user.
pub(crate) fn passwd_home_of(uid: libc::uid_t) -> Option<PathBuf> {
    sandbox_core::home::passwd_home_of(uid)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn canonical_tmp() -> (tempfile::TempDir, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let p = std::fs::canonicalize(t.path()).unwrap();
        (t, p)
    }

    #[test]
    fn the_walk_names_links_and_their_targets() {
        let (_t, root) = canonical_tmp();
        std::fs::create_dir_all(root.join("real/sub")).unwrap();
        symlink(root.join("real"), root.join("abs")).unwrap();
        symlink("real/sub", root.join("rel")).unwrap();
        let walk = |p: PathBuf| {
            entries_on_the_way(&p)
                .into_iter()
                .filter_map(|e| Some((e.path.strip_prefix(&root).ok()?.to_owned(), e.link)))
                .filter(|(p, _)| !p.as_os_str().is_empty())
                .collect::<Vec<_>>()
        };
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(
            walk(root.join("abs/sub/f")),
            [
                (p("abs"), true),
                (p("real"), false),
                (p("real/sub"), false),
                (p("real/sub/f"), false)
            ]
        );
        assert_eq!(
            walk(root.join("rel/../x")),
            [
                (p("rel"), true),
                (p("real"), false),
                (p("real/sub"), false),
                (p("real/x"), false)
            ]
        );
    }

    #[test]
    fn a_link_loop_ends() {
        let (_t, root) = canonical_tmp();
        symlink("b", root.join("a")).unwrap();
        symlink("a", root.join("b")).unwrap();
        assert!(entries_on_the_way(&root.join("a/c")).len() < 3 * MAX_LINKS);
    }

    #[test]
    fn every_home_and_the_system_dir_are_trusted() {
        let dirs = trusted_dirs();
        assert!(dirs.contains(&PathBuf::from("/etc/sandbox")));
        for home in passwd_homes() {
            for sub in [".config/sandbox", ".local/state/sandbox"] {
                assert!(dirs.contains(&home.join(sub)), "{home:?} {sub}: {dirs:?}");
            }
        }
    }

    #[test]
    fn the_passwd_home_is_found() {
        // SAFETY: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        let home = passwd_home_of(euid);
        if euid == 0 {
            assert_eq!(home.as_deref(), Some(Path::new("/root")));
        }
        assert!(home.is_some_and(|h| h.is_absolute()));
    }
}
