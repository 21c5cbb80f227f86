/**
 * vLLM's pause of generation (`POST /pause`, `POST /resume`, `GET /is_paused`; RL weight updates) as
 * the simulator's engine sees it: while paused, a generation request that arrives is held before it
 * reaches the engine (vLLM's paused scheduler keeps it waiting) and starts at `resume()`, in arrival
 * order. What happens to the requests already running (`mode`) is the simulator's to do
 * (simulator.ts: `abort` cuts them, `wait` answers the pause once they have ended, `keep` lets
 * them run on: an approximation of vLLM's freeze, which resumes them where they stood).
 */
export type PauseMode = 'abort' | 'wait' | 'keep';

export const PAUSE_MODES: ReadonlySet<string> = new Set<PauseMode>(['abort', 'wait', 'keep']);

export class PauseGate {
  private pausedNow = false;
  private readonly held = new Set<() => void>();

  get paused(): boolean {
    return this.pausedNow;
  }

  /** Requests held until resume() (vLLM counts them waiting). */
  get heldCount(): number {
    return this.held.size;
  }

  /**
   * Runs `start` now, or at resume() while paused. Returns what drops a held start (the client
   * went away); a no-op once it ran.
   */
  admit(start: () => void): () => void {
    if (!this.pausedNow) {
      start();
      return noop;
    }
    this.held.add(start);
    return () => this.held.delete(start);
  }

  pause(): void {
    this.pausedNow = true;
  }

  /** Not paused any more; the held requests start, oldest first. */
  resume(): void {
    this.pausedNow = false;
    const starts = [...this.held];
    this.held.clear();
    for (const start of starts) start();
  }

  /** Drops every held request (the simulator is closing). */
  clear(): void {
    this.held.clear();
  }
}

function noop(): void {}
