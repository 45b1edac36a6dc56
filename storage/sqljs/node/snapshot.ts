/**
 * The snapshot file: the exact bytes of sql.js `export()` followed by a 32-byte trailer that
 * says which journal sequence the image includes. Keeping the sequence inside the same file
 * makes "image + sequence" change in one atomic rename; a separate metadata file could not
 * change together with it, and a table inside the image would be visible to the schema.
 *
 * Trailer layout (little-endian):
 *
 *     offset  size  field
 *          0     8  magic, the ASCII bytes "QLRSNAP1"
 *          8     8  includedSequence (u64; every journal record up to it is in the image)
 *         16     8  imageBytes (u64; the trailer starts at this offset)
 *         24     4  CRC-32 over the image and then trailer bytes 0..24
 *         28     4  reserved, zero
 *
 * The first `imageBytes` bytes are a plain SQLite database file.
 */
import { Buffer } from "node:buffer";
import { QlrError } from "../../../src/errors.ts";
import { crc32, crc32Update } from "../crc32.ts";

const SNAPSHOT_MAGIC = Buffer.from("QLRSNAP1", "latin1");
export const SNAPSHOT_TRAILER_BYTES = 32;

export function encodeSnapshotTrailer(image: Uint8Array, includedSequence: number): Buffer {
  const trailer = Buffer.alloc(SNAPSHOT_TRAILER_BYTES);
  SNAPSHOT_MAGIC.copy(trailer, 0);
  trailer.writeBigUInt64LE(BigInt(includedSequence), 8);
  trailer.writeBigUInt64LE(BigInt(image.length), 16);
  trailer.writeUInt32LE(crc32Update(crc32(image), trailer.subarray(0, 24)), 24);
  return trailer;
}

export interface DecodedSnapshot {
  readonly image: Uint8Array;
  readonly includedSequence: number;
}

/** Validates a snapshot file's bytes; any mismatch is `storage_corrupt` naming `filePath`. */
export function decodeSnapshot(bytes: Buffer, filePath: string): DecodedSnapshot {
  const damaged = (reason: string): QlrError =>
    new QlrError("storage_corrupt", `The snapshot ${filePath} is damaged: ${reason}.`);
  if (bytes.length < SNAPSHOT_TRAILER_BYTES)
    throw damaged(`it has ${bytes.length} bytes, fewer than its trailer`);
  const trailerOffset = bytes.length - SNAPSHOT_TRAILER_BYTES;
  const trailer = bytes.subarray(trailerOffset);
  if (!trailer.subarray(0, 8).equals(SNAPSHOT_MAGIC))
    throw damaged(`its trailer at byte offset ${trailerOffset} has no magic`);
  if (trailer.readBigUInt64LE(16) !== BigInt(trailerOffset))
    throw damaged(`its trailer at byte offset ${trailerOffset} declares another image length`);
  const image = bytes.subarray(0, trailerOffset);
  if (trailer.readUInt32LE(24) !== crc32Update(crc32(image), trailer.subarray(0, 24)))
    throw damaged("its checksum does not match");
  const includedSequence = trailer.readBigUInt64LE(8);
  if (includedSequence > BigInt(Number.MAX_SAFE_INTEGER))
    throw damaged("its sequence number is out of range");
  return { image, includedSequence: Number(includedSequence) };
}
