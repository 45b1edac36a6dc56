/**
 * Loads sql.js once per Node process. Node-only (it resolves the `.wasm` file through the
 * module resolver); browser and worker runtimes initialise sql.js their own way and pass the
 * resulting `SqlJsStatic` straight to `openSqlJsMemoryDriver` / `openSqlJsFileDriver`.
 */
import { createRequire } from "node:module";
import initSqlJs from "sql.js";
import type { SqlJsStatic } from "sql.js";
import { QlrError } from "../../src/errors.ts";

let loading: Promise<SqlJsStatic> | undefined;

/**
 * The cached sql.js module. Initialisation compiles about 1 MB of WebAssembly, so it happens
 * once; a failed attempt is forgotten so that a later call can try again.
 */
export function loadSqlJs(): Promise<SqlJsStatic> {
  // Starting from a resolved promise turns a synchronous failure (the .wasm not found) into a rejection too.
  loading ??= Promise.resolve().then(initialise).catch((error: unknown) => {
    loading = undefined;
    throw new QlrError("storage_unavailable", "sql.js could not be initialised.", { cause: error });
  });
  return loading;
}

function initialise(): Promise<SqlJsStatic> {
  const wasmPath = createRequire(import.meta.url).resolve("sql.js/dist/sql-wasm.wasm");
  return initSqlJs({ locateFile: () => wasmPath });
}
