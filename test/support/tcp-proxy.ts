/**
 * A TCP proxy between a PostgreSQL client and a server that can lose a COMMIT on the wire, as a
 * network does: a real `pg` connection, a real server, a real transaction, and a connection that
 * breaks at exactly the worst moment.
 *
 * It reads the client's side of the PostgreSQL protocol (v3) just far enough to know where each
 * transaction begins and ends: `pg` sends statements without parameters (COMMIT, ROLLBACK) as
 * a simple Query ('Q') and statements with parameters as Parse ('P') + Bind ('B') + Describe +
 * Execute + Sync; the store's driver sends BEGIN as Parse + Bind + Execute in the same write as
 * the transaction's first statement, and a BEGIN either way starts a new list. A named
 * statement's text is taken from its Parse, which the driver sends once per connection. The statements of the open transaction (text and text-format
 * parameters) are kept, so a test arms the proxy for the COMMIT of one kind of transaction
 * ("the one that inserts an attempt") rather than for whatever commits next.
 *
 * Two ways to lose a COMMIT:
 * - `after-commit`: COMMIT goes to the server; when the server's answer arrives it is withheld
 *   and both sockets are destroyed. The transaction is durable, the client sees a dropped
 *   connection: the ambiguous outcome a store must never retry blindly.
 * - `before-commit`: both sockets are destroyed instead of forwarding COMMIT. The server rolls
 *   the transaction back when its session ends: nothing was applied.
 *
 * The proxy listens on 127.0.0.1 on a free port, and `close()` ends every connection.
 * Self-contained: node:net only.
 */
import { createServer, Socket, type Server } from "node:net";

const LOOPBACK_HOST = "127.0.0.1";
/** The protocol 3.0 version code of a StartupMessage; anything else untyped is a request (SSL, GSS, cancel). */
const PROTOCOL_3 = 196_608;
const SSL_REQUEST_CODE = 80_877_103;
const GSSENC_REQUEST_CODE = 80_877_104;
/** A client message larger than this is a protocol error here, not a real statement. */
const MAX_MESSAGE_BYTES = 64 * 1024 * 1024;

/** One statement the client sent inside the open transaction. */
export interface ProxiedStatement {
  readonly sql: string;
  /** Text-format parameters as strings; binary ones and NULL as `null`. */
  readonly params: readonly (string | null)[];
}

export type CommitLossMode = "after-commit" | "before-commit";

export interface CommitLossPlan {
  readonly mode: CommitLossMode;
  /** Which transaction to break, by its statements; absent means the next COMMIT. */
  readonly when?: (statements: readonly ProxiedStatement[]) => boolean;
  /**
   * From the loss on, new connections are closed as soon as they arrive (a partition that
   * outlasts the connection), until `acceptConnections()`: the client cannot ask the server
   * what became of its COMMIT.
   */
  readonly thenRefuseConnections?: boolean;
}

/** What the proxy did to one armed COMMIT. */
export interface CommitLoss {
  readonly mode: CommitLossMode;
  readonly statements: readonly ProxiedStatement[];
}

export interface TcpProxy {
  readonly host: string;
  readonly port: number;
  /** Arms one loss; the first COMMIT whose transaction matches takes it. Replaces an armed plan. */
  arm(plan: CommitLossPlan): Promise<CommitLoss>;
  /** Forgets an armed plan no COMMIT has taken. */
  disarm(): void;
  /** Ends a refusal a plan's `thenRefuseConnections` began. */
  acceptConnections(): void;
  /** Losses carried out so far. */
  readonly losses: readonly CommitLoss[];
  /** COMMITs the proxy has forwarded (whether or not their answer arrived). */
  readonly commitsForwarded: number;
  /** Connections currently open through the proxy. */
  readonly openConnections: number;
  /** Destroys every connection through the proxy (as a network partition would). */
  dropAll(): void;
  close(): Promise<void>;
}

interface Armed {
  readonly plan: CommitLossPlan;
  readonly resolve: (loss: CommitLoss) => void;
}

export async function startTcpProxy(target: { host: string; port: number }): Promise<TcpProxy> {
  let armed: Armed | undefined;
  const losses: CommitLoss[] = [];
  let commitsForwarded = 0;
  let refusing = false;
  const connections = new Set<{ client: Socket; server: Socket }>();

  const server: Server = createServer((client) => {
    if (refusing) {
      client.destroy();
      return;
    }
    const upstream = new Socket();
    const pair = { client, server: upstream };
    connections.add(pair);
    const destroyBoth = (): void => {
      client.destroy();
      upstream.destroy();
      connections.delete(pair);
    };
    client.on("error", destroyBoth);
    upstream.on("error", destroyBoth);
    client.on("close", destroyBoth);
    upstream.on("close", destroyBoth);
    client.setNoDelay(true);
    upstream.setNoDelay(true);

    let pending: Buffer = Buffer.alloc(0);
    let started = false;
    let statements: ProxiedStatement[] = [];
    let lastParsedSql = "";
    /** Named statements of this connection (the driver names texts it sends again). */
    const namedSql = new Map<string, string>();
    /** Set once an armed COMMIT was forwarded: the server's next bytes are its answer. */
    let withholdAnswer: (() => void) | undefined;
    const earlyFromClient: Buffer[] = [];
    let connected = false;

    const forward = (chunk: Buffer): void => {
      if (connected) upstream.write(chunk);
      else earlyFromClient.push(chunk);
    };

    upstream.connect(target.port, target.host, () => {
      connected = true;
      for (const chunk of earlyFromClient.splice(0)) upstream.write(chunk);
    });
    upstream.on("data", (chunk: Buffer) => {
      if (withholdAnswer !== undefined) {
        // The server answered the armed COMMIT (the commit is durable): the client never hears it.
        withholdAnswer();
        destroyBoth();
        return;
      }
      client.write(chunk);
    });

    client.on("data", (chunk: Buffer) => {
      pending = pending.length === 0 ? chunk : Buffer.concat([pending, chunk]);
      for (;;) {
        if (withholdAnswer !== undefined || client.destroyed) return;
        const message = nextMessage(pending, started);
        if (message === undefined) return;
        if (message === "invalid") {
          destroyBoth();
          return;
        }
        pending = pending.subarray(message.bytes.length);
        if (message.type === null) {
          if (message.code === PROTOCOL_3) started = true;
          else if (message.code !== SSL_REQUEST_CODE && message.code !== GSSENC_REQUEST_CODE)
            started = true; // A cancel request: the server closes after it.
          forward(message.bytes);
          continue;
        }
        if (message.type === "Q") {
          const sql = readCString(message.body, 0).text;
          const keyword = firstKeyword(sql);
          if (keyword === "BEGIN" || keyword === "START") statements = [];
          if (keyword === "COMMIT" || keyword === "END") {
            const plan = armed;
            if (plan !== undefined && (plan.plan.when?.(statements) ?? true)) {
              armed = undefined;
              const loss: CommitLoss = { mode: plan.plan.mode, statements };
              losses.push(loss);
              if (plan.plan.thenRefuseConnections === true) refusing = true;
              if (plan.plan.mode === "before-commit") {
                destroyBoth();
                plan.resolve(loss);
                return;
              }
              commitsForwarded += 1;
              withholdAnswer = () => plan.resolve(loss);
              forward(message.bytes);
              return;
            }
            commitsForwarded += 1;
            statements = [];
          } else if (keyword === "ROLLBACK" || keyword === "ABORT") {
            statements = [];
          } else if (keyword !== "BEGIN" && keyword !== "START") {
            statements.push({ sql, params: [] });
          }
        } else if (message.type === "P") {
          const name = readCString(message.body, 0);
          lastParsedSql = readCString(message.body, name.next).text;
          if (name.text !== "") namedSql.set(name.text, lastParsedSql);
        } else if (message.type === "B") {
          const portal = readCString(message.body, 0);
          const statement = readCString(message.body, portal.next).text;
          const boundSql = statement === "" ? lastParsedSql : (namedSql.get(statement) ?? "");
          const keyword = firstKeyword(boundSql);
          if (keyword === "BEGIN" || keyword === "START") statements = [];
          else statements.push({ sql: boundSql, params: readBindParams(message.body) });
        }
        forward(message.bytes);
      }
    });
  });

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, LOOPBACK_HOST, () => resolve());
  });
  const address = server.address();
  if (address === null || typeof address !== "object")
    throw new Error("the proxy did not get a TCP address");

  const dropAll = (): void => {
    for (const pair of connections) {
      pair.client.destroy();
      pair.server.destroy();
    }
    connections.clear();
  };

  return {
    host: LOOPBACK_HOST,
    port: address.port,
    arm: (plan) =>
      new Promise<CommitLoss>((resolve) => {
        armed = { plan, resolve };
      }),
    disarm: () => {
      armed = undefined;
    },
    acceptConnections: () => {
      refusing = false;
    },
    get losses() {
      return losses;
    },
    get commitsForwarded() {
      return commitsForwarded;
    },
    get openConnections() {
      return connections.size;
    },
    dropAll,
    close: () =>
      new Promise<void>((resolve) => {
        dropAll();
        server.close(() => resolve());
      }),
  };
}

/** Rewrites a `postgres://…@host:port/…` URL to go through the proxy. */
export function urlThroughProxy(databaseUrl: string, proxy: TcpProxy): string {
  const url = new URL(databaseUrl);
  url.hostname = proxy.host;
  url.port = String(proxy.port);
  return url.toString();
}

type ClientMessage =
  | { readonly type: null; readonly code: number; readonly bytes: Buffer }
  | { readonly type: string; readonly body: Buffer; readonly bytes: Buffer };

/** The next whole message at the start of `buffer`, `undefined` when more bytes are needed. */
function nextMessage(buffer: Buffer, started: boolean): ClientMessage | "invalid" | undefined {
  if (!started) {
    if (buffer.length < 8) return undefined;
    const length = buffer.readInt32BE(0);
    if (length < 8 || length > MAX_MESSAGE_BYTES) return "invalid";
    if (buffer.length < length) return undefined;
    return { type: null, code: buffer.readInt32BE(4), bytes: buffer.subarray(0, length) };
  }
  if (buffer.length < 5) return undefined;
  const length = buffer.readInt32BE(1);
  if (length < 4 || length > MAX_MESSAGE_BYTES) return "invalid";
  if (buffer.length < 1 + length) return undefined;
  return {
    type: String.fromCharCode(buffer[0]!),
    body: buffer.subarray(5, 1 + length),
    bytes: buffer.subarray(0, 1 + length),
  };
}

function readCString(body: Buffer, offset: number): { text: string; next: number } {
  const end = body.indexOf(0, offset);
  const stop = end === -1 ? body.length : end;
  return { text: body.toString("utf8", offset, stop), next: stop + 1 };
}

/** Bind: portal, statement, format codes, then each parameter as a length and its bytes. */
function readBindParams(body: Buffer): (string | null)[] {
  let offset = readCString(body, readCString(body, 0).next).next;
  const formatCount = body.readInt16BE(offset);
  offset += 2;
  const formats: number[] = [];
  for (let index = 0; index < formatCount; index += 1) {
    formats.push(body.readInt16BE(offset));
    offset += 2;
  }
  const paramCount = body.readInt16BE(offset);
  offset += 2;
  const params: (string | null)[] = [];
  for (let index = 0; index < paramCount; index += 1) {
    const length = body.readInt32BE(offset);
    offset += 4;
    if (length < 0) {
      params.push(null);
      continue;
    }
    const format = formatCount === 0 ? 0 : formatCount === 1 ? formats[0] : formats[index];
    params.push(format === 0 ? body.toString("utf8", offset, offset + length) : null);
    offset += length;
  }
  return params;
}

function firstKeyword(sql: string): string {
  return /^\s*([A-Za-z]+)/.exec(sql)?.[1]?.toUpperCase() ?? "";
}
