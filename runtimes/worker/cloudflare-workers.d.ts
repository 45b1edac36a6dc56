/**
 * The `cloudflare:workers` module for the type checker, described with the module form of
 * @cloudflare/workers-types (`index.ts`: exported types, no globals). The ambient form
 * (`/// <reference types="@cloudflare/workers-types" />`) would pour workerd's globals
 * (`Element`, `Request`, `Response`, …) into the one root program that also type-checks the
 * Node runtime and the browser's DOM code, and they clash; so the Worker's files import the
 * Cloudflare types they need from the module form and this file maps the one runtime module
 * they import. workerd provides the real module at run time.
 */
declare module "cloudflare:workers" {
  import type { CloudflareWorkersModule } from "@cloudflare/workers-types/index.ts";

  export type DurableObject<Env = unknown, Props = object> = CloudflareWorkersModule.DurableObject<
    Env,
    Props
  >;
  export const DurableObject: typeof CloudflareWorkersModule.DurableObject;
}
