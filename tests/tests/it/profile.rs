//! The Seatbelt profile `sandbox profile` prints is the one `sandbox run`
//! applies: the same inputs, the private TMPDIR of workspace-write included.

use sandbox_tests::sandbox;

#[test]
fn the_printed_profile_has_the_runs_private_tmpdir() {
    let ws = tempfile::tempdir().unwrap();
    let out = sandbox()
        .args([
            "profile",
            "--json",
            "--mode",
            "workspace-write",
            "--workspace",
        ])
        .arg(ws.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let params = v["params"].as_array().unwrap();
    let writes: Vec<&str> = params
        .iter()
        .filter(|p| p[0].as_str().unwrap().starts_with("WRITE_PATH_"))
        .map(|p| p[1].as_str().unwrap())
        // workspace-write's default tool caches, the runner's own.
        .filter(|w| !w.contains("/sandbox-tools/"))
        .collect();
    assert_eq!(
        writes.len(),
        2,
        "the workspace and the private TMPDIR: {writes:?}"
    );
    assert!(
        writes.iter().any(|w| w.contains("sandbox-tmp-")),
        "{writes:?}"
    );
    // `run` in the same mode exports that kind of directory as TMPDIR.
    let run = sandbox()
        .args(["run", "--mode", "workspace-write", "--workspace"])
        .arg(ws.path())
        .args([
            "--",
            "/bin/sh",
            "-c",
            "echo $TMPDIR; echo x > \"$TMPDIR/f\" && cat \"$TMPDIR/f\"",
        ])
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let stdout = String::from_utf8_lossy(&run.stdout).into_owned();
    assert!(stdout.contains("sandbox-tmp-"), "{stdout}");
    assert!(
        stdout.ends_with("x\n"),
        "the private TMPDIR is writable: {stdout}"
    );
    // read-only mode has no private TMPDIR in either.
    let out = sandbox()
        .args(["profile", "--json", "-w"])
        .arg(ws.path())
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(!v.to_string().contains("sandbox-tmp-"));
}
