/**
 * What the sql.js file store's database is made of: on a copy of the snapshot image, each table
 * (with its indexes) is dropped in turn and the database vacuumed; the shrink is that table's
 * share of the file. sql.js is built without the dbstat table, so this is the exact way to get
 * per-table sizes. `deflatedBytes` is the same shrink measured on the image deflated as a snapshot
 * is (raw deflate, level 6): what a table costs in a checkpoint, where values repeated close by
 * cost little and random ids and digests cost most of their length.
 */
import { readFileSync } from "node:fs";
import { deflateRawSync } from "node:zlib";
import { join } from "node:path";
import { decodeSnapshot } from "../../storage/sqljs/node/snapshot.ts";

export interface TableShare {
  readonly table: string;
  readonly rows: number;
  readonly bytes: number;
  readonly deflatedBytes: number;
}

export async function databaseComposition(
  directory: string,
): Promise<{ totalBytes: number; totalDeflatedBytes: number; tables: TableShare[] }> {
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
    const deflatedSize = (): number => deflateRawSync(db.export(), { level: 6 }).length;
    db.run("VACUUM");
    const totalBytes = size();
    const totalDeflatedBytes = deflatedSize();
    const names = (
      db.exec(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name",
      )[0]?.values ?? []
    ).map((row) => String(row[0]));
    const tables: TableShare[] = [];
    let before = totalBytes;
    let deflatedBefore = totalDeflatedBytes;
    for (const table of names) {
      const quoted = `"${table.replace(/"/g, '""')}"`;
      const rows = Number(db.exec(`SELECT COUNT(*) FROM ${quoted}`)[0]?.values[0]?.[0] ?? 0);
      db.run(`DROP TABLE ${quoted}`);
      db.run("VACUUM");
      const after = size();
      const deflatedAfter = deflatedSize();
      tables.push({
        table,
        rows,
        bytes: before - after,
        deflatedBytes: deflatedBefore - deflatedAfter,
      });
      before = after;
      deflatedBefore = deflatedAfter;
    }
    tables.sort((a, b) => b.bytes - a.bytes);
    return { totalBytes, totalDeflatedBytes, tables };
  } finally {
    db.close();
  }
}
