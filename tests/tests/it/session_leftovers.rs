//! What one command of a `sandbox session` leaves for the next (#45): a
//! nested run the command started (`sandbox run` inside it, served by the
//! runner outside the zygote) must not outlive the command. Root and
//! nobody.
//!
//! The nested command ignores SIGTERM and holds a FIFO open; the next
//! command opens the FIFO for writing without blocking, which succeeds
//! only while a reader lives (fifo(7): `ENXIO` otherwise).
#![cfg(target_os = "linux")]

use std::io::{BufRead, BufReader, Write};
use std::process::Stdio;

use sandbox_tests::{sandbox, sandbox_as_nobody, sandbox_bin, shared_dir, users};
use serde_json::{json, Value};

/// Runs `commands` one after another in one session (`launch`); returns
/// each command's exit event.
pub(crate) fn session(nobody: bool, dir: &str, launch: &str, commands: &[String]) -> Vec<Value> {
    let mut cmd = if nobody {
        sandbox_as_nobody()
    } else {
        sandbox()
    };
    let mut child = cmd
        .args(["session", "--backend", "auto", "--on-unsupported", "error"])
        .args(["-w", dir, "--launch", launch])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn sandbox session");
    let mut stdin = child.stdin.take().unwrap();
    for (i, c) in commands.iter().enumerate() {
        let req =
            json!({"id": i.to_string(), "op": "run", "argv": ["/bin/sh", "-c", c], "output": true});
        writeln!(stdin, "{req}").unwrap();
    }
    writeln!(stdin, "{}", json!({"op": "close"})).unwrap();
    drop(stdin);
    let mut exits = Vec::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let event: Value = serde_json::from_str(&line.unwrap()).unwrap();
        if event["event"] == "exit" {
            exits.push(event);
        }
    }
    assert!(child.wait().unwrap().success());
    assert_eq!(exits.len(), commands.len(), "{exits:?}");
    exits
}

/// Command 0 starts a nested run that ignores SIGTERM and holds the FIFO
/// open, and exits once it is up; command 1 asks whether a reader lives.
fn nested_run_left_behind(launch: &str) {
    for nobody in users() {
        let (_tmp, dir) = shared_dir();
        let d = dir.display();
        let sb = sandbox_bin().display().to_string();
        let first = format!(
            "mkfifo {d}/fifo && {{ {sb} run -w {d} -- sh -c 'trap \"\" TERM HUP INT; \
             exec 3<>{d}/fifo; echo up > {d}/up; while :; do sleep 1; done' \
             </dev/null >/dev/null 2>&1 & }}; \
             while [ ! -e {d}/up ]; do sleep 0.05; done; exit 0"
        );
        let probe = format!(
            "python3 -c 'import os,sys\ntry:\n os.open(sys.argv[1], os.O_WRONLY|os.O_NONBLOCK)\n \
             print(\"reader alive\")\nexcept OSError as e:\n print(\"errno\", e.errno)' {d}/fifo"
        );
        // Twin: a reader in the same command is seen.
        let twin = format!(
            "exec 3<>{d}/fifo; python3 -c 'import os,sys; os.open(sys.argv[1], \
             os.O_WRONLY|os.O_NONBLOCK); print(\"reader alive\")' {d}/fifo"
        );
        let exits = session(
            nobody,
            &dir.to_string_lossy(),
            launch,
            &[first, probe, twin],
        );
        assert_eq!(exits[0]["status"], 0, "{}", exits[0]);
        assert_eq!(
            exits[1]["stdout"],
            format!("errno {}\n", libc::ENXIO),
            "{launch}, nobody {nobody}: the first command's nested run outlived it: {}",
            exits[1]
        );
        assert_eq!(exits[2]["stdout"], "reader alive\n", "twin: {}", exits[2]);
    }
}

/// Per command: the nested run ends with its outer run, before the next.
#[test]
fn a_commands_nested_run_does_not_outlive_it_per_command() {
    nested_run_left_behind("per-command");
}

/// Shared launch: the nested run is served for the zygote's run, outside
/// the zygote's process tree; it is ended when its command ends, before the
/// next command starts.
#[test]
fn a_commands_nested_run_does_not_outlive_it_shared() {
    nested_run_left_behind("shared");
}

/// What a command leaves in the zygote's tree ends before the next command
/// starts: a double-forked process deaf to SIGTERM, a stopped process, a
/// stopped orphan of a process deaf to SIGTERM, a background sleeper; each
/// holds a FIFO open, which the next command finds without a reader. Twin:
/// a reader held by the probing command itself is seen. Root and nobody,
/// on whichever launch the host gives.
#[test]
fn stopped_orphaned_and_deaf_processes_do_not_outlive_their_command() {
    for nobody in users() {
        let (_tmp, dir) = shared_dir();
        let d = dir.display();
        std::fs::write(
            dir.join("probe.py"),
            "import os,sys\nfor f in sys.argv[1:]:\n    try:\n        \
             os.open(f, os.O_WRONLY|os.O_NONBLOCK); print(f[-2:], 'reader alive')\n    \
             except OSError as e: print(f[-2:], 'errno', e.errno)\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("stop.py"),
            format!(
                "import os,signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n\
                 fd=os.open('{d}/f3', os.O_RDWR)\nif os.fork()==0:\n    \
                 os.kill(os.getpid(), signal.SIGSTOP)\nos._exit(0)\n"
            ),
        )
        .unwrap();
        let first = format!(
            "mkfifo {d}/f1 {d}/f2 {d}/f3 {d}/f4; \
             ( sh -c 'trap \"\" TERM; exec 3<>{d}/f1; while :; do sleep 1; done' & ); \
             sh -c 'exec 3<>{d}/f2; kill -STOP $$' & \
             python3 {d}/stop.py & \
             (exec 3<>{d}/f4; exec sleep 1000) & \
             until [ \"$(python3 {d}/probe.py {d}/f1 {d}/f2 {d}/f3 {d}/f4 | grep -c alive)\" = 4 ]; \
             do sleep 0.05; done"
        );
        let probe = format!("python3 {d}/probe.py {d}/f1 {d}/f2 {d}/f3 {d}/f4");
        let twin = format!("exec 3<>{d}/f1; python3 {d}/probe.py {d}/f1");
        let exits = session(
            nobody,
            &dir.to_string_lossy(),
            "shared",
            &[first, probe, twin],
        );
        assert_eq!(exits[0]["status"], 0, "{}", exits[0]);
        let none = (1..=4)
            .map(|i| format!("f{i} errno {}\n", libc::ENXIO))
            .collect::<String>();
        assert_eq!(exits[1]["stdout"], none, "nobody {nobody}: {}", exits[1]);
        assert_eq!(
            exits[2]["stdout"], "f1 reader alive\n",
            "twin: {}",
            exits[2]
        );
    }
}

/// A shared command's nested runs are in its own exit event, not the next
/// command's; twin: the next command, without any, has no `nested`. Root
/// and nobody.
#[test]
fn a_shared_commands_nested_runs_are_in_its_own_exit_event() {
    for nobody in users() {
        let (_tmp, dir) = shared_dir();
        let sb = sandbox_bin().display().to_string();
        let inner = format!("{sb} run -w {} -- sh -c 'exit 3'", dir.display());
        let exits = session(
            nobody,
            &dir.to_string_lossy(),
            "shared",
            &[inner, "true".into()],
        );
        let nested = exits[0]["nested"]
            .as_array()
            .unwrap_or_else(|| panic!("{}", exits[0]));
        assert_eq!(nested.len(), 1, "{}", exits[0]);
        assert_eq!(
            nested[0]["argv"],
            json!(["sh", "-c", "exit 3"]),
            "{}",
            exits[0]
        );
        assert_eq!(nested[0]["classification"]["class"], "task_failure");
        assert!(exits[1].get("nested").is_none(), "twin: {}", exits[1]);
    }
}

/// A sibling of the command (`clone(CLONE_PARENT)`: a child of the zygote
/// itself, not of the command), deaf to SIGTERM and holding a FIFO open,
/// is gone before the next command; the command saw its reader's parent
/// was its own (the zygote). Root and nobody.
#[test]
fn a_sibling_made_with_clone_parent_does_not_outlive_its_command() {
    for nobody in users() {
        let (_tmp, dir) = shared_dir();
        let d = dir.display();
        std::fs::write(
            dir.join("sibling.py"),
            format!(
                "import ctypes,os,signal,time\n\
                 libc=ctypes.CDLL(None,use_errno=True)\nlibc.syscall.restype=ctypes.c_long\n\
                 pid=libc.syscall({}, ctypes.c_ulong({}), ctypes.c_ulong(0), None, None, ctypes.c_ulong(0))\n\
                 if pid==0:\n    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n    \
                 fd=os.open('{d}/f1', os.O_RDWR)\n    open('{d}/up','w').write(str(os.getppid()))\n    \
                 while True: time.sleep(1)\n\
                 while not os.path.exists('{d}/up') or not open('{d}/up').read(): time.sleep(0.05)\n\
                 print(open('{d}/up').read() == str(os.getppid()))\n",
                libc::SYS_clone,
                libc::CLONE_PARENT | libc::SIGCHLD,
            ),
        )
        .unwrap();
        std::fs::write(
            dir.join("probe.py"),
            "import os,sys\ntry:\n    os.open(sys.argv[1], os.O_WRONLY|os.O_NONBLOCK); \
             print('reader alive')\nexcept OSError as e: print('errno', e.errno)\n",
        )
        .unwrap();
        let exits = session(
            nobody,
            &dir.to_string_lossy(),
            "shared",
            &[
                format!("mkfifo {d}/f1 && exec python3 {d}/sibling.py"),
                format!("python3 {d}/probe.py {d}/f1"),
                format!("exec 3<>{d}/f1; python3 {d}/probe.py {d}/f1"),
            ],
        );
        assert_eq!(exits[0]["stdout"], "True\n", "{}", exits[0]);
        assert_eq!(
            exits[1]["stdout"],
            format!("errno {}\n", libc::ENXIO),
            "nobody {nobody}: {}",
            exits[1]
        );
        assert_eq!(exits[2]["stdout"], "reader alive\n", "twin: {}", exits[2]);
    }
}
