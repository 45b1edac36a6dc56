/**
 * The Cloudflare types the Worker runtime uses, from the module form of
 * @cloudflare/workers-types (see cloudflare-workers.d.ts for why not the global form). They
 * describe workerd's `Request` and `Response`, which are the same objects the shared Hono app
 * handles under the web-standard types of the root program.
 */
export type {
  DurableObjectNamespace,
  DurableObjectState,
  DurableObjectStub,
  ExecutionContext,
  ExportedHandler,
  Request as WorkerRequest,
  Response as WorkerResponse,
  ScheduledController,
} from "@cloudflare/workers-types/index.ts";
