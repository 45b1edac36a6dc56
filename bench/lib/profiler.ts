/**
 * The V8 CPU profiler (the one behind `node --cpu-prof`) driven through the inspector, so a
 * profile covers exactly the timed section rather than start-up and setup as well.
 */
import { writeFileSync } from "node:fs";
import { Session } from "node:inspector";

export interface RunningProfile {
  /** Stops the profiler and writes the `.cpuprofile` (Chrome DevTools format) to `path`. */
  stop(path: string): Promise<void>;
}

function post<T>(session: Session, method: string, params?: object): Promise<T> {
  return new Promise((resolve, reject) => {
    session.post(method, params, (error, result) => {
      if (error !== null) reject(error);
      else resolve(result as T);
    });
  });
}

export async function startCpuProfile(intervalUs: number): Promise<RunningProfile> {
  const session = new Session();
  session.connect();
  await post(session, "Profiler.enable");
  await post(session, "Profiler.setSamplingInterval", { interval: intervalUs });
  await post(session, "Profiler.start");
  return {
    async stop(path: string): Promise<void> {
      const { profile } = await post<{ profile: unknown }>(session, "Profiler.stop");
      writeFileSync(path, JSON.stringify(profile));
      await post(session, "Profiler.disable");
      session.disconnect();
    },
  };
}
