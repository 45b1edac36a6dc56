import { QlrError } from "../../src/errors.ts";

/** A bound on the servers one URL may name. */
const MAX_HOSTS = 16;

/** One server of the URL, and the single-host URL `pg` connects with. */
export interface PgServerTarget {
  readonly label: string;
  readonly connectionString: string;
}

export interface PgConnectionTargets {
  readonly servers: readonly PgServerTarget[];
  /** `target_session_attrs=read-write` or `primary`: only a server that accepts writes is used. */
  readonly requireReadWrite: boolean;
}

/**
 * Splits a libpq-style URL into one URL per server (`pg` connects to one host only) and reads
 * `target_session_attrs`, which it removes. A keyword/value connection string passes through
 * as one server.
 */
export function parseConnectionTargets(connectionString: string): PgConnectionTargets {
  const match = /^(postgres(?:ql)?:\/\/)([^@/?#]*@)?([^/?#]*)(.*)$/s.exec(connectionString);
  if (match === null)
    return { servers: [{ label: "server", connectionString }], requireReadWrite: false };
  const [, scheme = "", userInfo = "", hostList = "", rest = ""] = match;
  const queryStart = rest.indexOf("?");
  const fragmentStart = rest.indexOf("#");
  const pathEnd =
    queryStart === -1 ? (fragmentStart === -1 ? rest.length : fragmentStart) : queryStart;
  const path = rest.slice(0, pathEnd);
  const query =
    queryStart === -1
      ? ""
      : rest.slice(queryStart + 1, fragmentStart === -1 ? rest.length : fragmentStart);
  const params = new URLSearchParams(query);
  const attrs = params.get("target_session_attrs") ?? "any";
  if (attrs !== "any" && attrs !== "read-write" && attrs !== "primary")
    throw new QlrError(
      "invalid_request",
      "target_session_attrs in the database URL must be any, read-write or primary",
    );
  params.delete("target_session_attrs");
  const entries = hostList.split(",");
  if (entries.length > MAX_HOSTS)
    throw new QlrError(
      "invalid_request",
      `the database URL names ${entries.length} servers; at most ${MAX_HOSTS} are allowed`,
    );
  if (entries.length > 1 && entries.some((entry) => entry.trim() === ""))
    throw new QlrError("invalid_request", "the database URL has an empty entry in its host list");
  const search = params.toString();
  return {
    servers: entries.map((entry) => ({
      label: entry === "" ? "server" : entry,
      connectionString: `${scheme}${userInfo}${entry}${path}${search === "" ? "" : `?${search}`}`,
    })),
    requireReadWrite: attrs !== "any",
  };
}
