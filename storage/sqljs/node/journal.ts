/**
 * The file driver's append-only journal format: one record per committed write transaction.
 *
 * Record layout (little-endian, 20-byte header, then the payload):
 *
 *     offset  size  field
 *          0     4  magic, the ASCII bytes "QLJ1"
 *          4     4  payloadBytes
 *          8     8  sequence (u64; 1 for the first commit ever, +1 per commit, never reset)
 *         16     4  CRC-32 over bytes 4..16 of the header and then the payload
 *         20     n  payload: UTF-8 JSON array of the transaction's write statements, in order,
 *                   or the byte 0x01 and that JSON compressed with raw deflate, whose preset
 *                   dictionary is the last 8 KiB of the JSON of the records before it
 *
 * Each statement is `[sqlText, params?]` the first time its SQL text appears in the journal,
 * which also gives that text the next id (0, 1, 2, …), and `[id, params?]` afterwards; a
 * checkpoint empties the journal and starts the ids again. Parameterised statements repeat,
 * so most records carry only ids and parameters; that keeps the bytes written per commit small.
 *
 * Torn tail versus damage. A record fails validation when its header is incomplete, its magic
 * is wrong, its declared length runs past the end of the file or over the limit, or its CRC
 * does not match. Such a record is a torn tail (an append a crash interrupted) exactly when no
 * valid record starts anywhere after its offset: the open truncates it away. When a valid
 * record does follow, the journal was damaged in the middle and the open refuses with
 * `storage_corrupt` naming the byte offset, because truncating there would drop acknowledged
 * commits. Only one append is ever in flight, so only the last record can legitimately be torn.
 */
import { Buffer } from "node:buffer";
import { constants as zlibConstants, deflateRawSync, inflateRawSync } from "node:zlib";
import { QlrError } from "../../../src/errors.ts";
import type { SqlParam } from "../../driver.ts";
import type { RecordedWrite } from "../connection.ts";
import { crc32, crc32Update } from "../crc32.ts";

export const JOURNAL_MAGIC = Buffer.from("QLJ1", "latin1");
export const RECORD_HEADER_BYTES = 20;
/** A transaction whose journal record would exceed this is refused before anything is written. */
export const MAX_RECORD_PAYLOAD_BYTES = 16 * 1024 * 1024;
/** The first payload byte of a compressed record (a JSON payload starts with `[`). */
const COMPRESSED_PAYLOAD_MARK = 0x01;
/** Deflate's window: the preceding payloads it may refer to. */
const COMPRESSION_WINDOW_BYTES = 8 * 1024;

/**
 * The statements of one record as JSON, then compressed with raw deflate whose preset
 * dictionary is the JSON of the records before it in this journal (the last 8 KiB): one
 * transaction's parameters repeat the previous ones' ids, column values, event kinds and
 * receipt bodies, so a record shrinks to its differences. Kept uncompressed when that is not
 * smaller. Replay decodes in order from the start of the journal, as the statement ids
 * already require.
 */
function compressPayload(json: Buffer, window: Buffer): Buffer {
  const compressed = deflateRawSync(json, {
    level: 6,
    // A 16 KiB window holds the 8 KiB dictionary and as much of the record again, and a
    // smaller hash table suits records of a few KiB: zlib's state is set up for every record,
    // and at its defaults (32 KiB, memLevel 8) that setup was ≈ 40 % of a small record's cost,
    // for the same bytes out. Replay inflates with the default window, which reads any
    // smaller one.
    windowBits: 14,
    memLevel: 5,
    strategy: zlibConstants.Z_DEFAULT_STRATEGY,
    ...(window.length > 0 ? { dictionary: window } : {}),
  });
  if (compressed.length + 1 >= json.length) return json;
  const payload = Buffer.allocUnsafe(compressed.length + 1);
  payload[0] = COMPRESSED_PAYLOAD_MARK;
  compressed.copy(payload, 1);
  return payload;
}

function nextWindow(window: Buffer, json: Buffer): Buffer {
  const joined = Buffer.concat([window, json]);
  return joined.length <= COMPRESSION_WINDOW_BYTES
    ? joined
    : Buffer.from(joined.subarray(joined.length - COMPRESSION_WINDOW_BYTES));
}

/**
 * The per-journal numbering of SQL texts. Ids become permanent only when the record defining
 * them is durable and committed (`adopt`), so a failed append leaves the numbering unchanged.
 */
export interface RecordAdoption {
  /** The SQL texts the record defines. */
  readonly addedTexts: readonly string[];
  /** The compression window once the record is kept. */
  readonly window: Buffer;
}

export class SqlTextDictionary {
  private readonly ids = new Map<string, number>();
  private readonly texts: string[] = [];
  private window: Buffer = Buffer.alloc(0);

  /** Encodes a record; `adoption` is what to `adopt` once it is kept (texts it defines, the next compression window). */
  encodeRecord(
    sequence: number,
    writes: readonly RecordedWrite[],
  ): { bytes: Buffer; adoption: RecordAdoption } {
    const addedTexts: string[] = [];
    const pendingIds = new Map<string, number>();
    const statements = writes.map((write) => {
      const id = this.ids.get(write.sql) ?? pendingIds.get(write.sql);
      let head: string | number;
      if (id === undefined) {
        pendingIds.set(write.sql, this.texts.length + addedTexts.length);
        addedTexts.push(write.sql);
        head = write.sql;
      } else {
        head = id;
      }
      return write.params.length === 0 ? [head] : [head, write.params];
    });
    const json = Buffer.from(JSON.stringify(statements), "utf8");
    if (json.length > MAX_RECORD_PAYLOAD_BYTES) {
      throw new QlrError(
        "limit_exceeded",
        `A transaction's journal record would take ${json.length} bytes; the limit is ${MAX_RECORD_PAYLOAD_BYTES}.`,
      );
    }
    return {
      bytes: encodeRecordBytes(sequence, compressPayload(json, this.window)),
      adoption: { addedTexts, window: nextWindow(this.window, json) },
    };
  }

  adopt(adoption: RecordAdoption): void {
    this.adoptTexts(adoption.addedTexts);
    this.window = adoption.window;
  }

  reset(): void {
    this.ids.clear();
    this.texts.length = 0;
    this.window = Buffer.alloc(0);
  }

  private adoptTexts(addedTexts: readonly string[]): void {
    for (const text of addedTexts) {
      this.ids.set(text, this.texts.length);
      this.texts.push(text);
    }
  }

  /** Resolves one record's statements, defining new texts as the writer did. */
  decodeStatements(payload: Uint8Array, offset: number): RecordedWrite[] {
    let json = Buffer.from(payload.buffer, payload.byteOffset, payload.length);
    if (json[0] === COMPRESSED_PAYLOAD_MARK) {
      try {
        json = inflateRawSync(json.subarray(1), {
          maxOutputLength: MAX_RECORD_PAYLOAD_BYTES,
          ...(this.window.length > 0 ? { dictionary: this.window } : {}),
        });
      } catch (error) {
        throw corrupt(offset, "its compressed payload does not inflate", error);
      }
    }
    this.window = nextWindow(this.window, json);
    let parsed: unknown;
    try {
      parsed = JSON.parse(json.toString("utf8"));
    } catch (error) {
      throw corrupt(offset, "its payload is not valid JSON", error);
    }
    if (!Array.isArray(parsed)) throw corrupt(offset, "its payload is not a list of statements");
    return parsed.map((entry: unknown) => {
      if (!Array.isArray(entry) || entry.length < 1 || entry.length > 2)
        throw corrupt(offset, "a statement entry is malformed");
      const [head, params = []] = entry as [unknown, unknown?];
      if (!Array.isArray(params) || !params.every(isSqlParam))
        throw corrupt(offset, "a statement's parameters are malformed");
      let sql: string;
      if (typeof head === "string") {
        this.adoptTexts([head]);
        sql = head;
      } else if (typeof head === "number" && this.texts[head] !== undefined) {
        sql = this.texts[head];
      } else {
        throw corrupt(offset, `it refers to an unknown statement id ${String(head)}`);
      }
      return { sql, params };
    });
  }
}

function isSqlParam(value: unknown): value is SqlParam {
  return value === null || typeof value === "string" || typeof value === "number";
}

function encodeRecordBytes(sequence: number, payload: Buffer): Buffer {
  const bytes = Buffer.allocUnsafe(RECORD_HEADER_BYTES + payload.length);
  JOURNAL_MAGIC.copy(bytes, 0);
  bytes.writeUInt32LE(payload.length, 4);
  bytes.writeBigUInt64LE(BigInt(sequence), 8);
  bytes.writeUInt32LE(crc32Update(crc32(bytes.subarray(4, 16)), payload), 16);
  payload.copy(bytes, RECORD_HEADER_BYTES);
  return bytes;
}

export interface ParsedRecord {
  readonly offset: number;
  readonly endOffset: number;
  readonly sequence: number;
  readonly payload: Uint8Array;
}

type ParseOutcome =
  | { readonly valid: true; readonly record: ParsedRecord }
  | { readonly valid: false; readonly reason: string };

/** Validates the record starting at `offset` without interpreting its payload. */
export function parseRecordAt(bytes: Buffer, offset: number): ParseOutcome {
  if (bytes.length - offset < RECORD_HEADER_BYTES)
    return { valid: false, reason: "its header is incomplete" };
  if (!bytes.subarray(offset, offset + 4).equals(JOURNAL_MAGIC))
    return { valid: false, reason: "it does not start with the record magic" };
  const payloadBytes = bytes.readUInt32LE(offset + 4);
  if (payloadBytes > MAX_RECORD_PAYLOAD_BYTES)
    return { valid: false, reason: `its declared length ${payloadBytes} is over the limit` };
  const endOffset = offset + RECORD_HEADER_BYTES + payloadBytes;
  if (endOffset > bytes.length)
    return { valid: false, reason: "its declared length runs past the end of the file" };
  const payload = bytes.subarray(offset + RECORD_HEADER_BYTES, endOffset);
  const expectedCrc = crc32Update(crc32(bytes.subarray(offset + 4, offset + 16)), payload);
  if (bytes.readUInt32LE(offset + 16) !== expectedCrc)
    return { valid: false, reason: "its checksum does not match" };
  const sequence = bytes.readBigUInt64LE(offset + 8);
  if (sequence < 1n || sequence > BigInt(Number.MAX_SAFE_INTEGER))
    return { valid: false, reason: "its sequence number is out of range" };
  return { valid: true, record: { offset, endOffset, sequence: Number(sequence), payload } };
}

export interface JournalScan {
  /** Bytes from the start of the file that hold valid records. */
  readonly validBytes: number;
  /** Bytes after `validBytes` that form a torn tail (0 when the journal ends cleanly). */
  readonly tornTailBytes: number;
}

/**
 * Reads up to `length` bytes of the journal at `position` (fewer only where the journal ends).
 * Lets one scan serve a journal in memory and one read from its file record by record.
 */
export type JournalReader = (position: number, length: number) => Buffer;

/**
 * Walks the journal, handing each valid record to `onRecord` in order, and applies the torn
 * tail rule (see the top of this file). Throws `storage_corrupt` for damage before the tail.
 */
export function scanJournal(bytes: Buffer, onRecord: (record: ParsedRecord) => void): JournalScan {
  return scanJournalWith(
    bytes.length,
    (position, length) => bytes.subarray(position, position + length),
    onRecord,
  );
}

/**
 * The same scan over a journal file read one record at a time through `read`, so opening a
 * store holds one record (at most MAX_RECORD_PAYLOAD_BYTES) rather than the whole journal,
 * which may grow to the size of the snapshot before a checkpoint. Only after a bad record does
 * it read the rest of the file at once, to tell a torn tail from damage.
 */
export function scanJournalFile(
  read: JournalReader,
  sizeBytes: number,
  onRecord: (record: ParsedRecord) => void,
): JournalScan {
  return scanJournalWith(sizeBytes, read, onRecord);
}

function scanJournalWith(
  sizeBytes: number,
  read: JournalReader,
  onRecord: (record: ParsedRecord) => void,
): JournalScan {
  let offset = 0;
  // Bounded by the journal's size: each iteration consumes one record of at least a header, or returns.
  while (offset < sizeBytes) {
    const outcome = readRecord(read, sizeBytes, offset);
    if (!outcome.valid) {
      const rest = read(offset, sizeBytes - offset);
      const laterRecordOffset = findValidRecordAfter(rest, 1);
      if (laterRecordOffset !== undefined) {
        throw corrupt(
          offset,
          `${outcome.reason}, yet a valid record follows at byte offset ${offset + laterRecordOffset}`,
        );
      }
      return { validBytes: offset, tornTailBytes: sizeBytes - offset };
    }
    onRecord(outcome.record);
    offset = outcome.record.endOffset;
  }
  return { validBytes: offset, tornTailBytes: 0 };
}

/** Reads and checks the record at `offset`: its header first, then exactly the bytes it declares. */
function readRecord(read: JournalReader, sizeBytes: number, offset: number): ParseOutcome {
  const header = read(offset, Math.min(RECORD_HEADER_BYTES, sizeBytes - offset));
  const headerOutcome = parseRecordAt(header, 0);
  // With the header alone, every check but "runs past the end" (and the checksum) has its final answer.
  if (
    header.length < RECORD_HEADER_BYTES ||
    !header.subarray(0, 4).equals(JOURNAL_MAGIC) ||
    header.readUInt32LE(4) > MAX_RECORD_PAYLOAD_BYTES
  )
    return headerOutcome;
  const endOffset = offset + RECORD_HEADER_BYTES + header.readUInt32LE(4);
  if (endOffset > sizeBytes)
    return { valid: false, reason: "its declared length runs past the end of the file" };
  const outcome = parseRecordAt(read(offset, endOffset - offset), 0);
  if (!outcome.valid) return outcome;
  return { valid: true, record: { ...outcome.record, offset, endOffset } };
}

function findValidRecordAfter(bytes: Buffer, from: number): number | undefined {
  // Bounded by the file length: each iteration moves the search start forward by at least one byte.
  for (
    let candidate = bytes.indexOf(JOURNAL_MAGIC, from);
    candidate >= 0;
    candidate = bytes.indexOf(JOURNAL_MAGIC, candidate + 1)
  ) {
    if (parseRecordAt(bytes, candidate).valid) return candidate;
  }
  return undefined;
}

export function corrupt(offset: number, reason: string, cause?: unknown): QlrError {
  return new QlrError(
    "storage_corrupt",
    `The sqljs-file journal is damaged at byte offset ${offset}: ${reason}.`,
    cause === undefined ? undefined : { cause },
  );
}
