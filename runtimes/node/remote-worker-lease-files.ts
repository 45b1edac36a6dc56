import { readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { assertPortableId, isPortableId } from "../../src/identity.ts";
import type { Lease } from "../../src/lease-service.ts";
import { LEASE_SECRET_PATTERN } from "../../src/leases.ts";
import { errorMessage } from "../../src/errors.ts";
import type { ProcessHandle } from "./launcher/index.ts";

/**
 * The remote worker's leases in its state dir (`leases/<attemptId>.json`), one file per held
 * lease, so a restarted worker re-adopts running processes or reports them from their receipts.
 */

/** A lease this worker holds, with what it has done about it in this life. */
export interface HeldLease {
  readonly lease: Lease;
  readonly workerId: string;
  handle: ProcessHandle | null;
  /** The receipt is reported and acknowledged: the lease file can go. */
  done: boolean;
  lastHeartbeatMs: number;
  /** When the process (or, without a handle, its supervisor) was first seen gone without a receipt. */
  goneSinceMs: number | null;
  /** The coordinator acknowledged the running report with this handle (in this life). */
  runningReported: boolean;
  /** A stop was asked of the supervisor for this handle-less lease: asked once per life. */
  stopAsked: boolean;
  /** The last condition logged for this lease, so a lease waiting round after round logs it once. */
  noted: string | null;
}

/** What a lease file holds. */
interface SavedLease {
  lease: Lease;
  workerId: string;
  handle: ProcessHandle | null;
}

export class LeaseFiles {
  constructor(
    private readonly dir: string,
    private readonly log: (line: string) => void,
  ) {}

  private path(attemptId: string): string {
    return join(this.dir, `${assertPortableId(attemptId, "attemptId")}.json`);
  }

  /**
   * The lease file holds the lease secret (the coordinator keeps only its digest, so a worker
   * that lost it could never report this attempt again): owner-only, written whole and renamed
   * into place.
   */
  async persist(held: HeldLease): Promise<void> {
    const path = this.path(held.lease.attemptId);
    await writeFile(
      `${path}.tmp`,
      JSON.stringify({ lease: held.lease, workerId: held.workerId, handle: held.handle }),
      { mode: 0o600 },
    );
    await rename(`${path}.tmp`, path);
  }

  /** The attempt is settled on the coordinator: its lease file goes. */
  async remove(attemptId: string): Promise<void> {
    await rm(this.path(attemptId), { force: true });
  }

  /** The leases a previous life of worker `workerId` left in the state dir, to re-adopt. */
  async readopt(workerId: string): Promise<HeldLease[]> {
    const adopted: HeldLease[] = [];
    for (const name of await readdir(this.dir)) {
      if (!name.endsWith(".json")) continue;
      const attemptId = name.slice(0, -".json".length);
      if (!isPortableId(attemptId)) {
        this.log(`ignoring lease file with a non-portable name: ${name}`);
        continue;
      }
      try {
        const saved = JSON.parse(await readFile(join(this.dir, name), "utf8")) as SavedLease;
        if (saved.lease.attemptId !== attemptId || saved.workerId !== workerId) continue;
        if (
          typeof saved.lease.leaseSecret !== "string" ||
          !LEASE_SECRET_PATTERN.test(saved.lease.leaseSecret)
        ) {
          this.log(
            `lease file ${name} has no lease secret (written by an older worker); the coordinator settles its attempt when the lease expires`,
          );
          continue;
        }
        adopted.push({
          lease: saved.lease,
          workerId: saved.workerId,
          handle: saved.handle,
          done: false,
          lastHeartbeatMs: 0,
          goneSinceMs: null,
          // Reported again after a restart: a repeated report with the same handle writes nothing.
          runningReported: false,
          stopAsked: false,
          noted: null,
        });
        this.log(`re-adopted lease of ${attemptId}`);
      } catch (error) {
        this.log(`unreadable lease file ${name}: ${errorMessage(error)}`);
      }
    }
    return adopted;
  }
}
