//! A `sandbox session` held open by the bench (#45): each call sends one
//! `run` request and times it until its exit event.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Instant;

pub(super) struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    events: BufReader<ChildStdout>,
    next_id: u64,
}

impl Session {
    /// Starts `cmd` (a `sandbox session ...` command) and reads its hello.
    pub(super) fn open(cmd: &mut Command) -> Result<Self, String> {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("sandbox session: {e}"))?;
        let stdin = child.stdin.take();
        let events = BufReader::new(child.stdout.take().ok_or("no stdout")?);
        let mut s = Session {
            child,
            stdin,
            events,
            next_id: 0,
        };
        let hello = s.event()?;
        if hello["event"] != "hello" {
            return Err(format!("sandbox session did not start: {hello}"));
        }
        Ok(s)
    }

    fn event(&mut self) -> Result<serde_json::Value, String> {
        let mut line = String::new();
        let n = self
            .events
            .read_line(&mut line)
            .map_err(|e| format!("sandbox session: {e}"))?;
        if n == 0 {
            return Err("sandbox session ended".into());
        }
        serde_json::from_str(&line).map_err(|e| format!("not an event ({e}): {line}"))
    }

    /// Wall time from sending a run of `argv` to its exit event, in ms; a
    /// command that does not exit 0 is an error.
    pub(super) fn run(&mut self, argv: &[&str]) -> Result<f64, String> {
        self.next_id += 1;
        let id = self.next_id.to_string();
        let request = serde_json::json!({"id": id, "op": "run", "argv": argv});
        let t = Instant::now();
        let stdin = self.stdin.as_mut().ok_or("session closed")?;
        writeln!(stdin, "{request}").map_err(|e| format!("sandbox session: {e}"))?;
        stdin.flush().map_err(|e| e.to_string())?;
        loop {
            let event = self.event()?;
            if event["id"] != id.as_str() || event["event"] == "started" {
                continue;
            }
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            if event["event"] != "exit" || event["status"] != 0 {
                return Err(format!("session run of {argv:?} failed: {event}"));
            }
            return Ok(ms);
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}
