/**
 * The Cloudflare Worker entry. Every request goes to the one coordinator Durable Object,
 * which owns the store and serves the shared Hono app; the cron trigger runs one bounded
 * cadence cycle there. The Worker itself holds no state.
 */
import { COORDINATOR_NAME, CoordinatorObject, type WorkerEnv } from "./coordinator-object.ts";
import type {
  DurableObjectStub,
  ExportedHandler,
  ScheduledController,
  WorkerRequest,
  WorkerResponse,
} from "./types.ts";

export { CoordinatorObject };
export type { WorkerEnv };

function coordinator(env: WorkerEnv): DurableObjectStub<CoordinatorObject> {
  return env.COORDINATOR.get(env.COORDINATOR.idFromName(COORDINATOR_NAME));
}

export default {
  fetch(request: WorkerRequest, env: WorkerEnv): Promise<WorkerResponse> {
    return coordinator(env).fetch(request);
  },

  /** The cron trigger: one cycle per invocation; stage errors are isolated in the report and logged. */
  async scheduled(controller: ScheduledController, env: WorkerEnv): Promise<void> {
    const report = await coordinator(env).tick();
    const errors = report.stages.flatMap((stage) =>
      stage.errors.map((error) => ({ stage: stage.name, ...error })),
    );
    const processed = Object.fromEntries(
      report.stages.map((stage) => [stage.name, stage.processed]),
    );
    console.log(
      JSON.stringify({
        cron: controller.cron,
        scheduledTime: controller.scheduledTime,
        profile: report.profile,
        processed,
        more: report.more,
        errors,
      }),
    );
  },
} satisfies ExportedHandler<WorkerEnv>;
