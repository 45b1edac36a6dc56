import { readFile } from "node:fs/promises";

/**
 * A task's `user:` as the ids the supervisor passes to spawn (setgid, then setuid, in the
 * child before exec). Names are looked up in /etc/passwd, the one account database every
 * Linux image has; a name that only NSS (LDAP, systemd-homed) knows must be given as a uid.
 */
export interface TaskAccount {
  readonly uid: number;
  readonly gid: number;
  /** The account's home directory, or null when the uid has no passwd entry. */
  readonly home: string | null;
}

const MAX_ID = 4_294_967_294;

function parseId(text: string): number | null {
  const value = Number(text);
  return /^[0-9]{1,10}$/.test(text) && Number.isSafeInteger(value) && value <= MAX_ID
    ? value
    : null;
}

interface PasswdEntry {
  readonly name: string;
  readonly uid: number;
  readonly gid: number;
  readonly home: string;
}

async function readPasswd(path: string): Promise<PasswdEntry[]> {
  const text = await readFile(path, "utf8");
  const entries: PasswdEntry[] = [];
  for (const line of text.split("\n")) {
    const [name, , uidText, gidText, , home] = line.split(":");
    if (name === undefined || uidText === undefined || gidText === undefined) continue;
    const uid = parseId(uidText);
    const gid = parseId(gidText);
    if (uid !== null && gid !== null) entries.push({ name, uid, gid, home: home ?? "/" });
  }
  return entries;
}

/** Resolves `name`, `uid` or `uid:gid`; the answer is a reason when it cannot be resolved. */
export async function resolveTaskUser(
  user: string,
  passwdPath = "/etc/passwd",
): Promise<TaskAccount | string> {
  const entries = await readPasswd(passwdPath).catch(() => [] as PasswdEntry[]);
  const [uidText, gidText] = user.split(":");
  const uid = uidText === undefined ? null : parseId(uidText);
  if (uid !== null) {
    const gid = gidText === undefined ? null : parseId(gidText);
    if (gidText !== undefined && gid === null)
      return `task user ${JSON.stringify(user)}: ${JSON.stringify(gidText)} is not a gid`;
    const entry = entries.find((candidate) => candidate.uid === uid);
    return { uid, gid: gid ?? entry?.gid ?? uid, home: entry?.home ?? null };
  }
  const entry = entries.find((candidate) => candidate.name === user);
  if (entry === undefined)
    return `task user ${JSON.stringify(user)} is not in ${passwdPath}; give its numeric uid instead`;
  return { uid: entry.uid, gid: entry.gid, home: entry.home };
}
