/**
 * Gives dead database-sized buffers back promptly on the edge profile.
 *
 * sql.js keeps the database file in one JavaScript ArrayBuffer that it replaces with a larger
 * copy as the database grows (every 12.5 %), and each checkpoint's `export()` returns another
 * image-sized copy. Both die young, but V8 frees an ArrayBuffer's memory only when a garbage
 * collection finds it dead, and with Node's default young generation (up to 32 MiB) and a
 * small JavaScript heap that can take minutes: measured with 10,000 runs of history
 * (docs/PERFORMANCE.md), ArrayBuffers stayed at 149 MiB for a live image of 79 MiB, and RSS at
 * 240 MiB instead of 154. So after each cadence cycle the runtime compares the ArrayBuffer
 * total with what was live after the last collection, and when it grew by more than a quarter
 * (at least 4 MiB) it runs one full collection (≈ 15–20 ms on this heap, so at most once per
 * such growth, never per commit). What is still live afterwards becomes the new baseline, so
 * a database that really grew does not cause repeated collections.
 *
 * `gc` is reached the way Node allows from inside a running process: `--expose-gc` set through
 * `v8.setFlagsFromString`, then read from a new context.
 */
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";

const MIN_GROWTH_BYTES = 4 * 1024 * 1024;

export class BufferReclaimer {
  private readonly collect: () => void;
  private liveBytes: number;

  constructor() {
    setFlagsFromString("--expose-gc");
    this.collect = runInNewContext("gc") as () => void;
    this.liveBytes = process.memoryUsage().arrayBuffers;
  }

  /** Cheap (one `process.memoryUsage()`, ≈ 25 µs); collects only after a large growth. */
  afterCycle(): void {
    const bytes = process.memoryUsage().arrayBuffers;
    if (bytes < this.liveBytes) {
      this.liveBytes = bytes;
      return;
    }
    if (bytes - this.liveBytes <= Math.max(MIN_GROWTH_BYTES, this.liveBytes / 4)) return;
    this.collect();
    this.liveBytes = process.memoryUsage().arrayBuffers;
  }
}
