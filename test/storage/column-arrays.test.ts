import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { SqlDriver, SqlParam } from "../../storage/driver.ts";
import { columnArrays, unnestSql } from "../../storage/sql-store/column-arrays.ts";
import { DRIVERS } from "../support/drivers.ts";

/**
 * PostgreSQL's multi-row statements send each column's values as one array literal
 * (storage/sql-store/column-arrays.ts). Whatever a row holds must come back from the real
 * server exactly: text with quotes, backslashes, braces, commas, the word NULL, empty text,
 * any Unicode; integers to the edges of the safe range; nulls anywhere. The literals themselves,
 * without a server: test/unit/column-arrays.test.ts.
 */

const POSTGRES_DRIVERS = DRIVERS.filter(
  (factory) => factory.name === "pglite" || factory.name === "postgres",
);

/** `?` placeholders as the store writes them, numbered as the PostgreSQL drivers take them. */
function numbered(sql: string): string {
  let index = 0;
  return sql.replace(/\?/g, () => `$${(index += 1)}`);
}

// PostgreSQL's text holds any character but NUL.
const text = fc.string({ unit: "binary", maxLength: 40 }).map((value) => value.replace(/\0/g, ""));
const tricky = fc.constantFrom(
  "",
  "NULL",
  "null",
  '"',
  "\\",
  '\\"',
  "{}",
  "{a,b}",
  "a,b",
  " padded ",
  "line\nbreak\ttab",
  '{"json":"with \\"quotes\\"","n":[1,2]}',
);
const row = fc.tuple(
  fc.option(fc.oneof(text, tricky), { nil: null }),
  fc.option(fc.integer({ min: -(2 ** 31), max: 2 ** 31 - 1 }), { nil: null }),
  fc.option(
    fc.oneof(
      fc.maxSafeInteger(),
      fc.constantFrom(Number.MAX_SAFE_INTEGER, Number.MIN_SAFE_INTEGER, 0),
    ),
    { nil: null },
  ),
);

describe.each(POSTGRES_DRIVERS)("column arrays on $name", (factory) => {
  let driver: SqlDriver;

  beforeAll(async () => {
    driver = await factory.open();
    await driver.transaction(async (tx) => {
      await tx.query(
        "CREATE TABLE arrays_probe (n BIGINT PRIMARY KEY, t TEXT, i INTEGER, b BIGINT)",
      );
    });
  });

  afterAll(async () => {
    await driver.close();
  });

  it("writes every row through arrays exactly as it reads it back", async () => {
    let batch = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(row, { minLength: 1, maxLength: 12 }), async (rows) => {
        batch += 1;
        const written: SqlParam[][] = rows.map((values, index) => [batch * 100 + index, ...values]);
        const types = ["integer", "text", "integer", "integer"] as const;
        const read = await driver.transaction(async (tx) => {
          await tx.query(
            numbered(`INSERT INTO arrays_probe (n, t, i, b) SELECT * FROM ${unnestSql(types)}`),
            columnArrays(written, types),
          );
          return tx.query(
            "SELECT n, t, i, b FROM arrays_probe WHERE n >= $1 AND n < $2 ORDER BY n",
            [batch * 100, batch * 100 + 100],
          );
        });
        expect(
          read.map((found) => [
            Number(found.n),
            found.t,
            found.i === null ? null : Number(found.i),
            found.b === null ? null : Number(found.b),
          ]),
        ).toEqual(written);
      }),
      { numRuns: 60 },
    );
  });

  it("updates rows by id and version through arrays, as the change writer does", async () => {
    const types = ["integer", "text"] as const;
    await driver.transaction(async (tx) => {
      await tx.query(
        numbered(`INSERT INTO arrays_probe (n, t) SELECT * FROM ${unnestSql(types)}`),
        columnArrays(
          [
            [1_000_001, "before"],
            [1_000_002, "before"],
          ],
          types,
        ),
      );
    });
    const updated = await driver.transaction((tx) =>
      tx.query(
        numbered(
          `UPDATE arrays_probe AS t SET t = v.c2 FROM ${unnestSql(types)} AS v(c1, c2) WHERE t.n = v.c1 RETURNING t.n`,
        ),
        columnArrays(
          [
            [1_000_001, 'after "one"'],
            [1_000_002, null],
            [1_000_003, "no such row"],
          ],
          types,
        ),
      ),
    );
    expect(updated.map((found) => Number(found.n)).sort()).toEqual([1_000_001, 1_000_002]);
    const read = await driver.transaction((tx) =>
      tx.query("SELECT n, t FROM arrays_probe WHERE n > 1000000 ORDER BY n"),
    );
    expect(read.map((found) => [Number(found.n), found.t])).toEqual([
      [1_000_001, 'after "one"'],
      [1_000_002, null],
    ]);
  });
});
