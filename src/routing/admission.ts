/**
 * Admission: sheds a sheddable request while the workers it could go to are saturated, before any
 * worker is chosen or loaded (the endpoint picker's admission control). A request is sheddable when
 * the objective its `x-gateway-inference-objective` header names has a negative priority
 * (routing/objectives.ts); it is shed when every candidate worker of a pool it needs is saturated
 * (load/saturation.ts): the regular pool, or in P/D mode the decode pool and, for a request with a
 * prefill leg (pd-dispatcher.ts `needsPrefill`), the prefill pool. The client gets a JSON 429
 * (`pool_saturated`) naming its objective: it may retry later, and the requests that matter more
 * keep the room. Other requests, and every
 * request while some candidate has room, go to the wrapped dispatcher unchanged; so do requests with
 * no candidate at all, which get the router's own 503 there. The 429 carries `retry-after: 1`.
 *
 * The check reads the candidates the pools would offer this request (its model, the gateway's
 * subset): a sheddable request for a model whose workers are all busy is shed even if other models'
 * workers idle, as it could not go there anyway.
 */
import type { Cancellation, Dispatch, Dispatcher, RouteRequest } from '../extproc/dispatch.js';
import { RouterError } from '../request/router-error.js';
import type { WorkerPool } from '../workers/worker-pool.js';
import type { Worker } from '../workers/worker.js';
import { OBJECTIVE_HEADER, type ObjectiveTable } from './objectives.js';
import { routingContext } from './pool-dispatcher.js';
import { candidates } from './selector.js';

export interface AdmissionOptions {
  readonly objectives: ObjectiveTable;
  /** The decode pool in P/D mode, else the regular pool. */
  readonly pool: WorkerPool;
  /** P/D mode: the prefill pool an inference request's prefill leg needs. */
  readonly prefillPool?: WorkerPool;
  /** P/D mode: whether the request gets a prefill leg (pd-dispatcher.ts `needsPrefill`); default: an inference request. */
  needsPrefill?(req: RouteRequest): boolean;
  /** Whether none of these workers has room (load/saturation.ts `saturated`). */
  saturated(workers: readonly Worker[]): boolean;
  /** A request was shed (metrics, logs). */
  shed?(objective: string, priority: number, role: string): void;
}

export function withAdmission(inner: Dispatcher, opts: AdmissionOptions): Dispatcher {
  // Nothing can be shed: no wrapper (a watched table may gain a sheddable objective at any time).
  if (!opts.objectives.sheds && !opts.objectives.watched) return inner;
  const admitted: Dispatcher = {
    dispatch(req: RouteRequest, cancel: Cancellation): Dispatch | Promise<Dispatch> {
      const objective = req.headers[OBJECTIVE_HEADER];
      if (objective !== undefined) {
        const priority = opts.objectives.priority(objective);
        if (priority < 0) {
          const role = saturatedRole(req, opts);
          if (role !== undefined) {
            opts.shed?.(objective, priority, role);
            throw poolSaturated(objective, priority, role);
          }
        }
      }
      return inner.dispatch(req, cancel);
    },
  };
  if (inner.adopt) {
    const adopt = inner.adopt.bind(inner);
    return { dispatch: admitted.dispatch, adopt };
  }
  return admitted;
}

/** The role of the first pool the request needs whose candidates are all saturated, if any. */
function saturatedRole(req: RouteRequest, opts: AdmissionOptions): string | undefined {
  const ctx = routingContext(req);
  const prefill = opts.prefillPool !== undefined && (opts.needsPrefill?.(req) ?? req.inference !== undefined);
  const pools = prefill ? [opts.prefillPool as WorkerPool, opts.pool] : [opts.pool];
  for (const pool of pools) {
    pool.reconcile();
    const workers = candidates(pool, ctx);
    // No candidate at all: the dispatcher's own 503 says why, not a 429.
    if (workers.length > 0 && opts.saturated(workers)) return pool.role;
  }
  return undefined;
}

/** Seconds a shed request's client is told to wait (`retry-after`): ten scrapes at the default interval. */
export const RETRY_AFTER_S = 1;

/** 429 for a sheddable request while every worker it could go to is saturated. */
export function poolSaturated(objective: string, priority: number, role: string): RouterError {
  return new RouterError(
    'pool_saturated',
    429,
    `Every ${role} worker this request could go to is saturated; requests of objective "${objective}" ` +
      `(priority ${priority}) are shed until one has room. Retry later.`,
    'rate_limit_error',
    // OpenAI's clients wait this long before they retry a 429 (theirs back off from 0.5 s without it).
    { 'retry-after': String(RETRY_AFTER_S) },
  );
}
