import { randomBytes } from "node:crypto";
import { link, mkdir, open, unlink } from "node:fs/promises";
import { constants } from "node:fs";
import { basename, dirname, join } from "node:path";
import { errorCode } from "../../../src/errors.ts";
import { fsyncDirectory } from "../../../storage/node/fsync-directory.ts";

/**
 * File systems that cannot hard-link (vfat and exfat on the USB disks routers often use, some
 * FUSE mounts) answer link(2) with one of these; there the write falls back to an exclusive
 * create of the final name, which keeps "never overwrite" but may leave a torn file after a
 * power loss (a reader then reports it invalid, and recovery fails closed).
 */
const LINK_UNSUPPORTED_CODES = new Set(["EPERM", "ENOTSUP", "EOPNOTSUPP", "ENOSYS", "EXDEV"]);

/**
 * Creates `finalPath` with `content` exactly once and durably. The bytes are written and
 * fsynced in a temporary file first, then hard-linked to the final name: link(2) is atomic and
 * fails with EEXIST instead of replacing, so a reader sees either no file or the whole file,
 * and an existing file is never overwritten. The directory is fsynced before returning, so
 * the caller may act on the file's existence (for the journal: spawn). Throws the file system
 * error unchanged (EEXIST when the name is taken); callers map it.
 */
export async function createFileExclusiveDurable(
  finalPath: string,
  tmpDir: string,
  content: string,
): Promise<void> {
  const tmpPath = join(
    tmpDir,
    `${basename(finalPath)}.${process.pid}.${randomBytes(6).toString("hex")}.tmp`,
  );
  await writeAndSync(tmpPath, content);
  try {
    await link(tmpPath, finalPath);
  } catch (error) {
    await unlink(tmpPath);
    if (!LINK_UNSUPPORTED_CODES.has(errorCode(error) ?? "")) throw error;
    await writeAndSync(finalPath, content);
    await fsyncDirectory(dirname(finalPath));
    return;
  }
  await fsyncDirectory(dirname(finalPath));
  // The temporary name is garbage once the link is durable; a crash right here leaves a stray
  // file in tmp/, never a second journal or receipt.
  await unlink(tmpPath);
}

async function writeAndSync(path: string, content: string): Promise<void> {
  const handle = await open(path, "wx", 0o600);
  try {
    await handle.writeFile(content, "utf8");
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** Creates the directories (owner-only: logs and stop intents may name secrets) and makes them durable. */
export async function ensureDurableDirectories(
  parent: string,
  children: readonly string[],
): Promise<void> {
  const created = await mkdir(parent, { recursive: true, mode: 0o700 });
  for (const child of children) await mkdir(child, { recursive: true, mode: 0o700 });
  await fsyncDirectory(parent);
  if (created !== undefined) await fsyncDirectory(dirname(created));
}

/**
 * Reads a small regular file without following a symbolic link (a planted link must not make
 * the runtime read or trust another file) and refuses anything above `maxBytes`. Returns null
 * when the file does not exist.
 */
export async function readSmallFile(
  path: string,
  maxBytes: number,
): Promise<{ ok: true; text: string } | { ok: false; reason: string } | null> {
  let handle;
  try {
    handle = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  } catch (error) {
    const code = errorCode(error);
    if (code === "ENOENT") return null;
    if (code === "ELOOP") return { ok: false, reason: "is a symbolic link" };
    throw error;
  }
  try {
    const stats = await handle.stat();
    if (!stats.isFile()) return { ok: false, reason: "is not a regular file" };
    if (stats.size > maxBytes)
      return { ok: false, reason: `is ${stats.size} bytes, more than the ${maxBytes} allowed` };
    const buffer = Buffer.alloc(maxBytes + 1);
    const { bytesRead } = await handle.read(buffer, 0, buffer.length, 0);
    if (bytesRead > maxBytes)
      return { ok: false, reason: `grew past the ${maxBytes} bytes allowed` };
    return { ok: true, text: buffer.subarray(0, bytesRead).toString("utf8") };
  } finally {
    await handle.close();
  }
}
