/**
 * Wires passive health into the request path without touching the dispatchers: a Dispatcher wrapper
 * that, for every request,
 *   1. calls `health.refresh(now)` before the inner dispatcher selects (so an open breaker whose
 *      cool-down has elapsed is selectable again, half-open, for this very request), and
 *   2. records exactly one outcome for the dispatched worker when the session finishes the Dispatch
 *      (request/request-end.ts `healthOutcome`: 5xx -> failure, < 500 -> success, no response
 *      headers and cancellations -> neutral), however many times finish() is called.
 * Prefill legs are recorded where they end (PdObserver.prefillEnded -> `prefillHealthOutcome`).
 */
import type { Cancellation, Dispatch, Dispatcher, RequestEnd, RouteRequest } from '../extproc/dispatch.js';
import type { Worker } from '../workers/worker.js';
import { healthOutcome, type HealthOutcome } from '../request/request-end.js';

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
    adopt(req: RouteRequest, from: Dispatch, endpoint: string): Dispatch | undefined {
      const d = inner.adopt?.(req, from, endpoint);
      return d && recording(d, health, clock);
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
      health.recordOutcome(d.worker, healthOutcome(end), clock());
    },
  };
}
