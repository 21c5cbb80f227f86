/**
 * Wires passive health into the request path without touching the dispatchers: a Dispatcher wrapper
 * that, for every request,
 *   1. calls `health.refresh(now)` before the inner dispatcher selects (so an open breaker whose
 *      cool-down has elapsed is selectable again, half-open, for this very request), and
 *   2. records exactly one outcome for the dispatched worker when the session finishes the Dispatch
 *      (`outcomeOfEnd`: 5xx -> failure, no response headers -> failure, < 500 -> success, otherwise
 *      neutral), however many times finish() is called.
 * Prefill legs are recorded where they end (PdObserver.prefillEnded -> `outcomeOfPrefill`).
 */
import type { Cancellation, Dispatch, Dispatcher, RequestEnd, RouteRequest } from '../extproc/dispatch.js';
import type { Worker } from '../workers/worker.js';
import { outcomeOfEnd, type HealthOutcome } from './worker-health.js';

export interface PassiveHealth {
  refresh(now: number): void;
  recordOutcome(worker: Worker, outcome: HealthOutcome, now: number): void;
}

export function withHealth(inner: Dispatcher, health: PassiveHealth, clock: () => number): Dispatcher {
  return {
    dispatch(req: RouteRequest, cancel: Cancellation): Dispatch | Promise<Dispatch> {
      health.refresh(clock());
      const d = inner.dispatch(req, cancel);
      return d instanceof Promise ? d.then((x) => recording(x, health, clock)) : recording(d, health, clock);
    },
  };
}

function recording(d: Dispatch, health: PassiveHealth, clock: () => number): Dispatch {
  let recorded = false;
  return {
    ...d,
    finish(end: RequestEnd): void {
      d.finish(end);
      if (recorded) return;
      recorded = true;
      health.recordOutcome(d.worker, outcomeOfEnd(end), clock());
    },
  };
}

/**
 * The health outcome of a prefill leg from PdObserver.prefillEnded's outcome
 * ('ok' | PrefillError kind). `status` (when the hook passes it) keeps a 4xx - the client's request
 * was bad - from counting against the worker; without it every 'status' error counts as a failure.
 */
export function outcomeOfPrefill(kind: string, status?: number): HealthOutcome {
  if (kind === 'ok') return 'success';
  if (kind === 'aborted') return 'cancelled';
  if (kind === 'status' && status !== undefined && status < 500) return 'success';
  return 'prefill_failed';
}
