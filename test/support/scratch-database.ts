/**
 * Scratch databases on a PostgreSQL server: each created empty under a name no other process
 * uses, and dropped with any session still open to it. The test files take one each (through
 * ./postgres.ts) and so do the benches, so files or benches running side by side never see
 * each other's tables. Nothing here depends on vitest, so the benches can import it.
 */
import { randomBytes } from "node:crypto";
import pg from "pg";

export interface ScratchDatabase {
  /** A URL for the fresh, empty database. */
  readonly url: string;
  /** Drops the database, ending any connection still open to it. Idempotent. */
  readonly drop: () => Promise<void>;
}

/** Who makes the databases: the name prefix, and the application name the server shows. */
export interface ScratchDatabaseOwner {
  /** Lower case letters, digits and `_`; at most 20 characters, so a name stays short. */
  readonly namePrefix: string;
  readonly applicationName: string;
}

const CONNECT_TIMEOUT_MS = 10_000;

/** Creates a database on the server at `serverUrl` (whose user needs CREATEDB). */
export async function createScratchDatabase(
  serverUrl: string,
  owner: ScratchDatabaseOwner,
): Promise<ScratchDatabase> {
  // The prefix, the pid and 12 hex characters: well inside PostgreSQL's 63-byte identifier limit.
  const name = `${owner.namePrefix}_${process.pid}_${randomBytes(6).toString("hex")}`;
  const identifier = pg.escapeIdentifier(name);
  await runAdminStatement(serverUrl, `CREATE DATABASE ${identifier}`, owner.applicationName);

  const databaseUrl = new URL(serverUrl);
  databaseUrl.pathname = `/${name}`;
  let dropping: Promise<void> | undefined;
  return {
    url: databaseUrl.toString(),
    drop: () => {
      // WITH (FORCE) (PostgreSQL 13+) ends sessions a failed test or bench left behind.
      dropping ??= runAdminStatement(
        serverUrl,
        `DROP DATABASE IF EXISTS ${identifier} WITH (FORCE)`,
        owner.applicationName,
      );
      return dropping;
    },
  };
}

/** Runs one statement on its own connection, closed afterwards whatever happened. */
export async function runAdminStatement(
  serverUrl: string,
  sql: string,
  applicationName: string,
): Promise<void> {
  const client = new pg.Client({
    connectionString: serverUrl,
    connectionTimeoutMillis: CONNECT_TIMEOUT_MS,
    application_name: applicationName,
  });
  try {
    await client.connect();
    await client.query(sql);
  } finally {
    await client.end().catch(() => undefined);
  }
}
