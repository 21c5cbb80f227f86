/**
 * A load reservation on one Worker, released exactly once.
 *
 * JavaScript has no destructors, so every owner (an ext_proc session phase, a prefill leg) must
 * call release() on each way it can end; release() is idempotent so the owner can call it from
 * every end path without bookkeeping. How the request ended is not the guard's business: the
 * session's end record (request/request-end.ts) carries it to metrics and health.
 *
 * A guard weighs the sequences its request makes the worker run (`weight`, default 1: a request
 * with parallel sampling `n`, or a batched completions prompt, runs several: InferenceRequest
 * `sequences`), so `worker.load` counts what vLLM's `num_requests_running` + `_waiting` count. It
 * still completes one request (`processed`).
 */
import type { Worker } from './worker.js';

export class LoadGuard {
  private released = false;
  readonly weight: number;

  constructor(
    readonly worker: Worker,
    weight = 1,
  ) {
    this.weight = guardWeight(weight);
    worker.load += this.weight;
  }

  get isReleased(): boolean {
    return this.released;
  }

  /** Returns true if this call released the reservation, false if it was already released. */
  release(): boolean {
    if (this.released) return false;
    this.released = true;
    this.worker.load -= this.weight;
    this.worker.processed += 1;
    return true;
  }
}

/** What a guard for `sequences` weighs: a whole number of at least 1. */
export function guardWeight(sequences: number | undefined): number {
  return sequences !== undefined && Number.isInteger(sequences) && sequences >= 1 ? sequences : 1;
}
