import { describe, expect, it } from "vitest";
import { isQlrError } from "../../src/errors.ts";
import {
  arrayLiteral,
  columnArrays,
  MAX_ARRAY_ROWS,
  unnestSql,
} from "../../storage/sql-store/column-arrays.ts";

/**
 * PostgreSQL's array literals as the store writes them (storage/sql-store/column-arrays.ts),
 * without a server; test/storage/column-arrays.test.ts sends them through pg and PGlite.
 */

describe("array literals", () => {
  it("quote every text element and escape only backslash and double quote", () => {
    expect(arrayLiteral(["a", 'b"c', "d\\e", null, "NULL", ""], "text")).toBe(
      '{"a","b\\"c","d\\\\e",NULL,"NULL",""}',
    );
    expect(arrayLiteral([1, null, -2, Number.MAX_SAFE_INTEGER], "integer")).toBe(
      `{1,NULL,-2,${Number.MAX_SAFE_INTEGER}}`,
    );
    expect(arrayLiteral([], "text")).toBe("{}");
    expect(arrayLiteral([], "integer")).toBe("{}");
    // A number in a text column is written as its text, quoted like any other.
    expect(arrayLiteral([7, "a,b", "{x}", " "], "text")).toBe('{"7","a,b","{x}"," "}');
  });

  it("turn rows into one literal per column, in the columns' order, with the casts to match", () => {
    expect(
      columnArrays(
        [
          ["a", 1, null],
          ["b", null, 'q"'],
        ],
        ["text", "integer", "text"],
      ),
    ).toEqual(['{"a","b"}', "{1,NULL}", '{NULL,"q\\""}']);
    expect(unnestSql(["text", "integer", "text"])).toBe(
      "unnest(CAST(? AS TEXT[]), CAST(? AS BIGINT[]), CAST(? AS TEXT[]))",
    );
    expect(MAX_ARRAY_ROWS).toBe(2_048);
  });

  it("refuse a value an integer column cannot hold", () => {
    for (const wrong of ["1", 1.5, Number.MAX_SAFE_INTEGER + 1, Number.NaN]) {
      let refused: unknown = null;
      try {
        arrayLiteral([wrong], "integer");
      } catch (error) {
        refused = error;
      }
      expect(isQlrError(refused, "internal")).toBe(true);
      expect((refused as Error).message).toContain(JSON.stringify(wrong));
    }
  });
});
