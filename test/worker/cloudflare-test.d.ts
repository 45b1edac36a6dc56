/**
 * The part of `cloudflare:test` (@cloudflare/vitest-pool-workers 0.15.1) these tests use,
 * typed with the module form of @cloudflare/workers-types. The package's own declaration
 * (`@cloudflare/vitest-pool-workers/types`) relies on workerd's global types, which clash
 * with the Node and DOM types of the one root program (see runtimes/worker/cloudflare-workers.d.ts).
 */
declare module "cloudflare:test" {
  import type {
    DurableObjectState,
    DurableObjectStub,
    Fetcher,
    ScheduledController,
  } from "@cloudflare/workers-types/index.ts";

  /** The bindings of the test Worker (wrangler.toml plus the test config's miniflare bindings). */
  export const env: unknown;
  /** The `main` Worker's default export as a service binding. */
  export const SELF: Fetcher;
  /** Runs `callback` inside the Durable Object `stub` points to (same isolate: values pass by reference). */
  export function runInDurableObject<O, R>(
    stub: DurableObjectStub<never>,
    callback: (instance: O, state: DurableObjectState) => R | Promise<R>,
  ): Promise<R>;
  /** Runs and removes the object's alarm if one is set; true when an alarm ran. */
  export function runDurableObjectAlarm(stub: DurableObjectStub<never>): Promise<boolean>;
  export function createScheduledController(options?: {
    scheduledTime?: Date | number;
    cron?: string;
  }): ScheduledController;
}
