/**
 * The snapshot file: the sql.js `export()` image, compressed in independent frames, followed
 * by a 32-byte trailer that says which journal sequence the image includes. Keeping the
 * sequence inside the same file makes "image + sequence" change in one atomic rename; a
 * separate metadata file could not change together with it, and a table inside the image would
 * be visible to the schema.
 *
 * Why compressed: a checkpoint rewrites the whole image, and that rewrite was 73 % of the bytes
 * a workflow step wrote. SQLite pages holding JSON bodies, ids and digests deflate ≈ 4×, so the
 * snapshot and the journal that may grow to its size (the checkpoint threshold follows it) both
 * shrink by that much. Why frames: each frame is at most `SNAPSHOT_FRAME_IMAGE_BYTES` of image,
 * deflated on its own and written before the next is made, so a checkpoint holds one
 * compressed frame beside the exported image, never a second image-sized buffer; deflate's
 * window is 32 KiB, so a frame boundary every MiB costs nothing measurable in size.
 *
 * Layout (little-endian), format 2: frames, then the trailer.
 *
 *     frame:   offset  size  field
 *                   0     4  storedBytes (the deflate stream that follows)
 *                   4     4  imageBytes (what it inflates to; at most MAX_FRAME_IMAGE_BYTES)
 *                   8     n  raw deflate stream
 *
 *     trailer: offset  size  field
 *                   0     8  magic, the ASCII bytes "QLRSNAP2"
 *                   8     8  includedSequence (u64; every journal record up to it is in the image)
 *                  16     8  payloadBytes (u64; the frames' total length, where the trailer starts)
 *                  24     4  imageBytes (u32; the sum of the frames' imageBytes)
 *                  28     4  CRC-32 over the frames and then trailer bytes 0..28
 *
 * Format 1 (magic "QLRSNAP1", written before compression) is still read: the image itself,
 * then magic (8), includedSequence (8), imageBytes u64 (8), CRC-32 over the image and trailer
 * bytes 0..24 (4), reserved (4).
 *
 * The checksum is checked over the whole file before anything is inflated, so a torn or
 * damaged file is refused as such, never handed to zlib or SQLite.
 */
import { Buffer } from "node:buffer";
import { deflateRaw, deflateRawSync, inflateRawSync } from "node:zlib";
import { QlrError } from "../../../src/errors.ts";
import { crc32, crc32Update } from "../crc32.ts";

const SNAPSHOT_MAGIC_V1 = Buffer.from("QLRSNAP1", "latin1");
const SNAPSHOT_MAGIC_V2 = Buffer.from("QLRSNAP2", "latin1");
export const SNAPSHOT_TRAILER_BYTES = 32;
const FRAME_HEADER_BYTES = 8;
/** The image bytes a frame holds when the writer is not told otherwise. */
export const SNAPSHOT_FRAME_IMAGE_BYTES = 1024 * 1024;
/** The most image bytes one frame may declare (bounds what one inflate may produce). */
const MAX_FRAME_IMAGE_BYTES = 64 * 1024 * 1024;
/** sql.js keeps the image in one ArrayBuffer; the trailer's field is a u32. */
const MAX_IMAGE_BYTES = 0xffff_ffff;
/**
 * Deflate level 6 (zlib's default): on a 6.3 MB bench image it wrote 4.16× fewer bytes, level 1
 * 3.89× in three quarters of the time. A checkpoint comes once per snapshot-sized journal, so
 * its time is amortised over thousands of commits; its bytes are what the flash pays.
 */
const DEFLATE_LEVEL = 6;

/** Compresses one slice of the image into a raw deflate stream (on the thread pool in production). */
export type SnapshotFrameDeflater = (piece: Uint8Array) => Promise<Buffer>;

/** The synchronous deflater: the one the simulated file systems of the tests use, so their runs stay deterministic. */
export function deflateFrameSync(piece: Uint8Array): Buffer {
  return deflateRawSync(piece, { level: DEFLATE_LEVEL });
}

/** The deflater of a checkpoint in production: zlib on libuv's thread pool, off the event loop. */
export function deflateFrameOnThreadPool(piece: Uint8Array): Promise<Buffer> {
  return new Promise((resolvePromise, reject) => {
    deflateRaw(piece, { level: DEFLATE_LEVEL }, (error, stream) => {
      if (error === null) resolvePromise(stream);
      else reject(error);
    });
  });
}

/**
 * The snapshot file's bytes in the order they are to be written: one buffer per frame, the
 * trailer last. Lazy, so the writer holds one compressed frame at a time.
 */
export function* encodeSnapshot(
  image: Uint8Array,
  includedSequence: number,
  frameImageBytes = SNAPSHOT_FRAME_IMAGE_BYTES,
): Generator<Buffer, void, undefined> {
  const encoder = new SnapshotEncoder(image, includedSequence, frameImageBytes);
  for (const piece of encoder.pieces()) yield encoder.frame(piece, deflateFrameSync(piece));
  yield encoder.trailer();
}

/**
 * The same bytes as `encodeSnapshot`, each frame compressed by `deflate`, so a checkpoint can
 * leave the compression to another thread while the commits go on.
 */
export async function* encodeSnapshotAsync(
  image: Uint8Array,
  includedSequence: number,
  frameImageBytes: number,
  deflate: SnapshotFrameDeflater,
): AsyncGenerator<Buffer, void, undefined> {
  const encoder = new SnapshotEncoder(image, includedSequence, frameImageBytes);
  for (const piece of encoder.pieces()) yield encoder.frame(piece, await deflate(piece));
  yield encoder.trailer();
}

/** Frames an image's slices and computes the trailer over them (the layout at the top of this file). */
class SnapshotEncoder {
  private readonly frameBytes: number;
  private crc = 0;
  private payloadBytes = 0;

  constructor(
    private readonly image: Uint8Array,
    private readonly includedSequence: number,
    frameImageBytes: number,
  ) {
    if (image.length > MAX_IMAGE_BYTES)
      throw new QlrError(
        "limit_exceeded",
        `The database image is ${image.length} bytes; a snapshot holds at most ${MAX_IMAGE_BYTES}.`,
      );
    this.frameBytes = Math.min(MAX_FRAME_IMAGE_BYTES, Math.max(1, Math.floor(frameImageBytes)));
  }

  *pieces(): Generator<Uint8Array, void, undefined> {
    // Bounded by the image: each iteration consumes `frameBytes` of it.
    for (let offset = 0; offset < this.image.length; offset += this.frameBytes)
      yield this.image.subarray(offset, Math.min(this.image.length, offset + this.frameBytes));
  }

  frame(piece: Uint8Array, stream: Buffer): Buffer {
    const frame = Buffer.allocUnsafe(FRAME_HEADER_BYTES + stream.length);
    frame.writeUInt32LE(stream.length, 0);
    frame.writeUInt32LE(piece.length, 4);
    stream.copy(frame, FRAME_HEADER_BYTES);
    this.crc = crc32Update(this.crc, frame);
    this.payloadBytes += frame.length;
    return frame;
  }

  trailer(): Buffer {
    const trailer = Buffer.alloc(SNAPSHOT_TRAILER_BYTES);
    SNAPSHOT_MAGIC_V2.copy(trailer, 0);
    trailer.writeBigUInt64LE(BigInt(this.includedSequence), 8);
    trailer.writeBigUInt64LE(BigInt(this.payloadBytes), 16);
    trailer.writeUInt32LE(this.image.length, 24);
    trailer.writeUInt32LE(crc32Update(this.crc, trailer.subarray(0, 28)), 28);
    return trailer;
  }
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
  const magic = trailer.subarray(0, 8);
  if (magic.equals(SNAPSHOT_MAGIC_V1)) return decodeVersion1(bytes, trailerOffset, damaged);
  if (!magic.equals(SNAPSHOT_MAGIC_V2))
    throw damaged(`its trailer at byte offset ${trailerOffset} has no magic`);
  if (trailer.readBigUInt64LE(16) !== BigInt(trailerOffset))
    throw damaged(`its trailer at byte offset ${trailerOffset} declares another payload length`);
  const payload = bytes.subarray(0, trailerOffset);
  if (trailer.readUInt32LE(28) !== crc32Update(crc32(payload), trailer.subarray(0, 28)))
    throw damaged("its checksum does not match");
  const includedSequence = readSequence(trailer, damaged);
  const imageBytes = trailer.readUInt32LE(24);
  const image = new Uint8Array(imageBytes);
  let filled = 0;
  let offset = 0;
  // Bounded by the payload: each iteration consumes one frame of at least its header, or throws.
  while (offset < payload.length) {
    if (payload.length - offset < FRAME_HEADER_BYTES)
      throw damaged(`the frame at byte offset ${offset} has an incomplete header`);
    const storedBytes = payload.readUInt32LE(offset);
    const frameImageBytes = payload.readUInt32LE(offset + 4);
    const streamStart = offset + FRAME_HEADER_BYTES;
    if (streamStart + storedBytes > payload.length)
      throw damaged(`the frame at byte offset ${offset} runs past the payload`);
    if (frameImageBytes > MAX_FRAME_IMAGE_BYTES || filled + frameImageBytes > imageBytes)
      throw damaged(`the frame at byte offset ${offset} declares too many image bytes`);
    let inflated: Buffer;
    try {
      inflated = inflateRawSync(payload.subarray(streamStart, streamStart + storedBytes), {
        maxOutputLength: Math.max(1, frameImageBytes),
      });
    } catch (error) {
      throw new QlrError(
        "storage_corrupt",
        `The snapshot ${filePath} is damaged: the frame at byte offset ${offset} does not inflate.`,
        { cause: error },
      );
    }
    if (inflated.length !== frameImageBytes)
      throw damaged(`the frame at byte offset ${offset} inflates to another length`);
    image.set(inflated, filled);
    filled += inflated.length;
    offset = streamStart + storedBytes;
  }
  if (filled !== imageBytes) throw damaged("its frames hold fewer bytes than its trailer declares");
  return { image, includedSequence };
}

function decodeVersion1(
  bytes: Buffer,
  trailerOffset: number,
  damaged: (reason: string) => QlrError,
): DecodedSnapshot {
  const trailer = bytes.subarray(trailerOffset);
  if (trailer.readBigUInt64LE(16) !== BigInt(trailerOffset))
    throw damaged(`its trailer at byte offset ${trailerOffset} declares another image length`);
  const image = bytes.subarray(0, trailerOffset);
  if (trailer.readUInt32LE(24) !== crc32Update(crc32(image), trailer.subarray(0, 24)))
    throw damaged("its checksum does not match");
  return { image, includedSequence: readSequence(trailer, damaged) };
}

function readSequence(trailer: Buffer, damaged: (reason: string) => QlrError): number {
  const includedSequence = trailer.readBigUInt64LE(8);
  if (includedSequence > BigInt(Number.MAX_SAFE_INTEGER))
    throw damaged("its sequence number is out of range");
  return Number(includedSequence);
}
