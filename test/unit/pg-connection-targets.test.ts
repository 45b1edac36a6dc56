import { describe, expect, it } from "vitest";
import { isQlrError } from "../../src/errors.ts";
import {
  isReadOnlyServer,
  isServerSwitchFailure,
  toQlrError,
} from "../../storage/postgres/errors.ts";
import { parseConnectionTargets } from "../../storage/postgres/connection-targets.ts";

const serverError = (code: string, message = `server says ${code}`): Error =>
  Object.assign(new Error(message), { code, severity: "ERROR" });

describe("a multi-host database URL", () => {
  it("splits into one single-host URL per server and reads target_session_attrs", () => {
    expect(
      parseConnectionTargets(
        "postgres://qlr:s%40cret@db1:5432,db2:6432,[::1]:7432/qlr?sslmode=disable&target_session_attrs=read-write",
      ),
    ).toEqual({
      servers: [
        {
          label: "db1:5432",
          connectionString: "postgres://qlr:s%40cret@db1:5432/qlr?sslmode=disable",
        },
        {
          label: "db2:6432",
          connectionString: "postgres://qlr:s%40cret@db2:6432/qlr?sslmode=disable",
        },
        {
          label: "[::1]:7432",
          connectionString: "postgres://qlr:s%40cret@[::1]:7432/qlr?sslmode=disable",
        },
      ],
      requireReadWrite: true,
    });
  });

  it("keeps a single-host URL as it is, any server by default, primary meaning read-write", () => {
    expect(parseConnectionTargets("postgresql://u:p@h:1/d")).toEqual({
      servers: [{ label: "h:1", connectionString: "postgresql://u:p@h:1/d" }],
      requireReadWrite: false,
    });
    expect(
      parseConnectionTargets("postgres://h/d?target_session_attrs=primary").requireReadWrite,
    ).toBe(true);
    expect(parseConnectionTargets("host=h dbname=d").servers).toEqual([
      { label: "server", connectionString: "host=h dbname=d" },
    ]);
  });

  it("refuses an unknown target_session_attrs, an empty host entry and too many hosts", () => {
    const failures = [
      "postgres://h/d?target_session_attrs=standby",
      "postgres://h1,,h2/d",
      `postgres://${Array.from({ length: 17 }, (_, index) => `h${index}`).join(",")}/d`,
    ].map((url) => {
      try {
        parseConnectionTargets(url);
        return undefined;
      } catch (error) {
        return error;
      }
    });
    for (const failure of failures) expect(isQlrError(failure, "invalid_request")).toBe(true);
  });
});

describe("what a failover looks like to the driver", () => {
  it("a standby's refusals are read-only server errors, mapped to storage_unavailable", () => {
    const readOnly = serverError("25006", "cannot execute INSERT in a read-only transaction");
    const serializable = serverError("0A000", "cannot use serializable mode in a hot standby");
    for (const error of [readOnly, serializable]) {
      expect(isReadOnlyServer(error)).toBe(true);
      expect(isServerSwitchFailure(toQlrError(error))).toBe(true);
      expect(toQlrError(error).code).toBe("storage_unavailable");
    }
    // Another unsupported feature is the statement's problem, not the server's.
    expect(isReadOnlyServer(serverError("0A000", "cannot do that"))).toBe(false);
    expect(toQlrError(serverError("0A000", "cannot do that")).code).toBe("internal");
  });

  it("lost connections and shutdowns are switch failures; serialization failures and bad statements are not", () => {
    expect(
      isServerSwitchFailure(Object.assign(new Error("refused"), { code: "ECONNREFUSED" })),
    ).toBe(true);
    expect(isServerSwitchFailure(new Error("Connection terminated unexpectedly"))).toBe(true);
    expect(isServerSwitchFailure(serverError("57P01"))).toBe(true);
    expect(isServerSwitchFailure(serverError("40001"))).toBe(false);
    expect(isServerSwitchFailure(serverError("42601"))).toBe(false);
    expect(isServerSwitchFailure(serverError("23505"))).toBe(false);
  });
});
