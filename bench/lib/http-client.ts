/**
 * A lean HTTP client for the benches' load: node:http over kept-alive connections. The load
 * shares the machine with what it measures, and `fetch` (undici) spent ≈ 1.2–1.7 ms of CPU per
 * run of the launcher bench's throughput part posting and polling, ≈ 10–14 % of the runtime's
 * own CPU per step; this client spends a fraction of it.
 */
import { Agent, request } from "node:http";

const agent = new Agent({ keepAlive: true, maxSockets: 64 });

export interface LeanResponse {
  readonly status: number;
  readonly text: string;
}

/** One request; the whole answer as text. Rejects on a network error or after `timeoutMs`. */
export function leanRequest(
  url: string,
  options: {
    readonly method?: "GET" | "POST";
    readonly headers?: Readonly<Record<string, string>>;
    readonly body?: string;
    readonly timeoutMs?: number;
  } = {},
): Promise<LeanResponse> {
  return new Promise((resolve, reject) => {
    const body = options.body === undefined ? undefined : Buffer.from(options.body, "utf8");
    const outgoing = request(
      url,
      {
        agent,
        method: options.method ?? "GET",
        headers: {
          ...options.headers,
          ...(body === undefined ? {} : { "content-length": String(body.length) }),
        },
        timeout: options.timeoutMs ?? 60_000,
      },
      (incoming) => {
        const chunks: Buffer[] = [];
        incoming.on("data", (chunk: Buffer) => chunks.push(chunk));
        incoming.on("end", () =>
          resolve({
            status: incoming.statusCode ?? 0,
            text: Buffer.concat(chunks).toString("utf8"),
          }),
        );
        incoming.on("error", reject);
      },
    );
    outgoing.on("timeout", () => outgoing.destroy(new Error(`no answer from ${url} in time`)));
    outgoing.on("error", reject);
    outgoing.end(body);
  });
}
