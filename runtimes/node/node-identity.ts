import { randomBytes } from "node:crypto";
import { readFile } from "node:fs/promises";
import { hostname } from "node:os";
import { join } from "node:path";
import { QlrError } from "../../src/errors.ts";
import { validateNodeIdentity, type NodeIdentity } from "../../src/ownership.ts";
import { createFileExclusiveDurable, ensureDurableDirectories } from "./launcher/durable-file.ts";
import { readBootId } from "./launcher/index.ts";

/** The file in the state dir that names this runtime's node in a shared store. */
export const NODE_ID_FILE = "node-id";

/**
 * This runtime's node identity: the id is created once per state dir and kept there (durably,
 * before any attempt is dispatched under it), so a runtime restarted on the same state dir is
 * the same node and recognises the attempts it dispatched before (src/ownership.ts).
 */
export async function loadOrCreateNodeIdentity(stateDir: string): Promise<NodeIdentity> {
  const path = join(stateDir, NODE_ID_FILE);
  let nodeId = await readNodeId(path);
  if (nodeId === null) {
    const tmpDir = join(stateDir, "tmp");
    await ensureDurableDirectories(stateDir, [tmpDir]);
    try {
      await createFileExclusiveDurable(path, tmpDir, `n-${randomBytes(12).toString("hex")}\n`);
    } catch (error) {
      // Another process created it first: both are the same node then.
      if ((error as { code?: unknown }).code !== "EEXIST") throw error;
    }
    nodeId = await readNodeId(path);
    if (nodeId === null)
      throw new QlrError(
        "storage_unavailable",
        `node id file ${path} vanished right after it was created`,
      );
  }
  return validateNodeIdentity({
    nodeId,
    host: hostname().slice(0, 255) || "unknown",
    bootId: await readBootId("/proc"),
  });
}

async function readNodeId(path: string): Promise<string | null> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (error) {
    if ((error as { code?: unknown }).code === "ENOENT") return null;
    throw error;
  }
  const nodeId = text.trim();
  if (!/^[A-Za-z0-9_.-]{1,64}$/.test(nodeId))
    throw new QlrError(
      "integrity",
      `node id file ${path} does not hold a node id; it is never replaced automatically (attempts in the store name it)`,
    );
  return nodeId;
}
