/**
 * Loads sql.js once per Node process. Node-only (it resolves the `.wasm` file through the
 * module resolver); browser and worker runtimes initialise sql.js their own way and pass the
 * resulting `SqlJsStatic` straight to `openSqlJsMemoryDriver` / `openSqlJsFileDriver`.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { setFlagsFromString } from "node:v8";
import initSqlJs from "sql.js";
import type { SqlJsStatic } from "sql.js";
import { QlrError } from "../../../src/errors.ts";
import { rememberSqlJsWasmMemory } from "./wasm-memory.ts";

export interface LoadSqlJsOptions {
  /**
   * Compile sql.js with V8's baseline WebAssembly compiler (Liftoff) only, never with its
   * optimizing tier (TurboFan). Measured on Node 20 (docs/PERFORMANCE.md): TurboFan's
   * background recompilation of SQLite's hot functions costs 20–35 MiB of RSS, part of it
   * for good (optimized code) and part as peaks while it compiles, and a small transaction is
   * only ≈ 5–10 % faster for it. The device on the edge profile asks for this; V8 reads the
   * flag when a module is compiled, so it is set just before the compilation, and it applies
   * to every WebAssembly module this process compiles afterwards (it is process-wide).
   */
  readonly baselineCompilerOnly?: boolean;
}

let loading: Promise<SqlJsStatic> | undefined;

/**
 * The cached sql.js module. Initialisation compiles about 1 MB of WebAssembly, so it happens
 * once; a failed attempt is forgotten so that a later call can try again. The first call's
 * options decide how the module is compiled.
 */
export function loadSqlJs(options: LoadSqlJsOptions = {}): Promise<SqlJsStatic> {
  // Starting from a resolved promise turns a synchronous failure (the .wasm not found) into a rejection too.
  loading ??= Promise.resolve()
    .then(() => initialise(options))
    .catch((error: unknown) => {
      loading = undefined;
      throw new QlrError("storage_unavailable", "sql.js could not be initialised.", {
        cause: error,
      });
    });
  return loading;
}

function initialise(options: LoadSqlJsOptions): Promise<SqlJsStatic> {
  const wasmPath = createRequire(import.meta.url).resolve("sql.js/dist/sql-wasm.wasm");
  const wasmBytes = readFileSync(wasmPath);
  if (options.baselineCompilerOnly === true) setFlagsFromString("--liftoff-only");
  return new Promise<SqlJsStatic>((resolve, reject) => {
    // Instantiated here rather than by sql.js so that its memory can be measured (wasm-memory.ts); the
    // instance is handed over exactly as sql.js's own loader would (Emscripten's
    // `instantiateWasm` hook). A failed instantiation rejects instead of leaving sql.js waiting.
    const instantiateWasm = (
      imports: WebAssembly.Imports,
      done: (instance: WebAssembly.Instance) => void,
    ): object => {
      WebAssembly.instantiate(wasmBytes, imports).then((result) => {
        rememberSqlJsWasmMemory(
          Object.values(result.instance.exports).find(
            (value): value is WebAssembly.Memory => value instanceof WebAssembly.Memory,
          ),
        );
        done(result.instance);
      }, reject);
      return {};
    };
    initSqlJs({ locateFile: () => wasmPath, instantiateWasm } as Parameters<
      typeof initSqlJs
    >[0]).then(resolve, reject);
  });
}
