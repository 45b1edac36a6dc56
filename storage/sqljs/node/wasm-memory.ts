/**
 * Where load.ts leaves sql.js's WebAssembly memory, so that a runtime can report its size
 * without importing sql.js itself (a device on another store never loads it). Node-only in
 * practice; it imports nothing.
 */
let memory: WebAssembly.Memory | undefined;

export function rememberSqlJsWasmMemory(value: WebAssembly.Memory | undefined): void {
  memory = value;
}

/**
 * The size of sql.js's WebAssembly memory in bytes (SQLite's heap: page cache, statements,
 * the rollback journal of an open transaction, sort space), or null while sql.js is not
 * loaded through load.ts. It only grows: WebAssembly memory is never given back, and pages
 * never touched cost no RSS. The database file is not in it: sql.js keeps that in a
 * JavaScript ArrayBuffer, counted in `process.memoryUsage().arrayBuffers`.
 */
export function sqlJsWasmMemoryBytes(): number | null {
  return memory?.buffer.byteLength ?? null;
}
