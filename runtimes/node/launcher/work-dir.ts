import { chownSync, mkdirSync } from "node:fs";
import { errorCode, errorMessage } from "../../../src/errors.ts";

/**
 * Creates an attempt's own work dir (`work/<attemptId>/`, for a task that declares no `cwd`):
 * owner-only, and the task user's when there is one (the task changes into it before it drops
 * to that uid; the state dir above stays closed to it). The supervisor does it right before the
 * spawn; the launcher only for a resident supervisor of an older build that does not announce
 * `create-cwd`. Synchronous: a mkdir in the page cache, no fsync (nothing is lost with it after
 * a crash, and retention removes what a crash leaves). Null when it is ready, else why not.
 */
export function createWorkDir(
  path: string,
  owner: { readonly uid: number; readonly gid: number } | null,
): string | null {
  try {
    mkdirSync(path, { recursive: true, mode: 0o700 });
    if (owner !== null) chownSync(path, owner.uid, owner.gid);
    return null;
  } catch (error) {
    return `the working directory ${path} could not be prepared: ${errorCode(error) ?? errorMessage(error)}`;
  }
}
