/**
 * What the sql.js file store's journal records are made of: every record of journal.sealed.log
 * (present while a checkpoint is in flight or after one failed) and of journal.log is decoded
 * with the driver's own reader, and its bytes are attributed to the statements in it
 * (the JSON of `[sqlText or id, params]` per statement), to the SQL texts defined the first time
 * (the dictionary), and to the fixed record header and JSON punctuation.
 */
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import {
  RECORD_HEADER_BYTES,
  SqlTextDictionary,
  scanJournal,
} from "../../storage/sqljs/node/journal.ts";

export interface JournalAnatomy {
  readonly records: number;
  readonly totalBytes: number;
  readonly headerBytes: number;
  /** Bytes of SQL texts written the first time they appear (then referenced by id). */
  readonly sqlTextBytes: number;
  readonly statements: { sql: string; count: number; bytes: number }[];
}

/** The journal files in replay order; each starts its own statement ids and compression window. */
export const JOURNAL_FILES = ["journal.sealed.log", "journal.log"] as const;

export function journalAnatomy(directory: string): JournalAnatomy {
  const seen = new Set<string>();
  const byStatement = new Map<string, { count: number; bytes: number }>();
  let records = 0;
  let sqlTextBytes = 0;
  let totalBytes = 0;
  for (const file of JOURNAL_FILES) {
    const path = join(directory, file);
    if (!existsSync(path)) continue;
    const bytes = readFileSync(path);
    totalBytes += bytes.length;
    const dictionary = new SqlTextDictionary();
    scanJournal(bytes, (record) => {
      records += 1;
      for (const statement of dictionary.decodeStatements(record.payload, record.offset)) {
        const key = statement.sql.replace(/\s+/g, " ").trim().slice(0, 60);
        const entry = byStatement.get(key) ?? { count: 0, bytes: 0 };
        entry.count += 1;
        // `[id,params],` as the writer encodes a repeated statement; the first occurrence carries the text instead of the id.
        entry.bytes += Buffer.byteLength(JSON.stringify([0, statement.params])) + 1;
        if (!seen.has(statement.sql)) {
          seen.add(statement.sql);
          sqlTextBytes += Buffer.byteLength(JSON.stringify(statement.sql));
        }
        byStatement.set(key, entry);
      }
    });
  }
  return {
    records,
    totalBytes,
    headerBytes: records * RECORD_HEADER_BYTES,
    sqlTextBytes,
    statements: [...byStatement.entries()]
      .map(([sql, entry]) => ({ sql, ...entry }))
      .sort((a, b) => b.bytes - a.bytes),
  };
}
