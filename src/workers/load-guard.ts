/**
 * A load reservation on one Worker, released exactly once.
 *
 * JavaScript has no destructors, so every owner (an ext_proc session phase, a prefill leg) must
 * call release() on each way it can end; release() is idempotent so the owner can call it from
 * every end path without bookkeeping. How the request ended is not the guard's business: the
 * session's end record (request/request-end.ts) carries it to metrics and health.
 */
import type { Worker } from './worker.js';

export class LoadGuard {
  private released = false;

  constructor(readonly worker: Worker) {
    worker.load += 1;
  }

  get isReleased(): boolean {
    return this.released;
  }

  /** Returns true if this call released the reservation, false if it was already released. */
  release(): boolean {
    if (this.released) return false;
    this.released = true;
    this.worker.load -= 1;
    this.worker.processed += 1;
    return true;
  }
}
