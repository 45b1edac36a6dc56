/** Times as the CLI prints them: UTC, second precision; durations short and human. */
export function formatTime(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return "—";
  return new Date(ms)
    .toISOString()
    .replace("T", " ")
    .replace(/\.\d+Z$/, "Z");
}

export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms)) return "—";
  const sign = ms < 0 ? "-" : "";
  const abs = Math.abs(ms);
  if (abs < 1_000) return `${sign}${Math.round(abs)} ms`;
  if (abs < 60_000) return `${sign}${(abs / 1_000).toFixed(1)} s`;
  const minutes = Math.floor(abs / 60_000);
  if (minutes < 60) return `${sign}${minutes} min ${Math.floor((abs % 60_000) / 1_000)} s`;
  const hours = Math.floor(minutes / 60);
  if (hours < 48) return `${sign}${hours} h ${minutes % 60} min`;
  return `${sign}${Math.floor(hours / 24)} d ${hours % 24} h`;
}

/** "in 3 h 12 min" / "5 min 2 s ago". */
export function formatRelative(ms: number | null | undefined, nowMs: number): string {
  if (ms === null || ms === undefined) return "";
  const delta = ms - nowMs;
  return delta >= 0 ? `in ${formatDuration(delta)}` : `${formatDuration(-delta)} ago`;
}

export function shortDigest(digest: string | null | undefined): string {
  if (digest === null || digest === undefined) return "—";
  const hex = digest.replace(/^sha256:/, "");
  return `${hex.slice(0, 12)}…`;
}
