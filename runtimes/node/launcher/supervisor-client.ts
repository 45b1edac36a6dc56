import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { connect, type Socket } from "node:net";
import { QlrError, errorCode, errorMessage } from "../../../src/errors.ts";
import {
  challengeProof,
  parseStartupReport,
  parseSupervisorMessage,
  proofMatches,
  SUPERVISOR_MESSAGE_MAX_BYTES,
  supervisorSocketName,
  type ClientMessage,
  type StartupReport,
  type SupervisorMessage,
} from "./supervisor-protocol.ts";

/**
 * The supervisor only shuttles bytes from pipes to files and waits on children; a small heap
 * keeps its private memory near 8 MiB for the whole state directory (the Node binary's pages
 * are shared with the runtime).
 */
const SUPERVISOR_HEAP_FLAGS = ["--max-old-space-size=32", "--max-semi-space-size=1"];
/**
 * Where memory counts more than CPU (`lowMemory`, the edge profile), `--no-opt` also leaves its
 * JavaScript to the interpreter and the baseline compiler: the optimized code and its feedback
 * cost ≈ 5 MiB more private memory under load. Elsewhere TurboFan optimizes it: ≈ 10 % less of
 * the supervisor's CPU per task since tasks are started by the native spawner (before it, each
 * fork of the supervisor made V8 optimize it again and again, and `--no-opt` was the cheaper
 * way everywhere; docs/PERFORMANCE.md, "The supervisor optimized again").
 */
function supervisorNodeFlags(lowMemory: boolean): readonly string[] {
  return lowMemory ? [...SUPERVISOR_HEAP_FLAGS, "--no-opt"] : SUPERVISOR_HEAP_FLAGS;
}
/** A Node start on a slow router takes about a second; past this the supervisor counts as not starting. */
const STARTUP_TIMEOUT_MS = 30_000;
/** How long one request waits for its answer before the connection is given up as hung. */
const REQUEST_TIMEOUT_MS = 30_000;
const CONNECT_ATTEMPTS = 5;
/**
 * Why a try failed when the supervisor hung up before the handshake finished. Once is a
 * supervisor leaving as we arrived; every time is one that refuses our proof of the key.
 */
const HUNG_UP = "the supervisor hung up during the handshake: leaving, or refusing our key";

type Reply = Exclude<
  SupervisorMessage,
  { kind: "challenge" } | { kind: "welcome" } | { kind: "exited" }
>;

export interface SupervisorClientOptions {
  readonly stateDir: string;
  readonly hmacKey: Uint8Array;
  readonly supervisorPath: string;
  /** The minimal environment the supervisor starts with (no runtime secret, no NODE_OPTIONS). */
  readonly supervisorEnv: Record<string, string>;
  /** A task's receipt is durable: a hint to look now, never evidence. */
  readonly onExited?: (attemptId: string) => void;
  /** Start a supervisor that trades CPU for memory (`supervisorNodeFlags`); default false. */
  readonly lowMemory?: boolean;
}

/** The supervisor hung up before the handshake finished: it was leaving, or turned us away. */
class SupervisorLeftError extends QlrError {
  constructor() {
    super("storage_unavailable", "the supervisor closed the connection during the handshake");
  }
}

/** One authenticated connection to the state directory's resident supervisor. */
class Connection {
  private buffered = "";
  private readonly waiting = new Map<
    string,
    { resolve: (reply: Reply) => void; reject: (error: Error) => void; timer: NodeJS.Timeout }
  >();
  closed = false;
  /** Writes of this turn are being gathered into one (see `request`). */
  private corked = false;
  /**
   * Attempts launched through this connection whose `exited` has not come yet (see
   * `supervising`). Bounded by the tasks this supervisor runs for us; gone with the connection.
   */
  private readonly unfinished = new Set<string>();

  constructor(
    private readonly socket: Socket,
    /** What the supervisor at the other end announced in its welcome. */
    readonly features: ReadonlySet<string>,
    private readonly onExited: ((attemptId: string) => void) | undefined,
    private readonly onClose: () => void,
  ) {
    socket.setEncoding("utf8");
    socket.on("data", (text: string) => this.receive(text));
    socket.on("error", () => undefined);
    socket.on("close", () => {
      this.closed = true;
      for (const { reject, timer } of this.waiting.values()) {
        clearTimeout(timer);
        reject(
          new QlrError(
            "storage_unavailable",
            "the supervisor connection closed before it answered",
          ),
        );
      }
      this.waiting.clear();
      this.onClose();
    });
    // The runtime may exit while the supervisor lives on; the connection must not keep it up.
    socket.unref();
  }

  private receive(text: string): void {
    this.buffered += text;
    if (this.buffered.length > SUPERVISOR_MESSAGE_MAX_BYTES) {
      this.socket.destroy();
      return;
    }
    for (
      let newline = this.buffered.indexOf("\n");
      newline >= 0;
      newline = this.buffered.indexOf("\n")
    ) {
      const message = parseSupervisorMessage(this.buffered.slice(0, newline));
      this.buffered = this.buffered.slice(newline + 1);
      if (message === null || message.kind === "challenge" || message.kind === "welcome") continue;
      if (message.kind === "exited") {
        this.unfinished.delete(message.attemptId);
        this.onExited?.(message.attemptId);
        continue;
      }
      const op =
        message.kind === "stopping" ? "stop" : message.kind === "settled" ? "settle" : "launch";
      // A launch answered other than `started` (a spawn failure has its receipt already, a
      // rejection never will) sends no `exited`.
      if (op === "launch" && message.kind !== "started") this.unfinished.delete(message.attemptId);
      const key = `${op}:${message.attemptId}`;
      const waiter = this.waiting.get(key);
      if (waiter === undefined) continue;
      this.waiting.delete(key);
      clearTimeout(waiter.timer);
      waiter.resolve(message);
    }
  }

  request(message: Exclude<ClientMessage, { op: "hello" }>): Promise<Reply> {
    const attemptId = message.op === "launch" ? message.spec.attemptId : message.attemptId;
    const key = `${message.op}:${attemptId}`;
    if (this.closed)
      return Promise.reject(
        new QlrError("storage_unavailable", "the supervisor connection is closed"),
      );
    if (this.waiting.has(key))
      return Promise.reject(
        new QlrError(
          "conflict",
          `a ${message.op} of ${attemptId} is already waiting for the supervisor`,
        ),
      );
    // Before the request leaves, so no answer or `exited` can come ahead of the entry.
    if (message.op === "launch") this.unfinished.add(attemptId);
    return new Promise<Reply>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiting.delete(key);
        this.unfinished.delete(attemptId);
        reject(
          new QlrError(
            "storage_unavailable",
            `the supervisor did not answer a ${message.op} of ${attemptId} within ${REQUEST_TIMEOUT_MS} ms`,
          ),
        );
      }, REQUEST_TIMEOUT_MS);
      this.waiting.set(key, { resolve, reject, timer });
      // The launches of one dispatch page are asked in one turn (their journal records share
      // one flush): they leave in one write, not one system call each.
      if (!this.corked) {
        this.corked = true;
        this.socket.cork();
        process.nextTick(() => {
          this.corked = false;
          this.socket.uncork();
        });
      }
      this.socket.write(`${JSON.stringify(message)}\n`);
    });
  }

  /**
   * True while this connection is open and the supervisor has not said the attempt launched
   * through it exited. The supervisor writes a receipt only when a task exits (then broadcasts
   * `exited` to every client) or when its spawn fails (then answers the launch with
   * `spawn_failed`), and one socket delivers in order: so while this holds, the attempt has
   * no receipt, and its supervisor, which holds the other end, is alive. "No receipt" read
   * this way is never newer than a read of the file at the same moment, so it decides nothing
   * a file read could not; any doubt (a new connection, a closed one) answers false and the
   * caller reads the files.
   */
  supervising(attemptId: string): boolean {
    return !this.closed && this.unfinished.has(attemptId);
  }

  close(): void {
    this.socket.destroy();
  }
}

/**
 * Finds the state directory's resident supervisor on its abstract socket, starting it when
 * none answers, and proves both ways that each side holds the receipt key. The connection is
 * kept and shared; a closed one is replaced on the next request (a restarted supervisor is
 * adopted the same way as one left by an earlier runtime).
 */
export class SupervisorClient {
  private connecting: Promise<Connection> | null = null;
  /** The connection the last handshake opened (a closed one answers nothing, see `supervising`). */
  private latest: Connection | null = null;
  private readonly socketName: string;

  constructor(private readonly options: SupervisorClientOptions) {
    this.socketName = supervisorSocketName(options.stateDir);
  }

  /**
   * Resolves once an authenticated connection exists (starting the supervisor if needed), with
   * what that supervisor announced it does (`SUPERVISOR_FEATURES`; a resident supervisor of an
   * older build announces less).
   */
  async connected(): Promise<ReadonlySet<string>> {
    return (await this.connection()).features;
  }

  async request(message: Exclude<ClientMessage, { op: "hello" }>): Promise<Reply> {
    const connection = await this.connection();
    return connection.request(message);
  }

  /**
   * Asks a live supervisor only (never starts one): null when no supervisor of this state
   * directory is alive, which is itself evidence (nothing can still be spawning).
   */
  async requestIfAlive(message: Exclude<ClientMessage, { op: "hello" }>): Promise<Reply | null> {
    const connection = await this.connection(false);
    return connection === null ? null : connection.request(message);
  }

  /** See `Connection.supervising`: false whenever the latest connection cannot vouch for it. */
  supervising(attemptId: string): boolean {
    return this.latest?.supervising(attemptId) ?? false;
  }

  close(): void {
    const pending = this.connecting;
    this.connecting = null;
    void pending?.then((connection) => connection.close()).catch(() => undefined);
  }

  private connection(startIfAbsent?: true): Promise<Connection>;
  private connection(startIfAbsent: false): Promise<Connection | null>;
  private async connection(startIfAbsent = true): Promise<Connection | null> {
    const existing = this.connecting;
    if (existing !== null) {
      const connection = await existing.catch(() => null);
      if (connection !== null && !connection.closed) return connection;
      if (this.connecting === existing) this.connecting = null;
    }
    if (!startIfAbsent) {
      const found = await this.connectIfAlive();
      if (found === null) return null;
      // Another caller may have connected meanwhile: one connection is kept and shared.
      const other = await (this.connecting ?? Promise.resolve(null)).catch(() => null);
      if (other !== null && !other.closed) {
        found.close();
        return other;
      }
      this.connecting = Promise.resolve(found);
      return found;
    }
    const attempt = this.connectOrStart();
    this.connecting = attempt;
    return attempt.catch((error: unknown) => {
      if (this.connecting === attempt) this.connecting = null;
      throw error;
    });
  }

  private async connectOrStart(): Promise<Connection> {
    let lastProblem = "";
    for (let attempt = 0; attempt < CONNECT_ATTEMPTS; attempt += 1) {
      const socket = await this.tryConnect();
      if (socket !== null) {
        const connection = await this.handshakeUnlessLeaving(socket);
        if (connection !== null) return connection;
        // It was leaving (idle) as we connected: the next try finds its successor or starts one.
        lastProblem = HUNG_UP;
        continue;
      }
      const report = await this.startSupervisor();
      // `busy`: another starter won the race; its supervisor answers on the next try.
      if (report.kind === "failed")
        throw new QlrError(
          "storage_unavailable",
          `the supervisor could not start: ${report.reason}`,
        );
      lastProblem = report.kind;
    }
    throw new QlrError(
      lastProblem === HUNG_UP ? "integrity" : "storage_unavailable",
      `no supervisor answered after ${CONNECT_ATTEMPTS} attempts (${lastProblem})`,
    );
  }

  /**
   * A live supervisor's connection, or null when none listens. One that hangs up during the
   * handshake is asked again, so its leaving is never mistaken for its absence while it lives.
   */
  private async connectIfAlive(): Promise<Connection | null> {
    for (let attempt = 0; attempt < CONNECT_ATTEMPTS; attempt += 1) {
      const socket = await this.tryConnect();
      if (socket === null) return null;
      const connection = await this.handshakeUnlessLeaving(socket);
      if (connection !== null) return connection;
    }
    throw new QlrError(
      "integrity",
      `no supervisor answered after ${CONNECT_ATTEMPTS} attempts (${HUNG_UP})`,
    );
  }

  /**
   * The handshake's connection, or null when the supervisor hung up before it finished: an
   * idle supervisor exits on its own, and a client may connect in the instant before it does.
   * That is a departure, not a failure of authentication, and must not end the caller's work
   * (a launch would otherwise record a definite spawn failure for a task that could have run).
   */
  private async handshakeUnlessLeaving(socket: Socket): Promise<Connection | null> {
    try {
      return await this.handshake(socket);
    } catch (error) {
      if (error instanceof SupervisorLeftError) return null;
      throw error;
    }
  }

  /** A connected socket, or null when no supervisor listens (ECONNREFUSED/ENOENT). */
  private tryConnect(): Promise<Socket | null> {
    return new Promise((resolve, reject) => {
      const socket = connect({ path: this.socketName });
      socket.once("connect", () => {
        socket.removeAllListeners("error");
        resolve(socket);
      });
      socket.once("error", (error) => {
        const code = errorCode(error);
        if (code === "ECONNREFUSED" || code === "ENOENT") resolve(null);
        else
          reject(
            new QlrError(
              "storage_unavailable",
              `cannot reach the supervisor: ${errorMessage(error)}`,
              { cause: error },
            ),
          );
      });
    });
  }

  private handshake(socket: Socket): Promise<Connection> {
    const key = this.options.hmacKey;
    return new Promise<Connection>((resolve, reject) => {
      let buffered = "";
      const nonce = randomBytes(16).toString("hex");
      const fail = (reason: string): void => {
        clearTimeout(timer);
        socket.destroy();
        reject(new QlrError("integrity", `the supervisor socket failed authentication: ${reason}`));
      };
      const timer = setTimeout(() => fail("no answer"), REQUEST_TIMEOUT_MS);
      socket.setEncoding("utf8");
      socket.on("error", () => undefined);
      socket.once("close", () => {
        clearTimeout(timer);
        reject(new SupervisorLeftError());
      });
      const onData = (text: string): void => {
        buffered += text;
        if (buffered.length > 4096) return fail("handshake too long");
        for (let newline = buffered.indexOf("\n"); newline >= 0; newline = buffered.indexOf("\n")) {
          const message = parseSupervisorMessage(buffered.slice(0, newline));
          buffered = buffered.slice(newline + 1);
          if (message?.kind === "challenge") {
            socket.write(
              `${JSON.stringify({ op: "hello", proof: challengeProof(key, "client", message.nonce), nonce })}\n`,
            );
          } else if (message?.kind === "welcome") {
            // A process that does not hold the key (another user squatting on the name) can
            // never answer our challenge: nothing is sent to it.
            if (!proofMatches(key, "supervisor", nonce, message.proof))
              return fail("the supervisor does not hold the receipt key");
            clearTimeout(timer);
            socket.removeListener("data", onData);
            socket.removeAllListeners("close");
            const connection = new Connection(
              socket,
              new Set(message.features),
              this.options.onExited,
              () => undefined,
            );
            this.latest = connection;
            if (buffered.length > 0) socket.unshift(buffered);
            resolve(connection);
            return;
          } else {
            return fail("unexpected message");
          }
        }
      };
      socket.on("data", onData);
    });
  }

  /** Starts a supervisor detached (own session), waits for its start-up line on fd 3, then lets go of it. */
  private startSupervisor(): Promise<StartupReport> {
    return new Promise<StartupReport>((resolve) => {
      let child;
      try {
        child = spawn(
          process.execPath,
          [
            ...supervisorNodeFlags(this.options.lowMemory === true),
            this.options.supervisorPath,
            this.options.stateDir,
          ],
          {
            detached: true,
            stdio: ["ignore", "ignore", "ignore", "pipe"],
            env: this.options.supervisorEnv,
            // The root directory keeps the supervisor from pinning a mount point a task does not use.
            cwd: "/",
          },
        );
      } catch (error) {
        resolve({ kind: "failed", reason: errorMessage(error) });
        return;
      }
      let text = "";
      let settled = false;
      const settle = (report: StartupReport): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        channel?.destroy();
        child.unref();
        resolve(report);
      };
      const timer = setTimeout(
        () =>
          settle({ kind: "failed", reason: `no start-up report within ${STARTUP_TIMEOUT_MS} ms` }),
        STARTUP_TIMEOUT_MS,
      );
      child.on("error", (error) => settle({ kind: "failed", reason: error.message }));
      const channel = child.stdio[3];
      if (channel === null || channel === undefined) {
        settle({ kind: "failed", reason: "no start-up channel" });
        return;
      }
      channel.on("error", () => undefined);
      channel.on("data", (chunk: Buffer) => {
        text += chunk.toString("utf8");
        const newline = text.indexOf("\n");
        if (newline >= 0)
          settle(
            parseStartupReport(text.slice(0, newline)) ?? {
              kind: "failed",
              reason: "unreadable start-up report",
            },
          );
        else if (text.length > 4096) settle({ kind: "failed", reason: "start-up report too long" });
      });
      channel.once("close", () =>
        setImmediate(() =>
          settle({ kind: "failed", reason: "the supervisor exited before reporting" }),
        ),
      );
    });
  }
}
