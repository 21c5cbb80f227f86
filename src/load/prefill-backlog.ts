/**
 * The prefill work this router has queued on each worker and not yet seen finish: per worker, the
 * requests it routed there whose first token has not arrived, with the prompt tokens each must still
 * prefill (the uncached tokens the cost model predicted). Pure: time passed in; no timers, metrics or
 * logging. Keyed by the Worker object, so it is per role and registration generation.
 *
 * Why: a request's time to first token on a worker is, above all, the prefill compute queued ahead of
 * it (vLLM schedules waiting prefills within a per-step token budget; the simulator's prefill lanes
 * likewise), and that depends on how many tokens are queued, not on how many requests: ten cache hits
 * ahead cost less than one 8k-token miss. A request count cannot tell the two apart, so a cost model
 * built on counts alone either piles onto cached workers or gives up affinity. The router knows every
 * queued prefill it caused, so the cost model adds those tokens (times the learned per-token cost) to
 * the request's own uncached tokens, and counts the rest of the load (requests decoding, traffic from
 * elsewhere) per request.
 *
 * An entry ends at the first response byte of a streamed response (`done`), at the end of the request
 * (`done` again: idempotent), or, for responses that reveal no first token (non-streamed, or a
 * streamed body the router skipped), when its deadline passes (the cost model's predicted end of its
 * prefill: timing-dispatcher.ts): expired entries are dropped on read. Reads are O(entries on that worker), which the in-flight count bounds.
 */
import type { Worker } from '../workers/worker.js';

export interface BacklogEntry {
  readonly tokens: number;
  readonly deadlineMs: number;
  /** The sequences the request runs (parallel sampling, batched prompts), >= 1. */
  readonly sequences: number;
}

export interface Backlog {
  /**
   * Requests whose prefill is queued or running, as vLLM's `num_requests_waiting` counts them: one
   * per sequence (a request with `n` = 4 is 4 engine requests waiting for their first token).
   */
  readonly requests: number;
  /** Their uncached prompt tokens. */
  readonly tokens: number;
}

const EMPTY: Backlog = Object.freeze({ requests: 0, tokens: 0 });

export class PrefillBacklog {
  private readonly entries = new WeakMap<Worker, Set<BacklogEntry>>();

  /** Records a routed request; returns the handle `done` takes. */
  add(worker: Worker, tokens: number, deadlineMs: number, sequences = 1): BacklogEntry {
    const entry: BacklogEntry = {
      tokens: Number.isFinite(tokens) ? Math.max(0, tokens) : 0,
      deadlineMs,
      sequences: Number.isInteger(sequences) && sequences >= 1 ? sequences : 1,
    };
    let set = this.entries.get(worker);
    if (set === undefined) {
      set = new Set();
      this.entries.set(worker, set);
    }
    set.add(entry);
    return entry;
  }

  /** The request's prefill finished (first token) or the request ended. Idempotent. */
  done(worker: Worker, entry: BacklogEntry): void {
    this.entries.get(worker)?.delete(entry);
  }

  /** What is queued on `worker` at `nowMs` (expired entries are dropped). */
  of(worker: Worker, nowMs: number): Backlog {
    const set = this.entries.get(worker);
    if (set === undefined || set.size === 0) return EMPTY;
    let requests = 0;
    let tokens = 0;
    for (const e of set) {
      if (e.deadlineMs <= nowMs) {
        set.delete(e);
        continue;
      }
      requests += e.sequences;
      tokens += e.tokens;
    }
    return { requests, tokens };
  }
}
