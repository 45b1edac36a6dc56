/**
 * What the sql.js file store's database is made of: on a copy of the snapshot image, each table
 * (with its indexes) is dropped in turn and the database vacuumed; the shrink is that table's
 * share of the file. sql.js is built without the dbstat table, so this is the exact way to get
 * per-table sizes.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { decodeSnapshot } from "../../storage/sqljs/node/snapshot.ts";

export interface TableShare {
  readonly table: string;
  readonly rows: number;
  readonly bytes: number;
}

export async function databaseComposition(
  directory: string,
): Promise<{ totalBytes: number; tables: TableShare[] }> {
  const { loadSqlJs } = await import("../../storage/sqljs/node/load.ts");
  const SQL = await loadSqlJs();
  const path = join(directory, "snapshot.sqlite");
  const { image } = decodeSnapshot(readFileSync(path), path);
  const db = new SQL.Database(image);
  try {
    const size = (): number => {
      const pages = Number(db.exec("PRAGMA page_count")[0]?.values[0]?.[0] ?? 0);
      const pageSize = Number(db.exec("PRAGMA page_size")[0]?.values[0]?.[0] ?? 0);
      return pages * pageSize;
    };
    db.run("VACUUM");
    const totalBytes = size();
    const names = (
      db.exec(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
      )[0]?.values ?? []
    ).map((row) => String(row[0]));
    const tables: TableShare[] = [];
    let before = totalBytes;
    for (const table of names) {
      const quoted = `"${table.replace(/"/g, '""')}"`;
      const rows = Number(db.exec(`SELECT COUNT(*) FROM ${quoted}`)[0]?.values[0]?.[0] ?? 0);
      db.run(`DROP TABLE ${quoted}`);
      db.run("VACUUM");
      const after = size();
      tables.push({ table, rows, bytes: before - after });
      before = after;
    }
    tables.sort((a, b) => b.bytes - a.bytes);
    return { totalBytes, tables };
  } finally {
    db.close();
  }
}
