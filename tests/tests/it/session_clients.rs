//! The Python and TypeScript session clients against a scripted session
//! (a stand-in `sandbox` that speaks schema v1): a `refused` event reaches
//! `on_refused`/`onRefused` before the run returns, and events a client
//! does not know (a future kind, one without an id) are skipped, with or
//! without the callback. No sandbox is involved: the real session's events
//! are tested in tests/tests/it/session.rs.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A stand-in `sandbox session`: `hello`, then for each `run` a `refused`
/// event, an event of an unknown kind, an event without an id and the
/// `exit` event (listing the refusal); `close` ends it with status 0.
const FAKE_SESSION: &str = r#"#!/usr/bin/env python3
import json, sys
def say(e):
    sys.stdout.write(json.dumps(e) + "\n")
    sys.stdout.flush()
say({"event": "hello", "v": 1})
for line in sys.stdin:
    req = json.loads(line)
    if req.get("op") == "close":
        sys.exit(0)
    if req.get("op") == "run":
        r = {"syscall": "openat", "target": "/etc/x", "reason": "outside the write paths",
             "outside_write_paths": True}
        say({"id": req["id"], "event": "refused", **r})
        say({"id": req["id"], "event": "some_future_kind", "n": 1})
        say({"event": "notice_without_id"})
        say({"id": req["id"], "event": "exit", "status": 1, "classification": "sandbox_denial",
             "timed_out": False, "duration_ms": 1, "refusals": [r]})
"#;

fn fake_session(dir: &Path) -> PathBuf {
    let bin = dir.join("sandbox");
    sandbox_tests::write_for_exec(&bin, FAKE_SESSION);
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

/// Python: the callback sees the `refused` event (once per run, before
/// `run` returns); a raising callback and no callback both still return the
/// exit event.
#[test]
fn the_python_client_hands_refused_events_over_and_skips_unknown_ones() {
    let clients = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/python");
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_session(dir.path());
    let script = r#"
import sys
from sandbox_session import Session
seen = []
with Session(sandbox=sys.argv[1], on_refused=seen.append) as s:
    r = s.run(["x"])
    assert r["event"] == "exit" and r["status"] == 1, r
    assert len(seen) == 1 and seen[0]["event"] == "refused", seen
    assert seen[0]["target"] == "/etc/x" and seen[0]["id"] == r["id"], seen
    r = s.run(["y"])
    assert len(seen) == 2 and r["status"] == 1, (seen, r)
def boom(e):
    raise RuntimeError("callback failed")
with Session(sandbox=sys.argv[1], on_refused=boom) as s:
    assert s.run(["x"])["status"] == 1
with Session(sandbox=sys.argv[1]) as s:
    assert s.run(["x"])["status"] == 1
    assert s.run(["y"])["refusals"][0]["target"] == "/etc/x"
print("client ok")
"#;
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(script)
        .arg(&bin)
        .env("PYTHONPATH", &clients)
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "client ok\n");
}

/// TypeScript: as the Python test (Debian's node-typescript strips the
/// types, as in tests/tests/it/session.rs).
#[test]
fn the_typescript_client_hands_refused_events_over_and_skips_unknown_ones() {
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("../clients/typescript/session.ts");
    let dir = tempfile::tempdir().unwrap();
    let bin = fake_session(dir.path());
    let build = tempfile::tempdir().unwrap();
    let transpile = r#"
const ts = require("typescript"), fs = require("fs"), path = require("path");
const out = ts.transpileModule(fs.readFileSync(process.argv[1], "utf8"), {
  compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2020 },
  reportDiagnostics: true,
});
if (out.diagnostics.length) { console.error(out.diagnostics); process.exit(1); }
fs.writeFileSync(path.join(process.argv[2], "session.js"), out.outputText);
"#;
    let node = |args: &[&std::ffi::OsStr]| {
        std::process::Command::new("node")
            .args(args)
            .env("NODE_PATH", "/usr/share/nodejs")
            .output()
            .expect("node is not installed: .ci/run installs it")
    };
    let out = node(&[
        "-e".as_ref(),
        transpile.as_ref(),
        client.as_os_str(),
        build.path().as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "transpiling session.ts: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let script = r#"
const assert = require("assert");
const { Session } = require(process.argv[1] + "/session.js");
const bin = process.argv[2];
(async () => {
  const seen = [];
  let s = await Session.open([], bin, undefined, (e) => seen.push(e));
  let r = await s.run(["x"]);
  assert.ok(r.event === "exit" && r.status === 1, JSON.stringify(r));
  assert.ok(seen.length === 1 && seen[0].event === "refused", JSON.stringify(seen));
  assert.ok(seen[0].target === "/etc/x" && seen[0].id === r.id, JSON.stringify(seen));
  r = await s.run(["y"]);
  assert.ok(seen.length === 2 && r.status === 1, JSON.stringify(seen));
  assert.strictEqual(await s.close(), 0);
  s = await Session.open([], bin, undefined, () => { throw new Error("callback failed"); });
  assert.strictEqual((await s.run(["x"])).status, 1);
  assert.strictEqual(await s.close(), 0);
  s = await Session.open([], bin);
  assert.strictEqual((await s.run(["x"])).status, 1);
  assert.strictEqual(await s.close(), 0);
  console.log("client ok");
})().catch((e) => { console.error(e); process.exit(1); });
"#;
    let out = node(&[
        "-e".as_ref(),
        script.as_ref(),
        build.path().as_os_str(),
        bin.as_os_str(),
    ]);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "client ok\n");
}
