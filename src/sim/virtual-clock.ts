import type { Clock } from "../ports.ts";

/** Virtual time for simulation: it moves only when told to, and may be stepped back to test fail-closed behaviour. */
export class VirtualClock implements Clock {
  private currentMs: number;

  constructor(startMs: number) {
    this.currentMs = startMs;
  }

  nowMs(): number {
    return this.currentMs;
  }

  advance(ms: number): void {
    this.currentMs += ms;
  }

  set(ms: number): void {
    this.currentMs = ms;
  }
}
