//! The runner raises its own soft descriptor limit (`RLIMIT_NOFILE`) to the
//! hard one (its proxy connections, broker and resolver need descriptors),
//! and every command gets back the soft limit the runner started with: a
//! run's command, a session's shared and kept commands, and per-command
//! launches print with `ulimit -n` what the shell that started the runner
//! set. Root and nobody.
#![cfg(target_os = "linux")]

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sandbox_tests::sandbox_bin;

/// This process's hard `RLIMIT_NOFILE`.
fn hard_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct passed.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
        0
    );
    limit.rlim_max
}

/// `sh -c` with the soft limit set to 1000 first, then `rest` (where
/// `$RUNNER` is the CLI, as nobody when `nobody`).
fn shell(nobody: bool, rest: &str) -> Command {
    let wrap = if nobody {
        "setpriv --reuid=65534 --regid=65534 --clear-groups --"
    } else {
        ""
    };
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(format!(
            "ulimit -Sn 1000; RUNNER=\"{wrap} $SANDBOX\"; {rest}"
        ))
        .env("SANDBOX", sandbox_bin())
        .current_dir("/tmp");
    cmd
}

#[test]
fn commands_get_the_soft_descriptor_limit_the_runner_started_with() {
    let hard = hard_limit();
    assert!(hard >= 1000, "the test sets a soft limit of 1000");
    let want = format!("1000 {hard}\n");
    let print = r#"echo $(ulimit -Sn) $(ulimit -Hn)"#;
    for nobody in [false, true] {
        // Control: the runner itself runs with the soft limit raised.
        let mut runner = shell(nobody, "exec $RUNNER run -- sleep 3")
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let limits = format!("/proc/{}/limits", runner.id());
        let began = Instant::now();
        let raised = loop {
            let text = std::fs::read_to_string(&limits).unwrap_or_default();
            let line = text
                .lines()
                .find(|l| l.starts_with("Max open files"))
                .unwrap_or_default()
                .to_owned();
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.get(3) == Some(&hard.to_string().as_str())
                || began.elapsed() > Duration::from_secs(2)
            {
                break line;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(runner.wait().unwrap().code(), Some(0));
        assert!(
            raised.split_whitespace().nth(3) == Some(hard.to_string().as_str()),
            "the runner's soft limit: {raised}"
        );

        let out = shell(nobody, &format!("$RUNNER run -- sh -c '{print}'"))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            want,
            "run, nobody={nobody}"
        );

        for launch in ["shared", "per-command"] {
            let mut requests =
                format!(r#"{{"id":"1","op":"run","argv":["sh","-c","{print}"],"output":true}}"#);
            if launch == "shared" {
                requests.push_str(&format!(
                    "\n{{\"id\":\"2\",\"op\":\"run\",\"argv\":[\"sh\",\"-c\",\"{print}; sleep 1 &\"],\"output\":true,\"keep\":true}}"
                ));
            }
            requests.push_str("\n{\"op\":\"close\"}");
            let out = shell(
                nobody,
                &format!("printf '%s\\n' '{requests}' | $RUNNER session --launch {launch}"),
            )
            .output()
            .unwrap();
            let text = String::from_utf8_lossy(&out.stdout);
            let exits: Vec<serde_json::Value> = text
                .lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter(|e| e["event"] == "exit")
                .collect();
            let expected = if launch == "shared" { 2 } else { 1 };
            assert_eq!(exits.len(), expected, "{launch}: {text}");
            for exit in exits {
                assert_eq!(
                    exit["stdout"],
                    want.as_str(),
                    "{launch}, nobody={nobody}: {exit}"
                );
            }
        }
    }
}

/// #44: a runner out of file descriptors (its hard and soft
/// `RLIMIT_NOFILE` 64, set before exec so the CLI cannot raise it) while
/// 100 of the command's writers wait in brokered opens of a FIFO without a
/// reader: the broker cannot read the callers' arguments (`EMFILE`), those
/// calls fail with it, and the run says on stderr, and its record counts,
/// that the runner ran out of file descriptors (no refusal: the policy
/// refused nothing). Twin: the same run under the usual limit says nothing
/// of it and its record has no count. Root and nobody.
#[test]
fn a_runner_out_of_descriptors_says_so() {
    use std::os::unix::process::CommandExt;
    for nobody in sandbox_tests::users() {
        for low in [true, false] {
            let (_dir, ws) = sandbox_tests::shared_dir();
            let report = ws.join("report.json");
            let mut cmd = if nobody {
                sandbox_tests::sandbox_as_nobody()
            } else {
                sandbox_tests::sandbox()
            };
            cmd.args(["run", "--mode", "workspace-write", "--no-default-caches"])
                .arg("--workspace")
                .arg(&ws)
                .arg("--report")
                .arg(&report)
                .args([
                    "--",
                    "sh",
                    "-c",
                    "cd \"$0\" && mkfifo p && i=0 && while [ $i -lt 100 ]; do \
                     (echo x > p) & i=$((i+1)); done; sleep 1; echo done",
                ])
                .arg(&ws);
            if low {
                // SAFETY: setrlimit is async-signal-safe; it only sets this
                // child's limit before exec.
                unsafe {
                    cmd.pre_exec(|| {
                        let limit = libc::rlimit {
                            rlim_cur: 64,
                            rlim_max: 64,
                        };
                        if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                        Ok(())
                    });
                }
            }
            let out = cmd.output().unwrap();
            let stderr = sandbox_tests::stderr(&out);
            let what = format!("nobody={nobody} low={low}: {stderr}");
            assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n", "{what}");
            let record: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
            let counted = &record["mediation"]["runner_out_of_fds"];
            let said = stderr.lines().find(|l| {
                l.starts_with("sandbox: the runner ran out of file descriptors; ")
                    && l.contains(" of the command failed with EMFILE")
            });
            if low {
                assert!(counted.as_u64().is_some_and(|n| n > 0), "{what} {record}");
                let said = said.unwrap_or_else(|| panic!("not said: {what}"));
                assert!(
                    said.contains(&format!("; {counted} call")),
                    "{said} vs {counted}"
                );
                // No refusal was recorded for it (the callers' paths were
                // not resolved either: the runner's EMFILE, no refusal).
                assert_eq!(record["classification"]["class"], "ok", "{record}");
                let refused = record["mediation"]["refused"].as_array().unwrap();
                assert!(
                    !refused.iter().any(|r| r["reason"]
                        .as_str()
                        .is_some_and(|why| why.contains("errno 24"))),
                    "{what} {record}"
                );
            } else {
                assert!(counted.is_null(), "{what} {record}");
                assert!(said.is_none(), "{what}");
                assert!(!stderr.contains("file descriptors"), "{what}");
            }
        }
    }
}

/// Fills the run's proxy with tunnels to `argv[1]` until one is refused,
/// prints how many it held, and holds them until the file `argv[2]` exists
/// (60 s at most).
const HOLD_TUNNELS_PY: &str = r#"
import os, socket, sys, time
proxy = os.environ["HTTPS_PROXY"].rsplit("/", 1)[1]; ph, pp = proxy.rsplit(":", 1)
held = []
for i in range(1000):
    try:
        s = socket.create_connection((ph, int(pp)), timeout=10)
        s.sendall(b"CONNECT %s HTTP/1.1\r\n\r\n" % sys.argv[1].encode())
        if not s.recv(100).startswith(b"HTTP/1.1 200"): break
    except OSError:
        break
    held.append(s)
print(len(held), flush=True)
end = time.time() + 60
while not os.path.exists(sys.argv[2]) and time.time() < end: time.sleep(0.05)
"#;

/// A direct connect the policy refuses: prints the errno's name.
const REFUSED_CONNECT_PY: &str = r#"
import errno, socket
try:
    socket.create_connection(("10.9.9.9", 80), timeout=10); print("connected")
except OSError as e:
    print(errno.errorcode.get(e.errno, e.errno))
"#;

/// A runner whose descriptor limit is 1024 (hard and soft, set before it
/// starts) hosts a kept command holding as many tunnels to a silent
/// upstream as its proxy serves, and the next command fills its own proxy
/// too, then connects where the policy refuses: the connect fails
/// `ECONNREFUSED` and is recorded as a refusal, and a write in the write
/// path works (all the runner's proxies share one budget of connections,
/// which leaves descriptors to its broker; before, each egress took up to
/// 96 tunnels of 8 descriptors and the two ran the runner out: `EMFILE`,
/// no refusal); the connection its proxy closed on accept is in its
/// summary as the proxy's bound. Twin: the same command without the kept
/// flood. Root and nobody.
#[test]
fn a_kept_commands_tunnels_leave_the_next_commands_refusal_recorded() {
    use crate::private_net::LOOPBACK_UP;
    use crate::session_ns::{events_of, namespace_dir, next_event, unshare, EVENT_WAIT, SVC_IP};
    use serde_json::{json, Value};
    use std::io::Write;
    for nobody in sandbox_tests::users() {
        for flood in [true, false] {
            let what = format!("nobody={nobody} flood={flood}");
            let (_dir, d, wrap) = namespace_dir(nobody);
            std::fs::write(d.join("hold.py"), HOLD_TUNNELS_PY).unwrap();
            std::fs::write(d.join("refused.py"), REFUSED_CONNECT_PY).unwrap();
            let setup = format!(
                r#"set -e
mount --bind "$D/hosts" /etc/hosts
{LOOPBACK_UP}
ip route add local {SVC_IP}/32 dev lo
python3 -c '
import signal, socket
signal.alarm(120)
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("{SVC_IP}", 9000)); s.listen(1024); held = []
open("'"$D"'/silent-listening", "w").close()
while True: held.append(s.accept()[0])
' > /dev/null 2>&1 < /dev/null &
echo $! > "$D/silent.pid"
for i in $(seq 200); do [ -e "$D/silent-listening" ] && break; sleep 0.05; done
ulimit -Sn 1024; ulimit -Hn 1024
exec $WRAP "$SANDBOX" session --backend auto --on-unsupported error -w "$D" --allow-net svc.example.com:9000"#
            );
            let mut child = unshare(&setup, &[], wrap, &d, &[], &[]).spawn().unwrap();
            let mut stdin = child.stdin.take().unwrap();
            let events = events_of(child.stdout.take().unwrap());
            let hello = next_event(&events, EVENT_WAIT);
            assert_eq!(hello["event"], "hello", "{what} {hello}");
            let mut send = |request: Value| {
                stdin.write_all(format!("{request}\n").as_bytes()).unwrap();
                stdin.flush().unwrap();
            };
            let until_exit = |id: &str| loop {
                let e = next_event(&events, EVENT_WAIT);
                if e["id"] == id && e["event"] == "exit" {
                    break e;
                }
            };
            let go = d.join("go");
            let held = d.join("held.out");
            if flood {
                let script = format!(
                    "python3 hold.py svc.example.com:9000 {} > {} & \
                     while [ ! -s {} ]; do sleep 0.1; done",
                    go.display(),
                    held.display(),
                    held.display()
                );
                send(
                    json!({"id": "K", "op": "run", "argv": ["/bin/sh", "-c", script], "keep": true}),
                );
                let kept = until_exit("K");
                assert_eq!(kept["kept"], 1, "{what} {kept}");
                let n: usize = std::fs::read_to_string(&held)
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap();
                // Control: the kept command held tunnels (as many as its
                // share of the budget: the next command's proxy is full).
                assert!(n >= 16, "{what}: {n} tunnels");
            }
            let script = format!(
                "python3 hold.py svc.example.com:9000 {} > next.out & \
                 while [ ! -s next.out ]; do sleep 0.1; done; \
                 python3 refused.py; echo x > written; cat written",
                go.display()
            );
            send(
                json!({"id": "next", "op": "run", "argv": ["/bin/sh", "-c", script], "output": true}),
            );
            let next = until_exit("next");
            std::fs::write(&go, "").unwrap();
            assert_eq!(next["stdout"], "ECONNREFUSED\nx\n", "{what} {next}");
            let refusals = next["refusals"].as_array().unwrap();
            assert!(
                refusals.iter().any(|r| r["target"] == "10.9.9.9:80"),
                "{what} {next}"
            );
            // No runner EMFILE; the one connection its proxy closed on
            // accept (which ended hold.py's loop) is said, as the proxy's
            // bound, not a refusal.
            assert_eq!(
                next["summary"],
                json!([
                    "sandbox: the egress proxy closed 1 connection on accept (its connection \
                     limit or the runner's descriptor budget was reached: open fewer at once, \
                     or raise the runner's ulimit -n) (its own bounds, not refusals)"
                ]),
                "{what} {next}"
            );
            send(json!({"op": "close"}));
            drop(stdin);
            let _ = child.wait();
            crate::session_ns::kill_pids(&d, &["silent.pid"]);
        }
    }
}
