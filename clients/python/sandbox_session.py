"""A small client for `sandbox session` (schema v1; see docs/session.md).

Standard library only::

    from sandbox_session import Session

    with Session(args=["-w", "./out", "--no-network"]) as s:
        r = s.run(["make", "test"], timeout=300, output=True)
        print(r["status"], r["classification"], r["refusals"])

`Session.run` sends one `run` request and returns its `exit` event (a dict:
`status`, `classification`, `timed_out`, `duration_ms`, `refusals`, and
`stdout`/`stderr` when `output=True`). A request the session refuses raises
`SessionError` naming the bad input. Commands run one at a time; one
`Session` is not meant to be shared between threads.

With `--approval channel` among `args`, a connection (or request) the
policy refuses is held while the session asks; `on_permission` is called
with the `permission` event (a dict: `kind`, `host`, `port`; for a
connection `addresses`, `local` and `resolution`; for a request `method`,
`url`, `rule`) and returns `"once"`, `"session"` or `"deny"`. A name is
asked about first by name alone (`addresses` and `local` are `None`: it is
looked up only once admitted, so a denied name is never queried); when
the admitted name resolves to a local address (loopback, private, the
host's own) it is asked about again with `resolution` true, `addresses`
(the only ones it reaches if admitted) and `local` true. An IP literal is
asked about once, with itself as `addresses` and `local` said.
Without a callback, or when it raises or returns anything else, the answer
is `"deny"`. The exit event's `approvals` lists what was asked and
answered::

    def ask(p):
        if p.get("local"):
            return "deny"
        return "once" if p["host"].endswith(".example.com") else "deny"

    with Session(args=["--no-network", "--approval", "channel"], on_permission=ask) as s:
        r = s.run(["curl", "-s", "http://pkg.example.com/"], output=True)
        print(r["approvals"])

`on_refused`, when given, is called with each `refused` event of the
running command (a dict: the fields of an entry of the exit event's
`refusals`); what it raises is ignored. Events this client does not know
are skipped.

`transport="socket"` talks to the session over a UNIX socketpair
(`sandbox session --channel-fd N`) instead of its stdin and stdout, which
are then `/dev/null`: a caller whose own stdin/stdout carry another
protocol (or a terminal) is never written to or read by the session::

    with Session(args=["-w", "./out"], transport="socket") as s:
        print(s.run(["make"], output=True)["stdout"])
"""

import fcntl
import itertools
import json
import os
import socket
import subprocess

__all__ = ["Session", "SessionError", "SCHEMA_VERSION", "ANSWERS", "TRANSPORTS"]

#: How the client talks to the session: its stdin/stdout, or a socketpair.
TRANSPORTS = ("stdio", "socket")

#: The answers to a `permission` event.
ANSWERS = ("once", "session", "deny")

#: The version of the session schema this client speaks (`"v"` in `hello`).
SCHEMA_VERSION = 1


class SessionError(Exception):
    """The session refused a request, or ended, or spoke another schema."""


class Session:
    """A `sandbox session` subprocess: `args` are its policy flags (as
    `sandbox run` takes them, and `--config`); `sandbox` is the binary
    (default: `$SANDBOX_BIN`, else `sandbox` on `PATH`); `stderr` is passed
    to `subprocess.Popen` (default: this process's own); `on_permission`
    answers the questions of `--approval channel` (see the module's doc);
    `on_refused` is called with each `refused` event; `transport` is
    `"stdio"` (the session's stdin/stdout) or `"socket"` (a socketpair
    passed as `--channel-fd N`; the session's stdin/stdout are /dev/null)."""

    def __init__(
        self,
        args=(),
        sandbox=None,
        stderr=None,
        on_permission=None,
        on_refused=None,
        transport="stdio",
    ):
        if transport not in TRANSPORTS:
            raise ValueError("transport must be one of %r, not %r" % (TRANSPORTS, transport))
        self.on_permission = on_permission
        self.on_refused = on_refused
        binary = sandbox or os.environ.get("SANDBOX_BIN") or "sandbox"
        self._sock = None
        if transport == "stdio":
            self._proc = subprocess.Popen(
                [binary, "session", *args],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=stderr,
                encoding="utf-8",
                bufsize=1,
            )
            self._rfile, self._wfile = self._proc.stdout, self._proc.stdin
        else:
            mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                # With 0, 1 or 2 closed here, the pair may take one of them,
                # which the child's /dev/null would replace: move it above 2.
                fd = theirs.fileno()
                if fd <= 2:
                    fd = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
                try:
                    self._proc = subprocess.Popen(
                        [binary, "session", "--channel-fd", str(fd), *args],
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.DEVNULL,
                        stderr=stderr,
                        pass_fds=(fd,),
                    )
                finally:
                    if fd != theirs.fileno():
                        os.close(fd)
            except BaseException:
                mine.close()
                raise
            finally:
                theirs.close()  # the session holds the only other end
            self._sock = mine
            self._rfile = mine.makefile("r", encoding="utf-8", newline="\n")
            self._wfile = mine.makefile("w", encoding="utf-8", newline="\n")
        self._ids = itertools.count(1)
        try:
            self.hello = self._read()
        except BaseException:
            self._proc.wait()
            self._release()
            raise
        if self.hello.get("event") != "hello":
            self._proc.wait()
            self._release()
            raise SessionError(
                "the session did not start: %s" % self.hello.get("message", self.hello)
            )
        if self.hello.get("v") != SCHEMA_VERSION:
            self.close()
            raise SessionError("unsupported session schema %r" % self.hello.get("v"))

    def _read(self):
        line = self._rfile.readline()
        if not line:
            code = self._proc.wait()
            raise SessionError("the session ended (exit status %s)" % code)
        return json.loads(line)

    def _send(self, request):
        try:
            self._wfile.write(json.dumps(request) + "\n")
            self._wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            raise SessionError("the session ended (exit status %s)" % self._proc.wait())

    def run(self, argv, timeout=None, output=False, cwd=None, env=None, stdin=None,
            keep=False):
        """Runs `argv` confined by the session's policy and returns its exit
        event. `timeout` (seconds) replaces the session's, bounded by the
        operator's ceiling; `env` maps names to values (None unsets);
        `stdin` is text given to the command (else it reads nothing);
        `keep=True` keeps its background processes alive until the session
        ends (a dev server a later command uses; the exit event's `kept`
        counts them; needs the shared launch, else SessionError)."""
        rid = str(next(self._ids))
        request = {"id": rid, "op": "run", "argv": list(argv)}
        if timeout is not None:
            request["timeout"] = timeout
        if output:
            request["output"] = True
        if cwd is not None:
            request["cwd"] = str(cwd)
        if env is not None:
            request["env"] = dict(env)
        if stdin is not None:
            request["stdin"] = stdin
        if keep:
            request["keep"] = True
        self._send(request)
        while True:
            event = self._read()
            if event.get("event") == "permission":
                self._answer(event)
                continue
            if event.get("id") != rid:
                continue
            kind = event.get("event")
            if kind == "exit":
                return event
            if kind == "refused" and self.on_refused is not None:
                try:
                    self.on_refused(event)
                except Exception:  # the exit event still has to be read
                    pass
            if kind == "error":
                raise SessionError(event.get("message", "error"))

    def _answer(self, event):
        answer = "deny"
        if self.on_permission is not None:
            try:
                answer = self.on_permission(event)
            except Exception:  # a failing callback denies, never admits
                answer = "deny"
        if answer not in ANSWERS:
            answer = "deny"
        self._send({"op": "approve", "permission": event["permission"], "answer": answer})

    def close(self):
        """Ends the session (`close`) and waits for it; returns its exit status."""
        if self._proc.poll() is None:
            try:
                self._send({"op": "close"})
                self._wfile.close()
                if self._sock is not None:
                    self._sock.shutdown(socket.SHUT_WR)
            except (SessionError, OSError):
                pass
        code = self._proc.wait()
        self._release()
        return code

    def _release(self):
        for f in (self._wfile, self._rfile, self._sock):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
