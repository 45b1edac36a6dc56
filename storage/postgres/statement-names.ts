import type { ClientBase } from "pg";

/** Names per connection at most; the texts beyond it go unnamed (parsed each time). */
export const MAX_NAMED_STATEMENTS = 256;
/** Text bytes of the named statements per connection at most (the server keeps each plan). */
export const MAX_NAMED_STATEMENT_CHARS = 512 * 1024;
/** A text is named only from its second use on a connection: one-off texts take no slot. */
const USES_BEFORE_NAMING = 2;

/**
 * The statement names of one connection: a text gets a name (`qlr_<n>`, never reused on the
 * connection) from its second use, while the connection's names and their text stay within
 * the bounds. pg then sends Parse only the first time a name is used on the connection.
 *
 * A failed statement whose Parse went out with it leaves the name in doubt: pg marks a name
 * parsed at the first ParseComplete of the exchange, which with `beginThen` is BEGIN's, so a
 * statement the server skipped could look parsed. Such a text loses its name (pg forgets it
 * too) and gets a new one on a later use, still counted in the bound, so a wrong belief can
 * never send a Bind to a statement that does not exist.
 */
/**
 * `IN ($1, …)` or `= ANY(CAST($1 AS TEXT[]))`: a statement that looks rows up by a list of
 * keys; `UPDATE … FROM (VALUES …)` or `UPDATE … FROM unnest(…)`: a multi-row UPDATE, which joins
 * its list of rows to the table by key. (An INSERT from `unnest` joins nothing: its one text per
 * column list is named.)
 */
const KEY_LIST_LOOKUP =
  /\bIN \(\$\d|= ANY\(CAST\(\$\d+ AS TEXT\[\]\)\)|\bFROM \(VALUES \(|^UPDATE [^;]* FROM unnest\(/;

export class StatementNames {
  private readonly names = new Map<string, string>();
  private readonly uses = new Map<string, number>();
  private issued = 0;
  private namedChars = 0;

  constructor(private readonly parsed: Record<string, string | undefined>) {}

  /** The name to send `text` under, or undefined to send it unnamed. */
  nameFor(text: string): string | undefined {
    const known = this.names.get(text);
    if (known !== undefined) return known;
    // Several statements in one text go only by the simple protocol, which has no names.
    if (text.includes(";")) return undefined;
    // A lookup by a list of keys is planned at each use. Named, PostgreSQL may switch it to a
    // generic plan chosen with the statistics of that moment (a small table: a sequential scan)
    // and keep it as the table grows: the cluster's ordinary runs measured 2x slower in the
    // windows where that happened (docs/PERFORMANCE.md, "PostgreSQL: the same code, four
    // rounds, and generic plans"). The multi-row UPDATEs' generic plans, made while a table was
    // small, hash-joined their rows to a sequential scan of the whole table at every use
    // (section "PostgreSQL's server time per unit"); planned at each use, they probe by key.
    if (KEY_LIST_LOOKUP.test(text)) return undefined;
    if (this.issued >= MAX_NAMED_STATEMENTS) return undefined;
    if (this.namedChars + text.length > MAX_NAMED_STATEMENT_CHARS) return undefined;
    const uses = (this.uses.get(text) ?? 0) + 1;
    if (uses < USES_BEFORE_NAMING) {
      // Counting uses is bounded like the names: past the bound, nothing new is remembered.
      if (this.uses.size < MAX_NAMED_STATEMENTS) this.uses.set(text, uses);
      return undefined;
    }
    this.uses.delete(text);
    const name = `qlr_${this.issued}`;
    this.issued += 1;
    this.namedChars += text.length;
    this.names.set(text, name);
    return name;
  }

  /** Sends `text` through `run` under its name (if any); forgets a name whose Parse failed. */
  async send<T>(text: string, run: (name: string | undefined) => Promise<T>): Promise<T> {
    const name = this.nameFor(text);
    const parsedBefore = name !== undefined && this.parsed[name] !== undefined;
    try {
      return await run(name);
    } catch (error) {
      if (name !== undefined && !parsedBefore) {
        this.names.delete(text);
        delete this.parsed[name];
      }
      throw error;
    }
  }

  /** How many names this connection has issued (tests). */
  get issuedNames(): number {
    return this.issued;
  }
}

const statementNames = new WeakMap<ClientBase, StatementNames>();

/** The names of `client`'s connection, made on first use (a new connection starts empty). */
export function statementNamesOf(client: ClientBase): StatementNames {
  let names = statementNames.get(client);
  if (names === undefined) {
    const connection = (
      client as unknown as { connection: { parsedStatements: Record<string, string | undefined> } }
    ).connection;
    names = new StatementNames(connection.parsedStatements);
    statementNames.set(client, names);
  }
  return names;
}
