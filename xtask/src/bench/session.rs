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

    fn line(&mut self) -> Result<String, String> {
        let mut line = String::new();
        let n = self
            .events
            .read_line(&mut line)
            .map_err(|e| format!("sandbox session: {e}"))?;
        if n == 0 {
            return Err("sandbox session ended".into());
        }
        Ok(line)
    }

    fn event(&mut self) -> Result<serde_json::Value, String> {
        let line = self.line()?;
        serde_json::from_str(&line).map_err(|e| format!("not an event ({e}): {line}"))
    }

    /// Wall time from sending a run of `argv` to its exit event, in ms; a
    /// command that does not exit 0 is an error. The clock stops when the
    /// exit event's line is read: the events are parsed after (this
    /// harness is a debug build, whose JSON parsing would be timed too).
    pub(super) fn run(&mut self, argv: &[&str]) -> Result<f64, String> {
        self.next_id += 1;
        let id = self.next_id.to_string();
        // One write per request, as a harness writes a line: `writeln!` on
        // the unbuffered pipe would write each JSON token on its own, and
        // each write wakes the session.
        let mut request = serde_json::json!({"id": id, "op": "run", "argv": argv}).to_string();
        request.push('\n');
        let t = Instant::now();
        let stdin = self.stdin.as_mut().ok_or("session closed")?;
        stdin
            .write_all(request.as_bytes())
            .map_err(|e| format!("sandbox session: {e}"))?;
        let mut lines = Vec::new();
        loop {
            let line = self.line()?;
            let ms = t.elapsed().as_secs_f64() * 1000.0;
            if !line.contains("\"exit\"") {
                lines.push(line);
                continue;
            }
            lines.push(line);
            for line in &lines {
                let event: serde_json::Value = serde_json::from_str(line)
                    .map_err(|e| format!("not an event ({e}): {line}"))?;
                if event["id"] != id.as_str() || event["event"] != "exit" {
                    continue;
                }
                if event["status"] != 0 {
                    return Err(format!("session run of {argv:?} failed: {event}"));
                }
                return Ok(ms);
            }
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}
