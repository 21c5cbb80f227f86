/**
 * The models of this router's requests in flight on each worker (keyed by the Worker object, so per
 * role and registration generation), for LoRA affinity (routing/lora-affinity.ts): a request sent
 * for an adapter counts as that adapter being active on its worker from the moment it is routed until
 * it ends, without waiting for the worker's next `/metrics` sample to show it.
 *
 * `withModelInFlight` adds a request's model when its dispatch is made and removes it once, when the
 * dispatch finishes (finish is called exactly once per request, however it ends; the removal is
 * idempotent anyway); `withPrefillModel` does the same on the prefill worker for the P/D prefill legs
 * the router runs itself. Counts that reach 0 are deleted, so the maps hold only what is in flight.
 *
 * The class is a pure data structure (no timers, metrics or logging).
 */
import type { Cancellation, Dispatch, Dispatcher, RouteRequest } from '../extproc/dispatch.js';
import type { RequestEnd } from '../request/request-end.js';
import type { Worker } from '../workers/worker.js';

const NONE: ReadonlyMap<string, number> = new Map();

export class ModelInFlight {
  private readonly byWorker = new WeakMap<Worker, Map<string, number>>();

  add(worker: Worker, model: string): void {
    let m = this.byWorker.get(worker);
    if (m === undefined) {
      m = new Map();
      this.byWorker.set(worker, m);
    }
    m.set(model, (m.get(model) ?? 0) + 1);
  }

  done(worker: Worker, model: string): void {
    const m = this.byWorker.get(worker);
    const n = m?.get(model);
    if (m === undefined || n === undefined) return;
    if (n <= 1) m.delete(model);
    else m.set(model, n - 1);
  }

  of(worker: Worker): ReadonlyMap<string, number> {
    return this.byWorker.get(worker) ?? NONE;
  }
}

/**
 * The P/D prefill legs the router runs itself (pd-dispatcher.ts `prefillStarted`): the model counts on
 * the prefill worker from the leg's start to its end, around `inner`'s own start/end hook.
 */
export function withPrefillModel<D>(
  inner: (
    worker: Worker,
    decision: D,
    model: string,
  ) => ((ok: boolean, durationMs: number) => void) | undefined,
  models: ModelInFlight,
): (worker: Worker, decision: D, model: string) => (ok: boolean, durationMs: number) => void {
  return (worker, decision, model) => {
    const ended = inner(worker, decision, model);
    if (model !== '') models.add(worker, model);
    let counted = model !== '';
    return (ok, durationMs) => {
      if (counted) {
        counted = false;
        models.done(worker, model);
      }
      ended?.(ok, durationMs);
    };
  };
}

/** Counts each routed inference request's model on its worker until the request ends. */
export function withModelInFlight(inner: Dispatcher, models: ModelInFlight): Dispatcher {
  const track = (d: Dispatch, req: RouteRequest): Dispatch => {
    const model = req.inference?.model;
    if (model === undefined || model === '') return d;
    const worker = d.worker;
    models.add(worker, model);
    let counted = true;
    return {
      ...d,
      finish(end: RequestEnd): void {
        if (counted) {
          counted = false;
          models.done(worker, model);
        }
        d.finish(end);
      },
    };
  };
  return {
    dispatch(req: RouteRequest, cancel: Cancellation): Dispatch | Promise<Dispatch> {
      const d = inner.dispatch(req, cancel);
      return d instanceof Promise ? d.then((x) => track(x, req)) : track(d, req);
    },
    adopt(req: RouteRequest, from: Dispatch, endpoint: string): Dispatch | undefined {
      const d = inner.adopt?.(req, from, endpoint);
      return d && track(d, req);
    },
  };
}
