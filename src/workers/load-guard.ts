/**
 * A load reservation on one Worker, released exactly once.
 *
 * JavaScript has no destructors, so every owner (an ext_proc session phase, a prefill leg) must
 * call release() on each way it can end; release() is idempotent so the owner can call it from
 * every end path without bookkeeping. `onRelease` lets the composition root observe releases
 * (metrics, health outcomes) without the guard knowing about them.
 */
import type { Worker } from './worker.js';

export type GuardOutcome = 'success' | 'error' | 'cancelled';

export class LoadGuard {
  private released = false;

  constructor(
    readonly worker: Worker,
    private readonly onRelease?: (guard: LoadGuard, outcome: GuardOutcome) => void,
  ) {
    worker.load += 1;
  }

  get isReleased(): boolean {
    return this.released;
  }

  /** Returns true if this call released the reservation, false if it was already released. */
  release(outcome: GuardOutcome = 'success'): boolean {
    if (this.released) return false;
    this.released = true;
    this.worker.load -= 1;
    this.worker.processed += 1;
    this.onRelease?.(this, outcome);
    return true;
  }
}
