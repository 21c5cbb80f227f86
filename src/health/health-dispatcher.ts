/**
 * Wires passive health into the request path without touching the dispatchers: a Dispatcher wrapper
 * that, for every request,
 *   1. calls `health.refresh(now)` before the inner dispatcher selects (so an open breaker whose
 *      cool-down has elapsed is selectable again, half-open, for this very request), and
 *   2. records exactly one outcome for the dispatched worker: at its response headers when they
 *      come (their status decides: 5xx -> failure, < 500 -> success, as Envoy's outlier detection
 *      counts them), else when the session finishes the Dispatch (request/request-end.ts
 *      `healthOutcome`: no response headers and cancellations -> neutral), however many times
 *      finish() is called. Not at the end of the stream: a half-open breaker lets one probe through
 *      at a time and closes after `cb-success-threshold` successes, so with generations of minutes
 *      a recovered worker took minutes of single probes (one per probe timeout) to get its share of
 *      traffic back, where the first 200 headers already say it serves.
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
  const record = (outcome: HealthOutcome): void => {
    if (recorded) return;
    recorded = true;
    health.recordOutcome(d.worker, outcome, clock());
  };
  return {
    ...d,
    onResponseStart(status: number, bodyWatched: boolean): void {
      d.onResponseStart?.(status, bodyWatched);
      record(status >= 500 ? 'server_error' : 'success');
    },
    finish(end: RequestEnd): void {
      d.finish(end);
      record(healthOutcome(end));
    },
  };
}
