/** What every section of the Markdown report is made of: number formats, tables and shared columns. */
import type { LatencySummary } from "../common.ts";

export const fmt = (value: number | null | undefined, digits = 2): string =>
  value === null || value === undefined || !Number.isFinite(value) ? "–" : value.toFixed(digits);
export const int = (value: number | null | undefined): string =>
  value === null || value === undefined || !Number.isFinite(value)
    ? "–"
    : Math.round(value).toLocaleString("en-US");
export const kib = (bytes: number | null | undefined): string =>
  bytes === null || bytes === undefined ? "–" : `${(bytes / 1024).toFixed(2)} KiB`;
export const mib = (bytes: number | null | undefined): string =>
  bytes === null || bytes === undefined ? "–" : `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
/** A figure the result already gives in MiB. */
export const inMiB = (valueMiB: number | null | undefined): string => `${fmt(valueMiB, 1)} MiB`;
export const bold = (text: string): string => `**${text}**`;
export const code = (text: string): string => `\`${text}\``;

/** The 1-minute load average before → after a measurement. */
export const load = (value: { before: number; after: number } | undefined): string =>
  value === undefined ? "–" : `${fmt(value.before, 1)}→${fmt(value.after, 1)}`;

/** `value ÷ other` as a factor, "–" when either is missing or the divisor is 0. */
export const ratio = (value: number | undefined, other: number | undefined): string =>
  value === undefined || other === undefined || other === 0 ? "–" : `${fmt(value / other, 2)}×`;

export function table(header: readonly string[], rows: readonly (readonly string[])[]): string {
  const line = (cells: readonly string[]): string => `| ${cells.join(" | ")} |`;
  return [line(header), line(header.map(() => "---")), ...rows.map(line)].join("\n");
}

/** A table column: its header and the cell it shows for one row. */
export type Column<Row> = readonly [header: string, cell: (row: Row) => string];

/** A Markdown table with a line per row, each cell read from the row by its column. */
export function columnTable<Row>(columns: readonly Column<Row>[], rows: readonly Row[]): string {
  return table(
    columns.map(([header]) => header),
    rows.map((row) => columns.map(([, cell]) => cell(row))),
  );
}

/** Pushes a caption and the table of its rows; nothing at all when there are no rows. */
export function pushTable<Row>(
  parts: string[],
  caption: string,
  columns: readonly Column<Row>[],
  rows: readonly Row[],
): void {
  if (rows.length > 0) parts.push(caption, columnTable(columns, rows));
}

type Quantile = "p50" | "p95" | "p99" | "max";

/** A `<prefix><quantile> ms` column for each quantile given, with its number of decimals. */
export function latencyColumns<Row>(
  summary: (row: Row) => LatencySummary | null | undefined,
  decimals: Partial<Record<Quantile, number>>,
  prefix = "",
): Column<Row>[] {
  return (Object.entries(decimals) as [Quantile, number][]).map(([quantile, digits]) => [
    `${prefix}${quantile} ms`,
    (row) => fmt(summary(row)?.[`${quantile}Ms` as const], digits),
  ]);
}

/** A column per key of a group of figures in MiB, each `[header, key]`. */
export function inMiBColumns<Row, Key extends string>(
  figures: (row: Row) => Record<Key, number | null>,
  keys: readonly (readonly [header: string, key: Key])[],
): Column<Row>[] {
  return keys.map(([header, key]) => [header, (row) => inMiB(figures(row)[key])]);
}

export const STORE_COLUMN: Column<{ store: string }> = ["store", (result) => result.store];
export const WIDTH_COLUMN: Column<{ width: number }> = [
  "steps per run",
  (result) => String(result.width),
];
export const LOAD_COLUMN: Column<{ loadAverage1m?: { before: number; after: number } }> = [
  "load 1m",
  (result) => load(result.loadAverage1m),
];
export const SQL_COLUMN: Column<{ sql: string }> = [
  "statement (first 60 chars)",
  (entry) => code(entry.sql),
];
export const SAMPLED_COLUMNS: readonly Column<{ ms: number; share: number }>[] = [
  ["ms", (entry) => fmt(entry.ms, 1)],
  ["share", (entry) => `${fmt(entry.share, 1)} %`],
];

/** Mean timings of named parts, each with a note on what it times. */
export function timingTable(
  nameHeader: string,
  noteHeader: string,
  entries: readonly { name: string; meanMs: number; note: string }[],
): string {
  return columnTable(
    [
      [nameHeader, (entry) => entry.name],
      ["mean ms", (entry) => fmt(entry.meanMs, 4)],
      [noteHeader, (entry) => entry.note],
    ],
    entries,
  );
}

/** Rows and bytes of each table (with its indexes), and its bytes per unit of work. */
export function compositionTable<Share extends { table: string; rows: number; bytes: number }>(
  shares: readonly Share[],
  perUnitHeader: string,
  perUnit: (share: Share) => number,
): string {
  return columnTable<Share>(
    [
      ["table", (share) => share.table],
      ["rows", (share) => int(share.rows)],
      ["bytes", (share) => int(share.bytes)],
      [perUnitHeader, (share) => int(perUnit(share))],
    ],
    shares,
  );
}
