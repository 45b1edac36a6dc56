import { Query, type ClientBase } from "pg";
import type { SqlParam, SqlRow } from "../driver.ts";

/**
 * Sends `begin` and the transaction's first statement in one write and one round trip: BEGIN's
 * Parse, Bind and Execute, then the statement's as `pg` sends them, then one Sync. The server
 * runs them in order and, should BEGIN fail, skips the statement up to the Sync, so the
 * statement never runs outside the transaction. The answer is the statement's result (the
 * last of the two `pg` collects).
 */
export function beginThen(
  client: ClientBase,
  begin: string,
  text: string,
  params: readonly SqlParam[],
  name?: string,
): Promise<{ rows: SqlRow[]; command: string }> {
  return new Promise((resolve, reject) => {
    // `queryMode: "extended"` (which pg's types omit): a statement without parameters too.
    const config = {
      text,
      values: [...params],
      queryMode: "extended",
      ...(name === undefined ? {} : { name }),
    };
    const query = new Query(config, (error: Error | undefined, results: unknown) => {
      if (error !== undefined && error !== null) {
        reject(error);
        return;
      }
      const all = (Array.isArray(results) ? results : [results]) as {
        rows: SqlRow[];
        command: string;
      }[];
      const last = all[all.length - 1];
      if (all.length !== 2 || last === undefined) {
        reject(new Error("BEGIN and the first statement did not answer two results"));
        return;
      }
      resolve({ rows: last.rows, command: last.command });
    });
    // `prepare` is pg's step that writes Parse, Bind, Describe, Execute and Sync for an extended
    // query (inside a corked socket); BEGIN's messages go first, unnamed and without a Sync.
    const extended = query as unknown as { prepare(connection: PgWire): void };
    const prepareStatement = extended.prepare.bind(query);
    extended.prepare = (connection: PgWire): void => {
      connection.parse({ text: begin, name: "", types: [] });
      connection.bind({ portal: "", statement: "", values: [] });
      connection.execute({ portal: "", rows: 0 });
      prepareStatement(connection);
    };
    void client.query(query);
  });
}

/** The part of pg's connection `beginThen` writes to. */
interface PgWire {
  parse(message: { text: string; name: string; types: unknown[] }): void;
  bind(message: { portal: string; statement: string; values: unknown[] }): void;
  execute(message: { portal: string; rows: number }): void;
}
