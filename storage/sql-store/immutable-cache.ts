/** How many immutable bodies (plans, receipts, task definitions) a store keeps parsed. */
export const IMMUTABLE_CACHE_ENTRIES = 256;

function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null && !Object.isFrozen(value)) {
    Object.freeze(value);
    for (const member of Object.values(value as Record<string, unknown>)) deepFreeze(member);
  }
  return value;
}

/**
 * Parsed immutable bodies keyed by their digest (or by a key that is itself immutable, like a
 * reconciliation digest and a task name). Rows behind these keys are never updated, so the
 * cache can only ever hold the one body a key names; entries are frozen, so the core can
 * remember which objects it already verified. Bounded: least recently used entries go first.
 */
export class ImmutableCache {
  private readonly entries = new Map<string, unknown>();
  get<T>(key: string): T | undefined {
    const value = this.entries.get(key);
    if (value !== undefined) {
      this.entries.delete(key);
      this.entries.set(key, value);
    }
    return value as T | undefined;
  }
  set<T>(key: string, value: T): T {
    this.entries.set(key, deepFreeze(value));
    if (this.entries.size > IMMUTABLE_CACHE_ENTRIES) {
      const oldest = this.entries.keys().next();
      if (oldest.done !== true) this.entries.delete(oldest.value);
    }
    return value;
  }
}
