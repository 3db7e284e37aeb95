// A small client for `sandbox session` (schema v1; see docs/session.md).
// Node's child_process and readline only, no dependencies:
//
//   import { Session } from "./session";
//   const s = await Session.open(["-w", "./out", "--no-network"]);
//   const r = await s.run(["make", "test"], { timeout: 300, output: true });
//   console.log(r.status, r.classification, r.refusals);
//   await s.close();
//
// `run` sends one `run` request and resolves to its `exit` event; a request
// the session refuses rejects with a SessionError naming the bad input.
// The session runs one command at a time: requests sent meanwhile wait.
//
// With `--approval channel` among the args, a connection (or request) the
// policy refuses is held while the session asks: `onPermission` gets the
// `permission` event and returns (or resolves to) "once", "session" or
// "deny"; without it, or when it throws or returns anything else, "deny".
//
//   const s = await Session.open(["--no-network", "--approval", "channel"], undefined,
//     (p) => (!p.local && p.host.endsWith(".example.com") ? "once" : "deny"));
//
// A name is asked about by name alone first (`addresses` and `local` null:
// nothing is looked up before it is admitted); when it then resolves to a
// local address it is asked about again (`resolution` true, with the
// addresses and `local` true).
//
// `onRefused`, when given, is called with each `refused` event of a running
// command (the fields of an entry of the exit event's `refusals`); what it
// throws is ignored. Events this client does not know are skipped.
//
// With `transport` "socket" the channel is the child's fd 3, a UNIX stream
// socketpair Node creates for an extra "pipe" (`sandbox session
// --channel-fd 3`); the session's stdin and stdout are then /dev/null, so a
// caller whose own stdio carries another protocol is never touched.

import { spawn, ChildProcess } from "node:child_process";
import { createInterface, Interface } from "node:readline";
import type { Readable, Writable } from "node:stream";

/** The version of the session schema this client speaks (`"v"` in `hello`). */
export const SCHEMA_VERSION = 1;

/** One refusal, in the outcome record's words. */
export interface Refusal {
  syscall: string;
  target: string;
  reason: string;
  outside_write_paths: boolean;
}

/** The answers to a `permission` event. */
export type Answer = "once" | "session" | "deny";

/** A question of `--approval channel`: a held connection or request. */
export interface PermissionEvent {
  event: "permission";
  /** The session's id of the question, to answer with. */
  permission: string;
  /** The run request whose command asked. */
  id: string;
  kind: "connect" | "request";
  host: string;
  port: number;
  /** `connect` only: where an admitted connection goes, and nowhere else:
   * `null` for a name's first question (it is looked up only once
   * admitted); an IP literal itself; for a `resolution`, the addresses the
   * admitted name resolved to. */
  addresses?: string[] | null;
  /** `connect` only: one of `addresses` is loopback, private, link-local or
   * another special-range address, or this host's own; `null` with
   * `addresses`. */
  local?: boolean | null;
  /** `connect` only: the second question about an admitted name, which
   * resolved to `addresses`, one of them local; the connection goes there
   * only on a second yes. */
  resolution?: boolean;
  /** `request` only. */
  method?: string;
  url?: string;
  rule?: string;
  timeout_ms: number;
}

/** What was asked and answered during a command (`--approval channel`). */
export interface Approval {
  permission?: string;
  kind: string;
  host: string;
  port: number;
  /** `connect` only: as in {@link PermissionEvent}. */
  addresses?: string[] | null;
  local?: boolean | null;
  resolution?: boolean;
  method?: string;
  url?: string;
  rule?: string;
  answer: Answer;
  /** `channel`, `timeout`, `malformed answer`, `command ended`, `session closed`, `session grant`. */
  by: string;
}

/** A `refused` event: one refusal of a running command. */
export interface RefusedEvent extends Refusal {
  id: string;
  event: "refused";
  [field: string]: unknown;
}

export type OnRefused = (r: RefusedEvent) => void;

export type OnPermission = (p: PermissionEvent) => Answer | Promise<Answer>;

/** The `exit` event of one command. */
export interface ExitEvent {
  id: string;
  event: "exit";
  status: number;
  classification: string;
  /** `sandbox_denial`: what shows it. */
  evidence?: string[];
  /** `runner_failure`: why nothing ran. */
  reason?: string;
  /** `limit_exceeded`: which limit, and what it did. */
  limit?: string;
  detail?: string;
  timed_out: boolean;
  duration_ms: number;
  refusals: Refusal[];
  refusals_omitted?: number;
  leftover_processes_ended?: number;
  /** With `keep`: how many of its processes live on until the session ends. */
  kept?: number;
  summary?: string[];
  stdout?: string;
  stderr?: string;
  stdout_dropped?: number;
  stderr_dropped?: number;
  /** With `--approval channel`. */
  approvals?: Approval[];
}

export interface RunOptions {
  /** Seconds; replaces the session's, bounded by the operator's ceiling. */
  timeout?: number;
  /** Return the command's stdout and stderr (bounded) in the exit event. */
  output?: boolean;
  cwd?: string;
  /** Variables to set, or (null) unset. */
  env?: Record<string, string | null>;
  /** Text the command reads on stdin (else it reads nothing). */
  stdin?: string;
  /**
   * Keep its background processes alive until the session ends (a dev
   * server a later command uses; the exit event's `kept` counts them).
   * Needs the shared launch, else the run rejects with a SessionError.
   */
  keep?: boolean;
}

/** How the client talks to the session: its stdin/stdout, or a socketpair. */
export type Transport = "stdio" | "socket";

/** The session refused a request, or ended, or spoke another schema. */
export class SessionError extends Error {}

type Waiter = {
  resolve: (e: ExitEvent) => void;
  reject: (e: Error) => void;
};

export class Session {
  private nextId = 1;
  private waiting = new Map<string, Waiter>();
  private ended: Promise<number>;

  private constructor(
    private child: ChildProcess,
    private channel: Writable,
    private lines: Interface,
    /** The session's `hello` event. */
    public hello: Record<string, unknown>,
    private onPermission?: OnPermission,
    private onRefused?: OnRefused,
  ) {
    this.ended = new Promise((resolve) => {
      child.on("close", (code) => {
        const err = new SessionError(`the session ended (exit status ${code})`);
        for (const w of this.waiting.values()) w.reject(err);
        this.waiting.clear();
        resolve(code ?? -1);
      });
    });
    lines.on("line", (line) => this.dispatch(JSON.parse(line)));
  }

  /**
   * Starts `sandbox session ARGS` (`sandbox`: $SANDBOX_BIN, else `sandbox` on
   * PATH); `onPermission` answers the questions of `--approval channel`;
   * `onRefused` is called with each `refused` event; `transport` "socket"
   * talks over a socketpair (`--channel-fd 3`) instead of stdin/stdout.
   */
  static open(
    args: string[] = [],
    sandbox?: string,
    onPermission?: OnPermission,
    onRefused?: OnRefused,
    transport: Transport = "stdio",
  ): Promise<Session> {
    const bin = sandbox ?? process.env.SANDBOX_BIN ?? "sandbox";
    if (transport !== "stdio" && transport !== "socket") {
      return Promise.reject(new TypeError(`unknown transport ${String(transport)}`));
    }
    const socket = transport === "socket";
    // Node makes an extra "pipe" a UNIX stream socketpair, its child end a
    // blocking fd 3 without close-on-exec (the session sets it at once).
    const child = socket
      ? spawn(bin, ["session", "--channel-fd", "3", ...args], {
          stdio: ["ignore", "ignore", "inherit", "pipe"],
        })
      : spawn(bin, ["session", ...args], { stdio: ["pipe", "pipe", "inherit"] });
    const input = (socket ? child.stdio[3] : child.stdout) as Readable;
    const channel = (socket ? child.stdio[3] : child.stdin) as Writable;
    // A write after the session ended fails here; its "close" reports it.
    channel.on("error", () => {});
    const lines = createInterface({ input });
    return new Promise((resolve, reject) => {
      const onClose = (code: number | null) =>
        reject(new SessionError(`the session did not start (exit status ${code})`));
      child.once("error", reject);
      child.once("close", onClose);
      lines.once("line", (line) => {
        child.off("close", onClose);
        const hello = JSON.parse(line);
        if (hello.event !== "hello") {
          reject(new SessionError(`the session did not start: ${hello.message ?? line}`));
        } else if (hello.v !== SCHEMA_VERSION) {
          channel.end();
          reject(new SessionError(`unsupported session schema ${hello.v}`));
        } else {
          resolve(new Session(child, channel, lines, hello, onPermission, onRefused));
        }
      });
    });
  }

  private async answer(p: PermissionEvent): Promise<void> {
    let answer: unknown = "deny";
    try {
      if (this.onPermission) answer = await this.onPermission(p);
    } catch {
      answer = "deny"; // a failing callback denies, never admits
    }
    if (answer !== "once" && answer !== "session") answer = "deny";
    if (this.channel.writable) {
      this.channel.write(
        JSON.stringify({ op: "approve", permission: p.permission, answer }) + "\n",
      );
    }
  }

  private dispatch(event: Record<string, unknown>): void {
    if (event.event === "permission") {
      void this.answer(event as unknown as PermissionEvent);
      return;
    }
    const id = event.id as string | undefined;
    const w = id === undefined ? undefined : this.waiting.get(id);
    if (!w) return; // "started", "closed", or an error without an id
    if (event.event === "exit") {
      this.waiting.delete(id!);
      w.resolve(event as unknown as ExitEvent);
    } else if (event.event === "error") {
      this.waiting.delete(id!);
      w.reject(new SessionError(String(event.message)));
    } else if (event.event === "refused" && this.onRefused) {
      try {
        this.onRefused(event as unknown as RefusedEvent);
      } catch {
        // the exit event still resolves the run
      }
    }
  }

  /** Runs `argv` confined by the session's policy; resolves to its exit event. */
  run(argv: string[], opts: RunOptions = {}): Promise<ExitEvent> {
    const id = String(this.nextId++);
    const request: Record<string, unknown> = { id, op: "run", argv };
    if (opts.timeout !== undefined) request.timeout = opts.timeout;
    if (opts.output) request.output = true;
    if (opts.cwd !== undefined) request.cwd = opts.cwd;
    if (opts.env !== undefined) request.env = opts.env;
    if (opts.stdin !== undefined) request.stdin = opts.stdin;
    if (opts.keep) request.keep = true;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.channel.write(JSON.stringify(request) + "\n");
    });
  }

  /** Ends the session (`close`); resolves to its exit status. */
  close(): Promise<number> {
    if (this.child.exitCode === null && this.channel.writable) {
      this.channel.write(JSON.stringify({ op: "close" }) + "\n");
      this.channel.end();
    }
    return this.ended;
  }
}
