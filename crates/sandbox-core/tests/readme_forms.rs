//! The TOML and JSON forms documented in the README parse as documented.

use std::path::Path;

use sandbox_core::{BackendChoice, OnUnsupported, SandboxConfig, SandboxedExecOp};

fn fenced(lang: &str) -> Vec<String> {
    let readme = include_str!("../../../README.md");
    let open = format!("```{lang}\n");
    readme
        .split(&open)
        .skip(1)
        .map(|rest| rest.split("```").next().unwrap_or("").to_owned())
        .collect()
}

#[test]
fn readme_toml_config_parses() {
    let blocks = fenced("toml");
    assert_eq!(blocks.len(), 1, "expected one TOML block in the README");
    let config = SandboxConfig::from_toml_str(&blocks[0], Path::new("README.md")).unwrap();
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
fn readme_json_op_parses() {
    let blocks = fenced("json");
    assert_eq!(blocks.len(), 1, "expected one JSON block in the README");
    let op = SandboxedExecOp::from_json(&blocks[0]).unwrap();
    assert_eq!(op.argv, ["python3", "analyse.py"]);
    assert!(!op.allow_subprocess);
    assert_eq!(op.timeout_seconds, Some(300));
}
