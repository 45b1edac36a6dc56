import { QlrError } from "../../src/errors.ts";
import type { SqlParam } from "../driver.ts";
import type { ColumnType } from "../rows.ts";

/**
 * PostgreSQL's multi-row statements with one parameter a column: each column's values travel
 * as one array literal and `unnest` turns the arrays back into rows. A `VALUES` list binds one
 * parameter a value (a page of events, 384 rows of 8 columns, is 3,072 of them) and its text
 * changes with the row count, so the server parses, analyses and plans every such statement
 * anew; measured here, inserting rows that way cost the server 8.7–8.9 µs a row against 4.6
 * through arrays (docs/PERFORMANCE.md, "PostgreSQL: a column a parameter"). The text of an
 * array statement depends only on its columns.
 *
 * The literals are written here rather than by a driver, so both PostgreSQL drivers (pg and
 * PGlite) send the same text parameter and the server's `CAST(… AS TEXT[])` reads it.
 */

/** The most rows one array statement writes: pages are smaller; it bounds a statement's size. */
export const MAX_ARRAY_ROWS = 2_048;

/** Backslash and double quote are the two characters a quoted array element escapes. */
const QUOTED_ELEMENT_ESCAPES = /[\\"]/g;

/**
 * The array literal of one column's `values`: `{1,NULL,3}` for integers, `{"a",NULL,"b\"c"}`
 * for text (every element quoted, so that no value reads as NULL, a nested array or a
 * delimiter; a number in a text column is written as its text). An integer column refuses
 * anything but a safe integer: a bug of the caller, never a value to guess at.
 */
export function arrayLiteral(values: readonly SqlParam[], type: ColumnType): string {
  const elements = values.map((value) => {
    if (value === null) return "NULL";
    if (type === "text") return `"${String(value).replace(QUOTED_ELEMENT_ESCAPES, "\\$&")}"`;
    if (!Number.isSafeInteger(value))
      throw new QlrError(
        "internal",
        `an integer column was given ${JSON.stringify(value)}; nothing written`,
      );
    return String(value);
  });
  return `{${elements.join(",")}}`;
}

/** The parameters of an array statement: each column's literal, in the columns' order. */
export function columnArrays(
  rowsToWrite: readonly (readonly SqlParam[])[],
  types: readonly ColumnType[],
): string[] {
  return types.map((type, column) =>
    arrayLiteral(
      rowsToWrite.map((row) => row[column] ?? null),
      type,
    ),
  );
}

/** `unnest(CAST(? AS TEXT[]), CAST(? AS BIGINT[]), …)`: one placeholder a column. */
export function unnestSql(types: readonly ColumnType[]): string {
  const casts = types.map((type) => `CAST(? AS ${type === "integer" ? "BIGINT[]" : "TEXT[]"})`);
  return `unnest(${casts.join(", ")})`;
}
