import * as nodeCrypto from "node:crypto";
import { useNativeSha256, type Sha256Hex } from "../../src/digest.ts";

/**
 * Node's sha256 for the core's digests and derived ids (`useNativeSha256` checks it against
 * the portable one before it is used). `crypto.hash`, a one-shot without a Hash object, exists
 * from Node 20.12 and 21.7; `createHash` serves older ones.
 */
export const nodeSha256Hex: Sha256Hex =
  typeof nodeCrypto.hash === "function"
    ? (text) => nodeCrypto.hash("sha256", text, "hex")
    : (text) => nodeCrypto.createHash("sha256").update(text).digest("hex");

/** Called once by every Node entry point (`qlr` and the bench children that stand in for it). */
export function useNodeSha256(): void {
  useNativeSha256(nodeSha256Hex);
}
