//! The TOML and JSON forms documented in `docs/config.md` parse as
//! documented; the README stays a front page (at most 200 lines) and every
//! relative link in the README, SECURITY.md and `docs/` names a file that
//! exists (and, with `#anchor`, a heading in it).

use std::path::{Path, PathBuf};

use sandbox_core::{BackendChoice, OnUnsupported, SandboxConfig, SandboxedExecOp};

/// The reference page that holds the example config and op envelope.
const CONFIG_DOC: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/config.md"));
const README: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"));

fn fenced(doc: &str, lang: &str) -> Vec<String> {
    let open = format!("```{lang}\n");
    doc.split(&open)
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap_or("").to_owned())
        .collect()
}

#[test]
fn documented_toml_config_parses() {
    let blocks = fenced(CONFIG_DOC, "toml");
    assert_eq!(blocks.len(), 1, "expected one TOML block in docs/config.md");
    let config = SandboxConfig::from_toml_str(&blocks[0], Path::new("docs/config.md")).unwrap();
    assert_eq!(config.backend, BackendChoice::Auto);
    assert_eq!(config.on_unsupported, OnUnsupported::Error);
    let policy = config.policy.unwrap();
    assert_eq!(policy.network, Some(false));
    assert_eq!(
        policy.write_deny_paths.as_deref(),
        Some(&["{{workspace}}/.git".to_owned()][..])
    );
}

#[test]
fn documented_json_op_parses() {
    let blocks = fenced(CONFIG_DOC, "json");
    assert!(
        !blocks.is_empty(),
        "expected a JSON block in docs/config.md"
    );
    let op = SandboxedExecOp::from_json(&blocks[0]).unwrap();
    assert_eq!(op.argv, ["python3", "analyse.py"]);
    assert!(!op.allow_subprocess);
    assert_eq!(op.timeout_seconds, Some(300));
}

/// The README is a front page: what it is, the set-up commands, a CLI tour,
/// the crate map and links; the reference lives in `docs/`.
#[test]
fn readme_is_a_front_page() {
    let lines = README.lines().count();
    assert!(
        lines <= 200,
        "README.md has {lines} lines; at most 200 (move the detail to a page in docs/ and link it)"
    );
    for command in ["cargo xtask ci", "cargo xtask dist"] {
        assert!(README.contains(command), "the README names `{command}`");
    }
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// GitHub's anchor for a heading: lowercase, punctuation other than `-` and
/// `_` dropped, spaces as `-`.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Every relative link `[text](path#anchor)` in the README, SECURITY.md and
/// the pages of `docs/` names an existing file, and an anchor names one of
/// its headings (SECURITY.md points at "Known gaps").
#[test]
fn doc_links_resolve() {
    let root = workspace_root();
    let mut pages = vec![root.join("README.md"), root.join("SECURITY.md")];
    for entry in std::fs::read_dir(root.join("docs")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "md") {
            pages.push(path);
        }
    }
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for link in text.split("](").skip(1) {
            let Some(target) = link.split(')').next() else {
                continue;
            };
            if target.contains("://") || target.starts_with("mailto:") || target.contains(' ') {
                continue;
            }
            let (file, fragment) = match target.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (target, None),
            };
            let file = if file.is_empty() {
                page.clone()
            } else {
                page.parent().unwrap().join(file)
            };
            let Ok(linked) = std::fs::read_to_string(&file) else {
                if !file.is_dir() {
                    broken.push(format!("{}: {target}", page.display()));
                }
                continue;
            };
            if let Some(fragment) = fragment {
                let found = linked
                    .lines()
                    .filter_map(|l| l.strip_prefix('#'))
                    .map(|h| anchor(h.trim_start_matches('#')))
                    .any(|a| a == fragment);
                if !found {
                    broken.push(format!("{}: {target} (no such heading)", page.display()));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}
