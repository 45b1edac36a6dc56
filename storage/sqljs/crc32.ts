/**
 * CRC-32 (IEEE 802.3, the zlib polynomial) over bytes. `zlib.crc32` exists only from Node
 * 20.15 and 22.2 while the package promises any Node 20, and a table-driven loop is fast enough
 * for journal records of a few hundred bytes and for a snapshot of a few MiB at checkpoint time.
 */
const CRC32_TABLE = buildTable();

function buildTable(): Uint32Array {
  const table = new Uint32Array(256);
  for (let index = 0; index < 256; index += 1) {
    let value = index;
    for (let bit = 0; bit < 8; bit += 1) {
      value = value & 1 ? 0xedb88320 ^ (value >>> 1) : value >>> 1;
    }
    table[index] = value >>> 0;
  }
  return table;
}

/** Continues a running CRC over `bytes`; start with `crc32Update(0, …)` and chain the result. */
export function crc32Update(crc: number, bytes: Uint8Array): number {
  let value = ~crc >>> 0;
  for (let index = 0; index < bytes.length; index += 1) {
    // Both indexes are in range by construction; the `?? 0` only satisfies noUncheckedIndexedAccess.
    value = (CRC32_TABLE[(value ^ (bytes[index] ?? 0)) & 0xff] ?? 0) ^ (value >>> 8);
  }
  return ~value >>> 0;
}

export function crc32(bytes: Uint8Array): number {
  return crc32Update(0, bytes);
}
