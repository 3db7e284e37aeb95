//! Human-readable output: the `--explain` summary and report levels.

use sandbox::runner::Outcome;

/// Writes `line` on stderr as one line: text from the command or the file
/// system in it is shown escaped ([`sandbox::runner::terminal_safe`]). On a
/// terminal the write is bounded ([`bounded`]).
pub(crate) fn say(line: &str) {
    let line = format!("{}\n", sandbox::runner::terminal_safe(line));
    if !bounded::write(libc::STDERR_FILENO, line.as_bytes()) {
        eprint!("{line}");
    }
}

/// Writes `line` on stdout as one line, escaped as [`say`] does, bounded
/// on a terminal as [`say`] is.
pub(crate) fn out(line: &str) {
    let line = format!("{}\n", sandbox::runner::terminal_safe(line));
    if !bounded::write(libc::STDOUT_FILENO, line.as_bytes()) {
        print!("{line}");
    }
}

/// Writes to a terminal that never hold the runner (red team R6a F1): a
/// terminal whose output is stopped (Ctrl-S with `IXON`, another process's
/// `tcflow(TCOOFF)`) blocks every writer in the kernel, and the runner,
/// blocked on its summary line, would never exit with the command's
/// status. On a terminal each write is made by a thread of its own and
/// waited for [`bounded::WAIT`]; past that the line is given up, and so is
/// every later line to that fd (the runner goes on and exits; its process
/// exit ends the blocked thread). Elsewhere (pipes, files) writes block as
/// before: a reader that is slow is not a stopped terminal.
pub(crate) mod bounded {
    use std::os::fd::RawFd;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    /// How long one line may wait for a terminal.
    pub(crate) const WAIT: Duration = Duration::from_secs(2);

    /// stdin, stdout, stderr: a line to it was given up.
    static STALLED: [AtomicBool; 3] = [const { AtomicBool::new(false) }; 3];

    /// Writes `bytes` to `fd` if it is a terminal, waiting at most [`WAIT`]:
    /// `true` when handled here (written, or given up), `false` when `fd`
    /// is no terminal (the caller writes as usual).
    pub(crate) fn write(fd: RawFd, bytes: &[u8]) -> bool {
        // SAFETY: isatty only reads the fd's state.
        if unsafe { libc::isatty(fd) } != 1 {
            return false;
        }
        let stalled = usize::try_from(fd).ok().and_then(|i| STALLED.get(i));
        if stalled.is_some_and(|s| s.load(Ordering::Relaxed)) {
            return true;
        }
        // Whatever std buffered for this fd goes first (a stalled flush is
        // the rare case of a partial line printed without a newline).
        use std::io::Write;
        let _ = match fd {
            libc::STDOUT_FILENO => std::io::stdout().flush(),
            _ => std::io::stderr().flush(),
        };
        // The thread's own descriptor, close-on-exec: it may outlive this
        // call (and a re-run after approval starts a command).
        // SAFETY: F_DUPFD_CLOEXEC makes a new fd or fails.
        let own = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
        if own < 0 {
            return false;
        }
        let bytes = bytes.to_vec();
        let (done, wait) = std::sync::mpsc::sync_channel(1);
        let writer = std::thread::Builder::new()
            .name("tty-write".into())
            .spawn(move || {
                write_all(own, &bytes);
                // SAFETY: this thread's own fd.
                unsafe { libc::close(own) };
                let _ = done.send(());
            });
        if writer.is_err() {
            // SAFETY: not handed to a thread.
            unsafe { libc::close(own) };
            return false;
        }
        if wait.recv_timeout(WAIT).is_err() {
            if let Some(s) = stalled {
                s.store(true, Ordering::Relaxed);
            }
        }
        true
    }

    /// `write(2)` until all of `bytes` is written or an error other than
    /// `EINTR`.
    fn write_all(fd: RawFd, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            // SAFETY: a valid buffer of that length.
            let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
            match usize::try_from(n) {
                Ok(0) => return,
                Ok(n) => bytes = &bytes[n.min(bytes.len())..],
                Err(_)
                    if std::io::Error::last_os_error().kind()
                        == std::io::ErrorKind::Interrupted => {}
                Err(_) => return,
            }
        }
    }
}

/// The start of the Landlock backend's report line saying that refused
/// reads are recorded (`sandbox_landlock`'s `READS_RECORDED`).
const READS_RECORDED: &str = "refused reads are recorded:";

/// What the kernel refuses without a record the runner can read: named
/// after a failure the broker saw no refusal in, since it may be its
/// cause. Where refused reads are recorded (a Linux run under `--explain`
/// or `--report`), what is left: a script whose interpreter lies beneath a
/// read-deny path (the kernel opens it inside the exec); elsewhere, every
/// read beneath them.
fn unrecorded(outcome: &Outcome) -> Vec<String> {
    let Some(policy) = &outcome.policy else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let denied = policy.read_deny_paths().len();
    let reads_recorded = outcome
        .report
        .as_ref()
        .is_some_and(|r| r.details.iter().any(|d| d.starts_with(READS_RECORDED)));
    if denied > 0 && reads_recorded {
        out.push(format!(
            "  not recorded: a script whose interpreter lies beneath the {denied} read-deny \
             path(s) (`sandbox policy` lists them) is refused by the kernel (EACCES) without a \
             record; if the command failed running one, that is why"
        ));
    } else if denied > 0 {
        out.push(format!(
            "  not recorded: reads beneath the {denied} read-deny path(s) (`sandbox policy` \
             lists them) are refused by the kernel (EACCES) without a record; if the command \
             failed reading one, that is why"
        ));
    }
    // The command runs as the runner's user: root's capabilities are
    // dropped in a Landlock run (docs/enforcement.md).
    // SAFETY: geteuid has no preconditions.
    if outcome.backend == "landlock" && unsafe { libc::geteuid() } == 0 {
        out.push(ROOT_NOT_RECORDED.into());
    }
    out
}

/// What `--explain` says after a failed run as uid 0: the kernel's own
/// refusals of what root's capabilities would have allowed (never a
/// refusal of the sandbox's, so never recorded).
const ROOT_NOT_RECORDED: &str = "  not recorded: the run is uid 0 but root's capabilities \
     are dropped in it, so changing a file's owner to another user (chown, tar -x keeping \
     owners: use tar --no-same-owner) and writes or removals past a file's permissions (a \
     0444 file, rm -rf of a read-only tree) fail with EPERM or EACCES as for an ordinary \
     user; if the command failed doing one, that is why";

/// Whether `call` is a read a read-deny path refused (an open, an exec, or
/// an extended-attribute read).
fn read_denied(call: &sandbox::runner::MediatedCall) -> bool {
    call.reason.starts_with("beneath a read-deny path")
        && matches!(
            call.syscall.as_str(),
            "open"
                | "openat"
                | "execve"
                | "execveat"
                | "getxattr"
                | "lgetxattr"
                | "fgetxattr"
                | "listxattr"
                | "llistxattr"
                | "flistxattr"
        )
}

/// The `--explain` summary, a line each (printed through [`say`], so a
/// target or reason the command chose stays within its line):
/// classification, evidence and broker refusals.
pub(crate) fn explain(outcome: &Outcome) -> Vec<String> {
    let head = format!(
        "sandbox: explain: backend {}, exit {}, ",
        outcome.backend,
        outcome.exit_code()
    );
    let mut out = Vec::new();
    match &outcome.classification {
        sandbox::runner::Classification::Ok => out.push(head + "ok"),
        sandbox::runner::Classification::TaskFailure => {
            out.push(head + "the command failed on its own terms");
            out.extend(unrecorded(outcome));
        }
        sandbox::runner::Classification::Timeout => {
            out.push(head + "ended by the timeout");
            out.extend(
                timeout_summary(outcome)
                    .map(|line| format!("  {}", line.trim_start_matches("sandbox: "))),
            );
        }
        sandbox::runner::Classification::SandboxDenial { evidence } => {
            out.push(head + "the sandbox refused something:");
            out.extend(evidence.iter().map(|line| format!("  {line}")));
        }
        sandbox::runner::Classification::RunnerFailure { reason } => {
            out.push(format!("{head}runner failure: {reason}"))
        }
        sandbox::runner::Classification::LimitExceeded { detail, .. } => {
            out.push(format!("{head}stopped by a limit: {detail}"))
        }
        sandbox::runner::Classification::Cancelled { reason } => {
            out.push(format!("{head}cancelled: {reason}"))
        }
        _ => out.push(head + "unclassified"),
    }
    for l in &outcome.limits {
        out.push(format!(
            "  limit {} {}: {}",
            l.kind.flag(),
            l.requested,
            match (&l.held_by, &l.not_held) {
                (Some(by), _) => format!("held by {by}, met {} time(s)", l.hits),
                (None, why) => format!("NOT held ({})", why.as_deref().unwrap_or("unavailable")),
            }
        ));
    }
    for n in &outcome.nested {
        out.push(format!("  {}", nested_line(n)));
    }
    if outcome.omitted.nested > 0 {
        out.push(format!(
            "  {} more nested run(s) not recorded (the record keeps a bounded number of bytes)",
            outcome.omitted.nested
        ));
    }
    if let Some(m) = &outcome.mediation {
        out.push(format!(
            "  broker: {} call(s) performed for the command, {} refused{}",
            m.performed,
            m.refused.len(),
            if m.omitted > 0 {
                format!(" ({} not recorded)", m.omitted)
            } else {
                String::new()
            }
        ));
        for line in [runner_summary(outcome), egress_summary(outcome)]
            .into_iter()
            .flatten()
        {
            out.push(format!("  {}", line.trim_start_matches("sandbox: ")));
        }
        // A shell's probe of /dev/tty in a run without a controlling
        // terminal is the kernel's ENXIO, never a refusal: every refusal
        // recorded is shown, each distinct one once (a tool retrying a
        // lock), with how often.
        // Whether the run had a private $TMPDIR already (workspace-write,
        // --private-tmp): a write to /tmp itself then needs /tmp.
        let private_tmp = outcome.policy.as_ref().is_some_and(|p| {
            p.write_paths().iter().any(|w| {
                w.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("sandbox-tmp-"))
            })
        });
        let mut distinct: Vec<(&sandbox::runner::MediatedCall, usize)> = Vec::new();
        for call in &m.refused {
            match distinct.iter_mut().find(|(c, _)| {
                (&c.syscall, &c.target, &c.reason) == (&call.syscall, &call.target, &call.reason)
            }) {
                Some((_, n)) => *n += 1,
                None => distinct.push((call, 1)),
            }
        }
        if distinct.len() > 20 {
            out.push(format!(
                "    (the first 20 of {} distinct refusals; --report records them all)",
                distinct.len()
            ));
        }
        for (call, n) in distinct.into_iter().take(20) {
            out.push(format!(
                "    refused {}{}: {}{}",
                call.syscall,
                if call.target.is_empty() {
                    String::new()
                } else {
                    format!(" on {}", call.target)
                },
                refusal_reason(call),
                if n > 1 {
                    format!(" ({n} times)")
                } else {
                    String::new()
                }
            ));
            match proposal(call, private_tmp) {
                Proposal::Flag(flag) => {
                    out.push(format!("      to admit it: {flag}"));
                    if flag == "--cache cargo" {
                        out.push(CARGO_NOTE.into());
                    }
                }
                Proposal::Withheld(why) => out.push(format!("      not proposed: {why}")),
                Proposal::Unquotable(why) => out.push(format!("      not proposed: {why}")),
                Proposal::None => {}
            }
        }
        if let Some(e) = &m.error {
            out.push(format!("    broker stopped early: {e}"));
        }
    }
    if outcome.leftover_processes_ended > 0 {
        out.push(format!(
            "  ended {} leftover process(es) after the command exited (a run ends with its \
             command; for background work, a session's \"keep\")",
            outcome.leftover_processes_ended
        ));
    }
    out
}

/// The start of the reason a call the seccomp filter refused outright
/// carries (`sandbox_landlock`'s broker records it with no target).
const FILTER_REFUSED: &str = "refused by the seccomp filter";

/// The reason `call` was refused, as `--explain` and a session's events
/// say it: a filter refusal of `setsid` or `setpgid` (a run contained by
/// its process group, without a delegated cgroup) says why and what it
/// breaks; any other reason as recorded.
pub(crate) fn refusal_reason(call: &sandbox::runner::MediatedCall) -> std::borrow::Cow<'_, str> {
    if call.reason != FILTER_REFUSED || !call.target.is_empty() {
        return std::borrow::Cow::Borrowed(&call.reason);
    }
    std::borrow::Cow::Owned(match call.syscall.as_str() {
        "setsid" => format!(
            "{FILTER_REFUSED}: runs without a delegated cgroup are contained by process group, \
             which a new session would leave (git's detached auto-maintenance is one: \
             git config maintenance.auto false, or gc.autoDetach false)"
        ),
        "setpgid" => format!(
            "{FILTER_REFUSED}: runs without a delegated cgroup are contained by process group, \
             which a new process group would leave"
        ),
        _ => return std::borrow::Cow::Borrowed(&call.reason),
    })
}

/// `calls` with each reason as [`refusal_reason`] says it.
pub(crate) fn with_reasons(
    calls: &[sandbox::runner::MediatedCall],
) -> Vec<sandbox::runner::MediatedCall> {
    calls
        .iter()
        .map(|c| {
            let mut c = c.clone();
            if let std::borrow::Cow::Owned(reason) = refusal_reason(&c) {
                c.reason = reason;
            }
            c
        })
        .collect()
}

/// What a private `CARGO_HOME` changes, said beside `--cache cargo`.
const CARGO_NOTE: &str = "      note: a private CARGO_HOME starts empty: cargo downloads the \
     registry and dependencies into it once (an offline build, --offline or --no-network, \
     fails until then) and does not read ~/.cargo/config.toml or its credentials";

/// What `--explain` offers for one refusal.
pub(crate) enum Proposal {
    /// The flag that would admit it, its value one shell word
    /// ([`propose`]).
    Flag(String),
    /// Why no flag is offered: its value cannot be written as a shell word
    /// that pastes safely (a control or invisible character).
    Unquotable(String),
    /// Why no flag is offered: the approval rules forbid widening this.
    Withheld(&'static str),
    /// Nothing to say (the refusal is not one a flag changes).
    None,
}

/// The flag that would admit `call`, when the approval rules allow
/// offering one ([`crate::approval::offer`]): never a deny path or
/// protection, never a single file directly in the home directory, `/`, a
/// system directory, the home directory or one of its ancestors; a tool's
/// own cache gets `--cache TOOL`, never `-w` on the user's real cache, and
/// a new file directly in `/tmp` `--private-tmp` (`-w` of it only when the
/// run had a private `$TMPDIR` already, `private_tmp`).
/// The flag `name VALUE`, the value one shell word
/// ([`sandbox::policy::flag`], the one quoting of every proposal):
/// pasted, it runs nothing the command chose (a host name, a path, a
/// request path are the command's). A value no word carries safely is
/// not proposed: the proposal says why.
pub(crate) fn propose(name: &str, value: &str) -> Proposal {
    match sandbox::policy::flag(name, value) {
        Ok(flag) => Proposal::Flag(flag),
        Err(why) => Proposal::Unquotable(why.to_string()),
    }
}

/// [`propose`] for a path: one that is not UTF-8 is not proposed (its
/// text would name another path).
fn propose_path(name: &str, path: &std::path::Path) -> Proposal {
    match path.to_str() {
        Some(text) => propose(name, text),
        None => Proposal::Unquotable(format!(
            "{} is not UTF-8 text, which a pasted flag cannot carry exactly",
            path.display()
        )),
    }
}

fn proposal(call: &sandbox::runner::MediatedCall, private_tmp: bool) -> Proposal {
    let reason = call.reason.as_str();
    if call.outside_write_paths {
        use crate::approval::Offer;
        return match crate::approval::offer(std::path::Path::new(&call.target)) {
            Some(Offer::Write(path)) => propose_path("-w", &path),
            Some(Offer::Cache(tool)) => Proposal::Flag(format!("--cache {tool}")),
            Some(Offer::PrivateTmp) if !private_tmp => Proposal::Flag("--private-tmp".into()),
            Some(Offer::PrivateTmp) => match std::path::Path::new(&call.target).parent() {
                Some(dir) => propose_path("-w", dir),
                None => Proposal::None,
            },
            Some(Offer::Withheld(why)) => Proposal::Withheld(why),
            None => Proposal::None,
        };
    }
    if reason.starts_with("beneath a write-deny path")
        || reason.starts_with("beneath a read-deny path")
        || reason.starts_with("an ancestor of a deny path")
    {
        return Proposal::Withheld(
            "it is a deny path or a protection, which approvals never widen",
        );
    }
    match call.syscall.as_str() {
        // Names the proxy refused because no rule lists them, or only a
        // wildcard does (an exact rule reaches what the name resolves to).
        "proxy"
            if reason.starts_with("no egress rule") || reason.starts_with("only a wildcard") =>
        {
            propose("--allow-net", &call.target)
        }
        // An address where a host a request rule intercepts was found
        // (sandbox-broker connect.rs): an IP rule would reach that host
        // around the proxy's checks, so none is proposed. (A name holds no
        // space: no command-chosen name writes these words.)
        "connect"
            if reason.starts_with("no egress rule")
                && call.target.contains(" (where the intercepted host ") =>
        {
            Proposal::Withheld(
                "it is the address of a host a request rule intercepts: an --allow-net rule \
                 for the address would reach that host around the proxy's checks; send the \
                 requests through the proxy (HTTPS_PROXY), and widen the request rules (or, at \
                 a port no request rule names, add --allow-net HOST:PORT) if one was refused",
            )
        }
        "connect"
            if reason.starts_with("no egress rule")
                || reason.starts_with("the policy allows no network") =>
        {
            // The address, without the note on the name it was answered for.
            let addr = call.target.split(' ').next().unwrap_or(&call.target);
            propose("--allow-net", addr)
        }
        // A name refused at resolution: listed at any port (narrow it with
        // `:PORT`).
        "dns" if reason.starts_with("no egress rule") => propose("--allow-net", &call.target),
        "connect" if reason.starts_with("the UNIX socket lies outside") => {
            propose("--allow-unix", &call.target)
        }
        // An intercepted request: the rule the proxy proposed, read back
        // and quoted again here.
        "request" => match crate::approval::request_offer(call) {
            Some(rule) => propose("--allow-request", &rule.to_string()),
            None => match reason.split_once("(no flag proposed: ") {
                Some((_, why)) => Proposal::Unquotable(why.trim_end_matches(')').to_string()),
                None => Proposal::None,
            },
        },
        _ => Proposal::None,
    }
}

/// One line saying what the sandbox refused during the run, in the user's
/// terms, or `None` when it refused nothing or the command succeeded (a
/// refusal the command got past is noise after success: the record under
/// One line for a nested run's record ([`nested_summary`], `--explain`):
/// its command, classification, exit status and refusals. The command is
/// the nested run's own text: the caller prints the line escaped.
pub(crate) fn nested_line(n: &Outcome) -> String {
    let class = match &n.classification {
        sandbox::runner::Classification::Ok => "ok".to_owned(),
        sandbox::runner::Classification::TaskFailure => "the command failed".to_owned(),
        sandbox::runner::Classification::Timeout => "ended by the timeout".to_owned(),
        sandbox::runner::Classification::SandboxDenial { .. } => {
            "the sandbox refused something".to_owned()
        }
        sandbox::runner::Classification::RunnerFailure { reason } => {
            format!("runner failure: {reason}")
        }
        sandbox::runner::Classification::LimitExceeded { detail, .. } => {
            format!("stopped by a limit: {detail}")
        }
        sandbox::runner::Classification::Cancelled { reason } => format!("cancelled: {reason}"),
        _ => "unclassified".to_owned(),
    };
    let refused = n.mediation.as_ref().map_or(0, |m| m.refused.len());
    format!(
        "nested run `{}`: {class}, exit {}, {refused} refusal(s)",
        n.argv.join(" "),
        n.exit_code()
    )
}

/// One `sandbox:` line per nested run that did not end `ok` (its own
/// `sandbox run` printed its details; `--explain` lists every one).
pub(crate) fn nested_summary(outcome: &Outcome) -> Vec<String> {
    outcome
        .nested
        .iter()
        .filter(|n| n.classification != sandbox::runner::Classification::Ok)
        .map(|n| format!("sandbox: {}", nested_line(n)))
        .collect()
}

/// `--report` holds it, `--explain` lists it): printed on stderr after a
/// failed run or one the sandbox ended (never among the command's own
/// output), `--quiet` to leave it out. Probes of the controlling terminal
/// (`/dev/tty`, which shells open to look for job control; a run has none)
/// are the kernel's `ENXIO`, never refusals.
pub(crate) fn refusal_summary(outcome: &Outcome) -> Option<String> {
    if outcome.classification == sandbox::runner::Classification::Ok {
        return None;
    }
    let m = outcome.mediation.as_ref()?;
    let refused: Vec<&sandbox::runner::MediatedCall> = m.refused.iter().collect();
    if refused.is_empty() {
        return None;
    }
    type Calls<'a> = Vec<&'a sandbox::runner::MediatedCall>;
    let (requests, rest): (Calls<'_>, Calls<'_>) =
        refused.into_iter().partition(|c| c.syscall == "request");
    let (names, rest): (Calls<'_>, Calls<'_>) = rest.into_iter().partition(|c| c.syscall == "dns");
    let (nets, rest): (Calls<'_>, Calls<'_>) = rest
        .into_iter()
        .partition(|c| matches!(c.syscall.as_str(), "proxy" | "connect"));
    let (sockets, rest): (Calls<'_>, Calls<'_>) = rest
        .into_iter()
        .partition(|c| matches!(c.syscall.as_str(), "socket" | "listen"));
    let (reads, rest): (Calls<'_>, Calls<'_>) = rest.into_iter().partition(|c| read_denied(c));
    // Calls the filter refused outright carry no target: named by syscall.
    let (files, others): (Calls<'_>, Calls<'_>) =
        rest.into_iter().partition(|c| !c.target.is_empty());
    let mut parts = Vec::new();
    if !requests.is_empty() {
        // A client that refused the run CA's certificate sent no request.
        let untrusted = |c: &sandbox::runner::MediatedCall| {
            c.reason
                .starts_with("the client refused the run CA's certificate")
        };
        let why = if requests.iter().all(|c| untrusted(c)) {
            "whose client does not trust the run's CA"
        } else {
            "not admitted by --allow-request"
        };
        parts.push(format!(
            "{} ({} {why})",
            plural(requests.len(), "request"),
            first_targets(&requests, |c| c.target.clone())
        ));
    }
    if !nets.is_empty() {
        parts.push(format!(
            "{} ({})",
            plural(nets.len(), "connection"),
            first_targets(&nets, |c| {
                if c.syscall == "proxy" && c.reason.starts_with("not a host name") {
                    format!("{} is not a host name", c.target)
                } else if c.syscall == "proxy"
                    && c.reason
                        .starts_with("a request rule intercepts this host and port")
                {
                    // A plain http:// request to an intercepted host and port.
                    format!("{} intercepted: reached only over HTTPS", c.target)
                } else if c.syscall == "proxy" && c.reason.starts_with("its TLS ClientHello") {
                    // A tunnel to a port a request rule intercepts on some
                    // host (sandbox-proxy's sni module).
                    format!("{} whose TLS asked for another host", c.target)
                } else if c.syscall == "proxy" {
                    format!("{} not in --allow-net", c.target)
                } else {
                    c.target.clone()
                }
            })
        ));
    }
    if !names.is_empty() {
        let malformed = |c: &sandbox::runner::MediatedCall| c.reason.starts_with("not a host name");
        let intercepted = |c: &sandbox::runner::MediatedCall| {
            c.reason.starts_with("a request rule intercepts this name")
        };
        let why = if names.iter().all(|c| intercepted(c)) {
            "intercepted: reached only through the proxy"
        } else if names.len() == 1 && malformed(names[0]) {
            "is not a host name"
        } else if names.iter().all(|c| malformed(c)) {
            "are not host names"
        } else if names.iter().any(|c| malformed(c)) {
            "not in --allow-net or not host names"
        } else {
            "not in --allow-net"
        };
        parts.push(format!(
            "{} ({} {why})",
            plural(names.len(), "name lookup"),
            first_targets(&names, |c| c.target.clone())
        ));
    }
    if !sockets.is_empty() {
        parts.push(format!(
            "{} ({})",
            plural(sockets.len(), "socket call"),
            first_targets(&sockets, |c| match c.syscall.as_str() {
                "listen" => format!("listen on {}", c.target),
                _ => c.target.clone(),
            })
        ));
    }
    if !others.is_empty() {
        parts.push(format!(
            "{} ({})",
            plural(others.len(), "other call"),
            first_targets(&others, |c| c.syscall.clone())
        ));
    }
    // An open is named as one, not as a read: a writing open of a file
    // beneath a read-deny path (in a write path) is refused the same way.
    let (execs, reads): (Calls<'_>, Calls<'_>) = reads
        .into_iter()
        .partition(|c| c.syscall.starts_with("execve"));
    let (opens, xattrs): (Calls<'_>, Calls<'_>) = reads
        .into_iter()
        .partition(|c| c.syscall.starts_with("open"));
    for (calls, what) in [
        (opens, "file open"),
        (execs, "exec"),
        (xattrs, "attribute read"),
    ] {
        if !calls.is_empty() {
            parts.push(format!(
                "{} ({}: read-denied)",
                plural(calls.len(), what),
                first_targets(&calls, |c| c.target.clone()),
            ));
        }
    }
    if !files.is_empty() {
        let outside = files.iter().all(|c| c.outside_write_paths);
        let protected = files
            .iter()
            .all(|c| c.reason.starts_with("beneath a write-deny path"));
        parts.push(format!(
            "{} ({}{})",
            plural(files.len(), "file change"),
            first_targets(&files, |c| c.target.clone()),
            if outside {
                ": outside the write paths"
            } else if protected {
                ": protected"
            } else {
                ""
            }
        ));
    }
    let more = if m.omitted > 0 {
        format!(" and {} more", m.omitted)
    } else {
        String::new()
    };
    // Writes to a tool's own cache: the flag that gives the run one of its own.
    let mut tools: Vec<sandbox::policy::ToolCache> = files
        .iter()
        .filter(|c| c.outside_write_paths)
        .filter_map(
            |c| match crate::approval::offer(std::path::Path::new(&c.target)) {
                Some(crate::approval::Offer::Cache(tool)) => Some(tool),
                _ => None,
            },
        )
        .collect();
    tools.sort();
    tools.dedup();
    let caches: String = tools
        .iter()
        .map(|t| format!("; --cache {t} gives the run a {t} cache of its own"))
        .collect();
    Some(format!(
        "sandbox: refused {}{more}{caches}; --explain for details",
        parts.join(", ")
    ))
}

/// One line for a run the sandbox ended at its timeout: how long it had and
/// how to give it more (`--timeout N`, which the operator's
/// `max_timeout_seconds` bounds).
pub(crate) fn timeout_summary(outcome: &Outcome) -> Option<String> {
    if !outcome.timed_out {
        return None;
    }
    let Some(policy) = &outcome.policy else {
        return Some("sandbox: the run was ended at its timeout".into());
    };
    let (secs, ceiling) = (policy.timeout_seconds(), policy.max_timeout_seconds());
    Some(if secs < ceiling {
        format!(
            "sandbox: the run was ended at its timeout of {secs} s; give it more with \
             --timeout N (at most {ceiling} s, the operator's max_timeout_seconds)"
        )
    } else {
        format!(
            "sandbox: the run was ended at its timeout of {secs} s, the operator's ceiling \
             (max_timeout_seconds in the operator config); only the operator can raise it"
        )
    })
}

/// One line for a run that met a limit which ends or refuses processes
/// (printed, like the refusal summary, after the command ended): the
/// timeout's ([`timeout_summary`]) when it ended the run.
pub(crate) fn limit_summary(outcome: &Outcome) -> Option<String> {
    if let Some(line) = timeout_summary(outcome) {
        return Some(line);
    }
    let hit = outcome.limits.iter().find(|l| l.stopped_something())?;
    Some(match hit.kind {
        sandbox::runner::LimitKind::Memory => format!(
            "sandbox: the memory limit ({} {}) ended {}",
            hit.kind.flag(),
            hit.requested,
            plural(hit.hits as usize, "process")
        ),
        _ => format!(
            "sandbox: the process limit ({} {}) refused {}",
            hit.kind.flag(),
            hit.requested,
            plural(hit.hits as usize, "fork")
        ),
    })
}

/// One line saying the runner ran out of file descriptors serving the
/// command's calls (they failed with `EMFILE`/`ENFILE`: the runner's
/// failure, neither the policy's nor the command's), with how many.
pub(crate) fn runner_summary(outcome: &Outcome) -> Option<String> {
    let n = outcome.mediation.as_ref()?.runner_out_of_fds;
    (n > 0).then(|| {
        format!(
            "sandbox: the runner ran out of file descriptors; {} of the command failed with \
             EMFILE (a runner problem, not a refusal: raise the runner's open-file limit, \
             ulimit -n)",
            plural(n, "call")
        )
    })
}

/// One line saying the egress proxy ended connections for bounds of its
/// own (neither a rule's refusal nor the command's doing: its limits, its
/// silence cut, clients that are not the run's), with how many.
pub(crate) fn egress_summary(outcome: &Outcome) -> Option<String> {
    let m = outcome.mediation.as_ref()?;
    let mut parts = Vec::new();
    if m.egress_closed_at_limit > 0 {
        parts.push(format!(
            "closed {} on accept (its connection limit or the runner's descriptor budget was \
             reached: open fewer at once, or raise the runner's ulimit -n)",
            plural(m.egress_closed_at_limit, "connection")
        ));
    }
    if m.egress_cut_silent > 0 {
        parts.push(format!(
            "cut {} whose client had ended its side while the server then sent nothing for 30 s",
            plural(m.egress_cut_silent, "connection")
        ));
    }
    if m.egress_foreign_closed > 0 {
        parts.push(format!(
            "closed {} on accept unread, whose client was a process outside the run",
            plural(m.egress_foreign_closed, "connection")
        ));
    }
    (!parts.is_empty()).then(|| {
        format!(
            "sandbox: the egress proxy {} (its own bounds, not refusals)",
            parts.join("; ")
        )
    })
}

/// One line saying the runner ended processes the command left behind
/// when it exited (`setsid CMD`, whose parent exits at once, a daemon, a
/// `cmd &`): printed even when the run succeeded, since what they would
/// have done was not done.
pub(crate) fn leftover_summary(outcome: &Outcome) -> Option<String> {
    let n = outcome.leftover_processes_ended;
    (n > 0).then(|| {
        format!(
            "sandbox: ended {} the command left running when it exited: a run ends with its \
             command (`setsid CMD` returns at once, leaving CMD behind); for background work, \
             a session's \"keep\"",
            plural(n, "process")
        )
    })
}

/// One line after a plain Linux run that failed on its own terms as far
/// as the runner saw (`observed`: the run's writes went through the
/// broker, `--explain` or `--report`): the writes the kernel refused left
/// no record, so no refusal summary names them (`/dev/shm`, a compiler's
/// `/tmp`, `~/.npm`).
pub(crate) fn unobserved_summary(outcome: &Outcome, observed: bool) -> Option<String> {
    // A refusal the broker saw has its summary line, which points to
    // `--explain` already.
    let failed = outcome.classification == sandbox::runner::Classification::TaskFailure;
    (failed && !observed && outcome.backend == "landlock" && outcome.policy.is_some()).then(|| {
        "sandbox: writes the kernel refused are not recorded in this mode; rerun with \
         --explain to see them"
            .to_owned()
    })
}

/// One line naming the limits the run went without (allowed with
/// `--allow-unlimited` or `allow_unlimited`, because nothing here holds them).
pub(crate) fn unheld_summary(outcome: &Outcome) -> Option<String> {
    let unheld: Vec<String> = outcome
        .limits
        .iter()
        .filter(|l| l.held_by.is_none())
        .map(|l| format!("{} {}", l.kind.flag(), l.requested))
        .collect();
    (!unheld.is_empty()).then(|| {
        format!(
            "sandbox: ran without {} (nothing on this host holds it; `sandbox check` says why)",
            unheld.join(", ")
        )
    })
}

/// The `limits:` line of `sandbox check`: what holds each limit here.
pub(crate) fn limit_support(limits: &[sandbox::runner::LimitRecord]) -> String {
    limits
        .iter()
        .map(|l| match (&l.held_by, &l.not_held) {
            (Some(by), _) => format!("{} by {by}", l.kind.flag()),
            (None, why) => format!(
                "{} not available ({})",
                l.kind.flag(),
                why.as_deref().unwrap_or("unknown")
            ),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn plural(n: usize, what: &str) -> String {
    match (n, what.ends_with('s')) {
        (1, _) => format!("1 {what}"),
        (_, true) => format!("{n} {what}es"),
        _ => format!("{n} {what}s"),
    }
}

/// The first two distinct targets, then how many others.
fn first_targets(
    calls: &[&sandbox::runner::MediatedCall],
    show: impl Fn(&sandbox::runner::MediatedCall) -> String,
) -> String {
    let mut seen: Vec<String> = Vec::new();
    for c in calls {
        let s = show(c);
        if !seen.contains(&s) {
            seen.push(s);
        }
    }
    let rest = seen.len().saturating_sub(2);
    let mut text = seen.into_iter().take(2).collect::<Vec<_>>().join(", ");
    if rest > 0 {
        text.push_str(&format!(
            ", {rest} other{}",
            if rest == 1 { "" } else { "s" }
        ));
    }
    text
}

pub(crate) fn level_text(level: &sandbox::backend::Level) -> String {
    match level {
        sandbox::backend::Level::Full => "full".into(),
        sandbox::backend::Level::Partial { gaps } => format!("partial: {}", gaps.join("; ")),
        sandbox::backend::Level::None { reason } => format!("none: {reason}"),
        _ => "unknown".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Text a command could choose: every control byte, a few terminal
    /// sequences (OSC title and hyperlink, CSI clear, C1 CSI), a carriage
    /// return and a line of its own, and a bidirectional override.
    fn hostile() -> Vec<String> {
        let mut texts: Vec<String> = (0u8..0x20)
            .chain([0x7f])
            .map(|b| format!("/w/a{}b", b as char))
            .collect();
        texts.extend(
            [
                "/w/.git/hooks/\x1b]0;owned\x07",
                "/w/\x1b]8;;http://example.com\x1b\\link\x1b]8;;\x1b\\",
                "/w/\x1b[2J\x1b[H",
                "/w/\u{9b}2J",
                "/w/x\rsandbox: all clear",
                "/w/x\nsandbox: all clear, nothing refused",
                "/w/\u{202e}txt.exe",
            ]
            .map(str::to_owned),
        );
        texts
    }

    /// #44: a direct connect refused at an intercepted host's address (its
    /// port intercepted) gets no `--allow-net` for the address, which would
    /// route around the proxy; the twin, an address no rule lists, does.
    /// A proxy refusal of an intercepted host at another port proposes the
    /// exact `--allow-net HOST:PORT`.
    #[test]
    fn no_ip_rule_is_proposed_for_an_intercepted_hosts_address() {
        let call = |syscall: &str, target: &str, reason: &str| sandbox::runner::MediatedCall {
            syscall: syscall.into(),
            target: target.into(),
            reason: reason.into(),
            outside_write_paths: false,
        };
        let shadowed = call(
            "connect",
            "1.2.3.4:8443 (where the intercepted host pkgs.example.com was found: a request \
             rule intercepts it, so it is reached only through the proxy)",
            "no egress rule admits this destination",
        );
        match proposal(&shadowed, false) {
            Proposal::Withheld(why) => assert!(why.contains("intercepts"), "{why}"),
            _ => panic!("an IP rule was proposed for an intercepted host's address"),
        }
        let twin = call(
            "connect",
            "1.2.3.4:9443 (answered for other.example.com, whose rules do not list port 9443)",
            "no egress rule admits this destination",
        );
        assert!(
            matches!(proposal(&twin, false), Proposal::Flag(f) if f == "--allow-net 1.2.3.4:9443")
        );
        let elsewhere = call(
            "proxy",
            "pkgs.example.com:8080",
            "no egress rule lists this host name and port exactly: a request rule intercepts \
             this host at another port",
        );
        assert!(matches!(
            proposal(&elsewhere, false),
            Proposal::Flag(f) if f == "--allow-net pkgs.example.com:8080"
        ));
    }

    fn outcome(texts: &[String]) -> Outcome {
        let refused: Vec<sandbox::runner::MediatedCall> = texts
            .iter()
            .flat_map(|t| {
                ["openat", "dns", "proxy", "connect", "socket", "x\x1bcall"].map(|syscall| {
                    sandbox::runner::MediatedCall {
                        syscall: syscall.into(),
                        target: t.clone(),
                        reason: format!("beneath a write-deny path {t}"),
                        outside_write_paths: syscall == "openat",
                    }
                })
            })
            .collect();
        let mut record = serde_json::json!({
            "argv": ["sh"], "policy": null, "backend": "landlock\x1b[2J", "report": null,
            "termination": {"kind": "exited", "code": 1}, "timed_out": false,
            "leftover_processes_ended": 0, "duration_ms": 1.0,
            "classification": {"class": "sandbox_denial", "evidence": texts},
        });
        record["mediation"] = serde_json::json!({
            "performed": 1, "refused": refused, "omitted": 0, "error": texts[0],
        });
        serde_json::from_value(record).unwrap()
    }

    /// What the printers hand to [`say`]: one screen line each, with no
    /// byte a terminal acts on, whatever the targets hold.
    fn assert_safe(line: &str) {
        let shown = sandbox::runner::terminal_safe(line);
        assert!(
            !shown.chars().any(|c| c.is_control() || c == '\u{202e}'),
            "{shown:?}"
        );
        assert!(!shown.contains("\nsandbox: all clear"));
    }

    #[test]
    fn every_printer_shows_command_text_escaped_on_its_own_line() {
        let texts = hostile();
        let outcome = outcome(&texts);
        let summary = refusal_summary(&outcome).unwrap();
        assert_safe(&summary);
        let explained = explain(&outcome);
        for line in &explained {
            assert_safe(line);
        }
        // Each evidence line and refusal is a line of its own: the
        // command's newlines add none.
        assert!(explained.len() >= texts.len() + 20, "{explained:?}");
        for t in &texts {
            assert!(
                explained.iter().any(|l| l.contains(t.as_str())),
                "{t:?} is shown (escaped at the sink)"
            );
        }
    }

    /// What `sh` makes of `line`'s text after `to admit it: `, pasted: its
    /// words (NUL-separated by printf).
    fn pasted(line: &str) -> Vec<String> {
        let (_, flag) = line.split_once("to admit it: ").expect(line);
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("printf '%s\\0' {flag}"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{line}");
        String::from_utf8(out.stdout)
            .unwrap()
            .split_terminator('\0')
            .map(str::to_owned)
            .collect()
    }

    /// F1: every flag `--explain` proposes for a command-chosen host name,
    /// address, socket path or request path is one shell word: printed (as
    /// `say` escapes it) and pasted, it is the flag and exactly the value,
    /// and runs nothing; a value with a control character, a bidirectional
    /// override or a backslash is not proposed (the line says why). The
    /// twin: a plain name is proposed as is.
    #[test]
    fn proposed_flags_paste_as_one_word_and_run_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let pwned = dir.path().join("PWNED");
        let p = pwned.display();
        let hostile = [
            format!("x;touch$IFS{p};#.example.com:443"),
            format!("a$(touch${{IFS}}{p}).example.com:443"),
            format!("a`touch {p}`'b'\"c\"!!*~:443"),
            "plain.example.org:443".to_owned(),
        ];
        let rule = |path: &str| format!("GET https://api.example.com/v1/{path}");
        let request_paths = [
            format!("x';touch$IFS{p};''"),
            format!("x'$(touch$IFS{p})'"),
            "plain".to_owned(),
        ];
        let call = |syscall: &str, target: &str, reason: String| sandbox::runner::MediatedCall {
            syscall: syscall.into(),
            target: target.into(),
            reason,
            outside_write_paths: false,
        };
        let mut calls = Vec::new();
        let mut want = Vec::new();
        for t in &hostile {
            for (syscall, reason, flag) in [
                (
                    "proxy",
                    "no egress rule lists this host name and port",
                    "--allow-net",
                ),
                ("dns", "no egress rule lists this name", "--allow-net"),
                (
                    "connect",
                    "the UNIX socket lies outside the allowed ones",
                    "--allow-unix",
                ),
            ] {
                calls.push(call(syscall, t, reason.into()));
                want.push(vec![flag.to_owned(), t.clone()]);
            }
        }
        for path in &request_paths {
            let flag = sandbox::policy::flag("--allow-request", &rule(path)).unwrap();
            calls.push(call(
                "request",
                &rule(path),
                format!("no request rule admits it (to admit it: {flag})"),
            ));
            want.push(vec!["--allow-request".into(), rule(path)]);
        }
        let unsafe_targets = ["a\nb.example.com:443", "a\u{202e}b:443", "a\\x1bb:443"];
        for t in unsafe_targets {
            calls.push(call(
                "proxy",
                t,
                "no egress rule lists this host name".into(),
            ));
        }
        // A host the proxy refused as no host name: nothing proposed.
        calls.push(call(
            "proxy",
            "x;id.example.com:443",
            "not a host name (only letters, digits, '-', '_' and '.', labels of 1 to 63 bytes): \
             refused before any rule or lookup"
                .into(),
        ));
        let record = serde_json::json!({
            "argv": ["sh"], "policy": null, "backend": "landlock", "report": null,
            "termination": {"kind": "exited", "code": 1}, "timed_out": false,
            "leftover_processes_ended": 0, "duration_ms": 1.0,
            "classification": {"class": "sandbox_denial", "evidence": []},
            "mediation": {"performed": 1, "refused": calls, "omitted": 0},
        });
        let outcome: Outcome = serde_json::from_value(record).unwrap();
        let printed: Vec<String> = explain(&outcome)
            .iter()
            .map(|l| sandbox::runner::terminal_safe(l).into_owned())
            .collect();
        let proposals: Vec<&String> = printed
            .iter()
            .filter(|l| l.trim_start().starts_with("to admit it: "))
            .collect();
        assert_eq!(proposals.len(), want.len(), "{printed:#?}");
        for (line, want) in proposals.iter().zip(&want) {
            assert_eq!(&pasted(line), want, "{line}");
        }
        assert!(!pwned.exists(), "pasting a proposal ran the command's code");
        let refused_not_proposed = printed
            .iter()
            .filter(|l| l.trim_start().starts_with("not proposed: it holds"))
            .count();
        assert_eq!(refused_not_proposed, unsafe_targets.len(), "{printed:#?}");
        let mut lone = serde_json::to_value(&outcome).unwrap();
        lone["mediation"]["refused"] = serde_json::json!([calls.last().unwrap()]);
        let lone: Outcome = serde_json::from_value(lone).unwrap();
        let summary = refusal_summary(&lone).unwrap();
        assert!(
            summary.contains("x;id.example.com:443 is not a host name"),
            "{summary}"
        );
        // The twin: a plain name is proposed bare.
        assert!(
            printed
                .iter()
                .any(|l| l.trim_end() == "      to admit it: --allow-net plain.example.org:443"),
            "{printed:#?}"
        );
    }

    #[test]
    fn plain_text_passes_unchanged() {
        let line = "sandbox: refused 1 file change (/home/me/ws/ünï côdé.txt: protected)";
        assert_eq!(sandbox::runner::terminal_safe(line), line);
    }
}
