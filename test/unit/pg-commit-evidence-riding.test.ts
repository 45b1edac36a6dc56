/**
 * Which statements carry the transaction id back for the commit evidence (the PostgreSQL
 * driver's `carryingTransactionId`): the rewrite is pure text, so it is checked as text here;
 * test/storage/postgres-lost-commit.test.ts proves the evidence it carries settles a lost COMMIT.
 */
import { describe, expect, it } from "vitest";
import { carryingTransactionId } from "../../storage/postgres/commit-evidence.ts";

const XID = "pg_current_xact_id_if_assigned()::text AS qlr_commit_xid";

describe("the commit evidence riding on a write", () => {
  it("an INSERT or UPDATE without RETURNING gets one whose rows the caller never sees", () => {
    expect(carryingTransactionId("INSERT INTO runs (id) VALUES ($1)  ")).toEqual({
      sql: `INSERT INTO runs (id) VALUES ($1) RETURNING ${XID}`,
      keepRows: false,
    });
    expect(carryingTransactionId("update runs SET status = $1 WHERE id = $2")).toEqual({
      sql: `update runs SET status = $1 WHERE id = $2 RETURNING ${XID}`,
      keepRows: false,
    });
  });

  it("a statement with its own RETURNING keeps its rows and gets one more column", () => {
    expect(
      carryingTransactionId("UPDATE runs SET version = $1 WHERE id = $2 RETURNING id"),
    ).toEqual({
      sql: `UPDATE runs SET version = $1 WHERE id = $2 RETURNING id, ${XID}`,
      keepRows: true,
    });
  });

  it("reads, purges (DELETE) and several statements in one text are left as they are", () => {
    for (const sql of [
      "SELECT * FROM runs WHERE id = $1",
      "DELETE FROM run_events WHERE run_id = $1",
      "INSERT INTO a VALUES (1); INSERT INTO b VALUES (2)",
      "BEGIN ISOLATION LEVEL SERIALIZABLE",
    ])
      expect(carryingTransactionId(sql)).toBeNull();
  });
});
