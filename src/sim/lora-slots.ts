/**
 * The simulated engine's LoRA adapter slots, as vLLM schedules them (`--enable-lora --max-loras N`).
 *
 * A batch holds sequences of at most `maxLoras` distinct adapters. A sequence for an adapter may start
 * when that adapter already has sequences running, or when fewer than `maxLoras` adapters do;
 * otherwise it waits, and vLLM's scheduler passes over it to the requests behind it until a slot
 * frees (the engine's run queue skips it: run-queue.ts `eligible`). Starting an adapter that is not
 * loaded on the GPU costs a load (`loadMs`, added to its prefill by the simulator); the GPU keeps the
 * `maxLoras` most recently started adapters loaded, so an adapter that comes back soon after its
 * last sequence ended starts without one. Base-model sequences (no adapter) never wait for a slot.
 *
 * Pure data structure: no timers, metrics or logging.
 */
export class LoraSlots {
  private readonly running = new Map<string, number>();
  /** Adapters loaded on the GPU, least recently started first. */
  private readonly loaded = new Set<string>();
  /** Adapter loads so far (what a router's LoRA affinity saves). */
  loads = 0;

  constructor(readonly maxLoras: number) {
    if (!Number.isInteger(maxLoras) || maxLoras < 1) throw new RangeError('maxLoras must be an integer >= 1');
  }

  canStart(adapter: string | undefined): boolean {
    return adapter === undefined || this.running.has(adapter) || this.running.size < this.maxLoras;
  }

  /** A sequence of `adapter` starts (canStart was true); true when the adapter had to be loaded. */
  start(adapter: string | undefined): boolean {
    if (adapter === undefined) return false;
    this.running.set(adapter, (this.running.get(adapter) ?? 0) + 1);
    const hit = this.loaded.delete(adapter);
    this.loaded.add(adapter);
    if (!hit) {
      this.loads += 1;
      for (const a of this.loaded) {
        if (this.loaded.size <= this.maxLoras) break;
        if (!this.running.has(a)) this.loaded.delete(a);
      }
    }
    return !hit;
  }

  /** A running sequence of `adapter` ended (finished or cancelled). */
  finish(adapter: string | undefined): void {
    if (adapter === undefined) return;
    const n = this.running.get(adapter) ?? 0;
    if (n <= 1) this.running.delete(adapter);
    else this.running.set(adapter, n - 1);
  }

  /** Adapters with sequences running, in the order they started. */
  runningAdapters(): string[] {
    return [...this.running.keys()];
  }
}
