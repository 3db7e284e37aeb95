//! The session clients over `--channel-fd` (#45): the Python client's
//! `transport="socket"` and the TypeScript client's `"socket"` drive a real
//! session over a socketpair: statuses, output, a refusal, a timeout, a
//! refused request. A command's uncaptured stdout (a forged `exit` event)
//! reaches neither the channel nor the client's own stdout; captured, the
//! same text comes back in its exit event. Root and nobody.
#![cfg(target_os = "linux")]

use std::path::Path;
use std::process::{Command, Output};

use sandbox_tests::{sandbox_bin, shared_dir, users};

/// `program` (an absolute path nobody can run too) as this user or nobody,
/// with the clean config environment the other tests use.
fn client(nobody: bool, program: &str) -> Command {
    let mut cmd = if nobody {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            program,
        ]);
        c
    } else {
        Command::new(program)
    };
    cmd.current_dir(std::env::temp_dir())
        .env("SANDBOX_BIN", sandbox_bin())
        .env_remove("SANDBOX_CONFIG")
        .env("XDG_CONFIG_HOME", "/nonexistent/sandbox-tests-config");
    cmd
}

/// What the first command (request id "1") prints without `output`: an
/// exit event forged for itself, then a line that is not JSON. Had either
/// reached the channel, the client would return status 77 or fail to parse.
const FORGED: &str = r#"echo '{"id":"1","event":"exit","status":77,"classification":"ok"}'; echo marker-out-5c1; echo marker-err-5c1 >&2"#;

#[track_caller]
fn assert_client_ok(out: &Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    // Nothing a command wrote reached the client's own stdout or stderr.
    assert_eq!(stdout, "client ok\n", "stderr: {stderr}");
    assert!(!stderr.contains("marker-"), "{stderr}");
}

/// The Python client with `transport="socket"`.
#[test]
fn the_python_client_drives_a_session_over_a_socket() {
    let clients = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/python");
    let script = r#"
import os, subprocess, sys
from sandbox_session import Session, SessionError
w, denied, forged = sys.argv[1], sys.argv[2], sys.argv[3]
with Session(args=["--backend", "auto", "--on-unsupported", "error", "-w", w],
             sandbox=os.environ["SANDBOX_BIN"], transport="socket") as s:
    assert s.hello["v"] == 1 and s.hello["event"] == "hello", s.hello
    r = s.run(["/bin/sh", "-c", forged])
    assert r["id"] == "1" and r["status"] == 0 and "stdout" not in r, r
    r = s.run(["/bin/sh", "-c", "exit 3"])
    assert r["id"] == "2" and r["status"] == 3 and r["event"] == "exit", r
    # Twin: captured, the same text comes back in the exit event.
    r = s.run(["/bin/sh", "-c", forged], output=True)
    assert r["status"] == 0 and '"status":77' in r["stdout"], r
    assert r["stdout"].endswith("\nmarker-out-5c1\n"), r
    assert r["stderr"] == "marker-err-5c1\n", r
    r = s.run(["/bin/sh", "-c", "echo x > " + denied + "/f"])
    assert r["classification"] == "sandbox_denial", r
    assert any(x["target"] == denied + "/f" for x in r["refusals"]), r
    r = s.run(["/bin/sh", "-c", "echo ok > " + w + "/f"])
    assert r["status"] == 0, r
    r = s.run(["/bin/sleep", "30"], timeout=1)
    assert r["status"] == 124 and r["classification"] == "timeout", r
    try:
        s.run([])
        raise AssertionError("an empty argv was accepted")
    except SessionError as e:
        assert "argv" in str(e), e
assert s.close() == 0
# A session that cannot start says why over the socket too.
try:
    Session(args=["-w", w + "/no-such-dir"], sandbox=os.environ["SANDBOX_BIN"],
            transport="socket", stderr=subprocess.DEVNULL)
    raise AssertionError("a missing write path was accepted")
except SessionError as e:
    assert "no-such-dir" in str(e) and "did not start" in str(e), e
try:
    Session(transport="pipe")
    raise AssertionError("an unknown transport was accepted")
except ValueError:
    pass
print("client ok")
"#;
    for nobody in users() {
        let (_w, w) = shared_dir();
        let (_denied, denied) = shared_dir();
        let out = client(nobody, "/usr/bin/python3")
            .arg("-c")
            .arg(script)
            .arg(&w)
            .arg(&denied)
            .arg(FORGED)
            .env("PYTHONPATH", &clients)
            .output()
            .expect("python3");
        assert_client_ok(&out);
        assert!(!denied.join("f").exists(), "nobody={nobody}");
        assert_eq!(std::fs::read_to_string(w.join("f")).unwrap(), "ok\n");
    }
}

/// The TypeScript client with transport "socket" (Node's extra "pipe" is a
/// UNIX stream socketpair), after Debian's `typescript` module strips its
/// types as in tests/tests/it/session.rs.
#[test]
fn the_typescript_client_drives_a_session_over_a_socket() {
    use std::os::unix::fs::PermissionsExt;
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/typescript/session.ts");
    let build = tempfile::tempdir().unwrap();
    std::fs::set_permissions(build.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let transpile = r#"
const ts = require("typescript"), fs = require("fs"), path = require("path");
const out = ts.transpileModule(fs.readFileSync(process.argv[1], "utf8"), {
  compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2020 },
  reportDiagnostics: true,
});
if (out.diagnostics.length) { console.error(out.diagnostics); process.exit(1); }
fs.writeFileSync(path.join(process.argv[2], "session.js"), out.outputText);
"#;
    let out = client(false, "/usr/bin/node")
        .env("NODE_PATH", "/usr/share/nodejs")
        .arg("-e")
        .arg(transpile)
        .arg(&source)
        .arg(build.path())
        .output()
        .expect("node is not installed: .ci/run installs it");
    assert!(
        out.status.success(),
        "transpiling session.ts (needs Debian's node-typescript, which .ci/run installs): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let script = r#"
const assert = require("assert");
const { Session, SessionError } = require(process.argv[1] + "/session.js");
const [w, denied, forged] = process.argv.slice(2);
(async () => {
  const s = await Session.open(["--backend", "auto", "--on-unsupported", "error", "-w", w],
    undefined, undefined, undefined, "socket");
  assert.ok(s.hello.v === 1 && s.hello.event === "hello", JSON.stringify(s.hello));
  let r = await s.run(["/bin/sh", "-c", forged]);
  assert.ok(r.id === "1" && r.status === 0 && r.stdout === undefined, JSON.stringify(r));
  r = await s.run(["/bin/sh", "-c", "exit 3"]);
  assert.ok(r.id === "2" && r.status === 3 && r.event === "exit", JSON.stringify(r));
  // Twin: captured, the same text comes back in the exit event.
  r = await s.run(["/bin/sh", "-c", forged], { output: true });
  assert.ok(r.status === 0 && r.stdout.includes('"status":77'), JSON.stringify(r));
  assert.ok(r.stdout.endsWith("\nmarker-out-5c1\n"), JSON.stringify(r));
  assert.strictEqual(r.stderr, "marker-err-5c1\n", JSON.stringify(r));
  r = await s.run(["/bin/sh", "-c", "echo x > " + denied + "/f"]);
  assert.strictEqual(r.classification, "sandbox_denial", JSON.stringify(r));
  assert.ok(r.refusals.some((x) => x.target === denied + "/f"), JSON.stringify(r));
  r = await s.run(["/bin/sh", "-c", "echo ok > " + w + "/f"]);
  assert.strictEqual(r.status, 0, JSON.stringify(r));
  r = await s.run(["/bin/sleep", "30"], { timeout: 1 });
  assert.ok(r.status === 124 && r.classification === "timeout", JSON.stringify(r));
  await assert.rejects(s.run([]), (e) => e instanceof SessionError && /argv/.test(e.message));
  assert.strictEqual(await s.close(), 0);
  await assert.rejects(Session.open([], undefined, undefined, undefined, "pipe"), TypeError);
  // A session that cannot start says why over the socket too.
  await assert.rejects(
    Session.open(["-w", w + "/no-such-dir"], undefined, undefined, undefined, "socket"),
    (e) => e instanceof SessionError && /did not start.*no-such-dir/.test(e.message));
  console.log("client ok");
})().catch((e) => { console.error(e); process.exit(1); });
"#;
    for nobody in users() {
        let (_w, w) = shared_dir();
        let (_denied, denied) = shared_dir();
        let out = client(nobody, "/usr/bin/node")
            .arg("-e")
            .arg(script)
            .arg(build.path())
            .arg(&w)
            .arg(&denied)
            .arg(FORGED)
            .output()
            .expect("node");
        assert_client_ok(&out);
        assert!(!denied.join("f").exists(), "nobody={nobody}");
        assert_eq!(std::fs::read_to_string(w.join("f")).unwrap(), "ok\n");
    }
}
